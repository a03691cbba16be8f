//! Concurrency: 8 threads, each on its own stream, run a mix of
//! launches (xielu, add3_layer_norm in both instances, mamba1_scan, the MoE
//! fc1_relu2 and down pair; f32, f16 and bf16; small shapes; every job's inputs
//! different), and every job's outputs are bit for bit those of the same jobs
//! run one after another on one thread. On CUDA the device memory in use
//! (`cuMemGetInfo`) after the run, everything dropped, may exceed that before it
//! by at most [`CUDA_MEMORY_SLACK`].
//!
//! "Its own stream": on CUDA a stream each thread creates (`cuStreamCreate`);
//! the CPU backend refuses any stream but the null one, and the HIP stand-in has
//! no stream objects (`hip_api.rs` does not create streams either), so there all
//! threads use the null stream, and the case tests concurrent callers.
//!
//! Its own file (not tests/streams.rs), so that no other test of the process
//! (streams.rs creates a second CUDA context) moves the memory figure.
//!
//! `MLXCEL_AMDGPU_CONCURRENCY_LAUNCHES=<n>` sets the launch count of the
//! concurrent phase (`cargo xtask leak-check` runs it under valgrind with fewer).

mod common;

use std::collections::BTreeMap;

use common::{Suite, download_bits, upload};
use mlxcel_amdgpu::half::{bf16, f16};
use mlxcel_amdgpu::kernels::add3_layer_norm::{self, Add3Buffers};
use mlxcel_amdgpu::kernels::mamba1_scan::{self, ScanShape};
use mlxcel_amdgpu::kernels::moe::{self, MoeShape};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer, Dtype, Element, Stream};
use mlxcel_amdgpu_testkit::fixtures::{QuantizedUpload, ScanUpload};
use mlxcel_amdgpu_testkit::reference::mamba::ScanInputs;
use mlxcel_amdgpu_testkit::reference::moe::moe_inputs;

const THREADS: usize = 8;
/// Launches of the concurrent phase on the CPU backend and on CUDA.
const LAUNCHES: usize = 10_000;
/// Launches of the concurrent phase on the simulated gfx1151 (the HIP stand-in
/// over rdna-sim): the interpreter runs a small launch in milliseconds, not
/// microseconds, and the simulated suite must stay within CI's budget; 600
/// launches (480 jobs) keep every kernel and dtype, and all 8 threads, in the mix.
const HIP_LAUNCHES: usize = 600;
/// Distinct jobs (the single-threaded reference runs each once): a multiple of
/// 4 kernels x 3 dtypes x 3 add3 row lengths.
const VARIANTS: usize = 360;
/// Growth of CUDA device memory in use that the run may leave behind: allocator
/// and driver bookkeeping, not any buffer of the run (the smallest granule
/// cuMemGetInfo moves by is 2 MiB).
const CUDA_MEMORY_SLACK: usize = 16 << 20;

fn main() {
    Suite::new().per_backend("eight_threads_on_their_own_streams_match_one_thread", threads_match_one_thread).run()
}

fn launch_count(kind: BackendKind) -> usize {
    match std::env::var("MLXCEL_AMDGPU_CONCURRENCY_LAUNCHES") {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("MLXCEL_AMDGPU_CONCURRENCY_LAUNCHES={v:?} is not a count")),
        Err(_) if kind == BackendKind::Hip => HIP_LAUNCHES,
        Err(_) => LAUNCHES,
    }
}

/// Job `j`: which kernel (j % 4), which dtype ((j / 4) % 3); its inputs depend on `j`.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    Xielu,
    Add3,
    Scan,
    Moe,
}

fn kernel_of(j: usize) -> Kernel {
    [Kernel::Xielu, Kernel::Add3, Kernel::Scan, Kernel::Moe][j % 4]
}

fn dtype_of(j: usize) -> Dtype {
    [Dtype::F32, Dtype::F16, Dtype::Bf16][(j / 4) % 3]
}

/// Launches job `j` makes (the MoE pair is two).
fn launches_of(j: usize) -> usize {
    if matches!(kernel_of(j), Kernel::Moe) { 2 } else { 1 }
}

/// The jobs whose launches add up to at least `launches`.
fn jobs_for(launches: usize) -> usize {
    let (mut jobs, mut total) = (0, 0);
    while total < launches {
        total += launches_of(jobs);
        jobs += 1;
    }
    jobs
}

