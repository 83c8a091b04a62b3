#!/usr/bin/env bash
# Resume from a state file after kill -9 (issue 20, point 2; the engine's
# own end-to-end test is test-tool-resume.sh): at least 50 kills at
# random instants per run, each followed by the same command run
# to completion and `cmp` of source and target:
#
# - convert mid-copy, into a new file or (a power cut of the target) into
#   an nbdkit whose cache filter loses every write not flushed when nbdkit
#   is killed together with mirror-tool;
# - start mid-bulk, into a file or such an nbdkit;
# - start in the sync stage (after READY) while fio, the guest, writes
#   through the export: every write fio saw acknowledged is in the source,
#   and so must be in the resumed target;
# - start around completion (block-job-complete just answered, dirty data
#   left to copy at a limited speed).
#
# Also: a run killed late resumes with most bytes known good and copies
# less; torn or corrupt state files (truncated, a flipped byte, zeroed,
# garbage) are refused (exit 2, nothing written) or trusted for nothing
# (the result is byte-identical), while the intact file is trusted (the
# control); the state file of another pair or other job parameters is
# refused (exit 2, one line, nothing written); a completed job removes
# its state file, a cancelled or failed one leaves it.
#
# Kill instants are random (seeded; the seed is printed, and on failure
# with the command that replays it: `test-tool-resume-kill.sh SEED`): a
# fraction of the job's progress bar, or a delay measured from an event
# (READY, a guest write, the reply to block-job-complete).  Waits for
# readiness are on output, files and process exits; every one is bounded.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires timeout cmp python3 nbdkit qemu-io fio
if ! fio --enghelp=nbd >/dev/null 2>&1; then
    echo "1..0 # SKIP fio has no nbd engine"
    _lib_skipped=1
    exit 77
fi

SEED=${1:-$RANDOM}
RANDOM=$SEED
echo "# seed $SEED (replay: MIRROR_TOOL=... $0 $SEED)"

# The kills of each kind; the run fails below 50 in all.
N_CONVERT=16
N_BULK=14
N_SYNC=12
N_COMPLETE=8
kills=0
work=$scratch                   # where kills.log is (tmpfs below)

_resume_exit()
{
    local rc=$?
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        {
            echo "FAILED with seed $SEED: replay with" \
                "MIRROR_TOOL=$T $0 $SEED"
            echo "  the last kills (kills.log):"
            tail -5 "$work/kills.log" 2>/dev/null | sed 's/^/    /'
        } >&2
    fi
    _lib_cleanup
}
trap _resume_exit EXIT

TMO="timeout 120"
SIZE=$((256 * 1024 * 1024))
# On tmpfs when there is one: cmp of 256 MiB twice as fast.  Durability
# is not what tmpfs would hide: kill -9 loses no page cache either way;
# the power cuts are nbdkit's (see start_target).
if shm_scratch; then
    cd "$shm" || fail "cd $shm"
fi
# nbdkit's cache filter keeps its cache file in $TMPDIR.
export TMPDIR=$PWD
work=$PWD

# rnd LO HI: sets r to a random integer in [LO, HI].
rnd()
{
    r=$(( $1 + (RANDOM * 32768 + RANDOM) % ($2 - $1 + 1) ))
}

# rnd_sleep LO_MS HI_MS: sleep a random time in [LO, HI] ms; sets delay_ms.
# This picks the instant of a kill: it synchronises nothing.
rnd_sleep()
{
    rnd "$1" "$2"
    delay_ms=$r
    sleep "$(printf '%d.%03d' $((r / 1000)) $((r % 1000)))"
}

# note TEXT: one line about the current kill, for the failure report.
note()
{
    echo "${SECONDS}s $*" >>"$work/kills.log"
}

# bg NAME CMD...: CMD in the background, stdout in NAME.out, stderr in
# NAME.err (emptied first: the child's redirection may come after the
# caller's first look); sets pid.
bg()
{
    local name=$1
    shift
    : >"$name.out"
    : >"$name.err"
    "$@" >"$name.out" 2>"$name.err" &
    pid=$!
    track_pid $pid
}

