//! Reader for AMDGPU code objects (ELF64, `e_machine` = `EM_AMDGPU`).
//!
//! Reads what the host and `build.rs` need to know about a compiled kernel
//! image: the target (ELF header flags and the `amdhsa.target` id), the
//! per-kernel metadata of the `NT_AMDGPU_METADATA` note (a MessagePack map, see
//! LLVM AMDGPUUsage, "Code Object V3+ Metadata") and whether each kernel's
//! 64-byte kernel descriptor symbol (`name.kd`) is present.
//!
//! This file is included by the root `build.rs` with
//! `#[path = "host/code_object.rs"] mod code_object;`, so it depends only on
//! std, `object` (features `read_core`, `elf`, `std`) and `rmpv`, and on
//! nothing else of the crate.
//!
//! Every malformed input (truncated, not ELF, wrong machine, no metadata,
//! malformed MessagePack, missing keys, out-of-range values) gives a
//! [`CodeObjectError`] that says what was wrong; nothing here panics on input.

#![allow(dead_code)]

use std::fmt;

use object::Endianness;
use object::elf;
use object::read::elf::{FileHeader, NoteIterator, ProgramHeader, SectionHeader, Sym};
use rmpv::Value;

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

/// Maximum nesting accepted in the metadata (the real map nests 5 deep).
const MAX_MSGPACK_DEPTH: usize = 32;

/// A parsed AMDGPU code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObject {
    /// Target id from the metadata, e.g. `amdgcn-amd-amdhsa--gfx1151` (may carry
    /// `:feature+/-` suffixes). Empty only for a V3 (metadata 1.0) object that
    /// has no `amdhsa.target`.
    pub target: String,
    /// `EF_AMDGPU_MACH` value: the low 8 bits of `e_flags` (0x4a = gfx1151).
    pub mach: u32,
    /// `EI_ABIVERSION` byte of `e_ident` (for AMDHSA: 2 = code object V4,
    /// 3 = V5, 4 = V6).
    pub abi_version: u8,
    /// `amdhsa.version` (major, minor): (1, 0) = V3, (1, 1) = V4, (1, 2) = V5+.
    pub metadata_version: (u32, u32),
    /// The kernels of `amdhsa.kernels`, in metadata order.
    pub kernels: Vec<KernelInfo>,
    /// `EI_OSABI` byte of `e_ident` (64 = AMDGPU_HSA).
    pub os_abi: u8,
    /// The whole `e_flags` word (mach, xnack/sramecc settings, generic version).
    pub e_flags: u32,
    /// Symbols the object references but does not define. A loadable kernel
    /// object has none; the device crate's panic handler calls an undefined
    /// function, so a panic path that survived optimization shows up here.
    pub undefined_symbols: Vec<String>,
}

/// One kernel of `amdhsa.kernels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelInfo {
    /// `.name`: the source-level kernel name (also its function symbol).
    pub name: String,
    /// `.symbol`: the kernel descriptor symbol, e.g. `probe.kd`.
    pub symbol: String,
    /// `.args`, explicit ones first, then the `hidden_*` ones.
    pub args: Vec<ArgInfo>,
    pub wavefront_size: u32,
    /// Static LDS in bytes.
    pub group_segment_fixed_size: u32,
    /// Scratch per work-item in bytes.
    pub private_segment_fixed_size: u32,
    /// `.uses_dynamic_stack` (false when absent).
    pub uses_dynamic_stack: bool,
    pub sgpr_count: u32,
    pub vgpr_count: u32,
    /// `.sgpr_spill_count` (0 when absent).
    pub sgpr_spill_count: u32,
    /// `.vgpr_spill_count` (0 when absent).
    pub vgpr_spill_count: u32,
    pub kernarg_segment_size: u32,
    pub kernarg_segment_align: u32,
    pub max_flat_workgroup_size: u32,
    /// Whether the symbol table defines `symbol` as a 64-byte object.
    pub has_descriptor_symbol: bool,
    /// The floating-point modes the kernel descriptor sets (`COMPUTE_PGM_RSRC1`),
    /// when the descriptor's bytes are in the file.
    pub float_modes: Option<FloatModes>,
    /// `.agpr_count` (0 when absent).
    pub agpr_count: u32,
    /// `.uniform_work_group_size`, when present.
    pub uniform_work_group_size: Option<bool>,
    /// `.dynamic_lds_size`, when present.
    pub dynamic_lds_size: Option<u32>,
}

/// One kernel argument of `.args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgInfo {
    /// `.name`, when the compiler emitted one (rustc does not).
    pub name: Option<String>,
    /// Byte offset in the kernarg segment.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
    /// `.value_kind`: `global_buffer`, `by_value`, `hidden_block_count_x`, ...
    pub value_kind: String,
    /// `.address_space` (`global`, `generic`, ...), when present.
    pub address_space: Option<String>,
    /// `.actual_access` (`read_only`, `write_only`, `read_write`), when present.
    pub actual_access: Option<String>,
}

/// The floating-point modes of a kernel, from `COMPUTE_PGM_RSRC1` of its
/// descriptor (bits 12-19). The bit-exact contracts need round to nearest even
/// (0) and denormals kept, in and out (3), as on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloatModes {
    pub round_32: u8,
    pub round_16_64: u8,
    pub denorm_32: u8,
    pub denorm_16_64: u8,
}

impl FloatModes {
    /// Byte offset of `COMPUTE_PGM_RSRC1` in a kernel descriptor.
    const RSRC1_OFFSET: usize = 48;

    fn from_descriptor(kd: &[u8]) -> Option<FloatModes> {
        let bytes: [u8; 4] = kd.get(Self::RSRC1_OFFSET..Self::RSRC1_OFFSET + 4)?.try_into().ok()?;
        let rsrc1 = u32::from_le_bytes(bytes);
        let field = |shift: u32| ((rsrc1 >> shift) & 3) as u8;
        Some(FloatModes { round_32: field(12), round_16_64: field(14), denorm_32: field(16), denorm_16_64: field(18) })
    }

    /// Round to nearest even and denormals preserved, for every precision.
    pub fn is_ieee_exact(&self) -> bool {
        self.round_32 == 0 && self.round_16_64 == 0 && self.denorm_32 == 3 && self.denorm_16_64 == 3
    }
}

impl ArgInfo {
    /// Whether this is an implicit argument appended by the compiler
    /// (`.value_kind` starting with `hidden_`).
    pub fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }
}

