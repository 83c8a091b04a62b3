#!/usr/bin/env bash
# bench/scale.sh - how the cost of a copy grows with a thin disk's virtual
# size (issue 21): mirror-tool beside nbdcopy and qemu-img, in one run, at
# 1, 4, 16 and 64 TiB.  Not run in CI.  See bench/README.md, "Scale: thin
# disks up to 64 TiB (#21)".
#
# Cases (CASES; "c" names both c-* cases):
#   a         all zero: a sparse raw file on tmpfs (`truncate -s SIZE`);
#   b         PCT% (0.1) data in PIECE (64K) pieces at random PIECE-aligned
#             offsets (layout and bytes from SEED), the rest holes: a raw
#             file on tmpfs.  Only sizes whose data fits twice (source and
#             target) in free tmpfs and memory, and at most B_MAX;
#   c-null    NBD: `nbdkit -r null SIZE` -> `nbdkit null SIZE`;
#   c-sparse  NBD: `nbdkit -r sparse-random SIZE percent=PCT
#             runlength=PIECE seed=SEED` -> `nbdkit null SIZE`: case b's
#             shape at sizes no file here holds; at most SPARSE_MAX
#             (sparse-random keeps a bit per 4 KiB block and walks them
#             all at setup and in every block-status request).
# Rows (the command, then SRC DST):
#   mirror-tool convert        convert SRC DST: a new target (files only);
#   mirror-tool convert -n     onto an existing target;
#   mirror-tool start          start --json onto it: bulk copy, READY,
#                              completion on its own (no --qmp); ready_s
#                              is its summary's ready-seconds;
#   nbdcopy                    onto the existing target;
#   qemu-img convert           -W -m 16, a new target (files only);
#   qemu-img convert -n        -n -W -m 16 onto the existing target;
#   floor: nbdinfo --map       NBD cases: one block-status pass over the
#                              source (nbdinfo --map SRC): what the server
#                              costs by itself; not a peer;
#   floor: source setup        NBD cases: the source server's start
#                              (sparse-random builds its map), once per
#                              size; not a peer;
#   plus one `mirror-tool convert -n OPTS` row per ';'-separated
#   MIRROR_EXTRA option set.
# An existing target is a sparse file of SIZE (truncate) re-made before
# every run, or the null server: the tools are not told it reads as zero,
# so they must zero it (what `-n` onto a thin LUN costs).
# Method: sizes in ascending order; per case and size, RUNS rounds with
# the row order rotated by the round (rows interleaved).  Wall: `date
# +%s%N` around `/usr/bin/time -f '%e %U %S %M' timeout ...`: CPU = user
# + sys of the tool, RSS = its peak.  srv_cpu: the CPU the NBD servers
# (both) spent in the run, from /proc/PID/stat.  Every run is under
# `timeout` (TIMEOUT, plus twice the source server's setup time, which is
# about what one pass over sparse-random's map costs); a timed-out cell
# shows ">Ns" and its row is skipped at the larger sizes of the case (it
# would time out there too).  File targets are compared with the source
# after every run (`qemu-img compare`, untimed); NBD targets discard what
# they get (exit status only).
# Columns: median wall, spread (slowest / fastest run), CPU, ready_s,
# srv_cpu; max RSS; growth = wall / wall at the previous size, per 4x of
# size ((w2/w1)^(ln 4 / ln(s2/s1))); ratio = wall / the best peer's
# (nbdcopy, qemu-img) wall at that size.
# Goals (issue 21), one verdict line per mirror-tool row and case: wall
# within 1.1x of the best peer at every size (or within SLACK_MS of it:
# process start and exit, see the header's start-up floor); growth per 4x
# at most 4 (ideally about 1 for a and c-null, which hold no data); peak
# RSS at most buf-size + 32 MiB (16M with local files; with NBD ends the
# window the run logged, G_MESSAGES_DEBUG=mirror-block, as bench/nbd.sh).
# Environment: SIZES ("1T 4T 16T 64T"), CASES ("a b c-null c-sparse"),
# RUNS (1), TIMEOUT (30 s), PCT (0.1), PIECE (64K), SEED (42), B_MAX (4T),
# SPARSE_MAX (4T), SLACK_MS (20), MIRROR_EXTRA, MIRROR_TOOL.
set -euo pipefail