# reap PID: wait for PID; sets rc to its exit code.
reap()
{
    { wait "$1"; } 2>/dev/null      # without bash's "Killed" line
    rc=$?
    untrack_pid "$1"
}

# kill9 PID [PID2]: SIGKILL PID (and at once PID2, a target server: a power
# cut of both); reap PID.  True when the kill hit the running process
# (exit code 137), false when it had exited by itself.
kill9()
{
    kill -KILL "$@" 2>/dev/null
    reap "$1"
    if [ -n "${2:-}" ]; then
        { wait "$2"; } 2>/dev/null
        untrack_pid "$2"
    fi
    [ "$rc" = 137 ]
}

# show NAME: NAME.err and NAME.out, indented, on stderr.
show()
{
    {
        echo "  $1.err:"
        tr '\r' '\n' <"$1.err" | grep -v '^\[' | sed 's/^/    | /' | tail -20
        echo "  $1.out:"
        sed 's/^/    | /' "$1.out" | tail -20
    } >&2
}

# expect_rc NAME WANT: the last reaped command (NAME) exited WANT.
expect_rc()
{
    [ "$rc" = "$2" ] || { show "$1"; fail "$1: exit code $rc, expected $2"; }
}

# resumed NAME STATE: NAME.err says it resumed from STATE, with N the
# size; sets known (its K).
resumed()
{
    local line
    line=$(grep -F "mirror-tool: resuming from '$2': " "$1.err" | tail -1)
    [ -n "$line" ] || { show "$1"; fail "$1: no 'resuming from' line"; }
    known=${line##*: }
    known=${known%% of $SIZE bytes known good}
    case $known in
        ''|*[!0-9]*) fail "$1: bad resume line: $line" ;;
    esac
    [ "$known" -le "$SIZE" ] || fail "$1: bad resume line: $line"
}

# same SRC TGT WHAT: byte-identical, or fail naming the kill.
same()
{
    assert_same "$1" "$2" "$3 (see kills.log)"
}

# keep FILE / kept FILE WHAT: FILE was not written since keep ran: the
# same inode, size and modification time (every write changes that);
# kept_bytes FILE WHAT: and the same bytes (cmp with a copy: a sha256 of
# 256 MiB costs a second here).
declare -A _kept
_stat()
{
    stat -c '%i %s %y' "$1"
}

keep()
{
    cp --sparse=always "$1" "$1.kept" || fail "cp $1"
    _kept[$1]=$(_stat "$1")
}

kept()
{
    [ "$(_stat "$1")" = "${_kept[$1]}" ] || fail "$2: '$1' was written"
}

kept_bytes()
{
    kept "$@"
    cmp -s "$1" "$1.kept" || fail "$2: '$1' was modified"
}

# The source: 256 MiB, in each 8 MiB 512 KiB of random data, and in every
# fourth also 512 KiB of allocated zeroes, the rest holes: the job copies
# 16 MiB of data (at 48 MiB/s in most cases: 0.35 s) and makes the rest
# clean quickly, so that the state is written (every 64 MiB made clean)
# several times per run.  Targets start as junk (1 MiB in each 8 MiB,
# where the source has holes) or empty.
data=()
junk=()
for (( b = 0; b < 32; b++ )); do
    data+=("$((b * 8))M:512K")
    junk+=("$((b * 8 + 2))M:1M")
done
make_sparse_image base.raw 256M "${data[@]}"
for (( b = 1; b < 32; b += 4 )); do
    write_zeroes base.raw "$((b * 8 + 4))M:512K"
done
make_sparse_image junk.raw 256M "${junk[@]}"

# junk_target FILE: FILE (the same inode, when it exists: a state file
# names the target's) holds a copy of junk.raw.
junk_target()
{
    cp --sparse=always junk.raw "$1"
}

