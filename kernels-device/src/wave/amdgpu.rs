//! amdgpu (RDNA, wave32) implementation of the wave primitives.
use core::arch::amdgpu as gcn;
use core::sync::atomic::{Ordering, fence};

#[inline(always)]
pub fn thread_id() -> u32 {
    gcn::workitem_id_x()
}

/// The HSA kernel dispatch packet: workgroup size x is a u16 at byte 4, the grid
/// size in work-items is three u32 at bytes 12, 16, 20.
#[inline(always)]
fn packet() -> *const u8 {
    core::intrinsics::gpu::amdgpu_dispatch_ptr() as *const u8
}

#[inline(always)]
pub fn workgroup_size() -> u32 {
    unsafe { (packet().add(4) as *const u16).read() as u32 }
}

#[inline(always)]
pub fn workgroup_id<const DIM: u32>() -> u32 {
    match DIM {
        0 => gcn::workgroup_id_x(),
        1 => gcn::workgroup_id_y(),
        _ => gcn::workgroup_id_z(),
    }
}

#[inline(always)]
pub fn num_workgroups<const DIM: u32>() -> u32 {
    // Workgroup sizes along y and z are 1 for every kernel of this crate.
    let grid = unsafe { (packet().add(12 + 4 * DIM as usize) as *const u32).read() };
    let size = workgroup_size();
    // A zero size never happens; testing it keeps a division-by-zero panic path out.
    if DIM != 0 || size == 0 { grid } else { grid.div_ceil(size) }
}

// DPP controls (GFX10+): `row_xmask:m` reads lane `l ^ m` within a row of 16 lanes.
const DPP_ROW_XMASK0: u32 = 0x160;

#[inline(always)]
pub fn shfl_xor<const MASK: u32>(v: u32) -> u32 {
    unsafe {
        match MASK {
            1 => gcn::update_dpp::<{ DPP_ROW_XMASK0 + 1 }, 0xF, 0xF, false>(v, v),
            2 => gcn::update_dpp::<{ DPP_ROW_XMASK0 + 2 }, 0xF, 0xF, false>(v, v),
            4 => gcn::update_dpp::<{ DPP_ROW_XMASK0 + 4 }, 0xF, 0xF, false>(v, v),
            8 => gcn::update_dpp::<{ DPP_ROW_XMASK0 + 8 }, 0xF, 0xF, false>(v, v),
            // Lane l of one row reads lane l of the other row: identity selects.
            16 => gcn::permlanex16_u32::<false, false>(v, v, 0x7654_3210, 0xFEDC_BA98),
            _ => gcn::ds_bpermute(((gcn::workitem_id_x() % 32) ^ MASK) << 2, v),
        }
    }
}

#[inline(always)]
pub fn shfl_down(v: u32, delta: u32) -> u32 {
    let lane = gcn::workitem_id_x() % 32;
    let src = if lane + delta < 32 { lane + delta } else { lane };
    // ds_bpermute takes a byte address.
    unsafe { gcn::ds_bpermute(src << 2, v) }
}

#[inline(always)]
pub fn shfl_idx(v: u32, src: u32) -> u32 {
    unsafe { gcn::ds_bpermute(src << 2, v) }
}

#[inline(always)]
pub fn broadcast<const LANE: u32>(v: u32) -> u32 {
    unsafe { gcn::readlane_u32(v, LANE) }
}

#[inline(always)]
pub fn sync_lanes() {
    core::sync::atomic::compiler_fence(core::sync::atomic::Ordering::SeqCst);
}

#[inline(always)]
pub fn uniform_u64(v: u64) -> u64 {
    gcn::readfirstlane_u64(v)
}

/// `s_barrier` alone does not order memory for LLVM. A release fence before and an
/// acquire fence after make it a real workgroup barrier (the fence emits the
/// `s_waitcnt lgkmcnt(0)` that must precede `s_barrier`). Rust has no
/// workgroup-scope fence, so these are system scope: correct, but stronger than
/// needed (on gfx11 each barrier also invalidates the L0/L1 caches; on gfx12 it
/// writes back and invalidates at system scope). A cheaper workgroup-scope
/// barrier is a measured optimization still to make on AMD hardware.
#[inline(always)]
pub fn barrier() {
    fence(Ordering::Release);
    gcn::s_barrier();
    fence(Ordering::Acquire);
}

#[inline(always)]
pub fn workgroup_mem<T>() -> *mut T {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
}
