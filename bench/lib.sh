# shellcheck shell=bash
# bench/lib.sh - helpers shared by bench/convert.sh, nbd.sh and qcow2.sh.
# Sourced, not run.  The caller sets BENCH (its name, for messages), MT (the
# mirror-tool binary), SCRATCH (scratch dir), RES (results file, one line per
# timed run: workload row wall cpu rss_kib [more columns]) and NROWS once the
# rows are added.  See bench/README.md.

DEFAULT_BUF=16M                 # mirror-tool's default --buf-size
MiB=$((1 << 20))

die() { echo "$BENCH: error: $*" >&2; exit 1; }
log() { echo "$*" >&2; }
need() { local t; for t; do command -v "$t" >/dev/null || die "$t not installed"; done; }

# "16M" -> bytes (K/M/G/T suffixes, powers of 2).
to_bytes() {
    local v=${1^^} n
    n=${v%[KMGT]}
    case $v in
    *K) echo $((n << 10)) ;; *M) echo $((n << 20)) ;;
    *G) echo $((n << 30)) ;; *T) echo $((n << 40)) ;; *) echo "$n" ;;
    esac
}

# Deterministic random byte stream (AES-CTR keystream keyed by $1).
randstream() {
    openssl enc -aes-128-ctr -nosalt -K "$(printf '%032x' "$1")" \
        -iv 00000000000000000000000000000000 -in /dev/zero 2>/dev/null || true
}

# make_full PATH SIZE_GIB KEY: fully allocated random file.
make_full() { randstream "$3" | head -c "$2G" >"$1"; }

# make_sparse PATH SIZE_GIB PCT [STREAM]: runs of 1..128 64K-units at
# random offsets until PCT% of the units are allocated; merged runs are then
# filled by dd, one run at a time, from a single stream: `STREAM $SEED`
# (default randstream: random data).  The layout depends only on SEED.
make_sparse() {
    local path=$1 units=$(($2 * 16384)) pct=$3 stream=${4:-randstream} off len
    truncate -s "$2G" "$path"
    awk -v seed="$SEED" -v units="$units" -v pct="$pct" 'BEGIN {
        srand(seed); want = int(units * pct / 100); n = 0
        while (n < want) {
            len = 1 + int(rand() * 128); off = int(rand() * (units - len + 1))
            for (i = off; i < off + len; i++) if (!(i in a)) { a[i] = 1; n++ }
        }
        for (i = 0; i < units; ) {
            if (i in a) { s = i; while (i in a) i++; print s, i - s } else i++
        }
    }' >"$SCRATCH/layout"
    while read -r -u 3 off len; do
        dd of="$path" bs=64K seek="$off" count="$len" conv=notrunc \
            iflag=fullblock status=none
    done 3<"$SCRATCH/layout" < <("$stream" "$SEED")
    log "  $(basename "$path"): $(wc -l <"$SCRATCH/layout") data runs," \
        "$(du -m "$path" | cut -f1) MiB allocated of $(($2 * 1024)) MiB"
}

# Touch most free memory once so first-touch cost does not land in a run.
prefault() {
    local avail
    avail=$(awk '/MemAvailable/ { print int($2 / 1048576) - 3 }' /proc/meminfo)
    ((avail > 0)) || return 0
    log "prefaulting ${avail} GiB of memory..."
    fallocate -l "${avail}G" "$SCRATCH/prefault" 2>/dev/null || true
    rm -f "$SCRATCH/prefault"
}

# Rows: LABEL[i], CMD[i] (word-split command prefix), LIMIT[i] (RSS limit in
# bytes, buf-size + 32 MiB, for mirror-tool rows; empty for peers),
# BUFDEF[i] (1: a mirror-tool row with the default buf-size, which grows
# with the NBD channels taking requests: nbd.sh reads what it became).
LABEL=() CMD=() LIMIT=() BUFDEF=()
add_row() {
    local label=$1 cmd buf=$DEFAULT_BUF w prev= def=1
    cmd=$(echo $2)               # squeeze spaces (no globs in options)
    LABEL+=("$label") CMD+=("$cmd")
    if [[ $cmd == "$MT "* ]]; then
        for w in $cmd; do          # last --buf-size wins
            [[ $prev == --buf-size ]] && buf=$w def=0
            [[ $w == --buf-size=* ]] && buf=${w#--buf-size=} def=0
            prev=$w
        done
        LIMIT+=($(($(to_bytes "$buf") + 32 * MiB)))
        BUFDEF+=("$def")
    else
        LIMIT+=("") BUFDEF+=(0)
    fi
}

# add_extra_rows PREFIX_LABEL PREFIX_CMD: one row per ';'-separated option
# set in MIRROR_EXTRA.
add_extra_rows() {
    local e
    local -a extras
    IFS=';' read -ra extras <<<"$MIRROR_EXTRA"
    for e in "${extras[@]}"; do
        e=$(echo $e)               # trim
        [[ -n $e ]] && add_row "$1 $e" "$2 $e"
    done
    return 0
}

col() { awk -F'\t' -v i="$1" -v r="$2" -v c="$3" '$1 == i && $2 == r { print $c }' "$RES"; }
median() {
    sort -g | awk '{ a[NR] = $1 } END {
        if (NR == 0) print "nan"
        else if (NR % 2) printf "%.3f\n", a[(NR + 1) / 2]
        else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# best: the smallest of the numbers on stdin ("nan" if none).
best() { sort -g | awk 'NR == 1 { printf "%.3f\n", $1 } END { if (NR == 0) print "nan" }'; }
# slow_runs BEST: how many of the numbers on stdin exceed twice BEST.  On
# this kind of guest a run whose new pages come from memory the host took
# back takes 2-10x as long as the others (bench/README.md, "Noise"); the
# count shows how many such runs a median stood on.
slow_runs() { awk -v b="$1" 'b != "nan" && $1 > 2 * b { n++ } END { print n + 0 }'; }

# summarize WORKLOAD: MW[k] median wall, MB[k] best wall, NS[k] slow runs,
# MC[k] median CPU (column 4), MR[k] max RSS in KiB, for every row k.
# shellcheck disable=SC2034 # MW, MB, NS, MC and MR are for the caller
summarize() {
    local k
    MW=() MB=() NS=() MC=() MR=()
    for ((k = 0; k < NROWS; k++)); do
        MW[k]=$(col "$1" "$k" 3 | median)
        MB[k]=$(col "$1" "$k" 3 | best)
        NS[k]=$(col "$1" "$k" 3 | slow_runs "${MB[k]}")
        MC[k]=$(col "$1" "$k" 4 | median)
        MR[k]=$(col "$1" "$k" 5 | sort -n | tail -1)
        MR[k]=${MR[k]:-0}
    done
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "nan" }'; }
gt() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

# rss_check ROW: "yes"/"no": peak RSS below LIMIT[ROW] (after summarize).
rss_check() { ((MR[$1] * 1024 < LIMIT[$1])) && echo yes || echo no; }
