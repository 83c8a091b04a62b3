#!/usr/bin/env bash
# The live-migration scenario with real peers: `mirror-tool start --export
# --qmp` mirrors a source (raw, once qcow2) onto an nbdkit memory disk
# while fio, the guest, writes random data through the export in the bulk
# and in the sync stage; READY; fio stops; block-job-complete; the target
# is byte-identical to the source and the export now serves the target.
#
# Copy modes: background (also with the source on tmpfs, which the job
# copies from views of the file); write-blocking; background switched to
# write-blocking by block-job-change while fio runs; auto-converge on a
# speed-limited job that a faster writer keeps from converging (first shown
# not to converge without it, then turned on over QMP; then
# --auto-converge from the start).  Also: a cancel before READY (the target
# is not claimed complete, the export goes on serving the source) and
# hostile NBD clients (hostile-nbd.py) against the export of a running job.
#
# Waits are on events (`mirror-tool qmp --wait-event`), files and process
# exits; every client runs under `timeout`.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires timeout cmp stat python3 nbdkit nbdinfo nbdcopy qemu-img qemu-io \
    fio
if ! fio --enghelp=nbd >/dev/null 2>&1; then
    echo "1..0 # SKIP fio has no nbd engine"
    _lib_skipped=1
    exit 77
fi

TMO="timeout 120"
SIZE=$((64 * 1024 * 1024))

# start_target NAME: an empty nbdkit memory disk of SIZE bytes on NAME.sock;
# sets tgt (its URI).
start_target()
{
    nbdkit -f -P "$scratch/$1.pid" -U "$scratch/$1.sock" memory size=$SIZE \
        >"$1.log" 2>&1 &
    track_pid $!
    wait_for 20 "nbdkit ($1) to serve" test -s "$1.pid"
    tgt="nbd+unix:///?socket=$scratch/$1.sock"
}

# start_job NAME SRC ARGS...: `mirror-tool start --json --qmp NAME.qmp
# --qmp-wait --export unix:NAME.nbd ARGS SRC $tgt` in the background.  The
# export serves at once; the job starts with the first QMP client
# (watch_ready).  Sets job, job_pid, qmp_sock, exp (the export's URI).
start_job()
{
    local name=$1 src=$2
    shift 2
    "$T" start --json --qmp "$scratch/$name.qmp" --qmp-wait \
        --export "unix:$scratch/$name.nbd" "$@" "$src" "$tgt" \
        >"$name.out" 2>"$name.err" &
    job_pid=$!
    track_pid $job_pid
    job=$name
    qmp_sock=$scratch/$name.qmp
    exp="nbd+unix:///?socket=$scratch/$name.nbd"
    wait_for 20 "mirror-tool start ($name) to listen" test -S "$qmp_sock"
}

# qmp CMD [ARGS-JSON]: one QMP command, which must succeed.
qmp()
{
    expect_ok $TMO "$T" qmp "$qmp_sock" "$@"
}

# json_member KEY FILE: the scalar member KEY of the (compact, one-line)
# JSON in FILE, e.g. true or 123.
json_member()
{
    sed -n 's/.*"'"$1"'":\([^,}]*\).*/\1/p' "$2" | tail -1
}

# job_info KEY: sets info to the scalar KEY of the job in query-block-jobs.
job_info()
{
    qmp query-block-jobs
    info=$(json_member "$1" "$last_out")
    [ -n "$info" ] || fail "query-block-jobs: no '$1'"
}

# watch_ready: the first QMP client starts the job (--qmp-wait) with
# query-jobs, then waits for BLOCK_JOB_READY in the background (see
# wait_ready).  Returns once the job runs.
watch_ready()
{
    timeout 150 "$T" qmp --wait-event BLOCK_JOB_READY --timeout 140 \
        "$qmp_sock" query-jobs >"$job.ready" 2>"$job.ready.err" &
    ready_pid=$!
    track_pid $ready_pid
    wait_for 20 "$job: the job to start" grep -qs '"status":"running"' \
        "$job.ready"
}

