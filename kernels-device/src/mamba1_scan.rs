//! `mamba1_scan`: the Mamba1 selective scan of Mamba, Falcon-Mamba and Jamba
//! (docs/contracts.md, section 5, a tolerance contract).
//!
//! ```text
//! s[b,d,n] <- exp(dt[b,t,d] * A[d,n]) * s[b,d,n] + dt[b,t,d] * x[b,t,d] * B[b,t,n]
//! y[b,t,d]  = sum_n s[b,d,n] * C[b,t,n]  +  x[b,t,d] * Dskip[d]
//! ```
//!
//! **Mapping** ([`Mapping`], per target: [`Mapping::COMPILED`]). A channel
//! (b, d) takes `lanes_per_channel(n)` adjacent lanes: `lanes_small()` for N <= 16
//! (the usual 16), twice as many above. Lane `l` of a channel holds state
//! columns `c l .. c l + c` (`c = states_per_lane`) in f32 registers for the
//! whole sequence, so the sum over n is a chain of fused multiply-adds inside
//! the lane, then one level across lanes per halving. AMD: 8 columns, 2 lanes
//! (4 above 16), a wave of 16 channels, two waves a workgroup. NVIDIA: 4
//! columns, 4 lanes (8), a warp of 8 channels, one warp a workgroup. Grid x =
//! `ceil(Dm / channels_per_workgroup)`, grid y = B. A wave whose first channel is
//! past Dm leaves at once, as a whole (no barrier is used); a later channel past
//! Dm follows channel Dm - 1's addresses and stores nothing. Columns `>= N`
//! follow column N - 1's addresses (every load in bounds, control flow uniform),
//! add nothing to the sum and store nothing. On AMD every lane of a channel
//! loads its dt and x itself (the same addresses, one memory access); where the
//! mapping `stages_dt_x` (NVIDIA, the emulator) the wave stages them with B and
//! C (below). B and C are the same for every channel of a batch, so they come
//! from the cache.
//!
//! Four instances, chosen by N at run time: `lanes_small()` or twice that, and
//! whether some columns are past N (N other than 16 and 32), so that N = 16 and
//! N = 32 carry no per-column masks.
//!
//! **Operation order** (f32 throughout, `T` inputs widened exactly; the kernel's
//! documented choice, the contract itself is a tolerance; the tests' model
//! repeats it):
//! ```text
//! a2    = A[d,n] * log2 e                 # once per column, before the time loop
//! decay = exp2_fast(dt * a2)              # the GPU's exp2 approximation (crate::num)
//! u     = (dt * x) * B[b,t,n]             # dt * x once per step
//! s     = fma(decay, s, u)                # the only operation on the recurrence's critical path
//! q     = fma(s_{c-1}, C_{c-1}, ... fma(s0, C0, +0.0))  # this lane's columns in order;
//!                                         # columns >= N skipped
//! y     = T(tree(q) + x * Dskip[d])       # tree: over the channel's lanes, q plus q of the
//!                                         # lane at xor LANES/2, then xor LANES/4, .. xor 1
//!                                         # (two lanes: q0 + q1; four: (q0 + q2) + (q1 + q3));
//!                                         # rounded once
//! ```
//!
//! **Schedule.** The time loop is unrolled by [`UNROLL`] = 8 steps. dt, x, B
//! and C of the next 8 steps are loaded before the arithmetic of the current 8
//! (whose B and C come from workgroup memory) in every iteration, the last one
//! included, which loads its own steps again and does not use them: with a
//! branch around the loads, the H200 waited for all of them at the chunk's first
//! fused multiply-add (`docs/performance.md`). Each wave stages the next
//! chunk's B and C, and with `stages_dt_x` its channels' dt and x, as f32 in
//! its own workgroup memory: each value is loaded and widened once for the
//! wave, bf16 by writing its bits over a zeroed low half (no instruction), and
//! each lane reads its channel's 8 steps of dt and of x in four 16-byte loads,
//! instead of loading, addressing and widening 16 values itself
//! (docs/performance.md, "dt and x staged"). Where `chunks_per_iteration` is 2
//! (NVIDIA, the emulator) the loop takes two chunks an iteration, so that
//! values loaded into registers for the next chunk need no copy. Each pair also asks
//! L2 for the wave's dt and x [`PREFETCH_CHUNKS`] chunks ahead
//! ([`wave::prefetch_l2`]; gfx11 has no such instruction): when x, dt and y do
//! not fit in L2, the loads one chunk ahead alone left each chunk waiting for
//! memory.
//! The 8 steps' lane sums are exchanged transposed: at each of the first three
//! levels a lane sends the half of its per-step values it does not keep (two
//! lanes: one exchange per two steps and lane instead of one per step), and each
//! lane ends holding the totals of 8 / LANES steps (one step from 8 lanes on),
//! which it stores; a fourth level (16 lanes) is a plain exchange, after which
//! two lanes hold the same total and the even one stores it. A remainder loop
//! does the last `L % 8` steps one at a time with the same operations in the same
//! order (the transposed sums add the same pairs, and addition commutes), so a
//! scan over L1 + L2 steps equals, bit for bit, a scan over L1 steps followed by
//! one over L2 steps from its state. There is one schedule for every L.
//!
//! The measurements behind this mapping (instructions per step on the simulated
//! gfx1151, times on the H200) are in `docs/performance.md`.
//!
//! **In place.** Each lane reads its state columns before the time loop and
//! writes them after it, at the same addresses, and no other lane or wave touches
//! them: `state_in` and `state_out` may be the same buffer.

