//! `xielu` on every backend present: the consumer's acceptance data, 0
//! differing bits against the bit-exact reference, in f32, f16 and bf16; one
//! test per case, backend and dtype (tests/common).

mod common;

use std::ffi::c_void;

use common::{Suite, download_bits, label, sentinel, upload};
use mlxcel_amdgpu::half::{bf16, f16};
use mlxcel_amdgpu::kernels::xielu::{self, XieluParams};
use mlxcel_amdgpu::kernels_device::geometry::xielu::{
    BF16_WORKGROUP_MEM_BYTES, ELEMS_PER_THREAD, F16_TABLE_LO_BITS, F16_TABLE_SPAN, F16_WORKGROUP_MEM_BYTES, MAX_N,
    MAX_WORKGROUPS, TABLE_CHUNKS_IN_FLIGHT, TABLE_LO_BITS, TABLE_MIN_ELEMS_PER_WORKGROUP, TABLE_SPAN,
    TABLE_WORKGROUP_SIZE, TABLE_WORKGROUPS_PER_CU, WORKGROUP_SIZE,
};
use mlxcel_amdgpu::runtime::LaunchDims;
use mlxcel_amdgpu::{BackendKind, Device, Element, Error, Stream};
use mlxcel_amdgpu_testkit::reference::{self, Dtype, data, metrics};

const P: XieluParams = XieluParams::APERTUS;

fn reference_bits(dtype: Dtype, x: &[f32], p: XieluParams) -> Vec<u32> {
    reference::store_all(dtype, &reference::xielu::xielu(dtype, x, p.alpha_p, p.alpha_n, p.beta, p.eps))
}

/// Expects `InvalidArgument` for `argument` and returns its message.
fn invalid(err: Error, argument: &str) -> String {
    match err {
        Error::InvalidArgument { argument: a, message } if a == argument => message,
        other => panic!("expected invalid argument `{argument}`, got {other:?} ({other})"),
    }
}

// ---------------------------------------------------------------- acceptance

fn acceptance_data_is_bit_exact<T: Element>(dev: &Device) {
    let dtype = T::DTYPE;
    let x = data::xielu_acceptance_inputs(dtype);
    let input = upload::<T>(dev, &x);
    let mut out = sentinel::<T>(dev, x.len());
    xielu::run(dev, &input, &mut out, x.len(), P, Stream::DEFAULT).unwrap();
    let got = download_bits(&out);
    metrics::assert_bits_equal(dtype, &got, &reference_bits(dtype, &x, P), &format!("xielu {}", label::<T>(dev)));
}

