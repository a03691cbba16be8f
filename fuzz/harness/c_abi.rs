//! The C ABI fuzz harness, shared by the `c_abi` fuzz target
//! (fuzz/fuzz_targets/c_abi.rs) and the corpus replay test (tests/fuzz_corpus.rs).
//!
//! Each input is decoded into one call of one C function on the CPU backend,
//! with argument values taken from the input: dtype codes (valid and not),
//! shapes (small ones that run, and the limits, one past them, 0, 2^31, 2^32 - 1),
//! scalars (NaN and infinities included), expert ids, a stream, and at most
//! one planted pointer defect (null, misaligned, wrapping the address space,
//! a partial or exact overlap with another buffer). Every buffer the call may
//! touch is a real host buffer of the size the shape needs (capped at
//! [`CAP_BYTES`]; a valid shape beyond the cap is given a null pointer, which
//! the call must refuse before touching memory).
//!
//! What must hold (a panic here is a finding):
//! - the status is `OK` or `INVALID_ARGUMENT` (never `INTERNAL`, which is a
//!   caught panic, nor a backend error), and a failure has a message naming
//!   the argument (`invalid argument `name`: ...`);
//! - a valid call returns `OK`, with the result checked where a reference is
//!   cheap (xielu bit for bit, the combines' sums, the MoE status word, the
//!   block, with or without a shared expert, bit for bit the router and the
//!   batch launches it is made of);
//! - a call with one defect is refused, naming the argument the defect is in;
//! - the shape predicates (`*_supports`) agree with the launches, and
//!   `mlxcel_amdgpu_moe_scratch_bytes` and `mlxcel_amdgpu_moe_block_scratch_bytes`
//!   are exact or an error, never wrapped.

use std::ffi::{CStr, c_char, c_void};

use mlxcel_amdgpu::ffi::MlxcelAmdgpuStatus::{self, *};
use mlxcel_amdgpu::ffi::*;
use mlxcel_amdgpu::kernels::moe::MoeShape;
use mlxcel_amdgpu::kernels::moe::router::{self, RouterQuant, RouterShape};
use mlxcel_amdgpu::{Device, Stream};
use mlxcel_amdgpu_testkit::reference::{self, Dtype};

/// The most bytes of one buffer the harness allocates.
pub const CAP_BYTES: u128 = 1 << 20;

/// The input, read front to back; zeros once it is used up.
struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let (&b, rest) = self.data.split_first().unwrap_or((&0, &[]));
        self.data = rest;
        b
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// Mostly `0..=small`; else one of `edges`, or any u32.
    fn dim(&mut self, small: u32, edges: &[u32]) -> u32 {
        let b = self.u8();
        match b {
            0..=223 => b as u32 % (small + 1),
            224..=254 => edges[(b - 224) as usize % edges.len()],
            255 => self.u32(),
        }
    }
    /// A dtype code: mostly valid (0, 1, 2), sometimes not.
    fn dtype(&mut self) -> u32 {
        match self.u8() % 16 {
            b @ 0..=11 => (b % 3) as u32,
            12 => 3,
            13 => u32::MAX,
            _ => self.u32(),
        }
    }
    /// A scalar: mostly `normal`, sometimes a special value or any bits.
    fn scalar(&mut self, normal: f32) -> f32 {
        match self.u8() % 16 {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            3 => 0.0,
            4 => -normal,
            5 => f32::from_bits(self.u32()),
            _ => normal,
        }
    }
}

fn dtype_of(code: u32) -> Option<Dtype> {
    match code {
        0 => Some(Dtype::F32),
        1 => Some(Dtype::F16),
        2 => Some(Dtype::Bf16),
        _ => None,
    }
}

/// One pointer argument: its name, element size, element count for the shape
/// (0: the call touches none), whether the kernel writes it, whether it may be
/// NULL, and the arguments it may be exactly equal to.
struct Param {
    name: &'static str,
    elem: usize,
    elems: u128,
    writes: bool,
    nullable: bool,
    may_equal: &'static [&'static str],
}

impl Param {
    fn bytes(&self) -> u128 {
        self.elems * self.elem as u128
    }
}

fn p(name: &'static str, elem: usize, elems: u128) -> Param {
    Param { name, elem, elems, writes: false, nullable: false, may_equal: &[] }
}

fn w(name: &'static str, elem: usize, elems: u128, may_equal: &'static [&'static str]) -> Param {
    Param { name, elem, elems, writes: true, nullable: false, may_equal }
}

/// The one planted pointer defect of a call.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Defect {
    None,
    Null(usize),
    Misaligned(usize),
    Wraps(usize),
    /// `.0` starts one element of `.1` into `.1`.
    Partial(usize, usize),
    /// `.0` is `.1`.
    Exact(usize, usize),
}

/// The host buffers of one call and the pointers handed to it.
struct Buffers {
    storage: Vec<Vec<u64>>,
    ptrs: Vec<u64>,
    /// The argument the call must name, if the defect is one it must refuse.
    refused: Option<[&'static str; 2]>,
}

impl Buffers {
    /// Allocates every buffer (all of the largest size, so that an overlap
    /// planted into another stays in bounds), fills it from `seed`, and plants
    /// `defect`. `work` is false when the call touches no memory at all;
    /// the buffers `nulls` are NULL before the defect is planted; `heavy`: a
    /// valid call would take the emulator too long (treated as over the cap).
    fn new(params: &[Param], input: &mut Input, work: bool, nulls: &[usize], heavy: bool) -> Buffers {
        let largest = params.iter().map(Param::bytes).max().unwrap_or(0);
        let over_cap = largest > CAP_BYTES || heavy;
        let words = if over_cap { 8 } else { (largest as usize).div_ceil(8) + 8 };
        let mut seed = input.u32() as u64 | 1;
        let storage: Vec<Vec<u64>> = params
            .iter()
            .map(|_| {
                (0..words)
                    .map(|_| {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        // Small finite values in every dtype: each 16-bit half a
                        // bf16/f16 of magnitude below 2, each word an f32 likewise.
                        let r = seed >> 16;
                        (r & 0x3C3F_3C3F_3C3F_3C3F) ^ (r & 0x8000_8000_8000_8000)
                    })
                    .collect()
            })
            .collect();
        let mut ptrs: Vec<u64> = storage.iter().map(|v| v.as_ptr() as u64).collect();
        for &i in nulls {
            ptrs[i] = 0;
        }
        let n = params.len();
        let pick = |b: u8| b as usize % n.max(1);
        let defect = match input.u8() % 12 {
            0 => Defect::Null(pick(input.u8())),
            1 => Defect::Misaligned(pick(input.u8())),
            2 => Defect::Wraps(pick(input.u8())),
            3 => Defect::Partial(pick(input.u8()), pick(input.u8())),
            4 => Defect::Exact(pick(input.u8()), pick(input.u8())),
            _ => Defect::None,
        };
        let touched = |i: usize| work && params[i].elems > 0;
        let mut refused = None;
        match defect {
            Defect::None => {}
            Defect::Null(i) => {
                ptrs[i] = 0;
                if touched(i) && !params[i].nullable {
                    refused = Some([params[i].name; 2]);
                }
            }
            Defect::Misaligned(i) => {
                ptrs[i] += 1;
                if touched(i) {
                    refused = Some([params[i].name; 2]);
                }
            }
            Defect::Wraps(i) => {
                // Aligned, and its first element already ends at 2^64.
                ptrs[i] = 0u64.wrapping_sub(params[i].elem as u64);
                if touched(i) {
                    refused = Some([params[i].name; 2]);
                }
            }
            Defect::Partial(i, j) | Defect::Exact(i, j)
                if i != j && ptrs[j] != 0 && (params[i].writes || params[j].writes) =>
            {
                // One element into `j`, where `j` has more than one (else at
                // its start: a partial overlap unless the sizes agree).
                let into = params[j].bytes() > params[j].elem as u128 && matches!(defect, Defect::Partial(..));
                ptrs[i] = ptrs[j] + if into { params[j].elem as u64 } else { 0 };
                let allowed = !into
                    && params[i].bytes() == params[j].bytes()
                    && (params[i].may_equal.contains(&params[j].name) || params[j].may_equal.contains(&params[i].name));
                if touched(i) && touched(j) && !allowed {
                    refused = Some([params[i].name, params[j].name]);
                }
            }
            Defect::Partial(..) | Defect::Exact(..) => {}
        }
        // A shape too large to allocate: the first buffer it touches is NULL,
        // and that (or the planted defect) must be refused before anything is read.
        if over_cap && work {
            let i = params.iter().position(|q| q.elems > 0 && !q.nullable).expect("a buffer the call touches");
            ptrs[i] = 0;
            refused = Some([params[i].name, refused.map_or(params[i].name, |r| r[0])]);
        }
        Buffers { storage, ptrs, refused }
    }

