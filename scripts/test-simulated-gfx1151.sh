#!/usr/bin/env bash
# The test suite with its HIP cases on the simulated gfx1151: builds
# the stand-in libamdhip64 (hip-standin, over the rdna-sim interpreter), installs
# it as <prefix>/lib/libamdhip64.so, points ROCM_PATH at the prefix, and runs
# `cargo test` with MLXCEL_AMDGPU_EXPECT_HIP=1, so that a HIP case that cannot
# run fails instead of being skipped. hip.rs finds the stand-in exactly as it
# finds ROCm. Arguments go to `cargo test` (for example `--test xielu`).
#
# Loads' destination registers hold poison until their s_waitcnt
# (RDNA_SIM_STRICT_WAIT=1), so a missing wait in a shipped kernel is a wrong result.
# At the end it prints how many of the gfx1151 object's distinct mnemonics the
# launches executed, and which they never did.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build -p hip-standin -p rdna-sim
target_dir=$(realpath "${CARGO_TARGET_DIR:-target}")
prefix="$target_dir/rdna-sim-rocm"
mkdir -p "$prefix/lib"
cp "$target_dir/debug/libamdhip64_standin.so" "$prefix/lib/libamdhip64.so"

export ROCM_PATH="$prefix"
unset HIP_PATH
export RDNA_SIM_STRICT_WAIT=1
export MLXCEL_AMDGPU_EXPECT_HIP=1
# The self-test at the consumer's shapes on this device is the job of
# scripts/simulated-gfx1151-selftest.sh (a release build, about 3 minutes); the
# default-run test of tests/selftest.rs would run it again in the debug build
# (more than 5 minutes), so it is skipped here. The other self-test tests run.
# The kernel suites' CPU-emulator cases (`name::cpu...`, about 1.5 minutes) ran
# in the plain `cargo test` and do not touch the stand-in; this run is for the
# HIP cases and the tests that are not per backend.
skip=(--skip default_run_says_which_backend_ran_and_why_the_others_did_not --skip ::cpu)
coverage="$target_dir/rdna-sim-coverage.txt"
rm -f "$coverage"
export RDNA_SIM_COVERAGE="$coverage"
cargo test "$@" -- "${skip[@]}"

object=$(ls -t "$target_dir"/debug/build/mlxcel-amdgpu-*/out/gfx1151.hsaco | head -n 1)
"$target_dir/debug/rdna-sim-coverage" "$object" "$coverage"
