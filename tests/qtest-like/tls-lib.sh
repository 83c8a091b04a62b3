# Credentials for the TLS tests (test-tool-tls.sh, test-tool-twohost.sh).
#
# Sourced after lib.sh.  tls_make_creds makes, with certtool and psktool
# (gnutls-bin), one set of credentials per test run under $scratch/tls:
#
#   $TLS_SRV        the server's X.509 directory, qemu-nbd's and nbdkit's
#                   layout: ca-cert.pem, server-cert.pem, server-key.pem;
#                   the certificate names localhost, 127.0.0.1, ::1 and the
#                   addresses in $TLS_SERVER_IPS
#   $TLS_SRV_CRL    the same and ca-crl.pem, which revokes $TLS_CLI_OTHER's
#                   certificate
#   $TLS_CLI        a client's directory, libnbd's and QEMU's layout:
#                   ca-cert.pem, client-cert.pem, client-key.pem; subject
#                   $TLS_CLI_DN
#   $TLS_CLI_OTHER  another good client of the same CA (CN=other,O=Example)
#   $TLS_CLI_WRONGCA a client certificate from a second CA (the server's
#                   CA certificate beside it, so that the server verifies)
#   $TLS_CLI_EXPIRED a client certificate of the right CA that expired
#   $TLS_CLI_NOCERT only ca-cert.pem: no client certificate
#   $TLS_PSK        nbdkit's PSK file (username:hexkey) for $TLS_PSK_USER;
#                   $TLS_PSK_DIR has the same as keys.psk (QEMU's layout)
#   $TLS_PSK_WRONG  $TLS_PSK_USER with another key (and _DIR)
#   $TLS_PSK_UNKNOWN a user the server does not know (and _DIR)
#   $TLS_PSK_TWO    the server's file with $TLS_PSK_USER and $TLS_PSK_USER2;
#                   $TLS_PSK2 (and _DIR) is $TLS_PSK_USER2's client file
#   $TLS_SECRETS    a file of the strings no message of ours may show:
#                   every PSK key and user name, and each line of every
#                   private key
#   $TLS_KEYS       the same without the user names: what no message of
#                   anyone may show (libnbd's tools print the URI they
#                   were given, user name and all)
#
# Keys are ECDSA P-256: quick to make, and every peer (GnuTLS in QEMU,
# libnbd, nbdkit) takes them.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# Addresses the server certificate names besides loopback; set before
# tls_make_creds (test-tool-twohost.sh adds its namespace addresses).
: "${TLS_SERVER_IPS:=10.219.0.1 10.219.0.2}"

TLS_CLI_DN="CN=client,O=Example"
TLS_CLI_OTHER_DN="CN=other,O=Example"
TLS_PSK_USER=qm-psk-user-a9f3
TLS_PSK_USER2=qm-psk-user-b7e1
TLS_PSK_UNKNOWN_USER=qm-psk-user-c5d2

# _tls_key FILE: a new private key.
_tls_key()
{
    certtool --generate-privkey --key-type=ecdsa --curve=secp256r1 \
        --no-text --outfile "$1" >/dev/null 2>&1 ||
        fail "certtool: cannot make the key $1"
}

# _tls_ca NAME CN: a self-signed CA, NAME-cert.pem and NAME-key.pem.
_tls_ca()
{
    _tls_key "$1-key.pem"
    cat >"$1.info" <<EOF
cn = "$2"
ca
cert_signing_key
expiration_days = 30
EOF
    certtool --generate-self-signed --load-privkey "$1-key.pem" \
        --template "$1.info" --no-text --outfile "$1-cert.pem" \
        >/dev/null 2>&1 || fail "certtool: cannot make the CA $1"
}

# _tls_cert CA OUT TEMPLATE-TEXT: a certificate signed by CA (a _tls_ca
# name), OUT-cert.pem and OUT-key.pem.
_tls_cert()
{
    _tls_key "$2-key.pem"
    printf '%s\n' "$3" >"$2.info"
    certtool --generate-certificate --load-privkey "$2-key.pem" \
        --load-ca-certificate "$1-cert.pem" \
        --load-ca-privkey "$1-key.pem" --template "$2.info" --no-text \
        --outfile "$2-cert.pem" >/dev/null 2>&1 ||
        fail "certtool: cannot make the certificate $2"
}

# _tls_client_dir DIR CA CERT: a client directory for libnbd and QEMU
# trusting CA (a _tls_ca name) with the certificate CERT (a _tls_cert
# name, or empty: none).
_tls_client_dir()
{
    mkdir -p "$1"
    cp "$2-cert.pem" "$1/ca-cert.pem"
    if [ -n "$3" ]; then
        cp "$3-cert.pem" "$1/client-cert.pem"
        cp "$3-key.pem" "$1/client-key.pem"
    fi
}

# _tls_psk NAME USER: a PSK file NAME.psk for USER, and NAME.dir/keys.psk.
_tls_psk()
{
    psktool -u "$2" -p "$1.psk" >/dev/null 2>&1 ||
        fail "psktool: cannot make $1.psk"
    mkdir -p "$1.dir"
    cp "$1.psk" "$1.dir/keys.psk"
}

