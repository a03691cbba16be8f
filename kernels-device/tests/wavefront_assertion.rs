//! The device crate refuses wave64 targets at build time, naming the CPU.
//! (`cargo check` runs the build script, which is where the refusal happens.)

use std::path::Path;
use std::process::Command;

fn check_for(cpu: &str, extra_flags: &str) -> (bool, String) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    // One target directory per case, so that the two cases do not wait for each other's lock.
    let case = if extra_flags.is_empty() { cpu.to_string() } else { format!("{cpu}-wave64") };
    let target_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/gpu-kernels/wave64-test").join(case);
    let mut flags = format!("-Ctarget-cpu={cpu}");
    if !extra_flags.is_empty() {
        flags = format!("{flags}\x1f{extra_flags}");
    }
    // The toolchain that compiles the kernels, with the GPU build's profile.
    let (toolchain, _) = gpu_builder::Toolchain::ensure(gpu_builder::toolchain::PINNED).unwrap();
    // No `-Zbuild-std`: the build script runs before anything is compiled for the GPU, so its
    // refusal comes first and no `core` is built. A target it let through would fail for want of
    // `core` instead, without the message the cases look for.
    let out = Command::new(&toolchain.cargo)
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env("RUSTC", &toolchain.rustc)
        .env("CARGO_ENCODED_RUSTFLAGS", flags)
        .args(["check", "--target", "amdgcn-amd-amdhsa"])
        .args(gpu_builder::profile_args())
        .arg("--manifest-path")
        .arg(manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .output()
        .expect("run cargo");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn gfx942_is_refused_with_a_message_naming_the_cpu() {
    let (ok, stderr) = check_for("gfx942", "");
    assert!(!ok, "building for gfx942 must fail");
    assert!(stderr.contains("wavefront assertion failed: target-cpu gfx942 is a wave64 GPU"), "{stderr}");
}

#[test]
fn wavefrontsize64_on_an_rdna_cpu_is_refused() {
    let (ok, stderr) = check_for("gfx1151", "-Ctarget-feature=+wavefrontsize64");
    assert!(!ok, "building with +wavefrontsize64 must fail");
    assert!(stderr.contains("target-cpu gfx1151 was asked to run wave64"), "{stderr}");
}
