//! The router of the routed experts, for one to `MAX_TOKENS` tokens:
//! - `moe_router_logits`: `logits [M, E] = x [M, Din] . wr [E, Din]^T` in f32;
//! - `moe_topk`: per token, the softmax of its logits, the `K` most probable
//!   experts (`ids [M, K]`, larger first, the lower id on equal probabilities)
//!   and their probabilities (`scores [M, K]`), divided by their sum when
//!   `renorm` (MLX's `norm_topk_prob`).
//!
//! A NaN or `+inf` logit, or a row of `-inf` ones, makes every probability of
//! that token NaN: its ids are then `u32::MAX` (out of range, which the expert
//! kernels report through their status word) and its scores NaN.

use kernels_device::entry::{MoeRouterLogits, MoeRouterLogitsQ, MoeTopK};
pub use kernels_device::entry::{MoeRouterLogitsArgs, MoeRouterLogitsQArgs, MoeTopKArgs};
use kernels_device::geometry::moe_router::{
    LOGITS_WORKGROUP_MEM_BYTES, LOGITS_WORKGROUP_SIZE, MAX_EXPERTS, MAX_TOKENS, MAX_TOPK, TOPK_WORKGROUP_MEM_BYTES,
    TOPK_WORKGROUP_SIZE, logits_workgroups,
};

use super::{all_or_none, refuse_overlap};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::kernels::{Capacity, CheckedArgs, Run, check_buffers, enqueue, kernel_for, symbol};
use crate::runtime::{Device, DeviceBuffer, LaunchDims, Stream, Typed};

/// The typed launch of `moe_router_logits` ([`Run::run`] launches it).
pub type MoeRouterLogitsLaunch<'a, T> = MoeRouterLogits<'a, T, Typed>;
/// The typed launch of `moe_router_logits_q` ([`Run::run`] launches it).
pub type MoeRouterLogitsQLaunch<'a, T> = MoeRouterLogitsQ<'a, T, Typed>;
/// The typed launch of `moe_topk` (f32 logits; `renorm` 0 or 1).
pub type MoeTopKLaunch<'a> = MoeTopK<'a, Typed>;

typed_run!(MoeRouterLogits, MoeRouterLogitsQ);

impl Run for MoeTopKLaunch<'_> {
    fn run(self, device: &Device, stream: Stream) -> Result<()> {
        let (args, capacity) = self.raw();
        args.enqueue_checked(device, Dtype::F32, &capacity, stream)
    }
}

/// The router's matrix product.
pub const LOGITS_KERNEL: &str = "moe_router_logits";
/// The router's matrix product over a quantized router (4 or 8 bits).
pub const LOGITS_Q_KERNEL: &str = "moe_router_logits_q";
/// The softmax and top-k selection (f32 logits, one symbol).
pub const TOPK_KERNEL: &str = "moe_topk";

/// Whether both router kernels for `dtype` can run on `device`.
pub fn router_available(device: &Device, dtype: Dtype) -> bool {
    device.is_available(&symbol(LOGITS_KERNEL, dtype)) && device.is_available(TOPK_KERNEL)
}

/// Whether the quantized router's product for `dtype` and `moe_topk` can run on `device`.
pub fn router_q_available(device: &Device, dtype: Dtype) -> bool {
    device.is_available(&symbol(LOGITS_Q_KERNEL, dtype)) && device.is_available(TOPK_KERNEL)
}

/// The format of a quantized router, as MLX quantizes a linear layer (affine,
/// codes packed from the low bits of each word). mlx-lm quantizes Qwen3 MoE's
/// `mlp.gate` at 8 bits, group 64, whatever the experts' bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterQuant {
    /// 4 or 8.
    pub bits: u32,
    /// 32, 64 or 128 values per scale and bias.
    pub group_size: u32,
}

