//! The host's HIP backend (`host/runtime/hip.rs`, unchanged) finds this stand-in
//! through ROCM_PATH, as it finds the real runtime, and runs the embedded gfx1151
//! code object's kernels on the interpreter.
use mlxcel_amdgpu::kernels::xielu::XieluParams;
use mlxcel_amdgpu::runtime::{ArgValue, LaunchDims};
use mlxcel_amdgpu::{BackendKind, Device, Dtype, Stream};
use std::path::PathBuf;
use std::sync::Once;

/// A ROCM_PATH-style prefix whose lib/ holds the built stand-in.
fn point_rocm_path_at_the_standin() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // target/<profile>/deps/<test>: cargo test leaves the cdylib in deps/,
        // cargo build also in target/<profile>/.
        let exe = std::env::current_exe().unwrap();
        let deps = exe.parent().unwrap();
        let lib = [deps.join("libamdhip64.so"), deps.parent().unwrap().join("libamdhip64.so")]
            .into_iter()
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("the stand-in cdylib libamdhip64.so is not in {}", deps.display()));
        let prefix = std::env::temp_dir().join(format!("hip-standin-{}", std::process::id()));
        let libdir: PathBuf = prefix.join("lib");
        std::fs::create_dir_all(&libdir).unwrap();
        std::fs::copy(&lib, libdir.join("libamdhip64.so")).unwrap();
        // SAFETY: set once, before any thread of this test reads the environment through hip.rs.
        unsafe {
            std::env::set_var("RDNA_SIM_COVERAGE", coverage_file());
            // Loads' registers hold poison until their s_waitcnt: a missing wait fails.
            std::env::set_var("RDNA_SIM_STRICT_WAIT", "1");
            std::env::set_var("ROCM_PATH", &prefix);
            std::env::remove_var("HIP_PATH");
        }
    });
}

fn coverage_file() -> PathBuf {
    std::env::temp_dir().join(format!("hip-standin-{}-coverage.txt", std::process::id()))
}

fn device() -> Device {
    point_rocm_path_at_the_standin();
    Device::hip(0).unwrap_or_else(|e| panic!("Device::hip(0) on the stand-in: {e}"))
}

#[test]
fn the_simulated_gfx1151_opens_with_its_code_object() {
    let d = device();
    let info = d.info();
    println!("{info:#?}");
    assert_eq!(info.backend, BackendKind::Hip);
    assert_eq!(info.arch, "gfx1151");
    assert_eq!(info.wavefront_size, 32);
    assert_eq!(info.compute_units, 40);
    assert_eq!(info.kernels.as_deref(), Ok("gfx1151"));
    for spec in mlxcel_amdgpu::kernels_device::entry::KERNELS {
        assert!(d.is_available(spec.name), "{}", spec.name);
    }
    // The second device, a gfx1100, takes the generic object.
    let d1 = Device::hip(1).unwrap();
    assert_eq!(d1.info().arch, "gfx1100");
    assert_eq!(d1.info().kernels.as_deref(), Ok("gfx11-generic"));
}

#[test]
fn memory_round_trips_and_events_keep_order() {
    let d = device();
    let data: Vec<u32> = (0..4099).map(|i| i * 3 + 1).collect();
    let mut buf = d.upload(&data).unwrap();
    assert_eq!(buf.download().unwrap(), data);
    buf.fill_bytes(0xab).unwrap();
    assert!(buf.download().unwrap().iter().all(|&v| v == 0xabab_abab));
    let mut copy = d.alloc::<u32>(4099).unwrap();
    d.copy(&mut copy, &buf, Stream::DEFAULT).unwrap();
    assert_eq!(copy.download().unwrap(), buf.download().unwrap());
    let ms = d.time(Stream::DEFAULT, || Ok(())).unwrap();
    assert!(ms >= 0.0);
}

