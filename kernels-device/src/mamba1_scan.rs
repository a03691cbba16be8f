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

/// The chunk at step `t` of [`scan`], a macro over the kernel's locals (named
/// in its arguments): as an `#[inline(always)]` function taking the loop's
/// closures by reference and its carried values through `&mut`, it changed the
/// generated code. With `stages_dt_x` its dt and x come from the staging area;
/// otherwise from `$cur`, and the next chunk's go into `$next`. It loads the
/// next chunk's inputs (if `$more`; otherwise this chunk's again, loaded and
/// not used, so that no branch joins after the loads), asks L2 for dt and x
/// ahead (if `$prefetch`; after the loads, where it cost the least on an H200),
/// scans, stores y, and stages the next chunk.
macro_rules! scan_chunk {
    (
        $cur:expr, $next:ident, $more:expr, $prefetch:expr;
        $t:ident, $s:ident, $a2:ident, $valid:ident, $n:ident, $dsk:ident, $sub:ident, $channel_ok:ident, $y_c:ident, $dm:ident;
        $read_dtx:ident, $load_dt_x:ident, $load_dtx:ident, $load_stage:ident, $prefetch_l2:ident, $staged_row:ident, $store_stage:ident
    ) => {{
        let cur = $cur;
        let ahead = if $more { $t + UNROLL } else { $t };
        let (mut dtv, mut xv) = ([0.0f32; UNROLL], [0.0f32; UNROLL]);
        if MAP.stages_dt_x {
            (dtv, xv) = $read_dtx();
        } else {
            $next = $load_dt_x(ahead);
        }
        let next_dtx = $load_dtx(ahead);
        let next_stage = $load_stage(ahead);
        if $prefetch {
            $prefetch_l2($t);
        }
        wave::schedule_fence();
        // Phases: widen dt and x, then the chunk's 8 steps. Inline: either
        // as a function changed the AMD code.
        if !MAP.stages_dt_x {
            crate::unroll!(k in 0..UNROLL => {
                dtv[k] = cur.0[k].to_f32();
                xv[k] = cur.1[k].to_f32();
            });
        }
        let mut q = [0.0f32; UNROLL];
        crate::unroll!(k in 0..UNROLL => {
            // Two steps' B and C at a time: the scheduler would otherwise
            // read all 8 steps' first (128 registers with eight columns).
            if k.is_multiple_of(2) && k > 0 {
                wave::schedule_fence();
            }
            q[k] = step(&mut $s, &$a2, &$valid, dtv[k], xv[k], &$staged_row(0, k), &$staged_row(UNROLL * $n, k));
        });
        // The 8 totals, transposed: this lane stores `kept` of the steps (with
        // 16 lanes, two lanes hold each total: the even one stores it).
        let mut xd = [0.0f32; UNROLL];
        crate::unroll!(k in 0..UNROLL => {
            xd[k] = xv[k] * $dsk;
        });
        let (totals, xd_kept, first_step) = channel_sums_8::<LANES>(q, xd, $sub);
        let kept = (UNROLL / LANES as usize).max(1);
        if $channel_ok && (LANES <= 8 || $sub & (LANES / 16) == 0) {
            store_y($y_c, $t + first_step, $dm, kept, &totals, &xd_kept);
        }
        $store_stage(next_stage, next_dtx);
        $t += UNROLL;
    }};
}

