//! Executing one wave32 instruction at a time.
//!
//! Semantics follow the per-instruction pseudocode of AMD's RDNA3 ISA
//! reference; where this file departs from or interprets it, a comment says so.
//! Any instruction this file does not implement is an error naming it, never a no-op.

use crate::decode::{Enc, Inst, bits};
use crate::mem::{self, Memory};
use half::f16;

pub const VCC: u32 = 106;
pub const NULL: u32 = 124;
pub const M0: u32 = 125;
pub const EXEC: u32 = 126;

/// Float and checking modes of a launch.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mode {
    /// IEEE mode of the kernel descriptor (NaN rules of min/max/med3).
    pub ieee: bool,
    /// Perturbation mode: approximate instructions (rcp, rsq, sqrt, exp, log)
    /// move their correctly rounded result by one ulp, up or down (chosen by a
    /// hash of the input and this seed), the most the ISA allows.
    pub perturb: Option<u32>,
    /// Strict-wait mode: a load's destination registers hold [`POISON`] until the
    /// `s_waitcnt` that covers the load, so a missing wait shows as a wrong result.
    pub strict_wait: bool,
}

/// What a load's destination holds before its wait in strict-wait mode.
pub const POISON: u32 = 0xBADC_0DE5;

/// The counter a load counts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctr {
    /// vmcnt (GLOBAL loads).
    Vm,
    /// lgkmcnt (SMEM, DS).
    Lgkm,
    /// both (FLAT loads).
    Both,
}

/// A load whose data has not been waited for (strict-wait mode).
#[derive(Clone, Debug)]
pub struct InFlight {
    ctr: Ctr,
    sgpr: bool,
    reg: usize,
    exec: u32,
    /// The bits of each register the load writes (d16 loads write one half).
    mask: u32,
    /// The loaded registers' values, `[register][lane]` (SGPRs: lane 0).
    vals: Vec<[u32; 32]>,
}

/// Executed wave-instructions by class (issue 13, section 6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub valu: u64,
    pub salu: u64,
    pub trans: u64,
    pub smem: u64,
    pub vmem_loads: u64,
    pub vmem_load_bytes: u64,
    pub vmem_stores: u64,
    pub vmem_store_bytes: u64,
    pub lds: u64,
    pub branches: u64,
    pub waits: u64,
    pub barriers: u64,
    pub other: u64,
    /// Wave-instructions executed per instruction of the kernel (by index):
    /// the coverage of a launch.
    pub hits: Vec<u64>,
}

impl Counts {
    /// The class counts on one line (without the per-instruction hits).
    pub fn summary(&self) -> String {
        format!(
            "valu {} (trans {}), salu {}, smem {}, vmem loads {} ({} B), vmem stores {} ({} B), lds {}, branches {}, waits {}, barriers {}, other {}",
            self.valu,
            self.trans,
            self.salu,
            self.smem,
            self.vmem_loads,
            self.vmem_load_bytes,
            self.vmem_stores,
            self.vmem_store_bytes,
            self.lds,
            self.branches,
            self.waits,
            self.barriers,
            self.other
        )
    }

    pub fn add(&mut self, o: &Counts) {
        self.valu += o.valu;
        self.salu += o.salu;
        self.trans += o.trans;
        self.smem += o.smem;
        self.vmem_loads += o.vmem_loads;
        self.vmem_load_bytes += o.vmem_load_bytes;
        self.vmem_stores += o.vmem_stores;
        self.vmem_store_bytes += o.vmem_store_bytes;
        self.lds += o.lds;
        self.branches += o.branches;
        self.waits += o.waits;
        self.barriers += o.barriers;
        self.other += o.other;
        if self.hits.len() < o.hits.len() {
            self.hits.resize(o.hits.len(), 0);
        }
        for (a, b) in self.hits.iter_mut().zip(&o.hits) {
            *a += b;
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Running,
    AtBarrier,
    Done,
}

/// The state of one wave32.
#[derive(Clone)]
pub struct Wave {
    /// SGPRs 0..=105, VCC (106, 107), TTMPs, NULL (124), M0 (125), EXEC (126, 127).
    pub s: [u32; 128],
    /// `v[register][lane]`.
    pub v: Vec<[u32; 32]>,
    pub scc: bool,
    /// Index of the next instruction in the kernel's instruction list.
    pub pc: usize,
    pub status: Status,
    pub barriers: u32,
    /// Loads not yet waited for (strict-wait mode only).
    pub in_flight: Vec<InFlight>,
}

impl Default for Wave {
    fn default() -> Self {
        Wave { s: [0; 128], v: vec![[0; 32]; 256], scc: false, pc: 0, status: Status::Running, barriers: 0, in_flight: Vec::new() }
    }
}

/// A failed instruction.
#[derive(Clone, Debug)]
pub struct Fault {
    pub lane: Option<usize>,
    pub msg: String,
}

impl Fault {
    fn new(msg: impl Into<String>) -> Fault {
        Fault { lane: None, msg: msg.into() }
    }
    fn lane(lane: usize, msg: impl Into<String>) -> Fault {
        Fault { lane: Some(lane), msg: msg.into() }
    }
}

type R<T> = Result<T, Fault>;

/// What an instruction touches besides the wave.
pub struct Env<'a> {
    pub mem: &'a mut Memory,
    pub lds: &'a mut [u8],
    pub mode: Mode,
    pub counts: &'a mut Counts,
}

/// What happened after one instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Next,
    Barrier,
    End,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum K {
    B32,
    F16,
    B64,
}

const F32_CONSTS: [u32; 9] = [
    0x3f00_0000,
    0xbf00_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x4000_0000,
    0xc000_0000,
    0x4080_0000,
    0xc080_0000,
    0x3e22_f983,
];
const F16_CONSTS: [u32; 9] = [0x3800, 0xb800, 0x3c00, 0xbc00, 0x4000, 0xc000, 0x4400, 0xc400, 0x3118];
const F64_CONSTS: [u64; 9] = [
    0x3fe0_0000_0000_0000,
    0xbfe0_0000_0000_0000,
    0x3ff0_0000_0000_0000,
    0xbff0_0000_0000_0000,
    0x4000_0000_0000_0000,
    0xc000_0000_0000_0000,
    0x4010_0000_0000_0000,
    0xc010_0000_0000_0000,
    0x3fc4_5f30_6dc9_c882,
];

/// An inline constant operand (codes 128..=208 and 240..=248).
fn inline_const(code: u32, k: K) -> Option<u64> {
    match code {
        128..=192 => Some((code - 128) as u64),
        193..=208 => Some((-((code - 192) as i64)) as u64),
        240..=248 => {
            let i = (code - 240) as usize;
            Some(match k {
                K::B32 => F32_CONSTS[i] as u64,
                K::F16 => F16_CONSTS[i] as u64,
                K::B64 => F64_CONSTS[i],
            })
        }
        _ => None,
    }
}

fn lo32(k: K, x: u64) -> u64 {
    if k == K::B64 { x } else { x & 0xffff_ffff }
}

impl Wave {
    /// Reads a scalar operand (everything but a VGPR).
    fn sread(&self, code: u32, lit: Option<u32>, k: K) -> R<u64> {
        let pair = |c: usize| -> u64 {
            if k == K::B64 { self.s[c] as u64 | (self.s[c + 1] as u64) << 32 } else { self.s[c] as u64 }
        };
        Ok(match code {
            0..=123 => {
                if k == K::B64 && code % 2 != 0 {
                    return Err(Fault::new(format!("64-bit operand in odd SGPR s{code}")));
                }
                pair(code as usize)
            }
            NULL => 0,
            M0 => self.s[M0 as usize] as u64,
            126 | 127 => pair(code as usize),
            128..=208 | 240..=248 => lo32(k, inline_const(code, k).unwrap()),
            235 => {
                if k == K::B64 {
                    (mem::SHARED_APERTURE_HI as u64) << 32
                } else {
                    mem::SHARED_APERTURE_HI as u64
                }
            }
            236 => {
                if k == K::B64 {
                    (mem::SHARED_APERTURE_HI as u64) << 32 | 0xffff_ffff
                } else {
                    mem::SHARED_APERTURE_HI as u64
                }
            }
            237 => {
                if k == K::B64 {
                    (mem::PRIVATE_APERTURE_HI as u64) << 32
                } else {
                    mem::PRIVATE_APERTURE_HI as u64
                }
            }
            238 => {
                if k == K::B64 {
                    (mem::PRIVATE_APERTURE_HI as u64) << 32 | 0xffff_ffff
                } else {
                    mem::PRIVATE_APERTURE_HI as u64
                }
            }
            251 => (self.s[VCC as usize] == 0) as u64,
            252 => (self.s[EXEC as usize] == 0) as u64,
            253 => self.scc as u64,
            255 => {
                let l = lit.ok_or_else(|| Fault::new("literal operand without a literal"))?;
                if k == K::B64 {
                    // The ISA's extension of a 32-bit literal to a 64-bit operand is
                    // not implemented (no shipped instruction needs it).
                    return Err(Fault::new("32-bit literal as a 64-bit operand is not implemented"));
                }
                l as u64
            }
            _ => return Err(Fault::new(format!("operand code {code} is not supported"))),
        })
    }

    fn sread32(&self, code: u32, lit: Option<u32>) -> R<u32> {
        Ok(self.sread(code, lit, K::B32)? as u32)
    }

    fn swrite(&mut self, code: u32, x: u32) -> R<()> {
        match code {
            0..=123 | M0 | 126 | 127 => self.s[code as usize] = x,
            NULL => {}
            _ => return Err(Fault::new(format!("scalar destination {code} is not writable"))),
        }
        if code == 127 && x != 0 {
            return Err(Fault::new("EXEC_HI written non-zero in wave32"));
        }
        Ok(())
    }

    fn swrite64(&mut self, code: u32, x: u64) -> R<()> {
        if code % 2 != 0 && code != NULL {
            return Err(Fault::new(format!("64-bit destination in odd SGPR s{code}")));
        }
        self.swrite(code, x as u32)?;
        if code != NULL {
            self.swrite(code + 1, (x >> 32) as u32)?;
        }
        Ok(())
    }

    /// Reads a vector-ALU source operand for `lane`.
    fn vread(&self, code: u32, lane: usize, lit: Option<u32>, k: K) -> R<u64> {
        if code >= 256 {
            let r = (code - 256) as usize;
            if k == K::B64 {
                if r + 1 >= 256 {
                    return Err(Fault::new("64-bit VGPR operand past v255"));
                }
                Ok(self.v[r][lane] as u64 | (self.v[r + 1][lane] as u64) << 32)
            } else {
                Ok(self.v[r][lane] as u64)
            }
        } else {
            self.sread(code, lit, k)
        }
    }

