//! Tier 2: what the compiler made of the wave primitives, read from the
//! disassembly of the embedded gfx1151 code object (llvm-objdump of the
//! pinned toolchain's `llvm-tools`).

use mlxcel_amdgpu::embedded::AMDGPU_CODE_OBJECTS;
use std::path::PathBuf;
use std::process::Command;

/// llvm-objdump of the toolchain that compiled the kernels.
fn objdump() -> PathBuf {
    gpu_builder::pinned_llvm_tool("llvm-objdump").unwrap()
}

fn disassemble(processor: &str) -> String {
    let object = AMDGPU_CODE_OBJECTS.iter().find(|o| o.processor == processor).expect("gfx1151 object embedded");
    let path = std::env::temp_dir().join(format!("mlxcel-amdgpu-disasm-{}-{processor}.elf", std::process::id()));
    std::fs::write(&path, object.bytes).unwrap();
    let out =
        Command::new(objdump()).args(["-d", &format!("--mcpu={processor}")]).arg(&path).output().expect("llvm-objdump");
    std::fs::remove_file(&path).ok();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The instructions of the `probe` function, without addresses and encodings.
fn probe_instructions(disasm: &str) -> Vec<String> {
    let start = disasm.find("<probe>:").expect("probe in the disassembly");
    disasm[start..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split("//").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn probe_exchanges_use_dpp_permlane_and_bpermute() {
    let code = probe_instructions(&disassemble("gfx1151"));
    for mask in [1, 2, 4, 8] {
        let pattern = format!("row_xmask:{mask} ");
        assert!(
            code.iter().any(|i| i.starts_with("v_mov_b32_dpp") && i.contains(&pattern)),
            "no DPP row_xmask:{mask} exchange:\n{}",
            code.join("\n")
        );
    }
    assert!(code.iter().any(|i| i.starts_with("v_permlanex16_b32")), "no permlanex16 for xor 16");
    assert!(code.iter().any(|i| i.starts_with("ds_bpermute_b32")), "no ds_bpermute for shfl_down / shfl_idx");
    assert!(code.iter().any(|i| i.starts_with("v_readlane_b32")), "no readlane for broadcast");
}

#[test]
fn every_barrier_waits_for_workgroup_memory_first() {
    let code = probe_instructions(&disassemble("gfx1151"));
    let barriers: Vec<usize> = code.iter().enumerate().filter(|(_, i)| *i == "s_barrier").map(|(n, _)| n).collect();
    assert!(!barriers.is_empty(), "the probe has a barrier");
    for n in barriers {
        // The LDS store before the barrier must be complete: an `s_waitcnt lgkmcnt(0)`
        // among the few instructions right before it, with no LDS access in between.
        let window = &code[n.saturating_sub(4)..n];
        let wait = window.iter().rposition(|i| i.starts_with("s_waitcnt") && i.contains("lgkmcnt(0)"));
        let wait = wait.unwrap_or_else(|| panic!("no s_waitcnt lgkmcnt(0) before s_barrier:\n{}", window.join("\n")));
        assert!(!window[wait..].iter().any(|i| i.starts_with("ds_")), "LDS access between the wait and the barrier");
    }
}
