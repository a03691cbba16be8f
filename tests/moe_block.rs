//! The whole gated MoE block (`moe::block::block`: the router, then the gated
//! experts for 1 to 8 tokens) on every backend present:
//! - its output bit for bit the router's launches followed by the batch
//!   launches on the same inputs (each launch is the one its launcher makes);
//! - each token's output within the contract (nRMS < 5e-4, nMAX < 2e-2) of
//!   the dense f64 reference of that token's experts, chosen by the
//!   testkit's router reference;
//! - the same with the router quantized as mlx-lm quantizes it (8 bits,
//!   group 64), against the dequantized router's reference;
//! - with a shared expert (Qwen3-Next), dense or quantized router and gate
//!   row, each token's output within the contract of the dense reference of
//!   its experts plus the shared expert weighted by the sigmoid of its gate;
//! - the refusals the block adds to its launches' (the scratch, `out` over an
//!   input of an earlier launch, a quantized router's format, a shared
//!   expert's gate row in another format than the router);
//! - two calls on one scratch (the router launch clears the arrival counts
//!   the down launch leaves), and the raw down launch's refusals.

mod common;

use common::{Suite, assert_meets_dense, download_bits, download_values, label};
use mlxcel_amdgpu::kernels::moe::block::{self, BlockPointers, ExpertGate, RouterWeights, SharedExpertPointers};
use mlxcel_amdgpu::kernels::moe::router::{
    self, QuantRouterBuffers, RouterQuant, RouterShape, run_router_logits, run_router_logits_q, run_topk,
};
use mlxcel_amdgpu::kernels::moe::{
    Activation, DownBatchBuffers, GatedBuffers, MoeShape, QuantizedPointers, run_combine_batch, run_down_batch,
    run_gateup_batch,
};
use mlxcel_amdgpu::{Device, DeviceBuffer, Dtype, Element, Error, Stream};
use mlxcel_amdgpu_testkit::fixtures::QuantizedUpload;
use mlxcel_amdgpu_testkit::reference::data::normal;
use mlxcel_amdgpu_testkit::reference::moe::{
    self as reference, GatedInputs, Quantized, dense_gated_reference, gated_inputs,
};

const N_EXPERTS: usize = 8;
const K: usize = 3;
const DIN: usize = 256;
const DFF: usize = 128;

/// One layer and `m` tokens: `x [m, Din]`, the router's `wr [E, Din]`.
struct Block {
    layer: GatedInputs,
    m: usize,
    x: Vec<f32>,
    wr: Vec<f32>,
    shape: MoeShape,
}

fn block_inputs(dtype: Dtype, m: usize, bits: u32, seed: u64) -> Block {
    block_inputs_of(dtype, m, bits, seed, N_EXPERTS)
}

/// [`block_inputs`] with stacks of `stacked` experts, the router's `N_EXPERTS` first.
fn block_inputs_of(dtype: Dtype, m: usize, bits: u32, seed: u64, stacked: usize) -> Block {
    let layer = gated_inputs(dtype, DIN, DFF, stacked, K, bits, bits, 64, seed);
    let x = normal(dtype, seed ^ 0xB10C, m * DIN, 1.0);
    let wr = normal(dtype, seed ^ 0x7007, N_EXPERTS * DIN, 0.1);
    let shape =
        MoeShape { n_experts: N_EXPERTS as u32, k: K as u32, din: DIN as u32, dff: DFF as u32, bits, group_size: 64 };
    Block { layer, m, x, wr, shape }
}

fn upload_as<T: Element>(dev: &Device, v: &[f32]) -> DeviceBuffer<T> {
    dev.upload(&v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>()).unwrap()
}

fn poisoned<T: bytemuck::Pod>(dev: &Device, n: usize) -> DeviceBuffer<T> {
    let mut b = dev.alloc::<T>(n).unwrap();
    b.fill_bytes(0xFF).unwrap();
    b
}

/// The router quantized as mlx-lm quantizes Qwen3 MoE's `mlp.gate`.
const ROUTER_QUANT: RouterQuant = RouterQuant { bits: 8, group_size: 64 };

/// The device buffers of one block; `qr`, when present, is the router the
/// block takes (quantized from `wr` at [`ROUTER_QUANT`]).
struct Uploaded<T> {
    x: DeviceBuffer<T>,
    wr: DeviceBuffer<T>,
    qr: Option<(reference::Quantized, QuantizedUpload<T>)>,
    gate: QuantizedUpload<T>,
    up: QuantizedUpload<T>,
    down: QuantizedUpload<T>,
}

fn upload<T: Element>(dev: &Device, b: &Block) -> Uploaded<T> {
    Uploaded {
        x: upload_as(dev, &b.x),
        wr: upload_as(dev, &b.wr),
        qr: None,
        gate: QuantizedUpload::new(dev, &b.layer.gate).unwrap(),
        up: QuantizedUpload::new(dev, &b.layer.up).unwrap(),
        down: QuantizedUpload::new(dev, &b.layer.down).unwrap(),
    }
}

/// The block's pointers over `u`, `out` and `scratch`.
fn pointers<T>(u: &Uploaded<T>, out: &DeviceBuffer<T>, scratch: &DeviceBuffer<u8>) -> BlockPointers {
    let router = match &u.qr {
        Some((_, q)) => RouterWeights::Quantized { w: q.pointers(), quant: ROUTER_QUANT },
        None => RouterWeights::Dense(u.wr.ptr()),
    };
    BlockPointers {
        x: u.x.ptr(),
        router,
        gate: u.gate.pointers(),
        up: u.up.pointers(),
        down: u.down.pointers(),
        shared: None,
        out: out.ptr(),
        scratch: scratch.ptr(),
        scratch_len: scratch.len(),
        status: 0,
    }
}

