#!/usr/bin/env python3
# TLS on `mirror-tool serve` at the protocol level (issue 19): FORCEDTLS
# refuses options before NBD_OPT_STARTTLS with NBD_REP_ERR_TLS_REQD and
# closes on NBD_OPT_EXPORT_NAME; plaintext sent behind STARTTLS ends the
# connection (STARTTLS command injection); STARTTLS with data or inside
# TLS is NBD_REP_ERR_INVALID; options negotiated in plaintext do not carry
# over into TLS; a client that stops mid-handshake is dropped by
# --handshake-limit; then nbdinfo/nbdcopy round trips through
# --tls-psk-file and --tls-creds, --tls-authz, and the command line's
# refusals (exit 2, no key or user name in any message).
#
# The certificates are made here with certtool, the keys with psktool.
# Runs under meson with MIRROR_TOOL set; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

from nbdraw import read

TOOL = os.environ.get("MIRROR_TOOL") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "../../build/qemu-mirror-tool/mirror-tool")
# Every wait is bounded by this; the machine may be slow and busy.
TMO = 30
MiB = 1 << 20

INIT, OPTS, OPT_REPLY = 0x4e42444d41474943, 0x49484156454f5054, \
    0x0003e889045565a9
OPT_EXPORT_NAME, OPT_ABORT, OPT_LIST, OPT_STARTTLS = 1, 2, 3, 5
OPT_GO, OPT_STRUCTURED_REPLY, OPT_SET_META_CONTEXT = 7, 8, 10
REP_ACK, REP_SERVER, REP_INFO, REP_META_CONTEXT = 1, 2, 3, 4
REP_ERR_UNSUP = 0x80000001
REP_ERR_INVALID = 0x80000003
REP_ERR_TLS_REQD = 0x80000005

results = []


def ok(cond, name):
    # A TAP line is one line: output quoted in @name may hold several.
    name = name.replace("\n", " | ")
    results.append((bool(cond), name))
    print("%sok %d - %s" % ("" if cond else "not ", len(results), name))
    sys.stdout.flush()


def run(*args, **kw):
    return subprocess.run(list(args), capture_output=True, text=True,
                          timeout=120, **kw)


def closed(s):
    """True when the server hangs up within TMO, having sent nothing."""
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def alerted(s):
    """True when the server hangs up within TMO, having sent at most a TLS
    alert (content type 21) first."""
    got = b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False
    return not got or got[0] == 21


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(TMO)
    s.connect(path)
    init, opts, flags = struct.unpack(">QQH", read(s, 18))
    assert (init, opts) == (INIT, OPTS)
    s.sendall(struct.pack(">I", 3))        # FIXED_NEWSTYLE | NO_ZEROES
    return s


def opt(s, o, data=b""):
    s.sendall(struct.pack(">QII", OPTS, o, len(data)) + data)


def reply(s):
    """(option, type, data) of the next option reply."""
    magic, o, t, n = struct.unpack(">QIII", read(s, 20))
    assert magic == OPT_REPLY, hex(magic)
    return o, t, read(s, n)


def go(s):
    """NBD_OPT_GO for the default export: its size."""
    opt(s, OPT_GO, struct.pack(">IH", 0, 0))
    size = None
    while True:
        o, t, d = reply(s)
        assert o == OPT_GO, o
        if t == REP_INFO and struct.unpack(">H", d[:2])[0] == 0:
            size = struct.unpack(">Q", d[2:10])[0]
        elif t == REP_ACK:
            return size
        elif t != REP_INFO:
            raise RuntimeError("NBD_OPT_GO: reply 0x%x" % t)


def read_block(s, offset, n):
    """A simple-reply NBD_CMD_READ: the data."""
    s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 7, offset, n))
    magic, err, cookie = struct.unpack(">IIQ", read(s, 16))
    assert (magic, err, cookie) == (0x67446698, 0, 7), (magic, err)
    return read(s, n)


def meta_request(name=b"base:allocation"):
    return struct.pack(">II", 0, 1) + struct.pack(">I", len(name)) + name


