//! `moe_router_logits` and `moe_topk`: the router of the routed experts for one
//! to [`MAX_TOKENS`] tokens (docs/contracts.md, section 6.2). A tolerance
//! contract for the logits; the selection is exact given the logits.
//!
//! # `moe_router_logits`
//!
//! `logits[t, e] = sum_i x[t, i] * wr[e, i]` in f32. Wave `w` of workgroup `g`
//! takes the router row `e = g * WAVES + w` and all `m` tokens, so each row's
//! bytes are read once whatever `m` is. Lane `l` takes the chunks of
//! [`CHUNK`] values `l, l + 32, ...` in batches of [`BATCH`] per lane, every
//! load of a batch issued before its first use; each token's lane partial is a
//! chain of fmas in index order, and a wave sum ([`wave::wave_sum_f32`]) ends
//! the row. x is read from memory (a token's row is at most `Din` values, and
//! every wave reads it: it stays in the caches). Rows whose length or
//! addresses are not whole aligned chunks take single values instead.
//!
//! # `moe_topk`
//!
//! One wave per token. The softmax is MLX's precise one: `p_e = exp(l_e - max)
//! / sum`, the sum in f32 (each lane's terms in index order, then the wave
//! sum). Then `k` rounds, each choosing the largest `p` not yet chosen; equal
//! `p` go to the lower expert index, and a NaN `p` is never chosen. A NaN or
//! `+inf` logit (or only `-inf` ones) makes every `p` NaN: then every id is
//! `u32::MAX` (out of range, which the expert kernels report) and every score
//! NaN. With `renorm` the scores are divided
//! by their sum (in the order chosen), MLX's `norm_topk_prob`.
//!
//! Each lane keeps its own experts' `p` in workgroup memory and reads only
//! those, so the lanes never read what another wrote.

// Sums are spelled `acc = acc + v` (their order is the point).
#![allow(clippy::assign_op_pattern, clippy::too_many_arguments)]

use crate::num::math::mul_add;

use crate::geometry::WAVE_SIZE;
use crate::geometry::moe_router::{BATCH, CHUNK, MAX_TOKENS, WAVES};
use crate::num::{Elem, exp};
use crate::vector::Vector;
use crate::wave;

/// One aligned chunk of a row: [`CHUNK`] values (16 bytes of a 16-bit type).
type Chunk<T> = Vector<T, { CHUNK as usize }>;

/// `logits[t, e] = sum_i x[t, i] * wr[e, i]` (f32) for `t < m`, `e < n_experts`.
///
/// Launch: grid `ceil(n_experts / WAVES)` workgroups of `WAVES * 32` threads,
/// no workgroup memory; `1 <= m <= MAX_TOKENS`.
///
/// # Safety
/// `x` holds `m * din` values, `wr` `n_experts * din`, `logits` `m * n_experts`.
#[inline(always)]
pub unsafe fn moe_router_logits<T: Elem>(
    x: *const T,
    wr: *const T,
    logits: *mut f32,
    m: u32,
    n_experts: u32,
    din: u32,
) {
    let lane = wave::lane_id();
    let row = wave::workgroup_id_x() * WAVES + wave::wave_id();
    if row >= n_experts || m == 0 || m as usize > MAX_TOKENS {
        return;
    }
    let m = m as usize;
    let din = din as usize;
    let w_row = unsafe { wr.add(row as usize * din) };
    let mut acc = [0.0f32; MAX_TOKENS];
    let aligned = din.is_multiple_of(CHUNK as usize)
        && (wr as usize).is_multiple_of(align_of::<Chunk<T>>())
        && (x as usize).is_multiple_of(align_of::<Chunk<T>>());
    if aligned {
        let chunks = din / CHUNK as usize;
        let stride = WAVE_SIZE as usize * BATCH;
        let mut first = lane as usize;
        while first < chunks {
            // The batch's weight loads, all issued before any is used.
            let mut w = [Chunk::<T>::new([T::from_f32(0.0); CHUNK as usize]); BATCH];
            crate::unroll!(b in 0..BATCH, at most 4 => {
                let c = first + b * WAVE_SIZE as usize;
                if c < chunks {
                    w[b] = unsafe { *(w_row.add(c * CHUNK as usize) as *const Chunk<T>) };
                }
            });
            crate::unroll!(b in 0..BATCH, at most 4 => {
                let c = first + b * WAVE_SIZE as usize;
                if c < chunks {
                    crate::unroll!(t in 0..MAX_TOKENS, at most 8 => {
                        if t < m {
                            let xs = unsafe { *(x.add(t * din + c * CHUNK as usize) as *const Chunk<T>) };
                            for j in 0..CHUNK as usize {
                                acc[t] = mul_add(xs.0[j].to_f32(), w[b].0[j].to_f32(), acc[t]);
                            }
                        }
                    });
                }
            });
            first += stride;
        }
    } else {
        let mut i = lane as usize;
        while i < din {
            let wv = unsafe { *w_row.add(i) }.to_f32();
            crate::unroll!(t in 0..MAX_TOKENS, at most 8 => {
                if t < m {
                    acc[t] = mul_add(unsafe { *x.add(t * din + i) }.to_f32(), wv, acc[t]);
                }
            });
            i += WAVE_SIZE as usize;
        }
    }
    crate::unroll!(t in 0..MAX_TOKENS, at most 8 => {
        if t < m {
            let total = wave::wave_sum_f32(acc[t]);
            if lane == 0 {
                unsafe { *logits.add(t * n_experts as usize + row as usize) = total };
            }
        }
    });
}

