//! The C ABI that mlxcel's C++ calls to fill its `.rocm` kernel slots.
//!
//! Conventions:
//! - Every launch function returns a [`MlxcelAmdgpuStatus`]; on anything but
//!   `MLXCEL_AMDGPU_OK`, `mlxcel_amdgpu_last_error()` returns a message saying
//!   what was wrong (thread-local, valid until the next call on the same thread).
//! - The contracts (math, rounding, limits, aliasing) are in `docs/contracts.md`
//!   of the repository; the limits are also constants of this header.
//! - Buffers are device pointers owned by the caller; `stream` is the caller's
//!   `hipStream_t` (or `CUstream` on the CUDA backend), NULL for the default
//!   (legacy) stream of the selected device, which synchronizes with every
//!   blocking stream. The CPU backend has no streams and refuses any stream but
//!   NULL. Launches are asynchronous on GPUs and complete before returning on
//!   the CPU backend.
//! - Buffers may not overlap a buffer the kernel writes, except the exact
//!   aliases each function lists (an in-place launch); any other overlap is
//!   refused with `MLXCEL_AMDGPU_INVALID_ARGUMENT` naming both arguments.
//!   Read-only inputs may overlap each other.
//! - One process-wide device, opened on first use: the backend and ordinal
//!   named by `mlxcel_amdgpu_select_device` (or `_select_backend`, ordinal 0)
//!   if it was called first, else the backend named by `MLXCEL_AMDGPU_BACKEND`,
//!   else HIP device 0. There is no fallback to another backend: the pointers a
//!   caller passes belong to one runtime, and the CPU emulator must never be
//!   handed HIP device pointers. When the device cannot be opened, or the last
//!   select failed, every predicate answers false and every launch returns
//!   `MLXCEL_AMDGPU_UNAVAILABLE` with the reason.
//! - Threads: every function may be called from any thread, concurrently. The
//!   launches of one thread on one stream keep their order. A select that runs
//!   while launches are in flight on other threads is not ordered with them: a
//!   launch uses the device that was selected when it started. Select once at
//!   start-up.
//! - `mlxcel_amdgpu_<kernel>_available(dtype)` answers with the same lookup the
//!   launch uses: when it says false, the launch fails with
//!   `MLXCEL_AMDGPU_UNAVAILABLE` and touches no memory.
//! - No panic crosses this boundary: one is reported as `MLXCEL_AMDGPU_INTERNAL`.
//! - Described launches: between `mlxcel_amdgpu_describe_begin` and
//!   `mlxcel_amdgpu_describe_end` a thread's launch calls check everything as
//!   usual but enqueue nothing; each kernel launch they would make is recorded
//!   (kernel handle, grid, workgroup, workgroup memory, `kernelParams`) for the
//!   caller to enqueue itself, for example as HIP graph kernel nodes. The
//!   arguments live until the caller releases the list.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::RwLock;

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::kernels::add3_layer_norm::{self, Add3Pointers};
use crate::kernels::mamba1_scan::{self, ScanPointers, ScanShape};
use crate::kernels::moe::block::{self, BlockPointers};
use crate::kernels::moe::router::{self, RouterPointers, RouterQuant, RouterShape};
use crate::kernels::moe::{self, MoeShape, QuantizedPointers, RoutedPointers};
use crate::kernels::xielu::{self, XieluParams};
use crate::runtime::describe::{self, DescribedLaunch};
use crate::runtime::{BackendKind, Device, Stream};

/// The version of this C ABI, bumped on every incompatible change of this
/// header. Compare it with [`mlxcel_amdgpu_abi_version`] at start-up.
pub const MLXCEL_AMDGPU_ABI_VERSION: u32 = 4;

/// `xielu`: the most elements `n` of one launch (2^60; the kernel indexes in
/// 64 bits, and byte offsets must stay within a signed 64-bit range).
pub const MLXCEL_AMDGPU_XIELU_MAX_N: u64 = 1152921504606846976;
/// `add3_layer_norm`: the longest row `d` (longer rows need the unfused pair).
pub const MLXCEL_AMDGPU_ADD3_MAX_D: u32 = 6656;
/// `add3_layer_norm`: the most rows of one launch.
pub const MLXCEL_AMDGPU_ADD3_MAX_ROWS: u32 = 16777215;
/// `mamba1_scan`: the largest state size `n` (one column per lane of a wave).
pub const MLXCEL_AMDGPU_MAMBA1_MAX_N: u32 = 32;
/// `mamba1_scan`: the largest `batch`.
pub const MLXCEL_AMDGPU_MAMBA1_MAX_BATCH: u32 = 65535;
/// MoE: the most expert slots `k` of one token.
pub const MLXCEL_AMDGPU_MOE_MAX_K: u32 = 65535;
/// MoE: the largest `din` and `dff` (a staged row fits in workgroup memory).
pub const MLXCEL_AMDGPU_MOE_MAX_COLS: u32 = 12288;
/// MoE: the supported `bits`, as a mask of `1 << bits` (4 and 8).
pub const MLXCEL_AMDGPU_MOE_BITS_MASK: u32 = (1 << 4) | (1 << 8);
/// MoE: the supported `group_size` values, as the sum of the powers of two
/// they are (32, 64 and 128); `din` and `dff` are multiples of the group size.
pub const MLXCEL_AMDGPU_MOE_GROUP_SIZES_MASK: u32 = 32 | 64 | 128;
/// MoE router: the most tokens `m` of one launch.
pub const MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS: u32 = 8;
/// MoE router: the most experts `n_experts`.
pub const MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS: u32 = 1024;
/// MoE router: the most experts `k` chosen per token (at most `n_experts`).
pub const MLXCEL_AMDGPU_MOE_ROUTER_MAX_K: u32 = 16;
/// MoE batch launches (`mlxcel_amdgpu_moe_*_batch`): the most tokens `m`.
pub const MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS: u32 = 8;
/// MoE batch launches: the most slots `m * k`.
pub const MLXCEL_AMDGPU_MOE_MAX_BATCH_SLOTS: u32 = 512;
/// Every pointer must be aligned to its element: 4 bytes for f32 and u32
/// buffers (MoE weights, ids, scores, scratch, state), 2 bytes for f16 and
/// bf16 buffers. This is that rule's largest alignment.
pub const MLXCEL_AMDGPU_MAX_POINTER_ALIGNMENT: u32 = 4;