use crate::num::math::mul_add;

use crate::geometry::mamba1_scan::{MAX_N, Mapping, UNROLL};
use crate::num::{Elem, consts::LOG2E, exp2_fast};
use crate::vector::{Align8, F32x4, Vector};
use crate::wave;

/// This target's mapping.
const MAP: Mapping = Mapping::COMPILED;
/// Columns per lane, as an index bound.
const COLS: usize = MAP.states_per_lane as usize;
/// Lanes of a channel for N <= 16, and above.
const LANES_SMALL: u32 = MAP.lanes_small();
const LANES_LARGE: u32 = 2 * MAP.lanes_small();

// The transposed sums (`channel_sums_8`) halve 8 steps' values three times,
// and the exchanges take at most 16 lanes (the geometry checks this).
const _: () = assert!(UNROLL == 8 && LANES_LARGE <= 16);
// `staged_row` reads 2, 4 or 8 columns.
const _: () = assert!(COLS == 2 || COLS == 4 || COLS == 8);
const _: () = assert!(MAX_N == LANES_LARGE * MAP.states_per_lane);

/// How far ahead of its first chunk each pair of chunks asks L2 for dt and x, in
/// chunks (NVIDIA; elsewhere nothing). Where x, dt and y do not fit in L2 the
/// next chunk's loads then wait for L2, not for memory (docs/performance.md,
/// "prefetch").
const PREFETCH_CHUNKS: usize = 3;

/// Values of B (and of C) each lane stages per chunk, at most: `UNROLL * N / 32`.
const STAGE: usize = UNROLL * MAX_N as usize / wave::WAVE_SIZE as usize;
/// Values of dt and x together each lane stages per chunk, at most (with
/// `stages_dt_x`): both arrays' `UNROLL` steps of the wave's channels, most
/// with `lanes_small()` lanes a channel.
const DTX_STAGE: usize = 2 * UNROLL * (wave::WAVE_SIZE / LANES_SMALL) as usize / wave::WAVE_SIZE as usize;

/// Two floats: one 8-byte access (a lane's staged B or C with two columns).
type F32x2 = Vector<f32, 2, Align8>;

/// One step of one lane: advances its columns' states and returns the sum of
/// `s * C` over those of its columns that are below N (`valid`), as a chain of
/// fused multiply-adds from `+0.0`.
#[inline(always)]
fn step(
    s: &mut [f32; COLS],
    a2: &[f32; COLS],
    valid: &[bool; COLS],
    dt: f32,
    x: f32,
    b: &[f32; COLS],
    c: &[f32; COLS],
) -> f32 {
    let dtx = dt * x;
    let mut q = 0.0f32;
    crate::unroll!(j in 0..COLS, at most 8 => {
        let decay = exp2_fast(dt * a2[j]);
        s[j] = mul_add(decay, s[j], dtx * b[j]);
        if valid[j] {
            q = mul_add(s[j], c[j], q);
        }
    });
    q
}

/// `v` of the lane at `lane ^ mask`; `mask` is a constant power of two below
/// the wave size after inlining (a lane count of the geometry, halved).
#[inline(always)]
fn xor_f32(v: f32, mask: u32) -> f32 {
    match mask {
        1 => wave::shfl_xor_f32::<1>(v),
        2 => wave::shfl_xor_f32::<2>(v),
        4 => wave::shfl_xor_f32::<4>(v),
        8 => wave::shfl_xor_f32::<8>(v),
        _ => wave::shfl_xor_f32::<16>(v),
    }
}

/// The sum of one step's `q` over the lanes of a channel: plus the lane at xor
/// LANES/2, then at xor LANES/4, .. xor 1.
#[inline(always)]
fn channel_sum<const LANES: u32>(q: f32) -> f32 {
    let mut q = q;
    crate::unroll!(level in 0..4 => {
        let mask = LANES >> (level + 1);
        if mask >= 1 {
            q = q + xor_f32(q, mask);
        }
    });
    q
}

/// One level of a transposed exchange: this lane and lane `lane ^ mask` each
/// hold two halves `lo` and `hi` of their per-step values; the lane with bit
/// `mask` set (`upper`) keeps `hi` and receives its partner's `hi`, the other
/// keeps `lo` and receives `lo`. Each sum is `own + partner's`, as in
/// [`channel_sum`].
#[inline(always)]
fn exchange_half(lo: f32, hi: f32, upper: bool, mask: u32) -> f32 {
    let send = if upper { lo } else { hi };
    let keep = if upper { hi } else { lo };
    keep + xor_f32(send, mask)
}

