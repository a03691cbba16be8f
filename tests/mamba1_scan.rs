//! `mamba1_scan` on every backend present (docs/contracts.md, section 5): the f32
//! tolerance matrix, the bf16 comparison with the op-by-op graph, f16, awkward
//! shapes (N, Dm, L not multiples of 8), the state carried across launches and
//! updated in place, the launcher's refusals, and the negative control of the
//! reduction (a channel sum over two of the four lanes fails the N = 32 test).
//!
//! Besides the contract's tolerances, every launch is compared with [`model`], a
//! host model of the kernel's own operation order: bit for bit on the emulator
//! (which runs the kernel's `exp2_fast(v)` as `num::exp(v * ln 2)`); within the contract's
//! bounds on a GPU, where `exp2_fast` is the hardware's exp2 approximation.
//!
//! Every case is its own test per backend (and per dtype where the case is
//! generic over it), named `case::backend[::dtype]`, through the harness of
//! `tests/common`: an absent backend's tests are ignored with the reason.

mod common;

use common::timing::median_of_timed;
use common::{Suite, download_bits, download_values, gpu_devices, label, sentinel, upload};
use mlxcel_amdgpu::half::{bf16, f16};
use mlxcel_amdgpu::kernels::mamba1_scan::{self, ScanBuffers, ScanPointers, ScanShape};
use mlxcel_amdgpu::kernels_device::geometry::mamba1_scan::{MAX_BATCH, Mapping};
use mlxcel_amdgpu::kernels_device::num::consts::{LN2_HI, LOG2E};
use mlxcel_amdgpu::kernels_device::num::exp;
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer, Dtype, Element, Error, Stream};
use mlxcel_amdgpu_testkit::fixtures::ScanUpload;
use mlxcel_amdgpu_testkit::reference::mamba::{ScanInputs, scan_f32, scan_f64, scan_graph_bf16};
use mlxcel_amdgpu_testkit::reference::{self, metrics};

/// Section 3's f32 bound on `max|got - want| / max(1e-6, max|want|)`.
const F32_TOL: f64 = 1e-5;
/// f16 bound on y: one rounding to f16 is at most 2^-11 = 4.9e-4 of |y| <= max|y|.
const F16_Y_TOL: f64 = 1e-3;

/// Extra elements past the end of each output buffer, which must stay untouched.
const GUARD: usize = 16;

/// The f32 bits of the sentinel fill (`common::sentinel` fills bytes with 0x7B).
const SENTINEL_F32: u32 = 0x7B7B_7B7B;

struct Outputs {
    /// `y`, widened from the dtype.
    y: Vec<f32>,
    /// `y` as stored bits.
    y_bits: Vec<u32>,
    /// The final state (f32).
    state: Vec<f32>,
    /// Whether it ran on the CPU emulator, whose `exp2_fast` is `num::exp` of `v ln 2`, so
    /// that it must match [`model`] bit for bit. On a GPU `exp2_fast` is the
    /// hardware's exp2 approximation, and the match is within the contract.
    emulated: bool,
    /// The lane mapping of the kernels that ran (per backend), which the model follows.
    mapping: Mapping,
}

fn upload_inputs<T: Element>(dev: &Device, s: &ScanInputs) -> ScanUpload<T> {
    ScanUpload::new(dev, s).unwrap()
}

/// Where the launch reads the state from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StateIn {
    /// `state_in` and `state_out` are separate buffers (the safe `run`).
    Separate,
    /// `state_in: None`: `state_out` holds the state and is updated in place (the safe `run`).
    InPlace,
    /// The raw `launch` with the `state_in` pointer equal to `state_out`'s (the
    /// declared exact alias).
    Aliased,
}

