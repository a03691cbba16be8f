//! The whole routed-expert block of a gated MoE layer (Qwen3 MoE) for `m`
//! tokens (1 to [`super::MAX_BATCH_TOKENS`]): the router (`moe_router_logits`,
//! `moe_topk`) and the gated experts (`moe_gateup_batch`, `moe_down_batch`,
//! `moe_combine_batch`, or the single-token kernels at `m = 1`), five launches
//! in order on one stream, with the router's logits, ids and scores and the
//! experts' `act` and `part` in one caller scratch.
//!
//! Each launch is the one its own launcher makes on the same inputs, so the
//! block's output is bit for bit the router followed by the batch launches.

use kernels_device::args::{ArgValue, BufferExtent};

use super::router::{self, LOGITS_KERNEL, LOGITS_Q_KERNEL, RouterQuant, RouterShape, TOPK_KERNEL};
use super::{
    Activation, COMBINE_BATCH_KERNEL, COMBINE_KERNEL, DOWN_BATCH_KERNEL, DOWN_KERNEL, GATEUP_BATCH_KERNEL,
    GATEUP_KERNEL, GatedPointers, MoeCombineArgs, MoeCombineBatchArgs, MoeShape, QuantizedPointers, check_batch,
    combine_batch_dims, combine_dims, down_batch_dims, down_dims, fc1_dims, gateup_batch_dims, refuse_overlap,
};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::kernels::{check_buffers, kernel_for};
use crate::runtime::{Device, Kernel, LaunchDims, Stream};

/// Whether every kernel of the block for `dtype` can run on `device` at every `m`.
pub fn block_available(device: &Device, dtype: Dtype) -> bool {
    router::router_available(device, dtype) && super::batch_available(device, dtype)
}

/// Whether every kernel of the block with a quantized router
/// ([`RouterWeights::Quantized`]) for `dtype` can run on `device` at every `m`.
pub fn block_quantized_router_available(device: &Device, dtype: Dtype) -> bool {
    router::router_q_available(device, dtype) && super::batch_available(device, dtype)
}

/// Whether [`block`] for `dtype` with a router quantized as `quant` takes `m`
/// tokens of this shape on `device`.
pub fn block_quantized_router_supports(
    device: &Device,
    dtype: Dtype,
    m: u32,
    shape: &MoeShape,
    quant: RouterQuant,
) -> bool {
    block_quantized_router_available(device, dtype)
        && validate_block(m, shape).is_ok()
        && validate_router_quant(quant, shape.din).is_ok()
}

/// The router's format checked as the block names it: `router_bits` and
/// `router_group_size`, since the experts' `bits` and `group_size` are other
/// arguments of the same call.
pub fn validate_router_quant(quant: RouterQuant, din: u32) -> Result<()> {
    quant.validate(din).map_err(|e| match e {
        Error::InvalidArgument { argument: "bits", message } => Error::invalid("router_bits", message),
        Error::InvalidArgument { argument: "group_size", message } => Error::invalid("router_group_size", message),
        Error::InvalidArgument { argument: "din", .. } => {
            Error::invalid("din", format!("{din} is not a multiple of the router's group size {}", quant.group_size))
        }
        other => other,
    })
}

/// The checks [`block`] makes of its sizes, naming the first that is wrong:
/// the router's (`m`, `n_experts`, `k`, `din`), the batch limits and the
/// experts' format (`bits` 4 or 8, `group_size`, `din`, `dff`), and a scratch
/// size that fits in this host's `usize`.
pub fn validate_block(m: u32, shape: &MoeShape) -> Result<()> {
    RouterShape { m, n_experts: shape.n_experts, din: shape.din, k: shape.k }.validate()?;
    check_batch(m, shape.k)?;
    shape.validate()?;
    block_scratch_bytes(m, shape).map(|_| ())
}

/// Whether [`block`] for `dtype` takes `m` tokens of this shape on `device`.
pub fn block_supports(device: &Device, dtype: Dtype, m: u32, shape: &MoeShape) -> bool {
    block_available(device, dtype) && validate_block(m, shape).is_ok()
}

