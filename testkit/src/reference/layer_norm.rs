//! docs/contracts.md, section 4, `add3_layer_norm`: residual add of three tensors fused with the next
//! LayerNorm (Cohere2).
//!
//! [`add3_layer_norm`] is the bit-exact model: `x_new = T(f(T(f(a) + f(b))) + f(x))`, then
//! MLX-ROCm's `layer_norm` evaluation order (the contract's steps 1-9, simulated lane by lane).
//! [`layer_norm_f64`] is the plain math in f64 for tolerance checks.

use super::{Dtype, round};

/// Step 1: lanes per workgroup (one workgroup per row).
pub const THREADS: usize = 256;
/// Step 1: lanes per wave.
pub const WAVE: usize = 32;
/// Step 1: waves per workgroup.
pub const WAVES: usize = THREADS / WAVE;
/// Largest D the kernel accepts (larger D is the caller's fallback). The reference itself
/// computes any D with the same ownership rule.
pub const MAX_D: usize = 6656;

/// Step 2: the element indices thread `t` owns in a row of `d` elements, in ownership order:
/// `i = 1024*k + 4*t + j` for k = 0, 1, ... and j = 0..3, wherever `i < d`.
pub fn owned_indices(t: usize, d: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut k = 0;
    while 1024 * k < d {
        for j in 0..4 {
            let i = 1024 * k + 4 * t + j;
            if i < d {
                out.push(i);
            }
        }
        k += 1;
    }
    out
}

/// Step 4: the wave butterfly `v = v + shfl_xor(v, m)` for m = 16, 8, 4, 2, 1. Each round reads
/// the values of the previous round (all lanes exchange simultaneously). Returns all 32 lanes.
pub fn wave_butterfly(lanes: [f32; WAVE]) -> [f32; WAVE] {
    let mut v = lanes;
    for m in [16, 8, 4, 2, 1] {
        let old = v;
        for l in 0..WAVE {
            v[l] = old[l] + old[l ^ m];
        }
    }
    v
}

/// Steps 4-5: reduces the 256 per-thread partials of one row to one value.
/// Each wave w runs the butterfly over threads 32w..32w+31; lane 0 stores its total to slot w;
/// wave 0 then loads slot `lane` for lanes 0..7 and +0.0 for lanes 8..31 and runs the same
/// butterfly; lane 0's result is broadcast.
pub fn block_sum(partials: &[f32; THREADS]) -> f32 {
    let mut slots = [0.0f32; WAVES];
    for (w, slot) in slots.iter_mut().enumerate() {
        let mut lanes = [0.0f32; WAVE];
        lanes.copy_from_slice(&partials[WAVE * w..WAVE * (w + 1)]);
        *slot = wave_butterfly(lanes)[0];
    }
    let mut lanes = [0.0f32; WAVE]; // lanes 8..31 contribute +0.0
    lanes[..WAVES].copy_from_slice(&slots);
    wave_butterfly(lanes)[0]
}

/// Step 8 of section 2: `r = 1.0 / sqrt(v)` (two correctly rounded operations).
pub fn exact_rsqrt(v: f32) -> f32 {
    1.0 / v.sqrt()
}

/// `x_new = T(f(T(f(a) + f(b))) + f(x))`: two roundings, `(a + b)` first, then `+ x`.
pub fn add3(dtype: Dtype, a: &[f32], b: &[f32], x: &[f32]) -> Vec<f32> {
    assert!(a.len() == b.len() && b.len() == x.len(), "add3: a, b, x lengths differ");
    (0..a.len()).map(|i| round(dtype, round(dtype, a[i] + b[i]) + x[i])).collect()
}

