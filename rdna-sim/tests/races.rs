//! The race checker and the wave schedules.
//!
//! - Planted races (`kernels-device/src/race_plants.rs`, a test-only object
//!   built on first use): each is caught under every schedule, with the kind
//!   and memory expected, and is clean once fixed.
//! - Every shipped kernel of both gfx11 objects, every dtype, at the edge
//!   shapes: no race under any schedule, and the same bytes under all of them.
mod common;
use common::{Arg, download, enc, load, mamba_case, noise, pack, upload, xielu_args};
use rdna_sim::codeobj::{self, CodeObject};
use rdna_sim::dispatch::{self, Launch};
use rdna_sim::exec::Mode;
use rdna_sim::mem::Memory;
use rdna_sim::race::{Kind, Race, Schedule, Space, compare_outputs};
use std::sync::OnceLock;

const ARCHS: [&str; 2] = ["gfx1151", "gfx11-generic"];
/// Seeds of the random schedules each case runs under (with the three fixed ones).
const SEEDS: [u64; 2] = [1, 2];

/// One launch: the kernel, its geometry, arguments and buffers.
struct Case {
    kernel: String,
    grid: [u32; 3],
    block: u32,
    lds: u32,
    args: Vec<Arg>,
    bufs: Vec<Vec<u8>>,
    /// Element size of each buffer (for the report of a difference).
    elem: Vec<usize>,
    /// Bytes by which buffer `i` starts past its allocation's (aligned) start.
    shift: Vec<u64>,
    /// Declared same-value words: (buffer, byte offset, length).
    same_value: Vec<(usize, u64, usize)>,
    /// Also run the workgroups last first: for a kernel whose last workgroup
    /// to arrive does the work of the others' results.
    both_orders: bool,
}

impl Case {
    fn new(kernel: &str, grid: [u32; 3], block: u32, lds: u32, args: Vec<Arg>, bufs: Vec<(Vec<u8>, usize)>) -> Case {
        let n = bufs.len();
        let (bufs, elem) = bufs.into_iter().unzip();
        Case {
            kernel: kernel.to_string(),
            grid,
            block,
            lds,
            args,
            bufs,
            elem,
            shift: vec![0; n],
            same_value: Vec::new(),
            both_orders: false,
        }
    }
}

/// Runs `case` under `schedule` with the race checker; returns the buffers afterwards and the races.
fn run(co: &CodeObject, case: &Case, schedule: Schedule) -> Result<(Vec<Vec<u8>>, Vec<Race>), String> {
    run_in_order(co, case, schedule, false)
}

/// [`run`], with the workgroups last first when `reversed`.
fn run_in_order(
    co: &CodeObject,
    case: &Case,
    schedule: Schedule,
    reversed: bool,
) -> Result<(Vec<Vec<u8>>, Vec<Race>), String> {
    let k = co.kernel(&case.kernel).ok_or_else(|| format!("no kernel {}", case.kernel))?;
    let mut mem = Memory::new();
    let addrs = upload(&mut mem, &case.bufs, &case.shift);
    let kernarg = pack(k, &case.args, &|i| addrs[i]);
    let same: Vec<(u64, usize)> = case.same_value.iter().map(|&(b, o, n)| (addrs[b] + o, n)).collect();
    let l = Launch {
        grid: case.grid,
        block: [case.block, 1, 1],
        dynamic_lds: case.lds,
        kernarg: &kernarg,
        mode: Mode { ieee: k.kd.ieee_mode(), perturb: None, strict_wait: true },
        schedule,
        race_check: true,
        same_value: &same,
        workgroups_reversed: reversed,
        ..Launch::default()
    };
    let (_, races) = dispatch::launch_checked(&mut mem, k, &l).map_err(|e| e.to_string())?;
    Ok((download(&mem, &case.bufs, &addrs), races))
}

fn describe(co: &CodeObject, kernel: &str, races: &[Race]) -> String {
    let insts = &co.kernel(kernel).unwrap().insts;
    races.iter().map(|r| format!("\n  {}", r.describe(insts))).collect()
}

/// No race under any schedule, the same bytes under all of them, and some
/// output written (so that a case that returns early cannot pass unnoticed).
fn assert_clean(co: &CodeObject, what: &str, case: &Case) {
    let mut first: Option<(Schedule, Vec<Vec<u8>>)> = None;
    let orders: &[bool] = if case.both_orders { &[false, true] } else { &[false] };
    for (s, reversed) in Schedule::all(&SEEDS).into_iter().flat_map(|s| orders.iter().map(move |&r| (s, r))) {
        let what = &if reversed { format!("{what} (workgroups last first)") } else { what.to_string() };
        let (out, races) = run_in_order(co, case, s, reversed).unwrap_or_else(|e| panic!("{what}, schedule {s}: {e}"));
        assert!(
            races.is_empty(),
            "{what}: {} races under the {s} schedule:{}",
            races.len(),
            describe(co, &case.kernel, &races)
        );
        match &first {
            None => {
                assert!(out != case.bufs, "{what}: the launch wrote nothing");
                first = Some((s, out));
            }
            Some((s0, o0)) => {
                if let Err(e) = compare_outputs(what, (s0, o0), (&s, &out), &case.elem) {
                    panic!("{e}");
                }
            }
        }
    }
}

