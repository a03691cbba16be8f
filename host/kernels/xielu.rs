//! Launcher of `xielu` (docs/contracts.md).

use kernels_device::geometry::xielu::{
    BF16_WORKGROUP_MEM_BYTES, ELEMS_PER_THREAD, F16_WORKGROUP_MEM_BYTES, MAX_N, MAX_WORKGROUPS, TABLE_WORKGROUP_SIZE,
    TABLE_WORKGROUPS_PER_CU, WORKGROUP_SIZE, uses_table_grid,
};

use kernels_device::entry::Xielu;
pub use kernels_device::entry::XieluArgs;

use super::{Capacity, CheckedArgs, Run, enqueue, kernel_for, symbol};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, LaunchDims, Spans, Stream, Typed};

/// The typed launch of `xielu`: `x` read, `out` written, `n` elements of `T`,
/// and the four scalars ([`Run::run`] launches it).
pub type XieluLaunch<'a, T> = Xielu<'a, T, Typed>;

typed_run!(Xielu);

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
/// `compute_units`: one chunk per thread, except for bf16 and f16 when `n` is
/// large enough that the kernel's table pays off (few workgroups, each looping
/// over many chunks, with the table's workgroup memory; the kernel checks the
/// same condition, `uses_table_grid`, on the grid it is given). bf16 launches
/// get the table's 16 KiB on either grid; f16's 60 KiB only where it is used.
pub fn dims(n: u64, dtype: Dtype, compute_units: u32) -> LaunchDims {
    let per_group = WORKGROUP_SIZE as u64 * ELEMS_PER_THREAD as u64;
    let groups = n.div_ceil(per_group).min(MAX_WORKGROUPS as u64) as u32;
    let table_mem = match dtype {
        Dtype::F32 => {
            return LaunchDims { grid: [groups, 1, 1], workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes: 0 };
        }
        Dtype::Bf16 => BF16_WORKGROUP_MEM_BYTES,
        Dtype::F16 => F16_WORKGROUP_MEM_BYTES,
    };
    let table_groups = compute_units.max(1).saturating_mul(TABLE_WORKGROUPS_PER_CU);
    if uses_table_grid(n, table_groups) {
        LaunchDims { grid: [table_groups, 1, 1], workgroup_size: TABLE_WORKGROUP_SIZE, workgroup_mem_bytes: table_mem }
    } else {
        let mem = if dtype == Dtype::Bf16 || uses_table_grid(n, groups) { table_mem } else { 0 };
        LaunchDims { grid: [groups, 1, 1], workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes: mem }
    }
}

/// Checks the scalars and `n <= MAX_N`, then launches (nothing for `n = 0`).
impl CheckedArgs for XieluArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let kernel = kernel_for(device, KERNEL, dtype)?;
        for (name, v) in [("alpha_p", self.alpha_p), ("alpha_n", self.alpha_n), ("beta", self.beta), ("eps", self.eps)]
        {
            if !v.is_finite() {
                return Err(Error::invalid(name, format!("{v} is not a finite number")));
            }
        }
        if self.n > MAX_N {
            return Err(Error::invalid("n", format!("{} is above the limit of {MAX_N} (2^60) elements", self.n)));
        }
        if self.n == 0 {
            return Ok(());
        }
        let dims = dims(self.n, dtype, device.info().compute_units);
        unsafe { enqueue(device, &kernel, dims, &self.values(), &self.extents(), capacity, stream) }
    }
}

/// `out[i] = xielu(x[i])` for `i < n` over the raw form: `dtype` is the
/// element type of `x` and `out`. `out` may be exactly `x` (in place); any
/// other overlap is refused. `n = 0` is a no-op (and the pointers may then be
/// null).
///
/// # Safety
/// `x` and `out` are device pointers of `device` to at least `n` elements of `dtype`.
pub unsafe fn launch(device: &Device, dtype: Dtype, args: XieluArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// The kernel's arguments by name (for [`launch`], and for tests that launch
/// `xielu_*` on a grid of their own).
pub fn args(x: u64, out: u64, n: u64, params: XieluParams) -> XieluArgs {
    let XieluParams { alpha_p, alpha_n, beta, eps } = params;
    XieluArgs { x, out, n, alpha_p, alpha_n, beta, eps }
}

/// [`XieluLaunch`] of `n` elements of typed buffers, run.
pub fn run<T: Element>(
    device: &Device,
    x: &DeviceBuffer<T>,
    out: &mut DeviceBuffer<T>,
    n: usize,
    params: XieluParams,
    stream: Stream,
) -> Result<()> {
    let XieluParams { alpha_p, alpha_n, beta, eps } = params;
    XieluLaunch { x, out, n: n as u64, alpha_p, alpha_n, beta, eps }.run(device, stream)
}

/// [`run`] in place: `buf[i] = xielu(buf[i])` for `i < n`. The typed form
/// cannot borrow `buf` as both `x` and `out`, so this is the raw form with
/// the buffer's size, the in-place launch the declaration allows.
pub fn run_in_place<T: Element>(
    device: &Device,
    buf: &mut DeviceBuffer<T>,
    n: usize,
    params: XieluParams,
    stream: Stream,
) -> Result<()> {
    let XieluParams { alpha_p, alpha_n, beta, eps } = params;
    let both = buf.span();
    let (args, capacity) = Xielu::<T, Spans> { x: both, out: both, n: n as u64, alpha_p, alpha_n, beta, eps }.raw();
    args.enqueue_checked(device, T::DTYPE, &capacity, stream)
}
