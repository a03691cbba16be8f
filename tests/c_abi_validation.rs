//! The C ABI's own checks, through the Rust declarations of the C functions on
//! the CPU backend, one test per case: those the launchers' tests and the C++
//! consumer (tests/cpp/consumer.cpp) do not reach. docs/reliability.md,
//! "Validation", lists every check and the test of each.
//!
//! The device is process-wide, and some cases select a device that fails: the
//! cases take one lock, so that each sees the device it selected.

use std::ffi::{CStr, c_char, c_void};
use std::ptr::{null, null_mut};
use std::sync::{Mutex, MutexGuard};

use mlxcel_amdgpu::ffi::MlxcelAmdgpuStatus::{self, *};
use mlxcel_amdgpu::ffi::*;
use mlxcel_amdgpu::kernels::moe::MoeShape;
use mlxcel_amdgpu_testkit::reference::{Dtype, data::normal, moe as reference};

static DEVICE: Mutex<()> = Mutex::new(());

/// The lock, with the CPU backend selected.
fn cpu() -> MutexGuard<'static, ()> {
    let guard = DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(unsafe { mlxcel_amdgpu_select_backend(c"cpu".as_ptr()) }, MLXCEL_AMDGPU_OK, "{}", last_error());
    guard
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(mlxcel_amdgpu_last_error()) }.to_string_lossy().into_owned()
}

/// Asserts `INVALID_ARGUMENT` naming `argument`, and returns the message.
fn refused(status: MlxcelAmdgpuStatus, argument: &str) -> String {
    let message = last_error();
    assert_eq!(status, MLXCEL_AMDGPU_INVALID_ARGUMENT, "{message}");
    let prefix = format!("invalid argument `{argument}`: ");
    assert!(message.starts_with(&prefix), "expected {prefix:?}..., got {message:?}");
    message[prefix.len()..].to_string()
}

const NEMOTRON: MoeShape = MoeShape { n_experts: 128, k: 6, din: 2688, dff: 1856, bits: 4, group_size: 64 };
const BAD_DTYPES: [u32; 3] = [3, 255, u32::MAX];
/// An address no launch may reach: every case below is refused before one.
const P: *mut c_void = 0x1000 as *mut c_void;

// ------------------------------------------------------- moe_scratch_bytes

#[test]
fn moe_scratch_bytes_of_nemotron_is_the_documented_size() {
    let _cpu = cpu();
    let mut bytes = 0usize;
    let st = unsafe { mlxcel_amdgpu_moe_scratch_bytes(NEMOTRON.k, NEMOTRON.din, NEMOTRON.dff, &mut bytes) };
    assert_eq!(st, MLXCEL_AMDGPU_OK, "{}", last_error());
    assert_eq!(bytes, 109_056);
}

#[test]
fn moe_scratch_bytes_at_the_shape_limits_is_exact() {
    let _cpu = cpu();
    let (k, c) = (MLXCEL_AMDGPU_MOE_MAX_K, MLXCEL_AMDGPU_MOE_MAX_COLS);
    let mut bytes = 0usize;
    assert_eq!(unsafe { mlxcel_amdgpu_moe_scratch_bytes(k, c, c, &mut bytes) }, MLXCEL_AMDGPU_OK);
    let act = (k as u128 * c as u128 * 4).next_multiple_of(256);
    assert_eq!(bytes as u128, act + k as u128 * c as u128 * 4);
}

/// 2^31 * 2^31 * 4 bytes of `act` is 2^64: it used to wrap to 8 GiB.
#[test]
fn moe_scratch_bytes_past_64_bits_is_refused_and_writes_nothing() {
    let _cpu = cpu();
    let mut bytes = 7usize;
    let m = refused(unsafe { mlxcel_amdgpu_moe_scratch_bytes(1 << 31, 1, 1 << 31, &mut bytes) }, "k");
    assert!(m.contains("overflows 64 bits"), "{m}");
    assert_eq!(bytes, 7, "a refused size was written");
}

/// `act` is empty (dff 0) and `part` alone reaches the limit: k * din * 4 =
/// (2^32 - 1) * 2^32 fits in 64 bits, one more column does not.
#[test]
fn moe_scratch_bytes_whose_part_reaches_64_bits_is_exact_then_refused() {
    let _cpu = cpu();
    let mut bytes = 7usize;
    assert_eq!(unsafe { mlxcel_amdgpu_moe_scratch_bytes(u32::MAX, 1 << 30, 0, &mut bytes) }, MLXCEL_AMDGPU_OK);
    assert_eq!(bytes as u128, u32::MAX as u128 * (1 << 32));
    let mut bytes = 7usize;
    refused(unsafe { mlxcel_amdgpu_moe_scratch_bytes(u32::MAX, (1 << 30) + 1, 0, &mut bytes) }, "k");
    assert_eq!(bytes, 7, "a refused size was written");
}

#[test]
fn moe_scratch_bytes_into_null_is_refused() {
    let _cpu = cpu();
    assert_eq!(
        refused(unsafe { mlxcel_amdgpu_moe_scratch_bytes(6, 64, 64, null_mut()) }, "bytes"),
        "is a null pointer"
    );
}

// ------------------------------------------------------------------ xielu

#[test]
fn xielu_n_at_the_limit_goes_on_to_the_pointers() {
    let _cpu = cpu();
    let st = unsafe { mlxcel_amdgpu_xielu(0, null(), P, MLXCEL_AMDGPU_XIELU_MAX_N, 1.0, 1.0, 0.5, -1e-6, null_mut()) };
    assert_eq!(refused(st, "x"), "is a null pointer");
}

#[test]
fn xielu_n_above_the_limit_is_refused() {
    let _cpu = cpu();
    let n = MLXCEL_AMDGPU_XIELU_MAX_N + 1;
    let st = unsafe { mlxcel_amdgpu_xielu(0, P, P, n, 1.0, 1.0, 0.5, -1e-6, null_mut()) };
    assert_eq!(refused(st, "n"), format!("{n} is above the limit of {MLXCEL_AMDGPU_XIELU_MAX_N} (2^60) elements"));
}

// ----------------------------------------------------------- dtype codes

/// `call` with every bad dtype code is refused, naming `dtype`; returns the messages.
fn refuses_every_bad_dtype(call: impl Fn(u32) -> MlxcelAmdgpuStatus) -> Vec<String> {
    let _cpu = cpu();
    BAD_DTYPES.into_iter().map(|code| refused(call(code), "dtype")).collect()
}

#[test]
fn xielu_refuses_a_bad_dtype_code() {
    let messages =
        refuses_every_bad_dtype(|code| unsafe { mlxcel_amdgpu_xielu(code, P, P, 4, 1.0, 1.0, 0.5, -1e-6, null_mut()) });
    assert!(messages.iter().all(|m| m.contains("is not an MlxcelAmdgpuDtype")), "{messages:?}");
}

#[test]
fn add3_layer_norm_refuses_a_bad_dtype_code() {
    refuses_every_bad_dtype(|code| unsafe {
        mlxcel_amdgpu_add3_layer_norm(code, P, P, P, P, null(), P, P, 1, 64, 1e-5, null_mut())
    });
}