/// [`assert_clean`] on both shipped gfx11 objects (skipped, printed, when the root crate was not built).
fn clean_on_both(case: &Case) {
    for arch in ARCHS {
        let Some(co) = load(arch) else { return };
        assert_clean(&co, &format!("{arch} {}", case.kernel), case);
    }
}

fn zeros(n: usize, es: usize) -> (Vec<u8>, usize) {
    (vec![0u8; n * es], es)
}

fn u32s(v: &[u32]) -> (Vec<u8>, usize) {
    (v.iter().flat_map(|x| x.to_le_bytes()).collect(), 4)
}

/// `n` words of a xorshift32 sequence from `seed` (advanced past them): random
/// quantized codes, whose values every kernel treats alike.
fn xorshift_words(seed: &mut u32, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 17;
            *seed ^= *seed << 5;
            *seed
        })
        .collect()
}

// ---- the shipped kernels ----

/// add3_layer_norm (instance `name`) on two rows of `d`.
fn add3(name: &str, d: u32) -> Case {
    use kernels_device::geometry::add3_layer_norm::{WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
    let ty = name.rsplit('_').next().unwrap();
    let rows = 2u32;
    let n = (rows * d) as usize;
    let bufs = vec![
        enc(ty, &noise(n, 1, 2.0)),
        enc(ty, &noise(n, 2, 2.0)),
        enc(ty, &noise(n, 3, 2.0)),
        enc(ty, &noise(d as usize, 4, 1.0)),
        enc(ty, &noise(d as usize, 5, 1.0)),
        zeros(n, enc(ty, &[0.0]).1),
        zeros(n, enc(ty, &[0.0]).1),
    ];
    let mut args: Vec<Arg> = (0..7).map(Arg::Buf).collect();
    args.extend([Arg::U32(rows), Arg::U32(d), Arg::F32(1e-5)]);
    Case::new(name, [rows, 1, 1], WORKGROUP_SIZE, WORKGROUP_MEM_BYTES, args, bufs)
}

/// mamba1_scan of dtype `ty` with state size `n` (both mappings; N = 1 the smallest).
fn mamba(ty: &str, n: u32) -> Case {
    use kernels_device::geometry::mamba1_scan::Mapping;
    // len = 9: one unrolled block of 8 steps and one step after it.
    let (args, bufs, grid) = mamba_case(ty, (2, 9, 20, n));
    Case::new(
        &format!("mamba1_scan_{ty}"),
        grid,
        Mapping::AMD.workgroup_size(),
        Mapping::AMD.workgroup_mem_bytes(),
        args,
        bufs,
    )
}

/// xielu of dtype `ty` on two workgroups; `table`: the workgroup-memory table
/// path of bf16 or f16.
fn xielu(ty: &str, table: bool) -> Case {
    use kernels_device::geometry::xielu::{
        BF16_WORKGROUP_MEM_BYTES, F16_WORKGROUP_MEM_BYTES, TABLE_MIN_ELEMS_PER_WORKGROUP, TABLE_WORKGROUP_SIZE,
    };
    let (n, block, lds) = if table {
        let lds = if ty == "bf16" { BF16_WORKGROUP_MEM_BYTES } else { F16_WORKGROUP_MEM_BYTES };
        (2 * TABLE_MIN_ELEMS_PER_WORKGROUP as usize + 37, TABLE_WORKGROUP_SIZE, lds)
    } else {
        (1000, 256, 0)
    };
    let mut xs = noise(n, 21, 12.0);
    xs[..6].copy_from_slice(&[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 3e38]);
    let x = enc(ty, &xs);
    let es = x.1;
    let bufs = vec![x, zeros(n, es)];
    let args = xielu_args(n);
    Case::new(&format!("xielu_{ty}"), [2, 1, 1], block, lds, args, bufs)
}

/// The MoE shape of the cases: 3 slots of 4 experts, Din 256, Dff 128, groups of 64.
const MOE_SLOTS: u32 = 3;
const MOE_EXPERTS: u32 = 4;
const MOE_DIN: u32 = 256;
const MOE_DFF: u32 = 128;
const MOE_GROUP: u32 = 64;

/// The three MoE paths each case runs: 4-bit weights on the wide (16-byte)
/// path; 8-bit weights 4 bytes off alignment (the single-word path); and
/// out-of-range expert ids in slots 1 and 2, whose first workgroup writes
/// `status` (one writer per launch: the first bad slot's).
const MOE_PATHS: [(u32, bool, [u32; 3]); 3] = [(4, true, [2, 0, 3]), (8, false, [1, 3, 1]), (4, true, [0, 9, 7])];

/// moe_fc1_relu2 (`down` false) or moe_down of dtype `ty` on one of [`MOE_PATHS`].
fn moe(ty: &str, down: bool, path: usize) -> Case {
    moe_of(ty, down, path, MOE_DIN, MOE_DFF)
}

/// [`moe`] with rows of `din` (fc1) or `dff` (down) values: at most 16 quads a
/// row take two rows a wave, longer ones one (`MOE_DIN` and `MOE_DFF` are both
/// short).
fn moe_of(ty: &str, down: bool, path: usize, din: u32, dff: u32) -> Case {
    use kernels_device::geometry::moe::{WORKGROUP_SIZE, workgroup_mem_bytes, workgroups};
    let (bits, wide, idx) = MOE_PATHS[path];
    let (cols, rows) = if down { (dff, din) } else { (din, dff) };
    let words = (MOE_EXPERTS * rows * cols * bits / 32) as usize;
    let groups = (MOE_EXPERTS * rows * cols / MOE_GROUP) as usize;
    let w = xorshift_words(&mut (0x1234_5678u32 + path as u32), words);
    let scales: Vec<f32> = noise(groups, 31, 0.05);
    let biases: Vec<f32> = noise(groups, 32, 0.05);
    let act_elems = (MOE_SLOTS * dff) as usize;
    let mut bufs = Vec::new();
    let w_buf;
    if down {
        bufs.push(u32s(&idx));
        bufs.push(u32s(&w));
        w_buf = 1;
        bufs.push(enc(ty, &scales));
        bufs.push(enc(ty, &biases));
        bufs.push(enc("f32", &noise(act_elems, 33, 1.0)));
        bufs.push(enc("f32", &noise(MOE_SLOTS as usize, 34, 1.0)));
        bufs.push(zeros((MOE_SLOTS * din) as usize, 4));
    } else {
        bufs.push(enc(ty, &noise(din as usize, 35, 1.0)));
        bufs.push(u32s(&idx));
        bufs.push(u32s(&w));
        w_buf = 2;
        bufs.push(enc(ty, &scales));
        bufs.push(enc(ty, &biases));
        bufs.push(zeros(act_elems, 4));
    }
    bufs.push(zeros(1, 4));
    let status = bufs.len() - 1;
    let mut args: Vec<Arg> = (0..status).map(Arg::Buf).collect();
    args.extend([MOE_EXPERTS, MOE_SLOTS, din, dff, bits, MOE_GROUP].map(Arg::U32));
    args.push(Arg::Buf(status));
    let name = format!("{}_{ty}", if down { "moe_down" } else { "moe_fc1_relu2" });
    let mut case =
        Case::new(&name, [workgroups(rows), 1, MOE_SLOTS], WORKGROUP_SIZE, workgroup_mem_bytes(cols, bits), args, bufs);
    if !wide {
        case.shift[w_buf] = 4;
    }
    case
}

/// moe_down_combine of dtype `ty` on one of [`MOE_PATHS`]: 2 tokens of
/// [`MOE_SLOTS`] slots (the path's ids, then the same ids rotated), Din 200
/// (six full row blocks and a part one), run in both workgroup orders so that
/// another workgroup is the last to arrive at each block.
fn down_combine(ty: &str, path: usize) -> Case {
    use kernels_device::geometry::moe::{WORKGROUP_SIZE, workgroup_mem_bytes, workgroups};
    let (bits, wide, idx) = MOE_PATHS[path];
    let (m, din, dff) = (2u32, 200u32, MOE_DFF);
    let slots = m * MOE_SLOTS;
    let ids = [idx[0], idx[1], idx[2], idx[1], idx[2], idx[0]];
    let words = (MOE_EXPERTS * din * dff * bits / 32) as usize;
    let groups = (MOE_EXPERTS * din * dff / MOE_GROUP) as usize;
    let w = xorshift_words(&mut (0x5EED_0001u32 + path as u32), words);
    let bufs = vec![
        u32s(&ids),
        u32s(&w),
        enc(ty, &noise(groups, 61, 0.05)),
        enc(ty, &noise(groups, 62, 0.05)),
        enc("f32", &noise((slots * dff) as usize, 63, 1.0)),
        enc("f32", &noise(slots as usize, 64, 1.0)),
        zeros((slots * din) as usize, 4),
        enc(ty, &vec![0.0; (m * din) as usize]),
        zeros((m * workgroups(din)) as usize, 4),
        zeros(1, 4),
    ];
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), Arg::U64(0), Arg::U64(0), Arg::U64(0)];
    args.extend((4..9).map(Arg::Buf));
    args.push(Arg::U32(m));
    args.extend([MOE_EXPERTS, MOE_SLOTS, din, dff, bits, MOE_GROUP].map(Arg::U32));
    args.push(Arg::Buf(9));
    let mut case = Case::new(
        &format!("moe_down_combine_{ty}"),
        [workgroups(din), 1, slots],
        WORKGROUP_SIZE,
        workgroup_mem_bytes(dff, bits),
        args,
        bufs,
    );
    if !wide {
        case.shift[1] = 4;
    }
    case.both_orders = true;
    case
}

