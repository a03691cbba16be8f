//! Builds a Rust GPU crate (the mlxcel-amdgpu device crate) for AMD GPUs and
//! NVIDIA GPUs with its own pinned nightly toolchain, whatever toolchain runs
//! the outer build, and returns what it produced:
//!
//! ```no_run
//! # fn main() -> Result<(), String> {
//! let artifacts = gpu_builder::Builder::new("kernels-device/Cargo.toml", "target/gpu-kernels")
//!     .amdgpu_targets(["gfx1151", "gfx11-generic"])
//!     .amdgpu_launch_bounds(&[("xielu_f32", 256)])
//!     .build()?;
//! for object in &artifacts.amdgpu {
//!     println!("{}: {}", object.processor, object.path.display());
//! }
//! # Ok(()) }
//! ```
//!
//! - AMD: one code object per target processor, built with `cargo rustc
//!   --target amdgcn-amd-amdhsa -Zbuild-std=core --crate-type cdylib`; where
//!   launch bounds are given, generated again from rustc's optimized bitcode
//!   with `amdgpu-flat-work-group-size` stated on the kernels ([`edits`]) by
//!   the `llc` and `rust-lld` of the toolchain.
//! - NVIDIA ([`Builder::ptx`]): PTX from the LLVM bitcode of the crate and
//!   `core` (built with `-Clinker-plugin-lto`), linked with `llvm-link`, `opt`
//!   and `llc`, with `.maxntid`/`.minnctapersm` stated on the bounded entries.
//!
//! The toolchain ([`toolchain::PINNED`] unless [`Builder::toolchain`] names
//! another) is found through rustup and installed by it when missing, unless
//! [`toolchain::NO_INSTALL_ENV`] forbids it. Each target builds in its own
//! cargo target directory under the one given, so a rebuild with nothing
//! changed does no work. Checking what was built (the audit of the code
//! objects) is the caller's.

use std::env;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod edits;
pub mod toolchain;

pub use toolchain::{Installed, Toolchain};

/// Keeps the IR value names rustc otherwise drops, so that the metadata of
/// every kernel argument carries its `.name`. Checked on nightly-2026-05-20
/// for gfx1151, gfx11-generic and gfx12-generic: the `.text` section is
/// byte-identical with and without it; the metadata note grows by the names.
pub const KEEP_NAMES: &str = "-Zfewer-names=no";

/// The profile the device crate is built with, given to cargo as
/// configuration so that the crate needs no workspace that declares it:
/// release, one codegen unit, no incremental compilation (it crashes rustc on
/// amdgpu), no debug info, abort on panic.
pub const PROFILE: &str = "gpu-kernels";
const PROFILE_SETTINGS: &[(&str, &str)] = &[
    ("inherits", "\"release\""),
    ("incremental", "false"),
    ("codegen-units", "1"),
    ("debug", "false"),
    ("panic", "\"abort\""),
];

/// The cargo arguments that build with the GPU profile: its settings as
/// `--config` and `--profile` [`PROFILE`] (for a `cargo` of the pinned
/// toolchain run by hand or by a test).
pub fn profile_args() -> Vec<String> {
    let mut args = Vec::new();
    for (key, value) in PROFILE_SETTINGS {
        args.push("--config".to_string());
        args.push(format!("profile.{PROFILE}.{key}={value}"));
    }
    args.extend(["--profile".to_string(), PROFILE.to_string()]);
    args
}

/// The LLVM tool `name` (`llvm-objdump`, `llvm-readobj`) of the pinned
/// toolchain's `llvm-tools`, installed as the GPU build would install it.
pub fn pinned_llvm_tool(name: &str) -> Result<PathBuf, String> {
    let (toolchain, _) = Toolchain::ensure(toolchain::PINNED)?;
    let tool = toolchain.llvm_tool(name);
    if tool.exists() { Ok(tool) } else { Err(format!("{} does not exist", tool.display())) }
}

/// An AMD code object that [`Builder::build`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObjectFile {
    /// The target processor, as given (`gfx1151`, `gfx11-generic`).
    pub processor: String,
    /// The ELF file, in the builder's target directory.
    pub path: PathBuf,
}

/// What [`Builder::build`] produced.
#[derive(Debug, Clone)]
pub struct Artifacts {
    /// One code object per AMD target, in the order given.
    pub amdgpu: Vec<CodeObjectFile>,
    /// The PTX file, when [`Builder::ptx`] asked for one.
    pub ptx: Option<PathBuf>,
    /// The toolchain that built them.
    pub toolchain: Toolchain,
    /// Whether the build had to install the toolchain or components.
    pub installed: Installed,
}