/// One launch, with guard elements past both outputs.
fn run_kernel<T: Element>(dev: &Device, s: &ScanInputs, state: StateIn) -> Outputs {
    let (nseq, nstate) = (s.batch * s.len * s.dm, s.batch * s.dm * s.n);
    let inp = upload_inputs::<T>(dev, s);
    let mut y = sentinel::<T>(dev, nseq + GUARD);
    let state_in = upload::<f32>(dev, &s.state_in);
    let mut state_out = if state == StateIn::Separate {
        sentinel::<f32>(dev, nstate + GUARD)
    } else {
        let mut v = s.state_in.clone();
        v.extend([f32::from_bits(SENTINEL_F32); GUARD]);
        upload::<f32>(dev, &v)
    };
    let (b, l, dm, n) = (s.batch as u32, s.len as u32, s.dm as u32, s.n as u32);
    if state == StateIn::Aliased {
        let p = inp.pointers(state_out.ptr(), y.ptr(), state_out.ptr());
        // SAFETY: every buffer holds at least the shape's elements.
        unsafe {
            mamba1_scan::launch(
                dev,
                T::DTYPE,
                mamba1_scan::args(p, ScanShape { batch: b, len: l, dm, n }),
                Stream::DEFAULT,
            )
        }
        .unwrap();
    } else {
        let state_in = if state == StateIn::Separate { Some(&state_in) } else { None };
        let bufs = inp.buffers(state_in, &mut y, &mut state_out);
        mamba1_scan::run::<T>(dev, bufs, ScanShape { batch: b, len: l, dm, n }, Stream::DEFAULT).unwrap();
    }
    let y_bits = download_bits(&y);
    let state_bits = download_bits(&state_out);
    let what = format!("{} B={b} L={l} Dm={dm} N={n} {state:?}", label::<T>(dev));
    let guard = download_bits(&sentinel::<T>(dev, 1))[0];
    assert!(y_bits[nseq..].iter().all(|&v| v == guard), "{what}: wrote past the end of y");
    assert!(state_bits[nstate..].iter().all(|&v| v == SENTINEL_F32), "{what}: wrote past the end of state_out");
    let y_bits = y_bits[..nseq].to_vec();
    Outputs {
        y: reference::widen_all(T::DTYPE, &y_bits),
        y_bits,
        state: state_bits[..nstate].iter().map(|&v| f32::from_bits(v)).collect(),
        emulated: dev.backend() == BackendKind::Cpu,
        mapping: mamba1_scan::mapping(dev.backend()),
    }
}

/// How the model adds a step's lane sums over the lanes of a channel.
#[derive(Clone, Copy)]
enum ChannelSum {
    /// The kernel's: a tree over the lanes, pairing lanes at distance LANES/2
    /// first (`q0 + q1` with two lanes; `(q0 + q2) + (q1 + q3)` with four).
    Kernel,
    /// A broken sum that adds lanes 0 and 1 only, so that with AMD's four lanes
    /// it misses state columns 16..31 (the negative control).
    FirstTwoLanes,
}

/// The kernel's operation order on the host (kernels-device/src/mamba1_scan.rs):
/// `a2 = A * log2 e` once per column; per step `decay = exp2_fast(dt * a2)` (on
/// the host `exp((dt * a2) * ln 2)`), `u = (dt * x) * B`, `s = fma(decay, s,
/// u)`; each lane's `q` is the chain `fma(s, C, q)` from `+0.0` over its
/// `mapping.states_per_lane` columns below N in order; the lanes' `q` are added
/// as `sum` says and `y = T(total + x * Dskip)`. Returns `(y, state_out)`.
fn model(dtype: Dtype, s: &ScanInputs, sum: ChannelSum, mapping: Mapping) -> (Vec<f32>, Vec<f32>) {
    let n = s.n;
    let cols = mapping.states_per_lane as usize;
    let lanes = mapping.lanes_per_channel(n as u32) as usize;
    s.scan_each(s.state_in.clone(), |d, row, st| {
        let (dt, x) = (s.dt[row * s.dm + d], s.x[row * s.dm + d]);
        let dtx = dt * x;
        let mut q = [0.0f32; 16];
        for k in 0..n {
            let a2 = s.a[d * n + k] * LOG2E;
            let decay = exp((dt * a2) * LN2_HI);
            st[k] = decay.mul_add(st[k], dtx * s.bm[row * n + k]);
            q[k / cols] = st[k].mul_add(s.cm[row * n + k], q[k / cols]);
        }
        let total = match sum {
            ChannelSum::Kernel => lane_tree(&q[..lanes]),
            ChannelSum::FirstTwoLanes => q[0] + q[1],
        };
        reference::round(dtype, total + x * s.dskip[d])
    })
}

/// The sum of the lanes' `q` in the kernel's tree: lane `i` plus lane `i +
/// len/2` for each `i` below `len/2`, then the same over those sums.
fn lane_tree(q: &[f32]) -> f32 {
    if q.len() == 1 {
        return q[0];
    }
    let half = q.len() / 2;
    let pairs: Vec<f32> = (0..half).map(|i| q[i] + q[i + half]).collect();
    lane_tree(&pairs)
}