/// The totals over a channel's lanes of the 8 steps' `q`, transposed: lane
/// `sub` of the channel ends with the totals of steps `first .. first + kept`
/// in `totals[0..kept]` (`kept` = 8 / LANES, at least 1), and `xs` of the same
/// steps in `x_kept`. Returns `(totals, x_kept, first)`. (`xs` are computed values, not loads: a
/// choice between two loads from one array becomes a load at a computed index,
/// which puts the array in scratch memory.)
#[inline(always)]
fn channel_sums_8<const LANES: u32>(q: [f32; UNROLL], xs: [f32; UNROLL], sub: u32) -> ([f32; 4], [f32; 4], usize) {
    // The first level: xor LANES/2, 8 values to 4. (Every index a literal:
    // `array::from_fn`'s loop let LLVM turn a choice between two elements into
    // a load at a computed index, in scratch memory.)
    let upper = sub & (LANES / 2) != 0;
    let (mut totals, mut x_kept) = ([0.0f32; 4], [0.0f32; 4]);
    crate::unroll!(i in 0..4 => {
        totals[i] = exchange_half(q[i], q[i + 4], upper, LANES / 2);
        x_kept[i] = if upper { xs[i + 4] } else { xs[i] };
    });
    let mut first = if upper { 4 } else { 0 };
    // xor LANES/4: 4 values to 2.
    if LANES >= 4 {
        let upper = sub & (LANES / 4) != 0;
        let (v, xv) = (totals, x_kept);
        crate::unroll!(i in 0..2 => {
            totals[i] = exchange_half(v[i], v[i + 2], upper, LANES / 4);
            x_kept[i] = if upper { xv[i + 2] } else { xv[i] };
        });
        first += if upper { 2 } else { 0 };
    }
    // xor LANES/8: 2 values to 1.
    if LANES >= 8 {
        let upper = sub & (LANES / 8) != 0;
        totals[0] = exchange_half(totals[0], totals[1], upper, LANES / 8);
        x_kept[0] = if upper { x_kept[1] } else { x_kept[0] };
        first += if upper { 1 } else { 0 };
    }
    // xor LANES/16: one value, a plain exchange.
    if LANES >= 16 {
        totals[0] = totals[0] + xor_f32(totals[0], LANES / 16);
    }
    (totals, x_kept, first)
}

/// # Safety
/// `x, dt [batch, len, dm]`, `bm, cm [batch, len, n]`, `a [dm, n]` (f32),
/// `dskip [dm]`, `state_in, state_out [batch, dm, n]` (f32, may be the same
/// buffer), `y [batch, len, dm]`; every pointer aligned to its element type.
/// Launched with [`crate::geometry::mamba1_scan::WORKGROUP_SIZE`] threads per
/// workgroup, grid `[ceil(dm / channels_per_workgroup(n)), batch, 1]`, and
/// [`crate::geometry::mamba1_scan::WORKGROUP_MEM_BYTES`] of workgroup memory.
/// Arguments out of range (`n` outside 1..=32, `len = 0`) make every wave
/// leave at once; the host launcher refuses them before that.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn mamba1_scan<T: Elem>(
    x: *const T,
    dt: *const T,
    bm: *const T,
    cm: *const T,
    a: *const f32,
    dskip: *const T,
    state_in: *const f32,
    y: *mut T,
    state_out: *mut f32,
    batch: u32,
    len: u32,
    dm: u32,
    n: u32,
) {
    let p = Scan { x, dt, bm, cm, a, dskip, state_in, y, state_out, batch, len, dm, n };
    // Four instances, so that every choice that depends on N's class is made at
    // compile time.
    let lanes = MAP.lanes_per_channel(n);
    let whole = n == lanes * MAP.states_per_lane;
    unsafe {
        match (lanes == LANES_SMALL, whole) {
            (true, true) => scan::<T, LANES_SMALL, false>(p),
            (true, false) => scan::<T, LANES_SMALL, true>(p),
            (false, true) => scan::<T, LANES_LARGE, false>(p),
            (false, false) => scan::<T, LANES_LARGE, true>(p),
        }
    }
}

/// The arguments of one launch, as [`mamba1_scan`] takes them.
#[derive(Clone, Copy)]
struct Scan<T> {
    x: *const T,
    dt: *const T,
    bm: *const T,
    cm: *const T,
    a: *const f32,
    dskip: *const T,
    state_in: *const f32,
    y: *mut T,
    state_out: *mut f32,
    batch: u32,
    len: u32,
    dm: u32,
    n: u32,
}

