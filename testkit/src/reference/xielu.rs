//! docs/contracts.md, section 3, `xielu`: the xIELU activation (Apertus MLP).
//!
//! [`xielu`] is the bit-exact model (MLX-ROCm's op-by-op graph), step by step, no FMA, using the
//! reference [`expm1`] of docs/contracts.md, section 2. [`xielu_f64`] is the plain math in
//! f64 for tolerance tests.

use super::expm1::expm1;
use super::{Dtype, round};

/// Typical `alpha_p` (already softplus-ed on the host).
pub const ALPHA_P: f32 = 0.8731;
/// Typical `alpha_n`.
pub const ALPHA_N: f32 = 0.6042;
/// Typical `beta`.
pub const BETA: f32 = 0.5;
/// Typical `eps`.
pub const EPS: f32 = -1e-6;

/// Tolerance budget of section 1 for a path that is not bit-exact: `(nrms, nmax)` for `dtype`,
/// each the deviation divided by the reference RMS.
pub fn tolerance(dtype: Dtype) -> (f64, f64) {
    match dtype {
        Dtype::F32 => (1e-6, 1e-5),
        Dtype::F16 => (2e-3, 1.2e-2),
        Dtype::Bf16 => (1.6e-2, 7e-2),
    }
}

/// The bit-exact model of one element: `v = f(x)` and the already rounded scalars
/// `ap, an, be, ep` (each `R()` of the caller's f32 scalar). Returns `f(T(out))`.
pub fn xielu_one(dtype: Dtype, v: f32, ap: f32, an: f32, be: f32, ep: f32) -> f32 {
    let r = |e: f32| round(dtype, e);
    let x_sq = r(v * v);
    let pos = r(x_sq * ap);
    // NaN-propagating minimum, exact.
    let clamped = if v.is_nan() || v < ep { v } else { ep };
    let em = r(expm1(clamped));
    let neg = r(r(em - v) * an);
    let sel = if v > 0.0 { pos } else { neg };
    let bx = r(v * be);
    r(sel + bx) // out = T(sel + bx)
}

/// xIELU over `x` (values representable in `dtype`), bit-exact model of section 1:
///
/// ```text
/// ap = R(alpha_p); an = R(alpha_n); be = R(beta); ep = R(eps); v = f(x)
/// x_sq = R(v*v); pos = R(x_sq*ap); clamped = (v is NaN || v < ep) ? v : ep
/// em = R(expm1(clamped)); neg = R(R(em - v)*an); sel = v > 0 ? pos : neg
/// bx = R(v*be); out = T(sel + bx)
/// ```
pub fn xielu(dtype: Dtype, x: &[f32], alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) -> Vec<f32> {
    let ap = round(dtype, alpha_p);
    let an = round(dtype, alpha_n);
    let be = round(dtype, beta);
    let ep = round(dtype, eps);
    x.iter().map(|&v| xielu_one(dtype, v, ap, an, be, ep)).collect()
}