    pub fn exec(&self) -> u32 {
        self.s[EXEC as usize]
    }
}

// ---------------------------------------------------------------- floats

fn is_snan32(x: u32) -> bool {
    x & 0x7f80_0000 == 0x7f80_0000 && x & 0x007f_ffff != 0 && x & 0x0040_0000 == 0
}
fn is_nan32(x: u32) -> bool {
    x & 0x7fff_ffff > 0x7f80_0000
}
fn is_snan16(x: u16) -> bool {
    x & 0x7c00 == 0x7c00 && x & 0x03ff != 0 && x & 0x0200 == 0
}
fn is_nan16(x: u16) -> bool {
    x & 0x7fff > 0x7c00
}

/// A NaN result: the first NaN input, quieted; the default NaN when no input was NaN.
fn nan32(r: f32, inputs: &[f32]) -> f32 {
    if !r.is_nan() {
        return r;
    }
    for x in inputs {
        if x.is_nan() {
            return f32::from_bits(x.to_bits() | 0x0040_0000);
        }
    }
    f32::from_bits(0x7fc0_0000)
}

fn nan16(r: f16, inputs: &[f16]) -> f16 {
    if !r.is_nan() {
        return r;
    }
    for x in inputs {
        if x.is_nan() {
            return f16::from_bits(x.to_bits() | 0x0200);
        }
    }
    f16::from_bits(0x7e00)
}

/// f16 arithmetic through f32: the f32 result of +, -, * on f16 inputs rounds
/// to f16 exactly as a direct f16 operation would (24 >= 2 * 11 + 2 bits).
fn h_op(a: f16, b: f16, op: fn(f32, f32) -> f32) -> f16 {
    nan16(f16::from_f32(op(a.to_f32(), b.to_f32())), &[a, b])
}

/// v_min_f32 / v_max_f32 per the ISA pseudocode (IEEE mode and not), -0 < +0.
fn fminmax32(a: f32, b: f32, ieee: bool, max: bool) -> f32 {
    let (ab, bb) = (a.to_bits(), b.to_bits());
    if ieee {
        if is_snan32(ab) {
            return f32::from_bits(ab | 0x0040_0000);
        }
        if is_snan32(bb) {
            return f32::from_bits(bb | 0x0040_0000);
        }
    }
    if is_nan32(bb) {
        return a;
    }
    if is_nan32(ab) {
        return b;
    }
    let pick_a = if max {
        a > b || (a == 0.0 && b == 0.0 && !a.is_sign_negative() && b.is_sign_negative())
    } else {
        a < b || (a == 0.0 && b == 0.0 && a.is_sign_negative() && !b.is_sign_negative())
    };
    if pick_a { a } else { b }
}

fn fminmax16(a: f16, b: f16, ieee: bool, max: bool) -> f16 {
    let (ab, bb) = (a.to_bits(), b.to_bits());
    if ieee {
        if is_snan16(ab) {
            return f16::from_bits(ab | 0x0200);
        }
        if is_snan16(bb) {
            return f16::from_bits(bb | 0x0200);
        }
    }
    if is_nan16(bb) {
        return a;
    }
    if is_nan16(ab) {
        return b;
    }
    let (x, y) = (a.to_f32(), b.to_f32());
    let pick_a = if max {
        x > y || (x == 0.0 && y == 0.0 && !x.is_sign_negative() && y.is_sign_negative())
    } else {
        x < y || (x == 0.0 && y == 0.0 && x.is_sign_negative() && !y.is_sign_negative())
    };
    if pick_a { a } else { b }
}

fn fmed3_32(a: f32, b: f32, c: f32, ieee: bool) -> f32 {
    if a.is_nan() || b.is_nan() || c.is_nan() {
        return fminmax32(fminmax32(a, b, ieee, false), c, ieee, false);
    }
    let mx = fminmax32(fminmax32(a, b, ieee, true), c, ieee, true);
    if mx.to_bits() == a.to_bits() {
        fminmax32(b, c, ieee, true)
    } else if mx.to_bits() == b.to_bits() {
        fminmax32(a, c, ieee, true)
    } else {
        fminmax32(a, b, ieee, true)
    }
}

/// `x * 2^n`, one rounding.
pub fn ldexp32(x: f32, n: i32) -> f32 {
    if x.is_nan() {
        return nan32(x, &[x]);
    }
    let n = n.clamp(-400, 400);
    // Two exact f64 scalings (|n| <= 400 splits into steps of at most 200), then one rounding.
    let mut y = x as f64;
    let (a, b) = (n / 2, n - n / 2);
    y *= 2f64.powi(a);
    y *= 2f64.powi(b);
    y as f32
}

fn biased_exp32(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xff) as i32
}

fn is_denorm32(x: f32) -> bool {
    x.to_bits() & 0x7f80_0000 == 0 && x.to_bits() & 0x007f_ffff != 0
}

/// v_div_scale_f32 per the ISA pseudocode. Returns (D0, VCC bit).
pub fn div_scale32(s0: f32, s1: f32, s2: f32) -> (f32, bool) {
    let mut vcc = false;
    // D0 keeps S0 where the pseudocode assigns nothing.
    let mut d = s0;
    let q = s2 / s1;
    if s2 == 0.0 || s1 == 0.0 {
        d = f32::from_bits(0x7fc0_0000);
    } else if biased_exp32(s2) - biased_exp32(s1) >= 96 {
        vcc = true;
        if s0 == s1 {
            d = ldexp32(s0, 64);
        }
    } else if is_denorm32(s1) {
        d = ldexp32(s0, 64);
    } else if is_denorm32(q) {
        // (1.0 / f64(S1) is never an f64 denormal for an f32 S1, so the two
        // pseudocode branches that test it are unreachable and omitted.)
        vcc = true;
        if s0 == s2 {
            d = ldexp32(s0, 64);
        }
    } else if biased_exp32(s2) <= 23 {
        d = ldexp32(s0, 64);
    }
    (d, vcc)
}

/// v_div_fixup_f32 per the ISA pseudocode (UNDERFLOW_F32 taken as 0 and
/// OVERFLOW_F32 as infinity, with the sign of the quotient).
pub fn div_fixup32(s0: f32, s1: f32, s2: f32) -> f32 {
    let neg = s1.is_sign_negative() ^ s2.is_sign_negative();
    let signed = |x: f32| if neg { -x } else { x };
    if s2.is_nan() {
        f32::from_bits(s2.to_bits() | 0x0040_0000)
    } else if s1.is_nan() {
        f32::from_bits(s1.to_bits() | 0x0040_0000)
    } else if s1 == 0.0 && s2 == 0.0 {
        f32::from_bits(0xffc0_0000)
    } else if s1.is_infinite() && s2.is_infinite() {
        f32::from_bits(0xffc0_0000)
    } else if s1 == 0.0 || s2.is_infinite() {
        signed(f32::INFINITY)
    } else if s1.is_infinite() || s2 == 0.0 {
        signed(0.0)
    } else if biased_exp32(s2) - biased_exp32(s1) < -150 {
        signed(0.0)
    } else if biased_exp32(s1) == 255 {
        signed(f32::INFINITY)
    } else {
        signed(s0.abs())
    }
}

/// v_cmp_class_f32: the class bit of `x` in `mask`.
fn class32(x: f32, mask: u32) -> bool {
    let b = x.to_bits();
    let bit = if is_snan32(b) {
        0
    } else if is_nan32(b) {
        1
    } else if x.is_infinite() {
        if x < 0.0 { 2 } else { 9 }
    } else if biased_exp32(x) > 0 {
        if x < 0.0 { 3 } else { 8 }
    } else if b & 0x7fff_ffff != 0 {
        if x.is_sign_negative() { 4 } else { 7 }
    } else if x.is_sign_negative() {
        5
    } else {
        6
    };
    mask >> bit & 1 != 0
}

fn class16(x: f16, mask: u32) -> bool {
    let b = x.to_bits();
    let neg = b & 0x8000 != 0;
    let bit = if is_snan16(b) {
        0
    } else if is_nan16(b) {
        1
    } else if b & 0x7fff == 0x7c00 {
        if neg { 2 } else { 9 }
    } else if b & 0x7c00 != 0 {
        if neg { 3 } else { 8 }
    } else if b & 0x03ff != 0 {
        if neg { 4 } else { 7 }
    } else if neg {
        5
    } else {
        6
    };
    mask >> bit & 1 != 0
}

/// Moves a finite non-zero result one ulp up or down (perturbation mode).
fn perturb32(r: f32, input: u32, seed: u32) -> f32 {
    if !r.is_finite() || r == 0.0 {
        return r;
    }
    let mut h = input ^ seed.wrapping_mul(0x9e37_79b9);
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    let b = r.to_bits();
    let away = h & 1 != 0;
    let nb = if away { b + 1 } else { b - 1 };
    let n = f32::from_bits(nb);
    // Never cross into infinity or through zero.
    if n.is_finite() && (n.to_bits() & 0x7fff_ffff) != 0 { n } else { r }
}

/// The approximate (transcendental) f32 instructions, correctly rounded:
/// evaluated in f64 (or exactly in f32 for rcp and sqrt) and rounded once to f32.
fn trans32(name: &str, x: f32) -> Option<f32> {
    let r = match name {
        "v_rcp_f32" | "v_rcp_iflag_f32" => 1.0 / x,
        "v_sqrt_f32" => x.sqrt(),
        "v_rsq_f32" => (1.0 / (x as f64).sqrt()) as f32,
        "v_exp_f32" => (x as f64).exp2() as f32,
        "v_log_f32" => {
            if x == 0.0 {
                f32::NEG_INFINITY
            } else {
                (x as f64).log2() as f32
            }
        }
        _ => return None,
    };
    Some(nan32(r, &[x]))
}

fn is_trans(name: &str) -> bool {
    matches!(name, "v_rcp_f32" | "v_rcp_iflag_f32" | "v_sqrt_f32" | "v_rsq_f32" | "v_exp_f32" | "v_log_f32")
}

fn clamp01(x: f32) -> f32 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

// ---------------------------------------------------------------- VALU operands

/// The operand fields of a VALU instruction, whatever its encoding.
#[derive(Clone, Copy, Debug, Default)]
struct V {
    vdst: u32,
    src: [u32; 3],
    abs: u32,
    neg: u32,
    neg_hi: u32,
    opsel: u32,
    opsel_hi: u32,
    clamp: bool,
    omod: u32,
    sdst: u32,
    lit: Option<u32>,
    dpp16: Option<u32>,
}

/// Whether a VOP1/VOP2/VOPC instruction's sources and destination are 16-bit
/// ("true16": bit 7 of a VGPR field selects the high half).
fn t16(name: &str) -> (bool, bool) {
    match name {
        "v_cvt_f32_f16" | "v_cvt_i32_i16" | "v_cvt_u32_u16" => (true, false),
        "v_cvt_f16_f32" => (false, true),
        _ if name.starts_with("v_pk_") => (false, false),
        _ if ["_f16", "_b16", "_i16", "_u16"].iter().any(|s| name.contains(s)) => (true, true),
        _ => (false, false),
    }
}

