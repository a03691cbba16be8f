#!/usr/bin/env bash
# Compiles the MLX shim's ROCm branch (shim/mlx/mlxcel_amdgpu_mlx.cpp with
# -DMLXCEL_AMDGPU_SHIM_ROCM) against the real headers of mlxcel's MLX-ROCm
# backend, which no machine here can build:
#   overlay  mlxcel's ROCm overlay (src/lib/mlx-cpp/patches-rocm of
#            lablup/mlxcel) copied onto the upstream MLX it pins, as mlxcel's
#            build does;
#   fork     NripeshN/mlx branch rocm-support, the tree the overlay was copied
#            from (MLX core and mlx/backend/rocm together).
# HIP's headers come from Debian's libamdhip64-dev; rocBLAS, which the fork's
# headers include for two type names, is a stub of ours
# (scripts/fork-header-stubs). Only -fsyntax-only: nothing is linked or run.
#
# When the test double of the fork exists (tests/mlx_rocm_double/include), it
# also checks the double's declarations against the same real headers:
#   (a) each HIP function the double declares, against <hip/hip_runtime_api.h>;
#   (b) the double's HIP structs, enums, handles and macros (layout, values);
#   (c) the double's CommandEncoder / RocmAllocator / RocmBuffer against the
#       fork's device.h and allocator.h, for each target.
#
# MLX and the overlay are not part of this repository and stay out of it:
# pass their locations (run with no arguments to see how to get them).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
here="$repo/scripts"

# What the overlay records as its origin (its UPSTREAM file); used for the
# instructions below and to flag inputs at other commits.
fork_url=https://github.com/NripeshN/mlx.git
fork_branch=rocm-support
fork_commit=75915908dfe5028335d318b10340313744fd3a8d
mlx_url=https://github.com/ml-explore/mlx.git
mlx_pin=81ba1c6a0e50a9268b931579c2d4f1158b9aab5a
mlxcel_url=https://github.com/lablup/mlxcel.git
# Debian's HIP headers; the checksum pins the exact package that was checked.
hip_deb_url=https://deb.debian.org/debian/pool/main/r/rocm-hipamd/libamdhip64-dev_6.4.3-5_amd64.deb
hip_deb_sha256=f2a3a542d41883f87a45e2d0554c1c84ccf350c836b9e8b35473dadbc34ced5e
debian_mirror=https://deb.debian.org/debian

usage() {
  cat <<EOF
usage: $0 --overlay DIR --mlx DIR --fork DIR [options]

  --overlay DIR      mlxcel's ROCm overlay: the directory holding
                     mlx/backend/rocm/device.h (src/lib/mlx-cpp/patches-rocm
                     in a lablup/mlxcel checkout). A MANIFEST file there, if
                     any, is printed (where each file came from).
  --mlx DIR          upstream MLX source (holds mlx/array.h), ideally at the
                     overlay's pin ($mlx_pin).
  --fork DIR         NripeshN/mlx source at $fork_commit.
  --target T         overlay, fork or both (default both); a target's inputs
                     are needed only when it runs.
  --hip-include DIR  HIP headers (holds hip/hip_runtime.h) instead of
                     downloading Debian's libamdhip64-dev.
  --hip-deb FILE     a libamdhip64-dev .deb already downloaded.
  --shim FILE        the shim to compile (default: this repository's
                     shim/mlx/mlxcel_amdgpu_mlx.cpp); its directory and
                     ../../include are its include directories.
  --double DIR       the test double's include directory (default:
                     tests/mlx_rocm_double/include of this repository).
  --print-manifest   print the overlay's MANIFEST and UPSTREAM, then exit.
  --keep             keep the temporary directory and say where it is.

A directory's commit is read with git when it is a checkout, else from a file
named .commit at its top (write one when exporting with git archive).
Environment: CXX (default g++).
EOF
}

