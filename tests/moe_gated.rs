//! The gated routed experts (`moe_gateup` with SwiGLU and GeGLU, and `moe_down`
//! at 4, 6 and 8 bits) on every backend present, against `reference::moe`.
//!
//! Tolerances, as in `tests/moe.rs`:
//! - `act` against `reference::moe::gateup` and `part` against
//!   `reference::moe::down` (from the kernel's own `act`): `max|got - want| /
//!   max|want| < 1e-5` (the same f32 products summed in another order; the
//!   activation adds a few ulp);
//! - the block's output (`moe_combine` of `part`) against the dense f64 reference:
//!   the contract's nRMS < 5e-4 and nMAX < 2e-2, counting each element's error
//!   beyond the correctly rounded value (`common::beyond_final_rounding`).

mod common;

use common::{Suite, assert_meets_dense, download_values, label};
use mlxcel_amdgpu::half::bf16;
use mlxcel_amdgpu::kernels::moe::{self, Activation, GatedBuffers, MoeShape, QuantizedBuffers, run_gateup};
use mlxcel_amdgpu::{Device, DeviceBuffer, Dtype, Element, Error, Stream};
use mlxcel_amdgpu_testkit::fixtures::QuantizedUpload;
use mlxcel_amdgpu_testkit::reference::metrics;
use mlxcel_amdgpu_testkit::reference::moe::{GatedInputs, dense_gated_reference, down, gated_inputs, gateup};

/// The uploaded inputs of one gated block.
struct Upload<T> {
    x: DeviceBuffer<T>,
    idx: DeviceBuffer<u32>,
    scores: DeviceBuffer<f32>,
    gate: QuantizedUpload<T>,
    up: QuantizedUpload<T>,
    down: QuantizedUpload<T>,
}

fn upload<T: Element>(dev: &Device, inp: &GatedInputs) -> Upload<T> {
    Upload {
        x: dev.upload(&inp.x.iter().map(|&v| T::from_f32(v)).collect::<Vec<T>>()).unwrap(),
        idx: dev.upload(&inp.idx).unwrap(),
        scores: dev.upload(&inp.scores).unwrap(),
        gate: QuantizedUpload::new(dev, &inp.gate).unwrap(),
        up: QuantizedUpload::new(dev, &inp.up).unwrap(),
        down: QuantizedUpload::new(dev, &inp.down).unwrap(),
    }
}

/// The gate/up stacks' shape (`bits` theirs) and the down stack's.
fn shapes_of(inp: &GatedInputs) -> (MoeShape, MoeShape) {
    let gate_up = MoeShape {
        n_experts: inp.n_experts as u32,
        k: inp.idx.len() as u32,
        din: inp.gate.cols as u32,
        dff: inp.down.cols as u32,
        bits: inp.gate.bits,
        group_size: inp.gate.group_size as u32,
    };
    (gate_up, MoeShape { bits: inp.down.bits, ..gate_up })
}

fn poisoned<T: Element>(dev: &Device, n: usize) -> DeviceBuffer<T> {
    let mut b = dev.alloc::<T>(n).unwrap();
    b.fill_bytes(0xFF).unwrap();
    b
}

/// `act`, `part` and the combined output of the block, launched kernel by kernel.
fn run_block<T: Element>(dev: &Device, u: &Upload<T>, inp: &GatedInputs, activation: Activation) -> [Vec<f32>; 3] {
    let (gu, dn) = shapes_of(inp);
    let (k, din, dff) = (gu.k as usize, gu.din as usize, gu.dff as usize);
    let mut act = poisoned::<f32>(dev, k * dff);
    let mut part = poisoned::<f32>(dev, k * din);
    let mut out = poisoned::<T>(dev, din);
    let bufs =
        GatedBuffers { x: &u.x, idx: &u.idx, gate: u.gate.buffers(), up: u.up.buffers(), act: &mut act, status: None };
    run_gateup::<T>(dev, bufs, activation, &gu, Stream::DEFAULT).unwrap();
    moe::run_down::<T>(dev, &u.idx, u.down.buffers(), &act, &u.scores, &mut part, &dn, None, Stream::DEFAULT).unwrap();
    moe::run_combine::<T>(dev, &part, &mut out, gu.k, gu.din, Stream::DEFAULT).unwrap();
    [download_values(&act), download_values(&part), download_values(&out)]
}

