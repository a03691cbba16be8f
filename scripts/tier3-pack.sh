#!/usr/bin/env bash
# Builds the release test binaries, the CLI and the benchmarks with the `cuda`
# feature and copies the ones named (default: all kernel tests) into .device/
# (git-ignored), stripped, for scripts/tier3-h200.sh on the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .device && mkdir -p .device
list() { python3 -c '
import sys, json
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        kind = m["target"]["kind"][0]
        if kind == "bin" and m["profile"]["test"]:
            kind = "bin-unit-tests"
        print(kind, m["target"]["name"], m["executable"])'; }
{ cargo test --release --features cuda --no-run --message-format=json; cargo build --release --features cuda --bins --message-format=json; cargo bench --features cuda --no-run --message-format=json; } 2>/dev/null | list |
while read -r kind name exe; do
    case "$kind:$name" in
        bin:mlxcel-amdgpu) cp "$exe" .device/mlxcel-amdgpu ;;
        bench:*) cp "$exe" ".device/bench-$name" ;;
        test:c_header|test:disassembly|test:wavefront_assertion|test:c_abi_consumer|test:num|test:cli|test:hip_rs|test:hip_rs_launchers|test:hip_faults) ;;  # need Rust, a C++ compiler, the CLI or the stand-in cdylib: CPU-only tests
        test:*) cp "$exe" ".device/test-$name" ;;
    esac
done
strip .device/* 2>/dev/null || true
# The PTX the binaries embed, for `ptxas -v` (registers, spills) on the GPU machine.
cp "$(ls -t target/release/build/mlxcel-amdgpu-*/out/kernels_sm_80.ptx | head -n 1)" .device/kernels_sm_80.ptx
ls -la .device