# nbdkit_up NAME ARGS...: nbdkit ARGS on $scratch/NAME.sock; returns once
# it listens.  Sets uri and tpid.
nbdkit_up()
{
    local name=$1
    shift
    rm -f "$scratch/$name.pid" "$scratch/$name.sock"
    nbdkit -f --exit-with-parent -U "$scratch/$name.sock" \
        -P "$scratch/$name.pid" "$@" 2>"$name.log" &
    tpid=$!
    track_pid $tpid
    wait_for 20 "nbdkit ($name) to listen" _nbdkit_listening "$name"
    uri="nbd+unix:///?socket=$scratch/$name.sock"
}

_nbdkit_listening()
{
    kill -0 "$tpid" 2>/dev/null ||
        fail "nbdkit ($1) exited: $(cat "$1.log")"
    test -s "$scratch/$1.pid"
}

# nbdkit_down: stop the nbdkit of nbdkit_up.
nbdkit_down()
{
    kill -KILL "$tpid"
    { wait "$tpid"; } 2>/dev/null
    untrack_pid "$tpid"
    tpid=
}

# start_target NAME FILE: nbdkit serving FILE with the cache filter in
# writeback mode: what was not flushed is lost when nbdkit is killed, as a
# power cut loses a disk's cache.  Sets uri and tpid.
start_target()
{
    nbdkit_up "$1" --filter=cache file "$work/$2" cache=writeback
}

# completed_before STATE SRC TGT: the kill came after the job completed
# (it removed STATE, then was killed before it exited): TGT must equal SRC
# then (the final flush came before the removal; TGT is the file under
# nbdkit after a power cut).  False while STATE exists (a kill mid-job).
completed_before()
{
    [ -e "$1" ] && return 1
    same "$2" "$3" "killed after the state file was removed, the target"
}

# --- convert, killed mid-copy ------------------------------------------------
# 16 MiB of data at 48 MiB/s: about 0.35 s, progress drawn every 100 ms.
# The kill comes at a random point (2..70%) of the progress bar plus up to
# 80 ms.  Every third target is nbdkit with the cache filter (a power
# cut), the others new files; -W or in order at random.
i=0
tries=0
while [ $i -lt $N_CONVERT ] && [ $tries -lt $((N_CONVERT * 3)) ]; do
    tries=$((tries + 1))
    rm -f c.raw c.state
    power=$(( i % 3 == 2 ))       # every third: a power cut
    rnd 0 1; oob=$r
    opts=(-p -r 48M --state-file c.state)
    [ "$oob" = 1 ] && opts+=(-W)
    if [ "$power" = 1 ]; then
        junk_target c.raw
        start_target ct c.raw
        tgt=$uri
        opts+=(-n)
    else
        tgt=c.raw
        tpid=
    fi
    rnd 2 70; pct=$r
    bg conv "$T" convert "${opts[@]}" base.raw "$tgt"
    wait_progress 60 "$pid" conv.err "$pct"
    rnd_sleep 0 80
    at=$(progress_pct conv.err)
    if ! kill9 "$pid" $tpid; then
        note "convert $i: finished before the kill (at $pct% + ${delay_ms} ms)"
        continue
    fi
    if completed_before c.state base.raw c.raw; then
        note "convert $i: completed before the kill (at $pct% + ${delay_ms} ms)"
        continue
    fi
    kills=$((kills + 1))
    note "convert $i: power=$power -W=$oob killed at $pct%+${delay_ms}ms" \
        "(bar $at%)"
    [ "$power" = 1 ] && start_target ct c.raw
    run $TMO "$T" convert "${opts[@]}" base.raw "$tgt"
    [ "$last_rc" = 0 ] || fail "convert $i: the resumed run failed"
    cp "$last_err" conv.err
    resumed conv c.state
    note "  resumed with $known bytes known good"
    [ "$power" = 1 ] && nbdkit_down
    same base.raw c.raw "convert $i"
    assert_absent c.state "convert $i: the completed job's state file"
    i=$((i + 1))
done
[ $i = $N_CONVERT ] || fail "convert: only $i of $tries kills hit the job"
echo "# ${SECONDS}s"
ok "convert: $i kills -9 mid-copy (some with the target's cache), resumed," \
    "target == source"

