//! The HIP backend: AMD GPUs through the HIP runtime (`libamdhip64`), loaded
//! at run time.
//!
//! The runtime's functions are declared in [`super::hip_api`] and resolved from
//! the library with `libloading`, so the crate builds without ROCm and a missing
//! library or symbol is an error, never a panic (see that module for why no
//! bindings crate is used).
//!
//! # What "available" means
//!
//! The HIP backend is available when `libamdhip64` (ROCm 6.4 or newer: the
//! embedded code objects are code object v6, and the generic ones need the HIP
//! runtime's support for generic targets, added in 6.4) loads from
//! `$ROCM_PATH/lib`, `$HIP_PATH/lib`, `/opt/rocm/lib` or the system library
//! path, exports every function used here, and the runtime reports at least one
//! device, of which `ordinal` is one. Otherwise [`HipBackend::new`] returns
//! [`Error::BackendUnavailable`] saying what is missing.
//!
//! An available backend always opens (memory, copies and [`DeviceInfo`] work);
//! its kernels are available only when the device runs 32-lane waves, an
//! embedded code object fits its architecture (the exact processor, else the
//! family's LLVM generic target, see [`select_code_object`]), passes the audit
//! against the launchers' argument layout, and the runtime loads it. Otherwise
//! [`DeviceInfo::kernels`] says why and no module is loaded.
//!
//! HIP's current device is per host thread: every operation first makes this
//! backend's device current (`hipSetDevice`).
//!
//! # Start-up creates no queue
//!
//! Opening the device reads only the runtime's version, the device count and
//! the device's properties, and chooses and audits the code object in memory:
//! the availability answers come from those alone. The module is loaded at the
//! first launch, because loading it may create a HIP queue, and a host
//! runtime such as MLX-ROCm must set the device's flags before any queue
//! exists (a queue made earlier keeps signals that later waits never see). If
//! the runtime then refuses the code object, that launch fails as unavailable
//! and every later availability answer says so.
//!
//! # Captured launches
//!
//! A launch on a stream that is being captured into a HIP graph passes its
//! arguments as `kernelParams` into storage that lives for the rest of the
//! process, because CLR's graph kernel nodes keep the pointer, not a copy, and
//! replay it for as long as the graph lives. Identical arguments share one
//! copy, so replaying or re-capturing the same launches adds nothing.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::ptr;
use std::sync::{Mutex, OnceLock};

use super::hip_api as sys;

use super::launch::{OwnedArgs, PackedArgs};
use super::{Backend, BackendKind, DeviceInfo, FunctionHandle, Launch, Stream};
use crate::embedded::{AMDGPU_CODE_OBJECTS, EmbeddedCodeObject};
use crate::error::{Error, Result};

/// `HIP_LAUNCH_PARAM_BUFFER_POINTER` of `hip_runtime_api.h` (a macro, so not
/// in the bindings): the next `extra` entry is the packed argument buffer.
const HIP_LAUNCH_PARAM_BUFFER_POINTER: *mut c_void = ptr::without_provenance_mut(0x01);
/// `HIP_LAUNCH_PARAM_BUFFER_SIZE`: the next entry points to its size (`size_t`).
const HIP_LAUNCH_PARAM_BUFFER_SIZE: *mut c_void = ptr::without_provenance_mut(0x02);
/// `HIP_LAUNCH_PARAM_END`: the end of `extra`.
const HIP_LAUNCH_PARAM_END: *mut c_void = ptr::without_provenance_mut(0x03);

/// Oldest HIP runtime accepted: 6.4 (`HIP_VERSION` = major * 10^7 + minor * 10^5
/// + patch). Code object v6 loads from ROCm 6.3 on, generic targets from 6.4.
const MIN_HIP_VERSION: c_int = 60_400_000;

/// What to do when the runtime is missing or too old.
const INSTALL_HINT: &str = "install ROCm 6.4 or newer (it provides libamdhip64) and, if it is not \
     in /opt/rocm or on the library search path, set ROCM_PATH to its prefix";

/// The LLVM generic processors whose members run 32-lane waves, and their
/// members, from the "AMDGPU Generic Processors" table of LLVM's AMDGPUUsage
/// (LLVM 20.1). `gfx9-generic` and `gfx9-4-generic` are left out: their
/// members run 64-lane waves only, where these kernels never run.
///
/// A generic code object runs on a member only if its generic version is at
/// least the one the member was added in; the HIP loader checks that.
pub(crate) const GENERIC_TARGETS: &[(&str, &[&str])] = &[
    ("gfx10-1-generic", &["gfx1010", "gfx1011", "gfx1012", "gfx1013"]),
    ("gfx10-3-generic", &["gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035", "gfx1036"]),
    ("gfx11-generic", &["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"]),
    ("gfx12-generic", &["gfx1200", "gfx1201"]),
];