/// [`mamba1_scan`] with `LANES` lanes per channel; `MASKED`: some of the
/// lanes' columns are past N. The phases are [`Lane`]'s methods, in the order
/// they run here.
#[inline(always)]
unsafe fn scan<T: Elem, const LANES: u32, const MASKED: bool>(p: Scan<T>) {
    unsafe {
        if Lane::<T, LANES, MASKED>::wave_leaves(&p) {
            return;
        }
        let lane = Lane::<T, LANES, MASKED>::new(&p);
        let mut rec = lane.load_state();
        let mut next = lane.start_chunks();
        let mut t = 0usize;
        // Two chunks an iteration where the mapping says so (the prefetch runs
        // once a pair).
        if MAP.chunks_per_iteration == 2 {
            let mut other = next;
            for pair in 0..lane.chunks / 2 {
                lane.scan_chunk(&mut rec, t, &next, &mut other, true, true);
                t += UNROLL;
                lane.scan_chunk(&mut rec, t, &other, &mut next, 2 * pair + 2 < lane.chunks, false);
                t += UNROLL;
            }
            // The last chunk of an odd count: a loop rather than an `if`, as the
            // inputs it loads are never read, which the lint flags after an `if`.
            for _ in 0..lane.chunks % 2 {
                let cur = next;
                lane.scan_chunk(&mut rec, t, &cur, &mut next, false, false);
                t += UNROLL;
            }
        } else {
            for chunk in 0..lane.chunks {
                let cur = next;
                lane.scan_chunk(&mut rec, t, &cur, &mut next, chunk + 1 < lane.chunks, false);
                t += UNROLL;
            }
        }
        lane.scan_steps(&mut rec, t);
        lane.store_state(&rec.s);
    }
}

/// What the time loop carries in one lane's registers: its columns' `A log2 e`
/// and states, and its channel's `Dskip`.
struct Recurrence {
    a2: [f32; COLS],
    s: [f32; COLS],
    dsk: f32,
}

/// Where one lane of a launch reads and writes, fixed before the time loop: its
/// channel and columns, the addresses of its rows, and the wave's staging area.
/// Its methods are the phases of [`scan`]; each is inlined and takes the lane by
/// reference, so that the fields stay the scalars and registers they would be
/// as locals.
struct Lane<T, const LANES: u32, const MASKED: bool> {
    lane: u32,
    /// The lane's index in its channel.
    sub: u32,
    /// The channel (Dm - 1 for a channel past Dm) and whether it is below Dm.
    d: usize,
    channel_ok: bool,
    len: usize,
    dm: usize,
    /// N, a constant `COLS * LANES` without a mask.
    n: usize,
    /// This lane's columns: `col0 + j`; past N a column reads column `col_lo`
    /// instead (the lane's first column, or N - 1), so every load is in bounds.
    col0: usize,
    col_lo: usize,
    offset: [usize; COLS],
    valid: [bool; COLS],
    /// The lane's first state column in `state_in` and `state_out`.
    state_at: usize,
    /// The first element of this batch's x, dt and y (`[B, L, Dm]`) and of its B
    /// and C (`[B, L, N]`).
    seq_first: usize,
    bc_first: usize,
    /// Unrolled chunks of `UNROLL` steps (none in the masked instances).
    chunks: usize,
    /// Values of B (and of C) this lane stages per chunk.
    per_lane: usize,
    staged: *mut f32,
    /// With `stages_dt_x`: the channels of the wave, the values of dt and x this
    /// lane stages per chunk, where they are, and where they go.
    chans: usize,
    dtx_per_lane: usize,
    dtx_staged: *mut f32,
    dtx_src: [*const T; DTX_STAGE],
    dtx_at: [usize; DTX_STAGE],
    /// The row of dt or x this lane asks L2 for, whether its wave asks, and
    /// the first row of the last full pair of chunks.
    pf_first: usize,
    pf_on: bool,
    last_start: usize,
    x: *const T,
    dt: *const T,
    bm: *const T,
    cm: *const T,
    a: *const f32,
    dskip: *const T,
    state_in: *const f32,
    state_out: *mut f32,
    /// This lane's channel of dt, x, B, C and y.
    dt_c: *const T,
    x_c: *const T,
    bm_lane: *const T,
    cm_lane: *const T,
    y_c: *mut T,
}

impl<T: Elem, const LANES: u32, const MASKED: bool> Lane<T, LANES, MASKED> {
    /// With `stages_dt_x`, a bf16's bits go over a staged float's low half (see
    /// [`Self::stage_at`]).
    const TOP_HALF: bool = MAP.stages_dt_x && T::WIDENS_AS_TOP_HALF;

    /// The wave's batch and its first channel.
    #[inline(always)]
    fn wave_position(n: u32) -> (u32, u64) {
        let per_wave = wave::WAVE_SIZE / LANES;
        let wave_first = wave::workgroup_id_x() as u64 * MAP.channels_per_workgroup(n) as u64
            + wave::wave_id() as u64 * per_wave as u64;
        (wave::workgroup_id_y(), wave_first)
    }

    /// The early exit: whether this wave has nothing to do (past the grid's
    /// work, or arguments out of range). It depends only on the wave's position
    /// and the arguments, so the whole wave leaves and every exchange later has
    /// all its lanes. (A check apart from [`Self::new`], not an `Option` of the
    /// lane: LLVM kept the `Option`'s tag in a register through the kernel.)
    #[inline(always)]
    fn wave_leaves(p: &Scan<T>) -> bool {
        let (b, wave_first) = Self::wave_position(p.n);
        b >= p.batch
            || wave_first >= p.dm as u64
            || p.len == 0
            || p.n == 0
            || p.n > MAX_N
            || MAP.lanes_per_channel(p.n) != LANES
            || wave::wave_id() >= MAP.waves_per_workgroup
    }

