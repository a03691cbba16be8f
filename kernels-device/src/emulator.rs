//! The CPU emulator: runs a kernel body on the host, one coroutine per lane.
//!
//! Each workgroup runs on one OS thread. Its lanes are coroutines that run until
//! they reach a synchronization point (a lane exchange or a barrier) or return.
//! When every lane of a wave waits on the same exchange, the emulator performs
//! it, exactly as the hardware would (an exact copy of 32-bit values), and the
//! lanes continue; when every thread of the workgroup waits at a barrier, they
//! are released together. Results are deterministic.
//!
//! A lane that returns while others of its wave wait on an exchange, lanes of one
//! wave waiting on different exchanges, or threads that leave while others wait
//! at a barrier would hang or misbehave on a GPU: here they are reported as an
//! [`EmulatorError`] naming the workgroup, wave and lanes.
//!
//! Workgroups run in parallel on the host's cores; kernels of this crate never
//! communicate between workgroups.

use core::cell::Cell;
use std::boxed::Box;
use std::format;
use std::string::String;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::vec::Vec;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

use crate::geometry::WAVE_SIZE;

/// The geometry of one emulated launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Workgroups along x, y, z.
    pub grid: [u32; 3],
    /// Threads per (one-dimensional) workgroup; a multiple of 32.
    pub workgroup_size: u32,
    /// Dynamic workgroup memory, in bytes.
    pub workgroup_mem_bytes: usize,
}

/// Why an emulated launch failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulatorError(pub String);

impl core::fmt::Display for EmulatorError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EmulatorError {}

/// A cross-lane exchange, as requested by one lane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exchange {
    Xor(u32),
    Down(u32),
    Index(u32),
}

/// What a lane is blocked on when it yields to the scheduler.
#[derive(Clone, Copy, Debug)]
enum SyncPoint {
    Exchange { value: u32, op: Exchange },
    Barrier,
}

/// The identity of the lane that is running now, read by the wave primitives.
pub(crate) struct LaneContext {
    pub thread_id: u32,
    pub workgroup_size: u32,
    pub workgroup_id: [u32; 3],
    pub grid: [u32; 3],
    pub workgroup_mem: *mut u8,
}

struct Lane {
    ctx: LaneContext,
    yielder: Cell<*const Yielder<u32, SyncPoint>>,
}

std::thread_local! {
    static CURRENT: Cell<*const Lane> = const { Cell::new(core::ptr::null()) };
}

fn current() -> &'static Lane {
    let p = CURRENT.with(|c| c.get());
    assert!(!p.is_null(), "a wave primitive was called outside an emulated launch");
    // SAFETY: the scheduler sets CURRENT to a lane that outlives the resume.
    unsafe { &*p }
}

pub(crate) fn with_lane<R>(f: impl FnOnce(&LaneContext) -> R) -> R {
    f(&current().ctx)
}

fn suspend(point: SyncPoint) -> u32 {
    let y = current().yielder.get();
    // SAFETY: set by the lane's coroutine body before the kernel runs; the
    // coroutine (and so the yielder) is alive while its lane runs.
    unsafe { (*y).suspend(point) }
}

pub(crate) fn exchange(value: u32, op: Exchange) -> u32 {
    suspend(SyncPoint::Exchange { value, op })
}

pub(crate) fn barrier() {
    suspend(SyncPoint::Barrier);
}

/// Stack size of one lane's coroutine.
const LANE_STACK_BYTES: usize = 256 * 1024;
/// Lane stacks kept from one launch to the next, at most [`STACK_POOL_MAX`]: a
/// launch's worker threads are new each time, and mapping and unmapping a
/// 256 KiB stack per lane per launch was most of the time of a small launch
/// (12 ms of system time for a 256-lane workgroup).
static STACK_POOL: Mutex<Vec<DefaultStack>> = Mutex::new(Vec::new());
const STACK_POOL_MAX: usize = 1024;

/// Up to `n` stacks from the pool.
fn take_stacks(n: usize) -> Vec<DefaultStack> {
    let mut pool = STACK_POOL.lock().unwrap_or_else(|e| e.into_inner());
    let at = pool.len().saturating_sub(n);
    pool.split_off(at)
}

/// Returns `stacks` to the pool (those beyond its limit are unmapped).
fn return_stacks(stacks: Vec<DefaultStack>) {
    let mut pool = STACK_POOL.lock().unwrap_or_else(|e| e.into_inner());
    let room = STACK_POOL_MAX.saturating_sub(pool.len());
    pool.extend(stacks.into_iter().take(room));
}

/// Workgroup memory is filled with this byte so that a kernel that reads memory it
/// never wrote sees garbage, as on a GPU, rather than convenient zeros.
const WORKGROUP_MEM_FILL: u8 = 0xA5;

