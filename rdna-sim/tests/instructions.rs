//! Per-instruction cases against hand-computed values, with hand-encoded
//! machine code (field layouts from the ISA's "Microcode Formats" chapter).
// Instruction words are written field by field, zero fields included; lanes are
// indexed by lane number across several arrays.
#![allow(clippy::identity_op, clippy::needless_range_loop)]
mod common;
use common::{EXEC, LIT, VCC, op, synthetic_kernel, v};
use rdna_sim::dispatch::{self, Launch};
use rdna_sim::exec::{Mode, Wave};
use rdna_sim::mem::Memory;
use rdna_sim::opcodes;

const ENDPGM: u32 = 0xBFB0_0000;
fn vop1(name: &str, vdst: u32, src0: u32) -> u32 {
    0x7E00_0000 | vdst << 17 | op(opcodes::VOP1, name) << 9 | src0
}
fn vop2(name: &str, vdst: u32, src0: u32, vsrc1: u32) -> u32 {
    op(opcodes::VOP2, name) << 25 | vdst << 17 | vsrc1 << 9 | src0
}
fn vopc(name: &str, src0: u32, vsrc1: u32) -> u32 {
    0x7C00_0000 | op(opcodes::VOPC, name) << 17 | vsrc1 << 9 | src0
}
/// VOP3 (or VOP3SD with `sdst` in the abs/opsel/clamp bits).
fn vop3(table: &[(u16, &str)], name: &str, vdst: u32, s: [u32; 3], abs: u32, neg: u32, opsel: u32) -> [u32; 2] {
    [0xD400_0000 | op(table, name) << 16 | opsel << 11 | abs << 8 | vdst, s[0] | s[1] << 9 | s[2] << 18 | neg << 29]
}
fn vop3p(name: &str, vdst: u32, s: [u32; 3], opsel: u32, opsel_hi: u32, neg: u32, neg_hi: u32) -> [u32; 2] {
    [
        0xCC00_0000 | op(opcodes::VOP3P, name) << 16 | (opsel_hi >> 2 & 1) << 14 | opsel << 11 | neg_hi << 8 | vdst,
        s[0] | s[1] << 9 | s[2] << 18 | (opsel_hi & 3) << 27 | neg << 29,
    ]
}
fn sop2(name: &str, sdst: u32, s0: u32, s1: u32) -> u32 {
    0x8000_0000 | op(opcodes::SOP2, name) << 23 | sdst << 16 | s1 << 8 | s0
}
fn sopc(name: &str, s0: u32, s1: u32) -> u32 {
    0xBF00_0000 | op(opcodes::SOPC, name) << 16 | s1 << 8 | s0
}
fn sopp(name: &str, simm: u16) -> u32 {
    0xBF80_0000 | op(opcodes::SOPP, name) << 16 | simm as u32
}
fn sop1(name: &str, sdst: u32, s0: u32) -> u32 {
    0xBE80_0000 | sdst << 16 | op(opcodes::SOP1, name) << 8 | s0
}
fn ds(name: &str, vdst: u32, addr: u32, data0: u32, offset: u16) -> [u32; 2] {
    [0xD800_0000 | op(opcodes::DS, name) << 18 | offset as u32, addr | data0 << 8 | vdst << 24]
}
fn global(name: &str, vdst: u32, addr: u32, data: u32, offset: i32) -> [u32; 2] {
    [
        0xDC00_0000 | op(opcodes::GLOBAL, name) << 18 | 2 << 16 | (offset as u32 & 0x1fff),
        addr | data << 8 | 0x7c << 16 | vdst << 24,
    ]
}
fn f(x: f32) -> u32 {
    x.to_bits()
}

struct Run {
    w: Wave,
    mem: Memory,
    lds: Vec<u8>,
    mode: Mode,
}
impl Run {
    fn new() -> Run {
        let mut w = Wave::default();
        w.s[EXEC as usize] = u32::MAX;
        Run { w, mem: Memory::new(), lds: vec![0; 1024], mode: Mode { ieee: true, perturb: None, strict_wait: false } }
    }
    fn lanes(&mut self, r: u32, f: impl Fn(usize) -> u32) {
        for l in 0..32 {
            self.w.v[r as usize][l] = f(l);
        }
    }
    fn run(&mut self, code: &[u32]) -> Result<(), String> {
        let mut c = code.to_vec();
        c.push(ENDPGM);
        self.w.pc = 0;
        dispatch::run_program(&c, &mut self.w, &mut self.mem, &mut self.lds, self.mode).map(|_| ())
    }
    fn ok(&mut self, code: &[u32]) {
        self.run(code).unwrap()
    }
    fn vf(&self, r: u32, lane: usize) -> f32 {
        f32::from_bits(self.w.v[r as usize][lane])
    }
}

#[test]
fn v_add_f32_inline_constants_literal_and_exec_mask() {
    let mut r = Run::new();
    r.lanes(1, |_| 7);
    r.w.s[EXEC as usize] = 0x0000_ffff;
    // v1 = 0.5 (inline 240) + v2 ; v2 = 2.25 (literal)
    r.ok(&[vop1("v_mov_b32_e32", 2, LIT), f(2.25), vop2("v_add_f32_e32", 1, 240, 2)]);
    assert_eq!(r.vf(1, 0), 2.75);
    assert_eq!(r.vf(1, 15), 2.75);
    assert_eq!(r.w.v[1][16], 7, "inactive lane unchanged");
    // Integer inline constants: -16 (208) and 64 (192).
    r.w.s[EXEC as usize] = u32::MAX;
    r.ok(&[vop2("v_add_nc_u32_e32", 3, 208, 4), vop1("v_mov_b32_e32", 4, 192)]);
    assert_eq!(r.w.v[3][0], (-16i32) as u32, "v4 was 0 when read");
    assert_eq!(r.w.v[4][0], 64);
}

