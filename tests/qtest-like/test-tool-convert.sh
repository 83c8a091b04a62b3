#!/usr/bin/env bash
# mirror-tool convert (issue 2): byte-identical copies, holes and zero runs,
# -n into existing targets, tuning knobs, progress, I/O errors mid-copy,
# SIGINT/SIGTERM, and agreement with qemu-img convert.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

# shellcheck source=tests/qtest-like/lib.sh
. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires qemu-img python3 truncate dd cmp stat

MiB=$((1024 * 1024))

# convert_same SRC DST [OPTION]...: convert quietly, DST equal to SRC.
convert_same()
{
    local src=$1 dst=$2
    shift 2
    rm -f "$dst"
    expect_ok "$T" convert "$@" "$src" "$dst"
    stdout_empty
    stderr_empty
    assert_same "$src" "$dst" "convert $* $src"
}

# --- byte-identical copies ---------------------------------------------
# Sizes around the granularity (64K) and the chunk (1M), 0 and 1 byte.
for sz in 0 1 511 4097 65535 65537 $((MiB - 1)) $((MiB + 1)) \
          $((3 * MiB + 12345)); do
    make_random_image "r$sz.img" "$sz"
    convert_same "r$sz.img" out.img
    convert_same "r$sz.img" out.img -W
    ok "convert a fully allocated $sz-byte image, with and without -W"
done
make_sparse_image s1.img 10M 192K:128K 1000K:100K 7M:8K
make_sparse_image s2.img $((10 * MiB + 777)) 0:1 65535:2 $((10 * MiB)):777
make_sparse_image s3.img 5M
for f in s1 s2 s3; do
    convert_same $f.img out.img
    convert_same $f.img out.img -W
    ok "convert sparse $f ($(file_size $f.img) bytes), with and without -W"
done

# An existing target without -n is replaced, as by qemu-img convert.
make_random_image out.img 12M
expect_ok "$T" convert s1.img out.img
assert_same s1.img out.img "convert over an existing larger file"
map_json out.img out.map
extent_is out.map 2M 5M hole
ok "convert without -n replaces an existing larger target"

# --- holes are preserved ------------------------------------------------
make_sparse_image h.img 64M 0:64K 5M:1M 33M:200K 64M-64K:64K
for w in "" -W; do
    convert_same h.img h-out.img $w
    map_json h.img h.map
    map_json h-out.img h-out.map
    cmp -s h.map h-out.map || fail "target map differs from the source map:
$(diff h.map h-out.map)"
    extent_is h-out.map 64K 5M-64K hole
    extent_is h-out.map 6M 27M hole
    extent_is h-out.map 5M 1M data
    [ "$(allocated_bytes h-out.img)" -le \
      $(( $(allocated_bytes h.img) + 256 * 1024 )) ] ||
        fail "target allocates $(allocated_bytes h-out.img) bytes," \
             "source $(allocated_bytes h.img)"
    ok "convert ${w:+$w }keeps holes: same map as the source, same allocation"
done

# --- zero runs become holes (-S) ----------------------------------------
make_random_image z.img 6M
write_zeroes z.img 640K:256K 1200K:4K 3000K:1K 4M:512 5M:12K
truncate -s 8M z.img
for S in "" 4K 8K 64K 512; do
    for w in "" -W; do
        convert_same z.img z-out.img $w ${S:+-S $S}
        rm -f z-qemu.img
        qemu-img convert -f raw -O raw ${S:+-S $S} z.img z-qemu.img ||
            fail "qemu-img convert failed"
        map_json z-out.img z-out.map
        qemu-img map --output=json -f raw z-qemu.img >z-qemu.map
        cmp -s z-out.map z-qemu.map || fail "-S ${S:-default} $w: map" \
            "differs from qemu-img convert's target:
$(diff z-out.map z-qemu.map)"
    done
    ok "convert -S ${S:-4K (default)}: zero runs become holes like qemu-img"
done
convert_same z.img z-out.img
map_json z-out.img z-out.map
extent_is z-out.map 640K 256K hole
extent_is z-out.map 1200K 4K hole
extent_is z-out.map 3000K 1K data
extent_is z-out.map 4M 512 data
extent_is z-out.map 6M 2M hole
ok "convert: 4K and larger zero runs are holes, smaller ones data"

