//! Checks that need more than `cargo test`: the CPU backend under valgrind, the PTX through
//! NVIDIA's ptxas for every architecture, the generated code against a saved baseline, the MLX
//! shim's ROCm branch against the real fork's headers.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{
    Result, cargo, cargo_messages, executables, output, repo_root, root_out_dir, run, scratch_dir, target_dir,
    wants_help,
};

const LEAK_USAGE: &str = "\
usage: cargo xtask leak-check

valgrind's memcheck over (1) the concurrency case of tests/concurrency.rs on the CPU backend (8
threads, mixed kernels and dtypes; LAUNCHES launches, default 100: under valgrind a launch is
about 50 times slower, and every code path of the case is taken by far fewer than the 10,000 of
`cargo test`) and (2) the C ABI consumer (tests/cpp/consumer.cpp) built against the debug
libmlxcel_amdgpu.so. Fails on any definite or indirect leak and any memory error; memory still
reachable at exit (the process-wide device, the emulator's pooled lane stacks, thread-local error
slots) is not a leak. Needs valgrind and a C++ compiler (CXX, default c++).";

pub fn leak_check(args: &[String]) -> Result<()> {
    if wants_help(args, LEAK_USAGE) {
        return Ok(());
    }
    if !args.is_empty() {
        return Err(LEAK_USAGE.into());
    }
    let root = repo_root()?;
    let target = target_dir(&root)?;
    let launches = std::env::var("LAUNCHES").unwrap_or_else(|_| "100".into());
    let valgrind = |cmd: &Path| {
        let mut c = Command::new("valgrind");
        c.args([
            "--quiet",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--errors-for-leak-kinds=definite,indirect",
            "--error-exitcode=99",
        ])
        .arg(cmd);
        c
    };

    run(cargo(&root).args(["build", "--lib"]))?;
    let mut build = cargo(&root);
    build.args(["test", "--no-run", "--test", "concurrency"]);
    let exe = executables(&cargo_messages(build)?)
        .into_iter()
        .find(|e| e.kind == "test" && e.name == "concurrency")
        .ok_or("cargo built no concurrency test")?
        .path;
    println!("== valgrind: {}, CPU case, {launches} launches", exe.display());
    run(valgrind(&exe).env("MLXCEL_AMDGPU_CONCURRENCY_LAUNCHES", &launches).args([
        "--exact",
        "eight_threads_on_their_own_streams_match_one_thread::cpu",
        "--test-threads=1",
    ]))?;

    // The library installed under its SONAME (build.rs sets it; it moves with the ABI version).
    let tmp = scratch_dir(&target, "leak-check")?;
    let lib = target.join("debug/libmlxcel_amdgpu.so");
    let soname = soname(&output(Command::new("readelf").arg("-d").arg(&lib))?)
        .ok_or_else(|| format!("{} has no SONAME", lib.display()))?;
    fs::copy(&lib, tmp.join(&soname))?;
    symlink(&soname, tmp.join("libmlxcel_amdgpu.so"))?;
    let consumer = tmp.join("consumer");
    run(Command::new(std::env::var_os("CXX").unwrap_or_else(|| "c++".into()))
        .current_dir(&root)
        .args(["-std=c++17", "-O1", "-ffp-contract=off", "-Wall", "-Werror", "-I", "include", "tests/cpp/consumer.cpp"])
        .arg("-L")
        .arg(&tmp)
        .arg(format!("-Wl,-rpath,{}", tmp.display()))
        .arg("-lmlxcel_amdgpu")
        .arg("-o")
        .arg(&consumer))?;
    println!("== valgrind: the C ABI consumer");
    run(valgrind(&consumer).env_remove("MLXCEL_AMDGPU_BACKEND"))?;
    fs::remove_dir_all(&tmp)?;
    println!("leak check: no leaks, no memory errors");
    Ok(())
}

/// The SONAME in `readelf -d`'s output.
fn soname(dynamic: &str) -> Option<String> {
    let line = dynamic.lines().find(|l| l.contains("Library soname: ["))?;
    let start = line.find('[')? + 1;
    let end = line[start..].find(']')? + start;
    Some(line[start..end].to_string())
}

const PTX_USAGE: &str = "\
usage: cargo xtask ptx-spills [ARCH...]