impl RouterQuant {
    /// Checks the format for rows of `din` values, naming what is wrong.
    pub fn validate(&self, din: u32) -> Result<()> {
        if !matches!(self.bits, 4 | 8) {
            return Err(Error::invalid("bits", format!("{} is not supported for the router; use 4 or 8", self.bits)));
        }
        if !matches!(self.group_size, 32 | 64 | 128) {
            return Err(Error::invalid("group_size", format!("{} is not 32, 64 or 128", self.group_size)));
        }
        if !din.is_multiple_of(self.group_size) {
            return Err(Error::invalid("din", format!("{din} is not a multiple of group_size {}", self.group_size)));
        }
        Ok(())
    }
}

/// Whether the router of this shape for `dtype` can run on `device`: both
/// kernels are available and [`RouterShape::validate`] accepts it (the checks
/// [`router`] makes of the shape).
pub fn supports(device: &Device, dtype: Dtype, shape: &RouterShape) -> bool {
    router_available(device, dtype) && shape.validate().is_ok()
}

/// The router's sizes: `m` tokens, `n_experts` experts, rows of `din` values,
/// `k` experts chosen per token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterShape {
    pub m: u32,
    pub n_experts: u32,
    pub din: u32,
    pub k: u32,
}

impl RouterShape {
    /// Checks every size against the kernels' limits, naming the first that is wrong.
    pub fn validate(&self) -> Result<()> {
        check_logits_shape(self.m, self.n_experts, self.din)?;
        check_k(self.k, self.n_experts)
    }
}

/// The sizes `moe_router_logits` takes: tokens, experts and a row of at least one value.
fn check_logits_shape(m: u32, n_experts: u32, din: u32) -> Result<()> {
    check_tokens(m)?;
    check_experts(n_experts)?;
    if din == 0 {
        return Err(Error::invalid("din", "is 0; a router row needs at least one value"));
    }
    Ok(())
}

fn check_tokens(m: u32) -> Result<()> {
    if m == 0 || m as usize > MAX_TOKENS {
        return Err(Error::invalid("m", format!("{m} tokens is outside 1..={MAX_TOKENS}")));
    }
    Ok(())
}

fn check_experts(n_experts: u32) -> Result<()> {
    if n_experts == 0 || n_experts > MAX_EXPERTS {
        return Err(Error::invalid("n_experts", format!("{n_experts} is outside 1..={MAX_EXPERTS}")));
    }
    Ok(())
}

fn check_k(k: u32, n_experts: u32) -> Result<()> {
    if k == 0 || k > MAX_TOPK {
        return Err(Error::invalid("k", format!("{k} is outside 1..={MAX_TOPK}")));
    }
    if k > n_experts {
        return Err(Error::invalid("k", format!("{k} is more than the {n_experts} experts")));
    }
    Ok(())
}

/// `moe_router_logits`' launch: one workgroup per router row, and each wave's
/// sums of each token in workgroup memory.
pub fn logits_dims(n_experts: u32) -> LaunchDims {
    LaunchDims {
        grid: [logits_workgroups(n_experts), 1, 1],
        workgroup_size: LOGITS_WORKGROUP_SIZE,
        workgroup_mem_bytes: LOGITS_WORKGROUP_MEM_BYTES,
    }
}

/// `moe_topk`'s launch: one wave per token, no workgroup memory.
pub fn topk_dims(m: u32) -> LaunchDims {
    LaunchDims { grid: [m, 1, 1], workgroup_size: TOPK_WORKGROUP_SIZE, workgroup_mem_bytes: TOPK_WORKGROUP_MEM_BYTES }
}

/// Refuses counts to zero without a buffer, and a buffer with none.
fn check_arrivals(arrivals: u64, n_arrivals: u32) -> Result<()> {
    match (arrivals, n_arrivals) {
        (0, 1..) => Err(Error::invalid("arrivals", format!("is a null pointer with `n_arrivals` {n_arrivals}"))),
        (1.., 0) => Err(Error::invalid("n_arrivals", "is 0 with `arrivals` given; pass a null pointer")),
        _ => Ok(()),
    }
}

