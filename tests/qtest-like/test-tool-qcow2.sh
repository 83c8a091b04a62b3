#!/usr/bin/env bash
# qcow2-lite against QEMU 7.2 (issue 4, qcow2-lite.md §4):
#  - golden images made by qemu-img/qemu-io (every cluster type and size,
#    backing chains, compressed, preallocation=metadata, v2, snapshots,
#    bitmaps, 1-bit refcounts): mirror-tool reads the same bytes as
#    qemu-img convert and its map agrees with qemu-img map;
#  - images mirror-tool writes (convert -O qcow2 [-c], create + convert -n,
#    preallocation=metadata, backing files, writes over compressed and
#    zero clusters, 512-byte clusters past 8 MiB): qemu-img check exits 0,
#    qemu-img compare says identical, qemu-img info shows neither dirty nor
#    corrupt, mirror-tool check agrees;
#  - refusals (§2) and corruptions (§5): a clear error, exit 2, the file
#    untouched; data-path corruptions fail with EIO (exit 1);
#  - create, check and map details.
# Every qemu call runs under `timeout`, and those on hostile images under
# `ulimit -v` too.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires qemu-img qemu-io python3 timeout truncate dd cmp sha256sum

TMO="timeout 60"
MiB=$((1024 * 1024))

# q CMD...: run a qemu tool under a timeout, fail if it fails.
q()
{
    run $TMO "$@"
    [ "$last_rc" = 0 ] || fail "$1 failed"
}

# qio IMG CMD...: qemu-io -f qcow2 with -c for each command.
qio()
{
    local img=$1 c args=()
    shift
    for c in "$@"; do
        args+=(-c "$c")
    done
    q qemu-io -f qcow2 "${args[@]}" "$img"
}

# verify IMG REF: what qemu says about an image we wrote.
verify()
{
    local img=$1 ref=$2
    run $TMO qemu-img check -f qcow2 "$img"
    [ "$last_rc" = 0 ] || fail "$img: qemu-img check exit $last_rc"
    grep -q "No errors were found on the image." "$last_out" ||
        fail "$img: qemu-img check found problems"
    run $TMO qemu-img compare -f qcow2 -F raw "$img" "$ref"
    [ "$last_rc" = 0 ] || fail "$img: differs from $ref"
    run $TMO qemu-img info -f qcow2 --output=json "$img"
    [ "$last_rc" = 0 ] || fail "$img: qemu-img info failed"
    python3 - "$last_out" <<'EOF' || fail "$img: dirty or corrupt"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dirty-flag"] is False, d
assert d["format-specific"]["data"]["corrupt"] is False, d
EOF
    run "$T" check "$img"
    [ "$last_rc" = 0 ] || fail "$img: mirror-tool check exit $last_rc"
}

# same_read IMG: mirror-tool reads what qemu-img reads.
same_read()
{
    rm -f sr.ref sr.out
    q qemu-img convert -f qcow2 -O raw "$1" sr.ref
    expect_ok "$T" convert -f qcow2 "$1" sr.out
    truncate -s "$(file_size sr.ref)" sr.out
    assert_same sr.ref sr.out "$1: mirror-tool reads other bytes than qemu"
}

# map_agree IMG [RAWDEPTH...]: block status per cluster as qemu-img map
# (qcow2-lite.md §4.3): zero+data counts as data (metadata preallocation);
# at depths backed by raw files only depth and presence; offsets at
# depth 0 only.
map_agree()
{
    local img=$1
    shift
    run $TMO qemu-img map --output=json -f qcow2 "$img"
    [ "$last_rc" = 0 ] || fail "qemu-img map $img failed"
    cp "$last_out" ma.qemu
    expect_ok "$T" map --output=json "$img"
    cp "$last_out" ma.ours
    python3 - ma.qemu ma.ours "$@" <<'EOF' || fail "$img: map disagrees"
import json, sys
raw_depths = {int(d) for d in sys.argv[3:]}
def cells(path, step=512):
    out = {}
    for e in json.load(open(path)):
        data = e["data"]
        zero = e["zero"] and not data
        for off in range(e["start"], e["start"] + e["length"], step):
            d = e["depth"]
            if d in raw_depths:
                rec = (d, e["present"])
            else:
                rec = (d, e["present"], zero, data)
                if d == 0 and "offset" in e:
                    rec += (e["offset"] + off - e["start"],)
            out[off] = rec
    return out
a, b = cells(sys.argv[1]), cells(sys.argv[2])
bad = [o for o in sorted(set(a) | set(b)) if a.get(o) != b.get(o)]
if bad:
    o = bad[0]
    print("first difference at %d: qemu %s, ours %s" % (o, a.get(o), b.get(o)))
    sys.exit(1)
EOF
}

