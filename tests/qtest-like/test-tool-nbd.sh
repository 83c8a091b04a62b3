#!/usr/bin/env bash
# mirror-tool with NBD sources and targets (issue 3): self-verifying
# sparse-random copies, raw <-> NBD round trips checked by cmp and by an
# independent reader, a 1 TiB empty export, slow, failing and dying
# servers, qemu-nbd exporting qcow2, no multi-conn, malformed URIs.
#
# Servers run on UNIX sockets in the scratch directory; every tool run is
# wrapped in `timeout` so a hang fails the test instead of blocking it.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires nbdkit timeout cmp truncate dd

MiB=$((1024 * 1024))
TMO="timeout 60"

# --- sparse-random onto itself: the plugin checks every byte written ------
# The peers' own benchmark: one server is source and target of one copy.
for w in -W ""; do
    expect_ok $TMO nbdkit -U - sparse-random 256M seed=1 percent=30 \
        --run "\"$T\" convert -n $w \"\$uri\" \"\$uri\""
    ok "sparse-random 256M copied onto itself ${w:-in order}: verified"
done
# The verification really works: another seed fails the copy.
expect_exit 1 $TMO nbdkit -U - sparse-random 256M seed=1 percent=30 --run "
    export src=\"\$uri\"
    nbdkit -U - sparse-random 256M seed=2 percent=30 --run '
        \"$T\" convert -n -W \"\$src\" \"\$uri\"'"
stderr_has "write error at offset"
ok "a copy onto a sparse-random target with another seed fails (exit 1)"

# --- raw file <-> NBD memory ---------------------------------------------
make_sparse_image src.img 64M 0:1M 5M:3M 20M+7:100K 64M-4K:4K
for w in "" -W; do
    start_nbdkit mem memory 64M
    expect_ok $TMO "$T" convert -n $w src.img "$uri"
    stderr_empty
    read_back "$uri" back.img
    assert_same src.img back.img "raw -> NBD ${w:-in order}"
    expect_ok $TMO "$T" convert $w "$uri" out.img
    assert_same src.img out.img "NBD -> raw ${w:-in order}"
    map_json out.img out.map
    extent_is out.map 1M 4M hole
    stop_server mem
    ok "raw -> nbd memory -> raw ${w:-in order}: identical, holes kept"
done

# Sizes that are not a multiple of 512 (qemu-img 7.2 fails on these).
make_random_image odd.img 1000001
start_nbdkit odd memory 1000001
expect_ok $TMO "$T" convert -n odd.img "$uri"
read_back "$uri" back.img
assert_same odd.img back.img "odd size"
expect_ok $TMO "$T" convert "$uri" out.img
assert_same odd.img out.img "odd size back"
stop_server odd
ok "a 1000001-byte export round trip"

# --- pattern: every 8-byte word holds its own offset -----------------------
expect_ok $TMO nbdkit -U - pattern 10498105 --run "
    \"$T\" convert \"\$uri\" pat.img && nbdcopy \"\$uri\" ref.img"
assert_same ref.img pat.img "pattern export"
[ "$(od -A n -t x1 -j $((8 * 1000)) -N 8 pat.img | tr -d ' ')" = \
  "0000000000001f40" ] || fail "pattern word 1000 is not its offset"
ok "pattern 10498105 bytes: same bytes as nbdcopy reads, words hold offsets"

# --- 1 TiB of nothing: block status makes it a matter of seconds ----------
for tz in --target-is-zero ""; do
    start=$(date +%s)
    expect_ok $TMO nbdkit -U - null 1T --run "
        export src=\"\$uri\"
        nbdkit -U - memory 1T --run '\"$T\" convert -n $tz \"\$src\" \"\$uri\"'"
    secs=$(( $(date +%s) - start ))
    [ "$secs" -lt 30 ] || fail "1 TiB empty copy took ${secs}s"
    ok "1 TiB null -> memory 1T ${tz:-(zeroing the target)}: ${secs}s"
done

# --- slow servers ---------------------------------------------------------
expect_ok $TMO nbdkit -U - --filter=delay sparse-random 64M seed=3 \
    percent=50 rdelay=5ms wdelay=5ms \
    --run "\"$T\" convert -n -W \"\$uri\" \"\$uri\""
ok "copy through the delay filter (5 ms per request), verified"

# A latency-bound server: every connection sends from its own thread, with
# 1 MiB writes that fill the socket (the sender waits for room), and the
# main loop reads the replies.
make_random_image lat-src.img 48M
truncate -s 48M lat-dst.img
G_MESSAGES_DEBUG=all expect_ok $TMO nbdkit -U - --filter=delay \
    file lat-dst.img wdelay=3ms rdelay=3ms \
    --run "\"$T\" convert -n lat-src.img \"\$uri\""