/// The kernel's outputs equal [`model`]'s: bit for bit on the emulator, within
/// the contract's bounds on a GPU (see [`Outputs::emulated`]).
fn assert_matches_model(dtype: Dtype, got: &Outputs, s: &ScanInputs, what: &str) {
    let (y, state) = model(dtype, s, ChannelSum::Kernel, got.mapping);
    if !got.emulated {
        // The GPU's exp2 approximation: within the contract's bounds of the model.
        let y_tol = match dtype {
            Dtype::F32 => F32_TOL,
            Dtype::F16 => F16_Y_TOL,
            Dtype::Bf16 => 8e-3,
        };
        // Non-finite values must agree exactly (NaN-ness, and infinities with their
        // sign); the finite ones within the bound, relative to the largest of them.
        let split = |got: &[f32], want: &[f32]| -> (bool, Vec<f32>, Vec<f32>) {
            let mut same_specials = true;
            let (mut g, mut w) = (Vec::new(), Vec::new());
            for (&a, &b) in got.iter().zip(want) {
                if a.is_finite() && b.is_finite() {
                    g.push(a);
                    w.push(b);
                } else {
                    same_specials &= (a.is_nan() && b.is_nan()) || a == b;
                }
            }
            (same_specials, g, w)
        };
        let (y_specials, gy, wy) = split(&got.y, &y);
        let (s_specials, gs, ws) = split(&got.state, &state);
        let ey = if gy.is_empty() { 0.0 } else { metrics::max_rel(&gy, &wy) };
        let es = if gs.is_empty() { 0.0 } else { metrics::max_rel(&gs, &ws) };
        assert!(
            y_specials && s_specials && ey < y_tol && es < F32_TOL,
            "{what} vs the kernel model: y {ey:e} (bound {y_tol:e}), state {es:e}, non-finite values equal: y {y_specials}, state {s_specials}"
        );
        return;
    }
    metrics::assert_bits_equal(
        dtype,
        &got.y_bits,
        &reference::store_all(dtype, &y),
        &format!("y of {what} vs the kernel model"),
    );
    let got_state: Vec<u32> = got.state.iter().map(|v| v.to_bits()).collect();
    let want_state: Vec<u32> = state.iter().map(|v| v.to_bits()).collect();
    metrics::assert_bits_equal(Dtype::F32, &got_state, &want_state, &format!("state of {what} vs the kernel model"));
}

/// Errors of y and the final state against the f64 reference (section 3's metric).
fn errors_vs_f64(got: &Outputs, s: &ScanInputs) -> (f64, f64) {
    let (y64, st64) = scan_f64(s);
    (metrics::max_rel(&got.y, &y64), metrics::max_rel(&got.state, &st64))
}

fn f32_acceptance_matrix_is_within_1e_5(dev: &Device) {
    let (mut worst_y, mut worst_s) = (0.0f64, 0.0f64);
    for n in [8, 16, 32] {
        for len in [1, 7] {
            for carried in [false, true] {
                let s = ScanInputs::generate(Dtype::F32, 2, len, 24, n, carried);
                let got = run_kernel::<f32>(dev, &s, StateIn::Separate);
                let what = format!("{} N={n} L={len} carried={carried}", label::<f32>(dev));
                let (ey, es) = errors_vs_f64(&got, &s);
                let (y32, st32) = scan_f32(Dtype::F32, &s);
                let (ey32, es32) = (metrics::max_rel(&got.y, &y32), metrics::max_rel(&got.state, &st32));
                assert!(ey < F32_TOL && es < F32_TOL, "{what}: vs f64: y {ey:e}, state {es:e}");
                assert!(ey32 < F32_TOL && es32 < F32_TOL, "{what}: vs f32 reference: y {ey32:e}, state {es32:e}");
                assert_matches_model(Dtype::F32, &got, &s, &what);
                worst_y = worst_y.max(ey);
                worst_s = worst_s.max(es);
            }
        }
    }
    eprintln!(
        "[mamba1_scan] {}: f32 matrix, worst max_rel vs f64: y {worst_y:.3e}, state {worst_s:.3e} (bound 1e-5)",
        dev.backend()
    );
}

fn bf16_beats_the_op_by_op_graph(dev: &Device) {
    let s = ScanInputs::generate(Dtype::Bf16, 1, 64, 24, 16, true);
    let (exact_y, exact_state) = scan_f64(&s);
    let (graph_y, _) = scan_graph_bf16(&s);
    let e_graph = metrics::rms_diff(&graph_y, &exact_y);
    let got = run_kernel::<bf16>(dev, &s, StateIn::Separate);
    let what = format!("{} B=1 L=64 Dm=24 N=16 carried", label::<bf16>(dev));
    let e_kernel = metrics::rms_diff(&got.y, &exact_y);
    let es = metrics::max_rel(&got.state, &exact_state);
    eprintln!(
        "[mamba1_scan] {what}: RMS(y - exact) kernel {e_kernel:.3e}, graph {e_graph:.3e}; state max_rel {es:.3e}"
    );
    assert!(e_kernel <= e_graph, "{what}: RMS error {e_kernel:e} is worse than the graph's {e_graph:e}");
    assert!(es < F32_TOL, "{what}: the f32 state is off by {es:e}");
    assert_matches_model(Dtype::Bf16, &got, &s, &what);
}