    /// The lane's setup, for a wave that stays: address arithmetic, done once
    /// before the time loop.
    #[inline(always)]
    unsafe fn new(p: &Scan<T>) -> Self {
        let Scan { x, dt, bm, cm, a, dskip, state_in, y, state_out, batch: _, len, dm, n } = *p;
        let (b, wave_first) = Self::wave_position(n);
        let per_wave = wave::WAVE_SIZE / LANES;
        let lane = wave::lane_id();
        let sub = lane % LANES;
        let d = wave_first + (lane / LANES) as u64;
        // A channel past Dm follows channel Dm - 1's addresses and stores nothing,
        // so that every lane still takes part in every exchange.
        let channel_ok = d < dm as u64;
        let d = if channel_ok { d } else { dm as u64 - 1 } as usize;
        // Without a mask N is COLS * LANES: a constant, so the staged rows' offsets are too.
        let n = if MASKED { n } else { COLS as u32 * LANES };
        let (b, len, dm, n) = (b as usize, len as usize, dm as usize, n as usize);

        let col0 = sub as usize * COLS;
        let col_lo = col0.min(n - 1);
        let mut offset = [0usize; COLS];
        let mut valid = [true; COLS];
        crate::unroll!(j in 0..COLS, at most 8 => {
            valid[j] = !MASKED || col0 + j < n;
            offset[j] = if valid[j] { col0 + j - col_lo } else { 0 };
        });

        unsafe {
            // x, dt, y are [B, L, Dm]: this batch's row t starts at t * dm. The row's
            // offset is computed once for the wave (a scalar register), so that
            // LLVM does not fold it into per-lane pointers of every step.
            let seq_first = b * len * dm;
            let (dt_c, x_c) = (dt.add(d), x.add(d));
            let chunks = if MASKED { 0 } else { len / UNROLL };
            let staged = (wave::workgroup_mem::<F32x4>() as *mut f32)
                .add(wave::wave_id() as usize * MAP.staged_floats_per_wave() as usize);

            // With `stages_dt_x` the wave also stages its channels' dt and x of the
            // chunk, `[2][channels][UNROLL]` after B and C: each value is loaded
            // and widened once for the wave (not once per lane of its channel), and
            // each lane reads its channel's 8 steps of each in two 16-byte loads.
            // Value `v = lane + 32 m` of the chunk is array `v / (8 channels)` (dt,
            // then x), channel `v % channels` (past Dm: channel Dm - 1, as its
            // lanes), step `(v / channels) % 8`: a row's channels are adjacent in
            // memory, so the loads are coalesced.
            let chans = per_wave as usize;
            let dtx_per_lane = if MAP.stages_dt_x { 2 * UNROLL * chans / wave::WAVE_SIZE as usize } else { 0 };
            let (dt_seq, x_seq) = (dt.add(seq_first), x.add(seq_first));
            let (mut dtx_src, mut dtx_at) = ([dt_seq; DTX_STAGE], [0usize; DTX_STAGE]);
            crate::unroll!(m in 0..DTX_STAGE => {
                if m < dtx_per_lane {
                    let v = lane as usize + m * wave::WAVE_SIZE as usize;
                    let (array, c, k) = (v / (UNROLL * chans), v % chans, (v / chans) % UNROLL);
                    let channel = (wave_first as usize + c).min(dm - 1);
                    dtx_src[m] = if array == 0 { dt_seq } else { x_seq }.add(k * dm + channel);
                    dtx_at[m] = (array * chans + c) * UNROLL + k;
                }
            });

            // What each lane asks L2 for in the first chunk of a pair: one row
            // of the wave's dt (lanes 0-15) or x (lanes 16-31), among the pair's 16
            // rows PREFETCH_CHUNKS chunks ahead; the wave's channels lie in one
            // 32-byte sector of a row. The lines are 128 bytes, so a wave asks only
            // if the previous wave's channels lie in another line (judged in row 0,
            // for the whole sequence: a miss costs only time).
            let pf_rows = 2 * UNROLL;
            let pf_row = lane as usize % pf_rows;
            let pf_array =
                |dt_side: *const T, x_side: *const T| if lane as usize / pf_rows == 0 { dt_side } else { x_side };
            // `wrapping_add`: for L below 16 (no pair, so no prefetch) the row may
            // lie past the tensor; the rows asked for are clamped below L.
            let pf_first = pf_array(dt_c, x_c).wrapping_add(seq_first + pf_row * dm) as usize;
            let starts_line = |p: *const T| {
                let at = p.add(seq_first + wave_first as usize) as usize;
                wave_first == 0 || at / 128 != (at - per_wave as usize * size_of::<T>()) / 128
            };

            Lane {
                lane,
                sub,
                d,
                channel_ok,
                len,
                dm,
                n,
                col0,
                col_lo,
                offset,
                valid,
                state_at: (b * dm + d) * n + col_lo,
                seq_first,
                // B and C are [B, L, N]: this batch's row t starts at t * n.
                bc_first: b * len * n,
                chunks,
                per_lane: UNROLL * n / wave::WAVE_SIZE as usize,
                staged,
                chans,
                dtx_per_lane,
                dtx_staged: staged.add(2 * UNROLL * MAX_N as usize),
                dtx_src,
                dtx_at,
                pf_first,
                pf_on: starts_line(pf_array(dt, x)),
                // The first row of the last full pair: every row asked for is below L.
                last_start: (chunks * UNROLL).max(pf_rows) - pf_rows,
                x,
                dt,
                bm,
                cm,
                a,
                dskip,
                state_in,
                state_out,
                dt_c,
                x_c,
                bm_lane: bm.add(lane as usize),
                cm_lane: cm.add(lane as usize),
                y_c: y.add(seq_first + d),
            }
        }
    }

