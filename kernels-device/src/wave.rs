//! Lane and workgroup primitives: the only interface between the kernels and the
//! machine they run on.
//!
//! One implementation per architecture sits behind these functions:
//! [`amdgpu`](self) (DPP and `permlanex16` for fixed xor patterns, `ds_bpermute`
//! for the rest), `nvptx64` (`shfl.sync`), and the host emulator, which runs one
//! coroutine per lane and performs every exchange and barrier in lockstep.
//!
//! Only one-dimensional workgroups are used; grids may be three-dimensional.
//! Every exchange is an exact copy of 32 bits: no arithmetic happens inside it.

pub use crate::geometry::WAVE_SIZE;

#[cfg(target_arch = "amdgpu")]
#[path = "wave/amdgpu.rs"]
mod arch;
#[cfg(target_arch = "nvptx64")]
#[path = "wave/nvptx.rs"]
mod arch;
#[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
#[path = "wave/host.rs"]
mod arch;

/// The thread and workgroup indices: one `() -> u32` function each, always inlined.
macro_rules! indices {
    ($($(#[doc = $doc:literal])* $name:ident = $value:expr;)*) => {$(
        $(#[doc = $doc])*
        #[inline(always)]
        pub fn $name() -> u32 {
            $value
        }
    )*};
}

indices! {
    /// Index of this thread in its (one-dimensional) workgroup.
    thread_id = arch::thread_id();
    /// Threads per workgroup.
    workgroup_size = arch::workgroup_size();
    /// Workgroup index along x, y, z.
    workgroup_id_x = arch::workgroup_id::<0>();
    /// Workgroup index along y.
    workgroup_id_y = arch::workgroup_id::<1>();
    /// Workgroup index along z.
    workgroup_id_z = arch::workgroup_id::<2>();
    /// Workgroups in the grid along x.
    num_workgroups_x = arch::num_workgroups::<0>();
    /// This thread's lane in its wave.
    lane_id = thread_id() % WAVE_SIZE;
    /// This thread's wave in its workgroup.
    wave_id = thread_id() / WAVE_SIZE;
}

/// Global thread index along x: `workgroup_id_x * workgroup_size + thread_id`.
#[inline(always)]
pub fn global_id_x() -> u64 {
    workgroup_id_x() as u64 * workgroup_size() as u64 + thread_id() as u64
}

/// The value of lane `lane ^ MASK` (butterfly exchange). All 32 lanes must call it.
#[inline(always)]
pub fn shfl_xor_u32<const MASK: u32>(v: u32) -> u32 {
    const { assert!(MASK > 0 && MASK < WAVE_SIZE) };
    arch::shfl_xor::<MASK>(v)
}

/// [`shfl_xor_u32`] on the bits of an f32.
#[inline(always)]
pub fn shfl_xor_f32<const MASK: u32>(v: f32) -> f32 {
    f32::from_bits(shfl_xor_u32::<MASK>(v.to_bits()))
}

/// The value of lane `lane + delta`, or this lane's own value where that is past
/// lane 31 (CUDA's `__shfl_down_sync`). All 32 lanes must call it.
#[inline(always)]
pub fn shfl_down_u32(v: u32, delta: u32) -> u32 {
    arch::shfl_down(v, delta)
}

/// [`shfl_down_u32`] on the bits of an f32.
#[inline(always)]
pub fn shfl_down_f32(v: f32, delta: u32) -> f32 {
    f32::from_bits(shfl_down_u32(v.to_bits(), delta))
}

/// The value of lane `src` (`src < 32`, may differ per lane). All 32 lanes must call it.
#[inline(always)]
pub fn shfl_idx_u32(v: u32, src: u32) -> u32 {
    arch::shfl_idx(v, src % WAVE_SIZE)
}

/// The value of lane `LANE`, the same for every lane (`readlane`).
#[inline(always)]
pub fn broadcast_u32<const LANE: u32>(v: u32) -> u32 {
    const { assert!(LANE < WAVE_SIZE) };
    arch::broadcast::<LANE>(v)
}

/// [`broadcast_u32`] on the bits of an f32.
#[inline(always)]
pub fn broadcast_f32<const LANE: u32>(v: f32) -> f32 {
    f32::from_bits(broadcast_u32::<LANE>(v.to_bits()))
}

/// `v`, which must be the same on every lane (a uniform offset). On amdgpu it is
/// read into a scalar register (`readfirstlane`), which LLVM cannot fold into
/// per-lane addresses: without it, loop strength reduction turned the scan's row
/// offset plus eight column offsets into dozens of per-lane pointers, which
/// spilled. Elsewhere it is `v`.
#[inline(always)]
pub fn uniform_usize(v: usize) -> usize {
    arch::uniform_u64(v as u64) as usize
}

/// Sum over the 32 lanes of a wave, as a butterfly: `v = v + shfl_xor(v, m)` for
/// m = 16, 8, 4, 2, 1. Every lane ends with the same value, and the order of the
/// additions is fixed (the bit-exact contracts rely on it).
#[inline(always)]
pub fn wave_sum_f32(v: f32) -> f32 {
    let v = v + shfl_xor_f32::<16>(v);
    let v = v + shfl_xor_f32::<8>(v);
    let v = v + shfl_xor_f32::<4>(v);
    let v = v + shfl_xor_f32::<2>(v);
    v + shfl_xor_f32::<1>(v)
}

/// The sum of `v` over each half of the wave (lanes `0..16` and `16..32`), every
/// lane of a half getting its half's: [`wave_sum_f32`]'s steps after the first,
/// in the same order.
#[inline(always)]
pub fn half_wave_sum_f32(v: f32) -> f32 {
    let v = v + shfl_xor_f32::<8>(v);
    let v = v + shfl_xor_f32::<4>(v);
    let v = v + shfl_xor_f32::<2>(v);
    v + shfl_xor_f32::<1>(v)
}

/// A wave's matrix product with accumulation, `D = A B + C`, where A is 16 x 16
/// and B 16 x 8 in bf16 and C, D 16 x 8 in f32, spread over the 32 lanes as
/// NVIDIA's `mma.m16n8k16` spreads them (PTX ISA, "Matrix Fragments for
/// mma.m16n8k16"). Lane `l = 4 g + t` holds, two bf16 to a word with the
/// lower-numbered element in the low half:
/// - `a[0]`: A[g][2t, 2t+1], `a[1]`: A[g+8][2t, 2t+1], `a[2]`: A[g][2t+8, 2t+9],
///   `a[3]`: A[g+8][2t+8, 2t+9];
/// - `b[0]`: B[2t, 2t+1][g], `b[1]`: B[2t+8, 2t+9][g];
/// - `c`, and the result: C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
///
/// On nvptx one tensor-core instruction: products exact, sums in f32 in an
/// order the hardware chooses and not rounded to nearest (they truncate).
/// Elsewhere a model made of lane exchanges that sums in k order, rounding to
/// nearest: it checks fragments, not the hardware's rounding, which only the
/// GPU tests see. The tensor-core schedule of the MoE kernels uses it on the
/// host, and nothing runs it on amdgpu. All 32 lanes must call it.
#[inline(always)]
pub fn mma_bf16_16x8x16(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    #[cfg(target_arch = "nvptx64")]
    {
        arch::mma_bf16(a, b, c)
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        mma_bf16_model(a, b, c)
    }
}

/// [`mma_bf16_16x8x16`] from lane exchanges (see there).
#[cfg(not(target_arch = "nvptx64"))]
#[inline(always)]
fn mma_bf16_model(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    let lane = lane_id();
    let (g, t) = (lane / 4, lane % 4);
    let bf16 = |word: u32, high: bool| f32::from_bits(if high { word & 0xFFFF_0000 } else { word << 16 });
    // a_rows[r][k]: row g (r = 0) or g + 8 (r = 1); b_cols[n][k]: column 2t + n.
    let mut a_rows = [[0.0f32; 16]; 2];
    let mut b_cols = [[0.0f32; 16]; 2];
    for owner in 0..4 {
        let a_words = a.map(|w| shfl_idx_u32(w, 4 * g + owner));
        let b_words = [0, 1].map(|n| b.map(|w| shfl_idx_u32(w, 4 * (2 * t + n) + owner)));
        for e in 0..2 {
            let k = (2 * owner + e) as usize;
            for r in 0..2 {
                a_rows[r][k] = bf16(a_words[r], e == 1);
                a_rows[r][k + 8] = bf16(a_words[r + 2], e == 1);
            }
            for n in 0..2 {
                b_cols[n][k] = bf16(b_words[n][0], e == 1);
                b_cols[n][k + 8] = bf16(b_words[n][1], e == 1);
            }
        }
    }
    let dot = |r: usize, n: usize, acc: f32| (0..16).fold(acc, |acc, k| acc + a_rows[r][k] * b_cols[n][k]);
    [dot(0, 0, c[0]), dot(0, 1, c[1]), dot(1, 0, c[2]), dot(1, 1, c[3])]
}

/// A workgroup barrier that also orders workgroup memory: every store before it
/// is visible to every thread of the workgroup after it. All threads must call it.
#[inline(always)]
pub fn barrier() {
    arch::barrier()
}

/// A release fence at device scope, made by the one thread that signals for
/// its workgroup (an arrival count) right after a workgroup [`barrier`]: the
/// barrier orders the other threads' stores before this thread's fence, and
/// the fence makes all of them visible to a thread that acquires after
/// reading the signal (the pattern of a grid barrier). On nvptx `fence.acq_rel.gpu`
/// (Rust's fences are system scope, which on an H100 cost several
/// microseconds a workgroup); on amdgpu Rust's release fence, whose waits
/// [`barrier`]'s own release already made; on the host a fence of the
/// emulator's threads.
#[inline(always)]
pub fn fence_release() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        core::arch::asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "nvptx64"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::Release)
}

