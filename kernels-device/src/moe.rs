//! `moe_fc1_relu2`, `moe_down` and `moe_combine`: the squared-ReLU routed experts
//! of Nemotron-H (spec/kernels.md section 4), over MLX affine quantized weights
//! (4 or 8 bits, group size 32, 64 or 128). A tolerance contract: every sum is in
//! f32, in the order below.
//!
//! # Mapping
//!
//! Grid z is the expert slot k, grid x the blocks of [`ROWS_PER_WORKGROUP`] output
//! rows. Each wave computes one row at a time (wave `w` of a workgroup takes rows
//! `w, w + WAVES, ...`), and its 32 lanes stride over the row's packed words:
//! lane `l` takes the quads (4 words, one 16-byte load) `l, l + 32, l + 64, ...`,
//! [`QUADS_PER_BATCH`] of them loaded before the first is used. A wave sum
//! ([`wave::wave_sum_f32`]) folds the 32 lane partials at the end of the row.
//! When the weight pointer is not 16-byte aligned, the same mapping runs on single
//! words (lane `l` takes words `l, l + 32, ...`).
//!
//! # Where the activations live
//!
//! The row being multiplied (x for fc1, act[k] for down) is staged once per
//! workgroup in workgroup memory, as f32, and shared by the workgroup's
//! [`ROWS_PER_WORKGROUP`] rows. A quad's values form one chunk of
//! `values_per_chunk(bits)` floats, followed by [`PAD`] floats, the first of which
//! holds the chunk's sum; the padding puts the chunks of 8 neighbouring lanes on 8
//! distinct groups of 4 banks, so the 16-byte reads are free of bank conflicts.
//! Per 16 bytes of weights a lane reads 64 or 128 bytes of activations: from
//! workgroup memory that traffic stays off the vector-memory path that streams the
//! weights (RDNA: the LDS has its own 128 B/clk per CU; H200: shared memory serves
//! 128 B/clk per SM), and the f16/bf16 widening is done once per workgroup, not once
//! per row.
//!
//! # Arithmetic
//!
//! Within a chunk (one quad, whose values all lie in one group since
//! `gs >= values_per_chunk`), `sum_j x_j (q_j s + b) = s * sum_j x_j q_j + b * sum_j x_j`:
//! one fma per value, two per chunk, with `sum_j x_j` staged beside the chunk.
//! Codes become f32 exactly (`v_cvt_f32_ubyte*` on AMD; on NVIDIA, where
//! integer-to-float conversion runs at a quarter rate, through the exponent of
//! 2^23). The lane partial sums chunks in the order the lane owns them; the wave
//! sum is a xor butterfly.
//!
//! # Out-of-range expert ids
//!
//! An id `idx[k] >= n_experts` never addresses memory: the workgroups of slot k
//! write NaN to all their output rows (act[k, :] or part[k, :], so the combined
//! output is NaN) and, when `status` is not null, the first workgroup of slot k
//! writes `1 + k` to `*status`, but only if every earlier slot's id is in range.
//! So `*status` ends as `1 + (first bad slot)`, deterministically and without
//! atomics, and is never written when all ids are good: the caller zeroes it
//! before the launch. `moe_down` repeats the check and writes the same value.

use core::f32::math::mul_add;

use crate::geometry::moe::{
    MAX_COLS, PAD, QUAD_WORDS, QUADS_PER_BATCH, ROWS_PER_WAVE, ROWS_PER_WORKGROUP, STAGE_VALUES, WAVES, WORKGROUP_SIZE,
};
use crate::num::Elem;
use crate::wave;

/// Four floats: one 16-byte workgroup-memory access.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct F4([f32; 4]);

/// Four packed words: one 16-byte global load.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Quad([u32; 4]);

/// The values one thread stages per pass (one or two 16-byte loads).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Stage<T>([T; STAGE_VALUES as usize]);

/// Runs `$body` for `$u` in 0..4, unrolled by hand: per-lane arrays indexed by
/// `$u` stay in registers only if every index is a constant.
macro_rules! unroll4 {
    ($u:ident => $body:block) => {{
        const _: () = assert!(QUADS_PER_BATCH == 4, "unroll4! unrolls exactly QUADS_PER_BATCH");
        { let $u: usize = 0; $body }
        { let $u: usize = 1; $body }
        { let $u: usize = 2; $body }
        { let $u: usize = 3; $body }
    }};
}

