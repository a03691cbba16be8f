//! Availability predicates and launches use one lookup, so they cannot disagree:
//! checked for every kernel and dtype, on every backend present, through the
//! Rust API; and a wave64 device makes every predicate false, with a reason,
//! while its launches fail before touching memory.

mod common;

use mlxcel_amdgpu::kernels::{self, add3_layer_norm, mamba1_scan, moe, xielu};
use mlxcel_amdgpu::kernels_device::entry::KERNELS;
use mlxcel_amdgpu::{Device, Error, Stream};
use mlxcel_amdgpu_testkit::reference::Dtype;

/// Every backend present that can run the kernels (the CPU emulator always),
/// as tests/common opens them; a skipped HIP or CUDA backend is printed with its
/// reason, and fails the test where `MLXCEL_AMDGPU_EXPECT_HIP` or
/// `MLXCEL_AMDGPU_EXPECT_CUDA` is set.
fn devices() -> Vec<Device> {
    let mut out = Vec::new();
    for b in common::backends() {
        match &b.device {
            Ok(d) => out.push(d.clone()),
            Err(why) => {
                if let Some(env) = b.expect_env {
                    assert!(
                        std::env::var_os(env).is_none(),
                        "{env} is set but the {} backend was skipped: {why}",
                        b.kind
                    );
                }
                eprintln!("[backend] {}: skipped: {why}", b.kind);
            }
        }
    }
    out
}

const BASES: [&str; 7] =
    ["xielu", "add3_layer_norm", "add3_layer_norm_d4096", "mamba1_scan", "moe_fc1_relu2", "moe_down", "moe_combine"];

#[test]
fn every_kernel_and_dtype_is_exported_and_available_on_every_backend() {
    for dev in devices() {
        if dev.info().kernels.is_err() {
            continue; // reported by devices(); nothing can be available
        }
        for base in BASES {
            for dtype in Dtype::ALL {
                let name = kernels::symbol(base, dtype);
                assert!(KERNELS.iter().any(|k| k.name == name), "{name} is not exported by the device crate");
                let lookup = dev.kernel(&name);
                assert_eq!(dev.is_available(&name), lookup.is_ok(), "{name} on {}", dev.backend());
                assert!(lookup.is_ok(), "{name} unavailable on {}: {:?}", dev.backend(), lookup.err());
            }
        }
        for dtype in Dtype::ALL {
            assert!(xielu::available(&dev, dtype) && add3_layer_norm::available(&dev, dtype));
            assert!(mamba1_scan::available(&dev, dtype) && moe::available(&dev, dtype));
        }
    }
}

