//! The MLX shim's ROCm branch (`MLXCEL_AMDGPU_SHIM_ROCM`) compiled against the
//! test double of mlxcel's MLX-ROCm fork (`tests/mlx_rocm_double`: the fork's
//! command encoder and allocator API, our declarations with its signatures)
//! and MLX 0.32's headers, linked with this crate's shared library and the
//! stand-in libamdhip64, and run by `tests/cpp/mlx_rocm_driver.cpp` on the
//! simulated gfx1151: every getter bit for bit against the C ABI in eager and
//! HIP-graph modes, pool buffers, a decode capture replayed, the refusals;
//! with the stand-in refusing any HIP queue made before the device's flags.
//!
//! Needs MLX as `mlx_shim.rs` does, and a C++20 compiler (`$CXX`, else `c++`).

mod shared_library;

use shared_library::{install, library_dir, mlx, run};
use std::path::Path;
use std::process::Command;

#[test]
fn mlx_shim_rocm_branch_runs_inside_the_fork_double_on_the_simulated_gfx1151() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mlx = mlx();
    let lib_dir = library_dir();
    let work = lib_dir.join("mlx-shim-rocm");
    let soname = format!("libmlxcel_amdgpu.so.{}", mlxcel_amdgpu::ffi::MLXCEL_AMDGPU_ABI_VERSION);
    install(&lib_dir.join("libmlxcel_amdgpu.so"), &soname, &work.join("lib"));

    // The stand-in, installed as ROCm installs the runtime: the library finds
    // it through ROCM_PATH, the program links it by name.
    run(
        Command::new(env!("CARGO"))
            .args(["build", "-p", "hip-standin", "--manifest-path"])
            .arg(root.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(lib_dir.parent().unwrap())
            .args(lib_dir.ends_with("release").then_some("--release")),
        "cargo build -p hip-standin",
    );
    let rocm = work.join("rocm");
    std::fs::create_dir_all(rocm.join("lib")).unwrap();
    std::fs::copy(lib_dir.join("libamdhip64_standin.so"), rocm.join("lib/libamdhip64.so")).unwrap();

    let driver = work.join("mlx_rocm_driver");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let double = root.join("tests/mlx_rocm_double");
    run(
        Command::new(&cxx)
            .args(["-std=c++20", "-O1", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"])
            .arg("-DMLXCEL_AMDGPU_SHIM_ROCM")
            .arg("-I")
            .arg(double.join("include"))
            .arg("-I")
            .arg(root.join("shim/mlx"))
            .arg("-I")
            .arg(root.join("include"))
            .arg("-isystem")
            .arg(mlx.join("include"))
            .arg(root.join("shim/mlx/mlxcel_amdgpu_mlx.cpp"))
            .arg(double.join("fork_double.cpp"))
            .arg(root.join("tests/cpp/mlx_rocm_driver.cpp"))
            .arg("-o")
            .arg(&driver)
            .arg(format!("-L{}", work.join("lib").display()))
            .arg(format!("-L{}", mlx.join("lib").display()))
            .arg(format!("-L{}", rocm.join("lib").display()))
            .args(["-lmlxcel_amdgpu", "-lmlx", "-l:libamdhip64.so", "-ldl", "-lpthread"]),
        "c++ (the shim's ROCm branch, the fork double and the driver)",
    );

    let out = Command::new(&driver)
        .env("MLXCEL_AMDGPU_BACKEND", "hip")
        .env("ROCM_PATH", &rocm)
        .env_remove("HIP_PATH")
        .env("RDNA_SIM_REQUIRE_DEVICE_FLAGS", "1")
        .env("RDNA_SIM_STRICT_WAIT", "1")
        .env(
            "LD_LIBRARY_PATH",
            format!("{}:{}:{}", work.join("lib").display(), mlx.join("lib").display(), rocm.join("lib").display()),
        )
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", driver.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("MLX-ROCm shim driver: all checks passed"),
        "the MLX-ROCm shim driver failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
