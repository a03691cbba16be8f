//! `mamba1_scan` on every backend present (spec/kernels.md section 3): the f32
//! tolerance matrix, the bf16 comparison with the op-by-op graph, f16, awkward
//! shapes (N, Dm, L not multiples of 8), the state carried across launches and
//! updated in place, the launcher's refusals, and the negative control of the
//! reduction (a fold that starts at 8 fails the N = 32 test).
//!
//! Besides the contract's tolerances, every launch is compared with [`model`], a
//! host model of the kernel's own operation order: bit for bit on the emulator
//! (which runs the kernel's `exp_fast` as `num::exp`); within the contract's
//! bounds on a GPU, where `exp_fast` is the hardware's exp2 approximation.

mod common;

use common::{devices, download_bits, label, sentinel, upload};
use mlxcel_amdgpu::kernels::mamba1_scan::{self, ScanBuffers, ScanPointers};
use mlxcel_amdgpu::kernels_device::num::exp;
use mlxcel_amdgpu::reference::mamba::{ScanInputs, scan_f32, scan_f64, scan_graph_bf16};
use mlxcel_amdgpu::reference::{self, Dtype, metrics};
use mlxcel_amdgpu::{Device, DeviceBuffer, Error, Stream};

/// Section 3's f32 bound on `max|got - want| / max(1e-6, max|want|)`.
const F32_TOL: f64 = 1e-5;
/// f16 bound on y: one rounding to f16 is at most 2^-11 = 4.9e-4 of |y| <= max|y|.
const F16_Y_TOL: f64 = 1e-3;

/// Extra elements past the end of each output buffer, which must stay untouched.
const GUARD: usize = 16;

struct Outputs {
    /// `y`, widened from the dtype.
    y: Vec<f32>,
    /// `y` as stored bits.
    y_bits: Vec<u32>,
    /// The final state (f32).
    state: Vec<f32>,
    /// Whether it ran on the CPU emulator, whose `exp_fast` is `num::exp`, so
    /// that it must match [`model`] bit for bit. On a GPU `exp_fast` is the
    /// hardware's exp2 approximation, and the match is within the contract.
    emulated: bool,
}

fn download_f32(buf: &DeviceBuffer<u8>) -> Vec<f32> {
    download_bits(Dtype::F32, buf).into_iter().map(f32::from_bits).collect()
}

/// Uploads the inputs of `s` (x, dt, Bm, Cm, Dskip as `dtype`; A as f32).
struct Inputs {
    x: DeviceBuffer<u8>,
    dt: DeviceBuffer<u8>,
    bm: DeviceBuffer<u8>,
    cm: DeviceBuffer<u8>,
    a: DeviceBuffer<u8>,
    dskip: DeviceBuffer<u8>,
}

fn upload_inputs(dev: &Device, dtype: Dtype, s: &ScanInputs) -> Inputs {
    Inputs {
        x: upload(dev, dtype, &s.x),
        dt: upload(dev, dtype, &s.dt),
        bm: upload(dev, dtype, &s.bm),
        cm: upload(dev, dtype, &s.cm),
        a: upload(dev, Dtype::F32, &s.a),
        dskip: upload(dev, dtype, &s.dskip),
    }
}

/// One launch through the safe `run`, with `state_in` and `state_out` separate
/// (or the same buffer when `in_place`), and guard elements past both outputs.
fn run_kernel(dev: &Device, dtype: Dtype, s: &ScanInputs, in_place: bool) -> Outputs {
    let (nseq, nstate) = (s.batch * s.len * s.dm, s.batch * s.dm * s.n);
    let inp = upload_inputs(dev, dtype, s);
    let mut y = sentinel(dev, dtype, nseq + GUARD);
    let state_in = upload(dev, Dtype::F32, &s.state_in);
    let mut state_out = if in_place {
        let mut v = s.state_in.clone();
        v.extend([f32::from_bits(0x7B7B_7B7B); GUARD]);
        upload(dev, Dtype::F32, &v)
    } else {
        sentinel(dev, Dtype::F32, nstate + GUARD)
    };
    let bufs = ScanBuffers {
        x: &inp.x,
        dt: &inp.dt,
        bm: &inp.bm,
        cm: &inp.cm,
        a: &inp.a,
        dskip: &inp.dskip,
        state_in: if in_place { None } else { Some(&state_in) },
        y: &mut y,
        state_out: &mut state_out,
    };
    let (b, l, dm, n) = (s.batch as u32, s.len as u32, s.dm as u32, s.n as u32);
    mamba1_scan::run(dev, dtype, bufs, b, l, dm, n, Stream::DEFAULT).unwrap();
    let y_bits = download_bits(dtype, &y);
    let state = download_f32(&state_out);
    let what = format!("{} B={b} L={l} Dm={dm} N={n}", label(dev, dtype));
    let guard = download_bits(dtype, &sentinel(dev, dtype, 1))[0];
    assert!(y_bits[nseq..].iter().all(|&v| v == guard), "{what}: wrote past the end of y");
    assert!(state[nstate..].iter().all(|v| v.to_bits() == 0x7B7B_7B7B), "{what}: wrote past the end of state_out");
    let y_bits = y_bits[..nseq].to_vec();
    Outputs {
        y: reference::widen_all(dtype, &y_bits),
        y_bits,
        state: state[..nstate].to_vec(),
        emulated: dev.backend() == mlxcel_amdgpu::BackendKind::Cpu,
    }
}