impl CheckedArgs for MoeRouterLogitsArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let kernel = kernel_for(device, LOGITS_KERNEL, dtype)?;
        check_logits_shape(self.m, self.n_experts, self.din)?;
        let shared = all_or_none(&[("ws", self.ws), ("gate_logits", self.gate_logits)])?;
        check_arrivals(self.arrivals, self.n_arrivals)?;
        let dims = logits_dims(self.n_experts + shared as u32);
        device.check_workgroup_mem(&kernel, &dims)?;
        unsafe { enqueue(device, &kernel, dims, &self.values(), &self.extents(), capacity, stream) }
    }
}

impl CheckedArgs for MoeRouterLogitsQArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        let kernel = kernel_for(device, LOGITS_Q_KERNEL, dtype)?;
        check_logits_shape(self.m, self.n_experts, self.din)?;
        RouterQuant { bits: self.bits, group_size: self.group_size }.validate(self.din)?;
        let shared =
            all_or_none(&[("wsq", self.wsq), ("ssq", self.ssq), ("bsq", self.bsq), ("gate_logits", self.gate_logits)])?;
        check_arrivals(self.arrivals, self.n_arrivals)?;
        let dims = logits_dims(self.n_experts + shared as u32);
        device.check_workgroup_mem(&kernel, &dims)?;
        unsafe { enqueue(device, &kernel, dims, &self.values(), &self.extents(), capacity, stream) }
    }
}

impl CheckedArgs for MoeTopKArgs {
    fn enqueue_checked(self, device: &Device, dtype: Dtype, capacity: Capacity, stream: Stream) -> Result<()> {
        if dtype != Dtype::F32 {
            return Err(Error::invalid("logits", format!("are {}; moe_topk takes f32 logits", dtype.name())));
        }
        let kernel = device.kernel(TOPK_KERNEL)?;
        check_tokens(self.m)?;
        check_experts(self.n_experts)?;
        check_k(self.k, self.n_experts)?;
        if self.renorm > 1 {
            return Err(Error::invalid("renorm", format!("{} is not 0 or 1", self.renorm)));
        }
        if self.shared > 1 {
            return Err(Error::invalid("shared", format!("{} is not 0 or 1", self.shared)));
        }
        if (self.shared == 1) != (self.gate_logits != 0) {
            let why = if self.shared == 1 { "is a null pointer with `shared` 1" } else { "is given with `shared` 0" };
            return Err(Error::invalid("gate_logits", why));
        }
        let dims = topk_dims(self.m);
        device.check_workgroup_mem(&kernel, &dims)?;
        unsafe { enqueue(device, &kernel, dims, &self.values(), &self.extents(), capacity, stream) }
    }
}

impl RouterShape {
    /// The arguments of `moe_router_logits` of this shape (the raw form
    /// [`router_logits`] takes; `k` is not used).
    pub fn logits_args(&self, x: u64, wr: u64, logits: u64) -> MoeRouterLogitsArgs {
        let RouterShape { m, n_experts, din, .. } = *self;
        MoeRouterLogitsArgs { x, wr, ws: 0, logits, gate_logits: 0, m, n_experts, din, arrivals: 0, n_arrivals: 0 }
    }

    /// The arguments of `moe_router_logits_q` of this shape (the raw form
    /// [`router_logits_q`] takes; `k` is not used).
    pub fn logits_q_args(
        &self,
        x: u64,
        wq: u64,
        sq: u64,
        bq: u64,
        logits: u64,
        quant: RouterQuant,
    ) -> MoeRouterLogitsQArgs {
        let RouterShape { m, n_experts, din, .. } = *self;
        let RouterQuant { bits, group_size } = quant;
        MoeRouterLogitsQArgs {
            x,
            wq,
            sq,
            bq,
            wsq: 0,
            ssq: 0,
            bsq: 0,
            logits,
            gate_logits: 0,
            m,
            n_experts,
            din,
            bits,
            group_size,
            arrivals: 0,
            n_arrivals: 0,
        }
    }

