//! `selftest`: runs every available kernel and dtype at the consumer's shapes
//! against the reference implementations and prints a table. On the CPU
//! emulator the shapes are reduced (it runs every lane as a coroutine) and the
//! table says so.
//!
//! The report says what ran: one line for every GPU backend the self-test did
//! not run on, with the reason (`hip: not used: ...`), and a last line naming
//! the device that was verified (`verified: CPU emulator (host) — not a GPU`).
//! `MLXCEL_AMDGPU_EXPECT_HIP` / `MLXCEL_AMDGPU_EXPECT_CUDA` (set to any value,
//! as for the tests) make [`run`] add a failed outcome, and so a non-zero exit
//! of the command, when that backend is not the one verified.

use std::fmt::Write as _;
use std::sync::OnceLock;

use crate::fixtures::{RoutedUpload, ScanUpload};
use crate::reference::{self, data, layer_norm, metrics};
use mlxcel_amdgpu::kernels::add3_layer_norm::{self, Add3Buffers};
use mlxcel_amdgpu::kernels::mamba1_scan::{self, ScanShape};
use mlxcel_amdgpu::kernels::moe::{self, MoeShape};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::runtime::{BACKEND_ENV, BackendKind, Device, DeviceBuffer, Stream};
use mlxcel_amdgpu::with_element;
use mlxcel_amdgpu::{Dtype, Element};
use mlxcel_amdgpu::{Error, Result};

/// One row of the table.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub kernel: &'static str,
    /// The activation dtype; `None` for the probe.
    pub dtype: Option<Dtype>,
    pub shape: String,
    /// "bit-exact", "max rel 3.1e-7", or why it failed or did not run.
    pub result: String,
    pub passed: bool,
    /// Milliseconds per launch (median of the timed repetitions), if it ran.
    pub millis: Option<f64>,
    /// Bytes read plus written per launch.
    pub bytes: u64,
}

impl Outcome {
    /// A case that could not run to a result: `ERROR: <e>`, failed.
    fn error(kernel: &'static str, dtype: Option<Dtype>, e: &Error) -> Outcome {
        Outcome {
            kernel,
            dtype,
            shape: String::new(),
            result: format!("ERROR: {e}"),
            passed: false,
            millis: None,
            bytes: 0,
        }
    }

    fn skipped(kernel: &'static str, dtype: Dtype, shape: String, why: String) -> Outcome {
        Outcome {
            kernel,
            dtype: Some(dtype),
            shape,
            result: format!("not run: {why}"),
            passed: true,
            millis: None,
            bytes: 0,
        }
    }
}

/// Why kernel `base` for `dtype` cannot run on `device` (the lookup's own message).
fn unavailable_reason(device: &Device, base: &str, dtype: Dtype) -> String {
    device.kernel(&mlxcel_amdgpu::kernels::symbol(base, dtype)).err().map(|e| e.to_string()).unwrap_or_default()
}

/// Whether the shapes are the consumer's (GPU) or reduced (CPU emulator).
fn reduced(device: &Device) -> bool {
    device.backend() == BackendKind::Cpu
}

/// The variable that sets how many timed launches each case makes.
pub const REPS_ENV: &str = "MLXCEL_AMDGPU_SELFTEST_REPS";

/// How many timed launches each case makes: `MLXCEL_AMDGPU_SELFTEST_REPS` when
/// set, else 50 on a GPU and 3 on the CPU emulator. The warm-up launch before
/// them is not counted. 0 (for a slow device, such as the simulated gfx1151,
/// whose times mean nothing) makes one launch per case: no warm-up, and that
/// launch is the one checked and timed.
fn timed_launches(device: &Device) -> Result<usize> {
    match std::env::var(REPS_ENV) {
        Ok(v) => v.parse::<usize>().map_err(|_| Error::InvalidArgument {
            argument: REPS_ENV,
            message: format!("{v:?} is not a count (0 or more)"),
        }),
        Err(std::env::VarError::NotUnicode(v)) => {
            Err(Error::InvalidArgument { argument: REPS_ENV, message: format!("{v:?} is not a count") })
        }
        Err(std::env::VarError::NotPresent) => Ok(if reduced(device) { 3 } else { 50 }),
    }
}

/// Uploads values (representable in `T`) as a `T` buffer.
fn upload<T: Element>(device: &Device, values: &[f32]) -> Result<DeviceBuffer<T>> {
    device.upload(&values.iter().map(|&v| T::from_f32(v)).collect::<Vec<T>>())
}

