//! The part of the HIP runtime API this library calls, resolved at run time
//! from `libamdhip64` with `libloading`.
//!
//! Why not a bindings crate: `cubecl-hip-sys` picks its bindings at build time
//! from the `hipconfig` on the build machine's PATH, so the crate fails to
//! compile where ROCm is installed in a version it has no bindings for (ROCm 7.1
//! and 7.2, for example), and some of its signatures change between versions;
//! `hip-runtime-sys` needs the HIP headers to build and links `amdhip64` at link
//! time. The 23 functions used here have had the same C signatures since ROCm
//! 6.0, so this module declares them itself: the crate builds the same way with
//! or without ROCm, and a missing library or symbol is an error, never a panic.
//!
//! Names follow the C API, hence the lint allowances.
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals)]

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// `hipError_t` (a C enum).
pub type hipError_t = c_uint;
pub const hipError_t_hipSuccess: hipError_t = 0;
pub const hipError_t_hipErrorNoDevice: hipError_t = 100;

pub type hipDeviceptr_t = *mut c_void;
pub type hipModule_t = *mut c_void;
pub type hipFunction_t = *mut c_void;
pub type hipStream_t = *mut c_void;
/// A device ordinal (`int`).
pub type hipDevice_t = c_int;
pub type hipEvent_t = *mut c_void;
/// `hipStreamCaptureStatus` (a C enum): whether a stream is being captured
/// into a graph.
pub type hipStreamCaptureStatus = c_uint;
pub const hipStreamCaptureStatus_hipStreamCaptureStatusNone: hipStreamCaptureStatus = 0;

/// `hipDeviceProp_tR0600`, the device properties in the layout of ROCm 6.0 and
/// later: 1472 bytes, 8-byte aligned. Only the fields read here are exposed, at
/// their offsets in that layout (unchanged in every ROCm 6.x and 7.x header).
#[repr(C, align(8))]
pub struct hipDeviceProp_tR0600 {
    bytes: [u8; 1472],
}

impl hipDeviceProp_tR0600 {
    const NAME: usize = 0;
    const SHARED_MEM_PER_BLOCK: usize = 296;
    const WARP_SIZE: usize = 308;
    const MULTI_PROCESSOR_COUNT: usize = 388;
    const GCN_ARCH_NAME: usize = 1160;
    const STRING_LEN: usize = 256;

    pub fn zeroed() -> Self {
        hipDeviceProp_tR0600 { bytes: [0; 1472] }
    }

    fn c_string(&self, offset: usize) -> String {
        let field = &self.bytes[offset..offset + Self::STRING_LEN];
        let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
        String::from_utf8_lossy(&field[..end]).trim().to_string()
    }

    fn int(&self, offset: usize) -> c_int {
        c_int::from_ne_bytes(self.bytes[offset..offset + 4].try_into().expect("4 bytes"))
    }

    /// `name`: the marketing name.
    pub fn name(&self) -> String {
        self.c_string(Self::NAME)
    }

    /// `gcnArchName`: `gfx1151:sramecc-:xnack-`.
    pub fn gcn_arch_name(&self) -> String {
        self.c_string(Self::GCN_ARCH_NAME)
    }

    /// `sharedMemPerBlock` (a `size_t`): the LDS one workgroup may use.
    pub fn shared_mem_per_block(&self) -> u64 {
        u64::from_ne_bytes(
            self.bytes[Self::SHARED_MEM_PER_BLOCK..Self::SHARED_MEM_PER_BLOCK + 8].try_into().expect("8 bytes"),
        )
    }

    /// `warpSize`: 32 on RDNA, 64 on CDNA.
    pub fn warp_size(&self) -> c_int {
        self.int(Self::WARP_SIZE)
    }

    /// `multiProcessorCount`: compute units.
    pub fn multi_processor_count(&self) -> c_int {
        self.int(Self::MULTI_PROCESSOR_COUNT)
    }
}

