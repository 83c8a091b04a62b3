#!/usr/bin/env python3
# Hostile QMP clients against `mirror-tool daemon` (issue 23): no client
# may crash the daemon, hang it, grow its memory without bound or take
# more than its share.  Each part drives a real daemon through hostile
# sequences and checks after each step that it still answers
# query-version, that what must fail fails with GenericError, and at the
# end that it exits 0:
#   - wrong types in every nested position of blockdev-add,
#     nbd-server-start, block-export-add and blockdev-mirror, unknown
#     members at depth, huge names; 1000 nodes added and deleted with
#     the memory and descriptors coming back;
#   - deletion while in use: exported nodes, a job's nodes, a qcow2's
#     file, TLS objects in use, block-export-del and nbd-server-stop
#     with clients mid-transfer and with a client that never reads;
#     quit and SIGTERM with a READY job, a PENDING job and a client
#     holding a writable export: exit 0 and the client's data in the
#     file;
#   - job commands in every wrong state, jobs sharing nodes, mirror to
#     itself, cancel in PENDING, dismiss twice.
#
# Runs under meson with MIRROR_TOOL set; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import nbdraw
import taplib
from qmpclient import QmpClient, QmpError
from taplib import check, diag

MiB = 1 << 20
TOOL = os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../build/qemu-mirror-tool/mirror-tool")
# Every wait is bounded by this; the machine may be slow and busy (and
# the ASan build is slower still).
TMO = 60
# Values of the wrong type for any member, and a huge string: 128 KiB,
# under the daemon's 1 MiB request line limit (past which it drops the
# client) and small enough that a job's events with such an id stay
# under its 1 MiB of unread output (past which it reads no request
# until the client reads: this synchronous client would deadlock in its
# sendall()).
HUGE = "x" * (1 << 17)
BAD_VALUES = [1, -1, 1 << 70, 1.5, True, None, [], [1, "a"], {},
              {"x": {"y": []}}, HUGE]


class Daemon:
    """One `mirror-tool daemon --qmp` with a negotiated client."""

    def __init__(self, tmp, name):
        self.tmp = tmp
        self.qmp_path = os.path.join(tmp, name + ".qmp")
        self.err_path = os.path.join(tmp, name + ".err")
        self.err = open(self.err_path, "wb")
        self.p = subprocess.Popen([TOOL, "daemon", "--qmp", self.qmp_path],
                                  stdout=subprocess.DEVNULL,
                                  stderr=self.err)
        self.q = QmpClient(self.qmp_path, TMO,
                           alive=lambda: self.p.poll() is None)
        r = self.q.command("qmp_capabilities")
        assert r == {"return": {}}, r

    def cmd(self, name, args=None):
        """The reply, or {"broken": why} once the connection is gone."""
        try:
            return self.q.command(name, args)
        except (QmpError, OSError) as e:
            return {"broken": str(e)}

    def alive(self):
        r = self.cmd("query-version")
        return "return" in r and self.p.poll() is None

    def rss_kib(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.p.pid))

    def finish(self, how="quit"):
        """Stop the daemon by @how (quit, or a signal number); its exit
        code, None if it did not exit in time (then it is killed)."""
        if how == "quit":
            self.cmd("quit")
        elif self.p.poll() is None:
            self.p.send_signal(how)
        try:
            rc = self.p.wait(timeout=TMO)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        self.q.close()
        self.err.close()
        with open(self.err_path, errors="replace") as f:
            err = f.read()
        if rc != 0 and err:
            diag("daemon stderr: " + err[-4000:])
        return rc

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def short(v):
    s = json.dumps(v)
    return s if len(s) < 300 else s[:290] + "...(%d)" % len(s)


def is_error(r):
    """An error of QEMU's classes for bad arguments and missing jobs."""
    if "error" in r and r["error"].get("class") in (
            "GenericError", "DeviceNotActive", "CommandNotFound"):
        return True
    diag("expected a GenericError, got " + short(r))
    return False


def ok(r):
    if r.get("return") == {}:
        return True
    diag("got " + short(r))
    return False


def image(tmp, name, size, fill=b"\0"):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        if fill == b"\0":
            f.truncate(size)
        else:
            f.write(fill * size)
    return path


