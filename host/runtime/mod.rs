//! Devices, buffers and kernel launches, over three backends:
//!
//! - `hip`: AMD GPUs through the HIP runtime, loaded at run time (the product);
//! - `cuda` (feature `cuda`): NVIDIA GPUs through the CUDA driver, running the
//!   PTX built from the same kernel source (tier-3 verification);
//! - `cpu`: the emulator of the device crate (tier 1, always present).
//!
//! The typed launchers in [`crate::kernels`] sit above this module; the backend is
//! a detail below them. Launches are asynchronous on the caller's stream (the CPU
//! backend runs them to completion before returning).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub mod describe;
mod hip;
mod hip_api;
mod launch;

use bytemuck::Pod;
use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use kernels_device::args::{Buffers, KernelSpec};

use crate::dtype::Dtype;
use crate::error::{Error, Result};
pub use launch::{ArgValue, LaunchDims, OwnedArgs, PackedArgs};

/// Environment variable that forces a backend: `hip`, `cuda` or `cpu`.
pub const BACKEND_ENV: &str = "MLXCEL_AMDGPU_BACKEND";

/// Which runtime a device is driven by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Hip,
    Cuda,
    Cpu,
}

impl BackendKind {
    pub const fn name(self) -> &'static str {
        match self {
            BackendKind::Hip => "hip",
            BackendKind::Cuda => "cuda",
            BackendKind::Cpu => "cpu",
        }
    }

    pub fn parse(s: &str) -> Option<BackendKind> {
        [BackendKind::Hip, BackendKind::Cuda, BackendKind::Cpu].into_iter().find(|b| b.name() == s)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a device is, as found at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub backend: BackendKind,
    /// Marketing name (`AMD Radeon 8060S`, `NVIDIA H200`, `CPU emulator`).
    pub name: String,
    /// Architecture: `gfx1151`, `sm_90`, `host`.
    pub arch: String,
    /// Lanes per wave (32 on RDNA and NVIDIA; 64 on CDNA, where nothing here runs).
    pub wavefront_size: u32,
    /// Compute units (AMD), streaming multiprocessors (NVIDIA), host threads (CPU).
    pub compute_units: u32,
    /// The most workgroup memory (LDS, shared memory) one launch may ask for,
    /// in bytes: HIP's `sharedMemPerBlock`, CUDA's opt-in maximum per block,
    /// `u32::MAX` on the CPU emulator. A launch that asks for more is refused
    /// with [`Error::Unavailable`] before anything is enqueued.
    pub max_workgroup_mem_bytes: u32,
    /// The kernel binary loaded for this device (`gfx1151`, `gfx11-generic`,
    /// `PTX sm_80`, `host`), or why none could be: then no kernel is available.
    pub kernels: std::result::Result<String, String>,
}

/// A backend-specific handle to a loaded kernel function.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FunctionHandle {
    /// `hipFunction_t` or `CUfunction`.
    Gpu(*mut c_void),
    /// The kernel of this name in a code object the backend loads at its
    /// first launch (HIP: loading a module may create a queue, which must not
    /// happen before the host's runtime has set the device's flags).
    Deferred(&'static str),
    /// The emulator's entry point.
    Cpu(kernels_device::entry::EmulatedEntry),
}

// SAFETY: function handles are immutable once a module is loaded and may be used
// from any thread (HIP and CUDA allow launches from any host thread).
unsafe impl Send for FunctionHandle {}
unsafe impl Sync for FunctionHandle {}

impl FunctionHandle {
    /// The runtime's handle (`hipFunction_t`, `CUfunction`) for a launch on
    /// `backend`, which loads a deferred code object first; an emulator entry
    /// is a defect there.
    pub(crate) fn gpu(self, backend: &dyn Backend) -> Result<*mut c_void> {
        match self {
            FunctionHandle::Gpu(f) => Ok(f),
            FunctionHandle::Deferred(name) => backend.deferred_function(name),
            FunctionHandle::Cpu(_) => Err(Error::CodeObject(format!(
                "a CPU emulator function was given to the {} backend",
                backend.info().backend
            ))),
        }
    }
}

