#!/usr/bin/env bash
# TLS on the NBD server (`mirror-tool serve --tls-creds / --tls-psk-file`,
# `start --export-tls-*`) end to end, with real clients: our own
# (nbds:// and nbds+unix:// URIs), libnbd's nbdinfo and nbdcopy, QEMU's
# qemu-img and qemu-io (--object tls-creds-psk / tls-creds-x509), each with
# PSK and X.509, over a UNIX socket and TCP; a guest writing through the
# TLS export of a running mirror job.
#
# Refused, and the server serving good clients after each: a wrong PSK
# key, an unknown PSK user, a client certificate of another CA, an
# expired one, a revoked one (ca-crl.pem), none when the server verifies
# peers, a client not in --tls-authz (a DN, PSK user names), a plain
# client to a TLS server, a TLS client to a plain server.  Byte-level
# clients: one that stops after STARTTLS or inside the TLS handshake
# (dropped at --handshake-limit, and at the default 10 s, measured in the
# background), options pipelined after STARTTLS or sent without it, and
# inside TLS (Python's ssl) a second STARTTLS and a client that reads no
# replies (--reply-timeout).  Bad usage exits 2 with nothing opened.  No
# key, PSK key or PSK user name appears in any message of the server or
# of our client (libnbd's tools echo the URI, user name and all, so for
# them only keys are checked).
#
# The server is the one tls-lib.sh's tls_serve runs ($TLS_SERVER); cases
# of options nbdkit lacks are skipped when that is nbdkit, and cases that
# need QEMU's tools are skipped without them.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
. "$TEST_SRCDIR/tls-lib.sh"
requires timeout cmp python3 certtool psktool nbdinfo nbdcopy
tls_server_is_ours || requires nbdkit

TMO="timeout 60"
SIZE=$((16 * 1024 * 1024))
U=$TLS_PSK_USER

tls_make_creds

# skip_unless_ours WHAT: print a TAP skip for WHAT and return 1 unless the
# server under test is ours.
skip_unless_ours()
{
    tls_server_is_ours && return 0
    ok "$1 # SKIP $TLS_SERVER is the server under test"
    return 1
}

# have_qemu: qemu-img and qemu-io are installed.  skip_unless_qemu WHAT:
# print a TAP skip for WHAT and return 1 unless they are.
have_qemu()
{
    command -v qemu-img >/dev/null && command -v qemu-io >/dev/null
}

skip_unless_qemu()
{
    have_qemu && return 0
    ok "$1 # SKIP qemu-img or qemu-io is not installed"
    return 1
}

# --- URIs and client options for each kind of credential --------------------
# Our client: nbds+unix:///?socket=S or nbds://127.0.0.1:P/ with the
# credentials in the query.  libnbd 1.14 takes the PSK user name only as
# the URI's user (nbds+unix://USER@/...).  QEMU: an --object and
# --image-opts.

# our_uri ADDR KIND [CRED [USER]]: our client's URI of the server at ADDR
# (unix:PATH or tcp:HOST:PORT); KIND psk, x509 or plain; CRED the PSK file
# or certificate directory (default the good one).
our_uri()
{
    local base
    case $1 in
        unix:*) base="nbds+unix:///?socket=${1#unix:}" ;;
        tcp:*) base="nbds://127.0.0.1:${1##*:}/" ;;
    esac
    case $2 in
        psk) tls_psk_uri "$base" "${3:-$TLS_PSK}" "${4:-$U}" ;;
        x509) tls_x509_uri "$base" "${3:-$TLS_CLI}" ;;
        plain) echo "${base/nbds/nbd}" ;;
    esac
}

# lnbd_uri ADDR KIND [CRED [USER]]: the same for libnbd's tools.
lnbd_uri()
{
    local a=$1 kind=$2 cred=${3:-} user=${4:-$U}
    case $kind in
        psk)
            case $a in
                unix:*) echo "nbds+unix://$user@/?socket=${a#unix:}&tls-psk-file=${cred:-$TLS_PSK}" ;;
                tcp:*) echo "nbds://$user@127.0.0.1:${a##*:}/?tls-psk-file=${cred:-$TLS_PSK}" ;;
            esac
            ;;
        *) our_uri "$@" ;;
    esac
}

# qemu_obj KIND [DIR [USER]]: sets qobj to QEMU's --object for the client
# credentials (psk: a directory with keys.psk).
qemu_obj()
{
    case $1 in
        psk) qobj="tls-creds-psk,id=tls0,dir=${2:-$TLS_PSK_DIR},endpoint=client,username=${3:-$U}" ;;
        x509) qobj="tls-creds-x509,id=tls0,dir=${2:-$TLS_CLI},endpoint=client" ;;
    esac
}

