//! The gfx1151 prediction: each kernel's time on a Radeon 8060S at the
//! consumers' decode and prefill shapes, from what the shipped gfx1151 code object
//! executes on the simulated device (rdna-sim behind the stand-in libamdhip64),
//! its VGPR use, and the bytes it must move. A model: nothing here has run on AMD
//! hardware.
//!
//! ```sh
//! cargo xtask predict-gfx1151      # builds the stand-in, runs this, prints the table
//! ```
//!
//! Per launch the stand-in appends to `RDNA_SIM_COUNTS` the executed
//! wave-instructions by class and the loads' accounting of memory latency
//! (rdna-sim's `exec::load_rounds`): the memory latencies its waves wait through
//! one after another, summed over the waves, and the distinct bytes of their
//! load requests. Decode shapes run as they are; prefill shapes are too long for
//! an interpreter, so each runs at two shorter lengths of the dimension that grows
//! (elements, rows, steps) in the same launch regime, and the counts are extended
//! linearly to the consumer's length (every kernel here does the same work per
//! element, row or step, plus a fixed part). The model, per launch:
//! - issue: every wave-instruction takes one cycle of its SIMD (no dual issue,
//!   no stalls), spread over `min(waves, SIMDs)` SIMDs at the clock below;
//! - memory: the bytes the contract makes the kernel read and write, once each
//!   (not the interpreter's per-lane byte counts, which count a value as often
//!   as lanes request it), at the measured bandwidth below;
//! - latency: the waves a CU holds at once (whole workgroups, as VGPRs and
//!   workgroup memory allow) each sit through their memory latencies in turn, so
//!   the launch takes the latencies summed over its waves, over the waves held
//!   at once on all CUs, times the DRAM latency. Equivalently: the request bytes
//!   over what the CUs keep in flight per latency (bytes in flight per CU), the
//!   figure Little's law sets against the bandwidth's need (bandwidth times
//!   latency). Every load's wait costs a full DRAM latency (cache hits are not
//!   modelled) and the latency does not grow under load;
//! - the prediction is the largest of the three, which names the bound; the
//!   latency is a range, so the verdict is given at both ends.
//!
//! Not modelled: launch overhead, caches, latency under load, clock behaviour.

use std::collections::HashMap;

use mlxcel_amdgpu::code_object::CodeObject;
use mlxcel_amdgpu::embedded;
use mlxcel_amdgpu::half::bf16;
use mlxcel_amdgpu::kernels::add3_layer_norm::{self, Add3Buffers};
use mlxcel_amdgpu::kernels::mamba1_scan::{self, ScanShape};
use mlxcel_amdgpu::kernels::moe::block::{self, BlockPointers};
use mlxcel_amdgpu::kernels::moe::router::{self, QuantRouterBuffers, RouterQuant, RouterShape};
use mlxcel_amdgpu::kernels::moe::{self, Activation, MoeShape, QuantizedPointers};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::kernels_device::geometry::xielu::TABLE_MIN_ELEMS_PER_WORKGROUP;
use mlxcel_amdgpu::{BackendKind, Device, DeviceBuffer, Element, Stream, with_element};
use mlxcel_amdgpu_testkit::fixtures::{RoutedUpload, ScanUpload};
use mlxcel_amdgpu_testkit::reference::data::NormalRng;
use mlxcel_amdgpu_testkit::reference::mamba::ScanInputs;
use mlxcel_amdgpu_testkit::reference::moe::moe_inputs;
use mlxcel_amdgpu_testkit::reference::{Dtype, data};

/// Radeon 8060S (gfx1151). CUs and clock: AMD's specification of the Radeon
/// 8060S (40 CUs, up to 2.9 GHz). SIMDs: two SIMD32 per RDNA 3.5 CU. VGPRs:
/// LLVM's gfx1151 target has `FeatureGFX11FullVGPRs`, 1536 wave32 VGPRs per SIMD
/// in granules of 24, at most 16 waves per SIMD; the `llc -mcpu=gfx1151` of this
/// project's toolchain reports occupancy 16 at 96 VGPRs, 12 at 97-120, 10 at
/// 121-144, 8 at 192 (checked for this model, docs/performance.md).
/// Bandwidth: 212 GB/s, the figure reported as measured on Strix Halo (256 GB/s
/// theoretical: 256-bit LPDDR5X-8000).
const CUS: f64 = 40.0;
const SIMDS: f64 = CUS * 2.0;
const CLOCK_HZ: f64 = 2.9e9;
const BYTES_PER_S: f64 = 212e9;
const VGPRS_PER_SIMD: u32 = 1536;
const VGPR_GRANULE: u32 = 24;
const MAX_WAVES_PER_SIMD: u32 = 16;
/// Workgroup memory per CU: 128 KiB per RDNA 3 workgroup processor of two CUs.
const LDS_PER_CU: u32 = 64 * 1024;
/// DRAM latency of a wave's load on gfx1151, low and high end: no published
/// measurement from the Strix Halo GPU was found, so the model gives its verdict
/// at both ends of a range (docs/performance.md says where each end comes from).
const LATENCY_NS: [f64; 2] = [150.0, 500.0];