#[test]
fn vop3_abs_neg_modifiers() {
    let mut r = Run::new();
    r.lanes(1, |_| f(-3.0));
    r.lanes(2, |_| f(2.0));
    // v0 = |v1| * -v2 = -6
    let [a, b] = vop3(opcodes::VOP3, "v_mul_f32_e64", 0, [v(1), v(2), 0], 0b01, 0b10, 0);
    r.ok(&[a, b]);
    assert_eq!(r.vf(0, 3), -6.0);
    // v_fma_f32 v0 = -(v1) * v2 + 1.0 = 7
    let [a, b] = vop3(opcodes::VOP3, "v_fma_f32", 0, [v(1), v(2), 242], 0, 0b001, 0);
    r.ok(&[a, b]);
    assert_eq!(r.vf(0, 0), 7.0);
}

#[test]
fn ieee_nan_rules_of_min_max_med3() {
    let snan = 0x7f80_0001u32;
    let qnan = 0x7fc0_0000u32;
    let mut r = Run::new();
    r.lanes(1, |l| [snan, qnan, f(-0.0), f(1.0)][l % 4]);
    r.lanes(2, |l| [f(1.0), f(1.0), f(0.0), f(-2.0)][l % 4]);
    r.ok(&[vop2("v_max_f32_e32", 3, v(1), 2), vop2("v_min_f32_e32", 4, v(1), 2)]);
    assert_eq!(r.w.v[3][0], snan | 0x0040_0000, "sNaN is quieted");
    assert_eq!(r.vf(3, 1), 1.0, "a quiet NaN loses to a number");
    assert_eq!(r.w.v[3][2], f(0.0), "max(-0, +0) = +0");
    assert_eq!(r.w.v[4][2], f(-0.0), "min(-0, +0) = -0");
    assert_eq!(r.vf(3, 3), 1.0);
    assert_eq!(r.vf(4, 3), -2.0);
    // med3(qnan, 1, 5) with a NaN: min3 of them, i.e. min(min(qnan,1),5) = 1.
    r.lanes(5, |_| f(5.0));
    let [a, b] = vop3(opcodes::VOP3, "v_med3_f32", 6, [v(1), v(2), v(5)], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.vf(6, 1), 1.0);
    assert_eq!(r.vf(6, 3), 1.0, "med3(1, -2, 5) = 1");
    let [a, b] = vop3(opcodes::VOP3, "v_med3_u32", 7, [193, 129, 130], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[7][0], 2, "med3(0xffffffff, 1, 2) = 2");
}

#[test]
fn vopd_reads_both_halves_before_writing() {
    let mut r = Run::new();
    r.lanes(0, |l| l as u32);
    r.lanes(1, |l| 100 + l as u32);
    let (mov, add) = (op(opcodes::VOPD, "v_dual_mov_b32"), op(opcodes::VOPD, "v_dual_add_nc_u32"));
    // v_dual_mov_b32 v0, v1 :: v_dual_add_nc_u32 v1, v0, v0
    let w0 = 0xC800_0000 | mov << 22 | add << 17 | v(1);
    let w1 = 0u32 << 24 | (1 >> 1) << 17 | 0 << 9 | v(0);
    r.ok(&[w0, w1]);
    for l in 0..32 {
        assert_eq!(r.w.v[0][l], 100 + l as u32);
        assert_eq!(r.w.v[1][l], 2 * l as u32, "the Y half read v0 before X wrote it");
    }
}

#[test]
fn dpp16_row_xmask_in_place_with_an_inactive_source_lane() {
    let mut r = Run::new();
    r.lanes(5, |l| 1000 + l as u32);
    r.w.s[EXEC as usize] = !(1 << 3); // lane 3 inactive
    // v_mov_b32_dpp v5, v5 row_xmask:1 row_mask:0xf bank_mask:0xf (bound_ctrl 0, fi 0)
    let dpp = 0xFF00_0000 | 0x161 << 8 | 5;
    r.ok(&[vop1("v_mov_b32_e32", 5, 250), dpp]);
    assert_eq!(r.w.v[5][0], 1001);
    assert_eq!(r.w.v[5][1], 1000, "in place: lane 1 read lane 0's old value");
    assert_eq!(r.w.v[5][2], 1002, "source lane 3 inactive, bound_ctrl 0: not written");
    assert_eq!(r.w.v[5][3], 1003, "inactive lane not written");
    assert_eq!(r.w.v[5][17], 1016);
    // With bound_ctrl set the invalid source reads as 0.
    r.lanes(5, |l| 1000 + l as u32);
    r.ok(&[vop1("v_mov_b32_e32", 5, 250), dpp | 1 << 19]);
    assert_eq!(r.w.v[5][2], 0);
    // row_mask 0b01: only row 0 is written.
    r.w.s[EXEC as usize] = u32::MAX;
    r.lanes(5, |l| 1000 + l as u32);
    r.ok(&[vop1("v_mov_b32_e32", 5, 250), 0x1F00_0000 | 0x161 << 8 | 5]);
    assert_eq!(r.w.v[5][0], 1001);
    assert_eq!(r.w.v[5][16], 1016);
}

#[test]
fn permlanex16_with_literal_selectors() {
    let mut r = Run::new();
    r.lanes(1, |l| l as u32);
    r.w.s[4] = 0x7654_3210;
    // v_permlanex16_b32 v2, v1, s4, 0xfedcba98
    let [a, b] = vop3(opcodes::VOP3, "v_permlanex16_b32", 2, [v(1), 4, LIT], 0, 0, 0);
    r.ok(&[a, b, 0xfedc_ba98]);
    for i in 0..16 {
        assert_eq!(r.w.v[2][i], 16 + i as u32, "row 0 lane {i} reads row 1");
        assert_eq!(r.w.v[2][16 + i], i as u32, "row 1 lane {i} reads row 0");
    }
    r.w.s[4] = 0x0000_0005;
    let [a, b] = vop3(opcodes::VOP3, "v_permlanex16_b32", 3, [v(1), 4, 128], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[3][0], 21);
    assert_eq!(r.w.v[3][1], 16);
    assert_eq!(r.w.v[3][16], 5);
}