# --- start, killed mid-bulk --------------------------------------------------
# The target starts as junk, so every granule has to be written (data or
# zeroes).
i=0
tries=0
while [ $i -lt $N_BULK ] && [ $tries -lt $((N_BULK * 3)) ]; do
    tries=$((tries + 1))
    rm -f b.state
    junk_target b.raw
    power=$(( i % 3 == 2 ))       # every third: a power cut
    if [ "$power" = 1 ]; then
        start_target bt b.raw
        tgt=$uri
    else
        tgt=b.raw
        tpid=
    fi
    cmd=("$T" start -p --speed 48M --state-file b.state base.raw "$tgt")
    rnd 2 70; pct=$r
    bg bulk "${cmd[@]}"
    wait_progress 60 "$pid" bulk.err "$pct"
    rnd_sleep 0 80
    at=$(progress_pct bulk.err)
    if ! kill9 "$pid" $tpid; then
        note "bulk $i: finished before the kill (at $pct% + ${delay_ms} ms)"
        continue
    fi
    if completed_before b.state base.raw b.raw; then
        note "bulk $i: completed before the kill (at $pct% + ${delay_ms} ms)"
        continue
    fi
    kills=$((kills + 1))
    note "bulk $i: power=$power killed at $pct%+${delay_ms}ms (bar $at%)"
    [ "$power" = 1 ] && start_target bt b.raw
    bg bulk "${cmd[@]}"
    reap "$pid"
    expect_rc bulk 0
    resumed bulk b.state
    note "  resumed with $known bytes known good"
    [ "$power" = 1 ] && nbdkit_down
    same base.raw b.raw "bulk $i"
    assert_absent b.state "bulk $i: the completed job's state file"
    i=$((i + 1))
done
[ $i = $N_BULK ] || fail "bulk: only $i of $tries kills hit the job"
echo "# ${SECONDS}s"
ok "start: $i kills -9 mid-bulk (some with the target's cache), resumed," \
    "target == source"

# --- start with an export: the live cases ------------------------------------
not_running()
{
    ! kill -0 "$1" 2>/dev/null
}

src_changed()
{
    [ "$(stat -c %y "$1")" != "$2" ]
}

# live_start NAME: run "${cmd[@]}" (start --qmp $scratch/NAME.qmp
# --qmp-wait --export unix:$scratch/NAME.nbd ...) in the background, start
# the job and wait for READY; sets pid, qmp_sock, exp.
live_start()
{
    qmp_sock=$scratch/$1.qmp
    exp="nbd+unix:///?socket=$scratch/$1.nbd"
    rm -f "$qmp_sock"           # a killed run's socket: not the new one
    bg "$1" "${cmd[@]}"
    wait_for 20 "$1: QMP to listen" test -S "$qmp_sock"
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_READY --timeout 100 \
        "$qmp_sock" query-jobs
}

# live_finish NAME: complete the job started by live_start, QMP quit, exit
# code 0.
live_finish()
{
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 100 \
        "$qmp_sock" block-job-complete '{"device": "mirror"}'
    grep -q '"error"' "$last_out" && fail "$1: completed with an error"
    expect_ok $TMO "$T" qmp "$qmp_sock" quit
    wait_for 30 "$1: mirror-tool to exit" not_running "$pid"
    reap "$pid"
    expect_rc "$1" 0
}

# live_target NAME FILE POWER: the target: FILE, or (POWER 1) nbdkit with
# the cache filter over it; sets tgt and tpid.
live_target()
{
    junk_target "$2"
    if [ "$3" = 1 ]; then
        start_target "$1" "$2"
        tgt=$uri
    else
        tgt=$2
        tpid=
    fi
}

