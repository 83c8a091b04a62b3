#!/usr/bin/env bash
# bench/live.sh - the live-migration case: a guest (fio) busy on the
# source through the daemon's own NBD export while the job copies it, and
# what the guest feels of it.  `mirror-tool start --qmp --export` side by
# side with qemu-storage-daemon (its NBD export of the source node plus
# blockdev-mirror).  Not run in CI.  See bench/README.md.
#
# SIZE of random data in a raw file in /dev/shm is mirrored (sync=full)
# into `nbdkit file TARGET` on a UNIX socket, TARGET a pre-touched file in
# /dev/shm.  Each run, driven by bench/qmp.py under its own nbdkit:
#   start the daemon; start fio through the daemon's export at a fixed
#   rate and, once fio says it is connected (fio itself takes about a
#   second to start), the job over QMP; wait for BLOCK_JOB_READY; stop fio
#   (SIGINT; as a migration pauses the guest); query-block-jobs;
#   block-job-complete; wait for BLOCK_JOB_COMPLETED; quit.  Then
#   (untimed) `cmp` checks that the target equals the source, which fio
#   changed.
# The no-job rows run the same fio through the same export for BASE_S
# seconds (a measurement window) with no job: `mirror-tool serve` with the
# same export, qemu-storage-daemon with the same command line and no
# blockdev-mirror.  They are the guest's baseline.
# Workloads (WORKLOADS, any of "w r d"), each at every rate of RATES:
#   w  fio FIO_BS random writes;
#   r  a read-heavy guest: fio random 70% reads, 30% writes, the asked
#      rate split 70/30 (--rate=READ,WRITE);
#   d  random writes as w into a latency-bound target: `nbdkit
#      --filter=delay file TARGET` with DELAY on reads, writes, zeroes and
#      trims (the delay filter cannot delay flushes).
# The rates are RATES percent of the copy rate: qemu-storage-daemon's time
# to READY with no writer, the median of CALIB_RUNS untimed warm-up runs
# (COPY_RATE, DELAY_COPY_RATE in bytes/s override it), measured on the
# plain target for w and r and on the delayed one for d, so both tools
# get the same load.
# Then, per workload and rate, RUNS rounds with the row order rotated by
# the round.
# - ready_s: from the command that starts the job to BLOCK_JOB_READY;
# - pause_ms: the switch-over pause, from sending block-job-complete to the
#   receipt of BLOCK_JOB_COMPLETED (median and max);
# - left_MiB: len - offset in query-block-jobs just before the complete;
# - wr_MiB/s, rd_MiB/s, pct: the rates fio achieved, and their sum in
#   percent of the asked rate;
# - p50_us, p99_us (rd_p99): fio's completion latency percentiles of the
#   writes (reads); base_p50, base_p99 (base_rd99) those of the tool's
#   no-job row; p99x (rd_p99x): p99 / base_p99.
# All medians over the runs.  The job's extra query-block-jobs fields, if
# any, are logged per run.
# Environment: RUNS (5), WORKLOADS ("w r d"), RATES ("25 50"), SIZE (1G),
# COPY_RATE, DELAY_COPY_RATE, CALIB_RUNS (3), BASE_S (2), DELAY (2ms),
# FIO_BS (64k), FIO_DEPTH (8), SEED (42), TIMEOUT (300 s), MIRROR_EXTRA
# ("--guest-priority off"; ';'-separated mirror-tool option sets, one
# extra row each), MIRROR_TOOL, QSD, PREFAULT (1).
set -euo pipefail

RUNS=${RUNS:-5}
WORKLOADS=${WORKLOADS:-"w r d"}
RATES=${RATES:-"25 50"}
SIZE=${SIZE:-1G}
COPY_RATE=${COPY_RATE:-} DELAY_COPY_RATE=${DELAY_COPY_RATE:-}
CALIB_RUNS=${CALIB_RUNS:-3}
BASE_S=${BASE_S:-2}
DELAY=${DELAY:-2ms}
FIO_BS=${FIO_BS:-64k} FIO_DEPTH=${FIO_DEPTH:-8}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-300}
MIRROR_EXTRA=${MIRROR_EXTRA-"--guest-priority off"}
PREFAULT=${PREFAULT:-1}
QSD=${QSD:-qemu-storage-daemon}
EXPORT=1
GOAL=0.8                        # ready_s ratio
RATE_GOAL=95                    # percent of the asked rate
# At least qemu-storage-daemon's guest rate, within this many percent of
# the asked rate: fio's rate limiter alone varies by a few tenths.
RATE_TOLERANCE=0.5
P99_GOAL=2                      # p99 / no-job p99
READ_PCT=70                     # the read share of workload r
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
for w in $WORKLOADS; do
    case $w in w | r | d) ;; *) die "WORKLOADS: unknown workload '$w' (w, r, d)" ;; esac