/// The xor butterfly of the kernel's wave sum, starting at `first` (16 for the
/// kernel's `wave_sum_f32`): `v[l] = v[l] + v[l ^ m]` for m = first, ..., 1.
/// Returns lane 0's value, the one the kernel stores.
fn butterfly(mut v: [f32; 32], first: usize) -> f32 {
    let mut m = first;
    while m >= 1 {
        let prev = v;
        for (l, e) in v.iter_mut().enumerate() {
            *e = prev[l] + prev[l ^ m];
        }
        m /= 2;
    }
    v[0]
}

/// Where the kernel's butterfly starts: at xor 16 over all 32 lanes when a wave
/// carries one channel (N > 16), at xor 8 over a 16-lane half when it carries two.
fn kernel_fold(n: usize) -> usize {
    if n <= 16 { 8 } else { 16 }
}

/// The kernel's operation order on the host, with its wave sum starting at
/// `fold` (16: the kernel; 8: a fold that misses lanes 16..31):
/// `decay = exp(dt*A)`, `u = (dt*x)*B`, `s = fma(decay, s, u)`, `p = s*C` (+0.0
/// on lanes >= N), `y = T(butterfly(p) + x*Dskip)`. Returns `(y, state_out)`.
fn model(dtype: Dtype, s: &ScanInputs, fold: usize) -> (Vec<f32>, Vec<f32>) {
    s.check();
    let (bsz, len, dm, n) = (s.batch, s.len, s.dm, s.n);
    let mut y = vec![0.0f32; bsz * len * dm];
    let mut state = s.state_in.clone();
    for b in 0..bsz {
        for d in 0..dm {
            let st = &mut state[(b * dm + d) * n..(b * dm + d + 1) * n];
            for t in 0..len {
                let row = b * len + t;
                let (dt, x) = (s.dt[row * dm + d], s.x[row * dm + d]);
                let mut p = [0.0f32; 32];
                for k in 0..n {
                    let decay = exp(dt * s.a[d * n + k]);
                    let u = (dt * x) * s.bm[row * n + k];
                    st[k] = decay.mul_add(st[k], u);
                    p[k] = st[k] * s.cm[row * n + k];
                }
                y[row * dm + d] = reference::round(dtype, butterfly(p, fold) + x * s.dskip[d]);
            }
        }
    }
    (y, state)
}

