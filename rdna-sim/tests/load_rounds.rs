//! The memory-latency accounting (`vmem_load_rounds`, `vmem_load_request_bytes`)
//! on planted load chains of known depth, hand-encoded as in `instructions.rs`.
// Instruction words are written field by field, zero fields included.
#![allow(clippy::identity_op)]
mod common;
use common::synthetic_kernel;
use rdna_sim::dispatch::{self, Launch};
use rdna_sim::exec::{Counts, Mode, Wave};
use rdna_sim::mem::Memory;
use rdna_sim::opcodes;

fn op(table: &[(u16, &str)], name: &str) -> u32 {
    table.iter().find(|(_, n)| *n == name).unwrap_or_else(|| panic!("no opcode {name}")).0 as u32
}
const ENDPGM: u32 = 0xBFB0_0000;
const LIT: u32 = 255;
const EXEC: usize = 126;
/// `global_<name> v[vdst], v[addr:addr+1], off offset:<offset>`.
fn global(name: &str, vdst: u32, addr: u32, offset: u32) -> [u32; 2] {
    [0xDC00_0000 | op(opcodes::GLOBAL, name) << 18 | 2 << 16 | (offset & 0x1fff), addr | 0x7c << 16 | vdst << 24]
}
fn sopp(name: &str, simm: u16) -> u32 {
    0xBF80_0000 | op(opcodes::SOPP, name) << 16 | simm as u32
}
/// `s_waitcnt vmcnt(n)`, lgkmcnt and expcnt at "no wait".
fn wait_vm(n: u16) -> u32 {
    sopp("s_waitcnt", n << 10 | 0x3f << 4 | 7)
}
fn v_mov_literal(vdst: u32, x: u32) -> [u32; 2] {
    [0x7E00_0000 | vdst << 17 | op(opcodes::VOP1, "v_mov_b32_e32") << 9 | LIT, x]
}

/// A buffer of `bytes` and one wave whose v[1:2] address it, lane `l` at `4 * l`.
fn setup(bytes: usize) -> (Wave, Memory, u64) {
    let mut mem = Memory::new();
    let buf = mem.alloc(bytes, "buffer");
    let mut w = Wave::default();
    w.s[EXEC] = u32::MAX;
    for l in 0..32 {
        w.v[1][l] = (buf + 4 * l as u64) as u32;
        w.v[2][l] = (buf >> 32) as u32;
    }
    (w, mem, buf)
}

fn run(w: &mut Wave, mem: &mut Memory, code: &[u32]) -> Counts {
    let mut code = code.to_vec();
    code.push(ENDPGM);
    let mode = Mode { ieee: true, perturb: None, strict_wait: false };
    dispatch::run_program(&code, w, mem, &mut [0; 64], mode).unwrap()
}

/// `depth` levels of `width` loads of 32 contiguous dwords, each level closed by `vmcnt(0)`.
fn chain(depth: u32, width: u32) -> Vec<u32> {
    let mut code = Vec::new();
    for level in 0..depth {
        for k in 0..width {
            code.extend(global("global_load_b32", 3 + k, 1, 128 * (level * width + k)));
        }
        code.push(wait_vm(0));
    }
    code
}

#[test]
fn a_planted_chain_takes_one_latency_a_level_with_its_loads_in_flight() {
    for (depth, width) in [(1, 1), (3, 1), (3, 4), (2, 8), (1, 16)] {
        let (mut w, mut mem, _) = setup(4096);
        let c = run(&mut w, &mut mem, &chain(depth, width));
        assert_eq!(c.vmem_load_rounds, depth as u64, "depth {depth} width {width}");
        assert_eq!(c.vmem_load_request_bytes, (depth * width * 128) as u64);
        // Bytes in flight per latency: the width of a level.
        assert_eq!(c.vmem_load_request_bytes / c.vmem_load_rounds, width as u64 * 128);
    }
}

