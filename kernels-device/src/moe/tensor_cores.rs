//! NVIDIA's schedule of `moe_fc1_relu2` and `moe_down` for 4-bit codes in
//! 16-byte aligned weights: the codes are multiplied on the tensor cores, one
//! `mma.m16n8k16` (bf16 in, f32 sums) per 16 codes of 16 rows, instead of one
//! f32 fma per code, which left the f32 schedule bound by instruction issue on
//! an H200 (docs/performance.md, "The MoE: where the time goes"). 8-bit codes
//! keep the f32 schedule, which measured faster for them.
//!
//! # Codes and x as bf16
//!
//! `(w >> s) & 0x000F000F | 0x43004300` is the bf16 pair `128 + n` of nibbles
//! `s/4` and `s/4 + 4`; one `fma.rn.bf16x2` by 1 and -128 leaves `n`, exactly.
//! The codes go in without the offset because the tensor cores' f32 sums are
//! not rounded to nearest: with `128 + n` the error grew with the sum of the
//! offsets and failed the kernels' tests on an H200.
//!
//! Each staged x is split into two bf16, `hi = bf16(x)` and `lo = bf16(x -
//! hi)`: exact for bf16 and f16 inputs, 16 significant bits of an f32 (down's
//! activation). hi and lo go to neighbouring columns of B, so one product sums
//! both: a matrix-vector product leaves the tensor cores columns to spare.
//!
//! # Fragments
//!
//! A wave multiplies a tile of [`MMA_ROWS`] rows over one of [`MMA_SLICES`]
//! slices of the rows' blocks (a block is [`MMA_BLOCK_QUADS`] quads; the wave
//! takes blocks `slice + MMA_SLICES j`, loading block `j + 1` while it
//! multiplies block `j`). Lane `l = 4 g + t` loads quad `t` of each block for
//! rows `g` and `g + 8` of the tile (one 16-byte load each) and puts only those
//! codes in the k-slots it owns in A (columns `2t, 2t+1, 2t+8, 2t+9`:
//! [`wave::mma_bf16_16x8x16`]). In B the lanes of group `t` own the same
//! k-slots; they hold quad `t`'s x there, hi in column `2t` and lo in column
//! `2t + 1`, and zeros in every other column. So columns `2t` and `2t + 1` of
//! the product collect quad `t`'s codes only, and lane `l` finds its quad's dot
//! product for row `g` in `c[0] + c[1]` and for row `g + 8` in `c[2] + c[3]`:
//! one quad, one group, one scale and bias, applied in f32 as in the f32
//! schedule (`s sum x q + b sum x`).
//!
//! Workgroup memory holds, per quad, the B fragments of its x (16 words of hi
//! pairs, then 16 of lo pairs, in the order the products read them) and its
//! sum, in the f32 schedule's chunks; then 4 zero floats and the slices'
//! partial sums ([`mma_zeros`], [`mma_partials`]). A wave's partial sums are
//! added over its four quads by a xor butterfly, then over the slices in slice
//! order.

use crate::num::math::mul_add;

use crate::geometry::moe::{
    MMA_BLOCK_QUADS, MMA_ROWS, MMA_SLICES, QUAD_WORDS, ROWS_PER_WORKGROUP, RowLayout, STAGE_VALUES, WORKGROUP_SIZE,
    group_of_quad, mma_partials, mma_zeros, staged_chunk, values_per_chunk, values_per_word,
};
use crate::num::{Bf16, Elem};
use crate::vector::U32x4;
use crate::wave;

use super::{Stage, stage_values};

/// The only width this schedule takes.
const BITS: u32 = 4;
/// Values of a quad, and words of its B fragments (hi or lo).
const QUAD_VALUES: u32 = values_per_chunk(BITS);
const FRAGMENT_WORDS: u32 = QUAD_VALUES / 2;

/// Bf16 pairs: 1 and -128.
const ONE: u32 = 0x3F80_3F80;
const MINUS_128: u32 = 0xC300_C300;