#[test]
fn mamba1_scan_refuses_a_bad_dtype_code() {
    let f = P as *mut f32;
    refuses_every_bad_dtype(|code| unsafe {
        mlxcel_amdgpu_mamba1_scan(code, P, P, P, P, f, P, f, P, f, 1, 1, 8, 16, null_mut())
    });
}

#[test]
fn moe_fc1_relu2_refuses_a_bad_dtype_code() {
    let (u, f) = (P as *const u32, P as *mut f32);
    refuses_every_bad_dtype(|code| unsafe {
        mlxcel_amdgpu_moe_fc1_relu2(code, NEMOTRON, P, u, u, P, P, f, null_mut(), null_mut())
    });
}

#[test]
fn moe_down_refuses_a_bad_dtype_code() {
    let (u, f) = (P as *const u32, P as *mut f32);
    refuses_every_bad_dtype(|code| unsafe {
        mlxcel_amdgpu_moe_down(code, NEMOTRON, u, u, P, P, f, f, f, null_mut(), null_mut())
    });
}

#[test]
fn moe_combine_refuses_a_bad_dtype_code() {
    refuses_every_bad_dtype(|code| unsafe { mlxcel_amdgpu_moe_combine(code, P as *const f32, P, 6, 64, null_mut()) });
}

#[test]
fn moe_routed_forward_refuses_a_bad_dtype_code() {
    let (u, f) = (P as *const u32, P as *const f32);
    refuses_every_bad_dtype(|code| unsafe {
        mlxcel_amdgpu_moe_routed_forward(
            code,
            NEMOTRON,
            P,
            u,
            f,
            u,
            P,
            P,
            u,
            P,
            P,
            P,
            P,
            1 << 20,
            null_mut(),
            null_mut(),
        )
    });
}

#[test]
fn every_predicate_answers_false_for_a_bad_dtype_code() {
    let _cpu = cpu();
    for code in BAD_DTYPES {
        assert!(!mlxcel_amdgpu_xielu_available(code));
        assert!(!mlxcel_amdgpu_add3_layer_norm_available(code));
        assert!(!mlxcel_amdgpu_add3_layer_norm_supports(code, 1, 64));
        assert!(!mlxcel_amdgpu_mamba1_scan_available(code));
        assert!(!mlxcel_amdgpu_mamba1_scan_supports(code, 1, 1, 8, 16));
        assert!(!mlxcel_amdgpu_moe_available(code));
        assert!(!mlxcel_amdgpu_moe_supports(code, NEMOTRON));
        assert!(!mlxcel_amdgpu_moe_router_available(code));
        assert!(!mlxcel_amdgpu_moe_router_supports(code, 2, 128, 8, 2048));
    }
}

// ------------------------------------------------- shapes through the ABI

#[test]
fn moe_supports_agrees_with_the_launch_on_a_bad_shape() {
    let _cpu = cpu();
    let bad = MoeShape { k: MLXCEL_AMDGPU_MOE_MAX_K + 1, ..NEMOTRON };
    assert!(!mlxcel_amdgpu_moe_supports(0, bad));
    let (u, f) = (P as *const u32, P as *mut f32);
    refused(unsafe { mlxcel_amdgpu_moe_fc1_relu2(0, bad, P, u, u, P, P, f, null_mut(), null_mut()) }, "k");
}

#[test]
fn mamba1_scan_supports_agrees_with_the_launch_on_a_batch_too_large() {
    let _cpu = cpu();
    let batch = MLXCEL_AMDGPU_MAMBA1_MAX_BATCH + 1;
    assert!(!mlxcel_amdgpu_mamba1_scan_supports(0, batch, 1, 8, 16));
    let f = P as *mut f32;
    refused(unsafe { mlxcel_amdgpu_mamba1_scan(0, P, P, P, P, f, P, f, P, f, batch, 1, 8, 16, null_mut()) }, "batch");
}

#[test]
fn add3_layer_norm_supports_agrees_with_the_launch_on_too_many_rows() {
    let _cpu = cpu();
    let rows = MLXCEL_AMDGPU_ADD3_MAX_ROWS + 1;
    assert!(!mlxcel_amdgpu_add3_layer_norm_supports(0, rows, 64));
    let st = unsafe { mlxcel_amdgpu_add3_layer_norm(0, P, P, P, P, null(), P, P, rows, 64, 1e-5, null_mut()) };
    refused(st, "rows");
}

// ------------------------------------------------------------- moe_router

/// The router's arguments, valid unless a test changes one: Qwen3-30B-A3B's
/// router (E 128, K 8, renormalized) for two tokens, every buffer at `P`-like
/// distinct addresses (each case is refused before anything is read).
#[derive(Clone, Copy)]
struct Router {
    dtype: u32,
    x: *const c_void,
    wr: *const c_void,
    logits: *mut f32,
    ids: *mut u32,
    scores: *mut f32,
    m: u32,
    n_experts: u32,
    k: u32,
    din: u32,
    norm_topk_prob: u32,
}

const ROUTER: Router = Router {
    dtype: 2,
    x: 0x10_0000 as *const c_void,
    wr: 0x20_0000 as *const c_void,
    logits: 0x80_0000 as *mut f32,
    ids: 0x90_0000 as *mut u32,
    scores: 0xA0_0000 as *mut f32,
    m: 2,
    n_experts: 128,
    k: 8,
    din: 2048,
    norm_topk_prob: 1,
};

impl Router {
    fn call(self) -> MlxcelAmdgpuStatus {
        let Router { dtype, x, wr, logits, ids, scores, m, n_experts, k, din, norm_topk_prob } = self;
        unsafe {
            mlxcel_amdgpu_moe_router(
                dtype,
                x,
                wr,
                logits,
                ids,
                scores,
                m,
                n_experts,
                k,
                din,
                norm_topk_prob,
                null_mut(),
            )
        }
    }

    fn supported(self) -> bool {
        mlxcel_amdgpu_moe_router_supports(self.dtype, self.m, self.n_experts, self.k, self.din)
    }

    /// Refused naming `argument`; a bad shape is also one `_supports` declines.
    fn refused(self, argument: &str) -> String {
        let _cpu = cpu();
        let message = refused(self.call(), argument);
        if ["m", "n_experts", "k", "din", "dtype"].contains(&argument) {
            assert!(!self.supported(), "moe_router_supports takes what the launch refused: {message}");
        }
        message
    }
}

#[test]
fn moe_router_supports_qwen3s_router_at_the_limits() {
    let _cpu = cpu();
    for dtype in 0..3 {
        assert!(mlxcel_amdgpu_moe_router_available(dtype));
        assert!(Router { dtype, ..ROUTER }.supported());
    }
    let (m, e, k) =
        (MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS, MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS, MLXCEL_AMDGPU_MOE_ROUTER_MAX_K);
    assert!(Router { m, n_experts: e, k, ..ROUTER }.supported());
    assert!(Router { n_experts: 1, k: 1, din: 1, ..ROUTER }.supported());
}

