//! The crate's shared library for the tests that link C++ against it
//! (`c_abi_consumer.rs`, `mlx_shim.rs`, `mlx_shim_rocm.rs`): built on demand,
//! installed as a package would install it; and the MLX they build against.
// Each test that includes this module uses a part of it.
#![allow(dead_code)]

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

/// The pinned MLX the shim is written and tested against.
pub const MLX_VERSION: &str = "0.32";

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

/// MLX's install, checked to be [`MLX_VERSION`]; panics saying how to get it.
pub fn mlx() -> PathBuf {
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
    mlx
}

/// Runs `cmd`, panicking with its output if it fails; returns the output.
pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}