done
for p in $RATES; do [[ $p =~ ^[0-9]+$ ]] || die "RATES: '$p' is not a percentage"; done
[[ -z $COPY_RATE || $COPY_RATE =~ ^[0-9]+$ ]] || die "COPY_RATE: '$COPY_RATE' is not bytes/s"
[[ -z $DELAY_COPY_RATE || $DELAY_COPY_RATE =~ ^[0-9]+$ ]] ||
    die "DELAY_COPY_RATE: '$DELAY_COPY_RATE' is not bytes/s"
[[ $BASE_S =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "BASE_S: '$BASE_S' is not seconds"
[[ $DELAY =~ ^[0-9]+(ms)?$ ]] || die "DELAY: '$DELAY' is not SECS or NNms"

setup_scratch live-bench
add_job_row "mirror-tool" mt ""
add_mt_extra_rows
add_job_row "qemu-storage-daemon" qsd ""
add_job_row "mirror-tool serve (no job)" mt0 ""
add_job_row "qemu-storage-daemon (no job)" qsd0 ""

# server_args WL: nbdkit's plugin, filters and parameters.
server_args() {
    case $1 in
    w | r) echo "file $SCRATCH/target" ;;
    d) echo "--filter=delay file $SCRATCH/target delay-read=$DELAY" \
        "delay-write=$DELAY delay-zero=$DELAY delay-trim=$DELAY" ;;
    esac
}

# rate_spec WL BPS: fio's --rate for a total of BPS bytes/s.
rate_spec() {
    if [[ $1 == r ]]; then
        echo "$(($2 * READ_PCT / 100)),$(($2 - $2 * READ_PCT / 100))"
    else
        echo "$2"
    fi
}

# writer WL RATE: the fio command of workload WL at fio's --rate=RATE
# through the export until SIGINT.
writer() {
    local rw=--rw=randwrite
    [[ $1 == r ]] && rw="--rw=randrw --rwmixread=$READ_PCT"
    echo "fio --name=guest --ioengine=nbd --uri=$(export_uri) $rw --thread" \
        "--bs=$FIO_BS --iodepth=$FIO_DEPTH --rate=$2 --time_based --runtime=3600" \
        "--output-format=json"
}

print_header live.sh "RUNS=$RUNS WORKLOADS='$WORKLOADS' RATES='$RATES' SIZE=$SIZE\
 BASE_S=$BASE_S DELAY=$DELAY FIO_BS=$FIO_BS FIO_DEPTH=$FIO_DEPTH"
for w in $WORKLOADS; do
    echo "#   $w: nbdkit -U - $(server_args "$w" | sed "s|$SCRATCH|\$SCRATCH|g")"
done
echo "# daemons (\"\$uri\" and \$unixsocket: the nbdkit server):"
print_rows
echo "#   no-job rows: fio for ${BASE_S}s, then quit over QMP" \
    "(qemu-storage-daemon, after qmp_capabilities) or SIGINT (mirror-tool serve)"
for w in $WORKLOADS; do
    [[ $w == d ]] && continue
    spec=RATE
    [[ $w == r ]] && spec="$READ_PCT%_OF_RATE,$((100 - READ_PCT))%_OF_RATE"
    echo "# guest $w: $(writer "$w" "$spec" | sed "s|$SCRATCH|\$SCRATCH|g")"
done
[[ " $WORKLOADS " == *" d "* ]] && echo "# guest d: as guest w"
[[ $PREFAULT == 1 ]] && prefault

log "creating a $SIZE random source and target template..."
make_random "$SCRATCH/src" "$SIZE" $((SEED + 2))
make_random "$SCRATCH/tmpl" "$SIZE" $((SEED + 3))
bytes=$(to_bytes "$SIZE")