/// The kernel's outputs equal [`model`]'s: bit for bit on the emulator, within
/// the contract's bounds on a GPU (see [`Outputs::emulated`]).
fn assert_matches_model(dtype: Dtype, got: &Outputs, s: &ScanInputs, what: &str) {
    let (y, state) = model(dtype, s, kernel_fold(s.n));
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

#[test]
fn f32_acceptance_matrix_is_within_1e_5() {
    for dev in devices() {
        let (mut worst_y, mut worst_s) = (0.0f64, 0.0f64);
        for n in [8, 16, 32] {
            for len in [1, 7] {
                for carried in [false, true] {
                    let s = ScanInputs::generate(Dtype::F32, 2, len, 24, n, carried);
                    let got = run_kernel(&dev, Dtype::F32, &s, false);
                    let what = format!("{} N={n} L={len} carried={carried}", label(&dev, Dtype::F32));
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
}

#[test]
fn bf16_beats_the_op_by_op_graph() {
    let s = ScanInputs::generate(Dtype::Bf16, 1, 64, 24, 16, true);
    let (exact_y, exact_state) = scan_f64(&s);
    let (graph_y, _) = scan_graph_bf16(&s);
    let e_graph = metrics::rms_diff(&graph_y, &exact_y);
    for dev in devices() {
        let got = run_kernel(&dev, Dtype::Bf16, &s, false);
        let what = format!("{} B=1 L=64 Dm=24 N=16 carried", label(&dev, Dtype::Bf16));
        let e_kernel = metrics::rms_diff(&got.y, &exact_y);
        let es = metrics::max_rel(&got.state, &exact_state);
        eprintln!(
            "[mamba1_scan] {what}: RMS(y - exact) kernel {e_kernel:.3e}, graph {e_graph:.3e}; state max_rel {es:.3e}"
        );
        assert!(e_kernel <= e_graph, "{what}: RMS error {e_kernel:e} is worse than the graph's {e_graph:e}");
        assert!(es < F32_TOL, "{what}: the f32 state is off by {es:e}");
        assert_matches_model(Dtype::Bf16, &got, &s, &what);
    }
}

#[test]
fn f16_is_within_one_rounding() {
    for dev in devices() {
        let mut worst = 0.0f64;
        for (n, len, carried) in [(8, 7, false), (16, 7, true), (32, 1, true), (16, 64, true)] {
            let s = ScanInputs::generate(Dtype::F16, 2, len, 24, n, carried);
            let got = run_kernel(&dev, Dtype::F16, &s, false);
            let what = format!("{} N={n} L={len} carried={carried}", label(&dev, Dtype::F16));
            let (ey, es) = errors_vs_f64(&got, &s);
            assert!(ey < F16_Y_TOL && es < F32_TOL, "{what}: vs f64: y {ey:e} (bound {F16_Y_TOL:e}), state {es:e}");
            assert_matches_model(Dtype::F16, &got, &s, &what);
            worst = worst.max(ey);
        }
        eprintln!("[mamba1_scan] {}: f16 worst y max_rel vs f64 {worst:.3e} (bound {F16_Y_TOL:e})", dev.backend());
    }
}

#[test]
fn n_dm_and_l_off_the_multiples_of_8() {
    // (batch, len, dm, n): N not a multiple of 8, Dm not a multiple of 8 (the last
    // workgroup has waves past Dm), L with a remainder after the unrolled loop,
    // and the edges (N = 1, L = 8 and 16 with no remainder, a single channel).
    let shapes = [(2, 9, 20, 5), (1, 17, 27, 13), (2, 9, 27, 32), (1, 16, 20, 1), (1, 8, 1, 13), (3, 17, 9, 16)];
    for dev in devices() {
        for (i, &(batch, len, dm, n)) in shapes.iter().enumerate() {
            let dtype = Dtype::ALL[i % 3];
            for dtype in [Dtype::F32, dtype] {
                let s = ScanInputs::generate(dtype, batch, len, dm, n, true);
                let got = run_kernel(&dev, dtype, &s, false);
                let what = format!("{} B={batch} L={len} Dm={dm} N={n}", label(&dev, dtype));
                assert_matches_model(dtype, &got, &s, &what);
                let (ey, es) = errors_vs_f64(&got, &s);
                let y_tol = if dtype == Dtype::F32 { F32_TOL } else { 8e-3 };
                assert!(ey < y_tol && es < F32_TOL, "{what}: vs f64: y {ey:e}, state {es:e}");
            }
        }
    }
}

#[test]
fn state_carried_across_two_launches_equals_one_launch_bitwise() {
    for dev in devices() {
        for dtype in Dtype::ALL {
            for (l1, l2) in [(7, 10), (8, 9), (1, 16)] {
                let (batch, dm, n) = (2, 12, 16);
                let whole = ScanInputs::generate(dtype, batch, l1 + l2, dm, n, true);
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
                let one = run_kernel(&dev, dtype, &whole, false);
                let first = run_kernel(&dev, dtype, &part(0, l1, whole.state_in.clone()), false);
                // The second launch updates its state in place.
                let second = run_kernel(&dev, dtype, &part(l1, l2, first.state.clone()), true);
                let what = format!("{} L={l1}+{l2}", label(&dev, dtype));
                let two_y: Vec<u32> = (0..batch)
                    .flat_map(|b| {
                        let mut v = first.y_bits[b * l1 * dm..(b + 1) * l1 * dm].to_vec();
                        v.extend_from_slice(&second.y_bits[b * l2 * dm..(b + 1) * l2 * dm]);
                        v
                    })
                    .collect();
                metrics::assert_bits_equal(dtype, &two_y, &one.y_bits, &format!("y of {what}"));
                let bits = |v: &[f32]| v.iter().map(|e| e.to_bits()).collect::<Vec<u32>>();
                metrics::assert_bits_equal(
                    Dtype::F32,
                    &bits(&second.state),
                    &bits(&one.state),
                    &format!("state of {what}"),
                );
            }
        }
    }
}

#[test]
fn in_place_state_equals_separate_buffers() {
    for dev in devices() {
        let s = ScanInputs::generate(Dtype::Bf16, 2, 11, 16, 16, true);
        let separate = run_kernel(&dev, Dtype::Bf16, &s, false);
        let in_place = run_kernel(&dev, Dtype::Bf16, &s, true);
        assert_eq!(separate.y_bits, in_place.y_bits, "{}", dev.backend());
        let bits = |v: &[f32]| v.iter().map(|e| e.to_bits()).collect::<Vec<u32>>();
        assert_eq!(bits(&separate.state), bits(&in_place.state), "{}", dev.backend());
    }
}

#[test]
fn nan_and_infinity_follow_the_model() {
    // Non-finite inputs must not crash, hang or write out of bounds, and give
    // what the operation order gives (NaN-ness compared, not payloads).
    for dev in devices() {
        for dtype in Dtype::ALL {
            let mut s = ScanInputs::generate(dtype, 1, 11, 9, 13, true);
            s.x[3 * 9 + 2] = f32::NAN; // channel 2 from step 3 on
            s.dt[5 * 9 + 4] = f32::INFINITY; // channel 4: decay 0, u = +-inf
            s.bm[7 * 13 + 12] = f32::NEG_INFINITY; // every channel at step 7
            s.dskip[8] = f32::INFINITY;
            let got = run_kernel(&dev, dtype, &s, false);
            let what = format!("{} specials", label(&dev, dtype));
            assert_matches_model(dtype, &got, &s, &what);
            assert!(reference::is_nan_bits(dtype, got.y_bits[3 * 9 + 2]), "{what}: NaN x must give a NaN y");
        }
    }
}

#[test]
fn negative_control_a_fold_starting_at_8_fails_the_n32_test() {
    // A wave sum that starts its butterfly at xor 8 adds only lanes 0..15: the
    // kernel's y would miss state columns 16..31. Section 3's f32 comparison at
    // N = 32 must reject it clearly, while the real order passes.
    let mut worst_broken = f64::INFINITY;
    for len in [1, 7] {
        for carried in [false, true] {
            let s = ScanInputs::generate(Dtype::F32, 2, len, 24, 32, carried);
            let (y64, _) = scan_f64(&s);
            let (y_good, _) = model(Dtype::F32, &s, kernel_fold(s.n));
            let (y_broken, _) = model(Dtype::F32, &s, 8);
            let good = metrics::max_rel(&y_good, &y64);
            let broken = metrics::max_rel(&y_broken, &y64);
            assert!(good < F32_TOL, "the model itself must pass: {good:e}");
            assert!(broken > 1e-2, "L={len} carried={carried}: a fold from 8 gives only {broken:e}");
            worst_broken = worst_broken.min(broken);
        }
    }
    eprintln!("[mamba1_scan] negative control: a fold from 8 is off by at least {worst_broken:.3e} (bound 1e-5)");
    // And the kernel is not that broken model.
    let s = ScanInputs::generate(Dtype::F32, 2, 7, 24, 32, true);
    let got = run_kernel(&Device::cpu(), Dtype::F32, &s, false);
    let (y_broken, _) = model(Dtype::F32, &s, 8);
    assert!(metrics::max_rel(&got.y, &y_broken) > 1e-2);
}

fn buffers<'a>(
    inp: &'a Inputs,
    bm: &'a DeviceBuffer<u8>,
    state_in: &'a DeviceBuffer<u8>,
    y: &'a mut DeviceBuffer<u8>,
    state_out: &'a mut DeviceBuffer<u8>,
) -> ScanBuffers<'a> {
    ScanBuffers {
        x: &inp.x,
        dt: &inp.dt,
        bm,
        cm: &inp.cm,
        a: &inp.a,
        dskip: &inp.dskip,
        state_in: Some(state_in),
        y,
        state_out,
    }
}

#[test]
fn bad_shapes_and_pointers_are_refused_before_any_launch() {
    let dev = Device::cpu();
    let p = ScanPointers {
        x: 0x100,
        dt: 0x200,
        bm: 0x300,
        cm: 0x400,
        a: 0x500,
        dskip: 0x600,
        state_in: 0x700,
        y: 0x800,
        state_out: 0x900,
    };
    let launch = |dtype: Dtype, p: ScanPointers, batch: u32, len: u32, dm: u32, n: u32| {
        unsafe { mamba1_scan::launch(&dev, dtype, p, batch, len, dm, n, Stream::DEFAULT) }.unwrap_err()
    };
    let arg = |e: &Error| match e {
        Error::InvalidArgument { argument, .. } => *argument,
        other => panic!("expected an invalid argument, got {other}"),
    };

    let err = launch(Dtype::Bf16, p, 1, 1, 8, 33);
    assert_eq!(
        err.to_string(),
        "invalid argument `n`: 33 is outside 1..=32: one state column per lane of a 32-lane wave; a larger state needs another kernel"
    );
    assert_eq!(arg(&launch(Dtype::Bf16, p, 1, 1, 8, 0)), "n");
    let err = launch(Dtype::F32, p, 1, 0, 8, 16);
    assert_eq!(err.to_string(), "invalid argument `len`: 0: the sequence length L must be at least 1");
    assert_eq!(arg(&launch(Dtype::F32, p, 0, 1, 8, 16)), "batch");
    assert_eq!(arg(&launch(Dtype::F32, p, 65536, 1, 8, 16)), "batch");
    assert_eq!(arg(&launch(Dtype::F16, p, 1, 1, 0, 16)), "dm");
    // Sizes that overflow the address space.
    let err = launch(Dtype::F32, p, 65535, u32::MAX, u32::MAX, 16);
    assert_eq!(arg(&err), "x", "{err}");
    // Null and misaligned pointers, each named.
    assert_eq!(arg(&launch(Dtype::F32, ScanPointers { y: 0, ..p }, 1, 1, 8, 16)), "y");
    assert_eq!(arg(&launch(Dtype::F32, ScanPointers { state_in: 0, ..p }, 1, 1, 8, 16)), "state_in");
    let err = launch(Dtype::Bf16, ScanPointers { a: 0x502, ..p }, 1, 1, 8, 16);
    assert_eq!(err.to_string(), "invalid argument `a`: pointer 0x502 is not aligned to 4 bytes");
    assert_eq!(arg(&launch(Dtype::Bf16, ScanPointers { state_out: 0x902, ..p }, 1, 1, 8, 16)), "state_out");
    assert_eq!(arg(&launch(Dtype::Bf16, ScanPointers { cm: 0x401, ..p }, 1, 1, 8, 16)), "cm");
    assert_eq!(arg(&launch(Dtype::F32, ScanPointers { dskip: 0x602, ..p }, 1, 1, 8, 16)), "dskip");

    // The safe wrapper checks every buffer's size.
    let s = ScanInputs::generate(Dtype::F16, 1, 4, 8, 16, true);
    let inp = upload_inputs(&dev, Dtype::F16, &s);
    let state_in = upload(&dev, Dtype::F32, &s.state_in);
    let mut y = sentinel(&dev, Dtype::F16, 4 * 8);
    let mut state_out = sentinel(&dev, Dtype::F32, 8 * 16);
    let short = dev.alloc::<u8>(10).unwrap();
    let err = mamba1_scan::run(
        &dev,
        Dtype::F16,
        buffers(&inp, &short, &state_in, &mut y, &mut state_out),
        1,
        4,
        8,
        16,
        Stream::DEFAULT,
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `bm`: holds 10 bytes, needs 128 (64 f16 elements)");
    let mut small_state = dev.alloc::<u8>(8 * 16 * 4 - 4).unwrap();
    let err = mamba1_scan::run(
        &dev,
        Dtype::F16,
        buffers(&inp, &inp.bm, &state_in, &mut y, &mut small_state),
        1,
        4,
        8,
        16,
        Stream::DEFAULT,
    )
    .unwrap_err();
    assert_eq!(arg(&err), "state_out");
    let err = mamba1_scan::run(
        &dev,
        Dtype::F16,
        buffers(&inp, &inp.bm, &state_in, &mut y, &mut state_out),
        1,
        4,
        8,
        33,
        Stream::DEFAULT,
    )
    .unwrap_err();
    assert_eq!(arg(&err), "n");
    // The same buffers with the right shape run.
    mamba1_scan::run(
        &dev,
        Dtype::F16,
        buffers(&inp, &inp.bm, &state_in, &mut y, &mut state_out),
        1,
        4,
        8,
        16,
        Stream::DEFAULT,
    )
    .unwrap();
}

#[test]
fn availability_matches_the_launch_lookup() {
    for dev in devices() {
        for dtype in Dtype::ALL {
            let available = mamba1_scan::available(&dev, dtype);
            assert_eq!(available, dev.kernel(&format!("mamba1_scan_{dtype}")).is_ok(), "{}", label(&dev, dtype));
            if dev.backend() == mlxcel_amdgpu::BackendKind::Cpu {
                assert!(available);
            }
        }
    }
}

#[test]
fn a_long_prefill_stays_within_1e_5() {
    // L = 512, the prefill case: 64 passes of the unrolled loop.
    let s = ScanInputs::generate(Dtype::F32, 1, 512, 16, 16, true);
    for dev in devices() {
        let got = run_kernel(&dev, Dtype::F32, &s, false);
        let what = format!("{} B=1 L=512 Dm=16 N=16", label(&dev, Dtype::F32));
        let (ey, es) = errors_vs_f64(&got, &s);
        eprintln!("[mamba1_scan] {what}: max_rel vs f64: y {ey:.3e}, state {es:.3e}");
        assert!(ey < F32_TOL && es < F32_TOL, "{what}: y {ey:e}, state {es:e}");
        assert_matches_model(Dtype::F32, &got, &s, &what);
    }
}

/// On every GPU present, at the consumers' shapes (Dm = 5120 and Falcon-Mamba-7B's
/// 8192, N = 16, L = 1 and 512; also B = 4 and 8, L = 2048, Dm = 1536, N = 32):
/// checks the kernel against its model (L <= 512), and prints
/// microseconds per launch and the effective bandwidth. Ignored by default:
/// `cargo test --release --features cuda --test mamba1_scan -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing_on_gpus() {
    for dev in devices() {
        if dev.backend() == mlxcel_amdgpu::BackendKind::Cpu {
            continue;
        }
        let dtype = Dtype::Bf16;
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
            let inp = upload_inputs(&dev, dtype, &s);
            let state_in = upload(&dev, Dtype::F32, &s.state_in);
            let y = sentinel(&dev, dtype, s.x.len());
            let state_out = sentinel(&dev, Dtype::F32, s.state_in.len());
            let p = ScanPointers {
                x: inp.x.ptr(),
                dt: inp.dt.ptr(),
                bm: inp.bm.ptr(),
                cm: inp.cm.ptr(),
                a: inp.a.ptr(),
                dskip: inp.dskip.ptr(),
                state_in: state_in.ptr(),
                y: y.ptr(),
                state_out: state_out.ptr(),
            };
            let (b, l, d, nn) = (batch as u32, len as u32, dm as u32, n as u32);
            let call = || unsafe { mamba1_scan::launch(&dev, dtype, p, b, l, d, nn, Stream::DEFAULT) };
            for _ in 0..3 {
                call().unwrap();
            }
            dev.synchronize().unwrap();
            if len <= 512 && dm <= 8192 {
                // Correct at this size too (within the contract's bounds of the model).
                let y_bits = download_bits(dtype, &y);
                let got = Outputs {
                    y: reference::widen_all(dtype, &y_bits),
                    y_bits,
                    state: download_f32(&state_out),
                    emulated: false,
                };
                assert_matches_model(dtype, &got, &s, &format!("timing shape {batch}x{len}x{dm}x{n}"));
            }
            let inner = 10;
            let mut ms: Vec<f64> = (0..15)
                .map(|_| {
                    dev.time(Stream::DEFAULT, || {
                        for _ in 0..inner {
                            call()?;
                        }
                        Ok(())
                    })
                    .unwrap()
                        / inner as f64
                })
                .collect();
            ms.sort_by(f64::total_cmp);
            let us = ms[ms.len() / 2] * 1e3;
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