/// `a * b + c` on two bf16 pairs, rounded once per half (`fma.rn.bf16x2`,
/// sm_80); elsewhere the same in f32 (exact in its one use here).
#[inline(always)]
fn fma_bf16x2(a: u32, b: u32, c: u32) -> u32 {
    #[cfg(target_arch = "nvptx64")]
    {
        // LLVM's `<2 x bfloat>` is declared as two u16 lanes (rustc casts
        // them), moved in and out of a u32 whole: SIMD lanes cannot be indexed.
        #[repr(simd)]
        #[derive(Clone, Copy)]
        struct Bf16x2([u16; 2]);
        #[allow(improper_ctypes)]
        unsafe extern "unadjusted" {
            #[link_name = "llvm.nvvm.fma.rn.bf16x2"]
            fn fma_rn_bf16x2(a: Bf16x2, b: Bf16x2, c: Bf16x2) -> Bf16x2;
        }
        unsafe {
            let pair = |v: u32| core::mem::transmute::<u32, Bf16x2>(v);
            core::mem::transmute::<Bf16x2, u32>(fma_rn_bf16x2(pair(a), pair(b), pair(c)))
        }
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        let half = |v: u32, h: u32| Bf16::from_bits_u32(v >> (16 * h)).to_f32();
        let one = |h: u32| Bf16::from_f32(mul_add(half(a, h), half(b, h), half(c, h))).to_bits_u32();
        one(0) | one(1) << 16
    }
}

/// Nibbles `s/4` and `s/4 + 4` of `w` as a bf16 pair (low and high half), exactly.
#[inline(always)]
fn codes(w: u32, s: u32) -> u32 {
    fma_bf16x2(((w >> s) & 0x000F_000F) | 0x4300_4300, ONE, MINUS_128)
}

/// `(hi, lo)`: the bf16 bits of `x` and of what remains, `x - hi`.
#[inline(always)]
fn split_bf16(x: f32) -> (u32, u32) {
    let rounded = Bf16::from_f32(x).to_bits_u32();
    // A finite x that rounds to infinity keeps the largest bf16 of its sign
    // (its top half), and an infinite or NaN x is all in hi: so hi + lo is
    // never inf - inf where x is finite, and stays x where it is not.
    let hi = if x.is_finite() && rounded & 0x7FFF == 0x7F80 { x.to_bits() >> 16 } else { rounded };
    let lo = if x.is_finite() { Bf16::from_f32(x - Bf16::from_bits_u32(hi).to_f32()).to_bits_u32() } else { 0 };
    (hi, lo)
}

/// Stages `cols` values of `src` as B fragments (see the module
/// documentation) and each quad's sum of `hi + lo`, zeroes the 4 zero floats,
/// and waits for the whole workgroup. Thread `t` takes values `8 (t + 256 p)
/// .. + 8` in pass `p`: one word of codes, whose pairs are `(x_j, x_j+4)`, `j
/// < 4`. All threads of the workgroup must call it.
#[inline(always)]
unsafe fn stage<S: Elem>(src: *const S, cols: u32, lds: *mut f32) {
    const { assert!(STAGE_VALUES == 8 && QUAD_VALUES == 32, "a thread stages one word of 4-bit codes") };
    let t = wave::thread_id();
    let per_pass = WORKGROUP_SIZE * STAGE_VALUES;
    let passes = cols.div_ceil(per_pass);
    let vector = (src as usize).is_multiple_of(core::mem::align_of::<Stage<S>>());
    if t == 0 {
        unsafe { (lds.add(mma_zeros(cols, BITS) as usize) as *mut U32x4).write(U32x4::new([0; 4])) };
    }
    let mut p = 0;
    while p < passes {
        let first = (p * WORKGROUP_SIZE + t) * STAGE_VALUES;
        let active = first < cols;
        let mut v = [0.0f32; STAGE_VALUES as usize];
        if active {
            v = unsafe { stage_values(src, first, vector) };
        }
        let split = v.map(split_bf16);
        let widen = |bits: u32| Bf16::from_bits_u32(bits).to_f32();
        let mut sum = 0.0f32;
        crate::unroll!(j in 0..8 => {
            sum = sum + (widen(split[j].0) + widen(split[j].1));
        });
        // The 4 threads of a quad; every lane takes part in the exchanges, active or not.
        sum = sum + wave::shfl_xor_f32::<1>(sum);
        sum = sum + wave::shfl_xor_f32::<2>(sum);
        if active {
            let (c, off) = (first / QUAD_VALUES, first % QUAD_VALUES);
            let (mut hi, mut lo) = ([0u32; 4], [0u32; 4]);
            crate::unroll!(j in 0..4 => {
                hi[j] = split[j].0 | split[j + 4].0 << 16;
                lo[j] = split[j].1 | split[j + 4].1 << 16;
            });
            unsafe {
                let dst = lds.add((staged_chunk(c, BITS) + off / 2) as usize);
                (dst as *mut U32x4).write(U32x4::new(hi));
                (dst.add(FRAGMENT_WORDS as usize) as *mut U32x4).write(U32x4::new(lo));
                if off == 0 {
                    lds.add((staged_chunk(c, BITS) + QUAD_VALUES) as usize).write(sum);
                }
            }
        }
        p += 1;
    }
    wave::barrier();
}

