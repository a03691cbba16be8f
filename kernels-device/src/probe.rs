//! The probe kernel: exercises every wave primitive so that a test can compare
//! each backend against an independently computed expectation.
//!
//! Each thread writes [`WORDS_PER_LANE`] words to `out[global_id * WORDS_PER_LANE ..]`:
//!
//! | word | value |
//! |---|---|
//! | 0 | thread id in the workgroup |
//! | 1 | lane id |
//! | 2 | wave id |
//! | 3 | workgroup id x |
//! | 4 | workgroup size |
//! | 5 | number of workgroups along x |
//! | 6 | global id (low 32 bits) |
//! | 7..=11 | `shfl_xor` of `v` with masks 1, 2, 4, 8, 16 |
//! | 12 | `shfl_down(v, 3)` |
//! | 13 | `shfl_idx(v, (7 * lane + 3) % 32)` |
//! | 14 | `broadcast::<5>(v)` |
//! | 15 | bits of `wave_sum_f32(lane as f32 * 0.5 + workgroup id)` |
//! | 16 | workgroup memory round trip: `v` of thread `(t + 32) % size`, read after a barrier |
//!
//! where `v = probe_value(workgroup_id, thread_id)`.

use crate::geometry::probe::WORDS_PER_LANE;
use crate::vector::U32x4;
use crate::wave;

/// The per-thread value the probe exchanges: distinct for every thread of a launch.
pub const fn probe_value(workgroup: u32, thread: u32) -> u32 {
    0x1000_0000 ^ (workgroup.wrapping_mul(0x9E37) << 10) ^ thread.wrapping_mul(2654435761)
}

/// # Safety
/// `out` holds `WORDS_PER_LANE` words for every thread of the launch; the
/// workgroup memory holds one `u32` per thread.
#[inline(always)]
pub unsafe fn probe(out: *mut u32) {
    let t = wave::thread_id();
    let lane = wave::lane_id();
    let wg = wave::workgroup_id_x();
    let size = wave::workgroup_size();
    let v = probe_value(wg, t);

    let mut words = [0u32; WORDS_PER_LANE];
    words[0] = t;
    words[1] = lane;
    words[2] = wave::wave_id();
    words[3] = wg;
    words[4] = size;
    words[5] = wave::num_workgroups_x();
    words[6] = wave::global_id_x() as u32;
    words[7] = wave::shfl_xor_u32::<1>(v);
    words[8] = wave::shfl_xor_u32::<2>(v);
    words[9] = wave::shfl_xor_u32::<4>(v);
    words[10] = wave::shfl_xor_u32::<8>(v);
    words[11] = wave::shfl_xor_u32::<16>(v);
    words[12] = wave::shfl_down_u32(v, 3);
    words[13] = wave::shfl_idx_u32(v, (7 * lane + 3) % 32);
    words[14] = wave::broadcast_u32::<5>(v);
    words[15] = wave::wave_sum_f32(lane as f32 * 0.5 + wg as f32).to_bits();

    let mem = wave::workgroup_mem::<u32>();
    unsafe {
        mem.add(t as usize).write_volatile(v);
        wave::barrier();
        // `size` is a power of two (the launcher's constant): no division, no panic path.
        words[16] = mem.add(((t + 32) & size.wrapping_sub(1)) as usize).read_volatile();
    }

    let base = wave::global_id_x() as usize * WORDS_PER_LANE;
    for (i, w) in words.iter().enumerate() {
        unsafe { out.add(base + i).write(*w) };
    }
}

/// A kernel that does nothing: the launch-overhead yardstick of the benchmarks.
pub fn empty() {}

/// Quads each thread reads per pass of [`read_stream`], all loads issued first.
pub const READ_STREAM_UNROLL: u64 = 4;

/// The read-bandwidth yardstick of the benchmarks: reads `quads` 16-byte words
/// of `src` (thread `g` of `G` takes quads `g + G (4 p + u)`, four loads in
/// flight per pass), folds them with xor, and writes the fold to `out[g]` so
/// that no load can be dropped. What a launch that only streams bytes in
/// reaches, against which a kernel reading the same bytes can be judged.
///
/// # Safety
/// `src` is 16-byte aligned and holds `quads` quads; `out` holds one word per
/// thread of the launch.
#[inline(always)]
pub unsafe fn read_stream(src: *const u32, quads: u64, out: *mut u32) {
    let g = wave::global_id_x();
    let threads = wave::num_workgroups_x() as u64 * wave::workgroup_size() as u64;
    let src = src as *const U32x4;
    let mut fold = 0u32;
    let mut q = g;
    unsafe {
        while q + (READ_STREAM_UNROLL - 1) * threads < quads {
            let mut v = [U32x4::new([0; 4]); READ_STREAM_UNROLL as usize];
            crate::unroll!(u in 0..4 => {
                v[u] = src.add((q + u as u64 * threads) as usize).read();
            });
            crate::unroll!(u in 0..4 => {
                fold ^= v[u].0[0] ^ v[u].0[1] ^ v[u].0[2] ^ v[u].0[3];
            });
            q += READ_STREAM_UNROLL * threads;
        }
        while q < quads {
            let v = src.add(q as usize).read();
            fold ^= v.0[0] ^ v.0[1] ^ v.0[2] ^ v.0[3];
            q += threads;
        }
        out.add(g as usize).write(fold);
    }
}
