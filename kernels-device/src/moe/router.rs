//! `moe_router_logits` and `moe_topk`: the router of the routed experts for one
//! to [`MAX_TOKENS`] tokens (docs/contracts.md, section 6.2). A tolerance
//! contract for the logits; the selection is exact given the logits.
//!
//! # `moe_router_logits`
//!
//! `logits[t, e] = sum_i x[t, i] * wr[e, i]` in f32. Workgroup `e` takes the
//! router row `e` and all `m` tokens, so each row's bytes are read once whatever
//! `m` is; its [`WAVES_PER_ROW`] waves share the row. Lane `l` of wave `w`, the
//! workgroup's lane `g = 32 w + l`, takes the chunks of [`CHUNK`] values `g, g +
//! 32 * WAVES_PER_ROW, ...` in batches ([`batch`]: fewer chunks the more tokens), every weight
//! and token load of a batch issued before the first is used (the kernel is
//! instantiated per token count, so no load is guarded by `m`). Each token's lane
//! partial is a chain of fmas in index order; a wave sum
//! ([`wave::wave_sum_f32`]) gives each wave's, and wave 0 adds the waves' sums in
//! wave order (through workgroup memory). x is read from memory (a token's row
//! is at most `Din` values, and every workgroup reads it: it stays in the
//! caches). Rows whose length or addresses are not whole aligned chunks take
//! single values `g, g + 32 * WAVES_PER_ROW, ...` instead.
//!
//! # `moe_topk`
//!
//! One wave per token. The softmax is MLX's precise one: `p_e = exp(l_e - max)
//! / sum`, the sum in f32 (each lane's terms in index order, then the wave
//! sum). Then `k` rounds, each choosing the largest `p` not yet chosen; equal
//! `p` go to the lower expert index. A NaN or `+inf` logit (or only `-inf`
//! ones) makes every `p` NaN: then every id is `u32::MAX` (out of range, which
//! the expert kernels report) and every score NaN. With `renorm` the scores are
//! divided by their sum (in the order chosen), MLX's `norm_topk_prob`. Lane `r`
//! keeps round `r`'s expert and score, and the first `k` lanes store them at
//! the end; with a shared expert (Qwen3-Next) lane `k` stores its slot after
//! them: id `n_experts`, score the sigmoid of the gate logit that
//! `moe_router_logits` computed as one more row.
//!
//! Lane `l` holds its experts `l + 32 i` in registers, [`TOPK_GROUP`] a group
//! ([`topk_groups`]: the kernel is instantiated per group count), all its
//! loads issued before the first is used. A round is one wave maximum of one
//! integer per lane ([`candidate`]: the probability's bits above the expert's
//! complement, so the maximum is the larger `p`, then the lower expert), after
//! which only the lane that owned the winner looks for its next best. No round
//! reads memory.

// Sums are spelled `acc = acc + v` (their order is the point).
#![allow(clippy::assign_op_pattern, clippy::too_many_arguments)]

use crate::num::math::mul_add;

use crate::geometry::WAVE_SIZE;
use crate::geometry::moe_router::{
    CHUNK, MAX_BATCH, MAX_EXPERTS, MAX_TOKENS, MAX_TOPK, TOPK_GROUP, WAVES_PER_ROW, batch, topk_groups,
};
use crate::num::{Elem, exp};
use crate::vector::Vector;
use crate::wave;

/// One aligned chunk of a row: [`CHUNK`] values (16 bytes of a 16-bit type).
type Chunk<T> = Vector<T, { CHUNK as usize }>;

/// Workgroup 0 zeroes `arrivals[..n_arrivals]` (nothing when null): the
/// counts of the block's `moe_down_combine` launch, which runs after the
/// router on the same stream, so the caller's scratch needs no clearing launch.
///
/// # Safety
/// `arrivals` null or `n_arrivals` u32 that nothing else touches during the launch.
#[inline(always)]
unsafe fn zero_arrivals(arrivals: *mut u32, n_arrivals: u32) {
    if arrivals.is_null() || wave::workgroup_id_x() != 0 {
        return;
    }
    let mut i = wave::thread_id();
    while i < n_arrivals {
        unsafe { arrivals.add(i as usize).write(0) };
        i += WAVES_PER_ROW * WAVE_SIZE;
    }
}

