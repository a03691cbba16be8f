//! The shipped gfx11 code objects' kernels run on the interpreter, compared with
//! the CPU emulator (the same kernel source compiled for the host) and with
//! independently computed values.
mod common;
use common::{Arg, XIELU_PARAMS, download, enc, f32_bytes, load, mamba_case, noise, pack, upload, xielu_args};
use rdna_sim::codeobj::CodeObject;
use rdna_sim::dispatch::{self, Launch};
use rdna_sim::exec::Mode;
use rdna_sim::mem::Memory;

/// A launch's grid, workgroup size and dynamic workgroup memory.
type Geometry = ([u32; 3], u32, u32);

/// Runs `name` on the interpreter; returns the buffers afterwards and the counts.
fn run_sim(
    co: &CodeObject,
    name: &str,
    (grid, block, lds): Geometry,
    args: &[Arg],
    bufs: &[Vec<u8>],
    mode: Mode,
) -> Result<(Vec<Vec<u8>>, rdna_sim::exec::Counts), String> {
    let k = co.kernel(name).unwrap_or_else(|| panic!("no kernel {name}"));
    let mut mem = Memory::new();
    let addrs = upload(&mut mem, bufs, &[]);
    let kernarg = pack(k, args, &|i| addrs[i]);
    let l = Launch { grid, block: [block, 1, 1], dynamic_lds: lds, kernarg: &kernarg, mode, ..Launch::default() };
    let counts = dispatch::launch(&mut mem, k, &l).map_err(|e| e.to_string())?;
    Ok((download(&mem, bufs, &addrs), counts))
}

/// Runs `name` on the CPU emulator of the device crate.
fn run_emulator(co: &CodeObject, name: &str, g: Geometry, args: &[Arg], bufs: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let (grid, block, lds) = g;
    let k = co.kernel(name).unwrap();
    // 16-byte aligned host copies.
    let mut host: Vec<Vec<u128>> = bufs.iter().map(|b| vec![0u128; b.len().div_ceil(16)]).collect();
    for (h, b) in host.iter_mut().zip(bufs) {
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), h.as_mut_ptr() as *mut u8, b.len()) };
    }
    let ptrs: Vec<u64> = host.iter_mut().map(|h| h.as_mut_ptr() as u64).collect();
    let packed = pack(k, args, &|i| ptrs[i]);
    let words: Vec<u64> = packed
        .chunks(8)
        .map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect();
    let entry = kernels_device::entry::emulated(name).unwrap();
    struct P(*const u8);
    unsafe impl Sync for P {}
    let p = P(words.as_ptr() as *const u8);
    let cfg = kernels_device::emulator::LaunchConfig { grid, workgroup_size: block, workgroup_mem_bytes: lds as usize };
    unsafe {
        kernels_device::emulator::launch(&cfg, &|| {
            entry({
                let p = &p;
                p.0
            })
        })
    }
    .unwrap();
    host.iter()
        .zip(bufs)
        .map(|(h, b)| unsafe { std::slice::from_raw_parts(h.as_ptr() as *const u8, b.len()) }.to_vec())
        .collect()
}

thread_local! {
    /// The perturbation seed the kernel cases of this thread run with.
    static PERTURB: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// The mode of the kernel cases: IEEE, strict waits, and this thread's perturbation.
fn mode() -> Mode {
    Mode { ieee: true, perturb: PERTURB.get(), strict_wait: true }
}

/// Runs `case` on both shipped gfx11 objects (skipped, printed, when the root crate was not built).
fn on_both(case: fn(&CodeObject, &str) -> Vec<(String, rdna_sim::exec::Counts)>) {
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(co) = load(arch) else { return };
        case(&co, arch);
    }
}

fn words(b: &[u8]) -> Vec<u32> {
    b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn empty_runs_on_both_objects() {
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(co) = load(arch) else { return };
        let (_, counts) = run_sim(&co, "empty", ([3, 1, 1], 64, 0), &[], &[], mode()).unwrap();
        // One s_endpgm per wave: 3 workgroups of 2 waves.
        assert_eq!(counts.other + counts.salu + counts.valu, 0, "{counts:?}");
    }
}

