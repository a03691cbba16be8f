//! Decoding of RDNA 3 / 3.5 machine code (the GFX11 encodings).
//!
//! Field layouts follow AMD's "RDNA3 Instruction Set Architecture" reference
//! (chapter "Microcode Formats") and LLVM's AMDGPU disassembler conventions for
//! the mnemonics (`_e32` / `_e64` / `_dpp` suffixes), so that a decoded
//! instruction can be checked against `llvm-objdump` mnemonic for mnemonic.

use crate::opcodes;

/// The microcode format of an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Enc {
    Sop1,
    Sop2,
    Sopc,
    Sopk,
    Sopp,
    Smem,
    Vop1,
    Vop2,
    Vopc,
    Vop3,
    Vop3sd,
    Vop3p,
    Vopd,
    Ds,
    Flat,
    Global,
    Scratch,
    Mubuf,
}

/// One decoded instruction: its raw dwords and what was read from them.
#[derive(Clone, Debug)]
pub struct Inst {
    /// Byte address in the code object.
    pub addr: u64,
    /// Length in bytes (4, 8 or 12).
    pub len: u8,
    pub enc: Enc,
    /// Opcode within the encoding (for VOPD: the X opcode).
    pub op: u16,
    /// VOPD only: the Y opcode.
    pub opy: u16,
    /// The first two dwords (the second is 0 for 32-bit encodings).
    pub w0: u32,
    pub w1: u32,
    /// The 32-bit literal constant, if the instruction carries one.
    pub lit: Option<u32>,
    /// The DPP16 control dword, if any.
    pub dpp16: Option<u32>,
    /// The DPP8 dword, if any.
    pub dpp8: Option<u32>,
    /// Base name without encoding suffix, e.g. `v_add_f32`.
    pub name: &'static str,
    /// VOPD only: the Y half's name.
    pub name_y: &'static str,
}

located_error!(DecodeError { addr: u64 }, "at {:#x}: {}");

fn lookup(table: &'static [(u16, &'static str)], op: u16) -> Option<&'static str> {
    table.binary_search_by_key(&op, |&(o, _)| o).ok().map(|i| table[i].1)
}

/// The name with any `_e32` / `_e64` suffix of the opcode tables removed.
pub fn base_name(name: &'static str) -> &'static str {
    name.strip_suffix("_e32").or_else(|| name.strip_suffix("_e64")).unwrap_or(name)
}

/// Bits `hi..=lo` of `x`.
#[inline]
pub fn bits(x: u32, hi: u32, lo: u32) -> u32 {
    ((x as u64 >> lo) & ((1u64 << (hi - lo + 1)) - 1)) as u32
}

impl Inst {
    /// The mnemonic as `llvm-objdump --mcpu=gfx1151` prints it.
    pub fn mnemonic(&self) -> String {
        match self.enc {
            Enc::Vop1 | Enc::Vop2 | Enc::Vopc => {
                let promoted = match self.enc {
                    Enc::Vop1 => self.op + 384,
                    Enc::Vop2 => self.op + 256,
                    _ => self.op,
                };
                // LLVM has no VOP3 form of these (the ISA lists one), so no suffix.
                let no_vop3 = matches!(self.name, "v_readfirstlane_b32" | "v_nop" | "v_pipeflush");
                if self.dpp16.is_some() || self.dpp8.is_some() {
                    format!("{}_dpp", self.name)
                } else if !no_vop3 && lookup(opcodes::VOP3, promoted).is_some() {
                    format!("{}_e32", self.name)
                } else {
                    self.name.to_string()
                }
            }
            Enc::Vop3 | Enc::Vop3sd => {
                let dpp = if self.dpp16.is_some() || self.dpp8.is_some() { "_dpp" } else { "" };
                if self.op < 512 { format!("{}_e64{dpp}", self.name) } else { format!("{}{dpp}", self.name) }
            }
            _ => self.name.to_string(),
        }
    }

    /// VOPD only: the Y half's mnemonic.
    pub fn mnemonic_y(&self) -> Option<&'static str> {
        (self.enc == Enc::Vopd).then_some(self.name_y)
    }
}

fn err(addr: u64, msg: String) -> DecodeError {
    DecodeError { addr, msg }
}