/// The block's `out [m, Din]` in one call.
fn run_block<T: Element>(dev: &Device, b: &Block, u: &Uploaded<T>, act: Activation, renorm: bool) -> DeviceBuffer<T> {
    let m = b.m as u32;
    let out = poisoned::<T>(dev, b.m * DIN);
    let scratch = poisoned::<u8>(dev, block::block_scratch_bytes(m, &b.shape).unwrap());
    let p = pointers(u, &out, &scratch);
    // SAFETY: the buffers hold the shapes of `b`, and the scratch its size.
    unsafe { block::block(dev, T::DTYPE, p, &b.shape, m, act, renorm, Stream::DEFAULT) }.unwrap();
    dev.synchronize().unwrap();
    out
}

/// The router's launches, then the batch launches, one at a time: `out` and the ids.
fn run_launches<T: Element>(
    dev: &Device,
    b: &Block,
    u: &Uploaded<T>,
    act: Activation,
    renorm: bool,
) -> (DeviceBuffer<T>, Vec<u32>) {
    let (m, s) = (b.m, b.shape);
    let rshape = RouterShape { m: m as u32, n_experts: s.n_experts, din: s.din, k: s.k };
    let mut logits = poisoned::<f32>(dev, m * N_EXPERTS);
    let (mut ids, mut scores) = (poisoned::<u32>(dev, m * K), poisoned::<f32>(dev, m * K));
    match &u.qr {
        Some((_, q)) => {
            let w = QuantRouterBuffers { wq: &q.w, sq: &q.scales, bq: &q.biases };
            run_router_logits_q::<T>(dev, &u.x, w, ROUTER_QUANT, &mut logits, &rshape, Stream::DEFAULT).unwrap()
        }
        None => run_router_logits::<T>(dev, &u.x, &u.wr, &mut logits, &rshape, Stream::DEFAULT).unwrap(),
    }
    run_topk(dev, &logits, &mut ids, &mut scores, &rshape, renorm, Stream::DEFAULT).unwrap();
    let (mut a, mut part) = (poisoned::<f32>(dev, m * K * DFF), poisoned::<f32>(dev, m * K * DIN));
    let mut out = poisoned::<T>(dev, m * DIN);
    let gated =
        GatedBuffers { x: &u.x, idx: &ids, gate: u.gate.buffers(), up: u.up.buffers(), act: &mut a, status: None };
    run_gateup_batch::<T>(dev, gated, act, &s, m as u32, Stream::DEFAULT).unwrap();
    let down =
        DownBatchBuffers { idx: &ids, w2: u.down.buffers(), act: &a, scores: &scores, part: &mut part, status: None };
    run_down_batch::<T>(dev, down, &s, m as u32, Stream::DEFAULT).unwrap();
    run_combine_batch::<T>(dev, &part, &mut out, m as u32, s.k, s.din, Stream::DEFAULT).unwrap();
    dev.synchronize().unwrap();
    (out, ids.download().unwrap())
}

/// (bits, m, activation, renorm): m 1 (the single-token kernels), 2, 5 and 8.
const CASES: [(u32, usize, Activation, bool); 4] = [
    (4, 1, Activation::SwiGlu, true),
    (8, 2, Activation::GeGlu, false),
    (4, 5, Activation::SwiGlu, true),
    (8, 8, Activation::SwiGlu, true),
];

fn seed_of<T: Element>(base: u64, case: usize) -> u64 {
    base + 10 * Dtype::ALL.iter().position(|&d| d == T::DTYPE).unwrap() as u64 + case as u64
}

/// The block's output is the separate launches', bit for bit.
fn block_is_bit_for_bit_the_router_then_the_batch_launches<T: Element>(dev: &Device) {
    for (case, &(bits, m, act, renorm)) in CASES.iter().enumerate() {
        let b = block_inputs(T::DTYPE, m, bits, seed_of::<T>(300, case));
        let u = upload::<T>(dev, &b);
        let got = download_bits(&run_block(dev, &b, &u, act, renorm));
        let (want, _) = run_launches(dev, &b, &u, act, renorm);
        let want = download_bits(&want);
        let what = format!("{} {bits}-bit m {m} {act:?} renorm {renorm}", label::<T>(dev));
        if let Some(at) = got.iter().zip(&want).position(|(g, w)| g != w) {
            panic!("{what}: element {at} is {:#x} from the block, {:#x} from the launches", got[at], want[at]);
        }
    }
}

/// Each token's output against the dense f64 reference of the experts the
/// router reference chooses for it (the ids must match it exactly).
fn block_meets_the_dense_reference<T: Element>(dev: &Device) {
    for (case, &(bits, m, act, renorm)) in CASES.iter().enumerate() {
        let b = block_inputs(T::DTYPE, m, bits, seed_of::<T>(400, case));
        let u = upload::<T>(dev, &b);
        let out = download_values(&run_block(dev, &b, &u, act, renorm));
        let logits = reference::router_logits(&b.x, &b.wr, m, N_EXPERTS, DIN);
        let (ids, scores) = reference::topk(&logits, m, N_EXPERTS, K, renorm);
        let (_, device_ids) = run_launches(dev, &b, &u, act, renorm);
        let what = format!("{} {bits}-bit m {m} {act:?} renorm {renorm}", label::<T>(dev));
        assert_eq!(device_ids, ids, "{what}: the router's selection");
        tokens_meet_the_dense_reference(T::DTYPE, &b, &out, (&ids, &scores), act, &what);
    }
}