/// Byte offsets in the scratch of `logits [m, E]`, `ids [m, K]`, `scores [m,
/// K]`, `act [m, K, Dff]` and `part [m, K, Din]` (f32, u32, f32, f32, f32),
/// each starting on 256 bytes, and the total.
fn layout(m: u32, shape: &MoeShape) -> Result<([u64; 5], u64)> {
    let (m, e, k, din, dff) =
        (m as u128, shape.n_experts as u128, shape.k as u128, shape.din as u128, shape.dff as u128);
    let sizes = [m * e * 4, m * k * 4, m * k * 4, m * k * dff * 4, m * k * din * 4];
    let (mut offsets, mut at) = ([0u64; 5], 0u128);
    for (offset, size) in offsets.iter_mut().zip(sizes) {
        at = at.next_multiple_of(256);
        *offset = at as u64;
        at += size;
    }
    // Every size is below 2^3 * 2^16 * 2^14 * 2^14 * 4: the sum fits in u128.
    let total = u64::try_from(at)
        .ok()
        .filter(|&t| usize::try_from(t).is_ok())
        .ok_or_else(|| Error::invalid("k", format!("the block's scratch of {at} bytes does not fit in this host")))?;
    Ok((offsets, total))
}

/// Bytes of the scratch of [`block`] for `m` tokens of this shape: `logits`,
/// `ids`, `scores`, `act` and `part`, in that order, each on 256 bytes.
pub fn block_scratch_bytes(m: u32, shape: &MoeShape) -> Result<usize> {
    Ok(layout(m, shape)?.1 as usize)
}

/// The router's weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterWeights {
    /// `[E, Din]` of `T` (`moe_router_logits`).
    Dense(u64),
    /// Quantized as MLX quantizes a linear layer (`moe_router_logits_q`): codes
    /// `[E, Din * bits / 32]` u32 (aligned to 16 bytes, a load a quad, or only to
    /// their words); scales and biases `[E, Din / group_size]` of `T`.
    Quantized { w: QuantizedPointers, quant: RouterQuant },
}

/// Device pointers of one [`block`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPointers {
    /// `[m, Din]` of `T`.
    pub x: u64,
    /// The router's weights.
    pub router: RouterWeights,
    pub gate: QuantizedPointers,
    pub up: QuantizedPointers,
    pub down: QuantizedPointers,
    /// `[m, Din]` of `T`.
    pub out: u64,
    /// At least [`block_scratch_bytes`] bytes (`scratch_len`).
    pub scratch: u64,
    pub scratch_len: usize,
    /// One u32 or 0: `1 + t * K + j` of the first slot whose id is out of
    /// range (a token whose logits hold a NaN gets ids `u32::MAX`).
    pub status: u64,
}

/// One checked launch, waiting for the others' checks.
struct Stage {
    kernel: Kernel,
    dims: LaunchDims,
    values: Vec<ArgValue>,
    extents: Vec<Option<BufferExtent>>,
}

impl Stage {
    fn new(kernel: Kernel, dims: LaunchDims, values: &[ArgValue], extents: &[Option<BufferExtent>]) -> Stage {
        Stage { kernel, dims, values: values.to_vec(), extents: extents.to_vec() }
    }
}

