//! `xielu`: the xIELU activation of Apertus (docs/contracts.md, section 3),
//! bit-exact with MLX-ROCm's op-by-op graph.
//!
//! Each thread handles [`ELEMS_PER_THREAD`] consecutive elements, with 16-byte
//! vector loads and stores when both buffers are 16-byte aligned, and a grid-stride
//! loop so any grid covers any `n`. Every element's result is a function of that
//! element alone (the evaluations below give the same bits), so the result
//! depends neither on the vector width nor on the grid.
//!
//! **Two evaluations, the same bits.** `xielu_one` is the model, step for step.
//! `xielu_fast` is what the 8-element chunks run when the parameters allow it
//! (checked once per launch) and, in bf16 on AMD and the host, when all 8
//! values lie in a range (checked per chunk; otherwise that chunk runs the
//! model; NVIDIA rounds bf16 exactly, with one conversion, and needs no range).
//! It differs in three ways, each exact where it is used:
//! - the branch not taken by `v > 0` is not rounded: the two branches are
//!   selected before their roundings (`R(R(a) * m)` with `a, m` the chosen
//!   branch's), which gives the chosen branch's bits;
//! - `expm1` through [`expm1_nonpos`] (equal to [`expm1`] for every `x <= 0`,
//!   which `min(v, eps)` is when `eps <= 0`);
//! - in bf16, each rounding by [`Elem::round_normal`] (on AMD three float
//!   operations instead of five or six integer ones, exact for `+0.0` and for
//!   normal values below 2^111; on NVIDIA one conversion, exact everywhere).
//!   [`BF16_FAST_V`] and [`BF16_FAST_PARAM`] keep every rounded value there:
//!   with `|v|` in [2^-40, 2^40), `|ap|, |an|, |be|, |eps|` in [2^-20, 2^20],
//!   `an > 0` and `eps < 0`: `v*v` and `v*be` lie in [2^-80, 2^80]; `em = expm1(min(v, eps))` in [-1, -2^-21]; `em - v` is
//!   `+0.0` or at least an ulp of a value >= 2^-40 (2^-47); `R(a) * m` is `+0.0`
//!   (`+0 * an`, `an > 0`) or in [2^-100, 2^100]; and the final sum of two such
//!   bf16 values is `+0.0` (an exact cancellation) or in [2^-107, 2^101].
//!   (`an > 0` is a simplification: a `-0.0` there would be lost only in `sel`,
//!   and `sel + bx` with `bx` never zero would not show it.)
//!
//! Why: the model's bf16 roundings are five or six integer instructions each on
//! AMD, seven per element (on an H200 that bound the model by the integer
//! pipeline, before NVIDIA rounded with `cvt.rn.bf16.f32`).
//! `docs/performance.md` has the measurements (kept there, with their runs, so
//! that this text does not carry figures that go stale).
//!
//! **A third, for bf16 at large `n`: a table.** A bf16 input has 16 bits, so its
//! output is a fixed function of them. When each workgroup has enough elements
//! (`uses_table`), it first writes `xielu_fast`'s output for every bf16 value
//! of magnitude in [2^-16, 2^16) into workgroup memory (geometry::xielu::TABLE_*),
//! then looks elements up (about 6 instructions instead of 39, two values per
//! 32-bit word); a chunk with a value outside the table is computed instead.
//! On the H200 this brings bf16 close to the copy bandwidth (the figures are in
//! `docs/performance.md`); how many chunks each thread has in flight matters
//! more than the lookups (geometry::xielu::TABLE_CHUNKS_IN_FLIGHT).
//!
//! **f16 at large `n`: a table too.** The f16 table holds `xielu_fast`'s output
//! for every f16 of magnitude in [2^-11, 16), both signs (geometry::xielu::F16_TABLE_*,
//! 60 KiB: within an RDNA workgroup's 64 KiB; CUDA launches opt in to more than
//! 48 KiB); as in bf16, a chunk with a value outside it is computed. The same
//! loop and grid as bf16's.

use crate::geometry::WAVE_SIZE;
use crate::geometry::xielu::{
    ELEMS_PER_THREAD, F16_TABLE_ENTRIES, F16_TABLE_LO_BITS, F16_TABLE_SPAN, TABLE_BINADES, TABLE_CHUNKS_IN_FLIGHT,
    TABLE_ENTRIES, TABLE_LO_BITS, TABLE_MIN_EXP, TABLE_SPAN, uses_table_grid,
};
use crate::num::{Elem, expm1, expm1_nonpos, f16, round_to};
use crate::vector::Vector;
use crate::wave;

/// bf16 fast path: `|v|` must lie in [`BF16_FAST_V`].0 ..  [`BF16_FAST_V`].1.
pub const BF16_FAST_V: (f32, f32) = (1.0 / (1u64 << 40) as f32, (1u64 << 40) as f32);
/// bf16 fast path: `|ap|, |an|, |be|, |eps|` (rounded) must lie in this closed range.
pub const BF16_FAST_PARAM: (f32, f32) = (1.0 / (1u64 << 20) as f32, (1u64 << 20) as f32);

/// The four scalars, each already rounded to `T` (`ap = R(alpha_p)`, ...).
#[derive(Clone, Copy)]
struct Params {
    ap: f32,
    an: f32,
    be: f32,
    ep: f32,
}

