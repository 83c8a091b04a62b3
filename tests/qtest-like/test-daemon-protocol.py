#!/usr/bin/env python3
# `mirror-tool daemon`: its QMP protocol and its command line, checked
# against the exact replies qemu-storage-daemon 7.2 gives (each was taken
# from a real one): the greeting, qmp_capabilities with "oob" refused as
# QEMU refuses a capability it does not offer, query-version,
# query-commands, quit, malformed requests (non-objects, unknown members,
# "exec-oob" while oob is off, wrong types) with and without an "id";
# then the command line: --blockdev/--object/--nbd-server/--export
# values QEMU's keyval parser or the command refuses (exit 2, one line
# naming the value, no QMP socket left behind), the --qmp-* limits, a
# daemon without --qmp, and the exit codes of quit, SIGINT, SIGTERM and
# SIGHUP.  blockdev-add and the other parts' commands are not assumed:
# the keyval translation itself is test-keyval.c's.
#
# Runs under meson with MIRROR_TOOL set; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import taplib
from taplib import check, diag

TOOL = os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../build/qemu-mirror-tool/mirror-tool")
# Every wait is bounded by this; the machine may be slow and busy.
TMO = 30


def check_eq(got, want, name):
    """check() that @got is @want, showing both when not."""
    if not check(got == want, name):
        diag("got:  %r\nwant: %r" % (got, want))


def err(cls, desc, id_=None):
    """An error reply as QEMU sends it."""
    r = {"error": {"class": cls, "desc": desc}}
    if id_ is not None:
        r["id"] = id_
    return r


