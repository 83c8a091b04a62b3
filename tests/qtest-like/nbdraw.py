# The NBD wire protocol at the byte level, for the hostile-client tests
# (hostile-nbd.py, attack-nbd.py): what a well-behaved library would never
# send is what they send, so they speak the protocol by hand.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import socket
import struct

INIT, OPTS = 0x4e42444d41474943, 0x49484156454f5054
REQUEST_MAGIC, SIMPLE_REPLY_MAGIC = 0x25609513, 0x67446698
CMD_READ, CMD_WRITE = 0, 1
OPT_LIST = 3


def connect(path, timeout):
    """A UNIX stream connection to @path; every recv waits @timeout s."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read(s, n):
    """Exactly @n bytes from @s (EOFError if the server hangs up)."""
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += c
    return b


def closed(s):
    """The server hung up (reads return EOF) within the socket timeout."""
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def greet(s, flags=3):
    """Read the newstyle greeting and answer with client @flags."""
    init, opts, hflags = struct.unpack(">QQH", read(s, 18))
    assert (init, opts, hflags) == (INIT, OPTS, 3), (init, opts, hflags)
    s.sendall(struct.pack(">I", flags))


def export_name(s, name):
    """NBD_OPT_EXPORT_NAME @name; returns (size, transmission flags)."""
    n = name.encode()
    s.sendall(struct.pack(">QII", OPTS, 1, len(n)) + n)
    return struct.unpack(">QH", read(s, 10))