// The header's limits are written as numbers for C; they must be the kernels'.
const _: () = {
    use kernels_device::geometry::{add3_layer_norm as add3, mamba1_scan as scan, moe as m, moe_router as r, xielu};
    assert!(MLXCEL_AMDGPU_XIELU_MAX_N == xielu::MAX_N);
    assert!(MLXCEL_AMDGPU_ADD3_MAX_D == add3::MAX_D);
    assert!(MLXCEL_AMDGPU_ADD3_MAX_ROWS == add3::MAX_ROWS);
    assert!(MLXCEL_AMDGPU_MAMBA1_MAX_N == scan::MAX_N);
    assert!(MLXCEL_AMDGPU_MAMBA1_MAX_BATCH == scan::MAX_BATCH);
    assert!(MLXCEL_AMDGPU_MOE_MAX_K == m::MAX_K);
    assert!(MLXCEL_AMDGPU_MOE_MAX_COLS == m::MAX_COLS);
    assert!(MLXCEL_AMDGPU_MOE_BITS_MASK == (1 << m::BITS[0]) | (1 << m::BITS[1]));
    assert!(MLXCEL_AMDGPU_MOE_GROUP_SIZES_MASK == m::GROUP_SIZES[0] | m::GROUP_SIZES[1] | m::GROUP_SIZES[2]);
    assert!(m::BITS.len() == 2 && m::GROUP_SIZES.len() == 3);
    assert!(MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS as usize == r::MAX_TOKENS);
    assert!(MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS == r::MAX_EXPERTS);
    assert!(MLXCEL_AMDGPU_MOE_ROUTER_MAX_K == r::MAX_TOPK);
    assert!(MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS == m::MAX_BATCH_TOKENS);
    assert!(MLXCEL_AMDGPU_MOE_MAX_BATCH_SLOTS == m::MAX_BATCH_SLOTS);
};

/// Status of a C ABI call.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlxcelAmdgpuStatus {
    /// Success.
    MLXCEL_AMDGPU_OK = 0,
    /// An argument was wrong (the message names it); nothing was launched.
    MLXCEL_AMDGPU_INVALID_ARGUMENT = 1,
    /// The kernel cannot run on this device; nothing was launched.
    MLXCEL_AMDGPU_UNAVAILABLE = 2,
    /// The HIP or CUDA runtime reported an error.
    MLXCEL_AMDGPU_BACKEND_ERROR = 3,
    /// A defect inside this library (a caught panic, an emulator report).
    MLXCEL_AMDGPU_INTERNAL = 4,
}

/// Element type of activations.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MlxcelAmdgpuDtype {
    MLXCEL_AMDGPU_F32 = 0,
    MLXCEL_AMDGPU_F16 = 1,
    MLXCEL_AMDGPU_BF16 = 2,
}

use MlxcelAmdgpuStatus::*;

/// A dtype code from C: one of [`MlxcelAmdgpuDtype`]'s values. (Taken as an
/// integer, so that a bad value is an error rather than undefined behaviour.)
fn dtype_of(code: u32) -> Result<Dtype> {
    const F32: u32 = MlxcelAmdgpuDtype::MLXCEL_AMDGPU_F32 as u32;
    const F16: u32 = MlxcelAmdgpuDtype::MLXCEL_AMDGPU_F16 as u32;
    const BF16: u32 = MlxcelAmdgpuDtype::MLXCEL_AMDGPU_BF16 as u32;
    match code {
        F32 => Ok(Dtype::F32),
        F16 => Ok(Dtype::F16),
        BF16 => Ok(Dtype::Bf16),
        _ => Err(Error::invalid("dtype", format!("{code} is not an MlxcelAmdgpuDtype (0 f32, 1 f16, 2 bf16)"))),
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// The process-wide device, or why it could not be opened; `None` until first use.
static DEVICE: RwLock<Option<Result<Device>>> = RwLock::new(None);

fn set_last_error(message: &str) {
    LAST_ERROR.with(|e| {
        // A success after a success allocates nothing (the launch path's common case).
        if message.is_empty() && e.borrow().as_bytes().is_empty() {
            return;
        }
        *e.borrow_mut() = CString::new(message.replace('\0', " ")).unwrap_or_default();
    });
}

fn status_of(error: &Error) -> MlxcelAmdgpuStatus {
    match error {
        Error::InvalidArgument { .. } => MLXCEL_AMDGPU_INVALID_ARGUMENT,
        Error::Unavailable { .. } | Error::BackendUnavailable { .. } => MLXCEL_AMDGPU_UNAVAILABLE,
        Error::Backend { .. } => MLXCEL_AMDGPU_BACKEND_ERROR,
        Error::CodeObject(_) | Error::Emulator(_) | Error::Internal(_) => MLXCEL_AMDGPU_INTERNAL,
        Error::Context { source, .. } => status_of(source),
    }
}

/// Runs `f` with panics caught, turning its result into a status.
fn guarded(f: impl FnOnce() -> Result<()>) -> MlxcelAmdgpuStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            set_last_error("");
            MLXCEL_AMDGPU_OK
        }
        Ok(Err(e)) => {
            set_last_error(&e.to_string());
            status_of(&e)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_last_error(&format!("internal error (panic): {what}"));
            MLXCEL_AMDGPU_INTERNAL
        }
    }
}

/// The device of the C ABI when none was selected: `MLXCEL_AMDGPU_BACKEND` if
/// set, else HIP device 0, with no fallback.
fn open_default() -> Result<Device> {
    Device::from_env().unwrap_or_else(|| Device::hip(0))
}

/// The process-wide device, opened on first use (see the module documentation).
fn device() -> Result<Device> {
    // The tests' way to make a guarded function panic; absent from any other build.
    #[cfg(test)]
    tests::panic_if_armed();
    if let Some(d) = DEVICE.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return d.clone();
    }
    let mut slot = DEVICE.write().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert_with(open_default).clone()
}

/// Answers a predicate: false on any error or panic.
fn predicate(f: impl FnOnce(&Device) -> bool) -> bool {
    catch_unwind(AssertUnwindSafe(|| device().map(|d| f(&d)).unwrap_or(false))).unwrap_or(false)
}

/// The message of the last failed call on this thread ("" after a success).
/// Valid until the next call of this library on the same thread.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Opens device `ordinal` of backend `name` ("hip", "cuda" or "cpu"; the CPU
/// backend has only ordinal 0) as the process-wide device, replacing any device
/// opened before. If it fails, no device is selected afterwards: every
/// predicate answers false and every launch returns `MLXCEL_AMDGPU_UNAVAILABLE`
/// saying the select failed, until a select succeeds. Optional: without it,
/// the first call opens the default device.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_select_device(name: *const c_char, ordinal: u32) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let opened = (|| {
            if name.is_null() {
                return Err(Error::invalid("name", "is a null pointer"));
            }
            let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
            let kind = BackendKind::parse(&name)
                .ok_or_else(|| Error::invalid("name", format!("{name:?} is not a backend; use hip, cuda or cpu")))?;
            Device::open_ordinal(kind, ordinal as usize)
        })();
        let stored = opened.clone().map_err(|e| Error::BackendUnavailable {
            backend: "selected",
            reason: format!("no device is selected because the last select failed: {e}"),
        });
        *DEVICE.write().unwrap_or_else(|e| e.into_inner()) = Some(stored);
        opened.map(|_| ())
    })
}

