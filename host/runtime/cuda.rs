//! The CUDA backend (feature `cuda`): NVIDIA GPUs through the CUDA driver API.
//!
//! # What it is for
//!
//! Tier-3 verification. The product runs on AMD GPUs through HIP; this backend
//! runs the *same kernel source*, compiled by `build.rs` to PTX for `sm_80`
//! (embedded as [`crate::embedded::PTX`]), on NVIDIA's 32-lane warps. A kernel
//! that agrees with the CPU emulator on both AMD's and NVIDIA's hardware relies
//! on nothing but the wave primitives both implement. It is not meant to be fast
//! or to be shipped.
//!
//! # Driver
//!
//! `libcuda` is loaded at run time through cudarc's `driver::sys` layer (feature
//! `dynamic-loading`, bindings `cuda-13040`), so the library builds and runs
//! without CUDA installed. cudarc resolves each symbol by name on first use and
//! **panics** when the library or a symbol is missing, so [`CudaBackend::new`]
//! first checks that the library loads and that it exports every symbol used
//! here, and reports [`Error::BackendUnavailable`] otherwise: no call into this
//! module panics for want of a driver.
//!
//! # Contexts and threads
//!
//! The backend uses the device's *primary context* (`cuDevicePrimaryCtxRetain`),
//! the one the CUDA runtime and other libraries share, and holds one reference
//! to it for its lifetime. The current context is per host thread, and callers
//! may use a [`crate::Device`] from any thread (or a thread on which other code
//! made another context current), so **every operation starts by making the
//! context current** (`cuCtxSetCurrent`, a cheap thread-local store). It is left
//! current afterwards. On drop the module is unloaded (with the context current),
//! the context is made no longer current on the dropping thread, and the primary
//! context reference is released (`cuDevicePrimaryCtxRelease_v2`).
//!
//! Launches, like all work here, go to the stream the caller gives
//! ([`Stream::DEFAULT`] is the legacy default stream), asynchronously; copies and
//! memsets are the synchronous driver calls on the default stream.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::ptr;

use cudarc::driver::sys;

use super::{Backend, BackendKind, DeviceInfo, FunctionHandle, Launch, Stream};
use crate::error::{Error, Result};

const BACKEND: &str = "cuda";

/// Every driver symbol this module calls (as the `sys` bindings of
/// `cuda-13040` name them). Checked before the first call, because cudarc
/// panics on a missing symbol. All exist in drivers for CUDA 12.8 and newer
/// (`cuEventElapsedTime_v2` is the newest).
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuGetErrorName",
    "cuGetErrorString",
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxSynchronize",
    "cuModuleLoadDataEx",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemcpyDtoH_v2",
    "cuMemsetD8_v2",
    "cuLaunchKernel",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime_v2",
    "cuEventDestroy_v2",
];

/// Size of the JIT error log buffer given to `cuModuleLoadDataEx`.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// `CUDA_ERROR_NAME: description` for a driver result.
fn describe(result: sys::CUresult) -> String {
    // The enum's variant names are the C names (`CUDA_ERROR_INVALID_VALUE`).
    let name = format!("{result:?}");
    let mut text: *const c_char = ptr::null();
    // SAFETY: symbols checked in `CudaBackend::new`; the driver returns a static string.
    let ok = unsafe { sys::cuGetErrorString(result, &mut text) } == sys::CUresult::CUDA_SUCCESS;
    if ok && !text.is_null() {
        // SAFETY: a NUL-terminated static string owned by the driver.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
        format!("{name}: {text}")
    } else {
        name
    }
}

/// The result of a driver call as this crate's error.
fn check(call: &'static str, result: sys::CUresult) -> Result<()> {
    if result == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Backend { backend: BACKEND, call, code: result as i32, message: describe(result) })
    }
}

/// Calls `sys::$f(args)` and turns a failure into `Error::Backend` naming `$f`.
/// The caller is responsible for the safety of the call (the macro expands to an
/// `unsafe` block).
macro_rules! cu {
    ($f:ident ( $($arg:expr),* $(,)? )) => {
        check(stringify!($f), unsafe { sys::$f($($arg),*) })
    };
}