/// The processor of a HIP architecture name: `gfx1151:sramecc-:xnack-` ->
/// `gfx1151` (the target features are dropped).
pub(crate) fn processor_of(gcn_arch_name: &str) -> &str {
    gcn_arch_name.split(':').next().unwrap_or("").trim()
}

/// The LLVM generic target that covers `processor`, if any.
pub(crate) fn generic_target_of(processor: &str) -> Option<&'static str> {
    GENERIC_TARGETS.iter().find(|(_, members)| members.contains(&processor)).map(|(generic, _)| *generic)
}

/// The code object to load on a device of architecture `arch` (features
/// allowed: `gfx1151:xnack-`): the one built for exactly that processor, else
/// the one built for its family's generic target, else none.
pub fn select_code_object<'a>(arch: &str, objects: &'a [EmbeddedCodeObject]) -> Option<&'a EmbeddedCodeObject> {
    let processor = processor_of(arch);
    objects.iter().find(|o| o.processor == processor).or_else(|| {
        let generic = generic_target_of(processor)?;
        objects.iter().find(|o| o.processor == generic)
    })
}

/// The processors of `objects`, for messages: `gfx1151, gfx11-generic`.
fn processor_list(objects: &[EmbeddedCodeObject]) -> String {
    if objects.is_empty() {
        return "none".into();
    }
    objects.iter().map(|o| o.processor).collect::<Vec<_>>().join(", ")
}

// ---------------------------------------------------------------------------
// Loading the runtime

/// File names tried for library `name`: the development link, then the sonames
/// of ROCm 7 and 6.
fn library_file_names(name: &str) -> Vec<String> {
    if cfg!(target_os = "windows") {
        vec![format!("{name}.dll")]
    } else {
        vec![format!("lib{name}.so"), format!("lib{name}.so.7"), format!("lib{name}.so.6")]
    }
}

