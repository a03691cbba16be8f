//! Shared by the kernel tests: a harness that runs each case once per backend
//! (and per dtype), typed data movement helpers.
//!
//! Kernel test files use `harness = false` and build their trials with
//! [`Suite`]: every case becomes one test per backend and dtype, named
//! `case::backend::dtype`, so one failure does not hide the others. A backend
//! that is absent makes its tests *ignored with the reason* in the normal
//! output, and the run ends with a summary of which backends ran.
//!
//! `MLXCEL_AMDGPU_EXPECT_HIP=1` (on the AMD machine) and `MLXCEL_AMDGPU_EXPECT_CUDA=1`
//! (on the NVIDIA one) make the tests of an absent HIP or CUDA backend fail
//! instead, so that a run meant to exercise a GPU cannot pass on the emulator alone.
#![allow(dead_code)]

use std::sync::OnceLock;

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use mlxcel_amdgpu::half::{bf16, f16};
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer, Dtype, Element};

pub mod timing;

/// One backend of this machine: the device, or why it cannot run the kernels.
pub struct Backend {
    pub kind: BackendKind,
    pub device: Result<Device, String>,
    /// The variable that makes this backend's absence a failure.
    pub expect_env: Option<&'static str>,
}

/// The backends, opened once per test binary: HIP and CUDA when a device exists
/// and a kernel binary for it is loaded, the CPU emulator always.
pub fn backends() -> &'static [Backend] {
    static BACKENDS: OnceLock<Vec<Backend>> = OnceLock::new();
    BACKENDS.get_or_init(|| {
        let gpu = |kind, env| {
            let device = match Device::open(kind) {
                Ok(d) => match &d.info().kernels {
                    Ok(_) => Ok(d),
                    Err(why) => Err(format!("{} ({}) has no kernels: {why}", d.info().name, d.info().arch)),
                },
                Err(e) => Err(e.to_string()),
            };
            Backend { kind, device, expect_env: Some(env) }
        };
        vec![
            gpu(BackendKind::Hip, "MLXCEL_AMDGPU_EXPECT_HIP"),
            gpu(BackendKind::Cuda, "MLXCEL_AMDGPU_EXPECT_CUDA"),
            Backend { kind: BackendKind::Cpu, device: Ok(Device::cpu()), expect_env: None },
        ]
    })
}

/// The device of `kind`, or what to do without it: ignore the test with the
/// reason, or fail it when the backend was expected.
fn device_or_skip(kind: BackendKind) -> Result<Result<Device, Completion>, Failed> {
    let backend = backends().iter().find(|b| b.kind == kind).expect("every kind is listed");
    match &backend.device {
        Ok(d) => Ok(Ok(d.clone())),
        Err(why) => match backend.expect_env {
            Some(env) if std::env::var_os(env).is_some() => {
                Err(format!("{env} is set but the {kind} backend is absent: {why}").into())
            }
            _ => Ok(Err(Completion::ignored_with(format!("no {kind} device: {why}")))),
        },
    }
}

/// Runs `f`, turning a panic into a failure with its message.
fn catch(f: impl FnOnce()) -> Result<(), Failed> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
        Failed::from(msg.unwrap_or_else(|| "panicked".into()))
    })
}

/// The trials of one test binary.
#[derive(Default)]
pub struct Suite {
    trials: Vec<Trial>,
}

/// A case generic over the element type, instantiated for each dtype.
pub type Typed = [(Dtype, fn(&Device)); 3];

/// `case::<f32>`, `case::<f16>`, `case::<bf16>` for [`Suite::per_backend_and_dtype`].
#[macro_export]
macro_rules! typed {
    ($case:ident) => {
        [
            (mlxcel_amdgpu::Dtype::F32, $case::<f32> as fn(&mlxcel_amdgpu::Device)),
            (mlxcel_amdgpu::Dtype::F16, $case::<mlxcel_amdgpu::half::f16> as fn(&mlxcel_amdgpu::Device)),
            (mlxcel_amdgpu::Dtype::Bf16, $case::<mlxcel_amdgpu::half::bf16> as fn(&mlxcel_amdgpu::Device)),
        ]
    };
}

/// [`typed!`] with const arguments after the element type: `case::<T, C...>`.
#[macro_export]
macro_rules! typed_with {
    ($case:ident, $($c:expr),+) => {
        [
            (mlxcel_amdgpu::Dtype::F32, $case::<f32, $({ $c }),+> as fn(&mlxcel_amdgpu::Device)),
            (mlxcel_amdgpu::Dtype::F16, $case::<mlxcel_amdgpu::half::f16, $({ $c }),+> as fn(&mlxcel_amdgpu::Device)),
            (mlxcel_amdgpu::Dtype::Bf16, $case::<mlxcel_amdgpu::half::bf16, $({ $c }),+> as fn(&mlxcel_amdgpu::Device)),
        ]
    };
}

