//! `mamba1_scan`: the Mamba1 selective scan of Mamba, Falcon-Mamba and Jamba
//! (spec/kernels.md section 3, a tolerance contract).
//!
//! ```text
//! s[b,d,n] <- exp(dt[b,t,d] * A[d,n]) * s[b,d,n] + dt[b,t,d] * x[b,t,d] * B[b,t,n]
//! y[b,t,d]  = sum_n s[b,d,n] * C[b,t,n]  +  x[b,t,d] * Dskip[d]
//! ```
//!
//! **Mapping.** For N > 16, the reference mapping: one wave of 32 lanes per
//! (b, d), lane `n` holds state column `n` in an f32 register for the whole
//! sequence, 8 channels (waves) per workgroup, and the sum over n is a butterfly
//! over all 32 lanes. For N <= 16 (the usual 16) a wave carries two channels,
//! one per 16-lane half, lane `16 h + n` holding column `n` of channel `2 w + h`,
//! and the sum folds the 16 lanes of each half: the lanes that held nothing in
//! the reference mapping do the next channel's work, so each step costs half the
//! wave instructions per channel. 16 channels per workgroup then
//! ([`channels_per_workgroup`]); grid x = `ceil(Dm / channels)`, grid y = B. A
//! wave whose first channel is past Dm leaves at once, as a whole (no barrier is
//! used, so the other waves of its workgroup are unaffected); a second channel
//! past Dm follows the first one's addresses and stores nothing. Lanes `n >= N`
//! follow column 0's addresses (every load in bounds, control flow uniform) but
//! contribute exactly `+0.0` to the sum and store nothing.
//!
//! **Operation order** (f32 throughout, `T` inputs widened exactly; this is the
//! kernel's documented choice, the contract itself is a tolerance):
//! ```text
//! decay = exp(dt * A[d,n])          # one f32 multiply, then crate::num::exp_fast (the GPU's
//!                                   # exp2 approximation; crate::num::exp on the host)
//! u     = (dt * x) * B[b,t,n]       # two f32 multiplies, dt*x first
//! s     = fma(decay, s, u)          # the only operation on the recurrence's critical path
//! p     = s * C[b,t,n]              # +0.0 on lanes n >= N
//! y     = T(sum(p) + x * Dskip[d])  # xor butterfly 16, 8, 4, 2, 1 over 32 lanes (N > 16),
//!                                   # or 8, 4, 2, 1 over a half (N <= 16); then one f32
//!                                   # multiply and one add; rounded once
//! ```
//!
//! **Schedule.** The time loop is unrolled by [`UNROLL`] = 8 steps and software
//! pipelined: the loads of the next 8 steps are issued before the arithmetic of
//! the current 8 (a [`wave::schedule_fence`] keeps them there). dt and x of all 8
//! steps arrive in one load instruction (lane `j < 8` of a channel reads dt of step
//! `t + j`, lane `8 + j` reads x of step `t + j`; each value is then broadcast from
//! its lane: a `readlane` into a scalar register on amdgpu for one channel per wave,
//! a lane exchange for two), then B and C of each step (16 independent loads).
//! Then the 8 exponentials and `u` values (they do not depend on the state), then
//! the 8 fused multiply-adds of the recurrence back to back, then the 8 sums over
//! the channel's lanes as one transposed butterfly (`channel_sums_8`): three
//! levels where each lane sends half of its remaining per-step values and keeps
//! the other half, then plain levels, so 8 exchanges instead of 32 (40 with one
//! channel per wave) and each lane ends with one step's total, added in the same
//! tree as the plain butterfly, so the bits are the same. The first lane holding
//! step `k`'s total stores its output. A remainder loop does the last `L % 8`
//! steps one at a time with the same operations in the same order, so the result
//! does not depend on where a step falls: a scan over L1 + L2 steps equals, bit
//! for bit, a scan over L1 steps followed by one over L2 steps from its state.
//! There is one schedule for every L (no chunking over L).
//!
//! Each step of this schedule (two channels per wave, the hardware exp2, the
//! pipelined loads, the transposed sums) was kept because it measured faster on
//! an H200; the timings are in `docs/performance.md` ("Measurements behind the
//! device constants"), with their runs, rather than here, where they would go
//! stale unseen.
//!
//! **In place.** Each lane reads its state column before the time loop and writes
//! it after it, at the same address, and no other lane or wave touches that
//! address: `state_in` and `state_out` may be the same buffer.

