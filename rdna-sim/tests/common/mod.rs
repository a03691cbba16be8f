//! Locating the shipped code objects and the LLVM tools.
#![allow(dead_code)]
use std::path::{Path, PathBuf};

/// The workspace root (this crate's parent).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The newest `target/*/build/mlxcel-amdgpu-*/out/<arch>.hsaco`, if the root crate was built.
pub fn shipped_object(arch: &str) -> Option<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for profile in std::fs::read_dir(&target).ok()?.flatten() {
        let build = profile.path().join("build");
        let Ok(dirs) = std::fs::read_dir(&build) else { continue };
        for d in dirs.flatten() {
            if !d.file_name().to_string_lossy().starts_with("mlxcel-amdgpu-") {
                continue;
            }
            let p = d.path().join("out").join(format!("{arch}.hsaco"));
            if let Ok(m) = std::fs::metadata(&p).and_then(|m| m.modified())
                && best.as_ref().is_none_or(|(t, _)| m > *t)
            {
                best = Some((m, p));
            }
        }
    }
    best.map(|b| b.1)
}

/// llvm-objdump of the pinned toolchain (the llvm-tools component).
pub fn objdump() -> Option<PathBuf> {
    let out = std::process::Command::new("rustc").args(["--print", "sysroot"]).output().ok()?;
    let sysroot = String::from_utf8(out.stdout).ok()?;
    let p = Path::new(sysroot.trim()).join("lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-objdump");
    p.exists().then_some(p)
}

/// A kernel argument of a test launch.
pub enum Arg {
    /// Index into the launch's buffers.
    Buf(usize),
    U32(u32),
    U64(u64),
    F32(f32),
}

/// The shipped object for `arch`, or `None` (printed) when the root crate was not built.
pub fn load(arch: &str) -> Option<rdna_sim::codeobj::CodeObject> {
    let Some(path) = shipped_object(arch) else {
        println!("SKIPPED: no {arch}.hsaco under target/ (build the root crate first)");
        return None;
    };
    Some(rdna_sim::codeobj::load(&std::fs::read(path).unwrap()).unwrap())
}

/// Packs arguments at the metadata's offsets, pointers given by `ptr`.
pub fn pack(k: &rdna_sim::codeobj::Kernel, args: &[Arg], ptr: &dyn Fn(usize) -> u64) -> Vec<u8> {
    let explicit: Vec<_> = k.args.iter().filter(|a| !a.value_kind.starts_with("hidden_")).collect();
    assert_eq!(explicit.len(), args.len(), "{}: argument count", k.name);
    let mut out = vec![0u8; k.kernarg_segment_size as usize];
    for (m, a) in explicit.iter().zip(args) {
        let bytes: Vec<u8> = match a {
            Arg::Buf(i) => ptr(*i).to_le_bytes().to_vec(),
            Arg::U32(x) => x.to_le_bytes().to_vec(),
            Arg::U64(x) => x.to_le_bytes().to_vec(),
            Arg::F32(x) => x.to_le_bytes().to_vec(),
        };
        assert_eq!(bytes.len(), m.size as usize, "{}: argument at {}", k.name, m.offset);
        out[m.offset as usize..m.offset as usize + bytes.len()].copy_from_slice(&bytes);
    }
    out
}

/// Deterministic pseudo-random f32 values in [-scale, scale).
pub fn noise(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            ((x >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The test-only gfx1151 object of planted races (`kernels-device` with its
/// `race-plants` feature), built on first use in a cargo target directory of
/// its own (`<target>/gpu-kernels/race-plants-gfx1151`): a minute the first
/// time (it builds `core` for the GPU), nothing afterwards.
pub fn race_plants_object() -> Result<PathBuf, String> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    code_object::gpu_build::build_test_object(
        &workspace().join("kernels-device/Cargo.toml"),
        &target.join("gpu-kernels/race-plants-gfx1151"),
        "gfx1151",
        "race-plants",
    )
}
