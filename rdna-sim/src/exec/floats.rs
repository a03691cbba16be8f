//! Float helpers: NaN rules, min/max/med3, ldexp, division scale/fixup,
//! class tests, the correctly rounded approximations and perturbation mode.

use super::*;

pub(super) fn is_snan32(x: u32) -> bool {
    x & 0x7f80_0000 == 0x7f80_0000 && x & 0x007f_ffff != 0 && x & 0x0040_0000 == 0
}
pub(super) fn is_nan32(x: u32) -> bool {
    x & 0x7fff_ffff > 0x7f80_0000
}
pub(super) fn is_snan16(x: u16) -> bool {
    x & 0x7c00 == 0x7c00 && x & 0x03ff != 0 && x & 0x0200 == 0
}
pub(super) fn is_nan16(x: u16) -> bool {
    x & 0x7fff > 0x7c00
}

/// What the ISA's NaN rules need of f32 and f16, so that one min/max and one
/// NaN-result rule serve both widths.
pub(super) trait IsaFloat: Copy {
    /// The quiet bit of a NaN.
    const QUIET: u32;
    /// The default NaN's bits.
    const DEFAULT_NAN: u32;
    fn bits(self) -> u32;
    fn with_bits(b: u32) -> Self;
    fn is_nan_bits(b: u32) -> bool;
    fn is_snan_bits(b: u32) -> bool;
    fn widen(self) -> f32;
}

impl IsaFloat for f32 {
    const QUIET: u32 = 0x0040_0000;
    const DEFAULT_NAN: u32 = 0x7fc0_0000;
    fn bits(self) -> u32 {
        self.to_bits()
    }
    fn with_bits(b: u32) -> f32 {
        f32::from_bits(b)
    }
    fn is_nan_bits(b: u32) -> bool {
        is_nan32(b)
    }
    fn is_snan_bits(b: u32) -> bool {
        is_snan32(b)
    }
    fn widen(self) -> f32 {
        self
    }
}

