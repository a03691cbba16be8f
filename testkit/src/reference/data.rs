//! Test data generators.
//!
//! - docs/contracts.md, section 3 (`xielu`): the consumer's Knuth MMIX LCG and the xIELU acceptance
//!   inputs (26 edge values, the 2048-value ramp, 16384 LCG values).
//! - docs/contracts.md, section 5 (`mamba1_scan`): the per-field generator and its field table.
//! - docs/contracts.md, sections 4 and 6: a seeded normal generator (Box-Muller on splitmix64) for
//!   the add3 + LayerNorm data and the MoE weights, plus the ten add3 cases of section 4.
//!
//! Reading of the generators (documented choice): the LCG is **stepped first, then the value is taken**
//! from the new state, for every value including the first. This follows the order in which both
//! sections write it ("state = ..., value ..."; section 3: "state = seed*K + 1, then per element
//! the MMIX step"). Values are computed in f64 exactly as written, then rounded once to f32.

use super::{Dtype, round};

/// Knuth MMIX multiplier.
pub const MMIX_MUL: u64 = 6364136223846793005;
/// Knuth MMIX increment.
pub const MMIX_INC: u64 = 1442695040888963407;
/// First seed of the consumer's xIELU LCG (section 1).
pub const XIELU_LCG_SEED: u64 = 0x2069;

/// One MMIX step: `state * 6364136223846793005 + 1442695040888963407` (wrapping u64).
pub fn mmix_step(state: u64) -> u64 {
    state.wrapping_mul(MMIX_MUL).wrapping_add(MMIX_INC)
}

/// The top 24 bits of `state` as a uniform f64 in [0, 1): `(state >> 40) / 2^24` (exact).
pub fn unit_from_state(state: u64) -> f64 {
    (state >> 40) as f64 / 16777216.0
}

/// Section 1's LCG: `n` values in [-12, 12) from `seed`. Each value: step the state, then
/// `((state >> 40) as f64 / 2^24) * 24 - 12` in f64, rounded to f32.
pub fn lcg_uniform(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        state = mmix_step(state); // step then take
        out.push((unit_from_state(state) * 24.0 - 12.0) as f32);
    }
    out
}

/// Magnitudes of the 26 xIELU edge values (each used with both signs).
pub const XIELU_EDGE_MAGNITUDES: [f32; 13] = [0.0, 1e-7, 5e-7, 1e-6, 2e-6, 1e-4, 1e-3, 0.5, 1.0, 2.5, 8.0, 42.0, 90.0];

/// The 26 xIELU edge values: for each magnitude `m` in order, `+m` then `-m` (so +0.0, -0.0, ...).
pub fn xielu_edge_values() -> Vec<f32> {
    let mut out = Vec::with_capacity(26);
    for m in XIELU_EDGE_MAGNITUDES {
        out.push(m);
        out.push(-m);
    }
    out
}

/// The 2048-value ramp `(k - 1024) * 0.05` for k in 0..2048, computed in f32 as
/// `(k as f32 - 1024.0) * 0.05f32` (one f32 multiply by the f32 constant 0.05).
pub fn xielu_ramp() -> Vec<f32> {
    (0..2048).map(|k| (k as f32 - 1024.0) * 0.05f32).collect()
}

/// All xIELU acceptance inputs of section 1, rounded to `dtype` (`R()` of the f32 values):
/// 26 edge values, then the 2048 ramp values, then 16384 LCG values from seed 0x2069.
/// 18458 values in total.
pub fn xielu_acceptance_inputs(dtype: Dtype) -> Vec<f32> {
    let mut v = xielu_edge_values();
    v.extend(xielu_ramp());
    v.extend(lcg_uniform(XIELU_LCG_SEED, 16384));
    v.iter().map(|&e| round(dtype, e)).collect()
}

/// One row of section 3's field table: seed, scale, offset.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MambaField {
    /// Generator seed.
    pub seed: u64,
    /// Multiplies the uniform value in [-1, 1).
    pub scale: f64,
    /// Added after scaling.
    pub offset: f64,
}

