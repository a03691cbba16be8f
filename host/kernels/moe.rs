//! Launchers of `moe_fc1_relu2`, `moe_down` and `moe_combine` (spec/kernels.md
//! section 4): the squared-ReLU routed experts of Nemotron-H over MLX affine
//! quantized weights, for one token.
//!
//! Shapes (`T` is the activation dtype; `E = n_experts`, `K = k`):
//!
//! | buffer | type | shape |
//! |---|---|---|
//! | `x` | T | `[Din]` |
//! | `idx` | u32 | `[K]` expert ids |
//! | `scores` | f32 | `[K]` router weights |
//! | `w1` | u32 | `[E, Dff, Din*bits/32]` |
//! | `s1`, `b1` | T | `[E, Dff, Din/gs]` |
//! | `w2` | u32 | `[E, Din, Dff*bits/32]` |
//! | `s2`, `b2` | T | `[E, Din, Dff/gs]` |
//! | `act` | f32 | `[K, Dff]` |
//! | `part` | f32 | `[K, Din]` |
//! | `out` | T | `[Din]` |
//! | `status` | u32 | one word, or null |
//!
//! **Status.** An expert id `idx[k] >= E` is never used to address memory: the
//! kernels write NaN to that slot's rows of `act` and `part` (so the combined
//! output is NaN) and, when `status` is not null, store `1 + k` for the *first*
//! such slot k (deterministic, no atomics). Nothing is stored when every id is in
//! range, so the caller zeroes `status` before the launch and reads it after.
//! Callers that hold `idx` on the host can refuse bad ids up front with
//! [`check_expert_ids`].
//!
//! **Scratch.** [`routed_forward`] keeps `act` and `part` (f32) in one caller
//! buffer of [`scratch_bytes`] bytes: `act` at offset 0, `part` at
//! [`part_offset`] (the end of `act` rounded up to 256 bytes). Nemotron, K = 6:
//! 44,544 + 64,512 = 109,056 bytes.
//!
//! **Speed** (NVIDIA H200, CUDA backend, `bench_nemotron_bandwidth` in
//! `tests/moe.rs`: Nemotron shape with all 128 experts, bf16, every launch on a
//! different set of 6 experts so the weights come from HBM; microseconds per
//! launch in a stream of back-to-back launches, where even the trivial
//! `moe_combine` takes 3.3 us): 4 bits: fc1_relu2 13.9 us (16.9 MB, 1.2 TB/s),
//! down 14.6 us, routed forward 31.6 us; 8 bits: fc1_relu2 15.8 us (31.9 MB,
//! 2.0 TB/s), down 18.4 us. Same run: a device copy 4.26 TB/s, cuBLAS bf16
//! GEMV of the same rows (4x the bytes) 3.2-3.3 TB/s. Twice the bytes at 8 bits
//! cost only 13% more time, so these kernels are bound by instruction issue and
//! latency (one row per wave, ~4 instructions per weight), not yet by bandwidth.

use kernels_device::geometry::moe::{
    BITS, COMBINE_WORKGROUP_SIZE, GROUP_SIZES, MAX_COLS, MAX_K, WORKGROUP_SIZE, values_per_word, workgroup_mem_bytes,
    workgroups,
};

use super::{check_ptr, kernel_for, symbol};
use crate::dtype::Dtype;
use crate::error::{Error, Result};
use crate::runtime::{ArgValue, Device, DeviceBuffer, Kernel, LaunchDims, Stream};

/// Kernel names without the dtype suffix.
pub const FC1_KERNEL: &str = "moe_fc1_relu2";
pub const DOWN_KERNEL: &str = "moe_down";
pub const COMBINE_KERNEL: &str = "moe_combine";

/// Whether the whole routed-expert forward (all three kernels) for `dtype` can
/// run on `device`.
pub fn available(device: &Device, dtype: Dtype) -> bool {
    [FC1_KERNEL, DOWN_KERNEL, COMBINE_KERNEL].iter().all(|k| device.is_available(&symbol(k, dtype)))
}

/// The shape and quantization format of one routed-expert layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeShape {
    /// Experts in the stacks `w1`, `w2` (E).
    pub n_experts: u32,
    /// Expert slots of the token (K, the top-k).
    pub k: u32,
    /// Hidden size (Din).
    pub din: u32,
    /// Expert intermediate size (Dff).
    pub dff: u32,
    /// Bits per weight: 4 or 8.
    pub bits: u32,
    /// Columns per scale and bias: 32, 64 or 128.
    pub group_size: u32,
}

