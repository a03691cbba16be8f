//! Atomics ordering workgroups: the "last workgroup to arrive" pattern, hand
//! assembled, under the race checker. Every workgroup stores its partial
//! results, waits for its stores (`s_waitcnt_vscnt`), meets at a barrier, and
//! one lane bumps a counter with `global_atomic_add_u32 ... glc`; the
//! workgroup that saw `n - 1` invalidates its caches (`buffer_gl1_inv`,
//! `buffer_gl0_inv`) and sums every workgroup's partials.
// Instruction words are written field by field.
#![allow(clippy::identity_op)]
mod common;
use common::{EXEC, LIT, VCC, op, synthetic_kernel, v};
use rdna_sim::dispatch::{self, Launch};
use rdna_sim::exec::Mode;
use rdna_sim::mem::Memory;
use rdna_sim::opcodes;
use rdna_sim::race::{Kind, Race, Schedule};

const NULL: u32 = 124;
/// `s_waitcnt vmcnt(0)` and `s_waitcnt lgkmcnt(0)` (the other counters: no wait).
const VMCNT0: u16 = 0x3f7;
const LGKMCNT0: u16 = 0xfc07;

fn sop1(name: &str, sdst: u32, s0: u32) -> u32 {
    0xBE80_0000 | sdst << 16 | op(opcodes::SOP1, name) << 8 | s0
}
fn sop2(name: &str, sdst: u32, s0: u32, s1: u32) -> u32 {
    0x8000_0000 | op(opcodes::SOP2, name) << 23 | sdst << 16 | s1 << 8 | s0
}
fn sopc(name: &str, s0: u32, s1: u32) -> u32 {
    0xBF00_0000 | op(opcodes::SOPC, name) << 16 | s1 << 8 | s0
}
fn sopk(name: &str, sdst: u32, simm: u16) -> u32 {
    0xB000_0000 | op(opcodes::SOPK, name) << 23 | sdst << 16 | simm as u32
}
fn sopp(name: &str, simm: u16) -> u32 {
    0xBF80_0000 | op(opcodes::SOPP, name) << 16 | simm as u32
}
fn vop1(name: &str, vdst: u32, src0: u32) -> u32 {
    0x7E00_0000 | vdst << 17 | op(opcodes::VOP1, name) << 9 | src0
}
fn vop2(name: &str, vdst: u32, src0: u32, vsrc1: u32) -> u32 {
    op(opcodes::VOP2, name) << 25 | vdst << 17 | vsrc1 << 9 | src0
}
fn vopc(name: &str, src0: u32, vsrc1: u32) -> u32 {
    0x7C00_0000 | op(opcodes::VOPC, name) << 17 | vsrc1 << 9 | src0
}
fn ds(name: &str, vdst: u32, addr: u32, data0: u32) -> [u32; 2] {
    [0xD800_0000 | op(opcodes::DS, name) << 18, addr | data0 << 8 | vdst << 24]
}
/// GLOBAL with SADDR `saddr` (a 32-bit VGPR offset `addr`), GLC in word 0 bit 14.
fn global(name: &str, vdst: u32, addr: u32, data: u32, saddr: u32, offset: u32, glc: bool) -> [u32; 2] {
    [
        0xDC00_0000 | op(opcodes::GLOBAL, name) << 18 | (glc as u32) << 14 | 2 << 16 | offset,
        addr | data << 8 | saddr << 16 | vdst << 24,
    ]
}
fn mubuf(name: &str) -> [u32; 2] {
    [0xE000_0000 | op(opcodes::MUBUF, name) << 18, 0]
}

fn two(c: &mut Vec<u32>, w: [u32; 2]) {
    c.extend(w);
}

