#!/usr/bin/env bash
# bench/tls.sh - the cost of TLS on the NBD server: W3 (bench/nbd.sh) into
# `mirror-tool serve` without TLS, with --tls-psk-file and with
# --tls-creds, side by side with qemu-nbd the same three ways, with the
# same clients.  Not run in CI.  See bench/README.md.
#
# TLS_SIZE of random data in a file in /dev/shm is copied by each client
# into each server's export of TARGET, a file in /dev/shm re-created
# before every run (untimed) from a random template with `cp
# --sparse=never`, so that its pages are touched.  Servers, each started
# afresh for every run on a UNIX socket and stopped after it:
#   mirror-tool serve -f raw -x exp [--tls-psk-file F | --tls-creds DIR]
#   qemu-nbd -f raw -x exp -t -e 16 [--object tls-creds-psk,... |
#            --object tls-creds-x509,...,verify-peer=on --tls-creds tls0]
# (-e 16 as serve's --shared default: both then advertise multi-conn).
# Clients: `nbdcopy SRC URI` and `mirror-tool convert -n -W SRC URI`, URI
# nbd+unix:// or nbds+unix:// with the PSK (user bench) or the client
# certificate; credentials are made by certtool and psktool in the scratch
# directory.  One untimed warm-up round (which checks the target with
# `cmp`), then RUNS rounds with the row order rotated by the round; the
# last round checks every target with `cmp` again.
# - wall: the client's run, from its start to its exit (the server is up
#   and listening before, and stopped after);
# - cpu: the client's user + sys; srv_cpu: the server's, from /proc before
#   it is stopped;
# - vs_plain: median wall / median wall of the same client into the same
#   server without TLS (goal: <= 1.15 for mirror-tool serve);
# - vs_qemu: median wall / median wall of the same client into qemu-nbd
#   with the same kind of TLS (goal: <= 1.00).
# The header shows the cipher each TLS server negotiates with nbdinfo
# (part of what is compared: the servers' priorities differ).
# The mirror-tool serve TLS rows are skipped when `serve --help` has no
# --tls-creds.  Every run is under `timeout $TIMEOUT`; a failure, a timeout
# or a wrong target is recorded and the benchmark goes on, exiting 1 at
# the end.
# Environment: RUNS (5), TLS_SIZE (2G; any size head -c takes), SEED (42),
# TIMEOUT (300 s), CLIENTS ("nbdcopy mirror-tool"), MIRROR_TOOL, PREFAULT
# (1).
set -euo pipefail

RUNS=${RUNS:-5}
TLS_SIZE=${TLS_SIZE:-2G}
SEED=${SEED:-42}
TIMEOUT=${TIMEOUT:-300}
CLIENTS=${CLIENTS:-"nbdcopy mirror-tool"}
PREFAULT=${PREFAULT:-1}
GOAL_PLAIN=1.15
GOAL_QEMU=1.00
BENCH=tls.sh                    # for bench/lib.sh's messages
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MT_SRC=${MIRROR_TOOL:-$ROOT/build/qemu-mirror-tool/mirror-tool}
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"

