//! CPU reference implementations: the oracle of every kernel test.
//!
//! Implements the notation of docs/contracts.md, section 1 (`f()`, `R()`, `T()`), and the
//! conversions of its section 2. Everything here is plain, scalar, safe Rust, independent of
//! the device crate: the only dependency is the `half` crate (for f16 conversions).
//!
//! Conventions used by every module:
//! - Tensor data travels as `&[f32]` holding values that are already representable in the
//!   storage dtype (`f(v)` of the stored `T` value), plus the [`Dtype`].
//! - Outputs that the contract stores as `T` are returned as `Vec<f32>` already rounded to the
//!   dtype (`R()` applied), so `store_all(dtype, &out)` gives the exact bits a kernel must write.
//! - Plain `+ - * /` are single IEEE f32 operations; `f32::mul_add` appears exactly where the
//!   contract says `fma`, and nowhere else. Accumulations are written `acc = acc + v` on
//!   purpose (they spell out the contract's order), hence the clippy allowances below.

#![allow(clippy::assign_op_pattern, clippy::needless_range_loop, clippy::too_many_arguments)]

pub mod data;
pub mod expm1;
pub mod layer_norm;
pub mod mamba;
pub mod metrics;
pub mod moe;
pub mod xielu;

/// Storage dtype of activations (`T` in docs/contracts.md); the library's own [`Dtype`](mlxcel_amdgpu::Dtype).
pub use mlxcel_amdgpu::Dtype;

/// `f(v)`: widens stored bits of `dtype` to f32, exactly. For 16-bit dtypes only the low 16 bits
/// of `bits` are used.
pub fn widen(dtype: Dtype, bits: u32) -> f32 {
    match dtype {
        Dtype::F32 => f32::from_bits(bits),
        Dtype::F16 => half::f16::from_bits(bits as u16).to_f32(),
        Dtype::Bf16 => bf16_bits_to_f32(bits as u16),
    }
}

/// `T(v)`: rounds an f32 to `dtype` (nearest, ties to even) and returns the stored bits
/// (zero-extended to u32 for 16-bit dtypes). NaN stays NaN.
pub fn store(dtype: Dtype, v: f32) -> u32 {
    match dtype {
        Dtype::F32 => v.to_bits(),
        Dtype::F16 => half::f16::from_f32(v).to_bits() as u32,
        Dtype::Bf16 => f32_to_bf16_bits(v) as u32,
    }
}

/// `R(v)`: rounds an f32 to `dtype` and widens it back (the identity for f32).
pub fn round(dtype: Dtype, v: f32) -> f32 {
    widen(dtype, store(dtype, v))
}

/// bf16 -> f32, exact: the bf16 bits are the upper half of the f32 (docs/contracts.md, section 2).
pub fn bf16_bits_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// f32 -> bf16 bits, round to nearest even on the bits (docs/contracts.md, section 2):
/// `(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16` for finite values and infinities;
/// a NaN keeps its sign and upper payload and gets mantissa bit 0x40 set so it stays a NaN.
pub fn f32_to_bf16_bits(v: f32) -> u16 {
    let bits = v.to_bits();
    if v.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    // No overflow: the largest non-NaN pattern is 0xFF80_0000 (-inf).
    ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) as u16
}

/// True when `bits` encode a NaN in `dtype` (used for "compare NaN-ness, not payloads").
pub fn is_nan_bits(dtype: Dtype, bits: u32) -> bool {
    match dtype {
        Dtype::F32 => f32::from_bits(bits).is_nan(),
        Dtype::F16 => (bits & 0x7C00) == 0x7C00 && (bits & 0x03FF) != 0,
        Dtype::Bf16 => (bits & 0x7F80) == 0x7F80 && (bits & 0x007F) != 0,
    }
}

/// `R()` applied to every element: casts f32 data to values representable in `dtype`.
pub fn round_all(dtype: Dtype, v: &[f32]) -> Vec<f32> {
    v.iter().map(|&e| round(dtype, e)).collect()
}

/// `T()` applied to every element: the stored bits (zero-extended to u32).
pub fn store_all(dtype: Dtype, v: &[f32]) -> Vec<u32> {
    v.iter().map(|&e| store(dtype, e)).collect()
}

/// `f()` applied to every element of a slice of stored bits.
pub fn widen_all(dtype: Dtype, bits: &[u32]) -> Vec<f32> {
    bits.iter().map(|&b| widen(dtype, b)).collect()
}