# tls_make_creds: make the credentials described above (once per run).
tls_make_creds()
{
    local ip sans="" f
    [ -n "${TLS_SRV:-}" ] && return 0
    mkdir -p "$scratch/tls" && cd "$scratch/tls" || fail "mkdir tls"
    _tls_ca ca "qemu-mirror test CA"
    _tls_ca ca2 "another CA"
    for ip in 127.0.0.1 ::1 $TLS_SERVER_IPS; do
        sans="${sans}ip_address = \"$ip\""$'\n'
    done
    _tls_cert ca server "cn = \"localhost\"
organization = \"Example\"
dns_name = \"localhost\"
${sans}tls_www_server
encryption_key
signing_key
expiration_days = 30"
    _tls_cert ca client "cn = \"client\"
organization = \"Example\"
tls_www_client
encryption_key
signing_key
expiration_days = 30"
    _tls_cert ca other "cn = \"other\"
organization = \"Example\"
tls_www_client
encryption_key
signing_key
expiration_days = 30"
    _tls_cert ca2 wrongca "cn = \"client\"
organization = \"Example\"
tls_www_client
encryption_key
signing_key
expiration_days = 30"
    _tls_cert ca expired "cn = \"client\"
organization = \"Example\"
tls_www_client
encryption_key
signing_key
activation_date = \"2020-01-01 00:00:00 UTC\"
expiration_date = \"2020-02-01 00:00:00 UTC\""

    mkdir -p srv
    cp ca-cert.pem srv/ca-cert.pem
    cp server-cert.pem srv/server-cert.pem
    cp server-key.pem srv/server-key.pem
    TLS_SRV=$scratch/tls/srv
    # The same with a CRL revoking "other".
    printf 'crl_next_update = 30\ncrl_number = 1\n' >crl.info
    mkdir -p srv-crl
    cp srv/* srv-crl/
    certtool --generate-crl --load-ca-privkey ca-key.pem \
        --load-ca-certificate ca-cert.pem --load-certificate other-cert.pem \
        --template crl.info --no-text --outfile srv-crl/ca-crl.pem \
        >/dev/null 2>&1 || fail "certtool: cannot make the CRL"
    TLS_SRV_CRL=$scratch/tls/srv-crl
    _tls_client_dir cli ca client
    _tls_client_dir cli-other ca other
    _tls_client_dir cli-wrongca ca wrongca
    _tls_client_dir cli-expired ca expired
    _tls_client_dir cli-nocert ca ""
    TLS_CLI=$scratch/tls/cli
    TLS_CLI_OTHER=$scratch/tls/cli-other
    TLS_CLI_WRONGCA=$scratch/tls/cli-wrongca
    TLS_CLI_EXPIRED=$scratch/tls/cli-expired
    TLS_CLI_NOCERT=$scratch/tls/cli-nocert

    _tls_psk psk "$TLS_PSK_USER"
    _tls_psk psk-wrong "$TLS_PSK_USER"
    _tls_psk psk-unknown "$TLS_PSK_UNKNOWN_USER"
    _tls_psk psk2 "$TLS_PSK_USER2"
    cat psk.psk psk2.psk >psk-two.psk
    TLS_PSK=$scratch/tls/psk.psk
    TLS_PSK_DIR=$scratch/tls/psk.dir
    TLS_PSK_WRONG=$scratch/tls/psk-wrong.psk
    TLS_PSK_WRONG_DIR=$scratch/tls/psk-wrong.dir
    TLS_PSK_UNKNOWN=$scratch/tls/psk-unknown.psk
    TLS_PSK_UNKNOWN_DIR=$scratch/tls/psk-unknown.dir
    TLS_PSK2=$scratch/tls/psk2.psk
    TLS_PSK2_DIR=$scratch/tls/psk2.dir
    TLS_PSK_TWO=$scratch/tls/psk-two.psk

    # The secrets: user names, hex keys, and every private key line long
    # enough not to match by chance.
    TLS_KEYS=$scratch/tls/keys
    TLS_SECRETS=$scratch/tls/secrets
    {
        cut -d: -f2 psk-two.psk psk-wrong.psk psk-unknown.psk
        for f in *-key.pem; do
            grep -v -e '^-----' "$f" | awk 'length($0) >= 16'
        done
    } | sort -u >"$TLS_KEYS"
    cut -d: -f1 psk-two.psk psk-unknown.psk | cat - "$TLS_KEYS" |
        sort -u >"$TLS_SECRETS"
    cd "$scratch" || fail "cd $scratch"
}

# tls_secret_in [--keys] FILE...: the first secret (with --keys: key)
# found in the FILEs, on stdout; fails when there is none.
tls_secret_in()
{
    local f hit list=$TLS_SECRETS
    if [ "$1" = --keys ]; then
        list=$TLS_KEYS
        shift
    fi
    for f in "$@"; do
        [ -e "$f" ] || continue
        hit=$(grep -F -o -f "$list" "$f" | head -1)
        if [ -n "$hit" ]; then
            echo "'$f' shows '$hit'"
            return 0
        fi
    done
    return 1
}

# tls_no_secrets WHAT [--keys] FILE...: none of the secrets (keys) appears
# in the FILEs (a server's log, a client's stdout and stderr).
tls_no_secrets()
{
    local what=$1 hit
    shift
    if hit=$(tls_secret_in "$@"); then
        fail "$what: a secret: $hit"
    fi
}

# tls_psk_uri BASE PSKFILE USER: BASE (nbds://... or nbds+unix://...,
# with or without a query) with the PSK file and user name added.
tls_psk_uri()
{
    case $1 in
        *\?*) echo "$1&tls-psk-file=$2&tls-username=$3" ;;
        *) echo "$1?tls-psk-file=$2&tls-username=$3" ;;
    esac
}

# tls_x509_uri BASE DIR: BASE with the certificate directory added.
tls_x509_uri()
{
    case $1 in
        *\?*) echo "$1&tls-certificates=$2" ;;
        *) echo "$1?tls-certificates=$2" ;;
    esac
}

# The TLS server under test: "mirror-tool" (`mirror-tool serve`) or
# "nbdkit" (its file plugin, with the options translated; nbdkit has no
# --tls-authz and no --handshake-limit, and refuses no bad usage of ours).
TLS_SERVER=mirror-tool

# tls_server_is_ours: the server under test is mirror-tool serve.
tls_server_is_ours()
{
    [ "$TLS_SERVER" = mirror-tool ]
}

# _tls_free_port: a TCP port on 127.0.0.1 that nothing listens on now.
_tls_free_port()
{
    python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# tls_serve NAME [--netns NS] ADDR IMG [OPTION...]: the server under test
# serving IMG on ADDR (unix:PATH or tcp:HOST:PORT) with OPTIONs in
# `mirror-tool serve`'s syntax, in network namespace NS if given, in the
# background; returns once it listens.  NAME (letters, digits, _) names
# pid_NAME, which it sets, and its stdout and stderr, NAME.out and
# NAME.err; sets addr (ADDR with the real port).
tls_serve()
{
    local name=$1 pre=() a img pid opt tls="" verify=1 args=() port
    shift
    if [ "$1" = --netns ]; then
        pre=(ip netns exec "$2")
        shift 2
    fi
    a=$1 img=$2
    shift 2
    rm -f "$name.out" "$name.err" "$name.pid"
    if tls_server_is_ours; then
        "${pre[@]}" "$T" serve "$@" "$a" "$img" >"$name.out" \
            2>"$name.err" &
        pid=$!
        track_pid "$pid"
        eval "pid_$name=$pid"
        wait_for 20 "mirror-tool serve ($name) to listen" \
            grep -q '^serving on ' "$name.out"
        addr=$(sed -n 's/^serving on //p' "$name.out")
        return 0
    fi
    while [ $# -gt 0 ]; do
        opt=$1
        shift
        case $opt in
            --tls-creds|--tls-psk-file|--tls)
                [ $# -gt 0 ] || fail "tls_serve: $opt needs a value"
                opt=$opt=$1
                shift
                ;;
        esac
        case $opt in
            --tls-creds=*) args+=(--tls-certificates="${opt#*=}") ;;
            --tls-psk-file=*) args+=(--tls-psk="${opt#*=}") ;;
            --tls=*) tls=${opt#*=} ;;
            --tls-verify-peer=off) verify=0 ;;
            --insecure) ;;
            *) fail "tls_serve: nbdkit cannot do '$opt'" ;;
        esac
    done
    case " ${args[*]} " in
        *" --tls-certificates="*)
            [ $verify = 1 ] && args+=(--tls-verify-peer) ;;
    esac
    [ ${#args[@]} -gt 0 ] && args+=(--tls="${tls:-require}")
    case $a in
        unix:*) args+=(-U "${a#unix:}") ;;
        tcp:*)
            port=${a##*:}
            [ "$port" = 0 ] && port=$(_tls_free_port)
            a=${a%:*}
            args+=(-i "${a#tcp:}" -p "$port")
            a=$a:$port
            ;;
    esac
    "${pre[@]}" nbdkit -f -P "$scratch/$name.pid" "${args[@]}" file \
        file="$img" >"$name.out" 2>"$name.err" &
    pid=$!
    track_pid "$pid"
    eval "pid_$name=$pid"
    wait_for 20 "nbdkit ($name) to listen" test -s "$name.pid"
    addr=$a
}

_tls_gone()
{
    ! kill -0 "$1" 2>/dev/null
}

# tls_stop NAME: SIGTERM the server; it exits 0 within 20 s (having
# flushed what clients wrote).
tls_stop()
{
    local pid rc
    eval "pid=\$pid_$1"
    kill -TERM "$pid" 2>/dev/null || fail "$1: no server to stop"
    wait_for 20 "$1 to exit on SIGTERM" _tls_gone "$pid"
    wait "$pid"
    rc=$?
    untrack_pid "$pid"
    [ "$rc" = 0 ] || fail "$1: the server exited $rc on SIGTERM: $(cat "$1.err")"
}
