//! mlxcel-amdgpu as a dependency on mlxcel's toolchain: xielu on the CPU backend (the emulator
//! running the kernel source) through the Rust API in f32 and bf16, and through the C ABI from
//! C++ in f32, each bit for bit against the testkit's reference. Exits with status 1 on any
//! difference.

use std::ffi::{CStr, c_char};
use std::process::ExitCode;

use mlxcel_amdgpu::kernels::Run;
use mlxcel_amdgpu::kernels::xielu::{XieluLaunch, XieluParams};
use mlxcel_amdgpu::{Device, Dtype, Element, Stream};
use mlxcel_amdgpu_testkit::reference::{self, data, metrics};

unsafe extern "C" {
    /// src/consumer.cpp.
    fn consumer_xielu_f32(
        x: *const f32,
        out: *mut f32,
        n: u64,
        alpha_p: f32,
        alpha_n: f32,
        beta: f32,
        eps: f32,
        why: *mut c_char,
        why_len: usize,
    ) -> i32;
}

/// The inputs: edge values (zeros, infinities, NaN, the parameter boundaries) and a ramp.
fn inputs(dtype: Dtype) -> Vec<f32> {
    let mut x = data::xielu_edge_values();
    x.extend(data::lcg_uniform(data::XIELU_LCG_SEED, 3000));
    reference::round_all(dtype, &x)
}

/// xielu of `x` through the Rust API's typed launch on `device`: the storage bits of the output.
fn rust_api<T: Element>(device: &Device, x: &[f32], p: XieluParams) -> mlxcel_amdgpu::Result<Vec<u32>> {
    let input: Vec<T> = x.iter().map(|&v| T::from_f32(v)).collect();
    let input = device.upload(&input)?;
    let mut out = device.alloc::<T>(x.len())?;
    let XieluParams { alpha_p, alpha_n, beta, eps } = p;
    let launch = XieluLaunch { x: &input, out: &mut out, n: x.len() as u64, alpha_p, alpha_n, beta, eps };
    launch.run(device, Stream::DEFAULT)?;
    Ok(out.download()?.iter().map(|v| v.to_bits_u32()).collect())
}

/// Whether the storage bits `got` are the reference's `want` (the library's comparison: a NaN
/// matches any NaN), printed.
fn check(what: &str, dtype: Dtype, got: &[u32], want: &[f32]) -> bool {
    let want = reference::store_all(dtype, want);
    if got.len() != want.len() {
        println!("{what}: FAILED, {} values where {} were expected", got.len(), want.len());
        return false;
    }
    if let Some((i, g, w)) = metrics::first_bit_difference(dtype, got, &want) {
        println!("{what}: FAILED, {}", metrics::describe_bit_difference(dtype, i, g, w));
        return false;
    }
    println!("{what}: {} values bit-exact", got.len());
    true
}

fn main() -> ExitCode {
    let p = XieluParams::APERTUS;
    let device = Device::cpu();
    let mut passed = true;

    for dtype in [Dtype::F32, Dtype::Bf16] {
        let x = inputs(dtype);
        let want = reference::xielu::xielu(dtype, &x, p.alpha_p, p.alpha_n, p.beta, p.eps);
        let got = match dtype {
            Dtype::Bf16 => rust_api::<mlxcel_amdgpu::half::bf16>(&device, &x, p),
            _ => rust_api::<f32>(&device, &x, p),
        };
        match got {
            Ok(got) => passed &= check(&format!("Rust API, xielu {}", dtype.name()), dtype, &got, &want),
            Err(e) => {
                println!("Rust API, xielu {}: FAILED: {e}", dtype.name());
                passed = false;
            }
        }
    }

    let x = inputs(Dtype::F32);
    let want = reference::xielu::xielu(Dtype::F32, &x, p.alpha_p, p.alpha_n, p.beta, p.eps);
    let mut out = vec![f32::NAN; x.len()];
    let mut why = [0 as c_char; 512];
    // SAFETY: `x` and `out` hold `x.len()` values; `why` has its length.
    let status = unsafe {
        consumer_xielu_f32(
            x.as_ptr(),
            out.as_mut_ptr(),
            x.len() as u64,
            p.alpha_p,
            p.alpha_n,
            p.beta,
            p.eps,
            why.as_mut_ptr(),
            why.len(),
        )
    };
    if status == 0 {
        let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
        passed &= check("C ABI from C++, xielu f32", Dtype::F32, &got, &want);
    } else {
        let why = unsafe { CStr::from_ptr(why.as_ptr()) }.to_string_lossy();
        println!("C ABI from C++, xielu f32: FAILED with status {status}: {why}");
        passed = false;
    }

    if passed {
        println!("consumer: all checks passed");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