/// The better of two candidates `(p, expert)`: the larger `p`, then the lower
/// expert; a candidate whose expert is `u32::MAX` is none.
#[inline(always)]
fn better(a: (f32, u32), b: (f32, u32)) -> (f32, u32) {
    let b_wins = b.1 != u32::MAX && (a.1 == u32::MAX || b.0 > a.0 || (b.0 == a.0 && b.1 < a.1));
    if b_wins { b } else { a }
}

/// [`better`] over the 32 lanes (a xor butterfly): every lane ends with the
/// wave's best candidate.
#[inline(always)]
fn wave_best(c: (f32, u32)) -> (f32, u32) {
    let mut c = c;
    crate::unroll!(s, const MASK_LOG in 0..5 => {
        let _ = s;
        let other = (wave::shfl_xor_f32::<{ 16 >> MASK_LOG }>(c.0), wave::shfl_xor_u32::<{ 16 >> MASK_LOG }>(c.1));
        c = better(c, other);
    });
    c
}

/// The largest of the lanes' `v` (every lane ends with it); NaN is skipped.
#[inline(always)]
fn wave_max(v: f32) -> f32 {
    let mut v = v;
    crate::unroll!(s, const MASK_LOG in 0..5 => {
        let _ = s;
        let other = wave::shfl_xor_f32::<{ 16 >> MASK_LOG }>(v);
        if other > v {
            v = other;
        }
    });
    v
}

/// For each token `t < m` (workgroup `t`): the softmax of `logits[t, :]`, the
/// `k` experts of largest probability in `ids[t, :]` (larger first, the lower
/// index on equal probabilities) and their probabilities in `scores[t, :]`,
/// divided by their sum when `renorm` is not 0.
///
/// Launch: grid `m` workgroups of 32 threads (one wave) and `4 * n_experts`
/// bytes of workgroup memory; `n_experts <= MAX_EXPERTS`, `1 <= k <= MAX_TOPK`,
/// `k <= n_experts`.
///
/// # Safety
/// `logits` holds `m * n_experts` values, `ids` and `scores` `m * k`.
#[inline(always)]
pub unsafe fn moe_topk(
    logits: *const f32,
    ids: *mut u32,
    scores: *mut f32,
    m: u32,
    n_experts: u32,
    k: u32,
    renorm: u32,
) {
    let lane = wave::lane_id();
    let t = wave::workgroup_id_x();
    if t >= m {
        return;
    }
    let e = n_experts as usize;
    let row = unsafe { logits.add(t as usize * e) };
    let ids = unsafe { ids.add((t * k) as usize) };
    let scores = unsafe { scores.add((t * k) as usize) };
    let p = wave::workgroup_mem::<f32>();

    // The row's maximum (NaN skipped: a NaN logit makes the sum, and so every
    // probability, NaN).
    let mut top = f32::NEG_INFINITY;
    let mut j = lane as usize;
    while j < e {
        let v = unsafe { *row.add(j) };
        if v > top {
            top = v;
        }
        j += WAVE_SIZE as usize;
    }
    let top = wave_max(top);

    // exp(l - max) for this lane's experts, their sum, then the probabilities.
    let mut lane_sum = 0.0f32;
    let mut j = lane as usize;
    while j < e {
        let v = exp(unsafe { *row.add(j) } - top);
        unsafe { *p.add(j) = v };
        lane_sum = lane_sum + v;
        j += WAVE_SIZE as usize;
    }
    let sum = wave::wave_sum_f32(lane_sum);
    let mut j = lane as usize;
    while j < e {
        unsafe { *p.add(j) = *p.add(j) / sum };
        j += WAVE_SIZE as usize;
    }

    // This lane's chosen experts: bit i for expert lane + 32 i.
    let mut chosen = 0u32;
    let mut chosen_sum = 0.0f32;
    let mut r = 0u32;
    while r < k {
        let mut best = (0.0f32, u32::MAX);
        let mut j = lane as usize;
        let mut i = 0;
        while j < e {
            let pj = unsafe { *p.add(j) };
            if chosen & (1 << i) == 0 && !pj.is_nan() {
                best = better(best, (pj, j as u32));
            }
            j += WAVE_SIZE as usize;
            i += 1;
        }
        let (score, expert) = wave_best(best);
        let score = if expert == u32::MAX { f32::NAN } else { score };
        if expert != u32::MAX && expert % WAVE_SIZE == lane {
            chosen |= 1 << (expert / WAVE_SIZE);
        }
        if lane == 0 {
            unsafe {
                *ids.add(r as usize) = expert;
                *scores.add(r as usize) = score;
            }
        }
        chosen_sum = chosen_sum + score;
        r += 1;
    }
    if renorm != 0 && lane == 0 {
        let mut r = 0;
        while r < k as usize {
            unsafe { *scores.add(r) = *scores.add(r) / chosen_sum };
            r += 1;
        }
    }
}
