//! The AMD GPU code objects of mlxcel-amdgpu: reading them, checking them
//! against the launchers, and summarizing them (the crate `gpu-builder` builds them).
//!
//! - [`elf`]: the ELF reader (header, notes, symbols);
//! - [`metadata`]: the `NT_AMDGPU_METADATA` decoder, into typed kernel descriptors;
//! - [`launch`]: what the launchers use (workgroup sizes, launch-sized workgroup
//!   memory), from `kernels_device::geometry`;
//! - [`audit`]: the rules a code object must meet for the launchers to be right;
//! - [`summary`]: the resource table printed by `mlxcel-amdgpu inspect`.
//!
//! [`CodeObject::parse`] puts the first two together. Every malformed input
//! (truncated, not ELF, wrong machine, no metadata, malformed MessagePack,
//! missing keys, out-of-range values) gives a [`CodeObjectError`] that says
//! what was wrong; nothing here panics on input. Std only, apart from `object`,
//! `rmpv` and `kernels-device` (the kernel list and launch geometry).

use std::fmt;

pub mod audit;
pub mod elf;
pub mod launch;
pub mod metadata;
pub mod summary;
#[cfg(test)]
mod testutil;

pub use audit::{ExpectedArg, ExpectedKernel, audit_against_kernels, expected_kernel};
pub use elf::{
    AMDGPU_NOTE_NAME, EF_AMDGPU_MACH, ELFOSABI_AMDGPU_HSA, EM_AMDGPU, KERNEL_DESCRIPTOR_SIZE, NT_AMDGPU_METADATA,
};
pub use metadata::{ArgInfo, FloatModes, KernelInfo};

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

/// Why a code object could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeObjectError(pub String);

impl fmt::Display for CodeObjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid AMDGPU code object: {}", self.0)
    }
}

impl std::error::Error for CodeObjectError {}

pub(crate) fn err<T>(msg: impl Into<String>) -> Result<T, CodeObjectError> {
    Err(CodeObjectError(msg.into()))
}

impl CodeObject {
    /// Parses a code object image.
    pub fn parse(bytes: &[u8]) -> Result<CodeObject, CodeObjectError> {
        let info = elf::read(bytes)?;
        let meta = metadata::decode(&info.metadata_note)?;
        let mut kernels = meta.kernels;
        for k in &mut kernels {
            let found = info.descriptors.iter().find(|d| d.name == k.symbol);
            k.has_descriptor_symbol = found.is_some();
            k.float_modes = found.and_then(|d| d.bytes.as_ref()).and_then(|b| FloatModes::from_descriptor(b));
        }
        Ok(CodeObject {
            target: meta.target,
            mach: info.e_flags & EF_AMDGPU_MACH,
            abi_version: info.abi_version,
            metadata_version: meta.version,
            kernels,
            os_abi: info.os_abi,
            e_flags: info.e_flags,
            undefined_symbols: info.undefined_symbols,
        })
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{Elf, encode, probe_elf, probe_metadata};

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
        assert_eq!(k, &{
            let mut m = metadata::decode(&encode(&probe_metadata(), false)).unwrap().kernels.remove(0);
            m.has_descriptor_symbol = true;
            m
        });
        assert!(co.kernel("nope").is_none());
        assert!(co.undefined_symbols.is_empty());
    }

    #[test]
    fn no_descriptor_without_sections() {
        let mut elf = Elf::probe(encode(&probe_metadata(), false));
        elf.segment_only = true;
        let co = CodeObject::parse(&elf.build()).unwrap();
        assert_eq!(co.kernels.len(), 1);
        assert!(!co.kernels[0].has_descriptor_symbol);
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
        co.os_abi = 0;
        assert_eq!(co.code_object_version(), None);
    }

    #[test]
    fn truncated_and_corrupted_objects_are_errors_not_panics() {
        let elf = probe_elf();
        for len in 0..elf.len() {
            assert!(CodeObject::parse(&elf[..len]).is_err(), "prefix of {len} bytes parsed");
        }
        for i in 0..elf.len() {
            for x in [0xff, 0x80, 0x01] {
                let mut bad = elf.clone();
                bad[i] ^= x;
                let _ = CodeObject::parse(&bad);
            }
        }
    }

    #[test]
    fn error_display() {
        let e = CodeObject::parse(&[]).unwrap_err();
        assert_eq!(e.to_string(), "invalid AMDGPU code object: input is empty");
        let _: &dyn std::error::Error = &e;
    }
}
