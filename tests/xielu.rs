//! `xielu` on every backend present: the consumer's acceptance data, 0
//! differing bits against the bit-exact reference, in f32, f16 and bf16.

mod common;

use common::{devices, download_bits, label, sentinel, upload};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::kernels_device::geometry::xielu::{
    BF16_WORKGROUP_MEM_BYTES, TABLE_CHUNKS_IN_FLIGHT, TABLE_LO_BITS, TABLE_MIN_ELEMS_PER_WORKGROUP, TABLE_SPAN,
    TABLE_WORKGROUP_SIZE, TABLE_WORKGROUPS_PER_CU, WORKGROUP_SIZE,
};
use mlxcel_amdgpu::reference::{self, Dtype, data, metrics};
use mlxcel_amdgpu::runtime::LaunchDims;
use mlxcel_amdgpu::{Device, Error, Stream};

const P: XieluParams = XieluParams::APERTUS;

fn reference_bits(dtype: Dtype, x: &[f32], p: XieluParams) -> Vec<u32> {
    reference::store_all(dtype, &reference::xielu::xielu(dtype, x, p.alpha_p, p.alpha_n, p.beta, p.eps))
}

#[test]
fn acceptance_data_is_bit_exact_on_every_backend_and_dtype() {
    for dev in devices() {
        for dtype in Dtype::ALL {
            let x = data::xielu_acceptance_inputs(dtype);
            let input = upload(&dev, dtype, &x);
            let mut out = sentinel(&dev, dtype, x.len());
            xielu::run(&dev, dtype, &input, &mut out, x.len(), P, Stream::DEFAULT).unwrap();
            let got = download_bits(dtype, &out);
            metrics::assert_bits_equal(
                dtype,
                &got,
                &reference_bits(dtype, &x, P),
                &format!("xielu {}", label(&dev, dtype)),
            );
        }
    }
}

#[test]
fn negative_control_alpha_n_in_the_positive_branch_is_caught() {
    // The comparison above must be able to fail: a model that uses alpha_n in the
    // positive branch differs from the kernel's output (nrms ~0.3).
    let dev = mlxcel_amdgpu::Device::cpu();
    let dtype = Dtype::Bf16;
    let x = data::xielu_acceptance_inputs(dtype);
    let input = upload(&dev, dtype, &x);
    let mut out = sentinel(&dev, dtype, x.len());
    xielu::run(&dev, dtype, &input, &mut out, x.len(), P, Stream::DEFAULT).unwrap();
    let got = reference::widen_all(dtype, &download_bits(dtype, &out));
    let wrong = XieluParams { alpha_p: P.alpha_n, ..P };
    let wrong_model = reference::xielu::xielu(dtype, &x, wrong.alpha_p, wrong.alpha_n, wrong.beta, wrong.eps);
    let nrms = metrics::nrms(&got, &wrong_model);
    assert!(nrms > 0.2, "the negative control must fail clearly, nrms {nrms}");
    assert!(
        metrics::first_bit_difference(
            dtype,
            &reference::store_all(dtype, &got),
            &reference::store_all(dtype, &wrong_model)
        )
        .is_some()
    );
}

#[test]
fn tails_misalignment_and_in_place_give_the_same_bits() {
    for dev in devices() {
        for dtype in Dtype::ALL {
            let all = data::lcg_uniform(0x5EED, 4099);
            let all = reference::round_all(dtype, &all);
            // n from 1 to a few vectors, starting one element past an aligned address
            // (scalar path) and aligned (vector path), and in place.
            for n in [1usize, 7, 8, 9, 2047, 2048, 2049, 4097] {
                for offset in [0usize, 1] {
                    let x = &all[offset..offset + n];
                    let buf = upload(&dev, dtype, &all[..offset + n]);
                    let out = sentinel(&dev, dtype, offset + n);
                    let es = dtype.size() as u64;
                    unsafe {
                        xielu::launch(
                            &dev,
                            dtype,
                            buf.ptr() + es * offset as u64,
                            out.ptr() + es * offset as u64,
                            n as u64,
                            P,
                            Stream::DEFAULT,
                        )
                    }
                    .unwrap();
                    let got = download_bits(dtype, &out);
                    let what = format!("xielu {} n={n} offset={offset}", label(&dev, dtype));
                    metrics::assert_bits_equal(dtype, &got[offset..], &reference_bits(dtype, x, P), &what);
                    if offset == 1 {
                        assert_eq!(
                            got[0],
                            download_bits(dtype, &sentinel(&dev, dtype, 1))[0],
                            "{what}: wrote before the start"
                        );
                    }
                }
            }
            // In place.
            let mut buf = upload(&dev, dtype, &all);
            unsafe { xielu::launch(&dev, dtype, buf.ptr(), buf.ptr(), all.len() as u64, P, Stream::DEFAULT) }.unwrap();
            metrics::assert_bits_equal(
                dtype,
                &download_bits(dtype, &buf),
                &reference_bits(dtype, &all, P),
                &format!("xielu in place {}", label(&dev, dtype)),
            );
            buf.fill_bytes(0).unwrap();
        }
    }
}