# golden IMG [RAWDEPTH...]: read and map like qemu; check like qemu.
golden()
{
    local img=$1 ours theirs
    same_read "$img"
    map_agree "$@"
    run $TMO qemu-img check -f qcow2 "$img"
    theirs=$last_rc
    run "$T" check "$img"
    ours=$last_rc
    [ "$ours" = "$theirs" ] ||
        fail "$img: mirror-tool check exit $ours, qemu-img check $theirs"
}

# poke FILE OFFSET WIDTH VALUE: overwrite a big-endian field.
poke()
{
    python3 - "$@" <<'EOF' || fail "poke $*"
import sys
path, off, width, val = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3]), int(sys.argv[4], 0)
with open(path, "r+b") as f:
    f.seek(off)
    f.write(val.to_bytes(width, "big"))
EOF
}

peek64()
{
    python3 -c "
import sys
f = open('$1', 'rb'); f.seek($2); print(int.from_bytes(f.read(8), 'big'))"
}

# refused IMG WHAT MSG [rw]: info (read-only) or convert -n (read-write)
# exits 2 naming the problem, and IMG is untouched.
refused()
{
    local img=$1 what=$2 msg=$3 mode=${4:-ro}
    remember_sum "$img"
    if [ "$mode" = rw ]; then
        make_sparse_image rf-src.img "$(qimg_size "$img")" 0:64K
        run $TMO "$T" convert -n -O qcow2 rf-src.img "$img"
    else
        run bash -c "ulimit -v 4000000; $TMO \"$T\" info -f qcow2 \"$img\""
    fi
    [ "$last_rc" = 2 ] || fail "$what: expected exit 2, got $last_rc"
    stderr_has "$msg"
    assert_unchanged "$img" "$what"
    ok "refused ($mode): $what"
}

qimg_size()
{
    run $TMO qemu-img info -U --output=json "$1"
    python3 -c "import json; print(json.load(open('$last_out'))['virtual-size'])" 2>/dev/null || echo 1048576
}

# ---------------------------------------------------------------------
# Golden images made by qemu
# ---------------------------------------------------------------------
for cs in 512 4096 65536 2M; do
    rm -f g.qcow2
    q qemu-img create -f qcow2 -o cluster_size=$cs g.qcow2 64M
    qio g.qcow2 'write -P 0xab 0 1M' 'write -z 4M 1M' 'write -z -u 8M 128k' \
        'write -P 0xcd 8M 64k' 'write -P 0x11 16M 64k' 'discard 16M 64k' \
        'write -P 0x22 20M 100k'
    golden g.qcow2
    ok "golden data image, cluster size $cs: same bytes, same map, check"
done

rm -f za.qcow2
q qemu-img create -f qcow2 za.qcow2 1M
qio za.qcow2 'write -P 1 0 192k' 'write -z 0 64k' 'write -z -u 64k 64k'
golden za.qcow2
ok "golden ZERO_ALLOC and ZERO_PLAIN clusters"

make_sparse_image mixed.raw 9M 0:1M 3M:64K 5M:2M
dd if=/dev/zero bs=64k count=4 status=none | tr '\0' 'x' |
    dd of=mixed.raw bs=64k seek=100 conv=notrunc status=none
