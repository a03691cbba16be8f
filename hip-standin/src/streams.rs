//! Streams, stream capture and graphs of the stand-in.
//!
//! Work on a stream runs when it is enqueued (the stand-in is synchronous), so
//! a stream is only a device and, while it is captured, the graph being
//! recorded. A captured kernel launch becomes a kernel node that keeps the
//! caller's `kernelParams` and `extra` pointers, not copies: CLR's kernel
//! nodes keep them by pointer too, so a caller whose arguments die before the
//! graph's last replay must fail here as it would there. Other work on a
//! capturing stream (copies, allocations, events, graph launches) is refused
//! with `hipErrorStreamCaptureUnsupported` and invalidates the capture. Nodes
//! run in the order they were added; the stand-in's graphs have no other
//! dependencies.

use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::thread::ThreadId;

use super::{
    CURRENT, HipError, INVALID_HANDLE, INVALID_VALUE, STREAM_CAPTURE_INVALIDATED, STREAM_CAPTURE_UNSUPPORTED, SUCCESS,
    State, Touches, check_rules, fail, run_kernel, state,
};

/// `hipStreamCaptureModeGlobal`, `...ThreadLocal`, `...Relaxed`.
const CAPTURE_GLOBAL: c_uint = 0;
const CAPTURE_THREAD_LOCAL: c_uint = 1;
const CAPTURE_RELAXED: c_uint = 2;
/// `hipStreamCaptureStatusNone`, `...Active`, `...Invalidated`.
const STATUS_NONE: c_uint = 0;
const STATUS_ACTIVE: c_uint = 1;
const STATUS_INVALIDATED: c_uint = 2;

/// One kernel launch as `hipModuleLaunchKernel` or `hipKernelNodeParams`
/// gives it; the pointers are the caller's, read when the launch runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KernelNode {
    pub function: usize,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
    pub kernel_params: usize,
    pub extra: usize,
}

/// A capture in progress.
pub(crate) struct Capture {
    mode: c_uint,
    thread: ThreadId,
    pub nodes: Vec<KernelNode>,
    invalidated: bool,
}

struct Stream {
    device: usize,
    capture: Option<Capture>,
}

/// The stand-in's streams, graphs and executable graphs, by handle. Handles
/// are numbers in a range no allocation uses; nothing dereferences them.
#[derive(Default)]
pub(crate) struct Objects {
    streams: HashMap<usize, Stream>,
    graphs: HashMap<usize, Vec<KernelNode>>,
    execs: HashMap<usize, Vec<KernelNode>>,
    next: usize,
}

impl Objects {
    fn handle(&mut self) -> usize {
        self.next += 1;
        0x5741_0000_0000 + self.next * 16
    }
}

/// What to do with work enqueued on a stream.
pub(crate) enum Enqueue<'a> {
    /// Run it now.
    Run,
    /// Record it in this capture.
    Capture(&'a mut Capture),
}

/// The device of a stream the stand-in made.
pub(crate) fn device_of(s: &State, stream: *mut c_void) -> Option<usize> {
    s.streams.streams.get(&(stream as usize)).map(|st| st.device)
}

/// Checks work `call` enqueued on `stream` (NULL or a stream of the current
/// device) against the start-up and capture rules, and says whether it runs
/// now or is captured.
pub(crate) fn enqueue<'a>(s: &'a mut State, call: &str, stream: *mut c_void) -> Result<Enqueue<'a>, HipError> {
    if stream.is_null() {
        check_rules(s, call, Touches::LegacyStream)?;
        return Ok(Enqueue::Run);
    }
    let Some(st) = s.streams.streams.get(&(stream as usize)) else { return Err(INVALID_HANDLE) };
    if st.device != CURRENT.get() {
        return Err(fail(
            s,
            INVALID_HANDLE,
            format!(
                "{call}: stream {:#x} belongs to device {}, the current device is {}",
                stream as usize,
                st.device,
                CURRENT.get()
            ),
        ));
    }
    check_rules(s, call, Touches::Queue)?;
    let st = s.streams.streams.get_mut(&(stream as usize)).expect("looked up above");
    match &mut st.capture {
        None => Ok(Enqueue::Run),
        Some(c) if c.invalidated => Err(STREAM_CAPTURE_INVALIDATED),
        Some(c) => Ok(Enqueue::Capture(c)),
    }
}

/// [`enqueue`] for work the stand-in cannot capture: refused (and the capture
/// invalidated) on a capturing stream.
pub(crate) fn enqueue_eager(s: &mut State, call: &str, stream: *mut c_void) -> Result<(), HipError> {
    match enqueue(s, call, stream)? {
        Enqueue::Run => Ok(()),
        Enqueue::Capture(c) => {
            c.invalidated = true;
            Err(fail(
                s,
                STREAM_CAPTURE_UNSUPPORTED,
                format!("{call} on a capturing stream; the capture is invalidated"),
            ))
        }
    }
}