/// How to build a GPU crate (see the crate's documentation).
#[derive(Debug, Clone)]
pub struct Builder {
    manifest: PathBuf,
    target_dir: PathBuf,
    toolchain: String,
    amdgpu_targets: Vec<String>,
    ptx_arch: Option<String>,
    features: Vec<String>,
    amdgpu_launch_bounds: Vec<(String, u32)>,
    wave_size: u32,
    ptx_launch_bounds: Vec<(String, u32, u32)>,
    ptx_entry_points: Vec<String>,
    keep_names: bool,
    cargo_warnings: bool,
}

impl Builder {
    /// Builds the crate of `manifest` (its `Cargo.toml`) in cargo target
    /// directories under `target_dir`, one per GPU target.
    pub fn new(manifest: impl Into<PathBuf>, target_dir: impl Into<PathBuf>) -> Builder {
        Builder {
            manifest: manifest.into(),
            target_dir: target_dir.into(),
            toolchain: toolchain::PINNED.to_string(),
            amdgpu_targets: Vec::new(),
            ptx_arch: None,
            features: Vec::new(),
            amdgpu_launch_bounds: Vec::new(),
            wave_size: 32,
            ptx_launch_bounds: Vec::new(),
            ptx_entry_points: Vec::new(),
            keep_names: true,
            cargo_warnings: false,
        }
    }

    /// The rustup toolchain to build with (default [`toolchain::PINNED`]).
    pub fn toolchain(mut self, name: impl Into<String>) -> Builder {
        self.toolchain = name.into();
        self
    }

    /// The AMD target processors, one code object each.
    pub fn amdgpu_targets<S: Into<String>>(mut self, targets: impl IntoIterator<Item = S>) -> Builder {
        self.amdgpu_targets = targets.into_iter().map(Into::into).collect();
        self
    }

    /// Also build PTX for the NVIDIA architecture `arch` (`sm_80`).
    pub fn ptx(mut self, arch: impl Into<String>) -> Builder {
        self.ptx_arch = Some(arch.into());
        self
    }

    /// Cargo features of the crate to enable.
    pub fn features<S: Into<String>>(mut self, features: impl IntoIterator<Item = S>) -> Builder {
        self.features = features.into_iter().map(Into::into).collect();
        self
    }

    /// The largest workgroup of each named AMD kernel, stated to LLVM as
    /// `amdgpu-flat-work-group-size` (whole waves of 32 lanes unless
    /// [`Builder::wave_size`] says otherwise). None given: rustc's code
    /// objects as they are.
    pub fn amdgpu_launch_bounds(mut self, bounds: &[(&str, u32)]) -> Builder {
        self.amdgpu_launch_bounds = bounds.iter().map(|&(k, s)| (k.to_string(), s)).collect();
        self
    }

    /// The lanes of an AMD wave the launch bounds are checked against (32).
    pub fn wave_size(mut self, lanes: u32) -> Builder {
        self.wave_size = lanes;
        self
    }

    /// `(entry, threads, workgroups per SM)` of each bounded PTX entry, stated
    /// as `.maxntid` and `.minnctapersm`; every one must be in the PTX.
    pub fn ptx_launch_bounds(mut self, bounds: &[(&str, u32, u32)]) -> Builder {
        self.ptx_launch_bounds = bounds.iter().map(|&(k, s, m)| (k.to_string(), s, m)).collect();
        self
    }

    /// The PTX entry points: everything else is internalized and dropped.
    pub fn ptx_entry_points<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Builder {
        self.ptx_entry_points = names.into_iter().map(Into::into).collect();
        self
    }

    /// Whether to keep the IR value names (default yes: [`KEEP_NAMES`]).
    pub fn keep_names(mut self, keep: bool) -> Builder {
        self.keep_names = keep;
        self
    }

    /// Whether to print `cargo::warning=` lines (from a build script) when the
    /// build installs the toolchain (default no).
    pub fn cargo_warnings(mut self, yes: bool) -> Builder {
        self.cargo_warnings = yes;
        self
    }

