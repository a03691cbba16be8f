//! The decoder against llvm-objdump on every instruction of every shipped gfx11 object.
mod common;
use rdna_sim::codeobj;
use std::collections::{BTreeMap, BTreeSet};

/// (address -> (mnemonic, Y mnemonic for VOPD, length in bytes)) from llvm-objdump.
fn objdump_listing(path: &std::path::Path) -> BTreeMap<u64, (String, Option<String>, usize)> {
    let od = common::objdump().expect("llvm-objdump of the pinned toolchain");
    let out = std::process::Command::new(od).args(["--mcpu=gfx1151", "-d"]).arg(path).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut map = BTreeMap::new();
    for line in text.lines() {
        let Some((asm, comment)) = line.split_once("// ") else { continue };
        if !line.starts_with('\t') {
            continue;
        }
        let Some((addr, hex)) = comment.split_once(": ") else { continue };
        let Ok(addr) = u64::from_str_radix(addr.trim(), 16) else { continue };
        let words = hex.split_whitespace().take_while(|w| w.len() == 8 && u32::from_str_radix(w, 16).is_ok()).count();
        let mut toks = asm.split_whitespace();
        let m = toks.next().unwrap().to_string();
        let y = asm.split_once(" :: ").map(|(_, y)| y.split_whitespace().next().unwrap().to_string());
        map.insert(addr, (m, y, words * 4));
    }
    map
}

#[test]
fn every_shipped_instruction_decodes_as_objdump_says() {
    let mut all_mnemonics = BTreeSet::new();
    let mut checked = 0usize;
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(path) = common::shipped_object(arch) else {
            println!("SKIPPED: no {arch}.hsaco under target/ (build the root crate first)");
            return;
        };
        if common::objdump().is_none() {
            println!("SKIPPED: no llvm-objdump (rustup component llvm-tools)");
            return;
        }
        let image = std::fs::read(&path).unwrap();
        let listing = objdump_listing(&path);
        let kernels = codeobj::decode_kernels(&image).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(kernels.len() >= 20, "{arch}: only {} kernels", kernels.len());
        let mut mismatches = Vec::new();
        for (name, addr, size, insts) in &kernels {
            let mut at = *addr;
            for inst in insts {
                assert_eq!(inst.addr, at);
                let (m, y, len) =
                    listing.get(&at).unwrap_or_else(|| panic!("{arch} {name}: objdump has no instruction at {at:#x}"));
                let mine = inst.mnemonic();
                if &mine != m || inst.len as usize != *len || inst.mnemonic_y().map(str::to_string) != *y {
                    mismatches.push(format!(
                        "{arch} {name} {at:#x}: objdump {m} {y:?} ({len} bytes), decoder {mine} {:?} ({} bytes)",
                        inst.mnemonic_y(),
                        inst.len
                    ));
                }
                all_mnemonics.insert(mine);
                if let Some(y) = inst.mnemonic_y() {
                    all_mnemonics.insert(y.to_string());
                }
                at += inst.len as u64;
                checked += 1;
            }
            assert_eq!(at, addr + size, "{arch} {name}: decoding does not end at the symbol's end");
        }
        assert!(
            mismatches.is_empty(),
            "{} mismatches, first ones:\n{}",
            mismatches.len(),
            mismatches[..mismatches.len().min(30)].join("\n")
        );
    }
    println!("{checked} instructions checked, {} distinct mnemonics", all_mnemonics.len());
}

#[test]
fn shipped_objects_load_with_descriptors_and_metadata() {
    for arch in ["gfx1151", "gfx11-generic"] {
        let Some(path) = common::shipped_object(arch) else {
            println!("SKIPPED: no {arch}.hsaco under target/");
            return;
        };
        let co = codeobj::load(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert!(co.arch.starts_with("amdgcn-amd-amdhsa--gfx11"), "{}", co.arch);
        let probe = co.kernel("probe").expect("probe kernel");
        assert!(probe.kd.enable_sgpr_kernarg_segment_ptr());
        for k in &co.kernels {
            assert!(k.kd.wavefront_size32(), "{}", k.name);
            assert_eq!(k.kd.float_denorm_mode_32(), 3, "{}: denormals kept", k.name);
            assert_eq!(k.kd.float_round_mode_32(), 0, "{}: round to nearest even", k.name);
            // Execution never runs off the end: the last instruction ends the
            // program or branches unconditionally (the layout may put a loop's
            // block after the exit), and the kernel has an exit.
            let last = k.insts.last().unwrap().name;
            assert!(last == "s_endpgm" || last == "s_branch", "{}: ends with {last}", k.name);
            assert!(k.insts.iter().any(|i| i.name == "s_endpgm"), "{}: no s_endpgm", k.name);
        }
    }
}

#[test]
fn an_unknown_instruction_is_an_error_naming_its_address() {
    // 0xF8000000: the EXP encoding, which the decoder does not support.
    let code: Vec<u8> = [0xF800_0000u32, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
    let e = rdna_sim::decode::decode_all(&code, 0x1234).unwrap_err();
    assert_eq!(e.addr, 0x1234);
    assert!(e.to_string().contains("0x1234") && e.to_string().contains("0xf8000000"), "{e}");
    // A VOP1 opcode that the ISA does not define (VOP1 op 127).
    let w = (0b0111111u32 << 25) | (127 << 9);
    let e = rdna_sim::decode::decode_all(&w.to_le_bytes(), 0x40).unwrap_err();
    assert!(e.to_string().contains("unknown VOP1 opcode 127"), "{e}");
}
