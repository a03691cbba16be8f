//! Typed launchers: one per kernel. Each validates every argument before it
//! touches the device, finds the kernel for the dtype with [`Device::kernel`]
//! (the same lookup as the availability predicates, so the two cannot
//! disagree), packs the arguments and launches on the caller's stream.
//!
//! Launchers take raw device pointers (as the C ABI does) and are `unsafe`: the
//! caller guarantees the buffers hold the sizes the arguments describe. Safe
//! wrappers over [`DeviceBuffer`]s check those sizes too.

pub mod add3_layer_norm;
pub mod mamba1_scan;
pub mod moe;
pub mod xielu;

use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceBuffer};

/// The kernel symbol of `base` for `dtype`: `xielu_bf16`.
pub fn symbol(base: &str, dtype: Dtype) -> String {
    format!("{base}_{}", dtype.name())
}

/// A device pointer argument must be non-null and aligned to `align` bytes.
pub(crate) fn check_ptr(argument: &'static str, ptr: u64, align: usize) -> Result<()> {
    if ptr == 0 {
        return Err(Error::invalid(argument, "is a null pointer"));
    }
    if !ptr.is_multiple_of(align as u64) {
        return Err(Error::invalid(argument, format!("pointer {ptr:#x} is not aligned to {align} bytes")));
    }
    Ok(())
}

/// A buffer argument of a safe wrapper must hold at least `elems` elements of `dtype`.
pub(crate) fn check_len(argument: &'static str, buf: &DeviceBuffer<u8>, elems: usize, dtype: Dtype) -> Result<()> {
    let need = elems.checked_mul(dtype.size()).ok_or_else(|| Error::invalid(argument, "size overflows"))?;
    if buf.len() < need {
        return Err(Error::invalid(
            argument,
            format!("holds {} bytes, needs {need} ({elems} {dtype} elements)", buf.len()),
        ));
    }
    Ok(())
}

/// The kernel `base` for `dtype` on `device`, through the lookup the availability
/// predicates use, so a launch fails exactly when its predicate says false.
pub(crate) fn kernel_for(device: &Device, base: &str, dtype: Dtype) -> Result<crate::runtime::Kernel> {
    device.kernel(&symbol(base, dtype))
}
