//! `moe_fc1_relu2`, `moe_down` and `moe_combine`: the squared-ReLU routed experts
//! of Nemotron-H (docs/contracts.md, section 6), over MLX affine quantized weights
//! (4 or 8 bits, group size 32, 64 or 128). A tolerance contract: every sum is in
//! f32, in the order below.
//!
//! # Mapping
//!
//! Grid z is the expert slot k, grid x the blocks of [`ROWS_PER_WORKGROUP`] output
//! rows. Each wave computes one row at a time (wave `w` of a workgroup takes rows
//! `w, w + WAVES, ...`, so the waves of a workgroup stream neighbouring rows), and
//! its 32 lanes stride over the row's packed words: lane `l` takes the quads (4
//! words, one 16-byte load) `l, l + 32, l + 64, ...`, in batches of
//! [`QUADS_PER_BATCH`] per lane. A wave sum ([`wave::wave_sum_f32`]) folds the 32
//! lane partials at the end of the row.
//!
//! Loads in flight: the wave's work is a sequence of (row, batch) items, software
//! pipelined: the loads of the next item (the next batch of the row, or the first
//! of the next row) are issued before the arithmetic of the current one, and the
//! first item's loads before the activations are staged. Within a batch every
//! load is issued before any is waited for (on amdgpu a `sched_barrier` keeps the
//! scheduler from interleaving them with the arithmetic; on nvptx a warp sync
//! keeps LLVM from sinking them into the branches that use them).
//!
//! When the weight pointer is not 16-byte aligned, the same mapping runs on
//! single words (lane `l` takes words `l, l + 32, ...`), without the pipeline.
//!
//! On NVIDIA, 4-bit codes in 16-byte aligned weights take another schedule
//! ([`tensor_cores`]): the codes are multiplied on the tensor cores, 16 rows
//! at a time, with the same grid, workgroup and staged chunks. Everything
//! below describes the f32 schedule, which AMD runs for every width and NVIDIA
//! for 8-bit codes and unaligned weights.
//!
//! # Where the activations live
//!
//! The row being multiplied (x for fc1, `act[k]` for down) is staged once per
//! workgroup in workgroup memory, as f32, and shared by the workgroup's
//! [`ROWS_PER_WORKGROUP`] rows. A quad's values form one chunk of
//! `values_per_chunk(bits)` floats, followed by [`PAD`](crate::geometry::moe::PAD)
//! floats, the first of which holds the chunk's sum (`geometry::moe::staged_chunk`
//! and `staged_word` give the offsets); the padding puts the chunks of 8 neighbouring lanes on 8
//! distinct groups of 4 banks, so the 16-byte reads are free of bank conflicts.
//! Why workgroup memory: per 16 bytes of weights a lane reads 64 (8-bit) or 128
//! (4-bit) bytes of f32 activations. On RDNA 3.5 (gfx1151: ~2 B/clk of DRAM per
//! CU) that is far below the LDS's 128 B/clk per CU, and it keeps the traffic off
//! the vector-memory path that streams the weights; the f16/bf16 widening and the
//! chunk sums are done once per workgroup instead of once per row. On an H200
//! (~18 B/clk of DRAM per SM at 4.8 TB/s) 4-bit weights at full speed would need
//! ~147 B/clk of activation reads against 128 B/clk of shared memory, so this
//! design caps 4-bit at ~85% of DRAM bandwidth there; reading bf16 x from the L1
//! instead would halve those bytes but put them on the weights' path and add a
//! widening per value. Measured on an H200 the kernels are far from either limit
//! (see the launcher's documentation), so this is not the binding choice yet.
//!
//! # Arithmetic
//!
//! Within a chunk (one quad, whose values all lie in one group since
//! `gs >= values_per_chunk`), `sum_j x_j (q_j s + b) = s * sum_j x_j q_j + b * sum_j x_j`:
//! one fma per value, two per chunk, with `sum_j x_j` staged beside the chunk.
//! Codes become f32 exactly: `v_cvt_f32_ubyte*` on AMD; on NVIDIA, where an
//! integer-to-float conversion runs at a quarter rate, a `prmt` puts an 8-bit
//! code under the exponent of 2^23 and one add removes 2^23, and a 4-bit code
//! becomes `(q + 16) / 32` with a `prmt` alone, the offset removed per chunk
//! through its staged sum ([`code_affine`]). The lane partial sums the
//! chunks in the order the lane owns them; the wave sum is a xor butterfly.
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

// Sums are spelled `acc = acc + v` (their order is the point), and the kernel
// helpers take raw pointers and scalars, many of them.
#![allow(clippy::assign_op_pattern, clippy::needless_range_loop, clippy::too_many_arguments)]

use crate::num::math::mul_add;

use crate::geometry::moe::{
    COMBINE_BATCH, QUAD_WORDS, QUADS_PER_BATCH, ROWS_PER_WAVE, ROWS_PER_WORKGROUP, RowLayout, SIX_BIT_UNIT_VALUES,
    SIX_BIT_UNIT_WORDS, STAGE_VALUES, WAVES, WORKGROUP_SIZE, gate_totals, group_of_quad, group_of_word, row_layout,
    row_layout_6bit, staged_chunk, staged_word, values_per_chunk, values_per_word,
};
use crate::num::Elem;
use crate::vector::{F32x4, U32x4, Vector};
use crate::wave;

pub mod router;
mod tensor_cores;

/// Whether 4-bit codes in 16-byte aligned weights go through the tensor-core
/// schedule ([`tensor_cores`]): on NVIDIA only. AMD keeps the f32 schedule,
/// which the gfx1151 prediction finds memory-bound there.
pub const TENSOR_CORES: bool = cfg!(target_arch = "nvptx64");

/// Four packed words: one 16-byte global load.
type Quad = U32x4;

/// The values one thread stages per pass (one or two 16-byte loads).
type Stage<T> = Vector<T, { STAGE_VALUES as usize }>;

/// NVIDIA's byte permute (`prmt.b32`): byte `i` of the result is byte
/// `(selector >> 4 i) & 7` of `b:a` (`a` bytes 0-3, `b` bytes 4-7).
#[cfg(target_arch = "nvptx64")]
#[inline(always)]
fn prmt(a: u32, b: u32, selector: u32) -> u32 {
    unsafe extern "C" {
        #[link_name = "llvm.nvvm.prmt"]
        fn prmt(a: u32, b: u32, selector: u32) -> u32;
    }
    unsafe { prmt(a, b, selector) }
}

