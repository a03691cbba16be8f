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

#[path = "../tests/common/timing.rs"]
mod timing;

use mlxcel_amdgpu::half::bf16;
use mlxcel_amdgpu::kernels::add3_layer_norm::{self, Add3Buffers};
use mlxcel_amdgpu::kernels::mamba1_scan::{self, ScanPointers, ScanShape};
use mlxcel_amdgpu::kernels::moe::router::{self, RouterQuant, RouterShape};
use mlxcel_amdgpu::kernels::moe::{self, MoeShape, QuantizedPointers};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::kernels_device;
use mlxcel_amdgpu::kernels_device::entry::{EmptyArgs, ReadStreamArgs};
use mlxcel_amdgpu::runtime::LaunchDims;
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer, Element, Result, Stream, with_element};
use mlxcel_amdgpu_testkit::reference::{self, Dtype, data};

/// gfx1151's (Radeon 8060S) memory bandwidth, for the on-paper decode estimates.
const GFX1151_BYTES_PER_S: f64 = 256e9;

struct Row {
    kernel: String,
    shape: String,
    micros: f64,
    bytes: f64,
    note: String,
}

impl Row {
    /// A measured row without a note: `millis` per call, moving `bytes`.
    fn timed(kernel: String, shape: String, millis: f64, bytes: f64) -> Row {
        Row { kernel, shape, micros: millis * 1e3, bytes, note: String::new() }
    }
}

/// Median milliseconds of one call of `f`, each repetition timed with events
/// around `inner` back-to-back calls.
fn median_ms(dev: &Device, reps: usize, inner: usize, mut f: impl FnMut() -> Result<()>) -> f64 {
    for _ in 0..3 {
        f().unwrap();
    }
    timing::median_of_timed(dev, reps, inner, f)
}

/// A buffer of `v`, each value rounded to `T`.
fn upload<T: Element>(dev: &Device, v: &[f32]) -> DeviceBuffer<T> {
    dev.upload(&v.iter().map(|&e| T::from_f32(e)).collect::<Vec<T>>()).unwrap()
}

fn copy_bandwidth(dev: &Device) -> f64 {
    let bytes = 1usize << 30;
    let src = dev.alloc::<u8>(bytes).unwrap();
    let mut dst = dev.alloc::<u8>(bytes).unwrap();
    let ms = median_ms(dev, 10, 1, || dev.copy(&mut dst, &src, Stream::DEFAULT));
    2.0 * bytes as f64 / (ms * 1e-3)
}

/// Copy bandwidth (read + write) of copies of `bytes` each, as the MoE kernels
/// see memory: short transfers, each from a source not in L2 (8 sources in turn,
/// 8 x 17-32 MB against H200's 50 MB L2). A yardstick for what one short launch
/// can reach; the targets stay relative to [`copy_bandwidth`].
fn short_copy_bandwidth(dev: &Device, bytes: usize) -> f64 {
    let srcs: Vec<DeviceBuffer<u8>> = (0..8).map(|_| dev.alloc::<u8>(bytes).unwrap()).collect();
    let mut dst = dev.alloc::<u8>(bytes).unwrap();
    let mut turn = 0usize;
    let ms = median_ms(dev, 30, 10, || {
        turn += 1;
        dev.copy(&mut dst, &srcs[turn % srcs.len()], Stream::DEFAULT)
    });
    2.0 * bytes as f64 / (ms * 1e-3)
}

/// Median milliseconds of one call of dependent `read_stream` launches, one per
/// entry of `parts` (bytes, each a multiple of 16), each launch reading a buffer
/// not in L2 (8 per part in turn), 10 calls back to back: what kernels that only
/// stream those bytes in, in that many launches, reach.
fn read_stream_ms(dev: &Device, parts: &[usize]) -> f64 {
    let k = dev.kernel("read_stream").unwrap();
    let workgroup_size = 256u32;
    let per_workgroup = workgroup_size as u64 * kernels_device::probe::READ_STREAM_UNROLL;
    // Per launch: its 8 sources, its length in quads, its geometry, its output.
    type Launch = (Vec<DeviceBuffer<u8>>, u64, LaunchDims, DeviceBuffer<u32>);
    let launches: Vec<Launch> = parts
        .iter()
        .map(|&bytes| {
            let srcs = (0..8).map(|_| dev.alloc::<u8>(bytes).unwrap()).collect();
            let quads = (bytes / 16) as u64;
            let workgroups = quads.div_ceil(per_workgroup).clamp(1, 65535) as u32;
            let out = dev.alloc::<u32>(workgroups as usize * workgroup_size as usize).unwrap();
            (srcs, quads, LaunchDims { grid: [workgroups, 1, 1], workgroup_size, workgroup_mem_bytes: 0 }, out)
        })
        .collect();
    let mut turn = 0usize;
    median_ms(dev, 30, 10, || {
        turn += 1;
        for (srcs, quads, dims, out) in &launches {
            let args = ReadStreamArgs { src: srcs[turn % srcs.len()].ptr(), quads: *quads, out: out.ptr() };
            unsafe { dev.launch(&k, *dims, &args.values(), Stream::DEFAULT) }?;
        }
        Ok(())
    })
}

/// Read bandwidth of one `read_stream` launch over `bytes` (see [`read_stream_ms`]).
fn read_stream_bandwidth(dev: &Device, bytes: usize) -> f64 {
    bytes as f64 / (read_stream_ms(dev, &[bytes]) * 1e-3)
}

