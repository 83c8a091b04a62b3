#!/usr/bin/env bash
# No NBD wait without a bound (issue 27, point 5): a server that accepts
# and never answers the handshake (connect-timeout, and SIGINT/SIGTERM end
# the wait at once), one connection of two cut mid-copy (retired, its
# requests retried on the other), a server that stops answering requests
# (io-timeout).
#
# The faulty peers are tests/qtest-like/nbd-faulty.py on UNIX sockets,
# in front of nbdkit where a real server is needed; every tool run is
# wrapped in `timeout -k` so that a hang fails the test instead of
# blocking it (a tool that ignores SIGTERM gets SIGKILL).
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires nbdkit python3 timeout cmp truncate

FAULTY=$TEST_SRCDIR/nbd-faulty.py
# --foreground: a signal sent to timeout reaches the tool once (without
# it, timeout passes it on to the tool and then to its whole process
# group, the tool again: a second SIGINT means "stop at once").
TMO="timeout --foreground -k 5 60"

# start_faulty NAME ARGS...: nbd-faulty.py ARGS on ./NAME.sock, events
# in NAME.log; returns once it listens.  Sets uri.
start_faulty()
{
    local name=$1 pid
    shift
    rm -f "$name.sock" "$name.log"
    python3 "$FAULTY" "$1" "$scratch/$name.sock" "${@:2}" >"$name.log" &
    pid=$!
    track_pid "$pid"
    eval "pid_$name=$pid"
    wait_for 20 "$name to listen" test -S "$name.sock"
    uri="nbd+unix:///?socket=$scratch/$name.sock"
}

# elapsed_below SECS START: fail unless less than SECS went by since
# START (a `date +%s%N`).
elapsed_below()
{
    local ms=$(( ($(date +%s%N) - $2) / 1000000 ))
    [ "$ms" -lt $(( $1 * 1000 )) ] ||
        fail "took $ms ms, expected less than $1 s"
}

# log_has_more LOG N: LOG has more than N "accepted" lines.
log_has_more()
{
    [ "$(grep -c accepted "$1")" -gt "$2" ]
}

make_random_image src.img 64M
truncate -s 64M dst.img

# --- connect timeout ----------------------------------------------------
start_faulty silent silent
silent=$uri
t0=$(date +%s%N)
expect_exit 2 $TMO "$T" convert -n --connect-timeout 2 src.img "$silent"
stderr_has "did not finish the handshake within 2 s (connect-timeout)"
stderr_has "socket=$scratch/silent.sock"
elapsed_below 20 "$t0"
ok "convert into a server that never answers gives up after --connect-timeout"

expect_exit 2 $TMO "$T" start --connect-timeout 1 src.img "$silent"
stderr_has "target: '$silent': the NBD server did not finish the handshake" \
    "within 1 s (connect-timeout)"
expect_exit 2 $TMO "$T" start --connect-timeout 1 "$silent" dst.img
stderr_has "source: '$silent': the NBD server did not finish the handshake" \
    "within 1 s (connect-timeout)"
ok "start gives up on a silent source or target after --connect-timeout"

# The default (10 s) bounds it too: `info` has no option.
t0=$(date +%s%N)
expect_exit 2 $TMO "$T" info "$silent"
stderr_has "within 10 s (connect-timeout)"
elapsed_below 40 "$t0"
ok "info gives up on a silent server after the default 10 s"

for bad in -1 86401 1.5 abc ""; do
    expect_exit 2 "$T" convert -n --connect-timeout "$bad" src.img dst.img
    stderr_has "connect-timeout '$bad'"
    stderr_one_line
done
ok "bad --connect-timeout values are refused (exit 2, one line)"

