//! `cargo xtask ci`: every check of CI after the README's commands, which `.ci/run` runs first,
//! verbatim, on a fresh clone (they build the project and run `cargo test`).

use std::time::Instant;

use crate::util::{Result, cargo, repo_root, run, wants_help};

const USAGE: &str = "\
usage: cargo xtask ci

The checks of CI that follow the README's commands (`.ci/run` runs those first, then this), in
order, each with its duration: formatting; clippy with warnings as errors; no tracked file pointing
outside the repository, and that check's self-test; xtask's own tests; the crate as a dependency on
mlxcel's toolchain (tests/consumer); the published crates packaged and published dry; the CPU
backend under valgrind; the suite's HIP cases and the self-test on the simulated gfx1151; ptxas on
the PTX for every NVIDIA architecture; a short fuzz run of both targets. Stops at the first
failure.";

pub fn run_task(args: &[String]) -> Result<()> {
    if wants_help(args, USAGE) {
        return Ok(());
    }
    if !args.is_empty() {
        return Err(USAGE.into());
    }
    let root = repo_root()?;
    let started = Instant::now();
    let step = |name: &str, f: &dyn Fn() -> Result<()>| -> Result<()> {
        let t = Instant::now();
        f().map_err(|e| format!("ci: `{name}` failed: {e}"))?;
        println!("ci: `{name}` took {} s (total {} s)", t.elapsed().as_secs(), started.elapsed().as_secs());
        Ok(())
    };
    let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    step("cargo fmt --all --check", &|| run(cargo(&root).args(["fmt", "--all", "--check"])))?;
    step("cargo clippy --workspace --all-targets -- -D warnings", &|| {
        run(cargo(&root).args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))
    })?;
    step("cargo xtask check-references", &|| crate::references::run(&[]))?;
    step("cargo xtask check-references --self-test", &|| crate::references::run(&args(&["--self-test"])))?;
    step("cargo test -p xtask", &|| run(cargo(&root).args(["test", "-p", "xtask"])))?;
    // mlxcel-amdgpu as a path dependency on mlxcel's toolchain (1.93.1): the Rust API and the C
    // ABI from C++ on the CPU backend, then the offline build from pre-built code objects (about
    // 2 min; the GPU kernels built above are reused).
    step("cargo xtask consumer", &|| crate::consumer::consumer(&[]))?;
    // `cargo package` and `cargo publish --dry-run` of the published crates: each builds from its
    // package alone, the GPU kernels for gfx1151 only (3-5 min).
    step("cargo xtask package", &|| crate::consumer::package(&[]))?;
    // The CPU backend's leak check: valgrind over the concurrency case and the C ABI consumer
    // (about 40 s).
    step("cargo xtask leak-check", &|| crate::checks::leak_check(&[]))?;
    // The suite's HIP cases and the self-test on the simulated gfx1151 (the shipped AMD code
    // objects on rdna-sim through hip.rs and the stand-in libamdhip64); the interpreter's and
    // the stand-in's own tests ran in `cargo test`.
    step("cargo xtask sim-test -p mlxcel-amdgpu", &|| crate::sim::test(&args(&["-p", "mlxcel-amdgpu"])))?;
    step("cargo xtask sim-selftest", &|| crate::sim::selftest(&[]))?;
    // The PTX as NVIDIA's ptxas 13.0 (from PyPI, no GPU) compiles it for every architecture
    // from sm_80 to sm_121: no kernel may use local memory, which the CUDA backend refuses (the
    // CUDA feature's debug build, which reuses `cargo test`'s; the PTX is the same in either
    // profile).
    step("cargo xtask ptx-spills", &|| crate::checks::ptx_spills(&[]))?;
    // A short fuzz run (docs/reliability.md, "Fuzzing"): both targets, 15 s each from the
    // committed corpus; fails on any crash, leak or broken promise. About 2.5 min on two cores
    // (the build, about 1.5 min, reuses the GPU kernels built above).
    step("cargo xtask fuzz short", &|| crate::fuzz::run_task(&args(&["short"])))?;
    println!("ci: passed in {} s", started.elapsed().as_secs());
    Ok(())
}
