//! Launchers of `moe_fc1_relu2`, `moe_down` and `moe_combine` (docs/contracts.md): the squared-ReLU routed experts of Nemotron-H over MLX affine
//! quantized weights, for one token.
//!
//! Shapes (`T` is the activation dtype; `E = n_experts`, `K = k`):
//!
//! | buffer | type | shape |
//! |---|---|---|
//! | `x` | T | `[Din]` |
//! | `idx` | u32 | `[K]` expert ids |
//! | `scores` | f32 | `[K]` router weights |
//! | `w1` | u32 | `[E, Dff, Din*bits/32]` |
//! | `s1`, `b1` | T | `[E, Dff, Din/gs]` |
//! | `w2` | u32 | `[E, Din, Dff*bits/32]` |
//! | `s2`, `b2` | T | `[E, Din, Dff/gs]` |
//! | `act` | f32 | `[K, Dff]` |
//! | `part` | f32 | `[K, Din]` |
//! | `out` | T | `[Din]` |
//! | `status` | u32 | one word, or null |
//!
//! **Status.** An expert id `idx[k] >= E` is never used to address memory: the
//! kernels write NaN to that slot's rows of `act` and `part` (so the combined
//! output is NaN) and, when `status` is not null, store `1 + k` for the *first*
//! such slot k (deterministic, no atomics). Nothing is stored when every id is in
//! range, so the caller zeroes `status` before the launch and reads it after.
//! Callers that hold `idx` on the host can refuse bad ids up front with
//! [`check_expert_ids`].
//!
//! **Scratch.** [`routed_forward`] keeps `act` and `part` (f32) in one caller
//! buffer of [`scratch_bytes`] bytes: `act` at offset 0, `part` at
//! [`part_offset`] (the end of `act` rounded up to 256 bytes). Nemotron, K = 6:
//! 44,544 + 64,512 = 109,056 bytes.
//!
//! **Speed.** These kernels are bound by instruction issue and latency (one
//! row per wave, about four instructions per weight), not yet by bandwidth;
//! the measurements that show it are in `docs/performance.md`.

use kernels_device::args::BufferExtent;
use kernels_device::geometry::moe::{
    BITS, COMBINE_WORKGROUP_SIZE, GROUP_SIZES, MAX_COLS, MAX_K, SIX_BIT_UNIT_VALUES, SIX_BITS, WORKGROUP_SIZE,
    values_per_word, workgroup_mem_bytes, workgroups,
};

pub use batch::{
    COMBINE_BATCH_KERNEL, DOWN_BATCH_KERNEL, DownBatchBuffers, GATEUP_BATCH_KERNEL, MAX_BATCH_SLOTS, MAX_BATCH_TOKENS,
    MoeCombineBatchArgs, MoeCombineBatchLaunch, MoeDownBatchArgs, MoeDownBatchLaunch, MoeGateUpBatchArgs,
    MoeGateUpBatchLaunch, batch_available, check_batch, combine_batch, combine_batch_dims, down_batch, down_batch_dims,
    gateup_batch, gateup_batch_dims, run_combine_batch, run_down_batch, run_gateup_batch,
};
pub use gated::{
    Activation, GatedBuffers, GatedPointers, MoeGateUpLaunch, down_available, gateup, gateup_available, run_gateup,
};
use kernels_device::entry::{MoeCombine, MoeDown, MoeFc1Relu2};
pub use kernels_device::entry::{MoeCombineArgs, MoeDownArgs, MoeFc1Relu2Args, MoeGateUpArgs};
pub use shape::MoeShape;

mod batch;
pub mod block;
mod gated;
pub mod router;
mod shape;

use super::{Capacity, CheckedArgs, Run, check_buffers, enqueue, kernel_for, overlapping, symbol};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer, Kernel, LaunchDims, Spans, Stream, Typed};

/// The typed launch of `moe_fc1_relu2` ([`Run::run`] launches it).
pub type MoeFc1Relu2Launch<'a, T> = MoeFc1Relu2<'a, T, Typed>;
/// The typed launch of `moe_down` (4, 6 or 8 bits).
pub type MoeDownLaunch<'a, T> = MoeDown<'a, T, Typed>;
/// The typed launch of `moe_combine`.
pub type MoeCombineLaunch<'a, T> = MoeCombine<'a, T, Typed>;