Every kernel of the shipped PTX, compiled by NVIDIA's ptxas for each architecture the CUDA backend
runs on (default sm_80 sm_86 sm_87 sm_89 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121, or ARCHS or the
arguments), must use no local memory (register spills or a stack): the backend refuses such a
kernel when it loads the module, and a family with one refused kernel is unavailable on that GPU.
The PTX targets sm_80 and the driver compiles it for the GPU at hand; registers differ by
architecture (geometry::NVIDIA_LAUNCH_BOUNDS caps them), so each is checked. ptxas comes from
NVIDIA's PyPI wheel nvidia-cuda-nvcc 13.0.88, installed into <target>/ci-cuda; no GPU is needed.
The PTX is that of a debug `cargo build --features cuda` (the same file in either profile).";

const ARCHS: &str = "sm_80 sm_86 sm_87 sm_89 sm_90 sm_100 sm_103 sm_110 sm_120 sm_121";

pub fn ptx_spills(args: &[String]) -> Result<()> {
    if wants_help(args, PTX_USAGE) {
        return Ok(());
    }
    let archs: Vec<String> = if args.is_empty() {
        std::env::var("ARCHS").unwrap_or_else(|_| ARCHS.into()).split_whitespace().map(str::to_string).collect()
    } else {
        args.to_vec()
    };
    let root = repo_root()?;
    let target = target_dir(&root)?;
    let wheel = target.join("ci-cuda");
    let ptxas = wheel.join("nvidia/cu13/bin/ptxas");
    if !ptxas.exists() {
        run(Command::new("python3")
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "--root-user-action=ignore"])
            .args(["--no-deps", "--target"])
            .arg(&wheel)
            .arg("nvidia-cuda-nvcc==13.0.88"))?;
    }
    fs::set_permissions(&ptxas, fs::Permissions::from_mode(0o755))?;

    // The default members, as `cargo test` built them: their dependencies' features stay the same.
    let mut build = cargo(&root);
    build.args(["build", "--features", "cuda"]);
    let ptx = root_out_dir(&cargo_messages(build)?)?.join("kernels_sm_80.ptx");
    if !ptx.exists() {
        return Err(format!("ptx-spills: no PTX at {}", ptx.display()).into());
    }
    // ptxas takes 10-40 s an architecture on this PTX and uses one core: the architectures split
    // in one run of neighbours a core, reported in their order. (Errors are strings: they cross
    // threads.)
    let ptxas_for = |arch: &String| -> std::result::Result<PtxasReport, String> {
        let out = Command::new(&ptxas)
            .arg(format!("-arch={arch}"))
            .arg("-v")
            .arg(&ptx)
            .args(["-o", "/dev/null"])
            .output()
            .map_err(|e| format!("{arch}: cannot run {}: {e}", ptxas.display()))?;
        let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if !out.status.success() {
            return Err(format!("{arch}: ptxas failed\n{report}"));
        }
        Ok(PtxasReport::parse(&report))
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_core = archs.len().div_ceil(cores).max(1);
    let reports: Vec<_> = std::thread::scope(|scope| {
        let runs: Vec<_> =
            archs.chunks(per_core).map(|run| scope.spawn(|| run.iter().map(ptxas_for).collect::<Vec<_>>())).collect();
        runs.into_iter().flat_map(|run| run.join().expect("a ptxas thread panicked")).collect()
    });
    let mut spilled = false;
    for (arch, report) in archs.iter().zip(reports) {
        let summary = report?;
        println!("{}", summary.line(arch));
        spilled |= !summary.local_memory.is_empty();
    }
    if spilled {
        return Err("ptx-spills: the kernels above use local memory; the CUDA backend would refuse them".into());
    }
    Ok(())
}

/// What `ptxas -v` says of each kernel: how many, the most registers and whose, and every kernel
/// with a stack frame or spills.
#[derive(Debug, Default, PartialEq)]
struct PtxasReport {
    kernels: usize,
    most_registers: u32,
    most_registers_kernel: String,
    local_memory: Vec<String>,
}

impl PtxasReport {
    /// Per kernel, ptxas -v prints "Compiling entry function 'k'", then "N bytes stack frame,
    /// S bytes spill stores, L bytes spill loads", then "Used R registers, ...".
    fn parse(report: &str) -> PtxasReport {
        let number_before = |line: &str, what: &str| -> u64 {
            line.find(what)
                .and_then(|at| line[..at].split_whitespace().last())
                .and_then(|n| n.trim_start_matches(',').parse().ok())
                .unwrap_or(0)
        };
        let mut r = PtxasReport::default();
        let mut kernel = String::new();
        for line in report.lines() {
            if line.contains("Compiling entry function") {
                kernel = line.split('\'').nth(1).unwrap_or("?").to_string();
                r.kernels += 1;
            } else if line.contains("bytes stack frame") {
                let stack = number_before(line, "bytes stack frame");
                let stores = number_before(line, "bytes spill stores");
                let loads = number_before(line, "bytes spill loads");
                if stack + stores + loads != 0 {
                    r.local_memory
                        .push(format!("{kernel} ({stack} B stack, {stores} B spill stores, {loads} B spill loads)"));
                }
            } else if let Some(at) = line.find("Used ") {
                let registers = line[at + 5..].split_whitespace().next().and_then(|n| n.parse().ok());
                if let Some(n) = registers.filter(|&n| n > r.most_registers) {
                    r.most_registers = n;
                    r.most_registers_kernel = kernel.clone();
                }
            }
        }
        r
    }

