#!/bin/bash
# Regenerate the seed corpus of fuzz-qcow2 (tests/fuzz/corpus/): small
# images made by qemu-img and qemu-io (v2, v3, 512 B and 4 KiB clusters,
# normal, zero, compressed and preallocated clusters, backing files,
# snapshots, bitmaps, 1-bit refcounts) and the corruptions of
# qcow2-lite.md §5 poked into them.  Backing names are backing.raw and
# backing.qcow2, the files the fuzz target keeps next to its image.
#   make-corpus.sh [OUTDIR]       (default: the corpus/ next to this script)
set -euo pipefail
out=$(realpath "${1:-$(dirname "$0")/corpus}")
work=$(mktemp -d "${TMPDIR:-/tmp}/make-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
T="timeout 60"

# poke FILE OFFSET WIDTH VALUE: big-endian integer of WIDTH bytes (bash
# arithmetic wraps to negative above 2^63: taken modulo 2^(8*WIDTH)).
poke()
{
    python3 -c 'import sys
f = open(sys.argv[1], "r+b")
f.seek(int(sys.argv[2], 0))
w = int(sys.argv[3])
f.write((int(sys.argv[4], 0) % (1 << 8 * w)).to_bytes(w, "big"))' "$@"
}

# peek FILE OFFSET: big-endian 64-bit integer.
peek()
{
    python3 -c 'import sys
f = open(sys.argv[1], "rb")
f.seek(int(sys.argv[2], 0))
print(int.from_bytes(f.read(8), "big"))' "$@"
}

mk()
{
    $T qemu-img create -q -f qcow2 "$@"
}

qio()
{
    local img=$1 c args=()
    shift
    for c in "$@"; do
        args+=(-c "$c")
    done
    $T qemu-io -f qcow2 "${args[@]}" "$img" >/dev/null
}

python3 -c 'import sys; sys.stdout.buffer.write(bytes((i * 7 + i // 512) & 255 for i in range(65536)))' >backing.raw
mk -o cluster_size=4096 -b backing.raw -F raw backing.qcow2 128K

# ---- Valid images ----
mk -o cluster_size=512 v3-512.qcow2 64K
qio v3-512.qcow2 'write -P 0xab 0 3k' 'write -z 8k 2k' 'write -z -u 16k 1k' \
    'write -P 0xcd 20k 1k' 'write -P 0x11 24k 1k' 'discard 24k 1k' \
    'write -P 0x22 40000 1000'
mk -o cluster_size=4096 v3-4k.qcow2 256K
qio v3-4k.qcow2 'write -P 1 0 12k' 'write -z 0 4k' 'write -z -u 4k 4k' \
    'write -P 2 100k 2k' 'write -P 2 200k 4k' 'discard 200k 4k'
mk -o cluster_size=4096,compat=0.10 v2-4k.qcow2 64K
qio v2-4k.qcow2 'write -P 3 4k 8k' 'write -z 16k 4k'
mk -o cluster_size=512,compat=0.10 v2-512.qcow2 16K
qio v2-512.qcow2 'write -P 4 0 1k'
python3 -c 'import sys; sys.stdout.buffer.write(b"".join(bytes([i]) * 4096 for i in range(16)) + bytes(range(256)) * 16)' >comp.raw
$T qemu-img convert -c -O qcow2 -o cluster_size=4096 comp.raw comp-4k.qcow2
head -c 8192 comp.raw >c8.raw
$T qemu-img convert -c -O qcow2 -o cluster_size=512 c8.raw comp-512.qcow2
mk -o cluster_size=4096 -b backing.raw -F raw backing-raw.qcow2 128K
qio backing-raw.qcow2 'write -P 5 4k 4k' 'write -z 12k 4k' 'write -P 6 70k 6k'
mk -o cluster_size=512 -b backing.qcow2 -F qcow2 backing-qcow2.qcow2 128K
qio backing-qcow2.qcow2 'write -P 7 1k 1k' 'write -z 40k 1k'
mk -o cluster_size=4096,preallocation=metadata prealloc-4k.qcow2 32K
mk -o cluster_size=4096,refcount_bits=1 rb1-4k.qcow2 32K
qio rb1-4k.qcow2 'write -P 8 0 8k'
mk -o cluster_size=4096,refcount_bits=64 rb64-4k.qcow2 32K
qio rb64-4k.qcow2 'write -P 9 4k 4k'
mk -o cluster_size=512 snap-512.qcow2 16K
qio snap-512.qcow2 'write -P 10 0 2k'
$T qemu-img snapshot -c s1 snap-512.qcow2
qio snap-512.qcow2 'write -P 11 512 1k'
mk -o cluster_size=4096 bitmap-4k.qcow2 32K
$T qemu-img bitmap --add bitmap-4k.qcow2 b0
# 8 KiB clusters: the smallest with a feature name table.
mk -o cluster_size=8192 v3-8k.qcow2 1M
qio v3-8k.qcow2 'write -P 12 8k 1k'

# ---- Corruptions (qcow2-lite.md §5), poked into v3-512.qcow2 ----
bad()
{
    local name=$1 off=$2 width=$3 value=$4 src=${5:-v3-512.qcow2}
    cp "$src" "bad-$name.qcow2"
    poke "bad-$name.qcow2" "$off" "$width" "$value"
}
rt=$(peek v3-512.qcow2 48)
l1=$(peek v3-512.qcow2 40)
rb=$(peek v3-512.qcow2 "$rt")
l2=$(( $(peek v3-512.qcow2 "$l1") & 0x00fffffffffffe00 ))
bad magic 0 4 0x514649fa
bad version4 4 4 4
bad cluster-bits-8 20 4 8
bad cluster-bits-22 20 4 22
bad hdrlen-96 100 4 96
bad hdrlen-big 100 4 8192
bad hdrlen-113 100 4 113
bad refcount-order-7 96 4 7
bad l1-size-huge 36 4 0x7fffffff
bad l1-too-small 24 8 $((1 << 40))
bad l1-unaligned 40 8 $((l1 + 256))
bad l1-beyond-eof 40 8 $((1 << 30))
bad rt-beyond-eof 48 8 $((1 << 30))
bad rt-unaligned 48 8 $((rt + 256))
bad rt-clusters-0 56 4 0
bad rt-clusters-huge 56 4 0x100000
bad rt-over-l1 48 8 "$l1"
bad crypt-aes 32 4 1
bad crypt-luks 32 4 2
bad crypt-3 32 4 3
bad compression-2 104 1 2
bad zstd-no-bit 104 1 1
bad compression-bit 72 8 8
bad incompat-5 72 8 0x20
bad data-file-bit 72 8 4
bad extl2 72 8 0x10
bad dirty 72 8 1
bad corrupt 72 8 2
bad snapshots-huge 60 4 70000
bad snapshots-unaligned 64 8 12345
bad size-huge 24 8 0x7fffffffffffffff
bad ext-overrun 116 4 0xffffff00 backing-raw.qcow2
bad backing-offset 8 8 8192 backing-raw.qcow2
bad backing-size 16 4 2000 backing-raw.qcow2
bad rb-beyond-eof $((rt + 8)) 8 $((1 << 30))
bad rb-is-l1 $((rt + 8)) 8 "$l1"
bad l1e-beyond-eof "$l1" 8 $(( (1 << 63) | (1 << 28) ))
bad l1e-is-l1 "$l1" 8 $(( (1 << 63) | l1 ))
bad l1e-is-rt "$l1" 8 "$rt"
bad l2e-beyond-eof $((l2 + 8)) 8 $(( (1 << 63) | (1 << 28) ))
bad l2e-is-rt "$l2" 8 $(( (1 << 63) | rt ))
bad l2e-reserved "$l2" 8 $(( $(peek v3-512.qcow2 "$l2") | 2 ))
bad l2e-zero-v2 $(( $(peek v2-4k.qcow2 $(peek v2-4k.qcow2 40)) & 0x00fffffffffffe00 )) \
    8 1 v2-4k.qcow2
bad comp-beyond-eof "$l2" 8 $(( (1 << 62) | (1 << 28) ))
bad comp-in-header "$l2" 8 $(( (1 << 62) | 0x100 ))
bad rb-zeroed "$rb" 8 0
# Entries unaligned inside the offset mask need clusters above 512 B.
rt4=$(peek v3-4k.qcow2 48)
l14=$(peek v3-4k.qcow2 40)
l24=$(( $(peek v3-4k.qcow2 "$l14") & 0x00fffffffffffe00 ))
bad rt-entry-unaligned "$rt4" 8 $(( $(peek v3-4k.qcow2 "$rt4") + 512 )) \
    v3-4k.qcow2
bad l1e-unaligned "$l14" 8 $(( (1 << 63) | (l24 + 512) )) v3-4k.qcow2
bad l2e-unaligned "$l24" 8 $(( (1 << 63) | 0x5200 )) v3-4k.qcow2
cl1=$(peek comp-4k.qcow2 40)
cl2=$(( $(peek comp-4k.qcow2 "$cl1") & 0x00fffffffffffe00 ))
bad comp-max-sectors "$cl2" 8 $(( $(peek comp-4k.qcow2 "$cl2") | (15 << 58) )) \
    comp-4k.qcow2
# Found by fuzz-qcow2: every snapshot's L1 points at the same L2 table
# again and again (the check read it once per entry: minutes).
python3 - v3-512.qcow2 regress-check-snapshots.qcow2 <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], "rb").read())
l1 = struct.unpack(">Q", d[40:48])[0]
l2 = struct.unpack(">Q", d[l1:l1 + 8])[0] & 0x00fffffffffffe00
snap, sl1, end = 0x3000, 0x4000, 0x6000
d += bytes(end - len(d))
nb = (sl1 - snap) // 40
for i in range(nb):
    d[snap + 40 * i:snap + 40 * i + 12] = struct.pack(">QI", sl1, (end - sl1) // 8)
for o in range(sl1, end, 8):
    d[o:o + 8] = struct.pack(">Q", l2)
d[60:72] = struct.pack(">IQ", nb, snap)
open(sys.argv[2], "wb").write(d)
PY
cp backing-raw.qcow2 bad-backing-self.qcow2
python3 - bad-backing-self.qcow2 <<'PY'
import sys
f = open(sys.argv[1], "r+b")
f.seek(8); off = int.from_bytes(f.read(8), "big")
f.seek(16); f.write((9).to_bytes(4, "big"))
f.seek(off); f.write(b"img.qcow2")
PY

rm -rf "$out"
mkdir -p "$out"
for f in *.qcow2; do
    case $f in backing.qcow2) continue ;; esac
    cp "$f" "$out/$f"
done
echo "$(ls "$out" | wc -l) seeds, $(du -sk "$out" | cut -f1) KiB in $out"