# qemu_opts ADDR: QEMU's --image-opts of the server at ADDR with TLS
# (tls0).  Over a UNIX socket QEMU needs the name to check the server's
# certificate against.
qemu_opts()
{
    case $1 in
        unix:*) echo "driver=nbd,server.type=unix,server.path=${1#unix:},tls-creds=tls0,tls-hostname=localhost" ;;
        tcp:*) echo "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=${1##*:},tls-creds=tls0" ;;
    esac
}

# good NAME: the server NAME still serves a good client (nbdinfo).
declare -A good_uri
good()
{
    expect_ok $TMO nbdinfo --size "${good_uri[$1]}"
    [ "$(cat "$last_out")" = "$SIZE" ] ||
        fail "$1: a good client after a refusal: size '$(cat "$last_out")'"
}

# refused WHAT NAME [--says MSG] CMD...: CMD (a client of server NAME)
# fails (its stderr has MSG if given, else something about TLS), the
# image img_NAME is unchanged, neither side shows a secret, and the server
# serves a good client afterwards.
refused()
{
    local what=$1 name=$2 img says='tls\|certificate\|handshake' keys
    shift 2
    if [ "$1" = --says ]; then
        says=$2
        shift 2
    fi
    eval "img=\$img_$name"
    remember_sum "$img"
    run "$@"
    [ "$last_rc" != 0 ] || fail "$what: the client was served"
    grep -q -i -e "$says" "$last_err" ||
        fail "$what: the client failed, but not saying '$says'"
    assert_unchanged "$img" "$what"
    # Our client prints no user name; libnbd's and QEMU's may (the user's
    # own input), but no key.
    case " $* " in
        *" $T "*) keys= ;;
        *) keys=--keys ;;
    esac
    tls_no_secrets "$what (client)" $keys "$last_out" "$last_err"
    tls_no_secrets "$what (server $name)" "$name.out" "$name.err"
    good "$name"
}

# serve_kind NAME KIND ADDR [OPTION...]: the server under test on ADDR
# with the good credentials of KIND, serving img-NAME.raw (a copy of
# base.raw); sets img_NAME and good_uri[NAME].
serve_kind()
{
    local name=$1 kind=$2 a=$3
    shift 3
    cp base.raw "img-$name.raw"
    eval "img_$name=img-$name.raw"
    case $kind in
        psk) tls_serve "$name" "$a" "img-$name.raw" --tls-psk-file "$TLS_PSK" "$@" ;;
        x509) tls_serve "$name" "$a" "img-$name.raw" --tls-creds "$TLS_SRV" "$@" ;;
    esac
    good_uri[$name]=$(lnbd_uri "$addr" "$kind")
}

make_sparse_image base.raw 16M 0:1M 5M:2M 15M:1M
make_random_image data.raw 16M