/// Little-endian bytes of `T(v)` for every element: the layout of a device buffer of `dtype`.
pub fn to_le_bytes(dtype: Dtype, v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * dtype.size());
    for &e in v {
        let bits = store(dtype, e);
        match dtype {
            Dtype::F32 => out.extend_from_slice(&bits.to_le_bytes()),
            Dtype::F16 | Dtype::Bf16 => out.extend_from_slice(&(bits as u16).to_le_bytes()),
        }
    }
    out
}

/// Inverse of [`to_le_bytes`]: widens a little-endian device buffer of `dtype` to f32 values.
/// Panics if the length is not a multiple of the element size.
pub fn from_le_bytes(dtype: Dtype, bytes: &[u8]) -> Vec<f32> {
    let size = dtype.size();
    assert!(bytes.len().is_multiple_of(size), "{} buffer of {} bytes", dtype.name(), bytes.len());
    bytes
        .chunks_exact(size)
        .map(|c| {
            let bits = match dtype {
                Dtype::F32 => u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                Dtype::F16 | Dtype::Bf16 => u16::from_le_bytes([c[0], c[1]]) as u32,
            };
            widen(dtype, bits)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes() {
        assert_eq!(Dtype::F32.name(), "f32");
        assert_eq!(Dtype::F16.name(), "f16");
        assert_eq!(Dtype::Bf16.name(), "bf16");
        assert_eq!(Dtype::F32.size(), 4);
        assert_eq!(Dtype::F16.size(), 2);
        assert_eq!(Dtype::Bf16.size(), 2);
    }

    /// Our bf16 rounding agrees with the `half` crate on every bf16 value and on a sweep of f32.
    #[test]
    fn bf16_matches_half_crate() {
        for b in 0..=u16::MAX {
            let v = bf16_bits_to_f32(b);
            let theirs = half::bf16::from_bits(b).to_f32();
            // (half quiets signaling NaNs when widening: compare NaN-ness, not payloads)
            assert!(v.to_bits() == theirs.to_bits() || (v.is_nan() && theirs.is_nan()), "{b:#06x}");
            if v.is_nan() {
                assert!(is_nan_bits(Dtype::Bf16, f32_to_bf16_bits(v) as u32));
            } else {
                assert_eq!(f32_to_bf16_bits(v), b, "roundtrip {b:#06x}");
            }
        }
        // Sweep of f32 bit patterns (stride co-prime with 2^16 so every low half is visited).
        let mut bits: u32 = 0;
        for _ in 0..3_000_000u32 {
            let v = f32::from_bits(bits);
            let ours = f32_to_bf16_bits(v);
            let theirs = half::bf16::from_f32(v).to_bits();
            if v.is_nan() {
                assert!(is_nan_bits(Dtype::Bf16, ours as u32) && half::bf16::from_bits(theirs).is_nan());
            } else {
                assert_eq!(ours, theirs, "f32 {bits:#010x}");
            }
            bits = bits.wrapping_add(1431);
        }
        // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even gives 1.
        assert_eq!(round(Dtype::Bf16, 1.0 + 1.0 / 256.0), 1.0);
        assert_eq!(round(Dtype::Bf16, 1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0);
        // Overflow to infinity, NaN stays NaN.
        assert_eq!(round(Dtype::Bf16, f32::MAX), f32::INFINITY);
        assert!(round(Dtype::Bf16, f32::NAN).is_nan());
    }

    #[test]
    fn f16_rounding() {
        assert_eq!(round(Dtype::F16, 65520.0), f32::INFINITY); // halfway to 2^16: overflows
        assert_eq!(round(Dtype::F16, 65519.0), 65504.0);
        assert_eq!(round(Dtype::F16, 1.0 + 1.0 / 2048.0), 1.0); // tie to even
        assert_eq!(round(Dtype::F16, 2f32.powi(-24)), 2f32.powi(-24)); // subnormal kept
        assert!(round(Dtype::F16, f32::NAN).is_nan());
        assert!(is_nan_bits(Dtype::F16, store(Dtype::F16, f32::NAN)));
        assert_eq!(store(Dtype::F16, -0.0), 0x8000);
    }

    #[test]
    fn bytes_roundtrip() {
        for dtype in Dtype::ALL {
            let v = round_all(dtype, &[1.5, -2.25, 0.1, 1e-3, -0.0]);
            let bytes = to_le_bytes(dtype, &v);
            assert_eq!(bytes.len(), v.len() * dtype.size());
            let back = from_le_bytes(dtype, &bytes);
            assert_eq!(store_all(dtype, &back), store_all(dtype, &v));
            assert_eq!(widen_all(dtype, &store_all(dtype, &v)), back);
        }
    }
}