#[test]
fn a_wave64_device_has_no_kernels_and_launches_touch_nothing() {
    let dev = Device::cpu_with_wavefront(64);
    for base in BASES {
        for dtype in Dtype::ALL {
            let name = kernels::symbol(base, dtype);
            assert!(!dev.is_available(&name), "{name} must be unavailable on wave64");
            match dev.kernel(&name) {
                Err(Error::Unavailable { kernel, reason }) => {
                    assert_eq!(kernel, name);
                    assert!(reason.contains("64-lane waves") && reason.contains("32-lane"), "{reason}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }
    for dtype in Dtype::ALL {
        assert!(!xielu::available(&dev, dtype) && !add3_layer_norm::available(&dev, dtype));
        assert!(!mamba1_scan::available(&dev, dtype) && !moe::available(&dev, dtype));
    }
    // The launch takes the same lookup first: it fails as unavailable, before it
    // could touch the (deliberately invalid) pointers.
    let err = unsafe {
        xielu::launch(&dev, Dtype::Bf16, xielu::args(0x10, 0x10, 1 << 20, xielu::XieluParams::APERTUS), Stream::DEFAULT)
    }
    .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let p = add3_layer_norm::Add3Pointers { a: 0x10, b: 0x10, x: 0x10, w: 0x10, bias: 0, x_new: 0x10, h: 0x10 };
    let err =
        unsafe { add3_layer_norm::launch(&dev, Dtype::F16, add3_layer_norm::args(p, 4, 4096, 1e-5), Stream::DEFAULT) }
            .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
}

#[test]
fn an_unknown_kernel_is_unavailable_with_a_reason() {
    let dev = Device::cpu();
    let err = dev.kernel("xielu_f64").unwrap_err();
    assert_eq!(err.to_string(), "kernel xielu_f64 is not available: no kernel of that name exists in this library");
}

/// A device whose workgroups get less workgroup memory than some kernel's
/// launches ask for has that kernel unavailable, with both numbers, so that
/// no launch after a true predicate is refused for it; the others stay.
#[test]
fn too_little_workgroup_memory_makes_exactly_those_kernels_unavailable() {
    let dev = Device::cpu_with_workgroup_mem(48 * 1024);
    for name in ["xielu_f16", "moe_fc1_relu2_bf16", "moe_down_f32"] {
        match dev.kernel(name) {
            Err(Error::Unavailable { kernel, reason }) => {
                assert_eq!(kernel, name);
                assert!(reason.contains("workgroup memory") && reason.contains("allows 49152"), "{reason}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    for name in ["xielu_f32", "xielu_bf16", "add3_layer_norm_f16", "add3_layer_norm_d4096_bf16", "mamba1_scan_bf16"] {
        assert!(dev.is_available(name), "{name}");
    }
    assert!(!xielu::available(&dev, Dtype::F16) && xielu::available(&dev, Dtype::Bf16));
    assert!(!moe::available(&dev, Dtype::Bf16));
    // The launch takes the same lookup: unavailable before the (invalid) pointers are touched.
    let err = unsafe {
        xielu::launch(&dev, Dtype::F16, xielu::args(0x10, 0x10, 1 << 20, xielu::XieluParams::APERTUS), Stream::DEFAULT)
    }
    .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    // The bounds are exact: the MoE GEMVs ask for up to 61,968 bytes, xielu f16 for 61,440.
    for (bytes, moe_ok, f16_ok) in
        [(61_968, true, true), (61_967, false, true), (61_440, false, true), (61_439, false, false)]
    {
        let d = Device::cpu_with_workgroup_mem(bytes);
        assert_eq!(moe::available(&d, Dtype::Bf16), moe_ok, "{bytes}");
        assert_eq!(xielu::available(&d, Dtype::F16), f16_ok, "{bytes}");
    }
    // Through `Device::launch`: a probe launch at exactly the device's maximum runs,
    // one asking for more is refused by name before it runs.
    use mlxcel_amdgpu::kernels_device::geometry::probe::{WORDS_PER_LANE, WORKGROUP_SIZE};
    let small = Device::cpu_with_workgroup_mem(4096);
    let k = small.kernel("probe").unwrap();
    let out = small.upload(&vec![0xDEAD_BEEFu32; WORKGROUP_SIZE as usize * WORDS_PER_LANE]).unwrap();
    let args = mlxcel_amdgpu::kernels_device::entry::ProbeArgs { out: out.ptr() }.values();
    let dims = |bytes: u32| mlxcel_amdgpu::runtime::LaunchDims {
        grid: [1, 1, 1],
        workgroup_size: WORKGROUP_SIZE,
        workgroup_mem_bytes: bytes,
    };
    match unsafe { small.launch(&k, dims(4100), &args, Stream::DEFAULT) } {
        Err(Error::Unavailable { kernel, reason }) => {
            assert_eq!(kernel, "probe");
            assert!(reason.contains("needs 4100 bytes") && reason.contains("allows 4096"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(out.download().unwrap().iter().all(|&w| w == 0xDEAD_BEEF), "nothing ran");
    unsafe { small.launch(&k, dims(4096), &args, Stream::DEFAULT) }.unwrap();
    small.synchronize().unwrap();
    assert!(out.download().unwrap().iter().any(|&w| w != 0xDEAD_BEEF), "the probe ran");
}
