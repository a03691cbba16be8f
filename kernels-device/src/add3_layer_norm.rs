//! `add3_layer_norm`: the three-way residual add of Cohere2 fused with the next
//! LayerNorm (docs/contracts.md, section 4), byte-identical to MLX-ROCm's unfused
//! pair. The launch geometry and every reduction order are part of the contract:
//! one workgroup of 256 threads per row; thread `t` owns the elements
//! `1024*k + 4*t + j`; sums in ownership order, a xor butterfly per wave, the
//! eight wave totals combined by the same butterfly (the contract has wave 0 do
//! it and broadcast the total; here every wave does it, which gives the same
//! bits: see `workgroup_sum`).

// Sums are spelled `s = s + v`, as in the contract (their order is the point).
#![allow(clippy::assign_op_pattern)]

use crate::num::math::{mul_add, sqrt};
use core::mem::MaybeUninit;

use crate::geometry::add3_layer_norm::{CHUNK_STRIDE, CHUNKS, MAX_D, SLOT_SUM, SLOT_VAR, WAVES};
use crate::num::Elem;
use crate::vector::{U32x2, U32x4};
use crate::wave;

// The loops over a thread's chunks are `unroll!(k in 0..N, at most 7 => ..)`.
const _: () = assert!(CHUNKS == 7, "the chunk loops unroll at most 7 chunks");

/// Loads four consecutive elements with one vector access (8 bytes for 16-bit
/// types, 16 for f32).
///
/// # Safety
/// `p` is aligned to `4 * T::BYTES` and points to four elements.
#[inline(always)]
unsafe fn load4<T: Elem>(p: *const T) -> [T; 4] {
    unsafe { unpack4(load4_words(p)) }
}

/// The words of [`load4`]'s access, as loaded: for 16-bit types the first two
/// hold the four elements and the others stay uninitialized, so that loads
/// held for later take the fewest registers.
///
/// # Safety
/// As for [`load4`].
#[inline(always)]
unsafe fn load4_words<T: Elem>(p: *const T) -> [MaybeUninit<u32>; 4] {
    let mut w = [MaybeUninit::uninit(); 4];
    unsafe {
        if T::BYTES == 2 {
            // Two 32-bit words, not a u64: 64-bit shifts cost two instructions on NVIDIA.
            let v = (p as *const U32x2).read().0;
            (w[0], w[1]) = (MaybeUninit::new(v[0]), MaybeUninit::new(v[1]));
        } else {
            let v = (p as *const U32x4).read().0;
            crate::unroll!(i in 0..4 => { w[i] = MaybeUninit::new(v[i]); });
        }
    }
    w
}

/// The four elements of [`load4_words`]' words.
///
/// # Safety
/// `w` is what [`load4_words`] returned.
#[inline(always)]
unsafe fn unpack4<T: Elem>(w: [MaybeUninit<u32>; 4]) -> [T; 4] {
    unsafe {
        if T::BYTES == 2 {
            let (w0, w1) = (w[0].assume_init(), w[1].assume_init());
            [w0, w0 >> 16, w1, w1 >> 16].map(|bits| T::from_bits_u32(bits & 0xFFFF))
        } else {
            w.map(|v| T::from_bits_u32(v.assume_init()))
        }
    }
}

/// Stores four consecutive elements with one vector access.
///
/// # Safety
/// As for [`load4`], and `p` is writable.
#[inline(always)]
unsafe fn store4<T: Elem>(p: *mut T, v: [T; 4]) {
    unsafe {
        if T::BYTES == 2 {
            (p as *mut U32x2).write(U32x2::new(pack2x2(v)));
        } else {
            (p as *mut U32x4).write(U32x4::new(v.map(|e| e.to_bits_u32())));
        }
    }
}

/// Four 16-bit elements' bits, two per word, element 0 in the low half.
#[inline(always)]
fn pack2x2<T: Elem>(v: [T; 4]) -> [u32; 2] {
    let b = v.map(|e| e.to_bits_u32() & 0xFFFF);
    [b[0] | b[1] << 16, b[2] | b[3] << 16]
}

