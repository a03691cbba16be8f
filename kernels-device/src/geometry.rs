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

/// `xielu`: any grid gives the same bits; this is the one the launcher uses.
pub mod xielu {
    /// Threads per workgroup.
    pub const WORKGROUP_SIZE: u32 = 256;
    /// Consecutive elements per thread (one 16-byte vector for 16-bit types, two for f32).
    pub const ELEMS_PER_THREAD: usize = 8;
    /// The launcher caps the grid here; a grid-stride loop covers larger `n`.
    pub const MAX_WORKGROUPS: u32 = 1 << 20;
}

/// `add3_layer_norm`: the geometry is fixed by the bit-exact contract.
pub mod add3_layer_norm {
    /// One workgroup of exactly 256 lanes (8 waves of 32) per row.
    pub const WORKGROUP_SIZE: u32 = 256;
    /// Waves per workgroup.
    pub const WAVES: u32 = WORKGROUP_SIZE / super::WAVE_SIZE;
    /// Thread `t` owns elements `CHUNK_STRIDE * k + 4 * t + j`, j in 0..4.
    pub const CHUNK_STRIDE: usize = 4 * WORKGROUP_SIZE as usize;
    /// The largest row length; larger rows are refused by the launcher.
    pub const MAX_D: u32 = 6656;
    /// Chunks of 4 a thread owns at most: `ceil(MAX_D / 1024)` = 7, so 28 elements.
    pub const CHUNKS: usize = (MAX_D as usize).div_ceil(CHUNK_STRIDE);
    /// Workgroup-memory slots (f32): the 8 wave sums, the mean, then the
    /// 8 variance sums and their total, in separate slots so that no value is
    /// overwritten while another wave may still read it.
    pub const SLOT_SUM: usize = 0;
    pub const SLOT_MEAN: usize = 8;
    pub const SLOT_VAR: usize = 16;
    pub const SLOT_VAR_TOTAL: usize = 24;
    /// Dynamic workgroup memory of one launch, in bytes.
    pub const WORKGROUP_MEM_BYTES: u32 = 32 * 4;
}