/// An acquire fence at device scope, after reading a signal that other
/// workgroups released: their stores are visible to this thread's loads
/// after it. On nvptx `fence.acq_rel.gpu`; on amdgpu the L0 and L1
/// invalidations; on the host a fence.
#[inline(always)]
pub fn fence_acquire() {
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        core::arch::asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "nvptx64"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire)
}

/// Adds `v` to the u32 at `p` atomically and returns the value before the
/// add. Relaxed: the ordering is [`fence_release`] before it and
/// [`fence_acquire`] after it. The one atomic the kernels use: the
/// arrival count of a workgroup that finishes a tile, so that the last to
/// arrive can sum the tile's partial results (`moe::batch::moe_down_combine`).
///
/// # Safety
/// `p` is a valid, 4-byte aligned u32 of global memory that, during the launch,
/// is accessed only through this function.
#[inline(always)]
pub unsafe fn atomic_add_u32(p: *mut u32, v: u32) -> u32 {
    unsafe { core::sync::atomic::AtomicU32::from_ptr(p) }.fetch_add(v, core::sync::atomic::Ordering::Relaxed)
}

/// Orders workgroup memory among the lanes of this wave: every lane's stores
/// before it are visible to every lane of the wave after it, and no lane's
/// loads after it are moved above it. For memory that only this wave uses (no
/// workgroup barrier). On amdgpu a compiler fence: a wave's LDS operations
/// execute in order (LLVM AMDGPU memory model: wavefront scope needs no
/// wait). On nvptx `bar.warp.sync`, which orders memory among the warp. On the
/// host a lockstep point of the wave's lanes. All lanes of the wave call it.
#[inline(always)]
pub fn sync_lanes() {
    arch::sync_lanes()
}