[[ $# == 0 ]] || die "usage: $0 (settings in the environment)"
[[ -x $MT_SRC ]] || die "$MT_SRC not built (ninja -C build)"
need qemu-nbd nbdcopy certtool psktool cp cmp openssl timeout /usr/bin/time
for c in $CLIENTS; do
    [[ $c == nbdcopy || $c == mirror-tool ]] || die "CLIENTS: unknown client '$c'"
done

SCRATCH=$(mktemp -d /dev/shm/tls-bench.XXXXXX)
SRV_PID=
stop_server() {
    [[ -n $SRV_PID ]] || return 0
    kill "$SRV_PID" 2>/dev/null || true
    # Not a child when qemu-nbd forked: wait for it by its pid.
    while kill -0 "$SRV_PID" 2>/dev/null; do sleep 0.05; done
    wait "$SRV_PID" 2>/dev/null || true
    SRV_PID=
}
trap 'stop_server; rm -rf "$SCRATCH"' EXIT
trap 'exit 130' INT TERM
RES=$SCRATCH/results.tsv        # W3 row wall cpu rss_kib srv_cpu load1
FAILS=$SCRATCH/fails.tsv        # row reason
: >"$RES"; : >"$FAILS"
MT=$SCRATCH/mirror-tool         # a rebuild during the run changes nothing
cp "$MT_SRC" "$MT"
SOCK=$SCRATCH/nbd.sock
TICKS=$(getconf CLK_TCK)

# --- credentials --------------------------------------------------------
PKI=$SCRATCH/pki CLI=$SCRATCH/client PSK=$SCRATCH/psk
mkdir "$PKI" "$CLI" "$PSK"
# cert DIR NAME USAGE: NAME-key.pem and NAME-cert.pem signed by $PKI's CA.
cert() {
    certtool --generate-privkey --key-type=ecdsa --outfile "$1/$2-key.pem" 2>/dev/null
    printf 'organization = bench\ncn = %s\ndns_name = localhost\n%s\n%s\n' \
        "$2" "$3" "encryption_key
signing_key
expiration_days = 2" >"$SCRATCH/t.info"
    certtool --generate-certificate --load-ca-certificate "$PKI/ca-cert.pem" \
        --load-ca-privkey "$PKI/ca-key.pem" --load-privkey "$1/$2-key.pem" \
        --template "$SCRATCH/t.info" --outfile "$1/$2-cert.pem" >/dev/null 2>&1
}
certtool --generate-privkey --key-type=ecdsa --outfile "$PKI/ca-key.pem" 2>/dev/null
printf 'cn = bench CA\nca\ncert_signing_key\nexpiration_days = 2\n' >"$SCRATCH/t.info"
certtool --generate-self-signed --load-privkey "$PKI/ca-key.pem" \
    --template "$SCRATCH/t.info" --outfile "$PKI/ca-cert.pem" >/dev/null 2>&1
cert "$PKI" server tls_www_server
cert "$CLI" client tls_www_client
cp "$PKI/ca-cert.pem" "$CLI/"
psktool -u bench -p "$PSK/keys.psk" >/dev/null
[[ -s $PKI/server-cert.pem && -s $CLI/client-cert.pem && -s $PSK/keys.psk ]] ||
    die "could not make the credentials with certtool and psktool"

# --- rows: client x server ----------------------------------------------
SERVERS=(mt-plain mt-psk mt-x509 qemu-plain qemu-psk qemu-x509)
declare -A SRV_LABEL=(
    [mt-plain]="mirror-tool serve" [mt-psk]="mirror-tool serve --tls-psk-file"
    [mt-x509]="mirror-tool serve --tls-creds"
    [qemu-plain]="qemu-nbd" [qemu-psk]="qemu-nbd --tls-creds (psk)"
    [qemu-x509]="qemu-nbd --tls-creds (x509)")
MT_TLS=1
"$MT" serve --help 2>&1 | grep -q -- --tls-creds || MT_TLS=0
LABEL=() RCLI=() RSRV=()
for c in $CLIENTS; do
    for s in "${SERVERS[@]}"; do
        if [[ $MT_TLS == 0 && $s == mt-* && $s != mt-plain ]]; then
            log "skipping $c -> ${SRV_LABEL[$s]}: serve has no --tls-creds"
            continue
        fi
        LABEL+=("$c -> ${SRV_LABEL[$s]}") RCLI+=("$c") RSRV+=("$s")
    done
done
NROWS=${#LABEL[@]}
# row_of CLIENT SERVER: the row's index, or nothing.
row_of() {
    local k
    for ((k = 0; k < NROWS; k++)); do
        [[ ${RCLI[k]} == "$1" && ${RSRV[k]} == "$2" ]] && echo "$k"
    done
    return 0
}

# server_cmd SERVER: its command line (target $SCRATCH/target on $SOCK).
server_cmd() {
    local q="qemu-nbd -f raw -x exp -t -e 16 -k $SOCK --fork --pid-file $SCRATCH/qemu.pid"
    case $1 in
    mt-plain) echo "$MT serve -f raw -x exp unix:$SOCK $SCRATCH/target" ;;
    mt-psk) echo "$MT serve -f raw -x exp --tls-psk-file $PSK/keys.psk unix:$SOCK $SCRATCH/target" ;;
    mt-x509) echo "$MT serve -f raw -x exp --tls-creds $PKI unix:$SOCK $SCRATCH/target" ;;
    qemu-plain) echo "$q $SCRATCH/target" ;;
    qemu-psk) echo "$q --object tls-creds-psk,id=tls0,dir=$PSK,endpoint=server --tls-creds tls0 $SCRATCH/target" ;;
    qemu-x509) echo "$q --object tls-creds-x509,id=tls0,dir=$PKI,endpoint=server,verify-peer=on --tls-creds tls0 $SCRATCH/target" ;;
    esac
}

