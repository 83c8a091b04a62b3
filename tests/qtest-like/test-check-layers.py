#!/usr/bin/env python3
# .ci/check-layers.py against trees of its own: one clean tree passes, and
# each include against the order fails the check, naming the include as
# written.  The script takes its root from its own place, so each case
# copies it into a scratch tree of the four libraries and the tool.
#
# Runs under meson with CHECK_LAYERS set to the script; prints TAP.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

import os
import shutil
import subprocess
import sys
import tempfile

SCRIPT = os.environ['CHECK_LAYERS']

DIRS = ['util', 'block', 'block/export', 'block/mirror', 'qemu-mirror-tool']

# Headers every case's tree holds.
HEADERS = [
    'util/cutils.h', 'block/block.h', 'block/block-int.h', 'block/io-int.h',
    'block/qcow2.h', 'block/qcow2-cache.h', 'block/export/nbd-server.h',
    'block/export/nbd-server-int.h', 'block/mirror/mirror.h',
    'block/mirror/mirror-int.h', 'qemu-mirror-tool/tool.h',
]

# Includes the order allows: (file, include).
GOOD = [
    ('block/raw.c', 'block/block-int.h'),
    ('block/raw.c', 'util/cutils.h'),
    ('block/io.c', 'io-int.h'),
    ('block/export/nbd-server.c', 'block/export/nbd-server-int.h'),
    ('block/export/nbd-server.c', 'block/block.h'),
    ('block/mirror/mirror-top.c', 'block/block-int.h'),
    ('block/mirror/mirror.c', 'mirror-int.h'),
    ('qemu-mirror-tool/main.c', 'block/mirror/mirror.h'),
    ('qemu-mirror-tool/main.c', 'block/export/nbd-server.h'),
    ('qemu-mirror-tool/main.c', 'tool.h'),
]

# Includes against it, one per case: (file, include).
BAD = [
    ('util/cutils.c', 'block/block.h'),
    ('block/io.c', 'block/mirror/mirror.h'),
    ('block/io.c', 'mirror/mirror.h'),
    ('block/export/nbd-server.c', 'block/mirror/mirror.h'),
    ('block/export/nbd-server.c', 'block/block-int.h'),
    ('block/export/nbd-server.c', '../io-int.h'),
    ('block/mirror/mirror.c', 'block/io-int.h'),
    ('block/mirror/mirror.c', '../export/nbd-server-int.h'),
    ('qemu-mirror-tool/main.c', 'block/qcow2.h'),
    ('qemu-mirror-tool/main.c', '../block/qcow2.h'),
    ('qemu-mirror-tool/main.c', 'block/qcow2-cache.h'),
    ('qemu-mirror-tool/main.c', 'block/block-int.h'),
    ('qemu-mirror-tool/main.c', 'block/mirror/mirror-int.h'),
]


def make_tree(root, includes):
    os.makedirs(os.path.join(root, '.ci'))
    shutil.copy(SCRIPT, os.path.join(root, '.ci', 'check-layers.py'))
    for d in DIRS:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for h in HEADERS:
        open(os.path.join(root, h), 'w').close()
    files = {}
    for f, inc in includes:
        files.setdefault(f, []).append(f'#include "{inc}"\n')
    for f, lines in files.items():
        with open(os.path.join(root, f), 'w') as out:
            out.writelines(lines)


def run(includes):
    with tempfile.TemporaryDirectory() as root:
        make_tree(root, includes)
        p = subprocess.run([sys.executable,
                            os.path.join(root, '.ci', 'check-layers.py')],
                           capture_output=True, text=True)
        return p.returncode, p.stderr


def main():
    cases = 1 + len(BAD)
    print(f'1..{cases}')
    failed = 0

    rc, err = run(GOOD)
    ok = rc == 0 and err == ''
    failed += not ok
    print(f'{"ok" if ok else "not ok"} 1 - allowed includes pass')
    if not ok:
        print('# ' + err.replace('\n', '\n# '))

    for i, (f, inc) in enumerate(BAD, 2):
        rc, err = run(GOOD + [(f, inc)])
        want = f'layering: {f}: #include "{inc}"'
        ok = rc == 1 and want in err and err.count('layering: ') == 2
        failed += not ok
        print(f'{"ok" if ok else "not ok"} {i} - {f}: "{inc}" fails')
        if not ok:
            print(f'# rc {rc}, want "{want}" alone; got:')
            print('# ' + err.replace('\n', '\n# '))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
