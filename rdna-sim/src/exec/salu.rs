//! The scalar ALU (SOP1/SOP2/SOPK/SOPC).

use super::*;

impl Wave {
    pub(super) fn salu(&mut self, inst: &Inst) -> R<()> {
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
                    // Wait until the counter is at most S0 + SIMM16 (stores and exports hold no
                    // registers; the race checker follows vscnt for its release check, control.rs).
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
                    // RDNA 3.5 SALU float rounding to an integral value, as their VALU twins.
                    "s_rndne_f32" => nan32(f32v(s0).round_ties_even(), &[f32v(s0)]).to_bits(),
                    "s_floor_f32" => nan32(f32v(s0).floor(), &[f32v(s0)]).to_bits(),
                    "s_ceil_f32" => nan32(f32v(s0).ceil(), &[f32v(s0)]).to_bits(),
                    "s_trunc_f32" => nan32(f32v(s0).trunc(), &[f32v(s0)]).to_bits(),
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
                    "s_lshl1_add_u32" | "s_lshl2_add_u32" | "s_lshl3_add_u32" | "s_lshl4_add_u32" => {
                        // The digit in the name is the shift; SCC is the carry out of the 64-bit sum.
                        let shift = name.as_bytes()[6] - b'0';
                        let t = ((s0 as u64) << shift) + s1 as u64;
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
                    // Fused, one rounding, as their VALU twins.
                    "s_fmaak_f32" => super::lanes::fma3(a, b, f32v(literal(lit)?)).to_bits(),
                    "s_fmamk_f32" => super::lanes::fma3(a, f32v(literal(lit)?), b).to_bits(),
                    "s_fmac_f32" => {
                        let d = f32v(self.s.get(sdst as usize).copied().unwrap_or(0));
                        super::lanes::fma3(a, b, d).to_bits()
                    }
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
}

/// The literal constant of an instruction that always carries one.
fn literal(lit: Option<u32>) -> Result<u32, Fault> {
    lit.ok_or_else(|| Fault::new("an instruction that takes a literal was decoded without one".to_string()))
}
