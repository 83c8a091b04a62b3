#!/usr/bin/env bash
# mirror-tool: no write before every input is open and checked (issue 27,
# points 1, 4 and 6 for convert, create, info and map).
#
#  - the target of convert may be no file of the source's backing chain
#    (by any name: symlink, hard link, another path), checked after the
#    whole chain is open and before the target is created or truncated;
#  - create checks the size, the options and a backing file that is the
#    image itself before it touches an existing file, and removes a new
#    file it failed to make;
#  - an option convert refuses never leaves a target behind;
#  - -f with a driver that opens no files (null, nbd) refuses a file name;
#  - info, map and create exit 1 when stdout cannot be written.
#
# Chains are built with qemu-img; after every refused command the images
# are byte-identical to their copies and no file appeared.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires qemu-img qemu-io cmp sha256sum truncate

failures=0

# refused CODE DESC NEEDLE... -- ARG...: mirror-tool ARG... exits CODE with
# one line naming each NEEDLE, and no file in the directory changed,
# appeared or vanished.  A failing case is reported ("not ok") and the
# script goes on; it fails at the end.
_refused_once()
{
    local code=$1 desc=$2 before after
    local -a needles=()
    shift 2
    while [ "$1" != -- ]; do
        needles+=("$1")
        shift
    done
    shift
    before=$(ls -A; sha256sum -- * 2>/dev/null)
    expect_exit "$code" "$T" "$@"
    after=$(ls -A; sha256sum -- * 2>/dev/null)
    [ "$before" = "$after" ] ||
        fail "$desc: files changed: $(diff <(echo "$before") \
              <(echo "$after") | head -5)"
    stderr_one_line
    stderr_has "mirror-tool: " "${needles[@]}"
    stdout_empty
}

refused()
{
    # The subshell's own TAP line is dropped; this one counts.
    if ( _refused_once "$@" ) >/dev/null; then
        ok "$2"
    else
        not_ok "$2"
        failures=$((failures + 1))
    fi
}

# --- the target is a file of the source's backing chain -----------------
mkdir chain && cd chain || fail "mkdir"
make_random_image base.raw 4M
qemu-img create -q -f qcow2 -b base.raw -F raw ov.qcow2 ||
    fail "qemu-img create ov.qcow2"
qemu-io -f qcow2 -c 'write -P 0x5a 1M 64K' ov.qcow2 >/dev/null ||
    fail "qemu-io write"
ln -s base.raw link.raw
ln base.raw hard.raw
mkdir sub
qemu-img create -q -f qcow2 -b ../base.raw -F raw sub/ov.qcow2 ||
    fail "qemu-img create sub/ov.qcow2"

refused 2 "convert raw-backed overlay onto its backing file" \
    backing "'base.raw'" -- convert ov.qcow2 base.raw
refused 2 "... with -n" backing "'base.raw'" -- convert -n ov.qcow2 base.raw
refused 2 "... to qcow2 (-O qcow2)" backing "'base.raw'" \
    -- convert -O qcow2 ov.qcow2 base.raw
refused 2 "... through a symlink" backing "'link.raw'" \
    -- convert ov.qcow2 link.raw
refused 2 "... through a hard link" backing "'hard.raw'" \
    -- convert ov.qcow2 hard.raw
refused 2 "... by its absolute path" backing "base.raw" \
    -- convert ov.qcow2 "$PWD/base.raw"
refused 2 "... named relative to a subdirectory overlay" backing \
    "'base.raw'" -- convert sub/ov.qcow2 base.raw

make_random_image b2.raw 4M
qemu-img convert -q -f raw -O qcow2 b2.raw base.qcow2 || fail "qemu-img"
qemu-img create -q -f qcow2 -b base.qcow2 -F qcow2 mid.qcow2 ||
    fail "qemu-img create mid.qcow2"
qemu-io -f qcow2 -c 'write -P 0x11 0 64K' mid.qcow2 >/dev/null ||
    fail "qemu-io write"
qemu-img create -q -f qcow2 -b mid.qcow2 -F qcow2 top.qcow2 ||
    fail "qemu-img create top.qcow2"
refused 2 "convert -O qcow2 top onto the base of its chain" \
    backing "'base.qcow2'" "depth 2" -- convert -O qcow2 top.qcow2 base.qcow2
refused 2 "convert -O qcow2 top onto the middle of its chain" \
    backing "'mid.qcow2'" "depth 1" -- convert -O qcow2 top.qcow2 mid.qcow2
refused 2 "convert -n top into the base of its chain" \
    backing "'base.qcow2'" -- convert -n -O qcow2 top.qcow2 base.qcow2

refused 2 "start top onto the base of its chain" \
    backing "'base.qcow2'" "depth 2" -- start -O qcow2 top.qcow2 base.qcow2
refused 2 "start raw-backed overlay onto its backing file" \
    backing "'link.raw'" -- start ov.qcow2 link.raw

