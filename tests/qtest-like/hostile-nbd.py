#!/usr/bin/env python3
# Hostile and broken NBD clients against an NBD server on a UNIX socket
# (mirror-tool serve, or mirror-tool start --export): garbage handshakes,
# requests out of bounds, too long, of length 0, of unknown type, a client
# gone in the middle of a WRITE payload, 200 connections at once, and a
# client that never reads its replies.  The server must answer each bad
# request with the right NBD error, keep the connection where framing
# allows, and go on serving well-behaved clients (nbdinfo, qemu-io).
#
# Usage: hostile-nbd.py SOCKET URI EXPORT-NAME SIZE
# Exits 0 when every check passed; no request writes to the image.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import struct
import subprocess
import sys

from nbdraw import (CMD_READ, CMD_WRITE, OPTS, REQUEST_MAGIC,
                    SIMPLE_REPLY_MAGIC, closed, connect, export_name,
                    greet, read)

EPERM, EINVAL, ENOSPC = 1, 22, 28
MiB = 1 << 20

path, uri, name, size = sys.argv[1], sys.argv[2], sys.argv[3], \
    int(sys.argv[4])


def conn():
    return connect(path, 10)


def transmission():
    """A connection in the transmission phase (NBD_OPT_EXPORT_NAME)."""
    s = conn()
    greet(s)
    esize, flags = export_name(s, name)
    assert esize == size, (esize, size)
    return s


def request(s, typ, off, length, flags=0, cookie=1, payload=b""):
    s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, flags, typ, cookie, off,
                          length) + payload)


def reply(s, data_len=0):
    magic, err, cookie = struct.unpack(">IIQ", read(s, 16))
    assert magic == SIMPLE_REPLY_MAGIC, hex(magic)
    data = read(s, data_len) if err == 0 and data_len else b""
    return err, cookie, data


def read_ok(s, off, length, cookie):
    request(s, CMD_READ, off, length, cookie=cookie)
    err, c, data = reply(s, length)
    assert (err, c, len(data)) == (0, cookie, length), (err, c, len(data))


# Garbage instead of a handshake; bad option magic; truncated flags.
s = conn()
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
assert closed(s)
s = conn()
greet(s)
s.sendall(b"\0" * 16)
assert closed(s)
s = conn()
read(s, 18)
s.sendall(b"\0\0")
s.close()
# An option announcing 4 GiB of data, then gone.
s = conn()
greet(s)
s.sendall(struct.pack(">QII", OPTS, 77, 0xffffffff))
s.sendall(b"x" * 100000)
s.close()

# Requests past the end, too long, unknown, empty: each gets its error and
# the connection survives.
s = transmission()
request(s, CMD_READ, size, 512, cookie=2)                   # past the end
assert reply(s)[:2] == (EINVAL, 2)
request(s, CMD_READ, 0, 64 * MiB, cookie=3)                 # 64 MiB
assert reply(s)[:2] == (EINVAL, 3)
request(s, CMD_WRITE, size - 10, 4096, cookie=4, payload=b"\xee" * 4096)
assert reply(s)[:2] == (ENOSPC, 4)                          # write past end
request(s, 99, 0, 512, cookie=5)                            # unknown
assert reply(s)[:2] == (EINVAL, 5)
request(s, CMD_READ, 0, 0, cookie=6)                        # length 0
assert reply(s)[:2] == (0, 6)
request(s, CMD_WRITE, 0, 0, cookie=7)
assert reply(s)[:2] == (0, 7)
read_ok(s, 0, 4096, 8)
# A WRITE of 64 MiB is refused; its payload is read and thrown away.
request(s, CMD_WRITE, 0, 64 * MiB, cookie=9)
chunk = b"\xee" * MiB
for _ in range(64):
    s.sendall(chunk)
assert reply(s)[:2] == (EINVAL, 9)
read_ok(s, size - 4096, 4096, 10)
# Bad request magic: the server hangs up.
s.sendall(b"\xde\xad\xbe\xef" * 7)
assert closed(s)

# Gone in the middle of a WRITE payload: nothing may be written.
s = transmission()
request(s, CMD_WRITE, 0, MiB, cookie=11, payload=b"\xee" * 1000)
s.close()

# 200 connections at once, a few of them greeted, then all closed.  Those
# beyond the server's connection limit (--shared, default 16) wait in the
# listen backlog, to be accepted as others leave.
many = [conn() for _ in range(200)]
for i, c in enumerate(many[:8]):
    if i % 2:
        read(c, 18)
for c in many:
    c.close()

# A client that never reads its replies (beyond the first) does not stop
# the others.
lazy = transmission()
span = max(1, size // MiB - 1)
for i in range(100):
    request(lazy, CMD_READ, (i % span) * MiB, MiB, cookie=100 + i)
err, cookie, _ = reply(lazy, MiB)        # replies may come in any order
assert err == 0 and 100 <= cookie < 200, (err, cookie)
subprocess.run(["nbdinfo", "--size", uri], check=True, timeout=30,
               stdout=subprocess.DEVNULL)
subprocess.run(["qemu-io", "-f", "raw", "-c", "read 0 4M", uri], check=True,
               timeout=30, stdout=subprocess.DEVNULL)
lazy.close()
