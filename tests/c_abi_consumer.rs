//! Compiles tests/cpp/consumer.cpp with the system C++ compiler against the
//! checked-in header and this crate's shared library, and runs it on the CPU
//! backend: availability, launches and error paths through the real C ABI.

mod shared_library;

use shared_library::{install, library_dir};
use std::path::Path;
use std::process::Command;

#[test]
fn cpp_consumer_calls_the_abi_end_to_end() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib_dir = library_dir();
    let built = lib_dir.join("libmlxcel_amdgpu.so");
    assert!(built.exists(), "no libmlxcel_amdgpu.so in {}", built.display());
    // Installed as a package would install it: the file named by its SONAME,
    // and the development link to it.
    let soname = soname_of(&built);
    assert_eq!(
        soname,
        format!("libmlxcel_amdgpu.so.{}", mlxcel_amdgpu::ffi::MLXCEL_AMDGPU_ABI_VERSION),
        "the SONAME carries MLXCEL_AMDGPU_ABI_VERSION"
    );
    let lib_dir = std::env::temp_dir().join(format!("mlxcel_amdgpu_lib_{}", std::process::id()));
    install(&built, &soname, &lib_dir);
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
    std::fs::remove_dir_all(&lib_dir).ok();
    let stdout = String::from_utf8_lossy(&run.stdout);
    println!("{stdout}");
    assert!(run.status.success(), "the C++ consumer failed:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("C ABI consumer: all checks passed"));
}

/// The DT_SONAME of a shared library, read with the pinned toolchain's llvm-readobj.
fn soname_of(lib: &Path) -> String {
    let readobj = gpu_builder::pinned_llvm_tool("llvm-readobj").unwrap();
    let out = Command::new(&readobj).arg("--dynamic-table").arg(lib).output().expect("run llvm-readobj");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("SONAME")).unwrap_or_else(|| panic!("no SONAME in {text}"));
    line.rsplit('[').next().unwrap().trim_end_matches(']').trim().to_string()
}
