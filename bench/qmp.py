#!/usr/bin/env python3
"""bench/qmp.py - run one mirror job under a QMP daemon and time it.

Used by bench/mirror.sh and bench/live.sh, for `mirror-tool start --qmp`
and `qemu-storage-daemon` alike (both speak QEMU's QMP).  Not run in CI.

    qmp.py [--qmp SOCK] --out FILE [--start JSON] [--writer CMD
           [--writer-ready TEXT]] [--baseline S [--ready-socket PATH]]
           [--job ID] [--timeout S] [--log FILE] -- DAEMON [ARG...]

1. Start DAEMON (stdout and stderr to --log) and connect to its QMP socket
   SOCK as soon as it accepts connections (with --ready-socket, also wait
   until PATH accepts a connection).
2. With --writer (fio with --output-format=json on stdout): start it (the
   command line is split as the shell would and run without a shell, so
   that it gets the SIGINT) and wait until it prints a line containing
   TEXT (fio's nbd engine: "connected to NBD server"), so that it is
   writing when the job starts.
3. t0; start the job: with --start (qemu-storage-daemon), negotiate first,
   take t0, then send the command JSON (e.g. blockdev-mirror); without it
   (mirror-tool start --qmp-wait), take t0 and negotiate: the job starts
   then.
4. Wait for BLOCK_JOB_READY (t_ready).  Stop the writer (SIGINT) and wait
   for it to exit, as a live migration pauses the guest.
5. query-block-jobs: bytes left = len - offset, and the fields of the
   job's entry that QEMU does not have (if any).
6. t_c; block-job-complete; wait for BLOCK_JOB_COMPLETED (t_done), which
   must carry no error.  Then quit, and wait for the daemon to exit 0.

With --baseline S no job is started: steps 3 to 6 become "negotiate (with
--qmp), let the writer run for S seconds, stop it", and the daemon is
stopped with quit (with --qmp) or else SIGINT (`mirror-tool serve`); it
must exit 0.  ready_s and done_s are then the writer's window.

Writes one tab-separated line to --out:
    ready_s done_s pause_ms left_bytes cpu_s maxrss_kib writer_Bps
    wr_p50_us wr_p99_us reader_Bps rd_p50_us rd_p99_us extra
ready_s = t_ready - t0, done_s = t_done - t0, pause_ms = t_done - t_c;
cpu_s and maxrss_kib are the daemon's (user + sys, peak RSS, from wait4);
writer_Bps and reader_Bps are the write and read rates fio reports, the
_p50_us and _p99_us its completion latency percentiles (clat) in
microseconds, 0 without a writer or without reads; extra is the job's
extra query-block-jobs fields as compact JSON, or "-".  Times are taken
on this process's monotonic clock when a message is sent or received.
Exit status 0 on success; 1 with a one-line reason on stderr.
"""


import argparse
import json
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import time


class Failure(Exception):
    """The run failed; the message says why."""


