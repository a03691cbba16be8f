//! The typed launchers through `host/runtime/hip.rs` on the stand-in: memory
//! from `hipMallocAsync`, freed by `hipFreeAsync` on drop; add3_layer_norm
//! (both instances) bit for bit and mamba1_scan (both mappings) within
//! tolerance against the CPU emulator; a stream the stand-in never made refused.
mod common;

use common::device;
use mlxcel_amdgpu::kernels::add3_layer_norm::{self, Add3Buffers};
use mlxcel_amdgpu::kernels::mamba1_scan::{self, ScanShape};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::{Device, DeviceBuffer, Dtype, Element, Error, Stream, with_element};
use mlxcel_amdgpu_testkit::fixtures::ScanUpload;
use mlxcel_amdgpu_testkit::reference::data::{add3_inputs, normal};
use mlxcel_amdgpu_testkit::reference::mamba::ScanInputs;
use std::ffi::{CStr, c_char, c_int, c_void};

/// The name the stand-in loaded by hip.rs gave the allocation at `ptr`
/// (its test hook `hipStandinAllocationName`), or None when none starts there.
fn allocation_name(ptr: u64) -> Option<String> {
    type Hook = unsafe extern "C" fn(*const c_void, *mut c_char, usize) -> c_int;
    // The same path hip.rs opened: dlopen hands back the loaded library, whose state hip.rs uses.
    let lib = unsafe { libloading::Library::new(common::standin_path()) }.unwrap();
    let hook = unsafe { lib.get::<Hook>(b"hipStandinAllocationName") }.unwrap();
    let mut name = [0 as c_char; 128];
    let n = unsafe { hook(ptr as *const c_void, name.as_mut_ptr(), name.len()) };
    (n >= 0).then(|| unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned())
}

#[test]
fn a_typed_launch_on_memory_from_hip_malloc_async_which_drop_frees() {
    let d = device();
    let n = 777;
    let xs: Vec<f32> = (0..n).map(|i| (i as f32 - 400.0) * 0.05).collect();
    let x = d.upload(&xs).unwrap();
    let mut out: DeviceBuffer<f32> = d.alloc(n).unwrap();
    let ptr = out.ptr();
    assert_eq!(allocation_name(ptr).as_deref(), Some(format!("hipMallocAsync({})", 4 * n).as_str()));
    xielu::run(&d, &x, &mut out, n, XieluParams::APERTUS, Stream::DEFAULT).unwrap();
    let got = out.download().unwrap();
    let cpu = Device::cpu();
    let mut want = cpu.alloc::<f32>(n).unwrap();
    xielu::run(&cpu, &cpu.upload(&xs).unwrap(), &mut want, n, XieluParams::APERTUS, Stream::DEFAULT).unwrap();
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    assert_eq!(bits(got), bits(want.download().unwrap()));
    drop(out);
    assert_eq!(allocation_name(ptr), None, "hipFreeAsync on drop frees the allocation");
}

#[test]
fn a_stream_the_standin_never_made_is_refused() {
    let d = device();
    let xs = [1.0f32; 64];
    let x = d.upload(&xs).unwrap();
    let mut out = d.alloc::<f32>(64).unwrap();
    let bogus = Stream(0x1234 as *mut c_void);
    let e = xielu::run(&d, &x, &mut out, 64, XieluParams::APERTUS, bogus).unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::Backend { code: 400, .. }), "{text}");
    assert!(text.contains("hipStreamGetDevice") && text.contains("invalid resource handle"), "{text}");
}

/// One add3_layer_norm on `dev`: the bits of x_new then h.
fn add3_on<T: Element>(dev: &Device, dtype: Dtype, rows: u32, d: u32, with_bias: bool) -> Vec<u32> {
    let inp = add3_inputs(dtype, rows as usize, d as usize, with_bias, 31);
    let up = |v: &[f32]| dev.upload(&v.iter().map(|&x| T::from_f32(x)).collect::<Vec<T>>()).unwrap();
    let (a, b, x, w) = (up(&inp.a), up(&inp.b), up(&inp.x), up(&inp.w));
    let bias = inp.bias.as_deref().map(up);
    let mut x_new = dev.alloc::<T>((rows * d) as usize).unwrap();
    let mut h = dev.alloc::<T>((rows * d) as usize).unwrap();
    let bufs = Add3Buffers { a: &a, b: &b, x: &x, w: &w, bias: bias.as_ref(), x_new: &mut x_new, h: &mut h };
    add3_layer_norm::run(dev, bufs, rows, d, 1e-5, Stream::DEFAULT)
        .unwrap_or_else(|e| panic!("{dtype:?} d={d} on {}: {e}", dev.info().name));
    let mut bits: Vec<u32> = x_new.download().unwrap().into_iter().map(Element::to_bits_u32).collect();
    bits.extend(h.download().unwrap().into_iter().map(Element::to_bits_u32));
    bits
}

