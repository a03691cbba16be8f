//! Launch geometry and the packed kernel argument buffer.

pub use kernels_device::args::ArgValue;
use kernels_device::args::{KernelSpec, MAX_PARAMS};

use crate::error::{Error, Result};

/// Writes `value`'s little-endian bytes at `at` (8 bytes for pointers and
/// u64, 4 for the others), each size a constant, so no call to memcpy.
fn write_value(bytes: &mut [u8], at: usize, value: ArgValue) {
    match value {
        ArgValue::Ptr(v) | ArgValue::U64(v) => bytes[at..at + 8].copy_from_slice(&v.to_le_bytes()),
        ArgValue::U32(v) => bytes[at..at + 4].copy_from_slice(&v.to_le_bytes()),
        ArgValue::F32(v) => bytes[at..at + 4].copy_from_slice(&v.to_le_bytes()),
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

/// Argument bytes, aligned as the widest argument (8 bytes).
#[derive(Clone, Debug)]
#[repr(C, align(8))]
struct Aligned([u8; 8 * MAX_PARAMS]);

/// The argument buffer of one launch, laid out as the code object's metadata
/// says (each argument aligned to its size, in order), which the build audits.
/// Fixed arrays of [`MAX_PARAMS`] entries: packing a launch allocates nothing
/// (it is on every call's path).
#[derive(Clone, Debug)]
pub struct PackedArgs {
    /// The packed bytes (no argument is wider than 8).
    bytes: Aligned,
    len: usize,
    /// Offset of each argument, for backends that take a pointer per argument.
    offsets: [usize; MAX_PARAMS],
    count: usize,
}

impl PackedArgs {
    /// Packs `values` for `spec`, positionally: the `i`th value is the `i`th
    /// parameter's (a family's `values()`, derived from the declaration that
    /// also gives `spec`, is in that order). A count or a kind that does not
    /// match is a defect of the caller ([`Error::Internal`]), never sent.
    pub fn pack(spec: &KernelSpec, values: &[ArgValue]) -> Result<PackedArgs> {
        if spec.params.len() > MAX_PARAMS {
            return Err(Error::Internal(format!(
                "kernel {} takes {} arguments, more than MAX_PARAMS ({MAX_PARAMS})",
                spec.name,
                spec.params.len()
            )));
        }
        if values.len() != spec.params.len() {
            return Err(Error::Internal(format!(
                "kernel {} takes {} arguments, the launcher passed {}",
                spec.name,
                spec.params.len(),
                values.len()
            )));
        }
        let (layout, len) = spec.layout();
        let mut packed =
            PackedArgs { bytes: Aligned([0; 8 * MAX_PARAMS]), len, offsets: [0; MAX_PARAMS], count: values.len() };
        for (i, ((param, &value), offset)) in spec.params.iter().zip(values).zip(layout).enumerate() {
            if param.kind != value.kind() {
                return Err(Error::Internal(format!(
                    "kernel {} argument `{}` is {:?}, the launcher passed {:?}",
                    spec.name, param.name, param.kind, value
                )));
            }
            write_value(&mut packed.bytes.0, offset, value);
            packed.offsets[i] = offset;
        }
        Ok(packed)
    }

    /// The packed buffer.
    pub fn as_ptr(&self) -> *const u8 {
        self.bytes.0.as_ptr()
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Pointers to each argument inside the buffer (CUDA's `kernelParams`):
    /// the first [`Self::count`] entries; the rest are null.
    pub fn arg_pointers(&self) -> [*mut std::ffi::c_void; MAX_PARAMS] {
        let mut out = [std::ptr::null_mut(); MAX_PARAMS];
        for (p, &o) in out.iter_mut().zip(&self.offsets[..self.count]) {
            *p = unsafe { self.as_ptr().add(o) } as *mut std::ffi::c_void;
        }
        out
    }

    /// The number of arguments.
    pub fn count(&self) -> usize {
        self.count
    }
}

/// A launch's packed arguments in storage of their own, with the array of
/// pointers to each argument (`kernelParams`) beside them. Used where a
/// runtime may read the arguments after the launch call has returned: a
/// kernel node of a HIP graph, which CLR keeps by pointer. Boxed, so the
/// pointers stay valid wherever the owner moves.
pub struct OwnedArgs {
    packed: PackedArgs,
    pointers: [*mut std::ffi::c_void; MAX_PARAMS],
}

// SAFETY: the pointers only point into `packed`, which the box owns; nothing
// mutates either once built.
unsafe impl Send for OwnedArgs {}
unsafe impl Sync for OwnedArgs {}

impl OwnedArgs {
    pub fn new(packed: &PackedArgs) -> Box<OwnedArgs> {
        let mut owned = Box::new(OwnedArgs { packed: packed.clone(), pointers: [std::ptr::null_mut(); MAX_PARAMS] });
        owned.pointers = owned.packed.arg_pointers();
        owned
    }

    /// `kernelParams` for `hipModuleLaunchKernel`, `hipKernelNodeParams` or
    /// `cuLaunchKernel`: one pointer per argument, valid while `self` lives.
    pub fn kernel_params(&self) -> *mut *mut std::ffi::c_void {
        self.pointers.as_ptr() as *mut *mut std::ffi::c_void
    }

    /// The packed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.packed.bytes.0[..self.packed.len]
    }
}

impl Drop for OwnedArgs {
    /// Overwrites the arguments before their memory is freed, so that a graph
    /// still reading them after their owner let go gets pointers that fault
    /// instead of stale ones that happen to work.
    fn drop(&mut self) {
        for b in self.packed.bytes.0.iter_mut() {
            // SAFETY: a valid, exclusively borrowed byte; volatile so the
            // store is not dropped as dead.
            unsafe { std::ptr::write_volatile(b, 0xA5) };
        }
        for p in self.pointers.iter_mut() {
            unsafe { std::ptr::write_volatile(p, std::ptr::without_provenance_mut(0xA5A5_A5A5_A5A5_A5A5)) };
        }
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
    fn every_kernel_is_packed_at_its_layout_offsets() {
        for spec in kernels_device::entry::KERNELS {
            let values: Vec<ArgValue> = spec
                .params
                .iter()
                .enumerate()
                .map(|(i, p)| match p.kind {
                    kernels_device::args::ArgKind::Ptr => ArgValue::Ptr(0x1000 + i as u64),
                    kernels_device::args::ArgKind::U64 => ArgValue::U64(i as u64),
                    kernels_device::args::ArgKind::U32 => ArgValue::U32(i as u32),
                    kernels_device::args::ArgKind::F32 => ArgValue::F32(i as f32),
                })
                .collect();
            let packed = PackedArgs::pack(spec, &values).unwrap();
            let (offsets, len) = spec.layout();
            assert_eq!(packed.len(), len, "{}", spec.name);
            let bytes = unsafe { std::slice::from_raw_parts(packed.as_ptr(), packed.len()) };
            for ((offset, &value), &p) in offsets.zip(&values).zip(&packed.arg_pointers()) {
                assert_eq!(p as *const u8, unsafe { packed.as_ptr().add(offset) }, "{}", spec.name);
                // The expected bytes straight from the value, not through write_value.
                let want = match value {
                    ArgValue::Ptr(v) | ArgValue::U64(v) => v.to_le_bytes().to_vec(),
                    ArgValue::U32(v) => v.to_le_bytes().to_vec(),
                    ArgValue::F32(v) => v.to_le_bytes().to_vec(),
                };
                assert_eq!(&bytes[offset..offset + want.len()], &want[..], "{}", spec.name);
            }
        }
    }

    #[test]
    fn an_argument_of_another_kind_is_refused() {
        let mut values = add3_args().values();
        values.swap(6, 7); // h (a pointer) <-> rows (a u32)
        let err = PackedArgs::pack(&add3_layer_norm_f32::SPEC, &values).unwrap_err();
        assert!(matches!(&err, Error::Internal(m) if m.contains("argument `h` is Ptr")), "{err}");
    }

    #[test]
    fn a_missing_argument_is_refused() {
        let values = add3_args().values();
        let err = PackedArgs::pack(&add3_layer_norm_f32::SPEC, &values[..9]).unwrap_err();
        assert!(matches!(err, Error::Internal(_)));
    }

    #[test]
    fn owned_args_point_into_their_own_bytes() {
        let packed = PackedArgs::pack(&add3_layer_norm_f32::SPEC, &add3_args().values()).unwrap();
        let owned = OwnedArgs::new(&packed);
        let bytes = unsafe { std::slice::from_raw_parts(packed.as_ptr(), packed.len()) };
        assert_eq!(owned.bytes(), bytes);
        let params = unsafe { std::slice::from_raw_parts(owned.kernel_params(), packed.count()) };
        let (offsets, _) = add3_layer_norm_f32::SPEC.layout();
        for (p, offset) in params.iter().zip(offsets) {
            assert_eq!(*p as *const u8, unsafe { owned.bytes().as_ptr().add(offset) });
        }
        // x_new (the sixth argument) through its pointer.
        assert_eq!(unsafe { *(params[5] as *const u64) }, 80);
    }
}