/// Byte `SHIFT / 8` of `t` as an f32, exactly.
#[inline(always)]
fn byte_f32<const SHIFT: u32>(t: u32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // 2^23 + b, then minus 2^23: a logic op and an add instead of a
        // quarter-rate I2F. Exact (b < 2^8).
        f32::from_bits(((t >> SHIFT) & 0xFF) | 0x4B00_0000) - 8_388_608.0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // One v_cvt_f32_ubyte{0..3} on AMD.
        ((t >> SHIFT) & 0xFF) as f32
    }
}

/// `sum_j x_j * q_j` over the values of one word `w`, whose x start at `xs`
/// (8 values at 4 bits, 4 at 8 bits), from +0.0 in value order.
#[inline(always)]
unsafe fn word_dot<const BITS: u32>(w: u32, xs: *const f32) -> f32 {
    unsafe {
        if BITS == 4 {
            // Nibbles 0, 2, 4, 6 in the bytes of `lo`, 1, 3, 5, 7 in those of `hi`.
            let lo = w & 0x0F0F_0F0F;
            let hi = (w >> 4) & 0x0F0F_0F0F;
            let a = (xs as *const F4).read().0;
            let b = (xs.add(4) as *const F4).read().0;
            let d = a[0] * byte_f32::<0>(lo);
            let d = mul_add(a[1], byte_f32::<0>(hi), d);
            let d = mul_add(a[2], byte_f32::<8>(lo), d);
            let d = mul_add(a[3], byte_f32::<8>(hi), d);
            let d = mul_add(b[0], byte_f32::<16>(lo), d);
            let d = mul_add(b[1], byte_f32::<16>(hi), d);
            let d = mul_add(b[2], byte_f32::<24>(lo), d);
            mul_add(b[3], byte_f32::<24>(hi), d)
        } else {
            let a = (xs as *const F4).read().0;
            let d = a[0] * byte_f32::<0>(w);
            let d = mul_add(a[1], byte_f32::<8>(w), d);
            let d = mul_add(a[2], byte_f32::<16>(w), d);
            mul_add(a[3], byte_f32::<24>(w), d)
        }
    }
}

/// Keeps the next batch's loads ahead of the current batch's arithmetic: the
/// amdgpu scheduler would otherwise interleave them with arithmetic that waits on
/// earlier loads. (On nvptx the loads feed the next iteration, so LLVM cannot
/// sink them into the branches that use them, and ptxas schedules them early.)
#[inline(always)]
fn schedule_fence() {
    #[cfg(target_arch = "amdgpu")]
    unsafe {
        core::arch::amdgpu::sched_barrier::<0>()
    }
}

/// Values per word and per quad at `BITS` bits.
const fn vpw(bits: u32) -> u32 {
    32 / bits
}
const fn vpq(bits: u32) -> u32 {
    QUAD_WORDS * vpw(bits)
}

/// Stages `cols` values of `src` in workgroup memory as f32 chunks of
/// `vpq(BITS)` values, each followed by its sum (then padding), and waits for the
/// whole workgroup. Thread `t` takes values `8 (t + 256 p) .. + 8` in pass `p`; the
/// 2 or 4 threads of a chunk are neighbouring lanes, whose sums a xor butterfly
/// combines. All threads of the workgroup must call it.
#[inline(always)]
unsafe fn stage<T: Elem, const BITS: u32>(src: *const T, cols: u32, lds: *mut f32) {
    let t = wave::thread_id();
    let chunk = vpq(BITS);
    let stride = chunk + PAD;
    let per_pass = WORKGROUP_SIZE * STAGE_VALUES;
    let passes = cols.div_ceil(per_pass);
    let vector = (src as usize) % core::mem::align_of::<Stage<T>>() == 0;
    let mut p = 0;
    while p < passes {
        let first = (p * WORKGROUP_SIZE + t) * STAGE_VALUES;
        let active = first < cols;
        let mut v = [0.0f32; STAGE_VALUES as usize];
        if active {
            unsafe {
                if vector {
                    let s = (src.add(first as usize) as *const Stage<T>).read();
                    for j in 0..STAGE_VALUES as usize {
                        v[j] = s.0[j].to_f32();
                    }
                } else {
                    for j in 0..STAGE_VALUES as usize {
                        v[j] = src.add(first as usize + j).read().to_f32();
                    }
                }
            }
        }
        let mut sum = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
        // Every lane takes part in the exchanges, active or not.
        sum = sum + wave::shfl_xor_f32::<1>(sum);
        if BITS == 4 {
            sum = sum + wave::shfl_xor_f32::<2>(sum);
        }
        if active {
            let c = first / chunk;
            let off = first % chunk;
            unsafe {
                let dst = lds.add((c * stride + off) as usize);
                (dst as *mut F4).write(F4([v[0], v[1], v[2], v[3]]));
                (dst.add(4) as *mut F4).write(F4([v[4], v[5], v[6], v[7]]));
                if off == 0 {
                    lds.add((c * stride + chunk) as usize).write(sum);
                }
            }
        }
        p += 1;
    }
    wave::barrier();
}