/// Field `x`: (1, 1, 0).
pub const MAMBA_X: MambaField = MambaField { seed: 1, scale: 1.0, offset: 0.0 };
/// Field `dt`: (2, 0.25, 0.3).
pub const MAMBA_DT: MambaField = MambaField { seed: 2, scale: 0.25, offset: 0.3 };
/// Field `B`: (3, 1, 0).
pub const MAMBA_B: MambaField = MambaField { seed: 3, scale: 1.0, offset: 0.0 };
/// Field `C`: (4, 1, 0).
pub const MAMBA_C: MambaField = MambaField { seed: 4, scale: 1.0, offset: 0.0 };
/// Field `A`: (5, 0.5, -1).
pub const MAMBA_A: MambaField = MambaField { seed: 5, scale: 0.5, offset: -1.0 };
/// Field `Dskip`: (6, 1, 0).
pub const MAMBA_DSKIP: MambaField = MambaField { seed: 6, scale: 1.0, offset: 0.0 };
/// Field `state` (carried state): (7, 0.5, 0).
pub const MAMBA_STATE: MambaField = MambaField { seed: 7, scale: 0.5, offset: 0.0 };

/// Section 3's generator: `state = seed * 0x9E3779B97F4A7C15 + 1` (wrapping), then per element
/// one MMIX step followed by `(((state >> 40) / 2^24) * 2 - 1) * scale + offset` in f64,
/// rounded to f32. Returns `n` f32 values (not rounded to any storage dtype).
pub fn mamba_field(field: MambaField, n: usize) -> Vec<f32> {
    let mut state = field.seed.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(1);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        state = mmix_step(state); // step then take
        let v = (unit_from_state(state) * 2.0 - 1.0) * field.scale + field.offset;
        out.push(v as f32);
    }
    out
}

/// A small seeded generator of normal deviates: splitmix64 for uniform bits, Box-Muller for the
/// normal transform (both outputs of each pair are used).
#[derive(Clone, Debug)]
pub struct NormalRng {
    state: u64,
    spare: Option<f64>,
}

impl NormalRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        NormalRng { state: seed, spare: None }
    }

    /// Next 64 uniform bits (splitmix64).
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }

    /// Uniform f64 in [0, 1) with 53 random bits.
    pub fn next_uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9007199254740992.0)
    }

    /// A standard normal deviate (mean 0, variance 1), Box-Muller.
    pub fn next_normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let u1 = 1.0 - self.next_uniform(); // in (0, 1]: ln(u1) is finite
        let u2 = self.next_uniform();
        let radius = (-2.0 * u1.ln()).sqrt();
        let angle = 2.0 * std::f64::consts::PI * u2;
        self.spare = Some(radius * angle.sin());
        radius * angle.cos()
    }

    /// An index uniform in [0, n) (tiny modulo bias is irrelevant for test data).
    pub fn next_below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `n` seeded normal values: an f32 standard normal times `scale` (f32 multiply), cast to `dtype`.
/// This is the data recipe of section 2 ("seeded normal f32 values times a scale, cast to T").
pub fn normal(dtype: Dtype, seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut rng = NormalRng::new(seed);
    (0..n).map(|_| round(dtype, (rng.next_normal() as f32) * scale)).collect()
}

/// One of section 2's ten acceptance cases of `add3_layer_norm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Add3Case {
    /// Storage dtype.
    pub dtype: Dtype,
    /// Last dimension D.
    pub d: usize,
    /// Number of rows.
    pub rows: usize,
    /// Whether a bias is given.
    pub bias: bool,
}

/// Section 2's ten cases, in the order of the table.
pub const ADD3_CASES: [Add3Case; 10] = [
    Add3Case { dtype: Dtype::F16, d: 4096, rows: 1, bias: false },
    Add3Case { dtype: Dtype::F16, d: 4096, rows: 5, bias: false },
    Add3Case { dtype: Dtype::F16, d: 4100, rows: 3, bias: true },
    Add3Case { dtype: Dtype::Bf16, d: 4096, rows: 2, bias: true },
    Add3Case { dtype: Dtype::F16, d: 96, rows: 4, bias: false },
    Add3Case { dtype: Dtype::F32, d: 4096, rows: 2, bias: true },
    Add3Case { dtype: Dtype::F32, d: 1025, rows: 3, bias: false },
    Add3Case { dtype: Dtype::Bf16, d: 6656, rows: 2, bias: true },
    Add3Case { dtype: Dtype::F16, d: 6656, rows: 1, bias: false },
    Add3Case { dtype: Dtype::Bf16, d: 5, rows: 2, bias: false },
];