# wait_ready: BLOCK_JOB_READY arrived; sets ready_len (its "len").
wait_ready()
{
    wait "$ready_pid" ||
        fail "$job: no BLOCK_JOB_READY: $(cat "$job.ready.err")"
    untrack_pid "$ready_pid"
    ready_len=$(json_member len "$job.ready")
    [ -n "$ready_len" ] || fail "$job: bad READY event: $(cat "$job.ready")"
}

# start_fio NAME RATE SPAN [IO]: fio's nbd engine (the guest) writing
# random 4k..64k blocks at RATE bytes/s over the first SPAN bytes of the
# export, IO bytes or until stop_fio (at most 100 s); returns once its
# first write reached $src (the source image file).  Sets fio_pid.
start_fio()
{
    local before amount="--time_based --runtime=100"
    [ -n "${4:-}" ] && amount="--io_size=$4"
    before=$(stat -c %y "$src")
    fio --name="$1" --thread --ioengine=nbd --uri="$exp" --rw=randwrite \
        --bsrange=4k-64k --iodepth=8 --rate="$2" --size="$3" $amount \
        --output-format=json --output="$1.fio" >/dev/null 2>&1 &
    fio_pid=$!
    track_pid $fio_pid
    wait_for 20 "fio ($1) to write" src_changed "$before"
}

src_changed()
{
    [ "$(stat -c %y "$src")" != "$1" ]
}

