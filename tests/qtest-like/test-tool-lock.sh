#!/usr/bin/env bash
# Image locking against QEMU's own tools (QEMU's file-posix lock bytes):
# each side refuses the other where QEMU refuses itself, and allows what
# QEMU allows.
#
# - A running `mirror-tool start` (qcow2 source on a qcow2 backing file,
#   raw target), READY: refuses qemu-io writers of its source, its backing
#   file and its target, qemu-io readers of its target, and `qemu-img
#   info` of its source, which `qemu-img info -U` reads; nothing was
#   written; once it exits, qemu-io writes them again.
# - qemu-storage-daemon holding a qcow2 image writable: convert (source,
#   new and existing target), start (source and target), serve, info, map
#   and check refuse it (exit 2, check 1, QEMU's message) and nothing is
#   created or written; -U reads it (info, map, check, a convert source),
#   create takes it as a backing file; locking=off opts out; -U with
#   check -r is refused.
# - qemu-storage-daemon exporting a raw image writable: convert from it and
#   into it (nothing truncated), serve -r beside it is allowed.
# - qemu-nbd -r and `serve -r` share the image both ways; either refuses a
#   resize (qemu-img resize).
# - check -r of an image qemu-nbd -r serves is refused before it writes
#   (its check alone is not), and repairs once qemu-nbd is gone.
#
# Holders are waited for by their sockets (qemu-storage-daemon opens its
# block devices before it listens; qemu-nbd and serve too), never by
# sleeping.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires timeout cmp qemu-img qemu-io qemu-nbd qemu-storage-daemon

TMO="timeout 60"
LOCKMSG="another process using the image"

