#!/usr/bin/env bash
# --state-file end to end: a convert and a start killed with SIGKILL once
# their state file records some known-good bytes resume, copy exactly the
# rest and leave a byte-identical target; a guest write through the
# export to a known-good granule, acknowledged just before the SIGKILL,
# is not lost by the resume (background and write-blocking); a state
# file of another pair, a corrupt one, one whose target is gone, zeroed or
# made anew, one that is not a regular file, or a switched-over record
# left by a crash while the target was served is refused with one line
# and exit 2, writing nothing; a clean exit after serving removes it.
# (That a guest's write is acknowledged only once the file says its
# granule is not good is checked at the acknowledgement itself by
# test-mirror-state's job/guest-write; here the SIGKILL follows qemu-io's
# exit.)
#
# Waits are on the state file's contents and process exits.
#
# Copyright (C) 2026 qemu-mirror authors
# SPDX-License-Identifier: GPL-2.0-or-later

. "${TEST_LIB:-$(dirname "$0")/lib.sh}"
requires timeout cmp od qemu-io mkfifo

TMO="timeout 120"

# known_good FILE: the known-good bytes a state file's header records
# (docs/mirror-tool.md, "State file format": offset 64, u64 LE).
known_good()
{
    od -A n -t u8 -j 64 -N 8 "$1" 2>/dev/null | tr -d ' '
}

# has_known_good FILE MIN: the state file records at least MIN bytes.
has_known_good()
{
    local k
    k=$(known_good "$1")
    [ -n "$k" ] && [ "$k" -ge "$2" ]
}

# kill_when_good PID FILE MIN: SIGKILL PID once FILE records MIN bytes.
kill_when_good()
{
    wait_for 60 "the state file to record $3 bytes" has_known_good "$2" "$3"
    kill -KILL "$1"
    wait "$1" 2>/dev/null
    untrack_pid "$1"
}

SIZE=$((96 * 1024 * 1024))
make_random_image src.raw 96M

# ---- convert: kill, resume, cmp ----
"$T" convert -r 24M --state-file st src.raw out.raw 2>conv.err &
pid=$!
track_pid $pid
kill_when_good $pid st $((16 * 1024 * 1024))
k=$(known_good st)
[ -f out.raw ] || fail "the killed convert left no target"
expect_ok $TMO "$T" convert --state-file st src.raw out.raw
stderr_has "mirror-tool: resuming from 'st': $k of $SIZE bytes known good"
cmp -s src.raw out.raw || fail "convert: resumed target differs"
[ ! -e st ] || fail "convert: the completed run left its state file"
ok "convert killed at $k known-good bytes resumes; target identical"

# -q: no resume line.
"$T" convert -r 24M --state-file st src.raw out2.raw 2>/dev/null &
pid=$!
track_pid $pid
kill_when_good $pid st 1
expect_ok $TMO "$T" convert -q --state-file st src.raw out2.raw
stderr_empty
cmp -s src.raw out2.raw || fail "convert -q: resumed target differs"
ok "convert -q resumes without a word"

# ---- start: kill, resume; the rerun copies exactly the rest ----
truncate -s 96M dst.raw
"$T" start --speed 24M --state-file st src.raw dst.raw >/dev/null 2>&1 &
pid=$!
track_pid $pid
kill_when_good $pid st $((16 * 1024 * 1024))
k=$(known_good st)
expect_ok $TMO "$T" start --json --state-file st src.raw dst.raw
stderr_empty
grep -q "\"bytes-copied\": $((SIZE - k))," "$last_out" ||
    fail "start: the resumed run did not copy $((SIZE - k)) bytes"
grep -q "\"known-good-bytes\": $SIZE" "$last_out" ||
    fail "start: known-good-bytes is not the size"
cmp -s src.raw dst.raw || fail "start: resumed target differs"
[ ! -e st ] || fail "start: the completed run left its state file"
ok "start resumes copying $((SIZE - k)) of $SIZE bytes; target identical"

# query-block-jobs: known-good-bytes, at least what the file records.
rm -f st
"$T" start --speed 24M --qmp "$scratch/q.sock" --state-file st src.raw \
    dst.raw >/dev/null 2>&1 &
pid=$!
track_pid $pid
wait_for 60 "the state file to record 1M" has_known_good st $((1024 * 1024))
k=$(known_good st)
expect_ok $TMO "$T" qmp "$scratch/q.sock" query-block-jobs
kq=$(sed -n 's/.*"known-good-bytes":\([0-9]*\).*/\1/p' "$last_out")
[ -n "$kq" ] && [ "$kq" -ge "$k" ] ||
    fail "query-block-jobs: known-good-bytes '$kq' below the file's $k"
expect_ok $TMO "$T" qmp "$scratch/q.sock" quit
wait $pid 2>/dev/null
untrack_pid $pid
[ -s st ] || fail "a quit (cancel) removed the state file"
ok "query-block-jobs has known-good-bytes; a cancelled job keeps its file"
rm -f st