typed_run!(MoeFc1Relu2, MoeDown, MoeCombine);

/// Kernel names without the dtype suffix.
pub const FC1_KERNEL: &str = "moe_fc1_relu2";
pub const DOWN_KERNEL: &str = "moe_down";
pub const COMBINE_KERNEL: &str = "moe_combine";
/// `moe_down` for 6-bit codes.
pub const DOWN6_KERNEL: &str = "moe_down6";
/// The gate and up projections with SwiGLU or GeGLU ([`gated`]).
pub const GATEUP_KERNEL: &str = "moe_gateup";

/// Whether the whole routed-expert forward (all three kernels) for `dtype` can
/// run on `device`.
pub fn available(device: &Device, dtype: Dtype) -> bool {
    [FC1_KERNEL, DOWN_KERNEL, COMBINE_KERNEL].iter().all(|k| device.is_available(&symbol(k, dtype)))
}

/// Whether the routed-expert kernels of this shape for `dtype` can run on
/// `device`: all three are available and [`MoeShape::validate`] accepts it.
pub fn supports(device: &Device, dtype: Dtype, shape: &MoeShape) -> bool {
    available(device, dtype) && shape.validate().is_ok()
}

impl MoeShape {
    /// Nemotron-3-Nano-30B-A3B: Din 2688, Dff 1856, E 128, K 6, 4 bits, gs 64.
    pub const NEMOTRON: MoeShape = MoeShape { n_experts: 128, k: 6, din: 2688, dff: 1856, bits: 4, group_size: 64 };

    /// Checks every limit; the error names the field and the limit. `bits`
    /// must be 4 or 8 (the width of fc1, gate/up, and down at those widths).
    pub fn validate(&self) -> Result<()> {
        if !BITS.contains(&self.bits) {
            return Err(Error::invalid("bits", format!("{} is not supported; use 4 or 8", self.bits)));
        }
        self.validate_format()
    }

    /// [`Self::validate`] for `moe_down`, which also takes 6-bit codes
    /// (MLX's four values in three bytes; the `moe_down6` kernels).
    pub fn validate_down(&self) -> Result<()> {
        if !BITS.contains(&self.bits) && self.bits != SIX_BITS {
            return Err(Error::invalid("bits", format!("{} is not supported by moe_down; use 4, 6 or 8", self.bits)));
        }
        self.validate_format()
    }

