#!/usr/bin/env bash
# bench/nbd.sh - `mirror-tool convert` with NBD ends, side by side with
# `nbdcopy` and `qemu-img convert -n -W -m 16`.  Not run in CI.  See
# bench/README.md.
#
#   bench/nbd.sh          compare mirror-tool with its peers
#   bench/nbd.sh sweep    mirror-tool only: chunk-size x -m x --connections
#
# Workloads (every run starts its own nbdkit with `-U - ... --run`):
#   W1  the peers' own benchmark: `nbdkit sparse-random size=8G seed=1
#       percent=30` copied onto itself; the plugin checks every write, so
#       exit status 0 means the copy was right;
#   W2  latency: 1 GiB of random data from a file in /dev/shm into an nbdkit
#       `file` export of a pre-touched file in /dev/shm, behind
#       `--filter=delay delay-write=10ms delay-read=10ms`;
#   W3  2 GiB of random data into the same `file` export, without delay.
# On W2 and W3 two "floor" rows run bench/nbd-floor.c (built with cc; FLOOR=0
# drops them): the file written in 1 MiB requests by a bare client with no
# library, read into one buffer and sent ("read"), or moved with splice(2)
# without a copy on the client's side ("splice").  On W3 one connection
# with 16 in flight; on W2 what mirror-tool uses there: one connection per
# CPU up to 4, each with 32 in flight (a request queued behind each of
# nbdkit's 16 workers).  What the kernel and nbdkit allow; not a peer, no
# verdict is taken on them.
# Methodology as in bench/convert.sh: before every W2/W3 run (untimed) the
# target is re-created from a random template with `cp --sparse=never` and
# after it `cmp` checks it against the source; one untimed warm-up round
# (under nbdkit's log and stats filters, to see what reaches the server), then
# RUNS rounds with the tool order rotated by the round number.  Every run is
# under `timeout $TIMEOUT`; a failure, a timeout or a wrong target is
# recorded (column fail) and the benchmark goes on, exiting 1 at the end.
# - wall: `date +%s%N` around the whole `nbdkit ... --run` (nbdkit startup
#   and shutdown included, equal for all tools);
# - cpu: user + sys of the tool alone (`/usr/bin/time` inside --run);
#   cpu+srv adds nbdkit's own (the whole nbdkit process tree);
# - rss: the tool's peak RSS; the goal's limit is buf-size + 32 MiB, run by
#   run: a row with the default buf-size (it follows the NBD connections
#   taking requests and the server's latency, at most 64M) logs its window
#   (G_MESSAGES_DEBUG=mirror-block), and each run is held to its largest.
# Environment: RUNS (5), WORKLOADS ("W1 W2 W3"), W1_SIZE (8G), W2_SIZE (1G;
# any size head -c takes, e.g. 512M; W2_GIB=N is W2_SIZE=NG), W3_SIZE (2G;
# W3_GIB likewise), DELAY (10ms), SEED (42), TIMEOUT (300 s), BUF_SIZE,
# MIRROR_EXTRA (';'-separated option sets, one extra -W row each), MIRROR_TOOL,
# MIRROR_TOOL_B (a second binary, e.g. the code before a change: rows
# "B: mirror-tool -W" and "B: mirror-tool" beside the others, same rounds),
# PREFAULT (1), NBDKIT_THREADS (nbdkit's default, 16 per connection),
# SWEEP_CHUNKS ("256K 1M 4M"), SWEEP_M ("16 64"), SWEEP_CONNS ("1 4").
set -euo pipefail

MODE=${1:-compare}
RUNS=${RUNS:-5}
WORKLOADS=${WORKLOADS:-"W1 W2 W3"}
W1_SIZE=${W1_SIZE:-8G}
W2_SIZE=${W2_SIZE:-${W2_GIB:-1}G} W3_SIZE=${W3_SIZE:-${W3_GIB:-2}G}
DELAY=${DELAY:-10ms}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-300}
BUF_SIZE=${BUF_SIZE:-}
MIRROR_EXTRA=${MIRROR_EXTRA-"-m 64 --buf-size 64M; --chunk-size 256K -m 64 --buf-size 16M; --connections 8 -m 64 --buf-size 64M"}
PREFAULT=${PREFAULT:-1}
NBDKIT_THREADS=${NBDKIT_THREADS:-}
SWEEP_CHUNKS=${SWEEP_CHUNKS:-"256K 1M 4M"}
SWEEP_M=${SWEEP_M:-"16 64"}
SWEEP_CONNS=${SWEEP_CONNS:-"1 4"}
BENCH=nbd.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
declare -A GOAL=([W1]=0.9 [W2]=0.6 [W3]=0.9)

