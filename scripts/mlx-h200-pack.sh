#!/usr/bin/env bash
# Packs what scripts/mlx-h200.sh needs on the GPU machine (which has no
# network, but has nvcc, CMake, g++ and PyTorch's CUDA 13 libraries) into
# .device-mlx/ (git-ignored), to be copied to the GPU host:
#
#   .device-mlx/mlx-cuda-h200.tar.xz   the mlx-cuda-13 0.32.4 wheel's mlx/ tree
#                                      (include/, lib/libmlx.so, share/) and
#                                      mlx_cuda_13.libs/, plus this crate's
#                                      libmlxcel_amdgpu.so built with --features cuda
#
# The wheel is 90 MB and its libmlx.so 139 MB; a call carries 64 MiB at most.
# So libmlx.so is shrunk for the H200 (sm_90) only: its symbol table is
# stripped (strip --strip-unneeded keeps the dynamic symbols), and in its
# .nv_fatbin the payloads of the entries for other GPUs (SASS for sm_75, 80,
# 100, 120, 121 and the sm_120 PTX) are overwritten with zeros, headers kept,
# so they compress to nothing. The sm_90 code is byte for byte the wheel's.
# If that broke MLX, the driver's first step (xielu on the GPU stream) fails.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL_DIR=.whl
WHEEL=$(ls $WHEEL_DIR/mlx_cuda_13-0.32.4-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$WHEEL" ]; then
    mkdir -p $WHEEL_DIR
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_35_x86_64 \
        -d $WHEEL_DIR 'mlx-cuda-13==0.32.4'
    WHEEL=$(ls $WHEEL_DIR/mlx_cuda_13-0.32.4-*.whl | head -n 1)
fi
cargo build --release --features cuda --lib
rm -rf .device-mlx && mkdir -p .device-mlx/stage/site .device-mlx/stage/lib
unzip -q "$WHEEL" 'mlx/*' 'mlx_cuda_13.libs/*' -d .device-mlx/stage/site
# Installed under its SONAME, which carries the header's ABI version.
abi=$(awk '/#define MLXCEL_AMDGPU_ABI_VERSION/ { print $3 }' include/mlxcel_amdgpu.h)
cp target/release/libmlxcel_amdgpu.so .device-mlx/stage/lib/libmlxcel_amdgpu.so.$abi
ln -s libmlxcel_amdgpu.so.$abi .device-mlx/stage/lib/libmlxcel_amdgpu.so
LIBMLX=.device-mlx/stage/site/mlx/lib/libmlx.so
sha256sum "$LIBMLX" > .device-mlx/stage/libmlx.wheel.sha256
strip --strip-unneeded "$LIBMLX"
python3 - "$LIBMLX" <<'EOF'
# Zero the payloads of the fatbin entries that are not sm_90 SASS.
import struct, subprocess, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
sections = subprocess.check_output(["readelf", "-S", "-W", path], text=True)
line = next(l for l in sections.splitlines() if ".nv_fatbin" in l)
fields = line.split("]", 1)[1].split()
start, size = int(fields[3], 16), int(fields[4], 16)
pos, kept, zeroed = start, 0, 0
while pos + 16 <= start + size:
    magic, _version, header, blob = struct.unpack_from("<IHHQ", data, pos)
    if magic != 0xBA55ED50:  # blobs are 8-byte aligned; skip padding
        pos += 8
        continue
    entry, end = pos + header, pos + header + blob
    while entry < end:
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
        arch = struct.unpack_from("<I", data, entry + 28)[0]
        body = entry + entry_header
        if kind == 2 and arch == 90:
            kept += payload
        else:
            data[body:body + payload] = bytes(payload)
            zeroed += payload
        entry = body + payload
    pos = end
if kept == 0:
    sys.exit("no sm_90 code found in .nv_fatbin; the layout is not what this script expects")
open(path, "wb").write(data)
print(f"libmlx.so fatbin: kept {kept >> 20} MiB of sm_90 SASS, zeroed {zeroed >> 20} MiB for other GPUs")
EOF
tar -C .device-mlx/stage -cf - . | xz -T2 -9 > .device-mlx/mlx-cuda-h200.tar.xz
rm -rf .device-mlx/stage
ls -la .device-mlx
size=$(stat -c %s .device-mlx/mlx-cuda-h200.tar.xz)
[ "$size" -lt $((60 * 1024 * 1024)) ] || { echo "the pack is $size bytes: too large to carry"; exit 1; }
