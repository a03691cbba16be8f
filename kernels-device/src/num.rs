//! Element types and the scalar numerics shared by every kernel (see
//! docs/contracts.md, section 2).
//!
//! Everything here uses only IEEE operations (`+ - * /`, `mul_add`, `sqrt`,
//! `round_ties_even`, comparisons, conversions and bit casts), so the
//! same source gives the same bits on amdgpu, nvptx and the host. One exception:
//! on NVIDIA a rounding to bf16 is the hardware's `cvt.rn.bf16.f32`, which gives
//! the same bits except for a NaN's payload (the contracts compare NaN-ness).
//! Nothing here can panic.

use self::math::{mul_add, round_ties_even};

/// IEEE binary16. On the GPU targets the primitive `f16`; on the host (the
/// emulator, built by a stable rustc) [`host_f16::f16`], the same bits from
/// every operation the kernels use.
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
#[allow(non_camel_case_types)]
pub type f16 = primitive::F16;
/// The primitive, named where nothing shadows it.
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
mod primitive {
    pub type F16 = f16;
}
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub use host_f16::f16;
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
pub mod host_f16;

/// The correctly rounded f32 operations the kernels use beyond `+ - * /`: on
/// the GPU targets `core::f32::math`'s, on the host std's methods, which give
/// the same bits (each is one correctly rounded IEEE operation).
pub mod math {
    #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
    pub use core::f32::math::{mul_add, round_ties_even, sqrt};

    /// `a * b + c` with one rounding.
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    #[inline(always)]
    pub fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }

    /// The square root, correctly rounded.
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    #[inline(always)]
    pub fn sqrt(v: f32) -> f32 {
        v.sqrt()
    }

    /// The nearest integer, ties to even.
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    #[inline(always)]
    pub fn round_ties_even(v: f32) -> f32 {
        v.round_ties_even()
    }
}

// ---------------------------------------------------------------------------
// Element types
// ---------------------------------------------------------------------------

/// A storage dtype of activations: `f32`, `f16` or [`Bf16`].
///
/// Arithmetic always happens in f32: [`Elem::to_f32`] widens exactly (the
/// spec's `f(v)`), [`Elem::from_f32`] rounds to nearest, ties to even (the
/// spec's `T(e)`).
pub trait Elem: Copy + Send + Sync + 'static {
    /// The dtype's name as it appears in kernel symbols (`"f32"`, `"f16"`, `"bf16"`).
    const NAME: &'static str;
    /// Storage size in bytes.
    const BYTES: usize;
    /// Explicitly stored significand bits (f32 23, f16 10, bf16 7).
    const MANTISSA_BITS: u32;
    /// Exact widening to f32.
    fn to_f32(self) -> f32;
    /// Round an f32 to this type: nearest, ties to even; NaN stays NaN.
    fn from_f32(v: f32) -> Self;
    /// The raw storage bits, zero-extended to 32 bits.
    fn to_bits_u32(self) -> u32;
    /// From raw storage bits (the low `8 * BYTES` bits of `bits` are used).
    fn from_bits_u32(bits: u32) -> Self;
    /// The contracts' `R(e)`: round to this type and widen back. Types override it
    /// where a shorter exact sequence exists.
    #[inline(always)]
    fn round_f32(v: f32) -> f32 {
        Self::from_f32(v).to_f32()
    }
    /// A value `v` that is already one of this type's (as [`Elem::round_f32`]
    /// returns them) in storage form, without rounding again: for bf16 the top
    /// half of the bits. Any other `v` gives an unspecified value of the type,
    /// except that a NaN whose top 16 bits are a bf16 NaN (every quiet NaN, and
    /// every NaN widened from bf16) stays a NaN.
    #[inline(always)]
    fn from_rounded(v: f32) -> Self {
        Self::from_f32(v)
    }
    /// True when the storage bits are the top half of the f32 the value widens
    /// to (bf16): written over a zero low half, they are that f32.
    const WIDENS_AS_TOP_HALF: bool = false;
    /// True when [`Elem::round_normal`] is exact only on part of the f32 range:
    /// `+0.0` and normal values with `2^-126 <= |v| < 2^111`.
    const ROUND_NORMAL_IS_PARTIAL: bool = false;
    /// [`Elem::round_f32`] by a shorter sequence where one exists, equal to it
    /// bit for bit on the whole f32 range unless [`Elem::ROUND_NORMAL_IS_PARTIAL`]
    /// says otherwise (then only on the part it names; outside it, the result is
    /// wrong). Callers that use it on a partial type check their values' range.
    #[inline(always)]
    fn round_normal(v: f32) -> f32 {
        Self::round_f32(v)
    }
}

