//! Packing for a GPU host, and running there. A GPU host needs no Rust and no network: the pack
//! (`.gpu-pack/`, git-ignored) holds the built binaries and what the peers need, and the scripts
//! of `scripts/gpu-host/` run it from a checkout with the pack beside it. On a GPU host that has
//! Rust, `cargo xtask gpu-run` runs those scripts.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{
    Result, cargo, cargo_messages, executables, output, remove, repo_root, root_out_dir, run, target_dir, wants_help,
};

/// The pack's directory, relative to the checkout (the scripts of scripts/gpu-host/ read the
/// same default, or `PACK`).
pub const PACK: &str = ".gpu-pack";

const PACK_USAGE: &str = "\
usage: cargo xtask gpu-pack PART... [--only-sm SM]

Builds, here, what the scripts of scripts/gpu-host/ need on an NVIDIA GPU host, into .gpu-pack/
(replaced). Copy the checkout and .gpu-pack/ to the host, then run `bash scripts/gpu-host/NAME.sh`
there from the checkout (or `cargo xtask gpu-run NAME` where the host has Rust). The parts:

  tier3   the release test binaries that use a GPU, the CLI and the benchmarks, with
          --features cuda, stripped, and the PTX they embed (for `ptxas -v` on the host):
          for scripts/gpu-host/tier3.sh and profile.sh
  bench   our benchmarks and the PTX; the parts of mamba-ssm's public sources the peers build
          (state-spaces/mamba at a fixed commit; MAMBA_GIT_DIR: an existing clone's git
          directory instead of cloning); and the mlx part: for scripts/gpu-host/bench.sh
  mlx     the mlx-cuda-13 0.32.4 wheel's mlx/ tree and its libraries (from .whl/, else
          downloaded by pip) and this crate's libmlxcel_amdgpu.so (--features cuda), as one
          .tar.xz: for scripts/gpu-host/mlx.sh

--only-sm SM (for example 90) shrinks the MLX pack for one GPU generation: libmlx.so's symbol
table is stripped (its dynamic symbols kept) and the payloads of its .nv_fatbin entries for other
GPUs are overwritten with zeros, headers kept, so that they compress to nothing (the wheel's
libmlx.so is 139 MB). The kept GPU's code is the wheel's, byte for byte; if the shrinking broke
MLX, the MLX driver's first check fails.";

/// state-spaces/mamba's commit whose selective scan and state update the peers build.
const MAMBA_COMMIT: &str = "e9594ce1c732d97440f0332fdc43170a2294dbfa";
/// The test binaries that cannot run on a GPU host: they need Rust or rustup, a C++ compiler,
/// the CLI beside them, the stand-in libamdhip64, this repository's build (the fuzz corpus, the
/// simulator's planted objects) or the MLX CPU wheel, and use no GPU.
const CPU_ONLY_TESTS: &[&str] = &[
    "c_header",
    "disassembly",
    "wavefront_assertion",
    "c_abi_consumer",
    "num",
    "cli",
    "hip_rs",
    "hip_rs_launchers",
    "hip_faults",
    "fuzz_corpus",
    "races",
    "mlx_shim",
    "mlx_shim_rocm",
    "no_install",
];

pub fn pack(args: &[String]) -> Result<()> {
    if wants_help(args, PACK_USAGE) {
        return Ok(());
    }
    let mut parts = Vec::new();
    let mut only_sm = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--only-sm" => only_sm = Some(it.next().ok_or("--only-sm needs a number")?.parse::<u32>()?),
            "tier3" | "bench" | "mlx" => parts.push(a.as_str()),
            _ => return Err(PACK_USAGE.into()),
        }
    }
    if parts.is_empty() {
        return Err(PACK_USAGE.into());
    }
    let root = repo_root()?;
    let target = target_dir(&root)?;
    let pack = root.join(PACK);
    remove(&pack)?;
    fs::create_dir_all(&pack)?;
    if parts.contains(&"tier3") {
        pack_tier3(&root, &pack)?;
    }
    if parts.contains(&"bench") {
        pack_bench(&root, &pack)?;
    }
    if parts.contains(&"bench") || parts.contains(&"mlx") {
        pack_mlx(&root, &target, &pack, only_sm)?;
    }
    run(Command::new("du").args(["-sh", "--apparent-size"]).arg(&pack))?;
    Ok(())
}

