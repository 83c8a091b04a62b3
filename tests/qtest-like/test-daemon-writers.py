#!/usr/bin/env python3
# mirror-tool daemon: who may write a node, and what reaches the disk.
#
# - A node another node uses as its file (a qcow2's) takes no new writer:
#   a writable export of it and a mirror into it are refused with QEMU's
#   permission conflict, and the qcow2 image stays a qcow2 image.
# - A running job's target takes no export.
# - A node that had a filter (an earlier job, cancelled) can later be a
#   mirror's target and switch over (the daemon survives, the export
#   follows).
# - What a removed export served is flushed at exit: the daemon's
#   fdatasync/fsync calls are counted with strace (skipped without it).
#
# Runs under meson with MIRROR_TOOL set; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import os
import shutil
import subprocess
import sys
import tempfile

import taplib
from qmpclient import QmpClient
from taplib import check, diag

TOOL = os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(__file__), "../../build/qemu-mirror-tool/mirror-tool")


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


class Daemon:
    def __init__(self, tmp, prefix=()):
        env = dict(os.environ)
        if prefix:
            # LeakSanitizer cannot run under ptrace (strace): it would fail
            # the exit of a sanitizer build.
            env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + \
                ":detect_leaks=0"
        self.sock = os.path.join(tmp, "qmp.sock")
        self.proc = subprocess.Popen(list(prefix) +
                                     [TOOL, "daemon", "--qmp", self.sock],
                                     stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.qmp = QmpClient(self.sock, 60,
                             alive=lambda: self.proc.poll() is None)
        self.cmd("qmp_capabilities")

    def cmd(self, name, args=None):
        return self.qmp.command(name, args)

    def ok(self, name, args=None):
        r = self.cmd(name, args)
        if "return" not in r:
            diag("%s %r: %r" % (name, args, r))
        return "return" in r

    def event(self, name, job):
        self.qmp.wait_for(lambda evs: any(
            e["event"] == name and e.get("data", {}).get("device") == job
            for e in evs), name)

    def quit(self):
        self.cmd("quit")
        self.qmp.drain()
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


def file_node(name, path):
    return {"driver": "file", "node-name": name, "filename": path}


def main():
    tmp = tempfile.mkdtemp(prefix="daemon-writers-")
    try:
        cases(tmp)
    finally:
        shutil.rmtree(tmp)
    return taplib.plan()


def cases(tmp):
    q = os.path.join(tmp, "q.qcow2")
    s = os.path.join(tmp, "s.raw")
    t = os.path.join(tmp, "t.raw")
    c = os.path.join(tmp, "c.raw")
    run("qemu-img", "create", "-q", "-f", "qcow2", q, "4M")
    for path, pattern in ((s, "0x11"), (t, "0x22"), (c, "0x33")):
        run("qemu-img", "create", "-q", "-f", "raw", path, "4M")
        run("qemu-io", "-f", "raw", "-c", "write -P %s 0 4M" % pattern,
            path)
    nbd = os.path.join(tmp, "nbd.sock")

    d = Daemon(tmp)
    check(d.ok("blockdev-add", file_node("qf", q)) and
          d.ok("blockdev-add", {"driver": "qcow2", "node-name": "q",
                                "file": "qf"}) and
          d.ok("blockdev-add", file_node("z", s)) and
          d.ok("nbd-server-start", {"addr": {"type": "unix",
                                             "data": {"path": nbd}}}),
          "nodes: a qcow2 over its file node, a raw file; a server")
    r = d.cmd("block-export-add", {"type": "nbd", "id": "e", "node-name":
                                   "qf", "writable": True})
    check(r.get("error", {}).get("desc", "").startswith(
        "Permission conflict on node 'qf'"),
        "a writable export of a qcow2's file node is refused: %r" % r)
    check(d.ok("block-export-add", {"type": "nbd", "id": "e",
                                    "node-name": "qf"}) and
          d.ok("block-export-del", {"id": "e"}),
          "a read-only one is allowed")
    r = d.cmd("blockdev-mirror", {"job-id": "j", "device": "z",
                                  "target": "qf", "sync": "full"})
    check(r.get("error", {}).get("desc", "").startswith(
        "Permission conflict on node 'qf'"),
        "a mirror into a qcow2's file node is refused: %r" % r)

    # A job's target takes no export.
    check(d.ok("blockdev-add", file_node("t", t)) and
          d.ok("blockdev-mirror", {"job-id": "j1", "device": "z",
                                   "target": "t", "sync": "full"}),
          "a mirror z -> t")
    d.event("BLOCK_JOB_READY", "j1")
    r = d.cmd("block-export-add", {"type": "nbd", "id": "et",
                                   "node-name": "t", "writable": True})
    check(r.get("error", {}).get("desc", "").startswith(
        "Permission conflict on node 't'"),
        "an export of a running job's target is refused: %r" % r)
    # Cancelled in READY: z keeps its filter; then z is a target.
    check(d.ok("block-job-cancel", {"device": "j1"}), "cancel j1")
    d.event("BLOCK_JOB_COMPLETED", "j1")
    check(d.ok("blockdev-add", file_node("c", c)) and
          d.ok("block-export-add", {"type": "nbd", "id": "ec",
                                    "node-name": "c", "writable": True}) and
          d.ok("blockdev-mirror", {"job-id": "j2", "device": "c",
                                   "target": "z", "sync": "full"}),
          "a mirror c -> z, z having had a filter, c exported")
    d.event("BLOCK_JOB_READY", "j2")
    check(d.ok("block-job-complete", {"device": "j2"}), "complete j2")
    d.event("BLOCK_JOB_COMPLETED", "j2")
    r = d.cmd("query-block-exports")
    check(r.get("return") == [{"type": "nbd", "id": "ec", "node-name": "z",
                               "shutting-down": False}],
          "the daemon lives and the export follows to z: %r" % r)
    uri = "nbd+unix:///c?socket=" + nbd
    run("qemu-io", "-f", "raw", "-c", "write -P 0x44 0 64k", uri)
    rc, err = d.quit()
    check(rc == 0, "quit: exit 0 (%d %s)" % (rc, err.strip()))
    out = run("qemu-img", "info", q).stdout
    check("file format: qcow2" in out, "q.qcow2 is still a qcow2 image")
    r = subprocess.run(["qemu-io", "-f", "raw", "-c",
                        "read -P 0x44 0 64k", "-c",
                        "read -P 0x33 64k 1M", s],
                       capture_output=True, text=True)
    check(r.returncode == 0 and "Pattern verification failed" not in
          r.stdout, "the guest's write through the moved export is in "
          "s.raw, over c's data")

    # A removed export's image is flushed at exit.
    if not shutil.which("strace"):
        check(True, "# SKIP strace not installed")
        return
    trace = os.path.join(tmp, "strace.out")
    d = Daemon(tmp, prefix=("strace", "-f", "-qq", "-o", trace, "-e",
                            "trace=fsync,fdatasync"))
    check(d.ok("blockdev-add", file_node("t", t)) and
          d.ok("nbd-server-start", {"addr": {"type": "unix",
                                             "data": {"path": nbd}}}) and
          d.ok("block-export-add", {"type": "nbd", "id": "e",
                                    "node-name": "t", "writable": True}),
          "an export of t")
    run("qemu-io", "-f", "raw", "-c", "write -P 0x55 0 64k",
        "nbd+unix:///t?socket=" + nbd)
    check(d.ok("block-export-del", {"id": "e"}), "the export removed")
    rc, err = d.quit()
    with open(trace) as f:
        syncs = [line for line in f if "sync(" in line]
    check(rc == 0 and len(syncs) >= 1,
          "quit flushes the node a removed export served: %d sync calls "
          "(exit %d %s)" % (len(syncs), rc, err.strip()[-300:]))


if __name__ == "__main__":
    sys.exit(main())