    /// The limits other than the bit width.
    fn validate_format(&self) -> Result<()> {
        if !GROUP_SIZES.contains(&self.group_size) {
            return Err(Error::invalid(
                "group_size",
                format!("{} is not supported; use 32, 64 or 128", self.group_size),
            ));
        }
        if self.n_experts == 0 {
            return Err(Error::invalid("n_experts", "is 0; there must be at least one expert"));
        }
        if self.k == 0 || self.k > MAX_K {
            return Err(Error::invalid("k", format!("{} is outside 1..={MAX_K}", self.k)));
        }
        // Whole u32 words per row: 32 / bits values a word at 4 and 8 bits, 16
        // values in three words at 6 (every group size is a multiple of both).
        let vpw = if self.bits == SIX_BITS { SIX_BIT_UNIT_VALUES } else { values_per_word(self.bits) };
        for (name, v) in [("din", self.din), ("dff", self.dff)] {
            if v == 0 || v > MAX_COLS {
                return Err(Error::invalid(
                    name,
                    format!("{v} is outside 1..={MAX_COLS} (the staged row must fit in 64 KiB of workgroup memory)"),
                ));
            }
            if v % self.group_size != 0 {
                return Err(Error::invalid(
                    name,
                    format!("{v} is not a multiple of the group size {}", self.group_size),
                ));
            }
            if v % vpw != 0 {
                return Err(Error::invalid(
                    name,
                    format!(
                        "{v} is not a multiple of the {vpw} values that fill whole u32 words at {} bits",
                        self.bits
                    ),
                ));
            }
        }
        // Every element count, and its size in bytes, must fit in 64 bits (the
        // kernels address with 64-bit offsets) and in this host's usize.
        for (name, n) in [("w1", self.matrix_words(self.dff, self.din)), ("w2", self.matrix_words(self.din, self.dff))]
        {
            n.and_then(|n| n.checked_mul(4))
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| Error::invalid(name, "size overflows"))?;
        }
        Ok(())
    }

    fn of_fc1(a: &MoeFc1Relu2Args) -> MoeShape {
        MoeShape { n_experts: a.n_experts, k: a.k, din: a.din, dff: a.dff, bits: a.bits, group_size: a.group_size }
    }

    fn of_gateup(a: &MoeGateUpArgs) -> MoeShape {
        MoeShape { n_experts: a.n_experts, k: a.k, din: a.din, dff: a.dff, bits: a.bits, group_size: a.group_size }
    }

    fn of_down(a: &MoeDownArgs) -> MoeShape {
        MoeShape { n_experts: a.n_experts, k: a.k, din: a.din, dff: a.dff, bits: a.bits, group_size: a.group_size }
    }

    /// u32 words of a stack `[E, rows, cols*bits/32]`, if it does not overflow.
    fn matrix_words(&self, rows: u32, cols: u32) -> Option<u64> {
        (self.n_experts as u64).checked_mul(rows as u64)?.checked_mul(cols as u64 * self.bits as u64 / 32)
    }

    /// u32 words of `w1` `[E, Dff, Din*bits/32]`; an error naming `w1` when
    /// the count does not fit in usize (never for a shape [`Self::validate`] accepts).
    pub fn w1_words(&self) -> Result<usize> {
        self.stack_words("w1", self.dff, self.din)
    }

    /// Elements of `s1` and of `b1` `[E, Dff, Din/gs]` (an error as for [`Self::w1_words`]).
    pub fn w1_groups(&self) -> Result<usize> {
        self.stack_groups("s1", self.dff, self.din)
    }

    /// u32 words of `w2` `[E, Din, Dff*bits/32]` (an error as for [`Self::w1_words`]).
    pub fn w2_words(&self) -> Result<usize> {
        self.stack_words("w2", self.din, self.dff)
    }

    /// Elements of `s2` and of `b2` `[E, Din, Dff/gs]` (an error as for [`Self::w1_words`]).
    pub fn w2_groups(&self) -> Result<usize> {
        self.stack_groups("s2", self.din, self.dff)
    }

    /// u32 words of a stack `[E, rows, cols*bits/32]`, as a usize (an error naming `name`).
    fn stack_words(&self, name: &'static str, rows: u32, cols: u32) -> Result<usize> {
        self.count(name, [self.n_experts as u64, rows as u64, cols as u64 * self.bits as u64 / 32])
    }

    /// Scales (or biases) of a stack `[E, rows, cols/gs]`, as a usize (an error naming `name`).
    fn stack_groups(&self, name: &'static str, rows: u32, cols: u32) -> Result<usize> {
        self.count(name, [self.n_experts as u64, rows as u64, cols.checked_div(self.group_size).unwrap_or(0) as u64])
    }

    /// The product of `dims`, or an error naming `name` when it overflows usize.
    fn count(&self, name: &'static str, dims: [u64; 3]) -> Result<usize> {
        dims.iter()
            .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
            .ok_or_else(|| Error::invalid(name, format!("{dims:?} elements overflow usize")))
    }
}

/// Device pointers of one quantized expert stack: packed words, scales, biases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizedPointers {
    pub w: u64,
    pub scales: u64,
    pub biases: u64,
}

/// The launch geometry of `moe_fc1_relu2`: one wave per row of Dff, grid z = K.
pub fn fc1_dims(shape: &MoeShape) -> LaunchDims {
    LaunchDims {
        grid: [workgroups(shape.dff), 1, shape.k],
        workgroup_size: WORKGROUP_SIZE,
        workgroup_mem_bytes: workgroup_mem_bytes(shape.din, shape.bits),
    }
}

