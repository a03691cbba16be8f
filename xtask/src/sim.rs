//! The simulated gfx1151: the suite's HIP cases, the self-test, and the gfx1151 model, each on
//! the shipped AMD code objects executed by `rdna-sim` behind `hip-standin`, a stand-in
//! `libamdhip64` that `host/runtime/hip.rs` finds through `ROCM_PATH` exactly as it finds ROCm.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::Command;

use crate::util::{Result, cargo, newest_build_output, remove, repo_root, run, target_dir, wants_help};

/// The build profile of the stand-in and of what runs on it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Profile {
    Debug,
    Release,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Debug => "debug",
            Profile::Release => "release",
        }
    }
}

/// The checkout, its target directory, and the prefix where the stand-in is installed as
/// `lib/libamdhip64.so`, built in `profile` together with `packages`.
struct Standin {
    root: PathBuf,
    target: PathBuf,
    prefix: PathBuf,
}

impl Standin {
    fn install(profile: Profile, packages: &[&str]) -> Result<Standin> {
        let root = repo_root()?;
        let target = target_dir(&root)?;
        let mut build = cargo(&root);
        build.arg("build");
        if profile == Profile::Release {
            build.arg("--release");
        }
        for p in packages {
            build.args(["-p", p]);
        }
        run(&mut build)?;
        let prefix = target.join(match profile {
            Profile::Debug => "rdna-sim-rocm",
            Profile::Release => "rdna-sim-rocm-release",
        });
        fs::create_dir_all(prefix.join("lib"))?;
        fs::copy(target.join(profile.dir()).join("libamdhip64_standin.so"), prefix.join("lib/libamdhip64.so"))?;
        Ok(Standin { root, target, prefix })
    }

    /// `cmd` pointed at the stand-in: `ROCM_PATH` at its prefix, no `HIP_PATH` (which hip.rs
    /// would try first), and strict waits: a load's destination register holds poison until
    /// its `s_waitcnt`, so a missing wait in a shipped kernel is a wrong result.
    fn env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.env("ROCM_PATH", &self.prefix).env_remove("HIP_PATH").env("RDNA_SIM_STRICT_WAIT", "1")
    }

    /// Prints how many of the gfx1151 object's distinct mnemonics the launches recorded in
    /// `coverage` executed, and which they never did.
    fn coverage(&self, profile: Profile, coverage: &[PathBuf]) -> Result<()> {
        let object = newest_build_output(&self.target, profile.dir(), "gfx1151.hsaco")?;
        let tool = self.target.join(profile.dir()).join("rdna-sim-coverage");
        let recorded: Vec<&PathBuf> = coverage.iter().filter(|c| c.exists()).collect();
        if recorded.is_empty() {
            // Test files without HIP cases (the C ABI's validation, for one) launch nothing.
            println!("no launch ran on the simulated gfx1151: no mnemonics to report");
            return Ok(());
        }
        run(Command::new(tool).arg(object).args(recorded))
    }
}

const SIM_TEST_USAGE: &str = "\
usage: cargo xtask sim-test [CARGO TEST ARGUMENTS]

The test suite with its HIP cases on the simulated gfx1151: `cargo test` (with the arguments
given, for example `-p mlxcel-amdgpu --test xielu`) with MLXCEL_AMDGPU_EXPECT_HIP=1, so that a
HIP case that cannot run fails instead of being skipped. The CPU-emulator cases (`::cpu`) ran in
the plain `cargo test` and are skipped, as are the MLX shim's two tests (they ran there too, the
ROCm branch's on the simulated gfx1151 already) and the self-test's default run, which
`cargo xtask sim-selftest` does in a release build. Ends with the gfx1151 object's mnemonics that
the launches executed, and those they never did.";

