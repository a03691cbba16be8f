//! Compiles tests/cpp/consumer.cpp with the system C++ compiler against the
//! checked-in header and this crate's shared library, and runs it on the CPU
//! backend: availability, launches and error paths through the real C ABI.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the crate's shared library (`cargo test` builds only the rlib) in
/// the profile of this test, and returns the directory that holds it.
fn library_dir() -> PathBuf {
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

#[test]
fn cpp_consumer_calls_the_abi_end_to_end() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib_dir = library_dir();
    assert!(lib_dir.join("libmlxcel_amdgpu.so").exists(), "no libmlxcel_amdgpu.so in {}", lib_dir.display());
    let exe = std::env::temp_dir().join(format!("mlxcel_amdgpu_consumer_{}", std::process::id()));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let out = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-ffp-contract=off", "-Wall", "-Werror"])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("tests/cpp/consumer.cpp"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-lmlxcel_amdgpu", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler {cxx:?}: {e}"));
    assert!(out.status.success(), "compiling consumer.cpp failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).env_remove("MLXCEL_AMDGPU_BACKEND").output().unwrap();
    std::fs::remove_file(&exe).ok();
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("{stdout}");
    assert!(run.status.success(), "the C++ consumer failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("C ABI consumer: all checks passed"));
}