/// One lane's share of one batch: [`QUADS_PER_BATCH`] quads of a row (lane `l`,
/// batch `j`: quads `128 j + l + 32 u`), with the raw scale and bias of each.
#[derive(Clone, Copy)]
struct Batch<T> {
    q: [Quad; QUADS_PER_BATCH],
    s: [T; QUADS_PER_BATCH],
    b: [T; QUADS_PER_BATCH],
}

/// The quads of a batch, from `first` (this lane's first quad of the batch) on.
/// Unconditional: a quad past the end of the row is replaced by the row's last
/// quad (a cache hit, never used), so that no branch separates the loads and
/// none waits for another. The raw T values are widened where they are used.
#[inline(always)]
unsafe fn load_batch<T: Elem, const BITS: u32>(w: *const u32, s: *const T, b: *const T, first: u32, n_quads: u32, gs_shift: u32) -> Batch<T> {
    let zero = T::from_bits_u32(0);
    let mut batch = Batch { q: [Quad([0; 4]); QUADS_PER_BATCH], s: [zero; QUADS_PER_BATCH], b: [zero; QUADS_PER_BATCH] };
    unroll4!(u => {
        let qd = first + wave::WAVE_SIZE * u as u32;
        let qd = if qd < n_quads { qd } else { n_quads - 1 };
        unsafe {
            batch.q[u] = (w as *const Quad).add(qd as usize).read();
            let g = ((qd * vpq(BITS)) >> gs_shift) as usize;
            batch.s[u] = s.add(g).read();
            batch.b[u] = b.add(g).read();
        }
    });
    batch
}

/// Adds this lane's part of a batch to `acc`: for each of its quads in the row,
/// `s * sum_j x_j q_j + b * sum_j x_j` against the staged chunk.
#[inline(always)]
unsafe fn batch_dot<T: Elem, const BITS: u32>(batch: &Batch<T>, lds: *const f32, first: u32, n_quads: u32, mut acc: f32) -> f32 {
    let chunk = vpq(BITS);
    let per_word = vpw(BITS) as usize;
    unroll4!(u => {
        let qd = first + wave::WAVE_SIZE * u as u32;
        if qd < n_quads {
            unsafe {
                let xs = lds.add((qd * (chunk + PAD)) as usize);
                let q = batch.q[u].0;
                let d0 = word_dot::<BITS>(q[0], xs);
                let d1 = word_dot::<BITS>(q[1], xs.add(per_word));
                let d2 = word_dot::<BITS>(q[2], xs.add(2 * per_word));
                let d3 = word_dot::<BITS>(q[3], xs.add(3 * per_word));
                let dot = (d0 + d1) + (d2 + d3);
                let xsum = xs.add(chunk as usize).read();
                acc = mul_add(batch.s[u].to_f32(), dot, acc);
                acc = mul_add(batch.b[u].to_f32(), xsum, acc);
            }
        }
    });
    acc
}