for src in z.img h.img; do
    for w in "" -W; do
        convert_same $src s0.img -S 0 $w
        map_json s0.img s0.map
        extent_is s0.map 0 "$(file_size $src)" data
        [ "$(allocated_bytes s0.img)" -ge "$(file_size $src)" ] ||
            fail "-S 0 target is not fully allocated"
    done
    ok "convert -S 0 fully allocates the target ($src)"
done

# --- -n: an existing target -----------------------------------------------
make_random_image big.img 12M
cp big.img big.orig
expect_ok "$T" convert -n s1.img big.img
cmp -n $((10 * MiB)) s1.img big.img || fail "-n: data not copied"
cmp -i $((10 * MiB)) big.img big.orig ||
    fail "-n: the tail beyond the source size was modified"
[ "$(file_size big.img)" = $((12 * MiB)) ] || fail "-n: target resized"
ok "convert -n into a larger target copies and leaves the tail untouched"

make_random_image small.img 4M
remember_sum small.img
expect_exit 2 "$T" convert -n s1.img small.img
stderr_one_line
stderr_has "'small.img'" smaller
assert_unchanged small.img
expect_exit 2 "$T" convert -n s1.img new.img
stderr_has "'new.img'"
assert_absent new.img
ok "convert -n: smaller or missing target refused, exit 2, nothing written"

# --- a source on tmpfs: copied from views of the file (raw-map.c) ---------
if ! shm_scratch; then
    ok "convert from a tmpfs source # SKIP no writable tmpfs at /dev/shm"
else
    make_sparse_image "$shm/v.img" $((10 * MiB + 4097)) 0:1M+1 3M-1:2 \
        4M:2M+512 $((10 * MiB)):4097
    convert_same "$shm/v.img" v-out.img
    convert_same "$shm/v.img" v-out.img -W --chunk-size 64K
    if command -v nbdkit >/dev/null && command -v nbdcopy >/dev/null; then
        rm -f v-nbd.img
        expect_ok nbdkit -U - memory "$(file_size "$shm/v.img")" --run "
            \"$T\" convert -n -W \"$shm/v.img\" \"\$uri\" &&
            nbdcopy \"\$uri\" v-nbd.img"
        assert_same "$shm/v.img" v-nbd.img "convert -n -W tmpfs -> nbdkit"
        ok "convert from a tmpfs source into a file and an nbdkit memory disk"
    else
        ok "convert from a tmpfs source into a file # SKIP no nbdkit/nbdcopy"
    fi
fi

# --- both ends on tmpfs: fused copies (block/io-copy.c) --------------------
# One pool job reads and writes each operation; one with zero blocks goes
# the ordinary way (they stay holes).  --target-opts copy-offload=off must
# give the same files.
if [ -n "$shm" ]; then
    make_sparse_image "$shm/f.img" $((6 * MiB + 4097)) 0:2M 3M-1:1M+2 \
        $((6 * MiB)):4097
    _lib_dd_range /dev/zero "$shm/f.img" 512K 64K      # zeroes inside data
    for opts in "" -W "-W --chunk-size 64K" "-W -S 0" "-W -m 1"; do
        # shellcheck disable=SC2086
        convert_same "$shm/f.img" "$shm/f-out.img" $opts
        # shellcheck disable=SC2086
        convert_same "$shm/f.img" "$shm/f-off.img" $opts \
            --target-opts copy-offload=off
        [ "$(allocated_bytes "$shm/f-out.img")" = \
          "$(allocated_bytes "$shm/f-off.img")" ] ||
            fail "convert $opts: fused copies allocate differently"
    done
    [ "$(allocated_bytes "$shm/f-out.img")" -lt $((3 * MiB)) ] ||
        fail "fused copies: the zero block inside the data was written"
    rm -f "$shm/f.qcow2" "$shm/f-back.img"
    expect_ok "$T" convert -W -O qcow2 "$shm/f.img" "$shm/f.qcow2"
    expect_ok timeout 60 qemu-img check -q "$shm/f.qcow2"
    expect_ok timeout 60 qemu-img compare -q "$shm/f.img" "$shm/f.qcow2"
    expect_ok "$T" convert -W -f qcow2 "$shm/f.qcow2" "$shm/f-back.img"
    # qcow2 rounds the size up to 512 bytes: the tail reads as zeroes.
    cmp -n "$(file_size "$shm/f.img")" "$shm/f.img" "$shm/f-back.img" ||
        fail "qcow2 -> raw on tmpfs: not the source's bytes"
    expect_ok timeout 60 qemu-img compare -q "$shm/f.img" "$shm/f-back.img"
    truncate -s 0 "$shm/f-mirror.img"
    truncate -s "$(file_size "$shm/f.img")" "$shm/f-mirror.img"
    expect_ok "$T" start "$shm/f.img" "$shm/f-mirror.img"
    assert_same "$shm/f.img" "$shm/f-mirror.img" "start on tmpfs"
    ok "tmpfs to tmpfs (fused copies): convert raw/qcow2 both ways, start"
