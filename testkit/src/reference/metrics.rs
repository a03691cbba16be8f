//! Comparison metrics used by the contracts of docs/contracts.md:
//! - the tolerance budgets of section 1 (xIELU) and section 4 (MoE): normalized RMS and
//!   normalized max deviation, each divided by the RMS of the reference;
//! - section 3's (Mamba1) `max|got - want| / max(1e-6, max|want|)`;
//! - bit-exact comparisons (sections 1 and 2), treating any two NaNs as equal
//!   (docs/contracts.md, section 1: a NaN's payload is not compared).
//!
//! All metrics accept f32 or f64 slices (anything `Copy + Into<f64>`) and compute in f64.
//! They panic if the two slices have different lengths.

use super::{Dtype, is_nan_bits, widen};

fn check_len(got: usize, want: usize) {
    assert_eq!(got, want, "length mismatch: got {got} values, want {want}");
}

/// Root mean square of `v` (0 for an empty slice).
pub fn rms(v: &[impl Copy + Into<f64>]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let sum: f64 = v.iter().map(|&e| e.into() * e.into()).sum();
    (sum / v.len() as f64).sqrt()
}

/// RMS of the difference `got - want` (0 for empty slices).
pub fn rms_diff(got: &[impl Copy + Into<f64>], want: &[impl Copy + Into<f64>]) -> f64 {
    check_len(got.len(), want.len());
    if got.is_empty() {
        return 0.0;
    }
    let sum: f64 = got.iter().zip(want).map(|(&g, &w)| (g.into() - w.into()).powi(2)).sum();
    (sum / got.len() as f64).sqrt()
}

/// Normalized RMS: `RMS(got - want) / RMS(want)`. NaN anywhere gives NaN (which fails any
/// `<=` bound); a zero reference RMS gives inf or NaN.
pub fn nrms(got: &[impl Copy + Into<f64>], want: &[impl Copy + Into<f64>]) -> f64 {
    rms_diff(got, want) / rms(want)
}

/// Normalized max deviation: `max|got - want| / RMS(want)`. NaN anywhere gives NaN.
pub fn nmax(got: &[impl Copy + Into<f64>], want: &[impl Copy + Into<f64>]) -> f64 {
    max_abs_diff(got, want) / rms(want)
}

/// `max|got - want|` (NaN if any difference is NaN; 0 for empty slices).
pub fn max_abs_diff(got: &[impl Copy + Into<f64>], want: &[impl Copy + Into<f64>]) -> f64 {
    check_len(got.len(), want.len());
    let mut m = 0.0f64;
    for (&g, &w) in got.iter().zip(want) {
        let d = (g.into() - w.into()).abs();
        if d.is_nan() {
            return f64::NAN;
        }
        m = m.max(d);
    }
    m
}

/// Section 3's relative max error: `max|got - want| / max(1e-6, max|want|)`.
/// NaN anywhere gives NaN.
pub fn max_rel(got: &[impl Copy + Into<f64>], want: &[impl Copy + Into<f64>]) -> f64 {
    let mut max_want = 0.0f64;
    for &w in want {
        let a = w.into().abs();
        if a.is_nan() {
            return f64::NAN;
        }
        max_want = max_want.max(a);
    }
    max_abs_diff(got, want) / max_want.max(1e-6)
}

/// First index where two buffers of stored `dtype` bits differ, as `(index, got, want)`;
/// `None` when identical. Two NaNs count as equal whatever their payloads; signed zeros differ.
/// Panics if the lengths differ.
pub fn first_bit_difference(dtype: Dtype, got_bits: &[u32], want_bits: &[u32]) -> Option<(usize, u32, u32)> {
    check_len(got_bits.len(), want_bits.len());
    got_bits.iter().zip(want_bits).enumerate().find_map(|(i, (&g, &w))| {
        let same = g == w || (is_nan_bits(dtype, g) && is_nan_bits(dtype, w));
        (!same).then_some((i, g, w))
    })
}

/// A readable message for a bit difference: index, both values and both bit patterns.
pub fn describe_bit_difference(dtype: Dtype, index: usize, got: u32, want: u32) -> String {
    let width = dtype.size() * 2;
    format!(
        "{} mismatch at index {index}: got {:e} ({got:#0w$x}), want {:e} ({want:#0w$x})",
        dtype.name(),
        widen(dtype, got),
        widen(dtype, want),
        w = width + 2,
    )
}

/// Asserts two buffers of stored `dtype` bits are identical (NaN-ness compared, not payloads);
/// panics with [`describe_bit_difference`]'s message (prefixed by `what`) and the number of
/// differing elements otherwise.
pub fn assert_bits_equal(dtype: Dtype, got_bits: &[u32], want_bits: &[u32], what: &str) {
    if let Some((i, g, w)) = first_bit_difference(dtype, got_bits, want_bits) {
        let count = got_bits
            .iter()
            .zip(want_bits)
            .filter(|&(&g, &w)| g != w && !(is_nan_bits(dtype, g) && is_nan_bits(dtype, w)))
            .count();
        panic!("{what}: {} ({count} of {} elements differ)", describe_bit_difference(dtype, i, g, w), got_bits.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn basic_metrics() {
        let want = [3.0f32, -4.0];
        let got = [3.0f64, -3.0];
        assert_abs_diff_eq!(rms(&want), (12.5f64).sqrt(), epsilon = 1e-12);
        assert_abs_diff_eq!(nrms(&got, &want), (0.5f64).sqrt() / (12.5f64).sqrt(), epsilon = 1e-12);
        assert_abs_diff_eq!(nmax(&got, &want), 1.0 / (12.5f64).sqrt(), epsilon = 1e-12);
        assert_abs_diff_eq!(max_rel(&got, &want), 0.25, epsilon = 1e-12);
        assert_abs_diff_eq!(max_rel(&[1e-9f64], &[0.0f32]), 1e-3, epsilon = 1e-15);
        assert!(nrms(&[f32::NAN, 1.0], &[1.0f32, 1.0]).is_nan());
        assert!(nmax(&[f32::NAN, 1.0], &[1.0f32, 1.0]).is_nan());
        assert!(max_rel(&[1.0f32], &[f32::NAN]).is_nan());
    }

    #[test]
    fn bit_differences() {
        let d = Dtype::Bf16;
        assert_eq!(first_bit_difference(d, &[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_bit_difference(d, &[1, 2, 3], &[1, 5, 4]), Some((1, 2, 5)));
        // NaNs with different payloads are equal; +0 and -0 are not.
        assert_eq!(first_bit_difference(d, &[0x7FC0, 0x0000], &[0xFFC1, 0x0000]), None);
        assert_eq!(first_bit_difference(d, &[0x0000], &[0x8000]), Some((0, 0, 0x8000)));
        let msg = describe_bit_difference(d, 7, 0x3F80, 0x3F81);
        assert!(msg.contains("index 7") && msg.contains("0x3f80") && msg.contains("0x3f81"), "{msg}");
        let msg = describe_bit_difference(Dtype::F32, 0, 0x3F80_0000, 0);
        assert!(msg.contains("0x3f800000") && msg.contains("0x00000000"), "{msg}");
        assert_bits_equal(d, &[1, 2], &[1, 2], "same");
    }

    #[test]
    #[should_panic(expected = "2 of 3 elements differ")]
    fn assert_reports_count() {
        assert_bits_equal(Dtype::F32, &[1, 2, 3], &[1, 5, 6], "test");
    }
}
