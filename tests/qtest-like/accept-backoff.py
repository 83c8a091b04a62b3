#!/usr/bin/env python3
"""accept-backoff.py PID [COUNT]: does process PID, out of file
descriptors with clients waiting to be accepted, back off between
accept() attempts instead of spinning on them?

strace attaches to PID (its main thread: the main loop) and records its
accept calls with the time it makes them.  Once COUNT calls have failed
with EMFILE or ENFILE (default 5; bounded by a generous deadline), every
two consecutive failures on one listening socket must be at least
MIN_GAP_S apart: the servers retry after 100 ms.  A server that spins
makes them microseconds apart.  The times are the process's own, so no
window of wall time decides the result: a busy machine only spreads the
calls further apart.

Exit 0: it backs off; 1: it spins, or never failed an accept (so the
caller did not set up what it meant to); 77: strace is missing or may not
attach (a skip).

Copyright (C) 2026 qemu-mirror authors
SPDX-License-Identifier: GPL-2.0-or-later
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MIN_GAP_S = 0.05
DEADLINE_S = 30
CALL = re.compile(r'^(\d+\.\d+) accept4?\((\d+),.*= -1 (EMFILE|ENFILE)')


def failures(path):
    """(time, fd) of each failed accept in the strace output so far."""
    with open(path, errors="replace") as f:
        return [(float(m.group(1)), m.group(2))
                for m in map(CALL.match, f) if m]


def main():
    pid = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if not shutil.which("strace"):
        print("strace is not installed")
        return 77
    out = tempfile.NamedTemporaryFile(prefix="accept-backoff.", delete=False)
    out.close()
    tracer = subprocess.Popen(
        ["strace", "-qq", "-ttt", "-e", "trace=accept,accept4",
         "-e", "signal=none", "-o", out.name, "-p", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + DEADLINE_S
        seen = []
        while len(seen) < count and time.monotonic() < end:
            if tracer.poll() is not None:
                err = tracer.stderr.read().decode(errors="replace")
                print("strace ended: %s" % err.strip())
                return 77 if "Operation not permitted" in err else 1
            # Waiting for the traced calls, not for time to pass.
            time.sleep(0.05)
            seen = failures(out.name)
        tracer.send_signal(signal.SIGINT)      # detach
        tracer.wait(DEADLINE_S)
        seen = failures(out.name)
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()
        os.unlink(out.name)
    if len(seen) < count:
        print("only %d accept calls failed with EMFILE/ENFILE in %d s"
              % (len(seen), DEADLINE_S))
        return 1
    last = {}
    gaps = []
    for t, fd in seen:
        if fd in last:
            gaps.append(t - last[fd])
        last[fd] = t
    if not gaps:
        print("no two failed accept calls on one socket")
        return 1
    print("%d failed accept calls, %.6f to %.6f s apart"
          % (len(seen), min(gaps), max(gaps)))
    return 0 if min(gaps) >= MIN_GAP_S else 1


if __name__ == "__main__":
    sys.exit(main())
