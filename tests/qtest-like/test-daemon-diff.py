#!/usr/bin/env python3
# The differential test of `mirror-tool daemon` (issue 23): one QMP
# conversation, run against qemu-storage-daemon and then against
# `mirror-tool daemon --qmp`, in the same directory with the same file
# names, must get the same replies, the same event sequence per job and
# byte-identical images.
#
# The conversation: qmp_capabilities; query-version; nodes for 3 disks
# (d0: raw over a file, 64 MiB; d1: qcow2 over a file node, 48 MiB; d2: an
# nbd node to nbdkit sparse-random, 32 MiB) and their targets (t0: qcow2,
# t1 and t2: raw; pre-created, same sizes); nbd-server-start on a UNIX
# socket; one writable export per source; fio writing to d0 and d1
# through their exports (fixed seed, iodepth 1, a fixed number of I/Os:
# the final bytes do not depend on timing); three blockdev-mirror jobs
# with auto-finalize false (j1 also auto-dismiss false); three
# BLOCK_JOB_READY; fio's end; block-job-complete each; three
# BLOCK_JOB_PENDING; job-finalize each; the jobs' last events; job-dismiss
# j1; query-block-jobs and query-jobs empty; block-export-del e2 and its
# BLOCK_EXPORT_DELETED; quit, and the events until the daemon closes the
# connection.  Bad inputs are mixed in where their answer is fixed
# (duplicate node-name and export id, export of a missing node, wrong
# types, unknown members, blockdev-del of a job's nodes, a second job on a
# job's source, verbs in the wrong job state): their error class and desc
# must be the same.
#
# Each run on its own must also be right: every step gets a reply of the
# kind expected (return or error), each target equals its source
# (qemu-img compare), the daemon exits 0.  Across the runs: the replies
# (normalised: see VOLATILE and LACKING, the one place that lists what may
# differ and why), the events per job, the final sources and the targets
# (raw: cmp; qcow2: their guest-visible bytes, as the two qcow2 writers
# lay clusters out differently) must be identical.  Any difference is
# printed as a unified diff.
#
#   test-daemon-diff.py [--only qsd|tool] [--self-check] [--keep DIR]
#
# --self-check runs qemu-storage-daemon twice and compares the runs: that
# nothing the normalisation lets through varies from run to run.
#
# Runs under meson with MIRROR_TOOL set; prints TAP.  Skips (counted) if
# qemu-storage-daemon, qemu-img, nbdkit or fio is missing.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import argparse
import difflib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qmpclient import QmpClient, QmpError  # noqa: E402
from taplib import check, diag, plan  # noqa: E402

