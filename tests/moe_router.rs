//! The router of the routed experts (`moe_router_logits`, its quantized form
//! `moe_router_logits_q`, and `moe_topk`) on every backend present, against
//! `reference::moe::{router_logits, topk}` (over the dequantized router for
//! `moe_router_logits_q`).
//!
//! - Logits: `max|got - want| / max|want| < 1e-5` against sums in f64 (f32 fmas
//!   over at most a few thousand products).
//! - Selection: the ids equal the reference's exactly (the test logits have no
//!   two probabilities within f32 rounding of each other, except the planted
//!   ties, which both sides break towards the lower id); the scores within
//!   1e-6 relative (the f32 softmax against f64).

mod common;

use common::{Suite, download_values, label};
use mlxcel_amdgpu::half::{bf16, f16};
use mlxcel_amdgpu::kernels::moe::router::{
    self, QuantRouterBuffers, RouterPointers, RouterQuant, RouterShape, run_router_logits, run_router_logits_q,
    run_topk,
};
use mlxcel_amdgpu::{Device, DeviceBuffer, Dtype, Element, Error, Stream};
use mlxcel_amdgpu_testkit::reference::data::normal;
use mlxcel_amdgpu_testkit::reference::{metrics, moe};

fn upload_as<T: Element>(dev: &Device, v: &[f32]) -> DeviceBuffer<T> {
    dev.upload(&v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>()).unwrap()
}

fn poisoned<T: bytemuck::Pod>(dev: &Device, n: usize) -> DeviceBuffer<T> {
    let mut b = dev.alloc::<T>(n).unwrap();
    b.fill_bytes(0xFF).unwrap();
    b
}

/// `max|got - want| / max|want|`: the logits' error bound.
fn error_over_largest(got: &[f32], want: &[f32]) -> f64 {
    metrics::max_abs_diff(got, want) / metrics::max_abs_diff(want, &vec![0.0f32; want.len()])
}

/// The router's logits for `m` tokens of `din` values and `n_experts` rows,
/// against the f64 reference; returns them.
fn check_logits<T: Element>(dev: &Device, m: usize, n_experts: usize, din: usize, seed: u64) -> Vec<f32> {
    let x = normal(T::DTYPE, seed, m * din, 1.0);
    let wr = normal(T::DTYPE, seed + 1, n_experts * din, 0.05);
    let shape = RouterShape { m: m as u32, n_experts: n_experts as u32, din: din as u32, k: 1 };
    let mut logits = poisoned::<f32>(dev, m * n_experts);
    run_router_logits::<T>(dev, &upload_as(dev, &x), &upload_as(dev, &wr), &mut logits, &shape, Stream::DEFAULT)
        .unwrap();
    let got = download_values(&logits);
    let want = moe::router_logits(&x, &wr, m, n_experts, din);
    let e = error_over_largest(&got, &want);
    assert!(e < 1e-5, "{} logits m {m} E {n_experts} din {din}: error {e:e}", label::<T>(dev));
    got
}

/// `moe_topk` of `logits` against the reference: ids exact, scores within 1e-6.
fn check_topk(
    dev: &Device,
    logits: &[f32],
    m: usize,
    n_experts: usize,
    k: usize,
    renorm: bool,
) -> (Vec<u32>, Vec<f32>) {
    let shape = RouterShape { m: m as u32, n_experts: n_experts as u32, din: 1, k: k as u32 };
    let mut ids = poisoned::<u32>(dev, m * k);
    let mut scores = poisoned::<f32>(dev, m * k);
    run_topk(dev, &dev.upload(logits).unwrap(), &mut ids, &mut scores, &shape, renorm, Stream::DEFAULT).unwrap();
    let (ids, scores) = (ids.download().unwrap(), scores.download().unwrap());
    let (want_ids, want_scores) = moe::topk(logits, m, n_experts, k, renorm);
    let what = format!("{} topk m {m} E {n_experts} k {k} renorm {renorm}", dev.backend());
    assert_eq!(ids, want_ids, "{what}: ids");
    for (i, (&g, &w)) in scores.iter().zip(&want_scores).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || ((g - w).abs() as f64) <= 1e-6 * (w.abs() as f64).max(1e-30);
        assert!(ok, "{what}: score {i}: got {g:e}, want {w:e}");
    }
    (ids, scores)
}

