#!/usr/bin/env bash
# The fuzz targets of fuzz/ (docs/reliability.md, "Fuzzing"):
#   c_abi        arbitrary arguments into every C ABI function, CPU backend
#   code_object  arbitrary bytes into the ELF reader and the metadata decoder
#
#   bash scripts/fuzz.sh short [SECONDS]        CI: each target SECONDS (default 15)
#                                               from the committed corpus; fails on
#                                               any crash; leaves the corpus alone
#   bash scripts/fuzz.sh long SECONDS [TARGET]  each target (or TARGET) SECONDS, one
#                                               job, nice 10, growing a working corpus
#                                               under fuzz/target/work/; the log with
#                                               libFuzzer's final stats goes to
#                                               fuzz/target/logs/TARGET.log
#   bash scripts/fuzz.sh minimize [TARGET]      merges the working corpus and the
#                                               committed one into a minimal set and
#                                               replaces fuzz/corpus/TARGET with it
#   bash scripts/fuzz.sh build                  only builds the targets
#
# A crash leaves its input in fuzz/artifacts/TARGET/; once fixed, copy it to
# fuzz/regressions/TARGET/, where `cargo test` replays it (tests/fuzz_corpus.rs)
# through the same harness (fuzz/harness/).
#
# The targets are built here with cargo and the flags cargo-fuzz 0.13 passes
# (sanitizer coverage, AddressSanitizer, debug assertions, `--cfg fuzzing`,
# release, one codegen unit), so CI needs no `cargo install cargo-fuzz`; with
# cargo-fuzz installed, `cd fuzz && cargo fuzz run c_abi` runs the same targets.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

mode=${1:-short}
targets=(c_abi code_object)
host=$(rustc -vV | sed -n 's/^host: //p')
bin_dir="$root/fuzz/target/$host/release"
# The GPU kernels of the library were built by the workspace's own build:
# point the fuzz build at them instead of building them again.
export MLXCEL_AMDGPU_GPU_TARGET_DIR="${MLXCEL_AMDGPU_GPU_TARGET_DIR:-$root/target/gpu-kernels}"

# Per target: the largest input libFuzzer makes (the code-object seeds are a
# 9 KB code object and a 21 KB metadata note).
max_len() { case $1 in code_object) echo 32768 ;; *) echo 512 ;; esac; }

build() {
    local flags=(
        -Cpasses=sancov-module
        -Cllvm-args=-sanitizer-coverage-level=4
        -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
        -Cllvm-args=-sanitizer-coverage-pc-table
        -Cllvm-args=-sanitizer-coverage-trace-compares
        --cfg fuzzing
        -Cllvm-args=-simplifycfg-branch-fold-threshold=0
        -Zsanitizer=address
        -Cllvm-args=-sanitizer-coverage-stack-depth
        -Cdebug-assertions
        -Ccodegen-units=1
    )
    (cd fuzz && RUSTFLAGS="${flags[*]}" cargo build --release --locked --target "$host" --bins)
}

# run TARGET SECONDS CORPUS_DIR [EXTRA_DIRS...]: libFuzzer on one job.
run() {
    local target=$1 seconds=$2
    shift 2
    mkdir -p "$root/fuzz/artifacts/$target"
    "$bin_dir/$target" -max_total_time="$seconds" -max_len="$(max_len "$target")" -timeout=20 \
        -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$root/fuzz/artifacts/$target/" "$@"
}

case $mode in
build)
    build
    ;;
short)
    seconds=${2:-15}
    build
    for t in "${targets[@]}"; do
        # A scratch copy: what the run adds is not kept.
        work=$(mktemp -d)
        cp -r "fuzz/corpus/$t/." "$work/"
        echo "fuzz $t: ${seconds}s from $(ls "$work" | wc -l) committed inputs"
        log="$work.log"
        status=0
        run "$t" "$seconds" "$work" > "$log" 2>&1 || status=$?
        rm -rf "$work"
        if [ "$status" != 0 ]; then
            tail -n 60 "$log" >&2
            echo "fuzz $t failed (status $status): the input is in fuzz/artifacts/$t/" >&2
            exit 1
        fi
        grep -E '^(#[0-9]+ +DONE|Done|stat::number_of_executed_units)' "$log" || true
        rm -f "$log"
    done
    ;;
long)
    seconds=${2:?usage: scripts/fuzz.sh long SECONDS [TARGET]}
    [ -n "${3:-}" ] && targets=("$3")
    build
    mkdir -p fuzz/target/logs
    for t in "${targets[@]}"; do
        work="fuzz/target/work/$t"
        mkdir -p "$work"
        seeds=()
        [ -d "fuzz/target/seeds/$t" ] && seeds=("fuzz/target/seeds/$t")
        nice -n 10 bash -c "$(declare -f run max_len); root='$root' bin_dir='$bin_dir'; run $t $seconds $work fuzz/corpus/$t ${seeds[*]:-}" \
            > "fuzz/target/logs/$t.log" 2>&1 || { echo "fuzz $t failed: fuzz/target/logs/$t.log" >&2; exit 1; }
        grep -E '^(#[0-9]+ +DONE|Done|stat::)' "fuzz/target/logs/$t.log"
    done
    ;;
minimize)
    [ -n "${2:-}" ] && targets=("$2")
    for t in "${targets[@]}"; do
        min=$(mktemp -d)
        # A snapshot of the working corpus: a run still going rewrites it.
        snap=$(mktemp -d)
        cp -r "fuzz/target/work/$t/." "$snap/"
        "$bin_dir/$t" -merge=1 -max_len="$(max_len "$t")" -rss_limit_mb=4096 "$min" "fuzz/corpus/$t" "$snap" 2>&1 | tail -2
        rm -rf "$snap"
        rm -rf "fuzz/corpus/$t"
        mkdir -p "fuzz/corpus/$t"
        cp "$min"/* "fuzz/corpus/$t/"
        rm -rf "$min"
        echo "fuzz/corpus/$t: $(ls "fuzz/corpus/$t" | wc -l) inputs, $(du -sh "fuzz/corpus/$t" | cut -f1)"
    done
    ;;
*)
    echo "usage: scripts/fuzz.sh short [SECONDS] | long SECONDS [TARGET] | minimize [TARGET] | build" >&2
    exit 2
    ;;
esac