fn vfields(inst: &Inst) -> V {
    let (w0, w1) = (inst.w0, inst.w1);
    let mut f = V { lit: inst.lit, dpp16: inst.dpp16, ..V::default() };
    match inst.enc {
        Enc::Vop1 | Enc::Vop2 | Enc::Vopc => {
            f.src[0] = bits(w0, 8, 0);
            if inst.enc != Enc::Vop1 {
                f.src[1] = 256 + bits(w0, 16, 9);
            }
            if inst.enc == Enc::Vopc {
                f.sdst = VCC;
            } else {
                f.vdst = bits(w0, 24, 17);
            }
            if let Some(d) = inst.dpp16 {
                f.src[0] = 256 + bits(d, 7, 0);
                f.neg = bits(d, 20, 20) | bits(d, 22, 22) << 1;
                f.abs = bits(d, 21, 21) | bits(d, 23, 23) << 1;
            }
            let (s16, d16) = t16(inst.name);
            if s16 {
                for i in 0..2 {
                    if f.src[i] >= 256 && (f.src[i] - 256) & 0x80 != 0 {
                        f.src[i] -= 0x80;
                        f.opsel |= 1 << i;
                    }
                }
            }
            if d16 && inst.enc != Enc::Vopc && f.vdst & 0x80 != 0 {
                f.vdst &= 0x7f;
                f.opsel |= 8;
            }
        }
        Enc::Vop3 | Enc::Vop3sd | Enc::Vop3p => {
            f.vdst = bits(w0, 7, 0);
            f.clamp = bits(w0, 15, 15) != 0;
            f.src = [bits(w1, 8, 0), bits(w1, 17, 9), bits(w1, 26, 18)];
            f.neg = bits(w1, 31, 29);
            match inst.enc {
                Enc::Vop3 => {
                    f.abs = bits(w0, 10, 8);
                    f.opsel = bits(w0, 14, 11);
                    f.omod = bits(w1, 28, 27);
                    if inst.op < 256 {
                        f.sdst = f.vdst;
                    }
                }
                Enc::Vop3sd => {
                    f.sdst = bits(w0, 14, 8);
                    f.omod = bits(w1, 28, 27);
                }
                _ => {
                    f.neg_hi = bits(w0, 10, 8);
                    f.opsel = bits(w0, 13, 11);
                    f.opsel_hi = bits(w1, 28, 27) | bits(w0, 14, 14) << 2;
                }
            }
            if let Some(d) = inst.dpp16 {
                f.src[0] = 256 + bits(d, 7, 0);
            }
        }
        _ => {}
    }
    f
}

/// Per-lane inputs of a lane function.
struct L<'a> {
    r: [u64; 3],
    f: &'a V,
    ieee: bool,
    /// The lane's bit of the mask operand (VCC or the SGPR source of cndmask / carry-in).
    m: bool,
    /// The destination's old value (fmac).
    d: u32,
}

impl L<'_> {
    fn u(&self, i: usize) -> u32 {
        self.r[i] as u32
    }
    fn i(&self, i: usize) -> i32 {
        self.r[i] as u32 as i32
    }
    fn q(&self, i: usize) -> u64 {
        self.r[i]
    }
    /// f32 operand with abs / neg.
    fn f(&self, i: usize) -> f32 {
        let mut b = self.r[i] as u32;
        if self.f.abs >> i & 1 != 0 {
            b &= 0x7fff_ffff;
        }
        if self.f.neg >> i & 1 != 0 {
            b ^= 0x8000_0000;
        }
        f32::from_bits(b)
    }
    /// 16-bit operand: the half that opsel selects.
    fn u16(&self, i: usize) -> u16 {
        let x = self.r[i] as u32;
        (if self.f.opsel >> i & 1 != 0 { x >> 16 } else { x }) as u16
    }
    /// f16 operand with abs / neg.
    fn h(&self, i: usize) -> f16 {
        let mut b = self.u16(i);
        if self.f.abs >> i & 1 != 0 {
            b &= 0x7fff;
        }
        if self.f.neg >> i & 1 != 0 {
            b ^= 0x8000;
        }
        f16::from_bits(b)
    }
}

type LaneFn = fn(&L) -> (u64, bool);

fn fr(x: f32) -> (u64, bool) {
    (x.to_bits() as u64, false)
}
fn ur(x: u32) -> (u64, bool) {
    (x as u64, false)
}
fn hr(x: f16) -> (u64, bool) {
    (x.to_bits() as u64, false)
}

fn f_add(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(a + b, &[a, b]))
}
fn f_sub(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(a - b, &[a, b]))
}
fn f_subrev(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(b - a, &[a, b]))
}
fn f_mul(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(a * b, &[a, b]))
}
fn fma3(a: f32, b: f32, c: f32) -> f32 {
    nan32(a.mul_add(b, c), &[a, b, c])
}

/// The lane function of a per-lane VALU operation, or None.
fn lane_fn(name: &str) -> Option<(LaneFn, [K; 3])> {
    use K::*;
    let b = [B32, B32, B32];
    let h = [F16, F16, F16];
    let f: LaneFn = match name {
        "v_mov_b32" => |l| ur(l.u(0)),
        "v_add_f32" => f_add,
        "v_sub_f32" => f_sub,
        "v_subrev_f32" => f_subrev,
        "v_mul_f32" => f_mul,
        "v_fma_f32" => |l| fr(fma3(l.f(0), l.f(1), l.f(2))),
        "v_fmac_f32" => |l| {
            let c = f32::from_bits(l.d);
            fr(fma3(l.f(0), l.f(1), c))
        },
        "v_fmamk_f32" => |l| fr(fma3(l.f(0), f32::from_bits(l.f.lit.unwrap()), l.f(1))),
        "v_fmaak_f32" => |l| fr(fma3(l.f(0), l.f(1), f32::from_bits(l.f.lit.unwrap()))),
        "v_min_f32" => |l| fr(fminmax32(l.f(0), l.f(1), l.ieee, false)),
        "v_max_f32" => |l| fr(fminmax32(l.f(0), l.f(1), l.ieee, true)),
        "v_min3_f32" => |l| fr(fminmax32(fminmax32(l.f(0), l.f(1), l.ieee, false), l.f(2), l.ieee, false)),
        "v_max3_f32" => |l| fr(fminmax32(fminmax32(l.f(0), l.f(1), l.ieee, true), l.f(2), l.ieee, true)),
        "v_med3_f32" => |l| fr(fmed3_32(l.f(0), l.f(1), l.f(2), l.ieee)),
        "v_ldexp_f32" => |l| fr(ldexp32(l.f(0), l.i(1))),
        "v_div_fmas_f32" => |l| {
            let r = fma3(l.f(0), l.f(1), l.f(2));
            fr(if l.m { r * 4294967296.0 } else { r })
        },
        "v_div_fixup_f32" => |l| fr(div_fixup32(l.f(0), l.f(1), l.f(2))),
        "v_div_scale_f32" => |l| {
            let (d, v) = div_scale32(l.f(0), l.f(1), l.f(2));
            (d.to_bits() as u64, v)
        },
        "v_rndne_f32" => |l| fr(nan32(l.f(0).round_ties_even(), &[l.f(0)])),
        "v_floor_f32" => |l| fr(nan32(l.f(0).floor(), &[l.f(0)])),
        "v_ceil_f32" => |l| fr(nan32(l.f(0).ceil(), &[l.f(0)])),
        "v_trunc_f32" => |l| fr(nan32(l.f(0).trunc(), &[l.f(0)])),
        "v_cvt_f32_u32" => |l| fr(l.u(0) as f32),
        "v_cvt_f32_i32" => |l| fr(l.i(0) as f32),
        // f32_to_i32 / f32_to_u32: saturating, NaN to 0 (Rust's `as` is exactly that).
        "v_cvt_i32_f32" => |l| ur(l.f(0) as i32 as u32),
        "v_cvt_u32_f32" => |l| ur(l.f(0) as u32),
        "v_cvt_f32_ubyte0" => |l| fr((l.u(0) & 0xff) as f32),
        "v_cvt_f32_ubyte1" => |l| fr((l.u(0) >> 8 & 0xff) as f32),
        "v_cvt_f32_ubyte2" => |l| fr((l.u(0) >> 16 & 0xff) as f32),
        "v_cvt_f32_ubyte3" => |l| fr((l.u(0) >> 24) as f32),
        "v_cvt_f32_f16" => |l| fr(l.h(0).to_f32()),
        "v_cvt_f16_f32" => |l| (cvt_f16(l.f(0)) as u64, false),
        "v_cndmask_b32" => |l| ur(if l.m { l.u(1) } else { l.u(0) }),
        "v_cndmask_b16" => |l| (if l.m { l.u16(1) } else { l.u16(0) } as u64, false),
        "v_mov_b16" => |l| (l.u16(0) as u64, false),
        "v_add_f16" => |l| hr(h_op(l.h(0), l.h(1), |a, b| a + b)),
        "v_sub_f16" => |l| hr(h_op(l.h(0), l.h(1), |a, b| a - b)),
        "v_subrev_f16" => |l| hr(h_op(l.h(1), l.h(0), |a, b| a - b)),
        "v_mul_f16" => |l| hr(h_op(l.h(0), l.h(1), |a, b| a * b)),
        "v_max_f16" => |l| hr(fminmax16(l.h(0), l.h(1), l.ieee, true)),
        "v_min_f16" => |l| hr(fminmax16(l.h(0), l.h(1), l.ieee, false)),
        "v_add_nc_u32" => |l| ur(l.u(0).wrapping_add(l.u(1))),
        "v_sub_nc_u32" => |l| ur(l.u(0).wrapping_sub(l.u(1))),
        "v_subrev_nc_u32" => |l| ur(l.u(1).wrapping_sub(l.u(0))),
        "v_and_b32" => |l| ur(l.u(0) & l.u(1)),
        "v_or_b32" => |l| ur(l.u(0) | l.u(1)),
        "v_xor_b32" => |l| ur(l.u(0) ^ l.u(1)),
        "v_xnor_b32" => |l| ur(!(l.u(0) ^ l.u(1))),
        "v_not_b32" => |l| ur(!l.u(0)),
        "v_lshlrev_b32" => |l| ur(l.u(1) << (l.u(0) & 31)),
        "v_lshrrev_b32" => |l| ur(l.u(1) >> (l.u(0) & 31)),
        "v_ashrrev_i32" => |l| ur((l.i(1) >> (l.u(0) & 31)) as u32),
        "v_min_u32" => |l| ur(l.u(0).min(l.u(1))),
        "v_max_u32" => |l| ur(l.u(0).max(l.u(1))),
        "v_min_i32" => |l| ur(l.i(0).min(l.i(1)) as u32),
        "v_max_i32" => |l| ur(l.i(0).max(l.i(1)) as u32),
        "v_mul_u32_u24" => |l| ur((l.u(0) & 0xff_ffff).wrapping_mul(l.u(1) & 0xff_ffff)),
        "v_mul_i32_i24" => |l| ur((((l.u(0) << 8) as i32 >> 8).wrapping_mul((l.u(1) << 8) as i32 >> 8)) as u32),
        "v_mad_u32_u24" => |l| ur((l.u(0) & 0xff_ffff).wrapping_mul(l.u(1) & 0xff_ffff).wrapping_add(l.u(2))),
        "v_mul_lo_u32" => |l| ur(l.u(0).wrapping_mul(l.u(1))),
        "v_mul_hi_u32" => |l| ur(((l.u(0) as u64 * l.u(1) as u64) >> 32) as u32),
        "v_add3_u32" => |l| ur(l.u(0).wrapping_add(l.u(1)).wrapping_add(l.u(2))),
        "v_lshl_add_u32" => |l| ur((l.u(0) << (l.u(1) & 31)).wrapping_add(l.u(2))),
        "v_add_lshl_u32" => |l| ur(l.u(0).wrapping_add(l.u(1)) << (l.u(2) & 31)),
        "v_lshl_or_b32" => |l| ur((l.u(0) << (l.u(1) & 31)) | l.u(2)),
        "v_and_or_b32" => |l| ur((l.u(0) & l.u(1)) | l.u(2)),
        "v_or3_b32" => |l| ur(l.u(0) | l.u(1) | l.u(2)),
        "v_xor3_b32" => |l| ur(l.u(0) ^ l.u(1) ^ l.u(2)),
        "v_bfe_u32" => |l| {
            let w = l.u(2) & 31;
            ur((l.u(0) >> (l.u(1) & 31)) & ((1u32 << w).wrapping_sub(1)))
        },
        "v_bfe_i32" => |l| {
            let w = l.u(2) & 31;
            if w == 0 {
                return ur(0);
            }
            let x = l.u(0) >> (l.u(1) & 31);
            ur((((x << (32 - w)) as i32) >> (32 - w)) as u32)
        },
        "v_bfi_b32" => |l| ur((l.u(0) & l.u(1)) | (!l.u(0) & l.u(2))),
        "v_med3_u32" => |l| {
            let (a, b, c) = (l.u(0), l.u(1), l.u(2));
            ur(a.max(b).min(a.min(b).max(c)))
        },
        "v_med3_i32" => |l| {
            let (a, b, c) = (l.i(0), l.i(1), l.i(2));
            ur(a.max(b).min(a.min(b).max(c)) as u32)
        },
        "v_min3_u32" => |l| ur(l.u(0).min(l.u(1)).min(l.u(2))),
        "v_max3_u32" => |l| ur(l.u(0).max(l.u(1)).max(l.u(2))),
        "v_ctz_i32_b32" => |l| ur(if l.u(0) == 0 { u32::MAX } else { l.u(0).trailing_zeros() }),
        "v_clz_i32_u32" => |l| ur(if l.u(0) == 0 { u32::MAX } else { l.u(0).leading_zeros() }),
        "v_bfrev_b32" => |l| ur(l.u(0).reverse_bits()),
        "v_add_co_u32" => |l| {
            let t = l.u(0) as u64 + l.u(1) as u64;
            (t & 0xffff_ffff, t >> 32 != 0)
        },
        "v_sub_co_u32" => |l| (l.u(0).wrapping_sub(l.u(1)) as u64, l.u(1) > l.u(0)),
        "v_subrev_co_u32" => |l| (l.u(1).wrapping_sub(l.u(0)) as u64, l.u(0) > l.u(1)),
        "v_add_co_ci_u32" => |l| {
            let t = l.u(0) as u64 + l.u(1) as u64 + l.m as u64;
            (t & 0xffff_ffff, t >> 32 != 0)
        },
        "v_sub_co_ci_u32" => |l| {
            let t = l.u(0).wrapping_sub(l.u(1)).wrapping_sub(l.m as u32);
            (t as u64, l.u(1) as u64 + l.m as u64 > l.u(0) as u64)
        },
        "v_subrev_co_ci_u32" => |l| {
            let t = l.u(1).wrapping_sub(l.u(0)).wrapping_sub(l.m as u32);
            (t as u64, l.u(0) as u64 + l.m as u64 > l.u(1) as u64)
        },
        _ => return wide_fn(name),
    };
    // 16-bit operands take the f16 forms of the inline float constants.
    let sixteen = ["f16", "b16", "i16", "u16"].iter().any(|t| name.contains(t));
    let k = if sixteen && !name.starts_with("v_cvt_f16_f32") { h } else { b };
    Some((f, k))
}