fn f16_is_within_one_rounding(dev: &Device) {
    let mut worst = 0.0f64;
    for (n, len, carried) in [(8, 7, false), (16, 7, true), (32, 1, true), (16, 64, true)] {
        let s = ScanInputs::generate(Dtype::F16, 2, len, 24, n, carried);
        let got = run_kernel::<f16>(dev, &s, StateIn::Separate);
        let what = format!("{} N={n} L={len} carried={carried}", label::<f16>(dev));
        let (ey, es) = errors_vs_f64(&got, &s);
        assert!(ey < F16_Y_TOL && es < F32_TOL, "{what}: vs f64: y {ey:e} (bound {F16_Y_TOL:e}), state {es:e}");
        assert_matches_model(Dtype::F16, &got, &s, &what);
        worst = worst.max(ey);
    }
    eprintln!("[mamba1_scan] {}: f16 worst y max_rel vs f64 {worst:.3e} (bound {F16_Y_TOL:e})", dev.backend());
}

/// Every shape for every dtype (the old test paired each shape with f32 and one
/// other dtype in turn; this runs the full cross product).
fn n_dm_and_l_off_the_multiples_of_8<T: Element>(dev: &Device) {
    // (batch, len, dm, n): N not a multiple of 8, Dm not a multiple of 8 (the last
    // workgroup has waves past Dm), L with a remainder after the unrolled loop,
    // and the edges (N = 1, L = 8 and 16 with no remainder, a single channel).
    let shapes = [(2, 9, 20, 5), (1, 17, 27, 13), (2, 9, 27, 32), (1, 16, 20, 1), (1, 8, 1, 13), (3, 17, 9, 16)];
    for (batch, len, dm, n) in shapes {
        let s = ScanInputs::generate(T::DTYPE, batch, len, dm, n, true);
        let got = run_kernel::<T>(dev, &s, StateIn::Separate);
        let what = format!("{} B={batch} L={len} Dm={dm} N={n}", label::<T>(dev));
        assert_matches_model(T::DTYPE, &got, &s, &what);
        let (ey, es) = errors_vs_f64(&got, &s);
        let y_tol = if T::DTYPE == Dtype::F32 { F32_TOL } else { 8e-3 };
        assert!(ey < y_tol && es < F32_TOL, "{what}: vs f64: y {ey:e}, state {es:e}");
    }
}

/// Every count of 8-step chunks from one to five, with and without a remainder,
/// at N = 16 and 32 (the instances with the unrolled loop): on NVIDIA and the
/// host emulator the loop takes the chunks in pairs, then an odd last one.
fn every_chunk_count_up_to_five<T: Element>(dev: &Device) {
    for n in [16, 32] {
        for len in [8, 16, 24, 32, 40, 43] {
            let s = ScanInputs::generate(T::DTYPE, 2, len, 20, n, true);
            let got = run_kernel::<T>(dev, &s, StateIn::Separate);
            assert_matches_model(T::DTYPE, &got, &s, &format!("{} B=2 L={len} Dm=20 N={n}", label::<T>(dev)));
        }
    }
}

/// The reliability sweep's shapes (docs/reliability.md): N = 1, 31, 32 (one
/// lane, all but one, a full wave) at L = 1 and 2049 (one step; every unrolled
/// pass plus a remainder of one), over Dm = 5 (channels of the last wave past
/// Dm in every mapping).
fn edge_n_and_l<T: Element>(dev: &Device) {
    for n in [1, 31, 32] {
        for len in [1, 2049] {
            let s = ScanInputs::generate(T::DTYPE, 2, len, 5, n, true);
            let got = run_kernel::<T>(dev, &s, StateIn::Separate);
            assert_matches_model(T::DTYPE, &got, &s, &format!("{} B=2 L={len} Dm=5 N={n}", label::<T>(dev)));
        }
    }
}

/// The largest grid a launch takes: `MAX_BATCH` sequences (grid y) of one
/// channel, one step, N = 1. On CUDA only: the emulators would take 65535 workgroups.
fn edge_the_largest_grid<T: Element>(dev: &Device) {
    let s = ScanInputs::generate(T::DTYPE, MAX_BATCH as usize, 1, 1, 1, true);
    let got = run_kernel::<T>(dev, &s, StateIn::Separate);
    assert_matches_model(T::DTYPE, &got, &s, &format!("{} B={MAX_BATCH} L=1 Dm=1 N=1", label::<T>(dev)));
}