/// moe_gateup (`down` false; SwiGLU on path 0, GeGLU otherwise) or the 6-bit
/// moe_down6 of dtype `ty` on one of [`MOE_PATHS`] (its bit width ignored by
/// moe_down6, which reads single words on every path).
fn moe_gated(ty: &str, down: bool, path: usize) -> Case {
    use kernels_device::geometry::moe::{WORKGROUP_SIZE, workgroup_mem_bytes, workgroups};
    let (path_bits, wide, idx) = MOE_PATHS[path];
    let bits = if down { 6 } else { path_bits };
    let (cols, rows) = if down { (MOE_DFF, MOE_DIN) } else { (MOE_DIN, MOE_DFF) };
    let words = (MOE_EXPERTS * rows * cols * bits / 32) as usize;
    let groups = (MOE_EXPERTS * rows * cols / MOE_GROUP) as usize;
    let mut seed = 0x8765_4321u32 + path as u32;
    let mut w = || xorshift_words(&mut seed, words);
    let mut bufs = Vec::new();
    let mut scalars = vec![];
    if down {
        bufs.extend([u32s(&idx), u32s(&w()), enc(ty, &noise(groups, 41, 0.05)), enc(ty, &noise(groups, 42, 0.05))]);
        bufs.push(enc("f32", &noise((MOE_SLOTS * MOE_DFF) as usize, 43, 1.0)));
        bufs.push(enc("f32", &noise(MOE_SLOTS as usize, 44, 1.0)));
        bufs.push(zeros((MOE_SLOTS * MOE_DIN) as usize, 4));
    } else {
        bufs.extend([enc(ty, &noise(MOE_DIN as usize, 45, 1.0)), u32s(&idx)]);
        for (i, stack) in [w(), w()].iter().enumerate() {
            bufs.push(u32s(stack));
            bufs.push(enc(ty, &noise(groups, 46 + 2 * i as u32, 0.05)));
            bufs.push(enc(ty, &noise(groups, 47 + 2 * i as u32, 0.05)));
        }
        bufs.push(zeros((MOE_SLOTS * MOE_DFF) as usize, 4));
        scalars.push(Arg::U32(if path == 0 { 0 } else { 1 }));
    }
    bufs.push(zeros(1, 4));
    let status = bufs.len() - 1;
    let mut args: Vec<Arg> = (0..status).map(Arg::Buf).collect();
    args.extend(scalars);
    args.extend([MOE_EXPERTS, MOE_SLOTS, MOE_DIN, MOE_DFF, bits, MOE_GROUP].map(Arg::U32));
    args.push(Arg::Buf(status));
    let name = format!("{}_{ty}", if down { "moe_down6" } else { "moe_gateup" });
    let staged_bits = if down { 8 } else { bits };
    let lds = workgroup_mem_bytes(cols, staged_bits);
    let mut case = Case::new(&name, [workgroups(rows), 1, MOE_SLOTS], WORKGROUP_SIZE, lds, args, bufs);
    if !wide {
        // Both stacks' words 4 bytes off alignment (the single-word path).
        case.shift[if down { 1 } else { 2 }] = 4;
        if !down {
            case.shift[5] = 4;
        }
    }
    case
}

