//! The pinned nightly toolchain that compiles the device crate for the GPU
//! targets, found (and installed where allowed) through rustup, whatever
//! toolchain runs the outer build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The toolchain the GPU code is compiled with: rustc 1.97.0-nightly
/// (e50aa6fba 2026-05-19), the compiler the code objects, the audit and the
/// GPU runs were verified with. `fuzz/rust-toolchain.toml` names the same one
/// (a test checks it).
pub const PINNED: &str = "nightly-2026-05-20";

/// The components the GPU build needs: `rust-src` for `-Zbuild-std=core`,
/// `llvm-tools` for the launch-bounds step and the PTX link.
pub const COMPONENTS: &[&str] = &["rust-src", "llvm-tools"];

/// Set to `1` to forbid the build to install the toolchain: it stops with the
/// command to run instead.
pub const NO_INSTALL_ENV: &str = "MLXCEL_AMDGPU_NO_TOOLCHAIN_INSTALL";

/// The one command that installs `name` with what the GPU build needs.
pub fn install_command(name: &str) -> String {
    format!("rustup toolchain install {name} --profile minimal --component {}", COMPONENTS.join(","))
}

/// A toolchain ready for the GPU build: its cargo, its rustc and the
/// directory of its LLVM tools.
#[derive(Debug, Clone)]
pub struct Toolchain {
    pub name: String,
    pub cargo: PathBuf,
    pub rustc: PathBuf,
    pub llvm_bin: PathBuf,
}

/// What [`Toolchain::ensure`] had to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// The toolchain and its components were there.
    AlreadyThere,
    /// It installed the toolchain or components; the string says what.
    Now(String),
}

impl Toolchain {
    /// Finds `name` through rustup; if it or one of [`COMPONENTS`] is missing,
    /// installs it with rustup unless [`NO_INSTALL_ENV`] is `1`, in which case
    /// the error gives the command to run.
    pub fn ensure(name: &str) -> Result<(Toolchain, Installed), String> {
        let may_install = env::var(NO_INSTALL_ENV).map(|v| v != "1").unwrap_or(true);
        let mut installed = Installed::AlreadyThere;
        let toolchain = match Toolchain::find(name)? {
            Some(t) => t,
            None => {
                if !may_install {
                    return Err(format!(
                        "the GPU kernels are compiled by the Rust toolchain {name}, which is not installed \
                         ({NO_INSTALL_ENV}=1 forbids the build to install it). Install it with:\n\n    {}\n",
                        install_command(name)
                    ));
                }
                rustup(&["toolchain", "install", name, "--profile", "minimal", "--component", &COMPONENTS.join(",")])?;
                installed = Installed::Now(format!("installed the Rust toolchain {name} with rustup"));
                Toolchain::find(name)?.ok_or_else(|| format!("rustup installed {name} but cannot find it"))?
            }
        };
        let missing = toolchain.missing_components()?;
        if !missing.is_empty() {
            if !may_install {
                return Err(format!(
                    "the Rust toolchain {name} lacks {} ({NO_INSTALL_ENV}=1 forbids the build to add it). \
                     Add it with:\n\n    rustup component add --toolchain {name} {}\n",
                    missing.join(" and "),
                    missing.join(" ")
                ));
            }
            let mut args = vec!["component", "add", "--toolchain", name];
            args.extend(missing.iter().copied());
            rustup(&args)?;
            let still = toolchain.missing_components()?;
            if !still.is_empty() {
                return Err(format!("rustup added {} to {name}, yet it still lacks it", still.join(" and ")));
            }
            let what = format!("added {} to the Rust toolchain {name} with rustup", missing.join(" and "));
            installed = match installed {
                Installed::Now(before) => Installed::Now(format!("{before}; {what}")),
                Installed::AlreadyThere => Installed::Now(what),
            };
        }
        Ok((toolchain, installed))
    }

