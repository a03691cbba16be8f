#!/usr/bin/env bash
# Saves or compares the generated GPU code: the AMD code objects (gfx1151,
# gfx11-generic, gfx12-generic) and the PTX (sm_80), as build.rs writes them to
# the OUT_DIR of a `cargo build --features cuda`.
#
#   scripts/compare-codegen.sh save    [DIR]   build, then copy the artifacts to DIR
#   scripts/compare-codegen.sh compare [DIR]   build, then compare against DIR
#
# DIR defaults to target/codegen-baseline. `compare` checks each code object
# byte for byte and, when the bytes differ, its `.text` disassembly
# (llvm-objdump -d) and its notes (llvm-readobj --notes) separately, so that a
# difference in metadata alone can be told from a difference in code; the PTX
# must be identical text. Exit status 0 only if every artifact's code is
# identical. Set NO_BUILD=1 to skip the build (use what the last build wrote).
set -euo pipefail

cd "$(dirname "$0")/.."
mode=${1:-}
dir=${2:-target/codegen-baseline}
targets=(gfx1151 gfx11-generic gfx12-generic)
ptx=kernels_sm_80.ptx

case "$mode" in
save | compare) ;;
*)
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

if [[ -z "${NO_BUILD:-}" ]]; then
    nice cargo build --features cuda >&2
fi

# The newest OUT_DIR of this package that holds the PTX (a build with `cuda`).
out=$(ls -td target/debug/build/mlxcel-amdgpu-*/out 2>/dev/null | while read -r d; do
    [[ -f "$d/$ptx" ]] && { echo "$d"; break; }
done)
[[ -n "$out" ]] || { echo "no OUT_DIR with $ptx under target/debug/build" >&2; exit 1; }
echo "artifacts from $out" >&2

bin="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
objdump="$bin/llvm-objdump"
readobj="$bin/llvm-readobj"

if [[ "$mode" == save ]]; then
    mkdir -p "$dir"
    for t in "${targets[@]}"; do cp "$out/$t.hsaco" "$dir/"; done
    cp "$out/$ptx" "$dir/"
    echo "saved to $dir" >&2
    exit 0
fi

status=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for t in "${targets[@]}"; do
    old="$dir/$t.hsaco" new="$out/$t.hsaco"
    if cmp -s "$old" "$new"; then
        echo "$t.hsaco: identical bytes"
        continue
    fi
    # Disassembly without the file name line, which names the path.
    "$objdump" -d --mcpu="$t" "$old" | tail -n +3 >"$tmp/old.s"
    "$objdump" -d --mcpu="$t" "$new" | tail -n +3 >"$tmp/new.s"
    "$readobj" --notes "$old" | tail -n +3 >"$tmp/old.notes"
    "$readobj" --notes "$new" | tail -n +3 >"$tmp/new.notes"
    if cmp -s "$tmp/old.s" "$tmp/new.s"; then
        text="identical .text disassembly"
    else
        text="DIFFERENT .text disassembly ($( (diff "$tmp/old.s" "$tmp/new.s" || true) | grep -c '^[<>]') lines)"
        status=1
    fi
    if cmp -s "$tmp/old.notes" "$tmp/new.notes"; then notes="identical notes"; else notes="different notes"; fi
    echo "$t.hsaco: bytes differ; $text, $notes"
done
if cmp -s "$dir/$ptx" "$out/$ptx"; then
    echo "$ptx: identical"
else
    echo "$ptx: DIFFERENT ($( (diff "$dir/$ptx" "$out/$ptx" || true) | grep -c '^[<>]') lines)"
    status=1
fi
exit $status
