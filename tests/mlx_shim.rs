//! Builds the MLX shim (shim/mlx, with its CMake file) and the driver
//! tests/cpp/mlx_driver.cpp against a real MLX (the `mlx-cpu` 0.32 wheel's
//! headers and libmlx.so) and this crate's shared library, then runs every
//! kernel through MLX's graph on the CPU stream: results bit for bit against
//! the C ABI on the same inputs and within the contracts against MLX's own
//! unfused graphs, and wrong arguments raising; then the timing code of the
//! H200 run at tiny shapes.
//!
//! MLX is found at `$MLX_ROOT` (a directory with `include/mlx/mlx.h` and
//! `lib/libmlx.so`, e.g. `<site-packages>/mlx`), else at `target/ci-mlx/mlx`
//! (the README's install line), else through the `mlx` package of `python3`. Without it the test fails: `.ci/run` installs it.

mod shared_library;

use shared_library::{install, library_dir, mlx, run};
use std::path::Path;
use std::process::Command;

#[test]
fn mlx_shim_runs_every_kernel_inside_mlx_on_the_cpu_stream() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mlx = mlx();

    // The library as a package installs it: the file named by its SONAME and
    // the development link, in a directory of its own that the build reuses.
    let lib_dir = library_dir();
    let work = lib_dir.join("mlx-shim");
    let installed = work.join("lib");
    let soname = format!("libmlxcel_amdgpu.so.{}", mlxcel_amdgpu::ffi::MLXCEL_AMDGPU_ABI_VERSION);
    let link = install(&lib_dir.join("libmlxcel_amdgpu.so"), &soname, &installed);

    let build = work.join("build");
    let cmake = std::env::var("CMAKE").unwrap_or_else(|_| "cmake".into());
    run(
        Command::new(&cmake)
            .arg("-S")
            .arg(root.join("shim/mlx"))
            .arg("-B")
            .arg(&build)
            .arg(format!("-DMLX_ROOT={}", mlx.display()))
            .arg(format!("-DMLXCEL_AMDGPU_LIBRARY={}", link.display()))
            .args(["-DMLXCEL_AMDGPU_SHIM_DRIVER=ON", "-DCMAKE_BUILD_TYPE=Release"])
            .arg("-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror -ffp-contract=off"),
        "cmake (configure the shim)",
    );
    run(Command::new(&cmake).arg("--build").arg(&build).args(["-j", "2"]), "cmake --build (the shim and the driver)");

    let driver = build.join("mlxcel_amdgpu_mlx_driver");
    let out = Command::new(&driver)
        // time-smoke: the H200 run's timing code too, at tiny shapes.
        .args(["cpu", "time-smoke"])
        .env_remove("MLXCEL_AMDGPU_BACKEND")
        .env("LD_LIBRARY_PATH", format!("{}:{}", installed.display(), mlx.join("lib").display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", driver.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(out.status.success(), "the MLX shim driver failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("MLX shim driver: all checks passed"));
}