/// One launch as a backend receives it: the function, its grid and its packed
/// arguments.
#[derive(Clone, Copy)]
pub(crate) struct Launch<'a> {
    pub function: FunctionHandle,
    pub dims: LaunchDims,
    pub args: &'a PackedArgs,
}

impl<'a> Launch<'a> {
    /// The grid and the arguments, or `None` when the grid is empty and there
    /// is nothing to launch.
    pub(crate) fn nonempty(self) -> Option<(FunctionHandle, LaunchDims, &'a PackedArgs)> {
        (!self.dims.is_empty()).then_some((self.function, self.dims, self.args))
    }
}

/// A stream of the backend (`hipStream_t`, `CUstream`), owned by the caller.
/// [`Stream::DEFAULT`] is the null stream: on HIP and CUDA the default
/// (legacy) stream of the device, which waits for and is waited on by every
/// blocking stream. The CPU backend has no streams and refuses any other value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stream(pub *mut c_void);

impl Stream {
    pub const DEFAULT: Stream = Stream(std::ptr::null_mut());
}

// SAFETY: a stream handle is an opaque token the runtimes accept from any thread.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

/// The operations every backend provides. Device memory is addressed by plain
/// 64-bit device pointers, as it is across the C ABI.
pub(crate) trait Backend: Send + Sync {
    fn info(&self) -> &DeviceInfo;
    /// The function for the symbol `name`, or why there is none.
    fn function(&self, name: &str) -> std::result::Result<FunctionHandle, String>;
    /// The runtime's handle of the kernel `name` of a code object loaded on
    /// first use ([`FunctionHandle::Deferred`]); only a backend that defers
    /// has one.
    fn deferred_function(&self, name: &'static str) -> Result<*mut c_void> {
        Err(Error::Internal(format!("the {} backend deferred kernel {name} but cannot load it", self.info().backend)))
    }
    /// Why no kernel can run here any more although [`DeviceInfo::kernels`]
    /// names a code object: the runtime refused it when it was loaded at the
    /// first launch. `None` before that launch and after a good load.
    fn kernels_refused(&self) -> Option<String> {
        None
    }
    fn alloc(&self, bytes: usize) -> Result<u64>;
    /// Frees `ptr` in the order of `stream`: after the work enqueued on it
    /// before, without waiting for the device.
    ///
    /// # Safety
    /// `ptr` came from `alloc` of this backend and is freed once.
    unsafe fn free(&self, ptr: u64, stream: Stream);
    /// # Safety
    /// `dst` points to at least `src.len()` bytes of device memory.
    unsafe fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()>;
    /// # Safety
    /// `src` points to at least `dst.len()` bytes of device memory.
    unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<()>;
    /// Enqueues a device-to-device copy on `stream` (the copy-bandwidth yardstick
    /// of the benchmarks).
    ///
    /// # Safety
    /// `dst` and `src` point to at least `bytes` bytes of device memory each.
    unsafe fn copy_device(&self, dst: u64, src: u64, bytes: usize, stream: Stream) -> Result<()>;
    /// # Safety
    /// `dst` points to at least `bytes` bytes of device memory.
    unsafe fn memset(&self, dst: u64, byte: u8, bytes: usize) -> Result<()>;
    /// Waits for all work on the device.
    fn synchronize(&self) -> Result<()>;
    /// Launches `call.function` on `stream`.
    ///
    /// # Safety
    /// The arguments match the kernel and every pointer in them is valid for
    /// everything the kernel does with it.
    unsafe fn launch(&self, call: Launch<'_>, stream: Stream) -> Result<()>;
    /// Milliseconds taken on `stream` by the work `f` enqueues (events on a GPU,
    /// the wall clock on the CPU). Synchronizes the stream.
    fn time(&self, stream: Stream, f: &mut dyn FnMut() -> Result<()>) -> Result<f64>;
}

/// A device, with its kernels loaded. Cheap to clone.
#[derive(Clone)]
pub struct Device {
    backend: Arc<dyn Backend>,
    /// Every kernel of `kernels_device::entry::KERNELS`, in its order, found
    /// once when the device opens: the kernel, or why it cannot run here.
    /// A launch looks its kernel up here without allocating.
    kernels: Arc<[std::result::Result<Kernel, String>]>,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("info", self.info()).finish()
    }
}