/// Decodes the instruction at the start of `words` (at byte address `addr`).
pub fn decode(words: &[u32], addr: u64) -> Result<Inst, DecodeError> {
    let w0 = *words.first().ok_or_else(|| err(addr, "no instruction (end of code)".into()))?;
    let word = |i: usize| -> Result<u32, DecodeError> {
        words.get(i).copied().ok_or_else(|| err(addr, format!("instruction {w0:#010x} runs past the end of the code")))
    };
    let mut inst = Inst {
        addr,
        len: 4,
        enc: Enc::Sopp,
        op: 0,
        opy: 0,
        w0,
        w1: 0,
        lit: None,
        dpp16: None,
        dpp8: None,
        name: "",
        name_y: "",
    };
    let unknown = |what: &str, op: u32| err(addr, format!("unknown {what} opcode {op} (word {w0:#010x})"));
    // Fills in the encoding and the table name or fails.
    macro_rules! name {
        ($enc:expr, $table:expr, $what:expr, $op:expr) => {{
            inst.enc = $enc;
            let op = $op;
            inst.op = op as u16;
            inst.name = base_name(lookup($table, op as u16).ok_or_else(|| unknown($what, op))?);
        }};
    }
    // Scalar literal: operand code 255.
    let mut want_lit = false;
    if w0 >> 31 == 0 {
        // VOP1, VOPC or VOP2.
        let src0 = bits(w0, 8, 0);
        match bits(w0, 31, 25) {
            0b0111111 => {
                name!(Enc::Vop1, opcodes::VOP1, "VOP1", bits(w0, 16, 9));
            }
            0b0111110 => {
                name!(Enc::Vopc, opcodes::VOPC, "VOPC", bits(w0, 24, 17));
            }
            _ => {
                name!(Enc::Vop2, opcodes::VOP2, "VOP2", bits(w0, 30, 25));
                if matches!(inst.name, "v_fmamk_f32" | "v_fmaak_f32" | "v_fmamk_f16" | "v_fmaak_f16") {
                    want_lit = true;
                }
            }
        }
        match src0 {
            255 => want_lit = true,
            250 => {
                inst.dpp16 = Some(word(1)?);
                inst.len = 8;
            }
            233 | 234 => {
                inst.dpp8 = Some(word(1)?);
                inst.len = 8;
            }
            _ => {}
        }
    } else if w0 >> 30 == 0b10 {
        if w0 >> 28 == 0b1011 {
            match bits(w0, 31, 23) {
                0b101111101 => {
                    name!(Enc::Sop1, opcodes::SOP1, "SOP1", bits(w0, 15, 8));
                    want_lit = bits(w0, 7, 0) == 255;
                }
                0b101111110 => {
                    name!(Enc::Sopc, opcodes::SOPC, "SOPC", bits(w0, 22, 16));
                    want_lit = bits(w0, 7, 0) == 255 || bits(w0, 15, 8) == 255;
                }
                0b101111111 => {
                    name!(Enc::Sopp, opcodes::SOPP, "SOPP", bits(w0, 22, 16));
                }
                _ => {
                    name!(Enc::Sopk, opcodes::SOPK, "SOPK", bits(w0, 27, 23));
                    want_lit = inst.name == "s_setreg_imm32_b32";
                }
            }
        } else {
            name!(Enc::Sop2, opcodes::SOP2, "SOP2", bits(w0, 29, 23));
            // s_fmaak_f32 and s_fmamk_f32 always carry their constant K as a literal.
            want_lit =
                bits(w0, 7, 0) == 255 || bits(w0, 15, 8) == 255 || matches!(inst.name, "s_fmaak_f32" | "s_fmamk_f32");
        }
    } else {
        // 64-bit encodings.
        let w1 = word(1)?;
        inst.w1 = w1;
        inst.len = 8;
        match bits(w0, 31, 26) {
            0b110101 => {
                let op = bits(w0, 25, 16);
                if let Some(n) = lookup(opcodes::VOP3SD, op as u16) {
                    inst.enc = Enc::Vop3sd;
                    inst.op = op as u16;
                    inst.name = base_name(n);
                } else {
                    name!(Enc::Vop3, opcodes::VOP3, "VOP3", op);
                }
                vop3_extra(&mut inst, words, &mut want_lit)?;
            }
            0b110011 => match bits(w0, 25, 24) {
                0b00 => {
                    name!(Enc::Vop3p, opcodes::VOP3P, "VOP3P", bits(w0, 22, 16));
                    vop3_extra(&mut inst, words, &mut want_lit)?;
                }
                _ => return Err(err(addr, format!("VINTERP/LDSDIR encoding is not supported (word {w0:#010x})"))),
            },
            0b110010 => {
                let opx = bits(w0, 25, 22);
                let opy = bits(w0, 21, 17);
                name!(Enc::Vopd, opcodes::VOPD, "VOPD X", opx);
                inst.opy = opy as u16;
                inst.name_y = lookup(opcodes::VOPD, opy as u16).ok_or_else(|| unknown("VOPD Y", opy))?;
                want_lit =
                    bits(w0, 8, 0) == 255 || bits(w1, 8, 0) == 255 || matches!(opx, 1 | 2) || matches!(opy, 1 | 2);
            }
            0b110110 => {
                name!(Enc::Ds, opcodes::DS, "DS", bits(w0, 25, 18));
            }
            0b110111 => {
                let op = bits(w0, 24, 18);
                match bits(w0, 17, 16) {
                    0 => {
                        name!(Enc::Flat, opcodes::FLAT, "FLAT", op);
                    }
                    1 => {
                        name!(Enc::Scratch, opcodes::SCRATCH, "SCRATCH", op);
                    }
                    2 => {
                        name!(Enc::Global, opcodes::GLOBAL, "GLOBAL", op);
                    }
                    s => return Err(err(addr, format!("FLAT segment {s} is reserved (word {w0:#010x})"))),
                }
            }
            0b111101 => {
                name!(Enc::Smem, opcodes::SMEM, "SMEM", bits(w0, 25, 18));
            }
            0b111000 => {
                name!(Enc::Mubuf, opcodes::MUBUF, "MUBUF", bits(w0, 25, 18));
            }
            e => {
                return Err(err(
                    addr,
                    format!("unsupported encoding {e:#08b} (MTBUF/MIMG/EXP or reserved; word {w0:#010x})"),
                ));
            }
        }
    }
    if want_lit {
        let at = (inst.len / 4) as usize;
        inst.lit = Some(word(at)?);
        inst.len += 4;
    }
    Ok(inst)
}

