#!/usr/bin/env bash
# mirror-tool: bad input is refused with exit 2, a clear one-line message
# naming the bad value, and the target untouched (issue 2).
#
# Table-driven: each `bad` line is one case.  In its arguments
#   @DST@  runs the case twice: once with an existing target (old.img,
#          whose sha256 must not change) and once with a target that does
#          not exist (new.img, which must not be created);
#   @NEW@  only the non-existent target.
# After every case the source is unchanged and no file appeared in the
# scratch directory.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires sha256sum truncate dd cmp

make_sparse_image src.img 4M 64K:64K 1M:100K 3M:4K
make_random_image old.img 1M
make_random_image small.img 1M
mkdir dir.d
ln -s src.img link.img
for f in src.img old.img small.img; do
    remember_sum "$f"
done

listing()
{
    ls -A | grep -v -x -e .stdout -e .stderr
}
listing >.listing

# _bad_once DESC NEEDLES ARG...: one run; NEEDLES is '|'-separated.
_bad_once()
{
    local desc=$1 needles=$2 n
    shift 2
    expect_exit 2 "$T" "$@"
    stderr_one_line
    IFS='|' read -r -a n <<<"$needles"
    stderr_has "mirror-tool: " "${n[@]}"
    stdout_empty
    for f in src.img old.img small.img; do
        assert_unchanged "$f" "$desc"
    done
    assert_absent new.img "$desc"
    listing | cmp -s - .listing || fail "$desc: files appeared: $(listing)"
}

# bad DESC NEEDLES ARG...: see the header.
bad()
{
    local desc=$1 needles=$2 a variant
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
        _bad_once "$desc" "$needles" "${args[@]}"
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

# --- target equal to source --------------------------------------------
bad "target is the source (same path)" "same image" \
    convert src.img src.img
bad "target is the source (symlink)" "same image|'link.img'" \
    convert src.img link.img
bad "target is the source (symlink as source)" "same image" \
    convert link.img src.img
bad "target is the source (relative vs absolute)" "same image" \
    convert src.img "$scratch/src.img"
bad "target is the source (absolute vs ./relative)" "same image" \
    convert "$scratch/src.img" ./src.img
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
bad "-m 0" "-m '0'" convert -m 0 src.img @DST@
bad "-m -1" "-m '-1'" convert -m -1 src.img @DST@
bad "-m 1025" "-m '1025'" convert -m 1025 src.img @DST@
bad "-m abc" "-m 'abc'" convert -m abc src.img @DST@
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

# No command at all: usage on stderr (several lines), exit 2.
expect_exit 2 "$T"
stderr_has "Usage:" "convert"
stdout_empty
ok "no command prints the usage and exits 2"

exit 0