/// The rows of this wave with 16-byte loads, software-pipelined: the work is the
/// sequence of (row, batch) items of the wave's rows, and the loads of the next
/// item are issued before the arithmetic of the current one, so each wave keeps
/// a batch of loads in flight while it computes (across row boundaries too).
#[inline(always)]
unsafe fn rows_quads<T: Elem, const BITS: u32>(
    w: *const u32,
    s: *const T,
    b: *const T,
    lds: *const f32,
    first_row: u32,
    n_rows: u32,
    l: Layout,
    finish: &mut impl FnMut(u32, f32),
) {
    let lane = wave::lane_id();
    let n_quads = l.words / QUAD_WORDS;
    let per_batch = wave::WAVE_SIZE * QUADS_PER_BATCH as u32;
    let batches = n_quads.div_ceil(per_batch);
    let row_of = |i: u32| first_row + i * WAVES;
    let load = |i: u32, j: u32| unsafe {
        let row = row_of(i) as usize;
        load_batch::<T, BITS>(
            w.add(row * l.words as usize),
            s.add(row * l.groups as usize),
            b.add(row * l.groups as usize),
            j * per_batch + lane,
            n_quads,
            l.gs_shift,
        )
    };
    // Item (i, j): batch j of the wave's i-th row. All control is uniform over the wave.
    let (mut i, mut j) = (0u32, 0u32);
    let mut cur = load(0, 0);
    let mut acc = 0.0f32;
    loop {
        let (ni, nj) = if j + 1 < batches { (i, j + 1) } else { (i + 1, 0) };
        let more = ni < n_rows;
        // The last item reloads itself (cache hits) rather than branch around the load.
        let next = if more { load(ni, nj) } else { load(i, j) };
        schedule_fence();
        acc = unsafe { batch_dot::<T, BITS>(&cur, lds, j * per_batch + lane, n_quads, acc) };
        if nj == 0 {
            let total = wave::wave_sum_f32(acc);
            if lane == 0 {
                finish(row_of(i), total);
            }
            acc = 0.0;
        }
        if !more {
            break;
        }
        cur = next;
        i = ni;
        j = nj;
    }
}

/// This lane's partial of one row on single words, for weights that are not
/// 16-byte aligned: lane `l` takes words `l + 32 i`.
#[inline(always)]
unsafe fn row_partial_words<T: Elem, const BITS: u32>(w: *const u32, s: *const T, b: *const T, lds: *const f32, words: u32, gs_shift: u32, lane: u32) -> f32 {
    let chunk = vpq(BITS);
    let stride = chunk + PAD;
    let per_word = vpw(BITS);
    let step = wave::WAVE_SIZE;
    let mut acc = 0.0f32;
    let mut p = lane;
    while p < words {
        unsafe {
            let word = w.add(p as usize).read();
            let g = ((p * per_word) >> gs_shift) as usize;
            let sc = s.add(g).read().to_f32();
            let bi = b.add(g).read().to_f32();
            let xs = lds.add(((p / QUAD_WORDS) * stride + (p % QUAD_WORDS) * per_word) as usize);
            let dot = word_dot::<BITS>(word, xs);
            let mut xsum = 0.0f32;
            for j in 0..per_word as usize {
                xsum = xsum + xs.add(j).read();
            }
            acc = mul_add(sc, dot, acc);
            acc = mul_add(bi, xsum, acc);
        }
        p += step;
    }
    acc
}

/// The checked launch parameters shared by both matrix kernels.
#[derive(Clone, Copy)]
struct Layout {
    /// Packed words per row.
    words: u32,
    /// Groups (scales) per row.
    groups: u32,
    /// log2(group size).
    gs_shift: u32,
}

/// Validates the format the host launcher already checked; `None` makes the
/// kernel return without touching memory (uniformly over the workgroup).
#[inline(always)]
fn layout(cols: u32, bits: u32, group_size: u32) -> Option<Layout> {
    if !(bits == 4 || bits == 8) || !(group_size == 32 || group_size == 64 || group_size == 128) {
        return None;
    }
    if cols == 0 || cols > MAX_COLS || cols & (group_size - 1) != 0 {
        return None;
    }
    let gs_shift = group_size.trailing_zeros();
    // Shifts, not divisions: nothing here can divide by zero.
    Some(Layout { words: (cols * bits) >> 5, groups: cols >> gs_shift, gs_shift })
}

