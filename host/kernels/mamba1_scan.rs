//! Launcher of `mamba1_scan` (docs/contracts.md): the Mamba1 selective
//! scan, each (batch, channel) over adjacent lanes, each lane holding some of
//! its state columns in registers, as the target's [`Mapping`] says (AMD and
//! the emulator: two lanes of eight columns, four for N > 16; NVIDIA: four
//! lanes of four, eight for N > 16).
//!
//! Every length runs the same sequential schedule (the time loop unrolled by 8
//! steps, `L % 8` steps after it; see the device crate's `mamba1_scan` module for
//! the operation order): there is no second schedule to choose, so a launch's
//! result depends only on its inputs, and a scan over `L1 + L2` steps equals, bit
//! for bit, a scan over `L1` steps followed by one over `L2` steps from its state.

use kernels_device::geometry::mamba1_scan::{MAX_BATCH, MAX_N, Mapping};

use kernels_device::entry::Mamba1Scan;
pub use kernels_device::entry::Mamba1ScanArgs;

use super::{Capacity, CheckedArgs, Run, enqueue, kernel_for, symbol};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::runtime::{BackendKind, Device, DeviceBuffer, LaunchDims, Spans, Stream, Typed};

/// The typed launch of `mamba1_scan` ([`Run::run`] launches it): the buffers
/// of [`ScanPointers`] as typed borrows, and `batch`, `len`, `dm`, `n`. The
/// in-place update of the state needs the raw form ([`run`] with no
/// `state_in` takes it).
pub type Mamba1ScanLaunch<'a, T> = Mamba1Scan<'a, T, Typed>;

typed_run!(Mamba1Scan);

/// Kernel name without the dtype suffix.
pub const KERNEL: &str = "mamba1_scan";

/// The mapping of the kernels a backend runs: the PTX's on CUDA, the AMD code
/// objects' on HIP and on the emulator (which runs the same source built for
/// the host).
pub fn mapping(backend: BackendKind) -> Mapping {
    match backend {
        BackendKind::Cuda => Mapping::NVIDIA,
        BackendKind::Hip => Mapping::AMD,
        BackendKind::Cpu => Mapping::EMULATOR,
    }
}

/// Whether `mamba1_scan` for `dtype` can run on `device`.
pub fn available(device: &Device, dtype: Dtype) -> bool {
    device.is_available(&symbol(KERNEL, dtype))
}

/// Whether a launch of this shape for `dtype` can run on `device`: the kernel
/// is available and [`sizes`] accepts the shape, as the launch checks it.
pub fn supports(device: &Device, dtype: Dtype, batch: u32, len: u32, dm: u32, n: u32) -> bool {
    available(device, dtype) && sizes(dtype, batch, len, dm, n).is_ok()
}

/// The device pointers of one launch. `T` is the launch's dtype:
///
/// | pointer | shape | dtype |
/// |---|---|---|
/// | `x`, `dt` | `[batch, len, dm]` | T |
/// | `bm`, `cm` | `[batch, len, n]` | T |
/// | `a` | `[dm, n]` | f32 |
/// | `dskip` | `[dm]` | T |
/// | `state_in` | `[batch, dm, n]` | f32 (zeros for a fresh sequence) |
/// | `y` (out) | `[batch, len, dm]` | T |
/// | `state_out` (out) | `[batch, dm, n]` | f32 |
///
/// `state_out` may be exactly `state_in` (an in-place update): each state
/// element is read, once, by the lane that owns it before that lane writes
/// it, and no other lane touches it. Any other overlap with an output is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanPointers {
    pub x: u64,
    pub dt: u64,
    pub bm: u64,
    pub cm: u64,
    pub a: u64,
    pub dskip: u64,
    pub state_in: u64,
    pub y: u64,
    pub state_out: u64,
}

/// Element counts of the buffers of one shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanSizes {
    /// `x`, `dt`, `y`: `batch * len * dm`.
    pub seq: usize,
    /// `bm`, `cm`: `batch * len * n`.
    pub bc: usize,
    /// `a`: `dm * n`.
    pub a: usize,
    /// `dskip`: `dm`.
    pub dskip: usize,
    /// `state_in`, `state_out`: `batch * dm * n`.
    pub state: usize,
}

/// `dims[0] * dims[1] * ...` elements of `elem_bytes` each, refused (naming
/// `argument`) unless the byte size fits in an `isize` (what a pointer offset
/// may span, on the host and on the device).
fn elements(argument: &'static str, what: &str, dims: &[u32], elem_bytes: usize) -> Result<usize> {
    let overflow = || {
        Error::invalid(argument, format!("{what} = {dims:?} elements of {elem_bytes} bytes overflow the address space"))
    };
    let mut elems = 1usize;
    for &d in dims {
        elems = elems.checked_mul(d as usize).ok_or_else(overflow)?;
    }
    let bytes = elems.checked_mul(elem_bytes).ok_or_else(overflow)?;
    if bytes > isize::MAX as usize {
        return Err(overflow());
    }
    Ok(elems)
}

