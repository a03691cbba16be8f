//! docs/contracts.md, section 6, `moe_fc1_relu2` and `moe_down`: the squared-ReLU mixture of experts
//! (Nemotron-H), over MLX affine quantized weights (tolerance contract).
//!
//! Format: a matrix `[rows, cols]` is `words: u32 [rows, cols*bits/32]`, `scales, biases: T
//! [rows, cols/gs]`. Word p of a row packs `32/bits` consecutive values, value j in bits
//! `[j*bits, (j+1)*bits)`, least significant first. The real weight is `q * scale[g] + bias[g]`,
//! `g = col / gs`. A stack of E experts is the same layout with `rows = E * rows_per_expert`.
//!
//! Quantization rule used here (test data only; the kernels only read the format). Per group of
//! `gs` consecutive values of a row:
//! - `min`, `max` over the group; `scale = (max - min) / (2^bits - 1)` in f32; a constant group
//!   (`scale == 0`) uses `scale = 1`, so every value gets `q = 0` and dequantizes to the bias;
//! - `bias = min`;
//! - scale and bias are rounded to the activation dtype T (they are stored as T), and the codes
//!   are computed from the rounded values: `q = round_ties_even((w - R(bias)) / R(scale))`
//!   clamped to `[0, 2^bits - 1]` (if `R(scale)` underflows to 0, `q = 0`).
//!
//! This is the plain min/max affine rule, not MLX's own quantizer (which picks the edge of larger
//! magnitude and may set the bias to 0); the stored format and its meaning are identical.

use super::data::NormalRng;
use super::{Dtype, round};

/// An MLX affine quantized matrix (or a stack of experts, rows = E * rows per expert).
#[derive(Clone, Debug, PartialEq)]
pub struct Quantized {
    /// Number of rows (all experts together for a stack).
    pub rows: usize,
    /// Number of columns (the dimension that is packed and grouped).
    pub cols: usize,
    /// Bits per value (4 or 8 in the contract; 2 is also accepted here).
    pub bits: u32,
    /// Group size (columns per scale/bias).
    pub group_size: usize,
    /// Packed codes, `[rows, cols*bits/32]`.
    pub words: Vec<u32>,
    /// Scales, `[rows, cols/group_size]`, T values.
    pub scales: Vec<f32>,
    /// Biases, `[rows, cols/group_size]`, T values.
    pub biases: Vec<f32>,
}

impl Quantized {
    /// Values packed per u32 word: `32 / bits` (2, 4 and 8 bits only).
    pub fn values_per_word(&self) -> usize {
        assert!(32 % self.bits == 0, "{} bits do not fill whole words one value at a time", self.bits);
        32 / self.bits as usize
    }

    /// Words per row: `cols * bits / 32`.
    pub fn words_per_row(&self) -> usize {
        self.cols * self.bits as usize / 32
    }

    /// Groups per row: `cols / group_size`.
    pub fn groups_per_row(&self) -> usize {
        self.cols / self.group_size
    }

    /// The code `q` of element `(row, col)`: bits `col*bits .. (col+1)*bits` of
    /// the row's words read as one little-endian bit string (at 2, 4 and 8 bits
    /// value j of a word is its bits `j*bits ..`; at 6 bits a value may span two
    /// words, four values in three bytes as MLX packs them).
    pub fn code(&self, row: usize, col: usize) -> u32 {
        let bit = col * self.bits as usize;
        let row_words = &self.words[row * self.words_per_row()..(row + 1) * self.words_per_row()];
        let low = row_words[bit / 32] as u64;
        let high = row_words.get(bit / 32 + 1).map_or(0, |&w| w as u64);
        (((high << 32 | low) >> (bit % 32)) as u32) & ((1u32 << self.bits) - 1)
    }

    /// `(scale, bias)` of element `(row, col)`'s group, as f32 (`f()` of the stored T values).
    pub fn scale_bias(&self, row: usize, col: usize) -> (f32, f32) {
        let g = row * self.groups_per_row() + col / self.group_size;
        (self.scales[g], self.biases[g])
    }