/// Invalidates every open capture that a call synchronizing with the legacy
/// stream on this thread joins (global mode from any thread, thread-local
/// mode from the capturing thread) and returns one such stream.
pub(crate) fn invalidate_captures_joined_by_legacy(s: &mut State) -> Option<usize> {
    let me = std::thread::current().id();
    let mut hit = None;
    for (&handle, st) in s.streams.streams.iter_mut() {
        if let Some(c) = &mut st.capture
            && !c.invalidated
            && (c.mode == CAPTURE_GLOBAL || (c.mode == CAPTURE_THREAD_LOCAL && c.thread == me))
        {
            c.invalidated = true;
            hit = Some(handle);
        }
    }
    hit
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut *mut c_void, _flags: c_uint) -> HipError {
    if stream.is_null() {
        return INVALID_VALUE;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = check_rules(s, "hipStreamCreateWithFlags", Touches::Queue) {
        return e;
    }
    let handle = s.streams.handle();
    s.streams.streams.insert(handle, Stream { device: CURRENT.get(), capture: None });
    unsafe { *stream = handle as *mut c_void };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreate(stream: *mut *mut c_void) -> HipError {
    unsafe { hipStreamCreateWithFlags(stream, 0) }
}

#[unsafe(no_mangle)]
pub extern "C" fn hipStreamDestroy(stream: *mut c_void) -> HipError {
    if st_remove(stream) { SUCCESS } else { INVALID_HANDLE }
}

fn st_remove(stream: *mut c_void) -> bool {
    state().as_mut().unwrap().streams.streams.remove(&(stream as usize)).is_some()
}

/// `hipStreamSynchronize`: the stream's work is done when it is enqueued, so
/// this only checks the handle and the rules.
#[unsafe(no_mangle)]
pub extern "C" fn hipStreamSynchronize(stream: *mut c_void) -> HipError {
    match enqueue_eager(state().as_mut().unwrap(), "hipStreamSynchronize", stream) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

/// `hipStreamQuery`: always done (see `hipStreamSynchronize`).
#[unsafe(no_mangle)]
pub extern "C" fn hipStreamQuery(stream: *mut c_void) -> HipError {
    match enqueue_eager(state().as_mut().unwrap(), "hipStreamQuery", stream) {
        Ok(()) => SUCCESS,
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn hipStreamBeginCapture(stream: *mut c_void, mode: c_uint) -> HipError {
    let mut g = state();
    let s = g.as_mut().unwrap();
    if !matches!(mode, CAPTURE_GLOBAL | CAPTURE_THREAD_LOCAL | CAPTURE_RELAXED) {
        return INVALID_VALUE;
    }
    // The legacy stream cannot be captured.
    let Some(st) = s.streams.streams.get_mut(&(stream as usize)) else { return INVALID_HANDLE };
    if st.capture.is_some() {
        return fail(
            s,
            INVALID_VALUE,
            format!("hipStreamBeginCapture: stream {:#x} is already capturing", stream as usize),
        );
    }
    st.capture = Some(Capture { mode, thread: std::thread::current().id(), nodes: Vec::new(), invalidated: false });
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamEndCapture(stream: *mut c_void, graph: *mut *mut c_void) -> HipError {
    if graph.is_null() {
        return INVALID_VALUE;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    let Some(st) = s.streams.streams.get_mut(&(stream as usize)) else { return INVALID_HANDLE };
    let Some(capture) = st.capture.take() else {
        return fail(s, INVALID_VALUE, format!("hipStreamEndCapture: stream {:#x} is not capturing", stream as usize));
    };
    if capture.invalidated {
        unsafe { *graph = std::ptr::null_mut() };
        return STREAM_CAPTURE_INVALIDATED;
    }
    let handle = s.streams.handle();
    s.streams.graphs.insert(handle, capture.nodes);
    unsafe { *graph = handle as *mut c_void };
    SUCCESS
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamIsCapturing(stream: *mut c_void, status: *mut c_uint) -> HipError {
    if status.is_null() {
        return INVALID_VALUE;
    }
    let value = if stream.is_null() {
        STATUS_NONE
    } else {
        match st_capture_status(stream) {
            Some(v) => v,
            None => return INVALID_HANDLE,
        }
    };
    unsafe { *status = value };
    SUCCESS
}

fn st_capture_status(stream: *mut c_void) -> Option<c_uint> {
    let g = state();
    let st = g.as_ref().unwrap().streams.streams.get(&(stream as usize))?;
    Some(match &st.capture {
        None => STATUS_NONE,
        Some(c) if c.invalidated => STATUS_INVALIDATED,
        Some(_) => STATUS_ACTIVE,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphCreate(graph: *mut *mut c_void, flags: c_uint) -> HipError {
    if graph.is_null() || flags != 0 {
        return INVALID_VALUE;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    let handle = s.streams.handle();
    s.streams.graphs.insert(handle, Vec::new());
    unsafe { *graph = handle as *mut c_void };
    SUCCESS
}

/// `hipKernelNodeParams` of ROCm 6.x (`hip_runtime_api.h`).
#[repr(C)]
pub struct KernelNodeParams {
    pub block_dim: [u32; 3],
    pub extra: *mut *mut c_void,
    pub func: *mut c_void,
    pub grid_dim: [u32; 3],
    pub kernel_params: *mut *mut c_void,
    pub shared_mem_bytes: c_uint,
}

/// `hipGraphAddKernelNode`: appends the launch to `graph`, keeping its
/// argument pointers. Dependencies must be nodes of the graph; the stand-in
/// runs nodes in the order they were added, which respects any dependency
/// given here.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphAddKernelNode(
    node: *mut *mut c_void,
    graph: *mut c_void,
    dependencies: *const *mut c_void,
    count: usize,
    params: *const KernelNodeParams,
) -> HipError {
    if node.is_null() || params.is_null() || (count > 0 && dependencies.is_null()) {
        return INVALID_VALUE;
    }
    let p = unsafe { &*params };
    if p.func.is_null() || p.grid_dim.contains(&0) || p.block_dim.contains(&0) {
        return INVALID_VALUE;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    let Some(nodes) = s.streams.graphs.get_mut(&(graph as usize)) else { return INVALID_HANDLE };
    let index = nodes.len();
    for i in 0..count {
        // A node handle is its graph's handle plus one more than its index.
        let dep = unsafe { *dependencies.add(i) } as usize;
        if dep <= graph as usize || dep > graph as usize + index {
            return INVALID_VALUE;
        }
    }
    nodes.push(KernelNode {
        function: p.func as usize,
        grid: p.grid_dim,
        block: p.block_dim,
        shared_mem_bytes: p.shared_mem_bytes,
        kernel_params: p.kernel_params as usize,
        extra: p.extra as usize,
    });
    unsafe { *node = (graph as usize + index + 1) as *mut c_void };
    SUCCESS
}

/// `hipGraphGetNodes`: the number of nodes, and their handles if asked for.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphGetNodes(graph: *mut c_void, nodes: *mut *mut c_void, count: *mut usize) -> HipError {
    if count.is_null() {
        return INVALID_VALUE;
    }
    let g = state();
    let Some(list) = g.as_ref().unwrap().streams.graphs.get(&(graph as usize)) else { return INVALID_HANDLE };
    if !nodes.is_null() {
        let room = unsafe { *count }.min(list.len());
        for i in 0..room {
            unsafe { *nodes.add(i) = (graph as usize + i + 1) as *mut c_void };
        }
    }
    unsafe { *count = list.len() };
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGraphDestroy(graph: *mut c_void) -> HipError {
    if state().as_mut().unwrap().streams.graphs.remove(&(graph as usize)).is_some() { SUCCESS } else { INVALID_HANDLE }
}

/// `hipGraphInstantiate`: an executable copy of the graph's nodes (their
/// argument pointers still the caller's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphInstantiate(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    _error_node: *mut *mut c_void,
    _log: *mut std::ffi::c_char,
    _log_size: usize,
) -> HipError {
    if exec.is_null() {
        return INVALID_VALUE;
    }
    let mut g = state();
    let s = g.as_mut().unwrap();
    let Some(nodes) = s.streams.graphs.get(&(graph as usize)).cloned() else { return INVALID_HANDLE };
    let handle = s.streams.handle();
    s.streams.execs.insert(handle, nodes);
    unsafe { *exec = handle as *mut c_void };
    SUCCESS
}

/// `hipGraphLaunch`: runs every node in order, reading each one's arguments
/// through its pointers now.
#[unsafe(no_mangle)]
pub extern "C" fn hipGraphLaunch(exec: *mut c_void, stream: *mut c_void) -> HipError {
    let mut g = state();
    let s = g.as_mut().unwrap();
    if let Err(e) = enqueue_eager(s, "hipGraphLaunch", stream) {
        return e;
    }
    let Some(nodes) = s.streams.execs.get(&(exec as usize)).cloned() else { return INVALID_HANDLE };
    for node in &nodes {
        // SAFETY: the pointers are what the graph's creator gave; keeping
        // them valid is the creator's part, as with CLR.
        let status = unsafe { run_kernel(s, node) };
        if status != SUCCESS {
            return status;
        }
    }
    SUCCESS
}

#[unsafe(no_mangle)]
pub extern "C" fn hipGraphExecDestroy(exec: *mut c_void) -> HipError {
    if state().as_mut().unwrap().streams.execs.remove(&(exec as usize)).is_some() { SUCCESS } else { INVALID_HANDLE }
}