class Client:
    """A QMP connection read line by line, with deadlines."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(TMO)
        self.s.connect(path)
        self.buf = b""
        self.greeting = self.msg()

    def msg(self):
        """The next message, or None at EOF."""
        while b"\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                return None
            self.buf += d
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def raw(self, line):
        """Send @line as it is; the reply."""
        self.s.sendall(line.encode() + b"\n")
        return self.msg()

    def cmd(self, name, args=None, id_=None):
        req = {"execute": name}
        if args is not None:
            req["arguments"] = args
        if id_ is not None:
            req["id"] = id_
        return self.raw(json.dumps(req))

    def close(self):
        self.s.close()


def wait_for(cond, what):
    """Poll @cond (a socket file, /proc) until true, within TMO."""
    end = time.monotonic() + TMO
    while not cond():
        if time.monotonic() > end:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.02)


def start(tmp, args, name="qmp.sock"):
    """`mirror-tool daemon --qmp SOCK ARGS...`, serving: (proc, sock)."""
    sock = os.path.join(tmp, name)
    if os.path.exists(sock):
        os.unlink(sock)
    proc = subprocess.Popen([TOOL, "daemon", "--qmp", sock] + args,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # The socket appears once the command line has run.
    wait_for(lambda: os.path.exists(sock) or proc.poll() is not None,
             "the QMP socket")
    if proc.poll() is not None:
        raise RuntimeError("daemon exited: %s" % proc.communicate()[1])
    return proc, sock


def finish(proc):
    """Wait for @proc: (exit code, stderr)."""
    try:
        _, e = proc.communicate(timeout=TMO)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, e = proc.communicate()
    return proc.returncode, e.decode(errors="replace")


def tool_version():
    out = subprocess.run([TOOL, "--version"], capture_output=True,
                         check=True).stdout.decode().splitlines()[0]
    ver = out.split()[1]
    major, minor, micro = (int(x) for x in ver.split("."))
    return {"qemu": {"major": major, "minor": minor, "micro": micro},
            "package": "qemu-mirror " + ver}


def negotiation(tmp):
    proc, sock = start(tmp, [])
    c = Client(sock)
    version = tool_version()
    check_eq(c.greeting, {"QMP": {"version": version, "capabilities": []}},
             "greeting: our version in QEMU's VersionInfo, no capability")
    check_eq(c.cmd("query-version"),
             err("CommandNotFound", "Expecting capabilities negotiation "
                 "with 'qmp_capabilities'"),
             "a command before qmp_capabilities")
    # QEMU's order: the arguments as its visitor checks them (elements,
    # then unexpected members), then the capability.
    cases = [
        ({"enable": ["oob"]}, "Capability oob not available"),
        ({"enable": ["oob", "oob"]}, "Capability oob, oob not available"),
        ({"enable": ["foo"]}, "Parameter 'null' does not accept value "
         "'foo'"),
        ({"enable": ["oob", 1]}, "Invalid parameter type for 'enable[1]', "
         "expected: string"),
        ({"enable": "oob"}, "Invalid parameter type for 'enable', "
         "expected: array"),
        ({"enable": "oob", "x": 1}, "Invalid parameter type for 'enable', "
         "expected: array"),
        ({"enable": ["oob"], "x": 1}, "Parameter 'x' is unexpected"),
        ({"x": 1}, "Parameter 'x' is unexpected"),
    ]
    for args, desc in cases:
        check_eq(c.cmd("qmp_capabilities", args), err("GenericError", desc),
                 "qmp_capabilities %s" % json.dumps(args))
    check_eq(c.cmd("query-version"),
             err("CommandNotFound", "Expecting capabilities negotiation "
                 "with 'qmp_capabilities'"),
             "negotiation still open after the refusals")
    check_eq(c.cmd("qmp_capabilities", {"enable": []}, id_=[1]),
             {"return": {}, "id": [1]}, "qmp_capabilities, enable []")
    done = err("CommandNotFound", "Capabilities negotiation is already "
               "complete, command ignored")
    check_eq(c.cmd("qmp_capabilities"), done, "qmp_capabilities again")
    check_eq(c.cmd("qmp_capabilities", {"enable": ["oob"]}), done,
             "qmp_capabilities again with oob: 'already complete' first")
    check_eq(c.cmd("qmp_capabilities", {"enable": ["foo"]}),
             err("GenericError", "Parameter 'null' does not accept value "
                 "'foo'"),
             "qmp_capabilities again, bad value: the arguments first")
    return proc, c, version


def requests(c, version):
    check_eq(c.cmd("query-version"), {"return": version}, "query-version")
    check_eq(c.cmd("query-version", id_="v1"),
             {"return": version, "id": "v1"}, "query-version with an id")
    check_eq(c.cmd("query-version", {"x": 1}, id_=7),
             err("GenericError", "Parameter 'x' is unexpected", 7),
             "query-version with an unknown argument")
    r = c.cmd("query-commands").get("return")
    check(isinstance(r, list) and r and
          all(isinstance(e, dict) and set(e) == {"name"} for e in r),
          "query-commands: a list of {\"name\": ...}")
    names = [e.get("name") for e in r] if check(isinstance(r, list),
                                                 "query-commands") else []
    check({"qmp_capabilities", "query-commands", "query-version",
           "quit"} <= set(names), "query-commands names ours")
    check(names == sorted(set(names)), "query-commands: sorted, once each")
    check_eq(c.cmd("query-commands", {"x": 1}),
             err("GenericError", "Parameter 'x' is unexpected"),
             "query-commands with an unknown argument")
    # The request's members, as qmp_dispatch_check_obj() has them.
    raw = [
        ('{"exec-oob": "query-version", "id": 6}',
         err("GenericError", "QMP input member 'exec-oob' is unexpected",
             6)),
        ('{"execute": "query-version", "exec-oob": "x", "id": 1}',
         err("GenericError", "QMP input member 'exec-oob' is unexpected",
             1)),
        ('{"execute": "query-version", "foo": 1, "id": 2}',
         err("GenericError", "QMP input member 'foo' is unexpected", 2)),
        ('{"execute": 1, "id": {"a": [1, 2]}}',
         err("GenericError", "QMP input member 'execute' must be a string",
             {"a": [1, 2]})),
        ('{"execute": "query-version", "arguments": []}',
         err("GenericError", "QMP input member 'arguments' must be an "
             "object")),
        ('{"id": 3}', err("GenericError", "QMP input lacks member "
                          "'execute'", 3)),
        ('[1]', err("GenericError", "QMP input must be a JSON object")),
        ('1', err("GenericError", "QMP input must be a JSON object")),
        ('"x"', err("GenericError", "QMP input must be a JSON object")),
        ('{"execute": "nope", "id": "z"}',
         err("CommandNotFound", "The command nope has not been found",
             "z")),
        ('{"execute": "query-version", "id": 1, "id": 2}',
         err("GenericError", "JSON parse error, duplicate key")),
    ]
    for line, want in raw:
        check_eq(c.raw(line), want, "request %s" % line)
    check_eq(c.cmd("quit", {"a": 1}),
             err("GenericError", "Parameter 'a' is unexpected"),
             "quit with an unknown argument")
    check_eq(c.cmd("query-version"), {"return": version},
             "still serving after the refused quit")


def quit_cmd(proc, c):
    """quit: its reply; the request after it on the line is not run."""
    sock = c.s
    sock.sendall(b'{"execute": "quit", "id": "q"}\n'
                 b'{"execute": "query-version", "id": "late"}\n')
    check_eq(c.msg(), {"return": {}, "id": "q"}, "quit: its reply")
    check_eq(c.msg(), None, "nothing after quit: end of file")
    rc, e = finish(proc)
    check_eq(rc, 0, "quit: exit code 0")
    check_eq(e, "", "quit: nothing on stderr")


def protocol(tmp):
    proc, c, version = negotiation(tmp)
    try:
        requests(c, version)
        quit_cmd(proc, c)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def signals(tmp):
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        proc, sock = start(tmp, [])
        c = Client(sock)
        c.cmd("qmp_capabilities")
        proc.send_signal(sig)
        rc, e = finish(proc)
        check_eq(rc, 0, "%s: exit code 0" % sig.name)
        check(e.strip().startswith("mirror-tool: %s: stopping" % sig.name),
              "%s: says it stops" % sig.name)
        check(not os.path.exists(sock), "%s: socket removed" % sig.name)
        check_eq(c.msg(), None, "%s: the client sees end of file" %
                 sig.name)
        c.close()


def sigterm_caught(pid):
    """Has @pid a handler for SIGTERM (its main loop's source)?"""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1))
    return False


def no_qmp(tmp):
    """No --qmp: allowed, as in qemu-storage-daemon; a signal stops it."""
    proc = subprocess.Popen([TOOL, "daemon"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    wait_for(lambda: proc.poll() is not None or sigterm_caught(proc.pid),
             "the daemon's signal handler")
    check(proc.poll() is None, "without --qmp: runs")
    proc.send_signal(signal.SIGTERM)
    rc, _ = finish(proc)
    check_eq(rc, 0, "without --qmp: SIGTERM, exit code 0")


def bad_options(tmp):
    """Exit 2, one line naming the value, no socket file left."""
    sock = os.path.join(tmp, "bad.sock")
    cases = [
        (["--blockdev", "driver=null-co,node-name=n,x"],
         "mirror-tool: --blockdev 'driver=null-co,node-name=n,x': "
         "Expected '=' after parameter 'x'"),
        (["--blockdev", "driver=null-co,1a=2"],
         "mirror-tool: --blockdev 'driver=null-co,1a=2': Invalid "
         "parameter '1a'"),
        (["--object", "secret,id=s,a.b=1,a=2"],
         "mirror-tool: --object 'secret,id=s,a.b=1,a=2': Parameters "
         "'a.*' used inconsistently"),
        (["--nbd-server", "addr.type=unix,x.1=a"],
         "mirror-tool: --nbd-server 'addr.type=unix,x.1=a': Parameter "
         "'x.0' missing"),
        (["--blockdev", "{\"driver\": "],
         "mirror-tool: --blockdev '{\"driver\": ': JSON parse error"),
        # Parsed, then refused by its command (whichever parts exist):
        # nothing that came before it stays.
        (["--object", "secret,id=s,data=x", "--export",
          "nbd,id=e,node-name=nope"],
         "mirror-tool: --"),
        (["--qmp-max-clients", "0"],
         "mirror-tool: --qmp-max-clients '0': must be between 1 and "
         "1024"),
        (["--qmp-max-output", "1K"],
         "mirror-tool: --qmp-max-output '1K': must be"),
        (["--qmp-max-total-output", "x"],
         "mirror-tool: --qmp-max-total-output 'x': "),
        (["--qmp-handshake-limit", "86401"],
         "mirror-tool: --qmp-handshake-limit '86401': must be between 0 "
         "and 86400"),
        (["--blockdev"], "mirror-tool: Missing argument for --blockdev"),
        (["extra"], "mirror-tool: daemon: expected no argument"),
    ]
    for args, want in cases:
        if os.path.exists(sock):
            os.unlink(sock)
        r = subprocess.run([TOOL, "daemon", "--qmp", sock] + args,
                           capture_output=True, timeout=TMO)
        e = r.stderr.decode(errors="replace")
        check_eq(r.returncode, 2, "%s: exit code 2" % args)
        check(e.startswith(want) and e.count("\n") == 1,
              "%s: one line: %s" % (args, want))
        if not e.startswith(want):
            diag(e)
        check(not os.path.exists(sock), "%s: no socket left" % args)
    r = subprocess.run([TOOL, "daemon", "--qmp-max-clients", "3"],
                       capture_output=True, timeout=TMO)
    check_eq((r.returncode, r.stderr.decode()),
             (2, "mirror-tool: --qmp-max-clients needs --qmp PATH\n"),
             "--qmp-max-clients without --qmp")


def qmp_limits(tmp):
    """The --qmp-* options reach the daemon's server."""
    proc, sock = start(tmp, ["--qmp-max-clients", "1",
                             "--qmp-handshake-limit", "0",
                             "--qmp-max-output", "64K"])
    c = Client(sock)
    extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    extra.settimeout(TMO)
    extra.connect(sock)
    line = extra.makefile("rb").readline()
    check_eq(json.loads(line),
             err("GenericError", "Too many QMP clients (at most 1, "
                 "--qmp-max-clients)"),
             "--qmp-max-clients 1: a second client is refused")
    extra.close()
    c.cmd("qmp_capabilities")
    check_eq(c.cmd("quit"), {"return": {}}, "the first client is served")
    check_eq(finish(proc)[0], 0, "and quits")


def main():
    tmp = tempfile.mkdtemp(prefix="daemon-protocol.")
    try:
        # Each part on its own, so that a broken build shows every fault.
        for part in (protocol, signals, no_qmp, bad_options, qmp_limits):
            try:
                part(tmp)
            except Exception as e:
                check(False, "%s: %r" % (part.__name__, e))
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    sys.exit(taplib.plan())


if __name__ == "__main__":
    main()