#[test]
fn probe_matches_the_cpu_emulator_and_its_definition() {
    use kernels_device::geometry::probe::{WORDS_PER_LANE, WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(co) = load(arch) else { return };
        let groups = 3;
        let n = (groups * WORKGROUP_SIZE) as usize * WORDS_PER_LANE;
        let bufs = vec![vec![0u8; 4 * n]];
        let args = [Arg::Buf(0)];
        let (sim, counts) =
            run_sim(&co, "probe", ([groups, 1, 1], WORKGROUP_SIZE, WORKGROUP_MEM_BYTES), &args, &bufs, mode())
                .unwrap_or_else(|e| panic!("{arch}: {e}"));
        println!("{arch} probe: {}", counts.summary());
        let got = words(&sim[0]);
        let want =
            words(&run_emulator(&co, "probe", ([groups, 1, 1], WORKGROUP_SIZE, WORKGROUP_MEM_BYTES), &args, &bufs)[0]);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g,
                w,
                "{arch}: thread {} word {}: sim {g:#x}, emulator {w:#x}",
                i / WORDS_PER_LANE,
                i % WORDS_PER_LANE
            );
        }
        // And the words that follow from the definition alone.
        for g in 0..groups {
            for t in 0..WORKGROUP_SIZE {
                let w = &got[((g * WORKGROUP_SIZE + t) as usize) * WORDS_PER_LANE..][..WORDS_PER_LANE];
                let v = |tt: u32| kernels_device::probe::probe_value(g, tt);
                let (lane, wave) = (t % 32, t / 32);
                assert_eq!(&w[..7], &[t, lane, wave, g, WORKGROUP_SIZE, groups, g * WORKGROUP_SIZE + t]);
                for (j, m) in [1, 2, 4, 8, 16].into_iter().enumerate() {
                    assert_eq!(w[7 + j], v(wave * 32 + (lane ^ m)), "shfl_xor {m}");
                }
                assert_eq!(w[14], v(wave * 32 + 5), "broadcast");
                let sum: f32 = (0..32).map(|l| l as f32 * 0.5 + g as f32).sum();
                let _ = sum; // the wave sum's order is the kernel's; checked against the emulator above
                assert_eq!(w[16], v((t + 32) % WORKGROUP_SIZE), "workgroup memory after the barrier");
            }
        }
    }
}

fn xielu_ref(x: f32, alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) -> f64 {
    // xIELU: x > 0: alpha_p x^2 + beta x; else alpha_n (expm1(min(x, eps)) - x) + beta x.
    let (x, ap, an, b, e) = (x as f64, alpha_p as f64, alpha_n as f64, beta as f64, eps as f64);
    if x > 0.0 { ap * x * x + b * x } else { an * ((x.min(e)).exp_m1() - x) + b * x }
}

#[test]
fn xielu_f32_matches_the_emulator_bit_for_bit() {
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(co) = load(arch) else { return };
        let mut xs: Vec<f32> =
            vec![0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.25, -7.0, 1e-8, -1e-8, 20.0, -20.0, 1e-40, -1e-40, 88.0, -104.0];
        xs.extend((0..45).map(|i| (i as f32 - 22.0) * 0.37));
        let n = xs.len();
        let bufs = vec![xs.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(), vec![0u8; 4 * n]];
        let (ap, an, b, e) = XIELU_PARAMS;
        let args = xielu_args(n);
        let (sim, counts) = run_sim(&co, "xielu_f32", ([1, 1, 1], 256, 0), &args, &bufs, mode())
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        println!("{arch} xielu_f32 ({n} elements): {}", counts.summary());
        let emu = run_emulator(&co, "xielu_f32", ([1, 1, 1], 256, 0), &args, &bufs);
        let (got, want) = (words(&sim[1]), words(&emu[1]));
        for i in 0..n {
            let r = xielu_ref(xs[i], ap, an, b, e);
            let g = f32::from_bits(got[i]);
            assert!(((g as f64) - r).abs() <= 1e-5 * r.abs().max(1.0), "{arch}: x = {}: sim {g}, formula {r}", xs[i]);
            assert_eq!(got[i], want[i], "{arch}: x = {}: sim {g}, emulator {}", xs[i], f32::from_bits(want[i]));
        }
    }
}

