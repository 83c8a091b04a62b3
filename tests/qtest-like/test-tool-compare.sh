#!/usr/bin/env bash
# mirror-tool compare, checksum and --verify (issue 20, point 3).
#
# compare: every case runs qemu-img compare on the same pair and wants
# its exact stdout and exit code: identical raw/qcow2 pairs; one byte
# changed in the first block, the last byte, a hole of the other image,
# past the shorter image's end (with and without -s); -q; over NBD
# (nbdkit, qemu-nbd and our serve, multi-conn).
# checksum: the digest is the documented construction (recomputed here in
# python3); raw, qcow2 and NBD exports of the same bytes agree; a hole, a
# zero cluster and written zeroes hash alike; one changed byte changes it.
# --verify: convert and start succeed with "verified", and fail with exit
# 1 and "verify failed at offset N" onto a target that drops writes
# (nbdkit null); start --verify with a guest (fio) writing through the
# export across the switch-over; a guest write of a few bytes does not
# hide a corrupted byte beside it in the same sector.
# A failed read: exit 4 at qemu-img's offset (checksum: 1).  Bad input: one
# line, exit 2.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires python3 qemu-img qemu-io qemu-nbd nbdkit cmp truncate dd timeout

TMO="timeout 120"
MiB=1048576

# poke FILE OFFSET BYTE: write one byte (two hex digits) at OFFSET.
poke()
{
    printf "\\x$3" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none ||
        fail "poke $1 $2"
}

# same_as_qemu ARGS...: `compare ARGS` prints what `qemu-img compare
# ARGS` prints and exits as it does; sets qout to that output.
same_as_qemu()
{
    local qrc
    run $TMO qemu-img compare "$@"
    qrc=$last_rc
    qout=$(cat "$last_out")
    [ "$qrc" -le 1 ] || fail "qemu-img compare $* failed ($qrc)"
    expect_exit "$qrc" $TMO "$T" compare "$@"
    [ "$(cat "$last_out")" = "$qout" ] ||
        fail "compare $*: '$(cat "$last_out")', qemu-img: '$qout'"
}

# blkhash FILE: the digest as docs/mirror-tool.md "checksum" defines it.
blkhash()
{
    python3 - "$1" <<'EOF'
import hashlib, sys
outer = hashlib.sha256()
size = 0
with open(sys.argv[1], "rb") as f:
    while True:
        b = f.read(65536)
        if not b:
            break
        size += len(b)
        outer.update(hashlib.sha256(b).digest())
outer.update(size.to_bytes(8, "little"))
print(outer.hexdigest())
EOF
}

src_changed()
{
    [ "$(stat -c %y live.raw)" != "$1" ]
}

