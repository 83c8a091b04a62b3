#!/usr/bin/env bash
# mirror-tool serve (block/export-nbd.c) against real NBD clients: nbdinfo
# (size, list, map), qemu-io (patterns, zeroes, discard, flush), qemu-img
# compare, nbdcopy in and out, fio's nbd engine with verification, two
# concurrent writers, a read-only export, a TCP export on a free port, a
# qcow2 image, hostile clients (hostile-nbd.py), and SIGINT/SIGTERM ending
# the server with exit 0.
#
# Every client run is wrapped in `timeout` so a hang fails the test.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires timeout cmp truncate dd python3 nbdinfo nbdcopy qemu-io qemu-img

TMO="timeout 120"

# start_serve NAME [--limit-fds] ARGS...: `mirror-tool serve ARGS` in the
# background (with at most 32 open files), waited for until it prints
# "serving on ADDR"; sets addr.
start_serve()
{
    local name=$1 pid
    shift
    rm -f "$name.out" "$name.err"
    if [ "$1" = --limit-fds ]; then
        shift
        (ulimit -n 32 && exec "$T" serve "$@") >"$name.out" 2>"$name.err" &
    else
        "$T" serve "$@" >"$name.out" 2>"$name.err" &
    fi
    pid=$!
    track_pid "$pid"
    eval "pid_$name=$pid"
    wait_for 20 "mirror-tool serve ($name) to listen" \
        grep -q '^serving on ' "$name.out"
    addr=$(sed -n 's/^serving on //p' "$name.out")
}

not_running()
{
    ! kill -0 "$1" 2>/dev/null
}

# stop_serve NAME SIGNAL: the server exits 0 within 10 s.
stop_serve()
{
    local pid rc
    eval "pid=\$pid_$1"
    kill -"$2" "$pid" || fail "$1: no server to signal"
    wait_for 10 "mirror-tool serve ($1) to exit on SIG$2" not_running "$pid"
    wait "$pid"
    rc=$?
    untrack_pid "$pid"
    [ "$rc" = 0 ] || { cat "$1.err" >&2; fail "$1: exit code $rc on SIG$2"; }
}

alive()
{
    local pid
    eval "pid=\$pid_$1"
    kill -0 "$pid" 2>/dev/null || fail "$1: the server died"
}

# --- bad usage --------------------------------------------------------------
make_sparse_image img.raw 64M 0:1M 5M:3M 20M+7:100K 64M-4K:4K
remember_sum img.raw
expect_exit 2 "$T" serve
expect_exit 2 "$T" serve foo:bar img.raw
stderr_has "expected unix:PATH or tcp:HOST:PORT"
stderr_one_line
expect_exit 2 "$T" serve "unix:$scratch/x.sock" missing.raw
expect_exit 2 "$T" serve -f bogus "unix:$scratch/x.sock" img.raw
expect_exit 2 "$T" serve tcp:127.0.0.1:70000 img.raw
touch plain
expect_exit 2 "$T" serve "unix:$scratch/plain" img.raw
stderr_has "exists and is not a socket"
[ -f plain ] || fail "a regular file at the socket path was removed"
assert_unchanged img.raw
ok "bad usage exits 2 and touches nothing"

# --- an address other hosts reach: refused without --insecure (no TLS) ---
for a in tcp:0.0.0.0:0 "tcp:[::]:0"; do
    expect_exit 2 "$T" serve "$a" img.raw
    stderr_has "'$a' can be reached from other hosts" "give --insecure"
    stderr_one_line
