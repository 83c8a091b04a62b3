#!/usr/bin/env bash
# bench/sparse.sh - how sparse `mirror-tool convert -S` makes its target,
# beside `qemu-img convert -S` on the same source.  Not run in CI.  See
# bench/README.md.
#
# The source is a fully allocated raw file (no holes: every zero run must
# be found by scanning the data): runs of random data, 512 B .. 1 MiB long,
# between runs of zeroes 512 B .. 4 MiB long, both log-uniform in 512-byte
# sectors, the layout and the bytes deterministic from SEED.  For each -S
# and target format both tools convert it to a new target; the table gives
# the bytes `qemu-img map` reports as data in each (and for raw targets the
# bytes `du` counts), and checks that both targets hold the source's bytes.
#
# Environment: SIZE_MIB (256), SEED (42), SPARSE ("4K 64K 1536 2M"),
# FORMATS ("raw qcow2 qcow2-512": qcow2 with 512-byte clusters, whose map
# shows holes smaller than a file system block), SCRATCH (a new directory
# under /dev/shm), MIRROR_TOOL (the binary; default build/...).
set -euo pipefail

cd "$(dirname "$0")/.."
MT=${MIRROR_TOOL:-$PWD/build/qemu-mirror-tool/mirror-tool}
SIZE_MIB=${SIZE_MIB:-256}
SEED=${SEED:-42}
SPARSE=${SPARSE:-4K 64K 1536 2M}
FORMATS=${FORMATS:-raw qcow2 qcow2-512}
SCRATCH=${SCRATCH:-$(mktemp -d /dev/shm/bench-sparse.XXXXXX)}
trap 'rm -rf "$SCRATCH"' EXIT

for t in qemu-img python3 du cmp; do
    command -v "$t" >/dev/null || { echo "sparse.sh: $t not installed" >&2; exit 1; }
done
[ -x "$MT" ] || { echo "sparse.sh: no mirror-tool at $MT" >&2; exit 1; }

src=$SCRATCH/src.raw
python3 - "$src" "$SIZE_MIB" "$SEED" <<'EOF'
import math, random, sys
path, size, seed = sys.argv[1], int(sys.argv[2]) << 20, int(sys.argv[3])
rng = random.Random(seed)

def sectors(max_bytes):
    # log-uniform in [1, max_bytes / 512] sectors
    return int(math.exp(rng.uniform(0, math.log(max_bytes // 512)))) * 512

pos, zero_runs, zero_bytes = 0, 0, 0
with open(path, "wb") as f:
    while pos < size:
        n = min(sectors(1 << 20), size - pos)
        data = bytearray(rng.randbytes(n))
        for i in range(0, n, 512):      # no sector of the data is all zero
            data[i] |= 1
        f.write(data)
        pos += n
        n = min(sectors(4 << 20), size - pos)
        f.write(bytes(n))
        pos += n
        zero_runs += 1
        zero_bytes += n
print("source: %d MiB, %d zero runs, %.1f MiB of zeroes (allocated)"
      % (size >> 20, zero_runs, zero_bytes / 2**20), file=sys.stderr)
EOF

data_bytes() {
    qemu-img map --output=json -f "$2" "$1" | python3 -c '
import json, sys
print(sum(e["length"] for e in json.load(sys.stdin) if e["data"]))'
}
mib() { python3 -c "print('%.2f' % ($1 / 1048576))"; }

echo "| -S | target | mirror-tool data (MiB) | qemu-img data (MiB) | mirror-tool du (MiB) | qemu-img du (MiB) |"
echo "|---|---|---|---|---|---|"
for s in $SPARSE; do
    for fmt in $FORMATS; do
        f=$fmt o=()
        if [ "$fmt" = qcow2-512 ]; then
            f=qcow2 o=(-o cluster_size=512)
        fi
        ours=$SCRATCH/ours.$f qemu=$SCRATCH/qemu.$f
        rm -f "$ours" "$qemu"
        "$MT" convert -f raw -O "$f" "${o[@]}" -S "$s" "$src" "$ours"
        qemu-img convert -f raw -O "$f" "${o[@]}" -S "$s" "$src" "$qemu"
        for img in "$ours" "$qemu"; do
            qemu-img compare -q -f raw -F "$f" "$src" "$img" ||
                { echo "sparse.sh: $img differs from the source" >&2; exit 1; }
        done
        echo "| $s | $fmt | $(mib "$(data_bytes "$ours" "$f")")" \
             "| $(mib "$(data_bytes "$qemu" "$f")")" \
             "| $(mib "$(du --block-size=1 "$ours" | cut -f1)")" \
             "| $(mib "$(du --block-size=1 "$qemu" | cut -f1)") |"
    done
done