#[test]
fn the_result_does_not_depend_on_the_grid() {
    let dtype = Dtype::F16;
    let x = reference::round_all(dtype, &data::lcg_uniform(7, 20000));
    for dev in devices() {
        let kernel = dev.kernel("xielu_f16").unwrap();
        let input = upload(&dev, dtype, &x);
        let want = reference_bits(dtype, &x, P);
        for groups in [1u32, 3, 64] {
            let out = sentinel(&dev, dtype, x.len());
            let args = xielu::args(input.ptr(), out.ptr(), x.len() as u64, P);
            let dims = LaunchDims { grid: [groups, 1, 1], workgroup_size: 256, workgroup_mem_bytes: 0 };
            unsafe { dev.launch(&kernel, dims, &args, Stream::DEFAULT) }.unwrap();
            metrics::assert_bits_equal(
                dtype,
                &download_bits(dtype, &out),
                &want,
                &format!("xielu grid {groups} on {}", dev.backend()),
            );
        }
    }
}

/// bf16 inputs for the table path: every value of the table's range (each
/// chunk wholly inside it), then every bf16 pattern in order (chunks that mix
/// in zeros, subnormals, huge values, infinities and NaN, which must take the
/// arithmetic), then the LCG values, up to `n`, with a value outside the table
/// at every 97th element: at every position in a chunk and in either half of
/// a 32-bit word, among inside values, and in the last, partial groups too.
fn table_path_inputs(n: usize) -> Vec<u16> {
    let mut bits: Vec<u16> = Vec::with_capacity(n);
    let lo = TABLE_LO_BITS as u16;
    for sign in [0u16, 0x8000] {
        bits.extend((lo..lo + TABLE_SPAN as u16).map(|m| sign | m));
    }
    bits.extend(0..=u16::MAX);
    let start = bits.len();
    let fill = data::lcg_uniform(0x7AB1E, n - start);
    bits.extend(reference::store_all(Dtype::Bf16, &reference::round_all(Dtype::Bf16, &fill)).iter().map(|&b| b as u16));
    // Zero, a subnormal, just below the table's bottom and at its top (both
    // signs), infinity, NaN.
    let hi = lo + TABLE_SPAN as u16;
    let outside = [0x0000, 0x8001, lo - 1, hi, 0x8000 | hi, 0x7F80, 0xFFC1, 0x8000 | (lo - 1)];
    for (k, i) in (start..n).step_by(97).enumerate() {
        bits[i] = outside[k % outside.len()];
    }
    bits
}

/// Runs xielu_bf16 on [`table_path_inputs`] with `dims` and checks the bits;
/// `in_place` writes the output over the input.
fn check_table_path(dev: &Device, n: usize, dims: LaunchDims, p: XieluParams, in_place: bool, what: &str) {
    let dtype = Dtype::Bf16;
    let bits = table_path_inputs(n);
    let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
    let input = dev.upload(&bytes).unwrap();
    let separate = sentinel(dev, dtype, n);
    let out = if in_place { &input } else { &separate };
    let kernel = dev.kernel("xielu_bf16").unwrap();
    let args = xielu::args(input.ptr(), out.ptr(), n as u64, p);
    unsafe { dev.launch(&kernel, dims, &args, Stream::DEFAULT) }.unwrap();
    let x: Vec<f32> = bits.iter().map(|&b| reference::widen(dtype, b as u32)).collect();
    metrics::assert_bits_equal(
        dtype,
        &download_bits(dtype, out),
        &reference_bits(dtype, &x, p),
        &format!("{what} on {}", dev.backend()),
    );
}

/// Lengths for the table path with 2 workgroups (also in the device crate's
/// `uses_table_holds_where_the_tests_expect_it`).
const TABLE_TEST_N: [usize; 2] =
    [2 * TABLE_MIN_ELEMS_PER_WORKGROUP as usize + 8 * 300 + 5, 2 * TABLE_MIN_ELEMS_PER_WORKGROUP as usize + 8 * 70 + 3];