# --- works: every client, both kinds, UNIX socket and TCP --------------------
for kind in psk x509; do
    for tr in unix tcp; do
        n=$kind$tr
        case $tr in
            unix) serve_kind "$n" "$kind" "unix:$scratch/$n.sock" ;;
            tcp) serve_kind "$n" "$kind" tcp:127.0.0.1:0 ;;
        esac
        a=$addr
        img=img-$n.raw
        what="$kind over $tr"

        # Structured replies through TLS: base:allocation of base.raw.
        expect_ok $TMO nbdinfo --map "$(lnbd_uri "$a" "$kind")"
        awk '{ print $1, $2, $3 }' "$last_out" >map.txt
        printf '%s\n' "0 1048576 0" "1048576 4194304 3" "5242880 2097152 0" \
            "7340032 8388608 3" "15728640 1048576 0" | cmp -s - map.txt ||
            fail "$what: nbdinfo --map: $(cat "$last_out")"

        # Our client, into and out of the export.
        expect_ok $TMO "$T" convert -n data.raw "$(our_uri "$a" "$kind")"
        assert_same data.raw "$img" "$what: mirror-tool convert into"
        rm -f out.raw
        expect_ok $TMO "$T" convert "$(our_uri "$a" "$kind")" out.raw
        assert_same data.raw out.raw "$what: mirror-tool convert out of"
        ok "$what: mirror-tool convert into and out of nbds URIs"
        expect_ok $TMO "$T" info "$(our_uri "$a" "$kind")"
        grep -q '^    tls: yes' "$last_out" || fail "$what: info says no TLS"
        cp "$last_out" info.out
        expect_ok $TMO "$T" info --output=json "$(our_uri "$a" "$kind")"
        cp "$last_out" info.json
        expect_exit 63 $TMO "$T" check "$(our_uri "$a" "$kind")"
        if hit=$(tls_secret_in info.out info.json "$last_err"); then
            # docs/mirror-tool.md: "TLS user names are never printed".
            not_ok "$what: info and check show no secret" \
                "they print the URI as given: $hit"
        else
            ok "$what: info says tls: yes; info and check show no secret"
        fi

        # libnbd.
        lu=$(lnbd_uri "$a" "$kind")
        expect_ok $TMO nbdinfo --size "$lu"
        [ "$(cat "$last_out")" = "$SIZE" ] || fail "$what: nbdinfo --size"
        expect_ok $TMO nbdcopy base.raw "$lu"
        assert_same base.raw "$img" "$what: nbdcopy into"
        rm -f out.raw
        expect_ok $TMO nbdcopy "$lu" out.raw
        assert_same base.raw out.raw "$what: nbdcopy out of"
        ok "$what: nbdinfo, nbdcopy into and out of the export"

        # QEMU: qemu-img convert into, compare, qemu-io write; our read.
        skip_unless_qemu "$what: qemu-img convert and compare, qemu-io write, our read back" ||
            continue
        qemu_obj "$kind"
        qo=$(qemu_opts "$a")
        expect_ok $TMO qemu-img convert -n -f raw data.raw --object "$qobj" \
            --target-image-opts "$qo"
        assert_same data.raw "$img" "$what: qemu-img convert into"
        expect_ok $TMO qemu-img compare --object "$qobj" --image-opts \
            driver=file,filename=data.raw "$qo"
        # One 16 MiB request each way (many TLS records), then small ones.
        expect_ok $TMO qemu-io --object "$qobj" --image-opts \
            -c 'write -P 0x7a 0 16M' -c 'read -P 0x7a 0 16M' \
            -c 'write -s data.raw 0 16M' -c 'write -P 0x5c 1M 64k' \
            -c 'write -z 3M 1M' "$qo"
        grep -q 'Pattern verification failed' "$last_out" &&
            fail "$what: qemu-io read back the wrong data"
        cp data.raw want.raw
        expect_ok qemu-io -f raw -c 'write -P 0x5c 1M 64k' \
            -c 'write -z 3M 1M' want.raw
        rm -f out.raw
        expect_ok $TMO "$T" convert "$(our_uri "$a" "$kind")" out.raw
        assert_same want.raw out.raw "$what: qemu-io's writes read back"
        # ... and the comparison can fail.
        expect_exit 1 $TMO qemu-img compare --object "$qobj" --image-opts \
            driver=file,filename=data.raw "$qo"
        ok "$what: qemu-img convert and compare, qemu-io write, our read back"
    done
done

# --- --tls=on: TLS offered, not required --------------------------------------
serve_kind on psk "unix:$scratch/on.sock" --tls=on
expect_ok $TMO nbdinfo --size "nbd+unix:///?socket=$scratch/on.sock"
expect_ok $TMO nbdinfo --size "${good_uri[on]}"
expect_ok $TMO "$T" convert -n data.raw "$(our_uri "$addr" plain)"
assert_same data.raw img-on.raw "--tls=on: a plain client"
tls_stop on
ok "--tls=on: plain and TLS clients are both served"

# --- --tls-verify-peer=off: no client certificate needed ---------------------
serve_kind nv x509 "unix:$scratch/nv.sock" --tls-verify-peer=off
expect_ok $TMO nbdcopy data.raw "$(lnbd_uri "$addr" x509 "$TLS_CLI_NOCERT")"
assert_same data.raw img-nv.raw "--tls-verify-peer=off"
tls_stop nv
ok "--tls-verify-peer=off: a client without a certificate is served"