/// The block's three outputs against their references; returns the output's nRMS.
fn check_block<T: Element>(dev: &Device, inp: &GatedInputs, activation: Activation, what: &str) -> f64 {
    let dtype = T::DTYPE;
    let (gu, dn) = shapes_of(inp);
    let what = format!("{what} {activation:?} {} gate/up {gu:?} down bits {}", label::<T>(dev), dn.bits);
    let u = upload::<T>(dev, inp);
    let [act, part, out] = run_block(dev, &u, inp, activation);
    let want_act = gateup(&inp.x, &inp.idx, &inp.gate, &inp.up, inp.n_experts, activation as u32);
    let e_act = metrics::max_rel(&act, &want_act);
    assert!(e_act < 1e-5, "act of {what}: max rel error {e_act:e}");
    let want_part = down(&inp.idx, &inp.down, inp.n_experts, &act, &inp.scores);
    let e_part = metrics::max_rel(&part, &want_part);
    assert!(e_part < 1e-5, "part of {what}: max rel error {e_part:e}");
    let exact = dense_gated_reference(Dtype::F32, inp, activation as u32);
    let (nrms, nmax) = assert_meets_dense(dtype, &out, &exact, &what);
    assert!(out.iter().any(|&v| v != 0.0), "{what}: all zero");
    eprintln!("{what}: act {e_act:.2e}, part {e_part:.2e}, vs dense nrms {nrms:.2e} nmax {nmax:.2e}");
    nrms
}

// ---------------------------------------------------------------------------
// Accuracy
// ---------------------------------------------------------------------------

/// SwiGLU at a reduced shape (Din 512, Dff 384, E 16, K 8, gs 64, bf16), 4- and 8-bit.
fn swiglu_reduced_shape_bf16(dev: &Device) {
    for (bits, seed) in [(4, 61), (8, 62)] {
        let inp = gated_inputs(Dtype::Bf16, 512, 384, 16, 8, bits, bits, 64, seed);
        check_block::<bf16>(dev, &inp, Activation::SwiGlu, "reduced");
    }
}

/// GeGLU and SwiGLU in every dtype, groups of 32 and 128, on a small shape.
fn both_activations_every_dtype_and_group_size<T: Element>(dev: &Device) {
    let n = Dtype::ALL.iter().position(|&d| d == T::DTYPE).unwrap() as u64;
    for (gs, bits, activation) in [
        (32, 4, Activation::GeGlu),
        (128, 8, Activation::GeGlu),
        (32, 8, Activation::SwiGlu),
        (128, 4, Activation::SwiGlu),
    ] {
        let inp = gated_inputs(T::DTYPE, 256, 128, 5, 3, bits, bits, gs, 700 + 10 * n + gs as u64 + bits as u64);
        check_block::<T>(dev, &inp, activation, "small");
    }
}

/// 6-bit down projections (dots.llm1: gate/up at 4 bits, down at 6) in every
/// dtype and group size, with rows of 12 and 40 units of 16 values (lanes with
/// one unit, and lanes with two).
fn six_bit_down_every_dtype_and_group_size<T: Element>(dev: &Device) {
    let n = Dtype::ALL.iter().position(|&d| d == T::DTYPE).unwrap() as u64;
    for (gs, dff) in [(32, 640), (64, 192), (128, 640)] {
        let inp = gated_inputs(T::DTYPE, 256, dff, 4, 3, 4, 6, gs, 800 + 10 * n + gs as u64);
        check_block::<T>(dev, &inp, Activation::SwiGlu, "6-bit down");
    }
}