/// add3_layer_norm (both instances, every dtype) against the emulator, bit for bit.
fn case_add3(co: &CodeObject, arch: &str) -> Vec<(String, rdna_sim::exec::Counts)> {
    use kernels_device::geometry::add3_layer_norm::{WORKGROUP_MEM_BYTES, WORKGROUP_SIZE};
    let mut out = Vec::new();
    for (name, d) in [
        ("add3_layer_norm_f32", 1500u32),
        ("add3_layer_norm_d4096_f32", 260),
        ("add3_layer_norm_f16", 1100),
        ("add3_layer_norm_bf16", 1030),
        ("add3_layer_norm_d4096_f16", 300),
        ("add3_layer_norm_d4096_bf16", 515),
    ] {
        let rows = 3u32;
        let n = (rows * d) as usize;
        let ty = name.rsplit('_').next().unwrap();
        let enc = |v: Vec<f32>| enc(ty, &v).0;
        let es = if name.ends_with("_f32") { 4 } else { 2 };
        let bufs = vec![
            enc({
                // Special values in the first row's a: NaN, infinities and huge magnitudes.
                let mut v = noise(n, 1, 2.0);
                if !name.ends_with("_f32") {
                    v[..5].copy_from_slice(&[f32::NAN, f32::INFINITY, -3e38, 6e4, f32::NEG_INFINITY]);
                }
                v
            }),
            enc(noise(n, 2, 2.0)),
            enc(noise(n, 3, 2.0)),
            enc(noise(d as usize, 4, 1.0)),
            enc(noise(d as usize, 5, 1.0)),
            vec![0u8; es * n],
            vec![0u8; es * n],
        ];
        let mut args: Vec<Arg> = (0..7).map(Arg::Buf).collect();
        args.extend([Arg::U32(rows), Arg::U32(d), Arg::F32(1e-5)]);
        let (sim, counts) =
            run_sim(co, name, ([rows, 1, 1], WORKGROUP_SIZE, WORKGROUP_MEM_BYTES), &args, &bufs, mode())
                .unwrap_or_else(|e| panic!("{arch} {name}: {e}"));
        let emu = run_emulator(co, name, ([rows, 1, 1], WORKGROUP_SIZE, WORKGROUP_MEM_BYTES), &args, &bufs);
        assert_eq!(sim[5], emu[5], "{arch} {name}: x_new");
        assert_eq!(sim[6], emu[6], "{arch} {name}: h");
        out.push((name.to_string(), counts));
    }
    out
}

/// mamba1_scan (both mappings: N = 16 and N = 32; f32, f16, bf16) against the emulator.
/// The contract is a tolerance: exp is the GPU's exp2 approximation on the
/// device and crate::num::exp on the host.
fn case_mamba(co: &CodeObject, arch: &str) -> Vec<(String, rdna_sim::exec::Counts)> {
    use kernels_device::geometry::mamba1_scan::Mapping;
    let (amd, emulator) = (Mapping::AMD, Mapping::EMULATOR);
    // The emulator's grid is the code object's: the same columns a lane and waves a workgroup.
    assert_eq!(
        (amd.states_per_lane, amd.waves_per_workgroup),
        (emulator.states_per_lane, emulator.waves_per_workgroup)
    );
    let mut out = Vec::new();
    for (ty, n) in [("f32", 16u32), ("f32", 32), ("f16", 16), ("bf16", 32)] {
        let name = format!("mamba1_scan_{ty}");
        let (args, bufs, grid) = mamba_case(ty, (2, 11, 20, n));
        let bufs: Vec<Vec<u8>> = bufs.into_iter().map(|b| b.0).collect();
        let (sim, counts) =
            run_sim(co, &name, (grid, amd.workgroup_size(), amd.workgroup_mem_bytes()), &args, &bufs, mode())
                .unwrap_or_else(|e| panic!("{arch} mamba N={n}: {e}"));
        // The emulator launch with the same 2-D grid.
        let emu =
            run_emulator(co, &name, (grid, emulator.workgroup_size(), emulator.workgroup_mem_bytes()), &args, &bufs);
        let dec = |b: &[u8], wide: bool| -> Vec<f64> {
            if wide || ty == "f32" {
                words(b).iter().map(|w| f32::from_bits(*w) as f64).collect()
            } else {
                b.chunks(2)
                    .map(|c| {
                        let h = u16::from_le_bytes([c[0], c[1]]);
                        if ty == "bf16" {
                            f32::from_bits((h as u32) << 16) as f64
                        } else {
                            half::f16::from_bits(h).to_f64()
                        }
                    })
                    .collect()
            }
        };
        for (i, what) in [(7usize, "y"), (8, "state_out")] {
            let got = dec(&sim[i], i == 8);
            let want = dec(&emu[i], i == 8);
            // The contract's metric (docs/contracts.md, section 5): the largest difference over
            // the largest magnitude. Per element, a y that is small against its
            // terms (the sum over n cancels) would amplify the exponential's
            // last-bit differences without bound.
            let scale = want.iter().fold(1e-6f64, |m, w| m.max(w.abs()));
            let worst = got.iter().zip(&want).fold(0f64, |m, (&g, &w)| m.max((g - w).abs())) / scale;
            println!("{arch} {name} N={n} {what}: max difference to the emulator {worst:.2e} of max |want|");
            // f32: the contract's bound; 16-bit: one rounding of the output may
            // differ (an f32 difference on either side of a tie).
            let tol = match ty {
                "f32" => 1e-5,
                "f16" => 1e-3,
                _ => 8e-3,
            };
            assert!(worst < tol, "{arch} {name} N={n} {what}: {worst}");
        }
        out.push((format!("{name} N={n}"), counts));
    }
    out
}

