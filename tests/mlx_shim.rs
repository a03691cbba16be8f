//! Builds the MLX shim (shim/mlx) and the driver tests/cpp/mlx_driver.cpp
//! with the C++ compiler, as a Cargo consumer's `cc`/`cxx_build` would, against
//! a real MLX (the `mlx-cpu` 0.32 wheel's headers and libmlx.so) and this
//! crate's shared library, then runs every kernel through MLX's graph on the
//! CPU stream: results bit for bit against the C ABI on the same inputs and
//! within the contracts against MLX's own unfused graphs, and wrong arguments
//! raising; then the timing code of the H200 run at tiny shapes.
//!
//! MLX is `$MLX_ROOT` (a directory with `include/mlx/mlx.h` and
//! `lib/libmlx.so`, e.g. `<site-packages>/mlx`), else the pinned `mlx-cpu`
//! wheel, which the test fetches from PyPI once into the target directory
//! (python3, no pip) and checks by its SHA-256. When it cannot, it fails and
//! says why; it is never skipped. The compiler is `$CXX`, else `c++`.

mod shared_library;

use shared_library::{install, library_dir, mlx, run};
use std::path::Path;
use std::process::{Command, Stdio};

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
    install(&lib_dir.join("libmlxcel_amdgpu.so"), &soname, &installed);

    // The shim as a static library's object would be compiled, and the
    // driver, at once (two compilers), then linked.
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let objects = work.join("obj");
    std::fs::create_dir_all(&objects).unwrap();
    let compile = |source: &Path, object: &Path| {
        let mut cmd = Command::new(&cxx);
        cmd.args(["-std=c++20", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror", "-ffp-contract=off"])
            .arg("-I")
            .arg(root.join("shim/mlx"))
            .arg("-I")
            .arg(root.join("include"))
            .arg("-isystem")
            .arg(mlx.join("include"))
            .arg("-c")
            .arg(source)
            .arg("-o")
            .arg(object)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let what = format!("{cxx} -c {}", source.display());
        (cmd.spawn().unwrap_or_else(|e| panic!("cannot run the C++ compiler ({what}): {e}")), what)
    };
    let shim_object = objects.join("mlxcel_amdgpu_mlx.o");
    let driver_object = objects.join("mlx_driver.o");
    let compiles = [
        compile(&root.join("shim/mlx/mlxcel_amdgpu_mlx.cpp"), &shim_object),
        compile(&root.join("tests/cpp/mlx_driver.cpp"), &driver_object),
    ];
    for (child, what) in compiles {
        let out = child.wait_with_output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{what} failed ({}):\n{text}", out.status);
    }
    let driver = work.join("mlxcel_amdgpu_mlx_driver");
    run(
        Command::new(&cxx)
            .arg(&driver_object)
            .arg(&shim_object)
            .arg("-o")
            .arg(&driver)
            .arg(format!("-L{}", installed.display()))
            .arg(format!("-L{}", mlx.join("lib").display()))
            .args(["-lmlxcel_amdgpu", "-lmlx", "-ldl", "-lpthread", "-lm"]),
        "c++ (link the MLX shim driver)",
    );

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