/// Logits whose probabilities are at least 1e-3 apart in relative terms: a
/// shuffled ramp, so the selection has no near ties.
fn spread_logits(m: usize, n_experts: usize, seed: u64) -> Vec<f32> {
    let mut rng = mlxcel_amdgpu_testkit::reference::data::NormalRng::new(seed);
    let mut out = Vec::with_capacity(m * n_experts);
    for _ in 0..m {
        let mut row: Vec<f32> = (0..n_experts).map(|e| -4.0 + 8.0 * e as f32 / n_experts as f32).collect();
        for i in (1..row.len()).rev() {
            row.swap(i, rng.next_below(i + 1));
        }
        out.extend(row);
    }
    out
}

// ---------------------------------------------------------------------------
// moe_router_logits
// ---------------------------------------------------------------------------

/// Every token count from one to eight (the kernel is built for each), rows
/// of whole aligned chunks: 33, one past a wave's 32.
fn logits_every_dtype_and_token_count<T: Element>(dev: &Device) {
    for m in 1..=8 {
        check_logits::<T>(dev, m, 20, 264, 10 + m as u64);
    }
}

/// Rows longer than one batch of the workgroup's lanes (`geometry::moe_router::
/// batch` chunks a lane), ending in a partial batch: bf16 with one
/// token (4 chunks a lane), f16 with three (2), f32 with eight (1).
fn logits_long_rows_take_several_batches(dev: &Device) {
    check_logits::<bf16>(dev, 1, 3, 8 * (2 * 1024 + 300), 14);
    check_logits::<f16>(dev, 3, 4, 8 * (512 + 400), 15);
    check_logits::<f32>(dev, 8, 5, 8 * (3 * 256 + 37), 16);
}

/// Rows that are not whole chunks take single values: same tolerance.
fn logits_odd_rows_take_the_value_path(dev: &Device) {
    check_logits::<bf16>(dev, 2, 9, 131, 21);
    check_logits::<f32>(dev, 5, 3, 7, 22);
    check_logits::<f16>(dev, 7, 2, 603, 23);
}

/// A token matrix one element into its buffer (not 16-byte aligned) takes the
/// value path too.
fn logits_misaligned_x_takes_the_value_path(dev: &Device) {
    let (m, e, din) = (2, 12, 64);
    let x = normal(Dtype::Bf16, 31, m * din, 1.0);
    let wr = normal(Dtype::Bf16, 32, e * din, 0.05);
    let mut shifted = vec![0.0f32];
    shifted.extend(&x);
    let xs = upload_as::<bf16>(dev, &shifted);
    let w = upload_as::<bf16>(dev, &wr);
    let logits = poisoned::<f32>(dev, m * e);
    let shape = RouterShape { m: m as u32, n_experts: e as u32, din: din as u32, k: 1 };
    unsafe {
        router::router_logits(dev, Dtype::Bf16, shape.logits_args(xs.ptr() + 2, w.ptr(), logits.ptr()), Stream::DEFAULT)
    }
    .unwrap();
    let got = download_values(&logits);
    let want = moe::router_logits(&x, &wr, m, e, din);
    let err = error_over_largest(&got, &want);
    assert!(err < 1e-5, "{}: misaligned x: error {err:e}", dev.backend());
}

// ---------------------------------------------------------------------------
// moe_router_logits_q
// ---------------------------------------------------------------------------

/// The router quantized as MLX quantizes it, on the device.
struct QuantRouter<T: Element> {
    q: moe::Quantized,
    wq: DeviceBuffer<u32>,
    sq: DeviceBuffer<T>,
    bq: DeviceBuffer<T>,
}

