#!/usr/bin/env bash
# Signals and exits that lose nothing (issue 27, point 4), and what
# `start` refuses before it opens anything (points 2, 5 and 6):
#
# - a reader that goes away (`| head -c1`) stops the events or the progress
#   bar, never the job: start --json and convert -p finish, exit 0, and the
#   target is complete;
# - SIGHUP is an orderly cancel with the "incomplete" message, exit 129;
# - the first SIGINT says at once what it waits for, even while the target
#   does not answer; the second stops at once;
# - a stall (nothing completes while I/O is in flight) is reported after
#   --stall-warning seconds;
# - every exit of `start --export` flushes the image the export serves: a
#   guest's unflushed write reaches the target (after completion, then quit
#   or SIGTERM) or the source (after a cancel, then SIGINT) with a flush
#   that nbdkit's log filter sees; a failing flush exits 1;
# - stop/enospc without --qmp, --job-id '', --qmp '', --qmp naming an image
#   or the --export socket: exit 2, nothing written or removed;
# - --speed 1E (beyond what a 100 ms slice could count before) runs at full
#   speed rather than stalling.
#
# Waits are on output, files and process exits; every one is bounded.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires timeout cmp head nbdkit nbdcopy qemu-img

TMO="timeout 120"

not_running()
{
    ! kill -0 "$1" 2>/dev/null
}

# bg_tool NAME ARGS...: mirror-tool ARGS in the background, stdout in
# NAME.out, stderr in NAME.err; sets pid.
bg_tool()
{
    local name=$1
    shift
    "$T" "$@" >"$name.out" 2>"$name.err" &
    pid=$!
    track_pid $pid
}

# wait_exit PID SECS: PID exits within SECS; sets rc to its exit code.
wait_exit()
{
    wait_for "$2" "mirror-tool (pid $1) to exit" not_running "$1"
    wait "$1"
    rc=$?
    untrack_pid "$1"
}

# expect_rc NAME WANT: the exit code of NAME's mirror-tool was WANT.
expect_rc()
{
    [ "$rc" = "$2" ] || {
        sed 's/^/    | /' "$1.err" >&2
        fail "$1: exit code $rc, expected $2"
    }
}

# err_has NAME STR...: each STR appears in NAME.err.
err_has()
{
    local s name=$1
    shift
    for s in "$@"; do
        grep -F -q -e "$s" "$name.err" || {
            sed 's/^/    | /' "$name.err" >&2
            fail "$name: stderr lacks \"$s\""
        }
    done
}

# start_nbdkit NAME ARGS...: nbdkit ARGS on NAME.sock; sets uri.
start_nbdkit()
{
    local name=$1
    shift
    nbdkit -f -P "$scratch/$name.pid" -U "$scratch/$name.sock" "$@" \
        >"$name.nbdkit.log" 2>&1 &
    track_pid $!
    wait_for 20 "nbdkit ($name) to serve" test -s "$name.pid"
    uri="nbd+unix:///?socket=$scratch/$name.sock"
}

# --- a reader that goes away --------------------------------------------------
make_random_image src.raw 32M

truncate -s 32M dst.raw
# 2 s of copying at 16M/s: events and the summary come after head is gone.
run $TMO bash -c '"$1" start --json --speed 16M src.raw dst.raw |
                  head -c1 >/dev/null; exit "${PIPESTATUS[0]}"' _ "$T"
[ "$last_rc" = 0 ] || fail "start --json | head -c1: exit code $last_rc"
assert_same src.raw dst.raw "start --json | head -c1"
stderr_has "stdout: Broken pipe; events are no longer printed"
ok "start --json | head -c1: the job completes (exit 0, target == source)"

run $TMO bash -c '"$1" convert -p -r 16M src.raw conv.raw 2>&1 |
                  head -c1 >/dev/null; exit "${PIPESTATUS[0]}"' _ "$T"
