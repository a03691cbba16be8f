//! Launch geometry and limits: the one source of truth, used by the kernels and
//! by the host launchers alike.

/// Lanes per wave. Every kernel is written for 32-lane waves (RDNA wave32 on
/// AMD, warps on NVIDIA); the build refuses wave64 targets.
pub const WAVE_SIZE: u32 = 32;
const _: () = assert!(WAVE_SIZE == 32, "the kernels assume 32-lane waves");

/// The probe kernel: one workgroup size, workgroup memory of one `u32` per lane.
pub mod probe {
    /// Threads per workgroup of the probe (two waves, so the barrier is exercised).
    pub const WORKGROUP_SIZE: u32 = 64;
    /// `u32` words the probe writes per lane.
    pub const WORDS_PER_LANE: usize = 17;
    /// Dynamic workgroup memory of the probe, in bytes.
    pub const WORKGROUP_MEM_BYTES: u32 = WORKGROUP_SIZE * 4;
}
