//! `moe_gateup_batch`, `moe_down_batch` and `moe_combine_batch`: the gated
//! routed experts for `m` tokens (1 to [`MAX_BATCH_TOKENS`]) in one launch
//! each, every expert's weights streamed once per launch however many tokens
//! chose it. Shapes as in the module above with a leading `[M]`: `x [M, Din]`,
//! `idx`, `scores [M, K]`, `act [M, K, Dff]`, `part [M, K, Din]` (f32), `out
//! [M, Din]`.
//!
//! Every token's `act`, `part` and `out` are bit for bit those of the
//! single-token kernels launched for that token. `m = 1` launches the
//! single-token kernels. Limits: `m` in 1..=[`MAX_BATCH_TOKENS`], `m * k` at
//! most [`MAX_BATCH_SLOTS`]. The down projection at 6 bits launches `moe_down6`
//! over the `m * K` flat slots (each slot is computed on its own, so a token's
//! slots are the single-token launch's). Out-of-range ids as for one token, over the flat
//! slots `t * K + j`: NaN rows, and `1 + t * K + j` of the first bad slot in
//! the status word.

use kernels_device::args::{KernelSpec, MAX_PARAMS};
use kernels_device::entry::{
    MoeCombineBatch, MoeDownBatch, MoeGateUpBatch, moe_combine_batch_f32, moe_combine_f32, moe_down_batch_f32,
    moe_down_f32, moe_gateup_batch_f32, moe_gateup_f32,
};
pub use kernels_device::entry::{MoeCombineBatchArgs, MoeDownBatchArgs, MoeGateUpBatchArgs};
use kernels_device::geometry::moe::SIX_BITS;
pub use kernels_device::geometry::moe::{MAX_BATCH_SLOTS, MAX_BATCH_TOKENS};

use super::{
    Activation, COMBINE_KERNEL, DOWN_KERNEL, GATEUP_KERNEL, GatedBuffers, GatedPointers, MoeCombineArgs, MoeDownArgs,
    MoeGateUpArgs, MoeShape, QuantizedBuffers, QuantizedPointers, all_or_none, check_combine_shape, combine_dims,
    down_dims, fc1_dims,
};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::kernels::{Capacity, CheckedArgs, Run, enqueue, kernel_for, symbol};
use crate::runtime::{Device, DeviceBuffer, LaunchDims, Stream, Typed};

/// The typed launch of `moe_gateup_batch` ([`Run::run`] launches it).
pub type MoeGateUpBatchLaunch<'a, T> = MoeGateUpBatch<'a, T, Typed>;
/// The typed launch of `moe_down_batch`.
pub type MoeDownBatchLaunch<'a, T> = MoeDownBatch<'a, T, Typed>;
/// The typed launch of `moe_combine_batch`.
pub type MoeCombineBatchLaunch<'a, T> = MoeCombineBatch<'a, T, Typed>;

typed_run!(MoeGateUpBatch, MoeDownBatch, MoeCombineBatch);

/// Kernel names without the dtype suffix.
pub const GATEUP_BATCH_KERNEL: &str = "moe_gateup_batch";
pub const DOWN_BATCH_KERNEL: &str = "moe_down_batch";
pub const COMBINE_BATCH_KERNEL: &str = "moe_combine_batch";

/// Whether the batch launches for `dtype` can run on `device` at every `m`:
/// the three batch kernels and the single-token ones `m = 1` takes.
pub fn batch_available(device: &Device, dtype: Dtype) -> bool {
    [GATEUP_BATCH_KERNEL, DOWN_BATCH_KERNEL, COMBINE_BATCH_KERNEL, GATEUP_KERNEL, DOWN_KERNEL, COMBINE_KERNEL]
        .iter()
        .all(|k| device.is_available(&symbol(k, dtype)))
}