#[test]
fn moe_router_refuses_a_bad_dtype_code() {
    for dtype in BAD_DTYPES {
        let why = Router { dtype, ..ROUTER }.refused("dtype");
        assert!(why.contains("is not an MlxcelAmdgpuDtype"), "{why}");
        let _cpu = cpu();
        assert!(!mlxcel_amdgpu_moe_router_available(dtype));
    }
}

#[test]
fn moe_router_refuses_no_tokens() {
    assert_eq!(Router { m: 0, ..ROUTER }.refused("m"), "0 tokens is outside 1..=8");
}

#[test]
fn moe_router_refuses_more_tokens_than_the_limit() {
    let m = MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS + 1;
    assert_eq!(Router { m, ..ROUTER }.refused("m"), "9 tokens is outside 1..=8");
}

#[test]
fn moe_router_refuses_no_experts() {
    assert_eq!(Router { n_experts: 0, ..ROUTER }.refused("n_experts"), "0 is outside 1..=1024");
}

#[test]
fn moe_router_refuses_more_experts_than_the_limit() {
    let n_experts = MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS + 1;
    assert_eq!(Router { n_experts, ..ROUTER }.refused("n_experts"), "1025 is outside 1..=1024");
}

#[test]
fn moe_router_refuses_k_0() {
    assert_eq!(Router { k: 0, ..ROUTER }.refused("k"), "0 is outside 1..=16");
}

#[test]
fn moe_router_refuses_k_above_the_limit() {
    let k = MLXCEL_AMDGPU_MOE_ROUTER_MAX_K + 1;
    assert_eq!(Router { k, ..ROUTER }.refused("k"), "17 is outside 1..=16");
}

#[test]
fn moe_router_refuses_k_above_the_expert_count() {
    assert_eq!(Router { n_experts: 4, k: 5, ..ROUTER }.refused("k"), "5 is more than the 4 experts");
}

#[test]
fn moe_router_refuses_din_0() {
    assert_eq!(Router { din: 0, ..ROUTER }.refused("din"), "is 0; a router row needs at least one value");
}

#[test]
fn moe_router_refuses_a_norm_topk_prob_other_than_0_or_1() {
    assert_eq!(Router { norm_topk_prob: 2, ..ROUTER }.refused("norm_topk_prob"), "2 is not 0 or 1");
}

#[test]
fn moe_router_refuses_a_null_x() {
    assert_eq!(Router { x: null(), ..ROUTER }.refused("x"), "is a null pointer");
}

#[test]
fn moe_router_refuses_a_null_wr() {
    assert_eq!(Router { wr: null(), ..ROUTER }.refused("wr"), "is a null pointer");
}

#[test]
fn moe_router_refuses_a_null_logits() {
    assert_eq!(Router { logits: null_mut(), ..ROUTER }.refused("logits"), "is a null pointer");
}

#[test]
fn moe_router_refuses_a_null_ids() {
    assert_eq!(Router { ids: null_mut(), ..ROUTER }.refused("ids"), "is a null pointer");
}

#[test]
fn moe_router_refuses_a_null_scores() {
    assert_eq!(Router { scores: null_mut(), ..ROUTER }.refused("scores"), "is a null pointer");
}

#[test]
fn moe_router_refuses_logits_misaligned_to_their_f32() {
    let logits = (ROUTER.logits as usize + 2) as *mut f32;
    assert!(Router { logits, ..ROUTER }.refused("logits").contains("is not aligned to its f32 element"));
}

/// `ids` is written by the second launch only, `x` read by the first: the
/// check that neither launch makes alone.
#[test]
fn moe_router_refuses_ids_over_x() {
    let ids = ROUTER.x.wrapping_byte_add(64) as *mut u32;
    let why = Router { ids, ..ROUTER }.refused("ids");
    assert!(why.ends_with("overlaps `x`; `ids` may alias nothing"), "{why}");
}

#[test]
fn moe_router_refuses_scores_over_wr() {
    let scores = ROUTER.wr as *mut f32;
    let why = Router { scores, ..ROUTER }.refused("scores");
    assert!(why.ends_with("overlaps `wr`; `scores` may alias nothing"), "{why}");
}

#[test]
fn moe_router_refuses_logits_over_ids() {
    let why = Router { logits: ROUTER.ids.cast(), ..ROUTER }.refused("ids");
    assert!(why.contains("overlaps `logits`"), "{why}");
}

/// Both launches on the CPU backend through the C ABI, against the testkit's
/// reference: the logits within 1e-5 of the largest (f32 sums against f64),
/// the ids exactly (these data have no near ties) and the scores within 1e-5.
#[test]
fn moe_router_runs_both_launches_as_the_reference_does() {
    let _cpu = cpu();
    let (m, e, k, din) = (3usize, 40usize, 6usize, 96usize);
    let x = normal(Dtype::F32, 61, m * din, 1.0);
    let wr = normal(Dtype::F32, 62, e * din, 0.2);
    let want_logits = reference::router_logits(&x, &wr, m, e, din);
    for renorm in [0u32, 1] {
        let (mut logits, mut ids, mut scores) = (vec![f32::NAN; m * e], vec![7u32; m * k], vec![f32::NAN; m * k]);
        let call = Router {
            dtype: 0,
            x: x.as_ptr().cast(),
            wr: wr.as_ptr().cast(),
            logits: logits.as_mut_ptr(),
            ids: ids.as_mut_ptr(),
            scores: scores.as_mut_ptr(),
            m: m as u32,
            n_experts: e as u32,
            k: k as u32,
            din: din as u32,
            norm_topk_prob: renorm,
        };
        assert_eq!(call.call(), MLXCEL_AMDGPU_OK, "{}", last_error());
        let largest = want_logits.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        for (i, (g, w)) in logits.iter().zip(&want_logits).enumerate() {
            assert!((g - w).abs() <= 1e-5 * largest, "logit {i}: got {g:e}, want {w:e}");
        }
        let (want_ids, want_scores) = reference::topk(&want_logits, m, e, k, renorm == 1);
        assert_eq!(ids, want_ids, "renorm {renorm}: ids");
        for (i, (g, w)) in scores.iter().zip(&want_scores).enumerate() {
            assert!((g - w).abs() <= 1e-5 * w.abs(), "renorm {renorm}: score {i}: got {g:e}, want {w:e}");
        }
        if renorm == 1 {
            for row in scores.chunks(k) {
                assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "renormalized scores sum to {row:?}");
            }
        }
    }
}

// -------------------------------------------------------------- moe_block

/// The block's arguments, valid unless a test changes one: Qwen3-30B-A3B's
/// layer (E 128, K 8, Din 2048, Dff 768, 4 bits, gs 64) for two tokens,
/// every buffer at distinct `P`-like addresses (each case is refused before
/// anything is read).
#[derive(Clone, Copy)]
struct Blk {
    dtype: u32,
    shape: MoeShape,
    m: u32,
    activation: u32,
    norm_topk_prob: u32,
    x: *const c_void,
    /// The dense router's `wr`, or a quantized router's codes `wq`.
    wr: *const c_void,
    /// `None`: `mlxcel_amdgpu_moe_block`; a quantized router:
    /// `mlxcel_amdgpu_moe_block_quantized_router`.
    quantized_router: Option<QRouter>,
    gate: [*const c_void; 3],
    up: [*const c_void; 3],
    down: [*const c_void; 3],
    out: *mut c_void,
    scratch: *mut c_void,
    scratch_len: usize,
    status: *mut u32,
}