/// [`Elem`] for a native IEEE float type `$t` whose bits are the integer
/// `$bits`: the conversions are `as` casts. Narrowing rounds to nearest even,
/// keeps subnormals and overflows to infinity (the native conversion does
/// exactly this on amdgpu, nvptx and the host).
macro_rules! native_elem {
    ($t:ident, $bits:ty, $name:literal, $bytes:literal, $mantissa:literal) => {
        impl Elem for $t {
            const NAME: &'static str = $name;
            const BYTES: usize = $bytes;
            const MANTISSA_BITS: u32 = $mantissa;
            #[inline(always)]
            fn to_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn from_f32(v: f32) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_bits_u32(self) -> u32 {
                self.to_bits() as u32
            }
            #[inline(always)]
            fn from_bits_u32(bits: u32) -> Self {
                $t::from_bits(bits as $bits)
            }
        }
    };
}

native_elem!(f32, u32, "f32", 4, 23);
#[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
native_elem!(f16, u16, "f16", 2, 10);

/// The host's binary16: the same conversions as the primitive's `as` casts.
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
impl Elem for f16 {
    const NAME: &'static str = "f16";
    const BYTES: usize = 2;
    const MANTISSA_BITS: u32 = 10;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    #[inline(always)]
    fn to_bits_u32(self) -> u32 {
        self.to_bits() as u32
    }
    #[inline(always)]
    fn from_bits_u32(bits: u32) -> Self {
        f16::from_bits(bits as u16)
    }
}

/// bfloat16, stored as its raw bits (Rust has no bf16 type).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Round to nearest, ties to even, on the bits:
    /// `(bits + 0x7FFF + ((bits >> 16) & 1)) >> 16` for finite values and
    /// infinities (overflow goes to infinity); a NaN stays a NaN (quiet bit set).
    #[inline(always)]
    pub const fn from_f32(v: f32) -> Self {
        Bf16((Self::round_bits(v.to_bits()) >> 16) as u16)
    }

    /// The f32 bits of `v` rounded to bf16, in the upper half (the lower half is
    /// garbage). Branch-free: this runs seven times per element in xielu's model
    /// (on AMD and the host), and a branch per conversion costs more than the
    /// arithmetic.
    #[inline(always)]
    const fn round_bits(bits: u32) -> u32 {
        let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1));
        let quieted = bits | 0x0040_0000;
        let nan_mask = 0u32.wrapping_sub(f32::from_bits(bits).is_nan() as u32);
        (quieted & nan_mask) | (rounded & !nan_mask)
    }

    /// Exact widening: `(bits as u32) << 16`.
    #[inline(always)]
    pub const fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }

    /// The raw bits.
    #[inline(always)]
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// From raw bits.
    #[inline(always)]
    pub const fn from_bits(bits: u16) -> Self {
        Bf16(bits)
    }
}

/// NVIDIA's conversion to bf16, `cvt.rn.bf16.f32` (sm_80 and later): nearest,
/// ties to even, overflow to infinity, subnormals kept; a NaN gives the
/// canonical NaN (the contracts compare NaN-ness, not payloads). One
/// instruction where [`Bf16::from_f32`] takes six integer ones.
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn cvt_rn_bf16(v: f32) -> u16 {
    unsafe extern "C" {
        #[link_name = "llvm.nvvm.f2bf16.rn"]
        fn f2bf16_rn(v: f32) -> u16;
    }
    unsafe { f2bf16_rn(v) }
}