/// Base of the workgroup memory sized at launch (`sharedMemBytes`). All calls
/// return the same address; reading past the launch size is undefined.
#[inline(always)]
pub fn workgroup_mem<T>() -> *mut T {
    arch::workgroup_mem::<T>()
}

/// Asks the GPU to bring the line at `p` into its L2 cache, with no register
/// written and nothing to wait for: a hint for data a wave loads a few chunks
/// later. On nvptx `prefetch.global.L2`; AMD's gfx11 has no such instruction
/// and the host has no L2, so there it does nothing. `p` must lie inside an
/// allocation the kernel may read.
#[inline(always)]
pub fn prefetch_l2<T>(p: *const T) {
    // LLVM's prefetch intrinsics select only from sm_90 on, and the PTX is
    // built for sm_80: the instruction itself is older than both.
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        core::arch::asm!("prefetch.global.L2 [{p}];", p = in(reg64) p, options(nostack, readonly, preserves_flags));
    }
    #[cfg(not(target_arch = "nvptx64"))]
    let _ = p;
}

/// Keeps loads issued before it ahead of the arithmetic after it (software
/// pipelining: the next block's loads before this block's work). On amdgpu the
/// scheduler would otherwise interleave them with arithmetic that waits on
/// earlier loads. On nvptx LLVM would sink them to the end of the loop body
/// (their only use is the next iteration); a side-effecting instruction after
/// them stops that: `bar.warp.sync` of the full, converged warp, which costs an
/// issue slot and waits for no memory. On the host it does nothing. All lanes
/// of the wave call it.
#[inline(always)]
pub fn schedule_fence() {
    #[cfg(target_arch = "amdgpu")]
    unsafe {
        core::arch::amdgpu::sched_barrier::<0>()
    }
    #[cfg(target_arch = "nvptx64")]
    unsafe {
        unsafe extern "C" {
            #[link_name = "llvm.nvvm.bar.warp.sync"]
            fn bar_warp_sync(mask: u32);
        }
        bar_warp_sync(0xFFFF_FFFF)
    }
}