/// [`mlxcel_amdgpu_select_device`] with ordinal 0.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_select_backend(name: *const c_char) -> MlxcelAmdgpuStatus {
    unsafe { mlxcel_amdgpu_select_device(name, 0) }
}

/// The version of this C ABI, [`MLXCEL_AMDGPU_ABI_VERSION`] of the library that
/// is loaded. A caller compiled against another header version should refuse
/// to use the library.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_abi_version() -> u32 {
    MLXCEL_AMDGPU_ABI_VERSION
}

/// Writes a one-line description of the device (backend, name, architecture,
/// wave size, loaded kernels) into `buf` of `len` bytes, NUL-terminated and
/// truncated if needed. On failure `buf` (if usable) holds the empty string.
///
/// # Safety
/// `buf` points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_describe_device(buf: *mut c_char, len: usize) -> MlxcelAmdgpuStatus {
    guarded(|| {
        if buf.is_null() || len == 0 {
            return Err(Error::invalid("buf", "must point to at least one byte"));
        }
        // Empty until the description is written, so a caller that skips the
        // status never prints leftover bytes.
        unsafe { *buf = 0 };
        let d = device()?;
        let i = d.info();
        let text = format!(
            "{}: {} ({}, wave{}, {} CUs), kernels: {}",
            i.backend,
            i.name,
            i.arch,
            i.wavefront_size,
            i.compute_units,
            match &i.kernels {
                Ok(k) => k.clone(),
                Err(why) => format!("none ({why})"),
            }
        );
        let bytes = text.as_bytes();
        let n = bytes.len().min(len - 1);
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        Ok(())
    })
}

/// Whether `xielu` for `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_xielu_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| xielu::available(d, t)))
}

/// `out[i] = xielu(x[i])`, i < n (docs/contracts.md, "xielu"; `alpha_p` and
/// `alpha_n` arrive already softplus-ed), `n` at most
/// `MLXCEL_AMDGPU_XIELU_MAX_N`. Aliasing: `out` may be exactly `x`
/// (in place); any other overlap is refused.
///
/// # Safety
/// `x` and `out` are device pointers to `n` elements of `dtype`; `stream` is a
/// stream of the device's backend or NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_xielu(
    dtype: u32,
    x: *const c_void,
    out: *mut c_void,
    n: u64,
    alpha_p: f32,
    alpha_n: f32,
    beta: f32,
    eps: f32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let params = XieluParams { alpha_p, alpha_n, beta, eps };
        let device = device()?;
        let args = xielu::args(x as u64, out as u64, n, params);
        unsafe { xielu::launch(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// Whether `add3_layer_norm` for `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_add3_layer_norm_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| add3_layer_norm::available(d, t)))
}

/// Whether `add3_layer_norm` for `dtype` can run on the device with `rows`
/// rows of `d` elements: the same checks the launch makes of the shape.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_add3_layer_norm_supports(dtype: u32, rows: u32, d: u32) -> bool {
    predicate(|dev| dtype_of(dtype).is_ok_and(|t| add3_layer_norm::supports(dev, t, rows, d)))
}

/// `x_new = (a + b) + x`, `h = LayerNorm(x_new; w, bias, eps)` over rows of
/// `d` elements (docs/contracts.md, "add3_layer_norm"), byte-identical to
/// MLX's unfused pair. `bias` may be NULL. `d` must be in
/// 1..=`MLXCEL_AMDGPU_ADD3_MAX_D`. Aliasing: `x_new` may be exactly one of `a`,
/// `b`, `x`, and so may `h`, but `x_new` and `h` never overlap; any other
/// overlap with an output is refused.
///
/// # Safety
/// `a, b, x, x_new, h` are device pointers to `rows * d` elements of `dtype`,
/// `w` and `bias` (unless NULL) to `d` elements; `stream` as for xielu.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_add3_layer_norm(
    dtype: u32,
    a: *const c_void,
    b: *const c_void,
    x: *const c_void,
    w: *const c_void,
    bias: *const c_void,
    x_new: *mut c_void,
    h: *mut c_void,
    rows: u32,
    d: u32,
    eps: f32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let p = Add3Pointers {
            a: a as u64,
            b: b as u64,
            x: x as u64,
            w: w as u64,
            bias: bias as u64,
            x_new: x_new as u64,
            h: h as u64,
        };
        let device = device()?;
        unsafe {
            add3_layer_norm::launch(&device, dtype_of(dtype)?, add3_layer_norm::args(p, rows, d, eps), Stream(stream))
        }
    })
}

/// Whether `mamba1_scan` for `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_mamba1_scan_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| mamba1_scan::available(d, t)))
}

/// Whether `mamba1_scan` for `dtype` can run on the device with this shape:
/// the same checks the launch makes of it.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_mamba1_scan_supports(dtype: u32, batch: u32, len: u32, dm: u32, n: u32) -> bool {
    predicate(|dev| dtype_of(dtype).is_ok_and(|t| mamba1_scan::supports(dev, t, batch, len, dm, n)))
}

/// The Mamba1 selective scan (docs/contracts.md) over `len` steps of `batch`
/// sequences of `dm` channels with `n` (1..=32) state columns:
/// `x, dt, y [batch, len, dm]`, `bm, cm [batch, len, n]` and `dskip [dm]` of
/// `dtype`; `a [dm, n]`, `state_in` and `state_out [batch, dm, n]` f32.
/// Aliasing: `state_out` may be exactly `state_in` (an in-place update); any
/// other overlap with `y` or `state_out` is refused.
///
/// # Safety
/// The pointers are device pointers to buffers of those sizes; `y` overlaps
/// nothing else; `stream` as for xielu.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_mamba1_scan(
    dtype: u32,
    x: *const c_void,
    dt: *const c_void,
    bm: *const c_void,
    cm: *const c_void,
    a: *const f32,
    dskip: *const c_void,
    state_in: *const f32,
    y: *mut c_void,
    state_out: *mut f32,
    batch: u32,
    len: u32,
    dm: u32,
    n: u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let p = ScanPointers {
            x: x as u64,
            dt: dt as u64,
            bm: bm as u64,
            cm: cm as u64,
            a: a as u64,
            dskip: dskip as u64,
            state_in: state_in as u64,
            y: y as u64,
            state_out: state_out as u64,
        };
        let device = device()?;
        let args = mamba1_scan::args(p, ScanShape { batch, len, dm, n });
        unsafe { mamba1_scan::launch(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// Whether the MoE kernels (`moe_fc1_relu2`, `moe_down`, `moe_combine`) for
/// `dtype` (an [`MlxcelAmdgpuDtype`]) can all run on the device.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| moe::available(d, t)))
}

/// Whether the MoE kernels for `dtype` can all run on the device with `shape`:
/// the same checks the launches make of it.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_supports(dtype: u32, shape: MoeShape) -> bool {
    predicate(|dev| dtype_of(dtype).is_ok_and(|t| moe::supports(dev, t, &shape)))
}

