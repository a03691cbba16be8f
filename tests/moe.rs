//! The routed experts of Nemotron-H (`moe_fc1_relu2`, `moe_down`, `moe_combine`)
//! on every backend present, against the references of `reference::moe`.
//!
//! Tolerances:
//! - each matrix kernel vs its f32 reference (`reference::moe::fc1_relu2`,
//!   `down`): `max|got - want| / max|want| < 1e-5`. Both sum the same f32 products
//!   in different orders (the kernel factors each quad as `s * sum x q + b * sum x`
//!   and folds 32 lane partials); the difference of two f32 sums of n terms is
//!   bounded by about `2 n eps sum|term|` in the worst case and grows like
//!   `sqrt(n) eps` in practice: measured about 1e-7 to 1e-6 here (printed by the tests),
//!   so 1e-5 leaves an order of magnitude while still catching any wrong term
//!   (a dropped or doubled quad is ~1e-2).
//! - the routed output vs the dense reference: the contract's nRMS < 5e-4 and
//!   nMAX < 2e-2; vs `reference::moe::routed`, the same bounds (both round to T once;
//!   they differ by at most one ulp of T where a sum lands near a rounding boundary).
//! - `moe_combine` vs the reference's combine of the kernel's own `part`: bit-exact.
//!
//! Every case is its own test per backend (and per dtype where the case is
//! generic over it), named `case::backend[::dtype]`, through the harness of
//! `tests/common`: an absent backend's tests are ignored with the reason.

mod common;

use common::{Suite, download_values, gpu_devices, label};
use mlxcel_amdgpu::half::bf16;
use mlxcel_amdgpu::kernels::moe::{self, MoeShape, QuantizedPointers, RoutedPointers, check_expert_ids, scratch_bytes};
use mlxcel_amdgpu::kernels_device::geometry::moe::{MAX_COLS, QUAD_WORDS, values_per_word as moe_values_per_word};
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer, Dtype, Element, Error, Stream, with_element};
use mlxcel_amdgpu_testkit::fixtures::RoutedUpload;
use mlxcel_amdgpu_testkit::reference::moe::{
    MoeInputs, Quantized, dense_f32_reference, down, fc1_relu2, moe_inputs, routed,
};
use mlxcel_amdgpu_testkit::reference::{self, metrics};

