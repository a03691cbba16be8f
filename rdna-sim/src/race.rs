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
//!   loads): two workgroups of the launch that no atomic orders (see below);
//!   and two waves of one workgroup within one barrier interval.
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
//!
//! **Atomics** (GLOBAL and FLAT 32-bit atomics on device memory) are the
//! other exception: they are not recorded as accesses, so an atomic never
//! races with another atomic, and a plain access of a byte that atomics touch
//! is checked against the plain accesses only (a counter reset by a plain
//! store, say, is not reported against the atomics). Each atomic is also a
//! release and an acquire at device scope, which orders workgroups:
//!
//! - its *release*, by wave w of workgroup A, covers A's accesses of earlier
//!   barrier intervals and w's own earlier accesses;
//! - a later atomic on the same address by workgroup B *acquires* every
//!   release made there so far (the latest of each workgroup). It is not
//!   transitive: B learns no release that A had acquired, which can only
//!   report a race that an order through a third workgroup rules out;
//! - an access X of A is then ordered before an access Y of wave v of B when
//!   B acquired a release covering X, Y is the acquiring wave's (after its
//!   atomic) or in a later barrier interval of B, and v executed both
//!   `buffer_gl0_inv` and `buffer_gl1_inv` after the atomic (the acquire's
//!   cache invalidations). Without them the pair is still a race, and its
//!   report ([`Race::uninvalidated`]) names the atomic and the missing
//!   invalidations.
//!
//! A release needs the stores it orders complete: at each atomic, a global
//! store of its workgroup issued by its wave, or by any wave in an earlier
//! barrier interval, that no `s_waitcnt_vscnt` has waited for yet (stores
//! count on vscnt on gfx11, at most 63 outstanding) is reported as a
//! [`Kind::StoreNotWaitedAtRelease`]. Only atomics run this check.
//!
//! # What this cannot see
//!
//! The hardware's memory model beyond barriers and the release and acquire
//! above: the checker takes `s_barrier` as ordering every earlier access of
//! each wave before every later one of the workgroup, and does not check that
//! the waits and cache invalidations that make this true on the hardware are
//! there (for loads, strict-wait mode does; for atomics, the release's
//! vscnt wait and the acquire's invalidations are checked); workgroup memory
//! atomics (DS) and 64-bit or float atomics, which are not implemented;
//! races between launches; and accesses that a schedule never makes (the
//! checker sees the addresses a run touches, so coverage is the inputs').
//! Workgroups run one at a time, in linear order or reversed
//! ([`crate::dispatch::Launch::workgroups_reversed`]), so which workgroup
//! arrives last at a counter is one of those two. Once a launch has executed
//! an atomic, a global byte's readers of the launch are kept as the latest
//! read of each of the two workgroups that read it last: a write ordered after
//! those two but not after an older reading workgroup is not reported.

use crate::decode::Inst;
use crate::mem::Memory;
use std::collections::{HashMap, VecDeque};
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
    /// An atomic (a release) while a global store of its workgroup that it
    /// orders is not complete: issued by the atomic's wave, or by any wave of
    /// the workgroup in an earlier barrier interval, and not yet waited for by
    /// `s_waitcnt_vscnt`. `earlier` is the store, `later` the atomic.
    StoreNotWaitedAtRelease,
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
    /// The atomics (releases) the wave had executed in this barrier interval
    /// before this access (saturating): which of its own accesses a release covers.
    rel: u16,
}

const _: () = assert!(std::mem::size_of::<Acc>() == 16);

const SCALAR: u8 = 255;

/// A release: an atomic executed by `wave` of workgroup `wg` in interval
/// `epoch`, after `rel` earlier atomics of that wave in the interval. It
/// orders the workgroup's accesses of earlier intervals and the wave's own
/// earlier accesses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Release {
    wg: u32,
    epoch: u32,
    wave: u8,
    rel: u16,
}

impl Release {
    fn covers(&self, a: &Acc) -> bool {
        a.wg == self.wg
            && (a.epoch < self.epoch
                || (a.epoch == self.epoch && a.wave == self.wave && a.rel <= self.rel && a.rel != u16::MAX))
    }
}

/// A release learnt by the current workgroup through its atomic `at` (on the
/// same address, later), at instruction `clock` of the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Acquire {
    release: Release,
    at: Acc,
    clock: u64,
}

/// What the checker follows of each wave of the current workgroup for the
/// atomics: its releases in the interval, its stores not yet waited for, and
/// when it last invalidated each cache.
#[derive(Clone, Default)]
struct WaveSync {
    rel: u16,
    /// Stores counted on vscnt, oldest first (at most 63, the counter's
    /// range): the store, and its device bytes when it wrote any.
    stores: VecDeque<(Acc, Option<(u64, u64)>)>,
    /// The launch clock of the wave's last `buffer_gl0_inv` and `buffer_gl1_inv`.
    inv: [u64; 2],
}