/// `logits[t, e] = sum_i x[t, i] * wr[e, i]` (f32) for `t < m`, `e < n_experts`,
/// and, when `ws` and `gate_logits` are not null, the shared expert's gate
/// `gate_logits[t] = sum_i x[t, i] * ws[i]` by one more workgroup
/// ([`Rows`]).
///
/// Launch: grid `n_experts` (plus one with the shared gate) workgroups (one a
/// row) of `WAVES_PER_ROW * 32` threads and `LOGITS_WORKGROUP_MEM_BYTES` of
/// workgroup memory (`geometry::moe_router`); `1 <= m <= MAX_TOKENS`.
///
/// # Safety
/// `x` holds `m * din` values, `wr` `n_experts * din`, `logits` `m *
/// n_experts`; `ws` null or `din` values, `gate_logits` null or `m`;
/// `arrivals` as [`zero_arrivals`] takes it.
#[inline(always)]
pub unsafe fn moe_router_logits<T: Elem>(
    x: *const T,
    wr: *const T,
    ws: *const T,
    logits: *mut f32,
    gate_logits: *mut f32,
    m: u32,
    n_experts: u32,
    din: u32,
    arrivals: *mut u32,
    n_arrivals: u32,
) {
    unsafe { zero_arrivals(arrivals, n_arrivals) };
    // Uniform over the workgroup: either every wave returns here or none does.
    let Some(out) = Rows::of_this_workgroup(logits, gate_logits, !ws.is_null(), n_experts) else { return };
    if m == 0 || m as usize > MAX_TOKENS {
        return;
    }
    let row = wave::workgroup_id_x();
    let w_row = if out.shared { ws } else { unsafe { wr.add(row as usize * din as usize) } };
    let acc = match m {
        1 => unsafe { row_part::<T, 1>(x, w_row, din as usize) },
        2 => unsafe { row_part::<T, 2>(x, w_row, din as usize) },
        3 => unsafe { row_part::<T, 3>(x, w_row, din as usize) },
        4 => unsafe { row_part::<T, 4>(x, w_row, din as usize) },
        5 => unsafe { row_part::<T, 5>(x, w_row, din as usize) },
        6 => unsafe { row_part::<T, 6>(x, w_row, din as usize) },
        7 => unsafe { row_part::<T, 7>(x, w_row, din as usize) },
        _ => unsafe { row_part::<T, 8>(x, w_row, din as usize) },
    };
    unsafe { store_row(acc, out.first, out.stride, m) };
}

/// Where a router workgroup's row goes: row `e < n_experts` to `logits[t,
/// e]`, and the shared expert's gate (workgroup `n_experts`, when the
/// launch has one) to `gate_logits[t]`.
#[derive(Clone, Copy)]
struct Rows {
    /// The row's value of token 0.
    first: *mut f32,
    /// Values between one token's and the next's.
    stride: usize,
    /// The row is the shared expert's gate.
    shared: bool,
}

impl Rows {
    /// This workgroup's row, or `None` past the last (the shared gate's row
    /// exists when `shared_gate` and `gate_logits` is not null).
    #[inline(always)]
    fn of_this_workgroup(logits: *mut f32, gate_logits: *mut f32, shared_gate: bool, n_experts: u32) -> Option<Rows> {
        let row = wave::workgroup_id_x();
        if row < n_experts {
            Some(Rows { first: unsafe { logits.add(row as usize) }, stride: n_experts as usize, shared: false })
        } else if row == n_experts && shared_gate && !gate_logits.is_null() {
            Some(Rows { first: gate_logits, stride: 1, shared: true })
        } else {
            None
        }
    }
}

