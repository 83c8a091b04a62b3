#!/usr/bin/env python3
# The daemon's node registry over QMP (issue 23): blockdev-add for file,
# host_device, raw, qcow2 (file child by name or inline, backing absent,
# null or a node-name), nbd (nbdkit over a UNIX socket, TCP and TLS-PSK)
# and null-co; query-named-block-nodes with QEMU 7.2's members, flat and
# not; blockdev-del's checks; object-add/object-del of secret,
# tls-creds-x509 and tls-creds-psk; the image locks a qcow2 node takes
# from its file node and gives back; every refusal with QEMU's class and
# message (ours, naming the option, for what QEMU has and we do not),
# each leaving no node behind and no image changed.
#
# Runs under meson with MIRROR_TOOL set; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

TOOL = os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../build/qemu-mirror-tool/mirror-tool")
# Every wait is bounded by this; the machine may be slow and busy.
TMO = 30
MiB = 1 << 20

# The members of qemu-storage-daemon 7.2's BlockDeviceInfo and of its
# ImageInfo for each driver, as its replies have them (a file node's and
# a raw node's image has dirty-flag; null-co's and nbd's have none).
INFO_MEMBERS = {
    "file", "node-name", "ro", "drv", "backing_file_depth", "encrypted",
    "detect_zeroes", "bps", "bps_rd", "bps_wr", "iops", "iops_rd",
    "iops_wr", "image", "cache", "write_threshold",
}
IMAGE_MEMBERS = {
    "file": {"virtual-size", "filename", "format", "actual-size",
             "dirty-flag"},
    "raw": {"virtual-size", "filename", "format", "actual-size",
            "dirty-flag"},
    "qcow2": {"virtual-size", "filename", "cluster-size", "format",
              "actual-size", "format-specific", "dirty-flag"},
    "null-co": {"virtual-size", "filename", "format", "actual-size"},
    "nbd": {"virtual-size", "filename", "format"},
}
QCOW2_SPECIFIC = {"compat", "compression-type", "lazy-refcounts",
                  "refcount-bits", "corrupt", "extended-l2"}

results = []


def ok(cond, name):
    name = name.replace("\n", " | ")
    results.append(bool(cond))
    print("%sok %d - %s" % ("" if cond else "not ", len(results), name))
    sys.stdout.flush()


def skip(name, why):
    results.append(True)
    print("ok %d - %s # SKIP %s" % (len(results), name, why))
    sys.stdout.flush()


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True,
                          timeout=120)


def wait_connect(path, proc):
    """A connected socket to the UNIX socket @path, once @proc listens."""
    deadline = time.monotonic() + TMO
    while True:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(path)
            return s
        except OSError:
            s.close()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("%s: nobody listens" % path)
            time.sleep(0.02)


class Daemon:
    def __init__(self, work):
        self.sock = os.path.join(work, "qmp.sock")
        self.proc = subprocess.Popen([TOOL, "daemon", "--qmp", self.sock],
                                     stderr=subprocess.PIPE, text=True)
        self.s = wait_connect(self.sock, self.proc)
        self.s.settimeout(TMO)
        self.f = self.s.makefile("rw")
        json.loads(self.f.readline())
        self.cmd("qmp_capabilities")

    def cmd(self, name, **args):
        msg = {"execute": name}
        if args:
            msg["arguments"] = args
        self.f.write(json.dumps(msg) + "\n")
        self.f.flush()
        while True:
            r = json.loads(self.f.readline())
            if "event" not in r:
                return r

    def quit(self):
        self.cmd("quit")
        try:
            rc = self.proc.wait(TMO)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        err = self.proc.stderr.read()
        self.f.close()
        self.s.close()
        return rc, err


def add(d, **args):
    return d.cmd("blockdev-add", **args)


def nodes(d, flat=True):
    return {n["node-name"]: n for n in
            d.cmd("query-named-block-nodes", flat=flat)["return"]}


def err(r):
    e = r.get("error", {})
    return (e.get("class"), e.get("desc"))


def generic(desc):
    return ("GenericError", desc)


def digest(paths):
    out = []
    for p in paths:
        with open(p, "rb") as f:
            out.append(hashlib.sha256(f.read()).hexdigest())
    return out


def refused(d, images, args, want, name, cmd="blockdev-add"):
    """@args refused with @want, and nothing left behind: the same nodes,
    no image changed."""
    before_nodes = sorted(nodes(d))
    before = digest(images)
    r = d.cmd(cmd, **args)
    ok(err(r) == want, "%s: %s (got %s)" % (name, want[1], err(r)))
    ok(sorted(nodes(d)) == before_nodes and digest(images) == before,
       "%s: no node left behind, no image changed" % name)