#[test]
fn probe_through_hip_rs_equals_the_cpu_emulator() {
    use mlxcel_amdgpu::kernels_device::geometry::probe::{WORDS_PER_LANE, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
    let groups = 3u32;
    let words = (groups * WORKGROUP_SIZE) as usize * WORDS_PER_LANE;
    let dims =
        LaunchDims { grid: [groups, 1, 1], workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes: WORKGROUP_MEM_BYTES };
    let run_on = |dev: &Device| -> Vec<u32> {
        let k = dev.kernel("probe").unwrap();
        let mut out = dev.alloc::<u32>(words).unwrap();
        out.fill_bytes(0).unwrap();
        unsafe { dev.launch(&k, dims, &[ArgValue::Ptr(out.ptr())], Stream::DEFAULT) }.unwrap();
        dev.synchronize().unwrap();
        out.download().unwrap()
    };
    let got = run_on(&device());
    let want = run_on(&Device::cpu());
    assert_eq!(got, want);
    // The gfx1100 device runs the gfx11-generic object.
    let generic = Device::hip(1).unwrap();
    assert_eq!(run_on(&generic), want);
}

#[test]
fn xielu_through_hip_rs_equals_the_cpu_emulator_bit_for_bit() {
    let d = device();
    let cpu = Device::cpu();
    let xs: Vec<f32> =
        (0..1000).map(|i| (i as f32 - 500.0) * 0.031).chain([0.0, -0.0, 1e-40, -1e-40, 80.0, -100.0]).collect();
    for dtype in [Dtype::F32, Dtype::F16, Dtype::Bf16] {
        let bytes: Vec<u8> = match dtype {
            Dtype::F32 => xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Dtype::F16 => xs.iter().flat_map(|x| rdna_half(*x).to_le_bytes()).collect(),
            Dtype::Bf16 => xs.iter().flat_map(|x| ((x.to_bits() >> 16) as u16).to_le_bytes()).collect(),
        };
        let n = xs.len();
        let run_on = |dev: &Device| -> Vec<u8> {
            let x = dev.upload(&bytes).unwrap();
            let mut out = dev.alloc::<u8>(bytes.len()).unwrap();
            mlxcel_amdgpu::kernels::xielu::run(dev, dtype, &x, &mut out, n, XieluParams::APERTUS, Stream::DEFAULT)
                .unwrap_or_else(|e| panic!("{dtype:?} on {}: {e}", dev.info().name));
            out.download().unwrap()
        };
        assert_eq!(run_on(&d), run_on(&cpu), "{dtype:?}");
    }
}

/// f32 -> f16 bits, round to nearest even (for finite inputs in range here).
fn rdna_half(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let e = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let m = b & 0x7f_ffff;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = m | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let r = half + ((rem > mid || (rem == mid && half & 1 == 1)) as u32);
        return sign | r as u16;
    }
    let half = ((e as u32) << 10) | (m >> 13);
    let rem = m & 0x1fff;
    let r = half + ((rem > 0x1000 || (rem == 0x1000 && half & 1 == 1)) as u32);
    sign | r as u16
}

/// The library's self-test (every kernel against its reference) on the simulated
/// gfx1151. Prints the table; fails if any case fails. Ignored: the self-test
/// reduces its shapes only on the CPU backend (`reduced()` in host/selftest.rs)
/// and times 50 repetitions of the full-size MoE layer on a GPU backend, which
/// the interpreter does not finish in a useful time (a release run was stopped
/// after 13 minutes in the MoE cases; probe, xielu, add3_layer_norm and
/// mamba1_scan had run without a launch failure, their outcomes unknown since
/// the table prints at the end). The host would need to treat the simulated
/// device as reduced.
#[test]
#[ignore]
fn selftest_on_the_simulated_gfx1151() {
    let d = device();
    let outcomes = mlxcel_amdgpu::selftest::run(&d);
    let mut failed = Vec::new();
    for o in &outcomes {
        println!(
            "{:<18} {:<6} {:<28} {} {}",
            o.kernel,
            o.dtype.map(|t| format!("{t:?}")).unwrap_or_default(),
            o.shape,
            if o.passed { "PASS" } else { "FAIL" },
            o.result
        );
        if !o.passed {
            failed.push(format!("{} {:?}: {}", o.kernel, o.dtype, o.result));
        }
    }
    assert!(failed.is_empty(), "{} of {} cases failed:\n{}", failed.len(), outcomes.len(), failed.join("\n"));
}

