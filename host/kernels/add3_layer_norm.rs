//! Launcher of `add3_layer_norm` (docs/contracts.md).

use kernels_device::geometry::add3_layer_norm::{
    MAX_D, MAX_ROWS, SHORT_KERNEL, SHORT_MAX_D, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE,
};

use kernels_device::entry::Add3LayerNorm;
pub use kernels_device::entry::Add3LayerNormArgs;

use super::{Capacity, CheckedArgs, Run, enqueue, kernel_for, symbol};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, LaunchDims, Stream, Typed};

/// The typed launch of `add3_layer_norm` ([`Run::run`] launches it): the
/// buffers of [`Add3Pointers`] as typed borrows (`bias` optional), and `rows`,
/// `d`, `eps`. An output that is exactly a row input (in place) needs the raw
/// form, [`launch`].
pub type Add3LayerNormLaunch<'a, T> = Add3LayerNorm<'a, T, Typed>;

typed_run!(Add3LayerNorm);

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
/// optional `bias [d]` (0 for none); outputs `x_new, h [rows, d]`. Either
/// output may be exactly one of `a`, `b`, `x` (in place); any other overlap
/// with an output is refused.
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

/// Checks a shape against the kernels' limits: `d` in 1..=`MAX_D`, `rows` at
/// most `MAX_ROWS` (the shape-aware predicate and the launch share it).
pub fn check_shape(rows: u32, d: u32) -> Result<()> {
    if d == 0 {
        return Err(Error::invalid("d", "is 0; a row must have at least one element"));
    }
    if d > MAX_D {
        return Err(Error::invalid(
            "d",
            format!("{d} is more than {MAX_D}, the longest row these kernels hold; longer rows need the unfused pair"),
        ));
    }
    if rows > MAX_ROWS {
        return Err(Error::invalid(
            "rows",
            format!("{rows} is more than one launch takes ({MAX_ROWS}); split the rows"),
        ));
    }
    Ok(())
}

/// Whether a launch of this shape for `dtype` can run on `device` (see [`available`]).
pub fn supports(device: &Device, dtype: Dtype, rows: u32, d: u32) -> bool {
    available(device, dtype) && check_shape(rows, d).is_ok()
}

/// Checks the scalars, then launches (nothing for `rows = 0`).
impl CheckedArgs for Add3LayerNormArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        // Both instances are looked up, as `available` does, whatever `d` is.
        let full = kernel_for(device, KERNEL, dtype)?;
        let short = kernel_for(device, SHORT_KERNEL, dtype)?;
        let (rows, d, eps) = (self.rows, self.d, self.eps);
        let kernel = if kernel_base(d) == SHORT_KERNEL { short } else { full };
        check_shape(rows, d)?;
        if eps.is_nan() {
            return Err(Error::invalid("eps", "is NaN; it must be a finite non-negative number"));
        }
        if !eps.is_finite() || eps < 0.0 {
            return Err(Error::invalid("eps", format!("{eps} is not a finite non-negative number")));
        }
        if rows == 0 {
            return Ok(());
        }
        unsafe { enqueue(device, &kernel, dims(rows), &self.values(), &self.extents(), capacity, stream) }
    }
}

/// The kernel's arguments (the raw form [`launch`] takes).
pub fn args(p: Add3Pointers, rows: u32, d: u32, eps: f32) -> Add3LayerNormArgs {
    let Add3Pointers { a, b, x, w, bias, x_new, h } = p;
    Add3LayerNormArgs { a, b, x, w, bias, x_new, h, rows, d, eps }
}

/// `x_new = a + b + x` (two roundings) and `h = LayerNorm(x_new; w, bias, eps)`
/// over the raw form ([`args`]), `dtype` the element type of every buffer.
/// `rows = 0` is a no-op.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the sizes of
/// [`Add3Pointers`].
pub unsafe fn launch(device: &Device, dtype: Dtype, args: Add3LayerNormArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// Typed buffers of one [`run`].
pub struct Add3Buffers<'a, T> {
    pub a: &'a DeviceBuffer<T>,
    pub b: &'a DeviceBuffer<T>,
    pub x: &'a DeviceBuffer<T>,
    pub w: &'a DeviceBuffer<T>,
    pub bias: Option<&'a DeviceBuffer<T>>,
    pub x_new: &'a mut DeviceBuffer<T>,
    pub h: &'a mut DeviceBuffer<T>,
}

/// [`Add3LayerNormLaunch`] of these buffers and sizes, run.
pub fn run<T: Element>(
    device: &Device,
    bufs: Add3Buffers<'_, T>,
    rows: u32,
    d: u32,
    eps: f32,
    stream: Stream,
) -> Result<()> {
    let Add3Buffers { a, b, x, w, bias, x_new, h } = bufs;
    Add3LayerNormLaunch { a, b, x, w, bias, x_new, h, rows, d, eps }.run(device, stream)
}