use core::f32::math::mul_add;

use crate::geometry::mamba1_scan::{MAX_N, UNROLL, WAVES_PER_WORKGROUP, channels_per_workgroup, lanes_per_channel};
use crate::num::{Elem, exp_fast};
use crate::wave;

// The step loops are `unroll!(k, const K in 0..8 => ..)`: `k` the step as a
// `usize`, `K` the same as a `const u32` (for lane-constant broadcasts).
const _: () = assert!(UNROLL == 8, "the step loops unroll exactly UNROLL = 8 steps");

// The cooperative load of dt and x needs 2 * UNROLL lanes.
const _: () = assert!(2 * UNROLL as u32 <= wave::WAVE_SIZE);

/// The sum of `p` over the lanes of a channel, as a xor butterfly: over all 32
/// lanes (m = 16, 8, 4, 2, 1) when a wave carries one channel, over each half
/// (m = 8, 4, 2, 1) when it carries two. Used by the one-step remainder loop.
#[inline(always)]
fn channel_sum(p: f32, half: bool) -> f32 {
    let p = if half { p } else { p + wave::shfl_xor_f32::<16>(p) };
    let p = p + wave::shfl_xor_f32::<8>(p);
    let p = p + wave::shfl_xor_f32::<4>(p);
    let p = p + wave::shfl_xor_f32::<2>(p);
    p + wave::shfl_xor_f32::<1>(p)
}

/// One level of a transposed butterfly: this lane and lane `lane ^ M` each hold
/// two halves `lo` and `hi` of their per-step values; the lane with bit `M` set
/// (`upper`) keeps `hi` and receives its partner's `hi`, the other keeps `lo`
/// and receives `lo`. One exchange sums two values' worth of pairs, and each
/// sum is `own + partner's`, exactly as in [`channel_sum`].
#[inline(always)]
fn exchange_half<const M: u32>(lo: f32, hi: f32, upper: bool) -> f32 {
    let send = if upper { lo } else { hi };
    let keep = if upper { hi } else { lo };
    keep + wave::shfl_xor_f32::<M>(send)
}

/// The sums over a channel's lanes of the 8 steps' `p`, with 8 exchanges
/// instead of 8 butterflies of 4 or 5: three transposed levels halve the values
/// each lane holds (8, 4, 2, 1), then plain butterfly levels finish. Lane `l`
/// of the channel ends with the sum of step [`step_of_lane`]`(l)`. Each step's
/// sum is added in the same tree as [`channel_sum`] builds (pairs at distance
/// 16 first, then 8, 4, 2, 1), so the bits are the same.
#[inline(always)]
fn channel_sums_8(p: [f32; UNROLL], col_lane: u32, half: bool) -> f32 {
    const _: () = assert!(UNROLL == 8, "channel_sums_8 folds 8 steps");
    // The first transposed level is m = 8 over a half, m = 16 over a whole wave.
    let top = if half { 8 } else { 16 };
    let u1 = col_lane & top != 0;
    let u2 = col_lane & (top >> 1) != 0;
    let u3 = col_lane & (top >> 2) != 0;
    let v: [f32; 4] = if half {
        core::array::from_fn(|i| exchange_half::<8>(p[i], p[i + 4], u1))
    } else {
        core::array::from_fn(|i| exchange_half::<16>(p[i], p[i + 4], u1))
    };
    let v: [f32; 2] = if half {
        core::array::from_fn(|i| exchange_half::<4>(v[i], v[i + 2], u2))
    } else {
        core::array::from_fn(|i| exchange_half::<8>(v[i], v[i + 2], u2))
    };
    let v = if half { exchange_half::<2>(v[0], v[1], u3) } else { exchange_half::<4>(v[0], v[1], u3) };
    let v = if half { v } else { v + wave::shfl_xor_f32::<2>(v) };
    v + wave::shfl_xor_f32::<1>(v)
}

/// The step whose sum [`channel_sums_8`] leaves on lane `col_lane` of a
/// channel of `lanes` lanes (16 or 32): the three bits below the top one.
#[inline(always)]
fn step_of_lane(col_lane: u32, lanes: u32) -> u32 {
    (col_lane / (lanes / UNROLL as u32)) % UNROLL as u32
}

