//! GLOBAL and FLAT 32-bit atomics on device memory.
//!
//! Each active lane's read-modify-write is applied whole, in lane order (lane 0
//! first): lanes of one instruction that name the same address see each
//! other's results in that order. The ISA leaves the order between lanes
//! unspecified; a kernel whose result depends on it is wrong on silicon.

use super::*;

/// The new memory value of a 32-bit atomic `op` (the name without its
/// encoding prefix) on the old value `old`, with data `src` and, for
/// cmpswap, compare value `cmp` (the ISA's per-instruction pseudocode).
pub(super) fn rmw32(op: &str, old: u32, src: u32, cmp: u32) -> Option<u32> {
    Some(match op {
        "atomic_swap_b32" => src,
        "atomic_cmpswap_b32" => {
            if old == cmp {
                src
            } else {
                old
            }
        }
        "atomic_add_u32" => old.wrapping_add(src),
        "atomic_sub_u32" => old.wrapping_sub(src),
        // Subtraction clamped at zero.
        "atomic_csub_u32" => old.saturating_sub(src),
        "atomic_min_i32" => (old as i32).min(src as i32) as u32,
        "atomic_max_i32" => (old as i32).max(src as i32) as u32,
        "atomic_min_u32" => old.min(src),
        "atomic_max_u32" => old.max(src),
        "atomic_and_b32" => old & src,
        "atomic_or_b32" => old | src,
        "atomic_xor_b32" => old ^ src,
        // A wrapping counter in [0, src].
        "atomic_inc_u32" => {
            if old >= src {
                0
            } else {
                old + 1
            }
        }
        // A wrapping counter down from src: 0 and values above src reload src.
        "atomic_dec_u32" => {
            if old == 0 || old > src {
                src
            } else {
                old - 1
            }
        }
        _ => return None,
    })
}

impl Wave {
    /// A GLOBAL or FLAT 32-bit atomic. With GLC set the pre-op value of each
    /// lane's dword goes to VDST (and the instruction counts on vmcnt, as a
    /// load); without it nothing is returned (it counts on vscnt, as a store).
    /// cmpswap's data is the VGPR pair {DATA: the new value, DATA+1: the compare
    /// value}, the ISA's `DATA[31:0]` and `DATA[63:32]`.
    pub(super) fn vmem_atomic(&mut self, inst: &Inst, env: &mut Env) -> R<()> {
        let name = inst.name;
        let op = name.split_once('_').map(|x| x.1).unwrap_or("");
        if rmw32(op, 0, 0, 0).is_none() {
            return Err(Fault::new(format!("{name} is not implemented")));
        }
        let w1 = inst.w1;
        let (data_r, vdst) = (bits(w1, 15, 8) as usize, bits(w1, 31, 24) as usize);
        let glc = bits(inst.w0, 14, 14) != 0;
        let cmp_r = (op == "atomic_cmpswap_b32").then_some(data_r + 1);
        if cmp_r.is_some_and(|r| r > 255) {
            return Err(Fault::new(format!("{name}: the data pair runs past v255")));
        }
        let exec = self.exec();
        let sbase = self.saddr_base(inst)?;
        env.counts.vmem_atomics += 1;
        let mut device_ranges = ([(0u64, 0u64); 32], 0);
        for lane in 0..32 {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let addr = self.lane_address(inst, sbase, lane);
            if inst.enc == Enc::Flat {
                let hi = (addr >> 32) as u32;
                if hi == mem::SHARED_APERTURE_HI {
                    return Err(Fault::lane(lane, format!("{name} on workgroup memory is not implemented")));
                }
                if hi == mem::PRIVATE_APERTURE_HI {
                    return Err(Fault::lane(lane, "flat access to the scratch aperture: scratch is not implemented"));
                }
            }
            let fail = |e: String| Fault::lane(lane, format!("{name}: {e}"));
            if let Some(t) = env.race.as_deref_mut() {
                t.atomic(env.mem, lane, addr, 4);
            }
            let mut b = [0u8; 4];
            env.mem.read(addr, &mut b).map_err(fail)?;
            let old = u32::from_le_bytes(b);
            let cmp = cmp_r.map_or(0, |r| self.v[r][lane]);
            let new = rmw32(op, old, self.v[data_r][lane], cmp).unwrap();
            env.mem.write(addr, &new.to_le_bytes()).map_err(fail)?;
            env.counts.vmem_atomic_bytes += 4;
            device_ranges.0[device_ranges.1] = (addr, 4);
            device_ranges.1 += 1;
            if glc {
                self.v[vdst][lane] = old;
            }
        }
        if glc {
            // A returning atomic waits one memory latency like a load, and counts on vmcnt.
            let request = load_rounds::distinct_bytes(&mut device_ranges.0[..device_ranges.1]);
            self.load_rounds.issue(inst.enc == Enc::Flat, request);
        } else if let Some(t) = env.race.as_deref_mut() {
            // Counted on vscnt, but no plain store: it is nothing a release waits for.
            t.store_issued(None);
        }
        Ok(())
    }
}
