//! The gated routed experts for 1 to 8 tokens (`moe_gateup_batch`,
//! `moe_down_batch`, `moe_combine_batch`) on every backend present:
//! - each token's `act`, `part` and `out` bit for bit those of the
//!   single-token launches for that token (tokens share experts, so the
//!   owning slot computes the others');
//! - each token's `out` against the dense f64 reference: the contract's nRMS
//!   < 5e-4 and nMAX < 2e-2 beyond the final rounding, as `tests/moe_gated.rs`;
//! - the refusals (`m`, `k`, `bits`) and the status word of a bad id.

mod common;

use common::{Suite, assert_meets_dense, download_bits, download_values, label};
use mlxcel_amdgpu::kernels::moe::{
    self, Activation, DownBatchBuffers, GatedBuffers, MoeShape, run_combine_batch, run_down_batch, run_gateup,
    run_gateup_batch,
};
use mlxcel_amdgpu::{Device, DeviceBuffer, Dtype, Element, Error, Stream};
use mlxcel_amdgpu_testkit::fixtures::QuantizedUpload;
use mlxcel_amdgpu_testkit::reference::data::{NormalRng, normal};
use mlxcel_amdgpu_testkit::reference::moe::{GatedInputs, dense_gated_reference, gated_inputs};

/// `m` tokens over one layer: `x [m, din]`, `idx [m, k]` (distinct within a
/// token, repeated across tokens), `scores [m, k]`; the weights of `layer`.
struct Tokens {
    layer: GatedInputs,
    m: usize,
    x: Vec<f32>,
    idx: Vec<u32>,
    scores: Vec<f32>,
}

/// A layer of `n_experts` experts (`k` chosen per token) and `m` tokens whose
/// ids `(t + 2 j) % n_experts` make tokens share experts.
#[allow(clippy::too_many_arguments)]
fn tokens(
    dtype: Dtype,
    m: usize,
    n_experts: usize,
    k: usize,
    bits: u32,
    down_bits: u32,
    gs: usize,
    seed: u64,
) -> Tokens {
    let (din, dff) = (256, 128);
    let layer = gated_inputs(dtype, din, dff, n_experts, k, bits, down_bits, gs, seed);
    let x = normal(dtype, seed ^ 0xBA7C, m * din, 1.0);
    let idx = (0..m).flat_map(|t| (0..k).map(move |j| ((t + 2 * j) % n_experts) as u32)).collect();
    let mut rng = NormalRng::new(seed ^ 0x5C0E);
    let scores = (0..m)
        .flat_map(|_| {
            let s: Vec<f32> = (0..k).map(|_| 0.2 + rng.next_below(1000) as f32 / 1000.0).collect();
            let sum: f32 = s.iter().sum();
            s.into_iter().map(move |v| v / sum)
        })
        .collect();
    Tokens { layer, m, x, idx, scores }
}

impl Tokens {
    /// The gate/up shape (`k` slots of one token) and the down shape.
    fn shapes(&self) -> (MoeShape, MoeShape) {
        let l = &self.layer;
        let gate_up = MoeShape {
            n_experts: l.n_experts as u32,
            k: l.idx.len() as u32,
            din: l.gate.cols as u32,
            dff: l.down.cols as u32,
            bits: l.gate.bits,
            group_size: l.gate.group_size as u32,
        };
        (gate_up, MoeShape { bits: l.down.bits, ..gate_up })
    }

    /// Token `t` as a single-token block.
    fn token(&self, t: usize) -> GatedInputs {
        let (din, k) = (self.layer.gate.cols, self.layer.idx.len());
        GatedInputs {
            x: self.x[t * din..(t + 1) * din].to_vec(),
            idx: self.idx[t * k..(t + 1) * k].to_vec(),
            scores: self.scores[t * k..(t + 1) * k].to_vec(),
            ..self.layer.clone()
        }
    }
}

/// The layer's stacks on a device.
struct Weights<T> {
    gate: QuantizedUpload<T>,
    up: QuantizedUpload<T>,
    down: QuantizedUpload<T>,
}

fn weights<T: Element>(dev: &Device, l: &GatedInputs) -> Weights<T> {
    Weights {
        gate: QuantizedUpload::new(dev, &l.gate).unwrap(),
        up: QuantizedUpload::new(dev, &l.up).unwrap(),
        down: QuantizedUpload::new(dev, &l.down).unwrap(),
    }
}

fn poisoned<T: Element>(dev: &Device, n: usize) -> DeviceBuffer<T> {
    let mut b = dev.alloc::<T>(n).unwrap();
    b.fill_bytes(0xFF).unwrap();
    b
}

fn upload_as<T: Element>(dev: &Device, v: &[f32]) -> DeviceBuffer<T> {
    dev.upload(&v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>()).unwrap()
}