case $MODE in compare|sweep) ;; *) die "usage: $0 [compare|sweep]" ;; esac
[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
need nbdkit qemu-img nbdcopy cp cmp openssl timeout /usr/bin/time
for w in $WORKLOADS; do [[ -n ${GOAL[$w]:-} ]] || die "unknown workload $w"; done

SCRATCH=$(mktemp -d /dev/shm/nbd-bench.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT TERM
RES=$SCRATCH/results.tsv        # workload row wall cpu rss_kib cpu+srv load1 rss_limit_kib
FAILS=$SCRATCH/fails.tsv        # workload row reason
FLOORS=                         # rows of bench/nbd-floor.c: no peers
FLOOR_W2_CONNS=$(nproc)         # as nbdblk_default_connections()
((FLOOR_W2_CONNS > 4)) && FLOOR_W2_CONNS=4
is_floor() { [[ " $FLOORS " == *" $1 "* ]]; }
STATS=$SCRATCH/stats.tsv        # workload row summary (warm-up, stats filter)
: >"$RES"; : >"$FAILS"; : >"$STATS"
# Test a private copy: a rebuild during the run must not change the binary.
MT=$SCRATCH/mirror-tool
cp "$MT_SRC" "$MT"
MTB=
if [[ -n ${MIRROR_TOOL_B:-} ]]; then
    [[ -x $MIRROR_TOOL_B ]] || die "MIRROR_TOOL_B=$MIRROR_TOOL_B: not executable"
    MTB=$SCRATCH/mirror-tool-b
    cp "$MIRROR_TOOL_B" "$MTB"
fi
# add_b_row LABEL ARGS: a row of the second binary, held to the limits of a
# mirror-tool row (add_row takes only $MT's rows for mirror-tool's).
add_b_row() {
    local last
    add_row "$1" "$MT $2"
    last=$((${#CMD[@]} - 1))
    CMD[last]=${CMD[last]/#$MT/$MTB}
}

BUFOPT=${BUF_SIZE:+--buf-size $BUF_SIZE}
if [[ $MODE == compare ]]; then
    add_row "mirror-tool -W" "$MT convert -n -W $BUFOPT"
    add_row "mirror-tool" "$MT convert -n $BUFOPT"
    add_extra_rows "mirror-tool -W" "$MT convert -n -W $BUFOPT"
    if [[ -n $MTB ]]; then
        add_b_row "B: mirror-tool -W" "convert -n -W $BUFOPT"
        add_b_row "B: mirror-tool" "convert -n $BUFOPT"
    fi
    if [[ ${FLOOR:-1} != 0 ]]; then
        need cc
        cc -O2 -pthread -o "$SCRATCH/nbd-floor" "$ROOT/bench/nbd-floor.c" ||
            die "cannot build bench/nbd-floor.c"
        FLOORS="${#LABEL[@]} $((${#LABEL[@]} + 1))"
        add_row "floor: read + send (bench/nbd-floor.c)" "$SCRATCH/nbd-floor read"
        add_row "floor: splice (bench/nbd-floor.c)" "$SCRATCH/nbd-floor splice"
    fi
    add_row "nbdcopy" "nbdcopy"
    add_row "qemu-img" "qemu-img convert -n -W -m 16 -f raw -O raw"
else
    REF=
    for c in $SWEEP_CHUNKS; do
        for m in $SWEEP_M; do
            for n in $SWEEP_CONNS; do
                buf=${BUF_SIZE:-$(($(to_bytes "$c") * m))}
                [[ $c == 1M && $m == 16 && $n == 4 ]] && REF=${#LABEL[@]}
                add_row "chunk $c -m $m conns $n" \
                    "$MT convert -n -W --chunk-size $c -m $m --connections $n --buf-size $buf"
            done
        done
    done
    REF=${REF:-0}
fi
NROWS=${#LABEL[@]}

# server_args WL: the nbdkit plugin, filters and parameters of workload WL.
server_args() {
    case $1 in
    W1) echo "sparse-random size=$W1_SIZE seed=1 percent=30" ;;
    W2) echo "--filter=delay file $SCRATCH/target delay-write=$DELAY delay-read=$DELAY" ;;
    W3) echo "file $SCRATCH/target" ;;
    esac
}

# stats_summary FILE TOOL_WALL: "op N x avg-size, avg latency, concurrency"
# per operation from nbdkit-stats-filter output.  Concurrency is the time
# requests spent in the server summed over requests, over the tool's wall.
stats_summary() {
    awk -v wall="$2" '/^(read|write|zero|trim|extents|flush):/ {
        op = $1; sub(":", "", op); n = $2; t = $4; b = $6; u = $7; sub(",", "", u)
        if (n == 0) next
        mult = (u == "KiB") ? 1024 : (u == "MiB") ? 1048576 : (u == "GiB") ? 1073741824 : 1
        out = out sprintf("%s %d x %.0fK %.1fms c%.1f; ", op, n, b * mult / n / 1024,
                          t / n * 1000, wall > 0 ? t / wall : 0)
    } END { sub(/; $/, "", out); print out }' "$1"
}

# run_one WL ROW TIMED: (re)create the target, run under nbdkit, verify,
# record.  Failures are logged to $FAILS and do not stop the benchmark.
run_one() {
    local wl=$1 row=$2 timed=$3 t0 t1 rc=0 e u s m u2 s2 inner src dst
    local -a server filt=() sargs=()
    # The floor writes a local file: W1's source is an NBD export.
    if is_floor "$row" && [[ $wl == W1 ]]; then return 0; fi
    read -ra server <<<"$(server_args "$wl")"
    [[ -n $NBDKIT_THREADS ]] && filt+=(--threads "$NBDKIT_THREADS")
    # shellcheck disable=SC2016 # $uri is for nbdkit's --run shell
    if [[ $wl == W1 ]]; then
        src='"$uri"' dst='"$uri"'
    else
        rm -f "$SCRATCH/target"
        cp --sparse=never "$SCRATCH/tmpl" "$SCRATCH/target"
        src=$(printf %q "$SCRATCH/src") dst='"$uri"'
    fi
    if [[ $timed == 0 ]]; then  # stats filter outside delay: sees the delays
        rm -f "$SCRATCH/stats" "$SCRATCH/log"
        filt+=(--filter=log --filter=stats)
        sargs=(statsfile="$SCRATCH/stats" statsthreshold=0 logfile="$SCRATCH/log")
    fi
    local fargs=
    if is_floor "$row" && [[ $wl == W2 ]]; then
        fargs="32 $FLOOR_W2_CONNS"     # IN_FLIGHT per connection, CONNECTIONS
    fi
    inner="/usr/bin/time -o $SCRATCH/inner -f '%e %U %S %M' ${CMD[$row]} $src $dst $fargs"
    # A default buf-size row logs its window as it changes (it follows the
    # NBD connections taking requests and the server's latency): the
    # largest is that run's buf-size, for its RSS limit.
    [[ ${BUFDEF[$row]} == 1 ]] && inner="G_MESSAGES_DEBUG=mirror-block $inner"
    rm -f "$SCRATCH/inner" "$SCRATCH/outer"
    t0=$(date +%s%N)
    timeout "$TIMEOUT" /usr/bin/time -o "$SCRATCH/outer" -f '%e %U %S %M' \
        nbdkit -U - "${filt[@]}" "${server[@]}" "${sargs[@]}" --run "$inner" \
        >"$SCRATCH/out" 2>&1 || rc=$?
    t1=$(date +%s%N)
    local why=
    if ((rc == 124)); then why="timed out after ${TIMEOUT}s"
    elif ((rc != 0)); then why="exit status $rc"
    elif [[ $wl != W1 ]] && ! cmp -s "$SCRATCH/src" "$SCRATCH/target"; then
        why="target differs from source"
    fi
    if [[ -n $why ]]; then
        log "  [$wl] ${LABEL[$row]}: FAILED: $why; output:"
        tail -n 20 "$SCRATCH/out" | sed 's/^/    /' >&2
        printf '%s\t%s\t%s\n' "$wl" "$row" "$why" >>"$FAILS"
        return 0
    fi
    read -r e u s m <"$SCRATCH/inner"
    read -r _ u2 s2 _ <<<"$(grep -v '^Command' "$SCRATCH/outer" | tail -1)"
    local wall cpu cpuall
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    cpuall=$(awk -v u="$u2" -v s="$s2" 'BEGIN { printf "%.2f", u + s }')
    local lim=0 win=
    if [[ ${BUFDEF[$row]} == 1 ]]; then
        win=$(sed -n 's/.*mirror: window for .* operations, \([0-9]*\) bytes.*/\1/p' \
            "$SCRATCH/out" | sort -n | tail -1)
    fi
    if [[ -n $win ]]; then
        lim=$(((win + 32 * MiB) / 1024))
    elif [[ -n ${LIMIT[$row]} ]]; then
        lim=$((LIMIT[$row] / 1024))
    fi
    if [[ $timed == 1 ]]; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$wl" "$row" "$wall" "$cpu" "$m" \
            "$cpuall" "$(cut -d' ' -f1 /proc/loadavg)" "$lim" >>"$RES"
    fi
    if [[ $timed == 0 && -s $SCRATCH/stats ]]; then
        printf '%s\t%s\tconns %s (%s used); %s\n' "$wl" "$row" \
            "$(grep -c ' Connect ' "$SCRATCH/log")" \
            "$(grep -c 'Disconnect transactions=[1-9]' "$SCRATCH/log")" \
            "$(stats_summary "$SCRATCH/stats" "$e")" >>"$STATS"
    fi
    log "  [$wl$( ((timed)) || echo " warm-up")] ${LABEL[$row]}: wall ${wall}s" \
        "(tool ${e}s) cpu ${cpu}s cpu+srv ${cpuall}s rss $((m / 1024))MiB"
}

# bench_workload WL: warm-up round, then RUNS rotated rounds.
bench_workload() {
    local wl=$1 r k
    for ((k = 0; k < NROWS; k++)); do run_one "$wl" "$k" 0; done
    for ((r = 0; r < RUNS; r++)); do
        log "  round $((r + 1))/$RUNS"
        for ((k = 0; k < NROWS; k++)); do run_one "$wl" $(((r + k) % NROWS)) 1; done
    done
}

# report WL TITLE: table, then a verdict (compare) or note (sweep) per
# mirror-tool row, then what the server saw during the warm-up.
report() {
    local wl=$1 k best=-1 bestw ref what ok rss_ok lim_mib nf r
    local -a MA
    summarize "$wl"
    for ((k = 0; k < NROWS; k++)); do
        MA[k]=$(col "$wl" "$k" 6 | median)
        [[ -z ${LIMIT[k]} && ${MW[k]} != nan ]] || continue
        ! is_floor "$k" || continue
        if ((best < 0)) || gt "${MW[best]}" "${MW[k]}"; then best=$k; fi
    done
    if [[ $MODE == compare ]]; then
        ref=$best what="best peer, none finished"
        ((best < 0)) || what="best peer, ${LABEL[best]}"
    else
        ref=$REF what="defaults, ${LABEL[REF]}"
    fi
    bestw=nan; ((ref < 0)) || bestw=${MW[ref]}
    echo
    echo "== $2 (RUNS=$RUNS; ratio = median wall / median wall of the $what) =="
    awk -F'\t' -v w="$wl" '$1 == w { n++; s += $7; if ($7 > m) m = $7 } END {
        if (n) printf "1-minute load average after the runs: mean %.1f, max %.1f\n", s / n, m }' "$RES"
    printf '%-52s %7s %6s %8s %7s %6s %7s %4s %4s\n' tool wall_s cpu_s cpu+srv \
        rss_MiB ratio best_s slow fail
    for ((k = 0; k < NROWS; k++)); do
        nf=$(awk -F'\t' -v w="$wl" -v r="$k" '$1 == w && $2 == r' "$FAILS" | wc -l)
        printf '%-52s %7s %6s %8s %7s %6s %7s %4s %4s\n' "${LABEL[k]}" "${MW[k]}" \
            "${MC[k]}" "${MA[k]}" $((MR[k] / 1024)) "$(ratio "${MW[k]}" "$bestw")" \
            "${MB[k]}" "${NS[k]}" "$nf"
    done
    for ((k = 0; k < NROWS; k++)); do
        [[ -n ${LIMIT[k]} ]] || continue
        # Each run against its own limit: buf-size (what the window grew
        # to, for a default row) + 32 MiB.
        read -r rss_ok lim_mib < <(awk -F'\t' -v w="$wl" -v r="$k" '
            $1 == w && $2 == r { if ($5 >= $8) over++; if ($8 > m) m = $8 }
            END { print (over ? "no" : "yes"), int(m / 1024) }' "$RES")
        [[ ${MW[k]} != nan ]] || rss_ok="no run finished"
        r=$(ratio "${MW[k]}" "$bestw")
        if [[ $MODE == compare ]]; then
            ok=no
            [[ $r != nan ]] && ! gt "$r" "${GOAL[$wl]}" && ok=yes
            echo "verdict $wl: ${LABEL[k]}: wall ${r}x best peer <= ${GOAL[$wl]}x: $ok;" \
                "peak RSS $((MR[k] / 1024)) MiB, every run below its buf-size + 32 MiB" \
                "(at most $lim_mib MiB): $rss_ok"
        elif [[ $rss_ok == no ]]; then
            echo "note $wl: ${LABEL[k]}: peak RSS $((MR[k] / 1024)) MiB >= limit $lim_mib MiB"
        fi
    done
    echo "server side, warm-up run under nbdkit's log and stats filters (connections" \
        "opened (with requests); per op: count x mean size, mean time in server," \
        "c = summed request time / tool wall = mean requests in the server):"
    for ((k = 0; k < NROWS; k++)); do
        printf '  %-50s %s\n' "${LABEL[k]}:" \
            "$(awk -F'\t' -v w="$wl" -v r="$k" '$1 == w && $2 == r { print $3 }' "$STATS")"
    done
    while IFS=$'\t' read -r w k r; do
        [[ $w == "$wl" ]] && echo "failure $wl: ${LABEL[k]}: $r"
    done <"$FAILS"
    return 0
}

# --- main -------------------------------------------------------------------
echo "# nbd.sh mode=$MODE RUNS=$RUNS WORKLOADS='$WORKLOADS' W1_SIZE=$W1_SIZE W2_SIZE=$W2_SIZE" \
    "W3_SIZE=$W3_SIZE DELAY=$DELAY BUF_SIZE=${BUF_SIZE:-default($DEFAULT_BUF)}" \
    "NBDKIT_THREADS=${NBDKIT_THREADS:-default(16/connection)}"
echo "# machine: nproc=$(nproc), $(uname -srm), $(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
echo "# versions: $("$MT" --version 2>&1 | head -1) ($MT_SRC, sha256" \
    "$(sha256sum "$MT" | cut -c1-12)); $(qemu-img --version | head -1);" \
    "$(nbdcopy --version | head -1); $(nbdkit --version)"
echo "# servers: nbdkit -U - [--threads N] PLUGIN ARGS --run 'TOOL SRC \"\$uri\"'"
for w in $WORKLOADS; do echo "#   $w: nbdkit -U - $(server_args "$w" | sed "s|$SCRATCH|\$SCRATCH|g")"; done
echo "# commands (followed by SRC DST: W1 \"\$uri\" \"\$uri\", W2/W3 \$SCRATCH/src \"\$uri\"):"
for ((k = 0; k < NROWS; k++)); do
    c=${CMD[k]}
    [[ -z $MTB ]] || c=${c/#$MTB/mirror-tool(B)}
    printf '#   %-50s %s\n' "${LABEL[k]}:" "${c/#$MT/mirror-tool}"
done

echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ $PREFAULT == 1 ]] && prefault

for w in $WORKLOADS; do
    if [[ $w != W1 ]]; then
        size=$W2_SIZE; [[ $w == W3 ]] && size=$W3_SIZE
        log "$w: creating a $size random source and target template..."
        randstream $((SEED + 2)) | head -c "$size" >"$SCRATCH/src"
        randstream $((SEED + 3)) | head -c "$size" >"$SCRATCH/tmpl"
        [[ $(stat -c %s "$SCRATCH/src") -gt 0 ]] || die "bad size '$size'"
    fi
    log "$w: $(server_args "$w")"
    bench_workload "$w"
    rm -f "$SCRATCH/src" "$SCRATCH/tmpl" "$SCRATCH/target"
done

for w in $WORKLOADS; do
    case $w in
    W1) t="W1: sparse-random size=$W1_SIZE percent=30 copied onto itself" ;;
    W2) t="W2: $W2_SIZE random file -> nbdkit file, delay-write/read=$DELAY" ;;
    W3) t="W3: $W3_SIZE random file -> nbdkit file" ;;
    esac
    report "$w" "$t"
done
echo; echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ ! -s $FAILS ]] || { log "$(wc -l <"$FAILS") run(s) failed"; exit 1; }