/// Lane functions with 64-bit operands.
fn wide_fn(name: &str) -> Option<(LaneFn, [K; 3])> {
    use K::*;
    Some(match name {
        "v_lshlrev_b64" => ((|l: &L| (l.q(1) << (l.u(0) & 63), false)) as LaneFn, [B32, B64, B32]),
        "v_lshrrev_b64" => ((|l: &L| (l.q(1) >> (l.u(0) & 63), false)) as LaneFn, [B32, B64, B32]),
        "v_ashrrev_i64" => ((|l: &L| (((l.q(1) as i64) >> (l.u(0) & 63)) as u64, false)) as LaneFn, [B32, B64, B32]),
        "v_mad_u64_u32" => (
            (|l: &L| {
                let t = l.u(0) as u128 * l.u(1) as u128 + l.q(2) as u128;
                (t as u64, t >> 64 != 0)
            }) as LaneFn,
            [B32, B32, B64],
        ),
        "v_mad_i64_i32" => (
            (|l: &L| {
                let t = l.i(0) as i128 * l.i(1) as i128 + l.q(2) as i64 as i128;
                (t as u64, (t >> 64) != 0 && (t >> 64) != -1)
            }) as LaneFn,
            [B32, B32, B64],
        ),
        _ => return None,
    })
}

/// f32 -> f16, round to nearest even; a NaN stays a quiet NaN with the top of its payload.
pub fn cvt_f16(x: f32) -> u16 {
    if x.is_nan() {
        let b = x.to_bits();
        ((b >> 16) & 0x8000) as u16 | 0x7e00 | ((b >> 13) & 0x1ff) as u16
    } else {
        f16::from_f32(x).to_bits()
    }
}

/// A comparison's condition.
#[derive(Clone, Copy)]
enum Cond {
    F,
    Lt,
    Eq,
    Le,
    Gt,
    Lg,
    Ge,
    O,
    U,
    Nge,
    Nlg,
    Ngt,
    Nle,
    Neq,
    Nlt,
    T,
    Ne,
    Class,
}

fn parse_cmp(name: &str) -> Option<(bool, Cond, &str)> {
    let (x, rest) =
        if let Some(r) = name.strip_prefix("v_cmpx_") { (true, r) } else { (false, name.strip_prefix("v_cmp_")?) };
    let (c, ty) = rest.split_once('_')?;
    let c = match c {
        "f" => Cond::F,
        "lt" => Cond::Lt,
        "eq" => Cond::Eq,
        "le" => Cond::Le,
        "gt" => Cond::Gt,
        "lg" => Cond::Lg,
        "ge" => Cond::Ge,
        "o" => Cond::O,
        "u" => Cond::U,
        "nge" => Cond::Nge,
        "nlg" => Cond::Nlg,
        "ngt" => Cond::Ngt,
        "nle" => Cond::Nle,
        "neq" => Cond::Neq,
        "nlt" => Cond::Nlt,
        "t" => Cond::T,
        "ne" => Cond::Ne,
        "class" => Cond::Class,
        _ => return None,
    };
    Some((x, c, ty))
}

fn fcmp(c: Cond, a: f64, b: f64) -> Option<bool> {
    Some(match c {
        Cond::F => false,
        Cond::Lt => a < b,
        Cond::Eq => a == b,
        Cond::Le => a <= b,
        Cond::Gt => a > b,
        Cond::Lg => a < b || a > b,
        Cond::Ge => a >= b,
        Cond::O => !a.is_nan() && !b.is_nan(),
        Cond::U => a.is_nan() || b.is_nan(),
        Cond::Nge => !(a >= b),
        Cond::Nlg => !(a < b || a > b),
        Cond::Ngt => !(a > b),
        Cond::Nle => !(a <= b),
        Cond::Neq => a != b,
        Cond::Nlt => !(a < b),
        Cond::T => true,
        Cond::Ne | Cond::Class => return None,
    })
}

fn icmp<T: Ord>(c: Cond, a: T, b: T) -> Option<bool> {
    Some(match c {
        Cond::F => false,
        Cond::Lt => a < b,
        Cond::Eq => a == b,
        Cond::Le => a <= b,
        Cond::Gt => a > b,
        Cond::Ne => a != b,
        Cond::Ge => a >= b,
        Cond::T => true,
        _ => return None,
    })
}

/// The result of a VALU instruction before it is written (VOPD computes both halves first).
struct Pending {
    kind: Dst,
    vals: [u64; 32],
    bits: u32,
    write: u32,
}

#[derive(Clone, Copy, Debug)]
enum Dst {
    V32(u32),
    V64(u32),
    V16 {
        reg: u32,
        hi: bool,
    },
    /// A lane mask into an SGPR (VOPC); inactive lanes 0.
    Mask(u32),
    /// A lane mask into EXEC (v_cmpx).
    Exec,
    /// A VGPR and a carry / VCC lane mask.
    V32Mask(u32, u32),
    V64Mask(u32, u32),
}

impl Wave {
    fn commit(&mut self, p: &Pending) -> R<()> {
        let lanes = (0..32).filter(|l| p.write >> l & 1 != 0);
        match p.kind {
            Dst::V32(r) => lanes.for_each(|l| self.v[r as usize][l] = p.vals[l] as u32),
            Dst::V64(r) | Dst::V64Mask(r, _) => {
                if r >= 255 {
                    return Err(Fault::new("64-bit VGPR destination past v255"));
                }
                for l in lanes {
                    self.v[r as usize][l] = p.vals[l] as u32;
                    self.v[r as usize + 1][l] = (p.vals[l] >> 32) as u32;
                }
            }
            Dst::V16 { reg, hi } => {
                for l in lanes {
                    let old = self.v[reg as usize][l];
                    let x = p.vals[l] as u32 & 0xffff;
                    self.v[reg as usize][l] = if hi { (old & 0xffff) | x << 16 } else { (old & 0xffff_0000) | x };
                }
            }
            Dst::Mask(s) => self.swrite(s, p.bits)?,
            Dst::Exec => self.s[EXEC as usize] = p.bits,
            Dst::V32Mask(r, _) => lanes.for_each(|l| self.v[r as usize][l] = p.vals[l] as u32),
        }
        if let Dst::V32Mask(_, s) | Dst::V64Mask(_, s) = p.kind {
            self.swrite(s, p.bits)?;
        }
        Ok(())
    }

    /// The source-0 values after DPP16 and the lanes DPP lets write.
    fn dpp16_src0(&self, f: &V, exec: u32) -> R<([u32; 32], u32)> {
        let d = f.dpp16.unwrap();
        let reg = bits(d, 7, 0) as usize;
        let ctrl = bits(d, 16, 8);
        let fi = bits(d, 18, 18) != 0;
        let bound_ctrl = bits(d, 19, 19) != 0;
        let bank_mask = bits(d, 27, 24);
        let row_mask = bits(d, 31, 28);
        let mut vals = [0u32; 32];
        let mut write = 0u32;
        for lane in 0..32usize {
            let row = lane / 16;
            let i = lane % 16;
            if row_mask >> row & 1 == 0 || bank_mask >> (i / 4) & 1 == 0 {
                continue;
            }
            let base = row * 16;
            let src: Option<usize> = match ctrl {
                0x000..=0x0ff => Some(base + (i & !3) + ((ctrl >> (2 * (i % 4))) & 3) as usize),
                0x101..=0x10f => {
                    let s = i + (ctrl & 0xf) as usize;
                    (s < 16).then_some(base + s)
                }
                0x111..=0x11f => (ctrl as usize & 0xf <= i).then(|| base + i - (ctrl as usize & 0xf)),
                0x121..=0x12f => Some(base + (i + 16 - (ctrl as usize & 0xf)) % 16),
                0x140 => Some(base + 15 - i),
                0x141 => Some(base + (i & 8) + 7 - (i & 7)),
                0x150..=0x15f => Some(base + (ctrl as usize & 0xf)),
                0x160..=0x16f => Some(base + (i ^ (ctrl as usize & 0xf))),
                _ => return Err(Fault::new(format!("DPP control {ctrl:#x} is reserved"))),
            };
            // A source lane that is out of the row or inactive (with FI clear) is
            // invalid: BOUND_CTRL then supplies 0, or else the lane is not written.
            let valid = src.filter(|&s| fi || exec >> s & 1 != 0);
            match valid {
                Some(s) => vals[lane] = self.v[reg][s],
                None if bound_ctrl => vals[lane] = 0,
                None => continue,
            }
            write |= 1 << lane;
        }
        Ok((vals, write))
    }

