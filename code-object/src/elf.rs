//! The ELF reader: what an AMDGPU code object's ELF container holds for the
//! rest of this crate. The header fields (machine, `e_flags`, OS ABI and ABI
//! version), the descriptor of the `NT_AMDGPU_METADATA` note (from a SHT_NOTE
//! section, or a PT_NOTE segment when there are no section headers), the
//! undefined symbols, and every 64-byte object symbol (kernel descriptor
//! candidates) with its bytes when they are in the file.
//!
//! Every malformed input gives a [`CodeObjectError`]; nothing here panics on input.

use object::Endianness;
use object::elf;
use object::read::elf::{FileHeader, NoteIterator, ProgramHeader, SectionHeader, Sym};

use crate::{CodeObjectError, err};

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = 224;
/// Note type of the code object V3+ MessagePack metadata.
pub const NT_AMDGPU_METADATA: u32 = 32;
/// Owner name of the code object V3+ notes.
pub const AMDGPU_NOTE_NAME: &[u8] = b"AMDGPU";
/// `EI_OSABI` of AMDHSA code objects.
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// Mask of the `EF_AMDGPU_MACH` field in `e_flags`.
pub const EF_AMDGPU_MACH: u32 = 0xff;
/// Index of the class byte (ELF32/ELF64) in `e_ident`.
const EI_CLASS: usize = 4;
/// Size in bytes of a kernel descriptor (`name.kd`).
pub const KERNEL_DESCRIPTOR_SIZE: u64 = 64;

/// What the ELF container of a code object says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// The whole `e_flags` word (mach, xnack/sramecc settings, generic version).
    pub e_flags: u32,
    /// `EI_OSABI` byte of `e_ident` (64 = AMDGPU_HSA).
    pub os_abi: u8,
    /// `EI_ABIVERSION` byte of `e_ident`.
    pub abi_version: u8,
    /// The descriptor of the `NT_AMDGPU_METADATA` note (MessagePack).
    pub metadata_note: Vec<u8>,
    /// Names of the symbols of `.symtab` and `.dynsym` that are referenced but not defined.
    pub undefined_symbols: Vec<String>,
    /// The defined 64-byte object symbols of `.symtab` and `.dynsym`.
    pub descriptors: Vec<DescriptorSymbol>,
}

/// A defined 64-byte object symbol: a kernel descriptor candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorSymbol {
    pub name: String,
    /// The 64 bytes at the symbol's address, when its section's data is in the file.
    pub bytes: Option<[u8; KERNEL_DESCRIPTOR_SIZE as usize]>,
}

/// Reads the ELF container of an AMDGPU code object.
pub fn read(bytes: &[u8]) -> Result<ElfInfo, CodeObjectError> {
    check_ident(bytes)?;
    // Without object's `unaligned` feature its ELF structs need naturally
    // aligned input: copy a misaligned image (e.g. `include_bytes!`).
    let mut storage = Vec::new();
    let data = aligned_8(bytes, &mut storage)?;

    let header =
        elf::FileHeader64::<Endianness>::parse(data).map_err(|e| CodeObjectError(format!("bad ELF header: {e}")))?;
    let endian = header.endian().map_err(|e| CodeObjectError(format!("bad ELF data encoding: {e}")))?;
    let machine = header.e_machine(endian);
    if machine != EM_AMDGPU {
        return err(format!("e_machine is {machine} ({}), not EM_AMDGPU ({EM_AMDGPU})", machine_name(machine)));
    }
    let ident = header.e_ident();
    let sections = header.sections(endian, data).map_err(|e| CodeObjectError(format!("bad section headers: {e}")))?;
    let metadata_note = find_metadata_note(header, endian, data, &sections)?.to_vec();
    let descriptors = descriptor_symbols(endian, data, &sections)?;
    let undefined_symbols = undefined_symbols(endian, data, &sections)?;
    Ok(ElfInfo {
        e_flags: header.e_flags(endian),
        os_abi: ident.os_abi,
        abi_version: ident.abi_version,
        metadata_note,
        undefined_symbols,
        descriptors,
    })
}

