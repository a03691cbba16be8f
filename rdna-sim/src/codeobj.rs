//! Reading an AMDGPU code object (an ELF shared object, code object v5): its
//! kernels, their kernel descriptors (`<name>.kd`) and the metadata note.
//!
//! Layouts follow LLVM's "AMDGPU Usage" document (sections "Kernel Descriptor"
//! and "Code Object V5 Metadata").

use crate::decode::{self, DecodeError, Inst};
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::HashMap;
use std::fmt;

#[derive(Debug, Clone)]
pub struct LoadError(pub String);

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LoadError {}

/// The fields of the 64-byte kernel descriptor that a dispatch uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelDescriptor {
    pub group_segment_fixed_size: u32,
    pub private_segment_fixed_size: u32,
    pub kernarg_size: u32,
    pub kernel_code_entry_byte_offset: i64,
    pub compute_pgm_rsrc3: u32,
    pub compute_pgm_rsrc1: u32,
    pub compute_pgm_rsrc2: u32,
    pub kernel_code_properties: u16,
}

impl KernelDescriptor {
    pub fn parse(b: &[u8]) -> Result<KernelDescriptor, LoadError> {
        if b.len() < 64 {
            return Err(LoadError(format!("kernel descriptor is {} bytes, not 64", b.len())));
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        Ok(KernelDescriptor {
            group_segment_fixed_size: u32_at(0),
            private_segment_fixed_size: u32_at(4),
            kernarg_size: u32_at(8),
            kernel_code_entry_byte_offset: i64::from_le_bytes(b[16..24].try_into().unwrap()),
            compute_pgm_rsrc3: u32_at(44),
            compute_pgm_rsrc1: u32_at(48),
            compute_pgm_rsrc2: u32_at(52),
            kernel_code_properties: u16::from_le_bytes(b[56..58].try_into().unwrap()),
        })
    }
    /// ENABLE_SGPR_WORKGROUP_ID_X/Y/Z.
    pub fn workgroup_id_enabled(&self, dim: u32) -> bool {
        self.compute_pgm_rsrc2 >> (7 + dim) & 1 != 0
    }
}

/// The descriptor's bit fields, one table: `name: register[first bit; width]`;
/// a field of width 1 reads as a bool, a wider one as a u32.
macro_rules! bit_fields {
    ($($(#[$doc:meta])* $name:ident: $reg:ident[$lo:literal; $w:tt];)*) => {
        impl KernelDescriptor {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> bit_fields!(@ty $w) {
                    bit_fields!(@get $w, (self.$reg as u32 >> $lo) & ((1u32 << $w) - 1))
                }
            )*
        }
    };
    (@ty 1) => { bool };
    (@ty $w:tt) => { u32 };
    (@get 1, $v:expr) => { $v != 0 };
    (@get $w:tt, $v:expr) => { $v };
}

bit_fields! {
    /// COMPUTE_PGM_RSRC2.USER_SGPR_COUNT.
    user_sgpr_count: compute_pgm_rsrc2[1; 5];
    enable_private_segment: compute_pgm_rsrc2[0; 1];
    workgroup_info_enabled: compute_pgm_rsrc2[10; 1];
    /// ENABLE_VGPR_WORKITEM_ID: 0 = x, 1 = x y, 2 = x y z.
    vgpr_workitem_id: compute_pgm_rsrc2[11; 2];
    enable_sgpr_private_segment_buffer: kernel_code_properties[0; 1];
    enable_sgpr_dispatch_ptr: kernel_code_properties[1; 1];
    enable_sgpr_queue_ptr: kernel_code_properties[2; 1];
    enable_sgpr_kernarg_segment_ptr: kernel_code_properties[3; 1];
    enable_sgpr_dispatch_id: kernel_code_properties[4; 1];
    enable_sgpr_flat_scratch_init: kernel_code_properties[5; 1];
    enable_sgpr_private_segment_size: kernel_code_properties[6; 1];
    wavefront_size32: kernel_code_properties[10; 1];
    uses_dynamic_stack: kernel_code_properties[11; 1];
    /// COMPUTE_PGM_RSRC1.FLOAT_DENORM_MODE_32 (3 = keep denormals).
    float_denorm_mode_32: compute_pgm_rsrc1[16; 2];
    float_denorm_mode_16_64: compute_pgm_rsrc1[18; 2];
    float_round_mode_32: compute_pgm_rsrc1[12; 2];
    float_round_mode_16_64: compute_pgm_rsrc1[14; 2];
    /// COMPUTE_PGM_RSRC1.ENABLE_IEEE_MODE (bit 23).
    ieee_mode: compute_pgm_rsrc1[23; 1];
}

/// One kernel argument from the metadata.
#[derive(Clone, Debug)]
pub struct ArgMeta {
    pub offset: u32,
    pub size: u32,
    pub value_kind: String,
}

/// One kernel of a code object.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: String,
    /// Byte address of the first instruction.
    pub code_addr: u64,
    pub code_size: u64,
    pub kd: KernelDescriptor,
    pub insts: Vec<Inst>,
    /// Instruction index by byte address.
    pub index: HashMap<u64, usize>,
    pub args: Vec<ArgMeta>,
    pub kernarg_segment_size: u32,
    pub group_segment_fixed_size: u32,
    pub wavefront_size: u32,
}

/// A loaded code object.
#[derive(Clone, Debug)]
pub struct CodeObject {
    pub arch: String,
    pub kernels: Vec<Kernel>,
}

impl CodeObject {
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

/// One kernel of [`decode_kernels`]: (name, code address, code size, instructions).
pub type DecodedKernel = (String, u64, u64, Vec<Inst>);

/// The code of each kernel symbol (`STT_FUNC` in `.text`), decoded.
/// Returns (name, address, size, instructions), or the first decode error.
pub fn decode_kernels(image: &[u8]) -> Result<Vec<DecodedKernel>, LoadError> {
    let file = ElfFile64::<Endianness>::parse(image).map_err(|e| LoadError(format!("not an ELF64 object: {e}")))?;
    let text = file.section_by_name(".text").ok_or_else(|| LoadError("no .text section".into()))?;
    let text_data = text.data().map_err(|e| LoadError(format!(".text: {e}")))?;
    let text_addr = text.address();
    let mut out = Vec::new();
    for sym in file.symbols() {
        if sym.kind() != SymbolKind::Text || sym.size() == 0 {
            continue;
        }
        let name = sym.name().map_err(|e| LoadError(format!("symbol name: {e}")))?.to_string();
        let (addr, size) = (sym.address(), sym.size());
        if addr < text_addr || addr + size > text_addr + text_data.len() as u64 {
            return Err(LoadError(format!("kernel {name} lies outside .text")));
        }
        let start = (addr - text_addr) as usize;
        let code = &text_data[start..start + size as usize];
        let insts =
            decode::decode_all(code, addr).map_err(|e: DecodeError| LoadError(format!("kernel {name}: {e}")))?;
        out.push((name, addr, size, insts));
    }
    out.sort_by_key(|k| k.1);
    Ok(out)
}

fn read_at<'a>(file: &ElfFile64<'a, Endianness>, addr: u64, len: u64) -> Option<&'a [u8]> {
    for sec in file.sections() {
        let (a, s) = (sec.address(), sec.size());
        if addr >= a && addr + len <= a + s {
            let d = sec.data().ok()?;
            let o = (addr - a) as usize;
            return d.get(o..o + len as usize);
        }
    }
    None
}