for cs in 512 65536 2M; do
    rm -f comp.qcow2
    q qemu-img convert -c -O qcow2 -o cluster_size=$cs mixed.raw comp.qcow2
    golden comp.qcow2
    ok "golden compressed image (cluster size $cs; random data stays normal)"
done

make_random_image base.raw 5M
truncate -s 6M base.raw
rm -f mid.qcow2 top.qcow2
q qemu-img create -f qcow2 -b base.raw -F raw -o cluster_size=4096 \
    mid.qcow2 8M
qio mid.qcow2 'write -P 0x33 1M 64k' 'write -z 2M 64k'
q qemu-img create -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2 12M
qio top.qcow2 'write -P 0x44 2M 64k' 'write -z 3M 64k' 'write -P 5 7M 1k'
golden top.qcow2 2
golden mid.qcow2 1
expect_ok "$T" map top.qcow2
cp "$last_out" hm.ours
q qemu-img map -f qcow2 top.qcow2
cmp -s hm.ours "$last_out" || fail "human map of the chain differs:
$(diff hm.ours "$last_out")"
ok "golden backing chain raw <- qcow2 (4K) <- qcow2: reads, maps, depths"

mkdir -p sub
make_random_image sub/good.raw 2M
q qemu-img create -f qcow2 -b good.raw -F raw sub/ov.qcow2 2M
golden sub/ov.qcow2 1
q qemu-img create -f qcow2 -b ov.qcow2 -F qcow2 sub/ov2.qcow2 3M
rm -f sub/ov2.noext
golden sub/ov2.qcow2 2
ok "golden chain with relative names in a subdirectory"

# Without the backing format extension: probed.
q qemu-img create -f qcow2 -u -b good.raw -F raw sub/probe.qcow2 2M
python3 - sub/probe.qcow2 <<'EOF' || fail "cannot strip the extension"
import sys
f = open(sys.argv[1], "r+b"); h = bytearray(f.read(65536))
assert h[112:116] == bytes.fromhex("e2792aca")
h[112:116] = bytes.fromhex("7fffffff")   # an unknown extension now
f.seek(0); f.write(h)
EOF
golden sub/probe.qcow2 1
ok "golden overlay without a backing format: probed as raw"

rm -f pre.qcow2
q qemu-img create -f qcow2 -o preallocation=metadata pre.qcow2 4M
qio pre.qcow2 'write -P 7 100k 50k'
golden pre.qcow2
ok "golden preallocation=metadata"

rm -f v2.qcow2 v2b.qcow2
q qemu-img create -f qcow2 -o compat=0.10 v2.qcow2 8M
qio v2.qcow2 'write -P 9 1M 64k' 'write -z 2M 64k'
golden v2.qcow2
q qemu-img create -f qcow2 -o compat=0.10 -b base.raw -F raw v2b.qcow2 8M
qio v2b.qcow2 'write -P 8 5M 1M'
golden v2b.qcow2 1
ok "golden version 2 (compat=0.10) images, with and without backing"

rm -f s512.qcow2
q qemu-img create -f qcow2 -o cluster_size=512 s512.qcow2 16M
qio s512.qcow2 'write -P 5 0 12M'
golden s512.qcow2
ok "golden 512-byte clusters past 8 MiB (qemu grew the refcount table)"

for rb in 1 8 64; do
    rm -f rb.qcow2
    q qemu-img create -f qcow2 -o refcount_bits=$rb rb.qcow2 4M
    qio rb.qcow2 'write -P 3 0 100k' 'write -P 4 1M 1k'
    golden rb.qcow2
done
ok "golden refcount widths 1, 8 and 64 (read-only)"