# --- in the sync stage, fio writing through the export -----------------------
# After READY the job (background, or write-blocking every other time)
# copies at 2..16 MiB/s and fio writes random 4k..64k blocks at 8 MiB/s
# anywhere in the disk; the kill comes 0..400 ms after its first write
# that reached the source.  Every write fio saw acknowledged is in s.src:
# the resumed target must have it.
for (( i = 0; i < N_SYNC; i++ )); do
    rm -f s.state
    cp base.raw s.src
    power=$(( i % 3 == 2 ))       # every third: a power cut
    mode=background
    [ $((i % 2)) = 1 ] && mode=write-blocking
    live_target st s.raw "$power"
    cmd=("$T" start --qmp "$scratch/sync.qmp" --qmp-wait --copy-mode "$mode"
         --export "unix:$scratch/sync.nbd" --state-file s.state s.src "$tgt")
    live_start sync
    # Copies slower than fio writes: dirty granules pile up.
    rnd 2 16; speed=$r
    expect_ok $TMO "$T" qmp "$qmp_sock" block-job-set-speed \
        "{\"device\": \"mirror\", \"speed\": $((speed << 20))}"
    before=$(stat -c %y s.src)
    rnd 1 1000000; fseed=$r
    fio --name=guest --thread --ioengine=nbd --uri="$exp" --rw=randwrite \
        --bsrange=4k-64k --iodepth=8 --rate=8M --size=$SIZE --time_based \
        --runtime=60 --randseed=$fseed >fio.out 2>&1 &
    fio_pid=$!
    track_pid $fio_pid
    wait_for 20 "sync $i: fio to write" src_changed s.src "$before"
    rnd_sleep 0 400
    kill9 "$pid" $tpid || fail "sync $i: mirror-tool exited by itself"
    kills=$((kills + 1))
    note "sync $i: power=$power $mode, fio seed $fseed," \
        "copies at $speed MiB/s," \
        "killed ${delay_ms}ms after its first write"
    [ -e s.state ] || fail "sync $i: killed in the sync stage, no state file"
    # fio retries a dead export for ever: stop it.
    kill -KILL "$fio_pid" 2>/dev/null
    reap "$fio_pid"
    [ "$power" = 1 ] && start_target st s.raw
    live_start sync
    live_finish sync
    resumed sync s.state
    note "  resumed with $known bytes known good"
    [ "$power" = 1 ] && nbdkit_down
    same s.src s.raw "sync $i"
    assert_absent s.state "sync $i: the completed job's state file"
done
echo "# ${SECONDS}s"
ok "start --export: $N_SYNC kills -9 in the sync stage while fio wrote," \
    "resumed, target == source with every acknowledged write"

# --- around completion -------------------------------------------------------
# After READY the speed drops to 4..16 MiB/s, a guest writes 2..8 MiB at
# random places (then stops, as the walkthrough says), block-job-complete
# is answered, and the kill comes 0..400 ms after: before, during or after
# the final copy and the switch-over.  With the state file gone or a
# switched-over record left the job must have completed: the target
# already equals the source, and a rerun refuses a switched-over record.
for (( i = 0; i < N_COMPLETE; i++ )); do
    rm -f k.state
    cp base.raw k.src
    power=$(( i % 3 == 2 ))       # every third: a power cut
    live_target kt k.raw "$power"
    cmd=("$T" start --qmp "$scratch/cpl.qmp" --qmp-wait
         --export "unix:$scratch/cpl.nbd" --state-file k.state k.src "$tgt")
    live_start cpl
    jpid=$pid
    rnd 4 16; speed=$r
    expect_ok $TMO "$T" qmp "$qmp_sock" block-job-set-speed \
        "{\"device\": \"mirror\", \"speed\": $((speed << 20))}"
    rnd 2 8; n=$r
    writes=()
    for (( w = 0; w < n; w++ )); do
        rnd 0 $((SIZE / 65536 - 16)); off=$((r * 65536))
        rnd 1 255
        writes+=(-c "write -P $r $off 1M")
    done
    expect_ok $TMO qemu-io -f raw "${writes[@]}" "$exp"
    bg complete "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 60 \
        "$qmp_sock" block-job-complete '{"device": "mirror"}'
    cpid=$pid
    wait_for 20 "complete $i: block-job-complete answered" test -s complete.out
    rnd_sleep 0 400
    kill9 "$jpid" $tpid || fail "complete $i: mirror-tool exited by itself"
    kills=$((kills + 1))
    reap "$cpid"
    if grep -q 'serving the target' cpl.err; then where=after; else
        where=before; fi
    note "complete $i: power=$power $n MiB at ${speed} MiB/s, killed" \
        "${delay_ms}ms after the reply ($where the switch-over)"
    [ "$power" = 1 ] && start_target kt k.raw
    if [ ! -e k.state ]; then
        note "  no state file left: the job had completed"
        same k.src k.raw "complete $i: the state file is gone, the target"
    fi
    if [ -e k.state ] &&
       [ "$(od -A n -t u4 -j 52 -N 4 k.state | tr -d ' ')" = 1 ]; then
        # A switched-over record (docs/mirror-tool.md, "State file
        # format"): the job completed; the rerun refuses, writing nothing.
        note "  a switched-over record: the job had completed"
        same k.src k.raw "complete $i: switched over, the target"
        bg cpl "${cmd[@]}"
        reap "$pid"
        expect_rc cpl 2
        grep -q "the job completed and the target took over at" cpl.err ||
            { show cpl; fail "complete $i: not refused as switched over"; }
        rm k.state
    else
        had_state=$([ -e k.state ] && echo 1)
        live_start cpl
        live_finish cpl
        [ -n "$had_state" ] && resumed cpl k.state
    fi
    [ "$power" = 1 ] && nbdkit_down
    same k.src k.raw "complete $i"
    assert_absent k.state "complete $i: the completed job's state file"