/// Why a code object could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObjectError(pub String);

impl fmt::Display for CodeObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid AMDGPU code object: {}", self.0)
    }
}

impl std::error::Error for CodeObjectError {}

fn err<T>(msg: impl Into<String>) -> Result<T, CodeObjectError> {
    Err(CodeObjectError(msg.into()))
}

/// A kernel as the host expects it to be compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedKernel<'a> {
    pub name: &'a str,
    /// The explicit arguments, in order.
    pub args: Vec<ExpectedArg<'a>>,
}

/// An explicit kernel argument as the host expects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedArg<'a> {
    /// Used only in messages (rustc emits no argument names).
    pub name: &'a str,
    pub offset: u32,
    pub size: u32,
    /// A pointer (`global_buffer`) rather than a scalar (`by_value`).
    pub pointer: bool,
}

impl CodeObject {
    /// Parses a code object image.
    pub fn parse(bytes: &[u8]) -> Result<CodeObject, CodeObjectError> {
        check_ident(bytes)?;
        // Without object's `unaligned` feature its ELF structs need naturally
        // aligned input: copy a misaligned image (e.g. `include_bytes!`).
        let mut storage = Vec::new();
        let data = aligned_8(bytes, &mut storage)?;

        let header = elf::FileHeader64::<Endianness>::parse(data)
            .map_err(|e| CodeObjectError(format!("bad ELF header: {e}")))?;
        let endian = header.endian().map_err(|e| CodeObjectError(format!("bad ELF data encoding: {e}")))?;
        let machine = header.e_machine(endian);
        if machine != EM_AMDGPU {
            return err(format!("e_machine is {machine} ({}), not EM_AMDGPU ({EM_AMDGPU})", machine_name(machine)));
        }
        let ident = header.e_ident();
        let e_flags = header.e_flags(endian);

        let sections =
            header.sections(endian, data).map_err(|e| CodeObjectError(format!("bad section headers: {e}")))?;
        let desc = find_metadata_note(header, endian, data, &sections)?;
        let root = rmpv::decode::read_value_with_max_depth(&mut &desc[..], MAX_MSGPACK_DEPTH)
            .map_err(|e| CodeObjectError(format!("NT_AMDGPU_METADATA is not valid MessagePack: {e}")))?;

        let descriptors = descriptor_symbols(endian, data, &sections)?;
        let mut co = parse_metadata(&root)?;
        co.undefined_symbols = undefined_symbols(endian, data, &sections)?;
        for k in &mut co.kernels {
            let found = descriptors.iter().find(|(name, _)| *name == k.symbol.as_bytes());
            k.has_descriptor_symbol = found.is_some();
            k.float_modes = found.and_then(|(_, bytes)| bytes.and_then(FloatModes::from_descriptor));
        }
        co.mach = e_flags & EF_AMDGPU_MACH;
        co.e_flags = e_flags;
        co.abi_version = ident.abi_version;
        co.os_abi = ident.os_abi;
        Ok(co)
    }

    /// The kernel whose `.name` is `name`.
    pub fn kernel(&self, name: &str) -> Option<&KernelInfo> {
        self.kernels.iter().find(|k| k.name == name)
    }

    /// The processor name from the target id: "gfx1151", "gfx11-generic".
    /// Empty when the target id is empty or malformed.
    pub fn processor(&self) -> &str {
        // <arch>-<vendor>-<os>-<environment>-<processor>{:<feature>(+|-)}
        let processor = self.target.splitn(5, '-').nth(4).unwrap_or("");
        processor.split(':').next().unwrap_or("")
    }

    /// The target features of the target id, e.g. `["sramecc+", "xnack-"]`.
    pub fn target_features(&self) -> Vec<&str> {
        self.target.split(':').skip(1).filter(|f| !f.is_empty()).collect()
    }

    /// The code object version implied by the AMDHSA ABI version byte
    /// (`abi_version` + 2: 4, 5, 6, ...), if this is an AMDHSA object.
    pub fn code_object_version(&self) -> Option<u32> {
        (self.os_abi == ELFOSABI_AMDGPU_HSA).then_some(u32::from(self.abi_version) + 2)
    }