/// Whether a quad's fast roundings were exact, for the types where
/// [`Elem::round_normal`] is exact only on a range (bf16: `+0.0` and normal
/// values below 2^111). Two checks, one operation per value each:
/// - below: the smallest magnitude of the values rounded must be normal
///   (zeros included, to keep it to one min per value; `-0.0` and subnormals
///   would round wrong);
/// - above: every result must be a number. From 2^111 up `round_normal` gives
///   the exact result or NaN, never a wrong number (`tests/num.rs` checks every
///   such f32), and an intermediate NaN carries into the quad's final results;
///   `fma(r, 0, acc)` is NaN once any `r` is NaN or infinite.
///
/// A NaN input also fails the second check (its quad takes the exact rounding,
/// which on AMD and the host keeps NaN payloads as the model does). When a
/// check fails the quad is recomputed with the exact rounding; both ways give
/// the same bits. The fast
/// one is 3 float operations per rounding instead of 5 or 6 integer ones. (On
/// NVIDIA bf16 rounds with one conversion, exact everywhere, and both checks
/// compile away.)
struct Range {
    lo: f32,
    results: f32,
}

impl Range {
    #[inline(always)]
    fn new() -> Self {
        Range { lo: f32::INFINITY, results: 0.0 }
    }
    /// A value that is rounded.
    #[inline(always)]
    fn track<T: Elem>(&mut self, v: f32) {
        if T::ROUND_NORMAL_IS_PARTIAL {
            self.lo = self.lo.min(v.abs());
        }
    }
    /// A final result of the quad.
    #[inline(always)]
    fn result<T: Elem>(&mut self, r: f32) {
        if T::ROUND_NORMAL_IS_PARTIAL {
            self.results = mul_add(r, 0.0, self.results);
        }
    }
    /// Both checks passed: the fast roundings were exact.
    #[inline(always)]
    fn ok<T: Elem>(&self) -> bool {
        !T::ROUND_NORMAL_IS_PARTIAL || (self.lo >= f32::MIN_POSITIVE && !self.results.is_nan())
    }
}

/// The thread's x_new values between the passes: for 16-bit types in their
/// storage bits, two per register (widened on each use: one shift or mask for
/// bf16, one conversion for f16), for f32 as they are. On NVIDIA the row's 28
/// values are most of the kernel's registers, and registers decide how many
/// rows each SM has in flight.
struct Kept<T: Elem, const N: usize> {
    /// 16-bit types: the 4 values of chunk k, as stored (two per word).
    packed: [[u32; 2]; N],
    /// f32: value j of chunk k.
    wide: [[f32; 4]; N],
    _t: core::marker::PhantomData<T>,
}

impl<T: Elem, const N: usize> Kept<T, N> {
    #[inline(always)]
    fn new() -> Self {
        Kept { packed: [[0; 2]; N], wide: [[0.0; 4]; N], _t: core::marker::PhantomData }
    }
    #[inline(always)]
    fn set(&mut self, k: usize, j: usize, v: T) {
        if T::BYTES == 2 {
            self.packed[k][j / 2] |= (v.to_bits_u32() & 0xFFFF) << (16 * (j % 2));
        } else {
            self.wide[k][j] = v.to_f32();
        }
    }
    #[inline(always)]
    fn set_quad(&mut self, k: usize, v: [T; 4]) {
        if T::BYTES == 2 {
            self.packed[k] = pack2x2(v);
        } else {
            crate::unroll!(j in 0..4 => { self.set(k, j, v[j]); });
        }
    }
    #[inline(always)]
    fn get(&self, k: usize, j: usize) -> f32 {
        if T::BYTES == 2 {
            T::from_bits_u32((self.packed[k][j / 2] >> (16 * (j % 2))) & 0xFFFF).to_f32()
        } else {
            self.wide[k][j]
        }
    }
}

