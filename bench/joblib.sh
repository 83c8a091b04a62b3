# shellcheck shell=bash
# bench/joblib.sh - helpers shared by bench/mirror.sh and bench/live.sh:
# one mirror job at a time under a QMP daemon, either `mirror-tool start
# --qmp` or qemu-storage-daemon's blockdev-mirror, driven by bench/qmp.py.
# Sourced after bench/lib.sh.  The caller sets BENCH, MT, ROOT, SCRATCH,
# TIMEOUT, QSD (the qemu-storage-daemon binary) and EXPORT (1: the source
# is also served over NBD, as in a live migration), then adds rows; with
# no-job rows (kinds mt0, qsd0) also BASE_S.  See bench/README.md.

SRC_NAME=disk                   # the NBD export name of the source (live)

# Rows: JLABEL[i], JKIND[i], JOPTS[i] (extra mirror-tool options,
# word-split).  Kinds: mt (mirror-tool start), qsd (qemu-storage-daemon
# with blockdev-mirror), and the no-job rows of live.sh, which run the
# writer for BASE_S seconds through the same export with no job: mt0
# (`mirror-tool serve`), qsd0 (qemu-storage-daemon, no blockdev-mirror).
JLABEL=() JKIND=() JOPTS=()
# shellcheck disable=SC2116,SC2086 # echo squeezes the spaces
add_job_row() { JLABEL+=("$1") JKIND+=("$2") JOPTS+=("$(echo $3)"); }

# add_mt_extra_rows: one mirror-tool row per ';'-separated MIRROR_EXTRA set.
add_mt_extra_rows() {
    local e
    local -a extras
    IFS=';' read -ra extras <<<"$MIRROR_EXTRA"
    for e in "${extras[@]}"; do
        e=$(echo $e)           # trim
        [[ -n $e ]] && add_job_row "mirror-tool $e" mt "$e"
    done
    return 0
}

# make_random PATH SIZE KEY: a fully allocated random file of SIZE (K/M/G).
make_random() { randstream "$3" | head -c "$(to_bytes "$2")" >"$1"; }

export_uri() { echo "nbd+unix:///$SRC_NAME?socket=$SCRATCH/export.sock"; }

# daemon_cmd ROW: the daemon's command line, for the shell of `nbdkit
# --run`, where "$uri" and $unixsocket name the target server.
# shellcheck disable=SC2016 # expanded by nbdkit's --run shell
daemon_cmd() {
    local k=$1 q=$SCRATCH/qmp.sock e=$SCRATCH/export.sock
    if [[ ${JKIND[k]} == mt0 ]]; then
        echo "$MT serve --export-name $SRC_NAME unix:$e $SCRATCH/src"
    elif [[ ${JKIND[k]} == mt ]]; then
        echo "$MT start --qmp $q --qmp-wait --job-id j ${JOPTS[k]}" \
            "${EXPORT:+--export unix:$e --export-name $SRC_NAME}" \
            "$SCRATCH/src \"\$uri\""
    else
        echo "$QSD --blockdev driver=file,filename=$SCRATCH/src,node-name=src" \
            "${EXPORT:+--nbd-server addr.type=unix,addr.path=$e}" \
            "${EXPORT:+--export type=nbd,id=e,node-name=src,name=$SRC_NAME,writable=on}" \
            '--blockdev driver=nbd,server.type=unix,server.path=$unixsocket,node-name=tgt' \
            "--chardev socket,path=$q,server=on,wait=off,id=m --monitor chardev=m"
    fi
}

QSD_START='{"execute": "blockdev-mirror", "arguments": {"job-id": "j", "device": "src", "target": "tgt", "sync": "full"}}'

