//! A kernel dispatch as the hardware and the HIP runtime set it up (LLVM's
//! "AMDGPU Usage", sections "Initial Kernel Execution State" and "Kernel
//! Descriptor"; the HSA AQL kernel dispatch packet layout).

use crate::codeobj::Kernel;
use crate::exec::{Counts, EXEC, Env, Mode, Status, Step, Wave};
use crate::mem::Memory;
use crate::race::{Race, Rng, Schedule, Tracker};

/// The largest workgroup memory of a gfx11 workgroup.
pub const MAX_LDS: u32 = 64 * 1024;

/// One launch.
#[derive(Clone, Debug)]
pub struct Launch<'a> {
    /// Workgroups per dimension.
    pub grid: [u32; 3],
    /// Work-items per workgroup per dimension.
    pub block: [u32; 3],
    /// Dynamic workgroup memory in bytes (added to the kernel's fixed size).
    pub dynamic_lds: u32,
    /// The explicit kernel arguments, packed at their metadata offsets.
    pub kernarg: &'a [u8],
    pub mode: Mode,
    /// Instructions one wave may execute before the launch is declared hung.
    pub max_wave_insts: u64,
    /// The order in which the waves of a workgroup run between barriers.
    pub schedule: Schedule,
    /// Runs the workgroups one at a time in reversed linear order (the last
    /// first) instead of linear order: a kernel whose last workgroup to arrive
    /// does the final work then sees another workgroup last.
    pub workgroups_reversed: bool,
    /// Runs the race checker ([`crate::race`]): with it, [`launch`] fails
    /// when the launch has a race and [`launch_checked`] returns them.
    pub race_check: bool,
    /// Declared same-value words, (device address, length): several writes of
    /// the same bytes there are not races (see [`crate::race`]).
    pub same_value: &'a [(u64, usize)],
}

impl Default for Launch<'_> {
    fn default() -> Self {
        Launch {
            grid: [1; 3],
            block: [1; 3],
            dynamic_lds: 0,
            kernarg: &[],
            mode: Mode::default(),
            max_wave_insts: 50_000_000,
            schedule: Schedule::default(),
            workgroups_reversed: false,
            race_check: false,
            same_value: &[],
        }
    }
}

located_error!(
    /// A failed launch: what, where and in which lane.
    LaunchError { kernel: String },
    "kernel {}: {}"
);

/// Builds the kernarg segment: the explicit arguments, then the hidden ones the metadata declares.
fn kernarg_segment(k: &Kernel, l: &Launch) -> Result<Vec<u8>, String> {
    let size = (k.kernarg_segment_size.max(k.kd.kernarg_size) as usize).max(l.kernarg.len());
    let mut seg = vec![0u8; size];
    let explicit_end = k
        .args
        .iter()
        .filter(|a| !a.value_kind.starts_with("hidden_"))
        .map(|a| (a.offset + a.size) as usize)
        .max()
        .unwrap_or(0);
    if l.kernarg.len() < explicit_end {
        return Err(format!("{} bytes of arguments given, the metadata needs {explicit_end}", l.kernarg.len()));
    }
    seg[..l.kernarg.len()].copy_from_slice(l.kernarg);
    for a in k.args.iter().filter(|a| a.value_kind.starts_with("hidden_")) {
        let o = a.offset as usize;
        let dim = |s: &str| -> usize {
            if s.ends_with("_x") {
                0
            } else if s.ends_with("_y") {
                1
            } else {
                2
            }
        };
        let v: u64 = match a.value_kind.as_str() {
            "hidden_block_count_x" | "hidden_block_count_y" | "hidden_block_count_z" => {
                l.grid[dim(&a.value_kind)] as u64
            }
            "hidden_group_size_x" | "hidden_group_size_y" | "hidden_group_size_z" => l.block[dim(&a.value_kind)] as u64,
            // The grid is a whole number of workgroups: no partial group.
            "hidden_remainder_x" | "hidden_remainder_y" | "hidden_remainder_z" => 0,
            "hidden_global_offset_x" | "hidden_global_offset_y" | "hidden_global_offset_z" => 0,
            "hidden_grid_dims" => {
                if l.grid[2] * l.block[2] > 1 {
                    3
                } else if l.grid[1] * l.block[1] > 1 {
                    2
                } else {
                    1
                }
            }
            "hidden_dynamic_lds_size" => l.dynamic_lds as u64,
            "hidden_none" => 0,
            other => return Err(format!("hidden argument {other} is not implemented")),
        };
        let bytes = v.to_le_bytes();
        let n = a.size as usize;
        if o + n > seg.len() || n > 8 {
            return Err(format!("hidden argument {} at {o}+{n} outside the kernarg segment", a.value_kind));
        }
        seg[o..o + n].copy_from_slice(&bytes[..n]);
    }
    Ok(seg)
}