impl Elem for Bf16 {
    const NAME: &'static str = "bf16";
    const BYTES: usize = 2;
    const MANTISSA_BITS: u32 = 7;
    const WIDENS_AS_TOP_HALF: bool = true;
    // On NVIDIA the trait's `from_f32(v).to_f32()`: the conversion, widened.
    #[cfg(not(target_arch = "nvptx64"))]
    #[inline(always)]
    fn round_f32(v: f32) -> f32 {
        f32::from_bits(Bf16::round_bits(v.to_bits()) & 0xFFFF_0000)
    }
    #[inline(always)]
    fn from_rounded(v: f32) -> Self {
        Bf16((v.to_bits() >> 16) as u16)
    }
    // On NVIDIA `round_normal` is the hardware's rounding, exact everywhere.
    const ROUND_NORMAL_IS_PARTIAL: bool = !cfg!(target_arch = "nvptx64");
    /// Veltkamp's split with `C = 2^16 + 1`: `g = C v; hi = g + (v - g)` keeps the
    /// top 8 significant bits of `v`, rounded to nearest, ties to even: three
    /// floating-point operations instead of five or six integer ones. Checked
    /// against [`Elem::round_f32`] on
    /// every f32 (`tests/num.rs`): equal for `+0.0` and for every normal value
    /// with `|v| < 2^111`; wrong for `-0.0` (gives `+0.0`), subnormals, `C v`
    /// overflowing (from just below 2^112), infinities and NaN. On NVIDIA it is
    /// [`Elem::round_f32`], one conversion (`cvt.rn.bf16.f32`), exact everywhere.
    #[inline(always)]
    fn round_normal(v: f32) -> f32 {
        if cfg!(target_arch = "nvptx64") {
            return Self::round_f32(v);
        }
        let g = 65537.0 * v;
        g + (v - g)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        Bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        #[cfg(target_arch = "nvptx64")]
        return Bf16(cvt_rn_bf16(v));
        #[cfg(not(target_arch = "nvptx64"))]
        Bf16::from_f32(v)
    }
    #[inline(always)]
    fn to_bits_u32(self) -> u32 {
        self.0 as u32
    }
    #[inline(always)]
    fn from_bits_u32(bits: u32) -> Self {
        Bf16(bits as u16)
    }
}

/// The contracts' `R(e)` (docs/contracts.md, section 1): round an f32 to `T` and widen it back (identity for f32).
#[inline(always)]
pub fn round_to<T: Elem>(v: f32) -> f32 {
    T::round_f32(v)
}

// ---------------------------------------------------------------------------
// Powers of two
// ---------------------------------------------------------------------------

/// `2^e` exactly, as `ldexp(1.0, e)` gives it: a normal power of two for
/// `e` in [-126, 127], a subnormal one for [-149, -127], `+0.0` below and
/// `+inf` above.
#[inline(always)]
pub fn ldexp1(e: i32) -> f32 {
    if e > 127 {
        f32::INFINITY
    } else if e >= -126 {
        f32::from_bits((e.wrapping_add(127) as u32) << 23)
    } else if e >= -149 {
        // e + 149 is in [0, 22]: the shift never overflows.
        f32::from_bits(1u32.wrapping_shl(e.wrapping_add(149) as u32))
    } else {
        0.0
    }
}

// ---------------------------------------------------------------------------
// expm1: the AMD device library's expm1f, step for step
// ---------------------------------------------------------------------------

/// The exact f32 constants of [`expm1`] (and the ln 2 split shared with [`exp`]).
/// Each is written as its bit pattern; the comment gives the hexadecimal float
/// of docs/contracts.md, section 2, and its exact decimal value.
pub mod consts {
    /// `0x1.715476p+0` = 1.44269502162933349609375 (log2 e, rounded).
    pub const LOG2E: f32 = f32::from_bits(0x3FB8_AA3B);
    /// `0x1.62e430p-1` = 0.693147182464599609375 (ln 2, high part; also ln 2
    /// rounded to the nearest f32).
    pub const LN2_HI: f32 = f32::from_bits(0x3F31_7218);
    /// `-0x1.05c610p-29` = -1.9046542121259335544891655445098876953125e-9
    /// (ln 2 = LN2_HI + LN2_LO, low part; negative).
    pub const LN2_LO: f32 = f32::from_bits(0xB102_E308);
    /// `0x1.a26762p-13` = 0.000199510497623123228549957275390625.
    pub const EXPM1_P5: f32 = f32::from_bits(0x3951_33B1);
    /// `0x1.6d2e00p-10` = 0.0013930499553680419921875.
    pub const EXPM1_P4: f32 = f32::from_bits(0x3AB6_9700);
    /// `0x1.110ff2p-7` = 0.008333199657499790191650390625.
    pub const EXPM1_P3: f32 = f32::from_bits(0x3C08_87F9);
    /// `0x1.555502p-5` = 0.0416665114462375640869140625.
    pub const EXPM1_P2: f32 = f32::from_bits(0x3D2A_AA81);
    /// `0x1.555556p-3` = 0.16666667163372039794921875.
    pub const EXPM1_P1: f32 = f32::from_bits(0x3E2A_AAAB);
    /// `0x1.000000p-1` = 0.5.
    pub const EXPM1_P0: f32 = f32::from_bits(0x3F00_0000);
    /// `0x1.62e42ep+6` = 88.72283172607421875: the largest x whose exp is finite.
    pub const EXP_OVERFLOW_X: f32 = f32::from_bits(0x42B1_7217);

