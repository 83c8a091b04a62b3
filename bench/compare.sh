#!/usr/bin/env bash
# bench/compare.sh - `mirror-tool compare` and `checksum` beside
# `qemu-img compare` (and sha256sum for scale).  Not run in CI.  See
# bench/README.md, "Compare and checksum".
#
# The images: a SIZE_GIB raw file with PCT% data in runs of 64K..8M at
# random offsets (bench/lib.sh make_sparse, deterministic from SEED) and a
# sparse copy of it, both on tmpfs (a new directory under /dev/shm;
# memory is touched once before, PREFAULT=1).  Workloads:
#   tmpfs  the two files;
#   nbd    the two files behind nbdkit's file plugin (multi-conn), one
#          nbdkit per file on a UNIX socket, started once;
#   qnbd   the same behind qemu-nbd (-r -e 8: read-only, multi-conn).
# Rows: qemu-img compare, mirror-tool compare, mirror-tool checksum of
# both images one after the other (the work of proving two copies equal
# by digests), and (tmpfs) sha256sum of both files, which reads the holes
# too (timed in the first round only: it takes a minute).  Floor rows,
# what no compare can beat here: (tmpfs) bench/compare-floor.c, memcmp
# of the mapped files' data on every CPU, and the same with pread into
# buffers; (nbd, qnbd) nbdcopy of each export to null: at once, which
# only reads.  The load average before and after each workload is
# printed (other work on the machine skews every row).  One untimed
# warm-up round, then RUNS rounds with the row order rotated by the round
# number; wall time by `date +%s%N` around each run, cpu the tool's user +
# sys (/usr/bin/time; nbdkit's own not included).
# Every compare must say "Images are identical." and both digests must
# agree, or the benchmark fails.
#
# Environment: RUNS (5), SIZE_GIB (4), PCT (30), SEED (42), WORKLOADS
# ("tmpfs nbd qnbd"), PREFAULT (1), MIRROR_TOOL (default build/...),
# SCRATCH.
set -euo pipefail

cd "$(dirname "$0")/.."
BENCH=compare.sh
MT=${MIRROR_TOOL:-$PWD/build/qemu-mirror-tool/mirror-tool}
RUNS=${RUNS:-5}
SIZE_GIB=${SIZE_GIB:-4}
PCT=${PCT:-30}
SEED=${SEED:-42}
WORKLOADS=${WORKLOADS:-"tmpfs nbd qnbd"}
PREFAULT=${PREFAULT:-1}
SCRATCH=${SCRATCH:-$(mktemp -d /dev/shm/bench-compare.XXXXXX)}
# shellcheck source=bench/lib.sh
. bench/lib.sh
need qemu-img qemu-nbd nbdkit nbdcopy sha256sum openssl awk cc /usr/bin/time
[ -x "$MT" ] || die "no mirror-tool at $MT"

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$SCRATCH"
}
trap cleanup EXIT

if nbdcopy --help 2>&1 | grep -q blkhash; then
    log "nbdcopy has --blkhash (not measured here)"
else
    log "nbdcopy $(nbdcopy --version 2>/dev/null | head -1 | cut -d' ' -f2):" \
        "no --blkhash (Debian 12's libnbd has none)"
fi

a=$SCRATCH/a.raw b=$SCRATCH/b.raw
log "making the images (${SIZE_GIB} GiB, ${PCT}% data, seed $SEED)..."
make_sparse "$a" "$SIZE_GIB" "$PCT"
cp --sparse=always "$a" "$b"
[ "$PREFAULT" = 1 ] && prefault
FLOOR=$SCRATCH/compare-floor
cc -O2 -pthread -o "$FLOOR" bench/compare-floor.c || die "cannot build the floor"

start_nbdkit() {
    nbdkit -f -U "$SCRATCH/$1.sock" -P "$SCRATCH/$1.pid" file "$2" \
        2>"$SCRATCH/$1.log" &
    pids+=($!)
    while [ ! -s "$SCRATCH/$1.pid" ]; do sleep 0.05; done
}

start_qemu_nbd() {
    qemu-nbd -r -f raw -e 8 -t -k "$SCRATCH/$1.sock" "$2" \
        2>"$SCRATCH/$1.log" &
    pids+=($!)
    while [ ! -S "$SCRATCH/$1.sock" ]; do sleep 0.05; done
}