/// [`mamba1_scan`] with `LANES` lanes per channel; `MASKED`: some of the
/// lanes' columns are past N.
#[inline(always)]
unsafe fn scan<T: Elem, const LANES: u32, const MASKED: bool>(p: Scan<T>) {
    let Scan { x, dt, bm, cm, a, dskip, state_in, y, state_out, batch, len, dm, n } = p;
    let b = wave::workgroup_id_y();
    let per_wave = wave::WAVE_SIZE / LANES;
    let wave_first =
        wave::workgroup_id_x() as u64 * MAP.channels_per_workgroup(n) as u64 + wave::wave_id() as u64 * per_wave as u64;
    // Phase: the early exit, uniform over the wave: the whole wave leaves.
    // Inline: as a function returning the condition, it changed the code.
    if b >= batch
        || wave_first >= dm as u64
        || len == 0
        || n == 0
        || n > MAX_N
        || MAP.lanes_per_channel(n) != LANES
        || wave::wave_id() >= MAP.waves_per_workgroup
    {
        return;
    }
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

    // Phase: this lane's columns, `col0 + j`; past N a column reads column
    // `col_lo` instead (the lane's first column, or N - 1), so every load is in bounds.
    let col0 = sub as usize * COLS;
    let col_lo = col0.min(n - 1);
    let mut offset = [0usize; COLS];
    let mut valid = [true; COLS];
    columns::<MASKED>(&mut offset, &mut valid, col0, col_lo, n);

    unsafe {
        // Phase: the columns' `A log2 e` and initial states.
        let mut a2 = [0.0f32; COLS];
        let mut s = [0.0f32; COLS];
        let state_at = (b * dm + d) * n + col_lo;
        load_state(&mut a2, &mut s, a, state_in, d * n + col_lo, state_at, &offset, &valid);
        // Phase: the time loop's closures, each built by a function below from
        // references to these locals (see `dt_x_loader`).
        // x, dt, y are [B, L, Dm]: this batch's row t starts at t * dm. The row's
        // offset is computed once for the wave (a scalar register), so that
        // LLVM does not fold it into per-lane pointers of every step.
        let seq_first = b * len * dm;
        let (y_c, dsk) = (y.add(seq_first + d), dskip.add(d).read().to_f32());
        let (dt_c, x_c) = (dt.add(d), x.add(d));
        let load_dt_x = dt_x_loader(&dt_c, &x_c, &seq_first, &dm);
        // B and C are [B, L, N]: this batch's row t starts at t * n.
        let bc_first = b * len * n;
        let row = row_reader::<T, MASKED>(&bc_first, &n, &col_lo, &offset);

        // The staging area of B and C (`stage_loader`); the masked instances
        // take the one-step loop only.
        let chunks = if MASKED { 0 } else { len / UNROLL };
        let per_lane = UNROLL * n / wave::WAVE_SIZE as usize;
        let staged = (wave::workgroup_mem::<F32x4>() as *mut f32)
            .add(wave::wave_id() as usize * MAP.staged_floats_per_wave() as usize);
        let (bm_lane, cm_lane) = (bm.add(lane as usize), cm.add(lane as usize));
        let load_stage = stage_loader(&bc_first, &n, &bm, &cm, &per_lane, &bm_lane, &cm_lane);
        // `stager`'s: a bf16's bits go over a zeroed float's low half.
        let top_half = MAP.stages_dt_x && T::WIDENS_AS_TOP_HALF;
        let stage_at = stager::<T>(&top_half);
        if top_half && chunks > 0 {
            zero_bc_floats(staged, lane, per_lane, n);
        }

        // With `stages_dt_x`, the staging of dt and x (`dtx_loader`).
        let chans = per_wave as usize;
        let dtx_per_lane = if MAP.stages_dt_x { 2 * UNROLL * chans / wave::WAVE_SIZE as usize } else { 0 };
        let dtx_staged = staged.add(2 * UNROLL * MAX_N as usize);
        let (dt_seq, x_seq) = (dt.add(seq_first), x.add(seq_first));
        // Phase: where this lane's dt and x of a chunk come from and go. Inline:
        // as a function it changed the PTX's address arithmetic.
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
        let load_dtx = dtx_loader(&dtx_per_lane, &dtx_src, &dm);
        let read_dtx = dtx_reader::<LANES>(&lane, &dtx_staged, &chans);

        // Zeroed apart from B and C's floats: in one loop with theirs, LLVM ordered
        // the chunk otherwise and ptxas's schedule of it was slower
        // (docs/performance.md, "dt and x staged").
        if top_half && chunks > 0 {
            zero_dtx_floats(dtx_staged, &dtx_at, dtx_per_lane);
        }
        let store_stage = stage_storer(&per_lane, &lane, &stage_at, &staged, &n, &dtx_per_lane, &dtx_staged, &dtx_at);
        let staged_row = staged_row_reader(&staged, &n, &col0);

        // Phase: the L2 prefetch's plan (`prefetcher`). Inline: as a function
        // returning its three values, it changed the PTX.
        let pf_rows = 2 * UNROLL;
        let pf_row = lane as usize % pf_rows;
        let pf_array = pf_chooser::<T>(&lane, &pf_rows);
        // `wrapping_add`: for L below 16 (no pair, so no prefetch) the row may
        // lie past the tensor; the rows asked for are clamped below L.
        let pf_first = pf_array(dt_c, x_c).wrapping_add(seq_first + pf_row * dm) as usize;
        let starts_line = line_starter::<T>(&seq_first, &wave_first, &per_wave);
        let pf_on = starts_line(pf_array(dt, x));
        // The first row of the last full pair: every row asked for is below L.
        let last_start = (chunks * UNROLL).max(pf_rows) - pf_rows;
        let prefetch = prefetcher::<T>(&last_start, &pf_on, &pf_first, &dm);
        // Phase: the first chunk's inputs, loaded and staged before the loop.
        // Inline, as `scan_chunk!` is: that one, as a function calling the
        // closures, changed the code.
        let mut t = 0usize;
        let mut next = ([dt_c.read(); UNROLL], [x_c.read(); UNROLL]);
        if chunks > 0 {
            if !MAP.stages_dt_x {
                next = load_dt_x(0);
            }
            store_stage(load_stage(0), load_dtx(0));
        }
        // One chunk ([`scan_chunk!`]) with this kernel's locals.
        macro_rules! chunk {
            ($cur:expr, $next:ident, $more:expr, $prefetch:expr) => {
                scan_chunk!($cur, $next, $more, $prefetch; t, s, a2, valid, n, dsk, sub, channel_ok, y_c, dm;
                    read_dtx, load_dt_x, load_dtx, load_stage, prefetch, staged_row, store_stage)
            };
        }
        // Phase: the chunks, two an iteration where the mapping says so (the
        // prefetch runs once a pair).
        if MAP.chunks_per_iteration == 2 {
            let mut other = next;
            for pair in 0..chunks / 2 {
                chunk!(next, other, true, true);
                chunk!(other, next, 2 * pair + 2 < chunks, false);
            }
            // The last chunk of an odd count: a loop rather than an `if`, as the
            // inputs it loads are never read, which the lint flags after an `if`.
            for _ in 0..chunks % 2 {
                chunk!(next, next, false, false);
            }
        } else {
            for chunk in 0..chunks {
                chunk!(next, next, chunk + 1 < chunks, false);
            }
        }
        // Phase: the last len % UNROLL steps, the same operations one step at a
        // time. Inline: a step or the loop as a function changed the AMD code.
        while t < len {
            let dtk = dt.add(seq_first + t * dm + d).read().to_f32();
            let xk = x.add(seq_first + t * dm + d).read().to_f32();
            let q = step(&mut s, &a2, &valid, dtk, xk, &row(bm, t), &row(cm, t));
            let yk = channel_sum::<LANES>(q) + xk * dsk;
            if channel_ok && sub == 0 {
                y_c.add(t * dm).write(T::from_f32(yk));
            }
            t += 1;
        }

        // Phase: the final states.
        if channel_ok {
            store_state(state_out, state_at, &s, &offset, &valid);
        }
    }
}

