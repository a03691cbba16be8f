//! Tier 1: the probe kernel on the CPU emulator, against an expectation computed
//! here from the definition of each primitive (not from the emulator).

use kernels_device::emulator::{self, LaunchConfig};
use kernels_device::geometry::probe::{WORDS_PER_LANE, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
use kernels_device::probe::probe_value;

/// What the probe must write for thread `t` of workgroup `wg` in a grid of `groups`.
fn expected(wg: u32, t: u32, groups: u32) -> [u32; WORDS_PER_LANE] {
    let size = WORKGROUP_SIZE;
    let lane = t % 32;
    let wave_base = t - lane;
    let v = |l: u32| probe_value(wg, wave_base + l);
    let wave_sum = {
        // butterfly order m = 16, 8, 4, 2, 1 on 32 lanes
        let mut vals: Vec<f32> = (0..32).map(|l| l as f32 * 0.5 + wg as f32).collect();
        for m in [16, 8, 4, 2, 1] {
            let old = vals.clone();
            for l in 0..32 {
                vals[l] = old[l] + old[l ^ m];
            }
        }
        vals[lane as usize].to_bits()
    };
    [
        t,
        lane,
        t / 32,
        wg,
        size,
        groups,
        wg * size + t,
        v(lane ^ 1),
        v(lane ^ 2),
        v(lane ^ 4),
        v(lane ^ 8),
        v(lane ^ 16),
        v(if lane + 3 < 32 { lane + 3 } else { lane }),
        v((7 * lane + 3) % 32),
        v(5),
        wave_sum,
        probe_value(wg, (t + 32) % size),
    ]
}

struct SyncPtr(*mut u32);
unsafe impl Sync for SyncPtr {}

#[test]
fn probe_matches_the_definition_of_every_primitive() {
    let groups = 3u32;
    let threads = (groups * WORKGROUP_SIZE) as usize;
    let mut out = vec![0xDEAD_BEEFu32; threads * WORDS_PER_LANE];
    let ptr = SyncPtr(out.as_mut_ptr());
    let cfg = LaunchConfig {
        grid: [groups, 1, 1],
        workgroup_size: WORKGROUP_SIZE,
        workgroup_mem_bytes: WORKGROUP_MEM_BYTES as usize,
    };
    unsafe {
        emulator::launch(&cfg, &|| {
            kernels_device::probe::probe({
                let p = &ptr;
                p.0
            })
        })
    }
    .unwrap();
    for wg in 0..groups {
        for t in 0..WORKGROUP_SIZE {
            let g = (wg * WORKGROUP_SIZE + t) as usize;
            let got = &out[g * WORDS_PER_LANE..(g + 1) * WORDS_PER_LANE];
            let want = expected(wg, t, groups);
            for w in 0..WORDS_PER_LANE {
                assert_eq!(
                    got[w], want[w],
                    "workgroup {wg} thread {t} word {w}: got {:#010x}, want {:#010x}",
                    got[w], want[w]
                );
            }
        }
    }
}

/// The emulator's report of a launch of `kernel` on a grid of `groups`
/// workgroups of `workgroup_size` threads, which must fail.
fn launch_error(groups: u32, workgroup_size: u32, kernel: &(dyn Fn() + Sync)) -> String {
    let cfg = LaunchConfig { grid: [groups, 1, 1], workgroup_size, workgroup_mem_bytes: 0 };
    // SAFETY: the kernels touch no memory.
    unsafe { emulator::launch(&cfg, kernel) }.unwrap_err().to_string()
}

#[test]
fn a_lane_that_leaves_before_an_exchange_is_reported_not_hung() {
    let msg = launch_error(2, 64, &|| {
        if kernels_device::wave::lane_id() == 7 {
            return; // diverges: lane 7 skips the exchange
        }
        std::hint::black_box(kernels_device::wave::shfl_xor_u32::<1>(1));
    });
    assert!(msg.contains("divergent lane exchange"), "{msg}");
    assert!(msg.contains("workgroup [0, 0, 0], wave 0"), "{msg}");
    assert!(msg.contains("lanes 7 have returned"), "{msg}");
}

#[test]
fn a_thread_that_skips_a_barrier_is_reported() {
    let msg = launch_error(1, 64, &|| {
        if kernels_device::wave::wave_id() == 1 {
            return;
        }
        kernels_device::wave::barrier();
    });
    assert!(msg.contains("wait at a barrier but threads 32-63 have already returned"), "{msg}");
}

#[test]
fn lanes_asking_for_different_exchanges_are_reported() {
    let msg = launch_error(1, 32, &|| {
        if kernels_device::wave::lane_id() < 16 {
            std::hint::black_box(kernels_device::wave::shfl_xor_u32::<1>(1));
        } else {
            std::hint::black_box(kernels_device::wave::shfl_xor_u32::<2>(1));
        }
    });
    assert!(msg.contains("lanes disagree on the exchange"), "{msg}");
}

#[test]
fn a_workgroup_size_that_is_not_whole_waves_is_refused() {
    let msg = launch_error(1, 48, &|| {});
    assert!(msg.contains("multiple of 32"), "{msg}");
}

struct SyncConstPtr(*const u32);
unsafe impl Sync for SyncConstPtr {}

#[test]
fn read_stream_folds_every_quad_once() {
    // 1000 quads over 2 x 64 threads: full passes of 4, then a tail of single quads.
    let quads = 1000usize;
    let mut src = vec![0u32; quads * 4 + 4];
    // 16-byte alignment: start at the first aligned word.
    let skip = src.as_ptr().align_offset(16 / 4);
    for (i, w) in src[skip..skip + quads * 4].iter_mut().enumerate() {
        *w = (i as u32).wrapping_mul(2654435761) ^ 0x5A5A_0000;
    }
    let want = src[skip..skip + quads * 4].iter().fold(0, |a, w| a ^ w);
    let (groups, size) = (2u32, 64u32);
    let mut out = vec![0u32; (groups * size) as usize];
    let (sp, op) = (SyncConstPtr(src[skip..].as_ptr()), SyncPtr(out.as_mut_ptr()));
    let cfg = LaunchConfig { grid: [groups, 1, 1], workgroup_size: size, workgroup_mem_bytes: 0 };
    unsafe {
        emulator::launch(&cfg, &|| {
            kernels_device::probe::read_stream(
                {
                    let p = &sp;
                    p.0
                },
                quads as u64,
                {
                    let p = &op;
                    p.0
                },
            )
        })
    }
    .unwrap();
    assert_eq!(out.iter().fold(0, |a, w| a ^ w), want);
    // Dropping the last quad changes the fold: every quad is read.
    out.fill(0);
    unsafe {
        emulator::launch(&cfg, &|| {
            kernels_device::probe::read_stream(
                {
                    let p = &sp;
                    p.0
                },
                quads as u64 - 1,
                {
                    let p = &op;
                    p.0
                },
            )
        })
    }
    .unwrap();
    assert_ne!(out.iter().fold(0, |a, w| a ^ w), want);
}