# raw_client MODE SOCKET: a client written byte by byte (NBD's newstyle
# handshake) that misbehaves as MODE says; exits 0 when the server did
# what it must:
#   silent   STARTTLS, then nothing: EOF (at the handshake limit)
#   hello    STARTTLS, then 5 bytes of a TLS record header and nothing:
#            EOF (the limit holds inside the TLS handshake too)
#   inject   STARTTLS and NBD_OPT_LIST in one write: EOF, before or after
#            the ACK, never a plaintext LIST reply (nbdkit's CVE-2021-3716)
#   plain    no STARTTLS: LIST and GO answered NBD_REP_ERR_TLS_REQD,
#            then EXPORT_NAME: EOF
# It prints the seconds until EOF; every wait on the server is at most
# 60 s (socket timeout).
raw_client()
{
    python3 - "$@" <<'PYEOF'
import socket, struct, sys, time
mode, path = sys.argv[1:3]
IHAVEOPT = 0x49484156454f5054
REPLY = 0x3e889045565a9
s = socket.socket(socket.AF_UNIX)
s.settimeout(60)
s.connect(path)
def read(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c, "EOF after %d of %d bytes" % (len(b), n)
        b += c
    return b
def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data
def reply(want_opt):
    magic, o, typ, ln = struct.unpack(">QIII", read(20))
    assert magic == REPLY and o == want_opt, (hex(magic), o)
    read(ln)
    return typ
def eof_after():
    t0 = time.monotonic()
    try:
        data = s.recv(1)
    except ConnectionResetError:
        data = b""
    assert data == b"", "the server sent %r instead of closing" % data
    return time.monotonic() - t0
magic, o, flags = struct.unpack(">QQH", read(18))
assert magic == 0x4e42444d41474943 and o == IHAVEOPT
s.sendall(struct.pack(">I", 3))                 # FIXED_NEWSTYLE|NO_ZEROES
if mode == "plain":
    s.sendall(opt(3))                           # LIST
    typ = reply(3)
    assert typ == 0x80000005, hex(typ)          # NBD_REP_ERR_TLS_REQD
    s.sendall(opt(7, struct.pack(">IH", 0, 0)))  # GO ""
    typ = reply(7)
    assert typ == 0x80000005, hex(typ)
    s.sendall(opt(1))                           # EXPORT_NAME ""
elif mode == "inject":
    s.sendall(opt(5) + opt(3))                  # STARTTLS + LIST at once
    t0 = time.monotonic()
    got = b""
    while True:
        try:
            c = s.recv(4096)
        except ConnectionResetError:
            c = b""
        if not c:
            break
        got += c
    ack = struct.pack(">QIII", REPLY, 5, 1, 0)  # NBD_REP_ACK to STARTTLS
    assert got in (b"", ack), "the server answered %r" % got
    print("%.1f" % (time.monotonic() - t0))
    sys.exit(0)
else:
    s.sendall(opt(5))
    assert reply(5) == 1
    if mode == "hello":
        s.sendall(bytes([0x16, 3, 1, 2, 0]))    # a 512-byte ClientHello's header
print("%.1f" % eof_after())
PYEOF
}

# The default handshake limit (10 s): a client silent after STARTTLS, in
# the background while the cases below run.
raw_client silent "$scratch/pskunix.sock" >default-limit.out 2>&1 &
dl_pid=$!
track_pid $dl_pid

# --- a CRL: a revoked certificate of the right CA ---------------------------
if skip_unless_ours "ca-crl.pem: a revoked client certificate is refused"; then
    cp base.raw img-crl.raw
    img_crl=img-crl.raw
    tls_serve crl "unix:$scratch/crl.sock" img-crl.raw --tls-creds "$TLS_SRV_CRL"
    good_uri[crl]=$(lnbd_uri "$addr" x509)
    refused "a revoked client certificate" crl \
        $TMO nbdcopy data.raw "$(lnbd_uri "$addr" x509 "$TLS_CLI_OTHER")"
    tls_stop crl
    ok "ca-crl.pem: a revoked client certificate is refused"
fi

# --- refused ------------------------------------------------------------------
pa=unix:$scratch/pskunix.sock
xa=unix:$scratch/x509unix.sock
refused "wrong PSK key (libnbd)" pskunix \
    $TMO nbdcopy data.raw "$(lnbd_uri "$pa" psk "$TLS_PSK_WRONG")"
refused "wrong PSK key (mirror-tool)" pskunix \
    $TMO "$T" convert -n data.raw "$(our_uri "$pa" psk "$TLS_PSK_WRONG")"
if have_qemu; then
    qemu_obj psk "$TLS_PSK_WRONG_DIR"
    refused "wrong PSK key (qemu-io)" pskunix \
        $TMO qemu-io --object "$qobj" --image-opts -c 'write 0 64k' \
        "$(qemu_opts "$pa")"
fi
ok "a wrong PSK key is refused"

refused "unknown PSK user (libnbd)" pskunix \
    $TMO nbdcopy data.raw \
    "$(lnbd_uri "$pa" psk "$TLS_PSK_UNKNOWN" "$TLS_PSK_UNKNOWN_USER")"
refused "unknown PSK user (mirror-tool)" pskunix \
    $TMO "$T" convert -n data.raw \
    "$(our_uri "$pa" psk "$TLS_PSK_UNKNOWN" "$TLS_PSK_UNKNOWN_USER")"
ok "an unknown PSK user is refused"

for c in wrongca:"$TLS_CLI_WRONGCA" expired:"$TLS_CLI_EXPIRED" \
    nocert:"$TLS_CLI_NOCERT"; do
    refused "client certificate: ${c%%:*} (libnbd)" x509unix \
        $TMO nbdcopy data.raw "$(lnbd_uri "$xa" x509 "${c#*:}")"
    refused "client certificate: ${c%%:*} (mirror-tool)" x509unix \
        $TMO "$T" convert -n data.raw "$(our_uri "$xa" x509 "${c#*:}")"
    have_qemu || continue
    qemu_obj x509 "${c#*:}"
    refused "client certificate: ${c%%:*} (qemu-io)" x509unix \
        $TMO qemu-io --object "$qobj" --image-opts -c 'write 0 64k' \
        "$(qemu_opts "$xa")"
done
ok "client certificates of another CA, expired, or none are refused"

refused "a plain client to a TLS server (libnbd)" pskunix \
    --says "requires TLS" \
    $TMO nbdcopy data.raw "nbd+unix:///?socket=${pa#unix:}"
refused "a plain client to a TLS server (mirror-tool)" x509unix \
    --says "requires TLS" \
    $TMO "$T" convert -n data.raw "nbd+unix:///?socket=${xa#unix:}"
if have_qemu; then
    refused "a plain client to a TLS server (qemu-io)" pskunix \
        $TMO qemu-io -f raw -c 'write 0 64k' "nbd+unix:///?socket=${pa#unix:}"
fi
ok "plain clients to a TLS server are told TLS is required"

# A TLS client to a plain server: our serve without TLS (on main already).
cp base.raw img-plain.raw
img_plain=img-plain.raw
"$T" serve "unix:$scratch/plain.sock" img-plain.raw >plain.out \
    2>plain.err &
pid_plain=$!
track_pid $pid_plain
wait_for 20 "the plain server to listen" grep -q '^serving on ' plain.out
good_uri[plain]="nbd+unix:///?socket=$scratch/plain.sock"
refused "a TLS client to a plain server (libnbd)" plain \
    $TMO nbdcopy data.raw "$(lnbd_uri "unix:$scratch/plain.sock" psk)"
refused "a TLS client to a plain server (mirror-tool)" plain \
    $TMO "$T" convert -n data.raw \
    "$(our_uri "unix:$scratch/plain.sock" x509)"
kill -TERM $pid_plain
wait $pid_plain
untrack_pid $pid_plain
ok "TLS clients to a plain server give up"

# --tls-authz: an X.509 DN taken whole; a list of PSK user names.
if skip_unless_ours "--tls-authz with X.509: another DN of the same CA is refused"; then
    serve_kind az x509 "unix:$scratch/az.sock" --tls-authz "$TLS_CLI_DN"
    refused "X.509 DN not in --tls-authz (libnbd)" az \
        $TMO nbdcopy data.raw "$(lnbd_uri "$addr" x509 "$TLS_CLI_OTHER")"
    refused "X.509 DN not in --tls-authz (mirror-tool)" az \
        $TMO "$T" convert -n data.raw \
        "$(our_uri "$addr" x509 "$TLS_CLI_OTHER")"
    expect_ok $TMO nbdcopy data.raw "$(lnbd_uri "$addr" x509)"
    assert_same data.raw img-az.raw "--tls-authz: the DN in the list"
    tls_stop az
    ok "--tls-authz with X.509: another DN of the same CA is refused"
fi
if skip_unless_ours "--tls-authz with PSK: a user of the file not in the list is refused"; then
    cp base.raw img-azp.raw
    img_azp=img-azp.raw
    tls_serve azp "unix:$scratch/azp.sock" img-azp.raw \
        --tls-psk-file "$TLS_PSK_TWO" --tls-authz "$U"
    good_uri[azp]=$(lnbd_uri "$addr" psk)
    refused "PSK user not in --tls-authz (libnbd)" azp \
        $TMO nbdcopy data.raw \
        "$(lnbd_uri "$addr" psk "$TLS_PSK2" "$TLS_PSK_USER2")"
    refused "PSK user not in --tls-authz (mirror-tool)" azp \
        $TMO "$T" convert -n data.raw \
        "$(our_uri "$addr" psk "$TLS_PSK2" "$TLS_PSK_USER2")"
    expect_ok $TMO nbdcopy data.raw "${good_uri[azp]}"
    assert_same data.raw img-azp.raw "--tls-authz: the PSK user in the list"
    tls_stop azp
    ok "--tls-authz with PSK: a user of the file not in the list is refused"
fi

# A client that stops in the handshake: dropped at the handshake limit
# (the connection sees EOF), the server goes on.
if skip_unless_ours "clients that stop after STARTTLS or in the TLS handshake are dropped at --handshake-limit"; then
    serve_kind hs psk "unix:$scratch/hs.sock" --handshake-limit 1
    for mode in silent hello; do
        expect_ok raw_client $mode "$scratch/hs.sock"
        dt=$(cat "$last_out")
        # Not before the limit, and not much after it (a busy machine).
        awk -v t="$dt" 'BEGIN { exit !(t >= 0.5 && t < 25) }' ||
            fail "$mode: dropped after $dt s with --handshake-limit 1"
        good hs
    done
    tls_no_secrets "handshake limit" hs.out hs.err
    tls_stop hs
    ok "clients that stop after STARTTLS or in the TLS handshake are dropped at --handshake-limit"
fi

# STARTTLS with more options behind it in the same write, and options
# without STARTTLS: refused at once, long before the (60 s) limit.
if skip_unless_ours "options before or pipelined with STARTTLS: TLS_REQD or dropped"; then
    serve_kind inj psk "unix:$scratch/inj.sock" --handshake-limit 60
    for mode in inject plain; do
        expect_ok raw_client $mode "$scratch/inj.sock"
        dt=$(cat "$last_out")
        awk -v t="$dt" 'BEGIN { exit !(t < 30) }' ||
            fail "$mode: the server waited $dt s to drop the client"
        good inj
    done
    tls_stop inj
    ok "options before or pipelined with STARTTLS: TLS_REQD or dropped"
fi

# Inside TLS (Python's ssl, X.509; until the READs, its ciphertext sent
# one byte per send() to the server's record reader): a second STARTTLS
# is refused, LIST and GO work, a READ is answered; then 16 READs of 16 MiB that the
# client never reads: the server, stuck in TLS record sends, drops it at
# --reply-timeout (its socket count falls back to the listener's), and
# serves others.
if skip_unless_ours "inside TLS: STARTTLS again refused; a client that reads no replies is dropped at --reply-timeout"; then
    serve_kind rt x509 "unix:$scratch/rt.sock" --reply-timeout 2
    expect_ok $TMO python3 - "$scratch/rt.sock" "$TLS_CLI" "$pid_rt" <<'PYEOF'
import os, socket, ssl, struct, sys, time
path, cdir, pid = sys.argv[1:4]
IHAVEOPT = 0x49484156454f5054
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
s.connect(path)
def rawread(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c, "EOF"
        b += c
    return b
def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data
rawread(18)
s.sendall(struct.pack(">I", 3) + opt(5))
assert struct.unpack(">QIII", rawread(20))[2] == 1
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.load_verify_locations(cdir + "/ca-cert.pem")
ctx.load_cert_chain(cdir + "/client-cert.pem", cdir + "/client-key.pem")
inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
t = ctx.wrap_bio(inc, out, server_hostname="localhost")
drip = True
def flush():
    data = out.read()
    if not drip:
        s.sendall(data)
    for i in range(len(data) if drip else 0):   # one byte at a time
        s.sendall(data[i:i + 1])
def fill():
    c = s.recv(65536)
    assert c, "EOF inside TLS"
    inc.write(c)
while True:
    try:
        t.do_handshake()
        flush()
        break
    except ssl.SSLWantReadError:
        flush()
        fill()
def send(b):
    t.write(b)
    flush()
def recv(n):
    b = b""
    while len(b) < n:
        try:
            b += t.read(n - len(b))
        except ssl.SSLWantReadError:
            fill()
    return b
def reply(want):
    _, o, typ, ln = struct.unpack(">QIII", recv(20))
    assert o == want, o
    recv(ln)
    return typ
send(opt(5))
typ = reply(5)
assert typ & 0x80000000, "a second STARTTLS got %#x" % typ
send(opt(3))
while reply(3) != 1:
    pass
send(opt(7, struct.pack(">IH", 0, 0)))
while reply(7) != 1:
    pass
send(struct.pack(">IHHQQI", 0x25609513, 0, 0, 1, 0, 4096))
magic, err, cookie = struct.unpack(">IIQ", recv(16))
assert (magic, err, cookie) == (0x67446698, 0, 1), (hex(magic), err, cookie)
recv(4096)
def sockets():
    n = 0
    for fd in os.listdir("/proc/%s/fd" % pid):
        try:
            n += os.readlink("/proc/%s/fd/%s" % (pid, fd)).startswith("socket:")
        except OSError:
            pass
    return n
before = sockets()
# In one write: the server stops reading once the replies it holds reach
# its share of the budget, and one-byte sends would fill our socket's
# send buffer (each costs a whole buffer) and block us.
drip = False
send(b"".join(struct.pack(">IHHQQI", 0x25609513, 0, 0, 100 + i, 0, 16 << 20)
              for i in range(16)))
t0 = time.monotonic()
while sockets() >= before:
    assert time.monotonic() - t0 < 40, "still connected after 40 s"
    time.sleep(0.05)
print("dropped after %.1f s" % (time.monotonic() - t0))
PYEOF
    good rt
    tls_stop rt
    ok "inside TLS: STARTTLS again refused; a client that reads no replies is dropped at --reply-timeout"
fi

wait $dl_pid || fail "the default handshake limit: $(cat default-limit.out)"
untrack_pid $dl_pid
dt=$(cat default-limit.out)
awk -v t="$dt" 'BEGIN { exit !(t >= 9 && t < 40) }' ||
    fail "a silent client was dropped after $dt s; the default limit is 10 s"
ok "the default handshake limit, 10 s, holds with TLS"

tls_stop pskunix
tls_stop psktcp
tls_stop x509unix
tls_stop x509tcp
tls_no_secrets "the servers' logs" ./*.out ./*.err
ok "the servers exit 0 on SIGTERM; no secret in any log"

# --- bad usage: exit 2, one line, nothing opened ------------------------------
if skip_unless_ours "bad TLS options exit 2 with nothing opened"; then
    mkdir nokey mismatch
    cp "$TLS_SRV/ca-cert.pem" "$TLS_SRV/server-cert.pem" nokey/
    cp "$TLS_SRV/ca-cert.pem" "$TLS_SRV/server-cert.pem" mismatch/
    cp "$TLS_CLI/client-key.pem" mismatch/server-key.pem
    printf '%s\n' "$U" >nocolon.psk
    printf '%s:%s\n' "$U" 0123456789abcdefg >badhex.psk
    cp base.raw bad.raw
    remember_sum bad.raw
    for bad in "--tls-creds $scratch/missing-dir:$scratch/missing-dir" \
        "--tls-creds $scratch/nokey:$scratch/nokey" \
        "--tls-creds $scratch/mismatch:$scratch/mismatch" \
        "--tls-psk-file $scratch/nocolon.psk:$scratch/nocolon.psk" \
        "--tls-psk-file $scratch/badhex.psk:$scratch/badhex.psk" \
        "--tls-psk-file $scratch/missing.psk:$scratch/missing.psk" \
        "--tls=require:--tls" \
        "--tls-creds $TLS_SRV --tls-psk-file $TLS_PSK:--tls-psk-file" \
        "--tls-psk-file $TLS_PSK --tls=maybe:maybe" \
        "--tls-creds $TLS_SRV --tls-verify-peer=maybe:maybe" \
        "--tls-authz $TLS_CLI_DN:--tls-authz"; do
        expect_exit 2 "$T" serve ${bad%%:*} "unix:$scratch/bad.sock" bad.raw
        stderr_has "${bad#*:}"
        stderr_one_line
        stdout_empty
        assert_absent bad.sock "serve ${bad%%:*}"
        tls_no_secrets "serve ${bad%%:*}" "$last_out" "$last_err"
        grep -q -e 0123456789abcdefg "$last_err" &&
            fail "serve ${bad%%:*}: the malformed key was shown"
    done
    assert_unchanged bad.raw
    ok "bad TLS options exit 2 with nothing opened"

    truncate -s 16M st-tgt.raw
    remember_sum st-tgt.raw
    for opt in "--export-tls-psk-file $TLS_PSK" "--export-tls-creds $TLS_SRV" \
        "--export-tls=require" "--export-tls-authz $U" \
        "--export-tls-verify-peer=off"; do
        expect_exit 2 "$T" start $opt bad.raw st-tgt.raw
        stderr_has "${opt%%[ =]*} needs --export ADDR"
        stderr_one_line
        tls_no_secrets "start $opt" "$last_out" "$last_err"
    done
    expect_exit 2 "$T" start --export "unix:$scratch/bad.sock" \
        --export-tls-creds "$scratch/nokey" bad.raw st-tgt.raw
    stderr_has "$scratch/nokey"
    stderr_one_line
    assert_absent bad.sock "start --export-tls-creds without a key"
    assert_unchanged st-tgt.raw
    ok "start: --export-tls-* without --export or with bad creds exit 2"
fi

# --- an address other hosts reach: TLS is what it takes ----------------------
if skip_unless_ours "tcp:0.0.0.0: refused without TLS (or with --tls=on) unless --insecure, served with --tls-psk-file"; then
    cp base.raw img-any.raw
    expect_exit 2 "$T" serve tcp:0.0.0.0:0 img-any.raw
    stderr_has "'tcp:0.0.0.0:0' can be reached from other hosts"
    stderr_one_line
    # --tls=on serves plain clients too: as good as no TLS there.
    expect_exit 2 "$T" serve --tls=on --tls-psk-file "$TLS_PSK" \
        tcp:0.0.0.0:0 img-any.raw
    stderr_has "'tcp:0.0.0.0:0' can be reached from other hosts" "--insecure"
    stderr_one_line
    truncate -s 16M any-tgt.raw
    remember_sum any-tgt.raw
    expect_exit 2 "$T" start --export tcp:0.0.0.0:0 --export-tls=on \
        --export-tls-psk-file "$TLS_PSK" img-any.raw any-tgt.raw
    stderr_has "'tcp:0.0.0.0:0' can be reached from other hosts" \
        "--export-insecure"
    stderr_one_line
    assert_unchanged any-tgt.raw
    img_any=img-any.raw
    tls_serve any tcp:0.0.0.0:0 img-any.raw --tls-psk-file "$TLS_PSK"
    good_uri[any]=$(lnbd_uri "tcp:127.0.0.1:${addr##*:}" psk)
    expect_ok $TMO "$T" convert -n data.raw \
        "$(our_uri "tcp:127.0.0.1:${addr##*:}" psk)"
    assert_same data.raw img-any.raw "serve tcp:0.0.0.0 with PSK"
    refused "a plain client to tcp:0.0.0.0 with PSK" any \
        $TMO nbdinfo --size "nbd://127.0.0.1:${addr##*:}/"
    tls_stop any
    ok "tcp:0.0.0.0: refused without TLS (or with --tls=on) unless --insecure, served with --tls-psk-file"
fi

# --- start --export with PSK: a guest writes through the TLS export ----------
what="start --export-tls-psk-file: a guest writes through TLS while the job runs"
if skip_unless_ours "$what" && skip_unless_qemu "$what"; then
    cp base.raw st-src.raw
    truncate -s 0 st-tgt.raw
    truncate -s 16M st-tgt.raw
    "$T" start --json --qmp "$scratch/st.qmp" --qmp-wait \
        --export "unix:$scratch/st.nbd" --export-tls-psk-file "$TLS_PSK" \
        st-src.raw st-tgt.raw >st.out 2>st.err &
    st_pid=$!
    track_pid $st_pid
    wait_for 20 "start to listen" test -S "$scratch/st.qmp"
    timeout 90 "$T" qmp --wait-event BLOCK_JOB_READY --timeout 80 \
        "$scratch/st.qmp" query-jobs >st.ready 2>st.ready.err &
    ready_pid=$!
    track_pid $ready_pid
    wait_for 20 "the job to start" grep -qs '"status":"running"' st.ready
    ea=unix:$scratch/st.nbd
    qemu_obj psk
    expect_ok $TMO qemu-io --object "$qobj" --image-opts \
        -c 'write -P 0x3e 64k 192k' -c 'write -P 0x3f 9M 1M' \
        "$(qemu_opts "$ea")"
    expect_ok $TMO nbdcopy --flush data.raw \
        "$(lnbd_uri "$ea" psk)"
    run $TMO nbdinfo --size "nbd+unix:///?socket=$scratch/st.nbd"
    [ "$last_rc" != 0 ] || fail "a plain client reached the TLS export"
    stderr_has "requires TLS"
    run $TMO nbdcopy base.raw "$(lnbd_uri "$ea" psk "$TLS_PSK_WRONG")"
    [ "$last_rc" != 0 ] || fail "a wrong PSK key reached the TLS export"
    tls_no_secrets "the export: a wrong key" --keys "$last_out" "$last_err"
    expect_ok $TMO qemu-io --object "$qobj" --image-opts \
        -c 'write -P 0x41 4M 64k' "$(qemu_opts "$ea")"
    wait "$ready_pid" || fail "no BLOCK_JOB_READY: $(cat st.ready.err)"
    untrack_pid $ready_pid
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 50 \
        "$scratch/st.qmp" block-job-complete '{"device": "mirror"}'
    grep -q '"error"' "$last_out" && fail "the job completed with an error"
    expect_ok $TMO "$T" qmp "$scratch/st.qmp" quit
    wait_for 20 "start to exit" _tls_gone $st_pid
    wait $st_pid || fail "start exited $?: $(cat st.err)"
    untrack_pid $st_pid
    cp data.raw want.raw
    expect_ok qemu-io -f raw -c 'write -P 0x41 4M 64k' want.raw
    assert_same want.raw st-tgt.raw "the target after the guest's writes"
    assert_same want.raw st-src.raw "the source after the guest's writes"
    tls_no_secrets "start --export-tls-psk-file" st.out st.err
    ok "$what"
fi