/// The launch geometry of `moe_down`: one wave per row of Din, grid z = K.
/// 6-bit rows are staged in the 8-bit layout (chunks of 16 values).
pub fn down_dims(shape: &MoeShape) -> LaunchDims {
    let staged_bits = if shape.bits == SIX_BITS { 8 } else { shape.bits };
    LaunchDims {
        grid: [workgroups(shape.din), 1, shape.k],
        workgroup_size: WORKGROUP_SIZE,
        workgroup_mem_bytes: workgroup_mem_bytes(shape.dff, staged_bits),
    }
}

/// The `moe_down` kernel for a bit width: `moe_down6` for 6-bit codes.
pub fn down_kernel(bits: u32) -> &'static str {
    if bits == SIX_BITS { DOWN6_KERNEL } else { DOWN_KERNEL }
}

/// The launch geometry of `moe_combine`: one thread per element of `out`.
pub fn combine_dims(din: u32) -> LaunchDims {
    LaunchDims {
        grid: [din.div_ceil(COMBINE_WORKGROUP_SIZE), 1, 1],
        workgroup_size: COMBINE_WORKGROUP_SIZE,
        workgroup_mem_bytes: 0,
    }
}

impl MoeShape {
    /// The arguments of `moe_fc1_relu2` of this shape (the raw form [`fc1_relu2`] takes).
    pub fn fc1_args(&self, x: u64, idx: u64, w1: QuantizedPointers, act: u64, status: u64) -> MoeFc1Relu2Args {
        let MoeShape { n_experts, k, din, dff, bits, group_size } = *self;
        let QuantizedPointers { w: w1, scales: s1, biases: b1 } = w1;
        MoeFc1Relu2Args { x, idx, w1, s1, b1, act, n_experts, k, din, dff, bits, group_size, status }
    }

    /// The arguments of `moe_down` of this shape (the raw form [`down`] takes).
    pub fn down_args(
        &self,
        idx: u64,
        w2: QuantizedPointers,
        act: u64,
        scores: u64,
        part: u64,
        status: u64,
    ) -> MoeDownArgs {
        let MoeShape { n_experts, k, din, dff, bits, group_size } = *self;
        let QuantizedPointers { w: w2, scales: s2, biases: b2 } = w2;
        MoeDownArgs { idx, w2, s2, b2, act, scores, part, n_experts, k, din, dff, bits, group_size, status }
    }
}

fn check_combine_shape(k: u32, din: u32) -> Result<()> {
    if k == 0 || k > MAX_K {
        return Err(Error::invalid("k", format!("{k} is outside 1..={MAX_K}")));
    }
    if din == 0 {
        return Err(Error::invalid("din", "is 0; the hidden size must be at least 1"));
    }
    Ok(())
}

/// The checked enqueue of fc1, gate/up and down: the kernel looked up, then the shape validated.
macro_rules! checked_gemv {
    ($($args:ty => $base:expr, $shape_of:ident, $validate:ident, $dims:ident;)+) => {$(
        impl CheckedArgs for $args {
            fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
                let shape = MoeShape::$shape_of(&self);
                let kernel = kernel_for(device, $base(&shape), dtype)?;
                shape.$validate()?;
                unsafe { enqueue(device, &kernel, $dims(&shape), &self.values(), &self.extents(), capacity, stream) }
            }
        }
    )+};
}

checked_gemv! {
    MoeFc1Relu2Args => |_: &MoeShape| FC1_KERNEL, of_fc1, validate, fc1_dims;
    MoeDownArgs => |shape: &MoeShape| down_kernel(shape.bits), of_down, validate_down, down_dims;
    MoeGateUpArgs => |_: &MoeShape| GATEUP_KERNEL, of_gateup, validate, fc1_dims;
}

impl CheckedArgs for MoeCombineArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let kernel = kernel_for(device, COMBINE_KERNEL, dtype)?;
        check_combine_shape(self.k, self.din)?;
        unsafe { enqueue(device, &kernel, combine_dims(self.din), &self.values(), &self.extents(), capacity, stream) }
    }
}