impl MoeShape {
    /// Nemotron-3-Nano-30B-A3B: Din 2688, Dff 1856, E 128, K 6, 4 bits, gs 64.
    pub const NEMOTRON: MoeShape = MoeShape { n_experts: 128, k: 6, din: 2688, dff: 1856, bits: 4, group_size: 64 };

    /// Checks every limit; the error names the field and the limit.
    pub fn validate(&self) -> Result<()> {
        if !BITS.contains(&self.bits) {
            return Err(Error::invalid("bits", format!("{} is not supported; use 4 or 8", self.bits)));
        }
        if !GROUP_SIZES.contains(&self.group_size) {
            return Err(Error::invalid(
                "group_size",
                format!("{} is not supported; use 32, 64 or 128", self.group_size),
            ));
        }
        if self.n_experts == 0 {
            return Err(Error::invalid("n_experts", "is 0; there must be at least one expert"));
        }
        if self.k == 0 || self.k > MAX_K {
            return Err(Error::invalid("k", format!("{} is outside 1..={MAX_K}", self.k)));
        }
        let vpw = values_per_word(self.bits);
        for (name, v) in [("din", self.din), ("dff", self.dff)] {
            if v == 0 || v > MAX_COLS {
                return Err(Error::invalid(
                    name,
                    format!("{v} is outside 1..={MAX_COLS} (the staged row must fit in 64 KiB of workgroup memory)"),
                ));
            }
            if v % self.group_size != 0 {
                return Err(Error::invalid(
                    name,
                    format!("{v} is not a multiple of the group size {}", self.group_size),
                ));
            }
            if v % vpw != 0 {
                return Err(Error::invalid(
                    name,
                    format!("{v} is not a multiple of {vpw} values per u32 word at {} bits", self.bits),
                ));
            }
        }
        // Every element count, and its size in bytes, must fit in 64 bits (the
        // kernels address with 64-bit offsets) and in this host's usize.
        for (name, n) in [("w1", self.matrix_words(self.dff, self.din)), ("w2", self.matrix_words(self.din, self.dff))]
        {
            n.and_then(|n| n.checked_mul(4))
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| Error::invalid(name, "size overflows"))?;
        }
        Ok(())
    }

    /// u32 words of a stack `[E, rows, cols*bits/32]`, if it does not overflow.
    fn matrix_words(&self, rows: u32, cols: u32) -> Option<u64> {
        (self.n_experts as u64).checked_mul(rows as u64)?.checked_mul(cols as u64 * self.bits as u64 / 32)
    }

    /// u32 words of `w1` `[E, Dff, Din*bits/32]`.
    pub fn w1_words(&self) -> usize {
        (self.n_experts as usize) * (self.dff as usize) * (self.din as usize * self.bits as usize / 32)
    }

    /// Elements of `s1` and of `b1` `[E, Dff, Din/gs]`.
    pub fn w1_groups(&self) -> usize {
        (self.n_experts as usize) * (self.dff as usize) * (self.din / self.group_size) as usize
    }

    /// u32 words of `w2` `[E, Din, Dff*bits/32]`.
    pub fn w2_words(&self) -> usize {
        (self.n_experts as usize) * (self.din as usize) * (self.dff as usize * self.bits as usize / 32)
    }

    /// Elements of `s2` and of `b2` `[E, Din, Dff/gs]`.
    pub fn w2_groups(&self) -> usize {
        (self.n_experts as usize) * (self.din as usize) * (self.dff / self.group_size) as usize
    }
}

/// Device pointers of one quantized expert stack: packed words, scales, biases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantizedPointers {
    pub w: u64,
    pub scales: u64,
    pub biases: u64,
}

/// The launch geometry of `moe_fc1_relu2`: one wave per row of Dff, grid z = K.
pub fn fc1_dims(shape: &MoeShape) -> LaunchDims {
    LaunchDims {
        grid: [workgroups(shape.dff), 1, shape.k],
        workgroup_size: WORKGROUP_SIZE,
        workgroup_mem_bytes: workgroup_mem_bytes(shape.din, shape.bits),
    }
}