/// Runs `kernel` once per thread of the grid described by `cfg`.
///
/// # Safety
/// `kernel` may dereference raw pointers it captured: the caller guarantees they
/// are valid for what the kernel does with them.
pub unsafe fn launch(cfg: &LaunchConfig, kernel: &(dyn Fn() + Sync)) -> Result<(), EmulatorError> {
    if cfg.workgroup_size == 0 || !cfg.workgroup_size.is_multiple_of(WAVE_SIZE) || cfg.workgroup_size > 1024 {
        return Err(EmulatorError(format!(
            "workgroup size {} must be a non-zero multiple of {WAVE_SIZE}, at most 1024",
            cfg.workgroup_size
        )));
    }
    let total = cfg.grid.iter().map(|&g| g as u64).product::<u64>();
    if total == 0 {
        return Ok(());
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(total as usize);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    // The error of the lowest-numbered failing workgroup, so the report is deterministic.
    let first_error: Mutex<Option<(u64, EmulatorError)>> = Mutex::new(None);

    std::thread::scope(|s| {
        // Joined below, not left to the scope: the scope returns once every
        // worker's closure has returned, which may be before its thread has
        // exited (thread-local destructors still running), and then a launch
        // would return with memory of its threads not yet freed (LeakSanitizer
        // reported it under the c_abi fuzz target). A join waits for the exit.
        let workers: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut stacks = take_stacks(cfg.workgroup_size as usize);
                    let mut mem: Vec<u128> = Vec::new();
                    loop {
                        let linear = next.fetch_add(1, Ordering::Relaxed);
                        if linear >= total || stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let gx = cfg.grid[0] as u64;
                        let gy = cfg.grid[1] as u64;
                        let id = [(linear % gx) as u32, ((linear / gx) % gy) as u32, (linear / (gx * gy)) as u32];
                        mem.clear();
                        mem.resize(cfg.workgroup_mem_bytes.div_ceil(16), u128::from_ne_bytes([WORKGROUP_MEM_FILL; 16]));
                        if let Err(e) = run_workgroup(cfg, id, mem.as_mut_ptr() as *mut u8, kernel, &mut stacks) {
                            let mut slot = first_error.lock().unwrap();
                            if slot.as_ref().is_none_or(|(l, _)| linear < *l) {
                                *slot = Some((linear, e));
                            }
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    return_stacks(stacks);
                })
            })
            .collect();
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    match first_error.into_inner().unwrap() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

#[derive(Clone, Copy, Debug)]
enum LaneState {
    Ready(u32),
    Waiting(SyncPoint),
    Done,
}

type LaneCoroutine = Coroutine<u32, SyncPoint, (), DefaultStack>;

fn run_workgroup(
    cfg: &LaunchConfig,
    workgroup_id: [u32; 3],
    workgroup_mem: *mut u8,
    kernel: &(dyn Fn() + Sync),
    stacks: &mut Vec<DefaultStack>,
) -> Result<(), EmulatorError> {
    let n = cfg.workgroup_size as usize;
    let lanes: Vec<Box<Lane>> = (0..n as u32)
        .map(|t| {
            Box::new(Lane {
                ctx: LaneContext {
                    thread_id: t,
                    workgroup_size: cfg.workgroup_size,
                    workgroup_id,
                    grid: cfg.grid,
                    workgroup_mem,
                },
                yielder: Cell::new(core::ptr::null()),
            })
        })
        .collect();
    // SAFETY: every coroutine is finished or dropped (which unwinds it) before
    // this function returns, so the borrowed kernel outlives them.
    let kernel: &'static (dyn Fn() + Sync) = unsafe { core::mem::transmute(kernel) };
    let mut coroutines: Vec<LaneCoroutine> = lanes
        .iter()
        .map(|lane| {
            let stack = stacks.pop().unwrap_or_else(|| DefaultStack::new(LANE_STACK_BYTES).expect("lane stack"));
            let lane_ptr: *const Lane = &**lane;
            let lane_addr = lane_ptr as usize;
            Coroutine::with_stack(stack, move |yielder: &Yielder<u32, SyncPoint>, _: u32| {
                // SAFETY: the lane box outlives its coroutine.
                let lane = unsafe { &*(lane_addr as *const Lane) };
                lane.yielder.set(yielder);
                kernel();
            })
        })
        .collect();
    let mut states = std::vec![LaneState::Ready(0); n];

    let result = schedule(&lanes, &mut coroutines, &mut states, workgroup_id);
    CURRENT.with(|c| c.set(core::ptr::null()));
    for co in coroutines {
        if co.done() {
            stacks.push(co.into_stack());
        }
        // An unfinished coroutine is unwound and its stack freed when dropped here.
    }
    result
}

fn schedule(
    lanes: &[Box<Lane>],
    coroutines: &mut [LaneCoroutine],
    states: &mut [LaneState],
    wg: [u32; 3],
) -> Result<(), EmulatorError> {
    let n = lanes.len();
    let waves = n / WAVE_SIZE as usize;
    loop {
        // Run every ready lane up to its next synchronization point.
        for t in 0..n {
            if let LaneState::Ready(input) = states[t] {
                CURRENT.with(|c| c.set(&*lanes[t]));
                states[t] = match coroutines[t].resume(input) {
                    CoroutineResult::Yield(point) => LaneState::Waiting(point),
                    CoroutineResult::Return(()) => LaneState::Done,
                };
            }
        }
        if states.iter().all(|s| matches!(s, LaneState::Done)) {
            return Ok(());
        }
        // Perform every exchange that a whole wave is waiting on.
        let mut progressed = false;
        for w in 0..waves {
            let wave = &mut states[w * 32..(w + 1) * 32];
            let waiting_on_exchange =
                wave.iter().filter(|s| matches!(s, LaneState::Waiting(SyncPoint::Exchange { .. }))).count();
            if waiting_on_exchange == 0 {
                continue;
            }
            if waiting_on_exchange < 32 {
                return Err(divergence(wg, w, wave));
            }
            let mut values = [0u32; 32];
            let mut ops = [Exchange::Index(0); 32];
            for (l, s) in wave.iter().enumerate() {
                if let LaneState::Waiting(SyncPoint::Exchange { value, op }) = *s {
                    values[l] = value;
                    ops[l] = op;
                }
            }
            for l in 0..32 {
                let same_kind = match (ops[0], ops[l]) {
                    (Exchange::Index(_), Exchange::Index(_)) => true,
                    (a, b) => a == b,
                };
                if !same_kind {
                    return Err(EmulatorError(format!(
                        "workgroup {wg:?}, wave {w}: lanes disagree on the exchange \
                         (lane 0 asks for {:?}, lane {l} for {:?})",
                        ops[0], ops[l]
                    )));
                }
            }
            for l in 0..32u32 {
                let src = match ops[l as usize] {
                    Exchange::Xor(m) => l ^ m,
                    Exchange::Down(d) => {
                        if l + d < 32 {
                            l + d
                        } else {
                            l
                        }
                    }
                    Exchange::Index(s) => s,
                };
                wave[l as usize] = LaneState::Ready(values[(src % 32) as usize]);
            }
            progressed = true;
        }
        if progressed {
            continue;
        }
        // No exchange is pending: the only way forward is a barrier of the whole workgroup.
        if states.iter().all(|s| matches!(s, LaneState::Waiting(SyncPoint::Barrier))) {
            states.iter_mut().for_each(|s| *s = LaneState::Ready(0));
            continue;
        }
        let exited: Vec<usize> = (0..n).filter(|&t| matches!(states[t], LaneState::Done)).collect();
        return Err(EmulatorError(format!(
            "workgroup {wg:?}: {} threads wait at a barrier but threads {} have already returned \
             (a barrier must be reached by every thread of the workgroup)",
            n - exited.len(),
            list(&exited)
        )));
    }
}

fn divergence(wg: [u32; 3], w: usize, wave: &[LaneState]) -> EmulatorError {
    let at = |pred: fn(&LaneState) -> bool| -> Vec<usize> { (0..32).filter(|&l| pred(&wave[l])).collect() };
    let exchanging = at(|s| matches!(s, LaneState::Waiting(SyncPoint::Exchange { .. })));
    let op = match wave[exchanging[0]] {
        LaneState::Waiting(SyncPoint::Exchange { op, .. }) => op,
        _ => unreachable!(),
    };
    let done = at(|s| matches!(s, LaneState::Done));
    let barrier = at(|s| matches!(s, LaneState::Waiting(SyncPoint::Barrier)));
    let mut msg =
        format!("divergent lane exchange in workgroup {wg:?}, wave {w}: lanes {} wait on {op:?}", list(&exchanging));
    if !done.is_empty() {
        msg += &format!(", but lanes {} have returned", list(&done));
    }
    if !barrier.is_empty() {
        msg += &format!(", but lanes {} wait at a barrier", list(&barrier));
    }
    msg += " (every lane of a wave must take part in an exchange)";
    EmulatorError(msg)
}

fn list(v: &[usize]) -> String {
    // Compress runs: 0-15, 17.
    let mut out = String::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out += ", ";
        }
        out += &if i == j { format!("{}", v[i]) } else { format!("{}-{}", v[i], v[j]) };
        i = j + 1;
    }
    out
}