/// A value of job `j`'s data: a spread of values around 0, different per job.
fn value(j: usize, i: usize, scale: f32) -> f32 {
    (((i * 7 + j * 13) % 97) as f32 * 0.05 - 2.4) * scale
}

/// Runs job `j` on `stream` and returns every output's storage bits.
fn run_job(dev: &Device, j: usize, stream: Stream) -> Vec<u32> {
    match dtype_of(j) {
        Dtype::F32 => run_typed::<f32>(dev, j, stream),
        Dtype::F16 => run_typed::<f16>(dev, j, stream),
        Dtype::Bf16 => run_typed::<bf16>(dev, j, stream),
    }
}

fn run_typed<T: Element>(dev: &Device, j: usize, stream: Stream) -> Vec<u32> {
    match kernel_of(j) {
        Kernel::Xielu => {
            let n = 1 + (j * 37) % 300;
            let x = upload::<T>(dev, &(0..n).map(|i| value(j, i, 1.0)).collect::<Vec<_>>());
            let mut out = freed_on(dev.alloc::<T>(n).unwrap(), stream);
            let p = XieluParams { alpha_p: 0.8 + (j % 5) as f32 * 0.01, ..XieluParams::APERTUS };
            xielu::run(dev, &x, &mut out, n, p, stream).unwrap();
            download_bits(&out)
        }
        Kernel::Add3 => {
            // 4100: the full instance (rows longer than 4096), one row; the others
            // the short one, 1 to 3 rows.
            let d = [24, 130, 4100][(j / 12) % 3];
            let rows = if d > 4096 { 1 } else { 1 + j % 3 };
            let up = |salt: usize, scale: f32| {
                upload::<T>(dev, &(0..rows * d).map(|i| value(j + salt, i, scale)).collect::<Vec<_>>())
            };
            let (a, b, x) = (up(1, 1.0), up(2, 0.5), up(3, 2.0));
            let w = upload::<T>(dev, &(0..d).map(|i| 1.0 + value(j, i, 0.1)).collect::<Vec<_>>());
            let bias =
                (j % 2 == 1).then(|| upload::<T>(dev, &(0..d).map(|i| value(j + 5, i, 0.2)).collect::<Vec<_>>()));
            let mut x_new = freed_on(dev.alloc::<T>(rows * d).unwrap(), stream);
            let mut h = freed_on(dev.alloc::<T>(rows * d).unwrap(), stream);
            let bufs = Add3Buffers { a: &a, b: &b, x: &x, w: &w, bias: bias.as_ref(), x_new: &mut x_new, h: &mut h };
            add3_layer_norm::run(dev, bufs, rows as u32, d as u32, 1e-5, stream).unwrap();
            [download_bits(&x_new), download_bits(&h)].concat()
        }
        Kernel::Scan => {
            let shape = ScanShape { batch: 1, len: 1 + (j % 3) as u32, dm: 8, n: 16 };
            let mut s = ScanInputs::generate(T::DTYPE, 1, shape.len as usize, 8, 16, j.is_multiple_of(2));
            for (i, x) in s.x.iter_mut().enumerate() {
                *x += value(j, i, 0.01);
            }
            let inputs = ScanUpload::<T>::new(dev, &s).unwrap();
            let state_in = dev.upload(&s.state_in).unwrap();
            let mut y = freed_on(dev.alloc::<T>(s.x.len()).unwrap(), stream);
            let mut state_out = freed_on(dev.alloc::<f32>(s.state_in.len()).unwrap(), stream);
            mamba1_scan::run(dev, inputs.buffers(Some(&state_in), &mut y, &mut state_out), shape, stream).unwrap();
            [download_bits(&y), download_bits(&state_out)].concat()
        }
        Kernel::Moe => {
            let shape = MoeShape { n_experts: 3, k: 1 + (j % 2) as u32, din: 32, dff: 64, bits: 4, group_size: 32 };
            let (k, din, dff) = (shape.k as usize, shape.din as usize, shape.dff as usize);
            let m = moe_inputs(T::DTYPE, din, dff, 3, k, 4, 32, j as u64);
            let x = upload::<T>(dev, &m.x);
            let idx = dev.upload(&m.idx).unwrap();
            let scores = dev.upload(&m.scores).unwrap();
            let (w1, w2) =
                (QuantizedUpload::<T>::new(dev, &m.w1).unwrap(), QuantizedUpload::<T>::new(dev, &m.w2).unwrap());
            let mut act = freed_on(dev.alloc::<f32>(k * dff).unwrap(), stream);
            let mut part = freed_on(dev.alloc::<f32>(k * din).unwrap(), stream);
            moe::run_fc1_relu2::<T>(dev, &x, &idx, w1.buffers(), &mut act, &shape, None, stream).unwrap();
            moe::run_down::<T>(dev, &idx, w2.buffers(), &act, &scores, &mut part, &shape, None, stream).unwrap();
            [download_bits(&act), download_bits(&part)].concat()
        }
    }
}

