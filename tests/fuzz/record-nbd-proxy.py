#!/usr/bin/env python3
# A recording proxy for record-nbd-sessions.sh: listens on the UNIX socket
# LISTEN, forwards every connection both ways to the UNIX socket SERVER,
# and writes what the client sent, as fuzz-nbd-server inputs, into OUTDIR.
# The connections of one client run are named after it by writing the
# name into the file NAMEFILE before the client starts (read at each
# accept): the first connection is OUTDIR/NAME, later ones NAME-connN.
# Each file is HEADER (hex: fuzz-nbd-server's framing bytes) and then the
# client's byte stream, cut after LIMIT bytes; a connection that sent
# nothing is not written.  "ready" is printed on stdout once listening;
# SIGTERM stops it (open connections are written out first).
#
#   record-nbd-proxy.py LISTEN SERVER OUTDIR NAMEFILE HEADER LIMIT
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import os
import signal
import socket
import sys
import threading

listen_path, server_path, outdir, namefile, header, limit = sys.argv[1:]
header = bytes.fromhex(header)
limit = int(limit)
counts = {}
lock = threading.Lock()
open_sessions = set()


class Session:
    def __init__(self, client, name):
        self.client = client
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.connect(server_path)
        self.data = bytearray()
        self.name = name
        self.written = False

    def save(self):
        with lock:
            if self.written or not self.data:
                return
            self.written = True
        with open(os.path.join(outdir, self.name), "wb") as f:
            f.write(header + self.data[:limit])

    def pump(self, src, dst, record):
        try:
            while True:
                buf = src.recv(65536)
                if not buf:
                    break
                if record and len(self.data) < limit:
                    self.data += buf[:limit - len(self.data)]
                dst.sendall(buf)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def run(self):
        back = threading.Thread(target=self.pump,
                                args=(self.server, self.client, False))
        back.start()
        self.pump(self.client, self.server, True)
        back.join()
        self.save()
        self.client.close()
        self.server.close()
        with lock:
            open_sessions.discard(self)


def session_name():
    with open(namefile) as f:
        base = f.read().strip()
    with lock:
        n = counts.get(base, 0) + 1
        counts[base] = n
    return base if n == 1 else "%s-conn%d" % (base, n)


def stop(signum, frame):
    with lock:
        left = list(open_sessions)
    for s in left:
        s.save()
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
lsock.bind(listen_path)
lsock.listen(16)
print("ready", flush=True)
while True:
    conn, _ = lsock.accept()
    s = Session(conn, session_name())
    with lock:
        open_sessions.add(s)
    threading.Thread(target=s.run, daemon=True).start()