# check ROW OUTFILE: what a run must have printed.
check() {
    case $1 in
    *compare*)
        grep -qx 'Images are identical.' "$2" || die "$1: $(cat "$2")" ;;
    floor*)
        grep -qx 'identical' "$2" || [[ $1 == *nbdcopy* ]] ||
            die "$1: $(cat "$2")" ;;
    *checksum*)
        [ "$(cut -d' ' -f1 "$2" | sort -u | wc -l)" = 1 ] &&
            [ "$(wc -l <"$2")" = 2 ] || die "$1: digests differ: $(cat "$2")" ;;
    esac
}

# user + sys of the tool (both runs of an x2 row)
timed() { /usr/bin/time -f '%U %S' -a -o "$SCRATCH/time" "$@"; }
RES=$SCRATCH/results
: >"$RES"
for w in $WORKLOADS; do
    LABEL=() CMD=() LIMIT=() BUFDEF=()
    case $w in
    tmpfs) A=$a B=$b ;;
    nbd)
        start_nbdkit na "$a"
        start_nbdkit nb "$b"
        A="nbd+unix:///?socket=$SCRATCH/na.sock"
        B="nbd+unix:///?socket=$SCRATCH/nb.sock" ;;
    qnbd)
        start_qemu_nbd qa "$a"
        start_qemu_nbd qb "$b"
        A="nbd+unix:///?socket=$SCRATCH/qa.sock"
        B="nbd+unix:///?socket=$SCRATCH/qb.sock" ;;
    *) die "unknown workload $w" ;;
    esac
    F="-f raw"
    [ "$w" = tmpfs ] || F=      # an NBD URI names its driver
    add_row "qemu-img compare" "qemu-img compare -f raw -F raw"
    add_row "mirror-tool compare" "$MT compare $F ${F:+-F raw}"
    add_row "mirror-tool checksum x2" "$MT checksum $F"
    if [ "$w" = tmpfs ]; then
        add_row "sha256sum x2" "sha256sum"
        add_row "floor: mmap + memcmp" "$FLOOR"
        add_row "floor: pread + memcmp" "$FLOOR --pread"
    else
        add_row "floor: nbdcopy to null: par" "nbdcopy"
    fi
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    NROWS=${#LABEL[@]}
    for ((r = 0; r <= RUNS; r++)); do
        for ((i = 0; i < NROWS; i++)); do
            k=$(((i + r) % NROWS))
            # sha256sum reads the holes too, at coreutils' speed: once
            [[ ${LABEL[k]} == sha256sum* ]] && ((r != 1)) && continue
            out=$SCRATCH/out tm=$SCRATCH/time
            : >"$tm"
            t0=$(date +%s%N)
            # shellcheck disable=SC2086 # CMD is a word-split prefix
            case ${LABEL[k]} in
            *x2) { timed ${CMD[k]} "$A" && timed ${CMD[k]} "$B"; } >"$out" ;;
            *par) { timed ${CMD[k]} "$A" null: & p=$!
                    timed ${CMD[k]} "$B" null:; wait "$p"; } >"$out" ;;
            *) timed ${CMD[k]} "$A" "$B" >"$out" ;;
            esac
            t1=$(date +%s%N)
            check "${LABEL[k]}" "$out"
            # round 0 warms up
            ((r > 0)) && printf '%s\t%s\t%s\t%s\t0\n' "$w" "$k" \
                "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')" \
                "$(awk '{ c += $1 + $2 } END { printf "%.3f", c }' "$tm")" \
                >>"$RES"
        done
    done
    summarize "$w"
    echo
    echo "$w: ${SIZE_GIB} GiB, ${PCT}% data, median of $RUNS (best), x = wall / qemu-img compare's"
    echo "load average before: $load0; after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| row | wall s | best s | x | cpu s |"
    echo "|---|---|---|---|---|"
    for ((k = 0; k < NROWS; k++)); do
        echo "| ${LABEL[k]} | ${MW[k]} | ${MB[k]} |" \
            "$(ratio "${MW[k]}" "${MW[0]}") | ${MC[k]} |"
    done
    if [ "$w" != tmpfs ]; then
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        pids=()
    fi
done