# ---- refusals: one line, exit 2, nothing written ----
"$T" convert -r 24M --state-file st src.raw out3.raw 2>/dev/null &
pid=$!
track_pid $pid
kill_when_good $pid st 1
cp st st.orig
truncate -s 96M other.raw
sum_other=$(md5sum <other.raw)
expect_exit 2 "$T" start --state-file st src.raw other.raw
stderr_one_line
stderr_has "--state-file 'st': the target differs"
cmp -s st st.orig || fail "a refused state file was changed"
[ "$(md5sum <other.raw)" = "$sum_other" ] || fail "refused: target written"
expect_exit 2 "$T" start --granularity 4K --state-file st src.raw out3.raw
stderr_one_line
stderr_has "the granularity differs"
expect_exit 2 "$T" start --sync top --state-file st src.raw out3.raw
stderr_has "the sync mode differs"
ok "a state file of another target, granularity or sync mode is refused"

# Every truncation and a flipped byte: refused, never trusted.
for len in 0 1 8 71 72 $(( $(stat -c %s st.orig) - 1 )); do
    head -c "$len" st.orig >st
    sum=$(md5sum <out3.raw)
    expect_exit 2 "$T" convert --state-file st src.raw out3.raw
    stderr_one_line
    stderr_has "--state-file 'st': "
    [ "$(md5sum <out3.raw)" = "$sum" ] || fail "truncated: target written"
done
cp st.orig st
printf '\x5a' | dd of=st bs=1 seek=90 conv=notrunc status=none
expect_exit 2 "$T" convert --state-file st src.raw out3.raw
stderr_one_line
stderr_has "checksum"
ok "a truncated or corrupt state file is refused; nothing written"

cp st.orig st
mv out3.raw gone.raw
expect_exit 2 "$T" convert --state-file st src.raw out3.raw
stderr_one_line
[ ! -e out3.raw ] || fail "convert re-created the target of a state file"
mv gone.raw out3.raw
cp out3.raw copy.raw
rm out3.raw
mv copy.raw out3.raw        # the same name, another file (inode)
expect_exit 2 "$T" convert --state-file st src.raw out3.raw
stderr_has "the target differs"
ok "convert refuses a state file whose target is missing or another file"

# A target made again under the same name: removed and re-created (birth
# time, else the spot check), or zeroed over the same inode by
# `qemu-img create` or truncate (the spot check of known-good granules).
rm -f st
"$T" convert -r 24M --state-file st src.raw out4.raw 2>/dev/null &
pid=$!
track_pid $pid
kill_when_good $pid st $((4 * 1024 * 1024))
cp st st.orig
# refused_remade MSG: the rerun is refused, nothing written.
refused_remade()
{
    local sum
    sum=$(md5sum <out4.raw)
    expect_exit 2 "$T" convert --state-file st src.raw out4.raw
    stderr_one_line
    stderr_has "$1"
    [ "$(md5sum <out4.raw)" = "$sum" ] || fail "made again: target written"
    cmp -s st st.orig || fail "made again: the state file was changed"
}
qemu-img create -q -f raw out4.raw 96M
refused_remade "mirror-tool: state file 'st': the target differs from the \
source in a granule it calls known good (offset "
refused_remade "; the target changed since: delete the state file to copy"
truncate -s 0 out4.raw
truncate -s 96M out4.raw
refused_remade "calls known good"
rm out4.raw
truncate -s 96M out4.raw
refused_remade "mirror-tool: "
grep -q "the target differs" "$last_err" ||
    fail "rm + truncate: not refused as another target"
ok "a target zeroed or made anew under its name is refused; nothing written"
rm -f st st.orig out4.raw

expect_exit 2 "$T" convert --state-file src.raw src.raw new.raw
stderr_one_line
stderr_has "--state-file 'src.raw': is the source image"
expect_exit 2 "$T" start --state-file dst.raw src.raw dst.raw
stderr_one_line
stderr_has "--state-file 'dst.raw': is the job's target image"
expect_exit 2 "$T" convert --state-file nodir/st src.raw new.raw
stderr_one_line
stderr_has "--state-file 'nodir/st': cannot create it"
[ ! -e new.raw ] || fail "convert created its target for a bad state file"
ok "a state file that is an image of the job or cannot be made is refused"

# Not a regular file: refused at once (a FIFO's read would block forever).
mkfifo fifo.st
sum=$(md5sum <dst.raw)
for st_path in fifo.st /dev/null .; do
    expect_exit 2 timeout 30 "$T" convert --state-file "$st_path" src.raw \
        new.raw
    stderr_one_line
    stderr_has "mirror-tool: --state-file '$st_path': not a regular file"
    [ ! -e new.raw ] || fail "convert created its target for '$st_path'"
    expect_exit 2 timeout 30 "$T" start --state-file "$st_path" src.raw \
        dst.raw
    stderr_one_line
    stderr_has "mirror-tool: --state-file '$st_path': not a regular file"
    [ "$(md5sum <dst.raw)" = "$sum" ] || fail "'$st_path': target written"