    /// The weight of element `(row, col)` in f32 as the contract writes it:
    /// `q * f(scale) + f(bias)` (a multiply, then an add; no fma).
    pub fn weight(&self, row: usize, col: usize) -> f32 {
        let (s, b) = self.scale_bias(row, col);
        self.code(row, col) as f32 * s + b
    }

    /// The weight of element `(row, col)` computed in f64: `q * scale + bias` (the product is
    /// exact; at most the final add rounds, at f64 precision).
    pub fn weight_f64(&self, row: usize, col: usize) -> f64 {
        let (s, b) = self.scale_bias(row, col);
        self.code(row, col) as f64 * s as f64 + b as f64
    }
}

fn check_format(cols: usize, bits: u32, group_size: usize) {
    assert!(matches!(bits, 2 | 4 | 6 | 8), "bits must be 2, 4, 6 or 8 (got {bits})");
    assert!(
        group_size > 0 && cols.is_multiple_of(group_size),
        "cols {cols} must be a multiple of group size {group_size}"
    );
    assert!((cols * bits as usize).is_multiple_of(32), "cols {cols} must fill whole u32 words at {bits} bits");
}

/// Quantizes `w [rows, cols]` (f32) to the MLX affine format with scales and biases stored as
/// `dtype` values, using the rule in the module documentation.
pub fn quantize(dtype: Dtype, w: &[f32], rows: usize, cols: usize, bits: u32, group_size: usize) -> Quantized {
    check_format(cols, bits, group_size);
    assert_eq!(w.len(), rows * cols, "w must be [rows, cols]");
    let max_code = (1u32 << bits) - 1;
    let row_words = cols * bits as usize / 32;
    let groups = cols / group_size;
    let mut out = Quantized {
        rows,
        cols,
        bits,
        group_size,
        words: vec![0; rows * row_words],
        scales: vec![0.0; rows * groups],
        biases: vec![0.0; rows * groups],
    };
    let mut codes = vec![0u32; cols];
    for r in 0..rows {
        for g in 0..groups {
            let vals = &w[r * cols + g * group_size..r * cols + (g + 1) * group_size];
            assert!(vals.iter().all(|v| v.is_finite()), "quantize: non-finite weight in row {r}");
            let min = vals.iter().fold(f32::INFINITY, |m, &v| m.min(v));
            let max = vals.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut scale = (max - min) / max_code as f32;
            if scale == 0.0 {
                scale = 1.0; // constant group: q = 0 everywhere, value = bias
            }
            let scale_t = round(dtype, scale);
            let bias_t = round(dtype, min);
            assert!(scale_t.is_finite() && bias_t.is_finite(), "quantize: scale/bias overflow {}", dtype.name());
            out.scales[r * groups + g] = scale_t;
            out.biases[r * groups + g] = bias_t;
            for (c, &v) in vals.iter().enumerate() {
                codes[g * group_size + c] = if scale_t == 0.0 {
                    0
                } else {
                    ((v - bias_t) / scale_t).round_ties_even().clamp(0.0, max_code as f32) as u32
                };
            }
        }
        // Pack: value c at bits [c*bits, (c+1)*bits) of the row's little-endian bit string.
        let words = &mut out.words[r * row_words..(r + 1) * row_words];
        for (c, &q) in codes.iter().enumerate() {
            let bit = c * bits as usize;
            words[bit / 32] |= q << (bit % 32);
            if bit % 32 + bits as usize > 32 {
                words[bit / 32 + 1] |= q >> (32 - bit % 32);
            }
        }
    }
    out
}

