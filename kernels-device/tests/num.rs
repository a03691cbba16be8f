//! Host tests of `kernels_device::num`: conversions against the `half` crate,
//! `expm1` and `exp` against f64 references.
//!
//! Run with `cargo test -p kernels-device --release --test num -- --nocapture`
//! to see the measured errors.

use kernels_device::num::{self, Bf16, Elem, consts, f16, ldexp1, round_to};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Parse a hexadecimal float such as `-0x1.05c610p-29` exactly into an f64
/// (at most 13 hex digits of mantissa, so the integer is exact).
fn parse_hex_float(s: &str) -> f64 {
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let s = s.strip_prefix("0x").expect("0x prefix");
    let (mant, exp) = s.split_once('p').expect("p exponent");
    let exp: i32 = exp.parse().expect("exponent");
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let digits = format!("{int}{frac}");
    assert!(digits.len() <= 13);
    let m = u64::from_str_radix(&digits, 16).expect("hex digits");
    let v = m as f64 * 2f64.powi(exp - 4 * frac.len() as i32);
    if neg { -v } else { v }
}

/// The spacing of f32 values at the real value `t`: `2^(floor(log2|t|) - 23)`
/// for normal magnitudes, the smallest subnormal `2^-149` below `2^-126`, and
/// `2^104` from the top binade up.
fn f32_ulp_at(t: f64) -> f64 {
    // Biased f64 exponent of |t|, clamped to the f32 range [-126, 127], minus 23.
    let e = (((t.to_bits() >> 52) & 0x7FF) as i64 - 1023).clamp(-126, 127) - 23;
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// Error of `got` against the true value `t`, in f32 ulps at `t`. An infinite
/// `got` for a finite `t` counts as 0 ulp when `t` rounds to infinity, as 1 ulp
/// when `t` exceeds `f32::MAX` (so the correct answer is `MAX` or `inf`), and
/// as infinitely wrong otherwise. NaN-ness must agree.
fn ulp_err(got: f32, t: f64) -> f64 {
    if t.is_nan() || got.is_nan() {
        return if t.is_nan() && got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    if got.is_infinite() {
        if t.is_infinite() {
            return if (got > 0.0) == (t > 0.0) { 0.0 } else { f64::INFINITY };
        }
        let max = f32::MAX as f64;
        let half = 2f64.powi(103);
        let a = t.abs();
        if (got > 0.0) != (t > 0.0) {
            return f64::INFINITY;
        }
        return if a >= max + half {
            0.0
        } else if a > max {
            1.0
        } else {
            f64::INFINITY
        };
    }
    if t.is_infinite() {
        return f64::INFINITY;
    }
    (got as f64 - t).abs() / f32_ulp_at(t)
}

#[derive(Clone, Copy, Debug)]
struct Worst {
    err: f64,
    x: f32,
    count: u64,
}

impl Worst {
    const NONE: Worst = Worst { err: -1.0, x: f32::NAN, count: 0 };
    fn merge(self, o: Worst) -> Worst {
        let mut w = if o.err > self.err { Worst { count: 0, ..o } } else { self };
        w.count = self.count + o.count;
        w
    }
}

/// Evaluate `err(x)` for the f32 bit patterns `lo, lo + stride, ...` up to `hi`
/// (inclusive), in parallel, and return the largest error and its argument.
fn sweep(lo: u32, hi: u32, stride: u32, err: impl Fn(f32) -> f64 + Sync) -> Worst {
    assert!(lo <= hi && stride >= 1);
    let steps = (hi - lo) as u64 / stride as u64 + 1;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let chunks = (threads * 8).min(steps);
    let next = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut w = Worst::NONE;
                    loop {
                        let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if c >= chunks {
                            break;
                        }
                        let a = steps * c / chunks;
                        let b = steps * (c + 1) / chunks;
                        for k in a..b {
                            let bits = lo + (k * stride as u64) as u32;
                            let x = f32::from_bits(bits);
                            let e = err(x);
                            w.count += 1;
                            // A NaN error must count as the worst, which `e > w.err` would miss.
                            #[allow(clippy::neg_cmp_op_on_partial_ord)]
                            if !(e <= w.err) {
                                w.err = e;
                                w.x = x;
                            }
                        }
                    }
                    w
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).fold(Worst::NONE, Worst::merge)
    })
}