fn check_ident(bytes: &[u8]) -> Result<(), CodeObjectError> {
    if bytes.is_empty() {
        return err("input is empty");
    }
    match bytes.get(..4) {
        Some(magic) if magic == elf::ELFMAG => {}
        _ => {
            let head = bytes.get(..bytes.len().min(4)).unwrap_or(&[]);
            return err(format!("not an ELF file (starts with {head:02x?}, expected 7f 45 4c 46)"));
        }
    }
    match bytes.get(EI_CLASS) {
        Some(&elf::ELFCLASS64) => {}
        Some(&elf::ELFCLASS32) => return err("ELF32 file; AMDGPU code objects are ELF64"),
        Some(c) => {
            return err(format!("unknown ELF class {c}; AMDGPU code objects are ELF64"));
        }
        None => return err(format!("truncated ELF header ({} bytes)", bytes.len())),
    }
    if bytes.len() < 64 {
        return err(format!("truncated ELF header ({} of 64 bytes)", bytes.len()));
    }
    Ok(())
}

/// `bytes` itself when 8-byte aligned, else a copy in `storage` that is.
fn aligned_8<'a>(bytes: &'a [u8], storage: &'a mut Vec<u8>) -> Result<&'a [u8], CodeObjectError> {
    if bytes.as_ptr().align_offset(8) == 0 {
        return Ok(bytes);
    }
    storage.resize(bytes.len() + 8, 0);
    let off = storage.as_ptr().align_offset(8);
    match storage.get_mut(off..off.saturating_add(bytes.len())) {
        Some(dst) if off < 8 => {
            dst.copy_from_slice(bytes);
            Ok(dst)
        }
        _ => err("cannot align the input for parsing"),
    }
}

fn machine_name(machine: u16) -> &'static str {
    match machine {
        elf::EM_NONE => "none",
        elf::EM_386 => "x86",
        elf::EM_X86_64 => "x86-64",
        elf::EM_ARM => "ARM",
        elf::EM_AARCH64 => "AArch64",
        elf::EM_RISCV => "RISC-V",
        elf::EM_PPC64 => "PowerPC64",
        elf::EM_CUDA => "CUDA",
        elf::EM_BPF => "BPF",
        _ => "unknown",
    }
}

type Sections<'data> = object::read::elf::SectionTable<'data, elf::FileHeader64<Endianness>, &'data [u8]>;

/// The descriptor of the `NT_AMDGPU_METADATA` note, from the SHT_NOTE sections,
/// or from the PT_NOTE segments when there are no section headers.
fn find_metadata_note<'data>(
    header: &elf::FileHeader64<Endianness>,
    endian: Endianness,
    data: &'data [u8],
    sections: &Sections<'data>,
) -> Result<&'data [u8], CodeObjectError> {
    let mut seen = Vec::new();
    for section in sections.iter() {
        let notes = section.notes(endian, data).map_err(|e| CodeObjectError(format!("bad note section: {e}")))?;
        if let Some(notes) = notes
            && let Some(desc) = scan_notes(notes, endian, &mut seen)?
        {
            return Ok(desc);
        }
    }
    let segments =
        header.program_headers(endian, data).map_err(|e| CodeObjectError(format!("bad program headers: {e}")))?;
    for segment in segments {
        let notes = segment.notes(endian, data).map_err(|e| CodeObjectError(format!("bad PT_NOTE segment: {e}")))?;
        if let Some(notes) = notes
            && let Some(desc) = scan_notes(notes, endian, &mut seen)?
        {
            return Ok(desc);
        }
    }
    let mut msg = format!(
        "no NT_AMDGPU_METADATA note (type {NT_AMDGPU_METADATA}, owner \"AMDGPU\") in a SHT_NOTE section or PT_NOTE segment"
    );
    if seen.is_empty() {
        msg.push_str("; the file has no notes");
    } else {
        seen.sort();
        seen.dedup();
        msg.push_str(&format!("; notes found: {}", seen.join(", ")));
        if seen.iter().any(|s| s.starts_with("\"AMD\"")) {
            msg.push_str(" (code object V2 \"AMD\" notes are not supported)");
        }
    }
    Err(CodeObjectError(msg))
}

