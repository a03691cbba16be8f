#!/usr/bin/env bash
# The benchmark on an NVIDIA GPU, ours and every peer in one run, on the
# same GPU: our kernels and the yardsticks (copy, read_stream, the empty launch:
# benches/kernels.rs), the CUDA C++ reference mappings and PyTorch eager
# (benches/baselines/run.sh), mamba-ssm's scan built here from its sources and its
# Triton state update, torch.compile (benches/baselines/peers.py), MLX's CUDA backend
# graphs beside ours inside MLX (scripts/mlx-h200.sh's driver), and the host cost
# of a launch through the C ABI against a bare cuLaunchKernel (benches/launch_cost.c).
# Writes $OUT/bench.md and $OUT/bench.csv (benches/baselines/report.py) and the logs.
#
# Pack here with scripts/bench-h200-pack.sh; run from the repo root on the GPU
# machine with .device-bench and .device-mlx carried.
set -uo pipefail
OUT=${OUT:-bench-h200-out}
mkdir -p "$OUT"
B=.device-bench
[ -x $B/bench-kernels ] || { echo "no $B/bench-kernels: run scripts/bench-h200-pack.sh and carry .device-bench"; exit 1; }
status=0
step() { local name=$1; shift; echo "== $name: $*"; local t0=$SECONDS; "$@" > "$OUT/$name.log" 2>&1; local rc=$?;
         tail -n 3 "$OUT/$name.log"; echo "rc=$rc, $((SECONDS - t0)) s"; [ $rc -eq 0 ] || status=1; }
# The report is written however the run ends (a step that fails leaves its columns empty).
trap 'python3 benches/baselines/report.py "$OUT" > /dev/null && cat "$OUT/bench.md"' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"

# The MLX pack first: it holds the library (libmlxcel_amdgpu.so, --features cuda) the C program links.
step mlx env OUT="$OUT/mlx" bash scripts/mlx-h200.sh
cp "$OUT/mlx/mlx-h200.log" "$OUT/mlx.log" 2>/dev/null
W=/tmp/mlx-h200
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
T=$(mktemp -d)
printf 'extern "C" __global__ void empty() {}\n' > $T/empty.cu
nvcc -ptx -arch=sm_90 -o $T/empty.ptx $T/empty.cu &&
    gcc -O2 -o $T/launch_cost benches/launch_cost.c -Iinclude -I"$CUDA_HOME/include" -L$W/lib -lmlxcel_amdgpu \
        -L"$CUDA_HOME/lib64/stubs" -lcuda &&
    # 16384: BF16_WORKGROUP_MEM_BYTES of kernels-device/src/geometry.rs, the C ABI's bf16 launches.
    step launch_cost env LD_LIBRARY_PATH=$W/lib:${LD_LIBRARY_PATH:-} $T/launch_cost $T/empty.ptx $B/kernels_sm_80.ptx 16384 || status=1

step ours env MLXCEL_AMDGPU_BACKEND=cuda $B/bench-kernels --csv
step peers env PYTHONUNBUFFERED=1 MAMBA_SSM_SRC=$PWD/$B/mamba MAMBA_SSM_BUILD=$T/mamba-build python3 benches/baselines/peers.py
step baselines bash benches/baselines/run.sh
exit $status