#[test]
fn add3_layer_norm_matches_the_emulator() {
    on_both(case_add3);
}

#[test]
fn mamba1_scan_matches_the_emulator() {
    on_both(case_mamba);
}

/// xielu f16 and bf16 on a few elements against the emulator, bit for bit.
fn case_xielu16(co: &CodeObject, arch: &str) -> Vec<(String, rdna_sim::exec::Counts)> {
    let mut out = Vec::new();
    for name in ["xielu_f16", "xielu_bf16"] {
        let mut xs = noise(300, 21, 12.0);
        // Special values: NaN, infinities, signed zeros, large and tiny magnitudes.
        xs[..10].copy_from_slice(&[
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            6e4,
            -6e4,
            1e-7,
            -1e-7,
            3e38,
        ]);
        let bits: Vec<u8> = xs
            .iter()
            .flat_map(|x| {
                if name == "xielu_f16" { half::f16::from_f32(*x).to_bits() } else { (x.to_bits() >> 16) as u16 }
                    .to_le_bytes()
            })
            .collect();
        let n = xs.len();
        let bufs = vec![bits, vec![0u8; 2 * n]];
        let args = xielu_args(n);
        let (sim, counts) = run_sim(co, name, ([2, 1, 1], 256, 0), &args, &bufs, mode())
            .unwrap_or_else(|e| panic!("{arch} {name}: {e}"));
        let emu = run_emulator(co, name, ([2, 1, 1], 256, 0), &args, &bufs);
        // NaN results compare as NaN: the sign and payload of a NaN made from
        // non-NaN inputs differ between the host (x86: negative) and the simulator.
        let is_nan = |h: u16| if name == "xielu_f16" { h & 0x7fff > 0x7c00 } else { h & 0x7fff > 0x7f80 };
        let h = |b: &[u8], i: usize| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
        if let Some(i) =
            (0..n).find(|&i| h(&sim[1], i) != h(&emu[1], i) && !(is_nan(h(&sim[1], i)) && is_nan(h(&emu[1], i))))
        {
            let h = |b: &[u8]| u16::from_le_bytes([b[2 * i], b[2 * i + 1]]);
            panic!("{arch} {name}: element {i} (x = {}): sim {:#06x}, emulator {:#06x}", xs[i], h(&sim[1]), h(&emu[1]));
        }
        out.push((name.to_string(), counts));
    }
    // bf16 and f16 with the workgroup-memory table (n large enough for one table workgroup).
    for name in ["xielu_bf16", "xielu_f16"] {
        use kernels_device::geometry::xielu::{
            BF16_WORKGROUP_MEM_BYTES, F16_WORKGROUP_MEM_BYTES, TABLE_MIN_ELEMS_PER_WORKGROUP, TABLE_WORKGROUP_SIZE,
        };
        let bf16 = name == "xielu_bf16";
        let n = TABLE_MIN_ELEMS_PER_WORKGROUP as usize + 37;
        let xs = noise(n, 23, if bf16 { 40.0 } else { 20.0 });
        let bits: Vec<u8> = xs
            .iter()
            .flat_map(|x| {
                if bf16 { (x.to_bits() >> 16) as u16 } else { half::f16::from_f32(*x).to_bits() }.to_le_bytes()
            })
            .collect();
        let bufs = vec![bits, vec![0u8; 2 * n]];
        let args = xielu_args(n);
        let mode = mode();
        let dims =
            ([1, 1, 1], TABLE_WORKGROUP_SIZE, if bf16 { BF16_WORKGROUP_MEM_BYTES } else { F16_WORKGROUP_MEM_BYTES });
        let (sim, counts) =
            run_sim(co, name, dims, &args, &bufs, mode).unwrap_or_else(|e| panic!("{arch} {name} (table): {e}"));
        let emu = run_emulator(co, name, dims, &args, &bufs);
        assert_eq!(sim[1], emu[1], "{arch} {name} (table)");
        println!("{arch} {name} table path ({n} elements): {}", counts.summary());
        out.push((name.to_string(), counts));
    }
    out
}

