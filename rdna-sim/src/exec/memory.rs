//! Memory instructions: scalar loads (SMEM), workgroup memory (DS), and
//! GLOBAL/FLAT loads and stores (their atomics are in `atomics.rs`).

use super::*;

fn sext(x: u32, bitsn: u32) -> i64 {
    ((x as i64) << (64 - bitsn)) >> (64 - bitsn)
}

impl Wave {
    pub(super) fn smem(&mut self, inst: &Inst, env: &mut Env) -> R<()> {
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
        if let Some(t) = env.race.as_deref_mut() {
            t.global(env.mem, None, addr, 4 * n, None);
        }
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

    pub(super) fn ds(&mut self, inst: &Inst, env: &mut Env) -> R<()> {
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
                    let n = dwords(name);
                    let v = load(env.lds, n)?;
                    note_lds(env, lane, a, 4 * n, false);
                    for (i, x) in v.into_iter().enumerate() {
                        self.v[vdst + i][lane] = x;
                    }
                }
                "ds_load_u8" | "ds_load_i8" | "ds_load_u16" | "ds_load_i16" => {
                    let n = if name.ends_with('8') { 1 } else { 2 };
                    let a = chk(n)?;
                    note_lds(env, lane, a, n, false);
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
                    let n = dwords(name);
                    let a = chk(4 * n)?;
                    note_lds(env, lane, a, 4 * n, true);
                    for i in 0..n {
                        env.lds[a + 4 * i..a + 4 * i + 4].copy_from_slice(&self.v[d0 + i][lane].to_le_bytes());
                    }
                }
                "ds_store_b8" | "ds_store_b16" | "ds_store_b16_d16_hi" | "ds_store_b8_d16_hi" => {
                    let n = if name.starts_with("ds_store_b8") { 1 } else { 2 };
                    let a = chk(n)?;
                    note_lds(env, lane, a, n, true);
                    let x = self.v[d0][lane] >> if name.ends_with("_hi") { 16 } else { 0 };
                    for i in 0..n {
                        env.lds[a + i] = (x >> (8 * i)) as u8;
                    }
                }
                // Two dwords at ADDR + OFFSET0 * 4 and ADDR + OFFSET1 * 4 (the
                // 8-bit offsets of the word's low 16 bits), or in units of 64
                // dwords for the stride64 forms; the store's second dword comes
                // from DATA1.
                "ds_load_2addr_b32"
                | "ds_store_2addr_b32"
                | "ds_load_2addr_stride64_b32"
                | "ds_store_2addr_stride64_b32" => {
                    let base = self.v[addr_r][lane] as usize;
                    let d1 = bits(w1, 23, 16) as usize;
                    let unit = if name.contains("stride64") { 4 * 64 } else { 4 };
                    for (i, off) in [bits(w0, 7, 0), bits(w0, 15, 8)].into_iter().enumerate() {
                        let a = base + unit * off as usize;
                        if a + 4 > lds_len {
                            return Err(Fault::lane(
                                lane,
                                format!("4-byte LDS access at {a:#x} past the workgroup's {lds_len} bytes"),
                            ));
                        }
                        let store = name.starts_with("ds_store");
                        if let Some(t) = env.race.as_deref_mut() {
                            t.lds(lane, a, 4, store);
                        }
                        if store {
                            let x = self.v[if i == 0 { d0 } else { d1 }][lane];
                            env.lds[a..a + 4].copy_from_slice(&x.to_le_bytes());
                        } else {
                            self.v[vdst + i][lane] = u32::from_le_bytes(env.lds[a..a + 4].try_into().unwrap());
                        }
                    }
                }
                n => return Err(Fault::new(format!("{n} is not implemented"))),
            }
        }
        Ok(())
    }

    /// The GLOBAL or FLAT address of `lane`: `sbase` (the SADDR pair, when the
    /// instruction uses it) plus the lane's 32-bit VGPR offset, or the lane's
    /// 64-bit VGPR address; plus the instruction's offset.
    pub(super) fn lane_address(&self, inst: &Inst, sbase: Option<u64>, lane: usize) -> u64 {
        let offset = sext(bits(inst.w0, 12, 0), 13) as u64;
        let addr_r = bits(inst.w1, 7, 0) as usize;
        match sbase {
            Some(base) => base.wrapping_add(self.v[addr_r][lane] as u64).wrapping_add(offset),
            None => (self.v[addr_r][lane] as u64 | (self.v[addr_r + 1][lane] as u64) << 32).wrapping_add(offset),
        }
    }

    /// The SADDR pair of a GLOBAL instruction that uses one (FLAT has none; `null` or
    /// `0x7d` selects 64-bit VGPR addressing).
    pub(super) fn saddr_base(&self, inst: &Inst) -> R<Option<u64>> {
        let saddr = bits(inst.w1, 22, 16);
        if inst.enc == Enc::Global && saddr != NULL && saddr != 0x7d {
            Ok(Some(self.sread(saddr, None, K::B64)?))
        } else {
            Ok(None)
        }
    }

    /// GLOBAL and FLAT loads and stores. A flat address in the LDS aperture reaches
    /// the workgroup's memory; any other address must lie in a live allocation.
    pub(super) fn vmem(&mut self, inst: &Inst, env: &mut Env) -> R<()> {
        let name = inst.name;
        let op = name.split_once('_').map(|x| x.1).unwrap_or("");
        if op.starts_with("atomic_") {
            return self.vmem_atomic(inst, env);
        }
        let w1 = inst.w1;
        let (data_r, vdst) = (bits(w1, 15, 8) as usize, bits(w1, 31, 24) as usize);
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
        let sbase = self.saddr_base(inst)?;
        // The first lane that stores to device memory, for the release check of the race checker.
        let mut first_global_store: Option<(usize, u64)> = None;
        // The device-memory ranges of a load's active lanes, for its request bytes.
        let (mut device_ranges, mut device_lanes) = ([(0u64, 0u64); 32], 0);
        for lane in 0..32 {
            if exec >> lane & 1 == 0 {
                continue;
            }
            let addr = self.lane_address(inst, sbase, lane);
            let lds_addr = (inst.enc == Enc::Flat && (addr >> 32) as u32 == mem::SHARED_APERTURE_HI)
                .then_some(addr as u32 as usize);
            // Bytes that reach workgroup memory through the flat aperture move no device memory.
            match (lds_addr, store) {
                (Some(_), _) => env.counts.flat_lds_bytes += n as u64,
                (None, true) => {
                    env.counts.vmem_store_bytes += n as u64;
                    first_global_store.get_or_insert((lane, addr));
                }
                (None, false) => {
                    env.counts.vmem_load_bytes += n as u64;
                    device_ranges[device_lanes] = (addr, n as u64);
                    device_lanes += 1;
                }
            }
            if inst.enc == Enc::Flat && (addr >> 32) as u32 == mem::PRIVATE_APERTURE_HI {
                return Err(Fault::lane(lane, "flat access to the scratch aperture: scratch is not implemented"));
            }
            let fail = |e: String| Fault::lane(lane, format!("{name}: {e}"));
            let mut bytes = if store {
                let mut bytes = Vec::with_capacity(n);
                let hi = op.contains("d16_hi");
                for i in 0..n.div_ceil(4) {
                    let x = self.v[data_r + i][lane];
                    bytes.extend_from_slice(&(if hi { x >> 16 } else { x }).to_le_bytes());
                }
                bytes.truncate(n);
                bytes
            } else {
                vec![0u8; n.max(4)]
            };
            if let Some(a) = lds_addr
                && a + n > env.lds.len()
            {
                return Err(fail(format!("flat LDS access at {a:#x} past the workgroup's {} bytes", env.lds.len())));
            }
            if let Some(t) = env.race.as_deref_mut() {
                match lds_addr {
                    Some(a) => t.lds(lane, a, n, store),
                    None => t.global(env.mem, Some(lane), addr, n, store.then_some(&bytes[..])),
                }
            }
            match (lds_addr, store) {
                (Some(a), true) => env.lds[a..a + n].copy_from_slice(&bytes),
                (None, true) => env.mem.write(addr, &bytes).map_err(fail)?,
                (Some(a), false) => bytes[..n].copy_from_slice(&env.lds[a..a + n]),
                (None, false) => env.mem.read(addr, &mut bytes[..n]).map_err(fail)?,
            }
            if !store {
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
        if store && let Some(t) = env.race.as_deref_mut() {
            t.store_issued(first_global_store.map(|(lane, addr)| (lane, addr, n)));
        }
        if !store {
            let request = load_rounds::distinct_bytes(&mut device_ranges[..device_lanes]);
            env.counts.vmem_load_request_bytes += request;
            self.load_rounds.issue(inst.enc == Enc::Flat, request);
        }
        Ok(())
    }
}

/// The dwords a `ds_load_b<bits>` or `ds_store_b<bits>` moves (b32 to b128).
fn dwords(name: &str) -> usize {
    name.rsplit_once('b').and_then(|(_, bits)| bits.parse::<usize>().ok()).map_or(4, |bits| bits / 32)
}

/// Records an LDS access of `n` bytes at `a` with the race checker, if it runs.
fn note_lds(env: &mut Env, lane: usize, a: usize, n: usize, store: bool) {
    if let Some(t) = env.race.as_deref_mut() {
        t.lds(lane, a, n, store);
    }
}