SIZES=${SIZES:-"1T 4T 16T 64T"}
CASES=${CASES:-"a b c-null c-sparse"}
RUNS=${RUNS:-1}
TIMEOUT=${TIMEOUT:-30}
PCT=${PCT:-0.1}
PIECE=${PIECE:-64K}
SEED=${SEED:-42}
B_MAX=${B_MAX:-4T}
SPARSE_MAX=${SPARSE_MAX:-4T}
SLACK_MS=${SLACK_MS:-20}
MIRROR_EXTRA=${MIRROR_EXTRA:-}
GOAL_RATIO=1.1 GOAL_GROWTH=4
# shellcheck disable=SC2034 # for lib.sh's messages
BENCH=scale.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

[[ $# == 0 ]] || die "usage: $0 (settings in the environment)"
[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
need nbdkit nbdinfo nbdcopy qemu-img python3 timeout tail /usr/bin/time
is_size() { [[ $1 =~ ^[0-9]+[KMGTkmgt]?$ ]] && (($(to_bytes "$1") > 0)); }
for s in $SIZES $B_MAX $SPARSE_MAX $PIECE; do
    is_size "$s" || die "'$s' is not a size (a number with K, M, G or T)"
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS: '$RUNS' is not a positive number"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "TIMEOUT: '$TIMEOUT' is not a number of seconds"
[[ $SLACK_MS =~ ^[0-9]+$ ]] || die "SLACK_MS: '$SLACK_MS' is not a number"
if ! [[ $PCT =~ ^[0-9]*\.?[0-9]+$ ]] || ! gt 100 "$PCT"; then
    die "PCT: '$PCT' is not a percentage below 100"
fi
CASES=${CASES//c-null/cn} CASES=${CASES//c-sparse/cs}   # "c" names both
CASES=$(for c in $CASES; do [[ $c == c ]] && echo "cn cs" || echo "$c"; done | xargs)
for c in $CASES; do
    case $c in a|b|cn|cs) ;; *) die "unknown case '$c' (a, b, c, c-null, c-sparse)" ;; esac
done
# Ascending, by bytes: a row that timed out is skipped at larger sizes.
SIZES=$(for s in $SIZES; do echo "$(to_bytes "$s") ${s^^}"; done | sort -n -u | cut -d' ' -f2 | xargs)
PIECE_B=$(to_bytes "$PIECE")
case_name() { case $1 in cn) echo c-null ;; cs) echo c-sparse ;; *) echo "$1" ;; esac; }
is_nbd() { [[ $1 == cn || $1 == cs ]]; }

SCRATCH=$(mktemp -d /dev/shm/scale-bench.XXXXXX)
PIDS=()                         # the nbdkit servers running now
trap 'stop_servers; rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT TERM
RES=$SCRATCH/results.tsv        # case size row run wall cpu rss status ready srv limit load1
SKIPS=$SCRATCH/skips.tsv        # case size reason
: >"$RES"; : >"$SKIPS"
MT=$SCRATCH/mirror-tool         # a rebuild during the run changes nothing
cp "$MT_SRC" "$MT"
QI="qemu-img convert -W -m 16 -f raw -O raw"