// The closures of `scan`'s time loop. Each is built by a function of its own
// from references to the kernel's locals, so that it is the same closure as one
// written in the body (capturing those locals by reference): as methods of a
// struct holding the same values, or references to them, they changed the
// generated code.

/// Without staging, each lane loads its channel's dt and x of the chunk at
/// step `t`. The values stay as loaded (T) until after the schedule fence: a
/// widening there would wait for the load at once.
#[inline(always)]
fn dt_x_loader<'a, T: Elem>(
    dt_c: &'a *const T,
    x_c: &'a *const T,
    seq_first: &'a usize,
    dm: &'a usize,
) -> impl Fn(usize) -> ([T; UNROLL], [T; UNROLL]) + 'a {
    move |t: usize| -> ([T; UNROLL], [T; UNROLL]) {
        unsafe {
            let (mut dtv, mut xv) = ([dt_c.read(); UNROLL], [x_c.read(); UNROLL]);
            crate::unroll!(k in 0..UNROLL => {
                let at = wave::uniform_usize(*seq_first + (t + k) * *dm);
                dtv[k] = dt_c.add(at).read();
                xv[k] = x_c.add(at).read();
            });
            (dtv, xv)
        }
    }
}

/// One step's B or C at this lane's columns, straight from memory (the
/// one-step loop).
#[inline(always)]
fn row_reader<'a, T: Elem, const MASKED: bool>(
    bc_first: &'a usize,
    n: &'a usize,
    col_lo: &'a usize,
    offset: &'a [usize; COLS],
) -> impl Fn(*const T, usize) -> [f32; COLS] + 'a {
    move |c: *const T, t: usize| -> [f32; COLS] {
        unsafe {
            let start = c.add(wave::uniform_usize(*bc_first + t * *n) + *col_lo);
            let mut v = [0.0f32; COLS];
            crate::unroll!(j in 0..COLS, at most 8 => {
                v[j] = start.add(if MASKED { offset[j] } else { j }).read().to_f32();
            });
            v
        }
    }
}

