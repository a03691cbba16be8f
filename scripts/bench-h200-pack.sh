#!/usr/bin/env bash
# Packs what scripts/bench-h200.sh needs on the GPU machine (no Rust, no network)
# into .device-bench/ (git-ignored), and refreshes .device-mlx/ (scripts/mlx-h200-pack.sh):
#
#   .device-bench/bench-kernels     our benchmarks, release, --features cuda
#   .device-bench/kernels_sm_80.ptx the PTX the library embeds
#   .device-bench/mamba/            the parts of mamba-ssm's public sources the peers need
#                                   (csrc/selective_scan, the Triton selective_state_update and
#                                   its softplus), at the commit below, from a clone of
#                                   https://github.com/state-spaces/mamba (MAMBA_GIT_DIR: an
#                                   existing clone's git directory instead of cloning)
#
# Copy both to the GPU host beside a checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
MAMBA_COMMIT=e9594ce1c732d97440f0332fdc43170a2294dbfa
rm -rf .device-bench && mkdir -p .device-bench
exe=$(cargo bench --features cuda --bench kernels --no-run --message-format=json 2>/dev/null |
    python3 -c 'import sys, json
for l in sys.stdin:
    try: m = json.loads(l)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "kernels": print(m["executable"])' | tail -n 1)
cp "$exe" .device-bench/bench-kernels && strip .device-bench/bench-kernels
# The PTX the library embeds, for benches/launch_cost.c's by-hand launch of the same kernel.
cp "$(ls -t target/release/build/mlxcel-amdgpu-*/out/kernels_sm_80.ptx | head -n 1)" .device-bench/kernels_sm_80.ptx
git_dir=${MAMBA_GIT_DIR:-}
if [ -z "$git_dir" ]; then
    git_dir=$(mktemp -d)/mamba.git
    git clone -q --bare --filter=blob:none https://github.com/state-spaces/mamba "$git_dir"
fi
mkdir -p .device-bench/mamba
git --git-dir="$git_dir" archive "$MAMBA_COMMIT" csrc/selective_scan \
    mamba_ssm/ops/triton/selective_state_update.py mamba_ssm/ops/triton/softplus.py |
    tar -C .device-bench/mamba -xf -
echo "$MAMBA_COMMIT" > .device-bench/mamba/COMMIT
bash scripts/mlx-h200-pack.sh
du -sh .device-bench .device-mlx