#[test]
fn xielu_f16_bf16_match_the_emulator() {
    on_both(case_xielu16);
}

/// Which of the shipped objects' distinct mnemonics the kernel cases execute.
#[test]
fn coverage_of_the_shipped_mnemonics() {
    use std::collections::BTreeSet;
    let mut all = BTreeSet::new();
    let mut run = BTreeSet::new();
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(co) = load(arch) else { return };
        let mut cases = Vec::new();
        for name in ["probe", "empty"] {
            let groups = 3;
            let bufs = vec![vec![0u8; 4 * 64 * 17 * groups as usize]];
            let args: Vec<Arg> = if name == "probe" { vec![Arg::Buf(0)] } else { vec![] };
            let (_, c) = run_sim(&co, name, ([groups, 1, 1], 64, 256), &args, &bufs, mode()).unwrap();
            cases.push((name.to_string(), c));
        }
        {
            let xs = noise(700, 3, 30.0);
            let bufs = vec![f32_bytes(&xs), vec![0u8; 4 * xs.len()]];
            let args = xielu_args(xs.len());
            let (_, c) = run_sim(&co, "xielu_f32", ([1, 1, 1], 256, 0), &args, &bufs, mode()).unwrap();
            cases.push(("xielu_f32".into(), c));
        }
        cases.extend(case_xielu16(&co, arch));
        cases.extend(case_read_stream(&co, arch));
        cases.extend(case_add3(&co, arch));
        cases.extend(case_mamba(&co, arch));
        for k in &co.kernels {
            for i in &k.insts {
                all.insert(i.mnemonic());
                if let Some(y) = i.mnemonic_y() {
                    all.insert(y.to_string());
                }
            }
        }
        for (case, c) in &cases {
            let kname = case.split(' ').next().unwrap();
            let k = co.kernel(kname).unwrap();
            for (i, &h) in c.hits.iter().enumerate() {
                if h > 0 {
                    run.insert(k.insts[i].mnemonic());
                    if let Some(y) = k.insts[i].mnemonic_y() {
                        run.insert(y.to_string());
                    }
                }
            }
        }
    }
    let missing: Vec<_> = all.difference(&run).cloned().collect();
    println!("executed {} of the {} distinct mnemonics of the shipped gfx11 objects", run.len(), all.len());
    println!("not executed by these cases: {}", missing.join(" "));
    // A floor, so that coverage only moves up.
    assert!(run.len() >= COVERAGE_FLOOR, "coverage fell to {}", run.len());
}
const COVERAGE_FLOOR: usize = 205;

