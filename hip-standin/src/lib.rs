//! A stand-in for `libamdhip64`: the HIP runtime functions that
//! `host/runtime/hip.rs` resolves (the 22 of `host/runtime/hip_api.rs`, plus
//! `hipRuntimeGetVersion`, which `hip.rs` looks up to check the version, and
//! the older `hipMalloc` / `hipFree`), with the C signatures of ROCm 6.4+, on
//! top of the `rdna-sim` interpreter.
//!
//! What it shows and what it cannot:
//! - Devices: 0 is a simulated gfx1151 (40 CUs, 32-lane waves, 64 KiB of
//!   workgroup memory), 1 a simulated gfx1100 (which runs the generic object).
//! - Everything is synchronous: a launch runs to completion inside
//!   `hipModuleLaunchKernel`, so streams and events keep their order (and
//!   `hipFreeAsync` frees at once). Streams made by `hipStreamCreate*` and the
//!   NULL stream are valid handles; any other is `hipErrorInvalidHandle`.
//!   Event times are host wall-clock times of the simulation, not GPU times.
//! - Stream capture and graphs (`streams.rs`): a capturing stream records its
//!   kernel launches as graph nodes that keep `kernelParams` and `extra` by
//!   pointer, as CLR does, and a graph launch reads the arguments through those
//!   pointers at each replay. A call that synchronizes with the legacy stream
//!   while a capture is open invalidates the capture.
//! - Start-up order (`RDNA_SIM_REQUIRE_DEVICE_FLAGS=1`): a call that would
//!   create a HIP queue on a device before `hipSetDeviceFlags` has set that
//!   device's flags fails with `hipErrorNotInitialized`, naming the call.
//! - A kernel fault (an out-of-bounds access, a barrier some waves never reach,
//!   an unimplemented instruction) makes the launch return
//!   `hipErrorLaunchFailure`; `hipGetErrorString` of that code then gives the
//!   fault's description, which is also printed to stderr.

#![allow(non_snake_case, clippy::missing_safety_doc)]

mod streams;
pub use streams::*;

use rdna_sim::codeobj::{self, CodeObject};
use rdna_sim::dispatch::{self, Launch};
use rdna_sim::exec::Mode;
use rdna_sim::mem::Memory;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, MutexGuard};

pub type HipError = c_uint;
pub const SUCCESS: HipError = 0;
pub const INVALID_VALUE: HipError = 1;
pub const OUT_OF_MEMORY: HipError = 2;
pub const NOT_INITIALIZED: HipError = 3;
pub const INVALID_DEVICE_POINTER: HipError = 17;
pub const NO_DEVICE: HipError = 100;
pub const INVALID_DEVICE: HipError = 101;
pub const INVALID_IMAGE: HipError = 200;
pub const NO_BINARY_FOR_GPU: HipError = 209;
pub const INVALID_HANDLE: HipError = 400;
pub const NOT_FOUND: HipError = 500;
pub const SET_ON_ACTIVE_PROCESS: HipError = 708;
pub const LAUNCH_FAILURE: HipError = 719;
pub const STREAM_CAPTURE_UNSUPPORTED: HipError = 900;
pub const STREAM_CAPTURE_INVALIDATED: HipError = 901;
pub const STREAM_CAPTURE_IMPLICIT: HipError = 906;

/// HIP_VERSION of ROCm 6.4.0 (major * 10^7 + minor * 10^5 + patch).
pub const RUNTIME_VERSION: c_int = 60_400_000;

/// One simulated device.
pub struct DeviceSpec {
    pub name: &'static str,
    pub arch: &'static str,
    pub compute_units: c_int,
    pub major: c_int,
    pub minor: c_int,
}

pub const DEVICES: [DeviceSpec; 2] = [
    DeviceSpec { name: "AMD Radeon 8060S (rdna-sim)", arch: "gfx1151", compute_units: 40, major: 11, minor: 5 },
    DeviceSpec { name: "AMD Radeon RX 7900 XTX (rdna-sim)", arch: "gfx1100", compute_units: 48, major: 11, minor: 0 },
];

struct Module {
    co: CodeObject,
}

/// What `hipFunction_t` points to.
struct Function {
    module: usize,
    kernel: usize,
}