# calibrate SERVER_ARGS RATE: a warm-up run of every job row with no
# writer; unless RATE (bytes/s) is given, CAL_RATE is SIZE / the median
# ready_s of CALIB_RUNS such runs of qemu-storage-daemon (one run varied
# 1.6x), else RATE.
calibrate() {
    local k c t
    local -a calib=()
    CAL_RATE=$2
    for ((k = 0; k < ${#JLABEL[@]}; k++)); do
        is_base "$k" && continue
        LAST_READY=
        job_run idle "$k" 0 "$1"
        [[ ${JKIND[k]} == qsd && -z $2 ]] || continue
        for ((c = 0; c < CALIB_RUNS; c++)); do
            ((c == 0)) || { LAST_READY=; job_run idle "$k" 0 "$1"; }
            [[ -n $LAST_READY ]] || die "the qemu-storage-daemon warm-up run failed"
            calib+=("$LAST_READY")
        done
        t=$(printf '%s\n' "${calib[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
        CAL_RATE=$(awk -v b="$bytes" -v t="$t" 'BEGIN { printf "%d", b / t }')
    done
}

# The copy rate of each workload: CRATE[w] bytes/s.
declare -A CRATE
if [[ " $WORKLOADS " == *" "[wr]" "* ]]; then
    log "warm-up, no writer:"
    calibrate "$(server_args w)" "$COPY_RATE"
    CRATE[w]=$CAL_RATE CRATE[r]=$CAL_RATE
fi
if [[ " $WORKLOADS " == *" d "* ]]; then
    log "warm-up into the delayed target, no writer:"
    calibrate "$(server_args d)" "$DELAY_COPY_RATE"
    CRATE[d]=$CAL_RATE
fi
for w in $WORKLOADS; do
    echo "# $w: copy rate $((CRATE[$w] / MiB)) MiB/s; guest rates: $(for p in $RATES; do
        printf '%s%% = %d MiB/s  ' "$p" $((CRATE[$w] * p / 100 / MiB)); done)"
done

for w in $WORKLOADS; do
    for p in $RATES; do
        rate=$((CRATE[$w] * p / 100))
        log "$w: guest at $p% of the copy rate, $((rate / MiB)) MiB/s:"
        wr=
        ((rate > 0)) && wr=$(writer "$w" "$(rate_spec "$w" "$rate")")
        job_rounds "$w$p" "$(server_args "$w")" "$wr"
    done
done

# mib: bytes/s on stdin to MiB/s.
mib() { awk '{ print $1 / 1048576 }'; }
# fixed DIGITS: the numbers on stdin with DIGITS decimals ("nan" stays).
fixed() { awk -v d="$1" '{ if ($1 ~ /^[0-9.]+$/) printf "%." d "f\n", $1; else print }'; }
num() { [[ $1 =~ ^[0-9.]+$ ]]; }
# yes_if COND...: "yes" if the command COND succeeds, else "no".
yes_if() { if "$@"; then echo yes; else echo no; fi; }
le() { num "$1" && num "$2" && ! gt "$1" "$2"; }

COLS=(tool ready_s ratio pause_ms max_ms left_MiB wr_MiB/s rd_MiB/s pct p50_us p99_us
    rd_p99 base_p50 base_p99 p99x rd_base99 rd_p99x done_s cpu_s rss_MiB fail)

# live_report WL TITLE ASKED_BPS: the table of workload WL (READS=1: with
# the read columns) and a verdict per mirror-tool row.  Ratios are against
# the qemu-storage-daemon row, p99x against the row's own no-job row.
live_report() {
    local wl=$1 asked=$3 reads=0 k b ref=-1 n=${#JLABEL[@]}
    local -a RD PS PX LF WR RR GR PCT W50 W99 R99 DN CPU RSS BASE X99 XR99
    local -A base=()
    [[ $wl == r* ]] && reads=1
    for ((k = 0; k < n; k++)); do
        [[ ${JKIND[k]} == qsd ]] && ref=$k
        is_base "$k" && base[${JKIND[k]%0}]=$k
    done
    for ((k = 0; k < n; k++)); do
        RD[k]=$(jcol "$wl" "$k" 3 | median)
        PS[k]=$(jcol "$wl" "$k" 5 | median)
        PX[k]=$(jcol "$wl" "$k" 5 | sort -g | tail -1)
        LF[k]=$(jcol "$wl" "$k" 6 | mib | median | fixed 1)
        WR[k]=$(jcol "$wl" "$k" 9 | mib | median | fixed 1)
        RR[k]=$(jcol "$wl" "$k" 13 | mib | median | fixed 1)
        GR[k]=$(awk -F'\t' -v w="$wl" -v r="$k" '$1 == w && $2 == r { print $9 + $13 }' "$RES" |
            mib | median | fixed 1)
        PCT[k]=$(awk -v g="${GR[k]}" -v a="$asked" 'BEGIN {
            if (g ~ /^[0-9.]+$/ && a > 0) printf "%.1f", g * 1048576 * 100 / a; else print "nan" }')
        W50[k]=$(jcol "$wl" "$k" 11 | median | fixed 0)
        W99[k]=$(jcol "$wl" "$k" 12 | median | fixed 0)
        R99[k]=$(jcol "$wl" "$k" 15 | median | fixed 0)
        DN[k]=$(jcol "$wl" "$k" 4 | median)
        CPU[k]=$(jcol "$wl" "$k" 7 | median)
        RSS[k]=$(jcol "$wl" "$k" 8 | sort -n | tail -1)
    done
    for ((k = 0; k < n; k++)); do
        BASE[k]=${base[${JKIND[k]%0}]:--1}
    done
    echo
    echo "== $2 (RUNS=$RUNS; medians; ratio: ready_s / qemu-storage-daemon's;" \
        "p99x: p99 / the tool's no-job p99) =="
    load_line "$wl"
    # row CELL...: one cell per column of COLS, without the read columns
    # (rd_*) unless reads.
    row() {
        local i w
        local -a c=("$@")
        printf '%-34s' "$1"
        for ((i = 1; i < ${#COLS[@]}; i++)); do
            [[ $reads == 0 && ${COLS[i]} == rd_* ]] && continue
            w=${#COLS[i]}
            ((w >= 8)) || w=8
            printf ' %*s' "$w" "${c[i]}"
        done
        echo
    }
    row "${COLS[@]}"
    for ((k = 0; k < n; k++)); do
        b=${BASE[k]}
        X99[k]=$(ratio "${W99[k]}" "${W99[b]:-nan}")
        XR99[k]=$(ratio "${R99[k]}" "${R99[b]:-nan}")
        if is_base "$k"; then
            row "${JLABEL[k]}" - - - - - "${WR[k]}" "${RR[k]}" "${PCT[k]}" "${W50[k]}" \
                "${W99[k]}" "${R99[k]}" - - - - - - "${CPU[k]}" $((${RSS[k]:-0} / 1024)) \
                "$(fail_count "$wl" "$k")"
        else
            row "${JLABEL[k]}" "${RD[k]}" "$(ratio "${RD[k]}" "${RD[ref]}")" "${PS[k]}" \
                "${PX[k]:-nan}" "${LF[k]}" "${WR[k]}" "${RR[k]}" "${PCT[k]}" "${W50[k]}" \
                "${W99[k]}" "${R99[k]}" "${W50[b]:-nan}" "${W99[b]:-nan}" "${X99[k]}" \
                "${R99[b]:-nan}" "${XR99[k]}" "${DN[k]}" "${CPU[k]}" \
                $((${RSS[k]:-0} / 1024)) "$(fail_count "$wl" "$k")"
        fi
    done
    echo "qemu-storage-daemon $wl: p99 ${W99[ref]} us, ${X99[ref]}x its no-job p99" \
        "(${W99[${BASE[ref]}]:-nan} us)$( ((reads)) && echo "; read p99 ${R99[ref]} us," \
        "${XR99[ref]}x its no-job read p99")"
    local r rok pok tok sok
    for ((k = 0; k < n; k++)); do
        [[ ${JKIND[k]} == mt ]] || continue
        b=${BASE[k]}
        rok=$(yes_if le "$RATE_GOAL" "${PCT[k]}")
        [[ $rok == yes ]] && rok=$(yes_if le "${PCT[ref]}" "$(awk -v p="${PCT[k]}" \
            -v t="$RATE_TOLERANCE" 'BEGIN { print p + t }')")
        pok=$(yes_if le "${X99[k]}" "$P99_GOAL")
        ((reads)) && [[ $pok == yes ]] && pok=$(yes_if le "${XR99[k]}" "$P99_GOAL")
        r=$(ratio "${RD[k]}" "${RD[ref]}")
        tok=$(yes_if le "$r" "$GOAL")
        sok=$(yes_if num "${PS[k]}")
        [[ $sok == yes ]] && sok=$(yes_if gt 10 "${PS[k]}")
        echo "verdict $wl: ${JLABEL[k]}: guest ${GR[k]} MiB/s = ${PCT[k]}% of the" \
            "asked $((asked / MiB)) >= ${RATE_GOAL}% and >= qemu-storage-daemon's" \
            "${GR[ref]} (${PCT[ref]}%, less ${RATE_TOLERANCE} points): $rok; p99 ${W99[k]} us =" \
            "${X99[k]}x the no-job ${W99[b]:-nan}$( ((reads)) && echo " (reads: ${XR99[k]}x)")" \
            "<= ${P99_GOAL}x: $pok;" \
            "time to READY ${r}x qemu-storage-daemon's <= ${GOAL}x: $tok;" \
            "median pause ${PS[k]} ms < 10 ms: $sok"
    done
    fail_lines "$wl"
}

for w in $WORKLOADS; do
    for p in $RATES; do
        rate=$((CRATE[$w] * p / 100))
        case $w in
        w) t="fio $FIO_BS random writes" ;;
        r) t="fio $FIO_BS random $READ_PCT% reads, $((100 - READ_PCT))% writes" ;;
        d) t="fio $FIO_BS random writes, target behind a $DELAY delay" ;;
        esac
        live_report "$w$p" "$w$p: $SIZE random raw -> nbdkit file, $t at $p% of the copy rate ($((rate / MiB)) MiB/s) through the export" "$rate"
    done
done
echo; echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ ! -s $FAILS ]] || { log "$(wc -l <"$FAILS") run(s) failed"; exit 1; }
