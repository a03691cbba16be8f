//! mlxcel-amdgpu: GPU kernels written in Rust, compiled to AMD GPU code objects,
//! loaded through HIP (or CUDA, for verification, or the CPU emulator) and
//! exposed to mlxcel through a C ABI.
//!
//! - [`runtime`]: devices, buffers, streams and launches on the `hip`, `cuda`
//!   and `cpu` backends;
//! - [`code_object`], [`audit`]: reading and checking AMD code objects (the
//!   `mlxcel-amdgpu-code-object` crate, re-exported here);
//! - [`embedded`]: the kernel binaries built by `build.rs`.
//!
//! The CPU references, the device fixtures of the tests, the self-test and the
//! `mlxcel-amdgpu` command are in the `mlxcel-amdgpu-testkit` crate (`testkit/`),
//! which depends on this one.

pub use ::code_object;
pub use ::code_object::audit;
pub mod dtype;
pub mod embedded;
pub mod error;
pub mod ffi;
pub mod kernels;
pub mod runtime;

pub use dtype::{Dtype, Element};
pub use error::{Error, Result};
pub use half;
pub use kernels_device;
pub use runtime::{BackendKind, Device, DeviceBuffer, Kernel, Stream};