    fn ptr(&self, i: usize) -> *mut c_void {
        self.ptrs[i] as *mut c_void
    }

    /// The storage that pointer `i` points to the start of, if any.
    fn storage_of(&self, i: usize) -> Option<usize> {
        self.storage.iter().position(|v| v.as_ptr() as u64 == self.ptrs[i])
    }

    /// The bytes of buffer `i`'s storage (the pointer may have been replaced).
    fn bytes_of(&self, i: usize, len: usize) -> Vec<u8> {
        self.storage[i].iter().flat_map(|w| w.to_le_bytes()).take(len).collect()
    }
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(mlxcel_amdgpu_last_error()) }.to_string_lossy().into_owned()
}

/// What a call must answer: `Ok(())` for OK, `Err(names)` for INVALID_ARGUMENT
/// naming one of `names` (empty: any name).
type Expected = Result<(), Vec<&'static str>>;

fn check(what: &str, status: MlxcelAmdgpuStatus, expected: &Expected) {
    let message = last_error();
    match (status, expected) {
        (MLXCEL_AMDGPU_OK, Ok(())) => assert!(message.is_empty(), "{what}: OK with the message {message:?}"),
        (MLXCEL_AMDGPU_INVALID_ARGUMENT, Err(names)) => {
            assert!(message.starts_with("invalid argument `"), "{what}: {message:?}");
            assert!(
                names.is_empty() || names.iter().any(|n| message.starts_with(&format!("invalid argument `{n}`"))),
                "{what}: expected an error naming one of {names:?}, got {message:?}"
            );
        }
        _ => panic!("{what}: status {status:?} ({message:?}), expected {expected:?}"),
    }
}

/// The expectation of a call of `dtype` whose shape check gave `shape_ok`,
/// whose scalars are `scalars_ok`, with `bufs` and `stream`; `work` as for
/// [`Buffers::new`].
fn expected(dtype: u32, shape_ok: bool, scalars_ok: bool, bufs: &Buffers, stream: bool, work: bool) -> Expected {
    if dtype_of(dtype).is_none() {
        Err(vec!["dtype"])
    } else if !shape_ok || !scalars_ok {
        Err(vec![])
    } else if let Some(names) = bufs.refused {
        Err(names.to_vec())
    } else if stream && work {
        Err(vec!["stream"])
    } else {
        Ok(())
    }
}

fn stream_of(input: &mut Input) -> (*mut c_void, bool) {
    if input.u8().is_multiple_of(16) { (0x5000 as *mut c_void, true) } else { (std::ptr::null_mut(), false) }
}

/// Runs one input. Panics when the library breaks a promise.
pub fn run(data: &[u8]) {
    let mut input = Input { data };
    // The process-wide device: the CPU emulator (re-selected after a select case).
    static CPU: std::sync::Once = std::sync::Once::new();
    CPU.call_once(select_cpu);
    // Twelve cases by the first byte modulo 12, except its last four values
    // (252 = 21 * 12 keeps the twelve equally likely), which were added later
    // and so leave most of the committed corpus selecting what it always did:
    // 253 to 255 the router, and 252, which no committed input began with
    // when the batch launches and the block came, those.
    match input.u8() {
        252 => moe_batch(&mut input),
        253..=255 => moe_router(&mut input),
        b => match b % 12 {
            0 => xielu(&mut input),
            1 => add3(&mut input),
            2 => mamba(&mut input),
            3 | 4 => moe_gemv(&mut input, false),
            5 => moe_gemv(&mut input, true),
            6 => moe_combine(&mut input),
            7 => moe_routed(&mut input),
            8 => scratch_bytes(&mut input),
            9 => describe(&mut input),
            10 => predicates(&mut input),
            _ => select(&mut input),
        },
    }
}

fn select_cpu() {
    let status = unsafe { mlxcel_amdgpu_select_backend(c"cpu".as_ptr()) };
    assert_eq!(status, MLXCEL_AMDGPU_OK, "select cpu: {}", last_error());
}

fn xielu(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let n = input.dim(4096, &[0, 1, 8, 9, u32::MAX]) as u64;
    let n = match input.u8() {
        0 => MLXCEL_AMDGPU_XIELU_MAX_N,
        1 => MLXCEL_AMDGPU_XIELU_MAX_N + 1,
        2 => u64::MAX,
        _ => n,
    };
    let (ap, an, be, ep) = (input.scalar(0.8731), input.scalar(0.6042), input.scalar(0.5), input.scalar(-1e-6));
    let params = [p("x", size, n as u128), w("out", size, n as u128, &["x"])];
    let shape_ok = n <= MLXCEL_AMDGPU_XIELU_MAX_N;
    let work = shape_ok && n > 0;
    let bufs = Buffers::new(&params, input, work, &[], false);
    let (stream, bad_stream) = stream_of(input);
    let scalars_ok = [ap, an, be, ep].iter().all(|v| v.is_finite());
    let exp = expected(dtype, shape_ok, scalars_ok, &bufs, bad_stream, work);
    let bytes = if work && bufs.refused.is_none() { n as usize * size } else { 0 };
    let before = bufs.storage_of(0).map(|i| bufs.bytes_of(i, bytes));
    let status = unsafe { mlxcel_amdgpu_xielu(dtype, bufs.ptr(0), bufs.ptr(1), n, ap, an, be, ep, stream) };
    check("xielu", status, &exp);
    if let (MLXCEL_AMDGPU_OK, true, Some(before), Some(out)) = (status, work, before, bufs.storage_of(1)) {
        let t = dtype_of(dtype).unwrap();
        let x = reference::from_le_bytes(t, &before);
        let want = reference::store_all(t, &reference::xielu::xielu(t, &x, ap, an, be, ep));
        let got = reference::from_le_bytes(t, &bufs.bytes_of(out, n as usize * size));
        let got = reference::store_all(t, &got);
        for (i, (g, e)) in got.iter().zip(&want).enumerate() {
            let both_nan = reference::is_nan_bits(t, *g) && reference::is_nan_bits(t, *e);
            assert!(g == e || both_nan, "xielu {t:?} n {n} element {i}: {g:#x}, reference {e:#x}");
        }
    }
}

fn add3(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let rows = input.dim(4, &[0, MLXCEL_AMDGPU_ADD3_MAX_ROWS, MLXCEL_AMDGPU_ADD3_MAX_ROWS + 1, u32::MAX]);
    let d = input.dim(300, &[0, 1, 4096, 4097, MLXCEL_AMDGPU_ADD3_MAX_D, MLXCEL_AMDGPU_ADD3_MAX_D + 1, u32::MAX]);
    let eps = input.scalar(1e-5);
    let with_bias = input.u8().is_multiple_of(2);
    let (row, col) = (rows as u128 * d as u128, d as u128);
    let mut params = vec![p("a", size, row), p("b", size, row), p("x", size, row), p("w", size, col)];
    params.push(Param { nullable: true, ..p("bias", size, col) });
    params.push(w("x_new", size, row, &["a", "b", "x"]));
    params.push(w("h", size, row, &["a", "b", "x"]));
    let shape_ok = (1..=MLXCEL_AMDGPU_ADD3_MAX_D).contains(&d) && rows <= MLXCEL_AMDGPU_ADD3_MAX_ROWS;
    let work = shape_ok && rows > 0;
    let bufs = Buffers::new(&params, input, work, if with_bias { &[] } else { &[4] }, false);
    let (stream, bad_stream) = stream_of(input);
    let scalars_ok = eps.is_finite() && eps >= 0.0;
    let exp = expected(dtype, shape_ok, scalars_ok, &bufs, bad_stream, work);
    let supported = mlxcel_amdgpu_add3_layer_norm_supports(dtype, rows, d);
    assert_eq!(supported, dtype_of(dtype).is_some() && shape_ok, "add3 supports({dtype}, {rows}, {d})");
    let b = |i| bufs.ptr(i);
    let status =
        unsafe { mlxcel_amdgpu_add3_layer_norm(dtype, b(0), b(1), b(2), b(3), b(4), b(5), b(6), rows, d, eps, stream) };
    check("add3_layer_norm", status, &exp);
}