/// The launch geometry of `moe_down`: one wave per row of Din, grid z = K.
pub fn down_dims(shape: &MoeShape) -> LaunchDims {
    LaunchDims {
        grid: [workgroups(shape.din), 1, shape.k],
        workgroup_size: WORKGROUP_SIZE,
        workgroup_mem_bytes: workgroup_mem_bytes(shape.dff, shape.bits),
    }
}

/// The launch geometry of `moe_combine`: one thread per element of `out`.
pub fn combine_dims(din: u32) -> LaunchDims {
    LaunchDims {
        grid: [din.div_ceil(COMBINE_WORKGROUP_SIZE), 1, 1],
        workgroup_size: COMBINE_WORKGROUP_SIZE,
        workgroup_mem_bytes: 0,
    }
}

fn check_quantized(names: [&'static str; 3], p: QuantizedPointers, dtype: Dtype) -> Result<()> {
    check_ptr(names[0], p.w, 4)?;
    check_ptr(names[1], p.scales, dtype.size())?;
    check_ptr(names[2], p.biases, dtype.size())
}

fn check_status(status: u64) -> Result<()> {
    if status != 0 { check_ptr("status", status, 4) } else { Ok(()) }
}

fn fc1_args(x: u64, idx: u64, w1: QuantizedPointers, act: u64, shape: &MoeShape, status: u64) -> [ArgValue; 13] {
    [
        ArgValue::Ptr(x),
        ArgValue::Ptr(idx),
        ArgValue::Ptr(w1.w),
        ArgValue::Ptr(w1.scales),
        ArgValue::Ptr(w1.biases),
        ArgValue::Ptr(act),
        ArgValue::U32(shape.n_experts),
        ArgValue::U32(shape.k),
        ArgValue::U32(shape.din),
        ArgValue::U32(shape.dff),
        ArgValue::U32(shape.bits),
        ArgValue::U32(shape.group_size),
        ArgValue::Ptr(status),
    ]
}

#[allow(clippy::too_many_arguments)]
fn down_args(
    idx: u64,
    w2: QuantizedPointers,
    act: u64,
    scores: u64,
    part: u64,
    shape: &MoeShape,
    status: u64,
) -> [ArgValue; 14] {
    [
        ArgValue::Ptr(idx),
        ArgValue::Ptr(w2.w),
        ArgValue::Ptr(w2.scales),
        ArgValue::Ptr(w2.biases),
        ArgValue::Ptr(act),
        ArgValue::Ptr(scores),
        ArgValue::Ptr(part),
        ArgValue::U32(shape.n_experts),
        ArgValue::U32(shape.k),
        ArgValue::U32(shape.din),
        ArgValue::U32(shape.dff),
        ArgValue::U32(shape.bits),
        ArgValue::U32(shape.group_size),
        ArgValue::Ptr(status),
    ]
}

fn combine_args(part: u64, out: u64, k: u32, din: u32) -> [ArgValue; 4] {
    [ArgValue::Ptr(part), ArgValue::Ptr(out), ArgValue::U32(k), ArgValue::U32(din)]
}

/// `act[k, f] = relu(sum_i x[i] * w1[idx[k], f, i])^2` (f32) for every slot k.
///
/// # Safety
/// The pointers are device pointers of `device` to buffers of the shapes in the
/// module documentation; `status` may be 0 (null).
#[allow(clippy::too_many_arguments)]
pub unsafe fn fc1_relu2(
    device: &Device,
    dtype: Dtype,
    x: u64,
    idx: u64,
    w1: QuantizedPointers,
    act: u64,
    shape: &MoeShape,
    status: u64,
    stream: Stream,
) -> Result<()> {
    let kernel = kernel_for(device, FC1_KERNEL, dtype)?;
    shape.validate()?;
    check_ptr("x", x, dtype.size())?;
    check_ptr("idx", idx, 4)?;
    check_quantized(["w1", "s1", "b1"], w1, dtype)?;
    check_ptr("act", act, 4)?;
    check_status(status)?;
    unsafe { device.launch(&kernel, fc1_dims(shape), &fc1_args(x, idx, w1, act, shape, status), stream) }
}

/// `part[k, h] = scores[k] * sum_f act[k, f] * w2[idx[k], h, f]` (f32) for every slot k.
///
/// # Safety
/// As for [`fc1_relu2`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn down(
    device: &Device,
    dtype: Dtype,
    idx: u64,
    w2: QuantizedPointers,
    act: u64,
    scores: u64,
    part: u64,
    shape: &MoeShape,
    status: u64,
    stream: Stream,
) -> Result<()> {
    let kernel = kernel_for(device, DOWN_KERNEL, dtype)?;
    shape.validate()?;
    check_ptr("idx", idx, 4)?;
    check_quantized(["w2", "s2", "b2"], w2, dtype)?;
    check_ptr("act", act, 4)?;
    check_ptr("scores", scores, 4)?;
    check_ptr("part", part, 4)?;
    check_status(status)?;
    unsafe { device.launch(&kernel, down_dims(shape), &down_args(idx, w2, act, scores, part, shape, status), stream) }
}