/// Opens library `name` from `$ROCM_PATH/lib`, `$ROCM_PATH`, `$HIP_PATH/lib`,
/// `$HIP_PATH`, `/opt/rocm/lib`, then by plain file name (the loader's search,
/// which also finds a runtime the process has already loaded under that name).
/// On failure, says where it looked and why each attempt failed.
fn open_library(name: &str) -> std::result::Result<(libloading::Library, String), String> {
    let names = library_file_names(name);
    let mut dirs: Vec<PathBuf> = ["ROCM_PATH", "HIP_PATH"]
        .into_iter()
        .filter_map(std::env::var_os)
        .flat_map(|p| {
            let p = PathBuf::from(p);
            [p.join("lib"), p]
        })
        .collect();
    dirs.push(PathBuf::from("/opt/rocm/lib"));
    let mut candidates: Vec<PathBuf> = dirs.iter().flat_map(|d| names.iter().map(move |n| d.join(n))).collect();
    candidates.extend(names.iter().map(PathBuf::from));
    let mut errors = Vec::new();
    for candidate in &candidates {
        // SAFETY: loading the HIP runtime runs its initializers, as any HIP
        // program does.
        match unsafe { libloading::Library::new(candidate) } {
            Ok(lib) => return Ok((lib, candidate.display().to_string())),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let tried = format!(
        "{} in {} and on the library search path",
        names.join(", "),
        dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    );
    // The error of the first plain file name (`libamdhip64.so`): the loader's
    // own search, the most telling one.
    let plain = errors.get(dirs.len() * names.len()).or(errors.last()).map_or("none", String::as_str);
    Err(format!("lib{name} was not found: tried {tried}; the loader says: {plain}"))
}

/// Loads the HIP runtime and resolves every function this backend calls,
/// checking that it is 6.4 or newer. Only after this may any `sys::` function be
/// called. The library stays loaded for the life of the process (unloading the
/// HIP runtime after calling into it is not supported).
fn load_runtime() -> Result<()> {
    static LOADED: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    LOADED.get_or_init(load_runtime_once).clone().map_err(|reason| Error::BackendUnavailable { backend: "hip", reason })
}

fn load_runtime_once() -> std::result::Result<(), String> {
    let (hip, hip_path) =
        open_library("amdhip64").map_err(|e| format!("the HIP runtime is not installed: {e}; {INSTALL_HINT}"))?;
    let hip: &'static libloading::Library = Box::leak(Box::new(hip));
    // SAFETY: the symbol is `hipError_t hipRuntimeGetVersion(int*)`.
    let version =
        match unsafe { hip.get::<unsafe extern "C" fn(*mut c_int) -> sys::hipError_t>(b"hipRuntimeGetVersion") } {
            Ok(f) => {
                let mut v: c_int = 0;
                // SAFETY: `v` is writable; the library stays loaded.
                (unsafe { f(&mut v) } == sys::hipError_t_hipSuccess).then_some(v)
            }
            Err(_) => None,
        };
    let version_text = |v: c_int| format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000);
    if let Some(v) = version.filter(|&v| v < MIN_HIP_VERSION) {
        return Err(format!(
            "the HIP runtime at {hip_path} is version {}, older than 6.4; {INSTALL_HINT}",
            version_text(v)
        ));
    }
    // SAFETY: `hip` is the HIP runtime and is never unloaded.
    unsafe { sys::load(hip) }.map_err(|missing| {
        format!(
            "the HIP runtime at {hip_path}{} lacks {}; {INSTALL_HINT}",
            version.map(|v| format!(" (version {})", version_text(v))).unwrap_or_default(),
            missing.join(", ")
        )
    })
}

/// `hipErrorNoDevice (100): no ROCm-capable device is detected`.
fn describe(status: sys::hipError_t) -> String {
    // SAFETY: both return a static C string (or null) for any code.
    let (name, text) = unsafe { (sys::hipGetErrorName(status), sys::hipGetErrorString(status)) };
    let read = |p: *const c_char| (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
    match (read(name), read(text)) {
        (Some(n), Some(t)) if n != t => format!("{n} ({status}): {t}"),
        (Some(n), _) => format!("{n} ({status})"),
        (None, Some(t)) => format!("error {status}: {t}"),
        (None, None) => format!("error {status}"),
    }
}

/// Turns the status of HIP call `call` into a result.
fn check(call: &'static str, status: sys::hipError_t) -> Result<()> {
    if status == sys::hipError_t_hipSuccess {
        Ok(())
    } else {
        Err(Error::Backend { backend: "hip", call, code: status as i32, message: describe(status) })
    }
}

// ---------------------------------------------------------------------------
// The backend

/// A loaded module. `hipModule_t` is a handle HIP lets any thread use.
struct Module(sys::hipModule_t);

// SAFETY: module handles are process-wide; HIP serializes its own state.
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

/// The kernels of a device: the loaded module and its functions.
struct Kernels {
    module: Module,
    functions: HashMap<&'static str, FunctionHandle>,
    /// The image the module was loaded from (8-byte aligned), kept for the
    /// module's lifetime.
    _image: Vec<u64>,
}

pub(crate) struct HipBackend {
    info: DeviceInfo,
    ordinal: c_int,
    /// The code object chosen for the device and audited; `None` when
    /// `info.kernels` is an error.
    object: Option<EmbeddedCodeObject>,
    /// The module, loaded at the first launch, or why the runtime refused it.
    kernels: OnceLock<std::result::Result<Kernels, String>>,
}

impl HipBackend {
    /// HIP device `ordinal` with the code object for its architecture loaded
    /// (when one fits; see the module documentation).
    pub(crate) fn new(ordinal: usize) -> Result<HipBackend> {
        HipBackend::with_objects(ordinal, AMDGPU_CODE_OBJECTS)
    }

    /// [`HipBackend::new`] choosing among `objects` (the tests give it bad ones).
    fn with_objects(ordinal: usize, objects: &[EmbeddedCodeObject]) -> Result<HipBackend> {
        load_runtime()?;
        let unavailable = |reason: String| Error::BackendUnavailable { backend: "hip", reason };

        let mut count: c_int = 0;
        // SAFETY: `count` is writable; the runtime was checked above.
        let status = unsafe { sys::hipGetDeviceCount(&mut count) };
        if status == sys::hipError_t_hipErrorNoDevice || (status == sys::hipError_t_hipSuccess && count <= 0) {
            return Err(unavailable(format!(
                "the HIP runtime found no GPU ({}): is the amdgpu kernel driver loaded and are /dev/kfd and /dev/dri \
                 accessible to this user (groups render, video)?",
                if status == sys::hipError_t_hipSuccess {
                    "hipGetDeviceCount returned 0".to_string()
                } else {
                    describe(status)
                }
            )));
        }
        if status != sys::hipError_t_hipSuccess {
            return Err(unavailable(format!(
                "hipGetDeviceCount failed: {}; is the amdgpu kernel driver loaded and is /dev/kfd accessible?",
                describe(status)
            )));
        }
        if ordinal >= count as usize {
            return Err(unavailable(format!(
                "there is no HIP device {ordinal}: the runtime found {count} device{} (ordinals 0 to {})",
                if count == 1 { "" } else { "s" },
                count - 1
            )));
        }
        let device = ordinal as c_int;
        // SAFETY: a valid ordinal.
        check("hipSetDevice", unsafe { sys::hipSetDevice(device) })?;

        let mut props = sys::hipDeviceProp_tR0600::zeroed();
        // SAFETY: `props` is a writable hipDeviceProp_tR0600, the layout this symbol fills.
        check("hipGetDevicePropertiesR0600", unsafe { sys::hipGetDevicePropertiesR0600(&mut props, device) })?;
        let arch = processor_of(&props.gcn_arch_name()).to_string();
        let wavefront_size = props.warp_size().max(0) as u32;
        let compute_units = props.multi_processor_count().max(0) as u32;
        let max_workgroup_mem_bytes = props.shared_mem_per_block().min(u32::MAX as u64) as u32;

        // No code object for the device leaves it open without kernels, with
        // the reason (the predicates then answer false and say why).
        let (kernels, object) = match choose_code_object(&arch, wavefront_size, objects) {
            Ok(object) => (Ok(object.processor.to_string()), Some(*object)),
            Err(reason) => (Err(reason), None),
        };
        Ok(HipBackend {
            info: DeviceInfo {
                backend: BackendKind::Hip,
                name: props.name(),
                arch,
                wavefront_size,
                compute_units,
                max_workgroup_mem_bytes,
                kernels,
            },
            ordinal: device,
            object,
            kernels: OnceLock::new(),
        })
    }

    /// The module, loaded on first use (the first launch or description).
    fn loaded(&self) -> std::result::Result<&Kernels, String> {
        let object = self.object.as_ref().ok_or_else(|| match &self.info.kernels {
            Err(why) => why.clone(),
            Ok(_) => "no code object was chosen for this HIP device".to_string(),
        })?;
        self.kernels
            .get_or_init(|| {
                self.current().map_err(|e| e.to_string())?;
                load_module(object)
                    .map_err(|e| format!("the runtime did not load the {} code object: {e}", object.processor))
            })
            .as_ref()
            .map_err(String::clone)
    }

    /// Makes this backend's device current on the calling thread.
    /// Refuses a stream of another HIP device than this one.
    fn check_stream(&self, stream: Stream) -> Result<()> {
        if stream == Stream::DEFAULT {
            return Ok(());
        }
        let mut device: sys::hipDevice_t = 0;
        // SAFETY: a stream handle from the caller; `device` is writable.
        check("hipStreamGetDevice", unsafe { sys::hipStreamGetDevice(stream.0 as sys::hipStream_t, &mut device) })?;
        if device != self.ordinal {
            return Err(Error::invalid(
                "stream",
                format!("{:p} belongs to HIP device {device}; this library's device is {}", stream.0, self.ordinal),
            ));
        }
        Ok(())
    }

    fn current(&self) -> Result<()> {
        // SAFETY: an ordinal checked at creation.
        check("hipSetDevice", unsafe { sys::hipSetDevice(self.ordinal) })
    }

    /// Whether `stream` is being captured into a graph (the null stream never is).
    fn is_capturing(&self, stream: Stream) -> Result<bool> {
        if stream == Stream::DEFAULT {
            return Ok(false);
        }
        let mut status = sys::hipStreamCaptureStatus_hipStreamCaptureStatusNone;
        // SAFETY: a stream of this device (checked by the caller); `status` is writable.
        check("hipStreamIsCapturing", unsafe { sys::hipStreamIsCapturing(stream.0 as sys::hipStream_t, &mut status) })?;
        Ok(status != sys::hipStreamCaptureStatus_hipStreamCaptureStatusNone)
    }
}

/// The arguments of a captured launch in storage that lives for the rest of
/// the process (see the module documentation), one copy per distinct content.
fn captured_args(args: &PackedArgs) -> &'static OwnedArgs {
    static KEPT: Mutex<Option<HashMap<Vec<u8>, &'static OwnedArgs>>> = Mutex::new(None);
    // SAFETY: the packed buffer holds `len` initialized bytes.
    let bytes = unsafe { std::slice::from_raw_parts(args.as_ptr(), args.len()) };
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    kept.get_or_insert_with(HashMap::new).entry(bytes.to_vec()).or_insert_with(|| Box::leak(OwnedArgs::new(args)))
}

/// The code object for a device of processor `arch` with `wavefront_size`-lane
/// waves, checked against the launchers; or why there is none.
fn choose_code_object<'a>(
    arch: &str,
    wavefront_size: u32,
    objects: &'a [EmbeddedCodeObject],
) -> std::result::Result<&'a EmbeddedCodeObject, String> {
    let embedded = processor_list(objects);
    if wavefront_size != kernels_device::geometry::WAVE_SIZE {
        return Err(format!(
            "{arch} runs {wavefront_size}-lane waves; these kernels are built for 32-lane waves only \
             (embedded code objects: {embedded})"
        ));
    }
    let object = select_code_object(arch, objects).ok_or_else(|| {
        let family = generic_target_of(arch).map(|g| format!(" or {g}")).unwrap_or_default();
        format!(
            "no embedded code object runs on {arch}: this library embeds {embedded}; rebuild it with \
             MLXCEL_AMDGPU_TARGETS naming {arch}{family}"
        )
    })?;
    let parsed = crate::code_object::CodeObject::parse(object.bytes)
        .map_err(|e| format!("the embedded {} code object (chosen for {arch}) is unreadable: {e}", object.processor))?;
    // Its own target, not its label, says where it runs: a mislabelled object
    // is refused here, not handed to the runtime for a device it does not fit.
    if parsed.processor() != object.processor {
        return Err(format!(
            "the embedded {} code object (chosen for {arch}) is built for {:?}, not {}",
            object.processor,
            parsed.processor(),
            object.processor
        ));
    }
    crate::audit::audit_against_kernels(&parsed, kernels_device::entry::KERNELS).map_err(|problems| {
        format!(
            "the embedded {} code object (chosen for {arch}) does not match the launchers: {}",
            object.processor,
            problems.join("; ")
        )
    })?;
    Ok(object)
}