/// Byte `SHIFT / 8` of `t` as an f32, exactly.
#[inline(always)]
fn byte_f32<const SHIFT: u32>(t: u32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // The byte under the exponent of 2^23, then minus 2^23: one `prmt` (which
        // LLVM cannot see through, so the caller's nibble masks stay shared by
        // four values) and one add, instead of a shift, a mask and a
        // quarter-rate I2F. Exact (b < 2^8). Selector: byte SHIFT/8 of `t`, two
        // zero bytes and the 0x4B of 0x4B000000.
        f32::from_bits(prmt(t, 0x4B00_0000, 0x7440 | (SHIFT / 8))) - 8_388_608.0
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        // One v_cvt_f32_ubyte{0..3} on AMD (or a bfe and a cvt).
        ((t >> SHIFT) & 0xFF) as f32
    }
}

/// NVIDIA's 4-bit codes: [`word_dot`] masks nibbles 0, 2, 4, 6 of a word with
/// `(w << 3) & NIBBLE_MASK` and 1, 3, 5, 7 with `(w >> 1) & NIBBLE_MASK`, which
/// leaves each at bits 3..6 of a byte; [`nibble_f32`] moves the byte under
/// [`NIBBLE_MAGIC`] (0.5) with [`nibble_selector`].
#[cfg_attr(not(any(target_arch = "nvptx64", test)), allow(dead_code))]
const NIBBLE_MASK: u32 = 0x7878_7878;
/// See [`NIBBLE_MASK`].
#[cfg_attr(not(any(target_arch = "nvptx64", test)), allow(dead_code))]
const NIBBLE_MAGIC: u32 = 0x3F00_0000;
/// The `prmt` selector that puts byte `byte` of the first operand at bits
/// 16..23 of [`NIBBLE_MAGIC`]: bytes 0 and 1 from the magic (zero), byte 2 from
/// the operand, byte 3 (0x3F) from the magic.
#[cfg_attr(not(any(target_arch = "nvptx64", test)), allow(dead_code))]
const fn nibble_selector(byte: u32) -> u32 {
    0x7054 | (byte << 8)
}
/// [`code_affine`] of NVIDIA's 4-bit codes: `q = 32 c - 16`.
const NIBBLE_AFFINE: (f32, f32) = (32.0, 16.0);

/// The 4-bit code in byte `SHIFT / 8` of `t` (placed there by [`word_dot`]'s
/// masks) as the f32 that `word_dot` multiplies by. On NVIDIA the code sits at
/// bits 3..6 of the byte, which becomes bits 16..23 of [`NIBBLE_MAGIC`] (0.5): the
/// code lands at mantissa bits 19..22, giving `0.5 + q / 32` ([`code_affine`])
/// in one `prmt`, exactly. Elsewhere it is the byte, as [`byte_f32`].
#[inline(always)]
fn nibble_f32<const SHIFT: u32>(t: u32) -> f32 {
    #[cfg(target_arch = "nvptx64")]
    {
        f32::from_bits(prmt(t, NIBBLE_MAGIC, nibble_selector(SHIFT / 8)))
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        byte_f32::<SHIFT>(t)
    }
}

/// `(scale, offset)` such that a code `q` is `scale * c - offset`, where `c` is
/// the float [`word_dot`] multiplies the activation by. On NVIDIA a 4-bit code
/// becomes `c = (q + 16) / 32` in one `prmt` (instead of a `prmt` and an add).
/// `x * c` is exact when x came from a 16-bit value (at most 11 + 5 significant
/// bits; fc1), and rounded once, as `x * q` is, when x is f32 (down). The
/// chunk's staged sum removes the offset (`sum x q = 32 sum x c - 16 sum x`: a
/// few more f32 roundings than summing `x q`, far inside the tolerance).
/// Elsewhere `c = q` (AMD converts a byte in one instruction).
#[inline(always)]
const fn code_affine<const BITS: u32>() -> (f32, f32) {
    if cfg!(target_arch = "nvptx64") && BITS == 4 { NIBBLE_AFFINE } else { (1.0, 0.0) }
}

/// A group's factor of `sum_j x_j c_j` given its scale `s` and the codes'
/// `(scale, offset)` ([`code_affine`]): `scale * s`, since `s * sum x q + b *
/// sum x = (scale s) sum x c + (b - offset s) sum x`.
#[inline(always)]
fn code_scale(s: f32, (scale, _): (f32, f32)) -> f32 {
    if scale == 1.0 { s } else { s * scale }
}

/// A group's factor of `sum_j x_j` given its scale `s`, its bias `b` and the
/// codes' `(scale, offset)`: `b - offset * s` ([`code_scale`]).
#[inline(always)]
fn code_bias(s: f32, b: f32, (_, offset): (f32, f32)) -> f32 {
    if offset == 0.0 { b } else { mul_add(-offset, s, b) }
}

/// `sum_j x_j * c_j` over the values of one word `w` (`c_j` the code `q_j`, or
/// an affine image of it: [`code_affine`]), whose x start at `xs` (8 values at
/// 4 bits, 4 at 8 bits), from +0.0 in value order.
#[inline(always)]
unsafe fn word_dot<const BITS: u32>(w: u32, xs: *const f32) -> f32 {
    unsafe {
        if BITS == 4 {
            // Nibbles 0, 2, 4, 6 in the bytes of `lo`, 1, 3, 5, 7 in those of `hi`: at
            // bits 3..6 of each byte on NVIDIA, at bits 0..3 elsewhere (`nibble_f32`).
            #[cfg(target_arch = "nvptx64")]
            let (lo, hi) = ((w << 3) & NIBBLE_MASK, (w >> 1) & NIBBLE_MASK);
            #[cfg(not(target_arch = "nvptx64"))]
            let (lo, hi) = (w & 0x0F0F_0F0F, (w >> 4) & 0x0F0F_0F0F);
            let a = (xs as *const F32x4).read().0;
            let b = (xs.add(4) as *const F32x4).read().0;
            let d = a[0] * nibble_f32::<0>(lo);
            let d = mul_add(a[1], nibble_f32::<0>(hi), d);
            let d = mul_add(a[2], nibble_f32::<8>(lo), d);
            let d = mul_add(a[3], nibble_f32::<8>(hi), d);
            let d = mul_add(b[0], nibble_f32::<16>(lo), d);
            let d = mul_add(b[1], nibble_f32::<16>(hi), d);
            let d = mul_add(b[2], nibble_f32::<24>(lo), d);
            mul_add(b[3], nibble_f32::<24>(hi), d)
        } else {
            let a = (xs as *const F32x4).read().0;
            let d = a[0] * byte_f32::<0>(w);
            let d = mul_add(a[1], byte_f32::<8>(w), d);
            let d = mul_add(a[2], byte_f32::<16>(w), d);
            mul_add(a[3], byte_f32::<24>(w), d)
        }
    }
}

