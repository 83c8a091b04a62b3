#!/usr/bin/env python3
# The libraries' layering, checked on every build (meson.build runs this):
#
#   util  <-  block (core + drivers)  <-  block/export, block/mirror  <-  tool
#
# A file may include headers of its own library and of the libraries below
# it, never above or beside: block/ never includes block/export/ or
# block/mirror/, those two never include each other, nothing but the tool
# includes qemu-mirror-tool/, and the tool reaches drivers' internals
# (block/*-int.h, block/qcow2.h) through BlockDriver members only: of the
# block layer it includes the public headers below, nothing else.  A
# library's *-int.h is its own (block/block-int.h, the driver API, also
# serves the mirror-top filter of block/mirror/).  An include is checked
# as the compiler finds it ("../block/qcow2.h" is block/qcow2.h).
# Prints each offending include and exits 1; with a path, touches it on
# success (the build's stamp).
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# directory -> include prefixes it must not use
FORBIDDEN = {
    'util': ['block/', 'qemu-mirror-tool/'],
    'block': ['block/export/', 'block/mirror/', 'qemu-mirror-tool/'],
    'block/export': ['block/mirror/', 'qemu-mirror-tool/'],
    'block/mirror': ['block/export/', 'qemu-mirror-tool/'],
    'qemu-mirror-tool': [],
}
# the tool's own rule: of block/, the public headers only
TOOL_PUBLIC = {
    'block/block.h', 'block/nbd.h', 'block/thread-pool.h',
    'block/export/nbd-server.h',
    'block/mirror/job.h', 'block/mirror/mirror.h', 'block/mirror/mirror-top.h',
    'block/mirror/mirror-state.h',
}
# *-int.h a library may include besides its own: directory -> headers
INT_SHARED = {'block/mirror': {'block/block-int.h'}}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def resolve(d, inc):
    """@inc, included from directory @d, as a path from the root: a quoted
    include is looked up beside the file first, then from the root."""
    beside = os.path.normpath(os.path.join(d, inc))
    if os.path.exists(os.path.join(ROOT, beside)):
        return beside
    return os.path.normpath(inc)


def main():
    bad = []
    for d, forbidden in FORBIDDEN.items():
        path = os.path.join(ROOT, d)
        for name in sorted(os.listdir(path)):
            if not name.endswith(('.c', '.h')):
                continue
            with open(os.path.join(path, name), encoding='utf-8') as f:
                text = f.read()
            for written in INCLUDE.findall(text):
                inc = resolve(d, written)
                if any(inc.startswith(p) for p in forbidden) or \
                   (d == 'qemu-mirror-tool' and inc.startswith('block/') and
                    inc not in TOOL_PUBLIC) or \
                   (inc.endswith('-int.h') and os.path.dirname(inc) != d and
                    inc not in INT_SHARED.get(d, ())):
                    bad.append(f'{d}/{name}: #include "{written}"')
    for b in bad:
        print(f'layering: {b}', file=sys.stderr)
    if bad:
        print(f'layering: {len(bad)} include(s) against the library '
              f'order (.ci/check-layers.py)', file=sys.stderr)
        return 1
    if len(sys.argv) > 1:
        with open(sys.argv[1], 'w') as f:
            f.write('ok\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