impl<T: Element> QuantRouter<T> {
    fn new(dev: &Device, n_experts: usize, din: usize, quant: RouterQuant, seed: u64) -> Self {
        let w = normal(Dtype::F32, seed, n_experts * din, 0.05);
        let q = moe::quantize(T::DTYPE, &w, n_experts, din, quant.bits, quant.group_size as usize);
        let (wq, sq, bq) =
            (dev.upload(&q.words).unwrap(), upload_as::<T>(dev, &q.scales), upload_as::<T>(dev, &q.biases));
        QuantRouter { q, wq, sq, bq }
    }

    fn buffers(&self) -> QuantRouterBuffers<'_, T> {
        QuantRouterBuffers { wq: &self.wq, sq: &self.sq, bq: &self.bq }
    }
}

/// `moe_router_logits_q` of `m` tokens against f64 sums over the dequantized
/// router (the same tolerance as the dense router); returns the logits.
fn check_logits_q<T: Element>(
    dev: &Device,
    m: usize,
    n_experts: usize,
    din: usize,
    quant: RouterQuant,
    seed: u64,
) -> Vec<f32> {
    let x = normal(T::DTYPE, seed, m * din, 1.0);
    let router = QuantRouter::<T>::new(dev, n_experts, din, quant, seed + 1);
    let shape = RouterShape { m: m as u32, n_experts: n_experts as u32, din: din as u32, k: 1 };
    let mut logits = poisoned::<f32>(dev, m * n_experts);
    run_router_logits_q::<T>(dev, &upload_as(dev, &x), router.buffers(), quant, &mut logits, &shape, Stream::DEFAULT)
        .unwrap();
    let got = download_values(&logits);
    let want = moe::router_logits(&x, &moe::dequantize(&router.q), m, n_experts, din);
    let e = error_over_largest(&got, &want);
    let what = format!(
        "{} quantized logits {}-bit g{} m {m} E {n_experts} din {din}",
        label::<T>(dev),
        quant.bits,
        quant.group_size
    );
    assert!(e < 1e-5, "{what}: error {e:e}");
    got
}

/// 4 and 8 bits, groups of 32, 64 and 128, every token count (the kernel is
/// built for each), E 33 (one past a wave), rows of one or two quads a lane.
fn quantized_logits_every_format_and_token_count<T: Element>(dev: &Device) {
    for (i, (bits, group_size)) in [(4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)].into_iter().enumerate() {
        for m in 1..=8 {
            check_logits_q::<T>(
                dev,
                m,
                33,
                2 * 1024 + 384,
                RouterQuant { bits, group_size },
                100 + 10 * i as u64 + m as u64,
            );
        }
    }
}

/// Qwen3-30B-A3B's router as mlx-lm quantizes it (8 bits, group 64), then the
/// selection from those logits.
fn qwen3_30b_a3b_quantized_router(dev: &Device) {
    for m in [1, 8] {
        let quant = RouterQuant { bits: 8, group_size: 64 };
        let logits = check_logits_q::<bf16>(dev, m, 128, 2048, quant, 60 + m as u64);
        check_topk(dev, &logits, m, 128, 8, true);
    }
}

/// A token matrix one element into its buffer (not 16-byte aligned) takes
/// single-value loads: same tolerance.
fn quantized_logits_misaligned_x(dev: &Device) {
    let (m, e, din, quant) = (3, 12, 256, RouterQuant { bits: 4, group_size: 64 });
    let x = normal(Dtype::F16, 71, m * din, 1.0);
    let router = QuantRouter::<f16>::new(dev, e, din, quant, 72);
    let mut shifted = vec![0.0f32];
    shifted.extend(&x);
    let xs = upload_as::<f16>(dev, &shifted);
    let logits = poisoned::<f32>(dev, m * e);
    let shape = RouterShape { m: m as u32, n_experts: e as u32, din: din as u32, k: 1 };
    let args =
        shape.logits_q_args(xs.ptr() + 2, router.wq.ptr(), router.sq.ptr(), router.bq.ptr(), logits.ptr(), quant);
    unsafe { router::router_logits_q(dev, Dtype::F16, args, Stream::DEFAULT) }.unwrap();
    let got = download_values(&logits);
    let want = moe::router_logits(&x, &moe::dequantize(&router.q), m, e, din);
    let err = error_over_largest(&got, &want);
    assert!(err < 1e-5, "{}: quantized, misaligned x: error {err:e}", dev.backend());
}

