//! Locating the shipped code objects and the LLVM tools.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

/// The workspace root (this crate's parent).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The newest `target/*/build/mlxcel-amdgpu-*/out/<arch>.hsaco`, if the root crate was built.
pub fn shipped_object(arch: &str) -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for profile in std::fs::read_dir(&target).ok()?.flatten() {
        let build = profile.path().join("build");
        let Ok(dirs) = std::fs::read_dir(&build) else { continue };
        for d in dirs.flatten() {
            if !d.file_name().to_string_lossy().starts_with("mlxcel-amdgpu-") {
                continue;
            }
            let p = d.path().join("out").join(format!("{arch}.hsaco"));
            if let Ok(m) = std::fs::metadata(&p).and_then(|m| m.modified())
                && best.as_ref().is_none_or(|(t, _)| m > *t)
            {
                best = Some((m, p));
            }
        }
    }
    best.map(|b| b.1)
}

/// llvm-objdump of the pinned toolchain (the llvm-tools component).
pub fn objdump() -> Option<PathBuf> {
    let out = std::process::Command::new("rustc").args(["--print", "sysroot"]).output().ok()?;
    let sysroot = String::from_utf8(out.stdout).ok()?;
    let p = Path::new(sysroot.trim()).join("lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-objdump");
    p.exists().then_some(p)
}