/// Whether `moe_gateup` and `moe_down` at every width it takes (4, 6 and 8
/// bits) for `dtype` can run on the device: the gated (SwiGLU, GeGLU) experts.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_gated_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| moe::gateup_available(d, t) && moe::down_available(d, t)))
}

/// Whether [`mlxcel_amdgpu_moe_gateup`] for `dtype` takes `shape` (4 or 8 bits)
/// on the device: the checks the launch makes.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_gateup_supports(dtype: u32, shape: MoeShape) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| moe::gateup_available(d, t) && shape.validate().is_ok()))
}

/// Whether [`mlxcel_amdgpu_moe_down`] for `dtype` takes `shape` (4, 6 or 8
/// bits) on the device: the checks the launch makes.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_down_supports(dtype: u32, shape: MoeShape) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| moe::down_available(d, t) && shape.validate_down().is_ok()))
}

/// Writes to `*bytes` the bytes of f32 scratch that
/// [`mlxcel_amdgpu_moe_routed_forward`] needs for `k`, `din` and `dff` (`act`
/// and `part`). A size that does not fit in 64 bits and in `size_t` is
/// `MLXCEL_AMDGPU_INVALID_ARGUMENT` naming `k` (a NULL `bytes`: naming
/// `bytes`), and `*bytes` is then left unchanged. The shape's limits are not
/// checked here (the launch checks them): any size that can be written is.
///
/// # Safety
/// `bytes` is NULL or points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_scratch_bytes(
    k: u32,
    din: u32,
    dff: u32,
    bytes: *mut usize,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        if bytes.is_null() {
            return Err(Error::invalid("bytes", "is a null pointer"));
        }
        let need = moe::scratch_bytes(k, din, dff)?;
        unsafe { bytes.write(need) };
        Ok(())
    })
}

fn quantized(w: *const u32, scales: *const c_void, biases: *const c_void) -> QuantizedPointers {
    QuantizedPointers { w: w as u64, scales: scales as u64, biases: biases as u64 }
}

/// `act[k, f] = relu(x . dequant(w1[idx[k], f, :]))^2` (f32 `[k, dff]`).
/// `status` (one u32, zeroed by the caller, or NULL) receives `1 + k` for the
/// first slot whose expert id is `>= n_experts`; that slot's rows become NaN and
/// no out-of-range memory is read. Aliasing: none; `act` may not overlap any
/// other buffer.
///
/// # Safety
/// Device pointers of the shapes in `host/kernels/moe.rs`; `stream` as for xielu.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_fc1_relu2(
    dtype: u32,
    shape: MoeShape,
    x: *const c_void,
    idx: *const u32,
    w1: *const u32,
    s1: *const c_void,
    b1: *const c_void,
    act: *mut f32,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let device = device()?;
        let args = shape.fc1_args(x as u64, idx as u64, quantized(w1, s1, b1), act as u64, status as u64);
        unsafe { moe::fc1_relu2(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// `act[k, f] = a(x . dequant(wg[idx[k], f, :])) * (x . dequant(wu[idx[k], f, :]))`
/// (f32 `[k, dff]`), `a` SiLU (`activation` 0, SwiGLU) or GELU's tanh form (1,
/// GeGLU); any other `activation` is `MLXCEL_AMDGPU_INVALID_ARGUMENT`.
/// `shape.bits` 4 or 8 (the gate and up stacks'). `status` as for
/// [`mlxcel_amdgpu_moe_fc1_relu2`].
///
/// # Safety
/// As for [`mlxcel_amdgpu_moe_fc1_relu2`], with the gate and up stacks each of
/// `w1`'s shape.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_gateup(
    dtype: u32,
    shape: MoeShape,
    activation: u32,
    x: *const c_void,
    idx: *const u32,
    wg: *const u32,
    sg: *const c_void,
    bg: *const c_void,
    wu: *const u32,
    su: *const c_void,
    bu: *const c_void,
    act: *mut f32,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let activation = moe::Activation::from_code(activation)?;
        let p = moe::GatedPointers {
            x: x as u64,
            idx: idx as u64,
            gate: quantized(wg, sg, bg),
            up: quantized(wu, su, bu),
            act: act as u64,
            status: status as u64,
        };
        let device = device()?;
        unsafe { moe::gateup(&device, dtype_of(dtype)?, shape.gateup_args(p, activation), Stream(stream)) }
    })
}