fn state_carried_across_two_launches_equals_one_launch_bitwise<T: Element>(dev: &Device) {
    for (l1, l2) in [(7, 10), (8, 9), (1, 16)] {
        let (batch, dm, n) = (2, 12, 16);
        let whole = ScanInputs::generate(T::DTYPE, batch, l1 + l2, dm, n, true);
        // The two halves of the same sequence.
        let part = |from: usize, len: usize, state_in: Vec<f32>| {
            let rows = |v: &[f32], w: usize| -> Vec<f32> {
                (0..batch)
                    .flat_map(|b| v[(b * (l1 + l2) + from) * w..(b * (l1 + l2) + from + len) * w].to_vec())
                    .collect()
            };
            ScanInputs {
                batch,
                len,
                dm,
                n,
                x: rows(&whole.x, dm),
                dt: rows(&whole.dt, dm),
                bm: rows(&whole.bm, n),
                cm: rows(&whole.cm, n),
                a: whole.a.clone(),
                dskip: whole.dskip.clone(),
                state_in,
            }
        };
        let one = run_kernel::<T>(dev, &whole, StateIn::Separate);
        let first = run_kernel::<T>(dev, &part(0, l1, whole.state_in.clone()), StateIn::Separate);
        // The second launch updates its state in place.
        let second = run_kernel::<T>(dev, &part(l1, l2, first.state.clone()), StateIn::InPlace);
        let what = format!("{} L={l1}+{l2}", label::<T>(dev));
        let two_y: Vec<u32> = (0..batch)
            .flat_map(|b| {
                let mut v = first.y_bits[b * l1 * dm..(b + 1) * l1 * dm].to_vec();
                v.extend_from_slice(&second.y_bits[b * l2 * dm..(b + 1) * l2 * dm]);
                v
            })
            .collect();
        metrics::assert_bits_equal(T::DTYPE, &two_y, &one.y_bits, &format!("y of {what}"));
        metrics::assert_bits_equal(Dtype::F32, &bits(&second.state), &bits(&one.state), &format!("state of {what}"));
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|e| e.to_bits()).collect()
}

/// In place through the safe `run` (`state_in: None`) and through the raw
/// `launch` with `state_in == state_out` (the declared exact alias): the same
/// bits as separate buffers.
fn in_place_state_equals_separate_buffers<T: Element>(dev: &Device) {
    for (batch, len, dm, n) in [(2, 11, 16, 16), (1, 9, 27, 32), (3, 1, 9, 5)] {
        let s = ScanInputs::generate(T::DTYPE, batch, len, dm, n, true);
        let separate = run_kernel::<T>(dev, &s, StateIn::Separate);
        for mode in [StateIn::InPlace, StateIn::Aliased] {
            let in_place = run_kernel::<T>(dev, &s, mode);
            let what = format!("{} B={batch} L={len} Dm={dm} N={n} {mode:?}", label::<T>(dev));
            metrics::assert_bits_equal(T::DTYPE, &in_place.y_bits, &separate.y_bits, &format!("y of {what}"));
            metrics::assert_bits_equal(
                Dtype::F32,
                &bits(&in_place.state),
                &bits(&separate.state),
                &format!("state of {what}"),
            );
        }
    }
}

fn nan_and_infinity_follow_the_model<T: Element>(dev: &Device) {
    // Non-finite inputs must not crash, hang or write out of bounds, and give
    // what the operation order gives (NaN-ness compared, not payloads).
    let mut s = ScanInputs::generate(T::DTYPE, 1, 11, 9, 13, true);
    s.x[3 * 9 + 2] = f32::NAN; // channel 2 from step 3 on
    s.dt[5 * 9 + 4] = f32::INFINITY; // channel 4: decay 0, u = +-inf
    s.bm[7 * 13 + 12] = f32::NEG_INFINITY; // every channel at step 7
    s.dskip[8] = f32::INFINITY;
    let got = run_kernel::<T>(dev, &s, StateIn::Separate);
    let what = format!("{} specials", label::<T>(dev));
    assert_matches_model(T::DTYPE, &got, &s, &what);
    assert!(reference::is_nan_bits(T::DTYPE, got.y_bits[3 * 9 + 2]), "{what}: NaN x must give a NaN y");
}

fn negative_control_a_sum_over_two_of_four_lanes_fails_the_n32_test() {
    // At N = 32 a channel takes four lanes of eight columns; a sum of lanes 0
    // and 1 only would miss columns 16..31 of y. Section 3's f32 comparison
    // must reject it clearly, while the real order passes.
    let mut worst_broken = f64::INFINITY;
    for len in [1, 7] {
        for carried in [false, true] {
            let s = ScanInputs::generate(Dtype::F32, 2, len, 24, 32, carried);
            let (y64, _) = scan_f64(&s);
            let (y_good, _) = model(Dtype::F32, &s, ChannelSum::Kernel, Mapping::AMD);
            let (y_broken, _) = model(Dtype::F32, &s, ChannelSum::FirstTwoLanes, Mapping::AMD);
            let good = metrics::max_rel(&y_good, &y64);
            let broken = metrics::max_rel(&y_broken, &y64);
            assert!(good < F32_TOL, "the model itself must pass: {good:e}");
            assert!(broken > 1e-2, "L={len} carried={carried}: a sum over two lanes gives only {broken:e}");
            worst_broken = worst_broken.min(broken);
        }
    }
    eprintln!(
        "[mamba1_scan] negative control: a sum over two of four lanes is off by at least {worst_broken:.3e} (bound 1e-5)"
    );
    // And the kernel is not that broken model.
    let s = ScanInputs::generate(Dtype::F32, 2, 7, 24, 32, true);
    let got = run_kernel::<f32>(&Device::cpu(), &s, StateIn::Separate);
    let (y_broken, _) = model(Dtype::F32, &s, ChannelSum::FirstTwoLanes, got.mapping);
    assert!(metrics::max_rel(&got.y, &y_broken) > 1e-2);
}