/// What a variant of the kernel does.
#[derive(Clone, Copy)]
struct Variant {
    /// `s_waitcnt_vscnt null, 0` after the partial stores (the release's wait).
    release_wait: bool,
    /// The invalidations the last workgroup executes, in order.
    acquire: &'static [&'static str],
    /// The first barrier, before the atomic (a one-wave workgroup needs none).
    barrier_before_atomic: bool,
    /// The partial stores come after the atomic (so it does not release them).
    store_after_atomic: bool,
    /// The counter: no atomic at all, the last workgroup found by its id.
    atomic: bool,
}

const GOOD: Variant = Variant {
    release_wait: true,
    acquire: &["buffer_gl1_inv", "buffer_gl0_inv"],
    barrier_before_atomic: true,
    store_after_atomic: false,
    atomic: true,
};

/// Buffers: `partial` (64 dwords a workgroup), `counter`, `result` (64 dwords).
struct Buffers {
    partial: u64,
    counter: u64,
    result: u64,
}

/// The kernel of `n` workgroups of `block` work-items (at most 64): workgroup
/// g stores `g * 64 + t + 1` for its work-item t; the last to arrive sums the
/// partials of every workgroup into `result[t]`.
fn kernel(n: u32, var: Variant, b: &Buffers) -> rdna_sim::codeobj::Kernel {
    let mut c: Vec<u32> = Vec::new();
    for (s, addr) in [(10, b.partial), (12, b.counter), (14, b.result)] {
        c.extend([sop1("s_mov_b32", s, LIT), addr as u32, sop1("s_mov_b32", s + 1, LIT), (addr >> 32) as u32]);
    }
    c.push(sop2("s_lshl_b32", 1, 0, 128 + 6)); // s1 = workgroup id * 64
    c.push(vop2("v_add_nc_u32_e32", 1, 1, 0)); // v1 = s1 + t
    c.push(vop2("v_lshlrev_b32_e32", 2, 128 + 2, 1)); // v2 = 4 * v1
    c.push(vop2("v_add_nc_u32_e32", 3, 128 + 1, 1)); // v3 = v1 + 1
    let store = |c: &mut Vec<u32>| {
        two(c, global("global_store_b32", 0, 2, 3, 10, 0, false));
        if var.release_wait {
            c.push(sopk("s_waitcnt_vscnt", NULL, 0));
        }
    };
    if !var.store_after_atomic {
        store(&mut c);
    }
    if var.barrier_before_atomic {
        c.push(sopp("s_barrier", 0));
    }
    c.push(vop1("v_mov_b32_e32", 5, 128)); // v5 = 0
    if var.atomic {
        // Lane 0 of wave 0: old = atomic_add(counter, 1), shared through workgroup memory.
        c.push(vop1("v_mov_b32_e32", 4, 128 + 1));
        c.push(vopc("v_cmp_eq_u32_e32", 128, 0));
        c.push(sop1("s_and_saveexec_b32", 20, VCC));
        two(&mut c, global("global_atomic_add_u32", 6, 5, 4, 12, 0, true));
        c.push(sopp("s_waitcnt", VMCNT0));
        two(&mut c, ds("ds_store_b32", 0, 5, 6));
        c.push(sop1("s_mov_b32", EXEC, 20));
    } else {
        c.push(sop1("s_mov_b32", 21, 0));
    }
    if var.store_after_atomic {
        store(&mut c);
    }
    c.push(sopp("s_barrier", 0));
    if var.atomic {
        two(&mut c, ds("ds_load_b32", 7, 5, 0));
        c.push(sopp("s_waitcnt", LGKMCNT0));
        c.push(vop1("v_readfirstlane_b32_e32", 21, v(7)));
    }
    c.push(sopc("s_cmp_eq_u32", 21, 128 + n - 1));
    let branch = c.len();
    c.push(0);
    for inv in var.acquire {
        two(&mut c, mubuf(inv));
    }
    c.push(vop2("v_lshlrev_b32_e32", 10, 128 + 2, 0)); // v10 = 4 * t
    c.push(vop1("v_mov_b32_e32", 8, 128));
    for g in 0..n {
        two(&mut c, global("global_load_b32", 9, 10, 0, 10, 256 * g, false));
        c.push(sopp("s_waitcnt", VMCNT0));
        c.push(vop2("v_add_nc_u32_e32", 8, v(8), 9));
    }
    two(&mut c, global("global_store_b32", 0, 10, 8, 14, 0, false));
    c[branch] = sopp("s_cbranch_scc0", (c.len() - branch - 1) as u16);
    c.push(sopp("s_endpgm", 0));
    let mut k = synthetic_kernel(&c);
    k.kd.compute_pgm_rsrc2 = 1 << 7; // the workgroup id x in s0
    k
}