    /// `name` as rustup has it installed, or `None` if it is not.
    pub fn find(name: &str) -> Result<Option<Toolchain>, String> {
        // Auto-install off: `rustup which` would otherwise install a missing toolchain unasked.
        let out = Command::new(rustup_program())
            .args(["which", "--toolchain", name, "rustc"])
            .env_remove("RUSTUP_TOOLCHAIN")
            .env("RUSTUP_AUTO_INSTALL", "0")
            .env("RUST_BACKTRACE", "0")
            .output()
            .map_err(|e| {
                format!(
                    "cannot run rustup ({e}): the GPU kernels are compiled by the Rust toolchain {name}, which the \
                     build finds through rustup. Install rustup (https://rustup.rs), or build from pre-built code \
                     objects (MLXCEL_AMDGPU_PREBUILT_DIR, see the crate's documentation)"
                )
            })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("is not installed") {
                return Ok(None);
            }
            return Err(format!("`rustup which --toolchain {name} rustc` failed:\n{stderr}"));
        }
        let rustc = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let bin = rustc.parent().ok_or_else(|| format!("rustup names {} for rustc", rustc.display()))?;
        let cargo = bin.join(format!("cargo{}", env::consts::EXE_SUFFIX));
        if !cargo.exists() {
            return Err(format!("the toolchain {name} has no cargo at {}", cargo.display()));
        }
        let version = capture(Command::new(&rustc).arg("-vV"))?;
        if !version.contains("-nightly") && !version.contains("-dev") {
            return Err(format!("the GPU targets need a nightly rustc; {name} is:\n{version}"));
        }
        let host = version
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .ok_or_else(|| format!("{} -vV names no host:\n{version}", rustc.display()))?;
        let sysroot = PathBuf::from(capture(Command::new(&rustc).args(["--print", "sysroot"]))?.trim());
        let llvm_bin = sysroot.join("lib/rustlib").join(host).join("bin");
        Ok(Some(Toolchain { name: name.to_string(), cargo, rustc, llvm_bin }))
    }

    /// The sysroot, two levels above rustc.
    fn sysroot(&self) -> Option<&Path> {
        self.rustc.parent()?.parent()
    }

    /// The [`COMPONENTS`] this toolchain lacks.
    pub fn missing_components(&self) -> Result<Vec<&'static str>, String> {
        let sysroot = self.sysroot().ok_or_else(|| format!("{} has no sysroot", self.rustc.display()))?;
        let mut missing = Vec::new();
        if !sysroot.join("lib/rustlib/src/rust/library/core/Cargo.toml").exists() {
            missing.push("rust-src");
        }
        if !self.llvm_bin.join(format!("llc{}", env::consts::EXE_SUFFIX)).exists() {
            missing.push("llvm-tools");
        }
        Ok(missing)
    }

    /// The path of the LLVM tool `name` (from `llvm-tools`).
    pub fn llvm_tool(&self, name: &str) -> PathBuf {
        self.llvm_bin.join(format!("{name}{}", env::consts::EXE_SUFFIX))
    }
}

/// `rustup`, or what `RUSTUP` names (as `cargo` honours `CARGO`).
fn rustup_program() -> PathBuf {
    env::var_os("RUSTUP").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("rustup"))
}

fn rustup(args: &[&str]) -> Result<(), String> {
    let out = Command::new(rustup_program())
        .args(args)
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .map_err(|e| format!("cannot run rustup: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`rustup {}` failed:\n{}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
    }
}

pub(crate) fn capture(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!("{:?} failed:\n{}", cmd.get_program(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_install_command_names_the_components() {
        assert_eq!(
            install_command("nightly-2026-05-20"),
            "rustup toolchain install nightly-2026-05-20 --profile minimal --component rust-src,llvm-tools"
        );
    }

    #[test]
    fn a_toolchain_that_is_not_installed_is_none() {
        // rustup answers for a toolchain it does not have without installing it.
        assert!(Toolchain::find("nightly-1999-01-01").unwrap().is_none());
    }
}