// ---------------------------------------------------------------------------
// Refusals (on the CPU emulator: they are checked before anything is launched)
// ---------------------------------------------------------------------------

/// Pointers that are valid-looking, aligned for every dtype and far enough apart
/// that no two ranges of the shapes used here overlap.
const P: ScanPointers = ScanPointers {
    x: 0x10_0000,
    dt: 0x20_0000,
    bm: 0x30_0000,
    cm: 0x40_0000,
    a: 0x50_0000,
    dskip: 0x60_0000,
    state_in: 0x70_0000,
    y: 0x80_0000,
    state_out: 0x90_0000,
};

/// The raw launch of `T` on the CPU, which must be refused.
fn refused<T: Element>(p: ScanPointers, batch: u32, len: u32, dm: u32, n: u32) -> Error {
    let dev = Device::cpu();
    // SAFETY: every case here is refused before the launch (asserted).
    match unsafe {
        mamba1_scan::launch(&dev, T::DTYPE, mamba1_scan::args(p, ScanShape { batch, len, dm, n }), Stream::DEFAULT)
    } {
        Err(e) => e.root().clone(),
        Ok(()) => panic!("{} {p:x?} B={batch} L={len} Dm={dm} N={n}: launched", T::DTYPE),
    }
}

fn arg(e: &Error) -> &'static str {
    match e.root() {
        Error::InvalidArgument { argument, .. } => argument,
        other => panic!("expected an invalid argument, got {other}"),
    }
}

fn bad_shapes_are_refused_before_any_launch() {
    let err = refused::<bf16>(P, 1, 1, 8, 33);
    assert_eq!(
        err.to_string(),
        "invalid argument `n`: 33 is outside 1..=32: the kernels hold at most 32 state columns per channel in registers; a larger state needs another kernel"
    );
    assert_eq!(arg(&refused::<bf16>(P, 1, 1, 8, 0)), "n");
    let err = refused::<f32>(P, 1, 0, 8, 16);
    assert_eq!(err.to_string(), "invalid argument `len`: 0: the sequence length L must be at least 1");
    assert_eq!(arg(&refused::<f32>(P, 0, 1, 8, 16)), "batch");
    assert_eq!(arg(&refused::<f32>(P, 65536, 1, 8, 16)), "batch");
    assert_eq!(arg(&refused::<f16>(P, 1, 1, 0, 16)), "dm");
    // Sizes that overflow the address space.
    let err = refused::<f32>(P, 65535, u32::MAX, u32::MAX, 16);
    assert_eq!(arg(&err), "x", "{err}");
}

fn null_and_misaligned_pointers_are_refused_and_named() {
    assert_eq!(arg(&refused::<f32>(ScanPointers { y: 0, ..P }, 1, 1, 8, 16)), "y");
    assert_eq!(arg(&refused::<f32>(ScanPointers { state_in: 0, ..P }, 1, 1, 8, 16)), "state_in");
    let err = refused::<bf16>(ScanPointers { a: 0x50_0002, ..P }, 1, 1, 8, 16);
    // (The old launcher said "is not aligned to 4 bytes"; the declaration-derived
    // check names the element.)
    assert_eq!(err.to_string(), "invalid argument `a`: pointer 0x500002 is not aligned to its f32 element (4 bytes)");
    assert_eq!(arg(&refused::<bf16>(ScanPointers { state_out: 0x90_0002, ..P }, 1, 1, 8, 16)), "state_out");
    assert_eq!(arg(&refused::<bf16>(ScanPointers { cm: 0x40_0001, ..P }, 1, 1, 8, 16)), "cm");
    assert_eq!(arg(&refused::<f32>(ScanPointers { dskip: 0x60_0002, ..P }, 1, 1, 8, 16)), "dskip");
}

/// `y` exactly `x`, or overlapping it by part of its range, is refused: the
/// error names `y` and mentions `x`.
fn y_overlapping_x_is_refused_naming_both<T: Element>(_: &Device) {
    let es = size_of::<T>() as u64;
    // Shape B=1 L=4 Dm=8 N=16: x and y hold 32 elements each.
    for (what, y) in [("exact", P.x), ("one element in", P.x + es), ("ending inside", P.x - 31 * es)] {
        let err = refused::<T>(ScanPointers { y, ..P }, 1, 4, 8, 16);
        match err.root() {
            Error::InvalidArgument { argument: "y", message } if message.contains("`x`") => {}
            other => panic!("{} y {what} x: expected a refusal of `y` naming `x`, got {other}", T::DTYPE),
        }
    }
    // Only `state_out` may alias, and only `state_in` exactly.
    let err = refused::<T>(ScanPointers { state_out: P.state_in + 4, ..P }, 1, 4, 8, 16);
    match err.root() {
        Error::InvalidArgument { argument: "state_out", message } if message.contains("`state_in`") => {}
        other => panic!("{}: state_out partly over state_in: got {other}", T::DTYPE),
    }
    let err = refused::<T>(ScanPointers { state_out: P.x, ..P }, 1, 4, 8, 16);
    assert_eq!(arg(&err), "state_out", "{}: state_out over x: {err}", T::DTYPE);
    let err = refused::<T>(ScanPointers { y: P.state_out, ..P }, 1, 4, 8, 16);
    assert!(matches!(err.root(), Error::InvalidArgument { .. }), "{}: y over state_out: {err}", T::DTYPE);
}