MiB = 1 << 20
TOOL = os.path.abspath(os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../build/qemu-mirror-tool/mirror-tool"))
# Every wait is bounded by this; the machine may be slow and busy.
TMO = 180

# The disks: source node (format, size), target (format).  d2's source is
# nbdkit's sparse-random plugin with a fixed seed (its writes are checked
# against its data, so nothing but the mirror's reads reaches it).
DISKS = [
    {"name": "d0", "fmt": "raw", "size": 64 * MiB, "tfmt": "qcow2",
     "fio": True},
    {"name": "d1", "fmt": "qcow2", "size": 48 * MiB, "tfmt": "raw",
     "fio": True},
    {"name": "d2", "fmt": "nbd", "size": 32 * MiB, "tfmt": "raw",
     "fio": False},
]
JOBS = ["j0", "j1", "j2"]
NO_DISMISS = "j1"               # the job with auto-dismiss false
FIO_IOS = 3000                  # per guest, at FIO_IOPS
FIO_IOPS = 1000

# Values that legitimately differ between the daemons (and between runs):
# masked, their presence still compared.  Paths: the step's label, then
# members ("[]" for every element of a list).
VOLATILE = {
    "greeting.QMP.capabilities": "mirror-tool has no out-of-band "
        "execution: it offers no oob (and refuses it as QEMU does where "
        "unsupported)",
    "greeting.QMP.version.qemu.major": "the version",
    "greeting.QMP.version.qemu.minor": "the version",
    "greeting.QMP.version.qemu.micro": "the version",
    "greeting.QMP.version.package": "the version",
    "query-version.return.qemu.major": "the version",
    "query-version.return.qemu.minor": "the version",
    "query-version.return.qemu.micro": "the version",
    "query-version.return.package": "the version",
    "query-named-block-nodes.return[].image.actual-size":
        "the host file system's allocation",
    "query-block-jobs.return[].offset": "progress while running",
    "query-block-jobs.return[].len": "progress while running",
    "query-block-jobs.return[].busy": "whether a copy is in flight",
    "query-jobs.return[].current-progress": "progress while running",
    "query-jobs.return[].total-progress": "progress while running",
    "event.data.offset": "progress (the jobs' bytes, guest writes)",
    "event.data.len": "progress (the jobs' bytes, guest writes)",
}
# Members one side lacks, with the reason: dropped on both sides.
MT_JOB_STATS = ("mirror-tool's own statistics of the job "
                "(docs/mirror-tool.md, `start --qmp`): QEMU has none")
LACKING = {
    "query-block-jobs.return[].actively-synced":
        "QEMU 8.2's member, which qemu-storage-daemon 7.2 has not yet",
}
for m in ("copy-rate", "dirty-bytes", "dirty-rate", "eta-ms",
          "guest-base-latency-ns", "guest-latency-ns", "guest-pace",
          "guest-priority", "guest-rate", "guest-request-rate",
          "guest-requests", "in-flight-bytes", "in-sync", "reconnecting",
          "window-bytes"):
    LACKING["query-block-jobs.return[]." + m] = MT_JOB_STATS


class Daemon:
    """How to start one of the two daemons on a QMP socket."""

    def __init__(self, kind):
        self.kind = kind

    def argv(self, qmp):
        if self.kind.startswith("qsd"):
            return ["qemu-storage-daemon", "--chardev",
                    "socket,path=%s,server=on,wait=off,id=m" % qmp,
                    "--monitor", "chardev=m"]
        return [TOOL, "daemon", "--qmp", qmp]


def run(argv, **kw):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, **kw)


# ---- the images ----

def fill(path, size, seed):
    """Write deterministic data into extents of the sparse file @path of
    @size bytes: random bytes, runs of one byte, and holes."""
    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.truncate(size)
        for off in range(0, size, MiB):
            kind = rng.randrange(4)
            start = off + rng.randrange(0, MiB // 2, 4096)
            length = rng.randrange(4096, MiB // 2, 4096)
            f.seek(start)
            if kind == 0:
                f.write(rng.randbytes(length))
            elif kind == 1:
                f.write(bytes([rng.randrange(1, 256)]) * length)
            # 2, 3: a hole


def make_base(base):
    """The pristine sources, made once and copied into each run."""
    fill(os.path.join(base, "s0.raw"), DISKS[0]["size"], 230)
    fill(os.path.join(base, "s1.img"), DISKS[1]["size"], 231)
    run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2",
         os.path.join(base, "s1.img"), os.path.join(base, "s1.qcow2")])


def src_path(w, d):
    return os.path.join(w, "s%s.%s" % (d["name"][1:], d["fmt"]))


def tgt_path(w, d):
    return os.path.join(w, "t%s.%s" % (d["name"][1:], d["tfmt"]))


def prepare(base, w):
    """Fresh sources and empty targets in @w (the same paths each run)."""
    if os.path.exists(w):
        shutil.rmtree(w)
    os.mkdir(w)
    for d in DISKS:
        if d["fmt"] != "nbd":
            run(["cp", "--sparse=always",
                 os.path.join(base, os.path.basename(src_path(w, d))),
                 src_path(w, d)])
        run(["qemu-img", "create", "-f", d["tfmt"], tgt_path(w, d),
             str(d["size"])])


def nbdkit_uri(w):
    return "nbd+unix:///?socket=%s" % os.path.join(w, "nbdkit.sock")


# ---- the conversation ----

def node_args(w):
    """The blockdev-add arguments, in order: each format node after its
    file node."""
    out = []

    def fmt(name, drv, path):
        out.append({"driver": "file", "node-name": name + "-file",
                    "filename": path})
        out.append({"driver": drv, "node-name": name, "file": name + "-file"})

    for d in DISKS:
        if d["fmt"] == "nbd":
            out.append({"driver": "nbd", "node-name": d["name"],
                        "server": {"type": "unix",
                                   "path": os.path.join(w, "nbdkit.sock")}})
        else:
            fmt(d["name"], d["fmt"], src_path(w, d))
        fmt("t" + d["name"][1:], d["tfmt"], tgt_path(w, d))
    return out