/// Refuses `m` outside 1..=[`MAX_BATCH_TOKENS`] (naming `m`) and `m * k`
/// above [`MAX_BATCH_SLOTS`] (naming `k`).
pub fn check_batch(m: u32, k: u32) -> Result<()> {
    if m == 0 || m > MAX_BATCH_TOKENS {
        return Err(Error::invalid("m", format!("{m} is outside 1..={MAX_BATCH_TOKENS}")));
    }
    if m as u64 * k as u64 > MAX_BATCH_SLOTS as u64 {
        return Err(Error::invalid(
            "k",
            format!("m * k = {m} * {k} is above the batch launches' {MAX_BATCH_SLOTS} slots"),
        ));
    }
    Ok(())
}

/// `dims` with grid z over the `m * k` slots.
fn over_slots(dims: LaunchDims, m: u32) -> LaunchDims {
    LaunchDims { grid: [dims.grid[0], dims.grid[1], dims.grid[2] * m], ..dims }
}

/// The launch geometry of `moe_gateup_batch`: `moe_gateup`'s, grid z = M * K.
pub fn gateup_batch_dims(shape: &MoeShape, m: u32) -> LaunchDims {
    over_slots(fc1_dims(shape), m)
}

/// The launch geometry of `moe_down_batch`: `moe_down`'s, grid z = M * K.
pub fn down_batch_dims(shape: &MoeShape, m: u32) -> LaunchDims {
    over_slots(down_dims(shape), m)
}

/// The launch geometry of `moe_combine_batch`: `moe_combine`'s, grid y = M.
pub fn combine_batch_dims(din: u32, m: u32) -> LaunchDims {
    let dims = combine_dims(din);
    LaunchDims { grid: [dims.grid[0], m, 1], ..dims }
}

/// The buffer sizes of a batch launch (`capacity`, one entry a parameter of
/// `batch`) that the single-token launch of `single` takes: those of the
/// parameters `single` has too (all but `m` and the shared expert's).
fn held_by_single(capacity: Capacity, batch: &KernelSpec, single: &KernelSpec) -> ([Option<usize>; MAX_PARAMS], usize) {
    let mut out = [None; MAX_PARAMS];
    let mut n = 0;
    for (param, &c) in batch.params.iter().zip(capacity) {
        if single.params.iter().any(|p| p.name == param.name) && n < MAX_PARAMS {
            out[n] = c;
            n += 1;
        }
    }
    (out, n)
}

impl CheckedArgs for MoeGateUpBatchArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let MoeGateUpBatchArgs {
            x,
            idx,
            wg,
            sg,
            bg,
            wu,
            su,
            bu,
            wgs,
            sgs,
            bgs,
            wus,
            sus,
            bus,
            act,
            activation,
            m,
            n_experts,
            k,
            din,
            dff,
            bits,
            group_size,
            status,
        } = self;
        let shared =
            all_or_none(&[("wgs", wgs), ("sgs", sgs), ("bgs", bgs), ("wus", wus), ("sus", sus), ("bus", bus)])?;
        if m == 1 && !shared {
            let single = MoeGateUpArgs {
                x,
                idx,
                wg,
                sg,
                bg,
                wu,
                su,
                bu,
                act,
                activation,
                n_experts,
                k,
                din,
                dff,
                bits,
                group_size,
                status,
            };
            let (held, n) = held_by_single(capacity, &moe_gateup_batch_f32::SPEC, &moe_gateup_f32::SPEC);
            return single.enqueue_checked(device, dtype, &held[..n], stream);
        }
        let kernel = kernel_for(device, GATEUP_BATCH_KERNEL, dtype)?;
        let shape = MoeShape { n_experts, k, din, dff, bits, group_size };
        check_batch(m, k)?;
        shape.validate()?;
        unsafe {
            enqueue(device, &kernel, gateup_batch_dims(&shape, m), &self.values(), &self.extents(), capacity, stream)
        }
    }
}