    fn line(&self, arch: &str) -> String {
        let mut line = format!(
            "{arch}: {} kernels, most registers {} ({})",
            self.kernels, self.most_registers, self.most_registers_kernel
        );
        if !self.local_memory.is_empty() {
            line += &format!("; LOCAL MEMORY: {}", self.local_memory.join(", "));
        }
        line
    }
}

const CODEGEN_USAGE: &str = "\
usage: cargo xtask codegen save|compare [DIR] [--no-build]

Saves or compares the generated GPU code: the AMD code objects (gfx1151, gfx11-generic,
gfx12-generic) and the PTX (sm_80) of a debug `cargo build --features cuda`. DIR defaults to
<target>/codegen-baseline. `compare` checks each code object byte for byte and, when the bytes
differ, its .text disassembly (llvm-objdump -d) and its notes (llvm-readobj --notes) apart, so that
a difference in metadata alone can be told from one in code; the PTX must be identical text. Fails
unless every artifact's code is identical. --no-build uses what the last such build wrote.";

const CODE_OBJECTS: [&str; 3] = ["gfx1151", "gfx11-generic", "gfx12-generic"];
const PTX: &str = "kernels_sm_80.ptx";

pub fn codegen(args: &[String]) -> Result<()> {
    if wants_help(args, CODEGEN_USAGE) {
        return Ok(());
    }
    let no_build = args.iter().any(|a| a == "--no-build");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--no-build").collect();
    let (mode, dir) = match rest.as_slice() {
        [mode] => (mode.as_str(), None),
        [mode, dir] => (mode.as_str(), Some(PathBuf::from(dir))),
        _ => return Err(CODEGEN_USAGE.into()),
    };
    if mode != "save" && mode != "compare" {
        return Err(CODEGEN_USAGE.into());
    }
    let root = repo_root()?;
    let target = target_dir(&root)?;
    let dir = dir.unwrap_or_else(|| target.join("codegen-baseline"));
    let out = if no_build {
        crate::util::newest_build_output(&target, "debug", PTX)?.parent().unwrap().to_path_buf()
    } else {
        let mut build = cargo(&root);
        build.args(["build", "--features", "cuda"]);
        root_out_dir(&cargo_messages(build)?)?
    };
    eprintln!("artifacts from {}", out.display());
    if mode == "save" {
        fs::create_dir_all(&dir)?;
        for t in CODE_OBJECTS {
            fs::copy(out.join(format!("{t}.hsaco")), dir.join(format!("{t}.hsaco")))?;
        }
        fs::copy(out.join(PTX), dir.join(PTX))?;
        eprintln!("saved to {}", dir.display());
        return Ok(());
    }

    // A tool of the pinned toolchain's llvm-tools; its output without its first two lines, which
    // name the file.
    let text_of = |tool: &str, args: &[&str], file: &Path| -> Result<String> {
        let text = output(Command::new(gpu_builder::pinned_llvm_tool(tool)?).args(args).arg(file))?;
        Ok(text.lines().skip(2).collect::<Vec<_>>().join("\n"))
    };
    let mut same = true;
    for t in CODE_OBJECTS {
        let (old, new) = (dir.join(format!("{t}.hsaco")), out.join(format!("{t}.hsaco")));
        if fs::read(&old)? == fs::read(&new)? {
            println!("{t}.hsaco: identical bytes");
            continue;
        }
        let mcpu = format!("--mcpu={t}");
        let (old_s, new_s) =
            (text_of("llvm-objdump", &["-d", &mcpu], &old)?, text_of("llvm-objdump", &["-d", &mcpu], &new)?);
        let (old_n, new_n) =
            (text_of("llvm-readobj", &["--notes"], &old)?, text_of("llvm-readobj", &["--notes"], &new)?);
        let text = if old_s == new_s {
            "identical .text disassembly".to_string()
        } else {
            same = false;
            format!("DIFFERENT .text disassembly ({} lines)", changed_lines(&old_s, &new_s))
        };
        let notes = if old_n == new_n { "identical notes" } else { "different notes" };
        println!("{t}.hsaco: bytes differ; {text}, {notes}");
    }
    let (old, new) = (fs::read_to_string(dir.join(PTX))?, fs::read_to_string(out.join(PTX))?);
    if old == new {
        println!("{PTX}: identical");
    } else {
        same = false;
        println!("{PTX}: DIFFERENT ({} lines)", changed_lines(&old, &new));
    }
    if same { Ok(()) } else { Err("codegen: the generated code differs from the baseline".into()) }
}

