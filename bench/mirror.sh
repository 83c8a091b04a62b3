#!/usr/bin/env bash
# bench/mirror.sh - `mirror-tool start --qmp` side by side with
# qemu-storage-daemon's blockdev-mirror: time to READY and to completion.
# Not run in CI.  See bench/README.md.
#
# Workloads: SIZE of random data in a raw file in /dev/shm, mirrored
# (sync=full) into `nbdkit file TARGET` on a UNIX socket, TARGET a
# pre-touched file in /dev/shm:
#   plain  no delay;
#   delay  behind `--filter=delay delay-write=10ms delay-read=10ms`
#          (DELAY_SIZE of data).
# Every run starts its own nbdkit (`nbdkit -U - ... --run`) and, under it,
# bench/qmp.py, which starts the daemon, starts the job over QMP, waits for
# BLOCK_JOB_READY, sends block-job-complete at once and waits for
# BLOCK_JOB_COMPLETED.  Before every run (untimed) the target is re-created
# from a random template with `cp --sparse=never`, after it `cmp` checks it
# against the source.  One untimed warm-up round, then RUNS rounds with the
# row order rotated by the round number.  A failure, a timeout or a wrong
# target is recorded (column fail) and the benchmark goes on, exiting 1 at
# the end.
# - ready_s: from the command that starts the job (mirror-tool:
#   qmp_capabilities with --qmp-wait; qemu-storage-daemon: blockdev-mirror)
#   to the receipt of BLOCK_JOB_READY;
# - done_s: from the same point to the receipt of BLOCK_JOB_COMPLETED;
# - cpu_s, rss_MiB: the daemon's user + sys time and peak RSS.
# Environment: RUNS (5), WORKLOADS ("plain delay"), SIZE (2G),
# DELAY_SIZE (2G), DELAY (10ms), SEED (42), TIMEOUT (300 s), MIRROR_EXTRA
# (';'-separated mirror-tool option sets, one extra row each), MIRROR_TOOL,
# QSD, PREFAULT (1).
set -euo pipefail

RUNS=${RUNS:-5}
WORKLOADS=${WORKLOADS:-"plain delay"}
SIZE=${SIZE:-2G} DELAY_SIZE=${DELAY_SIZE:-2G}
DELAY=${DELAY:-10ms}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-300}
MIRROR_EXTRA=${MIRROR_EXTRA-"--connections 1"}
PREFAULT=${PREFAULT:-1}
QSD=${QSD:-qemu-storage-daemon}
EXPORT=
GOAL=0.7
BENCH=mirror.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck source=bench/joblib.sh
source "$ROOT/bench/joblib.sh"

[[ $# == 0 ]] || die "usage: $0 (settings in the environment)"
[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
need nbdkit "$QSD" python3 cp cmp openssl timeout
for w in $WORKLOADS; do
    case $w in plain|delay) ;; *) die "unknown workload $w" ;; esac
done

setup_scratch mirror-bench
add_job_row "mirror-tool" mt ""
add_mt_extra_rows
add_job_row "qemu-storage-daemon" qsd ""

# server_args WL: nbdkit's plugin, filters and parameters.
server_args() {
    case $1 in
    plain) echo "file $SCRATCH/target" ;;
    delay) echo "--filter=delay file $SCRATCH/target delay-write=$DELAY delay-read=$DELAY" ;;
    esac
}

print_header mirror.sh "RUNS=$RUNS WORKLOADS='$WORKLOADS' SIZE=$SIZE DELAY_SIZE=$DELAY_SIZE DELAY=$DELAY"
for w in $WORKLOADS; do echo "#   $w: nbdkit -U - $(server_args "$w" | sed "s|$SCRATCH|\$SCRATCH|g")"; done
echo "# daemons (\"\$uri\" and \$unixsocket: the nbdkit server):"
print_rows
[[ $PREFAULT == 1 ]] && prefault

for w in $WORKLOADS; do
    size=$SIZE; [[ $w == delay ]] && size=$DELAY_SIZE
    log "$w: creating a $size random source and target template..."
    make_random "$SCRATCH/src" "$size" $((SEED + 2))
    make_random "$SCRATCH/tmpl" "$size" $((SEED + 3))
    log "$w: nbdkit $(server_args "$w")"
    for ((k = 0; k < ${#JLABEL[@]}; k++)); do job_run "$w" "$k" 0 "$(server_args "$w")"; done
    job_rounds "$w" "$(server_args "$w")"
    rm -f "$SCRATCH/src" "$SCRATCH/tmpl" "$SCRATCH/target"
done

for w in $WORKLOADS; do
    case $w in
    plain) t="plain: $SIZE random raw -> nbdkit file" ;;
    delay) t="delay: $DELAY_SIZE random raw -> nbdkit file, delay-write/read=$DELAY" ;;
    esac
    job_report "$w" "$t" 0 "$GOAL"
done
echo; echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ ! -s $FAILS ]] || { log "$(wc -l <"$FAILS") run(s) failed"; exit 1; }