/// Lane `base + src`'s value, where `base` is 0 or 16 and `src` is constant:
/// a readlane into a scalar register when the wave carries one channel (base 0),
/// a lane exchange when it carries two.
#[inline(always)]
fn from_lane<const SRC: u32>(v: f32, half: bool, base: u32) -> f32 {
    if half { f32::from_bits(wave::shfl_idx_u32(v.to_bits(), base + SRC)) } else { wave::broadcast_f32::<SRC>(v) }
}

/// The inputs of [`UNROLL`] steps as one lane loads them: `coop` is dt of step
/// `t + j` on lane `j < 8` of a channel and x of step `t + j` on lane `8 + j`;
/// `b` and `c` are this lane's column of B and C for each step.
#[derive(Clone, Copy)]
struct StepInputs {
    coop: f32,
    b: [f32; UNROLL],
    c: [f32; UNROLL],
}

impl StepInputs {
    /// Loads steps `t .. t + UNROLL` (all in bounds).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn load<T: Elem>(
        t: usize,
        col_lane: u32,
        dt_c: *const T,
        x_c: *const T,
        b_c: *const T,
        c_c: *const T,
        dm: usize,
        n: usize,
    ) -> Self {
        unsafe {
            let j = (col_lane % UNROLL as u32) as usize;
            let coop = if col_lane < UNROLL as u32 {
                dt_c.add((t + j) * dm).read().to_f32()
            } else if col_lane < 2 * UNROLL as u32 {
                x_c.add((t + j) * dm).read().to_f32()
            } else {
                0.0
            };
            let (mut b, mut c) = ([0.0f32; UNROLL], [0.0f32; UNROLL]);
            crate::unroll!(k in 0..8 => {
                b[k] = b_c.add((t + k) * n).read().to_f32();
                c[k] = c_c.add((t + k) * n).read().to_f32();
            });
            StepInputs { coop, b, c }
        }
    }
}

/// # Safety
/// `x, dt [batch, len, dm]`, `bm, cm [batch, len, n]`, `a [dm, n]` (f32),
/// `dskip [dm]`, `state_in, state_out [batch, dm, n]` (f32, may be the same
/// buffer), `y [batch, len, dm]`; every pointer aligned to its element type.
/// Launched with [`crate::geometry::mamba1_scan::WORKGROUP_SIZE`] threads per
/// workgroup, grid `[ceil(dm / 8), batch, 1]`, no workgroup memory. Arguments
/// out of range (`n` outside 1..=32, `len = 0`) make every wave leave at once;
/// the host launcher refuses them before that.
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
    // One channel per wave for N > 16; two (one per 16-lane half) for N <= 16.
    // Two instances, so that every choice that depends on it is made at compile time.
    unsafe {
        if n <= crate::geometry::mamba1_scan::HALF_WAVE_MAX_N {
            scan::<T, true>(x, dt, bm, cm, a, dskip, state_in, y, state_out, batch, len, dm, n)
        } else {
            scan::<T, false>(x, dt, bm, cm, a, dskip, state_in, y, state_out, batch, len, dm, n)
        }
    }
}