/// The 64-byte HSA kernel dispatch packet.
fn dispatch_packet(l: &Launch, group_segment_size: u32, kernarg_addr: u64) -> [u8; 64] {
    let mut p = [0u8; 64];
    let dims: u16 = if l.grid[2] * l.block[2] > 1 {
        3
    } else if l.grid[1] * l.block[1] > 1 {
        2
    } else {
        1
    };
    // header: HSA_PACKET_TYPE_KERNEL_DISPATCH (2), barrier bit, system-scope fences.
    let header: u16 = 2 | 1 << 8 | 2 << 9 | 2 << 11;
    p[0..2].copy_from_slice(&header.to_le_bytes());
    p[2..4].copy_from_slice(&dims.to_le_bytes());
    for d in 0..3 {
        p[4 + 2 * d..6 + 2 * d].copy_from_slice(&(l.block[d] as u16).to_le_bytes());
        p[12 + 4 * d..16 + 4 * d].copy_from_slice(&(l.grid[d] * l.block[d]).to_le_bytes());
    }
    p[28..32].copy_from_slice(&group_segment_size.to_le_bytes());
    p[40..48].copy_from_slice(&kernarg_addr.to_le_bytes());
    p
}

/// Runs every wave of every workgroup of the launch to completion. With
/// `race_check`, a launch with a race is an error listing each race (both
/// instructions, waves, lanes and the bytes).
pub fn launch(mem: &mut Memory, k: &Kernel, l: &Launch) -> Result<Counts, LaunchError> {
    let (counts, races) = launch_checked(mem, k, l)?;
    if races.is_empty() {
        return Ok(counts);
    }
    let mut msg = format!("{} race{} (schedule {}):", races.len(), if races.len() == 1 { "" } else { "s" }, l.schedule);
    for r in races.iter().take(MAX_REPORTED) {
        msg += &format!("\n  {}", r.describe(&k.insts));
    }
    if races.len() > MAX_REPORTED {
        msg += &format!("\n  and {} more", races.len() - MAX_REPORTED);
    }
    Err(LaunchError { kernel: k.name.clone(), msg })
}

/// Races listed in a launch error; the rest are counted.
const MAX_REPORTED: usize = 8;

/// [`launch`], returning the races the checker found (none without
/// `race_check`) instead of failing on them.
pub fn launch_checked(mem: &mut Memory, k: &Kernel, l: &Launch) -> Result<(Counts, Vec<Race>), LaunchError> {
    let fail = |msg: String| LaunchError { kernel: k.name.clone(), msg };
    let threads = l.block[0] as u64 * l.block[1] as u64 * l.block[2] as u64;
    if threads == 0 || threads > 1024 || l.grid.contains(&0) {
        return Err(fail(format!("launch of {:?} workgroups of {:?} work-items is invalid", l.grid, l.block)));
    }
    if l.block[0] > 1024 || l.block[1] > 1024 || l.block[2] > 1024 {
        return Err(fail("a workgroup dimension exceeds 1024 (10 bits of v0)".into()));
    }
    let kd = &k.kd;
    let lds_size = kd.group_segment_fixed_size.max(k.group_segment_fixed_size) + l.dynamic_lds;
    if lds_size > MAX_LDS {
        return Err(fail(format!("{lds_size} bytes of workgroup memory exceed {MAX_LDS}")));
    }
    if kd.private_segment_fixed_size > 0 || kd.uses_dynamic_stack() {
        return Err(fail("scratch (private segment) is not implemented".into()));
    }
    for (on, what) in [
        (kd.enable_sgpr_private_segment_buffer(), "private segment buffer"),
        (kd.enable_sgpr_queue_ptr(), "queue pointer"),
        (kd.enable_sgpr_dispatch_id(), "dispatch id"),
        (kd.enable_sgpr_flat_scratch_init(), "flat scratch init"),
        (kd.enable_sgpr_private_segment_size(), "private segment size"),
        (kd.workgroup_info_enabled(), "workgroup info SGPR"),
    ] {
        if on {
            return Err(fail(format!("the descriptor enables the {what}, which is not implemented")));
        }
    }
    let seg = kernarg_segment(k, l).map_err(fail)?;
    // The segment is allocated in whole 16-byte units (the HSA kernarg segment
    // alignment), as the runtime does: the compiler may read a final partial unit
    // with one wide scalar load.
    let kernarg_addr = mem.alloc(seg.len().max(1).next_multiple_of(16), &format!("{} kernarg segment", k.name));
    mem.write(kernarg_addr, &seg).map_err(fail)?;
    let packet = dispatch_packet(l, lds_size, kernarg_addr);
    let packet_addr = mem.alloc(64, &format!("{} dispatch packet", k.name));
    mem.write(packet_addr, &packet).map_err(fail)?;
    let mut tracker = l.race_check.then(|| Tracker::new(l.grid, lds_size, l.same_value));
    let result = run_grid(mem, k, l, lds_size, kernarg_addr, packet_addr, tracker.as_mut());
    mem.free(kernarg_addr).ok();
    mem.free(packet_addr).ok();
    Ok((result?, tracker.map(Tracker::into_races).unwrap_or_default()))
}