fn empty_launch_us(dev: &Device) -> f64 {
    let k = dev.kernel("empty").unwrap();
    let dims = LaunchDims { grid: [1, 1, 1], workgroup_size: 256, workgroup_mem_bytes: 0 };
    median_ms(dev, 20, 100, || unsafe { dev.launch(&k, dims, &EmptyArgs {}.values(), Stream::DEFAULT) }) * 1e3
}

/// xielu over `n` elements: the section-1 LCG values (uniform in [-12, 12)),
/// or with `normal`, standard normal values (Box-Muller over the same LCG),
/// closer to an activation's and with more values near zero, where the 16-bit
/// tables end (2^-16 in bf16, 2^-11 in f16) and the kernel computes instead.
fn bench_xielu<T: Element>(dev: &Device, rows: &mut Vec<Row>, n: usize, normal: bool) {
    let dtype = T::DTYPE;
    let m = n.min(1 << 20);
    let values = if normal {
        let u = data::lcg_uniform(2, 2 * m);
        let unit = |v: f32| (v as f64 + 12.0) / 24.0;
        (0..m)
            .map(|i| {
                let (u1, u2) = (1.0 - unit(u[2 * i]), unit(u[2 * i + 1]));
                ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
            })
            .collect()
    } else {
        data::lcg_uniform(1, m)
    };
    let x = reference::round_all(dtype, &values);
    let x: Vec<f32> = x.iter().cycle().take(n).copied().collect();
    let input = upload::<T>(dev, &x);
    let mut out = dev.alloc::<T>(n).unwrap();
    let p = XieluParams::APERTUS;
    let ms = median_ms(dev, 20, 10, || xielu::run(dev, &input, &mut out, n, p, Stream::DEFAULT));
    let shape = format!("n={n}{}", if normal { " normal" } else { "" });
    rows.push(Row::timed(format!("xielu {dtype}"), shape, ms, (2 * n * dtype.size()) as f64));
}

fn bench_add3<T: Element>(dev: &Device, rows_out: &mut Vec<Row>, rows: usize, d: usize) {
    let dtype = T::DTYPE;
    let inp = data::add3_inputs(dtype, rows.min(64), d, true, 9);
    let tile = |v: &[f32]| -> Vec<f32> { v.iter().cycle().take(rows * d).copied().collect() };
    let (a, b, x) = (upload::<T>(dev, &tile(&inp.a)), upload::<T>(dev, &tile(&inp.b)), upload::<T>(dev, &tile(&inp.x)));
    let (w, bias) = (upload::<T>(dev, &inp.w), upload::<T>(dev, inp.bias.as_ref().unwrap()));
    let mut x_new = dev.alloc::<T>(rows * d).unwrap();
    let mut h = dev.alloc::<T>(rows * d).unwrap();
    let ms = median_ms(dev, 20, 10, || {
        let bufs = Add3Buffers { a: &a, b: &b, x: &x, w: &w, bias: Some(&bias), x_new: &mut x_new, h: &mut h };
        add3_layer_norm::run(dev, bufs, rows as u32, d as u32, 1e-5, Stream::DEFAULT)
    });
    let bytes = ((5 * rows * d + 2 * d) * dtype.size()) as f64;
    rows_out.push(Row::timed(format!("add3_layer_norm {dtype}"), format!("rows={rows} D={d}"), ms, bytes));
}

fn bench_mamba<T: Element>(dev: &Device, rows: &mut Vec<Row>, len: usize, dm: usize) {
    let dtype = T::DTYPE;
    let n = 16;
    let inp = reference::mamba::ScanInputs::generate(dtype, 1, len, dm, n, true);
    let (x, dt, bm, cm) =
        (upload::<T>(dev, &inp.x), upload::<T>(dev, &inp.dt), upload::<T>(dev, &inp.bm), upload::<T>(dev, &inp.cm));
    let a = upload::<f32>(dev, &inp.a);
    let dskip = upload::<T>(dev, &inp.dskip);
    let state_in = upload::<f32>(dev, &inp.state_in);
    let y = dev.alloc::<T>(len * dm).unwrap();
    let state_out = dev.alloc::<f32>(dm * n).unwrap();
    let p = ScanPointers {
        x: x.ptr(),
        dt: dt.ptr(),
        bm: bm.ptr(),
        cm: cm.ptr(),
        a: a.ptr(),
        dskip: dskip.ptr(),
        state_in: state_in.ptr(),
        y: y.ptr(),
        state_out: state_out.ptr(),
    };
    // Ten launches back to back per timing, as for the short kernels, so that no
    // launch waits for the host (the peers are timed from CUDA graphs likewise).
    let (reps, inner) = if len > 64 { (10, 10) } else { (20, 10) };
    let ms = median_ms(dev, reps, inner, || unsafe {
        let shape = ScanShape { batch: 1, len: len as u32, dm: dm as u32, n: n as u32 };
        mamba1_scan::launch(dev, dtype, mamba1_scan::args(p, shape), Stream::DEFAULT)
    });
    let bytes = ((4 * len * dm + 2 * len * n + dm) * dtype.size() + dm * n * 4 * 3) as f64;
    rows.push(Row::timed(format!("mamba1_scan {dtype}"), format!("B=1 Dm={dm} N={n} L={len}"), ms, bytes));
}