    /// Loads `A log2 e` and the initial state of the lane's columns (a column
    /// past N starts at zero and stays out of every sum) and `Dskip` of its
    /// channel. All of the state is read before any of it is written, so the
    /// state may be updated in place.
    #[inline(always)]
    unsafe fn load_state(&self) -> Recurrence {
        let (mut a2, mut s) = ([0.0f32; COLS], [0.0f32; COLS]);
        unsafe {
            crate::unroll!(j in 0..COLS, at most 8 => {
                a2[j] = self.a.add(self.d * self.n + self.col_lo + self.offset[j]).read() * LOG2E;
                s[j] = if self.valid[j] { self.state_in.add(self.state_at + self.offset[j]).read() } else { 0.0 };
            });
            Recurrence { a2, s, dsk: self.dskip.add(self.d).read().to_f32() }
        }
    }

    /// Without staging, each lane loads its channel's dt and x of the chunk at
    /// step `t`. The values stay as loaded (T) until after the schedule fence: a
    /// widening there would wait for the load at once.
    unsafe fn load_dt_x(&self, t: usize) -> ([T; UNROLL], [T; UNROLL]) {
        unsafe {
            let (mut dtv, mut xv) = ([self.dt_c.read(); UNROLL], [self.x_c.read(); UNROLL]);
            crate::unroll!(k in 0..UNROLL => {
                let at = wave::uniform_usize(self.seq_first + (t + k) * self.dm);
                dtv[k] = self.dt_c.add(at).read();
                xv[k] = self.x_c.add(at).read();
            });
            (dtv, xv)
        }
    }

    /// The unrolled loop (N = 16 or 32): B and C of 8 steps are 8 N
    /// consecutive values each, which the wave loads together (each lane
    /// N / 4 values of each, coalesced), one chunk ahead with dt and x, and
    /// stages as f32 in its own workgroup memory, `[2][UNROLL][N]`; each
    /// step then reads its columns of B and of C from there in 16-byte
    /// loads (8-byte with two columns). Those waits (lgkmcnt) do not wait for the next
    /// chunk's loads from memory (vmcnt), so all of those stay in flight
    /// during the chunk's arithmetic. The masked instances take the one-step
    /// loop only. This loads this lane's share of B and C at step `t`.
    unsafe fn load_stage(&self, t: usize) -> ([T; STAGE], [T; STAGE]) {
        unsafe {
            let first = wave::uniform_usize(self.bc_first + t * self.n);
            let (mut bv, mut cv) = ([self.bm.read(); STAGE], [self.cm.read(); STAGE]);
            crate::unroll!(m in 0..STAGE => {
                if m < self.per_lane {
                    bv[m] = self.bm_lane.add(first + m * wave::WAVE_SIZE as usize).read();
                    cv[m] = self.cm_lane.add(first + m * wave::WAVE_SIZE as usize).read();
                }
            });
            (bv, cv)
        }
    }

    /// With `stages_dt_x`: this lane's share of the wave's dt and x at step
    /// `t` (otherwise nothing).
    unsafe fn load_dtx(&self, t: usize) -> [T; DTX_STAGE] {
        let mut v = [T::from_bits_u32(0); DTX_STAGE];
        unsafe {
            crate::unroll!(m in 0..DTX_STAGE => {
                if m < self.dtx_per_lane {
                    v[m] = self.dtx_src[m].add(wave::uniform_usize(t * self.dm)).read();
                }
            });
        }
        v
    }

    /// One value at a staged float. With `stages_dt_x`, a bf16's bits go over
    /// the float's low half, which this lane zeroed before the loop and which
    /// nothing else writes: the float is the value widened, with no
    /// instruction (only bf16's bits are the top half of its f32).
    unsafe fn stage_at(at: *mut f32, v: T) {
        unsafe {
            if Self::TOP_HALF {
                (at as *mut u16).add(1).write(v.to_bits_u32() as u16);
            } else {
                at.write(v.to_f32());
            }
        }
    }

    /// Zeroes the low halves of the floats this lane stages, for bf16 written as
    /// top halves. dt and x's apart from B and C's: in one loop with theirs, LLVM
    /// ordered the chunk otherwise and ptxas's schedule of it was slower
    /// (docs/performance.md, "dt and x staged").
    #[inline(always)]
    unsafe fn zero_low_halves(&self) {
        unsafe {
            crate::unroll!(m in 0..STAGE => {
                if m < self.per_lane {
                    let e = self.lane as usize + m * wave::WAVE_SIZE as usize;
                    self.staged.add(e).write(0.0);
                    self.staged.add(UNROLL * self.n + e).write(0.0);
                }
            });
            crate::unroll!(m in 0..DTX_STAGE => {
                if m < self.dtx_per_lane {
                    self.dtx_staged.add(self.dtx_at[m]).write(0.0);
                }
            });
        }
    }

