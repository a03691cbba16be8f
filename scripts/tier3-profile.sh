#!/usr/bin/env bash
# Nsight Compute profiles of the benchmarked kernels on an NVIDIA GPU: one
# launch of each at its benchmark shape (bf16), with the sections that say what
# bounds it (speed of light, occupancy, warp stall reasons, memory).
#
# Build here with scripts/tier3-pack.sh; run this on the GPU machine from the
# repo root. Reports go to $OUT/ncu-<kernel>.txt (or ./tier3-out).
set -uo pipefail
OUT=${OUT:-tier3-out}
mkdir -p "$OUT"
export MLXCEL_AMDGPU_BACKEND=cuda
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
# kernel, bench group, launches to skip (warm-up calls and earlier shapes of the group)
profile() {
    local kernel=$1 group=$2 skip=$3
    MLXCEL_AMDGPU_BENCH=$group ncu $SECTIONS -k "regex:^${kernel}\$" -s "$skip" -c 1 .device/bench-kernels > "$OUT/ncu-$kernel.txt" 2>&1
    echo "ncu $kernel: rc=$? ($(grep -c 'Section:' "$OUT/ncu-$kernel.txt") sections)"
}
profile xielu_bf16 xielu 3                # n = 2^26
profile add3_layer_norm_bf16 add3 3       # rows 8192, D 4096
profile mamba1_scan_bf16 mamba 216        # L = 1: 3 + 20 x 10 launches; L = 512: 3 + 10; then L = 2048
profile moe_fc1_relu2_bf16 moe 3          # 4-bit
profile moe_down_bf16 moe 3               # 4-bit
# Registers and spills per kernel, as ptxas allocates them for this GPU.
ARCH=${ARCH:-sm_90}
ptxas -arch=$ARCH -v .device/kernels_sm_80.ptx -o /dev/null > "$OUT/ptxas.txt" 2>&1
echo "ptxas: rc=$?"