/// Sums `partial` over the 256 threads in the contract's order (steps 4-5):
/// a butterfly in each wave, lane 0 of wave `w` stores to `slots[first + w]`,
/// then the 8 slots are reduced with the same butterfly (lanes 8..31 add +0.0).
/// The contract has wave 0 do that and broadcast the total through workgroup
/// memory; here every wave does it on the same 8 values, which gives every
/// thread the same bits with one barrier instead of two (four barriers per row
/// become two). Every thread returns the total.
#[inline(always)]
unsafe fn workgroup_sum(partial: f32, slots: *mut f32, first: usize) -> f32 {
    let lane = wave::lane_id();
    let w = wave::wave_id();
    let wave_total = wave::wave_sum_f32(partial);
    unsafe {
        if lane == 0 {
            slots.add(first + w as usize).write_volatile(wave_total);
        }
        wave::barrier();
        let v = if lane < WAVES { slots.add(first + lane as usize).read_volatile() } else { 0.0 };
        wave::wave_sum_f32(v)
    }
}

/// # Safety
/// `a, b, x, x_new, h` hold `rows * d` elements, `w` and `bias` (unless null)
/// `d` elements; `1 <= d <= N * CHUNK_STRIDE` (and `MAX_D`); launched with `WORKGROUP_SIZE` threads per
/// workgroup, `WORKGROUP_MEM_BYTES` of workgroup memory, one workgroup per row.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn add3_layer_norm<T: Elem, const N: usize, const AHEAD: usize>(
    a: *const T,
    b: *const T,
    x: *const T,
    w: *const T,
    bias: *const T,
    x_new: *mut T,
    h: *mut T,
    rows: u32,
    d: u32,
    eps: f32,
) {
    // Uniform over the launch: quad (vector) accesses when every row starts
    // 4-element aligned (a null bias passes the test and is never read). Two
    // instances of the row, so that the quad one has no scalar path to join
    // and its loads have no values to merge at branches.
    let quads = (d as usize).is_multiple_of(4)
        && [a as usize, b as usize, x as usize, x_new as usize, h as usize, w as usize, bias as usize]
            .iter()
            .all(|p| p % (4 * T::BYTES) == 0);
    let (inputs, outputs) = ([a, b, x, w, bias], [x_new, h]);
    unsafe {
        if quads {
            add3_row::<T, N, AHEAD, true>(inputs, outputs, rows, d, eps)
        } else {
            add3_row::<T, N, AHEAD, false>(inputs, outputs, rows, d, eps)
        }
    }
}