fn negative_control_alpha_n_in_the_positive_branch_is_caught() {
    // The comparison above must be able to fail: a model that uses alpha_n in the
    // positive branch differs from the kernel's output (nrms ~0.3).
    type T = bf16;
    let dev = Device::cpu();
    let dtype = T::DTYPE;
    let x = data::xielu_acceptance_inputs(dtype);
    let input = upload::<T>(&dev, &x);
    let mut out = sentinel::<T>(&dev, x.len());
    xielu::run(&dev, &input, &mut out, x.len(), P, Stream::DEFAULT).unwrap();
    let got = reference::widen_all(dtype, &download_bits(&out));
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

// ------------------------------------------------- tails, alignment, in place

/// The data of the tail and in-place cases, rounded to the dtype.
fn tail_data(dtype: Dtype) -> Vec<f32> {
    reference::round_all(dtype, &data::lcg_uniform(0x5EED, 4099))
}

/// `n` elements starting `OFFSET` elements past an aligned address (1: the
/// scalar path, 0: the vector path), through the raw launcher.
fn tail<T: Element, const N: usize, const OFFSET: usize>(dev: &Device) {
    let dtype = T::DTYPE;
    let (n, offset) = (N, OFFSET);
    let all = tail_data(dtype);
    let x = &all[offset..offset + n];
    let buf = upload::<T>(dev, &all[..offset + n]);
    let out = sentinel::<T>(dev, offset + n);
    let es = size_of::<T>() as u64;
    unsafe {
        xielu::launch(
            dev,
            T::DTYPE,
            xielu::args(buf.ptr() + es * offset as u64, out.ptr() + es * offset as u64, n as u64, P),
            Stream::DEFAULT,
        )
    }
    .unwrap();
    let got = download_bits(&out);
    let what = format!("xielu {} n={n} offset={offset}", label::<T>(dev));
    metrics::assert_bits_equal(dtype, &got[offset..], &reference_bits(dtype, x, P), &what);
    if offset == 1 {
        assert_eq!(got[0], download_bits(&sentinel::<T>(dev, 1))[0], "{what}: wrote before the start");
    }
}

/// In place through the raw launcher (`x == out`).
fn in_place_raw_launch_is_bit_exact<T: Element>(dev: &Device) {
    let dtype = T::DTYPE;
    let all = tail_data(dtype);
    let buf = upload::<T>(dev, &all);
    unsafe { xielu::launch(dev, T::DTYPE, xielu::args(buf.ptr(), buf.ptr(), all.len() as u64, P), Stream::DEFAULT) }
        .unwrap();
    metrics::assert_bits_equal(
        dtype,
        &download_bits(&buf),
        &reference_bits(dtype, &all, P),
        &format!("xielu in place (launch) {}", label::<T>(dev)),
    );
}

/// In place through the safe wrapper.
fn in_place_run_in_place_is_bit_exact<T: Element>(dev: &Device) {
    let dtype = T::DTYPE;
    let all = tail_data(dtype);
    let mut buf = upload::<T>(dev, &all);
    xielu::run_in_place(dev, &mut buf, all.len(), P, Stream::DEFAULT).unwrap();
    metrics::assert_bits_equal(
        dtype,
        &download_bits(&buf),
        &reference_bits(dtype, &all, P),
        &format!("xielu run_in_place {}", label::<T>(dev)),
    );
}

/// `out` one element past `x` (`OUT_AFTER`) or before it: refused, naming
/// both, and nothing written.
fn partial_overlap_is_refused_and_writes_nothing<T: Element, const OUT_AFTER: bool>(dev: &Device) {
    let n = 64usize;
    let all = tail_data(T::DTYPE);
    let buf = upload::<T>(dev, &all[..n + 1]);
    let before = download_bits(&buf);
    let es = size_of::<T>() as u64;
    let (x, out) = if OUT_AFTER { (buf.ptr(), buf.ptr() + es) } else { (buf.ptr() + es, buf.ptr()) };
    let err = unsafe { xielu::launch(dev, T::DTYPE, xielu::args(x, out, n as u64, P), Stream::DEFAULT) }.unwrap_err();
    let message = invalid(err, "out");
    assert!(message.contains("overlaps `x`"), "{message}");
    assert!(message.contains("`out` may only be exactly `x`"), "{message}");
    assert_eq!(download_bits(&buf), before, "a refused launch wrote on {}", label::<T>(dev));
}

// ------------------------------------------------------------------- the grid

/// f16 over 20000 elements on a grid of `GROUPS` workgroups of 256.
fn the_result_does_not_depend_on_the_grid<const GROUPS: u32>(dev: &Device) {
    type T = mlxcel_amdgpu::half::f16;
    let dtype = T::DTYPE;
    let x = reference::round_all(dtype, &data::lcg_uniform(7, 20000));
    let kernel = dev.kernel("xielu_f16").unwrap();
    let input = upload::<T>(dev, &x);
    let want = reference_bits(dtype, &x, P);
    let out = sentinel::<T>(dev, x.len());
    let args = xielu::args(input.ptr(), out.ptr(), x.len() as u64, P);
    let dims = LaunchDims { grid: [GROUPS, 1, 1], workgroup_size: 256, workgroup_mem_bytes: 0 };
    unsafe { dev.launch(&kernel, dims, &args.values(), Stream::DEFAULT) }.unwrap();
    metrics::assert_bits_equal(
        dtype,
        &download_bits(&out),
        &want,
        &format!("xielu grid {GROUPS} on {}", dev.backend()),
    );
}

// ------------------------------------------------------- bf16 and f16 table paths

/// Inputs of `T`'s table path: every value of the table's range (each chunk
/// wholly inside it), then every 16-bit pattern in order (chunks that mix in
/// zeros, subnormals, huge values, infinities and NaN, which must take the
/// arithmetic), then the LCG values, up to `n`, with a value outside the table
/// at every 97th element: at every position in a chunk and in either half of
/// a 32-bit word, among inside values, and in the last, partial groups too.
fn table_path_inputs<T: Element + TableElement>(n: usize) -> Vec<u16> {
    let (lo, span) = (T::TABLE_LO_BITS, T::TABLE_SPAN);
    let mut bits: Vec<u16> = Vec::with_capacity(n);
    for sign in [0u16, 0x8000] {
        bits.extend((lo..lo + span).map(|m| sign | m));
    }
    bits.extend(0..=u16::MAX);
    let start = bits.len();
    let fill = data::lcg_uniform(T::SEED, n - start);
    bits.extend(reference::store_all(T::DTYPE, &reference::round_all(T::DTYPE, &fill)).iter().map(|&b| b as u16));
    // Zero, a subnormal, just below the table's bottom and at its top (both
    // signs), infinity, NaN.
    let hi = lo + span;
    let outside = [0x0000, 0x8001, lo - 1, hi, 0x8000 | hi, T::INFINITY, T::A_NAN, 0x8000 | (lo - 1)];
    for (k, i) in (start..n).step_by(97).enumerate() {
        bits[i] = outside[k % outside.len()];
    }
    bits
}

/// Runs `xielu_bf16` or `xielu_f16` on [`table_path_inputs`] with `dims` and
/// checks the bits; `in_place` writes the output over the input.
fn check_table_path<T: Element + TableElement>(
    dev: &Device,
    n: usize,
    dims: LaunchDims,
    p: XieluParams,
    in_place: bool,
    what: &str,
) {
    let dtype = T::DTYPE;
    let bits = table_path_inputs::<T>(n);
    let input = dev.upload(&bits.iter().map(|&b| T::from_bits(b)).collect::<Vec<T>>()).unwrap();
    let separate = sentinel::<T>(dev, n);
    let out = if in_place { &input } else { &separate };
    let kernel = dev.kernel(&format!("xielu_{dtype}")).unwrap();
    let args = xielu::args(input.ptr(), out.ptr(), n as u64, p);
    unsafe { dev.launch(&kernel, dims, &args.values(), Stream::DEFAULT) }.unwrap();
    let x: Vec<f32> = bits.iter().map(|&b| reference::widen(dtype, b as u32)).collect();
    metrics::assert_bits_equal(
        dtype,
        &download_bits(out),
        &reference_bits(dtype, &x, p),
        &format!("{what} on {}", dev.backend()),
    );
}

/// The 16-bit types with a table.
trait TableElement {
    fn from_bits(bits: u16) -> Self;
    /// The table's workgroup memory.
    const TABLE_MEM: u32;
    /// The table's smallest magnitude (bits) and its entries per sign.
    const TABLE_LO_BITS: u16;
    const TABLE_SPAN: u16;
    /// The bits of +infinity and of a NaN.
    const INFINITY: u16;
    const A_NAN: u16;
    /// The LCG seed of [`table_path_inputs`]' fill.
    const SEED: u64;
}
impl TableElement for bf16 {
    fn from_bits(bits: u16) -> Self {
        bf16::from_bits(bits)
    }
    const TABLE_MEM: u32 = BF16_WORKGROUP_MEM_BYTES;
    const TABLE_LO_BITS: u16 = TABLE_LO_BITS as u16;
    const TABLE_SPAN: u16 = TABLE_SPAN as u16;
    const INFINITY: u16 = 0x7F80;
    const A_NAN: u16 = 0xFFC1;
    const SEED: u64 = 0x7AB1E;
}
impl TableElement for f16 {
    fn from_bits(bits: u16) -> Self {
        f16::from_bits(bits)
    }
    const TABLE_MEM: u32 = F16_WORKGROUP_MEM_BYTES;
    const TABLE_LO_BITS: u16 = F16_TABLE_LO_BITS as u16;
    const TABLE_SPAN: u16 = F16_TABLE_SPAN as u16;
    const INFINITY: u16 = 0x7C00;
    const A_NAN: u16 = 0xFE01;
    const SEED: u64 = 0xF16;
}

/// Lengths for the table path with 2 workgroups (also in the device crate's
/// `uses_table_holds_where_the_tests_expect_it`).
const TABLE_TEST_N: [usize; 2] =
    [2 * TABLE_MIN_ELEMS_PER_WORKGROUP as usize + 8 * 300 + 5, 2 * TABLE_MIN_ELEMS_PER_WORKGROUP as usize + 8 * 70 + 3];

/// The variants of a table-path case.
const TABLE: u8 = 0;
const TABLE_IN_PLACE: u8 = 1;
const TABLE_GRID_NOT_FAST: u8 = 2;

// Two workgroups with enough elements each for the kernel to build and use
// its table (the device crate's `uses_table_holds_where_the_tests_expect_it`
// checks that for these n and grid, since the bits cannot show which path
// ran), also in place, where chunks outside the table are read again after
// their group's other chunks were stored; with parameters the fast
// evaluation does not take (`NOT_FAST_EPS`) the same grid takes the model.
// Neither a whole number of groups nor of chunks: in the last round some threads end on a partial group, of 3 or 4 chunks for the
// first n and of 1 or 2 for the second (at every size here: the chunks
// left over fill waves of TABLE_CHUNKS_IN_FLIGHT x 32 in order), and the
// last partial chunk takes the loop after.
const _: () = assert!(TABLE_CHUNKS_IN_FLIGHT == 5, "recount the partial groups");

/// One table-path case: `TABLE_TEST_N[N_INDEX]` elements of `T` on 2 workgroups of `SIZE`.
fn the_table_path_is_bit_exact<T: Element + TableElement, const N_INDEX: usize, const SIZE: u32, const VARIANT: u8>(
    dev: &Device,
) {
    let n = TABLE_TEST_N[N_INDEX];
    let dtype = T::DTYPE;
    let dims = LaunchDims { grid: [2, 1, 1], workgroup_size: SIZE, workgroup_mem_bytes: T::TABLE_MEM };
    match VARIANT {
        TABLE => check_table_path::<T>(
            dev,
            n,
            dims,
            P,
            false,
            &format!("xielu {dtype} table, n = {n}, 2 workgroups of {SIZE}"),
        ),
        TABLE_IN_PLACE => check_table_path::<T>(
            dev,
            n,
            dims,
            P,
            true,
            &format!("xielu {dtype} table in place, n = {n}, 2 workgroups of {SIZE}"),
        ),
        _ => {
            let eps = NOT_FAST_EPS;
            check_table_path::<T>(
                dev,
                n,
                dims,
                XieluParams { eps, ..P },
                false,
                &format!("xielu {dtype} table grid of {SIZE}, n = {n}, eps = {eps} (not fast)"),
            )
        }
    }
}

/// Through the launcher, which picks the table grid for this device. The
/// launch runs on GPUs only (on the emulator it would take minutes); there
/// only the grid choice is checked.
fn the_table_path_through_the_launchers_grid<T: Element + TableElement>(dev: &Device) {
    let table_groups = dev.info().compute_units * TABLE_WORKGROUPS_PER_CU;
    let n = TABLE_MIN_ELEMS_PER_WORKGROUP as usize * table_groups as usize + 8 * 1000 + 3;
    let launcher = xielu::dims(n as u64, T::DTYPE, dev.info().compute_units);
    assert_eq!((launcher.grid[0], launcher.workgroup_mem_bytes), (table_groups, T::TABLE_MEM));
    if dev.backend() == BackendKind::Cpu {
        eprintln!("cpu: only the launcher's grid checked; the launch of {n} elements takes minutes on the emulator");
        return;
    }
    check_table_path::<T>(dev, n, launcher, P, false, &format!("xielu {} table, the launcher's grid", T::DTYPE));
}

fn the_launcher_picks_the_table_grid_only_for_large_16_bit_n() {
    let big = TABLE_MIN_ELEMS_PER_WORKGROUP * 2 * TABLE_WORKGROUPS_PER_CU as u64;
    let one_chunk_a_thread = |n: u64| n.div_ceil(WORKGROUP_SIZE as u64 * 8);
    for (dtype, mem) in [(Dtype::Bf16, BF16_WORKGROUP_MEM_BYTES), (Dtype::F16, F16_WORKGROUP_MEM_BYTES)] {
        let d = xielu::dims(big, dtype, 2);
        assert_eq!(
            (d.grid[0], d.workgroup_size, d.workgroup_mem_bytes),
            (2 * TABLE_WORKGROUPS_PER_CU, TABLE_WORKGROUP_SIZE, mem),
            "{dtype}"
        );
        // One element fewer: one chunk per thread; bf16 keeps the table's
        // memory all the same, f16 (60 KiB, which would cost occupancy) has none.
        let d = xielu::dims(big - 1, dtype, 2);
        assert_eq!((d.grid[0] as u64, d.workgroup_size), (one_chunk_a_thread(big - 1), WORKGROUP_SIZE), "{dtype}");
        assert_eq!(d.workgroup_mem_bytes, if dtype == Dtype::Bf16 { mem } else { 0 }, "{dtype}");
    }
    // A grid capped at MAX_WORKGROUPS can still be a table grid for the
    // kernel (2^37 elements and more on 2^20 workgroups): then f16 gets the memory too.
    let d = xielu::dims(1 << 38, Dtype::F16, 1 << 22);
    assert_eq!(
        (d.grid[0], d.workgroup_size, d.workgroup_mem_bytes),
        (MAX_WORKGROUPS, WORKGROUP_SIZE, F16_WORKGROUP_MEM_BYTES)
    );
    let d = xielu::dims(big, Dtype::F32, 2);
    assert_eq!((d.grid[0] as u64, d.workgroup_mem_bytes), (one_chunk_a_thread(big), 0));
    // The f16 table holds the magnitudes in [2^-11, 16).
    assert_eq!(f16::from_bits(F16_TABLE_LO_BITS as u16).to_f32(), 2f32.powi(-11));
    assert_eq!(f16::from_bits((F16_TABLE_LO_BITS + F16_TABLE_SPAN) as u16).to_f32(), 16.0);
}

// ----------------------------------------------------------------- specials

fn nan_propagates_and_signed_zeros_follow_the_model<T: Element>(dev: &Device) {
    let dtype = T::DTYPE;
    let x = [f32::NAN, -f32::NAN, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-30, -1e-30];
    let x = reference::round_all(dtype, &x);
    let input = upload::<T>(dev, &x);
    let mut out = sentinel::<T>(dev, x.len());
    xielu::run(dev, &input, &mut out, x.len(), P, Stream::DEFAULT).unwrap();
    let got = download_bits(&out);
    metrics::assert_bits_equal(
        dtype,
        &got,
        &reference_bits(dtype, &x, P),
        &format!("xielu specials {}", label::<T>(dev)),
    );
    assert!(reference::is_nan_bits(dtype, got[0]) && reference::is_nan_bits(dtype, got[1]));
}

/// Every bit pattern of a 16-bit type (zeros, subnormals, infinities and NaNs
/// among them), bit for bit against the reference, under parameter sets that
/// reach both branches with scalars of either sign and size: the 16-bit types
/// have few enough values to check them all on every backend. In bf16 the
/// sets outside the fast evaluation's ranges on AMD and the emulator (`eps`
/// of zero or below 2^-20 in magnitude, `alpha_n = 0`) take it on NVIDIA,
/// which rounds bf16 exactly everywhere.
fn every_input_is_bit_exact<T: Element + TableElement>(dev: &Device) {
    let dtype = T::DTYPE;
    let x = reference::widen_all(dtype, &(0..=u16::MAX as u32).collect::<Vec<u32>>());
    let sets = [
        P,
        XieluParams { alpha_p: 3.5, alpha_n: 0.01, beta: -0.75, eps: -0.0 },
        XieluParams { alpha_p: 1e-3, alpha_n: 20.0, beta: 2.0, eps: -0.5 },
        XieluParams { alpha_p: -0.5, alpha_n: 0.0, beta: 1e-6, eps: -1e-7 },
        XieluParams { eps: 0.0, ..P },
    ];
    for p in sets {
        let input = upload::<T>(dev, &x);
        let mut out = sentinel::<T>(dev, x.len());
        xielu::run(dev, &input, &mut out, x.len(), p, Stream::DEFAULT).unwrap();
        let what = format!("xielu on every {dtype} input, {p:?} {}", label::<T>(dev));
        metrics::assert_bits_equal(dtype, &download_bits(&out), &reference_bits(dtype, &x, p), &what);
    }
}

fn every_f16_input_is_bit_exact(dev: &Device) {
    every_input_is_bit_exact::<f16>(dev)
}

fn every_bf16_input_is_bit_exact(dev: &Device) {
    every_input_is_bit_exact::<bf16>(dev)
}

/// An `eps` the fast evaluation never takes, in any dtype on any target: it
/// needs `eps <= 0` (bf16's parameter ranges apply on AMD and the emulator
/// only; NVIDIA rounds bf16 exactly everywhere, so `eps = 0` would take it there).
const NOT_FAST_EPS: f32 = 0.25;

/// With `eps > 0` the kernel evaluates every element by the model itself, in
/// whole vector chunks and in the tail (the fast evaluation needs `eps <= 0`);
/// specials sit inside whole chunks.
fn a_positive_eps_takes_the_models_path_bit_exactly<T: Element>(dev: &Device) {
    let dtype = T::DTYPE;
    let p = XieluParams { eps: NOT_FAST_EPS, ..P };
    let mut x = tail_data(dtype);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, 0.1, 0.3, -70000.0];
    for (i, v) in specials.iter().enumerate() {
        x[13 * i + 3] = *v;
    }
    let x = reference::round_all(dtype, &x);
    let input = upload::<T>(dev, &x);
    let mut out = sentinel::<T>(dev, x.len());
    xielu::run(dev, &input, &mut out, x.len(), p, Stream::DEFAULT).unwrap();
    let what = format!("xielu eps={NOT_FAST_EPS} {}", label::<T>(dev));
    metrics::assert_bits_equal(dtype, &download_bits(&out), &reference_bits(dtype, &x, p), &what);
}