/// MLX-ROCm's `layer_norm` over `x_new [rows, d]` (values of `dtype`), bit-exact steps 1-9 of
/// section 2 when `rsqrt` is [`exact_rsqrt`]. `w [d]`, optional `bias [d]`; returns `h [rows, d]`
/// rounded to `dtype`. Another `rsqrt` in step 8 (`r = rsqrt(v)`) is the hook of the contract's
/// negative control (an approximate reciprocal square root must fail the bit-exact test).
#[allow(clippy::too_many_arguments)]
pub fn layer_norm(
    dtype: Dtype,
    x_new: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    eps: f32,
    rows: usize,
    d: usize,
    rsqrt: impl Fn(f32) -> f32,
) -> Vec<f32> {
    assert_eq!(x_new.len(), rows * d, "x_new must be [rows, d]");
    assert_eq!(w.len(), d, "w must be [d]");
    if let Some(b) = bias {
        assert_eq!(b.len(), d, "bias must be [d]");
    }
    // Steps 1-2: one workgroup of 256 lanes per row; thread t owns `owned[t]` (same every pass).
    let owned: Vec<Vec<usize>> = (0..THREADS).map(|t| owned_indices(t, d)).collect();
    let d_f = d as f32; // exact for any realistic d (< 2^24)
    let mut h = vec![0.0f32; rows * d];
    for row in 0..rows {
        let xr = &x_new[row * d..(row + 1) * d];
        // Step 3: per-thread sequential sums, s = +0.0 then s = s + f(x_new[i]) in ownership order.
        let mut partial = [0.0f32; THREADS];
        for t in 0..THREADS {
            let mut s = 0.0f32;
            for &i in &owned[t] {
                s = s + xr[i];
            }
            partial[t] = s;
        }
        // Steps 4-5: wave butterflies, then the cross-wave butterfly.
        let sum = block_sum(&partial);
        // Step 6: mean = S / D, correctly rounded.
        let mean = sum / d_f;
        // Step 7: variance pass, q = fma(d, d, q) per owned element, reduced as in steps 4-5.
        for t in 0..THREADS {
            let mut q = 0.0f32;
            for &i in &owned[t] {
                let dv = xr[i] - mean;
                q = dv.mul_add(dv, q);
            }
            partial[t] = q;
        }
        let q_total = block_sum(&partial);
        // Step 8: var = Q / D; v = var + eps; r = 1.0 / sqrt(v), both correctly rounded.
        let var = q_total / d_f;
        let v = var + eps;
        let r = rsqrt(v);
        // Step 9: nrm = (f(x_new[i]) - mean) * r; y = fma(nrm, f(w[i]), bb); store T(y).
        // (Each output element depends only on its own index, so any visiting order is the same.)
        for i in 0..d {
            let nrm = (xr[i] - mean) * r;
            let bb = match bias {
                Some(b) => b[i],
                None => 0.0,
            };
            let y = nrm.mul_add(w[i], bb);
            h[row * d + i] = round(dtype, y);
        }
    }
    h
}

/// The whole kernel of section 2: returns `(x_new, h)`, both `[rows, d]` and rounded to `dtype`.
/// `x_new = T(f(T(f(a) + f(b))) + f(x))`; `h` = [`layer_norm`] of `x_new` as read back from
/// memory. The reference computes any `d >= 0`; the kernel must refuse `d > MAX_D`.
pub fn add3_layer_norm(
    dtype: Dtype,
    a: &[f32],
    b: &[f32],
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    eps: f32,
    rows: usize,
    d: usize,
) -> (Vec<f32>, Vec<f32>) {
    assert_eq!(a.len(), rows * d, "a must be [rows, d]");
    let x_new = add3(dtype, a, b, x);
    let h = layer_norm(dtype, &x_new, w, bias, eps, rows, d, exact_rsqrt);
    (x_new, h)
}

