#!/usr/bin/env bash
# Nsight Compute profiles of the benchmarked kernels on an NVIDIA GPU host: one launch of each at
# its benchmark shape (bf16), with the sections that say what bounds it (speed of light,
# occupancy, warp stall reasons, memory); then the registers and spills of every kernel as ptxas
# allocates them for this GPU (ARCH, default sm_90). Pack with `cargo xtask gpu-pack tier3`.
source "$(dirname "$0")/common.sh"
need bench-kernels tier3
export MLXCEL_AMDGPU_BACKEND=cuda
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
# profile KERNEL GROUP SKIP: SKIP launches to skip (warm-up calls and earlier shapes of the group).
profile() {
    local kernel=$1 group=$2 skip=$3
    MLXCEL_AMDGPU_BENCH=$group step "ncu-$kernel" ncu $SECTIONS -k "regex:^${kernel}\$" -s "$skip" -c 1 "$PACK/bench-kernels"
}
profile xielu_bf16 xielu 3           # n = 2^26
profile add3_layer_norm_bf16 add3 3  # rows 8192, D 4096
profile mamba1_scan_bf16 mamba 216   # L = 1: 3 + 20 x 10 launches; L = 512: 3 + 10; then L = 2048
profile moe_fc1_relu2_bf16 moe 3     # 4-bit
profile moe_down_bf16 moe 3          # 4-bit
step ptxas ptxas -arch="${ARCH:-sm_90}" -v "$PACK/kernels_sm_80.ptx" -o /dev/null
finish