#[test]
fn a_partial_wait_keeps_a_window_of_loads_in_flight() {
    // Four loads, then four times: wait until three remain, issue one more; then
    // wait for all. Eight loads with four in flight take two latencies.
    let (mut w, mut mem, _) = setup(4096);
    let mut code = Vec::new();
    for k in 0..4 {
        code.extend(global("global_load_b32", 3 + k, 1, 128 * k));
    }
    for k in 4..8 {
        code.push(wait_vm(3));
        code.extend(global("global_load_b32", 3 + k, 1, 128 * k));
    }
    code.push(wait_vm(0));
    let c = run(&mut w, &mut mem, &code);
    assert_eq!((c.vmem_load_rounds, c.vmem_load_request_bytes), (2, 8 * 128));
    // Waiting for each load before the next: eight latencies for the same bytes.
    let (mut w, mut mem, _) = setup(4096);
    let code: Vec<u32> =
        (0..8).flat_map(|k| [global("global_load_b32", 3, 1, 128 * k).to_vec(), vec![wait_vm(0)]]).flatten().collect();
    let c = run(&mut w, &mut mem, &code);
    assert_eq!((c.vmem_load_rounds, c.vmem_load_request_bytes), (8, 8 * 128));
}

#[test]
fn request_bytes_count_each_distinct_byte_once() {
    let (mut w, mut mem, buf) = setup(4096);
    // Every lane reads the same dword: one 4-byte request, 128 bytes to the lanes.
    for l in 0..32 {
        w.v[1][l] = buf as u32;
    }
    let [a, b] = global("global_load_b32", 3, 1, 0);
    let c = run(&mut w, &mut mem, &[a, b, wait_vm(0)]);
    assert_eq!((c.vmem_load_request_bytes, c.vmem_load_bytes, c.vmem_load_rounds), (4, 128, 1));
    // Half the lanes, 16 bytes each, 4 bytes apart: overlapping, 15 * 4 + 16 distinct bytes.
    let (mut w, mut mem, _) = setup(4096);
    w.s[EXEC] = 0xffff;
    let [a, b] = global("global_load_b128", 4, 1, 0);
    let c = run(&mut w, &mut mem, &[a, b, wait_vm(0)]);
    assert_eq!((c.vmem_load_request_bytes, c.vmem_load_bytes), (76, 16 * 16));
    // No active lane: no request, and no latency to wait for.
    let (mut w, mut mem, _) = setup(4096);
    w.s[EXEC] = 0;
    let [a, b] = global("global_load_b32", 3, 1, 0);
    let c = run(&mut w, &mut mem, &[a, b, wait_vm(0)]);
    assert_eq!((c.vmem_load_request_bytes, c.vmem_load_rounds), (0, 0));
}

#[test]
fn a_barrier_holds_every_wave_to_the_slowest_waves_latencies() {
    // Wave 0 runs a chain of depth 3; wave 1 skips it. With a barrier after the
    // chain both waves leave it three latencies in; without, wave 1 ends at none.
    let mut mem = Memory::new();
    let buf = mem.alloc(4096, "buffer");
    let [lo0, lo1] = v_mov_literal(1, buf as u32);
    let [hi0, hi1] = v_mov_literal(2, (buf >> 32) as u32);
    let body = chain(3, 2);
    let program = |barrier: bool| {
        let mut code = vec![
            // v_readfirstlane_b32 s0, v0; s_cmp_eq_u32 s0, 0 (wave 0's first work-item)
            0x7E00_0000 | 0 << 17 | op(opcodes::VOP1, "v_readfirstlane_b32_e32") << 9 | 256,
            0xBF00_0000 | op(opcodes::SOPC, "s_cmp_eq_u32") << 16 | 128 << 8,
            sopp("s_cbranch_scc0", body.len() as u16 + 4),
            lo0,
            lo1,
            hi0,
            hi1,
        ];
        code.extend(&body);
        if barrier {
            code.push(sopp("s_barrier", 0));
        }
        code.push(ENDPGM);
        code
    };
    let l = Launch { block: [64, 1, 1], ..Launch::default() };
    let c = dispatch::launch(&mut mem, &synthetic_kernel(&program(true)), &l).unwrap();
    assert_eq!((c.vmem_load_rounds, c.vmem_load_request_bytes), (2 * 3, 3 * 2 * 4));
    let c = dispatch::launch(&mut mem, &synthetic_kernel(&program(false)), &l).unwrap();
    assert_eq!(c.vmem_load_rounds, 3);
}