/// `out[h] = T(sum_k part[k, h])`: the sum in f32 over k ascending, one rounding.
///
/// # Safety
/// `part` holds `[k, din]` f32, `out` `[din]` elements of `dtype`, on `device`.
pub unsafe fn combine(
    device: &Device,
    dtype: Dtype,
    part: u64,
    out: u64,
    k: u32,
    din: u32,
    stream: Stream,
) -> Result<()> {
    let kernel = kernel_for(device, COMBINE_KERNEL, dtype)?;
    check_combine(dtype, part, out, k, din)?;
    unsafe { device.launch(&kernel, combine_dims(din), &combine_args(part, out, k, din), stream) }
}

fn check_combine(dtype: Dtype, part: u64, out: u64, k: u32, din: u32) -> Result<()> {
    if k == 0 || k > MAX_K {
        return Err(Error::invalid("k", format!("{k} is outside 1..={MAX_K}")));
    }
    if din == 0 {
        return Err(Error::invalid("din", "is 0"));
    }
    (k as u64)
        .checked_mul(din as u64)
        .and_then(|n| n.checked_mul(4))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| Error::invalid("part", "size overflows"))?;
    check_ptr("part", part, 4)?;
    check_ptr("out", out, dtype.size())
}

/// Bytes of the f32 scratch of [`routed_forward`]: `act [K, Dff]` at offset 0,
/// then `part [K, Din]` at [`part_offset`]. Panics only if the size overflows
/// usize (impossible for shapes that [`MoeShape::validate`] accepts).
pub fn scratch_bytes(k: u32, din: u32, dff: u32) -> usize {
    part_offset(k, dff) + k as usize * din as usize * 4
}

/// Byte offset of `part` in the scratch: the end of `act`, rounded up to 256 bytes.
pub fn part_offset(k: u32, dff: u32) -> usize {
    (k as usize * dff as usize * 4).next_multiple_of(256)
}

/// Device pointers of one [`routed_forward`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoutedPointers {
    pub x: u64,
    pub idx: u64,
    pub scores: u64,
    pub w1: QuantizedPointers,
    pub w2: QuantizedPointers,
    /// `[Din]` of `dtype`.
    pub out: u64,
    /// f32 scratch of `scratch_len` bytes, at least [`scratch_bytes`].
    pub scratch: u64,
    pub scratch_len: usize,
    /// One u32 or 0 (see the module documentation).
    pub status: u64,
}