/// `first[t * stride]` for `t < m` from each lane's partial sums `acc`: each
/// wave's sums, then the row's, the waves' sums in wave order (through
/// workgroup memory). Every thread of the workgroup calls it.
///
/// # Safety
/// `first` holds `(m - 1) * stride + 1` values.
#[inline(always)]
unsafe fn store_row(acc: [f32; MAX_TOKENS], first: *mut f32, stride: usize, m: u32) {
    let sums = wave::workgroup_mem::<f32>();
    let lane = wave::lane_id();
    let w = wave::wave_id() as usize;
    crate::unroll!(t in 0..MAX_TOKENS, at most 8 => {
        if t < m as usize {
            let s = wave::wave_sum_f32(acc[t]);
            if lane == 0 {
                unsafe { *sums.add(w * MAX_TOKENS + t) = s };
            }
        }
    });
    wave::barrier();
    if w == 0 && lane < m {
        let t = lane as usize;
        let mut total = unsafe { *sums.add(t) };
        let mut v = 1;
        while v < WAVES_PER_ROW as usize {
            total = total + unsafe { *sums.add(v * MAX_TOKENS + t) };
            v += 1;
        }
        unsafe { *first.add(t * stride) = total };
    }
}

/// One 16-byte load of a quantized router row: 32 codes at 4 bits, 16 at 8.
type Quad = Vector<u32, 4>;

/// `logits[t, e] = sum_i x[t, i] * (s[e, g] * q[e, i] + b[e, g])` (f32) for
/// `t < m`, `e < n_experts`, `g = i / group_size`: the router quantized as MLX
/// quantizes a linear layer (affine, `bits` 4 or 8, codes packed from the low
/// bits of each word; mlx-lm quantizes Qwen3 MoE's `mlp.gate` at 8 bits, group
/// 64). Workgroup `e` takes row `e` and all `m` tokens, as
/// [`moe_router_logits`]; lane `g` of the row takes the 16-byte quads `g, g +
/// 32 * WAVES_PER_ROW, ...`. For each quad and token, `dot = sum_j x_j q_j` (an
/// fma chain in value order) and `sx = sum_j x_j`, then `acc = fma(s, dot, acc)`
/// and `acc = fma(b, sx, acc)`; the lanes' sums as [`moe_router_logits`].
///
/// With `wsq`, `ssq`, `bsq` and `gate_logits` not null, one more workgroup
/// takes the shared expert's gate, a row quantized the same way, into
/// `gate_logits[t]`, as [`moe_router_logits`] does.
///
/// Launch: as [`moe_router_logits`]; `group_size` 32, 64 or 128, `din` a
/// multiple of it (the host checks; the kernel returns without touching memory
/// otherwise). Codes 16-byte aligned are read a quad at a time, others (MLX's
/// CPU allocator hands out buffers 8 bytes past 16) four words at a time, in
/// the same order, so that both give the same sums.
///
/// # Safety
/// `x` holds `m * din` values, `wq` `n_experts * din * bits / 32` words, `sq`
/// and `bq` `n_experts * din / group_size` values, `logits` `m * n_experts`;
/// `wsq` null or `din * bits / 32` words, `ssq` and `bsq` null or `din /
/// group_size` values, `gate_logits` null or `m` values; `arrivals` as
/// [`zero_arrivals`] takes it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_router_logits_q<T: Elem>(
    x: *const T,
    wq: *const u32,
    sq: *const T,
    bq: *const T,
    wsq: *const u32,
    ssq: *const T,
    bsq: *const T,
    logits: *mut f32,
    gate_logits: *mut f32,
    m: u32,
    n_experts: u32,
    din: u32,
    bits: u32,
    group_size: u32,
    arrivals: *mut u32,
    n_arrivals: u32,
) {
    unsafe { zero_arrivals(arrivals, n_arrivals) };
    let group_shift = match group_size {
        32 => 5,
        64 => 6,
        128 => 7,
        _ => return,
    };
    let shared_gate = !(wsq.is_null() || ssq.is_null() || bsq.is_null());
    // Uniform over the workgroup: either every wave returns here or none does.
    let Some(out) = Rows::of_this_workgroup(logits, gate_logits, shared_gate, n_experts) else { return };
    if m == 0 || m as usize > MAX_TOKENS || !(bits == 4 || bits == 8) || !din.is_multiple_of(group_size) {
        return;
    }
    let row = wave::workgroup_id_x() as usize;
    let (row_words, row_groups) = (din as usize * bits as usize / 32, (din >> group_shift) as usize);
    let (w, s, b) = if out.shared {
        (wsq, ssq, bsq)
    } else {
        unsafe { (wq.add(row * row_words), sq.add(row * row_groups), bq.add(row * row_groups)) }
    };
    // A row is a whole number of quads (din is a multiple of 32), so a row of
    // `wq` is aligned if `wq` is.
    let wide = (w as usize).is_multiple_of(align_of::<Quad>());
    let q = QuantRow { x, w, wide, s, b, din: din as usize, group_shift };
    let acc = if bits == 4 { unsafe { q.by_tokens::<4>(m) } } else { unsafe { q.by_tokens::<8>(m) } };
    unsafe { store_row(acc, out.first, out.stride, m) };
}

