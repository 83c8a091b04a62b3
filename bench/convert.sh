#!/usr/bin/env bash
# bench/convert.sh - side-by-side benchmark of `mirror-tool convert` against
# `qemu-img convert -n -W -m 16`, `nbdcopy` and `cp --sparse=always`.
# Not run in CI.  See bench/README.md.
#
#   bench/convert.sh          compare mirror-tool with its peers
#   bench/convert.sh sweep    mirror-tool only, chunk-size x -m grid
#
# Methodology
# - Two raw images in a scratch dir under /dev/shm (tmpfs, so no disk I/O;
#   this measures CPU, memory traffic and syscall overhead):
#     img1: 4 GiB, ~30% random data in runs of 64 KiB..8 MiB at random
#           64 KiB-aligned offsets (layout and content deterministic from
#           SEED), the rest holes;
#     img2: 2 GiB, fully random.
#   Images are processed one after the other so that at most one source,
#   template and target exist at a time (peak ~9 GiB of tmpfs).
# - Before every run (untimed) the target is deleted and re-created as a
#   copy of a fully allocated random template with `cp --sparse=never`, so
#   every target page exists and holds data that differs from the source:
#   a tool must really write data and really zero (or punch) the holes.
#   Tools run with -n semantics where they have it (nbdcopy and cp truncate
#   the target instead: that is their default behaviour).
# - After every run (untimed) `cmp` checks target == source; a mismatch or
#   a non-zero exit status aborts the benchmark.
# - One untimed (but verified) warm-up round, then RUNS rounds; in round r
#   the tool order is rotated by r, so tools are interleaved and none always
#   runs first/last.  Wall time is taken with `date +%s%N` around
#   `/usr/bin/time -f '%e %U %S %M'` (1-2 ms of fork/exec overhead, equal for
#   all tools), CPU = user + sys of all threads, RSS = peak resident set.
# - Reported: median wall, median CPU, max RSS over the timed rounds, and
#   the ratio median wall(row) / median wall(reference row).
# - The VM's memory is slow the first time it is touched, so (PREFAULT=1,
#   default) most free memory is touched once up front via a tmpfs fallocate.
#
# Environment: RUNS (5), SEED (42), BUF_SIZE (passed as --buf-size to every
# mirror-tool row; default: the tool's 16M), MIRROR_EXTRA (';'-separated
# extra option sets, each adds a row `mirror-tool convert -n -W <opts>`),
# MIRROR_TOOL (binary), PREFAULT (1), SWEEP_CHUNKS ("64K 256K 1M 4M"),
# SWEEP_M ("4 16 64"), SWEEP_FLAGS ("-W").
set -euo pipefail

MODE=${1:-compare}
RUNS=${RUNS:-5}
SEED=${SEED:-42}
BUF_SIZE=${BUF_SIZE:-}
MIRROR_EXTRA=${MIRROR_EXTRA:-}
PREFAULT=${PREFAULT:-1}
SWEEP_CHUNKS=${SWEEP_CHUNKS:-"64K 256K 1M 4M"}
SWEEP_M=${SWEEP_M:-"4 16 64"}
SWEEP_FLAGS=${SWEEP_FLAGS:-"-W"}
IMG1_GIB=${IMG1_GIB:-4} IMG2_GIB=${IMG2_GIB:-2}   # smaller for smoke tests
BENCH=convert.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

case $MODE in compare|sweep) ;; *) die "usage: $0 [compare|sweep]" ;; esac
[[ -x $MT ]] || die "$MT not built (ninja -C build)"
need qemu-img nbdcopy cp cmp openssl /usr/bin/time

