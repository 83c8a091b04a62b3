#!/usr/bin/env bash
# mirror-tool: bad input is refused with exit 2, a clear one-line message
# naming the bad value, and the target untouched (issue 2).
#
# Table-driven: each `bad` line is one case.  In its arguments
#   @DST@  runs the case twice: once with an existing target (old.img,
#          whose sha256 must not change) and once with a target that does
#          not exist (new.img, which must not be created);
#   @NEW@  only the non-existent target.
# Every run starts in a fresh copy ($work) of a template directory and
# checks that no file there changed, appeared or disappeared.  A failing
# case prints "not ok" with the details and the table goes on; the script
# fails at the end.  Each run is killed after $HANG_SECS seconds, so a hang
# is reported as a failure, not as a test timeout.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires sha256sum truncate dd cmp mkfifo timeout

HANG_SECS=10
work=$scratch/work

mkdir tpl
(
    cd tpl || exit 1
    make_sparse_image src.img 4M 64K:64K 1M:100K 3M:4K
    make_random_image old.img 1M
    make_random_image small.img 1M
    mkdir dir.d
    ln -s src.img link.img
    ln src.img hard.img
    mkfifo fifo
    sha256sum src.img old.img small.img >.sums
    ls -A >.listing
) || fail "cannot build the template directory"

# _bad_once DESC NEEDLES ARG...: one run (in a subshell: fail ends only
# this run); NEEDLES is '|'-separated.
_bad_once()
{
    local desc=$1 needles=$2 n
    shift 2
    rm -rf "$work" && cp -a tpl "$work" && cd "$work" || exit 1
    run timeout -k 5 "$HANG_SECS" "$T" "$@"
    case $last_rc in
        124|137) fail "$desc: hung, killed after ${HANG_SECS}s" ;;
        2) ;;
        *) fail "$desc: expected exit code 2, got $last_rc" ;;
    esac
    stderr_one_line
    IFS='|' read -r -a n <<<"$needles"
    stderr_has "mirror-tool: " "${n[@]}"
    stdout_empty
    sha256sum --quiet -c .sums >"$scratch/sums.out" 2>&1 ||
        fail "$desc: modified: $(cat "$scratch/sums.out")"
    ls -A | cmp -s - .listing ||
        fail "$desc: files appeared or vanished: $(ls -A | diff - .listing)"
}

failures=0

# bad DESC NEEDLES ARG...: see the header.
bad()
{
    local desc=$1 needles=$2 a variant variants
    local -a args
    shift 2
    case " $* " in
        *" @DST@ "*) variants="old.img new.img" ;;
        *" @NEW@ "*) variants="new.img" ;;
        *) variants="-" ;;
    esac
    for variant in $variants; do
        args=()
        for a in "$@"; do
            case $a in
                @DST@|@NEW@) args+=("$variant") ;;
                *) args+=("$a") ;;
            esac
        done
        # The subshell's own TAP line is dropped; this one counts.
        if ! ( _bad_once "$desc" "$needles" "${args[@]}" ) >/dev/null; then
            not_ok "$desc"
            failures=$((failures + 1))
            return 0
        fi
    done
    ok "$desc"
}

# --- sources ----------------------------------------------------------
bad "missing source" "'missing.img'|No such file" \
    convert missing.img @DST@
bad "missing source with -n" "'missing.img'|No such file" \
    convert -n missing.img old.img
bad "directory as source" "'dir.d' is a directory" \
    convert dir.d @DST@
bad "empty source name" "source" \
    convert '' @DST@
bad "character device as source" "'/dev/zero'|not a regular file" \
    convert /dev/zero @DST@
bad "FIFO as source (probed)" "'fifo'|not a regular file" \
    convert fifo @DST@
bad "FIFO as source (-f raw)" "'fifo'|not a regular file" \
    convert -f raw fifo @DST@
bad "info on a FIFO" "'fifo'|not a regular file" info fifo
bad "map on a FIFO" "'fifo'|not a regular file" map fifo

# --- target equal to source --------------------------------------------
bad "target is the source (same path)" "same image" \
    convert src.img src.img
bad "target is the source (symlink)" "same image|'link.img'" \
    convert src.img link.img
bad "target is the source (symlink as source)" "same image" \
    convert link.img src.img
bad "target is the source (relative vs absolute)" "same image" \
    convert src.img "$work/src.img"
bad "target is the source (absolute vs ./relative)" "same image" \
    convert "$work/src.img" ./src.img
bad "target is the source (hard link)" "same image" \
    convert src.img hard.img
bad "target is the source with -n" "same image" \
    convert -n src.img link.img

# --- targets --------------------------------------------------------------
bad "-n into a missing target" "'new.img'|No such file" \
    convert -n src.img @NEW@
bad "-n into a smaller target" "'small.img'|smaller|4194304" \
    convert -n src.img small.img
bad "-n into a directory" "'dir.d' is a directory" \
    convert -n src.img dir.d
bad "a directory as target" "'dir.d' is a directory" \
    convert src.img dir.d
bad "a FIFO as target" "'fifo'|not a regular file" \
    convert src.img fifo