/// `act[k, f] = relu(sum_i x[i] * w1[idx[k], f, i])^2` (f32) for every slot k,
/// over the raw form ([`MoeShape::fc1_args`]); `dtype` is `T` of the module
/// documentation.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the shapes in the
/// module documentation; `status` may be 0 (null).
pub unsafe fn fc1_relu2(device: &Device, dtype: Dtype, args: MoeFc1Relu2Args, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// `part[k, h] = scores[k] * sum_f act[k, f] * w2[idx[k], h, f]` (f32) for every slot k,
/// over the raw form ([`MoeShape::down_args`]); `bits` 4, 6 or 8 (6-bit codes
/// go to `moe_down6`).
///
/// # Safety
/// As for [`fc1_relu2`].
pub unsafe fn down(device: &Device, dtype: Dtype, args: MoeDownArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// `out[h] = T(sum_k part[k, h])`: the sum in f32 over k ascending, one rounding.
///
/// # Safety
/// `part` holds `[k, din]` f32, `out` `[din]` elements of `dtype`, on `device`.
pub unsafe fn combine(device: &Device, dtype: Dtype, args: MoeCombineArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// Bytes of the f32 scratch of [`routed_forward`]: `act [K, Dff]` at offset 0,
/// then `part [K, Din]` at [`part_offset`]. A size that does not fit in 64
/// bits and in this host's `usize` is an error naming `k`, never a wrapped
/// number.
pub fn scratch_bytes(k: u32, din: u32, dff: u32) -> Result<usize> {
    let part = part_offset(k, dff)? as u64;
    (k as u64)
        .checked_mul(din as u64)
        .and_then(|e| e.checked_mul(4))
        .and_then(|b| b.checked_add(part))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| scratch_overflow(k, din, dff))
}

/// Byte offset of `part` in the scratch: the end of `act`, rounded up to 256
/// bytes; an error when it does not fit (as for [`scratch_bytes`]).
pub fn part_offset(k: u32, dff: u32) -> Result<usize> {
    // k * dff * 4 < 2^66 in u128 arithmetic; the rounding adds at most 255.
    let bytes = (k as u128 * dff as u128 * 4).next_multiple_of(256);
    u64::try_from(bytes)
        .ok()
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| Error::invalid("k", format!("act [k = {k}, dff = {dff}] of f32 overflows 64 bits")))
}

fn scratch_overflow(k: u32, din: u32, dff: u32) -> Error {
    Error::invalid(
        "k",
        format!(
            "the scratch of k = {k}, din = {din}, dff = {dff} (act [K, Dff] and part [K, Din] in f32) overflows 64 bits"
        ),
    )
}

/// Device pointers of one [`routed_forward`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutedPointers {
    pub x: u64,
    pub idx: u64,
    pub scores: u64,
    pub w1: QuantizedPointers,
    pub w2: QuantizedPointers,
    /// `[Din]` of `T`.
    pub out: u64,
    /// f32 scratch of `scratch_len` bytes, at least [`scratch_bytes`].
    pub scratch: u64,
    pub scratch_len: usize,
    /// One u32 or 0 (see the module documentation).
    pub status: u64,
}

/// The bytes each buffer of a [`RoutedPointers`] holds, for the safe wrapper;
/// [`RoutedHeld::UNKNOWN`] for the raw form.
#[derive(Clone, Copy)]
struct RoutedHeld {
    x: usize,
    idx: usize,
    scores: usize,
    w1: [usize; 3],
    w2: [usize; 3],
    out: usize,
    status: usize,
}

impl RoutedHeld {
    /// Sizes not known (the raw form): no buffer is too small.
    const UNKNOWN: RoutedHeld = RoutedHeld {
        x: usize::MAX,
        idx: usize::MAX,
        scores: usize::MAX,
        w1: [usize::MAX; 3],
        w2: [usize::MAX; 3],
        out: usize::MAX,
        status: usize::MAX,
    };
}