def run(cmd, timeout=TMO):
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=timeout)


def mutations(args, path=()):
    """Every (path, args') with one member of @args, at any depth,
    replaced by each BAD_VALUE, and one unknown member added to each
    object."""
    for k, v in args.items():
        for bad in BAD_VALUES:
            if bad == v and type(bad) is type(v):
                continue
            yield path + (k,), dict(args, **{k: bad})
        if isinstance(v, dict):
            for p, sub in mutations(v, path + (k,)):
                yield p, dict(args, **{k: sub})
    yield path + ("x-unknown",), dict(args, **{"x-unknown": {"a": [1]}})


def valid_type(base, path, val):
    """Whether @val may be valid where @path is in @base: a value of the
    original member's type and in range (QEMU takes any well-formed id
    of any length, a secret of any size), or a qcow2's backing null."""
    orig = base
    for k in path:
        orig = orig.get(k) if isinstance(orig, dict) else None
    if path == ("backing",) and val is None:
        return True
    if isinstance(val, int) and not isinstance(val, bool):
        return (type(orig) is int) and 0 <= val < (1 << 63)
    return orig is not None and type(val) is type(orig)


def types(tmp):
    """Wrong types in every nested position, unknown members at depth,
    huge names; the daemon answers each with an error and lives."""
    d = Daemon(tmp, "types")
    try:
        raw = image(tmp, "t.raw", MiB)
        qc = os.path.join(tmp, "t.qcow2")
        r = run(["qemu-img", "create", "-q", "-f", "qcow2", qc, "1M"])
        assert r.returncode == 0, r.stderr
        nbd_sock = os.path.join(tmp, "types.nbd")
        cases = [
            ("blockdev-add", {"driver": "raw", "node-name": "r",
                              "file": {"driver": "file", "filename": raw,
                                       "cache": {"direct": False,
                                                 "no-flush": False}}}),
            ("blockdev-add", {"driver": "qcow2", "node-name": "q",
                              "backing": "nope",
                              "file": {"driver": "file", "filename": qc}}),
            ("blockdev-add", {"driver": "nbd", "node-name": "n",
                              "export": "e",
                              "server": {"type": "unix",
                                         "path": nbd_sock}}),
            ("blockdev-add", {"driver": "nbd", "node-name": "n",
                              "server": {"type": "inet",
                                         "host": "127.0.0.1",
                                         "port": "1"}}),
            ("blockdev-add", {"driver": "null-co", "node-name": "z",
                              "size": MiB, "read-only": False,
                              "cache": {"direct": False}}),
            ("nbd-server-start", {"addr": {"type": "unix",
                                           "data": {"path": nbd_sock}},
                                  "max-connections": 0}),
            ("nbd-server-start", {"addr": {"type": "inet",
                                           "data": {"host": "127.0.0.1",
                                                    "port": "0"}}}),
            ("nbd-server-start", {"addr": {"type": "unix",
                                           "path": nbd_sock}}),
            ("block-export-add", {"type": "nbd", "id": "e",
                                  "node-name": "src", "name": "e",
                                  "writable": False,
                                  "description": "d"}),
            ("blockdev-mirror", {"job-id": "j", "device": "src",
                                 "target": "dst", "sync": "full",
                                 "speed": 0, "granularity": 65536,
                                 "buf-size": MiB,
                                 "on-source-error": "report",
                                 "auto-finalize": True}),
            ("block-export-del", {"id": "nope", "mode": "hard"}),
            ("job-finalize", {"id": "nope"}),
            ("object-add", {"qom-type": "secret", "id": "s",
                            "data": "x"}),
        ]
        # Nodes for the export and the job (which must still fail).
        for n in ("src", "dst"):
            r = d.cmd("blockdev-add", {"driver": "null-co", "node-name": n,
                                       "size": MiB})
            assert "return" in r, r
        n_err = n_ok = 0
        bad = []
        for name, base in cases:
            for path, args in mutations(base):
                r = d.cmd(name, args)
                if "broken" in r:
                    bad.append((name, path, args, r))
                    break
                val = args
                for k in path:
                    val = val.get(k) if isinstance(val, dict) else None
                if "return" in r:
                    # Only values of the right type may succeed; undo.
                    if not valid_type(base, path, val):
                        bad.append((name, path, args, r))
                    n_ok += 1
                    if name == "blockdev-add":
                        d.cmd("blockdev-del",
                              {"node-name": args["node-name"]})
                    elif name == "nbd-server-start":
                        d.cmd("nbd-server-stop")
                    elif name == "object-add":
                        d.cmd("object-del", {"id": args["id"]})
                    elif name == "blockdev-mirror":
                        d.cmd("job-cancel", {"id": args["job-id"]})
                        wait_status(d, args["job-id"], "null")
                        d.q.events.clear()
                elif r.get("error", {}).get("class") != "GenericError":
                    bad.append((name, path, args, r))
                else:
                    n_err += 1
            if not check(d.alive(), "alive after every mutation of %s %s"
                         % (name, short(base)[:60])):
                break
        for name, path, args, r in bad[:10]:
            diag("%s %s: %s -> %s" % (name, ".".join(path), short(args),
                                      short(r)))
        check(not bad, "%d mutations refused with GenericError, %d valid, "
              "%d wrong" % (n_err, n_ok, len(bad)))

        # Very long node names, ids, export names, paths: QEMU takes an id
        # of any length (job-id, object id): those may succeed.
        for name, args in [
                ("blockdev-add", {"driver": "null-co", "node-name": HUGE}),
                ("blockdev-add", {"driver": "raw", "node-name": "r",
                                  "file": HUGE}),
                ("blockdev-add", {"driver": "file", "node-name": "f",
                                  "filename": "/" + HUGE}),
                ("blockdev-del", {"node-name": HUGE}),
                ("object-add", {"qom-type": "secret", "id": HUGE,
                                "data": "x"}),
                ("object-del", {"id": HUGE}),
                ("block-export-del", {"id": HUGE}),
                ("job-cancel", {"id": HUGE}),
                ("block-job-complete", {"device": HUGE}),
                ("blockdev-mirror", {"job-id": HUGE, "device": "src",
                                     "target": "dst", "sync": "full"}),
                ("blockdev-mirror", {"job-id": "j", "device": HUGE,
                                     "target": "dst", "sync": "full"}),
                ("blockdev-mirror", {"job-id": "j", "device": "src",
                                     "target": "dst", "sync": "full",
                                     "filter-node-name": HUGE}),
                ("nbd-server-start", {"addr": {"type": "unix", "data":
                                               {"path": "/" + HUGE}}}),
                (HUGE, None), ("job-cancel", {"id": HUGE})]:
            r = d.cmd(name, args)
            may = name in ("object-add", "object-del") or \
                (args or {}).get("job-id") == HUGE
            check(("return" in r and may or is_error(r)) and d.alive(),
                  "%s with a 128 KiB name: %s, alive"
                  % (name[:20] if name != HUGE else "a 128 KiB command",
                     "done" if "return" in r else "an error"))
            if name == "blockdev-mirror" and "return" in r:
                check(ok(d.cmd("job-cancel", {"id": args["job-id"]})) and
                      wait_status(d, args["job-id"], "null"),
                      "the job with a 128 KiB id cancelled")

        # An export of a huge name: refused (4096 bytes at most).
        r = d.cmd("nbd-server-start",
                  {"addr": {"type": "unix", "data": {"path": nbd_sock}}})
        assert "return" in r, r
        check(is_error(d.cmd("block-export-add",
                             {"type": "nbd", "id": "e", "node-name": "src",
                              "name": HUGE, "description": HUGE})) and
              d.alive(), "block-export-add with a 1 MiB name")
        for name, base in cases[8:9]:
            for path, args in mutations(base):
                r = d.cmd(name, args)
                if "return" in r:
                    d.cmd("block-export-del", {"id": args["id"],
                                               "mode": "hard"})
        check(d.alive(), "block-export-add's mutations with a server")

        # 1000 nodes added and deleted: the memory and the descriptors
        # come back.
        def cycle(n):
            for i in range(n):
                r = d.cmd("blockdev-add", {"driver": "null-co",
                                           "node-name": "c%d" % i,
                                           "size": MiB})
                if "return" not in r:
                    return r
                r = d.cmd("blockdev-add",
                          {"driver": "raw", "node-name": "cr%d" % i,
                           "read-only": True,
                           "file": {"driver": "file", "filename": raw,
                                    "read-only": True}})
                if "return" not in r:
                    return r
            for i in range(n):
                for nn in ("c%d" % i, "cr%d" % i):
                    r = d.cmd("blockdev-del", {"node-name": nn})
                    if "return" not in r:
                        return r
            return None

        err = cycle(100)               # warm up allocator and caches
        rss0, fds0 = d.rss_kib(), d.fds()
        err = err or cycle(1000)
        rss1, fds1 = d.rss_kib(), d.fds()
        diag("VmRSS %d KiB -> %d KiB, fds %d -> %d over 2000 nodes"
             % (rss0, rss1, fds0, fds1))
        check(err is None, "2000 nodes added and deleted")
        if err:
            diag(short(err))
        with open("/proc/%d/maps" % d.p.pid) as f:
            asan = "libasan" in f.read()
        # ASan's quarantine keeps freed memory (256 MiB): there the leak
        # check at exit stands for this one.
        check(asan or rss1 - rss0 < 32 * 1024,
              "VmRSS came back (within 32 MiB)%s"
              % (" (not measured under ASan)" if asan else ""))
        check(fds1 == fds0, "every descriptor came back")
        check(d.cmd("query-named-block-nodes").get("return") is not None
              and len(d.cmd("query-named-block-nodes")["return"]) == 2,
              "only src and dst are left")
        check(d.finish() == 0, "types: quit, exit 0")
    finally:
        d.kill()


