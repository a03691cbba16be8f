//! Checks a code object against the kernel list of the device crate: the one
//! place where "what the launchers will pack" meets "what the compiler built".
//! Used by `build.rs` (a failed audit fails the build) and by the loader.

use crate::code_object::{CodeObject, ExpectedArg, ExpectedKernel};
use kernels_device::args::{ArgKind, KernelSpec};

/// The metadata a kernel must have for the launcher of `spec` to be right:
/// its explicit arguments at the offsets and sizes of the packed argument buffer.
pub fn expected_kernel(spec: &KernelSpec) -> ExpectedKernel<'_> {
    let (offsets, _) = spec.layout();
    let args = spec
        .params
        .iter()
        .zip(offsets)
        .map(|(p, offset)| ExpectedArg {
            name: p.name,
            offset: offset as u32,
            size: p.kind.size() as u32,
            pointer: p.kind == ArgKind::Ptr,
        })
        .collect();
    ExpectedKernel { name: spec.name, args }
}

/// Audits `object` for every kernel in `specs`: present, wavefront 32, no scratch,
/// no dynamic stack, no spills, argument layout as packed by the launchers.
pub fn audit_against_kernels(object: &CodeObject, specs: &[KernelSpec]) -> Result<(), Vec<String>> {
    let expected: Vec<ExpectedKernel> = specs.iter().map(expected_kernel).collect();
    object.audit(&expected)
}