/// Loads `object` and looks up every kernel of the device crate in it.
fn load_module(object: &EmbeddedCodeObject) -> Result<Kernels> {
    // hipModuleLoadData reads the ELF in place from a pointer without a size:
    // give it naturally aligned storage.
    let mut image = vec![0u64; object.bytes.len().div_ceil(8)];
    // SAFETY: `image` holds at least bytes.len() bytes.
    unsafe { ptr::copy_nonoverlapping(object.bytes.as_ptr(), image.as_mut_ptr() as *mut u8, object.bytes.len()) };
    let mut module: sys::hipModule_t = ptr::null_mut();
    // SAFETY: `image` is a complete code object that outlives the module.
    check("hipModuleLoadData", unsafe { sys::hipModuleLoadData(&mut module, image.as_ptr() as *const c_void) })?;
    let module = Module(module);
    let mut functions = HashMap::new();
    for spec in kernels_device::entry::KERNELS {
        let name = CString::new(spec.name).expect("kernel names have no NUL");
        let mut function: sys::hipFunction_t = ptr::null_mut();
        // SAFETY: a loaded module and a NUL-terminated name.
        let status = unsafe { sys::hipModuleGetFunction(&mut function, module.0, name.as_ptr()) };
        if let Err(e) = check("hipModuleGetFunction", status) {
            // SAFETY: loaded above, unloaded once.
            unsafe { sys::hipModuleUnload(module.0) };
            return Err(e.context(format!("kernel {}", spec.name)));
        }
        functions.insert(spec.name, FunctionHandle::Gpu(function));
    }
    Ok(Kernels { module, functions, _image: image })
}