/// The out-of-range path of slot `slot` (see the module documentation): NaN in
/// this workgroup's rows of `out [k, rows]`, and `1 + slot` in `*status` if no
/// earlier slot is out of range.
#[inline(always)]
unsafe fn bad_expert(idx: *const u32, n_experts: u32, slot: u32, out: *mut f32, rows: u32, status: *mut u32) {
    let t = wave::thread_id();
    let row = wave::workgroup_id_x() * ROWS_PER_WORKGROUP + t;
    unsafe {
        if t < ROWS_PER_WORKGROUP && row < rows {
            out.add(slot as usize * rows as usize + row as usize).write(f32::NAN);
        }
        if t == 0 && wave::workgroup_id_x() == 0 && !status.is_null() {
            let mut first_bad = true;
            let mut j = 0;
            while j < slot {
                if idx.add(j as usize).read() >= n_experts {
                    first_bad = false;
                }
                j += 1;
            }
            if first_bad {
                status.write_volatile(1 + slot);
            }
        }
    }
}

/// The rows of this workgroup: for each, `wave_sum(lane partial)` goes to
/// `finish(row, total)` (lane 0 only). `w, s, b` point at the expert's matrix.
#[inline(always)]
unsafe fn compute_rows<T: Elem, const BITS: u32, const WIDE: bool>(
    w: *const u32,
    s: *const T,
    b: *const T,
    lds: *const f32,
    rows: u32,
    l: Layout,
    mut finish: impl FnMut(u32, f32),
) {
    let first_row = wave::workgroup_id_x() * ROWS_PER_WORKGROUP + wave::wave_id();
    // Uniform over the wave: a wave with no rows leaves as a whole.
    if first_row >= rows {
        return;
    }
    let n_rows = (rows - first_row).div_ceil(WAVES).min(ROWS_PER_WAVE);
    if WIDE {
        unsafe { rows_quads::<T, BITS>(w, s, b, lds, first_row, n_rows, l, &mut finish) };
        return;
    }
    let lane = wave::lane_id();
    let mut i = 0;
    while i < n_rows {
        let row = first_row + i * WAVES;
        unsafe {
            let wr = w.add(row as usize * l.words as usize);
            let sr = s.add(row as usize * l.groups as usize);
            let br = b.add(row as usize * l.groups as usize);
            let partial = row_partial_words::<T, BITS>(wr, sr, br, lds, l.words, l.gs_shift, lane);
            let total = wave::wave_sum_f32(partial);
            if lane == 0 {
                finish(row, total);
            }
        }
        i += 1;
    }
}

/// `act[k, f] = square(max(sum_i f(x[i]) * (q1[idx[k], f, i] * f(s1) + f(b1)), 0))`.
///
/// # Safety
/// `x [din]`, `idx [k]`, `w1 [n_experts, dff, din*bits/32]` (u32), `s1, b1
/// [n_experts, dff, din/group_size]`, `act [k, dff]` (f32), `status` null or one
/// u32. Launched with grid `(workgroups(dff), 1, k)`, [`WORKGROUP_SIZE`] threads
/// and `workgroup_mem_bytes(din, bits)` bytes of workgroup memory.
#[allow(clippy::too_many_arguments)]
pub unsafe fn moe_fc1_relu2<T: Elem>(
    x: *const T,
    idx: *const u32,
    w1: *const u32,
    s1: *const T,
    b1: *const T,
    act: *mut f32,
    n_experts: u32,
    k: u32,
    din: u32,
    dff: u32,
    bits: u32,
    group_size: u32,
    status: *mut u32,
) {
    let slot = wave::workgroup_id_z();
    let Some(l) = layout(din, bits, group_size) else { return };
    if slot >= k {
        return;
    }
    unsafe {
        let e = idx.add(slot as usize).read();
        if e >= n_experts {
            bad_expert(idx, n_experts, slot, act, dff, status);
            return;
        }
        let lds = wave::workgroup_mem::<F4>() as *mut f32;
        let expert_rows = e as usize * dff as usize;
        let w = w1.add(expert_rows * l.words as usize);
        let s = s1.add(expert_rows * l.groups as usize);
        let b = b1.add(expert_rows * l.groups as usize);
        let out = act.add(slot as usize * dff as usize);
        let finish = |row: u32, total: f32| {
            let r = if total < 0.0 { 0.0 } else { total };
            out.add(row as usize).write(r * r);
        };
        let wide = (w1 as usize) % core::mem::align_of::<Quad>() == 0 && l.words % QUAD_WORDS == 0;
        if bits == 4 {
            stage::<T, 4>(x, din, lds);
            if wide { compute_rows::<T, 4, true>(w, s, b, lds, dff, l, finish) } else { compute_rows::<T, 4, false>(w, s, b, lds, dff, l, finish) }
        } else {
            stage::<T, 8>(x, din, lds);
            if wide { compute_rows::<T, 8, true>(w, s, b, lds, dff, l, finish) } else { compute_rows::<T, 8, false>(w, s, b, lds, dff, l, finish) }
        }
    }
}