/// Dequantizes to f32 `[rows, cols]`: every element `q * f(scale) + f(bias)` (see
/// [`Quantized::weight`]).
pub fn dequantize(q: &Quantized) -> Vec<f32> {
    let mut out = Vec::with_capacity(q.rows * q.cols);
    for r in 0..q.rows {
        for c in 0..q.cols {
            out.push(q.weight(r, c));
        }
    }
    out
}

fn expert_of(idx: &[u32], k: usize, n_experts: usize) -> usize {
    let e = idx[k] as usize;
    assert!(e < n_experts, "expert index idx[{k}] = {e} out of range (E = {n_experts})");
    e
}

/// `moe_fc1_relu2`: `x [Din]` (T values), `idx [K]`, `w1` a stack `[E, Dff, Din]`.
/// Returns `act [K, Dff]` (f32):
/// `act[k, f] = square(max(sum_i f(x[i]) * (q1 * f(s1) + f(b1)), 0))`, the sum in f32 over i
/// ascending from +0.0, each weight `q*s + b` then `acc + x*w` as plain f32 operations. A NaN sum
/// stays NaN. Panics on an expert index >= E.
pub fn fc1_relu2(x: &[f32], idx: &[u32], w1: &Quantized, n_experts: usize) -> Vec<f32> {
    assert!(n_experts > 0 && w1.rows.is_multiple_of(n_experts), "w1 rows {} not a multiple of E {n_experts}", w1.rows);
    let dff = w1.rows / n_experts;
    let din = w1.cols;
    assert_eq!(x.len(), din, "x must be [Din]");
    let mut act = vec![0.0f32; idx.len() * dff];
    for k in 0..idx.len() {
        let e = expert_of(idx, k, n_experts);
        for f in 0..dff {
            let row = e * dff + f;
            let mut acc = 0.0f32;
            for (i, &xi) in x.iter().enumerate() {
                acc = acc + xi * w1.weight(row, i);
            }
            let relu = if acc < 0.0 { 0.0 } else { acc };
            act[k * dff + f] = relu * relu;
        }
    }
    act
}

/// `moe_down`: `idx [K]`, `w2` a stack `[E, Din, Dff]`, `act [K, Dff]` f32, `scores [K]` f32.
/// Returns `part [K, Din]` (f32): `part[k, h] = scores[k] * sum_f act[k, f] * (q2 * f(s2) + f(b2))`,
/// the sum in f32 over f ascending from +0.0. Panics on an expert index >= E.
pub fn down(idx: &[u32], w2: &Quantized, n_experts: usize, act: &[f32], scores: &[f32]) -> Vec<f32> {
    assert!(n_experts > 0 && w2.rows.is_multiple_of(n_experts), "w2 rows {} not a multiple of E {n_experts}", w2.rows);
    let din = w2.rows / n_experts;
    let dff = w2.cols;
    let k_count = idx.len();
    assert_eq!(act.len(), k_count * dff, "act must be [K, Dff]");
    assert_eq!(scores.len(), k_count, "scores must be [K]");
    let mut part = vec![0.0f32; k_count * din];
    for k in 0..k_count {
        let e = expert_of(idx, k, n_experts);
        for h in 0..din {
            let row = e * din + h;
            let mut acc = 0.0f32;
            for f in 0..dff {
                acc = acc + act[k * dff + f] * w2.weight(row, f);
            }
            part[k * din + h] = scores[k] * acc;
        }
    }
    part
}

/// The whole routed-expert forward: [`fc1_relu2`], [`down`], then
/// `routed[h] = T(sum_k part[k, h])` (sum in f32 over k ascending from +0.0, one rounding).
/// Returns `[Din]` values of `dtype`.
pub fn routed(dtype: Dtype, m: &MoeInputs) -> Vec<f32> {
    let MoeInputs { x, idx, scores, w1, w2, n_experts } = m;
    let (idx, n_experts) = (idx.as_slice(), *n_experts);
    let act = fc1_relu2(x, idx, w1, n_experts);
    let part = down(idx, w2, n_experts, &act, scores);
    let din = w2.rows / n_experts;
    (0..din)
        .map(|h| {
            let mut acc = 0.0f32;
            for k in 0..idx.len() {
                acc = acc + part[k * din + h];
            }
            round(dtype, acc)
        })
        .collect()
}

