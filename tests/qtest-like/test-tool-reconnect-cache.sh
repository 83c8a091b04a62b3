#!/usr/bin/env bash
# A target server that dies with writes it acknowledged but never
# flushed: nbdkit's cache filter in writeback mode (cache=writeback) over
# a file keeps every write in its cache until a flush, and loses the
# cache when killed, as a host crash loses a server's page cache.  The
# job (start and convert, with --reconnect-delay 30) must copy those
# ranges again once the target is back: kill -9 nbdkit in the middle of
# the bulk copy, start it again on the same socket over the same file,
# and the job completes with a byte-identical target (without and with
# --state-file).  Then: a state file that cannot be removed at completion
# (its directory made immutable, chattr +i, which stops root too) fails
# the job with one line naming the file, for start and convert, and the
# rerun completes.
#
# Waits are on the progress line (-p), the server's pid file and process
# exits.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires nbdkit timeout cmp truncate tr grep

TMO="timeout 120"
SIZE=64M

# progress_at_least ERRFILE PCT: the last progress line (-p) in ERRFILE
# says at least PCT percent.
progress_at_least()
{
    local p
    p=$(tr '\r' '\n' <"$1" | grep -o '[0-9.]*%' | tail -n 1)
    p=${p%%.*}
    [ -n "$p" ] && [ "$p" -ge "$2" ]
}

# cache_target: tgt.raw, SIZE of zeroes, behind nbdkit's writeback cache
# on tgt.sock (sets uri).
cache_target()
{
    rm -f tgt.raw
    truncate -s "$SIZE" tgt.raw || fail "truncate tgt.raw"
    start_nbdkit tgt --filter=cache file tgt.raw cache=writeback
}

# kill_target_at PID ERRFILE PCT: once the job's progress passed PCT%,
# kill -9 the target's nbdkit (its cache is lost) and start it again on
# the same socket over the same file.  Fails if the job ended before.
kill_target_at()
{
    wait_for 60 "progress to reach $3%" progress_at_least "$2" "$3"
    kill -0 "$1" 2>/dev/null || fail "the job ended before the kill"
    stop_server tgt
    start_nbdkit tgt --filter=cache file tgt.raw cache=writeback
}

# fresh_output: empty $last_out and $last_err before a job starts in the
# background (the waits read them: nothing of the last job may remain).
fresh_output()
{
    : >"$last_out"
    : >"$last_err"
}

# wait_job PID WHAT: PID exits 0.
wait_job()
{
    local rc
    wait "$1"
    rc=$?
    untrack_pid "$1"
    last_cmd=$2 last_rc=$rc
    [ "$rc" = 0 ] || fail "$2: exit code $rc"
}

make_random_image src.raw "$SIZE"

# ---- start ----
cache_target
fresh_output
"$T" start -p --speed 16M --reconnect-delay 30 src.raw "$uri" \
    >"$last_out" 2>"$last_err" &
pid=$!
track_pid $pid
kill_target_at $pid "$last_err" 40
wait_job $pid "start"
stderr_has "target '$uri': reconnected after"
stop_server tgt
assert_same src.raw tgt.raw "start: after the target lost its cache"
ok "start: a target that lost acknowledged writes gets them again"

# ---- convert ----
cache_target
fresh_output
"$T" convert -n -p -r 16M --reconnect-delay 30 src.raw "$uri" \
    >"$last_out" 2>"$last_err" &
pid=$!
track_pid $pid
kill_target_at $pid "$last_err" 40
wait_job $pid "convert"
stderr_has "target '$uri': reconnected after"
stop_server tgt
assert_same src.raw tgt.raw "convert: after the target lost its cache"
ok "convert: a target that lost acknowledged writes gets them again"

# ---- convert --state-file: what is copied again is not known good ----
cache_target
fresh_output
"$T" convert -n -p -r 16M --reconnect-delay 30 --state-file st \
    src.raw "$uri" >"$last_out" 2>"$last_err" &
pid=$!
track_pid $pid
kill_target_at $pid "$last_err" 50
wait_job $pid "convert --state-file"
stop_server tgt
assert_same src.raw tgt.raw "convert --state-file: after the lost cache"
[ ! -e st ] || fail "convert --state-file: the state file stayed"
ok "convert --state-file: the same, and the state file goes"

# ---- a state file that cannot be removed at completion ----
# immutable_dir_works: chattr +i on a directory stops even root from
# removing a file in it (ext4, xfs, btrfs, tmpfs >= 6.0).
immutable_dir_works()
{
    mkdir -p probe && : >probe/f && chattr +i probe 2>/dev/null || return 1
    if rm -f probe/f 2>/dev/null && [ ! -e probe/f ]; then
        chattr -i probe
        return 1
    fi
    chattr -i probe
}

# stuck_state CMD...: run CMD (a rate-limited job with --state-file sd/st
# and -p) in the background; once sd/st exists (it is made before the job
# starts), make sd immutable.  CMD must exit 1 with one line naming the
# file.
stuck_state()
{
    local pid rc
    rm -rf sd && mkdir sd
    fresh_output
    "$@" >"$last_out" 2>"$last_err" &
    pid=$!
    track_pid $pid
    wait_for 30 "the state file" test -s sd/st
    chattr +i sd || fail "chattr +i sd"
    wait "$pid"
    rc=$?
    untrack_pid $pid
    chattr -i sd
    last_cmd="$*" last_rc=$rc
    [ "$rc" = 1 ] || fail "expected exit code 1, got $rc"
    # The progress bar aside, one line: the file, why, incomplete.
    tr '\r' '\n' <"$last_err" | grep -v '%' | grep -v '^$' >err.lines
    [ "$(wc -l <err.lines)" = 1 ] || fail "not one error line"
    grep -q -F "cannot remove the state file 'sd/st': Operation not permitted; the target 'out.raw' is incomplete" \
        err.lines || fail "the error line: $(cat err.lines)"
    [ -s sd/st ] || fail "the state file is gone"
}

if command -v chattr >/dev/null && immutable_dir_works; then
    rm -f out.raw
    stuck_state "$T" convert -p -r 32M --state-file sd/st src.raw out.raw
    expect_ok $TMO "$T" convert --state-file sd/st src.raw out.raw
    stderr_has "resuming from 'sd/st'"
    assert_same src.raw out.raw "convert: rerun after the stuck state file"
    [ ! -e sd/st ] || fail "convert: the rerun left the state file"
    ok "convert: a state file that cannot be removed fails it; rerun ok"

    rm -f out.raw && truncate -s "$SIZE" out.raw
    stuck_state "$T" start -p --speed 32M --state-file sd/st src.raw out.raw
    expect_ok $TMO "$T" start --state-file sd/st src.raw out.raw
    assert_same src.raw out.raw "start: rerun after the stuck state file"
    [ ! -e sd/st ] || fail "start: the rerun left the state file"
    ok "start: a state file that cannot be removed fails it; rerun ok"
else
    ok "a state file that cannot be removed # SKIP no chattr +i here"
    ok "start: the same # SKIP no chattr +i here"
fi
