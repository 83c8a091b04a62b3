#!/usr/bin/env bash
# convert -S (issue 27, point 7): zero runs in data become holes whatever
# the size of one operation, with qemu-img convert's rules; any multiple of
# 512 up to 16M is taken; a bad value names -S and creates nothing.
#
# Every case is measured against qemu-img convert run on the same source
# in the same test: the holes of the target (qemu-img map) must be the
# same, and the bytes (cmp, qemu-img compare) identical.  Sources are files
# (1 MiB operations) and nbdkit's file plugin (256 KiB operations; it
# reports the allocated zeroes as data, as the file does), in order and
# with -W; targets raw, qcow2 and qcow2 with 512-byte clusters (whose map
# shows holes smaller than a file system block).
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires qemu-img nbdkit timeout cmp python3 dd

TMO="timeout 120"
KiB=1024
MiB=$((1024 * 1024))

# holes IMG FMT OUT: the extents of IMG that hold no data, "start length"
# per line, from qemu-img map.
holes()
{
    qemu-img map --output=json -f "$2" "$1" >"$3.json" ||
        fail "qemu-img map $1"
    python3 - "$3.json" >"$3" <<'EOF' || fail "bad map of $1"
import json, sys
for e in json.load(open(sys.argv[1])):
    if not e["data"]:
        print(e["start"], e["length"])
EOF
}

# data_bytes IMG FMT: bytes qemu-img map reports as data.
data_bytes()
{
    qemu-img map --output=json -f "$2" "$1" | python3 -c '
import json, sys
print(sum(e["length"] for e in json.load(sys.stdin) if e["data"]))' ||
        fail "qemu-img map $1"
}

# same_bytes SRC IMG FMT WHAT: IMG holds the bytes of the raw file SRC.
same_bytes()
{
    if [ "$3" = raw ]; then
        assert_same "$1" "$2" "$4"
    else
        qemu-img compare -q -f raw -F qcow2 "$1" "$2" ||
            fail "$4: qemu-img compare $1 $2"
    fi
}

# same_holes OURS QEMU WHAT [EDGE]: the two hole lists are the same; with
# EDGE, ours may have more, each in the EDGE bytes before or after a
# multiple of 256 KiB (an edge of an operation, see the 1536 case).
same_holes()
{
    local out
    out=$(python3 - "$1" "$2" "${4:-0}" <<'EOF'
import sys
def sectors(path):
    s = set()
    for line in open(path):
        start, length = map(int, line.split())
        s.update(range(start // 512, (start + length) // 512))
    return s
ours, qemu, edge = sectors(sys.argv[1]), sectors(sys.argv[2]), int(sys.argv[3])
missing = sorted(qemu - ours)
if missing:
    print("no hole at %d (and %d more sectors) where qemu-img has one"
          % (missing[0] * 512, len(missing) - 1))
    sys.exit(1)
op = 256 * 1024
for s in sorted(ours - qemu):
    off = s * 512
    # The sector lies in [e - edge, e + edge) for an edge e.
    if off % op >= edge and op - off % op > edge:
        print("a hole at %d where qemu-img has data" % off)
        sys.exit(1)
EOF
    ) || fail "$3: $out"
}

# our_convert SRC FMT TARGET SPARSE EXTRA...: mirror-tool convert, the
# source raw (a file) or an NBD URI, -S SPARSE unless empty.
our_convert()
{
    local src=$1 fmt=$2 dst=$3 s=$4 f=()
    shift 4
    case $src in
        nbd*) ;;
        *) f=(-f raw) ;;
    esac
    rm -f "$dst"
    expect_ok $TMO "$T" convert "${f[@]}" -O "$fmt" ${s:+-S "$s"} "$@" \
        "$src" "$dst"
    stderr_empty
}

qemu_convert()
{
    local src=$1 fmt=$2 dst=$3 s=$4
    shift 4
    rm -f "$dst"
    qemu-img convert -f raw -O "$fmt" ${s:+-S "$s"} "$@" "$src" "$dst" ||
        fail "qemu-img convert $src $dst"
}

# on_nbd FILE CMD...: run CMD with $uri the URI of FILE exported by nbdkit.
on_nbd()
{
    local file=$1
    shift
    start_nbd "$file"
    "$@"
    stop_nbd
}

start_nbd()
{
    rm -f nbd.sock nbd.pid
    nbdkit -f --exit-with-parent -r -U "$scratch/nbd.sock" -P "$scratch/nbd.pid" \
        file "$1" 2>nbd.log &
    nbd_pid=$!
    track_pid "$nbd_pid"
    wait_for 20 "nbdkit to listen" test -s nbd.pid
    uri="nbd+unix:///?socket=$scratch/nbd.sock"
}

stop_nbd()
{
    kill "$nbd_pid" 2>/dev/null
    wait "$nbd_pid" 2>/dev/null
    untrack_pid "$nbd_pid"
}

