//! Executing one wave32 instruction at a time.
//!
//! Semantics follow the per-instruction pseudocode of AMD's RDNA3 ISA
//! reference; where this module departs from or interprets it, a comment says so.
//! Any instruction this module does not implement is an error naming it, never a no-op.

// Lanes are indexed by lane number across several arrays at once (registers,
// EXEC bits, DPP sources), as in the ISA pseudocode.
#![allow(clippy::needless_range_loop)]

use crate::decode::{Enc, Inst, bits};
use crate::mem::{self, Memory};
use half::f16;

mod atomics;
mod control;
mod cross_lane;
mod floats;
mod lanes;
pub mod load_rounds;
mod memory;
mod salu;
mod valu;

use floats::*;
pub use floats::{div_fixup32, div_scale32, ldexp32};
pub use lanes::cvt_f16;
use lanes::*;
use valu::*;

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

/// Declares [`Counts`] from one list of its class counters (in the order of
/// [`Counts::classes`]), with `add` and `classes`.
macro_rules! counts {
    ($($(#[$doc:meta])* $field:ident),* $(,)?) => {
        /// Executed wave-instructions by class (the counts of `RDNA_SIM_COUNTS`).
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct Counts {
            $($(#[$doc])* pub $field: u64,)*
            /// Wave-instructions executed per instruction of the kernel (by index):
            /// the coverage of a launch.
            pub hits: Vec<u64>,
        }

        impl Counts {
            /// The class counts with their names, in a fixed order (without the hits).
            pub fn classes(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($field), self.$field)),*]
            }

            pub fn add(&mut self, o: &Counts) {
                $(self.$field += o.$field;)*
                if self.hits.len() < o.hits.len() {
                    self.hits.resize(o.hits.len(), 0);
                }
                for (a, b) in self.hits.iter_mut().zip(&o.hits) {
                    *a += b;
                }
            }
        }
    };
}

counts!(
    valu,
    /// Transcendental VALU instructions (also counted in `valu`).
    trans,
    salu,
    smem,
    /// GLOBAL and FLAT loads (a FLAT one counts here wherever its lanes go).
    vmem_loads,
    /// Bytes read from device memory by the active lanes.
    vmem_load_bytes,
    /// Bytes read from device memory per wave request: the distinct bytes of the
    /// active lanes of each GLOBAL or FLAT load (see [`load_rounds`]).
    vmem_load_request_bytes,
    /// Memory latencies the waves wait through, summed over the waves: each
    /// wave's clock at its end in [`load_rounds::LoadRounds`].
    vmem_load_rounds,
    vmem_stores,
    vmem_store_bytes,
    /// GLOBAL and FLAT atomics (in neither `vmem_loads` nor `vmem_stores`).
    vmem_atomics,
    /// Bytes of device memory the active lanes of atomics read and wrote (4 a lane).
    vmem_atomic_bytes,
    /// Bytes of FLAT accesses that reached workgroup memory through its aperture.
    flat_lds_bytes,
    /// DS instructions.
    lds,
    branches,
    waits,
    barriers,
    other,
);

impl Counts {
    /// The class counts on one line (without the per-instruction hits).
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self.classes().iter().map(|(name, v)| format!("{name} {v}")).collect();
        parts.join(", ")
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
    /// Loads counted on vmcnt not yet waited for, and the wave's clock in memory latencies.
    pub load_rounds: load_rounds::LoadRounds,
}

impl Default for Wave {
    fn default() -> Self {
        Wave {
            s: [0; 128],
            v: vec![[0; 32]; 256],
            scc: false,
            pc: 0,
            status: Status::Running,
            barriers: 0,
            in_flight: Vec::new(),
            load_rounds: load_rounds::LoadRounds::default(),
        }
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
    /// The race checker, when the launch runs with it.
    pub race: Option<&'a mut crate::race::Tracker>,
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
                if k == K::B64 && !code.is_multiple_of(2) {
                    return Err(Fault::new(format!("64-bit operand in odd SGPR s{code}")));
                }
                pair(code as usize)
            }
            NULL => 0,
            M0 => self.s[M0 as usize] as u64,
            126 | 127 => pair(code as usize),
            128..=208 | 240..=248 => lo32(k, inline_const(code, k).unwrap()),
            // The shared (235, 236) and private (237, 238) apertures' base and limit.
            235..=238 => {
                let hi = if code < 237 { mem::SHARED_APERTURE_HI } else { mem::PRIVATE_APERTURE_HI } as u64;
                let limit = if code.is_multiple_of(2) { 0xffff_ffff } else { 0 };
                if k == K::B64 { hi << 32 | limit } else { hi }
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
        if !code.is_multiple_of(2) && code != NULL {
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