/// One quantized router row and the tokens, for [`moe_router_logits_q`].
#[derive(Clone, Copy)]
struct QuantRow<T> {
    x: *const T,
    w: *const u32,
    /// `w` is 16-byte aligned: one load a quad.
    wide: bool,
    s: *const T,
    b: *const T,
    din: usize,
    group_shift: u32,
}

impl<T: Elem> QuantRow<T> {
    /// [`Self::part`] for `m` tokens (an instance per count, so no load is
    /// guarded by `m`).
    #[inline(always)]
    unsafe fn by_tokens<const BITS: u32>(self, m: u32) -> [f32; MAX_TOKENS] {
        unsafe {
            match m {
                1 => self.part::<BITS, 1>(),
                2 => self.part::<BITS, 2>(),
                3 => self.part::<BITS, 3>(),
                4 => self.part::<BITS, 4>(),
                5 => self.part::<BITS, 5>(),
                6 => self.part::<BITS, 6>(),
                7 => self.part::<BITS, 7>(),
                _ => self.part::<BITS, 8>(),
            }
        }
    }

    /// Quad `qd` of the row: one 16-byte load when the codes are aligned to it,
    /// else four word loads.
    #[inline(always)]
    unsafe fn quad(self, qd: usize) -> Quad {
        let p = unsafe { self.w.add(qd * 4) };
        if self.wide {
            unsafe { *(p as *const Quad) }
        } else {
            unsafe { Quad::new([*p, *p.add(1), *p.add(2), *p.add(3)]) }
        }
    }

    /// This lane's partial sums of `M` tokens against the row (see
    /// [`moe_router_logits_q`]); entries `t >= M` are 0.
    #[inline(always)]
    unsafe fn part<const BITS: u32, const M: usize>(self) -> [f32; MAX_TOKENS] {
        const LANES: usize = (WAVES_PER_ROW * WAVE_SIZE) as usize;
        let per_quad = (128 / BITS) as usize;
        let quads = self.din / per_quad;
        let aligned = (self.x as usize).is_multiple_of(align_of::<Chunk<T>>());
        let mut acc = [0.0f32; MAX_TOKENS];
        let mut qd = (wave::wave_id() * WAVE_SIZE + wave::lane_id()) as usize;
        while qd < quads {
            let w = unsafe { self.quad(qd) };
            let g = (qd * per_quad) >> self.group_shift;
            let (s, b) = unsafe { ((*self.s.add(g)).to_f32(), (*self.b.add(g)).to_f32()) };
            crate::unroll!(t in 0..M, at most 8 => {
                let xs = unsafe { self.x.add(t * self.din + qd * per_quad) };
                let (mut dot, mut sx) = (0.0f32, 0.0f32);
                // Unrolled, so that every code's word and shift are constants
                // (a runtime index into the quad put it on a stack on nvptx).
                crate::unroll!(ci in 0..4 => {
                    let c = ci * CHUNK as usize;
                    if c < per_quad {
                        let v = unsafe { x_chunk(xs.add(c), aligned) };
                        for (j, &xv) in v.iter().enumerate() {
                            dot = mul_add(xv, code::<BITS>(w, c + j), dot);
                            sx = sx + xv;
                        }
                    }
                });
                acc[t] = mul_add(s, dot, acc[t]);
                acc[t] = mul_add(b, sx, acc[t]);
            });
            qd += LANES;
        }
        acc
    }
}

