//! `cargo xtask consumer`: the crate as a dependency on mlxcel's toolchain; `cargo xtask package`:
//! the published crates package and would publish.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{Result, cargo, output, remove, repo_root, run, scratch_dir, target_dir, wants_help};

const CONSUMER_USAGE: &str = "\
usage: cargo xtask consumer

Builds and runs tests/consumer, a crate of its own pinned to mlxcel's toolchain (its
rust-toolchain.toml, installed by rustup if missing) that depends on mlxcel-amdgpu by path, as
mlxcel does: xielu on the CPU backend through the Rust API and through the C ABI from C++ compiled
by its build script. Its target directory is <target>/consumer; the GPU kernels come from
<target>/gpu-kernels, so that what the workspace's build compiled is not compiled again. Then the
offline path: `cargo check` of the consumer with MLXCEL_AMDGPU_PREBUILT_DIR naming a copy of the
code objects the build embedded (and MLXCEL_AMDGPU_NO_TOOLCHAIN_INSTALL=1), which the build audits
again instead of compiling the kernels.";

const PACKAGE_USAGE: &str = "\
usage: cargo xtask package

`cargo package` and `cargo publish --dry-run` of the crates a dependent needs (mlxcel-amdgpu,
kernels-device, mlxcel-amdgpu-code-object, mlxcel-amdgpu-builder): each packs, and builds from
its package alone, the GPU kernels included (with the pinned nightly, for gfx1151 only: the other
AMD targets compile the same files), in a target directory of its own that each run starts empty
(<target>/xtask/package).";

/// The published crates, dependencies first.
pub const PUBLISHED: &[&str] =
    &["mlxcel-amdgpu-builder", "kernels-device", "mlxcel-amdgpu-code-object", "mlxcel-amdgpu"];

pub fn consumer(args: &[String]) -> Result<()> {
    if wants_help(args, CONSUMER_USAGE) {
        return Ok(());
    }
    if !args.is_empty() {
        return Err(CONSUMER_USAGE.into());
    }
    let root = repo_root()?;
    let dir = root.join("tests/consumer");
    let pin = fs::read_to_string(dir.join("rust-toolchain.toml"))?;
    let channel = pin
        .lines()
        .find_map(|l| l.trim().strip_prefix("channel = "))
        .map(|c| c.trim_matches('"').to_string())
        .ok_or("tests/consumer/rust-toolchain.toml names no channel")?;
    let installed = output(Command::new("rustup").args(["toolchain", "list"]))?;
    if !installed.lines().any(|l| l.split_whitespace().next().is_some_and(|t| t.starts_with(&format!("{channel}-")))) {
        run(Command::new("rustup").args(["toolchain", "install", &channel, "--profile", "minimal"]))?;
    }
    let target = target_dir(&root)?;
    let consumer_target = target.join("consumer");
    // The rustup proxy, in the consumer's directory, with nothing of this cargo's choice of
    // toolchain: its rust-toolchain.toml decides.
    let cargo_there = |args: &[&str]| {
        let mut cmd = Command::new("cargo");
        for var in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTDOC", "CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR"] {
            cmd.env_remove(var);
        }
        cmd.current_dir(&dir).args(args).arg("--locked").arg("--target-dir").arg(&consumer_target);
        cmd
    };
    run(cargo_there(&["run"]).env("MLXCEL_AMDGPU_GPU_TARGET_DIR", target.join("gpu-kernels")))?;

    // The offline path, from the code objects that build embedded.
    let out = newest_out_dir(&consumer_target.join("debug/build"))?;
    let prebuilt = consumer_target.join("prebuilt");
    remove(&prebuilt)?;
    fs::create_dir_all(&prebuilt)?;
    let mut copied = 0;
    for entry in fs::read_dir(&out)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "hsaco") {
            fs::copy(&path, prebuilt.join(path.file_name().ok_or("a file without a name")?))?;
            copied += 1;
        }
    }
    if copied == 0 {
        return Err(format!("{} holds no code object", out.display()).into());
    }
    run(cargo_there(&["check"])
        .env("MLXCEL_AMDGPU_PREBUILT_DIR", &prebuilt)
        .env("MLXCEL_AMDGPU_NO_TOOLCHAIN_INSTALL", "1"))
}

/// The `out` directory of mlxcel-amdgpu's build script under `build` that was written last.
fn newest_out_dir(build: &Path) -> Result<PathBuf> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(build)? {
        let out = entry?.path().join("out");
        let embedded = out.join("embedded.rs");
        if let Ok(meta) = fs::metadata(&embedded) {
            let modified = meta.modified()?;
            if newest.as_ref().is_none_or(|(t, _)| modified > *t) {
                newest = Some((modified, out));
            }
        }
    }
    newest.map(|(_, out)| out).ok_or_else(|| format!("no build of mlxcel-amdgpu under {}", build.display()).into())
}

pub fn package(args: &[String]) -> Result<()> {
    if wants_help(args, PACKAGE_USAGE) {
        return Ok(());
    }
    if !args.is_empty() {
        return Err(PACKAGE_USAGE.into());
    }
    let root = repo_root()?;
    let packages: Vec<String> = PUBLISHED.iter().flat_map(|p| ["-p".to_string(), p.to_string()]).collect();
    // Cargo takes a registry crate of a version it has seen as unchanged: both its extracted
    // sources (in the cargo home) and its build (in the target directory) would be an earlier
    // commit's. Both are started afresh; the dry run then reuses what `cargo package` built here.
    forget_packed_sources()?;
    let target = scratch_dir(&target_dir(&root)?, "package")?;
    // Uncommitted changes are packed as they are (CI runs on a clean checkout). One AMD target,
    // gfx1151: the others compile the same files, and each would build `core` again.
    for command in [&["package", "--allow-dirty"][..], &["publish", "--dry-run", "--allow-dirty"]] {
        run(cargo(&root)
            .args(command)
            .arg("--target-dir")
            .arg(&target)
            .args(&packages)
            .env("MLXCEL_AMDGPU_TARGETS", "gfx1151"))?;
    }
    Ok(())
}

/// Removes cargo's extracted copies of our published crates from earlier packagings. `cargo
/// package` verifies each crate against the others through a temporary registry under the target
/// directory, and cargo keeps what it extracted from that registry under `registry/src/-<hash of
/// its path>/<name>-<version>`, which it does not extract again for the same version. Only
/// registries named by a path (the `-` prefix) are touched.
fn forget_packed_sources() -> Result<()> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(home) => std::path::PathBuf::from(home),
        None => std::path::PathBuf::from(std::env::var_os("HOME").ok_or("neither CARGO_HOME nor HOME is set")?)
            .join(".cargo"),
    };
    let Ok(registries) = std::fs::read_dir(home.join("registry/src")) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for entry in std::fs::read_dir(registry.path())?.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = PUBLISHED.iter().any(|p| {
                name.strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|c: char| c.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(entry.path())
                    .map_err(|e| format!("cannot remove {}: {e}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}
