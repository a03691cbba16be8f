//! `expm1` exactly as docs/contracts.md, section 2 ("expm1"), specifies it (the AMD device
//! library's `expm1f` algorithm), written independently of the device crate.
//!
//! All arithmetic is f32; `fma` is `f32::mul_add`; constants are built from their exact bit
//! patterns (a test re-derives each one from its hexadecimal-float spelling); `2^e` is an exact
//! power of two built from bits, including subnormal, zero and infinite results.

/// `0x1.715476p+0` (log2(e) rounded to f32).
pub const LOG2E: f32 = f32::from_bits(0x3FB8_AA3B);
/// `0x1.62e430p-1` (high part of ln 2).
pub const LN2_HI: f32 = f32::from_bits(0x3F31_7218);
/// `-0x1.05c610p-29` (the low part of ln 2, as it appears in the algorithm, with its sign).
pub const NEG_LN2_LO: f32 = f32::from_bits(0xB102_E308);
/// `0x1.a26762p-13` (polynomial coefficient, innermost).
pub const C5: f32 = f32::from_bits(0x3951_33B1);
/// `0x1.6d2e00p-10`.
pub const C4: f32 = f32::from_bits(0x3AB6_9700);
/// `0x1.110ff2p-7`.
pub const C3: f32 = f32::from_bits(0x3C08_87F9);
/// `0x1.555502p-5`.
pub const C2: f32 = f32::from_bits(0x3D2A_AA81);
/// `0x1.555556p-3`.
pub const C1: f32 = f32::from_bits(0x3E2A_AAAB);
/// `0x1.000000p-1` (one half).
pub const C0: f32 = f32::from_bits(0x3F00_0000);
/// `0x1.62e42ep+6`: above this, the result is +inf.
pub const OVERFLOW_X: f32 = f32::from_bits(0x42B1_7217);

/// Exact `2^e` as an f32, like `ldexp(1.0, e)`: normal for e in [-126, 127], subnormal for
/// e in [-149, -127], +0.0 below (2^-150 rounds to even, i.e. 0), +inf above 127.
pub fn exp2i(e: i32) -> f32 {
    if e > 127 {
        f32::INFINITY
    } else if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else if e >= -149 {
        f32::from_bits(1u32 << (e + 149))
    } else {
        0.0
    }
}