    /// A VALU instruction (VOP1/VOP2/VOPC/VOP3/VOP3SD/VOP3P), computed but not written.
    fn valu(&self, inst: &Inst, name: &str, f: &V, mode: Mode) -> R<Pending> {
        let exec = self.exec();
        if f.omod != 0 {
            return Err(Fault::new("output modifier (omod) is not implemented"));
        }
        let is_cmp = matches!(inst.enc, Enc::Vopc) || (inst.enc == Enc::Vop3 && inst.op < 256);
        if is_cmp {
            return self.vcmp(name, f, exec).map(|(x, bits)| Pending {
                kind: if x { Dst::Exec } else { Dst::Mask(f.sdst) },
                vals: [0; 32],
                bits,
                write: 0,
            });
        }
        if inst.enc == Enc::Vop3p {
            return self.vop3p(name, f, exec);
        }
        if let Some(p) = self.cross_lane(name, f, exec)? {
            return Ok(p);
        }
        let d16 = t16(name).1;
        let (func, kinds) = if is_trans(name) {
            // Evaluated by trans32 below; this lane function is never called.
            (f_add as LaneFn, [K::B32; 3])
        } else {
            lane_fn(name).ok_or_else(|| Fault::new(format!("{} is not implemented", inst.mnemonic())))?
        };
        if f.clamp && !name.ends_with("_f32") {
            return Err(Fault::new("clamp on a non-f32 operation is not implemented"));
        }
        let carry = matches!(
            name,
            "v_add_co_u32"
                | "v_sub_co_u32"
                | "v_subrev_co_u32"
                | "v_add_co_ci_u32"
                | "v_sub_co_ci_u32"
                | "v_subrev_co_ci_u32"
                | "v_div_scale_f32"
                | "v_mad_u64_u32"
                | "v_mad_i64_i32"
        );
        let kind = if name == "v_mad_u64_u32" || name == "v_mad_i64_i32" {
            Dst::V64Mask(f.vdst, f.sdst)
        } else if name.ends_with("_b64") || name.ends_with("_i64") {
            Dst::V64(f.vdst)
        } else if carry {
            Dst::V32Mask(f.vdst, if inst.enc == Enc::Vop2 { VCC } else { f.sdst })
        } else if d16 {
            Dst::V16 { reg: f.vdst, hi: f.opsel >> 3 & 1 != 0 }
        } else {
            Dst::V32(f.vdst)
        };
        // The mask operand: VCC for the VOP2 forms and div_fmas, else the SGPR in src2.
        let mask = match name {
            "v_cndmask_b32" | "v_cndmask_b16" | "v_add_co_ci_u32" | "v_sub_co_ci_u32" | "v_subrev_co_ci_u32" => {
                if inst.enc == Enc::Vop2 || inst.enc == Enc::Vopd {
                    self.s[VCC as usize]
                } else {
                    self.sread32(f.src[2], f.lit)?
                }
            }
            "v_div_fmas_f32" => self.s[VCC as usize],
            _ => 0,
        };
        let (dpp_vals, dpp_write) = if f.dpp16.is_some() { self.dpp16_src0(f, exec)? } else { ([0; 32], u32::MAX) };
        let write = exec & dpp_write;
        let mut p = Pending { kind, vals: [0; 32], bits: 0, write };
        let nsrc = match inst.enc {
            Enc::Vop1 => 1,
            Enc::Vop2 | Enc::Vopd => 2,
            _ => 3,
        };
        for lane in 0..32 {
            if write >> lane & 1 == 0 {
                continue;
            }
            let mut r = [0u64; 3];
            for i in 0..nsrc {
                r[i] = if i == 0 && f.dpp16.is_some() {
                    dpp_vals[lane] as u64
                } else {
                    self.vread(f.src[i], lane, f.lit, kinds[i]).map_err(|e| Fault { lane: Some(lane), ..e })?
                };
            }
            let l = L { r, f, ieee: mode.ieee, m: mask >> lane & 1 != 0, d: self.v[f.vdst as usize][lane] };
            let (mut val, bit) = if is_trans(name) {
                let x = l.f(0);
                let mut y = trans32(name, x).unwrap();
                if let Some(seed) = mode.perturb {
                    y = perturb32(y, x.to_bits(), seed);
                }
                (y.to_bits() as u64, false)
            } else {
                func(&l)
            };
            if f.clamp {
                val = clamp01(f32::from_bits(val as u32)).to_bits() as u64;
            }
            p.vals[lane] = val;
            if bit {
                p.bits |= 1 << lane;
            }
        }
        Ok(p)
    }

    /// VOPC and its VOP3 form: returns (writes EXEC, lane bits).
    fn vcmp(&self, name: &str, f: &V, exec: u32) -> R<(bool, u32)> {
        let (x, c, ty) = parse_cmp(name).ok_or_else(|| Fault::new(format!("{name} is not implemented")))?;
        let mut out = 0u32;
        for lane in 0..32 {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let k = match ty {
                "f16" | "i16" | "u16" => K::F16,
                "f64" | "i64" | "u64" => K::B64,
                _ => K::B32,
            };
            let k1 = if matches!(c, Cond::Class) { K::B32 } else { k };
            let a = self.vread(f.src[0], lane, f.lit, k)?;
            let b = self.vread(f.src[1], lane, f.lit, k1)?;
            let l = L { r: [a, b, 0], f, ieee: false, m: false, d: 0 };
            let res = match (ty, c) {
                ("f32", Cond::Class) => Some(class32(l.f(0), l.u(1))),
                ("f16", Cond::Class) => Some(class16(l.h(0), l.u(1))),
                ("f32", _) => fcmp(c, l.f(0) as f64, l.f(1) as f64),
                ("f16", _) => fcmp(c, l.h(0).to_f64(), l.h(1).to_f64()),
                ("f64", _) => {
                    let fa = f64::from_bits(a ^ ((f.neg as u64 & 1) << 63)) * 1.0;
                    let fb = f64::from_bits(b ^ ((f.neg as u64 >> 1 & 1) << 63));
                    if f.abs != 0 {
                        return Err(Fault::new("abs on f64 compares is not implemented"));
                    }
                    fcmp(c, fa, fb)
                }
                ("i32", _) => icmp(c, l.i(0), l.i(1)),
                ("u32", _) => icmp(c, l.u(0), l.u(1)),
                ("i16", _) => icmp(c, l.u16(0) as i16, l.u16(1) as i16),
                ("u16", _) => icmp(c, l.u16(0), l.u16(1)),
                ("i64", _) => icmp(c, a as i64, b as i64),
                ("u64", _) => icmp(c, a, b),
                _ => None,
            };
            let res = res.ok_or_else(|| Fault::new(format!("{name} is not implemented")))?;
            if res {
                out |= 1 << lane;
            }
        }
        Ok((x, out))
    }

    /// v_readlane_b32, v_readfirstlane_b32, v_permlanex16_b32.
    fn cross_lane(&self, name: &str, f: &V, exec: u32) -> R<Option<Pending>> {
        match name {
            "v_readlane_b32" | "v_readfirstlane_b32" => {
                let lane = if name == "v_readlane_b32" {
                    (self.sread32(f.src[1], f.lit)? & 31) as usize
                } else if exec == 0 {
                    0
                } else {
                    exec.trailing_zeros() as usize
                };
                if f.src[0] < 256 {
                    return Err(Fault::new(format!("{name} of a non-VGPR source")));
                }
                let x = self.v[(f.src[0] - 256) as usize][lane];
                // The destination is an SGPR: a lane mask whose "bits" are the value.
                Ok(Some(Pending { kind: Dst::Mask(f.vdst), vals: [0; 32], bits: x, write: 0 }))
            }
            "v_permlanex16_b32" => {
                // OPSEL[0] = FI, OPSEL[1] = BOUND_CTRL; the ISA pseudocode reads every
                // source lane regardless of EXEC and writes the active lanes.
                if f.opsel & 3 != 0 {
                    return Err(Fault::new("v_permlanex16_b32 with FI / BOUND_CTRL set is not implemented"));
                }
                if f.src[0] < 256 {
                    return Err(Fault::new("v_permlanex16_b32 of a non-VGPR source"));
                }
                let sel = self.sread32(f.src[1], f.lit)? as u64 | (self.sread32(f.src[2], f.lit)? as u64) << 32;
                let tmp = self.v[(f.src[0] - 256) as usize];
                let mut p = Pending { kind: Dst::V32(f.vdst), vals: [0; 32], bits: 0, write: exec };
                for row in 0..2usize {
                    let alt = 1 - row;
                    for i in 0..16usize {
                        let s = (sel >> (4 * i) & 0xf) as usize;
                        p.vals[row * 16 + i] = tmp[alt * 16 + s] as u64;
                    }
                }
                Ok(Some(p))
            }
            _ => Ok(None),
        }
    }

    /// VOP3P: packed f16 and the f16/f32 mixed FMAs.
    fn vop3p(&self, name: &str, f: &V, exec: u32) -> R<Pending> {
        if f.clamp {
            return Err(Fault::new("clamp on VOP3P is not implemented"));
        }
        let mix = name.starts_with("v_fma_mix");
        let kind = match name {
            "v_fma_mixlo_f16" => Dst::V16 { reg: f.vdst, hi: false },
            "v_fma_mixhi_f16" => Dst::V16 { reg: f.vdst, hi: true },
            _ => Dst::V32(f.vdst),
        };
        let nsrc = match name {
            "v_pk_add_f16" | "v_pk_mul_f16" | "v_pk_max_f16" | "v_pk_min_f16" => 2,
            "v_pk_fma_f16" => 3,
            _ if mix => 3,
            _ => return Err(Fault::new(format!("{name} is not implemented"))),
        };
        let mut p = Pending { kind, vals: [0; 32], bits: 0, write: exec };
        for lane in 0..32 {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let mut raw = [0u32; 3];
            for i in 0..nsrc {
                let c = f.src[i];
                // For mix: an operand read as f32 (OPSEL_HI clear) takes f32 inline constants.
                let k = if mix && f.opsel_hi >> i & 1 == 0 { K::B32 } else { K::F16 };
                if !mix && (128..=248).contains(&c) {
                    return Err(Fault::new("inline constants in packed 16-bit operations are not implemented"));
                }
                raw[i] = self.vread(c, lane, f.lit, k).map_err(|e| Fault { lane: Some(lane), ..e })? as u32;
            }
            if mix {
                // abs comes from the NEG_HI field for the mix instructions.
                let mut v = [0f32; 3];
                for i in 0..3 {
                    let mut x = if f.opsel_hi >> i & 1 == 0 {
                        f32::from_bits(raw[i])
                    } else if f.opsel >> i & 1 != 0 {
                        f16::from_bits((raw[i] >> 16) as u16).to_f32()
                    } else {
                        f16::from_bits(raw[i] as u16).to_f32()
                    };
                    if f.neg_hi >> i & 1 != 0 {
                        x = x.abs();
                    }
                    if f.neg >> i & 1 != 0 {
                        x = -x;
                    }
                    v[i] = x;
                }
                let r = fma3(v[0], v[1], v[2]);
                p.vals[lane] = if name == "v_fma_mix_f32" {
                    r.to_bits() as u64
                } else {
                    // D0[15:0].f16 = f32_to_f16(fma(...)) as the pseudocode states.
                    cvt_f16(r) as u64
                };
            } else {
                let half = |i: usize, hi: bool| -> f16 {
                    let sel = if hi { f.opsel_hi >> i & 1 } else { f.opsel >> i & 1 };
                    let mut b = if sel != 0 { (raw[i] >> 16) as u16 } else { raw[i] as u16 };
                    let n = if hi { f.neg_hi } else { f.neg };
                    if n >> i & 1 != 0 {
                        b ^= 0x8000;
                    }
                    f16::from_bits(b)
                };
                let mut out = 0u32;
                for (shift, hi) in [(0, false), (16, true)] {
                    let (a, b) = (half(0, hi), half(1, hi));
                    let r = match name {
                        "v_pk_add_f16" => h_op(a, b, |x, y| x + y),
                        "v_pk_mul_f16" => h_op(a, b, |x, y| x * y),
                        "v_pk_max_f16" => fminmax16(a, b, true, true),
                        "v_pk_min_f16" => fminmax16(a, b, true, false),
                        _ => {
                            let c = half(2, hi);
                            // f16 fma through f64: the exact product (22 bits) plus the
                            // addend fits 53 bits except for far-apart exponents.
                            nan16(f16::from_f64(a.to_f64().mul_add(b.to_f64(), c.to_f64())), &[a, b, c])
                        }
                    };
                    out |= (r.to_bits() as u32) << shift;
                }
                p.vals[lane] = out as u64;
            }
        }
        Ok(p)
    }
}