/// The unrolled loop (N = 16 or 32): B and C of 8 steps are 8 N consecutive
/// values each, which the wave loads together (each lane N / 4 values of each,
/// coalesced), one chunk ahead with dt and x, and stages as f32 in its own
/// workgroup memory, `[2][UNROLL][N]`; each step then reads its columns of B
/// and of C from there in 16-byte loads (8-byte with two columns). Those waits
/// (lgkmcnt) do not wait for the next chunk's loads from memory (vmcnt), so all
/// of those stay in flight during the chunk's arithmetic.
///
/// This closure: this lane's values of B and C of the chunk at step `t`, as loaded (lane
/// `l` loads values `l + 32 m` of each).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn stage_loader<'a, T: Elem>(
    bc_first: &'a usize,
    n: &'a usize,
    bm: &'a *const T,
    cm: &'a *const T,
    per_lane: &'a usize,
    bm_lane: &'a *const T,
    cm_lane: &'a *const T,
) -> impl Fn(usize) -> ([T; STAGE], [T; STAGE]) + 'a {
    move |t: usize| -> ([T; STAGE], [T; STAGE]) {
        unsafe {
            let first = wave::uniform_usize(*bc_first + t * *n);
            let (mut bv, mut cv) = ([bm.read(); STAGE], [cm.read(); STAGE]);
            crate::unroll!(m in 0..STAGE => {
                if m < *per_lane {
                    bv[m] = bm_lane.add(first + m * wave::WAVE_SIZE as usize).read();
                    cv[m] = cm_lane.add(first + m * wave::WAVE_SIZE as usize).read();
                }
            });
            (bv, cv)
        }
    }
}

/// One value at a staged float. With `stages_dt_x`, a bf16's bits go over
/// the float's low half, which this lane zeroed before the loop and which
/// nothing else writes (`top_half`): the float is the value widened, with no
/// instruction (only bf16's bits are the top half of its f32).
#[inline(always)]
fn stager<T: Elem>(top_half: &bool) -> impl Fn(*mut f32, T) + '_ {
    move |at: *mut f32, v: T| unsafe {
        if *top_half {
            (at as *mut u16).add(1).write(v.to_bits_u32() as u16);
        } else {
            at.write(v.to_f32());
        }
    }
}

/// With `stages_dt_x` the wave also stages its channels' dt and x of the
/// chunk, `[2][channels][UNROLL]` after B and C: each value is loaded and
/// widened once for the wave (not once per lane of its channel), and each lane
/// reads its channel's 8 steps of each in two 16-byte loads. Value
/// `v = lane + 32 m` of the chunk is array `v / (8 channels)` (dt, then x),
/// channel `v % channels` (past Dm: channel Dm - 1, as its lanes), step
/// `(v / channels) % 8`: a row's channels are adjacent in memory, so the loads
/// are coalesced.
///
/// This closure: this lane's values of dt and x of the chunk at step `t`, as
/// loaded (from `dtx_src`).
#[inline(always)]
fn dtx_loader<'a, T: Elem>(
    dtx_per_lane: &'a usize,
    dtx_src: &'a [*const T; DTX_STAGE],
    dm: &'a usize,
) -> impl Fn(usize) -> [T; DTX_STAGE] + 'a {
    move |t: usize| -> [T; DTX_STAGE] {
        unsafe {
            let mut v = [T::from_bits_u32(0); DTX_STAGE];
            crate::unroll!(m in 0..DTX_STAGE => {
                if m < *dtx_per_lane {
                    v[m] = dtx_src[m].add(wave::uniform_usize(t * *dm)).read();
                }
            });
            v
        }
    }
}

