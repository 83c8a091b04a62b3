#!/usr/bin/env bash
# qcow2-lite crash safety (issue 4, qcow2-lite.md §3): mirror-tool is
# killed with SIGKILL at random points of write-heavy runs into qcow2
# images, and every image it leaves behind must still be sound:
#  - `qemu-img check` exits 0 or 3 (leaked clusters), never 2 (corruption)
#    or anything else, and `mirror-tool check` says the same;
#  - the image opens and reads, in mirror-tool and in qemu-img alike, and
#    every 512-byte sector reads as what it held before the run or what
#    the run was writing there (never garbage, never another sector's data);
#  - writing the rest into the crashed image (the same run again) gives an
#    image equal to the source that `qemu-img check` passes (0 or 3).
#
# The kill point, a test hook that only builds with -Dtest-hooks=true
# (CI's test builds; without it this test skips):
# QEMU_MIRROR_QCOW2_DEBUG=kill-at=N makes the qcow2 driver
# raise SIGKILL just before its N-th change to an image file (a write, a
# sync or a truncate), so kills land exactly between two of them without
# any timing; `count` gives the number for a whole run, and N is drawn
# from [1, count] by a seeded generator (the seed is printed; set
# QCOW2_CRASH_SEED to replay a run; worker threads may order data writes
# differently, so a replay is close, not exact).  The smallest caches
# (the target's open options l2-cache-size and refcount-cache-size below
# one table: 4 tables each) make the tables go out while data is still
# being written.  The scenarios: fresh converts at 512-byte clusters
# (refcount blocks allocated all the time), 64 KiB clusters and -c
# (compressed packing); convert -n rewriting a qemu-made compressed image
# (copy-on-write from compressed clusters, frees, zero clusters) and a
# qemu-made 512-byte-cluster image pushed past 8 MiB (refcount table
# growth).  A SIGKILL leaves the page cache intact, so this tests the
# order of the writes; the order of the syncs between them is the
# business of qcow2-lite.md §4.4.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# A SIGKILL leaves the page cache alone, so syncs only cost time here:
# work in memory when we can.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi
_qcow2_lib=$(cd "$(dirname "${TEST_LIB:-$0}")" && pwd)/qcow2-lib.sh
# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires qemu-img python3 timeout cmp
if ! "$T" --version | grep -q '^test hooks: built in'; then
    echo "1..0 # SKIP mirror-tool has no test hooks (-Dtest-hooks=true)"
    _lib_skipped=1
    exit 77
fi
# shellcheck source=tests/qtest-like/qcow2-lib.sh
. "$_qcow2_lib"

SEED=${QCOW2_CRASH_SEED:-$(( $(date +%s) % 1000000 ))}
RANDOM=$SEED
echo "# seed $SEED (replay: QCOW2_CRASH_SEED=$SEED)"
CACHES=(--target-opts "l2-cache-size=1,refcount-cache-size=1")
kills=0
# Python runs once per kill: the system interpreter, not a wrapper that
# takes a second to start (pyenv shims).
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3

# make_data FILE SIZE SEED [KINDS]: extents of zeroes, random bytes and
# compressible text (or of KINDS of them), 512-byte multiples, at
# unaligned places.
make_data()
{
    $PY - "$@" <<'EOF' || fail "make_data $*"
import random, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kinds = (sys.argv[4] if len(sys.argv) > 4 else "zero,random,text,text")
r = random.Random(seed)
buf = bytearray(size)
pos = 0
while pos < size:
    n = min(size - pos, 512 * r.choice([1, 8, 40, 128, 300]))
    kind = r.choice(kinds.split(","))
    if kind == "random":
        buf[pos:pos + n] = r.randbytes(n)
    elif kind == "text":
        buf[pos:pos + n] = ((b"seed %d at %d " % (seed, pos)) * n)[:n]
    pos += n
open(path, "wb").write(buf)
EOF
}

