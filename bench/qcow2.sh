#!/usr/bin/env bash
# bench/qcow2.sh - `mirror-tool convert` to and from qcow2, side by side with
# `qemu-img convert -W -m 16`.  Not run in CI.  See bench/README.md.
#
#   bench/qcow2.sh            all three workloads, interleaved
#   WORKLOADS=Q3 bench/qcow2.sh
#
# Workloads (scratch files in a tmpfs dir under /dev/shm, so this measures
# CPU, memory traffic and syscalls, not storage):
#   Q1  raw -> qcow2: img1, 4 GiB, ~30% random data in runs of 64 KiB..8 MiB
#       at random 64 KiB-aligned offsets, the rest holes (as in convert.sh);
#   Q2  qcow2 -> raw: img1 converted to qcow2 once by qemu-img (untimed),
#       back to a new raw file;
#   Q3  raw -> qcow2 with -c: img1's layout and data at 1 GiB (IMGC_GIB;
#       compressing is ~50x slower than copying): random data does not
#       compress, so this measures how fast a tool finds that out;
#   Q4  raw -> qcow2 with -c: imgt, 1 GiB, the same layout filled with text
#       (words of a skewed 4096-word vocabulary: zlib compresses it to about
#       half, with LZ matches and Huffman coding), so every cluster is
#       really compressed.
#   Every layout and all data depend only on SEED.
# On Q1 and Q2 a "copy floor" row runs bench/copy-floor.c (built with cc):
# img1's data extents into a new raw file, pread + pwrite, a thread per
# CPU.  Both workloads write those same bytes into a new file, so it shows
# what the machine allows; no verdict is taken on it.
# Method: the target of every run is a new file (deleted, untimed, before
# the run): each tool creates it.  One untimed warm-up round, whose outputs
# are verified with `qemu-img compare` against the source (and `qemu-img
# check` for qcow2 outputs); then RUNS rounds, the tool order rotated by the
# round number.  Every run is under `timeout $TIMEOUT`; a failure, a time-out
# or a wrong output stops the benchmark.  Wall time is `date +%s%N` around
# `/usr/bin/time -f '%e %U %S %M'` (CPU = user + sys of all threads, peak
# RSS); out_MiB is the space the output file takes (allocated blocks).
# Environment: RUNS (5), WORKLOADS ("Q1 Q2 Q3 Q4"), IMG1_GIB (4), IMGC_GIB (1),
# SEED (42), TIMEOUT (600 s), BUF_SIZE, MIRROR_EXTRA (';'-separated option
# sets, one extra mirror-tool row each), MIRROR_TOOL, PREFAULT (1).
set -euo pipefail

RUNS=${RUNS:-5}
WORKLOADS=${WORKLOADS:-"Q1 Q2 Q3 Q4"}
IMG1_GIB=${IMG1_GIB:-4} IMGC_GIB=${IMGC_GIB:-1}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-600}
BUF_SIZE=${BUF_SIZE:-}
MIRROR_EXTRA=${MIRROR_EXTRA:-}
PREFAULT=${PREFAULT:-1}
BENCH=qcow2.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
declare -A GOAL=([Q1]=0.8 [Q2]=0.8 [Q3]=0.6 [Q4]=0.6)
# Per workload: source, output format options of mirror-tool and of qemu-img.
declare -A SRC MTOPT=([Q1]="-O qcow2" [Q2]="-O raw" [Q3]="-c -O qcow2"
                      [Q4]="-c -O qcow2")
declare -A QOPT=([Q1]="-f raw -O qcow2" [Q2]="-f qcow2 -O raw"
                 [Q3]="-c -f raw -O qcow2" [Q4]="-c -f raw -O qcow2")
declare -A TITLE=(
    [Q1]="Q1: raw -> qcow2, $IMG1_GIB GiB, 30% random data"
    [Q2]="Q2: qcow2 -> raw, $IMG1_GIB GiB, 30% random data"
    [Q3]="Q3: raw -> qcow2 -c, $IMGC_GIB GiB, 30% random data"
    [Q4]="Q4: raw -> qcow2 -c, $IMGC_GIB GiB, 30% text data")

