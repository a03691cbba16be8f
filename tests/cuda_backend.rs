//! Tier 3: the CUDA backend (cargo feature `cuda`).
//!
//! - Without the feature, `Device::cuda` says the build has no CUDA support.
//! - With it, on a machine without a CUDA driver (or device), `Device::cuda(0)`
//!   is `BackendUnavailable` and does not panic.
//! - With a driver and a device, the device opens, reports sane information,
//!   moves buffers both ways, and the `probe` kernel writes, word for word, what
//!   it writes on the CPU emulator.
//!
//! Each test prints which case ran (`cargo test ... -- --nocapture` shows it).
//! Set `MLXCEL_AMDGPU_EXPECT_CUDA=1` to make the absence of a usable CUDA device
//! a failure rather than a skipped case.

use mlxcel_amdgpu::{Device, Error};

#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_feature_cuda_is_unavailable() {
    match Device::cuda(0) {
        Err(Error::BackendUnavailable { backend: "cuda", reason }) => {
            println!("case: built without the `cuda` feature: {reason}");
            assert!(reason.contains("no CUDA support"), "{reason}");
        }
        other => panic!("expected BackendUnavailable for a build without CUDA, got {other:?}"),
    }
    assert!(Device::cuda(3).is_err());
}

#[cfg(feature = "cuda")]
mod with_cuda {
    use super::*;
    use mlxcel_amdgpu::BackendKind;
    use mlxcel_amdgpu::kernels_device::entry::ProbeArgs;
    use mlxcel_amdgpu::kernels_device::geometry::probe::{WORDS_PER_LANE, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
    use mlxcel_amdgpu::runtime::{LaunchDims, Stream};

    const EXPECT_ENV: &str = "MLXCEL_AMDGPU_EXPECT_CUDA";

    /// How many CUDA devices the driver reports, found without this crate:
    /// `None` when there is no driver library.
    fn driver_device_count() -> Option<i32> {
        use cudarc::driver::sys;
        // SAFETY: the symbols below exist in every CUDA driver; the library is
        // checked for before any of them is resolved.
        unsafe {
            if !sys::is_culib_present() {
                return None;
            }
            if sys::cuInit(0) != sys::CUresult::CUDA_SUCCESS {
                return Some(0);
            }
            let mut n = 0;
            if sys::cuDeviceGetCount(&mut n) != sys::CUresult::CUDA_SUCCESS {
                return Some(0);
            }
            Some(n)
        }
    }

    /// Device 0, or `None` (after checking that the failure was the right one)
    /// when this machine has no CUDA driver or device.
    fn open(test: &str) -> Option<Device> {
        let opened = std::panic::catch_unwind(|| Device::cuda(0));
        let opened = match opened {
            Ok(result) => result,
            Err(_) => panic!("{test}: Device::cuda(0) panicked"),
        };
        let devices = driver_device_count();
        match opened {
            Ok(dev) => {
                println!("{test}: case: CUDA device present: {:?}", dev.info());
                Some(dev)
            }
            Err(Error::BackendUnavailable { backend: "cuda", reason }) => {
                match devices {
                    None => {
                        println!("{test}: case: no CUDA driver library: {reason}");
                        assert!(reason.contains("libcuda"), "the reason should name the missing library: {reason}");
                    }
                    Some(0) => println!("{test}: case: CUDA driver without a usable device: {reason}"),
                    Some(n) => {
                        panic!("{test}: the driver reports {n} device(s) but Device::cuda(0) is unavailable: {reason}")
                    }
                }
                assert!(
                    std::env::var_os(EXPECT_ENV).is_none(),
                    "{test}: {EXPECT_ENV} is set but CUDA is unavailable: {reason}"
                );
                None
            }
            Err(other) => panic!("{test}: Device::cuda(0) failed with {other:?}, expected Ok or BackendUnavailable"),
        }
    }

    #[test]
    fn opening_never_panics_and_reports_what_is_missing() {
        let Some(dev) = open("opening") else { return };
        assert_eq!(dev.backend(), BackendKind::Cuda);
    }

    #[test]
    fn an_ordinal_out_of_range_is_unavailable() {
        let result = std::panic::catch_unwind(|| Device::cuda(4096)).expect("Device::cuda(4096) panicked");
        match result {
            Err(Error::BackendUnavailable { backend: "cuda", reason }) => println!("ordinal 4096: {reason}"),
            other => panic!("expected BackendUnavailable for ordinal 4096, got {other:?}"),
        }
    }

    #[test]
    fn device_info_is_sane() {
        let Some(dev) = open("info") else { return };
        let info = dev.info();
        assert_eq!(info.backend, BackendKind::Cuda);
        assert!(!info.name.is_empty());
        assert!(
            info.arch.starts_with("sm_") && info.arch.len() >= 5 && info.arch[3..].bytes().all(|b| b.is_ascii_digit()),
            "{}",
            info.arch
        );
        assert_eq!(info.wavefront_size, 32);
        assert!(info.compute_units > 0);
        assert_eq!(info.kernels, Ok("PTX sm_80".to_string()));
        assert!(dev.is_available("probe"));
        for spec in mlxcel_amdgpu::kernels_device::entry::KERNELS {
            dev.kernel(spec.name).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        }
        assert!(matches!(dev.kernel("no_such_kernel"), Err(Error::Unavailable { .. })));
    }

    #[test]
    fn buffers_round_trip() {
        let Some(dev) = open("buffers") else { return };
        let data: Vec<u32> = (0..100_003u32).map(|i| i.wrapping_mul(2654435761) ^ 0x5A5A_0000).collect();
        let mut buf = dev.upload(&data).unwrap();
        assert_ne!(buf.ptr(), 0);
        assert_eq!(buf.download().unwrap(), data);

        let reversed: Vec<u32> = data.iter().rev().copied().collect();
        buf.write(&reversed).unwrap();
        assert_eq!(buf.download().unwrap(), reversed);

        buf.fill_bytes(0xA5).unwrap();
        assert!(buf.download().unwrap().iter().all(|&w| w == 0xA5A5_A5A5));

        let empty = dev.upload::<u32>(&[]).unwrap();
        assert!(empty.is_empty());
        assert!(empty.download().unwrap().is_empty());

        // The current context is per host thread: another thread must work too.
        let dev2 = dev.clone();
        let from_thread = std::thread::spawn(move || {
            let b = dev2.upload(&[1.5f32, -2.0, 3.25]).unwrap();
            b.download().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(from_thread, vec![1.5f32, -2.0, 3.25]);
        dev.synchronize().unwrap();
    }

    const GROUPS: u32 = 3;

    /// Runs the probe on `dev` through `Device::kernel` and `Device::launch`.
    fn run_probe(dev: &Device, workgroup_mem_bytes: u32) -> Vec<u32> {
        let kernel = dev.kernel("probe").unwrap();
        let words = (GROUPS * WORKGROUP_SIZE) as usize * WORDS_PER_LANE;
        let out = dev.upload(&vec![0xDEAD_BEEFu32; words]).unwrap();
        let dims = LaunchDims { grid: [GROUPS, 1, 1], workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes };
        // SAFETY: `out` holds WORDS_PER_LANE words per thread of the launch, and
        // the workgroup memory one u32 per thread.
        unsafe { dev.launch(&kernel, dims, &ProbeArgs { out: out.ptr() }.values(), Stream::DEFAULT) }.unwrap();
        out.download().unwrap()
    }

    fn assert_same(got: &[u32], want: &[u32], what: &str) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let thread = i / WORDS_PER_LANE;
            assert_eq!(
                g,
                w,
                "{what}: workgroup {} thread {} word {}: CUDA {g:#010x}, CPU {w:#010x}",
                thread as u32 / WORKGROUP_SIZE,
                thread as u32 % WORKGROUP_SIZE,
                i % WORDS_PER_LANE
            );
        }
    }

    #[test]
    fn probe_matches_the_cpu_emulator() {
        let Some(dev) = open("probe") else { return };
        let cpu = run_probe(&Device::cpu(), WORKGROUP_MEM_BYTES);
        assert!(!cpu.contains(&0xDEAD_BEEF), "the CPU run left words unwritten");

        let gpu = run_probe(&dev, WORKGROUP_MEM_BYTES);
        assert_same(&gpu, &cpu, "probe");
        println!("probe: case: CUDA ({}) matches the CPU emulator on {} words", dev.info().arch, gpu.len());

        // More than the default 48 KiB of dynamic shared memory needs the
        // opt-in attribute set at load (80 KiB fits every sm_80+ GPU).
        let gpu_big = run_probe(&dev, 80 * 1024);
        assert_same(&gpu_big, &cpu, "probe with 80 KiB of dynamic shared memory");
    }

    #[test]
    fn timing_and_launch_errors() {
        let Some(dev) = open("timing") else { return };
        let kernel = dev.kernel("probe").unwrap();
        let words = (GROUPS * WORKGROUP_SIZE) as usize * WORDS_PER_LANE;
        let out = dev.alloc::<u32>(words).unwrap();
        let dims = LaunchDims {
            grid: [GROUPS, 1, 1],
            workgroup_size: WORKGROUP_SIZE,
            workgroup_mem_bytes: WORKGROUP_MEM_BYTES,
        };
        let args = ProbeArgs { out: out.ptr() }.values();
        // SAFETY: as in `run_probe`.
        let ms = dev.time(Stream::DEFAULT, || unsafe { dev.launch(&kernel, dims, &args, Stream::DEFAULT) }).unwrap();
        assert!(ms.is_finite() && ms >= 0.0, "{ms}");
        println!("timing: case: CUDA probe took {ms:.4} ms");

        // An error inside the timed work is returned (and the events freed).
        let err = dev.time(Stream::DEFAULT, || Err(Error::Emulator("deliberate".into()))).unwrap_err();
        assert_eq!(err, Error::Emulator("deliberate".into()));

        // An empty grid launches nothing.
        let empty = LaunchDims { grid: [0, 1, 1], ..dims };
        unsafe { dev.launch(&kernel, empty, &args, Stream::DEFAULT) }.unwrap();

        // A block larger than any NVIDIA GPU allows is a named driver error...
        let too_big = LaunchDims { workgroup_size: 4096, ..dims };
        match unsafe { dev.launch(&kernel, too_big, &args, Stream::DEFAULT) } {
            Err(Error::Backend { backend: "cuda", call: "cuLaunchKernel", code, message }) => {
                assert!(message.starts_with("CUDA_ERROR_"), "{message}");
                assert_ne!(code, 0, "the driver's status is kept: {message}");
                println!("timing: oversized block: {message}");
            }
            other => panic!("expected a cuLaunchKernel error, got {other:?}"),
        }
        // ...that leaves the device usable.
        dev.synchronize().unwrap();
        unsafe { dev.launch(&kernel, dims, &args, Stream::DEFAULT) }.unwrap();
        dev.synchronize().unwrap();

        // More workgroup memory than the device's opt-in maximum is refused by
        // name before the driver sees it (sm_80 and later have at least 99 KiB).
        let max = dev.info().max_workgroup_mem_bytes;
        assert!(max >= 99 * 1024, "{max}");
        let too_much = LaunchDims { workgroup_mem_bytes: max + 16, ..dims };
        match unsafe { dev.launch(&kernel, too_much, &args, Stream::DEFAULT) } {
            Err(Error::Unavailable { kernel, reason }) => {
                assert_eq!(kernel, "probe");
                assert!(
                    reason.contains(&format!("needs {} bytes", max + 16)) && reason.contains(&format!("allows {max}")),
                    "{reason}"
                );
                println!("timing: too much workgroup memory: {reason}");
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        unsafe { dev.launch(&kernel, LaunchDims { workgroup_mem_bytes: max, ..dims }, &args, Stream::DEFAULT) }
            .unwrap();
        dev.synchronize().unwrap();
    }
}
