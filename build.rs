//! Builds the kernels of `kernels-device` for every GPU target with the
//! pinned nightly toolchain (crate `gpu-builder/`, whatever toolchain runs
//! this build), audits every AMD code object against the launchers
//! (`code_object::audit`) and embeds them in the host library. With
//! `MLXCEL_AMDGPU_PREBUILT_DIR` it takes the code objects (and the PTX) from
//! that directory instead, audits them the same way, and needs no nightly.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use code_object::{CodeObject, audit_against_kernels};
use kernels_device::geometry::{AMDGPU_LAUNCH_BOUNDS, NVIDIA_LAUNCH_BOUNDS, WAVE_SIZE};

/// The AMD targets built when [`TARGETS_ENV`] is not set.
const DEFAULT_AMDGPU_TARGETS: &[&str] = &["gfx1151", "gfx11-generic", "gfx12-generic"];
/// Replaces the list: `MLXCEL_AMDGPU_TARGETS=gfx1100,gfx1151`.
const TARGETS_ENV: &str = "MLXCEL_AMDGPU_TARGETS";
/// Replaces `<target>/gpu-kernels`, the GPU builds' cargo target directory (an absolute path).
const GPU_TARGET_DIR_ENV: &str = "MLXCEL_AMDGPU_GPU_TARGET_DIR";
/// A directory of pre-built GPU code: `<processor>.hsaco` for every AMD target and, with the
/// feature `cuda`, `kernels_sm_80.ptx` (what `cargo xtask codegen save DIR` writes).
const PREBUILT_ENV: &str = "MLXCEL_AMDGPU_PREBUILT_DIR";
/// The virtual architecture of the PTX.
const PTX_ARCH: &str = "sm_80";

fn main() {
    // kernels-device tells where its sources are (`links` metadata), so that this works from a
    // checkout, a git dependency or a registry package alike.
    let device = env::var_os("DEP_MLXCEL_AMDGPU_KERNELS_MANIFEST_DIR").map(PathBuf::from);
    for path in ["src", "Cargo.toml", "build.rs"] {
        if let Some(dir) = &device {
            println!("cargo::rerun-if-changed={}", dir.join(path).display());
        }
    }
    for var in [TARGETS_ENV, GPU_TARGET_DIR_ENV, PREBUILT_ENV, gpu_builder::toolchain::NO_INSTALL_ENV] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    // For a dependent's build script (mlxcel-core's, which compiles the MLX shim): the C
    // header's directory and the shim's sources.
    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo::metadata=include={}", root.join("include").display());
    println!("cargo::metadata=shim_dir={}", root.join("shim/mlx").display());
    // The shared library's SONAME carries the ABI version (MLXCEL_AMDGPU_ABI_VERSION).
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libmlxcel_amdgpu.so.4");
    }

    let result = device
        .ok_or_else(|| "kernels-device gave no DEP_MLXCEL_AMDGPU_KERNELS_MANIFEST_DIR".to_string())
        .and_then(|device| build_and_embed(&device));
    if let Err(msg) = result {
        eprintln!("\nerror: building the GPU kernels failed\n\n{msg}\n");
        std::process::exit(1);
    }
}