/// `part[k, h] = scores[k] * (act[k, :] . dequant(w2[idx[k], h, :]))` (f32 `[k, din]`),
/// `shape.bits` 4, 6 (MLX's four values in three bytes) or 8.
/// `status` as for [`mlxcel_amdgpu_moe_fc1_relu2`].
///
/// # Safety
/// As for [`mlxcel_amdgpu_moe_fc1_relu2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_down(
    dtype: u32,
    shape: MoeShape,
    idx: *const u32,
    w2: *const u32,
    s2: *const c_void,
    b2: *const c_void,
    act: *const f32,
    scores: *const f32,
    part: *mut f32,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let device = device()?;
        let w2 = quantized(w2, s2, b2);
        let args = shape.down_args(idx as u64, w2, act as u64, scores as u64, part as u64, status as u64);
        unsafe { moe::down(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// `out[h] = T(sum_k part[k, h])` (f32 sum over k ascending, one rounding).
///
/// # Safety
/// `part` holds `[k, din]` f32 and `out` `[din]` elements of `dtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_combine(
    dtype: u32,
    part: *const f32,
    out: *mut c_void,
    k: u32,
    din: u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let device = device()?;
        let args = moe::MoeCombineArgs { part: part as u64, out: out as u64, k, din };
        unsafe { moe::combine(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// [`mlxcel_amdgpu_moe_gateup`] for `m` tokens in one launch: `x [m, din]`,
/// `idx [m, k]` (`k = shape.k`), `act [m, k, dff]` (f32), each token's rows
/// bit for bit those of the single-token call. `m` in 1..=8 and `m * k` at
/// most 512 (`MLXCEL_AMDGPU_INVALID_ARGUMENT` naming `m`, or `k`); `m = 1`
/// runs the single-token kernel. `status` receives `1 + t * k + j` for the
/// first bad id in flat order.
///
/// # Safety
/// As for [`mlxcel_amdgpu_moe_gateup`], with the shapes above.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_gateup_batch(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    activation: u32,
    x: *const c_void,
    idx: *const u32,
    wg: *const u32,
    sg: *const c_void,
    bg: *const c_void,
    wu: *const u32,
    su: *const c_void,
    bu: *const c_void,
    act: *mut f32,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let activation = moe::Activation::from_code(activation)?;
        let p = moe::GatedPointers {
            x: x as u64,
            idx: idx as u64,
            gate: quantized(wg, sg, bg),
            up: quantized(wu, su, bu),
            act: act as u64,
            status: status as u64,
        };
        let device = device()?;
        let args = shape.gateup_batch_args(m, p, activation);
        unsafe { moe::gateup_batch(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// [`mlxcel_amdgpu_moe_down`] for `m` tokens in one launch: `idx` and
/// `scores [m, k]`, `act [m, k, dff]`, `part [m, k, din]` (f32); limits as
/// for [`mlxcel_amdgpu_moe_gateup_batch`]. `shape.bits` 4, 6 or 8 (6 runs
/// `moe_down6` over the `m * k` flat slots).
///
/// # Safety
/// As for [`mlxcel_amdgpu_moe_down`], with the shapes above.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_down_batch(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    idx: *const u32,
    w2: *const u32,
    s2: *const c_void,
    b2: *const c_void,
    act: *const f32,
    scores: *const f32,
    part: *mut f32,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let device = device()?;
        let w2 = quantized(w2, s2, b2);
        let args = shape.down_batch_args(m, idx as u64, w2, act as u64, scores as u64, part as u64, status as u64);
        unsafe { moe::down_batch(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// `out[t, h] = T(sum_j part[t, j, h])` for `m` tokens (f32 sums over `j`
/// ascending, one rounding); limits as for [`mlxcel_amdgpu_moe_gateup_batch`].
///
/// # Safety
/// `part` holds `[m, k, din]` f32 and `out` `[m, din]` elements of `dtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_combine_batch(
    dtype: u32,
    part: *const f32,
    out: *mut c_void,
    m: u32,
    k: u32,
    din: u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let device = device()?;
        let args = moe::MoeCombineBatchArgs { part: part as u64, out: out as u64, m, k, din };
        unsafe { moe::combine_batch(&device, dtype_of(dtype)?, args, Stream(stream)) }
    })
}

/// The whole routed-expert forward of one token: `moe_fc1_relu2`, `moe_down`
/// and `moe_combine` enqueued in order on `stream`, `out [din]` of `dtype`.
/// `scratch` is device memory of at least [`mlxcel_amdgpu_moe_scratch_bytes`]
/// bytes (`scratch_len`) that nothing else uses until the stream has run them.
/// `status` as for [`mlxcel_amdgpu_moe_fc1_relu2`].
///
/// # Safety
/// As for [`mlxcel_amdgpu_moe_fc1_relu2`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_routed_forward(
    dtype: u32,
    shape: MoeShape,
    x: *const c_void,
    idx: *const u32,
    scores: *const f32,
    w1: *const u32,
    s1: *const c_void,
    b1: *const c_void,
    w2: *const u32,
    s2: *const c_void,
    b2: *const c_void,
    out: *mut c_void,
    scratch: *mut c_void,
    scratch_len: usize,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let p = RoutedPointers {
            x: x as u64,
            idx: idx as u64,
            scores: scores as u64,
            w1: quantized(w1, s1, b1),
            w2: quantized(w2, s2, b2),
            out: out as u64,
            scratch: scratch as u64,
            scratch_len,
            status: status as u64,
        };
        let device = device()?;
        unsafe { moe::routed_forward(&device, dtype_of(dtype)?, p, &shape, Stream(stream)) }
    })
}

/// Whether the router's kernels (`moe_router_logits`, `moe_topk`) for `dtype`
/// (an [`MlxcelAmdgpuDtype`]) can both run on the device.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_router_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| router::router_available(d, t)))
}

/// Whether [`mlxcel_amdgpu_moe_router`] for `dtype` takes this shape on the
/// device: the checks the launch makes of it.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_router_supports(dtype: u32, m: u32, n_experts: u32, k: u32, din: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| router::supports(d, t, &RouterShape { m, n_experts, din, k })))
}

/// The router of the routed experts for `m` tokens (1..=8): `logits [m,
/// n_experts] = x [m, din] . wr [n_experts, din]^T` in f32, then per token
/// the softmax of its logits, the `k` most probable experts `ids [m, k]`
/// (larger first, the lower id on equal probabilities) and their
/// probabilities `scores [m, k]` (f32), divided by their sum when
/// `norm_topk_prob` is 1 (0: as they are; anything else is
/// `MLXCEL_AMDGPU_INVALID_ARGUMENT`). Two launches in order on `stream`;
/// `logits` is the caller's f32 buffer between them (its values stay for
/// the caller to read). A token whose logits hold a NaN or `+inf`, or are all
/// `-inf`, gets ids `UINT32_MAX` and scores NaN. Aliasing: none; no output
/// may overlap any other buffer.
///
/// # Safety
/// `x` and `wr` are device pointers to those shapes of `dtype`, `logits`,
/// `ids` and `scores` to those shapes of f32, u32 and f32; `stream` as for
/// xielu.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_router(
    dtype: u32,
    x: *const c_void,
    wr: *const c_void,
    logits: *mut f32,
    ids: *mut u32,
    scores: *mut f32,
    m: u32,
    n_experts: u32,
    k: u32,
    din: u32,
    norm_topk_prob: u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let device = device()?;
        let dtype = dtype_of(dtype)?;
        let renorm = match norm_topk_prob {
            0 => false,
            1 => true,
            v => return Err(Error::invalid("norm_topk_prob", format!("{v} is not 0 or 1"))),
        };
        let p = RouterPointers {
            x: x as u64,
            wr: wr as u64,
            logits: logits as u64,
            ids: ids as u64,
            scores: scores as u64,
        };
        let shape = RouterShape { m, n_experts, din, k };
        unsafe { router::router(&device, dtype, p, &shape, renorm, Stream(stream)) }
    })
}

/// Whether every kernel of [`mlxcel_amdgpu_moe_block`] for `dtype` (an
/// [`MlxcelAmdgpuDtype`]) can run on the device, at every `m`.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_block_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| block::block_available(d, t)))
}

/// Whether [`mlxcel_amdgpu_moe_block`] for `dtype` takes `m` tokens of this
/// shape on the device: the checks the launch makes of them.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_block_supports(dtype: u32, shape: MoeShape, m: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| block::block_supports(d, t, m, &shape)))
}

/// Writes to `*bytes` the scratch [`mlxcel_amdgpu_moe_block`] needs for `m`
/// tokens of this shape: the router's `logits [m, E]`, `ids [m, K]` and
/// `scores [m, K]`, then `act [m, K, Dff]`, `part [m, K, Din]` and the down
/// launch's arrival counts `[m, ceil(Din / 32)]` (f32, u32, f32, f32, f32,
/// u32), each on 256 bytes. Refuses the sizes the launch refuses.
///
/// # Safety
/// `bytes` points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_block_scratch_bytes(
    shape: MoeShape,
    m: u32,
    bytes: *mut usize,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        if bytes.is_null() {
            return Err(Error::invalid("bytes", "is a null pointer"));
        }
        block::validate_block(m, &shape)?;
        let n = block::block_scratch_bytes(m, &shape)?;
        unsafe { bytes.write(n) };
        Ok(())
    })
}

