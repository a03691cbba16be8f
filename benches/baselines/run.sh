#!/usr/bin/env bash
# Baselines for the Mamba1 scan and the quantized MoE GEMVs (docs/contracts.md, sections 5 and 6) on an NVIDIA
# GPU: straightforward CUDA C++ kernels (mamba1_scan.cu, moe_gemv.cu) and PyTorch eager
# (torch_baselines.py); and add3_layer_norm's byte-mix yardstick (stream_yardstick.cu). Needs
# nvcc, a GPU and python3 with torch. Everything goes to stdout (the correctness checks' lines
# too); the result lines start with "baseline" (plus one "copy GBps=" line and the yardstick's
# "yardstick" lines). Exits non-zero on any failure (build, run or check).
#
#   bash benches/baselines/run.sh
set -euo pipefail
exec 2>&1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ARCH=${ARCH:-sm_90}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader || true
nvcc --version | tail -n 2

nvcc -O3 -arch=$ARCH -o "$TMP/mamba1_scan" "$HERE/mamba1_scan.cu"
nvcc -O3 -arch=$ARCH -o "$TMP/moe_gemv" "$HERE/moe_gemv.cu"
nvcc -O3 -arch=$ARCH -o "$TMP/stream_yardstick" "$HERE/stream_yardstick.cu"

"$TMP/mamba1_scan"
"$TMP/moe_gemv"
"$TMP/stream_yardstick"
PYTHONUNBUFFERED=1 python3 "$HERE/torch_baselines.py"