def job_events(d, jid, status):
    return lambda evs: any(
        e["event"] == "JOB_STATUS_CHANGE" and
        e["data"] == {"id": jid, "status": status} for e in evs)


def wait_status(d, jid, status):
    try:
        d.q.wait_for(job_events(d, jid, status), "%s %s" % (jid, status))
        return True
    except (QmpError, OSError) as e:
        diag(str(e))
        return False


def raw_pair(d, tmp, name, size=4 * MiB, fill=b"s"):
    """A raw file node NAME over an image filled with @fill; its path."""
    path = image(tmp, name + ".img", size, fill)
    r = d.cmd("blockdev-add", {"driver": "raw", "node-name": name,
                               "file": {"driver": "file",
                                        "filename": path}})
    assert "return" in r, r
    return path


def slow_src(d, name, size=64 * MiB):
    """A null-co node whose reads take 20 ms: a job on it stays RUNNING
    long enough for the commands below."""
    r = d.cmd("blockdev-add", {"driver": "null-co", "node-name": name,
                               "size": size, "latency-ns": 20000000})
    assert "return" in r, r


def mirror(d, jid, dev, tgt, **kw):
    args = {"job-id": jid, "device": dev, "target": tgt, "sync": "full"}
    args.update(kw)
    return d.cmd("blockdev-mirror", args)