/// The error for a kernel name that no family of this library declares.
fn no_such_kernel(name: String) -> Error {
    Error::Unavailable { kernel: name, reason: "no kernel of that name exists in this library".into() }
}

/// A kernel found on a device: proof that it can run there.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    pub(crate) spec: &'static KernelSpec,
    pub(crate) function: FunctionHandle,
}

impl Kernel {
    /// The kernel's symbol, e.g. `xielu_bf16`.
    pub fn name(&self) -> &'static str {
        self.spec.name
    }
}

/// `"{bytes} bytes of workgroup memory and {device} ({arch}) allows {max} a
/// workgroup"` when `bytes` is more than `info`'s device gives a workgroup:
/// the one comparison behind availability and launch.
fn workgroup_mem_excess(info: &DeviceInfo, bytes: u32) -> Option<String> {
    (bytes > info.max_workgroup_mem_bytes).then(|| {
        format!(
            "{bytes} bytes of workgroup memory and {} ({}) allows {} a workgroup",
            info.name, info.arch, info.max_workgroup_mem_bytes
        )
    })
}

impl Device {
    /// The default device: `MLXCEL_AMDGPU_BACKEND` if set (an error if that
    /// backend is absent), else the first HIP device, else the first CUDA device
    /// (feature `cuda`), else the CPU emulator.
    pub fn default_device() -> Result<Device> {
        Device::from_env().unwrap_or_else(|| Device::hip(0).or_else(|_| Device::cuda(0)).or_else(|_| Ok(Device::cpu())))
    }

    /// The device `MLXCEL_AMDGPU_BACKEND` names (an error if that backend is
    /// absent or the name is not one), or `None` when it is not set.
    pub fn from_env() -> Option<Result<Device>> {
        let name = std::env::var(BACKEND_ENV).ok()?;
        Some(
            BackendKind::parse(name.trim())
                .ok_or_else(|| Error::invalid(BACKEND_ENV, format!("{name:?} is not a backend; use hip, cuda or cpu")))
                .and_then(Device::open),
        )
    }

    /// The device of `kind` with ordinal 0.
    pub fn open(kind: BackendKind) -> Result<Device> {
        Device::open_ordinal(kind, 0)
    }

    /// The device of `kind` with `ordinal` (the CPU emulator has only 0).
    pub fn open_ordinal(kind: BackendKind, ordinal: usize) -> Result<Device> {
        match kind {
            BackendKind::Hip => Device::hip(ordinal),
            BackendKind::Cuda => Device::cuda(ordinal),
            BackendKind::Cpu if ordinal == 0 => Ok(Device::cpu()),
            BackendKind::Cpu => {
                Err(Error::invalid("ordinal", format!("{ordinal}: the CPU backend has one device, ordinal 0")))
            }
        }
    }

    /// HIP device `ordinal`, with the code object for its architecture loaded.
    pub fn hip(ordinal: usize) -> Result<Device> {
        Ok(Device::with_backend(Arc::new(hip::HipBackend::new(ordinal)?)))
    }

    /// CUDA device `ordinal`, with the embedded PTX loaded (feature `cuda`).
    pub fn cuda(ordinal: usize) -> Result<Device> {
        #[cfg(feature = "cuda")]
        {
            Ok(Device::with_backend(Arc::new(cuda::CudaBackend::new(ordinal)?)))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = ordinal;
            Err(Error::BackendUnavailable {
                backend: "cuda",
                reason: "this build has no CUDA support (cargo feature `cuda`)".into(),
            })
        }
    }

