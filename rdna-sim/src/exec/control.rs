//! The step: fetching, waits (including strict-wait mode), dispatch by
//! encoding, and SOPP (branches, barriers, waitcnt, end of program).

use super::*;

/// Each instruction's index in the kernel, by address (the branch targets).
type Index = std::collections::HashMap<u64, usize>;

impl Wave {
    /// Executes `insts[self.pc]`.
    pub fn step(&mut self, insts: &[Inst], index: &Index, env: &mut Env) -> R<Step> {
        let inst = insts.get(self.pc).ok_or_else(|| Fault::new("program counter ran off the end of the kernel"))?;
        let next = self.pc + 1;
        self.pc = next;
        let name = inst.name;
        if env.mode.strict_wait
            && let Some((ctr, sgpr, reg, n)) = load_dest(inst)
        {
            let exec = self.exec();
            let mask = if !inst.name.contains("d16") {
                u32::MAX
            } else if inst.name.contains("d16_hi") {
                0xffff_0000
            } else {
                0x0000_ffff
            };
            self.exec_inst(inst, index, env)?;
            let vals: Vec<[u32; 32]> =
                (reg..reg + n).map(|r| if sgpr { [self.s[r]; 32] } else { self.v[r.min(255)] }).collect();
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
        let _ = name;
        self.exec_inst(inst, index, env)
    }

    /// Completes the oldest loads until at most `vm` count on vmcnt and `lgkm` on lgkmcnt.
    pub(super) fn wait(&mut self, vm: u32, lgkm: u32) {
        self.load_rounds.wait(vm, lgkm);
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

    pub(super) fn exec_inst(&mut self, inst: &Inst, index: &Index, env: &mut Env) -> R<Step> {
        let name = inst.name;
        match inst.enc {
            Enc::Sopp => return self.sopp(inst, index, env),
            Enc::Sop1 | Enc::Sop2 | Enc::Sopc | Enc::Sopk => {
                env.counts.salu += 1;
                if name == "s_waitcnt_vscnt"
                    && let Some(t) = env.race.as_deref_mut()
                {
                    // Until at most S0 + SIMM16 stores are outstanding (S0 is `null` in practice).
                    let sdst = bits(inst.w0, 22, 16);
                    let s0 = if sdst == NULL { 0 } else { self.sread32(sdst, None)? };
                    t.vscnt_wait(s0.wrapping_add(inst.w0 & 0xffff));
                }
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
                // Cache invalidation: the simulated memory has no caches, but the race
                // checker asks for them after an acquire.
                "buffer_gl0_inv" | "buffer_gl1_inv" => {
                    env.counts.other += 1;
                    if let Some(t) = env.race.as_deref_mut() {
                        t.invalidate(name == "buffer_gl1_inv");
                    }
                }
                _ => return Err(Fault::new(format!("{name} is not implemented"))),
            },
            Enc::Scratch => return Err(Fault::new(format!("{name}: scratch memory is not implemented"))),
        }
        Ok(Step::Next)
    }

    pub(super) fn sopp(&mut self, inst: &Inst, index: &Index, env: &mut Env) -> R<Step> {
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
                env.counts.vmem_load_rounds += self.load_rounds.now();
                self.status = Status::Done;
                return Ok(Step::End);
            }
            "s_barrier" => {
                env.counts.barriers += 1;
                self.barriers += 1;
                return Ok(Step::Barrier);
            }
            // Scheduling and fetch hints, with no effect on the state the simulator models.
            "s_nop" | "s_clause" | "s_delay_alu" | "s_sleep" | "s_waitcnt_depctr" | "s_set_inst_prefetch_distance" => {
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
}

/// The destination of a load or a returning atomic: (counter, SGPRs?, first register, registers).
pub(super) fn load_dest(inst: &Inst) -> Option<(Ctr, bool, usize, usize)> {
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
                "ds_load_b64" | "ds_load_2addr_b32" | "ds_load_2addr_stride64_b32" => 2,
                "ds_load_b96" => 3,
                "ds_load_b128" => 4,
                n if n.starts_with("ds_load_") || n == "ds_bpermute_b32" || n == "ds_permute_b32" => 1,
                _ => return None,
            };
            Some((Ctr::Lgkm, false, vdst, n))
        }
        Enc::Global | Enc::Flat => {
            let op = name.split_once('_')?.1;
            // An atomic with GLC returns the old value: a load of one dword.
            let returning_atomic = op.starts_with("atomic_") && bits(inst.w0, 14, 14) != 0;
            if !op.starts_with("load_") && !returning_atomic {
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
