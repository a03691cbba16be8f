#!/usr/bin/env bash
# Every kernel of the shipped PTX, compiled by NVIDIA's ptxas for each architecture the CUDA
# backend runs on, without local memory (register spills or a stack). The backend refuses such a
# kernel when it loads the module, and a family with one refused kernel is unavailable on that
# GPU, so a spill that shows only for, say, sm_120 is a missing kernel on every RTX 50 card. The
# PTX targets sm_80 and the driver compiles it for the GPU at hand; registers differ by
# architecture (the launch bounds of geometry::NVIDIA_LAUNCH_BOUNDS cap them), so each is checked.
#
# ptxas comes from NVIDIA's PyPI wheel nvidia-cuda-nvcc (CUDA 13.0, the driver generation the
# H200 runs have used), installed into target/ci-cuda; no GPU is needed. Prints one line per
# architecture; exits 1 naming every kernel that spills.
#
#   bash scripts/check-ptx-spills.sh            # ARCHS="sm_80 sm_90" to check fewer
set -euo pipefail
cd "$(dirname "$0")/.."

ARCHS=${ARCHS:-"sm_80 sm_86 sm_87 sm_89 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121"}
wheel=target/ci-cuda
ptxas=$wheel/nvidia/cu13/bin/ptxas
if [ ! -f "$ptxas" ]; then
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$wheel" 'nvidia-cuda-nvcc==13.0.88'
fi
chmod +x "$ptxas"

# The PTX of this build: the build script's OUT_DIR, as cargo reports it. The debug profile reuses
# `cargo test`'s build; the GPU kernels are built the same way for either profile.
out_dir=$(cargo build --features cuda --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "build-script-executed" and "#mlxcel-amdgpu@" in m["package_id"]:
        print(m["out_dir"])')
ptx="$out_dir/kernels_sm_80.ptx"
[ -f "$ptx" ] || { echo "check-ptx-spills: no PTX at '$ptx'"; exit 1; }

status=0
for arch in $ARCHS; do
    report=$("$ptxas" -arch="$arch" -v "$ptx" -o /dev/null 2>&1) || { echo "$arch: ptxas failed"; echo "$report"; exit 1; }
    # Per kernel, ptxas -v prints "Compiling entry function 'k'", then "N bytes stack frame,
    # S bytes spill stores, L bytes spill loads", then "Used R registers ...".
    result=$(awk -v arch="$arch" '
        /Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); k = substr($0, RSTART + 1, RLENGTH - 2); n++ }
        /bytes stack frame/ { if ($1 != 0 || $5 != 0 || $9 != 0) { bad = bad " " k " (" $1 " B stack, " $5 " B spill stores, " $9 " B spill loads)" } }
        /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); r = substr($0, RSTART + 5, RLENGTH - 5) + 0; if (r > most) { most = r; mk = k } }
        END { printf "%s: %d kernels, most registers %d (%s)", arch, n, most, mk; if (bad != "") { printf "; LOCAL MEMORY:%s", bad; exit 1 } }' <<<"$report") || status=1
    echo "$result"
done
[ $status -eq 0 ] || echo "check-ptx-spills: kernels above use local memory; the CUDA backend would refuse them"
exit $status
