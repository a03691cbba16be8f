//! Host implementation of the wave primitives: every call goes to the lane
//! context of the emulator that is running this lane.
use crate::emulator::{self, Exchange};

#[inline(always)]
pub fn thread_id() -> u32 {
    emulator::with_lane(|l| l.thread_id)
}

#[inline(always)]
pub fn workgroup_size() -> u32 {
    emulator::with_lane(|l| l.workgroup_size)
}

#[inline(always)]
pub fn workgroup_id<const DIM: u32>() -> u32 {
    emulator::with_lane(|l| l.workgroup_id[DIM as usize])
}

#[inline(always)]
pub fn num_workgroups<const DIM: u32>() -> u32 {
    emulator::with_lane(|l| l.grid[DIM as usize])
}

pub fn shfl_xor<const MASK: u32>(v: u32) -> u32 {
    emulator::exchange(v, Exchange::Xor(MASK))
}

pub fn shfl_down(v: u32, delta: u32) -> u32 {
    emulator::exchange(v, Exchange::Down(delta))
}

pub fn shfl_idx(v: u32, src: u32) -> u32 {
    emulator::exchange(v, Exchange::Index(src))
}

pub fn broadcast<const LANE: u32>(v: u32) -> u32 {
    emulator::exchange(v, Exchange::Index(LANE))
}

pub fn sync_lanes() {
    emulator::exchange(0, Exchange::Index(0));
}

pub fn uniform_u64(v: u64) -> u64 {
    v
}

pub fn barrier() {
    emulator::barrier()
}

pub fn workgroup_mem<T>() -> *mut T {
    emulator::with_lane(|l| l.workgroup_mem) as *mut T
}