/// A quantized router's format, scales and biases (its codes are `Blk::wr`).
#[derive(Clone, Copy)]
struct QRouter {
    bits: u32,
    group_size: u32,
    sq: *const c_void,
    bq: *const c_void,
}

/// mlx-lm's quantization of Qwen3 MoE's `mlp.gate`: 8 bits, group 64.
const Q_ROUTER: QRouter = QRouter { bits: 8, group_size: 64, sq: at(14), bq: at(15) };

const QWEN3: MoeShape = MoeShape { n_experts: 128, k: 8, din: 2048, dff: 768, bits: 4, group_size: 64 };

/// Addresses 256 MiB apart: no two of the buffers above overlap.
const fn at(i: usize) -> *mut c_void {
    (i << 28) as *mut c_void
}

const BLOCK: Blk = Blk {
    dtype: 2,
    shape: QWEN3,
    m: 2,
    activation: 0,
    norm_topk_prob: 1,
    x: at(1),
    wr: at(2),
    quantized_router: None,
    gate: [at(3), at(4), at(5)],
    up: [at(6), at(7), at(8)],
    down: [at(9), at(10), at(11)],
    out: at(12),
    scratch: at(13),
    scratch_len: 1 << 24,
    status: null_mut(),
};

impl Blk {
    fn call(self) -> MlxcelAmdgpuStatus {
        let Blk {
            dtype,
            shape,
            m,
            activation,
            norm_topk_prob,
            x,
            wr,
            quantized_router,
            gate,
            up,
            down,
            out,
            scratch,
            scratch_len,
            status,
        } = self;
        if let Some(QRouter { bits, group_size, sq, bq }) = quantized_router {
            return unsafe {
                mlxcel_amdgpu_moe_block_quantized_router(
                    dtype,
                    shape,
                    m,
                    bits,
                    group_size,
                    activation,
                    norm_topk_prob,
                    x,
                    wr.cast(),
                    sq,
                    bq,
                    gate[0].cast(),
                    gate[1],
                    gate[2],
                    up[0].cast(),
                    up[1],
                    up[2],
                    down[0].cast(),
                    down[1],
                    down[2],
                    out,
                    scratch,
                    scratch_len,
                    status,
                    null_mut(),
                )
            };
        }
        unsafe {
            mlxcel_amdgpu_moe_block(
                dtype,
                shape,
                m,
                activation,
                norm_topk_prob,
                x,
                wr,
                gate[0].cast(),
                gate[1],
                gate[2],
                up[0].cast(),
                up[1],
                up[2],
                down[0].cast(),
                down[1],
                down[2],
                out,
                scratch,
                scratch_len,
                status,
                null_mut(),
            )
        }
    }

    fn supported(self) -> bool {
        match self.quantized_router {
            None => mlxcel_amdgpu_moe_block_supports(self.dtype, self.shape, self.m),
            Some(q) => {
                mlxcel_amdgpu_moe_block_quantized_router_supports(self.dtype, self.shape, self.m, q.bits, q.group_size)
            }
        }
    }

    fn supported_on_cpu(self) -> bool {
        let _cpu = cpu();
        self.supported()
    }

    fn with_quantized_router(self, change: impl FnOnce(&mut QRouter)) -> Blk {
        let mut q = self.quantized_router.unwrap_or(Q_ROUTER);
        change(&mut q);
        Blk { quantized_router: Some(q), ..self }
    }

    /// Refused naming `argument`; a bad shape is also one `_supports` and
    /// `_scratch_bytes` decline, a bad router format one `_supports` declines.
    fn refused(self, argument: &str) -> String {
        let _cpu = cpu();
        let message = refused(self.call(), argument);
        let sizes = ["m", "n_experts", "k", "din", "dff", "bits", "group_size", "router_bits", "router_group_size"];
        if sizes.contains(&argument) || argument == "dtype" {
            assert!(!self.supported(), "moe_block_supports takes what the launch refused: {message}");
        }
        // The scratch's size knows the shape, not the router's format.
        let shape_refused = !mlxcel_amdgpu_moe_block_supports(self.dtype, self.shape, self.m);
        if sizes[..7].contains(&argument) && shape_refused {
            let mut bytes = 7usize;
            refused(unsafe { mlxcel_amdgpu_moe_block_scratch_bytes(self.shape, self.m, &mut bytes) }, argument);
            assert_eq!(bytes, 7, "a refused scratch size was written");
        }
        message
    }

    fn with_shape(self, change: impl FnOnce(&mut MoeShape)) -> Blk {
        let mut shape = self.shape;
        change(&mut shape);
        Blk { shape, ..self }
    }
}

#[test]
fn moe_block_supports_qwen3s_layer_for_1_to_8_tokens() {
    let _cpu = cpu();
    for dtype in 0..3 {
        assert!(mlxcel_amdgpu_moe_block_available(dtype));
        for m in 1..=MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS {
            assert!(Blk { dtype, m, ..BLOCK }.supported());
        }
    }
}

/// Two tokens of Qwen3's layer: logits, ids and scores on 256 bytes each,
/// then act, part, and the down launch's arrival counts (a u32 per token and
/// block of 32 rows).
#[test]
fn moe_block_scratch_bytes_of_qwen3_is_the_documented_layout() {
    let _cpu = cpu();
    let mut bytes = 0usize;
    assert_eq!(unsafe { mlxcel_amdgpu_moe_block_scratch_bytes(QWEN3, 2, &mut bytes) }, MLXCEL_AMDGPU_OK);
    assert_eq!(bytes, 1024 + 256 + 256 + 2 * 8 * 768 * 4 + 2 * 8 * 2048 * 4 + 2 * (2048 / 32) * 4);
}

#[test]
fn moe_block_scratch_bytes_refuses_a_null_bytes() {
    let _cpu = cpu();
    refused(unsafe { mlxcel_amdgpu_moe_block_scratch_bytes(QWEN3, 2, null_mut()) }, "bytes");
}

#[test]
fn moe_block_refuses_a_bad_dtype_code() {
    for dtype in BAD_DTYPES {
        let why = Blk { dtype, ..BLOCK }.refused("dtype");
        assert!(why.contains("is not an MlxcelAmdgpuDtype"), "{why}");
        let _cpu = cpu();
        assert!(!mlxcel_amdgpu_moe_block_available(dtype));
    }
}

#[test]
fn moe_block_refuses_no_tokens() {
    assert_eq!(Blk { m: 0, ..BLOCK }.refused("m"), "0 tokens is outside 1..=8");
}

#[test]
fn moe_block_refuses_nine_tokens() {
    assert_eq!(Blk { m: 9, ..BLOCK }.refused("m"), "9 tokens is outside 1..=8");
}

#[test]
fn moe_block_refuses_no_experts() {
    assert_eq!(BLOCK.with_shape(|s| s.n_experts = 0).refused("n_experts"), "0 is outside 1..=1024");
}