class Server:
    def __init__(self, work, name, *args):
        self.name = name
        self.sock = os.path.join(work, name + ".sock")
        self.proc = subprocess.Popen(
            [TOOL, "serve"] + list(args) + ["unix:" + self.sock,
                                            os.path.join(work, "disk.raw")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("serving on"):
            raise RuntimeError("serve %s: %s %s" % (
                args, line, self.proc.stderr.read()))

    def stop(self):
        """SIGTERM; it must exit 0 and quietly (a sanitizer report is
        neither)."""
        self.proc.send_signal(signal.SIGTERM)
        err = self.proc.communicate(timeout=TMO)[1].strip()
        ok(self.proc.returncode == 0 and not err,
           "serve (%s) exits 0 on SIGTERM (%d: %s)" % (
               self.name, self.proc.returncode, err[-2000:]))


def make_pki(work):
    """CA, server and client certificates; another CA's client."""
    pki = os.path.join(work, "pki")
    cli = os.path.join(work, "client")
    other = os.path.join(work, "other")
    for d in (pki, cli, other):
        os.mkdir(d)

    def key(path):
        with open(path, "w") as f:
            subprocess.run(["certtool", "--generate-privkey",
                            "--key-type=ecdsa"], stdout=f,
                           stderr=subprocess.DEVNULL, check=True)

    def template(text):
        path = os.path.join(work, "t.info")
        with open(path, "w") as f:
            f.write(text)
        return path

    def ca(d):
        key(d + "/ca-key.pem")
        subprocess.run(["certtool", "--generate-self-signed",
                        "--load-privkey", d + "/ca-key.pem", "--template",
                        template("cn = Test CA\nca\ncert_signing_key\n"
                                 "expiration_days = 2\n"),
                        "--outfile", d + "/ca-cert.pem"],
                       capture_output=True, check=True)

    def cert(d, ca_dir, name, usage):
        key(d + "/%s-key.pem" % name)
        subprocess.run(["certtool", "--generate-certificate",
                        "--load-ca-certificate", ca_dir + "/ca-cert.pem",
                        "--load-ca-privkey", ca_dir + "/ca-key.pem",
                        "--load-privkey", d + "/%s-key.pem" % name,
                        "--template",
                        template("organization = Example\ncn = %s\n"
                                 "dns_name = localhost\n%s\n"
                                 "encryption_key\nsigning_key\n"
                                 "expiration_days = 2\n" % (name, usage)),
                        "--outfile", d + "/%s-cert.pem" % name],
                       capture_output=True, check=True)

    ca(pki)
    cert(pki, pki, "server", "tls_www_server")
    cert(cli, pki, "client", "tls_www_client")
    shutil.copy(pki + "/ca-cert.pem", cli)
    ca(other)
    cert(other, other, "client", "tls_www_client")
    os.replace(other + "/ca-cert.pem", other + "/other-ca.pem")
    shutil.copy(pki + "/ca-cert.pem", other)
    return pki, cli, other


def tls_wrap(s, cli):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_verify_locations(cli + "/ca-cert.pem")
    ctx.load_cert_chain(cli + "/client-cert.pem", cli + "/client-key.pem")
    t = ctx.wrap_socket(s)
    t.settimeout(TMO)
    return t


def starttls(s, cli):
    opt(s, OPT_STARTTLS)
    o, t, d = reply(s)
    assert (o, t, d) == (OPT_STARTTLS, REP_ACK, b""), (o, hex(t), d)
    return tls_wrap(s, cli)


def protocol_cases(work, pki, cli, disk):
    # FORCEDTLS (the default with credentials), handshake limit 1 s.
    srv = Server(work, "req", "--tls-creds", pki, "--handshake-limit", "1")
    try:
        s = connect(srv.sock)
        opt(s, OPT_LIST)
        o, t, _ = reply(s)
        ok((o, t) == (OPT_LIST, REP_ERR_TLS_REQD),
           "require: NBD_OPT_LIST before STARTTLS gets TLS_REQD")
        opt(s, OPT_GO, struct.pack(">IH", 0, 0))
        o, t, _ = reply(s)
        ok((o, t) == (OPT_GO, REP_ERR_TLS_REQD),
           "require: NBD_OPT_GO before STARTTLS gets TLS_REQD")
        opt(s, OPT_ABORT)
        o, t, _ = reply(s)
        ok((o, t) == (OPT_ABORT, REP_ACK) and closed(s),
           "require: NBD_OPT_ABORT is still answered, then closed")
        s.close()

        s = connect(srv.sock)
        opt(s, OPT_EXPORT_NAME)
        ok(closed(s), "require: NBD_OPT_EXPORT_NAME before STARTTLS closes")
        s.close()

        # STARTTLS and, in the same write, a plaintext option behind it.
        s = connect(srv.sock)
        s.sendall(struct.pack(">QII", OPTS, OPT_STARTTLS, 0) +
                  struct.pack(">QII", OPTS, OPT_LIST, 0))
        ok(closed(s), "plaintext behind STARTTLS closes the connection "
           "before the ACK")
        s.close()

        s = connect(srv.sock)
        opt(s, OPT_STARTTLS, b"abcd")
        o, t, _ = reply(s)
        ok((o, t) == (OPT_STARTTLS, REP_ERR_INVALID),
           "STARTTLS with data gets INVALID")
        t = starttls(s, cli)
        opt(t, OPT_STARTTLS)
        o, typ, _ = reply(t)
        ok((o, typ) == (OPT_STARTTLS, REP_ERR_INVALID),
           "STARTTLS inside TLS gets INVALID")
        opt(t, OPT_LIST)
        o, typ, d = reply(t)
        ok((o, typ) == (OPT_LIST, REP_SERVER) and
           reply(t)[1] == REP_ACK, "NBD_OPT_LIST inside TLS is answered")
        size = go(t)
        data = read_block(t, 4096, 65536)
        with open(disk, "rb") as f:
            f.seek(4096)
            want = f.read(65536)
        ok(size == os.path.getsize(disk) and data == want,
           "TLS: NBD_OPT_GO and a READ return the disk's bytes")
        t.close()

        # A client that stops mid-handshake: half a ClientHello record.
        s = connect(srv.sock)
        opt(s, OPT_STARTTLS)
        o, typ, _ = reply(s)
        start = time.monotonic()
        s.sendall(bytes([22, 3, 1, 0, 200]) + b"\x01\x00")
        dropped = closed(s)
        ok(dropped and time.monotonic() - start >= 0.5,
           "a client stopping mid-handshake is dropped by "
           "--handshake-limit 1")
        s.close()
    finally:
        srv.stop()

    # --tls=on: plaintext is served; STARTTLS forgets plaintext options.
    # No handshake limit: only a failed TLS handshake can close here.
    srv = Server(work, "on", "--tls-creds", pki, "--tls=on",
                 "--handshake-limit", "0")
    try:
        s = connect(srv.sock)
        opt(s, OPT_STRUCTURED_REPLY)
        ok(reply(s)[1] == REP_ACK, "--tls=on: structured replies in "
           "plaintext")
        opt(s, OPT_SET_META_CONTEXT, meta_request())
        r1, r2 = reply(s)[1], reply(s)[1]
        ok((r1, r2) == (REP_META_CONTEXT, REP_ACK),
           "--tls=on: a meta context in plaintext")
        t = starttls(s, cli)
        opt(t, OPT_SET_META_CONTEXT, meta_request())
        ok(reply(t)[1] == REP_ERR_INVALID,
           "after STARTTLS structured replies must be negotiated again")
        opt(t, OPT_STRUCTURED_REPLY)
        opt(t, OPT_SET_META_CONTEXT, meta_request())
        got = [reply(t)[1] for _ in range(3)]
        ok(got == [REP_ACK, REP_META_CONTEXT, REP_ACK],
           "... and then they are")
        t.close()

        s = connect(srv.sock)
        opt(s, OPT_STARTTLS)
        ok(reply(s)[1] == REP_ACK, "--tls=on: STARTTLS is acknowledged")
        s.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(64))
        ok(alerted(s), "garbage instead of a ClientHello fails the "
           "handshake: an alert at most, then closed")
        s.close()
    finally:
        srv.stop()

    srv = Server(work, "plain")
    try:
        s = connect(srv.sock)
        opt(s, OPT_STARTTLS)
        ok(reply(s)[1] == REP_ERR_UNSUP,
           "no TLS configured: STARTTLS gets UNSUP as before")
        s.close()
    finally:
        srv.stop()


def nbd_roundtrip(work, srv, uri, name):
    src = os.path.join(work, "in.raw")
    back = os.path.join(work, "back.raw")
    with open(src, "wb") as f:
        f.write(os.urandom(8 * MiB))
    w = run("nbdcopy", src, uri)
    r = run("nbdcopy", uri, back)
    same = (w.returncode == 0 and r.returncode == 0 and
            open(src, "rb").read() == open(back, "rb").read()[:8 * MiB])
    ok(same, "%s: nbdcopy writes and reads back 8 MiB (%s%s)" % (
        name, w.stderr.strip(), r.stderr.strip()))
    info = run("nbdinfo", uri)
    ok(info.returncode == 0 and "with TLS" in info.stdout,
       "%s: nbdinfo sees TLS" % name)


def smoke_cases(work, pki, cli, other):
    psk = os.path.join(work, "keys.psk")
    subprocess.run(["psktool", "-u", "alice", "-p", psk],
                   capture_output=True, check=True)
    subprocess.run(["psktool", "-u", "bob", "-p", psk],
                   capture_output=True, check=True)
    srv = Server(work, "psk", "--tls-psk-file", psk)
    try:
        uri = "nbds+unix://alice@/?socket=%s&tls-psk-file=%s" % (srv.sock,
                                                                 psk)
        nbd_roundtrip(work, srv, uri, "--tls-psk-file")
        plain = run("nbdinfo", "nbd+unix:///?socket=" + srv.sock)
        ok(plain.returncode != 0, "--tls-psk-file: a plain client is "
           "refused")
    finally:
        srv.stop()

    srv = Server(work, "x509", "--tls-creds", pki)
    try:
        uri = "nbds+unix:///?socket=%s&tls-certificates=%s" % (srv.sock, cli)
        nbd_roundtrip(work, srv, uri, "--tls-creds")
        bad = run("nbdinfo", "nbds+unix:///?socket=%s&tls-certificates=%s"
                  % (srv.sock, other))
        ok(bad.returncode != 0, "--tls-creds: a client certificate of "
           "another CA is refused")
    finally:
        srv.stop()

    srv = Server(work, "authz", "--tls-psk-file", psk, "--tls-authz", "bob")
    try:
        a = run("nbdinfo", "nbds+unix://alice@/?socket=%s&tls-psk-file=%s"
                % (srv.sock, psk))
        b = run("nbdinfo", "nbds+unix://bob@/?socket=%s&tls-psk-file=%s"
                % (srv.sock, psk))
        ok(a.returncode != 0 and b.returncode == 0,
           "--tls-authz bob: alice is refused, bob is served")
    finally:
        srv.stop()

    srv = Server(work, "authz-dn", "--tls-creds", pki,
                 "--tls-authz", "CN=someone,O=Example",
                 "--tls-authz", "CN=client,O=Example")
    try:
        uri = "nbds+unix:///?socket=%s&tls-certificates=%s" % (srv.sock, cli)
        ok(run("nbdinfo", uri).returncode == 0,
           "--tls-authz CN=client,O=Example: the client is served")
    finally:
        srv.stop()
    srv = Server(work, "authz-dn2", "--tls-creds", pki,
                 "--tls-authz", "CN=someone,O=Example")
    try:
        uri = "nbds+unix:///?socket=%s&tls-certificates=%s" % (srv.sock, cli)
        ok(run("nbdinfo", uri).returncode != 0,
           "--tls-authz CN=someone,O=Example: the client is refused")
    finally:
        srv.stop()


def start_case(work):
    """start --export with --export-tls-psk-file: the export of a running
    (then completed) mirror speaks TLS, and only TLS."""
    psk = os.path.join(work, "keys.psk")
    src = os.path.join(work, "disk.raw")
    dst = os.path.join(work, "start-dst.raw")
    sock = os.path.join(work, "start.sock")
    with open(dst, "wb") as f:
        f.truncate(os.path.getsize(src))
    p = subprocess.Popen([TOOL, "start", "--export", "unix:" + sock,
                          "--export-tls-psk-file", psk, src, dst],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        line = p.stderr.readline()
        ok(line.startswith("mirror-tool: exporting the source on unix:"),
           "start --export-tls-psk-file: exporting (%r)" % line)
        tls = run("nbdinfo", "nbds+unix://alice@/?socket=%s&tls-psk-file=%s"
                  % (sock, psk))
        plain = run("nbdinfo", "nbd+unix:///?socket=" + sock)
        ok(tls.returncode == 0 and "with TLS" in tls.stdout and
           plain.returncode != 0,
           "start's export: a TLS client is served, a plain one refused")
    finally:
        p.send_signal(signal.SIGTERM)
        err = p.communicate(timeout=TMO)[1]
    ok(p.returncode in (0, 143) and "warning" not in err and
       "ERROR" not in err, "start exits on SIGTERM (%d: %s)" % (
           p.returncode, err.strip()[-2000:]))


def cli_cases(work, pki):
    disk = os.path.join(work, "disk.raw")
    sock = "unix:" + os.path.join(work, "cli.sock")
    secret_user = "carol-secret-user"
    secret_key = "00112233445566778899aabbccddeeff"
    bad = os.path.join(work, "bad.psk")

    def refused(name, args, *words, hidden=()):
        r = run(TOOL, "serve", *args, sock, disk)
        msg = r.stderr.strip()
        good = (r.returncode == 2 and msg.count("\n") == 0 and
                all(w in msg for w in words) and
                not any(h in msg for h in hidden) and
                not os.path.exists(sock[5:]))
        ok(good, "%s: exit 2, one line (%d: %s)" % (name, r.returncode, msg))

    with open(bad, "w") as f:
        f.write("%s:%s\n\n%s:%s0\n" % (secret_user, secret_key, secret_user,
                                       secret_key))
    refused("odd-length key", ["--tls-psk-file", bad], bad, "line 3",
            hidden=(secret_user, secret_key))
    with open(bad, "w") as f:
        f.write("%s:%sxz\n" % (secret_user, secret_key))
    refused("non-hex key", ["--tls-psk-file", bad], "line 1",
            hidden=(secret_user, secret_key))
    with open(bad, "w") as f:
        f.write("%s%s\n" % (secret_user, secret_key))
    refused("line without a colon", ["--tls-psk-file", bad], "line 1",
            hidden=(secret_user, secret_key))
    refused("missing PSK file", ["--tls-psk-file", work + "/none.psk"],
            "none.psk", "No such file")
    nokey = os.path.join(work, "nokey")
    os.mkdir(nokey)
    shutil.copy(pki + "/ca-cert.pem", nokey)
    shutil.copy(pki + "/server-cert.pem", nokey)
    refused("missing server-key.pem", ["--tls-creds", nokey],
            "--tls-creds '%s': server-key.pem: No such file" % nokey)
    expired = os.path.join(work, "expired")
    os.mkdir(expired)
    for name in ("ca-cert.pem", "server-key.pem"):
        shutil.copy(os.path.join(pki, name), expired)
    tmpl = os.path.join(work, "expired.info")
    with open(tmpl, "w") as f:
        f.write("cn = localhost\ntls_www_server\nencryption_key\n"
                "signing_key\nactivation_date = \"2020-01-01 00:00:00 UTC\"\n"
                "expiration_date = \"2021-01-01 00:00:00 UTC\"\n")
    subprocess.run(["certtool", "--generate-certificate",
                    "--load-ca-certificate", pki + "/ca-cert.pem",
                    "--load-ca-privkey", pki + "/ca-key.pem",
                    "--load-privkey", expired + "/server-key.pem",
                    "--template", tmpl,
                    "--outfile", expired + "/server-cert.pem"],
                   capture_output=True, check=True)
    refused("expired server certificate", ["--tls-creds", expired],
            "server-cert.pem: the certificate is expired")
    wrongca = os.path.join(work, "wrongca")
    os.mkdir(wrongca)
    for name in ("server-cert.pem", "server-key.pem"):
        shutil.copy(os.path.join(pki, name), wrongca)
    shutil.copy(os.path.join(work, "other", "other-ca.pem"),
                os.path.join(wrongca, "ca-cert.pem"))
    refused("server certificate of another CA", ["--tls-creds", wrongca],
            "server-cert.pem: the certificate is not issued by ca-cert.pem")
    refused("--tls without credentials", ["--tls=on"], "--tls needs")
    refused("--tls-authz without credentials", ["--tls-authz", "x"],
            "--tls-authz needs")
    refused("--tls-verify-peer without credentials",
            ["--tls-verify-peer=off"], "--tls-verify-peer needs")
    refused("two kinds of credentials",
            ["--tls-creds", pki, "--tls-psk-file", bad], "one kind")
    refused("--tls=maybe", ["--tls-creds", pki, "--tls=maybe"],
            "--tls 'maybe'")
    refused("--tls-authz of a DN without verification",
            ["--tls-creds", pki, "--tls-verify-peer=off", "--tls-authz",
             "CN=client"], "--tls-verify-peer=on")
    refused("--tls-authz of a user name with X.509",
            ["--tls-creds", pki, "--tls-authz", "CN=client,O=Example",
             "--tls-authz", secret_user], "--tls-authz: entry 2",
            hidden=(secret_user,))
    with open(bad, "w") as f:
        f.write("%s:%s\n" % (secret_user, secret_key))
    refused("--tls-authz naming a user the PSK file lacks",
            ["--tls-psk-file", bad, "--tls-authz",
             secret_user + "," + secret_user + "x"],
            "authorization list 1 names a user the file does not have",
            hidden=(secret_user, secret_key))

    # A remote address: TLS required of all is enough; --tls=on is not.
    r = run(TOOL, "serve", "--tls-creds", pki, "--tls=on", "tcp:0.0.0.0:0",
            disk)
    ok(r.returncode == 2 and "--tls=on" in r.stderr and
       "--insecure" in r.stderr,
       "tcp:0.0.0.0 with --tls=on needs --insecure (%s)" % r.stderr.strip())
    p = subprocess.Popen([TOOL, "serve", "--tls-creds", pki,
                          "tcp:0.0.0.0:0", disk], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=TMO)
    ok(line.startswith("serving on tcp:0.0.0.0:") and p.returncode == 0,
       "tcp:0.0.0.0 with TLS required is served (%r)" % line)

    r = run(TOOL, "start", "--export-tls-psk-file", bad, disk,
            os.path.join(work, "never.raw"))
    ok(r.returncode == 2 and "--export-tls-psk-file needs --export" in
       r.stderr, "start: --export-tls-psk-file without --export (%s)"
       % r.stderr.strip())


def main():
    for prog in ("certtool", "psktool", "nbdinfo", "nbdcopy"):
        if not shutil.which(prog):
            print("1..0 # SKIP %s is not installed" % prog)
            return 0
    work = tempfile.mkdtemp(prefix="test-export-nbd-tls.")
    try:
        disk = os.path.join(work, "disk.raw")
        with open(disk, "wb") as f:
            f.write(os.urandom(4 * MiB))
            f.truncate(64 * MiB)
        pki, cli, other = make_pki(work)
        protocol_cases(work, pki, cli, disk)
        smoke_cases(work, pki, cli, other)
        start_case(work)
        cli_cases(work, pki)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("1..%d" % len(results))
    return 0 if all(r for r, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
