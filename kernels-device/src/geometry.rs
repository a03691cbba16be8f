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
    /// Threads per workgroup (except for the table, below; the kernel takes any
    /// size that is whole waves).
    pub const WORKGROUP_SIZE: u32 = 256;
    /// Consecutive elements per thread (one 16-byte vector for 16-bit types, two for f32).
    pub const ELEMS_PER_THREAD: usize = 8;
    /// The launcher caps the grid here; a grid-stride loop covers larger `n`.
    pub const MAX_WORKGROUPS: u32 = 1 << 20;
    /// The largest `n` of one launch (2^60 elements). The kernel indexes in
    /// 64 bits, so the grid sets no bound; the bound is the indexing's: an
    /// element's byte offset (`index * size_of::<T>()`, at most 4 bytes an
    /// element) must stay below `isize::MAX`, as pointer offsets must, and the
    /// grid-stride loops form indices up to `n + TABLE_CHUNKS_IN_FLIGHT *
    /// stride` (f16's second group, loaded before the table loop, reaches
    /// `2 * TABLE_CHUNKS_IN_FLIGHT * stride`, below that bound as the table is
    /// used only when `n` is larger than one round of groups), with `stride`
    /// below 2^45 elements for any grid (at most 2^32
    /// workgroups of at most 1024 threads of 8 elements), which must not wrap
    /// 64 bits. 2^60 meets both with room (4 * 2^60 = 2^62; 2^60 + 5 * 2^45 <
    /// 2^61), and is beyond any memory (2^62 bytes of f32).
    pub const MAX_N: u64 = 1 << 60;
    const _: () = {
        let max_stride = (u32::MAX as u64) * 1024 * ELEMS_PER_THREAD as u64;
        assert!(MAX_N * 4 <= isize::MAX as u64, "byte offsets of n elements must not overflow isize");
        assert!(MAX_N + (TABLE_CHUNKS_IN_FLIGHT as u64 + 1) * max_stride < 1 << 61, "indices must not wrap");
    };

    /// bf16 at large `n`: each workgroup first writes xielu of every bf16 value
    /// whose magnitude lies in [2^TABLE_MIN_EXP, 2^(TABLE_MIN_EXP + TABLE_BINADES))
    /// into workgroup memory (both signs), then looks each element up there; a
    /// chunk with any value outside runs the arithmetic instead. The table's
    /// magnitudes start at these bf16 bits (2^-16: biased exponent 111).
    pub const TABLE_LO_BITS: u32 = ((127 + TABLE_MIN_EXP) as u32) << 7;
    /// Smallest exponent in the table.
    pub const TABLE_MIN_EXP: i32 = -16;
    /// Binades in the table, each of 128 bf16 values per sign.
    pub const TABLE_BINADES: u32 = 32;
    /// Entries per sign: a power of two, so the sign becomes one index bit.
    pub const TABLE_SPAN: u32 = TABLE_BINADES * 128;
    /// Entries (both signs), one bf16 each.
    pub const TABLE_ENTRIES: u32 = 2 * TABLE_SPAN;
    /// Workgroup memory of every bf16 launch, in bytes: the table.
    pub const BF16_WORKGROUP_MEM_BYTES: u32 = TABLE_ENTRIES * 2;
    /// f16 at large `n`: the table holds xielu of every f16 whose magnitude
    /// lies in [2^F16_TABLE_MIN_EXP, 16) (both signs; a chunk with any value
    /// outside runs the arithmetic, as in bf16). Its magnitudes start at these
    /// f16 bits.
    pub const F16_TABLE_LO_BITS: u32 = ((15 + F16_TABLE_MIN_EXP) as u32) << 10;
    /// Smallest exponent in the f16 table: each binade further down costs 2048
    /// entries to build and makes fewer chunks fall outside. Chosen by
    /// measurement on an H200 (docs/performance.md, "Measurements behind the
    /// device constants").
    pub const F16_TABLE_MIN_EXP: i32 = -11;
    /// Entries per sign: the magnitudes up to 16.0 (bits `0x4C00`).
    pub const F16_TABLE_SPAN: u32 = 0x4C00 - F16_TABLE_LO_BITS;
    /// Entries (both signs, positive first), one f16 each.
    pub const F16_TABLE_ENTRIES: u32 = 2 * F16_TABLE_SPAN;
    /// Workgroup memory of an f16 launch that uses the table, in bytes: 60 KiB,
    /// within an RDNA workgroup's 64 KiB (a CUDA launch opts in to more than
    /// 48 KiB; the CUDA backend does for every kernel).
    pub const F16_WORKGROUP_MEM_BYTES: u32 = F16_TABLE_ENTRIES * 2;
    const _: () = assert!(F16_WORKGROUP_MEM_BYTES <= 64 * 1024);
    /// The most workgroup memory a launch of the `T` instance asks for (the
    /// launcher's grids): bf16's table on every launch, f16's where its table
    /// is used, none for f32.
    pub const fn most_workgroup_mem_bytes<T: crate::num::Elem>() -> u32 {
        match T::NAME.as_bytes() {
            b"bf16" => BF16_WORKGROUP_MEM_BYTES,
            b"f16" => F16_WORKGROUP_MEM_BYTES,
            _ => 0,
        }
    }
    /// The table pays for itself only when each workgroup then looks up many
    /// elements: the kernel uses it when `n` is at least this many elements per
    /// workgroup of the launch ([`uses_table_grid`]).
    pub const TABLE_MIN_ELEMS_PER_WORKGROUP: u64 = 16 * TABLE_ENTRIES as u64;
    /// Whether a launch of `workgroups` over `n` elements is large enough for the
    /// table: the kernel's condition (with its dtype and parameters), and the
    /// launcher's for giving the f16 table's memory, so they cannot disagree.
    pub const fn uses_table_grid(n: u64, workgroups: u32) -> bool {
        n >= TABLE_MIN_ELEMS_PER_WORKGROUP * workgroups as u64
    }
    /// For such `n` the launcher starts this many workgroups per compute unit,
    /// each of [`TABLE_WORKGROUP_SIZE`] threads: every workgroup builds its own
    /// table, so few and large ones, each looping over many chunks. Both values
    /// were chosen by measurement on an H200. The figures and their runs are in
    /// docs/performance.md ("Measurements behind the device constants"), not
    /// here, so that this comment stays true when they are re-measured.
    pub const TABLE_WORKGROUPS_PER_CU: u32 = 1;
    /// Threads per workgroup of such launches (the kernel takes any size that
    /// is whole waves).
    pub const TABLE_WORKGROUP_SIZE: u32 = 512;
    /// Chunks a thread loads before it looks any of them up: each wave's group
    /// is this many 512-byte pieces in a row. 5 streams best on an H200, for
    /// reasons not understood: a measurement of that GPU, not a property of the
    /// kernel. The figures for 3 to 8 are in docs/performance.md ("Measurements
    /// behind the device constants"), with their runs, where re-measurements go.
    pub const TABLE_CHUNKS_IN_FLIGHT: usize = 5;
    const _: () = assert!(
        TABLE_SPAN.is_power_of_two() && TABLE_LO_BITS + TABLE_SPAN <= 0x7F80,
        "the table must be a power of two per sign, below infinity"
    );
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
    /// Rows up to this length run a second instance of the kernel
    /// (`add3_layer_norm_d4096_*`, the same code for at most [`SHORT_CHUNKS`]
    /// chunks): Cohere2's 4096 wide rows need 4 chunks, and a kernel that holds
    /// 4 in registers instead of 7 needs fewer of them, so more rows fit on
    /// each compute unit. The launcher picks it; the bits are the same.
    pub const SHORT_MAX_D: u32 = 4096;
    /// Chunks a thread owns at most in the short instance.
    pub const SHORT_CHUNKS: usize = (SHORT_MAX_D as usize).div_ceil(CHUNK_STRIDE);
    /// Chunks whose inputs a thread loads ahead of the chunk it adds (quad
    /// accesses only): chunk k's loads are issued before chunk k - AHEAD's
    /// x_new is stored, so AHEAD + 1 chunks' loads are in flight together.
    /// The full instance keeps 0 (the order before, not measured otherwise);
    /// the short one takes 2, three of its four chunks, which measured fastest
    /// on an H200 among those that ptxas compiles for every NVIDIA
    /// architecture without spilling at the bound below (3 spills for sm_80
    /// and sm_100). The figures are in docs/performance.md ("Measurements
    /// behind the device constants").
    pub const CHUNKS_AHEAD: usize = 0;
    /// [`CHUNKS_AHEAD`] of the short instance.
    pub const SHORT_CHUNKS_AHEAD: usize = 2;
    /// Symbol base of the short instance.
    pub const SHORT_KERNEL: &str = "add3_layer_norm_d4096";
    /// Workgroup-memory slots (f32): the 8 wave sums of the mean's pass, then
    /// the 8 of the variance's, in separate slots: a wave that has gone on to
    /// the variance never overwrites a wave sum another wave may still read.
    pub const SLOT_SUM: usize = 0;
    pub const SLOT_VAR: usize = WAVES as usize;
    /// Dynamic workgroup memory of one launch, in bytes.
    pub const WORKGROUP_MEM_BYTES: u32 = 2 * WAVES * 4;
    /// The most rows one launch takes: HIP refuses a grid of more than 2^32 - 1
    /// work-items along x, and there is one workgroup per row.
    pub const MAX_ROWS: u32 = u32::MAX / WORKGROUP_SIZE;
    /// NVIDIA only (the PTX's `.minnctapersm`), 16-bit types: workgroups each
    /// SM must be able to hold, which caps the registers per thread at
    /// 65536 / (n * 256), rounded down to a multiple of 8. Without a bound the
    /// row and its loads in flight take about 90 registers, two workgroups per
    /// SM, and the kernel waits on memory (an H200 at 25% occupancy, half the
    /// issue slots idle). Each value is the largest that ptxas compiles without
    /// spilling for every NVIDIA architecture from sm_80 to sm_121 (the CUDA
    /// backend refuses local memory; `cargo xtask ptx-spills`): 5 for the
    /// full kernel (48 registers; at 6, 40 registers, its bf16 spills for
    /// sm_120), 8 for the short one (32); on an H200 more per SM ran faster.
    /// The timings are in docs/performance.md ("Measurements behind the device
    /// constants"), with their runs, not here. f32, whose row takes twice the
    /// registers, has no bound (64 registers).
    pub const NVIDIA_MIN_WORKGROUPS_PER_SM_16BIT: u32 = 5;
    /// The same for the short instance.
    pub const NVIDIA_MIN_WORKGROUPS_PER_SM_16BIT_SHORT: u32 = 8;
}