def shape_ok(n):
    """Does the node @n have qsd 7.2's members for its driver?"""
    image = set(n["image"]) - {"backing-image", "backing-filename",
                                "backing-filename-format",
                                "full-backing-filename"}
    good = (set(n) - {"backing_file"} == INFO_MEMBERS and
            image == IMAGE_MEMBERS[n["drv"]] and
            set(n["cache"]) == {"writeback", "direct", "no-flush"} and
            all(isinstance(n[k], int) and n[k] == 0 for k in
                ("bps", "bps_rd", "bps_wr", "iops", "iops_rd", "iops_wr",
                 "write_threshold")) and
            isinstance(n["ro"], bool) and n["detect_zeroes"] == "off")
    if n["drv"] == "qcow2":
        good = good and \
            set(n["image"]["format-specific"]["data"]) == QCOW2_SPECIFIC
    return good


def locked(path):
    """Does another user hold write on the qcow2 image @path?  (qemu-img
    info's qcow2 node does not share write on its file: it is refused.)"""
    r = run("qemu-img", "info", "-f", "qcow2", path)
    return r.returncode != 0 and "lock" in r.stderr


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def nbdkit(work, *args):
    """nbdkit serving a 4 MiB memory export "exp"; returns the process
    once it accepts connections (the UNIX socket or the TCP port)."""
    # A new name each time: nbdkit leaves its socket file behind.
    sock = os.path.join(work, "nbdkit%d.sock" % len(results))
    cmd = ["nbdkit", "-f", "--exit-with-parent", "-e", "exp"]
    if "-p" not in args:
        cmd += ["-U", sock]
    p = subprocess.Popen(cmd + list(args) + ["memory", "4M"],
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TMO
    while True:
        try:
            if "-p" in args:
                port = int(args[args.index("-p") + 1])
                socket.create_connection(("127.0.0.1", port), 1).close()
            else:
                wait_connect(sock, p).close()
            return p, sock
        except (OSError, RuntimeError):
            if time.monotonic() > deadline or p.poll() is not None:
                raise
            time.sleep(0.02)


def test_file(d, work, raw, lone):
    r = add(d, **{"driver": "file", "node-name": "f", "filename": raw})
    ok(r == {"return": {}}, "file: added")
    n = nodes(d).get("f", {})
    ok(shape_ok(n), "file: qsd 7.2's members")
    ok(n.get("drv") == "file" and n.get("ro") is False and
       n.get("file") == raw and n["image"]["format"] == "file" and
       n["image"]["virtual-size"] == MiB and
       n["cache"] == {"writeback": True, "direct": False,
                      "no-flush": False},
       "file: drv, ro, file, format, size, cache")
    ok(d.cmd("blockdev-del", **{"node-name": "f"}) == {"return": {}} and
       "f" not in nodes(d), "file: deleted")

    add(d, **{"driver": "file", "node-name": "f", "filename": lone})
    ok(locked(lone), "file: a writable file node holds write")
    d.cmd("blockdev-del", **{"node-name": "f"})
    ok(not locked(lone), "file: deleted, and its locks with it")
    r = add(d, **{"driver": "file", "node-name": "fro", "filename": lone,
                  "read-only": True})
    n = nodes(d).get("fro", {})
    ok(r == {"return": {}} and n.get("ro") is True and not locked(lone),
       "file: read-only, no writer's locks")
    d.cmd("blockdev-del", **{"node-name": "fro"})

    r = add(d, **{"driver": "file", "node-name": "fd", "filename": raw,
                  "cache": {"direct": True}})
    if "error" in r:
        skip("file: cache.direct", err(r)[1])
    else:
        ok(nodes(d)["fd"]["cache"]["direct"] is True,
           "file: cache.direct shown")
        d.cmd("blockdev-del", **{"node-name": "fd"})

    r = add(d, **{"driver": "file", "node-name": "fl", "filename": lone,
                  "locking": "off"})
    ok(r == {"return": {}} and not locked(lone), "file: locking off")
    d.cmd("blockdev-del", **{"node-name": "fl"})

    if os.geteuid() == 0:
        skip("file: auto-read-only", "root may write any file")
    else:
        ro = os.path.join(work, "ro.img")
        shutil.copy(raw, ro)
        os.chmod(ro, 0o444)
        r = add(d, **{"driver": "file", "node-name": "fa", "filename": ro,
                      "auto-read-only": True})
        ok(r == {"return": {}} and nodes(d)["fa"]["ro"] is True,
           "file: auto-read-only opens read-only")
        d.cmd("blockdev-del", **{"node-name": "fa"})


def test_raw(d, raw):
    add(d, **{"driver": "file", "node-name": "f", "filename": raw})
    r = add(d, **{"driver": "raw", "node-name": "r", "file": "f"})
    n = nodes(d)
    ok(r == {"return": {}} and shape_ok(n["r"]) and
       n["r"]["drv"] == "raw" and n["r"]["image"]["format"] == "raw" and
       n["r"]["image"]["virtual-size"] == MiB,
       "raw over a file node: qsd's members, format raw")
    ok(err(d.cmd("blockdev-del", **{"node-name": "f"})) ==
       generic("Block device f is in use"), "raw: its file is in use")
    ok(d.cmd("blockdev-del", **{"node-name": "r"}) == {"return": {}} and
       d.cmd("blockdev-del", **{"node-name": "f"}) == {"return": {}} and
       not nodes(d), "raw: deleted, then its file")

    add(d, **{"driver": "file", "node-name": "fro", "filename": raw,
              "read-only": True})
    refused(d, [raw], {"driver": "raw", "node-name": "r", "file": "fro"},
            generic("Block node is read-only"),
            "raw: a writer over a read-only file")
    d.cmd("blockdev-del", **{"node-name": "fro"})

    r = add(d, **{"driver": "raw", "node-name": "r",
                  "file": {"driver": "file", "filename": raw}})
    n = nodes(d)
    implicit = [k for k in n if k != "r"]
    ok(r == {"return": {}} and len(implicit) == 1 and
       re.fullmatch(r"#block\d{3,}", implicit[0]) and
       n[implicit[0]]["drv"] == "file",
       "raw: an inline file is an implicit #blockNNN node (%s)" % implicit)
    ok(list(n)[0] == "r", "raw: listed newest first")
    if implicit:
        ok(err(d.cmd("blockdev-del", **{"node-name": implicit[0]})) ==
           generic("Node %s is not owned by the monitor" % implicit[0]),
           "raw: its implicit file is not the monitor's")
    d.cmd("blockdev-del", **{"node-name": "r"})
    ok(not nodes(d), "raw: the implicit file went with it")

    r = add(d, **{"driver": "raw", "node-name": "r", "read-only": True,
                  "file": {"driver": "file", "filename": raw,
                           "node-name": "inl"}})
    n = nodes(d)
    ok(r == {"return": {}} and n.get("inl", {}).get("ro") is True,
       "raw: an inline child inherits read-only")
    ok(err(d.cmd("blockdev-del", **{"node-name": "inl"})) ==
       generic("Node inl is not owned by the monitor"),
       "raw: a named inline child is not the monitor's either")
    d.cmd("blockdev-del", **{"node-name": "r"})
    ok(not nodes(d), "raw: the named inline child went with it")


def test_qcow2(d, work, base, top, lone):
    add(d, **{"driver": "file", "node-name": "tf", "filename": top})
    r = add(d, **{"driver": "qcow2", "node-name": "t", "file": "tf"})
    n = nodes(d)
    ok(r == {"return": {}} and shape_ok(n["t"]) and
       n["t"]["image"]["format"] == "qcow2" and
       n["t"]["image"]["virtual-size"] == 2 * MiB and
       n["t"]["image"]["cluster-size"] == 65536,
       "qcow2 over a file node: qsd's members, format, sizes")
    ok(n["t"].get("backing_file") == base and
       n["t"]["backing_file_depth"] == 1 and
       n["t"]["image"].get("backing-filename") == "base.qcow2" and
       n["t"]["image"].get("full-backing-filename") == base,
       "qcow2: the image's own backing file, absent 'backing'")
    names = list(n)
    ok(len(names) == 4 and names[2:] == ["t", "tf"] and
       all(re.fullmatch(r"#block\d{3,}", k) for k in names[:2]) and
       n[names[0]]["drv"] == "qcow2" and n[names[0]]["ro"] is True and
       n[names[0]]["file"] == base and n[names[1]]["drv"] == "file" and
       n[names[1]]["file"] == base and shape_ok(n[names[0]]),
       "qcow2: its backing file as implicit nodes, listed as QEMU's (%s)" %
       names)
    ok(nodes(d, flat=False)["t"]["image"].get("backing-image", {})
       .get("filename") == base, "qcow2: the implicit backing-image")
    if len(names) == 4:
        ok(err(d.cmd("blockdev-del", **{"node-name": names[0]})) ==
           generic("Node %s is not owned by the monitor" % names[0]),
           "qcow2: its implicit backing is not the monitor's")
    ok(locked(top), "qcow2: its image is locked")
    ok(err(d.cmd("blockdev-del", **{"node-name": "tf"})) ==
       generic("Block device tf is in use"), "qcow2: its file is in use")
    refused(d, [top], {"driver": "qcow2", "node-name": "t2", "file": "tf"},
            generic("Conflicts with use by 't2': node 'tf' has another "
                    "user, and a qcow2 node does not share 'write' on its "
                    "file"), "qcow2: a second qcow2 over one file node")
    refused(d, [top], {"driver": "raw", "node-name": "r2", "file": "tf"},
            generic("Conflicts with use by 'r2': node 'tf' is the file of "
                    "a format node, which does not share 'write'"),
            "qcow2: a writable raw beside it")
    ok(d.cmd("blockdev-del", **{"node-name": "t"}) == {"return": {}} and
       sorted(nodes(d)) == ["tf"],
       "qcow2: deleted, with its implicit backing nodes")
    ok(locked(top), "qcow2: the file node has its locks back")
    d.cmd("blockdev-del", **{"node-name": "tf"})
    ok(not nodes(d) and not locked(top), "qcow2: all locks gone")

    r = add(d, **{"driver": "qcow2", "node-name": "t", "backing": None,
                  "file": {"driver": "file", "filename": top}})
    n = nodes(d)
    ok(r == {"return": {}} and len(n) == 2 and
       "backing_file" not in n["t"] and n["t"]["backing_file_depth"] == 0,
       "qcow2: backing null, over an inline file")
    d.cmd("blockdev-del", **{"node-name": "t"})
    ok(not nodes(d), "qcow2: its inline file went with it")
    sums = [run(TOOL, "checksum", *args).stdout.split()[:1] for args in
            (["--open-opts", "backing=none", top], [top], [lone])]
    ok(sums[0] and sums[0] == sums[2] and sums[0] != sums[1],
       "qcow2 node option backing=none: reads zeroes, not the backing file")
    r = run(TOOL, "checksum", "--open-opts", "backing=bogus", top)
    ok(r.returncode == 2 and "backing 'bogus': expected none" in r.stderr,
       "qcow2 node option backing=bogus refused")
    r = add(d, **{"driver": "qcow2", "node-name": "t", "backing": "",
                  "file": {"driver": "file", "filename": top}})
    ok(r == {"return": {}} and len(nodes(d)) == 2,
       "qcow2: backing \"\" (the command line's null) is null")
    d.cmd("blockdev-del", **{"node-name": "t"})

    add(d, **{"driver": "file", "node-name": "bf", "filename": base,
              "read-only": True})
    add(d, **{"driver": "qcow2", "node-name": "b", "file": "bf",
              "read-only": True})
    r = add(d, **{"driver": "qcow2", "node-name": "t", "backing": "b",
                  "file": {"driver": "file", "filename": top}})
    ok(r == {"return": {}}, "qcow2: backing by node-name")
    ok(err(d.cmd("blockdev-del", **{"node-name": "b"})) ==
       generic("Block device b is in use"), "qcow2: its backing is in use")
    full = nodes(d, flat=False)["t"]["image"]
    flat = nodes(d, flat=True)["t"]["image"]
    ok(full.get("backing-image", {}).get("filename") == base and
       full["backing-image"].get("format") == "qcow2" and
       "backing-image" not in flat,
       "query: backing-image unless flat")
    d.cmd("blockdev-del", **{"node-name": "t"})
    refused(d, [base, top, lone],
            {"driver": "qcow2", "node-name": "t", "backing": "b",
             "file": {"driver": "file", "filename": lone}},
            generic("Parameter 'backing': node 'b' is not the image's "
                    "backing file, which mirror-tool's qcow2 driver opens "
                    "itself"), "qcow2: a backing node of another image")
    d.cmd("blockdev-del", **{"node-name": "b"})
    d.cmd("blockdev-del", **{"node-name": "bf"})
    ok(not nodes(d) and not locked(lone), "qcow2: everything gone")


def test_nbd(d, work):
    p, sock = nbdkit(work)
    r = add(d, **{"driver": "nbd", "node-name": "n", "export": "exp",
                  "server": {"type": "unix", "path": sock}})
    n = nodes(d).get("n", {})
    ok(r == {"return": {}} and shape_ok(n) and n["drv"] == "nbd" and
       n["image"]["virtual-size"] == 4 * MiB and
       n["file"] == "nbd+unix:///exp?socket=" + sock,
       "nbd over a UNIX socket: qsd's members, size, URI")
    r = add(d, **{"driver": "nbd", "node-name": "n2", "export": "exp",
                  "read-only": True, "reconnect-delay": 5,
                  "server": {"type": "unix", "path": sock}})
    ok(r == {"return": {}} and nodes(d)["n2"]["ro"] is True,
       "nbd: read-only, reconnect-delay")
    d.cmd("blockdev-del", **{"node-name": "n"})
    d.cmd("blockdev-del", **{"node-name": "n2"})
    p.terminate()
    p.wait()

    port = str(free_port())
    p, _ = nbdkit(work, "-i", "127.0.0.1", "-p", port)
    r = add(d, **{"driver": "nbd", "node-name": "n", "export": "exp",
                  "server": {"type": "inet", "host": "127.0.0.1",
                             "port": port}})
    ok(r == {"return": {}} and
       nodes(d)["n"]["file"] == "nbd://127.0.0.1:%s/exp" % port,
       "nbd over TCP")
    d.cmd("blockdev-del", **{"node-name": "n"})
    p.terminate()
    p.wait()

    psk = os.path.join(work, "psk")
    os.mkdir(psk)
    run("psktool", "-u", "alice", "-p", os.path.join(psk, "keys.psk"))
    p, sock = nbdkit(work, "--tls=require",
                     "--tls-psk=" + os.path.join(psk, "keys.psk"))
    nontls = add(d, **{"driver": "nbd", "node-name": "n", "export": "exp",
                       "server": {"type": "unix", "path": sock}})
    ok("error" in nontls and not nodes(d),
       "nbd: a TLS-only server refuses a plain client")
    r = d.cmd("object-add", **{"qom-type": "tls-creds-psk", "id": "tc",
                               "dir": psk, "username": "alice"})
    ok(r == {"return": {}}, "object-add tls-creds-psk (client)")
    r = add(d, **{"driver": "nbd", "node-name": "n", "export": "exp",
                  "tls-creds": "tc",
                  "server": {"type": "unix", "path": sock}})
    ok(r == {"return": {}} and nodes(d)["n"]["image"]["virtual-size"] ==
       4 * MiB, "nbd with tls-creds (PSK)")
    ok(d.cmd("object-del", id="tc") == {"return": {}} and "n" in nodes(d),
       "object-del of credentials in use succeeds, as QEMU's")
    d.cmd("blockdev-del", **{"node-name": "n"})
    p.terminate()
    p.wait()

    d.cmd("object-add", **{"qom-type": "tls-creds-psk", "id": "ts",
                           "dir": psk, "endpoint": "server"})
    d.cmd("object-add", **{"qom-type": "secret", "id": "sec",
                           "data": "x"})
    for creds, want in (("nope", "No TLS credentials with id 'nope'"),
                        ("sec", "Object with id 'sec' is not TLS "
                         "credentials"),
                        ("ts", "Expected TLS credentials for a client "
                         "endpoint")):
        refused(d, [], {"driver": "nbd", "node-name": "n",
                        "tls-creds": creds,
                        "server": {"type": "unix", "path": sock}},
                generic(want), "nbd: tls-creds %s" % creds)
    d.cmd("object-del", id="ts")
    d.cmd("object-del", id="sec")


def make_pki(work):
    """A CA and a server certificate for localhost (pki: qemu-nbd's
    layout), the CA alone (cli) and another CA (other)."""
    dirs = [os.path.join(work, x) for x in ("pki", "cli", "other")]
    tmpl = os.path.join(work, "t.info")
    for x in dirs:
        os.mkdir(x)

    def certtool(text, *args):
        with open(tmpl, "w") as f:
            f.write(text + "expiration_days = 2\n")
        subprocess.run(["certtool", "--template", tmpl] + list(args),
                       capture_output=True, check=True)

    for x in (dirs[0], dirs[2]):
        with open(x + "/ca-key.pem", "w") as f:
            subprocess.run(["certtool", "--generate-privkey",
                            "--key-type=ecdsa"], stdout=f,
                           stderr=subprocess.DEVNULL, check=True)
        certtool("cn = Test CA\nca\ncert_signing_key\n",
                 "--generate-self-signed", "--load-privkey",
                 x + "/ca-key.pem", "--outfile", x + "/ca-cert.pem")
    shutil.copy(dirs[0] + "/ca-key.pem", dirs[0] + "/server-key.pem")
    certtool("cn = localhost\ndns_name = localhost\ntls_www_server\n"
             "encryption_key\nsigning_key\n", "--generate-certificate",
             "--load-ca-certificate", dirs[0] + "/ca-cert.pem",
             "--load-ca-privkey", dirs[0] + "/ca-key.pem",
             "--load-privkey", dirs[0] + "/server-key.pem",
             "--outfile", dirs[0] + "/server-cert.pem")
    shutil.copy(dirs[0] + "/ca-cert.pem", dirs[1])
    return dirs


def test_nbd_x509(d, work):
    pki, cli, other = make_pki(work)
    port = str(free_port())
    p, _ = nbdkit(work, "-i", "127.0.0.1", "-p", port, "--tls=require",
                  "--tls-certificates=" + pki)
    server = {"type": "inet", "host": "localhost", "port": port}
    r = d.cmd("object-add", **{"qom-type": "tls-creds-x509", "id": "srv",
                               "dir": pki, "endpoint": "server"})
    ok(r == {"return": {}}, "object-add tls-creds-x509 (server)")
    for creds_id, creds_dir, verify, good in (
            ("ca", cli, True, True), ("wrong", other, True, False),
            ("noverify", other, False, True)):
        d.cmd("object-add", **{"qom-type": "tls-creds-x509",
                               "id": creds_id, "dir": creds_dir,
                               "verify-peer": verify})
        r = add(d, **{"driver": "nbd", "node-name": "x", "export": "exp",
                      "tls-creds": creds_id, "server": server})
        ok((r == {"return": {}}) == good and
           ("x" in nodes(d)) == good,
           "nbd with tls-creds x509: %s CA, verify-peer %s: %s" %
           ("its" if creds_dir == cli else "another", verify,
            "connects" if good else "refused"))
        d.cmd("blockdev-del", **{"node-name": "x"})
        d.cmd("object-del", id=creds_id)
    d.cmd("object-del", id="srv")
    p.terminate()
    p.wait()


def test_null(d):
    r = add(d, **{"driver": "null-co", "node-name": "z"})
    n = nodes(d).get("z", {})
    ok(r == {"return": {}} and shape_ok(n) and
       n["image"]["virtual-size"] == 1 << 30 and
       n["file"] == "null-co://" and n["image"]["actual-size"] == 0,
       "null-co: qsd's members, 1 GiB by default")
    r = add(d, **{"driver": "null-co", "node-name": "z2", "size": MiB,
                  "latency-ns": 1000, "read-zeroes": True})
    ok(r == {"return": {}} and
       nodes(d)["z2"]["image"]["virtual-size"] == MiB,
       "null-co: size, latency-ns, read-zeroes")
    d.cmd("blockdev-del", **{"node-name": "z"})
    d.cmd("blockdev-del", **{"node-name": "z2"})


def test_errors(d, work, raw, top):
    imgs = [raw, top]
    cases = [
        ({"driver": "file", "filename": raw},
         "'node-name' must be specified for the root node"),
        ({"node-name": "x"}, "Parameter 'driver' is missing"),
        ({"driver": "bogus", "node-name": "x"},
         "Parameter 'driver' does not accept value 'bogus'"),
        ({"driver": "vmdk", "node-name": "x"},
         "Parameter 'driver' value 'vmdk' is not supported by mirror-tool "
         "(it supports: file, host_device, raw, qcow2, nbd, null-co)"),
        ({"driver": "file", "node-name": "x"},
         "Parameter 'filename' is missing"),
        ({"driver": "file", "node-name": "x", "filename": 5},
         "Invalid parameter type for 'filename', expected: string"),
        ({"driver": "file", "node-name": "x", "filename": raw,
          "bogus": 1}, "Parameter 'bogus' is unexpected"),
        ({"driver": "file", "node-name": "#x", "filename": raw},
         "Invalid node-name: '#x'"),
        ({"driver": "null-co", "node-name": "a" * 32}, "Node name too long"),
        ({"driver": "file", "node-name": "x",
          "filename": os.path.join(work, "nonexist")},
         "Could not open '%s': No such file or directory" %
         os.path.join(work, "nonexist")),
        ({"driver": "host_device", "node-name": "x", "filename": raw},
         "'host_device' driver requires '%s' to be either a character or "
         "block device" % raw),
        ({"driver": "file", "node-name": "x", "filename": raw,
          "locking": "maybe"},
         "Parameter 'locking' does not accept value 'maybe'"),
        ({"driver": "file", "node-name": "x", "filename": raw,
          "aio": "native"},
         "Parameter 'aio' value 'native' is not supported by mirror-tool "
         "(it supports: threads)"),
        ({"driver": "file", "node-name": "x", "filename": raw,
          "read-only": "yes"},
         "Invalid parameter type for 'read-only', expected: boolean"),
        ({"driver": "file", "node-name": "x", "filename": raw,
          "drop-cache": False},
         "Parameter 'drop-cache' is not supported by mirror-tool"),
        ({"driver": "null-co", "node-name": "x", "force-share": True},
         "force-share=on can only be used with read-only images"),
        ({"driver": "null-co", "node-name": "x", "size": "1M"},
         "Invalid parameter type for 'size', expected: integer"),
        ({"driver": "null-co", "node-name": "x", "size": -1},
         "Parameter 'size' expects a non-negative number below 2^64"),
        ({"driver": "null-co", "node-name": "x", "cache": 5},
         "Invalid parameter type for 'cache', expected: object"),
        ({"driver": "null-co", "node-name": "x",
          "cache": {"no-flush": True}},
         "Parameter 'cache.no-flush' value true is not supported by "
         "mirror-tool"),
        ({"driver": "raw", "node-name": "x"},
         "Parameter 'file' is missing"),
        ({"driver": "raw", "node-name": "x", "file": 5},
         "Invalid parameter type for 'file', expected: BlockdevRef"),
        ({"driver": "raw", "node-name": "x", "file": "nope"},
         "Cannot find device='nope' nor node-name='nope'"),
        ({"driver": "raw", "node-name": "x", "file": "f", "offset": 512},
         "Parameter 'offset' is not supported by mirror-tool"),
        ({"driver": "raw", "node-name": "x",
          "file": {"filename": raw}}, "Parameter 'file.driver' is missing"),
        ({"driver": "raw", "node-name": "x",
          "file": {"driver": "file", "filename": raw, "bogus": 1}},
         "Parameter 'file.bogus' is unexpected"),
        ({"driver": "raw", "node-name": "x",
          "file": {"driver": "file", "filename": raw,
                   "cache": {"bogus": True}}},
         "Parameter 'file.cache.bogus' is unexpected"),
        ({"driver": "raw", "node-name": "x",
          "file": {"driver": "file", "filename": raw, "node-name": "x"}},
         "Duplicate nodes with node-name='x'"),
        ({"driver": "qcow2", "node-name": "x",
          "file": {"driver": "file", "filename": top},
          "cache": {"direct": True}},
         "Parameter 'cache.direct' is not supported by mirror-tool for "
         "qcow2 images"),
        ({"driver": "qcow2", "node-name": "x", "lazy-refcounts": True,
          "file": {"driver": "file", "filename": top}},
         "Parameter 'lazy-refcounts' is not supported by mirror-tool"),
        ({"driver": "nbd", "node-name": "x"},
         "Parameter 'server' is missing"),
        ({"driver": "nbd", "node-name": "x", "server": 5},
         "Invalid parameter type for 'server', expected: object"),
        ({"driver": "nbd", "node-name": "x", "server": {"type": "bogus"}},
         "Parameter 'type' does not accept value 'bogus'"),
        ({"driver": "nbd", "node-name": "x", "server": {"type": "unix"}},
         "Parameter 'server.path' is missing"),
        ({"driver": "nbd", "node-name": "x",
          "server": {"type": "unix", "path": "/x", "bogus": 1}},
         "Parameter 'server.bogus' is unexpected"),
        ({"driver": "nbd", "node-name": "x",
          "server": {"type": "inet", "host": "h"}},
         "Parameter 'server.port' is missing"),
        ({"driver": "nbd", "node-name": "x",
          "server": {"type": "inet", "host": "h", "port": 1}},
         "Invalid parameter type for 'server.port', expected: string"),
        ({"driver": "nbd", "node-name": "x",
          "server": {"type": "unix", "path": "/x"}, "reconnect-delay": -1},
         "Parameter 'reconnect-delay' expects uint32_t"),
    ]
    add(d, **{"driver": "file", "node-name": "f", "filename": raw,
              "read-only": True})
    for args, want in cases:
        refused(d, imgs, args, generic(want),
                "blockdev-add %s" % json.dumps(args).replace(work, "W"))
    ok(err(add(d, **{"driver": "file", "node-name": "f",
                     "filename": raw})) ==
       generic("Duplicate nodes with node-name='f'"), "duplicate node-name")
    d.cmd("blockdev-del", **{"node-name": "f"})

    for args, want in (
            ({}, "Parameter 'node-name' is missing"),
            ({"node-name": 5},
             "Invalid parameter type for 'node-name', expected: string"),
            ({"node-name": "f", "bogus": 1},
             "Parameter 'bogus' is unexpected"),
            ({"node-name": "nope"},
             "Failed to find node with node-name='nope'")):
        refused(d, imgs, args, generic(want),
                "blockdev-del %s" % json.dumps(args), "blockdev-del")
    for args, want in (
            ({"flat": 5}, "Invalid parameter type for 'flat', expected: "
             "boolean"),
            ({"bogus": 1}, "Parameter 'bogus' is unexpected")):
        ok(err(d.cmd("query-named-block-nodes", **args)) == generic(want),
           "query-named-block-nodes %s" % json.dumps(args))


def test_objects(d, work):
    sec = os.path.join(work, "secret.txt")
    with open(sec, "w") as f:
        f.write("secret123")
    empty = os.path.join(work, "empty")
    os.mkdir(empty)
    good = (
        {"qom-type": "secret", "id": "s1", "data": "abc"},
        {"qom-type": "secret", "id": "s2", "file": sec},
        {"qom-type": "secret", "id": "s3", "data": "YWJj",
         "format": "base64"},
    )
    for args in good:
        ok(d.cmd("object-add", **args) == {"return": {}},
           "object-add %s" % json.dumps(args).replace(work, "W"))
    cases = (
        ({"qom-type": "secret", "id": "s1", "data": "abc"},
         "attempt to add duplicate property 's1' to object (type "
         "'container')"),
        ({"qom-type": "secret", "id": "x"},
         "Either 'file' or 'data' must be provided"),
        ({"qom-type": "secret", "id": "x", "data": "a", "file": sec},
         "'file' and 'data' are mutually exclusive"),
        ({"qom-type": "secret", "id": "x", "data": "!!",
          "format": "base64"}, "Base64 data contains invalid characters"),
        ({"qom-type": "secret", "id": "x", "data": "a", "format": "bogus"},
         "Parameter 'format' does not accept value 'bogus'"),
        ({"qom-type": "secret", "id": "x", "data": "a", "bogus": 1},
         "Parameter 'bogus' is unexpected"),
        ({"qom-type": "secret", "id": "x", "data": "a", "keyid": "s1"},
         "Parameter 'keyid' is not supported by mirror-tool"),
        ({"qom-type": "bogus", "id": "x"},
         "Parameter 'qom-type' does not accept value 'bogus'"),
        ({"qom-type": "secret"}, "Parameter 'id' is missing"),
        ({"id": "x"}, "Parameter 'qom-type' is missing"),
        ({"qom-type": "secret", "id": "#x", "data": "a"},
         "Parameter 'id' expects an identifier"),
        ({"qom-type": "tls-creds-x509", "id": "x"},
         "Missing 'dir' property value"),
        ({"qom-type": "tls-creds-x509", "id": "x", "dir": empty},
         "Unable to access credentials %s/ca-cert.pem: No such file or "
         "directory" % empty),
        ({"qom-type": "tls-creds-psk", "id": "x", "dir": empty,
          "endpoint": "server"},
         "Unable to access credentials %s/keys.psk: No such file or "
         "directory" % empty),
        ({"qom-type": "tls-creds-psk", "id": "x", "dir": empty,
          "endpoint": "bogus"},
         "Parameter 'endpoint' does not accept value 'bogus'"),
    )
    for args, want in cases:
        r = d.cmd("object-add", **args)
        ok(err(r) == generic(want),
           "object-add %s: %s" % (json.dumps(args).replace(work, "W"),
                                  err(r)[1]))
    r = d.cmd("object-add", id="x", **{"qom-type": "secret", "file":
                                        os.path.join(work, "nonexist")})
    ok(err(r)[1] and err(r)[1].startswith(
        "Unable to read %s: " % os.path.join(work, "nonexist")),
       "object-add secret: a missing file")
    for i in ("s1", "s2", "s3"):
        ok(d.cmd("object-del", id=i) == {"return": {}}, "object-del " + i)
    ok(err(d.cmd("object-del", id="s1")) ==
       generic("object 's1' not found"), "object-del: unknown id")
    ok(err(d.cmd("object-del")) == generic("Parameter 'id' is missing"),
       "object-del: no id")


def main():
    for prog in ("qemu-img", "qemu-io", "nbdkit", "psktool", "certtool"):
        if not shutil.which(prog):
            print("1..0 # SKIP %s is not installed" % prog)
            return 0
    work = tempfile.mkdtemp(prefix="test-daemon-block-")
    raw = os.path.join(work, "raw.img")
    base = os.path.join(work, "base.qcow2")
    top = os.path.join(work, "top.qcow2")
    lone = os.path.join(work, "lone.qcow2")
    run("qemu-img", "create", "-f", "raw", raw, "1M")
    run("qemu-img", "create", "-f", "qcow2", base, "2M")
    run("qemu-io", "-c", "write -P 0xaa 0 64k", base)
    run("qemu-img", "create", "-f", "qcow2", "-b", "base.qcow2", "-F",
        "qcow2", top)
    run("qemu-img", "create", "-f", "qcow2", lone, "2M")
    d = Daemon(work)
    try:
        test_file(d, work, raw, lone)
        test_raw(d, raw)
        test_qcow2(d, work, base, top, lone)
        test_nbd(d, work)
        test_nbd_x509(d, work)
        test_null(d)
        test_errors(d, work, raw, top)
        test_objects(d, work)
    finally:
        rc, stderr = d.quit()
    ok(rc == 0 and not stderr, "daemon: quit, exit 0, nothing on stderr "
       "(%d, %r)" % (rc, stderr[-300:]))
    shutil.rmtree(work)
    print("1..%d" % len(results))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