fn run_grid(
    mem: &mut Memory,
    k: &Kernel,
    l: &Launch,
    lds_size: u32,
    kernarg: u64,
    packet: u64,
    mut race: Option<&mut Tracker>,
) -> Result<Counts, LaunchError> {
    let kd = &k.kd;
    let mut counts = Counts { hits: vec![0; k.insts.len()], ..Counts::default() };
    let threads = l.block[0] * l.block[1] * l.block[2];
    let nwaves = threads.div_ceil(32);
    let mut user: Vec<u32> = Vec::new();
    if kd.enable_sgpr_dispatch_ptr() {
        user.extend([packet as u32, (packet >> 32) as u32]);
    }
    if kd.enable_sgpr_kernarg_segment_ptr() {
        user.extend([kernarg as u32, (kernarg >> 32) as u32]);
    }
    let user_count = kd.user_sgpr_count() as usize;
    if user.len() > user_count {
        return Err(LaunchError {
            kernel: k.name.clone(),
            msg: format!("USER_SGPR_COUNT {user_count} is less than the {} enabled user SGPRs", user.len()),
        });
    }
    let mut rng = Rng::new(match l.schedule {
        Schedule::Random(seed) => seed,
        _ => 0,
    });
    let [nx, ny, nz] = l.grid.map(u64::from);
    let groups = nx * ny * nz;
    for i in 0..groups {
        let linear = if l.workgroups_reversed { groups - 1 - i } else { i };
        let (gx, gy, gz) = ((linear % nx) as u32, (linear / nx % ny) as u32, (linear / (nx * ny)) as u32);
        if let Some(t) = race.as_deref_mut() {
            t.begin_workgroup(linear as u32);
        }
        let mut lds = vec![0u8; lds_size as usize];
        let mut waves: Vec<Wave> = (0..nwaves)
            .map(|w| {
                let mut wave = Wave::default();
                wave.s[..user.len()].copy_from_slice(&user);
                let mut s = user_count;
                for (d, g) in [gx, gy, gz].into_iter().enumerate() {
                    if kd.workgroup_id_enabled(d as u32) {
                        wave.s[s] = g;
                        s += 1;
                    }
                }
                let mut exec = 0u32;
                for lane in 0..32 {
                    let t = w * 32 + lane;
                    if t >= threads {
                        continue;
                    }
                    exec |= 1 << lane;
                    let x = t % l.block[0];
                    let y = t / l.block[0] % l.block[1];
                    let z = t / (l.block[0] * l.block[1]);
                    let (y, z) = match kd.vgpr_workitem_id() {
                        0 => (0, 0),
                        1 => (y, 0),
                        _ => (y, z),
                    };
                    wave.v[0][lane as usize] = x | y << 10 | z << 20;
                }
                wave.s[EXEC as usize] = exec;
                wave
            })
            .collect();
        let mut ctx = Group { k, l, mem, lds: &mut lds, counts: &mut counts, race: race.as_deref_mut() };
        run_workgroup(&mut waves, &mut ctx, &mut rng).map_err(|msg| LaunchError {
            kernel: k.name.clone(),
            msg: format!("workgroup ({gx}, {gy}, {gz}): {msg}"),
        })?;
    }
    Ok(counts)
}

/// What the waves of one workgroup run against.
struct Group<'g, 'l> {
    k: &'g Kernel,
    l: &'g Launch<'l>,
    mem: &'g mut Memory,
    lds: &'g mut [u8],
    counts: &'g mut Counts,
    race: Option<&'g mut Tracker>,
}

