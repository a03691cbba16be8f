//! Launch geometry and the packed kernel argument buffer.

use kernels_device::args::{ArgKind, KernelSpec};

use crate::error::{Error, Result};

/// One kernel argument value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgValue {
    /// A device pointer.
    Ptr(u64),
    U32(u32),
    U64(u64),
    F32(f32),
}

impl ArgValue {
    fn kind(self) -> ArgKind {
        match self {
            ArgValue::Ptr(_) => ArgKind::Ptr,
            ArgValue::U32(_) => ArgKind::U32,
            ArgValue::U64(_) => ArgKind::U64,
            ArgValue::F32(_) => ArgKind::F32,
        }
    }

    fn bytes(self) -> [u8; 8] {
        let mut out = [0u8; 8];
        match self {
            ArgValue::Ptr(v) | ArgValue::U64(v) => out.copy_from_slice(&v.to_le_bytes()),
            ArgValue::U32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
            ArgValue::F32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
        }
        out
    }
}

/// Grid and workgroup of a launch: `grid` workgroups along x, y, z of
/// `workgroup_size` threads each (one-dimensional workgroups), plus the dynamic
/// workgroup memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchDims {
    pub grid: [u32; 3],
    pub workgroup_size: u32,
    pub workgroup_mem_bytes: u32,
}

impl LaunchDims {
    /// Whether the grid is empty (nothing to launch).
    pub fn is_empty(&self) -> bool {
        self.grid.contains(&0)
    }
}

/// The argument buffer of one launch, laid out as the code object's metadata
/// says (each argument aligned to its size, in order), which the build audits.
#[derive(Clone, Debug)]
pub struct PackedArgs {
    /// The packed bytes (8-byte aligned storage).
    words: Vec<u64>,
    len: usize,
    /// Offset of each argument, for backends that take a pointer per argument.
    offsets: Vec<usize>,
}

impl PackedArgs {
    /// Packs `values` for `spec`, refusing a count or kind that does not match.
    pub fn pack(spec: &KernelSpec, values: &[ArgValue]) -> Result<PackedArgs> {
        if values.len() != spec.params.len() {
            return Err(Error::CodeObject(format!(
                "kernel {} takes {} arguments, the launcher passed {}",
                spec.name,
                spec.params.len(),
                values.len()
            )));
        }
        let (offsets, len) = spec.layout();
        let offsets: Vec<usize> = offsets.collect();
        let mut bytes = vec![0u8; len];
        for ((param, value), &offset) in spec.params.iter().zip(values).zip(&offsets) {
            if param.kind != value.kind() {
                return Err(Error::CodeObject(format!(
                    "kernel {} argument `{}` is {:?}, the launcher passed {:?}",
                    spec.name, param.name, param.kind, value
                )));
            }
            let size = param.kind.size();
            bytes[offset..offset + size].copy_from_slice(&value.bytes()[..size]);
        }
        let mut words = vec![0u64; len.div_ceil(8)];
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            words[i] = u64::from_le_bytes(w);
        }
        Ok(PackedArgs { words, len, offsets })
    }

    /// The packed buffer.
    pub fn as_ptr(&self) -> *const u8 {
        self.words.as_ptr() as *const u8
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointers to each argument inside the buffer (CUDA's `kernelParams`).
    pub fn arg_pointers(&self) -> Vec<*mut std::ffi::c_void> {
        self.offsets.iter().map(|&o| unsafe { self.as_ptr().add(o) } as *mut std::ffi::c_void).collect()
    }
}
