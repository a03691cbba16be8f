#!/usr/bin/env bash
# Tier 3 on an NVIDIA GPU host: every packed test binary through the CUDA backend (PTX built from
# the same source; each binary runs the CPU emulator's cases beside the GPU's) with
# MLXCEL_AMDGPU_EXPECT_CUDA=1, so that a missing device fails; the self-test on CUDA;
# compute-sanitizer; the benchmarks. Pack with `cargo xtask gpu-pack tier3`.
#
#   TEST_FILTER      run only the tests whose names contain it
#   TEST_THREADS     each binary's --test-threads (default 1; the emulator's cases take most of
#                    the time with one thread)
#   SANITIZE         test binaries (xielu add3_layer_norm mamba1_scan moe ...) to run under each of
#                    memcheck, racecheck, synccheck and initcheck
#   SANITIZE_FILTER  run only their tests whose names contain it (for example `edge_`)
#   SANITIZE_TIMEOUT stop each sanitizer run after that many seconds (a failure)
#   SANITIZE_JOBS    run that many sanitizer runs at once on the one GPU
source "$(dirname "$0")/common.sh"
need mlxcel-amdgpu tier3
export MLXCEL_AMDGPU_EXPECT_CUDA=1 RUST_BACKTRACE=1 MLXCEL_AMDGPU_CLI=$PACK/mlxcel-amdgpu
gpu_info
for test in "$PACK"/test-*; do
    [ -e "$test" ] || continue
    step "$(basename "$test")" "$test" --test-threads="${TEST_THREADS:-1}" ${TEST_FILTER:-}
done
MLXCEL_AMDGPU_BACKEND=cuda step selftest "$PACK/mlxcel-amdgpu" selftest
cat "$OUT/selftest.log"

sanitize() {
    local tool=$1 test=$2
    step "sanitize-$tool-$test" ${SANITIZE_TIMEOUT:+timeout $SANITIZE_TIMEOUT} compute-sanitizer --tool "$tool" \
        --error-exitcode 99 "$PACK/test-$test" --test-threads=1 ${SANITIZE_FILTER:-}
}
for tool in memcheck racecheck synccheck initcheck; do
    for test in ${SANITIZE:-}; do
        if [ -n "${SANITIZE_JOBS:-}" ]; then
            while [ "$(jobs -rp | wc -l)" -ge "$SANITIZE_JOBS" ]; do wait -n; done
            # In a subshell $status does not come back: each run leaves it in a file.
            (sanitize $tool $test >"$OUT/summary-$tool-$test.txt"; echo "$status" >"$OUT/status-$tool-$test.txt") &
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
if [ -x "$PACK/bench-kernels" ]; then
    MLXCEL_AMDGPU_BACKEND=cuda step bench "$PACK/bench-kernels"
    cat "$OUT/bench.log"
fi
finish