/// The dense reference of section 4's tolerance test: dequantize, matmul, relu^2, matmul, weight
/// by scores, sum over k, then round to `dtype` once. Computed entirely in f64 (at least as
/// accurate as the f32 reference the contract names). Returns `[Din]` values of `dtype`.
pub fn dense_f32_reference(dtype: Dtype, m: &MoeInputs) -> Vec<f32> {
    let MoeInputs { x, idx, scores, w1, w2, n_experts } = m;
    let n_experts = *n_experts;
    let dff = w1.rows / n_experts;
    let din = w1.cols;
    assert_eq!(w2.rows, n_experts * din, "w2 must be [E, Din, Dff]");
    assert_eq!(w2.cols, dff, "w2 must be [E, Din, Dff]");
    let mut out = vec![0.0f64; din];
    for k in 0..idx.len() {
        let e = expert_of(idx, k, n_experts);
        let hidden: Vec<f64> = (0..dff)
            .map(|f| {
                let z: f64 = (0..din).map(|i| x[i] as f64 * w1.weight_f64(e * dff + f, i)).sum();
                let r = z.max(0.0);
                r * r
            })
            .collect();
        for (h, o) in out.iter_mut().enumerate() {
            let z: f64 = (0..dff).map(|f| hidden[f] * w2.weight_f64(e * din + h, f)).sum();
            *o += scores[k] as f64 * z;
        }
    }
    out.iter().map(|&v| round(dtype, v as f32)).collect()
}

/// The gate activation of the SwiGLU (`activation` 0) and GeGLU (1) experts,
/// `a(g) * u`, in f64: `g * sigmoid(g)`, or `0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))`.
pub fn gated_f64(activation: u32, g: f64, u: f64) -> f64 {
    match activation {
        0 => g / (1.0 + (-g).exp()) * u,
        1 => 0.5 * g * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (g + 0.044715 * g * g * g)).tanh()) * u,
        _ => panic!("activation {activation} is not 0 (SwiGLU) or 1 (GeGLU)"),
    }
}

/// `moe_gateup`: `x [Din]` (T values), `idx [K]`, `gate` and `up` stacks `[E, Dff, Din]`.
/// Returns `act [K, Dff]` (f32): `act[k, f] = R32(a(g) * u)` ([`gated_f64`] on the f32 sums),
/// where `g` and `u` are summed in f32 over i ascending from +0.0 as in [`fc1_relu2`].
pub fn gateup(x: &[f32], idx: &[u32], gate: &Quantized, up: &Quantized, n_experts: usize, activation: u32) -> Vec<f32> {
    assert!(n_experts > 0 && gate.rows.is_multiple_of(n_experts), "gate rows not a multiple of E {n_experts}");
    assert_eq!((gate.rows, gate.cols), (up.rows, up.cols), "gate and up must have one shape");
    let dff = gate.rows / n_experts;
    assert_eq!(x.len(), gate.cols, "x must be [Din]");
    let dot =
        |w: &Quantized, row: usize| x.iter().enumerate().fold(0.0f32, |acc, (i, &xi)| acc + xi * w.weight(row, i));
    let mut act = vec![0.0f32; idx.len() * dff];
    for k in 0..idx.len() {
        let e = expert_of(idx, k, n_experts);
        for f in 0..dff {
            let row = e * dff + f;
            act[k * dff + f] = gated_f64(activation, dot(gate, row) as f64, dot(up, row) as f64) as f32;
        }
    }
    act
}