# client_uri CLIENT SERVER: the URI the client writes to.
client_uri() {
    local q="socket=$SOCK"
    case $2 in
    *-plain) echo "nbd+unix:///exp?$q" ;;
    *-x509) echo "nbds+unix:///exp?$q&tls-certificates=$CLI" ;;
    *-psk)
        if [[ $1 == nbdcopy ]]; then
            echo "nbds+unix://bench@/exp?$q&tls-psk-file=$PSK/keys.psk"
        else
            echo "nbds+unix:///exp?$q&tls-psk-file=$PSK/keys.psk&tls-username=bench"
        fi ;;
    esac
}

client_cmd() {
    case $1 in
    nbdcopy) echo "nbdcopy" ;;
    mirror-tool) echo "$MT convert -n -W" ;;
    esac
}

# start_server SERVER: started and listening, SRV_PID set; false if not.
start_server() {
    local i
    local -a cmd
    read -ra cmd <<<"$(server_cmd "$1")"
    rm -f "$SOCK" "$SCRATCH/qemu.pid"
    if [[ $1 == mt-* ]]; then
        "${cmd[@]}" >"$SCRATCH/srv.out" 2>&1 &
        SRV_PID=$!
        for ((i = 0; i < 600; i++)); do
            grep -q "serving on" "$SCRATCH/srv.out" && return 0
            kill -0 "$SRV_PID" 2>/dev/null || break
            sleep 0.05
        done
    else
        # --fork returns once the socket listens.
        if "${cmd[@]}" >"$SCRATCH/srv.out" 2>&1; then
            SRV_PID=$(cat "$SCRATCH/qemu.pid")
            return 0
        fi
    fi
    stop_server
    return 1
}

# srv_cpu: the running server's user + sys in seconds.
srv_cpu() {
    awk -v t="$TICKS" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / t }' \
        "/proc/$SRV_PID/stat" 2>/dev/null || echo nan
}

