#!/usr/bin/env bash
# bench/multi.sh - several disks in one daemon: `mirror-tool daemon`
# side by side with qemu-storage-daemon, each given the same QMP
# conversation by bench/multi.py: a file node per source, an nbd node per
# target (`nbdkit file TARGET` on a UNIX socket each), one NBD server with
# a writable export per source, a fio guest per disk at a fixed rate
# through its export, one blockdev-mirror per disk (sync full,
# auto-finalize false), every BLOCK_JOB_READY, the guests stopped,
# block-job-complete each, every BLOCK_JOB_PENDING, job-finalize each,
# every BLOCK_JOB_COMPLETED, quit.  Then (untimed) `cmp` checks each target
# against its source, which the guests changed.  Not run in CI.  See
# bench/README.md.
#
# The disks: raw files of random data in /dev/shm, one per size in SIZES;
# the targets pre-touched files of other random data.  The guests' rate:
# GUEST_PCT percent of the copy rate, split evenly between the guests; the
# copy rate is the disks' total size over qemu-storage-daemon's time to
# every READY with no guest, the median of CALIB_RUNS untimed warm-up runs
# (COPY_RATE in bytes/s overrides it).  Then RUNS rounds, the row order
# alternating.
# - ready_s: from the first blockdev-mirror to the last BLOCK_JOB_READY;
#   ratio: against qemu-storage-daemon's (both medians);
# - switch_ms: from the first block-job-complete to the last
#   BLOCK_JOB_COMPLETED (after job-finalize);
# - guests_MiB/s: the sum of the guests' write rates, pct: in percent of
#   the asked total; min_MiB/s: the slowest guest's rate;
# - cpu_s, rss_MiB: the daemon's.
# All medians over the runs.
# Environment: RUNS (3), SIZES ("512M 384M 256M"), GUEST_PCT (25),
# COPY_RATE, CALIB_RUNS (3), FIO_BS (64k), FIO_DEPTH (8), SEED (42),
# TIMEOUT (300 s), MIRROR_TOOL, QSD, PREFAULT (1).
set -euo pipefail

RUNS=${RUNS:-3}
SIZES=${SIZES:-"512M 384M 256M"}
GUEST_PCT=${GUEST_PCT:-25}
COPY_RATE=${COPY_RATE:-}
CALIB_RUNS=${CALIB_RUNS:-3}
FIO_BS=${FIO_BS:-64k} FIO_DEPTH=${FIO_DEPTH:-8}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-300}
PREFAULT=${PREFAULT:-1}
QSD=${QSD:-qemu-storage-daemon}
GOAL=1.0                        # ready_s ratio
RATE_GOAL=95                    # percent of the asked guest rate
BENCH=multi.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
# shellcheck source=bench/joblib.sh
source "$ROOT/bench/joblib.sh"