/// [`CHUNK`] values from `p` widened to f32: one load when `aligned` (to a
/// [`Chunk`]), else one a value.
#[inline(always)]
unsafe fn x_chunk<T: Elem>(p: *const T, aligned: bool) -> [f32; CHUNK as usize] {
    let mut v = [0.0f32; CHUNK as usize];
    if aligned {
        let c = unsafe { *(p as *const Chunk<T>) };
        for j in 0..CHUNK as usize {
            v[j] = c.0[j].to_f32();
        }
    } else {
        for (j, out) in v.iter_mut().enumerate() {
            *out = unsafe { *p.add(j) }.to_f32();
        }
    }
    v
}

/// Code `j` of a quad (MLX's packing: value `j` in the low bits first), as f32.
#[inline(always)]
fn code<const BITS: u32>(w: Quad, j: usize) -> f32 {
    let per_word = (32 / BITS) as usize;
    let word = w.0[j / per_word];
    ((word >> (BITS as usize * (j % per_word))) & ((1 << BITS) - 1)) as f32
}

/// This lane's partial sums of `M` tokens against the router row `w_row`: the
/// workgroup's lane `g = wave * 32 + lane` takes the chunks (or, on the value
/// path, the values) `g, g + LANES, ...` in index order, [`batch`]`(M, T)` of
/// them at a time with every weight and token load of a batch issued before the
/// first is used. Entries `t >= M` are 0.
///
/// # Safety
/// As [`moe_router_logits`], with `M` its `m` and `w_row` a row of `wr`.
#[inline(always)]
unsafe fn row_part<T: Elem, const M: usize>(x: *const T, w_row: *const T, din: usize) -> [f32; MAX_TOKENS] {
    const LANES: usize = (WAVES_PER_ROW * WAVE_SIZE) as usize;
    let first = (wave::wave_id() * WAVE_SIZE + wave::lane_id()) as usize;
    let mut acc = [0.0f32; MAX_TOKENS];
    let aligned = din.is_multiple_of(CHUNK as usize)
        && (w_row as usize).is_multiple_of(align_of::<Chunk<T>>())
        && (x as usize).is_multiple_of(align_of::<Chunk<T>>());
    if aligned {
        let chunks = din / CHUNK as usize;
        let zero = Chunk::<T>::new([T::from_f32(0.0); CHUNK as usize]);
        let mut base = first;
        while base < chunks {
            let mut w = [zero; MAX_BATCH];
            let mut xs = [[zero; MAX_TOKENS]; MAX_BATCH];
            crate::unroll!(b in 0..batch(M, size_of::<T>()), at most 4 => {
                let c = base + b * LANES;
                if c < chunks {
                    w[b] = unsafe { *(w_row.add(c * CHUNK as usize) as *const Chunk<T>) };
                    crate::unroll!(t in 0..M, at most 8 => {
                        xs[b][t] = unsafe { *(x.add(t * din + c * CHUNK as usize) as *const Chunk<T>) };
                    });
                }
            });
            crate::unroll!(b in 0..batch(M, size_of::<T>()), at most 4 => {
                if base + b * LANES < chunks {
                    crate::unroll!(t in 0..M, at most 8 => {
                        for j in 0..CHUNK as usize {
                            acc[t] = mul_add(xs[b][t].0[j].to_f32(), w[b].0[j].to_f32(), acc[t]);
                        }
                    });
                }
            });
            base += batch(M, size_of::<T>()) * LANES;
        }
    } else {
        let mut i = first;
        while i < din {
            let wv = unsafe { *w_row.add(i) }.to_f32();
            let mut xv = [0.0f32; MAX_TOKENS];
            crate::unroll!(t in 0..M, at most 8 => {
                xv[t] = unsafe { *x.add(t * din + i) }.to_f32();
            });
            crate::unroll!(t in 0..M, at most 8 => {
                acc[t] = mul_add(xv[t], wv, acc[t]);
            });
            i += LANES;
        }
    }
    acc
}

