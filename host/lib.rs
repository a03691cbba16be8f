//! mlxcel-amdgpu: GPU kernels written in Rust, compiled to AMD GPU code objects,
//! loaded through HIP (or CUDA, for verification, or the CPU emulator) and
//! exposed to mlxcel through a C ABI.

pub mod audit;
pub mod code_object;
pub mod embedded;

pub use kernels_device;
