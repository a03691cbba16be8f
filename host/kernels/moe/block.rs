//! The whole routed-expert block of a gated MoE layer (Qwen3 MoE) for `m`
//! tokens (1 to [`super::MAX_BATCH_TOKENS`]), in order on one stream:
//! 1. the router's logits (`moe_router_logits`, or `_q` for a quantized router);
//! 2. at one token, `moe_gateup_routed`: `moe_topk` and `moe_gateup_batch` in
//!    one launch, each slot's workgroups selecting their token's experts from
//!    the logits; from two tokens, `moe_topk` then `moe_gateup_batch` (each of
//!    the `m k` slots' workgroups would repeat the selection before its first
//!    weight load, which cost more than the launch saved on an H100);
//! 3. `moe_down_combine`: `moe_down_batch`, and the last workgroup to finish
//!    each row block sums its rows as `moe_combine_batch` does (counted in
//!    `arrivals`, which the router's launch zeroes).
//!
//! Three launches at one token, four from two. The router's logits, ids and
//! scores, the experts' `act` and `part` and the arrival counts live in one
//! caller scratch. `moe_gateup_routed` runs `moe_topk`'s code and then
//! `moe_gateup_batch`'s, `moe_down_combine` runs `moe_down_batch`'s and then
//! `moe_combine_batch`'s sum, and every other launch is the one its own
//! launcher makes, so the block's output is bit for bit the router's two
//! launches followed by the batch launches.
//!
//! # The shared expert
//!
//! Qwen3-Next adds a gated expert that every token takes, weighted by
//! `sigmoid(x . expert_gate)` ([`SharedExpertPointers`]). It rides in the same
//! launches as one more slot per token: the router computes the gate's logit
//! as one more row, `moe_gateup_routed` (or `moe_topk`) appends slot `K` (id
//! `E`, score the sigmoid) to each token's ids and scores, the gate/up and
//! down launches take id `E` as the shared expert, and the combine sums `K +
//! 1` slots, the shared one last.

use kernels_device::args::{ArgValue, BufferExtent};
use kernels_device::geometry::moe::{SIX_BITS, workgroups};
use kernels_device::geometry::moe_router::{MAX_EXPERTS, topk_groups};

use super::router::{self, LOGITS_KERNEL, LOGITS_Q_KERNEL, RouterQuant, RouterShape, TOPK_KERNEL};
use super::{
    Activation, GATEUP_BATCH_KERNEL, GatedPointers, MoeShape, QuantizedPointers, all_or_none, check_batch,
    down_batch_dims, gateup_batch_dims, refuse_overlap,
};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::kernels::{Capacity, CheckedArgs, check_buffers, enqueue, kernel_for, symbol};
use crate::runtime::{Device, Kernel, LaunchDims, Stream};
pub use kernels_device::entry::{MoeDownCombineArgs, MoeGateUpRoutedArgs};

/// The instances of the kernel that selects each token's experts and
/// computes their gate and up projections, without the dtype suffix: one per
/// most experts (`moe_topk`'s register groups a lane, 1, 2, 4 or 8).
pub const GATEUP_ROUTED_KERNELS: [&str; 4] =
    ["moe_gateup_routed_e128", "moe_gateup_routed_e256", "moe_gateup_routed_e512", "moe_gateup_routed_e1024"];

/// The instance of `moe_gateup_routed` for `n_experts` (at most
/// `MAX_EXPERTS`, which the router's checks refuse first): the fewest
/// register groups that hold them.
pub fn gateup_routed_kernel(n_experts: u32) -> &'static str {
    GATEUP_ROUTED_KERNELS[topk_groups(n_experts.min(MAX_EXPERTS)).trailing_zeros() as usize]
}

/// The kernel of the block's last launch, without the dtype suffix: the down
/// projection, and the combine by the last workgroup of each row block.
pub const DOWN_COMBINE_KERNEL: &str = "moe_down_combine";

/// Whether every kernel of the block for `dtype` can run on `device` at every `m`.
pub fn block_available(device: &Device, dtype: Dtype) -> bool {
    router::router_available(device, dtype) && experts_available(device, dtype)
}

/// Whether the block's three launches after the router can run for `dtype`
/// on `device` at every `m`.
fn experts_available(device: &Device, dtype: Dtype) -> bool {
    GATEUP_ROUTED_KERNELS.iter().chain(&[DOWN_COMBINE_KERNEL]).all(|k| device.is_available(&symbol(k, dtype)))
        && super::batch_available(device, dtype)
}