// ------------------------------------------------------ arguments refused

fn n_zero_is_a_no_op<T: Element>(dev: &Device) {
    unsafe { xielu::launch(dev, T::DTYPE, xielu::args(0, 0, 0, P), Stream::DEFAULT) }.unwrap();
    let input = dev.alloc::<T>(0).unwrap();
    let mut out = dev.alloc::<T>(0).unwrap();
    xielu::run(dev, &input, &mut out, 0, P, Stream::DEFAULT).unwrap();
}

fn a_null_x_is_refused<T: Element>(dev: &Device) {
    let err = unsafe { xielu::launch(dev, T::DTYPE, xielu::args(0, 0x1000, 4, P), Stream::DEFAULT) }.unwrap_err();
    assert_eq!(invalid(err, "x"), "is a null pointer");
}

/// `n = MAX_N` passes the limit: the launch goes on to the pointers (a null `x`
/// is then what is refused, so nothing of 2^60 elements is touched).
fn n_at_the_limit_passes_the_n_check<T: Element>(dev: &Device) {
    let err = unsafe { xielu::launch(dev, T::DTYPE, xielu::args(0, 0x1000, MAX_N, P), Stream::DEFAULT) }.unwrap_err();
    assert_eq!(invalid(err, "x"), "is a null pointer");
}