#[test]
fn moe_block_refuses_more_experts_than_the_router_takes() {
    assert_eq!(BLOCK.with_shape(|s| s.n_experts = 1025).refused("n_experts"), "1025 is outside 1..=1024");
}

#[test]
fn moe_block_refuses_k_0() {
    assert_eq!(BLOCK.with_shape(|s| s.k = 0).refused("k"), "0 is outside 1..=16");
}

#[test]
fn moe_block_refuses_k_17() {
    assert_eq!(BLOCK.with_shape(|s| s.k = 17).refused("k"), "17 is outside 1..=16");
}

#[test]
fn moe_block_refuses_k_above_the_expert_count() {
    let blk = BLOCK.with_shape(|s| (s.n_experts, s.k) = (4, 5));
    assert_eq!(blk.refused("k"), "5 is more than the 4 experts");
}

#[test]
fn moe_block_refuses_din_0() {
    assert_eq!(BLOCK.with_shape(|s| s.din = 0).refused("din"), "is 0; a router row needs at least one value");
}

#[test]
fn moe_block_refuses_a_dff_off_the_group_size() {
    BLOCK.with_shape(|s| s.dff = 100).refused("dff");
}

#[test]
fn moe_block_refuses_6_bits() {
    assert_eq!(BLOCK.with_shape(|s| s.bits = 6).refused("bits"), "6 is not supported; use 4 or 8");
}

#[test]
fn moe_block_refuses_a_group_size_of_16() {
    assert_eq!(BLOCK.with_shape(|s| s.group_size = 16).refused("group_size"), "16 is not supported; use 32, 64 or 128");
}

#[test]
fn moe_block_refuses_an_activation_of_2() {
    assert_eq!(Blk { activation: 2, ..BLOCK }.refused("activation"), "2 is not 0 (SwiGLU) or 1 (GeGLU)");
}

#[test]
fn moe_block_refuses_a_norm_topk_prob_of_2() {
    assert_eq!(Blk { norm_topk_prob: 2, ..BLOCK }.refused("norm_topk_prob"), "2 is not 0 or 1");
}

#[test]
fn moe_block_refuses_a_null_x() {
    assert_eq!(Blk { x: null(), ..BLOCK }.refused("x"), "is a null pointer");
}

#[test]
fn moe_block_refuses_a_null_wr() {
    assert_eq!(Blk { wr: null(), ..BLOCK }.refused("wr"), "is a null pointer");
}

#[test]
fn moe_block_refuses_a_null_gate_weight() {
    let gate = [null(), BLOCK.gate[1], BLOCK.gate[2]];
    assert_eq!(Blk { gate, ..BLOCK }.refused("wg"), "is a null pointer");
}

#[test]
fn moe_block_refuses_null_up_scales() {
    let up = [BLOCK.up[0], null(), BLOCK.up[2]];
    assert_eq!(Blk { up, ..BLOCK }.refused("su"), "is a null pointer");
}

#[test]
fn moe_block_refuses_null_down_biases() {
    let down = [BLOCK.down[0], BLOCK.down[1], null()];
    assert_eq!(Blk { down, ..BLOCK }.refused("b2"), "is a null pointer");
}

#[test]
fn moe_block_refuses_a_null_out() {
    assert_eq!(Blk { out: null_mut(), ..BLOCK }.refused("out"), "is a null pointer");
}

#[test]
fn moe_block_refuses_a_null_scratch() {
    assert_eq!(Blk { scratch: null_mut(), ..BLOCK }.refused("scratch"), "is a null pointer");
}

#[test]
fn moe_block_refuses_a_scratch_one_byte_short() {
    let _cpu = cpu();
    let mut need = 0usize;
    assert_eq!(unsafe { mlxcel_amdgpu_moe_block_scratch_bytes(QWEN3, 2, &mut need) }, MLXCEL_AMDGPU_OK);
    drop(_cpu);
    let why = Blk { scratch_len: need - 1, ..BLOCK }.refused("scratch");
    assert!(why.starts_with(&format!("holds {} bytes, needs {need}", need - 1)), "{why}");
}

#[test]
fn moe_block_refuses_a_scratch_that_wraps_the_address_space() {
    let scratch = usize::MAX.wrapping_sub(255) as *mut c_void;
    assert!(Blk { scratch, ..BLOCK }.refused("scratch").contains("wraps the address space"));
}

#[test]
fn moe_block_refuses_a_scratch_over_the_router_weights() {
    let why = Blk { scratch: BLOCK.wr.cast_mut(), ..BLOCK }.refused("scratch");
    assert!(why.contains("overlaps `wr`"), "{why}");
}

/// `out` is written by the last launch only, `wr` read by the first.
#[test]
fn moe_block_refuses_out_over_the_router_weights() {
    let why = Blk { out: BLOCK.wr.cast_mut(), ..BLOCK }.refused("out");
    assert!(why.ends_with("overlaps `wr`; `out` may alias nothing"), "{why}");
}

#[test]
fn moe_block_refuses_out_misaligned_to_its_bf16() {
    let out = BLOCK.out.wrapping_byte_add(1);
    assert!(Blk { out, ..BLOCK }.refused("out").contains("is not aligned"));
}

#[test]
fn moe_block_refuses_a_status_over_the_router_weights() {
    let why = Blk { status: BLOCK.wr.cast_mut().cast(), ..BLOCK }.refused("status");
    assert!(why.contains("overlaps `wr`"), "{why}");
}

// ---------------------------------------- moe_block_quantized_router

/// The block with mlx-lm's 8-bit router: the dense block's arguments, `wr`
/// now the router's codes.
const Q_BLOCK: Blk = Blk { quantized_router: Some(Q_ROUTER), ..BLOCK };

#[test]
fn moe_block_quantized_router_supports_qwen3s_layer_for_1_to_8_tokens() {
    let _cpu = cpu();
    for dtype in 0..3 {
        assert!(mlxcel_amdgpu_moe_block_quantized_router_available(dtype));
        for m in 1..=MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS {
            for (bits, group_size) in [(4, 32), (4, 128), (8, 64)] {
                let blk =
                    Blk { dtype, m, ..Q_BLOCK }.with_quantized_router(|q| (q.bits, q.group_size) = (bits, group_size));
                assert!(blk.supported());
            }
            assert!(Blk { dtype, m, ..Q_BLOCK }.supported());
        }
    }
}

#[test]
fn moe_block_quantized_router_refuses_a_bad_dtype_code() {
    for dtype in BAD_DTYPES {
        let why = Blk { dtype, ..Q_BLOCK }.refused("dtype");
        assert!(why.contains("is not an MlxcelAmdgpuDtype"), "{why}");
        let _cpu = cpu();
        assert!(!mlxcel_amdgpu_moe_block_quantized_router_available(dtype));
    }
}

#[test]
fn moe_block_quantized_router_refuses_nine_tokens() {
    assert_eq!(Blk { m: 9, ..Q_BLOCK }.refused("m"), "9 tokens is outside 1..=8");
}

#[test]
fn moe_block_quantized_router_refuses_6_router_bits() {
    let why = Q_BLOCK.with_quantized_router(|q| q.bits = 6).refused("router_bits");
    assert_eq!(why, "6 is not supported for the router; use 4 or 8");
}