fn mamba(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let batch = input.dim(2, &[0, 1, MLXCEL_AMDGPU_MAMBA1_MAX_BATCH, MLXCEL_AMDGPU_MAMBA1_MAX_BATCH + 1, u32::MAX]);
    let len = input.dim(6, &[0, 1, 1 << 31, u32::MAX]);
    let dm = input.dim(40, &[0, 1, 1 << 31, u32::MAX]);
    let n = input.dim(MLXCEL_AMDGPU_MAMBA1_MAX_N, &[0, 16, 17, MLXCEL_AMDGPU_MAMBA1_MAX_N + 1, u32::MAX]);
    let (b, l, m, s) = (batch as u128, len as u128, dm as u128, n as u128);
    let params = [
        p("x", size, b * l * m),
        p("dt", size, b * l * m),
        p("bm", size, b * l * s),
        p("cm", size, b * l * s),
        p("a", 4, m * s),
        p("dskip", size, m),
        p("state_in", 4, b * m * s),
        w("y", size, b * l * m, &[]),
        w("state_out", 4, b * m * s, &["state_in"]),
    ];
    let in_range = (1..=MLXCEL_AMDGPU_MAMBA1_MAX_N).contains(&n)
        && len >= 1
        && (1..=MLXCEL_AMDGPU_MAMBA1_MAX_BATCH).contains(&batch)
        && dm >= 1;
    // Every buffer's bytes must fit in an isize.
    let shape_ok = in_range && params.iter().all(|q| q.bytes() <= isize::MAX as u128);
    // The emulator runs a workgroup per 8 channels and batch, each `len`
    // steps: beyond a few thousand such steps a valid call takes seconds (a
    // batch of 65535 took over 20 s), so it is given a NULL like a shape
    // beyond the cap.
    let heavy = b * m.div_ceil(8) * l > 4096;
    let bufs = Buffers::new(&params, input, shape_ok, &[], heavy);
    let (stream, bad_stream) = stream_of(input);
    let exp = expected(dtype, shape_ok, true, &bufs, bad_stream, shape_ok);
    let supported = mlxcel_amdgpu_mamba1_scan_supports(dtype, batch, len, dm, n);
    assert_eq!(supported, dtype_of(dtype).is_some() && shape_ok, "mamba supports({dtype}, {batch}, {len}, {dm}, {n})");
    let q = |i| bufs.ptr(i);
    let status = unsafe {
        mlxcel_amdgpu_mamba1_scan(
            dtype,
            q(0),
            q(1),
            q(2),
            q(3),
            q(4) as *const f32,
            q(5),
            q(6) as *const f32,
            q(7),
            q(8) as *mut f32,
            batch,
            len,
            dm,
            n,
            stream,
        )
    };
    check("mamba1_scan", status, &exp);
}

/// A MoE shape from the input, and whether it is valid (by the contract).
fn moe_shape(input: &mut Input) -> (MoeShape, bool) {
    let bits = [4, 8, 0, 2, 3, 16, 32, u32::MAX][input.u8() as usize % 8 * input.u8().is_multiple_of(4) as usize];
    let gs = [64, 32, 128, 0, 16, 96, 256, u32::MAX][input.u8() as usize % 8 * input.u8().is_multiple_of(4) as usize];
    let cols = |input: &mut Input| match input.u8() % 8 {
        0 => input.dim(300, &[0, 1, 12288, 12289, u32::MAX]),
        _ => gs.saturating_mul(1 + input.u8() as u32 % 3),
    };
    let n_experts = input.dim(3, &[0, 1, 1 << 16, u32::MAX]);
    let k = input.dim(3, &[0, 1, MLXCEL_AMDGPU_MOE_MAX_K, MLXCEL_AMDGPU_MOE_MAX_K + 1, u32::MAX]);
    let (din, dff) = (cols(input), cols(input));
    let shape = MoeShape { n_experts, k, din, dff, bits, group_size: gs };
    let col_ok = |c: u32| {
        (1..=MLXCEL_AMDGPU_MOE_MAX_COLS).contains(&c)
            && gs != 0
            && c.is_multiple_of(gs)
            && (bits == 0 || c.is_multiple_of(32 / bits))
    };
    let words = |rows: u32, cols: u32| n_experts as u128 * rows as u128 * (cols as u128 * bits as u128 / 32) * 4;
    let valid = (bits == 4 || bits == 8)
        && [32, 64, 128].contains(&gs)
        && n_experts >= 1
        && (1..=MLXCEL_AMDGPU_MOE_MAX_K).contains(&k)
        && col_ok(din)
        && col_ok(dff)
        && words(dff, din) <= u64::MAX as u128
        && words(din, dff) <= u64::MAX as u128;
    (shape, valid)
}

/// The quantized stack of `rows` by `cols` of a shape: words, scales, biases.
fn stack(s: &MoeShape, names: [&'static str; 3], size: usize, rows: u32, cols: u32) -> [Param; 3] {
    let e = s.n_experts as u128 * rows as u128;
    let words = if s.bits == 0 { 0 } else { e * (cols as u128 * s.bits as u128 / 32) };
    let groups = e * cols.checked_div(s.group_size).unwrap_or(0) as u128;
    [p(names[0], 4, words), p(names[1], size, groups), p(names[2], size, groups)]
}

/// Expert ids from the input, mostly in range; returns the status word the
/// kernels must store (`1 + k` of the first id out of range, else 0).
fn fill_ids(bufs: &mut Buffers, i: usize, k: u32, n_experts: u32, input: &mut Input) -> u32 {
    let ids = &mut bufs.storage[i];
    let mut first_bad = 0;
    for slot in 0..(k as usize).min(64).min(2 * ids.len()) {
        let id = match input.u8() % 16 {
            0 => n_experts,
            1 => u32::MAX,
            b => b as u32 % n_experts.max(1),
        };
        let word = &mut ids[slot / 2];
        *word = (*word & !(0xFFFF_FFFF << (32 * (slot % 2)))) | ((id as u64) << (32 * (slot % 2)));
        if id >= n_experts && first_bad == 0 {
            first_bad = 1 + slot as u32;
        }
    }
    first_bad
}

fn moe_gemv(input: &mut Input, down: bool) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let (s, valid) = moe_shape(input);
    let (k, din, dff) = (s.k as u128, s.din as u128, s.dff as u128);
    let mut params: Vec<Param> = Vec::new();
    if down {
        params.push(p("idx", 4, k));
        params.extend(stack(&s, ["w2", "s2", "b2"], size, s.din, s.dff));
        params.extend([p("act", 4, k * dff), p("scores", 4, k), w("part", 4, k * din, &[])]);
    } else {
        params.extend([p("x", size, din), p("idx", 4, k)]);
        params.extend(stack(&s, ["w1", "s1", "b1"], size, s.dff, s.din));
        params.push(w("act", 4, k * dff, &[]));
    }
    params.push(Param { nullable: true, ..w("status", 4, 1, &[]) });
    let mut bufs = Buffers::new(&params, input, valid, &[], false);
    let idx = params.iter().position(|q| q.name == "idx").unwrap();
    let want_status = fill_ids(&mut bufs, idx, s.k, s.n_experts, input);
    let ids_checked = bufs.storage_of(idx) == Some(idx);
    let st = params.len() - 1;
    bufs.storage[st][0] = 0;
    let (stream, bad_stream) = stream_of(input);
    let exp = expected(dtype, valid, true, &bufs, bad_stream, valid);
    let supported = mlxcel_amdgpu_moe_supports(dtype, s);
    assert_eq!(supported, dtype_of(dtype).is_some() && valid, "moe supports({dtype}, {s:?})");
    let q = |i: usize| bufs.ptr(i);
    let status = unsafe {
        if down {
            mlxcel_amdgpu_moe_down(
                dtype,
                s,
                q(0) as _,
                q(1) as _,
                q(2),
                q(3),
                q(4) as _,
                q(5) as _,
                q(6) as _,
                q(7) as _,
                stream,
            )
        } else {
            mlxcel_amdgpu_moe_fc1_relu2(dtype, s, q(0), q(1) as _, q(2) as _, q(3), q(4), q(5) as _, q(6) as _, stream)
        }
    };
    check(if down { "moe_down" } else { "moe_fc1_relu2" }, status, &exp);
    if status == MLXCEL_AMDGPU_OK && ids_checked && bufs.storage_of(st) == Some(st) {
        let got = bufs.storage[st][0] as u32;
        assert_eq!(got, want_status, "moe status word for {s:?}");
    }
}

fn moe_combine(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let k = input.dim(6, &[0, 1, MLXCEL_AMDGPU_MOE_MAX_K, MLXCEL_AMDGPU_MOE_MAX_K + 1, u32::MAX]);
    let din = input.dim(600, &[0, 1, 1 << 31, u32::MAX]);
    let params = [p("part", 4, k as u128 * din as u128), w("out", size, din as u128, &[])];
    let valid = (1..=MLXCEL_AMDGPU_MOE_MAX_K).contains(&k) && din >= 1;
    let bufs = Buffers::new(&params, input, valid, &[], false);
    let (stream, bad_stream) = stream_of(input);
    let exp = expected(dtype, valid, true, &bufs, bad_stream, valid);
    let status = unsafe { mlxcel_amdgpu_moe_combine(dtype, bufs.ptr(0) as _, bufs.ptr(1), k, din, stream) };
    check("moe_combine", status, &exp);
    if status == MLXCEL_AMDGPU_OK && valid && (bufs.storage_of(0), bufs.storage_of(1)) == (Some(0), Some(1)) {
        let t = dtype_of(dtype).unwrap();
        let part = reference::from_le_bytes(Dtype::F32, &bufs.bytes_of(0, k as usize * din as usize * 4));
        let got = reference::store_all(t, &reference::from_le_bytes(t, &bufs.bytes_of(1, din as usize * size)));
        for h in 0..din as usize {
            let sum = (0..k as usize).fold(0.0f32, |acc, j| acc + part[j * din as usize + h]);
            let want = reference::store_all(t, &[sum])[0];
            assert_eq!(got[h], want, "moe_combine {t:?} k {k} din {din} element {h}");
        }
    }
}