/// `n = MAX_N + 1` is refused naming `n`, before any pointer is looked at.
fn n_above_the_limit_is_refused<T: Element>(dev: &Device) {
    for n in [MAX_N + 1, u64::MAX] {
        let err =
            unsafe { xielu::launch(dev, T::DTYPE, xielu::args(0x1000, 0x1000, n, P), Stream::DEFAULT) }.unwrap_err();
        assert_eq!(invalid(err, "n"), format!("{n} is above the limit of {MAX_N} (2^60) elements"));
    }
}

fn a_misaligned_x_is_refused() {
    let dev = Device::cpu();
    let err =
        unsafe { xielu::launch(&dev, Dtype::F32, xielu::args(0x1002, 0x2000, 4, P), Stream::DEFAULT) }.unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `x`: pointer 0x1002 is not aligned to its f32 element (4 bytes)");
}

/// Every scalar: NaN and infinities are refused, naming it, before any launch.
fn non_finite_scalars_are_refused<T: Element>(dev: &Device) {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let cases: [(&str, XieluParams); 4] = [
            ("alpha_p", XieluParams { alpha_p: bad, ..P }),
            ("alpha_n", XieluParams { alpha_n: bad, ..P }),
            ("beta", XieluParams { beta: bad, ..P }),
            ("eps", XieluParams { eps: bad, ..P }),
        ];
        for (name, p) in cases {
            let err = unsafe { xielu::launch(dev, T::DTYPE, xielu::args(0x1000, 0x1000, 4, p), Stream::DEFAULT) }
                .unwrap_err();
            assert_eq!(invalid(err, name), format!("{bad} is not a finite number"));
        }
    }
}