fn scan_notes<'data>(
    mut notes: NoteIterator<'data, elf::FileHeader64<Endianness>>,
    endian: Endianness,
    seen: &mut Vec<String>,
) -> Result<Option<&'data [u8]>, CodeObjectError> {
    while let Some(note) = notes.next().map_err(|e| CodeObjectError(format!("malformed note: {e}")))? {
        let n_type = note.n_type(endian);
        if note.name() == AMDGPU_NOTE_NAME && n_type == NT_AMDGPU_METADATA {
            return Ok(Some(note.desc()));
        }
        seen.push(format!("\"{}\" type {n_type}", String::from_utf8_lossy(note.name()).escape_debug()));
    }
    Ok(None)
}

/// Names of the undefined (imported) symbols of `.symtab` and `.dynsym`.
fn undefined_symbols(endian: Endianness, data: &[u8], sections: &Sections<'_>) -> Result<Vec<String>, CodeObjectError> {
    let mut names = Vec::new();
    for (sh_type, what) in [(elf::SHT_SYMTAB, ".symtab"), (elf::SHT_DYNSYM, ".dynsym")] {
        let table = sections
            .symbols(endian, data, sh_type)
            .map_err(|e| CodeObjectError(format!("bad {what} symbol table: {e}")))?;
        for sym in table.iter().skip(1) {
            if sym.st_shndx(endian) != elf::SHN_UNDEF {
                continue;
            }
            let name = table
                .symbol_name(endian, sym)
                .map_err(|e| CodeObjectError(format!("bad symbol name in {what}: {e}")))?;
            let name = String::from_utf8_lossy(name).into_owned();
            if !name.is_empty() && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    Ok(names)
}

/// The defined 64-byte object symbols (kernel descriptor candidates) of
/// `.symtab` and `.dynsym`, with their bytes.
fn descriptor_symbols(
    endian: Endianness,
    data: &[u8],
    sections: &Sections<'_>,
) -> Result<Vec<DescriptorSymbol>, CodeObjectError> {
    let mut found = Vec::new();
    for (sh_type, what) in [(elf::SHT_SYMTAB, ".symtab"), (elf::SHT_DYNSYM, ".dynsym")] {
        let table = sections
            .symbols(endian, data, sh_type)
            .map_err(|e| CodeObjectError(format!("bad {what} symbol table: {e}")))?;
        for sym in table.iter() {
            if sym.st_type() != elf::STT_OBJECT
                || sym.st_shndx(endian) == elf::SHN_UNDEF
                || sym.st_size(endian) != KERNEL_DESCRIPTOR_SIZE
            {
                continue;
            }
            let name = table
                .symbol_name(endian, sym)
                .map_err(|e| CodeObjectError(format!("bad symbol name in {what}: {e}")))?;
            // The descriptor's bytes: the symbol's address within its section's file data.
            let bytes = sections.section(object::SectionIndex(sym.st_shndx(endian) as usize)).ok().and_then(|sh| {
                let start = usize::try_from(sym.st_value(endian).checked_sub(sh.sh_addr(endian))?).ok()?;
                let file = sh.data(endian, data).ok()?;
                file.get(start..start.checked_add(KERNEL_DESCRIPTOR_SIZE as usize)?)?.try_into().ok()
            });
            found.push(DescriptorSymbol { name: String::from_utf8_lossy(name).into_owned(), bytes });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Elf, encode, probe_elf, probe_metadata, read_err};

    #[test]
    fn reads_the_container_of_a_synthetic_object() {
        let info = read(&probe_elf()).unwrap();
        assert_eq!(info.e_flags, 0x4a);
        assert_eq!((info.os_abi, info.abi_version), (ELFOSABI_AMDGPU_HSA, 4));
        assert_eq!(info.metadata_note, encode(&probe_metadata(), false));
        assert!(info.undefined_symbols.is_empty());
        assert_eq!(info.descriptors.len(), 1);
        assert_eq!(info.descriptors[0].name, "probe.kd");
    }

    #[test]
    fn undefined_symbols_are_listed() {
        let mut elf = Elf::probe(encode(&probe_metadata(), false));
        elf.undefined = vec!["mlxcel_kernel_may_panic"];
        let info = read(&elf.build()).unwrap();
        assert_eq!(info.undefined_symbols, ["mlxcel_kernel_may_panic"]);
    }

    #[test]
    fn empty_input() {
        assert!(read_err(&[]).contains("empty"));
    }

    #[test]
    fn non_elf_input() {
        let e = read_err(b"MZ\x90\x00 this is not an ELF file at all, really not");
        assert!(e.contains("not an ELF file"), "{e}");
        assert!(read_err(b"\x7fEL").contains("not an ELF file"));
        assert!(read_err(b"\x7fELF").contains("truncated"));
    }

    /// ELF32 and big-endian input: `e_ident`'s class (byte 4) or data encoding
    /// (byte 5) set to `value`; the error says `says` ("": any message).
    #[test]
    fn elf32_and_big_endian_input() {
        for (byte, value, says) in [
            (4, elf::ELFCLASS32, "ELF32"),
            (4, 9, "unknown ELF class 9"),
            // Read big-endian, e_machine is 0xe000: not AMDGPU.
            (5, elf::ELFDATA2MSB, "not EM_AMDGPU"),
            (5, 7, ""),
        ] {
            let mut elf = probe_elf();
            elf[byte] = value;
            let e = read_err(&elf);
            assert!(!e.is_empty() && e.contains(says), "byte {byte} = {value}: {e}");
        }
    }

    #[test]
    fn x86_elf_header() {
        let mut elf = Elf::probe(encode(&probe_metadata(), false));
        elf.machine = elf::EM_X86_64;
        let e = read_err(&elf.build());
        assert!(e.contains("e_machine is 62 (x86-64), not EM_AMDGPU (224)"), "{e}");
        // Just the 64-byte header of an x86-64 executable.
        let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        h.resize(16, 0);
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&62u16.to_le_bytes());
        h.resize(64, 0);
        assert!(read_err(&h).contains("not EM_AMDGPU"));
    }

    #[test]
    fn truncated_input_is_an_error_at_every_length() {
        let elf = probe_elf();
        for len in 0..elf.len() {
            assert!(read(&elf[..len]).is_err(), "prefix of {len} bytes read");
        }
        assert!(read_err(&elf[..40]).contains("truncated ELF header (40 of 64 bytes)"));
    }

    #[test]
    fn corrupted_input_never_panics() {
        let elf = probe_elf();
        for i in 0..elf.len() {
            for x in [0xff, 0x80, 0x01] {
                let mut bad = elf.clone();
                bad[i] ^= x;
                let _ = read(&bad);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_ident_never_panic() {
        // An AMDGPU ELF64 ident and machine, everything else pseudo-random: an
        // answer either way, never a panic.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in [64, 65, 100, 200, 512, 4096] {
            for _ in 0..64 {
                let mut bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        state as u8
                    })
                    .collect();
                bytes[..8].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, ELFOSABI_AMDGPU_HSA]);
                bytes[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
                let _ = read(&bytes);
            }
        }
    }

    #[test]
    fn missing_metadata_note() {
        let mut elf = Elf::probe(Vec::new());
        elf.notes = vec![];
        let e = read_err(&elf.build());
        assert!(e.contains("no NT_AMDGPU_METADATA note") && e.contains("no notes"), "{e}");
        elf.notes = vec![(b"AMD", 1, vec![2, 0, 0, 0, 1, 0, 0, 0])];
        let e = read_err(&elf.build());
        assert!(e.contains("\"AMD\" type 1") && e.contains("V2"), "{e}");
    }

    #[test]
    fn reads_notes_from_segment_without_sections() {
        let mut elf = Elf::probe(encode(&probe_metadata(), false));
        elf.segment_only = true;
        let info = read(&elf.build()).unwrap();
        assert_eq!(info.metadata_note, encode(&probe_metadata(), false));
        // No section headers: no symbol table to find the descriptor in.
        assert!(info.descriptors.is_empty());
    }

    #[test]
    fn parses_misaligned_input() {
        let elf = probe_elf();
        let mut buf = vec![0u8; elf.len() + 1];
        let start = if buf.as_ptr().align_offset(8) == 0 { 1 } else { 0 };
        buf[start..start + elf.len()].copy_from_slice(&elf);
        assert_eq!(read(&buf[start..start + elf.len()]).unwrap(), read(&elf).unwrap());
    }
}
