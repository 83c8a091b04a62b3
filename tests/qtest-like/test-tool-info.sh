#!/usr/bin/env bash
# mirror-tool info and map (issue 2): human and JSON output for raw images,
# `map --output=json` byte-for-byte equal to `qemu-img map --output=json`,
# and clear errors for missing files.
#
# qemu-img 7.2 rounds the size of a raw image up to a multiple of 512 and
# prints a zero-length extent for an empty image; mirror-tool reports the
# exact size.  So the byte-for-byte comparisons use sizes that are
# multiples of 512, and the odd sizes are checked on their own.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires python3 qemu-img truncate dd cmp stat

# expect_json FILE KEY=VALUE...: the top-level members of the JSON object
# in FILE have these values (VALUE is JSON text); one python3 run.
expect_json()
{
    local out
    out=$(python3 - "$@" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    got = json.dumps(d[k]) if k in d else "<missing>"
    if got != v:
        print('"%s" is %s, expected %s' % (k, got, v))
EOF
    ) && [ -z "$out" ] || fail "$1: ${out:-not valid JSON}"
}

size=$(to_bytes 10M)
make_sparse_image sparse.img 10M 192K:128K 7M:8K 9M:1M

# --- info, human ------------------------------------------------------
expect_ok "$T" info sparse.img
grep -q -x "image: sparse.img" "$last_out" || fail "no 'image:' line"
grep -q -x "file format: raw" "$last_out" || fail "no 'file format: raw'"
grep -q -x "virtual size: 10 MiB ($size bytes)" "$last_out" ||
    fail "no 'virtual size: 10 MiB ($size bytes)'"
grep -q "^disk size: [0-9.]* [KMG]iB$" "$last_out" ||
    fail "no 'disk size:' line with a size"
stderr_empty
ok "info (human): image, format raw, virtual size, disk size"

# --- info, JSON -----------------------------------------------------------
expect_ok "$T" info --output=json sparse.img
cp "$last_out" info.json
expect_json info.json format='"raw"' virtual-size="$size" \
    filename='"sparse.img"' dirty-flag=false \
    actual-size="$(allocated_bytes sparse.img)"
ok "info --output=json: parses; format, virtual-size, actual-size, filename"

# The same fields as qemu-img info reports.
qemu-img info --output=json -f raw sparse.img >qinfo.json ||
    fail "qemu-img info failed"
expect_json qinfo.json format='"raw"' virtual-size="$size" dirty-flag=false \
    actual-size="$(allocated_bytes sparse.img)"
ok "info --output=json agrees with qemu-img info"

# An odd size is reported exactly (not rounded up to 512).
make_sparse_image odd.img 100000 0:10000
expect_ok "$T" info --output=json odd.img
cp "$last_out" odd.json
expect_json odd.json virtual-size=100000
ok "info: a 100000-byte image has virtual-size 100000"

: >empty.img
expect_ok "$T" info --output=json empty.img
cp "$last_out" empty.json
expect_json empty.json virtual-size=0
ok "info: an empty image has virtual-size 0"

# --- map vs qemu-img map -------------------------------------------------
make_sparse_image m-sparse.img 10M 192K:128K 7M:8K 9M:1M
make_random_image m-full.img 3M
make_sparse_image m-holes.img 16M
make_sparse_image m-head.img 5M 0:4K
make_sparse_image m-tail.img 5M 4992K:128K
make_sparse_image m-odd.img 1000448 512:1536 700000:3000
make_random_image m-mixed.img 6M
write_zeroes m-mixed.img 1M:256K 3M:4K
truncate -s 8M m-mixed.img
make_sparse_image m-big.img 3G 5M:64K 2G:1M 3071M:1M
for f in m-sparse m-full m-holes m-head m-tail m-odd m-mixed m-big; do
    expect_ok "$T" map --output=json "$f.img"
    cp "$last_out" "$f.ours"
    stderr_empty
    run qemu-img map --output=json -f raw "$f.img"
    [ "$last_rc" = 0 ] || fail "qemu-img map failed"
    cp "$last_out" "$f.qemu"
    cmp -s "$f.ours" "$f.qemu" ||
        fail "$f: map --output=json differs from qemu-img map:
$(diff "$f.ours" "$f.qemu")"
    map_covers "$f.ours" "$(file_size "$f.img")"
    ok "map --output=json equals qemu-img map: $f"
done

# The JSON says what the image holds.
extent_is m-sparse.ours 0 192K hole
extent_is m-sparse.ours $((192 * 1024)) $((128 * 1024)) data
extent_is m-sparse.ours $((320 * 1024)) $((7 * 1024 * 1024 - 320 * 1024)) hole
extent_is m-sparse.ours $((9 * 1024 * 1024)) $((1024 * 1024)) data
extent_is m-holes.ours 0 $((16 * 1024 * 1024)) hole
extent_is m-full.ours 0 $((3 * 1024 * 1024)) data
ok "map --output=json: data and holes where they were written"

# --- map, human -------------------------------------------------------
expect_ok "$T" map m-sparse.img
cp "$last_out" human.ours
stderr_empty
for line in "0x30000 0x20000 0x30000 m-sparse.img" \
            "0x700000 0x2000 0x700000 m-sparse.img" \
            "0x900000 0x100000 0x900000 m-sparse.img"; do
    tr -s ' ' <human.ours | grep -q -x -F "$line" ||
        fail "human map lacks the extent '$line'"
done
[ "$(wc -l <human.ours)" = 4 ] ||
    fail "human map: expected a header and 3 extents"
head -n1 human.ours | grep -q "^Offset *Length *Mapped to *File$" ||
    fail "human map: no header"
qemu-img map -f raw m-sparse.img >human.qemu || fail "qemu-img map failed"
cmp -s human.ours human.qemu || fail "human map differs from qemu-img map:
$(diff human.ours human.qemu)"
ok "map (human) lists the data extents, like qemu-img map"

expect_ok "$T" map m-holes.img
[ "$(wc -l <"$last_out")" = 1 ] || fail "human map of an all-hole image"
ok "map (human) of an all-hole image prints only the header"

# --- sizes qemu-img rounds -------------------------------------------------
for sz in 1 100000 $((3 * 1024 * 1024 + 12345)); do
    make_sparse_image "o$sz.img" "$sz" 0:1
    expect_ok "$T" map --output=json "o$sz.img"
    cp "$last_out" "o$sz.json"
    map_covers "o$sz.json" "$sz"
    extent_is "o$sz.json" 0 1 data
done
ok "map --output=json of odd sizes ends exactly at the image size"

expect_ok "$T" map --output=json empty.img
[ "$(cat "$last_out")" = "[]" ] || fail "map of an empty image is not []"
ok "map --output=json of an empty image is []"

# --- errors -----------------------------------------------------------
for cmd in info map; do
    for out in "" --output=json; do
        expect_exit 2 "$T" $cmd $out missing.img
        stderr_one_line
        stderr_has "mirror-tool: " "'missing.img'" "No such file"
        stdout_empty
        assert_absent missing.img
        ok "$cmd ${out:+$out }on a missing file: exit 2 and a message"
    done
    mkdir -p dir.d
    expect_exit 2 "$T" $cmd dir.d
    stderr_one_line
    stderr_has "'dir.d' is a directory"
    ok "$cmd on a directory: exit 2 and a message"
    expect_exit 2 "$T" $cmd --output=xml sparse.img
    stderr_one_line
    stderr_has "'xml'"
    ok "$cmd --output=xml: exit 2 naming the value"
    expect_exit 2 "$T" $cmd -f foo sparse.img
    stderr_one_line
    stderr_has "'foo'"
    ok "$cmd -f foo: exit 2 naming the format"
    expect_exit 2 "$T" $cmd
    stderr_one_line
    stderr_has "expected one image"
    ok "$cmd without an image: exit 2"
    expect_exit 2 "$T" $cmd sparse.img odd.img
    stderr_one_line
    ok "$cmd with two images: exit 2"
done

exit 0