#[test]
fn moe_block_quantized_router_refuses_a_router_group_size_of_16() {
    let why = Q_BLOCK.with_quantized_router(|q| q.group_size = 16).refused("router_group_size");
    assert_eq!(why, "16 is not 32, 64 or 128");
}

/// The experts take group 32 of Din 2080; the router's group 64 does not divide it.
#[test]
fn moe_block_quantized_router_refuses_a_din_off_the_routers_group() {
    let blk = Q_BLOCK.with_shape(|s| (s.din, s.group_size) = (2080, 32));
    assert!(Blk { quantized_router: None, ..blk }.supported_on_cpu(), "the dense block takes Din 2080");
    assert_eq!(blk.refused("din"), "2080 is not a multiple of the router's group size 64");
}

#[test]
fn moe_block_quantized_router_refuses_the_experts_bits_of_6() {
    assert_eq!(Q_BLOCK.with_shape(|s| s.bits = 6).refused("bits"), "6 is not supported; use 4 or 8");
}

#[test]
fn moe_block_quantized_router_refuses_a_null_wq() {
    assert_eq!(Blk { wr: null(), ..Q_BLOCK }.refused("wq"), "is a null pointer");
}

#[test]
fn moe_block_quantized_router_refuses_codes_off_their_words() {
    let why = Blk { wr: BLOCK.wr.wrapping_byte_add(2), ..Q_BLOCK }.refused("wq");
    assert!(why.contains("is not aligned to its u32 element"), "{why}");
}

#[test]
fn moe_block_quantized_router_refuses_null_router_scales() {
    assert_eq!(Q_BLOCK.with_quantized_router(|q| q.sq = null()).refused("sq"), "is a null pointer");
}

#[test]
fn moe_block_quantized_router_refuses_null_router_biases() {
    assert_eq!(Q_BLOCK.with_quantized_router(|q| q.bq = null()).refused("bq"), "is a null pointer");
}

#[test]
fn moe_block_quantized_router_refuses_a_scratch_over_the_router_scales() {
    let why = Blk { scratch: Q_ROUTER.sq.cast_mut(), ..Q_BLOCK }.refused("scratch");
    assert!(why.contains("overlaps `sq`"), "{why}");
}

#[test]
fn moe_block_quantized_router_refuses_out_over_the_router_biases() {
    let why = Blk { out: Q_ROUTER.bq.cast_mut(), ..Q_BLOCK }.refused("out");
    assert!(why.ends_with("overlaps `bq`; `out` may alias nothing"), "{why}");
}

#[test]
fn moe_block_quantized_router_refuses_a_status_over_the_router_codes() {
    let why = Blk { status: BLOCK.wr.cast_mut().cast(), ..Q_BLOCK }.refused("status");
    assert!(why.contains("overlaps `wq`"), "{why}");
}

// ---------------------------------------- moe_block_shared_expert

/// The block with Qwen3-Next's shared expert: the dense or quantized block's
/// arguments, and the expert's gate row and matrices at addresses of their own.
#[derive(Clone, Copy)]
struct SharedBlk {
    blk: Blk,
    expert_gate: [*const c_void; 3],
    shared: [[*const c_void; 3]; 3],
}

/// Qwen3-Next-80B-A3B's layer: E 512, K 10, Din 2048, Dff 512 (its shared
/// expert's intermediate size too), 4 bits, group 64.
const QWEN3_NEXT: MoeShape = MoeShape { n_experts: 512, k: 10, din: 2048, dff: 512, bits: 4, group_size: 64 };

/// A dense router and gate row (`router_bits` 0).
const SHARED: SharedBlk = SharedBlk {
    blk: Blk { shape: QWEN3_NEXT, ..BLOCK },
    expert_gate: [at(16), null(), null()],
    shared: [[at(17), at(18), at(19)], [at(20), at(21), at(22)], [at(23), at(24), at(25)]],
};

/// mlx-lm's quantized Qwen3-Next: router and gate row at 8 bits, group 64.
const Q_SHARED: SharedBlk = SharedBlk {
    blk: Blk { shape: QWEN3_NEXT, ..Q_BLOCK },
    expert_gate: [at(16), at(26), at(27)],
    shared: SHARED.shared,
};

fn quantized([w, scales, biases]: [*const c_void; 3]) -> MlxcelAmdgpuQuantized {
    MlxcelAmdgpuQuantized { w: w.cast(), scales, biases }
}

impl SharedBlk {
    /// `router_bits`, `router_group_size` and the router's scales and biases.
    fn router(self) -> (u32, u32, [*const c_void; 3]) {
        match self.blk.quantized_router {
            Some(q) => (q.bits, q.group_size, [self.blk.wr, q.sq, q.bq]),
            None => (0, 0, [self.blk.wr, null(), null()]),
        }
    }

    fn call(self) -> MlxcelAmdgpuStatus {
        let b = self.blk;
        let (bits, group_size, router) = self.router();
        let [sg, su, sd] = self.shared;
        unsafe {
            mlxcel_amdgpu_moe_block_shared_expert(
                b.dtype,
                b.shape,
                b.m,
                bits,
                group_size,
                b.activation,
                b.norm_topk_prob,
                b.x,
                quantized(router),
                quantized(self.expert_gate),
                quantized(b.gate),
                quantized(b.up),
                quantized(b.down),
                quantized(sg),
                quantized(su),
                quantized(sd),
                b.out,
                b.scratch,
                b.scratch_len,
                b.status,
                null_mut(),
            )
        }
    }

    fn supported(self) -> bool {
        let (bits, group_size, _) = self.router();
        mlxcel_amdgpu_moe_block_shared_expert_supports(self.blk.dtype, self.blk.shape, self.blk.m, bits, group_size)
    }

    /// Refused naming `argument`; a bad size or router format is also one
    /// `_supports` declines.
    fn refused(self, argument: &str) -> String {
        let _cpu = cpu();
        let message = refused(self.call(), argument);
        let sizes = ["m", "n_experts", "k", "din", "dff", "bits", "group_size", "router_bits", "router_group_size"];
        if sizes.contains(&argument) {
            assert!(!self.supported(), "moe_block_shared_expert_supports takes what the launch refused: {message}");
        }
        message
    }
}

#[test]
fn moe_block_shared_expert_supports_qwen3_nexts_layer_for_1_to_8_tokens() {
    let _cpu = cpu();
    for dtype in 0..3 {
        assert!(mlxcel_amdgpu_moe_block_shared_expert_available(dtype, 0));
        assert!(mlxcel_amdgpu_moe_block_shared_expert_available(dtype, 8));
        for m in 1..=MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS {
            for base in [SHARED, Q_SHARED] {
                assert!(SharedBlk { blk: Blk { dtype, m, ..base.blk }, ..base }.supported());
            }
        }
    }
}

#[test]
fn moe_block_shared_expert_refuses_router_scales_beside_a_dense_router() {
    let blk = Blk { quantized_router: None, ..Q_SHARED.blk };
    let dense_with_scales = SharedBlk { blk, expert_gate: [at(16), at(26), null()], ..Q_SHARED };
    let why = dense_with_scales.refused("expert_gate.scales");
    assert!(why.contains("router_bits 0"), "{why}");
}

