#!/usr/bin/env python3
"""bench/qmp.py - run one mirror job under a QMP daemon and time it.

Used by bench/mirror.sh and bench/live.sh, for `mirror-tool start --qmp`
and `qemu-storage-daemon` alike (both speak QEMU's QMP).  Not run in CI.

    qmp.py --qmp SOCK --out FILE [--start JSON] [--writer CMD
           [--writer-ready TEXT]] [--job ID] [--timeout S] [--log FILE]
           -- DAEMON [ARG...]

1. Start DAEMON (stdout and stderr to --log) and connect to its QMP socket
   SOCK as soon as it accepts connections.
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
5. query-block-jobs: bytes left = len - offset.
6. t_c; block-job-complete; wait for BLOCK_JOB_COMPLETED (t_done), which
   must carry no error.  Then quit, and wait for the daemon to exit 0.

Writes one tab-separated line to --out:
    ready_s done_s pause_ms left_bytes cpu_s maxrss_kib writer_Bps
ready_s = t_ready - t0, done_s = t_done - t0, pause_ms = t_done - t_c;
cpu_s and maxrss_kib are the daemon's (user + sys, peak RSS, from wait4);
writer_Bps is the write rate fio reports, 0 without a writer.  Times are
taken on this process's monotonic clock when a message is sent or
received.  Exit status 0 on success; 1 with a one-line reason on stderr.
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


def stop_writer(writer):
    """SIGINT the writer, wait for it, return the write rate it reports."""
    if writer is None:
        return 0
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
        job = json.loads(text[text.index("{"):])["jobs"][0]["write"]
        return job["bw_bytes"]
    except (ValueError, KeyError, IndexError):
        raise Failure("no fio result in the writer's output") from None


def run(opts):
    deadline = time.monotonic() + opts.timeout
    log = open(opts.log, "w") if opts.log else subprocess.DEVNULL
    daemon = subprocess.Popen(opts.daemon, stdout=log, stderr=log,
                              stdin=subprocess.DEVNULL)
    writer = None
    try:
        q = Qmp(opts.qmp, deadline, daemon)
        if opts.start:
            q.execute("qmp_capabilities")
        if opts.writer:
            writer = subprocess.Popen(shlex.split(opts.writer), text=True,
                                      stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE)
            wait_writer_ready(writer, opts, deadline)
        if opts.start:
            t0 = time.monotonic()
            start = json.loads(opts.start)
            q.reply(q.send(start["execute"], start.get("arguments")),
                    start["execute"])
        else:
            t0 = time.monotonic()
            q.execute("qmp_capabilities")
        t_ready, _ = q.event("BLOCK_JOB_READY")
        writer_bps = stop_writer(writer)
        writer = None
        jobs = q.execute("query-block-jobs")
        job = next((j for j in jobs if j["device"] == opts.job), None)
        if job is None:
            raise Failure("job %s not in query-block-jobs" % opts.job)
        left = job["len"] - job["offset"]
        t_c = time.monotonic()
        q.send("block-job-complete", {"device": opts.job})
        t_done, ev = q.event("BLOCK_JOB_COMPLETED")
        if "error" in ev["data"]:
            raise Failure("job failed: %s" % ev["data"]["error"])
        try:
            q.send("quit")
        except OSError:
            pass                        # mirror-tool may be gone already
        _, status, ru = os.wait4(daemon.pid, 0)
        daemon.returncode = os.waitstatus_to_exitcode(status)
        if daemon.returncode != 0:
            raise Failure("daemon exit status %d" % daemon.returncode)
    finally:
        if writer is not None:
            writer.kill()
            writer.wait()
        if daemon.returncode is None:
            daemon.kill()
            daemon.wait()
    with open(opts.out, "w") as f:
        f.write("%.4f\t%.4f\t%.3f\t%d\t%.2f\t%d\t%d\n" % (
            t_ready - t0, t_done - t0, (t_done - t_c) * 1000, left,
            ru.ru_utime + ru.ru_stime, ru.ru_maxrss, writer_bps))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--qmp", required=True, help="the daemon's QMP socket")
    p.add_argument("--out", required=True, help="result line goes here")
    p.add_argument("--start", help="JSON command that starts the job")
    p.add_argument("--job", default="j", help="job id (default j)")
    p.add_argument("--writer", help="command run from the job's start "
                   "until READY (fio, JSON output on stdout)")
    p.add_argument("--writer-ready", help="start the job once the writer "
                   "printed a line containing this")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--log", help="daemon stdout and stderr")
    p.add_argument("daemon", nargs="+", help="daemon command line")
    opts = p.parse_args()
    try:
        run(opts)
    except (Failure, OSError, ValueError) as e:
        print("qmp.py: %s" % e, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