def mirror_args(i):
    d = DISKS[i]
    a = {"job-id": JOBS[i], "device": d["name"],
         "target": "t" + d["name"][1:], "sync": "full",
         "auto-finalize": False}
    if JOBS[i] == NO_DISMISS:
        a["auto-dismiss"] = False
    return a


class Conversation:
    """One run: the transcript of (label, reply) and the events."""

    def __init__(self, kind, w):
        self.kind = kind
        self.w = w
        self.transcript = []
        self.unexpected = []    # steps whose reply was not of the kind asked
        self.events = []
        self.started = []       # jobs whose blockdev-mirror returned
        self.abort = None       # why the conversation stopped early
        self.exit_status = None

    def step(self, q, label, cmd, args=None, expect="return"):
        r = q.command(cmd, args)
        self.transcript.append((label, r))
        if expect not in r:
            self.unexpected.append("%s: expected %s, got %s" % (
                label, expect, json.dumps(r)))
        return r

    def wait_jobs(self, q, what, pred):
        """Wait until pred(event, job) held for every started job."""
        def cond(evs):
            seen = {j for j in self.started
                    for ev in evs if pred(ev, j)}
            return len(seen) == len(self.started)
        q.wait_for(cond, what)

    def talk(self, q, fio):
        w = self.w
        sock = os.path.join(w, "nbd.sock")
        self.step(q, "qmp_capabilities", "qmp_capabilities")
        self.step(q, "query-version", "query-version")
        for a in node_args(w):
            self.step(q, "blockdev-add " + a["node-name"], "blockdev-add", a)
        self.step(q, "bad: duplicate node-name", "blockdev-add",
                  dict(node_args(w)[1]), expect="error")
        self.step(q, "bad: blockdev-add unknown member", "blockdev-add",
                  {"driver": "file", "node-name": "x",
                   "filename": src_path(w, DISKS[0]), "bogus": 1},
                  expect="error")
        self.step(q, "bad: blockdev-add missing file", "blockdev-add",
                  {"driver": "raw", "node-name": "x", "file": "nope"},
                  expect="error")
        self.step(q, "query-named-block-nodes", "query-named-block-nodes",
                  {"flat": True})
        self.step(q, "nbd-server-start", "nbd-server-start",
                  {"addr": {"type": "unix", "data": {"path": sock}}})
        for i, d in enumerate(DISKS):
            self.step(q, "block-export-add e%d" % i, "block-export-add",
                      {"type": "nbd", "id": "e%d" % i,
                       "node-name": d["name"], "writable": True})
        self.step(q, "bad: export of a missing node", "block-export-add",
                  {"type": "nbd", "id": "e9", "node-name": "nope",
                   "writable": True}, expect="error")
        self.step(q, "bad: duplicate export id", "block-export-add",
                  {"type": "nbd", "id": "e0", "node-name": "t0",
                   "writable": True}, expect="error")
        self.step(q, "bad: writable not a bool", "block-export-add",
                  {"type": "nbd", "id": "e9", "node-name": "t0",
                   "writable": "yes"}, expect="error")
        self.step(q, "query-block-exports", "query-block-exports")

        fio.start(sock)
        for i in range(len(DISKS)):
            r = self.step(q, "blockdev-mirror " + JOBS[i], "blockdev-mirror",
                          mirror_args(i))
            if "return" in r:
                self.started.append(JOBS[i])
        bad = dict(mirror_args(0), target="t1")
        self.step(q, "bad: a second job on a job's source",
                  "blockdev-mirror", bad, expect="error")
        self.step(q, "bad: blockdev-mirror unknown member", "blockdev-mirror",
                  dict(mirror_args(0), **{"job-id": "jx", "bogus": 1}),
                  expect="error")
        self.step(q, "bad: speed not an integer", "blockdev-mirror",
                  dict(mirror_args(0), **{"job-id": "jx", "speed": "fast"}),
                  expect="error")
        self.step(q, "bad: sync not an enum value", "blockdev-mirror",
                  dict(mirror_args(0), **{"job-id": "jx", "sync": "bogus"}),
                  expect="error")
        self.step(q, "bad: blockdev-del of a job's source",
                  "blockdev-del", {"node-name": "d0"}, expect="error")
        self.step(q, "bad: blockdev-del of a job's target",
                  "blockdev-del", {"node-name": "t1"}, expect="error")
        self.step(q, "bad: blockdev-del of a file node in use",
                  "blockdev-del", {"node-name": "d1-file"}, expect="error")

        self.wait_jobs(q, "BLOCK_JOB_READY", lambda ev, j:
                       ev["event"] == "BLOCK_JOB_READY" and
                       ev["data"].get("device") == j)
        self.step(q, "query-block-jobs (ready)", "query-block-jobs")
        self.step(q, "bad: job-finalize while ready", "job-finalize",
                  {"id": "j0"}, expect="error")
        self.step(q, "bad: job-dismiss while ready", "job-dismiss",
                  {"id": "j0"}, expect="error")
        self.step(q, "bad: block-job-complete of a missing job",
                  "block-job-complete", {"device": "nope"}, expect="error")
        fio.wait()
        for j in self.started:
            self.step(q, "block-job-complete " + j, "block-job-complete",
                      {"device": j})
        self.wait_jobs(q, "BLOCK_JOB_PENDING", lambda ev, j:
                       ev["event"] == "BLOCK_JOB_PENDING" and
                       ev["data"].get("id") == j)
        self.step(q, "query-jobs (pending)", "query-jobs")
        for j in self.started:
            self.step(q, "job-finalize " + j, "job-finalize", {"id": j})

        def last(ev, j):
            return (ev["event"] == "JOB_STATUS_CHANGE" and
                    ev["data"].get("id") == j and
                    ev["data"].get("status") ==
                    ("concluded" if j == NO_DISMISS else "null"))
        self.wait_jobs(q, "the jobs' last JOB_STATUS_CHANGE", last)
        self.step(q, "query-jobs (concluded)", "query-jobs")
        if NO_DISMISS in self.started:
            r = self.step(q, "job-dismiss " + NO_DISMISS, "job-dismiss",
                          {"id": NO_DISMISS})
            if "return" in r:
                q.wait_for(lambda evs: any(
                    ev["event"] == "JOB_STATUS_CHANGE" and
                    ev["data"] == {"id": NO_DISMISS, "status": "null"}
                    for ev in evs), "%s's status null" % NO_DISMISS)
        self.step(q, "query-block-jobs (end)", "query-block-jobs")
        self.step(q, "query-jobs (end)", "query-jobs")
        self.step(q, "query-block-exports (after the switch-overs)",
                  "query-block-exports")
        r = self.step(q, "block-export-del e2", "block-export-del",
                      {"id": "e2"})
        if "return" in r:
            q.wait_for(lambda evs: any(
                ev["event"] == "BLOCK_EXPORT_DELETED" and
                ev["data"] == {"id": "e2"} for ev in evs),
                "BLOCK_EXPORT_DELETED of e2")
        self.step(q, "query-block-exports (after block-export-del)",
                  "query-block-exports")
        self.step(q, "bad: block-export-del of a deleted export",
                  "block-export-del", {"id": "e2"}, expect="error")
        self.step(q, "quit", "quit")
        q.drain()