/// moe_combine of dtype `ty`: 3 slots, 300 outputs (a partial second workgroup).
fn moe_combine(ty: &str) -> Case {
    use kernels_device::geometry::moe::COMBINE_WORKGROUP_SIZE;
    let din = 300u32;
    let out = enc(ty, &[0.0]).1;
    let bufs = vec![enc("f32", &noise((MOE_SLOTS * din) as usize, 41, 1.0)), zeros(din as usize, out)];
    let args = vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(MOE_SLOTS), Arg::U32(din)];
    Case::new(
        &format!("moe_combine_{ty}"),
        [din.div_ceil(COMBINE_WORKGROUP_SIZE), 1, 1],
        COMBINE_WORKGROUP_SIZE,
        0,
        args,
        bufs,
    )
}

/// moe_router_logits of dtype `ty`: 3 tokens, 13 rows of 40 values (whole
/// chunks: a few lanes of wave 0), 37 (single values) or 2112 (whole chunks:
/// every wave, two or three batches a lane), and a shared expert's gate row
/// (one more workgroup).
fn router_logits(ty: &str, din: u32) -> Case {
    use kernels_device::geometry::moe_router::{LOGITS_WORKGROUP_MEM_BYTES, LOGITS_WORKGROUP_SIZE, logits_workgroups};
    let (m, e) = (3u32, 13u32);
    let bufs = vec![
        enc(ty, &noise((m * din) as usize, 51, 1.0)),
        enc(ty, &noise((e * din) as usize, 52, 0.1)),
        enc(ty, &noise(din as usize, 54, 0.1)),
        zeros((m * e) as usize, 4),
        zeros(m as usize, 4),
        // Counts to zero (the block's down launch's), not zero before.
        u32s(&[7; 11]),
    ];
    let mut args =
        vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), Arg::Buf(3), Arg::Buf(4), Arg::U32(m), Arg::U32(e), Arg::U32(din)];
    args.extend([Arg::Buf(5), Arg::U32(11)]);
    Case::new(
        &format!("moe_router_logits_{ty}"),
        [logits_workgroups(e + 1), 1, 1],
        LOGITS_WORKGROUP_SIZE,
        LOGITS_WORKGROUP_MEM_BYTES,
        args,
        bufs,
    )
}