/// The whole routed-expert block of a gated MoE layer (Qwen3 MoE) for `m`
/// tokens (1..=8): [`mlxcel_amdgpu_moe_router`] of `x [m, din]` and `wr
/// [n_experts, din]` into `scratch`, then [`mlxcel_amdgpu_moe_gateup_batch`],
/// [`mlxcel_amdgpu_moe_down_batch`] and [`mlxcel_amdgpu_moe_combine_batch`]
/// into `out [m, din]` of `dtype`, bit for bit those calls on the same
/// inputs, in order on `stream`: three launches at `m = 1`, where the
/// router's top-k runs inside the gate/up launch (`moe_gateup_routed`), four
/// from `m = 2`. The combine runs inside the down launch
/// (`moe_down_combine`): the last of a token's workgroups to finish a block
/// of rows sums the token's rows there, counted in the scratch, which the
/// router's launch clears. `shape.k` is the router's top-k (at most 16, at most
/// `n_experts`); `shape.bits` 4 or 8; `activation` 0 SwiGLU or 1 GeGLU;
/// `norm_topk_prob` 0 or 1. `scratch` holds at least
/// [`mlxcel_amdgpu_moe_block_scratch_bytes`] bytes (`scratch_len`) that
/// nothing else uses until the stream has run the block. `status`, NULL or
/// one zeroed u32, receives `1 + t * k + j` for the first slot whose id is out
/// of range (a token whose logits hold a NaN). Every argument is checked
/// before the first launch. Aliasing: none.
///
/// # Safety
/// `x`, `wr` and `out` are device pointers to those shapes of `dtype`, the
/// stacks as for [`mlxcel_amdgpu_moe_gateup`] and [`mlxcel_amdgpu_moe_down`];
/// `stream` as for xielu.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_block(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    activation: u32,
    norm_topk_prob: u32,
    x: *const c_void,
    wr: *const c_void,
    wg: *const u32,
    sg: *const c_void,
    bg: *const c_void,
    wu: *const u32,
    su: *const c_void,
    bu: *const c_void,
    w2: *const u32,
    s2: *const c_void,
    b2: *const c_void,
    out: *mut c_void,
    scratch: *mut c_void,
    scratch_len: usize,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    let router = block::RouterWeights::Dense(wr as u64);
    let experts = [quantized(wg, sg, bg), quantized(wu, su, bu), quantized(w2, s2, b2)];
    let io = BlockIo { x, out, scratch, scratch_len, status };
    unsafe { launch_block(dtype, shape, m, activation, norm_topk_prob, || Ok((router, None)), experts, io, stream) }
}

/// Whether every kernel of [`mlxcel_amdgpu_moe_block_quantized_router`] for
/// `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device, at every `m`.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_block_quantized_router_available(dtype: u32) -> bool {
    predicate(|d| dtype_of(dtype).is_ok_and(|t| block::block_quantized_router_available(d, t)))
}

/// Whether [`mlxcel_amdgpu_moe_block_quantized_router`] for `dtype` takes `m`
/// tokens of this shape with a router of `router_bits` and
/// `router_group_size` on the device: the checks the launch makes of them.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_block_quantized_router_supports(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    router_bits: u32,
    router_group_size: u32,
) -> bool {
    let quant = RouterQuant { bits: router_bits, group_size: router_group_size };
    predicate(|d| dtype_of(dtype).is_ok_and(|t| block::block_quantized_router_supports(d, t, m, &shape, quant)))
}

/// [`mlxcel_amdgpu_moe_block`] with the router's weights quantized as MLX
/// quantizes a linear layer (mlx-lm quantizes Qwen3 MoE's `mlp.gate` at 8
/// bits, group 64): codes `wq [n_experts, din * router_bits / 32]` u32
/// (16-byte aligned codes take one load a quad), and scales and biases `sq`,
/// `bq [n_experts, din / router_group_size]` of `dtype`, read by
/// `moe_router_logits_q`.
/// `router_bits` is 4 or 8, `router_group_size` 32, 64 or 128 (dividing
/// `din`), whatever the experts' `shape.bits` and `shape.group_size`. The
/// scratch is [`mlxcel_amdgpu_moe_block_scratch_bytes`]'; everything else is
/// as for [`mlxcel_amdgpu_moe_block`], and every argument is checked before
/// the first launch.
///
/// # Safety
/// As for [`mlxcel_amdgpu_moe_block`], with `wq`, `sq` and `bq` device
/// pointers to those shapes.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_block_quantized_router(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    router_bits: u32,
    router_group_size: u32,
    activation: u32,
    norm_topk_prob: u32,
    x: *const c_void,
    wq: *const u32,
    sq: *const c_void,
    bq: *const c_void,
    wg: *const u32,
    sg: *const c_void,
    bg: *const c_void,
    wu: *const u32,
    su: *const c_void,
    bu: *const c_void,
    w2: *const u32,
    s2: *const c_void,
    b2: *const c_void,
    out: *mut c_void,
    scratch: *mut c_void,
    scratch_len: usize,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    let quant = RouterQuant { bits: router_bits, group_size: router_group_size };
    let router = block::RouterWeights::Quantized { w: quantized(wq, sq, bq), quant };
    let experts = [quantized(wg, sg, bg), quantized(wu, su, bu), quantized(w2, s2, b2)];
    let io = BlockIo { x, out, scratch, scratch_len, status };
    unsafe { launch_block(dtype, shape, m, activation, norm_topk_prob, || Ok((router, None)), experts, io, stream) }
}

/// One quantized matrix (or stack) of the C ABI: codes, scales and biases.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MlxcelAmdgpuQuantized {
    /// Packed codes (u32 words).
    pub w: *const u32,
    /// Scales, one a group, of the activation dtype.
    pub scales: *const c_void,
    /// Biases, one a group, of the activation dtype.
    pub biases: *const c_void,
}

impl MlxcelAmdgpuQuantized {
    fn pointers(self) -> QuantizedPointers {
        quantized(self.w, self.scales, self.biases)
    }
}

/// The router of [`mlxcel_amdgpu_moe_block_shared_expert`] and its shared
/// expert's gate row: dense when `router_bits` is 0 (`w` then holds values of
/// the activation dtype, and `scales` and `biases` must be NULL), else
/// quantized at `router_bits` and `router_group_size`.
fn shared_router(
    bits: u32,
    group_size: u32,
    router: MlxcelAmdgpuQuantized,
    expert_gate: MlxcelAmdgpuQuantized,
) -> Result<(block::RouterWeights, block::ExpertGate)> {
    if bits != 0 {
        let quant = RouterQuant { bits, group_size };
        let router = block::RouterWeights::Quantized { w: router.pointers(), quant };
        return Ok((router, block::ExpertGate::Quantized(expert_gate.pointers())));
    }
    let stray = [
        ("router.scales", router.scales),
        ("router.biases", router.biases),
        ("expert_gate.scales", expert_gate.scales),
        ("expert_gate.biases", expert_gate.biases),
    ];
    if let Some((name, _)) = stray.iter().find(|(_, p)| !p.is_null()) {
        return Err(Error::invalid(name, "is given with router_bits 0 (a dense router and gate row); pass NULL"));
    }
    if group_size != 0 {
        return Err(Error::invalid("router_group_size", format!("{group_size} is given with router_bits 0; pass 0")));
    }
    Ok((block::RouterWeights::Dense(router.w as u64), block::ExpertGate::Dense(expert_gate.w as u64)))
}