    /// The CPU emulator.
    pub fn cpu() -> Device {
        Device::with_backend(Arc::new(cpu::CpuBackend::new()))
    }

    /// The CPU emulator posing as a device with `wavefront_size`-lane waves, for
    /// testing what happens on hardware this library does not support (wave64).
    #[doc(hidden)]
    pub fn cpu_with_wavefront(wavefront_size: u32) -> Device {
        Device::with_backend(Arc::new(cpu::CpuBackend::posing_as(wavefront_size, u32::MAX)))
    }

    /// The CPU emulator posing as a device that gives a workgroup at most
    /// `max_workgroup_mem_bytes` of workgroup memory.
    #[doc(hidden)]
    pub fn cpu_with_workgroup_mem(max_workgroup_mem_bytes: u32) -> Device {
        Device::with_backend(Arc::new(cpu::CpuBackend::posing_as(
            kernels_device::geometry::WAVE_SIZE,
            max_workgroup_mem_bytes,
        )))
    }

    /// The device of `backend`, with every kernel looked up once (see
    /// [`Device::kernel`] for what makes one available).
    fn with_backend(backend: Arc<dyn Backend>) -> Device {
        let info = backend.info();
        let kernels = kernels_device::entry::KERNELS
            .iter()
            .map(|spec| {
                if info.wavefront_size != kernels_device::geometry::WAVE_SIZE {
                    return Err(format!(
                        "{} runs {}-lane waves; these kernels are built for 32-lane waves only",
                        info.arch, info.wavefront_size
                    ));
                }
                if let Err(why) = &info.kernels {
                    return Err(why.clone());
                }
                let function = backend.function(spec.name)?;
                if let Some(excess) = workgroup_mem_excess(info, spec.most_workgroup_mem_bytes) {
                    return Err(format!("its launches ask for up to {excess}"));
                }
                Ok(Kernel { spec, function })
            })
            .collect();
        Device { backend, kernels }
    }

    pub fn info(&self) -> &DeviceInfo {
        self.backend.info()
    }

    pub fn backend(&self) -> BackendKind {
        self.info().backend
    }

