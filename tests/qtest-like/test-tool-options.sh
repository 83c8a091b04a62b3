#!/usr/bin/env bash
# mirror-tool: what used to be environment variables are options (issue
# 18, "no hidden knobs"), each refusing bad values like any other option
# (exit 2, one line naming the value as typed, nothing written) and each
# having its effect:
#  - --threads N (convert, start, serve): the I/O pool's workers, counted
#    in /proc while serve answers a parallel reader;
#  - node options views= and copy-offload= (raw), copy-offload=,
#    l2-cache-size= and refcount-cache-size= (qcow2), given with
#    --source-opts / --target-opts / --open-opts: the node's debug line
#    (G_MESSAGES_DEBUG=mirror-block) says what they came to, and the copies
#    are byte-identical whatever they say;
#  - the test hooks are in the binary exactly when the build asked for
#    them (-Dtest-hooks=true): `--version` says so, and a default build
#    has not even the hook's variable name in it.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires sha256sum cmp qemu-img timeout

TMO=(timeout -k 5 120)
make_sparse_image src.img 4M 64K:64K 1M:1M+100K 3M:4K
make_random_image old.img 4M
remember_sum src.img
remember_sum old.img

# refused DESC NEEDLE ARG...: mirror-tool ARG exits 2 with one line naming
# NEEDLE; src.img and old.img unchanged, new.img and new.qcow2 not made.
refused()
{
    local desc=$1 needle=$2
    shift 2
    rm -f new.img new.qcow2
    run "${TMO[@]}" "$T" "$@"
    [ "$last_rc" = 2 ] || fail "$desc: expected exit code 2, got $last_rc"
    stderr_one_line
    stderr_has "mirror-tool: " "$needle"
    stdout_empty
    assert_unchanged src.img "$desc"
    assert_unchanged old.img "$desc"
    assert_absent new.img "$desc"
    assert_absent new.qcow2 "$desc"
}

# --- --threads ---------------------------------------------------------
for v in 0 -1 x 257 99999999999999999999 "" 1.5; do
    refused "convert --threads '$v'" "--threads '$v'" \
        convert --threads "$v" src.img new.img
    refused "convert -n --threads '$v'" "--threads '$v'" \
        convert -n --threads "$v" src.img old.img
    refused "start --threads '$v'" "--threads '$v'" \
        start --threads "$v" src.img old.img
    refused "serve --threads '$v'" "--threads '$v'" \
        serve --threads "$v" "unix:$scratch/never.sock" src.img
    assert_absent never.sock "serve --threads '$v'"
done
ok "--threads: 0, -1, x, 257, 2^66, '' and 1.5 are refused by convert, start and serve"

for v in 1 256; do
    rm -f new.img
    expect_ok "${TMO[@]}" "$T" convert --threads "$v" src.img new.img
    assert_same src.img new.img "convert --threads $v"
done
cp old.img t.img
expect_ok "${TMO[@]}" "$T" start --threads 1 src.img t.img
assert_same src.img t.img "start --threads 1"
ok "--threads 1 and 256: convert and start copy every byte"