/// Waves per SIMD that `vgprs` per lane allow.
fn occupancy(vgprs: u32) -> u32 {
    let rounded = vgprs.max(1).div_ceil(VGPR_GRANULE) * VGPR_GRANULE;
    (VGPRS_PER_SIMD / rounded).min(MAX_WAVES_PER_SIMD)
}

/// One launch's line of the counts file: the kernel, its waves, its counts by class.
#[derive(Clone, Debug)]
struct Launch {
    kernel: String,
    waves: f64,
    waves_per_workgroup: u32,
    dynamic_lds: u32,
    counts: HashMap<String, f64>,
}

impl Launch {
    fn instructions(&self) -> f64 {
        // Every class but the byte counts and the memory latencies.
        self.counts.iter().filter(|(k, _)| !k.ends_with("bytes") && !k.ends_with("rounds")).map(|(_, v)| v).sum()
    }

    /// `self + (other - self) * t`, class by class: the linear extension.
    fn extend(&self, other: &Launch, t: f64) -> Launch {
        let lerp = |a: f64, b: f64| a + (b - a) * t;
        let counts = self.counts.iter().map(|(k, &a)| (k.clone(), lerp(a, other.counts[k]))).collect();
        Launch { waves: lerp(self.waves, other.waves), counts, ..self.clone() }
    }
}

/// The counts file the stand-in appends to.
struct Counts {
    path: String,
}

impl Counts {
    /// The lines written since `from` lines, parsed.
    fn since(&self, from: usize) -> Vec<Launch> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let header: Vec<&str> = lines.iter().find(|l| l.starts_with('#')).expect("a header line").split('\t').collect();
        lines
            .iter()
            .filter(|l| !l.starts_with('#'))
            .skip(from)
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                let dims = |s: &str| s.split(',').map(|v| v.parse::<f64>().unwrap()).product::<f64>();
                let waves_per_workgroup = (dims(f[3]) / 32.0).ceil() as u32;
                let counts =
                    header[5..].iter().zip(&f[5..]).map(|(k, v)| (k.to_string(), v.parse().unwrap())).collect();
                Launch {
                    kernel: f[1].to_string(),
                    waves: dims(f[2]) * waves_per_workgroup as f64,
                    waves_per_workgroup,
                    dynamic_lds: f[4].parse().unwrap(),
                    counts,
                }
            })
            .collect()
    }

    fn len(&self) -> usize {
        std::fs::read_to_string(&self.path).unwrap_or_default().lines().filter(|l| !l.starts_with('#')).count()
    }

    /// The launches `run` makes.
    fn launches(&self, dev: &Device, run: impl FnOnce()) -> Vec<Launch> {
        let before = self.len();
        run();
        dev.synchronize().unwrap();
        self.since(before)
    }
}

/// A row of the prediction.
struct Row {
    kernel: String,
    shape: String,
    launch: Launch,
    bytes: f64,
    /// The block of launches this row is one of, which gets a total line after its last row.
    block: Option<String>,
}

fn upload<T: Element>(dev: &Device, v: &[f32]) -> DeviceBuffer<T> {
    dev.upload(&v.iter().map(|&e| T::from_f32(e)).collect::<Vec<T>>()).unwrap()
}

/// The launches of `run(size)` at the consumer's `size`, from `ladder` (one
/// size: run as is; two: extended linearly), each launch with its row.
fn measured(counts: &Counts, dev: &Device, ladder: &[usize], size: usize, mut run: impl FnMut(usize)) -> Vec<Launch> {
    let mut at: Vec<Vec<Launch>> = ladder.iter().map(|&s| counts.launches(dev, || run(s))).collect();
    if ladder.len() == 1 {
        return at.remove(0);
    }
    let t = (size - ladder[0]) as f64 / (ladder[1] - ladder[0]) as f64;
    at[0].iter().zip(&at[1]).map(|(a, b)| a.extend(b, t)).collect()
}

fn xielu_rows<T: Element>(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    let dtype = T::DTYPE;
    // The prefill ladder stays in the launcher's regime for 2^26: the table grid
    // (bf16 and f16, from TABLE_MIN_ELEMS_PER_WORKGROUP per workgroup up) or the chunk grid.
    let table_from = (TABLE_MIN_ELEMS_PER_WORKGROUP * CUS as u64) as usize;
    let long: &[usize] = if dtype == Dtype::F32 { &[1 << 18, 1 << 19] } else { &[table_from, table_from + (1 << 20)] };
    for (n, ladder) in [(21504usize, &[21504usize][..]), (1 << 26, long)] {
        let launches = measured(counts, dev, ladder, n, |m| {
            let x = upload::<T>(dev, &data::lcg_uniform(1, m));
            let mut out = dev.alloc::<T>(m).unwrap();
            xielu::run(dev, &x, &mut out, m, XieluParams::APERTUS, Stream::DEFAULT).unwrap();
        });
        let bytes = (2 * n * dtype.size()) as f64;
        rows.push(Row {
            kernel: format!("xielu {dtype}"),
            shape: format!("n={n}"),
            launch: launches[0].clone(),
            bytes,
            block: None,
        });
    }
}