    /// The one lookup behind both availability and launch: the kernel `name`
    /// can run here when the device has 32-lane waves, a kernel binary for its
    /// architecture is loaded, that binary has the symbol, and the device
    /// gives a workgroup the most workgroup memory this library's launchers
    /// ask for with that kernel.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        match kernels_device::entry::KERNELS.iter().position(|k| k.name == name) {
            Some(i) => self.kernel_at(i, name),
            None => Err(no_such_kernel(name.to_string())),
        }
    }

    /// [`Device::kernel`] of the instance of family `base` for `dtype`
    /// (`xielu`, bf16: `xielu_bf16`), without building its name: the launch path.
    pub(crate) fn kernel_of(&self, base: &str, dtype: Dtype) -> Result<Kernel> {
        let suffix = dtype.name();
        let is_it = |name: &str| {
            name.len() == base.len() + 1 + suffix.len()
                && name.starts_with(base)
                && name.as_bytes()[base.len()] == b'_'
                && name.ends_with(suffix)
        };
        match kernels_device::entry::KERNELS.iter().position(|k| is_it(k.name)) {
            Some(i) => self.kernel_at(i, kernels_device::entry::KERNELS[i].name),
            None => Err(no_such_kernel(format!("{base}_{suffix}"))),
        }
    }

    /// The kernel at index `i` of `KERNELS`, called `name`.
    fn kernel_at(&self, i: usize, name: &str) -> Result<Kernel> {
        if let Some(why) = self.backend.kernels_refused() {
            return Err(Error::Unavailable { kernel: name.to_string(), reason: why });
        }
        match &self.kernels[i] {
            Ok(kernel) => Ok(*kernel),
            Err(why) => Err(Error::Unavailable { kernel: name.to_string(), reason: why.clone() }),
        }
    }

    /// Whether the kernel `name` can run here (see [`Device::kernel`]).
    pub fn is_available(&self, name: &str) -> bool {
        self.kernel(name).is_ok()
    }

    /// Refuses `dims` for `kernel` when they ask for more workgroup memory than
    /// this device gives a launch ([`DeviceInfo::max_workgroup_mem_bytes`]),
    /// naming both; the runtimes would report only an invalid argument.
    pub fn check_workgroup_mem(&self, kernel: &Kernel, dims: &LaunchDims) -> Result<()> {
        match workgroup_mem_excess(self.info(), dims.workgroup_mem_bytes) {
            Some(excess) => Err(Error::Unavailable {
                kernel: kernel.name().to_string(),
                reason: format!("this launch needs {excess}"),
            }),
            None => Ok(()),
        }
    }

    /// Launches `kernel` with `args`, its parameters' values in order (a
    /// family's `values()`); a count or kind that does not match is refused.
    ///
    /// # Safety
    /// Every pointer in `args` is valid for everything the kernel does with it.
    pub unsafe fn launch(&self, kernel: &Kernel, dims: LaunchDims, args: &[ArgValue], stream: Stream) -> Result<()> {
        self.check_workgroup_mem(kernel, &dims)?;
        let packed = PackedArgs::pack(kernel.spec, args)?;
        if describe::is_describing() {
            return self.describe_launch(kernel, dims, &packed, stream);
        }
        unsafe { self.backend.launch(Launch { function: kernel.function, dims, args: &packed }, stream) }
    }

    /// Records the launch of `kernel` in this thread's description instead
    /// of enqueuing it ([`describe`]); the caller enqueues it, so no stream
    /// may be named.
    fn describe_launch(&self, kernel: &Kernel, dims: LaunchDims, packed: &PackedArgs, stream: Stream) -> Result<()> {
        if stream != Stream::DEFAULT {
            return Err(Error::invalid(
                "stream",
                format!(
                    "{:p}: while launches are described the stream must be NULL (the caller enqueues them)",
                    stream.0
                ),
            ));
        }
        if let FunctionHandle::Cpu(_) = kernel.function {
            return Err(Error::Unavailable {
                kernel: kernel.name().to_string(),
                reason: "only a GPU backend (hip, cuda) can describe a launch; the CPU emulator runs its own".into(),
            });
        }
        if dims.is_empty() {
            return Ok(());
        }
        let function = kernel.function.gpu(&*self.backend)?;
        describe::push(describe::DescribedLaunch { function, dims, args: OwnedArgs::new(packed) })
    }

    /// Allocates `len` elements of `T` on the device (contents undefined).
    pub fn alloc<T: Copy>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes =
            len.checked_mul(size_of::<T>()).ok_or_else(|| Error::invalid("len", format!("{len} elements overflow")))?;
        let ptr = if bytes == 0 { 0 } else { self.backend.alloc(bytes)? };
        Ok(DeviceBuffer { device: self.clone(), ptr, len, stream: Stream::DEFAULT, _t: std::marker::PhantomData })
    }

    /// Allocates and fills a buffer with `data`.
    pub fn upload<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc::<T>(data.len())?;
        if !data.is_empty() {
            // SAFETY: the buffer holds data.len() elements.
            unsafe { self.backend.copy_to_device(buf.ptr, bytemuck::cast_slice(data))? };
        }
        Ok(buf)
    }

    /// Enqueues a copy of `src` into `dst` (same length) on `stream`.
    pub fn copy<T: Copy>(&self, dst: &mut DeviceBuffer<T>, src: &DeviceBuffer<T>, stream: Stream) -> Result<()> {
        if dst.len != src.len {
            return Err(Error::invalid("dst", format!("{} elements, src has {}", dst.len, src.len)));
        }
        // SAFETY: both buffers hold len elements.
        unsafe { self.backend.copy_device(dst.ptr, src.ptr, src.len * size_of::<T>(), stream) }
    }

    /// Waits for all work on the device.
    pub fn synchronize(&self) -> Result<()> {
        self.backend.synchronize()
    }

    /// Milliseconds taken on `stream` by the work `f` enqueues.
    pub fn time(&self, stream: Stream, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        self.backend.time(stream, &mut f)
    }
}