#[test]
fn moe_block_shared_expert_refuses_a_router_group_size_beside_a_dense_router() {
    let _cpu = cpu();
    let (shape, m) = (QWEN3_NEXT, 2);
    assert!(!mlxcel_amdgpu_moe_block_shared_expert_supports(2, shape, m, 0, 64));
}

#[test]
fn moe_block_shared_expert_refuses_a_null_gate_row() {
    let expert_gate = [null(), null(), null()];
    assert_eq!(
        SharedBlk { expert_gate, ..SHARED }.refused("ws"),
        "is a null pointer; a shared expert needs all its buffers"
    );
}

#[test]
fn moe_block_shared_expert_refuses_null_quantized_gate_row_biases() {
    let expert_gate = [Q_SHARED.expert_gate[0], Q_SHARED.expert_gate[1], null()];
    assert!(SharedBlk { expert_gate, ..Q_SHARED }.refused("bsq").starts_with("is a null pointer"));
}

#[test]
fn moe_block_shared_expert_refuses_null_shared_down_scales() {
    let mut shared = SHARED.shared;
    shared[2][1] = null();
    assert!(SharedBlk { shared, ..SHARED }.refused("s2s").starts_with("is a null pointer"));
}

#[test]
fn moe_block_shared_expert_refuses_the_scratch_of_the_block_without_it() {
    let _cpu = cpu();
    let (mut without, mut with) = (0usize, 0usize);
    assert_eq!(unsafe { mlxcel_amdgpu_moe_block_scratch_bytes(QWEN3_NEXT, 2, &mut without) }, MLXCEL_AMDGPU_OK);
    assert_eq!(
        unsafe { mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes(QWEN3_NEXT, 2, &mut with) },
        MLXCEL_AMDGPU_OK
    );
    assert!(without < with, "{without} < {with}");
    drop(_cpu);
    let why = SharedBlk { blk: Blk { scratch_len: without, ..SHARED.blk }, ..SHARED }.refused("scratch");
    assert!(why.starts_with(&format!("holds {without} bytes, needs {with}")), "{why}");
}

#[test]
fn moe_block_shared_expert_refuses_nine_tokens() {
    let blk = Blk { m: 9, ..SHARED.blk };
    assert_eq!(SharedBlk { blk, ..SHARED }.refused("m"), "9 tokens is outside 1..=8");
}

#[test]
fn moe_block_shared_expert_refuses_out_over_the_gate_row() {
    let blk = Blk { out: SHARED.expert_gate[0].cast_mut(), ..SHARED.blk };
    let why = SharedBlk { blk, ..SHARED }.refused("out");
    assert!(why.ends_with("overlaps `ws`; `out` may alias nothing"), "{why}");
}

#[test]
fn moe_block_shared_expert_refuses_a_status_over_the_quantized_gate_rows_scales() {
    let blk = Blk { status: Q_SHARED.expert_gate[1].cast_mut().cast(), ..Q_SHARED.blk };
    let why = SharedBlk { blk, ..Q_SHARED }.refused("status");
    assert!(why.contains("overlaps `ssq`"), "{why}");
}

#[test]
fn moe_block_shared_expert_refuses_6_router_bits() {
    let blk = Q_SHARED.blk.with_quantized_router(|q| q.bits = 6);
    assert_eq!(SharedBlk { blk, ..Q_SHARED }.refused("router_bits"), "6 is not supported for the router; use 4 or 8");
}

// ------------------------------------------------------- describe_device

#[test]
fn describe_device_refuses_a_null_or_empty_buffer() {
    let _cpu = cpu();
    refused(unsafe { mlxcel_amdgpu_describe_device(null_mut(), 64) }, "buf");
    let mut one = [0x55 as c_char; 1];
    refused(unsafe { mlxcel_amdgpu_describe_device(one.as_mut_ptr(), 0) }, "buf");
    assert_eq!(one[0], 0x55, "a refused describe wrote into a buffer of 0 bytes");
}

#[test]
fn describe_device_truncates_to_the_buffer_and_terminates() {
    let _cpu = cpu();
    let mut full = [0 as c_char; 512];
    assert_eq!(unsafe { mlxcel_amdgpu_describe_device(full.as_mut_ptr(), full.len()) }, MLXCEL_AMDGPU_OK);
    let full = unsafe { CStr::from_ptr(full.as_ptr()) }.to_bytes().to_vec();
    assert!(full.starts_with(b"cpu"), "{}", String::from_utf8_lossy(&full));
    for len in [1usize, 2, 4] {
        let mut buf = [0x55 as c_char; 8];
        assert_eq!(unsafe { mlxcel_amdgpu_describe_device(buf.as_mut_ptr(), len) }, MLXCEL_AMDGPU_OK);
        let got = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_bytes();
        assert_eq!(got, &full[..len - 1], "describe into {len} bytes");
        assert!(buf[len..].iter().all(|&b| b == 0x55), "describe wrote past {len} bytes");
    }
}

// ------------------------------------------------------------------ select

#[test]
fn select_device_refuses_a_null_name() {
    let _cpu = cpu();
    assert_eq!(refused(unsafe { mlxcel_amdgpu_select_device(null(), 0) }, "name"), "is a null pointer");
    assert!(!mlxcel_amdgpu_xielu_available(0), "no device is selected after a failed select");
}

#[test]
fn select_device_refuses_an_unknown_backend() {
    let _cpu = cpu();
    let m = refused(unsafe { mlxcel_amdgpu_select_device(c"CPU".as_ptr(), 0) }, "name");
    assert_eq!(m, "\"CPU\" is not a backend; use hip, cuda or cpu");
    let st = unsafe { mlxcel_amdgpu_xielu(0, null(), null_mut(), 0, 1.0, 1.0, 0.5, -1e-6, null_mut()) };
    assert_eq!(st, MLXCEL_AMDGPU_UNAVAILABLE, "a launch after a failed select: {}", last_error());
}

// ------------------------------------------------------ moe_routed_forward

/// A scratch whose `part` (at the end of `act`) would lie past 2^64 is
/// refused naming `scratch`, before any launch.
#[test]
fn moe_routed_forward_refuses_a_scratch_that_wraps_the_address_space() {
    let _cpu = cpu();
    let mut need = 0usize;
    assert_eq!(unsafe { mlxcel_amdgpu_moe_scratch_bytes(6, 2688, 1856, &mut need) }, MLXCEL_AMDGPU_OK);
    let scratch = 0u64.wrapping_sub(256) as *mut c_void;
    let (u, f) = (P as *const u32, P as *const f32);
    let st = unsafe {
        mlxcel_amdgpu_moe_routed_forward(
            0,
            NEMOTRON,
            P,
            u,
            f,
            u,
            P,
            P,
            u,
            P,
            P,
            P,
            scratch,
            need,
            null_mut(),
            null_mut(),
        )
    };
    assert!(refused(st, "scratch").contains("wraps the address space"));
}

// ------------------------------------------------------- described launches