fn add3_rows<T: Element>(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    let dtype = T::DTYPE;
    let d = 4096;
    for (r, ladder) in [(1usize, &[1usize][..]), (8192, &[8, 16])] {
        let launches = measured(counts, dev, ladder, r, |m| {
            let inp = data::add3_inputs(dtype, m, d, true, 9);
            let (a, b, x, w) = (
                upload::<T>(dev, &inp.a),
                upload::<T>(dev, &inp.b),
                upload::<T>(dev, &inp.x),
                upload::<T>(dev, &inp.w),
            );
            let bias = upload::<T>(dev, inp.bias.as_ref().unwrap());
            let (mut x_new, mut h) = (dev.alloc::<T>(m * d).unwrap(), dev.alloc::<T>(m * d).unwrap());
            let bufs = Add3Buffers { a: &a, b: &b, x: &x, w: &w, bias: Some(&bias), x_new: &mut x_new, h: &mut h };
            add3_layer_norm::run(dev, bufs, m as u32, d as u32, 1e-5, Stream::DEFAULT).unwrap();
        });
        let bytes = ((5 * r * d + 2 * d) * dtype.size()) as f64;
        let shape = format!("rows={r} D={d}");
        rows.push(Row {
            kernel: format!("add3_layer_norm {dtype}"),
            shape,
            launch: launches[0].clone(),
            bytes,
            block: None,
        });
    }
}

fn mamba_rows<T: Element>(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    let dtype = T::DTYPE;
    let n = 16;
    for (dm, len, ladder) in [
        (5120usize, 1usize, &[1usize][..]),
        (5120, 512, &[8, 16]),
        (5120, 2048, &[8, 16]),
        (8192, 1, &[1]),
        (8192, 512, &[8, 16]),
    ] {
        let launches = measured(counts, dev, ladder, len, |l| {
            let s = ScanInputs::generate(dtype, 1, l, dm, n, true);
            let inp = ScanUpload::<T>::new(dev, &s).unwrap();
            let state_in = upload::<f32>(dev, &s.state_in);
            let mut y = dev.alloc::<T>(l * dm).unwrap();
            let mut state_out = dev.alloc::<f32>(dm * n).unwrap();
            let bufs = inp.buffers(Some(&state_in), &mut y, &mut state_out);
            let shape = ScanShape { batch: 1, len: l as u32, dm: dm as u32, n: n as u32 };
            mamba1_scan::run::<T>(dev, bufs, shape, Stream::DEFAULT).unwrap();
        });
        let bytes = ((3 * len * dm + 2 * len * n + dm) * dtype.size() + 3 * dm * n * 4) as f64;
        let shape = format!("B=1 Dm={dm} N={n} L={len}");
        rows.push(Row {
            kernel: format!("mamba1_scan {dtype}"),
            shape,
            launch: launches[0].clone(),
            bytes,
            block: None,
        });
    }
}

fn moe_rows(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    type T = bf16;
    let dtype = Dtype::Bf16;
    for bits in [4, 8] {
        // Nemotron's shape with the six selected experts only: the work of a launch
        // does not depend on E.
        let shape = MoeShape { n_experts: 6, bits, ..MoeShape::NEMOTRON };
        let (k, din, dff, gs) = (shape.k as usize, shape.din as usize, shape.dff as usize, shape.group_size as usize);
        let inp = moe_inputs(dtype, din, dff, 6, k, bits, gs, 5);
        let launches = counts.launches(dev, || {
            let u = RoutedUpload::<T>::new(dev, &inp).unwrap();
            let mut out = dev.alloc::<T>(din).unwrap();
            let mut scratch = dev.alloc::<u8>(moe::scratch_bytes(shape.k, shape.din, shape.dff).unwrap()).unwrap();
            let mut status = dev.upload(&[0u32]).unwrap();
            let bufs = u.routed(&mut out, &mut scratch, Some(&mut status));
            moe::run_routed_forward::<T>(dev, bufs, &shape, Stream::DEFAULT).unwrap();
        });
        // Per launch: the selected experts' weights, scales and biases, and the
        // activations in and out (f32 between the launches).
        let weights = |r: usize, c: usize| (k * r * (c * bits as usize / 8 + 2 * dtype.size() * (c / gs))) as f64;
        let bytes = [
            weights(dff, din) + (din * dtype.size() + k * dff * 4) as f64,
            weights(din, dff) + (k * dff * 4 + k * din * 4) as f64,
            (k * din * 4 + din * dtype.size()) as f64,
        ];
        assert_eq!(launches.len(), 3, "the routed forward is three launches");
        for (l, b) in launches.into_iter().zip(bytes) {
            let kernel = format!("{} {dtype}", l.kernel.trim_end_matches("_bf16"));
            rows.push(Row { kernel, shape: format!("Nemotron bits={bits}"), launch: l, bytes: b, block: None });
        }
    }
}