add_row "mirror-tool convert" "$MT convert"
add_row "mirror-tool convert -n" "$MT convert -n"
add_extra_rows "mirror-tool convert -n" "$MT convert -n"
add_row "mirror-tool start" "$MT start --json"
add_row "nbdcopy" "nbdcopy"
add_row "qemu-img convert" "$QI"
add_row "qemu-img convert -n" "${QI/convert/convert -n}"
add_row "floor: nbdinfo --map" "nbdinfo --map"
ROW_SETUP=${#LABEL[@]}          # recorded by start_case, not run
add_row "floor: source setup" "nbdkit"
NROWS=${#LABEL[@]}
is_floor() { [[ ${LABEL[$1]} == floor:* ]]; }
is_mt() { [[ -n ${LIMIT[$1]} ]]; }
is_peer() { ! is_mt "$1" && ! is_floor "$1"; }
# makes_target ROW: the tool creates its target (no -n, not start, not nbdcopy).
makes_target() { [[ ${CMD[$1]} == *" convert"* && " ${CMD[$1]} " != *" -n "* ]]; }
# applies CASE ROW: whether ROW runs in CASE (new targets and floors do not
# fit every case).
applies() {
    if is_nbd "$1"; then
        makes_target "$2" && return 1
    else
        is_floor "$2" && return 1
    fi
    return 0
}

# --- cases --------------------------------------------------------------
# make_pieces PATH SIZE_BYTES: case b's source (see the top).
make_pieces() {
    truncate -s "$2" "$1"
    python3 - "$1" "$2" "$PCT" "$PIECE_B" "$SEED" <<'EOF'
import os, random, sys
path, size, pct, piece, seed = sys.argv[1], int(sys.argv[2]), \
    float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)
units = size // piece
n = max(1, int(units * pct / 100))
pool = rng.randbytes(32 << 20)          # pieces are slices of it
fd = os.open(path, os.O_WRONLY)
for u in sorted(rng.sample(range(units), n)):
    o = rng.randrange(0, len(pool) - piece, 4096)
    os.pwrite(fd, pool[o:o + piece], u * piece)
os.close(fd)
print("%d pieces of %d KiB" % (n, piece >> 10), file=sys.stderr)
EOF
}

uri() { echo "nbd+unix:///?socket=$SCRATCH/$1.sock"; }

# serve NAME ARGS...: nbdkit on $SCRATCH/NAME.sock; returns once it
# listens (nbdkit forks into the background after its setup and listen).
# Its pid file is a FIFO: the server writes it after the fork, when the
# parent may have exited already, and the read waits for that write.
# The last call's setup is in $SCRATCH/setup.time ('%e %U %S %M').
serve() {
    local name=$1 fd pid
    shift
    mkfifo "$SCRATCH/$name.pid"
    exec {fd}<>"$SCRATCH/$name.pid"
    /usr/bin/time -o "$SCRATCH/setup.time" -f '%e %U %S %M' \
        nbdkit -U "$SCRATCH/$name.sock" -P "$SCRATCH/$name.pid" "$@" ||
        die "nbdkit $* did not start"
    read -r -t 60 -u "$fd" pid || die "nbdkit $* wrote no pid"
    exec {fd}<&-
    PIDS+=("$pid")
}

stop_servers() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || continue
        tail --pid="$p" -s 0.05 -f /dev/null
    done
    PIDS=()
    rm -f "$SCRATCH"/*.sock "$SCRATCH"/*.pid
}

# srv_ticks: CPU clock ticks the running servers have used.
srv_ticks() {
    local p t=0
    for p in "${PIDS[@]}"; do
        [[ -r /proc/$p/stat ]] || continue      # it died: the run says why
        t=$((t + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
    done
    echo "$t"
}
TICK=$(getconf CLK_TCK)

gib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1073741824 }'; }
avail_bytes() {
    local shm mem
    shm=$(df -B1 --output=avail /dev/shm | tail -1)
    mem=$(awk '/MemAvailable/ { printf "%d\n", $2 * 1024 }' /proc/meminfo)
    echo $((shm < mem ? shm : mem))
}

# start_case CASE SIZE: make the source (and servers), or record why not
# in $SKIPS and fail.  Sets SRC, DST and CELL_TIMEOUT.
start_case() {
    local c=$1 s=$2 bytes need t e u sy m
    bytes=$(to_bytes "$s")
    CELL_TIMEOUT=$TIMEOUT
    case $c in
    a)
        SRC=$SCRATCH/src DST=$SCRATCH/dst
        truncate -s "$bytes" "$SRC"
        ;;
    b)
        SRC=$SCRATCH/src DST=$SCRATCH/dst
        need=$(awk -v b="$bytes" -v p="$PCT" 'BEGIN { printf "%d", 2 * b * p / 100 + 2 ^ 30 }')
        if ((bytes > $(to_bytes "$B_MAX"))); then
            printf 'b\t%s\tabove B_MAX=%s\n' "$s" "$B_MAX" >>"$SKIPS"
            return 1
        fi
        if ((need > $(avail_bytes))); then
            printf 'b\t%s\tneeds %s GiB of tmpfs and memory (source and target data + 1 GiB), %s GiB free\n' \
                "$s" "$(gib "$need")" "$(gib "$(avail_bytes)")" >>"$SKIPS"
            return 1
        fi
        log "b $s: writing the source ($PCT% in $PIECE pieces)..."
        t=$(date +%s%N)
        make_pieces "$SRC" "$bytes"
        log "  $(du -m "$SRC" | cut -f1) MiB allocated," \
            "$((($(date +%s%N) - t) / 1000000)) ms"
        ;;
    cn | cs)
        if [[ $c == cs ]] && ((bytes > $(to_bytes "$SPARSE_MAX"))); then
            printf 'c-sparse\t%s\tabove SPARSE_MAX=%s\n' "$s" "$SPARSE_MAX" >>"$SKIPS"
            return 1
        fi
        # sparse-random: a bit per 4 KiB block, 32 MiB per TiB, + 1 GiB.
        need=$((bytes / 4096 / 8 + (1 << 30)))
        if [[ $c == cs ]] && ((need > $(avail_bytes))); then
            printf 'c-sparse\t%s\tsparse-random needs %s GiB of memory, %s GiB free\n' \
                "$s" "$(gib "$need")" "$(gib "$(avail_bytes)")" >>"$SKIPS"
            return 1
        fi
        log "$(case_name "$c") $s: starting the servers..."
        if [[ $c == cn ]]; then
            serve src -r null "size=$bytes"
        else
            serve src -r sparse-random "size=$bytes" "percent=$PCT" \
                "runlength=$PIECE_B" "seed=$SEED"
        fi
        read -r e u sy m < <(tail -1 "$SCRATCH/setup.time")
        t=$(date +%s%N)
        # The setup is what any client of this source waits for: a row.
        printf '%s\t%s\t%s\t1\t%s\t%s\t%s\tok\t-\t-\t\t%s\n' "$c" "$s" "$ROW_SETUP" "$e" \
            "$(awk -v u="$u" -v s="$sy" 'BEGIN { printf "%.2f", u + s }')" "$m" \
            "$(cut -d' ' -f1 /proc/loadavg)" >>"$RES"
        log "  source setup ${e}s, rss $((m / 1024))MiB"
        CELL_TIMEOUT=$(awk -v t="$TIMEOUT" -v e="$e" 'BEGIN { printf "%d", t + 2 * e + 0.999 }')
        serve dst null "size=$bytes"
        SRC=$(uri src) DST=$(uri dst)
        ;;
    esac
    return 0
}

end_case() {
    stop_servers
    rm -f "$SCRATCH/src" "$SCRATCH/dst"
}

# run_one CASE SIZE ROW RUN: one timed run, checked; a line in $RES.
declare -A TIMED_OUT            # case:row -> the timeout it hit
run_one() {
    local c=$1 s=$2 k=$3 run=$4 t0 t1 rc=0 st=ok e u sy m ready='' srv=- tk0 lim win
    local -a argv
    read -ra argv <<<"${CMD[k]}"
    if ! is_nbd "$c"; then
        rm -f "$DST"
        makes_target "$k" || truncate -s "$(to_bytes "$s")" "$DST"
    fi
    is_floor "$k" || argv+=("$SRC" "$DST")
    is_floor "$k" && argv+=("$SRC")
    [[ ${BUFDEF[k]} == 1 ]] && argv=(env G_MESSAGES_DEBUG=mirror-block "${argv[@]}")
    is_nbd "$c" && tk0=$(srv_ticks)
    t0=$(date +%s%N)
    /usr/bin/time -o "$SCRATCH/time" -f '%e %U %S %M' \
        timeout -k 5 "$CELL_TIMEOUT" "${argv[@]}" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
    t1=$(date +%s%N)
    is_nbd "$c" && srv=$(awk -v a="$tk0" -v b="$(srv_ticks)" -v t="$TICK" \
        'BEGIN { printf "%.2f", (b - a) / t }')
    read -r e u sy m < <(tail -1 "$SCRATCH/time")
    if ((rc == 124 || rc == 137)); then
        st=timeout
        TIMED_OUT[$c:$k]=$CELL_TIMEOUT
    elif ((rc != 0)); then
        st=fail
        log "  [$(case_name "$c") $s] ${LABEL[k]}: FAILED, exit status $rc:"
        tail -n 5 "$SCRATCH/err" | sed 's/^/    /' >&2
    elif ! is_nbd "$c" && ! qemu-img compare -q -f raw -F raw "$SRC" "$DST"; then
        st=fail
        log "  [$(case_name "$c") $s] ${LABEL[k]}: the target differs from the source"
    fi
    [[ ${CMD[k]} == "$MT start"* ]] &&
        ready=$(sed -n 's/.*"ready-seconds": *\([0-9.]*\).*/\1/p' "$SCRATCH/out" | tail -1)
    lim=
    if is_mt "$k"; then
        win=$(sed -n 's/.*mirror: window for .* operations, \([0-9]*\) bytes.*/\1/p' \
            "$SCRATCH/err" | sort -n | tail -1)
        lim=$(((${win:-$((LIMIT[k] - 32 * MiB))} + 32 * MiB) / 1024))
    fi
    local wall cpu
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    cpu=$(awk -v u="$u" -v s="$sy" 'BEGIN { printf "%.2f", u + s }')
    [[ $st == timeout ]] && wall=$CELL_TIMEOUT
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$s" "$k" "$run" \
        "$wall" "$cpu" "$m" "$st" "${ready:--}" "$srv" "$lim" \
        "$(cut -d' ' -f1 /proc/loadavg)" >>"$RES"
    log "  [$(case_name "$c") $s] ${LABEL[k]}: $st wall ${wall}s cpu ${cpu}s" \
        "rss $((m / 1024))MiB${ready:+ ready ${ready}s}$(is_nbd "$c" && echo " srv ${srv}s")"
    if ! is_nbd "$c"; then rm -f "$DST"; fi
}

