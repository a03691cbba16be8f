//! VALU operands and lane functions: the operand fields of every VALU
//! encoding, the per-lane inputs, the per-lane operations by name, and comparisons.

use super::*;

/// The operand fields of a VALU instruction, whatever its encoding.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct V {
    pub(super) vdst: u32,
    pub(super) src: [u32; 3],
    pub(super) abs: u32,
    pub(super) neg: u32,
    pub(super) neg_hi: u32,
    pub(super) opsel: u32,
    pub(super) opsel_hi: u32,
    pub(super) clamp: bool,
    pub(super) omod: u32,
    pub(super) sdst: u32,
    pub(super) lit: Option<u32>,
    pub(super) dpp16: Option<u32>,
}

/// Whether a VOP1/VOP2/VOPC instruction's sources and destination are 16-bit
/// ("true16": bit 7 of a VGPR field selects the high half).
pub(super) fn t16(name: &str) -> (bool, bool) {
    match name {
        "v_cvt_f32_f16" | "v_cvt_i32_i16" | "v_cvt_u32_u16" => (true, false),
        "v_cvt_f16_f32" => (false, true),
        _ if name.starts_with("v_pk_") => (false, false),
        _ if ["_f16", "_b16", "_i16", "_u16"].iter().any(|s| name.contains(s)) => (true, true),
        _ => (false, false),
    }
}

pub(super) fn vfields(inst: &Inst) -> V {
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
pub(super) struct L<'a> {
    pub(super) r: [u64; 3],
    pub(super) f: &'a V,
    pub(super) ieee: bool,
    /// The lane's bit of the mask operand (VCC or the SGPR source of cndmask / carry-in).
    pub(super) m: bool,
    /// The destination's old value (fmac).
    pub(super) d: u32,
    /// The lane's index in the wave (mbcnt).
    pub(super) lane: usize,
}

impl L<'_> {
    pub(super) fn u(&self, i: usize) -> u32 {
        self.r[i] as u32
    }
    pub(super) fn i(&self, i: usize) -> i32 {
        self.r[i] as u32 as i32
    }
    pub(super) fn q(&self, i: usize) -> u64 {
        self.r[i]
    }
    /// f32 operand with abs / neg.
    pub(super) fn f(&self, i: usize) -> f32 {
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
    pub(super) fn u16(&self, i: usize) -> u16 {
        let x = self.r[i] as u32;
        (if self.f.opsel >> i & 1 != 0 { x >> 16 } else { x }) as u16
    }
    /// f16 operand with abs / neg.
    pub(super) fn h(&self, i: usize) -> f16 {
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

pub(super) type LaneFn = fn(&L) -> (u64, bool);

pub(super) fn fr(x: f32) -> (u64, bool) {
    (x.to_bits() as u64, false)
}
pub(super) fn ur(x: u32) -> (u64, bool) {
    (x as u64, false)
}
pub(super) fn hr(x: f16) -> (u64, bool) {
    (x.to_bits() as u64, false)
}

pub(super) fn f_add(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(a + b, &[a, b]))
}
pub(super) fn f_sub(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(a - b, &[a, b]))
}
pub(super) fn f_subrev(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(b - a, &[a, b]))
}
pub(super) fn f_mul(l: &L) -> (u64, bool) {
    let (a, b) = (l.f(0), l.f(1));
    fr(nan32(a * b, &[a, b]))
}
pub(super) fn fma3(a: f32, b: f32, c: f32) -> f32 {
    nan32(a.mul_add(b, c), &[a, b, c])
}