#[test]
fn ds_bpermute_reads_zero_from_inactive_lanes_and_lds_round_trips() {
    let mut r = Run::new();
    r.lanes(1, |l| (((l + 1) % 32) * 4) as u32);
    r.lanes(2, |l| 500 + l as u32);
    r.w.s[EXEC as usize] = !(1 << 6);
    let [a, b] = ds("ds_bpermute_b32", 3, 1, 2, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[3][0], 501);
    assert_eq!(r.w.v[3][5], 0, "source lane 6 inactive");
    assert_eq!(r.w.v[3][31], 500);
    r.w.s[EXEC as usize] = u32::MAX;
    r.lanes(4, |l| 4 * l as u32);
    let [a, b] = ds("ds_store_b32", 0, 4, 2, 16);
    let [c, d] = ds("ds_load_b32", 5, 4, 0, 16);
    r.ok(&[a, b, c, d]);
    assert_eq!(r.w.v[5][9], 509);
    assert_eq!(u32::from_le_bytes(r.lds[16 + 36..16 + 40].try_into().unwrap()), 509);
}

/// `ds_store_2addr<form>_b32 v1, v2, v3 offset0:1 offset1:3`, then
/// `ds_load_2addr<form>_b32 v[6:7], v1 offset0:3 offset1:1`, with lane `l`'s
/// address `lane_stride * l`: the dwords sit at ADDR + `unit` * OFFSET.
/// Returns the LDS for the caller's check of the bytes between.
fn ds_2addr_round_trip(form: &str, unit: usize, lane_stride: usize) -> Vec<u8> {
    let mut r = Run::new();
    r.lanes(1, |l| (lane_stride * l) as u32);
    r.lanes(2, |l| 100 + l as u32);
    r.lanes(3, |l| 200 + l as u32);
    let [a, b] = ds(&format!("ds_store_2addr{form}_b32"), 0, 1, 2, 1 | 3 << 8);
    let [c, d] = ds(&format!("ds_load_2addr{form}_b32"), 6, 1, 0, 3 | 1 << 8);
    r.ok(&[a, b | 3 << 16, c, d]);
    let word = |at: usize| u32::from_le_bytes(r.lds[at..at + 4].try_into().unwrap());
    for l in [0usize, 9, 31] {
        let base = lane_stride * l;
        assert_eq!((word(base + unit), word(base + 3 * unit)), (100 + l as u32, 200 + l as u32), "{form} lane {l}");
        assert_eq!((r.w.v[6][l], r.w.v[7][l]), (200 + l as u32, 100 + l as u32), "{form} lane {l}");
    }
    r.lds
}

/// The two-address forms: dwords at ADDR + 4 * OFFSET0 and ADDR + 4 * OFFSET1.
#[test]
fn ds_2addr_b32_loads_and_stores_two_dwords() {
    let lds = ds_2addr_round_trip("", 4, 16);
    assert_eq!(lds[16 * 9..16 * 9 + 4], [0; 4], "bytes between the two dwords untouched");
}

/// The stride64 forms: dwords at ADDR + 256 * OFFSET0 and ADDR + 256 * OFFSET1.
#[test]
fn ds_2addr_stride64_b32_loads_and_stores_two_dwords_64_dwords_apart() {
    let lds = ds_2addr_round_trip("_stride64", 256, 4);
    assert_eq!(lds[512..516], [0; 4], "the 64 dwords between the two untouched");
}

#[test]
fn compares_write_vcc_and_exec_with_inactive_lanes_zero() {
    let mut r = Run::new();
    r.lanes(1, |l| f(l as f32));
    r.w.s[EXEC as usize] = 0x0000_00ff;
    // v_cmp_lt_f32 vcc, 4.0, v1  (4 < v1): lanes 5..7 of the active 0..7
    r.ok(&[vopc("v_cmp_lt_f32_e32", 246, 1)]);
    assert_eq!(r.w.s[VCC as usize], 0b1110_0000);
    r.ok(&[vopc("v_cmpx_gt_u32_e32", 131, 1)]); // 3 > v1 as u32 bits: lanes with v1 == 0.0 only
    assert_eq!(r.w.s[EXEC as usize], 0b1);
    // v_cmp_class_f32 with mask 0x260 (-0? no: bits 5,6,9 = -0, +0, +inf)
    r.w.s[EXEC as usize] = u32::MAX;
    r.lanes(2, |l| [f(-0.0), f(0.0), f(f32::INFINITY), f(1.0)][l % 4]);
    let [a, b] = vop3(opcodes::VOP3, "v_cmp_class_f32_e64", VCC, [v(2), LIT, 0], 0, 0, 0);
    r.ok(&[a, b, 0x260]);
    assert_eq!(r.w.s[VCC as usize], 0x7777_7777);
}

#[test]
fn scalar_carry_chain_and_saveexec() {
    let mut r = Run::new();
    r.w.s[0] = 0xffff_ffff;
    r.w.s[1] = 1;
    r.w.s[2] = 1;
    r.w.s[3] = 2;
    r.ok(&[sop2("s_add_u32", 4, 0, 2), sop2("s_addc_u32", 5, 1, 3)]);
    assert_eq!((r.w.s[4], r.w.s[5]), (0, 4));
    r.w.s[6] = 0x0f0f;
    r.w.s[EXEC as usize] = 0x00ff;
    r.ok(&[sop1("s_and_saveexec_b32", 7, 6)]);
    assert_eq!((r.w.s[7], r.w.s[EXEC as usize], r.w.scc), (0x00ff, 0x000f, true));
}

