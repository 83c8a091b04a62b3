# Shared helpers for the tool tests (tests/qtest-like/test-tool-*.sh).
#
# Sourced by each script.  Output is TAP ("ok N - description" per case,
# "not ok N - ..." for the failure, the plan "1..N" at exit), and the exit
# code follows nbdkit's tests: 0 = pass, 77 = skip, anything else = fail.
# On failure the command, its exit code, stderr and (the start of) stdout
# go to stderr.
#
# meson sets MIRROR_TOOL (the binary) and TEST_LIB (this file).  Sourcing
# this file creates a scratch directory, cd's into it (so relative paths in
# the tests are inside it) and removes it on exit.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

set -u

if [ -z "${MIRROR_TOOL:-}" ]; then
    MIRROR_TOOL=$(dirname "${BASH_SOURCE[0]}")/../../build
    MIRROR_TOOL=$MIRROR_TOOL/qemu-mirror-tool/mirror-tool
fi
case $MIRROR_TOOL in
    /*) ;;
    *) MIRROR_TOOL=$PWD/$MIRROR_TOOL ;;
esac
if [ ! -x "$MIRROR_TOOL" ]; then
    echo "FAIL: MIRROR_TOOL '$MIRROR_TOOL' is not an executable" >&2
    exit 1
fi
T=$MIRROR_TOOL
export LC_ALL=C
# The tests' source directory: helper scripts (hostile-nbd.py) live there.
TEST_SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Background processes to kill on exit (see track_pid).
_lib_pids=

# TAP: cases so far; the plan is printed on exit.
_lib_cases=0
_lib_skipped=

_lib_cleanup()
{
    local pid ns
    if [ -z "$_lib_skipped" ]; then
        echo "1..$_lib_cases"
    fi
    for pid in $_lib_pids; do
        kill -KILL -- "$pid" 2>/dev/null
    done
    for ns in ${_lib_netns:-}; do
        ip netns del "$ns" 2>/dev/null      # see netns_pair
    done
    cd / && rm -rf "$scratch" ${shm:+"$shm"}
}

# Set $shm to a new directory on tmpfs (removed on exit), for cases that
# need a source whose pages live in memory; fails when there is none.
shm=
shm_scratch()
{
    shm=$(mktemp -d /dev/shm/mirror-tool-test.XXXXXX 2>/dev/null) || {
        shm=
        return 1
    }
    [ "$(stat -f -c %T "$shm")" = tmpfs ] && return 0
    rmdir "$shm"
    shm=
    return 1
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/mirror-tool-test.XXXXXX") || exit 1
trap _lib_cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
cd "$scratch" || exit 1

# Remember a background pid (or -PGID for a process group) so that the
# cleanup on exit kills it.
track_pid()
{
    _lib_pids="$_lib_pids $1"
}

# untrack_pid PID: PID was reaped (its number may be reused): forget it.
untrack_pid()
{
    local p keep=
    for p in $_lib_pids; do
        [ "$p" = "$1" ] || keep="$keep $p"
    done
    _lib_pids=$keep
}

# requires CMD...: skip the whole script (exit 77) when a command is missing.
requires()
{
    local c
    for c in "$@"; do
        if ! command -v "$c" >/dev/null 2>&1; then
            echo "1..0 # SKIP '$c' is not installed"
            _lib_skipped=1
            exit 77
        fi
    done
}

ok()
{
    _lib_cases=$((_lib_cases + 1))
    echo "ok $_lib_cases - $*"
}

# The last command run by run/expect_exit: its words, exit code, output.
last_cmd=
last_rc=
last_out=$scratch/.stdout
last_err=$scratch/.stderr

_lib_show_last()
{
    [ -n "$last_cmd" ] || return 0
    {
        echo "  command:   $last_cmd"
        echo "  exit code: $last_rc"
        echo "  stderr:"
        sed 's/^/    | /' "$last_err" 2>/dev/null | tr '\r' '\n' | head -40
        echo "  stdout (first 40 lines):"
        sed 's/^/    | /' "$last_out" 2>/dev/null | head -40
    } >&2
}

# fail MSG: print MSG and the last command's details, exit 1.
# not_ok MSG: record a failed case and go on (the script must exit 1 later).
not_ok()
{
    _lib_cases=$((_lib_cases + 1))
    echo "not ok $_lib_cases - $*"
}

fail()
{
    not_ok "$*"
    echo "FAIL: $*" >&2
    _lib_show_last
    exit 1
}

# run CMD...: run CMD, stdout to $last_out, stderr to $last_err; sets last_rc.
run()
{
    last_cmd=$(printf '%q ' "$@")
    "$@" >"$last_out" 2>"$last_err"
    last_rc=$?
    return 0
}

# expect_exit CODE CMD...: run CMD and fail unless it exits with CODE.
# stderr is kept in $last_err (and stdout in $last_out) for later checks.
expect_exit()
{
    local code=$1
    shift
    run "$@"
    if [ "$last_rc" != "$code" ]; then
        fail "expected exit code $code, got $last_rc"
    fi
}

expect_ok()
{
    expect_exit 0 "$@"
}

# stderr_has STR...: each STR (fixed string) appears in the last stderr.
stderr_has()
{
    local s
    for s in "$@"; do
        grep -F -q -e "$s" "$last_err" || fail "stderr lacks \"$s\""
    done
}

# stderr_one_line: the last stderr is exactly one non-empty line.
stderr_one_line()
{
    local n
    n=$(wc -l <"$last_err")
    if [ "$n" -ne 1 ] || [ ! -s "$last_err" ]; then
        fail "expected a one-line error on stderr, got $n lines"
    fi
}

# stdout_empty / stderr_empty: nothing was printed there.
stdout_empty()
{
    [ ! -s "$last_out" ] || fail "expected nothing on stdout"
}

stderr_empty()
{
    [ ! -s "$last_err" ] || fail "expected nothing on stderr"
}

# to_bytes SIZE: bytes from 4K, 1M, 2G, plain numbers and sums of them
# ("64M-64K", "3M+1").
to_bytes()
{
    local e=$1
    e=${e//K/*1024}
    e=${e//M/*1048576}
    e=${e//G/*1073741824}
    echo $(( e ))
}

# _lib_dd_range SRCDEV FILE OFFSET LENGTH: overwrite a range of FILE in place.
_lib_dd_range()
{
    local off len
    off=$(to_bytes "$3")
    len=$(to_bytes "$4")
    dd if="$1" of="$2" bs=64K count="$len" seek="$off" \
       iflag=count_bytes,fullblock oflag=seek_bytes conv=notrunc \
       status=none || fail "dd into $2 failed"
}

# make_sparse_image FILE SIZE [OFFSET:LENGTH]...: a sparse file of SIZE with
# random data at each OFFSET:LENGTH and holes elsewhere.
make_sparse_image()
{
    local file=$1 size=$2 r
    shift 2
    rm -f "$file"
    truncate -s "$(to_bytes "$size")" "$file" || fail "truncate $file"
    for r in "$@"; do
        _lib_dd_range /dev/urandom "$file" "${r%%:*}" "${r#*:}"
    done
}

# make_random_image FILE SIZE: a fully allocated file of random bytes.
make_random_image()
{
    head -c "$(to_bytes "$2")" /dev/urandom >"$1" || fail "head into $1"
}

# write_zeroes FILE OFFSET:LENGTH...: write (allocated) zeroes over ranges.
write_zeroes()
{
    local file=$1 r
    shift
    for r in "$@"; do
        _lib_dd_range /dev/zero "$file" "${r%%:*}" "${r#*:}"
    done
}

file_size()
{
    stat -c %s "$1"
}

# allocated_bytes FILE: bytes of storage FILE occupies.
allocated_bytes()
{
    echo $(( $(stat -c '%b * %B' "$1") ))
}

sha256_of()
{
    sha256sum <"$1" | cut -d' ' -f1
}

# remember_sum FILE / assert_unchanged FILE [WHAT]: FILE's sha256 is the
# same as when remember_sum ran.
declare -A _lib_sums
remember_sum()
{
    _lib_sums[$1]=$(sha256_of "$1")
}

assert_unchanged()
{
    local now
    [ -e "$1" ] || fail "${2:-$1}: '$1' disappeared"
    now=$(sha256_of "$1")
    [ "$now" = "${_lib_sums[$1]}" ] || fail "${2:-$1}: '$1' was modified"
}

assert_absent()
{
    if [ -e "$1" ] || [ -L "$1" ]; then
        fail "${2:-$1}: '$1' was created"
    fi
}

# assert_same A B [WHAT]: byte-identical files.
assert_same()
{
    local diff
    if ! diff=$(cmp -- "$1" "$2" 2>&1); then
        fail "${3:-cmp}: $diff"
    fi
}

# wait_for SECONDS DESCRIPTION CMD...: poll CMD every 50 ms until it
# succeeds; fail after SECONDS.  This waits for an event; it is not a delay.
wait_for()
{
    local secs=$1 what=$2 i
    shift 2
    for (( i = 0; i < secs * 20; i++ )); do
        "$@" && return 0
        sleep 0.05
    done
    fail "timed out after ${secs}s waiting for $what"
}

# start_nbdkit NAME ARGS...: nbdkit ARGS on ./NAME.sock, in the
# foreground of a background job; returns once it listens (it writes the
# pid file then).  Sets uri to the export's URI and pid_NAME.
start_nbdkit()
{
    local name=$1 pid
    shift
    rm -f "$name.sock" "$name.pid"
    nbdkit -f --exit-with-parent -U "$scratch/$name.sock" \
        -P "$scratch/$name.pid" "$@" 2>"$name.log" &
    pid=$!
    track_pid "$pid"
    eval "pid_$name=$pid"
    wait_for 20 "nbdkit $name to listen" test -s "$name.pid"
    uri="nbd+unix:///?socket=$scratch/$name.sock"
}

# stop_server NAME: kill it and reap it.
stop_server()
{
    local pid
    eval "pid=\$pid_$1"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    untrack_pid "$pid"
}

# read_back URI FILE: the export's bytes, read by something that is not
# mirror-tool (nbdcopy or qemu-img), into FILE.  Uses $TMO (the caller's
# time limit per command).
read_back()
{
    rm -f "$2"
    if command -v nbdcopy >/dev/null; then
        $TMO nbdcopy "$1" "$2" || fail "nbdcopy $1 $2"
    elif command -v qemu-img >/dev/null; then
        $TMO qemu-img convert -f raw -O raw "$1" "$2" ||
            fail "qemu-img convert $1 $2"
    else
        $TMO "$T" convert "$1" "$2" || fail "mirror-tool convert $1 $2"
    fi
}

# all_stopped PID: every thread of PID is in the stopped state.
all_stopped()
{
    local f st
    for f in /proc/"$1"/task/*/stat; do
        st=$(cat "$f" 2>/dev/null) || return 1
        st=${st##*) }
        case ${st:0:1} in
            T|t) ;;
            *) return 1 ;;
        esac
    done
}

