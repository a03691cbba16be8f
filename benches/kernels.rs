//! Kernel benchmarks on the default device (run them on a GPU):
//!
//! ```sh
//! cargo bench --features cuda --bench kernels            # NVIDIA, through the CUDA backend
//! cargo bench --bench kernels                            # AMD, through HIP
//! ```
//!
//! Every number is measured in the same run as its yardsticks: the device's
//! device-to-device copy bandwidth (bytes read plus written, as for the kernels)
//! and the time of an empty kernel launch. Times are medians of event-timed
//! repetitions. Prints a Markdown table; `--csv` prints CSV instead.

use mlxcel_amdgpu::kernels::add3_layer_norm::{self, Add3Buffers};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::reference::{self, Dtype, data};
use mlxcel_amdgpu::runtime::LaunchDims;
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer, Result, Stream};

/// gfx1151's (Radeon 8060S) memory bandwidth, for the on-paper decode estimates.
const GFX1151_BYTES_PER_S: f64 = 256e9;

struct Row {
    kernel: String,
    shape: String,
    micros: f64,
    bytes: f64,
    note: String,
}

/// Median milliseconds of one call of `f`, each repetition timed with events
/// around `inner` back-to-back calls.
fn median_ms(dev: &Device, reps: usize, inner: usize, mut f: impl FnMut() -> Result<()>) -> f64 {
    for _ in 0..3 {
        f().unwrap();
    }
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            dev.time(Stream::DEFAULT, || {
                for _ in 0..inner {
                    f()?;
                }
                Ok(())
            })
            .unwrap()
                / inner as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

fn upload(dev: &Device, dtype: Dtype, v: &[f32]) -> DeviceBuffer<u8> {
    dev.upload(&reference::to_le_bytes(dtype, v)).unwrap()
}

fn copy_bandwidth(dev: &Device) -> f64 {
    let bytes = 1usize << 30;
    let src = dev.alloc::<u8>(bytes).unwrap();
    let mut dst = dev.alloc::<u8>(bytes).unwrap();
    let ms = median_ms(dev, 10, 1, || dev.copy(&mut dst, &src, Stream::DEFAULT));
    2.0 * bytes as f64 / (ms * 1e-3)
}

fn empty_launch_us(dev: &Device) -> f64 {
    let k = dev.kernel("empty").unwrap();
    let dims = LaunchDims { grid: [1, 1, 1], workgroup_size: 256, workgroup_mem_bytes: 0 };
    median_ms(dev, 20, 100, || unsafe { dev.launch(&k, dims, &[], Stream::DEFAULT) }) * 1e3
}

fn bench_xielu(dev: &Device, rows: &mut Vec<Row>, n: usize, dtype: Dtype) {
    let x = reference::round_all(dtype, &data::lcg_uniform(1, n.min(1 << 20)));
    let x: Vec<f32> = x.iter().cycle().take(n).copied().collect();
    let input = upload(dev, dtype, &x);
    let mut out = dev.alloc::<u8>(n * dtype.size()).unwrap();
    let p = XieluParams::APERTUS;
    let ms = median_ms(dev, 20, 10, || xielu::run(dev, dtype, &input, &mut out, n, p, Stream::DEFAULT));
    rows.push(Row { kernel: format!("xielu {dtype}"), shape: format!("n={n}"), micros: ms * 1e3, bytes: (2 * n * dtype.size()) as f64, note: String::new() });
}

fn bench_add3(dev: &Device, rows_out: &mut Vec<Row>, rows: usize, d: usize, dtype: Dtype) {
    let inp = data::add3_inputs(dtype, rows.min(64), d, true, 9);
    let tile = |v: &[f32]| -> Vec<f32> { v.iter().cycle().take(rows * d).copied().collect() };
    let (a, b, x) = (upload(dev, dtype, &tile(&inp.a)), upload(dev, dtype, &tile(&inp.b)), upload(dev, dtype, &tile(&inp.x)));
    let (w, bias) = (upload(dev, dtype, &inp.w), upload(dev, dtype, inp.bias.as_ref().unwrap()));
    let mut x_new = dev.alloc::<u8>(rows * d * dtype.size()).unwrap();
    let mut h = dev.alloc::<u8>(rows * d * dtype.size()).unwrap();
    let ms = median_ms(dev, 20, 10, || {
        let bufs = Add3Buffers { a: &a, b: &b, x: &x, w: &w, bias: Some(&bias), x_new: &mut x_new, h: &mut h };
        add3_layer_norm::run(dev, dtype, bufs, rows as u32, d as u32, 1e-5, Stream::DEFAULT)
    });
    let bytes = ((5 * rows * d + 2 * d) * dtype.size()) as f64;
    rows_out.push(Row { kernel: format!("add3_layer_norm {dtype}"), shape: format!("rows={rows} D={d}"), micros: ms * 1e3, bytes, note: String::new() });
}

fn main() {
    let csv = std::env::args().any(|a| a == "--csv");
    let dev = Device::default_device().expect("a device");
    let info = dev.info().clone();
    if info.backend == BackendKind::Cpu {
        eprintln!("the benchmarks need a GPU (found only the CPU emulator); set MLXCEL_AMDGPU_BACKEND=hip or build with --features cuda");
        return;
    }
    let copy = copy_bandwidth(&dev);
    let empty = empty_launch_us(&dev);
    println!("device: {} ({}, {}), kernels: {:?}", info.name, info.backend, info.arch, info.kernels);
    println!("copy bandwidth (device to device, read + write): {:.1} GB/s; empty kernel launch: {:.2} us\n", copy / 1e9, empty);

    let mut rows = Vec::new();
    for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
        bench_xielu(&dev, &mut rows, 1 << 26, dtype);
    }
    bench_xielu(&dev, &mut rows, 21504, Dtype::Bf16);
    for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
        bench_add3(&dev, &mut rows, 8192, 4096, dtype);
    }
    bench_add3(&dev, &mut rows, 1, 4096, Dtype::Bf16);

    for r in &mut rows {
        let gbs = r.bytes / (r.micros * 1e-6);
        r.note = format!(
            "{:.1}% of copy; {:.2}x empty launch; at 256 GB/s (gfx1151): {:.2} us",
            100.0 * gbs / copy,
            r.micros / empty,
            r.bytes / GFX1151_BYTES_PER_S * 1e6
        );
    }
    if csv {
        println!("kernel,shape,us,bytes,GB/s,fraction_of_copy,x_empty_launch");
        for r in &rows {
            let gbs = r.bytes / (r.micros * 1e-6);
            println!("{},{},{:.3},{},{:.1},{:.3},{:.2}", r.kernel, r.shape, r.micros, r.bytes, gbs / 1e9, gbs / copy, r.micros / empty);
        }
    } else {
        println!("| kernel | shape | time (us) | bytes | GB/s | notes |");
        println!("|---|---|---:|---:|---:|---|");
        for r in &rows {
            let gbs = r.bytes / (r.micros * 1e-6);
            println!("| {} | {} | {:.2} | {} | {:.1} | {} |", r.kernel, r.shape, r.micros, r.bytes, gbs / 1e9, r.note);
        }
    }
}