/// Whether every kernel of [`mlxcel_amdgpu_moe_block_shared_expert`] for
/// `dtype` (an [`MlxcelAmdgpuDtype`]) with a router of `router_bits` (0:
/// dense) can run on the device, at every `m`.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_block_shared_expert_available(dtype: u32, router_bits: u32) -> bool {
    predicate(|d| {
        dtype_of(dtype).is_ok_and(|t| match router_bits {
            0 => block::block_available(d, t),
            _ => block::block_quantized_router_available(d, t),
        })
    })
}

/// Whether [`mlxcel_amdgpu_moe_block_shared_expert`] for `dtype` takes `m`
/// tokens of this shape with a router of `router_bits` (0: dense) and
/// `router_group_size` (0 with a dense router) on the device: the checks the
/// launch makes of them.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_moe_block_shared_expert_supports(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    router_bits: u32,
    router_group_size: u32,
) -> bool {
    let router = match (router_bits, router_group_size) {
        (0, 0) => None,
        (0, _) => return false,
        (bits, group_size) => Some(RouterQuant { bits, group_size }),
    };
    predicate(|d| dtype_of(dtype).is_ok_and(|t| block::block_shared_supports(d, t, m, &shape, router)))
}

/// Writes to `*bytes` the scratch [`mlxcel_amdgpu_moe_block_shared_expert`]
/// needs for `m` tokens of this shape: as
/// [`mlxcel_amdgpu_moe_block_scratch_bytes`] with `k + 1` slots a token, and
/// the shared gate's logits `[m]` (f32) before the arrival counts, each on 256
/// bytes. Refuses the sizes the launch refuses.
///
/// # Safety
/// `bytes` points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes(
    shape: MoeShape,
    m: u32,
    bytes: *mut usize,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        if bytes.is_null() {
            return Err(Error::invalid("bytes", "is a null pointer"));
        }
        block::validate_block_shared(m, &shape)?;
        let n = block::block_shared_scratch_bytes(m, &shape)?;
        unsafe { bytes.write(n) };
        Ok(())
    })
}

/// [`mlxcel_amdgpu_moe_block`] with a shared expert (Qwen3-Next): `out[t] =
/// routed(x[t]) + sigmoid(x[t] . expert_gate) * down_s(a(gate_s(x[t])) *
/// up_s(x[t]))`, in the same launches (the shared expert is one more
/// slot a token, summed last). The router `[n_experts, din]` and the gate
/// row `expert_gate [din]` (`shared_expert_gate`, a linear layer of one
/// output) are dense when `router_bits` is 0 (`w` holds values of `dtype`;
/// `scales`, `biases` and `router_group_size` are NULL and 0), else both
/// quantized at `router_bits` (4 or 8) and `router_group_size` (32, 64 or
/// 128), as mlx-lm quantizes Qwen3-Next's `mlp.gate` and
/// `shared_expert_gate` (8 bits, group 64). `shared_gate`, `shared_up` and
/// `shared_down` are one expert of the routed stacks' shape and format.
/// `scratch` holds at least
/// [`mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes`] bytes. `status`
/// receives `1 + t * (k + 1) + j` for the first slot out of range. Everything
/// else is as for [`mlxcel_amdgpu_moe_block`], and every argument is checked
/// before the first launch.
///
/// # Safety
/// As for [`mlxcel_amdgpu_moe_block`], with each matrix's pointers device
/// pointers to those shapes.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_moe_block_shared_expert(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    router_bits: u32,
    router_group_size: u32,
    activation: u32,
    norm_topk_prob: u32,
    x: *const c_void,
    router: MlxcelAmdgpuQuantized,
    expert_gate: MlxcelAmdgpuQuantized,
    gate: MlxcelAmdgpuQuantized,
    up: MlxcelAmdgpuQuantized,
    down: MlxcelAmdgpuQuantized,
    shared_gate: MlxcelAmdgpuQuantized,
    shared_up: MlxcelAmdgpuQuantized,
    shared_down: MlxcelAmdgpuQuantized,
    out: *mut c_void,
    scratch: *mut c_void,
    scratch_len: usize,
    status: *mut u32,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    let routers = || {
        let (router, expert_gate) = shared_router(router_bits, router_group_size, router, expert_gate)?;
        let (gate, up, down) = (shared_gate.pointers(), shared_up.pointers(), shared_down.pointers());
        Ok((router, Some(block::SharedExpertPointers { expert_gate, gate, up, down })))
    };
    let experts = [gate.pointers(), up.pointers(), down.pointers()];
    let io = BlockIo { x, out, scratch, scratch_len, status };
    unsafe { launch_block(dtype, shape, m, activation, norm_topk_prob, routers, experts, io, stream) }
}

/// The block's buffers besides the weights.
struct BlockIo {
    x: *const c_void,
    out: *mut c_void,
    scratch: *mut c_void,
    scratch_len: usize,
    status: *mut u32,
}

/// The block functions' shared body: the codes checked, then the router and
/// the shared expert (`routers`, whose own checks come after the codes'), then
/// [`block::block`].
#[allow(clippy::too_many_arguments)]
unsafe fn launch_block(
    dtype: u32,
    shape: MoeShape,
    m: u32,
    activation: u32,
    norm_topk_prob: u32,
    routers: impl FnOnce() -> Result<(block::RouterWeights, Option<block::SharedExpertPointers>)>,
    [gate, up, down]: [QuantizedPointers; 3],
    io: BlockIo,
    stream: *mut c_void,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let device = device()?;
        let dtype = dtype_of(dtype)?;
        let activation = moe::Activation::from_code(activation)?;
        let renorm = match norm_topk_prob {
            0 => false,
            1 => true,
            v => return Err(Error::invalid("norm_topk_prob", format!("{v} is not 0 or 1"))),
        };
        let (router, shared) = routers()?;
        let p = BlockPointers {
            x: io.x as u64,
            router,
            gate,
            up,
            down,
            shared,
            out: io.out as u64,
            scratch: io.scratch as u64,
            scratch_len: io.scratch_len,
            status: io.status as u64,
        };
        unsafe { block::block(&device, dtype, p, &shape, m, activation, renorm, Stream(stream)) }
    })
}

/// One described launch: what `hipModuleLaunchKernel` (or `cuLaunchKernel`)
/// and a HIP graph kernel node (`hipKernelNodeParams`) take.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MlxcelAmdgpuLaunchDesc {
    /// `hipFunction_t` on the HIP backend, `CUfunction` on the CUDA backend.
    pub function: *mut c_void,
    /// Workgroups along x, y, z.
    pub grid: [u32; 3],
    /// Threads of a workgroup along x, y, z.
    pub block: [u32; 3],
    /// Dynamic workgroup memory in bytes.
    pub shared_mem_bytes: u32,
    /// One pointer per kernel argument (`kernelParams`), into storage the
    /// list owns: valid until the list is released.
    pub kernel_params: *mut *mut c_void,
}