    /// Checks every expected kernel: present (with its .kd symbol), wavefront
    /// 32, zero private segment (scratch), no dynamic stack, no spills, and
    /// explicit (non-hidden) args equal to `expected` (offset, size, and
    /// value_kind: "global_buffer" for a pointer, "by_value" for a scalar).
    /// Returns every problem found, each naming the kernel and what differs.
    pub fn audit(&self, expected: &[ExpectedKernel]) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        if !self.undefined_symbols.is_empty() {
            problems.push(format!(
                "the code object references undefined symbols {:?}; `mlxcel_kernel_may_panic` means a kernel \
                 still has a panic path (an index check, a division by zero, an unwrap): remove it",
                self.undefined_symbols
            ));
        }
        for exp in expected {
            let name = exp.name;
            let Some(k) = self.kernel(name) else {
                let present: Vec<&str> = self.kernels.iter().map(|k| k.name.as_str()).collect();
                problems.push(format!(
                    "kernel `{name}`: not in the code object (it has: {})",
                    if present.is_empty() { "no kernels".to_string() } else { present.join(", ") }
                ));
                continue;
            };
            if let Some(m) = k.float_modes
                && !m.is_ieee_exact()
            {
                problems.push(format!(
                    "kernel `{name}`: floating-point modes {m:?}; the contracts need round to nearest even (0) \
                     and denormals preserved (3)"
                ));
            }
            if !k.has_descriptor_symbol {
                problems.push(format!(
                    "kernel `{name}`: no {KERNEL_DESCRIPTOR_SIZE}-byte kernel descriptor symbol `{}`",
                    k.symbol
                ));
            }
            if k.wavefront_size != 32 {
                problems.push(format!("kernel `{name}`: wavefront size is {}, expected 32", k.wavefront_size));
            }
            if k.private_segment_fixed_size != 0 {
                problems.push(format!(
                    "kernel `{name}`: uses {} bytes of scratch (private segment) per work-item, expected 0",
                    k.private_segment_fixed_size
                ));
            }
            if k.uses_dynamic_stack {
                problems.push(format!("kernel `{name}`: uses a dynamic stack"));
            }
            if k.sgpr_spill_count != 0 {
                problems.push(format!("kernel `{name}`: spills {} SGPRs", k.sgpr_spill_count));
            }
            if k.vgpr_spill_count != 0 {
                problems.push(format!("kernel `{name}`: spills {} VGPRs", k.vgpr_spill_count));
            }

            let explicit: Vec<&ArgInfo> = k.args.iter().filter(|a| !a.is_hidden()).collect();
            if explicit.len() != exp.args.len() {
                problems.push(format!(
                    "kernel `{name}`: has {} explicit args, expected {}",
                    explicit.len(),
                    exp.args.len()
                ));
            }
            for (i, (got, want)) in explicit.iter().zip(&exp.args).enumerate() {
                let kind = if want.pointer { "global_buffer" } else { "by_value" };
                let what = format!("kernel `{name}`: arg {i} (`{}`)", want.name);
                if got.offset != want.offset {
                    problems.push(format!("{what}: offset {}, expected {}", got.offset, want.offset));
                }
                if got.size != want.size {
                    problems.push(format!("{what}: size {}, expected {}", got.size, want.size));
                }
                if got.value_kind != kind {
                    problems.push(format!("{what}: value_kind `{}`, expected `{kind}`", got.value_kind));
                }
            }
            for (i, want) in exp.args.iter().enumerate().skip(explicit.len()) {
                problems.push(format!(
                    "kernel `{name}`: arg {i} (`{}`, offset {}, size {}) is missing",
                    want.name, want.offset, want.size
                ));
            }
            for (i, got) in explicit.iter().enumerate().skip(exp.args.len()) {
                problems.push(format!(
                    "kernel `{name}`: unexpected arg {i} (offset {}, size {}, value_kind `{}`)",
                    got.offset, got.size, got.value_kind
                ));
            }
            let end = explicit.iter().map(|a| u64::from(a.offset) + u64::from(a.size)).max();
            if let Some(end) = end
                && end > u64::from(k.kernarg_segment_size)
            {
                problems.push(format!(
                    "kernel `{name}`: explicit args end at byte {end}, past the kernarg segment size {}",
                    k.kernarg_segment_size
                ));
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// A table of the kernels' resources: one line per kernel with its name,
    /// VGPRs, SGPRs, LDS (group segment bytes), scratch (private segment
    /// bytes per work-item), wavefront size and kernarg segment size.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let headers = ["kernel", "VGPRs", "SGPRs", "LDS", "scratch", "wave", "kernarg"];
        let rows: Vec<[String; 7]> = self
            .kernels
            .iter()
            .map(|k| {
                [
                    k.name.clone(),
                    k.vgpr_count.to_string(),
                    k.sgpr_count.to_string(),
                    k.group_segment_fixed_size.to_string(),
                    k.private_segment_fixed_size.to_string(),
                    k.wavefront_size.to_string(),
                    k.kernarg_segment_size.to_string(),
                ]
            })
            .collect();
        let mut widths = headers.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} (mach 0x{:x}, ABI version {}, metadata {}.{}): {} kernel(s)",
            if self.target.is_empty() { "<no target>" } else { &self.target },
            self.mach,
            self.abi_version,
            self.metadata_version.0,
            self.metadata_version.1,
            self.kernels.len()
        );
        let mut line = |cells: [&str; 7]| {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i == 0 {
                    let _ = write!(s, "{cell:<w$}");
                } else {
                    let _ = write!(s, "  {cell:>w$}");
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(headers);
        for row in &rows {
            line(row.each_ref().map(String::as_str));
        }
        out
    }
}

// ---------------------------------------------------------------------------
// ELF

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

/// Names of the defined 64-byte object symbols (kernel descriptor candidates)
/// of `.symtab` and `.dynsym`.
fn descriptor_symbols<'data>(
    endian: Endianness,
    data: &'data [u8],
    sections: &Sections<'data>,
) -> Result<Vec<(&'data [u8], Option<&'data [u8]>)>, CodeObjectError> {
    let mut names = Vec::new();
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
                let start = sym.st_value(endian).checked_sub(sh.sh_addr(endian))?;
                let file = sh.data(endian, data).ok()?;
                file.get(start as usize..(start + KERNEL_DESCRIPTOR_SIZE) as usize)
            });
            names.push((name, bytes));
        }
    }
    Ok(names)
}

// ---------------------------------------------------------------------------
// MessagePack metadata

fn parse_metadata(root: &Value) -> Result<CodeObject, CodeObjectError> {
    let root = as_map(root, "the metadata root")?;

    let version =
        get(root, "amdhsa.version").ok_or_else(|| CodeObjectError("metadata has no amdhsa.version".into()))?;
    let version = match version.as_array().map(Vec::as_slice) {
        Some([major, minor, ..]) => (to_u32(major, "amdhsa.version[0]")?, to_u32(minor, "amdhsa.version[1]")?),
        _ => {
            return err(format!("amdhsa.version is {}, expected an array [major, minor]", describe(version)));
        }
    };

    // amdhsa.target appeared with code object V4 (metadata 1.1).
    let target = match get(root, "amdhsa.target") {
        Some(t) => to_string(t, "amdhsa.target")?,
        None if version < (1, 1) => String::new(),
        None => return err("metadata has no amdhsa.target"),
    };

    let kernels = match get(root, "amdhsa.kernels") {
        Some(v) => v
            .as_array()
            .ok_or_else(|| CodeObjectError(format!("amdhsa.kernels is {}, expected an array", describe(v))))?
            .iter()
            .enumerate()
            .map(|(i, k)| parse_kernel(i, k))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };

    Ok(CodeObject {
        target,
        mach: 0,
        abi_version: 0,
        metadata_version: version,
        kernels,
        os_abi: 0,
        e_flags: 0,
        undefined_symbols: Vec::new(),
    })
}