/// moe_topk: 3 tokens of 70 experts (lanes with two and three each), K 5,
/// renormalized, with a shared expert's slot; token 1 has a tie at its top.
fn topk() -> Case {
    use kernels_device::geometry::moe_router::{TOPK_WORKGROUP_MEM_BYTES, TOPK_WORKGROUP_SIZE};
    let (m, e, k) = (3u32, 70u32, 5u32);
    let mut logits = noise((m * e) as usize, 53, 2.0);
    logits[(e + 4) as usize] = 9.0;
    logits[(e + 37) as usize] = 9.0;
    let slots = (m * (k + 1)) as usize;
    let bufs = vec![enc("f32", &logits), enc("f32", &noise(m as usize, 55, 2.0)), zeros(slots, 4), zeros(slots, 4)];
    let args = vec![
        Arg::Buf(0),
        Arg::Buf(1),
        Arg::Buf(2),
        Arg::Buf(3),
        Arg::U32(m),
        Arg::U32(e),
        Arg::U32(k),
        Arg::U32(1),
        Arg::U32(1),
    ];
    Case::new("moe_topk", [m, 1, 1], TOPK_WORKGROUP_SIZE, TOPK_WORKGROUP_MEM_BYTES, args, bufs)
}

/// moe_gateup_routed (instance `_e{instance}_{ty}`): 2 tokens of `e` experts,
/// K 3 renormalized, 4-bit, with and without a shared expert's slot; token 1's
/// logits hold a NaN (its routed slots take the bad-id path) and token 0's a
/// tie at its top.
fn gateup_routed(ty: &str, instance: u32, e: u32, shared: bool) -> Case {
    use kernels_device::geometry::moe::{WORKGROUP_SIZE, workgroup_mem_bytes, workgroups};
    let (m, k, bits) = (2u32, MOE_SLOTS, 4u32);
    let (din, dff) = (MOE_DIN, MOE_DFF);
    let words = |n: u32| (n * dff * din * bits / 32) as usize;
    let groups = |n: u32| (n * dff * din / MOE_GROUP) as usize;
    let mut seed = 0x1357_9BDFu32 + e;
    let mut w = |n: u32| xorshift_words(&mut seed, words(n));
    let mut logits = noise((m * e) as usize, 61, 2.0);
    (logits[3], logits[e as usize - 1]) = (9.0, 9.0);
    logits[(e + 5) as usize] = f32::NAN;
    let slots = (m * (k + shared as u32)) as usize;
    let mut bufs = vec![
        enc(ty, &noise((m * din) as usize, 62, 1.0)),
        enc("f32", &logits),
        enc("f32", &noise(m as usize, 63, 2.0)),
        zeros(slots, 4),
        zeros(slots, 4),
    ];
    // The routed stacks of `e` experts (buffers 5 to 10), `act` (11), then
    // the shared expert's six matrices (12 to 17) when it has one.
    let matrices = |w: Vec<u32>, n: u32, seed: u32| {
        [u32s(&w), enc(ty, &noise(groups(n), seed, 0.05)), enc(ty, &noise(groups(n), seed + 1, 0.05))]
    };
    bufs.extend(matrices(w(e), e, 64));
    bufs.extend(matrices(w(e), e, 66));
    bufs.push(zeros(slots * dff as usize, 4));
    if shared {
        bufs.extend(matrices(w(1), 1, 68));
        bufs.extend(matrices(w(1), 1, 70));
    }
    let given = |b: usize| if shared { Arg::Buf(b) } else { Arg::U64(0) };
    let mut args = vec![Arg::Buf(0), Arg::Buf(1), given(2)];
    args.extend((3..=10).map(Arg::Buf));
    args.extend((12..=17).map(given));
    args.push(Arg::Buf(11));
    args.extend([0, m, 1, shared as u32, e, k, din, dff, bits, MOE_GROUP].map(Arg::U32));
    Case::new(
        &format!("moe_gateup_routed_e{instance}_{ty}"),
        [workgroups(dff), 1, slots as u32],
        WORKGROUP_SIZE,
        workgroup_mem_bytes(din, bits),
        args,
        bufs,
    )
}

/// One test per case: `name => case expression`.
macro_rules! clean {
    ($($test:ident => $case:expr;)*) => {$(
        #[test]
        fn $test() {
            clean_on_both(&$case);
        }
    )*};
}

