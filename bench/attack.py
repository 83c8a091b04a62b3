#!/usr/bin/env python3
# bench/attack.py - one attack on an NBD server on a UNIX socket, and the
# latency a well-behaved client (the victim) sees meanwhile.  Driven by
# bench/attack.sh; see bench/README.md.
#
#   attack.py SOCKET ATTACK
#
# ATTACK is one of
#   none          no attacker;
#   write-hold    33 connections each send a 32 MiB WRITE header and one
#                 byte of its payload, then nothing;
#   slow-readers  READERS (40) connections each queue QUEUED (2) 32 MiB
#                 READs and drain 4 MiB of their replies every 5 s (under
#                 a 30 s stall timeout); the victim starts once each has
#                 the start of its first reply (SETTLE=0: at once);
#   option-flood  4 connections each send 250,000 NBD_OPT_LIST without
#                 reading the replies.
# Once the attack is in place (every attacker connected and its requests
# sent), the victim connects (NBD_OPT_EXPORT_NAME, simple replies) and
# times, one request at a time: 50 READs of 4 KiB, 50 WRITEs of 4 KiB (the
# data read back and compared) and 5 READs of 32 MiB, spread over the
# first 224 MiB.  A request without a reply after 30 s counts as a timeout
# and ends the victim.  Prints one line:
#   ATTACK read4k_p50 read4k_max write4k_p50 write4k_max read32m_p50
#   read32m_max timeouts
# in milliseconds.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import os
import select
import socket
import statistics
import struct
import sys
import threading
import time

OPTS = 0x49484156454f5054
REQ = 0x25609513
READ, WRITE = 0, 1
MiB = 1 << 20
QUEUED = int(os.environ.get("QUEUED", "2"))
READERS = int(os.environ.get("READERS", "40"))
SETTLE = os.environ.get("SETTLE", "1") != "0"

path, attack = sys.argv[1], sys.argv[2]


def conn(timeout=60):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read(s, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:])
        if not k:
            raise EOFError("closed")
        got += k
    return buf


def transmission(timeout=60):
    s = conn(timeout)
    read(s, 18)
    s.sendall(struct.pack(">I", 3))
    s.sendall(struct.pack(">QII", OPTS, 1, 0))
    read(s, 10)
    return s


def request(s, typ, off, n, cookie=1, payload=b""):
    s.sendall(struct.pack(">IHHQQI", REQ, 0, typ, cookie, off, n) + payload)


keep = []           # attackers' sockets, open until the end


def write_hold():
    for i in range(33):
        s = transmission()
        request(s, WRITE, (i % 7) * 32 * MiB, 32 * MiB, i)
        s.sendall(b"\xee")
        keep.append(s)


def slow_readers():
    for i in range(READERS):
        s = transmission()
        for j in range(QUEUED):
            request(s, READ, (i % 7) * 32 * MiB, 32 * MiB, j)
        keep.append(s)
    if SETTLE:
        # In place: the server has answered each reader's first READ (its
        # reply has begun), so the victim meets the steady state, not the
        # 40 x 32 MiB of reads being served at the same instant.
        for s in keep:
            select.select([s], [], [], 60)

    def drain():
        while keep:
            for s in list(keep):
                try:
                    s.setblocking(False)
                    left = 4 * MiB
                    while left:
                        b = s.recv(left)
                        if not b:
                            break
                        left -= len(b)
                except (BlockingIOError, OSError):
                    pass
            time.sleep(5)
    threading.Thread(target=drain, daemon=True).start()


def option_flood():
    flood = struct.pack(">QII", OPTS, 3, 0) * 4096
    for _ in range(4):
        s = conn()
        read(s, 18)
        s.sendall(struct.pack(">I", 3))
        s.setblocking(False)
        sent = 0
        while sent < 250000 * 16:
            _, w, _ = select.select([], [s], [], 2)
            if not w:
                break       # the server stopped reading
            try:
                sent += s.send(flood[sent % len(flood):])
            except BlockingIOError:
                pass
        keep.append(s)


{"none": lambda: None, "write-hold": write_hold,
 "slow-readers": slow_readers, "option-flood": option_flood}[attack]()

lat = {"r4k": [], "w4k": [], "r32m": []}
timeouts = 0
try:
    v = transmission(timeout=30)
    pat = os.urandom(4096)
    for i in range(50):
        t = time.monotonic()
        request(v, READ, (i * 4 + 1) * MiB, 4096, 1)
        hdr = read(v, 16)
        assert struct.unpack(">IIQ", hdr)[1] == 0
        read(v, 4096)
        lat["r4k"].append(time.monotonic() - t)
    for i in range(50):
        off = 230 * MiB + i * 4096
        t = time.monotonic()
        request(v, WRITE, off, 4096, 2, pat)
        assert struct.unpack(">IIQ", read(v, 16))[1] == 0
        lat["w4k"].append(time.monotonic() - t)
        request(v, READ, off, 4096, 3)
        assert struct.unpack(">IIQ", read(v, 16))[1] == 0
        assert bytes(read(v, 4096)) == pat, "victim: wrong data"
    for i in range(5):
        t = time.monotonic()
        request(v, READ, i * 32 * MiB + 4096, 32 * MiB, 4)
        assert struct.unpack(">IIQ", read(v, 16))[1] == 0
        read(v, 32 * MiB)
        lat["r32m"].append(time.monotonic() - t)
    v.close()
except (socket.timeout, TimeoutError, EOFError, ConnectionError) as e:
    print("victim: %s" % e, file=sys.stderr)
    timeouts = 1


def ms(xs, f):
    return "%.1f" % (f(xs) * 1000) if xs else "-"


print(attack, ms(lat["r4k"], statistics.median), ms(lat["r4k"], max),
      ms(lat["w4k"], statistics.median), ms(lat["w4k"], max),
      ms(lat["r32m"], statistics.median), ms(lat["r32m"], max), timeouts)
sys.stdout.flush()
keep.clear()
os._exit(0)
