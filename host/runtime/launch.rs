//! Launch geometry and the packed kernel argument buffer.

pub use kernels_device::args::ArgValue;
use kernels_device::args::KernelSpec;

use crate::error::{Error, Result};

/// The little-endian bytes of an argument value (8 bytes; the first
/// `kind().size()` are the value).
fn bytes_of(value: ArgValue) -> [u8; 8] {
    let mut out = [0u8; 8];
    match value {
        ArgValue::Ptr(v) | ArgValue::U64(v) => out.copy_from_slice(&v.to_le_bytes()),
        ArgValue::U32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
        ArgValue::F32(v) => out[..4].copy_from_slice(&v.to_le_bytes()),
    }
    out
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
    /// Packs `values` for `spec`: the values come by name, and each must be
    /// the parameter of that name at that position, of that kind. A mismatch
    /// is a defect of the launcher ([`Error::Internal`]), never sent.
    pub fn pack(spec: &KernelSpec, values: &[(&str, ArgValue)]) -> Result<PackedArgs> {
        if values.len() != spec.params.len() {
            return Err(Error::Internal(format!(
                "kernel {} takes {} arguments, the launcher passed {}",
                spec.name,
                spec.params.len(),
                values.len()
            )));
        }
        let (offsets, len) = spec.layout();
        let offsets: Vec<usize> = offsets.collect();
        let mut bytes = vec![0u8; len];
        for ((param, &(name, value)), &offset) in spec.params.iter().zip(values).zip(&offsets) {
            if param.name != name {
                return Err(Error::Internal(format!(
                    "kernel {}: the launcher passed `{name}` where the kernel takes `{}`",
                    spec.name, param.name
                )));
            }
            if param.kind != value.kind() {
                return Err(Error::Internal(format!(
                    "kernel {} argument `{}` is {:?}, the launcher passed {:?}",
                    spec.name, param.name, param.kind, value
                )));
            }
            let size = param.kind.size();
            bytes[offset..offset + size].copy_from_slice(&bytes_of(value)[..size]);
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

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_device::entry::{Add3LayerNormArgs, add3_layer_norm_f32};

    fn add3_args() -> Add3LayerNormArgs {
        Add3LayerNormArgs { a: 16, b: 32, x: 48, w: 64, bias: 0, x_new: 80, h: 96, rows: 2, d: 8, eps: 1e-5 }
    }

    #[test]
    fn arguments_are_packed_at_the_declared_offsets() {
        let packed = PackedArgs::pack(&add3_layer_norm_f32::SPEC, &add3_args().values()).unwrap();
        let bytes = unsafe { std::slice::from_raw_parts(packed.as_ptr(), packed.len()) };
        // x_new is the sixth pointer (offset 40), h the seventh (48), rows at 56.
        assert_eq!(&bytes[40..48], &80u64.to_le_bytes());
        assert_eq!(&bytes[48..56], &96u64.to_le_bytes());
        assert_eq!(&bytes[56..60], &2u32.to_le_bytes());
        assert_eq!(packed.len(), 68);
    }

    #[test]
    fn two_same_typed_arguments_swapped_are_refused() {
        let mut values = add3_args().values();
        values.swap(5, 6); // x_new <-> h: same kind, same size
        let err = PackedArgs::pack(&add3_layer_norm_f32::SPEC, &values).unwrap_err();
        assert!(matches!(&err, Error::Internal(m) if m.contains("`h` where the kernel takes `x_new`")), "{err}");
    }

    #[test]
    fn a_missing_argument_is_refused() {
        let values = add3_args().values();
        let err = PackedArgs::pack(&add3_layer_norm_f32::SPEC, &values[..9]).unwrap_err();
        assert!(matches!(err, Error::Internal(_)));
    }
}