/// A candidate of `moe_topk` as one integer: the probability's bits above the
/// complement of the expert. The probabilities compared are never negative nor
/// NaN, so their bits order as they do: the larger key is the larger
/// probability, then the lower expert. Every candidate is above 0, which is none.
#[inline(always)]
fn candidate(p: f32, expert: u32) -> u64 {
    ((p.to_bits() as u64) << 32) | !expert as u64
}

/// The largest of the lanes' keys (a xor butterfly): every lane ends with it.
#[inline(always)]
fn wave_max_key(c: u64) -> u64 {
    let mut c = c;
    crate::unroll!(s, const MASK_LOG in 0..5 => {
        let _ = s;
        let high = wave::shfl_xor_u32::<{ 16 >> MASK_LOG }>((c >> 32) as u32);
        let low = wave::shfl_xor_u32::<{ 16 >> MASK_LOG }>(c as u32);
        let other = ((high as u64) << 32) | low as u64;
        if other > c {
            c = other;
        }
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
/// `k` experts of largest probability in `ids[t, :k]` (larger first, the lower
/// index on equal probabilities) and their probabilities in `scores[t, :k]`,
/// divided by their sum when `renorm` is not 0. With `shared` 1, each token's
/// row of `ids` and `scores` has one more slot, the shared expert: id
/// `n_experts` and score `sigmoid(gate_logits[t])`, never renormalized.
///
/// Launch: grid `m` workgroups of 32 threads (one wave), no workgroup memory;
/// `1 <= k <= MAX_TOPK`, `k <= n_experts`. The kernel returns without touching
/// memory when `n_experts` is above `MAX_EXPERTS` or `shared` is not 0 or 1.
///
/// # Safety
/// `logits` holds `m * n_experts` values, `ids` and `scores` `m * (k +
/// shared)`, `gate_logits` `m` when `shared` is 1.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_topk(
    logits: *const f32,
    gate_logits: *const f32,
    ids: *mut u32,
    scores: *mut f32,
    m: u32,
    n_experts: u32,
    k: u32,
    renorm: u32,
    shared: u32,
) {
    let lane = wave::lane_id();
    let t = wave::workgroup_id_x();
    if t >= m || n_experts > MAX_EXPERTS || shared > 1 || (shared == 1 && gate_logits.is_null()) {
        return;
    }
    let row = unsafe { logits.add(t as usize * n_experts as usize) };
    let round = unsafe { select(row, n_experts, k) };
    let slots = k + shared;
    let ids = unsafe { ids.add((t * slots) as usize) };
    let scores = unsafe { scores.add((t * slots) as usize) };
    if lane < k {
        unsafe {
            *ids.add(lane as usize) = round.expert;
            *scores.add(lane as usize) = round.slot_score(renorm);
        }
    } else if lane == k && shared == 1 {
        let gate = unsafe { *gate_logits.add(t as usize) };
        unsafe {
            *ids.add(lane as usize) = n_experts;
            *scores.add(lane as usize) = shared_score(gate);
        }
    }
}

/// The shared expert's score from its gate logit: `sigmoid(gate)`.
#[inline(always)]
pub(crate) fn shared_score(gate: f32) -> f32 {
    1.0 / (1.0 + exp(-gate))
}

/// What a lane of `moe_topk` keeps of the rounds: lane `r` round `r`'s expert
/// and score; every lane the sum of the chosen scores, in the order chosen.
pub(crate) struct Round {
    pub(crate) expert: u32,
    score: f32,
    chosen_sum: f32,
}

impl Round {
    /// This lane's round's score as its slot stores it: divided by the chosen
    /// scores' sum when `renorm` is not 0.
    #[inline(always)]
    pub(crate) fn slot_score(&self, renorm: u32) -> f32 {
        if renorm != 0 { self.score / self.chosen_sum } else { self.score }
    }
}

/// The softmax and the `k` rounds of `moe_topk` for one token's `row` of `e`
/// logits (`e <= MAX_EXPERTS`), in the instance of [`choose`] whose group
/// count covers `e`. Every lane of the wave must call it.
///
/// # Safety
/// `row` holds `e` values.
#[inline(always)]
pub(crate) unsafe fn select(row: *const f32, e: u32, k: u32) -> Round {
    unsafe {
        match topk_groups(e) {
            1 => choose::<1>(row, e, k),
            2 => choose::<2>(row, e, k),
            4 => choose::<4>(row, e, k),
            _ => choose::<8>(row, e, k),
        }
    }
}

/// The softmax and the first `rounds` rounds of `moe_topk` for one token's
/// `row` of `e` logits, each lane holding its experts `lane + 32 (4 g + i)`
/// for `g < G`. A round's winner does not depend on the rounds after it, so
/// lane `r < rounds` ends with round `r` of all `k`; the chosen sum is that of
/// the rounds run (of all `k` when `rounds` is `k`).
#[inline(always)]
pub(crate) unsafe fn choose<const G: usize>(row: *const f32, e: u32, rounds: u32) -> Round {
    const GROUP: usize = TOPK_GROUP as usize;
    let lane = wave::lane_id();
    let expert = |g: usize, i: usize| lane + WAVE_SIZE * (TOPK_GROUP * g as u32 + i as u32);

    // The logits (every load issued before the first is used) and their
    // maximum, compared in index order; NaN is skipped (a NaN logit makes the
    // sum, and so every probability, NaN).
    let mut p = [[f32::NEG_INFINITY; GROUP]; G];
    crate::unroll!(g in 0..G => {
        crate::unroll!(i in 0..GROUP => {
            if expert(g, i) < e {
                p[g][i] = unsafe { *row.add(expert(g, i) as usize) };
            }
        });
    });
    let mut top = f32::NEG_INFINITY;
    crate::unroll!(g in 0..G => {
        crate::unroll!(i in 0..GROUP => {
            if expert(g, i) < e && p[g][i] > top {
                top = p[g][i];
            }
        });
    });
    let top = wave_max(top);

    // exp(l - max), this lane's sum in index order, the wave's sum, then the
    // probabilities as candidates (0 for the slots past the last expert).
    let mut lane_sum = 0.0f32;
    crate::unroll!(g in 0..G => {
        crate::unroll!(i in 0..GROUP => {
            if expert(g, i) < e {
                p[g][i] = exp(p[g][i] - top);
                lane_sum = lane_sum + p[g][i];
            }
        });
    });
    let sum = wave::wave_sum_f32(lane_sum);
    let mut keys = [[0u64; GROUP]; G];
    // A NaN sum makes every probability NaN: no candidate, every round none.
    if !sum.is_nan() {
        crate::unroll!(g in 0..G => {
            crate::unroll!(i in 0..GROUP => {
                if expert(g, i) < e {
                    keys[g][i] = candidate(p[g][i] / sum, expert(g, i));
                }
            });
        });
    }
    // This lane's best candidate below `bound` (0 when none is left).
    let best_below = |keys: &[[u64; GROUP]; G], bound: u64| {
        let mut best = 0u64;
        crate::unroll!(g in 0..G => {
            crate::unroll!(i in 0..GROUP => {
                let c = keys[g][i];
                if c < bound && c > best {
                    best = c;
                }
            });
        });
        best
    };

    // Each round the wave's best candidate wins; the lane that held it moves
    // to its next best. Keys are distinct, so "below the winner" is "not yet chosen".
    let mut head = best_below(&keys, u64::MAX);
    let mut round = Round { expert: u32::MAX, score: f32::NAN, chosen_sum: 0.0 };
    let mut r = 0u32;
    while r < rounds {
        let best = wave_max_key(head);
        let (expert, score) =
            if best == 0 { (u32::MAX, f32::NAN) } else { (!(best as u32), f32::from_bits((best >> 32) as u32)) };
        if best != 0 && expert % WAVE_SIZE == lane {
            head = best_below(&keys, best);
        }
        if lane == r {
            (round.expert, round.score) = (expert, score);
        }
        round.chosen_sum = round.chosen_sum + score;
        r += 1;
    }
    round
}

// Lane r keeps round r of `moe_topk`, and lane k the shared expert's slot.
const _: () = assert!(MAX_TOPK < WAVE_SIZE);