[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
need qemu-img openssl timeout /usr/bin/time
for w in $WORKLOADS; do [[ -n ${GOAL[$w]:-} ]] || die "unknown workload $w"; done

SCRATCH=$(mktemp -d /dev/shm/qcow2-bench.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT TERM
RES=$SCRATCH/results.tsv        # workload row wall cpu rss_kib out_kib
: >"$RES"
# Test a private copy: a rebuild during the run must not change the binary.
MT=$SCRATCH/mirror-tool
cp "$MT_SRC" "$MT"

BUFOPT=${BUF_SIZE:+--buf-size $BUF_SIZE}
add_row "mirror-tool -W" "$MT convert -W $BUFOPT"
add_extra_rows "mirror-tool -W" "$MT convert -W $BUFOPT"
has() { [[ " $WORKLOADS " == *" $1 "* ]]; }
FLOOR=-1
if has Q1 || has Q2; then
    need cc
    cc -O2 -pthread -o "$SCRATCH/copy-floor" "$ROOT/bench/copy-floor.c" ||
        die "cannot build bench/copy-floor.c"
    FLOOR=${#LABEL[@]}
    add_row "copy floor (bench/copy-floor.c)" "$SCRATCH/copy-floor"
fi
add_row "qemu-img" "qemu-img convert -W -m 16"
NROWS=${#LABEL[@]}
PEER=$((NROWS - 1))

# textstream KEY: words of a 4096-word vocabulary (skewed frequencies), 12 a
# line, forever; deterministic from KEY.
textstream() {
    awk -v seed="$1" 'BEGIN {
        srand(seed)
        for (i = 0; i < 4096; i++) {
            n = 2 + int(rand() * 9); w = ""
            for (j = 0; j < n; j++) w = w sprintf("%c", 97 + int(rand() * 26))
            v[i] = w
        }
        while (1) {
            line = ""
            for (k = 0; k < 12; k++) line = line v[int(rand() ^ 3 * 4096)] " "
            print line
        }
    }' 2>/dev/null || true
}

# cmd_of WL ROW: the full command prefix (sources and target follow).
cmd_of() {
    if (($2 == FLOOR)); then
        echo "${CMD[$2]}"
    elif [[ ${CMD[$2]} == "$MT "* ]]; then
        echo "${CMD[$2]} ${MTOPT[$1]}"
    else
        echo "${CMD[$2]} ${QOPT[$1]}"
    fi
}

# verify WL ROW DST: the output reads like the source (and is a clean qcow2).
verify() {
    local src=${SRC[$1]}
    if [[ ${MTOPT[$1]} == *qcow2* ]] && (($2 != FLOOR)); then
        timeout "$TIMEOUT" qemu-img check -q -f qcow2 "$3" ||
            die "${LABEL[$2]}: qemu-img check failed on the $1 output"
    fi
    timeout "$TIMEOUT" qemu-img compare -q "$src" "$3" ||
        die "${LABEL[$2]}: the $1 output differs from the source"
}

# run_one WL ROW TIMED: run into a new target, record (warm-up: verify).
run_one() {
    local wl=$1 row=$2 timed=$3 dst=$SCRATCH/target t0 t1 e u s m
    local -a argv
    local src=${SRC[$wl]}
    if ((row == FLOOR)); then
        # The same data bytes as Q1 and Q2 write, from the raw image.
        [[ $wl == Q1 || $wl == Q2 ]] || return 0
        src=${SRC[Q1]}
    fi
    read -ra argv <<<"$(cmd_of "$wl" "$row")"
    rm -f "$dst"
    t0=$(date +%s%N)
    if ! timeout "$TIMEOUT" /usr/bin/time -o "$SCRATCH/time" \
            -f '%e %U %S %M' "${argv[@]}" "$src" "$dst" \
            >"$SCRATCH/out" 2>&1; then
        tail -5 "$SCRATCH/out" >&2
        die "${LABEL[$row]} failed on $wl: ${argv[*]} $src $dst"
    fi
    t1=$(date +%s%N)
    ((timed)) || verify "$wl" "$row" "$dst"
    read -r e u s m <"$SCRATCH/time"
    local wall cpu out
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    out=$(($(stat -c "%b * %B" "$dst") / 1024))
    if ((timed)); then
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$wl" "$row" "$wall" "$cpu" "$m" \
            "$out" >>"$RES"
    fi
    log "  [$wl$( ((timed)) || echo " warm-up, verified")] ${LABEL[$row]}:" \
        "wall ${wall}s cpu ${cpu}s rss $((m / 1024))MiB out $((out / 1024))MiB"
}

# bench_workload WL: warm-up round, then RUNS rotated rounds.
bench_workload() {
    local wl=$1 r k
    log "${TITLE[$wl]}"
    for ((k = 0; k < NROWS; k++)); do run_one "$wl" "$k" 0; done
    for ((r = 0; r < RUNS; r++)); do
        log "  round $((r + 1))/$RUNS"
        for ((k = 0; k < NROWS; k++)); do
            run_one "$wl" $(((r + k) % NROWS)) 1
        done
    done
    rm -f "$SCRATCH/target"
}

# report WL: table + verdict.
report() {
    local wl=$1 k ref r ok rss_ok
    summarize "$wl"
    ref=${MW[PEER]}
    echo
    echo "== ${TITLE[$wl]} (RUNS=$RUNS, ratio = median wall / median wall of qemu-img) =="
    printf '%-36s %9s %9s %8s %8s %7s %7s %5s\n' tool wall_s cpu_s rss_MiB \
        out_MiB ratio best_s slow
    for ((k = 0; k < NROWS; k++)); do
        [[ ${MW[k]} != nan ]] || continue       # the floor on Q3, Q4
        printf '%-36s %9s %9s %8s %8s %7s %7s %5s\n' "${LABEL[k]}" "${MW[k]}" \
            "${MC[k]}" $((MR[k] / 1024)) \
            $(($(col "$wl" "$k" 6 | sort -n | tail -1) / 1024)) \
            "$(ratio "${MW[k]}" "$ref")" "${MB[k]}" "${NS[k]}"
    done
    for ((k = 0; k < NROWS; k++)); do
        [[ -n ${LIMIT[k]} ]] || continue
        r=$(ratio "${MW[k]}" "$ref")
        ok=no
        gt "$r" "${GOAL[$wl]}" || ok=yes
        rss_ok=$(rss_check "$k")
        echo "verdict $wl: ${LABEL[k]}: ratio $r <= ${GOAL[$wl]}: $ok;" \
            "peak RSS $((MR[k] / 1024)) MiB < $((LIMIT[k] / MiB)) MiB: $rss_ok"
    done
}

# --- main -------------------------------------------------------------------
echo "# qcow2.sh RUNS=$RUNS WORKLOADS='$WORKLOADS' SEED=$SEED BUF_SIZE=${BUF_SIZE:-default($DEFAULT_BUF)}"
echo "# machine: nproc=$(nproc), $(uname -srm), $(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
echo "# versions: $("$MT" --version 2>&1 | head -1); $(qemu-img --version | head -1)"
echo "# commands (each followed by its workload's options, then SRC DST):"
for ((k = 0; k < NROWS; k++)); do printf '#   %-34s %s\n' "${LABEL[k]}:" "${CMD[k]}"; done
for w in $WORKLOADS; do
    echo "#   $w: mirror-tool ${MTOPT[$w]}; qemu-img ${QOPT[$w]}"
done

[[ $PREFAULT == 1 ]] && prefault

SRC=([Q1]=$SCRATCH/img1.raw [Q2]=$SCRATCH/img1.qcow2 [Q3]=$SCRATCH/imgc.raw
     [Q4]=$SCRATCH/imgt.raw)
if has Q1 || has Q2; then
    log "creating img1 ($IMG1_GIB GiB, 30% random data)..."
    make_sparse "${SRC[Q1]}" "$IMG1_GIB" 30
    has Q2 && timeout "$TIMEOUT" qemu-img convert -f raw -O qcow2 \
        "${SRC[Q1]}" "${SRC[Q2]}"
fi
if has Q3; then
    log "creating imgc ($IMGC_GIB GiB, 30% random data)..."
    make_sparse "${SRC[Q3]}" "$IMGC_GIB" 30
fi
if has Q4; then
    log "creating imgt ($IMGC_GIB GiB, 30% text data)..."
    make_sparse "${SRC[Q4]}" "$IMGC_GIB" 30 textstream
fi
for w in $WORKLOADS; do bench_workload "$w"; done
for w in $WORKLOADS; do report "$w"; done