/// Codes one word into their buffer (4-byte but not 16-byte aligned, as MLX's
/// CPU allocator hands them out) take four word loads a quad: the same logits,
/// bit for bit, as the aligned codes.
fn quantized_logits_codes_off_16_bytes(dev: &Device) {
    let (m, e, din, quant) = (5, 40, 512, RouterQuant { bits: 8, group_size: 64 });
    let x = normal(Dtype::Bf16, 73, m * din, 1.0);
    let xs = upload_as::<bf16>(dev, &x);
    let router = QuantRouter::<bf16>::new(dev, e, din, quant, 74);
    let shifted: Vec<u32> = core::iter::once(0).chain(router.q.words.iter().copied()).collect();
    let wq = dev.upload(&shifted).unwrap();
    let shape = RouterShape { m: m as u32, n_experts: e as u32, din: din as u32, k: 1 };
    let run = |wq: u64| {
        let logits = poisoned::<f32>(dev, m * e);
        let args = shape.logits_q_args(xs.ptr(), wq, router.sq.ptr(), router.bq.ptr(), logits.ptr(), quant);
        unsafe { router::router_logits_q(dev, Dtype::Bf16, args, Stream::DEFAULT) }.unwrap();
        download_values(&logits)
    };
    // The two paths this compares: a quad a load, and four words a quad.
    assert!(router.wq.ptr().is_multiple_of(16) && !(wq.ptr() + 4).is_multiple_of(16));
    let (aligned, off) = (run(router.wq.ptr()), run(wq.ptr() + 4));
    assert_eq!(
        aligned.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        off.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "{}: codes off 16 bytes",
        dev.backend()
    );
}

// ---------------------------------------------------------------------------
// moe_topk
// ---------------------------------------------------------------------------

/// Qwen3-30B-A3B's router (E 128, K 8, renormalized) for one to eight tokens,
/// from the logits kernel's own output.
fn qwen3_30b_a3b_router(dev: &Device) {
    for m in [1, 8] {
        let logits = check_logits::<bf16>(dev, m, 128, 2048, 40 + m as u64);
        check_topk(dev, &logits, m, 128, 8, true);
    }
}

/// Qwen3-Next-80B-A3B's (E 512, K 10, renormalized).
fn qwen3_next_router(dev: &Device) {
    let logits = check_logits::<bf16>(dev, 2, 512, 2048, 50);
    check_topk(dev, &logits, 2, 512, 10, true);
}

/// Every K from 1 to the limit, with and without renormalization, expert
/// counts below, at and above one per lane, each count of groups a lane holds
/// (1, 2, 4 and 8: E 100, 200, 512 and 1024), and the largest.
fn topk_every_k_and_expert_count(dev: &Device) {
    for (n_experts, ks) in
        [(5, &[1, 5][..]), (32, &[2, 16]), (100, &[1, 7, 16]), (200, &[8]), (512, &[10]), (1024, &[16])]
    {
        let logits = spread_logits(3, n_experts, n_experts as u64);
        for &k in ks {
            for renorm in [false, true] {
                check_topk(dev, &logits, 3, n_experts, k, renorm);
            }
        }
    }
}

/// Equal logits give equal probabilities; the lower expert id comes first.
fn topk_ties_go_to_the_lower_id(dev: &Device) {
    let mut logits = spread_logits(2, 64, 7);
    // Token 0: experts 3, 40 and 63 tie at the top; token 1: all equal.
    for e in [3, 40, 63] {
        logits[e] = 9.0;
    }
    logits[64..].fill(0.5);
    let (ids, _) = check_topk(dev, &logits, 2, 64, 4, false);
    assert_eq!(&ids[..3], &[3, 40, 63], "{}: the tie at the top", dev.backend());
    assert_eq!(&ids[4..], &[0, 1, 2, 3], "{}: all tied", dev.backend());
}