/// The [`STAGE_VALUES`] values of `src` from `first`, widened to f32: one
/// [`Stage`] load when `vector` (`src` aligned to it), else one load each.
#[inline(always)]
unsafe fn stage_values<T: Elem>(src: *const T, first: u32, vector: bool) -> [f32; STAGE_VALUES as usize] {
    let mut v = [0.0f32; STAGE_VALUES as usize];
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
    v
}

/// Stages `cols` values of `src` in workgroup memory as f32 chunks of
/// `values_per_chunk(BITS)` values, each followed by its sum (then padding), and
/// waits for the whole workgroup. Thread `t` takes values `8 (t + 256 p) .. + 8` in pass `p`; the
/// 2 or 4 threads of a chunk are neighbouring lanes, whose sums a xor butterfly
/// combines. All threads of the workgroup must call it.
#[inline(always)]
unsafe fn stage<T: Elem, const BITS: u32>(src: *const T, cols: u32, lds: *mut f32) {
    let t = wave::thread_id();
    let chunk = values_per_chunk(BITS);
    let per_pass = WORKGROUP_SIZE * STAGE_VALUES;
    let passes = cols.div_ceil(per_pass);
    let vector = (src as usize).is_multiple_of(core::mem::align_of::<Stage<T>>());
    let mut p = 0;
    while p < passes {
        let first = (p * WORKGROUP_SIZE + t) * STAGE_VALUES;
        let active = first < cols;
        let mut v = [0.0f32; STAGE_VALUES as usize];
        if active {
            v = unsafe { stage_values(src, first, vector) };
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
                let dst = lds.add((staged_chunk(c, BITS) + off) as usize);
                (dst as *mut F32x4).write(F32x4::new([v[0], v[1], v[2], v[3]]));
                (dst.add(4) as *mut F32x4).write(F32x4::new([v[4], v[5], v[6], v[7]]));
                if off == 0 {
                    lds.add((staged_chunk(c, BITS) + chunk) as usize).write(sum);
                }
            }
        }
        p += 1;
    }
    wave::barrier();
}

/// One lane's share of one batch: [`QUADS_PER_BATCH`] quads of a row (lane `l`,
/// batch `j`: quads `128 j + l + 32 u`), each with the 32-bit word holding its
/// scale and the one holding its bias (see [`load_batch`]).
#[derive(Clone, Copy)]
struct Batch {
    q: [Quad; QUADS_PER_BATCH],
    s: [u32; QUADS_PER_BATCH],
    b: [u32; QUADS_PER_BATCH],
}

impl Batch {
    const EMPTY: Batch =
        Batch { q: [Quad::new([0; 4]); QUADS_PER_BATCH], s: [0; QUADS_PER_BATCH], b: [0; QUADS_PER_BATCH] };
}

/// Where one row's data starts. The group index `g` of a quad counts from
/// `first_g`, which is 0, or 1 when `PAIRED` and the row's first scale is the
/// high half of a word (`s`, `b` then point at that word).
#[derive(Clone, Copy)]
struct RowPtrs<T> {
    w: *const Quad,
    s: *const T,
    b: *const T,
    first_g: u32,
}

impl<T: Elem> RowPtrs<T> {
    /// Row `row` of an expert's matrix `w, s, b` (`w` 16-byte aligned; with
    /// `PAIRED`, `s` and `b` 4-byte aligned).
    #[inline(always)]
    unsafe fn new<const PAIRED: bool>(w: *const u32, s: *const T, b: *const T, row: u32, l: RowLayout) -> Self {
        let row_g = row as usize * l.groups as usize;
        let (start, first_g) = if PAIRED { (row_g & !1, (row_g & 1) as u32) } else { (row_g, 0) };
        unsafe {
            RowPtrs {
                w: w.add(row as usize * l.words as usize) as *const Quad,
                s: s.add(start),
                b: b.add(start),
                first_g,
            }
        }
    }
}

/// The quads of batch `j` of a row. Slots past the end of the row for the whole
/// wave are skipped (a uniform branch); a lane whose quad of a live slot is past
/// the end loads the row's last quad instead (a cache hit; on AMD never used,
/// on NVIDIA computed and discarded, see [`batch_dot`]), so that the loads of a
/// batch follow each other with no branch and no wait between.
///
/// Scales and biases stay raw. With `PAIRED` (16-bit T, `s` and `b` 4-byte
/// aligned) each is read as the aligned u32 that holds it and its neighbour: a
/// 16-bit load would go to half a register on gfx11, tying it to whatever
/// shares the other half (false waits on loads still in flight). The pair never
/// reaches past the array: stacks have an even number of groups (rows are
/// multiples of the group size), so the last element is the high half of a word.
#[inline(always)]
unsafe fn load_batch<T: Elem, const BITS: u32, const PAIRED: bool>(
    r: RowPtrs<T>,
    j: u32,
    lane: u32,
    n_quads: u32,
    gs_shift: u32,
) -> Batch {
    let mut batch = Batch::EMPTY;
    let wave_first = j * wave::WAVE_SIZE * QUADS_PER_BATCH as u32;
    crate::unroll!(u in 0..QUADS_PER_BATCH, at most 4 => {
        let slot = wave_first + wave::WAVE_SIZE * u as u32;
        if slot < n_quads {
            let qd = slot + lane;
            let qd = if qd < n_quads { qd } else { n_quads - 1 };
            let g = r.first_g + group_of_quad(qd, BITS, gs_shift);
            unsafe {
                batch.q[u] = r.w.add(qd as usize).read();
                if PAIRED {
                    batch.s[u] = (r.s as *const u32).add((g >> 1) as usize).read();
                    batch.b[u] = (r.b as *const u32).add((g >> 1) as usize).read();
                } else {
                    batch.s[u] = r.s.add(g as usize).read().to_bits_u32();
                    batch.b[u] = r.b.add(g as usize).read().to_bits_u32();
                }
            }
        }
    });
    batch
}

/// The f32 value of a scale or bias from the word [`load_batch`] read for
/// group `g`.
#[inline(always)]
fn widen_raw<T: Elem, const PAIRED: bool>(word: u32, g: u32) -> f32 {
    if PAIRED { T::from_bits_u32((word >> ((g & 1) * 16)) & 0xFFFF).to_f32() } else { T::from_bits_u32(word).to_f32() }
}