/// The mamba group's shapes `(Dm, L)`: the consumer shapes, or those listed in
/// `MLXCEL_AMDGPU_BENCH_MAMBA=DMxL,DMxL,..` (for sweeps over Dm or L).
fn mamba_shapes() -> Vec<(usize, usize)> {
    let Ok(list) = std::env::var("MLXCEL_AMDGPU_BENCH_MAMBA") else {
        return vec![(5120, 1), (5120, 512), (5120, 2048), (8192, 1), (8192, 512)];
    };
    list.split(',')
        .map(|shape| {
            let parsed = shape.split_once('x').and_then(|(dm, len)| Some((dm.parse().ok()?, len.parse().ok()?)));
            match parsed {
                Some((dm, len)) if dm > 0 && len > 0 => (dm, len),
                _ => panic!("MLXCEL_AMDGPU_BENCH_MAMBA: {shape:?} is not DMxL with both above zero (e.g. 5120x512)"),
            }
        })
        .collect()
}

/// A deterministic pseudo-random fill (splitmix64), for buffers too large to quantize on the host.
fn random_words(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u32
        })
        .collect()
}

/// Quantized expert stack of `rows x cols` per expert, random words, small scales.
fn random_stack<T: Element>(
    dev: &Device,
    shape: &MoeShape,
    rows: u32,
    cols: u32,
    seed: u64,
) -> (DeviceBuffer<u32>, DeviceBuffer<T>, DeviceBuffer<T>) {
    let e = shape.n_experts as usize;
    let words = e * rows as usize * (cols as usize * shape.bits as usize / 32);
    let groups = e * rows as usize * (cols / shape.group_size) as usize;
    let w = random_words(words, seed);
    let w = dev.upload(&w).unwrap();
    let scales: Vec<f32> = random_words(groups, seed + 1).iter().map(|&r| 1e-3 + (r % 1000) as f32 * 1e-5).collect();
    let biases: Vec<f32> = random_words(groups, seed + 2).iter().map(|&r| -0.01 + (r % 1000) as f32 * 2e-5).collect();
    (w, upload::<T>(dev, &scales), upload::<T>(dev, &biases))
}

fn bench_moe<T: Element>(dev: &Device, rows: &mut Vec<Row>, bits: u32, copy: f64) {
    let dtype = T::DTYPE;
    let shape = MoeShape { bits, ..MoeShape::NEMOTRON };
    let (w1, s1, b1) = random_stack::<T>(dev, &shape, shape.dff, shape.din, 11);
    let (w2, s2, b2) = random_stack::<T>(dev, &shape, shape.din, shape.dff, 22);
    let x = upload::<T>(dev, &reference::round_all(dtype, &data::lcg_uniform(3, shape.din as usize)));
    // 21 disjoint sets of six experts, used in turn, so that no launch finds its
    // experts' weights in L2 from the previous one (six experts are 17-32 MB).
    let idx_sets: Vec<DeviceBuffer<u32>> =
        (0..21u32).map(|s| dev.upload(&(0..6).map(|j| (s * 6 + j) % 128).collect::<Vec<u32>>()).unwrap()).collect();
    let mut turn = 0usize;
    let mut next_idx = move || {
        turn += 1;
        idx_sets[turn % idx_sets.len()].ptr()
    };
    let scores = dev.upload(&[0.3f32, 0.2, 0.15, 0.15, 0.1, 0.1]).unwrap();
    let scratch = dev.alloc::<u8>(moe::scratch_bytes(shape.k, shape.din, shape.dff).unwrap()).unwrap();
    let out = dev.alloc::<T>(shape.din as usize).unwrap();
    // The kernels only ever set the status word (an expert id out of range); the caller zeroes it.
    let status = dev.upload(&[0u32]).unwrap();
    let act = scratch.ptr();
    let part = scratch.ptr() + moe::part_offset(shape.k, shape.dff).unwrap() as u64;
    let q1 = QuantizedPointers { w: w1.ptr(), scales: s1.ptr(), biases: b1.ptr() };
    let q2 = QuantizedPointers { w: w2.ptr(), scales: s2.ptr(), biases: b2.ptr() };
    // Bytes of the six selected experts' weights, scales and biases, per matrix.
    let matrix_bytes = |r: u32, c: u32| {
        (shape.k as usize
            * r as usize
            * (c as usize * bits as usize / 8 + 2 * dtype.size() * (c / shape.group_size) as usize)) as f64
    };
    let fc1 = median_ms(dev, 30, 10, || unsafe {
        moe::fc1_relu2(dev, T::DTYPE, shape.fc1_args(x.ptr(), next_idx(), q1, act, status.ptr()), Stream::DEFAULT)
    });
    rows.push(Row::timed(
        format!("moe_fc1_relu2 {dtype}"),
        format!("Nemotron bits={bits}"),
        fc1,
        matrix_bytes(shape.dff, shape.din),
    ));
    let down = median_ms(dev, 30, 10, || unsafe {
        moe::down(
            dev,
            T::DTYPE,
            shape.down_args(next_idx(), q2, act, scores.ptr(), part, status.ptr()),
            Stream::DEFAULT,
        )
    });
    rows.push(Row::timed(
        format!("moe_down {dtype}"),
        format!("Nemotron bits={bits}"),
        down,
        matrix_bytes(shape.din, shape.dff),
    ));
    let p = |idx: u64| moe::RoutedPointers {
        x: x.ptr(),
        idx,
        scores: scores.ptr(),
        w1: q1,
        w2: q2,
        out: out.ptr(),
        scratch: scratch.ptr(),
        scratch_len: scratch.len(),
        status: status.ptr(),
    };
    let routed = median_ms(dev, 30, 10, || unsafe {
        moe::routed_forward(dev, T::DTYPE, p(next_idx()), &shape, Stream::DEFAULT)
    });
    let bytes = matrix_bytes(shape.dff, shape.din) + matrix_bytes(shape.din, shape.dff);
    rows.push(Row::timed(format!("moe routed forward {dtype}"), format!("Nemotron bits={bits}"), routed, bytes));
    // The routed forward's yardstick: read_stream over the bytes of its three
    // launches (fc1's and down's weights, combine's K x Din f32 parts), in three
    // dependent launches (the MoE's 80% target is against this).
    let quad = |b: f64| (b as usize) / 16 * 16;
    let parts = [
        quad(matrix_bytes(shape.dff, shape.din)),
        quad(matrix_bytes(shape.din, shape.dff)),
        quad((shape.k * shape.din * 4) as f64),
    ];
    let yard = read_stream_ms(dev, &parts);
    rows.push(Row::timed(
        format!("read_stream yardstick {dtype}"),
        format!("routed forward's bytes bits={bits} in 3 launches"),
        yard,
        parts.iter().sum::<usize>() as f64,
    ));
    assert_eq!(status.download().unwrap()[0], 0, "no expert id was out of range");
    let fc1_bytes = matrix_bytes(shape.dff, shape.din) as usize;
    let short = short_copy_bandwidth(dev, fc1_bytes);
    println!(
        "yardstick: copies of {fc1_bytes} bytes (the {bits}-bit fc1's weights), L2-cold, 10 back to back: {:.1} GB/s (read + write)",
        short / 1e9
    );
    let read = read_stream_bandwidth(dev, fc1_bytes / 16 * 16);
    println!(
        "yardstick: read_stream kernel over the same bytes, L2-cold, 10 back to back: {:.1} GB/s ({:.1}% of copy)",
        read / 1e9,
        100.0 * read / copy
    );
}