/// Launch bounds of AMD code objects: (symbol, the most threads a workgroup of
/// it is launched with). The build writes each as the kernel's
/// `amdgpu-flat-work-group-size` (`1,size`), so the code object's
/// `.max_flat_workgroup_size` says it and HIP refuses a larger launch. Without
/// it LLVM budgets registers for 1024-thread workgroups: 128 VGPRs a lane on
/// gfx11-generic, where mamba1_scan's eight state columns a lane need about 180.
pub const AMDGPU_LAUNCH_BOUNDS: &[(&str, u32)] = &[
    ("mamba1_scan_f32", mamba1_scan::Mapping::AMD.workgroup_size()),
    ("mamba1_scan_f16", mamba1_scan::Mapping::AMD.workgroup_size()),
    ("mamba1_scan_bf16", mamba1_scan::Mapping::AMD.workgroup_size()),
];

/// Launch bounds written into the PTX (`.maxntid`, `.minnctapersm`) for the
/// named kernels: (symbol, workgroup size, workgroups per SM). They bound the
/// registers ptxas may give each thread; AMD code objects are not affected.
pub const NVIDIA_LAUNCH_BOUNDS: &[(&str, u32, u32)] = &[
    ("add3_layer_norm_f16", add3_layer_norm::WORKGROUP_SIZE, add3_layer_norm::NVIDIA_MIN_WORKGROUPS_PER_SM_16BIT),
    ("add3_layer_norm_bf16", add3_layer_norm::WORKGROUP_SIZE, add3_layer_norm::NVIDIA_MIN_WORKGROUPS_PER_SM_16BIT),
    (
        "add3_layer_norm_d4096_f16",
        add3_layer_norm::WORKGROUP_SIZE,
        add3_layer_norm::NVIDIA_MIN_WORKGROUPS_PER_SM_16BIT_SHORT,
    ),
    (
        "add3_layer_norm_d4096_bf16",
        add3_layer_norm::WORKGROUP_SIZE,
        add3_layer_norm::NVIDIA_MIN_WORKGROUPS_PER_SM_16BIT_SHORT,
    ),
];

