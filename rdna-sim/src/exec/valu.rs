//! The VALU: computing an instruction (VOP1/VOP2/VOPC/VOP3/VOP3SD/VOP3P,
//! VOPD) into a pending result, then writing it.

use super::*;

/// The result of a VALU instruction before it is written (VOPD computes both halves first).
pub(super) struct Pending {
    pub(super) kind: Dst,
    pub(super) vals: [u64; 32],
    pub(super) bits: u32,
    pub(super) write: u32,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Dst {
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
    pub(super) fn commit(&mut self, p: &Pending) -> R<()> {
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

    /// A VALU instruction (VOP1/VOP2/VOPC/VOP3/VOP3SD/VOP3P), computed but not written.
    pub(super) fn valu(&self, inst: &Inst, name: &str, f: &V, mode: Mode) -> R<Pending> {
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
            let l = L { r, f, ieee: mode.ieee, m: mask >> lane & 1 != 0, d: self.v[f.vdst as usize][lane], lane };
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
    pub(super) fn vcmp(&self, name: &str, f: &V, exec: u32) -> R<(bool, u32)> {
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
            let l = L { r: [a, b, 0], f, ieee: false, m: false, d: 0, lane };
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

    /// VOP3P: packed f16 and the f16/f32 mixed FMAs.
    pub(super) fn vop3p(&self, name: &str, f: &V, exec: u32) -> R<Pending> {
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

    pub(super) fn vopd(&mut self, inst: &Inst, mode: Mode) -> R<()> {
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
}
