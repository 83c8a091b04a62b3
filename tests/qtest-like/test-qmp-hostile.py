#!/usr/bin/env python3
# Hostile QMP clients against a running `mirror-tool start --qmp` job
# (issue 28): a line of 100,000 '[', duplicate "execute", a line starting
# with NUL, two objects on one line, "oob" asked for, a 100-digit id, a
# client that floods commands emitting events without reading, 40 clients
# that never read, accept() at EMFILE, and a client that stops reading
# while another waits for BLOCK_JOB_COMPLETED.  After each attack a
# well-behaved client must be answered within seconds; at the end the job
# completes (through `mirror-tool qmp --wait-event`) and the target is
# byte-identical to the source.  Then `--qmp-max-output` and
# `--qmp-max-total-output` on their own job: a client that reads nothing is
# dropped at the lowered cap while a good client is answered; and
# `--qmp-handshake-limit`: clients that never negotiate lose their places.
#
# Runs under meson with MIRROR_TOOL set; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import json
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import taplib
from taplib import check, diag

MiB = 1 << 20
SIZE = 64 * MiB
TOOL = os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../build/qemu-mirror-tool/mirror-tool")
ACCEPT_BACKOFF = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "accept-backoff.py")
# Every wait is bounded by this; the machine may be slow and busy.
TMO = 20


class Client:
    """A QMP connection that reads line by line, with deadlines."""

    def __init__(self, path, negotiate=True):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(TMO)
        self.s.connect(path)
        self.buf = b""
        self.events = []
        self.greeting = self.read_msg()
        if negotiate:
            r = self.cmd("qmp_capabilities")
            assert "return" in r, r

    def read_line(self, timeout=TMO):
        """The next raw line (without CRLF), or None on EOF/timeout."""
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                return None
            self.s.settimeout(left)
            try:
                d = self.s.recv(65536)
            except (socket.timeout, ConnectionError):
                return None
            if not d:
                return None
            self.buf += d
        line, self.buf = self.buf.split(b"\n", 1)
        return line.rstrip(b"\r")

    def read_msg(self, timeout=TMO):
        line = self.read_line(timeout)
        return None if line is None else json.loads(line)

    def send(self, data):
        self.s.settimeout(TMO)
        self.s.sendall(data)

    def reply_raw(self, timeout=TMO):
        """The next reply line (events are queued), raw."""
        while True:
            line = self.read_line(timeout)
            if line is None:
                return None
            if b'"event"' in line and json.loads(line).get("event"):
                self.events.append(json.loads(line))
                continue
            return line

    def reply(self, timeout=TMO):
        line = self.reply_raw(timeout)
        return None if line is None else json.loads(line)

    def cmd(self, name, args=None, timeout=TMO):
        req = {"execute": name}
        if args is not None:
            req["arguments"] = args
        self.send(json.dumps(req).encode() + b"\n")
        return self.reply(timeout)

    def wait_event(self, name, timeout=TMO):
        end = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e["event"] == name:
                    self.events.remove(e)
                    return e
            left = end - time.monotonic()
            if left <= 0:
                return None
            m = self.read_msg(left)
            if m is None:
                return None
            if "event" in m:
                self.events.append(m)

    def close(self):
        self.s.close()


def desc(r):
    return r["error"]["desc"] if r and "error" in r else None


def alive(tool, good, what):
    """The tool runs and the good client is answered in time."""
    t0 = time.monotonic()
    r = good.cmd("query-block-jobs", timeout=TMO)
    dt = time.monotonic() - t0
    ok = tool.poll() is None and r is not None and "return" in r
    if not ok:
        diag("after %s: tool exit %s, reply %r" % (what, tool.poll(), r))
    return check(ok, "%s: the tool runs, a good client is answered "
                 "(%.2f s)" % (what, dt))


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