# SIGINT and SIGTERM while connecting (no timeout: only the signal can
# end it) end the process at once with the signal's exit code.
for sig in INT TERM; do
    rc_want=$([ $sig = INT ] && echo 130 || echo 143)
    n_before=$(grep -c accepted silent.log)
    $TMO "$T" convert -n --connect-timeout 0 src.img "$silent" \
        >/dev/null 2>"sig.err" &
    pid=$!
    track_pid "$pid"
    wait_for 20 "the tool to connect" log_has_more silent.log "$n_before"
    t0=$(date +%s%N)
    kill -$sig "$pid"
    wait "$pid"
    rc=$?
    untrack_pid "$pid"
    [ "$rc" = "$rc_want" ] ||
        fail "SIG$sig while connecting: exit $rc, expected $rc_want" \
             "($(cat sig.err))"
    elapsed_below 5 "$t0"
    grep -q "interrupted while connecting" sig.err ||
        fail "SIG$sig: no 'interrupted' message: $(cat sig.err)"
    ok "SIG$sig while connecting ends convert at once (exit $rc_want)"
done
stop_server silent

# --- a dead connection among several is retired --------------------------
# nbdkit memory (multi-conn) behind a proxy that cuts one of the two
# connections after 8 MiB from the client: the copy completes on the
# other, byte for byte.  (It used to fail the whole node: convert exit 1,
# and start --on-target-error ignore retried on the dead node forever.)
# start_cut_proxy INDEX: a fresh nbdkit memory target behind a proxy that
# cuts connection INDEX; sets mem (direct) and uri (through the proxy).
start_cut_proxy()
{
    start_nbdkit mem memory 64M
    mem=$uri
    start_faulty cut cut "$scratch/mem.sock" "$1" $((8 * 1024 * 1024))
}

for victim in 0 1; do
    start_cut_proxy $victim
    expect_ok $TMO "$T" convert -n --connections 2 src.img "$uri"
    grep -q "cut $victim" cut.log || fail "the proxy did not cut $victim"
    read_back "$mem" out.img
    cmp src.img out.img || fail "target differs after connection $victim died"
    ok "convert --connections 2: connection $victim cut, copy complete"
    stop_server cut
    stop_server mem
done

start_cut_proxy 1
expect_ok $TMO "$T" start --connections 2 --on-target-error ignore \
    --json src.img "$uri"
grep -q "cut 1" cut.log || fail "the proxy did not cut a connection"
read_back "$mem" out.img
cmp src.img out.img || fail "target differs after a connection died"
n=$(grep -c BLOCK_JOB_ERROR "$last_out")
[ "$n" = 0 ] || fail "$n BLOCK_JOB_ERROR events for a retired connection"
ok "start --on-target-error ignore: a connection cut, no error, complete"
stop_server cut
stop_server mem

# Both cut: nothing left, the copy fails (exit 1) and says so.
start_cut_proxy all
expect_exit 1 $TMO "$T" convert -n --connections 2 --reconnect-delay 0 \
    src.img "$uri"
stderr_has "incomplete"
ok "convert --connections 2: both connections cut, exit 1"
stop_server cut
stop_server mem

# --- a server that stops answering (io-timeout) ------------------------
# The proxy stalls the connection after 8 MiB: open, nothing forwarded.
start_nbdkit mem memory 64M
mem=$uri
start_faulty stall stall "$scratch/mem.sock" all $((8 * 1024 * 1024))
t0=$(date +%s%N)
expect_exit 1 $TMO "$T" convert -n --connections 1 --io-timeout 2 \
    --reconnect-delay 0 src.img "$uri"
stderr_has "Connection timed out" "is incomplete"
grep -q "stalled 0" stall.log || fail "the proxy did not stall"
elapsed_below 30 "$t0"
ok "convert into a stalled server fails after --io-timeout (ETIMEDOUT)"
stop_server stall
stop_server mem

# One stalled connection of two: retired, the copy completes.
start_nbdkit mem memory 64M
mem=$uri
start_faulty stall stall "$scratch/mem.sock" 1 $((8 * 1024 * 1024))
expect_ok $TMO "$T" convert -n --connections 2 --io-timeout 2 \
    src.img "$uri"
grep -q "stalled 1" stall.log || fail "the proxy did not stall"
read_back "$mem" out.img
cmp src.img out.img || fail "target differs after a connection stalled"
ok "convert --connections 2, one connection stalled: retired, complete"
stop_server stall
stop_server mem

for bad in -1 86401 abc; do
    expect_exit 2 "$T" start --io-timeout "$bad" src.img dst.img
    stderr_has "io-timeout '$bad'"
    stderr_one_line
done
ok "bad --io-timeout values are refused (exit 2, one line)"