/// The dense reference of a gated block: dequantize, `a(x gate) * (x up)`, the down
/// matrix, weighted by scores and summed over k, all in f64, then rounded to `dtype` once.
pub fn dense_gated_reference(dtype: Dtype, m: &GatedInputs, activation: u32) -> Vec<f32> {
    let GatedInputs { x, idx, scores, gate, up, down, n_experts } = m;
    let n_experts = *n_experts;
    let (dff, din) = (gate.rows / n_experts, gate.cols);
    let mut out = vec![0.0f64; din];
    for k in 0..idx.len() {
        let e = expert_of(idx, k, n_experts);
        let dot = |w: &Quantized, row: usize| (0..din).map(|i| x[i] as f64 * w.weight_f64(row, i)).sum::<f64>();
        let hidden: Vec<f64> =
            (0..dff).map(|f| gated_f64(activation, dot(gate, e * dff + f), dot(up, e * dff + f))).collect();
        for (h, o) in out.iter_mut().enumerate() {
            let z: f64 = (0..dff).map(|f| hidden[f] * down.weight_f64(e * din + h, f)).sum();
            *o += scores[k] as f64 * z;
        }
    }
    out.iter().map(|&v| round(dtype, v as f32)).collect()
}

/// Test inputs for a gated (SwiGLU or GeGLU) routed block.
#[derive(Clone, Debug)]
pub struct GatedInputs {
    /// `x [Din]`, T values.
    pub x: Vec<f32>,
    /// `idx [K]`: distinct expert ids < E.
    pub idx: Vec<u32>,
    /// `scores [K]`, f32, positive, summing to about 1.
    pub scores: Vec<f32>,
    /// `gate [E, Dff, Din]` and `up [E, Dff, Din]` quantized.
    pub gate: Quantized,
    pub up: Quantized,
    /// `down [E, Din, Dff]` quantized (4, 6 or 8 bits).
    pub down: Quantized,
    pub n_experts: usize,
}

/// Seeded data for a gated block, as [`moe_inputs`]: the gate and up stacks at
/// `gate_up_bits`, the down stack at `down_bits`.
#[allow(clippy::too_many_arguments)]
pub fn gated_inputs(
    dtype: Dtype,
    din: usize,
    dff: usize,
    n_experts: usize,
    k: usize,
    gate_up_bits: u32,
    down_bits: u32,
    group_size: usize,
    seed: u64,
) -> GatedInputs {
    let m = moe_inputs(dtype, din, dff, n_experts, k, gate_up_bits, group_size, seed);
    let mut rng = NormalRng::new(seed ^ 0x5EED_6A7E);
    let s = 1.0 / (din as f64).sqrt();
    let up: Vec<f32> = (0..n_experts * dff * din).map(|_| (rng.next_normal() * s) as f32).collect();
    let down = dequantize(&m.w2);
    GatedInputs {
        x: m.x,
        idx: m.idx,
        scores: m.scores,
        gate: m.w1,
        up: quantize(dtype, &up, n_experts * dff, din, gate_up_bits, group_size),
        down: quantize(dtype, &down, n_experts * din, dff, down_bits, group_size),
        n_experts,
    }
}

/// Test inputs for the routed experts.
#[derive(Clone, Debug)]
pub struct MoeInputs {
    /// `x [Din]`, T values.
    pub x: Vec<f32>,
    /// `idx [K]`: distinct expert ids < E.
    pub idx: Vec<u32>,
    /// `scores [K]`, f32 router weights (positive, summing to about 1).
    pub scores: Vec<f32>,
    /// `w1 [E, Dff, Din]` quantized.
    pub w1: Quantized,
    /// `w2 [E, Din, Dff]` quantized.
    pub w2: Quantized,
    /// Number of experts E.
    pub n_experts: usize,
}