/// Plain xIELU in f64 (no intermediate rounding, scalars taken as given):
/// `x > 0: alpha_p*x*x + beta*x`; `x <= 0: (expm1(min(x, eps)) - x)*alpha_n + beta*x`.
/// NaN propagates.
pub fn xielu_f64(x: &[f32], alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) -> Vec<f64> {
    let (ap, an, be, ep) = (alpha_p as f64, alpha_n as f64, beta as f64, eps as f64);
    x.iter()
        .map(|&v| {
            let v = v as f64;
            if v.is_nan() {
                f64::NAN
            } else if v > 0.0 {
                ap * v * v + be * v
            } else {
                (v.min(ep).exp_m1() - v) * an + be * v
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::data::xielu_acceptance_inputs;
    use super::super::metrics::{nmax, nrms};
    use super::super::{is_nan_bits, store};
    use super::*;

    /// For each dtype: the acceptance inputs and the model's results on them.
    fn acceptance_cases() -> impl Iterator<Item = (Dtype, Vec<f32>, Vec<f32>)> {
        Dtype::ALL.into_iter().map(|dtype| {
            let x = xielu_acceptance_inputs(dtype);
            let model = xielu(dtype, &x, ALPHA_P, ALPHA_N, BETA, EPS);
            (dtype, x, model)
        })
    }

    /// `got` within section 1's budget of `want` (printed, labelled `what`), but for
    /// bf16's nmax, which is allowed up to `bf16_nmax`.
    fn assert_within_budget(dtype: Dtype, got: &[f32], want: &[impl Copy + Into<f64>], what: &str, bf16_nmax: f64) {
        let (tr, tm) = tolerance(dtype);
        let (r, m) = (nrms(got, want), nmax(got, want));
        println!("xielu {} {what}: nrms {r:.3e} (budget {tr:.1e}), nmax {m:.3e} (budget {tm:.1e})", dtype.name());
        let tm = if dtype == Dtype::Bf16 { bf16_nmax } else { tm };
        assert!(r <= tr && m <= tm, "{}: nrms {r:e} nmax {m:e}", dtype.name());
    }

    /// The bit-exact model vs the plain f64 math. f32 and f16 meet section 1's budget even
    /// against exact math. bf16 meets the nrms budget, but its max deviation from exact math is
    /// about 0.093 (at x = 51: R(x*x), R(alpha_p) = 0.875 and two more bf16 roundings), above
    /// the 7e-2 budget: the budget is relative to the bit-exact reference (see the next test),
    /// not to exact math.
    #[test]
    fn within_tolerance_of_f64() {
        for (dtype, x, got) in acceptance_cases() {
            let want = xielu_f64(&x, ALPHA_P, ALPHA_N, BETA, EPS);
            assert_within_budget(dtype, &got, &want, "vs f64", 0.1);
        }
    }

    /// A plausible non-bit-exact path (all math in f32 with the R() scalars, one rounding to T at
    /// the end) against the bit-exact model: f32 and f16 meet section 1's budget; bf16 meets the
    /// nrms budget but its nmax is about 0.126 (> 7e-2): at bf16 the nmax budget is only met by
    /// paths that round like the model (see the report in the module's tests).
    #[test]
    fn single_rounding_path_within_budget() {
        for (dtype, x, want) in acceptance_cases() {
            let r = |v: f32| round(dtype, v);
            let (ap, an, be, ep) = (r(ALPHA_P), r(ALPHA_N), r(BETA), r(EPS));
            let got: Vec<f32> = x
                .iter()
                .map(|&v| {
                    let y = if v > 0.0 { ap * v * v + be * v } else { (expm1(v.min(ep)) - v) * an + be * v };
                    r(y)
                })
                .collect();
            assert_within_budget(dtype, &got, &want, "single rounding vs model", 0.15);
        }
    }

    #[test]
    fn negative_control_detected() {
        // alpha_n swapped into the positive branch.
        for (dtype, x, good) in acceptance_cases() {
            let bad = xielu(dtype, &x, ALPHA_N, ALPHA_N, BETA, EPS);
            let r = nrms(&bad, &good);
            println!("xielu {} negative control: nrms {r:.3}", dtype.name());
            assert!(r > 0.2 && r < 0.4, "{r}");
            assert!(r > tolerance(dtype).0 * 10.0);
        }
    }

    #[test]
    fn nan_and_infinities() {
        for dtype in Dtype::ALL {
            let out = xielu(dtype, &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY], ALPHA_P, ALPHA_N, BETA, EPS);
            assert!(is_nan_bits(dtype, store(dtype, out[0])));
            assert_eq!(out[1], f32::INFINITY);
            // -inf: neg = (-1 - -inf)*an = +inf, bx = -inf: the model gives inf + -inf = NaN.
            assert!(out[2].is_nan());
        }
        assert!(xielu_f64(&[f32::NAN], ALPHA_P, ALPHA_N, BETA, EPS)[0].is_nan());
    }

    #[test]
    fn hand_checked_values() {
        let dtype = Dtype::F32;
        let f = |v: f32| xielu(dtype, &[v], ALPHA_P, ALPHA_N, BETA, EPS)[0];
        // Positive branch: R(R(v*v)*ap) + R(v*be), no fma.
        assert_eq!(f(2.0), (4.0f32 * ALPHA_P) + 1.0);
        // Zeros: v = +-0 takes the negative branch with clamped = eps.
        let em = expm1(EPS);
        let z = (em - 0.0) * ALPHA_N + 0.0;
        assert_eq!(f(0.0).to_bits(), z.to_bits());
        assert_eq!(f(-0.0).to_bits(), ((em - -0.0) * ALPHA_N + -0.0 * BETA).to_bits());
        // Below -17, expm1 is exactly -1.
        assert_eq!(f(-42.0), (-1.0f32 + 42.0) * ALPHA_N + -42.0 * BETA);
        // n = 0 is a no-op.
        assert!(xielu(dtype, &[], ALPHA_P, ALPHA_N, BETA, EPS).is_empty());
    }

    /// Scalars are rounded to T before use: bf16 differs from using the raw f32 scalars.
    #[test]
    fn scalars_rounded_to_dtype() {
        let v = 3.0f32;
        let dtype = Dtype::Bf16;
        let got = xielu(dtype, &[v], ALPHA_P, ALPHA_N, BETA, EPS)[0];
        let r = |e: f32| round(dtype, e);
        assert_eq!(got, r(r(r(v * v) * r(ALPHA_P)) + r(v * r(BETA))));
    }
}