fn a_short_buffer_is_refused() {
    let dev = Device::cpu();
    type T = mlxcel_amdgpu::half::f16;
    let small = dev.alloc::<T>(3).unwrap();
    let mut out = dev.alloc::<T>(4).unwrap();
    let err = xielu::run(&dev, &small, &mut out, 4, P, Stream::DEFAULT).unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `x`: holds 6 bytes, needs 8 (4 f16 elements)");
    let mut buf = dev.alloc::<T>(3).unwrap();
    let err = xielu::run_in_place(&dev, &mut buf, 4, P, Stream::DEFAULT).unwrap_err();
    assert_eq!(err.to_string(), "invalid argument `x`: holds 6 bytes, needs 8 (4 f16 elements)");
}

/// The CPU backend has no streams: a non-NULL one is refused, naming `stream`,
/// and nothing is written.
fn the_cpu_backend_refuses_a_non_null_stream<T: Element>(dev: &Device) {
    let stream = Stream(0x5000 as *mut c_void);
    let x = tail_data(T::DTYPE)[..100].to_vec();
    let input = upload::<T>(dev, &x);
    let mut out = sentinel::<T>(dev, x.len());
    let untouched = download_bits(&out);
    let message = invalid(xielu::run(dev, &input, &mut out, x.len(), P, stream).unwrap_err(), "stream");
    assert!(message.contains("not NULL"), "{message}");
    assert_eq!(download_bits(&out), untouched, "a refused launch wrote");
    let mut buf = upload::<T>(dev, &x);
    let before = download_bits(&buf);
    invalid(xielu::run_in_place(dev, &mut buf, x.len(), P, stream).unwrap_err(), "stream");
    assert_eq!(download_bits(&buf), before, "a refused launch wrote");
}