/// Lines in one text and not the other, counted as a multiset difference: a measure of the size
/// of a change, not a diff.
fn changed_lines(a: &str, b: &str) -> usize {
    let mut count = std::collections::HashMap::<&str, i64>::new();
    for l in a.lines() {
        *count.entry(l).or_default() += 1;
    }
    for l in b.lines() {
        *count.entry(l).or_default() -= 1;
    }
    count.values().map(|c| c.unsigned_abs() as usize).sum()
}

const FORK_USAGE: &str = "\
usage: cargo xtask fork-headers --overlay DIR --mlx DIR --fork DIR [options]

Compiles the MLX shim's ROCm branch, and the declarations of the fork double in
tests/mlx_rocm_double, against the real headers of mlxcel's MLX-ROCm backend (g++ -fsyntax-only):
scripts/check-shim-against-fork-headers.sh, which `--help` there describes, with where to get each
input.";

pub fn fork_headers(args: &[String]) -> Result<()> {
    if args.is_empty() || args == ["--help"] || args == ["-h"] {
        println!("{FORK_USAGE}\n");
    }
    let root = repo_root()?;
    run(Command::new("bash").current_dir(&root).arg("scripts/check-shim-against-fork-headers.sh").args(args))
}

const SASS_USAGE: &str = "\
usage: cargo xtask sass-stalls LISTING START END

ptxas's fixed waits summed over a loop of a `cuobjdump -sass` listing, from the instruction at
address START to END: the static cycles one warp waits in that loop, a floor that no number of
resident warps lowers (scripts/sass-static-stalls.py).";

pub fn sass_stalls(args: &[String]) -> Result<()> {
    if wants_help(args, SASS_USAGE) {
        return Ok(());
    }
    if args.len() != 3 {
        return Err(SASS_USAGE.into());
    }
    let root = repo_root()?;
    run(Command::new("python3").arg(root.join("scripts/sass-static-stalls.py")).args(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_reports_name_the_kernels_with_local_memory() {
        let report = "\
ptxas info    : Compiling entry function 'xielu_f32' for 'sm_90'
ptxas info    : Function properties for xielu_f32
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 48 registers, used 0 barriers, 380 bytes cmem[0]
ptxas info    : Compiling entry function 'add3_layer_norm_bf16' for 'sm_90'
ptxas info    : Function properties for add3_layer_norm_bf16
    12 bytes stack frame, 0 bytes spill stores, 28 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'mamba1_scan_bf16' for 'sm_90'
ptxas info    : Function properties for mamba1_scan_bf16
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 121 registers, used 0 barriers, 420 bytes cmem[0]
";
        let r = PtxasReport::parse(report);
        assert_eq!(r.kernels, 3);
        assert_eq!((r.most_registers, r.most_registers_kernel.as_str()), (121, "mamba1_scan_bf16"));
        assert_eq!(r.local_memory, ["add3_layer_norm_bf16 (12 B stack, 0 B spill stores, 28 B spill loads)"]);
        assert!(
            r.line("sm_90")
                .ends_with("; LOCAL MEMORY: add3_layer_norm_bf16 (12 B stack, 0 B spill stores, 28 B spill loads)")
        );
        let clean =
            PtxasReport::parse(&report.replace("12 bytes stack", "0 bytes stack").replace("28 bytes", "0 bytes"));
        assert!(clean.local_memory.is_empty());
        assert_eq!(clean.line("sm_90"), "sm_90: 3 kernels, most registers 121 (mamba1_scan_bf16)");
    }

    #[test]
    fn the_soname_is_read_from_readelf() {
        let dynamic = " 0x000000000000000e (SONAME)             Library soname: [libmlxcel_amdgpu.so.3]\n";
        assert_eq!(soname(dynamic).as_deref(), Some("libmlxcel_amdgpu.so.3"));
        assert_eq!(soname("nothing"), None);
    }

    #[test]
    fn changed_lines_count_both_sides() {
        assert_eq!(changed_lines("a\nb\nc", "a\nb\nc"), 0);
        assert_eq!(changed_lines("a\nb\nc", "a\nx\nc"), 2);
        assert_eq!(changed_lines("a", "a\na"), 1);
    }
}