/// `part[k, h] = scores[k] * sum_f act[k, f] * (q2[idx[k], h, f] * f(s2) + f(b2))`.
///
/// # Safety
/// `idx [k]`, `w2 [n_experts, din, dff*bits/32]` (u32), `s2, b2 [n_experts, din,
/// dff/group_size]`, `act [k, dff]`, `scores [k]`, `part [k, din]` (f32), `status`
/// null or one u32. Launched with grid `(workgroups(din), 1, k)`, [`WORKGROUP_SIZE`]
/// threads and `workgroup_mem_bytes(dff, bits)` bytes of workgroup memory.
#[allow(clippy::too_many_arguments)]
pub unsafe fn moe_down<T: Elem>(
    idx: *const u32,
    w2: *const u32,
    s2: *const T,
    b2: *const T,
    act: *const f32,
    scores: *const f32,
    part: *mut f32,
    n_experts: u32,
    k: u32,
    din: u32,
    dff: u32,
    bits: u32,
    group_size: u32,
    status: *mut u32,
) {
    let slot = wave::workgroup_id_z();
    let Some(l) = layout(dff, bits, group_size) else { return };
    if slot >= k {
        return;
    }
    unsafe {
        let e = idx.add(slot as usize).read();
        if e >= n_experts {
            bad_expert(idx, n_experts, slot, part, din, status);
            return;
        }
        let lds = wave::workgroup_mem::<F4>() as *mut f32;
        let expert_rows = e as usize * din as usize;
        let w = w2.add(expert_rows * l.words as usize);
        let s = s2.add(expert_rows * l.groups as usize);
        let b = b2.add(expert_rows * l.groups as usize);
        let a = act.add(slot as usize * dff as usize);
        let score = scores.add(slot as usize).read();
        let out = part.add(slot as usize * din as usize);
        let finish = |row: u32, total: f32| out.add(row as usize).write(score * total);
        let wide = (w2 as usize) % core::mem::align_of::<Quad>() == 0 && l.words % QUAD_WORDS == 0;
        if bits == 4 {
            stage::<f32, 4>(a, dff, lds);
            if wide { compute_rows::<T, 4, true>(w, s, b, lds, din, l, finish) } else { compute_rows::<T, 4, false>(w, s, b, lds, din, l, finish) }
        } else {
            stage::<f32, 8>(a, dff, lds);
            if wide { compute_rows::<T, 8, true>(w, s, b, lds, din, l, finish) } else { compute_rows::<T, 8, false>(w, s, b, lds, din, l, finish) }
        }
    }
}

/// `out[h] = T(sum_k part[k, h])`, the sum in f32 over k ascending from +0.0, one
/// rounding. One thread per h.
///
/// # Safety
/// `part [k, din]` (f32), `out [din]`; any 1-D grid covering `din` threads.
pub unsafe fn moe_combine<T: Elem>(part: *const f32, out: *mut T, k: u32, din: u32) {
    let h = wave::global_id_x();
    if h >= din as u64 {
        return;
    }
    let h = h as usize;
    let mut acc = 0.0f32;
    let mut j = 0;
    while j < k {
        acc = acc + unsafe { part.add(j as usize * din as usize + h).read() };
        j += 1;
    }
    unsafe { out.add(h).write(T::from_f32(acc)) };
}