/// The distinct values of `ids`.
fn distinct(ids: &[u32]) -> usize {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids.len()
}

/// A bf16 launch's kernel as the rows name it: `moe_down bf16` for `moe_down_bf16`, and
/// `moe_topk` as it is (one symbol, f32 logits).
fn bf16_kernel_name(launch: &Launch) -> String {
    match launch.kernel.strip_suffix("_bf16") {
        Some(base) => format!("{base} {}", Dtype::Bf16),
        None => launch.kernel.clone(),
    }
}

/// Qwen3-30B-A3B's whole routed block for `m` tokens (E 128, K 8, Din 2048, Dff 768,
/// group 64, bf16, renormalized, SwiGLU; `moe::block::block`: `moe_router_logits`,
/// `moe_topk` and `moe_gateup_batch` (in one launch at one token), `moe_down_combine`), each
/// row with the bytes of the distinct experts the router chose, each read once.
fn block_rows(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    type T = bf16;
    let dtype = Dtype::Bf16;
    // 8 bits at one token and eight only: the interpreter's time grows with the slots.
    for (bits, tokens) in [(4u32, &[1u32, 2, 4, 8][..]), (8, &[1, 8])] {
        let shape = MoeShape { n_experts: 128, k: 8, din: 2048, dff: 768, bits, group_size: 64 };
        let (e, k, din, dff, gs) = (128usize, 8usize, 2048usize, 768usize, 64usize);
        let stack = |r: usize, c: usize, seed: u64| random_stack(dev, e, r, c, (bits, gs), seed);
        let (gate, up, down) = (stack(dff, din, 61), stack(dff, din, 62), stack(din, dff, 63));
        let wr = upload::<T>(dev, &data::normal(dtype, 64, e * din, 0.05));
        for &m in tokens {
            let mu = m as usize;
            let x = upload::<T>(dev, &data::normal(dtype, 70 + m as u64, mu * din, 1.0));
            // The experts the block will choose: its router launches are these, bit for bit.
            let rshape = RouterShape { m, n_experts: 128, din: din as u32, k: k as u32 };
            let mut logits = dev.alloc::<f32>(mu * e).unwrap();
            let (mut ids, mut scores) = (dev.alloc::<u32>(mu * k).unwrap(), dev.alloc::<f32>(mu * k).unwrap());
            router::run_router_logits::<T>(dev, &x, &wr, &mut logits, &rshape, Stream::DEFAULT).unwrap();
            router::run_topk(dev, &logits, &mut ids, &mut scores, &rshape, true, Stream::DEFAULT).unwrap();
            let chosen = distinct(&ids.download().unwrap());

            let scratch = dev.alloc::<u8>(block::block_scratch_bytes(m, &shape).unwrap()).unwrap();
            let out = dev.alloc::<T>(mu * din).unwrap();
            let status = dev.upload(&[0u32]).unwrap();
            let p = BlockPointers {
                x: x.ptr(),
                router: block::RouterWeights::Dense(wr.ptr()),
                gate: pointers(&gate),
                up: pointers(&up),
                down: pointers(&down),
                shared: None,
                out: out.ptr(),
                scratch: scratch.ptr(),
                scratch_len: scratch.len(),
                status: status.ptr(),
            };
            let launches = counts.launches(dev, || {
                // SAFETY: every buffer above holds its shape, the scratch its size.
                unsafe { block::block(dev, dtype, p, &shape, m, Activation::SwiGlu, true, Stream::DEFAULT) }.unwrap();
            });
            assert_eq!(status.download().unwrap()[0], 0, "every chosen expert id is in range");

            let size = dtype.size();
            let weights = |r: usize, c: usize| (chosen * r * (c * bits as usize / 8 + 2 * size * (c / gs))) as f64;
            let bytes = block_bytes(
                m,
                ((e + mu) * din * size + mu * e * 4) as f64,
                (mu * e * 4 + 2 * mu * k * 4) as f64,
                2.0 * weights(dff, din) + (mu * din * size + mu * k * dff * 4) as f64,
                weights(din, dff) + (mu * k * dff * 4 + mu * k * din * 4) as f64,
                (mu * k * din * 4 + mu * din * size) as f64,
            );
            assert_eq!(launches.len(), bytes.len(), "the block is three launches at one token, four from two");
            let label = format!("Qwen3-30B-A3B bits={bits} M={m} ({chosen} experts)");
            for (l, b) in launches.into_iter().zip(bytes) {
                let kernel = bf16_kernel_name(&l);
                rows.push(Row { kernel, shape: label.clone(), launch: l, bytes: b, block: Some(label.clone()) });
            }
        }
    }
}