# fio_wrote NAME: fio's JSON report says it wrote data without errors.
fio_wrote()
{
    awk '/^      "error" : / { err = $3 }
         /^      "write" : \{/ { w = 1 }
         w && /"io_bytes" : / { bytes = $3 + 0; w = 0 }
         END { exit !(err == "0," && bytes > 0) }' "$1.fio" ||
        fail "fio ($1) failed or wrote nothing: $(cat "$1.fio")"
}

# stop_fio NAME: stop the writer started by start_fio (SIGINT: it reports
# and exits), then check its report.
stop_fio()
{
    kill -0 "$fio_pid" 2>/dev/null || fail "fio ($1) ended early"
    kill -INT "$fio_pid"
    wait "$fio_pid"
    untrack_pid "$fio_pid"
    fio_wrote "$1"
}

# fio_bounded NAME RATE SPAN IO: fio writing IO bytes at RATE, to the end.
fio_bounded()
{
    expect_ok $TMO fio --name="$1" --thread --ioengine=nbd --uri="$exp" \
        --rw=randwrite --bsrange=4k-64k --iodepth=8 --rate="$2" \
        --size="$3" --io_size="$4" --output-format=json --output="$1.fio"
    fio_wrote "$1"
}

# complete_job: block-job-complete, then BLOCK_JOB_COMPLETED without error.
complete_job()
{
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 100 \
        "$qmp_sock" block-job-complete '{"device": "mirror"}'
    grep -q '"event":"BLOCK_JOB_COMPLETED"' "$last_out" ||
        fail "$job: no BLOCK_JOB_COMPLETED"
    grep -q '"error"' "$last_out" && fail "$job: completed with an error"
    wait_for 10 "$job: the export to serve the target" \
        grep -q 'serving the target' "$job.err"
}

# verify_switched [full]: the export now serves the target: what a guest
# writes lands there (and not in the source: see verify_source); "full"
# compares every byte of the export with the target first.  The target
# as the job left it is saved in $job.final for verify_source.
verify_switched()
{
    if [ "${1:-}" = full ]; then
        expect_ok $TMO qemu-img compare -f raw -F raw "$exp" "$tgt"
    fi
    expect_ok $TMO nbdcopy "$tgt" "$job.final"
    expect_ok $TMO qemu-io -f raw -c 'write -P 0x5a 1M 64k' "$exp"
    expect_ok $TMO qemu-io -f raw -c 'read -P 0x5a 1M 64k' "$tgt"
    grep -q 'Pattern verification failed' "$last_out" &&
        fail "$job: a write through the export did not reach the target"
}

# verify_source FMT: once mirror-tool has closed it (a qcow2 source's
# metadata may sit in its cache until then), the source (format FMT)
# equals the target as the job completed it (so the write after the
# switch-over did not reach the source either).
verify_source()
{
    expect_ok $TMO qemu-img compare -f "$1" -F raw "$src" "$job.final"
}

# stop_job RC: QMP quit; mirror-tool exits with RC.
stop_job()
{
    local rc
    qmp quit
    wait_for 20 "$job: mirror-tool to exit" not_running "$job_pid"
    wait "$job_pid"
    rc=$?
    untrack_pid "$job_pid"
    [ "$rc" = "$1" ] || { cat "$job.err" >&2; fail "$job: exit code $rc"; }
}

not_running()
{
    ! kill -0 "$1" 2>/dev/null
}

# event_line NAME: the line number of event NAME in the job's --json
# output (empty: none).
event_line()
{
    grep -n "\"event\":\"$1\"" "$job.out" | head -1 | cut -d: -f1
}

# A 64 MiB disk, 24 MiB of it data.
make_sparse_image base.raw 64M 0:8M 20M:8M 50M:8M

# --- background --------------------------------------------------------------
# background NAME SRC: the scenario, the source a copy of base.raw at SRC.
background()
{
    local n=$1
    src=$2
    cp base.raw "$src"
    start_target "t$n"
    start_job "$n" "$src" --speed 16M
    start_fio "${n}1" 2M "$SIZE"
    watch_ready
    wait_ready
    [ "$ready_len" -gt "$SIZE" ] ||
        fail "$n: READY len $ready_len: no guest write landed in copied data"
    job_info actively-synced
    [ "$info" = false ] || fail "$n: actively synced"
    # Sync stage: a bounded writer on top of the running one.
    fio_bounded "${n}2" 4M "$SIZE" 4M
    job_info len
    [ "$info" -gt "$ready_len" ] ||
        fail "$n: the writes after READY were not tracked"
    stop_fio "${n}1"
    complete_job
    verify_switched full
    stop_job 0
    verify_source raw
    grep -q '^{"summary": ' "$n.out" || fail "$n: no summary"
}

background bg bg.raw
ok "background: fio in the bulk and sync stages, complete, target == source"
ok "background: after complete the export serves the target"

# The same with the source on tmpfs: the job copies from views of the file
# (raw-map.c) while fio's writes through the export race the copies.
if ! shm_scratch; then
    ok "background, source on tmpfs # SKIP no writable tmpfs at /dev/shm"
else
    background bgshm "$shm/bg.raw"
    rm -f "$shm/bg.raw"
    ok "background, source on tmpfs (views): fio races copies, target == source"
fi

# --- write-blocking, qcow2 source --------------------------------------------
src=wb.qcow2
expect_ok qemu-img convert -f raw -O qcow2 base.raw "$src"
start_target twb
start_job wb "$src" -f qcow2 --copy-mode write-blocking --speed 16M
start_fio wb1 2M "$SIZE"
watch_ready
wait_ready
job_info actively-synced
[ "$info" = true ] || fail "wb: not actively synced"
fio_bounded wb2 4M "$SIZE" 4M
job_info actively-synced
[ "$info" = true ] ||
    fail "wb: guest writes unsynced the job"
stop_fio wb1
complete_job
verify_switched
stop_job 0
verify_source qcow2
expect_ok qemu-img check -q "$src"
ok "write-blocking, qcow2 source: fio throughout, target == source"

# --- background switched to write-blocking while fio runs --------------------
src=sw.raw
cp base.raw "$src"
start_target tsw
# Slow in the bulk stage (6 s) until switched, then at full speed.
start_job sw "$src" --speed 4M
start_fio sw1 2M "$SIZE"
watch_ready
job_info ready
[ "$info" = false ] || fail "sw: READY before the switch"
qmp block-job-change \
    '{"id": "mirror", "type": "mirror", "copy-mode": "write-blocking"}'
expect_exit 1 $TMO "$T" qmp "$qmp_sock" block-job-change \
    '{"id": "mirror", "type": "mirror", "copy-mode": "background"}'
stderr_has GenericError
qmp block-job-set-speed '{"device": "mirror", "speed": 0}'
wait_ready
job_info actively-synced
[ "$info" = true ] || fail "sw: not actively synced"
fio_bounded sw2 4M "$SIZE" 4M
stop_fio sw1
complete_job
verify_switched
stop_job 0
verify_source raw
ok "block-job-change background -> write-blocking under fio (and not back)"

# --- auto-converge -----------------------------------------------------------
# The job copies 2 MiB/s; fio writes 16 MiB/s into the first 4 MiB.  The
# source is mostly holes and the target reads as zero, so the bulk stage
# is short and the writer is what keeps the job from converging: READY
# would need the writer to stall for 2 s.
make_sparse_image conv.raw 64M 20M:1M

# Without auto-converge: no READY while a second fio writes a bounded
# 64 MiB (the first one goes on).
src=nac.raw
cp conv.raw "$src"
start_target tnac
start_job nac "$src" --speed 2M --target-is-zero
start_fio nac1 16M 4M 64M
bounded_pid=$fio_pid
start_fio nac2 8M 4M
watch_ready
wait "$bounded_pid" || fail "fio (nac1) failed: $(cat nac1.fio)"
untrack_pid "$bounded_pid"
job_info ready
[ "$info" = false ] || fail "nac: READY while the writers outpaced the job"
fio_wrote nac1
ok "without auto-converge a writer faster than --speed keeps READY away"

# Turned on over QMP while the writer goes on: READY.
qmp block-job-change '{"id": "mirror", "type": "mirror",
                       "auto-converge": true, "auto-converge-ms": 500}'