/// A NaN or +inf logit, or a row of -inf ones, chooses no expert: ids
/// `u32::MAX`, scores NaN; the other tokens are unaffected.
fn topk_non_finite_rows_choose_nothing(dev: &Device) {
    let n_experts = 40;
    let mut logits = spread_logits(4, n_experts, 9);
    logits[5] = f32::NAN;
    logits[n_experts + 7] = f32::INFINITY;
    logits[2 * n_experts..3 * n_experts].fill(f32::NEG_INFINITY);
    let (ids, scores) = check_topk(dev, &logits, 4, n_experts, 3, true);
    for t in 0..3 {
        assert!(ids[t * 3..t * 3 + 3].iter().all(|&i| i == u32::MAX), "{}: token {t} ids", dev.backend());
        assert!(scores[t * 3..t * 3 + 3].iter().all(|s| s.is_nan()), "{}: token {t} scores", dev.backend());
    }
    assert!(ids[9..].iter().all(|&i| (i as usize) < n_experts), "{}: token 3 is finite", dev.backend());
}

/// A -inf logit is a probability of 0: chosen last, never in place of a
/// finite one.
fn topk_negative_infinity_is_chosen_last(dev: &Device) {
    let mut logits = spread_logits(1, 8, 3);
    logits[2] = f32::NEG_INFINITY;
    logits[6] = f32::NEG_INFINITY;
    let (ids, scores) = check_topk(dev, &logits, 1, 8, 8, false);
    assert_eq!(&ids[6..], &[2, 6], "{}", dev.backend());
    assert_eq!(&scores[6..], &[0.0, 0.0], "{}", dev.backend());
}

// ---------------------------------------------------------------------------
// Both launches in one call (the C ABI's `mlxcel_amdgpu_moe_router`)
// ---------------------------------------------------------------------------

/// `router::router` enqueues the same two launches: its logits, ids and
/// scores are bit for bit those of the launches run one by one, and the
/// selection is the reference's.
fn the_pair_in_one_call_is_the_two_launches(dev: &Device) {
    let shape = RouterShape { m: 3, n_experts: 64, din: 256, k: 6 };
    let (m, e, k, din) = (3, 64, 6, 256);
    let x = upload_as::<bf16>(dev, &normal(Dtype::Bf16, 81, m * din, 1.0));
    let wr = upload_as::<bf16>(dev, &normal(Dtype::Bf16, 82, e * din, 0.05));
    for renorm in [false, true] {
        let mut logits = poisoned::<f32>(dev, m * e);
        let mut ids = poisoned::<u32>(dev, m * k);
        let mut scores = poisoned::<f32>(dev, m * k);
        run_router_logits::<bf16>(dev, &x, &wr, &mut logits, &shape, Stream::DEFAULT).unwrap();
        run_topk(dev, &logits, &mut ids, &mut scores, &shape, renorm, Stream::DEFAULT).unwrap();
        let one = poisoned::<f32>(dev, m * e);
        let (one_ids, one_scores) = (poisoned::<u32>(dev, m * k), poisoned::<f32>(dev, m * k));
        let p = RouterPointers {
            x: x.ptr(),
            wr: wr.ptr(),
            logits: one.ptr(),
            ids: one_ids.ptr(),
            scores: one_scores.ptr(),
        };
        unsafe { router::router(dev, Dtype::Bf16, p, &shape, renorm, Stream::DEFAULT) }.unwrap();
        let what = format!("{} router renorm {renorm}", dev.backend());
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_eq!(bits(one.download().unwrap()), bits(logits.download().unwrap()), "{what}: logits");
        assert_eq!(one_ids.download().unwrap(), ids.download().unwrap(), "{what}: ids");
        assert_eq!(bits(one_scores.download().unwrap()), bits(scores.download().unwrap()), "{what}: scores");
        check_topk(dev, &download_values(&one), m, e, k, renorm);
    }
}

// ---------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------

fn refused(r: Result<(), Error>, argument: &str) {
    match r.map_err(|e| e.root().clone()) {
        Err(Error::InvalidArgument { argument: a, .. }) if a == argument => {}
        other => panic!("expected a refusal of `{argument}`, got {other:?}"),
    }
}