[ "$last_rc" = 0 ] || fail "convert -p 2>&1 | head -c1: exit code $last_rc"
assert_same src.raw conv.raw "convert -p 2>&1 | head -c1"
ok "convert -p 2>&1 | head -c1: the copy completes (exit 0, target == source)"

# --- SIGHUP -------------------------------------------------------------------
truncate -s 32M hup.raw
bg_tool hup start --json --speed 1M src.raw hup.raw
wait_for 20 "hup: the job to run" grep -q '"status":"running"' hup.out
kill -HUP "$pid"
wait_exit "$pid" 30
expect_rc hup 129
err_has hup "SIGHUP: cancelling the job; waiting for" \
    "interrupted by SIGHUP; the target 'hup.raw' is incomplete"
ok "SIGHUP: an orderly cancel, the target called incomplete, exit 129"

# --- the first SIGINT while the target does not answer -------------------------
# nbdkit logs each write when it arrives (log before delay), then holds it
# for a minute.
start_nbdkit stall --filter=log --filter=delay memory size=32M \
    logfile="$scratch/stall.log" wdelay=60
bg_tool int start src.raw "$uri"
wait_for 30 "int: a write to reach the target" grep -q ' Write id=' stall.log
kill -INT "$pid"
wait_for 10 "int: the first SIGINT to say what it waits for" grep -q \
    'SIGINT: cancelling the job; waiting for [0-9]* requests in flight' \
    int.err
wait_exit "$pid" 30
expect_rc int 130
err_has int "the target '$uri' is incomplete"
ok "first SIGINT with the target stalled: says what it waits for; exit 130"

# Reads the source holds for a minute (the stall warning says when they
# are in flight): a cancel cannot end them; the second SIGINT stops at
# once.
start_nbdkit rstall --filter=delay file "$scratch/src.raw" rdelay=60
truncate -s 32M int2.raw
bg_tool int2 start --stall-warning 1 "$uri" int2.raw
wait_for 30 "int2: reads in flight to stall" \
    grep -q 'no I/O completed for 1 s' int2.err
kill -INT "$pid"
wait_for 10 "int2: the first SIGINT to say what it waits for" grep -q \
    'SIGINT: cancelling the job; waiting for [0-9]* requests in flight' \
    int2.err
kill -INT "$pid"
wait_exit "$pid" 10
expect_rc int2 130
err_has int2 "interrupted again by SIGINT; the target 'int2.raw' is incomplete"
ok "second SIGINT while a source read hangs: exit 130 at once"

# --- no progress ----------------------------------------------------------------
# One 1 MiB write that the target holds for 3 s.
head -c 1M src.raw >small.raw
start_nbdkit slow --filter=delay memory size=1M delay-write=3
bg_tool slow start --stall-warning 1 --chunk-size 1M small.raw "$uri"
wait_exit "$pid" 60
expect_rc slow 0
err_has slow "no I/O completed for 1 s; 1 requests in flight" \
    "I/O completes again after"
expect_ok $TMO nbdcopy "$uri" slow.out.raw
assert_same small.raw slow.out.raw "slow: the target"
ok "--stall-warning 1: a stalled write is reported, then its completion"

expect_exit 2 "$T" start --stall-warning -1 small.raw slow.out.raw
stderr_has "--stall-warning '-1'"
ok "--stall-warning -1 is refused (exit 2)"

# --- every exit of start --export flushes what the export serves ----------------
# start_live NAME SRC TGT ARGS...: start --qmp-wait --export in the
# background; sets pid, qmp_sock, exp.
start_live()
{
    local name=$1 s=$2 t=$3
    shift 3
    bg_tool "$name" start --qmp "$scratch/$name.qmp" --qmp-wait \
        --export "unix:$scratch/$name.nbd" "$@" "$s" "$t"
    qmp_sock=$scratch/$name.qmp
    exp="nbd+unix:///?socket=$scratch/$name.nbd"
    wait_for 20 "$name: to listen" test -S "$qmp_sock"
}

