//! The host's `f16`: IEEE binary16 as its bits, for the emulator on a stable
//! rustc (the primitive `f16` is unstable). The GPU targets use the primitive.
//!
//! Its conversions are the ones rustc's own `f16` gets on the host, where LLVM
//! lowers `as` to the runtime's `__extendhfsf2` and `__truncsfhf2`: widening is
//! exact and keeps a NaN's payload and its quiet bit as they are; narrowing
//! rounds to nearest, ties to even, keeps subnormals, overflows to infinity and
//! turns a NaN into a quiet NaN with the top 9 bits of its payload. So the
//! emulator computes the same bits as with the primitive (compared on every
//! input of each conversion and every pair of a product with nightly-2026-05-20),
//! except the payload of the product of two NaNs, which Rust leaves unspecified
//! for the primitive too (either operand's). `tests/num.rs` checks both
//! directions on every input against `half` and the NaN rules above.

/// IEEE binary16 (see the module).
#[allow(non_camel_case_types)]
#[repr(transparent)]
#[derive(Clone, Copy, Default)]
pub struct f16(u16);

impl f16 {
    /// The largest finite value, 65504.
    pub const MAX: f16 = f16(0x7BFF);
    /// The smallest positive normal value, 2^-14.
    pub const MIN_POSITIVE: f16 = f16(0x0400);
    /// Positive infinity.
    pub const INFINITY: f16 = f16(0x7C00);

    /// From raw bits.
    #[inline(always)]
    pub const fn from_bits(bits: u16) -> f16 {
        f16(bits)
    }

    /// The raw bits.
    #[inline(always)]
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// True for a NaN.
    #[inline(always)]
    pub const fn is_nan(self) -> bool {
        self.0 & 0x7FFF > 0x7C00
    }

    /// Exact widening (`as f32` for the primitive).
    #[inline(always)]
    pub const fn to_f32(self) -> f32 {
        f32::from_bits(widen(self.0))
    }

    /// Rounding to nearest, ties to even (`as f16` for the primitive).
    #[inline(always)]
    pub const fn from_f32(v: f32) -> f16 {
        f16(narrow(v.to_bits()))
    }
}

/// The f32 bits of the binary16 `h`.
const fn widen(h: u16) -> u32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let abs = h & 0x7FFF;
    let body = if abs >= 0x7C00 {
        // Infinity or NaN: the payload moves up, the quiet bit included.
        0x7F80_0000 | ((abs & 0x03FF) as u32) << 13
    } else if abs >= 0x0400 {
        // Normal: rebias the exponent (127 - 15 = 112).
        ((abs as u32) << 13) + (112 << 23)
    } else if abs != 0 {
        // Subnormal: normalize. `abs` has its leading one at bit 10 - scale.
        let scale = abs.leading_zeros() - 5;
        let significand = ((abs as u32) << (13 + scale)) ^ (1 << 23);
        significand | ((113 - scale) << 23)
    } else {
        0
    };
    sign | body
}

/// The binary16 bits of the f32 with bits `f`, rounded to nearest, ties to even.
const fn narrow(f: u32) -> u16 {
    let sign = ((f >> 16) & 0x8000) as u16;
    let abs = f & 0x7FFF_FFFF;
    let body = if abs >= 113 << 23 && abs < 143 << 23 {
        // Normal in binary16: drop 13 bits, rebias, round (a carry may reach infinity).
        let truncated = (abs >> 13) - (112 << 10);
        round(truncated, abs & 0x1FFF)
    } else if abs > 0x7F80_0000 {
        // NaN: quiet, with the top bits of the payload.
        0x7E00 | (((abs & 0x003F_FFFF) >> 13) & 0x01FF)
    } else if abs >= 143 << 23 {
        // Too large, or infinity.
        0x7C00
    } else {
        // Subnormal in binary16, or zero (below 2^-25 nothing is left to round up).
        let shift = 113 - (abs >> 23);
        if shift > 23 {
            0
        } else {
            let significand = (abs & 0x007F_FFFF) | 0x0080_0000;
            let sticky = (significand << (32 - shift) != 0) as u32;
            let denormal = (significand >> shift) | sticky;
            round(denormal >> 13, denormal & 0x1FFF)
        }
    };
    (sign as u32 | body) as u16
}

/// `kept` rounded by the 13 dropped bits `rest`: nearest, ties to even.
const fn round(kept: u32, rest: u32) -> u32 {
    if rest > 0x1000 {
        kept + 1
    } else if rest == 0x1000 {
        kept + (kept & 1)
    } else {
        kept
    }
}

impl core::ops::Mul for f16 {
    type Output = f16;
    /// The binary16 product: the f32 product (exact for two binary16 values)
    /// rounded once, as LLVM computes the primitive's product on the host. Of
    /// two NaNs, the result carries either one's payload.
    #[inline(always)]
    fn mul(self, rhs: f16) -> f16 {
        f16::from_f32(self.to_f32() * rhs.to_f32())
    }
}

impl PartialEq for f16 {
    /// IEEE equality: `-0 == +0`, a NaN equals nothing.
    #[inline(always)]
    fn eq(&self, other: &f16) -> bool {
        self.to_f32() == other.to_f32()
    }
}

impl PartialOrd for f16 {
    #[inline(always)]
    fn partial_cmp(&self, other: &f16) -> Option<core::cmp::Ordering> {
        self.to_f32().partial_cmp(&other.to_f32())
    }
}

impl core::fmt::Debug for f16 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(&self.to_f32(), f)
    }
}

impl core::fmt::Display for f16 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.to_f32(), f)
    }
}