/// The block: `out[t] = T(sum_j scores[t, j] * down_{ids[t, j]}(a(gate(x[t])) *
/// up(x[t])))` with the router's top-k `ids` and `scores` (renormalized when
/// `renorm`). Enqueues five launches in order on `stream`; everything (the
/// kernels, the shape, every buffer of every launch, the overlaps between
/// launches) is checked before the first.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the shapes in
/// [`BlockPointers`] and the expert stacks of [`super`]; `scratch` holds
/// `scratch_len` bytes that nothing else uses until the stream has run the block.
#[allow(clippy::too_many_arguments)]
pub unsafe fn block(
    device: &Device,
    dtype: Dtype,
    p: BlockPointers,
    shape: &MoeShape,
    m: u32,
    activation: Activation,
    renorm: bool,
    stream: Stream,
) -> Result<()> {
    let single = m == 1;
    let pick = |batch: &str, one: &str| kernel_for(device, if single { one } else { batch }, dtype);
    let logits_kernel = match p.router {
        RouterWeights::Dense(_) => kernel_for(device, LOGITS_KERNEL, dtype)?,
        RouterWeights::Quantized { .. } => kernel_for(device, LOGITS_Q_KERNEL, dtype)?,
    };
    let topk_kernel = device.kernel(TOPK_KERNEL)?;
    let gateup_kernel = pick(GATEUP_BATCH_KERNEL, GATEUP_KERNEL)?;
    let down_kernel = pick(DOWN_BATCH_KERNEL, DOWN_KERNEL)?;
    let combine_kernel = pick(COMBINE_BATCH_KERNEL, COMBINE_KERNEL)?;
    validate_block(m, shape)?;
    if let RouterWeights::Quantized { quant, .. } = p.router {
        validate_router_quant(quant, shape.din)?;
    }
    if p.scratch == 0 {
        return Err(Error::invalid("scratch", "is a null pointer"));
    }
    let (offsets, need) = layout(m, shape)?;
    if (p.scratch_len as u64) < need {
        return Err(Error::invalid(
            "scratch",
            format!("holds {} bytes, needs {need} (logits, ids, scores, act and part of {m} tokens)", p.scratch_len),
        ));
    }
    let end = p.scratch.checked_add(need).ok_or_else(|| {
        Error::invalid("scratch", format!("pointer {:#x} plus its {need} bytes wraps the address space", p.scratch))
    })?;
    let [logits, ids, scores, act, part] = offsets.map(|o| p.scratch + o);

    let rshape = RouterShape { m, n_experts: shape.n_experts, din: shape.din, k: shape.k };
    let logits_dims = router::logits_dims(shape.n_experts);
    let logits_stage = match p.router {
        RouterWeights::Dense(wr) => {
            let la = rshape.logits_args(p.x, wr, logits);
            Stage::new(logits_kernel, logits_dims, &la.values(), &la.extents())
        }
        RouterWeights::Quantized { w, quant } => {
            let la = rshape.logits_q_args(p.x, w.w, w.scales, w.biases, logits, quant);
            Stage::new(logits_kernel, logits_dims, &la.values(), &la.extents())
        }
    };
    let ta = rshape.topk_args(logits, ids, scores, renorm);
    let gated = GatedPointers { x: p.x, idx: ids, gate: p.gate, up: p.up, act, status: p.status };
    let mut stages =
        vec![logits_stage, Stage::new(topk_kernel, router::topk_dims(m, shape.n_experts), &ta.values(), &ta.extents())];
    if single {
        let g = shape.gateup_args(gated, activation);
        let d = shape.down_args(ids, p.down, act, scores, part, p.status);
        let c = MoeCombineArgs { part, out: p.out, k: shape.k, din: shape.din };
        stages.push(Stage::new(gateup_kernel, fc1_dims(shape), &g.values(), &g.extents()));
        stages.push(Stage::new(down_kernel, down_dims(shape), &d.values(), &d.extents()));
        stages.push(Stage::new(combine_kernel, combine_dims(shape.din), &c.values(), &c.extents()));
    } else {
        let g = shape.gateup_batch_args(m, gated, activation);
        let d = shape.down_batch_args(m, ids, p.down, act, scores, part, p.status);
        let c = MoeCombineBatchArgs { part, out: p.out, m, k: shape.k, din: shape.din };
        stages.push(Stage::new(gateup_kernel, gateup_batch_dims(shape, m), &g.values(), &g.extents()));
        stages.push(Stage::new(down_kernel, down_batch_dims(shape, m), &d.values(), &d.extents()));
        stages.push(Stage::new(combine_kernel, combine_batch_dims(shape.din, m), &c.values(), &c.extents()));
    }
    let launches: Vec<_> = stages.iter().map(|s| (&s.kernel, &s.extents[..])).collect();
    // The scratch holds the buffers the launches pass each other; no other
    // buffer of any launch may lie inside it. Checked first, so that the
    // message names the caller's `scratch` rather than a buffer inside it.
    let internal = ["logits", "ids", "scores", "idx", "act", "part"];
    refuse_overlap(&launches, (p.scratch, end), &internal, |name| {
        Error::invalid("scratch", format!("overlaps `{name}`; the scratch must be a buffer of its own"))
    })?;
    for s in &stages {
        check_buffers(s.kernel.spec, &s.extents, &[])?;
    }
    // `out` is written by the last launch, whose checks do not see the inputs
    // of the four before it.
    let out_bytes = m as u64 * shape.din as u64 * dtype.size() as u64;
    let out = (p.out, p.out.saturating_add(out_bytes));
    refuse_overlap(&launches[..4], out, &[], |name| {
        Error::invalid("out", format!("[{:#x}, {:#x}) overlaps `{name}`; `out` may alias nothing", out.0, out.1))
    })?;
    // The status word is written by the experts' launches, whose checks do
    // not see the router's weights.
    if p.status != 0 {
        let status = (p.status, p.status.saturating_add(4));
        refuse_overlap(&launches[..1], status, &[], |name| {
            Error::invalid("status", format!("overlaps `{name}`; `status` may alias nothing"))
        })?;
    }
    for s in &stages {
        device.check_workgroup_mem(&s.kernel, &s.dims)?;
    }
    for s in &stages {
        unsafe { device.launch(&s.kernel, s.dims, &s.values, stream)? };
    }
    Ok(())
}