/// [`mamba1_scan`] with two channels per wave (`HALF`, N <= 16) or one.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn scan<T: Elem, const HALF: bool>(
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
    let b = wave::workgroup_id_y();
    let half = HALF;
    let per_wave = wave::WAVE_SIZE / lanes_per_channel(n);
    let wave_first =
        wave::workgroup_id_x() as u64 * channels_per_workgroup(n) as u64 + wave::wave_id() as u64 * per_wave as u64;
    // Uniform over the wave: the whole wave leaves.
    if b >= batch
        || wave_first >= dm as u64
        || len == 0
        || n == 0
        || n > MAX_N
        || wave::wave_id() >= WAVES_PER_WORKGROUP
    {
        return;
    }
    let lane = wave::lane_id();
    // `base`: the first lane of this lane's channel (0, or 16 for the second half).
    let base = if half { lane & 16 } else { 0 };
    let col_lane = lane - base;
    let d = wave_first + (base / 16) as u64;
    // A second channel past Dm follows the first one's addresses and stores nothing,
    // so that every lane still takes part in every exchange.
    let channel_ok = d < dm as u64;
    let d = if channel_ok { d } else { wave_first };
    let active = channel_ok && col_lane < n;
    // Lanes past N shadow column 0: in-bounds loads, no divergent branches.
    let col = if col_lane < n { col_lane as usize } else { 0 };
    let (b, d, len, dm, n) = (b as usize, d as usize, len as usize, dm as usize, n as usize);

    unsafe {
        let a_dn = a.add(d * n + col).read();
        let state_at = (b * dm + d) * n + col;
        // Read before any write: in-place state is safe.
        let mut s = state_in.add(state_at).read();
        let dsk = dskip.add(d).read().to_f32();
        // This channel's column of x, dt, y ([B, L, Dm]): step t is at t * dm.
        let first = b * len * dm + d;
        let (x_c, dt_c, y_c) = (x.add(first), dt.add(first), y.add(first));
        // This lane's column of B, C ([B, L, N]): step t is at t * n.
        let first_bc = b * len * n + col;
        let (b_c, c_c) = (bm.add(first_bc), cm.add(first_bc));

        let lanes = lanes_per_channel(n as u32);
        let my_step = step_of_lane(col_lane, lanes);
        // The lane that stores step `my_step`'s output: the first of the lanes holding it.
        let stores = channel_ok && col_lane.is_multiple_of(lanes / UNROLL as u32);
        let load = |t: usize| StepInputs::load::<T>(t, col_lane, dt_c, x_c, b_c, c_c, dm, n);
        let chunks = len / UNROLL;
        let mut t = 0usize;
        // Software pipelined: the next chunk's loads are issued before this
        // chunk's arithmetic, so their latency hides behind it.
        let mut next = if chunks > 0 { load(0) } else { StepInputs { coop: 0.0, b: [0.0; UNROLL], c: [0.0; UNROLL] } };
        for chunk in 0..chunks {
            let cur = next;
            if chunk + 1 < chunks {
                next = load(t + UNROLL);
            }
            wave::schedule_fence();
            // 1. dt and x of each step, broadcast from the lane that loaded it
            // (readlane on amdgpu, a register of the scalar unit).
            let (mut dtv, mut xv) = ([0.0f32; UNROLL], [0.0f32; UNROLL]);
            crate::unroll!(k, const K in 0..8 => {
                dtv[k] = from_lane::<K>(cur.coop, half, base);
                xv[k] = from_lane::<{ K + UNROLL as u32 }>(cur.coop, half, base);
            });
            // 2. What does not depend on the state.
            let mut decay = [0.0f32; UNROLL];
            let mut u = [0.0f32; UNROLL];
            crate::unroll!(k in 0..8 => {
                decay[k] = exp_fast(dtv[k] * a_dn);
                u[k] = (dtv[k] * xv[k]) * cur.b[k];
            });
            // 3. The recurrence: one fma per step.
            let mut p = [0.0f32; UNROLL];
            crate::unroll!(k in 0..8 => {
                s = mul_add(decay[k], s, u[k]);
                p[k] = if active { s * cur.c[k] } else { 0.0 };
            });
            // 4. The 8 sums, transposed: lane `l` ends with step `my_step`'s
            // sum, and one lane per step adds x * Dskip and stores it.
            let sum = channel_sums_8(p, col_lane, half);
            let x_mine = f32::from_bits(wave::shfl_idx_u32(cur.coop.to_bits(), base + UNROLL as u32 + my_step));
            if stores {
                y_c.add((t + my_step as usize) * dm).write(T::from_f32(sum + x_mine * dsk));
            }
            t += UNROLL;
        }
        // The last len % UNROLL steps: the same operations, one step at a time.
        while t < len {
            let dtk = dt_c.add(t * dm).read().to_f32();
            let xk = x_c.add(t * dm).read().to_f32();
            let bk = b_c.add(t * n).read().to_f32();
            let ck = c_c.add(t * n).read().to_f32();
            let decay = exp_fast(dtk * a_dn);
            let u = (dtk * xk) * bk;
            s = mul_add(decay, s, u);
            let p = if active { s * ck } else { 0.0 };
            let yk = channel_sum(p, half) + xk * dsk;
            if channel_ok && col_lane == 0 {
                y_c.add(t * dm).write(T::from_f32(yk));
            }
            t += 1;
        }

        if active {
            state_out.add(state_at).write(s);
        }
    }
}