# bench_cell CASE SIZE: RUNS rounds of the rows that apply, rotated.
bench_cell() {
    local c=$1 s=$2 r i k
    local -a rows=()
    for ((k = 0; k < NROWS; k++)); do
        ((k == ROW_SETUP)) && continue
        applies "$c" "$k" || continue
        [[ -z ${TIMED_OUT[$c:$k]:-} ]] || continue
        rows+=("$k")
    done
    for ((r = 0; r < RUNS; r++)); do
        ((RUNS == 1)) || log "  round $((r + 1))/$RUNS"
        for ((i = 0; i < ${#rows[@]}; i++)); do
            run_one "$c" "$s" "${rows[(r + i) % ${#rows[@]}]}" "$r"
        done
    done
}

# --- report ---------------------------------------------------------------
# cell CASE SIZE ROW: "status wall cpu rss_mib ready srv limit_mib over
# spread"
# over the runs: status ok (all ran), timeout (one timed out: wall is
# ">T"), fail, skip (timed out at a smaller size), none (not run);
# over: runs whose RSS reached their limit; spread: slowest / fastest wall.
cell() {
    local c=$1 s=$2 k=$3 lines st wall
    lines=$(awk -F'\t' -v c="$c" -v s="$s" -v k="$k" '$1 == c && $2 == s && $3 == k' "$RES")
    if [[ -z $lines ]]; then
        if [[ -n ${TIMED_OUT[$c:$k]:-} ]]; then echo "skip"; else echo "none"; fi
        return
    fi
    f() { awk -F'\t' -v i="$1" '$8 == "ok" { print $i }' <<<"$lines"; }
    fmax() { f "$1" | awk '$1 > m { m = $1 } END { print int(m / 1024) }'; }
    st=ok
    grep -q $'\tfail\t' <<<"$lines" && st=fail
    grep -q $'\ttimeout\t' <<<"$lines" && st=timeout
    wall=$(f 5 | median)
    if [[ $st == timeout ]]; then
        # A killed run's peak RSS is a lower bound of the whole run's.
        awk -F'\t' '$8 == "timeout" { if (!w) w = $5; if ($7 > r) r = $7
            if ($11 > l) l = $11; if ($11 != "" && $7 >= $11) n++ }
            END { printf "timeout >%s - >%d - - %d %d -\n", w, r / 1024, l / 1024, n }' <<<"$lines"
        return
    fi
    echo "$st $wall $(f 6 | median) $(fmax 7)" \
        "$(f 9 | grep -v -- - | median | sed 's/^nan$/-/')" \
        "$(f 10 | grep -v -- - | median | sed 's/^nan$/-/')" \
        "$(fmax 11)" \
        "$(awk -F'\t' '$8 == "ok" && $11 != "" && $7 >= $11 { n++ } END { print n + 0 }' <<<"$lines")" \
        "$(f 5 | awk 'NR == 1 || $1 < lo { lo = $1 } $1 > hi { hi = $1 }
            END { if (NR > 1 && lo > 0) printf "%.2f\n", hi / lo; else print "-" }')"
}

# growth W1 W2 S1 S2: wall growth per 4x of size ("-" if unknown;
# ">x" when W2 timed out).
growth() {
    awk -v a="$1" -v b="$2" -v s1="$(to_bytes "$3")" -v s2="$(to_bytes "$4")" 'BEGIN {
        lt = sub(/^>/, "", b)
        if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || a <= 0) { print "-"; exit }
        printf "%s%.2f\n", lt ? ">" : "", exp(log(b / a) * log(4) / log(s2 / s1)) }'
}