/// `mamba1_scan`: a channel's state columns over [`lanes_per_channel`](mamba1_scan::Mapping::lanes_per_channel)
/// adjacent lanes, [`states_per_lane`](mamba1_scan::Mapping::states_per_lane) columns in each lane's
/// registers; the [`Mapping`](mamba1_scan::Mapping) is chosen per target.
pub mod mamba1_scan {
    use super::WAVE_SIZE;

    /// Up to this N a channel takes [`Mapping::lanes_small`] lanes; above it, twice as many.
    pub const SMALL_MAX_N: u32 = 16;
    /// The largest state size N. Larger N is refused.
    pub const MAX_N: u32 = 2 * SMALL_MAX_N;

    /// How a target runs the scan. Its N state columns are spread over
    /// `lanes_per_channel(n)` adjacent lanes, lane `l` of a channel holding columns
    /// `states_per_lane * l ..` in f32 registers for the whole sequence. Fewer
    /// columns a lane means more lanes, so more waves for the same channels, and a
    /// little more work per step (one more exchange level per halving). Which
    /// suits a target is a measurement (docs/performance.md, "mamba1_scan"): the
    /// kernel and the launcher both take it from here.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Mapping {
        /// State columns each lane carries.
        pub states_per_lane: u32,
        /// Waves per workgroup. Each wave stages its own inputs, so there is no
        /// barrier: the workgroup only groups waves onto a compute unit.
        pub waves_per_workgroup: u32,
        /// Chunks of [`UNROLL`] steps per iteration of the time loop. With 2, the
        /// two chunks' loaded values live in two sets of registers, which ptxas
        /// otherwise copies at the end of every chunk.
        pub chunks_per_iteration: u32,
        /// Whether the wave also stages its channels' dt and x in workgroup
        /// memory, each value loaded and widened once for the wave instead of
        /// once per lane, and writes bf16 values (of B and C too) as the top
        /// halves of floats whose low halves are zero, which widens them with no
        /// instruction.
        pub stages_dt_x: bool,
    }

    impl Mapping {
        /// AMD: eight columns a lane, a wave of 16 channels, two waves a
        /// workgroup, one chunk an iteration, dt and x loaded by each lane.
        /// gfx1151 has waves to spare; what bounds it is instructions per step.
        /// Its code objects stay as verified on the simulated gfx1151 (eight
        /// columns already take about 210 VGPRs).
        pub const AMD: Mapping =
            Mapping { states_per_lane: 8, waves_per_workgroup: 2, chunks_per_iteration: 1, stages_dt_x: false };
        /// NVIDIA: four columns a lane, a warp of 8 channels (twice AMD's warps:
        /// with AMD's mapping an H200 has less than one warp per scheduler and
        /// waits on each warp's chain of dependent instructions; two columns, four
        /// times the warps, were slower), one warp a workgroup, two chunks an
        /// iteration, dt and x staged.
        pub const NVIDIA: Mapping =
            Mapping { states_per_lane: 4, waves_per_workgroup: 1, chunks_per_iteration: 2, stages_dt_x: true };
        /// The CPU emulator: AMD's columns with NVIDIA's schedule, so that the
        /// bit-exact CPU tests cover both (two waves a workgroup, so that they
        /// also cover a wave's offset into workgroup memory).
        pub const EMULATOR: Mapping =
            Mapping { states_per_lane: 8, waves_per_workgroup: 2, chunks_per_iteration: 2, stages_dt_x: true };
        /// Every mapping a build compiles or a launcher uses.
        pub const ALL: [Mapping; 3] = [Mapping::AMD, Mapping::NVIDIA, Mapping::EMULATOR];
        /// The mapping of the code being compiled.
        pub const COMPILED: Mapping = if cfg!(target_arch = "nvptx64") {
            Mapping::NVIDIA
        } else if cfg!(target_arch = "amdgpu") {
            Mapping::AMD
        } else {
            Mapping::EMULATOR
        };

        /// Lanes of a channel for N <= [`SMALL_MAX_N`]: its columns, spread.
        pub const fn lanes_small(self) -> u32 {
            SMALL_MAX_N / self.states_per_lane
        }
        /// Lanes that carry one channel for state size `n`.
        pub const fn lanes_per_channel(self, n: u32) -> u32 {
            if n <= SMALL_MAX_N { self.lanes_small() } else { 2 * self.lanes_small() }
        }
        /// Channels per workgroup for state size `n`: grid x = `ceil(Dm / this)`, grid y = B.
        pub const fn channels_per_workgroup(self, n: u32) -> u32 {
            self.waves_per_workgroup * (WAVE_SIZE / self.lanes_per_channel(n))
        }
        /// Threads per workgroup.
        pub const fn workgroup_size(self) -> u32 {
            self.waves_per_workgroup * WAVE_SIZE
        }
        /// Floats of workgroup memory each wave stages [`UNROLL`] steps in, as
        /// f32: B and C (`[2][UNROLL][N]`, at the largest N), then, if it stages
        /// them, dt and x (`[2][channels][UNROLL]`, at the most channels a wave).
        pub const fn staged_floats_per_wave(self) -> u32 {
            let dt_x = if self.stages_dt_x { 2 * UNROLL as u32 * (WAVE_SIZE / self.lanes_small()) } else { 0 };
            2 * UNROLL as u32 * MAX_N + dt_x
        }
        /// Workgroup memory of a launch: one staging area per wave.
        pub const fn workgroup_mem_bytes(self) -> u32 {
            self.waves_per_workgroup * self.staged_floats_per_wave() * 4
        }
    }

    // Each mapping covers N = SMALL_MAX_N with lanes_small() lanes exactly: the
    // kernel's exchanges and unrolled loops take 2, 4 or 8 columns a lane, so
    // 2 to 8 lanes a channel, and twice that above SMALL_MAX_N.
    const _: () = {
        let maps = Mapping::ALL;
        let mut i = 0;
        while i < maps.len() {
            let m = maps[i];
            assert!(m.states_per_lane == 2 || m.states_per_lane == 4 || m.states_per_lane == 8);
            assert!(m.chunks_per_iteration == 1 || m.chunks_per_iteration == 2);
            assert!(m.waves_per_workgroup >= 1 && m.workgroup_size() <= 1024);
            i += 1;
        }
    };

    /// Time steps per iteration of the unrolled loop (inputs of all of them loaded
    /// first); `L % UNROLL` steps run one at a time after it.
    pub const UNROLL: usize = 8;
    /// The largest batch: grid y is B, and CUDA and HIP both allow 65535 there.
    pub const MAX_BATCH: u32 = 65535;
    /// The most workgroup memory of a launch, over every mapping (a device's
    /// launches use one of them).
    pub const MOST_WORKGROUP_MEM_BYTES: u32 = {
        let (mut most, mut i) = (0, 0);
        while i < Mapping::ALL.len() {
            let bytes = Mapping::ALL[i].workgroup_mem_bytes();
            if bytes > most {
                most = bytes;
            }
            i += 1;
        }
        most
    };
}