/// One lane's loads for one block: its quad of rows `g` and `g + 8`, and the
/// raw bits of their scales and biases.
#[derive(Clone, Copy)]
struct Block {
    w: [U32x4; 2],
    s: [u32; 2],
    b: [u32; 2],
}

/// This lane's two rows of the expert's matrix and where its quads are.
struct Lane<T> {
    w: [*const U32x4; 2],
    s: [*const T; 2],
    b: [*const T; 2],
    /// Quads per row.
    quads: u32,
    /// This wave's slice, and this lane's quad in a block.
    slice: u32,
    t: u32,
    group_shift: u32,
}

impl<T: Elem> Lane<T> {
    /// This lane's quad of the wave's `j`-th block, and whether it is in the row.
    #[inline(always)]
    fn quad(&self, j: u32) -> (u32, bool) {
        let q = (self.slice + MMA_SLICES * j) * MMA_BLOCK_QUADS + self.t;
        (q, q < self.quads)
    }

    /// The loads of the wave's `j`-th block. A lane whose quad is past the
    /// row's end loads the row's last quad (a cache hit), so the loads need no
    /// branch per lane.
    #[inline(always)]
    unsafe fn load(&self, j: u32) -> Block {
        let (q, live) = self.quad(j);
        let q = if live { q } else { self.quads - 1 };
        let g = group_of_quad(q, BITS, self.group_shift) as usize;
        unsafe {
            Block {
                w: [self.w[0].add(q as usize).read(), self.w[1].add(q as usize).read()],
                s: [self.s[0].add(g).read().to_bits_u32(), self.s[1].add(g).read().to_bits_u32()],
                b: [self.b[0].add(g).read().to_bits_u32(), self.b[1].add(g).read().to_bits_u32()],
            }
        }
    }
}

/// The products of one block: this lane's quad's `sum x q` with rows `g` and
/// `g + 8`. `frags` points at this lane's B fragments, `step` floats apart (0
/// for the zero floats). All lanes of the wave call it.
#[inline(always)]
unsafe fn block_products(w: &[U32x4; 2], frags: *const f32, step: usize) -> [f32; 2] {
    let mut b = [0u32; FRAGMENT_WORDS as usize];
    crate::unroll!(r in 0..4 => {
        let f = unsafe { (frags.add(r * step) as *const U32x4).read() }.0;
        b[4 * r..4 * r + 4].copy_from_slice(&f);
    });
    let (wa, wb) = (w[0].0, w[1].0);
    let mut c = [0.0f32; 4];
    crate::unroll!(i in 0..4 => {
        crate::unroll!(h in 0..2 => {
            let s = 8 * h as u32;
            let a = [codes(wa[i], s), codes(wb[i], s), codes(wa[i], s + 4), codes(wb[i], s + 4)];
            c = wave::mma_bf16_16x8x16(a, [b[4 * i + 2 * h], b[4 * i + 2 * h + 1]], c);
        });
    });
    [c[0] + c[1], c[2] + c[3]]
}

