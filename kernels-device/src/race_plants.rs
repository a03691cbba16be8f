//! Planted races for the race checker of `rdna-sim`: never shipped.
//!
//! Built only with the `race-plants` feature, which also leaves every shipped
//! entry point out, into a test-only gfx1151 object (`rdna-sim/tests/races.rs`
//! builds it); the shipped objects do not see this module. Each kernel takes
//! `fixed`: 0 plants the race, any other value adds what makes it correct (a
//! barrier, or for the global plants a slot of its own per workgroup).
//!
//! The workgroup-memory plants use the two code shapes the shipped kernels
//! compile to: plain accesses (inferred to be LDS: `ds_*` instructions) and
//! volatile ones (through the generic pointer: FLAT instructions in the shared
//! aperture).

use crate::wave;

/// Two sums of the workgroup through one set of slots (the shape of
/// `add3_layer_norm`'s two reductions): lane 0 of wave `w` stores its wave's
/// sum to `slots[w]`, a barrier, every thread adds the slots. The second sum
/// reuses the slots; with `fixed == 0` there is no barrier between the last
/// read of the first sum and the first write of the second. `out[t]` = both
/// totals. Plain (DS) workgroup memory accesses, one slot per wave.
///
/// # Safety
/// Launched with [`REUSED_SLOT_WAVES`] waves per workgroup; `out` holds one
/// f32 per thread of the launch; workgroup memory holds one f32 per wave.
#[inline(always)]
pub unsafe fn reused_slot(out: *mut f32, fixed: u32) {
    let t = wave::thread_id();
    let slots = wave::workgroup_mem::<f32>();
    let mut totals = [0.0f32; 2];
    for (i, total) in totals.iter_mut().enumerate() {
        let sum = wave::wave_sum_f32((t + 1) as f32 * (i + 1) as f32);
        unsafe {
            if wave::lane_id() == 0 {
                slots.add(wave::wave_id() as usize).write(sum);
            }
            wave::barrier();
            crate::unroll!(w in 0..2 => {
                *total += slots.add(w).read();
            });
            // The barrier the planted race lacks: every wave has read the
            // first sum's slots before any overwrites them.
            if i == 0 && fixed != 0 {
                wave::barrier();
            }
        }
    }
    unsafe { out.add(wave::global_id_x() as usize).write(totals[0] + totals[1]) };
}

/// Waves per workgroup of [`reused_slot`] (a constant, so that the slots are
/// read at fixed offsets).
pub const REUSED_SLOT_WAVES: u32 = 2;
const _: () = assert!(REUSED_SLOT_WAVES == 2, "reused_slot unrolls its reads over 2 slots");

/// Thread 0 computes a value and stores it to workgroup memory; every thread
/// reads it (a broadcast). With `fixed == 0` the barrier between the store and
/// the reads is missing. Volatile (FLAT) workgroup memory accesses.
///
/// # Safety
/// `out` holds one u32 per thread of the launch; 4 bytes of workgroup memory.
#[inline(always)]
pub unsafe fn broadcast(seed: *const u32, out: *mut u32, fixed: u32) {
    let cell = wave::workgroup_mem::<u32>();
    unsafe {
        if wave::thread_id() == 0 {
            cell.write_volatile(seed.read().wrapping_mul(2654435761) ^ wave::workgroup_id_x());
        }
        if fixed != 0 {
            wave::barrier();
        }
        out.add(wave::global_id_x() as usize).write(cell.read_volatile());
    }
}

/// Thread 0 of every workgroup stores its workgroup id: with `fixed == 0` all
/// to `out[0]` (a write-write race between workgroups), else to `out[wg]`.
///
/// # Safety
/// `out` holds one u32 per workgroup.
#[inline(always)]
pub unsafe fn global_write_write(out: *mut u32, fixed: u32) {
    let wg = wave::workgroup_id_x();
    if wave::thread_id() == 0 {
        let i = if fixed != 0 { wg } else { 0 };
        unsafe { out.add(i as usize).write(wg + 1) };
    }
}

/// Thread 0 of every workgroup stores `value` (or, with `by_workgroup != 0`,
/// `value + wg`) to `*flag`: the pattern of a status word. Several workgroups
/// storing the same bytes are a race the checker reports unless the launch
/// declares the word a same-value flag; different values are reported even then.
///
/// # Safety
/// `flag` is one u32.
#[inline(always)]
pub unsafe fn global_flag(flag: *mut u32, value: u32, by_workgroup: u32) {
    let wg = wave::workgroup_id_x();
    if wave::thread_id() == 0 {
        let v = if by_workgroup != 0 { value + wg } else { value };
        unsafe { flag.write_volatile(v) };
    }
}

/// Global memory between the waves of one workgroup: lane 0 of wave 0 stores
/// to `buf[0]`, lane 0 of the last wave reads it into `buf[1]`; with
/// `fixed == 0` there is no barrier between the two.
///
/// # Safety
/// `buf` holds two u32; at least two waves per workgroup, one workgroup.
#[inline(always)]
pub unsafe fn global_between_waves(buf: *mut u32, fixed: u32) {
    let t = wave::thread_id();
    let last = wave::workgroup_size().div_ceil(wave::WAVE_SIZE) - 1;
    unsafe {
        if t == 0 {
            buf.write_volatile(0x1234_5678);
        }
        if fixed != 0 {
            wave::barrier();
        }
        if wave::wave_id() == last && wave::lane_id() == 0 {
            buf.add(1).write_volatile(buf.read_volatile());
        }
    }
}

/// The entry points, exported only in the test object.
#[cfg(target_arch = "amdgpu")]
mod entries {
    #[unsafe(no_mangle)]
    pub unsafe extern "gpu-kernel" fn plant_reused_slot(out: *mut f32, fixed: u32) {
        unsafe { super::reused_slot(out, fixed) }
    }
    #[unsafe(no_mangle)]
    pub unsafe extern "gpu-kernel" fn plant_broadcast(seed: *const u32, out: *mut u32, fixed: u32) {
        unsafe { super::broadcast(seed, out, fixed) }
    }
    #[unsafe(no_mangle)]
    pub unsafe extern "gpu-kernel" fn plant_global_write_write(out: *mut u32, fixed: u32) {
        unsafe { super::global_write_write(out, fixed) }
    }
    #[unsafe(no_mangle)]
    pub unsafe extern "gpu-kernel" fn plant_global_flag(flag: *mut u32, value: u32, by_workgroup: u32) {
        unsafe { super::global_flag(flag, value, by_workgroup) }
    }
    #[unsafe(no_mangle)]
    pub unsafe extern "gpu-kernel" fn plant_global_between_waves(buf: *mut u32, fixed: u32) {
        unsafe { super::global_between_waves(buf, fixed) }
    }
}