/// `moe_fc1_relu2`, `moe_down`, `moe_combine`: the routed experts of Nemotron-H.
///
/// One wave per output row, [`WAVES`](moe::WAVES) waves per workgroup, each wave
/// taking [`ROWS_PER_WAVE`](moe::ROWS_PER_WAVE) rows (interleaved, so the waves of a
/// workgroup stream adjacent rows at the same time); grid z = expert slot k. Lanes
/// stride over the row's packed words in quads of 4 words (one 16-byte load), and
/// the activation row (x or act, as f32) is staged once per workgroup in workgroup
/// memory in chunks of one quad's values, each chunk followed by [`PAD`](moe::PAD)
/// floats whose first holds the chunk's sum.
/// The router of the routed experts (`moe::router`).
pub mod moe_router {
    use super::WAVE_SIZE;

    /// Waves of one workgroup of `moe_router_logits`, which share its one router
    /// row: each takes every `WAVES_PER_ROW`-th run of 32 chunks, so a row of Din
    /// 2048 is two chunks a lane, one batch up to three 16-bit tokens. Eight waves
    /// (one chunk a lane) predicted 1.5-1.7x the instructions of four on the gfx1151
    /// model (each wave's sums of every token), with the same memory bound.
    pub const WAVES_PER_ROW: u32 = 4;
    /// Threads per workgroup of `moe_router_logits`.
    pub const LOGITS_WORKGROUP_SIZE: u32 = WAVES_PER_ROW * WAVE_SIZE;
    /// Threads per workgroup of `moe_topk`: one wave, one token.
    pub const TOPK_WORKGROUP_SIZE: u32 = WAVE_SIZE;
    /// The most tokens of one launch (the decode batch, or a speculative
    /// verification's tokens): each is a per-lane accumulator.
    pub const MAX_TOKENS: usize = 8;
    /// Workgroup memory of `moe_router_logits`: each wave's f32 sum of each token.
    pub const LOGITS_WORKGROUP_MEM_BYTES: u32 = WAVES_PER_ROW * MAX_TOKENS as u32 * 4;
    /// Values per aligned load of a router row (16 bytes of a 16-bit type).
    pub const CHUNK: u32 = 8;
    /// Bytes of loads a lane issues together before their first use (32
    /// VGPRs; twice as many spilled on gfx11-generic, whose 1024-thread
    /// budget is 128 VGPRs).
    pub const BATCH_BYTES: usize = 128;
    /// The most chunks of a batch.
    pub const MAX_BATCH: usize = 4;