impl CheckedArgs for MoeDownBatchArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let MoeDownBatchArgs {
            idx,
            w2,
            s2,
            b2,
            w2s,
            s2s,
            b2s,
            act,
            scores,
            part,
            m,
            n_experts,
            k,
            din,
            dff,
            bits,
            group_size,
            status,
        } = self;
        let shared = all_or_none(&[("w2s", w2s), ("s2s", s2s), ("b2s", b2s)])?;
        if shared && bits == SIX_BITS {
            return Err(Error::invalid("bits", "6-bit codes are not supported with a shared expert; use 4 or 8"));
        }
        if (m == 1 && !shared) || (bits == SIX_BITS && check_batch(m, k).is_ok()) {
            // One token, or 6-bit codes: the single-token kernel over the m * k flat
            // slots (`moe_down6` computes each slot on its own).
            let slots = m * k;
            let single = MoeDownArgs {
                idx,
                w2,
                s2,
                b2,
                act,
                scores,
                part,
                n_experts,
                k: slots,
                din,
                dff,
                bits,
                group_size,
                status,
            };
            let (held, n) = held_by_single(capacity, &moe_down_batch_f32::SPEC, &moe_down_f32::SPEC);
            return single.enqueue_checked(device, dtype, &held[..n], stream);
        }
        let kernel = kernel_for(device, DOWN_BATCH_KERNEL, dtype)?;
        let shape = MoeShape { n_experts, k, din, dff, bits, group_size };
        check_batch(m, k)?;
        shape.validate()?;
        unsafe {
            enqueue(device, &kernel, down_batch_dims(&shape, m), &self.values(), &self.extents(), capacity, stream)
        }
    }
}

impl CheckedArgs for MoeCombineBatchArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let MoeCombineBatchArgs { part, out, m, k, din } = self;
        if m == 1 {
            let (held, n) = held_by_single(capacity, &moe_combine_batch_f32::SPEC, &moe_combine_f32::SPEC);
            return MoeCombineArgs { part, out, k, din }.enqueue_checked(device, dtype, &held[..n], stream);
        }
        let kernel = kernel_for(device, COMBINE_BATCH_KERNEL, dtype)?;
        check_batch(m, k)?;
        check_combine_shape(k, din)?;
        unsafe {
            enqueue(device, &kernel, combine_batch_dims(din, m), &self.values(), &self.extents(), capacity, stream)
        }
    }
}

impl MoeShape {
    /// The arguments of `moe_gateup_batch` for `m` tokens of this shape (`k`
    /// slots each; the raw form [`gateup_batch`] takes).
    pub fn gateup_batch_args(&self, m: u32, p: GatedPointers, activation: Activation) -> MoeGateUpBatchArgs {
        let a = self.gateup_args(p, activation);
        let MoeGateUpArgs {
            x,
            idx,
            wg,
            sg,
            bg,
            wu,
            su,
            bu,
            act,
            activation,
            n_experts,
            k,
            din,
            dff,
            bits,
            group_size,
            status,
        } = a;
        MoeGateUpBatchArgs {
            x,
            idx,
            wg,
            sg,
            bg,
            wu,
            su,
            bu,
            wgs: 0,
            sgs: 0,
            bgs: 0,
            wus: 0,
            sus: 0,
            bus: 0,
            act,
            activation,
            m,
            n_experts,
            k,
            din,
            dff,
            bits,
            group_size,
            status,
        }
    }

    /// The arguments of `moe_down_batch` for `m` tokens of this shape (the raw
    /// form [`down_batch`] takes).
    #[allow(clippy::too_many_arguments)]
    pub fn down_batch_args(
        &self,
        m: u32,
        idx: u64,
        w2: QuantizedPointers,
        act: u64,
        scores: u64,
        part: u64,
        status: u64,
    ) -> MoeDownBatchArgs {
        let MoeShape { n_experts, k, din, dff, bits, group_size } = *self;
        let QuantizedPointers { w: w2, scales: s2, biases: b2 } = w2;
        MoeDownBatchArgs {
            idx,
            w2,
            s2,
            b2,
            w2s: 0,
            s2s: 0,
            b2s: 0,
            act,
            scores,
            part,
            m,
            n_experts,
            k,
            din,
            dff,
            bits,
            group_size,
            status,
        }
    }
}

