# Sourced by the scripts of scripts/gpu-host/. They run on an NVIDIA GPU host, from a checkout of
# this repository with the pack of `cargo xtask gpu-pack` beside it in .gpu-pack/ (or $PACK): the
# host needs no Rust and no network. Each writes its logs under $OUT (default
# gpu-host-out/<script>); with ARCHIVE=1 the logs are replaced at the end by one archive,
# $OUT/logs.tar.xz, to copy back.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PACK=${PACK:-.gpu-pack}
# Made absolute, so that the paths the scripts hand to programs hold from any directory.
[ -d "$PACK" ] && PACK=$(cd "$PACK" && pwd)
OUT=${OUT:-gpu-host-out/$(basename "$0" .sh)}
mkdir -p "$OUT"
# Where scripts/gpu-host/mlx.sh unpacks MLX and the library; bench.sh links against it too.
MLX_WORK=${MLX_WORK:-${TMPDIR:-/tmp}/mlxcel-amdgpu-mlx}
status=0

# step NAME COMMAND...: runs the command with its output in $OUT/NAME.log, prints the log's last
# $STEP_TAIL (default 5) lines, its exit status and its duration, and records a failure in $status.
step() {
    local name=$1
    shift
    echo "== $name: $*"
    local t0=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    tail -n "${STEP_TAIL:-5}" "$OUT/$name.log"
    echo "rc=$rc, $((SECONDS - t0)) s"
    [ $rc -eq 0 ] || status=1
}

# need FILE PART: stops unless the pack holds FILE, naming the pack part that makes it.
need() {
    [ -e "$PACK/$1" ] || {
        echo "no $PACK/$1: run \`cargo xtask gpu-pack $2\` on a machine with Rust and copy $PACK/ here"
        exit 1
    }
}

# The GPU, its driver and clocks, into $OUT/gpu.txt.
gpu_info() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$OUT/gpu.txt"
}

# Ends the script with $status, after archiving the logs if ARCHIVE is set.
finish() {
    if [ -n "${ARCHIVE:-}" ]; then
        local archive
        archive=$(mktemp) && tar -C "$OUT" -cJf "$archive" . && find "$OUT" -mindepth 1 -delete && mv "$archive" "$OUT/logs.tar.xz"
    fi
    exit $status
}