/// A HIP event, destroyed on drop.
struct Event(sys::hipEvent_t);

impl Event {
    fn new() -> Result<Event> {
        let mut event: sys::hipEvent_t = ptr::null_mut();
        // SAFETY: `event` is writable.
        check("hipEventCreate", unsafe { sys::hipEventCreate(&mut event) })?;
        Ok(Event(event))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by hipEventCreate, destroyed once.
        unsafe { sys::hipEventDestroy(self.0) };
    }
}

impl Backend for HipBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn function(&self, name: &str) -> std::result::Result<FunctionHandle, String> {
        if let Err(why) = &self.info.kernels {
            return Err(why.clone());
        }
        // The audit at open found every kernel of the device crate in the
        // chosen object; the module itself is loaded at the first launch.
        kernels_device::entry::KERNELS
            .iter()
            .find(|k| k.name == name)
            .map(|k| FunctionHandle::Deferred(k.name))
            .ok_or_else(|| format!("no kernel {name} exists in this library"))
    }

    fn deferred_function(&self, name: &'static str) -> Result<*mut c_void> {
        let kernels = self.loaded().map_err(|reason| Error::Unavailable { kernel: name.to_string(), reason })?;
        match kernels.functions.get(name) {
            Some(FunctionHandle::Gpu(f)) => Ok(*f),
            _ => Err(Error::Internal(format!("kernel {name} is missing from the loaded module"))),
        }
    }

    fn kernels_refused(&self) -> Option<String> {
        self.kernels.get().and_then(|k| k.as_ref().err().cloned())
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        self.current()?;
        let mut ptr: *mut c_void = ptr::null_mut();
        // SAFETY: `ptr` is writable.
        check("hipMallocAsync", unsafe { sys::hipMallocAsync(&mut ptr, bytes, ptr::null_mut()) })
            .map_err(|e| e.context(format!("allocating {bytes} bytes")))?;
        Ok(ptr as u64)
    }

    unsafe fn free(&self, ptr: u64, stream: Stream) {
        // A failure here has nowhere to go: the memory is lost either way.
        let _ = self.current();
        // SAFETY: the caller passes a pointer from `alloc`, once; the free
        // happens after the work enqueued on `stream` before it.
        unsafe { sys::hipFreeAsync(ptr as *mut c_void, stream.0 as sys::hipStream_t) };
    }

    unsafe fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller guarantees `dst` holds src.len() bytes.
        check("hipMemcpyHtoD", unsafe {
            sys::hipMemcpyHtoD(dst as sys::hipDeviceptr_t, src.as_ptr() as *const c_void, src.len())
        })
    }

    unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller guarantees `src` holds dst.len() bytes.
        check("hipMemcpyDtoH", unsafe {
            sys::hipMemcpyDtoH(dst.as_mut_ptr() as *mut c_void, src as sys::hipDeviceptr_t, dst.len())
        })
    }

    unsafe fn copy_device(&self, dst: u64, src: u64, bytes: usize, stream: Stream) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller guarantees both hold `bytes` bytes.
        check("hipMemcpyDtoDAsync", unsafe {
            sys::hipMemcpyDtoDAsync(
                dst as sys::hipDeviceptr_t,
                src as sys::hipDeviceptr_t,
                bytes,
                stream.0 as sys::hipStream_t,
            )
        })
    }

    unsafe fn memset(&self, dst: u64, byte: u8, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.current()?;
        // SAFETY: the caller guarantees `dst` holds `bytes` bytes.
        check("hipMemset", unsafe { sys::hipMemset(dst as *mut c_void, c_int::from(byte), bytes) })
    }

    fn synchronize(&self) -> Result<()> {
        self.current()?;
        // SAFETY: no arguments.
        check("hipDeviceSynchronize", unsafe { sys::hipDeviceSynchronize() })
    }

    unsafe fn launch(&self, call: Launch<'_>, stream: Stream) -> Result<()> {
        let Some((function, dims, args)) = call.nonempty() else {
            return Ok(());
        };
        let function = function.gpu(self)?;
        self.current()?;
        self.check_stream(stream)?;
        let launch = |kernel_params: *mut *mut c_void, extra: *mut *mut c_void| {
            // SAFETY: `function` came from this backend's module; the arguments
            // are laid out as the code object's metadata says (audited at
            // open), and the caller guarantees their pointers are valid.
            let status = unsafe {
                sys::hipModuleLaunchKernel(
                    function as sys::hipFunction_t,
                    dims.grid[0],
                    dims.grid[1],
                    dims.grid[2],
                    dims.workgroup_size,
                    1,
                    1,
                    dims.workgroup_mem_bytes,
                    stream.0 as sys::hipStream_t,
                    kernel_params,
                    extra,
                )
            };
            check("hipModuleLaunchKernel", status)
        };
        if self.is_capturing(stream)? {
            return launch(captured_args(args).kernel_params(), ptr::null_mut());
        }
        // Not captured: HIP copies the arguments before the call returns.
        let mut size: usize = args.len();
        let mut extra: [*mut c_void; 5] = [
            HIP_LAUNCH_PARAM_BUFFER_POINTER,
            args.as_ptr() as *mut c_void,
            HIP_LAUNCH_PARAM_BUFFER_SIZE,
            &mut size as *mut usize as *mut c_void,
            HIP_LAUNCH_PARAM_END,
        ];
        launch(ptr::null_mut(), extra.as_mut_ptr())
    }

    fn time(&self, stream: Stream, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        self.current()?;
        let stream = stream.0 as sys::hipStream_t;
        let start = Event::new()?;
        let stop = Event::new()?;
        // SAFETY: live events; the stream is the caller's (or the null stream).
        check("hipEventRecord", unsafe { sys::hipEventRecord(start.0, stream) })?;
        f()?;
        self.current()?;
        // SAFETY: as above.
        check("hipEventRecord", unsafe { sys::hipEventRecord(stop.0, stream) })?;
        // SAFETY: a recorded event.
        check("hipEventSynchronize", unsafe { sys::hipEventSynchronize(stop.0) })?;
        let mut ms: f32 = 0.0;
        // SAFETY: two completed events of this device.
        check("hipEventElapsedTime", unsafe { sys::hipEventElapsedTime(&mut ms, start.0, stop.0) })?;
        Ok(f64::from(ms))
    }
}