bad "a character device as target" "'/dev/null'|not a regular file" \
    convert src.img /dev/null
bad "-n into a character device" "'/dev/null'|not a regular file" \
    convert -n src.img /dev/null
# A driver spec names no file: without -n there is nothing to create.
bad "a null: spec as a target to create" "null:size=4M" \
    convert src.img null:size=4M

# --- sizes and counts --------------------------------------------------
bad "--chunk-size 0" "--chunk-size '0'" \
    convert --chunk-size 0 src.img @DST@
bad "--chunk-size -1" "--chunk-size '-1'" \
    convert --chunk-size -1 src.img @DST@
bad "--chunk-size 3M (not a power of 2)" "--chunk-size '3M'|power of 2" \
    convert --chunk-size 3M src.img @DST@
bad "--chunk-size 99999999999999999999" \
    "--chunk-size '99999999999999999999'" \
    convert --chunk-size 99999999999999999999 src.img @DST@
bad "--chunk-size 2K (below 4K)" "--chunk-size '2K'" \
    convert --chunk-size 2K src.img @DST@
bad "--chunk-size 128M (above 64M)" "--chunk-size '128M'" \
    convert --chunk-size 128M src.img @DST@
bad "--chunk-size 1.5M" "--chunk-size '1.5M'" \
    convert --chunk-size 1.5M src.img @DST@
bad "--chunk-size ''" "--chunk-size ''" \
    convert --chunk-size '' src.img @DST@
bad "--chunk-size 0x1000" "--chunk-size '0x1000'" \
    convert --chunk-size 0x1000 src.img @DST@
bad "--chunk-size +64K" "--chunk-size '+64K'" \
    convert --chunk-size +64K src.img @DST@
bad "--chunk-size ' 64K'" "--chunk-size ' 64K'" \
    convert --chunk-size ' 64K' src.img @DST@
bad "--chunk-size 64KiB" "--chunk-size '64KiB'" \
    convert --chunk-size 64KiB src.img @DST@
bad "--chunk-size 8E (beyond 2^63-1)" "--chunk-size '8E'" \
    convert --chunk-size 8E src.img @DST@
bad "-m 0" "-m '0'" convert -m 0 src.img @DST@
bad "-m -1" "-m '-1'" convert -m -1 src.img @DST@
bad "-m 1025" "-m '1025'" convert -m 1025 src.img @DST@
bad "-m abc" "-m 'abc'" convert -m abc src.img @DST@
bad "-m 0x10" "-m '0x10'" convert -m 0x10 src.img @DST@
bad "-m 4x" "-m '4x'" convert -m 4x src.img @DST@
bad "--buf-size 0" "--buf-size '0'" convert --buf-size 0 src.img @DST@
bad "--buf-size 5G" "--buf-size '5G'" convert --buf-size 5G src.img @DST@
bad "-S 1000 (not a multiple of 512)" "-S '1000'|512" \
    convert -S 1000 src.img @DST@
bad "-S 32M (above 16M)" "-S '32M'" convert -S 32M src.img @DST@
bad "-S -1" "-S '-1'" convert -S -1 src.img @DST@
bad "-r 0" "-r '0'" convert -r 0 src.img @DST@

# --- formats, modes, options ---------------------------------------------
bad "-f foo" "-f 'foo'|unknown image format" convert -f foo src.img @DST@
bad "-O foo" "-O 'foo'|unknown image format" convert -O foo src.img @DST@
bad "-t bogus" "-t 'bogus'" convert -t bogus src.img @DST@
bad "-T bogus" "-T 'bogus'" convert -T bogus src.img @DST@
bad "--target-is-zero without -n" "--target-is-zero|-n" \
    convert --target-is-zero src.img @DST@
bad "-o with -n" "-o|-n" \
    convert -n -o preallocation=falloc src.img old.img
bad "-o preallocation=bogus" "'bogus'|preallocation" \
    convert -o preallocation=bogus src.img @DST@
bad "-o nosuchopt=1" "'nosuchopt'" convert -o nosuchopt=1 src.img @DST@
bad "-o garbage (no '=')" "'garbage'" convert -o garbage src.img @DST@

# --- the command line ----------------------------------------------------
bad "unknown option" "--bogus" convert --bogus src.img @DST@
bad "missing target argument" "expected a source and a target" \
    convert src.img
bad "missing both arguments" "expected a source and a target" convert
bad "too many arguments" "expected a source and a target" \
    convert src.img @DST@ extra.img
bad "unknown subcommand" "'frobnicate'" frobnicate src.img @DST@
bad "unknown top-level option" "'--bogus'" --bogus
bad "qmp with an empty socket path" "socket path missing" qmp '' query-jobs

# No command at all: usage on stderr (several lines), exit 2.
expect_exit 2 "$T"
stderr_has "Usage:" "convert"
stdout_empty
ok "no command prints the usage and exits 2"

if [ "$failures" -ne 0 ]; then
    echo "FAIL: $failures case(s) failed (see 'not ok' above)" >&2
    exit 1
fi
exit 0
