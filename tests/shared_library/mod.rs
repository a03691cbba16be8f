//! The crate's shared library for the tests that link C++ against it
//! (`c_abi_consumer.rs`, `mlx_shim.rs`): built on demand, installed as a
//! package would install it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the crate's shared library (`cargo test` builds only the rlib) in
/// the profile of this test, and returns the directory that holds it.
pub fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // The test executable lives in <target>/<profile>/deps/.
    let dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let target_dir = dir.parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--lib", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    if dir.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    #[cfg(feature = "cuda")]
    cargo.args(["--features", "cuda"]);
    let out = cargo.output().expect("run cargo build --lib");
    assert!(out.status.success(), "cargo build --lib failed:\n{}", String::from_utf8_lossy(&out.stderr));
    dir
}

/// Installs `built` into `dir` as a package would: the file named `soname` and
/// the development link `libmlxcel_amdgpu.so` to it, which it returns.
pub fn install(built: &Path, soname: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(built, dir.join(soname)).unwrap();
    let link = dir.join("libmlxcel_amdgpu.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(soname, &link).unwrap();
    link
}