fn parse_kernel(index: usize, value: &Value) -> Result<KernelInfo, CodeObjectError> {
    let map = as_map(value, &format!("amdhsa.kernels[{index}]"))?;
    let name = match get(map, ".name") {
        Some(v) => to_string(v, &format!("amdhsa.kernels[{index}] .name"))?,
        None => return err(format!("amdhsa.kernels[{index}] has no .name")),
    };
    let ctx = format!("kernel `{name}`");
    let required_u32 = |key: &str| -> Result<u32, CodeObjectError> {
        match get(map, key) {
            Some(v) => to_u32(v, &format!("{ctx} {key}")),
            None => err(format!("{ctx} has no {key}")),
        }
    };
    let optional_u32 = |key: &str| -> Result<Option<u32>, CodeObjectError> {
        get(map, key).map(|v| to_u32(v, &format!("{ctx} {key}"))).transpose()
    };
    let optional_bool = |key: &str| -> Result<Option<bool>, CodeObjectError> {
        get(map, key).map(|v| to_bool(v, &format!("{ctx} {key}"))).transpose()
    };

    let symbol = match get(map, ".symbol") {
        Some(v) => to_string(v, &format!("{ctx} .symbol"))?,
        None => return err(format!("{ctx} has no .symbol")),
    };
    let args = match get(map, ".args") {
        Some(v) => v
            .as_array()
            .ok_or_else(|| CodeObjectError(format!("{ctx} .args is {}, expected an array", describe(v))))?
            .iter()
            .enumerate()
            .map(|(i, a)| parse_arg(&ctx, i, a))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };

    Ok(KernelInfo {
        symbol,
        args,
        wavefront_size: required_u32(".wavefront_size")?,
        group_segment_fixed_size: required_u32(".group_segment_fixed_size")?,
        private_segment_fixed_size: required_u32(".private_segment_fixed_size")?,
        uses_dynamic_stack: optional_bool(".uses_dynamic_stack")?.unwrap_or(false),
        sgpr_count: required_u32(".sgpr_count")?,
        vgpr_count: required_u32(".vgpr_count")?,
        sgpr_spill_count: optional_u32(".sgpr_spill_count")?.unwrap_or(0),
        vgpr_spill_count: optional_u32(".vgpr_spill_count")?.unwrap_or(0),
        kernarg_segment_size: required_u32(".kernarg_segment_size")?,
        kernarg_segment_align: required_u32(".kernarg_segment_align")?,
        max_flat_workgroup_size: required_u32(".max_flat_workgroup_size")?,
        has_descriptor_symbol: false,
        float_modes: None,
        agpr_count: optional_u32(".agpr_count")?.unwrap_or(0),
        uniform_work_group_size: optional_bool(".uniform_work_group_size")?,
        dynamic_lds_size: optional_u32(".dynamic_lds_size")?,
        name,
    })
}

fn parse_arg(kernel: &str, index: usize, value: &Value) -> Result<ArgInfo, CodeObjectError> {
    let ctx = format!("{kernel} .args[{index}]");
    let map = as_map(value, &ctx)?;
    let required_u32 = |key: &str| -> Result<u32, CodeObjectError> {
        match get(map, key) {
            Some(v) => to_u32(v, &format!("{ctx} {key}")),
            None => err(format!("{ctx} has no {key}")),
        }
    };
    let optional_string = |key: &str| -> Result<Option<String>, CodeObjectError> {
        get(map, key).map(|v| to_string(v, &format!("{ctx} {key}"))).transpose()
    };
    Ok(ArgInfo {
        name: optional_string(".name")?,
        offset: required_u32(".offset")?,
        size: required_u32(".size")?,
        value_kind: match get(map, ".value_kind") {
            Some(v) => to_string(v, &format!("{ctx} .value_kind"))?,
            None => return err(format!("{ctx} has no .value_kind")),
        },
        address_space: optional_string(".address_space")?,
        actual_access: optional_string(".actual_access")?,
    })
}

/// The value of `key` in a MessagePack map (keys as strings, or as binary,
/// which some writers use for strings).
fn get<'v>(map: &'v [(Value, Value)], key: &str) -> Option<&'v Value> {
    map.iter()
        .find(|(k, _)| match k {
            Value::String(s) => s.as_bytes() == key.as_bytes(),
            Value::Binary(b) => b.as_slice() == key.as_bytes(),
            _ => false,
        })
        .map(|(_, v)| v)
}

fn as_map<'v>(value: &'v Value, what: &str) -> Result<&'v [(Value, Value)], CodeObjectError> {
    value
        .as_map()
        .map(Vec::as_slice)
        .ok_or_else(|| CodeObjectError(format!("{what} is {}, expected a map", describe(value))))
}

/// An unsigned 32-bit integer, whether encoded as a MessagePack uint or int.
fn to_u32(value: &Value, what: &str) -> Result<u32, CodeObjectError> {
    let Value::Integer(i) = value else {
        return err(format!("{what} is {}, expected an integer", describe(value)));
    };
    let n = match (i.as_u64(), i.as_i64()) {
        (Some(u), _) => u128::from(u),
        (None, Some(s)) => return err(format!("{what} is {s}, expected a non-negative integer")),
        (None, None) => return err(format!("{what} is not a representable integer")),
    };
    u32::try_from(n).or_else(|_| err(format!("{what} is {n}, larger than 32 bits")))
}

fn to_bool(value: &Value, what: &str) -> Result<bool, CodeObjectError> {
    match value {
        Value::Boolean(b) => Ok(*b),
        // Some writers encode flags as 0/1.
        Value::Integer(i) if i.as_u64() == Some(0) => Ok(false),
        Value::Integer(i) if i.as_u64() == Some(1) => Ok(true),
        _ => err(format!("{what} is {}, expected a boolean", describe(value))),
    }
}