/// Runs the kernel under `schedule` with the race checker in strict-wait
/// mode; returns the races, the result and the counter.
fn run(n: u32, block: u32, v: Variant, schedule: Schedule, reversed: bool) -> (Vec<Race>, Vec<u32>, u32, String) {
    let mut mem = Memory::new();
    let b = Buffers {
        partial: mem.alloc(256 * n as usize, "partial"),
        counter: mem.alloc(4, "counter"),
        result: mem.alloc(256, "result"),
    };
    let k = kernel(n, v, &b);
    let l = Launch {
        grid: [n, 1, 1],
        block: [block, 1, 1],
        dynamic_lds: 4,
        mode: Mode { ieee: true, perturb: None, strict_wait: true },
        schedule,
        workgroups_reversed: reversed,
        race_check: true,
        ..Launch::default()
    };
    let (_, races) = dispatch::launch_checked(&mut mem, &k, &l).unwrap();
    let text: String = races.iter().map(|r| format!("\n  {}", r.describe(&k.insts))).collect();
    let mut out = vec![0u8; 256];
    mem.read(b.result, &mut out).unwrap();
    let mut counter = [0u8; 4];
    mem.read(b.counter, &mut counter).unwrap();
    let result = out.chunks(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).collect();
    (races, result, u32::from_le_bytes(counter), text)
}

/// Every wave schedule, with the workgroups in linear and in reversed order.
fn orders() -> Vec<(Schedule, bool)> {
    Schedule::all(&[1, 2]).into_iter().flat_map(|s| [(s, false), (s, true)]).collect()
}

/// `result[t]` = the sum over the n workgroups of `g * 64 + t + 1`.
fn expected(n: u32, block: u32) -> Vec<u32> {
    (0..64).map(|t| if t < block { (0..n).map(|g| g * 64 + t + 1).sum() } else { 0 }).collect()
}

#[test]
fn last_workgroup_pattern_is_clean_and_correct() {
    for (n, block) in [(4, 64), (3, 32), (1, 64)] {
        for (s, rev) in orders() {
            let (races, result, counter, text) = run(n, block, GOOD, s, rev);
            assert!(races.is_empty(), "n {n}, block {block}, {s}, reversed {rev}:{text}");
            assert_eq!(result, expected(n, block), "n {n}, block {block}, {s}, reversed {rev}");
            assert_eq!(counter, n);
        }
    }
    // The invalidations in the other order.
    let v = Variant { acquire: &["buffer_gl0_inv", "buffer_gl1_inv"], ..GOOD };
    let (races, result, _, text) = run(4, 64, v, Schedule::Lockstep, false);
    assert!(races.is_empty(), "{text}");
    assert_eq!(result, expected(4, 64));
}

/// One wave a workgroup: the wave's own earlier stores are released without a barrier.
#[test]
fn one_wave_releases_its_own_earlier_stores_without_a_barrier() {
    let v = Variant { barrier_before_atomic: false, ..GOOD };
    for (s, rev) in orders() {
        let (races, result, _, text) = run(3, 32, v, s, rev);
        assert!(races.is_empty(), "{s}, reversed {rev}:{text}");
        assert_eq!(result, expected(3, 32));
    }
}