class Ctx:
    """The tool under attack; started again if an attack killed it, so
    that every attack is tried (and reported) even on a broken build."""

    def __init__(self, tmp):
        self.src = os.path.join(tmp, "s.raw")
        self.dst = os.path.join(tmp, "d.raw")
        self.sock = os.path.join(tmp, "qmp.sock")
        self.tool = None
        self.good = None
        self.errors = []

    def start(self):
        if self.tool is not None:
            try:
                if self.tool.poll() is None and \
                        "return" in self.good.cmd("query-jobs", timeout=5):
                    return
            except Exception:
                pass
            if self.tool.poll() is None:
                self.tool.kill()
            out, err = self.tool.communicate()
            self.errors.append(err.decode(errors="replace"))
            diag("the tool died (%s); starting it again" % self.tool.poll())
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        # Slow enough to stay in the bulk stage for the attacks; the good
        # client lifts the limit at the end.
        # A small quarantine under ASan, so that RSS measures the clients.
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + \
            ":quarantine_size_mb=16"
        self.tool = subprocess.Popen(
            [TOOL, "start", "--qmp", self.sock, "--qmp-wait", "--speed",
             "4M", self.src, self.dst],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        end = time.monotonic() + TMO
        while not os.path.exists(self.sock):
            if time.monotonic() > end or self.tool.poll() is not None:
                raise RuntimeError("the QMP socket did not come up")
            time.sleep(0.05)
        self.good = Client(self.sock)

    def stop(self):
        if self.tool is None:
            return
        if self.tool.poll() is None:
            self.tool.kill()
        out, err = self.tool.communicate()
        self.errors.append(err.decode(errors="replace"))
        self.tool = None


def main():
    tmp = tempfile.mkdtemp(prefix="qmp-hostile.")
    ctx = Ctx(tmp)
    with open(ctx.src, "wb") as f:
        seed = os.urandom(MiB)
        for i in range(SIZE // MiB):
            f.write(seed[i:] + seed[:i])
    with open(ctx.dst, "wb") as f:
        f.truncate(SIZE)
    try:
        for section in SECTIONS:
            try:
                ctx.start()
                section(ctx, ctx.tool, ctx.sock, ctx.good)
            except Exception as e:
                check(False, "%s: %r" % (section.__name__, e))
        ctx.stop()
        for limits in OUTPUT_LIMITS:
            try:
                limits(ctx, tmp)
            except Exception as e:
                check(False, "%s: %r" % (limits.__name__, e))
    finally:
        ctx.stop()
        if taplib.failed:
            diag("tool stderr:\n" + "\n".join(ctx.errors))
        shutil.rmtree(tmp)
    return taplib.plan()


def nesting(ctx, tool, sock, good):
    # Nesting: QEMU's limit of 1024, before negotiation.
    c = Client(sock, negotiate=False)
    c.send(b"[" * 100000 + b"\n")
    check(desc(c.reply()) == "JSON nesting depth limit exceeded",
          "100,000 '[': the nesting limit error")
    c.send(b"[" * 1024 + b"]" * 1024 + b"\n")
    check(desc(c.reply()) == "QMP input must be a JSON object",
          "1024 levels parse")
    c.send(b"[" * 1025 + b"]" * 1025 + b"\n")
    check(desc(c.reply()) == "JSON nesting depth limit exceeded",
          "1025 levels do not")
    c.close()
    alive(tool, good, "nesting")


def duplicate_keys(ctx, tool, sock, good):
    # Duplicate keys: refused, nothing run.
    good.send(b'{"execute": "query-jobs", "execute": "quit"}\n')
    check(desc(good.reply()) == "JSON parse error, duplicate key",
          "duplicate execute: 'duplicate key'")
    good.send(b'{"execute": "query-jobs", "\\u0065xecute": "quit"}\n')
    check(desc(good.reply()) == "JSON parse error, duplicate key",
          "duplicate execute spelt with an escape: 'duplicate key'")
    alive(tool, good, "duplicate key")


def nul_bytes(ctx, tool, sock, good):
    # NUL bytes: answered, not dropped.
    good.send(b'\0{"execute": "quit"}\n')
    r = good.reply()
    check(r is not None and "JSON parse error" in (desc(r) or ""),
          "a line starting with NUL gets an error reply")
    good.send(b'{"execute": "query-jobs", "id": "a\0b"}\n')
    r = good.reply()
    check(r is not None and "JSON parse error" in (desc(r) or ""),
          "a NUL inside a string gets an error reply")
    alive(tool, good, "NUL")


def two_objects(ctx, tool, sock, good):
    # Two objects on one line: both handled, in order.
    good.send(b'{"execute": "query-jobs", "id": 1}{"execute": "nope", '
              b'"id": 2}\n')
    r1, r2 = good.reply(), good.reply()
    check(r1 and "return" in r1 and r1.get("id") == 1 and
          r2 and r2["error"]["class"] == "CommandNotFound" and
          r2.get("id") == 2, "two objects on one line: two replies")


def capabilities(ctx, tool, sock, good):
    # Capabilities: "oob" is not offered, negotiation stays open.
    c = Client(sock, negotiate=False)
    check(c.greeting["QMP"]["capabilities"] == [],
          "no capability offered")
    c.send(b'{"execute": "qmp_capabilities", "arguments": '
           b'{"enable": ["oob"]}}\n')
    check(desc(c.reply()) == "Capability oob not available",
          "enable oob: 'Capability oob not available'")
    r = c.cmd("query-jobs")
    check(r and r["error"]["class"] == "CommandNotFound",
          "still not negotiated after the refused oob")
    c.close()


def ids(ctx, tool, sock, good):
    # Ids come back as sent.
    big = b"1" * 100
    good.send(b'{"execute": "query-jobs", "id": ' + big + b'}\n')
    line = good.reply_raw()
    check(line is not None and line.endswith(b'"id":' + big + b'}'),
          "a 100-digit id is echoed digit for digit")
    good.send(b'{"id": [1.50, "x y", {"k": -0}], "execute": "nope"}\n')
    line = good.reply_raw()
    check(line is not None and line.endswith(b'"id":[1.50,"x y",{"k":-0}]}'),
          "a structured id is echoed as sent")
    alive(tool, good, "ids")


def event_flood(ctx, tool, sock, good):
    # A client floods commands whose replies and events it never reads
    # (block-job-resume emits JOB_STATUS_CHANGE synchronously when the job
    # paused in between): the server stops reading it once 1 MiB of output
    # is unread.  Before, it was freed at 16 MiB, under the command when an
    # event crossed the cap (issue 28's use-after-free; fuzz-qmp reaches
    # that path every time, this flood only now and then).
    c = Client(sock)
    c.s.setblocking(False)
    pair = (b'{"execute": "block-job-pause", "arguments": {"device": '
            b'"mirror"}}\n{"execute": "query-block-jobs"}\n'
            b'{"execute": "block-job-resume", "arguments": {"device": '
            b'"mirror"}}\n') * 64
    sent, t_end, blocked = 0, time.monotonic() + 15, None
    while time.monotonic() < t_end and sent < 32 * MiB:
        try:
            sent += c.s.send(pair)
            blocked = None
        except BlockingIOError:
            # The server reads on, or stopped reading: give it a second.
            blocked = blocked or time.monotonic()
            if time.monotonic() - blocked > 1:
                break
            time.sleep(0.01)
        except OSError:
            break
    diag("the flooding client sent %d KiB" % (sent // 1024))
    c.close()
    alive(tool, good, "event flood")
    good.cmd("block-job-resume", {"device": "mirror"})


def forty_clients(ctx, tool, sock, good):
    # 40 clients that never read, each flooding: 16 at most are served,
    # memory stays bounded, the good client is answered.
    rss0 = rss_mib(tool.pid)
    ctx.nfd0 = (tool.pid, len(os.listdir("/proc/%d/fd" % tool.pid)))
    flood = b'{"execute": "query-block-jobs"}\n' * 256
    hogs, refused = [], 0
    for i in range(40):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(TMO)
        s.connect(sock)
        hogs.append(s)
    for s in hogs:
        s.setblocking(False)
        try:
            s.send(b'{"execute": "qmp_capabilities"}\n')
        except OSError:
            pass
    t_end = time.monotonic() + 3
    while time.monotonic() < t_end:
        for s in hogs:
            try:
                s.send(flood)
            except (BlockingIOError, OSError):
                pass
    # Each gets one line first: the greeting, or the refusal.
    t_end = time.monotonic() + TMO
    for s in hogs:
        s.setblocking(True)
        first = b""
        while b"\n" not in first and time.monotonic() < t_end:
            s.settimeout(max(0.01, t_end - time.monotonic()))
            try:
                d = s.recv(200 - len(first))
            except OSError:
                break
            if not d:
                break
            first += d
        if b"Too many QMP clients" in first:
            refused += 1
    rss1 = rss_mib(tool.pid)
    diag("RSS %.0f MiB before the 40 clients, %.0f MiB with them; %d "
         "refused" % (rss0, rss1, refused))
    check(refused >= 40 - 16, "clients beyond 16 are refused (%d of 40)"
          % refused)
    # Each of the 15 served: about 1 MiB unread (2 MiB allocated) and a
    # line being read.
    check(rss1 - rss0 < 100, "40 clients that do not read cost < 100 MiB "
          "(%.0f MiB)" % (rss1 - rss0))
    alive(tool, good, "40 non-reading clients")
    for s in hogs:
        s.close()


def emfile(ctx, tool, sock, good):
    # EMFILE: the tool may open just a few more files; clients queue in
    # the backlog and accept() must not spin.
    t_end = time.monotonic() + TMO
    pid, nfd0 = getattr(ctx, "nfd0", (0, 0))
    while pid == tool.pid and time.monotonic() < t_end and \
            len(os.listdir("/proc/%d/fd" % pid)) > nfd0:
        time.sleep(0.05)    # the tool closes the 40 clients
    soft, hard = resource.prlimit(tool.pid, resource.RLIMIT_NOFILE)
    nfd = len(os.listdir("/proc/%d/fd" % tool.pid))
    resource.prlimit(tool.pid, resource.RLIMIT_NOFILE, (nfd + 1, hard))
    waiting = []
    for i in range(8):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock)
        waiting.append(s)
    # The tool's own failing accept() calls, not its CPU use over a
    # window: they must come at least 50 ms apart (it retries after 100).
    r = subprocess.run([sys.executable, ACCEPT_BACKOFF, str(tool.pid)],
                       capture_output=True, timeout=TMO * 3)
    why = r.stdout.decode(errors="replace").strip()
    diag(why)
    if r.returncode == 77:
        check(True, "accept() at EMFILE does not spin # SKIP %s" % why)
    else:
        check(r.returncode == 0, "accept() at EMFILE does not spin")
    alive(tool, good, "EMFILE")
    w = waiting[-1]
    w.setblocking(False)
    try:
        queued = not w.recv(4096)
    except BlockingIOError:
        queued = True
    check(queued, "at EMFILE the last client waits in the backlog")
    resource.prlimit(tool.pid, resource.RLIMIT_NOFILE, (soft, hard))
    w.setblocking(True)
    w.settimeout(TMO)
    check(w.recv(4096).startswith(b'{"QMP"'),
          "the queued clients are served once files are free")
    for s in waiting:
        s.close()


def stuck_client(ctx, tool, sock, good):
    # A client that stops reading must not make another miss the last
    # events: 1 MiB of requests, whose replies (4 MiB) it never reads.
    stuck = Client(sock)
    stuck.s.setblocking(False)
    req = b'{"execute": "query-jobs"}\n' * 1024
    sent, t_end = 0, time.monotonic() + 5
    while sent < MiB and time.monotonic() < t_end:
        try:
            sent += stuck.s.send(req)
        except BlockingIOError:
            time.sleep(0.05)    # the server reads on, or stopped reading
        except OSError:
            break
    diag("the stuck client sent %d KiB" % (sent // 1024))
    alive(tool, good, "a stuck client")
    r = good.cmd("block-job-set-speed", {"device": "mirror", "speed": 0})
    check(r and "return" in r, "speed limit lifted")
    check(good.wait_event("BLOCK_JOB_READY", 60) is not None,
          "BLOCK_JOB_READY")
    good.close()
    # The documented switch-over: complete and wait for the event.
    w = subprocess.run([TOOL, "qmp", "--timeout", str(TMO), "--wait-event",
                        "BLOCK_JOB_COMPLETED", sock, "block-job-complete",
                        '{"device": "mirror"}'], capture_output=True,
                       timeout=TMO * 2)
    check(w.returncode == 0 and b"BLOCK_JOB_COMPLETED" in w.stdout,
          "qmp --wait-event BLOCK_JOB_COMPLETED block-job-complete gets the "
          "event despite the stuck client")
    if w.returncode:
        diag(w.stderr.decode(errors="replace"))
    try:
        rc = tool.wait(TMO)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "the tool exits 0 (%s)" % rc)
    stuck.close()
    same = subprocess.run(["cmp", ctx.src, ctx.dst]).returncode == 0
    check(same, "the target is byte-identical to the source")



# ---- the output caps as options, each on a job of its own ----

def start_limited(ctx, tmp, args):
    """`start --qmp` with @args on a fresh target; (tool, socket, good)."""
    sock = os.path.join(tmp, "lim.sock")
    dst = os.path.join(tmp, "lim.raw")
    for f in (sock, dst):
        if os.path.exists(f):
            os.unlink(f)
    with open(dst, "wb") as f:
        f.truncate(SIZE)
    tool = subprocess.Popen(
        [TOOL, "start", "--qmp", sock, "--qmp-wait", "--speed", "4M"] +
        args + [ctx.src, dst],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + TMO
    while not os.path.exists(sock):
        if time.monotonic() > end or tool.poll() is not None:
            tool.kill()
            raise RuntimeError("%s: the QMP socket did not come up: %s" %
                               (args, tool.communicate()[1].decode()))
        time.sleep(0.05)
    return tool, sock, Client(sock)


def stop_limited(ctx, tool):
    if tool.poll() is None:
        tool.kill()
    ctx.errors.append(tool.communicate()[1].decode(errors="replace"))


def flood_unread(c):
    """Send query-block-jobs on @c, reading nothing, until the server
    stops reading it (sends block for a second) or hangs up."""
    c.s.setblocking(False)
    burst = b'{"execute": "query-block-jobs"}\n' * 256
    sent, t_end, blocked = 0, time.monotonic() + TMO, None
    while time.monotonic() < t_end:
        try:
            sent += c.s.send(burst)
            blocked = None
        except BlockingIOError:
            blocked = blocked or time.monotonic()
            if time.monotonic() - blocked > 1:
                break
            time.sleep(0.01)
        except OSError:
            break
    return sent


def hung_up(c, timeout=0.0):
    """Did the server hang up on @c (within @timeout s)?  Reads nothing:
    reading would let its output drain."""
    p = select.poll()
    p.register(c.s, select.POLLHUP)
    return any(ev & (select.POLLHUP | select.POLLERR)
               for _, ev in p.poll(int(timeout * 1000)))


def max_output(ctx, tmp):
    # --qmp-max-output 64K: a client that reads nothing is paused at 16K
    # of unread output; the events a good client's pause/resume send to
    # every client push it past 64K and it is dropped.  With the default
    # (16 MiB) it would stay, paused, for the 2000 pairs below.
    tool, sock, good = start_limited(ctx, tmp, ["--qmp-max-output", "64K"])
    try:
        c = Client(sock)
        sent = flood_unread(c)
        diag("the client that reads nothing sent %d KiB" % (sent // 1024))
        pairs = 0
        while pairs < 2000 and not hung_up(c):
            for name in ("block-job-pause", "block-job-resume"):
                r = good.cmd(name, {"device": "mirror"})
                assert r is not None and "return" in r, (name, r)
            pairs += 1
        dropped = hung_up(c, TMO)
        diag("dropped after %d pause/resume pairs" % pairs)
        check(dropped, "--qmp-max-output 64K: a client that reads nothing "
              "is dropped")
        alive(tool, good, "--qmp-max-output 64K")
        c.close()
    finally:
        stop_limited(ctx, tool)


def max_total_output(ctx, tmp):
    # --qmp-max-total-output 128K with a per-client cap of 1G (so a client
    # is paused only at 1 MiB): a client that reads nothing crosses the
    # total first and is dropped; with the default (64 MiB) it would be
    # paused, not dropped.
    tool, sock, good = start_limited(ctx, tmp, [
        "--qmp-max-output", "1G", "--qmp-max-total-output", "128K"])
    try:
        c = Client(sock)
        sent = flood_unread(c)
        diag("the client that reads nothing sent %d KiB" % (sent // 1024))
        check(hung_up(c, TMO), "--qmp-max-total-output 128K: a client "
              "that reads nothing is dropped")
        alive(tool, good, "--qmp-max-total-output 128K")
        c.close()
    finally:
        stop_limited(ctx, tool)


def handshake_limit(ctx, tmp):
    # --qmp-max-clients 3 --qmp-handshake-limit 1: two clients that connect
    # and never send qmp_capabilities are dropped within seconds, so their
    # places are free again and a new client gets in; the good client,
    # negotiated, stays.  Without the limit they would hold their places
    # for as long as they stay connected.
    tool, sock, good = start_limited(ctx, tmp, [
        "--qmp-max-clients", "3", "--qmp-handshake-limit", "1"])
    try:
        silent = [Client(sock, negotiate=False) for _ in range(2)]
        # Within 5 s: the default limit (10 s) would not have dropped them.
        check(all(hung_up(c, 5) for c in silent),
              "--qmp-handshake-limit 1: clients that never negotiate are "
              "dropped")
        late = Client(sock)
        r = late.cmd("query-jobs")
        check(r is not None and "return" in r,
              "... and a new client then gets their place")
        alive(tool, good, "--qmp-handshake-limit 1")
        for c in silent + [late]:
            c.close()
    finally:
        stop_limited(ctx, tool)


OUTPUT_LIMITS = [max_output, max_total_output, handshake_limit]


SECTIONS = [nesting, duplicate_keys, nul_bytes, two_objects, capabilities,
            ids, event_flood, forty_clients, emfile, stuck_client]


if __name__ == "__main__":
    sys.exit(main())
