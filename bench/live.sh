#!/usr/bin/env bash
# bench/live.sh - the live-migration case: a writer (fio) busy on the
# source through the daemon's own NBD export while the job copies it.
# `mirror-tool start --qmp --export` side by side with qemu-storage-daemon
# (its NBD export of the source node plus blockdev-mirror).  Not run in
# CI.  See bench/README.md.
#
# SIZE of random data in a raw file in /dev/shm is mirrored (sync=full)
# into `nbdkit file TARGET` on a UNIX socket, TARGET a pre-touched file in
# /dev/shm.  Each run, driven by bench/qmp.py under its own nbdkit:
#   start the daemon; start fio writing random FIO_BS blocks through the
#   daemon's export at a fixed rate and, once fio says it is connected
#   (fio itself takes about a second to start), the job over QMP; wait
#   for BLOCK_JOB_READY; stop fio (SIGINT; as a migration pauses the
#   guest); query-block-jobs; block-job-complete; wait for
#   BLOCK_JOB_COMPLETED; quit.  Then (untimed) `cmp` checks that the target
#   equals the source, which fio changed.
# The write rates are RATES percent of the copy rate: qemu-storage-daemon's
# time to READY with no writer, the median of CALIB_RUNS untimed warm-up
# runs (COPY_RATE, in bytes/s, overrides it), so both tools get the same
# load.
# Then, per rate, RUNS rounds with the row order rotated by the round.
# - ready_s: from the command that starts the job to BLOCK_JOB_READY;
# - pause_ms: the switch-over pause, from sending block-job-complete to the
#   receipt of BLOCK_JOB_COMPLETED (median and max);
# - left_MiB: len - offset in query-block-jobs just before the complete;
# - wr_MiB/s: the rate fio achieved.
# Environment: RUNS (5), RATES ("25 50"), SIZE (1G), COPY_RATE, CALIB_RUNS
# (3), FIO_BS
# (64k), FIO_DEPTH (8), SEED (42), TIMEOUT (300 s), MIRROR_EXTRA
# ("--connections 1"; ';'-separated mirror-tool option sets, one extra row
# each), MIRROR_TOOL, QSD, PREFAULT (1).
set -euo pipefail

RUNS=${RUNS:-5}
RATES=${RATES:-"25 50"}
SIZE=${SIZE:-1G}
COPY_RATE=${COPY_RATE:-}
CALIB_RUNS=${CALIB_RUNS:-3}
FIO_BS=${FIO_BS:-64k} FIO_DEPTH=${FIO_DEPTH:-8}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-300}
MIRROR_EXTRA=${MIRROR_EXTRA-"--connections 1"}
PREFAULT=${PREFAULT:-1}
QSD=${QSD:-qemu-storage-daemon}
EXPORT=1
GOAL=0.7
BENCH=live.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck source=bench/joblib.sh
source "$ROOT/bench/joblib.sh"

[[ $# == 0 ]] || die "usage: $0 (settings in the environment)"
[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
need nbdkit "$QSD" fio python3 cp cmp openssl timeout
for p in $RATES; do [[ $p =~ ^[0-9]+$ ]] || die "RATES: '$p' is not a percentage"; done
[[ -z $COPY_RATE || $COPY_RATE =~ ^[0-9]+$ ]] || die "COPY_RATE: '$COPY_RATE' is not bytes/s"

setup_scratch live-bench
add_job_row "mirror-tool" mt ""
add_mt_extra_rows
add_job_row "qemu-storage-daemon" qsd ""
SERVER="file $SCRATCH/target"

# writer RATE: the fio command writing RATE bytes/s through the export
# until SIGINT.
writer() {
    echo "fio --name=guest --ioengine=nbd --uri=$(export_uri) --rw=randwrite --thread" \
        "--bs=$FIO_BS --iodepth=$FIO_DEPTH --rate=$1 --time_based --runtime=3600" \
        "--output-format=json"
}

print_header live.sh "RUNS=$RUNS RATES='$RATES' SIZE=$SIZE FIO_BS=$FIO_BS FIO_DEPTH=$FIO_DEPTH"
echo "# target: nbdkit -U - file \$SCRATCH/target"
echo "# daemons (\"\$uri\" and \$unixsocket: the nbdkit server):"
print_rows
echo "# writer: $(writer RATE | sed "s|$SCRATCH|\$SCRATCH|g")"
[[ $PREFAULT == 1 ]] && prefault

log "creating a $SIZE random source and target template..."
make_random "$SCRATCH/src" "$SIZE" $((SEED + 2))
make_random "$SCRATCH/tmpl" "$SIZE" $((SEED + 3))
bytes=$(to_bytes "$SIZE")
log "warm-up, no writer:"
calib=()
for ((k = 0; k < ${#JLABEL[@]}; k++)); do
    LAST_READY=
    job_run idle "$k" 0 "$SERVER"
    if [[ ${JKIND[k]} == qsd && -z $COPY_RATE ]]; then
        # The median of CALIB_RUNS idle runs: one run varied 1.6x.
        for ((c = 0; c < CALIB_RUNS; c++)); do
            ((c == 0)) || { LAST_READY=; job_run idle "$k" 0 "$SERVER"; }
            [[ -n $LAST_READY ]] || die "the qemu-storage-daemon warm-up run failed"
            calib+=("$LAST_READY")
        done
        t=$(printf '%s\n' "${calib[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
        COPY_RATE=$(awk -v b="$bytes" -v t="$t" 'BEGIN { printf "%d", b / t }')
    fi
done
echo "# copy rate: $((COPY_RATE / MiB)) MiB/s; write rates: $(for p in $RATES; do
    printf '%s%% = %d MiB/s  ' "$p" $((COPY_RATE * p / 100 / MiB)); done)"

for p in $RATES; do
    rate=$((COPY_RATE * p / 100))
    log "writer at $p% of the copy rate, $((rate / MiB)) MiB/s:"
    wr=
    ((rate > 0)) && wr=$(writer "$rate")
    job_rounds "w$p" "$SERVER" "$wr"
done

for p in $RATES; do
    job_report "w$p" "w$p: $SIZE random raw -> nbdkit file, fio $FIO_BS random writes at $p% of the copy rate ($((COPY_RATE * p / 100 / MiB)) MiB/s) through the export" 1 "$GOAL"
done
echo; echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ ! -s $FAILS ]] || { log "$(wc -l <"$FAILS") run(s) failed"; exit 1; }