/// `act[t, j, f] = a(x[t] . gate[idx[t, j], f]) * (x[t] . up[idx[t, j], f])`
/// (f32) for every token t and slot j, over the raw form
/// ([`MoeShape::gateup_batch_args`]); `dtype` is `T`.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the shapes in
/// the module documentation; `status` may be 0 (null).
pub unsafe fn gateup_batch(device: &Device, dtype: Dtype, args: MoeGateUpBatchArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// `part[t, j, h] = scores[t, j] * (act[t, j] . w2[idx[t, j], h])` (f32) for
/// every token t and slot j, over the raw form ([`MoeShape::down_batch_args`]).
///
/// # Safety
/// As for [`gateup_batch`].
pub unsafe fn down_batch(device: &Device, dtype: Dtype, args: MoeDownBatchArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// `out[t, h] = T(sum_j part[t, j, h])` for every token t: the sum in f32
/// over j ascending, one rounding.
///
/// # Safety
/// `part` holds `[m, k, din]` f32, `out` `[m, din]` elements of `dtype`, on `device`.
pub unsafe fn combine_batch(device: &Device, dtype: Dtype, args: MoeCombineBatchArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// [`MoeGateUpBatchLaunch`] of these buffers, `m` tokens of this shape, run
/// (`idx [m, k]`, `x [m, din]`, `act [m, k, dff]`).
pub fn run_gateup_batch<T: Element>(
    device: &Device,
    bufs: GatedBuffers<'_, T>,
    activation: Activation,
    shape: &MoeShape,
    m: u32,
    stream: Stream,
) -> Result<()> {
    let MoeShape { n_experts, k, din, dff, bits, group_size } = *shape;
    let GatedBuffers { x, idx, gate, up, act, status } = bufs;
    MoeGateUpBatchLaunch {
        x,
        idx,
        wg: gate.w,
        sg: gate.scales,
        bg: gate.biases,
        wu: up.w,
        su: up.scales,
        bu: up.biases,
        wgs: None,
        sgs: None,
        bgs: None,
        wus: None,
        sus: None,
        bus: None,
        act,
        activation: activation as u32,
        m,
        n_experts,
        k,
        din,
        dff,
        bits,
        group_size,
        status,
    }
    .run(device, stream)
}

/// The typed buffers of one [`run_down_batch`].
pub struct DownBatchBuffers<'a, T> {
    /// `[m, k]` expert ids.
    pub idx: &'a DeviceBuffer<u32>,
    pub w2: QuantizedBuffers<'a, T>,
    /// `[m, k, dff]` f32.
    pub act: &'a DeviceBuffer<f32>,
    /// `[m, k]` f32.
    pub scores: &'a DeviceBuffer<f32>,
    /// `[m, k, din]` f32.
    pub part: &'a mut DeviceBuffer<f32>,
    pub status: Option<&'a mut DeviceBuffer<u32>>,
}

/// [`MoeDownBatchLaunch`] of these buffers, `m` tokens of this shape, run.
pub fn run_down_batch<T: Element>(
    device: &Device,
    bufs: DownBatchBuffers<'_, T>,
    shape: &MoeShape,
    m: u32,
    stream: Stream,
) -> Result<()> {
    let MoeShape { n_experts, k, din, dff, bits, group_size } = *shape;
    let DownBatchBuffers { idx, w2, act, scores, part, status } = bufs;
    let QuantizedBuffers { w: w2, scales: s2, biases: b2 } = w2;
    MoeDownBatchLaunch {
        idx,
        w2,
        s2,
        b2,
        w2s: None,
        s2s: None,
        b2s: None,
        act,
        scores,
        part,
        m,
        n_experts,
        k,
        din,
        dff,
        bits,
        group_size,
        status,
    }
    .run(device, stream)
}

/// [`MoeCombineBatchLaunch`] of these buffers, run: `part [m, k, din]` into
/// `out [m, din]`.
pub fn run_combine_batch<T: Element>(
    device: &Device,
    part: &DeviceBuffer<f32>,
    out: &mut DeviceBuffer<T>,
    m: u32,
    k: u32,
    din: u32,
    stream: Stream,
) -> Result<()> {
    MoeCombineBatchLaunch { part, out, m, k, din }.run(device, stream)
}