/// The bytes of each of the block's launches from those of its five stages (the router, the
/// top-k, gate/up, down, combine): at one token the top-k rides in the gate/up launch, and the
/// combine always rides in the down launch.
fn block_bytes(m: u32, router: f64, topk: f64, gateup: f64, down: f64, combine: f64) -> Vec<f64> {
    match m {
        1 => vec![router, topk + gateup, down + combine],
        _ => vec![router, topk, gateup, down + combine],
    }
}

/// A quantized matrix's buffers: codes, scales and biases.
type Stack = (DeviceBuffer<u32>, DeviceBuffer<bf16>, DeviceBuffer<bf16>);

/// `e` experts of `rows x cols` at `(bits, group_size)`, random words and scales: the kernels do
/// the same work on any values, and quantizing hundreds of experts on the host would take longer
/// than the run.
fn random_stack(dev: &Device, e: usize, rows: usize, cols: usize, (bits, gs): (u32, usize), seed: u64) -> Stack {
    let mut rng = NormalRng::new(seed);
    let words: Vec<u32> = (0..e * rows * cols * bits as usize / 32).map(|_| rng.next_u64() as u32).collect();
    let mut unit =
        |n: usize, lo: f32, span: f32| -> Vec<f32> { (0..n).map(|_| lo + span * rng.next_uniform() as f32).collect() };
    let groups = e * rows * cols / gs;
    let (scales, biases) = (unit(groups, 1e-3, 1e-2), unit(groups, -0.01, 0.02));
    (dev.upload(&words).unwrap(), upload::<bf16>(dev, &scales), upload::<bf16>(dev, &biases))
}

fn pointers((w, s, b): &Stack) -> QuantizedPointers {
    QuantizedPointers { w: w.ptr(), scales: s.ptr(), biases: b.ptr() }
}

/// Qwen3-Next-80B-A3B's whole block with its shared expert for one and eight tokens (E 512, K
/// 10, Din 2048, Dff 512 for the routed and the shared expert, 4 bits, group 64, the router and
/// the gate row at 8 bits, group 64, as mlx-lm's quantized checkpoints hold them): the same
/// launches with one more slot a token, each row with the bytes of the distinct chosen experts
/// and the shared expert, each read once.
fn shared_block_rows(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    type T = bf16;
    let dtype = Dtype::Bf16;
    let (e, k, din, dff, gs, bits) = (512usize, 10usize, 2048usize, 512usize, 64usize, 4u32);
    let shape = MoeShape { n_experts: e as u32, k: k as u32, din: din as u32, dff: dff as u32, bits, group_size: 64 };
    let quant = RouterQuant { bits: 8, group_size: 64 };
    let stack = |n: usize, r: usize, c: usize, seed: u64| random_stack(dev, n, r, c, (bits, gs), seed);
    let (gate, up, down) = (stack(e, dff, din, 81), stack(e, dff, din, 82), stack(e, din, dff, 83));
    let shared = [stack(1, dff, din, 84), stack(1, dff, din, 85), stack(1, din, dff, 86)];
    let (router, gate_row) = (random_stack(dev, e, 1, din, (8, 64), 87), random_stack(dev, 1, 1, din, (8, 64), 88));
    for m in [1u32, 8] {
        let mu = m as usize;
        let x = upload::<T>(dev, &data::normal(dtype, 90 + m as u64, mu * din, 1.0));
        // The routed experts the block will choose: its router launches are these, bit for bit.
        let rshape = RouterShape { m, n_experts: e as u32, din: din as u32, k: k as u32 };
        let mut logits = dev.alloc::<f32>(mu * e).unwrap();
        let (mut ids, mut scores) = (dev.alloc::<u32>(mu * k).unwrap(), dev.alloc::<f32>(mu * k).unwrap());
        let w = QuantRouterBuffers { wq: &router.0, sq: &router.1, bq: &router.2 };
        router::run_router_logits_q::<T>(dev, &x, w, quant, &mut logits, &rshape, Stream::DEFAULT).unwrap();
        router::run_topk(dev, &logits, &mut ids, &mut scores, &rshape, true, Stream::DEFAULT).unwrap();
        let chosen = distinct(&ids.download().unwrap());

        let scratch = dev.alloc::<u8>(block::block_shared_scratch_bytes(m, &shape).unwrap()).unwrap();
        let out = dev.alloc::<T>(mu * din).unwrap();
        let status = dev.upload(&[0u32]).unwrap();
        let p = BlockPointers {
            x: x.ptr(),
            router: block::RouterWeights::Quantized { w: pointers(&router), quant },
            gate: pointers(&gate),
            up: pointers(&up),
            down: pointers(&down),
            shared: Some(block::SharedExpertPointers {
                expert_gate: block::ExpertGate::Quantized(pointers(&gate_row)),
                gate: pointers(&shared[0]),
                up: pointers(&shared[1]),
                down: pointers(&shared[2]),
            }),
            out: out.ptr(),
            scratch: scratch.ptr(),
            scratch_len: scratch.len(),
            status: status.ptr(),
        };
        let launches = counts.launches(dev, || {
            // SAFETY: every buffer above holds its shape, the scratch its size.
            unsafe { block::block(dev, dtype, p, &shape, m, Activation::SwiGlu, true, Stream::DEFAULT) }.unwrap();
        });
        assert_eq!(status.download().unwrap()[0], 0, "every chosen expert id is in range");

        let size = dtype.size();
        let (slots, experts) = (k + 1, chosen + 1);
        let weights = |r: usize, c: usize| (experts * r * (c * bits as usize / 8 + 2 * size * (c / gs))) as f64;
        let router_row = din + 2 * size * din / 64;
        let bytes = block_bytes(
            m,
            (mu * din * size + (e + 1) * router_row + mu * (e + 1) * 4) as f64,
            (mu * (e + 1) * 4 + 2 * mu * slots * 4) as f64,
            2.0 * weights(dff, din) + (mu * din * size + mu * slots * dff * 4) as f64,
            weights(din, dff) + (mu * slots * dff * 4 + mu * slots * din * 4) as f64,
            (mu * slots * din * 4 + mu * din * size) as f64,
        );
        assert_eq!(launches.len(), bytes.len(), "the block is three launches at one token, four from two");
        let label = format!("Qwen3-Next-80B-A3B with its shared expert, 8-bit router, M={m} ({chosen} experts)");
        for (l, b) in launches.into_iter().zip(bytes) {
            let kernel = bf16_kernel_name(&l);
            rows.push(Row { kernel, shape: label.clone(), launch: l, bytes: b, block: Some(label.clone()) });
        }
    }
}