/// Registers cases under their functions' names, in order:
/// `named_cases!(suite; per_backend: a, b; single: c; cpu_per_dtype: d;)` calls
/// `suite.per_backend("a", a)`, ..., with [`typed!`] around the cases of the
/// per-dtype methods.
#[macro_export]
macro_rules! named_cases {
    ($suite:ident; $($method:ident: $($case:ident),+;)+) => {
        $($( $suite.$method(stringify!($case), $crate::named_cases!(@case $method $case)); )+)+
    };
    (@case per_backend_and_dtype $case:ident) => { typed!($case) };
    (@case cpu_per_dtype $case:ident) => { typed!($case) };
    (@case $method:ident $case:ident) => { $case };
}

/// `suite.per_backend_and_dtype(name, typed_with!(case, C...))` for each `name => C...;`.
#[macro_export]
macro_rules! typed_with_cases {
    ($suite:ident, $case:ident; $($name:literal => $($c:expr),+;)+) => {
        $( $suite.per_backend_and_dtype($name, typed_with!($case, $($c),+)); )+
    };
}

/// A test of `case` on a device of `kind`, ignored with the reason where there is none.
fn on_device(name: String, kind: BackendKind, case: fn(&Device)) -> Trial {
    Trial::ignorable_test(name, move || match device_or_skip(kind)? {
        Ok(d) => catch(|| case(&d)).map(|()| Completion::Completed),
        Err(skip) => Ok(skip),
    })
}

impl Suite {
    pub fn new() -> Suite {
        Suite::default()
    }

    /// `name::backend::dtype` for every backend and dtype.
    pub fn per_backend_and_dtype(&mut self, name: &str, cases: Typed) -> &mut Self {
        for b in backends() {
            for (dtype, case) in cases {
                self.trials.push(on_device(format!("{name}::{}::{dtype}", b.kind), b.kind, case));
            }
        }
        self
    }

    /// `name::backend` for every backend.
    pub fn per_backend(&mut self, name: &str, case: fn(&Device)) -> &mut Self {
        for b in backends() {
            self.trials.push(on_device(format!("{name}::{}", b.kind), b.kind, case));
        }
        self
    }

    /// `name::backend` on one backend only (ignored with the reason where it is absent).
    pub fn on_backend(&mut self, kind: BackendKind, name: &str, case: fn(&Device)) -> &mut Self {
        self.trials.push(on_device(format!("{name}::{kind}"), kind, case));
        self
    }

    /// `name::cuda::dtype` for every dtype, on CUDA only (ignored with the reason
    /// where it is absent): the largest grids, which the emulators would take
    /// hours over.
    pub fn cuda_per_dtype(&mut self, name: &str, cases: Typed) -> &mut Self {
        let kind = BackendKind::Cuda;
        for (dtype, case) in cases {
            self.trials.push(on_device(format!("{name}::{kind}::{dtype}"), kind, case));
        }
        self
    }

    /// `name::dtype` on the CPU emulator only (negative controls, checks of the
    /// host side that do not depend on a GPU).
    pub fn cpu_per_dtype(&mut self, name: &str, cases: Typed) -> &mut Self {
        for (dtype, case) in cases {
            self.trials.push(Trial::test(format!("{name}::{dtype}"), move || catch(|| case(&Device::cpu()))));
        }
        self
    }

    /// One test, `name`.
    pub fn single(&mut self, name: &str, case: fn()) -> &mut Self {
        self.trials.push(Trial::test(name.to_string(), move || catch(case)));
        self
    }

    /// A test that is ignored unless asked for (`-- --ignored`), with the reason.
    pub fn ignored(&mut self, name: &str, reason: &'static str, case: fn()) -> &mut Self {
        self.trials.push(
            Trial::ignorable_test(format!("{name} (ignored: {reason})"), move || {
                catch(case).map(|()| Completion::Completed)
            })
            .with_ignored_flag(true),
        );
        self
    }

    /// Runs the trials and prints which backends ran and why the others did not.
    pub fn run(&mut self) -> ! {
        let args = Arguments::from_args();
        let conclusion = libtest_mimic::run(&args, std::mem::take(&mut self.trials));
        if !args.list {
            eprintln!("\nbackends:");
            for b in backends() {
                match &b.device {
                    Ok(d) => eprintln!("  {:<4} ran on {} ({})", b.kind.name(), d.info().name, d.info().arch),
                    Err(why) => eprintln!("  {:<4} skipped: {why}", b.kind.name()),
                }
            }
        }
        conclusion.exit()
    }
}

