#!/usr/bin/env bash
# Leak check of the CPU backend: valgrind's memcheck over
#  1. the concurrency case of tests/concurrency.rs on the CPU backend (8 threads,
#     mixed kernels and dtypes; LAUNCHES launches, default 100: under valgrind a
#     launch is about 50 times slower, and every code path of the case is taken
#     by far fewer than the 10,000 of `cargo test`), and
#  2. the C ABI consumer (tests/cpp/consumer.cpp, built here against the debug
#     libmlxcel_amdgpu.so).
# Fails on any definite or indirect leak and on any memory error; memory still
# reachable at exit (the process-wide device, the emulator's pooled lane stacks,
# thread-local error slots) is not a leak. Needs valgrind and a C++ compiler.
# About 40 s on 2 cores; .ci/run runs it after `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
launches="${LAUNCHES:-100}"

vg=(valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect
    --errors-for-leak-kinds=definite,indirect --error-exitcode=99)

cargo build --lib
exe=$(cargo test --no-run --test concurrency --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "concurrency" and m.get("executable"):
        print(m["executable"])')
echo "== valgrind: $exe, CPU case, $launches launches"
MLXCEL_AMDGPU_CONCURRENCY_LAUNCHES="$launches" "${vg[@]}" "$exe" --exact \
    eight_threads_on_their_own_streams_match_one_thread::cpu --test-threads=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Installed under its SONAME (build.rs sets it; it moves with the ABI version).
soname=$(readelf -d target/debug/libmlxcel_amdgpu.so | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
cp target/debug/libmlxcel_amdgpu.so "$tmp/$soname"
ln -s "$soname" "$tmp/libmlxcel_amdgpu.so"
"${CXX:-c++}" -std=c++17 -O1 -ffp-contract=off -Wall -Werror -I include tests/cpp/consumer.cpp \
    -L "$tmp" -Wl,-rpath,"$tmp" -lmlxcel_amdgpu -o "$tmp/consumer"
echo "== valgrind: the C ABI consumer"
env -u MLXCEL_AMDGPU_BACKEND "${vg[@]}" "$tmp/consumer"
echo "leak check: no leaks, no memory errors"
