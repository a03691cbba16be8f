//! The C ABI's thread-safety guarantees (docs/contracts.md, "Threads"), on the
//! CPU backend: launches from many threads at once each give their own correct
//! result, and the last-error message is per thread. One test, because the
//! device is process-wide.

use std::ffi::CStr;

use mlxcel_amdgpu::ffi::*;
use mlxcel_amdgpu_testkit::reference::{self, Dtype};

#[test]
fn concurrent_launches_are_correct_and_errors_stay_on_their_thread() {
    let status = unsafe { mlxcel_amdgpu_select_device(c"cpu".as_ptr(), 0) };
    assert_eq!(status, MlxcelAmdgpuStatus::MLXCEL_AMDGPU_OK);
    let (ap, an, be, eps) = (0.8731f32, 0.6042f32, 0.5f32, -1e-6f32);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..10 {
                    let x: Vec<f32> = (0..777).map(|i| ((i * 7 + t * 13 + round) % 97) as f32 * 0.05 - 2.4).collect();
                    let mut out = vec![0f32; x.len()];
                    // SAFETY: `x` and `out` hold `n` f32 values.
                    let xielu = |dtype: u32, out: &mut [f32], n: u64| unsafe {
                        mlxcel_amdgpu_xielu(
                            dtype,
                            x.as_ptr().cast(),
                            out.as_mut_ptr().cast(),
                            n,
                            ap,
                            an,
                            be,
                            eps,
                            std::ptr::null_mut(),
                        )
                    };
                    let st = xielu(0, &mut out, x.len() as u64);
                    assert_eq!(st, MlxcelAmdgpuStatus::MLXCEL_AMDGPU_OK);
                    let want = reference::xielu::xielu(Dtype::F32, &x, ap, an, be, eps);
                    let same = out.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
                    assert!(same, "thread {t} round {round}: result differs from the reference");
                    // Odd threads also fail a call; its message must stay theirs.
                    if t % 2 == 1 {
                        let st = xielu(9, &mut out, 1);
                        assert_eq!(st, MlxcelAmdgpuStatus::MLXCEL_AMDGPU_INVALID_ARGUMENT);
                        let msg = unsafe { CStr::from_ptr(mlxcel_amdgpu_last_error()) }.to_string_lossy().into_owned();
                        assert!(msg.contains("dtype"), "thread {t}: {msg}");
                        // The next success clears it.
                        assert_eq!(xielu(0, &mut out, x.len() as u64), MlxcelAmdgpuStatus::MLXCEL_AMDGPU_OK);
                        let msg = unsafe { CStr::from_ptr(mlxcel_amdgpu_last_error()) };
                        assert!(msg.is_empty(), "thread {t}: a success left the last error {msg:?}");
                    } else {
                        let msg = unsafe { CStr::from_ptr(mlxcel_amdgpu_last_error()) };
                        assert!(msg.is_empty(), "thread {t}: another thread's message leaked: {msg:?}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