done
echo "# ${SECONDS}s"
ok "start --export: $N_COMPLETE kills -9 around completion, resumed," \
    "target == source"

# --- a late kill leaves most of the work done --------------------------------
# At 8 MiB/s (2 s), killed once the bar shows 90%: the resumed run writes
# less than half of what a full run writes (all of the target: it is
# junk), by the job's counters (--json: there is no "resuming" line).
# summary_bytes NAME: bytes-copied + bytes-zeroed of NAME.out's summary.
summary_bytes()
{
    local c z
    c=$(sed -n 's/.*"bytes-copied": \([0-9]*\).*/\1/p' "$1.out")
    z=$(sed -n 's/.*"bytes-zeroed": \([0-9]*\).*/\1/p' "$1.out")
    [ -n "$c" ] && [ -n "$z" ] || { show "$1"; fail "$1: no summary"; }
    echo $((c + z))
}

junk_target l.raw
rm -f l.state
cmd=("$T" start -p --json --speed 8M --state-file l.state base.raw l.raw)
bg late "${cmd[@]}"
wait_progress 60 "$pid" late.err 90
kill9 "$pid" || fail "late: the job ended before 90%"
kills=$((kills + 1))
note "late: killed at 90% (bar $(progress_pct late.err)%)"
bg late "${cmd[@]}"
reap "$pid"
expect_rc late 0
copied=$(summary_bytes late)
[ "$copied" -lt $((SIZE / 2)) ] ||
    fail "late: the resumed run wrote $copied of $SIZE bytes"
same base.raw l.raw "late"
assert_absent l.state "late: the completed job's state file"
junk_target l.raw
# The same without --speed: only the bytes count.
bg full "$T" start -p --json --state-file l.state base.raw l.raw
reap "$pid"
expect_rc full 0
[ "$(summary_bytes full)" = "$SIZE" ] ||
    fail "late: a full run wrote $(summary_bytes full) bytes, not $SIZE"
echo "# ${SECONDS}s"
ok "killed at 90%: the resumed run wrote $copied bytes, a full one $SIZE"

# --- torn and corrupt state files --------------------------------------------
# A convert killed at 60% leaves good.state.  The control: the target
# replaced by junk (the same inode), the intact state file is trusted, and
# the spot check of its known-good granules finds the junk: refused, exit
# 2, nothing written (so the refusals and comparisons below can fail).
# convert_opts are the command's options; x.raw the target.
copts=(-r 32M --state-file x.state)
rm -f x.raw x.state
bg x "$T" convert -p "${copts[@]}" base.raw x.raw
wait_progress 60 "$pid" x.err 60
kill9 "$pid" || fail "x: the convert ended before 60%"
kills=$((kills + 1))
cp x.state good.state
junk_target x.raw
keep x.raw
keep x.state
run $TMO "$T" convert "${copts[@]}" base.raw x.raw
[ "$last_rc" = 2 ] || fail "control: exit code $last_rc"
stderr_one_line
grep -q "the target differs from the source in a granule it calls known" \
    "$last_err" || fail "control: not refused by the spot check"