fn same_bits_or_both_nan(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

// ---------------------------------------------------------------------------
// Constants and ldexp1
// ---------------------------------------------------------------------------

#[test]
fn constants_are_the_spec_hex_floats() {
    let table: [(f32, &str, &str); 18] = [
        (consts::LOG2E, "0x1.715476p+0", "1.44269502162933349609375"),
        (consts::LN2_HI, "0x1.62e430p-1", "0.693147182464599609375"),
        (consts::LN2_LO, "-0x1.05c610p-29", "-1.9046542121259335544891655445098876953125e-9"),
        (consts::EXPM1_P5, "0x1.a26762p-13", "0.000199510497623123228549957275390625"),
        (consts::EXPM1_P4, "0x1.6d2e00p-10", "0.0013930499553680419921875"),
        (consts::EXPM1_P3, "0x1.110ff2p-7", "0.008333199657499790191650390625"),
        (consts::EXPM1_P2, "0x1.555502p-5", "0.0416665114462375640869140625"),
        (consts::EXPM1_P1, "0x1.555556p-3", "0.16666667163372039794921875"),
        (consts::EXPM1_P0, "0x1.000000p-1", "0.5"),
        (consts::EXP_OVERFLOW_X, "0x1.62e42ep+6", "88.72283172607421875"),
        (consts::EXP_C2, "0x1.000000p-1", "0.5"),
        (consts::EXP_C3, "0x1.555556p-3", "0.16666667163372039794921875"),
        (consts::EXP_C4, "0x1.555556p-5", "0.0416666679084300994873046875"),
        (consts::EXP_C5, "0x1.111112p-7", "0.008333333767950534820556640625"),
        (consts::EXP_C6, "0x1.6c16c2p-10", "0.001388888922519981861114501953125"),
        (consts::EXP_C7, "0x1.a01a02p-13", "0.0001984127011382952332496643066406250"),
        (consts::EXP_UNDERFLOW_X, "-0x1.ap+6", "-104"),
        (f32::from_bits(0x3F80_0000), "0x1.000000p+0", "1"),
    ];
    for (c, hex, dec) in table {
        let h = parse_hex_float(hex);
        let d: f64 = dec.parse().unwrap();
        assert_eq!(h, d, "{hex} != {dec}");
        assert_eq!(c as f64, h, "constant {c:e} (bits {:#010x}) != {hex}", c.to_bits());
        // Every constant is exactly an f32.
        assert_eq!(h as f32 as f64, h);
    }
    // The Taylor coefficients are 1/k! rounded to nearest.
    let mut f = 1.0f64;
    for (k, c) in [consts::EXP_C2, consts::EXP_C3, consts::EXP_C4, consts::EXP_C5, consts::EXP_C6, consts::EXP_C7]
        .into_iter()
        .enumerate()
    {
        f *= (k + 2) as f64;
        assert_eq!(c, (1.0 / f) as f32, "1/{}!", k + 2);
    }
}

#[test]
fn ldexp1_is_exact_everywhere() {
    for e in -400..=400 {
        let want = 2f64.powi(e) as f32; // exact, or 0 / inf (2^-150 ties to 0)
        assert_eq!(ldexp1(e).to_bits(), want.to_bits(), "2^{e}");
    }
    for e in [i32::MIN, i32::MIN + 1, -1000, 1000, i32::MAX - 1, i32::MAX] {
        let want = if e < 0 { 0.0f32 } else { f32::INFINITY };
        assert_eq!(ldexp1(e).to_bits(), want.to_bits(), "2^{e}");
    }
}

// ---------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------

#[test]
fn elem_metadata() {
    assert_eq!((<f32 as Elem>::NAME, <f32 as Elem>::BYTES), ("f32", 4));
    assert_eq!((<f16 as Elem>::NAME, <f16 as Elem>::BYTES), ("f16", 2));
    assert_eq!((<Bf16 as Elem>::NAME, <Bf16 as Elem>::BYTES), ("bf16", 2));
    assert_eq!(core::mem::size_of::<Bf16>(), 2);
    assert_eq!(core::mem::size_of::<f16>(), 2);
    for bits in [0u32, 1, 0x3F80_0000, 0x7FC0_0000, 0xFFFF_FFFF] {
        assert_eq!(<f32 as Elem>::from_bits_u32(bits).to_bits_u32(), bits);
        assert_eq!(<f16 as Elem>::from_bits_u32(bits).to_bits_u32(), bits & 0xFFFF);
        assert_eq!(<Bf16 as Elem>::from_bits_u32(bits).to_bits_u32(), bits & 0xFFFF);
    }
    // R(e) is the identity for f32, bit for bit.
    for bits in (0..=u32::MAX).step_by(65_537) {
        let v = f32::from_bits(bits);
        assert_eq!(round_to::<f32>(v).to_bits(), bits);
    }
    assert_eq!(round_to::<Bf16>(1.0 + 1.0 / 256.0), 1.0); // tie to even (down)
    assert_eq!(round_to::<Bf16>(1.0 + 3.0 / 256.0), 1.0 + 4.0 / 256.0); // tie to even (up)
    assert_eq!(round_to::<f16>(1.0 + 1.0 / 2048.0), 1.0);
    assert_eq!(round_to::<f16>(65520.0), f32::INFINITY);
    assert_eq!(round_to::<f16>(65519.99), 65504.0);
}

#[test]
fn widening_all_f16_and_bf16_patterns() {
    for b in 0..=u16::MAX {
        // f16
        let ours = <f16 as Elem>::from_bits_u32(b as u32).to_f32();
        let theirs = half::f16::from_bits(b).to_f32();
        assert!(same_bits_or_both_nan(ours, theirs), "f16 {b:#06x}: {ours:e} vs {theirs:e}");
        let exact = half::f16::from_bits(b).to_f64();
        assert!(ours as f64 == exact || (ours.is_nan() && exact.is_nan()), "f16 {b:#06x} not exact");
        if !ours.is_nan() {
            // Narrowing an exactly representable value gives it back.
            assert_eq!(<f16 as Elem>::from_f32(ours).to_bits_u32(), b as u32);
        }
        // bf16
        let ours = Bf16(b).to_f32();
        let theirs = half::bf16::from_bits(b).to_f32();
        assert!(same_bits_or_both_nan(ours, theirs), "bf16 {b:#06x}: {ours:e} vs {theirs:e}");
        assert_eq!(ours.to_bits(), (b as u32) << 16);
        assert_eq!(<Bf16 as Elem>::to_f32(Bf16(b)).to_bits(), ours.to_bits());
        if !ours.is_nan() {
            assert_eq!(Bf16::from_f32(ours), Bf16(b));
        }
    }
}

/// The host's f16 treats NaNs as rustc's primitive does there (LLVM's
/// `__extendhfsf2` and `__truncsfhf2`): widening keeps the payload and the
/// quiet bit; narrowing sets the quiet bit and keeps the payload's top 9 bits.
/// (`half` quiets on widening, so the comparisons above leave NaN bits out.)
#[test]
fn f16_nan_bits_are_the_primitives() {
    for b in (0x7C01u16..=0x7FFF).chain(0xFC01..=0xFFFF) {
        let sign = ((b & 0x8000) as u32) << 16;
        let want = sign | 0x7F80_0000 | (((b & 0x03FF) as u32) << 13);
        assert_eq!(f16::from_bits(b).to_f32().to_bits(), want, "{b:#06x}");
        assert!(f16::from_bits(b).is_nan() && !(f16::from_bits(b) == f16::from_bits(b)));
    }
    for bits in (0x7F80_0001u32..=0x7FFF_FFFF).step_by(4093).chain([0x7F80_0001, 0x7FBF_FFFF, 0x7FC0_0000, 0x7FFF_FFFF])
    {
        for sign in [0, 0x8000_0000u32] {
            let want = ((sign >> 16) | 0x7E00 | ((bits & 0x003F_FFFF) >> 13)) as u16;
            assert_eq!(f16::from_f32(f32::from_bits(sign | bits)).to_bits(), want, "{:#010x}", sign | bits);
        }
    }
}

/// The host's f16 product is the f32 product rounded once, signed zeros and
/// infinities included (`half` rounds it the same way).
#[test]
fn f16_products() {
    let mut state = 0x9E37_79B9u32;
    for _ in 0..200_000 {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let (a, b) = (state as u16, (state >> 16) as u16);
        let ours = f16::from_bits(a) * f16::from_bits(b);
        let theirs = half::f16::from_bits(a) * half::f16::from_bits(b);
        assert!(
            ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
            "{a:#06x} * {b:#06x}: {:#06x} vs {:#06x}",
            ours.to_bits(),
            theirs.to_bits()
        );
    }
    assert_eq!((f16::from_bits(0x8000) * f16::from_bits(0x3C00)).to_bits(), 0x8000);
    assert_eq!((f16::MAX * f16::MAX).to_bits(), f16::INFINITY.to_bits());
}

/// Special f32 inputs for narrowing: zeros, infinities, NaNs, subnormals, the
/// extremes, and for every pair of neighbouring f16 / bf16 values their exact
/// midpoint (a tie, which must go to the even one) and the f32 values just
/// either side of it.
fn narrowing_specials() -> Vec<f32> {
    let mut v: Vec<u32> = vec![
        0x0000_0000,
        0x8000_0000,
        0x7F80_0000,
        0xFF80_0000, // ±0, ±inf
        0x7FC0_0000,
        0xFFC0_0000,
        0x7F80_0001,
        0xFF80_0001,
        0x7FBF_FFFF,
        0x7FFF_FFFF,
        0xFFFF_FFFF,
        0x7F80_8000,
        0x7F81_0000,
        0x7F80_7FFF,
        0x7FC0_8000, // NaNs whose top 16 bits look like inf
        0x0000_0001,
        0x8000_0001,
        0x007F_FFFF,
        0x807F_FFFF,
        0x0040_0000,
        0x0000_8000,
        0x0000_7FFF,
        0x0080_0000,
        0x8080_0000,
        0x7F7F_FFFF,
        0xFF7F_FFFF,
        0x7F7F_8000,
        0x7F7F_7FFF,
        0xFF7F_8000,
        0x3F80_0000,
        0xBF80_0000,
    ];
    let f = |x: f32| x.to_bits();
    for x in [65504.0f32, 65519.0, 65519.996, 65520.0, 65536.0, 1e5, -65520.0, -65504.0] {
        v.push(f(x));
    }
    // f16 neighbours (all finite non-negative patterns; the last pair is MAX, inf).
    for b in 0u16..0x7C00 {
        let lo = half::f16::from_bits(b).to_f64();
        let hi = if b == 0x7BFF { 65536.0 } else { half::f16::from_bits(b + 1).to_f64() };
        let mid = (lo + hi) / 2.0;
        let m = mid as f32;
        assert_eq!(m as f64, mid, "f16 midpoint must be an f32");
        v.extend([f(m), f(m).wrapping_sub(1), f(m) + 1]);
    }
    // bf16 neighbours: the midpoint of b and b + 1 is the f32 with bits (b << 16) + 0x8000.
    for b in 0u32..0x7F80 {
        let m = (b << 16) + 0x8000;
        v.extend([m, m - 1, m + 1]);
    }
    let neg: Vec<u32> = v.iter().map(|b| b ^ 0x8000_0000).collect();
    v.extend(neg);
    v.into_iter().map(f32::from_bits).collect()
}

fn check_narrowing(x: f32) {
    let ours = <f16 as Elem>::from_f32(x);
    let theirs = half::f16::from_f32(x);
    if x.is_nan() {
        assert!(ours.is_nan() && theirs.is_nan(), "f16 NaN {:#010x}", x.to_bits());
    } else {
        assert_eq!(ours.to_bits(), theirs.to_bits(), "f16 from {x:e} ({:#010x})", x.to_bits());
    }
    let ours = Bf16::from_f32(x);
    let theirs = half::bf16::from_f32(x);
    if x.is_nan() {
        assert!(ours.to_f32().is_nan() && theirs.is_nan(), "bf16 NaN {:#010x}", x.to_bits());
    } else {
        assert_eq!(ours.0, theirs.to_bits(), "bf16 from {x:e} ({:#010x})", x.to_bits());
        // The contract's formula, literally.
        let bits = x.to_bits();
        assert_eq!(ours.0 as u32, (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    }
    assert_eq!(<Bf16 as Elem>::from_f32(x), ours);
}

#[test]
fn narrowing_matches_half_on_specials() {
    let specials = narrowing_specials();
    assert!(specials.len() > 200_000);
    for x in specials {
        check_narrowing(x);
    }
}

#[test]
fn narrowing_matches_half_on_a_dense_sweep() {
    // Every 4099th bit pattern over all 2^32 (about 1.05 million values).
    let mut n = 0u64;
    let mut bits = 0u64;
    while bits <= u32::MAX as u64 {
        check_narrowing(f32::from_bits(bits as u32));
        bits += 4099;
        n += 1;
    }
    // ... and every pattern in the range where f16 goes subnormal or overflows,
    // at a finer stride.
    for bits in (0x3300_0000u32..=0x4780_0000).step_by(61) {
        check_narrowing(f32::from_bits(bits));
        check_narrowing(f32::from_bits(bits | 0x8000_0000));
        n += 2;
    }
    assert!(n > 1_000_000);
}

// ---------------------------------------------------------------------------
// expm1
// ---------------------------------------------------------------------------

fn expm1_err(x: f32) -> f64 {
    ulp_err(num::expm1(x), (x as f64).exp_m1())
}

/// The larger of two error measures: in ulps at the true value ([`ulp_err`]) and
/// in ulps of the f32 result (they differ only where the two sit in different
/// binades).
fn expm1_err_both(x: f32) -> f64 {
    let got = num::expm1(x);
    let t = (x as f64).exp_m1();
    let e = ulp_err(got, t);
    if !got.is_finite() {
        return e;
    }
    e.max((got as f64 - t).abs() / f32_ulp_at(got as f64))
}

/// The xIELU range [-17, 0), at the 1-ulp bound: every f32 in [-17, -2^-20]
/// (about 201 million values) and every 16th one in (-2^-20, 0) (about 56
/// million more). Below 2^-20 in magnitude n = 0 and the steps reduce to
/// `fma(x, x * P(x), x)`, within a hair of correctly rounded. The fully
/// exhaustive sweep of all 1.1e9 values is `expm1_exhaustive_on_minus_17_to_0`
/// (ignored by default: about 30 s of CPU time with the software-dispatched
/// `fmaf` of a baseline x86-64 build; run it with `-- --ignored`).
#[test]
fn expm1_on_minus_17_to_0() {
    let hi = (-17.0f32).to_bits();
    assert_eq!(hi, 0xC188_0000);
    let mid = (-(2f32.powi(-20))).to_bits();
    let t = std::time::Instant::now();
    let big = sweep(mid, hi, 1, expm1_err_both);
    let tiny = sweep(0x8000_0001, mid - 1, 16, expm1_err_both);
    eprintln!(
        "expm1 [-17, -2^-20] (every f32): {} values, max {:.4} ulp at x = {:e} ({:#010x}); \
         (-2^-20, 0) every 16th: {} values, max {:.4} ulp at x = {:e} [{:.1?}]",
        big.count,
        big.err,
        big.x,
        big.x.to_bits(),
        tiny.count,
        tiny.err,
        tiny.x,
        t.elapsed()
    );
    assert_eq!(big.count, (hi - mid) as u64 + 1);
    assert!(big.err <= 1.0, "expm1 on [-17, -2^-20]: {:.4} ulp at {:e}", big.err, big.x);
    assert!(tiny.err <= 1.0, "expm1 on (-2^-20, 0): {:.4} ulp at {:e}", tiny.err, tiny.x);
}

/// Every f32 in [-17, 0): bit patterns 0x80000001 (-min subnormal) ..= 0xC1880000
/// (-17), 1.1e9 values. Measured: max 0.8905 ulp at x = -0.35161826 (0xbeb4074f).
#[test]
#[ignore = "exhaustive, about 30 s of CPU time; run with -- --ignored"]
fn expm1_exhaustive_on_minus_17_to_0() {
    let lo = 0x8000_0001u32;
    let hi = (-17.0f32).to_bits();
    let t = std::time::Instant::now();
    let w = sweep(lo, hi, 1, expm1_err_both);
    eprintln!(
        "expm1 [-17, 0) exhaustive: {} values, max {:.4} ulp at x = {:e} ({:#010x}) [{:.1?}]",
        w.count,
        w.err,
        w.x,
        w.x.to_bits(),
        t.elapsed()
    );
    assert_eq!(w.count, (hi - lo) as u64 + 1);
    assert!(w.err <= 1.0, "expm1 on [-17, 0): {:.4} ulp at {:e}", w.err, w.x);
}

#[test]
fn expm1_dense_on_0_to_88_7() {
    // (0, 0x1.62e42ep+6], every 11th f32: about 100 million values.
    let hi = consts::EXP_OVERFLOW_X.to_bits();
    let t = std::time::Instant::now();
    let w = sweep(1, hi, 11, expm1_err_both);
    // ... and every f32 in [8, 32], around the worst case near 17.
    let w2 = sweep(8.0f32.to_bits(), 32.0f32.to_bits(), 1, expm1_err_both);
    eprintln!(
        "expm1 (0, 88.72]: {} values, max {:.4} ulp at x = {:e}; every f32 in [8, 32]: max {:.4} ulp at x = {:e} [{:.1?}]",
        w.count,
        w.err,
        w.x,
        w2.err,
        w2.x,
        t.elapsed()
    );
    assert!(w.err <= 1.5, "expm1 on (0, 88.7]: {:.4} ulp at {:e}", w.err, w.x);
    assert!(w2.err <= 1.5, "expm1 on [8, 32]: {:.4} ulp at {:e}", w2.err, w2.x);
    assert!(num::expm1(consts::EXP_OVERFLOW_X).is_finite());
}

#[test]
fn expm1_special_values() {
    let e = num::expm1;
    assert!(e(f32::NAN).is_nan());
    assert!(e(-f32::NAN).is_nan());
    assert!(e(f32::from_bits(0x7F80_0001)).is_nan());
    assert_eq!(e(f32::NEG_INFINITY), -1.0);
    assert_eq!(e(f32::INFINITY), f32::INFINITY);
    assert_eq!(e(0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(e(-0.0).to_bits(), 0.0f32.to_bits(), "the contract's quirk: -0.0 -> +0.0");
    assert_eq!(e(f32::from_bits(1)), f32::from_bits(1));
    assert_eq!(e(-f32::from_bits(1)), -f32::from_bits(1));
    assert_eq!(e(-1e-30), -1e-30);
    for x in [-17.000002f32, -17.5, -18.0, -100.0, -1e30, f32::MIN] {
        assert_eq!(e(x), -1.0, "expm1({x:e})");
    }
    for x in [f32::from_bits(consts::EXP_OVERFLOW_X.to_bits() + 1), 89.0, 100.0, 1e30, f32::MAX] {
        assert_eq!(e(x), f32::INFINITY, "expm1({x:e})");
    }
    assert!(e(consts::EXP_OVERFLOW_X).is_finite());
    // The n == 128 branch (x * log2e rounds to 128): finite and accurate.
    let x = 88.5f32;
    assert_eq!((x * consts::LOG2E).round_ties_even(), 128.0);
    assert!(expm1_err(x) <= 1.5);
}

// ---------------------------------------------------------------------------
// exp
// ---------------------------------------------------------------------------

fn exp_err(x: f32) -> f64 {
    ulp_err(num::exp(x), (x as f64).exp())
}

#[test]
fn exp_dense_over_the_whole_range() {
    let t = std::time::Instant::now();
    // Every 47th bit pattern of the non-negative and of the negative numbers,
    // infinities included, NaNs excluded: about 91 million values.
    let pos = sweep(0, 0x7F80_0000, 47, exp_err);
    let neg = sweep(0x8000_0000, 0xFF80_0000, 47, exp_err);
    // Every f32 whose exp is subnormal or near the bottom ([-104, -87.3]), near
    // the overflow threshold ([88, 89]), and in [-1, 1] with a stride of 32.
    let sub = sweep(87.3f32.to_bits() | 0x8000_0000, 104.0f32.to_bits() | 0x8000_0000, 1, exp_err);
    let top = sweep(88.0f32.to_bits(), 89.0f32.to_bits(), 1, exp_err);
    let mid_p = sweep(0, 1.0f32.to_bits(), 32, exp_err);
    let mid_n = sweep(0x8000_0000, (-1.0f32).to_bits(), 32, exp_err);
    let all = [pos, neg, sub, top, mid_p, mid_n];
    for (name, w) in ["x >= 0", "x <= 0", "[-104, -87.3]", "[88, 89]", "[0, 1]", "[-1, 0]"].iter().zip(all) {
        eprintln!("exp {name}: {} values, max {:.4} ulp at x = {:e} ({:#010x})", w.count, w.err, w.x, w.x.to_bits());
    }
    eprintln!("exp sweeps: [{:.1?}]", t.elapsed());
    for w in all {
        assert!(w.err <= 2.0, "exp: {:.4} ulp at x = {:e}", w.err, w.x);
    }
}

#[test]
fn exp_special_values() {
    let e = num::exp;
    assert_eq!(e(0.0).to_bits(), 1.0f32.to_bits());
    assert_eq!(e(-0.0).to_bits(), 1.0f32.to_bits());
    assert!(e(f32::NAN).is_nan());
    assert!(e(-f32::NAN).is_nan());
    assert!(e(f32::from_bits(0x7F80_0001)).is_nan());
    assert_eq!(e(f32::NEG_INFINITY).to_bits(), 0.0f32.to_bits());
    assert_eq!(e(f32::INFINITY), f32::INFINITY);
    assert_eq!(e(1.0), core::f32::consts::E);
    assert_eq!(e(f32::from_bits(1)), 1.0);
    assert_eq!(e(-f32::from_bits(1)), 1.0);
    // Overflow: the largest x with a finite result, and everything above.
    let top = consts::EXP_OVERFLOW_X;
    assert!(e(top).is_finite() && e(top) > 3.4e38);
    for x in [f32::from_bits(top.to_bits() + 1), 88.8, 89.0, 1e10, f32::MAX] {
        assert_eq!(e(x), f32::INFINITY, "exp({x:e})");
    }
    // Underflow: below ln(2^-150) the true value rounds to +0.0.
    for x in [-103.98f32, -104.0, -104.5, -200.0, -1e10, f32::MIN] {
        assert_eq!(e(x).to_bits(), 0.0f32.to_bits(), "exp({x:e})");
    }
    // Subnormal results: exp(ln 2^-149) is the smallest subnormal, and the
    // values in between stay within a unit.
    let x = -103.27893f32;
    assert!(exp_err(x) <= 1.0 && e(x) > 0.0);
    assert!(e(-100.0) > 0.0 && e(-100.0) < f32::MIN_POSITIVE);
    // Monotone around the subnormal boundary and at 0.
    let mut prev = 0.0f32;
    for bits in ((-80.0f32).to_bits()..=(-90.0f32).to_bits()).rev().step_by(97) {
        let y = e(f32::from_bits(bits));
        assert!(y >= prev);
        prev = y;
    }
}

// ---------------------------------------------------------------------------
// The shortcuts xielu takes: bf16's round_normal and expm1_nonpos
// ---------------------------------------------------------------------------

/// `Bf16::round_normal` (Veltkamp's split) equals `round_f32` at `x`, where it
/// claims to: `+0.0` and normal values below 2^111 in magnitude.
fn check_round_normal(x: f32) -> bool {
    let a = x.abs();
    let claimed = x.to_bits() == 0 || (a >= f32::MIN_POSITIVE && a < 2f32.powi(111));
    !claimed || <Bf16 as Elem>::round_normal(x).to_bits() == <Bf16 as Elem>::round_f32(x).to_bits()
}

#[test]
fn bf16_round_normal_is_exact_on_its_range() {
    // Around every rounding boundary: for each upper half, the low halves just
    // below, at and above the tie, and the ends of the interval.
    for hi in 0u32..=0xFFFF {
        for lo in [0x0000u32, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF] {
            let x = f32::from_bits(hi << 16 | lo);
            assert!(check_round_normal(x), "round_normal({x:e} = {:#010x})", x.to_bits());
        }
    }
    // And every 257th pattern of all 2^32.
    let w = sweep(0, u32::MAX, 257, |x| if check_round_normal(x) { 0.0 } else { 1.0 });
    assert_eq!(w.err, 0.0, "round_normal differs at {:e} ({:#010x})", w.x, w.x.to_bits());
    // Outside the range it does differ (the callers' range checks matter).
    assert_ne!(<Bf16 as Elem>::round_normal(-0.0).to_bits(), (-0.0f32).to_bits());
    assert!(<Bf16 as Elem>::round_normal(2f32.powi(120)).is_nan());
}

/// Above its range, `round_normal` is either exact or NaN, never a wrong
/// number: a NaN result is how add3_layer_norm detects large values. Every f32
/// from 2^111 up, infinities included, both signs (about 2^28 values).
#[test]
fn bf16_round_normal_above_its_range_is_exact_or_nan() {
    let (mut exact, mut nan) = (0u64, 0u64);
    for bits in 2f32.powi(111).to_bits()..=f32::INFINITY.to_bits() {
        for sign in [0, 0x8000_0000] {
            let x = f32::from_bits(bits | sign);
            let r = <Bf16 as Elem>::round_normal(x);
            if r.is_nan() {
                nan += 1;
            } else {
                assert_eq!(r.to_bits(), <Bf16 as Elem>::round_f32(x).to_bits(), "round_normal({x:e})");
                exact += 1;
            }
        }
    }
    assert!(exact > 1 << 23 && nan > 1 << 27, "exact {exact}, NaN {nan}");
}

#[test]
#[ignore = "exhaustive, about 10 s of CPU time in release; run with --release -- --ignored"]
fn bf16_round_normal_is_exact_on_its_range_exhaustive() {
    let w = sweep(0, u32::MAX, 1, |x| if check_round_normal(x) { 0.0 } else { 1.0 });
    assert_eq!(w.count, 1u64 << 32);
    assert_eq!(w.err, 0.0, "round_normal differs at {:e} ({:#010x})", w.x, w.x.to_bits());
}

fn expm1_nonpos_mismatch(x: f32) -> f64 {
    if same_bits_or_both_nan(num::expm1_nonpos(x), num::expm1(x)) { 0.0 } else { 1.0 }
}

#[test]
fn expm1_nonpos_equals_expm1_for_x_at_most_0() {
    // Every bf16 and f16 value <= 0 (what the kernels feed it), the specials,
    // and every 61st f32 pattern <= 0 (the negative half is 0x8000_0000..).
    for bits in 0x8000u32..=0xFFFF {
        let b = f32::from_bits(bits << 16);
        let h = f16::from_bits(bits as u16).to_f32();
        for x in [b, h] {
            assert_eq!(expm1_nonpos_mismatch(x), 0.0, "expm1_nonpos({x:e})");
        }
    }
    for x in
        [0.0, -0.0, f32::NEG_INFINITY, f32::NAN, -f32::NAN, -17.0, -17.000002, -16.999998, f32::MIN, -f32::MIN_POSITIVE]
    {
        assert_eq!(expm1_nonpos_mismatch(x), 0.0, "expm1_nonpos({x:e})");
    }
    let w = sweep(0x8000_0000, u32::MAX, 61, expm1_nonpos_mismatch);
    assert_eq!(w.err, 0.0, "expm1_nonpos differs at {:e} ({:#010x})", w.x, w.x.to_bits());
    assert_eq!(expm1_nonpos_mismatch(0.0), 0.0);
}

#[test]
#[ignore = "exhaustive, about 20 s of CPU time in release; run with --release -- --ignored"]
fn expm1_nonpos_equals_expm1_for_x_at_most_0_exhaustive() {
    let w = sweep(0x8000_0000, u32::MAX, 1, expm1_nonpos_mismatch);
    assert_eq!(w.count, 1u64 << 31);
    assert_eq!(w.err, 0.0, "expm1_nonpos differs at {:e} ({:#010x})", w.x, w.x.to_bits());
}