done
start_serve open --insecure tcp:0.0.0.0:0 img.raw
port=${addr##*:}
expect_ok $TMO nbdinfo --size "nbd://127.0.0.1:$port"
[ "$(cat "$last_out")" = 67108864 ] || fail "nbdinfo --size: $(cat "$last_out")"
stop_serve open TERM
start_serve local tcp:127.0.0.1:0 img.raw
stop_serve local TERM
assert_unchanged img.raw
ok "0.0.0.0 and :: refused without --insecure, served with it; loopback as before"

# --- nbdinfo ----------------------------------------------------------------
start_serve main -f raw --export-name exp1 "unix:$scratch/s.sock" img.raw
[ "$addr" = "unix:$scratch/s.sock" ] || fail "printed address '$addr'"
uri="nbd+unix:///exp1?socket=$scratch/s.sock"
expect_ok $TMO nbdinfo --size "$uri"
[ "$(cat "$last_out")" = 67108864 ] || fail "nbdinfo --size: $(cat "$last_out")"
expect_ok $TMO nbdinfo --list --json "nbd+unix:///?socket=$scratch/s.sock"
grep -q '"export-name": "exp1"' "$last_out" || fail "--list lacks exp1"
grep -q '"is_read_only": false' "$last_out" || fail "export not writable"
grep -q '"can_multi_conn": true' "$last_out" || fail "no multi-conn"
grep -q '"block_size_maximum": 33554432' "$last_out" || fail "max block"
ok "nbdinfo: size and --list"

# nbdinfo --map agrees with mirror-tool map about data and holes.
map_agrees()
{
    local out
    expect_ok $TMO nbdinfo --map --json "$uri"
    cp "$last_out" nbdmap.json
    map_json img.raw toolmap.json
    out=$(python3 - nbdmap.json toolmap.json <<'EOF'
import json, sys
def runs(pairs):
    out = []
    for start, length, kind in pairs:
        if out and out[-1][2] == kind and out[-1][0] + out[-1][1] == start:
            out[-1][1] += length
        else:
            out.append([start, length, kind])
    return out
nbd = runs((e["offset"], e["length"], "data" if e["type"] == 0 else
            "hole" if e["type"] == 3 else "type%d" % e["type"])
           for e in json.load(open(sys.argv[1])))
tool = runs((e["start"], e["length"], "data" if e["data"] else
             "hole" if e["zero"] else "unknown")
            for e in json.load(open(sys.argv[2])))
if nbd != tool:
    print("nbdinfo %s != mirror-tool map %s" % (nbd, tool))
    sys.exit(1)
if len(nbd) < 3:
    print("expected holes and data, got %s" % nbd)
    sys.exit(1)
EOF
    ) || fail "map: $out"
}
map_agrees
ok "nbdinfo --map agrees with the image's data and holes"

# --- qemu-io and qemu-img compare -------------------------------------------
expect_ok $TMO qemu-io -f raw \
    -c 'write -P 0xab 1M 64k' -c 'write -P 0xcd 3000 5000' \
    -c 'write -z 5M 128k' -c 'write -z -u 6M 64k' -c 'discard 7M 64k' \
    -c 'write -P 0x11 63M 1M' -c 'write -f -P 0x22 2M 4k' -c flush \
    -c 'read -P 0xab 1M 64k' -c 'read -P 0xcd 3000 5000' \
    -c 'read -P 0 5M 128k' -c 'read -P 0 6M 64k' -c 'read -P 0x11 63M 1M' \
    -c 'read -P 0x22 2M 4k' "$uri"
grep -q 'Pattern verification failed' "$last_out" "$last_err" &&
    fail "qemu-io: pattern verification failed"
[ "$(grep -c '^read ' "$last_out")" = 6 ] || fail "qemu-io: reads missing"
ok "qemu-io: patterned writes, write -z, discard, flush, read back"

expect_ok $TMO qemu-img compare -f raw -F raw img.raw "$uri"
ok "qemu-img compare: the image and the export are identical"
# The comparison can fail: a copy with one byte changed differs.
cp img.raw changed.raw
printf '\x5a' | dd of=changed.raw bs=1 seek=$((40 * 1024 * 1024)) \
    conv=notrunc status=none
expect_exit 1 $TMO qemu-img compare -f raw -F raw changed.raw "$uri"
ok "qemu-img compare notices a changed byte"
map_agrees
ok "nbdinfo --map still agrees after writes, zeroes and discards"

# --- nbdcopy out of and into the export -------------------------------------
expect_ok $TMO nbdcopy "$uri" out.raw
assert_same img.raw out.raw "nbdcopy out of the export"
ok "nbdcopy out of the export is byte-identical"
make_random_image rnd.raw 64M
expect_ok $TMO nbdcopy rnd.raw "$uri"
assert_same rnd.raw img.raw "nbdcopy into the export"
ok "nbdcopy into the export is byte-identical"

# --- fio --------------------------------------------------------------------
if command -v fio >/dev/null && fio --enghelp=nbd >/dev/null 2>&1; then
    cat >rand.fio <<EOF
[global]
ioengine=nbd
uri=$uri
size=64M
bsrange=4k-64k
iodepth=32
verify=crc32c
verify_fatal=1
do_verify=1
[randwrite]
rw=randwrite
io_size=48M
EOF
    expect_ok $TMO fio --output-format=json --output=fio.json rand.fio
    python3 - fio.json <<'EOF' || fail "fio: no verified writes"
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
assert j["error"] == 0, j["error"]
assert j["write"]["io_bytes"] >= 48 << 20, j["write"]["io_bytes"]
assert j["read"]["io_bytes"] > 0, "nothing was read back to verify"
EOF
    expect_ok $TMO qemu-img compare -f raw -F raw img.raw "$uri"
    ok "fio nbd engine: random 4k..64k writes verified with crc32c"
else
    ok "fio nbd engine # SKIP fio or its nbd engine is missing"
fi

# --- two clients writing disjoint ranges at once ----------------------------
$TMO qemu-io -f raw -c 'write -P 0x61 8M 4M' -c 'aio_flush' "$uri" \
    >w1.out 2>&1 &
w1=$!
$TMO qemu-io -f raw -c 'write -P 0x62 12M 4M' "$uri" >w2.out 2>&1 &
w2=$!
wait "$w1" || fail "writer 1: $(cat w1.out)"
wait "$w2" || fail "writer 2: $(cat w2.out)"
expect_ok $TMO qemu-io -f raw -c 'read -P 0x61 8M 4M' \
    -c 'read -P 0x62 12M 4M' "$uri"
grep -q 'Pattern verification failed' "$last_out" "$last_err" &&
    fail "concurrent writers: wrong data"
expect_ok $TMO qemu-img compare -f raw -F raw img.raw "$uri"
ok "two clients writing disjoint ranges at once"

# --- hostile clients --------------------------------------------------------
remember_sum img.raw
expect_ok $TMO python3 "$TEST_SRCDIR/hostile-nbd.py" "$scratch/s.sock" "$uri" \
    exp1 67108864
alive main
assert_unchanged img.raw "the image after hostile clients"
expect_ok $TMO qemu-img compare -f raw -F raw img.raw "$uri"
ok "hostile clients: the server stays up, serves others, data intact"

stop_serve main TERM
[ -e s.sock ] && fail "the socket was not removed"
ok "SIGTERM: exit 0, socket removed"

# --- read-only --------------------------------------------------------------
remember_sum img.raw
start_serve ro --read-only "unix:$scratch/ro.sock" img.raw
ro_uri="nbd+unix:///?socket=$scratch/ro.sock"
expect_ok $TMO nbdinfo --json "$ro_uri"
grep -q '"is_read_only": true' "$last_out" || fail "export not read-only"
run $TMO qemu-io -f raw -c 'write -P 1 0 4k' "$ro_uri"
[ "$last_rc" != 0 ] || grep -q -i 'read-only\|not permitted' "$last_out" \
    "$last_err" || fail "qemu-io wrote to a read-only export"
expect_ok $TMO python3 - "$scratch/ro.sock" <<'EOF'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
def read(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b)); assert c; b += c
    return b