# judge VALUE GOAL: yes (VALUE <= GOAL), no, or ? (unknown: "-", or a
# lower bound ">x" with x <= GOAL).  nan (a failed run) is no.
judge() {
    case $1 in
    -) echo "?" ;;
    ">"*) gt "${1#>}" "$2" && echo no || echo "?" ;;
    nan) echo no ;;
    *) gt "$1" "$2" && echo no || echo yes ;;
    esac
}
mark() { case $1 in no) echo " (no)" ;; "?") echo " (?)" ;; esac; }
# worst A B: the verdict of two: no beats unknown beats yes.
worst() {
    if [[ $1 == no || $2 == no ]]; then echo no
    elif [[ $1 == "?" || $2 == "?" || $1 == unknown ]]; then echo unknown
    else echo yes; fi
}

report() {
    local c s k prev pw g r st wall cpu rss ready srv lim over diff spread
    local -A W BEST
    echo
    echo "== scale: RUNS=$RUNS, median wall, CPU (user+sys), max peak RSS of the tool;" \
        "growth = wall / wall at the previous size, per 4x of size; ratio = wall /" \
        "the best peer's wall at that size =="
    awk -F'\t' '{ n++; s += $12; if ($12 > m) m = $12 } END {
        if (n) printf "1-minute load average after the runs: mean %.1f, max %.1f\n", s / n, m }' "$RES"
    echo "goals (issue 21): wall within ${GOAL_RATIO}x of the best peer at every size" \
        "(or within ${SLACK_MS} ms of it); growth per 4x of size at most ${GOAL_GROWTH}x" \
        "(ideally about 1 for a and c-null); peak RSS at most buf-size + 32 MiB (limit_MiB)"
    printf '%-8s %4s  %-36s %8s %6s %7s %7s %9s %7s %7s %7s %7s\n' case size tool wall_s \
        spread cpu_s rss_MiB limit_MiB ready_s srv_cpu growth ratio
    for c in $CASES; do
        # The best peer per size first.
        for s in $SIZES; do
            BEST[$s]=nan
            for ((k = 0; k < NROWS; k++)); do
                is_peer "$k" || continue
                read -r st wall _ <<<"$(cell "$c" "$s" "$k")"
                [[ $st == ok ]] || continue
                [[ ${BEST[$s]} == nan ]] || gt "${BEST[$s]}" "$wall" && BEST[$s]=$wall
            done
        done
        for ((k = 0; k < NROWS; k++)); do
            applies "$c" "$k" || continue
            prev='' pw=''
            for s in $SIZES; do
                if grep -q "^$(case_name "$c")"$'\t'"$s"$'\t' "$SKIPS"; then
                    prev='' pw=''
                    continue
                fi
                read -r st wall cpu rss ready srv lim over spread <<<"$(cell "$c" "$s" "$k")"
                [[ $st == none ]] && continue
                case $st in
                skip) wall=">${TIMED_OUT[$c:$k]}" cpu=- rss=- ready=- srv=- lim=- spread=- ;;
                fail) wall=FAIL ;;
                esac
                is_mt "$k" || lim=-
                g=-; [[ -n $prev ]] && g=$(growth "$pw" "$wall" "$prev" "$s")
                r=-
                if ! is_floor "$k" && [[ ${BEST[$s]} != nan ]]; then
                    r=$(ratio "${wall#>}" "${BEST[$s]}")
                    [[ $wall == ">"* && $r != nan ]] && r=">$r"
                fi
                W[$c:$k:$s]="$wall $g $r $rss $lim $over $(awk -v w="${wall#>}" \
                    -v b="${BEST[$s]}" 'BEGIN { print (w - b) * 1000 }')"
                printf '%-8s %4s  %-36s %8s %6s %7s %7s %9s %7s %7s %7s %7s\n' \
                    "$(case_name "$c")" "$s" "${LABEL[k]}" "$wall" "${spread:--}" \
                    "$cpu" "$rss" "$lim" "$ready" "$srv" "$g" "$r"
                prev=$s pw=$wall
            done
        done
    done
    echo "(>Ns: timed out after N s, or skipped after timing out at a smaller size)"
    # The same as a markdown matrix, for bench/README.md.
    echo
    echo "| case | tool | ${SIZES// / | } |"
    echo "|---|---|$(for s in $SIZES; do printf -- '---|'; done)"
    for c in $CASES; do
        for ((k = 0; k < NROWS; k++)); do
            applies "$c" "$k" || continue
            local line any=0
            line="| $(case_name "$c") | ${LABEL[k]} |"
            for s in $SIZES; do
                if [[ -z ${W[$c:$k:$s]:-} ]]; then line+=" - |"; continue; fi
                read -r wall g r rss _ <<<"${W[$c:$k:$s]}"
                any=1
                line+=" $wall"
                if ! is_floor "$k"; then
                    line+=" (${r}x"
                    [[ $rss == - ]] || line+=", $rss MiB"
                    line+=")"
                fi
                line+=" |"
            done
            ((any)) && echo "$line"
        done
    done
    echo "(cells: wall s (ratio to the best peer, peak RSS); -: not run)"
    echo
    while IFS=$'\t' read -r c s r; do
        echo "skipped: $c $s: $r"
    done <"$SKIPS"
    for c in $CASES; do
        for ((k = 0; k < NROWS; k++)); do
            is_mt "$k" && applies "$c" "$k" || continue
            local rat='' gro='' mem='' okr=yes okg=yes okm=yes j slack
            for s in $SIZES; do
                [[ -n ${W[$c:$k:$s]:-} ]] || continue
                read -r wall g r rss lim over diff <<<"${W[$c:$k:$s]}"
                j=$(judge "$r" "$GOAL_RATIO") slack=
                # Within SLACK_MS of the best peer: process start and exit.
                if [[ $j == no && $r != ">"* ]] && ! gt "$diff" "$SLACK_MS"; then
                    j=yes slack=" (within ${SLACK_MS} ms)"
                fi
                [[ $wall == FAIL ]] && j=no
                rat+="; $s ${r}x$(mark "$j")$slack" okr=$(worst "$okr" "$j")
                if [[ $g != - ]]; then
                    j=$(judge "$g" "$GOAL_GROWTH")
                    gro+="; $s ${g}x$(mark "$j")" okg=$(worst "$okg" "$j")
                fi
                if [[ $rss != - ]]; then
                    j=yes
                    ((over > 0)) && j=no
                    [[ $j == yes && $rss == ">"* ]] && j="?"
                    mem+="; $s ${rss}/${lim}$(mark "$j")" okm=$(worst "$okm" "$j")
                fi
            done
            echo "verdict $(case_name "$c"): ${LABEL[k]}: wall <= ${GOAL_RATIO}x best peer:" \
                "$okr [${rat#; }]; growth per 4x <= ${GOAL_GROWTH}: $okg [${gro#; }];" \
                "peak RSS MiB <= limit: $okm [${mem#; }]" | sed 's/\[\]/[-]/g' 
        done
    done
}