/// Each token's `out` within the dense contract of the f64 reference of its
/// chosen experts (`ids`, `scores` of all tokens), and not all zero.
fn tokens_meet_the_dense_reference(
    dtype: Dtype,
    b: &Block,
    out: &[f32],
    (ids, scores): (&[u32], &[f32]),
    act: Activation,
    what: &str,
) {
    for t in 0..b.m {
        let token = GatedInputs {
            x: b.x[t * DIN..(t + 1) * DIN].to_vec(),
            idx: ids[t * K..(t + 1) * K].to_vec(),
            scores: scores[t * K..(t + 1) * K].to_vec(),
            ..b.layer.clone()
        };
        let exact = dense_gated_reference(Dtype::F32, &token, act as u32);
        let got = &out[t * DIN..(t + 1) * DIN];
        let (nrms, nmax) = assert_meets_dense(dtype, got, &exact, &format!("{what} token {t}"));
        eprintln!("{what} token {t} vs dense: nrms {nrms:.2e} nmax {nmax:.2e}");
        assert!(got.iter().any(|&v| v != 0.0), "{what} token {t}: all zero");
    }
}

/// [`upload`] with the router quantized at [`ROUTER_QUANT`].
fn upload_quantized_router<T: Element>(dev: &Device, b: &Block) -> Uploaded<T> {
    let q = reference::quantize(T::DTYPE, &b.wr, N_EXPERTS, DIN, ROUTER_QUANT.bits, ROUTER_QUANT.group_size as usize);
    let on_device = QuantizedUpload::new(dev, &q).unwrap();
    Uploaded { qr: Some((q, on_device)), ..upload::<T>(dev, b) }
}

/// With a quantized router (8 bits, group 64) the block is still its launches
/// bit for bit (`moe_router_logits_q`, then the rest), and each token meets the
/// dense reference of the experts the router reference chooses from the
/// dequantized router.
fn quantized_router_block_is_its_launches_and_meets_the_dense_reference<T: Element>(dev: &Device) {
    for (case, &(bits, m, act, renorm)) in CASES.iter().enumerate() {
        let b = block_inputs(T::DTYPE, m, bits, seed_of::<T>(500, case));
        let u = upload_quantized_router::<T>(dev, &b);
        let got = run_block(dev, &b, &u, act, renorm);
        let (want, device_ids) = run_launches(dev, &b, &u, act, renorm);
        let what = format!("{} {bits}-bit m {m} {act:?} renorm {renorm}, 8-bit router", label::<T>(dev));
        let (got_bits, want_bits) = (download_bits(&got), download_bits(&want));
        if let Some(at) = got_bits.iter().zip(&want_bits).position(|(g, w)| g != w) {
            panic!(
                "{what}: element {at} is {:#x} from the block, {:#x} from the launches",
                got_bits[at], want_bits[at]
            );
        }
        let wr = reference::dequantize(&u.qr.as_ref().unwrap().0);
        let (ids, scores) =
            reference::topk(&reference::router_logits(&b.x, &wr, m, N_EXPERTS, DIN), m, N_EXPERTS, K, renorm);
        assert_eq!(device_ids, ids, "{what}: the router's selection");
        tokens_meet_the_dense_reference(T::DTYPE, &b, &download_values(&got), (&ids, &scores), act, &what);
    }
}

/// A quantized router's format and codes pointer are checked before any launch.
fn a_bad_quantized_router_is_refused() {
    let quantized = |quant: RouterQuant, offset: u64| {
        move |p: &mut BlockPointers, u: &Uploaded<f32>| {
            let w = QuantizedPointers {
                w: u.gate.w.ptr() + offset,
                scales: u.gate.scales.ptr(),
                biases: u.gate.biases.ptr(),
            };
            p.router = RouterWeights::Quantized { w, quant };
        }
    };
    refused(launch_changed(quantized(RouterQuant { bits: 6, ..ROUTER_QUANT }, 0)), "router_bits");
    refused(launch_changed(quantized(RouterQuant { group_size: 48, ..ROUTER_QUANT }, 0)), "router_group_size");
    let why = refused(launch_changed(quantized(ROUTER_QUANT, 2)), "wq");
    assert!(why.contains("is not aligned to its u32 element"), "{why}");
}

fn refused(r: Result<(), Error>, argument: &str) -> String {
    match r.map_err(|e| e.root().clone()) {
        Err(Error::InvalidArgument { argument: a, message }) if a == argument => message,
        other => panic!("expected a refusal of `{argument}`, got {other:?}"),
    }
}

/// The block of two tokens on the CPU backend with its pointers changed by `change`.
fn launch_changed(change: impl Fn(&mut BlockPointers, &Uploaded<f32>)) -> Result<(), Error> {
    launch_changed_at(2, change)
}

/// [`launch_changed`] for `m` tokens.
fn launch_changed_at(m: usize, change: impl Fn(&mut BlockPointers, &Uploaded<f32>)) -> Result<(), Error> {
    let dev = Device::cpu();
    let b = block_inputs(Dtype::F32, m, 4, 7);
    let u = upload::<f32>(&dev, &b);
    let out = poisoned::<f32>(&dev, m * DIN);
    let scratch = poisoned::<u8>(&dev, block::block_scratch_bytes(m as u32, &b.shape).unwrap());
    let mut p = pointers(&u, &out, &scratch);
    change(&mut p, &u);
    // SAFETY: every refused case is refused before a launch; none is launched.
    unsafe { block::block(&dev, Dtype::F32, p, &b.shape, m as u32, Activation::SwiGlu, true, Stream::DEFAULT) }
}

/// A scratch one byte short of `block_scratch_bytes` is refused, naming it.
fn a_short_scratch_is_refused() {
    let why = refused(launch_changed(|p, _| p.scratch_len -= 1), "scratch");
    assert!(why.contains("needs"), "{why}");
}