fn moe_routed(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let (s, valid) = moe_shape(input);
    let (k, din) = (s.k as u128, s.din as u128);
    let need = (k * s.dff as u128 * 4).next_multiple_of(256) + k * din * 4;
    let mut params = vec![p("x", size, din), p("idx", 4, k), p("scores", 4, k)];
    params.extend(stack(&s, ["w1", "s1", "b1"], size, s.dff, s.din));
    params.extend(stack(&s, ["w2", "s2", "b2"], size, s.din, s.dff));
    params.push(w("out", size, din, &[]));
    params.push(w("scratch", 4, need.div_ceil(4), &[]));
    params.push(Param { nullable: true, ..w("status", 4, 1, &[]) });
    let mut bufs = Buffers::new(&params, input, valid, &[], false);
    let want_status = fill_ids(&mut bufs, 1, s.k, s.n_experts, input);
    let ids_checked = bufs.storage_of(1) == Some(1);
    let st = params.len() - 1;
    bufs.storage[st][0] = 0;
    // The length of the scratch: what it needs, or one byte less (refused).
    let short = input.u8().is_multiple_of(8);
    let scratch_len = if short { need.saturating_sub(1) } else { need }.min(usize::MAX as u128) as usize;
    let (stream, bad_stream) = stream_of(input);
    let mut exp = expected(dtype, valid, true, &bufs, bad_stream, valid);
    if let (Err(names), Some(_)) = (&mut exp, bufs.refused) {
        // act and part live in the scratch: a defect there, or an overlap
        // with it, may be named by either of them.
        names.extend(["scratch", "act", "part"]);
    } else if short && valid && dtype_of(dtype).is_some() {
        // The length is checked before every pointer but the scratch's own.
        exp = Err(vec!["scratch"]);
    }
    let q = |i: usize| bufs.ptr(i);
    let status = unsafe {
        mlxcel_amdgpu_moe_routed_forward(
            dtype,
            s,
            q(0),
            q(1) as _,
            q(2) as _,
            q(3) as _,
            q(4),
            q(5),
            q(6) as _,
            q(7),
            q(8),
            q(9),
            q(10),
            scratch_len,
            q(11) as _,
            stream,
        )
    };
    check("moe_routed_forward", status, &exp);
    if status == MLXCEL_AMDGPU_OK && ids_checked && bufs.storage_of(st) == Some(st) {
        assert_eq!(bufs.storage[st][0] as u32, want_status, "moe routed status word for {s:?}");
    }
}

fn moe_router(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let m =
        input.dim(3, &[0, 1, MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS, MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS + 1, u32::MAX]);
    let max_e = MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS;
    let n_experts = input.dim(40, &[0, 1, max_e, max_e + 1, u32::MAX]);
    let k = input.dim(10, &[0, 1, MLXCEL_AMDGPU_MOE_ROUTER_MAX_K, MLXCEL_AMDGPU_MOE_ROUTER_MAX_K + 1, u32::MAX]);
    let din = input.dim(300, &[0, 1, 1 << 31, u32::MAX]);
    let norm = [0, 1, 0, 1, 0, 1, 2, u32::MAX][input.u8() as usize % 8];
    let (mm, e, kk, d) = (m as u128, n_experts as u128, k as u128, din as u128);
    let params = [
        p("x", size, mm * d),
        p("wr", size, e * d),
        w("logits", 4, mm * e, &[]),
        w("ids", 4, mm * kk, &[]),
        w("scores", 4, mm * kk, &[]),
    ];
    let shape_ok = (1..=MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS).contains(&m)
        && (1..=max_e).contains(&n_experts)
        && (1..=MLXCEL_AMDGPU_MOE_ROUTER_MAX_K).contains(&k)
        && k <= n_experts
        && din >= 1;
    let bufs = Buffers::new(&params, input, shape_ok, &[], false);
    let (stream, bad_stream) = stream_of(input);
    let exp = expected(dtype, shape_ok, norm <= 1, &bufs, bad_stream, shape_ok);
    let supported = mlxcel_amdgpu_moe_router_supports(dtype, m, n_experts, k, din);
    assert_eq!(
        supported,
        dtype_of(dtype).is_some() && shape_ok,
        "moe_router supports({dtype}, {m}, {n_experts}, {k}, {din})"
    );
    let inputs = [0, 1].map(|i| bufs.storage_of(i).map(|s| bufs.bytes_of(s, params[i].bytes() as usize)));
    let q = |i: usize| bufs.ptr(i);
    let status = unsafe {
        mlxcel_amdgpu_moe_router(dtype, q(0), q(1), q(2) as _, q(3) as _, q(4) as _, m, n_experts, k, din, norm, stream)
    };
    check("moe_router", status, &exp);
    let outputs = [2, 3, 4].map(|i| bufs.storage_of(i) == Some(i));
    if let (MLXCEL_AMDGPU_OK, [Some(x), Some(wr)], [true, true, true]) = (status, inputs, outputs) {
        check_router(dtype_of(dtype).unwrap(), &bufs, &x, &wr, [m, n_experts, k, din], norm == 1);
    }
}

/// A valid router call's outputs against the testkit's reference: the logits
/// within `1e-5 * max|logit|` of f64 sums; per token distinct ids, none less
/// probable than an expert left out (beyond f32 rounding: near ties may go
/// either way), each score within 1e-5 of the reference's for that id.
fn check_router(t: Dtype, bufs: &Buffers, x: &[u8], wr: &[u8], [m, e, k, din]: [u32; 4], renorm: bool) {
    let (m, e, k, din) = (m as usize, e as usize, k as usize, din as usize);
    let x = reference::from_le_bytes(t, x);
    let wr = reference::from_le_bytes(t, wr);
    let want = reference::moe::router_logits(&x, &wr, m, e, din);
    let f32s = |i: usize, n: usize| reference::from_le_bytes(Dtype::F32, &bufs.bytes_of(i, n * 4));
    let logits = f32s(2, m * e);
    let scale = want.iter().fold(f32::MIN_POSITIVE, |a, v| a.max(v.abs()));
    for (i, (g, r)) in logits.iter().zip(&want).enumerate() {
        assert!((g - r).abs() <= 1e-5 * scale, "moe_router {t:?} logit {i}: {g}, reference {r}");
    }
    let ids: Vec<u32> =
        bufs.bytes_of(3, m * k * 4).chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let scores = f32s(4, m * k);
    let (ref_ids, ref_scores) = reference::moe::topk(&logits, m, e, k, renorm);
    for tok in 0..m {
        let row = &logits[tok * e..(tok + 1) * e];
        let top = row.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v)) as f64;
        let p = |id: u32| (row[id as usize] as f64 - top).exp();
        let chosen = &ids[tok * k..(tok + 1) * k];
        let least = chosen.iter().map(|&id| {
            assert!((id as usize) < e, "moe_router token {tok}: id {id} of {e} experts");
            p(id)
        });
        let least = least.fold(f64::INFINITY, f64::min);
        for other in (0..e as u32).filter(|id| !chosen.contains(id)) {
            assert!(p(other) <= least * (1.0 + 1e-6), "moe_router token {tok}: expert {other} left out, more probable");
        }
        assert_eq!(
            chosen.iter().collect::<std::collections::BTreeSet<_>>().len(),
            k,
            "moe_router token {tok}: ids {chosen:?}"
        );
        for (j, &id) in chosen.iter().enumerate() {
            // The reference's score for the same expert, wherever it placed it.
            if let Some(r) = ref_ids[tok * k..(tok + 1) * k].iter().position(|&i| i == id) {
                let (g, r) = (scores[tok * k + j], ref_scores[tok * k + r]);
                assert!(
                    (g - r).abs() <= 1e-5 * r.abs().max(1e-30),
                    "moe_router token {tok} expert {id}: score {g}, reference {r}"
                );
            }
        }
    }
}

/// The batch launches, the whole block (its router dense or quantized, with a
/// shared expert or not) and its scratch size, by the next byte: 250 to 252,
/// added later, the block with a quantized router, 253 to 255, added last, the
/// block with a shared expert, and the rest modulo 5 (250 = 50 * 5 keeps the
/// five equally likely) what they always selected.
fn moe_batch(input: &mut Input) {
    match input.u8() {
        250..=252 => moe_block(input, true),
        253..=255 => moe_block_shared(input),
        b => match b % 5 {
            0 => moe_gateup_batch(input),
            1 => moe_down_batch(input),
            2 => moe_combine_batch(input),
            3 => moe_block(input, false),
            _ => block_scratch_bytes(input),
        },
    }
}