    /// Stages a chunk's B and C (and with `stages_dt_x` its dt and x) as loaded
    /// by [`Self::load_stage`] and [`Self::load_dtx`], between two waits for
    /// the wave's lanes: the first for every lane to have read the previous
    /// chunk's values, the second for the whole chunk to be there.
    unsafe fn store_stage(&self, (bv, cv): ([T; STAGE], [T; STAGE]), dtx: [T; DTX_STAGE]) {
        unsafe {
            wave::sync_lanes();
            crate::unroll!(m in 0..STAGE => {
                if m < self.per_lane {
                    let e = self.lane as usize + m * wave::WAVE_SIZE as usize;
                    Self::stage_at(self.staged.add(e), bv[m]);
                    Self::stage_at(self.staged.add(UNROLL * self.n + e), cv[m]);
                }
            });
            crate::unroll!(m in 0..DTX_STAGE => {
                if m < self.dtx_per_lane {
                    Self::stage_at(self.dtx_staged.add(self.dtx_at[m]), dtx[m]);
                }
            });
            wave::sync_lanes();
        }
    }

    /// Before the first chunk: the low halves zeroed where bf16 is staged as top
    /// halves, and the first chunk's inputs loaded and staged. Returns the first
    /// chunk's dt and x where each lane loads them (otherwise values that are
    /// never read).
    #[inline(always)]
    unsafe fn start_chunks(&self) -> ([T; UNROLL], [T; UNROLL]) {
        unsafe {
            if Self::TOP_HALF && self.chunks > 0 {
                self.zero_low_halves();
            }
            let mut next = ([self.dt_c.read(); UNROLL], [self.x_c.read(); UNROLL]);
            if self.chunks > 0 {
                if !MAP.stages_dt_x {
                    next = self.load_dt_x(0);
                }
                self.store_stage(self.load_stage(0), self.load_dtx(0));
            }
            next
        }
    }

    /// With `stages_dt_x`: the lane's channel's 8 steps of dt and x from the
    /// staging area, in four 16-byte loads.
    unsafe fn read_dtx(&self) -> ([f32; UNROLL], [f32; UNROLL]) {
        let c = (self.lane / LANES) as usize;
        let (mut dtv, mut xv) = ([0.0f32; UNROLL], [0.0f32; UNROLL]);
        unsafe {
            crate::unroll!(h in 0..2 => {
                let d4 = (self.dtx_staged.add(c * UNROLL + 4 * h) as *const F32x4).read().0;
                let x4 = (self.dtx_staged.add((self.chans + c) * UNROLL + 4 * h) as *const F32x4).read().0;
                crate::unroll!(j in 0..4 => {
                    dtv[4 * h + j] = d4[j];
                    xv[4 * h + j] = x4[j];
                });
            });
        }
        (dtv, xv)
    }

    /// Step k's columns of B (or C, at `UNROLL * n`) from the staging area:
    /// aligned to 4 * COLS bytes (16 at most), as col0 and n are multiples of
    /// COLS, so one or two 16-byte loads (one 8-byte with two columns).
    unsafe fn staged_row(&self, base: usize, k: usize) -> [f32; COLS] {
        let mut v = [0.0f32; COLS];
        unsafe {
            let at = self.staged.add(base + k * self.n + self.col0);
            if COLS >= 4 {
                let p = at as *const F32x4;
                crate::unroll!(h in 0..COLS / 4, at most 2 => {
                    let four = p.add(h).read().0;
                    crate::unroll!(j in 0..4 => {
                        v[4 * h + j] = four[j];
                    });
                });
            } else {
                let two = (at as *const F32x2).read().0;
                crate::unroll!(j in 0..2 => {
                    v[j] = two[j];
                });
            }
        }
        v
    }

    /// Asks L2 for this lane's row of dt or x `PREFETCH_CHUNKS` chunks past
    /// step `t` (clamped to the last full pair), where the wave asks at all.
    fn prefetch(&self, t: usize) {
        let at = wave::uniform_usize((t + PREFETCH_CHUNKS * UNROLL).min(self.last_start));
        if self.pf_on {
            wave::prefetch_l2((self.pf_first + at * self.dm * size_of::<T>()) as *const u8);
        }
    }