rm -f snap.qcow2 bm.qcow2 lazy.qcow2
q qemu-img create -f qcow2 snap.qcow2 4M
qio snap.qcow2 'write -P 1 0 1M'
q qemu-img snapshot -c s1 snap.qcow2
qio snap.qcow2 'write -P 2 512k 1M'
golden snap.qcow2
q qemu-img create -f qcow2 bm.qcow2 4M
q qemu-img bitmap --add bm.qcow2 b0
qio bm.qcow2 'write -P 6 0 64k'
golden bm.qcow2
q qemu-img create -f qcow2 -o lazy_refcounts=on lazy.qcow2 4M
qio lazy.qcow2 'write -P 6 0 64k'
golden lazy.qcow2
ok "golden images with a snapshot, a bitmap, lazy refcounts (read)"

# ---------------------------------------------------------------------
# Images mirror-tool writes
# ---------------------------------------------------------------------
make_sparse_image sp.raw 24M 0:64K 100K:3K 5M:1M 23M:1M
make_random_image full.raw 3M
make_random_image odd.raw $((3 * MiB + 12345))
for cs in 512 4K 64K 2M; do
    for src in sp full odd sp-W; do
        w=
        [ "$src" = sp-W ] && w=-W
        rm -f w.qcow2
        expect_ok "$T" convert $w -O qcow2 -o cluster_size=$cs \
            "${src%-W}.raw" w.qcow2
        verify w.qcow2 "${src%-W}.raw"
    done
    ok "convert -O qcow2, cluster size $cs: sparse, full, odd size, -W"
done

for cs in 512 4K 64K 2M; do
    rm -f wc.qcow2
    expect_ok "$T" convert -c -O qcow2 -o cluster_size=$cs mixed.raw wc.qcow2
    verify wc.qcow2 mixed.raw
    golden wc.qcow2
    rm -f wc.qcow2
    expect_ok "$T" convert -c -W -O qcow2 -o cluster_size=$cs odd.raw wc.qcow2
    verify wc.qcow2 odd.raw
    ok "convert -c, cluster size $cs: packed compressed clusters check clean"
done
q qemu-img info -f qcow2 --output=json wc.qcow2
python3 - "$last_out" <<'EOF' || fail "format-specific data of our image"
import json, sys
d = json.load(open(sys.argv[1]))["format-specific"]["data"]
assert d == {"compat": "1.1", "compression-type": "zlib",
             "lazy-refcounts": False, "refcount-bits": 16, "corrupt": False,
             "extended-l2": False}, d
EOF
ok "qemu-img info of our image: compat 1.1, zlib, 16-bit refcounts"

# create + convert -n, ours and qemu's images; 512 B clusters grow the
# refcount table past 8 MiB.
make_random_image big.raw 12M
for maker in ours qemu; do
    for cs in 512 64K; do
        rm -f n.qcow2
        if [ $maker = ours ]; then
            expect_ok "$T" create -q -f qcow2 -o cluster_size=$cs n.qcow2 16M
        else
            q qemu-img create -f qcow2 -o cluster_size=$cs n.qcow2 16M
        fi
        expect_ok "$T" convert -n -W -O qcow2 big.raw n.qcow2
        cp big.raw n.ref
        truncate -s 16M n.ref
        verify n.qcow2 n.ref
    done
    ok "create ($maker) + convert -n: 512 B and 64K clusters, 12 MiB"
done

rm -f pm.qcow2
expect_ok "$T" create -f qcow2 -o preallocation=metadata,cluster_size=4K \
    pm.qcow2 8M
stdout_has_formatting=$(grep -c "Formatting 'pm.qcow2', fmt=qcow2" "$last_out")
[ "$stdout_has_formatting" = 1 ] || fail "create: no Formatting line"
q qemu-img check -f qcow2 pm.qcow2
map_agree pm.qcow2
make_sparse_image sp8.raw 8M 0:64K 100K:3K 5M:1M
expect_ok "$T" convert -n -O qcow2 sp8.raw pm.qcow2
verify pm.qcow2 sp8.raw
ok "create -o preallocation=metadata, then convert -n into it"