/// A quantized router's `router_bits` and `router_group_size`: mostly valid,
/// sometimes not.
fn router_format(input: &mut Input) -> RouterQuant {
    let bits = [8, 4, 8, 4, 8, 6, 0, u32::MAX][input.u8() as usize % 8];
    let group_size = [64, 32, 128, 64, 32, 16, 0, 48][input.u8() as usize % 8];
    RouterQuant { bits, group_size }
}

/// A token count: mostly 0 to 3, else 1, the limit, one past it or 2^32 - 1.
fn tokens(input: &mut Input) -> u32 {
    let most = MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS;
    input.dim(3, &[0, 1, most, most + 1, u32::MAX])
}

/// Whether the batch launches take `m` tokens of `k` slots: `m = 1` is the
/// single-token launch, which takes any `k` the shape does.
fn batch_ok(m: u32, k: u32) -> bool {
    (1..=MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS).contains(&m)
        && (m == 1 || m as u64 * k as u64 <= MLXCEL_AMDGPU_MOE_MAX_BATCH_SLOTS as u64)
}

/// An activation code (or `norm_topk_prob`): mostly 0 or 1, sometimes not.
fn code(input: &mut Input) -> u32 {
    [0, 1, 0, 1, 0, 1, 2, u32::MAX][input.u8() as usize % 8]
}

/// Whether `m` tokens of `s` take the emulator too long: the gate, up and down
/// products of every slot (about 2^21 took a second).
fn experts_heavy(s: &MoeShape, m: u32) -> bool {
    m as u128 * s.k as u128 * s.din as u128 * s.dff as u128 > 1 << 20
}

fn moe_gateup_batch(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let (s, valid) = moe_shape(input);
    let m = tokens(input);
    let activation = code(input);
    let valid = valid && batch_ok(m, s.k);
    let slots = m as u128 * s.k as u128;
    let mut params = vec![p("x", size, m as u128 * s.din as u128), p("idx", 4, slots)];
    params.extend(stack(&s, ["wg", "sg", "bg"], size, s.dff, s.din));
    params.extend(stack(&s, ["wu", "su", "bu"], size, s.dff, s.din));
    params.push(w("act", 4, slots * s.dff as u128, &[]));
    params.push(Param { nullable: true, ..w("status", 4, 1, &[]) });
    let mut bufs = Buffers::new(&params, input, valid, &[], experts_heavy(&s, m));
    let want_status = fill_ids(&mut bufs, 1, slots.min(64) as u32, s.n_experts, input);
    let ids_checked = slots <= 64 && bufs.storage_of(1) == Some(1);
    let st = params.len() - 1;
    bufs.storage[st][0] = 0;
    let (stream, bad_stream) = stream_of(input);
    // The activation is checked before the dtype.
    let exp =
        if activation > 1 { Err(vec!["activation"]) } else { expected(dtype, valid, true, &bufs, bad_stream, valid) };
    let q = |i: usize| bufs.ptr(i);
    let status = unsafe {
        mlxcel_amdgpu_moe_gateup_batch(
            dtype,
            s,
            m,
            activation,
            q(0),
            q(1) as _,
            q(2) as _,
            q(3),
            q(4),
            q(5) as _,
            q(6),
            q(7),
            q(8) as _,
            q(9) as _,
            stream,
        )
    };
    check("moe_gateup_batch", status, &exp);
    if status == MLXCEL_AMDGPU_OK && ids_checked && bufs.storage_of(st) == Some(st) {
        assert_eq!(bufs.storage[st][0] as u32, want_status, "moe_gateup_batch status word for m {m}, {s:?}");
    }
}

fn moe_down_batch(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let (s, valid) = moe_shape(input);
    let m = tokens(input);
    let valid = valid && batch_ok(m, s.k);
    let slots = m as u128 * s.k as u128;
    let mut params = vec![p("idx", 4, slots)];
    params.extend(stack(&s, ["w2", "s2", "b2"], size, s.din, s.dff));
    params.extend([p("act", 4, slots * s.dff as u128), p("scores", 4, slots)]);
    params.push(w("part", 4, slots * s.din as u128, &[]));
    params.push(Param { nullable: true, ..w("status", 4, 1, &[]) });
    let mut bufs = Buffers::new(&params, input, valid, &[], experts_heavy(&s, m));
    let want_status = fill_ids(&mut bufs, 0, slots.min(64) as u32, s.n_experts, input);
    let ids_checked = slots <= 64 && bufs.storage_of(0) == Some(0);
    let st = params.len() - 1;
    bufs.storage[st][0] = 0;
    let (stream, bad_stream) = stream_of(input);
    let exp = expected(dtype, valid, true, &bufs, bad_stream, valid);
    let q = |i: usize| bufs.ptr(i);
    let status = unsafe {
        mlxcel_amdgpu_moe_down_batch(
            dtype,
            s,
            m,
            q(0) as _,
            q(1) as _,
            q(2),
            q(3),
            q(4) as _,
            q(5) as _,
            q(6) as _,
            q(7) as _,
            stream,
        )
    };
    check("moe_down_batch", status, &exp);
    if status == MLXCEL_AMDGPU_OK && ids_checked && bufs.storage_of(st) == Some(st) {
        assert_eq!(bufs.storage[st][0] as u32, want_status, "moe_down_batch status word for m {m}, {s:?}");
    }
}

fn moe_combine_batch(input: &mut Input) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let k = input.dim(6, &[0, 1, MLXCEL_AMDGPU_MOE_MAX_K, MLXCEL_AMDGPU_MOE_MAX_K + 1, u32::MAX]);
    let din = input.dim(600, &[0, 1, 1 << 31, u32::MAX]);
    let m = tokens(input);
    let (mm, kk, d) = (m as u128, k as u128, din as u128);
    let params = [p("part", 4, mm * kk * d), w("out", size, mm * d, &[])];
    let valid = batch_ok(m, k) && (1..=MLXCEL_AMDGPU_MOE_MAX_K).contains(&k) && din >= 1;
    let bufs = Buffers::new(&params, input, valid, &[], false);
    let (stream, bad_stream) = stream_of(input);
    let exp = expected(dtype, valid, true, &bufs, bad_stream, valid);
    let status = unsafe { mlxcel_amdgpu_moe_combine_batch(dtype, bufs.ptr(0) as _, bufs.ptr(1), m, k, din, stream) };
    check("moe_combine_batch", status, &exp);
    if status == MLXCEL_AMDGPU_OK && valid && (bufs.storage_of(0), bufs.storage_of(1)) == (Some(0), Some(1)) {
        let t = dtype_of(dtype).unwrap();
        let (m, k, din) = (m as usize, k as usize, din as usize);
        let part = reference::from_le_bytes(Dtype::F32, &bufs.bytes_of(0, m * k * din * 4));
        let got = reference::store_all(t, &reference::from_le_bytes(t, &bufs.bytes_of(1, m * din * size)));
        for (at, &g) in got.iter().enumerate() {
            let (tok, h) = (at / din, at % din);
            let sum = (0..k).fold(0.0f32, |acc, j| acc + part[(tok * k + j) * din + h]);
            let want = reference::store_all(t, &[sum])[0];
            assert_eq!(g, want, "moe_combine_batch {t:?} m {m} k {k} din {din} token {tok} element {h}");
        }
    }
}

/// Whether the block takes `m` tokens of `s`, a shape `moe_shape` found
/// valid: the router's limits and the batch launches'.
fn block_ok(s: &MoeShape, m: u32) -> bool {
    (1..=MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS).contains(&m)
        && (1..=MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS).contains(&s.n_experts)
        && (1..=MLXCEL_AMDGPU_MOE_ROUTER_MAX_K).contains(&s.k)
        && s.k <= s.n_experts
        && batch_ok(m, s.k)
}

/// The block's scratch as its contract lays it out: `logits [m, E]`, `ids`
/// and `scores [m, K]`, `act [m, K, Dff]`, `part [m, K, Din]`, the shared
/// gate's logits (none without a shared expert) and the arrival counts `[m,
/// ceil(Din / 32)]`, 4-byte elements, each on 256 bytes.
fn block_scratch(s: &MoeShape, m: u32) -> u128 {
    let (m, e, k) = (m as u128, s.n_experts as u128, s.k as u128);
    let arrivals = m * (s.din as u128).div_ceil(32);
    let sizes = [m * e, m * k, m * k, m * k * s.dff as u128, m * k * s.din as u128, 0, arrivals];
    sizes.iter().fold(0u128, |at, &n| at.next_multiple_of(256) + 4 * n)
}