/// Builds (or takes from [`PREBUILT_ENV`]) every GPU target, audits every AMD code object, and
/// writes `$OUT_DIR/embedded.rs` (the statics of `host/embedded.rs`) with copies of the code in
/// `OUT_DIR` (`<processor>.hsaco`, `kernels_sm_80.ptx`).
fn build_and_embed(device: &Path) -> Result<(), String> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set (run from a build script)")?);
    let targets =
        gpu_builder::parse_targets(env::var(TARGETS_ENV).ok().as_deref(), DEFAULT_AMDGPU_TARGETS, TARGETS_ENV)?;
    let cuda = env::var_os("CARGO_FEATURE_CUDA").is_some();
    let kernel_names: Vec<&str> = kernels_device::entry::KERNELS.iter().map(|k| k.name).collect();

    let (objects, ptx): (Vec<(String, PathBuf)>, Option<PathBuf>) = match env::var_os(PREBUILT_ENV) {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            let objects = targets.iter().map(|t| (t.clone(), dir.join(format!("{t}.hsaco")))).collect();
            let ptx = cuda.then(|| dir.join(format!("kernels_{PTX_ARCH}.ptx")));
            (objects, ptx)
        }
        _ => {
            let gpu_dir = match env::var_os(GPU_TARGET_DIR_ENV) {
                Some(dir) if !dir.is_empty() => PathBuf::from(dir),
                _ => gpu_builder::gpu_target_dir(&out_dir)?,
            };
            let mut builder = gpu_builder::Builder::new(device.join("Cargo.toml"), gpu_dir)
                .amdgpu_targets(&targets)
                .amdgpu_launch_bounds(AMDGPU_LAUNCH_BOUNDS)
                .wave_size(WAVE_SIZE)
                .cargo_warnings(true);
            if cuda {
                builder = builder
                    .ptx(PTX_ARCH)
                    .ptx_entry_points(kernel_names.iter().copied())
                    .ptx_launch_bounds(NVIDIA_LAUNCH_BOUNDS);
            }
            let built = builder.build()?;
            (built.amdgpu.into_iter().map(|o| (o.processor, o.path)).collect(), built.ptx)
        }
    };

    let mut embedded = String::from("// Generated by build.rs: the GPU code embedded in this library.\n\n");
    embedded += "/// AMD GPU code objects, one per target processor, in the order of preference.\n";
    embedded += "pub static AMDGPU_CODE_OBJECTS: &[EmbeddedCodeObject] = &[\n";
    for (target, elf) in &objects {
        let bytes =
            fs::read(elf).map_err(|e| format!("cannot read the {target} code object {}: {e}", elf.display()))?;
        let object = CodeObject::parse(&bytes).map_err(|e| format!("{target} ({}): {e}", elf.display()))?;
        if object.processor() != target {
            return Err(format!(
                "the code object {} for {target} says it is for {}",
                elf.display(),
                object.processor()
            ));
        }
        audit_against_kernels(&object, kernels_device::entry::KERNELS).map_err(|problems| {
            format!("the {target} code object {} failed its audit:\n  {}", elf.display(), problems.join("\n  "))
        })?;
        let dest = out_dir.join(format!("{target}.hsaco"));
        fs::write(&dest, &bytes).map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
        writeln!(
            embedded,
            "    EmbeddedCodeObject {{ processor: {target:?}, bytes: include_bytes!({:?}) }},",
            dest.display()
        )
        .unwrap();
    }
    embedded += "];\n\n";

    embedded += "/// PTX for NVIDIA GPUs (feature `cuda`), for tier-3 verification.\n";
    match ptx {
        Some(ptx) => {
            let text = fs::read_to_string(&ptx).map_err(|e| format!("cannot read the PTX {}: {e}", ptx.display()))?;
            // Checked again: a pre-built PTX must meet what the build checks.
            gpu_builder::edits::check_ptx(&text, &kernel_names).map_err(|e| format!("{}: {e}", ptx.display()))?;
            let launch_bounds = text.matches(".maxntid").count();
            if launch_bounds != NVIDIA_LAUNCH_BOUNDS.len() {
                return Err(format!(
                    "the PTX {} states {launch_bounds} launch bounds, expected {}",
                    ptx.display(),
                    NVIDIA_LAUNCH_BOUNDS.len()
                ));
            }
            let dest = out_dir.join(format!("kernels_{PTX_ARCH}.ptx"));
            fs::write(&dest, &text).map_err(|e| format!("cannot write {}: {e}", dest.display()))?;
            writeln!(
                embedded,
                "pub static PTX: Option<EmbeddedPtx> = Some(EmbeddedPtx {{ arch: {PTX_ARCH:?}, text: include_str!({:?}) }});",
                dest.display()
            )
            .unwrap();
        }
        None => embedded += "pub static PTX: Option<EmbeddedPtx> = None;\n",
    }
    fs::write(out_dir.join("embedded.rs"), embedded).map_err(|e| e.to_string())
}