/// Seeded test data for section 4: x ~ N(0, 1) and weights ~ N(0, 1)/sqrt(fan-in) (f32,
/// quantized with [`quantize`], scales/biases in `dtype`), K distinct random experts, random
/// positive scores normalized to sum 1 (in f32).
pub fn moe_inputs(
    dtype: Dtype,
    din: usize,
    dff: usize,
    n_experts: usize,
    k: usize,
    bits: u32,
    group_size: usize,
    seed: u64,
) -> MoeInputs {
    assert!(k <= n_experts, "K must be <= E");
    let mut rng = NormalRng::new(seed);
    let x: Vec<f32> = (0..din).map(|_| round(dtype, rng.next_normal() as f32)).collect();
    let s1 = 1.0 / (din as f64).sqrt();
    let w1: Vec<f32> = (0..n_experts * dff * din).map(|_| (rng.next_normal() * s1) as f32).collect();
    let s2 = 1.0 / (dff as f64).sqrt();
    let w2: Vec<f32> = (0..n_experts * din * dff).map(|_| (rng.next_normal() * s2) as f32).collect();
    let mut idx: Vec<u32> = Vec::with_capacity(k);
    while idx.len() < k {
        let e = rng.next_below(n_experts) as u32;
        if !idx.contains(&e) {
            idx.push(e);
        }
    }
    let raw: Vec<f32> = (0..k).map(|_| 0.1 + rng.next_uniform() as f32).collect();
    let total: f32 = raw.iter().sum();
    MoeInputs {
        x,
        idx,
        scores: raw.iter().map(|&s| s / total).collect(),
        w1: quantize(dtype, &w1, n_experts * dff, din, bits, group_size),
        w2: quantize(dtype, &w2, n_experts * din, dff, bits, group_size),
        n_experts,
    }
}

/// The router's logits, each summed in f64 and rounded once to f32:
/// `logits[t, e] = sum_i x[t, i] * wr[e, i]` for `m` tokens of `din` values and
/// `n_experts` router rows.
pub fn router_logits(x: &[f32], wr: &[f32], m: usize, n_experts: usize, din: usize) -> Vec<f32> {
    assert_eq!((x.len(), wr.len()), (m * din, n_experts * din), "router_logits: sizes");
    let mut logits = Vec::with_capacity(m * n_experts);
    for t in 0..m {
        let row = &x[t * din..(t + 1) * din];
        for e in 0..n_experts {
            let w = &wr[e * din..(e + 1) * din];
            logits.push(row.iter().zip(w).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() as f32);
        }
    }
    logits
}

/// The router's selection for each of `m` tokens, from f32 logits `[m, n_experts]`:
/// the softmax in f64; the `k` largest probabilities, larger first and the lower
/// expert on equal probabilities, NaN never chosen (then the id is `u32::MAX`
/// and the score NaN); the scores divided by their sum when `renorm`. Returns
/// `(ids, scores)`, each `[m, k]`.
pub fn topk(logits: &[f32], m: usize, n_experts: usize, k: usize, renorm: bool) -> (Vec<u32>, Vec<f32>) {
    assert_eq!(logits.len(), m * n_experts, "topk: logits size");
    let (mut ids, mut scores) = (Vec::with_capacity(m * k), Vec::with_capacity(m * k));
    for row in logits.chunks(n_experts) {
        let top = row.iter().copied().filter(|v| !v.is_nan()).fold(f32::NEG_INFINITY, f32::max) as f64;
        let exps: Vec<f64> = row.iter().map(|&v| (v as f64 - top).exp()).collect();
        let sum: f64 = exps.iter().sum();
        let p: Vec<f64> = exps.iter().map(|&v| v / sum).collect();
        let mut order: Vec<usize> = (0..n_experts).filter(|&e| !p[e].is_nan()).collect();
        order.sort_by(|&a, &b| p[b].total_cmp(&p[a]).then(a.cmp(&b)));
        let chosen: Vec<Option<usize>> = (0..k).map(|r| order.get(r).copied()).collect();
        let total: f64 = chosen.iter().map(|c| c.map_or(f64::NAN, |e| p[e])).sum();
        for c in chosen {
            ids.push(c.map_or(u32::MAX, |e| e as u32));
            let score = c.map_or(f64::NAN, |e| p[e]);
            scores.push((if renorm { score / total } else { score }) as f32);
        }
    }
    (ids, scores)
}

