//! Builds the MLX shim (shim/mlx) and the driver tests/cpp/mlx_driver.cpp
//! with the C++ compiler, as a Cargo consumer's `cc`/`cxx_build` would, against
//! a real MLX (the `mlx-cpu` 0.32 wheel's headers and libmlx.so) and this
//! crate's shared library, then runs every kernel through MLX's graph on the
//! CPU stream: results bit for bit against the C ABI on the same inputs and
//! within the contracts against MLX's own unfused graphs, and wrong arguments
//! raising; the router also against the testkit's reference, on cases this
//! test writes for the driver; then the timing code of the H200 run at tiny
//! shapes.
//!
//! MLX is `$MLX_ROOT` (a directory with `include/mlx/mlx.h` and
//! `lib/libmlx.so`, e.g. `<site-packages>/mlx`), else the pinned `mlx-cpu`
//! wheel, which the test fetches from PyPI once into the target directory
//! (python3, no pip) and checks by its SHA-256. When it cannot, it fails and
//! says why; it is never skipped. The compiler is `$CXX`, else `c++`.

mod shared_library;

use mlxcel_amdgpu::Dtype;
use mlxcel_amdgpu_testkit::reference::{data::normal, moe};
use shared_library::{install, library_dir, mlx, run};
use std::path::Path;
use std::process::{Command, Stdio};

/// The router cases checked against the reference inside MLX: (dtype, M, E,
/// K, Din, norm_topk_prob, seed). Qwen3-30B-A3B's router for one and eight
/// tokens, Qwen3-Next's E and K, and one of each other dtype.
const ROUTER_CASES: [(Dtype, usize, usize, usize, usize, bool, u64); 4] = [
    (Dtype::Bf16, 1, 128, 8, 2048, true, 70),
    (Dtype::Bf16, 8, 128, 8, 2048, true, 72),
    (Dtype::F16, 2, 512, 10, 512, true, 74),
    (Dtype::F32, 3, 60, 4, 200, false, 76),
];

/// The cases file the driver reads (`MLXCEL_AMDGPU_ROUTER_CASES`; its format
/// is the driver's `test_router_reference`): each case's inputs and the
/// reference's ids and scores. Every token's K + 1 largest probabilities are
/// at least 1e-3 apart (relative), so that the kernels' f32 rounding cannot
/// reorder them: the ids must then be the reference's exactly.
fn write_router_cases(path: &Path) -> usize {
    let mut bytes = Vec::new();
    for (dtype, m, e, k, din, norm, seed) in ROUTER_CASES {
        let x = normal(dtype, seed, m * din, 1.0);
        let wr = normal(dtype, seed + 1, e * din, 0.05);
        let logits = moe::router_logits(&x, &wr, m, e, din);
        let (_, sorted) = moe::topk(&logits, m, e, k + 1, false);
        for (t, p) in sorted.chunks(k + 1).enumerate() {
            let gap = p.windows(2).map(|w| (w[0] - w[1]) / w[0]).fold(f32::INFINITY, f32::min);
            assert!(
                gap >= 1e-3,
                "router case {dtype:?} seed {seed}, token {t}: a relative gap of {gap:e}; pick a seed"
            );
        }
        let (ids, scores) = moe::topk(&logits, m, e, k, norm);
        let code = match dtype {
            Dtype::F32 => 0u32,
            Dtype::F16 => 1,
            Dtype::Bf16 => 2,
        };
        for h in [code, m as u32, e as u32, k as u32, din as u32, norm as u32] {
            bytes.extend(h.to_le_bytes());
        }
        bytes.extend(x.iter().chain(&wr).flat_map(|v| v.to_le_bytes()));
        bytes.extend(ids.iter().flat_map(|v| v.to_le_bytes()));
        bytes.extend(scores.iter().flat_map(|v| v.to_le_bytes()));
    }
    std::fs::write(path, bytes).unwrap();
    ROUTER_CASES.len()
}

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

    let router_cases = work.join("router_cases.bin");
    let n_router = write_router_cases(&router_cases);
    let out = Command::new(&driver)
        // time-smoke: the H200 run's timing code too, at tiny shapes.
        .args(["cpu", "time-smoke"])
        .env("MLXCEL_AMDGPU_ROUTER_CASES", &router_cases)
        .env_remove("MLXCEL_AMDGPU_BACKEND")
        .env("LD_LIBRARY_PATH", format!("{}:{}", installed.display(), mlx.join("lib").display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", driver.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(out.status.success(), "the MLX shim driver failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("MLX shim driver: all checks passed"));
    assert!(stdout.contains(&format!("router vs the testkit reference: {n_router} cases")), "{stdout}");
}