# Overlays made by create -o backing_file: the source is smaller than the
# overlay, so the tail still comes from the base (COW of partial clusters
# at 2M clusters, where writes are 64K granules).
make_random_image b1.raw 6M
remember_sum b1.raw
make_sparse_image small.raw $((3 * MiB + 512)) 0:100K 1M:8K 3M:512
for cs in 64K 2M; do
    rm -f ov.qcow2
    expect_ok "$T" create -q -f qcow2 \
        -o backing_file=b1.raw,backing_fmt=raw,cluster_size=$cs ov.qcow2
    expect_ok "$T" info --output=json ov.qcow2
    python3 -c "
import json; d = json.load(open('$last_out'))
assert d['virtual-size'] == 6 * 1048576 and d['backing-filename'] == 'b1.raw'
assert d['backing-filename-format'] == 'raw', d" ||
        fail "info of the overlay"
    expect_ok "$T" convert -n -O qcow2 small.raw ov.qcow2
    cp b1.raw ov.ref
    dd if=small.raw of=ov.ref conv=notrunc status=none
    verify ov.qcow2 ov.ref
    assert_unchanged b1.raw "the backing file"
    golden ov.qcow2 1
    ok "create -o backing_file (cluster size $cs), writes over it: COW"
done

# A qcow2 base with its own base; overlay written by us, then by qemu-io,
# then by us again (round trips), each step checked.
rm -f rmid.qcow2 rtop.qcow2
q qemu-img create -f qcow2 -b b1.raw -F raw rmid.qcow2 6M
qio rmid.qcow2 'write -P 0x51 1M 100k'
remember_sum rmid.qcow2
expect_ok "$T" create -q -f qcow2 -o backing_file=rmid.qcow2,backing_fmt=qcow2 \
    rtop.qcow2 7M
q qemu-img convert -f qcow2 -O raw rtop.qcow2 rt.ref
expect_ok "$T" convert -n -O qcow2 small.raw rtop.qcow2
dd if=small.raw of=rt.ref conv=notrunc status=none
verify rtop.qcow2 rt.ref
qio rtop.qcow2 'write -P 0x61 2M 70k' 'write -z 4M 64k' 'discard 64k 64k'
q qemu-img convert -f qcow2 -O raw rtop.qcow2 rt.ref
same_read rtop.qcow2
make_sparse_image small2.raw $((1 * MiB)) 4K:8K 500K:1K
expect_ok "$T" convert -n -O qcow2 small2.raw rtop.qcow2
dd if=small2.raw of=rt.ref conv=notrunc status=none
verify rtop.qcow2 rt.ref
assert_unchanged rmid.qcow2 "the qcow2 backing file"
assert_unchanged b1.raw "the raw backing file"
ok "round trips: ours, qemu-io, ours on an overlay over a qcow2 base"

# Writes over compressed, ZERO_PLAIN and ZERO_ALLOC clusters (qemu's).
for img in comp za; do
    rm -f ow.qcow2
    if [ $img = comp ]; then
        q qemu-img convert -c -O qcow2 mixed.raw ow.qcow2
    else
        cp za.qcow2 ow.qcow2
    fi
    q qemu-img convert -f qcow2 -O raw ow.qcow2 ow.ref
    make_sparse_image ow-src.raw $((MiB / 2)) 0:20K 70K:100K 300K:1K
    expect_ok "$T" convert -n -O qcow2 ow-src.raw ow.qcow2
    dd if=ow-src.raw of=ow.ref conv=notrunc status=none
    verify ow.qcow2 ow.ref
    ok "convert -n over qemu's $img clusters: partial overwrites, zeroes"
done

# ---------------------------------------------------------------------
# Refusals (§2): exit 2, the feature named, the file untouched
# ---------------------------------------------------------------------
rm -f r-*.qcow2
q qemu-img create -f qcow2 -o extended_l2=on r-extl2.qcow2 1M
q qemu-img create -f qcow2 -o compression_type=zstd r-zstd.qcow2 1M
q qemu-img create -f raw r-df.raw 1M
q qemu-img create -f qcow2 -o data_file=r-df.raw,data_file_raw=on r-df.qcow2 1M
q qemu-img create -f qcow2 --object secret,id=s0,data=x \
    -o encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10 \
    r-luks.qcow2 1M