# digest_of IMG ARGS...: checksum's digest of IMG; checks the line.
digest_of()
{
    expect_ok $TMO "$T" checksum "$@"
    digest=$(cut -d' ' -f1 "$last_out")
    [ "$(cat "$last_out")" = "$digest  ${*: -1}" ] ||
        fail "checksum line: '$(cat "$last_out")'"
    [ ${#digest} = 64 ] || fail "digest '$digest'"
}

# --- compare: identical pairs ----------------------------------------------
make_sparse_image a.raw 24M 64K:192K 3M:1M 7M+4K:60K 20M:2M 24M-8K:8K
expect_ok qemu-img convert -f raw -O qcow2 a.raw a.qcow2
cp --sparse=always a.raw b.raw
write_zeroes b.raw 10M:2M          # allocated zeroes where a has a hole
for pair in "a.raw b.raw" "a.raw a.qcow2" "a.qcow2 b.raw" \
            "-f raw -F qcow2 a.raw a.qcow2"; do
    # shellcheck disable=SC2086
    same_as_qemu $pair
    [ "$qout" = "Images are identical." ] || fail "$pair: $qout"
done
ok "compare: identical raw/raw, raw/qcow2 pairs as qemu-img compare"

# --- compare: one byte different --------------------------------------------
size=$(file_size a.raw)
for off in 0 100 $((64 * 1024 + 1000)) $((3 * MiB + 4095)) $((15 * MiB + 7)) \
           $((size - 1)); do
    cp --sparse=always a.raw c.raw
    poke c.raw "$off" 5a
    expect_ok qemu-img convert -f raw -O qcow2 c.raw c.qcow2
    for pair in "a.raw c.raw" "c.raw a.raw" "a.qcow2 c.qcow2" \
                "a.raw c.qcow2" "c.qcow2 b.raw"; do
        # shellcheck disable=SC2086
        same_as_qemu $pair
        [ "$qout" = "Content mismatch at offset $((off / 512 * 512))!" ] ||
            fail "$pair at $off: $qout"
    done
done
ok "compare: one byte changed (first block, data, a hole of the other," \
    "last byte): qemu-img's message and exit 1"

# A difference early and one late: the first is reported, whatever
# chunk finishes first (small chunks, many in flight).
cp --sparse=always a.raw c.raw
poke c.raw $((20 * MiB + 12345)) 01
poke c.raw $((5 * MiB + 3)) 01
expect_exit 1 "$T" compare -m 64 --chunk-size 4K a.raw c.raw
[ "$(cat "$last_out")" = "Content mismatch at offset $((5 * MiB))!" ] ||
    fail "first difference: $(cat "$last_out")"
ok "compare: the lowest of two differences, with 64 small chunks in flight"

# -q: nothing printed, the exit code says.
expect_exit 1 "$T" compare -q a.raw c.raw
stdout_empty
stderr_empty
expect_ok "$T" compare -q a.raw a.qcow2
stdout_empty
ok "compare -q: exit codes only"

# --- compare: sizes differ ---------------------------------------------------
cp --sparse=always a.raw long.raw
truncate -s 30M long.raw
cp long.raw long2.raw
poke long2.raw $((27 * MiB + 77)) 01
expect_ok qemu-img convert -f raw -O qcow2 long2.raw long2.qcow2
for pair in "a.raw long.raw" "long.raw a.qcow2" "a.raw long2.raw" \
            "long2.qcow2 a.raw" "-s a.raw long.raw" "-s long2.raw a.raw" \
            "-s a.raw b.raw" "-s a.raw a.qcow2"; do
    # shellcheck disable=SC2086
    same_as_qemu $pair
done
same_as_qemu a.raw long2.raw
[ "$qout" = "Warning: Image size mismatch!
Content mismatch at offset $((27 * MiB))!" ] || fail "tail: $qout"
same_as_qemu -s a.raw long.raw
[ "$qout" = "Strict mode: Image size mismatch!" ] || fail "-s: $qout"
ok "compare: different sizes (tail compared with zeroes; -s refuses)" \
    "as qemu-img"

# --- compare over NBD --------------------------------------------------------
# c: the two differences above.
expect_ok qemu-img convert -f raw -O qcow2 c.raw c.qcow2
start_nbdkit ka file a.raw
uri_a=$uri
qemu-nbd -r -f qcow2 -k "$scratch/qc.sock" -t c.qcow2 2>qc.log &
track_pid $!
wait_for 20 "qemu-nbd to listen" test -S qc.sock
uri_c="nbd+unix:///?socket=$scratch/qc.sock"
"$T" serve -f qcow2 "unix:$scratch/srv.sock" a.qcow2 >srv.out 2>srv.err &
track_pid $!
wait_for 20 "serve to listen" grep -qs '^serving on ' srv.out
uri_s="nbd+unix:///?socket=$scratch/srv.sock"
same_as_qemu "$uri_a" "$uri_s"
[ "$qout" = "Images are identical." ] || fail "NBD identical: $qout"
same_as_qemu "$uri_a" "$uri_c"
same_as_qemu -f raw c.raw "$uri_s"
[ "$qout" = "Content mismatch at offset $((5 * MiB))!" ] || fail "NBD: $qout"
expect_exit 1 "$T" compare --connections 4 -m 32 "$uri_s" "$uri_c"
[ "$(cat "$last_out")" = "$qout" ] || fail "multi-conn: $(cat "$last_out")"
ok "compare over NBD (nbdkit, qemu-nbd, serve; 4 connections) as qemu-img"

# --- checksum ----------------------------------------------------------------
want=$(blkhash a.raw)
digest_of a.raw
[ "$digest" = "$want" ] || fail "a.raw: $digest, the construction: $want"
digest_of -U a.qcow2          # serve has it open for writing
[ "$digest" = "$want" ] || fail "a.qcow2: $digest"
digest_of b.raw
[ "$digest" = "$want" ] || fail "b.raw (allocated zeroes): $digest"
digest_of "$uri_a"
[ "$digest" = "$want" ] || fail "nbdkit: $digest"
digest_of --connections 4 -m 4 --chunk-size 64K "$uri_s"
[ "$digest" = "$want" ] || fail "serve: $digest"
ok "checksum: the documented construction; raw, qcow2, allocated" \
    "zeroes, NBD exports agree"

# Zero clusters and written zeroes hash as holes.
cp a.qcow2 z.qcow2
expect_ok qemu-io -f qcow2 -c 'write -z 3M 1M' z.qcow2
cp --sparse=always a.raw z.raw
truncate -s 0 z.raw
truncate -s "$size" z.raw
dd if=a.raw of=z.raw bs=64K conv=notrunc,sparse status=none
dd if=/dev/zero of=z.raw bs=64K seek=48 count=16 conv=notrunc status=none
want=$(blkhash z.raw)
digest_of z.qcow2
[ "$digest" = "$want" ] || fail "zero clusters: $digest, raw: $want"
digest_of z.raw
[ "$digest" = "$want" ] || fail "z.raw: $digest"
ok "checksum: zero clusters, holes and written zeroes hash alike"

# One byte changes the digest; an odd size hashes a short last block.
digest_of c.raw
[ "$digest" = "$(blkhash c.raw)" ] || fail "c.raw"
[ "$digest" != "$(blkhash a.raw)" ] || fail "a changed byte kept the digest"
make_sparse_image odd.raw 100001 0:4K 90000:10001
digest_of odd.raw
[ "$digest" = "$(blkhash odd.raw)" ] || fail "odd size: $digest"
: >empty.raw
digest_of empty.raw
[ "$digest" = "$(blkhash empty.raw)" ] || fail "empty: $digest"
ok "checksum: one changed byte changes it; odd and zero sizes"

# --- --verify ----------------------------------------------------------------
truncate -s 16M src.raw
expect_ok qemu-io -f raw -c 'write -P 0x11 1M 64k' -c 'write -P 0x22 9M 2M' \
    src.raw
expect_ok "$T" convert --verify -O qcow2 src.raw dst.qcow2
grep -q '^verified: the target equals the source (16 MiB compared in' \
    "$last_out" || fail "no 'verified' line: $(cat "$last_out")"
expect_ok qemu-img compare src.raw dst.qcow2
expect_ok "$T" convert -q --verify src.raw dst.raw
stdout_empty
ok "convert --verify: 'verified' in the summary, exit 0"

# A target that drops what is written (nbdkit null) is caught.
start_nbdkit sink null size=16M
expect_exit 1 $TMO "$T" convert -n --verify src.raw "$uri"
stderr_has "verify failed at offset $MiB: the target differs from the source"
grep -q verified "$last_out" && fail "a failed verify said verified"
expect_exit 1 $TMO "$T" start --verify src.raw "$uri"
stderr_has "verify failed at offset $MiB"
grep -q '^verified' "$last_out" && fail "start: a failed verify said verified"
grep -q '^copied' "$last_out" && fail "start: the failed copy got a summary"
ok "convert/start --verify onto a target that drops writes: exit 1, the offset"

# start --verify with a guest writing through the export across the
# switch-over: the target equals the source there (a guest's later
# writes to the target do not count against it).
if fio --enghelp=nbd >/dev/null 2>&1; then
    truncate -s 64M live.raw
    expect_ok qemu-io -f raw -c 'write -P 0x33 0 8M' -c 'write -P 0x44 40M 8M' \
        live.raw
    # Slow reads of the target (only the verify reads it) keep the verify
    # running while the guest writes.
    nbdkit -f -P "$scratch/mem.pid" -U "$scratch/mem.sock" --filter=delay \
        memory size=64M rdelay=100ms >mem.log 2>&1 &
    track_pid $!
    wait_for 20 "nbdkit memory to serve" test -s mem.pid
    tgt="nbd+unix:///?socket=$scratch/mem.sock"
    "$T" start --verify --json --qmp "$scratch/live.qmp" --qmp-wait \
        --chunk-size 256K \
        --export "unix:$scratch/live.nbd" live.raw "$tgt" \
        >live.out 2>live.err &
    live_pid=$!
    track_pid $live_pid
    wait_for 20 "start to export" test -S live.nbd
    before=$(stat -c %y live.raw)
    fio --name=guest --thread --ioengine=nbd \
        --uri="nbd+unix:///?socket=$scratch/live.nbd" --rw=randwrite \
        --bsrange=4k-64k --iodepth=8 --rate=8m --size=64M --time_based \
        --runtime=100 --output-format=json --output=guest.fio \
        >/dev/null 2>&1 &
    fio_pid=$!
    track_pid $fio_pid
    # The job starts with the first QMP client: once the guest writes.
    wait_for 30 "fio to write" src_changed "$before"
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_READY --timeout 100 \
        "$scratch/live.qmp" query-jobs
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 100 \
        "$scratch/live.qmp" block-job-complete '{"device": "mirror"}'
    wait_for 100 "the verify to finish" grep -q '"verify"\|verify failed' \
        live.out live.err
    kill -INT $fio_pid
    wait $fio_pid
    untrack_pid $fio_pid
    grep -q '"verify": {"result": "verified"' live.out ||
        fail "start --verify under fio: $(cat live.out live.err)"
    rewritten=$(sed -n 's/.*"rewritten-bytes": \([0-9]*\).*/\1/p' live.out)
    [ "${rewritten:-0}" -gt 0 ] ||
        fail "no guest write landed during the verify: $(cat live.out)"
    expect_ok $TMO "$T" qmp "$scratch/live.qmp" quit
    wait $live_pid
    rc=$?
    untrack_pid $live_pid
    [ $rc = 0 ] || fail "start --verify exited $rc: $(cat live.err)"
    ok "start --verify with fio writing through the export across the" \
        "switch-over"

    # Without writes after the switch-over: verified, and the target is
    # the source.
    qemu-img create -f raw live2.raw 64M >/dev/null
    expect_ok $TMO "$T" start --verify live.raw live2.raw
    grep -q '^verified: the target equals the source (64 MiB' "$last_out" ||
        fail "start --verify: $(cat "$last_out")"
    expect_ok cmp live.raw live2.raw
    ok "start --verify: verified, and the target equals the source"
else
    ok "start --verify with fio writing through the export # SKIP fio" \
        "has no nbd engine"
    ok "start --verify without guest writes # SKIP fio has no nbd engine"
fi

# start --verify: a guest write of a few bytes after the switch-over
# excuses exactly those bytes, not the rest of their sector: a byte of the
# target corrupted behind the job's back (while READY, through another
# connection) next to them fails the verify.  Slow target reads keep the
# verify from reaching that last sector before the guest wrote.
truncate -s 16M few.raw
expect_ok qemu-io -f raw -c 'write -P 0x55 0 16M' few.raw
nbdkit -f -P "$scratch/few.pid" -U "$scratch/few.sock" --filter=delay \
    memory size=16M rdelay=200ms >few.log 2>&1 &
track_pid $!
wait_for 20 "nbdkit memory to serve" test -s few.pid
tgt="nbd+unix:///?socket=$scratch/few.sock"
"$T" start --verify --qmp "$scratch/few.qmp" --qmp-wait --chunk-size 64K \
    --export "unix:$scratch/few.nbd" few.raw "$tgt" >few.out 2>few.err &
few_pid=$!
track_pid $few_pid
wait_for 20 "start to export" test -S few.nbd
expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_READY --timeout 100 \
    "$scratch/few.qmp" query-jobs
bad=$((16 * MiB - 512 + 100))
expect_ok $TMO qemu-io -f raw -c "write -P 0x99 $bad 1" "$tgt"
expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 100 \
    "$scratch/few.qmp" block-job-complete '{"device": "mirror"}'
expect_ok $TMO qemu-io -f raw -c "write -P 0x77 $((bad + 1)) 4" \
    "nbd+unix:///?socket=$scratch/few.nbd"
wait_for 100 "the verify to finish" grep -q 'verif' few.out few.err
grep -q "verify failed at offset $bad: the target differs" few.err ||
    fail "a corrupted byte beside a guest write: $(cat few.out few.err)"
expect_ok $TMO "$T" qmp "$scratch/few.qmp" quit
wait $few_pid
untrack_pid $few_pid
ok "start --verify: a guest write of 4 bytes does not hide a corrupted" \
    "byte in the same sector"

# --- read errors -------------------------------------------------------------
truncate -s 8M e.raw
poke e.raw 3000000 78
start_nbdkit err --filter=error file e.raw error-pread=EIO error-pread-rate=1
run $TMO qemu-img compare -f raw -F raw e.raw "$uri"
[ "$last_rc" = 4 ] || fail "qemu-img compare: exit $last_rc, expected 4"
qerr=$(sed 's/^qemu-img: Error/error/' "$last_err")
expect_exit 4 $TMO "$T" compare e.raw "$uri"
stderr_one_line
[ "$(sed "s/'//g" "$last_err")" = "mirror-tool: $qerr" ] ||
    fail "read error: $(cat "$last_err"), qemu-img: $qerr"
expect_exit 1 $TMO "$T" checksum "$uri"
stderr_one_line
stderr_has "read of '$uri' failed at offset" "Input/output error"
stop_server err
ok "a failed read: compare exits 4 with qemu-img's offset, checksum 1"

# --- bad input ---------------------------------------------------------------
for args in "compare missing.raw a.raw" "compare a.raw missing.raw" \
            "compare -f qcow2 a.raw a.raw" "compare -F bogus a.raw a.raw" \
            "compare a.raw" "compare -m 0 a.raw a.raw" \
            "compare --chunk-size 3K a.raw a.raw" \
            "compare --connections 17 a.raw a.raw" \
            "checksum missing.raw" "checksum -f qcow2 a.raw" \
            "checksum --chunk-size 4K a.raw" "checksum a.raw b.raw" \
            "convert --verify missing.raw out.raw"; do
    # shellcheck disable=SC2086
    expect_exit 2 "$T" $args
    stderr_one_line
    stdout_empty
done
assert_absent out.raw
ok "bad input: one line, exit 2"