fn unavailable(reason: impl Into<String>) -> Error {
    Error::BackendUnavailable { backend: BACKEND, reason: reason.into() }
}

/// Checks that `libcuda` can be loaded and exports every symbol of
/// [`REQUIRED_SYMBOLS`]; after this, no cudarc `sys` call used here can panic.
fn check_driver_library() -> Result<()> {
    // SAFETY: loads (and unloads) the library, running its initializers.
    if !unsafe { sys::is_culib_present() } {
        let candidates = cudarc::get_lib_name_candidates("cuda");
        return Err(unavailable(format!(
            "the CUDA driver library (libcuda) was not found; searched {} (and the same for nvcuda); \
             install the NVIDIA driver or put its directory on LD_LIBRARY_PATH",
            candidates.join(", ")
        )));
    }
    // SAFETY: `is_culib_present` found a candidate that loads; `culib` loads the
    // first such candidate of the same list, so it does not panic.
    let lib = unsafe { sys::culib() };
    let missing: Vec<&str> = REQUIRED_SYMBOLS
        .iter()
        .copied()
        .filter(|name| unsafe { lib.get::<unsafe extern "C" fn()>(*name) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(unavailable(format!(
            "the CUDA driver library lacks {}: this backend needs a driver for CUDA 12.8 or newer",
            missing.join(", ")
        )));
    }
    Ok(())
}

fn device_attribute(device: sys::CUdevice, attribute: sys::CUdevice_attribute) -> Result<i32> {
    let mut value: c_int = 0;
    cu!(cuDeviceGetAttribute(&mut value, attribute, device))?;
    Ok(value)
}

/// Destroys the events of a timing on every path.
struct Events {
    ctx: sys::CUcontext,
    start: sys::CUevent,
    end: sys::CUevent,
}

impl Drop for Events {
    fn drop(&mut self) {
        // The work `f` did may have made another context current on this thread.
        let _ = cu!(cuCtxSetCurrent(self.ctx));
        for event in [self.start, self.end] {
            if !event.is_null() {
                let _ = cu!(cuEventDestroy_v2(event));
            }
        }
    }
}

/// One NVIDIA GPU, with the embedded PTX loaded into its primary context.
pub(crate) struct CudaBackend {
    info: DeviceInfo,
    device: sys::CUdevice,
    /// The device's primary context, retained once by this backend.
    ctx: sys::CUcontext,
    /// The loaded PTX module, or null when none could be loaded.
    module: sys::CUmodule,
    /// Every kernel of `KERNELS` looked up in the module, or why it is unusable.
    functions: HashMap<&'static str, std::result::Result<sys::CUfunction, String>>,
}

// SAFETY: the handles are driver objects that may be used from any host thread
// once their context is current, which every method ensures first; the backend
// is immutable after construction.
unsafe impl Send for CudaBackend {}
unsafe impl Sync for CudaBackend {}

impl CudaBackend {
    /// Opens CUDA device `ordinal` and loads the embedded PTX. Never panics: a
    /// missing driver, a failed `cuInit`, no device or an ordinal out of range is
    /// [`Error::BackendUnavailable`]; any other failing driver call is
    /// [`Error::Backend`]. A PTX that cannot be loaded is not an error here: it
    /// is reported in [`DeviceInfo::kernels`], and no kernel is available.
    pub(crate) fn new(ordinal: usize) -> Result<CudaBackend> {
        check_driver_library()?;

        // SAFETY (every `cu!` below): plain driver calls with valid out-pointers.
        cu!(cuInit(0)).map_err(|e| unavailable(format!("cuInit failed: {}", message_of(&e))))?;
        let mut count: c_int = 0;
        cu!(cuDeviceGetCount(&mut count))
            .map_err(|e| unavailable(format!("cuDeviceGetCount failed: {}", message_of(&e))))?;
        if count <= 0 {
            return Err(unavailable("the CUDA driver reports no device"));
        }
        if ordinal >= count as usize {
            return Err(unavailable(format!(
                "there is no CUDA device {ordinal}: the driver reports {count} (ordinals 0..{count})"
            )));
        }
        let mut device: sys::CUdevice = 0;
        cu!(cuDeviceGet(&mut device, ordinal as c_int))?;

        let mut name_buf = [0 as c_char; 256];
        cu!(cuDeviceGetName(name_buf.as_mut_ptr(), name_buf.len() as c_int, device))?;
        // The driver NUL-terminates; make sure of it anyway.
        name_buf[name_buf.len() - 1] = 0;
        // SAFETY: NUL-terminated within the buffer.
        let name = unsafe { CStr::from_ptr(name_buf.as_ptr()) }.to_string_lossy().into_owned();

        use sys::CUdevice_attribute::*;
        let major = device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let warp = device_attribute(device, CU_DEVICE_ATTRIBUTE_WARP_SIZE)?;
        let sms = device_attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let smem_optin = device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;

        let mut ctx: sys::CUcontext = ptr::null_mut();
        cu!(cuDevicePrimaryCtxRetain(&mut ctx, device))?;

        // From here on, dropping `backend` releases the context (and unloads the
        // module once there is one), on every error path.
        let mut backend = CudaBackend {
            info: DeviceInfo {
                backend: BackendKind::Cuda,
                name,
                arch: format!("sm_{major}{minor}"),
                wavefront_size: warp.max(0) as u32,
                compute_units: sms.max(0) as u32,
                max_workgroup_mem_bytes: smem_optin.max(0) as u32,
                kernels: Err("not loaded yet".into()),
            },
            device,
            ctx,
            module: ptr::null_mut(),
            functions: HashMap::new(),
        };
        backend.make_current()?;
        backend.info.kernels = backend.load_kernels(major * 10 + minor, smem_optin);
        Ok(backend)
    }

    /// Refuses a stream of another context (another device, or a context the
    /// caller created): a launch there would run where this library's module
    /// and the caller's pointers do not belong.
    fn check_stream(&self, stream: Stream) -> Result<()> {
        if stream == Stream::DEFAULT {
            return Ok(());
        }
        let mut ctx: sys::CUcontext = ptr::null_mut();
        cu!(cuStreamGetCtx(stream.0 as sys::CUstream, &mut ctx))?;
        if ctx != self.ctx {
            return Err(Error::invalid(
                "stream",
                format!(
                    "{:p} belongs to another CUDA context than this library's device ({})",
                    stream.0, self.info.name
                ),
            ));
        }
        Ok(())
    }

    /// Makes the primary context current on the calling thread.
    fn make_current(&self) -> Result<()> {
        cu!(cuCtxSetCurrent(self.ctx))
    }

    /// Loads the embedded PTX and looks up every kernel; the description of what
    /// was loaded, or why nothing was. The context is current.
    fn load_kernels(&mut self, compute_capability: i32, smem_optin: i32) -> std::result::Result<String, String> {
        let Some(ptx) = crate::embedded::PTX else {
            return Err("this build embeds no PTX (it was built without the cargo feature `cuda`)".into());
        };
        let ptx_cc: Option<i32> = ptx.arch.strip_prefix("sm_").and_then(|v| v.parse().ok());
        if let Some(ptx_cc) = ptx_cc
            && compute_capability < ptx_cc
        {
            return Err(format!(
                "{} is older than the PTX target {}: the PTX cannot run here",
                self.info.arch, ptx.arch
            ));
        }
        let text = CString::new(ptx.text).map_err(|_| "the embedded PTX contains a NUL byte".to_string())?;

        let mut error_log = vec![0u8; JIT_LOG_BYTES];
        let mut options =
            [sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER, sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        // Option values are passed as pointers; a size is the integer itself.
        let mut values: [*mut c_void; 2] = [error_log.as_mut_ptr() as *mut c_void, JIT_LOG_BYTES as *mut c_void];
        let mut module: sys::CUmodule = ptr::null_mut();
        // SAFETY: `text` is NUL-terminated PTX; the log buffer outlives the call
        // and its size is given; two options, two values.
        let loaded = cu!(cuModuleLoadDataEx(
            &mut module,
            text.as_ptr() as *const c_void,
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        ));
        if let Err(e) = loaded {
            let log_len = error_log.iter().position(|&b| b == 0).unwrap_or(error_log.len());
            let log = String::from_utf8_lossy(&error_log[..log_len]);
            let log = log.trim();
            return Err(if log.is_empty() {
                format!("loading the PTX ({}) failed: {e}", ptx.arch)
            } else {
                format!("loading the PTX ({}) failed: {e}; JIT log:\n{log}", ptx.arch)
            });
        }
        self.module = module;

        for spec in kernels_device::entry::KERNELS {
            let entry = self.lookup(spec.name, smem_optin);
            self.functions.insert(spec.name, entry);
        }
        Ok(format!("PTX {}", ptx.arch))
    }

    /// One kernel of the loaded module, allowed the device's opt-in maximum of
    /// dynamic shared memory (beyond the default 48 KiB).
    fn lookup(&self, name: &'static str, smem_optin: i32) -> std::result::Result<sys::CUfunction, String> {
        let cname = CString::new(name).map_err(|_| format!("kernel name {name:?} contains a NUL byte"))?;
        let mut function: sys::CUfunction = ptr::null_mut();
        // SAFETY: the module is loaded; `cname` is NUL-terminated.
        cu!(cuModuleGetFunction(&mut function, self.module, cname.as_ptr()))
            .map_err(|e| format!("the PTX module has no usable {name}: {e}"))?;
        // Shared memory is sized at launch only: the availability bound (the
        // most a launch asks for, against the opt-in maximum) counts no static
        // shared memory, so a kernel with some is refused.
        let mut static_smem: c_int = 0;
        cu!(cuFuncGetAttribute(
            &mut static_smem,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            function
        ))
        .map_err(|e| format!("{name}: {e}"))?;
        if static_smem > 0 {
            return Err(format!(
                "{name} uses {static_smem} bytes of static shared memory; refused, as shared memory is sized at launch"
            ));
        }
        // No local memory (register spills or a stack), as no scratch on AMD: a
        // kernel that needs it is slower than its design and is refused.
        let mut local: c_int = 0;
        cu!(cuFuncGetAttribute(&mut local, sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, function))
            .map_err(|e| format!("{name}: {e}"))?;
        if local > 0 {
            return Err(format!(
                "{name} uses {local} bytes of local memory per thread (register spills or a stack); refused, as scratch is on AMD"
            ));
        }
        let dynamic_max = (smem_optin - static_smem).max(0);
        cu!(cuFuncSetAttribute(
            function,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            dynamic_max
        ))
        .map_err(|e| format!("{name}: allowing {dynamic_max} bytes of dynamic shared memory failed: {e}"))?;
        Ok(function)
    }
}

/// The message of an `Error::Backend` (for wrapping into another variant).
fn message_of(e: &Error) -> String {
    match e {
        Error::Backend { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        // Errors cannot be reported from here; each step is attempted regardless.
        let current = self.make_current().is_ok();
        if !self.module.is_null() && current {
            // SAFETY: loaded by this backend in this context, unloaded once; no
            // launch of it can be pending past the buffers' synchronizing drops.
            let _ = cu!(cuModuleUnload(self.module));
            self.module = ptr::null_mut();
        }
        self.functions.clear();
        // Leave no dangling current context on this thread if the release below
        // destroys it.
        let mut now: sys::CUcontext = ptr::null_mut();
        if cu!(cuCtxGetCurrent(&mut now)).is_ok() && now == self.ctx {
            let _ = cu!(cuCtxSetCurrent(ptr::null_mut()));
        }
        // SAFETY: retained once in `new`, released once here.
        let _ = cu!(cuDevicePrimaryCtxRelease_v2(self.device));
    }
}

impl Backend for CudaBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn function(&self, name: &str) -> std::result::Result<FunctionHandle, String> {
        if let Err(why) = &self.info.kernels {
            return Err(why.clone());
        }
        match self.functions.get(name) {
            Some(Ok(f)) => Ok(FunctionHandle::Gpu(*f as *mut c_void)),
            Some(Err(why)) => Err(why.clone()),
            None => Err(format!("the PTX module has no kernel {name}")),
        }
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        self.make_current()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // cuMemAlloc refuses 0 bytes.
        cu!(cuMemAllocAsync(&mut ptr, bytes.max(1), std::ptr::null_mut()))?;
        Ok(ptr)
    }

    unsafe fn free(&self, ptr: u64, stream: Stream) {
        if ptr == 0 || self.make_current().is_err() {
            return;
        }
        // SAFETY: the caller guarantees `ptr` came from `alloc` and is freed
        // once, after the work enqueued on `stream` before it.
        let _ = cu!(cuMemFreeAsync(ptr, stream.0 as sys::CUstream));
    }

    unsafe fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.make_current()?;
        // SAFETY: the caller guarantees `dst` holds `src.len()` bytes.
        cu!(cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, src.len()))
    }

    unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.make_current()?;
        // SAFETY: the caller guarantees `src` holds `dst.len()` bytes.
        cu!(cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len()))
    }

    unsafe fn copy_device(&self, dst: u64, src: u64, bytes: usize, stream: Stream) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.make_current()?;
        // SAFETY: the caller guarantees both hold `bytes` bytes.
        cu!(cuMemcpyDtoDAsync_v2(dst, src, bytes, stream.0 as sys::CUstream))
    }

    unsafe fn memset(&self, dst: u64, byte: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.make_current()?;
        // SAFETY: the caller guarantees `dst` holds `bytes` bytes.
        cu!(cuMemsetD8_v2(dst, byte, bytes))
    }

    fn synchronize(&self) -> Result<()> {
        self.make_current()?;
        cu!(cuCtxSynchronize())
    }

    unsafe fn launch(&self, call: Launch<'_>, stream: Stream) -> Result<()> {
        let Some((function, dims, args)) = call.nonempty() else {
            return Ok(());
        };
        let function = function.gpu(self)?;
        self.make_current()?;
        self.check_stream(stream)?;
        // One pointer per argument, into `args`, which outlives the call (the
        // driver copies the values at launch).
        let mut params = args.arg_pointers();
        let params_ptr = if args.count() == 0 { ptr::null_mut() } else { params.as_mut_ptr() };
        let [gx, gy, gz] = dims.grid;
        // SAFETY: `function` is a CUfunction of this context's module (from
        // `function`); the caller guarantees the arguments match the kernel.
        cu!(cuLaunchKernel(
            function as sys::CUfunction,
            gx,
            gy,
            gz,
            dims.workgroup_size,
            1,
            1,
            dims.workgroup_mem_bytes,
            stream.0 as sys::CUstream,
            params_ptr,
            ptr::null_mut(),
        ))
    }

    fn time(&self, stream: Stream, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        self.make_current()?;
        let mut events = Events { ctx: self.ctx, start: ptr::null_mut(), end: ptr::null_mut() };
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT as c_uint;
        cu!(cuEventCreate(&mut events.start, flags))?;
        cu!(cuEventCreate(&mut events.end, flags))?;
        let stream = stream.0 as sys::CUstream;
        cu!(cuEventRecord(events.start, stream))?;
        f()?;
        // `f` may have run on another context; the events belong to ours.
        self.make_current()?;
        cu!(cuEventRecord(events.end, stream))?;
        cu!(cuEventSynchronize(events.end))?;
        let mut ms: f32 = 0.0;
        cu!(cuEventElapsedTime_v2(&mut ms, events.start, events.end))?;
        Ok(ms as f64)
        // `events` is destroyed here and on every early return above.
    }
}
