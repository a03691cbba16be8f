//! The mlxcel-amdgpu kernels, written once.
//!
//! This crate is compiled three ways from the same source:
//! - for `amdgcn-amd-amdhsa` (the product: one code object per GPU target),
//! - for `nvptx64-nvidia-cuda` (tier-3 verification on NVIDIA's 32-lane warps),
//! - for the host, where [`emulator`] runs the kernel bodies lane by lane so that
//!   `cargo test` checks the real kernel code on a machine with no GPU.
//!
//! Kernel bodies are generic over the element type and use only the primitives of
//! [`wave`] and the toolkit of [`vector`] (the aligned vector type and the unroll
//! macro); the `extern "gpu-kernel"` entry points are stamped out in [`entry`].
#![no_std]
#![cfg_attr(any(target_arch = "amdgpu", target_arch = "nvptx64"), feature(abi_gpu_kernel))]
#![cfg_attr(
    any(target_arch = "amdgpu", target_arch = "nvptx64"),
    feature(gpu_intrinsics, gpu_launch_sized_workgroup_mem, core_intrinsics)
)]
#![cfg_attr(target_arch = "amdgpu", feature(stdarch_amdgpu))]
#![cfg_attr(target_arch = "amdgpu", feature(link_llvm_intrinsics))]
#![cfg_attr(
    target_arch = "nvptx64",
    feature(stdarch_nvptx, link_llvm_intrinsics, abi_unadjusted, repr_simd, simd_ffi, asm_experimental_arch)
)]
#![cfg_attr(any(target_arch = "amdgpu", target_arch = "nvptx64"), feature(f16, core_float_math))]
#![allow(internal_features)]

#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
extern crate std;

pub mod add3_layer_norm;
pub mod args;
pub mod entry;
pub mod geometry;
pub mod mamba1_scan;
pub mod moe;
pub mod num;
pub mod probe;
/// Planted races for the interpreter's race checker: the test-only object (feature `race-plants`).
#[cfg(feature = "race-plants")]
pub mod race_plants;
pub mod vector;
pub mod wave;
pub mod xielu;

#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub mod emulator;

/// Kernels must never panic. On amdgpu the panic handler calls a function that
/// exists nowhere: a panic path that survives optimization leaves an undefined
/// symbol in the code object, and the build's audit refuses it. (A trap would
/// also be loud, but LLVM cannot encode the amdgpu trap sequence for the
/// generic targets.) On nvptx a panic traps, which fails the launch.
#[cfg(target_arch = "amdgpu")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    unsafe extern "C" {
        fn mlxcel_kernel_may_panic() -> !;
    }
    unsafe { mlxcel_kernel_may_panic() }
}
#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    core::intrinsics::abort()
}