# run_one ROW TIMED CHECK: re-create the target, start the server, run the
# client, record, stop the server, and with CHECK compare the target.
run_one() {
    local k=$1 timed=$2 check=$3 t0 t1 rc=0 why='' e u s m scpu wall cpu
    local c=${RCLI[k]} sv=${RSRV[k]}
    rm -f "$SCRATCH/target"
    cp --sparse=never "$SCRATCH/tmpl" "$SCRATCH/target"
    if ! start_server "$sv"; then
        why="the server did not start: $(tail -n 3 "$SCRATCH/srv.out" | tr '\n' ' ')"
    else
        rm -f "$SCRATCH/inner"
        t0=$(date +%s%N)
        # shellcheck disable=SC2046 # the command is words
        timeout "$TIMEOUT" /usr/bin/time -o "$SCRATCH/inner" -f '%e %U %S %M' \
            $(client_cmd "$c") "$SCRATCH/src" "$(client_uri "$c" "$sv")" \
            >"$SCRATCH/out" 2>&1 || rc=$?
        t1=$(date +%s%N)
        scpu=$(srv_cpu)
        stop_server
        if ((rc == 124)); then why="timed out after ${TIMEOUT}s"
        elif ((rc != 0)); then why="exit status $rc: $(tail -n 3 "$SCRATCH/out" | tr '\n' ' ')"
        elif [[ $check == 1 ]] && ! cmp -s "$SCRATCH/src" "$SCRATCH/target"; then
            why="target differs from source"
        fi
    fi
    if [[ -n $why ]]; then
        log "  ${LABEL[k]}: FAILED: $why"
        printf '%s\t%s\n' "$k" "$why" >>"$FAILS"
        return 0
    fi
    read -r e u s m <"$SCRATCH/inner"
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')
    cpu=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.2f", u + s }')
    if [[ $timed == 1 ]]; then
        printf 'W3\t%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$wall" "$cpu" "$m" "$scpu" \
            "$(cut -d' ' -f1 /proc/loadavg)" >>"$RES"
    fi
    log "  $( ((timed)) || echo "warm-up ")${LABEL[k]}: wall ${wall}s (client ${e}s)" \
        "cpu ${cpu}s srv_cpu ${scpu}s rss $((m / 1024))MiB$( ((check)) && echo ", cmp ok")"
}

# --- main ---------------------------------------------------------------
echo "# tls.sh RUNS=$RUNS TLS_SIZE=$TLS_SIZE CLIENTS='$CLIENTS' SEED=$SEED"
echo "# machine: nproc=$(nproc), $(uname -srm), $(awk '/MemTotal/ { printf "%.1f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
echo "# versions: $("$MT" --version 2>&1 | head -1) ($MT_SRC, sha256" \
    "$(sha256sum "$MT" | cut -c1-12)); $(qemu-nbd --version | head -1);" \
    "$(nbdcopy --version | head -1); $(certtool --version | head -1)"
echo "# servers (target \$SCRATCH/target, socket \$SOCK):"
for s in "${SERVERS[@]}"; do
    printf '#   %-36s %s\n' "${SRV_LABEL[$s]}:" \
        "$(server_cmd "$s" | sed "s|$MT|mirror-tool|; s|$SCRATCH|\$SCRATCH|g")"
done
echo "# clients (followed by \$SCRATCH/src URI):"
for c in $CLIENTS; do
    printf '#   %-36s %s\n' "$c:" "$(client_cmd "$c" | sed "s|$MT|mirror-tool|")"
    for s in plain psk x509; do
        printf '#     %-34s %s\n' "$s:" \
            "$(client_uri "$c" "x-$s" | sed "s|$SCRATCH|\$SCRATCH|g")"
    done
done
# What each TLS server negotiates with libnbd (the cipher decides the
# cost): truncate the target first, nothing is written.
truncate -s "$TLS_SIZE" "$SCRATCH/target"
for s in "${SERVERS[@]}"; do
    if [[ $s == *-plain ]] || [[ $MT_TLS == 0 && $s == mt-* ]]; then
        continue
    fi
    # start_server in this shell, not in $(...): its SRV_PID is what
    # stop_server kills.
    cipher=
    if start_server "$s"; then
        cipher=$(LIBNBD_DEBUG=1 timeout 60 nbdinfo --size \
            "$(client_uri nbdcopy "$s")" 2>&1 |
            sed -n 's/.*connection is using TLS: //p')
    fi
    stop_server
    printf '# TLS of %-34s %s\n' "${SRV_LABEL[$s]}:" "${cipher:-(none: nbdinfo failed)}"
done
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ $PREFAULT == 1 ]] && prefault