    /// Chunks of the router row per lane in one batch for `tokens` tokens of
    /// `elem_bytes`-byte values: each chunk loads the row's and every token's
    /// values, all within [`BATCH_BYTES`] (one chunk at least).
    pub const fn batch(tokens: usize, elem_bytes: usize) -> usize {
        let chunks = BATCH_BYTES / (CHUNK as usize * elem_bytes) / (tokens + 1);
        if chunks == 0 {
            1
        } else if chunks > MAX_BATCH {
            MAX_BATCH
        } else {
            chunks
        }
    }

    /// `moe_router_logits`' workgroups for `n_experts` rows: one a row.
    pub const fn logits_workgroups(n_experts: u32) -> u32 {
        n_experts
    }
    /// The most experts: a lane of `moe_topk` holds at most 32 experts'
    /// probabilities in registers ([`TOPK_GROUP`] at a time).
    pub const MAX_EXPERTS: u32 = WAVE_SIZE * 32;
    /// The most experts chosen per token.
    pub const MAX_TOPK: u32 = 16;
    /// The experts of a lane of `moe_topk` come in groups of this many: its
    /// registers hold 1, 2, 4 or 8 groups, the fewest that cover `n_experts`
    /// (E 128 is one group, E 512 four).
    pub const TOPK_GROUP: u32 = 4;
    /// The groups of a lane of `moe_topk` for `n_experts`: 1, 2, 4 or 8.
    pub const fn topk_groups(n_experts: u32) -> u32 {
        let groups = n_experts.div_ceil(TOPK_GROUP * WAVE_SIZE);
        if groups <= 1 { 1 } else { groups.next_power_of_two() }
    }
    const _: () = assert!(topk_groups(MAX_EXPERTS) == 8);

    /// Workgroup memory of `moe_topk`: none (its probabilities stay in registers).
    pub const TOPK_WORKGROUP_MEM_BYTES: u32 = 0;
}

pub mod moe {
    use super::WAVE_SIZE;

