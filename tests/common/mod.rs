//! Shared by the kernel tests: every backend present, and data movement helpers.
#![allow(dead_code)]

use mlxcel_amdgpu::reference::{self, Dtype};
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer};

/// Every backend present on this machine: the CPU emulator always; HIP and
/// CUDA when a device exists. An absent backend is skipped with a printed reason.
pub fn devices() -> Vec<Device> {
    let mut out = Vec::new();
    for kind in [BackendKind::Hip, BackendKind::Cuda] {
        match Device::open(kind) {
            Ok(d) => {
                eprintln!("[backend] {kind}: {} ({}), kernels: {:?}", d.info().name, d.info().arch, d.info().kernels);
                out.push(d);
            }
            Err(e) => eprintln!("[backend] {kind}: skipped: {e}"),
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