q qemu-img create -f qcow2 r-bit.qcow2 1M
poke r-bit.qcow2 72 8 0x20
for mode in ro rw; do
    refused r-extl2.qcow2 "extended L2" "extended L2 entries" $mode
    refused r-zstd.qcow2 "zstd" "zstd compression" $mode
    refused r-df.qcow2 "external data file" "external data file" $mode
    refused r-luks.qcow2 "LUKS encryption" "encryption (LUKS)" $mode
    refused r-bit.qcow2 "unknown incompatible bit" \
        "unknown incompatible feature bit 5" $mode
done

cp snap.qcow2 r-snap.qcow2
cp bm.qcow2 r-bm.qcow2
q qemu-img create -f qcow2 -o refcount_bits=8 r-rb8.qcow2 1M
cp v2.qcow2 r-v2.qcow2
q qemu-img create -f qcow2 -o lazy_refcounts=on r-dirty.qcow2 1M
run bash -c "ulimit -c 0; $TMO qemu-io -f qcow2 -c 'write 0 64k' -c abort \
    r-dirty.qcow2; true"
[ "$(( $(peek64 r-dirty.qcow2 72) & 1 ))" = 1 ] ||
    fail "qemu-io abort did not leave the dirty bit"
q qemu-img create -f qcow2 r-corrupt.qcow2 1M
poke r-corrupt.qcow2 72 8 0x2
refused r-snap.qcow2 "internal snapshots" "internal snapshots" rw
refused r-bm.qcow2 "persistent bitmaps" "dirty bitmaps" rw
refused r-rb8.qcow2 "8-bit refcounts" "16-bit refcounts" rw
refused r-v2.qcow2 "version 2" "version 2" rw
refused r-dirty.qcow2 "dirty bit" "marked dirty" rw
refused r-corrupt.qcow2 "corrupt bit" "marked corrupt" rw
for img in r-snap r-bm r-rb8 r-v2 r-dirty r-corrupt; do
    remember_sum $img.qcow2
    expect_ok "$T" convert -f qcow2 $img.qcow2 ro.raw
    assert_unchanged $img.qcow2
done
ok "read-write refusals still read (snapshots, bitmaps, widths, v2, dirty, corrupt)"

# A clean lazy-refcounts image is written eagerly: still clean.
cp lazy.qcow2 lw.qcow2
q qemu-img convert -f qcow2 -O raw lw.qcow2 lw.ref
make_sparse_image lw-src.raw 1M 0:4K
expect_ok "$T" convert -n -O qcow2 lw-src.raw lw.qcow2
dd if=lw-src.raw of=lw.ref conv=notrunc status=none
verify lw.qcow2 lw.ref
ok "a clean lazy-refcounts image is written (eager refcounts), checks clean"