log "creating a $TLS_SIZE random source and target template..."
randstream $((SEED + 2)) | head -c "$TLS_SIZE" >"$SCRATCH/src"
randstream $((SEED + 3)) | head -c "$TLS_SIZE" >"$SCRATCH/tmpl"
[[ $(stat -c %s "$SCRATCH/src") -gt 0 ]] || die "bad size '$TLS_SIZE'"
log "warm-up round (checked with cmp)"
for ((k = 0; k < NROWS; k++)); do run_one "$k" 0 1; done
for ((r = 0; r < RUNS; r++)); do
    log "round $((r + 1))/$RUNS"
    for ((k = 0; k < NROWS; k++)); do
        run_one $(((r + k) % NROWS)) 1 $((r == RUNS - 1))
    done
done

# --- report ---------------------------------------------------------------
summarize W3
echo
echo "== W3: $TLS_SIZE random file -> NBD server of a file in /dev/shm, over TLS or not" \
    "(RUNS=$RUNS; medians) =="
awk -F'\t' '{ n++; s += $7; if ($7 > m) m = $7 } END {
    if (n) printf "1-minute load average after the runs: mean %.1f, max %.1f\n", s / n, m }' "$RES"
printf '%-54s %7s %7s %4s %6s %7s %7s %8s %7s %4s\n' "client -> server" wall_s best_s \
    slow cpu_s srv_cpu rss_MiB vs_plain vs_qemu fail
declare -A MS
for ((k = 0; k < NROWS; k++)); do
    MS[$k]=$(col W3 "$k" 6 | median)
done
for ((k = 0; k < NROWS; k++)); do
    c=${RCLI[k]} sv=${RSRV[k]} vp=- vq=- p='' q=''
    nf=$(awk -F'\t' -v r="$k" '$1 == r' "$FAILS" | wc -l)
    if [[ $sv != *-plain ]]; then
        p=$(row_of "$c" "${sv%%-*}-plain")
        [[ -z $p ]] || vp=$(ratio "${MW[k]}" "${MW[p]}")
    fi
    if [[ $sv == mt-* && $sv != *-plain ]]; then
        q=$(row_of "$c" "qemu-${sv#mt-}")
        [[ -z $q ]] || vq=$(ratio "${MW[k]}" "${MW[q]}")
    fi
    printf '%-54s %7s %7s %4s %6s %7s %7s %8s %7s %4s\n' "${LABEL[k]}" "${MW[k]}" \
        "${MB[k]}" "${NS[k]}" "${MC[k]}" "${MS[$k]}" $((MR[k] / 1024)) "$vp" "$vq" "$nf"
done
for ((k = 0; k < NROWS; k++)); do
    c=${RCLI[k]} sv=${RSRV[k]}
    [[ $sv == mt-* && $sv != *-plain ]] || continue
    p=$(row_of "$c" mt-plain) q=$(row_of "$c" "qemu-${sv#mt-}")
    [[ -n $p && -n $q ]] || continue
    vp=$(ratio "${MW[k]}" "${MW[p]}") vq=$(ratio "${MW[k]}" "${MW[q]}")
    ok1=no ok2=no
    [[ $vp != nan ]] && ! gt "$vp" "$GOAL_PLAIN" && ok1=yes
    [[ $vq != nan ]] && ! gt "$vq" "$GOAL_QEMU" && ok2=yes
    echo "verdict: ${LABEL[k]}: ${vp}x plain <= ${GOAL_PLAIN}x: $ok1;" \
        "${vq}x qemu-nbd with the same TLS <= ${GOAL_QEMU}x: $ok2"
done
while IFS=$'\t' read -r k r; do
    echo "failure: ${LABEL[k]}: $r"
done <"$FAILS"
echo; echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ ! -s $FAILS ]] || { log "$(wc -l <"$FAILS") run(s) failed"; exit 1; }