/// Copies `from` to `pack/name`, stripped of its symbol table.
fn add_stripped(from: &Path, pack: &Path, name: &str) -> Result<()> {
    let to = pack.join(name);
    fs::copy(from, &to)?;
    run(Command::new("strip").arg(&to))
}

/// The PTX that the release build with `--features cuda` embeds.
fn add_ptx(messages: &[serde_json::Value], pack: &Path) -> Result<()> {
    fs::copy(root_out_dir(messages)?.join("kernels_sm_80.ptx"), pack.join("kernels_sm_80.ptx"))?;
    Ok(())
}

fn pack_tier3(root: &Path, pack: &Path) -> Result<()> {
    let mut messages = Vec::new();
    for args in [
        &["test", "--release", "--features", "cuda", "--no-run"][..],
        &["build", "--release", "--features", "cuda", "--bins"],
        &["bench", "--features", "cuda", "--no-run"],
    ] {
        let mut cmd = cargo(root);
        cmd.args(args);
        messages.extend(cargo_messages(cmd)?);
    }
    for exe in executables(&messages) {
        match (exe.kind.as_str(), exe.name.as_str()) {
            ("bin", "mlxcel-amdgpu") if !exe.test_harness => add_stripped(&exe.path, pack, "mlxcel-amdgpu")?,
            ("bench", name) => add_stripped(&exe.path, pack, &format!("bench-{name}"))?,
            ("test", name) if !CPU_ONLY_TESTS.contains(&name) => {
                add_stripped(&exe.path, pack, &format!("test-{name}"))?
            }
            _ => {}
        }
    }
    add_ptx(&messages, pack)
}

fn pack_bench(root: &Path, pack: &Path) -> Result<()> {
    let mut cmd = cargo(root);
    cmd.args(["bench", "--features", "cuda", "--bench", "kernels", "--no-run"]);
    let messages = cargo_messages(cmd)?;
    let bench = executables(&messages)
        .into_iter()
        .find(|e| e.kind == "bench" && e.name == "kernels")
        .ok_or("cargo built no kernels benchmark")?;
    add_stripped(&bench.path, pack, "bench-kernels")?;
    add_ptx(&messages, pack)?;

    // mamba-ssm's sources, for benches/baselines/peers.py's build of its selective scan.
    let git_dir = match std::env::var_os("MAMBA_GIT_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let dir = target_dir(root)?.join("xtask/mamba.git");
            if !dir.exists() {
                run(Command::new("git")
                    .args(["clone", "-q", "--bare", "--filter=blob:none"])
                    .args(["https://github.com/state-spaces/mamba".as_ref(), dir.as_os_str()]))?;
            }
            dir
        }
    };
    let mamba = pack.join("mamba");
    fs::create_dir_all(&mamba)?;
    let mut archive = Command::new("git")
        .arg(format!("--git-dir={}", git_dir.display()))
        .args(["archive", MAMBA_COMMIT, "csrc/selective_scan"])
        .args(["mamba_ssm/ops/triton/selective_state_update.py", "mamba_ssm/ops/triton/softplus.py"])
        .stdout(Stdio::piped())
        .spawn()?;
    run(Command::new("tar").arg("-C").arg(&mamba).arg("-xf").arg("-").stdin(archive.stdout.take().unwrap()))?;
    if !archive.wait()?.success() {
        return Err("git archive of mamba-ssm's sources failed".into());
    }
    fs::write(mamba.join("COMMIT"), format!("{MAMBA_COMMIT}\n"))?;
    Ok(())
}