class Qmp:
    """A line-oriented QMP client that keeps events until asked for."""

    def __init__(self, path, deadline, daemon):
        self.sock = None
        while self.sock is None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
                self.sock = s
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if daemon.poll() is not None:
                    raise Failure("daemon exited with status %d before "
                                  "serving QMP" % daemon.returncode)
                if time.monotonic() > deadline:
                    raise Failure("no QMP socket at %s" % path)
                time.sleep(0.002)       # poll for the socket to appear
        self.deadline = deadline
        self.buf = b""
        self.events = []
        self.next_id = 0
        greeting = self.recv()
        if "QMP" not in greeting:
            raise Failure("no QMP greeting: %r" % greeting)

    def recv(self):
        """The next message, or Failure on EOF or timeout."""
        while b"\n" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise Failure("timed out waiting for QMP")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise Failure("timed out waiting for QMP") from None
            if not data:
                raise Failure("QMP connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line) if line.strip() else self.recv()

    def send(self, cmd, args=None):
        """Send a command; returns its id."""
        self.next_id += 1
        msg = {"execute": cmd, "id": self.next_id}
        if args is not None:
            msg["arguments"] = args
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        return self.next_id

    def reply(self, cmd_id, what):
        """Wait for the reply to cmd_id; Failure on an error reply."""
        while True:
            msg = self.recv()
            if "event" in msg:
                self.events.append((time.monotonic(), msg))
            elif msg.get("id") == cmd_id:
                if "error" in msg:
                    raise Failure("%s: %s" % (what, msg["error"]))
                return msg["return"]

    def execute(self, cmd, args=None):
        return self.reply(self.send(cmd, args), cmd)

    def event(self, name, fatal=("BLOCK_JOB_CANCELLED",)):
        """Wait for event name; returns (receipt time, message)."""
        while True:
            while self.events:
                t, ev = self.events.pop(0)
                if ev["event"] == name:
                    return t, ev
                if ev["event"] in fatal or (
                        ev["event"] == "BLOCK_JOB_COMPLETED" and
                        name != "BLOCK_JOB_COMPLETED"):
                    raise Failure("%s before %s: %s" % (ev["event"], name,
                                                        ev.get("data")))
            msg = self.recv()
            if "event" in msg:
                self.events.append((time.monotonic(), msg))
            elif "error" in msg:
                raise Failure("waiting for %s: %s" % (name, msg["error"]))


def wait_writer_ready(writer, opts, deadline):
    """Return once the writer printed a line containing --writer-ready."""
    if not opts.writer_ready:
        return
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([writer.stdout], [], [], left)[0]:
            raise Failure("the writer did not print %r" % opts.writer_ready)
        line = writer.stdout.readline()
        if not line:
            raise Failure("the writer exited with status %s before "
                          "printing %r" % (writer.wait(), opts.writer_ready))
        if opts.writer_ready in line:
            return


# The fields of a query-block-jobs entry that QEMU has; the others are
# logged as they come.
QEMU_JOB_FIELDS = {"type", "device", "len", "offset", "busy", "paused",
                   "speed", "io-status", "ready", "status", "auto-finalize",
                   "auto-dismiss", "error"}

# What a run without a writer reports for it.
NO_WRITER = {"wr_bps": 0, "wr_p50": 0, "wr_p99": 0,
             "rd_bps": 0, "rd_p50": 0, "rd_p99": 0}


def fio_direction(job, rw):
    """(bytes/s, p50 us, p99 us) of fio's job for rw ("read", "write")."""
    d = job[rw]
    if not d.get("io_bytes"):
        return 0, 0, 0
    pct = d["clat_ns"].get("percentile", {})
    try:
        return (d["bw_bytes"], pct["50.000000"] / 1000,
                pct["99.000000"] / 1000)
    except KeyError:
        raise Failure("fio reported no clat percentiles 50 and 99 for "
                      "%ss" % rw) from None


def stop_writer(writer):
    """SIGINT the writer, wait for it, return its rates and latencies."""
    if writer is None:
        return NO_WRITER
    if writer.poll() is not None:
        raise Failure("writer exited early with status %d"
                      % writer.returncode)
    writer.send_signal(signal.SIGINT)
    try:
        text, _ = writer.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        writer.kill()
        raise Failure("writer did not stop") from None
    try:
        job = json.loads(text[text.index("{"):])["jobs"][0]
        r = dict(zip(("wr_bps", "wr_p50", "wr_p99"),
                     fio_direction(job, "write")))
        r.update(zip(("rd_bps", "rd_p50", "rd_p99"),
                     fio_direction(job, "read")))
        return r
    except (ValueError, KeyError, IndexError):
        raise Failure("no fio result in the writer's output") from None


def wait_socket(path, deadline, daemon):
    """Return once the UNIX socket path accepts a connection."""
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return
        except (FileNotFoundError, ConnectionRefusedError):
            if daemon.poll() is not None:
                raise Failure("daemon exited with status %d before "
                              "listening on %s" % (daemon.returncode, path))
            if time.monotonic() > deadline:
                raise Failure("nothing listens on %s" % path) from None
            time.sleep(0.002)           # poll for the socket to appear
        finally:
            s.close()


def run_job(q, opts):
    """Steps 3 to 6 with the job; returns (times, writer, left, extra)."""
    if opts.start:
        t0 = time.monotonic()
        start = json.loads(opts.start)
        q.reply(q.send(start["execute"], start.get("arguments")),
                start["execute"])
    else:
        t0 = time.monotonic()
        q.execute("qmp_capabilities")
    t_ready, _ = q.event("BLOCK_JOB_READY")
    w = stop_writer(opts.writer_proc)
    opts.writer_proc = None
    jobs = q.execute("query-block-jobs")
    job = next((j for j in jobs if j["device"] == opts.job), None)
    if job is None:
        raise Failure("job %s not in query-block-jobs" % opts.job)
    left = job["len"] - job["offset"]
    extra = {k: v for k, v in job.items() if k not in QEMU_JOB_FIELDS}
    t_c = time.monotonic()
    q.send("block-job-complete", {"device": opts.job})
    t_done, ev = q.event("BLOCK_JOB_COMPLETED")
    if "error" in ev["data"]:
        raise Failure("job failed: %s" % ev["data"]["error"])
    return (t_ready - t0, t_done - t0, (t_done - t_c) * 1000), w, left, extra


def run_baseline(q, opts):
    """--baseline: the writer alone for opts.baseline seconds."""
    if q is not None and not opts.start:
        raise Failure("--baseline with --qmp needs --start (with "
                      "mirror-tool start --qmp-wait, negotiating starts "
                      "the job)")
    t0 = time.monotonic()
    time.sleep(opts.baseline)           # the measurement window
    w = stop_writer(opts.writer_proc)
    opts.writer_proc = None
    t = time.monotonic() - t0
    return (t, t, 0), w, 0, {}


def run(opts):
    deadline = time.monotonic() + opts.timeout
    log = open(opts.log, "w") if opts.log else subprocess.DEVNULL
    daemon = subprocess.Popen(opts.daemon, stdout=log, stderr=log,
                              stdin=subprocess.DEVNULL)
    opts.writer_proc = None
    try:
        q = Qmp(opts.qmp, deadline, daemon) if opts.qmp else None
        if opts.ready_socket:
            wait_socket(opts.ready_socket, deadline, daemon)
        if q is not None and opts.start:
            q.execute("qmp_capabilities")
        if opts.writer:
            opts.writer_proc = subprocess.Popen(
                shlex.split(opts.writer), text=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
            wait_writer_ready(opts.writer_proc, opts, deadline)
        if opts.baseline is not None:
            times, w, left, extra = run_baseline(q, opts)
        else:
            times, w, left, extra = run_job(q, opts)
        if q is not None:
            try:
                q.send("quit")
            except OSError:
                pass                    # mirror-tool may be gone already
        else:
            daemon.send_signal(signal.SIGINT)
        _, status, ru = os.wait4(daemon.pid, 0)
        daemon.returncode = os.waitstatus_to_exitcode(status)
        if daemon.returncode != 0:
            raise Failure("daemon exit status %d" % daemon.returncode)
    finally:
        if opts.writer_proc is not None:
            opts.writer_proc.kill()
            opts.writer_proc.wait()
        if daemon.returncode is None:
            daemon.kill()
            daemon.wait()
    with open(opts.out, "w") as f:
        f.write("%.4f\t%.4f\t%.3f\t%d\t%.2f\t%d\t%d\t%.0f\t%.0f\t%d\t%.0f"
                "\t%.0f\t%s\n" % (
                    times[0], times[1], times[2], left,
                    ru.ru_utime + ru.ru_stime, ru.ru_maxrss, w["wr_bps"],
                    w["wr_p50"], w["wr_p99"], w["rd_bps"], w["rd_p50"],
                    w["rd_p99"],
                    json.dumps(extra, separators=(",", ":"))
                    if extra else "-"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qmp", help="the daemon's QMP socket (required "
                   "unless --baseline)")
    p.add_argument("--out", required=True, help="result line goes here")
    p.add_argument("--start", help="JSON command that starts the job")
    p.add_argument("--job", default="j", help="job id (default j)")
    p.add_argument("--writer", help="command run from the job's start "
                   "until READY (fio, JSON output on stdout)")
    p.add_argument("--writer-ready", help="start the job once the writer "
                   "printed a line containing this")
    p.add_argument("--baseline", type=float, metavar="S",
                   help="start no job: run the writer for S seconds")
    p.add_argument("--ready-socket", metavar="PATH", help="start the "
                   "writer once this UNIX socket accepts a connection")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--log", help="daemon stdout and stderr")
    p.add_argument("daemon", nargs="+", help="daemon command line")
    opts = p.parse_args()
    if opts.qmp is None and opts.baseline is None:
        p.error("--qmp is required unless --baseline")
    try:
        run(opts)
    except (Failure, OSError, ValueError) as e:
        print("qmp.py: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