# sectors_old_or_new GOT OLD NEW: every 512-byte sector of GOT equals the
# one of OLD or the one of NEW.
sectors_old_or_new()
{
    $PY - "$@" <<'EOF'
import sys
got, old, new = (open(p, "rb").read() for p in sys.argv[1:4])
if len(got) < len(new):
    print("read %d bytes, expected %d" % (len(got), len(new)))
    sys.exit(1)
for off in range(0, len(new), 512):
    g = got[off:off + 512]
    if g != old[off:off + 512] and g != new[off:off + 512]:
        print("sector at %d is neither old nor new data" % off)
        sys.exit(1)
EOF
}

# calibrate CMD...: run CMD uninterrupted with the counter on; sets
# $total (its file changes) and $near (the kill points around syncs and
# truncates: before the write ahead of one, and before the two changes
# after it, which is where tables go out in order).
calibrate()
{
    local trace p d
    rm -f trace.txt
    QEMU_MIRROR_QCOW2_DEBUG=count=$PWD/trace.txt run "$@"
    [ "$last_rc" = 0 ] || fail "calibration run failed"
    trace=$(cat trace.txt 2>/dev/null)
    total=${#trace}
    near=()
    for (( p = 0; p < total; p++ )); do
        case ${trace:p:1} in
            S|T)
                for d in 0 2 3; do
                    (( p + d >= 1 && p + d <= total )) && near+=($((p + d)))
                done
                ;;
        esac
    done
}

# killed_at N WHAT CMD...: run CMD, killed before file change N; fail
# unless it was killed or (N past its changes) finished.  Sets $how.
killed_at()
{
    local n=$1 what=$2
    shift 2
    # An inner shell reports the kill (to $last_err), not this one.
    run bash -c 'QEMU_MIRROR_QCOW2_DEBUG=kill-at=$0 "$@"; exit $?' \
        "$n" "$@"
    case $last_rc in
        137) how=killed; kills=$((kills + 1)) ;;
        0) how=finished ;;
        *) fail "$what: kill-at=$n: mirror-tool exit $last_rc" ;;
    esac
}

# after_crash IMG OLD NEW WHAT: the crashed image is sound (see the top).
after_crash()
{
    local img=$1 old=$2 new=$3 what=$4 theirs
    run $TMO qemu-img check -f qcow2 "$img"
    theirs=$last_rc
    case $theirs in
        0|3) ;;
        *) fail "$what: qemu-img check exit $theirs (2 = corruption)" ;;
    esac
    if [ "$how" = finished ] && [ "$theirs" != 0 ]; then
        fail "$what: a finished run left leaks"
    fi
    run $TMO "$T" check "$img"
    [ "$last_rc" = "$theirs" ] ||
        fail "$what: mirror-tool check exit $last_rc, qemu-img check $theirs"
    rm -f got.raw
    expect_ok $TMO "$T" convert -f qcow2 "$img" got.raw
    run $TMO qemu-img compare -f qcow2 -F raw "$img" got.raw
    [ "$last_rc" = 0 ] || fail "$what: qemu-img reads other bytes than we do"
    run sectors_old_or_new got.raw "$old" "$new"
    [ "$last_rc" = 0 ] || fail "$what: $(cat "$last_out")"
    if [ "$how" = finished ]; then
        assert_same got.raw "$new" "$what: a finished run"
    fi
    check_rc=$theirs
}

# resume IMG NEW WHAT: write everything again into the crashed image.
resume()
{
    local img=$1 new=$2 what=$3
    expect_ok $TMO "$T" convert -n -O qcow2 "$new" "$img"
    run $TMO qemu-img check -f qcow2 "$img"
    case $last_rc in
        0|3) ;;
        *) fail "$what: after resuming, qemu-img check exit $last_rc" ;;
    esac
    run $TMO qemu-img compare -f qcow2 -F raw "$img" "$new"
    [ "$last_rc" = 0 ] || fail "$what: after resuming, differs from source"
}