fi

for opts in "" -W "-S 0" "-W --chunk-size 64K"; do
    make_random_image g.img 10M
    expect_ok "$T" convert -n $opts s1.img g.img
    assert_same s1.img g.img "-n $opts over garbage"
    map_json g.img g.map
    extent_is g.map 2M 5M "$([ "$opts" = "-S 0" ] && echo data || echo hole)"
    ok "convert -n ${opts:+$opts }zeroes stale data where the source has holes"
done

truncate -s 10M tz.img
expect_ok "$T" convert -n --target-is-zero s1.img tz.img
assert_same s1.img tz.img "--target-is-zero into a zero target"
[ "$(allocated_bytes tz.img)" -le $((1 * MiB)) ] ||
    fail "--target-is-zero: target allocated $(allocated_bytes tz.img) bytes"
ok "convert -n --target-is-zero into a zero target: correct and sparse"
make_random_image g.img 10M
cp g.img gq.img
expect_ok "$T" convert -n --target-is-zero s1.img g.img
qemu-img convert -n --target-is-zero -f raw -O raw s1.img gq.img ||
    fail "qemu-img convert --target-is-zero failed"
assert_same gq.img g.img "--target-is-zero over garbage vs qemu-img"
cmp -s s1.img g.img && fail "--target-is-zero still zeroed the holes"
ok "convert -n --target-is-zero skips zeroing, as qemu-img does"

# --- tuning knobs ---------------------------------------------------------
make_sparse_image k.img $((5 * MiB + 4097)) 60K:10K 1000K:100K 2M-1:2 \
    3M:1M+4097
knobs=("--chunk-size 64k --buf-size 256K" "-m 1" "-m 64"
       "--chunk-size 4K -m 3" "--chunk-size 64M" "-r 1G")
# cache=none needs O_DIRECT, which tmpfs lacks.
if dd if=/dev/zero of=direct.tst bs=4K count=1 oflag=direct status=none \
    2>/dev/null; then
    knobs+=("-t none -T none")
fi
for opts in "${knobs[@]}"; do
    convert_same k.img k-out.img $opts
    convert_same k.img k-out.img $opts -W
    ok "convert $opts (with and without -W) is byte-identical"
done

# --- progress -------------------------------------------------------------
expect_ok "$T" convert -p s1.img p.img
stdout_empty
stderr_has "100.0%"
tr '\r' '\n' <"$last_err" | tail -n1 |
    grep -q -E '^copied .+, zeroed .+, skipped .+ in [0-9.]+ s \(.+/s\)$' ||
    fail "-p: no summary line"
assert_same s1.img p.img
ok "convert -p draws a progress bar and a summary on stderr"
rm -f p.img
expect_ok "$T" convert -p -q s1.img p.img
stderr_empty
ok "convert -p -q prints nothing"

# --- I/O errors mid-copy --------------------------------------------------
# The null driver fails requests that touch error-offset.  A target this
# run created goes again; one that was there is named as incomplete.
for w in "" -W; do
    rm -f e.img
    expect_exit 1 "$T" convert $w \
        "null:size=8M,error-op=read,error-offset=5M" e.img
    [ "$(wc -l <"$last_err")" = 2 ] || fail "expected two lines on stderr"
    stderr_has "read error" "offset 5242880" \
        "the target 'e.img' is incomplete" \
        "removed the target 'e.img', which this command created"
    assert_absent e.img "a failed convert into a new target"
    ok "convert ${w:+$w }source read error at 5M: exit 1, offset, removed"
    make_random_image e.img 1M
    expect_exit 1 "$T" convert $w \
        "null:size=8M,error-op=read,error-offset=5M" e.img
    stderr_one_line
    stderr_has "read error" "offset 5242880" \
        "the target 'e.img' is incomplete"
    [ -e e.img ] || fail "an existing target was removed"
    ok "convert ${w:+$w }read error into an existing target: incomplete"