impl Group<'_, '_> {
    /// Wave `w` executes one instruction; a barrier or its end changes its status.
    fn step(&mut self, w: usize, wave: &mut Wave, executed: &mut u64) -> Result<(), String> {
        let pc = wave.pc;
        if let Some(t) = self.race.as_deref_mut() {
            t.at(w, pc);
        }
        let mut env = Env {
            mem: self.mem,
            lds: self.lds,
            mode: self.l.mode,
            counts: self.counts,
            race: self.race.as_deref_mut(),
        };
        let step = wave.step(&self.k.insts, &self.k.index, &mut env).map_err(|f| {
            let inst = self.k.insts.get(pc);
            format!(
                "wave {w}, {} at {:#x}{}: {}",
                inst.map(|i| i.mnemonic()).unwrap_or_default(),
                inst.map(|i| i.addr).unwrap_or(0),
                f.lane.map(|l| format!(", lane {l}")).unwrap_or_default(),
                f.msg
            )
        })?;
        *executed += 1;
        env_hit(self.counts, pc);
        if *executed > self.l.max_wave_insts {
            return Err(format!("wave {w} executed more than {} instructions (hung?)", self.l.max_wave_insts));
        }
        match step {
            Step::Next => {}
            Step::Barrier => wave.status = Status::AtBarrier,
            Step::End => wave.status = Status::Done,
        }
        Ok(())
    }
}

/// Runs the waves of one workgroup in the launch's [`Schedule`] until each
/// ends or reaches a barrier, releasing a barrier when every wave has reached it.
fn run_workgroup(waves: &mut [Wave], g: &mut Group, rng: &mut Rng) -> Result<(), String> {
    let n = waves.len();
    let mut executed = vec![0u64; n];
    let running = |waves: &[Wave], w: usize| waves[w].status == Status::Running;
    loop {
        match g.l.schedule {
            Schedule::Sequential | Schedule::Reversed => {
                let order: Vec<usize> =
                    if g.l.schedule == Schedule::Reversed { (0..n).rev().collect() } else { (0..n).collect() };
                for w in order {
                    while running(waves, w) {
                        g.step(w, &mut waves[w], &mut executed[w])?;
                    }
                }
            }
            Schedule::Lockstep => loop {
                let mut any = false;
                for w in 0..n {
                    if running(waves, w) {
                        g.step(w, &mut waves[w], &mut executed[w])?;
                        any = true;
                    }
                }
                if !any {
                    break;
                }
            },
            Schedule::Random(_) => loop {
                let ready: Vec<usize> = (0..n).filter(|&w| running(waves, w)).collect();
                if ready.is_empty() {
                    break;
                }
                let w = ready[(rng.next() % ready.len() as u64) as usize];
                let burst = 1u32 << (rng.next() % 7);
                for _ in 0..burst {
                    if !running(waves, w) {
                        break;
                    }
                    g.step(w, &mut waves[w], &mut executed[w])?;
                }
            },
        }
        let waiting: Vec<usize> = (0..n).filter(|&w| waves[w].status == Status::AtBarrier).collect();
        if waiting.is_empty() {
            return Ok(());
        }
        if waiting.len() < n {
            let ended: Vec<usize> = (0..n).filter(|&w| waves[w].status == Status::Done).collect();
            return Err(format!(
                "waves {waiting:?} wait at s_barrier #{} but waves {ended:?} ended without reaching it",
                waves[waiting[0]].barriers
            ));
        }
        if let Some(t) = g.race.as_deref_mut() {
            t.barrier();
        }
        // Every wave leaves the barrier when the last one reaches it, in memory latencies too.
        let latest = waves.iter().map(|w| w.load_rounds.now()).max().unwrap_or(0);
        for w in waves.iter_mut() {
            w.load_rounds.sync_to(latest);
            w.status = Status::Running;
        }
    }
}

fn env_hit(counts: &mut Counts, pc: usize) {
    if let Some(h) = counts.hits.get_mut(pc) {
        *h += 1;
    }
}

/// Runs raw machine code (ending in `s_endpgm`) on one wave whose state the
/// caller prepared: the unit tests' harness. A barrier passes at once (one wave).
pub fn run_program(
    code: &[u32],
    wave: &mut Wave,
    mem: &mut Memory,
    lds: &mut [u8],
    mode: Mode,
) -> Result<Counts, String> {
    let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
    let insts = crate::decode::decode_all(&bytes, 0).map_err(|e| e.to_string())?;
    let index = insts.iter().enumerate().map(|(i, x)| (x.addr, i)).collect();
    let mut counts = Counts::default();
    for _ in 0..10_000_000u64 {
        let pc = wave.pc;
        let mut env = Env { mem, lds, mode, counts: &mut counts, race: None };
        let step = wave.step(&insts, &index, &mut env).map_err(|f| {
            let i = &insts[pc.min(insts.len() - 1)];
            format!(
                "{} at {:#x}{}: {}",
                i.mnemonic(),
                i.addr,
                f.lane.map(|l| format!(", lane {l}")).unwrap_or_default(),
                f.msg
            )
        })?;
        if step == Step::End {
            return Ok(counts);
        }
    }
    Err("program did not end".into())
}
