//! Test helpers: a minimal MessagePack writer (so tests choose the integer
//! encoding) and a minimal ELF64 writer for synthetic code objects.

use crate::elf::{ELFOSABI_AMDGPU_HSA, EM_AMDGPU, NT_AMDGPU_METADATA};
use object::elf;

/// The message of `r`'s error; panics, naming `what`, when it succeeded.
fn err_message<T: std::fmt::Debug>(what: &str, r: Result<T, crate::CodeObjectError>) -> String {
    match r {
        Ok(v) => panic!("{what} unexpectedly succeeded: {v:?}"),
        Err(e) => e.0,
    }
}

/// The error of reading `bytes` as a code object ([`crate::elf::read`]).
pub(crate) fn read_err(bytes: &[u8]) -> String {
    err_message("read", crate::elf::read(bytes))
}

/// The error of decoding `bytes` as metadata ([`crate::metadata::decode`]).
pub(crate) fn decode_err(bytes: &[u8]) -> String {
    err_message("decode", crate::metadata::decode(bytes))
}

// --- A minimal MessagePack writer, so tests can choose the integer encoding.

pub(crate) enum Mp {
    U(u64),
    I(i64),
    B(bool),
    S(&'static str),
    A(Vec<Mp>),
    M(Vec<(&'static str, Mp)>),
    Raw(Vec<u8>),
}

pub(crate) fn mp(v: &Mp, ints_as_i64: bool, out: &mut Vec<u8>) {
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

pub(crate) fn arg(offset: u64, size: u64, kind: &'static str) -> Mp {
    Mp::M(vec![(".offset", Mp::U(offset)), (".size", Mp::U(size)), (".value_kind", Mp::S(kind))])
}

pub(crate) fn named_arg(name: &'static str, offset: u64, size: u64, kind: &'static str) -> Mp {
    Mp::M(vec![
        (".name", Mp::S(name)),
        (".offset", Mp::U(offset)),
        (".size", Mp::U(size)),
        (".value_kind", Mp::S(kind)),
    ])
}

pub(crate) fn kernel_map(name: &'static str, symbol: &'static str, args: Vec<Mp>) -> Vec<(&'static str, Mp)> {
    vec![
        (".args", Mp::A(args)),
        (".group_segment_fixed_size", Mp::U(0)),
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

pub(crate) fn probe_args() -> Vec<Mp> {
    vec![
        Mp::M(vec![
            (".address_space", Mp::S("global")),
            (".name", Mp::S("out")),
            (".offset", Mp::U(0)),
            (".size", Mp::U(8)),
            (".value_kind", Mp::S("global_buffer")),
        ]),
        named_arg("n", 8, 4, "by_value"),
        arg(16, 4, "hidden_block_count_x"),
        arg(20, 4, "hidden_block_count_y"),
    ]
}

pub(crate) fn metadata_with(kernels: Vec<Vec<(&'static str, Mp)>>) -> Mp {
    Mp::M(vec![
        ("amdhsa.kernels", Mp::A(kernels.into_iter().map(Mp::M).collect())),
        ("amdhsa.target", Mp::S("amdgcn-amd-amdhsa--gfx1151")),
        ("amdhsa.version", Mp::A(vec![Mp::U(1), Mp::U(2)])),
    ])
}

pub(crate) fn probe_metadata() -> Mp {
    metadata_with(vec![kernel_map("probe", "probe.kd", probe_args())])
}

pub(crate) fn encode(v: &Mp, ints_as_i64: bool) -> Vec<u8> {
    let mut out = Vec::new();
    mp(v, ints_as_i64, &mut out);
    out
}

// --- A minimal ELF64 writer.

pub(crate) struct Elf<'a> {
    pub(crate) machine: u16,
    /// (owner, type, descriptor)
    pub(crate) notes: Vec<(&'a [u8], u32, Vec<u8>)>,
    /// (name, st_type, st_size)
    pub(crate) symbols: Vec<(&'a str, u8, u64)>,
    /// Notes in a PT_NOTE segment only, and no section headers.
    pub(crate) segment_only: bool,
    /// Names of undefined (imported) symbols.
    pub(crate) undefined: Vec<&'a str>,
}

impl<'a> Elf<'a> {
    pub(crate) fn probe(metadata: Vec<u8>) -> Self {
        Elf {
            machine: EM_AMDGPU,
            notes: vec![(b"AMDGPU", NT_AMDGPU_METADATA, metadata)],
            symbols: vec![("probe", elf::STT_FUNC, 756), ("probe.kd", elf::STT_OBJECT, 64)],
            segment_only: false,
            undefined: vec![],
        }
    }

    pub(crate) fn build(&self) -> Vec<u8> {
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
        for name in &self.undefined {
            u32le(&mut syms, strtab.len() as u32);
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            syms.push(elf::STB_GLOBAL << 4);
            syms.push(0);
            u16le(&mut syms, 0);
            u64le(&mut syms, 0);
            u64le(&mut syms, 0);
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

pub(crate) fn probe_elf() -> Vec<u8> {
    Elf::probe(encode(&probe_metadata(), false)).build()
}