    /// Builds every target. The AMD targets build at once, one thread each
    /// (each is one single-threaded rustc for most of its time).
    pub fn build(&self) -> Result<Artifacts, String> {
        if self.amdgpu_targets.is_empty() && self.ptx_arch.is_none() {
            return Err("the GPU build was given no target".into());
        }
        for t in &self.amdgpu_targets {
            check_processor(t)?;
        }
        if !self.manifest.is_file() {
            return Err(format!("the GPU crate's manifest {} does not exist", self.manifest.display()));
        }
        let (toolchain, installed) = Toolchain::ensure(&self.toolchain)?;
        if let (true, Installed::Now(what)) = (self.cargo_warnings, &installed) {
            println!(
                "cargo::warning=mlxcel-amdgpu: the GPU kernels need the Rust toolchain {}: {what}",
                self.toolchain
            );
        }
        let manifest =
            fs::canonicalize(&self.manifest).map_err(|e| format!("cannot resolve {}: {e}", self.manifest.display()))?;
        let run = Run { builder: self, toolchain: &toolchain, manifest };
        let objects: Vec<Result<PathBuf, String>> = std::thread::scope(|scope| {
            let builds: Vec<_> = self.amdgpu_targets.iter().map(|cpu| scope.spawn(|| run.build_amdgpu(cpu))).collect();
            builds.into_iter().map(|b| b.join().unwrap_or_else(|_| Err("a GPU build thread panicked".into()))).collect()
        });
        let mut amdgpu = Vec::new();
        for (processor, path) in self.amdgpu_targets.iter().zip(objects) {
            amdgpu.push(CodeObjectFile { processor: processor.clone(), path: path? });
        }
        let ptx = match &self.ptx_arch {
            Some(arch) => Some(run.build_ptx(arch)?),
            None => None,
        };
        Ok(Artifacts { amdgpu, ptx, toolchain, installed })
    }
}

/// The AMD targets of a comma-separated `list` (from the variable `var`, named in
/// errors), or `default` when there is no list. Spaces and empty items are dropped;
/// a list that names nothing, or a name that is no AMD processor, is refused.
pub fn parse_targets(list: Option<&str>, default: &[&str], var: &str) -> Result<Vec<String>, String> {
    let Some(list) = list else {
        return Ok(default.iter().map(|s| s.to_string()).collect());
    };
    let targets: Vec<String> = list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    if targets.is_empty() {
        return Err(format!("{var} is set but names no target (example: {var}=gfx1100,gfx1151)"));
    }
    for t in &targets {
        check_processor(t).map_err(|e| format!("{var}: {e}"))?;
    }
    Ok(targets)
}

/// `<cargo target dir>/gpu-kernels` for a build script whose `OUT_DIR` is
/// `out_dir` (`<target dir>[/<triple>]/<profile>/build/<package>-<hash>/out`):
/// one directory for the debug and release builds of the host.
pub fn gpu_target_dir(out_dir: &Path) -> Result<PathBuf, String> {
    let profile_dir = out_dir
        .ancestors()
        .nth(3)
        .ok_or_else(|| format!("OUT_DIR {} has not the layout cargo gives it", out_dir.display()))?;
    Ok(profile_dir.parent().unwrap_or(profile_dir).join(PROFILE))
}

/// An AMD processor name: `gfx` and letters, digits and dashes.
pub fn check_processor(name: &str) -> Result<(), String> {
    if name.starts_with("gfx") && name.len() > 3 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        Ok(())
    } else {
        Err(format!("{name:?} is not an AMD GPU processor name like gfx1151 or gfx11-generic"))
    }
}

struct Run<'a> {
    builder: &'a Builder,
    toolchain: &'a Toolchain,
    /// The crate's manifest, absolute (as cargo names it in its messages).
    manifest: PathBuf,
}