/// Whether every kernel of the block with a quantized router
/// ([`RouterWeights::Quantized`]) for `dtype` can run on `device` at every `m`.
pub fn block_quantized_router_available(device: &Device, dtype: Dtype) -> bool {
    router::router_q_available(device, dtype) && experts_available(device, dtype)
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

/// The checks [`block`] makes of its sizes with a shared expert: those of
/// [`validate_block`], and the experts' launches of `K + 1` slots a token.
pub fn validate_block_shared(m: u32, shape: &MoeShape) -> Result<()> {
    validate_block(m, shape)?;
    let experts = MoeShape { k: shape.k + 1, ..*shape };
    check_batch(m, experts.k)?;
    experts.validate()?;
    block_shared_scratch_bytes(m, shape).map(|_| ())
}

/// Whether [`block`] with a shared expert for `dtype` takes `m` tokens of
/// this shape on `device`, with a dense router (`router` `None`) or one
/// quantized as `router`.
pub fn block_shared_supports(
    device: &Device,
    dtype: Dtype,
    m: u32,
    shape: &MoeShape,
    router: Option<RouterQuant>,
) -> bool {
    let routed = match router {
        None => block_supports(device, dtype, m, shape),
        Some(quant) => block_quantized_router_supports(device, dtype, m, shape, quant),
    };
    routed && validate_block_shared(m, shape).is_ok()
}

/// Whether [`block`] for `dtype` takes `m` tokens of this shape on `device`.
pub fn block_supports(device: &Device, dtype: Dtype, m: u32, shape: &MoeShape) -> bool {
    block_available(device, dtype) && validate_block(m, shape).is_ok()
}

/// Byte offsets in the scratch of `logits [m, E]`, `ids [m, S]`, `scores [m,
/// S]`, `act [m, S, Dff]`, `part [m, S, Din]`, `gate_logits [m]` and
/// `arrivals [m, workgroups(Din)]` (f32, u32, f32, f32, f32, f32, u32; `S` is
/// `K`, or `K + 1` with a shared expert, whose `gate_logits` are otherwise
/// empty), each starting on 256 bytes, and the total.
fn layout(m: u32, shape: &MoeShape, shared: bool) -> Result<([u64; 7], u64)> {
    let (m, e, din, dff) = (m as u128, shape.n_experts as u128, shape.din as u128, shape.dff as u128);
    let slots = shape.k as u128 + shared as u128;
    let arrivals = m * workgroups(shape.din) as u128 * 4;
    let sizes = [
        m * e * 4,
        m * slots * 4,
        m * slots * 4,
        m * slots * dff * 4,
        m * slots * din * 4,
        m * shared as u128 * 4,
        arrivals,
    ];
    let (mut offsets, mut at) = ([0u64; 7], 0u128);
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
/// `ids`, `scores`, `act`, `part` and the down launch's arrival counts, in
/// that order, each on 256 bytes.
pub fn block_scratch_bytes(m: u32, shape: &MoeShape) -> Result<usize> {
    Ok(layout(m, shape, false)?.1 as usize)
}

/// Bytes of the scratch of [`block`] with a shared expert: `logits`, `ids`,
/// `scores`, `act` and `part` of `K + 1` slots a token, the shared gate's
/// logits and the arrival counts, in that order, each on 256 bytes.
pub fn block_shared_scratch_bytes(m: u32, shape: &MoeShape) -> Result<usize> {
    Ok(layout(m, shape, true)?.1 as usize)
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

/// A shared expert's gate row `[Din]` (`shared_expert_gate`, a linear layer
/// of one output), in the router's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertGate {
    /// `[Din]` of `T`, beside a [`RouterWeights::Dense`] router.
    Dense(u64),
    /// Codes `[Din * bits / 32]` u32, scales and biases `[Din / group_size]`
    /// of `T`, quantized as the router is, beside a
    /// [`RouterWeights::Quantized`] router (mlx-lm quantizes both at 8 bits,
    /// group 64).
    Quantized(QuantizedPointers),
}

/// Device pointers of a shared expert (Qwen3-Next): a gated expert every
/// token takes, `sigmoid(x . expert_gate) * down(a(gate(x)) * up(x))`, its
/// matrices of the routed experts' shape and format (one expert, not a stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedExpertPointers {
    /// The gate's row, in the router's format.
    pub expert_gate: ExpertGate,
    /// `[Dff, Din * bits / 32]` codes, `[Dff, Din / group_size]` scales and biases.
    pub gate: QuantizedPointers,
    /// As `gate`.
    pub up: QuantizedPointers,
    /// `[Din, Dff * bits / 32]` codes, `[Din, Dff / group_size]` scales and biases.
    pub down: QuantizedPointers,
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
    /// The shared expert, where the model has one.
    pub shared: Option<SharedExpertPointers>,
    /// `[m, Din]` of `T`.
    pub out: u64,
    /// At least [`block_scratch_bytes`] bytes, or [`block_shared_scratch_bytes`]
    /// with a shared expert (`scratch_len`).
    pub scratch: u64,
    pub scratch_len: usize,
    /// One u32 or 0: `1 + t * S + j` of the first slot whose id is out of
    /// range (`S` is `K`, or `K + 1` with a shared expert; a token whose
    /// logits hold a NaN gets ids `u32::MAX`).
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
/// `renorm`), plus, with a shared expert, `sigmoid(x[t] . expert_gate) *
/// down_s(a(gate_s(x[t])) * up_s(x[t]))` as the last term of the sum.
/// Enqueues three launches (one token) or four in order on `stream`; everything (the kernels, the
/// shape, every buffer of every launch, the overlaps between launches) is
/// checked before the first.
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
    let logits_kernel = match p.router {
        RouterWeights::Dense(_) => kernel_for(device, LOGITS_KERNEL, dtype)?,
        RouterWeights::Quantized { .. } => kernel_for(device, LOGITS_Q_KERNEL, dtype)?,
    };
    // One token: the top-k rides in the gate/up launch. From two tokens,
    // `moe_topk` and `moe_gateup_batch`: every slot's workgroups repeat the
    // selection before their first weight load, and with `m k` slots on an
    // H100 that cost more than the launch it saves (docs/performance.md).
    let routed = m == 1;
    let topk_kernel = device.kernel(TOPK_KERNEL)?;
    let gateup_kernel = match routed {
        true => kernel_for(device, gateup_routed_kernel(shape.n_experts), dtype)?,
        false => kernel_for(device, GATEUP_BATCH_KERNEL, dtype)?,
    };
    let down_kernel = kernel_for(device, DOWN_COMBINE_KERNEL, dtype)?;
    match p.shared {
        None => validate_block(m, shape)?,
        Some(_) => validate_block_shared(m, shape)?,
    }
    if let RouterWeights::Quantized { quant, .. } = p.router {
        validate_router_quant(quant, shape.din)?;
    }
    // The experts' launches see one more slot a token with a shared expert.
    let experts = MoeShape { k: shape.k + p.shared.is_some() as u32, ..*shape };
    if p.scratch == 0 {
        return Err(Error::invalid("scratch", "is a null pointer"));
    }
    let (offsets, need) = layout(m, shape, p.shared.is_some())?;
    if (p.scratch_len as u64) < need {
        return Err(Error::invalid(
            "scratch",
            format!(
                "holds {} bytes, needs {need} (logits, ids, scores, act, part and arrival counts of {m} tokens)",
                p.scratch_len
            ),
        ));
    }
    let end = p.scratch.checked_add(need).ok_or_else(|| {
        Error::invalid("scratch", format!("pointer {:#x} plus its {need} bytes wraps the address space", p.scratch))
    })?;
    // After the scratch's length, as every other pointer's checks.
    if let Some(sh) = p.shared {
        shared_pointers_given(&sh)?;
    }
    let [logits, ids, scores, act, part, gate_logits, arrivals] = offsets.map(|o| p.scratch + o);

    let rshape = RouterShape { m, n_experts: shape.n_experts, din: shape.din, k: shape.k };
    let mut stages = vec![router_stage(logits_kernel, rshape, &p, logits, gate_logits, arrivals)?];
    if routed {
        let shared = p.shared.map(|sh| (gate_logits, sh.gate, sh.up));
        let rp = RoutedPointers { x: p.x, logits, ids, scores, gate: p.gate, up: p.up, act, shared };
        let g = shape.gateup_routed_args(m, rp, activation, renorm);
        stages.push(Stage::new(gateup_kernel, gateup_batch_dims(&experts, m), &g.values(), &g.extents()));
    } else {
        let mut ta = rshape.topk_args(logits, ids, scores, renorm);
        let gated = GatedPointers { x: p.x, idx: ids, gate: p.gate, up: p.up, act, status: p.status };
        let mut g = experts.gateup_batch_args(m, gated, activation);
        if let Some(sh) = p.shared {
            (ta.gate_logits, ta.shared) = (gate_logits, 1);
            (g.wgs, g.sgs, g.bgs) = (sh.gate.w, sh.gate.scales, sh.gate.biases);
            (g.wus, g.sus, g.bus) = (sh.up.w, sh.up.scales, sh.up.biases);
        }
        stages.push(Stage::new(topk_kernel, router::topk_dims(m), &ta.values(), &ta.extents()));
        stages.push(Stage::new(gateup_kernel, gateup_batch_dims(&experts, m), &g.values(), &g.extents()));
    }
    let mut d = experts.down_combine_args(m, ids, p.down, act, scores, part, p.out, arrivals, p.status);
    if let Some(sh) = p.shared {
        (d.w2s, d.s2s, d.b2s) = (sh.down.w, sh.down.scales, sh.down.biases);
    }
    stages.push(Stage::new(down_kernel, down_batch_dims(&experts, m), &d.values(), &d.extents()));
    let launches: Vec<_> = stages.iter().map(|s| (&s.kernel, &s.extents[..])).collect();
    // The scratch holds the buffers the launches pass each other; no other
    // buffer of any launch may lie inside it. Checked first, so that the
    // message names the caller's `scratch` rather than a buffer inside it.
    let internal = ["logits", "gate_logits", "ids", "scores", "idx", "act", "part", "arrivals"];
    refuse_overlap(&launches, (p.scratch, end), &internal, |name| {
        Error::invalid("scratch", format!("overlaps `{name}`; the scratch must be a buffer of its own"))
    })?;
    for s in &stages {
        check_buffers(s.kernel.spec, &s.extents, &[])?;
    }
    // `out` is written by the last launch, whose checks do not see the inputs
    // of the ones before it (`x`, the router's weights, the gate and up matrices).
    let out_bytes = m as u64 * shape.din as u64 * dtype.size() as u64;
    let out = (p.out, p.out.saturating_add(out_bytes));
    refuse_overlap(&launches[..launches.len() - 1], out, &[], |name| {
        Error::invalid("out", format!("[{:#x}, {:#x}) overlaps `{name}`; `out` may alias nothing", out.0, out.1))
    })?;
    // The status word is written by the down launch (and `moe_gateup_batch`),
    // whose checks do not see the router's weights, nor, at one token, `x` and
    // the gate and up matrices (`moe_gateup_routed` does not take it).
    if p.status != 0 {
        let status = (p.status, p.status.saturating_add(4));
        refuse_overlap(&launches[..2], status, &[], |name| {
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

/// The block's second launch on its own: each token's top-k from `logits`
/// (as `moe_topk`, into `ids` and `scores`) and the gate and up projections
/// of its slots (as `moe_gateup_batch`, into `act`), over the raw form; with
/// `shared` 1, the shared expert's slot after each token's `k` (its score
/// `sigmoid(gate_logits[t])`, its matrices `wgs` to `bus`). Every scalar and
/// buffer is checked first, as the block checks them; `dtype` is the type of
/// `x` and the scales and biases.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the shapes the
/// kernel's declaration gives (`kernels_device::entry::MoeGateUpRoutedArgs`).
pub unsafe fn gateup_routed(device: &Device, dtype: Dtype, args: MoeGateUpRoutedArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

impl CheckedArgs for MoeGateUpRoutedArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let kernel = kernel_for(device, gateup_routed_kernel(self.n_experts), dtype)?;
        Activation::from_code(self.activation)?;
        if self.renorm > 1 {
            return Err(Error::invalid("renorm", format!("{} is not 0 or 1", self.renorm)));
        }
        let shape = MoeShape {
            n_experts: self.n_experts,
            k: self.k,
            din: self.din,
            dff: self.dff,
            bits: self.bits,
            group_size: self.group_size,
        };
        let shared_matrices = [
            ("wgs", self.wgs),
            ("sgs", self.sgs),
            ("bgs", self.bgs),
            ("wus", self.wus),
            ("sus", self.sus),
            ("bus", self.bus),
        ];
        match self.shared {
            0 => {
                validate_block(self.m, &shape)?;
                let given = [("gate_logits", self.gate_logits)].into_iter().chain(shared_matrices);
                if let Some((name, _)) = given.into_iter().find(|(_, p)| *p != 0) {
                    return Err(Error::invalid(name, "is given with `shared` 0"));
                }
            }
            1 => {
                validate_block_shared(self.m, &shape)?;
                let needed = [("gate_logits", self.gate_logits)].into_iter().chain(shared_matrices);
                if let Some((name, _)) = needed.into_iter().find(|(_, p)| *p == 0) {
                    return Err(Error::invalid(name, "is a null pointer with `shared` 1"));
                }
            }
            other => return Err(Error::invalid("shared", format!("{other} is not 0 or 1"))),
        }
        let dims = gateup_batch_dims(&MoeShape { k: self.k + self.shared, ..shape }, self.m);
        device.check_workgroup_mem(&kernel, &dims)?;
        unsafe { enqueue(device, &kernel, dims, &self.values(), &self.extents(), capacity, stream) }
    }
}

/// The block's last launch on its own: `moe_down_batch`'s `part`, and `out`
/// as `moe_combine_batch` sums it, summed by the last of each token's workgroups in each row
/// block to finish (`arrivals`, `[m, workgroups(din)]` u32 that must be zero
/// before the launch: the block's router launch zeroes them). Every scalar
/// and buffer is checked first; `dtype` is the type of the scales, biases and
/// `out`.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the shapes the
/// kernel's declaration gives (`kernels_device::entry::MoeDownCombineArgs`);
/// `arrivals` is zero when the stream reaches the launch.
pub unsafe fn down_combine(device: &Device, dtype: Dtype, args: MoeDownCombineArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

impl CheckedArgs for MoeDownCombineArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let kernel = kernel_for(device, DOWN_COMBINE_KERNEL, dtype)?;
        let shape = MoeShape {
            n_experts: self.n_experts,
            k: self.k,
            din: self.din,
            dff: self.dff,
            bits: self.bits,
            group_size: self.group_size,
        };
        all_or_none(&[("w2s", self.w2s), ("s2s", self.s2s), ("b2s", self.b2s)])?;
        if self.bits == SIX_BITS {
            return Err(Error::invalid("bits", "6-bit codes are not supported by moe_down_combine; use 4 or 8"));
        }
        check_batch(self.m, self.k)?;
        shape.validate()?;
        let dims = down_batch_dims(&shape, self.m);
        device.check_workgroup_mem(&kernel, &dims)?;
        unsafe { enqueue(device, &kernel, dims, &self.values(), &self.extents(), capacity, stream) }
    }
}

impl MoeShape {
    /// The arguments of `moe_down_combine` for `m` tokens of this shape (`k`
    /// slots each, no shared expert; the raw form [`down_combine`] takes).
    #[allow(clippy::too_many_arguments)]
    pub fn down_combine_args(
        &self,
        m: u32,
        idx: u64,
        w2: QuantizedPointers,
        act: u64,
        scores: u64,
        part: u64,
        out: u64,
        arrivals: u64,
        status: u64,
    ) -> MoeDownCombineArgs {
        let d = self.down_batch_args(m, idx, w2, act, scores, part, status);
        MoeDownCombineArgs {
            idx: d.idx,
            w2: d.w2,
            s2: d.s2,
            b2: d.b2,
            w2s: d.w2s,
            s2s: d.s2s,
            b2s: d.b2s,
            act: d.act,
            scores: d.scores,
            part: d.part,
            out,
            arrivals,
            m: d.m,
            n_experts: d.n_experts,
            k: d.k,
            din: d.din,
            dff: d.dff,
            bits: d.bits,
            group_size: d.group_size,
            status: d.status,
        }
    }
}

/// Device pointers of one `moe_gateup_routed` launch ([`gateup_routed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutedPointers {
    /// `[m, Din]` of `T`.
    pub x: u64,
    /// `[m, E]` f32, read.
    pub logits: u64,
    /// `[m, S]` u32 and f32 (`S` is `K`, or `K + 1` with a shared expert), written.
    pub ids: u64,
    pub scores: u64,
    /// The routed experts' stacks, `[E, Dff, ...]`.
    pub gate: QuantizedPointers,
    pub up: QuantizedPointers,
    /// `[m, S, Dff]` f32, written.
    pub act: u64,
    /// The shared expert: its gate logits `[m]` f32 and its gate and up
    /// matrices `[Dff, ...]`.
    pub shared: Option<(u64, QuantizedPointers, QuantizedPointers)>,
}

impl MoeShape {
    /// The arguments of `moe_gateup_routed` for `m` tokens of this shape (`k`
    /// routed slots a token, one more with `p.shared`; the raw form
    /// [`gateup_routed`] takes).
    pub fn gateup_routed_args(
        &self,
        m: u32,
        p: RoutedPointers,
        activation: Activation,
        renorm: bool,
    ) -> MoeGateUpRoutedArgs {
        let (g, u) = (p.gate, p.up);
        let mut a = MoeGateUpRoutedArgs {
            x: p.x,
            logits: p.logits,
            ids: p.ids,
            scores: p.scores,
            wg: g.w,
            sg: g.scales,
            bg: g.biases,
            wu: u.w,
            su: u.scales,
            bu: u.biases,
            act: p.act,
            activation: activation as u32,
            m,
            renorm: renorm as u32,
            n_experts: self.n_experts,
            k: self.k,
            din: self.din,
            dff: self.dff,
            bits: self.bits,
            group_size: self.group_size,
            ..Default::default()
        };
        if let Some((gate_logits, sg, su)) = p.shared {
            (a.gate_logits, a.shared) = (gate_logits, 1);
            (a.wgs, a.sgs, a.bgs) = (sg.w, sg.scales, sg.biases);
            (a.wus, a.sus, a.bus) = (su.w, su.scales, su.biases);
        }
        a
    }
}

/// Refuses a null pointer of a shared expert, named as its launch names it:
/// the launches would take the shared slot's id as out of range.
fn shared_pointers_given(sh: &SharedExpertPointers) -> Result<()> {
    let (dense, quantized);
    let gate_row: &[(&str, u64)] = match sh.expert_gate {
        ExpertGate::Dense(ws) => {
            dense = [("ws", ws)];
            &dense
        }
        ExpertGate::Quantized(q) => {
            quantized = [("wsq", q.w), ("ssq", q.scales), ("bsq", q.biases)];
            &quantized
        }
    };
    let (g, u, d) = (sh.gate, sh.up, sh.down);
    let matrices = [
        ("wgs", g.w),
        ("sgs", g.scales),
        ("bgs", g.biases),
        ("wus", u.w),
        ("sus", u.scales),
        ("bus", u.biases),
        ("w2s", d.w),
        ("s2s", d.scales),
        ("b2s", d.biases),
    ];
    match gate_row.iter().chain(&matrices).find(|(_, p)| *p == 0) {
        Some((name, _)) => Err(Error::invalid(name, "is a null pointer; a shared expert needs all its buffers")),
        None => Ok(()),
    }
}

/// The router's product, over the experts' rows and, with a shared expert,
/// its gate's row (given in the router's format); it zeroes the down launch's
/// arrival counts.
fn router_stage(
    kernel: Kernel,
    rshape: RouterShape,
    p: &BlockPointers,
    logits: u64,
    gate_logits: u64,
    arrivals: u64,
) -> Result<Stage> {
    let n_arrivals = rshape.m * workgroups(rshape.din);
    let gate = p.shared.map(|sh| sh.expert_gate);
    let dims = router::logits_dims(rshape.n_experts + gate.is_some() as u32);
    let mismatch = |gate: &str, router: &str| {
        Error::invalid("expert_gate", format!("is {gate} but the router is {router}; give both in one format"))
    };
    match p.router {
        RouterWeights::Dense(wr) => {
            let mut la = rshape.logits_args(p.x, wr, logits);
            (la.arrivals, la.n_arrivals) = (arrivals, n_arrivals);
            match gate {
                None => {}
                Some(ExpertGate::Dense(ws)) => (la.ws, la.gate_logits) = (ws, gate_logits),
                Some(ExpertGate::Quantized(_)) => return Err(mismatch("quantized", "dense")),
            }
            Ok(Stage::new(kernel, dims, &la.values(), &la.extents()))
        }
        RouterWeights::Quantized { w, quant } => {
            let mut la = rshape.logits_q_args(p.x, w.w, w.scales, w.biases, logits, quant);
            (la.arrivals, la.n_arrivals) = (arrivals, n_arrivals);
            match gate {
                None => {}
                Some(ExpertGate::Quantized(g)) => {
                    (la.wsq, la.ssq, la.bsq, la.gate_logits) = (g.w, g.scales, g.biases, gate_logits)
                }
                Some(ExpertGate::Dense(_)) => return Err(mismatch("dense", "quantized")),
            }
            Ok(Stage::new(kernel, dims, &la.values(), &la.extents()))
        }
    }
}