done
make_random_image d8.img 8M
for w in "" -W; do
    for off in 5M 7M; do
        tgt="null:size=8M,error-op=write,error-offset=$off"
        expect_exit 1 "$T" convert -n $w d8.img "$tgt"
        stderr_one_line
        stderr_has "write error" "offset $(to_bytes $off)" \
            "the target '$tgt' is incomplete"
    done
    ok "convert -n ${w:+$w }target write error at 5M/7M: exit 1, offset"
done

# --- SIGINT and SIGTERM ---------------------------------------------------
# A non-interactive bash starts background jobs with SIGINT ignored.
# `set -m` (job control) around the `&` gives the job default signal
# dispositions and its own process group, as a foreground job sees Ctrl-C.
# mirror-tool installs its handlers before creating the target, and the job
# starts after, so we wait for the target file and then for the first
# progress line (-p draws it from the main loop), when the handler is in
# place.  The source takes 50 ms per request, about 20 s for 1G: the signal
# always arrives mid-copy.  A watchdog kills the tool after 60 s.  wait
# reports 128+N also for a process the signal killed, so the message is what
# proves the orderly cancel.
interrupt_check()
{
    local sig=$1 code=$2 pid wd rc msg
    rm -f slow.img sig.err
    set -m
    "$T" convert -p "null:size=1G,latency-ns=50000000" slow.img \
        >/dev/null 2>sig.err &
    pid=$!
    ( sleep 60; kill -KILL "$pid" ) </dev/null >/dev/null 2>&1 &
    wd=$!
    set +m
    track_pid "$pid"
    track_pid "-$wd"
    wait_for 30 "the target to be created" test -e slow.img
    wait_for 30 "the first progress line" grep -q % sig.err
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    untrack_pid "$pid"
    kill -- "-$wd" 2>/dev/null
    wait "$wd" 2>/dev/null
    untrack_pid "-$wd"
    last_cmd="kill -$sig (mirror-tool convert -p null:size=1G,... slow.img)"
    last_rc=$rc
    cp sig.err "$last_err"
    [ "$rc" = "$code" ] || fail "SIG$sig: expected exit code $code"
    msg="mirror-tool: interrupted by SIG$sig;"
    stderr_has "$msg the target 'slow.img' is incomplete" \
        "removed the target 'slow.img', which this command created"
    assert_absent slow.img "SIG$sig during a convert into a new target"
    ok "convert stopped by SIG$sig: exit $code, the new target removed"
}
interrupt_check INT 130
interrupt_check TERM 143

# --- qemu-img interop -----------------------------------------------------
# Sizes are multiples of 512: qemu-img 7.2 rounds raw sizes up to 512.
make_random_image ra.img $((3 * MiB + 12288))
for f in s1 s3 h z ra; do
    rm -f $f.ours $f.qemu
    expect_ok "$T" convert -f raw -O raw $f.img $f.ours
    qemu-img convert -f raw -O raw $f.img $f.qemu || fail "qemu-img convert"
    run qemu-img compare -f raw -F raw $f.img $f.ours
    [ "$last_rc" = 0 ] || fail "qemu-img compare: $f.img and $f.ours differ"
    assert_same $f.img $f.ours "$f: ours vs source"
    assert_same $f.qemu $f.ours "$f: ours vs qemu-img convert"
    ok "convert $f.img: qemu-img compare equal, same bytes as qemu-img convert"
done

# --- -r: the rate limit -------------------------------------------------
# 6 MiB of data at 2 MiB/s: 3 s ideally; qemu-img convert -r 2M takes
# about 2 s (bursts).  Under 1.5 s (4 MiB/s) the limit was not applied.
# Last, because it is slow.
make_random_image rate.img 6M
for opts in "" "--chunk-size 64K" -W; do
    rm -f rate-out.img
    t0=${EPOCHREALTIME/./}
    expect_ok "$T" convert -r 2M $opts rate.img rate-out.img
    ms=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))
    assert_same rate.img rate-out.img
    [ "$ms" -ge 1500 ] ||
        fail "-r 2M${opts:+ $opts}: 6 MiB in $ms ms, faster than 2 MiB/s"
    ok "convert -r 2M ${opts:+$opts }keeps to the rate ($ms ms for 6 MiB)"
done

exit 0