/// Outstanding stores a wave can have: vscnt is 6 bits.
const MAX_VSCNT: usize = 63;

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
/// first of another workgroup than `x1`'s (with atomics in the launch, as
/// `add_launch_reader` says).
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

/// An acquire that would order a race's two accesses but for the cache
/// invalidations the later access's wave lacks after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uninvalidated {
    /// The atomic through which the later access's workgroup acquired the earlier access.
    pub acquire: Access,
    /// What the later access's wave did not execute after the atomic:
    /// `buffer_gl0_inv`, `buffer_gl1_inv` or both (joined by "and").
    pub missing: String,
}

/// A race: two accesses of different waves to `bytes`, at least one a write;
/// or, [`Kind::StoreNotWaitedAtRelease`], a release before a store it orders is complete.
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
    /// Set when an atomic of the later access's workgroup acquired the earlier
    /// access, but the later access's wave lacks the cache invalidations after it.
    pub uninvalidated: Option<Uninvalidated>,
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
        let more = if self.count > 1 { format!(" ({} lane accesses like it)", self.count) } else { String::new() };
        let (verb, what) = match self.kind {
            Kind::ReadAfterWrite => ("read-after-write", "reads what"),
            Kind::WriteAfterRead => ("write-after-read", "overwrites what"),
            Kind::WriteAfterWrite => ("write-after-write", "overwrites what"),
            Kind::StoreNotWaitedAtRelease => {
                return format!(
                    "release before its stores complete on {place}: {} ({}) releases the workgroup's earlier \
                     accesses, but {} ({}) is not yet waited for by s_waitcnt_vscnt{}",
                    inst(&self.later),
                    who(&self.later),
                    inst(&self.earlier),
                    who(&self.earlier),
                    if self.count > 1 { format!(" ({} such stores)", self.count) } else { String::new() }
                );
            }
        };
        let earlier_did = if self.kind == Kind::WriteAfterRead { "read" } else { "wrote" };
        let acquire = match &self.uninvalidated {
            Some(u) => format!(
                "; {} ({}) acquired the earlier access, but the acquire lacks the cache invalidation: wave {} \
                 executed no {} after it",
                inst(&u.acquire),
                who(&u.acquire),
                self.later.wave,
                u.missing
            ),
            None => String::new(),
        };
        format!(
            "{verb} race on {place}: {} ({}) {what} {} ({}) {earlier_did}, with no barrier between{more}{acquire}",
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
    /// Instructions executed in the launch so far (all waves): orders an
    /// acquire before a wave's cache invalidations.
    clock: u64,
    /// Whether an atomic has executed in the launch (global readers are then
    /// kept as the latest of two workgroups, see `add_launch_reader`).
    atomics: bool,
    /// Per atomic address, the latest release of each workgroup there.
    releases: HashMap<u64, Vec<Release>>,
    /// The current workgroup's acquires, by the releasing workgroup.
    acquired: HashMap<u32, Vec<Acquire>>,
    /// The current workgroup's waves.
    waves: Vec<WaveSync>,
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
            clock: 0,
            atomics: false,
            releases: HashMap::new(),
            acquired: HashMap::new(),
            waves: Vec::new(),
        }
    }

    /// A new workgroup starts (its first barrier interval).
    pub fn begin_workgroup(&mut self, linear_id: u32) {
        self.cur.epoch += 1;
        self.cur.wg = linear_id;
        if let Some(e) = self.first_epoch.get_mut(linear_id as usize) {
            *e = self.cur.epoch;
        }
        self.acquired.clear();
        self.waves.clear();
    }

    /// The workgroup's barrier is released: a new interval.
    pub fn barrier(&mut self) {
        self.cur.epoch += 1;
        for w in &mut self.waves {
            w.rel = 0;
        }
    }

    /// Wave `wave` executes the instruction at index `pc`.
    pub fn at(&mut self, wave: usize, pc: usize) {
        self.cur.wave = wave as u8;
        self.cur.pc1 = pc as u32 + 1;
        if self.waves.len() <= wave {
            self.waves.resize(wave + 1, WaveSync::default());
        }
        self.cur.rel = self.waves[wave].rel;
        self.clock += 1;
    }

    /// The current wave issues a store counted on vscnt: `global` is its
    /// first device-memory lane (lane, address, bytes), `None` when it wrote no
    /// device memory or is an atomic without return.
    pub(crate) fn store_issued(&mut self, global: Option<(usize, u64, usize)>) {
        let (acc, bytes) = match global {
            Some((lane, addr, n)) => (Acc { lane: lane as u8, ..self.cur }, Some((addr, addr + n as u64))),
            None => (self.cur, None),
        };
        let stores = &mut self.waves[self.cur.wave as usize].stores;
        if stores.len() == MAX_VSCNT {
            // The hardware stalls the issue until the oldest completes.
            stores.pop_front();
        }
        stores.push_back((acc, bytes));
    }

    /// `s_waitcnt_vscnt` of the current wave: at most `n` stores remain outstanding.
    pub(crate) fn vscnt_wait(&mut self, n: u32) {
        let stores = &mut self.waves[self.cur.wave as usize].stores;
        while stores.len() > n as usize {
            stores.pop_front();
        }
    }

    /// The current wave executes `buffer_gl1_inv` (`gl1`) or `buffer_gl0_inv`.
    pub(crate) fn invalidate(&mut self, gl1: bool) {
        self.waves[self.cur.wave as usize].inv[gl1 as usize] = self.clock;
    }

    /// Lane `lane` of the current wave executes an atomic read-modify-write of
    /// the dword at `addr`: a release and an acquire at device scope. It is no
    /// plain access (atomics never race with each other). Called before the
    /// access; an address outside every allocation is left to it to report.
    pub(crate) fn atomic(&mut self, mem: &Memory, lane: usize, addr: u64, n: usize) {
        if mem.allocation_of(addr, n).is_none() {
            return;
        }
        self.atomics = true;
        let cur = Acc { lane: lane as u8, ..self.cur };
        // The release needs the stores it orders complete.
        let unwaited: Vec<(Acc, (u64, u64))> = self
            .waves
            .iter()
            .enumerate()
            .flat_map(|(w, s)| {
                s.stores.iter().filter_map(move |&(acc, bytes)| {
                    let ordered = acc.epoch < cur.epoch || w == cur.wave as usize;
                    bytes.filter(|_| ordered).map(|b| (acc, b))
                })
            })
            .collect();
        for (store, bytes) in unwaited {
            let alloc = mem.allocation_of(bytes.0, 1).map(|(b, _)| b);
            let name = alloc.and_then(|b| mem.name_of(b)).unwrap_or("an allocation").to_string();
            let alloc = alloc.map(|b| (b, name.as_str()));
            self.report(Space::Global, Kind::StoreNotWaitedAtRelease, store, cur, bytes, alloc, None);
        }
        let list = self.releases.entry(addr).or_default();
        for r in list.iter().filter(|r| r.wg != cur.wg) {
            let known = self.acquired.entry(r.wg).or_default();
            // An earlier acquire of the same release by this wave in this interval orders at least as much.
            if !known.iter().any(|k| k.release == *r && k.at.wave == cur.wave && k.at.epoch == cur.epoch) {
                known.push(Acquire { release: *r, at: cur, clock: self.clock });
            }
        }
        let release = Release { wg: cur.wg, epoch: cur.epoch, wave: cur.wave, rel: cur.rel };
        // A workgroup's later release covers all its earlier one did.
        match list.iter_mut().find(|r| r.wg == cur.wg) {
            Some(r) => *r = release,
            None => list.push(release),
        }
        let w = &mut self.waves[cur.wave as usize];
        w.rel = w.rel.saturating_add(1);
        self.cur.rel = w.rel;
    }

    /// Whether `a`, an earlier access of another workgroup, is ordered before
    /// `cur` by an acquire of the current workgroup; if only the cache
    /// invalidations are missing, that acquire.
    fn acquired_order(&self, a: &Acc, cur: &Acc) -> Result<(), Option<Acquire>> {
        let Some(known) = self.acquired.get(&a.wg) else { return Err(None) };
        let inv = self.waves.get(cur.wave as usize).map_or([0; 2], |w| w.inv);
        let mut uninvalidated = None;
        for k in known.iter().filter(|k| k.release.covers(a) && (cur.wave == k.at.wave || cur.epoch > k.at.epoch)) {
            if inv[0] > k.clock && inv[1] > k.clock {
                return Ok(());
            }
            uninvalidated.get_or_insert(*k);
        }
        Err(uninvalidated)
    }

    /// Whether an earlier access `a` of a global byte races with `cur`: another
    /// workgroup that no acquire orders, or another wave of the workgroup in the
    /// same barrier interval. `Some(Some(acquire))`: ordered but for the
    /// invalidations after that acquire.
    fn global_conflict(&self, a: &Acc, cur: &Acc) -> Option<Option<Acquire>> {
        if !conflicts(a, cur) {
            return None;
        }
        if a.wg == cur.wg || self.acquired.is_empty() {
            return Some(None);
        }
        self.acquired_order(a, cur).err()
    }

    /// The races found, in the order first seen, one per pair of instructions and kind.
    pub fn races(&self) -> &[Race] {
        &self.races
    }

    pub fn into_races(self) -> Vec<Race> {
        self.races
    }

    /// The invalidations wave `wave` did not execute after launch clock `clock`.
    fn missing_inv(&self, wave: u8, clock: u64) -> String {
        let inv = self.waves.get(wave as usize).map_or([0; 2], |w| w.inv);
        let missing: Vec<&str> = [(inv[0], "buffer_gl0_inv"), (inv[1], "buffer_gl1_inv")]
            .iter()
            .filter(|x| x.0 <= clock)
            .map(|x| x.1)
            .collect();
        missing.join(" and ")
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

    #[allow(clippy::too_many_arguments)]
    fn report(
        &mut self,
        space: Space,
        kind: Kind,
        earlier: Acc,
        later: Acc,
        bytes: (u64, u64),
        alloc: Option<(u64, &str)>,
        acquire: Option<Acquire>,
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
            uninvalidated: acquire
                .map(|k| Uninvalidated { acquire: self.access(&k.at), missing: self.missing_inv(later.wave, k.clock) }),
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
            found.byte(b as u64, conflict.map(|(k, a)| (k, a, None)));
        }
        for (kind, other, bytes, _) in found.done() {
            self.report(Space::Workgroup, kind, other, cur, bytes, None, None);
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
        let mut recs = self.global.remove(&base).unwrap_or_else(|| vec![GlobalByte::default(); size]);
        let mut found = Found::default();
        let first = (addr - base) as usize;
        for (i, b) in (first..first + n).enumerate() {
            let r = &mut recs[b];
            let a = addr + i as u64;
            let conflict = if let Some(new) = new {
                let same = old.as_ref().is_some_and(|o| o[i] == new[i])
                    && self.same_value.iter().any(|&(s, e)| a >= s && a < e);
                let waw = if same { None } else { self.global_conflict(&r.w, &cur).map(|k| (r.w, k)) };
                let war = [r.x1, r.x2]
                    .into_iter()
                    .filter(|x| x.some() && x.wg != cur.wg)
                    .find_map(|x| self.global_conflict(&x, &cur).map(|k| (x, k)))
                    .or_else(|| reader_of_other_wave(r.e1, r.e2, &cur).map(|x| (x, None)));
                r.w = cur;
                waw.map(|(a, k)| (Kind::WriteAfterWrite, a, k)).or(war.map(|(a, k)| (Kind::WriteAfterRead, a, k)))
            } else {
                let raw = self.global_conflict(&r.w, &cur).map(|k| (Kind::ReadAfterWrite, r.w, k));
                add_reader(&mut r.e1, &mut r.e2, &cur);
                add_launch_reader(&mut r.x1, &mut r.x2, &cur, self.atomics);
                raw
            };
            found.byte(a, conflict);
        }
        self.global.insert(base, recs);
        let name = mem.name_of(base).unwrap_or("an allocation").to_string();
        for (kind, other, bytes, acquire) in found.done() {
            self.report(Space::Global, kind, other, cur, bytes, Some((base, &name)), acquire);
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

/// Records `cur` among a global byte's readers of the launch. Without atomics
/// any reader of another workgroup races with a write, so the first (`x1`) and
/// the first of another workgroup (`x2`) suffice. Once atomics order
/// workgroups (`latest`), each slot keeps the latest read of its workgroup and
/// a read of a third workgroup replaces the older slot, so that the reads a
/// write must be ordered after are the latest of the two workgroups that read last.
fn add_launch_reader(x1: &mut Acc, x2: &mut Acc, cur: &Acc, latest: bool) {
    if !x1.some() {
        *x1 = *cur;
    } else if !latest {
        if !x2.some() && x1.wg != cur.wg {
            *x2 = *cur;
        }
    } else if x1.wg == cur.wg {
        *x1 = *cur;
    } else if !x2.some() || x2.wg == cur.wg {
        *x2 = *cur;
    } else {
        *x1 = *x2;
        *x2 = *cur;
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
/// A conflict of one byte: the kind, the earlier access, and the acquire
/// that lacks its cache invalidations, if one would order them.
type Conflict = (Kind, Acc, Option<Acquire>);

/// A conflict over a byte range: the kind, the earlier access, the bytes, the acquire.
type RangeConflict = (Kind, Acc, (u64, u64), Option<Acquire>);

#[derive(Default)]
struct Found {
    open: Option<(Conflict, u64, u64)>,
    done: Vec<RangeConflict>,
}

impl Found {
    fn byte(&mut self, at: u64, conflict: Option<Conflict>) {
        match (conflict, &mut self.open) {
            (Some(c), Some((oc, _, end))) if *oc == c && *end == at => *end = at + 1,
            (c, _) => {
                self.close();
                self.open = c.map(|c| (c, at, at + 1));
            }
        }
    }
    fn close(&mut self) {
        if let Some(((k, a, q), s, e)) = self.open.take() {
            self.done.push((k, a, (s, e), q));
        }
    }
    fn done(mut self) -> Vec<RangeConflict> {
        self.close();
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