/// The router's weights inside the scratch are refused, naming the scratch.
/// The scratch is longer than `wr`, so it may also cover the buffer the
/// allocator placed beside it (`x`, named first when it does).
fn a_scratch_over_the_router_weights_is_refused() {
    let why = refused(launch_changed(|p, u| p.scratch = u.wr.ptr()), "scratch");
    assert!(why.contains("overlaps `wr`") || why.contains("overlaps `x`"), "{why}");
}

/// `out` over the router's weights, which only the first launch reads.
fn out_over_the_router_weights_is_refused() {
    let why = refused(launch_changed(|p, u| p.out = u.wr.ptr()), "out");
    assert!(why.contains("overlaps `wr`"), "{why}");
}

/// The status word over the router's weights, which the experts' checks do not see.
fn status_over_the_router_weights_is_refused() {
    let why = refused(launch_changed(|p, u| p.status = u.wr.ptr()), "status");
    assert!(why.contains("overlaps `wr`"), "{why}");
}

/// `bits` 6, which the batch down projection does not take, is refused by the block at any `m`.
fn six_bits_are_refused() {
    let s = MoeShape { bits: 6, ..block_inputs(Dtype::F32, 1, 4, 8).shape };
    refused(block::validate_block(1, &s), "bits");
}

/// A block with a shared expert: the stacks hold `N_EXPERTS + 1` experts, the
/// last being the shared one (so the dense reference takes it as one more
/// slot), and `ws [Din]` is its gate row.
struct SharedBlock {
    b: Block,
    ws: Vec<f32>,
}

fn shared_block_inputs(dtype: Dtype, m: usize, bits: u32, seed: u64) -> SharedBlock {
    let b = block_inputs_of(dtype, m, bits, seed, N_EXPERTS + 1);
    let ws = normal(dtype, seed ^ 0x5A7E, DIN, 0.1);
    SharedBlock { b, ws }
}

/// Expert `e`'s matrices in an uploaded stack of `q`'s format with `rows` rows an expert.
fn expert_pointers<T>(u: &QuantizedUpload<T>, q: &Quantized, e: usize, rows: usize) -> QuantizedPointers {
    let (words, groups) = ((e * rows * q.words_per_row()) as u64, (e * rows * q.groups_per_row()) as u64);
    let size = std::mem::size_of::<T>() as u64;
    let p = u.pointers();
    QuantizedPointers { w: p.w + 4 * words, scales: p.scales + size * groups, biases: p.biases + size * groups }
}

/// The gate row on the device: dense `T`, or quantized at [`ROUTER_QUANT`] beside a quantized router.
enum GateUpload<T> {
    Dense(DeviceBuffer<T>),
    Quantized(Box<(Quantized, QuantizedUpload<T>)>),
}

/// Runs the block with its shared expert; returns `out` and the gate row as
/// the reference takes it (dequantized when quantized).
fn run_shared_block<T: Element>(
    dev: &Device,
    sb: &SharedBlock,
    quantized_router: bool,
    act: Activation,
    renorm: bool,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let (b, m) = (&sb.b, sb.b.m as u32);
    let u = if quantized_router { upload_quantized_router::<T>(dev, b) } else { upload::<T>(dev, b) };
    let gate = if quantized_router {
        let q = reference::quantize(T::DTYPE, &sb.ws, 1, DIN, ROUTER_QUANT.bits, ROUTER_QUANT.group_size as usize);
        let on_device = QuantizedUpload::new(dev, &q).unwrap();
        GateUpload::Quantized(Box::new((q, on_device)))
    } else {
        GateUpload::Dense(upload_as::<T>(dev, &sb.ws))
    };
    let expert_gate = match &gate {
        GateUpload::Dense(ws) => ExpertGate::Dense(ws.ptr()),
        GateUpload::Quantized(q) => ExpertGate::Quantized(q.1.pointers()),
    };
    let l = &b.layer;
    let shared = SharedExpertPointers {
        expert_gate,
        gate: expert_pointers(&u.gate, &l.gate, N_EXPERTS, DFF),
        up: expert_pointers(&u.up, &l.up, N_EXPERTS, DFF),
        down: expert_pointers(&u.down, &l.down, N_EXPERTS, DIN),
    };
    let out = poisoned::<T>(dev, b.m * DIN);
    let scratch = poisoned::<u8>(dev, block::block_shared_scratch_bytes(m, &b.shape).unwrap());
    let status = dev.upload(&[0u32]).unwrap();
    let p = BlockPointers { shared: Some(shared), status: status.ptr(), ..pointers(&u, &out, &scratch) };
    // SAFETY: the buffers hold the shapes of `sb`, and the scratch its size.
    unsafe { block::block(dev, T::DTYPE, p, &b.shape, m, act, renorm, Stream::DEFAULT) }.unwrap();
    dev.synchronize().unwrap();
    assert_eq!(status.download().unwrap()[0], 0, "every slot's id is in range");
    let wr = match &u.qr {
        Some((q, _)) => reference::dequantize(q),
        None => b.wr.clone(),
    };
    let ws = match &gate {
        GateUpload::Dense(_) => sb.ws.clone(),
        GateUpload::Quantized(q) => reference::dequantize(&q.0),
    };
    (download_values(&out), wr, ws)
}