/// The whole forward's three launches, every argument checked before the first.
fn enqueue_routed(
    device: &Device,
    dtype: Dtype,
    p: RoutedPointers,
    held: RoutedHeld,
    shape: &MoeShape,
    stream: Stream,
) -> Result<()> {
    let kernels: [Kernel; 3] = [
        kernel_for(device, FC1_KERNEL, dtype)?,
        kernel_for(device, DOWN_KERNEL, dtype)?,
        kernel_for(device, COMBINE_KERNEL, dtype)?,
    ];
    shape.validate()?;
    if p.scratch == 0 {
        return Err(Error::invalid("scratch", "is a null pointer"));
    }
    let need = scratch_bytes(shape.k, shape.din, shape.dff)?;
    if p.scratch_len < need {
        return Err(Error::invalid(
            "scratch",
            format!("holds {} bytes, needs {need} (act [K, Dff] and part [K, Din] in f32)", p.scratch_len),
        ));
    }
    let part_at = part_offset(shape.k, shape.dff)?;
    let act = (p.scratch, part_at);
    let part = p.scratch.checked_add(part_at as u64).ok_or_else(|| {
        Error::invalid("scratch", format!("pointer {:#x} plus its {need} bytes wraps the address space", p.scratch))
    })?;
    let part = (part, need - part_at);
    // The launches as spans (address, bytes held): the element type only
    // names the buffers' types, which the spans do not carry.
    let MoeShape { n_experts, k, din, dff, bits, group_size } = *shape;
    let status = (p.status != 0).then_some((p.status, held.status));
    let (x, idx, scores, out) = ((p.x, held.x), (p.idx, held.idx), (p.scores, held.scores), (p.out, held.out));
    let (w1, w2) = (p.w1.spans(held.w1), p.w2.spans(held.w2));
    let (fc1, fc1_held) = MoeFc1Relu2::<(), Spans> {
        x,
        idx,
        w1: w1[0],
        s1: w1[1],
        b1: w1[2],
        act,
        n_experts,
        k,
        din,
        dff,
        bits,
        group_size,
        status,
    }
    .raw();
    let (down, down_held) = MoeDown::<(), Spans> {
        idx,
        w2: w2[0],
        s2: w2[1],
        b2: w2[2],
        act,
        scores,
        part,
        n_experts,
        k,
        din,
        dff,
        bits,
        group_size,
        status,
    }
    .raw();
    let (combine, combine_held) = MoeCombine::<(), Spans> { part, out, k, din }.raw();
    let (fc1_extents, down_extents, combine_extents) = (fc1.extents(), down.extents(), combine.extents());
    let launches =
        [(&kernels[0], &fc1_extents[..]), (&kernels[1], &down_extents[..]), (&kernels[2], &combine_extents[..])];
    for ((kernel, extents), capacity) in launches.iter().zip([&fc1_held[..], &down_held[..], &combine_held[..]]) {
        check_buffers(kernel.spec, extents, capacity)?;
    }
    // The scratch (act and part together) must not overlap any other buffer of
    // the three launches: fc1 writes act and down writes part, so a weight,
    // input or output inside either would be overwritten or read half-written.
    let scratch = (p.scratch, p.scratch.saturating_add(need as u64));
    refuse_overlap(&launches, scratch, &["act", "part"], |name| {
        Error::invalid("scratch", format!("overlaps `{name}`; the scratch must be a buffer of its own"))
    })?;
    // `out` is written by the last launch only, so the checks of that launch
    // do not see the buffers of the first two: a weight or input under `out`
    // would be overwritten (the contract refuses any overlap with an output).
    let out_bytes = shape.din as u64 * dtype.size() as u64;
    let out = (p.out, p.out.saturating_add(out_bytes));
    refuse_overlap(&launches[..2], out, &[], |name| {
        Error::invalid("out", format!("[{:#x}, {:#x}) overlaps `{name}`; `out` may alias nothing", out.0, out.1))
    })?;
    // Both GEMVs' workgroup memory before the first launch, so that a device
    // with too little enqueues nothing. A safeguard: where the kernels are
    // available, every shape `validate` takes fits (the family's declared `workgroup_mem`).
    let (fc1_dims, down_dims) = (fc1_dims(shape), down_dims(shape));
    device.check_workgroup_mem(&kernels[0], &fc1_dims)?;
    device.check_workgroup_mem(&kernels[1], &down_dims)?;
    unsafe {
        device.launch(&kernels[0], fc1_dims, &fc1.values(), stream)?;
        device.launch(&kernels[1], down_dims, &down.values(), stream)?;
        device.launch(&kernels[2], combine_dims(shape.din), &combine.values(), stream)
    }
}