#[test]
fn scalar_fused_multiply_adds_round_once() {
    // a * b = 1 + 2^-24 - 2^-47 exactly; rounded to f32 first it is 1.0, and
    // plus -1 it would be 0.
    let (a, b, c) = (1.0 + f32::EPSILON, 1.0 - f32::EPSILON / 2.0, -1.0f32);
    let exact = a.mul_add(b, c);
    assert_ne!(exact, a * b + c, "the case separates fused from unfused");
    let mut r = Run::new();
    r.w.s[0] = f(a);
    r.w.s[1] = f(b);
    r.w.s[5] = f(c);
    // s_fmaak_f32 s2 = s0 * s1 + K; s_fmamk_f32 s3 = s0 * K + s1; s_fmac_f32 s5 = s0 * s1 + s5.
    r.ok(&[sop2("s_fmaak_f32", 2, 0, 1), f(c), sop2("s_fmamk_f32", 3, 0, 5), f(b), sop2("s_fmac_f32", 5, 0, 1)]);
    assert_eq!([r.w.s[2], r.w.s[3], r.w.s[5]], [f(exact); 3]);
    // The literal is consumed: the instruction after it ran.
    r.ok(&[sop2("s_fmaak_f32", 4, 0, 1), f(0.0), sop2("s_add_f32", 6, 4, 4)]);
    assert_eq!(f32::from_bits(r.w.s[6]), 2.0 * a * b);
}

#[test]
fn scalar_float_rounding_to_integral_values() {
    let mut r = Run::new();
    r.w.s[0] = f(2.5);
    r.w.s[1] = f(-1.5);
    r.ok(&[sop1("s_rndne_f32", 2, 0), sop1("s_rndne_f32", 3, 1), sop1("s_floor_f32", 4, 1)]);
    r.ok(&[sop1("s_ceil_f32", 5, 1), sop1("s_trunc_f32", 6, 1)]);
    let got: Vec<f32> = (2..7).map(|i| f32::from_bits(r.w.s[i])).collect();
    assert_eq!(got, [2.0, -2.0, -2.0, -1.0, -1.0]);
}

#[test]
fn scalar_shift_and_add() {
    let mut r = Run::new();
    r.w.s[0] = 0x4000_0001;
    r.w.s[1] = 3;
    r.ok(&[sop2("s_lshl2_add_u32", 2, 0, 1)]);
    // (0x4000_0001 << 2) + 3 = 0x1_0000_0007: the low word, and the carry in SCC.
    assert_eq!((r.w.s[2], r.w.scc), (7, true));
    r.ok(&[sop2("s_lshl1_add_u32", 2, 1, 1), sop2("s_lshl3_add_u32", 3, 1, 1), sop2("s_lshl4_add_u32", 4, 1, 1)]);
    assert_eq!((r.w.s[2], r.w.s[3], r.w.s[4], r.w.scc), (9, 27, 51, false));
}

#[test]
fn s_bfe_and_branches() {
    let mut r = Run::new();
    r.w.s[0] = 0xabcd_1234;
    r.w.s[1] = 8 | 12 << 16; // offset 8, width 12
    r.ok(&[sop2("s_bfe_u32", 2, 0, 1)]);
    assert_eq!(r.w.s[2], 0xd12);
    // s_cmp_eq_u32 s2, s2; s_cbranch_scc1 +1 (skips the s_mov); s_mov_b32 s3, 7
    r.w.s[3] = 0;
    r.ok(&[sopc("s_cmp_eq_u32", 2, 2), sopp("s_cbranch_scc1", 1), sop1("s_mov_b32", 3, 135)]);
    assert_eq!(r.w.s[3], 0);
    r.ok(&[sopc("s_cmp_lg_u32", 2, 2), sopp("s_cbranch_scc1", 1), sop1("s_mov_b32", 3, 135)]);
    assert_eq!(r.w.s[3], 7);
}

#[test]
fn division_helpers() {
    let mut r = Run::new();
    // div_fixup(quotient, denominator, numerator)
    r.lanes(1, |_| f(2.5));
    r.lanes(2, |l| [f(0.0), f(0.0), f(-2.0), f(f32::INFINITY)][l % 4]);
    r.lanes(3, |l| [f(0.0), f(3.0), f(5.0), f(f32::INFINITY)][l % 4]);
    let [a, b] = vop3(opcodes::VOP3, "v_div_fixup_f32", 4, [v(1), v(2), v(3)], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[4][0], 0xffc0_0000, "0/0");
    assert_eq!(r.vf(4, 1), f32::INFINITY, "3/0");
    assert_eq!(r.vf(4, 2), -2.5, "sign of 5/-2 applied to |q|");
    assert_eq!(r.w.v[4][3], 0xffc0_0000, "inf/inf");
    // div_scale: ordinary operands pass through with VCC clear; a tiny numerator is scaled by 2^64.
    r.lanes(5, |l| [f(6.0), f(1e-38)][l % 2]);
    r.lanes(6, |_| f(3.0));
    let [a, b] = vop3(opcodes::VOP3SD, "v_div_scale_f32", 7, [v(5), v(6), v(5)], 0, 0, 0);
    let a = a | VCC << 8;
    r.ok(&[a, b]);
    assert_eq!(r.vf(7, 0), 6.0);
    assert_eq!(r.vf(7, 1), 1e-38f32 * 2f32.powi(64));
    // 1e-38 / 3 is an f32 denormal: VCC is set for those lanes (pseudocode order).
    assert_eq!(r.w.s[VCC as usize], 0xaaaa_aaaa);
    // div_fmas with VCC set scales by 2^32.
    r.w.s[VCC as usize] = 0b10;
    r.lanes(8, |_| f(1.5));
    let [a, b] = vop3(opcodes::VOP3, "v_div_fmas_f32", 9, [v(8), v(8), v(8)], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.vf(9, 0), 3.75);
    assert_eq!(r.vf(9, 1), 3.75 * 4294967296.0);
}