fn buffers<'a>(
    inp: &'a ScanUpload<f16>,
    bm: &'a DeviceBuffer<f16>,
    state_in: &'a DeviceBuffer<f32>,
    y: &'a mut DeviceBuffer<f16>,
    state_out: &'a mut DeviceBuffer<f32>,
) -> ScanBuffers<'a, f16> {
    ScanBuffers { bm, ..inp.buffers(Some(state_in), y, state_out) }
}

fn the_safe_wrapper_checks_every_buffer_size() {
    let dev = Device::cpu();
    let s = ScanInputs::generate(Dtype::F16, 1, 4, 8, 16, true);
    let inp = upload_inputs::<f16>(&dev, &s);
    let state_in = upload::<f32>(&dev, &s.state_in);
    let mut y = sentinel::<f16>(&dev, 4 * 8);
    let mut state_out = sentinel::<f32>(&dev, 8 * 16);
    let short = dev.alloc::<f16>(5).unwrap();
    let run = |bufs: ScanBuffers<'_, f16>, n: u32| {
        mamba1_scan::run::<f16>(&dev, bufs, ScanShape { batch: 1, len: 4, dm: 8, n }, Stream::DEFAULT)
    };
    let err = run(buffers(&inp, &short, &state_in, &mut y, &mut state_out), 16).unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `bm`: holds 10 bytes, needs 128 (64 f16 elements)");
    let mut small_state = dev.alloc::<f32>(8 * 16 - 1).unwrap();
    let err = run(buffers(&inp, inp.bm(), &state_in, &mut y, &mut small_state), 16).unwrap_err();
    assert_eq!(arg(&err), "state_out");
    let err = run(buffers(&inp, inp.bm(), &state_in, &mut y, &mut state_out), 33).unwrap_err();
    assert_eq!(arg(&err), "n");
    // In place, a short state_out is short for state_in too.
    let mut small_state = dev.alloc::<f32>(8 * 16 - 1).unwrap();
    let bufs = ScanBuffers { state_in: None, ..buffers(&inp, inp.bm(), &state_in, &mut y, &mut small_state) };
    let err = run(bufs, 16).unwrap_err();
    assert!(matches!(arg(&err), "state_in" | "state_out"), "{err}");
    // The same buffers with the right shape run.
    run(buffers(&inp, inp.bm(), &state_in, &mut y, &mut state_out), 16).unwrap();
}

/// The CPU backend refuses a non-NULL stream (it has none).
fn the_cpu_backend_refuses_a_stream() {
    let dev = Device::cpu();
    let s = ScanInputs::generate(Dtype::F32, 1, 2, 8, 16, true);
    let inp = upload_inputs::<f32>(&dev, &s);
    let mut y = sentinel::<f32>(&dev, 2 * 8);
    let mut state_out = upload::<f32>(&dev, &s.state_in);
    let bufs = inp.buffers(None, &mut y, &mut state_out);
    let stream = Stream(0x1000 as *mut std::ffi::c_void);
    let err = mamba1_scan::run::<f32>(&dev, bufs, ScanShape { batch: 1, len: 2, dm: 8, n: 16 }, stream).unwrap_err();
    assert_eq!(arg(&err), "stream", "{err}");
}

fn availability_matches_the_launch_lookup<T: Element>(dev: &Device) {
    let available = mamba1_scan::available(dev, T::DTYPE);
    assert_eq!(available, dev.kernel(&format!("mamba1_scan_{}", T::DTYPE)).is_ok(), "{}", label::<T>(dev));
    if dev.backend() == BackendKind::Cpu {
        assert!(available);
    }
}

fn a_long_prefill_stays_within_1e_5(dev: &Device) {
    // L = 512, the prefill case: 64 passes of the unrolled loop.
    let s = ScanInputs::generate(Dtype::F32, 1, 512, 16, 16, true);
    let got = run_kernel::<f32>(dev, &s, StateIn::Separate);
    let what = format!("{} B=1 L=512 Dm=16 N=16", label::<f32>(dev));
    let (ey, es) = errors_vs_f64(&got, &s);
    eprintln!("[mamba1_scan] {what}: max_rel vs f64: y {ey:.3e}, state {es:.3e}");
    assert!(ey < F32_TOL && es < F32_TOL, "{what}: y {ey:e}, state {es:e}");
    assert_matches_model(Dtype::F32, &got, &s, &what);
}