how_to_get_inputs() {
  cat <<EOF

How to get the inputs (none of them belongs in this repository):
  overlay: git clone $mlxcel_url mlxcel
           --overlay mlxcel/src/lib/mlx-cpp/patches-rocm
  MLX:     git clone $mlx_url mlx && git -C mlx checkout $mlx_pin
           --mlx mlx   (the pin in the overlay's UPSTREAM, retargeted_to_mlx_pin)
  fork:    git clone -b $fork_branch $fork_url mlx-rocm && git -C mlx-rocm checkout $fork_commit
           --fork mlx-rocm
EOF
}

overlay="" mlx="" fork="" target=both hip_include="" hip_deb="" double="" keep=0 print_manifest=0
shim="$repo/shim/mlx/mlxcel_amdgpu_mlx.cpp"
while [ $# -gt 0 ]; do
  case "$1" in
    --overlay) overlay=$2; shift 2 ;;
    --mlx) mlx=$2; shift 2 ;;
    --fork) fork=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --hip-include) hip_include=$2; shift 2 ;;
    --hip-deb) hip_deb=$2; shift 2 ;;
    --shim) shim=$2; shift 2 ;;
    --double) double=$2; shift 2 ;;
    --print-manifest) print_manifest=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
case "$target" in overlay|fork|both) ;; *) echo "--target must be overlay, fork or both" >&2; exit 2 ;; esac

abs() { (cd "$1" && pwd); }

# The commit a source directory holds, or "unknown".
commit_of() {
  local dir=$1
  if git -C "$dir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    local c
    c=$(git -C "$dir" rev-parse HEAD)
    if [ -n "$(git -C "$dir" status --porcelain -- . 2>/dev/null | head -n1)" ]; then c="$c (with local changes)"; fi
    echo "$c"
  elif [ -f "$dir/.commit" ]; then
    head -n1 "$dir/.commit"
  else
    echo unknown
  fi
}

print_overlay_records() {
  if [ -f "$overlay/UPSTREAM" ]; then
    echo "overlay UPSTREAM:"; sed 's/^/  /' "$overlay/UPSTREAM"
  fi
  if [ -f "$overlay/MANIFEST" ]; then
    echo "overlay MANIFEST (where each overlay file came from):"; sed 's/^/  /' "$overlay/MANIFEST"
  fi
}

missing=()
need_overlay=0 need_fork=0
case "$target" in overlay) need_overlay=1 ;; fork) need_fork=1 ;; both) need_overlay=1; need_fork=1 ;; esac
if [ "$print_manifest" = 1 ]; then
  [ -n "$overlay" ] || { echo "--print-manifest needs --overlay" >&2; how_to_get_inputs >&2; exit 2; }
  print_overlay_records
  exit 0
fi
if [ "$need_overlay" = 1 ]; then
  if [ -z "$overlay" ] || [ ! -f "$overlay/mlx/backend/rocm/device.h" ]; then missing+=("--overlay (a directory with mlx/backend/rocm/device.h)"); fi
  if [ -z "$mlx" ] || [ ! -f "$mlx/mlx/array.h" ]; then missing+=("--mlx (a directory with mlx/array.h)"); fi
fi
if [ "$need_fork" = 1 ]; then
  if [ -z "$fork" ] || [ ! -f "$fork/mlx/backend/rocm/device.h" ] || [ ! -f "$fork/mlx/array.h" ]; then
    missing+=("--fork (a directory with mlx/array.h and mlx/backend/rocm/device.h)")
  fi
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "missing or unusable inputs:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  how_to_get_inputs >&2
  exit 2