/// Declares the function table, its loader and one `unsafe fn` per entry.
macro_rules! hip_api {
    ($( fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty; )*) => {
        /// The resolved functions of one loaded `libamdhip64`.
        pub struct HipApi {
            $( $name: unsafe extern "C" fn($($ty),*) -> $ret, )*
        }

        impl HipApi {
            /// Resolves every function from `lib`; the error lists every missing one.
            ///
            /// # Safety
            /// `lib` is the HIP runtime, whose symbols have these C signatures;
            /// it stays loaded for the life of the process.
            unsafe fn resolve(lib: &'static libloading::Library) -> Result<HipApi, Vec<&'static str>> {
                let mut missing = Vec::new();
                $(
                    let $name = unsafe { lib.get::<unsafe extern "C" fn($($ty),*) -> $ret>(stringify!($name).as_bytes()) }
                        .map(|f| *f)
                        .map_err(|_| missing.push(stringify!($name)))
                        .ok();
                )*
                if !missing.is_empty() {
                    return Err(missing);
                }
                Ok(HipApi { $( $name: $name.expect("checked above"), )* })
            }
        }

        $(
            /// Calls the HIP runtime function of the same name.
            ///
            /// # Safety
            /// As for the C function; [`load`] succeeded before.
            #[allow(clippy::too_many_arguments)] // the C signature
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                unsafe { (api().$name)($($arg),*) }
            }
        )*
    };
}

hip_api! {
    fn hipGetErrorName(error: hipError_t) -> *const c_char;
    fn hipGetErrorString(error: hipError_t) -> *const c_char;
    fn hipGetDeviceCount(count: *mut c_int) -> hipError_t;
    fn hipSetDevice(device: c_int) -> hipError_t;
    fn hipGetDevicePropertiesR0600(props: *mut hipDeviceProp_tR0600, device: c_int) -> hipError_t;
    fn hipModuleLoadData(module: *mut hipModule_t, image: *const c_void) -> hipError_t;
    fn hipModuleGetFunction(function: *mut hipFunction_t, module: hipModule_t, name: *const c_char) -> hipError_t;
    fn hipModuleUnload(module: hipModule_t) -> hipError_t;
    fn hipModuleLaunchKernel(
        function: hipFunction_t,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: hipStream_t,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> hipError_t;
    fn hipMallocAsync(ptr: *mut *mut c_void, size: usize, stream: hipStream_t) -> hipError_t;
    fn hipFreeAsync(ptr: *mut c_void, stream: hipStream_t) -> hipError_t;
    fn hipMemcpyHtoD(dst: hipDeviceptr_t, src: *const c_void, size: usize) -> hipError_t;
    fn hipMemcpyDtoH(dst: *mut c_void, src: hipDeviceptr_t, size: usize) -> hipError_t;
    fn hipMemcpyDtoDAsync(dst: hipDeviceptr_t, src: hipDeviceptr_t, size: usize, stream: hipStream_t) -> hipError_t;
    fn hipMemset(dst: *mut c_void, value: c_int, size: usize) -> hipError_t;
    fn hipDeviceSynchronize() -> hipError_t;
    fn hipStreamGetDevice(stream: hipStream_t, device: *mut hipDevice_t) -> hipError_t;
    fn hipStreamIsCapturing(stream: hipStream_t, status: *mut hipStreamCaptureStatus) -> hipError_t;
    fn hipEventCreate(event: *mut hipEvent_t) -> hipError_t;
    fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> hipError_t;
    fn hipEventSynchronize(event: hipEvent_t) -> hipError_t;
    fn hipEventElapsedTime(ms: *mut f32, start: hipEvent_t, stop: hipEvent_t) -> hipError_t;
    fn hipEventDestroy(event: hipEvent_t) -> hipError_t;
}

static API: OnceLock<HipApi> = OnceLock::new();

fn api() -> &'static HipApi {
    API.get().expect("hip_api::load succeeds before any HIP call")
}

/// Resolves the table from `lib` (once per process; later calls keep the first
/// table). The error names every missing function.
///
/// # Safety
/// `lib` is a HIP runtime (`libamdhip64`) that stays loaded for the life of the process.
pub unsafe fn load(lib: &'static libloading::Library) -> Result<(), Vec<&'static str>> {
    if API.get().is_some() {
        return Ok(());
    }
    let table = unsafe { HipApi::resolve(lib) }?;
    let _ = API.set(table);
    Ok(())
}