fn to_string(value: &Value, what: &str) -> Result<String, CodeObjectError> {
    match value {
        Value::String(s) => match s.as_str() {
            Some(s) => Ok(s.to_string()),
            None => err(format!("{what} is not valid UTF-8")),
        },
        Value::Binary(b) => match std::str::from_utf8(b) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => err(format!("{what} is not valid UTF-8")),
        },
        _ => err(format!("{what} is {}, expected a string", describe(value))),
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Nil => "nil".into(),
        Value::Boolean(b) => format!("the boolean {b}"),
        Value::Integer(i) => format!("the integer {i}"),
        Value::F32(_) | Value::F64(_) => "a float".into(),
        Value::String(_) => "a string".into(),
        Value::Binary(_) => "binary data".into(),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Map(m) => format!("a map of {}", m.len()),
        Value::Ext(t, _) => format!("an extension of type {t}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // --- A minimal MessagePack writer, so tests can choose the integer encoding.

    enum Mp {
        U(u64),
        I(i64),
        B(bool),
        S(&'static str),
        A(Vec<Mp>),
        M(Vec<(&'static str, Mp)>),
        Raw(Vec<u8>),
    }

    fn mp(v: &Mp, ints_as_i64: bool, out: &mut Vec<u8>) {
        match v {
            Mp::U(n) if ints_as_i64 => {
                out.push(0xd3);
                out.extend_from_slice(&(*n as i64).to_be_bytes());
            }
            Mp::U(n) => {
                out.push(0xcf);
                out.extend_from_slice(&n.to_be_bytes());
            }
            Mp::I(n) => {
                out.push(0xd3);
                out.extend_from_slice(&n.to_be_bytes());
            }
            Mp::B(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
            Mp::S(s) => {
                out.push(0xd9);
                out.push(s.len() as u8);
                out.extend_from_slice(s.as_bytes());
            }
            Mp::A(a) => {
                out.push(0xdc);
                out.extend_from_slice(&(a.len() as u16).to_be_bytes());
                for x in a {
                    mp(x, ints_as_i64, out);
                }
            }
            Mp::M(m) => {
                out.push(0xde);
                out.extend_from_slice(&(m.len() as u16).to_be_bytes());
                for (k, x) in m {
                    mp(&Mp::S(k), ints_as_i64, out);
                    mp(x, ints_as_i64, out);
                }
            }
            Mp::Raw(r) => out.extend_from_slice(r),
        }
    }

    fn arg(offset: u64, size: u64, kind: &'static str) -> Mp {
        Mp::M(vec![(".offset", Mp::U(offset)), (".size", Mp::U(size)), (".value_kind", Mp::S(kind))])
    }

    fn kernel_map(name: &'static str, symbol: &'static str, args: Vec<Mp>) -> Vec<(&'static str, Mp)> {
        vec![
            (".args", Mp::A(args)),
            (".group_segment_fixed_size", Mp::U(256)),
            (".kernarg_segment_align", Mp::U(8)),
            (".kernarg_segment_size", Mp::U(272)),
            (".max_flat_workgroup_size", Mp::U(1024)),
            (".name", Mp::S(name)),
            (".private_segment_fixed_size", Mp::U(0)),
            (".sgpr_count", Mp::U(12)),
            (".sgpr_spill_count", Mp::U(0)),
            (".symbol", Mp::S(symbol)),
            (".uses_dynamic_stack", Mp::B(false)),
            (".vgpr_count", Mp::U(21)),
            (".vgpr_spill_count", Mp::U(0)),
            (".wavefront_size", Mp::U(32)),
        ]
    }

    fn probe_args() -> Vec<Mp> {
        vec![
            Mp::M(vec![
                (".address_space", Mp::S("global")),
                (".name", Mp::S("out")),
                (".offset", Mp::U(0)),
                (".size", Mp::U(8)),
                (".value_kind", Mp::S("global_buffer")),
            ]),
            arg(8, 4, "by_value"),
            arg(16, 4, "hidden_block_count_x"),
            arg(20, 4, "hidden_block_count_y"),
        ]
    }

    fn metadata_with(kernels: Vec<Vec<(&'static str, Mp)>>) -> Mp {
        Mp::M(vec![
            ("amdhsa.kernels", Mp::A(kernels.into_iter().map(Mp::M).collect())),
            ("amdhsa.target", Mp::S("amdgcn-amd-amdhsa--gfx1151")),
            ("amdhsa.version", Mp::A(vec![Mp::U(1), Mp::U(2)])),
        ])
    }

    fn probe_metadata() -> Mp {
        metadata_with(vec![kernel_map("probe", "probe.kd", probe_args())])
    }

    fn encode(v: &Mp, ints_as_i64: bool) -> Vec<u8> {
        let mut out = Vec::new();
        mp(v, ints_as_i64, &mut out);
        out
    }

    // --- A minimal ELF64 writer.

    struct Elf<'a> {
        machine: u16,
        /// (owner, type, descriptor)
        notes: Vec<(&'a [u8], u32, Vec<u8>)>,
        /// (name, st_type, st_size)
        symbols: Vec<(&'a str, u8, u64)>,
        /// Notes in a PT_NOTE segment only, and no section headers.
        segment_only: bool,
    }

    impl<'a> Elf<'a> {
        fn probe(metadata: Vec<u8>) -> Self {
            Elf {
                machine: EM_AMDGPU,
                notes: vec![(b"AMDGPU", NT_AMDGPU_METADATA, metadata)],
                symbols: vec![("probe", elf::STT_FUNC, 756), ("probe.kd", elf::STT_OBJECT, 64)],
                segment_only: false,
            }
        }

        fn build(&self) -> Vec<u8> {
            fn pad(v: &mut Vec<u8>, align: usize) {
                while !v.len().is_multiple_of(align) {
                    v.push(0);
                }
            }
            fn u16le(v: &mut Vec<u8>, x: u16) {
                v.extend_from_slice(&x.to_le_bytes());
            }
            fn u32le(v: &mut Vec<u8>, x: u32) {
                v.extend_from_slice(&x.to_le_bytes());
            }
            fn u64le(v: &mut Vec<u8>, x: u64) {
                v.extend_from_slice(&x.to_le_bytes());
            }

            let mut f = vec![0u8; 64];
            let phoff = f.len();
            f.resize(phoff + 56, 0); // one PT_NOTE program header, filled below

            let note_off = f.len();
            for (owner, ty, desc) in &self.notes {
                u32le(&mut f, owner.len() as u32 + 1);
                u32le(&mut f, desc.len() as u32);
                u32le(&mut f, *ty);
                f.extend_from_slice(owner);
                f.push(0);
                pad(&mut f, 4);
                f.extend_from_slice(desc);
                pad(&mut f, 4);
            }
            let note_size = f.len() - note_off;

            let mut strtab = vec![0u8];
            let mut syms = vec![0u8; 24];
            for (name, ty, size) in &self.symbols {
                u32le(&mut syms, strtab.len() as u32);
                strtab.extend_from_slice(name.as_bytes());
                strtab.push(0);
                syms.push((elf::STB_GLOBAL << 4) | ty);
                syms.push(0);
                u16le(&mut syms, 1);
                u64le(&mut syms, 0x1000);
                u64le(&mut syms, *size);
            }
            pad(&mut f, 8);
            let symtab_off = f.len();
            f.extend_from_slice(&syms);
            let strtab_off = f.len();
            f.extend_from_slice(&strtab);
            let shstrtab_off = f.len();
            let shstrtab = b"\0.note\0.symtab\0.strtab\0.shstrtab\0";
            f.extend_from_slice(shstrtab);
            pad(&mut f, 8);
            let shoff = f.len();
            // (name, type, offset, size, link, info, align, entsize)
            #[allow(clippy::type_complexity)]
            let shdrs: [(u32, u32, usize, usize, u32, u32, u64, u64); 5] = [
                (0, 0, 0, 0, 0, 0, 0, 0),
                (1, elf::SHT_NOTE, note_off, note_size, 0, 0, 4, 0),
                (7, elf::SHT_SYMTAB, symtab_off, syms.len(), 3, 1, 8, 24),
                (15, elf::SHT_STRTAB, strtab_off, strtab.len(), 0, 0, 1, 0),
                (23, elf::SHT_STRTAB, shstrtab_off, shstrtab.len(), 0, 0, 1, 0),
            ];
            if !self.segment_only {
                for (name, ty, off, size, link, info, align, entsize) in shdrs {
                    u32le(&mut f, name);
                    u32le(&mut f, ty);
                    u64le(&mut f, 0);
                    u64le(&mut f, 0);
                    u64le(&mut f, off as u64);
                    u64le(&mut f, size as u64);
                    u32le(&mut f, link);
                    u32le(&mut f, info);
                    u64le(&mut f, align);
                    u64le(&mut f, entsize);
                }
            }

            let mut h = Vec::new();
            h.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, ELFOSABI_AMDGPU_HSA, 4]);
            h.resize(16, 0);
            u16le(&mut h, elf::ET_DYN);
            u16le(&mut h, self.machine);
            u32le(&mut h, 1);
            u64le(&mut h, 0);
            u64le(&mut h, phoff as u64);
            u64le(&mut h, if self.segment_only { 0 } else { shoff as u64 });
            u32le(&mut h, 0x4a);
            u16le(&mut h, 64);
            u16le(&mut h, 56);
            u16le(&mut h, 1);
            u16le(&mut h, 64);
            u16le(&mut h, if self.segment_only { 0 } else { 5 });
            u16le(&mut h, if self.segment_only { 0 } else { 4 });
            f[..64].copy_from_slice(&h);

            let mut p = Vec::new();
            u32le(&mut p, elf::PT_NOTE);
            u32le(&mut p, elf::PF_R);
            u64le(&mut p, note_off as u64);
            u64le(&mut p, note_off as u64);
            u64le(&mut p, note_off as u64);
            u64le(&mut p, note_size as u64);
            u64le(&mut p, note_size as u64);
            u64le(&mut p, 4);
            f[phoff..phoff + 56].copy_from_slice(&p);
            f
        }
    }

    fn probe_elf() -> Vec<u8> {
        Elf::probe(encode(&probe_metadata(), false)).build()
    }

    fn parse_err(bytes: &[u8]) -> String {
        match CodeObject::parse(bytes) {
            Ok(co) => panic!("parse unexpectedly succeeded: {co:?}"),
            Err(e) => e.0,
        }
    }

    fn probe_expected() -> Vec<ExpectedKernel<'static>> {
        vec![ExpectedKernel {
            name: "probe",
            args: vec![
                ExpectedArg { name: "out", offset: 0, size: 8, pointer: true },
                ExpectedArg { name: "n", offset: 8, size: 4, pointer: false },
            ],
        }]
    }

    #[test]
    fn parses_synthetic_code_object() {
        let co = CodeObject::parse(&probe_elf()).unwrap();
        assert_eq!(co.target, "amdgcn-amd-amdhsa--gfx1151");
        assert_eq!(co.processor(), "gfx1151");
        assert!(co.target_features().is_empty());
        assert_eq!(co.mach, 0x4a);
        assert_eq!(co.abi_version, 4);
        assert_eq!(co.code_object_version(), Some(6));
        assert_eq!(co.metadata_version, (1, 2));
        assert_eq!(co.kernels.len(), 1);
        let k = co.kernel("probe").unwrap();
        assert_eq!(k.symbol, "probe.kd");
        assert!(k.has_descriptor_symbol);
        assert_eq!(k.wavefront_size, 32);
        assert_eq!(k.group_segment_fixed_size, 256);
        assert_eq!(k.private_segment_fixed_size, 0);
        assert!(!k.uses_dynamic_stack);
        assert_eq!((k.sgpr_count, k.vgpr_count, k.agpr_count), (12, 21, 0));
        assert_eq!((k.sgpr_spill_count, k.vgpr_spill_count), (0, 0));
        assert_eq!((k.kernarg_segment_size, k.kernarg_segment_align), (272, 8));
        assert_eq!(k.max_flat_workgroup_size, 1024);
        assert_eq!(k.uniform_work_group_size, None);
        assert_eq!(k.args.len(), 4);
        assert_eq!(k.args[0].name.as_deref(), Some("out"));
        assert_eq!(k.args[0].address_space.as_deref(), Some("global"));
        assert_eq!((k.args[0].offset, k.args[0].size), (0, 8));
        assert_eq!(k.args[0].value_kind, "global_buffer");
        assert!(!k.args[0].is_hidden() && !k.args[1].is_hidden());
        assert!(k.args[2].is_hidden() && k.args[3].is_hidden());
        assert_eq!(k.args[1].name, None);
        assert!(co.kernel("nope").is_none());
        assert_eq!(co.audit(&probe_expected()), Ok(()));
    }

    #[test]
    fn accepts_signed_integer_encoding() {
        let a = CodeObject::parse(&probe_elf()).unwrap();
        let b = CodeObject::parse(&Elf::probe(encode(&probe_metadata(), true)).build()).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn reads_notes_from_segment_without_sections() {
        let mut elf = Elf::probe(encode(&probe_metadata(), false));
        elf.segment_only = true;
        let co = CodeObject::parse(&elf.build()).unwrap();
        assert_eq!(co.kernels.len(), 1);
        // No section headers: no symbol table to find the descriptor in.
        assert!(!co.kernels[0].has_descriptor_symbol);
        let problems = co.audit(&probe_expected()).unwrap_err();
        assert!(problems.iter().any(|p| p.contains("probe.kd")), "{problems:?}");
    }

    #[test]
    fn parses_misaligned_input() {
        let elf = probe_elf();
        let mut buf = vec![0u8; elf.len() + 1];
        let start = if buf.as_ptr().align_offset(8) == 0 { 1 } else { 0 };
        buf[start..start + elf.len()].copy_from_slice(&elf);
        let co = CodeObject::parse(&buf[start..start + elf.len()]).unwrap();
        assert_eq!(co, CodeObject::parse(&elf).unwrap());
    }

    #[test]
    fn processor_of_target_ids() {
        let mut co = CodeObject::parse(&probe_elf()).unwrap();
        co.target = "amdgcn-amd-amdhsa--gfx11-generic".into();
        assert_eq!(co.processor(), "gfx11-generic");
        co.target = "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-".into();
        assert_eq!(co.processor(), "gfx90a");
        assert_eq!(co.target_features(), ["sramecc+", "xnack-"]);
        co.target = "garbage".into();
        assert_eq!(co.processor(), "");
    }

    #[test]
    fn empty_input() {
        assert!(parse_err(&[]).contains("empty"));
    }

    #[test]
    fn non_elf_input() {
        let e = parse_err(b"MZ\x90\x00 this is not an ELF file at all, really not");
        assert!(e.contains("not an ELF file"), "{e}");
        assert!(parse_err(b"\x7fEL").contains("not an ELF file"));
        assert!(parse_err(b"\x7fELF").contains("truncated"));
    }

    #[test]
    fn elf32_input() {
        let mut elf = probe_elf();
        elf[4] = elf::ELFCLASS32;
        assert!(parse_err(&elf).contains("ELF32"));
    }

    #[test]
    fn big_endian_input() {
        let mut elf = probe_elf();
        elf[5] = elf::ELFDATA2MSB;
        // Read big-endian, e_machine is 0xe000: not AMDGPU.
        assert!(parse_err(&elf).contains("not EM_AMDGPU"));
        elf[5] = 7;
        let e = parse_err(&elf);
        assert!(!e.is_empty());
    }

    #[test]
    fn x86_elf_header() {
        let mut elf = Elf::probe(encode(&probe_metadata(), false));
        elf.machine = elf::EM_X86_64;
        let e = parse_err(&elf.build());
        assert!(e.contains("e_machine is 62 (x86-64), not EM_AMDGPU (224)"), "{e}");
        // Just the 64-byte header of an x86-64 executable.
        let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        h.resize(16, 0);
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&62u16.to_le_bytes());
        h.resize(64, 0);
        assert!(parse_err(&h).contains("not EM_AMDGPU"));
    }

    #[test]
    fn truncated_input_is_an_error_at_every_length() {
        let elf = probe_elf();
        for len in 0..elf.len() {
            assert!(CodeObject::parse(&elf[..len]).is_err(), "prefix of {len} bytes parsed");
        }
        assert!(parse_err(&elf[..40]).contains("truncated ELF header (40 of 64 bytes)"));
    }

    #[test]
    fn corrupted_input_never_panics() {
        let elf = probe_elf();
        for i in 0..elf.len() {
            for x in [0xff, 0x80, 0x01] {
                let mut bad = elf.clone();
                bad[i] ^= x;
                let _ = CodeObject::parse(&bad);
            }
        }
    }

    #[test]
    fn missing_metadata_note() {
        let mut elf = Elf::probe(Vec::new());
        elf.notes = vec![];
        let e = parse_err(&elf.build());
        assert!(e.contains("no NT_AMDGPU_METADATA note") && e.contains("no notes"), "{e}");
        elf.notes = vec![(b"AMD", 1, vec![2, 0, 0, 0, 1, 0, 0, 0])];
        let e = parse_err(&elf.build());
        assert!(e.contains("\"AMD\" type 1") && e.contains("V2"), "{e}");
    }

    #[test]
    fn malformed_msgpack() {
        // Empty descriptor.
        let e = parse_err(&Elf::probe(vec![]).build());
        assert!(e.contains("not valid MessagePack"), "{e}");
        // A string cut short.
        let e = parse_err(&Elf::probe(vec![0xa5, b'a']).build());
        assert!(e.contains("not valid MessagePack"), "{e}");
        // rmpv reads the reserved marker 0xc1 as nil.
        let e = parse_err(&Elf::probe(vec![0xc1]).build());
        assert!(e.contains("metadata root is nil, expected a map"), "{e}");
        // A map that claims more entries than there are.
        let e = parse_err(&Elf::probe(vec![0xde, 0xff, 0xff, 0xa1, b'x']).build());
        assert!(e.contains("not valid MessagePack"), "{e}");
        // Deep nesting is refused, not recursed into.
        let e = parse_err(&Elf::probe(vec![0x91; 4096]).build());
        assert!(e.contains("not valid MessagePack"), "{e}");
        // Not a map at the root.
        let e = parse_err(&Elf::probe(encode(&Mp::A(vec![Mp::U(1)]), false)).build());
        assert!(e.contains("metadata root is an array of 1, expected a map"), "{e}");
    }

    #[test]
    fn malformed_metadata_values() {
        let check = |meta: Mp, want: &str| {
            let e = parse_err(&Elf::probe(encode(&meta, false)).build());
            assert!(e.contains(want), "{e:?} does not contain {want:?}");
        };
        check(Mp::M(vec![]), "no amdhsa.version");
        check(Mp::M(vec![("amdhsa.version", Mp::U(1))]), "amdhsa.version is the integer 1");
        check(Mp::M(vec![("amdhsa.version", Mp::A(vec![Mp::U(1), Mp::U(2)]))]), "no amdhsa.target");

        let with_kernel_key = |key: &'static str, value: Option<Mp>| {
            let mut k = kernel_map("probe", "probe.kd", probe_args());
            k.retain(|(k, _)| *k != key);
            if let Some(v) = value {
                k.push((key, v));
            }
            metadata_with(vec![k])
        };
        check(with_kernel_key(".wavefront_size", None), "kernel `probe` has no .wavefront_size");
        check(with_kernel_key(".name", None), "amdhsa.kernels[0] has no .name");
        check(with_kernel_key(".symbol", Some(Mp::U(3))), "kernel `probe` .symbol is the integer 3");
        check(
            with_kernel_key(".vgpr_count", Some(Mp::I(-1))),
            "kernel `probe` .vgpr_count is -1, expected a non-negative integer",
        );
        check(
            with_kernel_key(".vgpr_count", Some(Mp::U(1 << 40))),
            "kernel `probe` .vgpr_count is 1099511627776, larger than 32 bits",
        );
        check(
            with_kernel_key(".uses_dynamic_stack", Some(Mp::S("no"))),
            ".uses_dynamic_stack is a string, expected a boolean",
        );
        check(with_kernel_key(".args", Some(Mp::U(0))), ".args is the integer 0, expected an array");
        check(
            with_kernel_key(".args", Some(Mp::A(vec![Mp::M(vec![(".offset", Mp::U(0))])]))),
            "kernel `probe` .args[0] has no .size",
        );
        check(with_kernel_key(".name", Some(Mp::Raw(vec![0xa2, 0xff, 0xfe]))), ".name is not valid UTF-8");
    }

    #[test]
    fn optional_keys() {
        let mut k = kernel_map("probe", "probe.kd", vec![]);
        k.retain(|(k, _)| !matches!(*k, ".sgpr_spill_count" | ".vgpr_spill_count" | ".uses_dynamic_stack" | ".args"));
        k.push((".agpr_count", Mp::U(4)));
        k.push((".uniform_work_group_size", Mp::U(1)));
        k.push((".dynamic_lds_size", Mp::U(64)));
        let co = CodeObject::parse(&Elf::probe(encode(&metadata_with(vec![k]), false)).build()).unwrap();
        let k = &co.kernels[0];
        assert_eq!((k.sgpr_spill_count, k.vgpr_spill_count, k.uses_dynamic_stack), (0, 0, false));
        assert!(k.args.is_empty());
        assert_eq!(k.agpr_count, 4);
        assert_eq!(k.uniform_work_group_size, Some(true));
        assert_eq!(k.dynamic_lds_size, Some(64));
    }

    #[test]
    fn audit_reports_every_problem() {
        let mut k = kernel_map("probe", "probe.kd", vec![arg(0, 4, "by_value"), arg(8, 8, "global_buffer")]);
        for (key, v) in k.iter_mut() {
            match *key {
                ".wavefront_size" => *v = Mp::U(64),
                ".private_segment_fixed_size" => *v = Mp::U(16),
                ".uses_dynamic_stack" => *v = Mp::B(true),
                ".sgpr_spill_count" => *v = Mp::U(2),
                ".vgpr_spill_count" => *v = Mp::U(3),
                ".kernarg_segment_size" => *v = Mp::U(8),
                _ => {}
            }
        }
        let mut elf = Elf::probe(encode(&metadata_with(vec![k]), false));
        elf.symbols = vec![("probe", elf::STT_FUNC, 756), ("probe.kd", elf::STT_OBJECT, 32)];
        let co = CodeObject::parse(&elf.build()).unwrap();
        let mut expected = probe_expected();
        expected.push(ExpectedKernel { name: "missing", args: vec![] });
        let problems = co.audit(&expected).unwrap_err();
        let want = [
            "kernel `probe`: no 64-byte kernel descriptor symbol `probe.kd`",
            "kernel `probe`: wavefront size is 64, expected 32",
            "kernel `probe`: uses 16 bytes of scratch (private segment) per work-item, expected 0",
            "kernel `probe`: uses a dynamic stack",
            "kernel `probe`: spills 2 SGPRs",
            "kernel `probe`: spills 3 VGPRs",
            "kernel `probe`: arg 0 (`out`): size 4, expected 8",
            "kernel `probe`: arg 0 (`out`): value_kind `by_value`, expected `global_buffer`",
            "kernel `probe`: arg 1 (`n`): size 8, expected 4",
            "kernel `probe`: arg 1 (`n`): value_kind `global_buffer`, expected `by_value`",
            "kernel `probe`: explicit args end at byte 16, past the kernarg segment size 8",
            "kernel `missing`: not in the code object (it has: probe)",
        ];
        assert_eq!(problems, want);

        let co = CodeObject::parse(&probe_elf()).unwrap();
        let problems = co
            .audit(&[ExpectedKernel {
                name: "probe",
                args: vec![ExpectedArg { name: "out", offset: 4, size: 8, pointer: true }],
            }])
            .unwrap_err();
        assert_eq!(
            problems,
            [
                "kernel `probe`: has 2 explicit args, expected 1",
                "kernel `probe`: arg 0 (`out`): offset 0, expected 4",
                "kernel `probe`: unexpected arg 1 (offset 8, size 4, value_kind `by_value`)",
            ]
        );
        let problems = co
            .audit(&[ExpectedKernel {
                name: "probe",
                args: vec![
                    ExpectedArg { name: "out", offset: 0, size: 8, pointer: true },
                    ExpectedArg { name: "n", offset: 8, size: 4, pointer: false },
                    ExpectedArg { name: "m", offset: 12, size: 4, pointer: false },
                ],
            }])
            .unwrap_err();
        assert_eq!(
            problems,
            [
                "kernel `probe`: has 2 explicit args, expected 3",
                "kernel `probe`: arg 2 (`m`, offset 12, size 4) is missing",
            ]
        );
    }

    #[test]
    fn summary_table() {
        let mut k2 = kernel_map("a_much_longer_kernel_name", "a_much_longer_kernel_name.kd", vec![]);
        for (key, v) in k2.iter_mut() {
            if *key == ".vgpr_count" {
                *v = Mp::U(128);
            }
        }
        let meta = metadata_with(vec![kernel_map("probe", "probe.kd", probe_args()), k2]);
        let co = CodeObject::parse(&Elf::probe(encode(&meta, false)).build()).unwrap();
        let s = co.summary();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4, "{s}");
        assert!(lines[0].contains("amdgcn-amd-amdhsa--gfx1151") && lines[0].contains("2 kernel(s)"));
        let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(cells(lines[1]), ["kernel", "VGPRs", "SGPRs", "LDS", "scratch", "wave", "kernarg"]);
        assert_eq!(cells(lines[2]), ["probe", "21", "12", "256", "0", "32", "272"]);
        assert_eq!(cells(lines[3]), ["a_much_longer_kernel_name", "128", "12", "256", "0", "32", "272"]);
        // Columns line up.
        assert_eq!(lines[1].len(), lines[2].len());
        assert_eq!(lines[2].len(), lines[3].len());
    }

    #[test]
    fn error_display() {
        let e = CodeObject::parse(&[]).unwrap_err();
        assert_eq!(e.to_string(), "invalid AMDGPU code object: input is empty");
        let _: &dyn std::error::Error = &e;
    }
}