/// Loads a code object the way the runtime does: kernels, descriptors, metadata.
pub fn load(image: &[u8]) -> Result<CodeObject, LoadError> {
    let file = ElfFile64::<Endianness>::parse(image).map_err(|e| LoadError(format!("not an ELF64 object: {e}")))?;
    let header = file.elf_header();
    let endian = file.endian();
    if header.e_machine(endian) != object::elf::EM_AMDGPU {
        return Err(LoadError(format!("e_machine {} is not EM_AMDGPU", header.e_machine(endian))));
    }
    let metadata = read_metadata(&file)?;
    let kernels_code = decode_kernels(image)?;
    let mut syms = HashMap::new();
    for sym in file.symbols() {
        if let Ok(n) = sym.name() {
            syms.insert(n.to_string(), (sym.address(), sym.size()));
        }
    }
    let meta_kernels = metadata
        .as_map()
        .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("amdhsa.kernels")))
        .and_then(|(_, v)| v.as_array())
        .ok_or_else(|| LoadError("metadata has no amdhsa.kernels".into()))?;
    let arch = metadata
        .as_map()
        .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some("amdhsa.target")))
        .and_then(|(_, v)| v.as_str())
        .unwrap_or("")
        .to_string();
    let mut kernels = Vec::new();
    for mk in meta_kernels {
        let get = |key: &str| mk.as_map().and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v));
        let name = get(".name").and_then(|v| v.as_str()).ok_or_else(|| LoadError("kernel without .name".into()))?;
        let symbol = get(".symbol").and_then(|v| v.as_str()).unwrap_or("");
        let (kd_addr, kd_size) =
            *syms.get(symbol).ok_or_else(|| LoadError(format!("kernel {name}: no descriptor symbol {symbol:?}")))?;
        if kd_size != 64 {
            return Err(LoadError(format!("kernel {name}: descriptor {symbol} is {kd_size} bytes, not 64")));
        }
        let kd_bytes = read_at(&file, kd_addr, 64)
            .ok_or_else(|| LoadError(format!("kernel {name}: descriptor not in a section")))?;
        let kd = KernelDescriptor::parse(kd_bytes)?;
        let entry = (kd_addr as i64 + kd.kernel_code_entry_byte_offset) as u64;
        let (_, code_addr, code_size, insts) = kernels_code
            .iter()
            .find(|k| k.1 == entry)
            .cloned()
            .ok_or_else(|| LoadError(format!("kernel {name}: no code symbol at entry {entry:#x}")))?;
        let mut args = Vec::new();
        if let Some(list) = get(".args").and_then(|v| v.as_array()) {
            for a in list {
                let f = |key: &str| {
                    a.as_map().and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v))
                };
                args.push(ArgMeta {
                    offset: f(".offset").and_then(|v| v.as_u64()).unwrap_or(0) as u32,
                    size: f(".size").and_then(|v| v.as_u64()).unwrap_or(0) as u32,
                    value_kind: f(".value_kind").and_then(|v| v.as_str()).unwrap_or("").to_string(),
                });
            }
        }
        let index = insts.iter().enumerate().map(|(i, inst)| (inst.addr, i)).collect();
        let num = |key: &str| get(key).and_then(|v| v.as_u64()).unwrap_or(0) as u32;
        let wavefront_size = num(".wavefront_size");
        if wavefront_size != 32 || !kd.wavefront_size32() {
            return Err(LoadError(format!("kernel {name}: wavefront size {wavefront_size}: only wave32 is simulated")));
        }
        kernels.push(Kernel {
            name: name.to_string(),
            code_addr,
            code_size,
            kd,
            insts,
            index,
            args,
            kernarg_segment_size: num(".kernarg_segment_size"),
            group_segment_fixed_size: num(".group_segment_fixed_size"),
            wavefront_size,
        });
    }
    Ok(CodeObject { arch, kernels })
}

/// The msgpack document of the NT_AMDGPU_METADATA note.
fn read_metadata(file: &ElfFile64<Endianness>) -> Result<rmpv::Value, LoadError> {
    let endian = file.endian();
    for section in file.elf_section_table().iter() {
        if let Ok(Some(mut notes)) = section.notes(endian, file.data()) {
            while let Ok(Some(note)) = notes.next() {
                if note.name() == b"AMDGPU" && note.n_type(endian) == 32 {
                    let mut desc = note.desc();
                    return rmpv::decode::read_value(&mut desc).map_err(|e| LoadError(format!("metadata: {e}")));
                }
            }
        }
    }
    Err(LoadError("no NT_AMDGPU_METADATA note".into()))
}