/// The devices of the GPU backends present (for the timings); prints
/// `none_message` on stderr when there is none.
pub fn gpu_devices(none_message: &str) -> Vec<Device> {
    let gpus: Vec<Device> = backends()
        .iter()
        .filter(|b| b.kind != BackendKind::Cpu)
        .filter_map(|b| b.device.as_ref().ok().cloned())
        .collect();
    if gpus.is_empty() {
        eprintln!("{none_message}");
    }
    gpus
}

/// A buffer of `values`, each rounded to `T`.
pub fn upload<T: Element>(dev: &Device, values: &[f32]) -> DeviceBuffer<T> {
    dev.upload(&values.iter().map(|&v| T::from_f32(v)).collect::<Vec<T>>()).unwrap()
}

/// A buffer of `n` elements filled with a sentinel byte pattern, so an element
/// the kernel failed to write is noticed.
pub fn sentinel<T: Element>(dev: &Device, n: usize) -> DeviceBuffer<T> {
    let mut buf = dev.alloc::<T>(n).unwrap();
    buf.fill_bytes(0x7B).unwrap();
    buf
}

/// The storage bits of a downloaded buffer.
pub fn download_bits<T: Element>(buf: &DeviceBuffer<T>) -> Vec<u32> {
    buf.download().unwrap().into_iter().map(T::to_bits_u32).collect()
}

/// The values of a downloaded buffer, widened to f32.
pub fn download_values<T: Element>(buf: &DeviceBuffer<T>) -> Vec<f32> {
    buf.download().unwrap().into_iter().map(T::to_f32).collect()
}

/// nRMS and nMAX (each over the RMS of `exact`, as `reference::metrics`
/// measures them) of `got`, values of `dtype` rounded once at the end, against
/// the exact values, counting each element's error beyond that of the
/// correctly rounded value: an f32 sum a few ulps from a midpoint of `dtype`
/// may round to the other neighbour, which at Din 256 would alone exceed nRMS
/// 5e-4 (one bf16 ulp of an element near the output's RMS, over 16) though the
/// arithmetic is within the contract (seen on the H100's tensor cores). Any
/// other error counts in full; at f32 the measure is the plain one.
pub fn beyond_final_rounding(dtype: Dtype, got: &[f32], exact: &[f32]) -> (f64, f64) {
    use mlxcel_amdgpu_testkit::reference::{metrics, round};
    assert_eq!(got.len(), exact.len(), "lengths");
    let err: Vec<f64> = got
        .iter()
        .zip(exact)
        .map(|(&g, &x)| ((g as f64 - x as f64).abs() - (round(dtype, x) as f64 - x as f64).abs()).max(0.0))
        .collect();
    let rms = metrics::rms(exact);
    (metrics::rms(&err) / rms, err.iter().fold(0.0f64, |m, &e| m.max(e)) / rms)
}

/// Asserts that `got` (values of `dtype`) meets the contract against the exact
/// dense reference, nRMS < 5e-4 and nMAX < 2e-2 by [`beyond_final_rounding`],
/// and, as a negative control, that the measure refuses `got` with its
/// largest element 3% off. Returns the nRMS and nMAX.
pub fn assert_meets_dense(dtype: Dtype, got: &[f32], exact: &[f32], what: &str) -> (f64, f64) {
    let within = |(nrms, nmax): (f64, f64)| nrms < 5e-4 && nmax < 2e-2;
    let (nrms, nmax) = beyond_final_rounding(dtype, got, exact);
    assert!(within((nrms, nmax)), "{what} vs dense: nrms {nrms:e} nmax {nmax:e}");
    let mut off = got.to_vec();
    let at = (0..exact.len()).max_by(|&a, &b| exact[a].abs().total_cmp(&exact[b].abs())).expect("an element");
    off[at] = exact[at] * 1.03;
    assert!(!within(beyond_final_rounding(dtype, &off, exact)), "{what}: a moved element went unnoticed");
    (nrms, nmax)
}

/// A label for messages: `cpu/bf16`.
pub fn label<T: Element>(dev: &Device) -> String {
    format!("{}/{}", dev.backend(), T::DTYPE)
}

/// Keeps the imports of the element types used by the `typed!` macro alive.
pub type Elements = (f32, f16, bf16);