read(18); s.sendall(struct.pack(">I", 3))
s.sendall(struct.pack(">QII", 0x49484156454f5054, 1, 0))
size, flags = struct.unpack(">QH", read(10))
assert flags & 2, "READ_ONLY flag missing"
for cookie, typ in ((1, 1), (2, 4), (3, 6)):    # WRITE, TRIM, WRITE_ZEROES
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, typ, cookie, 0, 512) +
              (b"\x01" * 512 if typ == 1 else b""))
    magic, err, c = struct.unpack(">IIQ", read(16))
    assert (err, c) == (1, cookie), (err, c)        # EPERM
EOF
expect_ok $TMO qemu-img compare -f raw -F raw img.raw "$ro_uri"
stop_serve ro INT
assert_unchanged img.raw "the read-only export"
ok "read-only export refuses writes (EPERM), SIGINT exits 0"

# SIGHUP (a dropped ssh session) stops the server as SIGTERM does: exit 0,
# what the guest wrote flushed, the socket removed.
cp img.raw hup.raw
start_serve hup -f raw "unix:$scratch/hup.sock" hup.raw
expect_ok $TMO qemu-io -f raw -c 'write -P 0x6b 1M 64k' \
    "nbd+unix:///?socket=$scratch/hup.sock"
stop_serve hup HUP
[ -e hup.sock ] && fail "SIGHUP: the socket was not removed"
expect_ok qemu-io -f raw -c 'read -P 0x6b 1M 64k' hup.raw
ok "SIGHUP: exit 0 with the write in the image, socket removed"