[[ $# == 0 ]] || die "usage: $0 (settings in the environment)"
[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
need nbdkit "$QSD" fio python3 cp cmp openssl timeout
[[ $GUEST_PCT =~ ^[0-9]+$ ]] || die "GUEST_PCT: '$GUEST_PCT' is not a percentage"
[[ -z $COPY_RATE || $COPY_RATE =~ ^[0-9]+$ ]] || die "COPY_RATE: '$COPY_RATE' is not bytes/s"
read -ra SIZE_LIST <<<"$SIZES"
NDISKS=${#SIZE_LIST[@]}
((NDISKS > 0)) || die "SIZES: no disk"
for s in "${SIZE_LIST[@]}"; do
    [[ $s =~ ^[0-9]+[KMG]?$ ]] || die "SIZES: '$s' is not a size"
done

setup_scratch multi-bench
add_job_row "mirror-tool daemon" mt ""
add_job_row "qemu-storage-daemon" qsd ""
QMP=$SCRATCH/qmp.sock

# multi_cmd ROW: the daemon's command line (the rest is said over QMP).
multi_cmd() {
    if [[ ${JKIND[$1]} == mt ]]; then
        echo "$MT daemon --qmp $QMP"
    else
        echo "$QSD --chardev socket,path=$QMP,server=on,wait=off,id=m --monitor chardev=m"
    fi
}

# guest RATE: the fio command of one guest at --rate=RATE until SIGINT
# ({uri}: its export's URI, filled in by multi.py).
guest() {
    echo "fio --name=guest --ioengine=nbd --uri={uri} --rw=randwrite --thread" \
        "--bs=$FIO_BS --iodepth=$FIO_DEPTH --rate=$1 --time_based --runtime=3600" \
        "--output-format=json"
}

# multi_run ROW TIMED [GUEST]: fresh targets, one run of row ROW (with
# GUEST, a command line, per disk), every target checked against its
# source; with TIMED, a line in $RES:
#   wl row ready_s switch_ms cpu_s rss_kib guests_Bps min_guest_Bps load1
#   ready_each
# A failure is logged in $FAILS and does not stop the benchmark.
multi_run() {
    local row=$1 timed=$2 g=${3:-} rc=0 why='' i
    local -a f args
    rm -f "$QMP" "$SCRATCH"/*.sock "$SCRATCH/res"
    for ((i = 0; i < NDISKS; i++)); do
        cp --sparse=never "$SCRATCH/tmpl$i" "$SCRATCH/tgt$i"
    done
    args=(--qmp "$QMP" --dir "$SCRATCH" --disks "$NDISKS" --out "$SCRATCH/res"
        --log "$SCRATCH/log" --timeout "$TIMEOUT")
    [[ -n $g ]] && args+=(--writer "$g")
    # shellcheck disable=SC2046 # the daemon's command line, word-split
    timeout $((TIMEOUT + 30)) python3 "$ROOT/bench/multi.py" "${args[@]}" -- \
        $(multi_cmd "$row") >"$SCRATCH/out" 2>&1 || rc=$?
    if ((rc == 124)); then why="timed out after $((TIMEOUT + 30))s"
    elif ((rc != 0)); then
        why="exit status $rc: $(grep -m1 '^multi.py: ' "$SCRATCH/out" || tail -1 "$SCRATCH/out")"
    else
        for ((i = 0; i < NDISKS; i++)); do
            cmp -s "$SCRATCH/src$i" "$SCRATCH/tgt$i" || why="target $i differs from its source"
        done
    fi
    if [[ -n $why ]]; then
        log "  ${JLABEL[row]}: FAILED: $why; daemon log:"
        tail -n 10 "$SCRATCH/log" 2>/dev/null | sed 's/^/    /' >&2
        printf '%s\t%s\t%s\n' multi "$row" "$why" >>"$FAILS"
        return 0
    fi
    # f: ready switch cpu rss guests min_guest ready_each
    IFS=$'\t' read -r -a f <"$SCRATCH/res"
    ((timed)) && printf '%s\t' multi "$row" "${f[@]:0:6}" \
        "$(cut -d' ' -f1 /proc/loadavg)" >>"$RES" && printf '%s\n' "${f[6]}" >>"$RES"
    LAST_READY=${f[0]}
    log "  [$( ((timed)) && echo timed || echo warm-up)] ${JLABEL[row]}: ready ${f[0]}s" \
        "(each: ${f[6]}) switch ${f[1]}ms cpu ${f[2]}s rss $((f[3] / 1024))MiB" \
        "$( ((f[4])) && echo "guests $((f[4] / MiB))MiB/s, slowest $((f[5] / MiB))MiB/s")"
}

print_header multi.sh "RUNS=$RUNS SIZES='$SIZES' GUEST_PCT=$GUEST_PCT FIO_BS=$FIO_BS\
 FIO_DEPTH=$FIO_DEPTH"
echo "# daemons (the rest over QMP, the same for both: see bench/multi.py):"
for ((k = 0; k < ${#JLABEL[@]}; k++)); do
    printf '#   %-34s %s\n' "${JLABEL[k]}:" \
        "$(multi_cmd "$k" | sed "s|$MT|mirror-tool|; s|$SCRATCH|\$SCRATCH|g")"
done
echo "# targets: nbdkit -U \$SCRATCH/tgtI.sock file \$SCRATCH/tgtI, one per disk"
echo "# guest per disk: $(guest RATE)"
[[ $PREFAULT == 1 ]] && prefault

log "creating $NDISKS random sources ($SIZES) and target templates..."
total=0
for ((i = 0; i < NDISKS; i++)); do
    make_random "$SCRATCH/src$i" "${SIZE_LIST[i]}" $((SEED + 2 * i + 2))
    make_random "$SCRATCH/tmpl$i" "${SIZE_LIST[i]}" $((SEED + 2 * i + 3))
    total=$((total + $(to_bytes "${SIZE_LIST[i]}")))
done

log "warm-up, no guests:"
multi_run 0 0
calib=()
for ((c = 0; c < CALIB_RUNS; c++)); do
    LAST_READY=
    multi_run 1 0
    [[ -n $LAST_READY ]] || die "the qemu-storage-daemon warm-up run failed"
    calib+=("$LAST_READY")
done
if [[ -n $COPY_RATE ]]; then
    crate=$COPY_RATE
else
    t=$(printf '%s\n' "${calib[@]}" | median)
    crate=$(awk -v b="$total" -v t="$t" 'BEGIN { printf "%d", b / t }')
fi
rate=$((crate * GUEST_PCT / 100 / NDISKS))
((rate > 0)) || die "a guest rate of 0 (copy rate $crate bytes/s)"
asked=$((rate * NDISKS))
echo "# copy rate $((crate / MiB)) MiB/s (qemu-storage-daemon, no guests); each of" \
    "the $NDISKS guests at $GUEST_PCT%/$NDISKS of it: $((rate / MiB)) MiB/s" \
    "($rate bytes/s)"

for ((r = 0; r < RUNS; r++)); do
    log "round $((r + 1))/$RUNS"
    for ((k = 0; k < 2; k++)); do multi_run $(((r + k) % 2)) 1 "$(guest "$rate")"; done
done

mib() { awk '{ print $1 / 1048576 }'; }
fixed() { awk -v d="$1" '{ if ($1 ~ /^[0-9.]+$/) printf "%." d "f\n", $1; else print }'; }
declare -a RD SW GS GM PCT CPU RSS
for ((k = 0; k < 2; k++)); do
    RD[k]=$(jcol multi "$k" 3 | median)
    SW[k]=$(jcol multi "$k" 4 | median | fixed 1)
    GS[k]=$(jcol multi "$k" 7 | mib | median | fixed 1)
    GM[k]=$(jcol multi "$k" 8 | mib | median | fixed 1)
    PCT[k]=$(awk -v g="${GS[k]}" -v a="$asked" 'BEGIN {
        if (g ~ /^[0-9.]+$/ && a > 0) printf "%.1f", g * 1048576 * 100 / a; else print "nan" }')
    CPU[k]=$(jcol multi "$k" 5 | median)
    RSS[k]=$(jcol multi "$k" 6 | sort -n | tail -1)
done
echo
echo "== $NDISKS disks ($SIZES random raw -> nbdkit file), a guest each at" \
    "$((rate / MiB)) MiB/s through its export (RUNS=$RUNS; medians;" \
    "ratio: ready_s / qemu-storage-daemon's) =="
awk -F'\t' '$1 == "multi" { n++; s += $9; if ($9 > m) m = $9 } END {
    if (n) printf "1-minute load average after the runs: mean %.1f, max %.1f\n", s / n, m }' "$RES"
printf '%-22s %8s %6s %10s %13s %6s %10s %6s %7s %4s\n' tool ready_s ratio switch_ms \
    guests_MiB/s pct min_MiB/s cpu_s rss_MiB fail
for ((k = 0; k < 2; k++)); do
    printf '%-22s %8s %6s %10s %13s %6s %10s %6s %7s %4s\n' "${JLABEL[k]}" "${RD[k]}" \
        "$(ratio "${RD[k]}" "${RD[1]}")" "${SW[k]}" "${GS[k]}" "${PCT[k]}" "${GM[k]}" \
        "${CPU[k]}" $((${RSS[k]:-0} / 1024)) "$(fail_count multi "$k")"
done
r=$(ratio "${RD[0]}" "${RD[1]}")
tok=no
[[ $r != nan ]] && ! gt "$r" "$GOAL" && tok=yes
gok=no
[[ ${PCT[0]} != nan ]] && ! gt "$RATE_GOAL" "${PCT[0]}" && gok=yes
echo "verdict multi: mirror-tool daemon: time to every READY ${r}x" \
    "qemu-storage-daemon's <= ${GOAL}x: $tok; guests ${PCT[0]}% of the asked rate" \
    ">= ${RATE_GOAL}%: $gok (qemu-storage-daemon: ${PCT[1]}%)"
fail_lines multi
echo; echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ ! -s $FAILS ]] || { log "$(wc -l <"$FAILS") run(s) failed"; exit 1; }
