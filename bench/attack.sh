#!/usr/bin/env bash
# bench/attack.sh - the latency a well-behaved NBD client sees while other
# clients attack the server (issue 28): `mirror-tool serve` side by side
# with `qemu-nbd` under the same attacks.  Not run in CI.  See
# bench/README.md.
#
#   bench/attack.sh
#
# Each (server, attack) pair gets a fresh server on a UNIX socket, over a
# 256 MiB raw image in the scratch directory (random data), and one run of
# bench/attack.py: the attack (none, write-hold, slow-readers,
# option-flood; see there), then the victim's 50 reads and 50 writes of
# 4 KiB and 5 reads of 32 MiB, one request at a time, each timed from
# sending it to the last byte of its reply; a request unanswered after
# 30 s ends the victim (column timeouts).
# Servers: `mirror-tool serve --shared 64` (the default 16 would keep 33
# attackers and the victim from connecting at all: queued in the backlog)
# and `qemu-nbd -e 64 -t`; OLD_MT=path adds a row for another mirror-tool
# binary (e.g. one built before issue 28; without --shared).
# Goal: under every attack the victim's 4 KiB read and write within
# 100 ms, its 32 MiB read within 2 s.
# Environment: ATTACKS ("none write-hold slow-readers option-flood"),
# READERS (40), QUEUED (2), SETTLE (1), OLD_MT, SCRATCH (a new directory in /tmp),
# MT (build/qemu-mirror-tool/mirror-tool), TIMEOUT (300 s per run).
set -euo pipefail
BENCH=attack
here=$(cd "$(dirname "$0")" && pwd)
MT=${MT:-$here/../build/qemu-mirror-tool/mirror-tool}
ATTACKS=${ATTACKS:-none write-hold slow-readers option-flood}
TIMEOUT=${TIMEOUT:-300}
. "$here/lib.sh"
need qemu-nbd python3 timeout openssl
[ -x "$MT" ] || die "no mirror-tool at $MT (build it first)"

SCRATCH=${SCRATCH:-$(mktemp -d /tmp/bench-attack.XXXXXX)}
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null || true
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
img=$SCRATCH/img.raw
sock=$SCRATCH/nbd.sock
randstream 7 | head -c 256M >"$img"

# start_server ROW: a fresh server for ROW on $sock.
start_server() {
    rm -f "$sock"
    case $1 in
    mirror-tool) "$MT" serve -f raw --shared 64 "unix:$sock" "$img" \
                     >"$SCRATCH/server.log" 2>&1 & ;;
    mirror-tool-old) "$OLD_MT" serve -f raw "unix:$sock" "$img" \
                         >"$SCRATCH/server.log" 2>&1 & ;;
    qemu-nbd) qemu-nbd -f raw -e 64 -t --socket="$sock" "$img" \
                  >"$SCRATCH/server.log" 2>&1 & ;;
    esac
    server_pid=$!
    for _ in $(seq 200); do
        [ -S "$sock" ] && return 0
        sleep 0.05
    done
    die "$1 did not listen: $(cat "$SCRATCH/server.log")"
}

stop_server() {
    kill -TERM "$server_pid" 2>/dev/null || true
    timeout 10 tail --pid="$server_pid" -f /dev/null ||
        kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
}

rows="mirror-tool qemu-nbd"
[ -n "${OLD_MT:-}" ] && rows="$rows mirror-tool-old"
printf '%-16s %-13s %9s %9s %9s %9s %9s %9s %s\n' server attack \
    r4k_p50 r4k_max w4k_p50 w4k_max r32m_p50 r32m_max timeouts
for attack in $ATTACKS; do
    for row in $rows; do
        start_server "$row"
        line=$(timeout "$TIMEOUT" python3 "$here/attack.py" "$sock" \
                   "$attack") || line="$attack - - - - - - run-failed"
        stop_server
        # shellcheck disable=SC2086
        printf '%-16s %-13s %9s %9s %9s %9s %9s %9s %s\n' "$row" $line
    done
done