#[cfg(test)]
mod tests {
    use super::super::metrics::{nmax, nrms};
    use super::*;

    #[test]
    fn packing_layout() {
        // 4 bits: one row of 32 values 0..15, 15..0, group size 32: min 0, max 15, so scale 1,
        // bias 0 and q = w.
        let mut row: Vec<f32> = (0..16).map(|v| v as f32).collect();
        row.extend((0..16).rev().map(|v| v as f32));
        let q = quantize(Dtype::Bf16, &row, 1, 32, 4, 32);
        assert_eq!(q.scales, vec![1.0]);
        assert_eq!(q.biases, vec![0.0]);
        assert_eq!(q.words, vec![0x7654_3210, 0xFEDC_BA98, 0x89AB_CDEF, 0x0123_4567]);
        assert_eq!(q.code(0, 9), 9);
        assert_eq!(q.code(0, 17), 14);
        assert_eq!(dequantize(&q), row);
        // 8 bits: values 0..255 with gs 32 per group, checking two words by hand.
        let row: Vec<f32> = (0..64).map(|v| (v * 4) as f32 + 3.0).collect();
        let q = quantize(Dtype::F32, &row, 1, 64, 8, 32);
        // group 0: min 3, max 127: scale = 124/255; codes of 3, 7, 11, 15 are 0, 8, 16, 25 (rounded)
        let s = q.scales[0];
        let codes: Vec<u32> = (0..4).map(|c| (((c * 4) as f32) / s).round_ties_even() as u32).collect();
        assert_eq!(q.words[0], codes[0] | codes[1] << 8 | codes[2] << 16 | codes[3] << 24);
        assert_eq!(q.words.len(), 16);
        assert_eq!(q.words[15] >> 24, 255); // the group maximum gets the top code
    }

    /// MLX's 6-bit layout: four values in three bytes, `v0 = b0 & 63`, `v1 = b0 >> 6 | (b1 & 15) << 2`,
    /// `v2 = b1 >> 4 | (b2 & 3) << 4`, `v3 = b2 >> 2`; values that span two words read back.
    #[test]
    fn six_bit_packing() {
        let row: Vec<f32> = (0..64).map(|v| v as f32).collect();
        let q = quantize(Dtype::F32, &row, 1, 64, 6, 64);
        assert_eq!((q.scales[0], q.biases[0]), (1.0, 0.0));
        assert_eq!(q.words.len(), 12);
        let bytes: Vec<u8> = q.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for p in 0..16 {
            let (b0, b1, b2) = (bytes[3 * p] as u32, bytes[3 * p + 1] as u32, bytes[3 * p + 2] as u32);
            let v = [b0 & 63, b0 >> 6 | (b1 & 15) << 2, b1 >> 4 | (b2 & 3) << 4, b2 >> 2];
            assert_eq!(v, [4 * p as u32, 4 * p as u32 + 1, 4 * p as u32 + 2, 4 * p as u32 + 3], "pack {p}");
        }
        assert_eq!(dequantize(&q), row);
    }

    #[test]
    fn constant_group() {
        let q = quantize(Dtype::F16, &[0.5; 64], 1, 64, 4, 64);
        assert_eq!(q.scales, vec![1.0]);
        assert_eq!(q.biases, vec![0.5]);
        assert!(q.words.iter().all(|&w| w == 0));
        assert_eq!(dequantize(&q), vec![0.5; 64]);
    }