grep -q -F "sending from a thread per connection" "$last_out" ||
    fail "the node did not send from its threads"
cmp lat-src.img lat-dst.img || fail "latency-bound copy differs"
rm -f lat-src.img lat-dst.img
ok "latency-bound server: sender threads, 48 MiB of 1 MiB writes, cmp"

# --- I/O errors: exit 1, the message names the operation and offset -------
start_nbdkit bad --filter=error sparse-random 16M seed=1 percent=100 \
    error=EIO error-pread-rate=100%
rm -f out.img
expect_exit 1 $TMO "$T" convert "$uri" out.img
stderr_has "read error at offset" "Input/output error"
stop_server bad
ok "read errors on the source: exit 1, 'read error at offset'"

make_random_image data.img 16M
start_nbdkit full --filter=error memory 16M error=ENOSPC \
    error-pwrite-rate=100% error-zero-rate=100%
expect_exit 1 $TMO "$T" convert -n data.img "$uri"
stderr_has "write error at offset" "No space left on device"
stop_server full
ok "write errors on the target: exit 1, 'write error at offset', ENOSPC"

# --- a server killed mid-copy: exit 1 promptly, no hang -------------------
# (without reconnect: test-tool-reconnect.sh has it)
killed_mid_copy()
{
    local role=$1 pid rc start secs
    rm -f out.img kill.err
    if [ "$role" = source ]; then
        start_nbdkit victim --filter=delay sparse-random 1G seed=1 \
            percent=100 rdelay=100ms
        $TMO "$T" convert -p -W --reconnect-delay 0 "$uri" out.img \
            >/dev/null 2>kill.err &
    else
        start_nbdkit victim --filter=delay memory 1G wdelay=100ms
        $TMO "$T" convert -p -n -W --reconnect-delay 0 \
            "nbd+unix:///?socket=$scratch/src.sock" "$uri" >/dev/null \
            2>kill.err &
    fi
    pid=$!
    track_pid "$pid"
    wait_for 30 "the copy to start" grep -q % kill.err
    start=$(date +%s)
    stop_server victim
    wait "$pid"
    rc=$?
    untrack_pid "$pid"
    secs=$(( $(date +%s) - start ))
    last_cmd="kill -9 the $role server during mirror-tool convert"
    last_rc=$rc
    tr '\r' '\n' <kill.err >"$last_err"
    [ "$rc" = 1 ] || fail "$role killed: expected exit code 1"
    [ "$secs" -lt 10 ] || fail "$role killed: exit took ${secs}s"
    stderr_has "error at offset"
    ok "the $role server killed mid-copy: exit 1 after ${secs}s"
}
killed_mid_copy source
start_nbdkit src sparse-random 1G seed=1 percent=100
killed_mid_copy target
stop_server src

# --- no multi-conn: one connection, still correct --------------------------
start_nbdkit multi memory 64M
expect_ok "$T" info "$uri"
# The default: one connection per CPU, at most 4; only the first is made
# while the server answers quickly (all of them if the idle read at open
# took 2 ms or more).
conns=$(nproc)
[ "$conns" -le 4 ] || conns=4
grep -Eq "connections: (1 \(up to $conns\)|$conns)\$" "$last_out" ||
    fail "1 (up to $conns) connections expected"
grep -q "multi-conn: yes" "$last_out" || fail "multi-conn expected"
stop_server multi
start_nbdkit single --filter=multi-conn memory 64M multi-conn-mode=disable
expect_ok "$T" info "$uri"
grep -q "connections: 1" "$last_out" || fail "1 connection expected"
grep -q "multi-conn: no" "$last_out" || fail "multi-conn: no expected"
expect_ok $TMO "$T" convert -n -W src.img "$uri"
read_back "$uri" back.img
assert_same src.img back.img "single connection"
stop_server single
ok "a server without multi-conn: 1 connection, copy identical"

# --- a read-only export refuses to be a target -----------------------------
start_nbdkit ro -r memory 64M
expect_exit 2 $TMO "$T" convert -n src.img "$uri"
stderr_one_line
stderr_has "the NBD export is read-only"
stop_server ro
ok "a read-only export as target: exit 2, 'the NBD export is read-only'"

# --- map through block status ----------------------------------------------
start_nbdkit sr sparse-random 64M seed=4
map_json "$uri" sr.map
map_covers sr.map $((64 * MiB))
python3 -c 'import json,sys; e=json.load(open(sys.argv[1]));
sys.exit(0 if any(x["data"] for x in e) and any(not x["data"] for x in e)
         else 1)' sr.map || fail "map of sparse-random lacks data or holes"