/// The gated experts at Qwen3-30B-A3B's shape (E 128, K 8, Din 2048, Dff 768, group 64):
/// `moe_gateup` then `moe_down`, 16 disjoint sets of eight experts in turn (L2-cold), against
/// read_stream over the same bytes in two dependent launches.
fn bench_gated<T: Element>(dev: &Device, rows: &mut Vec<Row>, bits: u32) {
    let dtype = T::DTYPE;
    let shape = MoeShape { n_experts: 128, k: 8, din: 2048, dff: 768, bits, group_size: 64 };
    let stack = |r, c, seed| random_stack::<T>(dev, &shape, r, c, seed);
    let ((wg, sg, bg), (wu, su, bu), (wd, sd, bd)) =
        (stack(shape.dff, shape.din, 31), stack(shape.dff, shape.din, 32), stack(shape.din, shape.dff, 33));
    let x = upload::<T>(dev, &reference::round_all(dtype, &data::lcg_uniform(5, shape.din as usize)));
    let idx_sets: Vec<DeviceBuffer<u32>> =
        (0..16u32).map(|s| dev.upload(&(0..8).map(|j| s * 8 + j).collect::<Vec<u32>>()).unwrap()).collect();
    let mut turn = 0usize;
    let mut next_idx = move || {
        turn += 1;
        idx_sets[turn % idx_sets.len()].ptr()
    };
    let scores = dev.upload(&[0.125f32; 8]).unwrap();
    let act = dev.alloc::<f32>((shape.k * shape.dff) as usize).unwrap();
    let part = dev.alloc::<f32>((shape.k * shape.din) as usize).unwrap();
    let status = dev.upload(&[0u32]).unwrap();
    let q = |w: &DeviceBuffer<u32>, s: &DeviceBuffer<T>, b: &DeviceBuffer<T>| QuantizedPointers {
        w: w.ptr(),
        scales: s.ptr(),
        biases: b.ptr(),
    };
    let (gate, up, down) = (q(&wg, &sg, &bg), q(&wu, &su, &bu), q(&wd, &sd, &bd));
    let matrix_bytes = |r: u32, c: u32| {
        (shape.k as usize
            * r as usize
            * (c as usize * bits as usize / 8 + 2 * dtype.size() * (c / shape.group_size) as usize)) as f64
    };
    let gateup_bytes = 2.0 * matrix_bytes(shape.dff, shape.din);
    let down_bytes = matrix_bytes(shape.din, shape.dff);
    let pair = median_ms(dev, 30, 10, || unsafe {
        let idx = next_idx();
        let p = moe::GatedPointers { x: x.ptr(), idx, gate, up, act: act.ptr(), status: status.ptr() };
        moe::gateup(dev, dtype, shape.gateup_args(p, moe::Activation::SwiGlu), Stream::DEFAULT)?;
        moe::down(
            dev,
            T::DTYPE,
            shape.down_args(idx, down, act.ptr(), scores.ptr(), part.ptr(), status.ptr()),
            Stream::DEFAULT,
        )
    });
    let name = format!("moe_gateup + moe_down {dtype}");
    rows.push(Row::timed(name, format!("Qwen3-30B-A3B bits={bits}"), pair, gateup_bytes + down_bytes));
    let parts = [(gateup_bytes as usize) / 16 * 16, (down_bytes as usize) / 16 * 16];
    rows.push(Row::timed(
        format!("read_stream yardstick {dtype}"),
        format!("gated experts' bytes bits={bits} in 2 launches"),
        read_stream_ms(dev, &parts),
        parts.iter().sum::<usize>() as f64,
    ));
    assert_eq!(status.download().unwrap()[0], 0, "no expert id was out of range");
}