/// Registers [`tail`] for each length, at both offsets.
macro_rules! tails {
    ($suite:expr; $($n:literal),+) => {
        $(
            $suite.per_backend_and_dtype(concat!("tail_n", $n, "_aligned"), typed_with!(tail, $n, 0));
            $suite.per_backend_and_dtype(concat!("tail_n", $n, "_offset1"), typed_with!(tail, $n, 1));
        )+
    };
}

/// The largest grid of the reliability sweep (docs/reliability.md):
/// `MAX_WORKGROUPS` workgroups of one chunk per thread, then 5 elements past
/// them, n = 2^31 + 5 (4 GiB a buffer). The input repeats the 4099 tail values,
/// so each output is checked against the reference of its value. On CUDA only.
fn edge_the_largest_grid<T: Element>(dev: &Device) {
    let dtype = T::DTYPE;
    let n = (MAX_WORKGROUPS as usize) * (WORKGROUP_SIZE as usize) * ELEMS_PER_THREAD + 5;
    let pattern = tail_data(dtype);
    let want = reference_bits(dtype, &pattern, P);
    let stored: Vec<T> = pattern.iter().map(|&v| T::from_f32(v)).collect();
    let x: Vec<T> = (0..n).map(|i| stored[i % stored.len()]).collect();
    let x = dev.upload(&x).unwrap();
    let mut out = sentinel::<T>(dev, n);
    xielu::run(dev, &x, &mut out, n, P, Stream::DEFAULT).unwrap();
    let got = download_bits(&out);
    let what = format!("xielu {} n={n}", label::<T>(dev));
    if let Some(i) = (0..n).find(|&i| got[i] != want[i % want.len()]) {
        panic!("{what}: element {i} is {:#x}, the reference {:#x}", got[i], want[i % want.len()]);
    }
}

