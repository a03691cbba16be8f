#!/usr/bin/env bash
# Ours and every peer in one process on an NVIDIA GPU host: our kernels and the yardsticks (copy,
# read_stream, the empty launch: benches/kernels.rs); the CUDA C++ reference mappings and PyTorch
# eager (benches/baselines/run.sh); mamba-ssm's scan built here from its sources and its Triton
# state update, and torch.compile (benches/baselines/peers.py); MLX's graphs beside ours inside MLX
# (scripts/gpu-host/mlx.sh); the host cost of a launch through the C ABI against a bare
# cuLaunchKernel (benches/launch_cost.c). Writes $OUT/bench.md and $OUT/bench.csv
# (benches/baselines/report.py) and the logs. Pack with `cargo xtask gpu-pack bench`. The host
# needs nvcc, gcc, and python3 with torch and Triton.
source "$(dirname "$0")/common.sh"
need bench-kernels bench
need mamba/COMMIT bench
STEP_TAIL=3
# The report is written however the run ends (a step that fails leaves its columns empty).
trap 'python3 benches/baselines/report.py "$OUT" >/dev/null && cat "$OUT/bench.md"' EXIT
gpu_info

# The MLX step first: it unpacks the library (libmlxcel_amdgpu.so, --features cuda) that the C
# program below links.
step mlx env OUT="$OUT/mlx" ARCHIVE= bash scripts/gpu-host/mlx.sh
cat "$OUT/mlx/driver.log" "$OUT/mlx/launches.log" >"$OUT/mlx.log" 2>/dev/null
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
T=$(mktemp -d)
printf 'extern "C" __global__ void empty() {}\n' >"$T/empty.cu"
if nvcc -ptx -arch=sm_90 -o "$T/empty.ptx" "$T/empty.cu" &&
    gcc -O2 -o "$T/launch_cost" benches/launch_cost.c -Iinclude -I"$CUDA_HOME/include" -L"$MLX_WORK/lib" \
        -lmlxcel_amdgpu -L"$CUDA_HOME/lib64/stubs" -lcuda; then
    # 16384: BF16_WORKGROUP_MEM_BYTES of kernels-device/src/geometry.rs, the C ABI's bf16 launches.
    step launch_cost env LD_LIBRARY_PATH="$MLX_WORK/lib:${LD_LIBRARY_PATH:-}" "$T/launch_cost" "$T/empty.ptx" \
        "$PACK/kernels_sm_80.ptx" 16384
else
    status=1
fi
step ours env MLXCEL_AMDGPU_BACKEND=cuda "$PACK/bench-kernels" --csv
step peers env PYTHONUNBUFFERED=1 MAMBA_SSM_SRC="$PACK/mamba" MAMBA_SSM_BUILD="$T/mamba-build" \
    python3 benches/baselines/peers.py
step baselines bash benches/baselines/run.sh
trap - EXIT
python3 benches/baselines/report.py "$OUT" >/dev/null && cat "$OUT/bench.md"
finish