#[test]
fn add3_layer_norm_through_hip_rs_equals_the_cpu_emulator_bit_for_bit() {
    let (d, cpu) = (device(), Device::cpu());
    // The short instance (d <= 4096) in every dtype, the long one in f32 and bf16.
    let cases = [
        (Dtype::F32, 300, true),
        (Dtype::F16, 300, false),
        (Dtype::Bf16, 300, true),
        (Dtype::F32, 4100, true),
        (Dtype::Bf16, 4100, false),
    ];
    for (dtype, dim, with_bias) in cases {
        let (got, want) = with_element!(dtype, T => {
            (add3_on::<T>(&d, dtype, 2, dim, with_bias), add3_on::<T>(&cpu, dtype, 2, dim, with_bias))
        });
        assert_eq!(got, want, "{dtype:?} d={dim} bias={with_bias}");
    }
}

/// One mamba1_scan on `dev`: y then the final state, as f32.
fn mamba_on<T: Element>(dev: &Device, dtype: Dtype, shape: ScanShape) -> (Vec<f32>, Vec<f32>) {
    let ScanShape { batch, len, dm, n } = shape;
    let (btd, btn, dn, bdn) =
        ((batch * len * dm) as usize, (batch * len * n) as usize, (dm * n) as usize, (batch * dm * n) as usize);
    let inp = ScanInputs {
        batch: batch as usize,
        len: len as usize,
        dm: dm as usize,
        n: n as usize,
        x: normal(dtype, 1, btd, 1.0),
        dt: normal(dtype, 2, btd, 0.5).into_iter().map(|v| v.abs() + 0.01).collect(),
        bm: normal(dtype, 3, btn, 1.0),
        cm: normal(dtype, 4, btn, 1.0),
        a: normal(Dtype::F32, 5, dn, 1.0).into_iter().map(|v| -v.abs() - 0.1).collect(),
        dskip: normal(dtype, 6, dm as usize, 1.0),
        state_in: normal(Dtype::F32, 7, bdn, 1.0),
    };
    let inputs = ScanUpload::<T>::new(dev, &inp).unwrap();
    let state_in = dev.upload(&inp.state_in).unwrap();
    let mut y = dev.alloc::<T>(btd).unwrap();
    let mut state_out = dev.alloc::<f32>(bdn).unwrap();
    let bufs = inputs.buffers(Some(&state_in), &mut y, &mut state_out);
    mamba1_scan::run(dev, bufs, shape, Stream::DEFAULT)
        .unwrap_or_else(|e| panic!("{dtype:?} {shape:?} on {}: {e}", dev.info().name));
    (y.download().unwrap().into_iter().map(Element::to_f32).collect(), state_out.download().unwrap())
}

#[test]
fn mamba1_scan_through_hip_rs_is_within_tolerance_of_the_cpu_emulator() {
    let (d, cpu) = (device(), Device::cpu());
    // N = 16 (two channels per wave) and N = 32 (one), f32 and a 16-bit type each.
    let cases = [(Dtype::F32, 16), (Dtype::Bf16, 16), (Dtype::F32, 32), (Dtype::F16, 32)];
    for (dtype, n) in cases {
        let shape = ScanShape { batch: 2, len: 7, dm: 20, n };
        let ((y, s), (y_cpu, s_cpu)) =
            with_element!(dtype, T => (mamba_on::<T>(&d, dtype, shape), mamba_on::<T>(&cpu, dtype, shape)));
        // exp is the device's exp2 approximation on the GPU, crate::num::exp on the
        // host; y is rounded to T, so a 16-bit y may differ by one unit of T.
        let y_tol = if dtype == Dtype::F32 { 1e-4 } else { 1e-2 };
        for (what, got, want, tol) in [("y", &y, &y_cpu, y_tol), ("state", &s, &s_cpu, 1e-4)] {
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!((g - w).abs() <= tol * w.abs().max(1.0), "{dtype:?} N={n} {what}[{i}]: {g} vs {w}");
            }
        }
    }
}
