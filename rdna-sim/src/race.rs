//! Race detection: the orders in which a workgroup's waves may run,
//! and a checker of the memory accesses of one launch.
//!
//! # What is a race here
//!
//! Two accesses to the same byte, at least one a write, made by two different
//! waves with nothing ordering them:
//!
//! - **workgroup memory** (DS instructions, and FLAT addresses in the shared
//!   aperture): the waves of one workgroup, within one barrier interval (between
//!   two releases of `s_barrier`);
//! - **global memory** (GLOBAL, FLAT outside the shared aperture, and scalar
//!   loads): two workgroups of the launch, at any time, since nothing orders
//!   workgroups within a launch; and two waves of one workgroup within one
//!   barrier interval.
//!
//! A wave's own accesses are ordered (the ISA's same-wave rules: memory
//! instructions of one wave take effect in program order for one address), so
//! they never race, whatever their lanes; neither do reads against reads.
//! Cross-lane operations that do not touch memory (`ds_bpermute_b32`,
//! `ds_permute_b32`, DPP, `v_permlanex16`, `v_readlane`) are not accesses.
//!
//! # Declared exceptions
//!
//! A launch may declare same-value words ([`crate::dispatch::Launch::same_value`]):
//! there, several writes of identical bytes by different workgroups or waves
//! are not reported (every order leaves the same bytes). Writes of other
//! values, and any read of such a word by another workgroup, still are.
//! Atomics would be the other exception, but the interpreter implements none
//! (an atomic instruction is an error) and the shipped objects contain none.
//!
//! # What this cannot see
//!
//! The hardware's memory model beyond barriers: the checker takes `s_barrier`
//! as ordering every earlier access of each wave before every later one of
//! the workgroup, and does not check that the waits and cache invalidations
//! that make this true on the hardware are there (for loads, strict-wait mode
//! does); races between launches; and accesses that a schedule never makes
//! (the checker sees the addresses a run touches, so coverage is the inputs').

use crate::decode::Inst;
use crate::mem::Memory;
use std::collections::HashMap;
use std::fmt;

/// The order in which the waves of a workgroup run between two barriers. A
/// race-free kernel gives the same bytes under every one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    /// One wave at a time, wave 0 first: each runs until it reaches the next
    /// barrier (or ends) before the next wave starts.
    #[default]
    Sequential,
    /// One wave at a time to its next barrier, the last wave first.
    Reversed,
    /// In order, to each barrier: waves 0, 1, ..., n - 1 execute one
    /// instruction each in turn, until every wave waits at the barrier or has
    /// ended (the nearest to the hardware, where a workgroup's waves run
    /// nearly in lockstep).
    Lockstep,
    /// Interleaved at instruction granularity in a seeded random order: a wave
    /// that can run is chosen uniformly, runs a burst of 1, 2, 4, ... or 64
    /// instructions (uniformly chosen; fewer if it reaches a barrier or ends),
    /// and the choice repeats. The same seed gives the same order.
    Random(u64),
}

impl Schedule {
    /// The schedules the checks run: the three fixed ones and `Random(seed)` for each seed.
    pub fn all(seeds: &[u64]) -> Vec<Schedule> {
        let mut v = vec![Schedule::Sequential, Schedule::Reversed, Schedule::Lockstep];
        v.extend(seeds.iter().map(|&s| Schedule::Random(s)));
        v
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Sequential => write!(f, "sequential"),
            Schedule::Reversed => write!(f, "reversed"),
            Schedule::Lockstep => write!(f, "lockstep"),
            Schedule::Random(s) => write!(f, "random (seed {s})"),
        }
    }
}

/// The random source of [`Schedule::Random`] (splitmix64).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Which memory a race is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// Workgroup memory (LDS).
    Workgroup,
    /// Global memory.
    Global,
}

/// What the later of two racing accesses does to what the earlier did (in the
/// order this run made them; another schedule may make them the other way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A read of bytes another wave wrote.
    ReadAfterWrite,
    /// A write of bytes another wave read.
    WriteAfterRead,
    /// A write of bytes another wave wrote.
    WriteAfterWrite,
}

/// One access as the checker records it (16 bytes: it is kept per byte).
/// `pc1` is the instruction index plus one; 0 is no access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Acc {
    pc1: u32,
    /// Linear workgroup id.
    wg: u32,
    /// The barrier interval: counts up over the whole launch, so that an
    /// interval belongs to one workgroup.
    epoch: u32,
    wave: u8,
    /// The lane, or [`SCALAR`] for a scalar load.
    lane: u8,
}

const SCALAR: u8 = 255;

impl Acc {
    fn some(&self) -> bool {
        self.pc1 != 0
    }
}