/// With `stages_dt_x`, the lane's channel's staged dt and x of the chunk's 8
/// steps, in four 16-byte loads.
#[inline(always)]
fn dtx_reader<'a, const LANES: u32>(
    lane: &'a u32,
    dtx_staged: &'a *mut f32,
    chans: &'a usize,
) -> impl Fn() -> ([f32; UNROLL], [f32; UNROLL]) + 'a {
    move || -> ([f32; UNROLL], [f32; UNROLL]) {
        unsafe {
            let c = (*lane / LANES) as usize;
            let (mut dtv, mut xv) = ([0.0f32; UNROLL], [0.0f32; UNROLL]);
            crate::unroll!(h in 0..2 => {
                let d4 = (dtx_staged.add(c * UNROLL + 4 * h) as *const F32x4).read().0;
                let x4 = (dtx_staged.add((*chans + c) * UNROLL + 4 * h) as *const F32x4).read().0;
                crate::unroll!(j in 0..4 => {
                    dtv[4 * h + j] = d4[j];
                    xv[4 * h + j] = x4[j];
                });
            });
            (dtv, xv)
        }
    }
}

/// Stages this lane's loaded values of the next chunk (B and C at `staged`,
/// dt and x at `dtx_staged`), once every lane has read the previous chunk's.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn stage_storer<'a, T: Elem>(
    per_lane: &'a usize,
    lane: &'a u32,
    stage_at: &'a impl Fn(*mut f32, T),
    staged: &'a *mut f32,
    n: &'a usize,
    dtx_per_lane: &'a usize,
    dtx_staged: &'a *mut f32,
    dtx_at: &'a [usize; DTX_STAGE],
) -> impl Fn(([T; STAGE], [T; STAGE]), [T; DTX_STAGE]) + 'a {
    move |(bv, cv): ([T; STAGE], [T; STAGE]), dtx: [T; DTX_STAGE]| unsafe {
        // Every lane has read the previous chunk's values.
        wave::sync_lanes();
        crate::unroll!(m in 0..STAGE => {
            if m < *per_lane {
                let e = *lane as usize + m * wave::WAVE_SIZE as usize;
                stage_at(staged.add(e), bv[m]);
                stage_at(staged.add(UNROLL * *n + e), cv[m]);
            }
        });
        crate::unroll!(m in 0..DTX_STAGE => {
            if m < *dtx_per_lane {
                stage_at(dtx_staged.add(dtx_at[m]), dtx[m]);
            }
        });
        wave::sync_lanes();
    }
}

/// Step k's columns of B (or C, at `UNROLL * n`) from the staging area:
/// aligned to 4 * COLS bytes (16 at most), as col0 and n are multiples of COLS.
#[inline(always)]
fn staged_row_reader<'a>(
    staged: &'a *mut f32,
    n: &'a usize,
    col0: &'a usize,
) -> impl Fn(usize, usize) -> [f32; COLS] + 'a {
    move |base: usize, k: usize| -> [f32; COLS] {
        unsafe {
            let at = staged.add(base + k * *n + *col0);
            let mut v = [0.0f32; COLS];
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
            v
        }
    }
}

/// What each lane asks L2 for in the first chunk of a pair: one row of the
/// wave's dt (lanes 0-15) or x (lanes 16-31), among the pair's 16 rows
/// PREFETCH_CHUNKS chunks ahead; the wave's channels lie in one 32-byte sector
/// of a row. The lines are 128 bytes, so a wave asks only if the previous
/// wave's channels lie in another line (judged in row 0, for the whole
/// sequence: a miss costs only time).
///
/// This closure asks L2 for the wave's dt or x (this lane's row, from `pf_first`)
/// `PREFETCH_CHUNKS` chunks past step `t`, clamped to the last full pair's
/// first row; only where `pf_on`.
#[inline(always)]
fn prefetcher<'a, T>(
    last_start: &'a usize,
    pf_on: &'a bool,
    pf_first: &'a usize,
    dm: &'a usize,
) -> impl Fn(usize) + 'a {
    move |t: usize| {
        let at = wave::uniform_usize((t + PREFETCH_CHUNKS * UNROLL).min(*last_start));
        if *pf_on {
            wave::prefetch_l2((*pf_first + at * *dm * size_of::<T>()) as *const u8);
        }
    }
}

/// Of two pointers, the one into dt (`dt_side`) for lanes 0-15 and the one
/// into x (`x_side`) for lanes 16-31: the array this lane asks L2 for.
#[inline(always)]
fn pf_chooser<'a, T>(lane: &'a u32, pf_rows: &'a usize) -> impl Fn(*const T, *const T) -> *const T + 'a {
    move |dt_side: *const T, x_side: *const T| if *lane as usize / *pf_rows == 0 { dt_side } else { x_side }
}