# print_rows: the header lines naming every row's command.
print_rows() {
    local k
    for ((k = 0; k < ${#JLABEL[@]}; k++)); do
        printf '#   %-34s %s\n' "${JLABEL[k]}:" \
            "$(daemon_cmd "$k" | sed "s|$MT|mirror-tool|; s|$SCRATCH|\$SCRATCH|g")"
    done
    echo "#   then over QMP: mirror-tool: qmp_capabilities starts the job" \
        "(--qmp-wait); qemu-storage-daemon: qmp_capabilities, then $QSD_START"
}

# is_base ROW: whether ROW is a no-job row.
is_base() { [[ ${JKIND[$1]} == *0 ]]; }

# job_run WL ROW TIMED SERVER_ARGS [WRITER]: re-create the target from the
# template, run row ROW's job into `nbdkit -U - SERVER_ARGS` (with WRITER,
# a command line, running from the start of the job until READY; a no-job
# row runs it for BASE_S seconds), check the target against the source
# (not after a no-job row), and record a line in $RES:
#   wl row ready_s done_s pause_ms left_bytes cpu_s rss_kib writer_Bps load1
#   wr_p50_us wr_p99_us reader_Bps rd_p50_us rd_p99_us extra
# (qmp.py's line; extra: the job's extra query-block-jobs fields or "-").
# A failure is logged in $FAILS and does not stop the benchmark.
job_run() {
    local wl=$1 row=$2 timed=$3 writer=${5:-} inner rc=0 why=
    local -a server f
    read -ra server <<<"$4"
    rm -f "$SCRATCH/target" "$SCRATCH/res" "$SCRATCH/qmp.sock" \
        "$SCRATCH/export.sock"
    cp --sparse=never "$SCRATCH/tmpl" "$SCRATCH/target"
    inner="python3 $ROOT/bench/qmp.py --out $SCRATCH/res --log $SCRATCH/log"
    inner+=" --timeout $TIMEOUT"
    case ${JKIND[row]} in
    mt) inner+=" --qmp $SCRATCH/qmp.sock" ;;
    qsd | qsd0) inner+=" --qmp $SCRATCH/qmp.sock --start $(printf %q "$QSD_START")" ;;
    mt0) inner+=" --ready-socket $SCRATCH/export.sock" ;;
    esac
    is_base "$row" && inner+=" --baseline $BASE_S"
    [[ -n $writer ]] && inner+=" --writer $(printf %q "$writer") --writer-ready 'connected to NBD server'"
    inner+=" -- $(daemon_cmd "$row")"
    timeout $((TIMEOUT + 30)) nbdkit -U - "${server[@]}" --run "$inner" \
        >"$SCRATCH/out" 2>&1 || rc=$?
    if ((rc == 124)); then why="timed out after $((TIMEOUT + 30))s"
    elif ((rc != 0)); then
        # qmp.py's reason, else the last line (nbdkit's, as the daemon died)
        why="exit status $rc: $(grep -m1 '^qmp.py: ' "$SCRATCH/out" || tail -1 "$SCRATCH/out")"
    elif ! is_base "$row" && ! cmp -s "$SCRATCH/src" "$SCRATCH/target"; then
        why="target differs from source"
    fi
    if [[ -n $why ]]; then
        log "  [$wl] ${JLABEL[row]}: FAILED: $why; daemon log:"
        tail -n 10 "$SCRATCH/log" 2>/dev/null | sed 's/^/    /' >&2
        printf '%s\t%s\t%s\n' "$wl" "$row" "$why" >>"$FAILS"
        return 0
    fi
    # f: ready done pause left cpu rss wbps wp50 wp99 rbps rp50 rp99 extra
    IFS=$'\t' read -r -a f <"$SCRATCH/res"
    if [[ $timed == 1 ]]; then
        printf '%s\t' "$wl" "$row" "${f[@]:0:7}" "$(cut -d' ' -f1 /proc/loadavg)" \
            "${f[@]:7:5}" >>"$RES"
        printf '%s\n' "${f[12]}" >>"$RES"
    fi
    # shellcheck disable=SC2034 # for live.sh's copy rate
    LAST_READY=${f[0]}
    local what="ready ${f[0]}s done ${f[1]}s pause ${f[2]}ms left $((f[3] / 1024))KiB"
    is_base "$row" && what="no job for ${f[0]}s"
    log "  [$wl$( ((timed)) || echo " warm-up")] ${JLABEL[row]}: $what cpu ${f[4]}s" \
        "rss $((f[5] / 1024))MiB$( ((f[6])) && echo " writer $((f[6] / MiB))MiB/s" \
        "p50 ${f[7]}us p99 ${f[8]}us")$( ((f[9])) && echo " reader $((f[9] / MiB))MiB/s" \
        "p50 ${f[10]}us p99 ${f[11]}us")$([[ ${f[12]} == - ]] || echo " job: ${f[12]}")"
}