/// xielu of one element at `P`, on the selected device.
fn xielu_at_p() -> MlxcelAmdgpuStatus {
    unsafe { mlxcel_amdgpu_xielu(0, P, P.wrapping_byte_add(4096), 1, 0.8, 0.6, 0.5, -1e-6, null_mut()) }
}

#[test]
fn describe_on_the_cpu_backend_is_unavailable_and_enqueues_nothing() {
    let _cpu = cpu();
    assert_eq!(mlxcel_amdgpu_describe_begin(), MLXCEL_AMDGPU_OK, "{}", last_error());
    assert_eq!(xielu_at_p(), MLXCEL_AMDGPU_UNAVAILABLE);
    assert!(last_error().contains("only a GPU backend"), "{}", last_error());
    let mut list: *mut MlxcelAmdgpuLaunchList = null_mut();
    assert_eq!(unsafe { mlxcel_amdgpu_describe_end(&mut list) }, MLXCEL_AMDGPU_OK, "{}", last_error());
    assert_eq!(unsafe { mlxcel_amdgpu_launch_list_len(list) }, 0);
    unsafe { mlxcel_amdgpu_launch_list_release(list) };
}

#[test]
fn describe_begin_twice_is_refused_and_the_first_stays_open() {
    let _cpu = cpu();
    assert_eq!(mlxcel_amdgpu_describe_begin(), MLXCEL_AMDGPU_OK);
    refused(mlxcel_amdgpu_describe_begin(), "describe");
    let mut list: *mut MlxcelAmdgpuLaunchList = null_mut();
    assert_eq!(unsafe { mlxcel_amdgpu_describe_end(&mut list) }, MLXCEL_AMDGPU_OK, "{}", last_error());
    unsafe { mlxcel_amdgpu_launch_list_release(list) };
}

#[test]
fn describe_end_without_begin_or_with_a_null_list_is_refused() {
    let _cpu = cpu();
    let mut list: *mut MlxcelAmdgpuLaunchList = null_mut();
    refused(unsafe { mlxcel_amdgpu_describe_end(&mut list) }, "describe");
    assert!(list.is_null());
    assert_eq!(mlxcel_amdgpu_describe_begin(), MLXCEL_AMDGPU_OK);
    refused(unsafe { mlxcel_amdgpu_describe_end(null_mut()) }, "list");
    // Describing ended with the refusal: the next launch runs again.
    refused(unsafe { mlxcel_amdgpu_describe_end(&mut list) }, "describe");
}

#[test]
fn launch_list_get_checks_list_index_and_out() {
    let _cpu = cpu();
    assert_eq!(mlxcel_amdgpu_describe_begin(), MLXCEL_AMDGPU_OK);
    let mut list: *mut MlxcelAmdgpuLaunchList = null_mut();
    assert_eq!(unsafe { mlxcel_amdgpu_describe_end(&mut list) }, MLXCEL_AMDGPU_OK);
    let mut desc = std::mem::MaybeUninit::<MlxcelAmdgpuLaunchDesc>::uninit();
    refused(unsafe { mlxcel_amdgpu_launch_list_get(null(), 0, desc.as_mut_ptr()) }, "list");
    refused(unsafe { mlxcel_amdgpu_launch_list_get(list, 0, null_mut()) }, "out");
    let why = refused(unsafe { mlxcel_amdgpu_launch_list_get(list, 0, desc.as_mut_ptr()) }, "index");
    assert!(why.contains("holds 0 launches"), "{why}");
    assert_eq!(unsafe { mlxcel_amdgpu_launch_list_len(null()) }, 0);
    unsafe { mlxcel_amdgpu_launch_list_release(list) };
    unsafe { mlxcel_amdgpu_launch_list_release(null_mut()) };
}

// ------------------------------------------------------------ moe batch

/// The three batch calls of `m` tokens of `shape`, each with pointers no
/// launch may reach: their statuses.
fn moe_batch_calls(shape: MoeShape, m: u32) -> [MlxcelAmdgpuStatus; 3] {
    let (u, f) = (P as *const u32, P as *mut f32);
    unsafe {
        [
            mlxcel_amdgpu_moe_gateup_batch(0, shape, m, 0, P, u, u, P, P, u, P, P, f, null_mut(), null_mut()),
            mlxcel_amdgpu_moe_down_batch(0, shape, m, u, u, P, P, f, f, f, null_mut(), null_mut()),
            mlxcel_amdgpu_moe_combine_batch(0, f, P, m, shape.k, shape.din, null_mut()),
        ]
    }
}

#[test]
fn moe_batch_refuses_zero_tokens() {
    let _cpu = cpu();
    for st in moe_batch_calls(NEMOTRON, 0) {
        refused(st, "m");
    }
}

#[test]
fn moe_batch_refuses_more_tokens_than_the_limit() {
    let _cpu = cpu();
    for st in moe_batch_calls(NEMOTRON, MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS + 1) {
        refused(st, "m");
    }
}

#[test]
fn moe_batch_refuses_more_slots_than_the_limit() {
    let _cpu = cpu();
    let k = MLXCEL_AMDGPU_MOE_MAX_BATCH_SLOTS / 2 + 1;
    for st in moe_batch_calls(MoeShape { k, ..NEMOTRON }, 2) {
        refused(st, "k");
    }
}

#[test]
fn moe_down_batch_refuses_nine_tokens_at_6_bits() {
    let _cpu = cpu();
    let (u, f) = (P as *const u32, P as *mut f32);
    let shape = MoeShape { bits: 6, ..NEMOTRON };
    let st = unsafe { mlxcel_amdgpu_moe_down_batch(0, shape, 9, u, u, P, P, f, f, f, null_mut(), null_mut()) };
    refused(st, "m");
}

#[test]
fn moe_gateup_batch_refuses_a_bad_activation() {
    let _cpu = cpu();
    let u = P as *const u32;
    let st = unsafe {
        mlxcel_amdgpu_moe_gateup_batch(0, NEMOTRON, 2, 2, P, u, u, P, P, u, P, P, P as *mut f32, null_mut(), null_mut())
    };
    refused(st, "activation");
}

#[test]
fn moe_gateup_batch_refuses_a_null_x() {
    let _cpu = cpu();
    let (u, f) = (P as *const u32, P as *mut f32);
    let st = unsafe {
        mlxcel_amdgpu_moe_gateup_batch(0, NEMOTRON, 2, 0, null(), u, u, P, P, u, P, P, f, null_mut(), null_mut())
    };
    assert_eq!(refused(st, "x"), "is a null pointer");
}

#[test]
fn moe_batch_refuses_a_bad_dtype_code() {
    let (u, f) = (P as *const u32, P as *mut f32);
    refuses_every_bad_dtype(|code| unsafe {
        mlxcel_amdgpu_moe_gateup_batch(code, NEMOTRON, 2, 0, P, u, u, P, P, u, P, P, f, null_mut(), null_mut())
    });
    refuses_every_bad_dtype(|code| unsafe {
        mlxcel_amdgpu_moe_down_batch(code, NEMOTRON, 2, u, u, P, P, f, f, f, null_mut(), null_mut())
    });
    refuses_every_bad_dtype(|code| unsafe { mlxcel_amdgpu_moe_combine_batch(code, f, P, 2, 6, 64, null_mut()) });
}