# scenario NAME KILLS BASE NEW OLD CONVERT-ARGS...: kill the convert
# KILLS times; BASE is the target before the run ("" = none: the convert
# creates it), OLD its contents as raw.  A run that finishes before its
# kill point (data writes on other threads came first) is checked as
# finished and does not count.
scenario()
{
    local name=$1 want=$2 base=$3 new=$4 old=$5 total n i par what
    local got=0
    shift 5
    rm -f t.qcow2
    [ -z "$base" ] || cp "$base" t.qcow2
    calibrate "$T" convert "${CACHES[@]}" "$@" "$new" t.qcow2
    [ "$total" -gt 0 ] && [ ${#near[@]} -gt 0 ] ||
        fail "$name: no file change or sync counted"
    how=finished
    after_crash t.qcow2 "$old" "$new" "$name, uninterrupted"
    ok "$name: an uninterrupted run makes $total file changes, clean"
    for (( i = 0; got < want && i < 2 * want; i++ )); do
        # Half of the kills anywhere, half next to a sync.
        if (( i % 4 == 1 || i % 4 == 2 )); then
            n=${near[RANDOM % ${#near[@]}]}
        else
            n=$(( RANDOM % total + 1 ))
        fi
        par=
        (( i % 2 )) && par="-m 1"
        what="$name: kill-at=$n/$total${par:+ ($par)}"
        rm -f t.qcow2
        [ -z "$base" ] || cp "$base" t.qcow2
        # shellcheck disable=SC2086
        killed_at "$n" "$what" "$T" convert "${CACHES[@]}" $par "$@" \
            "$new" t.qcow2
        [ "$how" = finished ] || got=$((got + 1))
        [ -e t.qcow2 ] || fail "$what: no image"
        after_crash t.qcow2 "$old" "$new" "$what"
        (( i % 5 )) || resume t.qcow2 "$new" "$what"
        ok "$what: $how; qemu-img check $check_rc, reads old or new data"
    done
    [ "$got" = "$want" ] || fail "$name: $got kills of $want"
}

make_data a.raw $((4 * MiB)) "$SEED"
make_data b.raw $((4 * MiB)) $((SEED + 1))
truncate -s $((4 * MiB)) zero.raw

# Change 1 is the target's: the check of --target-opts before the create
# (an image in a memfd) changes no file, or a kill there leaves no image.
killed_at 1 "convert, kill-at=1" "$T" convert "${CACHES[@]}" -O qcow2 \
    a.raw t.qcow2
[ "$how" = killed ] && [ -e t.qcow2 ] ||
    fail "convert, kill-at=1: $how, $(ls t.qcow2 2>&1)"
ok "convert, kill-at=1: killed with the target created"

scenario "convert, 512 B clusters" 12 "" a.raw zero.raw \
    -O qcow2 -o cluster_size=512
scenario "convert, 64 KiB clusters" 10 "" a.raw zero.raw -O qcow2
scenario "convert -c, 64 KiB clusters" 10 "" a.raw zero.raw -c -O qcow2

# Rewrites of qemu-made images: compressed clusters overwritten in part
# (copy-on-write) and zeroed (freed); and 512-byte clusters whose single
# refcount table cluster (8 MiB of file) must grow.
q qemu-img convert -c -O qcow2 a.raw comp.qcow2
scenario "convert -n over compressed clusters" 12 comp.qcow2 b.raw a.raw \
    -n -O qcow2
# No zeroes: the file must pass 8 MiB.
make_data big.raw $((9 * MiB)) $((SEED + 2)) random,text
q qemu-img create -f qcow2 -o cluster_size=512 s512.qcow2 $((9 * MiB))
q qemu-img convert -n -f raw -O qcow2 a.raw s512.qcow2
truncate -s $((9 * MiB)) a9.raw
dd if=a.raw of=a9.raw conv=notrunc status=none
reftable_at()
{
    od -A n -t u8 --endian=big -j 48 -N 8 "$1" | tr -d ' '
}
cp s512.qcow2 grow.qcow2
expect_ok "$T" convert -n -O qcow2 big.raw grow.qcow2
[ "$(reftable_at grow.qcow2)" != "$(reftable_at s512.qcow2)" ] ||
    fail "the refcount table did not move: no growth to test"
ok "convert -n of big.raw grows qemu's one-cluster refcount table"
scenario "convert -n past 8 MiB, 512 B clusters (table growth)" 6 \
    s512.qcow2 big.raw a9.raw -n -O qcow2

[ "$kills" -ge 50 ] || fail "only $kills kills (at least 50 wanted)"
ok "$kills kills in all, every image sound"