/// `mlxcel_amdgpu_moe_block`, or with `quantized` `_moe_block_quantized_router`.
fn moe_block(input: &mut Input, quantized: bool) {
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let (s, valid) = moe_shape(input);
    let m = tokens(input);
    let (activation, norm) = (code(input), code(input));
    let quant = quantized.then(|| router_format(input));
    let format_ok = quant.is_none_or(|q| q.validate(s.din).is_ok());
    let valid = valid && block_ok(&s, m) && format_ok;
    let need = block_scratch(&s, m);
    let (mm, din, e) = (m as u128, s.din as u128, s.n_experts as u128);
    let mut params = vec![p("x", size, mm * din)];
    match quant {
        // The codes' and groups' counts of a valid format (else of 8 bits, group 32: any size will do).
        Some(q) => {
            let (bits, group_size) = if format_ok { (q.bits, q.group_size) } else { (8, 32) };
            params.push(p("wq", 4, e * din * bits as u128 / 32));
            params.push(p("sq", size, e * din / group_size as u128));
            params.push(p("bq", size, e * din / group_size as u128));
        }
        None => params.push(p("wr", size, e * din)),
    }
    // The index of the gate's weights: every later buffer moves by the router's extra two.
    let r = params.len();
    params.extend(stack(&s, ["wg", "sg", "bg"], size, s.dff, s.din));
    params.extend(stack(&s, ["wu", "su", "bu"], size, s.dff, s.din));
    params.extend(stack(&s, ["w2", "s2", "b2"], size, s.din, s.dff));
    params.push(w("out", size, mm * din, &[]));
    params.push(w("scratch", 4, need.div_ceil(4), &[]));
    params.push(Param { nullable: true, ..w("status", 4, 1, &[]) });
    let mut bufs = Buffers::new(&params, input, valid, &[], experts_heavy(&s, m));
    let (out, scratch, st) = (r + 9, r + 10, r + 11);
    bufs.storage[st][0] = 0;
    // The length of the scratch: what it needs, or one byte less (refused).
    let short = input.u8().is_multiple_of(8);
    let scratch_len = if short { need.saturating_sub(1) } else { need }.min(usize::MAX as u128) as usize;
    let (stream, bad_stream) = stream_of(input);
    // The dtype, the activation and `norm_topk_prob` are checked first, in that order.
    let exp = if dtype_of(dtype).is_none() {
        Err(vec!["dtype"])
    } else if activation > 1 {
        Err(vec!["activation"])
    } else if norm > 1 {
        Err(vec!["norm_topk_prob"])
    } else {
        let mut exp = expected(dtype, valid, true, &bufs, bad_stream, valid);
        if let (Err(names), Some(_)) = (&mut exp, bufs.refused) {
            // The router's outputs, act and part live in the scratch: a defect
            // there, or an overlap with it, may be named by any of them.
            names.extend(["scratch", "logits", "ids", "scores", "idx", "act", "part"]);
        } else if short && valid {
            // The length is checked before every pointer but the scratch's own.
            exp = Err(vec!["scratch"]);
        }
        exp
    };
    let q = |i: usize| bufs.ptr(i);
    let status = unsafe {
        match quant {
            Some(f) => mlxcel_amdgpu_moe_block_quantized_router(
                dtype,
                s,
                m,
                f.bits,
                f.group_size,
                activation,
                norm,
                q(0),
                q(1) as _,
                q(2),
                q(3),
                q(r) as _,
                q(r + 1),
                q(r + 2),
                q(r + 3) as _,
                q(r + 4),
                q(r + 5),
                q(r + 6) as _,
                q(r + 7),
                q(r + 8),
                q(out),
                q(scratch),
                scratch_len,
                q(st) as _,
                stream,
            ),
            None => mlxcel_amdgpu_moe_block(
                dtype,
                s,
                m,
                activation,
                norm,
                q(0),
                q(1),
                q(r) as _,
                q(r + 1),
                q(r + 2),
                q(r + 3) as _,
                q(r + 4),
                q(r + 5),
                q(r + 6) as _,
                q(r + 7),
                q(r + 8),
                q(out),
                q(scratch),
                scratch_len,
                q(st) as _,
                stream,
            ),
        }
    };
    check("moe_block", status, &exp);
    let supported = match quant {
        Some(f) => mlxcel_amdgpu_moe_block_quantized_router_supports(dtype, s, m, f.bits, f.group_size),
        None => mlxcel_amdgpu_moe_block_supports(dtype, s, m),
    };
    assert_eq!(supported, dtype_of(dtype).is_some() && valid, "moe_block supports({dtype}, {s:?}, {m}, {quant:?})");
    if status == MLXCEL_AMDGPU_OK && bufs.storage_of(out) == Some(out) {
        let got = bufs.bytes_of(out, (mm * din) as usize * size);
        let launches = block_launches(&bufs, dtype, s, m, [activation, norm], quant);
        assert!(got == launches, "moe_block {dtype} m {m} {s:?}: not bit for bit its launches");
        if bufs.storage_of(st) == Some(st) {
            // Finite inputs give finite logits: every id the router picks is in range.
            assert_eq!(bufs.storage[st][0] as u32, 0, "moe_block status word for m {m}, {s:?}");
        }
    }
}

/// The output of the router and the batch launches (the single-token ones at
/// `m = 1`) on the block's inputs in `bufs`, through the C ABI (a quantized
/// router through the Rust API, which alone has its launches): what a valid
/// block must give bit for bit.
fn block_launches(
    bufs: &Buffers,
    dtype: u32,
    s: MoeShape,
    m: u32,
    [activation, norm]: [u32; 2],
    quant: Option<RouterQuant>,
) -> Vec<u8> {
    let size = dtype_of(dtype).unwrap().size();
    let (mm, e, k, din, dff) = (m as usize, s.n_experts as usize, s.k as usize, s.din as usize, s.dff as usize);
    let (mut logits, mut scores) = (vec![0f32; mm * e], vec![0f32; mm * k]);
    let mut ids = vec![0u32; mm * k];
    let (mut act, mut part) = (vec![0f32; mm * k * dff], vec![0f32; mm * k * din]);
    let bytes = mm * din * size;
    let mut out = vec![0u32; bytes.div_ceil(4)];
    let mut status = 0u32;
    let q = |i: usize| bufs.ptr(i);
    let r = if quant.is_some() { 4 } else { 2 };
    let null = std::ptr::null_mut();
    unsafe {
        match quant {
            Some(f) => quantized_router(bufs, dtype, s, m, f, norm == 1, [&mut logits[..], &mut scores[..]], &mut ids),
            None => {
                let st = mlxcel_amdgpu_moe_router(
                    dtype,
                    q(0),
                    q(1),
                    logits.as_mut_ptr(),
                    ids.as_mut_ptr(),
                    scores.as_mut_ptr(),
                    m,
                    s.n_experts,
                    s.k,
                    s.din,
                    norm,
                    null,
                );
                check("block's moe_router", st, &Ok(()));
            }
        }
        let st = mlxcel_amdgpu_moe_gateup_batch(
            dtype,
            s,
            m,
            activation,
            q(0),
            ids.as_ptr(),
            q(r) as _,
            q(r + 1),
            q(r + 2),
            q(r + 3) as _,
            q(r + 4),
            q(r + 5),
            act.as_mut_ptr(),
            &mut status,
            null,
        );
        check("block's moe_gateup_batch", st, &Ok(()));
        let st = mlxcel_amdgpu_moe_down_batch(
            dtype,
            s,
            m,
            ids.as_ptr(),
            q(r + 6) as _,
            q(r + 7),
            q(r + 8),
            act.as_ptr(),
            scores.as_ptr(),
            part.as_mut_ptr(),
            &mut status,
            null,
        );
        check("block's moe_down_batch", st, &Ok(()));
        let st = mlxcel_amdgpu_moe_combine_batch(dtype, part.as_ptr(), out.as_mut_ptr() as _, m, s.k, s.din, null);
        check("block's moe_combine_batch", st, &Ok(()));
    }
    assert_eq!(status, 0, "the block's launches: status word for m {m}, {s:?}");
    out.iter().flat_map(|w| w.to_le_bytes()).take(bytes).collect()
}

/// The quantized router's launches on the block's inputs in `bufs`:
/// `moe_router_logits_q` then `moe_topk`, through the Rust API on a CPU device
/// (the C ABI's device here is the CPU emulator too, over the same host memory).
#[allow(clippy::too_many_arguments)]
unsafe fn quantized_router(
    bufs: &Buffers,
    dtype: u32,
    s: MoeShape,
    m: u32,
    quant: RouterQuant,
    renorm: bool,
    [logits, scores]: [&mut [f32]; 2],
    ids: &mut [u32],
) {
    let dev = Device::cpu();
    let shape = RouterShape { m, n_experts: s.n_experts, din: s.din, k: s.k };
    let q = |i: usize| bufs.ptr(i) as u64;
    let (lp, ip, sp) = (logits.as_mut_ptr() as u64, ids.as_mut_ptr() as u64, scores.as_mut_ptr() as u64);
    let t = dtype_of(dtype).unwrap();
    let args = shape.logits_q_args(q(0), q(1), q(2), q(3), lp, quant);
    unsafe { router::router_logits_q(&dev, t, args, Stream::DEFAULT) }.expect("block's moe_router_logits_q");
    unsafe { router::topk(&dev, shape.topk_args(lp, ip, sp, renorm), Stream::DEFAULT) }.expect("block's moe_topk");
}

