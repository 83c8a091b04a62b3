#!/usr/bin/env bash
# The cost of map, compare and checksum follows the extents of a
# thin disk, not its virtual size (issue 21), counted, never timed: the
# lseek calls a sparse raw file on tmpfs costs (strace), and the requests
# an NBD export sees (nbdkit's log filter), are the same for a 1 TiB and a
# 64 TiB disk with the same data, or the least the NBD protocol's 32-bit
# lengths allow; convert to a new 64 TiB file writes the data and nothing
# else.  The bytes are checked too: map against qemu-img map, compare's
# verdicts, the copied data.
#
# tmpfs files may be 64 TiB sparse (ext4 stops at 16 TiB), so the files
# live in a tmpfs scratch directory.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires strace python3 qemu-img nbdkit truncate dd cmp cp
shm_scratch || fail "no tmpfs directory for 64 TiB sparse files"
TMO="timeout 300"

# The same three 64 KiB pieces of data, at the start, the middle and the
# end of a disk of SIZE GiB, in FILE.
make_disk()
{
    local g=$2
    make_sparse_image "$1" "${g}G" 0:64K "$((g / 2))G+4K:64K" \
        "${g}G-64K:64K"
}

# count_calls OUT SYSCALLS CMD...: run CMD under strace (every thread),
# which must succeed; OUT gets how many SYSCALLS (comma-separated) it made.
count_calls()
{
    local out=$1 calls=$2
    shift 2
    # LeakSanitizer cannot run under ptrace: the traced run goes without.
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
        expect_ok $TMO strace -f --seccomp-bpf -qq -o "$scratch/strace.txt" \
        -e trace="$calls" "$@"
    # grep -c prints 0 (and fails) when there is none.
    grep -c -E "^([0-9]+ +)?(${calls//,/|})\(" "$scratch/strace.txt" \
        >"$out" || true
}

# same_count WHAT A B: the counts in files A (the smaller disk) and B (the
# larger) are equal, and small.
same_count()
{
    local a b
    a=$(cat "$2")
    b=$(cat "$3")
    [ "$a" = "$b" ] || fail "$1: $a calls on the smaller disk, $b on the larger"
    [ "$a" -le 64 ] || fail "$1: $a calls for 3 pieces of data"
}

make_disk "$shm/a1" 1024
make_disk "$shm/a64" 65536
cp --sparse=always "$shm/a64" "$shm/b64"
cp --sparse=always "$shm/a1" "$shm/b1"

# --- map: per extent, and what qemu-img map says ------------------------
count_calls map1 lseek "$T" map --output=json "$shm/a1"
count_calls map64 lseek "$T" map --output=json "$shm/a64"
cp "$last_out" map64.json
same_count "map" map1 map64
expect_ok qemu-img map -f raw --output=json "$shm/a64"
assert_same map64.json "$last_out" "map of 64 TiB against qemu-img map"
extent_is map64.json 32768G+4K 64K data
extent_is map64.json 64K 32768G-60K hole
ok "map of a 64 TiB sparse file: as many lseek calls as for 1 TiB"

# --- compare: equal, then a difference far out --------------------------
count_calls cmp1 lseek "$T" compare "$shm/a1" "$shm/b1"
count_calls cmp64 lseek "$T" compare "$shm/a64" "$shm/b64"
grep -q -x "Images are identical." "$last_out" ||
    fail "compare: $(cat "$last_out")"
same_count "compare" cmp1 cmp64
dd if=/dev/urandom of="$shm/b64" bs=4K count=1 seek=$((40 << 28)) \
    conv=notrunc status=none || fail "dd into b64"
expect_exit 1 $TMO "$T" compare "$shm/a64" "$shm/b64"
grep -q -x "Content mismatch at offset $((40 << 40))!" "$last_out" ||
    fail "compare: $(cat "$last_out")"
ok "compare of 64 TiB sparse files: as many lseek calls as for 1 TiB"

# --- checksum: its block status per extent (its digest hashes a hash of
# every 64 KiB block, linear in the size by definition: 64 GiB here) ------
make_disk "$shm/c64g" 64
count_calls sum64g lseek "$T" checksum "$shm/c64g"
count_calls sum1 lseek "$T" checksum "$shm/a1"
same_count "checksum" sum64g sum1
ok "checksum: as many lseek calls for 1 TiB as for 64 GiB"

# --- convert to a new file: no preparation of the target ---------------
# (How many status and zero requests the copy makes is the mirror job's
# planning; this guards that convert itself neither zeroes nor
# preallocates a new target, and that the bytes arrive.)
count_calls conv64 fallocate,pwrite64,pwritev "$T" convert -O raw \
    "$shm/a64" "$shm/t64"
[ "$(cat conv64)" -le 8 ] ||
    fail "convert to a new file: $(cat conv64) fallocate/write calls"
expect_ok qemu-img compare -f raw -F raw "$shm/a64" "$shm/t64"
[ "$(allocated_bytes "$shm/t64")" -le $((1 << 20)) ] ||
    fail "convert: the new target holds $(allocated_bytes "$shm/t64") bytes"
rm -f "$shm/t64"
ok "convert of a 64 TiB sparse file to a new file: 3 writes, no zeroing"

# --- NBD: requests of the protocol's most -------------------------------
# count_requests LOG: the block status requests nbdkit's log filter saw.
count_requests()
{
    grep -c " Extents id=.*req_one=" "$1"
}

start_nbdkit null --filter=log null 64T logfile="$scratch/null.log"
expect_ok $TMO "$T" map --output=json "$uri"
cp "$last_out" nbdmap.json
extent_is nbdmap.json 0 65536G hole
n=$(count_requests null.log)
# 64 TiB in requests of 4 GiB less 64 KiB: 16385.
[ "$n" = 16385 ] ||
    fail "map of a 64 TiB NBD export: $n block status requests"
stop_server null
ok "map of a 64 TiB NBD export: block status in 4 GiB requests"

# image-scan (compare, checksum, --verify) over NBD: the same requests.
start_nbdkit null --filter=log null 64T logfile="$scratch/null2.log"
truncate -s 64T "$shm/e64" || fail "truncate e64"
expect_ok $TMO "$T" compare "$shm/e64" "$uri"
grep -q -x "Images are identical." "$last_out" ||
    fail "compare: $(cat "$last_out")"
n=$(count_requests null2.log)
[ "$n" = 16385 ] ||
    fail "compare with a 64 TiB NBD export: $n block status requests"
stop_server null
ok "compare with a 64 TiB NBD export: block status in 4 GiB requests"