# stop_process PID: SIGSTOP PID and wait until every thread of it has
# stopped.  kill returns before the group stop is done: until one thread
# of a loaded process takes the signal, the others go on serving (a
# server could still answer the request the test meant it to hold).
stop_process()
{
    kill -STOP "$1" || fail "SIGSTOP $1"
    wait_for 10 "process $1 to stop" all_stopped "$1"
}

# map_json FILE OUT: `mirror-tool map --output=json FILE` into OUT.
map_json()
{
    expect_ok "$T" map --output=json "$1"
    cp "$last_out" "$2"
}

# extent_is MAPJSON OFFSET LENGTH hole|data: every extent of the map that
# overlaps [OFFSET, OFFSET+LENGTH) is a hole (zero, no data) or data.
# OFFSET and LENGTH take suffixes (see to_bytes).
extent_is()
{
    local out
    out=$(python3 - "$1" "$(to_bytes "$2")" "$(to_bytes "$3")" "$4" <<'EOF'
import json, sys
path, want = sys.argv[1], sys.argv[4]
off, length = int(sys.argv[2]), int(sys.argv[3])
ext = json.load(open(path))
end = off + length
covered = 0
for e in ext:
    s, l = e["start"], e["length"]
    if s + l <= off or s >= end:
        continue
    covered += min(end, s + l) - max(off, s)
    hole = e["zero"] and not e["data"]
    if (want == "hole") != hole:
        print("extent %s is not a %s" % (json.dumps(e), want))
        sys.exit(1)
if covered != length:
    print("the map covers %d of the %d bytes" % (covered, length))
    sys.exit(1)
EOF
    ) || fail "$1: [$2, +$3) should be $4: $out"
}