# job_rounds WL SERVER_ARGS [WRITER]: RUNS rounds, the row order rotated
# by the round number.
job_rounds() {
    local r k n=${#JLABEL[@]}
    for ((r = 0; r < RUNS; r++)); do
        log "  round $((r + 1))/$RUNS"
        for ((k = 0; k < n; k++)); do job_run "$1" $(((r + k) % n)) 1 "$2" "${3:-}"; done
    done
}

jcol() { awk -F'\t' -v w="$1" -v r="$2" -v c="$3" '$1 == w && $2 == r { print $c }' "$RES"; }

# job_report WL TITLE _ GOAL: the table and a verdict per mirror-tool row;
# ratios are against the qemu-storage-daemon row.  (The third argument is
# not used: live.sh prints its own table.)
job_report() {
    local wl=$1 goal=$4 k ref=-1 n=${#JLABEL[@]} nf ok r
    local -a RD RB NS DN CPU RSS
    for ((k = 0; k < n; k++)); do
        RD[k]=$(jcol "$wl" "$k" 3 | median)
        RB[k]=$(jcol "$wl" "$k" 3 | best)
        NS[k]=$(jcol "$wl" "$k" 3 | slow_runs "${RB[k]}")
        DN[k]=$(jcol "$wl" "$k" 4 | median)
        CPU[k]=$(jcol "$wl" "$k" 7 | median)
        RSS[k]=$(jcol "$wl" "$k" 8 | sort -n | tail -1)
        [[ ${JKIND[k]} == qsd ]] && ref=$k
    done
    echo
    echo "== $2 (RUNS=$RUNS; ratios = median / median of qemu-storage-daemon) =="
    load_line "$wl"
    printf '%-34s %8s %5s %8s %5s %6s %7s %7s %4s %4s\n' tool ready_s ratio \
        done_s ratio cpu_s rss_MiB best_s slow fail
    for ((k = 0; k < n; k++)); do
        nf=$(fail_count "$wl" "$k")
        printf '%-34s %8s %5s %8s %5s %6s %7s %7s %4s %4s\n' "${JLABEL[k]}" \
            "${RD[k]}" "$(ratio "${RD[k]}" "${RD[ref]}")" "${DN[k]}" \
            "$(ratio "${DN[k]}" "${DN[ref]}")" "${CPU[k]}" $((${RSS[k]:-0} / 1024)) \
            "${RB[k]}" "${NS[k]}" "$nf"
    done
    for ((k = 0; k < n; k++)); do
        [[ ${JKIND[k]} == mt ]] || continue
        r=$(ratio "${RD[k]}" "${RD[ref]}")
        ok=no
        [[ $r != nan ]] && ! gt "$r" "$goal" && ok=yes
        echo "verdict $wl: ${JLABEL[k]}: time to READY ${r}x qemu-storage-daemon's" \
            "<= ${goal}x: $ok"
    done
    fail_lines "$wl"
}

# load_line WL: the load averages recorded after WL's runs.
load_line() {
    awk -F'\t' -v w="$1" '$1 == w { n++; s += $10; if ($10 > m) m = $10 } END {
        if (n) printf "1-minute load average after the runs: mean %.1f, max %.1f\n", s / n, m }' "$RES"
}

# fail_count WL ROW: how many of ROW's runs of WL failed.
fail_count() { awk -F'\t' -v w="$1" -v r="$2" '$1 == w && $2 == r' "$FAILS" | wc -l; }

# fail_lines WL: one line per failed run of WL.
fail_lines() {
    local w k r
    while IFS=$'\t' read -r w k r; do
        [[ $w == "$1" ]] && echo "failure $1: ${JLABEL[k]}: $r"
    done <"$FAILS"
    return 0
}

# print_header NAME SETTINGS: the common header lines.
print_header() {
    echo "# $1 $2"
    echo "# machine: nproc=$(nproc), $(uname -srm), $(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
    echo "# versions: $("$MT" --version 2>&1 | head -1) ($MT_SRC, sha256" \
        "$(sha256sum "$MT" | cut -c1-12)); $("$QSD" --version | head -1); $(nbdkit --version)"
    echo "# defaults: granularity 64K (an NBD target has no cluster size), operations" \
        "of at most 1M; qemu-storage-daemon: 1 NBD connection, 16 in flight, buf-size 16M;" \
        "mirror-tool: one NBD connection per CPU (at most 4) opened, 16 in flight and 16M" \
        "per connection opened; at open, a server that answers an idle read within 2 ms" \
        "keeps one connection, else every connection and 32M each (block/nbd-spread.c)"
    echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# setup_scratch PREFIX: SCRATCH, RES, FAILS, the private mirror-tool copy.
setup_scratch() {
    SCRATCH=$(mktemp -d "/dev/shm/$1.XXXXXX")
    trap 'rm -rf "$SCRATCH"' EXIT
    trap 'exit 130' INT TERM
    RES=$SCRATCH/results.tsv FAILS=$SCRATCH/fails.tsv
    : >"$RES"; : >"$FAILS"
    MT=$SCRATCH/mirror-tool     # a rebuild during the run changes nothing
    cp "$MT_SRC" "$MT"
}