fn pack_mlx(root: &Path, target: &Path, pack: &Path, only_sm: Option<u32>) -> Result<()> {
    let wheels = root.join(".whl");
    let find_wheel = || -> Option<PathBuf> {
        fs::read_dir(&wheels).ok()?.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with("mlx_cuda_13-0.32.4-") && n.ends_with(".whl")
            })
        })
    };
    let wheel = match find_wheel() {
        Some(w) => w,
        None => {
            run(Command::new("python3")
                .args(["-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"])
                .args(["--platform", "manylinux_2_35_x86_64", "-d"])
                .arg(&wheels)
                .arg("mlx-cuda-13==0.32.4"))?;
            find_wheel().ok_or("pip downloaded no mlx-cuda-13 0.32.4 wheel")?
        }
    };
    run(cargo(root).args(["build", "--release", "--features", "cuda", "--lib"]))?;

    let stage = crate::util::scratch_dir(target, "mlx-pack")?;
    fs::create_dir_all(stage.join("site"))?;
    fs::create_dir_all(stage.join("lib"))?;
    run(Command::new("unzip")
        .arg("-q")
        .arg(&wheel)
        .args(["mlx/*", "mlx_cuda_13.libs/*", "-d"])
        .arg(stage.join("site")))?;
    // Installed under its SONAME, which carries the header's ABI version.
    let header = fs::read_to_string(root.join("include/mlxcel_amdgpu.h"))?;
    let abi = header
        .lines()
        .find_map(|l| l.strip_prefix("#define MLXCEL_AMDGPU_ABI_VERSION"))
        .map(str::trim)
        .ok_or("include/mlxcel_amdgpu.h defines no MLXCEL_AMDGPU_ABI_VERSION")?;
    let lib = format!("libmlxcel_amdgpu.so.{abi}");
    fs::copy(target.join("release/libmlxcel_amdgpu.so"), stage.join("lib").join(&lib))?;
    std::os::unix::fs::symlink(&lib, stage.join("lib/libmlxcel_amdgpu.so"))?;

    let libmlx = "site/mlx/lib/libmlx.so";
    fs::write(stage.join("libmlx.wheel.sha256"), output(Command::new("sha256sum").current_dir(&stage).arg(libmlx))?)?;
    if let Some(sm) = only_sm {
        run(Command::new("strip").arg("--strip-unneeded").arg(stage.join(libmlx)))?;
        let mut data = fs::read(stage.join(libmlx))?;
        let (start, size) = elf_section(&data, ".nv_fatbin")?;
        let (kept, zeroed) = keep_one_gpu(&mut data[start..start + size], sm)?;
        fs::write(stage.join(libmlx), data)?;
        println!(
            "libmlx.so .nv_fatbin: kept {} MiB of sm_{sm} code, zeroed {} MiB for other GPUs",
            kept >> 20,
            zeroed >> 20
        );
    }
    let out = fs::File::create(pack.join("mlx-cuda.tar.xz"))?;
    let mut tar = Command::new("tar").arg("-C").arg(&stage).args(["-cf", "-", "."]).stdout(Stdio::piped()).spawn()?;
    run(Command::new("xz").args(["-T2", "-9"]).stdin(tar.stdout.take().unwrap()).stdout(out))?;
    if !tar.wait()?.success() {
        return Err("tar of the MLX pack failed".into());
    }
    remove(&stage)
}

