//! Faults of the HIP runtime, injected through the stand-in
//! libamdhip64 (`RDNA_SIM_FAIL`, hip-standin/README.md) and met by the real
//! hip.rs path: a runtime that reports no device, one whose hipModuleLoadData
//! fails, one whose hipMalloc fails. Each gives a named error, and the process
//! stays usable: once the fault is gone, the next open, allocation and launch work.
//!
//! Runs in `cargo xtask sim-test`. Without a HIP runtime it is
//! skipped (failed under `MLXCEL_AMDGPU_EXPECT_HIP=1`); on a real HIP device it
//! is skipped, since only the stand-in reads `RDNA_SIM_FAIL`. One test in its
//! own binary: it sets the environment, which the stand-in reads at every call,
//! and nothing else in the process may call HIP meanwhile.

use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::{Device, Error, Stream};

const FAIL_ENV: &str = "RDNA_SIM_FAIL";

/// Sets `RDNA_SIM_FAIL` to `fault` for the length of `f`.
fn with_fault<R>(fault: &str, f: impl FnOnce() -> R) -> R {
    // SAFETY: this binary's only test runs on one thread; no other thread reads
    // the environment while it is changed.
    unsafe { std::env::set_var(FAIL_ENV, fault) };
    let r = f();
    // SAFETY: as above.
    unsafe { std::env::remove_var(FAIL_ENV) };
    r
}

/// A valid launch on `dev` gives the emulator's result.
fn a_launch_works(dev: &Device, when: &str) {
    let x: Vec<f32> = (0..77).map(|i| i as f32 * 0.1 - 3.0).collect();
    let input = dev.upload(&x).unwrap_or_else(|e| panic!("{when}: upload: {e}"));
    let mut out = dev.alloc::<f32>(x.len()).unwrap_or_else(|e| panic!("{when}: alloc: {e}"));
    xielu::run(dev, &input, &mut out, x.len(), XieluParams::APERTUS, Stream::DEFAULT)
        .unwrap_or_else(|e| panic!("{when}: launch: {e}"));
    let cpu = Device::cpu();
    let mut want = cpu.alloc::<f32>(x.len()).unwrap();
    xielu::run(&cpu, &cpu.upload(&x).unwrap(), &mut want, x.len(), XieluParams::APERTUS, Stream::DEFAULT).unwrap();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(bits(out.download().unwrap()), bits(want.download().unwrap()), "{when}: wrong result");
}

#[test]
fn injected_hip_faults_are_named_and_the_process_stays_usable() {
    let dev = match Device::hip(0) {
        Ok(dev) => dev,
        Err(e) => {
            assert!(std::env::var_os("MLXCEL_AMDGPU_EXPECT_HIP").is_none(), "MLXCEL_AMDGPU_EXPECT_HIP is set: {e}");
            println!("skipped: no HIP runtime: {e}");
            return;
        }
    };
    if !dev.info().name.contains("(rdna-sim)") {
        println!("skipped: {} is not the stand-in, which alone reads {FAIL_ENV}", dev.info().name);
        return;
    }
    assert!(dev.info().kernels.is_ok(), "{:?}", dev.info().kernels);

    // No device: the open fails with the runtime's error named.
    let err = with_fault("no-device", || Device::hip(0)).unwrap_err();
    println!("no-device: {err}");
    match &err {
        Error::BackendUnavailable { backend: "hip", reason } => {
            assert!(reason.contains("found no GPU") && reason.contains("hipErrorNoDevice"), "{reason}")
        }
        other => panic!("no-device: expected BackendUnavailable, got {other:?}"),
    }
    a_launch_works(&Device::hip(0).expect("open after no-device"), "after no-device");

    // hipModuleLoadData fails at the first launch (opening loads nothing, so
    // that no HIP queue exists before the host's runtime sets the device's
    // flags): that launch is refused as unavailable, naming the call, and
    // from then on the predicates answer false with the same reason.
    let bare = Device::hip(0).expect("the device opens");
    assert!(bare.is_available("xielu_f32"), "the predicate answers from the audited code object");
    let x = bare.upload(&[1.0f32; 4]).unwrap();
    let mut out = bare.alloc::<f32>(4).unwrap();
    let refused =
        with_fault("module-load", || xielu::run(&bare, &x, &mut out, 4, XieluParams::APERTUS, Stream::DEFAULT))
            .unwrap_err();
    println!("module-load: {refused}");
    let Error::Unavailable { reason: why, .. } = refused.root() else { panic!("{refused:?}") };
    assert!(why.contains("did not load the gfx1151 code object") && why.contains("hipModuleLoadData"), "{why}");
    assert!(why.contains("hipErrorInvalidImage"), "{why}");
    assert!(!bare.is_available("xielu_f32"));
    let again = xielu::run(&bare, &x, &mut out, 4, XieluParams::APERTUS, Stream::DEFAULT).unwrap_err();
    assert!(matches!(again.root(), Error::Unavailable { .. }), "{again:?}");
    drop((x, out, bare));
    a_launch_works(&Device::hip(0).expect("open after module-load"), "after module-load");

    // hipMalloc fails: the allocation's error names the call, the runtime's
    // status and the size; the same device then allocates and launches.
    let err = with_fault("malloc", || dev.alloc::<f32>(1000).map(|_| ())).unwrap_err();
    println!("malloc: {err}");
    assert_eq!(err.backend_code(), Some(2), "{err:?}");
    assert!(matches!(err.root(), Error::Backend { call: "hipMallocAsync", .. }), "{err:?}");
    assert!(err.to_string().contains("allocating 4000 bytes") && err.to_string().contains("out of memory"), "{err}");
    let err = with_fault("malloc", || dev.upload(&[1u32, 2, 3]).map(|_| ())).unwrap_err();
    assert_eq!(err.backend_code(), Some(2), "{err:?}");
    a_launch_works(&dev, "after malloc");
}