    /// Waves (output rows in flight) per workgroup.
    pub const WAVES: u32 = 8;
    /// Threads per workgroup of `moe_fc1_relu2` and `moe_down`.
    pub const WORKGROUP_SIZE: u32 = WAVES * WAVE_SIZE;
    /// Rows each wave computes, one after the other.
    pub const ROWS_PER_WAVE: u32 = 4;
    /// Output rows per workgroup: wave `w` takes rows `w + WAVES * i`, i < ROWS_PER_WAVE.
    pub const ROWS_PER_WORKGROUP: u32 = WAVES * ROWS_PER_WAVE;
    /// u32 words per wide load: 4 (16 bytes).
    pub const QUAD_WORDS: u32 = 4;
    /// Quads per lane in one batch of loads (a batch is issued as a whole before
    /// its first quad is used). 3 fits Nemotron's fc1 rows (Din 2688 at 4 bits:
    /// 84 quads, at most 3 per lane) in one batch and keeps the two batches in
    /// flight within 80 registers on sm_90 (4 needs 96: 2 instead of 3
    /// workgroups per SM, slower on an H200: the figure is in docs/performance.md,
    /// "Measurements behind the device constants").
    pub const QUADS_PER_BATCH: usize = 3;
    /// Floats after each staged chunk: the chunk's sum, then padding. Chunks are
    /// `32 * QUAD_WORDS / bits` floats (128 or 64 bytes); the 16-byte pad makes
    /// the 8 lanes of each quarter-wave hit 8 distinct groups of 4 banks.
    pub const PAD: u32 = 4;
    /// Consecutive values each thread stages per pass.
    pub const STAGE_VALUES: u32 = 8;
    /// The longest row (Din for `moe_fc1_relu2`, Dff for `moe_down`): its staged
    /// copy (and the tensor-core schedule's 528 bytes) must fit in 64 KiB of
    /// workgroup memory (60.5 KiB at 8 bits).
    pub const MAX_COLS: u32 = 12288;
    /// Supported bits per value.
    pub const BITS: [u32; 2] = [4, 8];
    /// Supported group sizes.
    pub const GROUP_SIZES: [u32; 3] = [32, 64, 128];
    const _: () = assert!(BITS.len() == 2 && GROUP_SIZES.len() == 3, "row_layout lists them one by one");
    const _: () = {
        let mut i = 0;
        while i < GROUP_SIZES.len() {
            assert!(GROUP_SIZES[i].is_power_of_two(), "row_layout masks and shifts by the group size");
            i += 1;
        }
    };
    /// Threads per workgroup of `moe_combine` (one output element per thread).
    pub const COMBINE_WORKGROUP_SIZE: u32 = 256;
    /// Slots whose loads a thread of `moe_combine` issues together before
    /// adding them: K 8 (Qwen3) is one wait, not eight.
    pub const COMBINE_BATCH: usize = 8;
    /// The largest K (grid z).
    pub const MAX_K: u32 = 65535;
    /// The most tokens of one launch of the batch kernels (`moe_gateup_batch`,
    /// `moe_down_batch`, `moe_combine_batch`).
    pub const MAX_BATCH_TOKENS: u32 = 8;
    /// The most slots `m * k` of one batch launch (grid z): eight tokens of up
    /// to 64 experts, the range the batch launches are tested over.
    pub const MAX_BATCH_SLOTS: u32 = 512;
    const _: () = assert!(MAX_BATCH_SLOTS <= MAX_K);

    /// Values per u32 word: `32 / bits`.
    pub const fn values_per_word(bits: u32) -> u32 {
        32 / bits
    }

    /// Values per quad (one wide load, one staged chunk): 32 at 4 bits, 16 at 8 bits.
    pub const fn values_per_chunk(bits: u32) -> u32 {
        QUAD_WORDS * values_per_word(bits)
    }

    /// Floats of workgroup memory per staged chunk, sum and padding included.
    pub const fn chunk_stride(bits: u32) -> u32 {
        values_per_chunk(bits) + PAD
    }

    /// Floats of the staged row: `cols / values_per_chunk * chunk_stride`
    /// (`cols` a multiple of the group size). Both schedules stage one chunk
    /// per quad at [`staged_chunk`], with its sum at `+ values_per_chunk`.
    pub const fn staged_floats(cols: u32, bits: u32) -> u32 {
        cols / values_per_chunk(bits) * chunk_stride(bits)
    }

    /// Dynamic workgroup memory of `moe_fc1_relu2` / `moe_down` for rows of
    /// `cols` values at `bits` bits: the staged row, then what the
    /// tensor-core schedule adds ([`MMA_EXTRA_FLOATS`]; unused elsewhere).
    pub const fn workgroup_mem_bytes(cols: u32, bits: u32) -> u32 {
        (staged_floats(cols, bits) + MMA_EXTRA_FLOATS) * 4
    }

    // The tensor-core schedule (NVIDIA, `moe::tensor_cores`): a wave
    // multiplies a tile of MMA_ROWS rows by one `mma.m16n8k16` per 16 codes
    // of each row, over one of MMA_SLICES slices of the rows' blocks (slice
    // s takes blocks s, s + MMA_SLICES, ...).

    /// Rows of one tile: the M of `mma.m16n8k16`.
    pub const MMA_ROWS: u32 = 16;
    /// Tiles of a workgroup's rows.
    pub const MMA_TILES: u32 = ROWS_PER_WORKGROUP / MMA_ROWS;
    /// Waves that share a tile, each over a slice of its blocks (a block is 4
    /// quads of each row of the tile, one per lane of a fragment's row).
    pub const MMA_SLICES: u32 = WAVES / MMA_TILES;
    /// Quads of a row in one block: the 4 lanes that hold a row of an `mma`
    /// fragment take one quad each.
    pub const MMA_BLOCK_QUADS: u32 = 4;
    /// Floats after the staged row: 4 zeros (the fragments of lanes that hold
    /// no codes of theirs), then the partial sums of the slices,
    /// `[MMA_SLICES][ROWS_PER_WORKGROUP]`.
    pub const MMA_EXTRA_FLOATS: u32 = 4 + MMA_SLICES * ROWS_PER_WORKGROUP;
    const _: () = assert!(MMA_TILES * MMA_ROWS == ROWS_PER_WORKGROUP && MMA_SLICES * MMA_TILES == WAVES);