#[test]
fn fma_mix_and_true16() {
    let mut r = Run::new();
    let h = |x: f32| half::f16::from_f32(x).to_bits() as u32;
    r.lanes(1, |_| h(1.5) << 16 | h(-2.0)); // hi 1.5, lo -2
    r.lanes(2, |_| f(4.0));
    // v_fma_mix_f32 v3, v1 (hi half, f16), v2 (f32), v1 (lo half, f16): 1.5 * 4 + -2 = 4
    let [a, b] = vop3p("v_fma_mix_f32", 3, [v(1), v(2), v(1)], 0b001, 0b101, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.vf(3, 0), 4.0);
    // v_fma_mixlo_f16 v4 keeps v4's high half.
    r.lanes(4, |_| 0xabcd_0000);
    let [a, b] = vop3p("v_fma_mixlo_f16", 4, [v(1), v(2), v(1)], 0b001, 0b101, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[4][0], 0xabcd_0000 | h(4.0));
    // true16: v_cvt_f16_f32_e32 v5.h, v2 (vdst field 0x85) keeps the low half.
    r.lanes(5, |_| 0x1234);
    r.ok(&[vop1("v_cvt_f16_f32_e32", 0x85, v(2))]);
    assert_eq!(r.w.v[5][0], h(4.0) << 16 | 0x1234);
    // v_cvt_f32_f16_e32 v6, v1.h (src VGPR field 0x81)
    r.ok(&[vop1("v_cvt_f32_f16_e32", 6, 256 + 0x81)]);
    assert_eq!(r.vf(6, 0), 1.5);
    // v_add_f16_e32 v7.l, v1.l, v1.h = -0.5
    r.lanes(7, |_| 0xffff_0000);
    r.ok(&[vop2("v_add_f16_e32", 7, v(1), 0x81)]);
    assert_eq!(r.w.v[7][0], 0xffff_0000 | h(-0.5));
    // v_pk_mul_f16 v8, v1, v1 = (2.25, 4)
    let [a, b] = vop3p("v_pk_mul_f16", 8, [v(1), v(1), 0], 0, 0b011, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[8][0], h(2.25) << 16 | h(4.0));
}

#[test]
fn conversions_and_rounding() {
    let mut r = Run::new();
    r.lanes(1, |l| [f(2.5), f(3.5), f(-2.5), f(3e9), f(f32::NAN), f(-1e10), f(0.5), f(-0.5)][l % 8]);
    r.ok(&[vop1("v_rndne_f32_e32", 2, v(1)), vop1("v_cvt_i32_f32_e32", 3, v(1)), vop1("v_cvt_u32_f32_e32", 4, v(1))]);
    let rn: Vec<f32> = (0..8).map(|l| r.vf(2, l)).collect();
    assert_eq!(&rn[..4], &[2.0, 4.0, -2.0, 3e9]);
    assert_eq!(rn[6].to_bits(), 0);
    assert_eq!(rn[7].to_bits(), f(-0.0));
    let ci: Vec<i32> = (0..8).map(|l| r.w.v[3][l] as i32).collect();
    assert_eq!(ci, vec![2, 3, -2, i32::MAX, 0, i32::MIN, 0, 0]);
    let cu: Vec<u32> = (0..8).map(|l| r.w.v[4][l]).collect();
    assert_eq!(cu, vec![2, 3, 0, 3_000_000_000, 0, 0, 0, 0]);
    r.lanes(5, |_| 0x8040_20ff);
    r.ok(&[vop1("v_cvt_f32_ubyte1_e32", 6, v(5)), vop1("v_cvt_f32_ubyte3_e32", 7, v(5))]);
    assert_eq!((r.vf(6, 0), r.vf(7, 0)), (32.0, 128.0));
    // ldexp and the correctly rounded approximations.
    r.lanes(8, |l| [f(3.0), f(-1.0), f(0.0), f(f32::INFINITY)][l % 4]);
    r.ok(&[vop1("v_rcp_f32_e32", 9, v(8)), vop1("v_exp_f32_e32", 10, v(8)), vop1("v_sqrt_f32_e32", 11, v(8))]);
    assert_eq!(r.vf(9, 0), 1.0 / 3.0);
    assert_eq!(r.vf(9, 2), f32::INFINITY);
    assert_eq!(r.vf(10, 0), 8.0);
    assert_eq!(r.vf(10, 1), 0.5);
    assert_eq!(r.vf(10, 3), f32::INFINITY);
    assert_eq!(r.w.v[11][1], 0x7fc0_0000, "sqrt(-1) is the default NaN");
    let [a, b] = vop3(opcodes::VOP3, "v_ldexp_f32", 12, [v(8), 193, 0], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.vf(12, 0), 1.5);
}

#[test]
fn perturbation_mode_moves_approximations_by_one_ulp() {
    let mut r = Run::new();
    r.lanes(1, |l| f(1.0 + l as f32 * 0.37));
    r.ok(&[vop1("v_rcp_f32_e32", 2, v(1))]);
    let exact: Vec<u32> = (0..32).map(|l| r.w.v[2][l]).collect();
    r.mode.perturb = Some(7);
    r.ok(&[vop1("v_rcp_f32_e32", 2, v(1))]);
    let mut ups = 0;
    for l in 0..32 {
        let d = r.w.v[2][l] as i64 - exact[l] as i64;
        assert!(d == 1 || d == -1, "lane {l}: moved by {d} ulp");
        ups += (d == 1) as u32;
    }
    assert!(ups > 0 && ups < 32, "both directions occur");
}