/// Whether a product of two f16 values rounded to f16 is the f16
/// multiplication itself rather than an f32 one: everywhere but NVIDIA. LLVM
/// 22 selects an f32 product rounded to f16 on AMD as `v_fma_mixlo_f16 a, b,
/// 0`, an fma with a +0 addend, which turns an exact -0 product into +0 (found
/// by `every_f16_input_is_bit_exact` on the simulated gfx1151; `docs/performance.md`
/// has the instruction). The f16 product is the same value with IEEE's sign:
/// the f32 product of two f16 values is exact (at most 22 significant bits,
/// within f32's normal range), so rounding it once to f16 is the correctly
/// rounded f16 product. NVIDIA keeps the f32 form
/// (`cvt` after `mul.f32`, correct there), measured faster on an H200; the host
/// takes the f16 form, so that the emulator runs AMD's code.
const F16_PRODUCTS: bool = !cfg!(target_arch = "nvptx64");

/// `round(a * b)` for `a`, `b` values of `T`: in f16 (where [`F16_PRODUCTS`])
/// the f16 multiplication, which rounds as `round` does, signed zeros included.
#[inline(always)]
fn product<T: Elem>(a: f32, b: f32, round: impl Fn(f32) -> f32) -> f32 {
    if F16_PRODUCTS && T::BYTES == 2 && T::MANTISSA_BITS == 10 {
        (<f16 as Elem>::from_f32(a) * <f16 as Elem>::from_f32(b)).to_f32()
    } else {
        round(a * b)
    }
}

/// One element of the bit-exact model. No FMA anywhere.
#[inline(always)]
fn xielu_one<T: Elem>(x: T, p: Params) -> T {
    let v = x.to_f32();
    let x_sq = product::<T>(v, v, round_to::<T>);
    let pos = product::<T>(x_sq, p.ap, round_to::<T>);
    // NaN-propagating minimum of v and eps.
    let clamped = if v.is_nan() || v < p.ep { v } else { p.ep };
    let em = round_to::<T>(expm1(clamped));
    let neg = product::<T>(round_to::<T>(em - v), p.an, round_to::<T>);
    let sel = if v > 0.0 { pos } else { neg };
    let bx = product::<T>(v, p.be, round_to::<T>);
    T::from_f32(sel + bx)
}

/// Whether [`xielu_fast`] may run at all with these parameters (uniform over the
/// launch): `eps <= 0` for [`expm1_nonpos`], and for bf16 on AMD and the host
/// the ranges above.
#[inline(always)]
fn fast_params<T: Elem>(p: Params) -> bool {
    let moderate = |m: f32| m.abs() >= BF16_FAST_PARAM.0 && m.abs() <= BF16_FAST_PARAM.1;
    p.ep <= 0.0
        && (!T::ROUND_NORMAL_IS_PARTIAL
            || (moderate(p.ap) && moderate(p.an) && moderate(p.be) && moderate(p.ep) && p.an > 0.0 && p.ep < 0.0))
}

/// Whether [`xielu_fast`] gives the model's bits for the value `v` (given
/// [`fast_params`]): always, except in bf16 on AMD and the host outside
/// [`BF16_FAST_V`] (NaN included).
#[inline(always)]
fn fast_value<T: Elem>(v: f32) -> bool {
    !T::ROUND_NORMAL_IS_PARTIAL || (v.abs() >= BF16_FAST_V.0 && v.abs() < BF16_FAST_V.1)
}

/// [`xielu_one`] in fewer operations, bit for bit where [`fast_params`] and
/// [`fast_value`] hold (see the module documentation). No FMA outside expm1.
#[inline(always)]
fn xielu_fast<T: Elem>(x: T, p: Params) -> T {
    let v = x.to_f32();
    // min(v, eps): a NaN v gives eps here (the model gives NaN), but then
    // `em - v` below is NaN as the model's result is; either zero of a tie
    // gives expm1 = +0.0.
    let em = T::round_normal(expm1_nonpos(v.min(p.ep)));
    xielu_fast_with_em(v, em, p)
}

/// The rest of [`xielu_fast`] given `v` and its `em` (for the table's build,
/// which knows `em` without expm1 for some values).
#[inline(always)]
fn xielu_fast_with_em<T: Elem>(v: f32, em: f32, p: Params) -> T {
    let positive = v > 0.0;
    let a = if positive { v * v } else { em - v };
    let m = if positive { p.ap } else { p.an };
    // In f16 (see F16_PRODUCTS) v * v is rounded as an f16 product.
    let ra = if F16_PRODUCTS && T::BYTES == 2 && T::MANTISSA_BITS == 10 && positive {
        product::<T>(v, v, T::round_normal)
    } else {
        T::round_normal(a)
    };
    let sel = product::<T>(ra, m, T::round_normal);
    let bx = product::<T>(v, p.be, T::round_normal);
    T::from_rounded(T::round_normal(sel + bx))
}

/// [`ELEMS_PER_THREAD`] elements, aligned for one vector access (two for f32).
type Chunk<T> = Vector<T, ELEMS_PER_THREAD>;

