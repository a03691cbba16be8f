//! `mamba1_scan`: the Mamba1 selective scan of Mamba, Falcon-Mamba and Jamba
//! (spec/kernels.md section 3, a tolerance contract).
//!
//! ```text
//! s[b,d,n] <- exp(dt[b,t,d] * A[d,n]) * s[b,d,n] + dt[b,t,d] * x[b,t,d] * B[b,t,n]
//! y[b,t,d]  = sum_n s[b,d,n] * C[b,t,n]  +  x[b,t,d] * Dskip[d]
//! ```
//!
//! **Mapping.** One wave of 32 lanes per (b, d); lane `n` holds state column `n`
//! in an f32 register for the whole sequence. [`CHANNELS_PER_WORKGROUP`] = 8
//! channels (waves) per workgroup: grid x = `ceil(Dm / 8)`, grid y = B. A wave
//! whose channel is past Dm leaves at once, as a whole (no barrier is used, so the
//! other waves of its workgroup are unaffected). Lanes `n >= N` follow lane 0's
//! addresses (so every load is in bounds and the control flow stays uniform) but
//! contribute exactly `+0.0` to the sum and store nothing.
//!
//! **Operation order** (f32 throughout, `T` inputs widened exactly; this is the
//! kernel's documented choice, the contract itself is a tolerance):
//! ```text
//! decay = exp(dt * A[d,n])          # one f32 multiply, then crate::num::exp (<= 2 ulp)
//! u     = (dt * x) * B[b,t,n]       # two f32 multiplies, dt*x first
//! s     = fma(decay, s, u)          # the only operation on the recurrence's critical path
//! p     = s * C[b,t,n]              # +0.0 on lanes n >= N
//! y     = T(wave_sum(p) + x * Dskip[d])   # xor butterfly 16, 8, 4, 2, 1 over all 32 lanes,
//!                                         # then one f32 multiply and one add; rounded once
//! ```
//!
//! **Schedule.** The time loop is unrolled by [`UNROLL`] = 8 steps. First every
//! input of the 8 steps is loaded: dt and x of all 8 steps in one load instruction
//! (lane `j < 8` reads dt of step `t + j`, lane `8 + j` reads x of step `t + j`;
//! each value is then broadcast from its lane, a `readlane` into a scalar register
//! on amdgpu), then B and C of each step (16 independent loads in flight). Then the
//! 8 exponentials and `u` values (they do not depend on the state), then the 8
//! fused multiply-adds of the recurrence back to back, then the 8 wave sums (40
//! independent lane exchanges); lane `k` keeps step `k`'s output, so lanes 0..7
//! store the 8 `y` values with one store instruction. A remainder loop does the
//! last `L % 8` steps one at a time with the same operations in the same order, so
//! the result does not depend on where a step falls: a scan over L1 + L2 steps
//! equals, bit for bit, a scan over L1 steps followed by one over L2 steps from its
//! state. There is one schedule for every L (no chunking over L).
//!
//! Measured on an H200 (CUDA backend, bf16, B = 1, Dm = 8192, N = 16, L = 512):
//! 642 ns per step, against 712 ns with 8 separate uniform loads of dt and x per
//! chunk and 692 ns with a 16-step unroll (more registers, fewer resident waves).
//! The kernel is bound by instruction issue there: about 90 instructions per step
//! and lane, of which `crate::num::exp` (with its branches) is about a third.
//!
//! **In place.** Each lane reads its state column before the time loop and writes
//! it after it, at the same address, and no other lane or wave touches that
//! address: `state_in` and `state_out` may be the same buffer.

use core::f32::math::mul_add;

use crate::geometry::mamba1_scan::{CHANNELS_PER_WORKGROUP, MAX_N, UNROLL};
use crate::num::{Elem, exp};
use crate::wave;

/// Runs `$body` once for each step of the unrolled loop, by hand: `$k` is the step
/// as a `usize`, `$kc` the same as a `const u32` (for lane-constant broadcasts).
/// The per-step arrays live in registers only if every index into them is a constant.
macro_rules! for_each_step {
    ($k:ident, $kc:ident => $body:block) => {
        for_each_step!(@ $k, $kc, $body, 0 1 2 3 4 5 6 7)
    };
    (@ $k:ident, $kc:ident, $body:block, $($i:literal)*) => {{
        const _: () = assert!(UNROLL == [$($i),*].len(), "for_each_step! must list 0..UNROLL");
        $( { let $k: usize = $i; const $kc: u32 = $i; $body } )*
    }};
}