/// The accesses of one workgroup-memory byte: the last write, and readers of
/// the last interval that read it: `e1` the first, `e2` the first of another
/// wave than `e1`'s. With these a write finds a reader of another wave
/// whenever there is one.
#[derive(Clone, Copy, Default)]
struct LdsByte {
    w: Acc,
    e1: Acc,
    e2: Acc,
}

/// The accesses of one global byte in a launch: as [`LdsByte`], and readers of
/// the whole launch for the races between workgroups: `x1` the first, `x2` the
/// first of another workgroup than `x1`'s.
#[derive(Clone, Copy, Default)]
struct GlobalByte {
    w: Acc,
    e1: Acc,
    e2: Acc,
    x1: Acc,
    x2: Acc,
}

/// One side of a reported race.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// Index of the instruction in the kernel.
    pub pc: usize,
    /// Workgroup id (x, y, z).
    pub workgroup: [u32; 3],
    pub wave: u32,
    /// `None` for a scalar load.
    pub lane: Option<u32>,
    /// Barrier interval within its workgroup (0 before the first barrier).
    pub interval: u32,
}

/// A race: two accesses of different waves to `bytes`, at least one a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Race {
    pub space: Space,
    pub kind: Kind,
    pub earlier: Access,
    pub later: Access,
    /// Workgroup memory: byte offsets; global: device addresses (first, end).
    pub bytes: (u64, u64),
    /// Global: the allocation's name and the offset of `bytes` in it.
    pub allocation: Option<(String, u64)>,
    /// How many lane accesses raced the same way (the same two instructions).
    pub count: u64,
}

impl Race {
    /// The race in words: both instructions (address and mnemonic), both
    /// waves and lanes, and the byte range.
    pub fn describe(&self, insts: &[Inst]) -> String {
        let inst = |a: &Access| {
            insts.get(a.pc).map(|i| format!("{} at {:#x}", i.mnemonic(), i.addr)).unwrap_or_else(|| "?".into())
        };
        let who = |a: &Access| {
            let [x, y, z] = a.workgroup;
            let lane = a.lane.map(|l| format!("lane {l}")).unwrap_or_else(|| "scalar".into());
            format!("workgroup ({x}, {y}, {z}), wave {}, {lane}, barrier interval {}", a.wave, a.interval)
        };
        let (first, end) = self.bytes;
        let place = match (&self.space, &self.allocation) {
            (Space::Workgroup, _) => format!("workgroup memory bytes [{first:#x}, {end:#x})"),
            (Space::Global, Some((name, off))) => {
                format!("global bytes [{first:#x}, {end:#x}) ({name}, offset {off:#x}, {} bytes)", end - first)
            }
            (Space::Global, None) => format!("global bytes [{first:#x}, {end:#x})"),
        };
        let (verb, what) = match self.kind {
            Kind::ReadAfterWrite => ("read-after-write", "reads what"),
            Kind::WriteAfterRead => ("write-after-read", "overwrites what"),
            Kind::WriteAfterWrite => ("write-after-write", "overwrites what"),
        };
        let earlier_did = if self.kind == Kind::WriteAfterRead { "read" } else { "wrote" };
        let more = if self.count > 1 { format!(" ({} lane accesses like it)", self.count) } else { String::new() };
        format!(
            "{verb} race on {place}: {} ({}) {what} {} ({}) {earlier_did}, with no barrier between{more}",
            inst(&self.later),
            who(&self.later),
            inst(&self.earlier),
            who(&self.earlier)
        )
    }
}

/// The checker of one launch: the dispatch tells it which wave runs and at
/// which instruction, the memory instructions tell it every byte they touch.
pub struct Tracker {
    cur: Acc,
    grid: [u32; 3],
    /// The first epoch of each workgroup (by linear id), for intervals in reports.
    first_epoch: Vec<u32>,
    lds: Vec<LdsByte>,
    /// Per allocation (by base address): one record per byte, made on first access.
    global: HashMap<u64, Vec<GlobalByte>>,
    same_value: Vec<(u64, u64)>,
    races: Vec<Race>,
    index: HashMap<(Space, Kind, u32, u32), usize>,
}