/// Weights only 4-byte aligned take the word-per-lane path of `moe_gateup` (and
/// 16-bit scales only 2-byte aligned the unpaired loads): same tolerance.
fn misaligned_weights_take_the_word_path(dev: &Device) {
    type T = bf16;
    let inp = gated_inputs(Dtype::Bf16, 512, 256, 4, 3, 4, 4, 64, 91);
    let (gu, _) = shapes_of(&inp);
    let u = upload::<T>(dev, &inp);
    // The gate stack again, 4 bytes into its buffer (words) and 2 bytes (scales).
    let words: Vec<u32> = std::iter::once(0).chain(inp.gate.words.iter().copied()).collect();
    let w = dev.upload(&words).unwrap();
    let shifted = |v: &[f32]| {
        let mut t: Vec<T> = vec![T::from_f32(0.0)];
        t.extend(v.iter().map(|&x| T::from_f32(x)));
        dev.upload(&t).unwrap()
    };
    let (s, b) = (shifted(&inp.gate.scales), shifted(&inp.gate.biases));
    let gate = moe::QuantizedPointers { w: w.ptr() + 4, scales: s.ptr() + 2, biases: b.ptr() + 2 };
    let (k, dff) = (gu.k as usize, gu.dff as usize);
    let act = poisoned::<f32>(dev, k * dff);
    let p = moe::GatedPointers { x: u.x.ptr(), idx: u.idx.ptr(), gate, up: u.up.pointers(), act: act.ptr(), status: 0 };
    unsafe { moe::gateup(dev, Dtype::Bf16, gu.gateup_args(p, Activation::SwiGlu), Stream::DEFAULT) }.unwrap();
    let got = download_values(&act);
    let want = gateup(&inp.x, &inp.idx, &inp.gate, &inp.up, inp.n_experts, 0);
    let e = metrics::max_rel(&got, &want);
    assert!(e < 1e-5, "{}: misaligned gate: max rel error {e:e}", label::<T>(dev));
}

/// An expert id `>= E` reads nothing out of range: `moe_gateup` and the 6-bit
/// `moe_down` write NaN to that slot's rows and `1 + slot` of the first bad slot
/// to the status word.
fn an_expert_id_out_of_range_gives_nan_rows_and_status(dev: &Device) {
    type T = bf16;
    let mut inp = gated_inputs(Dtype::Bf16, 256, 128, 4, 4, 4, 6, 64, 33);
    inp.idx[1] = 4;
    inp.idx[3] = 0xFFFF_FFFF;
    let (gu, dn) = shapes_of(&inp);
    let (k, din, dff) = (gu.k as usize, gu.din as usize, gu.dff as usize);
    let u = upload::<T>(dev, &inp);
    let mut act = dev.alloc::<f32>(k * dff).unwrap();
    act.fill_bytes(0).unwrap();
    let mut part = dev.alloc::<f32>(k * din).unwrap();
    part.fill_bytes(0).unwrap();
    let mut status = dev.upload(&[0u32]).unwrap();
    let bufs = GatedBuffers {
        x: &u.x,
        idx: &u.idx,
        gate: u.gate.buffers(),
        up: u.up.buffers(),
        act: &mut act,
        status: Some(&mut status),
    };
    run_gateup::<T>(dev, bufs, Activation::SwiGlu, &gu, Stream::DEFAULT).unwrap();
    let gateup_status = status.download().unwrap()[0];
    status.fill_bytes(0).unwrap();
    moe::run_down::<T>(
        dev,
        &u.idx,
        u.down.buffers(),
        &act,
        &u.scores,
        &mut part,
        &dn,
        Some(&mut status),
        Stream::DEFAULT,
    )
    .unwrap();
    let down_status = status.download().unwrap()[0];
    let what = label::<T>(dev);
    assert_eq!((gateup_status, down_status), (2, 2), "{what}: status of the first bad slot (1) is 1 + 1");
    let (act, part) = (download_values(&act), download_values(&part));
    for slot in 0..k {
        let bad = slot == 1 || slot == 3;
        let rows = [&act[slot * dff..(slot + 1) * dff], &part[slot * din..(slot + 1) * din]];
        for (name, row) in ["act", "part"].into_iter().zip(rows) {
            assert_eq!(row.iter().all(|v| v.is_nan()), bad, "{what}: {name} of slot {slot}");
            assert!(bad || row.iter().all(|v| v.is_finite()), "{what}: {name} of slot {slot} finite");
        }
    }
}

fn refused(r: Result<(), Error>, argument: &str) {
    match r.map_err(|e| e.root().clone()) {
        Err(Error::InvalidArgument { argument: a, .. }) if a == argument => {}
        other => panic!("expected a refusal of `{argument}`, got {other:?}"),
    }
}