/// `acc` plus quad `u` of `batch` (the lane's quad `qd` of the row) against
/// its staged chunk: `s * sum_j x_j q_j + b * sum_j x_j`.
#[inline(always)]
unsafe fn quad_dot<T: Elem, const BITS: u32, const PAIRED: bool>(
    batch: &Batch,
    u: usize,
    qd: u32,
    lds: *const f32,
    first_g: u32,
    gs_shift: u32,
    acc: f32,
) -> f32 {
    let chunk = values_per_chunk(BITS);
    let per_word = values_per_word(BITS) as usize;
    unsafe {
        let xs = lds.add(staged_chunk(qd, BITS) as usize);
        let q = batch.q[u].0;
        let d0 = word_dot::<BITS>(q[0], xs);
        let d1 = word_dot::<BITS>(q[1], xs.add(per_word));
        let d2 = word_dot::<BITS>(q[2], xs.add(2 * per_word));
        let d3 = word_dot::<BITS>(q[3], xs.add(3 * per_word));
        let dot = (d0 + d1) + (d2 + d3);
        let xsum = xs.add(chunk as usize).read();
        let g = first_g + group_of_quad(qd, BITS, gs_shift);
        let sc = widen_raw::<T, PAIRED>(batch.s[u], g);
        let acc = mul_add(code_scale(sc, code_affine::<BITS>()), dot, acc);
        mul_add(code_bias(sc, widen_raw::<T, PAIRED>(batch.b[u], g), code_affine::<BITS>()), xsum, acc)
    }
}

/// Adds this lane's part of batch `j` of a row to `acc`: for each of its quads,
/// [`quad_dot`].
///
/// A lane whose quad of a live slot is past the row's end: on NVIDIA it works
/// on the quad that [`load_batch`] read for it and keeps its sum, so that the
/// warp does not branch apart (measured faster on an H200); on AMD it skips
/// (masking lanes is cheap there, and the other form took more VGPRs and
/// instructions in the gfx1151 prediction).
#[inline(always)]
unsafe fn batch_dot<T: Elem, const BITS: u32, const PAIRED: bool>(
    batch: &Batch,
    lds: *const f32,
    first_g: u32,
    j: u32,
    lane: u32,
    n_quads: u32,
    gs_shift: u32,
    mut acc: f32,
) -> f32 {
    let first = j * wave::WAVE_SIZE * QUADS_PER_BATCH as u32 + lane;
    crate::unroll!(u in 0..QUADS_PER_BATCH, at most 4 => {
        let qd = first + wave::WAVE_SIZE * u as u32;
        #[cfg(target_arch = "nvptx64")]
        if qd - lane < n_quads {
            let live = qd < n_quads;
            let sum =
                unsafe { quad_dot::<T, BITS, PAIRED>(batch, u, if live { qd } else { n_quads - 1 }, lds, first_g, gs_shift, acc) };
            acc = if live { sum } else { acc };
        }
        #[cfg(not(target_arch = "nvptx64"))]
        if qd < n_quads {
            acc = unsafe { quad_dot::<T, BITS, PAIRED>(batch, u, qd, lds, first_g, gs_shift, acc) };
        }
    });
    acc
}

/// The rows of this wave with 16-byte loads, software-pipelined: the work is the
/// sequence of (row, batch) items of the wave's rows, and the loads of the next
/// item are issued before the arithmetic of the current one, so each wave keeps
/// a batch of loads in flight while it computes (across row boundaries too).
/// `w, s, b` point at the expert's matrix.
#[inline(always)]
unsafe fn rows_quads<T: Elem, const BITS: u32, const PAIRED: bool>(
    w: *const u32,
    s: *const T,
    b: *const T,
    lds: *const f32,
    first_row: u32,
    n_rows: u32,
    l: RowLayout,
    stage: impl FnOnce(),
    finish: &mut impl FnMut(u32, f32),
) {
    let lane = wave::lane_id();
    let n_quads = l.words / QUAD_WORDS;
    let batches = n_quads.div_ceil(wave::WAVE_SIZE * QUADS_PER_BATCH as u32);
    let row_of = |i: u32| first_row + i * WAVES;
    // Item (i, j): batch j of the wave's i-th row. All control is uniform over the wave.
    let (mut i, mut j) = (0u32, 0u32);
    let mut rp = unsafe { RowPtrs::new::<PAIRED>(w, s, b, row_of(0), l) };
    let mut cur = unsafe { load_batch::<T, BITS, PAIRED>(rp, 0, lane, n_quads, l.group_shift) };
    stage();
    let mut acc = 0.0f32;
    loop {
        let (ni, nj) = if j + 1 < batches { (i, j + 1) } else { (i + 1, 0) };
        let more = ni < n_rows;
        let next_rp = if nj == 0 && more { unsafe { RowPtrs::new::<PAIRED>(w, s, b, row_of(ni), l) } } else { rp };
        let next = if more {
            unsafe { load_batch::<T, BITS, PAIRED>(next_rp, nj, lane, n_quads, l.group_shift) }
        } else {
            Batch::EMPTY
        };
        wave::schedule_fence();
        acc = unsafe { batch_dot::<T, BITS, PAIRED>(&cur, lds, rp.first_g, j, lane, n_quads, l.group_shift, acc) };
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
        rp = next_rp;
        i = ni;
        j = nj;
    }
}

/// Rows of at most [`HALF_WAVE`] quads (Qwen3-Next's down projection: 512
/// values at 4 bits), two at a time: lanes `0..16` take the wave's row `2 p`,
/// lanes `16..32` row `2 p + 1`, lane `h` of a half its quad `h`, pipelined as
/// [`rows_quads`] (the next pair's loads issued before this pair's arithmetic).
/// One pass of [`rows_quads`] over such a row leaves half the wave idle and
/// pays a whole wave's reduction for it; here each half sums its own row with
/// the last four steps of [`wave::wave_sum_f32`], so a row's total is the one
/// [`rows_quads`] gives (its first step only adds the idle half's zeros).
#[inline(always)]
unsafe fn rows_paired<T: Elem, const BITS: u32, const PAIRED: bool>(
    w: *const u32,
    s: *const T,
    b: *const T,
    lds: *const f32,
    first_row: u32,
    n_rows: u32,
    l: RowLayout,
    stage: impl FnOnce(),
    finish: &mut impl FnMut(u32, f32),
) {
    let lane = wave::lane_id();
    let (half, sub) = (lane / HALF_WAVE, lane % HALF_WAVE);
    let n_quads = l.words / QUAD_WORDS;
    let pairs = n_rows.div_ceil(2);
    // This lane's row of pair `p`; a lane of a pair's missing second row reads
    // the first row (a cache hit) and finishes nothing.
    let row_of = |p: u32| {
        let i = 2 * p + half;
        let i = if i < n_rows { i } else { 2 * p };
        first_row + i * WAVES
    };
    let has_row = |p: u32| 2 * p + half < n_rows;
    let mut rp = unsafe { RowPtrs::new::<PAIRED>(w, s, b, row_of(0), l) };
    let mut cur = unsafe { load_batch::<T, BITS, PAIRED>(rp, 0, sub, n_quads, l.group_shift) };
    stage();
    let mut p = 0;
    loop {
        let more = p + 1 < pairs;
        let next_rp = if more { unsafe { RowPtrs::new::<PAIRED>(w, s, b, row_of(p + 1), l) } } else { rp };
        let next = if more {
            unsafe { load_batch::<T, BITS, PAIRED>(next_rp, 0, sub, n_quads, l.group_shift) }
        } else {
            Batch::EMPTY
        };
        wave::schedule_fence();
        let acc = unsafe { batch_dot::<T, BITS, PAIRED>(&cur, lds, rp.first_g, 0, sub, n_quads, l.group_shift, 0.0) };
        let total = wave::half_wave_sum_f32(acc);
        if sub == 0 && has_row(p) {
            finish(row_of(p), total);
        }
        if !more {
            break;
        }
        cur = next;
        rp = next_rp;
        p += 1;
    }
}