/// The whole routed-expert forward, `out = T(sum_k scores[k] * down_k(relu(fc1_k(x))^2))`:
/// enqueues `moe_fc1_relu2`, `moe_down` and `moe_combine`, in that order, on
/// `stream`, with `act` and `part` in the caller's scratch. Everything is checked
/// (all three kernels available, every argument) before the first launch.
///
/// # Safety
/// As for [`fc1_relu2`]; `scratch` is a device buffer of `scratch_len` bytes
/// that nothing else uses until the stream has run these kernels.
pub unsafe fn routed_forward(
    device: &Device,
    dtype: Dtype,
    p: RoutedPointers,
    shape: &MoeShape,
    stream: Stream,
) -> Result<()> {
    let kernels: [Kernel; 3] = [
        kernel_for(device, FC1_KERNEL, dtype)?,
        kernel_for(device, DOWN_KERNEL, dtype)?,
        kernel_for(device, COMBINE_KERNEL, dtype)?,
    ];
    shape.validate()?;
    check_ptr("x", p.x, dtype.size())?;
    check_ptr("idx", p.idx, 4)?;
    check_ptr("scores", p.scores, 4)?;
    check_quantized(["w1", "s1", "b1"], p.w1, dtype)?;
    check_quantized(["w2", "s2", "b2"], p.w2, dtype)?;
    check_ptr("out", p.out, dtype.size())?;
    check_ptr("scratch", p.scratch, 4)?;
    check_status(p.status)?;
    let need = scratch_bytes(shape.k, shape.din, shape.dff);
    if p.scratch_len < need {
        return Err(Error::invalid(
            "scratch",
            format!("holds {} bytes, needs {need} (act [K, Dff] and part [K, Din] in f32)", p.scratch_len),
        ));
    }
    let act = p.scratch;
    let part = p.scratch + part_offset(shape.k, shape.dff) as u64;
    unsafe {
        device.launch(&kernels[0], fc1_dims(shape), &fc1_args(p.x, p.idx, p.w1, act, shape, p.status), stream)?;
        device.launch(
            &kernels[1],
            down_dims(shape),
            &down_args(p.idx, p.w2, act, p.scores, part, shape, p.status),
            stream,
        )?;
        device.launch(&kernels[2], combine_dims(shape.din), &combine_args(part, p.out, shape.k, shape.din), stream)
    }
}

/// Refuses an expert id that is not below `n_experts`, for callers that hold
/// `idx` on the host (the kernels themselves report through `status`).
pub fn check_expert_ids(idx: &[u32], n_experts: u32) -> Result<()> {
    match idx.iter().enumerate().find(|&(_, &e)| e >= n_experts) {
        Some((k, &e)) => Err(Error::invalid("idx", format!("idx[{k}] = {e} is not below n_experts = {n_experts}"))),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Safe wrappers over byte buffers
// ---------------------------------------------------------------------------

/// A byte buffer argument must hold `elems` elements of `elem_bytes` bytes each.
fn check_bytes(
    argument: &'static str,
    buf: &DeviceBuffer<u8>,
    elems: usize,
    elem_bytes: usize,
    what: &str,
) -> Result<()> {
    let need = elems.checked_mul(elem_bytes).ok_or_else(|| Error::invalid(argument, "size overflows"))?;
    if buf.len() < need {
        return Err(Error::invalid(
            argument,
            format!("holds {} bytes, needs {need} ({elems} {what} elements)", buf.len()),
        ));
    }
    Ok(())
}

/// The byte buffers of one quantized expert stack.
#[derive(Clone, Copy)]
pub struct QuantizedBuffers<'a> {
    pub w: &'a DeviceBuffer<u8>,
    pub scales: &'a DeviceBuffer<u8>,
    pub biases: &'a DeviceBuffer<u8>,
}

impl QuantizedBuffers<'_> {
    fn check(&self, names: [&'static str; 3], words: usize, groups: usize, dtype: Dtype) -> Result<QuantizedPointers> {
        check_bytes(names[0], self.w, words, 4, "u32")?;
        check_bytes(names[1], self.scales, groups, dtype.size(), dtype.name())?;
        check_bytes(names[2], self.biases, groups, dtype.size(), dtype.name())?;
        Ok(QuantizedPointers { w: self.w.ptr(), scales: self.scales.ptr(), biases: self.biases.ptr() })
    }
}

fn status_ptr(status: Option<&mut DeviceBuffer<u8>>) -> Result<u64> {
    match status {
        Some(s) => {
            check_bytes("status", s, 1, 4, "u32")?;
            Ok(s.ptr())
        }
        None => Ok(0),
    }
}

/// [`fc1_relu2`] over byte buffers, checking their sizes.
#[allow(clippy::too_many_arguments)]
pub fn run_fc1_relu2(
    device: &Device,
    dtype: Dtype,
    x: &DeviceBuffer<u8>,
    idx: &DeviceBuffer<u8>,
    w1: QuantizedBuffers<'_>,
    act: &mut DeviceBuffer<u8>,
    shape: &MoeShape,
    status: Option<&mut DeviceBuffer<u8>>,
    stream: Stream,
) -> Result<()> {
    shape.validate()?;
    check_bytes("x", x, shape.din as usize, dtype.size(), dtype.name())?;
    check_bytes("idx", idx, shape.k as usize, 4, "u32")?;
    let w = w1.check(["w1", "s1", "b1"], shape.w1_words(), shape.w1_groups(), dtype)?;
    check_bytes("act", act, shape.k as usize * shape.dff as usize, 4, "f32")?;
    let status = status_ptr(status)?;
    unsafe { fc1_relu2(device, dtype, x.ptr(), idx.ptr(), w, act.ptr(), shape, status, stream) }
}

/// [`down`] over byte buffers, checking their sizes.
#[allow(clippy::too_many_arguments)]
pub fn run_down(
    device: &Device,
    dtype: Dtype,
    idx: &DeviceBuffer<u8>,
    w2: QuantizedBuffers<'_>,
    act: &DeviceBuffer<u8>,
    scores: &DeviceBuffer<u8>,
    part: &mut DeviceBuffer<u8>,
    shape: &MoeShape,
    status: Option<&mut DeviceBuffer<u8>>,
    stream: Stream,
) -> Result<()> {
    shape.validate()?;
    check_bytes("idx", idx, shape.k as usize, 4, "u32")?;
    let w = w2.check(["w2", "s2", "b2"], shape.w2_words(), shape.w2_groups(), dtype)?;
    check_bytes("act", act, shape.k as usize * shape.dff as usize, 4, "f32")?;
    check_bytes("scores", scores, shape.k as usize, 4, "f32")?;
    check_bytes("part", part, shape.k as usize * shape.din as usize, 4, "f32")?;
    let status = status_ptr(status)?;
    unsafe { down(device, dtype, idx.ptr(), w, act.ptr(), scores.ptr(), part.ptr(), shape, status, stream) }
}

/// [`combine`] over byte buffers, checking their sizes.
pub fn run_combine(
    device: &Device,
    dtype: Dtype,
    part: &DeviceBuffer<u8>,
    out: &mut DeviceBuffer<u8>,
    k: u32,
    din: u32,
    stream: Stream,
) -> Result<()> {
    check_bytes("part", part, k as usize * din as usize, 4, "f32")?;
    check_bytes("out", out, din as usize, dtype.size(), dtype.name())?;
    unsafe { combine(device, dtype, part.ptr(), out.ptr(), k, din, stream) }
}

/// The byte buffers of one [`run_routed_forward`].
pub struct RoutedBuffers<'a> {
    pub x: &'a DeviceBuffer<u8>,
    pub idx: &'a DeviceBuffer<u8>,
    pub scores: &'a DeviceBuffer<u8>,
    pub w1: QuantizedBuffers<'a>,
    pub w2: QuantizedBuffers<'a>,
    pub out: &'a mut DeviceBuffer<u8>,
    /// At least [`scratch_bytes`] bytes.
    pub scratch: &'a mut DeviceBuffer<u8>,
    pub status: Option<&'a mut DeviceBuffer<u8>>,
}