// ---------------------------------------------------------------- the step

fn sext(x: u32, bitsn: u32) -> i64 {
    ((x as i64) << (64 - bitsn)) >> (64 - bitsn)
}

impl Wave {
    /// Executes `insts[self.pc]`.
    pub fn step(&mut self, insts: &[Inst], index: &std::collections::HashMap<u64, usize>, env: &mut Env) -> R<Step> {
        let inst = insts.get(self.pc).ok_or_else(|| Fault::new("program counter ran off the end of the kernel"))?;
        let next = self.pc + 1;
        self.pc = next;
        let name = inst.name;
        if env.mode.strict_wait {
            if let Some((ctr, sgpr, reg, n)) = load_dest(inst) {
                let exec = self.exec();
                let mask = if !inst.name.contains("d16") {
                    u32::MAX
                } else if inst.name.contains("d16_hi") {
                    0xffff_0000
                } else {
                    0x0000_ffff
                };
                self.exec_inst(inst, index, env)?;
                let vals: Vec<[u32; 32]> = (reg..reg + n)
                    .map(|r| if sgpr { [self.s[r]; 32] } else { self.v[r.min(255)] })
                    .collect();
                for r in reg..reg + n {
                    if sgpr {
                        self.s[r] = POISON;
                    } else if r < 256 {
                        for l in 0..32 {
                            if exec >> l & 1 != 0 {
                                self.v[r][l] = (self.v[r][l] & !mask) | (POISON & mask);
                            }
                        }
                    }
                }
                self.in_flight.push(InFlight { ctr, sgpr, reg, exec, mask, vals });
                return Ok(Step::Next);
            }
        }
        let _ = name;
        self.exec_inst(inst, index, env)
    }

    /// Completes the oldest loads until at most `vm` count on vmcnt and `lgkm` on lgkmcnt.
    fn wait(&mut self, vm: u32, lgkm: u32) {
        loop {
            let on = |c: Ctr, vm_side: bool| if vm_side { c != Ctr::Lgkm } else { c != Ctr::Vm };
            let nvm = self.in_flight.iter().filter(|f| on(f.ctr, true)).count() as u32;
            let nlg = self.in_flight.iter().filter(|f| on(f.ctr, false)).count() as u32;
            let pick = if nvm > vm {
                self.in_flight.iter().position(|f| on(f.ctr, true))
            } else if nlg > lgkm {
                self.in_flight.iter().position(|f| on(f.ctr, false))
            } else {
                None
            };
            let Some(i) = pick else { return };
            let f = self.in_flight.remove(i);
            for (k, vals) in f.vals.iter().enumerate() {
                let r = f.reg + k;
                if f.sgpr {
                    self.s[r] = vals[0];
                } else if r < 256 {
                    for l in 0..32 {
                        if f.exec >> l & 1 != 0 {
                            self.v[r][l] = (self.v[r][l] & !f.mask) | (vals[l] & f.mask);
                        }
                    }
                }
            }
        }
    }

    fn exec_inst(&mut self, inst: &Inst, index: &std::collections::HashMap<u64, usize>, env: &mut Env) -> R<Step> {
        let name = inst.name;
        match inst.enc {
            Enc::Sopp => return self.sopp(inst, index, env),
            Enc::Sop1 | Enc::Sop2 | Enc::Sopc | Enc::Sopk => {
                env.counts.salu += 1;
                self.salu(inst)?;
            }
            Enc::Smem => {
                env.counts.smem += 1;
                self.smem(inst, env)?;
            }
            Enc::Vop1 | Enc::Vop2 | Enc::Vopc | Enc::Vop3 | Enc::Vop3sd | Enc::Vop3p => {
                env.counts.valu += 1;
                if is_trans(name) {
                    env.counts.trans += 1;
                }
                let f = vfields(inst);
                let p = self.valu(inst, name, &f, env.mode)?;
                self.commit(&p)?;
            }
            Enc::Vopd => {
                env.counts.valu += 1;
                self.vopd(inst, env.mode)?;
            }
            Enc::Ds => {
                env.counts.lds += 1;
                self.ds(inst, env)?;
            }
            Enc::Global | Enc::Flat => self.vmem(inst, env)?,
            Enc::Mubuf => match name {
                // Cache invalidation: the simulated memory has no caches.
                "buffer_gl0_inv" | "buffer_gl1_inv" => env.counts.other += 1,
                _ => return Err(Fault::new(format!("{name} is not implemented"))),
            },
            Enc::Scratch => return Err(Fault::new(format!("{name}: scratch memory is not implemented"))),
        }
        Ok(Step::Next)
    }

    fn vopd(&mut self, inst: &Inst, mode: Mode) -> R<()> {
        let (w0, w1) = (inst.w0, inst.w1);
        let vdstx = bits(w1, 31, 24);
        let vdsty = (bits(w1, 23, 17) << 1) | ((vdstx & 1) ^ 1);
        let fx = V { vdst: vdstx, src: [bits(w0, 8, 0), 256 + bits(w0, 16, 9), 0], lit: inst.lit, ..V::default() };
        let fy = V { vdst: vdsty, src: [bits(w1, 8, 0), 256 + bits(w1, 16, 9), 0], lit: inst.lit, ..V::default() };
        let mut pend = Vec::with_capacity(2);
        for (n, f) in [(inst.name, fx), (inst.name_y, fy)] {
            let vname = n.replacen("v_dual_", "v_", 1);
            let known = [
                "v_fmac_f32",
                "v_fmaak_f32",
                "v_fmamk_f32",
                "v_mul_f32",
                "v_add_f32",
                "v_sub_f32",
                "v_subrev_f32",
                "v_mov_b32",
                "v_cndmask_b32",
                "v_max_f32",
                "v_min_f32",
                "v_add_nc_u32",
                "v_lshlrev_b32",
                "v_and_b32",
            ];
            let vname: &'static str =
                known.iter().find(|k| **k == vname).ok_or_else(|| Fault::new(format!("{n} is not implemented")))?;
            let half = Inst { enc: Enc::Vopd, name: vname, ..inst.clone() };
            pend.push(self.valu(&half, vname, &f, mode)?);
        }
        // Both halves read their sources before either writes.
        for p in &pend {
            self.commit(p)?;
        }
        Ok(())
    }

    fn sopp(&mut self, inst: &Inst, index: &std::collections::HashMap<u64, usize>, env: &mut Env) -> R<Step> {
        let simm = inst.w0 & 0xffff;
        let target = || -> R<usize> {
            let t = (inst.addr as i64 + 4 + 4 * (simm as u16 as i16 as i64)) as u64;
            index
                .get(&t)
                .copied()
                .ok_or_else(|| Fault::new(format!("branch target {t:#x} is not an instruction of the kernel")))
        };
        let take = match inst.name {
            "s_endpgm" => {
                self.status = Status::Done;
                return Ok(Step::End);
            }
            "s_barrier" => {
                env.counts.barriers += 1;
                self.barriers += 1;
                return Ok(Step::Barrier);
            }
            "s_nop" | "s_clause" | "s_delay_alu" | "s_sleep" | "s_waitcnt_depctr" => {
                env.counts.other += 1;
                return Ok(Step::Next);
            }
            "s_waitcnt" => {
                env.counts.waits += 1;
                // GFX11: vmcnt in bits 15:10, lgkmcnt in bits 9:4.
                self.wait(simm >> 10 & 0x3f, simm >> 4 & 0x3f);
                return Ok(Step::Next);
            }
            "s_sendmsg" => {
                // MSG_DEALLOC_VGPRS (3) only releases the wave's VGPRs before s_endpgm.
                if simm & 0xff != 3 {
                    return Err(Fault::new(format!("s_sendmsg {simm:#x} is not implemented")));
                }
                env.counts.other += 1;
                return Ok(Step::Next);
            }
            "s_branch" => true,
            "s_cbranch_scc0" => !self.scc,
            "s_cbranch_scc1" => self.scc,
            "s_cbranch_vccz" => self.s[VCC as usize] == 0,
            "s_cbranch_vccnz" => self.s[VCC as usize] != 0,
            "s_cbranch_execz" => self.exec() == 0,
            "s_cbranch_execnz" => self.exec() != 0,
            n => return Err(Fault::new(format!("{n} is not implemented"))),
        };
        env.counts.branches += 1;
        if take {
            self.pc = target()?;
        }
        Ok(Step::Next)
    }