/// The bf16 table (geometry::xielu::TABLE_*), two values at a time: `w` holds
/// two bf16 (element `2i` in the low half). Returns their slots, packed the same
/// way, and a word that has a bit of [`TABLE_OUTSIDE_BITS`] set exactly when
/// either value lies outside the table (callers may OR such words together).
///
/// Per half, with `m` the magnitude bits: `u = (m | 0x8000) - TABLE_LO_BITS`,
/// which cannot borrow from the other half (`TABLE_LO_BITS < 0x8000`), so one
/// 32-bit subtraction serves both. The magnitude is in the table when `u` lies
/// in [0x8000, 0x8000 + TABLE_SPAN): `u ^ 0x8000` then has no bit at or above
/// log2(TABLE_SPAN). The slot is `u`'s bits below log2(TABLE_SPAN) with the sign
/// (bit 15 of the half) moved to bit log2(TABLE_SPAN).
#[inline(always)]
fn table_slots(w: u32) -> (u32, u32) {
    const PAIR: u32 = 0x0001_0001;
    let u = (w | (0x8000 * PAIR)).wrapping_sub(TABLE_LO_BITS * PAIR);
    let sign = (w >> (15 - TABLE_SPAN.trailing_zeros())) & (TABLE_SPAN * PAIR);
    ((u & ((TABLE_SPAN - 1) * PAIR)) | sign, u ^ (0x8000 * PAIR))
}

/// The bits of [`table_slots`]' second word that mark a value outside the table.
const TABLE_OUTSIDE_BITS: u32 = (0x1_0000 - TABLE_SPAN) * 0x0001_0001;

/// The bf16 value of table entry `e`.
#[inline(always)]
fn table_value(e: u32) -> u32 {
    let sign = (e & TABLE_SPAN) << (15 - TABLE_SPAN.trailing_zeros());
    sign | (TABLE_LO_BITS + (e & (TABLE_SPAN - 1)))
}

/// In bf16, `R(expm1(x))` is -1 for every `x <= -BF16_EXPM1_SATURATES`:
/// `expm1(-8) = -0.99966..` lies below -0.998046875, the midpoint between -1 and
/// the bf16 value above it. A power of two, so that it starts a binade.
const BF16_EXPM1_SATURATES: f32 = 8.0;

/// Whether the kernel uses the table: bf16 or f16, [`fast_params`] (the
/// entries are computed by [`xielu_fast`]), vector accesses, and enough
/// elements per workgroup to repay building it (`uses_table_grid`, which the
/// launcher checks too). Uniform over the launch.
#[inline(always)]
fn uses_table<T: Elem>(fast: bool, vector: bool, n: u64, workgroups: u32) -> bool {
    T::BYTES == 2 && fast && vector && uses_table_grid(n, workgroups)
}

/// Whether `T` is bf16 (else, for the table, f16; geometry::xielu has both tables).
#[inline(always)]
fn is_bf16<T: Elem>() -> bool {
    T::BYTES == 2 && T::MANTISSA_BITS == 7
}

/// In f16, `R(expm1(x))` is -1 for every `x <= -F16_EXPM1_SATURATES`:
/// `expm1(-9) = -0.99988..` lies below -1 + 2^-12, the midpoint between -1
/// and the f16 value above it.
const F16_EXPM1_SATURATES: f32 = 9.0;

/// The entries of `T`'s table.
#[inline(always)]
fn table_entries<T: Elem>() -> u32 {
    if is_bf16::<T>() { TABLE_ENTRIES } else { F16_TABLE_ENTRIES }
}

// Every table value takes the fast path exactly (its range is inside BF16_FAST_V).
const _: () = assert!(TABLE_MIN_EXP >= -40 && TABLE_MIN_EXP + TABLE_BINADES as i32 <= 40);

/// Table entries `2q` and `2q + 1`, packed as [`build_table`] stores them
/// (entry `2q` in the low half): [`xielu_fast`] of their values, the bits of a
/// bf16 (given [`uses_table`]), without expm1 where `em` is known for both: a
/// positive value (the first TABLE_SPAN entries) selects the branch that does
/// not use `em`, and one at or below -[`BF16_EXPM1_SATURATES`] has `em = -1`.
/// Either way the pair's two evaluations have no branch between them, so they
/// overlap. Both kinds are made of whole binades (128 consecutive entries), so
/// a wave of 32 consecutive pairs takes one way, except where a binade starts.
///
/// In f16 (geometry::xielu::F16_TABLE_*), the same, with -[`F16_EXPM1_SATURATES`].
#[inline(always)]
fn table_pair<T: Elem>(q: u32, p: Params) -> u32 {
    let e = 2 * q;
    let (x0, x1, span, saturates) = if is_bf16::<T>() {
        (table_value(e), table_value(e + 1), TABLE_SPAN, BF16_EXPM1_SATURATES)
    } else {
        (f16_table_value(e), f16_table_value(e + 1), F16_TABLE_SPAN, F16_EXPM1_SATURATES)
    };
    let (x0, x1) = (T::from_bits_u32(x0), T::from_bits_u32(x1));
    let (v0, v1) = (x0.to_f32(), x1.to_f32());
    let (y0, y1): (T, T) = if e < span || (v0 <= -saturates && v1 <= -saturates) {
        (xielu_fast_with_em(v0, -1.0, p), xielu_fast_with_em(v1, -1.0, p))
    } else {
        (xielu_fast(x0, p), xielu_fast(x1, p))
    };
    y0.to_bits_u32() | y1.to_bits_u32() << 16
}

// Pairs never straddle the signs: each half of a table has an even number of entries.
const _: () = assert!(TABLE_SPAN.is_multiple_of(2) && F16_TABLE_SPAN.is_multiple_of(2));