stop_server sr
ok "map of an NBD export: contiguous, data and holes"

# --- qemu-nbd exporting qcow2, as source and as target ---------------------
if command -v qemu-nbd >/dev/null && command -v qemu-img >/dev/null &&
   command -v qemu-io >/dev/null; then
    rm -f q.qcow2 t.qcow2
    qemu-img create -q -f qcow2 q.qcow2 64M || fail "qemu-img create"
    qemu-io -f qcow2 -c 'write -P 0x55 1M 2M' -c 'write -P 0xaa 10M 64k' \
        -c 'write -z 11M 1M' -c 'write -P 0x11 63M 1M' q.qcow2 \
        >/dev/null || fail "qemu-io"
    qemu-img convert -f qcow2 -O raw q.qcow2 ref.img || fail "qemu-img"
    qemu-nbd -f qcow2 -k "$scratch/q.sock" -t --fork \
        --pid-file="$scratch/q.pid" q.qcow2 || fail "qemu-nbd"
    qpid=$(cat q.pid)
    track_pid "$qpid"
    rm -f out.img
    expect_ok $TMO "$T" convert "nbd+unix:///?socket=$scratch/q.sock" out.img
    assert_same ref.img out.img "qemu-nbd qcow2 source"
    kill "$qpid"
    wait_for 20 "qemu-nbd to exit" sh -c "! kill -0 $qpid 2>/dev/null"
    untrack_pid "$qpid"
    ok "qemu-nbd exporting qcow2 as the source: same bytes as qemu-img"

    qemu-img create -q -f qcow2 t.qcow2 64M || fail "qemu-img create"
    qemu-nbd -f qcow2 -k "$scratch/t.sock" -t --fork \
        --pid-file="$scratch/t.pid" t.qcow2 || fail "qemu-nbd"
    tpid=$(cat t.pid)
    track_pid "$tpid"
    expect_ok $TMO "$T" convert -n -W src.img \
        "nbd+unix:///?socket=$scratch/t.sock"
    kill "$tpid"
    wait_for 20 "qemu-nbd to exit" sh -c "! kill -0 $tpid 2>/dev/null"
    untrack_pid "$tpid"
    expect_ok qemu-img compare -f raw -F qcow2 src.img t.qcow2
    ok "qemu-nbd exporting qcow2 as the target: qemu-img compare identical"
fi

# --- malformed URIs: exit 2, one line naming the problem, nothing touched ---
bad_uri()
{
    local spec=$1 msg=$2
    rm -f out.img
    expect_exit 2 $TMO "$T" convert "$spec" out.img
    stderr_one_line
    stderr_has "$msg"
    assert_absent out.img
    remember_sum src.img
    expect_exit 2 $TMO "$T" convert -n src.img "$spec"
    stderr_one_line
    stderr_has "$msg"
    assert_unchanged src.img
}
bad_uri 'nbd+unix:///x' "missing socket="
bad_uri 'nbd+unix:///?socket=' "empty socket="
bad_uri 'nbd+unix://host/?socket=s' "a host must not be given"
bad_uri 'nbd://h/?socket=s' "socket= is only valid"
bad_uri 'nbd://h:99999/' "bad port '99999'"
bad_uri 'nbd://h:0/' "bad port '0'"
bad_uri 'nbd://h:-1/' "bad port '-1'"
bad_uri 'nbd://' "missing host"
bad_uri 'nbd://[::1/' "unterminated '['"
bad_uri 'nbd+vsock:///x' "vsock"
bad_uri 'nbd+ssh://h/x' "unsupported URI scheme 'nbd+ssh'"
bad_uri 'http://h/x' "unsupported URI scheme 'http'"
bad_uri 'nbd://h/?foo=1' "unknown query parameter 'foo'"
bad_uri 'nbd+unix:///?socket=a&socket=b' "given more than once"
bad_uri 'nbd://h/x%00y' "NUL byte"
bad_uri 'nbd://h/%zz' "bad percent-encoding '%zz'"
bad_uri "nbd://h/$(printf '%04097d' 0)" "4097 bytes long"
bad_uri 'nbds://h/?tls-username=bob' "needs tls-psk-file="
grep -q bob "$last_err" && fail "the user name appears in the message"
ok "malformed NBD URIs: exit 2, one line naming the problem, nothing touched"

bad_uri "nbd+unix:///?socket=$scratch/nothing.sock" "nothing.sock"
ok "a socket nobody listens on: exit 2 naming the URI"

exit 0