# ---------------------------------------------------------------------
# Corruptions (§5) on qemu's layout: 64K clusters, reftable 0x10000,
# refblock 0x20000, L1 0x30000, L2 0x40000, data 0x50000.
# ---------------------------------------------------------------------
fresh()
{
    rm -f c.qcow2
    q qemu-img create -f qcow2 c.qcow2 1M
    qio c.qcow2 'write -P 0x5a 0 64k'
}
corrupt()
{
    local what=$1 msg=$2 off=$3 width=$4 val=$5
    fresh
    poke c.qcow2 "$off" "$width" "$val"
    refused c.qcow2 "$what" "$msg"
}
corrupt "magic" "bad magic" 0 4 0x514649fa
corrupt "version 4" "Unsupported qcow2 version 4" 4 4 4
corrupt "cluster bits 8" "Unsupported cluster size: 2^8" 20 4 8
corrupt "cluster bits 22" "Unsupported cluster size: 2^22" 20 4 22
corrupt "header length 96" "header too short" 100 4 96
corrupt "header length > cluster" "exceeds cluster size" 100 4 0x20000
corrupt "header length 113" "not a multiple of 8" 100 4 113
corrupt "refcount order 7" "width too large" 96 4 7
corrupt "L1 size huge" "L1 table too large" 36 4 0x7fffffff
corrupt "L1 too small" "L1 table is too small" 24 8 0x10000000000
corrupt "L1 offset unaligned" "L1 table offset invalid" 40 8 0x30200
corrupt "L1 beyond EOF" "beyond the end of the file" 40 8 0x40000000
corrupt "reftable beyond EOF" "beyond the end of the file" 48 8 0x40000000
corrupt "reftable clusters 0" "does not contain" 56 4 0
corrupt "reftable clusters huge" "Reference count table too large" 56 4 0x100000
corrupt "reftable unaligned" "offset invalid" 48 8 0x10200
corrupt "backing offset > cluster" "Invalid backing file offset" 8 8 0x20000
corrupt "crypt AES" "encryption (AES)" 32 4 1
corrupt "crypt LUKS without extension" "encryption (LUKS)" 32 4 2
corrupt "crypt 3" "encryption method 3" 32 4 3
corrupt "compression type 2" "compression type 2" 104 1 2
corrupt "compression type 1 without bit" "without the compression type" 104 1 1
corrupt "compression bit without type" "bit is set" 72 8 0x8
corrupt "snapshots huge" "Snapshot table too large" 60 4 0x7fffffff
corrupt "snapshot offset unaligned" "Snapshot table offset invalid" 64 8 0x1234
corrupt "extension overrun" "Header extension too large" 116 4 0xffffff00
corrupt "size 2^63-1" "Image is too big" 24 8 0x7fffffffffffffff
corrupt "reftable entry unaligned" "unaligned" 0x10000 8 0x20200
corrupt "L1 entry unaligned" "L2 table offset 0x40200 unaligned" 0x30000 8 0x8000000000040200
corrupt "L1 entry beyond EOF" "beyond the end" 0x30000 8 0x8000000010000000
corrupt "L1 entry = L1 table" "Overlapping metadata" 0x30000 8 0x8000000000030000
corrupt "L1 entry = refcount table" "Overlapping metadata" 0x30000 8 0x10000

# A backing file name longer than 1023 bytes, and loops.
rm -f bl.qcow2
q qemu-img create -f qcow2 -u -b base.raw -F raw bl.qcow2 1M
poke bl.qcow2 16 4 2000
refused bl.qcow2 "backing name > 1023 bytes" "Backing file name too long"
rm -f la.qcow2 lb.qcow2
q qemu-img create -f qcow2 -u -b lb.qcow2 -F qcow2 la.qcow2 1M
q qemu-img create -f qcow2 -u -b la.qcow2 -F qcow2 lb.qcow2 1M
refused la.qcow2 "backing loop a -> b -> a" "loop"
rm -f self.qcow2
q qemu-img create -f qcow2 -u -b sel2.qcow2 -F qcow2 self.qcow2 1M
python3 - <<'EOF' || fail "cannot make self.qcow2 name itself"
f = open("self.qcow2", "r+b"); h = f.read(65536)
i = h.index(b"sel2.qcow2"); f.seek(i); f.write(b"self.qcow2")
EOF
refused self.qcow2 "self reference" "loop"
prev=base.raw
fmt=raw
for i in $(seq 1 17); do
    q qemu-img create -f qcow2 -u -b $prev -F $fmt d$i.qcow2 1M
    prev=d$i.qcow2
    fmt=qcow2
done
expect_ok "$T" info d16.qcow2
refused d17.qcow2 "17 backing files" "deeper than 16"
q qemu-img create -f qcow2 -u -b base.raw -F vmdk vf.qcow2 1M
refused vf.qcow2 "backing format vmdk" "backing format 'vmdk' is not supported"