/// Token counts, expert counts and K beyond the limits, and short buffers, are
/// named errors before any launch.
fn bad_router_shapes_are_refused() {
    let dev = Device::cpu();
    let good = RouterShape { m: 2, n_experts: 16, din: 8, k: 4 };
    let x = dev.alloc::<bf16>(64).unwrap();
    let wr = dev.alloc::<bf16>(16 * 8).unwrap();
    let mut logits = dev.alloc::<f32>(8 * 1025).unwrap();
    let mut ids = dev.alloc::<u32>(8 * 17).unwrap();
    let mut scores = dev.alloc::<f32>(8 * 17).unwrap();
    let lg = |shape: RouterShape, logits: &mut DeviceBuffer<f32>| {
        run_router_logits::<bf16>(&dev, &x, &wr, logits, &shape, Stream::DEFAULT)
    };
    refused(lg(RouterShape { m: 0, ..good }, &mut logits), "m");
    refused(lg(RouterShape { m: 9, ..good }, &mut logits), "m");
    refused(lg(RouterShape { n_experts: 0, ..good }, &mut logits), "n_experts");
    refused(lg(RouterShape { din: 0, ..good }, &mut logits), "din");
    refused(lg(RouterShape { n_experts: 17, ..good }, &mut logits), "wr");
    let mut short = dev.alloc::<f32>(2 * 16 - 1).unwrap();
    refused(lg(good, &mut short), "logits");
    let mut tk = |shape: RouterShape| run_topk(&dev, &logits, &mut ids, &mut scores, &shape, true, Stream::DEFAULT);
    refused(tk(RouterShape { n_experts: 1025, ..good }), "n_experts");
    refused(tk(RouterShape { k: 0, ..good }), "k");
    refused(tk(RouterShape { k: 17, n_experts: 64, ..good }), "k");
    refused(tk(RouterShape { k: 5, n_experts: 4, ..good }), "k");
    refused(tk(RouterShape { m: 9, ..good }), "m");
    assert!(good.validate().is_ok());
    refused(RouterShape { k: 17, ..good }.validate(), "k");
}

/// The quantized router's format and codes pointer: bits other than 4 and 8,
/// groups other than 32, 64, 128, rows not whole groups, codes not aligned to
/// their words, and short buffers are named errors before any launch.
fn bad_quantized_routers_are_refused() {
    let dev = Device::cpu();
    let (e, din) = (16u32, 256u32);
    let good = RouterQuant { bits: 8, group_size: 64 };
    let shape = RouterShape { m: 2, n_experts: e, din, k: 4 };
    let x = dev.alloc::<bf16>(2 * din as usize).unwrap();
    let wq = dev.alloc::<u32>((e * din / 4) as usize + 4).unwrap();
    let (sq, bq) =
        (dev.alloc::<bf16>((e * din / 32) as usize).unwrap(), dev.alloc::<bf16>((e * din / 32) as usize).unwrap());
    let mut logits = dev.alloc::<f32>((2 * e) as usize).unwrap();
    let mut lg = |quant: RouterQuant, shape: RouterShape| {
        let w = QuantRouterBuffers { wq: &wq, sq: &sq, bq: &bq };
        run_router_logits_q::<bf16>(&dev, &x, w, quant, &mut logits, &shape, Stream::DEFAULT)
    };
    lg(good, shape).unwrap();
    refused(lg(RouterQuant { bits: 6, ..good }, shape), "bits");
    refused(lg(RouterQuant { bits: 2, ..good }, shape), "bits");
    refused(lg(RouterQuant { group_size: 16, ..good }, shape), "group_size");
    refused(lg(RouterQuant { group_size: 256, ..good }, shape), "group_size");
    refused(lg(RouterQuant { group_size: 128, ..good }, RouterShape { din: 192, ..shape }), "din");
    refused(lg(good, RouterShape { m: 9, ..shape }), "m");
    refused(lg(good, RouterShape { n_experts: e + 1, ..shape }), "wq");
    refused(RouterQuant { bits: 5, ..good }.validate(din), "bits");
    let args = shape.logits_q_args(x.ptr(), wq.ptr() + 2, sq.ptr(), bq.ptr(), logits.ptr(), good);
    refused(unsafe { router::router_logits_q(&dev, Dtype::Bf16, args, Stream::DEFAULT) }, "wq");
}