/// The router at Qwen3-Next-80B-A3B's shape (E 512, Din 2048, K 10), bf16, for one
/// and eight tokens: `moe_router_logits`, then `moe_topk` (Qwen3-30B-A3B's router is
/// in [`block_rows`]).
fn router_rows(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    type T = bf16;
    let dtype = Dtype::Bf16;
    for (model, n_experts, din, k) in [("Qwen3-Next-80B-A3B", 512usize, 2048usize, 10usize)] {
        for m in [1usize, 8] {
            let shape = RouterShape { m: m as u32, n_experts: n_experts as u32, din: din as u32, k: k as u32 };
            let launches = counts.launches(dev, || {
                let x = upload::<T>(dev, &data::normal(dtype, 3, m * din, 1.0));
                let wr = upload::<T>(dev, &data::normal(dtype, 4, n_experts * din, 0.05));
                let mut logits = dev.alloc::<f32>(m * n_experts).unwrap();
                let mut ids = dev.alloc::<u32>(m * k).unwrap();
                let mut scores = dev.alloc::<f32>(m * k).unwrap();
                router::run_router_logits::<T>(dev, &x, &wr, &mut logits, &shape, Stream::DEFAULT).unwrap();
                router::run_topk(dev, &logits, &mut ids, &mut scores, &shape, true, Stream::DEFAULT).unwrap();
            });
            let bytes = [
                ((n_experts + m) * din * dtype.size() + m * n_experts * 4) as f64,
                (m * n_experts * 4 + 2 * m * k * 4) as f64,
            ];
            assert_eq!(launches.len(), 2, "the router is two launches");
            for (l, b) in launches.into_iter().zip(bytes) {
                let kernel = bf16_kernel_name(&l);
                rows.push(Row { kernel, shape: format!("{model} M={m}"), launch: l, bytes: b, block: None });
            }
        }
    }
}