/// The router at Qwen3-30B-A3B's shape (E 128, Din 2048, K 8, renormalized) for
/// `m` tokens: `moe_router_logits` then `moe_topk`, over 128 router copies in
/// turn (64 MiB in bf16, more than the H200's L2), beside `read_stream` over the
/// same bytes in two launches.
fn bench_router<T: Element>(dev: &Device, rows: &mut Vec<Row>, m: u32) {
    let dtype = T::DTYPE;
    let shape = RouterShape { m, n_experts: 128, din: 2048, k: 8 };
    let (e, din) = (shape.n_experts as usize, shape.din as usize);
    let routers: Vec<DeviceBuffer<T>> = (0..128u64)
        .map(|s| upload::<T>(dev, &reference::round_all(dtype, &data::lcg_uniform(100 + s, e * din))))
        .collect();
    let x = upload::<T>(dev, &reference::round_all(dtype, &data::lcg_uniform(7, m as usize * din)));
    let logits = dev.alloc::<f32>(m as usize * e).unwrap();
    let ids = dev.alloc::<u32>((m * shape.k) as usize).unwrap();
    let scores = dev.alloc::<f32>((m * shape.k) as usize).unwrap();
    let mut turn = 0usize;
    let ms = median_ms(dev, 30, 10, || unsafe {
        turn += 1;
        let wr = routers[turn % routers.len()].ptr();
        router::router_logits(dev, dtype, shape.logits_args(x.ptr(), wr, logits.ptr()), Stream::DEFAULT)?;
        router::topk(dev, shape.topk_args(logits.ptr(), ids.ptr(), scores.ptr(), true), Stream::DEFAULT)
    });
    let logits_bytes = ((e + m as usize) * din * dtype.size() + m as usize * e * 4) as f64;
    let topk_bytes = (m as usize * (e * 4 + 2 * shape.k as usize * 4)) as f64;
    let what = format!("Qwen3-30B-A3B M={m}");
    rows.push(Row::timed(format!("moe_router_logits + moe_topk {dtype}"), what.clone(), ms, logits_bytes + topk_bytes));
    let parts = [(logits_bytes as usize) / 16 * 16, (topk_bytes as usize).div_ceil(16) * 16];
    rows.push(Row::timed(
        format!("read_stream yardstick {dtype}"),
        format!("router's bytes M={m} in 2 launches"),
        read_stream_ms(dev, &parts),
        parts.iter().sum::<usize>() as f64,
    ));
    // Each launch alone: which of the two takes the pair's time beyond its yardstick.
    let logits_ms = median_ms(dev, 30, 10, || unsafe {
        turn += 1;
        let wr = routers[turn % routers.len()].ptr();
        router::router_logits(dev, dtype, shape.logits_args(x.ptr(), wr, logits.ptr()), Stream::DEFAULT)
    });
    push_launch(dev, rows, "moe_router_logits", dtype, &what, logits_ms, parts[0]);
    let topk_ms = median_ms(dev, 30, 10, || unsafe {
        router::topk(dev, shape.topk_args(logits.ptr(), ids.ptr(), scores.ptr(), true), Stream::DEFAULT)
    });
    push_launch(dev, rows, "moe_topk", dtype, &what, topk_ms, parts[1]);
}

/// Kernel `name`'s row in `dtype` (`ms` per launch, reading `bytes`, a multiple of 16), and beside
/// it `read_stream` over the same bytes in one launch.
fn push_launch(dev: &Device, rows: &mut Vec<Row>, name: &str, dtype: Dtype, what: &str, ms: f64, bytes: usize) {
    rows.push(Row::timed(format!("{name} {dtype}"), what.to_string(), ms, bytes as f64));
    rows.push(Row::timed(
        format!("read_stream yardstick {dtype}"),
        format!("{what}'s {name} bytes in 1 launch"),
        read_stream_ms(dev, &[bytes]),
        bytes as f64,
    ));
}