# ready_and_complete NAME: start the job, READY, complete, the export
# serves the target.
ready_and_complete()
{
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_READY --timeout 100 \
        "$qmp_sock" query-jobs
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 100 \
        "$qmp_sock" block-job-complete '{"device": "mirror"}'
    wait_for 20 "$1: the export to serve the target" \
        grep -q 'serving the target' "$1.err"
}

# guest_write LOG: a guest writes 64 KiB at 0 through the export without
# flushing (nbdcopy flushes only with --flush); the write reached the
# image LOG logs, and no flush followed it.  Sets write_line.
head -c 64K /dev/urandom >guest.raw
guest_write()
{
    expect_ok $TMO nbdcopy guest.raw "$exp"
    write_line=$(grep -n ' Write id=.*count=0x10000 ' "$1" | tail -1 |
                 cut -d: -f1)
    [ -n "$write_line" ] || fail "the guest's write is not in $1"
    flush_after "$1" "$write_line" &&
        fail "a flush followed the guest's write already: not a test"
    return 0
}

# flush_after LOG LINE: a flush request after line LINE of LOG succeeded.
flush_after()
{
    tail -n +"$(($2 + 1))" "$1" | grep -q ' \.\.\.Flush id=.* return=0'
}

# After completion, then QMP quit.
start_nbdkit fq --filter=log memory size=32M logfile="$scratch/fq.log"
start_live fq src.raw "$uri"
ready_and_complete fq
guest_write fq.log
expect_ok $TMO "$T" qmp "$qmp_sock" quit
wait_exit "$pid" 30
expect_rc fq 0
flush_after fq.log "$write_line" ||
    fail "fq: no flush of the target after the guest's write"
expect_ok $TMO nbdcopy "$uri" fq.final
head -c 64K fq.final | cmp - guest.raw || fail "fq: the guest's write"
ok "completion, guest write without flush, quit: the target is flushed"

# After completion, then SIGTERM.
start_nbdkit ft --filter=log memory size=32M logfile="$scratch/ft.log"
start_live ft src.raw "$uri"
ready_and_complete ft
guest_write ft.log
kill -TERM "$pid"
wait_exit "$pid" 30
expect_rc ft 0
err_has ft "SIGTERM: stopping (interrupt again to stop at once)"
flush_after ft.log "$write_line" ||
    fail "ft: no flush of the target after the guest's write"
ok "completion, guest write without flush, SIGTERM: the target is flushed"

# The target stops answering (its nbdkit is stopped with SIGSTOP) after
# completion and a guest write: the exit flush waits; the second SIGTERM
# exits at once and says so.
start_nbdkit fp memory size=32M
start_live fp src.raw "$uri"
ready_and_complete fp
expect_ok $TMO nbdcopy guest.raw "$exp"
stop_process "$(cat fp.pid)"
kill -TERM "$pid"
wait_for 10 "fp: SIGTERM to say it stops" grep -q 'SIGTERM: stopping' fp.err
kill -TERM "$pid"
wait_exit "$pid" 10
expect_rc fp 143
err_has fp "interrupted again by SIGTERM; exiting without the final flush"
kill -CONT "$(cat fp.pid)"
ok "the exit flush hangs: a second SIGTERM exits at once (143), said"

# A cancel, then SIGINT: the export served the source (nbdkit's file
# plugin over cn.raw), which is flushed.
cp src.raw cn.raw
start_nbdkit cn --filter=log file "$scratch/cn.raw" \
    logfile="$scratch/cn.log"
truncate -s 32M cn-dst.raw
start_live cn "$uri" cn-dst.raw --speed 1M
expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_CANCELLED --timeout 100 \
    "$qmp_sock" block-job-cancel '{"device": "mirror"}'
wait_for 20 "cn: the export to serve the source" \
    grep -q 'serving the source' cn.err
guest_write cn.log
kill -INT "$pid"
wait_exit "$pid" 30
expect_rc cn 1
flush_after cn.log "$write_line" ||
    fail "cn: no flush of the source after the guest's write"