/// With a shared expert, each token's output against the dense f64
/// reference of its routed experts (chosen by the router reference) plus the
/// shared expert weighted by `sigmoid(x . ws)` (computed in f64).
fn shared_expert_block_meets_the_dense_reference<T: Element>(dev: &Device) {
    for quantized_router in [false, true] {
        for (case, &(bits, m, act, renorm)) in CASES.iter().enumerate() {
            let sb = shared_block_inputs(T::DTYPE, m, bits, seed_of::<T>(600, case));
            let (out, wr, ws) = run_shared_block::<T>(dev, &sb, quantized_router, act, renorm);
            let b = &sb.b;
            let (ids, scores) =
                reference::topk(&reference::router_logits(&b.x, &wr, m, N_EXPERTS, DIN), m, N_EXPERTS, K, renorm);
            let router = if quantized_router { "8-bit router and gate" } else { "dense router and gate" };
            let what = format!("{} {bits}-bit m {m} {act:?} renorm {renorm}, shared expert, {router}", label::<T>(dev));
            for t in 0..m {
                let x = &b.x[t * DIN..(t + 1) * DIN];
                let logit: f64 = x.iter().zip(&ws).map(|(&a, &w)| a as f64 * w as f64).sum();
                let mut idx = ids[t * K..(t + 1) * K].to_vec();
                let mut weights = scores[t * K..(t + 1) * K].to_vec();
                idx.push(N_EXPERTS as u32);
                weights.push((1.0 / (1.0 + (-logit).exp())) as f32);
                let token = GatedInputs { x: x.to_vec(), idx, scores: weights, ..b.layer.clone() };
                let exact = dense_gated_reference(Dtype::F32, &token, act as u32);
                let got = &out[t * DIN..(t + 1) * DIN];
                let (nrms, nmax) = assert_meets_dense(T::DTYPE, got, &exact, &format!("{what} token {t}"));
                eprintln!("{what} token {t} vs dense: nrms {nrms:.2e} nmax {nmax:.2e}");
            }
        }
    }
}

