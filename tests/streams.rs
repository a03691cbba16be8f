//! Streams: a launch on a stream of another device or context is refused
//! before anything runs (CUDA here, where a second context of the one GPU
//! stands for another device; the HIP backend makes the same check with
//! `hipStreamGetDevice`, unverified without an AMD GPU), a stream of the
//! library's own device is used, and the CPU backend refuses any stream.

mod common;

use common::{Suite, download_bits, upload};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::{BackendKind, Device, Error, Stream};

const P: XieluParams = XieluParams::APERTUS;

fn main() {
    Suite::new()
        .on_backend(BackendKind::Cpu, "cpu_refuses_every_stream_but_null", cpu_refuses_every_stream_but_null)
        .on_backend(BackendKind::Cuda, "a_stream_of_another_context_is_refused", another_context_is_refused)
        .on_backend(BackendKind::Cuda, "a_stream_of_the_device_is_used", own_stream_is_used)
        .run()
}

fn cpu_refuses_every_stream_but_null(dev: &Device) {
    let x = upload::<f32>(dev, &[1.0, 2.0]);
    let mut out = upload::<f32>(dev, &[7.0, 7.0]);
    let mut token = 0u8;
    let stream = Stream((&mut token as *mut u8).cast());
    let err = xielu::run(dev, &x, &mut out, 2, P, stream).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { argument: "stream", .. }), "{err}");
    assert_eq!(download_bits(&out), [7.0f32.to_bits(); 2], "a refused launch wrote");
}

#[cfg(not(feature = "cuda"))]
fn another_context_is_refused(_: &Device) {
    unreachable!("without the cuda feature there is no CUDA device")
}
#[cfg(not(feature = "cuda"))]
fn own_stream_is_used(_: &Device) {
    unreachable!("without the cuda feature there is no CUDA device")
}

#[cfg(feature = "cuda")]
fn another_context_is_refused(dev: &Device) {
    use cudarc::driver::sys;
    unsafe {
        let mut device: sys::CUdevice = 0;
        assert_eq!(sys::cuDeviceGet(&mut device, 0), sys::CUresult::CUDA_SUCCESS);
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // cuCtxCreate_v4 makes the new context current on this thread.
        assert_eq!(sys::cuCtxCreate_v4(&mut ctx, std::ptr::null_mut(), 0, device), sys::CUresult::CUDA_SUCCESS);
        let mut stream: sys::CUstream = std::ptr::null_mut();
        assert_eq!(sys::cuStreamCreate(&mut stream, 0), sys::CUresult::CUDA_SUCCESS);
        let x = upload::<f32>(dev, &[1.0, 2.0]);
        let mut out = upload::<f32>(dev, &[7.0, 7.0]);
        let err = xielu::run(dev, &x, &mut out, 2, P, Stream(stream.cast())).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument { argument: "stream", message } if message.contains("context")),
            "{err}"
        );
        assert_eq!(download_bits(&out), [7.0f32.to_bits(); 2], "a refused launch wrote");
        // The library's context is current again; release the other one.
        sys::cuStreamDestroy_v2(stream);
        sys::cuCtxDestroy_v2(ctx);
    }
}

#[cfg(feature = "cuda")]
fn own_stream_is_used(dev: &Device) {
    use cudarc::driver::sys;
    let x = upload::<f32>(dev, &[1.0, 2.0]);
    let mut out = upload::<f32>(dev, &[7.0, 7.0]);
    unsafe {
        // `upload` made the library's (primary) context current on this thread.
        let mut stream: sys::CUstream = std::ptr::null_mut();
        assert_eq!(sys::cuStreamCreate(&mut stream, 0), sys::CUresult::CUDA_SUCCESS);
        xielu::run(dev, &x, &mut out, 2, P, Stream(stream.cast())).unwrap();
        assert_eq!(sys::cuStreamSynchronize(stream), sys::CUresult::CUDA_SUCCESS);
        sys::cuStreamDestroy_v2(stream);
    }
    let want = mlxcel_amdgpu_testkit::reference::xielu::xielu(
        mlxcel_amdgpu::Dtype::F32,
        &[1.0, 2.0],
        P.alpha_p,
        P.alpha_n,
        P.beta,
        P.eps,
    );
    assert_eq!(download_bits(&out), want.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
}