    /// The arguments of `moe_topk` of this shape (the raw form [`topk`] takes;
    /// `din` is not used).
    pub fn topk_args(&self, logits: u64, ids: u64, scores: u64, renorm: bool) -> MoeTopKArgs {
        let RouterShape { m, n_experts, k, .. } = *self;
        MoeTopKArgs { logits, gate_logits: 0, ids, scores, m, n_experts, k, renorm: renorm as u32, shared: 0 }
    }
}

/// `logits[t, e] = x[t] . wr[e]` (f32) for `t < m`, `e < n_experts`, over the
/// raw form ([`RouterShape::logits_args`]); `dtype` is the type of `x` and `wr`.
///
/// # Safety
/// `x` (`[M, Din]` of `dtype`), `wr` (`[E, Din]` of `dtype`) and `logits`
/// (`[M, E]` f32) are device pointers of `device` of those sizes.
pub unsafe fn router_logits(device: &Device, dtype: Dtype, args: MoeRouterLogitsArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// `logits[t, e] = x[t] . dequantize(wq, sq, bq)[e]` (f32) over the raw form
/// ([`RouterShape::logits_q_args`]); `dtype` is the type of `x`, `sq` and `bq`.
///
/// # Safety
/// `x` (`[M, Din]` of `dtype`), `wq` (`[E, Din * bits / 32]` u32; 16-byte
/// aligned codes take one load a quad), `sq` and `bq` (`[E, Din / group_size]`
/// of `dtype`) and `logits` (`[M, E]` f32) are device pointers of `device` of
/// those sizes.
pub unsafe fn router_logits_q(device: &Device, dtype: Dtype, args: MoeRouterLogitsQArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// The softmax of each token's logits and its `k` most probable experts, over
/// the raw form ([`RouterShape::topk_args`]).
///
/// # Safety
/// `logits` (`[M, E]` f32), `ids` (`[M, K]` u32) and `scores` (`[M, K]` f32)
/// are device pointers of `device` of those sizes.
pub unsafe fn topk(device: &Device, args: MoeTopKArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, Dtype::F32, &[], stream)
}

/// Device pointers of one [`router`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterPointers {
    /// `[M, Din]` of the activation dtype.
    pub x: u64,
    /// `[E, Din]` of the activation dtype.
    pub wr: u64,
    /// `[M, E]` f32: written by `moe_router_logits`, read by `moe_topk`.
    pub logits: u64,
    /// `[M, K]` u32.
    pub ids: u64,
    /// `[M, K]` f32.
    pub scores: u64,
}

/// The whole router: `moe_router_logits` into the caller's `logits`, then
/// `moe_topk` from them, enqueued in that order on `stream`. Everything is
/// checked (both kernels available, the shape, every pointer of both
/// launches) before the first launch. `ids` and `scores`, which only the
/// second launch writes, may not overlap `x` or `wr` either.
///
/// # Safety
/// `x` (`[M, Din]` of `dtype`), `wr` (`[E, Din]` of `dtype`), `logits`
/// (`[M, E]` f32), `ids` (`[M, K]` u32) and `scores` (`[M, K]` f32) are device
/// pointers of `device` of those sizes.
pub unsafe fn router(
    device: &Device,
    dtype: Dtype,
    p: RouterPointers,
    shape: &RouterShape,
    renorm: bool,
    stream: Stream,
) -> Result<()> {
    let logits_kernel = kernel_for(device, LOGITS_KERNEL, dtype)?;
    let topk_kernel = device.kernel(TOPK_KERNEL)?;
    shape.validate()?;
    let logits = shape.logits_args(p.x, p.wr, p.logits);
    let topk = shape.topk_args(p.logits, p.ids, p.scores, renorm);
    let (logits_extents, topk_extents) = (logits.extents(), topk.extents());
    check_buffers(logits_kernel.spec, &logits_extents, &[])?;
    check_buffers(topk_kernel.spec, &topk_extents, &[])?;
    // The outputs of the second launch against the inputs of the first (the
    // second launch's own checks see only `logits` of those).
    let out_bytes = shape.m as u64 * shape.k as u64 * 4;
    for (name, ptr) in [("ids", p.ids), ("scores", p.scores)] {
        let range = (ptr, ptr.saturating_add(out_bytes));
        refuse_overlap(&[(&logits_kernel, &logits_extents[..])], range, &["logits"], |other| {
            Error::invalid(
                name,
                format!("[{:#x}, {:#x}) overlaps `{other}`; `{name}` may alias nothing", range.0, range.1),
            )
        })?;
    }
    let dims = [logits_dims(shape.n_experts), topk_dims(shape.m)];
    device.check_workgroup_mem(&logits_kernel, &dims[0])?;
    device.check_workgroup_mem(&topk_kernel, &dims[1])?;
    unsafe {
        device.launch(&logits_kernel, dims[0], &logits.values(), stream)?;
        device.launch(&topk_kernel, dims[1], &topk.values(), stream)
    }
}