/// Checks a shape and returns its buffer sizes. Refused: `n` outside 1..=32,
/// `len = 0`, `batch` outside 1..=65535 (grid y), `dm = 0`, and any buffer whose
/// size in bytes overflows.
pub fn sizes(dtype: Dtype, batch: u32, len: u32, dm: u32, n: u32) -> Result<ScanSizes> {
    if n == 0 || n > MAX_N {
        return Err(Error::invalid(
            "n",
            format!(
                "{n} is outside 1..={MAX_N}: the kernels hold at most {MAX_N} state columns per channel in registers; a larger state needs another kernel"
            ),
        ));
    }
    if len == 0 {
        return Err(Error::invalid("len", "0: the sequence length L must be at least 1"));
    }
    if batch == 0 || batch > MAX_BATCH {
        return Err(Error::invalid("batch", format!("{batch} is outside 1..={MAX_BATCH} (the batch is grid y)")));
    }
    if dm == 0 {
        return Err(Error::invalid("dm", "0: the channel count Dm must be at least 1"));
    }
    let t = dtype.size();
    Ok(ScanSizes {
        seq: elements("x", "[batch, len, dm]", &[batch, len, dm], t)?,
        bc: elements("bm", "[batch, len, n]", &[batch, len, n], t)?,
        a: elements("a", "[dm, n]", &[dm, n], 4)?,
        dskip: dm as usize,
        state: elements("state_in", "[batch, dm, n]", &[batch, dm, n], 4)?,
    })
}

/// The launch geometry: workgroups of `WORKGROUP_SIZE` threads carrying
/// `mapping.channels_per_workgroup(n)` channels (AMD: 32 for N <= 16, two
/// lanes each; 16 for N > 16, four lanes each), grid `[ceil(dm / channels),
/// batch, 1]`, and `WORKGROUP_MEM_BYTES` of workgroup memory (each wave stages
/// B and C there).
pub fn dims(mapping: Mapping, batch: u32, dm: u32, n: u32) -> LaunchDims {
    LaunchDims {
        grid: [dm.div_ceil(mapping.channels_per_workgroup(n)), batch, 1],
        workgroup_size: mapping.workgroup_size(),
        workgroup_mem_bytes: mapping.workgroup_mem_bytes(),
    }
}

/// The kernel's arguments (the raw form [`launch`] takes).
pub fn args(p: ScanPointers, shape: ScanShape) -> Mamba1ScanArgs {
    let ScanPointers { x, dt, bm, cm, a, dskip, state_in, y, state_out } = p;
    let ScanShape { batch, len, dm, n } = shape;
    Mamba1ScanArgs { x, dt, bm, cm, a, dskip, state_in, y, state_out, batch, len, dm, n }
}

/// Checks the shape, then launches.
impl CheckedArgs for Mamba1ScanArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let kernel = kernel_for(device, KERNEL, dtype)?;
        let Mamba1ScanArgs { batch, len, dm, n, .. } = self;
        sizes(dtype, batch, len, dm, n)?;
        let dims = dims(mapping(device.backend()), batch, dm, n);
        unsafe { enqueue(device, &kernel, dims, &self.values(), &self.extents(), capacity, stream) }
    }
}

/// The shape of one scan: `batch` sequences of `len` steps over `dm` channels
/// with `n` state columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanShape {
    pub batch: u32,
    pub len: u32,
    pub dm: u32,
    pub n: u32,
}

/// The selective scan over `len` steps of `batch` sequences of `dm` channels
/// with `n` state columns, over the raw form ([`args`]; `dtype` is `T` of
/// [`ScanPointers`]): writes `y` and the final state. Every argument is
/// checked (see [`sizes`]; pointers as the declaration says) before anything
/// is launched.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of at least the
/// sizes of [`ScanPointers`].
pub unsafe fn launch(device: &Device, dtype: Dtype, args: Mamba1ScanArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// Typed buffers of one [`run`]: `a`, `state_in` and `state_out` hold f32, the
/// others `T`.
pub struct ScanBuffers<'a, T> {
    pub x: &'a DeviceBuffer<T>,
    pub dt: &'a DeviceBuffer<T>,
    pub bm: &'a DeviceBuffer<T>,
    pub cm: &'a DeviceBuffer<T>,
    pub a: &'a DeviceBuffer<f32>,
    pub dskip: &'a DeviceBuffer<T>,
    /// The state before the scan; `None`: `state_out` holds it and is updated in place.
    pub state_in: Option<&'a DeviceBuffer<f32>>,
    pub y: &'a mut DeviceBuffer<T>,
    pub state_out: &'a mut DeviceBuffer<f32>,
}

/// [`Mamba1ScanLaunch`] of these buffers, run, checking the shape and then
/// every buffer's size. Without `state_in` the state is updated in place in
/// `state_out`: the raw form with the buffers' sizes, since the typed form
/// cannot borrow one buffer as both.
pub fn run<T: Element>(device: &Device, bufs: ScanBuffers<'_, T>, shape: ScanShape, stream: Stream) -> Result<()> {
    let ScanBuffers { x, dt, bm, cm, a, dskip, state_in, y, state_out } = bufs;
    let ScanShape { batch, len, dm, n } = shape;
    if let Some(state_in) = state_in {
        return Mamba1ScanLaunch { x, dt, bm, cm, a, dskip, state_in, y, state_out, batch, len, dm, n }
            .run(device, stream);
    }
    let state = state_out.span();
    let (args, capacity) = Mamba1Scan::<T, Spans> {
        x: x.span(),
        dt: dt.span(),
        bm: bm.span(),
        cm: cm.span(),
        a: a.span(),
        dskip: dskip.span(),
        state_in: state,
        y: y.span(),
        state_out: state,
        batch,
        len,
        dm,
        n,
    }
    .raw();
    args.enqueue_checked(device, T::DTYPE, &capacity, stream)
}
