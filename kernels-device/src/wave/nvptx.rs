//! nvptx64 implementation of the wave primitives (a wave is a 32-thread warp).
use core::arch::nvptx;

unsafe extern "C" {
    #[link_name = "llvm.nvvm.shfl.sync.bfly.i32"]
    fn shfl_sync_bfly(mask: u32, v: u32, lane_mask: u32, clamp: u32) -> u32;
    #[link_name = "llvm.nvvm.shfl.sync.down.i32"]
    fn shfl_sync_down(mask: u32, v: u32, delta: u32, clamp: u32) -> u32;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn shfl_sync_idx(mask: u32, v: u32, lane: u32, clamp: u32) -> u32;
}

const FULL: u32 = 0xFFFF_FFFF;
const CLAMP: u32 = 0x1F;

#[inline(always)]
pub fn thread_id() -> u32 {
    unsafe { nvptx::_thread_idx_x() }
}

#[inline(always)]
pub fn workgroup_size() -> u32 {
    unsafe { nvptx::_block_dim_x() }
}

#[inline(always)]
pub fn workgroup_id<const DIM: u32>() -> u32 {
    unsafe {
        match DIM {
            0 => nvptx::_block_idx_x(),
            1 => nvptx::_block_idx_y(),
            _ => nvptx::_block_idx_z(),
        }
    }
}

#[inline(always)]
pub fn num_workgroups<const DIM: u32>() -> u32 {
    unsafe {
        match DIM {
            0 => nvptx::_grid_dim_x(),
            1 => nvptx::_grid_dim_y(),
            _ => nvptx::_grid_dim_z(),
        }
    }
}

#[inline(always)]
pub fn shfl_xor<const MASK: u32>(v: u32) -> u32 {
    unsafe { shfl_sync_bfly(FULL, v, MASK, CLAMP) }
}

#[inline(always)]
pub fn shfl_down(v: u32, delta: u32) -> u32 {
    unsafe { shfl_sync_down(FULL, v, delta, CLAMP) }
}

#[inline(always)]
pub fn shfl_idx(v: u32, src: u32) -> u32 {
    unsafe { shfl_sync_idx(FULL, v, src, CLAMP) }
}

#[inline(always)]
pub fn broadcast<const LANE: u32>(v: u32) -> u32 {
    unsafe { shfl_sync_idx(FULL, v, LANE, CLAMP) }
}

#[inline(always)]
pub fn sync_lanes() {
    unsafe extern "C" {
        #[link_name = "llvm.nvvm.bar.warp.sync"]
        fn bar_warp_sync(mask: u32);
    }
    unsafe { bar_warp_sync(FULL) }
}

/// The four f32 of an `mma` result, as LLVM's intrinsic returns them.
#[repr(C)]
struct F32x4Result(f32, f32, f32, f32);

unsafe extern "unadjusted" {
    #[link_name = "llvm.nvvm.mma.m16n8k16.row.col.bf16"]
    fn mma_m16n8k16_bf16(
        a0: u32,
        a1: u32,
        a2: u32,
        a3: u32,
        b0: u32,
        b1: u32,
        c0: f32,
        c1: f32,
        c2: f32,
        c3: f32,
    ) -> F32x4Result;
}

/// `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` (sm_80).
#[inline(always)]
pub fn mma_bf16(a: [u32; 4], b: [u32; 2], c: [f32; 4]) -> [f32; 4] {
    let r = unsafe { mma_m16n8k16_bf16(a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], c[2], c[3]) };
    [r.0, r.1, r.2, r.3]
}

#[inline(always)]
pub fn uniform_u64(v: u64) -> u64 {
    v
}

/// `bar.sync 0`: a barrier that also orders shared memory among the block.
#[inline(always)]
pub fn barrier() {
    unsafe { nvptx::_syncthreads() }
}

#[inline(always)]
pub fn workgroup_mem<T>() -> *mut T {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
}
