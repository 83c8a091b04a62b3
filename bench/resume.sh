#!/usr/bin/env bash
# bench/resume.sh - a job killed at about 90% and resumed from its
# --state-file, against a full run (issue 20: the resumed run's wall at
# most 15% of the full run's).  Not run in CI.  See bench/README.md.
#
# SIZE_GIB GiB of random data in a raw file in /dev/shm is copied into a
# pre-touched raw file in /dev/shm (re-made before every run, untimed, by
# `cp --sparse=never` of a random template, so that every target page
# exists and differs from the source) by
#   convert: mirror-tool convert -n [--state-file ST] SRC DST
#   start:   mirror-tool start [--state-file ST] SRC DST  (no QMP: READY,
#            completion and exit on their own)
# Rows, per kind, interleaved (the order rotated by the round):
#   full:          the command without --state-file;
#   full, state:   with --state-file (a new one): what keeping it costs;
#   resumed:       the same command with -p in the background, SIGKILLed
#                  (untimed) at a random instant of the 64 MiB of the copy
#                  that end at about KILL_PCT% (see kill_at; a run that
#                  finishes first is retried); then the timed rerun of
#                  the command with --state-file.
# Every run's target is compared with the source (cmp, untimed).  The
# resumed row also records the bar at the kill and the known-good bytes
# of the "resuming from" line.
# Environment: RUNS (5), SIZE_GIB (2), KILL_PCT (90), SEED (42),
# MIRROR_TOOL, PREFAULT (1).
set -euo pipefail

RUNS=${RUNS:-5}
SIZE_GIB=${SIZE_GIB:-2}
KILL_PCT=${KILL_PCT:-90}
SEED=${SEED:-42}
PREFAULT=${PREFAULT:-1}
GOAL=0.15
BENCH=resume.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

[[ $# == 0 ]] || die "usage: $0 (settings in the environment)"
[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
[[ $KILL_PCT =~ ^[0-9]+$ ]] && ((KILL_PCT > 0 && KILL_PCT < 100)) ||
    die "KILL_PCT: '$KILL_PCT' is not a percentage in 1..99"
need cmp openssl od

SCRATCH=$(mktemp -d /dev/shm/resume-bench.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT TERM
MT=$SCRATCH/mirror-tool         # a rebuild during the run changes nothing
cp "$MT_SRC" "$MT"
SRC=$SCRATCH/src DST=$SCRATCH/dst TMPL=$SCRATCH/tmpl ST=$SCRATCH/state
# kind row wall bar_pct known_bytes load1
RES=$SCRATCH/results.tsv
: >"$RES"

KINDS=(convert start)
declare -A TAU_MS
ROWS=("full" "full, state" "resumed")

# cmd KIND STATE: the command line of KIND (STATE 1: with --state-file).
cmd() {
    local st=
    [[ $2 == 1 ]] && st="--state-file $ST"
    case $1 in
    convert) echo "$MT convert -n $st $SRC $DST" ;;
    start) echo "$MT start $st $SRC $DST" ;;
    esac
}

# bar FILE: the percentage of the last progress bar in FILE (0: none).
bar() {
    local s=
    IFS= read -r -d '' s <"$1" || true
    [[ $s == *%* ]] || { echo 0; return; }
    s=${s%\%*}
    echo "${s##* }"
}

# known FILE: the known-good bytes a state file records (its header's
# u64 at offset 64, docs/mirror-tool.md "State file format"); 0 if none.
known() {
    local k
    k=$(od -A n -t u8 -j 64 -N 8 "$1" 2>/dev/null | tr -d ' ') || true
    echo "${k:-0}"
}

# kill_at KIND: run KIND's command with --state-file and -p in the
# background and SIGKILL it at a random instant of the 64 MiB that end at
# about KILL_PCT% (the state file is written every 64 MiB made durable):
# once its progress bar (redrawn every 100 ms) or its state file shows
# KILL_PCT% less 64 MiB, after a random delay of up to the time a full run
# takes for 64 MiB (TAU_MS[KIND], from the warm-up).  Sets BAR (the bar at
# the kill).  Retries a run that completed first.
kill_at() {
    local try pid b rc delay
    local mib64=$((64 << 20)) size=$((SIZE_GIB << 30))
    local want=$((size * KILL_PCT / 100 - mib64))
    local want_pct=$((want * 100 / size))
    for try in 1 2 3 4 5; do
        rm -f "$ST"
        cp --sparse=never "$TMPL" "$DST"
        : >"$SCRATCH/killed.err"
        # shellcheck disable=SC2046 # word-split command line
        $(cmd "$1" 1) -p 2>"$SCRATCH/killed.err" >/dev/null &
        pid=$!
        while kill -0 "$pid" 2>/dev/null; do
            b=$(bar "$SCRATCH/killed.err")
            ((${b%.*} >= want_pct)) && break
            (($(known "$ST") >= want)) && break
            sleep 0.005
        done
        delay=$((RANDOM % (TAU_MS[$1] + 1)))
        sleep "$(printf '%d.%03d' $((delay / 1000)) $((delay % 1000)))"
        kill -KILL "$pid" 2>/dev/null || true
        rc=0
        wait "$pid" 2>/dev/null || rc=$?
        if ((rc == 0)); then
            log "  ($1: finished before the kill, again)"
            continue
        fi
        ((rc == 137)) || { cat "$SCRATCH/killed.err" >&2; die "$1: exit code $rc"; }
        if [[ ! -e $ST ]]; then
            # Completed (it removes the file), killed before it exited.
            log "  ($1: completed before the kill, again)"
            continue
        fi
        BAR=$(bar "$SCRATCH/killed.err")
        return 0
    done
    die "$1: five runs finished before $KILL_PCT%"
}

# run_one KIND ROW TIMED: one run of ROW, checked; a line in $RES.
run_one() {
    local kind=$1 row=$2 timed=$3 t0 t1 wall known=0 st=1
    BAR=0
    case $row in
    0) st=0; cp --sparse=never "$TMPL" "$DST" ;;
    1) rm -f "$ST"; cp --sparse=never "$TMPL" "$DST" ;;
    2) kill_at "$kind" ;;
    esac
    t0=$(date +%s%N)
    # shellcheck disable=SC2046
    $(cmd "$kind" "$st") >"$SCRATCH/out" 2>&1 ||
        { cat "$SCRATCH/out" >&2; die "$kind ${ROWS[row]}: failed"; }
    t1=$(date +%s%N)
    cmp -s "$SRC" "$DST" || die "$kind ${ROWS[row]}: target differs from source"
    [[ -e $ST ]] && die "$kind ${ROWS[row]}: the state file is left"
    if ((row == 2)); then
        known=$(sed -n 's/.*resuming from .*: \([0-9]*\) of [0-9]* bytes known good$/\1/p' \
            "$SCRATCH/out")
        [[ -n $known ]] || die "$kind: no 'resuming from' line"
    fi
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    # The warm-up's full run with a state file times 64 MiB for kill_at.
    ((timed || row != 1)) ||
        TAU_MS[$kind]=$(awk -v w="$wall" -v g="$SIZE_GIB" \
            'BEGIN { printf "%d", w * 1000 * 64 / (g * 1024) }')
    ((timed)) && printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$row" "$wall" \
        "$BAR" "$known" "$(cut -d' ' -f1 /proc/loadavg)" >>"$RES"
    log "  [$kind$( ((timed)) || echo " warm-up")] ${ROWS[row]}: wall ${wall}s" \
        "$( ((row == 2)) && echo "(killed at $BAR%, $((known >> 20)) MiB known good)")"
}