impl Drop for HipBackend {
    fn drop(&mut self) {
        if let Some(Ok(kernels)) = self.kernels.take() {
            let _ = self.current();
            // Kernels of this module may still be queued on some stream: wait
            // for them before their code is freed.
            // SAFETY: no arguments.
            unsafe { sys::hipDeviceSynchronize() };
            // SAFETY: loaded at creation, unloaded once; no function of it is
            // used after the backend is gone (devices hold the backend).
            unsafe { sys::hipModuleUnload(kernels.module.0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: &[u8] = &[];

    fn objects(processors: &[&'static str]) -> Vec<EmbeddedCodeObject> {
        processors.iter().map(|&processor| EmbeddedCodeObject { processor, bytes: BYTES }).collect()
    }

    fn selected(arch: &str, processors: &[&'static str]) -> Option<&'static str> {
        select_code_object(arch, &objects(processors)).map(|o| o.processor)
    }

    #[test]
    fn hip_exact_processor_wins_over_generic() {
        assert_eq!(selected("gfx1151", &["gfx11-generic", "gfx1151", "gfx12-generic"]), Some("gfx1151"));
        assert_eq!(selected("gfx1151", &["gfx1151", "gfx11-generic", "gfx12-generic"]), Some("gfx1151"));
    }

    #[test]
    fn hip_generic_when_no_exact_object() {
        assert_eq!(selected("gfx1151", &["gfx11-generic", "gfx12-generic"]), Some("gfx11-generic"));
        assert_eq!(selected("gfx1100", &["gfx1151", "gfx11-generic", "gfx12-generic"]), Some("gfx11-generic"));
        assert_eq!(selected("gfx1153", &["gfx1151", "gfx11-generic"]), Some("gfx11-generic"));
        assert_eq!(selected("gfx1201", &["gfx1151", "gfx11-generic", "gfx12-generic"]), Some("gfx12-generic"));
        assert_eq!(selected("gfx1200", &["gfx12-generic"]), Some("gfx12-generic"));
        assert_eq!(selected("gfx1030", &["gfx10-3-generic", "gfx10-1-generic"]), Some("gfx10-3-generic"));
        assert_eq!(selected("gfx1036", &["gfx10-3-generic"]), Some("gfx10-3-generic"));
        assert_eq!(selected("gfx1012", &["gfx10-3-generic", "gfx10-1-generic"]), Some("gfx10-1-generic"));
    }

    #[test]
    fn hip_features_are_ignored() {
        assert_eq!(processor_of("gfx1151:sramecc-:xnack-"), "gfx1151");
        assert_eq!(processor_of("gfx1100"), "gfx1100");
        assert_eq!(selected("gfx1151:sramecc-:xnack-", &["gfx11-generic"]), Some("gfx11-generic"));
        assert_eq!(selected("gfx1151:xnack-", &["gfx1151"]), Some("gfx1151"));
    }

    #[test]
    fn hip_no_object_for_other_families() {
        // CDNA (64-lane waves): no object, even though gfx942 is in gfx9-4-generic.
        assert_eq!(selected("gfx942", &["gfx1151", "gfx11-generic", "gfx12-generic"]), None);
        assert_eq!(selected("gfx90a", &["gfx1151", "gfx11-generic", "gfx12-generic"]), None);
        assert_eq!(selected("gfx942", &["gfx942"]), Some("gfx942"));
        // Wrong family: a gfx12 device never gets the gfx11 generic object, and back.
        assert_eq!(selected("gfx1201", &["gfx1151", "gfx11-generic"]), None);
        assert_eq!(selected("gfx1100", &["gfx12-generic"]), None);
        assert_eq!(selected("gfx1030", &["gfx10-1-generic"]), None);
        assert_eq!(selected("", &["gfx11-generic"]), None);
        assert_eq!(selected("gfx1151", &[]), None);
    }

    #[test]
    fn hip_generic_table_is_exact() {
        // Every member appears once, and never as a generic name itself.
        let mut all: Vec<&str> = GENERIC_TARGETS.iter().flat_map(|(_, m)| m.iter().copied()).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(generic_target_of("gfx1152"), Some("gfx11-generic"));
        assert_eq!(generic_target_of("gfx1103"), Some("gfx11-generic"));
        assert_eq!(generic_target_of("gfx1013"), Some("gfx10-1-generic"));
        assert_eq!(generic_target_of("gfx1037"), None);
        assert_eq!(generic_target_of("gfx1014"), None);
        assert_eq!(generic_target_of("gfx1202"), None);
    }

    #[test]
    fn hip_wave64_or_unknown_arch_has_a_reason() {
        let objs = objects(&["gfx1151", "gfx11-generic", "gfx12-generic"]);
        let why = choose_code_object("gfx942", 64, &objs).unwrap_err();
        assert!(
            why.contains("gfx942") && why.contains("64-lane") && why.contains("gfx1151, gfx11-generic, gfx12-generic"),
            "{why}"
        );
        let why = choose_code_object("gfx1201", 32, &objs[..2]).unwrap_err();
        assert!(
            why.contains("gfx1201") && why.contains("gfx1151, gfx11-generic") && why.contains("gfx12-generic"),
            "{why}"
        );
    }

    /// The embedded gfx1151 object, `damage` done to a copy of its bytes, still
    /// labelled gfx1151 (leaked: embedded objects are static).
    fn damaged(damage: impl FnOnce(&mut Vec<u8>)) -> EmbeddedCodeObject {
        let real = AMDGPU_CODE_OBJECTS.iter().find(|o| o.processor == "gfx1151").expect("a gfx1151 object");
        let mut bytes = real.bytes.to_vec();
        damage(&mut bytes);
        EmbeddedCodeObject { processor: "gfx1151", bytes: Box::leak(bytes.into_boxed_slice()) }
    }

    /// Bad code objects for a gfx1151 device, each with what its refusal says.
    fn bad_objects() -> Vec<(&'static str, EmbeddedCodeObject, &'static str)> {
        let other = AMDGPU_CODE_OBJECTS.iter().find(|o| o.processor != "gfx1151").expect("a second object");
        let renamed = |b: &mut Vec<u8>| {
            // Every `xielu_f32` (symbol, descriptor, metadata) becomes `xielu_f3Z`.
            let at: Vec<usize> = b.windows(9).enumerate().filter(|(_, w)| w == b"xielu_f32").map(|(i, _)| i).collect();
            assert!(!at.is_empty());
            at.into_iter().for_each(|i| b[i + 8] = b'Z');
        };
        vec![
            ("no ELF magic", damaged(|b| b[..4].copy_from_slice(b"\0BAD")), "is unreadable"),
            ("section table past the end", damaged(|b| b[0x28..0x30].fill(0x7f)), "is unreadable"),
            ("truncated to half", damaged(|b| b.truncate(b.len() / 2)), "is unreadable"),
            ("truncated to 64 bytes", damaged(|b| b.truncate(64)), "is unreadable"),
            ("empty", damaged(Vec::clear), "is unreadable"),
            ("wrong architecture", EmbeddedCodeObject { processor: "gfx1151", bytes: other.bytes }, "is built for"),
            ("a kernel symbol missing", damaged(renamed), "does not match the launchers"),
        ]
    }

    #[test]
    fn hip_bad_code_objects_are_refused_before_the_runtime_sees_them() {
        assert!(choose_code_object("gfx1151", 32, AMDGPU_CODE_OBJECTS).is_ok());
        for (what, object, says) in bad_objects() {
            let why =
                choose_code_object("gfx1151", 32, std::slice::from_ref(&object)).map(|o| o.processor).expect_err(what);
            println!("{what}: {why}");
            assert!(why.contains(says) && why.contains("gfx1151"), "{what}: {why}");
        }
    }

    #[test]
    fn hip_bad_code_objects_leave_the_device_open_and_the_process_usable() {
        // Through the runtime: the stand-in's simulated gfx1151, or a real one.
        let arch = match HipBackend::new(0) {
            Ok(b) => b.info.arch.clone(),
            Err(e) if std::env::var_os("MLXCEL_AMDGPU_EXPECT_HIP").is_some() => panic!("no HIP device: {e}"),
            Err(e) => return println!("skipped: {e}"),
        };
        if arch != "gfx1151" {
            return println!("skipped: device 0 is {arch}, these objects are for gfx1151");
        }
        for (what, object, says) in bad_objects() {
            let b =
                HipBackend::with_objects(0, std::slice::from_ref(&object)).unwrap_or_else(|e| panic!("{what}: {e}"));
            let why = b.info.kernels.clone().expect_err(what);
            assert!(why.contains(says), "{what}: {why}");
            assert!(b.object.is_none() && b.function("xielu_f32").is_err(), "{what}");
        }
        // A symbol the runtime cannot find (the audit bypassed): named, and the
        // module is unloaded.
        let (_, missing, _) = bad_objects().pop().unwrap();
        let err = load_module(&missing).map(|_| ()).unwrap_err();
        println!("hipModuleGetFunction: {err}");
        assert!(matches!(err.root(), Error::Backend { call: "hipModuleGetFunction", .. }), "{err:?}");
        assert!(err.to_string().starts_with("kernel xielu_f32: "), "{err}");
        // A following valid launch works.
        let dev = crate::Device::hip(0).unwrap();
        let x = dev.upload(&[0.5f32, -1.0, 2.0]).unwrap();
        let mut out = dev.alloc::<f32>(3).unwrap();
        let p = crate::kernels::xielu::XieluParams::APERTUS;
        crate::kernels::xielu::run(&dev, &x, &mut out, 3, p, Stream::DEFAULT).unwrap();
        // The same launch on the CPU emulator, which the kernel tests hold to
        // the references bit for bit.
        let cpu = crate::Device::cpu();
        let (cx, mut cout) = (cpu.upload(&[0.5f32, -1.0, 2.0]).unwrap(), cpu.alloc::<f32>(3).unwrap());
        crate::kernels::xielu::run(&cpu, &cx, &mut cout, 3, p, Stream::DEFAULT).unwrap();
        assert_eq!(out.download().unwrap(), cout.download().unwrap());
    }

    #[test]
    fn hip_embedded_objects_pass_the_load_checks() {
        // The real embedded objects: what a gfx1151 or gfx1201 device would load.
        for arch in ["gfx1151", "gfx1100", "gfx1201"] {
            if let Some(o) = select_code_object(arch, AMDGPU_CODE_OBJECTS) {
                let chosen =
                    choose_code_object(arch, 32, AMDGPU_CODE_OBJECTS).unwrap_or_else(|e| panic!("{arch}: {e}"));
                assert_eq!(chosen.processor, o.processor);
            }
        }
    }
}