kept_bytes x.raw "control: refused, but the target"
kept x.state "control: refused, but the state file"
echo "# ${SECONDS}s"
ok "control: an intact state file is trusted, and its junk target refused"

# corrupt WHAT CMD...: good.state through CMD (stdin to stdout) as
# x.state over a junk target; convert: exit 2 with one line and nothing
# written, or exit 0 with nothing trusted and target == source.
corrupt()
{
    local what=$1
    shift
    "$@" <good.state >x.state || fail "$what: making the state file"
    cmp -s good.state x.state && fail "$what: the state file is intact"
    keep x.state
    run $TMO "$T" convert "${copts[@]}" base.raw x.raw
    case $last_rc in
    2)
        stderr_one_line
        kept x.raw "$what: refused, but the target"
        kept x.state "$what: refused, but the state file"
        corrupt_refused="$corrupt_refused $what"
        ;;
    0)
        if grep -q 'resuming from' "$last_err"; then
            cp "$last_err" x.err
            resumed x x.state
            [ "$known" = 0 ] ||
                fail "$what: $known bytes of a corrupt state file trusted"
        fi
        same base.raw x.raw "$what"
        assert_absent x.state "$what: the completed job's state file"
        corrupt_ignored="$corrupt_ignored $what"
        junk_target x.raw
        keep x.raw
        ;;
    *)
        fail "$what: exit code $last_rc"
        ;;
    esac
}

sz=$(file_size good.state)
junk_target x.raw
keep x.raw
corrupt_refused=
corrupt_ignored=
corrupt empty true
corrupt "half" head -c $((sz / 2))
corrupt "one byte short" head -c $((sz - 1))
corrupt "one byte more" sh -c 'cat; printf x'
corrupt "zeroed" sh -c "head -c $sz /dev/zero"
corrupt "garbage" sh -c "head -c $sz /dev/urandom"
flip()
{
    python3 -c '
import sys
d = bytearray(sys.stdin.buffer.read())
d[int(sys.argv[1])] ^= int(sys.argv[2])
sys.stdout.buffer.write(d)' "$@"
}
for at in 0 $((sz / 2)) $((sz - 1)); do
    rnd 0 $((sz - 1)); [ "$at" = $((sz / 2)) ] && at=$r
    rnd 1 255
    corrupt "byte $at ^ $r" flip "$at" "$r"
done
kept_bytes x.raw "the corrupt state files' target"
echo "# refused:$corrupt_refused"
echo "# treated as nothing known good:$corrupt_ignored"
echo "# ${SECONDS}s"
ok "torn and corrupt state files: refused or nothing trusted; never wrong"

# --- the state file of another job -------------------------------------------
# refused WHAT STATE DIFF ARGS...: mirror-tool ARGS with STATE is refused:
# exit 2, one line naming what differs (DIFF), and neither the state file
# nor the target x.raw written, no other target created.
make_sparse_image other.raw 256M 0:1M
make_sparse_image small.raw 128M 0:1M
refused()
{
    local what=$1 st=$2 diff=$3
    shift 3
    keep "$st"
    run $TMO "$T" "$@"
    [ "$last_rc" = 2 ] || fail "$what: exit code $last_rc, expected 2"
    stderr_one_line
    stderr_has "--state-file '$st': the $diff differs"
    kept "$st" "$what: the state file"
    kept x.raw "$what: the target"
}
# x.raw is good.state's target (the same inode).
junk_target x.raw
keep x.raw
cp good.state x.state
refused "another source" x.state source \
    convert "${copts[@]}" other.raw x.raw
refused "a source of another size" x.state source \
    convert "${copts[@]}" small.raw x.raw