    /// |dequantize(quantize(w)) - w| <= R(scale)/2 + |R(bias) - min| + (2^bits-1)*|R(scale) - scale|
    /// (+ tiny f32 arithmetic slack) for every element.
    #[test]
    fn round_trip_error() {
        let (rows, cols) = (32, 256);
        for dtype in Dtype::ALL {
            for bits in [4, 6, 8] {
                for gs in [32, 64, 128] {
                    let mut rng = NormalRng::new(bits as u64 * 1000 + gs as u64);
                    let w: Vec<f32> = (0..rows * cols).map(|_| rng.next_normal() as f32 * 0.05).collect();
                    let q = quantize(dtype, &w, rows, cols, bits, gs);
                    let back = dequantize(&q);
                    let max_code = ((1u32 << bits) - 1) as f64;
                    for r in 0..rows {
                        for c in 0..cols {
                            let g = &w[r * cols + c / gs * gs..r * cols + (c / gs + 1) * gs];
                            let min = g.iter().fold(f32::INFINITY, |m, &v| m.min(v)) as f64;
                            let max = g.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
                            let scale = (max - min) / max_code;
                            let (st, bt) = q.scale_bias(r, c);
                            let bound = st as f64 / 2.0
                                + (bt as f64 - min).abs()
                                + max_code * (st as f64 - scale).abs()
                                + 1e-6 * (max.abs() + min.abs());
                            let err = (back[r * cols + c] as f64 - w[r * cols + c] as f64).abs();
                            assert!(err <= bound, "{} bits {bits} gs {gs} ({r},{c}): {err} > {bound}", dtype.name());
                        }
                    }
                }
            }
        }
    }

    /// Section 4's tolerance test at a reduced shape: routed (f32 accumulation) vs the dense
    /// reference, nRMS < 5e-4 and nMAX < 2e-2.
    #[test]
    fn routed_vs_dense() {
        for bits in [4, 8] {
            let m = moe_inputs(Dtype::Bf16, 512, 384, 16, 6, bits, 64, 77 + bits as u64);
            let got = routed(Dtype::Bf16, &m);
            let want = dense_f32_reference(Dtype::Bf16, &m);
            let (r, x) = (nrms(&got, &want), nmax(&got, &want));
            println!("moe bits {bits}: nrms {r:.3e} nmax {x:.3e}");
            assert!(r < 5e-4 && x < 2e-2, "bits {bits}: nrms {r:e} nmax {x:e}");
            assert!(got.iter().any(|&v| v != 0.0));
        }
    }

    /// The contract's negative control: a wave fold that starts at m = 8 only sums lanes 0..15, i.e.
    /// (lanes striding over packed words) only words with `p % 32 < 16`. Must fail (nrms ~0.76).
    #[test]
    fn negative_control_half_fold() {
        let m = moe_inputs(Dtype::Bf16, 512, 384, 16, 6, 4, 64, 81);
        let want = dense_f32_reference(Dtype::Bf16, &m);
        let vpw = m.w1.values_per_word();
        let lane_ok = |col: usize| (col / vpw) % 32 < 16;
        let (dff, din) = (m.w1.rows / m.n_experts, m.w1.cols);
        let mut out = vec![0.0f32; din];
        for (k, &e) in m.idx.iter().enumerate() {
            let e = e as usize;
            let act: Vec<f32> = (0..dff)
                .map(|f| {
                    let z: f32 = (0..din).filter(|&i| lane_ok(i)).map(|i| m.x[i] * m.w1.weight(e * dff + f, i)).sum();
                    z.max(0.0) * z.max(0.0)
                })
                .collect();
            for (h, o) in out.iter_mut().enumerate() {
                let z: f32 = (0..dff).filter(|&f| lane_ok(f)).map(|f| act[f] * m.w2.weight(e * din + h, f)).sum();
                *o += m.scores[k] * z;
            }
        }
        let r = nrms(&out, &want);
        println!("moe negative control (fold from 8): nrms {r:.3}");
        assert!(r > 0.5, "{r}");
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn bad_expert_index_refused() {
        let m = moe_inputs(Dtype::Bf16, 64, 64, 4, 2, 4, 32, 1);
        fc1_relu2(&m.x, &[0, 4], &m.w1, m.n_experts);
    }
}