/// Writes the table into `table`, one [`table_pair`] a thread at a time (all
/// threads of the workgroup take part; the caller waits at a barrier before
/// reading it).
///
/// # Safety
/// `table` holds [`table_entries`] `u16`; [`uses_table`] holds.
#[inline(always)]
unsafe fn build_table<T: Elem>(table: *mut u32, p: Params) {
    let mut q = wave::thread_id();
    while q < table_entries::<T>() / 2 {
        unsafe { table.add(q as usize).write(table_pair::<T>(q, p)) };
        q += wave::workgroup_size();
    }
}

/// One chunk by arithmetic: [`xielu_fast`] where it is exact, else the model.
#[inline(always)]
fn compute_chunk<T: Elem>(chunk: Chunk<T>, p: Params, fast: bool) -> Chunk<T> {
    let mut result = chunk;
    const { assert!(ELEMS_PER_THREAD == 8) };
    let mut in_range = true;
    crate::unroll!(i in 0..8 => {
        in_range &= fast_value::<T>(chunk.0[i].to_f32());
    });
    if fast && in_range {
        crate::unroll!(i in 0..8 => {
            result.0[i] = xielu_fast(chunk.0[i], p);
        });
    } else {
        crate::unroll!(i in 0..8 => {
            result.0[i] = xielu_one(chunk.0[i], p);
        });
    }
    result
}

/// [`ELEMS_PER_THREAD`] 16-bit values (bf16 or f16) as the 32-bit words the table paths work on.
type Words = Vector<u32, { ELEMS_PER_THREAD / 2 }>;
const _: () = assert!(core::mem::size_of::<Words>() == 2 * ELEMS_PER_THREAD && ELEMS_PER_THREAD == 8);

/// One chunk from the table, and whether any of its values lies outside it
/// (then the result is not theirs, and the caller computes the chunk).
///
/// # Safety
/// As for [`build_table`], after the barrier.
#[inline(always)]
unsafe fn lookup_chunk(chunk: Words, table: *const u16) -> (Words, bool) {
    let mut result = chunk;
    let mut outside = 0u32;
    crate::unroll!(i in 0..4 => {
        let (slots, off) = table_slots(chunk.0[i]);
        outside |= off;
        // The byte offsets of both slots in one shift (a slot is below 2^13,
        // so nothing crosses into the other half). Always inside the table;
        // an outside value's entry is not used.
        let bytes = slots << 1;
        let lo = unsafe { ((table as *const u8).add((bytes & 0xFFFF) as usize) as *const u16).read() } as u32;
        let hi = unsafe { ((table as *const u8).add((bytes >> 16) as usize) as *const u16).read() } as u32;
        result.0[i] = lo | hi << 16;
    });
    (result, outside & TABLE_OUTSIDE_BITS != 0)
}

/// The f16 value of f16 table entry `e`: the positive magnitudes from
/// `F16_TABLE_LO_BITS` on, then the negative ones.
#[inline(always)]
fn f16_table_value(e: u32) -> u32 {
    let negative = e >= F16_TABLE_SPAN;
    (if negative { 0x8000 } else { 0 }) | (F16_TABLE_LO_BITS + e - if negative { F16_TABLE_SPAN } else { 0 })
}

/// The f16 table entry of `h` (the bits of an f16) and whether `h` lies
/// outside the table (then the entry is some other value's).
#[inline(always)]
fn f16_table_slot(h: u32) -> (u32, bool) {
    let d = (h & 0x7FFF).wrapping_sub(F16_TABLE_LO_BITS);
    let slot = d.wrapping_add(if h & 0x8000 != 0 { F16_TABLE_SPAN } else { 0 });
    (slot.min(F16_TABLE_ENTRIES - 1), d >= F16_TABLE_SPAN)
}

/// [`lookup_chunk`] for f16: one chunk from the f16 table, and whether any
/// of its values lies outside it.
///
/// # Safety
/// As for [`build_table`], after the barrier.
#[inline(always)]
unsafe fn f16_lookup_chunk(chunk: Words, table: *const u16) -> (Words, bool) {
    let mut result = chunk;
    let mut outside = false;
    crate::unroll!(i in 0..4 => {
        let w = chunk.0[i];
        let (lo, lo_off) = f16_table_slot(w & 0xFFFF);
        let (hi, hi_off) = f16_table_slot(w >> 16);
        outside |= lo_off | hi_off;
        let lo = unsafe { table.add(lo as usize).read() } as u32;
        let hi = unsafe { table.add(hi as usize).read() } as u32;
        result.0[i] = lo | hi << 16;
    });
    (result, outside)
}

