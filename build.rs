//! Builds the kernels of `kernels-device` for every GPU target, audits what the
//! compiler produced and embeds it in the host library: the work is done by
//! `code_object::gpu_build` (crate `code-object/`).

fn main() {
    for path in ["kernels-device/src", "kernels-device/Cargo.toml", "kernels-device/build.rs", "rust-toolchain.toml"] {
        println!("cargo::rerun-if-changed={path}");
    }
    println!("cargo::rerun-if-env-changed={}", code_object::gpu_build::TARGETS_ENV);
    println!("cargo::rerun-if-env-changed={}", code_object::gpu_build::GPU_TARGET_DIR_ENV);
    // The shared library's SONAME carries the ABI version (MLXCEL_AMDGPU_ABI_VERSION).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libmlxcel_amdgpu.so.4");
    }
    // The host triple, for tests that run the llvm-tools of the sysroot.
    println!("cargo::rustc-env=HOST_TRIPLE={}", std::env::var("HOST").unwrap_or_default());

    if let Err(msg) = code_object::gpu_build::build_and_embed() {
        eprintln!("\nerror: building the GPU kernels failed\n\n{msg}\n");
        std::process::exit(1);
    }
}
