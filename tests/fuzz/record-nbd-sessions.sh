#!/bin/bash
# Record the real-session seeds of fuzz-nbd-server (tests/fuzz/corpus-nbd/):
# `mirror-tool serve` exports a 4 MiB image as "exp" (the fuzz target's
# export: same name and size), writable and, on a second socket, read-only
# (-r); record-nbd-proxy.py sits between real clients (nbdinfo, nbdcopy,
# qemu-io, qemu-img, mirror-tool) and each server, and every client
# connection becomes one file named after the client run that made it.
# A file is fuzz-nbd-server's two framing bytes (export 0 writable or
# 1 read-only; no read splitting) and then what the client sent, cut after
# LIMIT bytes (8 KiB): I/O is kept to a few small requests so that the
# fuzzer runs many inputs a second.  Copies to the export are of a sparse
# image with one 4 KiB data block, 512 bytes of it not zero.  A connection
# that sent nothing, or exactly what an earlier one sent, is not kept.
# Files are replaced, other files of OUTDIR are left.  QEMU's cookies are
# made from addresses: its files change at every recording.
#
# TLS: a third server requires TLS with the fuzz target's PSK (user
# "fuzz"); its clients' files (tls-*) are the plaintext handshake,
# NBD_OPT_STARTTLS and a real client hello, which the target sends 20
# bytes at a time (so that the hello comes after the STARTTLS reply, not
# as plaintext trailing it) to its own server with that PSK, which
# requires TLS.  And a few plain sessions become tls-client-* and
# tls-x509-client-* files: NBD_OPT_STARTTLS inserted after the client
# flags, as libnbd and QEMU send it, with the framing byte that has the
# target do the handshake itself (PSK, or X.509 with its client
# certificate) and send the rest through TLS.
#
#   record-nbd-sessions.sh [OUTDIR [MIRROR_TOOL]]
#       (defaults: the corpus-nbd/ next to this script, and
#        build/qemu-mirror-tool/mirror-tool of this tree)
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(realpath "${1:-$here/corpus-nbd}")
mt=$(realpath "${2:-$here/../../build/qemu-mirror-tool/mirror-tool}")
LIMIT=8192
T="timeout 60"
# As in fuzz-nbd-server.c.
PSK_USER=fuzz
PSK_KEY=00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef
for p in nbdinfo nbdcopy qemu-io qemu-img python3; do
    command -v $p >/dev/null || { echo "$0: $p is missing" >&2; exit 1; }