clean! {
    add3_layer_norm_f32_d1 => add3("add3_layer_norm_f32", 1);
    add3_layer_norm_f32_d5 => add3("add3_layer_norm_f32", 5);
    add3_layer_norm_f32_d1025 => add3("add3_layer_norm_f32", 1025);
    add3_layer_norm_f32_d4096 => add3("add3_layer_norm_f32", 4096);
    add3_layer_norm_f32_d6656 => add3("add3_layer_norm_f32", 6656);
    add3_layer_norm_f16_d1 => add3("add3_layer_norm_f16", 1);
    add3_layer_norm_f16_d5 => add3("add3_layer_norm_f16", 5);
    add3_layer_norm_f16_d1025 => add3("add3_layer_norm_f16", 1025);
    add3_layer_norm_f16_d4096 => add3("add3_layer_norm_f16", 4096);
    add3_layer_norm_f16_d6656 => add3("add3_layer_norm_f16", 6656);
    add3_layer_norm_bf16_d1 => add3("add3_layer_norm_bf16", 1);
    add3_layer_norm_bf16_d5 => add3("add3_layer_norm_bf16", 5);
    add3_layer_norm_bf16_d1025 => add3("add3_layer_norm_bf16", 1025);
    add3_layer_norm_bf16_d4096 => add3("add3_layer_norm_bf16", 4096);
    add3_layer_norm_bf16_d6656 => add3("add3_layer_norm_bf16", 6656);
    // The short instances take D <= 4096 (the launcher picks them only there).
    add3_layer_norm_d4096_f32_d1 => add3("add3_layer_norm_d4096_f32", 1);
    add3_layer_norm_d4096_f32_d5 => add3("add3_layer_norm_d4096_f32", 5);
    add3_layer_norm_d4096_f32_d1025 => add3("add3_layer_norm_d4096_f32", 1025);
    add3_layer_norm_d4096_f32_d4096 => add3("add3_layer_norm_d4096_f32", 4096);
    add3_layer_norm_d4096_f16_d1 => add3("add3_layer_norm_d4096_f16", 1);
    add3_layer_norm_d4096_f16_d5 => add3("add3_layer_norm_d4096_f16", 5);
    add3_layer_norm_d4096_f16_d1025 => add3("add3_layer_norm_d4096_f16", 1025);
    add3_layer_norm_d4096_f16_d4096 => add3("add3_layer_norm_d4096_f16", 4096);
    add3_layer_norm_d4096_bf16_d1 => add3("add3_layer_norm_d4096_bf16", 1);
    add3_layer_norm_d4096_bf16_d5 => add3("add3_layer_norm_d4096_bf16", 5);
    add3_layer_norm_d4096_bf16_d1025 => add3("add3_layer_norm_d4096_bf16", 1025);
    add3_layer_norm_d4096_bf16_d4096 => add3("add3_layer_norm_d4096_bf16", 4096);
    mamba1_scan_f32_n1 => mamba("f32", 1);
    mamba1_scan_f32_n16 => mamba("f32", 16);
    mamba1_scan_f32_n32 => mamba("f32", 32);
    mamba1_scan_f16_n1 => mamba("f16", 1);
    mamba1_scan_f16_n16 => mamba("f16", 16);
    mamba1_scan_f16_n32 => mamba("f16", 32);
    mamba1_scan_bf16_n1 => mamba("bf16", 1);
    mamba1_scan_bf16_n16 => mamba("bf16", 16);
    mamba1_scan_bf16_n32 => mamba("bf16", 32);
    xielu_f32 => xielu("f32", false);
    xielu_f16 => xielu("f16", false);
    xielu_bf16 => xielu("bf16", false);
    xielu_bf16_table => xielu("bf16", true);
    xielu_f16_table => xielu("f16", true);
    moe_fc1_relu2_f32_wide_4bit => moe("f32", false, 0);
    moe_fc1_relu2_f32_narrow_8bit => moe("f32", false, 1);
    moe_fc1_relu2_f32_bad_ids => moe("f32", false, 2);
    moe_fc1_relu2_f16_wide_4bit => moe("f16", false, 0);
    moe_fc1_relu2_f16_narrow_8bit => moe("f16", false, 1);
    moe_fc1_relu2_f16_bad_ids => moe("f16", false, 2);
    moe_fc1_relu2_bf16_wide_4bit => moe("bf16", false, 0);
    moe_fc1_relu2_bf16_narrow_8bit => moe("bf16", false, 1);
    moe_fc1_relu2_bf16_bad_ids => moe("bf16", false, 2);
    moe_down_f32_wide_4bit => moe("f32", true, 0);
    moe_down_f32_narrow_8bit => moe("f32", true, 1);
    moe_down_f32_bad_ids => moe("f32", true, 2);
    moe_down_f16_wide_4bit => moe("f16", true, 0);
    moe_down_f16_narrow_8bit => moe("f16", true, 1);
    moe_down_f16_bad_ids => moe("f16", true, 2);
    moe_down_bf16_wide_4bit => moe("bf16", true, 0);
    moe_down_bf16_narrow_8bit => moe("bf16", true, 1);
    moe_down_bf16_bad_ids => moe("bf16", true, 2);
    moe_fc1_relu2_bf16_wide_4bit_long_rows => moe_of("bf16", false, 0, 1024, MOE_DFF);
    moe_down_f32_wide_4bit_long_rows => moe_of("f32", true, 0, MOE_DIN, 1024);
    moe_down_bf16_narrow_8bit_long_rows => moe_of("bf16", true, 1, MOE_DIN, 1024);
    moe_gateup_f32_wide_4bit => moe_gated("f32", false, 0);
    moe_gateup_f16_narrow_8bit => moe_gated("f16", false, 1);
    moe_gateup_bf16_wide_4bit => moe_gated("bf16", false, 0);
    moe_gateup_bf16_bad_ids => moe_gated("bf16", false, 2);
    moe_down6_f32 => moe_gated("f32", true, 0);
    moe_down6_f16 => moe_gated("f16", true, 1);
    moe_down6_bf16_bad_ids => moe_gated("bf16", true, 2);
    moe_router_logits_f32_chunks => router_logits("f32", 40);
    moe_router_logits_f16_values => router_logits("f16", 37);
    moe_router_logits_bf16_chunks => router_logits("bf16", 40);
    moe_router_logits_f32_batches => router_logits("f32", 2112);
    moe_topk => topk();
    moe_gateup_routed_e128_bf16 => gateup_routed("bf16", 128, 70, false);
    moe_gateup_routed_e256_f16_shared => gateup_routed("f16", 256, 200, true);
    moe_gateup_routed_e512_f32_shared => gateup_routed("f32", 512, 300, true);
    moe_down_combine_f32_wide_4bit => down_combine("f32", 0);
    moe_down_combine_f16_narrow_8bit => down_combine("f16", 1);
    moe_down_combine_bf16_bad_ids => down_combine("bf16", 2);
    moe_combine_f32 => moe_combine("f32");
    moe_combine_f16 => moe_combine("f16");
    moe_combine_bf16 => moe_combine("bf16");
    probe => Case::new("probe", [3, 1, 1], 64, 256, vec![Arg::Buf(0)], vec![zeros(3 * 64 * 17, 4)]);
    read_stream => Case::new(
        "read_stream",
        [2, 1, 1],
        64,
        0,
        vec![Arg::Buf(0), Arg::U64(1000), Arg::Buf(1)],
        vec![((0..16000u32).map(|i| (i * 7 + 3) as u8).collect(), 16), zeros(128, 4)],
    );
}