#[test]
fn out_of_bounds_accesses_fail_with_address_and_lane() {
    let mut r = Run::new();
    let buf = r.mem.alloc(64, "buffer");
    r.lanes(1, |l| (buf + 4 * l as u64) as u32);
    r.lanes(2, |_| (buf >> 32) as u32);
    let [a, b] = global("global_store_b32", 0, 1, 3, 0);
    let e = r.run(&[a, b]).unwrap_err();
    assert!(e.contains("lane 16") && e.contains("past the end of buffer"), "{e}");
    assert!(e.contains(&format!("{:#x}", buf + 64)), "{e}");
    // Lanes 0..15 are in bounds: with EXEC limited, the store succeeds.
    r.w.s[EXEC as usize] = 0xffff;
    r.ok(&[a, b]);
    // LDS past the workgroup's size.
    r.w.s[EXEC as usize] = u32::MAX;
    r.lanes(4, |l| 1020 + l as u32);
    let [a, b] = ds("ds_load_b32", 5, 4, 0, 0);
    let e = r.run(&[a, b]).unwrap_err();
    assert!(e.contains("lane 1:") && e.contains("LDS access at 0x3fd"), "{e}");
    // Scalar loads are checked too.
    r.w.s[10] = 0x1000;
    r.w.s[11] = 0;
    let e = r.run(&[0xF400_0000 | 12 << 6 | 10 >> 1, 0xF800_0000]).unwrap_err();
    assert!(e.contains("outside every live allocation"), "{e}");
}

#[test]
fn unimplemented_instructions_are_errors() {
    let mut r = Run::new();
    let e = r.run(&[vop1("v_sin_f32_e32", 1, v(0))]).unwrap_err();
    assert!(e.contains("v_sin_f32") && e.contains("not implemented"), "{e}");
}

#[test]
fn a_barrier_some_waves_never_reach_fails_instead_of_hanging() {
    // v_readfirstlane_b32 s0, v0; s_cmp_eq_u32 s0, 0; s_cbranch_scc1 +1; s_barrier; s_endpgm
    let code = [
        0x7E00_0000 | 0 << 17 | op(opcodes::VOP1, "v_readfirstlane_b32_e32") << 9 | v(0),
        sopc("s_cmp_eq_u32", 0, 128),
        sopp("s_cbranch_scc1", 1),
        sopp("s_barrier", 0),
        ENDPGM,
    ];
    let k = synthetic_kernel(&code);
    let mut mem = Memory::new();
    let l = Launch { block: [64, 1, 1], ..Launch::default() };
    let e = dispatch::launch(&mut mem, &k, &l).unwrap_err().to_string();
    assert!(e.contains("s_barrier") && e.contains("ended without reaching it"), "{e}");
    // Every wave reaching it: fine.
    let code = [sopp("s_barrier", 0), sopp("s_barrier", 0), ENDPGM];
    let c = dispatch::launch(&mut mem, &synthetic_kernel(&code), &l).unwrap();
    assert_eq!(c.barriers, 4);
    // An endless loop is reported, not hung.
    let code = [sopp("s_branch", 0xffff), ENDPGM];
    let l = Launch { max_wave_insts: 1000, ..l };
    let e = dispatch::launch(&mut mem, &synthetic_kernel(&code), &l).unwrap_err().to_string();
    assert!(e.contains("hung"), "{e}");
}