/// Shapes and codes the kernels do not take are named errors before any launch.
fn bad_shapes_and_activations_are_refused() {
    let dev = Device::cpu();
    type T = bf16;
    refused(Activation::from_code(2).map(drop), "activation");
    assert_eq!(Activation::from_code(1).unwrap(), Activation::GeGlu);
    let inp = gated_inputs(Dtype::Bf16, 256, 128, 4, 2, 4, 6, 64, 5);
    let (gu, dn) = shapes_of(&inp);
    let u = upload::<T>(&dev, &inp);
    let mut act = dev.alloc::<f32>(2 * 128).unwrap();
    let mut part = dev.alloc::<f32>(2 * 256).unwrap();
    let gated = |act: &mut DeviceBuffer<f32>, shape: MoeShape| {
        let bufs = GatedBuffers { x: &u.x, idx: &u.idx, gate: u.gate.buffers(), up: u.up.buffers(), act, status: None };
        run_gateup::<T>(&dev, bufs, Activation::SwiGlu, &shape, Stream::DEFAULT)
    };
    // 6-bit is a width of moe_down only.
    refused(gated(&mut act, MoeShape { bits: 6, ..gu }), "bits");
    refused(gated(&mut act, MoeShape { dff: 96, ..gu }), "dff");
    refused(gated(&mut act, MoeShape { group_size: 16, ..gu }), "group_size");
    let mut down = |shape: MoeShape| {
        moe::run_down::<T>(&dev, &u.idx, u.down.buffers(), &act, &u.scores, &mut part, &shape, None, Stream::DEFAULT)
    };
    refused(down(MoeShape { bits: 5, ..dn }), "bits");
    refused(down(MoeShape { bits: 3, ..dn }), "bits");
    refused(down(MoeShape { dff: 136, group_size: 8, ..dn }), "group_size");
    // The safe wrapper sees a gate stack one word short.
    let short = dev.upload(&inp.gate.words[1..]).unwrap();
    let gate = QuantizedBuffers { w: &short, ..u.gate.buffers() };
    let bufs = GatedBuffers { x: &u.x, idx: &u.idx, gate, up: u.up.buffers(), act: &mut act, status: None };
    refused(run_gateup::<T>(&dev, bufs, Activation::SwiGlu, &gu, Stream::DEFAULT), "wg");
}

fn availability_matches_the_backends<T: Element>(dev: &Device) {
    let what = label::<T>(dev);
    assert!(moe::gateup_available(dev, T::DTYPE), "{what}: moe_gateup is built for every dtype");
    assert!(moe::down_available(dev, T::DTYPE), "{what}: moe_down and moe_down6 are built for every dtype");
}

/// Qwen3-30B-A3B's expert shape (Din 2048, Dff 768, K 8, gs 64, 4-bit), with 8
/// experts instead of 128 (the others would only be unread weights).
fn qwen3_30b_a3b_expert_shape(dev: &Device) {
    let inp = gated_inputs(Dtype::Bf16, 2048, 768, 8, 8, 4, 4, 64, 30);
    check_block::<bf16>(dev, &inp, Activation::SwiGlu, "qwen3-30b-a3b");
}

fn main() {
    Suite::new()
        .per_backend("swiglu_reduced_shape_bf16", swiglu_reduced_shape_bf16)
        .per_backend_and_dtype(
            "both_activations_every_dtype_and_group_size",
            typed!(both_activations_every_dtype_and_group_size),
        )
        .per_backend_and_dtype(
            "six_bit_down_every_dtype_and_group_size",
            typed!(six_bit_down_every_dtype_and_group_size),
        )
        .per_backend("misaligned_weights_take_the_word_path", misaligned_weights_take_the_word_path)
        .per_backend(
            "an_expert_id_out_of_range_gives_nan_rows_and_status",
            an_expert_id_out_of_range_gives_nan_rows_and_status,
        )
        .single("bad_shapes_and_activations_are_refused", bad_shapes_and_activations_are_refused)
        .per_backend_and_dtype("availability_matches_the_backends", typed!(availability_matches_the_backends))
        .per_backend("qwen3_30b_a3b_expert_shape", qwen3_30b_a3b_expert_shape)
        .run()
}