# The pool's workers while serve answers 16 requests at once: never more
# than --threads (GLib names them pool-PRGNAME); the size the pool was
# given is its debug line (how many workers a default pool starts depends
# on how fast requests come back, so that is not counted).
pool_workers()
{
    cat /proc/"$1"/task/*/comm 2>/dev/null | grep '^pool-' |
        grep -c -v '^pool-spawner$'
}
serve_workers()
{
    local sock=$scratch/s.sock pid
    rm -f "$sock" serve.out
    G_MESSAGES_DEBUG=mirror-block "$T" serve "$@" -r "unix:$sock" src.img \
        >serve.out 2>serve.err &
    pid=$!
    track_pid "$pid"
    wait_for 20 "serve to listen" grep -q "serving on" serve.out
    # 4M requests: reads of more than 1M always go to the pool (smaller
    # ones of a file in memory may be made on the main loop).
    nbdcopy --requests=16 --connections=4 --request-size=4194304 \
        "nbd+unix:///?socket=$sock" \
        null: || fail "nbdcopy from serve $*"
    workers=$(pool_workers "$pid")
    kill -TERM "$pid"
    wait "$pid"
    untrack_pid "$pid"
}
if command -v nbdcopy >/dev/null; then
    serve_workers --threads 1
    [ "$workers" -le 1 ] || fail "serve --threads 1: $workers pool workers"
    ok "serve --threads 1: $workers pool worker for 16 requests in flight"
    serve_workers --threads 3
    [ "$workers" -le 3 ] || fail "serve --threads 3: $workers pool workers"
    grep -q "thread pool: up to 3 workers" serve.out ||
        fail "serve --threads 3: the pool was not sized 3: $(grep pool serve.out)"
    ok "serve --threads 3: $workers pool workers (at most 3), a pool of 3"
    serve_workers
    grep -q "thread pool: up to 16 workers" serve.out ||
        fail "serve: the default pool is not 16: $(grep pool serve.out)"
    ok "serve without --threads: a pool of 16 workers ($workers started)"
else
    ok "serve --threads: pool workers counted # SKIP no nbdcopy"
fi

# --- node options: bad values --------------------------------------------
refused "views=maybe (source)" "views 'maybe'" \
    convert --source-opts views=maybe src.img new.img
refused "views= empty (source)" "views ''" \
    convert --source-opts views= src.img new.img
refused "copy-offload=yes (target, created)" "copy-offload 'yes'" \
    convert --target-opts copy-offload=yes src.img new.img
refused "copy-offload=yes (target, overwritten)" "copy-offload 'yes'" \
    convert --target-opts copy-offload=yes src.img old.img
refused "copy-offload=ON (qcow2 target)" "copy-offload 'ON'" \
    convert -O qcow2 --target-opts copy-offload=ON src.img new.qcow2
refused "views on a qcow2 node" "the option 'views'" \
    convert -O qcow2 --target-opts views=on src.img new.qcow2
refused "l2-cache-size on a raw node" "the option 'l2-cache-size'" \
    convert --target-opts l2-cache-size=1M src.img old.img
for v in 3x -1 1.5M 4G 0x10 ""; do
    refused "l2-cache-size='$v'" "l2-cache-size '$v'" \
        convert -O qcow2 --target-opts "l2-cache-size=$v" src.img new.qcow2
    refused "refcount-cache-size='$v'" "refcount-cache-size '$v'" \
        convert -O qcow2 --target-opts "refcount-cache-size=$v" src.img \
        new.qcow2
done
refused "--source-opts without '='" "--source-opts 'views'" \
    convert --source-opts views src.img new.img
refused "start: views=1 (source)" "views '1'" \
    start --source-opts views=1 src.img old.img
refused "start: copy-offload=no (target)" "copy-offload 'no'" \
    start --target-opts copy-offload=no src.img old.img
refused "serve: views=x" "views 'x'" \
    serve --open-opts views=x "unix:$scratch/never.sock" src.img
refused "info: l2-cache-size on raw" "the option 'l2-cache-size'" \
    info --open-opts l2-cache-size=1M src.img
refused "map: views=auto,views2=on" "the option 'views2'" \
    map --open-opts views=auto,views2=on src.img
ok "node options: bad values and unknown keys are refused, nothing written"

# --- node options: their effect --------------------------------------
# debug_line WHAT [NAME]: the line of the first node (named NAME) about
# what its options came to (GLib prints debug messages on stdout).
debug_line()
{
    local name=${2:-"[^']*"}
    cat "$last_out" "$last_err" | grep -o "$1 '$name': .*" | head -1
}
if shm_scratch; then
    make_sparse_image "$shm/s.img" 4M 0:1M 2M:1M+512
    for views in auto on off; do
        rm -f "$shm/v.img"
        G_MESSAGES_DEBUG=mirror-block \
            expect_ok "${TMO[@]}" "$T" convert --source-opts "views=$views" \
            "$shm/s.img" "$shm/v.img"
        assert_same "$shm/s.img" "$shm/v.img" "convert views=$views"
        line=$(debug_line raw)
        case $views in
            auto) want="views where they pay" ;;
            *) want="views $views" ;;
        esac
        case $line in
            "raw '$shm/s.img': $want, fused copies on") ;;
            *) fail "views=$views: the source says \"$line\"" ;;
        esac
    done
    ok "views=auto|on|off on a tmpfs source: said, and the same bytes"

    for copy in on off; do
        rm -f "$shm/c.img" "$shm/c.qcow2"
        G_MESSAGES_DEBUG=mirror-block \
            expect_ok "${TMO[@]}" "$T" convert -W --target-opts "copy-offload=$copy" \
            "$shm/s.img" "$shm/c.img"
        assert_same "$shm/s.img" "$shm/c.img" "convert copy-offload=$copy"
        cat "$last_out" "$last_err" |
            grep -q "raw '$shm/c.img': views .*, fused copies $copy" ||
            fail "copy-offload=$copy: $(debug_line raw)"
        G_MESSAGES_DEBUG=mirror-block \
            expect_ok "${TMO[@]}" "$T" convert -W -O qcow2 \
            --target-opts "copy-offload=$copy" "$shm/s.img" "$shm/c.qcow2"
        cat "$last_out" "$last_err" |
            grep -q "qcow2 '$shm/c.qcow2': .*, fused copies $copy" ||
            fail "qcow2 copy-offload=$copy: $(debug_line qcow2)"
        run qemu-img compare -f raw -F qcow2 "$shm/s.img" "$shm/c.qcow2"
        [ "$last_rc" = 0 ] || fail "qcow2 copy-offload=$copy: differs"
    done
    ok "copy-offload=on|off (raw and qcow2 targets on tmpfs): said, same bytes"
else
    ok "views= and copy-offload= on tmpfs # SKIP no tmpfs"
fi

# Cache sizes: bytes of tables (64 KiB clusters), whole tables, at least 4;
# the defaults are 8M and 2M.
for c in "|128|32" "l2-cache-size=1M|16|32" \
         "l2-cache-size=100K,refcount-cache-size=1|4|4" \
         "refcount-cache-size=4M|128|64"; do
    IFS='|' read -r opts l2 rb <<<"$c"
    rm -f new.qcow2
    G_MESSAGES_DEBUG=mirror-block \
        expect_ok "${TMO[@]}" "$T" convert -O qcow2 ${opts:+--target-opts "$opts"} \
        src.img new.qcow2
    want="L2 cache of $l2 tables, refcount cache of $rb tables"
    # The target's line: convert checks the options on an image in a
    # memfd first, read-only (no refcount cache), which says so too.
    debug_line qcow2 new.qcow2 | grep -q "$want" ||
        fail "'$opts': \"$(debug_line qcow2 new.qcow2)\", expected \"$want\""
    run qemu-img compare -f raw -F qcow2 src.img new.qcow2
    [ "$last_rc" = 0 ] || fail "'$opts': the image differs"
done
G_MESSAGES_DEBUG=mirror-block expect_ok "$T" map --open-opts \
    l2-cache-size=512K new.qcow2
debug_line qcow2 | grep -q "L2 cache of 8 tables" ||
    fail "map --open-opts l2-cache-size=512K: $(debug_line qcow2)"
ok "l2-cache-size and refcount-cache-size size the caches; same bytes"

# --- test hooks --------------------------------------------------------
# meson passes the build's -Dtest-hooks as TEST_HOOKS.
expect_ok "$T" --version
if [ "${TEST_HOOKS:-false}" = true ]; then
    grep -q '^test hooks: built in' "$last_out" ||
        fail "-Dtest-hooks=true, but --version does not say so"
    grep -q -a QEMU_MIRROR_QCOW2_DEBUG "$T" ||
        fail "-Dtest-hooks=true, but the hook is not in the binary"
    ok "a -Dtest-hooks=true build has the hooks and says so"
else
    ! grep -q 'test hooks' "$last_out" ||
        fail "a default build says it has test hooks"
    ! grep -q -a QEMU_MIRROR_QCOW2_DEBUG "$T" ||
        fail "a default build carries the crash hook"
    ok "a default build has no test hooks (not even the variable's name)"
fi