class Fio:
    """The two guests: fio through the exports of d0 and d1."""

    def __init__(self, w):
        self.w = w
        self.procs = []

    def start(self, sock):
        for i, d in enumerate(DISKS):
            if not d["fio"]:
                continue
            self.procs.append((d["name"], subprocess.Popen(
                ["fio", "--name=g" + d["name"], "--ioengine=nbd",
                 "--uri=nbd+unix:///%s?socket=%s" % (d["name"], sock),
                 "--rw=randwrite", "--bs=4k", "--iodepth=1",
                 "--size=%d" % d["size"], "--number_ios=%d" % FIO_IOS,
                 "--rate_iops=%d" % FIO_IOPS, "--randrepeat=1",
                 "--randseed=%d" % (2300 + i), "--refill_buffers=1",
                 "--scramble_buffers=0", "--output-format=terse"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True)))

    def wait(self):
        """Wait for both to exit; their failures go to self.errors."""
        self.errors = []
        for name, p in self.procs:
            try:
                _, out = p.communicate(timeout=TMO)
            except subprocess.TimeoutExpired:
                p.kill()
                _, out = p.communicate()
            if p.returncode != 0:
                self.errors.append("fio on %s: status %s: %s" % (
                    name, p.returncode, out.strip()[-500:]))
        self.procs = []

    def kill(self):
        for _, p in self.procs:
            p.kill()
            p.wait()
        self.procs = []


def converse(kind, w):
    """Run the conversation against @kind in @w; returns the
    Conversation.  The nbdkit server stays up (for the checks after)."""
    c = Conversation(kind, w)
    qmp = os.path.join(w, "qmp.sock")
    log = open(os.path.join(w, "daemon.log"), "w")
    daemon = subprocess.Popen(Daemon(kind).argv(qmp), stdin=subprocess.DEVNULL,
                              stdout=log, stderr=subprocess.STDOUT, cwd=w)
    fio = Fio(w)
    q = None
    try:
        q = QmpClient(qmp, TMO, alive=lambda: daemon.poll() is None)
        c.transcript.append(("greeting", q.greeting))
        c.talk(q, fio)
        c.fio_errors = getattr(fio, "errors", [])
    except (QmpError, OSError) as e:
        c.abort = str(e)
    finally:
        fio.kill()
        if q is not None:
            c.events = q.events
            q.close()
        try:
            daemon.wait(timeout=TMO if c.abort is None else 5)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        c.exit_status = daemon.returncode
        log.close()
    return c


# ---- normalisation and comparison ----

def normalise(value, path):
    """@value with the VOLATILE values masked and the LACKING members
    dropped; @path is its path (see VOLATILE)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            p = path + "." + k
            if p in LACKING:
                continue
            out[k] = "<masked>" if p in VOLATILE else normalise(v, p)
        return out
    if isinstance(value, list):
        return [normalise(v, path + "[]") for v in value]
    return value


def norm_reply(label, r):
    """The reply of step @label, normalised; lists of nodes, jobs and
    exports are sorted (their order is not part of QMP's contract)."""
    kind = label.split(" (")[0]
    r = normalise(r, kind)
    ret = r.get("return")
    if isinstance(ret, list):
        key = {"query-named-block-nodes": "node-name",
               "query-block-jobs": "device", "query-jobs": "id",
               "query-block-exports": "id"}.get(kind)
        if key:
            for e in ret:
                if isinstance(e, dict) and str(e.get(key, "")).startswith("#"):
                    e[key] = "<auto node name>"
            ret.sort(key=lambda e: json.dumps(e, sort_keys=True))
    return r


def job_of(ev):
    d = ev.get("data") or {}
    return d.get("id") or d.get("device")


def event_lines(events):
    """Per job (and "-" for events of no job): the event names with their
    normalised data, one line each."""
    per = {}
    for ev in events:
        d = normalise(ev.get("data"), "event.data")
        per.setdefault(job_of(ev) or "-", []).append(
            "%s %s" % (ev["event"], json.dumps(d, sort_keys=True)))
    out = []
    for job in sorted(per):
        out += ["%s: %s" % (job, line) for line in per[job]]
    return out


def transcript_lines(c, pretty=True):
    """The normalised transcript; @pretty: a member a line (for diffs)."""
    out = []
    for label, r in c.transcript:
        r = norm_reply(label, r)
        if pretty:
            out += ["%s: %s" % (label, line) for line in
                    json.dumps(r, sort_keys=True, indent=1).splitlines()]
        else:
            out.append("%s: %s" % (label, json.dumps(r, sort_keys=True)))
    if c.abort:
        out.append("conversation stopped: " + c.abort)
    return out


def show_diff(a, b, what):
    diag("%s differ (--- qemu-storage-daemon, +++ mirror-tool daemon):"
         % what)
    diag("\n".join(difflib.unified_diff(a, b, "qsd", "mirror-tool",
                                        lineterm="", n=1)))


def check_run(c, w):
    """The run's own checks; returns the paths to keep for comparing."""
    name = {"qsd": "qemu-storage-daemon", "qsd2": "qemu-storage-daemon "
            "(again)"}.get(c.kind, "mirror-tool daemon")
    check(c.abort is None, "%s: the whole conversation ran" % name) or \
        diag(c.abort)
    check(not c.unexpected, "%s: every reply of the kind expected" % name) \
        or diag("\n".join(c.unexpected))
    errs = getattr(c, "fio_errors", ["fio did not run to its end"])
    check(not errs, "%s: both fio guests succeeded" % name) or \
        diag("\n".join(errs))
    check(c.exit_status == 0, "%s: exits 0 after quit (status %s)" % (
        name, c.exit_status)) or \
        diag(open(os.path.join(w, "daemon.log")).read()[-2000:])
    for d in DISKS:
        src = src_path(w, d)
        if d["fmt"] == "nbd":
            src, sfmt = nbdkit_uri(w), "raw"
        else:
            sfmt = d["fmt"]
        argv = ["qemu-img", "compare", "-f", sfmt, "-F", d["tfmt"], src,
                tgt_path(w, d)]
        r = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 0, "%s: target of %s equals its source" % (
            name, d["name"])) or diag(r.stdout)


def keep_images(w, out):
    """Move the final sources and targets of run @w to @out as raw files
    (qcow2 ones converted: their guest-visible bytes)."""
    os.mkdir(out)
    for d in DISKS:
        for path, fmt in ((src_path(w, d), d["fmt"]),
                          (tgt_path(w, d), d["tfmt"])):
            if fmt == "nbd":
                continue
            dst = os.path.join(out, os.path.basename(path) + ".raw")
            if fmt == "raw":
                os.rename(path, dst)
            else:
                run(["qemu-img", "convert", "-f", fmt, "-O", "raw", path,
                     dst])


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", choices=["qsd", "tool"],
                   help="run against one daemon alone (its own checks)")
    p.add_argument("--self-check", action="store_true",
                   help="compare qemu-storage-daemon with itself (that "
                   "the normalisation leaves nothing that varies)")
    p.add_argument("--keep", metavar="DIR",
                   help="work in DIR (made, kept) instead of a temporary "
                   "directory")
    opts = p.parse_args()
    for prog in ("qemu-storage-daemon", "qemu-img", "nbdkit", "fio"):
        if shutil.which(prog) is None:
            print("1..0 # SKIP %s is not installed" % prog)
            return 0
    kinds = [opts.only] if opts.only else ["qsd", "tool"]
    if opts.self_check:
        kinds = ["qsd", "qsd2"]
    if opts.keep:
        os.makedirs(opts.keep)
        top = opts.keep
    else:
        top = tempfile.mkdtemp(prefix="daemon-diff-")
    base = os.path.join(top, "base")
    w = os.path.join(top, "run")
    os.mkdir(base)
    make_base(base)
    results = {}
    try:
        for kind in kinds:
            prepare(base, w)
            pidfile = os.path.join(w, "nbdkit.pid")
            nbdkit = subprocess.Popen(
                ["nbdkit", "-f", "--exit-with-parent", "-U",
                 os.path.join(w, "nbdkit.sock"), "-P", pidfile,
                 "sparse-random",
                 "size=%d" % DISKS[2]["size"], "seed=23", "percent=30",
                 "runlength=32"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(w, "nbdkit.log"), "w"))
            end = time.monotonic() + 60
            while (not os.path.exists(pidfile) and nbdkit.poll() is None
                   and time.monotonic() < end):
                # nbdkit writes its -P file once it listens.
                time.sleep(0.01)
            try:
                c = converse(kind, w)
                check_run(c, w)
            finally:
                nbdkit.terminate()
                nbdkit.wait()
            keep_images(w, os.path.join(top, "out-" + kind))
            results[kind] = c
        if len(kinds) == 2:
            a, b = (transcript_lines(results[k]) for k in kinds)
            check(a == b, "the same replies from both daemons") or \
                show_diff(a, b, "replies")
            a, b = (event_lines(results[k].events) for k in kinds)
            check(a == b, "the same events per job from both daemons") or \
                show_diff(a, b, "events")
            for d in DISKS:
                for path in (src_path(w, d), tgt_path(w, d)):
                    if d["fmt"] == "nbd" and path == src_path(w, d):
                        continue
                    f = os.path.basename(path) + ".raw"
                    r = subprocess.run(
                        ["cmp", os.path.join(top, "out-" + kinds[0], f),
                         os.path.join(top, "out-" + kinds[1], f)],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True)
                    check(r.returncode == 0, "%s byte-identical in both "
                          "runs" % os.path.basename(path)) or diag(r.stdout)
        else:
            c = results[kinds[0]]
            diag("\n".join(transcript_lines(c, pretty=False)))
            diag("\n".join(event_lines(c.events)))
    finally:
        if not opts.keep:
            shutil.rmtree(top, ignore_errors=True)
    return plan()


if __name__ == "__main__":
    sys.exit(main())