/// The routed MoE forward (fc1_relu2, down, combine) on a small layer, through
/// hip.rs on the simulated gfx1151, against the same launch on the CPU emulator.
#[test]
fn moe_routed_forward_through_hip_rs_equals_the_cpu_emulator() {
    use mlxcel_amdgpu::kernels::moe::{self, MoeShape, QuantizedBuffers, RoutedBuffers};
    use mlxcel_amdgpu::reference;
    let d = device();
    let cpu = Device::cpu();
    for (dtype, bits) in [(Dtype::F32, 4), (Dtype::F16, 8), (Dtype::Bf16, 4)] {
        let (din, dff, e, k) = (128u32, 64u32, 4u32, 2u32);
        let shape = MoeShape { n_experts: e, k, din, dff, bits, group_size: 64 };
        let inp = reference::moe::moe_inputs(dtype, din as usize, dff as usize, e as usize, k as usize, bits, 64, 77);
        let run_on = |dev: &Device| -> Vec<u8> {
            let up = |v: &[f32], t: Dtype| dev.upload(&reference::to_le_bytes(t, v)).unwrap();
            let words = |q: &reference::moe::Quantized| {
                dev.upload(&q.words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()).unwrap()
            };
            let (w1, s1, b1) = (words(&inp.w1), up(&inp.w1.scales, dtype), up(&inp.w1.biases, dtype));
            let (w2, s2, b2) = (words(&inp.w2), up(&inp.w2.scales, dtype), up(&inp.w2.biases, dtype));
            let x = up(&inp.x, dtype);
            let idx = dev.upload(&inp.idx.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
            let scores = up(&inp.scores, Dtype::F32);
            let mut out = dev.alloc::<u8>(din as usize * dtype.size()).unwrap();
            let mut scratch = dev.alloc::<u8>(moe::scratch_bytes(k, din, dff)).unwrap();
            let mut status = dev.alloc::<u8>(4).unwrap();
            status.fill_bytes(0).unwrap();
            let bufs = RoutedBuffers {
                x: &x,
                idx: &idx,
                scores: &scores,
                w1: QuantizedBuffers { w: &w1, scales: &s1, biases: &b1 },
                w2: QuantizedBuffers { w: &w2, scales: &s2, biases: &b2 },
                out: &mut out,
                scratch: &mut scratch,
                status: Some(&mut status),
            };
            moe::run_routed_forward(dev, dtype, bufs, &shape, Stream::DEFAULT)
                .unwrap_or_else(|e| panic!("{dtype:?} {bits}-bit on {}: {e}", dev.info().name));
            let mut o = out.download().unwrap();
            o.extend(status.download().unwrap());
            o
        };
        assert_eq!(run_on(&d), run_on(&cpu), "{dtype:?} {bits}-bit");
    }
}

/// Which of the shipped gfx1151 object's distinct mnemonics the launches of this
/// process executed (every kernel family: probe, xielu, add3_layer_norm via the
/// self-test's kernels, mamba1_scan, MoE). Runs the cases itself, so the count
/// does not depend on the order of the other tests.
#[test]
fn coverage_of_the_gfx1151_object_through_hip() {
    probe_through_hip_rs_equals_the_cpu_emulator();
    xielu_through_hip_rs_equals_the_cpu_emulator_bit_for_bit();
    moe_routed_forward_through_hip_rs_equals_the_cpu_emulator();
    let listed: std::collections::BTreeSet<String> = std::fs::read_to_string(coverage_file())
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(arch, _)| arch.starts_with("gfx1151"))
        .map(|(_, m)| m.to_string())
        .collect();
    println!("executed through hip.rs on the simulated gfx1151: {} distinct mnemonics", listed.len());
    assert!(listed.len() >= 150, "{}", listed.len());
}