/// The storage bits of a downloaded buffer.
fn bits<T: Element>(buf: &DeviceBuffer<T>) -> Result<Vec<u32>> {
    Ok(buf.download()?.into_iter().map(T::to_bits_u32).collect())
}

/// The values of a downloaded buffer, widened to f32.
fn values<T: Element>(buf: &DeviceBuffer<T>) -> Result<Vec<f32>> {
    Ok(buf.download()?.into_iter().map(T::to_f32).collect())
}

/// The median time of `reps` launches of `f`, after one warm-up; with `reps` 0,
/// the time of one launch, without a warm-up.
fn time_launches(device: &Device, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    if reps == 0 {
        return device.time(Stream::DEFAULT, &mut f);
    }
    f()?;
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        times.push(device.time(Stream::DEFAULT, &mut f)?);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn bit_exact_result(dtype: Dtype, got: &[u32], want: &[f32]) -> (String, bool) {
    let want = reference::store_all(dtype, want);
    match metrics::first_bit_difference(dtype, got, &want) {
        None => ("bit-exact".into(), true),
        Some((i, g, w)) => (format!("MISMATCH: {}", metrics::describe_bit_difference(dtype, i, g, w)), false),
    }
}

fn xielu_case<T: Element>(device: &Device) -> Result<Outcome> {
    let dtype = T::DTYPE;
    let n = 21504; // one Apertus-8B decode token
    let shape = format!("n={n}");
    if !xielu::available(device, dtype) {
        let why = unavailable_reason(device, xielu::KERNEL, dtype);
        return Ok(Outcome::skipped("xielu", dtype, shape, why));
    }
    let p = XieluParams::APERTUS;
    let x = reference::round_all(dtype, &data::lcg_uniform(data::XIELU_LCG_SEED, n));
    let input = upload::<T>(device, &x)?;
    let mut out = device.alloc::<T>(n)?;
    let want = reference::xielu::xielu(dtype, &x, p.alpha_p, p.alpha_n, p.beta, p.eps);
    xielu::run(device, &input, &mut out, n, p, Stream::DEFAULT)?;
    let (result, passed) = bit_exact_result(dtype, &bits(&out)?, &want);
    let reps = timed_launches(device)?;
    let millis = time_launches(device, reps, || xielu::run(device, &input, &mut out, n, p, Stream::DEFAULT))?;
    Ok(Outcome {
        kernel: "xielu",
        dtype: Some(dtype),
        shape,
        result,
        passed,
        millis: Some(millis),
        bytes: 2 * (n * dtype.size()) as u64,
    })
}

fn add3_case<T: Element>(device: &Device) -> Result<Outcome> {
    let dtype = T::DTYPE;
    let (rows, d) = if reduced(device) { (2, 4096) } else { (1, 4096) };
    let shape = format!("rows={rows} D={d} bias");
    if !add3_layer_norm::available(device, dtype) {
        let why = unavailable_reason(device, add3_layer_norm::KERNEL, dtype);
        return Ok(Outcome::skipped("add3_layer_norm", dtype, shape, why));
    }
    let inp = data::add3_inputs(dtype, rows, d, true, 2024);
    let (a, b, x, w) = (
        upload::<T>(device, &inp.a)?,
        upload::<T>(device, &inp.b)?,
        upload::<T>(device, &inp.x)?,
        upload::<T>(device, &inp.w)?,
    );
    let bias = upload::<T>(device, inp.bias.as_ref().unwrap())?;
    let mut x_new = device.alloc::<T>(rows * d)?;
    let mut h = device.alloc::<T>(rows * d)?;
    let eps = 1e-5;
    let mut launch = || {
        let bufs = Add3Buffers { a: &a, b: &b, x: &x, w: &w, bias: Some(&bias), x_new: &mut x_new, h: &mut h };
        add3_layer_norm::run(device, bufs, rows as u32, d as u32, eps, Stream::DEFAULT)
    };
    // The kernel is a pure function of its inputs: the outputs of the timed
    // launches are the ones checked.
    let reps = timed_launches(device)?;
    let millis = time_launches(device, reps, &mut launch)?;
    let (want_x, want_h) =
        layer_norm::add3_layer_norm(dtype, &inp.a, &inp.b, &inp.x, &inp.w, inp.bias.as_deref(), eps, rows, d);
    let (rx, px) = bit_exact_result(dtype, &bits(&x_new)?, &want_x);
    let (rh, ph) = bit_exact_result(dtype, &bits(&h)?, &want_h);
    let result = if px && ph { rx } else { format!("x_new {rx}; h {rh}") };
    let bytes = ((5 * rows * d + 2 * d) * dtype.size()) as u64;
    Ok(Outcome {
        kernel: "add3_layer_norm",
        dtype: Some(dtype),
        shape,
        result,
        passed: px && ph,
        millis: Some(millis),
        bytes,
    })
}

fn mamba_case<T: Element>(device: &Device) -> Result<Outcome> {
    let dtype = T::DTYPE;
    // Decode of Falcon-Mamba-7B's shape on a GPU; a short prefill on the emulator.
    let (len, dm, n) = if reduced(device) { (16, 64, 16) } else { (1, 8192, 16) };
    let shape = format!("B=1 L={len} Dm={dm} N={n}");
    if !mamba1_scan::available(device, dtype) {
        let why = unavailable_reason(device, mamba1_scan::KERNEL, dtype);
        return Ok(Outcome::skipped("mamba1_scan", dtype, shape, why));
    }
    let inp = reference::mamba::ScanInputs::generate(dtype, 1, len, dm, n, true);
    let inputs = ScanUpload::<T>::new(device, &inp)?;
    let state_in = upload::<f32>(device, &inp.state_in)?;
    let mut y = device.alloc::<T>(len * dm)?;
    let mut state_out = device.alloc::<f32>(dm * n)?;
    let mut launch = || {
        let bufs = inputs.buffers(Some(&state_in), &mut y, &mut state_out);
        mamba1_scan::run(
            device,
            bufs,
            ScanShape { batch: 1, len: len as u32, dm: dm as u32, n: n as u32 },
            Stream::DEFAULT,
        )
    };
    let reps = timed_launches(device)?;
    let millis = time_launches(device, reps, &mut launch)?;
    // The f32 contract (max error relative to max |want| below 1e-5) for y in f32
    // and for the state; for 16-bit y, within one rounding of the dtype.
    let (want_y, want_s) = reference::mamba::scan_f64(&inp);
    let got_y = values(&y)?;
    let got_s = values(&state_out)?;
    let err_y = metrics::max_rel(&got_y, &want_y);
    let err_s = metrics::max_rel(&got_s, &want_s);
    let bound_y = match dtype {
        Dtype::F32 => 1e-5,
        Dtype::F16 => 1e-3,
        Dtype::Bf16 => 8e-3,
    };
    let passed = err_y < bound_y && err_s < 1e-5;
    let result = format!("max rel y {err_y:.1e} (< {bound_y:.0e}), state {err_s:.1e} (< 1e-5)");
    let bytes = ((4 * len * dm + 2 * len * n + dm) * dtype.size() + 3 * dm * n * 4) as u64;
    Ok(Outcome { kernel: "mamba1_scan", dtype: Some(dtype), shape, result, passed, millis: Some(millis), bytes })
}

fn moe_case<T: Element>(device: &Device, bits: u32) -> Result<Outcome> {
    let dtype = T::DTYPE;
    // Nemotron-3-Nano's layer with 16 of its 128 experts on a GPU (the weights of
    // unselected experts are never read); a reduced layer on the emulator.
    let (din, dff, e) = if reduced(device) { (512, 384, 16) } else { (2688, 1856, 16) };
    let shape = MoeShape { n_experts: e, k: 6, din, dff, bits, group_size: 64 };
    let shape_text = format!("Din={din} Dff={dff} E={e} K=6 gs=64 {bits}-bit");
    if !moe::available(device, dtype) {
        return Ok(Outcome::skipped(
            "moe routed",
            dtype,
            shape_text,
            "the MoE kernels are not available for this dtype".into(),
        ));
    }
    let inp = reference::moe::moe_inputs(dtype, din as usize, dff as usize, e as usize, 6, bits, 64, 77);
    let inputs = RoutedUpload::<T>::new(device, &inp)?;
    let mut out = device.alloc::<T>(din as usize)?;
    let mut scratch = device.alloc::<u8>(moe::scratch_bytes(6, din, dff)?)?;
    let mut status = device.alloc::<u32>(1)?;
    status.fill_bytes(0)?;
    let mut launch = || {
        let bufs = inputs.routed(&mut out, &mut scratch, Some(&mut status));
        moe::run_routed_forward(device, bufs, &shape, Stream::DEFAULT)
    };
    let reps = timed_launches(device)?;
    let millis = time_launches(device, reps, &mut launch)?;
    let got = values(&out)?;
    let want = reference::moe::dense_f32_reference(dtype, &inp);
    let (nrms, nmax) = (metrics::nrms(&got, &want), metrics::nmax(&got, &want));
    let status_ok = status.download()? == [0];
    let passed = nrms < 5e-4 && nmax < 2e-2 && status_ok;
    let result = format!(
        "vs dense f32: nRMS {nrms:.1e} (< 5e-4), nMAX {nmax:.1e} (< 2e-2){}",
        if status_ok { "" } else { ", STATUS SET" }
    );
    // Bytes of the six selected experts' weights, scales and biases (both matrices).
    let bytes = 2 * 6 * dff as u64 * (din as u64 * bits as u64 / 8 + 2 * dtype.size() as u64 * (din / 64) as u64);
    Ok(Outcome {
        kernel: if bits == 4 { "moe routed 4b" } else { "moe routed 8b" },
        dtype: Some(dtype),
        shape: shape_text,
        result,
        passed,
        millis: Some(millis),
        bytes,
    })
}

fn moe4_case<T: Element>(device: &Device) -> Result<Outcome> {
    moe_case::<T>(device, 4)
}

fn moe8_case<T: Element>(device: &Device) -> Result<Outcome> {
    moe_case::<T>(device, 8)
}

/// The probe kernel (every wave primitive: ids, shuffles, broadcast, wave sum,
/// workgroup memory across a barrier) on `device`, compared word for word with
/// the same launch on the CPU emulator.
fn probe_case(device: &Device) -> Result<Outcome> {
    use mlxcel_amdgpu::kernels_device::geometry::probe::{WORDS_PER_LANE, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
    let groups = 3u32;
    let shape = format!("{groups} x {WORKGROUP_SIZE} threads");
    let words = (groups * WORKGROUP_SIZE) as usize * WORDS_PER_LANE;
    let dims = mlxcel_amdgpu::runtime::LaunchDims {
        grid: [groups, 1, 1],
        workgroup_size: WORKGROUP_SIZE,
        workgroup_mem_bytes: WORKGROUP_MEM_BYTES,
    };
    let run_on = |dev: &Device| -> Result<(Vec<u32>, f64)> {
        let kernel = dev.kernel("probe")?;
        let mut out = dev.alloc::<u32>(words)?;
        out.fill_bytes(0)?;
        let args = mlxcel_amdgpu::kernels_device::entry::ProbeArgs { out: out.ptr() }.values();
        let millis = time_launches(dev, 3, || unsafe { dev.launch(&kernel, dims, &args, Stream::DEFAULT) })?;
        Ok((out.download()?, millis))
    };
    let (got, millis) = run_on(device)?;
    let (want, _) = run_on(&Device::cpu())?;
    let (result, passed) = match got.iter().zip(&want).position(|(g, w)| g != w) {
        None => ("identical to the CPU emulator".to_string(), true),
        Some(i) => (
            format!(
                "MISMATCH at thread {} word {}: {:#010x} vs emulator {:#010x}",
                i / WORDS_PER_LANE,
                i % WORDS_PER_LANE,
                got[i],
                want[i]
            ),
            false,
        ),
    };
    Ok(Outcome { kernel: "probe", dtype: None, shape, result, passed, millis: Some(millis), bytes: (words * 4) as u64 })
}

/// Makes the self-test fail unless the HIP backend is the one verified.
pub const EXPECT_HIP_ENV: &str = "MLXCEL_AMDGPU_EXPECT_HIP";
/// Makes the self-test fail unless the CUDA backend is the one verified.
pub const EXPECT_CUDA_ENV: &str = "MLXCEL_AMDGPU_EXPECT_CUDA";
/// The `kernel` of an [`Outcome`] that reports a failed expectation (one of the
/// variables above): it is not a row of the table but a `FAILED:` line under it.
pub const EXPECTATION: &str = "expected backend";

/// The GPU backends, each with the variable that expects it.
const GPU_BACKENDS: [(BackendKind, &str); 2] =
    [(BackendKind::Hip, EXPECT_HIP_ENV), (BackendKind::Cuda, EXPECT_CUDA_ENV)];

/// Opens device 0 of `kind` (once per process): `Ok` with a description when
/// its kernels are loaded, else why it cannot be used.
fn probe(kind: BackendKind) -> std::result::Result<String, String> {
    static HIP: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    static CUDA: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    static CPU: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    let cell = match kind {
        BackendKind::Hip => &HIP,
        BackendKind::Cuda => &CUDA,
        BackendKind::Cpu => &CPU,
    };
    cell.get_or_init(|| match Device::open(kind) {
        Ok(d) => {
            let i = d.info();
            match &i.kernels {
                Ok(k) => Ok(format!("{} ({}, kernels {k})", i.name, i.arch)),
                Err(why) => Err(format!("{} ({}) has no kernels: {why}", i.name, i.arch)),
            }
        }
        Err(Error::BackendUnavailable { reason, .. }) => Err(reason),
        Err(e) => Err(e.to_string()),
    })
    .clone()
}

/// Why the self-test did not run on backend `kind` (`device` is the one it ran on).
fn reason_not_used(device: &Device, kind: BackendKind) -> String {
    match probe(kind) {
        Err(why) => why,
        Ok(found) => {
            let why = match std::env::var(BACKEND_ENV) {
                Ok(v) => format!("{BACKEND_ENV}={v} selects the {} backend", device.backend()),
                Err(_) if kind == BackendKind::Cuda && device.backend() == BackendKind::Hip => {
                    "the default device is HIP's when there is one".to_string()
                }
                Err(_) => "the self-test was given another device".to_string(),
            };
            format!("a device is usable, {found}, but {why}")
        }
    }
}

/// Every GPU backend (hip, cuda) that `device` is not, with the reason it was not used.
pub fn unused_backends(device: &Device) -> Vec<(BackendKind, String)> {
    GPU_BACKENDS
        .iter()
        .filter(|(kind, _)| *kind != device.backend())
        .map(|&(kind, _)| (kind, reason_not_used(device, kind)))
        .collect()
}

/// The kernel outcomes (the table's rows), without expectation reports.
fn cases(outcomes: &[Outcome]) -> impl Iterator<Item = &Outcome> {
    outcomes.iter().filter(|o| o.kernel != EXPECTATION)
}

/// The device `device` as the last line names it.
fn device_label(device: &Device) -> String {
    let i = device.info();
    match device.backend() {
        BackendKind::Cpu => format!("{} ({}) — not a GPU", i.name, i.arch),
        kind => format!("{} ({}) through {}", i.name, i.arch, kind.name().to_uppercase()),
    }
}

/// What the outcomes verified: `Ok(device)` when every case ran on `device` and
/// passed, else why not.
pub fn verified(device: &Device, outcomes: &[Outcome]) -> std::result::Result<String, String> {
    let label = device_label(device);
    let all = cases(outcomes).count();
    let failed = cases(outcomes).filter(|o| !o.passed).count();
    let not_run: Vec<&Outcome> = cases(outcomes).filter(|o| o.passed && o.millis.is_none()).collect();
    if all == 0 {
        return Err(format!("no case ran on {label}"));
    }
    if failed > 0 {
        return Err(format!("{failed} of {all} cases failed on {label}"));
    }
    if let Some(first) = not_run.first() {
        return Err(format!("{} of {all} cases did not run on {label} (first: {})", not_run.len(), first.result));
    }
    Ok(label)
}

/// One message per expectation variable that is set when its backend is not
/// the one these outcomes verified.
pub fn expectation_failures(device: &Device, outcomes: &[Outcome]) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, env) in GPU_BACKENDS {
        if std::env::var_os(env).is_none() {
            continue;
        }
        if device.backend() != kind {
            out.push(format!(
                "{env} is set, but the self-test ran on {} ({}), not on {kind}; {kind}: {}",
                device.info().name,
                device.backend(),
                reason_not_used(device, kind)
            ));
        } else if let Err(why) = verified(device, outcomes) {
            out.push(format!("{env} is set, but {kind} was not verified: {why}"));
        }
    }
    out
}

