//! What the host launchers use, derived from `kernels_device::geometry` (the
//! constants the launchers in `host/kernels` use): the workgroup sizes, and the
//! workgroup memory each kernel is given at launch (HIP's `sharedMemBytes`),
//! which the code object's metadata cannot show (its `.group_segment_fixed_size`
//! counts static LDS only, and these kernels have none).

use kernels_device::geometry::{AMDGPU_LAUNCH_BOUNDS, add3_layer_norm, mamba1_scan, moe, probe, xielu};

/// Every workgroup size a launcher uses.
pub const LAUNCH_WORKGROUP_SIZES: &[u32] = &[
    probe::WORKGROUP_SIZE,
    xielu::WORKGROUP_SIZE,
    xielu::TABLE_WORKGROUP_SIZE,
    add3_layer_norm::WORKGROUP_SIZE,
    mamba1_scan::Mapping::AMD.workgroup_size(),
    moe::WORKGROUP_SIZE,
    moe::COMBINE_WORKGROUP_SIZE,
];

/// The largest workgroup any launcher uses: every kernel's
/// `.max_flat_workgroup_size` must be at least this.
pub const MAX_WORKGROUP_SIZE: u32 = max(LAUNCH_WORKGROUP_SIZES);

/// The bound [`AMDGPU_LAUNCH_BOUNDS`] gives `kernel`, which its code object's
/// `.max_flat_workgroup_size` must equal, if it names the kernel.
pub fn amdgpu_launch_bound(kernel: &str) -> Option<u32> {
    AMDGPU_LAUNCH_BOUNDS.iter().find(|(name, _)| *name == kernel).map(|&(_, size)| size)
}

/// The largest workgroup `kernel` is launched with: its launch bound, else
/// [`MAX_WORKGROUP_SIZE`].
pub fn max_workgroup_size(kernel: &str) -> u32 {
    amdgpu_launch_bound(kernel).unwrap_or(MAX_WORKGROUP_SIZE)
}

const fn max(values: &[u32]) -> u32 {
    let mut m = 0;
    let mut i = 0;
    while i < values.len() {
        if values[i] > m {
            m = values[i];
        }
        i += 1;
    }
    m
}

/// The workgroup memory a kernel is given at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchMem {
    /// None.
    None,
    /// This many bytes at every launch.
    Fixed(u32),
    /// An amount that depends on the shape of the launch, at most this many bytes.
    UpTo(u32),
}

/// The largest workgroup memory of the routed-expert GEMVs: the longest row
/// at the bit width whose staged chunks take the most.
const MOE_MAX_WORKGROUP_MEM: u32 = {
    let mut m = 0;
    let mut i = 0;
    while i < moe::BITS.len() {
        let bytes = moe::workgroup_mem_bytes(moe::MAX_COLS, moe::BITS[i]);
        if bytes > m {
            m = bytes;
        }
        i += 1;
    }
    m
};

/// Launch-sized workgroup memory by kernel symbol (exact) or symbol prefix
/// (ending in `_`). Kernels not listed get none.
pub const LAUNCH_WORKGROUP_MEM: &[(&str, LaunchMem)] = &[
    ("probe", LaunchMem::Fixed(probe::WORKGROUP_MEM_BYTES)),
    ("xielu_bf16", LaunchMem::Fixed(xielu::BF16_WORKGROUP_MEM_BYTES)),
    ("xielu_f16", LaunchMem::UpTo(xielu::F16_WORKGROUP_MEM_BYTES)),
    ("add3_layer_norm_", LaunchMem::Fixed(add3_layer_norm::WORKGROUP_MEM_BYTES)),
    ("mamba1_scan_", LaunchMem::Fixed(mamba1_scan::Mapping::AMD.workgroup_mem_bytes())),
    ("moe_fc1_relu2_", LaunchMem::UpTo(MOE_MAX_WORKGROUP_MEM)),
    ("moe_gateup_", LaunchMem::UpTo(MOE_MAX_WORKGROUP_MEM)),
    ("moe_down_", LaunchMem::UpTo(MOE_MAX_WORKGROUP_MEM)),
    // 6-bit rows are staged in the 8-bit layout.
    ("moe_down6_", LaunchMem::UpTo(MOE_MAX_WORKGROUP_MEM)),
];

/// The workgroup memory the launcher of `kernel` gives it.
pub fn workgroup_mem(kernel: &str) -> LaunchMem {
    LAUNCH_WORKGROUP_MEM
        .iter()
        .find(|(key, _)| if key.ends_with('_') { kernel.starts_with(key) } else { kernel == *key })
        .map_or(LaunchMem::None, |&(_, mem)| mem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_device::entry::KERNELS;

    #[test]
    fn every_entry_names_a_kernel() {
        for (key, _) in LAUNCH_WORKGROUP_MEM {
            assert!(
                KERNELS.iter().any(|k| if key.ends_with('_') { k.name.starts_with(key) } else { k.name == *key }),
                "{key} names no kernel of KERNELS"
            );
        }
    }

    #[test]
    fn launch_sizes() {
        assert_eq!(workgroup_mem("xielu_bf16"), LaunchMem::Fixed(xielu::BF16_WORKGROUP_MEM_BYTES));
        assert_eq!(workgroup_mem("xielu_f16"), LaunchMem::UpTo(xielu::F16_WORKGROUP_MEM_BYTES));
        assert_eq!(workgroup_mem("xielu_f32"), LaunchMem::None);
        assert_eq!(workgroup_mem("add3_layer_norm_d4096_f16"), LaunchMem::Fixed(add3_layer_norm::WORKGROUP_MEM_BYTES));
        assert_eq!(workgroup_mem("moe_combine_f32"), LaunchMem::None);
        assert_eq!(workgroup_mem("moe_down_bf16"), LaunchMem::UpTo(moe::workgroup_mem_bytes(moe::MAX_COLS, 8)));
        assert_eq!(workgroup_mem("probe_extra"), LaunchMem::None);
        assert_eq!(MAX_WORKGROUP_SIZE, xielu::TABLE_WORKGROUP_SIZE.max(256));
        assert_eq!(max_workgroup_size("mamba1_scan_bf16"), mamba1_scan::Mapping::AMD.workgroup_size());
        assert_eq!(workgroup_mem("mamba1_scan_f16"), LaunchMem::Fixed(mamba1_scan::Mapping::AMD.workgroup_mem_bytes()));
        assert_eq!(amdgpu_launch_bound("xielu_f16"), None);
        assert_eq!(max_workgroup_size("xielu_f16"), MAX_WORKGROUP_SIZE);
        // Within the 64 KiB an RDNA workgroup may have.
        const { assert!(MOE_MAX_WORKGROUP_MEM <= 65536) };
    }
}