# Data-path corruptions: EIO, exit 1, nothing written.
dcorrupt()
{
    local what=$1 off=$2 val=$3
    fresh
    poke c.qcow2 "$off" 8 "$val"
    remember_sum c.qcow2
    run bash -c "ulimit -v 4000000; $TMO \"$T\" convert c.qcow2 dc.raw"
    [ "$last_rc" = 1 ] || fail "$what: expected exit 1, got $last_rc"
    stderr_has "Input/output error"
    assert_unchanged c.qcow2 "$what"
    ok "data-path corruption: $what: EIO, exit 1"
}
dcorrupt "L2 entry unaligned" 0x40000 0x8000000000050200
dcorrupt "L2 entry beyond EOF" 0x40000 0x8000000010000000
dcorrupt "compressed beyond EOF" 0x40000 0x4000000010000000
dcorrupt "compressed in the header" 0x40000 0x4000000000000100
fresh
poke c.qcow2 0x40008 8 0x8000000000010000
remember_sum b1.raw
run $TMO "$T" convert -n -O qcow2 full.raw c.qcow2
[ "$last_rc" = 1 ] || fail "write onto metadata: exit $last_rc"
run $TMO qemu-img info --output=json -f qcow2 c.qcow2
grep -q '"corrupt": true' "$last_out" ||
    fail "write onto metadata did not set the corrupt bit"
[ "$(peek64 c.qcow2 0x10000)" = $((0x20000)) ] ||
    fail "the refcount table was overwritten"
ok "a write aimed at metadata is stopped, the image marked corrupt"

# ---------------------------------------------------------------------
# create, check, convert details
# ---------------------------------------------------------------------
for bad in "cluster_size=1000" "cluster_size=4M" "preallocation=full" \
           "backing_file=b1.raw" "bogus=1"; do
    rm -f bad.qcow2
    expect_exit 2 "$T" create -f qcow2 -o "$bad" bad.qcow2 1M
    assert_absent bad.qcow2 "create -o $bad"
done
expect_exit 2 "$T" create -f qcow2 bad.qcow2
assert_absent bad.qcow2 "create without a size"
expect_exit 2 "$T" create -f qcow2 bad.qcow2 1Q
ok "create: bad options and sizes exit 2, nothing created"

rm -f cz.qcow2
expect_ok "$T" create -q -f qcow2 cz.qcow2 3000000
stdout_empty
expect_ok "$T" info --output=json cz.qcow2
python3 -c "
import json; assert json.load(open('$last_out'))['virtual-size'] == 3000320" ||
    fail "create rounds the size up to 512 like qemu-img"
verify cz.qcow2 /dev/null
ok "create rounds sizes up to a multiple of 512; an empty image checks clean"

expect_exit 2 "$T" convert -c sp.raw x.raw
stderr_has "qcow2 target"
assert_absent x.raw
ok "convert -c needs a qcow2 target"

expect_exit 63 "$T" check sp.raw
ok "check of a raw image: exit 63"

fresh
cp c.qcow2 leak.qcow2
truncate -s $((8 * 65536)) leak.qcow2
poke leak.qcow2 $((0x20000 + 14)) 2 1
expect_exit 3 "$T" check leak.qcow2
grep -q "Leaked cluster 7 refcount=1 reference=0" "$last_err" ||
    fail "check: no leak message"
grep -q "1 leaked clusters were found on the image." "$last_out" ||
    fail "check: no leak summary"
run $TMO qemu-img check -f qcow2 leak.qcow2
[ "$last_rc" = 3 ] || fail "qemu-img check disagrees on leak.qcow2"
cp c.qcow2 bad.qcow2
poke bad.qcow2 $((0x20000 + 10)) 2 0
expect_exit 2 "$T" check bad.qcow2
grep -q "ERROR cluster 5 refcount=0 reference=1" "$last_err" ||
    fail "check: no corruption message"
expect_exit 2 "$T" check --output=json bad.qcow2
python3 -c "
import json; d = json.load(open('$last_out'))
assert d['corruptions'] == 2 and d['format'] == 'qcow2' and 'leaks' not in d, d" ||
    fail "check --output=json"
ok "check: leaks exit 3, corruptions exit 2, like qemu-img check"
