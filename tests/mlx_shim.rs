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

use shared_library::{install, library_dir};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned MLX the shim is written and tested against.
const MLX_VERSION: &str = "0.32";

/// Where MLX's headers and libmlx.so are, or why not.
fn mlx_root() -> Result<PathBuf, String> {
    let usable = |p: &Path| p.join("include/mlx/mlx.h").is_file() && p.join("lib/libmlx.so").is_file();
    if let Some(root) = std::env::var_os("MLX_ROOT") {
        let root = PathBuf::from(root);
        return if usable(&root) {
            Ok(root)
        } else {
            Err(format!("MLX_ROOT={} has no include/mlx/mlx.h and lib/libmlx.so", root.display()))
        };
    }
    // Where the README's install line (and .ci/run) puts the mlx-cpu wheel.
    let in_target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-mlx/mlx");
    if usable(&in_target) {
        return Ok(in_target);
    }
    let probe = "import importlib.util as u; s = u.find_spec('mlx'); \
                 print('\\n'.join(s.submodule_search_locations) if s else '')";
    let out = Command::new("python3")
        .args(["-c", probe])
        .output()
        .map_err(|e| format!("MLX_ROOT is not set and python3 cannot be run ({e})"))?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .find(|p| usable(p))
        .ok_or_else(|| "MLX_ROOT is not set, target/ci-mlx/mlx does not exist, and python3 has no `mlx` package with include/ and lib/".into())
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn mlx_shim_runs_every_kernel_inside_mlx_on_the_cpu_stream() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mlx = mlx_root().unwrap_or_else(|why| {
        panic!(
            "MLX {MLX_VERSION} is needed for this test and was not found: {why}. \
             Install it with `python3 -m pip install --no-deps --target target/ci-mlx mlx-cpu=={MLX_VERSION}.4` \
             in the repository (.ci/run does this), or set MLX_ROOT to an MLX install"
        )
    });
    let version = std::fs::read_to_string(mlx.join("include/mlx/version.h")).unwrap_or_default();
    let minor: String = MLX_VERSION.split('.').nth(1).unwrap().into();
    assert!(
        version.contains(&format!("#define MLX_VERSION_MINOR {minor}")),
        "{} is not MLX {MLX_VERSION}",
        mlx.display()
    );

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