/// Whether the wave's channels of row 0 of the array at `p` start a 128-byte
/// line, apart from the previous wave's (or are the first wave's).
#[inline(always)]
fn line_starter<'a, T>(seq_first: &'a usize, wave_first: &'a u64, per_wave: &'a u32) -> impl Fn(*const T) -> bool + 'a {
    move |p: *const T| unsafe {
        let at = p.add(*seq_first + *wave_first as usize) as usize;
        *wave_first == 0 || at / 128 != (at - *per_wave as usize * size_of::<T>()) / 128
    }
}

/// This lane's columns: `col0 + j`; past N a column reads column `col_lo`
/// instead (the lane's first column, or N - 1), so every load is in bounds.
/// Writes where each column is, `col_lo + offset[j]`, and whether it is below
/// N, `valid[j]` (it adds to the sums and is stored).
#[inline(always)]
fn columns<const MASKED: bool>(
    offset: &mut [usize; COLS],
    valid: &mut [bool; COLS],
    col0: usize,
    col_lo: usize,
    n: usize,
) {
    crate::unroll!(j in 0..COLS => {
        valid[j] = !MASKED || col0 + j < n;
        offset[j] = if valid[j] { col0 + j - col_lo } else { 0 };
    });
}

/// Stores a chunk's y of the `kept` steps from `first` this lane holds after
/// the transposed exchange ([`channel_sums_8`]): `totals + x Dskip`, rounded
/// once to T.
#[inline(always)]
unsafe fn store_y<T: Elem>(y_c: *mut T, first: usize, dm: usize, kept: usize, totals: &[f32; 4], xd_kept: &[f32; 4]) {
    unsafe {
        crate::unroll!(i in 0..4 => {
            if i < kept {
                y_c.add((first + i) * dm).write(T::from_f32(totals[i] + xd_kept[i]));
            }
        });
    }
}

/// Zeroes the low halves of this lane's staged floats of B and C, over which
/// a bf16's bits go (see `stage_at`), once before the loop.
#[inline(always)]
unsafe fn zero_bc_floats(staged: *mut f32, lane: u32, per_lane: usize, n: usize) {
    unsafe {
        crate::unroll!(m in 0..STAGE => {
            if m < per_lane {
                let e = lane as usize + m * wave::WAVE_SIZE as usize;
                staged.add(e).write(0.0);
                staged.add(UNROLL * n + e).write(0.0);
            }
        });
    }
}

/// Zeroes the low halves of this lane's staged floats of dt and x, as
/// [`zero_bc_floats`] those of B and C (in a loop of their own: in one loop
/// with theirs, LLVM ordered the chunk otherwise and ptxas's schedule of it
/// was slower, docs/performance.md, "dt and x staged").
#[inline(always)]
unsafe fn zero_dtx_floats(dtx_staged: *mut f32, dtx_at: &[usize; DTX_STAGE], dtx_per_lane: usize) {
    unsafe {
        crate::unroll!(m in 0..DTX_STAGE => {
            if m < dtx_per_lane {
                dtx_staged.add(dtx_at[m]).write(0.0);
            }
        });
    }
}

/// Loads the lane's columns' `A log2 e` (from `a_at`, channel d's row of A at
/// column `col_lo`) and initial states (from `state_at`; a column past N starts
/// at zero and stays out of every sum). Every state is read before any is
/// written ([`store_state`]), so the state may be updated in place.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn load_state(
    a2: &mut [f32; COLS],
    s: &mut [f32; COLS],
    a: *const f32,
    state_in: *const f32,
    a_at: usize,
    state_at: usize,
    offset: &[usize; COLS],
    valid: &[bool; COLS],
) {
    unsafe {
        crate::unroll!(j in 0..COLS => {
            a2[j] = a.add(a_at + offset[j]).read() * LOG2E;
            s[j] = if valid[j] { state_in.add(state_at + offset[j]).read() } else { 0.0 };
        });
    }
}

/// Stores the lane's final states, those of its columns below N.
#[inline(always)]
unsafe fn store_state(
    state_out: *mut f32,
    state_at: usize,
    s: &[f32; COLS],
    offset: &[usize; COLS],
    valid: &[bool; COLS],
) {
    unsafe {
        crate::unroll!(j in 0..COLS => {
            if valid[j] {
                state_out.add(state_at + offset[j]).write(s[j]);
            }
        });
    }
}
