//! The CPU backend: device memory is host memory, launches run the kernel
//! bodies in the device crate's emulator, synchronously.

use std::alloc::{Layout, alloc, dealloc};
use std::collections::HashMap;
use std::sync::Mutex;

use kernels_device::emulator::{self, LaunchConfig};

use super::{Backend, BackendKind, DeviceInfo, FunctionHandle, Launch, Stream};
use crate::error::{Error, Result};

/// Alignment of every allocation: enough for the widest vector load of a kernel.
const ALIGN: usize = 256;

pub(crate) struct CpuBackend {
    info: DeviceInfo,
    /// Live allocations and their layouts.
    allocations: Mutex<HashMap<u64, Layout>>,
}

impl CpuBackend {
    pub(crate) fn new() -> CpuBackend {
        Self::posing_as(kernels_device::geometry::WAVE_SIZE, u32::MAX)
    }

    /// An emulator that reports `wavefront_size`-lane waves and
    /// `max_workgroup_mem_bytes` of workgroup memory: what the library does on a
    /// wave64 device, or one with little workgroup memory, can then be tested
    /// without one.
    pub(crate) fn posing_as(wavefront_size: u32, max_workgroup_mem_bytes: u32) -> CpuBackend {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        CpuBackend {
            info: DeviceInfo {
                backend: BackendKind::Cpu,
                name: "CPU emulator".into(),
                arch: "host".into(),
                wavefront_size,
                compute_units: threads,
                max_workgroup_mem_bytes,
                kernels: Ok("host (the kernel source compiled for this CPU)".into()),
            },
            allocations: Mutex::new(HashMap::new()),
        }
    }
}

/// The packed arguments, shared by every lane of an emulated launch.
struct SharedArgs(*const u8);
// SAFETY: the buffer is read-only during the launch.
unsafe impl Sync for SharedArgs {}

impl Backend for CpuBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn function(&self, name: &str) -> std::result::Result<FunctionHandle, String> {
        kernels_device::entry::emulated(name)
            .map(FunctionHandle::Cpu)
            .ok_or_else(|| format!("the emulator has no kernel {name}"))
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        let layout =
            Layout::from_size_align(bytes.max(1), ALIGN).map_err(|e| Error::invalid("bytes", e.to_string()))?;
        // SAFETY: non-zero size.
        let ptr = unsafe { alloc(layout) };
        if ptr.is_null() {
            return Err(Error::Backend {
                backend: "cpu",
                call: "alloc",
                code: 0,
                message: format!("out of memory allocating {bytes} bytes"),
            });
        }
        self.allocations.lock().unwrap().insert(ptr as u64, layout);
        Ok(ptr as u64)
    }

    unsafe fn free(&self, ptr: u64, _stream: Stream) {
        if let Some(layout) = self.allocations.lock().unwrap().remove(&ptr) {
            // SAFETY: allocated above with this layout.
            unsafe { dealloc(ptr as *mut u8, layout) };
        }
    }

    unsafe fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn copy_to_host(&self, dst: &mut [u8], src: u64) -> Result<()> {
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn copy_device(&self, dst: u64, src: u64, bytes: usize, stream: Stream) -> Result<()> {
        no_stream(stream)?;
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
        Ok(())
    }

    unsafe fn memset(&self, dst: u64, byte: u8, bytes: usize) -> Result<()> {
        unsafe { std::ptr::write_bytes(dst as *mut u8, byte, bytes) };
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    unsafe fn launch(&self, call: Launch<'_>, stream: Stream) -> Result<()> {
        no_stream(stream)?;
        let Launch { function, dims, args } = call;
        let FunctionHandle::Cpu(entry) = function else {
            return Err(Error::CodeObject("a GPU function handle was given to the CPU backend".into()));
        };
        let cfg = LaunchConfig {
            grid: dims.grid,
            workgroup_size: dims.workgroup_size,
            workgroup_mem_bytes: dims.workgroup_mem_bytes as usize,
        };
        let shared = SharedArgs(args.as_ptr());
        // SAFETY: the caller guarantees the arguments match the kernel.
        unsafe {
            emulator::launch(&cfg, &|| {
                entry({
                    let s = &shared;
                    s.0
                })
            })
        }
        .map_err(|e| Error::Emulator(e.0))
    }

    fn time(&self, stream: Stream, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
        no_stream(stream)?;
        let start = std::time::Instant::now();
        f()?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }
}

/// The CPU backend has no streams: it runs every launch to completion before
/// returning. Any stream but NULL is refused, so that a stream meant for a GPU
/// runtime is caught in CPU testing instead of being ignored.
fn no_stream(stream: Stream) -> Result<()> {
    if stream == Stream::DEFAULT {
        Ok(())
    } else {
        Err(Error::invalid(
            "stream",
            format!("{:p} is not NULL; the CPU backend runs launches synchronously and has no streams", stream.0),
        ))
    }
}