/// [`add3_layer_norm`] with its vector accesses (`QUADS`) decided; `inputs`
/// are `a, b, x, w, bias` and `outputs` are `x_new, h`.
///
/// # Safety
/// As for [`add3_layer_norm`]; `QUADS` only where that function chose it.
#[inline(always)]
unsafe fn add3_row<T: Elem, const N: usize, const AHEAD: usize, const QUADS: bool>(
    inputs: [*const T; 5],
    outputs: [*mut T; 2],
    rows: u32,
    d: u32,
    eps: f32,
) {
    let ([a, b, x, w, bias], [x_new, h]) = (inputs, outputs);
    let row = wave::workgroup_id_x();
    // Uniform over the workgroup: every thread leaves together.
    const { assert!(N >= 1 && N <= CHUNKS && AHEAD <= N) };
    // A longer row than this instance holds is the launcher's error; leave
    // the outputs untouched rather than compute part of it.
    if row >= rows || d == 0 || d > MAX_D || d as usize > N * CHUNK_STRIDE {
        return;
    }
    let t = wave::thread_id();
    // Indices within a row fit in 32 bits (d <= MAX_D); 64-bit compares cost
    // two instructions on NVIDIA. `d32` for tests, `d` for offsets.
    let d32 = d;
    let d = d as usize;
    let base = row as usize * d;
    let quads = QUADS;
    let slots = wave::workgroup_mem::<f32>();

    // x_new = T(f(T(f(a) + f(b))) + f(x)), kept in registers, and step 3 as
    // the values come: `s = s + f(x_new[i])` in ownership order (k ascending,
    // then j), which is the order they are computed in. Elements the thread
    // does not own add nothing (the contract's +0.0 would not change `s`).
    //
    // Chunk k's inputs are loaded AHEAD chunks before its turn, before the
    // x_new stores of the chunks in between, so that AHEAD + 1 chunks' loads
    // are in flight together. The compiler may not move a load above a store
    // that could alias it; none can here: x_new may only be exactly a, b or x
    // (the launcher refuses any other overlap), and each element is read and
    // written by the one thread that owns it. Quad loads are unconditional,
    // so that no branch has values to merge: a chunk past the row's end loads
    // the row's first quad instead (in bounds, never read).
    let load_chunk = |k: usize, into: &mut [[MaybeUninit<u32>; 4]; 3]| {
        if QUADS {
            let first32 = (k * CHUNK_STRIDE) as u32 + 4 * t;
            let first = if first32 < d32 { first32 as usize } else { 0 };
            unsafe {
                *into = [
                    load4_words(a.add(base + first)),
                    load4_words(b.add(base + first)),
                    load4_words(x.add(base + first)),
                ];
            }
        }
    };
    let mut loaded = [[[MaybeUninit::<u32>::uninit(); 4]; 3]; N];
    crate::unroll!(k in 0..N, at most 7 => {
        if k < AHEAD {
            load_chunk(k, &mut loaded[k]);
        }
    });
    let mut kept = Kept::<T, N>::new();
    let mut s = 0.0f32;
    crate::unroll!(k in 0..N, at most 7 => {
        if k + AHEAD < N {
            // `min`: the index is constant per unrolled k, and out of range
            // only where this branch is dead.
            load_chunk(k + AHEAD, &mut loaded[(k + AHEAD).min(N - 1)]);
        }
        let first32 = (k * CHUNK_STRIDE) as u32 + 4 * t;
        let first = first32 as usize;
        if first32 < d32 { unsafe {
            if quads {
                // Loaded by `load_chunk` (QUADS).
                let [qa, qb, qx] = loaded[k].map(|w| unpack4::<T>(w));
                // `xn`: x_new widened (the rounded value itself).
                let mut xn = [0.0f32; 4];
                let mut range = Range::new();
                crate::unroll!(j in 0..4 => {
                    let s1 = qa[j].to_f32() + qb[j].to_f32();
                    let s2 = T::round_normal(s1) + qx[j].to_f32();
                    xn[j] = T::round_normal(s2);
                    range.track::<T>(s1);
                    range.track::<T>(s2);
                    range.result::<T>(xn[j]);
                });
                if !range.ok::<T>() {
                    crate::unroll!(j in 0..4 => {
                        let ab = T::from_f32(qa[j].to_f32() + qb[j].to_f32());
                        xn[j] = T::round_f32(ab.to_f32() + qx[j].to_f32());
                    });
                }
                let out = xn.map(T::from_rounded);
                crate::unroll!(j in 0..4 => { s = s + xn[j]; });
                store4(x_new.add(base + first), out);
                kept.set_quad(k, out);
            } else {
                for j in 0..4 {
                    let i = first + j;
                    if first32 + (j as u32) < d32 {
                        let ab = T::from_f32(a.add(base + i).read().to_f32() + b.add(base + i).read().to_f32());
                        let xn = T::from_f32(ab.to_f32() + x.add(base + i).read().to_f32());
                        x_new.add(base + i).write(xn);
                        kept.set(k, j, xn);
                        s = s + xn.to_f32();
                    }
                }
            }
        } }
    });
    let vals = |k: usize, j: usize| kept.get(k, j);

    // Steps 4-6.
    let total = unsafe { workgroup_sum(s, slots, SLOT_SUM) };
    let mean = total / d as f32;

    // Step 7: q = fma(d, d, q) in ownership order, reduced into separate slots.
    // A chunk that lies inside the row for every thread (a uniform test) needs
    // no test per element; in the last, partial chunk the elements the thread
    // does not own are skipped (their `kept` value is +0.0, not the mean).
    let mut q = 0.0f32;
    crate::unroll!(k in 0..N, at most 7 => {
        if (k + 1) * CHUNK_STRIDE <= d {
            crate::unroll!(j in 0..4 => {
                let diff = vals(k, j) - mean;
                q = mul_add(diff, diff, q);
            });
        } else if k * CHUNK_STRIDE < d {
            let first = (k * CHUNK_STRIDE) as u32 + 4 * t;
            crate::unroll!(j in 0..4 => {
                if first + (j as u32) < d32 {
                    let diff = vals(k, j) - mean;
                    q = mul_add(diff, diff, q);
                }
            });
        }
    });
    let q_total = unsafe { workgroup_sum(q, slots, SLOT_VAR) };

    // Step 8: correctly rounded division and square root; no rsqrt.
    let var = q_total / d as f32;
    let r = 1.0 / sqrt(var + eps);

    // Step 9, in one of two copies chosen once: with a bias or without (the
    // test for a null bias would otherwise run in every chunk).
    let row = Row { kept, t, d32, base, quads, mean, r };
    unsafe {
        if bias.is_null() {
            write_h::<T, N, false>(row, w, bias, h);
        } else {
            write_h::<T, N, true>(row, w, bias, h);
        }
    }
}