    fn salu(&mut self, inst: &Inst) -> R<()> {
        let w0 = inst.w0;
        let name = inst.name;
        let lit = inst.lit;
        let f32v = |x: u32| f32::from_bits(x);
        match inst.enc {
            Enc::Sopk => {
                let sdst = bits(w0, 22, 16);
                let imm = w0 & 0xffff;
                let simm = imm as u16 as i16 as i32;
                let d = self.s.get(sdst as usize).copied().unwrap_or(0);
                match name {
                    "s_movk_i32" => self.swrite(sdst, simm as u32)?,
                    "s_addk_i32" => {
                        let r = (d as i32).wrapping_add(simm);
                        self.scc = (d >> 31 == (imm >> 15)) && (d >> 31 != (r as u32) >> 31);
                        self.swrite(sdst, r as u32)?;
                    }
                    "s_mulk_i32" => self.swrite(sdst, (d as i32).wrapping_mul(simm) as u32)?,
                    "s_cmpk_eq_i32" => self.scc = d as i32 == simm,
                    "s_cmpk_lg_i32" => self.scc = d as i32 != simm,
                    "s_cmpk_gt_i32" => self.scc = (d as i32) > simm,
                    "s_cmpk_ge_i32" => self.scc = (d as i32) >= simm,
                    "s_cmpk_lt_i32" => self.scc = (d as i32) < simm,
                    "s_cmpk_le_i32" => self.scc = (d as i32) <= simm,
                    "s_cmpk_eq_u32" => self.scc = d == imm,
                    "s_cmpk_lg_u32" => self.scc = d != imm,
                    "s_cmpk_gt_u32" => self.scc = d > imm,
                    "s_cmpk_ge_u32" => self.scc = d >= imm,
                    "s_cmpk_lt_u32" => self.scc = d < imm,
                    "s_cmpk_le_u32" => self.scc = d <= imm,
                    // Waits on counters: memory completes at once in this simulator.
                    // Wait until the counter is at most S0 + SIMM16 (stores and exports hold no registers).
                    "s_waitcnt_vscnt" | "s_waitcnt_expcnt" => {}
                    "s_waitcnt_vmcnt" => self.wait(d.wrapping_add(imm), u32::MAX),
                    "s_waitcnt_lgkmcnt" => self.wait(u32::MAX, d.wrapping_add(imm)),
                    n => return Err(Fault::new(format!("{n} is not implemented"))),
                }
            }
            Enc::Sop1 => {
                let sdst = bits(w0, 22, 16);
                let c0 = bits(w0, 7, 0);
                let wide = name.ends_with("_b64") || name.ends_with("_i64") || name.ends_with("_u64");
                if wide && !name.ends_with("_saveexec_b64") {
                    let s0 = self.sread(c0, lit, K::B64)?;
                    let r = match name {
                        "s_mov_b64" => s0,
                        "s_not_b64" => {
                            let r = !s0;
                            self.scc = r != 0;
                            r
                        }
                        n => return Err(Fault::new(format!("{n} is not implemented"))),
                    };
                    return self.swrite64(sdst, r);
                }
                let s0 = self.sread32(c0, lit)?;
                let exec = self.exec();
                let r = match name {
                    "s_mov_b32" => s0,
                    "s_not_b32" => {
                        self.scc = !s0 != 0;
                        !s0
                    }
                    "s_brev_b32" => s0.reverse_bits(),
                    "s_ctz_i32_b32" => {
                        if s0 == 0 {
                            u32::MAX
                        } else {
                            s0.trailing_zeros()
                        }
                    }
                    "s_clz_i32_u32" => {
                        if s0 == 0 {
                            u32::MAX
                        } else {
                            s0.leading_zeros()
                        }
                    }
                    "s_bcnt1_i32_b32" => {
                        self.scc = s0 != 0;
                        s0.count_ones()
                    }
                    "s_sext_i32_i16" => s0 as u16 as i16 as i32 as u32,
                    "s_and_saveexec_b32"
                    | "s_or_saveexec_b32"
                    | "s_xor_saveexec_b32"
                    | "s_and_not1_saveexec_b32"
                    | "s_or_not1_saveexec_b32"
                    | "s_and_not0_saveexec_b32" => {
                        let e = match name {
                            "s_and_saveexec_b32" => s0 & exec,
                            "s_or_saveexec_b32" => s0 | exec,
                            "s_xor_saveexec_b32" => s0 ^ exec,
                            "s_and_not1_saveexec_b32" => s0 & !exec,
                            "s_and_not0_saveexec_b32" => !s0 & exec,
                            _ => s0 | !exec,
                        };
                        self.s[EXEC as usize] = e;
                        self.scc = e != 0;
                        exec
                    }
                    // RDNA 3.5 SALU float conversions (round to nearest even).
                    "s_cvt_f32_u32" => (s0 as f32).to_bits(),
                    "s_cvt_f32_i32" => (s0 as i32 as f32).to_bits(),
                    "s_cvt_u32_f32" => f32v(s0) as u32,
                    "s_cvt_i32_f32" => f32v(s0) as i32 as u32,
                    "s_cvt_f16_f32" => cvt_f16(f32v(s0)) as u32,
                    "s_cvt_f32_f16" => nan32(f16::from_bits(s0 as u16).to_f32(), &[]).to_bits(),
                    n => return Err(Fault::new(format!("{n} is not implemented"))),
                };
                self.swrite(sdst, r)?;
            }
            Enc::Sop2 => {
                let sdst = bits(w0, 22, 16);
                let (c0, c1) = (bits(w0, 7, 0), bits(w0, 15, 8));
                if name.ends_with("_b64") || name.ends_with("_u64") || name.ends_with("_i64") {
                    let s0 = self.sread(c0, lit, K::B64)?;
                    let r = match name {
                        "s_lshl_b64" => s0 << (self.sread32(c1, lit)? & 63),
                        "s_lshr_b64" => s0 >> (self.sread32(c1, lit)? & 63),
                        "s_ashr_i64" => ((s0 as i64) >> (self.sread32(c1, lit)? & 63)) as u64,
                        "s_and_b64" => s0 & self.sread(c1, lit, K::B64)?,
                        "s_or_b64" => s0 | self.sread(c1, lit, K::B64)?,
                        "s_xor_b64" => s0 ^ self.sread(c1, lit, K::B64)?,
                        "s_and_not1_b64" => s0 & !self.sread(c1, lit, K::B64)?,
                        "s_cselect_b64" => {
                            let s1 = self.sread(c1, lit, K::B64)?;
                            return self.swrite64(sdst, if self.scc { s0 } else { s1 });
                        }
                        n => return Err(Fault::new(format!("{n} is not implemented"))),
                    };
                    self.scc = r != 0;
                    return self.swrite64(sdst, r);
                }
                let s0 = self.sread32(c0, lit)?;
                let s1 = self.sread32(c1, lit)?;
                let (a, b) = (f32v(s0), f32v(s1));
                let r = match name {
                    "s_add_u32" => {
                        let t = s0 as u64 + s1 as u64;
                        self.scc = t >> 32 != 0;
                        t as u32
                    }
                    "s_addc_u32" => {
                        let t = s0 as u64 + s1 as u64 + self.scc as u64;
                        self.scc = t >> 32 != 0;
                        t as u32
                    }
                    "s_sub_u32" => {
                        self.scc = s1 > s0;
                        s0.wrapping_sub(s1)
                    }
                    "s_subb_u32" => {
                        let r = s0.wrapping_sub(s1).wrapping_sub(self.scc as u32);
                        self.scc = s1 as u64 + self.scc as u64 > s0 as u64;
                        r
                    }
                    "s_add_i32" => {
                        let r = s0.wrapping_add(s1);
                        self.scc = (s0 >> 31 == s1 >> 31) && (s0 >> 31 != r >> 31);
                        r
                    }
                    "s_sub_i32" => {
                        let r = s0.wrapping_sub(s1);
                        self.scc = (s0 >> 31 != s1 >> 31) && (s0 >> 31 != r >> 31);
                        r
                    }
                    "s_min_u32" => {
                        self.scc = s0 < s1;
                        s0.min(s1)
                    }
                    "s_max_u32" => {
                        self.scc = s0 > s1;
                        s0.max(s1)
                    }
                    "s_min_i32" => {
                        self.scc = (s0 as i32) < (s1 as i32);
                        (s0 as i32).min(s1 as i32) as u32
                    }
                    "s_max_i32" => {
                        self.scc = (s0 as i32) > (s1 as i32);
                        (s0 as i32).max(s1 as i32) as u32
                    }
                    "s_lshl_b32" | "s_lshr_b32" | "s_ashr_i32" | "s_and_b32" | "s_or_b32" | "s_xor_b32"
                    | "s_and_not1_b32" | "s_or_not1_b32" | "s_nand_b32" | "s_nor_b32" | "s_xnor_b32" | "s_bfe_u32"
                    | "s_bfe_i32" => {
                        let r = match name {
                            "s_lshl_b32" => s0 << (s1 & 31),
                            "s_lshr_b32" => s0 >> (s1 & 31),
                            "s_ashr_i32" => ((s0 as i32) >> (s1 & 31)) as u32,
                            "s_and_b32" => s0 & s1,
                            "s_or_b32" => s0 | s1,
                            "s_xor_b32" => s0 ^ s1,
                            "s_and_not1_b32" => s0 & !s1,
                            "s_or_not1_b32" => s0 | !s1,
                            "s_nand_b32" => !(s0 & s1),
                            "s_nor_b32" => !(s0 | s1),
                            "s_xnor_b32" => !(s0 ^ s1),
                            "s_bfe_u32" => {
                                let w = (s1 >> 16) & 0x7f;
                                let x = s0 >> (s1 & 31);
                                if w >= 32 { x } else { x & ((1u32 << w) - 1) }
                            }
                            _ => {
                                let w = (s1 >> 16) & 0x7f;
                                let x = s0 >> (s1 & 31);
                                if w == 0 {
                                    0
                                } else if w >= 32 {
                                    x
                                } else {
                                    (((x << (32 - w)) as i32) >> (32 - w)) as u32
                                }
                            }
                        };
                        self.scc = r != 0;
                        r
                    }
                    "s_mul_i32" => s0.wrapping_mul(s1),
                    "s_mul_hi_u32" => ((s0 as u64 * s1 as u64) >> 32) as u32,
                    "s_mul_hi_i32" => ((s0 as i32 as i64 * s1 as i32 as i64) >> 32) as u32,
                    "s_cselect_b32" => {
                        if self.scc {
                            s0
                        } else {
                            s1
                        }
                    }
                    "s_pack_ll_b32_b16" => (s0 & 0xffff) | (s1 << 16),
                    "s_pack_lh_b32_b16" => (s0 & 0xffff) | (s1 & 0xffff_0000),
                    "s_pack_hh_b32_b16" => (s0 >> 16) | (s1 & 0xffff_0000),
                    // RDNA 3.5 SALU float arithmetic.
                    "s_add_f32" => nan32(a + b, &[a, b]).to_bits(),
                    "s_sub_f32" => nan32(a - b, &[a, b]).to_bits(),
                    "s_mul_f32" => nan32(a * b, &[a, b]).to_bits(),
                    "s_min_f32" => fminmax32(a, b, true, false).to_bits(),
                    "s_max_f32" => fminmax32(a, b, true, true).to_bits(),
                    n => return Err(Fault::new(format!("{n} is not implemented"))),
                };
                self.swrite(sdst, r)?;
            }
            Enc::Sopc => {
                let (c0, c1) = (bits(w0, 7, 0), bits(w0, 15, 8));
                if name.ends_with("_u64") {
                    let (s0, s1) = (self.sread(c0, lit, K::B64)?, self.sread(c1, lit, K::B64)?);
                    self.scc = match name {
                        "s_cmp_eq_u64" => s0 == s1,
                        "s_cmp_lg_u64" => s0 != s1,
                        n => return Err(Fault::new(format!("{n} is not implemented"))),
                    };
                    return Ok(());
                }
                let (s0, s1) = (self.sread32(c0, lit)?, self.sread32(c1, lit)?);
                let (c, ty) = name
                    .strip_prefix("s_cmp_")
                    .and_then(|r| r.split_once('_'))
                    .ok_or_else(|| Fault::new(format!("{name} is not implemented")))?;
                let cond = parse_cmp(&format!("v_cmp_{c}_{ty}")).map(|x| x.1);
                let res = match (ty, cond) {
                    ("i32", Some(c)) => icmp(c, s0 as i32, s1 as i32),
                    ("u32", Some(c)) => icmp(c, s0, s1),
                    ("f32", Some(c)) => fcmp(c, f32v(s0) as f64, f32v(s1) as f64),
                    ("f16", Some(c)) => fcmp(c, f16::from_bits(s0 as u16).to_f64(), f16::from_bits(s1 as u16).to_f64()),
                    _ => None,
                };
                self.scc = match (c, ty) {
                    ("lg", "i32" | "u32") => Some(s0 != s1),
                    _ => res,
                }
                .ok_or_else(|| Fault::new(format!("{name} is not implemented")))?;
            }
            _ => unreachable!(),
        }
        Ok(())
    }