/// The scratch of the block with a shared expert as its contract lays it out:
/// the block's of `K + 1` slots a token, with `gate_logits [m]`.
fn shared_block_scratch(s: &MoeShape, m: u32) -> u128 {
    let (m, e, k) = (m as u128, s.n_experts as u128, s.k as u128 + 1);
    let arrivals = m * (s.din as u128).div_ceil(32);
    let sizes = [m * e, m * k, m * k, m * k * s.dff as u128, m * k * s.din as u128, m, arrivals];
    sizes.iter().fold(0u128, |at, &n| at.next_multiple_of(256) + 4 * n)
}

/// `mlxcel_amdgpu_moe_block_shared_expert`: the block with a shared expert
/// (one expert of the stacks' format), its router and gate row dense or
/// quantized alike (by the next byte's low bit).
fn moe_block_shared(input: &mut Input) {
    let quantized = input.u8() % 2 == 1;
    let dtype = input.dtype();
    let size = dtype_of(dtype).map_or(4, Dtype::size);
    let (s, valid) = moe_shape(input);
    let m = tokens(input);
    let (activation, norm) = (code(input), code(input));
    let quant = quantized.then(|| router_format(input));
    let format_ok = quant.is_none_or(|q| q.validate(s.din).is_ok());
    let shape_ok = valid;
    let valid = valid && block_ok(&s, m) && format_ok;
    let need = shared_block_scratch(&s, m);
    let (mm, din, e) = (m as u128, s.din as u128, s.n_experts as u128);
    let mut params = vec![p("x", size, mm * din)];
    // The router's rows and the gate row, in one format: the counts of a valid
    // format (else of 8 bits, group 32: any size will do).
    let (bits, group_size) = match quant {
        Some(q) if format_ok => (q.bits as u128, q.group_size as u128),
        _ => (8, 32),
    };
    match quant {
        Some(_) => params.extend([
            p("wq", 4, e * din * bits / 32),
            p("sq", size, e * din / group_size),
            p("bq", size, e * din / group_size),
            p("wsq", 4, din * bits / 32),
            p("ssq", size, din / group_size),
            p("bsq", size, din / group_size),
        ]),
        None => params.extend([p("wr", size, e * din), p("ws", size, din)]),
    }
    let r = params.len();
    let one = MoeShape { n_experts: 1, ..s };
    params.extend(stack(&s, ["wg", "sg", "bg"], size, s.dff, s.din));
    params.extend(stack(&s, ["wu", "su", "bu"], size, s.dff, s.din));
    params.extend(stack(&s, ["w2", "s2", "b2"], size, s.din, s.dff));
    params.extend(stack(&one, ["wgs", "sgs", "bgs"], size, s.dff, s.din));
    params.extend(stack(&one, ["wus", "sus", "bus"], size, s.dff, s.din));
    params.extend(stack(&one, ["w2s", "s2s", "b2s"], size, s.din, s.dff));
    params.push(w("out", size, mm * din, &[]));
    params.push(w("scratch", 4, need.div_ceil(4), &[]));
    params.push(Param { nullable: true, ..w("status", 4, 1, &[]) });
    let heavy = experts_heavy(&MoeShape { k: s.k.saturating_add(1), ..s }, m);
    let mut bufs = Buffers::new(&params, input, valid, &[], heavy);
    let (out, scratch, st) = (r + 18, r + 19, r + 20);
    bufs.storage[st][0] = 0;
    let short = input.u8().is_multiple_of(8);
    let scratch_len = if short { need.saturating_sub(1) } else { need }.min(usize::MAX as u128) as usize;
    let (stream, bad_stream) = stream_of(input);
    let exp = if dtype_of(dtype).is_none() {
        Err(vec!["dtype"])
    } else if activation > 1 {
        Err(vec!["activation"])
    } else if norm > 1 {
        Err(vec!["norm_topk_prob"])
    } else {
        let mut exp = expected(dtype, valid, true, &bufs, bad_stream, valid);
        if let (Err(names), Some(_)) = (&mut exp, bufs.refused) {
            names.extend(["scratch", "logits", "gate_logits", "ids", "scores", "idx", "act", "part"]);
        } else if short && valid {
            exp = Err(vec!["scratch"]);
        }
        exp
    };
    let q = |i: usize| bufs.ptr(i);
    let matrix = |i: usize| MlxcelAmdgpuQuantized { w: q(i) as _, scales: q(i + 1), biases: q(i + 2) };
    let dense = |i: usize| MlxcelAmdgpuQuantized { w: q(i) as _, scales: std::ptr::null(), biases: std::ptr::null() };
    let (router, gate_row, rbits, rgs) = match quant {
        Some(f) => (matrix(1), matrix(4), f.bits, f.group_size),
        None => (dense(1), dense(2), 0, 0),
    };
    let status = unsafe {
        mlxcel_amdgpu_moe_block_shared_expert(
            dtype,
            s,
            m,
            rbits,
            rgs,
            activation,
            norm,
            q(0),
            router,
            gate_row,
            matrix(r),
            matrix(r + 3),
            matrix(r + 6),
            matrix(r + 9),
            matrix(r + 12),
            matrix(r + 15),
            q(out),
            q(scratch),
            scratch_len,
            q(st) as _,
            stream,
        )
    };
    check("moe_block_shared_expert", status, &exp);
    // The predicate sees the format, not the pointers: router_bits 0 and router_group_size 0 are a
    // dense router to it, which the launch refused above for the quantized router's scales.
    let dense_format = quant.is_some_and(|q| (q.bits, q.group_size) == (0, 0));
    let supported = mlxcel_amdgpu_moe_block_shared_expert_supports(dtype, s, m, rbits, rgs);
    let supported_shape = valid || (dense_format && shape_ok && block_ok(&s, m));
    assert_eq!(
        supported,
        dtype_of(dtype).is_some() && supported_shape,
        "moe_block_shared_expert supports({dtype}, {s:?}, {m}, {rbits}, {rgs})"
    );
    if status == MLXCEL_AMDGPU_OK && bufs.storage_of(out) == Some(out) {
        let got = bufs.bytes_of(out, (mm * din) as usize * size);
        let launches = unsafe { shared_block_launches(&bufs, dtype, s, m, [activation, norm], quant, r) };
        assert!(got == launches, "moe_block_shared_expert {dtype} m {m} {s:?}: not bit for bit its launches");
        if bufs.storage_of(st) == Some(st) {
            assert_eq!(bufs.storage[st][0] as u32, 0, "moe_block_shared_expert status word for m {m}, {s:?}");
        }
    }
}

