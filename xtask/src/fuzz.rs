//! The fuzz targets of fuzz/ (docs/reliability.md, "Fuzzing"), built with the flags cargo-fuzz
//! passes, so that neither CI nor anyone else needs `cargo install cargo-fuzz`.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{Result, copy_tree, host_triple, remove, repo_root, run, scratch_dir, target_dir, wants_help};

const USAGE: &str = "\
usage: cargo xtask fuzz short [SECONDS] | long SECONDS [TARGET] | minimize [TARGET] | build

The targets: c_abi (arbitrary arguments into every C ABI function, CPU backend) and code_object
(arbitrary bytes into the ELF reader and the metadata decoder).

  short [SECONDS]       CI: each target SECONDS (default 15) from a scratch copy of the committed
                        corpus; fails on any crash, leak or broken promise; the corpus is untouched
  long SECONDS [TARGET] each target (or TARGET) SECONDS, one job, nice 10, growing a working corpus
                        under fuzz/target/work/; libFuzzer's final statistics in
                        fuzz/target/logs/TARGET.log
  minimize [TARGET]     merges the working corpus and the committed one into a minimal set and
                        replaces fuzz/corpus/TARGET with it
  build                 only builds the targets

A crash leaves its input in fuzz/artifacts/TARGET/; once fixed, copy it to
fuzz/regressions/TARGET/, where `cargo test` replays it (tests/fuzz_corpus.rs) through the same
harness (fuzz/harness/). With cargo-fuzz installed, `cd fuzz && cargo fuzz run c_abi` runs the
same targets.";

const TARGETS: [&str; 2] = ["c_abi", "code_object"];

/// The largest input libFuzzer makes for `target` (the code-object seeds are a 9 KB code object
/// and a 21 KB metadata note).
fn max_len(target: &str) -> &'static str {
    if target == "code_object" { "32768" } else { "512" }
}

struct Fuzz {
    root: PathBuf,
    bin_dir: PathBuf,
    host: String,
}

impl Fuzz {
    fn new() -> Result<Fuzz> {
        let root = repo_root()?;
        let host = host_triple()?;
        let bin_dir = root.join("fuzz/target").join(&host).join("release");
        Ok(Fuzz { root, bin_dir, host })
    }

    /// Builds both targets with cargo-fuzz 0.13's flags: sanitizer coverage, AddressSanitizer,
    /// debug assertions, `--cfg fuzzing`, release, one codegen unit.
    fn build(&self) -> Result<()> {
        let flags = [
            "-Cpasses=sancov-module",
            "-Cllvm-args=-sanitizer-coverage-level=4",
            "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
            "-Cllvm-args=-sanitizer-coverage-pc-table",
            "-Cllvm-args=-sanitizer-coverage-trace-compares",
            "--cfg fuzzing",
            "-Cllvm-args=-simplifycfg-branch-fold-threshold=0",
            "-Zsanitizer=address",
            "-Cllvm-args=-sanitizer-coverage-stack-depth",
            "-Cdebug-assertions",
            "-Ccodegen-units=1",
        ];
        // The library's GPU kernels were built by the workspace's own build: the fuzz build
        // takes them from there instead of building them again.
        let gpu_kernels = match std::env::var_os("MLXCEL_AMDGPU_GPU_TARGET_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => target_dir(&self.root)?.join("gpu-kernels"),
        };
        // cargo-fuzz's flags need a nightly: the one that compiles the GPU kernels (which
        // fuzz/rust-toolchain.toml also names, for `cargo fuzz` run by hand in fuzz/).
        let (nightly, _) = gpu_builder::Toolchain::ensure(gpu_builder::toolchain::PINNED)?;
        run(Command::new(&nightly.cargo)
            .current_dir(self.root.join("fuzz"))
            .env_remove("RUSTUP_TOOLCHAIN")
            .env("RUSTC", &nightly.rustc)
            .env("RUSTFLAGS", flags.join(" "))
            .env("MLXCEL_AMDGPU_GPU_TARGET_DIR", gpu_kernels)
            .args(["build", "--release", "--locked", "--target", &self.host, "--bins"]))
    }

    /// libFuzzer on one job: `target` for `seconds` over the corpus directories `dirs` (the
    /// first one grows).
    fn command(&self, target: &str, seconds: &str, dirs: &[&Path]) -> Result<Command> {
        let artifacts = self.root.join("fuzz/artifacts").join(target);
        fs::create_dir_all(&artifacts)?;
        let mut cmd = Command::new(self.bin_dir.join(target));
        cmd.current_dir(&self.root)
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-max_len={}", max_len(target)))
            .args(["-timeout=20", "-rss_limit_mb=4096", "-print_final_stats=1"])
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .args(dirs);
        Ok(cmd)
    }
}

/// The lines of a libFuzzer log that say how a run ended.
fn final_lines(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| (l.starts_with('#') && l.contains("DONE")) || l.starts_with("Done") || l.starts_with("stat::"))
        .collect()
}