/// Lanes in half a wave: the most quads a row of [`rows_paired`] may have.
const HALF_WAVE: u32 = wave::WAVE_SIZE / 2;

/// This lane's partial of one row on single words, for weights that are not
/// 16-byte aligned: lane `l` takes words `l + 32 i`.
#[inline(always)]
unsafe fn row_partial_words<T: Elem, const BITS: u32>(
    w: *const u32,
    s: *const T,
    b: *const T,
    lds: *const f32,
    words: u32,
    gs_shift: u32,
    lane: u32,
) -> f32 {
    let per_word = values_per_word(BITS);
    let step = wave::WAVE_SIZE;
    let mut acc = 0.0f32;
    let mut p = lane;
    while p < words {
        unsafe {
            let word = w.add(p as usize).read();
            let g = group_of_word(p, BITS, gs_shift) as usize;
            let sc = s.add(g).read().to_f32();
            let bi = b.add(g).read().to_f32();
            let xs = lds.add(staged_word(p, BITS) as usize);
            let dot = word_dot::<BITS>(word, xs);
            let mut xsum = 0.0f32;
            for j in 0..per_word as usize {
                xsum = xsum + xs.add(j).read();
            }
            acc = mul_add(code_scale(sc, code_affine::<BITS>()), dot, acc);
            acc = mul_add(code_bias(sc, bi, code_affine::<BITS>()), xsum, acc);
        }
        p += step;
    }
    acc
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
/// `stage` (which ends in a workgroup barrier) is called once by every thread:
/// on the wide path after the first batch of weight loads is issued, so that
/// staging the activations overlaps the first trip to memory.
#[inline(always)]
unsafe fn compute_rows<T: Elem, const BITS: u32, const WIDE: bool>(
    w: *const u32,
    s: *const T,
    b: *const T,
    lds: *const f32,
    rows: u32,
    l: RowLayout,
    stage: impl FnOnce(),
    mut finish: impl FnMut(u32, f32),
) {
    let first_row = wave::workgroup_id_x() * ROWS_PER_WORKGROUP + wave::wave_id();
    // Uniform over the wave.
    let n_rows = if first_row < rows { (rows - first_row).div_ceil(WAVES).min(ROWS_PER_WAVE) } else { 0 };
    if WIDE && n_rows > 0 && l.words / QUAD_WORDS <= HALF_WAVE {
        // Short rows, two a wave (see `rows_paired`).
        if T::BYTES == 2 && (s as usize | b as usize).is_multiple_of(4) {
            unsafe { rows_paired::<T, BITS, true>(w, s, b, lds, first_row, n_rows, l, stage, &mut finish) };
        } else {
            unsafe { rows_paired::<T, BITS, false>(w, s, b, lds, first_row, n_rows, l, stage, &mut finish) };
        }
        return;
    }
    if WIDE && n_rows > 0 {
        // 16-bit scales and biases in 32-bit words when both arrays allow it (see `load_batch`).
        if T::BYTES == 2 && (s as usize | b as usize).is_multiple_of(4) {
            unsafe { rows_quads::<T, BITS, true>(w, s, b, lds, first_row, n_rows, l, stage, &mut finish) };
        } else {
            unsafe { rows_quads::<T, BITS, false>(w, s, b, lds, first_row, n_rows, l, stage, &mut finish) };
        }
        return;
    }
    stage();
    let lane = wave::lane_id();
    let mut i = 0;
    while i < n_rows {
        let row = first_row + i * WAVES;
        unsafe {
            let wr = w.add(row as usize * l.words as usize);
            let sr = s.add(row as usize * l.groups as usize);
            let br = b.add(row as usize * l.groups as usize);
            let partial = row_partial_words::<T, BITS>(wr, sr, br, lds, l.words, l.group_shift, lane);
            let total = wave::wave_sum_f32(partial);
            if lane == 0 {
                finish(row, total);
            }
        }
        i += 1;
    }
}

/// The body shared by [`moe_fc1_relu2`] and [`moe_down`]: the slot's expert
/// (a bad id reported through `bad_expert`), its rows of the weights, scales and
/// biases, then `compute_rows` for the bit width and load width, staging `$x`
/// (`cols` values of `$src`) in workgroup memory and ending each row with
/// `$finish`. The caller's statements, run after the expert's rows are found,
/// define `$x` and `$finish`.
/// A macro, not a function, so that each kernel's code stays as written out
/// (an earlier shared function measured 5-7% slower).
macro_rules! expert_gemv {
    (
        $T:ty, $tensor:ident, $slot:ident; cols $cols:ident, rows $rows:ident, $bits:ident, $group_size:ident;
        $idx:ident, $n_experts:ident, $k:ident, $status:ident;
        w $w:ident, s $s:ident, b $b:ident; out $out:ident;
        stage $x:ident: $src:ty, finish $finish:ident;
        $($prep:stmt;)*
    ) => {
        let $slot = wave::workgroup_id_z();
        let Some(l) = row_layout($cols, $bits, $group_size) else { return };
        if $slot >= $k {
            return;
        }
        unsafe {
            let e = $idx.add($slot as usize).read();
            if e >= $n_experts {
                bad_expert($idx, $n_experts, $slot, $out, $rows, $status);
                return;
            }
            let lds = wave::workgroup_mem::<F32x4>() as *mut f32;
            expert_slot! {
                $T, $tensor, e, l, lds; cols $cols, rows $rows, $bits;
                w $w, s $s, b $b;
                stage $x: $src, finish $finish;
                $($prep;)*
            }
        }
    };
}

/// One slot of [`expert_gemv`] (and of `batch::moe_down_batch`), in an
/// `unsafe` context: expert `$e`'s rows of the weights, scales and biases
/// (row layout `$l`), then `compute_rows` for the bit width and load width,
/// staging `$x` in workgroup memory `$lds` and ending each row with `$finish`,
/// both defined by the caller's statements.
macro_rules! expert_slot {
    (
        $T:ty, $tensor:ident, $e:ident, $l:ident, $lds:ident; cols $cols:ident, rows $rows:ident, $bits:ident;
        w $w:ident, s $s:ident, b $b:ident;
        stage $x:ident: $src:ty, finish $finish:ident;
        $($prep:stmt;)*
    ) => {
        let expert_rows = $e as usize * $rows as usize;
        let w = $w.add(expert_rows * $l.words as usize);
        let s = $s.add(expert_rows * $l.groups as usize);
        let b = $b.add(expert_rows * $l.groups as usize);
        $($prep)*
        let wide = ($w as usize).is_multiple_of(core::mem::align_of::<Quad>()) && $l.words.is_multiple_of(QUAD_WORDS);
        if $tensor && wide && $bits == 4 {
            tensor_cores::compute_rows::<$T, $src>(w, s, b, $x, $lds, $rows, $l, $finish)
        } else if $bits == 4 {
            let st = || stage::<$src, 4>($x, $cols, $lds);
            if wide {
                compute_rows::<$T, 4, true>(w, s, b, $lds, $rows, $l, st, $finish)
            } else {
                compute_rows::<$T, 4, false>(w, s, b, $lds, $rows, $l, st, $finish)
            }
        } else {
            let st = || stage::<$src, 8>($x, $cols, $lds);
            if wide {
                compute_rows::<$T, 8, true>(w, s, b, $lds, $rows, $l, st, $finish)
            } else {
                compute_rows::<$T, 8, false>(w, s, b, $lds, $rows, $l, st, $finish)
            }
        }
    };
}

/// `act[k, f] = square(max(sum_i f(x[i]) * (q1[idx[k], f, i] * f(s1) + f(b1)), 0))`.
///
/// # Safety
/// `x [din]`, `idx [k]`, `w1 [n_experts, dff, din*bits/32]` (u32), `s1, b1
/// [n_experts, dff, din/group_size]`, `act [k, dff]` (f32), `status` null or one
/// u32. Launched with grid `(workgroups(dff), 1, k)`, [`WORKGROUP_SIZE`] threads
/// and `workgroup_mem_bytes(din, bits)` bytes of workgroup memory. `TENSOR`
/// sends 4-bit codes in 16-byte aligned weights to [`tensor_cores`]: the
/// kernels pass [`TENSOR_CORES`], the emulator's tests of that schedule `true`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_fc1_relu2<T: Elem, const TENSOR: bool>(
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
    expert_gemv! {
        T, TENSOR, slot; cols din, rows dff, bits, group_size; idx, n_experts, k, status;
        w w1, s s1, b b1; out act;
        stage x: T, finish finish;
        let out = act.add(slot as usize * dff as usize);
        let finish = |row: u32, total: f32| {
            let r = if total < 0.0 { 0.0 } else { total };
            out.add(row as usize).write(r * r);
        };
    }
}

