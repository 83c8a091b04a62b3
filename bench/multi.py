#!/usr/bin/env python3
"""bench/multi.py - several disks in one QMP daemon: time them all to READY.

Used by bench/multi.sh, for `mirror-tool daemon --qmp` and
qemu-storage-daemon alike: both get the same QMP conversation.  Not run
in CI.

    multi.py --qmp SOCK --dir DIR --disks N --out FILE [--writer CMD]
             [--timeout S] [--log FILE] -- DAEMON [ARG...]

DIR holds src0..srcN-1 (raw sources) and tgt0..tgtN-1 (the targets, which
this script serves with `nbdkit -U DIR/tgtI.sock file DIR/tgtI`).
1. Start the nbdkit servers and DAEMON (its output to --log), connect to
   SOCK, qmp_capabilities; blockdev-add a file node sI per source and an
   nbd node tI per target; nbd-server-start on DIR/export.sock and one
   writable export per source (name sI).
2. With --writer (a command line containing {uri}, replaced by the
   export's NBD URI; fio with --output-format=json on stdout): start one
   per disk and wait until each has printed "connected to NBD server".
3. t0; one blockdev-mirror per disk (sync full, auto-finalize false);
   wait for every BLOCK_JOB_READY (t_ready: the last one).  Stop the
   writers (SIGINT; a migration pauses the guests) and read their rates.
4. t_c; block-job-complete each; wait for every BLOCK_JOB_PENDING;
   job-finalize each; wait for every BLOCK_JOB_COMPLETED (t_done; none may
   carry an error); quit, and the daemon must exit 0.

Writes one tab-separated line to --out:
    ready_s switch_ms cpu_s maxrss_kib guests_Bps min_guest_Bps ready_each
ready_s = t_ready - t0; switch_ms = t_done - t_c; cpu_s and maxrss_kib
are the daemon's (wait4); guests_Bps is the sum of the writers' write
rates, min_guest_Bps the smallest; ready_each the time to each job's
READY, comma-separated.  Exit status 0 on success; 1 with a one-line
reason on stderr.
"""

import argparse
import json
import os
import select
import shlex
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "qtest-like"))
from qmpclient import QmpClient, QmpError  # noqa: E402

READY_TEXT = "connected to NBD server"


class Failure(Exception):
    """The run failed; the message says why."""


def ok(reply, what):
    if "error" in reply:
        raise Failure("%s: %s" % (what, reply["error"]))
    return reply["return"]


def wait_all(q, name, key, jobs, what):
    """Wait for event @name with data[@key] for each of @jobs (none may
    carry an error); returns {job: receipt time}."""
    def seen():
        out = {}
        for ev, t in zip(q.events, q.times):
            d = ev.get("data") or {}
            if ev["event"] == name and d.get(key) in jobs:
                if "error" in d:
                    raise Failure("%s %s: %s" % (name, d[key], d["error"]))
                out.setdefault(d[key], t)
            elif ev["event"] == "BLOCK_JOB_CANCELLED":
                raise Failure("%s cancelled while waiting for %s" % (
                    d.get("device"), what))
        return out

    q.wait_for(lambda evs: len(seen()) == len(jobs), what)
    return seen()


def start_writers(cmd, uris, deadline):
    procs = []
    for uri in uris:
        procs.append(subprocess.Popen(
            [w.replace("{uri}", uri) for w in shlex.split(cmd)], text=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE))
    for p in procs:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
                raise Failure("a writer did not print %r" % READY_TEXT)
            line = p.stdout.readline()
            if not line:
                raise Failure("a writer exited with status %s before "
                              "connecting" % p.wait())
            if READY_TEXT in line:
                break
    return procs


def stop_writers(procs):
    """SIGINT each writer; their write rates (bytes/s)."""
    rates = []
    for p in procs:
        if p.poll() is not None:
            raise Failure("a writer exited early (status %d)" % p.returncode)
        p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            text, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            raise Failure("a writer did not stop") from None
        try:
            rates.append(json.loads(text[text.index("{"):])
                         ["jobs"][0]["write"]["bw_bytes"])
        except (ValueError, KeyError, IndexError):
            raise Failure("no fio result in a writer's output") from None
    return rates


