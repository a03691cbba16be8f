//! Launcher of `xielu` (spec/kernels.md section 1).

use kernels_device::geometry::xielu::{
    BF16_WORKGROUP_MEM_BYTES, ELEMS_PER_THREAD, MAX_WORKGROUPS, TABLE_MIN_ELEMS_PER_WORKGROUP, TABLE_WORKGROUP_SIZE,
    TABLE_WORKGROUPS_PER_CU, WORKGROUP_SIZE,
};

use super::{check_len, check_ptr, kernel_for, symbol};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::runtime::{ArgValue, Device, DeviceBuffer, LaunchDims, Stream};

/// Kernel name without the dtype suffix.
pub const KERNEL: &str = "xielu";

/// The four scalars of xIELU, already softplus-ed on the host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct XieluParams {
    pub alpha_p: f32,
    pub alpha_n: f32,
    pub beta: f32,
    pub eps: f32,
}

impl XieluParams {
    /// Typical Apertus values.
    pub const APERTUS: XieluParams = XieluParams { alpha_p: 0.8731, alpha_n: 0.6042, beta: 0.5, eps: -1e-6 };
}

/// Whether `xielu` for `dtype` can run on `device`.
pub fn available(device: &Device, dtype: Dtype) -> bool {
    device.is_available(&symbol(KERNEL, dtype))
}

/// The launch geometry for `n` elements of `dtype` on a device with
/// `compute_units`: one chunk per thread, except for bf16 when `n` is large
/// enough that the kernel's table pays off (few workgroups, each looping over
/// many chunks; the kernel checks the same condition on the grid it is given).
pub fn dims(n: u64, dtype: Dtype, compute_units: u32) -> LaunchDims {
    let per_group = WORKGROUP_SIZE as u64 * ELEMS_PER_THREAD as u64;
    let groups = n.div_ceil(per_group).min(MAX_WORKGROUPS as u64) as u32;
    if dtype != Dtype::Bf16 {
        return LaunchDims { grid: [groups, 1, 1], workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes: 0 };
    }
    let table_groups = compute_units.max(1).saturating_mul(TABLE_WORKGROUPS_PER_CU);
    if n >= TABLE_MIN_ELEMS_PER_WORKGROUP * table_groups as u64 {
        LaunchDims {
            grid: [table_groups, 1, 1],
            workgroup_size: TABLE_WORKGROUP_SIZE,
            workgroup_mem_bytes: BF16_WORKGROUP_MEM_BYTES,
        }
    } else {
        LaunchDims {
            grid: [groups, 1, 1],
            workgroup_size: WORKGROUP_SIZE,
            workgroup_mem_bytes: BF16_WORKGROUP_MEM_BYTES,
        }
    }
}

/// `out[i] = xielu(x[i])` for `i < n`. `x` and `out` may be the same buffer.
/// `n = 0` is a no-op (and the pointers may then be null).
///
/// # Safety
/// `x` and `out` are device pointers of `device` to at least `n` elements of `dtype`.
pub unsafe fn launch(
    device: &Device,
    dtype: Dtype,
    x: u64,
    out: u64,
    n: u64,
    params: XieluParams,
    stream: Stream,
) -> Result<()> {
    let kernel = kernel_for(device, KERNEL, dtype)?;
    for (name, v) in
        [("alpha_p", params.alpha_p), ("alpha_n", params.alpha_n), ("beta", params.beta), ("eps", params.eps)]
    {
        if !v.is_finite() {
            return Err(Error::InvalidArgument { argument: name, message: format!("{v} is not finite") });
        }
    }
    if n == 0 {
        return Ok(());
    }
    check_ptr("x", x, dtype.size())?;
    check_ptr("out", out, dtype.size())?;
    unsafe { device.launch(&kernel, dims(n, dtype, device.info().compute_units), &args(x, out, n, params), stream) }
}

/// The kernel's arguments, in the order of its signature (for [`launch`], and
/// for tests that launch `xielu_*` on a grid of their own).
pub fn args(x: u64, out: u64, n: u64, params: XieluParams) -> [ArgValue; 7] {
    [
        ArgValue::Ptr(x),
        ArgValue::Ptr(out),
        ArgValue::U64(n),
        ArgValue::F32(params.alpha_p),
        ArgValue::F32(params.alpha_n),
        ArgValue::F32(params.beta),
        ArgValue::F32(params.eps),
    ]
}

/// [`launch`] over byte buffers holding `n` elements of `dtype`.
pub fn run(
    device: &Device,
    dtype: Dtype,
    x: &DeviceBuffer<u8>,
    out: &mut DeviceBuffer<u8>,
    n: usize,
    params: XieluParams,
    stream: Stream,
) -> Result<()> {
    check_len("x", x, n, dtype)?;
    check_len("out", out, n, dtype)?;
    unsafe { launch(device, dtype, x.ptr(), out.ptr(), n as u64, params, stream) }
}