    /// Where the 4 zero floats of the tensor-core schedule start (16-byte
    /// aligned: every chunk stride is a multiple of 4 floats).
    pub const fn mma_zeros(cols: u32, bits: u32) -> u32 {
        staged_floats(cols, bits)
    }

    /// Where the slices' partial sums start, in floats.
    pub const fn mma_partials(cols: u32, bits: u32) -> u32 {
        staged_floats(cols, bits) + 4
    }
    const _: () = assert!(chunk_stride(BITS[0]).is_multiple_of(4) && chunk_stride(BITS[1]).is_multiple_of(4));
    const _: () = assert!(
        workgroup_mem_bytes(MAX_COLS, BITS[0]) <= 65536 && workgroup_mem_bytes(MAX_COLS, BITS[1]) <= 65536,
        "the longest row's workgroup memory must fit in 64 KiB"
    );
    /// The most workgroup memory of a `moe_fc1_relu2`, `moe_gateup` or
    /// `moe_down` launch: the longest row, at the bits that stage the most.
    pub const MOST_WORKGROUP_MEM_BYTES: u32 = {
        let (four, eight) = (workgroup_mem_bytes(MAX_COLS, BITS[0]), workgroup_mem_bytes(MAX_COLS, BITS[1]));
        if four > eight { four } else { eight }
    };

    /// Workgroups along x for `rows` output rows.
    pub const fn workgroups(rows: u32) -> u32 {
        rows.div_ceil(ROWS_PER_WORKGROUP)
    }

    // The layout of one expert's matrix `[rows, cols]`: packed words
    // `[rows, words_per_row]` (u32), scales and biases `[rows, groups_per_row]`.
    // The kernels index with these functions, so they take the group size as
    // its log2 where they run per value (a shift, not a division).