def run(opts):
    deadline = time.monotonic() + opts.timeout
    d = opts.dir
    n = opts.disks
    jobs = ["j%d" % i for i in range(n)]
    servers = []
    for i in range(n):
        servers.append(subprocess.Popen(
            ["nbdkit", "-f", "--exit-with-parent", "-U",
             os.path.join(d, "tgt%d.sock" % i), "file",
             os.path.join(d, "tgt%d" % i)], stdin=subprocess.DEVNULL))
    log = open(opts.log, "w") if opts.log else subprocess.DEVNULL
    daemon = subprocess.Popen(opts.daemon, stdout=log, stderr=log,
                              stdin=subprocess.DEVNULL)
    writers = []
    try:
        q = QmpClient(opts.qmp, opts.timeout,
                      alive=lambda: daemon.poll() is None)
        ok(q.command("qmp_capabilities"), "qmp_capabilities")
        for i in range(n):
            ok(q.command("blockdev-add", {
                "driver": "file", "node-name": "s%d" % i,
                "filename": os.path.join(d, "src%d" % i)}), "blockdev-add")
            ok(q.command("blockdev-add", {
                "driver": "nbd", "node-name": "t%d" % i,
                "server": {"type": "unix",
                           "path": os.path.join(d, "tgt%d.sock" % i)}}),
               "blockdev-add")
        sock = os.path.join(d, "export.sock")
        ok(q.command("nbd-server-start", {
            "addr": {"type": "unix", "data": {"path": sock}}}),
           "nbd-server-start")
        for i in range(n):
            ok(q.command("block-export-add", {
                "type": "nbd", "id": "e%d" % i, "node-name": "s%d" % i,
                "writable": True}), "block-export-add")
        if opts.writer:
            writers = start_writers(
                opts.writer, ["nbd+unix:///s%d?socket=%s" % (i, sock)
                              for i in range(n)], deadline)
        t0 = time.monotonic()
        for i in range(n):
            ok(q.command("blockdev-mirror", {
                "job-id": jobs[i], "device": "s%d" % i, "target": "t%d" % i,
                "sync": "full", "auto-finalize": False}), "blockdev-mirror")
        ready = wait_all(q, "BLOCK_JOB_READY", "device", jobs,
                         "BLOCK_JOB_READY")
        t_ready = max(ready.values())
        rates = stop_writers(writers) if writers else [0]
        writers = []
        t_c = time.monotonic()
        for j in jobs:
            ok(q.command("block-job-complete", {"device": j}),
               "block-job-complete")
        wait_all(q, "BLOCK_JOB_PENDING", "id", jobs, "BLOCK_JOB_PENDING")
        for j in jobs:
            ok(q.command("job-finalize", {"id": j}), "job-finalize")
        done = wait_all(q, "BLOCK_JOB_COMPLETED", "device", jobs,
                        "BLOCK_JOB_COMPLETED")
        t_done = max(done.values())
        ok(q.command("quit"), "quit")
        _, status, ru = os.wait4(daemon.pid, 0)
        daemon.returncode = os.waitstatus_to_exitcode(status)
        if daemon.returncode != 0:
            raise Failure("daemon exit status %d" % daemon.returncode)
    except QmpError as e:
        raise Failure(str(e)) from None
    finally:
        for p in writers:
            p.kill()
            p.wait()
        if daemon.returncode is None:
            daemon.kill()
            daemon.wait()
        for s in servers:
            s.terminate()
            s.wait()
    with open(opts.out, "w") as f:
        f.write("%.4f\t%.3f\t%.2f\t%d\t%d\t%d\t%s\n" % (
            t_ready - t0, (t_done - t_c) * 1000, ru.ru_utime + ru.ru_stime,
            ru.ru_maxrss, sum(rates), min(rates),
            ",".join("%.3f" % (ready[j] - t0) for j in jobs)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qmp", required=True, help="the daemon's QMP socket")
    p.add_argument("--dir", required=True, help="srcI, tgtI live here")
    p.add_argument("--disks", type=int, default=3)
    p.add_argument("--out", required=True, help="result line goes here")
    p.add_argument("--writer", help="guest command line, {uri}: the "
                   "export's URI (fio, JSON output on stdout)")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--log", help="daemon stdout and stderr")
    p.add_argument("daemon", nargs="+", help="daemon command line")
    opts = p.parse_args()
    try:
        run(opts)
    except (Failure, OSError, ValueError) as e:
        print("multi.py: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
