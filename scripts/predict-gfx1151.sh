#!/usr/bin/env bash
# The gfx1151 prediction: runs benches/gfx1151_model.rs (release) on the
# simulated gfx1151 (the stand-in libamdhip64 over rdna-sim, as in
# scripts/test-simulated-gfx1151.sh) with RDNA_SIM_COUNTS collecting each
# launch's executed wave-instructions and its loads' bytes in flight, and prints
# the predicted times (a model: nothing here runs on AMD hardware).
# About 5-10 minutes here (the interpreter runs every launch).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p hip-standin
target_dir=$(realpath "${CARGO_TARGET_DIR:-target}")
prefix="$target_dir/rdna-sim-rocm-release"
mkdir -p "$prefix/lib"
cp "$target_dir/release/libamdhip64_standin.so" "$prefix/lib/libamdhip64.so"
export ROCM_PATH="$prefix" MLXCEL_AMDGPU_BACKEND=hip RDNA_SIM_STRICT_WAIT=1
unset HIP_PATH
export RDNA_SIM_COUNTS="$target_dir/gfx1151-model-counts.tsv"
rm -f "$RDNA_SIM_COUNTS"
cargo bench --bench gfx1151_model
