#!/usr/bin/env python3
# Write the synthetic seeds of fuzz-nbd-server (tests/fuzz/corpus-nbd/,
# files synthetic-NAME): what clients send, from the greeting's answer to
# NBD_CMD_DISC, with the corners real clients do not reach (errors, odd
# options, simple replies), in the target's framing: the export
# (0 writable, 1 read-only), how the bytes are split into writes (0 not at
# all, N at most N bytes a write), then what goes to the server.  The
# export is "exp", 4 MiB.  The seeds of real sessions come from
# record-nbd-sessions.sh.
#
#   make-corpus-nbd.py DIR
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import os
import struct
import sys

OPTS = 0x49484156454f5054
REQ = 0x25609513
(OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS, OPT_INFO, OPT_GO,
 OPT_STRUCTURED, OPT_LIST_META, OPT_SET_META) = 1, 2, 3, 5, 6, 7, 8, 9, 10
# The first framing byte: the export, the server's TLS, the client's.
RO, TLS_ON, TLS_REQUIRE, TLS_X509, TLS_CLIENT = 0x01, 0x02, 0x04, 0x06, 0x08
(READ, WRITE, DISC, FLUSH, TRIM, WZ, BLOCK_STATUS) = 0, 1, 2, 3, 4, 6, 7
FUA, NO_HOLE, DF, REQ_ONE, FAST_ZERO = 1, 2, 4, 8, 16
KiB, MiB = 1 << 10, 1 << 20


def opt(o, data=b""):
    return struct.pack(">QII", OPTS, o, len(data)) + data


def go(name=b"exp", infos=(3,), o=OPT_GO):
    d = struct.pack(">I", len(name)) + name + struct.pack(">H", len(infos))
    return opt(o, d + b"".join(struct.pack(">H", i) for i in infos))


def meta(o, name=b"exp", queries=(b"base:allocation",)):
    d = struct.pack(">I", len(name)) + name + struct.pack(">I", len(queries))
    return opt(o, d + b"".join(struct.pack(">I", len(q)) + q
                               for q in queries))


def req(t, off=0, n=0, flags=0, cookie=1, payload=b""):
    return struct.pack(">IHHQQI", REQ, flags, t, cookie, off, n) + payload


FLAGS = struct.pack(">I", 3)          # fixed newstyle, no zeroes
seeds = {
    # libnbd-like: structured replies, base:allocation, GO, then I/O.
    "go-structured": b"\0\0" + FLAGS + opt(OPT_STRUCTURED) +
    meta(OPT_SET_META) + go() +
    req(READ, 0, 4 * KiB, cookie=1) +
    req(WRITE, 64 * KiB, 512, FUA, 2, b"\x5a" * 512) +
    req(BLOCK_STATUS, 0, 1 * MiB, cookie=3) +
    req(BLOCK_STATUS, 0, 1 * MiB, REQ_ONE, 4) +
    req(WZ, 128 * KiB, 64 * KiB, NO_HOLE, 5) +
    req(WZ, 256 * KiB, 64 * KiB, FAST_ZERO, 6) +
    req(TRIM, 512 * KiB, 64 * KiB, FUA, 7) +
    req(FLUSH, cookie=8) + req(READ, 4 * MiB - 512, 512, DF, 9) +
    req(DISC, cookie=10),
    # qemu-nbd-era client: NBD_OPT_EXPORT_NAME, simple replies.
    "export-name-simple": b"\0\0" + FLAGS + opt(OPT_EXPORT_NAME, b"exp") +
    req(READ, 0, 64 * KiB) + req(WRITE, 4096, 4096, 0, 2, b"\1" * 4096) +
    req(READ, 4 * MiB, 512, cookie=3) + req(99, cookie=4) +
    req(DISC, cookie=5),
    # Option haggling: list, info, meta contexts, unknown, then abort.
    "options": b"\0\0" + FLAGS + opt(OPT_LIST) + go(o=OPT_INFO, infos=(0, 1, 2,
                                                                       3)) +
    go(name=b"nope", o=OPT_INFO) + meta(OPT_LIST_META, queries=()) +
    meta(OPT_LIST_META, queries=(b"base:",)) + opt(77, b"xyz") +
    opt(OPT_ABORT),
    # Read-only export: writes are refused, their payload skipped.
    "read-only": b"\1\0" + FLAGS + go(b"") +
    req(WRITE, 0, 1024, cookie=1, payload=b"\2" * 1024) +
    req(TRIM, 0, 4096, cookie=2) + req(READ, 0, 4096, cookie=3) +
    req(DISC, cookie=4),
    # Errors: past the end, too long, bad flags, then bad magic.
    "errors": b"\0\0" + FLAGS + opt(OPT_STRUCTURED) + go() +
    req(READ, 4 * MiB, 4096, cookie=1) + req(READ, 0, 64 * MiB, DF, 2) +
    req(WRITE, 4 * MiB - 8, 16, 0, 3, b"\3" * 16) +
    req(READ, 0, 4096, 0x80, 4) + req(BLOCK_STATUS, 0, 0, cookie=5) +
    b"\xde\xad\xbe\xef" * 7,
}

