# TAP output for the python tests: one numbered "ok"/"not ok" line per
# check, "# " lines for diagnostics, the plan at the end.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

tests = []
failed = 0


def check(ok, name):
    """One TAP line for @name; returns @ok."""
    global failed
    tests.append(name)
    if not ok:
        failed += 1
    print("%s %d - %s" % ("ok" if ok else "not ok", len(tests), name),
          flush=True)
    return ok


def diag(msg):
    """@msg as TAP comment lines."""
    for line in str(msg).splitlines():
        print("# " + line, flush=True)


def plan():
    """Print the plan; the exit status: 1 if a check failed, else 0."""
    print("1..%d" % len(tests), flush=True)
    return 1 if failed else 0