fi
[ -f "$shim" ] || { echo "no shim at $shim" >&2; exit 2; }
shim=$(cd "$(dirname "$shim")" && pwd)/$(basename "$shim")
shim_dir=$(dirname "$shim")
shim_include=$(cd "$shim_dir/../../include" && pwd)
[ -n "$double" ] || double="$repo/tests/mlx_rocm_double/include"
CXX=${CXX:-g++}
command -v "$CXX" >/dev/null || { echo "no C++ compiler: $CXX" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/shim-fork-headers.XXXXXX")
if [ "$keep" = 1 ]; then echo "temporary directory (kept): $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

# HIP headers: a given directory, a given .deb, or Debian's package fetched
# here. A fetched package must match the pinned checksum; if Debian has
# dropped that version from its pool, the current one is looked up in the
# sid index and used, and its version is printed.
hip_origin=""
if [ -n "$hip_include" ]; then
  hip_include=$(abs "$hip_include")
  hip_origin="$hip_include (given)"
else
  if [ -z "$hip_deb" ]; then
    command -v curl >/dev/null || { echo "curl is needed to fetch libamdhip64-dev (or pass --hip-include)" >&2; exit 2; }
    hip_deb="$tmp/libamdhip64-dev.deb"
    if curl -fsSL -o "$hip_deb" "$hip_deb_url"; then
      got=$(sha256sum "$hip_deb" | cut -d' ' -f1)
      if [ "$got" != "$hip_deb_sha256" ]; then
        echo "libamdhip64-dev from $hip_deb_url has sha256 $got, expected $hip_deb_sha256" >&2
        exit 1
      fi
    else
      echo "note: $hip_deb_url is gone; looking up the current libamdhip64-dev in Debian sid" >&2
      curl -fsSL "$debian_mirror/dists/sid/main/binary-amd64/Packages.xz" | xz -dc >"$tmp/Packages"
      read -r file sum < <(awk '/^Package: /{p=($2=="libamdhip64-dev")} p&&/^Filename: /{f=$2} p&&/^SHA256: /{print f, $2; exit}' "$tmp/Packages") || true
      [ -n "${file:-}" ] || { echo "libamdhip64-dev is not in Debian sid any more; pass --hip-include" >&2; exit 1; }
      curl -fsSL -o "$hip_deb" "$debian_mirror/$file"
      [ "$(sha256sum "$hip_deb" | cut -d' ' -f1)" = "$sum" ] || { echo "checksum mismatch for $file" >&2; exit 1; }
    fi
  fi
  mkdir -p "$tmp/hip"
  # dpkg-deb when present; else the .deb's data member through ar and tar.
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$hip_deb" "$tmp/hip"
    hip_version="$(dpkg-deb -f "$hip_deb" Package) $(dpkg-deb -f "$hip_deb" Version)"
  else
    (cd "$tmp/hip" && ar x "$(abs "$(dirname "$hip_deb")")/$(basename "$hip_deb")" && tar -xf data.tar.*)
    hip_version="$(basename "$hip_deb")"
  fi
  hip_include="$tmp/hip/usr/include"
  hip_origin="$hip_version (sha256 $(sha256sum "$hip_deb" | cut -d' ' -f1))"
fi
[ -f "$hip_include/hip/hip_runtime.h" ] || { echo "no hip/hip_runtime.h under $hip_include" >&2; exit 2; }

stubs="$here/fork-header-stubs"
# __HIP_PLATFORM_AMD__ is what hipcc and CMake's hip::host define; HIP's
# headers refuse to parse without a platform.
common=(-std=c++20 -fsyntax-only -D__HIP_PLATFORM_AMD__)
failures=()

echo "compiler: $("$CXX" --version | head -n1)"
echo "HIP headers: $hip_origin"
echo "stubs: scripts/fork-header-stubs ($(cd "$stubs" && find . -name '*.h' | sed 's|^\./||' | sort | tr '\n' ' '))"
echo "shim: $shim"

# Runs one compile, printing its command and outcome; a failure is recorded
# and the run goes on so that every target reports.
compile() {
  local label=$1; shift
  echo "--- $label"
  echo "    $CXX $*"
  if "$CXX" "$@" >"$tmp/out" 2>&1; then
    echo "    OK"
    if [ -s "$tmp/out" ]; then sed 's/^/    | /' "$tmp/out" | head -n 40; fi
  else
    echo "    FAILED:"
    sed 's/^/    | /' "$tmp/out" | head -n 80
    failures+=("$label")
  fi
}

# Headers of the backend (and the stubs) that a compile read, from its
# depfile; for the overlay target, whether each came from the overlay or MLX.
list_backend_headers() {
  local dep=$1 root=$2 from=${3:-}
  [ -f "$dep" ] || return 0
  tr ' \\' '\n\n' <"$dep" | grep -E '/mlx/backend/rocm/|/mlx/backend/common/|fork-header-stubs/|/mlx/fast\.h$' \
    | sed "s|^$root/||; s|^$repo/||" | sort -u | while read -r h; do
      if [ -n "$from" ] && [ -f "$from/$h" ]; then echo "    read: $h (overlay)"
      elif [ -n "$from" ] && [ "${h#scripts/}" = "$h" ]; then echo "    read: $h (MLX)"
      else echo "    read: $h"; fi
    done || true
}

check_double_api() {
  local label=$1 root=$2
  compile "$label: (c) the double's fork API against the fork's device.h and allocator.h" \
    "${common[@]}" -isystem "$root" -isystem "$stubs" -isystem "$hip_include" \
    "-DDOUBLE_DEVICE_H=\"$double/mlx/backend/rocm/device.h\"" \
    "-DDOUBLE_ALLOCATOR_H=\"$double/mlx/backend/rocm/allocator.h\"" \
    "$here/fork-header-checks/fork_api.cpp"
}

have_double=0
if [ -d "$double" ]; then
  have_double=1
  double=$(abs "$double")
  for f in hip/hip_runtime.h mlx/backend/rocm/device.h mlx/backend/rocm/allocator.h; do
    [ -f "$double/$f" ] || { echo "the test double has no $f under $double" >&2; exit 1; }
  done
  command -v python3 >/dev/null || { echo "python3 is needed to read the double's HIP declarations" >&2; exit 2; }
fi

run_target() {
  local name=$1 root=$2 from=${3:-}
  compile "$name: shim ROCm branch" "${common[@]}" -DMLXCEL_AMDGPU_SHIM_ROCM -MD -MF "$tmp/$name.d" \
    -I"$shim_dir" -I"$shim_include" -isystem "$root" -isystem "$stubs" -isystem "$hip_include" "$shim"
  list_backend_headers "$tmp/$name.d" "$root" "$from"
  # The fork's allocator.h is what the shim's host-copy handling and the
  # double rely on; the shim may not include it yet, so parse it on its own.
  compile "$name: mlx/backend/rocm/allocator.h" "${common[@]}" -MD -MF "$tmp/$name-alloc.d" -MT alloc \
    -isystem "$root" -isystem "$stubs" -isystem "$hip_include" -x c++ - <<<'#include <mlx/backend/rocm/allocator.h>'
  list_backend_headers "$tmp/$name-alloc.d" "$root" "$from"
  if [ "$have_double" = 1 ]; then check_double_api "$name" "$root"; fi
}

if [ "$need_overlay" = 1 ]; then
  overlay=$(abs "$overlay"); mlx=$(abs "$mlx")
  echo
  echo "=== target overlay: mlxcel's ROCm overlay on upstream MLX"
  echo "overlay: $overlay at $(commit_of "$overlay")"
  echo "MLX: $mlx at $(commit_of "$mlx")"
  mlx_c=$(commit_of "$mlx")
  if [ "${mlx_c%% *}" != "$mlx_pin" ]; then
    echo "note: MLX is not at the overlay's pin $mlx_pin; headers that changed in between may differ"
  fi
  print_overlay_records
  # As mlxcel's build does: the overlay's files copied over MLX's tree.
  merged="$tmp/overlay-on-mlx"
  mkdir -p "$merged"
  cp -R "$mlx/mlx" "$merged/mlx"
  cp -R "$overlay/mlx/." "$merged/mlx/"
  run_target overlay "$merged" "$overlay"
fi

if [ "$need_fork" = 1 ]; then
  fork=$(abs "$fork")
  echo
  echo "=== target fork: NripeshN/mlx $fork_branch"
  fork_c=$(commit_of "$fork")
  echo "fork: $fork at $fork_c"
  if [ "${fork_c%% *}" != "$fork_commit" ]; then
    echo "note: the fork is not at $fork_commit, the commit the overlay was copied from"
  fi
  run_target fork "$fork"
fi

if [ "$have_double" = 1 ]; then
  echo
  echo "=== the test double's HIP declarations against Debian's HIP headers ($double/hip/hip_runtime.h)"
  gen="$tmp/double-hip"
  python3 "$here/fork-header-checks/double_hip.py" "$double/hip/hip_runtime.h" "$gen" | sed 's/^/checks: /'
  for tu in "$gen"/fn_*.cpp; do
    fn=$(basename "$tu" .cpp); fn=${fn#fn_}
    compile "(a) $fn" "${common[@]}" -isystem "$hip_include" "$tu"
  done
  compile "(b) structs, enums, handles and macros" "${common[@]}" -isystem "$hip_include" "$gen/layout.cpp"
else
  echo
  echo "SKIPPED (a)-(c), the test double's checks: $double does not exist"
fi

echo
if [ ${#failures[@]} -gt 0 ]; then
  echo "FAILED: ${#failures[@]} check(s):"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "all checks passed"