    /// Taylor coefficients 1/k! (k = 2..7) of [`super::exp`], rounded to f32.
    /// `0x1.000000p-1` = 1/2.
    pub const EXP_C2: f32 = f32::from_bits(0x3F00_0000);
    /// `0x1.555556p-3` ~ 1/6.
    pub const EXP_C3: f32 = f32::from_bits(0x3E2A_AAAB);
    /// `0x1.555556p-5` ~ 1/24.
    pub const EXP_C4: f32 = f32::from_bits(0x3D2A_AAAB);
    /// `0x1.111112p-7` ~ 1/120.
    pub const EXP_C5: f32 = f32::from_bits(0x3C08_8889);
    /// `0x1.6c16c2p-10` ~ 1/720.
    pub const EXP_C6: f32 = f32::from_bits(0x3AB6_0B61);
    /// `0x1.a01a02p-13` ~ 1/5040.
    pub const EXP_C7: f32 = f32::from_bits(0x3950_0D01);
    /// Below this x, exp(x) < 2^-150 and rounds to +0.0 (`-0x1.ap+6` = -104).
    pub const EXP_UNDERFLOW_X: f32 = -104.0;
}

/// `horner!(t; c_n, ..., c_1, c_0)`: the polynomial `c_n t^n + ... + c_1 t + c_0`
/// by Horner's rule, one `mul_add` a coefficient, highest first
/// (`mul_add(t, c_n, c_{n-1})`, then `mul_add(t, p, c_{n-2})`, ...).
macro_rules! horner {
    ($t:expr; $high:expr $(, $c:expr)+) => {{
        let p = $high;
        $( let p = mul_add($t, p, $c); )+
        p
    }};
}

/// `e^t - 1` for `t = x - n ln 2` (the Cody-Waite reduction of [`expm1`], in
/// its order), by the contract's degree-7 polynomial: the part of `expm1` both of
/// its forms share.
#[inline(always)]
fn expm1_reduced(x: f32, n: f32) -> f32 {
    use consts::*;
    let t = mul_add(-n, LN2_LO, mul_add(-n, LN2_HI, x));
    let p = horner!(t; EXPM1_P5, EXPM1_P4, EXPM1_P3, EXPM1_P2, EXPM1_P1, EXPM1_P0);
    mul_add(t, t * p, t)
}

/// `expm1(x)` exactly as the AMD device library's `expm1f` computes it
/// (docs/contracts.md, section 2, "expm1"): the steps, not the best expm1.
///
/// At most 0.89 ulp of error on [-17, 0) and about 1.45 ulp above 0.
/// NaN -> NaN, -inf -> -1, +inf -> +inf, -0.0 -> +0.0, x < -17 -> -1,
/// x > 0x1.62e42ep+6 -> +inf.
#[inline(always)]
pub fn expm1(x: f32) -> f32 {
    use consts::*;
    let n = round_ties_even(x * LOG2E);
    let p = expm1_reduced(x, n);
    // `as` saturates and maps NaN to 0, as the contract asks.
    let e = if n == 128.0 { 127 } else { n as i32 };
    let s = ldexp1(e);
    let mut z = mul_add(s, p, s - 1.0);
    if n == 128.0 {
        z *= 2.0;
    }
    if x > EXP_OVERFLOW_X {
        z = f32::INFINITY;
    }
    if x < -17.0 {
        z = -1.0;
    }
    z
}

/// [`expm1`] for `x <= 0` (either zero), `-inf` and NaN, bit for bit, in fewer
/// operations: `rint(x log2 e)` by adding and removing `1.5 * 2^23` (exact, ties
/// to even, while `|x log2 e| < 2^22`), and `2^n` from the bits of that sum
/// instead of a float-to-int conversion and [`ldexp1`]'s range checks. For
/// `x` in [-17, 0], `n` is in [-25, 0]; below -17 the result is -1 whatever
/// `n` was. Checked against [`expm1`] on every f32 `x <= 0` (`tests/num.rs`).
/// For `x > 0` the result is wrong: call [`expm1`].
#[inline(always)]
pub fn expm1_nonpos(x: f32) -> f32 {
    use consts::*;
    /// `1.5 * 2^23`: adding it rounds to an integer (ties to even) and keeps
    /// that integer, as two's complement, in the low mantissa bits.
    const SHIFTER: f32 = 12_582_912.0;
    let k = x * LOG2E + SHIFTER;
    let n = k - SHIFTER;
    let p = expm1_reduced(x, n);
    // (bits(k) << 23) keeps exactly n << 23 (the shifter's own bits shift out);
    // adding the exponent bias gives 2^n for n in [-25, 0].
    let s = f32::from_bits((k.to_bits() << 23).wrapping_add(0x3F80_0000));
    let z = mul_add(s, p, s - 1.0);
    if x < -17.0 { -1.0 } else { z }
}