impl IsaFloat for f16 {
    const QUIET: u32 = 0x0200;
    const DEFAULT_NAN: u32 = 0x7e00;
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
    fn with_bits(b: u32) -> f16 {
        f16::from_bits(b as u16)
    }
    fn is_nan_bits(b: u32) -> bool {
        is_nan16(b as u16)
    }
    fn is_snan_bits(b: u32) -> bool {
        is_snan16(b as u16)
    }
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// A NaN result: the first NaN input, quieted; the default NaN when no input was NaN.
fn nan<T: IsaFloat>(r: T, inputs: &[T]) -> T {
    if !T::is_nan_bits(r.bits()) {
        return r;
    }
    match inputs.iter().find(|x| T::is_nan_bits(x.bits())) {
        Some(x) => T::with_bits(x.bits() | T::QUIET),
        None => T::with_bits(T::DEFAULT_NAN),
    }
}

pub(super) fn nan32(r: f32, inputs: &[f32]) -> f32 {
    nan(r, inputs)
}

pub(super) fn nan16(r: f16, inputs: &[f16]) -> f16 {
    nan(r, inputs)
}

/// f16 arithmetic through f32: the f32 result of +, -, * on f16 inputs rounds
/// to f16 exactly as a direct f16 operation would (24 >= 2 * 11 + 2 bits).
pub(super) fn h_op(a: f16, b: f16, op: fn(f32, f32) -> f32) -> f16 {
    nan16(f16::from_f32(op(a.to_f32(), b.to_f32())), &[a, b])
}

/// v_min / v_max per the ISA pseudocode (IEEE mode and not), -0 < +0.
fn fminmax<T: IsaFloat>(a: T, b: T, ieee: bool, max: bool) -> T {
    let (ab, bb) = (a.bits(), b.bits());
    if ieee {
        if T::is_snan_bits(ab) {
            return T::with_bits(ab | T::QUIET);
        }
        if T::is_snan_bits(bb) {
            return T::with_bits(bb | T::QUIET);
        }
    }
    if T::is_nan_bits(bb) {
        return a;
    }
    if T::is_nan_bits(ab) {
        return b;
    }
    let (x, y) = (a.widen(), b.widen());
    let pick_a = if max {
        x > y || (x == 0.0 && y == 0.0 && !x.is_sign_negative() && y.is_sign_negative())
    } else {
        x < y || (x == 0.0 && y == 0.0 && x.is_sign_negative() && !y.is_sign_negative())
    };
    if pick_a { a } else { b }
}

pub(super) fn fminmax32(a: f32, b: f32, ieee: bool, max: bool) -> f32 {
    fminmax(a, b, ieee, max)
}

pub(super) fn fminmax16(a: f16, b: f16, ieee: bool, max: bool) -> f16 {
    fminmax(a, b, ieee, max)
}

pub(super) fn fmed3_32(a: f32, b: f32, c: f32, ieee: bool) -> f32 {
    if a.is_nan() || b.is_nan() || c.is_nan() {
        return fminmax32(fminmax32(a, b, ieee, false), c, ieee, false);
    }
    let mx = fminmax32(fminmax32(a, b, ieee, true), c, ieee, true);
    if mx.to_bits() == a.to_bits() {
        fminmax32(b, c, ieee, true)
    } else if mx.to_bits() == b.to_bits() {
        fminmax32(a, c, ieee, true)
    } else {
        fminmax32(a, b, ieee, true)
    }
}

/// `x * 2^n`, one rounding.
pub fn ldexp32(x: f32, n: i32) -> f32 {
    if x.is_nan() {
        return nan32(x, &[x]);
    }
    let n = n.clamp(-400, 400);
    // Two exact f64 scalings (|n| <= 400 splits into steps of at most 200), then one rounding.
    let mut y = x as f64;
    let (a, b) = (n / 2, n - n / 2);
    y *= 2f64.powi(a);
    y *= 2f64.powi(b);
    y as f32
}

pub(super) fn biased_exp32(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xff) as i32
}

pub(super) fn is_denorm32(x: f32) -> bool {
    x.to_bits() & 0x7f80_0000 == 0 && x.to_bits() & 0x007f_ffff != 0
}

/// v_div_scale_f32 per the ISA pseudocode. Returns (D0, VCC bit).
pub fn div_scale32(s0: f32, s1: f32, s2: f32) -> (f32, bool) {
    let mut vcc = false;
    // D0 keeps S0 where the pseudocode assigns nothing.
    let mut d = s0;
    let q = s2 / s1;
    if s2 == 0.0 || s1 == 0.0 {
        d = f32::from_bits(0x7fc0_0000);
    } else if biased_exp32(s2) - biased_exp32(s1) >= 96 {
        vcc = true;
        if s0 == s1 {
            d = ldexp32(s0, 64);
        }
    } else if is_denorm32(s1) {
        d = ldexp32(s0, 64);
    } else if is_denorm32(q) {
        // (1.0 / f64(S1) is never an f64 denormal for an f32 S1, so the two
        // pseudocode branches that test it are unreachable and omitted.)
        vcc = true;
        if s0 == s2 {
            d = ldexp32(s0, 64);
        }
    } else if biased_exp32(s2) <= 23 {
        d = ldexp32(s0, 64);
    }
    (d, vcc)
}

