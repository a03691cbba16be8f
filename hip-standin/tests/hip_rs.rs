//! The host's HIP backend (`host/runtime/hip.rs`, unchanged) finds this stand-in
//! through ROCM_PATH, as it finds the real runtime, and runs the embedded gfx1151
//! code object's kernels on the interpreter.
mod common;

use common::{coverage_file, device};
use mlxcel_amdgpu::kernels::xielu::XieluParams;
use mlxcel_amdgpu::runtime::LaunchDims;
use mlxcel_amdgpu::{BackendKind, Device, Dtype, Element, Stream};

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
fn too_much_workgroup_memory_is_refused_by_name() {
    use mlxcel_amdgpu::Error;
    use mlxcel_amdgpu::kernels_device::geometry::probe::{WORDS_PER_LANE, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
    let d = device();
    // The stand-in reports RDNA's 64 KiB (`sharedMemPerBlock`).
    assert_eq!(d.info().max_workgroup_mem_bytes, 64 * 1024);
    let k = d.kernel("probe").unwrap();
    let words = WORKGROUP_SIZE as usize * WORDS_PER_LANE;
    let out = d.upload(&vec![0xDEAD_BEEFu32; words]).unwrap();
    let args = mlxcel_amdgpu::kernels_device::entry::ProbeArgs { out: out.ptr() };
    let dims = LaunchDims { grid: [1, 1, 1], workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes: 64 * 1024 + 4 };
    match unsafe { d.launch(&k, dims, &args.values(), Stream::DEFAULT) } {
        Err(Error::Unavailable { kernel, reason }) => {
            assert_eq!(kernel, "probe");
            assert!(
                reason.contains("needs 65540 bytes of workgroup memory") && reason.contains("allows 65536"),
                "{reason}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    d.synchronize().unwrap();
    assert!(out.download().unwrap().iter().all(|&w| w == 0xDEAD_BEEF), "nothing was launched");
    let fits = LaunchDims { workgroup_mem_bytes: WORKGROUP_MEM_BYTES, ..dims };
    unsafe { d.launch(&k, fits, &args.values(), Stream::DEFAULT) }.unwrap();
    d.synchronize().unwrap();
    assert!(out.download().unwrap().iter().any(|&w| w != 0xDEAD_BEEF), "the probe ran");
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
        let args = mlxcel_amdgpu::kernels_device::entry::ProbeArgs { out: out.ptr() };
        unsafe { dev.launch(&k, dims, &args.values(), Stream::DEFAULT) }.unwrap();
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
        let n = xs.len();
        let got = mlxcel_amdgpu::with_element!(dtype, T => {
            let run_on = |dev: &Device| -> Vec<u32> {
                let x = dev.upload(&xs.iter().map(|&v| T::from_f32(v)).collect::<Vec<T>>()).unwrap();
                let mut out = dev.alloc::<T>(n).unwrap();
                mlxcel_amdgpu::kernels::xielu::run(dev, &x, &mut out, n, XieluParams::APERTUS, Stream::DEFAULT)
                    .unwrap_or_else(|e| panic!("{dtype:?} on {}: {e}", dev.info().name));
                out.download().unwrap().into_iter().map(Element::to_bits_u32).collect()
            };
            (run_on(&d), run_on(&cpu))
        });
        assert_eq!(got.0, got.1, "{dtype:?}");
    }
}

/// The routed MoE forward (fc1_relu2, down, combine) on a small layer, through
/// hip.rs on the simulated gfx1151, against the same launch on the CPU emulator.
#[test]
fn moe_routed_forward_through_hip_rs_equals_the_cpu_emulator() {
    use mlxcel_amdgpu::kernels::moe::{self, MoeShape};
    use mlxcel_amdgpu_testkit::fixtures::RoutedUpload;
    use mlxcel_amdgpu_testkit::reference;
    let d = device();
    let cpu = Device::cpu();
    for (dtype, bits) in [(Dtype::F32, 4), (Dtype::F16, 8), (Dtype::Bf16, 4)] {
        let (din, dff, e, k) = (128u32, 64u32, 4u32, 2u32);
        let shape = MoeShape { n_experts: e, k, din, dff, bits, group_size: 64 };
        let inp = reference::moe::moe_inputs(dtype, din as usize, dff as usize, e as usize, k as usize, bits, 64, 77);
        let (got, want) = mlxcel_amdgpu::with_element!(dtype, T => {
            let run_on = |dev: &Device| -> Vec<u32> {
                let inputs = RoutedUpload::<T>::new(dev, &inp).unwrap();
                let mut out = dev.alloc::<T>(din as usize).unwrap();
                let mut scratch = dev.alloc::<u8>(moe::scratch_bytes(k, din, dff).unwrap()).unwrap();
                let mut status = dev.alloc::<u32>(1).unwrap();
                status.fill_bytes(0).unwrap();
                let bufs = inputs.routed(&mut out, &mut scratch, Some(&mut status));
                moe::run_routed_forward(dev, bufs, &shape, Stream::DEFAULT)
                    .unwrap_or_else(|e| panic!("{dtype:?} {bits}-bit on {}: {e}", dev.info().name));
                let mut o: Vec<u32> = out.download().unwrap().into_iter().map(Element::to_bits_u32).collect();
                o.extend(status.download().unwrap());
                o
            };
            (run_on(&d), run_on(&cpu))
        });
        assert_eq!(got, want, "{dtype:?} {bits}-bit");
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
