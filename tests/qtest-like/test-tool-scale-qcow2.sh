#!/usr/bin/env bash
# qcow2-lite's cost follows the L2 tables of a thin image, not its
# virtual size (issue 21), counted, never timed: map and compare of a
# 1 TiB and a 64 TiB qcow2 image with the same three pieces of data make
# about as many write calls (the thread pool signals each request it
# completes with one; block status answered a run of L1 entries without
# an L2 table one cluster at a time, in 64 GiB requests: 3000 calls at
# 64 TiB), and check reads the same number of times.  The bytes are
# checked too: map against qemu-img map (empty, sparse, over a backing
# file), compare's verdicts against qemu-img compare's.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

_qcow2_lib=$(cd "$(dirname "${TEST_LIB:-$0}")" && pwd)/qcow2-lib.sh
# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires strace qemu-img qemu-io python3 timeout /usr/bin/time
# shellcheck source=tests/qtest-like/qcow2-lib.sh
. "$_qcow2_lib"
TMO="timeout 300"
TiB=$((1 << 40))

# traced CALLS CMD...: run CMD (which must succeed) under strace, every
# thread; $calls gets how many of CALLS (comma-separated) it made.
calls=
traced()
{
    local which=$1
    shift
    # LeakSanitizer cannot run under ptrace: the traced run goes without.
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
        expect_ok $TMO strace -f --seccomp-bpf -qq -o "$scratch/trace" \
        -e trace="$which" "$@"
    calls=$(grep -c -E "^([0-9]+ +)?(${which//,/|})\(" "$scratch/trace")
}

# bounded WHAT SMALL BIG MAX: BIG (64 TiB) at most twice SMALL (1 TiB)
# and a few (wake-ups of the main loop vary from run to run), and at most
# MAX.
bounded()
{
    [ "$3" -le $((2 * $2 + 8)) ] ||
        fail "$1: $2 calls for 1 TiB, $3 for 64 TiB"
    [ "$3" -le "$4" ] || fail "$1: $3 calls, more than $4"
}

# An image of SIZE TiB: empty, or with 64 KiB at 0, at the middle + 4 KiB
# (two clusters) and at the end.
make_image()
{
    local img=$1 size=$(($2 * TiB))
    rm -f "$img"
    q qemu-img create -f qcow2 "$img" "$size"
    [ "${3:-}" = empty ] && return
    qio "$img" "write -P 1 0 64k" "write -P 2 $((size / 2 + 4096)) 64k" \
        "write -P 3 $((size - 65536)) 64k"
}

# same_map IMG: mirror-tool map --output=json is qemu-img map's, byte for
# byte; counts the write calls of ours into $calls.
same_map()
{
    q qemu-img map -f qcow2 --output=json "$1"
    cp "$last_out" qemu.json
    traced write "$T" map --output=json "$1"
    cp "$last_out" ours.json
    assert_same qemu.json ours.json "$1: map against qemu-img map"
}

# --- map: empty, and three pieces of data ------------------------------
for s in 1 64; do
    make_image e$s.qcow2 $s empty
    make_image a$s.qcow2 $s
done
same_map e1.qcow2
small=$calls
same_map e64.qcow2
extent_is ours.json 0 65536G hole
bounded "map of an empty image" "$small" "$calls" 16
ok "map of an empty 64 TiB qcow2: one hole, as many calls as for 1 TiB"

same_map a1.qcow2
small=$calls
same_map a64.qcow2
extent_is ours.json 32768G 128K data
extent_is ours.json 64K 32768G-64K hole
bounded "map of a sparse image" "$small" "$calls" 16
ok "map of a sparse 64 TiB qcow2: as qemu-img, as many calls as for 1 TiB"

# --- over a backing file -----------------------------------------------
rm -f o64.qcow2
q qemu-img create -f qcow2 -b a64.qcow2 -F qcow2 o64.qcow2
same_map o64.qcow2
extent_is ours.json 64K 32768G-64K hole
bounded "map over a backing file" "$small" "$calls" 16
ok "map of an empty 64 TiB overlay over a sparse backing file: as qemu-img"

# --- compare: equal, then a difference far out -------------------------
cp a1.qcow2 b1.qcow2
cp a64.qcow2 b64.qcow2
traced write "$T" compare a1.qcow2 b1.qcow2
small=$calls
traced write "$T" compare a64.qcow2 b64.qcow2
grep -q -x "Images are identical." "$last_out" ||
    fail "compare: $(cat "$last_out")"
bounded "compare" "$small" "$calls" 64
qio b64.qcow2 "write -P 9 $((40 * TiB)) 4k"
expect_exit 1 $TMO "$T" compare a64.qcow2 b64.qcow2
grep -q -x "Content mismatch at offset $((40 * TiB))!" "$last_out" ||
    fail "compare: $(cat "$last_out")"
run $TMO qemu-img compare a64.qcow2 b64.qcow2
[ "$last_rc" = 1 ] && grep -q "offset $((40 * TiB))!" "$last_out" ||
    fail "qemu-img compare: $(cat "$last_out")"
ok "compare of 64 TiB qcow2 images: as qemu-img, as many calls as 1 TiB"

# --- check and info: the reads do not grow with the size ---------------
traced pread64 "$T" check a1.qcow2
small=$calls
traced pread64 "$T" check a64.qcow2
grep -q "No errors were found on the image." "$last_out" ||
    fail "check: $(cat "$last_out")"
[ "$calls" = "$small" ] ||
    fail "check: $small reads for 1 TiB, $calls for 64 TiB"
traced pread64 "$T" info a64.qcow2
grep -q "virtual size: 64 TiB" "$last_out" || fail "info: $(cat "$last_out")"
ok "check of a 64 TiB qcow2: as many reads as for 1 TiB"

# --- peak memory: a copy out of scattered L2 tables --------------------
# 1024 clusters of data, each in an L2 table of its own, copied out of a
# 64 TiB image with the default 16 pool workers: the L2 cache reuses the
# buffer of the table it evicts, so the copy stays within the issue's
# bound of buf-size (16 MiB) + 32 MiB.  Tables freed and allocated again
# by whichever worker missed stayed resident in every worker's malloc
# arena: 120-150 MiB.  Not under ASan (its shadow memory is resident).
rm -f s64.qcow2
q qemu-img create -f qcow2 s64.qcow2 $((64 * TiB))
python3 - "$((64 * TiB))" >qio.cmds <<'PY'
import random, sys
size = int(sys.argv[1])
rng = random.Random(21)
tables = rng.sample(range(size // (512 << 20)), 1024)
for i, t in enumerate(sorted(tables)):
    print("write -P %d %d 64k" % (i % 250 + 1, t * (512 << 20) + 65536 * rng.randrange(8192)))
PY
mapfile -t cmds <qio.cmds
qio s64.qcow2 "${cmds[@]}"
expect_ok $TMO /usr/bin/time -f "%M" -o rss.out "$T" convert -n s64.qcow2 \
    "null:size=$((64 * TiB))"
rss=$(tail -n 1 rss.out)
if [ -n "$ULIMIT" ]; then
    [ "$rss" -le $((48 * 1024)) ] ||
        fail "convert out of 1024 L2 tables: peak RSS $rss KiB > 48 MiB"
fi
ok "a copy out of 1024 scattered L2 tables: peak RSS ${rss} KiB"
