//! The wavefront assertion, at build time.
//!
//! Every kernel in this crate assumes 32-lane waves (lane masks, the fixed
//! reduction trees of the bit-exact contracts, one wave per state column set).
//! rustc exposes no `target_feature` cfg for amdgpu, so this script reads the
//! target CPU and features from the encoded rustflags and refuses any target that
//! would run wave64: the gfx9 family (gfx900 ... gfx950, whose only mode is
//! wave64) and any build that asks for `+wavefrontsize64`.

fn main() {
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    // Where this crate's sources are, for the build script of mlxcel-amdgpu, which compiles
    // them for the GPU targets (`links` metadata: DEP_MLXCEL_AMDGPU_KERNELS_MANIFEST_DIR).
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        println!("cargo::metadata=manifest_dir={}", std::path::Path::new(&dir).display());
    }
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if arch != "amdgpu" {
        return;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split('\x1f').filter(|f| !f.is_empty()).collect();
    let cpu = codegen_value(&flags, "target-cpu");
    let features = codegen_value(&flags, "target-feature").unwrap_or_default();

    let Some(cpu) = cpu else {
        fail("amdgcn-amd-amdhsa needs an explicit -Ctarget-cpu (for example gfx1151)".into());
    };
    if features.split(',').any(|f| f.trim() == "+wavefrontsize64") {
        fail(format!(
            "target-cpu {cpu} was asked to run wave64 (+wavefrontsize64); \
             the mlxcel-amdgpu kernels are written for 32-lane waves only"
        ));
    }
    if is_wave64_only(&cpu) {
        fail(format!(
            "target-cpu {cpu} is a wave64 GPU (gfx9 family); \
             the mlxcel-amdgpu kernels are written for 32-lane waves (RDNA: gfx10, gfx11, gfx12)"
        ));
    }
}

/// Wave64-only AMD GPUs: GCN and CDNA (gfx6 to gfx9, including gfx90a, gfx942, gfx950).
fn is_wave64_only(cpu: &str) -> bool {
    let Some(rest) = cpu.strip_prefix("gfx") else {
        return false;
    };
    let major = rest.split('-').next().unwrap_or("");
    // gfx6xx..gfx9xx have a one-digit major version followed by two more characters;
    // gfx10xx and newer have two digits.
    major.len() == 3 && matches!(major.as_bytes()[0], b'6'..=b'9')
        || rest.starts_with("9-generic")
        || rest.starts_with("9-4-generic")
}

/// The last value given to `-C name=value` (or `-Cname=value`) in the flags.
fn codegen_value(flags: &[&str], name: &str) -> Option<String> {
    let mut found = None;
    let mut iter = flags.iter().peekable();
    while let Some(flag) = iter.next() {
        let body = if *flag == "-C" || *flag == "--codegen" {
            iter.next().copied()
        } else {
            flag.strip_prefix("-C").or_else(|| flag.strip_prefix("--codegen="))
        };
        if let Some(v) = body.and_then(|b| b.strip_prefix(name)).and_then(|b| b.strip_prefix('=')) {
            found = Some(v.to_string());
        }
    }
    found
}

fn fail(msg: String) -> ! {
    eprintln!("error: wavefront assertion failed: {msg}");
    std::process::exit(1);
}