/// A model's whole routed block of this shape for `m` tokens (renormalized, SwiGLU;
/// `moe::block::block`: router logits, top-k, gate/up, down and combine; the router in `T`, or
/// quantized as `router_quant` says, as mlx-lm's quantized checkpoints hold it), over 16
/// inputs in turn so that successive blocks choose other experts (L2-cold but for the experts two
/// inputs share), beside `read_stream` in the same dependent launches over the bytes those
/// launches must read: the router's weights; the logits; each distinct chosen expert's gate/up
/// once (their mean count over the inputs); down likewise; and the partial sums. The partial
/// sums and the down projection are one launch; at one token the logits and gate/up are one
/// launch too (three launches), from two tokens two (four). With `shared`, the
/// model's shared expert too (Qwen3-Next): its gate row in the router's format and its three
/// matrices, read once.
fn bench_block<T: Element>(
    dev: &Device,
    rows: &mut Vec<Row>,
    model: &str,
    shape: MoeShape,
    m: u32,
    router_quant: Option<RouterQuant>,
    shared: bool,
) {
    let (dtype, bits) = (T::DTYPE, shape.bits);
    let (e, k, din, dff) = (shape.n_experts as usize, shape.k as usize, shape.din as usize, shape.dff as usize);
    let stack = |r, c, seed| random_stack::<T>(dev, &shape, r, c, seed);
    let ((wg, sg, bg), (wu, su, bu), (wd, sd, bd)) =
        (stack(shape.dff, shape.din, 51), stack(shape.dff, shape.din, 52), stack(shape.din, shape.dff, 53));
    // Logits of a few units, as a trained router's: larger ones underflow every probability but
    // the top one or two to 0, and the ties at 0 go to the lowest experts for every token.
    let wr_values = data::normal(dtype, 54, e * din, 0.05);
    let wr = upload::<T>(dev, &wr_values);
    let wq = router_quant.map(|quant| {
        let q = reference::moe::quantize(dtype, &wr_values, e, din, quant.bits, quant.group_size as usize);
        let (w, s, b) = (dev.upload(&q.words).unwrap(), upload::<T>(dev, &q.scales), upload::<T>(dev, &q.biases));
        (quant, w, s, b)
    });
    let router_weights = match &wq {
        Some((quant, w, s, b)) => moe::block::RouterWeights::Quantized {
            w: QuantizedPointers { w: w.ptr(), scales: s.ptr(), biases: b.ptr() },
            quant: *quant,
        },
        None => moe::block::RouterWeights::Dense(wr.ptr()),
    };
    let xs: Vec<DeviceBuffer<T>> =
        (0..16u64).map(|s| upload::<T>(dev, &data::normal(dtype, 300 + s, m as usize * din, 1.0))).collect();
    // The experts each input chooses, from the router's own launches.
    let rshape = RouterShape { m, n_experts: shape.n_experts, din: shape.din, k: shape.k };
    // Each input's logits, ids and scores, kept for the launches timed one by one below.
    let ids_of: Vec<DeviceBuffer<u32>> = xs.iter().map(|_| dev.alloc::<u32>(m as usize * k).unwrap()).collect();
    let scores_of: Vec<DeviceBuffer<f32>> = xs.iter().map(|_| dev.alloc::<f32>(m as usize * k).unwrap()).collect();
    let logits_of: Vec<DeviceBuffer<f32>> = xs.iter().map(|_| dev.alloc::<f32>(m as usize * e).unwrap()).collect();
    let mut distinct = 0usize;
    for (((x, ids), scores), logits) in xs.iter().zip(&ids_of).zip(&scores_of).zip(&logits_of) {
        unsafe {
            match &wq {
                Some((quant, w, s, b)) => {
                    let args = rshape.logits_q_args(x.ptr(), w.ptr(), s.ptr(), b.ptr(), logits.ptr(), *quant);
                    router::router_logits_q(dev, dtype, args, Stream::DEFAULT)
                }
                None => router::router_logits(
                    dev,
                    dtype,
                    rshape.logits_args(x.ptr(), wr.ptr(), logits.ptr()),
                    Stream::DEFAULT,
                ),
            }
            .unwrap();
            router::topk(dev, rshape.topk_args(logits.ptr(), ids.ptr(), scores.ptr(), true), Stream::DEFAULT).unwrap();
        }
        let mut chosen = ids.download().unwrap();
        chosen.sort_unstable();
        chosen.dedup();
        distinct += chosen.len();
    }
    let distinct = distinct as f64 / xs.len() as f64;

    // The shared expert: one expert of the stacks' format, and its gate row as the router holds it.
    let one = MoeShape { n_experts: 1, ..shape };
    let shared_stacks = shared.then(|| {
        let quant = router_quant.expect("the shared-expert rows take mlx-lm's quantized router and gate row");
        let gate_row = data::normal(dtype, 55, din, 0.05);
        let q = reference::moe::quantize(dtype, &gate_row, 1, din, quant.bits, quant.group_size as usize);
        let row = (dev.upload(&q.words).unwrap(), upload::<T>(dev, &q.scales), upload::<T>(dev, &q.biases));
        let matrices = [
            random_stack::<T>(dev, &one, shape.dff, shape.din, 56),
            random_stack::<T>(dev, &one, shape.dff, shape.din, 57),
            random_stack::<T>(dev, &one, shape.din, shape.dff, 58),
        ];
        (row, matrices)
    });
    let shared_pointers = shared_stacks.as_ref().map(|(row, [g, u, d])| {
        let q = |(w, s, b): &(DeviceBuffer<u32>, DeviceBuffer<T>, DeviceBuffer<T>)| QuantizedPointers {
            w: w.ptr(),
            scales: s.ptr(),
            biases: b.ptr(),
        };
        let expert_gate = moe::block::ExpertGate::Quantized(q(row));
        moe::block::SharedExpertPointers { expert_gate, gate: q(g), up: q(u), down: q(d) }
    });

    let scratch_len = match shared {
        true => moe::block::block_shared_scratch_bytes(m, &shape).unwrap(),
        false => moe::block::block_scratch_bytes(m, &shape).unwrap(),
    };
    let scratch = dev.alloc::<u32>(scratch_len.div_ceil(4)).unwrap();
    let out = dev.alloc::<T>(m as usize * din).unwrap();
    let status = dev.upload(&[0u32]).unwrap();
    let q = |w: &DeviceBuffer<u32>, s: &DeviceBuffer<T>, b: &DeviceBuffer<T>| QuantizedPointers {
        w: w.ptr(),
        scales: s.ptr(),
        biases: b.ptr(),
    };
    let (gate, up, down) = (q(&wg, &sg, &bg), q(&wu, &su, &bu), q(&wd, &sd, &bd));
    let mut turn = 0usize;
    let ms = median_ms(dev, 30, 10, || unsafe {
        turn += 1;
        let p = moe::block::BlockPointers {
            x: xs[turn % xs.len()].ptr(),
            router: router_weights,
            gate,
            up,
            down,
            shared: shared_pointers,
            out: out.ptr(),
            scratch: scratch.ptr(),
            scratch_len,
            status: status.ptr(),
        };
        moe::block::block(dev, dtype, p, &shape, m, moe::Activation::SwiGlu, true, Stream::DEFAULT)
    });
    assert_eq!(status.download().unwrap()[0], 0, "no expert id was out of range");

    let size = dtype.size();
    let matrix = |r: usize, c: usize| r * (c * bits as usize / 8 + 2 * size * c / shape.group_size as usize);
    // The router's rows, and the shared expert's gate row with them.
    let rows_read = e + shared as usize;
    let router_bytes = m as usize * din * size
        + match router_quant {
            Some(q) => rows_read * (din * q.bits as usize / 8 + 2 * size * din / q.group_size as usize),
            None => rows_read * din * size,
        };
    let logits_bytes = m as usize * (e + shared as usize) * 4;
    // The distinct experts, and the shared one.
    let experts = distinct + shared as usize as f64;
    let gateup_bytes = (experts * (2 * matrix(dff, din)) as f64) as usize + m as usize * din * size;
    let down_bytes = (experts * matrix(din, dff) as f64) as usize;
    let part_bytes = m as usize * (k + shared as usize) * din * 4;
    let parts = [router_bytes, logits_bytes, gateup_bytes, down_bytes, part_bytes].map(|b| b.div_ceil(16) * 16);
    let bytes = parts.iter().sum::<usize>() as f64;
    let router = router_quant.map_or(String::new(), |q| format!(", {}-bit router", q.bits));
    let with = if shared { ", shared expert" } else { "" };
    let what = format!("{model} bits={bits}{router}{with} M={m} ({distinct:.1} distinct experts)");
    rows.push(Row::timed(format!("moe block {dtype}"), what.clone(), ms, bytes));
    // The block's own launch count: at one token the logits ride with gate/up, and the
    // partial sums with the down projection at every m.
    let launches: Vec<usize> = match m {
        1 => vec![parts[0], parts[1] + parts[2], parts[3] + parts[4]],
        _ => vec![parts[0], parts[1], parts[2], parts[3] + parts[4]],
    };
    rows.push(Row::timed(
        format!("read_stream yardstick {dtype}"),
        format!("{what}'s bytes in {} launches", launches.len()),
        read_stream_ms(dev, &launches),
        bytes,
    ));
    // The same bytes in two dependent launches (the router and its logits; the experts, their
    // partial sums and the combine): the floor of a block folded into two launches, which tells
    // how much of the gap to a target the launch count alone explains.
    let two = [parts[0] + parts[1], parts[2] + parts[3] + parts[4]];
    rows.push(Row::timed(
        format!("read_stream yardstick {dtype}"),
        format!("{what}'s bytes in 2 launches"),
        read_stream_ms(dev, &two),
        bytes,
    ));
    // The block's stages after the router one at a time (10 back to back, over the inputs in
    // turn), each beside read_stream over its bytes in one launch: which stage holds the block's
    // time beyond its yardstick (the router's: `bench_router`). `moe_gateup_batch`, the same
    // gate/up without the selection, beside them. The block's `moe_down_combine` is timed as
    // `moe_down_batch` and `moe_combine_batch`: alone its counts would need clearing between
    // launches, which the block's router launch does.
    if router_quant.is_none() && !shared {
        let act = dev.alloc::<f32>(m as usize * k * dff).unwrap();
        let part = dev.alloc::<f32>(m as usize * k * din).unwrap();
        let routed_ms = median_ms(dev, 30, 10, || unsafe {
            turn += 1;
            let i = turn % xs.len();
            let p = moe::block::RoutedPointers {
                x: xs[i].ptr(),
                logits: logits_of[i].ptr(),
                ids: ids_of[i].ptr(),
                scores: scores_of[i].ptr(),
                gate,
                up,
                act: act.ptr(),
                shared: None,
            };
            let args = shape.gateup_routed_args(m, p, moe::Activation::SwiGlu, true);
            moe::block::gateup_routed(dev, dtype, args, Stream::DEFAULT)
        });
        let gateup_ms = median_ms(dev, 30, 10, || unsafe {
            turn += 1;
            let i = turn % xs.len();
            let p = moe::GatedPointers {
                x: xs[i].ptr(),
                idx: ids_of[i].ptr(),
                gate,
                up,
                act: act.ptr(),
                status: status.ptr(),
            };
            moe::gateup_batch(dev, dtype, shape.gateup_batch_args(m, p, moe::Activation::SwiGlu), Stream::DEFAULT)
        });
        let down_ms = median_ms(dev, 30, 10, || unsafe {
            turn += 1;
            let i = turn % xs.len();
            let (ids, scores) = (ids_of[i].ptr(), scores_of[i].ptr());
            let args = shape.down_batch_args(m, ids, down, act.ptr(), scores, part.ptr(), status.ptr());
            moe::down_batch(dev, dtype, args, Stream::DEFAULT)
        });
        let combine_ms = median_ms(dev, 30, 10, || unsafe {
            let args = moe::MoeCombineBatchArgs { part: part.ptr(), out: out.ptr(), m, k: k as u32, din: din as u32 };
            moe::combine_batch(dev, dtype, args, Stream::DEFAULT)
        });
        for (name, ms, bytes) in [
            ("moe_gateup_routed", routed_ms, parts[1] + parts[2]),
            ("moe_gateup_batch", gateup_ms, parts[2]),
            ("moe_down_batch", down_ms, parts[3]),
            ("moe_combine_batch", combine_ms, parts[4]),
        ] {
            push_launch(dev, rows, name, dtype, &what, ms, bytes);
        }
    }
}