impl Tracker {
    /// A checker for a launch of `grid` workgroups with `lds_size` bytes of
    /// workgroup memory; `same_value`: (address, length) of declared same-value words.
    pub fn new(grid: [u32; 3], lds_size: u32, same_value: &[(u64, usize)]) -> Tracker {
        let groups = grid.iter().map(|&g| g as usize).product();
        Tracker {
            cur: Acc::default(),
            grid,
            first_epoch: vec![0; groups],
            lds: vec![LdsByte::default(); lds_size as usize],
            global: HashMap::new(),
            same_value: same_value.iter().map(|&(a, n)| (a, a + n as u64)).collect(),
            races: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// A new workgroup starts (its first barrier interval).
    pub fn begin_workgroup(&mut self, linear_id: u32) {
        self.cur.epoch += 1;
        self.cur.wg = linear_id;
        if let Some(e) = self.first_epoch.get_mut(linear_id as usize) {
            *e = self.cur.epoch;
        }
    }

    /// The workgroup's barrier is released: a new interval.
    pub fn barrier(&mut self) {
        self.cur.epoch += 1;
    }

    /// Wave `wave` executes the instruction at index `pc`.
    pub fn at(&mut self, wave: usize, pc: usize) {
        self.cur.wave = wave as u8;
        self.cur.pc1 = pc as u32 + 1;
    }

    /// The races found, in the order first seen, one per pair of instructions and kind.
    pub fn races(&self) -> &[Race] {
        &self.races
    }

    pub fn into_races(self) -> Vec<Race> {
        self.races
    }

    fn access(&self, a: &Acc) -> Access {
        let (gx, gy) = (self.grid[0].max(1), self.grid[1].max(1));
        let first = self.first_epoch.get(a.wg as usize).copied().unwrap_or(a.epoch);
        Access {
            pc: a.pc1 as usize - 1,
            workgroup: [a.wg % gx, a.wg / gx % gy, a.wg / (gx * gy)],
            wave: a.wave as u32,
            lane: (a.lane != SCALAR).then_some(a.lane as u32),
            interval: a.epoch - first,
        }
    }

    fn report(
        &mut self,
        space: Space,
        kind: Kind,
        earlier: Acc,
        later: Acc,
        bytes: (u64, u64),
        alloc: Option<(u64, &str)>,
    ) {
        let key = (space, kind, earlier.pc1, later.pc1);
        if let Some(&i) = self.index.get(&key) {
            self.races[i].count += 1;
            return;
        }
        let race = Race {
            space,
            kind,
            earlier: self.access(&earlier),
            later: self.access(&later),
            bytes,
            allocation: alloc.map(|(base, name)| (name.to_string(), bytes.0 - base)),
            count: 1,
        };
        self.index.insert(key, self.races.len());
        self.races.push(race);
    }

    /// Lane `lane` of the current wave reads (`write` false) or writes `n`
    /// bytes of workgroup memory at `offset` (already bounds-checked).
    pub(crate) fn lds(&mut self, lane: usize, offset: usize, n: usize, write: bool) {
        let cur = Acc { lane: lane as u8, ..self.cur };
        let mut found = Found::default();
        for b in offset..(offset + n).min(self.lds.len()) {
            let r = &mut self.lds[b];
            let conflict = if write {
                let waw = (r.w.some() && r.w.epoch == cur.epoch && r.w.wave != cur.wave).then_some(r.w);
                let war = reader_of_other_wave(r.e1, r.e2, &cur);
                r.w = cur;
                waw.map(|a| (Kind::WriteAfterWrite, a)).or(war.map(|a| (Kind::WriteAfterRead, a)))
            } else {
                let raw = (r.w.some() && r.w.epoch == cur.epoch && r.w.wave != cur.wave).then_some(r.w);
                add_reader(&mut r.e1, &mut r.e2, &cur);
                raw.map(|a| (Kind::ReadAfterWrite, a))
            };
            found.byte(b as u64, conflict);
        }
        for (kind, other, bytes) in found.done() {
            self.report(Space::Workgroup, kind, other, cur, bytes, None);
        }
    }

    /// Lane `lane` (`None`: a scalar load) of the current wave reads `n` bytes
    /// of global memory at `addr`, or writes `new` there. Called before the
    /// access; an address outside every allocation is left to the access to report.
    pub(crate) fn global(&mut self, mem: &Memory, lane: Option<usize>, addr: u64, n: usize, new: Option<&[u8]>) {
        let Some((base, size)) = mem.allocation_of(addr, n) else { return };
        let cur = Acc { lane: lane.map(|l| l as u8).unwrap_or(SCALAR), ..self.cur };
        let flag = self.same_value.iter().any(|&(s, e)| addr < e && addr + n as u64 > s);
        let old = match (new, flag) {
            (Some(_), true) => {
                let mut v = vec![0u8; n];
                mem.read(addr, &mut v).ok().map(|_| v)
            }
            _ => None,
        };
        let same_value = &self.same_value;
        let recs = self.global.entry(base).or_insert_with(|| vec![GlobalByte::default(); size]);
        let mut found = Found::default();
        let first = (addr - base) as usize;
        for (i, b) in (first..first + n).enumerate() {
            let r = &mut recs[b];
            let a = addr + i as u64;
            let conflict = if let Some(new) = new {
                let same =
                    old.as_ref().is_some_and(|o| o[i] == new[i]) && same_value.iter().any(|&(s, e)| a >= s && a < e);
                let waw = (conflicts(&r.w, &cur) && !same).then_some(r.w);
                let war = if r.x1.some() && r.x1.wg != cur.wg {
                    Some(r.x1)
                } else if r.x2.some() {
                    Some(r.x2)
                } else {
                    reader_of_other_wave(r.e1, r.e2, &cur)
                };
                r.w = cur;
                waw.map(|a| (Kind::WriteAfterWrite, a)).or(war.map(|a| (Kind::WriteAfterRead, a)))
            } else {
                let raw = conflicts(&r.w, &cur).then_some(r.w);
                add_reader(&mut r.e1, &mut r.e2, &cur);
                if !r.x1.some() {
                    r.x1 = cur;
                } else if !r.x2.some() && r.x1.wg != cur.wg {
                    r.x2 = cur;
                }
                raw.map(|a| (Kind::ReadAfterWrite, a))
            };
            found.byte(a, conflict);
        }
        let name = mem.name_of(base).unwrap_or("an allocation").to_string();
        for (kind, other, bytes) in found.done() {
            self.report(Space::Global, kind, other, cur, bytes, Some((base, &name)));
        }
    }
}

/// Whether an earlier access `a` of a byte is unordered with `cur`: another
/// workgroup, or another wave of the workgroup in the same barrier interval.
fn conflicts(a: &Acc, cur: &Acc) -> bool {
    a.some() && (a.wg != cur.wg || (a.wave != cur.wave && a.epoch == cur.epoch))
}

/// A reader of `cur`'s interval from another wave, from the two interval readers.
fn reader_of_other_wave(e1: Acc, e2: Acc, cur: &Acc) -> Option<Acc> {
    if !e1.some() || e1.epoch != cur.epoch {
        None
    } else if e1.wave != cur.wave {
        Some(e1)
    } else {
        e2.some().then_some(e2)
    }
}

/// Records `cur` among the interval's readers (`e1` the first, `e2` the first of another wave).
fn add_reader(e1: &mut Acc, e2: &mut Acc, cur: &Acc) {
    if !e1.some() || e1.epoch != cur.epoch {
        *e1 = *cur;
        *e2 = Acc::default();
    } else if !e2.some() && e1.wave != cur.wave {
        *e2 = *cur;
    }
}

/// The conflicts of one lane access, byte by byte, merged into ranges of
/// consecutive bytes that race with the same earlier access.
#[derive(Default)]
struct Found {
    open: Option<(Kind, Acc, u64, u64)>,
    done: Vec<(Kind, Acc, (u64, u64))>,
}

impl Found {
    fn byte(&mut self, at: u64, conflict: Option<(Kind, Acc)>) {
        match (conflict, &mut self.open) {
            (Some((k, a)), Some((ok, oa, _, end))) if *ok == k && *oa == a && *end == at => *end = at + 1,
            (c, _) => {
                if let Some((k, a, s, e)) = self.open.take() {
                    self.done.push((k, a, (s, e)));
                }
                self.open = c.map(|(k, a)| (k, a, at, at + 1));
            }
        }
    }
    fn done(mut self) -> Vec<(Kind, Acc, (u64, u64))> {
        if let Some((k, a, s, e)) = self.open.take() {
            self.done.push((k, a, (s, e)));
        }
        self.done
    }
}

/// Compares the buffers a kernel left under two schedules. `elem_bytes[i]`
/// is the element size of buffer `i` (for the report). The error names the
/// kernel, both schedules and the first differing element.
pub fn compare_outputs(
    kernel: &str,
    a: (&Schedule, &[Vec<u8>]),
    b: (&Schedule, &[Vec<u8>]),
    elem_bytes: &[usize],
) -> Result<(), String> {
    for (i, (x, y)) in a.1.iter().zip(b.1).enumerate() {
        if x.len() != y.len() {
            return Err(format!(
                "kernel {kernel}: buffer {i} has {} bytes under one schedule, {} under the other",
                x.len(),
                y.len()
            ));
        }
        if let Some(at) = x.iter().zip(y).position(|(p, q)| p != q) {
            let es = elem_bytes.get(i).copied().unwrap_or(1).max(1);
            let e = at / es;
            let hex = |v: &[u8]| {
                let w = &v[e * es..(e * es + es).min(v.len())];
                w.iter().rev().map(|b| format!("{b:02x}")).collect::<String>()
            };
            return Err(format!(
                "kernel {kernel}: the outputs differ between the {} and {} schedules: buffer {i}, first at element {e} \
                 (bytes {}..{}): {} gives 0x{}, {} gives 0x{}",
                a.0,
                b.0,
                e * es,
                e * es + es,
                a.0,
                hex(x),
                b.0,
                hex(y)
            ));
        }
    }
    Ok(())
}