/// # Safety
/// `x` and `out` hold `n` elements (they may be the same buffer); both are
/// aligned to `T`. A bf16 or f16 launch for which `uses_table_grid` holds gives
/// each workgroup the table's memory (`BF16_WORKGROUP_MEM_BYTES`,
/// `F16_WORKGROUP_MEM_BYTES`).
#[inline(always)]
pub unsafe fn xielu<T: Elem>(x: *const T, out: *mut T, n: u64, alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) {
    let p = Params {
        ap: round_to::<T>(alpha_p),
        an: round_to::<T>(alpha_n),
        be: round_to::<T>(beta),
        ep: round_to::<T>(eps),
    };
    let fast = fast_params::<T>(p);
    let per_thread = ELEMS_PER_THREAD as u64;
    let stride = wave::num_workgroups_x() as u64 * wave::workgroup_size() as u64 * per_thread;
    // Uniform across the launch: vector accesses only when both buffers allow them.
    let vector = (x as usize | out as usize).is_multiple_of(core::mem::align_of::<Chunk<T>>());
    let mut start = wave::global_id_x() * per_thread;
    if uses_table::<T>(fast, vector, n, wave::num_workgroups_x()) {
        // Groups of U chunks per thread: all loaded, then all looked up. Each
        // wave's group is U * 512 contiguous bytes (chunk `u` of lane `l` at
        // `start + u * wave_span`, `start` the wave's base plus 8 `l`); the
        // launch's groups tile the data in rounds of U * `stride` elements.
        //
        // A thread's last group may be partial (the whole chunks it has left;
        // they are a prefix of the group): it is still loaded at once and
        // looked up, and then `start` is at most the last partial chunk, which
        // the loop at the end of the kernel takes.
        //
        // A chunk with a value outside the table is not stored from the group
        // but computed after it, from memory again (not yet overwritten when
        // `out` is `x`): the arithmetic then runs with no other chunk held.
        const U: usize = TABLE_CHUNKS_IN_FLIGHT;
        let wave_span = (WAVE_SIZE as usize * ELEMS_PER_THREAD) as u64;
        let lane = (wave::thread_id() % WAVE_SIZE) as u64;
        start = (wave::global_id_x() - lane) * per_thread * U as u64 + lane * per_thread;
        let whole = |start: u64, u: u64| start + u * wave_span + per_thread <= n;
        let load = |start: u64| {
            let mut words = [Words::new([0; ELEMS_PER_THREAD / 2]); U];
            crate::unroll!(u in 0..5 => {
                if whole(start, u as u64) {
                    words[u] = unsafe { (x.add((start + u as u64 * wave_span) as usize) as *const Words).read() };
                }
            });
            words
        };
        // The first group travels from memory while the table is built; in
        // f16, whose table takes longer to build, the second group too (in
        // bf16 that measured slower).
        let mut words = load(start);
        let mut ahead = if is_bf16::<T>() { None } else { Some(load(start + U as u64 * stride)) };
        let table_words = wave::workgroup_mem::<u32>();
        unsafe { build_table::<T>(table_words, p) };
        let table = table_words as *const u16;
        wave::barrier();
        while whole(start, 0) {
            let at = |u: u64| (start + u * wave_span) as usize;
            let mut outside = 0u32;
            let mut count = 0u64;
            crate::unroll!(u in 0..5 => {
                if whole(start, u as u64) {
                    count += 1;
                    let (result, off) = if is_bf16::<T>() {
                        unsafe { lookup_chunk(words[u], table) }
                    } else {
                        unsafe { f16_lookup_chunk(words[u], table) }
                    };
                    if off {
                        outside |= 1 << u;
                    } else {
                        unsafe { (out.add(at(u as u64)) as *mut Words).write(result) };
                    }
                }
            });
            while outside != 0 {
                let u = outside.trailing_zeros() as u64;
                outside &= outside - 1;
                unsafe {
                    let chunk = (x.add(at(u)) as *const Chunk<T>).read();
                    (out.add(at(u)) as *mut Chunk<T>).write(compute_chunk(chunk, p, true));
                }
            }
            if count < U as u64 {
                start += count * wave_span;
                break;
            }
            start += U as u64 * stride;
            words = match ahead.take() {
                Some(w) => w,
                None => load(start),
            };
        }
        const { assert!(U == 5, "the loops above unroll exactly 5 chunks") };
    }
    while start < n {
        unsafe {
            if vector && start + per_thread <= n {
                let chunk = (x.add(start as usize) as *const Chunk<T>).read();
                (out.add(start as usize) as *mut Chunk<T>).write(compute_chunk(chunk, p, fast));
            } else {
                let end = if start + per_thread < n { start + per_thread } else { n };
                let mut i = start;
                while i < end {
                    out.add(i as usize).write(xielu_one(x.add(i as usize).read(), p));
                    i += 1;
                }
            }
        }
        start += stride;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::xielu::{F16_TABLE_MIN_EXP, TABLE_MIN_ELEMS_PER_WORKGROUP};
    use crate::num::Bf16;
    use std::vec::Vec;

    fn params<T: Elem>(ap: f32, an: f32, be: f32, ep: f32) -> Params {
        Params { ap: round_to::<T>(ap), an: round_to::<T>(an), be: round_to::<T>(be), ep: round_to::<T>(ep) }
    }

    /// Table entry `e` as `build_table` stores it: its half of [`table_pair`].
    fn table_entry<T: Elem>(e: u32, p: Params) -> u32 {
        (table_pair::<T>(e / 2, p) >> (16 * (e % 2))) & 0xFFFF
    }

    const PARAM_SETS: [(f32, f32, f32, f32); 7] = [
        (0.8, 0.8, 0.5, -1e-6), // Apertus
        (2.0, 0.1, -0.25, -0.01),
        (1e-3, 50.0, 3.0, -1.0),
        (0.5, 2.0, 0.25, -10.0), // eps below -BF16_EXPM1_SATURATES: min(v, eps) = eps there
        (-0.5, 0.3, 1.0, -1e-4),
        (0.8, 0.8, 0.5, 0.0),    // eps = 0: fast in f32 and f16 only (here, on the host)
        (0.8, -0.8, 0.5, -1e-6), // an < 0: fast in f32 and f16 only (here, on the host)
    ];

    /// The fast evaluation of `x` has the model's bits (NaN-ness for NaN); the
    /// message names the unrounded parameters `raw`.
    fn assert_fast_is_the_model<T: Elem>(x: T, p: Params, raw: (f32, f32, f32, f32)) {
        let (f, m) = (xielu_fast(x, p).to_f32(), xielu_one(x, p).to_f32());
        assert!(
            f.to_bits() == m.to_bits() || (f.is_nan() && m.is_nan()),
            "{} x = {:e}, params {raw:?}: fast {f:e} model {m:e}",
            T::NAME,
            x.to_f32(),
        );
    }

    /// The fast evaluation's bits equal the model's (NaN-ness for NaN) for every
    /// value where its conditions hold; returns how many values took it.
    fn check<T: Elem>(values: impl Iterator<Item = T> + Clone) -> usize {
        let mut fast_count = 0;
        for &(ap, an, be, ep) in &PARAM_SETS {
            let p = params::<T>(ap, an, be, ep);
            for x in values.clone() {
                if !(fast_params::<T>(p) && fast_value::<T>(x.to_f32())) {
                    continue;
                }
                fast_count += 1;
                assert_fast_is_the_model(x, p, (ap, an, be, ep));
            }
        }
        fast_count
    }

    #[test]
    fn fast_path_equals_the_model_on_every_bf16_and_f16() {
        let bf16 = check((0u32..=0xFFFF).map(Bf16::from_bits_u32));
        let f16 = check((0u32..=0xFFFF).map(<f16 as Elem>::from_bits_u32));
        // bf16: 5 parameter sets allow it, for the 80 binades of [2^-40, 2^40) x 128
        // significands x 2 signs each; f16: all 7 sets, every value.
        assert_eq!(bf16, 5 * 80 * 128 * 2);
        assert_eq!(f16, 7 * 65536);
    }

    #[test]
    fn fast_path_equals_the_model_on_a_dense_f32_sweep() {
        let n = check((0u64..=u32::MAX as u64).step_by(997).map(|b| f32::from_bits(b as u32)));
        assert!(n > 6 * 4_000_000, "f32 took the fast path {n} times");
    }

    /// A 64-bit LCG from `seed`: each call steps it and returns bits 33..64.
    fn lcg(mut state: u64) -> impl FnMut() -> u32 {
        move || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u32
        }
    }

    /// Parameters drawn across the whole range the bf16 fast path accepts
    /// (magnitudes 2^-20 .. 2^20, either sign for ap and be), against every
    /// bf16 value: the fixed sets above cannot cover the corners of the range
    /// argument in the module documentation.
    #[test]
    fn fast_path_equals_the_model_for_random_bf16_parameters() {
        let mut next = lcg(0x9E37_79B9_7F4A_7C15u64);
        let magnitude = |next: &mut dyn FnMut() -> u32| {
            // 2^e * (1 + f), e in [-20, 19]: the whole accepted range, edges included.
            let e = (next() % 40) as i32 - 20;
            let f = (next() % 128) as f32 / 128.0;
            2f32.powi(e) * (1.0 + f)
        };
        let mut checked = 0usize;
        for _ in 0..24 {
            let sign = |bit: u32| if bit & 1 == 0 { 1.0 } else { -1.0 };
            let ap = sign(next()) * magnitude(&mut next);
            let be = sign(next()) * magnitude(&mut next);
            let an = magnitude(&mut next);
            let ep = -magnitude(&mut next);
            let p = params::<Bf16>(ap, an, be, ep);
            if !fast_params::<Bf16>(p) {
                continue;
            }
            for bits in 0u32..=0xFFFF {
                let x = Bf16::from_bits_u32(bits);
                if !fast_value::<Bf16>(x.to_f32()) {
                    continue;
                }
                checked += 1;
                assert_fast_is_the_model(x, p, (ap, an, be, ep));
            }
        }
        assert!(checked > 20 * 20480, "only {checked} fast evaluations were checked");
    }

    /// As above for f16, whose fast evaluation (and so its table's entries)
    /// takes any parameters with `eps <= 0`: parameters of either sign (eps
    /// not positive) with magnitudes 2^-14 to 2^15, against every f16 value.
    #[test]
    fn fast_path_equals_the_model_for_random_f16_parameters() {
        let mut next = lcg(0x2545_F491_4F6C_DD1Du64);
        let mut draw = |signed: bool| {
            let e = (next() % 30) as i32 - 14;
            let v = 2f32.powi(e) * (1.0 + (next() % 1024) as f32 / 1024.0);
            if signed && next() & 1 == 1 { -v } else { v }
        };
        for _ in 0..16 {
            let (ap, an, be, ep) = (draw(true), draw(true), draw(true), -draw(false));
            let p = params::<f16>(ap, an, be, ep);
            assert!(fast_params::<f16>(p));
            for bits in 0u32..=0xFFFF {
                assert_fast_is_the_model(<f16 as Elem>::from_bits_u32(bits), p, (ap, an, be, ep));
            }
        }
    }

    /// The slot of `b` and whether it lies outside, read from `table_slots`
    /// with `b` in the low (`high = false`) or high half of a word beside `other`.
    fn slot_in_word(b: u32, other: u32, high: bool) -> (u32, bool) {
        let (w, shift) = if high { (other | b << 16, 16) } else { (b | other << 16, 0) };
        let (slots, off) = table_slots(w);
        ((slots >> shift) & 0xFFFF, off & TABLE_OUTSIDE_BITS & (0xFFFF << shift) != 0)
    }

    /// Every bf16 pattern, in either half of a word, beside neighbours at the
    /// edges of the table and beyond: the table holds exactly the magnitudes
    /// of its range, each in its own slot; a slot gives back the value it was
    /// looked up by; and the neighbour changes nothing (no borrow between halves).
    #[test]
    fn table_slots_cover_exactly_the_table_range_once() {
        let (lo, hi) = (2f32.powi(TABLE_MIN_EXP), 2f32.powi(TABLE_MIN_EXP + TABLE_BINADES as i32));
        let edges = [
            0,
            1,
            TABLE_LO_BITS - 1,
            TABLE_LO_BITS,
            TABLE_LO_BITS + TABLE_SPAN - 1,
            TABLE_LO_BITS + TABLE_SPAN,
            0x3F80,
            0x7F80,
            0x7FC0,
            0x7FFF,
        ];
        let mut others = [0u32; 2 * 10];
        for (i, &m) in edges.iter().enumerate() {
            others[2 * i] = m;
            others[2 * i + 1] = m | 0x8000;
        }
        for b in 0u32..=0xFFFF {
            let own = slot_in_word(b, 0, false);
            for &other in &others {
                assert_eq!(slot_in_word(b, other, false), own, "{b:#06x} low, beside {other:#06x}");
                assert_eq!(slot_in_word(b, other, true), own, "{b:#06x} high, beside {other:#06x}");
            }
        }
        assert_slots_cover::<Bf16>(TABLE_ENTRIES, (lo, hi), |b| slot_in_word(b, 0, false), table_value);
    }

    /// For every 16-bit pattern `b` of `T`: `slot(b)` is inside a table of
    /// `entries`, and marks `b` outside exactly when its magnitude lies outside
    /// [lo, hi); the values inside take every slot once, and `value` gives each
    /// back from its slot.
    fn assert_slots_cover<T: Elem>(
        entries: u32,
        (lo, hi): (f32, f32),
        slot: impl Fn(u32) -> (u32, bool),
        value: impl Fn(u32) -> u32,
    ) {
        let mut seen = std::vec![false; entries as usize];
        for b in 0u32..=0xFFFF {
            let v = T::from_bits_u32(b).to_f32();
            let (slot, outside) = slot(b);
            assert!(slot < entries, "{} {b:#06x}: slot {slot}", T::NAME);
            let inside = v.abs() >= lo && v.abs() < hi;
            assert_eq!(!outside, inside, "{} {b:#06x} ({v:e})", T::NAME);
            if inside {
                assert_eq!(value(slot), b, "{} slot {slot}", T::NAME);
                assert!(!seen[slot as usize], "{} slot {slot} twice", T::NAME);
                seen[slot as usize] = true;
            }
        }
        assert!(seen.iter().all(|&s| s), "{}", T::NAME);
    }

    /// What `build_table` writes, entry by entry, is the model's value.
    #[test]
    fn table_entries_equal_the_model() {
        let mut checked = 0;
        for &(ap, an, be, ep) in &PARAM_SETS {
            let p = params::<Bf16>(ap, an, be, ep);
            if !fast_params::<Bf16>(p) {
                continue;
            }
            for e in 0..TABLE_ENTRIES {
                let x = Bf16::from_bits_u32(table_value(e));
                assert_eq!(
                    table_entry::<Bf16>(e, p),
                    xielu_one(x, p).to_bits_u32(),
                    "entry {e}, x = {:e}, params {:?}",
                    x.to_f32(),
                    (ap, an, be, ep)
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 5 * TABLE_ENTRIES);
    }

    /// `em` rounds to -1 for every negative `T` at or below -`saturates`
    /// (bits `first` to `last`, -infinity), and not yet at `not_yet`.
    fn assert_expm1_saturates<T: Elem>(saturates: f32, (first, last): (u32, u32), not_yet: f32) {
        let em = |v: f32| T::round_normal(expm1_nonpos(v));
        let mut checked = 0;
        for b in 0x8000u32..=last {
            let v = T::from_bits_u32(b).to_f32();
            if v <= -saturates {
                assert_eq!(em(v), -1.0, "{} {v:e}", T::NAME);
                checked += 1;
            }
        }
        assert_eq!(checked, (last - first + 1) as usize, "{}", T::NAME);
        assert!(em(not_yet) > -1.0);
    }

    /// The shortcut of `table_pair`: `em` is -1 for every bf16 at or below
    /// -BF16_EXPM1_SATURATES (what `min(v, eps)` is there), -infinity included,
    /// and not just above it (so the constant is where the text says); the
    /// same for f16 and -F16_EXPM1_SATURATES.
    #[test]
    fn expm1_saturates_where_the_tables_say() {
        assert_expm1_saturates::<Bf16>(BF16_EXPM1_SATURATES, (0xC100, 0xFF80), -6.0);
        assert_expm1_saturates::<f16>(F16_EXPM1_SATURATES, (0xC880, 0xFC00), -8.0);
    }

    /// The integration tests (tests/xielu.rs, TABLE_TEST_N) launch bf16 and f16 with 2
    /// workgroups and n = 2 * TABLE_MIN_ELEMS_PER_WORKGROUP + 2405 or + 563,
    /// expecting the table; without fast parameters (eps = 0.25, `NOT_FAST_EPS`
    /// there), misaligned buffers, f32 or one element fewer per workgroup, the arithmetic.
    #[test]
    fn uses_table_holds_where_the_tests_expect_it() {
        let n = 2 * TABLE_MIN_ELEMS_PER_WORKGROUP + 2405;
        let fast = fast_params::<Bf16>(params::<Bf16>(0.8731, 0.6042, 0.5, -1e-6));
        assert!(fast && uses_table::<Bf16>(fast, true, n, 2) && uses_table::<Bf16>(fast, true, n - 2405 + 563, 2));
        assert!(!uses_table::<Bf16>(fast_params::<Bf16>(params::<Bf16>(0.8731, 0.6042, 0.5, 0.0)), true, n, 2));
        assert!(!uses_table::<Bf16>(fast, false, n, 2));
        let fast16 = fast_params::<f16>(params::<f16>(0.8731, 0.6042, 0.5, -1e-6));
        assert!(fast16 && uses_table::<f16>(fast16, true, n, 2) && uses_table::<f16>(fast16, true, n - 2405 + 563, 2));
        assert!(!uses_table::<f16>(fast_params::<f16>(params::<f16>(0.8731, 0.6042, 0.5, 0.25)), true, n, 2));
        assert!(!uses_table::<f32>(true, true, n, 2));
        assert!(!uses_table::<Bf16>(fast, true, 2 * TABLE_MIN_ELEMS_PER_WORKGROUP - 1, 2));
    }

    #[test]
    fn parameters_outside_the_bf16_ranges_take_the_model() {
        assert!(fast_params::<Bf16>(params::<Bf16>(0.8, 0.8, 0.5, -1e-6)));
        assert!(!fast_params::<Bf16>(params::<Bf16>(0.8, 0.8, 0.5, 0.0)));
        assert!(!fast_params::<Bf16>(params::<Bf16>(0.8, -0.8, 0.5, -1e-6)));
        assert!(!fast_params::<Bf16>(params::<Bf16>(0.0, 0.8, 0.5, -1e-6)));
        assert!(!fast_params::<Bf16>(params::<Bf16>(0.8, 0.8, 1e7, -1e-6)));
        assert!(!fast_params::<f32>(params::<f32>(0.8, 0.8, 0.5, 1e-6)));
        assert!(!fast_value::<Bf16>(0.0) && !fast_value::<Bf16>(f32::NAN) && !fast_value::<Bf16>(2f32.powi(40)));
        assert!(fast_value::<Bf16>(-2f32.powi(-40)) && fast_value::<f32>(f32::NAN));
    }

    /// Every f16 pattern, in either half of a word, beside neighbours at the
    /// edges of the table and beyond: the f16 table holds exactly the
    /// magnitudes in [2^-11, 16) of either sign, each in its own slot, which
    /// gives back the value; what is outside is marked; every slot is inside
    /// the table; and the neighbour changes nothing. Then what `build_table`
    /// writes, entry by entry, is the model's value.
    #[test]
    fn f16_table_slots_and_entries() {
        let (lo, hi) = (F16_TABLE_LO_BITS, F16_TABLE_LO_BITS + F16_TABLE_SPAN);
        let others = [0u32, 0x8000, lo - 1, lo, hi - 1, hi, 0x8000 | (hi - 1), 0x8000 | hi, 0x7C00, 0xFE01];
        for b in 0u32..=0xFFFF {
            let outside = f16_table_slot(b).1;
            for &other in &others {
                let words = Words::new([b | other << 16, other | b << 16, 0x3C00_3C00, 0xBC00_3C00]);
                let (got, off) = unsafe { f16_lookup_chunk(words, [7u16; F16_TABLE_ENTRIES as usize].as_ptr()) };
                assert_eq!(off, outside || f16_table_slot(other).1, "{b:#06x} beside {other:#06x}");
                assert_eq!(got.0[0] & 0xFFFF, 7);
            }
        }
        assert_slots_cover::<f16>(
            F16_TABLE_ENTRIES,
            (2f32.powi(F16_TABLE_MIN_EXP), 16.0),
            f16_table_slot,
            f16_table_value,
        );
        let mut checked = 0;
        for &(ap, an, be, ep) in &PARAM_SETS {
            let p = params::<f16>(ap, an, be, ep);
            if !fast_params::<f16>(p) {
                continue;
            }
            let table: Vec<u16> = (0..F16_TABLE_ENTRIES).map(|e| table_entry::<f16>(e, p) as u16).collect();
            for b in 0u32..=0xFFFF {
                let (slot, outside) = f16_table_slot(b);
                if outside {
                    continue;
                }
                let words = Words::new([b | b << 16, 0x3C00 | b << 16, b | 0x3C00 << 16, 0xBC00 | b << 16]);
                let (got, off) = unsafe { f16_lookup_chunk(words, table.as_ptr()) };
                let want = xielu_one(<f16 as Elem>::from_bits_u32(b), p).to_bits_u32();
                assert_eq!(table[slot as usize] as u32, want, "{b:#06x}, params {:?}", (ap, an, be, ep));
                assert!(!off);
                let halves = [got.0[0] & 0xFFFF, got.0[0] >> 16, got.0[1] >> 16, got.0[2] & 0xFFFF, got.0[3] >> 16];
                assert!(halves.iter().all(|&h| h == want), "{b:#06x}, params {:?}", (ap, an, be, ep));
                checked += 1;
            }
        }
        assert_eq!(checked, 7 * F16_TABLE_ENTRIES as usize);
    }
}