/// The file offset and size of the ELF64 (little-endian) section called `name`.
fn elf_section(data: &[u8], name: &str) -> Result<(usize, usize)> {
    let u16_at = |at: usize| data.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |at: usize| data.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize);
    let u64_at = |at: usize| data.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    if !data.starts_with(b"\x7fELF\x02\x01") {
        return Err("not a little-endian ELF64 file".into());
    }
    let bad = || "a truncated ELF file";
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28).ok_or(bad())?,
        u16_at(0x3A).ok_or(bad())?,
        u16_at(0x3C).ok_or(bad())?,
        u16_at(0x3E).ok_or(bad())?,
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 24).ok_or(bad())?;
    for i in 0..shnum {
        let at = header(i);
        let name_at = strtab + u32_at(at).ok_or(bad())?;
        let end = data.get(name_at..).and_then(|s| s.iter().position(|&c| c == 0)).ok_or(bad())?;
        if &data[name_at..name_at + end] == name.as_bytes() {
            let (offset, size) = (u64_at(at + 24).ok_or(bad())?, u64_at(at + 32).ok_or(bad())?);
            if offset + size > data.len() {
                return Err(bad().into());
            }
            return Ok((offset, size));
        }
    }
    Err(format!("no section {name}").into())
}

/// Overwrites with zeros the payload of every entry of a CUDA fat binary section except the SASS
/// for `sm` (kind 2, that architecture), keeping every header. Returns the bytes kept and
/// zeroed. A blob is `magic u32 (0xBA55ED50), version u16, header size u16, size u64`, its
/// entries `kind u16, u16, header size u32, payload size u64, ..., architecture u32 at 28`;
/// blobs are 8-byte aligned, with padding between them.
fn keep_one_gpu(fatbin: &mut [u8], sm: u32) -> Result<(usize, usize)> {
    let u16_at = |d: &[u8], at: usize| d.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) as usize);
    let u32_at = |d: &[u8], at: usize| d.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let u64_at = |d: &[u8], at: usize| d.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap()) as usize);
    let bad = || "a fat binary entry runs past its section";
    let (mut pos, mut kept, mut zeroed) = (0, 0, 0);
    while pos + 16 <= fatbin.len() {
        if u32_at(fatbin, pos) != Some(0xBA55ED50) {
            pos += 8;
            continue;
        }
        let header = u16_at(fatbin, pos + 6).ok_or(bad())?;
        let end = pos + header + u64_at(fatbin, pos + 8).ok_or(bad())?;
        let mut entry = pos + header;
        while entry < end {
            let kind = u16_at(fatbin, entry).ok_or(bad())?;
            let body = entry + u32_at(fatbin, entry + 4).ok_or(bad())? as usize;
            let payload = u64_at(fatbin, entry + 8).ok_or(bad())?;
            let arch = u32_at(fatbin, entry + 28).ok_or(bad())?;
            let bytes = fatbin.get_mut(body..body + payload).ok_or(bad())?;
            if kind == 2 && arch == sm {
                kept += payload;
            } else {
                bytes.fill(0);
                zeroed += payload;
            }
            entry = body + payload;
        }
        pos = end;
    }
    if kept == 0 {
        return Err(format!("no sm_{sm} code found in .nv_fatbin: the layout is not what this task expects").into());
    }
    Ok((kept, zeroed))
}

const RUN_USAGE: &str = "\
usage: cargo xtask gpu-run tier3|bench|mlx|profile

Runs scripts/gpu-host/NAME.sh here, on a GPU host that has Rust, with the pack of
`cargo xtask gpu-pack` in .gpu-pack/ (or PACK). On a host without Rust, run
`bash scripts/gpu-host/NAME.sh` from the checkout instead: it is the same. Each script's
environment variables are described at its top; logs go to OUT (default gpu-host-out/NAME).

  tier3    every packed test binary with MLXCEL_AMDGPU_EXPECT_CUDA=1, the self-test on CUDA,
           compute-sanitizer on the binaries named in SANITIZE, the benchmarks (pack: tier3)
  bench    ours and every peer in one process: bench.md and bench.csv (pack: bench)
  mlx      the MLX shim inside MLX's CUDA backend: the driver's checks and times (pack: mlx)
  profile  Nsight Compute on one launch of each kernel, and ptxas -v (pack: tier3)";