/// On every GPU present, at the consumers' shapes (Dm = 5120 and Falcon-Mamba-7B's
/// 8192, N = 16, L = 1 and 512; also B = 4 and 8, L = 2048, Dm = 1536, N = 32):
/// checks the kernel against its model (L <= 512), and prints
/// microseconds per launch and the effective bandwidth. Ignored by default:
/// `cargo test --release --features cuda --test mamba1_scan -- --ignored --nocapture`.
fn timing_on_gpus() {
    for dev in gpu_devices("[mamba1_scan timing] no GPU backend present; nothing timed") {
        type T = bf16;
        let dtype = T::DTYPE;
        for (batch, len, dm, n) in [
            (1, 1, 5120, 16),
            (1, 512, 5120, 16),
            (1, 1, 8192, 16),
            (8, 1, 8192, 16),
            (1, 512, 8192, 16),
            (1, 2048, 8192, 16),
            (4, 512, 8192, 16),
            (1, 512, 1536, 16),
            (1, 512, 8192, 32),
        ] {
            let s = ScanInputs::generate(dtype, batch, len, dm, n, true);
            let inp = upload_inputs::<T>(&dev, &s);
            let state_in = upload::<f32>(&dev, &s.state_in);
            let y = sentinel::<T>(&dev, s.x.len());
            let state_out = sentinel::<f32>(&dev, s.state_in.len());
            let p = inp.pointers(state_in.ptr(), y.ptr(), state_out.ptr());
            let (b, l, d, nn) = (batch as u32, len as u32, dm as u32, n as u32);
            // SAFETY: every buffer holds the shape's elements.
            let call = || unsafe {
                mamba1_scan::launch(
                    &dev,
                    T::DTYPE,
                    mamba1_scan::args(p, ScanShape { batch: b, len: l, dm: d, n: nn }),
                    Stream::DEFAULT,
                )
            };
            for _ in 0..3 {
                call().unwrap();
            }
            dev.synchronize().unwrap();
            if len <= 512 && dm <= 8192 {
                // Correct at this size too (within the contract's bounds of the model).
                let y_bits = download_bits(&y);
                let got = Outputs {
                    y: reference::widen_all(dtype, &y_bits),
                    y_bits,
                    state: download_values(&state_out),
                    emulated: false,
                    mapping: mamba1_scan::mapping(dev.backend()),
                };
                assert_matches_model(dtype, &got, &s, &format!("timing shape {batch}x{len}x{dm}x{n}"));
            }
            let inner = 10;
            let us = median_of_timed(&dev, 15, inner, call) * 1e3;
            let t = dtype.size();
            let bytes = (3 * s.x.len() * t + 2 * s.bm.len() * t + 4 * s.a.len() + 8 * s.state_in.len() + t * dm) as f64;
            eprintln!(
                "[mamba1_scan timing] {}: B={batch} L={len} Dm={dm} N={n} {dtype}: {us:.1} us, {:.0} GB/s, {:.1} ns per step",
                dev.info().name,
                bytes / (us * 1e-6) / 1e9,
                us * 1e3 / len as f64
            );
        }
    }
}

fn main() {
    let mut suite = Suite::new();
    named_cases!(suite;
        per_backend: f32_acceptance_matrix_is_within_1e_5, bf16_beats_the_op_by_op_graph, f16_is_within_one_rounding;
        per_backend_and_dtype:
            n_dm_and_l_off_the_multiples_of_8,
            state_carried_across_two_launches_equals_one_launch_bitwise,
            in_place_state_equals_separate_buffers,
            nan_and_infinity_follow_the_model;
        single:
            negative_control_a_sum_over_two_of_four_lanes_fails_the_n32_test,
            bad_shapes_are_refused_before_any_launch,
            null_and_misaligned_pointers_are_refused_and_named;
        cpu_per_dtype: y_overlapping_x_is_refused_naming_both;
        single: the_safe_wrapper_checks_every_buffer_size, the_cpu_backend_refuses_a_stream;
        per_backend_and_dtype: availability_matches_the_launch_lookup;
        per_backend: a_long_prefill_stays_within_1e_5;
        per_backend_and_dtype: edge_n_and_l, every_chunk_count_up_to_five;
    );
    suite.cuda_per_dtype("edge_the_largest_grid", typed!(edge_the_largest_grid));
    suite
        .ignored(
            "timing_on_gpus",
            "GPU timing at the consumers' shapes; run with --ignored --nocapture on a machine with a GPU (release build)",
            timing_on_gpus,
        )
        .run()
}
