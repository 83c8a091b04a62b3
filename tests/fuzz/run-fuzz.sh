#!/bin/bash
# Run a libFuzzer target over a copy of a seed corpus for a while.
#   run-fuzz.sh FUZZER CORPUS ARTIFACT_DIR [libFuzzer options...]
# FUZZ_TIME (seconds, default 60) bounds the run.  Exit 0 when nothing was
# found; otherwise libFuzzer's status, with the reproducer in ARTIFACT_DIR.
# A crash exits 1, not libFuzzer's default 77, which meson counts as a
# skip.
set -euo pipefail
fuzzer=$1 corpus=$2 artifacts=$3
shift 3
shm=/dev/shm
[ -d $shm ] || shm=${TMPDIR:-/tmp}
work=$(mktemp -d "$shm/run-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$corpus" "$work/corpus"
# The target's scratch directory too, so that it goes even after a crash.
export FUZZ_TMPDIR=$work
mkdir -p "$artifacts"
# ASan aborts are libFuzzer crashes; leaks are checked per input.
export ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=1
status=0
"$fuzzer" -max_total_time="${FUZZ_TIME:-60}" -timeout=10 \
    -rss_limit_mb=2048 -malloc_limit_mb=256 -max_len=262144 \
    -error_exitcode=1 -artifact_prefix="$artifacts/" -print_final_stats=1 \
    "$@" "$work/corpus" || status=$?
exit $status
