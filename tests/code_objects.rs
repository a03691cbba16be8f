//! Tier 2: every embedded AMD code object, audited again from the bytes the
//! library ships, plus what the build's audit does not print: the floating-point
//! modes of every kernel descriptor (the bit-exact contracts need round to
//! nearest even and denormals kept, as on the host).

use mlxcel_amdgpu::audit::audit_against_kernels;
use mlxcel_amdgpu::code_object::{CodeObject, FloatModes};
use mlxcel_amdgpu::embedded::AMDGPU_CODE_OBJECTS;
use mlxcel_amdgpu::kernels_device::entry::KERNELS;

#[test]
fn every_embedded_object_passes_the_audit_and_keeps_ieee_float_modes() {
    assert!(!AMDGPU_CODE_OBJECTS.is_empty());
    for object in AMDGPU_CODE_OBJECTS {
        let parsed = CodeObject::parse(object.bytes).unwrap_or_else(|e| panic!("{}: {e}", object.processor));
        assert_eq!(parsed.processor(), object.processor);
        audit_against_kernels(&parsed, KERNELS).unwrap_or_else(|p| panic!("{}: {p:?}", object.processor));
        for k in &parsed.kernels {
            let modes = k
                .float_modes
                .unwrap_or_else(|| panic!("{} {}: kernel descriptor not readable", object.processor, k.name));
            assert!(modes.is_ieee_exact(), "{} {}: {modes:?}", object.processor, k.name);
        }
    }
}

#[test]
fn flushed_denormals_are_not_ieee_exact() {
    // The audit's check can fail: flush-to-zero (0) or round-toward-zero (3) modes.
    let exact = FloatModes { round_32: 0, round_16_64: 0, denorm_32: 3, denorm_16_64: 3 };
    assert!(exact.is_ieee_exact());
    assert!(!FloatModes { denorm_32: 0, ..exact }.is_ieee_exact());
    assert!(!FloatModes { round_16_64: 3, ..exact }.is_ieee_exact());
}
