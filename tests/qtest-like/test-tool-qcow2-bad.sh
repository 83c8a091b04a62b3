#!/usr/bin/env bash
# qcow2-lite against QEMU 7.2 (issue 4), part 2:
#  - refusals (qcow2-lite.md §2): a clear error naming the feature, exit 2,
#    the file untouched (sha256); read-write refusals still read;
#  - corruptions (§5) poked into qemu-made images: refused at open with
#    exit 2 and the file untouched, or (data path) EIO and exit 1; a write
#    aimed at metadata is stopped and marks the image corrupt;
#  - create, check and convert -c details.
# Every qemu call runs under `timeout`, mirror-tool on hostile images
# under `ulimit -v` too.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

_qcow2_lib=$(cd "$(dirname "${TEST_LIB:-$0}")" && pwd)/qcow2-lib.sh
# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires qemu-img qemu-io python3 timeout truncate dd cmp sha256sum
# shellcheck source=tests/qtest-like/qcow2-lib.sh
. "$_qcow2_lib"

# Images the cases below start from.
make_random_image base.raw 5M
truncate -s 6M base.raw
make_random_image b1.raw 6M
make_sparse_image sp.raw 24M 0:64K 100K:3K 5M:1M 23M:1M
q qemu-img create -f qcow2 -o compat=0.10 v2.qcow2 8M
q qemu-img create -f qcow2 snap.qcow2 4M
qio snap.qcow2 'write -P 1 0 1M'
q qemu-img snapshot -c s1 snap.qcow2
q qemu-img create -f qcow2 bm.qcow2 4M
q qemu-img bitmap --add bm.qcow2 b0
q qemu-img create -f qcow2 -o lazy_refcounts=on lazy.qcow2 4M
qio lazy.qcow2 'write -P 6 0 64k'

# ---------------------------------------------------------------------
# Refusals (§2): exit 2, the feature named, the file untouched
# ---------------------------------------------------------------------
rm -f r-*.qcow2
q qemu-img create -f qcow2 -o extended_l2=on r-extl2.qcow2 1M
q qemu-img create -f qcow2 -o compression_type=zstd r-zstd.qcow2 1M
q qemu-img create -f raw r-df.raw 1M
q qemu-img create -f qcow2 -o data_file=r-df.raw,data_file_raw=on r-df.qcow2 1M
# qemu-img calibrates PBKDF by thread CPU time; on a coarse clock a round
# can read 0 ms ("Unable to get accurate CPU usage"): retry, then report.
luks=(create -f qcow2 --object secret,id=s0,data=x
      -o encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10
      r-luks.qcow2 1M)
luks_ok=
for try in 1 2 3; do
    if timeout 60 qemu-img "${luks[@]}" >/dev/null 2>&1; then
        luks_ok=1
        break
    fi
done
[ -n "$luks_ok" ] || q qemu-img "${luks[@]}"
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

# Versions other than 2 and 3, probed (no -f): the qcow2 magic claims the
# file and the open refuses it as qemu-img does; it is never copied as raw.
for v in 1 4 0xffffffff; do
    fresh
    poke c.qcow2 4 4 "$v"
    remember_sum c.qcow2
    rm -f vc.raw
    expect_exit 2 "$T" convert c.qcow2 vc.raw
    stderr_has "Unsupported qcow2 version $((v))"
    assert_absent vc.raw "convert of a version $((v)) image"
    expect_exit 2 "$T" info c.qcow2
    stderr_has "Unsupported qcow2 version $((v))"
    expect_exit 2 "$T" serve "unix:$PWD/vc.sock" c.qcow2
    stderr_has "Unsupported qcow2 version $((v))"
    assert_unchanged c.qcow2 "version $((v))"
done
ok "qcow2 versions 1, 4, 2^32-1 probed: refused with exit 2, nothing written"

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
    run bash -c "$ULIMIT $TMO \"$T\" convert c.qcow2 dc.raw"
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
make_random_image meta-src.raw 1M
run $TMO "$T" convert -n -O qcow2 meta-src.raw c.qcow2
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