/// v_div_fixup_f32 per the ISA pseudocode (UNDERFLOW_F32 taken as 0 and
/// OVERFLOW_F32 as infinity, with the sign of the quotient).
// One branch per case of the ISA pseudocode, in its order, even where two cases give the same result.
#[allow(clippy::if_same_then_else)]
pub fn div_fixup32(s0: f32, s1: f32, s2: f32) -> f32 {
    let neg = s1.is_sign_negative() ^ s2.is_sign_negative();
    let signed = |x: f32| if neg { -x } else { x };
    if s2.is_nan() {
        f32::from_bits(s2.to_bits() | 0x0040_0000)
    } else if s1.is_nan() {
        f32::from_bits(s1.to_bits() | 0x0040_0000)
    } else if s1 == 0.0 && s2 == 0.0 {
        f32::from_bits(0xffc0_0000)
    } else if s1.is_infinite() && s2.is_infinite() {
        f32::from_bits(0xffc0_0000)
    } else if s1 == 0.0 || s2.is_infinite() {
        signed(f32::INFINITY)
    } else if s1.is_infinite() || s2 == 0.0 {
        signed(0.0)
    } else if biased_exp32(s2) - biased_exp32(s1) < -150 {
        signed(0.0)
    } else if biased_exp32(s1) == 255 {
        signed(f32::INFINITY)
    } else {
        signed(s0.abs())
    }
}

/// v_cmp_class_f32: the class bit of `x` in `mask`.
pub(super) fn class32(x: f32, mask: u32) -> bool {
    let b = x.to_bits();
    let bit = if is_snan32(b) {
        0
    } else if is_nan32(b) {
        1
    } else if x.is_infinite() {
        if x < 0.0 { 2 } else { 9 }
    } else if biased_exp32(x) > 0 {
        if x < 0.0 { 3 } else { 8 }
    } else if b & 0x7fff_ffff != 0 {
        if x.is_sign_negative() { 4 } else { 7 }
    } else if x.is_sign_negative() {
        5
    } else {
        6
    };
    mask >> bit & 1 != 0
}

pub(super) fn class16(x: f16, mask: u32) -> bool {
    let b = x.to_bits();
    let neg = b & 0x8000 != 0;
    let bit = if is_snan16(b) {
        0
    } else if is_nan16(b) {
        1
    } else if b & 0x7fff == 0x7c00 {
        if neg { 2 } else { 9 }
    } else if b & 0x7c00 != 0 {
        if neg { 3 } else { 8 }
    } else if b & 0x03ff != 0 {
        if neg { 4 } else { 7 }
    } else if neg {
        5
    } else {
        6
    };
    mask >> bit & 1 != 0
}

/// Moves a finite non-zero result one ulp up or down (perturbation mode).
pub(super) fn perturb32(r: f32, input: u32, seed: u32) -> f32 {
    if !r.is_finite() || r == 0.0 {
        return r;
    }
    let mut h = input ^ seed.wrapping_mul(0x9e37_79b9);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    let b = r.to_bits();
    let away = h & 1 != 0;
    let nb = if away { b + 1 } else { b - 1 };
    let n = f32::from_bits(nb);
    // Never cross into infinity or through zero.
    if n.is_finite() && (n.to_bits() & 0x7fff_ffff) != 0 { n } else { r }
}

/// The approximate (transcendental) f32 instructions, correctly rounded:
/// evaluated in f64 (or exactly in f32 for rcp and sqrt) and rounded once to f32.
pub(super) fn trans32(name: &str, x: f32) -> Option<f32> {
    let r = match name {
        "v_rcp_f32" | "v_rcp_iflag_f32" => 1.0 / x,
        "v_sqrt_f32" => x.sqrt(),
        "v_rsq_f32" => (1.0 / (x as f64).sqrt()) as f32,
        "v_exp_f32" => (x as f64).exp2() as f32,
        "v_log_f32" => {
            if x == 0.0 {
                f32::NEG_INFINITY
            } else {
                (x as f64).log2() as f32
            }
        }
        _ => return None,
    };
    Some(nan32(r, &[x]))
}

pub(super) fn is_trans(name: &str) -> bool {
    matches!(name, "v_rcp_f32" | "v_rcp_iflag_f32" | "v_sqrt_f32" | "v_rsq_f32" | "v_exp_f32" | "v_log_f32")
}

pub(super) fn clamp01(x: f32) -> f32 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}