/// The shared expert's gate row (one more workgroup of `moe_router_logits`,
/// into `gate_logits`) and slot (`moe_topk` with `shared` 1: slot K of each
/// token is id E with the sigmoid of its gate logit, never renormalized), through
/// the raw launchers: the routed logits, ids and scores are those without it.
fn the_shared_gate_row_and_slot(dev: &Device) {
    let (m, e, din, k) = (3usize, 40usize, 200usize, 4usize);
    let x = normal(Dtype::F32, 7, m * din, 1.0);
    let wr = normal(Dtype::F32, 8, e * din, 0.1);
    let ws = normal(Dtype::F32, 9, din, 0.1);
    let (xd, wrd, wsd) = (upload_as::<f32>(dev, &x), upload_as::<f32>(dev, &wr), upload_as::<f32>(dev, &ws));
    let logits = poisoned::<f32>(dev, m * e);
    let gate_logits = poisoned::<f32>(dev, m);
    let shape = RouterShape { m: m as u32, n_experts: e as u32, din: din as u32, k: k as u32 };
    let mut la = shape.logits_args(xd.ptr(), wrd.ptr(), logits.ptr());
    (la.ws, la.gate_logits) = (wsd.ptr(), gate_logits.ptr());
    unsafe { router::router_logits(dev, Dtype::F32, la, Stream::DEFAULT) }.unwrap();
    let (ids, scores) = (poisoned::<u32>(dev, m * (k + 1)), poisoned::<f32>(dev, m * (k + 1)));
    let mut ta = shape.topk_args(logits.ptr(), ids.ptr(), scores.ptr(), true);
    (ta.gate_logits, ta.shared) = (gate_logits.ptr(), 1);
    unsafe { router::topk(dev, ta, Stream::DEFAULT) }.unwrap();
    dev.synchronize().unwrap();

    let want_logits = moe::router_logits(&x, &wr, m, e, din);
    assert!(error_over_largest(&download_values(&logits), &want_logits) < 1e-5, "{}: routed logits", dev.backend());
    let want_gate = moe::router_logits(&x, &ws, m, 1, din);
    let got_gate = download_values(&gate_logits);
    assert!(error_over_largest(&got_gate, &want_gate) < 1e-5, "{}: gate logits {got_gate:?}", dev.backend());
    let (want_ids, want_scores) = moe::topk(&want_logits, m, e, k, true);
    let (got_ids, got_scores) = (ids.download().unwrap(), download_values(&scores));
    for t in 0..m {
        let row = t * (k + 1);
        assert_eq!(got_ids[row..row + k], want_ids[t * k..(t + 1) * k], "{}: token {t}'s routed ids", dev.backend());
        assert_eq!(got_ids[row + k], e as u32, "{}: token {t}'s shared slot is id E", dev.backend());
        for j in 0..k {
            let (g, w) = (got_scores[row + j], want_scores[t * k + j]);
            assert!((g - w).abs() <= 1e-6 * w.abs(), "{}: token {t} score {j}: {g} vs {w}", dev.backend());
        }
        let sigmoid = 1.0 / (1.0 + (-(want_gate[t] as f64)).exp());
        let g = got_scores[row + k] as f64;
        assert!((g - sigmoid).abs() < 1e-6, "{}: token {t}'s shared score {g} vs sigmoid {sigmoid}", dev.backend());
    }
}