# --- TCP on a free port -----------------------------------------------------
start_serve tcp "tcp:127.0.0.1:0" img.raw
case $addr in
    tcp:127.0.0.1:[1-9]*) ;;
    *) fail "printed address '$addr'" ;;
esac
tcp_uri="nbd://127.0.0.1:${addr##*:}/"
expect_ok $TMO nbdinfo --size "$tcp_uri"
[ "$(cat "$last_out")" = 67108864 ] || fail "TCP size"
expect_ok $TMO qemu-io -f raw -c 'write -P 0x77 10M 1M' \
    -c 'read -P 0x77 10M 1M' "$tcp_uri"
expect_ok $TMO qemu-img compare -f raw -F raw img.raw "$tcp_uri"
stop_serve tcp TERM
ok "TCP export on 127.0.0.1, port 0"

# --- out of file descriptors --------------------------------------------------
# With 32 descriptors the server cannot accept 60 connections at once: it
# backs off (no busy loop), then serves again once they are gone.
start_serve fd --limit-fds --shared 100 "unix:$scratch/fd.sock" img.raw
fd_uri="nbd+unix:///?socket=$scratch/fd.sock"
# accept-backoff.py reads the server's own failing accept() calls: they
# must come at least 50 ms apart (it retries after 100 ms), not spin.
run $TMO python3 - "$scratch/fd.sock" "$pid_fd" \
    "$TEST_SRCDIR/accept-backoff.py" <<'EOF'
import socket, subprocess, sys
path, pid, helper = sys.argv[1:4]
conns = []
for _ in range(60):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    conns.append(s)
rc = subprocess.run([sys.executable, helper, pid]).returncode
for s in conns:
    s.close()
sys.exit(rc)
EOF
case $last_rc in
    0) ok "out of file descriptors: accept() backs off" ;;
    77) ok "out of file descriptors: accept() backs off # SKIP" \
           "$(head -1 "$last_out")" ;;
    *) fail "out of file descriptors: accept() spins, or never failed" ;;
esac
expect_ok $TMO nbdinfo --size "$fd_uri"
stop_serve fd TERM
ok "out of file descriptors: the server serves again once they are gone"

# --- clients that take from others (issue 28) ------------------------------
expect_exit 2 "$T" serve --shared 0 "unix:$scratch/x.sock" img.raw
stderr_has "--shared '0': must be between 1 and 1024"
stderr_one_line
expect_exit 2 "$T" serve -e 1025 "unix:$scratch/x.sock" img.raw
stderr_has "--shared '1025'"
expect_exit 2 "$T" serve --payload-timeout 1s "unix:$scratch/x.sock" img.raw
stderr_has "--payload-timeout '1s': invalid number"
stderr_one_line
[ -e x.sock ] && fail "a bad option created the socket"
ok "--shared and --payload-timeout: bad values exit 2"

make_sparse_image atk.raw 64M 0:1M 5M:3M 33M:1M
start_serve atk -f raw --shared 40 --payload-timeout 2 \
    "unix:$scratch/atk.sock" atk.raw
atk_uri="nbd+unix:///?socket=$scratch/atk.sock"
expect_ok $TMO python3 "$TEST_SRCDIR/attack-nbd.py" write-hold \
    "$scratch/atk.sock" "$atk_uri" atk.raw "$pid_atk"
alive atk
ok "33 WRITEs holding 32 MiB each: qemu-io and nbdcopy are answered, the payload timeout drops the 33"
expect_ok $TMO python3 "$TEST_SRCDIR/attack-nbd.py" option-flood \
    "$scratch/atk.sock" "$atk_uri" atk.raw "$pid_atk"