# The same bytes arriving a few at a time: headers and payloads split
# across reads.  Not 1 byte at a time: one main-loop iteration per byte
# is slow, and the fuzzer finds that on its own.
seeds["go-structured-split-7"] = b"\0\7" + seeds["go-structured"][2:]
seeds["options-split-13"] = b"\0\x0d" + seeds["options"][2:]
seeds["export-name-simple-split-100"] = (b"\0\x64" +
                                         seeds["export-name-simple"][2:])

# TLS: the server has a PSK credential.  Without TLS_CLIENT what follows
# NBD_OPT_STARTTLS is a garbage handshake; with it the target does a real
# handshake there and sends the rest through TLS.
STARTTLS = opt(OPT_STARTTLS)
IO = (req(READ, 0, 4 * KiB, cookie=1) +
      req(WRITE, 64 * KiB, 512, FUA, 2, b"\x5a" * 512) +
      req(BLOCK_STATUS, 0, 1 * MiB, cookie=3) + req(FLUSH, cookie=4) +
      req(DISC, cookie=5))
seeds.update({
    # FORCEDTLS: every option but STARTTLS and ABORT refused, then
    # plaintext trailing STARTTLS.
    "tls-required-refusals": bytes([TLS_REQUIRE, 0]) + FLAGS +
    opt(OPT_LIST) + opt(OPT_STRUCTURED) + go() + opt(77, b"x") + STARTTLS +
    b"\x16\x03\x01\x00\x05hello",
    # NBD_OPT_EXPORT_NAME cannot be refused: the connection ends.
    "tls-required-export-name": bytes([TLS_REQUIRE, 0]) + FLAGS +
    opt(OPT_EXPORT_NAME, b"exp") + req(READ, 0, 512) + req(DISC, cookie=2),
    # A handshake on bytes that are not TLS: 20-byte writes put them
    # after the STARTTLS reply (sent at once they would be plaintext
    # trailing STARTTLS).
    "tls-garbage-handshake-split-20": bytes([TLS_REQUIRE, 20]) + FLAGS +
    STARTTLS + b"\x16\x03\x01\x00\x2a\x01\x00\x00\x26\x03\x03" +
    bytes(range(64)),
    # --tls=on: plain negotiation works; STARTTLS with data is invalid;
    # plaintext sent right after STARTTLS ends the connection.
    "tls-on-trailing-plaintext": bytes([TLS_ON, 0]) + FLAGS +
    opt(OPT_STRUCTURED) + opt(OPT_STARTTLS, b"junk") + STARTTLS + go() +
    IO,
    "tls-on-plain": bytes([TLS_ON | RO, 0]) + FLAGS + go() + IO,
    # Real handshakes, then negotiation and I/O through TLS.
    "tls-client-go-structured": bytes([TLS_REQUIRE | TLS_CLIENT, 0]) +
    FLAGS + STARTTLS + opt(OPT_STRUCTURED) + meta(OPT_SET_META) + go() + IO,
    "tls-client-after-plain-options": bytes([TLS_ON | TLS_CLIENT, 0]) +
    FLAGS + opt(OPT_STRUCTURED) + meta(OPT_SET_META) + opt(OPT_LIST) +
    STARTTLS + opt(OPT_LIST) + meta(OPT_LIST_META, queries=()) +
    go(infos=(0, 1, 2, 3)) + IO,
    "tls-client-starttls-twice": bytes([TLS_REQUIRE | TLS_CLIENT, 0]) +
    FLAGS + STARTTLS + STARTTLS + opt(OPT_EXPORT_NAME, b"exp") + IO,
    "tls-client-read-only-split-7": bytes([TLS_REQUIRE | TLS_CLIENT | RO,
                                           7]) +
    FLAGS + STARTTLS + opt(OPT_STRUCTURED) + go(b"") + IO,
    # X.509 with a client certificate the server verifies and authorizes.
    "tls-x509-client-go-structured": bytes([TLS_X509 | TLS_CLIENT, 0]) +
    FLAGS + STARTTLS + opt(OPT_STRUCTURED) + meta(OPT_SET_META) + go() + IO,
    "tls-x509-required-refusals": bytes([TLS_X509, 0]) + FLAGS +
    opt(OPT_LIST) + go() + opt(OPT_EXPORT_NAME, b"exp"),
})

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, "synthetic-" + name), "wb") as f:
        f.write(data)