/// What step 9 needs of the row: the kept values, their mean and `r`, and
/// where this thread's elements are.
struct Row<T: Elem, const N: usize> {
    kept: Kept<T, N>,
    t: u32,
    d32: u32,
    base: usize,
    quads: bool,
    mean: f32,
    r: f32,
}

/// Step 9: `y = fma((x - mean) * r, w, bias or +0.0)`, stored as T, for the
/// row's elements this thread owns; `bias` is read only when `HAS_BIAS`.
///
/// # Safety
/// As for [`add3_layer_norm`].
#[inline(always)]
unsafe fn write_h<T: Elem, const N: usize, const HAS_BIAS: bool>(
    row: Row<T, N>,
    w: *const T,
    bias: *const T,
    h: *mut T,
) {
    let Row { kept, t, d32, base, quads, mean, r } = row;
    let vals = |k: usize, j: usize| kept.get(k, j);
    crate::unroll!(k in 0..N, at most 7 => {
        let first32 = (k * CHUNK_STRIDE) as u32 + 4 * t;
        let first = first32 as usize;
        if first32 < d32 { unsafe {
            if quads {
                let qw = load4(w.add(first));
                let qb = if HAS_BIAS { load4(bias.add(first)) } else { [T::from_f32(0.0); 4] };
                let mut out = qw;
                let mut range = Range::new();
                crate::unroll!(j in 0..4 => {
                    let nrm = (vals(k, j) - mean) * r;
                    let hj = mul_add(nrm, qw[j].to_f32(), qb[j].to_f32());
                    let rounded = T::round_normal(hj);
                    out[j] = T::from_rounded(rounded);
                    range.track::<T>(hj);
                    range.result::<T>(rounded);
                });
                if !range.ok::<T>() {
                    crate::unroll!(j in 0..4 => {
                        let nrm = (vals(k, j) - mean) * r;
                        out[j] = T::from_f32(mul_add(nrm, qw[j].to_f32(), qb[j].to_f32()));
                    });
                }
                store4(h.add(base + first), out);
            } else {
                for j in 0..4 {
                    let i = first + j;
                    if first32 + (j as u32) < d32 {
                        let bb = if HAS_BIAS { bias.add(i).read().to_f32() } else { 0.0 };
                        let nrm = (vals(k, j) - mean) * r;
                        h.add(base + i).write(T::from_f32(mul_add(nrm, w.add(i).read().to_f32(), bb)));
                    }
                }
            }
        } }
    });
}