/// read_stream (the bandwidth yardstick) against the emulator.
fn case_read_stream(co: &CodeObject, arch: &str) -> Vec<(String, rdna_sim::exec::Counts)> {
    let quads = 1000u64;
    let src: Vec<u8> = (0..quads * 16).map(|i| (i * 7 + 3) as u8).collect();
    let (grid, block) = (2u32, 64u32);
    let bufs = vec![src, vec![0u8; 4 * (grid * block) as usize]];
    let args = [Arg::Buf(0), Arg::U64(quads), Arg::Buf(1)];
    let (sim, counts) = run_sim(co, "read_stream", ([grid, 1, 1], block, 0), &args, &bufs, mode())
        .unwrap_or_else(|e| panic!("{arch} read_stream: {e}"));
    let emu = run_emulator(co, "read_stream", ([grid, 1, 1], block, 0), &args, &bufs);
    assert_eq!(sim[1], emu[1], "{arch} read_stream");
    vec![("read_stream".into(), counts)]
}

#[test]
fn read_stream_matches_the_emulator() {
    on_both(case_read_stream);
}

/// The bit-exact kernels give the same bits when every approximate instruction
/// (rcp, rsq, sqrt, exp, log) is moved by one ulp, the most the ISA allows, and
/// mamba1_scan (a tolerance contract) stays within its bound.
#[test]
fn bit_exact_kernels_are_unmoved_by_perturbed_approximations() {
    for seed in [1u32, 2] {
        PERTURB.set(Some(seed));
        for arch in ["gfx1151", "gfx11-generic"] {
            let Some(co) = load(arch) else { return };
            case_add3(&co, arch);
            case_xielu16(&co, arch);
            case_read_stream(&co, arch);
            // The tolerance kernel stays within its bounds.
            case_mamba(&co, arch);
        }
        probe_matches_the_cpu_emulator_and_its_definition();
        xielu_f32_matches_the_emulator_bit_for_bit();
    }
    PERTURB.set(None);
}

/// The dwords of `i` as they lie in the code object (the decoder keeps the
/// first two, and the literal or DPP dword apart).
fn raw_words(i: &rdna_sim::decode::Inst) -> Vec<u32> {
    let extra = i.lit.or(i.dpp16).or(i.dpp8);
    match (i.len, extra) {
        (4, _) => vec![i.w0],
        (8, Some(e)) => vec![i.w0, e],
        (8, None) => vec![i.w0, i.w1],
        (12, Some(e)) => vec![i.w0, i.w1, e],
        (len, _) => panic!("{}: {len} bytes", i.mnemonic()),
    }
}

/// Every instruction of the shipped objects is one the interpreter
/// implements. A kernel test reaches only the paths its data take, so an
/// instruction on another path would fail only when a later input reaches it:
/// here each distinct encoding runs alone on a fresh wave with zeroed
/// registers and memory. Faults (a load from address 0, a branch out of the
/// two-instruction program) are expected; "not implemented" is not, nor a
/// program that does not end.
#[test]
fn every_shipped_instruction_is_implemented() {
    const ENDPGM: u32 = 0xBFB0_0000;
    const EXEC: usize = 126;
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(co) = load(arch) else { continue };
        let mut seen = std::collections::HashSet::new();
        let mut missing = std::collections::BTreeSet::new();
        for k in &co.kernels {
            for i in &k.insts {
                let words = raw_words(i);
                if !seen.insert(words.clone()) {
                    continue;
                }
                let mut code = words;
                code.push(ENDPGM);
                // The words decode back to the same instruction.
                let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
                let again = &rdna_sim::decode::decode_all(&bytes, 0).unwrap()[0];
                assert_eq!((again.mnemonic(), again.len), (i.mnemonic(), i.len), "{arch} {}", k.name);
                let mut wave = rdna_sim::exec::Wave::default();
                wave.s[EXEC] = u32::MAX;
                let mut lds = vec![0u8; 65536];
                // A program that never ends (a branch to itself) is a failure too:
                // nothing would have shown whether the instruction is implemented.
                if let Err(e) = dispatch::run_program(&code, &mut wave, &mut Memory::new(), &mut lds, mode())
                    && (e.contains("not implemented") || e.contains("did not end"))
                {
                    missing.insert(format!("{} in {}: {e}", i.mnemonic(), k.name));
                }
            }
        }
        assert!(!seen.is_empty() && missing.is_empty(), "{arch}: {missing:#?}");
        println!("{arch}: {} distinct instruction encodings, all implemented", seen.len());
    }
}
