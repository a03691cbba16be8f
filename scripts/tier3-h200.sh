#!/usr/bin/env bash
# Tier 3 on an NVIDIA GPU: the kernel tests through the CUDA backend (PTX built
# from the same source), the self-test, compute-sanitizer, and the benchmarks.
#
# Build here (a machine with Rust) with scripts/tier3-pack.sh, which puts the
# binaries in .device/; run this script on the GPU machine from the repo root.
# Logs go to $OUT (or ./tier3-out).
set -uo pipefail
OUT=${OUT:-tier3-out}
mkdir -p "$OUT"
B=.device
export MLXCEL_AMDGPU_EXPECT_CUDA=1 RUST_BACKTRACE=1 MLXCEL_AMDGPU_CLI=$PWD/$B/mlxcel-amdgpu
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
status=0
run() { local name=$1; shift; echo "== $name: $*"; "$@" > "$OUT/$name.log" 2>&1; local rc=$?; tail -n 5 "$OUT/$name.log"; echo "rc=$rc"; [ $rc -eq 0 ] || status=1; }
# TEST_FILTER, if set, runs only the tests whose names contain it. TEST_THREADS
# (default 1) is each binary's --test-threads: the binaries hold the emulator's
# tests too, which take most of the time with one thread (add3_layer_norm alone
# 96 s on an H200).
for test in $(ls $B/test-* 2>/dev/null); do
    run "$(basename $test)" "$test" --test-threads=${TEST_THREADS:-1} ${TEST_FILTER:-}
done
MLXCEL_AMDGPU_BACKEND=cuda run selftest $B/mlxcel-amdgpu selftest
cat "$OUT/selftest.log"
# SANITIZE names test binaries to run under each compute-sanitizer tool;
# SANITIZE_FILTER, if set, runs only their tests whose names contain it (for
# example `edge_`, the reliability sweep's edge shapes); SANITIZE_TIMEOUT, if
# set, stops each of those runs after that many seconds (a failure);
# SANITIZE_JOBS, if set, runs that many of them at once on the one GPU (each
# run's log is printed when all have finished).
sanitize() {
    local tool=$1 test=$2
    run "sanitize-$tool-$test" ${SANITIZE_TIMEOUT:+timeout $SANITIZE_TIMEOUT} compute-sanitizer --tool $tool --error-exitcode 99 $B/test-$test --test-threads=1 ${SANITIZE_FILTER:-}
}
for tool in memcheck racecheck synccheck initcheck; do
    for test in ${SANITIZE:-}; do
        if [ -n "${SANITIZE_JOBS:-}" ]; then
            while [ "$(jobs -rp | wc -l)" -ge "$SANITIZE_JOBS" ]; do wait -n; done
            (sanitize $tool $test > "$OUT/summary-$tool-$test.txt"; echo "$status" > "$OUT/status-$tool-$test.txt") &
        else
            sanitize $tool $test
        fi
    done
done
if [ -n "${SANITIZE_JOBS:-}" ]; then
    wait
    for f in "$OUT"/summary-*.txt; do [ -e "$f" ] && cat "$f" && rm "$f"; done
    for f in "$OUT"/status-*.txt; do [ -e "$f" ] && { [ "$(cat "$f")" = 0 ] || status=1; rm "$f"; }; done
fi
[ -x $B/bench-kernels ] && MLXCEL_AMDGPU_BACKEND=cuda run bench $B/bench-kernels && cat "$OUT/bench.log"
# ARCHIVE, if set, replaces the logs with one archive, $OUT/logs.tar.xz (for a
# machine that returns only a few files from $OUT).
if [ -n "${ARCHIVE:-}" ]; then
    archive=$(mktemp) && tar -C "$OUT" -cJf "$archive" . && find "$OUT" -mindepth 1 -delete && mv "$archive" "$OUT/logs.tar.xz"
fi
exit $status