/// `part[k, h] = scores[k] * sum_f act[k, f] * (q2[idx[k], h, f] * f(s2) + f(b2))`.
///
/// # Safety
/// `idx [k]`, `w2 [n_experts, din, dff*bits/32]` (u32), `s2, b2 [n_experts, din,
/// dff/group_size]`, `act [k, dff]`, `scores [k]`, `part [k, din]` (f32), `status`
/// null or one u32. Launched with grid `(workgroups(din), 1, k)`, [`WORKGROUP_SIZE`]
/// threads and `workgroup_mem_bytes(dff, bits)` bytes of workgroup memory.
/// `TENSOR` as for [`moe_fc1_relu2`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_down<T: Elem, const TENSOR: bool>(
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
    expert_gemv! {
        T, TENSOR, slot; cols dff, rows din, bits, group_size; idx, n_experts, k, status;
        w w2, s s2, b b2; out part;
        stage a: f32, finish finish;
        let a = act.add(slot as usize * dff as usize);
        let score = scores.add(slot as usize).read();
        let out = part.add(slot as usize * din as usize);
        let finish = |row: u32, total: f32| out.add(row as usize).write(score * total);
    }
}

/// `moe_gateup`'s activation ([`SWIGLU`] or [`GEGLU`]) of one row: `a(g) * u`
/// with `a(g) = g / (1 + e^-z)`: SiLU is `z = g`; GELU's tanh form is
/// `0.5 g (1 + tanh(y)) = g / (1 + e^(-2y))`, `y = sqrt(2/pi) (g + 0.044715 g^3)`,
/// which needs no tanh and loses nothing to cancellation near 0. `e^x` is
/// [`crate::num::exp`] (2 ulp) and the division IEEE, on every backend. Any
/// other `activation` gives NaN (the launcher refuses it first).
#[inline(always)]
pub fn gated(activation: u32, g: f32, u: f32) -> f32 {
    let z = if activation == SWIGLU {
        g
    } else if activation == GEGLU {
        2.0 * (SQRT_2_OVER_PI * mul_add(0.044715 * g, g * g, g))
    } else {
        return f32::NAN;
    };
    g / (1.0 + crate::num::exp(-z)) * u
}

/// `moe_gateup`'s `activation` for SwiGLU: `silu(g) * u` (Qwen3 MoE, dots.llm1).
pub const SWIGLU: u32 = 0;
/// `moe_gateup`'s `activation` for GeGLU with GELU's tanh form (Gemma 4).
pub const GEGLU: u32 = 1;
/// `sqrt(2 / pi)` rounded to f32.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// One slot of [`moe_gateup`] (and of `batch::moe_gateup_batch`), in an
/// `unsafe` context: expert `$e`'s gate and up rows (layout `$l`) against `$x`
/// (staged in `$lds`) into row `$slot` of `$act`. A macro, so that
/// `moe_gateup` stays the code it was (a function measured different
/// register allocation).
macro_rules! gateup_slot {
    (
        $T:ty; $x:ident, $wg:ident, $sg:ident, $bg:ident, $wu:ident, $su:ident, $bu:ident, $act:ident, $activation:ident;
        $e:ident, $slot:ident, $l:ident, $lds:ident, $din:ident, $dff:ident, $bits:ident
    ) => {
        let expert_rows = $e as usize * $dff as usize;
        let (wg, wu) = ($wg.add(expert_rows * $l.words as usize), $wu.add(expert_rows * $l.words as usize));
        let (sg, bg) = ($sg.add(expert_rows * $l.groups as usize), $bg.add(expert_rows * $l.groups as usize));
        let (su, bu) = ($su.add(expert_rows * $l.groups as usize), $bu.add(expert_rows * $l.groups as usize));
        let out = $act.add($slot as usize * $dff as usize);
        let wide = (wg as usize | wu as usize).is_multiple_of(core::mem::align_of::<Quad>())
            && $l.words.is_multiple_of(QUAD_WORDS);
        let gate_up = GateUp { wg, sg, bg, wu, su, bu, out, activation: $activation, l: $l };
        match ($bits == 4, wide) {
            (true, true) => gate_up.rows::<4, true>($lds, $din, $dff, || stage::<$T, 4>($x, $din, $lds)),
            (true, false) => gate_up.rows::<4, false>($lds, $din, $dff, || stage::<$T, 4>($x, $din, $lds)),
            (false, true) => gate_up.rows::<8, true>($lds, $din, $dff, || stage::<$T, 8>($x, $din, $lds)),
            (false, false) => gate_up.rows::<8, false>($lds, $din, $dff, || stage::<$T, 8>($x, $din, $lds)),
        }
    };
}

