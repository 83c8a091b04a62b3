#!/usr/bin/env bash
# qcow2-lite against QEMU 7.2 (issue 4, qcow2-lite.md §4), part 1:
#  - golden images made by qemu-img/qemu-io (every cluster type and size,
#    backing chains, compressed, preallocation=metadata, v2, snapshots,
#    bitmaps, other refcount widths): mirror-tool reads the same bytes as
#    qemu-img convert, its map agrees with qemu-img map, its check with
#    qemu-img check;
#  - images mirror-tool writes (convert -O qcow2 [-c], create + convert -n,
#    preallocation=metadata, backing files, writes over compressed and
#    zero clusters, 512-byte clusters past 8 MiB, round trips with
#    qemu-io): qemu-img check exits 0, qemu-img compare says identical,
#    qemu-img info shows neither dirty nor corrupt, mirror-tool check
#    agrees.
# Part 2 (refusals, corruptions, create/check details) is
# test-tool-qcow2-bad.sh.  Every qemu call runs under `timeout`.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

_qcow2_lib=$(cd "$(dirname "${TEST_LIB:-$0}")" && pwd)/qcow2-lib.sh
# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires qemu-img qemu-io python3 timeout truncate dd cmp sha256sum
# shellcheck source=tests/qtest-like/qcow2-lib.sh
. "$_qcow2_lib"

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


# start --sync top: only what the overlay itself allocates is copied; the
# target shares the base, so it reads the same as the source, and its map
# has data only where the overlay has (qemu's sync=top, iotests 041).
rm -f st-src.qcow2 st-dst.qcow2 st-full.qcow2
q qemu-img create -f qcow2 -b b1.raw -F raw -o cluster_size=65536 \
    st-src.qcow2 6M
qio st-src.qcow2 'write -P 0x71 1M 128k' 'write -z 3M 64k' \
    'write -P 0x72 5M 64k'
q qemu-img create -f qcow2 -b b1.raw -F raw -o cluster_size=65536 \
    st-dst.qcow2 6M
expect_ok "$T" start --sync top -f qcow2 -O qcow2 st-src.qcow2 st-dst.qcow2
q qemu-img compare -f qcow2 -F qcow2 st-src.qcow2 st-dst.qcow2
q qemu-img check -f qcow2 st-dst.qcow2
q qemu-img map --output=json -f qcow2 st-dst.qcow2
python3 - "$last_out" <<'PY' || fail "sync=top copied what the base holds"
import json, sys
top = [(e['start'], e['length']) for e in json.load(open(sys.argv[1]))
       if e['depth'] == 0]
# Data at 1M (128k) and 5M (64k) and the zero cluster at 3M; the rest of
# the 6 MiB comes from the base, at depth 1.
covered = sum(l for _, l in top)
assert covered == 256 * 1024, top
PY
# And sync=full into a blank target copies everything.
q qemu-img create -f qcow2 -o cluster_size=65536 st-full.qcow2 6M
expect_ok "$T" start --sync full -f qcow2 -O qcow2 st-src.qcow2 st-full.qcow2
q qemu-img compare -f qcow2 -F qcow2 st-src.qcow2 st-full.qcow2
ok "start --sync top copies only the overlay's clusters; --sync full all"
