//! Launcher of `add3_layer_norm` (spec/kernels.md section 2).

use kernels_device::geometry::add3_layer_norm::{
    MAX_D, MAX_ROWS, SHORT_KERNEL, SHORT_MAX_D, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE,
};

use super::{check_len, check_ptr, kernel_for, symbol};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::runtime::{ArgValue, Device, DeviceBuffer, LaunchDims, Stream};

/// Kernel name without the dtype suffix: the instance for any `d` up to
/// `MAX_D`. Rows of at most `SHORT_MAX_D` run [`SHORT_KERNEL`], the same code
/// for shorter rows, which needs fewer registers (same bits).
pub const KERNEL: &str = "add3_layer_norm";

/// The kernel a row length runs.
pub fn kernel_base(d: u32) -> &'static str {
    if d <= SHORT_MAX_D { SHORT_KERNEL } else { KERNEL }
}

/// Whether `add3_layer_norm` for `dtype` can run on `device`: both instances,
/// so that no row length can fail where this said yes.
pub fn available(device: &Device, dtype: Dtype) -> bool {
    device.is_available(&symbol(KERNEL, dtype)) && device.is_available(&symbol(SHORT_KERNEL, dtype))
}

/// The device pointers of one launch: inputs `a, b, x [rows, d]`, `w [d]`,
/// optional `bias [d]` (0 for none); outputs `x_new, h [rows, d]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Add3Pointers {
    pub a: u64,
    pub b: u64,
    pub x: u64,
    pub w: u64,
    pub bias: u64,
    pub x_new: u64,
    pub h: u64,
}

/// The launch geometry: one workgroup of 256 threads per row (fixed by the contract).
pub fn dims(rows: u32) -> LaunchDims {
    LaunchDims { grid: [rows, 1, 1], workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes: WORKGROUP_MEM_BYTES }
}

/// `x_new = a + b + x` (two roundings) and `h = LayerNorm(x_new; w, bias, eps)`.
/// `rows = 0` is a no-op.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the sizes above.
pub unsafe fn launch(
    device: &Device,
    dtype: Dtype,
    p: Add3Pointers,
    rows: u32,
    d: u32,
    eps: f32,
    stream: Stream,
) -> Result<()> {
    // Both instances are looked up, as `available` does, whatever `d` is.
    let full = kernel_for(device, KERNEL, dtype)?;
    let short = kernel_for(device, SHORT_KERNEL, dtype)?;
    let kernel = if kernel_base(d) == SHORT_KERNEL { short } else { full };
    if d == 0 || d > MAX_D {
        return Err(Error::invalid(
            "d",
            format!("{d} is outside 1..={MAX_D}; rows longer than {MAX_D} need the unfused fallback"),
        ));
    }
    if !eps.is_finite() || eps < 0.0 {
        return Err(Error::invalid("eps", format!("{eps} must be finite and non-negative")));
    }
    if rows > MAX_ROWS {
        return Err(Error::invalid(
            "rows",
            format!("{rows} is more than one launch takes ({MAX_ROWS}); split the rows"),
        ));
    }
    if rows == 0 {
        return Ok(());
    }
    let align = dtype.size();
    for (name, ptr) in [("a", p.a), ("b", p.b), ("x", p.x), ("w", p.w), ("x_new", p.x_new), ("h", p.h)] {
        check_ptr(name, ptr, align)?;
    }
    if p.bias != 0 {
        check_ptr("bias", p.bias, align)?;
    }
    let args = [
        ArgValue::Ptr(p.a),
        ArgValue::Ptr(p.b),
        ArgValue::Ptr(p.x),
        ArgValue::Ptr(p.w),
        ArgValue::Ptr(p.bias),
        ArgValue::Ptr(p.x_new),
        ArgValue::Ptr(p.h),
        ArgValue::U32(rows),
        ArgValue::U32(d),
        ArgValue::F32(eps),
    ];
    unsafe { device.launch(&kernel, dims(rows), &args, stream) }
}

/// Byte buffers of one [`run`].
pub struct Add3Buffers<'a> {
    pub a: &'a DeviceBuffer<u8>,
    pub b: &'a DeviceBuffer<u8>,
    pub x: &'a DeviceBuffer<u8>,
    pub w: &'a DeviceBuffer<u8>,
    pub bias: Option<&'a DeviceBuffer<u8>>,
    pub x_new: &'a mut DeviceBuffer<u8>,
    pub h: &'a mut DeviceBuffer<u8>,
}

/// [`launch`] over byte buffers, checking their sizes.
pub fn run(
    device: &Device,
    dtype: Dtype,
    bufs: Add3Buffers<'_>,
    rows: u32,
    d: u32,
    eps: f32,
    stream: Stream,
) -> Result<()> {
    let n = rows as usize * d as usize;
    check_len("a", bufs.a, n, dtype)?;
    check_len("b", bufs.b, n, dtype)?;
    check_len("x", bufs.x, n, dtype)?;
    check_len("x_new", bufs.x_new, n, dtype)?;
    check_len("h", bufs.h, n, dtype)?;
    check_len("w", bufs.w, d as usize, dtype)?;
    if let Some(bias) = bufs.bias {
        check_len("bias", bias, d as usize, dtype)?;
    }
    let p = Add3Pointers {
        a: bufs.a.ptr(),
        b: bufs.b.ptr(),
        x: bufs.x.ptr(),
        w: bufs.w.ptr(),
        bias: bufs.bias.map_or(0, |b| b.ptr()),
        x_new: bufs.x_new.ptr(),
        h: bufs.h.ptr(),
    };
    unsafe { launch(device, dtype, p, rows, d, eps, stream) }
}