junk_target y.raw
keep y.raw
refused "another target" x.state target convert "${copts[@]}" base.raw y.raw
kept_bytes y.raw "another target"
run $TMO "$T" convert "${copts[@]}" base.raw new.raw
[ "$last_rc" = 2 ] || fail "a target that is gone: exit code $last_rc"
stderr_one_line
assert_absent new.raw "a target that is gone"
kept_bytes x.raw "the target of another pair's state file"
echo "# ${SECONDS}s"
ok "convert with the state file of another pair: exit 2, nothing written"

# A start into x.raw killed at 50% leaves x.state; other parameters are
# refused.
junk_target x.raw
rm -f x.state
xopts=(--speed 32M --state-file x.state)
bg x "$T" start -p "${xopts[@]}" base.raw x.raw
wait_progress 60 "$pid" x.err 50
kill9 "$pid" || fail "x: the job ended before 50%"
kills=$((kills + 1))
keep x.raw
refused "another granularity" x.state granularity \
    start "${xopts[@]}" --granularity 128K base.raw x.raw
refused "another sync mode" x.state "sync mode" \
    start "${xopts[@]}" --sync none base.raw x.raw
refused "another source" x.state source start "${xopts[@]}" other.raw x.raw
kept_bytes x.raw "the target of another job's state file"
# The same job resumes from it.
run $TMO "$T" start "${xopts[@]}" base.raw x.raw
[ "$last_rc" = 0 ] || fail "x: the resumed start failed"
same base.raw x.raw "x: the resumed start"
echo "# ${SECONDS}s"
ok "start with the state file of another job (granularity, sync, source):" \
    "exit 2, nothing written; the same job resumes"

# --- the state file's life ---------------------------------------------------
rm -f z.raw z.state
expect_ok $TMO "$T" convert --state-file z.state base.raw z.raw
same base.raw z.raw "a plain run"
assert_absent z.state "a completed job's state file"
grep -q 'resuming' "$last_err" && fail "a new state file: resuming?"
echo "# ${SECONDS}s"
ok "a run with a new state file completes and removes it"

# SIGINT: a cancelled job leaves it, and the next run resumes.
junk_target z.raw
cmd=("$T" start -p --speed 32M --state-file z.state base.raw z.raw)
bg z "${cmd[@]}"
wait_progress 60 "$pid" z.err 40
kill -INT "$pid"
reap "$pid"
expect_rc z 130
[ -e z.state ] || fail "SIGINT: the state file was removed"
bg z "${cmd[@]}"
reap "$pid"
expect_rc z 0
resumed z z.state
[ "$known" -gt 0 ] || fail "SIGINT at 40%: nothing known good"
same base.raw z.raw "after SIGINT"
assert_absent z.state "after SIGINT, the completed job's state file"
echo "# ${SECONDS}s"
ok "SIGINT: the state file stays ($known bytes known good), the rerun" \
    "resumes"

# A target that fails writes (exit 1) leaves it too.
junk_target f.raw
nbdkit_up ft --filter=error file "$work/f.raw" error=EIO \
    error-pwrite-rate=1 error-pwrite-file="$work/f.trig" \
    error-zero-rate=1 error-zero-file="$work/f.trig"
cmd=("$T" start -p --speed 32M --state-file f.state base.raw "$uri")
bg f "${cmd[@]}"
wait_progress 60 "$pid" f.err 40
: >f.trig
wait_for 60 "f: the job to fail" not_running "$pid"
reap "$pid"
expect_rc f 1
[ -e f.state ] || fail "a failed job removed its state file"
rm f.trig
bg f "${cmd[@]}"
reap "$pid"
expect_rc f 0
resumed f f.state
nbdkit_down
same base.raw f.raw "after a failed run"
assert_absent f.state "after a failure, the completed job's state file"
echo "# ${SECONDS}s"
ok "a failed job (target write errors, exit 1) leaves the state file;" \
    "the rerun resumes"

[ "$kills" -ge 50 ] || fail "only $kills kills -9 hit a job"
echo "# ${SECONDS}s"
ok "$kills kills -9 in all, every one resumed to a byte-identical target"
