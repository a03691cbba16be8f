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
    gpu_builder::pinned_llvm_tool("llvm-objdump").ok()
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

/// The xielu parameters of every case: alpha_p, alpha_n, beta, eps.
pub const XIELU_PARAMS: (f32, f32, f32, f32) = (0.8731, 0.6042, 0.5, -1e-6);

/// xielu's arguments (input buffer 0, output buffer 1) for `n` elements.
pub fn xielu_args(n: usize) -> Vec<Arg> {
    let (ap, an, b, e) = XIELU_PARAMS;
    vec![Arg::Buf(0), Arg::Buf(1), Arg::U64(n as u64), Arg::F32(ap), Arg::F32(an), Arg::F32(b), Arg::F32(e)]
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

/// Encodes f32 values as the dtype `ty` ("f32", "f16", "bf16"; bf16 truncates); returns the bytes and the element size.
pub fn enc(ty: &str, v: &[f32]) -> (Vec<u8>, usize) {
    match ty {
        "f32" => (f32_bytes(v), 4),
        "bf16" => (v.iter().flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes()).collect(), 2),
        _ => (v.iter().flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes()).collect(), 2),
    }
}

/// A launch's buffers, each with its element size.
pub type SizedBuffers = Vec<(Vec<u8>, usize)>;

/// mamba1_scan's launch of dtype `ty` at (batch, len, dm, n): its arguments, its
/// buffers (outputs zeroed) with their element sizes, and its grid.
pub fn mamba_case(ty: &str, (batch, len, dm, n): (u32, u32, u32, u32)) -> (Vec<Arg>, SizedBuffers, [u32; 3]) {
    use kernels_device::geometry::mamba1_scan::Mapping;
    let (btd, btn, dn) = ((batch * len * dm) as usize, (batch * len * n) as usize, (dm * n) as usize);
    let dt: Vec<f32> = noise(btd, 7, 0.5).iter().map(|x| x.abs() + 0.01).collect();
    let a: Vec<f32> = noise(dn, 9, 1.0).iter().map(|x| -x.abs() - 0.1).collect();
    let bdn = (batch * dm * n) as usize;
    let bufs = vec![
        enc(ty, &noise(btd, 6, 1.0)),
        enc(ty, &dt),
        enc(ty, &noise(btn, 8, 1.0)),
        enc(ty, &noise(btn, 10, 1.0)),
        enc("f32", &a),
        enc(ty, &noise(dm as usize, 11, 1.0)),
        enc("f32", &noise(bdn, 12, 1.0)),
        (vec![0u8; btd * enc(ty, &[0.0]).1], enc(ty, &[0.0]).1),
        (vec![0u8; bdn * 4], 4),
    ];
    let mut args: Vec<Arg> = (0..9).map(Arg::Buf).collect();
    args.extend([Arg::U32(batch), Arg::U32(len), Arg::U32(dm), Arg::U32(n)]);
    (args, bufs, [dm.div_ceil(Mapping::AMD.channels_per_workgroup(n)), batch, 1])
}

/// Copies `bufs` into fresh allocations of `mem`, buffer `i` starting `shift[i]`
/// bytes past its allocation's start (no shift where `shift` is short); returns the addresses.
pub fn upload(mem: &mut rdna_sim::mem::Memory, bufs: &[Vec<u8>], shift: &[u64]) -> Vec<u64> {
    bufs.iter()
        .enumerate()
        .map(|(i, b)| {
            let s = shift.get(i).copied().unwrap_or(0);
            let a = mem.alloc(b.len() + s as usize, &format!("buffer {i}")) + s;
            mem.write(a, b).unwrap();
            a
        })
        .collect()
}

/// Reads back the buffers that [`upload`] placed at `addrs`.
pub fn download(mem: &rdna_sim::mem::Memory, bufs: &[Vec<u8>], addrs: &[u64]) -> Vec<Vec<u8>> {
    bufs.iter()
        .zip(addrs)
        .map(|(b, &a)| {
            let mut v = vec![0u8; b.len()];
            mem.read(a, &mut v).unwrap();
            v
        })
        .collect()
}

/// The test-only gfx1151 object of planted races (`kernels-device` with its
/// `race-plants` feature), built on first use by gpu-builder in a cargo target
/// directory of its own (`<target>/gpu-kernels/race-plants/gfx1151`): a minute
/// the first time (it builds `core` for the GPU), nothing afterwards. Not
/// audited and without launch bounds: it is no product.
pub fn race_plants_object() -> Result<PathBuf, String> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let built = gpu_builder::Builder::new(
        workspace().join("kernels-device/Cargo.toml"),
        target.join("gpu-kernels/race-plants"),
    )
    .amdgpu_targets(["gfx1151"])
    .features(["race-plants"])
    .build()?;
    Ok(built.amdgpu[0].path.clone())
}

/// A synthetic one-kernel object for dispatch-level cases: `code` at 0x1000,
/// no arguments, no workgroup memory, 32-lane waves.
pub fn synthetic_kernel(code: &[u32]) -> rdna_sim::codeobj::Kernel {
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let insts = rdna_sim::decode::decode_all(&bytes, 0x1000).unwrap();
    let index = insts.iter().enumerate().map(|(i, x)| (x.addr, i)).collect();
    let kd = rdna_sim::codeobj::KernelDescriptor { kernel_code_properties: 1 << 10, ..Default::default() };
    rdna_sim::codeobj::Kernel {
        name: "synthetic".into(),
        code_addr: 0x1000,
        code_size: bytes.len() as u64,
        kd,
        insts,
        index,
        args: vec![],
        kernarg_segment_size: 0,
        group_segment_fixed_size: 0,
        wavefront_size: 32,
    }
}

/// The opcode of `name` in one of `rdna_sim::opcodes`' tables, for hand-encoded words.
pub fn op(table: &[(u16, &str)], name: &str) -> u32 {
    table.iter().find(|(_, n)| *n == name).unwrap_or_else(|| panic!("no opcode {name}")).0 as u32
}

/// Operand codes of the encodings: a literal follows, VCC, EXEC, and VGPR `r`.
pub const LIT: u32 = 255;
pub const VCC: u32 = 106;
pub const EXEC: u32 = 126;
pub fn v(r: u32) -> u32 {
    256 + r
}