# What is not in the chain still converts, chain and all.
expect_ok "$T" convert -O qcow2 top.qcow2 flat.qcow2
run qemu-img compare top.qcow2 flat.qcow2
[ "$last_rc" = 0 ] || fail "qemu-img compare top.qcow2 flat.qcow2"
expect_ok "$T" convert ov.qcow2 flat.raw
run qemu-img compare -F raw ov.qcow2 flat.raw
[ "$last_rc" = 0 ] || fail "qemu-img compare ov.qcow2 flat.raw"
ok "a chain converts into a file outside it (qemu-img compare)"
rm -f flat.qcow2 flat.raw
cd .. || fail "cd"

# --- create checks before it touches an existing file --------------------
mkdir create && cd create || fail "mkdir"
make_random_image e.raw 1M
make_random_image b.raw 1M
qemu-img create -q -f qcow2 -b e.raw -F raw eov.qcow2 ||
    fail "qemu-img create eov.qcow2"

# A size the file system cannot hold (ext4: 16 TiB; tmpfs takes 1P).
if truncate -s 1P probe 2>/dev/null; then
    rm -f probe
    ok "# SKIP this file system holds a file of 1 PiB"
    ok "# SKIP this file system holds a file of 1 PiB"
else
    rm -f probe
    refused 2 "create over an existing file, size too large" \
        "'e.raw'" "File too large" -- create e.raw 1P
    refused 2 "create a new file, size too large: nothing left" \
        "'new.raw'" "File too large" -- create new.raw 1P
fi
refused 2 "create a qcow2 whose backing file is the image itself" \
    backing "'e.raw'" \
    -- create -f qcow2 -o backing_file=e.raw,backing_fmt=raw e.raw 1M
refused 2 "create a qcow2 over a file its backing file reads" \
    backing "'e.raw'" "'eov.qcow2'" \
    -- create -f qcow2 -o backing_file=eov.qcow2,backing_fmt=qcow2 e.raw
refused 2 "create -f qcow2 with a bad cluster_size over a file" \
    "cluster_size" -- create -f qcow2 -o cluster_size=3000 e.raw 1M
cd .. || fail "cd"

# --- an option convert refuses leaves no target ------------------------------
mkdir opts && cd opts || fail "mkdir"
make_random_image src.raw 2M
make_random_image old.raw 1M
refused 2 "convert -t none -O qcow2 into a new file" "-t 'none'" "qcow2" \
    -- convert -t none -O qcow2 src.raw new.qcow2
refused 2 "convert -t none -O qcow2 over an existing file" "-t 'none'" \
    -- convert -t none -O qcow2 src.raw old.raw
# -S 1536: a multiple of 512, as qemu-img takes it.  Done or refused,
# never a target left behind by a refusal.
desc="convert -S 1536: copied, or refused with no target left behind"
if (
    for dst in new.raw old.raw; do
        remember_sum old.raw
        run "$T" convert -S 1536 src.raw $dst
        case $last_rc in
            0) assert_same src.raw $dst "-S 1536" ;;
            2) if [ $dst = new.raw ]; then
                   assert_absent new.raw "-S 1536 refused"
               else
                   assert_unchanged old.raw "-S 1536 refused"
               fi ;;
            *) fail "-S 1536 into $dst: exit $last_rc" ;;
        esac
        rm -f new.raw
    done
) >/dev/null; then
    ok "$desc"
else
    not_ok "$desc"
    failures=$((failures + 1))
fi
make_random_image old.raw 1M

# -f with a driver that opens no files: the file is not silently ignored.
refused 2 "convert -f null with a file name" "'src.raw'" "'null'" \
    -- convert -f null src.raw out.raw
refused 2 "convert -f nbd with a file name" "'src.raw'" "'nbd'" \
    -- convert -f nbd src.raw out.raw
refused 2 "convert -n -O null into a file name" "'old.raw'" "'null'" \
    -- convert -n -O null src.raw old.raw
refused 2 "info -f null with a file name" "'src.raw'" "'null'" \
    -- info -f null src.raw
cd .. || fail "cd"

# --- stdout write errors ---------------------------------------------------
if [ -w /dev/full ]; then
    make_random_image img.raw 1M
    qemu-img create -q -f qcow2 img.qcow2 1M || fail "qemu-img create"
    for cmd in "info img.raw" "info --output=json img.raw" "map img.raw" \
               "map --output=json img.raw" "create c.raw 1M" \
               "check img.qcow2" "check --output=json img.qcow2"; do
        desc="$cmd >/dev/full: exit 1, stdout: No space left on device"
        if (
            last_cmd="mirror-tool $cmd >/dev/full"
            # shellcheck disable=SC2086
            "$T" $cmd >/dev/full 2>"$last_err"
            last_rc=$?
            [ "$last_rc" = 1 ] || fail "expected exit code 1"
            stderr_one_line
            stderr_has "mirror-tool: stdout: No space left on device"
        ) >/dev/null; then
            ok "$desc"
        else
            not_ok "$desc"
            failures=$((failures + 1))
        fi
        rm -f c.raw
    done
else
    ok "# SKIP no /dev/full"
fi

if [ "$failures" -ne 0 ]; then
    echo "FAIL: $failures case(s) failed (see 'not ok' above)" >&2
    exit 1
fi
exit 0