def jobs(tmp):
    """Job commands in every wrong state."""
    d = Daemon(tmp, "jobs")
    try:
        for n in ("a", "b", "c", "t1", "t2"):
            raw_pair(d, tmp, n, fill=n[:1].encode())
        wrong = ["job-finalize", "job-dismiss", "block-job-complete",
                 "job-complete", "block-job-finalize", "block-job-dismiss"]

        def all_wrong(jid, state, skip=()):
            for c in wrong:
                if c in skip:
                    continue
                key = "id" if c.startswith("job-") else "device"
                check(is_error(d.cmd(c, {key: jid})) and d.alive(),
                      "%s in %s: an error, alive" % (c, state))

        all_wrong("nope", "no job")
        # RUNNING: a slow source.
        # RUNNING for long: 64 KiB/s over 4 MiB.
        for n in ("slow", "nt"):
            r = d.cmd("blockdev-add", {"driver": "null-co", "node-name": n,
                                       "size": 4 * MiB})
            assert "return" in r, r
        check(ok(mirror(d, "j1", "slow", "nt", speed=65536,
                        **{"auto-finalize": False,
                           "auto-dismiss": False})),
              "a job on a slow source")
        all_wrong("j1", "RUNNING")
        check(is_error(mirror(d, "j2", "slow", "t1")),
              "a second job on the same source")
        check(is_error(mirror(d, "j2", "a", "nt")),
              "a job whose target is another job's target")
        check(is_error(mirror(d, "j2", "nt", "a")),
              "a job whose source is another job's target")
        check(is_error(mirror(d, "j1", "a", "t1")), "a duplicate job id")
        check(is_error(mirror(d, "j2", "a", "a")), "mirror to itself")
        check(is_error(mirror(d, "j2", "a", "slow")),
              "a job whose target is another job's source")
        check(d.alive(), "alive")
        for n in ("slow", "nt"):
            check(is_error(d.cmd("blockdev-del", {"node-name": n})),
                  "blockdev-del of a running job's %s" % n)
        check(ok(d.cmd("job-pause", {"id": "j1"})), "pause")
        all_wrong("j1", "PAUSED")
        check(ok(d.cmd("job-resume", {"id": "j1"})), "resume")
        check(is_error(d.cmd("job-resume", {"id": "j1"})), "resume twice")
        d.q.events.clear()
        check(ok(d.cmd("job-cancel", {"id": "j1"})), "cancel while running")
        all_wrong("j1", "ABORTING/CONCLUDED", skip=("job-dismiss",
                                                    "block-job-dismiss"))
        check(wait_status(d, "j1", "concluded"), "j1 concluded")
        check(ok(d.cmd("job-dismiss", {"id": "j1"})), "dismiss")
        check(is_error(d.cmd("job-dismiss", {"id": "j1"})), "dismiss twice")
        check(d.alive(), "alive")

        # Chains: b -> t1 while t1 -> t2 is refused one way or another;
        # a -> t1 READY, then cancel in PENDING.
        d.q.events.clear()
        check(ok(mirror(d, "ja", "a", "t1", **{"auto-finalize": False,
                                                "auto-dismiss": False})),
              "ja: a -> t1")
        check(is_error(mirror(d, "jt", "t1", "t2")),
              "a job whose source is another job's target")
        check(wait_status(d, "ja", "ready"), "ja READY")
        all_wrong("ja", "READY", skip=("block-job-complete",
                                       "job-complete"))
        check(ok(d.cmd("block-job-complete", {"device": "ja"})), "complete")
        r = d.cmd("block-job-complete", {"device": "ja"})
        check(("return" in r or is_error(r)) and d.alive(),
              "complete twice (QEMU takes it while still READY)")
        check(wait_status(d, "ja", "pending"), "ja PENDING")
        all_wrong("ja", "PENDING", skip=("job-finalize",
                                         "block-job-finalize"))
        check(is_error(d.cmd("blockdev-del", {"node-name": "a"})) and
              is_error(d.cmd("blockdev-del", {"node-name": "t1"})),
              "blockdev-del of a PENDING job's nodes")
        check(is_error(mirror(d, "jb", "t1", "t2")),
              "a job from a PENDING job's target")
        d.q.events.clear()
        check(ok(d.cmd("job-cancel", {"id": "ja"})), "cancel in PENDING")
        check(wait_status(d, "ja", "concluded"), "ja concluded")
        r = d.cmd("query-jobs")
        st = [j for j in r.get("return", []) if j["id"] == "ja"]
        check(st and st[0]["status"] == "concluded" and
              st[0].get("error") == "Operation canceled",
              "query-jobs: concluded, canceled")
        all_wrong("ja", "CONCLUDED", skip=("job-dismiss",
                                           "block-job-dismiss"))
        r = d.cmd("job-cancel", {"id": "ja"})
        check(is_error(r) and d.alive(), "cancel when concluded")
        check(ok(d.cmd("job-dismiss", {"id": "ja"})), "dismiss ja")
        check(is_error(d.cmd("job-dismiss", {"id": "ja"})),
              "dismiss ja twice")
        check(d.cmd("query-jobs").get("return") == [], "no job left")
        # After the cancel, the nodes are free again.
        check(ok(mirror(d, "jc", "t1", "t2", **{"auto-dismiss": False})),
              "a job from the former target once free")
        check(wait_status(d, "jc", "ready"), "jc READY")
        check(ok(d.cmd("job-complete", {"id": "jc"})), "complete jc")
        check(wait_status(d, "jc", "concluded"), "jc concluded")
        check(ok(d.cmd("job-dismiss", {"id": "jc"})) and d.alive(),
              "dismiss jc")
        check(d.finish() == 0, "jobs: quit, exit 0")
    finally:
        d.kill()