fn main() {
    let csv = std::env::args().any(|a| a == "--csv");
    let dev = Device::default_device().expect("a device");
    let info = dev.info().clone();
    if info.backend == BackendKind::Cpu {
        eprintln!(
            "the benchmarks need a GPU (found only the CPU emulator); set MLXCEL_AMDGPU_BACKEND=hip or build with --features cuda"
        );
        return;
    }
    let copy = copy_bandwidth(&dev);
    let empty = empty_launch_us(&dev);
    println!("device: {} ({}, {}), kernels: {:?}", info.name, info.backend, info.arch, info.kernels);
    println!(
        "copy bandwidth (device to device, read + write): {:.1} GB/s; empty kernel launch: {:.2} us\n",
        copy / 1e9,
        empty
    );

    // MLXCEL_AMDGPU_BENCH=xielu,add3,mamba,moe picks groups (default: all).
    let groups = std::env::var("MLXCEL_AMDGPU_BENCH").unwrap_or_default();
    let known = ["xielu", "add3", "mamba", "moe"];
    for g in groups.split(',').filter(|g| !g.is_empty()) {
        assert!(known.contains(&g), "MLXCEL_AMDGPU_BENCH: unknown group {g:?}; known: {known:?}");
    }
    let wanted = |g: &str| groups.is_empty() || groups.split(',').any(|x| x == g);
    let mut rows = Vec::new();
    if wanted("xielu") {
        for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
            with_element!(dtype, T => bench_xielu::<T>(&dev, &mut rows, 1 << 26, false));
        }
        for dtype in [Dtype::Bf16, Dtype::F16] {
            with_element!(dtype, T => bench_xielu::<T>(&dev, &mut rows, 1 << 26, true));
        }
        for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
            with_element!(dtype, T => bench_xielu::<T>(&dev, &mut rows, 21504, false));
        }
    }
    if wanted("add3") {
        for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
            with_element!(dtype, T => bench_add3::<T>(&dev, &mut rows, 8192, 4096));
        }
        for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
            with_element!(dtype, T => bench_add3::<T>(&dev, &mut rows, 1, 4096));
        }
    }
    if wanted("mamba") {
        let shapes = mamba_shapes();
        for dtype in [Dtype::Bf16, Dtype::F16, Dtype::F32] {
            for &(dm, len) in &shapes {
                with_element!(dtype, T => bench_mamba::<T>(&dev, &mut rows, len, dm));
            }
        }
    }
    if wanted("moe") {
        for bits in [4, 8] {
            bench_moe::<bf16>(&dev, &mut rows, bits, copy);
        }
        // The activations' other dtypes, at 4 bits (the weights' bytes dominate).
        for dtype in [Dtype::F16, Dtype::F32] {
            with_element!(dtype, T => bench_moe::<T>(&dev, &mut rows, 4, copy));
        }
        for bits in [4, 8] {
            bench_gated::<bf16>(&dev, &mut rows, bits);
        }
        for m in [1, 8] {
            bench_router::<bf16>(&dev, &mut rows, m);
        }
        for bits in [4, 8] {
            for m in [1, 2, 4, 8] {
                let shape = MoeShape { n_experts: 128, k: 8, din: 2048, dff: 768, bits, group_size: 64 };
                bench_block::<bf16>(&dev, &mut rows, "Qwen3-30B-A3B", shape, m, None, false);
            }
        }
        // mlx-lm's quantized checkpoints hold the router at 8 bits, group 64.
        for m in [1, 8] {
            let shape = MoeShape { n_experts: 128, k: 8, din: 2048, dff: 768, bits: 4, group_size: 64 };
            let quant = RouterQuant { bits: 8, group_size: 64 };
            bench_block::<bf16>(&dev, &mut rows, "Qwen3-30B-A3B", shape, m, Some(quant), false);
        }
        // Qwen3-Next-80B-A3B's block with its shared expert, the router and the shared expert's
        // gate row at 8 bits, group 64, as mlx-lm's quantized checkpoints hold them.
        for m in [1, 8] {
            let shape = MoeShape { n_experts: 512, k: 10, din: 2048, dff: 512, bits: 4, group_size: 64 };
            let quant = RouterQuant { bits: 8, group_size: 64 };
            bench_block::<bf16>(&dev, &mut rows, "Qwen3-Next-80B-A3B", shape, m, Some(quant), true);
        }
    }

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
            println!(
                "{},{},{:.3},{},{:.1},{:.3},{:.2}",
                r.kernel,
                r.shape,
                r.micros,
                r.bytes,
                gbs / 1e9,
                gbs / copy,
                r.micros / empty
            );
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