// The cooperative load of dt and x needs 2 * UNROLL lanes.
const _: () = assert!(2 * UNROLL as u32 <= wave::WAVE_SIZE);

/// `wave_sum(p) + x * dskip`: the step's output before its one rounding to `T`.
#[inline(always)]
fn output(p: f32, x: f32, dskip: f32) -> f32 {
    wave::wave_sum_f32(p) + x * dskip
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
    let b = wave::workgroup_id_y();
    let d = wave::workgroup_id_x() as u64 * CHANNELS_PER_WORKGROUP as u64 + wave::wave_id() as u64;
    // Uniform over the wave (d depends only on the wave): the whole wave leaves.
    if b >= batch || d >= dm as u64 || len == 0 || n == 0 || n > MAX_N {
        return;
    }
    let lane = wave::lane_id();
    let active = lane < n;
    // Lanes past N shadow lane 0: in-bounds loads, no divergent branches.
    let col = if active { lane as usize } else { 0 };
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

        let mut t = 0usize;
        while t + UNROLL <= len {
            // 1. Every input of the 8 steps.
            // dt and x of the 8 steps in one load: lane j < 8 reads dt of step
            // t + j, lane 8 + j reads x of step t + j; each is then broadcast
            // from its lane (readlane on amdgpu, a register of the scalar unit).
            let j = (lane % UNROLL as u32) as usize;
            let coop = if lane < UNROLL as u32 {
                dt_c.add((t + j) * dm).read().to_f32()
            } else if lane < 2 * UNROLL as u32 {
                x_c.add((t + j) * dm).read().to_f32()
            } else {
                0.0
            };
            let (mut dtv, mut xv, mut bv, mut cv) = ([0.0f32; UNROLL], [0.0f32; UNROLL], [0.0f32; UNROLL], [0.0f32; UNROLL]);
            for_each_step!(k, K => {
                dtv[k] = wave::broadcast_f32::<K>(coop);
                xv[k] = wave::broadcast_f32::<{ K + UNROLL as u32 }>(coop);
                bv[k] = b_c.add((t + k) * n).read().to_f32();
                cv[k] = c_c.add((t + k) * n).read().to_f32();
            });
            // 2. What does not depend on the state.
            let mut decay = [0.0f32; UNROLL];
            let mut u = [0.0f32; UNROLL];
            for_each_step!(k, _K => {
                decay[k] = exp(dtv[k] * a_dn);
                u[k] = (dtv[k] * xv[k]) * bv[k];
            });
            // 3. The recurrence: one fma per step.
            let mut p = [0.0f32; UNROLL];
            for_each_step!(k, _K => {
                s = mul_add(decay[k], s, u[k]);
                p[k] = if active { s * cv[k] } else { 0.0 };
            });
            // 4. The 8 sums (every lane gets each); lane k keeps step k's output and stores it.
            let mut mine = 0.0f32;
            for_each_step!(k, _K => {
                let yk = output(p[k], xv[k], dsk);
                if lane == k as u32 {
                    mine = yk;
                }
            });
            if lane < UNROLL as u32 {
                y_c.add((t + lane as usize) * dm).write(T::from_f32(mine));
            }
            t += UNROLL;
        }
        // The last len % UNROLL steps: the same operations, one step at a time.
        while t < len {
            let dtk = dt_c.add(t * dm).read().to_f32();
            let xk = x_c.add(t * dm).read().to_f32();
            let bk = b_c.add(t * n).read().to_f32();
            let ck = c_c.add(t * n).read().to_f32();
            let decay = exp(dtk * a_dn);
            let u = (dtk * xk) * bk;
            s = mul_add(decay, s, u);
            let p = if active { s * ck } else { 0.0 };
            let yk = output(p, xk, dsk);
            if lane == 0 {
                y_c.add(t * dm).write(T::from_f32(yk));
            }
            t += 1;
        }

        if active {
            state_out.add(state_at).write(s);
        }
    }
}