#[test]
fn strict_wait_mode_catches_a_planted_missing_wait() {
    let setup = |strict: bool| {
        let mut r = Run::new();
        r.mode.strict_wait = strict;
        let buf = r.mem.alloc(128, "buffer");
        r.mem.write(buf, &(0..32u32).flat_map(|i| (i * 10).to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        r.lanes(1, |l| (buf + 4 * l as u64) as u32);
        r.lanes(2, |_| (buf >> 32) as u32);
        r
    };
    let [a, b] = global("global_load_b32", 3, 1, 0, 0);
    let use_it = vop2("v_add_nc_u32_e32", 4, 129, 3); // v4 = 1 + v3
    let wait_vm0 = sopp("s_waitcnt", (0x3f << 4) | 0x7); // vmcnt(0), lgkmcnt and expcnt "no wait"
    // Without strict mode the missing wait goes unnoticed.
    let mut r = setup(false);
    r.ok(&[a, b, use_it]);
    assert_eq!(r.w.v[4][5], 51);
    // In strict mode the planted missing wait gives a wrong result...
    let mut r = setup(true);
    r.ok(&[a, b, use_it]);
    assert_eq!(r.w.v[4][5], rdna_sim::exec::POISON.wrapping_add(1));
    // ...and the wait repairs it.
    let mut r = setup(true);
    r.ok(&[a, b, wait_vm0, use_it]);
    assert_eq!(r.w.v[4][5], 51);
    // Two d16 loads into the halves of one register, both in flight: each wait
    // completes only its own half.
    let mut r = setup(true);
    r.w.s[EXEC as usize] = 0x7fff_ffff; // lane 31 + 4 would be past the buffer
    let [c, d] = global("global_load_d16_b16", 5, 1, 0, 0);
    let [e, f] = global("global_load_d16_hi_b16", 5, 1, 0, 4);
    r.ok(&[c, d, e, f, wait_vm0]);
    assert_eq!(r.w.v[5][2], 30 << 16 | 20);
    // An lgkmcnt wait does not cover a global load.
    let mut r = setup(true);
    r.ok(&[a, b, sopp("s_waitcnt", 0xfc07 & !(0x3f << 4)), use_it]);
    assert_eq!(r.w.v[4][5], rdna_sim::exec::POISON.wrapping_add(1));
}

#[test]
fn sixteen_bit_operations_take_f16_inline_constants() {
    let mut r = Run::new();
    r.lanes(1, |_| 0xaaaa_0000);
    // v_mov_b16_e32 v1.l, 1.0 (inline 242): the f16 encoding 0x3c00, high half kept.
    r.ok(&[vop1("v_mov_b16_e32", 1, 242)]);
    assert_eq!(r.w.v[1][0], 0xaaaa_3c00);
    // v_add_f16_e32 v2.l, 2.0, v1.l = 3.0
    r.ok(&[vop2("v_add_f16_e32", 2, 244, 1)]);
    assert_eq!(r.w.v[2][0] & 0xffff, half::f16::from_f32(3.0).to_bits() as u32);
}

#[test]
fn sixteen_bit_bitwise_operations_and_shifts_write_one_half() {
    let mut r = Run::new();
    r.lanes(1, |_| 0x8421_00f3);
    for d in [0, 2, 3, 4, 5] {
        r.lanes(d, |_| 0x5555_5555);
    }
    let run = |r: &mut Run, name: &str, vdst: u32, s: [u32; 3], opsel: u32| {
        let [a, b] = vop3(opcodes::VOP3, name, vdst, s, 0, 0, opsel);
        r.ok(&[a, b]);
    };
    // v_lshlrev_b16 v0.h, 3, v1.l: 0x00f3 << 3 into the high half; the low half is kept.
    run(&mut r, "v_lshlrev_b16", 0, [131, v(1), 0], 0b1000);
    assert_eq!(r.w.v[0][0], 0x0798_5555);
    // v_lshrrev_b16 v2.l, 17, v1.h: the amount's low 4 bits (1), 0x8421 >> 1.
    run(&mut r, "v_lshrrev_b16", 2, [145, v(1), 0], 0b0010);
    assert_eq!(r.w.v[2][0], 0x5555_4210);
    // v1.l with v1.h: or, and, xor.
    run(&mut r, "v_or_b16", 3, [v(1), v(1), 0], 0b0010);
    run(&mut r, "v_and_b16", 4, [v(1), v(1), 0], 0b0010);
    run(&mut r, "v_xor_b16", 5, [v(1), v(1), 0], 0b0010);
    assert_eq!([r.w.v[3][0], r.w.v[4][0], r.w.v[5][0]], [0x5555_84f3, 0x5555_0021, 0x5555_84d2]);
}

#[test]
fn v_perm_b32_bytes_zero_ones_and_signs() {
    let mut r = Run::new();
    r.lanes(1, |_| 0x8877_6655); // S0: bytes 4..7 of the data
    r.lanes(2, |_| 0x4433_2211); // S1: bytes 0..3
    // Selector 0x0c0c0004 (S1 byte 0 above S0 byte 0, the top two zero): as
    // LLVM packs two bytes.
    r.lanes(3, |_| 0x0c0c_0004);
    let [a, b] = vop3(opcodes::VOP3, "v_perm_b32", 0, [v(1), v(2), v(3)], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[0][0], 0x0000_1155);
    // 0x07060302: the high halves of both; 0x0d0b0908: 0xff, the sign of byte
    // 7 (0x88: set), of byte 3 (0x44: clear), of byte 1 (0x22: clear).
    r.lanes(3, |l| if l == 0 { 0x0706_0302 } else { 0x0d0b_0908 });
    r.ok(&[a, b]);
    assert_eq!(r.w.v[0][0], 0x8877_4433);
    assert_eq!(r.w.v[0][1], 0xffff_0000);
}

#[test]
fn v_alignbit_b32_shifts_the_pair_right() {
    let mut r = Run::new();
    r.lanes(1, |_| 0x1234_5678); // S0: the high dword
    r.lanes(2, |_| 0x9abc_def0);
    r.lanes(3, |l| [0, 16, 4, 32 + 8][l % 4]); // only S2[4:0] counts
    let [a, b] = vop3(opcodes::VOP3, "v_alignbit_b32", 0, [v(1), v(2), v(3)], 0, 0, 0);
    r.ok(&[a, b]);
    assert_eq!(r.w.v[0][0], 0x9abc_def0);
    assert_eq!(r.w.v[0][1], 0x5678_9abc);
    assert_eq!(r.w.v[0][2], 0x89ab_cdef);
    assert_eq!(r.w.v[0][3], 0x789a_bcde);
}

/// `global_atomic_<op>` with GLC (word 0 bit 14): returns the pre-op value.
fn atomic(name: &str, vdst: u32, addr: u32, data: u32, glc: bool) -> [u32; 2] {
    let [a, b] = global(name, vdst, addr, data, 0);
    [a | (glc as u32) << 14, b]
}

/// Each GLOBAL 32-bit atomic's new memory value (the ISA's pseudocode) and its
/// return of the pre-op value with GLC; without GLC VDST is left alone.
/// cmpswap takes its data as a VGPR pair, {DATA: the new value, DATA + 1: the
/// compare value} (the pseudocode's `DATA[31:0]` and `DATA[63:32]`, as LLVM
/// packs `{src, cmp}`): assumed from the RDNA3 ISA reference, not checked on silicon.
#[test]
fn global_atomics_compute_and_return_the_old_value() {
    let m3 = (-3i32) as u32;
    #[rustfmt::skip]
    let cases: [(&str, u32, u32, u32, u32); 19] = [
        // (op, old, data, compare, new)
        ("add_u32", 5, 7, 0, 12),
        ("add_u32", u32::MAX, 2, 0, 1),
        ("sub_u32", 5, 7, 0, 0xffff_fffe),
        ("csub_u32", 5, 7, 0, 0),
        ("swap_b32", 5, 7, 0, 7),
        ("cmpswap_b32", 5, 7, 5, 7),
        ("cmpswap_b32", 5, 7, 6, 5),
        ("min_i32", m3, 2, 0, m3),
        ("max_i32", m3, 2, 0, 2),
        ("min_u32", m3, 2, 0, 2),
        ("max_u32", m3, 2, 0, m3),
        ("and_b32", 0b1100, 0b1010, 0, 0b1000),
        ("or_b32", 0b1100, 0b1010, 0, 0b1110),
        ("xor_b32", 0b1100, 0b1010, 0, 0b0110),
        ("inc_u32", 2, 3, 0, 3),
        ("inc_u32", 3, 3, 0, 0),
        ("dec_u32", 4, 9, 0, 3),
        ("dec_u32", 0, 9, 0, 9),
        ("dec_u32", 10, 9, 0, 9),
    ];
    for (opname, old, data, cmp, new) in cases {
        for glc in [true, false] {
            let mut r = Run::new();
            r.w.s[EXEC as usize] = 1;
            let buf = r.mem.alloc(8, "counter");
            r.mem.write(buf, &old.to_le_bytes()).unwrap();
            r.lanes(1, |_| buf as u32);
            r.lanes(2, |_| (buf >> 32) as u32);
            r.lanes(4, |_| data);
            r.lanes(5, |_| cmp);
            r.lanes(6, |_| 0xdead);
            r.ok(&atomic(&format!("global_atomic_{opname}"), 6, 1, 4, glc));
            let mut got = [0u8; 4];
            r.mem.read(buf, &mut got).unwrap();
            let what = format!("{opname}({old:#x}, {data:#x}, {cmp:#x}), glc {glc}");
            assert_eq!(u32::from_le_bytes(got), new, "{what}: memory");
            assert_eq!(r.w.v[6][0], if glc { old } else { 0xdead }, "{what}: vdst");
        }
    }
}

/// The lanes of one atomic are applied one after the other in lane order.
#[test]
fn atomic_lanes_apply_in_lane_order() {
    let mut r = Run::new();
    let buf = r.mem.alloc(8, "counter");
    r.lanes(1, |_| buf as u32);
    r.lanes(2, |_| (buf >> 32) as u32);
    r.lanes(4, |_| 1);
    r.ok(&atomic("global_atomic_add_u32", 6, 1, 4, true));
    assert_eq!((0..32).map(|l| r.w.v[6][l]).collect::<Vec<_>>(), (0..32).collect::<Vec<u32>>());
    // inc wraps at its data: 32, then 0, 1, 2, 3, 4, 0, ...
    r.lanes(4, |_| 4);
    r.ok(&atomic("global_atomic_inc_u32", 6, 1, 4, true));
    assert_eq!(r.w.v[6][0], 32);
    assert_eq!((1..8).map(|l| r.w.v[6][l]).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 0, 1]);
    // cmpswap: lane l offers 100 + l against compare values 10, 10, 100, 5.
    r.mem.write(buf, &10u32.to_le_bytes()).unwrap();
    r.w.s[EXEC as usize] = 0b1111;
    r.lanes(4, |l| 100 + l as u32);
    r.lanes(5, |l| [10, 10, 100, 5][l % 4]);
    r.ok(&atomic("global_atomic_cmpswap_b32", 6, 1, 4, true));
    assert_eq!((0..4).map(|l| r.w.v[6][l]).collect::<Vec<_>>(), [10, 100, 100, 102]);
    let mut got = [0u8; 4];
    r.mem.read(buf, &mut got).unwrap();
    assert_eq!(u32::from_le_bytes(got), 102);
}

/// FLAT atomics on a global address, the SADDR form, the counts, the bounds
/// check, and in strict-wait mode the returned value held until vmcnt covers it.
#[test]
fn flat_and_saddr_atomics_counts_bounds_and_strict_wait() {
    let mut r = Run::new();
    let buf = r.mem.alloc(128, "counters");
    r.lanes(1, |l| (buf + 4 * l as u64) as u32);
    r.lanes(2, |_| (buf >> 32) as u32);
    r.lanes(4, |l| l as u32);
    // Lane l adds l to dword l: without return, FLAT (segment 0) with GLC into v7, then SADDR.
    let [a, b] = atomic("global_atomic_add_u32", 6, 1, 4, false);
    let flat_add = [0xDC00_0000 | op(opcodes::FLAT, "flat_atomic_add_u32") << 18 | 1 << 14, 1 | 4 << 8 | 7 << 24];
    // SADDR form: s[10:11] the base, v3 the byte offset.
    r.w.s[10] = buf as u32;
    r.w.s[11] = (buf >> 32) as u32;
    r.lanes(3, |l| 4 * l as u32);
    let saddr_add = [a, 3 | 4 << 8 | 10 << 16];
    let code = [a, b, flat_add[0], flat_add[1], saddr_add[0], saddr_add[1], ENDPGM];
    let mut w = r.w.clone();
    let c = dispatch::run_program(&code, &mut w, &mut r.mem, &mut [], r.mode).unwrap();
    assert_eq!((c.vmem_atomics, c.vmem_atomic_bytes, c.vmem_loads, c.vmem_stores), (3, 3 * 128, 0, 0));
    let mut got = vec![0u8; 128];
    r.mem.read(buf, &mut got).unwrap();
    assert_eq!(u32::from_le_bytes(got[4 * 9..4 * 9 + 4].try_into().unwrap()), 27);
    // The FLAT one returned the value after the first add.
    assert_eq!(w.v[7][9], 9);
    r.ok(&flat_add);
    assert_eq!(r.w.v[7][9], 27);
    // Past the end of the allocation: a fault naming the lane, as loads and stores.
    r.lanes(1, |l| (buf + 124 + 4 * l as u64) as u32);
    let e = r.run(&[a, b]).unwrap_err();
    assert!(e.contains("lane 1") && e.contains("past the end of counters"), "{e}");
    // Strict-wait mode: VDST is POISON until s_waitcnt vmcnt(0).
    r.lanes(1, |l| (buf + 4 * l as u64) as u32);
    r.mode.strict_wait = true;
    let [g, h] = atomic("global_atomic_add_u32", 8, 1, 4, true);
    let use_it = vop2("v_add_nc_u32_e32", 9, 129, 8);
    r.ok(&[g, h, use_it]);
    assert_eq!(r.w.v[9][2], rdna_sim::exec::POISON.wrapping_add(1));
    r.ok(&[g, h, sopp("s_waitcnt", 0x3f7), use_it]);
    // Dword 2 had 2 added by the four adds before and the first strict one.
    assert_eq!(r.w.v[9][2], 5 * 2 + 1);
}
