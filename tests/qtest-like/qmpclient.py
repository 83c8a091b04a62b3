# A small QMP client for the python tests (Debian 12 packages no QMP
# client library: there is no python3-qemu.qmp).  Line-oriented, one
# connection, synchronous: a command's reply is returned, the events that
# arrive meanwhile are kept in arrival order until asked for.  Every wait
# has a deadline; nothing sleeps to synchronise.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import json
import socket
import time


class QmpError(Exception):
    """The connection broke, timed out or spoke something that is not
    QMP; the message says which."""


class QmpClient:
    """One QMP connection on a UNIX socket.

    greeting: the server's greeting message.
    events:   every event received so far, in arrival order;
    times:    the monotonic time each of them was received.
    """

    def __init__(self, path, timeout, alive=None):
        """Connect to @path as soon as it accepts connections (at most
        @timeout seconds; @alive, if given, is called while waiting and
        must return False once the server can no longer appear) and read
        the greeting."""
        self.timeout = timeout
        self.buf = b""
        self.events = []
        self.times = []
        self.next_id = 0
        end = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if alive is not None and not alive():
                    raise QmpError("the server exited before serving "
                                   "QMP on %s" % path) from None
                if time.monotonic() > end:
                    raise QmpError("nothing accepts on %s" % path) from None
                time.sleep(0.005)       # poll for the socket to appear
        self.sock = s
        self.greeting = self._recv(end)
        if "QMP" not in self.greeting:
            raise QmpError("no QMP greeting: %r" % self.greeting)

    def drain(self):
        """After `quit`: keep the events that come until the server
        closes the connection (at most the connection's timeout)."""
        end = time.monotonic() + self.timeout
        while True:
            try:
                m = self._recv(end)
            except QmpError as e:
                if "closed" in str(e):
                    return
                raise
            except OSError:
                return                  # a reset is a close too
            if "event" not in m:
                raise QmpError("a reply nobody waits for: %r" % m)
            self._event(m)

    def close(self):
        self.sock.close()

    def _recv(self, end):
        """The next message, by the monotonic deadline @end."""
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                raise QmpError("timed out waiting for QMP")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise QmpError("timed out waiting for QMP") from None
            if not data:
                raise QmpError("QMP connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        if not line.strip():
            return self._recv(end)
        try:
            return json.loads(line)
        except ValueError:
            raise QmpError("not JSON: %r" % line[:200]) from None

    def _event(self, m):
        self.events.append(m)
        self.times.append(time.monotonic())

    def command(self, name, args=None):
        """Run @name with @args; returns the whole reply message
        ({"return": ...} or {"error": {...}}) without its id."""
        self.next_id += 1
        msg = {"execute": name, "id": self.next_id}
        if args is not None:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        end = time.monotonic() + self.timeout
        while True:
            m = self._recv(end)
            if "event" in m:
                self._event(m)
            elif m.get("id") == self.next_id:
                del m["id"]
                return m
            else:
                raise QmpError("reply to an unknown id: %r" % m)

    def wait_for(self, cond, what, timeout=None):
        """Read events until @cond(self.events) is true, at most @timeout
        seconds (default: the connection's); QmpError naming @what
        otherwise."""
        end = time.monotonic() + (timeout or self.timeout)
        while not cond(self.events):
            try:
                m = self._recv(end)
            except QmpError as e:
                raise QmpError("waiting for %s: %s" % (what, e)) from None
            if "event" not in m:
                raise QmpError("a reply nobody waits for: %r" % m)
            self._event(m)