/// `act[k, f] = a(x . wg[idx[k], f]) * (x . wu[idx[k], f])` (see [`gated`]).
///
/// The mapping of [`moe_fc1_relu2`], over the gate matrix and then the up
/// matrix (see `GateUp::rows`), with x staged once for both. The f32 schedule
/// on every target (the tensor-core one is not used here).
///
/// # Safety
/// `x [din]`, `idx [k]`, `wg, wu [n_experts, dff, din*bits/32]` (u32), `sg, bg,
/// su, bu [n_experts, dff, din/group_size]`, `act [k, dff]` (f32), `status` null
/// or one u32. Launched as [`moe_fc1_relu2`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_gateup<T: Elem>(
    x: *const T,
    idx: *const u32,
    wg: *const u32,
    sg: *const T,
    bg: *const T,
    wu: *const u32,
    su: *const T,
    bu: *const T,
    act: *mut f32,
    activation: u32,
    n_experts: u32,
    k: u32,
    din: u32,
    dff: u32,
    bits: u32,
    group_size: u32,
    status: *mut u32,
) {
    let slot = wave::workgroup_id_z();
    let Some(l) = row_layout(din, bits, group_size) else { return };
    if slot >= k {
        return;
    }
    unsafe {
        let e = idx.add(slot as usize).read();
        if e >= n_experts {
            bad_expert(idx, n_experts, slot, act, dff, status);
            return;
        }
        let lds = wave::workgroup_mem::<F32x4>() as *mut f32;
        gateup_slot!(T; x, wg, sg, bg, wu, su, bu, act, activation; e, slot, l, lds, din, dff, bits);
    }
}

/// One expert's gate and up matrices and the slot's output row, for [`moe_gateup`].
#[derive(Clone, Copy)]
struct GateUp<T> {
    wg: *const u32,
    sg: *const T,
    bg: *const T,
    wu: *const u32,
    su: *const T,
    bu: *const T,
    out: *mut f32,
    activation: u32,
    l: RowLayout,
}

impl<T: Elem> GateUp<T> {
    /// This workgroup's rows `f` of the gate matrix, each total kept in
    /// workgroup memory after the staged x ([`gate_totals`], written and
    /// later read by the same lane), then the same rows of the up matrix,
    /// ending with `out[f] = gated(g, u)` (lane 0): two passes of
    /// [`compute_rows`], so the 4- and 8-bit schedule's code stays the one
    /// [`moe_fc1_relu2`] and [`moe_down`] run (the cost: one pipeline restart
    /// a wave). `stage` as for [`compute_rows`], run by the first pass.
    #[inline(always)]
    unsafe fn rows<const BITS: u32, const WIDE: bool>(self, lds: *mut f32, din: u32, dff: u32, stage: impl FnOnce()) {
        let GateUp { wg, sg, bg, wu, su, bu, out, activation, l } = self;
        let first_row = wave::workgroup_id_x() * ROWS_PER_WORKGROUP;
        let gates = unsafe { lds.add(gate_totals(din, BITS) as usize) };
        let keep_gate = |row: u32, total: f32| unsafe { gates.add((row - first_row) as usize).write(total) };
        let finish = |row: u32, total: f32| unsafe {
            let gate = gates.add((row - first_row) as usize).read();
            out.add(row as usize).write(gated(activation, gate, total));
        };
        unsafe {
            compute_rows::<T, BITS, WIDE>(wg, sg, bg, lds, dff, l, stage, keep_gate);
            compute_rows::<T, BITS, WIDE>(wu, su, bu, lds, dff, l, || {}, finish);
        }
    }
}

pub mod batch;

/// `moe_down` for MLX's 6-bit codes (four values in three bytes: value `j` of a
/// row is bits `6 j .. 6 j + 6` of the row read as one little-endian bit
/// string). Same arguments, grid and output as [`moe_down`] with `bits = 6`.
///
/// Lane `l` takes the row's units of 16 values (three words) `l, l + 32, ...`;
/// a unit's values are one staged chunk of the 8-bit layout (16 floats and
/// their sum), and all lie in one group. One unit's loads per lane at a time:
/// simpler and slower than the 4- and 8-bit schedule (6-bit serves one model's
/// down projection).
///
/// # Safety
/// As for [`moe_down`], with `w2 [n_experts, din, dff*6/32]`: `dff` a
/// multiple of the group size.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_down6<T: Elem>(
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
    let Some(l) = row_layout_6bit(dff, bits, group_size) else { return };
    if slot >= k {
        return;
    }
    unsafe {
        let e = idx.add(slot as usize).read();
        if e >= n_experts {
            bad_expert(idx, n_experts, slot, part, din, status);
            return;
        }
        let lds = wave::workgroup_mem::<F32x4>() as *mut f32;
        stage::<f32, 8>(act.add(slot as usize * dff as usize), dff, lds);
        let expert_rows = e as usize * din as usize;
        let score = scores.add(slot as usize).read();
        let out = part.add(slot as usize * din as usize);
        let first_row = wave::workgroup_id_x() * ROWS_PER_WORKGROUP + wave::wave_id();
        let lane = wave::lane_id();
        let units = dff / SIX_BIT_UNIT_VALUES;
        let mut row = first_row;
        let mut i = 0;
        while i < ROWS_PER_WAVE && row < din {
            let r = expert_rows + row as usize;
            let (w, s, b) =
                (w2.add(r * l.words as usize), s2.add(r * l.groups as usize), b2.add(r * l.groups as usize));
            let mut acc = 0.0f32;
            let mut u = lane;
            while u < units {
                let p = w.add((u * SIX_BIT_UNIT_WORDS) as usize);
                let words = [p.read(), p.add(1).read(), p.add(2).read()];
                let g = ((u * SIX_BIT_UNIT_VALUES) >> l.group_shift) as usize;
                let (sc, bi) = (s.add(g).read().to_f32(), b.add(g).read().to_f32());
                let xs = lds.add(staged_chunk(u, 8) as usize);
                let dot = six_bit_dot(words, xs);
                let xsum = xs.add(values_per_chunk(8) as usize).read();
                acc = mul_add(sc, dot, acc);
                acc = mul_add(bi, xsum, acc);
                u += wave::WAVE_SIZE;
            }
            let total = wave::wave_sum_f32(acc);
            if lane == 0 {
                out.add(row as usize).write(score * total);
            }
            row += WAVES;
            i += 1;
        }
    }
}

