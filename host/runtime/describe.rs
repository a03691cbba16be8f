//! Describing launches instead of enqueuing them: while a thread describes,
//! every launch it makes is validated as usual and then recorded (kernel
//! handle, grid, workgroup, workgroup memory and arguments in storage of their
//! own) for the caller to enqueue itself, for example as kernel nodes of a HIP
//! graph (the MLX-ROCm fork's `add_module_kernel_node`).

use std::cell::RefCell;
use std::ffi::c_void;

use super::launch::{LaunchDims, OwnedArgs};
use crate::error::{Error, Result};

/// One launch as described: what `hipModuleLaunchKernel` or a graph kernel
/// node needs. The arguments live as long as this value.
pub struct DescribedLaunch {
    /// `hipFunction_t` (HIP) or `CUfunction` (CUDA).
    pub function: *mut c_void,
    pub dims: LaunchDims,
    pub args: Box<OwnedArgs>,
}

// SAFETY: the function handle is a process-wide token of the runtime, usable
// from any thread; the arguments are plain owned bytes.
unsafe impl Send for DescribedLaunch {}
unsafe impl Sync for DescribedLaunch {}

thread_local! {
    /// The launches described so far on this thread, or `None` when it is not
    /// describing.
    static DESCRIBED: RefCell<Option<Vec<DescribedLaunch>>> = const { RefCell::new(None) };
}

/// Starts describing on this thread; an error when it already is (a
/// description left open would swallow the caller's later launches).
pub fn begin() -> Result<()> {
    DESCRIBED.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_some() {
            return Err(Error::invalid("describe", "this thread is already describing launches; end that first"));
        }
        *d = Some(Vec::new());
        Ok(())
    })
}

/// Stops describing on this thread and returns the launches described since
/// [`begin`], in order; an error when it was not describing.
pub fn end() -> Result<Vec<DescribedLaunch>> {
    DESCRIBED.with(|d| {
        d.borrow_mut()
            .take()
            .ok_or_else(|| Error::invalid("describe", "this thread is not describing launches (begin was not called)"))
    })
}

/// The launches `f` makes on this thread, described instead of enqueued
/// (describing ends even when `f` fails).
pub fn record(f: impl FnOnce() -> Result<()>) -> Result<Vec<DescribedLaunch>> {
    begin()?;
    let result = f();
    let launches = end()?;
    result.map(|()| launches)
}

/// Whether this thread is describing.
pub(crate) fn is_describing() -> bool {
    DESCRIBED.with(|d| d.borrow().is_some())
}

/// Adds `launch` to this thread's description.
pub(crate) fn push(launch: DescribedLaunch) -> Result<()> {
    DESCRIBED.with(|d| match d.borrow_mut().as_mut() {
        Some(list) => {
            list.push(launch);
            Ok(())
        }
        None => Err(Error::Internal("a launch was described while the thread was not describing".into())),
    })
}