done
[ -x "$mt" ] || { echo "$0: $mt is not built" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/record-nbd.XXXXXX")
pids=()
cleanup()
{
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

# A 4 MiB sparse image with 4 KiB of data at 0 and at 1 MiB.
mkimage()
{
    truncate -s 4M "$1"
    printf 'qemu-mirror fuzz seed %s\n' "$1" |
        dd of="$1" bs=4096 conv=notrunc,sync status=none
    head -c 4096 < <(yes "data of $1") |
        dd of="$1" bs=4096 seek=256 conv=notrunc status=none
}
mkimage disk.raw
mkimage ro.raw
# What is copied to the export: the 4 KiB block at 1 MiB, 512 bytes of
# data and zeroes.
truncate -s 4M src.raw
{ head -c 512 < <(yes "data of src.raw"); head -c 3584 /dev/zero; } |
    dd of=src.raw bs=4096 seek=256 conv=notrunc status=none
echo none >name
mkdir rec
: >names

# wait_line FILE TEXT: until FILE (a daemon's stdout) has TEXT.
wait_line()
{
    for _ in $(seq 600); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$0: no '$2' in $1" >&2
    exit 1
}

# serve NAME HEADER [serve options]: server and proxy; clients use
# unix socket $work/NAME.sock.
serve()
{
    local n=$1 hdr=$2 img=disk.raw
    shift 2
    [[ " $* " == *" -r "* ]] && img=ro.raw
    "$mt" serve -x exp "$@" "unix:$work/$n-srv.sock" "$img" \
        >"$n-srv.out" 2>&1 &
    pids+=($!)
    wait_line "$n-srv.out" "serving on"
    python3 "$here/record-nbd-proxy.py" "$work/$n.sock" "$work/$n-srv.sock" \
        "$work/rec" "$work/name" "$hdr" "$LIMIT" >"$n-proxy.out" 2>&1 &
    pids+=($!)
    wait_line "$n-proxy.out" ready
}
mkdir psk
echo "$PSK_USER:$PSK_KEY" >psk/keys.psk
serve rw 0000
serve ro 0100 -r
serve tls 0414 --tls-psk-file "$work/psk/keys.psk"
RW="nbd+unix:///exp?socket=$work/rw.sock"
RO="nbd+unix:///exp?socket=$work/ro.sock"
QRW="nbd:unix:$work/rw.sock:exportname=exp"

# rec [-e] NAME COMMAND...: run one client, its connections recorded as
# NAME; it must succeed (with -e: fail, as an I/O error must).
rec()
{
    local want=0 rc=0
    [ "$1" = -e ] && { want=1; shift; }
    local n=$1
    shift
    echo "$n" >name
    echo "$n" >>names
    $T "$@" >"client.out" 2>&1 || rc=$?
    if [ $((rc != 0)) != $want ] || [ $rc = 124 ]; then
        echo "$0: $n failed:" >&2
        cat client.out >&2
        exit 1
    fi
}

# libnbd: nbdinfo (GO, LIST, INFO, meta contexts), nbdcopy (structured
# replies, block status, zeroes).
rec nbdinfo nbdinfo "$RW"
rec nbdinfo-ro nbdinfo "$RO"
rec nbdinfo-list nbdinfo --list "$RO"
rec nbdinfo-map nbdinfo --map "$RW"
rec nbdinfo-map-totals nbdinfo --map --totals "$RO"
rec nbdinfo-size nbdinfo --size "$RW"
rec nbdinfo-content nbdinfo --content "$RW"
rec nbdinfo-can-trim nbdinfo --can trim "$RW"
rec nbdcopy-to nbdcopy --connections=1 --request-size=4096 src.raw "$RW"
rec nbdcopy-to-flush nbdcopy --connections=1 --requests=4 \
    --request-size=4096 --flush src.raw "$RW"
rec nbdcopy-to-allocated nbdcopy --connections=1 --request-size=4096 \
    --allocated src.raw "$RW"
rec nbdcopy-from nbdcopy --connections=1 --request-size=65536 "$RO" copy.raw
rec nbdcopy-from-no-extents nbdcopy --connections=1 --request-size=65536 \
    --no-extents "$RO" copy.raw
rec nbdcopy-to-2conns nbdcopy --connections=2 --request-size=4096 \
    src.raw "$RW"

# QEMU's client: NBD_OPT_GO with block sizes, base:allocation, and the
# request mix of qemu-io and qemu-img.
qio()
{
    local n=$1
    shift
    local args=()
    for c in "$@"; do
        args+=(-c "$c")
    done
    rec "qemu-io-$n" qemu-io -f raw "${args[@]}" "$RW"
}
qio read 'read -P 0 8192 512' 'read 1M 4096'
qio write 'write -P 0x5a 4096 512' 'write -P 0xa5 1M 1024'
qio write-fua 'write -f -P 0x11 8192 512'
qio write-zeroes 'write -z 16384 4096' 'write -z 0 512'
qio write-zeroes-unmap 'write -z -u 0 64k'
qio discard 'discard 64k 64k' 'discard 0 4096'
qio flush 'write -P 1 0 512' flush
qio map map
qio alloc 'alloc 0 4M' 'alloc 1M 64k'
qio aio 'aio_write -P 2 0 512' 'aio_write -P 3 4096 512' \
    'aio_read 0 512' aio_flush
qio readv-writev 'writev -P 4 0 512 512' 'readv 0 512 512 1024'
qio unaligned 'read 1 3' 'write -P 5 513 7'
rec -e qemu-io-past-end qemu-io -f raw -c 'read 4M 512' "$RW"
rec qemu-io-ro qemu-io -r -f raw -c 'read 0 512' -c map "$RO"
rec qemu-io-legacy-uri qemu-io -f raw -c 'read 0 512' "$QRW"
rec qemu-img-info qemu-img info "$RO"
rec qemu-img-info-json qemu-img info --output=json -f raw "$RW"
rec qemu-img-map qemu-img map -f raw "$RO"
rec qemu-img-map-json qemu-img map --output=json -f raw "$RW"
cp ro.raw ro-copy.raw
rec qemu-img-compare qemu-img compare -f raw -F raw ro-copy.raw "$RO"
rec qemu-img-convert-to qemu-img convert -n -f raw -O raw -S 512 src.raw \
    "$RW"
rec qemu-img-convert-from qemu-img convert -f raw -O raw "$RO" copy2.raw
rec qemu-img-bench-write qemu-img bench -w -c 4 -d 4 -s 512 -S 8192 \
    -f raw "$RW"
rec qemu-img-bench-read qemu-img bench -c 32 -d 8 -s 512 -S 4096 \
    -f raw "$RW"

# Our own client.
rec mirror-tool-info "$mt" info "$RO"
rec mirror-tool-map "$mt" map "$RO"
rec mirror-tool-convert-to "$mt" convert -n -S 512 src.raw "$RW"
rec mirror-tool-convert-from "$mt" convert "$RO" copy3.raw

# TLS: the client hello and what follows (cut at LIMIT).
TLS="nbds+unix://$PSK_USER@/exp?socket=$work/tls.sock"
TLS="$TLS&tls-psk-file=$work/psk/keys.psk"
QTLS="--object tls-creds-psk,id=tls0,dir=$work/psk,endpoint=client"
QTLS="$QTLS,username=$PSK_USER"
QTLS_IMG="driver=nbd,server.type=unix,server.path=$work/tls.sock"
QTLS_IMG="$QTLS_IMG,export=exp,tls-creds=tls0"
rec tls-nbdinfo nbdinfo "$TLS"
rec tls-nbdinfo-map nbdinfo --map "$TLS"
# shellcheck disable=SC2086 # QTLS is words
rec tls-qemu-img-info qemu-img info $QTLS --image-opts "$QTLS_IMG"
# shellcheck disable=SC2086
rec tls-qemu-io-write qemu-io $QTLS -c 'write -P 7 0 512' \
    --image-opts "$QTLS_IMG"
rec tls-mirror-tool-info "$mt" info "nbds+unix:///exp?socket=$work/tls.sock&tls-psk-file=$work/psk/keys.psk&tls-username=$PSK_USER"

# End the proxies: connections still open are written out.
for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
done
wait 2>/dev/null || true
pids=()
# Into OUTDIR in the order recorded, without repeats.
declare -A seen
while read -r n; do
    for f in "rec/$n" "rec/$n"-conn*; do
        [ -f "$f" ] || continue
        sum=$(sha256sum <"$f")
        if [ -z "${seen[$sum]:-}" ]; then
            seen[$sum]=1
            cp "$f" "$out/"
        fi
    done
done <names

# tls-client-NAME (PSK) and tls-x509-client-NAME from a few plain
# sessions NAME (see the top).
# tls_client NAME OUT TLS: OUT from NAME, TLS the framing byte's TLS bits.
tls_client()
{
    python3 - "$out/$1" "$out/$2" "$3" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
starttls = struct.pack(">QII", 0x49484156454f5054, 5, 0)
# Framing: the export bit kept, the TLS bits given, the target does TLS.
hdr = bytes([(d[0] & 1) | int(sys.argv[3]) | 0x08, d[1]])
open(sys.argv[2], "wb").write(hdr + d[2:6] + starttls + d[6:])
PY
}
for n in nbdinfo nbdinfo-list nbdcopy-to qemu-io-aio qemu-io-write-zeroes \
         qemu-img-map mirror-tool-convert-to; do
    tls_client "$n" "tls-client-$n" 4          # PSK, required
done
for n in nbdinfo qemu-io-aio mirror-tool-convert-to; do
    tls_client "$n" "tls-x509-client-$n" 6     # X.509
done
ls -l "$out"