impl Run<'_> {
    /// The toolchain's `cargo rustc` for the crate, with none of the outer
    /// build's settings.
    fn cargo(&self, target_dir: &Path, rustflags: &[&str], target: &str, crate_type: &str) -> Command {
        let mut cmd = Command::new(&self.toolchain.cargo);
        for (key, _) in env::vars_os() {
            let key = key.to_string_lossy();
            let from_outer_build = key.starts_with("CARGO_")
                && !key.starts_with("CARGO_HOME")
                && !key.starts_with("CARGO_NET")
                && !key.starts_with("CARGO_REGISTR")
                && !key.starts_with("CARGO_HTTP");
            if from_outer_build
                || matches!(
                    &*key,
                    "CARGO"
                        | "RUSTC"
                        | "RUSTDOC"
                        | "RUSTFLAGS"
                        | "RUSTDOCFLAGS"
                        | "RUSTUP_TOOLCHAIN"
                        | "TARGET"
                        | "HOST"
                        | "OUT_DIR"
                        | "PROFILE"
                        | "OPT_LEVEL"
                        | "DEBUG"
                        | "NUM_JOBS"
                        | "RUSTC_WRAPPER"
                        | "RUSTC_WORKSPACE_WRAPPER"
                        | "RUSTC_LINKER"
                )
            {
                cmd.env_remove(&*key);
            }
        }
        cmd.env("RUSTC", &self.toolchain.rustc)
            .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
            .arg("rustc")
            .arg("--manifest-path")
            .arg(&self.manifest)
            .arg("--target-dir")
            .arg(target_dir);
        cmd.args(profile_args()).args(["-Zbuild-std=core", "--message-format=json-render-diagnostics"]).args([
            "--target",
            target,
            "--crate-type",
            crate_type,
        ]);
        if !self.builder.features.is_empty() {
            cmd.arg("--features").arg(self.builder.features.join(","));
        }
        cmd
    }

    fn build_amdgpu(&self, cpu: &str) -> Result<PathBuf, String> {
        let cpu_flag = format!("-Ctarget-cpu={cpu}");
        let mut flags = vec![cpu_flag.as_str()];
        if self.builder.keep_names {
            flags.push(KEEP_NAMES);
        }
        let mut cmd = self.cargo(&self.builder.target_dir.join(cpu), &flags, "amdgcn-amd-amdhsa", "cdylib");
        // The crate's own rustc also writes the linked, optimized module as
        // bitcode, the input of the launch-bounds step, with the order of each
        // value's uses as rustc's code generation saw it (the order changes
        // register allocation).
        cmd.args(["--", "--emit=link,llvm-bc", "-Cllvm-args=-preserve-bc-uselistorder"]);
        let artifacts = run_cargo(cmd, &format!("amdgcn-amd-amdhsa ({cpu})"), &self.manifest)?;
        let elf = artifacts
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "elf"))
            .cloned()
            .ok_or_else(|| format!("cargo built no .elf code object for {cpu}"))?;
        if self.builder.amdgpu_launch_bounds.is_empty() {
            return Ok(elf);
        }
        self.with_amdgpu_launch_bounds(&elf, cpu)
    }

    /// The code object of `elf` generated again from rustc's bitcode of it with
    /// `amdgpu-flat-work-group-size` on the bounded kernels: rustc has no way to
    /// state it, and without it LLVM budgets every kernel's registers for
    /// 1024-thread workgroups. The bitcode is rustc's module after its
    /// optimizations; `llc` and `rust-lld` finish it with rustc's options, so
    /// that without the attribute the result is rustc's code object byte for
    /// byte (checked on nightly-2026-05-20 for gfx11-generic).
    fn with_amdgpu_launch_bounds(&self, elf: &Path, cpu: &str) -> Result<PathBuf, String> {
        self.require_tools(&["llvm-dis", "llc", "rust-lld"], "for the AMD launch bounds")?;
        let deps = elf.parent().map(|d| d.join("deps")).ok_or_else(|| format!("{} has no directory", elf.display()))?;
        let stem = elf.file_stem().and_then(OsStr::to_str).unwrap_or("kernels_device");
        let bitcode = deps.join(format!("{stem}.bc"));
        if !bitcode.exists() {
            return Err(format!(
                "rustc wrote no bitcode {} next to the code object {}; remove {} and build again",
                bitcode.display(),
                elf.display(),
                deps.display()
            ));
        }
        let work = deps.join("launch-bounds");
        fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
        let text = work.join(format!("{stem}.ll"));
        run_tool(
            Command::new(self.toolchain.llvm_tool("llvm-dis"))
                .arg("--preserve-ll-uselistorder")
                .arg(&bitcode)
                .arg("-o")
                .arg(&text),
        )?;
        let ir = fs::read_to_string(&text).map_err(|e| format!("cannot read {}: {e}", text.display()))?;
        let bounds: Vec<(&str, u32)> =
            self.builder.amdgpu_launch_bounds.iter().map(|(k, s)| (k.as_str(), *s)).collect();
        // An object may hold none of the bounded kernels: it stays rustc's.
        let Some(bounded_ir) = edits::with_flat_work_group_sizes(&ir, &bounds, self.builder.wave_size)? else {
            return Ok(elf.to_path_buf());
        };
        let bounded = work.join(format!("{stem}.bounded.ll"));
        fs::write(&bounded, bounded_ir).map_err(|e| format!("cannot write {}: {e}", bounded.display()))?;
        let object = work.join(format!("{stem}.o"));
        run_tool(
            Command::new(self.toolchain.llvm_tool("llc"))
                .args(["-mtriple=amdgcn-amd-amdhsa", &format!("-mcpu={cpu}"), "-O3", "-filetype=obj"])
                .args(["-relocation-model=pic", "-function-sections", "-data-sections"])
                .arg(&bounded)
                .arg("-o")
                .arg(&object),
        )?;
        let linked = work.join(format!("{stem}.elf"));
        run_tool(
            Command::new(self.toolchain.llvm_tool("rust-lld"))
                .args(["-flavor", "gnu", "-shared", "--gc-sections", "-O1", "--strip-debug", "-z", "noexecstack"])
                .arg(&object)
                .arg("-o")
                .arg(&linked),
        )?;
        Ok(linked)
    }

    /// An error naming the first of `tools` missing from the `llvm-tools`
    /// component, and what it is `needed` for.
    fn require_tools(&self, tools: &[&str], needed: &str) -> Result<(), String> {
        match tools.iter().find(|tool| !self.toolchain.llvm_tool(tool).exists()) {
            Some(tool) => Err(format!(
                "{tool} is missing from {} (needed {needed}).\nInstall it with: rustup component add --toolchain {} llvm-tools",
                self.toolchain.llvm_bin.display(),
                self.toolchain.name
            )),
            None => Ok(()),
        }
    }

    fn build_ptx(&self, arch: &str) -> Result<PathBuf, String> {
        self.require_tools(&["llvm-link", "opt", "llc", "llvm-ar"], "to link the PTX")?;
        if self.builder.ptx_entry_points.is_empty() {
            return Err("the PTX build was given no entry points".into());
        }
        let dir = self.builder.target_dir.join(arch);
        let cpu_flag = format!("-Ctarget-cpu={arch}");
        let cmd = self.cargo(&dir, &[&cpu_flag, "-Clinker-plugin-lto"], "nvptx64-nvidia-cuda", "rlib");
        let rlibs: Vec<PathBuf> = run_cargo(cmd, "nvptx64-nvidia-cuda", &self.manifest)?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rlib"))
            .collect();

        // Every rlib holds LLVM bitcode objects (linker-plugin LTO): extract and link them.
        let work = dir.join("ptx-link");
        let _ = fs::remove_dir_all(&work);
        let mut objects = Vec::new();
        for (i, rlib) in rlibs.iter().enumerate() {
            let dir = work.join(i.to_string());
            fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            run_tool(Command::new(self.toolchain.llvm_tool("llvm-ar")).arg("x").arg(rlib).current_dir(&dir))?;
            for entry in fs::read_dir(&dir).map_err(|e| e.to_string())? {
                let path = entry.map_err(|e| e.to_string())?.path();
                if path.extension().is_some_and(|e| e == "o") {
                    objects.push(path);
                }
            }
        }
        let linked = work.join("linked.bc");
        run_tool(Command::new(self.toolchain.llvm_tool("llvm-link")).args(&objects).arg("-o").arg(&linked))?;
        // Keep only the kernel entry points, drop everything they do not reach, optimize.
        let optimized = work.join("optimized.bc");
        run_tool(
            Command::new(self.toolchain.llvm_tool("opt"))
                .arg("-passes=internalize,globaldce,default<O3>")
                .arg(format!("-internalize-public-api-list={}", self.builder.ptx_entry_points.join(",")))
                .arg(&linked)
                .arg("-o")
                .arg(&optimized),
        )?;
        let ptx = work.join(format!("kernels_{arch}.ptx"));
        // No contraction of a*b+c into fma: the bit-exact contracts say where fma is.
        run_tool(
            Command::new(self.toolchain.llvm_tool("llc"))
                .args([format!("-mcpu={arch}").as_str(), "-O3", "--nvptx-fma-level=0", "--fp-contract=off"])
                .arg(&optimized)
                .arg("-o")
                .arg(&ptx),
        )?;
        let text = fs::read_to_string(&ptx).map_err(|e| format!("cannot read {}: {e}", ptx.display()))?;
        let entries: Vec<&str> = self.builder.ptx_entry_points.iter().map(String::as_str).collect();
        edits::check_ptx(&text, &entries)?;
        let bounds: Vec<(&str, u32, u32)> =
            self.builder.ptx_launch_bounds.iter().map(|(k, s, m)| (k.as_str(), *s, *m)).collect();
        fs::write(&ptx, edits::with_ptx_launch_bounds(&text, &bounds)?).map_err(|e| e.to_string())?;
        Ok(ptx)
    }
}