/// VOP3 / VOP3SD / VOP3P: literal and DPP dwords after the 64-bit instruction.
fn vop3_extra(inst: &mut Inst, words: &[u32], want_lit: &mut bool) -> Result<(), DecodeError> {
    let src0 = bits(inst.w1, 8, 0);
    let src1 = bits(inst.w1, 17, 9);
    let src2 = bits(inst.w1, 26, 18);
    let nsrc = num_vop3_srcs(inst);
    let srcs = [src0, src1, src2];
    if srcs[..nsrc].contains(&255) {
        *want_lit = true;
    }
    let extra = || {
        words
            .get(2)
            .copied()
            .ok_or_else(|| err(inst.addr, format!("instruction {:#010x} runs past the end of the code", inst.w0)))
    };
    match src0 {
        250 => {
            inst.dpp16 = Some(extra()?);
            inst.len = 12;
        }
        233 | 234 => {
            inst.dpp8 = Some(extra()?);
            inst.len = 12;
        }
        _ => {}
    }
    Ok(())
}

/// How many source operands a VOP3-encoded instruction reads (for the literal rule).
fn num_vop3_srcs(inst: &Inst) -> usize {
    match inst.enc {
        Enc::Vop3 if (384..512).contains(&inst.op) => 1, // promoted VOP1
        Enc::Vop3 if inst.op < 256 => 2,                 // promoted VOPC
        _ => 3,
    }
}

/// Decodes a kernel's code: `code` is its bytes, `base` the byte address of its first instruction.
pub fn decode_all(code: &[u8], base: u64) -> Result<Vec<Inst>, DecodeError> {
    if !code.len().is_multiple_of(4) {
        return Err(err(base, format!("code size {} is not a multiple of 4", code.len())));
    }
    let words: Vec<u32> = code.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let inst = decode(&words[i..], base + 4 * i as u64)?;
        i += inst.len as usize / 4;
        out.push(inst);
    }
    Ok(out)
}