// ---------------------------------------------------------------------------
// Data movement
// ---------------------------------------------------------------------------

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// f32 values of a byte buffer (the raw-pointer cases).
fn download_f32(buf: &DeviceBuffer<u8>) -> Vec<f32> {
    buf.download().unwrap().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// A byte buffer filled with 0xFF (a NaN pattern in f32), for the raw-pointer cases.
fn poisoned_bytes(dev: &Device, bytes: usize) -> DeviceBuffer<u8> {
    let mut b = dev.alloc::<u8>(bytes).unwrap();
    b.fill_bytes(0xFF).unwrap();
    b
}

/// `n` elements filled with 0xFF bytes (NaN in every dtype), so an element a
/// kernel fails to write is noticed.
fn poisoned<T: Element>(dev: &Device, n: usize) -> DeviceBuffer<T> {
    let mut b = dev.alloc::<T>(n).unwrap();
    b.fill_bytes(0xFF).unwrap();
    b
}

/// The status word.
fn status_word(status: &DeviceBuffer<u32>) -> u32 {
    status.download().unwrap()[0]
}

fn upload_inputs<T: Element>(dev: &Device, inp: &MoeInputs) -> RoutedUpload<T> {
    RoutedUpload::new(dev, inp).unwrap()
}

fn shape_of(inp: &MoeInputs) -> MoeShape {
    MoeShape {
        n_experts: inp.n_experts as u32,
        k: inp.idx.len() as u32,
        din: inp.w1.cols as u32,
        dff: inp.w2.cols as u32,
        bits: inp.w1.bits,
        group_size: inp.w1.group_size as u32,
    }
}

/// Outputs of the three kernels launched one by one, each from the previous kernel's output.
struct Outputs {
    act: Vec<f32>,
    part: Vec<f32>,
    out: Vec<f32>,
}

fn run_kernels<T: Element>(dev: &Device, inp: &MoeInputs) -> Outputs {
    let shape = shape_of(inp);
    let (k, din, dff) = (shape.k as usize, shape.din as usize, shape.dff as usize);
    let u = upload_inputs::<T>(dev, inp);
    let mut act = poisoned::<f32>(dev, k * dff);
    let mut part = poisoned::<f32>(dev, k * din);
    let mut out = poisoned::<T>(dev, din);
    moe::run_fc1_relu2::<T>(dev, &u.x, &u.idx, u.w1.buffers(), &mut act, &shape, None, Stream::DEFAULT).unwrap();
    moe::run_down::<T>(dev, &u.idx, u.w2.buffers(), &act, &u.scores, &mut part, &shape, None, Stream::DEFAULT).unwrap();
    moe::run_combine::<T>(dev, &part, &mut out, shape.k, shape.din, Stream::DEFAULT).unwrap();
    Outputs { act: download_values(&act), part: download_values(&part), out: download_values(&out) }
}

/// The routed output through `run_routed_forward`, with its status word.
fn run_routed<T: Element>(dev: &Device, inp: &MoeInputs) -> (Vec<f32>, u32) {
    let shape = shape_of(inp);
    let u = upload_inputs::<T>(dev, inp);
    let mut out = poisoned::<T>(dev, shape.din as usize);
    let mut scratch = poisoned_bytes(dev, scratch_bytes(shape.k, shape.din, shape.dff).unwrap());
    let mut status = dev.upload(&[0u32]).unwrap();
    let bufs = u.routed(&mut out, &mut scratch, Some(&mut status));
    moe::run_routed_forward::<T>(dev, bufs, &shape, Stream::DEFAULT).unwrap();
    (download_values(&out), status_word(&status))
}

/// `max|got - want| / max|want|` (metrics::max_rel), NaN if any is NaN.
fn rel(got: &[f32], want: &[f32]) -> f64 {
    metrics::max_rel(got, want)
}

/// Checks the three kernels one by one against their references, and the routed
/// forward against the dense reference and the reference's routed. Returns
/// `(act error, part error, nrms, nmax)`.
fn check_all<T: Element>(dev: &Device, inp: &MoeInputs, what: &str) -> (f64, f64, f64, f64) {
    let dtype = T::DTYPE;
    let shape = shape_of(inp);
    let what = format!("{what} {} {shape:?}", label::<T>(dev));
    let got = run_kernels::<T>(dev, inp);

    let want_act = fc1_relu2(&inp.x, &inp.idx, &inp.w1, inp.n_experts);
    let e_act = rel(&got.act, &want_act);
    assert!(e_act < 1e-5, "act of {what}: max rel error {e_act:e}");

    // `down` from the kernel's own act, so that only down's error is measured.
    let want_part = down(&inp.idx, &inp.w2, inp.n_experts, &got.act, &inp.scores);
    let e_part = rel(&got.part, &want_part);
    assert!(e_part < 1e-5, "part of {what}: max rel error {e_part:e}");

    // combine: bit-exact with the reference's sum of the kernel's own part.
    let din = shape.din as usize;
    let want_out: Vec<f32> = (0..din)
        .map(|h| {
            let mut acc = 0.0f32;
            for k in 0..shape.k as usize {
                acc += got.part[k * din + h];
            }
            reference::round(dtype, acc)
        })
        .collect();
    metrics::assert_bits_equal(
        dtype,
        &reference::store_all(dtype, &got.out),
        &reference::store_all(dtype, &want_out),
        &format!("combine of {what}"),
    );

    // The routed forward in one call gives the same bits as the three launches.
    let (routed_out, status) = run_routed::<T>(dev, inp);
    assert_eq!(status, 0, "status of {what}");
    metrics::assert_bits_equal(
        dtype,
        &reference::store_all(dtype, &routed_out),
        &reference::store_all(dtype, &got.out),
        &format!("routed_forward of {what}"),
    );

    let dense = dense_f32_reference(dtype, inp);
    let (nrms, nmax) = (metrics::nrms(&routed_out, &dense), metrics::nmax(&routed_out, &dense));
    assert!(nrms < 5e-4 && nmax < 2e-2, "routed of {what} vs dense: nrms {nrms:e} nmax {nmax:e}");
    let model = routed(dtype, inp);
    let (mr, mm) = (metrics::nrms(&routed_out, &model), metrics::nmax(&routed_out, &model));
    assert!(mr < 5e-4 && mm < 2e-2, "routed of {what} vs reference::moe::routed: nrms {mr:e} nmax {mm:e}");
    eprintln!(
        "{what}: act {e_act:.2e}, part {e_part:.2e}; vs dense nrms {nrms:.2e} nmax {nmax:.2e}; vs routed nrms {mr:.2e} nmax {mm:.2e}"
    );
    (e_act, e_part, nrms, nmax)
}

// ---------------------------------------------------------------------------
// Accuracy
// ---------------------------------------------------------------------------

/// The contract's test at a reduced honest shape (Din 512, Dff 384, E 16, K 6, gs 64, bf16).
fn reduced_shape_bf16(dev: &Device, bits: u32, seed: u64) {
    let inp = moe_inputs(Dtype::Bf16, 512, 384, 16, 6, bits, 64, seed);
    check_all::<bf16>(dev, &inp, "reduced");
}

fn reduced_shape_bf16_bits_4(dev: &Device) {
    reduced_shape_bf16(dev, 4, 41);
}

fn reduced_shape_bf16_bits_8(dev: &Device) {
    reduced_shape_bf16(dev, 8, 42);
}

/// Every dtype, group sizes 32 and 128, both bit widths, on a small shape.
fn every_dtype_and_group_size<T: Element>(dev: &Device) {
    let n = Dtype::ALL.iter().position(|&d| d == T::DTYPE).unwrap();
    for gs in [32, 128] {
        for bits in [4, 8] {
            let inp = moe_inputs(T::DTYPE, 256, 128, 5, 3, bits, gs, 100 + n as u64 * 10 + gs as u64 + bits as u64);
            check_all::<T>(dev, &inp, "small");
        }
    }
}

/// The reliability sweep's shapes (docs/reliability.md): one expert; every
/// expert selected, with the ids at both bounds (E - 1 first, 0 last).
fn edge_expert_ids_at_the_bounds<T: Element>(dev: &Device) {
    for (i, (e, ids)) in [(1, &[0][..]), (5, &[4, 3, 2, 1, 0][..])].into_iter().enumerate() {
        let mut inp = moe_inputs(T::DTYPE, 64, 64, e, ids.len(), 4, 32, 500 + i as u64);
        inp.idx = ids.to_vec();
        check_all::<T>(dev, &inp, "edge");
    }
}

/// The longest rows (`MAX_COLS`) of fc1 and of down, one expert each, in the
/// consumers' dtype (bf16; each row's work is the same in every dtype).
fn edge_the_longest_rows(dev: &Device) {
    let max = MAX_COLS as usize;
    for (i, (din, dff, bits)) in [(max, 32, 8), (32, max, 4)].into_iter().enumerate() {
        let mut inp = moe_inputs(Dtype::Bf16, din, dff, 2, 1, bits, 32, 510 + i as u64);
        inp.idx = vec![1 - i as u32];
        check_all::<bf16>(dev, &inp, "edge");
    }
}

/// The largest grid of the sweep: 64 experts all selected, rows of `MAX_COLS`
/// outputs in fc1. On CUDA only (the emulators would take minutes).
fn edge_the_largest_grid<T: Element>(dev: &Device) {
    let mut inp = moe_inputs(T::DTYPE, 64, MAX_COLS as usize, 64, 64, 4, 64, 599);
    inp.idx = (0..64).rev().collect();
    check_all::<T>(dev, &inp, "largest grid");
}

/// K from one batch of the combine's loads to three (8, 9 and 17 slots: the
/// last batch full, with one slot, and after two full ones), each expert once.
fn combine_takes_slots_in_batches(dev: &Device) {
    for k in [8, 9, 17] {
        let mut inp = moe_inputs(Dtype::Bf16, 64, 64, 17, k, 4, 32, 520 + k as u64);
        inp.idx = (0..k as u32).rev().collect();
        check_all::<bf16>(dev, &inp, "combine batches");
    }
}

/// Rows long enough for several batches of quads per lane (8 bits, Din 4608:
/// 288 quads, lanes take 9 or 10 each in three batches), and every lane busy.
fn long_rows_take_several_batches(dev: &Device) {
    let inp = moe_inputs(Dtype::Bf16, 4608, 640, 3, 2, 8, 128, 7);
    check_all::<bf16>(dev, &inp, "long rows");
}

/// Pointers with less than the alignment of the fast paths give the same results
/// within the same tolerance: weights only 4-byte aligned (one word per lane
/// instead of quads), 16-bit scales and biases only 2-byte aligned (no paired
/// 32-bit loads), x and act not 16-byte aligned (element-wise staging).
fn misaligned_pointers_take_the_slow_paths(dev: &Device) {
    for (case, bits, dtype) in
        [(0, 4, Dtype::F16), (0, 8, Dtype::Bf16), (1, 4, Dtype::Bf16), (1, 8, Dtype::F16), (2, 4, Dtype::Bf16)]
    {
        with_element!(dtype, T => misaligned_case::<T>(dev, case, bits));
    }
}

fn misaligned_case<T: Element>(dev: &Device, case: u64, bits: u32) {
    let dtype = T::DTYPE;
    let inp = moe_inputs(dtype, 512, 256, 4, 3, bits, 64, 90 + bits as u64 + case);
    let shape = shape_of(&inp);
    let u = upload_inputs::<T>(dev, &inp);
    let es = dtype.size() as u64;
    // The same data, `pad` bytes into a buffer.
    let shifted = |bytes: &[u8], pad: usize| dev.upload(&[vec![0xA5u8; pad], bytes.to_vec()].concat()).unwrap();
    let words = |q: &Quantized| u32_bytes(&q.words);
    let t_bytes = |v: &[f32]| reference::to_le_bytes(dtype, v);
    let (k, din, dff) = (shape.k as usize, shape.din as usize, shape.dff as usize);
    let (w1, w2) = (shifted(&words(&inp.w1), 4), shifted(&words(&inp.w2), 4));
    let (s1, b1) = (shifted(&t_bytes(&inp.w1.scales), 2), shifted(&t_bytes(&inp.w1.biases), 2));
    let (s2, b2) = (shifted(&t_bytes(&inp.w2.scales), 2), shifted(&t_bytes(&inp.w2.biases), 2));
    let x = shifted(&t_bytes(&inp.x), 2);
    let act = poisoned_bytes(dev, k * dff * 4 + 4);
    let part = poisoned_bytes(dev, k * din * 4);
    let (p1, p2, xp, ap, what) = match case {
        0 => (
            QuantizedPointers { w: w1.ptr() + 4, ..u.w1.pointers() },
            QuantizedPointers { w: w2.ptr() + 4, ..u.w2.pointers() },
            u.x.ptr(),
            act.ptr(),
            "weights 4-byte aligned",
        ),
        1 => (
            QuantizedPointers { scales: s1.ptr() + 2, biases: b1.ptr() + 2, ..u.w1.pointers() },
            QuantizedPointers { scales: s2.ptr() + 2, biases: b2.ptr() + 2, ..u.w2.pointers() },
            u.x.ptr(),
            act.ptr(),
            "scales and biases 2-byte aligned",
        ),
        _ => (u.w1.pointers(), u.w2.pointers(), x.ptr() + es, act.ptr() + 4, "x and act not 16-byte aligned"),
    };
    // SAFETY: every pointer is into a buffer holding the shape's elements past it.
    unsafe {
        moe::fc1_relu2(dev, T::DTYPE, shape.fc1_args(xp, u.idx.ptr(), p1, ap, 0), Stream::DEFAULT).unwrap();
        moe::down(dev, T::DTYPE, shape.down_args(u.idx.ptr(), p2, ap, u.scores.ptr(), part.ptr(), 0), Stream::DEFAULT)
            .unwrap();
    }
    let off = (ap - act.ptr()) as usize / 4;
    let act = download_f32(&act)[off..off + k * dff].to_vec();
    let e_act = rel(&act, &fc1_relu2(&inp.x, &inp.idx, &inp.w1, inp.n_experts));
    let e_part = rel(&download_f32(&part), &down(&inp.idx, &inp.w2, inp.n_experts, &act, &inp.scores));
    let what = format!("{what}, {} bits {bits}", label::<T>(dev));
    eprintln!("{what}: act {e_act:.2e} part {e_part:.2e}");
    assert!(e_act < 1e-5 && e_part < 1e-5, "{what}: act {e_act:e} part {e_part:e}");
}

// ---------------------------------------------------------------------------
// The negative control
// ---------------------------------------------------------------------------

/// The routed output of a kernel whose wave sum starts at xor 8 instead of 16:
/// lane 0 then holds lanes 0..15 only, so every column that lanes 16..31 own
/// under this kernel's mapping (quad `q` of a row belongs to lane `q % 32`; a
/// quad is `QUAD_WORDS` words) is missing from every row of both matrices.
/// Same arithmetic as `reference::moe::routed` otherwise.
fn routed_folding_from_8(dtype: Dtype, inp: &MoeInputs) -> Vec<f32> {
    let kept = |q: &Quantized, col: usize| (col / (q.values_per_word() * QUAD_WORDS as usize)) % 32 < 16;
    let (din, dff) = (inp.w1.cols, inp.w2.cols);
    let mut out = vec![0.0f32; din];
    for (k, &e) in inp.idx.iter().enumerate() {
        let e = e as usize;
        let act: Vec<f32> = (0..dff)
            .map(|f| {
                let mut acc = 0.0f32;
                for i in (0..din).filter(|&i| kept(&inp.w1, i)) {
                    acc += inp.x[i] * inp.w1.weight(e * dff + f, i);
                }
                let r = acc.max(0.0);
                r * r
            })
            .collect();
        for (h, o) in out.iter_mut().enumerate() {
            let mut acc = 0.0f32;
            for f in (0..dff).filter(|&f| kept(&inp.w2, f)) {
                acc += act[f] * inp.w2.weight(e * din + h, f);
            }
            *o += inp.scores[k] * acc;
        }
    }
    out.iter().map(|&v| reference::round(dtype, v)).collect()
}

/// Spec: "a lane fold that starts at 8 must fail (nrms ~0.76)". At the Nemotron
/// shape (E reduced to 6, the K experts) every lane owns quads of both
/// matrices, and the fold-from-8 model misses the routed tolerance by far.
/// (At the reduced test shape with 4 bits, 512 and 384 columns are 16 and 12
/// quads: lanes 16..31 own nothing and the control could not fail there; the
/// 8-bit reduced shape is checked too.)
fn negative_control_a_fold_starting_at_8_fails_the_tolerance() {
    let dtype = Dtype::Bf16;
    for (din, dff, bits, n_experts) in [(2688, 1856, 4, 6), (512, 384, 8, 16)] {
        let inp = moe_inputs(dtype, din, dff, n_experts, 6, bits, 64, 4242);
        let dense = dense_f32_reference(dtype, &inp);
        let wrong = routed_folding_from_8(dtype, &inp);
        let (nrms, nmax) = (metrics::nrms(&wrong, &dense), metrics::nmax(&wrong, &dense));
        eprintln!("fold from 8, Din {din} Dff {dff} bits {bits}: nrms {nrms:.3} nmax {nmax:.3}");
        assert!(nrms > 0.1, "the fold-from-8 model must fail the routed tolerance clearly: nrms {nrms:e}");
        assert!(!(nrms < 5e-4 && nmax < 2e-2));
    }
}

// ---------------------------------------------------------------------------
// Out-of-range expert ids
// ---------------------------------------------------------------------------

fn an_expert_id_out_of_range_gives_nan_rows_and_status(dev: &Device) {
    type T = bf16;
    let dtype = T::DTYPE;
    for bits in [4, 8] {
        // The weight buffers hold exactly E experts.
        let mut inp = moe_inputs(dtype, 256, 128, 4, 4, bits, 64, 31);
        inp.idx[2] = 4; // == E
        inp.idx[3] = 0xFFFF_FFFF;
        let shape = shape_of(&inp);
        let (k, din, dff) = (shape.k as usize, shape.din as usize, shape.dff as usize);
        let u = upload_inputs::<T>(dev, &inp);
        assert_eq!(u.w1.w.len() * 4, 4 * dff * din * bits as usize / 8, "exactly E experts");
        let mut act = poisoned::<f32>(dev, k * dff);
        act.fill_bytes(0).unwrap();
        let mut part = dev.alloc::<f32>(k * din).unwrap();
        part.fill_bytes(0).unwrap();
        let mut out = poisoned::<T>(dev, din);
        let mut status = dev.upload(&[0u32]).unwrap();
        moe::run_fc1_relu2::<T>(
            dev,
            &u.x,
            &u.idx,
            u.w1.buffers(),
            &mut act,
            &shape,
            Some(&mut status),
            Stream::DEFAULT,
        )
        .unwrap();
        let st1 = status_word(&status);
        status.fill_bytes(0).unwrap();
        moe::run_down::<T>(
            dev,
            &u.idx,
            u.w2.buffers(),
            &act,
            &u.scores,
            &mut part,
            &shape,
            Some(&mut status),
            Stream::DEFAULT,
        )
        .unwrap();
        let st2 = status_word(&status);
        moe::run_combine::<T>(dev, &part, &mut out, shape.k, shape.din, Stream::DEFAULT).unwrap();
        let what = format!("{} bits {bits}", label::<T>(dev));
        assert_eq!((st1, st2), (3, 3), "{what}: status is 1 + the first bad slot (2)");

        let act = download_values(&act);
        let part = download_values(&part);
        for slot in 0..k {
            let bad = slot >= 2;
            let rows_a = &act[slot * dff..(slot + 1) * dff];
            let rows_p = &part[slot * din..(slot + 1) * din];
            if bad {
                assert!(rows_a.iter().chain(rows_p).all(|v| v.is_nan()), "{what}: slot {slot} rows must be NaN");
            } else {
                assert!(rows_a.iter().chain(rows_p).all(|v| v.is_finite()), "{what}: slot {slot} rows must be finite");
            }
        }
        // The good slots are still right.
        let mut good = inp.clone();
        good.idx.truncate(2);
        good.scores.truncate(2);
        let want_act = fc1_relu2(&good.x, &good.idx, &good.w1, good.n_experts);
        assert!(rel(&act[..2 * dff], &want_act) < 1e-5, "{what}: good slots");
        let out = download_values(&out);
        assert!(out.iter().all(|v| v.is_nan()), "{what}: the combined output is NaN");

        // Through routed_forward, the same NaN rows and status; with all ids good, status stays 0.
        let (out2, st) = run_routed::<T>(dev, &inp);
        assert!(out2.iter().all(|v| v.is_nan()) && st == 3, "{what}: routed_forward status {st}");
        let (_, st) = run_routed::<T>(dev, &good);
        assert_eq!(st, 0, "{what}: all ids in range leave status alone");
    }
}

fn check_expert_ids_on_the_host() {
    check_expert_ids(&[0, 5, 127], 128).unwrap();
    let err = check_expert_ids(&[0, 5, 128], 128).unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `idx`: idx[2] = 128 is not below n_experts = 128");
}

// ---------------------------------------------------------------------------
// Launcher refusals (on the CPU emulator: checked before anything is launched)
// ---------------------------------------------------------------------------

fn refused(r: Result<(), Error>, argument: &str) -> String {
    match r.map_err(|e| e.root().clone()) {
        Err(Error::InvalidArgument { argument: a, message }) if a == argument => message,
        other => panic!("expected a refusal of `{argument}`, got {other:?}"),
    }
}

const S: MoeShape = MoeShape { n_experts: 16, k: 6, din: 512, dff: 384, bits: 4, group_size: 64 };
const Q: QuantizedPointers = QuantizedPointers { w: 0x1000, scales: 0x2000, biases: 0x3000 };

fn fc1(s: MoeShape, x: u64, q: QuantizedPointers, act: u64, status: u64) -> Result<(), Error> {
    // SAFETY: every case is refused before the launch (asserted by `refused`).
    unsafe { moe::fc1_relu2(&Device::cpu(), Dtype::Bf16, s.fc1_args(x, 0x4000, q, act, status), Stream::DEFAULT) }
}

fn bad_shapes_are_refused_before_any_launch() {
    let (s, q) = (S, Q);
    let m = refused(fc1(MoeShape { bits: 3, ..s }, 0x100, q, 0x500, 0), "bits");
    assert_eq!(m, "3 is not supported; use 4 or 8");
    refused(fc1(MoeShape { bits: 2, ..s }, 0x100, q, 0x500, 0), "bits");
    let m = refused(fc1(MoeShape { group_size: 16, ..s }, 0x100, q, 0x500, 0), "group_size");
    assert_eq!(m, "16 is not supported; use 32, 64 or 128");
    let m = refused(fc1(MoeShape { din: 480, ..s }, 0x100, q, 0x500, 0), "din");
    assert_eq!(m, "480 is not a multiple of the group size 64");
    refused(fc1(MoeShape { dff: 100, ..s }, 0x100, q, 0x500, 0), "dff");
    refused(fc1(MoeShape { din: 0, ..s }, 0x100, q, 0x500, 0), "din");
    let m = refused(fc1(MoeShape { dff: MAX_COLS + 64, ..s }, 0x100, q, 0x500, 0), "dff");
    assert!(m.contains("outside 1..=12288"), "{m}");
    refused(fc1(MoeShape { k: 0, ..s }, 0x100, q, 0x500, 0), "k");
    refused(fc1(MoeShape { k: 70000, ..s }, 0x100, q, 0x500, 0), "k");
    refused(fc1(MoeShape { n_experts: 0, ..s }, 0x100, q, 0x500, 0), "n_experts");
    // With u32 fields and MAX_COLS, the largest stack is 2^32 * 12288 * 3072
    // words (6.5e17 bytes): it cannot overflow 64-bit sizes, so validation accepts
    // it on a 64-bit host (a 32-bit host would refuse it as overflowing usize).
    let huge = MoeShape { n_experts: u32::MAX, din: MAX_COLS, dff: MAX_COLS, bits: 8, ..s };
    assert_eq!(huge.validate().is_ok(), usize::BITS == 64);
    let down = |s: MoeShape| unsafe {
        moe::down(&Device::cpu(), Dtype::Bf16, s.down_args(0x4000, Q, 0x500, 0x700, 0x800, 0), Stream::DEFAULT)
    };
    refused(down(MoeShape { group_size: 256, ..s }), "group_size");
    let dev = Device::cpu();
    refused(
        unsafe {
            moe::combine(
                &dev,
                Dtype::Bf16,
                moe::MoeCombineArgs { part: 0x500, out: 0x600, k: 0, din: 512 },
                Stream::DEFAULT,
            )
        },
        "k",
    );
    refused(
        unsafe {
            moe::combine(
                &dev,
                Dtype::Bf16,
                moe::MoeCombineArgs { part: 0x500, out: 0x600, k: 6, din: 0 },
                Stream::DEFAULT,
            )
        },
        "din",
    );
}

fn null_and_misaligned_pointers_are_refused_and_named() {
    let (s, q, dev) = (S, Q, Device::cpu());
    let m = refused(fc1(s, 0, q, 0x500, 0), "x");
    assert_eq!(m, "is a null pointer");
    refused(fc1(s, 0x101, q, 0x500, 0), "x");
    refused(fc1(s, 0x100, QuantizedPointers { w: 0x1002, ..q }, 0x500, 0), "w1");
    refused(fc1(s, 0x100, QuantizedPointers { scales: 0x2001, ..q }, 0x500, 0), "s1");
    refused(fc1(s, 0x100, QuantizedPointers { biases: 0, ..q }, 0x500, 0), "b1");
    refused(fc1(s, 0x100, q, 0x502, 0), "act");
    refused(fc1(s, 0x100, q, 0x500, 0x601), "status");
    refused(
        unsafe { moe::fc1_relu2(&dev, Dtype::Bf16, s.fc1_args(0x100, 0x4002, q, 0x500, 0), Stream::DEFAULT) },
        "idx",
    );

    let down = |q: QuantizedPointers, scores: u64, part: u64| unsafe {
        moe::down(&dev, Dtype::Bf16, s.down_args(0x4000, q, 0x500, scores, part, 0), Stream::DEFAULT)
    };
    refused(down(q, 0, 0x800), "scores");
    refused(down(q, 0x700, 0x801), "part");
    refused(down(QuantizedPointers { w: 0x1001, ..q }, 0x700, 0x800), "w2");

    refused(
        unsafe {
            moe::combine(
                &dev,
                Dtype::Bf16,
                moe::MoeCombineArgs { part: 0x502, out: 0x600, k: 6, din: 512 },
                Stream::DEFAULT,
            )
        },
        "part",
    );
    refused(
        unsafe {
            moe::combine(
                &dev,
                Dtype::Bf16,
                moe::MoeCombineArgs { part: 0x500, out: 0x601, k: 6, din: 512 },
                Stream::DEFAULT,
            )
        },
        "out",
    );
}

/// Routed-forward pointers far enough apart (256 MiB) that no two ranges of
/// shape [`S`] overlap, so that each case is refused for the reason it tests.
fn routed_pointers() -> RoutedPointers {
    let at = |i: u64| i << 28;
    RoutedPointers {
        x: at(1),
        idx: at(2),
        scores: at(3),
        w1: QuantizedPointers { w: at(4), scales: at(5), biases: at(6) },
        w2: QuantizedPointers { w: at(7), scales: at(8), biases: at(9) },
        out: at(10),
        scratch: at(11),
        scratch_len: scratch_bytes(S.k, S.din, S.dff).unwrap(),
        status: 0,
    }
}

fn routed_refused<T: Element>(p: RoutedPointers, s: MoeShape) -> Result<(), Error> {
    // SAFETY: every case is refused before the launch (asserted by the callers).
    match unsafe { moe::routed_forward(&Device::cpu(), T::DTYPE, p, &s, Stream::DEFAULT) } {
        Ok(()) => panic!("{}: {p:x?} launched", T::DTYPE),
        err => err,
    }
}

fn routed_forward_refuses_its_scratch_and_output() {
    let p = routed_pointers();
    let need = scratch_bytes(6, 512, 384).unwrap();
    let m = refused(routed_refused::<bf16>(RoutedPointers { scratch_len: need - 4, ..p }, S), "scratch");
    assert!(m.starts_with(&format!("holds {} bytes, needs {need}", need - 4)), "{m}");
    refused(routed_refused::<bf16>(RoutedPointers { scratch: 0, ..p }, S), "scratch");
    refused(routed_refused::<bf16>(RoutedPointers { out: p.out + 1, ..p }, S), "out");
    refused(routed_refused::<bf16>(p, MoeShape { bits: 5, ..S }), "bits");
    assert_eq!(need, (6 * 384 * 4usize).next_multiple_of(256) + 6 * 512 * 4);
}

/// `out` inside the scratch (at its start, inside `act`, inside `part`, or
/// straddling its end) is refused, naming `out` and the scratch or the part of it.
fn routed_forward_with_scratch_overlapping_out_is_refused<T: Element>(_: &Device) {
    let p = routed_pointers();
    let need = scratch_bytes(S.k, S.din, S.dff).unwrap() as u64;
    let part = moe::part_offset(S.k, S.dff).unwrap() as u64;
    let es = size_of::<T>() as u64;
    for (what, out) in [
        ("at the scratch's start", p.scratch),
        ("inside act", p.scratch + 64),
        ("at part", p.scratch + part),
        ("straddling the scratch's end", p.scratch + need - 4 * es),
        ("straddling the scratch's start", p.scratch - 4 * es),
    ] {
        let err = routed_refused::<T>(RoutedPointers { out, ..p }, S).unwrap_err();
        match err.root() {
            Error::InvalidArgument { argument: "scratch", message } if message.contains("`out`") => {}
            Error::InvalidArgument { argument: "out", message } if message.contains("`part`") => {}
            other => panic!("{} out {what}: expected a refusal naming `out` and the scratch, got {other}", T::DTYPE),
        }
    }
    // And the scratch over an input, for the record.
    let err = routed_refused::<T>(RoutedPointers { x: p.scratch, ..p }, S).unwrap_err();
    assert!(matches!(err.root(), Error::InvalidArgument { .. }), "{}: x in the scratch: {err}", T::DTYPE);
}

/// A weight ending inside `act` (which fc1 writes before down reads the
/// weights) or starting inside `part` (which down writes) is refused too.
fn routed_forward_with_a_weight_in_the_scratch_is_refused<T: Element>(_: &Device) {
    let p = routed_pointers();
    let part = p.scratch + moe::part_offset(S.k, S.dff).unwrap() as u64;
    let into_act = |bytes: u64| p.scratch + 64 - bytes;
    let w2_bytes = (S.n_experts * S.din * (S.dff / moe_values_per_word(S.bits))) as u64 * 4;
    let cases = [
        (
            "w2 ending inside act",
            RoutedPointers { w2: QuantizedPointers { w: into_act(w2_bytes), ..p.w2 }, ..p },
            "`w2`",
        ),
        ("w1 starting inside part", RoutedPointers { w1: QuantizedPointers { w: part + 64, ..p.w1 }, ..p }, "`w1`"),
    ];
    for (what, ptrs, name) in cases {
        let err = routed_refused::<T>(ptrs, S).unwrap_err();
        assert!(
            matches!(err.root(), Error::InvalidArgument { message, .. } if message.contains(name)),
            "{} {what}: expected a refusal naming {name}, got {err}",
            T::DTYPE
        );
    }
}

fn the_safe_wrappers_check_buffer_sizes() {
    type T = bf16;
    let dev = Device::cpu();
    let inp = moe_inputs(T::DTYPE, 256, 128, 2, 2, 4, 64, 5);
    let shape = shape_of(&inp);
    let u = upload_inputs::<T>(&dev, &inp);
    let mut small = dev.alloc::<f32>(2 * 128 - 1).unwrap();
    let m = refused(
        moe::run_fc1_relu2::<T>(&dev, &u.x, &u.idx, u.w1.buffers(), &mut small, &shape, None, Stream::DEFAULT),
        "act",
    );
    assert_eq!(m, "holds 1020 bytes, needs 1024 (256 f32 elements)");
    let mut act = dev.alloc::<f32>(2 * 128).unwrap();
    let wrong = MoeShape { n_experts: 3, ..shape };
    refused(moe::run_fc1_relu2::<T>(&dev, &u.x, &u.idx, u.w1.buffers(), &mut act, &wrong, None, Stream::DEFAULT), "w1");
    let mut part = dev.alloc::<f32>(2 * 256).unwrap();
    refused(
        moe::run_down::<T>(&dev, &u.idx, u.w2.buffers(), &act, &u.scores, &mut part, &wrong, None, Stream::DEFAULT),
        "w2",
    );
    // (The old byte buffers were one byte short; an f32 buffer is one element short.)
    let mut part_small = dev.alloc::<f32>(2 * 256 - 1).unwrap();
    refused(
        moe::run_down::<T>(
            &dev,
            &u.idx,
            u.w2.buffers(),
            &act,
            &u.scores,
            &mut part_small,
            &shape,
            None,
            Stream::DEFAULT,
        ),
        "part",
    );
    let mut out_small = dev.alloc::<T>(255).unwrap();
    refused(moe::run_combine::<T>(&dev, &part, &mut out_small, shape.k, shape.din, Stream::DEFAULT), "out");
    let mut out = dev.alloc::<T>(256).unwrap();
    let mut scratch = dev.alloc::<u8>(scratch_bytes(shape.k, shape.din, shape.dff).unwrap() - 1).unwrap();
    let bufs = u.routed(&mut out, &mut scratch, None);
    refused(moe::run_routed_forward::<T>(&dev, bufs, &shape, Stream::DEFAULT), "scratch");
}

fn availability_matches_the_backends<T: Element>(dev: &Device) {
    assert!(moe::available(dev, T::DTYPE), "{}: all three kernels are built for every dtype", label::<T>(dev));
    assert_eq!(Device::cpu().backend(), BackendKind::Cpu);
}

// ---------------------------------------------------------------------------
// The full Nemotron shape
// ---------------------------------------------------------------------------

/// Din 2688, Dff 1856, E 16, K 6, gs 64, 4 bits, bf16 (E 128 on a GPU would only
/// add unused experts).
fn nemotron_shape(dev: &Device) {
    let t = std::time::Instant::now();
    let inp = moe_inputs(Dtype::Bf16, 2688, 1856, 16, 6, 4, 64, 2688);
    eprintln!("nemotron data: {:.1} s", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    check_all::<bf16>(dev, &inp, "nemotron");
    eprintln!("nemotron check on {}: {:.1} s", dev.backend(), t.elapsed().as_secs_f64());
}

// ---------------------------------------------------------------------------
// Bandwidth (GPU backends only)
// ---------------------------------------------------------------------------

/// Achieved bandwidth of the three kernels at the Nemotron shape with all 128
/// experts, on every GPU backend present. Each timed launch reads a different set
/// of 6 experts (21 disjoint sets rotate, 34 MB of weights each, 710 MB in all),
/// so the weights come from device memory, not from the L2.
/// `cargo test --release --features cuda --test moe -- --ignored bench --nocapture`
fn bench_nemotron_bandwidth() {
    for dev in gpu_devices("moe bench: no GPU backend present; nothing measured") {
        for bits in [4u32, 8] {
            bench_one(&dev, MoeShape { bits, ..MoeShape::NEMOTRON });
        }
    }
}

fn bench_one(dev: &Device, shape: MoeShape) {
    let dtype = Dtype::Bf16;
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ shape.bits as u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let words = |n: usize, next: &mut dyn FnMut() -> u64| -> Vec<u32> { (0..n).map(|_| next() as u32).collect() };
    // bf16 bits: scales in [2^-9, 2^-8), biases in (-2^-5, -2^-6]: weights of a few hundredths.
    let scales = |n: usize, next: &mut dyn FnMut() -> u64| -> Vec<u16> {
        (0..n).map(|_| 0x3B00 | (next() as u16 & 0x7F)).collect()
    };
    let biases = |n: usize, next: &mut dyn FnMut() -> u64| -> Vec<u16> {
        (0..n).map(|_| 0xBC80 | (next() as u16 & 0x7F)).collect()
    };
    let w1 = dev.upload(&words(shape.w1_words().unwrap(), &mut next)).unwrap();
    let s1 = dev.upload(&scales(shape.w1_groups().unwrap(), &mut next)).unwrap();
    let b1 = dev.upload(&biases(shape.w1_groups().unwrap(), &mut next)).unwrap();
    let w2 = dev.upload(&words(shape.w2_words().unwrap(), &mut next)).unwrap();
    let s2 = dev.upload(&scales(shape.w2_groups().unwrap(), &mut next)).unwrap();
    let b2 = dev.upload(&biases(shape.w2_groups().unwrap(), &mut next)).unwrap();
    let q1 = QuantizedPointers { w: w1.ptr(), scales: s1.ptr(), biases: b1.ptr() };
    let q2 = QuantizedPointers { w: w2.ptr(), scales: s2.ptr(), biases: b2.ptr() };
    let x = dev
        .upload(&reference::to_le_bytes(dtype, &reference::data::normal(dtype, 3, shape.din as usize, 1.0)))
        .unwrap();
    let k = shape.k as usize;
    let sets: Vec<DeviceBuffer<u32>> = (0..shape.n_experts as usize / k)
        .map(|j| dev.upload(&(0..k as u32).map(|i| (j * k) as u32 + i).collect::<Vec<_>>()).unwrap())
        .collect();
    let scores = dev.upload(&vec![1.0f32 / k as f32; k]).unwrap();
    let scratch = dev.alloc::<u8>(scratch_bytes(shape.k, shape.din, shape.dff).unwrap()).unwrap();
    let act = scratch.ptr();
    let part = scratch.ptr() + moe::part_offset(shape.k, shape.dff).unwrap() as u64;
    let out = dev.alloc::<u8>(shape.din as usize * 2).unwrap();
    let s = Stream::DEFAULT;
    let routed = |set: &DeviceBuffer<u32>| {
        let p = RoutedPointers {
            x: x.ptr(),
            idx: set.ptr(),
            scores: scores.ptr(),
            w1: q1,
            w2: q2,
            out: out.ptr(),
            scratch: scratch.ptr(),
            scratch_len: scratch.len(),
            status: 0,
        };
        unsafe { moe::routed_forward(dev, Dtype::Bf16, p, &shape, s) }
    };
    for set in &sets {
        routed(set).unwrap();
    }
    dev.synchronize().unwrap();
    let reps = 20;
    let launches = (reps * sets.len()) as f64;
    let time = |f: &dyn Fn(&DeviceBuffer<u32>) -> mlxcel_amdgpu::Result<()>| -> f64 {
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let ms = dev
                .time(s, || {
                    for _ in 0..reps {
                        for set in &sets {
                            f(set)?;
                        }
                    }
                    Ok(())
                })
                .unwrap();
            best = best.min(ms);
        }
        best * 1e3 / launches // microseconds per launch
    };
    let (din, dff, bits, gs) = (shape.din as f64, shape.dff as f64, shape.bits as f64, shape.group_size as f64);
    let kf = k as f64;
    let fc1_bytes = kf * (dff * din * bits / 8.0 + 2.0 * dff * din / gs * 2.0) + din * 2.0 + kf * dff * 4.0;
    let down_bytes = kf * (din * dff * bits / 8.0 + 2.0 * din * dff / gs * 2.0) + kf * dff * 4.0 + kf * din * 4.0;
    let combine_bytes = kf * din * 4.0 + din * 2.0;
    let t_fc1 =
        time(&|set| unsafe { moe::fc1_relu2(dev, Dtype::Bf16, shape.fc1_args(x.ptr(), set.ptr(), q1, act, 0), s) });
    let t_down = time(&|set| unsafe {
        moe::down(dev, Dtype::Bf16, shape.down_args(set.ptr(), q2, act, scores.ptr(), part, 0), s)
    });
    let t_comb = time(&|_| unsafe {
        moe::combine(dev, Dtype::Bf16, moe::MoeCombineArgs { part, out: out.ptr(), k: shape.k, din: shape.din }, s)
    });
    let t_all = time(&routed);
    let line = |name: &str, us: f64, bytes: f64| {
        eprintln!("  {name:<14} {us:8.2} us  {:7.1} MB  {:7.0} GB/s", bytes / 1e6, bytes / us / 1e3)
    };
    eprintln!("moe bench on {} ({}), {shape:?}:", dev.info().name, dev.backend());
    line("fc1_relu2", t_fc1, fc1_bytes);
    line("down", t_down, down_bytes);
    line("combine", t_comb, combine_bytes);
    line("routed (3)", t_all, fc1_bytes + down_bytes + combine_bytes);
}

/// `out` over a buffer of the first two launches (found by the c_abi fuzz
/// target: `out` over `s2` was launched, and the combine overwrote the
/// scales): refused naming `out` and the other buffer, at any offset.
fn routed_forward_with_out_over_an_input_is_refused<T: Element>(_: &Device) {
    let p = routed_pointers();
    let es = size_of::<T>() as u64;
    for (name, at) in [("x", p.x), ("s2", p.w2.scales + es), ("w1", p.w1.w), ("b2", p.w2.biases), ("idx", p.idx - es)] {
        let m = refused(routed_refused::<T>(RoutedPointers { out: at, ..p }, S), "out");
        assert!(m.contains(&format!("`{name}`")), "{}: out over {name}: {m}", T::DTYPE);
    }
    let m = refused(routed_refused::<T>(RoutedPointers { out: p.scores, ..p }, S), "out");
    assert!(m.contains("`scores`"), "{m}");
}

/// The Rust size helpers answer an overflow with an error naming the buffer,
/// never a wrapped count.
fn sizes_past_usize_are_errors() {
    let huge = MoeShape { n_experts: u32::MAX, k: u32::MAX, din: u32::MAX, dff: u32::MAX, bits: 8, group_size: 32 };
    refused(huge.w1_words().map(drop), "w1");
    refused(huge.w1_groups().map(drop), "s1");
    refused(huge.w2_words().map(drop), "w2");
    refused(huge.w2_groups().map(drop), "s2");
    refused(scratch_bytes(u32::MAX, 1, u32::MAX).map(drop), "k");
    refused(moe::part_offset(u32::MAX, u32::MAX).map(drop), "k");
    assert_eq!(S.w1_words().unwrap(), 16 * 384 * (512 / 8));
}

fn main() {
    Suite::new()
        .per_backend("reduced_shape_bf16_bits_4", reduced_shape_bf16_bits_4)
        .per_backend("reduced_shape_bf16_bits_8", reduced_shape_bf16_bits_8)
        .per_backend_and_dtype("every_dtype_and_group_size", typed!(every_dtype_and_group_size))
        .per_backend("long_rows_take_several_batches", long_rows_take_several_batches)
        .per_backend("combine_takes_slots_in_batches", combine_takes_slots_in_batches)
        .per_backend_and_dtype("edge_expert_ids_at_the_bounds", typed!(edge_expert_ids_at_the_bounds))
        .per_backend("edge_the_longest_rows", edge_the_longest_rows)
        .cuda_per_dtype("edge_the_largest_grid", typed!(edge_the_largest_grid))
        .per_backend("misaligned_pointers_take_the_slow_paths", misaligned_pointers_take_the_slow_paths)
        .single(
            "negative_control_a_fold_starting_at_8_fails_the_tolerance",
            negative_control_a_fold_starting_at_8_fails_the_tolerance,
        )
        .per_backend(
            "an_expert_id_out_of_range_gives_nan_rows_and_status",
            an_expert_id_out_of_range_gives_nan_rows_and_status,
        )
        .single("check_expert_ids_on_the_host", check_expert_ids_on_the_host)
        .single("bad_shapes_are_refused_before_any_launch", bad_shapes_are_refused_before_any_launch)
        .single(
            "null_and_misaligned_pointers_are_refused_and_named",
            null_and_misaligned_pointers_are_refused_and_named,
        )
        .single("routed_forward_refuses_its_scratch_and_output", routed_forward_refuses_its_scratch_and_output)
        .single("sizes_past_usize_are_errors", sizes_past_usize_are_errors)
        .cpu_per_dtype(
            "routed_forward_with_out_over_an_input_is_refused",
            typed!(routed_forward_with_out_over_an_input_is_refused),
        )
        .cpu_per_dtype(
            "routed_forward_with_scratch_overlapping_out_is_refused",
            typed!(routed_forward_with_scratch_overlapping_out_is_refused),
        )
        .cpu_per_dtype(
            "routed_forward_with_a_weight_in_the_scratch_is_refused",
            typed!(routed_forward_with_a_weight_in_the_scratch_is_refused),
        )
        .single("the_safe_wrappers_check_buffer_sizes", the_safe_wrappers_check_buffer_sizes)
        .per_backend_and_dtype("availability_matches_the_backends", typed!(availability_matches_the_backends))
        .per_backend("nemotron_shape", nemotron_shape)
        .ignored(
            "bench_nemotron_bandwidth",
            "GPU benchmark; run with --ignored --nocapture on a machine with a GPU (release build)",
            bench_nemotron_bandwidth,
        )
        .run()
}