def nbd_client_stuck(sock_path, name, n):
    """A client that sends @n reads of 1 MiB and never reads a reply."""
    s = nbdraw.connect(sock_path, TMO)
    nbdraw.greet(s)
    nbdraw.export_name(s, name)
    req = b"".join(struct.pack(">IHHQQI", nbdraw.REQUEST_MAGIC, 0,
                               nbdraw.CMD_READ, i, 0, MiB)
                   for i in range(n))
    s.setblocking(False)
    try:
        s.sendall(req)
    except BlockingIOError:
        pass
    return s


def in_use(tmp):
    """Deleting what is in use."""
    d = Daemon(tmp, "inuse")
    procs = []
    try:
        nbd_sock = os.path.join(tmp, "inuse.nbd")
        uri = "nbd+unix:///%s?socket=" + nbd_sock
        check(ok(d.cmd("nbd-server-start", {"addr": {
            "type": "unix", "data": {"path": nbd_sock}}})), "server")
        a = raw_pair(d, tmp, "ia", fill=b"a")
        check(ok(d.cmd("block-export-add", {"type": "nbd", "id": "ea",
                                            "node-name": "ia",
                                            "writable": True})),
              "export ia")
        check(is_error(d.cmd("blockdev-del", {"node-name": "ia"})),
              "blockdev-del of an exported node")
        # A qcow2 node's file child.
        qc = os.path.join(tmp, "i.qcow2")
        run(["qemu-img", "create", "-q", "-f", "qcow2", qc, "4M"])
        r = d.cmd("blockdev-add", {"driver": "file", "node-name": "qf",
                                   "filename": qc})
        assert "return" in r, r
        r = d.cmd("blockdev-add", {"driver": "qcow2", "node-name": "q",
                                   "file": "qf"})
        assert "return" in r, r
        check(is_error(d.cmd("blockdev-del", {"node-name": "qf"})) and
              d.alive(), "blockdev-del of a qcow2's file child")
        r = d.cmd("blockdev-add", {"driver": "qcow2", "node-name": "q2",
                                   "file": {"driver": "file",
                                            "filename": qc}})
        check(is_error(r) and d.alive(),
              "a second qcow2 node on the same image")
        check(ok(d.cmd("blockdev-del", {"node-name": "q"})) and
              ok(d.cmd("blockdev-del", {"node-name": "qf"})),
              "q then qf deleted")

        # TLS objects in use: the server's, deleted, the server goes on.
        psk_dir = os.path.join(tmp, "psk")
        os.mkdir(psk_dir)
        keys = os.path.join(psk_dir, "keys.psk")
        with open(keys, "w") as f:
            f.write("alice:" + "0123456789abcdef" * 4 + "\n")
        tls_sock = os.path.join(tmp, "tls.nbd")
        # A second server is refused; the TLS one is nbdkit for the node.
        kit_pid = os.path.join(tmp, "tls.pid")
        kit = subprocess.Popen(
            ["nbdkit", "-f", "-U", tls_sock, "-P", kit_pid, "--tls=require",
             "--tls-psk=" + keys, "memory", "4M"],
            stderr=subprocess.DEVNULL)
        procs.append(kit)
        for oid in ("tc",):
            r = d.cmd("object-add", {"qom-type": "tls-creds-psk", "id": oid,
                                     "endpoint": "client", "dir": psk_dir,
                                     "username": "alice"})
            assert "return" in r, r
        end = time.monotonic() + TMO
        while not os.path.exists(kit_pid) and time.monotonic() < end:
            # nbdkit writes its pid file once it listens (the socket file
            # appears before that, at bind).
            time.sleep(0.01)
        r = d.cmd("blockdev-add", {"driver": "nbd", "node-name": "tn",
                                   "server": {"type": "unix",
                                              "path": tls_sock},
                                   "tls-creds": "tc"})
        check(ok(r), "an nbd node through TLS")
        check(ok(d.cmd("object-del", {"id": "tc"})) and d.alive(),
              "object-del of the nbd node's TLS creds")
        check(ok(d.cmd("block-export-add", {"type": "nbd", "id": "et",
                                            "node-name": "tn",
                                            "writable": True})),
              "export the TLS nbd node")
        r = run(["qemu-io", "-f", "raw", "-c", "write -P 0x33 0 64k",
                 "-c", "read -P 0x33 0 64k", uri % "tn"])
        check(r.returncode == 0 and d.alive(),
              "the node goes on working after its creds' object-del")
        check(ok(d.cmd("block-export-del", {"id": "et"})) and
              ok(d.cmd("blockdev-del", {"node-name": "tn"})),
              "its export and node deleted")

        # The server's TLS object deleted while the server uses it.
        r = d.cmd("object-add", {"qom-type": "tls-creds-psk", "id": "ts",
                                 "endpoint": "server", "dir": psk_dir})
        assert "return" in r, r
        check(ok(d.cmd("nbd-server-stop")) and
              ok(d.cmd("nbd-server-start", {
                  "addr": {"type": "unix", "data": {"path": nbd_sock}},
                  "tls-creds": "ts"})) and
              ok(d.cmd("object-del", {"id": "ts"})) and
              ok(d.cmd("block-export-add", {"type": "nbd", "id": "ea",
                                            "node-name": "ia",
                                            "writable": True})),
              "object-del of the NBD server's TLS creds")
        r = run(["nbdinfo", "--size",
                 "nbds+unix://alice@/ia?socket=%s&tls-psk-file=%s"
                 % (nbd_sock, keys)])
        check(r.returncode == 0 and r.stdout.strip() == str(4 * MiB) and
              d.alive(), "the server goes on serving TLS clients")
        check(ok(d.cmd("nbd-server-stop")) and
              ok(d.cmd("nbd-server-start", {"addr": {
                  "type": "unix", "data": {"path": nbd_sock}}})) and
              ok(d.cmd("block-export-add", {"type": "nbd", "id": "ea",
                                            "node-name": "ia",
                                            "writable": True})),
              "the server again without TLS")

        # A client mid-transfer and one that never reads.
        slow_src(d, "slow", 256 * MiB)
        check(ok(d.cmd("block-export-add", {"type": "nbd", "id": "es",
                                            "node-name": "slow"})),
              "export a slow node")
        # A client that never reads its replies, then hard del.
        stuck = nbd_client_stuck(nbd_sock, "slow", 64)
        check(d.alive(), "a client with 64 MiB of unread replies: alive")
        check(is_error(d.cmd("block-export-del", {"id": "es",
                                                  "mode": "safe"})),
              "safe block-export-del mid-transfer refused")
        t0 = time.monotonic()
        d.q.events.clear()
        check(ok(d.cmd("block-export-del", {"id": "es", "mode": "hard"})),
              "hard block-export-del with a stuck client")
        try:
            d.q.wait_for(lambda evs: any(
                e["event"] == "BLOCK_EXPORT_DELETED" for e in evs),
                "BLOCK_EXPORT_DELETED")
            got = True
        except QmpError as e:
            diag(str(e))
            got = False
        check(got and d.alive(), "the stuck client's export went (%.1f s)"
              % (time.monotonic() - t0))
        stuck.close()

        # nbd-server-stop with clients connected (one stuck, one
        # mid-transfer, one idle holding a writable export).
        check(ok(d.cmd("block-export-add", {"type": "nbd", "id": "es",
                                            "node-name": "slow"})),
              "export the slow node once more")
        stuck = nbd_client_stuck(nbd_sock, "slow", 64)
        cp = subprocess.Popen(["nbdcopy", uri % "slow", "null:"],
                              stderr=subprocess.DEVNULL)
        procs.append(cp)
        holder = subprocess.Popen(
            ["stdbuf", "-oL", "qemu-io", "-f", "raw",
             "-c", "write -P 0x41 0 4k", "-c", "sleep 60000", uri % "ia"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(holder)
        first = holder.stdout.readline()
        check("wrote" in first, "a client wrote to ia and holds it")
        check(ok(d.cmd("nbd-server-stop")) and d.alive(),
              "nbd-server-stop with three clients")
        check(d.cmd("query-block-exports").get("return") == [] or
              d.alive(), "exports gone or going")
        stuck.close()
        check(cp.wait(timeout=TMO) != 0, "nbdcopy dropped")
        with open(a, "rb") as f:
            check(f.read(4096) == b"A" * 4096, "ia holds the client's data")
        check(ok(d.cmd("blockdev-del", {"node-name": "ia"})) or d.alive(),
              "ia deletable after the server stopped")
        check(d.finish() == 0, "in-use: quit, exit 0")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        d.kill()


def stop_in_state(tmp, how, state):
    """quit or SIGTERM with a job READY or PENDING and a client holding a
    writable export it wrote to: exit 0, the data in the file."""
    tag = "quit" if how == "quit" else "SIGTERM"
    d = Daemon(tmp, "stop-%s-%s" % (tag, state))
    holder = None
    try:
        nbd_sock = os.path.join(tmp, "stop.nbd")
        uri = "nbd+unix:///%s?socket=" + nbd_sock
        src = raw_pair(d, tmp, "ss", fill=b"s")
        raw_pair(d, tmp, "st", fill=b"t")
        w = raw_pair(d, tmp, "sw", fill=b"w")
        check(ok(d.cmd("nbd-server-start", {"addr": {
            "type": "unix", "data": {"path": nbd_sock}}})) and
              ok(d.cmd("block-export-add", {"type": "nbd", "id": "ew",
                                            "node-name": "sw",
                                            "writable": True})) and
              ok(d.cmd("block-export-add", {"type": "nbd", "id": "es",
                                            "node-name": "ss",
                                            "writable": True})),
              "%s/%s: exports" % (tag, state))
        holder = subprocess.Popen(
            ["stdbuf", "-oL", "qemu-io", "-f", "raw",
             "-c", "write -P 0x57 64k 64k", "-c", "sleep 60000",
             uri % "sw"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check("wrote" in holder.stdout.readline(),
              "%s/%s: a client wrote and holds the export" % (tag, state))
        r = run(["qemu-io", "-f", "raw", "-c", "write -P 0x53 0 64k",
                 uri % "ss"])
        check(r.returncode == 0, "%s/%s: a write to the job's source"
              % (tag, state))
        check(ok(mirror(d, "j", "ss", "st", **{"auto-finalize": False})),
              "%s/%s: job" % (tag, state))
        check(wait_status(d, "j", "ready"), "%s/%s: READY" % (tag, state))
        if state == "PENDING":
            check(ok(d.cmd("block-job-complete", {"device": "j"})) and
                  wait_status(d, "j", "pending"),
                  "%s/%s: PENDING" % (tag, state))
        rc = d.finish(how if how == "quit" else signal.SIGTERM)
        check(rc == 0, "%s with a %s job and a client: exit 0 (got %s)"
              % (tag, state, rc))
        with open(w, "rb") as f:
            data = f.read()
        check(data[65536:131072] == b"W" * 65536 and
              data[:65536] == b"w" * 65536,
              "%s/%s: the client's write is in the file" % (tag, state))
        with open(src, "rb") as f:
            check(f.read(65536) == b"S" * 65536,
                  "%s/%s: the source's write is in the file"
                  % (tag, state))
    finally:
        if holder:
            holder.kill()
            holder.wait()
        d.kill()


def main():
    tmp = tempfile.mkdtemp(prefix="test-daemon-hostile.")
    try:
        for part in (types, jobs, in_use):
            try:
                part(tmp)
            except (QmpError, OSError, AssertionError,
                    subprocess.TimeoutExpired) as e:
                check(False, "%s: %s" % (part.__name__, e))
        for how in ("quit", "term"):
            for state in ("READY", "PENDING"):
                try:
                    stop_in_state(tmp, how, state)
                except (QmpError, OSError, AssertionError,
                        subprocess.TimeoutExpired) as e:
                    check(False, "stop %s %s: %s" % (how, state, e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return taplib.plan()


if __name__ == "__main__":
    sys.exit(main())