head -c 64K cn.raw | cmp - guest.raw || fail "cn: the guest's write"
ok "cancel, guest write without flush, SIGINT: the source is flushed"

# The flush fails (blkdebug over the target, failing flushes while the
# trigger file exists): exit 1, said.
truncate -s 32M ff.raw
start_live ff src.raw \
    "blkdebug:error-op=flush,error-errno=EIO,error-file=$scratch/ff.trig:ff.raw"
ready_and_complete ff
: >ff.trig
expect_ok $TMO "$T" qmp "$qmp_sock" quit
wait_exit "$pid" 30
expect_rc ff 1
err_has ff "flush of the target" "Input/output error"
ok "a failing flush at exit: exit 1, said on stderr"

# --- refused before anything is opened ------------------------------------------
truncate -s 32M keep.raw
remember_sum keep.raw
remember_sum src.raw
for policy in stop enospc; do
    for side in source target; do
        expect_exit 2 "$T" start --on-$side-error $policy src.raw keep.raw
        stderr_one_line
        stderr_has "--on-$side-error '$policy' needs --qmp"
    done
done
assert_unchanged keep.raw
ok "--on-source-error/--on-target-error stop|enospc without --qmp: exit 2"

expect_exit 2 "$T" start --job-id '' src.raw keep.raw
stderr_has "--job-id '': must not be empty"
expect_exit 2 "$T" start --qmp '' src.raw keep.raw
stderr_one_line
assert_unchanged keep.raw
ok "--job-id '' and --qmp '': exit 2, target untouched"

expect_exit 2 "$T" start --qmp src.raw src.raw keep.raw
stderr_has "--qmp 'src.raw': is the job's source image"
expect_exit 2 "$T" start --qmp ./keep.raw src.raw keep.raw
stderr_has "is the job's target image"
assert_unchanged src.raw
assert_unchanged keep.raw
expect_exit 2 "$T" start --qmp same.sock --export unix:./same.sock \
    src.raw keep.raw
stderr_has "--qmp 'same.sock': is the --export 'unix:./same.sock' socket"
assert_absent same.sock
assert_unchanged keep.raw
ok "--qmp naming the source, the target or the --export socket: exit 2"

# --- speeds beyond what a slice counted ------------------------------------------
truncate -s 32M fast.raw
expect_ok timeout 60 "$T" start --speed 1E src.raw fast.raw
assert_same src.raw fast.raw "--speed 1E"
ok "--speed 1E copies at full speed (no wrapped 1-byte quota)"

# --- the auto-converge ranges are QMP's ----------------------------------------
expect_exit 2 "$T" start --auto-converge --auto-converge-after 86400001 \
    src.raw keep.raw
stderr_has "--auto-converge-after '86400001': must be between 1 and 86400000"
expect_exit 2 "$T" start --auto-converge --auto-converge-passes 1000001 \
    src.raw keep.raw
stderr_has "--auto-converge-passes '1000001': must be between 0 and 1000000"
assert_unchanged keep.raw
truncate -s 32M passes0.raw
expect_ok "$T" start --auto-converge --auto-converge-passes 0 src.raw \
    passes0.raw
assert_same src.raw passes0.raw "--auto-converge-passes 0"
ok "--auto-converge-after/-passes: QMP's ranges; passes 0 = no pass limit"

# --- guest-first: --guest-priority and --min-copy-rate ---------------------------
expect_exit 2 "$T" start --guest-priority maybe src.raw keep.raw
stderr_has "--guest-priority 'maybe': expected on or off"
stderr_one_line
for bad in 0 -1 1X 16E; do
    expect_exit 2 "$T" start --min-copy-rate "$bad" src.raw keep.raw
    stderr_has "--min-copy-rate '$bad'"
    stderr_one_line
done
assert_unchanged keep.raw
truncate -s 32M gp.raw
expect_ok "$T" start --guest-priority off --min-copy-rate 1 src.raw gp.raw
assert_same src.raw gp.raw "--guest-priority off"
ok "--guest-priority and --min-copy-rate: bad values exit 2, nothing written"