# map_covers MAPJSON SIZE: extents are contiguous from 0 to exactly SIZE.
map_covers()
{
    local out
    out=$(python3 - "$@" <<'EOF'
import json, sys
ext = json.load(open(sys.argv[1]))
pos = 0
for e in ext:
    if e["start"] != pos or e["length"] <= 0:
        print("gap or empty extent at %d: %s" % (pos, json.dumps(e)))
        sys.exit(1)
    pos += e["length"]
if pos != int(sys.argv[2]):
    print("extents end at %d, expected %s" % (pos, sys.argv[2]))
    sys.exit(1)
EOF
    ) || fail "$1: $out"
}

# progress_pct FILE: the percentage the last progress bar drawn in FILE
# (`-p`, redrawn after \r) shows, e.g. 62.5; 0 before the first one.
# No command is run (it is polled).
progress_pct()
{
    local s=
    IFS= read -r -d '' s 2>/dev/null <"$1"
    case $s in
        *%*) ;;
        *) echo 0; return ;;
    esac
    s=${s%\%*}
    echo "${s##* }"
}

# _lib_progress_at PID FILE PCT: PID has exited, or its progress bar in
# FILE shows at least PCT percent.
_lib_progress_at()
{
    local p
    kill -0 "$1" 2>/dev/null || return 0
    p=$(progress_pct "$2")
    p=${p%.*}
    [ "${p:-0}" -ge "$3" ]
}