thread_local! {
    /// The current device: per host thread, as in HIP.
    static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

pub(crate) struct State {
    mem: Memory,
    modules: HashMap<usize, Module>,
    next_module: usize,
    /// (processor, mnemonic) pairs already written to the coverage file.
    covered: std::collections::HashSet<(String, String)>,
    /// The description of the last failure that has one, with its code
    /// (leaked, so it can be returned as a C string).
    last_failure: Option<(HipError, &'static CStr)>,
    /// The flags `hipSetDeviceFlags` set on each device, if it was called.
    device_flags: [Option<c_uint>; DEVICES.len()],
    /// Whether a call has created a queue on each device.
    has_queue: [bool; DEVICES.len()],
    /// Streams, graphs and executable graphs (streams.rs).
    streams: streams::Objects,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

pub(crate) fn state() -> MutexGuard<'static, Option<State>> {
    let mut g = STATE.lock().unwrap_or_else(|p| p.into_inner());
    if g.is_none() {
        *g = Some(State {
            mem: Memory::new(),
            modules: HashMap::new(),
            next_module: 1,
            covered: Default::default(),
            last_failure: None,
            device_flags: [None; DEVICES.len()],
            has_queue: [false; DEVICES.len()],
            streams: Default::default(),
        });
    }
    g
}

macro_rules! st {
    () => {
        state().as_mut().unwrap()
    };
}

fn name_of(e: HipError) -> &'static CStr {
    match e {
        SUCCESS => c"hipSuccess",
        INVALID_VALUE => c"hipErrorInvalidValue",
        OUT_OF_MEMORY => c"hipErrorOutOfMemory",
        INVALID_DEVICE_POINTER => c"hipErrorInvalidDevicePointer",
        NO_DEVICE => c"hipErrorNoDevice",
        INVALID_DEVICE => c"hipErrorInvalidDevice",
        INVALID_IMAGE => c"hipErrorInvalidImage",
        NO_BINARY_FOR_GPU => c"hipErrorNoBinaryForGpu",
        INVALID_HANDLE => c"hipErrorInvalidHandle",
        NOT_FOUND => c"hipErrorNotFound",
        NOT_INITIALIZED => c"hipErrorNotInitialized",
        SET_ON_ACTIVE_PROCESS => c"hipErrorSetOnActiveProcess",
        LAUNCH_FAILURE => c"hipErrorLaunchFailure",
        STREAM_CAPTURE_UNSUPPORTED => c"hipErrorStreamCaptureUnsupported",
        STREAM_CAPTURE_INVALIDATED => c"hipErrorStreamCaptureInvalidated",
        STREAM_CAPTURE_IMPLICIT => c"hipErrorStreamCaptureImplicit",
        _ => c"hipErrorUnknown",
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorName(error: HipError) -> *const c_char {
    name_of(error).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorString(error: HipError) -> *const c_char {
    if let Some((code, s)) = st!().last_failure
        && code == error
    {
        return s.as_ptr();
    }
    match error {
        SUCCESS => c"no error",
        INVALID_VALUE => c"invalid argument",
        OUT_OF_MEMORY => c"out of memory",
        INVALID_DEVICE_POINTER => c"invalid device pointer",
        NO_DEVICE => c"no ROCm-capable device is detected",
        INVALID_DEVICE => c"invalid device ordinal",
        INVALID_IMAGE => c"device kernel image is invalid",
        NO_BINARY_FOR_GPU => c"no kernel image is available for execution on the device",
        INVALID_HANDLE => c"invalid resource handle",
        NOT_FOUND => c"named symbol not found",
        NOT_INITIALIZED => c"initialization error",
        SET_ON_ACTIVE_PROCESS => c"cannot set while device is active in this process",
        LAUNCH_FAILURE => c"unspecified launch failure",
        STREAM_CAPTURE_UNSUPPORTED => c"operation not permitted when stream is capturing",
        STREAM_CAPTURE_INVALIDATED => c"operation failed due to a previous error during capture",
        STREAM_CAPTURE_IMPLICIT => c"operation would make the legacy stream depend on a capturing blocking stream",
        _ => c"unknown error",
    }
    .as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> HipError {
    if version.is_null() {
        return INVALID_VALUE;
    }
    unsafe { *version = RUNTIME_VERSION };
    SUCCESS
}

/// Fault injection: whether `RDNA_SIM_FAIL` (a comma-separated list, read at
/// every call so that a test can set and clear it) names `fault`: `no-device`
/// (hipGetDeviceCount reports none), `module-load` (hipModuleLoadData fails with
/// hipErrorInvalidImage), `malloc` (hipMalloc and hipMallocAsync fail with
/// hipErrorOutOfMemory).
fn injected(fault: &str) -> bool {
    std::env::var("RDNA_SIM_FAIL").is_ok_and(|v| v.split(',').any(|f| f.trim() == fault))
}

/// Returns `code` after making `message` its description (what
/// `hipGetErrorString(code)` answers until the next described failure) and
/// printing it.
pub(crate) fn fail(s: &mut State, code: HipError, message: String) -> HipError {
    eprintln!("hip-standin: {message}");
    let text = CString::new(message.replace('\0', " ")).unwrap();
    s.last_failure = Some((code, Box::leak(text.into_boxed_c_str())));
    code
}

/// What a call does that the runtime's rules care about.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Touches {
    /// Creates (or uses) a HIP queue on the current device.
    Queue,
    /// Creates a queue and synchronizes with the legacy (NULL) stream.
    LegacyStream,
}

/// The rules for call `call` that `touches` the current device: with
/// `RDNA_SIM_REQUIRE_DEVICE_FLAGS=1`, no queue before `hipSetDeviceFlags`
/// (CLR types a queue's signals by the flags in force when it is made); and
/// no synchronization with the legacy stream while a capture it would join is
/// open (the capture is invalidated, as in HIP and CUDA).
pub(crate) fn check_rules(s: &mut State, call: &str, touches: Touches) -> Result<(), HipError> {
    let device = CURRENT.get();
    if s.device_flags[device].is_none()
        && !s.has_queue[device]
        && std::env::var("RDNA_SIM_REQUIRE_DEVICE_FLAGS").is_ok_and(|v| v == "1")
    {
        return Err(fail(
            s,
            NOT_INITIALIZED,
            format!(
                "{call} would create a HIP queue on device {device} before hipSetDeviceFlags set its flags \
                 (RDNA_SIM_REQUIRE_DEVICE_FLAGS=1: the host runtime must set the flags first)"
            ),
        ));
    }
    s.has_queue[device] = true;
    if touches == Touches::LegacyStream
        && let Some(stream) = streams::invalidate_captures_joined_by_legacy(s)
    {
        return Err(fail(
            s,
            STREAM_CAPTURE_IMPLICIT,
            format!(
                "{call} synchronizes with the legacy stream while stream {stream:#x} is being captured; \
                 the capture is invalidated"
            ),
        ));
    }
    Ok(())
}

/// `hipSetDeviceFlags`: records the flags of the current device. With
/// `RDNA_SIM_REQUIRE_DEVICE_FLAGS=1`, setting them after a queue exists on the
/// device is `hipErrorSetOnActiveProcess`, as on a runtime whose queues are
/// already typed.
#[unsafe(no_mangle)]
pub extern "C" fn hipSetDeviceFlags(flags: c_uint) -> HipError {
    let mut g = state();
    let s = g.as_mut().unwrap();
    let device = CURRENT.get();
    if s.has_queue[device] && std::env::var("RDNA_SIM_REQUIRE_DEVICE_FLAGS").is_ok_and(|v| v == "1") {
        return fail(
            s,
            SET_ON_ACTIVE_PROCESS,
            format!("hipSetDeviceFlags({flags:#x}) on device {device}, which already has a queue"),
        );
    }
    s.device_flags[device] = Some(flags);
    SUCCESS
}

/// `hipGetDeviceFlags`: the flags set on the current device (0 if none were).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceFlags(flags: *mut c_uint) -> HipError {
    if flags.is_null() {
        return INVALID_VALUE;
    }
    let value = st!().device_flags[CURRENT.get()].unwrap_or(0);
    unsafe { *flags = value };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> HipError {
    if count.is_null() {
        return INVALID_VALUE;
    }
    if injected("no-device") {
        unsafe { *count = 0 };
        return NO_DEVICE;
    }
    unsafe { *count = DEVICES.len() as c_int };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn hipSetDevice(device: c_int) -> HipError {
    if device < 0 || device as usize >= DEVICES.len() {
        return INVALID_DEVICE;
    }
    CURRENT.set(device as usize);
    SUCCESS
}

/// Offsets in `hipDeviceProp_tR0600` (ROCm 6.x / 7.x `hip_runtime_api.h`).
mod props {
    pub const SIZE: usize = 1472;
    pub const NAME: usize = 0;
    pub const TOTAL_GLOBAL_MEM: usize = 288;
    pub const SHARED_MEM_PER_BLOCK: usize = 296;
    pub const REGS_PER_BLOCK: usize = 304;
    pub const WARP_SIZE: usize = 308;
    pub const MAX_THREADS_PER_BLOCK: usize = 320;
    pub const MAX_THREADS_DIM: usize = 324;
    pub const MAX_GRID_SIZE: usize = 336;
    pub const MAJOR: usize = 360;
    pub const MINOR: usize = 364;
    pub const MULTI_PROCESSOR_COUNT: usize = 388;
    pub const GCN_ARCH_NAME: usize = 1160;
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDevicePropertiesR0600(p: *mut u8, device: c_int) -> HipError {
    if p.is_null() {
        return INVALID_VALUE;
    }
    let Some(d) = usize::try_from(device).ok().and_then(|i| DEVICES.get(i)) else { return INVALID_DEVICE };
    let b = unsafe { std::slice::from_raw_parts_mut(p, props::SIZE) };
    b.fill(0);
    let put_str = |b: &mut [u8], o: usize, s: &str| b[o..o + s.len()].copy_from_slice(s.as_bytes());
    let put_i32 = |b: &mut [u8], o: usize, v: c_int| b[o..o + 4].copy_from_slice(&v.to_ne_bytes());
    let put_usize = |b: &mut [u8], o: usize, v: usize| b[o..o + 8].copy_from_slice(&v.to_ne_bytes());
    put_str(b, props::NAME, d.name);
    put_usize(b, props::TOTAL_GLOBAL_MEM, 64 << 30);
    put_usize(b, props::SHARED_MEM_PER_BLOCK, 64 * 1024);
    put_i32(b, props::REGS_PER_BLOCK, 65536);
    put_i32(b, props::WARP_SIZE, 32);
    put_i32(b, props::MAX_THREADS_PER_BLOCK, 1024);
    for i in 0..3 {
        put_i32(b, props::MAX_THREADS_DIM + 4 * i, 1024);
        put_i32(b, props::MAX_GRID_SIZE + 4 * i, i32::MAX);
    }
    put_i32(b, props::MAJOR, d.major);
    put_i32(b, props::MINOR, d.minor);
    put_i32(b, props::MULTI_PROCESSOR_COUNT, d.compute_units);
    put_str(b, props::GCN_ARCH_NAME, &format!("{}:sramecc-:xnack-", d.arch));
    SUCCESS
}

/// The size of an ELF image given only its start (hipModuleLoadData gets no size):
/// the end of the section header table or of the last segment, whichever is later.
unsafe fn elf_size(image: *const u8) -> Option<usize> {
    let h = unsafe { std::slice::from_raw_parts(image, 64) };
    if &h[..4] != b"\x7fELF" || h[4] != 2 || h[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, shoff) = (u64_at(32), u64_at(40));
    let (phentsize, phnum, shentsize, shnum) = (u16_at(54), u16_at(56), u16_at(58), u16_at(60));
    let mut end = shoff + shentsize * shnum;
    end = end.max(phoff + phentsize * phnum);
    for i in 0..phnum {
        let ph = unsafe { std::slice::from_raw_parts(image.add(phoff + i * phentsize), phentsize) };
        let off = u64::from_le_bytes(ph[8..16].try_into().unwrap()) as usize;
        let filesz = u64::from_le_bytes(ph[32..40].try_into().unwrap()) as usize;
        end = end.max(off + filesz);
    }
    (end < 1 << 32).then_some(end)
}

/// Whether a code object for `target` (the metadata's `amdhsa.target`) runs on `arch`.
fn runs_on(target: &str, arch: &str) -> bool {
    let processor = target.rsplit("--").next().unwrap_or("").split(':').next().unwrap_or("");
    processor == arch || (processor == "gfx11-generic" && arch.starts_with("gfx11"))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> HipError {
    if module.is_null() || image.is_null() {
        return INVALID_VALUE;
    }
    if injected("module-load") {
        eprintln!("hip-standin: hipModuleLoadData: failed on purpose (RDNA_SIM_FAIL=module-load)");
        return INVALID_IMAGE;
    }
    let Some(size) = (unsafe { elf_size(image as *const u8) }) else { return INVALID_IMAGE };
    let bytes = unsafe { std::slice::from_raw_parts(image as *const u8, size) };
    let co = match codeobj::load(bytes) {
        Ok(co) => co,
        Err(e) => {
            eprintln!("hip-standin: hipModuleLoadData: {e}");
            return INVALID_IMAGE;
        }
    };
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = check_rules(s, "hipModuleLoadData", Touches::Queue) {
        return e;
    }
    let arch = DEVICES[CURRENT.get()].arch;
    if !runs_on(&co.arch, arch) {
        eprintln!("hip-standin: hipModuleLoadData: a {} code object does not run on {arch}", co.arch);
        return NO_BINARY_FOR_GPU;
    }
    let id = s.next_module;
    s.next_module += 1;
    s.modules.insert(id, Module { co });
    unsafe { *module = id as *mut c_void };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleGetFunction(
    function: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> HipError {
    if function.is_null() || name.is_null() {
        return INVALID_VALUE;
    }
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    let mut g = state();
    let s = g.as_mut().unwrap();
    let Some(m) = s.modules.get(&(module as usize)) else { return INVALID_HANDLE };
    let Some(kernel) = m.co.kernels.iter().position(|k| k.name == name) else { return NOT_FOUND };
    let f = Box::leak(Box::new(Function { module: module as usize, kernel }));
    unsafe { *function = f as *mut Function as *mut c_void };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn hipModuleUnload(module: *mut c_void) -> HipError {
    if st!().modules.remove(&(module as usize)).is_some() { SUCCESS } else { INVALID_HANDLE }
}

const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
const LAUNCH_PARAM_END: usize = 3;

/// Perturbation mode from `RDNA_SIM_PERTURB=<seed>` (approximate instructions ±1 ulp),
/// strict-wait mode from `RDNA_SIM_STRICT_WAIT=1`.
fn mode_from_env(ieee: bool) -> Mode {
    let perturb = std::env::var("RDNA_SIM_PERTURB").ok().and_then(|s| s.parse().ok());
    let strict_wait = std::env::var("RDNA_SIM_STRICT_WAIT").is_ok_and(|v| v == "1");
    Mode { ieee, perturb, strict_wait }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    function: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_mem_bytes: c_uint,
    stream: *mut c_void,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError {
    let node = streams::KernelNode {
        function: function as usize,
        grid: [grid_x, grid_y, grid_z],
        block: [block_x, block_y, block_z],
        shared_mem_bytes,
        kernel_params: kernel_params as usize,
        extra: extra as usize,
    };
    let mut g = state();
    let s = g.as_mut().unwrap();
    match streams::enqueue(s, "hipModuleLaunchKernel", stream) {
        Ok(streams::Enqueue::Run) => unsafe { run_kernel(s, &node) },
        Ok(streams::Enqueue::Capture(capture)) => {
            // Recorded by pointer: the arguments are read when the graph runs.
            capture.nodes.push(node);
            SUCCESS
        }
        Err(e) => e,
    }
}

/// Runs one kernel launch to completion, reading its arguments from
/// `kernelParams` or `extra` now.
///
/// # Safety
/// The node's pointers are what `hipModuleLaunchKernel` was given.
pub(crate) unsafe fn run_kernel(s: &mut State, node: &streams::KernelNode) -> HipError {
    if node.function == 0 {
        return INVALID_HANDLE;
    }
    let f = unsafe { &*(node.function as *const Function) };
    let Some(m) = s.modules.get(&f.module) else { return INVALID_HANDLE };
    let k = &m.co.kernels[f.kernel];
    let arch = m_arch(&m.co);
    let extra = node.extra as *mut *mut c_void;
    let kernel_params = node.kernel_params as *mut *mut c_void;
    // The argument buffer: from `extra` (HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE)
    // or packed from `kernel_params` at the metadata's offsets.
    let mut kernarg = vec![0u8; k.kernarg_segment_size as usize];
    if !extra.is_null() {
        let (mut buf, mut size) = (std::ptr::null::<u8>(), None::<usize>);
        let mut i = 0;
        loop {
            let key = unsafe { *extra.add(i) } as usize;
            match key {
                LAUNCH_PARAM_END => break,
                LAUNCH_PARAM_BUFFER_POINTER => buf = unsafe { *extra.add(i + 1) } as *const u8,
                LAUNCH_PARAM_BUFFER_SIZE => size = Some(unsafe { *(*extra.add(i + 1) as *const usize) }),
                _ => return INVALID_VALUE,
            }
            i += 2;
        }
        let Some(size) = size else { return INVALID_VALUE };
        if buf.is_null() {
            return INVALID_VALUE;
        }
        kernarg.resize(kernarg.len().max(size), 0);
        kernarg[..size].copy_from_slice(unsafe { std::slice::from_raw_parts(buf, size) });
    } else if !kernel_params.is_null() {
        for (i, a) in k.args.iter().filter(|a| !a.value_kind.starts_with("hidden_")).enumerate() {
            let p = unsafe { *kernel_params.add(i) } as *const u8;
            if p.is_null() {
                return INVALID_VALUE;
            }
            let (o, n) = (a.offset as usize, a.size as usize);
            kernarg[o..o + n].copy_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
        }
    } else if k.args.iter().any(|a| !a.value_kind.starts_with("hidden_")) {
        return INVALID_VALUE;
    }
    let l = Launch {
        grid: node.grid,
        block: node.block,
        dynamic_lds: node.shared_mem_bytes,
        kernarg: &kernarg,
        mode: mode_from_env(k.kd.ieee_mode()),
        ..Launch::default()
    };
    let k = k.clone();
    match dispatch::launch(&mut s.mem, &k, &l) {
        Ok(counts) => {
            record_coverage(s, &arch, &k, &counts);
            record_counts(&arch, &k, &l, &counts);
            SUCCESS
        }
        Err(e) => fail(s, LAUNCH_FAILURE, format!("launch failed: {e}")),
    }
}

fn m_arch(co: &CodeObject) -> String {
    co.arch.rsplit("--").next().unwrap_or("").to_string()
}

/// With `RDNA_SIM_COVERAGE=<file>` in the environment, appends each mnemonic a
/// launch executed, as `<processor>\t<mnemonic>` lines, once per process.
fn record_coverage(s: &mut State, arch: &str, k: &codeobj::Kernel, counts: &rdna_sim::exec::Counts) {
    static PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let Some(path) = PATH.get_or_init(|| std::env::var("RDNA_SIM_COVERAGE").ok()) else { return };
    let mut lines = String::new();
    for (i, &h) in counts.hits.iter().enumerate() {
        if h == 0 {
            continue;
        }
        let inst = &k.insts[i];
        for m in std::iter::once(inst.mnemonic()).chain(inst.mnemonic_y().map(str::to_string)) {
            if s.covered.insert((arch.to_string(), m.clone())) {
                lines.push_str(&format!("{arch}\t{m}\n"));
            }
        }
    }
    if !lines.is_empty() {
        append("RDNA_SIM_COVERAGE", path, &lines);
    }
}

/// Appends `text` to `path`, the file named by the variable `var`; a failure
/// is reported on stderr (the launch itself has succeeded).
fn append(var: &str, path: &str, text: &str) {
    use std::io::Write;
    let written =
        std::fs::OpenOptions::new().create(true).append(true).open(path).and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        eprintln!("hip-standin: {var}={path}: {e}");
    }
}

/// With `RDNA_SIM_COUNTS=<file>` in the environment, appends one tab-separated
/// line per launch: processor, kernel, grid `x,y,z`, workgroup `x,y,z`, dynamic
/// workgroup bytes, then the executed wave-instructions by class, in the order
/// of `Counts::classes` (the first launch also writes a header line naming the
/// columns), among them the loads' request bytes and the memory latencies the
/// waves wait through (`vmem_load_request_bytes`, `vmem_load_rounds`: the bytes in
/// flight). These are the inputs of the gfx1151 performance model.
fn record_counts(arch: &str, k: &codeobj::Kernel, l: &Launch, c: &rdna_sim::exec::Counts) {
    static PATH: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    static HEADER: std::sync::Once = std::sync::Once::new();
    let Some(path) = PATH.get_or_init(|| std::env::var("RDNA_SIM_COUNTS").ok()) else { return };
    let mut text = String::new();
    HEADER.call_once(|| {
        text.push_str("#processor\tkernel\tgrid\tworkgroup\tdynamic_lds");
        for (name, _) in c.classes() {
            text.push_str(&format!("\t{name}"));
        }
        text.push('\n');
    });
    let dims = |d: [u32; 3]| format!("{},{},{}", d[0], d[1], d[2]);
    text.push_str(&format!("{arch}\t{}\t{}\t{}\t{}", k.name, dims(l.grid), dims(l.block), l.dynamic_lds));
    for (_, v) in c.classes() {
        text.push_str(&format!("\t{v}"));
    }
    text.push('\n');
    append("RDNA_SIM_COUNTS", path, &text);
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipError {
    unsafe { alloc(ptr, size, "hipMalloc") }
}

/// One allocation, named `<how>(<size>)` in fault descriptions.
unsafe fn alloc(ptr: *mut *mut c_void, size: usize, how: &str) -> HipError {
    if ptr.is_null() {
        return INVALID_VALUE;
    }
    if size > 16 << 30 || injected("malloc") {
        return OUT_OF_MEMORY;
    }
    let a = st!().mem.alloc(size, &format!("{how}({size})"));
    unsafe { *ptr = a as *mut c_void };
    SUCCESS
}

/// `hipFree`: synchronizes the device first, as HIP's does.
#[unsafe(no_mangle)]
pub extern "C" fn hipFree(ptr: *mut c_void) -> HipError {
    if ptr.is_null() {
        return SUCCESS;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = check_rules(s, "hipFree", Touches::LegacyStream) {
        return e;
    }
    free_now(s, ptr)
}

fn free_now(s: &mut State, ptr: *mut c_void) -> HipError {
    match s.mem.free(ptr as u64) {
        Ok(()) => SUCCESS,
        Err(_) => INVALID_DEVICE_POINTER,
    }
}

/// `hipMallocAsync`: stream-ordered allocation, on the NULL stream or one the
/// stand-in made (not a capturing one).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocAsync(ptr: *mut *mut c_void, size: usize, stream: *mut c_void) -> HipError {
    {
        let mut g = state();
        if let Err(e) = streams::enqueue_eager(g.as_mut().unwrap(), "hipMallocAsync", stream) {
            return e;
        }
    }
    unsafe { alloc(ptr, size, "hipMallocAsync") }
}

/// `hipFreeAsync`: stream-ordered free. Every launch, copy and memset of the
/// stand-in runs to completion before its call returns, so all work enqueued on
/// the stream before this call is already done: freeing immediately is what
/// stream order asks for.
#[unsafe(no_mangle)]
pub extern "C" fn hipFreeAsync(ptr: *mut c_void, stream: *mut c_void) -> HipError {
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = streams::enqueue_eager(s, "hipFreeAsync", stream) {
        return e;
    }
    if ptr.is_null() {
        return SUCCESS;
    }
    free_now(s, ptr)
}

/// `hipStreamGetDevice`: the current device for the NULL stream, the
/// stream's own for one the stand-in made; any other handle is
/// `hipErrorInvalidHandle`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamGetDevice(stream: *mut c_void, device: *mut c_int) -> HipError {
    if device.is_null() {
        return INVALID_VALUE;
    }
    let found = if stream.is_null() { Some(CURRENT.get()) } else { streams::device_of(st!(), stream) };
    match found {
        Some(d) => {
            unsafe { *device = d as c_int };
            SUCCESS
        }
        None => INVALID_HANDLE,
    }
}

/// Not a HIP function: for tests, which can look it up in the same loaded
/// library as `hip.rs`. Writes the name of the live allocation that starts at
/// `ptr` (`hipMallocAsync(<bytes>)`, `hipMalloc(<bytes>)`) into `name`
/// (`cap` bytes, NUL-terminated, truncated to fit) and returns its length, or
/// returns -1 when no live allocation starts there.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStandinAllocationName(ptr: *const c_void, name: *mut c_char, cap: usize) -> c_int {
    let guard = state();
    let Some(what) = guard.as_ref().unwrap().mem.name_of(ptr as u64) else { return -1 };
    if !name.is_null() && cap > 0 {
        let n = what.len().min(cap - 1);
        unsafe {
            std::ptr::copy_nonoverlapping(what.as_ptr(), name as *mut u8, n);
            *name.add(n) = 0;
        }
    }
    what.len() as c_int
}

/// A synchronous copy between the host and the device (`call`): nothing to do
/// for 0 bytes, a null host pointer refused, otherwise `copy`'s outcome on the
/// memory.
fn host_copy(
    call: &str,
    size: usize,
    host: *const c_void,
    copy: impl FnOnce(&mut Memory) -> Result<(), String>,
) -> HipError {
    if size == 0 {
        return SUCCESS;
    }
    if host.is_null() {
        return INVALID_VALUE;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = check_rules(s, call, Touches::LegacyStream) {
        return e;
    }
    if copy(&mut s.mem).is_ok() { SUCCESS } else { INVALID_VALUE }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoD(dst: *mut c_void, src: *const c_void, size: usize) -> HipError {
    host_copy("hipMemcpyHtoD", size, src, |mem| {
        mem.write(dst as u64, unsafe { std::slice::from_raw_parts(src as *const u8, size) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoH(dst: *mut c_void, src: *mut c_void, size: usize) -> HipError {
    host_copy("hipMemcpyDtoH", size, dst, |mem| {
        mem.read(src as u64, unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, size) })
    })
}

/// `hipMemcpy` between the host and the device in either direction
/// (`hipMemcpyHostToDevice` 1, `hipMemcpyDeviceToHost` 2); the stand-in's
/// device memory is not host memory, so the other kinds are refused.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpy(dst: *mut c_void, src: *const c_void, size: usize, kind: c_uint) -> HipError {
    match kind {
        1 => unsafe { hipMemcpyHtoD(dst, src, size) },
        2 => host_copy("hipMemcpy", size, dst, |mem| {
            mem.read(src as u64, unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, size) })
        }),
        _ => INVALID_VALUE,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn hipMemcpyDtoDAsync(dst: *mut c_void, src: *mut c_void, size: usize, stream: *mut c_void) -> HipError {
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = streams::enqueue_eager(s, "hipMemcpyDtoDAsync", stream) {
        return e;
    }
    if size == 0 {
        return SUCCESS;
    }
    let mut tmp = vec![0u8; size];
    if s.mem.read(src as u64, &mut tmp).is_err() {
        return INVALID_VALUE;
    }
    match s.mem.write(dst as u64, &tmp) {
        Ok(()) => SUCCESS,
        Err(_) => INVALID_VALUE,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn hipMemset(dst: *mut c_void, value: c_int, size: usize) -> HipError {
    if size == 0 {
        return SUCCESS;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = check_rules(s, "hipMemset", Touches::LegacyStream) {
        return e;
    }
    match s.mem.write(dst as u64, &vec![value as u8; size]) {
        Ok(()) => SUCCESS,
        Err(_) => INVALID_VALUE,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn hipDeviceSynchronize() -> HipError {
    match check_rules(st!(), "hipDeviceSynchronize", Touches::LegacyStream) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

/// What `hipEvent_t` points to: the host time of its last record.
struct Event {
    at: Option<std::time::Instant>,
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventCreate(event: *mut *mut c_void) -> HipError {
    if event.is_null() {
        return INVALID_VALUE;
    }
    unsafe { *event = Box::into_raw(Box::new(Event { at: None })) as *mut c_void };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventRecord(event: *mut c_void, stream: *mut c_void) -> HipError {
    if event.is_null() {
        return INVALID_HANDLE;
    }
    if let Err(e) = streams::enqueue_eager(st!(), "hipEventRecord", stream) {
        return e;
    }
    unsafe { (*(event as *mut Event)).at = Some(std::time::Instant::now()) };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn hipEventSynchronize(event: *mut c_void) -> HipError {
    if event.is_null() { INVALID_HANDLE } else { SUCCESS }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventElapsedTime(ms: *mut f32, start: *mut c_void, stop: *mut c_void) -> HipError {
    if ms.is_null() || start.is_null() || stop.is_null() {
        return INVALID_VALUE;
    }
    let (a, b) = unsafe { ((*(start as *const Event)).at, (*(stop as *const Event)).at) };
    let (Some(a), Some(b)) = (a, b) else { return INVALID_HANDLE };
    unsafe { *ms = b.saturating_duration_since(a).as_secs_f32() * 1e3 };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventDestroy(event: *mut c_void) -> HipError {
    if event.is_null() {
        return INVALID_HANDLE;
    }
    drop(unsafe { Box::from_raw(event as *mut Event) });
    SUCCESS
}