/// Stores after the atomic are not released by it: the last workgroup's reads race.
#[test]
fn stores_after_the_atomic_are_not_released() {
    let v = Variant { barrier_before_atomic: false, store_after_atomic: true, ..GOOD };
    for (s, rev) in orders() {
        let (races, _, _, text) = run(3, 32, v, s, rev);
        assert!(races.iter().any(|r| r.kind == Kind::ReadAfterWrite), "{s}, reversed {rev}:{text}");
        assert!(races.iter().all(|r| r.uninvalidated.is_none()), "{text}");
    }
}

#[test]
fn acquire_without_the_invalidations_is_a_race_naming_them() {
    for (acquire, missing) in [
        (&[][..], "buffer_gl0_inv and buffer_gl1_inv"),
        (&["buffer_gl1_inv"][..], "buffer_gl0_inv"),
        (&["buffer_gl0_inv"][..], "buffer_gl1_inv"),
    ] {
        let v = Variant { acquire, ..GOOD };
        for (s, rev) in orders() {
            let (races, result, _, text) = run(4, 64, v, s, rev);
            let what = format!("acquire {acquire:?}, {s}, reversed {rev}:{text}");
            assert!(!races.is_empty(), "{what}");
            for r in &races {
                assert_eq!(r.kind, Kind::ReadAfterWrite, "{what}");
                assert_eq!(r.uninvalidated.as_ref().map(|u| u.missing.as_str()), Some(missing), "{what}");
            }
            assert!(text.contains("the acquire lacks the cache invalidation"), "{what}");
            assert!(text.contains(&format!("executed no {missing} after it")), "{what}");
            assert!(text.contains("global_atomic_add_u32 at 0x"), "{what}");
            if s == Schedule::Sequential && !rev {
                println!("acquire {acquire:?}:{text}");
            }
            // The interpreter has no caches: the values are right all the same.
            assert_eq!(result, expected(4, 64));
        }
    }
}

#[test]
fn release_without_the_vscnt_wait_is_reported() {
    let v = Variant { release_wait: false, ..GOOD };
    for (s, rev) in orders() {
        let (races, _, _, text) = run(4, 64, v, s, rev);
        let what = format!("{s}, reversed {rev}:{text}");
        assert!(races.iter().any(|r| r.kind == Kind::StoreNotWaitedAtRelease), "{what}");
        assert!(races.iter().all(|r| r.kind == Kind::StoreNotWaitedAtRelease), "{what}");
        // Both waves' stores in each of the 4 workgroups: the atomic's own wave's,
        // and the other wave's of the interval before (one report, counted).
        assert_eq!(races.iter().map(|r| r.count).sum::<u64>(), 8, "{what}");
        assert!(text.contains("release before its stores complete"), "{what}");
        assert!(text.contains("global_store_b32 at 0x") && text.contains("s_waitcnt_vscnt"), "{what}");
        assert!(text.contains("(partial, offset 0x"), "{what}");
        if s == Schedule::Sequential && !rev {
            println!("{text}");
        }
    }
    // A store of the atomic's own wave needs its wait even without a barrier between.
    let v = Variant { release_wait: false, barrier_before_atomic: false, ..GOOD };
    let (races, _, _, text) = run(3, 32, v, Schedule::Sequential, false);
    assert!(races.iter().any(|r| r.kind == Kind::StoreNotWaitedAtRelease), "{text}");
}

/// Without an atomic, reading another workgroup's partials is a race, as ever.
#[test]
fn a_plain_read_of_another_workgroups_data_is_still_a_race() {
    let v = Variant { atomic: false, ..GOOD };
    for (s, rev) in orders() {
        let (races, _, _, text) = run(4, 64, v, s, rev);
        let what = format!("{s}, reversed {rev}:{text}");
        assert!(
            races.iter().any(|r| matches!(r.kind, Kind::ReadAfterWrite | Kind::WriteAfterRead)
                && r.earlier.workgroup != r.later.workgroup),
            "{what}"
        );
        assert!(races.iter().all(|r| r.uninvalidated.is_none()), "{what}");
    }
}