/// `expm1(x)` following the contract's steps literally (quirks included: `-0.0` gives `+0.0`).
pub fn expm1(x: f32) -> f32 {
    // n = round_ties_even(x * 0x1.715476p+0): a plain multiply, then rint.
    let n = (x * LOG2E).round_ties_even();
    // t = fma(-n, -0x1.05c610p-29, fma(-n, 0x1.62e430p-1, x))
    let t = (-n).mul_add(NEG_LN2_LO, (-n).mul_add(LN2_HI, x));
    // p = fma(t, fma(t, fma(t, fma(t, fma(t, C5, C4), C3), C2), C1), C0)
    let mut p = t.mul_add(C5, C4);
    p = t.mul_add(p, C3);
    p = t.mul_add(p, C2);
    p = t.mul_add(p, C1);
    p = t.mul_add(p, C0);
    // p = fma(t, t * p, t), with t * p a plain multiply
    p = t.mul_add(t * p, t);
    // e = 127 if n == 128, else n as i32 (Rust's `as` saturates and maps NaN to 0)
    let e = if n == 128.0 { 127 } else { n as i32 };
    // s = 2^e exactly
    let s = exp2i(e);
    // z = fma(s, p, s - 1.0)
    let mut z = s.mul_add(p, s - 1.0);
    if n == 128.0 {
        z = 2.0 * z;
    }
    if x > OVERFLOW_X {
        z = f32::INFINITY;
    }
    if x < -17.0 {
        z = -1.0;
    }
    z
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Value of a hexadecimal float `0x1.MMMMMMp+exp` given its 24-bit mantissa digits `0x1MMMMMM`
    /// (the leading 1 and six hex digits), computed in f64 (exact).
    fn hexf(mantissa: u32, exp: i32) -> f64 {
        mantissa as f64 * 2f64.powi(exp - 24)
    }

    #[test]
    fn constants_match_hex_spelling() {
        let cases: [(f32, u32, i32); 10] = [
            (LOG2E, 0x1715476, 0),
            (LN2_HI, 0x162e430, -1),
            (-NEG_LN2_LO, 0x105c610, -29),
            (C5, 0x1a26762, -13),
            (C4, 0x16d2e00, -10),
            (C3, 0x1110ff2, -7),
            (C2, 0x1555502, -5),
            (C1, 0x1555556, -3),
            (C0, 0x1000000, -1),
            (OVERFLOW_X, 0x162e42e, 6),
        ];
        for (c, m, e) in cases {
            assert_eq!(c as f64, hexf(m, e), "{m:#x}p{e}");
        }
    }

    #[test]
    fn exp2i_exact() {
        for e in -160..=140 {
            let want = 2f64.powi(e) as f32; // exact or correctly rounded (0 / inf at the ends)
            assert_eq!(exp2i(e).to_bits(), want.to_bits(), "2^{e}");
        }
        assert_eq!(exp2i(i32::MIN), 0.0);
        assert_eq!(exp2i(i32::MAX), f32::INFINITY);
    }

    #[test]
    fn special_values() {
        assert!(expm1(f32::NAN).is_nan());
        assert_eq!(expm1(f32::NEG_INFINITY), -1.0);
        assert_eq!(expm1(f32::INFINITY), f32::INFINITY);
        assert_eq!(expm1(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(expm1(-0.0).to_bits(), 0.0f32.to_bits()); // the documented quirk
        assert_eq!(expm1(-17.000002), -1.0);
        assert_eq!(expm1(-100.0), -1.0);
        assert_eq!(expm1(f32::from_bits(OVERFLOW_X.to_bits() + 1)), f32::INFINITY);
        assert!(expm1(OVERFLOW_X).is_finite()); // the n == 128 path
        let near = expm1(OVERFLOW_X) as f64;
        let want = (OVERFLOW_X as f64).exp_m1();
        assert!((near - want).abs() / want < 1e-6, "{near} {want}");
        // Subnormal and tiny inputs come back unchanged.
        for x in [1e-40f32, -1e-40, 1e-30, -1e-30, f32::from_bits(1)] {
            assert_eq!(expm1(x), x);
        }
    }

    /// ulp of the f32 result nearest `y`: 2^(exponent(y) - 23), at least 2^-149.
    fn f32_ulp(y: f64) -> f64 {
        let a = y.abs();
        if a < 2f64.powi(-126) {
            return 2f64.powi(-149);
        }
        let exp = ((a.to_bits() >> 52) & 0x7FF) as i32 - 1023;
        2f64.powi(exp - 23)
    }

    /// Max error in f32 ulps over every `stride`-th f32 bit pattern in [lo_bits, hi_bits].
    fn max_ulp_error(lo_bits: u32, hi_bits: u32, stride: u32) -> (f64, f32) {
        let mut worst = (0.0f64, 0.0f32);
        let mut b = lo_bits;
        while b <= hi_bits {
            let x = f32::from_bits(b);
            let got = expm1(x) as f64;
            let want = (x as f64).exp_m1();
            let err = (got - want).abs() / f32_ulp(want);
            if err > worst.0 {
                worst = (err, x);
            }
            b = match b.checked_add(stride) {
                Some(n) => n,
                None => break,
            };
        }
        worst
    }

    /// Sweep of [-17, 0): every 31st f32 (plus an exhaustive pass near the interesting ends).
    /// Spec bound: <= 1 ulp (the algorithm reaches about 0.89).
    #[test]
    fn accuracy_negative() {
        let neg17 = (-17.0f32).to_bits(); // 0xC188_0000; negative bit patterns grow with |x|
        let (e1, x1) = max_ulp_error(0x8000_0001, neg17, 31);
        let (e2, x2) = max_ulp_error(0xBF00_0000, 0xBF80_0000, 1); // [-1, -0.5] exhaustive
        let (e3, x3) = max_ulp_error(neg17 - 200_000, neg17, 1); // just above -17
        for (e, x) in [(e1, x1), (e2, x2), (e3, x3)] {
            assert!(e <= 1.0, "expm1({x:e}) off by {e} ulp");
        }
        println!("expm1 max error on [-17, 0): {:.3} ulp", e1.max(e2).max(e3));
    }

    /// Sweep of (0, 17]: every 31st f32. Spec bound: <= 1.5 ulp (about 1.45 near 17).
    #[test]
    fn accuracy_positive() {
        let pos17 = 17.0f32.to_bits();
        let (e1, x1) = max_ulp_error(1, pos17, 31);
        let (e2, x2) = max_ulp_error(pos17 - 300_000, pos17, 1);
        for (e, x) in [(e1, x1), (e2, x2)] {
            assert!(e <= 1.5, "expm1({x:e}) off by {e} ulp");
        }
        println!("expm1 max error on (0, 17]: {:.3} ulp", e1.max(e2));
    }

    /// The exhaustive version of the contract: every f32 in [-17, 0) within 1 ulp and every f32 in
    /// (0, 17] within 1.5 ulp. About a minute; run with `--ignored`.
    #[test]
    #[ignore = "exhaustive, about a minute of CPU time; run with -- --ignored"]
    fn accuracy_exhaustive() {
        let threads: Vec<_> = (0..8u32)
            .map(|part| {
                std::thread::spawn(move || {
                    let neg17 = (-17.0f32).to_bits();
                    let pos17 = 17.0f32.to_bits();
                    let span_n = (neg17 - 0x8000_0000) / 8 + 1;
                    let span_p = pos17 / 8 + 1;
                    let lo_n = 0x8000_0001 + part * span_n;
                    let hi_n = (lo_n + span_n - 1).min(neg17);
                    let lo_p = 1 + part * span_p;
                    let hi_p = (lo_p + span_p - 1).min(pos17);
                    (max_ulp_error(lo_n, hi_n, 1), max_ulp_error(lo_p, hi_p, 1))
                })
            })
            .collect();
        for t in threads {
            let ((en, xn), (ep, xp)) = t.join().unwrap();
            assert!(en <= 1.0, "expm1({xn:e}) off by {en} ulp");
            assert!(ep <= 1.5, "expm1({xp:e}) off by {ep} ulp");
        }
    }
}