/// Qwen3-30B-A3B's router as mlx-lm's quantized checkpoints hold it (8 bits, group 64), for
/// one and eight tokens: `moe_router_logits_q`, then `moe_topk`. With it in place of
/// [`block_rows`]' first launch, the block reads fewer router bytes.
fn quantized_router_rows(counts: &Counts, dev: &Device, rows: &mut Vec<Row>) {
    type T = bf16;
    let dtype = Dtype::Bf16;
    let (n_experts, din, k, quant) = (128usize, 2048usize, 8usize, RouterQuant { bits: 8, group_size: 64 });
    let (words, groups) = (n_experts * din * quant.bits as usize / 32, n_experts * din / quant.group_size as usize);
    for m in [1usize, 8] {
        let shape = RouterShape { m: m as u32, n_experts: n_experts as u32, din: din as u32, k: k as u32 };
        let launches = counts.launches(dev, || {
            let x = upload::<T>(dev, &data::normal(dtype, 5, m * din, 1.0));
            // Random codes and small scales: the kernel does the same work on any values.
            let mut rng = NormalRng::new(6);
            let wq = dev.upload(&(0..words).map(|_| rng.next_u64() as u32).collect::<Vec<_>>()).unwrap();
            let sq = upload::<T>(dev, &data::normal(dtype, 7, groups, 1e-3));
            let bq = upload::<T>(dev, &data::normal(dtype, 8, groups, 1e-2));
            let mut logits = dev.alloc::<f32>(m * n_experts).unwrap();
            let mut ids = dev.alloc::<u32>(m * k).unwrap();
            let mut scores = dev.alloc::<f32>(m * k).unwrap();
            let w = QuantRouterBuffers { wq: &wq, sq: &sq, bq: &bq };
            router::run_router_logits_q::<T>(dev, &x, w, quant, &mut logits, &shape, Stream::DEFAULT).unwrap();
            router::run_topk(dev, &logits, &mut ids, &mut scores, &shape, true, Stream::DEFAULT).unwrap();
        });
        let bytes = [
            (m * din * dtype.size() + words * 4 + 2 * groups * dtype.size() + m * n_experts * 4) as f64,
            (m * n_experts * 4 + 2 * m * k * 4) as f64,
        ];
        assert_eq!(launches.len(), 2, "the router is two launches");
        for (l, b) in launches.into_iter().zip(bytes) {
            let kernel = bf16_kernel_name(&l);
            let shape = format!("Qwen3-30B-A3B, 8-bit router, M={m}");
            rows.push(Row { kernel, shape, launch: l, bytes: b, block: None });
        }
    }
}

