//! The crate's shared library for the tests that link C++ against it
//! (`c_abi_consumer.rs`, `mlx_shim.rs`, `mlx_shim_rocm.rs`): built on demand,
//! installed as a package would install it; and the MLX they build against.
// Each test that includes this module uses a part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The profile directory of this test: the test executable lives in
/// `<target>/<profile>/deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// The target directory this test was built in.
fn target_dir() -> PathBuf {
    profile_dir().parent().unwrap().to_path_buf()
}

/// Builds the crate's shared library (`cargo test` builds only the rlib) in
/// the profile of this test, and returns the directory that holds it.
pub fn library_dir() -> PathBuf {
    let dir = profile_dir();
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

/// The MLX release the tests fetch when `MLX_ROOT` is not set: PyPI's `mlx-cpu`
/// wheel (headers, libmlx.so and the BLAS/LAPACK it links, nothing else).
const MLX_WHEEL_VERSION: &str = "0.32.4";

/// The `mlx-cpu` wheel for this machine: its address on PyPI and its SHA-256.
fn mlx_wheel() -> Result<(&'static str, &'static str), String> {
    match std::env::consts::ARCH {
        "x86_64" => Ok((
            "https://files.pythonhosted.org/packages/a4/0f/1f3e0d30ccae2f7e9cd270633f8fd79d470248c07be3d501cebf9271783f/mlx_cpu-0.32.4-py3-none-manylinux_2_35_x86_64.whl",
            "0e0a24fa2ce8b6b94d2e6a90604e8813aa8e29fcb918bb2aa01cfb6d133d8cee",
        )),
        "aarch64" => Ok((
            "https://files.pythonhosted.org/packages/06/05/d4098fa8941a29f070b8addcf93dad7ead8447e1c6dda29fba87ff844731/mlx_cpu-0.32.4-py3-none-manylinux_2_35_aarch64.whl",
            "1289e85e64af1fd16380bf331438bfe4afe875d27afc3e0bcf35f427c488fadd",
        )),
        other => Err(format!("mlx-cpu {MLX_WHEEL_VERSION} has no Linux wheel for {other}")),
    }
}

/// Downloads a wheel (argv 1) with python3's standard library alone (pip is
/// not part of every python3), checks its SHA-256 (argv 2) before anything is
/// written, and unpacks it into the directory argv 3.
const FETCH_WHEEL: &str = r#"
import hashlib, io, sys, urllib.request, zipfile
url, sha256, dest = sys.argv[1:4]
try:
    with urllib.request.urlopen(url, timeout=120) as response:
        data = response.read()
except Exception as e:
    sys.exit(f"cannot download {url}: {e}")
got = hashlib.sha256(data).hexdigest()
if got != sha256:
    sys.exit(f"{url} has SHA-256 {got}, not the pinned {sha256}")
zipfile.ZipFile(io.BytesIO(data)).extractall(dest)
"#;

fn usable(root: &Path) -> bool {
    root.join("include/mlx/mlx.h").is_file() && root.join("lib/libmlx.so").is_file()
}

/// Where MLX's headers and libmlx.so are: `$MLX_ROOT`, else the pinned wheel
/// unpacked under the target directory (fetched on first use); or why not.
fn mlx_root() -> Result<PathBuf, String> {
    if let Some(root) = std::env::var_os("MLX_ROOT") {
        let root = PathBuf::from(root);
        return if usable(&root) {
            Ok(root)
        } else {
            Err(format!("MLX_ROOT={} has no include/mlx/mlx.h and lib/libmlx.so", root.display()))
        };
    }
    // The wheel keeps its layout: libmlx.so finds its BLAS in ../../mlx_cpu.libs.
    let target = target_dir();
    let unpacked = target.join(format!("mlx-cpu-{MLX_WHEEL_VERSION}"));
    let root = unpacked.join("mlx");
    if usable(&root) {
        return Ok(root);
    }
    let (url, sha256) = mlx_wheel()?;
    // Test binaries may run at once: one fetches while the others wait, and the
    // unpacked tree appears under its name only whole (a rename).
    std::fs::create_dir_all(&target).map_err(|e| format!("cannot create {}: {e}", target.display()))?;
    let lock_path = target.join(format!("mlx-cpu-{MLX_WHEEL_VERSION}.lock"));
    let lock = std::fs::File::create(&lock_path).map_err(|e| format!("cannot create {}: {e}", lock_path.display()))?;
    lock.lock().map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
    if usable(&root) {
        return Ok(root);
    }
    let partial = target.join(format!("mlx-cpu-{MLX_WHEEL_VERSION}.partial"));
    for stale in [&partial, &unpacked] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).map_err(|e| format!("cannot remove {}: {e}", stale.display()))?;
        }
    }
    eprintln!("fetching MLX {MLX_WHEEL_VERSION} (mlx-cpu wheel, 10 MB) into {}", unpacked.display());
    let out = Command::new("python3")
        .args(["-c", FETCH_WHEEL, url, sha256])
        .arg(&partial)
        .output()
        .map_err(|e| format!("python3 (which fetches the mlx-cpu wheel) cannot be run: {e}"))?;
    if !out.status.success() {
        return Err(format!("fetching the mlx-cpu wheel failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    std::fs::rename(&partial, &unpacked)
        .map_err(|e| format!("cannot rename {} to {}: {e}", partial.display(), unpacked.display()))?;
    if usable(&root) {
        Ok(root)
    } else {
        Err(format!(
            "the mlx-cpu wheel unpacked into {} has no include/mlx/mlx.h and lib/libmlx.so",
            unpacked.display()
        ))
    }
}

/// MLX's install, checked to be [`MLX_VERSION`]; panics saying why it is
/// missing and what to do.
pub fn mlx() -> PathBuf {
    let mlx = mlx_root().unwrap_or_else(|why| {
        if std::env::var_os("MLX_ROOT").is_some() {
            panic!(
                "{why}: point MLX_ROOT at an MLX {MLX_VERSION} install, or unset it and this test fetches MLX itself"
            );
        }
        let wheel = mlx_wheel().map_or_else(|e| e, |(url, sha256)| format!("{url} (SHA-256 {sha256})"));
        panic!(
            "MLX {MLX_VERSION} is needed for this test and could not be obtained: {why}. Without network \
             access: download the wheel {wheel} elsewhere, check its SHA-256, unzip it on this machine and \
             set MLX_ROOT to its mlx/ directory (or to any MLX {MLX_VERSION} install with include/ and lib/libmlx.so)"
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
