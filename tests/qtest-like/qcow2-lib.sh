# Helpers shared by the qcow2-lite tool tests (test-tool-qcow2*.sh), sourced
# after lib.sh: qemu calls under a timeout, what qemu says about an image
# we wrote, reads and maps compared with qemu's, byte pokes, refusals.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

TMO="timeout 60"
# A memory cap for mirror-tool on hostile images (not under ASan, which
# reserves terabytes of address space).
ULIMIT="ulimit -v 4000000;"
if ldd "$T" 2>/dev/null | grep -q libasan; then
    ULIMIT=
fi
MiB=$((1024 * 1024))

# q CMD...: run a qemu tool under a timeout, fail if it fails.
q()
{
    run $TMO "$@"
    [ "$last_rc" = 0 ] || fail "$1 failed"
}

# qio IMG CMD...: qemu-io -f qcow2 with -c for each command.
qio()
{
    local img=$1 c args=()
    shift
    for c in "$@"; do
        args+=(-c "$c")
    done
    q qemu-io -f qcow2 "${args[@]}" "$img"
}

# verify IMG REF: what qemu says about an image we wrote.
verify()
{
    local img=$1 ref=$2
    run $TMO qemu-img check -f qcow2 "$img"
    [ "$last_rc" = 0 ] || fail "$img: qemu-img check exit $last_rc"
    grep -q "No errors were found on the image." "$last_out" ||
        fail "$img: qemu-img check found problems"
    run $TMO qemu-img compare -f qcow2 -F raw "$img" "$ref"
    [ "$last_rc" = 0 ] || fail "$img: differs from $ref"
    run $TMO qemu-img info -f qcow2 --output=json "$img"
    [ "$last_rc" = 0 ] || fail "$img: qemu-img info failed"
    python3 - "$last_out" <<'EOF' || fail "$img: dirty or corrupt"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["dirty-flag"] is False, d
assert d["format-specific"]["data"]["corrupt"] is False, d
EOF
    run "$T" check "$img"
    [ "$last_rc" = 0 ] || fail "$img: mirror-tool check exit $last_rc"
}

# same_read IMG: mirror-tool reads what qemu-img reads.
same_read()
{
    rm -f sr.ref sr.out
    q qemu-img convert -f qcow2 -O raw "$1" sr.ref
    expect_ok "$T" convert -f qcow2 "$1" sr.out
    truncate -s "$(file_size sr.ref)" sr.out
    assert_same sr.ref sr.out "$1: mirror-tool reads other bytes than qemu"
}

# map_agree IMG [RAWDEPTH...]: block status per cluster as qemu-img map
# (qcow2-lite.md §4.3): zero+data counts as data (metadata preallocation);
# at depths backed by raw files only depth and presence; offsets at
# depth 0 only.
map_agree()
{
    local img=$1
    shift
    run $TMO qemu-img map --output=json -f qcow2 "$img"
    [ "$last_rc" = 0 ] || fail "qemu-img map $img failed"
    cp "$last_out" ma.qemu
    expect_ok "$T" map --output=json "$img"
    cp "$last_out" ma.ours
    python3 - ma.qemu ma.ours "$@" <<'EOF' || fail "$img: map disagrees"
import json, sys
raw_depths = {int(d) for d in sys.argv[3:]}
def cells(path, step=512):
    out = {}
    for e in json.load(open(path)):
        data = e["data"]
        zero = e["zero"] and not data
        for off in range(e["start"], e["start"] + e["length"], step):
            d = e["depth"]
            if d in raw_depths:
                rec = (d, e["present"])
            else:
                rec = (d, e["present"], zero, data)
                if d == 0 and "offset" in e:
                    rec += (e["offset"] + off - e["start"],)
            out[off] = rec
    return out
a, b = cells(sys.argv[1]), cells(sys.argv[2])
bad = [o for o in sorted(set(a) | set(b)) if a.get(o) != b.get(o)]
if bad:
    o = bad[0]
    print("first difference at %d: qemu %s, ours %s" % (o, a.get(o), b.get(o)))
    sys.exit(1)
EOF
}

# golden IMG [RAWDEPTH...]: read and map like qemu; check like qemu.
golden()
{
    local img=$1 ours theirs
    same_read "$img"
    map_agree "$@"
    run $TMO qemu-img check -f qcow2 "$img"
    theirs=$last_rc
    run "$T" check "$img"
    ours=$last_rc
    [ "$ours" = "$theirs" ] ||
        fail "$img: mirror-tool check exit $ours, qemu-img check $theirs"
}

# poke FILE OFFSET WIDTH VALUE: overwrite a big-endian field.
poke()
{
    python3 - "$@" <<'EOF' || fail "poke $*"
import sys
path, off, width, val = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3]), int(sys.argv[4], 0)
with open(path, "r+b") as f:
    f.seek(off)
    f.write(val.to_bytes(width, "big"))
EOF
}

peek64()
{
    python3 -c "
import sys
f = open('$1', 'rb'); f.seek($2); print(int.from_bytes(f.read(8), 'big'))"
}

# refused IMG WHAT MSG [rw]: info (read-only) or convert -n (read-write)
# exits 2 naming the problem, and IMG is untouched.
refused()
{
    local img=$1 what=$2 msg=$3 mode=${4:-ro}
    remember_sum "$img"
    if [ "$mode" = rw ]; then
        make_sparse_image rf-src.img "$(qimg_size "$img")" 0:64K
        run $TMO "$T" convert -n -O qcow2 rf-src.img "$img"
    else
        run bash -c "$ULIMIT $TMO \"$T\" info -f qcow2 \"$img\""
    fi
    [ "$last_rc" = 2 ] || fail "$what: expected exit 2, got $last_rc"
    stderr_has "$msg"
    assert_unchanged "$img" "$what"
    ok "refused ($mode): $what"
}

qimg_size()
{
    run $TMO qemu-img info -U --output=json "$1"
    python3 -c "import json; print(json.load(open('$last_out'))['virtual-size'])" 2>/dev/null || echo 1048576
}

