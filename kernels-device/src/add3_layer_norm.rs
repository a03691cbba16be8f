//! `add3_layer_norm`: the three-way residual add of Cohere2 fused with the next
//! LayerNorm (spec/kernels.md section 2), byte-identical to MLX-ROCm's unfused
//! pair. The launch geometry and every reduction order are part of the contract:
//! one workgroup of 256 threads per row; thread `t` owns the elements
//! `1024*k + 4*t + j`; sums in ownership order, a xor butterfly per wave, the
//! eight wave totals combined by the same butterfly in wave 0.

use core::f32::math::{mul_add, sqrt};

use crate::geometry::add3_layer_norm::{CHUNKS, CHUNK_STRIDE, MAX_D, SLOT_MEAN, SLOT_SUM, SLOT_VAR, SLOT_VAR_TOTAL, WAVES};
use crate::num::Elem;
use crate::wave;

/// Runs `$body` once for each chunk index `$k` in 0..CHUNKS, unrolled by hand:
/// the 28 owned values live in registers only if every index into them is a
/// constant (a loop LLVM declines to unroll puts them in scratch memory).
macro_rules! for_each_chunk {
    ($k:ident => $body:block) => {{
        const _: () = assert!(CHUNKS == 7, "for_each_chunk! unrolls exactly 7 chunks");
        { let $k: usize = 0; $body }
        { let $k: usize = 1; $body }
        { let $k: usize = 2; $body }
        { let $k: usize = 3; $body }
        { let $k: usize = 4; $body }
        { let $k: usize = 5; $body }
        { let $k: usize = 6; $body }
    }};
}

/// Four consecutive elements: the unit of ownership, one vector access.
#[repr(C)]
#[derive(Clone, Copy)]
struct Quad<T>([T; 4]);

/// Sums `partial` over the 256 threads in the contract's order (steps 4-5):
/// a butterfly in each wave, lane 0 of wave `w` stores to `slots[w]`, then wave 0
/// reduces the 8 slots with the same butterfly (lanes 8..31 add +0.0) and
/// publishes the total in `slots[total]`. Every thread returns the total.
#[inline(always)]
unsafe fn workgroup_sum(partial: f32, slots: *mut f32, first: usize, total: usize) -> f32 {
    let lane = wave::lane_id();
    let w = wave::wave_id();
    let wave_total = wave::wave_sum_f32(partial);
    unsafe {
        if lane == 0 {
            slots.add(first + w as usize).write_volatile(wave_total);
        }
        wave::barrier();
        if w == 0 {
            let v = if lane < WAVES { slots.add(first + lane as usize).read_volatile() } else { 0.0 };
            let sum = wave::wave_sum_f32(v);
            if lane == 0 {
                slots.add(total).write_volatile(sum);
            }
        }
        wave::barrier();
        slots.add(total).read_volatile()
    }
}

/// # Safety
/// `a, b, x, x_new, h` hold `rows * d` elements, `w` and `bias` (unless null)
/// `d` elements; `1 <= d <= MAX_D`; launched with `WORKGROUP_SIZE` threads per
/// workgroup, `WORKGROUP_MEM_BYTES` of workgroup memory, one workgroup per row.
#[allow(clippy::too_many_arguments)]
pub unsafe fn add3_layer_norm<T: Elem>(
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
    let row = wave::workgroup_id_x();
    // Uniform over the workgroup: every thread leaves together.
    if row >= rows || d == 0 || d > MAX_D {
        return;
    }
    let t = wave::thread_id() as usize;
    let d = d as usize;
    let base = row as usize * d;
    // Quad accesses need every row to start 4-element aligned.
    let quads = d % 4 == 0 && [a as usize, b as usize, x as usize, x_new as usize, h as usize, w as usize].iter().all(|p| p % (4 * T::BYTES) == 0);
    let slots = wave::workgroup_mem::<f32>();

    // x_new = T(f(T(f(a) + f(b))) + f(x)), kept widened in registers.
    let mut vals = [0.0f32; CHUNKS * 4];
    for_each_chunk!(k => {
        let first = k * CHUNK_STRIDE + 4 * t;
        if first < d { unsafe {
            if quads {
                let qa = (a.add(base + first) as *const Quad<T>).read();
                let qb = (b.add(base + first) as *const Quad<T>).read();
                let qx = (x.add(base + first) as *const Quad<T>).read();
                let mut out = qx;
                for j in 0..4 {
                    let ab = T::from_f32(qa.0[j].to_f32() + qb.0[j].to_f32());
                    out.0[j] = T::from_f32(ab.to_f32() + qx.0[j].to_f32());
                    vals[k * 4 + j] = out.0[j].to_f32();
                }
                (x_new.add(base + first) as *mut Quad<T>).write(out);
            } else {
                for j in 0..4 {
                    let i = first + j;
                    if i < d {
                        let ab = T::from_f32(a.add(base + i).read().to_f32() + b.add(base + i).read().to_f32());
                        let xn = T::from_f32(ab.to_f32() + x.add(base + i).read().to_f32());
                        x_new.add(base + i).write(xn);
                        vals[k * 4 + j] = xn.to_f32();
                    }
                }
            }
        } }
    });

    // Step 3: per-thread sum in ownership order (k ascending, then j).
    let mut s = 0.0f32;
    for_each_chunk!(k => {
        for j in 0..4 {
            if k * CHUNK_STRIDE + 4 * t + j < d {
                s = s + vals[k * 4 + j];
            }
        }
    });
    // Steps 4-6.
    let total = unsafe { workgroup_sum(s, slots, SLOT_SUM, SLOT_MEAN) };
    let mean = total / d as f32;

    // Step 7: q = fma(d, d, q) in ownership order, reduced into separate slots.
    let mut q = 0.0f32;
    for_each_chunk!(k => {
        for j in 0..4 {
            if k * CHUNK_STRIDE + 4 * t + j < d {
                let diff = vals[k * 4 + j] - mean;
                q = mul_add(diff, diff, q);
            }
        }
    });
    let q_total = unsafe { workgroup_sum(q, slots, SLOT_VAR, SLOT_VAR_TOTAL) };

    // Step 8: correctly rounded division and square root; no rsqrt.
    let var = q_total / d as f32;
    let r = 1.0 / sqrt(var + eps);

    // Step 9: y = fma((x - mean) * r, w, bias or +0.0), stored as T.
    for_each_chunk!(k => {
        let first = k * CHUNK_STRIDE + 4 * t;
        if first < d { unsafe {
            for j in 0..4 {
                let i = first + j;
                if i < d {
                    let bb = if bias.is_null() { 0.0 } else { bias.add(i).read().to_f32() };
                    let nrm = (vals[k * 4 + j] - mean) * r;
                    h.add(base + i).write(T::from_f32(mul_add(nrm, w.add(i).read().to_f32(), bb)));
                }
            }
        } }
    });
}