# startup_floor: median wall of 5 copies of an empty 1 MiB file to a new
# file, per tool: what process start and exit cost here.
startup_floor() {
    local tool i t0 out=
    truncate -s 1M "$SCRATCH/tiny"
    for tool in "$MT convert" "$QI" nbdcopy; do
        for i in 1 2 3 4 5; do
            rm -f "$SCRATCH/tiny.out"
            [[ $tool == nbdcopy ]] && truncate -s 1M "$SCRATCH/tiny.out"
            t0=$(date +%s%N)
            $tool "$SCRATCH/tiny" "$SCRATCH/tiny.out" >/dev/null 2>&1 || die "$tool: failed on a 1 MiB file"
            echo $((($(date +%s%N) - t0) / 1000))
        done | awk '{ print $1 / 1e6 }' | median >"$SCRATCH/floor"
        t0=${tool%% *}
        out+=" ${t0##*/} $(cat "$SCRATCH/floor") s;"
    done
    rm -f "$SCRATCH/tiny" "$SCRATCH/tiny.out" "$SCRATCH/floor"
    echo "${out%;}"
}

# --- main -------------------------------------------------------------------
echo "# scale.sh SIZES='$SIZES' CASES='$(for c in $CASES; do case_name "$c"; done | xargs)'" \
    "RUNS=$RUNS TIMEOUT=$TIMEOUT PCT=$PCT PIECE=$PIECE SEED=$SEED B_MAX=$B_MAX" \
    "SPARSE_MAX=$SPARSE_MAX SLACK_MS=$SLACK_MS"
echo "# machine: nproc=$(nproc), $(uname -srm), $(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)," \
    "/dev/shm $(gib "$(df -B1 --output=avail /dev/shm | tail -1)") GiB free"
echo "# versions: $("$MT" --version 2>&1 | head -1) ($MT_SRC, sha256" \
    "$(sha256sum "$MT" | cut -c1-12)); $(qemu-img --version | head -1);" \
    "$(nbdcopy --version | head -1); $(nbdkit --version)"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commands (followed by SRC DST; nbdinfo: SRC):"
for ((k = 0; k < NROWS; k++)); do
    ((k == ROW_SETUP)) && continue
    printf '#   %-36s %s\n' "${LABEL[k]}:" "${CMD[k]/#$MT/mirror-tool}"
done
echo "# start-up floor (an empty 1 MiB file to a new file, median of 5):$(startup_floor)"

for c in $CASES; do
    for s in $SIZES; do
        start_case "$c" "$s" || { log "$(case_name "$c") $s: skipped: $(tail -1 "$SKIPS" | cut -f3)"; continue; }
        bench_cell "$c" "$s"
        end_case
    done
done

report
echo; echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