/// The shared expert is not ignored: the same block without it differs from
/// the reference with it (a negative control for the test above).
fn the_shared_expert_changes_the_output() {
    let dev = Device::cpu();
    let sb = shared_block_inputs(Dtype::F32, 2, 4, 9);
    let (with, _, _) = run_shared_block::<f32>(&dev, &sb, false, Activation::SwiGlu, true);
    let u = upload::<f32>(&dev, &sb.b);
    let without = download_values(&run_block(&dev, &sb.b, &u, Activation::SwiGlu, true));
    let rms = |v: &[f32]| (v.iter().map(|&a| (a as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    let diff: Vec<f32> = with.iter().zip(&without).map(|(a, b)| a - b).collect();
    assert!(rms(&diff) > 0.05 * rms(&with), "the shared expert moved the output by only {:e}", rms(&diff));
}

/// The block with a shared expert on the CPU backend, its pointers changed by `change`.
fn shared_launch_changed(change: impl Fn(&mut BlockPointers, &Uploaded<f32>)) -> Result<(), Error> {
    let dev = Device::cpu();
    let sb = shared_block_inputs(Dtype::F32, 2, 4, 7);
    let u = upload::<f32>(&dev, &sb.b);
    let ws = upload_as::<f32>(&dev, &sb.ws);
    let out = poisoned::<f32>(&dev, 2 * DIN);
    let scratch = poisoned::<u8>(&dev, block::block_shared_scratch_bytes(2, &sb.b.shape).unwrap());
    let l = &sb.b.layer;
    let shared = SharedExpertPointers {
        expert_gate: ExpertGate::Dense(ws.ptr()),
        gate: expert_pointers(&u.gate, &l.gate, N_EXPERTS, DFF),
        up: expert_pointers(&u.up, &l.up, N_EXPERTS, DFF),
        down: expert_pointers(&u.down, &l.down, N_EXPERTS, DIN),
    };
    let mut p = BlockPointers { shared: Some(shared), ..pointers(&u, &out, &scratch) };
    change(&mut p, &u);
    // SAFETY: every refused case is refused before a launch; none is launched.
    unsafe { block::block(&dev, Dtype::F32, p, &sb.b.shape, 2, Activation::SwiGlu, true, Stream::DEFAULT) }
}

/// A shared expert's gate row quantized beside a dense router is refused, naming it.
fn a_gate_row_in_another_format_than_the_router_is_refused() {
    let why = refused(
        shared_launch_changed(|p, u| {
            let gate = ExpertGate::Quantized(u.gate.pointers());
            p.shared = Some(SharedExpertPointers { expert_gate: gate, ..p.shared.unwrap() });
        }),
        "expert_gate",
    );
    assert!(why.contains("the router is dense"), "{why}");
}

/// The scratch of the block without a shared expert is too short with one.
fn a_scratch_without_the_shared_slots_is_refused() {
    let shape = block_inputs(Dtype::F32, 2, 4, 7).shape;
    let short = block::block_scratch_bytes(2, &shape).unwrap();
    assert!(short < block::block_shared_scratch_bytes(2, &shape).unwrap());
    let why = refused(shared_launch_changed(|p, _| p.scratch_len = short), "scratch");
    assert!(why.contains("needs"), "{why}");
}

/// A shared expert's down matrix missing its scales is refused, naming them.
fn a_shared_expert_missing_a_matrix_is_refused() {
    let why = refused(
        shared_launch_changed(|p, _| {
            let sh = p.shared.unwrap();
            p.shared = Some(SharedExpertPointers { down: QuantizedPointers { scales: 0, ..sh.down }, ..sh });
        }),
        "s2s",
    );
    assert!(why.contains("null pointer"), "{why}");
}

/// `out` over the shared expert's gate row, which only the router reads.
fn out_over_the_gate_row_is_refused() {
    let why = refused(
        shared_launch_changed(|p, _| {
            if let Some(SharedExpertPointers { expert_gate: ExpertGate::Dense(ws), .. }) = p.shared {
                p.out = ws;
            }
        }),
        "out",
    );
    assert!(why.contains("overlaps `ws`"), "{why}");
}

/// A token whose `x` holds a NaN: its logits are NaN, so the block's
/// selection gives its slots id `u32::MAX`, its `out` is NaN and the status
/// word names its first slot; the other tokens, the ids in the scratch and
/// the whole `out` are bit for bit the separate launches'. At one token (the
/// selection inside the gate/up launch) and at three.
fn a_nan_token_gets_out_of_range_ids_and_a_status<T: Element>(dev: &Device) {
    for (m, bad) in [(1usize, 0usize), (3, 1)] {
        nan_token_case::<T>(dev, m, bad);
    }
}

fn nan_token_case<T: Element>(dev: &Device, m: usize, bad: usize) {
    let mut b = block_inputs(T::DTYPE, m, 4, seed_of::<T>(500, 0));
    b.x[bad * DIN + 17] = f32::NAN;
    let u = upload::<T>(dev, &b);
    let out = poisoned::<T>(dev, m * DIN);
    let scratch = poisoned::<u8>(dev, block::block_scratch_bytes(m as u32, &b.shape).unwrap());
    let status = dev.upload(&[0u32]).unwrap();
    let p = BlockPointers { status: status.ptr(), ..pointers(&u, &out, &scratch) };
    // SAFETY: the buffers hold the shapes of `b`, and the scratch its size.
    unsafe { block::block(dev, T::DTYPE, p, &b.shape, m as u32, Activation::SwiGlu, true, Stream::DEFAULT) }.unwrap();
    dev.synchronize().unwrap();
    let what = format!("{} m {m}", label::<T>(dev));
    assert_eq!(status.download().unwrap()[0], 1 + (bad * K) as u32, "{what}: the first slot of token {bad}");
    // The scratch holds the logits, then the ids, each from a multiple of 256 bytes.
    let at = (m * N_EXPERTS * 4).next_multiple_of(256);
    let bytes = scratch.download().unwrap();
    let ids: Vec<u32> =
        bytes[at..at + m * K * 4].chunks(4).map(|w| u32::from_le_bytes(w.try_into().unwrap())).collect();
    let (want, want_ids) = run_launches(dev, &b, &u, Activation::SwiGlu, true);
    assert_eq!(ids, want_ids, "{what}: the ids");
    assert!(ids[bad * K..(bad + 1) * K].iter().all(|&e| e == u32::MAX), "{what}: {ids:?}");
    let (got, want) = (download_bits(&out), download_bits(&want));
    assert_eq!(got, want, "{what}: out");
    let values = download_values(&out);
    assert!(values[bad * DIN..(bad + 1) * DIN].iter().all(|v| v.is_nan()), "{what}: token {bad}'s out");
    assert!(values[..bad * DIN].iter().chain(&values[(bad + 1) * DIN..]).all(|v| v.is_finite()), "{what}");
}

/// The status word over the up matrix, at one token (read by
/// `moe_gateup_routed`, which does not take the status word, so the down
/// launch's checks alone would not see it) and at two.
fn status_over_the_up_matrix_is_refused() {
    for m in [1, 2] {
        let why = refused(launch_changed_at(m, |p, u| p.status = u.up.pointers().w), "status");
        assert!(why.contains("`wu`"), "m {m}: {why}");
    }
}

/// `moe_gateup_routed` on its own against `moe_topk` then
/// `moe_gateup_batch` on the same logits: ids, scores and `act` bit for bit,
/// at E 200 and 512 (two and four register groups a lane in the selection;
/// the block's tests take E 8) with and without the shared expert, three
/// tokens of `k` 8 and 10, token 1's logits holding a NaN.
fn gateup_routed_is_topk_then_gateup_batch<T: Element>(dev: &Device) {
    let (m, din, dff) = (3usize, 128usize, 64usize);
    for (n_experts, k, shared) in [(200usize, 8usize, false), (512, 10, true)] {
        let slots = k + shared as usize;
        let stacked = n_experts + shared as usize;
        let seed = seed_of::<T>(600, n_experts);
        let gate = gated_inputs(T::DTYPE, din, dff, stacked, k, 4, 4, 64, seed);
        let (g, u) =
            (QuantizedUpload::<T>::new(dev, &gate.gate).unwrap(), QuantizedUpload::<T>::new(dev, &gate.up).unwrap());
        let x = upload_as::<T>(dev, &normal(T::DTYPE, seed ^ 1, m * din, 1.0));
        let mut logit_values = normal(Dtype::F32, seed ^ 2, m * n_experts, 2.0);
        logit_values[n_experts + 5] = f32::NAN;
        let logits = dev.upload(&logit_values).unwrap();
        let gate_logits = dev.upload(&normal(Dtype::F32, seed ^ 3, m, 1.0)).unwrap();
        let shape = MoeShape {
            n_experts: n_experts as u32,
            k: k as u32,
            din: din as u32,
            dff: dff as u32,
            bits: 4,
            group_size: 64,
        };
        let (gp, up) = (g.pointers(), u.pointers());
        let (gs, us) = (expert_pointers(&g, &gate.gate, n_experts, dff), expert_pointers(&u, &gate.up, n_experts, dff));

        let (ids, scores, act) =
            (poisoned::<u32>(dev, m * slots), poisoned::<f32>(dev, m * slots), poisoned::<f32>(dev, m * slots * dff));
        let rp = block::RoutedPointers {
            x: x.ptr(),
            logits: logits.ptr(),
            ids: ids.ptr(),
            scores: scores.ptr(),
            gate: gp,
            up,
            act: act.ptr(),
            shared: shared.then(|| (gate_logits.ptr(), gs, us)),
        };
        let args = shape.gateup_routed_args(m as u32, rp, Activation::SwiGlu, true);
        // SAFETY: every buffer holds what the declaration asks at these sizes.
        unsafe { block::gateup_routed(dev, T::DTYPE, args, Stream::DEFAULT) }.unwrap();

        let rshape = RouterShape { m: m as u32, n_experts: shape.n_experts, din: shape.din, k: shape.k };
        let (want_ids, want_scores) = (poisoned::<u32>(dev, m * slots), poisoned::<f32>(dev, m * slots));
        let mut ta = rshape.topk_args(logits.ptr(), want_ids.ptr(), want_scores.ptr(), true);
        if shared {
            (ta.gate_logits, ta.shared) = (gate_logits.ptr(), 1);
        }
        let want_act = poisoned::<f32>(dev, m * slots * dff);
        let experts = MoeShape { k: slots as u32, ..shape };
        let gated = mlxcel_amdgpu::kernels::moe::GatedPointers {
            x: x.ptr(),
            idx: want_ids.ptr(),
            gate: gp,
            up,
            act: want_act.ptr(),
            status: 0,
        };
        let mut ga = experts.gateup_batch_args(m as u32, gated, Activation::SwiGlu);
        if shared {
            (ga.wgs, ga.sgs, ga.bgs, ga.wus, ga.sus, ga.bus) = (gs.w, gs.scales, gs.biases, us.w, us.scales, us.biases);
        }
        // SAFETY: as above.
        unsafe {
            router::topk(dev, ta, Stream::DEFAULT).unwrap();
            mlxcel_amdgpu::kernels::moe::gateup_batch(dev, T::DTYPE, ga, Stream::DEFAULT).unwrap();
        }
        dev.synchronize().unwrap();
        let what = format!("{} E {n_experts} shared {shared}", label::<T>(dev));
        let got_ids = ids.download().unwrap();
        assert_eq!(got_ids, want_ids.download().unwrap(), "{what}: ids");
        assert!(got_ids[slots..slots + k].iter().all(|&e| e == u32::MAX), "{what}: token 1's routed ids");
        assert_eq!(download_bits(&scores), download_bits(&want_scores), "{what}: scores");
        assert_eq!(download_bits(&act), download_bits(&want_act), "{what}: act");
    }
}

/// The raw launch of `moe_gateup_routed` refuses what the kernel does not
/// take, naming the argument.
fn gateup_routed_refuses_bad_arguments() {
    let dev = Device::cpu();
    let b = block_inputs(Dtype::F32, 2, 4, 7);
    let u = upload::<f32>(&dev, &b);
    let (logits, ids, scores) =
        (poisoned::<f32>(&dev, 2 * N_EXPERTS), poisoned::<u32>(&dev, 2 * K), poisoned::<f32>(&dev, 2 * K));
    let act = poisoned::<f32>(&dev, 2 * K * DFF);
    let (gp, up) = (u.gate.pointers(), u.up.pointers());
    let rp = block::RoutedPointers {
        x: u.x.ptr(),
        logits: logits.ptr(),
        ids: ids.ptr(),
        scores: scores.ptr(),
        gate: gp,
        up,
        act: act.ptr(),
        shared: None,
    };
    let good = b.shape.gateup_routed_args(2, rp, Activation::SwiGlu, true);
    type Change<'a> = &'a dyn Fn(&mut block::MoeGateUpRoutedArgs);
    let launch = |change: Change| {
        let mut a = good;
        change(&mut a);
        // SAFETY: the buffers hold the shapes of `good`; the changes are refused before any launch.
        unsafe { block::gateup_routed(&dev, Dtype::F32, a, Stream::DEFAULT) }
    };
    launch(&|_| {}).unwrap();
    let cases: [(&str, Change); 7] = [
        ("shared", &|a| a.shared = 2),
        ("gate_logits", &|a| a.gate_logits = logits.ptr()),
        ("wgs", &|a| (a.shared, a.gate_logits) = (1, logits.ptr())),
        ("renorm", &|a| a.renorm = 2),
        ("activation", &|a| a.activation = 2),
        ("k", &|a| a.k = N_EXPERTS as u32 + 1),
        ("m", &|a| a.m = 9),
    ];
    for (argument, change) in cases {
        refused(launch(change), argument);
    }
}

/// The block twice on one scratch: the second call's down launch finds the
/// counts the first left (`k` a token and row block) cleared by its router launch, so
/// both calls give the same output, at one token and at five.
fn the_block_runs_twice_on_one_scratch<T: Element>(dev: &Device) {
    for (case, m) in [1usize, 5].into_iter().enumerate() {
        let b = block_inputs(T::DTYPE, m, 4, seed_of::<T>(700, case));
        let u = upload::<T>(dev, &b);
        let scratch = poisoned::<u8>(dev, block::block_scratch_bytes(m as u32, &b.shape).unwrap());
        let outs: Vec<_> = (0..2)
            .map(|_| {
                let out = poisoned::<T>(dev, m * DIN);
                let p = pointers(&u, &out, &scratch);
                // SAFETY: the buffers hold the shapes of `b`, and the scratch its size.
                let r = unsafe {
                    block::block(dev, T::DTYPE, p, &b.shape, m as u32, Activation::SwiGlu, true, Stream::DEFAULT)
                };
                r.unwrap();
                dev.synchronize().unwrap();
                download_bits(&out)
            })
            .collect();
        assert_eq!(outs[0], outs[1], "{} m {m}: the second call on the same scratch", label::<T>(dev));
    }
}

/// The raw launch of `moe_down_combine`, and the router's counts to zero,
/// refuse what the kernels do not take, naming the argument.
fn down_combine_refuses_bad_arguments() {
    let dev = Device::cpu();
    let b = block_inputs(Dtype::F32, 2, 4, 8);
    let u = upload::<f32>(&dev, &b);
    let (ids, scores) = (dev.upload(&[0u32, 1, 2, 3, 4, 5]).unwrap(), dev.upload(&[0.5f32; 2 * K]).unwrap());
    let (act, part) = (poisoned::<f32>(&dev, 2 * K * DFF), poisoned::<f32>(&dev, 2 * K * DIN));
    let out = poisoned::<f32>(&dev, 2 * DIN);
    let arrivals = dev.upload(&vec![0u32; 2 * DIN.div_ceil(32)]).unwrap();
    let good = b.shape.down_combine_args(
        2,
        ids.ptr(),
        u.down.pointers(),
        act.ptr(),
        scores.ptr(),
        part.ptr(),
        out.ptr(),
        arrivals.ptr(),
        0,
    );
    type Change<'a> = &'a dyn Fn(&mut block::MoeDownCombineArgs);
    let launch = |change: Change| {
        let mut a = good;
        change(&mut a);
        // SAFETY: the buffers hold the shapes of `good`; the changes are refused before any launch.
        unsafe { block::down_combine(&dev, Dtype::F32, a, Stream::DEFAULT) }
    };
    launch(&|_| {}).unwrap();
    let cases: [(&str, Change); 6] = [
        ("arrivals", &|a| a.arrivals = 0),
        ("out", &|a| a.out = 0),
        ("bits", &|a| a.bits = 6),
        ("s2s", &|a| a.w2s = u.down.pointers().w),
        ("m", &|a| a.m = 9),
        ("arrivals", &|a| a.arrivals = part.ptr()),
    ];
    for (argument, change) in cases {
        refused(launch(change), argument);
    }
    let rshape = RouterShape { m: 2, n_experts: N_EXPERTS as u32, din: DIN as u32, k: K as u32 };
    let logits = poisoned::<f32>(&dev, 2 * N_EXPERTS);
    let router_launch = |arrivals: u64, n_arrivals: u32| {
        let la = router::MoeRouterLogitsArgs {
            arrivals,
            n_arrivals,
            ..rshape.logits_args(u.x.ptr(), u.wr.ptr(), logits.ptr())
        };
        // SAFETY: as above.
        unsafe { router::router_logits(&dev, Dtype::F32, la, Stream::DEFAULT) }
    };
    router_launch(arrivals.ptr(), 8).unwrap();
    refused(router_launch(0, 8), "arrivals");
    refused(router_launch(arrivals.ptr(), 0), "n_arrivals");
}

/// The block launches the `moe_gateup_routed` instance with the fewest
/// register groups that hold its experts.
fn the_routed_instance_holds_its_experts() {
    for (n_experts, want) in [
        (1, "moe_gateup_routed_e128"),
        (128, "moe_gateup_routed_e128"),
        (129, "moe_gateup_routed_e256"),
        (256, "moe_gateup_routed_e256"),
        (512, "moe_gateup_routed_e512"),
        (513, "moe_gateup_routed_e1024"),
        (1024, "moe_gateup_routed_e1024"),
    ] {
        assert_eq!(block::gateup_routed_kernel(n_experts), want, "E {n_experts}");
    }
}

fn availability_matches_the_backends<T: Element>(dev: &Device) {
    assert!(block::block_available(dev, T::DTYPE), "{}: every kernel of the block is built", label::<T>(dev));
}

fn main() {
    Suite::new()
        .per_backend_and_dtype(
            "block_is_bit_for_bit_the_router_then_the_batch_launches",
            typed!(block_is_bit_for_bit_the_router_then_the_batch_launches),
        )
        .per_backend_and_dtype("block_meets_the_dense_reference", typed!(block_meets_the_dense_reference))
        .per_backend_and_dtype(
            "quantized_router_block_is_its_launches_and_meets_the_dense_reference",
            typed!(quantized_router_block_is_its_launches_and_meets_the_dense_reference),
        )
        .per_backend_and_dtype(
            "shared_expert_block_meets_the_dense_reference",
            typed!(shared_expert_block_meets_the_dense_reference),
        )
        .single("the_shared_expert_changes_the_output", the_shared_expert_changes_the_output)
        .single(
            "a_gate_row_in_another_format_than_the_router_is_refused",
            a_gate_row_in_another_format_than_the_router_is_refused,
        )
        .single("a_scratch_without_the_shared_slots_is_refused", a_scratch_without_the_shared_slots_is_refused)
        .single("a_shared_expert_missing_a_matrix_is_refused", a_shared_expert_missing_a_matrix_is_refused)
        .single("out_over_the_gate_row_is_refused", out_over_the_gate_row_is_refused)
        .single("a_short_scratch_is_refused", a_short_scratch_is_refused)
        .single("a_bad_quantized_router_is_refused", a_bad_quantized_router_is_refused)
        .single("a_scratch_over_the_router_weights_is_refused", a_scratch_over_the_router_weights_is_refused)
        .single("out_over_the_router_weights_is_refused", out_over_the_router_weights_is_refused)
        .single("status_over_the_router_weights_is_refused", status_over_the_router_weights_is_refused)
        .single("six_bits_are_refused", six_bits_are_refused)
        .per_backend_and_dtype(
            "a_nan_token_gets_out_of_range_ids_and_a_status",
            typed!(a_nan_token_gets_out_of_range_ids_and_a_status),
        )
        .single("status_over_the_up_matrix_is_refused", status_over_the_up_matrix_is_refused)
        .per_backend_and_dtype(
            "gateup_routed_is_topk_then_gateup_batch",
            typed!(gateup_routed_is_topk_then_gateup_batch),
        )
        .single("gateup_routed_refuses_bad_arguments", gateup_routed_refuses_bad_arguments)
        .per_backend_and_dtype("the_block_runs_twice_on_one_scratch", typed!(the_block_runs_twice_on_one_scratch))
        .single("down_combine_refuses_bad_arguments", down_combine_refuses_bad_arguments)
        .single("the_routed_instance_holds_its_experts", the_routed_instance_holds_its_experts)
        .per_backend_and_dtype("availability_matches_the_backends", typed!(availability_matches_the_backends))
        .run()
}