/// The lane function of a per-lane VALU operation, or None.
pub(super) fn lane_fn(name: &str) -> Option<(LaneFn, [K; 3])> {
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
        // The 16-bit bitwise ops and shifts (shift amount: S0's low 4 bits).
        "v_and_b16" => |l| ((l.u16(0) & l.u16(1)) as u64, false),
        "v_or_b16" => |l| ((l.u16(0) | l.u16(1)) as u64, false),
        "v_xor_b16" => |l| ((l.u16(0) ^ l.u16(1)) as u64, false),
        "v_lshlrev_b16" => |l| ((l.u16(1) << (l.u16(0) & 15)) as u64, false),
        "v_lshrrev_b16" => |l| ((l.u16(1) >> (l.u16(0) & 15)) as u64, false),
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
        // S1 plus the set bits of S0 below this lane: the low half of the
        // 64-bit thread mask for `lo`; a wave32 lane has none in the high half.
        "v_mbcnt_lo_u32_b32" => |l| ur((l.u(0) & ((1u64 << l.lane) - 1) as u32).count_ones().wrapping_add(l.u(1))),
        "v_mbcnt_hi_u32_b32" => |l| ur(l.u(1)),
        "v_bfi_b32" => |l| ur((l.u(0) & l.u(1)) | (!l.u(0) & l.u(2))),
        // {S0, S1} (S0 the high dword) shifted right by S2[4:0], the low dword kept.
        "v_alignbit_b32" => |l| ur(((((l.u(0) as u64) << 32) | l.u(1) as u64) >> (l.u(2) & 31)) as u32),
        "v_perm_b32" => |l| {
            let data = ((l.u(0) as u64) << 32) | l.u(1) as u64;
            let mut d = 0u32;
            for i in 0..4 {
                d |= (byte_permute(data, (l.u(2) >> (8 * i)) as u8) as u32) << (8 * i);
            }
            ur(d)
        },
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
pub(super) fn wide_fn(name: &str) -> Option<(LaneFn, [K; 3])> {
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

/// One byte of `v_perm_b32`: selectors 0-7 pick a byte of `data` ({S0, S1}),
/// 8-11 replicate the sign bit of byte 1, 3, 5 or 7, 12 gives 0x00 and 13 and
/// above 0xff (RDNA3 ISA, `V_PERM_B32`).
fn byte_permute(data: u64, sel: u8) -> u8 {
    match sel {
        0..=7 => (data >> (8 * sel)) as u8,
        8..=11 => {
            let sign_bit = 16 * (sel as u32 - 8) + 15;
            if data >> sign_bit & 1 == 1 { 0xff } else { 0 }
        }
        12 => 0,
        _ => 0xff,
    }
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
pub(super) enum Cond {
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

pub(super) fn parse_cmp(name: &str) -> Option<(bool, Cond, &str)> {
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

// The comparisons are written as the ISA defines them: with a NaN operand,
// `a < b || a > b` is false where `a != b` is true, and `!(a >= b)` is true
// where `a < b` is false; clippy's rewrites would change those results.
#[allow(clippy::double_comparisons, clippy::neg_cmp_op_on_partial_ord)]
pub(super) fn fcmp(c: Cond, a: f64, b: f64) -> Option<bool> {
    Some(match c {
        Cond::Lg => a < b || a > b,
        Cond::O => !a.is_nan() && !b.is_nan(),
        Cond::U => a.is_nan() || b.is_nan(),
        Cond::Nge => !(a >= b),
        Cond::Nlg => !(a < b || a > b),
        Cond::Ngt => !(a > b),
        Cond::Nle => !(a <= b),
        Cond::Neq => a != b,
        Cond::Nlt => !(a < b),
        Cond::Ne | Cond::Class => return None,
        _ => return ordered(c, a, b),
    })
}

pub(super) fn icmp<T: Ord>(c: Cond, a: T, b: T) -> Option<bool> {
    if matches!(c, Cond::Ne) { Some(a != b) } else { ordered(c, a, b) }
}

/// The conditions the float and the integer compares share.
fn ordered<T: PartialOrd>(c: Cond, a: T, b: T) -> Option<bool> {
    Some(match c {
        Cond::F => false,
        Cond::Lt => a < b,
        Cond::Eq => a == b,
        Cond::Le => a <= b,
        Cond::Gt => a > b,
        Cond::Ge => a >= b,
        Cond::T => true,
        _ => return None,
    })
}