/// The storage bits of `act`, `part` and `out` of `m` tokens (`x [m, din]`,
/// `idx`, `scores [m, k]`), and the values of `out`, by the batch launches, or
/// by one single-token launch of each kind per token (`batch` false).
fn run<T: Element>(
    dev: &Device,
    w: &Weights<T>,
    tok: &Tokens,
    activation: Activation,
    batch: bool,
) -> ([Vec<u32>; 3], Vec<f32>) {
    let (gu, dn) = tok.shapes();
    let (m, k, din, dff) = (tok.m, gu.k as usize, gu.din as usize, gu.dff as usize);
    let parts = if batch { vec![(0, m)] } else { (0..m).map(|t| (t, 1)).collect() };
    let (mut bits, mut values) = ([Vec::new(), Vec::new(), Vec::new()], Vec::new());
    for (t, n) in parts {
        let x = upload_as::<T>(dev, &tok.x[t * din..(t + n) * din]);
        let idx = dev.upload(&tok.idx[t * k..(t + n) * k]).unwrap();
        let scores = dev.upload(&tok.scores[t * k..(t + n) * k]).unwrap();
        let mut act = poisoned::<f32>(dev, n * k * dff);
        let mut part = poisoned::<f32>(dev, n * k * din);
        let mut out = poisoned::<T>(dev, n * din);
        let bufs =
            GatedBuffers { x: &x, idx: &idx, gate: w.gate.buffers(), up: w.up.buffers(), act: &mut act, status: None };
        if batch {
            run_gateup_batch::<T>(dev, bufs, activation, &gu, n as u32, Stream::DEFAULT).unwrap();
            let down = DownBatchBuffers {
                idx: &idx,
                w2: w.down.buffers(),
                act: &act,
                scores: &scores,
                part: &mut part,
                status: None,
            };
            run_down_batch::<T>(dev, down, &dn, n as u32, Stream::DEFAULT).unwrap();
            run_combine_batch::<T>(dev, &part, &mut out, n as u32, gu.k, gu.din, Stream::DEFAULT).unwrap();
        } else {
            run_gateup::<T>(dev, bufs, activation, &gu, Stream::DEFAULT).unwrap();
            moe::run_down::<T>(dev, &idx, w.down.buffers(), &act, &scores, &mut part, &dn, None, Stream::DEFAULT)
                .unwrap();
            moe::run_combine::<T>(dev, &part, &mut out, gu.k, gu.din, Stream::DEFAULT).unwrap();
        }
        bits[0].extend(download_bits(&act));
        bits[1].extend(download_bits(&part));
        bits[2].extend(download_bits(&out));
        values.extend(download_values(&out));
    }
    (bits, values)
}

/// The cases of the batch tests: (bits, m, activation), with `m` 2, 3 and 8.
const CASES: [(u32, usize, Activation); 4] =
    [(4, 2, Activation::SwiGlu), (8, 3, Activation::GeGlu), (4, 8, Activation::GeGlu), (8, 8, Activation::SwiGlu)];

/// Each token's `act`, `part` and `out` of the batch launches are the
/// single-token launches' for that token, bit for bit, at 4 and 8 bits.
fn batch_is_bit_for_bit_the_single_token_launches<T: Element>(dev: &Device) {
    let n = Dtype::ALL.iter().position(|&d| d == T::DTYPE).unwrap() as u64;
    for (case, &(bits, m, activation)) in CASES.iter().enumerate() {
        let tok = tokens(T::DTYPE, m, 6, 3, bits, bits, 64, 900 + 10 * n + case as u64);
        let w = weights::<T>(dev, &tok.layer);
        let (single, _) = run(dev, &w, &tok, activation, false);
        let (batch, _) = run(dev, &w, &tok, activation, true);
        for (i, name) in ["act", "part", "out"].iter().enumerate() {
            let what = format!("{} {bits}-bit m {m} {activation:?}: {name}", label::<T>(dev));
            assert!(single[i].len() == batch[i].len(), "{what}: lengths");
            if let Some(at) = single[i].iter().zip(&batch[i]).position(|(a, b)| a != b) {
                panic!("{what}: element {at} is {:#x} in the batch, {:#x} alone", batch[i][at], single[i][at]);
            }
        }
    }
}