/// The launches described between `mlxcel_amdgpu_describe_begin` and
/// `mlxcel_amdgpu_describe_end`, in order, with their arguments. Opaque;
/// release it with `mlxcel_amdgpu_launch_list_release` once nothing (no
/// stream, no graph) can use its launches any more.
pub struct MlxcelAmdgpuLaunchList {
    launches: Vec<DescribedLaunch>,
}

/// Starts describing launches on this thread: until
/// `mlxcel_amdgpu_describe_end`, each launch call on this thread checks its
/// arguments as usual and then records its kernel launches instead of
/// enqueuing them. Its `stream` must be NULL. Only a GPU backend (hip, cuda)
/// describes; on the CPU backend such a launch call returns
/// `MLXCEL_AMDGPU_UNAVAILABLE`. Describing while already describing is
/// `MLXCEL_AMDGPU_INVALID_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn mlxcel_amdgpu_describe_begin() -> MlxcelAmdgpuStatus {
    guarded(describe::begin)
}

/// Stops describing on this thread and hands the launches recorded since
/// `mlxcel_amdgpu_describe_begin` to `*list` (possibly none: a launch with
/// nothing to do records nothing). `MLXCEL_AMDGPU_INVALID_ARGUMENT` if the
/// thread was not describing or `list` is NULL; describing ends either way.
///
/// # Safety
/// `list` is NULL or points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_describe_end(list: *mut *mut MlxcelAmdgpuLaunchList) -> MlxcelAmdgpuStatus {
    guarded(|| {
        let launches = describe::end()?;
        if list.is_null() {
            return Err(Error::invalid("list", "is a null pointer (the described launches are dropped)"));
        }
        let owned = Box::into_raw(Box::new(MlxcelAmdgpuLaunchList { launches }));
        unsafe { list.write(owned) };
        Ok(())
    })
}

/// The number of launches in `list` (0 for NULL).
///
/// # Safety
/// `list` is NULL or a list from `mlxcel_amdgpu_describe_end` not yet released.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_launch_list_len(list: *const MlxcelAmdgpuLaunchList) -> usize {
    if list.is_null() { 0 } else { unsafe { (*list).launches.len() } }
}

/// Writes launch `index` of `list` to `*out`.
///
/// # Safety
/// `list` is a list from `mlxcel_amdgpu_describe_end` not yet released; `out`
/// is NULL or points to a writable `MlxcelAmdgpuLaunchDesc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_launch_list_get(
    list: *const MlxcelAmdgpuLaunchList,
    index: usize,
    out: *mut MlxcelAmdgpuLaunchDesc,
) -> MlxcelAmdgpuStatus {
    guarded(|| {
        if list.is_null() {
            return Err(Error::invalid("list", "is a null pointer"));
        }
        if out.is_null() {
            return Err(Error::invalid("out", "is a null pointer"));
        }
        let launches = unsafe { &(*list).launches };
        let l = launches
            .get(index)
            .ok_or_else(|| Error::invalid("index", format!("{index}: the list holds {} launches", launches.len())))?;
        let desc = MlxcelAmdgpuLaunchDesc {
            function: l.function,
            grid: l.dims.grid,
            block: [l.dims.workgroup_size, 1, 1],
            shared_mem_bytes: l.dims.workgroup_mem_bytes,
            kernel_params: l.args.kernel_params(),
        };
        unsafe { out.write(desc) };
        Ok(())
    })
}

/// Frees `list` and the arguments of its launches (NULL is a no-op). The
/// arguments are overwritten first, so a graph still using them faults
/// rather than running on stale values.
///
/// # Safety
/// `list` is NULL or a list from `mlxcel_amdgpu_describe_end`, released once,
/// after every stream and graph that uses its launches is done with them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlxcel_amdgpu_launch_list_release(list: *mut MlxcelAmdgpuLaunchList) {
    if !list.is_null() {
        drop(unsafe { Box::from_raw(list) });
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    thread_local! {
        /// Set by a test: the next [`device`] lookup on this thread panics.
        static ARMED: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn panic_if_armed() {
        if ARMED.with(|a| a.replace(false)) {
            panic!("planted by a test");
        }
    }

    fn last_error() -> String {
        unsafe { CStr::from_ptr(mlxcel_amdgpu_last_error()) }.to_string_lossy().into_owned()
    }

    /// xielu over `x` on the selected device (the CPU one: host pointers).
    fn xielu(x: &[f32], out: &mut [f32]) -> MlxcelAmdgpuStatus {
        let n = x.len() as u64;
        let null = std::ptr::null_mut();
        // SAFETY: `x` and `out` hold `n` f32 values.
        unsafe { mlxcel_amdgpu_xielu(0, x.as_ptr().cast(), out.as_mut_ptr().cast(), n, 0.8, 0.6, 0.5, -1e-6, null) }
    }

    /// One test: the device is process-wide.
    #[test]
    fn a_panic_never_crosses_the_c_abi_and_the_next_call_works() {
        // A backend that is absent (CUDA without a driver or without the feature)
        // is named through the selection path; a select of one present works.
        // SAFETY: NUL-terminated names.
        if unsafe { mlxcel_amdgpu_select_device(c"cuda".as_ptr(), 0) } != MLXCEL_AMDGPU_OK {
            let why = last_error();
            println!("select cuda: {why}");
            assert!(why.contains("the cuda backend is not available"), "{why}");
        }
        assert_eq!(unsafe { mlxcel_amdgpu_select_device(c"cpu".as_ptr(), 0) }, MLXCEL_AMDGPU_OK);

        let x = [0.5f32, -1.0, 2.0];
        let mut out = [7.0f32; 3];
        ARMED.with(|a| a.set(true));
        assert_eq!(xielu(&x, &mut out), MLXCEL_AMDGPU_INTERNAL);
        assert_eq!(last_error(), "internal error (panic): planted by a test");
        assert_eq!(out, [7.0; 3], "the call that panicked wrote");
        assert_eq!(xielu(&x, &mut out), MLXCEL_AMDGPU_OK, "{}", last_error());
        // The reference's xielu of x at these scalars (the testkit's
        // `reference::xielu`), which the kernel tests hold every dtype to.
        assert_eq!(out.map(f32::to_bits), [0x3ee6_6666, 0xbe8e_fcc8, 0x4086_6666]);
        assert_eq!(last_error(), "");

        // A predicate that panics answers false; the next one answers.
        ARMED.with(|a| a.set(true));
        assert!(!mlxcel_amdgpu_xielu_available(0));
        assert!(mlxcel_amdgpu_xielu_available(0));
    }
}
