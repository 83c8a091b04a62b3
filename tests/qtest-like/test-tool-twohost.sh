#!/usr/bin/env bash
# A live migration between two hosts over TLS: two network namespaces
# joined by a veth pair are the old host (10.219.0.1) and the new host
# (10.219.0.2).  The new host serves an empty target file on its address
# with TLS (PSK, then X.509) through the server under test (tls-lib.sh's
# tls_serve, `mirror-tool serve`); the old host mirrors a generated 64 MiB
# disk to it (`mirror-tool start SRC nbds://10.219.0.2:10809/...
# --export unix:... --qmp ...`) while fio, the guest, writes through the
# export; READY, complete, the new host's server stops (flushing), and
# the file on the new host equals the source byte for byte.  The new
# host's server lets in only the old host's credential (--tls-authz):
# a plain client and other credentials of the same PSK file or CA are
# refused.  The plain server on the new host's address is refused
# without --insecure.
#
# The namespaces are made here and removed at exit, whatever happened;
# where they cannot be made (not root, no ip, no permission) the whole
# test is one skip.  Waits are on files, QMP events and process exits.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
. "$TEST_SRCDIR/tls-lib.sh"
requires timeout cmp python3 certtool psktool ip fio nbdinfo
tls_server_is_ours || requires nbdkit
if ! fio --enghelp=nbd >/dev/null 2>&1; then
    echo "1..0 # SKIP fio has no nbd engine"
    _lib_skipped=1
    exit 77
fi

TMO="timeout 60"
OLD_IP=10.219.0.1
NEW_IP=10.219.0.2
PORT=10809
NS_OLD=mirror-old-$$
NS_NEW=mirror-new-$$
VETH_OLD=mvo$$
VETH_NEW=mvn$$

# At exit: the processes first (lib.sh), then the namespaces (their veth
# pair goes with them) and a veth pair left in this namespace.
_twohost_cleanup()
{
    _lib_cleanup
    ip netns del "$NS_OLD" 2>/dev/null
    ip netns del "$NS_NEW" 2>/dev/null
    ip link del "$VETH_OLD" 2>/dev/null
}
trap _twohost_cleanup EXIT

# netns_skip WHY: the whole test is one skip.
netns_skip()
{
    echo "1..0 # SKIP no network namespaces: $1"
    _lib_skipped=1
    exit 77
}

# netns_setup CMD...: CMD, or skip the test saying why it failed.
netns_setup()
{
    "$@" 2>netns.err || netns_skip "$* failed: $(head -1 netns.err)"
}

netns_setup ip netns add "$NS_OLD"
netns_setup ip netns add "$NS_NEW"
netns_setup ip link add "$VETH_OLD" type veth peer name "$VETH_NEW"
netns_setup ip link set "$VETH_OLD" netns "$NS_OLD"
netns_setup ip link set "$VETH_NEW" netns "$NS_NEW"
netns_setup ip -n "$NS_OLD" addr add "$OLD_IP/24" dev "$VETH_OLD"
netns_setup ip -n "$NS_NEW" addr add "$NEW_IP/24" dev "$VETH_NEW"
for ns in "$NS_OLD" "$NS_NEW"; do
    netns_setup ip -n "$ns" link set lo up
done
netns_setup ip -n "$NS_OLD" link set "$VETH_OLD" up
netns_setup ip -n "$NS_NEW" link set "$VETH_NEW" up
# ip netns exec mounts a sysfs of its own: it can fail where the rest
# worked (a container without CAP_SYS_ADMIN in the host's view).
netns_setup ip netns exec "$NS_OLD" true
OLD=(ip netns exec "$NS_OLD")
NEW=(ip netns exec "$NS_NEW")

TLS_SERVER_IPS="$OLD_IP $NEW_IP"
tls_make_creds

not_running()
{
    ! kill -0 "$1" 2>/dev/null
}

# src_changed FILE MTIME: FILE's modification time is no longer MTIME.
src_changed()
{
    [ "$(stat -c %y "$1")" != "$2" ]
}

# The disk: 64 MiB, 40 MiB of it data.
make_sparse_image base.raw 64M 0:8M 12M:16M 40M:8M 56M:8M

# --- the new host refuses to serve its address without TLS -------------------
truncate -s 64M plain.raw
remember_sum plain.raw
expect_exit 2 "${NEW[@]}" "$T" serve "tcp:$NEW_IP:$PORT" plain.raw
stderr_has "'tcp:$NEW_IP:$PORT' can be reached from other hosts"
stderr_one_line
assert_unchanged plain.raw
ok "the new host: serve tcp:$NEW_IP:$PORT without TLS or --insecure exits 2"

