#!/usr/bin/env bash
# The MLX shim on an NVIDIA GPU host, inside MLX's CUDA backend (the mlx-cuda-13 0.32.4 wheel):
# builds shim/mlx with -DMLXCEL_AMDGPU_SHIM_CUDA=ON and the driver tests/cpp/mlx_driver.cpp
# against the packed MLX, then runs `mlxcel_amdgpu_mlx_driver gpu time`: every kernel through
# MLX's graph on the GPU stream, bit for bit against the C ABI called directly on the same inputs,
# within the contracts against MLX's own graphs, the refusals, then the timing tables (our kernels
# in the MLX graph against MLX's graph of the same ops, both through eval; the last one Qwen3-30B-A3B's
# whole MoE block, router and experts, at 1 to 8 tokens and 4 and 8 bits, per eval and amortized
# over 16 blocks, with the graph primitives per block). Then `mlxcel_amdgpu_mlx_driver gpu launches`,
# its own process: the GPU kernels one eval of one block launches, ours and MLX's graph, counted by
# CUPTI (libcupti.so.13 from the nvidia-cuda-cupti wheel under $SITE/nvidia, opened at run time;
# without it the table says the counts are unavailable). The outputs are $OUT/driver.log and
# $OUT/launches.log. Pack with `cargo xtask gpu-pack mlx`. The host needs nvcc, CMake, g++ and
# the CUDA 13 libraries libmlx.so links (cuBLAS, cuDNN, NVRTC, cuFFT, cuSOLVER, NCCL; PyTorch's
# CUDA 13 install has them).
source "$(dirname "$0")/common.sh"
need mlx-cuda.tar.xz mlx
rm -rf "$MLX_WORK" && mkdir -p "$MLX_WORK" && xz -dc "$PACK/mlx-cuda.tar.xz" | tar -C "$MLX_WORK" -xf - || exit 1
MLX=$MLX_WORK/site/mlx
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
NVLIBS=$(ls -d "$SITE"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$MLX_WORK/lib:$MLX/lib:$NVLIBS${LD_LIBRARY_PATH:-}"
# The headers MLX's JIT and the shim need come from the toolkit beside nvcc.
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
export MLXCEL_AMDGPU_EXPECT_CUDA=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -n 1; cmake --version | head -n 1
  c++ --version | head -n 1; echo "CUDA_HOME=$CUDA_HOME"; cat "$MLX_WORK/libmlx.wheel.sha256"; } | tee "$OUT/env.txt"
STEP_TAIL=20 step build bash -c "cmake -S shim/mlx -B '$MLX_WORK/build' -DMLX_ROOT='$MLX' \
    -DMLXCEL_AMDGPU_LIBRARY='$MLX_WORK/lib/libmlxcel_amdgpu.so' -DMLXCEL_AMDGPU_SHIM_CUDA=ON \
    -DMLXCEL_AMDGPU_SHIM_DRIVER=ON -DCMAKE_BUILD_TYPE=Release && cmake --build '$MLX_WORK/build' -j \$(nproc)"
[ $status -eq 0 ] || { echo "build failed, see $OUT/build.log"; finish; }
"$MLX_WORK/build/mlxcel_amdgpu_mlx_driver" gpu time 2>&1 | tee "$OUT/driver.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
"$MLX_WORK/build/mlxcel_amdgpu_mlx_driver" gpu launches 2>&1 | tee "$OUT/launches.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
finish