pub fn run_on_host(args: &[String]) -> Result<()> {
    if wants_help(args, RUN_USAGE) {
        return Ok(());
    }
    let [name] = args else { return Err(RUN_USAGE.into()) };
    if !["tier3", "bench", "mlx", "profile"].contains(&name.as_str()) {
        return Err(RUN_USAGE.into());
    }
    let root = repo_root()?;
    run(Command::new("bash").current_dir(&root).arg(format!("scripts/gpu-host/{name}.sh")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fat binary blob of `entries` (kind, architecture, payload byte, payload length).
    fn blob(entries: &[(u16, u32, u8, usize)]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(kind, arch, byte, len) in entries {
            let mut header = vec![0u8; 64];
            header[0..2].copy_from_slice(&kind.to_le_bytes());
            header[4..8].copy_from_slice(&64u32.to_le_bytes());
            header[8..16].copy_from_slice(&(len as u64).to_le_bytes());
            header[28..32].copy_from_slice(&arch.to_le_bytes());
            body.extend(header);
            body.extend(std::iter::repeat_n(byte, len));
        }
        let mut b = Vec::new();
        b.extend(0xBA55ED50u32.to_le_bytes());
        b.extend(1u16.to_le_bytes());
        b.extend(16u16.to_le_bytes());
        b.extend((body.len() as u64).to_le_bytes());
        b.extend(body);
        b
    }

    /// An ELF64 file holding `.shstrtab` and `.nv_fatbin` (= `fatbin`).
    fn elf(fatbin: &[u8]) -> Vec<u8> {
        let strtab = b"\0.shstrtab\0.nv_fatbin\0";
        let mut data = vec![0u8; 64];
        data[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let strtab_at = data.len();
        data.extend(strtab);
        let fatbin_at = data.len();
        data.extend(fatbin);
        let shoff = data.len();
        let mut section = |name: u32, offset: usize, size: usize| {
            let mut h = vec![0u8; 64];
            h[0..4].copy_from_slice(&name.to_le_bytes());
            h[24..32].copy_from_slice(&(offset as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            data.extend(h);
        };
        section(0, 0, 0);
        section(1, strtab_at, strtab.len());
        section(11, fatbin_at, fatbin.len());
        data[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        data[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        data[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
        data[0x3E..0x40].copy_from_slice(&1u16.to_le_bytes());
        data
    }

    #[test]
    fn only_the_chosen_gpus_code_survives() {
        // Two blobs with padding between them: sm_90 SASS, sm_80 SASS, PTX for sm_90.
        let mut fatbin = blob(&[(2, 90, 0xAA, 16), (2, 80, 0xBB, 24)]);
        fatbin.extend([0u8; 8]);
        fatbin.extend(blob(&[(1, 90, 0xCC, 8)]));
        let mut file = elf(&fatbin);
        let (start, size) = elf_section(&file, ".nv_fatbin").unwrap();
        assert_eq!(size, fatbin.len());
        let (kept, zeroed) = keep_one_gpu(&mut file[start..start + size], 90).unwrap();
        assert_eq!((kept, zeroed), (16, 32));
        let section = &file[start..start + size];
        assert_eq!(section.iter().filter(|&&b| b == 0xAA).count(), 16);
        assert!(!section.iter().any(|&b| b == 0xBB || b == 0xCC));
        // Headers kept: the magic of both blobs is still there.
        assert_eq!(section.windows(4).filter(|w| *w == 0xBA55ED50u32.to_le_bytes()).count(), 2);
    }

    #[test]
    fn a_fatbin_without_the_gpu_or_a_truncated_one_is_refused() {
        let mut none = blob(&[(2, 80, 0xBB, 8)]);
        assert!(keep_one_gpu(&mut none, 90).is_err());
        let mut truncated = blob(&[(2, 90, 0xAA, 16)]);
        truncated.truncate(truncated.len() - 4);
        assert!(keep_one_gpu(&mut truncated, 90).is_err());
        assert!(elf_section(b"not an elf", ".nv_fatbin").is_err());
        assert!(elf_section(&elf(&[]), ".text").is_err());
    }
}