# migrate NAME TARGET-URI SERVER-OPTION...: the scenario.  The new host
# serves NAME-tgt.raw (empty) with SERVER-OPTIONs, which refuse a plain
# client and $bad_uri (the target with wrong credentials); the old host
# mirrors NAME-src.raw (a copy of base.raw) to TARGET-URI while fio
# writes through the export; READY; fio ends; complete; quit; the new
# host's server stops; target == source.
migrate()
{
    local n=$1 turi=$2 job_pid ready_pid fio_pid before
    shift 2
    cp base.raw "$n-src.raw"
    rm -f "$n-tgt.raw"
    truncate -s 64M "$n-tgt.raw"
    tls_serve "${n}new" --netns "$NS_NEW" "tcp:$NEW_IP:$PORT" \
        "$scratch/$n-tgt.raw" "$@"

    # From the old host: a plain client is told TLS is required; one with
    # a wrong key (our client) gets nothing; neither writes.
    remember_sum "$n-tgt.raw"
    run $TMO "${OLD[@]}" nbdinfo --size "nbd://$NEW_IP:$PORT/"
    [ "$last_rc" != 0 ] || fail "$n: a plain client reached the new host"
    stderr_has "requires TLS"
    run $TMO "${OLD[@]}" "$T" convert -n base.raw "$bad_uri"
    [ "$last_rc" != 0 ] || fail "$n: a client with wrong credentials got in"
    tls_no_secrets "$n: a refused client" "$last_out" "$last_err"
    assert_unchanged "$n-tgt.raw" "$n: the target after refused clients"

    "${OLD[@]}" "$T" start --json --qmp "$scratch/$n.qmp" --qmp-wait \
        --export "unix:$scratch/$n.nbd" "$n-src.raw" "$turi" \
        >"$n.out" 2>"$n.err" &
    job_pid=$!
    track_pid $job_pid
    wait_for 20 "$n: mirror-tool start to listen" test -S "$scratch/$n.qmp"

    before=$(stat -c %y "$n-src.raw")
    # The guest: 24 MiB of random 4k..64k writes at 8 MiB/s, from before
    # the job starts until after it is READY or nearly.
    "${OLD[@]}" fio --name="$n" --thread --ioengine=nbd \
        --uri="nbd+unix:///?socket=$scratch/$n.nbd" --rw=randwrite \
        --bsrange=4k-64k --iodepth=8 --rate=8M --size=64M --io_size=24M \
        --output-format=json --output="$n.fio" >"$n.fio.err" 2>&1 &
    fio_pid=$!
    track_pid $fio_pid
    wait_for 20 "$n: fio to write" src_changed "$n-src.raw" "$before"

    # The first QMP client starts the job; it waits for READY.
    timeout 90 "${OLD[@]}" "$T" qmp --wait-event BLOCK_JOB_READY \
        --timeout 80 "$scratch/$n.qmp" query-jobs \
        >"$n.ready" 2>"$n.ready.err" &
    ready_pid=$!
    track_pid $ready_pid
    wait_for 20 "$n: the job to start" grep -qs '"status":"running"' \
        "$n.ready"
    not_running $fio_pid && fail "$n: fio ended before the job started"

    wait $ready_pid || fail "$n: no BLOCK_JOB_READY: $(cat "$n.ready.err")"
    untrack_pid $ready_pid
    wait $fio_pid || fail "$n: fio failed: $(cat "$n.fio.err")"
    untrack_pid $fio_pid
    python3 - "$n.fio" <<'EOF' || fail "$n: fio wrote nothing"
import json, sys
text = open(sys.argv[1]).read()      # fio may put notes before the JSON
j = json.loads(text[text.index("{"):])["jobs"][0]
assert j["error"] == 0, j["error"]
assert j["write"]["io_bytes"] >= 24 << 20, j["write"]["io_bytes"]
EOF

    expect_ok $TMO "${OLD[@]}" "$T" qmp --wait-event BLOCK_JOB_COMPLETED \
        --timeout 50 "$scratch/$n.qmp" block-job-complete \
        '{"device": "mirror"}'
    grep -q '"event":"BLOCK_JOB_COMPLETED"' "$last_out" ||
        fail "$n: no BLOCK_JOB_COMPLETED"
    grep -q '"error"' "$last_out" && fail "$n: the job failed: $(cat "$last_out")"
    expect_ok $TMO "${OLD[@]}" "$T" qmp "$scratch/$n.qmp" quit
    wait_for 20 "$n: mirror-tool start to exit" not_running $job_pid
    wait $job_pid || fail "$n: start exited $?: $(cat "$n.err")"
    untrack_pid $job_pid

    tls_stop "${n}new"
    assert_same "$n-src.raw" "$n-tgt.raw" "$n: the new host's disk"
    cmp -s base.raw "$n-src.raw" && fail "$n: the guest wrote nothing"
    tls_no_secrets "$n: the old host" "$n.out" "$n.err"
    tls_no_secrets "$n: the new host" "${n}new.out" "${n}new.err"
}

bad_uri="nbds://$NEW_IP:$PORT/?tls-psk-file=$TLS_PSK2&tls-username=$TLS_PSK_USER2"
migrate psk "nbds://$NEW_IP:$PORT/?tls-psk-file=$TLS_PSK&tls-username=$TLS_PSK_USER" \
    --tls-psk-file "$TLS_PSK_TWO" --tls-authz "$TLS_PSK_USER"
ok "PSK: fio writes during the mirror to the new host; its disk == the source"

bad_uri="nbds://$NEW_IP:$PORT/?tls-certificates=$TLS_CLI_OTHER"
migrate x509 "nbds://$NEW_IP:$PORT/?tls-certificates=$TLS_CLI" \
    --tls-creds "$TLS_SRV" --tls-authz "$TLS_CLI_DN"
ok "X.509: fio writes during the mirror to the new host; its disk == the source"