/// The workgroup's rows of 4-bit codes (all its threads call it): for each row
/// below `rows`, `finish(row, total)` on one thread. `w, s, b` point at the
/// expert's matrix (`w` 16-byte aligned, rows of `l.words` words, a multiple
/// of 4); `x` is the row they multiply, staged ([`stage`]) once the first
/// block's loads are issued.
#[inline(always)]
pub(super) unsafe fn compute_rows<T: Elem, S: Elem>(
    w: *const u32,
    s: *const T,
    b: *const T,
    x: *const S,
    lds: *mut f32,
    rows: u32,
    l: RowLayout,
    mut finish: impl FnMut(u32, f32),
) {
    let (wave_id, lane_id) = (wave::wave_id(), wave::lane_id());
    let (g, t) = (lane_id / 4, lane_id % 4);
    let (tile, slice) = (wave_id / MMA_SLICES, wave_id % MMA_SLICES);
    // Uniform over the workgroup: no row to clamp to (the host never launches this).
    if rows == 0 {
        return;
    }
    let first_row = wave::workgroup_id_x() * ROWS_PER_WORKGROUP;
    let row = first_row + tile * MMA_ROWS + g;
    // Rows past the end compute on the last row and are never written.
    let lane_rows = [row.min(rows - 1) as usize, (row + 8).min(rows - 1) as usize];
    let quads = l.words / QUAD_WORDS;
    let lane = unsafe {
        Lane {
            w: lane_rows.map(|r| (w as *const U32x4).add(r * quads as usize)),
            s: lane_rows.map(|r| s.add(r * l.groups as usize)),
            b: lane_rows.map(|r| b.add(r * l.groups as usize)),
            quads,
            slice,
            t,
            group_shift: l.group_shift,
        }
    };
    let all_blocks = quads.div_ceil(MMA_BLOCK_QUADS);
    // Uniform over the wave.
    let blocks = if slice < all_blocks { (all_blocks - slice).div_ceil(MMA_SLICES) } else { 0 };
    let cols = l.words * values_per_word(BITS);
    let zeros = unsafe { lds.add(mma_zeros(cols, BITS) as usize) as *const f32 };

    let mut cur =
        if blocks > 0 { unsafe { lane.load(0) } } else { Block { w: [U32x4::new([0; 4]); 2], s: [0; 2], b: [0; 2] } };
    unsafe { stage(x, cols, lds) };
    let mut acc = [0.0f32; 2];
    let mut j = 0;
    while j < blocks {
        let next = if j + 1 < blocks { unsafe { lane.load(j + 1) } } else { cur };
        wave::schedule_fence();
        let (q, live) = lane.quad(j);
        let chunk = staged_chunk(q, BITS);
        // Lanes 9t and 9t + 4 (g = 2t, 2t + 1) hold quad t's hi and lo columns; the others, zeros.
        let (frags, step) = if live && g / 2 == t {
            (unsafe { lds.add((chunk + (g % 2) * FRAGMENT_WORDS) as usize) as *const f32 }, 4)
        } else {
            (zeros, 0)
        };
        let dots = unsafe { block_products(&cur.w, frags, step) };
        if live {
            let xsum = unsafe { lds.add((chunk + QUAD_VALUES) as usize).read() };
            for r in 0..2 {
                let scale = T::from_bits_u32(cur.s[r]).to_f32();
                let bias = T::from_bits_u32(cur.b[r]).to_f32();
                acc[r] = mul_add(scale, dots[r], acc[r]);
                acc[r] = mul_add(bias, xsum, acc[r]);
            }
        }
        cur = next;
        j += 1;
    }
    let partials = unsafe { lds.add(mma_partials(cols, BITS) as usize) };
    for r in 0..2 {
        let v = acc[r] + wave::shfl_xor_f32::<1>(acc[r]);
        let v = v + wave::shfl_xor_f32::<2>(v);
        if t == 0 {
            let at = slice * ROWS_PER_WORKGROUP + tile * MMA_ROWS + g + 8 * r as u32;
            unsafe { partials.add(at as usize).write(v) };
        }
    }
    wave::barrier();
    let tid = wave::thread_id();
    if tid < ROWS_PER_WORKGROUP && first_row + tid < rows {
        let mut total = 0.0f32;
        for sl in 0..MMA_SLICES {
            total = total + unsafe { partials.add((sl * ROWS_PER_WORKGROUP + tid) as usize).read() };
        }
        finish(first_row + tid, total);
    }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use super::*;
    use crate::emulator::{LaunchConfig, launch};
    use crate::geometry::moe::{row_layout, workgroup_mem_bytes, workgroups};
    use crate::moe::{moe_down, moe_fc1_relu2};
    use crate::num::f16;
    use crate::vector::U32x4;

    struct Rng(u32);
    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 17;
            self.0 ^= self.0 << 5;
            self.0
        }
        fn unit(&mut self) -> f32 {
            (self.next() % 2001) as f32 / 1000.0 - 1.0
        }
    }

    /// One expert slot's matrix `[rows, cols]` at `bits`, its scales and biases.
    struct Matrix<T> {
        words: Vec<U32x4>,
        s: Vec<T>,
        b: Vec<T>,
    }

    impl<T: Elem> Matrix<T> {
        fn random(rows: u32, cols: u32, bits: u32, gs: u32, rng: &mut Rng) -> Self {
            let words = (rows * cols * bits / 32) as usize;
            let groups = (rows * cols / gs) as usize;
            Matrix {
                words: (0..words / 4).map(|_| U32x4::new([0; 4].map(|_: u32| rng.next()))).collect(),
                s: (0..groups).map(|_| T::from_f32((rng.next() % 1000) as f32 / 65536.0 + 1e-4)).collect(),
                b: (0..groups).map(|_| T::from_f32(-((rng.next() % 1000) as f32) / 8192.0)).collect(),
            }
        }

        /// `(sum_i x_i w_ri, sum_i |x_i w_ri|)` in f64.
        fn row_dot(&self, r: usize, x: &[f64], bits: u32, gs: u32) -> (f64, f64) {
            let words: &[u32] =
                unsafe { core::slice::from_raw_parts(self.words.as_ptr() as *const u32, self.words.len() * 4) };
            let per_word = (32 / bits) as usize;
            let cols = x.len();
            let (mut dot, mut size) = (0.0, 0.0);
            for (i, &xi) in x.iter().enumerate() {
                let word = words[(r * cols + i) / per_word];
                let q = (word >> (bits as usize * (i % per_word))) & ((1 << bits) - 1);
                let g = (r * cols + i) / gs as usize;
                let wv = q as f64 * self.s[g].to_f32() as f64 + self.b[g].to_f32() as f64;
                dot += xi * wv;
                size += (xi * wv).abs();
            }
            (dot, size)
        }
    }

    fn emulate(grid: [u32; 3], cols: u32, bits: u32, kernel: &(dyn Fn() + Sync)) {
        let cfg = LaunchConfig {
            grid,
            workgroup_size: WORKGROUP_SIZE,
            workgroup_mem_bytes: workgroup_mem_bytes(cols, bits) as usize,
        };
        unsafe { launch(&cfg, kernel) }.unwrap();
    }

    /// `moe_fc1_relu2` and `moe_down` with the tensor-core schedule named, one
    /// expert in one slot, against f64 sums of the dequantized weights: the
    /// pre-activation within `2e-5` of the sum of the terms' sizes.
    fn check<T: Elem>(bits: u32, gs: u32, cols: u32, rows: u32, seed: u32) {
        check_with::<T>(bits, gs, cols, rows, seed, 0);
    }

    /// [`check`] with x starting `x_offset` elements into its buffer (1: not
    /// aligned for the vector staging loads).
    fn check_with<T: Elem>(bits: u32, gs: u32, cols: u32, rows: u32, seed: u32, x_offset: usize) {
        let mut rng = Rng(seed);
        assert!(row_layout(cols, bits, gs).is_some());
        let m = Matrix::<T>::random(rows, cols, bits, gs, &mut rng);
        let x_buffer: Vec<T> = (0..cols as usize + x_offset).map(|_| T::from_f32(rng.unit())).collect();
        let x = &x_buffer[x_offset..];
        let xf: Vec<f64> = x.iter().map(|v| v.to_f32() as f64).collect();
        let idx = [0u32];
        let mut act = std::vec![f32::NAN; rows as usize];
        let (xp, ip, wp, sp, bp, ap) = (
            x.as_ptr() as usize,
            idx.as_ptr() as usize,
            m.words.as_ptr() as usize,
            m.s.as_ptr() as usize,
            m.b.as_ptr() as usize,
            act.as_mut_ptr() as usize,
        );
        emulate([workgroups(rows), 1, 1], cols, bits, &|| unsafe {
            moe_fc1_relu2::<T, true>(
                xp as _,
                ip as _,
                wp as _,
                sp as _,
                bp as _,
                ap as _,
                1,
                1,
                cols,
                rows,
                bits,
                gs,
                core::ptr::null_mut(),
            )
        });
        for r in 0..rows as usize {
            let (dot, size) = m.row_dot(r, &xf, bits, gs);
            let want = dot.max(0.0) * dot.max(0.0);
            let tol = 2e-5 * size * (2.0 * dot.abs() + 2e-5 * size) + 1e-30;
            assert!(
                (act[r] as f64 - want).abs() <= tol,
                "fc1 {} bits {bits} gs {gs} cols {cols} row {r}: {} against {want}",
                T::NAME,
                act[r]
            );
        }
        // moe_down over the same matrix, with f32 activations and a score.
        let a: Vec<f32> = (0..cols).map(|_| rng.unit() * 3.0).collect();
        let af: Vec<f64> = a.iter().map(|&v| v as f64).collect();
        let score = [0.75f32];
        let mut part = std::vec![f32::NAN; rows as usize];
        let (app, scp, pp) = (a.as_ptr() as usize, score.as_ptr() as usize, part.as_mut_ptr() as usize);
        emulate([workgroups(rows), 1, 1], cols, bits, &|| unsafe {
            moe_down::<T, true>(
                ip as _,
                wp as _,
                sp as _,
                bp as _,
                app as _,
                scp as _,
                pp as _,
                1,
                1,
                rows,
                cols,
                bits,
                gs,
                core::ptr::null_mut(),
            )
        });
        for r in 0..rows as usize {
            let (dot, size) = m.row_dot(r, &af, bits, gs);
            let want = 0.75 * dot;
            assert!(
                (part[r] as f64 - want).abs() <= 2e-5 * size,
                "down {} bits {bits} gs {gs} cols {cols} row {r}: {} against {want}",
                T::NAME,
                part[r]
            );
        }
    }

    /// Row lengths with a part-empty last block (352, 448), whole blocks
    /// (384), fewer quads than a block (32, 96: waves with no block), blocks
    /// spread unevenly over the slices (2688) and the longest rows (12288);
    /// row counts with a part-empty last tile and workgroup, and one row.
    fn shapes() -> [(u32, u32, u32); 7] {
        [(32, 352, 40), (64, 448, 21), (128, 384, 33), (32, 32, 1), (32, 96, 17), (64, 2688, 48), (128, 12288, 3)]
    }

    #[test]
    fn tensor_schedule_4bit_f32() {
        for (i, (gs, cols, rows)) in shapes().into_iter().enumerate() {
            check::<f32>(4, gs, cols, rows, 11 + i as u32);
        }
    }

    #[test]
    fn tensor_schedule_4bit_bf16() {
        for (i, (gs, cols, rows)) in shapes().into_iter().enumerate() {
            check::<Bf16>(4, gs, cols, rows, 21 + i as u32);
        }
    }

    #[test]
    fn tensor_schedule_4bit_f16() {
        for (i, (gs, cols, rows)) in shapes().into_iter().enumerate() {
            check::<f16>(4, gs, cols, rows, 31 + i as u32);
        }
    }

    /// x not aligned for the staging's vector loads: one load per value.
    #[test]
    fn tensor_schedule_unaligned_x() {
        check_with::<Bf16>(4, 64, 448, 21, 71, 1);
        check_with::<f32>(4, 32, 352, 40, 72, 1);
    }

    /// The split of x into two bf16: exact for bf16 and f16 values, 16
    /// significant bits of an f32 (from 2^-100 up), both halves finite for a
    /// finite x (so never `inf - inf`), and all of a non-finite x in hi.
    #[test]
    fn split_bf16_edges() {
        let widen = |bits: u32| Bf16::from_bits_u32(bits).to_f32();
        let sum = |x: f32| {
            let (hi, lo) = split_bf16(x);
            widen(hi) + widen(lo)
        };
        for x in
            [1.0f32, -0.0, 3.140625, f16::MAX.to_f32(), f16::MIN_POSITIVE.to_f32() / 1024.0, 1.0 + 2.0f32.powi(-10)]
        {
            assert_eq!(sum(x), x, "{x} is a bf16 or an f16 value");
        }
        let mut r = Rng(5);
        for _ in 0..10000 {
            let x = f32::from_bits(r.next() & 0x7F7F_FFFF | (r.next() & 0x8000_0000));
            if x.abs() < 2.0f32.powi(-100) {
                continue; // lo may be subnormal there: fewer bits, within 2^-133 of x
            }
            assert!(((sum(x) - x) / x).abs() <= 2.0f32.powi(-16), "{x}");
        }
        for x in [f32::MAX, -f32::MAX, f32::from_bits(0x7F7F_8000)] {
            let (hi, lo) = split_bf16(x);
            assert_eq!(hi, x.to_bits() >> 16, "{x}: the largest bf16 of its sign");
            assert!(widen(lo).is_finite() && widen(lo).abs() <= 2.0f32.powi(120), "{x}");
        }
        assert_eq!(split_bf16(f32::INFINITY), (0x7F80, 0));
        assert_eq!(split_bf16(f32::NEG_INFINITY), (0xFF80, 0));
        let (hi, lo) = split_bf16(f32::from_bits(0x7F80_0001));
        assert!(widen(hi).is_nan() && lo == 0, "a NaN stays a NaN");
    }

    /// 8-bit codes with the tensor-core schedule named: the f32 schedule runs.
    #[test]
    fn eight_bit_codes_keep_the_f32_schedule() {
        for (i, (gs, cols, rows)) in shapes().into_iter().enumerate() {
            check::<Bf16>(8, gs, cols, rows, 51 + i as u32);
        }
    }
}