/// `b`, freed in the order of `stream` (the one it is written on).
fn freed_on<U>(mut b: DeviceBuffer<U>, stream: Stream) -> DeviceBuffer<U> {
    b.set_stream(stream);
    b
}

/// A stream of its own for a thread: created on CUDA, the null stream elsewhere.
struct OwnStream(Stream);

impl OwnStream {
    fn new(dev: &Device) -> OwnStream {
        #[cfg(feature = "cuda")]
        if dev.backend() == BackendKind::Cuda {
            use cudarc::driver::sys;
            // Makes the library's context current on this thread first.
            drop(dev.alloc::<u8>(1).unwrap());
            let mut stream: sys::CUstream = std::ptr::null_mut();
            // SAFETY: `stream` is writable; the library's context is current.
            let status = unsafe { sys::cuStreamCreate(&mut stream, 0) };
            assert_eq!(status, sys::CUresult::CUDA_SUCCESS);
            return OwnStream(Stream(stream.cast()));
        }
        let _ = dev;
        OwnStream(Stream::DEFAULT)
    }
}

impl Drop for OwnStream {
    fn drop(&mut self) {
        #[cfg(feature = "cuda")]
        if self.0 != Stream::DEFAULT {
            // SAFETY: created by cuStreamCreate above, destroyed once, after its work.
            unsafe {
                cudarc::driver::sys::cuStreamSynchronize(self.0.0.cast());
                cudarc::driver::sys::cuStreamDestroy_v2(self.0.0.cast());
            }
        }
    }
}

/// Device memory in use (CUDA: total minus free, from cuMemGetInfo), or `None`
/// where the backend has no such figure.
fn memory_in_use(dev: &Device) -> Option<usize> {
    #[cfg(feature = "cuda")]
    if dev.backend() == BackendKind::Cuda {
        dev.synchronize().unwrap();
        let (free, total) = cudarc::driver::result::mem_get_info().expect("cuMemGetInfo");
        return Some(total - free);
    }
    let _ = dev;
    None
}

fn threads_match_one_thread(dev: &Device) {
    let launches = launch_count(dev.backend());
    let jobs = jobs_for(launches);
    // One thread, in order: the reference (and the warm-up: modules, pools), of
    // the VARIANTS distinct jobs; job j of the concurrent phase repeats variant
    // j % VARIANTS, and the jobs running at once all differ.
    let want: Vec<Vec<u32>> = (0..VARIANTS.min(jobs)).map(|j| run_job(dev, j, Stream::DEFAULT)).collect();
    let before = memory_in_use(dev);
    // THREADS threads, thread t taking jobs t, t + THREADS, ...
    let got: BTreeMap<usize, Vec<u32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                scope.spawn(move || {
                    let stream = OwnStream::new(dev);
                    (t..jobs).step_by(THREADS).map(|j| (j, run_job(dev, j % VARIANTS, stream.0))).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(got.len(), jobs);
    for (j, bits) in &got {
        assert!(
            *bits == want[*j % VARIANTS],
            "job {j} ({:?}, {}) on {}: the concurrent result differs from the single-threaded one",
            kernel_of(*j),
            dtype_of(*j),
            dev.backend()
        );
    }
    let after = memory_in_use(dev);
    println!(
        "{}: {launches} launches ({jobs} jobs) on {THREADS} threads, identical to one thread; memory in use {before:?} -> {after:?}",
        dev.backend()
    );
    if let (Some(before), Some(after)) = (before, after) {
        assert!(
            after <= before + CUDA_MEMORY_SLACK,
            "device memory in use grew from {before} to {after} bytes, more than the {CUDA_MEMORY_SLACK}-byte slack"
        );
    }
}