# qsd NAME FILE DRIVER [EXPORT-WRITABLE]: qemu-storage-daemon holding FILE
# (a node of DRIVER on a file node, read-write) until killed; with
# EXPORT-WRITABLE (on/off) also an NBD export of it.  Returns once it
# listens on NAME.sock, i.e. once FILE is open.  Sets qsd_pid.
qsd()
{
    local name=$1 file=$2 drv=$3 exp=()
    if [ $# -gt 3 ]; then
        exp=(--export "type=nbd,id=e,node-name=top,writable=$4")
    fi
    qemu-storage-daemon \
        --blockdev "driver=file,node-name=f,filename=$scratch/$file" \
        --blockdev "driver=$drv,node-name=top,file=f" \
        --nbd-server "addr.type=unix,addr.path=$scratch/$name.sock" \
        "${exp[@]}" >"$name.log" 2>&1 &
    qsd_pid=$!
    track_pid $qsd_pid
    wait_for 20 "qemu-storage-daemon ($name) to listen" test -S "$name.sock"
}

# stop PID: end a holder and wait for it (its locks go with it).
stop()
{
    kill "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    untrack_pid "$1"
}

# refused CODE WHAT CMD...: CMD exits with CODE, naming the lock WHAT
# ('"write"', 'shared "write"', ...) in QEMU's words.
refused()
{
    local code=$1 what=$2
    shift 2
    expect_exit "$code" "$@"
    stderr_has "Failed to get $what lock" "$LOCKMSG"
}

qemu-img create -q -f qcow2 held.qcow2 8M || fail "qemu-img create"
qemu-io -f qcow2 -c 'write -P 0x11 0 1M' held.qcow2 >/dev/null ||
    fail "qemu-io write"
cp held.qcow2 held.orig
make_random_image() { head -c "$2" /dev/urandom >"$1"; }
make_random_image in.raw 8M

# --- a running start against QEMU's tools ---------------------------------
qemu-img create -q -f qcow2 base.qcow2 8M || fail "qemu-img create"
qemu-io -f qcow2 -c 'write -P 0x44 4M 1M' base.qcow2 >/dev/null ||
    fail "qemu-io write"
qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 src.qcow2 8M ||
    fail "qemu-img create"
qemu-io -f qcow2 -c 'write -P 0x22 0 2M' src.qcow2 >/dev/null ||
    fail "qemu-io write"
make_random_image tgt.raw 8M
cp src.qcow2 src.orig
cp base.qcow2 base.orig
"$T" start --qmp "$scratch/st.qmp" --qmp-wait --export "unix:$scratch/st.nbd" \
    -f qcow2 src.qcow2 tgt.raw >st.out 2>st.err &
st_pid=$!
track_pid $st_pid
wait_for 20 "mirror-tool start to listen" test -S st.qmp
# The first QMP client starts the job (--qmp-wait); this one waits for
# READY: the whole source (with its backing file) is on the target.
expect_ok timeout 150 "$T" qmp --wait-event BLOCK_JOB_READY --timeout 140 \
    "$scratch/st.qmp" query-jobs
cp tgt.raw tgt.orig
refused 1 '"write"' $TMO qemu-io -f qcow2 -c 'write -P 0x33 0 64k' src.qcow2
refused 1 '"write"' $TMO qemu-io -f qcow2 -c 'write -P 0x33 0 64k' \
    base.qcow2
refused 1 '"consistent read"' $TMO qemu-io -f raw -c 'write -P 0x33 0 64k' \
    tgt.raw
refused 1 '"consistent read"' $TMO qemu-io -r -f raw -c 'read 0 64k' tgt.raw
refused 1 'shared "write"' $TMO qemu-img info src.qcow2
expect_ok $TMO qemu-img info -U src.qcow2
grep -q 'file format: qcow2' "$last_out" || fail "qemu-img info -U output"
cmp -s src.qcow2 src.orig || fail "start: the source was written"
cmp -s base.qcow2 base.orig || fail "start: the backing file was written"
cmp -s tgt.raw tgt.orig || fail "start: the target was written"
stop $st_pid
expect_ok qemu-img compare -f qcow2 -F raw src.qcow2 tgt.raw
expect_ok $TMO qemu-io -f qcow2 -c 'write -P 0x33 0 64k' src.qcow2
expect_ok $TMO qemu-io -f qcow2 -c 'write -P 0x33 0 64k' base.qcow2
ok "running start: qemu-io writes no end nor backing, qemu-img info needs -U"

# --- qemu-storage-daemon holds a qcow2 image read-write --------------------
qsd qq held.qcow2 qcow2
refused 2 'shared "write"' "$T" convert held.qcow2 out.raw
[ ! -e out.raw ] || fail "convert: the target was created"
refused 2 '"write"' "$T" convert -O qcow2 in.raw held.qcow2
refused 2 '"write"' "$T" convert -n -O qcow2 in.raw held.qcow2
refused 2 'shared "write"' "$T" start held.qcow2 out.raw
refused 2 '"write"' "$T" start -f raw in.raw held.qcow2
refused 2 '"write"' "$T" serve "unix:$scratch/sv.sock" held.qcow2
[ ! -e sv.sock ] || fail "serve: listens"
refused 2 'shared "write"' "$T" info held.qcow2
refused 2 'shared "write"' "$T" map held.qcow2
refused 1 'shared "write"' "$T" check held.qcow2
cmp -s held.qcow2 held.orig || fail "the held image was written"
ok "qemu-storage-daemon holds a qcow2 image: every command refuses it"

expect_ok "$T" info -U held.qcow2
grep -q 'file format: qcow2' "$last_out" || fail "info -U output"
expect_ok "$T" map --force-share held.qcow2
expect_ok "$T" check -U held.qcow2
expect_ok "$T" convert -U -O raw held.qcow2 out.raw
expect_ok qemu-img compare -U -f qcow2 -F raw held.qcow2 out.raw
# qemu-img create reads a backing file's size whoever holds it: so do we.
expect_ok "$T" create -q -f qcow2 \
    -o backing_file=held.qcow2,backing_fmt=qcow2 ov.qcow2
expect_exit 1 "$T" check -U -r leaks held.qcow2
stderr_one_line
stderr_has "-U cannot be used with -r"
expect_ok "$T" info --open-opts locking=off held.qcow2
expect_exit 2 "$T" info --open-opts locking=maybe held.qcow2
stderr_one_line
stderr_has "locking 'maybe': expected auto, on or off"
cmp -s held.qcow2 held.orig || fail "the held image was written"
ok "-U reads a held image (info, map, check, convert), locking=off opts out"
stop $qsd_pid

# --- qemu-storage-daemon exports a raw image read-write ----------------------
cp in.raw busy.raw
qsd qr busy.raw raw on
rm -f out.raw
refused 2 'shared "write"' "$T" convert -f raw busy.raw out.raw
[ ! -e out.raw ] || fail "convert: the target was created"
make_random_image other.raw 8M
refused 2 '"resize"' "$T" convert -f raw other.raw busy.raw
refused 2 'shared "write"' "$T" convert -n -f raw other.raw busy.raw
cmp -s busy.raw in.raw || fail "convert truncated or wrote the busy image"
# qemu-nbd -r beside qemu-storage-daemon's writable export is allowed.
"$T" serve -r "unix:$scratch/sr.sock" busy.raw >sr.out 2>sr.err &
sr_pid=$!
track_pid $sr_pid
wait_for 20 "serve -r beside the export" grep -qs 'serving on' sr.out
stop $sr_pid
stop $qsd_pid
ok "qemu-storage-daemon exports a raw image: no convert from or into it"

# --- qemu-nbd -r and serve -r share an image -------------------------------
cp in.raw shared.raw
qemu-nbd -r -f raw -k "$scratch/qn.sock" "$scratch/shared.raw" \
    >qn.log 2>&1 &
qn_pid=$!
track_pid $qn_pid
wait_for 20 "qemu-nbd to listen" test -S qn.sock
"$T" serve -r "unix:$scratch/ss.sock" shared.raw >ss.out 2>ss.err &
ss_pid=$!
track_pid $ss_pid
wait_for 20 "serve -r beside qemu-nbd -r" grep -qs 'serving on' ss.out
expect_ok $TMO qemu-img compare -f raw -F raw \
    "nbd+unix:///?socket=$scratch/ss.sock" \
    "nbd+unix:///?socket=$scratch/qn.sock"
refused 1 '"resize"' $TMO qemu-img resize -f raw shared.raw 16M
stop $qn_pid
refused 1 '"resize"' $TMO qemu-img resize -f raw shared.raw 16M
qemu-nbd -r -f raw -k "$scratch/qn2.sock" "$scratch/shared.raw" \
    >qn2.log 2>&1 &
qn_pid=$!
track_pid $qn_pid
wait_for 20 "qemu-nbd -r beside serve -r" test -S qn2.sock
stop $qn_pid
stop $ss_pid
expect_ok $TMO qemu-img resize -f raw shared.raw 16M
ok "qemu-nbd -r and serve -r share an image; neither lets it be resized"

# --- check -r takes a writer's locks before it repairs ---------------------
# A leaked cluster: cluster 4 past qemu-img's four (header, refcount table,
# refcount block, L1), refcount 1, no reference.
qemu-img create -q -f qcow2 lk.qcow2 8M || fail "qemu-img create"
truncate -s $((5 * 65536)) lk.qcow2
python3 -c "
with open('lk.qcow2', 'r+b') as f:
    f.seek(0x20000 + 4 * 2)
    f.write((1).to_bytes(2, 'big'))" || fail "cannot leak a cluster"
expect_exit 3 "$T" check lk.qcow2
cp lk.qcow2 lk.orig
qemu-nbd -r -f qcow2 -k "$scratch/lk.sock" "$scratch/lk.qcow2" \
    >lk.log 2>&1 &
qn_pid=$!
track_pid $qn_pid
wait_for 20 "qemu-nbd to listen" test -S lk.sock
expect_exit 3 "$T" check lk.qcow2
refused 1 '"write"' "$T" check -r leaks lk.qcow2
cmp -s lk.qcow2 lk.orig || fail "check -r wrote an image qemu-nbd -r serves"
stop $qn_pid
expect_ok "$T" check -r leaks lk.qcow2
expect_ok qemu-img check lk.qcow2
ok "check -r refuses an image qemu-nbd -r serves, repairs it once free"