/// Each token's `out` of the batch launches against the dense f64 reference
/// of that token: nRMS < 5e-4, nMAX < 2e-2 beyond the final rounding, with
/// the negative control of [`assert_meets_dense`].
fn batch_meets_the_dense_reference<T: Element>(dev: &Device) {
    let n = Dtype::ALL.iter().position(|&d| d == T::DTYPE).unwrap() as u64;
    for (case, &(bits, m, activation)) in CASES.iter().enumerate() {
        let tok = tokens(T::DTYPE, m, 6, 3, bits, bits, 64, 950 + 10 * n + case as u64);
        let w = weights::<T>(dev, &tok.layer);
        let (_, out) = run(dev, &w, &tok, activation, true);
        let din = tok.layer.gate.cols;
        for t in 0..m {
            let got = &out[t * din..(t + 1) * din];
            let exact = dense_gated_reference(Dtype::F32, &tok.token(t), activation as u32);
            let what = format!("{} {bits}-bit m {m} {activation:?} token {t}", label::<T>(dev));
            assert_meets_dense(T::DTYPE, got, &exact, &what);
            assert!(got.iter().any(|&v| v != 0.0), "{what}: all zero");
        }
    }
}

/// `m = 1` launches the single-token kernels: a 6-bit down projection (which
/// `moe_down_batch` does not take) runs, as `moe_down6` does.
fn one_token_takes_the_single_token_kernels(dev: &Device) {
    type T = mlxcel_amdgpu::half::bf16;
    let tok = tokens(Dtype::Bf16, 1, 6, 3, 4, 6, 64, 77);
    let w = weights::<T>(dev, &tok.layer);
    let (single, _) = run(dev, &w, &tok, Activation::SwiGlu, false);
    let (batch, _) = run(dev, &w, &tok, Activation::SwiGlu, true);
    assert_eq!(single, batch, "{}: m = 1 with 6-bit down", label::<T>(dev));
}