/// The launches of the block with a shared expert on its inputs in `bufs`
/// (the stacks from `r`, the shared expert's after them), through the Rust
/// API's raw forms on a CPU device: the router with the gate row, `moe_topk`
/// with the shared slot, and the batch launches of `K + 1` slots a token.
#[allow(clippy::too_many_arguments)]
unsafe fn shared_block_launches(
    bufs: &Buffers,
    dtype: u32,
    s: MoeShape,
    m: u32,
    [activation, norm]: [u32; 2],
    quant: Option<RouterQuant>,
    r: usize,
) -> Vec<u8> {
    use mlxcel_amdgpu::kernels::moe::{self, Activation, GatedPointers, QuantizedPointers};
    let dev = Device::cpu();
    let t = dtype_of(dtype).unwrap();
    let (mm, e, k, din, dff) = (m as usize, s.n_experts as usize, s.k as usize + 1, s.din as usize, s.dff as usize);
    let (mut logits, mut gate_logits, mut scores) = (vec![0f32; mm * e], vec![0f32; mm], vec![0f32; mm * k]);
    let (mut ids, mut act, mut part) = (vec![0u32; mm * k], vec![0f32; mm * k * dff], vec![0f32; mm * k * din]);
    let bytes = mm * din * t.size();
    let mut out = vec![0u32; bytes.div_ceil(4)];
    // The buffers the launches write, as device pointers of the CPU backend.
    let (lp, gp, sp) = (logits.as_mut_ptr() as u64, gate_logits.as_mut_ptr() as u64, scores.as_mut_ptr() as u64);
    let (idx, ap, pp) = (ids.as_mut_ptr() as u64, act.as_mut_ptr() as u64, part.as_mut_ptr() as u64);
    let op = out.as_mut_ptr() as u64;
    let q = |i: usize| bufs.ptr(i) as u64;
    let matrix = |i: usize| QuantizedPointers { w: q(i), scales: q(i + 1), biases: q(i + 2) };
    let shape = RouterShape { m, n_experts: s.n_experts, din: s.din, k: s.k };
    unsafe {
        match quant {
            Some(f) => {
                let mut la = shape.logits_q_args(q(0), q(1), q(2), q(3), lp, f);
                (la.wsq, la.ssq, la.bsq, la.gate_logits) = (q(4), q(5), q(6), gp);
                router::router_logits_q(&dev, t, la, Stream::DEFAULT)
            }
            None => {
                let mut la = shape.logits_args(q(0), q(1), lp);
                (la.ws, la.gate_logits) = (q(2), gp);
                router::router_logits(&dev, t, la, Stream::DEFAULT)
            }
        }
        .expect("shared block's router logits");
        let mut ta = shape.topk_args(lp, idx, sp, norm == 1);
        (ta.gate_logits, ta.shared) = (gp, 1);
        router::topk(&dev, ta, Stream::DEFAULT).expect("shared block's moe_topk");
        let experts = MoeShape { k: s.k + 1, ..s };
        let activation = if activation == 0 { Activation::SwiGlu } else { Activation::GeGlu };
        let gated = GatedPointers { x: q(0), idx, gate: matrix(r), up: matrix(r + 3), act: ap, status: 0 };
        let mut g = experts.gateup_batch_args(m, gated, activation);
        (g.wgs, g.sgs, g.bgs, g.wus, g.sus, g.bus) = (q(r + 9), q(r + 10), q(r + 11), q(r + 12), q(r + 13), q(r + 14));
        moe::gateup_batch(&dev, t, g, Stream::DEFAULT).expect("shared block's moe_gateup_batch");
        let mut d = experts.down_batch_args(m, idx, matrix(r + 6), ap, sp, pp, 0);
        (d.w2s, d.s2s, d.b2s) = (q(r + 15), q(r + 16), q(r + 17));
        moe::down_batch(&dev, t, d, Stream::DEFAULT).expect("shared block's moe_down_batch");
        let c = moe::MoeCombineBatchArgs { part: pp, out: op, m, k: experts.k, din: s.din };
        moe::combine_batch(&dev, t, c, Stream::DEFAULT).expect("shared block's moe_combine_batch");
    }
    out.iter().flat_map(|w| w.to_le_bytes()).take(bytes).collect()
}

fn block_scratch_bytes(input: &mut Input) {
    let dtype = input.dtype();
    let (s, valid) = moe_shape(input);
    let m = tokens(input);
    let valid = valid && block_ok(&s, m);
    let supported = mlxcel_amdgpu_moe_block_supports(dtype, s, m);
    assert_eq!(supported, dtype_of(dtype).is_some() && valid, "moe_block supports({dtype}, {s:?}, {m})");
    let mut out = usize::MAX - 5;
    let null = input.u8().is_multiple_of(8);
    let ptr = if null { std::ptr::null_mut() } else { &mut out as *mut usize };
    let status = unsafe { mlxcel_amdgpu_moe_block_scratch_bytes(s, m, ptr) };
    if null {
        check("moe_block_scratch_bytes(NULL)", status, &Err(vec!["bytes"]));
    } else if valid {
        check("moe_block_scratch_bytes", status, &Ok(()));
        assert_eq!(out as u128, block_scratch(&s, m), "moe_block_scratch_bytes({s:?}, {m})");
    } else {
        check("moe_block_scratch_bytes", status, &Err(vec![]));
        assert_eq!(out, usize::MAX - 5, "a refused moe_block_scratch_bytes wrote");
    }
}

fn scratch_bytes(input: &mut Input) {
    let edges = [0, 1, 6, 1 << 31, u32::MAX];
    let (k, din, dff) = (input.dim(8, &edges), input.dim(300, &edges), input.dim(300, &edges));
    let exact = (k as u128 * dff as u128 * 4).next_multiple_of(256) + k as u128 * din as u128 * 4;
    let mut out = usize::MAX - 5;
    let null = input.u8().is_multiple_of(8);
    let ptr = if null { std::ptr::null_mut() } else { &mut out as *mut usize };
    let status = unsafe { mlxcel_amdgpu_moe_scratch_bytes(k, din, dff, ptr) };
    if null {
        check("moe_scratch_bytes(NULL)", status, &Err(vec!["bytes"]));
    } else if exact <= usize::MAX as u128 {
        check("moe_scratch_bytes", status, &Ok(()));
        assert_eq!(out as u128, exact, "moe_scratch_bytes({k}, {din}, {dff})");
    } else {
        check("moe_scratch_bytes", status, &Err(vec!["k"]));
        assert_eq!(out, usize::MAX - 5, "a refused moe_scratch_bytes wrote");
    }
}

fn describe(input: &mut Input) {
    let mut full = vec![0u8; 4096];
    let status = unsafe { mlxcel_amdgpu_describe_device(full.as_mut_ptr() as *mut c_char, full.len()) };
    check("describe_device", status, &Ok(()));
    let full = &full[..full.iter().position(|&b| b == 0).expect("a NUL")];
    assert!(full.starts_with(b"cpu"), "describe_device: {:?}", String::from_utf8_lossy(full));
    let len = input.dim(200, &[0, 1, 2]) as usize;
    // The description and its NUL are all it may write, however large `len` is.
    let mut buf = vec![0x55u8; len.min(full.len() + 1).max(1)];
    let null = input.u8().is_multiple_of(8);
    let ptr = if null { std::ptr::null_mut() } else { buf.as_mut_ptr() as *mut c_char };
    let status = unsafe { mlxcel_amdgpu_describe_device(ptr, len) };
    if null || len == 0 {
        check("describe_device", status, &Err(vec!["buf"]));
    } else {
        check("describe_device", status, &Ok(()));
        let end = buf.iter().position(|&b| b == 0).expect("describe_device: no NUL within len");
        assert_eq!(&buf[..end], &full[..full.len().min(len - 1)], "describe_device into {len} bytes");
    }
}

fn predicates(input: &mut Input) {
    let dtype = input.dtype();
    let ok = dtype_of(dtype).is_some();
    for (name, f) in [
        ("xielu", mlxcel_amdgpu_xielu_available as extern "C" fn(u32) -> bool),
        ("add3", mlxcel_amdgpu_add3_layer_norm_available),
        ("mamba", mlxcel_amdgpu_mamba1_scan_available),
        ("moe", mlxcel_amdgpu_moe_available),
        ("moe_gated", mlxcel_amdgpu_moe_gated_available),
        ("moe_router", mlxcel_amdgpu_moe_router_available),
        ("moe_block", mlxcel_amdgpu_moe_block_available),
    ] {
        assert_eq!(f(dtype), ok, "{name}_available({dtype}) on the CPU backend");
    }
    assert_eq!(mlxcel_amdgpu_abi_version(), MLXCEL_AMDGPU_ABI_VERSION);
}

fn select(input: &mut Input) {
    let names: [&CStr; 5] = [c"cpu", c"hip", c"cuda", c"CPU", c""];
    let mut raw: Vec<u8> = (0..input.u8() % 8).map(|_| input.u8()).filter(|&b| b != 0).collect();
    raw.push(0);
    let choice = input.u8() % 8;
    let ordinal = input.dim(2, &[u32::MAX]);
    let name: *const c_char = match choice {
        0..=4 => names[choice as usize].as_ptr(),
        5 => std::ptr::null(),
        _ => raw.as_ptr() as *const c_char,
    };
    let status = unsafe { mlxcel_amdgpu_select_device(name, ordinal) };
    let bytes = if name.is_null() { &b""[..] } else { unsafe { CStr::from_ptr(name) }.to_bytes() };
    let message = last_error();
    if bytes == b"cpu" && ordinal == 0 {
        assert_eq!(status, MLXCEL_AMDGPU_OK, "select cpu 0: {message}");
    } else if matches!(bytes, b"hip" | b"cuda") && status == MLXCEL_AMDGPU_OK {
        // That GPU backend exists here (a GPU, or the simulated gfx1151 of
        // `cargo xtask sim-test`): selecting it is an answer too.
    } else {
        assert!(
            matches!(status, MLXCEL_AMDGPU_INVALID_ARGUMENT | MLXCEL_AMDGPU_UNAVAILABLE) && !message.is_empty(),
            "select {choice} ordinal {ordinal}: {status:?} {message:?}"
        );
        // No device is selected now: every launch is UNAVAILABLE, every predicate false.
        let st = unsafe {
            mlxcel_amdgpu_xielu(0, std::ptr::null(), std::ptr::null_mut(), 0, 1.0, 1.0, 1.0, -1.0, std::ptr::null_mut())
        };
        assert_eq!(st, MLXCEL_AMDGPU_UNAVAILABLE, "a launch after a failed select: {}", last_error());
        assert!(!mlxcel_amdgpu_xielu_available(0), "a predicate after a failed select");
    }
    select_cpu();
}