/// [`routed_forward`] over byte buffers, checking their sizes.
pub fn run_routed_forward(
    device: &Device,
    dtype: Dtype,
    bufs: RoutedBuffers<'_>,
    shape: &MoeShape,
    stream: Stream,
) -> Result<()> {
    shape.validate()?;
    check_bytes("x", bufs.x, shape.din as usize, dtype.size(), dtype.name())?;
    check_bytes("idx", bufs.idx, shape.k as usize, 4, "u32")?;
    check_bytes("scores", bufs.scores, shape.k as usize, 4, "f32")?;
    let w1 = bufs.w1.check(["w1", "s1", "b1"], shape.w1_words(), shape.w1_groups(), dtype)?;
    let w2 = bufs.w2.check(["w2", "s2", "b2"], shape.w2_words(), shape.w2_groups(), dtype)?;
    check_bytes("out", bufs.out, shape.din as usize, dtype.size(), dtype.name())?;
    let status = status_ptr(bufs.status)?;
    let p = RoutedPointers {
        x: bufs.x.ptr(),
        idx: bufs.idx.ptr(),
        scores: bufs.scores.ptr(),
        w1,
        w2,
        out: bufs.out.ptr(),
        scratch: bufs.scratch.ptr(),
        scratch_len: bufs.scratch.len(),
        status,
    };
    unsafe { routed_forward(device, dtype, p, shape, stream) }
}