/// The shared slot's arguments: `shared` above 1, `gate_logits` missing with
/// `shared` 1 or given with 0, and a gate row without its output (or the
/// reverse) are named errors before any launch.
fn bad_shared_slot_arguments_are_refused() {
    let dev = Device::cpu();
    let shape = RouterShape { m: 2, n_experts: 16, din: 8, k: 4 };
    let (x, wr, ws) = (dev.alloc::<f32>(16).unwrap(), dev.alloc::<f32>(128).unwrap(), dev.alloc::<f32>(8).unwrap());
    let (logits, gate_logits) = (dev.alloc::<f32>(32).unwrap(), dev.alloc::<f32>(2).unwrap());
    let (ids, scores) = (dev.alloc::<u32>(10).unwrap(), dev.alloc::<f32>(10).unwrap());
    let topk = |gate: u64, shared: u32| {
        let mut ta = shape.topk_args(logits.ptr(), ids.ptr(), scores.ptr(), true);
        (ta.gate_logits, ta.shared) = (gate, shared);
        unsafe { router::topk(&dev, ta, Stream::DEFAULT) }
    };
    refused(topk(gate_logits.ptr(), 2), "shared");
    refused(topk(0, 1), "gate_logits");
    refused(topk(gate_logits.ptr(), 0), "gate_logits");
    let logits_with = |ws_ptr: u64, gate: u64| {
        let mut la = shape.logits_args(x.ptr(), wr.ptr(), logits.ptr());
        (la.ws, la.gate_logits) = (ws_ptr, gate);
        unsafe { router::router_logits(&dev, Dtype::F32, la, Stream::DEFAULT) }
    };
    refused(logits_with(ws.ptr(), 0), "gate_logits");
    refused(logits_with(0, gate_logits.ptr()), "ws");
    // The same calls with every argument right run.
    assert!(topk(gate_logits.ptr(), 1).is_ok() && logits_with(ws.ptr(), gate_logits.ptr()).is_ok());
}

fn availability_matches_the_backends<T: Element>(dev: &Device) {
    assert!(router::router_available(dev, T::DTYPE), "{}: the router is built for every dtype", label::<T>(dev));
    assert!(
        router::router_q_available(dev, T::DTYPE),
        "{}: the quantized router is built for every dtype",
        label::<T>(dev)
    );
}

fn main() {
    Suite::new()
        .per_backend_and_dtype("logits_every_dtype_and_token_count", typed!(logits_every_dtype_and_token_count))
        .per_backend("logits_long_rows_take_several_batches", logits_long_rows_take_several_batches)
        .per_backend("logits_odd_rows_take_the_value_path", logits_odd_rows_take_the_value_path)
        .per_backend("logits_misaligned_x_takes_the_value_path", logits_misaligned_x_takes_the_value_path)
        .per_backend_and_dtype(
            "quantized_logits_every_format_and_token_count",
            typed!(quantized_logits_every_format_and_token_count),
        )
        .per_backend("qwen3_30b_a3b_quantized_router", qwen3_30b_a3b_quantized_router)
        .per_backend("quantized_logits_misaligned_x", quantized_logits_misaligned_x)
        .per_backend("quantized_logits_codes_off_16_bytes", quantized_logits_codes_off_16_bytes)
        .per_backend("qwen3_30b_a3b_router", qwen3_30b_a3b_router)
        .per_backend("qwen3_next_router", qwen3_next_router)
        .per_backend("topk_every_k_and_expert_count", topk_every_k_and_expert_count)
        .per_backend("topk_ties_go_to_the_lower_id", topk_ties_go_to_the_lower_id)
        .per_backend("topk_non_finite_rows_choose_nothing", topk_non_finite_rows_choose_nothing)
        .per_backend("topk_negative_infinity_is_chosen_last", topk_negative_infinity_is_chosen_last)
        .per_backend("the_pair_in_one_call_is_the_two_launches", the_pair_in_one_call_is_the_two_launches)
        .single("bad_router_shapes_are_refused", bad_router_shapes_are_refused)
        .single("bad_quantized_routers_are_refused", bad_quantized_routers_are_refused)
        .per_backend("the_shared_gate_row_and_slot", the_shared_gate_row_and_slot)
        .single("bad_shared_slot_arguments_are_refused", bad_shared_slot_arguments_are_refused)
        .per_backend_and_dtype("availability_matches_the_backends", typed!(availability_matches_the_backends))
        .run()
}