/// Plain LayerNorm in f64 (biased variance over the last dim):
/// `(x - mean) / sqrt(var + eps) * w + bias`, `[rows, d]`.
pub fn layer_norm_f64(x_new: &[f32], w: &[f32], bias: Option<&[f32]>, eps: f32, rows: usize, d: usize) -> Vec<f64> {
    assert_eq!(x_new.len(), rows * d, "x_new must be [rows, d]");
    let mut h = vec![0.0f64; rows * d];
    for row in 0..rows {
        let xr = &x_new[row * d..(row + 1) * d];
        let mean = xr.iter().map(|&e| e as f64).sum::<f64>() / d as f64;
        let var = xr.iter().map(|&e| (e as f64 - mean).powi(2)).sum::<f64>() / d as f64;
        let r = 1.0 / (var + eps as f64).sqrt();
        for i in 0..d {
            let bb = bias.map_or(0.0, |b| b[i] as f64);
            h[row * d + i] = (xr[i] as f64 - mean) * r * w[i] as f64 + bb;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::super::data::{ADD3_CASES, NormalRng, add3_inputs};
    use super::super::metrics::{nmax, nrms};
    use super::*;

    const EPS: f32 = 1e-5;

    /// Rough bounds against f64: `(nrms, nmax)` per output dtype (dominated by T's rounding).
    fn bounds(dtype: Dtype) -> (f64, f64) {
        match dtype {
            Dtype::F32 => (1e-6, 1e-5),
            Dtype::F16 => (5e-4, 4e-3),
            Dtype::Bf16 => (4e-3, 3e-2),
        }
    }

    fn run_case(dtype: Dtype, d: usize, rows: usize, with_bias: bool, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f64>) {
        let inp = add3_inputs(dtype, rows, d, with_bias, seed);
        let (x_new, h) = add3_layer_norm(dtype, &inp.a, &inp.b, &inp.x, &inp.w, inp.bias.as_deref(), EPS, rows, d);
        let want = layer_norm_f64(&x_new, &inp.w, inp.bias.as_deref(), EPS, rows, d);
        (x_new, h, want)
    }

    #[test]
    fn ownership() {
        assert_eq!(owned_indices(0, 5), vec![0, 1, 2, 3]);
        assert_eq!(owned_indices(1, 5), vec![4]);
        assert!(owned_indices(2, 5).is_empty());
        assert_eq!(owned_indices(3, 2048), vec![12, 13, 14, 15, 1036, 1037, 1038, 1039]);
        // D = 6656: at most 28 elements per thread, every element owned exactly once.
        let mut seen = vec![0u8; MAX_D];
        let mut most = 0;
        for t in 0..THREADS {
            let o = owned_indices(t, MAX_D);
            most = most.max(o.len());
            for i in o {
                seen[i] += 1;
            }
        }
        assert_eq!(most, 28);
        assert!(seen.iter().all(|&c| c == 1));
    }

    /// The contract's closed form of the cross-wave step: ((W0+W4)+(W2+W6)) + ((W1+W5)+(W3+W7)).
    #[test]
    fn cross_wave_closed_form() {
        let mut rng = NormalRng::new(7);
        for _ in 0..1000 {
            let mut wsum = [0.0f32; WAVES];
            for v in wsum.iter_mut() {
                *v = (rng.next_normal() * 1000.0) as f32;
            }
            let mut lanes = [0.0f32; WAVE];
            lanes[..WAVES].copy_from_slice(&wsum);
            let all = wave_butterfly(lanes);
            let w = wsum;
            let want = ((w[0] + w[4]) + (w[2] + w[6])) + ((w[1] + w[5]) + (w[3] + w[7]));
            assert_eq!(all[0].to_bits(), want.to_bits());
            // Construct 256 partials whose waves total w[..]: only lane 0 of each wave nonzero.
            let mut partials = [0.0f32; THREADS];
            for k in 0..WAVES {
                partials[WAVE * k] = w[k];
            }
            assert_eq!(block_sum(&partials).to_bits(), want.to_bits());
        }
        // Every lane ends with the same value.
        let mut lanes = [0.0f32; WAVE];
        for v in lanes.iter_mut() {
            *v = (rng.next_normal()) as f32;
        }
        let all = wave_butterfly(lanes);
        assert!(all.iter().all(|v| v.to_bits() == all[0].to_bits()));
        // Adding +0.0 from an empty lane turns -0.0 into +0.0.
        let mut partials = [0.0f32; THREADS];
        partials[0] = -0.0;
        assert_eq!(block_sum(&partials).to_bits(), 0.0f32.to_bits());
    }

    /// The butterfly is not the same as other reduction orders (so the order matters).
    #[test]
    fn butterfly_order_matters() {
        let mut rng = NormalRng::new(11);
        let mut differs = 0;
        for _ in 0..200 {
            let mut lanes = [0.0f32; WAVE];
            for v in lanes.iter_mut() {
                *v = (rng.next_normal() * 100.0) as f32;
            }
            let sequential = lanes.iter().fold(0.0f32, |s, &v| s + v);
            if wave_butterfly(lanes)[0] != sequential {
                differs += 1;
            }
        }
        assert!(differs > 20, "{differs}");
    }

    #[test]
    fn add3_rounds_a_plus_b_first() {
        // bf16: 1 + 2^-8 ties to 1.0, then 1.0 + 2^-8 ties to 1.0 again; a + (b + x) would give
        // 1 + 2^-7.
        let e = 1.0 / 256.0;
        assert_eq!(add3(Dtype::Bf16, &[1.0], &[e], &[e]), vec![1.0]);
        assert_eq!(add3(Dtype::Bf16, &[e], &[e], &[1.0]), vec![1.0 + 2.0 * e]);
    }

    #[test]
    fn spec_cases_vs_f64() {
        for (n, c) in ADD3_CASES.iter().enumerate() {
            let (x_new, h, want) = run_case(c.dtype, c.d, c.rows, c.bias, 100 + n as u64);
            assert_eq!(x_new.len(), c.rows * c.d);
            let (r, m) = (nrms(&h, &want), nmax(&h, &want));
            let (br, bm) = bounds(c.dtype);
            println!(
                "add3_layer_norm {} D={} rows={} bias={}: nrms {r:.2e} nmax {m:.2e}",
                c.dtype.name(),
                c.d,
                c.rows,
                c.bias
            );
            assert!(r < br && m < bm, "{c:?}: nrms {r:e} nmax {m:e}");
        }
    }

    #[test]
    fn f32_relative_accuracy() {
        // Per element: |h - h64| <= 1e-5 * (|h64| + 1e-2), i.e. ~1e-5 relative except near 0.
        for (d, rows, bias) in [(1025, 3, false), (4096, 2, true), (6656, 2, true), (96, 4, false)] {
            let (_, h, want) = run_case(Dtype::F32, d, rows, bias, 5);
            for (g, w) in h.iter().zip(&want) {
                assert!((*g as f64 - w).abs() <= 1e-5 * (w.abs() + 1e-2), "{g} vs {w}");
            }
        }
    }

    #[test]
    fn small_and_edge_d() {
        // D = 1: var = 0, nrm = 0, so h = bias (or +0.0).
        for dtype in Dtype::ALL {
            let (x_new, h) =
                add3_layer_norm(dtype, &[1.0, 2.0], &[0.5, 0.25], &[3.0, -7.0], &[2.0], Some(&[0.125]), EPS, 2, 1);
            assert_eq!(x_new, vec![4.5, -4.75]);
            assert_eq!(h, vec![0.125, 0.125]);
            let (_, h) = add3_layer_norm(dtype, &[1.0], &[0.5], &[3.0], &[-2.0], None, EPS, 1, 1);
            assert_eq!(h[0].to_bits(), 0.0f32.to_bits()); // fma(+0, -2, +0) = +0
        }
        // D = 5 and D = 6 (threads 0 and 1 own elements) vs f64.
        for d in [5, 6] {
            for dtype in Dtype::ALL {
                let (_, h, want) = run_case(dtype, d, 3, true, 9);
                let (br, bm) = bounds(dtype);
                assert!(nrms(&h, &want) < br && nmax(&h, &want) < bm, "{} d={d}", dtype.name());
            }
        }
        // rows = 0 and d = 0 are empty.
        let (x_new, h) = add3_layer_norm(Dtype::F32, &[], &[], &[], &[1.0; 8], None, EPS, 0, 8);
        assert!(x_new.is_empty() && h.is_empty());
    }

    #[test]
    fn d_6656_all_dtypes() {
        for dtype in Dtype::ALL {
            let (_, h, want) = run_case(dtype, MAX_D, 2, true, 21);
            let (br, bm) = bounds(dtype);
            assert!(nrms(&h, &want) < br && nmax(&h, &want) < bm, "{}", dtype.name());
        }
    }

    #[test]
    fn nan_row_is_nan() {
        for dtype in Dtype::ALL {
            let (rows, d) = (3, 300);
            let mut inp = add3_inputs(dtype, rows, d, true, 3);
            inp.x[d + 17] = f32::NAN; // row 1
            let (x_new, h) = add3_layer_norm(dtype, &inp.a, &inp.b, &inp.x, &inp.w, inp.bias.as_deref(), EPS, rows, d);
            assert!(x_new[d + 17].is_nan());
            assert!(h[d..2 * d].iter().all(|v| v.is_nan()), "{}", dtype.name());
            assert!(h[..d].iter().chain(&h[2 * d..]).all(|v| v.is_finite()));
            // An infinity in the input does not crash; its row is NaN too (inf - inf).
            let mut inp = add3_inputs(dtype, 1, d, false, 4);
            inp.a[5] = f32::INFINITY;
            let (_, h) = add3_layer_norm(dtype, &inp.a, &inp.b, &inp.x, &inp.w, None, EPS, 1, d);
            assert!(h.iter().all(|v| v.is_nan()));
        }
    }

    /// A plausible-but-wrong order (sequential row sum instead of the 256-lane schedule) changes
    /// some output bits on the contract's cases: the exact order is observable.
    #[test]
    fn other_order_changes_bits() {
        let mut differing = 0;
        for (n, c) in ADD3_CASES.iter().enumerate() {
            let inp = add3_inputs(c.dtype, c.rows, c.d, c.bias, 100 + n as u64);
            let (x_new, h) =
                add3_layer_norm(c.dtype, &inp.a, &inp.b, &inp.x, &inp.w, inp.bias.as_deref(), EPS, c.rows, c.d);
            for row in 0..c.rows {
                let xr = &x_new[row * c.d..(row + 1) * c.d];
                let mean = xr.iter().fold(0.0f32, |s, &v| s + v) / c.d as f32;
                let q = xr.iter().fold(0.0f32, |q, &v| (v - mean).mul_add(v - mean, q));
                let r = 1.0 / (q / c.d as f32 + EPS).sqrt();
                for i in 0..c.d {
                    let bb = inp.bias.as_ref().map_or(0.0, |b| b[i]);
                    let y = round(c.dtype, ((xr[i] - mean) * r).mul_add(inp.w[i], bb));
                    if y.to_bits() != h[row * c.d + i].to_bits() {
                        differing += 1;
                    }
                }
            }
        }
        println!("sequential-order model differs in {differing} output elements");
        assert!(differing > 0);
    }
}