#[test]
fn the_bf16_table_path_is_bit_exact() {
    // Two workgroups with enough elements each for the kernel to build and use
    // its table (the device crate's `uses_table_holds_where_the_tests_expect_it`
    // checks that for these n and grid, since the bits cannot show which path
    // ran), also in place, where chunks outside the table are read again after
    // their group's other chunks were stored; with eps = 0 the same grid takes
    // the model. Neither a whole number of groups nor of chunks: in the last
    // round some threads end on a partial group, of 3 or 4 chunks for the
    // first n and of 1 or 2 for the second (at every size here: the chunks
    // left over fill waves of TABLE_CHUNKS_IN_FLIGHT x 32 in order), and the
    // last partial chunk takes the loop after.
    const { assert!(TABLE_CHUNKS_IN_FLIGHT == 5, "recount the partial groups") };
    for dev in devices() {
        for n in TABLE_TEST_N {
            for size in [64, WORKGROUP_SIZE, TABLE_WORKGROUP_SIZE] {
                let dims =
                    LaunchDims { grid: [2, 1, 1], workgroup_size: size, workgroup_mem_bytes: BF16_WORKGROUP_MEM_BYTES };
                check_table_path(
                    &dev,
                    n,
                    dims,
                    P,
                    false,
                    &format!("xielu bf16 table, n = {n}, 2 workgroups of {size}"),
                );
                check_table_path(
                    &dev,
                    n,
                    dims,
                    P,
                    true,
                    &format!("xielu bf16 table in place, n = {n}, 2 workgroups of {size}"),
                );
                check_table_path(
                    &dev,
                    n,
                    dims,
                    XieluParams { eps: 0.0, ..P },
                    false,
                    &format!("xielu bf16 table grid of {size}, n = {n}, eps = 0"),
                );
            }
        }
        // Through the launcher, which picks the table grid for this device
        // (GPUs only: on the emulator it would take minutes).
        if dev.backend() != mlxcel_amdgpu::runtime::BackendKind::Cpu {
            let table_groups = dev.info().compute_units * TABLE_WORKGROUPS_PER_CU;
            let n = TABLE_MIN_ELEMS_PER_WORKGROUP as usize * table_groups as usize + 8 * 1000 + 3;
            let launcher = xielu::dims(n as u64, Dtype::Bf16, dev.info().compute_units);
            assert_eq!(launcher.grid[0], table_groups);
            check_table_path(&dev, n, launcher, P, false, "xielu bf16 table, the launcher's grid");
        }
    }
}

#[test]
fn the_launcher_picks_the_table_grid_only_for_large_bf16() {
    let big = TABLE_MIN_ELEMS_PER_WORKGROUP * 2 * TABLE_WORKGROUPS_PER_CU as u64;
    let d = xielu::dims(big, Dtype::Bf16, 2);
    assert_eq!(
        (d.grid[0], d.workgroup_size, d.workgroup_mem_bytes),
        (2 * TABLE_WORKGROUPS_PER_CU, TABLE_WORKGROUP_SIZE, BF16_WORKGROUP_MEM_BYTES)
    );
    // One element fewer: one chunk per thread, but the table's memory all the same.
    let d = xielu::dims(big - 1, Dtype::Bf16, 2);
    assert_eq!((d.grid[0] as u64, d.workgroup_size), ((big - 1).div_ceil(WORKGROUP_SIZE as u64 * 8), WORKGROUP_SIZE));
    assert_eq!(d.workgroup_mem_bytes, BF16_WORKGROUP_MEM_BYTES);
    for dtype in [Dtype::F32, Dtype::F16] {
        let d = xielu::dims(big, dtype, 2);
        assert_eq!((d.grid[0] as u64, d.workgroup_mem_bytes), (big.div_ceil(WORKGROUP_SIZE as u64 * 8), 0));
    }
}

#[test]
fn nan_propagates_and_signed_zeros_follow_the_model() {
    for dev in devices() {
        for dtype in Dtype::ALL {
            let x = [f32::NAN, -f32::NAN, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-30, -1e-30];
            let x = reference::round_all(dtype, &x);
            let input = upload(&dev, dtype, &x);
            let mut out = sentinel(&dev, dtype, x.len());
            xielu::run(&dev, dtype, &input, &mut out, x.len(), P, Stream::DEFAULT).unwrap();
            let got = download_bits(dtype, &out);
            metrics::assert_bits_equal(
                dtype,
                &got,
                &reference_bits(dtype, &x, P),
                &format!("xielu specials {}", label(&dev, dtype)),
            );
            assert!(reference::is_nan_bits(dtype, got[0]) && reference::is_nan_bits(dtype, got[1]));
        }
    }
}

#[test]
fn n_zero_is_a_no_op_and_bad_arguments_are_refused() {
    let dev = mlxcel_amdgpu::Device::cpu();
    unsafe { xielu::launch(&dev, Dtype::Bf16, 0, 0, 0, P, Stream::DEFAULT) }.unwrap();
    let err = unsafe { xielu::launch(&dev, Dtype::Bf16, 0, 0x1000, 4, P, Stream::DEFAULT) }.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { argument: "x", .. }), "{err}");
    let err = unsafe { xielu::launch(&dev, Dtype::F32, 0x1002, 0x1000, 4, P, Stream::DEFAULT) }.unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `x`: pointer 0x1002 is not aligned to 4 bytes");
    let err = unsafe {
        xielu::launch(&dev, Dtype::F32, 0x1000, 0x1000, 4, XieluParams { beta: f32::NAN, ..P }, Stream::DEFAULT)
    }
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { argument: "beta", .. }), "{err}");
    let small = dev.alloc::<u8>(6).unwrap();
    let mut out = dev.alloc::<u8>(8).unwrap();
    let err = xielu::run(&dev, Dtype::F16, &small, &mut out, 4, P, Stream::DEFAULT).unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `x`: holds 6 bytes, needs 8 (4 f16 elements)");
}