/// [`MoeRouterLogitsLaunch`] of these buffers and this shape, run.
pub fn run_router_logits<T: Element>(
    device: &Device,
    x: &DeviceBuffer<T>,
    wr: &DeviceBuffer<T>,
    logits: &mut DeviceBuffer<f32>,
    shape: &RouterShape,
    stream: Stream,
) -> Result<()> {
    let RouterShape { m, n_experts, din, .. } = *shape;
    let launch = MoeRouterLogitsLaunch {
        x,
        wr,
        ws: None,
        logits,
        gate_logits: None,
        m,
        n_experts,
        din,
        arrivals: None,
        n_arrivals: 0,
    };
    launch.run(device, stream)
}

/// The buffers of a quantized router: codes, scales and biases.
#[derive(Clone, Copy)]
pub struct QuantRouterBuffers<'a, T: Element> {
    /// `[E, Din * bits / 32]` (16-byte aligned codes take one load a quad).
    pub wq: &'a DeviceBuffer<u32>,
    /// `[E, Din / group_size]`.
    pub sq: &'a DeviceBuffer<T>,
    /// `[E, Din / group_size]`.
    pub bq: &'a DeviceBuffer<T>,
}

/// [`MoeRouterLogitsQLaunch`] of these buffers and this shape, run.
pub fn run_router_logits_q<T: Element>(
    device: &Device,
    x: &DeviceBuffer<T>,
    w: QuantRouterBuffers<'_, T>,
    quant: RouterQuant,
    logits: &mut DeviceBuffer<f32>,
    shape: &RouterShape,
    stream: Stream,
) -> Result<()> {
    let RouterShape { m, n_experts, din, .. } = *shape;
    let RouterQuant { bits, group_size } = quant;
    let QuantRouterBuffers { wq, sq, bq } = w;
    MoeRouterLogitsQLaunch {
        x,
        wq,
        sq,
        bq,
        wsq: None,
        ssq: None,
        bsq: None,
        logits,
        gate_logits: None,
        m,
        n_experts,
        din,
        bits,
        group_size,
        arrivals: None,
        n_arrivals: 0,
    }
    .run(device, stream)
}

/// [`MoeTopKLaunch`] of these buffers and this shape, run.
pub fn run_topk(
    device: &Device,
    logits: &DeviceBuffer<f32>,
    ids: &mut DeviceBuffer<u32>,
    scores: &mut DeviceBuffer<f32>,
    shape: &RouterShape,
    renorm: bool,
    stream: Stream,
) -> Result<()> {
    let RouterShape { m, n_experts, k, .. } = *shape;
    MoeTopKLaunch { logits, gate_logits: None, ids, scores, m, n_experts, k, renorm: renorm as u32, shared: 0 }
        .run(device, stream)
}