    /// The layout of one row of `cols` values: what the kernels index with.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct RowLayout {
        /// Packed u32 words per row: [`words_per_row`].
        pub words: u32,
        /// Scales (and biases) per row: [`groups_per_row`].
        pub groups: u32,
        /// log2(group size): [`group_shift`].
        pub group_shift: u32,
    }

    /// The layout of rows of `cols` values at `bits` bits with groups of
    /// `group_size`, or `None` where the kernels do not take them: `bits` not
    /// in [`BITS`], `group_size` not in [`GROUP_SIZES`], `cols` outside
    /// 1..=[`MAX_COLS`] or not a multiple of the group size (so also of the
    /// values per word). The kernels return without touching memory then.
    #[inline(always)]
    pub const fn row_layout(cols: u32, bits: u32, group_size: u32) -> Option<RowLayout> {
        if !(bits == BITS[0] || bits == BITS[1])
            || !(group_size == GROUP_SIZES[0] || group_size == GROUP_SIZES[1] || group_size == GROUP_SIZES[2])
        {
            return None;
        }
        // `group_size - 1` is a mask: every group size is a power of two.
        if cols == 0 || cols > MAX_COLS || cols & (group_size - 1) != 0 {
            return None;
        }
        let group_shift = group_shift(group_size);
        // Shifts, not divisions: nothing here can divide by zero.
        Some(RowLayout { words: words_per_row(cols, bits), groups: groups_per_row(cols, group_size), group_shift })
    }

    /// Where `moe_gateup` keeps its gate rows' totals in workgroup memory, in
    /// floats: after the staged row of `cols` values, in the space
    /// [`workgroup_mem_bytes`] reserves for the tensor-core schedule (which
    /// `moe_gateup` does not use), one float per row of the workgroup.
    pub const fn gate_totals(cols: u32, bits: u32) -> u32 {
        staged_floats(cols, bits)
    }
    const _: () =
        assert!(MMA_EXTRA_FLOATS >= ROWS_PER_WORKGROUP, "the gate totals fit in the space after the staged row");

    /// Bits per value of `moe_down6`: MLX's 6-bit codes, four in three bytes.
    pub const SIX_BITS: u32 = 6;
    /// Values of one unit of 6-bit codes: a lane's share of a row per step,
    /// 96 bits in three words, staged as one chunk of the 8-bit layout.
    pub const SIX_BIT_UNIT_VALUES: u32 = 16;
    /// Words of one unit of 6-bit codes.
    pub const SIX_BIT_UNIT_WORDS: u32 = SIX_BIT_UNIT_VALUES * SIX_BITS / 32;
    const _: () = assert!(SIX_BIT_UNIT_VALUES == values_per_chunk(8), "a unit is one staged chunk of the 8-bit layout");
    const _: () = assert!(GROUP_SIZES[0].is_multiple_of(SIX_BIT_UNIT_VALUES), "a unit's values lie in one group");

    /// The layout of rows of `cols` 6-bit values (`bits` must be [`SIX_BITS`])
    /// with groups of `group_size`, or `None` where `moe_down6` does not take
    /// them: the limits of [`row_layout`] otherwise.
    #[inline(always)]
    pub const fn row_layout_6bit(cols: u32, bits: u32, group_size: u32) -> Option<RowLayout> {
        if bits != SIX_BITS
            || !(group_size == GROUP_SIZES[0] || group_size == GROUP_SIZES[1] || group_size == GROUP_SIZES[2])
            || cols == 0
            || cols > MAX_COLS
            || cols & (group_size - 1) != 0
        {
            return None;
        }
        let group_shift = group_shift(group_size);
        Some(RowLayout { words: words_per_row(cols, bits), groups: groups_per_row(cols, group_size), group_shift })
    }

    /// Whether the kernels take rows of `cols` values at `bits` bits with
    /// groups of `group_size` (see [`row_layout`]).
    pub const fn supports(cols: u32, bits: u32, group_size: u32) -> bool {
        row_layout(cols, bits, group_size).is_some()
    }

    /// log2 of a group size of [`GROUP_SIZES`] (all powers of two).
    #[inline(always)]
    pub const fn group_shift(group_size: u32) -> u32 {
        group_size.trailing_zeros()
    }

    /// Packed u32 words per row of `cols` values: `cols * bits / 32` (the row
    /// stride of the weights, in words).
    #[inline(always)]
    pub const fn words_per_row(cols: u32, bits: u32) -> u32 {
        (cols * bits) >> 5
    }

    /// Scales (and biases) per row of `cols` values, for a group size of
    /// [`GROUP_SIZES`]: `cols / group_size` (the row stride of the scales).
    #[inline(always)]
    pub const fn groups_per_row(cols: u32, group_size: u32) -> u32 {
        cols >> group_shift(group_size)
    }

    /// The group (index into the row's scales) of word `word` of a row, with
    /// `group_shift` = [`group_shift`]`(group_size)`.
    #[inline(always)]
    pub const fn group_of_word(word: u32, bits: u32, group_shift: u32) -> u32 {
        (word * values_per_word(bits)) >> group_shift
    }

    /// The group of quad `quad` of a row (all its values lie in it, since
    /// every group size is at least [`values_per_chunk`]).
    #[inline(always)]
    pub const fn group_of_quad(quad: u32, bits: u32, group_shift: u32) -> u32 {
        (quad * values_per_chunk(bits)) >> group_shift
    }

    /// Where the staged activations of quad (chunk) `quad` start in workgroup
    /// memory, in floats; its sum follows at `+ values_per_chunk(bits)`.
    #[inline(always)]
    pub const fn staged_chunk(quad: u32, bits: u32) -> u32 {
        quad * chunk_stride(bits)
    }

    /// Where the staged activations of word `word` of a row start, in floats.
    #[inline(always)]
    pub const fn staged_word(word: u32, bits: u32) -> u32 {
        (word / QUAD_WORDS) * chunk_stride(bits) + (word % QUAD_WORDS) * values_per_word(bits)
    }
    // A quad never straddles two groups (group_of_quad): the smallest group
    // size holds the values of a quad at every supported width.
    const _: () = assert!(
        GROUP_SIZES[0] >= values_per_chunk(BITS[0]) && GROUP_SIZES[0] >= values_per_chunk(BITS[1]),
        "a quad's values must lie in one group"
    );
}

#[cfg(test)]
mod tests {
    use super::moe::*;

    #[test]
    fn moe_row_layout_and_offsets() {
        // Nemotron's fc1 rows: Din 2688 at 4 bits, groups of 64.
        let l = row_layout(2688, 4, 64).unwrap();
        assert_eq!(l, RowLayout { words: 336, groups: 42, group_shift: 6 });
        assert!(supports(2688, 8, 128) && supports(MAX_COLS, 8, 32));
        for (cols, bits, gs) in [(0, 4, 64), (MAX_COLS + 64, 4, 64), (2688 + 32, 4, 64), (2688, 2, 64), (2688, 4, 16)] {
            assert!(!supports(cols, bits, gs), "{cols} {bits} {gs}");
        }
        for bits in BITS {
            for q in 0..100 {
                // Word 4q starts quad q; word w of a quad is values_per_word further.
                assert_eq!(staged_word(QUAD_WORDS * q, bits), staged_chunk(q, bits));
                assert_eq!(staged_word(QUAD_WORDS * q + 3, bits), staged_chunk(q, bits) + 3 * values_per_word(bits));
                for gs in GROUP_SIZES {
                    let shift = group_shift(gs);
                    assert_eq!(group_of_quad(q, bits, shift), q * values_per_chunk(bits) / gs);
                    assert_eq!(group_of_word(QUAD_WORDS * q + 3, bits, shift), group_of_quad(q, bits, shift));
                }
            }
            assert_eq!(staged_floats(2688, bits), staged_chunk(2688 / values_per_chunk(bits), bits));
            assert_eq!(
                workgroup_mem_bytes(2688, bits),
                (mma_partials(2688, bits) + MMA_SLICES * ROWS_PER_WORKGROUP) * 4
            );
        }
    }
}