# wait_progress SECONDS PID FILE PCT: wait until the progress bar of PID
# in FILE shows PCT (an integer) percent or more, or PID exits (the caller
# tells which by PID's exit code); fail after SECONDS.
wait_progress()
{
    wait_for "$1" "progress $4% in $3" _lib_progress_at "$2" "$3" "$4"
}

# term_server NAME: stop a server of start_nbdkit(_tcp) the way an
# administrator does (SIGTERM: nbdkit answers further requests with
# ESHUTDOWN), and reap it; fails unless it exits within 20 s (nbdkit
# waits for a client that sends nothing: stop it while requests come).
term_server()
{
    local pid
    eval "pid=\$pid_$1"
    kill -TERM "$pid" 2>/dev/null
    wait_for 20 "server $1 to exit after SIGTERM" _lib_gone "$pid"
    wait "$pid" 2>/dev/null
    untrack_pid "$pid"
}

_lib_gone()
{
    ! kill -0 "$1" 2>/dev/null
}

# free_tcp_port [ADDR]: a TCP port of ADDR (default 127.0.0.1) that nothing
# listens on now, the kernel's pick (a server started right after gets it,
# unless another process took it in between).
free_tcp_port()
{
    python3 -c 'import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
print(s.getsockname()[1])' "${1:-127.0.0.1}" || fail "no free TCP port"
}

