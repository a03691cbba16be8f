//! The HIP backend opens cleanly in both worlds: without ROCm it reports
//! `BackendUnavailable` with a reason (and never panics); with a HIP device it
//! reports sane device info, and memory round-trips through it.

use mlxcel_amdgpu::{BackendKind, Device, Error};

/// The device, or `None` (after checking the error) where HIP is absent.
fn hip_device_or_reason() -> Option<Device> {
    match Device::hip(0) {
        Ok(device) => Some(device),
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "hip");
            assert!(!reason.trim().is_empty(), "BackendUnavailable without a reason");
            println!("case: no usable HIP device on this machine; reason: {reason}");
            None
        }
        Err(other) => panic!("Device::hip(0) failed with an error other than BackendUnavailable: {other:?} ({other})"),
    }
}

#[test]
fn hip_device_opens_or_says_why() {
    let Some(device) = hip_device_or_reason() else { return };
    let info = device.info();
    println!("case: HIP device present: {info:#?}");
    assert_eq!(info.backend, BackendKind::Hip);
    assert_eq!(device.backend(), BackendKind::Hip);
    assert!(!info.name.is_empty(), "empty device name");
    assert!(info.arch.starts_with("gfx"), "arch {:?} is not a gfx processor", info.arch);
    assert!(!info.arch.contains(':'), "arch {:?} still carries target features", info.arch);
    assert!(info.wavefront_size == 32 || info.wavefront_size == 64, "wavefront {}", info.wavefront_size);
    assert!(info.compute_units > 0, "no compute units");
    match &info.kernels {
        Ok(object) => {
            println!("kernels: loaded the {object} code object");
            for spec in mlxcel_amdgpu::kernels_device::entry::KERNELS {
                assert!(
                    device.is_available(spec.name),
                    "{} not available: {:?}",
                    spec.name,
                    device.kernel(spec.name).err()
                );
            }
        }
        Err(why) => {
            println!("kernels: none: {why}");
            assert!(why.contains(&info.arch), "the reason does not name the arch: {why}");
            assert!(!device.is_available("probe"));
        }
    }
}

#[test]
fn hip_out_of_range_ordinal_is_unavailable() {
    match Device::hip(1 << 20) {
        Ok(device) => panic!("device 2^20 opened: {:?}", device.info()),
        Err(Error::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "hip");
            assert!(!reason.is_empty());
            println!("ordinal 2^20: {reason}");
        }
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn hip_memory_round_trips_when_present() {
    let Some(device) = hip_device_or_reason() else { return };
    let data: Vec<u32> = (0..4099).map(|i| i * 3 + 1).collect();
    let mut buf = device.upload(&data).expect("upload");
    assert_eq!(buf.download().expect("download"), data);
    buf.fill_bytes(0xab).expect("memset");
    assert!(buf.download().expect("download").iter().all(|&v| v == 0xabab_abab));
    device.synchronize().expect("synchronize");
    let ms = device.time(mlxcel_amdgpu::Stream::DEFAULT, || Ok(())).expect("time");
    assert!(ms >= 0.0);
    println!("case: HIP device present; memory round trip passed");
}
