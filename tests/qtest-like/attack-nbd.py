#!/usr/bin/env python3
# Clients that try to take from an NBD server (mirror-tool serve) what
# other clients need (issue 28), each while a well-behaved client (qemu-io,
# nbdinfo) must keep being answered with the right bytes.
#
#   attack-nbd.py write-hold SOCKET URI IMAGE PID
#       33 connections each announce a 32 MiB WRITE and send one byte of
#       its payload.  qemu-io writes 4 KiB at 40M and reads it back, and
#       nbdcopy reads the export in 32 MiB requests, compared with IMAGE;
#       then the server (started with --payload-timeout) must drop every
#       attacker without writing their byte.
#   attack-nbd.py option-flood SOCKET URI IMAGE PID
#       4 connections send 250,000 NBD_OPT_LIST each without reading the
#       replies; nbdinfo is answered meanwhile, and the server (PID) grows
#       by less than 8 MiB (it was 6 MiB per connection; not checked when
#       the server runs under AddressSanitizer).
#   attack-nbd.py shared SOCKET URI IMAGE PID
#       The server runs with --shared 2: a third connection waits (in the
#       listen backlog) until one of the two leaves, then it is served.
#   attack-nbd.py handshake-limit SOCKET URI IMAGE PID
#       The server runs with --handshake-limit 1: a client that reads the
#       greeting and says nothing is dropped within 8 s (the default is
#       10 s), a client in transmission that stayed idle meanwhile is still
#       answered, and qemu-io and nbdcopy are served.
#   attack-nbd.py reply-timeout SOCKET URI IMAGE PID
#       The server runs with --reply-timeout 2: a client that asks for
#       eight 32 MiB READs and reads none of the replies is hung up on
#       within 20 s (the default is 30 s), while qemu-io and nbdcopy are
#       served.
#   attack-nbd.py budget SOCKET URI IMAGE PID
#       The server runs with --shared 2 --budget 66M (2 x 33 MiB): a client
#       that asks for four 32 MiB READs and reads nothing holds one reply's
#       worth, not two (its 64 MiB share of the default budget): the server
#       grows by less than 48 MiB (not checked under AddressSanitizer);
#       qemu-io and nbdcopy are served meanwhile.
#
# Every socket operation gives up after 30 s, every client run after
# 60 s: a starved client fails the test, it never hangs it.  Exits 0 when
# every check passed.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import select
import struct
import subprocess
import sys
import threading
import time

from nbdraw import (CMD_READ, CMD_WRITE, OPT_LIST, OPTS, REQUEST_MAGIC,
                    closed, connect, export_name, greet, read)

MiB = 1 << 20

kind, path, uri, image, pid = sys.argv[1:6]


def conn():
    return connect(path, 30)


def transmission():
    """A connection in the transmission phase (NBD_OPT_EXPORT_NAME "")."""
    s = conn()
    greet(s)
    export_name(s, "")
    return s


def run(*cmd):
    r = subprocess.run(cmd, timeout=60, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert r.returncode == 0, (cmd, r.stdout.decode())
    return r.stdout


def image_bytes(off, n):
    with open(image, "rb") as f:
        f.seek(off)
        return f.read(n)


def victim():
    """qemu-io writes 4 KiB and reads it back; nbdcopy reads the export
    in 32 MiB requests; both compared with the image (the server writes
    through to it)."""
    run("qemu-io", "-f", "raw", "-c", "write -P 0x5c 40M 4k",
        "-c", "read -P 0x5c 40M 4k", uri)
    assert image_bytes(40 * MiB, 4096) == b"\x5c" * 4096
    # The whole export in 32 MiB requests, one connection.
    out = run("nbdcopy", "--request-size=%d" % (32 * MiB),
              "--connections=1", uri, "-")
    assert out == image_bytes(0, len(out)) and len(out) >= 32 * MiB


def hung_up(s, timeout):
    """Seconds until the server hung up on @s, without reading from it
    (reading would let its replies progress), or None after @timeout."""
    t0 = time.monotonic()
    p = select.poll()
    p.register(s, select.POLLHUP)
    while time.monotonic() - t0 < timeout:
        for _, ev in p.poll(200):
            if ev & (select.POLLHUP | select.POLLERR):
                return time.monotonic() - t0
    return None


def victim_thread():
    """victim() on a thread; join it with join_victim()."""
    err = []

    def body():
        try:
            victim()
        except BaseException as e:      # re-raised by join_victim()
            err.append(e)
    t = threading.Thread(target=body)
    t.start()
    return t, err


def join_victim(t, err):
    t.join(120)
    assert not t.is_alive(), "the victim hung"
    if err:
        raise err[0]


def asan():
    return "libasan" in open("/proc/%s/maps" % pid).read()


def rss_kib():
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


if kind == "write-hold":
    first = image_bytes(0, 32 * MiB)
    attackers = []
    for i in range(33):
        s = transmission()
        s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_WRITE, i, 0,
                              32 * MiB) + b"\xee")
        attackers.append(s)
    victim()
    # The payload timeout drops them all; their bytes were never written.
    for s in attackers:
        assert closed(s)
    assert image_bytes(0, 32 * MiB) == first, "an attacker's byte landed"
    victim()