/// `empty` writes nothing, so it has its own test: no race under any schedule.
#[test]
fn empty() {
    for arch in ARCHS {
        let Some(co) = load(arch) else { return };
        for s in Schedule::all(&SEEDS) {
            let (_, races) = run(&co, &Case::new("empty", [3, 1, 1], 64, 0, vec![], vec![]), s).unwrap();
            assert!(races.is_empty(), "{arch} empty under {s}");
        }
    }
}

/// The bad-id MoE path writes `status` (the first bad slot's 1 + k) and NaN rows.
#[test]
fn moe_bad_ids_path_is_taken() {
    let Some(co) = load("gfx1151") else { return };
    let case = moe("f32", false, 2);
    let (out, _) = run(&co, &case, Schedule::Lockstep).unwrap();
    assert_eq!(out[6], 2u32.to_le_bytes(), "status: 1 + the first bad slot");
    let act = &out[5];
    let nan = |i: usize| f32::from_le_bytes(act[4 * i..4 * i + 4].try_into().unwrap()).is_nan();
    let dff = MOE_DFF as usize;
    assert!((dff..3 * dff).all(nan) && !(0..dff).any(nan), "NaN rows exactly for slots 1 and 2");
}

// ---- planted races ----

fn plants() -> &'static CodeObject {
    static CO: OnceLock<Result<CodeObject, String>> = OnceLock::new();
    CO.get_or_init(|| {
        let path = common::race_plants_object()?;
        codeobj::load(&std::fs::read(&path).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
    })
    .as_ref()
    .unwrap_or_else(|e| panic!("the test object of planted races did not build: {e}"))
}

fn reused_slot(fixed: u32) -> Case {
    Case::new("plant_reused_slot", [1, 1, 1], 64, 8, vec![Arg::Buf(0), Arg::U32(fixed)], vec![zeros(64, 4)])
}

fn broadcast(fixed: u32) -> Case {
    let bufs = vec![u32s(&[77]), zeros(64, 4)];
    Case::new("plant_broadcast", [1, 1, 1], 64, 4, vec![Arg::Buf(0), Arg::Buf(1), Arg::U32(fixed)], bufs)
}

fn global_write_write(fixed: u32) -> Case {
    Case::new("plant_global_write_write", [4, 1, 1], 32, 0, vec![Arg::Buf(0), Arg::U32(fixed)], vec![zeros(4, 4)])
}

fn global_flag(by_workgroup: u32, declared: bool) -> Case {
    let args = vec![Arg::Buf(0), Arg::U32(5), Arg::U32(by_workgroup)];
    let mut case = Case::new("plant_global_flag", [3, 1, 1], 32, 0, args, vec![zeros(1, 4)]);
    if declared {
        case.same_value.push((0, 0, 4));
    }
    case
}

fn global_between_waves(fixed: u32) -> Case {
    Case::new("plant_global_between_waves", [1, 1, 1], 64, 0, vec![Arg::Buf(0), Arg::U32(fixed)], vec![zeros(2, 4)])
}

/// Under every schedule the checker finds a race in `space` of one of `kinds`,
/// and every race it finds is in `space`; returns the races of the first schedule.
fn assert_caught(case: &Case, space: Space, kinds: &[Kind]) -> Vec<Race> {
    let co = plants();
    let mut first = None;
    for s in Schedule::all(&SEEDS) {
        let (_, races) = run(co, case, s).unwrap_or_else(|e| panic!("{} under {s}: {e}", case.kernel));
        let text = describe(co, &case.kernel, &races);
        assert!(
            races.iter().any(|r| r.space == space && kinds.contains(&r.kind)),
            "{} under {s}: no {space:?} race of {kinds:?} found; found:{text}",
            case.kernel
        );
        assert!(races.iter().all(|r| r.space == space), "{} under {s}: {text}", case.kernel);
        println!("{} under {s}:{text}", case.kernel);
        first.get_or_insert(races);
    }
    first.unwrap()
}