    fn smem(&mut self, inst: &Inst, env: &mut Env) -> R<()> {
        let (w0, w1) = (inst.w0, inst.w1);
        let sdata = bits(w0, 12, 6);
        let sbase = bits(w0, 5, 0) * 2;
        let offset = sext(bits(w1, 20, 0), 21);
        let soff = bits(w1, 31, 25);
        let n = match inst.name {
            "s_load_b32" => 1,
            "s_load_b64" => 2,
            "s_load_b128" => 4,
            "s_load_b256" => 8,
            "s_load_b512" => 16,
            "s_dcache_inv" => return Ok(()),
            n => return Err(Fault::new(format!("{n} is not implemented"))),
        };
        let base = self.s[sbase as usize] as u64 | (self.s[sbase as usize + 1] as u64) << 32;
        let so = if soff == NULL { 0 } else { self.sread32(soff, None)? as u64 };
        // The two low address bits are ignored (dword access).
        let addr = base.wrapping_add(offset as u64).wrapping_add(so) & !3;
        let mut buf = vec![0u8; 4 * n];
        env.mem.read(addr, &mut buf).map_err(|e| Fault::new(format!("scalar load: {e}")))?;
        for i in 0..n {
            let r = sdata as usize + i;
            if r >= 106 {
                return Err(Fault::new("scalar load past s105"));
            }
            self.s[r] = u32::from_le_bytes(buf[4 * i..4 * i + 4].try_into().unwrap());
        }
        Ok(())
    }

    fn ds(&mut self, inst: &Inst, env: &mut Env) -> R<()> {
        let (w0, w1) = (inst.w0, inst.w1);
        let offset = bits(w0, 15, 0);
        if bits(w0, 17, 17) != 0 {
            return Err(Fault::new("GDS is not implemented"));
        }
        let (addr_r, d0, vdst) = (bits(w1, 7, 0) as usize, bits(w1, 15, 8) as usize, bits(w1, 31, 24) as usize);
        let exec = self.exec();
        let name = inst.name;
        if name == "ds_bpermute_b32" || name == "ds_permute_b32" {
            let mut tmp = [0u32; 32];
            for i in 0..32 {
                if exec >> i & 1 == 0 {
                    continue;
                }
                let lane = (self.v[addr_r][i].wrapping_add(offset) / 4 % 32) as usize;
                if name == "ds_bpermute_b32" {
                    // EXEC applies to the source lanes: an inactive one reads as 0.
                    tmp[i] = if exec >> lane & 1 != 0 { self.v[d0][lane] } else { 0 };
                } else {
                    tmp[lane] = self.v[d0][i];
                }
            }
            for i in 0..32 {
                if exec >> i & 1 != 0 {
                    self.v[vdst][i] = tmp[i];
                }
            }
            return Ok(());
        }
        let lds_len = env.lds.len();
        for lane in 0..32 {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let a = self.v[addr_r][lane].wrapping_add(offset) as usize;
            let chk = |n: usize| -> R<usize> {
                if a + n > lds_len {
                    Err(Fault::lane(
                        lane,
                        format!("{n}-byte LDS access at {a:#x} past the workgroup's {lds_len} bytes"),
                    ))
                } else {
                    Ok(a)
                }
            };
            let load = |lds: &[u8], n: usize| -> R<Vec<u32>> {
                let a = chk(4 * n)?;
                Ok((0..n).map(|i| u32::from_le_bytes(lds[a + 4 * i..a + 4 * i + 4].try_into().unwrap())).collect())
            };
            match name {
                "ds_load_b32" | "ds_load_b64" | "ds_load_b96" | "ds_load_b128" => {
                    let n = match name {
                        "ds_load_b32" => 1,
                        "ds_load_b64" => 2,
                        "ds_load_b96" => 3,
                        _ => 4,
                    };
                    let v = load(env.lds, n)?;
                    for (i, x) in v.into_iter().enumerate() {
                        self.v[vdst + i][lane] = x;
                    }
                }
                "ds_load_u8" | "ds_load_i8" | "ds_load_u16" | "ds_load_i16" => {
                    let n = if name.ends_with('8') { 1 } else { 2 };
                    let a = chk(n)?;
                    let mut x = 0u32;
                    for i in 0..n {
                        x |= (env.lds[a + i] as u32) << (8 * i);
                    }
                    if name == "ds_load_i8" {
                        x = x as u8 as i8 as i32 as u32;
                    } else if name == "ds_load_i16" {
                        x = x as u16 as i16 as i32 as u32;
                    }
                    self.v[vdst][lane] = x;
                }
                "ds_store_b32" | "ds_store_b64" | "ds_store_b96" | "ds_store_b128" => {
                    let n = match name {
                        "ds_store_b32" => 1,
                        "ds_store_b64" => 2,
                        "ds_store_b96" => 3,
                        _ => 4,
                    };
                    let a = chk(4 * n)?;
                    for i in 0..n {
                        env.lds[a + 4 * i..a + 4 * i + 4].copy_from_slice(&self.v[d0 + i][lane].to_le_bytes());
                    }
                }
                "ds_store_b8" | "ds_store_b16" | "ds_store_b16_d16_hi" | "ds_store_b8_d16_hi" => {
                    let n = if name.starts_with("ds_store_b8") { 1 } else { 2 };
                    let a = chk(n)?;
                    let x = self.v[d0][lane] >> if name.ends_with("_hi") { 16 } else { 0 };
                    for i in 0..n {
                        env.lds[a + i] = (x >> (8 * i)) as u8;
                    }
                }
                n => return Err(Fault::new(format!("{n} is not implemented"))),
            }
        }
        Ok(())
    }

    /// GLOBAL and FLAT loads and stores. A flat address in the LDS aperture reaches
    /// the workgroup's memory; any other address must lie in a live allocation.
    fn vmem(&mut self, inst: &Inst, env: &mut Env) -> R<()> {
        let (w0, w1) = (inst.w0, inst.w1);
        let offset = sext(bits(w0, 12, 0), 13);
        let (addr_r, data_r, saddr, vdst) =
            (bits(w1, 7, 0) as usize, bits(w1, 15, 8) as usize, bits(w1, 22, 16), bits(w1, 31, 24) as usize);
        let name = inst.name;
        let op = name.split_once('_').map(|x| x.1).unwrap_or("");
        // (bytes, is_store, kind)
        let (n, store) = match op {
            "load_u8" | "load_i8" | "load_d16_u8" | "load_d16_i8" | "load_d16_hi_u8" | "load_d16_hi_i8" => (1, false),
            "load_u16" | "load_i16" | "load_d16_b16" | "load_d16_hi_b16" => (2, false),
            "load_b32" => (4, false),
            "load_b64" => (8, false),
            "load_b96" => (12, false),
            "load_b128" => (16, false),
            "store_b8" | "store_d16_hi_b8" => (1, true),
            "store_b16" | "store_d16_hi_b16" => (2, true),
            "store_b32" => (4, true),
            "store_b64" => (8, true),
            "store_b96" => (12, true),
            "store_b128" => (16, true),
            _ => return Err(Fault::new(format!("{name} is not implemented"))),
        };
        let exec = self.exec();
        if store {
            env.counts.vmem_stores += 1;
        } else {
            env.counts.vmem_loads += 1;
        }
        let use_saddr = inst.enc == Enc::Global && saddr != NULL && saddr != 0x7d;
        let sbase = if use_saddr { self.sread(saddr, None, K::B64)? } else { 0 };
        for lane in 0..32 {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let addr = if use_saddr {
                sbase.wrapping_add(self.v[addr_r][lane] as u64).wrapping_add(offset as u64)
            } else {
                (self.v[addr_r][lane] as u64 | (self.v[addr_r + 1][lane] as u64) << 32).wrapping_add(offset as u64)
            };
            if store {
                env.counts.vmem_store_bytes += n as u64;
            } else {
                env.counts.vmem_load_bytes += n as u64;
            }
            let lds_addr = (inst.enc == Enc::Flat && (addr >> 32) as u32 == mem::SHARED_APERTURE_HI)
                .then_some(addr as u32 as usize);
            if inst.enc == Enc::Flat && (addr >> 32) as u32 == mem::PRIVATE_APERTURE_HI {
                return Err(Fault::lane(lane, "flat access to the scratch aperture: scratch is not implemented"));
            }
            let fail = |e: String| Fault::lane(lane, format!("{name}: {e}"));
            if store {
                let mut bytes = Vec::with_capacity(n);
                let hi = op.contains("d16_hi");
                for i in 0..n.div_ceil(4) {
                    let x = self.v[data_r + i][lane];
                    bytes.extend_from_slice(&(if hi { x >> 16 } else { x }).to_le_bytes());
                }
                bytes.truncate(n);
                match lds_addr {
                    Some(a) => {
                        if a + n > env.lds.len() {
                            return Err(fail(format!(
                                "flat LDS access at {a:#x} past the workgroup's {} bytes",
                                env.lds.len()
                            )));
                        }
                        env.lds[a..a + n].copy_from_slice(&bytes);
                    }
                    None => env.mem.write(addr, &bytes).map_err(fail)?,
                }
            } else {
                let mut bytes = vec![0u8; n.max(4)];
                match lds_addr {
                    Some(a) => {
                        if a + n > env.lds.len() {
                            return Err(fail(format!(
                                "flat LDS access at {a:#x} past the workgroup's {} bytes",
                                env.lds.len()
                            )));
                        }
                        bytes[..n].copy_from_slice(&env.lds[a..a + n]);
                    }
                    None => env.mem.read(addr, &mut bytes[..n]).map_err(fail)?,
                }
                let w = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
                let x = w(0);
                match op {
                    "load_u8" | "load_u16" => self.v[vdst][lane] = x,
                    "load_i8" => self.v[vdst][lane] = x as u8 as i8 as i32 as u32,
                    "load_i16" => self.v[vdst][lane] = x as u16 as i16 as i32 as u32,
                    "load_d16_b16" | "load_d16_u8" => {
                        self.v[vdst][lane] = (self.v[vdst][lane] & 0xffff_0000) | (x & 0xffff);
                    }
                    "load_d16_i8" => {
                        self.v[vdst][lane] = (self.v[vdst][lane] & 0xffff_0000) | (x as u8 as i8 as i16 as u16 as u32);
                    }
                    "load_d16_hi_b16" | "load_d16_hi_u8" => {
                        self.v[vdst][lane] = (self.v[vdst][lane] & 0xffff) | (x & 0xffff) << 16;
                    }
                    "load_d16_hi_i8" => {
                        self.v[vdst][lane] = (self.v[vdst][lane] & 0xffff) | (x as u8 as i8 as i16 as u16 as u32) << 16;
                    }
                    _ => {
                        for i in 0..n / 4 {
                            self.v[vdst + i][lane] = w(i);
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// The destination of a load: (counter, SGPRs?, first register, registers).
fn load_dest(inst: &Inst) -> Option<(Ctr, bool, usize, usize)> {
    let name = inst.name;
    let vdst = bits(inst.w1, 31, 24) as usize;
    match inst.enc {
        Enc::Smem => {
            let n = match name {
                "s_load_b32" => 1,
                "s_load_b64" => 2,
                "s_load_b128" => 4,
                "s_load_b256" => 8,
                "s_load_b512" => 16,
                _ => return None,
            };
            Some((Ctr::Lgkm, true, bits(inst.w0, 12, 6) as usize, n))
        }
        Enc::Ds => {
            let n = match name {
                "ds_load_b64" => 2,
                "ds_load_b96" => 3,
                "ds_load_b128" => 4,
                n if n.starts_with("ds_load_") || n == "ds_bpermute_b32" || n == "ds_permute_b32" => 1,
                _ => return None,
            };
            Some((Ctr::Lgkm, false, vdst, n))
        }
        Enc::Global | Enc::Flat => {
            let op = name.split_once('_')?.1;
            if !op.starts_with("load_") {
                return None;
            }
            let n = match op {
                "load_b64" => 2,
                "load_b96" => 3,
                "load_b128" => 4,
                _ => 1,
            };
            Some((if inst.enc == Enc::Flat { Ctr::Both } else { Ctr::Vm }, false, vdst, n))
        }
        _ => None,
    }
}