/// A typed allocation of device memory, freed on drop in the order of its
/// stream ([`DeviceBuffer::set_stream`], the default stream unless set): the
/// memory is released after the work enqueued on that stream before the drop,
/// without a device-wide synchronize.
pub struct DeviceBuffer<T> {
    device: Device,
    ptr: u64,
    len: usize,
    stream: Stream,
    _t: std::marker::PhantomData<T>,
}

impl<T> DeviceBuffer<T> {
    /// The device pointer (0 for an empty buffer).
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer holds.
    pub fn bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The device pointer and the bytes the buffer holds ([`Spans`]).
    pub(crate) fn span(&self) -> (u64, usize) {
        (self.ptr, self.bytes())
    }

    /// The stream whose order the buffer is freed in. Set it to the stream the
    /// buffer is used on when that stream does not synchronize with the
    /// default stream (a non-blocking stream).
    pub fn set_stream(&mut self, stream: Stream) {
        self.stream = stream;
    }
}

/// How the host's typed launch structs hold their buffers (see
/// `kernels_device::args::Buffers`): a buffer the kernel reads as a shared
/// borrow of a [`DeviceBuffer`], one it writes as an exclusive borrow, so a
/// written buffer cannot also be another argument of the same launch.
pub struct Typed;

impl Buffers for Typed {
    type Read<'a, E: 'a> = &'a DeviceBuffer<E>;
    type Write<'a, E: 'a> = &'a mut DeviceBuffer<E>;

    fn read<E>(buffer: &&DeviceBuffer<E>) -> (u64, usize) {
        (buffer.ptr, buffer.bytes())
    }

    fn write<E>(buffer: &&mut DeviceBuffer<E>) -> (u64, usize) {
        (buffer.ptr, buffer.bytes())
    }
}

/// Buffers as (device address, bytes held): the typed launch structs of the
/// safe wrappers that pass one buffer as two parameters (an in-place launch,
/// which [`Typed`]'s borrows cannot express) or a part of one.
pub(crate) struct Spans;

impl Buffers for Spans {
    type Read<'a, E: 'a> = (u64, usize);
    type Write<'a, E: 'a> = (u64, usize);

    fn read<E>(span: &(u64, usize)) -> (u64, usize) {
        *span
    }

    fn write<E>(span: &(u64, usize)) -> (u64, usize) {
        *span
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// Copies the buffer to the host (waits for the device first).
    pub fn download(&self) -> Result<Vec<T>> {
        self.device.synchronize()?;
        let mut out = vec![T::zeroed(); self.len];
        if self.len > 0 {
            // SAFETY: `out` holds the buffer's len elements.
            unsafe { self.device.backend.copy_to_host(bytemuck::cast_slice_mut(&mut out), self.ptr)? };
        }
        Ok(out)
    }

    /// Overwrites the buffer with `data` (same length).
    pub fn write(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::invalid("data", format!("{} elements for a buffer of {}", data.len(), self.len)));
        }
        if self.len > 0 {
            // SAFETY: same length.
            unsafe { self.device.backend.copy_to_device(self.ptr, bytemuck::cast_slice(data))? };
        }
        Ok(())
    }

    /// Sets every byte to `byte`.
    pub fn fill_bytes(&mut self, byte: u8) -> Result<()> {
        if self.len > 0 {
            // SAFETY: the whole allocation.
            unsafe { self.device.backend.memset(self.ptr, byte, self.len * size_of::<T>())? };
        }
        Ok(())
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.ptr != 0 {
            // SAFETY: allocated by this backend, freed once, after the work
            // enqueued on the buffer's stream.
            unsafe { self.device.backend.free(self.ptr, self.stream) };
        }
    }
}