elif kind == "option-flood":
    before = rss_kib()
    flood = struct.pack(">QII", OPTS, OPT_LIST, 0) * 4096
    floods = []
    for _ in range(4):
        s = conn()
        greet(s)
        s.setblocking(False)
        sent = 0
        # Until 250,000 options went out or the server stopped reading
        # (the socket stays full for 2 s).
        while sent < 250000 * 16:
            _, w, _ = select.select([], [s], [], 2)
            if not w:
                break
            try:
                sent += s.send(flood[sent % len(flood):])
            except BlockingIOError:
                pass
        floods.append(s)
    run("nbdinfo", "--size", uri)
    grown = rss_kib() - before
    # Under AddressSanitizer the RSS says little (quarantine, shadow): the
    # bound is checked there by test-export-nbd-attack's option-flood.
    if not asan():
        assert grown < 8 * 1024, "the server grew by %d KiB" % grown
    for s in floods:
        s.close()
    run("nbdinfo", "--size", uri)
elif kind == "shared":
    a = transmission()
    b = conn()
    read(b, 18)
    c = conn()
    # c waits in the listen backlog: no greeting while a and b are served
    # (a negative check: a server that greets it does so at once).
    assert not select.select([c], [], [], 1)[0], "a third was served"
    b.close()
    greet(c)        # served once b left
    c.sendall(struct.pack(">QII", OPTS, 1, 0))
    read(c, 10)
    c.close()
    a.close()
elif kind == "handshake-limit":
    idle = transmission()
    silent = conn()
    read(silent, 18)            # the greeting, then nothing
    t0 = time.monotonic()
    assert closed(silent)
    took = time.monotonic() - t0
    assert took < 8, "the silent client was dropped after %.1f s" % took
    # The limit is on the handshake only: the idle client, in
    # transmission for longer than the limit, is still answered.
    idle.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, 7, 0,
                             4096))
    magic, err, cookie = struct.unpack(">IIQ", read(idle, 16))
    assert (err, cookie) == (0, 7), (err, cookie)
    assert read(idle, 4096) == image_bytes(0, 4096)
    idle.close()
    victim()
elif kind == "reply-timeout":
    s = transmission()
    for i in range(8):
        s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, i,
                              i * MiB, 32 * MiB))
    v = victim_thread()
    took = hung_up(s, 20)
    assert took is not None, "a client not reading was not dropped in 20 s"
    join_victim(*v)
    s.close()
elif kind == "budget":
    before = rss_kib()
    s = transmission()
    for i in range(4):
        s.sendall(struct.pack(">IHHQQI", REQUEST_MAGIC, 0, CMD_READ, i,
                              i * MiB, 32 * MiB))
    # The server's memory rises while it reads what the budget allows,
    # then stays: wait until it did not change for 1.5 s (30 s at most).
    peak, last, still = before, None, time.monotonic()
    t_end = time.monotonic() + 30
    while time.monotonic() < t_end and time.monotonic() - still < 1.5:
        now = rss_kib()
        peak = max(peak, now)
        if now != last:
            last, still = now, time.monotonic()
        time.sleep(0.1)
    grown = peak - before
    sys.stderr.write("budget: the server grew by %d KiB\n" % grown)
    if not asan():
        assert grown < 48 * 1024, "the server grew by %d KiB" % grown
    victim()
    s.close()
else:
    sys.exit("unknown attack '%s'" % kind)
