#!/usr/bin/env bash
# The MLX shim on an NVIDIA GPU, inside MLX's CUDA backend (the mlx-cuda-13
# 0.32.4 wheel): builds shim/mlx with -DMLXCEL_AMDGPU_SHIM_CUDA=ON and the
# driver tests/cpp/mlx_driver.cpp against the carried MLX, then runs
# `mlxcel_amdgpu_mlx_driver gpu time`: every kernel through MLX's graph on the
# GPU stream, bit for bit against the C ABI called directly on the same inputs
# (cudaMalloc'd copies), within the contracts against MLX's own graphs, the
# refusals, then the timing table (our kernels in the MLX graph against MLX's
# graph of the same ops, both through eval).
#
# Pack on a machine with Rust and network with scripts/mlx-h200-pack.sh, then
# run this from the repo root on the GPU machine with .device-mlx carried.
# Logs go to $OUT (or ./mlx-h200-out).
set -uo pipefail
OUT=${OUT:-mlx-h200-out}
mkdir -p "$OUT"
PACK=.device-mlx/mlx-cuda-h200.tar.xz
[ -f $PACK ] || { echo "no $PACK: run scripts/mlx-h200-pack.sh and carry .device-mlx"; exit 1; }
W=/tmp/mlx-h200
rm -rf $W && mkdir -p $W && xz -dc $PACK | tar -C $W -xf - || exit 1
MLX=$W/site/mlx
# The CUDA libraries libmlx.so needs (cuBLAS, cuDNN, NVRTC, cuFFT, cuSOLVER,
# NCCL) come from PyTorch's CUDA 13 install; the headers MLX's JIT and the
# shim need from the toolkit beside nvcc.
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
NVLIBS=$(ls -d "$SITE"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="$W/lib:$MLX/lib:$NVLIBS${LD_LIBRARY_PATH:-}"
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
export MLXCEL_AMDGPU_EXPECT_CUDA=1
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nvcc --version | tail -n 1; cmake --version | head -n 1;
  c++ --version | head -n 1; echo "CUDA_HOME=$CUDA_HOME"; cat $W/libmlx.wheel.sha256; } | tee "$OUT/env.txt"
cmake -S shim/mlx -B $W/build -DMLX_ROOT=$MLX -DMLXCEL_AMDGPU_LIBRARY=$W/lib/libmlxcel_amdgpu.so \
    -DMLXCEL_AMDGPU_SHIM_CUDA=ON -DMLXCEL_AMDGPU_SHIM_DRIVER=ON -DCMAKE_BUILD_TYPE=Release \
    > "$OUT/build.log" 2>&1 && cmake --build $W/build -j "$(nproc)" >> "$OUT/build.log" 2>&1
rc=$?
tail -n 20 "$OUT/build.log"
[ $rc -eq 0 ] || { echo "build failed (rc=$rc), see $OUT/build.log"; exit 1; }
set -o pipefail
$W/build/mlxcel_amdgpu_mlx_driver gpu time 2>&1 | tee "$OUT/mlx-h200.log"
exit ${PIPESTATUS[0]}