kcol() { awk -F'\t' -v k="$1" -v r="$2" -v c="$3" '$1 == k && $2 == r { print $c }' "$RES"; }

# --- main -------------------------------------------------------------------
echo "# resume.sh RUNS=$RUNS SIZE_GIB=$SIZE_GIB KILL_PCT=$KILL_PCT SEED=$SEED"
echo "# machine: nproc=$(nproc), $(uname -srm), $(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
echo "# versions: $("$MT" --version 2>&1 | head -1) ($MT_SRC, sha256" \
    "$(sha256sum "$MT" | cut -c1-12))"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for kind in "${KINDS[@]}"; do
    echo "#   $kind: $(cmd "$kind" 1 | sed "s|$MT|mirror-tool|; s|$SCRATCH|\$SCRATCH|g")"
done

[[ $PREFAULT == 1 ]] && prefault
log "creating the source and the template ($SIZE_GIB GiB each, random)..."
make_full "$SRC" "$SIZE_GIB" "$SEED"
make_full "$TMPL" "$SIZE_GIB" $((SEED + 1))

for kind in "${KINDS[@]}"; do
    for ((k = 0; k < ${#ROWS[@]}; k++)); do run_one "$kind" "$k" 0; done
done
for ((r = 0; r < RUNS; r++)); do
    log "  round $((r + 1))/$RUNS"
    for kind in "${KINDS[@]}"; do
        for ((k = 0; k < ${#ROWS[@]}; k++)); do
            run_one "$kind" $(((r + k) % ${#ROWS[@]})) 1
        done
    done
done

echo
echo "== $SIZE_GIB GiB of random data, tmpfs to tmpfs, killed at about" \
    "$KILL_PCT% (RUNS=$RUNS; ratio = median wall / median wall of 'full') =="
awk -F'\t' '{ n++; s += $6; if ($6 > m) m = $6 } END {
    if (n) printf "1-minute load average after the runs: mean %.1f, max %.1f\n", s / n, m }' "$RES"
printf '%-8s %-12s %8s %6s %7s %4s %10s %10s\n' kind row wall_s ratio best_s slow \
    killed_at known_MiB
for kind in "${KINDS[@]}"; do
    full=$(kcol "$kind" 0 3 | median)
    for ((k = 0; k < ${#ROWS[@]}; k++)); do
        w=$(kcol "$kind" "$k" 3 | median)
        b=$(kcol "$kind" "$k" 3 | best)
        printf '%-8s %-12s %8s %6s %7s %4s %10s %10s\n' "$kind" "${ROWS[k]}" "$w" \
            "$(ratio "$w" "$full")" "$b" "$(kcol "$kind" "$k" 3 | slow_runs "$b")" \
            "$( ((k == 2)) && kcol "$kind" 2 4 | median || echo -)" \
            "$( ((k == 2)) && kcol "$kind" 2 5 | awk '{ print $1 / 1048576 }' | median || echo -)"
    done
done
for kind in "${KINDS[@]}"; do
    r=$(ratio "$(kcol "$kind" 2 3 | median)" "$(kcol "$kind" 0 3 | median)")
    ok=no
    [[ $r != nan ]] && ! gt "$r" "$GOAL" && ok=yes
    echo "verdict $kind: resumed wall ${r}x the full run's <= $GOAL: $ok"
done