/// Whether a launch has the optional buffers `pointers` (a shared expert's
/// matrices): all given, or none; one given without the others is refused,
/// naming the first missing.
fn all_or_none(pointers: &[(&'static str, u64)]) -> Result<bool> {
    let given = pointers.iter().filter(|(_, p)| *p != 0).count();
    if given == 0 || given == pointers.len() {
        return Ok(given != 0);
    }
    let (missing, _) = pointers.iter().find(|(_, p)| *p == 0).expect("one pointer is null");
    let (present, _) = pointers.iter().find(|(_, p)| *p != 0).expect("one pointer is given");
    Err(Error::invalid(missing, format!("is a null pointer while `{present}` is given; give all of them or none")))
}

/// `refuse(name)` for the first buffer of `launches` that `range` overlaps,
/// other than those named in `except`.
fn refuse_overlap(
    launches: &[(&Kernel, &[Option<BufferExtent>])],
    range: (u64, u64),
    except: &[&str],
    refuse: impl FnOnce(&str) -> Error,
) -> Result<()> {
    match launches.iter().find_map(|(kernel, extents)| overlapping(kernel.spec, extents, range, except)) {
        Some(name) => Err(refuse(name)),
        None => Ok(()),
    }
}

/// The whole routed-expert forward, `out = T(sum_k scores[k] * down_k(relu(fc1_k(x))^2))`:
/// enqueues `moe_fc1_relu2`, `moe_down` and `moe_combine`, in that order, on
/// `stream`, with `act` and `part` in the caller's scratch. Everything is checked
/// (all three kernels available, every argument) before the first launch.
///
/// # Safety
/// As for [`fc1_relu2`]; `scratch` is a device buffer of `scratch_len` bytes
/// that nothing else uses until the stream has run these kernels.
pub unsafe fn routed_forward(
    device: &Device,
    dtype: Dtype,
    p: RoutedPointers,
    shape: &MoeShape,
    stream: Stream,
) -> Result<()> {
    enqueue_routed(device, dtype, p, RoutedHeld::UNKNOWN, shape, stream)
}

/// Refuses an expert id that is not below `n_experts`, for callers that hold
/// `idx` on the host (the kernels themselves report through `status`).
pub fn check_expert_ids(idx: &[u32], n_experts: u32) -> Result<()> {
    match idx.iter().enumerate().find(|&(_, &e)| e >= n_experts) {
        Some((k, &e)) => Err(Error::invalid("idx", format!("idx[{k}] = {e} is not below n_experts = {n_experts}"))),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Safe wrappers over typed buffers
// ---------------------------------------------------------------------------

/// The typed buffers of one quantized expert stack.
#[derive(Clone, Copy)]
pub struct QuantizedBuffers<'a, T> {
    pub w: &'a DeviceBuffer<u32>,
    pub scales: &'a DeviceBuffer<T>,
    pub biases: &'a DeviceBuffer<T>,
}

impl QuantizedPointers {
    /// The three stacks as spans, with the bytes each holds.
    fn spans(&self, held: [usize; 3]) -> [(u64, usize); 3] {
        [(self.w, held[0]), (self.scales, held[1]), (self.biases, held[2])]
    }
}

impl<T> QuantizedBuffers<'_, T> {
    /// The raw launch's pointers of these buffers.
    pub fn pointers(&self) -> QuantizedPointers {
        QuantizedPointers { w: self.w.ptr(), scales: self.scales.ptr(), biases: self.biases.ptr() }
    }

    /// The bytes each of the three buffers holds.
    fn held(&self) -> [usize; 3] {
        [self.w.bytes(), self.scales.bytes(), self.biases.bytes()]
    }
}

/// [`MoeFc1Relu2Launch`] of these buffers and this shape, run.
#[allow(clippy::too_many_arguments)]
pub fn run_fc1_relu2<T: Element>(
    device: &Device,
    x: &DeviceBuffer<T>,
    idx: &DeviceBuffer<u32>,
    w1: QuantizedBuffers<'_, T>,
    act: &mut DeviceBuffer<f32>,
    shape: &MoeShape,
    status: Option<&mut DeviceBuffer<u32>>,
    stream: Stream,
) -> Result<()> {
    let MoeShape { n_experts, k, din, dff, bits, group_size } = *shape;
    let QuantizedBuffers { w: w1, scales: s1, biases: b1 } = w1;
    MoeFc1Relu2Launch { x, idx, w1, s1, b1, act, n_experts, k, din, dff, bits, group_size, status }.run(device, stream)
}

/// [`MoeDownLaunch`] of these buffers and this shape, run.
#[allow(clippy::too_many_arguments)]
pub fn run_down<T: Element>(
    device: &Device,
    idx: &DeviceBuffer<u32>,
    w2: QuantizedBuffers<'_, T>,
    act: &DeviceBuffer<f32>,
    scores: &DeviceBuffer<f32>,
    part: &mut DeviceBuffer<f32>,
    shape: &MoeShape,
    status: Option<&mut DeviceBuffer<u32>>,
    stream: Stream,
) -> Result<()> {
    let MoeShape { n_experts, k, din, dff, bits, group_size } = *shape;
    let QuantizedBuffers { w: w2, scales: s2, biases: b2 } = w2;
    MoeDownLaunch { idx, w2, s2, b2, act, scores, part, n_experts, k, din, dff, bits, group_size, status }
        .run(device, stream)
}

/// [`MoeCombineLaunch`] of these buffers, run.
pub fn run_combine<T: Element>(
    device: &Device,
    part: &DeviceBuffer<f32>,
    out: &mut DeviceBuffer<T>,
    k: u32,
    din: u32,
    stream: Stream,
) -> Result<()> {
    MoeCombineLaunch { part, out, k, din }.run(device, stream)
}

/// The typed buffers of one [`run_routed_forward`].
pub struct RoutedBuffers<'a, T> {
    pub x: &'a DeviceBuffer<T>,
    pub idx: &'a DeviceBuffer<u32>,
    pub scores: &'a DeviceBuffer<f32>,
    pub w1: QuantizedBuffers<'a, T>,
    pub w2: QuantizedBuffers<'a, T>,
    pub out: &'a mut DeviceBuffer<T>,
    /// At least [`scratch_bytes`] bytes.
    pub scratch: &'a mut DeviceBuffer<u8>,
    pub status: Option<&'a mut DeviceBuffer<u32>>,
}

/// [`routed_forward`] over typed buffers, checking their sizes (the three
/// launches share `idx`, the status word and the scratch, which no one typed
/// launch struct can borrow for all three).
pub fn run_routed_forward<T: Element>(
    device: &Device,
    bufs: RoutedBuffers<'_, T>,
    shape: &MoeShape,
    stream: Stream,
) -> Result<()> {
    let RoutedBuffers { x, idx, scores, w1, w2, out, scratch, status } = bufs;
    let p = RoutedPointers {
        x: x.ptr(),
        idx: idx.ptr(),
        scores: scores.ptr(),
        w1: w1.pointers(),
        w2: w2.pointers(),
        out: out.ptr(),
        scratch: scratch.ptr(),
        scratch_len: scratch.len(),
        status: status.as_ref().map_or(0, |s| s.ptr()),
    };
    let held = RoutedHeld {
        x: x.bytes(),
        idx: idx.bytes(),
        scores: scores.bytes(),
        w1: w1.held(),
        w2: w2.held(),
        out: out.bytes(),
        status: status.as_ref().map_or(0, |s| s.bytes()),
    };
    enqueue_routed(device, T::DTYPE, p, held, shape, stream)
}