SCRATCH=$(mktemp -d /dev/shm/convert-bench.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT TERM
RES=$SCRATCH/results.tsv        # image  row  wall  cpu  rss_kib
: >"$RES"

BUFOPT=${BUF_SIZE:+--buf-size $BUF_SIZE}
if [[ $MODE == compare ]]; then
    add_row "mirror-tool" "$MT convert -n $BUFOPT"
    add_row "mirror-tool -W" "$MT convert -n -W $BUFOPT"
    REF=1
    add_extra_rows "mirror-tool -W" "$MT convert -n -W $BUFOPT"
    add_row "qemu-img" "qemu-img convert -n -W -m 16 -f raw -O raw"
    add_row "nbdcopy" "nbdcopy"
    add_row "cp" "cp --sparse=always"
else
    REF=
    for c in $SWEEP_CHUNKS; do
        for m in $SWEEP_M; do
            buf=${BUF_SIZE:-$(($(to_bytes "$c") * m))}
            [[ $c == 1M && $m == 16 ]] && REF=${#LABEL[@]}
            add_row "chunk $c -m $m" \
                "$MT convert -n $SWEEP_FLAGS --chunk-size $c -m $m --buf-size $buf"
        done
    done
    REF=${REF:-0}
fi
NROWS=${#LABEL[@]}

# run_one IMG ROW SRC DST TEMPLATE TIMED: pre-touch, run, verify, record.
run_one() {
    local img=$1 row=$2 src=$3 dst=$4 tmpl=$5 timed=$6 t0 t1 e u s m
    local -a argv
    read -ra argv <<<"${CMD[$row]}"
    rm -f "$dst"
    cp --sparse=never "$tmpl" "$dst"
    t0=$(date +%s%N)
    if ! /usr/bin/time -o "$SCRATCH/time" -f '%e %U %S %M' \
            "${argv[@]}" "$src" "$dst" >"$SCRATCH/out" 2>&1; then
        cat "$SCRATCH/out" >&2
        die "${LABEL[$row]} failed on $img: ${argv[*]} $src $dst"
    fi
    t1=$(date +%s%N)
    cmp -s "$src" "$dst" || die "${LABEL[$row]}: target differs from source on $img"
    read -r e u s m <"$SCRATCH/time"
    local wall cpu
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    if [[ $timed == 1 ]]; then
        printf '%s\t%s\t%s\t%s\t%s\n' "$img" "$row" "$wall" "$cpu" "$m" >>"$RES"
    fi
    log "  [$img$( ((timed)) || echo " warm-up")] ${LABEL[$row]}: wall ${wall}s cpu ${cpu}s rss $((m / 1024))MiB"
}

# bench_image IMG SRC TEMPLATE: warm-up round, then RUNS rotated rounds.
bench_image() {
    local img=$1 src=$2 tmpl=$3 dst=$SCRATCH/target r k
    for ((k = 0; k < NROWS; k++)); do run_one "$img" "$k" "$src" "$dst" "$tmpl" 0; done
    for ((r = 0; r < RUNS; r++)); do
        log "  round $((r + 1))/$RUNS"
        for ((k = 0; k < NROWS; k++)); do
            run_one "$img" $(((r + k) % NROWS)) "$src" "$dst" "$tmpl" 1
        done
    done
    rm -f "$dst"
}

# report IMG TITLE: table + verdict.
report() {
    local img=$1 k w ref ok worst rss_ok lim_mib
    summarize "$img"
    ref=${MW[REF]}
    echo
    echo "== $2 (RUNS=$RUNS, ratio = median wall / median wall of '${LABEL[REF]}') =="
    printf '%-40s %9s %9s %8s %7s %7s %5s\n' tool wall_s cpu_s rss_MiB ratio \
        best_s slow
    for ((k = 0; k < NROWS; k++)); do
        printf '%-40s %9s %9s %8s %7s %7s %5s\n' "${LABEL[k]}" "${MW[k]}" "${MC[k]}" \
            $((MR[k] / 1024)) "$(ratio "${MW[k]}" "$ref")" "${MB[k]}" "${NS[k]}"
    done
    for ((k = 0; k < NROWS; k++)); do
        [[ -n ${LIMIT[k]} ]] || continue
        rss_ok=$(rss_check "$k") lim_mib=$((LIMIT[k] / MiB))
        if [[ $MODE == compare ]]; then
            ok=yes worst=
            for ((w = 0; w < NROWS; w++)); do
                [[ -z ${LIMIT[w]} ]] || continue
                if gt "${MW[k]}" "${MW[w]}"; then ok=no worst+=" ${LABEL[w]}"; fi
            done
            echo "verdict $img: ${LABEL[k]}: wall <= every peer: $ok${worst:+ (slower than:$worst)};" \
                "peak RSS $((MR[k] / 1024)) MiB < $lim_mib MiB: $rss_ok"
        elif [[ $rss_ok == no ]]; then
            echo "note $img: ${LABEL[k]}: peak RSS $((MR[k] / 1024)) MiB >= limit $lim_mib MiB"
        fi
    done
}

# --- main -------------------------------------------------------------------
echo "# convert.sh mode=$MODE RUNS=$RUNS SEED=$SEED BUF_SIZE=${BUF_SIZE:-default($DEFAULT_BUF)}"
echo "# machine: nproc=$(nproc), $(uname -srm), $(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
echo "# versions: $("$MT" --version 2>&1 | head -1); $(qemu-img --version | head -1);" \
    "$(nbdcopy --version | head -1); $(cp --version | head -1)"
echo "# commands (each followed by SRC DST; target pre-touched before each run):"
for ((k = 0; k < NROWS; k++)); do printf '#   %-34s %s\n' "${LABEL[k]}:" "${CMD[k]}"; done

[[ $PREFAULT == 1 ]] && prefault

log "creating img1 ($IMG1_GIB GiB, 30% random) and its template..."
make_sparse "$SCRATCH/img1.raw" "$IMG1_GIB" 30
make_full "$SCRATCH/tmpl" "$IMG1_GIB" $((SEED + 1))
bench_image img1 "$SCRATCH/img1.raw" "$SCRATCH/tmpl"
rm -f "$SCRATCH/img1.raw" "$SCRATCH/tmpl"

log "creating img2 ($IMG2_GIB GiB, fully random) and its template..."
make_full "$SCRATCH/img2.raw" "$IMG2_GIB" $((SEED + 2))
make_full "$SCRATCH/tmpl" "$IMG2_GIB" $((SEED + 3))
bench_image img2 "$SCRATCH/img2.raw" "$SCRATCH/tmpl"
rm -f "$SCRATCH/img2.raw" "$SCRATCH/tmpl"

report img1 "img1: $IMG1_GIB GiB raw, 30% random data"
report img2 "img2: $IMG2_GIB GiB raw, fully random"