/// `sum_j x_j q_j` over the 16 six-bit codes of three words (`words[0]` holds
/// the lowest bits), from +0.0 in value order; `xs` the unit's staged values.
#[inline(always)]
unsafe fn six_bit_dot(words: [u32; 3], xs: *const f32) -> f32 {
    let low = words[0] as u64 | (words[1] as u64) << 32;
    let code = |j: u32| -> f32 {
        let bit = 6 * j;
        let q = if bit + 6 <= 64 {
            (low >> bit) as u32
        } else if bit < 64 {
            (low >> bit) as u32 | words[2] << (64 - bit)
        } else {
            words[2] >> (bit - 64)
        };
        (q & 0x3F) as f32
    };
    let mut d = 0.0f32;
    for j in 0..SIX_BIT_UNIT_VALUES {
        d = mul_add(unsafe { xs.add(j as usize).read() }, code(j), d);
    }
    d
}

/// `out[h] = T(sum_k part[k, h])`, the sum in f32 over k ascending from +0.0, one
/// rounding. One thread per h; the loads of [`COMBINE_BATCH`] slots are issued
/// together, then added in slot order.
///
/// # Safety
/// `part [k, din]` (f32), `out [din]`; any 1-D grid covering `din` threads.
#[inline(always)]
pub unsafe fn moe_combine<T: Elem>(part: *const f32, out: *mut T, k: u32, din: u32) {
    let h = wave::global_id_x();
    if h >= din as u64 {
        return;
    }
    let (h, k, din) = (h as usize, k as usize, din as usize);
    unsafe { out.add(h).write(T::from_f32(slot_sum(part, k, din, h))) };
}

/// `sum_j part[j, h]` for `j < k`, in f32 from +0.0 in slot order: the sum of
/// [`moe_combine`], shared with `moe_down_combine` so that both round alike.
///
/// # Safety
/// `part [k, din]` (f32), `h < din`.
#[inline(always)]
pub(crate) unsafe fn slot_sum(part: *const f32, k: usize, din: usize, h: usize) -> f32 {
    let mut acc = 0.0f32;
    let mut first = 0;
    while first < k {
        let mut v = [0.0f32; COMBINE_BATCH];
        crate::unroll!(b in 0..COMBINE_BATCH => {
            if first + b < k {
                v[b] = unsafe { part.add((first + b) * din + h).read() };
            }
        });
        crate::unroll!(b in 0..COMBINE_BATCH => {
            if first + b < k {
                acc = acc + v[b];
            }
        });
        first += COMBINE_BATCH;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PTX `prmt.b32` in its default mode, from the PTX ISA: byte `i` of the
    /// result is byte `(selector >> 4 i) & 7` of `b:a` (`a` bytes 0-3); the
    /// selectors used here never set the sign-replicate bit.
    fn prmt_model(a: u32, b: u32, selector: u32) -> u32 {
        let bytes = (b as u64) << 32 | a as u64;
        (0..4).fold(0, |r, i| {
            let s = (selector >> (4 * i)) & 0xF;
            assert!(s < 8, "sign replication is not modelled");
            r | (((bytes >> (8 * s)) & 0xFF) as u32) << (8 * i)
        })
    }

    /// NVIDIA's 4-bit path, as `word_dot` and `nibble_f32` write it but with
    /// `prmt` modelled: every code in every nibble of a word, beside other
    /// nibbles, becomes `c` with `32 c - 16 = q` exactly, in the value order
    /// of the AMD path; and `x * c` is exact for every x of 11 significant bits.
    #[test]
    fn nvidia_4bit_codes_are_exact_affine_images() {
        let (scale, offset) = NIBBLE_AFFINE;
        for j in 0..8u32 {
            for q in 0..16u32 {
                for other in [0u32, 0xFFFF_FFFF, 0x9E37_79B1] {
                    let w = (other & !(0xF << (4 * j))) | q << (4 * j);
                    let (lo, hi) = ((w << 3) & NIBBLE_MASK, (w >> 1) & NIBBLE_MASK);
                    let src = if j % 2 == 0 { lo } else { hi };
                    let c = f32::from_bits(prmt_model(src, NIBBLE_MAGIC, nibble_selector(j / 2)));
                    assert_eq!(c, (q as f32 + 16.0) / 32.0, "nibble {j} = {q} of {w:#010x}");
                    assert_eq!(scale * c - offset, q as f32);
                    let x = f32::from_bits(0x3F80_0000 | 0x7FE000); // 11 significant bits
                    assert_eq!((x as f64 * c as f64) as f32 as f64, x as f64 * c as f64);
                }
            }
        }
    }

    /// `code_scale` and `code_bias` with NVIDIA's affine: `s sum x q + b sum x`
    /// equals `(32 s) sum x c + (b - 16 s) sum x` to f32 rounding.
    #[test]
    fn nvidia_group_factors_give_the_same_sum() {
        let (scale, offset) = NIBBLE_AFFINE;
        let mut r = 0x2545_F491_u32;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 17;
            r ^= r << 5;
            r
        };
        for _ in 0..1000 {
            let s = (next() % 1000) as f32 / 65536.0 + 1e-4;
            let b = -((next() % 1000) as f32) / 8192.0;
            let xs: [f32; 8] = core::array::from_fn(|_| (next() % 2001) as f32 / 1000.0 - 1.0);
            let qs: [u32; 8] = core::array::from_fn(|_| next() % 16);
            let want: f64 = xs.iter().zip(&qs).map(|(&x, &q)| x as f64 * (s as f64 * q as f64 + b as f64)).sum();
            let dot_c: f32 = xs.iter().zip(&qs).map(|(&x, &q)| x * ((q as f32 + offset) / scale)).sum();
            let xsum: f32 = xs.iter().sum();
            let got = mul_add(code_bias(s, b, NIBBLE_AFFINE), xsum, code_scale(s, NIBBLE_AFFINE) * dot_c);
            let size: f64 =
                xs.iter().zip(&qs).map(|(&x, &q)| (x as f64 * (s as f64 * q as f64 + b as f64)).abs()).sum();
            assert!((got as f64 - want).abs() <= 1e-5 * size.max(1e-3), "{got} against {want}");
        }
    }
}