pub fn run_task(args: &[String]) -> Result<()> {
    if wants_help(args, USAGE) {
        return Ok(());
    }
    let fuzz = Fuzz::new()?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let chosen = |t: Option<&&str>| -> Result<Vec<&'static str>> {
        match t {
            None => Ok(TARGETS.to_vec()),
            Some(t) => TARGETS
                .iter()
                .find(|k| *k == t)
                .map(|k| vec![*k])
                .ok_or_else(|| format!("fuzz: no target `{t}` (c_abi, code_object)").into()),
        }
    };
    match args.as_slice() {
        ["build"] => fuzz.build(),
        ["short"] | ["short", _] => {
            let seconds = args.get(1).copied().unwrap_or("15");
            fuzz.build()?;
            let target_dir = target_dir(&fuzz.root)?;
            for t in TARGETS {
                // A scratch copy: what the run adds is not kept.
                let work = scratch_dir(&target_dir, &format!("fuzz-{t}"))?;
                copy_tree(&fuzz.root.join("fuzz/corpus").join(t), &work)?;
                println!("fuzz {t}: {seconds}s from {} committed inputs", fs::read_dir(&work)?.count());
                let log_path = target_dir.join("xtask").join(format!("fuzz-{t}.log"));
                let log = File::create(&log_path)?;
                let status = fuzz.command(t, seconds, &[&work])?.stdout(log.try_clone()?).stderr(log).status()?;
                remove(&work)?;
                let log = fs::read_to_string(&log_path)?;
                if !status.success() {
                    let lines: Vec<&str> = log.lines().collect();
                    eprintln!("{}", lines[lines.len().saturating_sub(60)..].join("\n"));
                    return Err(format!("fuzz {t} failed ({status}): the input is in fuzz/artifacts/{t}/").into());
                }
                let done = final_lines(&log);
                let done: Vec<&str> =
                    done.into_iter().filter(|l| !l.starts_with("stat::") || l.contains("executed_units")).collect();
                println!("{}", done.join("\n"));
                remove(&log_path)?;
            }
            Ok(())
        }
        ["long", seconds] | ["long", seconds, _] => {
            let targets = chosen(args.get(2))?;
            fuzz.build()?;
            let logs = fuzz.root.join("fuzz/target/logs");
            fs::create_dir_all(&logs)?;
            for t in targets {
                let work = fuzz.root.join("fuzz/target/work").join(t);
                fs::create_dir_all(&work)?;
                let corpus = fuzz.root.join("fuzz/corpus").join(t);
                let seeds = fuzz.root.join("fuzz/target/seeds").join(t);
                let mut dirs = vec![work.as_path(), corpus.as_path()];
                if seeds.is_dir() {
                    dirs.push(seeds.as_path());
                }
                let inner = fuzz.command(t, seconds, &dirs)?;
                let log_path = logs.join(format!("{t}.log"));
                let log = File::create(&log_path)?;
                let status = Command::new("nice")
                    .args(["-n", "10"])
                    .arg(inner.get_program())
                    .args(inner.get_args())
                    .current_dir(&fuzz.root)
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    .status()?;
                if !status.success() {
                    return Err(format!("fuzz {t} failed: {}", log_path.display()).into());
                }
                println!("{}", final_lines(&fs::read_to_string(&log_path)?).join("\n"));
            }
            Ok(())
        }
        ["minimize"] | ["minimize", _] => {
            let target_dir = target_dir(&fuzz.root)?;
            for t in chosen(args.get(1))? {
                let min = scratch_dir(&target_dir, &format!("fuzz-min-{t}"))?;
                // A snapshot of the working corpus: a run still going rewrites it.
                let snap = scratch_dir(&target_dir, &format!("fuzz-snap-{t}"))?;
                copy_tree(&fuzz.root.join("fuzz/target/work").join(t), &snap)?;
                let corpus = fuzz.root.join("fuzz/corpus").join(t);
                run(Command::new(fuzz.bin_dir.join(t))
                    .arg("-merge=1")
                    .arg(format!("-max_len={}", max_len(t)))
                    .arg("-rss_limit_mb=4096")
                    .args([&min, &corpus, &snap]))?;
                remove(&snap)?;
                remove(&corpus)?;
                copy_tree(&min, &corpus)?;
                remove(&min)?;
                println!("fuzz/corpus/{t}: {} inputs", fs::read_dir(&corpus)?.count());
            }
            Ok(())
        }
        _ => Err(USAGE.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_final_lines_of_a_libfuzzer_log() {
        let log = "INFO: Seed: 1\n#2\tINITED cov: 3\n#941\tDONE   cov: 3781 ft: 7005\nDone 941 runs in 15 second(s)\nstat::number_of_executed_units: 941\nstat::peak_rss_mb: 80\n";
        assert_eq!(
            final_lines(log),
            [
                "#941\tDONE   cov: 3781 ft: 7005",
                "Done 941 runs in 15 second(s)",
                "stat::number_of_executed_units: 941",
                "stat::peak_rss_mb: 80"
            ]
        );
    }
}