wait_ready
kill -0 "$fio_pid" 2>/dev/null || fail "nac: fio ended before READY"
[ -n "$(event_line MIRROR_COPY_MODE_CHANGED)" ] ||
    fail "nac: no MIRROR_COPY_MODE_CHANGED"
stop_fio nac2
complete_job
verify_switched
stop_job 0
verify_source raw
ok "auto-converge turned on by block-job-change: READY under the writer"

# --auto-converge from the start.
src=ac.raw
cp conv.raw "$src"
start_target tac
start_job ac "$src" --speed 2M --target-is-zero --auto-converge \
    --auto-converge-after 500
start_fio ac1 16M 4M
watch_ready
wait_ready
kill -0 "$fio_pid" 2>/dev/null || fail "ac: fio ended before READY"
changed=$(event_line MIRROR_COPY_MODE_CHANGED)
[ -n "$changed" ] || fail "ac: no MIRROR_COPY_MODE_CHANGED"
[ "$changed" -lt "$(event_line BLOCK_JOB_READY)" ] ||
    fail "ac: READY came before the switch to write-blocking"
grep -q '"reason":"dirty-rate"' ac.out || fail "ac: reason not dirty-rate"
job_info actively-synced
[ "$info" = true ] || fail "ac: not actively synced"
stop_fio ac1
complete_job
verify_switched
stop_job 0
verify_source raw
ok "--auto-converge: a writer faster than --speed, READY, target == source"

# --- guest-first -------------------------------------------------------------
# job_base_measured: query-block-jobs says a probe measured the guest's
# latency without the job.
job_base_measured()
{
    job_info guest-base-latency-ns
    [ "$info" -gt 0 ]
}

