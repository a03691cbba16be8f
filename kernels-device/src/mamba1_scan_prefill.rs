//! `mamba1_scan_prefill`: the prefill schedule of the Mamba1 selective scan
//! (spec/kernels.md section 3). Same contract and arguments as
//! [`crate::mamba1_scan`]; the host launcher runs this one for long sequences
//! (`L >= PREFILL_MIN_LEN`) and the reference mapping for decode.
//!
//! **Why a second schedule.** In the reference mapping a whole wave carries one
//! channel: every step costs about 90 wave instructions per channel, half of
//! them on lanes that hold nothing when N = 16, and a long prompt is a long
//! chain of such steps. Here a channel is carried by a group of
//! [`PREFILL_LANES_PER_CHANNEL`] = 4 lanes, each holding `ceil(N / 4)` state
//! columns in registers, and a wave carries 8 channels: per step and channel the
//! wave issues about a fifth of the instructions, and the per-step sum over n is
//! a sequential fma over a lane's columns followed by a 2-level xor butterfly
//! (1, 2) inside the group. Dm = 5120 still gives 640 waves, enough to fill a
//! large GPU.
//!
//! **Operation order** (f32; the contract is a tolerance):
//! ```text
//! dtx   = dt * x
//! for each of the lane's columns n, ascending:
//!     s[n] = fma(exp(dt * A[d,n]), s[n], dtx * B[b,t,n])
//!     acc  = fma(s[n], C[b,t,n], acc)            # acc starts at +0.0
//! y = T((acc + shfl_xor(acc, 1)) + shfl_xor(.., 2)  +  x * Dskip[d])
//! ```
//! The time loop loads the inputs of [`PREFILL_UNROLL`] steps before computing
//! them; the remainder steps run the same operations one at a time, so a scan
//! over L1 + L2 steps equals, bit for bit, one over L1 followed by one over L2.
//! Lanes of channels past Dm follow the last channel's addresses and store
//! nothing, so every lane of a wave takes part in every exchange.

use core::f32::math::mul_add;

use crate::geometry::mamba1_scan::{MAX_N, PREFILL_CHANNELS_PER_WAVE, PREFILL_CHANNELS_PER_WORKGROUP, PREFILL_LANES_PER_CHANNEL, PREFILL_MAX_COLS, PREFILL_UNROLL};
use crate::num::{Elem, exp};
use crate::wave;

const _: () = assert!(PREFILL_LANES_PER_CHANNEL == 4, "the butterfly below folds exactly 4 lanes");
const _: () = assert!(PREFILL_MAX_COLS == 8 && PREFILL_MAX_COLS as u32 * PREFILL_LANES_PER_CHANNEL == MAX_N);
const _: () = assert!(PREFILL_UNROLL == 4);

/// One step of one channel for this lane's `cols` columns: updates the state and
/// returns the step's output (the same on the 4 lanes of the channel).
/// Always inlined: the arrays must stay in registers.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn step(
    s: &mut [f32; PREFILL_MAX_COLS],
    a_d: &[f32; PREFILL_MAX_COLS],
    cols: usize,
    dsk: f32,
    dtk: f32,
    xk: f32,
    bk: &[f32; PREFILL_MAX_COLS],
    ck: &[f32; PREFILL_MAX_COLS],
) -> f32 {
    let dtx = dtk * xk;
    let mut acc = 0.0f32;
    crate::unroll8!(j => {
        if j < cols {
            s[j] = mul_add(exp(dtk * a_d[j]), s[j], dtx * bk[j]);
            acc = mul_add(s[j], ck[j], acc);
        }
    });
    let acc = acc + wave::shfl_xor_f32::<1>(acc);
    let acc = acc + wave::shfl_xor_f32::<2>(acc);
    acc + xk * dsk
}