// ---------------------------------------------------------------------------
// exp: the Mamba1 scan's exponential (tolerance contract, <= 2 ulp)
// ---------------------------------------------------------------------------

/// `e^x` in f32, within 2 ulp of the true value over the whole f32 range
/// (subnormal results included, measured in units of the smallest subnormal).
///
/// `x = n ln2 + r` with `n = rint(x log2 e)` and the Cody-Waite split of
/// [`expm1`], `|r| <= ~0.347`; `e^r - 1` by its degree-7 Taylor polynomial
/// (truncation error < 1e-8 relative); the result `2^n + 2^n (e^r - 1)` in one
/// fma, with the scale split in two for subnormal results.
/// exp(0) = 1 exactly, x > 0x1.62e42ep+6 -> +inf, x < -104 -> +0.0,
/// NaN -> NaN, -inf -> +0.0, +inf -> +inf.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    use consts::*;
    if x > EXP_OVERFLOW_X {
        return f32::INFINITY;
    }
    if x < EXP_UNDERFLOW_X {
        return 0.0;
    }
    // Here x is NaN or in [-104, 88.72283]: n in [-150, 128] (0 for NaN).
    let n = round_ties_even(x * LOG2E);
    let r = mul_add(-n, LN2_LO, mul_add(-n, LN2_HI, x));
    let q = horner!(r; EXP_C7, EXP_C6, EXP_C5, EXP_C4, EXP_C3, EXP_C2);
    // p = e^r - 1
    let p = mul_add(r, r * q, r);
    let n = n as i32;
    if n > 127 {
        // n = 128: 2^127 (1 + p) is finite, doubling it is exact.
        let s = ldexp1(n - 1);
        2.0 * mul_add(s, p, s)
    } else if n < -125 {
        // The result may be subnormal: round once at full precision in the
        // normal range, then once more by an exact power-of-two scale.
        let s = ldexp1(n + 64);
        mul_add(s, p, s) * ldexp1(-64)
    } else {
        let s = ldexp1(n);
        mul_add(s, p, s)
    }
}

// ---------------------------------------------------------------------------
// exp2_fast: the Mamba scan's exponential on GPUs (a measured exception)
// ---------------------------------------------------------------------------

/// `2^x` for the Mamba scan's decay `exp(dt * A) = 2^(dt * (A log2 e))`, through
/// the GPU's own approximation: `v_exp_f32` on amdgpu (which flushes results
/// below 2^-126 to zero) and `ex2.approx.ftz.f32` on nvptx (relative error
/// below 2^-22, results below 2^-126 flushed to zero likewise). On the host
/// (the emulator and the references) it is [`exp`]`(x * ln 2)`.
///
/// A tolerance contract takes a hardware approximation only where the tolerance tests
/// still pass on every backend and with a measured reason. The reason: the
/// exponential is one of the scan's five operations per state column and step,
/// and the scan is bound by instruction issue (`docs/performance.md`). The scan
/// passes `dt * (A log2 e)` with `A log2 e` computed once per column, so the
/// change of base costs nothing per step; it adds at most about one ulp of
/// relative error to an argument of about [-3, 0], less than 1e-6 relative in
/// the result, well inside the contract's 1e-5.
#[inline(always)]
pub fn exp2_fast(x: f32) -> f32 {
    #[cfg(target_arch = "amdgpu")]
    {
        // The bare instruction: LLVM's `exp2` adds a rescaling around it for
        // denormal results (four more instructions), and a decay below 2^-126
        // is as good as zero here.
        unsafe extern "C" {
            #[link_name = "llvm.amdgcn.exp2.f32"]
            fn v_exp_f32(x: f32) -> f32;
        }
        unsafe { v_exp_f32(x) }
    }
    #[cfg(target_arch = "nvptx64")]
    {
        // The flushing form is one MUFU.EX2 in the SASS; without `.ftz` ptxas
        // adds instructions around it to produce denormal results.
        unsafe extern "C" {
            #[link_name = "llvm.nvvm.ex2.approx.ftz.f"]
            fn ex2_approx(x: f32) -> f32;
        }
        unsafe { ex2_approx(x) }
    }
    #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
    {
        exp(x * consts::LN2_HI)
    }
}