# The export's guest as the job sees it: its requests counted, its
# latency without the job measured (a probe), the job's window shown;
# with --guest-priority off the guest is counted but never probed.
src=gf.raw
cp base.raw "$src"
start_target tgf
start_job gf "$src" --speed 16M
start_fio gf1 8M "$SIZE"
watch_ready
job_info guest-priority
[ "$info" = true ] || fail "gf: guest-priority $info"
wait_for 30 "gf: a probe of the guest's latency" job_base_measured
job_info guest-requests
[ "$info" -gt 0 ] || fail "gf: guest-requests $info"
job_info window-bytes
[ "$info" -ge 65536 ] || fail "gf: window-bytes $info"
stop_fio gf1
wait_ready
complete_job
verify_switched full
stop_job 0
verify_source raw
ok "guest-first: query-block-jobs counts the guest, probes its latency, shows the window"

src=gfo.raw
cp base.raw "$src"
start_target tgfo
start_job gfo "$src" --speed 16M --guest-priority off
start_fio gfo1 2M "$SIZE"
watch_ready
wait_ready
stop_fio gfo1
job_info guest-priority
[ "$info" = false ] || fail "gfo: guest-priority $info"
job_info guest-requests
[ "$info" -gt 0 ] || fail "gfo: guest-requests $info"
job_info guest-base-latency-ns
[ "$info" = 0 ] || fail "gfo: probed with --guest-priority off"
complete_job
verify_switched full
stop_job 0
verify_source raw
ok "--guest-priority off: the guest is counted, never probed; target == source"

# --- cancel before READY -----------------------------------------------------
src=cn.raw
cp base.raw "$src"
start_target tcn
start_job cn "$src" --speed 4M
watch_ready
job_info ready
[ "$info" = false ] || fail "cn: READY already"
expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_CANCELLED --timeout 60 \
    "$qmp_sock" block-job-cancel '{"device": "mirror"}'
wait_for 20 "cn: the export to go on with the source" \
    grep -q 'serving the source' cn.err
grep -q 'the job was cancelled; the target .* is incomplete' cn.err ||
    fail "cn: the target was not called incomplete: $(cat cn.err)"
expect_ok $TMO qemu-io -f raw -c 'write -P 0x6b 30M 1M' "$exp"
expect_ok $TMO qemu-img compare -f raw -F raw "$src" "$exp"
expect_ok $TMO qemu-io -r -f raw -c 'read -P 0x6b 30M 1M' "$src"
grep -q 'Pattern verification failed' "$last_out" &&
    fail "cn: the write through the export missed the source"
stop_job 1
wait "$ready_pid"           # it saw no READY and gave up when the tool quit
untrack_pid "$ready_pid"
[ -z "$(event_line BLOCK_JOB_COMPLETED)" ] || fail "cn: COMPLETED event"
ok "cancel before READY: exit 1, target incomplete, export serves the source"

# --- hostile clients against the export of a running job ---------------------
src=ho.raw
make_sparse_image "$src" 64M 0:16M 40M:16M
remember_sum "$src"
start_target tho
start_job ho "$src" --speed 4M
watch_ready
job_info ready
[ "$info" = false ] || fail "ho: READY already"
job_info offset
before=$info
expect_ok $TMO python3 "$TEST_SRCDIR/hostile-nbd.py" "$scratch/ho.nbd" "$exp" \
    "" "$SIZE"
kill -0 "$job_pid" 2>/dev/null || fail "ho: mirror-tool died"
expect_ok $TMO nbdinfo --size "$exp"
[ "$(cat "$last_out")" = "$SIZE" ] || fail "ho: nbdinfo --size"
job_info offset
[ "$info" -gt "$before" ] ||
    fail "ho: the job made no progress during the attack"
qmp block-job-set-speed '{"device": "mirror", "speed": 0}'
wait_ready
assert_unchanged "$src" "ho: the source after hostile clients"
complete_job
expect_ok $TMO qemu-img compare -f raw -F raw "$src" "$tgt"
stop_job 0
ok "hostile clients during the bulk stage: the job goes on, target == source"