/// Registers the table-path cases of one dtype, length and workgroup size.
macro_rules! table_cases {
    ($suite:expr; $($t:ident, $n_index:literal: $size:expr, $size_name:literal);+ $(;)?) => {
        $(
            $suite.per_backend(
                concat!(stringify!($t), "_table_path_n", $n_index, "_groups_of_", $size_name),
                the_table_path_is_bit_exact::<$t, $n_index, { $size }, TABLE>,
            );
            $suite.per_backend(
                concat!(stringify!($t), "_table_path_in_place_n", $n_index, "_groups_of_", $size_name),
                the_table_path_is_bit_exact::<$t, $n_index, { $size }, TABLE_IN_PLACE>,
            );
            $suite.per_backend(
                concat!(stringify!($t), "_table_grid_not_fast_n", $n_index, "_groups_of_", $size_name),
                the_table_path_is_bit_exact::<$t, $n_index, { $size }, TABLE_GRID_NOT_FAST>,
            );
        )+
    };
}

fn main() {
    const { assert!(WORKGROUP_SIZE == 256 && TABLE_WORKGROUP_SIZE == 512, "rename the table cases") };
    let mut suite = Suite::new();
    suite.per_backend_and_dtype("acceptance_data_is_bit_exact", typed!(acceptance_data_is_bit_exact)).single(
        "negative_control_alpha_n_in_the_positive_branch_is_caught::cpu::bf16",
        negative_control_alpha_n_in_the_positive_branch_is_caught,
    );
    tails!(suite; 1, 7, 8, 9, 2047, 2048, 2049, 4097);
    named_cases!(suite; per_backend_and_dtype: in_place_raw_launch_is_bit_exact, in_place_run_in_place_is_bit_exact;);
    typed_with_cases!(suite, partial_overlap_is_refused_and_writes_nothing;
        "partial_overlap_out_after_x_is_refused" => true;
        "partial_overlap_out_before_x_is_refused" => false;
    );
    suite
        .per_backend("grid_independence_f16_1_group", the_result_does_not_depend_on_the_grid::<1>)
        .per_backend("grid_independence_f16_3_groups", the_result_does_not_depend_on_the_grid::<3>)
        .per_backend("grid_independence_f16_64_groups", the_result_does_not_depend_on_the_grid::<64>);
    table_cases!(suite;
        bf16, 0: 64, "64"; bf16, 0: WORKGROUP_SIZE, "256"; bf16, 0: TABLE_WORKGROUP_SIZE, "512";
        bf16, 1: 64, "64"; bf16, 1: WORKGROUP_SIZE, "256"; bf16, 1: TABLE_WORKGROUP_SIZE, "512";
        f16, 0: 64, "64"; f16, 0: TABLE_WORKGROUP_SIZE, "512";
        f16, 1: WORKGROUP_SIZE, "256";
    );
    suite
        .per_backend("bf16_table_path_through_the_launchers_grid", the_table_path_through_the_launchers_grid::<bf16>)
        .per_backend("f16_table_path_through_the_launchers_grid", the_table_path_through_the_launchers_grid::<f16>)
        .single(
            "the_launcher_picks_the_table_grid_only_for_large_16_bit_n",
            the_launcher_picks_the_table_grid_only_for_large_16_bit_n,
        );
    named_cases!(suite;
        per_backend_and_dtype: nan_propagates_and_signed_zeros_follow_the_model,
            a_positive_eps_takes_the_models_path_bit_exactly;
        cpu_per_dtype: n_zero_is_a_no_op, a_null_x_is_refused, n_at_the_limit_passes_the_n_check,
            n_above_the_limit_is_refused;
    );
    suite.per_backend("every_f16_input_is_bit_exact", every_f16_input_is_bit_exact);
    suite.per_backend("every_bf16_input_is_bit_exact", every_bf16_input_is_bit_exact);
    suite.single("a_misaligned_x_is_refused::f32", a_misaligned_x_is_refused);
    suite.cuda_per_dtype("edge_the_largest_grid", typed!(edge_the_largest_grid));
    named_cases!(suite; cpu_per_dtype: non_finite_scalars_are_refused;);
    suite.single("a_short_buffer_is_refused::f16", a_short_buffer_is_refused);
    named_cases!(suite; cpu_per_dtype: the_cpu_backend_refuses_a_non_null_stream;);
    suite.run();
}