# --- 32 MiB of allocated zeroes --------------------------------------------
# Before: -S 2M found no run at all (31 MiB allocated), -S 1536 was
# refused by the job after the target was created.
head -c 32M /dev/zero >zero.raw || fail "head"
[ "$(allocated_bytes zero.raw)" -ge $((32 * MiB)) ] ||
    fail "zero.raw is not allocated"
start_nbd zero.raw
for s in "" 64K 1536 2M 16M; do
    for fmt in raw qcow2; do
        qemu_convert zero.raw "$fmt" q.$fmt "$s"
        qemu=$(data_bytes q.$fmt $fmt)
        for src in zero.raw "$uri"; do
            for w in "" -W; do
                our_convert "$src" "$fmt" m.$fmt "$s" $w
                same_bytes zero.raw m.$fmt $fmt "zeroes -S ${s:-default} $fmt"
                ours=$(data_bytes m.$fmt $fmt)
                [ "$ours" -le $((qemu + 64 * KiB)) ] ||
                    fail "-S ${s:-default} -O $fmt from ${src%%:*} $w:" \
                         "$ours bytes of data, qemu-img $qemu"
                if [ "$fmt" = raw ]; then
                    du=$(du --block-size=1 m.raw | cut -f1)
                    qdu=$(du --block-size=1 q.raw | cut -f1)
                    [ "$du" -le $((qdu + 64 * KiB)) ] ||
                        fail "-S ${s:-default} raw: du $du, qemu-img's $qdu"
                fi
            done
        done
        ok "32M of zeroes, -S ${s:-default} -O $fmt, file and NBD," \
           "in order and -W: $ours bytes of data, qemu-img $qemu"
    done
done
stop_nbd

# -S 0: everything written, as qemu-img -S 0.
our_convert zero.raw raw m.raw 0
assert_same zero.raw m.raw "-S 0"
[ "$(allocated_bytes m.raw)" -ge $((32 * MiB)) ] ||
    fail "-S 0 left holes: $(allocated_bytes m.raw) bytes allocated"
ok "-S 0: a fully allocated target"

# --- data with zero runs around -S, at and between operation edges ---------
# Random data; allocated zero runs just shorter and just longer than each
# -S tried (4K, 64K, 1536, 2M), aligned and not, across the edges of 256K,
# 1M and 2M operations and inside them.
make_random_image pat.raw 16M
write_zeroes pat.raw \
    1M-2K:4K 2M-4K:8K 3M-32K:64K 4M-64K:128K \
    5M+100K:60K 5M+256K:64K 5M+600K:1K 5M+700K:2K 5M+800K+512:1536 \
    6M-1536:2K 7M-1536:2K 1M+100K:4K 1M+200K:3584 1M+300K:3K \
    2M+256K-1K:2K 2M+512K-512:1K \
    7M+512K:3M 12M+4K:2M-8K 14M+256K:2M-256K
start_nbd pat.raw
for s in 4K 64K 1536 2M; do
    # A run of 1K at an operation edge becomes a hole with -S 1536 (the
    # largest power of 2 in it), as at the edges of qemu-img's buffers:
    # ours has them every 256K or 1M, qemu-img every 2M.
    edge=0
    [ "$s" = 1536 ] && edge=$KiB
    for fmt in raw qcow2 qcow2-512; do
        o=()
        f=$fmt
        if [ "$fmt" = qcow2-512 ]; then
            o=(-o cluster_size=512)
            f=qcow2
        fi
        qemu_convert pat.raw $f q.$f "$s" "${o[@]}"
        holes q.$f $f q.holes
        for src in pat.raw "$uri"; do
            for w in "" -W; do
                what="-S $s -O $fmt from ${src%%:*} ${w:-in order}"
                our_convert "$src" $f m.$f "$s" $w "${o[@]}"
                same_bytes pat.raw m.$f $f "$what"
                holes m.$f $f m.holes
                same_holes m.holes q.holes "$what" $edge
            done
        done
        ok "pattern -S $s -O $fmt, file and NBD, in order and -W:" \
           "$(data_bytes m.$f $f) bytes of data," \
           "qemu-img $(data_bytes q.$f $f)"
    done
done
stop_nbd

# --- values ----------------------------------------------------------------
make_random_image small.raw 1M
for s in 512 1536 1M+512 16M; do
    our_convert small.raw raw m.raw "$(to_bytes "$s")"
    assert_same small.raw m.raw "-S $s"
done
ok "-S 512, 1536, 1M+512 and 16M are taken"

for s in 1000 16M+512 17M -512 1.5K; do
    rm -f bad.raw
    v=$s
    case $s in *+*) v=$(to_bytes "$s") ;; esac
    expect_exit 2 $TMO "$T" convert -S "$v" small.raw bad.raw
    stderr_one_line
    stderr_has "-S '$v'"
    assert_absent bad.raw "-S $v"
done
ok "-S 1000, 16M+512, 17M, -512, 1.5K: exit 2 naming -S, nothing created"