done
[ -p fifo.st ] || fail "the FIFO was replaced"
rm -f fifo.st
ok "a state file that is a FIFO, a device or a directory is refused"

# ---- guest writes through the export, acknowledged before SIGKILL ----
for mode in background write-blocking; do
    rm -f st st.tmp
    truncate -s 0 dst.raw
    truncate -s 96M dst.raw
    cp src.raw live.raw
    "$T" start --speed 24M --copy-mode "$mode" --state-file st \
        --export "unix:$scratch/exp.sock" live.raw dst.raw \
        >live.out 2>live.err &
    pid=$!
    track_pid $pid
    wait_for 60 "the state file to record 16M" has_known_good st \
        $((16 * 1024 * 1024))
    # [0, 1M) is known good on disk: the write must make it not so
    # before qemu-io hears back.
    $TMO qemu-io -f raw -c "write -P 0xab 4096 1M" -c "write -P 0xcd 0 512" \
        "nbd+unix:///?socket=$scratch/exp.sock" >qio.out 2>&1 ||
        fail "$mode: qemu-io failed: $(cat qio.out)"
    kill -KILL $pid
    wait $pid 2>/dev/null
    untrack_pid $pid
    expect_ok $TMO "$T" start --state-file st live.raw dst.raw
    stderr_has "resuming from 'st'"
    cmp -s live.raw dst.raw ||
        fail "$mode: the resumed target misses guest writes"
    ok "$mode: guest writes acknowledged before SIGKILL are in the resumed copy"
done

# ---- a crash after the switch-over: the rerun refuses ----
# switched_over: start --export --qmp with st, READY, block-job-complete;
# returns once the export serves the target (pid in $pid).
switched_over()
{
    rm -f st st.tmp "$scratch/q.sock"
    truncate -s 0 dst.raw
    truncate -s 96M dst.raw
    # --qmp-wait: the job starts with the client that waits for READY,
    # which it could otherwise reach before that client connects.
    "$T" start --state-file st --export "unix:$scratch/exp.sock" \
        --qmp "$scratch/q.sock" --qmp-wait src.raw dst.raw >sw.out 2>sw.err &
    pid=$!
    track_pid $pid
    wait_for 30 "start to listen on QMP" test -S "$scratch/q.sock"
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_READY --timeout 100 \
        "$scratch/q.sock" query-jobs
    expect_ok $TMO "$T" qmp --wait-event BLOCK_JOB_COMPLETED --timeout 100 \
        "$scratch/q.sock" block-job-complete '{"device": "mirror"}'
    grep -q '"error"' "$last_out" && fail "the job completed with an error"
    wait_for 30 "the export to serve the target" \
        grep -q 'serving the target' sw.err
}

switched_over
[ -s st ] || fail "switched over: no state file while the target is served"
$TMO qemu-io -f raw -c "write -P 0xee 0 64k" \
    "nbd+unix:///?socket=$scratch/exp.sock" >qio.out 2>&1 ||
    fail "switched over: qemu-io failed: $(cat qio.out)"
kill -KILL $pid
wait $pid 2>/dev/null
untrack_pid $pid
cp st st.orig
sum=$(md5sum <dst.raw)
expect_exit 2 $TMO "$T" start --state-file st \
    --export "unix:$scratch/exp.sock" --qmp "$scratch/q.sock" src.raw dst.raw
stderr_one_line
stderr_has "mirror-tool: state file 'st': the job completed and the target \
took over at "
stderr_has "; the source is stale: delete the state file to copy again"
[ "$(md5sum <dst.raw)" = "$sum" ] || fail "switched over: target written"
cmp -s st st.orig || fail "switched over: the state file was changed"
[ "$(head -c 65536 dst.raw | tr -d '\356' | wc -c)" = 0 ] ||
    fail "switched over: the guest's write is gone"
expect_exit 2 "$T" convert --state-file st src.raw dst.raw
stderr_has "the job completed and the target took over"
ok "killed after the switch-over: the rerun refuses; the guest's write stays"

# A clean exit after serving (QMP quit, SIGTERM) removes the file.
switched_over
expect_ok $TMO "$T" qmp "$scratch/q.sock" quit
wait $pid
rc=$?
untrack_pid $pid
[ "$rc" = 0 ] || fail "quit after the switch-over: exit code $rc"
[ ! -e st ] || fail "quit after the switch-over: the state file stays"
switched_over
kill -TERM $pid
wait $pid
rc=$?
untrack_pid $pid
[ "$rc" = 0 ] || fail "SIGTERM after the switch-over: exit code $rc"
[ ! -e st ] || fail "SIGTERM after the switch-over: the state file stays"
cmp -s src.raw dst.raw || fail "switched over: the target differs"
ok "a clean exit after serving the target removes the state file"
rm -f st.orig