# start_nbdkit_tcp NAME [--netns NS] ADDR PORT ARGS...: start_nbdkit on TCP
# ADDR:PORT instead of a socket, inside the network namespace NS if given
# (`ip netns exec` execs nbdkit: pid_NAME is nbdkit's).  Sets uri to
# nbd://ADDR:PORT/ and pid_NAME; stop_server NAME stops it.
start_nbdkit_tcp()
{
    local name=$1 pid ns=()
    shift
    if [ "$1" = --netns ]; then
        ns=(ip netns exec "$2")
        shift 2
    fi
    local addr=$1 port=$2
    shift 2
    rm -f "$name.pid"
    "${ns[@]}" nbdkit -f --exit-with-parent -i "$addr" -p "$port" \
        -P "$scratch/$name.pid" "$@" 2>"$name.log" &
    pid=$!
    track_pid "$pid"
    eval "pid_$name=$pid"
    wait_for 20 "nbdkit $name to listen on $addr:$port" test -s "$name.pid"
    uri="nbd://$addr:$port/"
}

# progress_at_least FILE PCT: the last figure of -p's progress bar in FILE
# (a stderr with \r between updates) is at least PCT percent (an integer).
progress_at_least()
{
    local p
    p=$(tr '\r' '\n' <"$1" | grep -o '[0-9.]*%' | tail -1)
    p=${p%\%}
    p=${p%%.*}
    [ -n "$p" ] && [ "$p" -ge "$2" ]
}

# Network namespaces that netns_pair made: deleted at exit, after the
# processes (their veth pairs go with them).
_lib_netns=

# netns_pair NS_A VETH_A IP_A NS_B VETH_B IP_B: two network namespaces
# (deleted at exit, after the processes) joined by a veth pair, VETH_A
# with IP_A/24 in NS_A and VETH_B with IP_B/24 in NS_B, links up.  Returns
# 1 with the reason in $netns_why where they cannot be made (not root, no
# ip, no permission, no sysfs for `ip netns exec`).
netns_why=
netns_pair()
{
    local cmd
    _lib_netns="$_lib_netns $1 $4"
    for cmd in "ip netns add $1" "ip netns add $4" \
               "ip link add $2 type veth peer name $5" \
               "ip link set $2 netns $1" "ip link set $5 netns $4" \
               "ip -n $1 addr add $3/24 dev $2" \
               "ip -n $4 addr add $6/24 dev $5" \
               "ip -n $1 link set lo up" "ip -n $4 link set lo up" \
               "ip -n $1 link set $2 up" "ip -n $4 link set $5 up" \
               "ip netns exec $1 true"; do
        if ! $cmd 2>netns.err; then
            netns_why="$cmd failed: $(head -1 netns.err)"
            ip link del "$2" 2>/dev/null
            return 1
        fi
    done
}

# event_seen FILE EVENT [KEY=JSON]...: a line of FILE (QMP events, one JSON
# object a line, as --json and `mirror-tool qmp --wait-event` print them)
# is EVENT whose data has each member KEY equal to JSON (reconnecting=true,
# node='"target"'); KEY=* asks only that the member be there.
event_seen()
{
    grep -q "\"event\": *\"$2\"" "$1" || return 1     # cheap, for polls
    python3 - "$@" <<'PYEOF'
import json, sys
path, name, want = sys.argv[1], sys.argv[2], sys.argv[3:]
for line in open(path, errors="replace"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if not isinstance(ev, dict) or ev.get("event") != name:
        continue
    data = ev.get("data", {})
    if all(k in data and (v == "*" or data[k] == json.loads(v))
           for k, v in (w.split("=", 1) for w in want)):
        sys.exit(0)
sys.exit(1)
PYEOF
}
