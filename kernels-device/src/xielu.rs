//! `xielu`: the xIELU activation of Apertus (spec/kernels.md section 1),
//! bit-exact with MLX-ROCm's op-by-op graph.
//!
//! Each thread handles [`ELEMS_PER_THREAD`] consecutive elements, with 16-byte
//! vector loads and stores when both buffers are 16-byte aligned, and a grid-stride
//! loop so any grid covers any `n`. Every element goes through the same scalar
//! function, so the result depends neither on the vector width nor on the grid.

use crate::geometry::xielu::{ELEMS_PER_THREAD, WORKGROUP_SIZE};
use crate::num::{Elem, expm1, round_to};
use crate::wave;

/// The four scalars, each already rounded to `T` (`ap = R(alpha_p)`, ...).
#[derive(Clone, Copy)]
struct Params {
    ap: f32,
    an: f32,
    be: f32,
    ep: f32,
}

/// One element of the bit-exact model. No FMA anywhere.
#[inline(always)]
fn xielu_one<T: Elem>(x: T, p: Params) -> T {
    let v = x.to_f32();
    let x_sq = round_to::<T>(v * v);
    let pos = round_to::<T>(x_sq * p.ap);
    // NaN-propagating minimum of v and eps.
    let clamped = if v.is_nan() || v < p.ep { v } else { p.ep };
    let em = round_to::<T>(expm1(clamped));
    let neg = round_to::<T>(round_to::<T>(em - v) * p.an);
    let sel = if v > 0.0 { pos } else { neg };
    let bx = round_to::<T>(v * p.be);
    T::from_f32(sel + bx)
}

/// [`ELEMS_PER_THREAD`] elements, aligned for one vector access.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Chunk<T>([T; ELEMS_PER_THREAD]);

/// # Safety
/// `x` and `out` hold `n` elements (they may be the same buffer); both are
/// aligned to `T`.
pub unsafe fn xielu<T: Elem>(x: *const T, out: *mut T, n: u64, alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) {
    let p = Params { ap: round_to::<T>(alpha_p), an: round_to::<T>(alpha_n), be: round_to::<T>(beta), ep: round_to::<T>(eps) };
    let per_thread = ELEMS_PER_THREAD as u64;
    let stride = wave::num_workgroups_x() as u64 * WORKGROUP_SIZE as u64 * per_thread;
    // Uniform across the launch: vector accesses only when both buffers allow them.
    let vector = (x as usize | out as usize) % core::mem::align_of::<Chunk<T>>() == 0;
    let mut start = wave::global_id_x() * per_thread;
    while start < n {
        unsafe {
            if vector && start + per_thread <= n {
                let chunk = (x.add(start as usize) as *const Chunk<T>).read();
                let mut result = chunk;
                const { assert!(ELEMS_PER_THREAD == 8) };
                crate::unroll8!(i => {
                    result.0[i] = xielu_one(chunk.0[i], p);
                });
                (out.add(start as usize) as *mut Chunk<T>).write(result);
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
