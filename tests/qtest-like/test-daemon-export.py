#!/usr/bin/env python3
# The daemon's NBD server and exports over QMP (issue 23): nbd-server-start
# and three exports on it (two raw images, one null-co node), each
# command's bad arguments with qemu-storage-daemon 7.2's error classes and
# messages; nbdinfo --list shows every export with its description,
# qemu-io writes the right image by name and nbdcopy reads it back; an
# exported node cannot be deleted; a safe block-export-del is refused while
# a client uses the export, a hard one drops that client and ends with
# BLOCK_EXPORT_DELETED while another export goes on serving; an idle
# export goes before the command returns; nbd-server-stop removes the
# rest; a server with a tls-creds-psk object serves only TLS clients;
# quit exits 0.
#
# Runs under meson with MIRROR_TOOL set; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import taplib
from taplib import check, diag

MiB = 1 << 20
TOOL = os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../build/qemu-mirror-tool/mirror-tool")
# Every wait is bounded by this; the machine may be slow and busy.
TMO = 30


class Qmp:
    """A QMP client that keeps the events it reads."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(TMO)
        deadline = time.monotonic() + TMO
        while True:
            try:
                self.s.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.f = self.s.makefile("rb")
        self.events = []
        self.read()                     # the greeting
        assert "return" in self.cmd("qmp_capabilities")

    def read(self):
        line = self.f.readline()
        if not line:
            raise EOFError("the daemon closed QMP")
        return json.loads(line)

    def cmd(self, execute, **args):
        """The reply; events read on the way go to self.events."""
        msg = {"execute": execute}
        if args:
            msg["arguments"] = args
        self.s.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            r = self.read()
            if "event" in r:
                self.events.append(r)
                continue
            return r

    def wait_event(self, name):
        for i, e in enumerate(self.events):
            if e["event"] == name:
                return self.events.pop(i)
        while True:
            r = self.read()
            if r.get("event") == name:
                return r
            self.events.append(r)


def error_is(r, desc, cls="GenericError"):
    e = r.get("error")
    if e == {"class": cls, "desc": desc}:
        return True
    diag("expected %s %r, got %s" % (cls, desc, json.dumps(r)))
    return False


def ok_reply(r):
    if r == {"return": {}}:
        return True
    diag("got " + json.dumps(r))
    return False


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TMO)


def file_bytes(path, off, n):
    with open(path, "rb") as f:
        f.seek(off)
        return f.read(n)


def cmdline(tmp):
    """qsd's --nbd-server (a flat SocketAddress, keyval) and --export."""
    qmp_sock = os.path.join(tmp, "qmp2.sock")
    nbd_sock = os.path.join(tmp, "nbd2.sock")
    daemon = subprocess.Popen(
        [TOOL, "daemon", "--qmp", qmp_sock,
         "--blockdev", "null-co,node-name=n,size=1048576",
         "--nbd-server", "addr.type=unix,addr.path=%s,max-connections=1"
         % nbd_sock,
         "--export", "nbd,id=e,node-name=n,name=null,writable=on"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        q = Qmp(qmp_sock)
        r = run(["nbdinfo", "--json",
                 "nbd+unix:///null?socket=" + nbd_sock])
        info = json.loads(r.stdout)["exports"][0] if r.returncode == 0 \
            else {}
        check(info.get("export-size") == MiB and
              info.get("is_read_only") is False and
              info.get("can_multi_conn") is False,
              "--nbd-server addr.type=unix,...,max-connections=1 and "
              "--export nbd,...,writable=on: served, no multi-conn")
        if not info:
            diag(r.stderr)
        q.cmd("quit")
        check(daemon.wait(timeout=TMO) == 0, "and quit: exit 0")
    finally:
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()


def main():
    tmp = tempfile.mkdtemp(prefix="test-daemon-export.")
    qmp_sock = os.path.join(tmp, "qmp.sock")
    nbd_sock = os.path.join(tmp, "nbd.sock")
    img = {n: os.path.join(tmp, n + ".raw") for n in ("a", "b")}
    for i, n in enumerate(("a", "b")):
        with open(img[n], "wb") as f:
            f.write(bytes([ord(n)]) * ((i + 1) * MiB))
    daemon = subprocess.Popen([TOOL, "daemon", "--qmp", qmp_sock],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    holder = None
    try:
        q = Qmp(qmp_sock)
        uri = "nbd+unix:///%s?socket=" + nbd_sock

        # ---- before the server ----
        for n in ("a", "b"):
            r = q.cmd("blockdev-add", driver="file", filename=img[n],
                      **{"node-name": "f" + n, "read-only": n == "b"})
            assert "return" in r, r
            r = q.cmd("blockdev-add", driver="raw", file="f" + n,
                      **{"node-name": n, "read-only": n == "b"})
            assert "return" in r, r
        r = q.cmd("blockdev-add", driver="null-co", size=4 * MiB,
                  **{"node-name": "n"})
        assert "return" in r, r
        check(error_is(q.cmd("nbd-server-stop"), "NBD server not running"),
              "nbd-server-stop without a server")
        check(error_is(q.cmd("block-export-add", type="nbd", id="ea",
                             **{"node-name": "a"}),
                       "NBD server not running"),
              "block-export-add without a server")

        # ---- nbd-server-start's arguments ----
        unix = {"type": "unix", "data": {"path": nbd_sock}}
        bad_start = [
            ({}, "Parameter 'addr' is missing"),
            ({"addr": {"type": "unix", "data": {"type": "unix",
                                                "path": nbd_sock}}},
             "Parameter 'addr.data.type' is unexpected"),
            ({"addr": {"type": "unix", "path": nbd_sock, "x": 1}},
             "Parameter 'addr.data' is missing"),
            ({"addr": {"type": "unix", "path": nbd_sock}},
             "Parameter 'addr.data' is missing"),
            ({"addr": {"type": "unix", "data": {"path": nbd_sock},
                       "x": 1}},
             "Parameter 'addr.x' is unexpected"),
            ({"addr": {"type": "x", "data": {}}},
             "Parameter 'type' does not accept value 'x'"),
            ({"addr": {"type": "inet", "data": {"host": "127.0.0.1"}}},
             "Parameter 'addr.data.port' is missing"),
            ({"addr": {"type": "inet",
                       "data": {"host": "127.0.0.1", "port": 0}}},
             "Invalid parameter type for 'addr.data.port', expected: "
             "string"),
            ({"addr": {"type": "fd", "data": {"str": "x"}}},
             "only QEMU supports file descriptor passing"),
            ({"addr": unix, "max-connections": -1},
             "Parameter 'max-connections' expects uint32_t"),
            ({"addr": unix, "tls-creds": "nope"},
             "No TLS credentials with id 'nope'"),
            ({"addr": unix, "x": 1}, "Parameter 'x' is unexpected"),
            ({"addr": unix, "tls-authz": "authz0"},
             "Parameter 'tls-authz' is not supported by mirror-tool"),
            ({"addr": {"type": "vsock", "data": {"cid": "1", "port": "1"}}},
             "Parameter 'addr.type' value 'vsock' is not supported by "
             "mirror-tool (it supports: unix, inet)"),
            ({"addr": {"type": "unix",
                       "data": {"path": nbd_sock, "abstract": True}}},
             "Parameter 'addr.data.abstract' is not supported by "
             "mirror-tool"),
        ]
        for args, desc in bad_start:
            check(error_is(q.cmd("nbd-server-start", **args), desc),
                  "nbd-server-start: " + desc)
        check(ok_reply(q.cmd("nbd-server-start", addr=unix)),
              "nbd-server-start on a UNIX socket")
        check(error_is(q.cmd("nbd-server-start", addr=unix),
                       "NBD server already running"),
              "a second nbd-server-start")

        # ---- block-export-add ----
        check(ok_reply(q.cmd("block-export-add", type="nbd", id="ea",
                             writable=True, **{"node-name": "a"})),
              "export a, writable, named after its node")
        check(ok_reply(q.cmd("block-export-add", type="nbd", id="eb",
                             name="disk-b", description="disk b",
                             **{"node-name": "b"})),
              "export b as disk-b with a description")
        check(ok_reply(q.cmd("block-export-add", type="nbd", id="en",
                             name="", writable=True, **{"node-name": "n"})),
              "export n as the empty name")
        bad_add = [
            ({"id": "ea", "node-name": "b"},
             "Block export id 'ea' is already in use"),
            ({"id": "ex", "node-name": "b", "name": "a"},
             "NBD server already has export named 'a'"),
            ({"id": "ex", "node-name": "nope"},
             "Cannot find device='' nor node-name='nope'"),
            ({"id": "1x", "node-name": "b"}, "Invalid block export id"),
            ({"id": "ex", "node-name": "b", "name": "b2", "writable": True},
             "Cannot export read-only node as writable"),
            ({"id": "ex", "node-name": "b", "bitmaps": ["bm"]},
             "Bitmap 'bm' is not found"),
            ({"id": "ex", "node-name": "b", "iothread": "io"},
             'iothread "io" not found'),
            ({"id": "ex", "node-name": "b", "writable": "yes"},
             "Invalid parameter type for 'writable', expected: boolean"),
            ({"id": "ex", "node-name": "b", "writethrough": True},
             "Parameter 'writethrough' is not supported by mirror-tool"),
            ({"id": "ex", "node-name": "b", "foo": 1},
             "Parameter 'foo' is unexpected"),
            ({"id": "ex"}, "Parameter 'node-name' is missing"),
            ({"node-name": "b"}, "Parameter 'id' is missing"),
            ({"id": "ex", "node-name": "b", "name": "x" * 4097},
             "export name '%s' too long" % ("x" * 4097)),
        ]
        for args, desc in bad_add:
            check(error_is(q.cmd("block-export-add", type="nbd", **args),
                           desc),
                  "block-export-add: " + desc[:60])
        check(error_is(q.cmd("block-export-add", type="nbdx", id="ex",
                             **{"node-name": "b"}),
                       "Parameter 'type' does not accept value 'nbdx'"),
              "block-export-add of an unknown type")
        check(error_is(q.cmd("block-export-add", id="ex",
                             **{"node-name": "b"}),
                       "Parameter 'type' is missing"),
              "block-export-add without a type")

        r = q.cmd("query-block-exports")
        want = [{"type": "nbd", "id": i, "node-name": n,
                 "shutting-down": False}
                for i, n in (("en", "n"), ("eb", "b"), ("ea", "a"))]
        check(r.get("return") == want, "query-block-exports, newest first")
        if r.get("return") != want:
            diag(json.dumps(r))

        # ---- clients ----
        r = run(["nbdinfo", "--list", "--json", uri % ""])
        listed = json.loads(r.stdout)["exports"] if r.returncode == 0 \
            else []
        names = [e["export-name"] for e in listed]
        check(names == ["a", "disk-b", ""], "nbdinfo --list: a, disk-b, \"\"")
        if names != ["a", "disk-b", ""]:
            diag(r.stdout + r.stderr)
        desc = [e.get("description") for e in listed]
        check(desc == [None, "disk b", None], "descriptions as given")
        sizes = [e.get("export-size") for e in listed]
        ro = [e.get("is_read_only") for e in listed]
        check(sizes == [1 * MiB, 2 * MiB, 4 * MiB] and
              ro == [False, True, False],
              "each export's size and read-only flag")

        r = run(["qemu-io", "-f", "raw", "-c", "write -P 0x41 4096 4096",
                 uri % "a"])
        check(r.returncode == 0 and
              file_bytes(img["a"], 4096, 4096) == b"A" * 4096 and
              file_bytes(img["a"], 0, 4096) == b"a" * 4096 and
              file_bytes(img["b"], 4096, 4096) == b"b" * 4096,
              "qemu-io writes a.raw through export a, and only it")
        out = os.path.join(tmp, "copy.raw")
        r = run(["nbdcopy", uri % "disk-b", out])
        check(r.returncode == 0 and
              open(out, "rb").read() == b"b" * (2 * MiB),
              "nbdcopy reads b.raw through export disk-b")
        r = run(["qemu-io", "-f", "raw", "-c", "write 0 512",
                 uri % "disk-b"])
        check(r.returncode != 0 and
              file_bytes(img["b"], 0, 512) == b"b" * 512,
              "export disk-b refuses writes")
        r = run(["nbdinfo", uri % "zz"])
        check(r.returncode != 0, "an unknown export name is refused")

        check(error_is(q.cmd("blockdev-del", **{"node-name": "a"}),
                       "Node a is in use"),
              "blockdev-del of an exported node")

        # ---- block-export-del ----
        check(error_is(q.cmd("block-export-del", id="nope"),
                       "Export 'nope' is not found"),
              "block-export-del of a missing export")
        check(error_is(q.cmd("block-export-del", id="ea", mode="weird"),
                       "Parameter 'mode' does not accept value 'weird'"),
              "block-export-del with a bad mode")
        holder = subprocess.Popen(
            ["stdbuf", "-oL", "qemu-io", "-f", "raw", "-c",
             "read -P 0x41 4096 512",
             "-c", "sleep 60000", "-c", "read 0 512", uri % "a"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = holder.stdout.readline()
        check("read 512/512" in first, "a client holds export a")
        check(error_is(q.cmd("block-export-del", id="ea"),
                       "export 'ea' still in use"),
              "safe block-export-del of an export in use")
        check(error_is(q.cmd("block-export-del", id="ea", mode="safe"),
                       "export 'ea' still in use"),
              "mode=safe likewise")
        q.events.clear()
        check(ok_reply(q.cmd("block-export-del", id="ea", mode="hard")),
              "hard block-export-del of an export in use")
        ev = q.wait_event("BLOCK_EXPORT_DELETED")
        check(ev.get("data") == {"id": "ea"}, "BLOCK_EXPORT_DELETED ea")
        holder.kill()
        holder.wait()
        holder = None
        r = q.cmd("query-block-exports")
        check([e["id"] for e in r.get("return", [])] == ["en", "eb"],
              "ea is gone from query-block-exports")
        r = run(["nbdcopy", uri % "disk-b", out])
        check(r.returncode == 0 and
              open(out, "rb").read() == b"b" * (2 * MiB),
              "export disk-b goes on serving")
        r = run(["nbdinfo", uri % "a"])
        check(r.returncode != 0, "export a no longer answers")
        check(ok_reply(q.cmd("blockdev-del", **{"node-name": "a"})),
              "node a can be deleted once its export is gone")

        q.events.clear()
        r = q.cmd("block-export-del", id="eb")
        check(ok_reply(r) and
              [e.get("data") for e in q.events] == [{"id": "eb"}],
              "an idle export goes before block-export-del returns")

        # ---- nbd-server-stop ----
        q.events.clear()
        check(error_is(q.cmd("nbd-server-stop", x=1),
                       "Parameter 'x' is unexpected"),
              "nbd-server-stop with an argument")
        r = q.cmd("nbd-server-stop")
        check(ok_reply(r) and
              [e.get("data") for e in q.events] == [{"id": "en"}],
              "nbd-server-stop removes the last export")
        check(q.cmd("query-block-exports") == {"return": []},
              "no export left")
        check(not os.path.exists(nbd_sock), "the socket is removed")
        check(ok_reply(q.cmd("nbd-server-start", addr=unix)),
              "the server starts again")
        check(ok_reply(q.cmd("block-export-add", type="nbd", id="eb",
                             **{"node-name": "b"})),
              "and serves again")
        r = run(["nbdinfo", "--size", uri % "b"])
        check(r.returncode == 0 and r.stdout.strip() == str(2 * MiB),
              "nbdinfo through the new server")

        # ---- TLS (a PSK object) ----
        psk_dir = os.path.join(tmp, "psk")
        os.mkdir(psk_dir)
        with open(os.path.join(psk_dir, "keys.psk"), "w") as f:
            f.write("alice:" + "0123456789abcdef" * 4 + "\n")
        for oid, end in (("tls0", "server"), ("tls1", "client")):
            r = q.cmd("object-add", **{"qom-type": "tls-creds-psk",
                                       "id": oid, "endpoint": end,
                                       "dir": psk_dir})
            assert "return" in r, r
        check(ok_reply(q.cmd("nbd-server-stop")), "stop for TLS")
        check(error_is(q.cmd("nbd-server-start", addr=unix,
                             **{"tls-creds": "tls1"}),
                       "Expected TLS credentials for a server endpoint"),
              "tls-creds of a client endpoint")
        check(ok_reply(q.cmd("nbd-server-start", addr=unix,
                             **{"tls-creds": "tls0"})),
              "nbd-server-start with tls-creds")
        check(ok_reply(q.cmd("block-export-add", type="nbd", id="eb",
                             **{"node-name": "b"})),
              "an export behind TLS")
        r = run(["nbdinfo", "--size", uri % "b"])
        check(r.returncode != 0, "a plain client is refused")
        tls_uri = ("nbds+unix://alice@/b?socket=%s&tls-psk-file=%s" %
                   (nbd_sock, os.path.join(psk_dir, "keys.psk")))
        r = run(["nbdinfo", "--size", tls_uri])
        check(r.returncode == 0 and r.stdout.strip() == str(2 * MiB),
              "a client with the key is served")
        if r.returncode:
            diag(r.stderr)

        q.cmd("quit")
        rc = daemon.wait(timeout=TMO)
        check(rc == 0, "quit with an export: exit 0")
        cmdline(tmp)
    finally:
        if holder:
            holder.kill()
        if daemon.poll() is None:
            daemon.kill()
        daemon.wait()
        err = daemon.stderr.read().decode()
        if err:
            diag("daemon stderr: " + err)
        shutil.rmtree(tmp, ignore_errors=True)
    return taplib.plan()


if __name__ == "__main__":
    sys.exit(main())
