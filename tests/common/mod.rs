//! Shared by the kernel tests: every backend present, and data movement helpers.
#![allow(dead_code)]

use mlxcel_amdgpu::reference::{self, Dtype};
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer};

/// Every backend present on this machine that can run the kernels: the CPU
/// emulator always; HIP and CUDA when a device exists and a kernel binary for it
/// is loaded. Anything skipped is skipped with a printed reason (for example a
/// wave64 AMD GPU, which has a HIP device but no kernels).
///
/// `MLXCEL_AMDGPU_EXPECT_HIP=1` (on the AMD machine) and `MLXCEL_AMDGPU_EXPECT_CUDA=1`
/// (on the NVIDIA one) turn a skipped HIP or CUDA device into a test failure, so
/// that a run meant to exercise a GPU cannot pass on the emulator alone.
pub fn devices() -> Vec<Device> {
    let mut out = Vec::new();
    for (kind, expect_env) in
        [(BackendKind::Hip, "MLXCEL_AMDGPU_EXPECT_HIP"), (BackendKind::Cuda, "MLXCEL_AMDGPU_EXPECT_CUDA")]
    {
        let skipped = |why: String| {
            assert!(
                std::env::var_os(expect_env).is_none(),
                "{expect_env} is set but the {kind} backend was skipped: {why}"
            );
            eprintln!("[backend] {kind}: skipped: {why}");
        };
        match Device::open(kind) {
            Ok(d) => match &d.info().kernels {
                Ok(k) => {
                    eprintln!("[backend] {kind}: {} ({}), kernels: {k}", d.info().name, d.info().arch);
                    out.push(d);
                }
                Err(why) => skipped(format!("{} ({}) has no kernels: {why}", d.info().name, d.info().arch)),
            },
            Err(e) => skipped(e.to_string()),
        }
    }
    out.push(Device::cpu());
    out
}

/// Uploads values (representable in `dtype`) as the bytes of a `dtype` buffer.
pub fn upload(dev: &Device, dtype: Dtype, values: &[f32]) -> DeviceBuffer<u8> {
    dev.upload(&reference::to_le_bytes(dtype, values)).unwrap()
}

/// A `dtype` buffer of `n` elements filled with a sentinel byte pattern, so an
/// element the kernel failed to write is noticed.
pub fn sentinel(dev: &Device, dtype: Dtype, n: usize) -> DeviceBuffer<u8> {
    let mut buf = dev.alloc::<u8>(n * dtype.size()).unwrap();
    buf.fill_bytes(0x7B).unwrap();
    buf
}

/// The storage bits of a downloaded `dtype` buffer.
pub fn download_bits(dtype: Dtype, buf: &DeviceBuffer<u8>) -> Vec<u32> {
    let bytes = buf.download().unwrap();
    bytes
        .chunks_exact(dtype.size())
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect()
}

/// A label for messages: `cpu/bf16`.
pub fn label(dev: &Device, dtype: Dtype) -> String {
    format!("{}/{}", dev.backend(), dtype)
}
