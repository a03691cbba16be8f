//! Cross-lane operations: DPP16 source selection, v_readlane, v_readfirstlane,
//! v_permlanex16.

use super::*;

impl Wave {
    /// The source-0 values after DPP16 and the lanes DPP lets write.
    pub(super) fn dpp16_src0(&self, f: &V, exec: u32) -> R<([u32; 32], u32)> {
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

    /// v_readlane_b32, v_readfirstlane_b32, v_permlanex16_b32.
    pub(super) fn cross_lane(&self, name: &str, f: &V, exec: u32) -> R<Option<Pending>> {
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
}
