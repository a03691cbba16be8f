//! Event timing shared by the GPU timings of the kernel tests and by
//! `benches/kernels.rs` (which includes this file by path).

use mlxcel_amdgpu::{Device, Result, Stream};

/// Median milliseconds of one call of `f` over `reps` repetitions, each timed
/// with events around `inner` back-to-back calls (no warm-up: the caller's).
pub fn median_of_timed(dev: &Device, reps: usize, inner: usize, mut f: impl FnMut() -> Result<()>) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            dev.time(Stream::DEFAULT, || {
                for _ in 0..inner {
                    f()?;
                }
                Ok(())
            })
            .unwrap()
                / inner as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}