/// Runs cargo with JSON messages; returns the files of the artifacts of the
/// crate of `manifest` and of `core` and `compiler_builtins` (for the PTX link).
fn run_cargo(mut cmd: Command, what: &str, manifest: &Path) -> Result<Vec<PathBuf>, String> {
    let out = cmd.output().map_err(|e| format!("cannot run cargo for {what}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("cargo failed for {what}:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut files = Vec::new();
    let ours = format!("\"manifest_path\":\"{}\"", manifest.display());
    for line in stdout.lines().filter(|l| l.contains("\"reason\":\"compiler-artifact\"")) {
        let wanted = line.contains(&ours) || ["/core#", "core@", "compiler_builtins"].iter().any(|p| line.contains(p));
        if !wanted {
            continue;
        }
        // Minimal extraction of the "filenames" array: paths are JSON strings without escapes here.
        if let Some(start) = line.find("\"filenames\":[") {
            let rest = &line[start + 13..];
            let end = rest.find(']').unwrap_or(rest.len());
            files.extend(rest[..end].split(',').map(|s| PathBuf::from(s.trim().trim_matches('"'))));
        }
    }
    Ok(files)
}

fn run_tool(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{:?} failed:\n{}", cmd.get_program(), String::from_utf8_lossy(&out.stderr)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processor_names() {
        for ok in ["gfx1151", "gfx11-generic", "gfx12-generic", "gfx1100"] {
            check_processor(ok).unwrap();
        }
        for bad in ["sm_80", "gfx", "gfx11 51", ""] {
            assert!(check_processor(bad).unwrap_err().contains("is not an AMD GPU processor"), "{bad}");
        }
    }

    #[test]
    fn target_lists() {
        let default = &["gfx1151", "gfx11-generic"];
        assert_eq!(parse_targets(None, default, "V").unwrap(), default);
        assert_eq!(parse_targets(Some(" gfx1100, gfx1151 ,"), default, "V").unwrap(), ["gfx1100", "gfx1151"]);
        assert!(parse_targets(Some(" , "), default, "V").unwrap_err().contains("V is set but names no target"));
        let err = parse_targets(Some("gfx1151,sm_80"), default, "V").unwrap_err();
        assert!(err.contains("V: \"sm_80\" is not an AMD GPU"), "{err}");
        assert!(parse_targets(Some("gfx11 51"), default, "V").is_err());
    }

    #[test]
    fn gpu_target_dir_from_out_dir() {
        let out = Path::new("/t/debug/build/mlxcel-amdgpu-0123/out");
        assert_eq!(gpu_target_dir(out).unwrap(), Path::new("/t/gpu-kernels"));
        let out = Path::new("/t/x86_64-unknown-linux-gnu/release/build/mlxcel-amdgpu-0123/out");
        assert_eq!(gpu_target_dir(out).unwrap(), Path::new("/t/x86_64-unknown-linux-gnu/gpu-kernels"));
        assert!(gpu_target_dir(Path::new("out")).is_err());
    }

    #[test]
    fn a_build_without_targets_or_manifest_is_refused() {
        let err = Builder::new("Cargo.toml", "/nonexistent").build().unwrap_err();
        assert!(err.contains("no target"), "{err}");
        let err = Builder::new("/nonexistent/Cargo.toml", "/nonexistent").amdgpu_targets(["gfx1151"]).build();
        assert!(err.unwrap_err().contains("does not exist"));
        let err = Builder::new("Cargo.toml", "/nonexistent").amdgpu_targets(["sm_80"]).build().unwrap_err();
        assert!(err.contains("\"sm_80\" is not an AMD GPU processor"), "{err}");
    }

    /// The pinned toolchain is named once more, in `fuzz/rust-toolchain.toml`
    /// (the fuzz workspace's nightly); the two agree.
    #[test]
    fn the_fuzz_workspace_pins_the_same_toolchain() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/rust-toolchain.toml");
        let text = fs::read_to_string(&path).unwrap();
        let channel = text.lines().find_map(|l| l.trim().strip_prefix("channel = ")).unwrap();
        assert_eq!(channel.trim_matches('"'), toolchain::PINNED, "{}", path.display());
    }
}
