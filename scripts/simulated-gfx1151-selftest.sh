#!/usr/bin/env bash
# The self-test (`cargo run --release`) on the simulated gfx1151, at
# the consumer's shapes, then the executed wave-instructions of each distinct
# launch by class: the inputs of the gfx1151 performance model.
#
# Builds the release tool and the stand-in libamdhip64 (hip-standin over
# rdna-sim), points ROCM_PATH at it and runs `MLXCEL_AMDGPU_BACKEND=hip
# mlxcel-amdgpu` with one launch per case, checked and timed, no warm-up (the
# simulator's times are host wall-clock times, not GPU times). Fails when the
# self-test fails or did not run on the simulated gfx1151. Writes the counts to
# $COUNTS_OUT (default target/rdna-sim-counts.tsv) and prints them as a Markdown table,
# then how many of the gfx1151 object's mnemonics ran (with the suite's runs,
# when scripts/test-simulated-gfx1151.sh ran before).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -p hip-standin -p mlxcel-amdgpu -p rdna-sim
target_dir=$(realpath "${CARGO_TARGET_DIR:-target}")
prefix="$target_dir/rdna-sim-rocm-release"
mkdir -p "$prefix/lib"
cp "$target_dir/release/libamdhip64_standin.so" "$prefix/lib/libamdhip64.so"
counts="${COUNTS_OUT:-$target_dir/rdna-sim-counts.tsv}"
coverage="$target_dir/rdna-sim-coverage-selftest.txt"
rm -f "$counts" "$coverage"

table="$target_dir/rdna-sim-selftest.txt"
status=0
env -u HIP_PATH ROCM_PATH="$prefix" MLXCEL_AMDGPU_BACKEND=hip MLXCEL_AMDGPU_EXPECT_HIP=1 \
    MLXCEL_AMDGPU_SELFTEST_REPS=0 RDNA_SIM_STRICT_WAIT=1 RDNA_SIM_COUNTS="$counts" RDNA_SIM_COVERAGE="$coverage" \
    "$target_dir/release/mlxcel-amdgpu" >"$table" 2>&1 || status=$?
cat "$table"
if [ "$status" -ne 0 ]; then
    echo "simulated-gfx1151-selftest: the self-test failed (exit $status)" >&2
    exit "$status"
fi
if ! tail -n 1 "$table" | grep -q '^verified: .*(rdna-sim) (gfx1151) through HIP$'; then
    echo "simulated-gfx1151-selftest: the self-test did not run on the simulated gfx1151" >&2
    exit 1
fi

# One row per distinct launch (processor, kernel, grid, workgroup, dynamic
# workgroup bytes); the counts of a repeated launch are the same, so the first
# is kept. The columns are named by the file's header line (each process
# that appended writes one; the first is used).
echo
echo "Executed wave-instructions per launch on the simulated gfx1151 (rdna-sim; counts, not times):"
echo
awk -F'\t' '
/^#/ {
    if (header++) next
    line = "| kernel | grid | workgroup | dynamic_lds"; rule = "|---|---|---|---"
    for (i = 6; i <= NF; i++) { line = line " | " $i; rule = rule "|---" }
    print line " | launches |"; print rule "|---|"
    next
}
{
    key = $1 FS $2 FS $3 FS $4 FS $5
    if (!(key in seen)) {
        order[++n] = key
        row = "| " $2
        for (i = 3; i <= NF; i++) row = row " | " $i
        seen[key] = row
    }
    times[key]++
}
END { for (i = 1; i <= n; i++) print seen[order[i]] " | " times[order[i]] " |" }
' "$counts"

# The gfx1151 object's mnemonics executed by the self-test, together with the
# suite's when scripts/test-simulated-gfx1151.sh ran before.
echo
object=$(ls -t "$target_dir"/release/build/mlxcel-amdgpu-*/out/gfx1151.hsaco | head -n 1)
suite="$target_dir/rdna-sim-coverage.txt"
"$target_dir/release/rdna-sim-coverage" "$object" "$coverage" $([ -f "$suite" ] && echo "$suite")