pub fn test(args: &[String]) -> Result<()> {
    if wants_help(args, SIM_TEST_USAGE) {
        return Ok(());
    }
    let sim = Standin::install(Profile::Debug, &["hip-standin", "rdna-sim"])?;
    let coverage = sim.target.join("rdna-sim-coverage.txt");
    remove(&coverage)?;
    let mut test = cargo(&sim.root);
    sim.env(&mut test).env("MLXCEL_AMDGPU_EXPECT_HIP", "1").env("RDNA_SIM_COVERAGE", &coverage);
    test.arg("test").args(args).args([
        "--",
        "--skip",
        "default_run_says_which_backend_ran_and_why_the_others_did_not",
        "--skip",
        "::cpu",
        // The MLX shim's tests ran in `cargo test`: the CPU stream's launches no HIP, and the
        // ROCm branch's installs the stand-in itself, with strict waits.
        "--skip",
        "mlx_shim_runs_every_kernel_inside_mlx_on_the_cpu_stream",
        "--skip",
        "mlx_shim_rocm_branch_runs_inside_the_fork_double_on_the_simulated_gfx1151",
    ]);
    run(&mut test)?;
    sim.coverage(Profile::Debug, &[coverage])
}

const SIM_SELFTEST_USAGE: &str = "\
usage: cargo xtask sim-selftest

The self-test (`cargo run --release`) on the simulated gfx1151 at the consumers' shapes, one
launch per case, checked and timed, no warm-up (the interpreter's times are host wall-clock times,
not GPU times). Fails unless it passed on the simulated gfx1151. Then the executed
wave-instructions of each distinct launch by class (written to $COUNTS_OUT, default
<target>/rdna-sim-counts.tsv), the inputs of the gfx1151 model, and the gfx1151 object's
mnemonics executed, with the suite's when `cargo xtask sim-test` ran before.";

pub fn selftest(args: &[String]) -> Result<()> {
    if wants_help(args, SIM_SELFTEST_USAGE) {
        return Ok(());
    }
    if !args.is_empty() {
        return Err(SIM_SELFTEST_USAGE.into());
    }
    let sim =
        Standin::install(Profile::Release, &["hip-standin", "mlxcel-amdgpu", "mlxcel-amdgpu-testkit", "rdna-sim"])?;
    let counts = std::env::var_os("COUNTS_OUT").map_or_else(|| sim.target.join("rdna-sim-counts.tsv"), PathBuf::from);
    let coverage = sim.target.join("rdna-sim-coverage-selftest.txt");
    remove(&counts)?;
    remove(&coverage)?;
    let table = sim.target.join("rdna-sim-selftest.txt");
    let log = File::create(&table)?;
    let mut selftest = Command::new(sim.target.join("release/mlxcel-amdgpu"));
    sim.env(&mut selftest)
        .env("MLXCEL_AMDGPU_BACKEND", "hip")
        .env("MLXCEL_AMDGPU_EXPECT_HIP", "1")
        .env("MLXCEL_AMDGPU_SELFTEST_REPS", "0")
        .env("RDNA_SIM_COUNTS", &counts)
        .env("RDNA_SIM_COVERAGE", &coverage)
        .stdout(log.try_clone()?)
        .stderr(log);
    let status = selftest.status()?;
    let text = fs::read_to_string(&table)?;
    print!("{text}");
    if !status.success() {
        return Err(format!("sim-selftest: the self-test failed ({status})").into());
    }
    if !on_simulated_gfx1151(&text) {
        return Err("sim-selftest: the self-test did not run on the simulated gfx1151".into());
    }
    println!("\nExecuted wave-instructions per launch on the simulated gfx1151 (rdna-sim; counts, not times):\n");
    print!("{}", counts_table(&fs::read_to_string(&counts)?));
    println!();
    sim.coverage(Profile::Release, &[coverage, sim.target.join("rdna-sim-coverage.txt")])
}

/// Whether the self-test's last line says it verified the simulated gfx1151 through HIP.
fn on_simulated_gfx1151(output: &str) -> bool {
    output
        .lines()
        .last()
        .is_some_and(|l| l.starts_with("verified: ") && l.ends_with("(rdna-sim) (gfx1151) through HIP"))
}