alive atk
ok "4 x 250,000 unread NBD_OPT_LIST: nbdinfo is answered, the server grows < 8 MiB"
stop_serve atk TERM

start_serve sh -f raw --shared 2 "unix:$scratch/sh.sock" atk.raw
expect_ok $TMO python3 "$TEST_SRCDIR/attack-nbd.py" shared \
    "$scratch/sh.sock" "nbd+unix:///?socket=$scratch/sh.sock" atk.raw \
    "$pid_sh"
stop_serve sh TERM
ok "--shared 2: a third connection waits until one left, then is served"

# --- the listeners' limits as options ---------------------------------------
for bad in "--handshake-limit 1s:--handshake-limit '1s': invalid number" \
    "--handshake-limit 86401:--handshake-limit '86401': must be between 0" \
    "--reply-timeout -1:--reply-timeout '-1': must be between 0" \
    "--reply-timeout x:--reply-timeout 'x': invalid number" \
    "--budget 100M:--budget '100M': must be between 528M and 1T" \
    "--budget 2T:--budget '2T': must be between" \
    "--budget 1G -e 64:--budget '1G': must be between 2112M" \
    "--budget lots:--budget 'lots': invalid size"; do
    expect_exit 2 "$T" serve ${bad%%:*} "unix:$scratch/x.sock" img.raw
    stderr_has "${bad#*:}"
    stderr_one_line
done
[ -e x.sock ] && fail "a bad option created the socket"
ok "--handshake-limit, --reply-timeout and --budget: bad values exit 2"

start_serve hs -f raw --handshake-limit 1 "unix:$scratch/hs.sock" atk.raw
expect_ok $TMO python3 "$TEST_SRCDIR/attack-nbd.py" handshake-limit \
    "$scratch/hs.sock" "nbd+unix:///?socket=$scratch/hs.sock" atk.raw \
    "$pid_hs"
alive hs
stop_serve hs TERM
ok "--handshake-limit 1: a silent client is dropped, an idle one and qemu-io are served"

start_serve rt -f raw --reply-timeout 2 "unix:$scratch/rt.sock" atk.raw
expect_ok $TMO python3 "$TEST_SRCDIR/attack-nbd.py" reply-timeout \
    "$scratch/rt.sock" "nbd+unix:///?socket=$scratch/rt.sock" atk.raw \
    "$pid_rt"
alive rt
stop_serve rt TERM
ok "--reply-timeout 2: a client that reads no replies is dropped, qemu-io is served"

start_serve bu -f raw --shared 2 --budget 66M "unix:$scratch/bu.sock" atk.raw
expect_ok $TMO python3 "$TEST_SRCDIR/attack-nbd.py" budget \
    "$scratch/bu.sock" "nbd+unix:///?socket=$scratch/bu.sock" atk.raw \
    "$pid_bu"
alive bu
stop_serve bu TERM
ok "--budget 66M: a client that reads nothing holds one 32 MiB reply, qemu-io is served"

# start --export on a free TCP port says where it listens.
make_sparse_image st-src.raw 8M 0:1M 6M:1M
truncate -s 8M st-tgt.raw
expect_exit 2 "$T" start --export-shared 4 st-src.raw st-tgt.raw
stderr_has "--export-shared needs --export ADDR"
expect_exit 2 "$T" start --export tcp:127.0.0.1:0 --export-shared x \
    st-src.raw st-tgt.raw
stderr_has "--export-shared 'x': invalid number"
expect_exit 2 "$T" start --qmp-max-clients 4 st-src.raw st-tgt.raw
stderr_has "--qmp-max-clients needs --qmp PATH"
expect_exit 2 "$T" start --qmp "$scratch/mc.sock" --qmp-max-clients 0 \
    st-src.raw st-tgt.raw
stderr_has "--qmp-max-clients '0'"
[ -e mc.sock ] && fail "a refused --qmp-max-clients left its socket"
for opt in "--export-handshake-limit 5" "--export-reply-timeout 5" \
    "--export-budget 2G"; do
    expect_exit 2 "$T" start $opt st-src.raw st-tgt.raw
    stderr_has "${opt% *} needs --export ADDR"
    stderr_one_line