    /// The chunk at step `t`. With `stages_dt_x` its dt and x come from the
    /// staging area; otherwise from `cur`, and the next chunk's go into
    /// `next`. It loads the next chunk's inputs (if `more`; otherwise this
    /// chunk's again, loaded and not used, so that no branch joins after the
    /// loads), asks L2 for dt and x ahead (if `prefetch`; after the loads,
    /// where it cost the least on an H200), scans, stores y, and stages the
    /// next chunk.
    #[inline(always)]
    unsafe fn scan_chunk(
        &self,
        rec: &mut Recurrence,
        t: usize,
        cur: &([T; UNROLL], [T; UNROLL]),
        next: &mut ([T; UNROLL], [T; UNROLL]),
        more: bool,
        prefetch: bool,
    ) {
        unsafe {
            let ahead = if more { t + UNROLL } else { t };
            let (mut dtv, mut xv) = ([0.0f32; UNROLL], [0.0f32; UNROLL]);
            if MAP.stages_dt_x {
                (dtv, xv) = self.read_dtx();
            } else {
                *next = self.load_dt_x(ahead);
            }
            let next_dtx = self.load_dtx(ahead);
            let next_stage = self.load_stage(ahead);
            if prefetch {
                self.prefetch(t);
            }
            wave::schedule_fence();
            if !MAP.stages_dt_x {
                crate::unroll!(k in 0..UNROLL => {
                    dtv[k] = cur.0[k].to_f32();
                    xv[k] = cur.1[k].to_f32();
                });
            }
            let q = self.chunk_steps(rec, &dtv, &xv);
            self.store_y_chunk(t, &q, &xv, rec.dsk);
            self.store_stage(next_stage, next_dtx);
        }
    }

    /// The recurrence over the chunk's 8 steps, with B and C from the staging
    /// area; returns each step's sum of this lane's columns. Two steps' B and C
    /// at a time: the scheduler would otherwise read all 8 steps' first (128
    /// registers with eight columns).
    #[inline(always)]
    unsafe fn chunk_steps(&self, rec: &mut Recurrence, dtv: &[f32; UNROLL], xv: &[f32; UNROLL]) -> [f32; UNROLL] {
        let mut q = [0.0f32; UNROLL];
        unsafe {
            crate::unroll!(k in 0..UNROLL => {
                if k.is_multiple_of(2) && k > 0 {
                    wave::schedule_fence();
                }
                q[k] = step(
                    &mut rec.s,
                    &rec.a2,
                    &self.valid,
                    dtv[k],
                    xv[k],
                    &self.staged_row(0, k),
                    &self.staged_row(UNROLL * self.n, k),
                );
            });
        }
        q
    }

    /// The chunk's y: the 8 steps' sums over the channel's lanes, transposed
    /// ([`channel_sums_8`]), so that this lane stores `kept` of the steps, plus
    /// `x Dskip` (with 16 lanes two lanes hold each total: the even one stores
    /// it).
    #[inline(always)]
    unsafe fn store_y_chunk(&self, t: usize, q: &[f32; UNROLL], xv: &[f32; UNROLL], dsk: f32) {
        let mut xd = [0.0f32; UNROLL];
        crate::unroll!(k in 0..UNROLL => {
            xd[k] = xv[k] * dsk;
        });
        let (totals, xd_kept, first_step) = channel_sums_8::<LANES>(*q, xd, self.sub);
        let kept = (UNROLL / LANES as usize).max(1);
        if self.channel_ok && (LANES <= 8 || self.sub & (LANES / 16) == 0) {
            crate::unroll!(i in 0..4 => {
                if i < kept {
                    unsafe {
                        self.y_c.add((t + first_step + i) * self.dm).write(T::from_f32(totals[i] + xd_kept[i]));
                    }
                }
            });
        }
    }

    /// One step's B or C at this lane's columns, straight from memory (the
    /// one-step loop).
    unsafe fn row(&self, c: *const T, t: usize) -> [f32; COLS] {
        let mut v = [0.0f32; COLS];
        unsafe {
            let start = c.add(wave::uniform_usize(self.bc_first + t * self.n) + self.col_lo);
            crate::unroll!(j in 0..COLS, at most 8 => {
                v[j] = start.add(if MASKED { self.offset[j] } else { j }).read().to_f32();
            });
        }
        v
    }

    /// The steps from `t` to L (the last `L % UNROLL`, or all of them in the
    /// masked instances), one at a time with the same operations in the same
    /// order as the chunks, so that a scan split anywhere equals one scan.
    #[inline(always)]
    unsafe fn scan_steps(&self, rec: &mut Recurrence, mut t: usize) {
        unsafe {
            while t < self.len {
                let dtk = self.dt.add(self.seq_first + t * self.dm + self.d).read().to_f32();
                let xk = self.x.add(self.seq_first + t * self.dm + self.d).read().to_f32();
                let q = step(&mut rec.s, &rec.a2, &self.valid, dtk, xk, &self.row(self.bm, t), &self.row(self.cm, t));
                let yk = channel_sum::<LANES>(q) + xk * rec.dsk;
                if self.channel_ok && self.sub == 0 {
                    self.y_c.add(t * self.dm).write(T::from_f32(yk));
                }
                t += 1;
            }
        }
    }

    /// Writes the lane's columns below N of the final state, at the addresses
    /// it read them from (a channel past Dm writes nothing).
    #[inline(always)]
    unsafe fn store_state(&self, s: &[f32; COLS]) {
        if self.channel_ok {
            crate::unroll!(j in 0..COLS, at most 8 => {
                if self.valid[j] {
                    unsafe { self.state_out.add(self.state_at + self.offset[j]).write(s[j]) };
                }
            });
        }
    }
}