/// Inputs of one add3 + LayerNorm call, values already cast to the dtype.
#[derive(Clone, Debug)]
pub struct Add3Inputs {
    /// `a [rows, D]` (scale 1.0).
    pub a: Vec<f32>,
    /// `b [rows, D]` (scale 1.0).
    pub b: Vec<f32>,
    /// `x [rows, D]` (scale 4.0).
    pub x: Vec<f32>,
    /// `w [D]` (scale 0.5).
    pub w: Vec<f32>,
    /// Optional `bias [D]` (scale 0.1).
    pub bias: Option<Vec<f32>>,
}

/// Section 2's test data: seeded normals with scales a 1.0, b 1.0, x 4.0, w 0.5, bias 0.1, cast
/// to `dtype`. Each tensor uses its own stream, seeded `seed + 0..4`. (The consumer's own seeds
/// are not specified; any seed exercises the same bit-exact model.)
pub fn add3_inputs(dtype: Dtype, rows: usize, d: usize, with_bias: bool, seed: u64) -> Add3Inputs {
    Add3Inputs {
        a: normal(dtype, seed, rows * d, 1.0),
        b: normal(dtype, seed + 1, rows * d, 1.0),
        x: normal(dtype, seed + 2, rows * d, 4.0),
        w: normal(dtype, seed + 3, d, 0.5),
        bias: with_bias.then(|| normal(dtype, seed + 4, d, 0.1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_abs_diff_eq;

    #[test]
    fn lcg_is_step_then_take() {
        let v = lcg_uniform(XIELU_LCG_SEED, 3);
        let s1 = mmix_step(0x2069);
        let s2 = mmix_step(s1);
        assert_eq!(v[0], (((s1 >> 40) as f64 / 16777216.0) * 24.0 - 12.0) as f32);
        assert_eq!(v[1], (((s2 >> 40) as f64 / 16777216.0) * 24.0 - 12.0) as f32);
        // Range [-12, 12).
        for x in lcg_uniform(XIELU_LCG_SEED, 16384) {
            assert!((-12.0..12.0).contains(&x), "{x}");
        }
    }

    #[test]
    fn acceptance_inputs_layout() {
        let v = xielu_acceptance_inputs(Dtype::F32);
        assert_eq!(v.len(), 26 + 2048 + 16384);
        assert_eq!(v[0].to_bits(), 0.0f32.to_bits());
        assert_eq!(v[1].to_bits(), (-0.0f32).to_bits());
        assert_eq!(v[24], 90.0);
        assert_eq!(v[25], -90.0);
        assert_eq!(v[26], -51.2); // k = 0: -1024 * 0.05 in f32
        assert_eq!(v[26 + 1024], 0.0);
        assert_eq!(v[26 + 1025], 0.05);
        assert_eq!(v[26 + 2047], 1023.0 * 0.05f32);
        let b = xielu_acceptance_inputs(Dtype::Bf16);
        assert!(b.iter().zip(&v).all(|(&r, &e)| r == round(Dtype::Bf16, e)));
    }

    #[test]
    fn mamba_field_ranges() {
        let n = 4096;
        for (f, lo, hi) in
            [(MAMBA_X, -1.0, 1.0), (MAMBA_DT, 0.05, 0.55), (MAMBA_A, -1.5, -0.5), (MAMBA_STATE, -0.5, 0.5)]
        {
            let v = mamba_field(f, n);
            assert!(v.iter().all(|&e| e >= lo && e <= hi), "{f:?}");
            let mean = v.iter().map(|&e| e as f64).sum::<f64>() / n as f64;
            assert_abs_diff_eq!(mean, (lo + hi) as f64 / 2.0, epsilon = 0.05 * (hi - lo) as f64);
        }
        // First value: seed*K + 1, one step, take.
        let s = mmix_step(1u64.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(1));
        assert_eq!(mamba_field(MAMBA_X, 1)[0], (unit_from_state(s) * 2.0 - 1.0) as f32);
    }

    #[test]
    fn normal_moments() {
        let v = normal(Dtype::F32, 42, 100_000, 1.0);
        let mean = v.iter().map(|&e| e as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&e| (e as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert_abs_diff_eq!(mean, 0.0, epsilon = 0.02);
        assert_abs_diff_eq!(var, 1.0, epsilon = 0.02);
        assert_eq!(normal(Dtype::F32, 42, 10, 1.0), normal(Dtype::F32, 42, 10, 1.0));
        assert_ne!(normal(Dtype::F32, 42, 10, 1.0), normal(Dtype::F32, 43, 10, 1.0));
    }
}