#[test]
fn planted_reused_reduction_slot_is_caught() {
    // The second sum's store overwrites a slot another wave has still to read
    // (write-after-read), or another wave reads the overwritten slot (read-after-write).
    let races = assert_caught(&reused_slot(0), Space::Workgroup, &[Kind::WriteAfterRead]);
    let insts = &plants().kernel("plant_reused_slot").unwrap().insts;
    let r = races.iter().find(|r| r.kind == Kind::WriteAfterRead).unwrap();
    let (reader, writer) = (&insts[r.earlier.pc], &insts[r.later.pc]);
    assert!(reader.name.starts_with("ds_load") && writer.name.starts_with("ds_store"), "{}", r.describe(insts));
    assert_ne!(r.earlier.wave, r.later.wave);
    assert_eq!(r.bytes.1 - r.bytes.0, 4, "one f32 slot: {}", r.describe(insts));
}

#[test]
fn planted_reused_reduction_slot_with_its_barrier_is_clean() {
    assert_clean(plants(), "plant_reused_slot (fixed)", &reused_slot(1));
}

#[test]
fn planted_missing_barrier_before_broadcast_is_caught() {
    // Through FLAT in the shared aperture (volatile accesses).
    let races = assert_caught(&broadcast(0), Space::Workgroup, &[Kind::ReadAfterWrite, Kind::WriteAfterRead]);
    let insts = &plants().kernel("plant_broadcast").unwrap().insts;
    for r in &races {
        assert!(insts[r.earlier.pc].name.starts_with("flat_") && insts[r.later.pc].name.starts_with("flat_"));
    }
}

#[test]
fn planted_broadcast_with_its_barrier_is_clean() {
    assert_clean(plants(), "plant_broadcast (fixed)", &broadcast(1));
}

#[test]
fn planted_global_write_write_between_workgroups_is_caught() {
    let races = assert_caught(&global_write_write(0), Space::Global, &[Kind::WriteAfterWrite]);
    let r = &races[0];
    assert_ne!(r.earlier.workgroup, r.later.workgroup);
    assert_eq!(r.allocation.as_ref().map(|a| (a.0.as_str(), a.1)), Some(("buffer 0", 0)));
}

#[test]
fn planted_global_write_write_with_a_slot_per_workgroup_is_clean() {
    assert_clean(plants(), "plant_global_write_write (fixed)", &global_write_write(1));
}

#[test]
fn same_value_flag_is_a_race_unless_declared() {
    assert_caught(&global_flag(0, false), Space::Global, &[Kind::WriteAfterWrite]);
    assert_clean(plants(), "plant_global_flag (declared, one value)", &global_flag(0, true));
    // A declared word written with different values is still a race.
    assert_caught(&global_flag(1, true), Space::Global, &[Kind::WriteAfterWrite]);
}

#[test]
fn planted_global_race_between_waves_is_caught() {
    assert_caught(&global_between_waves(0), Space::Global, &[Kind::ReadAfterWrite, Kind::WriteAfterRead]);
}

#[test]
fn planted_global_race_between_waves_with_its_barrier_is_clean() {
    assert_clean(plants(), "plant_global_between_waves (fixed)", &global_between_waves(1));
}

/// The schedules alone show the workgroup-memory plants: their outputs differ,
/// and the report names the kernel, both schedules and the element.
#[test]
fn planted_races_change_the_outputs_between_schedules() {
    let co = plants();
    for case in [reused_slot(0), broadcast(0)] {
        let outs: Vec<(Schedule, Vec<Vec<u8>>)> =
            Schedule::all(&SEEDS).into_iter().map(|s| (s, run(co, &case, s).unwrap().0)).collect();
        let diff = outs[1..]
            .iter()
            .find_map(|(s, o)| compare_outputs(&case.kernel, (&outs[0].0, &outs[0].1), (s, o), &case.elem).err());
        let msg = diff.unwrap_or_else(|| panic!("{}: the same outputs under every schedule", case.kernel));
        println!("{msg}");
        assert!(msg.contains(&case.kernel) && msg.contains("sequential") && msg.contains("element"), "{msg}");
    }
}

/// With `race_check`, `launch` fails with the races in words.
#[test]
fn a_launch_with_a_race_fails_naming_both_instructions() {
    let co = plants();
    let k = co.kernel("plant_reused_slot").unwrap();
    let mut mem = Memory::new();
    let out = mem.alloc(256, "out");
    let kernarg = pack(k, &[Arg::Buf(0), Arg::U32(0)], &|_| out);
    let l = Launch { block: [64, 1, 1], dynamic_lds: 8, kernarg: &kernarg, race_check: true, ..Launch::default() };
    let e = dispatch::launch(&mut mem, k, &l).unwrap_err().to_string();
    println!("{e}");
    assert!(e.starts_with("kernel plant_reused_slot: "), "{e}");
    assert!(e.contains("write-after-read race on workgroup memory bytes"), "{e}");
    assert!(e.contains("ds_store_b32 at 0x") && e.contains("ds_load_2addr_b32 at 0x"), "{e}");
    assert!(e.contains("wave 0, lane 0") && e.contains("wave 1, lane"), "{e}");
    // Without the checker the same launch runs.
    dispatch::launch(&mut mem, k, &Launch { race_check: false, ..l }).unwrap();
}
