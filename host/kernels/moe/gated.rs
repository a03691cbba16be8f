//! `moe_gateup`: the gate and up projections of the SwiGLU and GeGLU routed
//! experts (Qwen3 MoE, Qwen3-Next, dots.llm1, Gemma 4) for one token, ending in
//! `act [K, Dff]` (f32) for [`super::down`]. Shapes as in the module above, with
//! the gate and up stacks `[E, Dff, Din*bits/32]` each in place of `w1`.
//!
//! `act[k, f] = a(g) * u`, `g = x . gate[idx[k], f]`, `u = x . up[idx[k], f]`,
//! each dot in f32 as `moe_fc1_relu2`'s, and `a` from [`Activation`]. The status
//! word and out-of-range ids as for `moe_fc1_relu2`.

use kernels_device::moe::{GEGLU, SWIGLU};

use kernels_device::entry::MoeGateUp;

use super::{DOWN_KERNEL, DOWN6_KERNEL, GATEUP_KERNEL, MoeGateUpArgs, MoeShape, QuantizedBuffers, QuantizedPointers};
use crate::dtype::{Dtype, Element};
use crate::error::{Error, Result};
use crate::kernels::{CheckedArgs, Run, symbol};
use crate::runtime::{Device, DeviceBuffer, Stream, Typed};

/// The typed launch of `moe_gateup` ([`Run::run`] launches it; `activation`
/// as [`Activation`]'s value).
pub type MoeGateUpLaunch<'a, T> = MoeGateUp<'a, T, Typed>;

typed_run!(MoeGateUp);

/// The gate's activation: `a(g) = g / (1 + e^-z)`, `z = g` for SiLU, `z = 2 sqrt(2/pi)
/// (g + 0.044715 g^3)` for GELU's tanh form (the same function as `0.5 g (1 + tanh(..))`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Activation {
    /// `silu(g) * u`: SwiGLU (Qwen3 MoE, Qwen3-Next, dots.llm1).
    SwiGlu = SWIGLU,
    /// `gelu_tanh(g) * u`: GeGLU (Gemma 4).
    GeGlu = GEGLU,
}

impl Activation {
    /// The activation of the code mlxcel passes as its `act` template
    /// argument (0 SwiGLU, 1 GeGLU); an error naming `activation` otherwise.
    pub fn from_code(code: u32) -> Result<Activation> {
        match code {
            SWIGLU => Ok(Activation::SwiGlu),
            GEGLU => Ok(Activation::GeGlu),
            _ => Err(Error::invalid("activation", format!("{code} is not 0 (SwiGLU) or 1 (GeGLU)"))),
        }
    }
}

/// Whether `moe_gateup` for `dtype` can run on `device`.
pub fn gateup_available(device: &Device, dtype: Dtype) -> bool {
    device.is_available(&symbol(GATEUP_KERNEL, dtype))
}

/// Whether `moe_down` at every bit width it takes (4, 6 and 8) for `dtype` can
/// run on `device`.
pub fn down_available(device: &Device, dtype: Dtype) -> bool {
    [DOWN_KERNEL, DOWN6_KERNEL].iter().all(|k| device.is_available(&symbol(k, dtype)))
}

/// Device pointers of one [`gateup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatedPointers {
    /// `[Din]` of `T`.
    pub x: u64,
    /// `[K]` expert ids.
    pub idx: u64,
    pub gate: QuantizedPointers,
    pub up: QuantizedPointers,
    /// `[K, Dff]` f32.
    pub act: u64,
    /// One u32 or 0.
    pub status: u64,
}

impl MoeShape {
    /// The arguments of `moe_gateup` of this shape (the raw form [`gateup`] takes).
    pub fn gateup_args(&self, p: GatedPointers, activation: Activation) -> MoeGateUpArgs {
        let MoeShape { n_experts, k, din, dff, bits, group_size } = *self;
        let GatedPointers { x, idx, gate, up, act, status } = p;
        MoeGateUpArgs {
            x,
            idx,
            wg: gate.w,
            sg: gate.scales,
            bg: gate.biases,
            wu: up.w,
            su: up.scales,
            bu: up.biases,
            act,
            activation: activation as u32,
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

/// `act[k, f] = a(x . gate[idx[k], f]) * (x . up[idx[k], f])` (f32) for every
/// slot k, over the raw form ([`MoeShape::gateup_args`]); `dtype` is `T`.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the shapes in the
/// module documentation; `status` may be 0 (null).
pub unsafe fn gateup(device: &Device, dtype: Dtype, args: MoeGateUpArgs, stream: Stream) -> Result<()> {
    args.enqueue_checked(device, dtype, &[], stream)
}

/// The typed buffers of one [`run_gateup`].
pub struct GatedBuffers<'a, T> {
    pub x: &'a DeviceBuffer<T>,
    pub idx: &'a DeviceBuffer<u32>,
    pub gate: QuantizedBuffers<'a, T>,
    pub up: QuantizedBuffers<'a, T>,
    pub act: &'a mut DeviceBuffer<f32>,
    pub status: Option<&'a mut DeviceBuffer<u32>>,
}

/// [`MoeGateUpLaunch`] of these buffers and this shape, run.
pub fn run_gateup<T: Element>(
    device: &Device,
    bufs: GatedBuffers<'_, T>,
    activation: Activation,
    shape: &MoeShape,
    stream: Stream,
) -> Result<()> {
    let MoeShape { n_experts, k, din, dff, bits, group_size } = *shape;
    let GatedBuffers { x, idx, gate, up, act, status } = bufs;
    let launch = MoeGateUpLaunch {
        x,
        idx,
        wg: gate.w,
        sg: gate.scales,
        bg: gate.biases,
        wu: up.w,
        su: up.scales,
        bu: up.biases,
        act,
        activation: activation as u32,
        n_experts,
        k,
        din,
        dff,
        bits,
        group_size,
        status,
    };
    launch.run(device, stream)
}