done
for bad in "--export-handshake-limit -1:--export-handshake-limit '-1'" \
    "--export-reply-timeout 1m:--export-reply-timeout '1m': invalid number" \
    "--export-budget 64M:--export-budget '64M': must be between 528M" \
    "--export-budget 10M --export-shared 1:--export-budget '10M': must be between 33M"; do
    expect_exit 2 "$T" start --export "unix:$scratch/ex.sock" ${bad%%:*} \
        st-src.raw st-tgt.raw
    stderr_has "${bad#*:}"
    stderr_one_line
done
if [ "$(cat "$last_out")" != "" ] || [ -e ex.sock ]; then
    fail "a refused export limit opened something"
fi
for opt in "--qmp-max-output 1M" "--qmp-max-total-output 1M"; do
    expect_exit 2 "$T" start $opt st-src.raw st-tgt.raw
    stderr_has "${opt% *} needs --qmp PATH"
    stderr_one_line
done
for bad in "--qmp-max-output 1K:--qmp-max-output '1K': must be between 64K and 1G" \
    "--qmp-max-output 2G:--qmp-max-output '2G'" \
    "--qmp-max-total-output 17G:--qmp-max-total-output '17G': must be between 64K and 16G" \
    "--qmp-max-total-output x:--qmp-max-total-output 'x': invalid size"; do
    expect_exit 2 "$T" start --qmp "$scratch/mo.sock" ${bad%%:*} \
        st-src.raw st-tgt.raw
    stderr_has "${bad#*:}"
    stderr_one_line
done
[ -e mo.sock ] && fail "a refused QMP output limit left its socket"
expect_exit 2 "$T" start --export-insecure st-src.raw st-tgt.raw
stderr_has "--export-insecure needs --export ADDR"
# An export other hosts reach, without --export-insecure: refused before
# the target is touched (its bytes stay).
printf 'untouched' | dd of=st-tgt.raw conv=notrunc status=none
remember_sum st-tgt.raw
expect_exit 2 "$T" start --export tcp:0.0.0.0:0 st-src.raw st-tgt.raw
stderr_has "'tcp:0.0.0.0:0' can be reached from other hosts" \
    "give --export-insecure"
stderr_one_line
assert_unchanged st-tgt.raw
ok "start: the export's and QMP's new limits need their listener, bad values exit 2"
"$T" start --export tcp:127.0.0.1:0 --export-shared 4 \
    --export-payload-timeout 5 st-src.raw st-tgt.raw >st.out 2>st.err &
st_pid=$!
track_pid $st_pid
wait_for 20 "start --export to say where it listens" \
    grep -q 'exporting the source on tcp:127.0.0.1:[1-9]' st.err
st_addr=$(sed -n 's/.*exporting the source on //p' st.err)
wait_for 30 "the job to complete" grep -q 'serving the target on' st.err
grep -q "serving the target on $st_addr until" st.err ||
    fail "the second message names another address: $(cat st.err)"
expect_ok $TMO qemu-img compare -f raw -F raw st-src.raw \
    "nbd://127.0.0.1:${st_addr##*:}/"
kill -TERM $st_pid
wait_for 10 "start to exit on SIGTERM" not_running $st_pid
untrack_pid $st_pid
ok "start --export tcp:127.0.0.1:0 prints the address it listens on"

# --- qcow2 ------------------------------------------------------------------
expect_ok qemu-img create -q -f qcow2 img.qcow2 32M
start_serve q -f qcow2 "unix:$scratch/q.sock" img.qcow2
q_uri="nbd+unix:///?socket=$scratch/q.sock"
make_sparse_image src32.raw 32M 0:1M 9M:2M 31M:1M
expect_ok $TMO nbdcopy src32.raw "$q_uri"
expect_ok $TMO qemu-img compare -f raw -F raw src32.raw "$q_uri"
stop_serve q TERM
expect_ok qemu-img compare -f raw -F qcow2 src32.raw img.qcow2
expect_ok qemu-img check -q img.qcow2
ok "a qcow2 image through the export: identical, clean"