fn main() {
    let Ok(path) = std::env::var("RDNA_SIM_COUNTS") else {
        eprintln!("set RDNA_SIM_COUNTS and run on the simulated gfx1151 (cargo xtask predict-gfx1151)");
        std::process::exit(2);
    };
    let dev = Device::default_device().expect("a device");
    let info = dev.info().clone();
    if info.backend != BackendKind::Hip || info.arch != "gfx1151" || !info.name.contains("rdna-sim") {
        eprintln!("this needs the simulated gfx1151 (found {} {} {})", info.backend, info.name, info.arch);
        std::process::exit(2);
    }
    let object = embedded::AMDGPU_CODE_OBJECTS.iter().find(|o| o.processor == "gfx1151").expect("a gfx1151 object");
    let object = CodeObject::parse(object.bytes).expect("the embedded gfx1151 object parses");
    let counts = Counts { path };
    let mut rows = Vec::new();
    for dtype in Dtype::ALL {
        with_element!(dtype, T => xielu_rows::<T>(&counts, &dev, &mut rows));
        with_element!(dtype, T => add3_rows::<T>(&counts, &dev, &mut rows));
        with_element!(dtype, T => mamba_rows::<T>(&counts, &dev, &mut rows));
    }
    moe_rows(&counts, &dev, &mut rows);
    block_rows(&counts, &dev, &mut rows);
    shared_block_rows(&counts, &dev, &mut rows);
    router_rows(&counts, &dev, &mut rows);
    quantized_router_rows(&counts, &dev, &mut rows);

    println!(
        "Predicted on gfx1151 (Radeon 8060S: {CUS} CUs, {SIMDS} SIMD32, {} GHz, {} GB/s, DRAM latency {} to {} ns), from {}:",
        CLOCK_HZ / 1e9,
        BYTES_PER_S / 1e9,
        LATENCY_NS[0],
        LATENCY_NS[1],
        info.name
    );
    println!();
    println!(
        "{} GB/s needs {:.0} to {:.0} bytes in flight per CU (Little's law at {} and {} ns). A model, not a measurement.",
        BYTES_PER_S / 1e9,
        needed_in_flight_per_cu(LATENCY_NS[0]),
        needed_in_flight_per_cu(LATENCY_NS[1]),
        LATENCY_NS[0],
        LATENCY_NS[1]
    );
    println!();
    println!(
        "| kernel | shape | VGPRs | waves/SIMD | waves/CU (fit) | waves/CU (held) | waves | wave-instructions | issue (us) | bytes | memory (us) \
         | latencies/wave | bytes in flight/wave | bytes in flight/CU | latency (us) | predicted (us) | bound |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut total: Option<Total> = None;
    for (i, r) in rows.iter().enumerate() {
        let l = &r.launch;
        let k = object.kernel(&l.kernel);
        let vgprs = k.map_or(0, |k| k.vgpr_count);
        let lds = k.map_or(0, |k| k.group_segment_fixed_size) + l.dynamic_lds;
        let resident = resident_waves_per_cu(vgprs, l.waves_per_workgroup, lds);
        let concurrent = l.waves.min(resident as f64 * CUS);
        let instr = l.instructions();
        let issue = instr / (l.waves.min(SIMDS) * CLOCK_HZ) * 1e6;
        let memory = r.bytes / BYTES_PER_S * 1e6;
        let rounds = l.counts["vmem_load_rounds"];
        let request_bytes = l.counts["vmem_load_request_bytes"];
        let in_flight_per_wave = if rounds > 0.0 { request_bytes / rounds } else { 0.0 };
        let in_flight_per_cu = in_flight_per_wave * concurrent / CUS;
        let at = |latency_ns: f64| {
            let latency = rounds / concurrent * latency_ns * 1e-3;
            Verdict::of(issue, memory, latency)
        };
        let (low, high) = (at(LATENCY_NS[0]), at(LATENCY_NS[1]));
        println!(
            "| {} | {} | {vgprs} | {} | {resident} | {:.1} | {:.0} | {:.3e} | {issue:.2} | {:.3e} | {memory:.2} \
             | {:.1} | {in_flight_per_wave:.0} | {in_flight_per_cu:.0} | {:.2} / {:.2} | {:.2} / {:.2} | {} |",
            r.kernel,
            r.shape,
            occupancy(vgprs),
            concurrent / CUS,
            l.waves,
            instr,
            r.bytes,
            rounds / l.waves,
            low.latency,
            high.latency,
            low.predicted(),
            high.predicted(),
            Verdict::both(&low, &high),
        );
        let Some(block) = &r.block else { continue };
        let t = total.get_or_insert_with(Total::default);
        t.add(l.waves, instr, r.bytes, [&low, &high]);
        if rows.get(i + 1).and_then(|n| n.block.as_ref()) != Some(block) {
            total.take().unwrap().print(block);
        }
    }
}

/// The sums over a block's launches, which run one after another.
#[derive(Default)]
struct Total {
    launches: usize,
    waves: f64,
    instructions: f64,
    bytes: f64,
    issue: f64,
    memory: f64,
    /// At the low and the high latency: the latency bounds, the predicted
    /// times, and the part of those in memory-bound launches.
    latency: [f64; 2],
    predicted: [f64; 2],
    memory_bound: [f64; 2],
}

impl Total {
    fn add(&mut self, waves: f64, instructions: f64, bytes: f64, at: [&Verdict; 2]) {
        self.launches += 1;
        self.waves += waves;
        self.instructions += instructions;
        self.bytes += bytes;
        self.issue += at[0].issue;
        self.memory += at[0].memory;
        for (i, v) in at.iter().enumerate() {
            self.latency[i] += v.latency;
            self.predicted[i] += v.predicted();
            if v.bound() == "memory" {
                self.memory_bound[i] += v.predicted();
            }
        }
    }

    /// The total line: the sums, and the share of the predicted time that
    /// memory-bound launches take at each end of the latency range.
    fn print(&self, block: &str) {
        let share = |i: usize| 100.0 * self.memory_bound[i] / self.predicted[i];
        println!(
            "| **block total** ({} launches) | {block} | | | | | {:.0} | {:.3e} | {:.2} | {:.3e} | {:.2} | | | \
             | {:.2} / {:.2} | **{:.2} / {:.2}** | memory-bound launches {:.0}% / {:.0}% of it |",
            self.launches,
            self.waves,
            self.instructions,
            self.issue,
            self.bytes,
            self.memory,
            self.latency[0],
            self.latency[1],
            self.predicted[0],
            self.predicted[1],
            share(0),
            share(1),
        );
    }
}

/// Bytes in flight per CU that [`BYTES_PER_S`] needs at a DRAM latency of
/// `latency_ns` (Little's law: bandwidth times latency, over the CUs).
fn needed_in_flight_per_cu(latency_ns: f64) -> f64 {
    BYTES_PER_S * latency_ns * 1e-9 / CUS
}

/// Waves a CU holds at once: whole workgroups, as many as its two SIMDs' VGPRs
/// ([`occupancy`]) and its workgroup memory allow.
fn resident_waves_per_cu(vgprs: u32, waves_per_workgroup: u32, lds_per_workgroup: u32) -> u32 {
    let by_vgprs = 2 * occupancy(vgprs) / waves_per_workgroup;
    let by_lds = LDS_PER_CU.checked_div(lds_per_workgroup).unwrap_or(u32::MAX);
    by_vgprs.min(by_lds).max(1) * waves_per_workgroup
}

/// One launch's times (us) at one DRAM latency, and which of them bounds it.
struct Verdict {
    issue: f64,
    memory: f64,
    latency: f64,
}

impl Verdict {
    fn of(issue: f64, memory: f64, latency: f64) -> Verdict {
        Verdict { issue, memory, latency }
    }

    fn predicted(&self) -> f64 {
        self.issue.max(self.memory).max(self.latency)
    }

    /// The bound, and for a latency bound its factor over the next largest time.
    fn bound(&self) -> String {
        let others = self.issue.max(self.memory);
        if self.latency > others {
            format!("latency {:.1}x", self.latency / others)
        } else if self.memory >= self.issue {
            "memory".into()
        } else {
            "issue".into()
        }
    }

    /// The bound at both ends of the latency range, once where they agree.
    fn both(low: &Verdict, high: &Verdict) -> String {
        let (a, b) = (low.bound(), high.bound());
        if a == b { a } else { format!("{a} / {b}") }
    }
}