/// The self-test as the command runs it: every case on `device` ([`run_cases`]),
/// then one failed [`EXPECTATION`] outcome for each expectation variable that is
/// set when its backend was not the one verified.
pub fn run(device: &Device) -> Vec<Outcome> {
    let mut out = run_cases(device);
    for why in expectation_failures(device, &out) {
        out.push(Outcome {
            kernel: EXPECTATION,
            dtype: None,
            shape: String::new(),
            result: why,
            passed: false,
            millis: None,
            bytes: 0,
        });
    }
    out
}

/// Runs every case on `device` (the probe, then each kernel and dtype).
pub fn run_cases(device: &Device) -> Vec<Outcome> {
    type Case = fn(&Device, Dtype) -> Result<Outcome>;
    let cases: [(&'static str, Case); 5] = [
        ("xielu", |d, t| with_element!(t, T => xielu_case::<T>(d))),
        ("add3_layer_norm", |d, t| with_element!(t, T => add3_case::<T>(d))),
        ("mamba1_scan", |d, t| with_element!(t, T => mamba_case::<T>(d))),
        ("moe routed 4b", |d, t| with_element!(t, T => moe4_case::<T>(d))),
        ("moe routed 8b", |d, t| with_element!(t, T => moe8_case::<T>(d))),
    ];
    // A bad count fails every case before anything is launched.
    let bad_count = timed_launches(device).err();
    let run = |kernel, dtype, case: &dyn Fn() -> Result<Outcome>| match &bad_count {
        Some(e) => Outcome::error(kernel, dtype, e),
        None => case().unwrap_or_else(|e| Outcome::error(kernel, dtype, &e)),
    };
    let mut out = vec![run("probe", None, &|| probe_case(device))];
    for (name, case) in cases {
        for dtype in Dtype::ALL {
            out.push(run(name, Some(dtype), &|| case(device, dtype)));
        }
    }
    out
}

/// The table of outcomes, with a header describing the device.
pub fn render(device: &Device, outcomes: &[Outcome]) -> String {
    let info = device.info();
    let mut s = String::new();
    writeln!(
        s,
        "device: {} ({}, {}, wave{}, {} compute units)",
        info.name, info.backend, info.arch, info.wavefront_size, info.compute_units
    )
    .unwrap();
    match &info.kernels {
        Ok(k) => writeln!(s, "kernels: {k}").unwrap(),
        Err(why) => writeln!(s, "kernels: none loaded: {why}").unwrap(),
    }
    for (kind, why) in unused_backends(device) {
        writeln!(s, "{kind}: not used: {why}").unwrap();
    }
    if reduced(device) {
        writeln!(s, "note: CPU emulator: reduced shapes where noted, and times are emulator times, not GPU times")
            .unwrap();
    }
    match std::env::var(REPS_ENV).as_deref() {
        Ok("0") => writeln!(s, "note: {REPS_ENV}=0: one launch per case, checked and timed, no warm-up").unwrap(),
        Ok(reps) => writeln!(s, "note: {REPS_ENV}={reps}: the times are medians of that many launches").unwrap(),
        Err(_) => {}
    }
    writeln!(s).unwrap();
    writeln!(s, "{:<16} {:<5} {:<34} {:>10} {:>9}  result", "kernel", "dtype", "shape", "time (us)", "GB/s").unwrap();
    for o in cases(outcomes) {
        let (t, bw) = match o.millis {
            Some(ms) => (format!("{:.1}", ms * 1e3), format!("{:.1}", o.bytes as f64 / (ms * 1e-3) / 1e9)),
            None => ("-".into(), "-".into()),
        };
        writeln!(
            s,
            "{:<16} {:<5} {:<34} {:>10} {:>9}  {}",
            o.kernel,
            o.dtype.map_or("-", Dtype::name),
            o.shape,
            t,
            bw,
            o.result
        )
        .unwrap();
    }
    let failed = cases(outcomes).filter(|o| !o.passed).count();
    let not_run = cases(outcomes).filter(|o| o.passed && o.millis.is_none()).count();
    let passed = cases(outcomes).count() - failed - not_run;
    if not_run == 0 {
        writeln!(s, "\n{passed} passed, {failed} failed").unwrap();
    } else {
        writeln!(s, "\n{passed} passed, {failed} failed, {not_run} not run (unavailable here)").unwrap();
    }
    for o in outcomes.iter().filter(|o| o.kernel == EXPECTATION) {
        writeln!(s, "FAILED: {}", o.result).unwrap();
    }
    match verified(device, outcomes) {
        Ok(label) => writeln!(s, "verified: {label}").unwrap(),
        Err(why) => writeln!(s, "not verified: {why}").unwrap(),
    }
    s
}