/// Out-of-range ids in a batch: NaN rows for those slots only, and `1 + t k + j`
/// of the first bad slot in flat order in the status word, from both kernels.
fn an_expert_id_out_of_range_gives_nan_rows_and_the_first_flat_slot(dev: &Device) {
    type T = mlxcel_amdgpu::half::bf16;
    let mut tok = tokens(Dtype::Bf16, 3, 6, 3, 4, 4, 64, 41);
    // Token 1's slot 2 (flat 5) and token 2's slot 0 (flat 6); flat 2 holds
    // a good id that a later bad slot must not take over.
    tok.idx[5] = 6;
    tok.idx[6] = 0xFFFF_FFFF;
    let (gu, dn) = tok.shapes();
    let (m, k, din, dff) = (tok.m, gu.k as usize, gu.din as usize, gu.dff as usize);
    let w = weights::<T>(dev, &tok.layer);
    let x = upload_as::<T>(dev, &tok.x);
    let idx = dev.upload(&tok.idx).unwrap();
    let scores = dev.upload(&tok.scores).unwrap();
    let mut act = dev.alloc::<f32>(m * k * dff).unwrap();
    act.fill_bytes(0).unwrap();
    let mut part = dev.alloc::<f32>(m * k * din).unwrap();
    part.fill_bytes(0).unwrap();
    let mut status = dev.upload(&[0u32]).unwrap();
    let bufs = GatedBuffers {
        x: &x,
        idx: &idx,
        gate: w.gate.buffers(),
        up: w.up.buffers(),
        act: &mut act,
        status: Some(&mut status),
    };
    run_gateup_batch::<T>(dev, bufs, Activation::SwiGlu, &gu, m as u32, Stream::DEFAULT).unwrap();
    let gateup_status = status.download().unwrap()[0];
    status.fill_bytes(0).unwrap();
    let bufs = DownBatchBuffers {
        idx: &idx,
        w2: w.down.buffers(),
        act: &act,
        scores: &scores,
        part: &mut part,
        status: Some(&mut status),
    };
    run_down_batch::<T>(dev, bufs, &dn, m as u32, Stream::DEFAULT).unwrap();
    let down_status = status.download().unwrap()[0];
    let what = label::<T>(dev);
    assert_eq!((gateup_status, down_status), (6, 6), "{what}: 1 + the first bad flat slot (5)");
    let (act, part): (Vec<f32>, Vec<f32>) = (act.download().unwrap(), part.download().unwrap());
    for slot in 0..m * k {
        let bad = slot == 5 || slot == 6;
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

/// Every batch launch of `tok` (`m` tokens claimed, the buffers sized for
/// them) with its shapes changed by `change`: the first refusal, or Ok.
fn launch_all(tok: &Tokens, m: u32, change: impl Fn(MoeShape) -> MoeShape) -> [Result<(), Error>; 3] {
    type T = mlxcel_amdgpu::half::bf16;
    let dev = Device::cpu();
    let (gu, dn) = tok.shapes();
    let (gu, dn) = (change(gu), change(dn));
    let w = weights::<T>(&dev, &tok.layer);
    let x = upload_as::<T>(&dev, &tok.x);
    let idx = dev.upload(&tok.idx).unwrap();
    let scores = dev.upload(&tok.scores).unwrap();
    let (slots, din, dff) = (tok.idx.len(), tok.layer.gate.cols, tok.layer.down.cols);
    let mut act = dev.alloc::<f32>(slots * dff).unwrap();
    let mut part = dev.alloc::<f32>(slots * din).unwrap();
    let mut out = dev.alloc::<T>(tok.m * din).unwrap();
    let bufs =
        GatedBuffers { x: &x, idx: &idx, gate: w.gate.buffers(), up: w.up.buffers(), act: &mut act, status: None };
    let g = run_gateup_batch::<T>(&dev, bufs, Activation::SwiGlu, &gu, m, Stream::DEFAULT);
    let bufs =
        DownBatchBuffers { idx: &idx, w2: w.down.buffers(), act: &act, scores: &scores, part: &mut part, status: None };
    let d = run_down_batch::<T>(&dev, bufs, &dn, m, Stream::DEFAULT);
    let c = run_combine_batch::<T>(&dev, &part, &mut out, m, gu.k, gu.din, Stream::DEFAULT);
    [g, d, c]
}

/// `m = 0` is refused by all three launches, naming `m`.
fn zero_tokens_are_refused() {
    let tok = tokens(Dtype::Bf16, 1, 6, 3, 4, 4, 64, 3);
    for r in launch_all(&tok, 0, |s| s) {
        refused(r, "m");
    }
}

/// `m = 9`, one above `MAX_BATCH_TOKENS`, is refused, naming `m`.
fn nine_tokens_are_refused() {
    assert_eq!(moe::MAX_BATCH_TOKENS, 8);
    let tok = tokens(Dtype::Bf16, 9, 6, 3, 4, 4, 64, 4);
    for r in launch_all(&tok, 9, |s| s) {
        refused(r, "m");
    }
}

/// `m * k` above `MAX_BATCH_SLOTS` (2 tokens of 257 slots) is refused, naming `k`;
/// 2 of 256 is not.
fn more_than_512_slots_are_refused() {
    assert_eq!(moe::MAX_BATCH_SLOTS, 512);
    let tok = tokens(Dtype::Bf16, 2, 6, 3, 4, 4, 64, 5);
    for r in launch_all(&tok, 2, |s| MoeShape { k: 257, ..s }) {
        refused(r, "k");
    }
    assert!(moe::check_batch(2, 256).is_ok());
}

/// A 6-bit down projection for three tokens (`moe_down6` over the flat slots),
/// experts shared across tokens: each token bit for bit its single-token launches.
fn six_bit_down_is_bit_for_bit_per_token(dev: &Device) {
    type T = mlxcel_amdgpu::half::bf16;
    let tok = tokens(Dtype::Bf16, 3, 6, 3, 4, 6, 64, 6);
    let w = weights::<T>(dev, &tok.layer);
    let (single, _) = run(dev, &w, &tok, Activation::SwiGlu, false);
    let (batch, _) = run(dev, &w, &tok, Activation::SwiGlu, true);
    assert_eq!(single, batch, "{}: m = 3 with 6-bit down", label::<T>(dev));
    assert!(batch[1].iter().any(|&v| v != 0), "{}: m = 3 with 6-bit down: part all zero", label::<T>(dev));
}

/// A 6-bit down projection keeps the batch limits: nine tokens are refused, naming `m`.
fn six_bit_down_keeps_the_token_limit() {
    let tok = tokens(Dtype::Bf16, 2, 6, 3, 4, 6, 64, 6);
    let [_, d, _] = launch_all(&tok, 9, |s| s);
    refused(d, "m");
}

fn availability_matches_the_backends<T: Element>(dev: &Device) {
    assert!(moe::batch_available(dev, T::DTYPE), "{}: the batch kernels are built for every dtype", label::<T>(dev));
}

fn main() {
    Suite::new()
        .per_backend_and_dtype(
            "batch_is_bit_for_bit_the_single_token_launches",
            typed!(batch_is_bit_for_bit_the_single_token_launches),
        )
        .per_backend_and_dtype("batch_meets_the_dense_reference", typed!(batch_meets_the_dense_reference))
        .per_backend("one_token_takes_the_single_token_kernels", one_token_takes_the_single_token_kernels)
        .per_backend(
            "an_expert_id_out_of_range_gives_nan_rows_and_the_first_flat_slot",
            an_expert_id_out_of_range_gives_nan_rows_and_the_first_flat_slot,
        )
        .single("zero_tokens_are_refused", zero_tokens_are_refused)
        .single("nine_tokens_are_refused", nine_tokens_are_refused)
        .single("more_than_512_slots_are_refused", more_than_512_slots_are_refused)
        .per_backend("six_bit_down_is_bit_for_bit_per_token", six_bit_down_is_bit_for_bit_per_token)
        .single("six_bit_down_keeps_the_token_limit", six_bit_down_keeps_the_token_limit)
        .per_backend_and_dtype("availability_matches_the_backends", typed!(availability_matches_the_backends))
        .run()
}
