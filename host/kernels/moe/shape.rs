//! [`MoeShape`], in a file of its own because it is the C ABI's struct too:
//! cbindgen reads this file with `host/ffi.rs` and writes the struct into
//! `include/mlxcel_amdgpu.h` as `MlxcelAmdgpuMoeShape` (`cbindgen.toml`), so the
//! Rust API and the C ABI share one definition.

/// The shape and quantization format of one routed-expert layer (MLX affine
/// format): `bits` 4 or 8, `group_size` 32, 64 or 128; `din` and `dff`
/// multiples of it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    /// Experts in the stacks `w1`, `w2` (E).
    pub n_experts: u32,
    /// Expert slots of the token (K, the top-k).
    pub k: u32,
    /// Hidden size (Din).
    pub din: u32,
    /// Expert intermediate size (Dff).
    pub dff: u32,
    /// Bits per weight: 4 or 8.
    pub bits: u32,
    /// Columns per scale and bias: 32, 64 or 128.
    pub group_size: u32,
}