/// # Safety
/// As for [`crate::mamba1_scan::mamba1_scan`], launched with
/// [`crate::geometry::mamba1_scan::WORKGROUP_SIZE`] threads per workgroup and grid
/// `[ceil(dm / PREFILL_CHANNELS_PER_WORKGROUP), batch, 1]`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn mamba1_scan_prefill<T: Elem>(
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
    let wave_first = wave::workgroup_id_x() as u64 * PREFILL_CHANNELS_PER_WORKGROUP as u64 + wave::wave_id() as u64 * PREFILL_CHANNELS_PER_WAVE as u64;
    // Uniform over the wave: the whole wave leaves.
    if b >= batch || wave_first >= dm as u64 || len == 0 || n == 0 || n > MAX_N {
        return;
    }
    let lane = wave::lane_id();
    let member = (lane % PREFILL_LANES_PER_CHANNEL) as usize;
    let d = wave_first + (lane / PREFILL_LANES_PER_CHANNEL) as u64;
    let valid = d < dm as u64;
    let (b, len, dm, n) = (b as usize, len as usize, dm as usize, n as usize);
    let d = if valid { d as usize } else { dm - 1 };
    // This lane's columns: [first_col, first_col + cols) within 0..n.
    let per_lane = n.div_ceil(PREFILL_LANES_PER_CHANNEL as usize);
    let first_col = member * per_lane;
    let cols = if first_col >= n { 0 } else if n - first_col < per_lane { n - first_col } else { per_lane };

    unsafe {
        let state_at = (b * dm + d) * n + first_col;
        let mut s = [0.0f32; PREFILL_MAX_COLS];
        let mut a_d = [0.0f32; PREFILL_MAX_COLS];
        crate::unroll8!(j => {
            if j < cols {
                // Read before any write: in-place state is safe.
                s[j] = state_in.add(state_at + j).read();
                a_d[j] = a.add(d * n + first_col + j).read();
            }
        });
        let dsk = dskip.add(d).read().to_f32();
        let first = b * len * dm + d;
        let (x_c, dt_c, y_c) = (x.add(first), dt.add(first), y.add(first));
        let first_bc = b * len * n + first_col;
        let (b_c, c_c) = (bm.add(first_bc), cm.add(first_bc));
        let store = valid && member == 0;

        let mut t = 0usize;
        while t + PREFILL_UNROLL <= len {
            let mut dtv = [0.0f32; PREFILL_UNROLL];
            let mut xv = [0.0f32; PREFILL_UNROLL];
            let mut bv = [[0.0f32; PREFILL_MAX_COLS]; PREFILL_UNROLL];
            let mut cv = [[0.0f32; PREFILL_MAX_COLS]; PREFILL_UNROLL];
            crate::unroll4!(k => {
                dtv[k] = dt_c.add((t + k) * dm).read().to_f32();
                xv[k] = x_c.add((t + k) * dm).read().to_f32();
                crate::unroll8!(j => {
                    if j < cols {
                        bv[k][j] = b_c.add((t + k) * n + j).read().to_f32();
                        cv[k][j] = c_c.add((t + k) * n + j).read().to_f32();
                    }
                });
            });
            crate::unroll4!(k => {
                let yk = step(&mut s, &a_d, cols, dsk, dtv[k], xv[k], &bv[k], &cv[k]);
                if store {
                    y_c.add((t + k) * dm).write(T::from_f32(yk));
                }
            });
            t += PREFILL_UNROLL;
        }
        while t < len {
            let mut bk = [0.0f32; PREFILL_MAX_COLS];
            let mut ck = [0.0f32; PREFILL_MAX_COLS];
            crate::unroll8!(j => {
                if j < cols {
                    bk[j] = b_c.add(t * n + j).read().to_f32();
                    ck[j] = c_c.add(t * n + j).read().to_f32();
                }
            });
            let yk = step(&mut s, &a_d, cols, dsk, dt_c.add(t * dm).read().to_f32(), x_c.add(t * dm).read().to_f32(), &bk, &ck);
            if store {
                y_c.add(t * dm).write(T::from_f32(yk));
            }
            t += 1;
        }

        if valid {
            crate::unroll8!(j => {
                if j < cols {
                    state_out.add(state_at + j).write(s[j]);
                }
            });
        }
    }
}