/// The counts file (`RDNA_SIM_COUNTS`: tab-separated, a `#` header line per process that
/// appended) as a Markdown table: one row per distinct launch (processor, kernel, grid,
/// workgroup, dynamic workgroup bytes; the counts of a repeated launch are the same, so the first
/// is kept), the columns the first header names, and how many times each launch ran.
fn counts_table(counts: &str) -> String {
    let mut out = String::new();
    let mut header_seen = false;
    let mut rows: Vec<(String, String, usize)> = Vec::new();
    for line in counts.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        if line.starts_with('#') {
            if header_seen {
                continue;
            }
            header_seen = true;
            let extra: Vec<&str> = fields.iter().skip(5).copied().collect();
            out += &format!("| kernel | grid | workgroup | dynamic_lds | {} | launches |\n", extra.join(" | "));
            out += &format!("|---|---|---|---{}|---|\n", "|---".repeat(extra.len()));
            continue;
        }
        if fields.len() < 5 {
            continue;
        }
        let key = fields[..5].join("\t");
        match rows.iter_mut().find(|(k, ..)| *k == key) {
            Some((.., times)) => *times += 1,
            None => rows.push((key, format!("| {}", fields[1..].join(" | ")), 1)),
        }
    }
    for (_, row, times) in rows {
        out += &format!("{row} | {times} |\n");
    }
    out
}

const PREDICT_USAGE: &str = "\
usage: cargo xtask predict-gfx1151

The gfx1151 model: runs benches/gfx1151_model.rs (release) on the simulated gfx1151 with
RDNA_SIM_COUNTS collecting each launch's executed wave-instructions and its loads' bytes in
flight, and prints the predicted times. A model: nothing here runs on AMD hardware. About 5-10
minutes on two cores (the interpreter runs every launch).";

pub fn predict(args: &[String]) -> Result<()> {
    if wants_help(args, PREDICT_USAGE) {
        return Ok(());
    }
    if !args.is_empty() {
        return Err(PREDICT_USAGE.into());
    }
    let sim = Standin::install(Profile::Release, &["hip-standin"])?;
    let counts = sim.target.join("gfx1151-model-counts.tsv");
    remove(&counts)?;
    let mut bench = cargo(&sim.root);
    sim.env(&mut bench).env("MLXCEL_AMDGPU_BACKEND", "hip").env("RDNA_SIM_COUNTS", &counts).args([
        "bench",
        "--bench",
        "gfx1151_model",
    ]);
    run(&mut bench)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counts_table_keeps_one_row_per_launch_and_counts_repeats() {
        let counts = "\
# processor\tkernel\tgrid\tworkgroup\tdynamic_lds\tvalu\tsalu
gfx1151\txielu_bf16\t11x1x1\t256x1x1\t0\t29432\t13944
gfx1151\txielu_bf16\t11x1x1\t256x1x1\t0\t29432\t13944
# processor\tkernel\tgrid\tworkgroup\tdynamic_lds\tvalu\tsalu
gfx1151\tprobe\t1x1x1\t64x1x1\t0\t10\t5
";
        assert_eq!(
            counts_table(counts),
            "\
| kernel | grid | workgroup | dynamic_lds | valu | salu | launches |
|---|---|---|---|---|---|---|
| xielu_bf16 | 11x1x1 | 256x1x1 | 0 | 29432 | 13944 | 2 |
| probe | 1x1x1 | 64x1x1 | 0 | 10 | 5 | 1 |
"
        );
    }

    #[test]
    fn only_the_simulated_gfx1151_through_hip_counts_as_verified() {
        assert!(on_simulated_gfx1151("...\nverified: AMD Radeon 8060S (rdna-sim) (gfx1151) through HIP\n"));
        assert!(!on_simulated_gfx1151("verified: CPU emulator (host) — not a GPU\n"));
        assert!(!on_simulated_gfx1151("verified: AMD Radeon 8060S (rdna-sim) (gfx1100) through HIP\n"));
    }
}
