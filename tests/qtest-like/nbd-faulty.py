#!/usr/bin/env python3
# Faulty NBD peers on a UNIX socket, for the tests of the NBD client's
# bounds (test-tool-nbd-bounds.sh):
#
#   nbd-faulty.py silent SOCKET
#       accepts connections and never writes a byte (a stopped or wedged
#       server): the client's handshake never finishes.
#   nbd-faulty.py cut SOCKET UPSTREAM INDEX BYTES
#       a proxy to the server on UPSTREAM; the connection accepted as
#       number INDEX (0 is the first; "all": every one) is cut in both
#       directions once the client has sent more than BYTES bytes on it
#       (the client sees the socket shut; the server's side stays open
#       and quiet).
#   nbd-faulty.py stall SOCKET UPSTREAM INDEX BYTES
#       the same, except that the connection is not cut but stalls: open,
#       nothing forwarded any more either way.
#
# SOCKET appears (renamed into place) only once it listens.  Every event
# ("accepted N", "cut N", "stalled N") is a line on stdout, flushed.  Runs
# until killed.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import os
import socket
import sys
import threading

held = []       # sockets kept open on purpose


def say(msg):
    print(msg, flush=True)


def listen(path):
    tmp = path + ".tmp"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(tmp)
    s.listen(64)
    os.rename(tmp, path)
    return s


class Pair:
    """One client connection and its upstream; maybe cut or stalled."""

    def __init__(self, index, client, upstream, fault, at):
        self.index = index
        self.client = client
        self.upstream = upstream
        self.fault = fault if at is not None else None
        self.at = at
        self.sent = 0
        self.dead = False
        self.lock = threading.Lock()

    def trip(self):
        with self.lock:
            if self.dead:
                return
            self.dead = True
        if self.fault == "cut":
            # The client's side only: nbdkit 1.32 can abort when a
            # connection closes while a reply is being sent on it
            # (connections.c raw_send_socket: Assertion `sock >= 0'), so
            # the server's side is held open, quiet, until we are killed.
            try:
                self.client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            held.append(self.upstream)
            say("cut %d" % self.index)
        else:
            held.extend([self.client, self.upstream])
            say("stalled %d" % self.index)

    def pump(self, src, dst, from_client):
        while not self.dead:
            try:
                data = src.recv(256 * 1024)
            except OSError:
                data = b""
            if not data or self.dead:
                break
            if from_client and self.fault:
                self.sent += len(data)
                if self.sent > self.at:
                    self.trip()
                    return
            try:
                dst.sendall(data)
            except OSError:
                break
        if not self.dead:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def main():
    mode, path = sys.argv[1], sys.argv[2]
    srv = listen(path)
    index = 0
    while True:
        c, _ = srv.accept()
        say("accepted %d" % index)
        if mode == "silent":
            held.append(c)
        else:
            upstream_path, victim, at = sys.argv[3], sys.argv[4], \
                int(sys.argv[5])
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            u.connect(upstream_path)
            hit = victim in ("all", str(index))
            p = Pair(index, c, u, mode, at if hit else None)
            for args in ((c, u, True), (u, c, False)):
                threading.Thread(target=p.pump, args=args,
                                 daemon=True).start()
        index += 1


if __name__ == "__main__":
    main()
