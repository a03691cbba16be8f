//! `moe_gateup_batch`, `moe_down_batch` and `moe_combine_batch`: the gated
//! experts for `m` tokens of `k` slots each (slot `s = t k + j` is token `t`'s
//! j-th choice; `idx`, `act`, `scores` and `part` are the single-token arrays
//! of the `m` tokens one after the other).
//!
//! # One slot a workgroup
//!
//! Grid z runs over the `m k` slots, and every slot's workgroups start at
//! once: the slots holding one expert read its rows together, so the rows come
//! from DRAM about once per launch and the other reads hit the cache. (Serving
//! an expert's slots from one workgroup, each weight load used by all of them,
//! moves fewer bytes from the cache but keeps fewer loads in flight: it
//! measured up to twice as slow on an H100 from two tokens up.)
//!
//! # Bit for bit per token
//!
//! A slot is computed by the single-token kernels' code for one slot (the f32
//! schedule, or on NVIDIA the tensor-core schedule for 4-bit codes), with the
//! token's row of `x` or `act`: every token's results are those of the
//! single-token launch of that token, bit for bit.
//!
//! # Out-of-range expert ids
//!
//! As in the single-token kernels, over flat slots: a slot whose id is not
//! below `n_experts` is computed by no one; its own workgroups write NaN to its
//! rows and, when `status` is not null, the first of them writes `1 + s` to
//! `*status` if no earlier slot in flat order is out of range.

use crate::geometry::WAVE_SIZE;
use crate::geometry::moe::{
    MAX_BATCH_SLOTS, MAX_BATCH_TOKENS, QUAD_WORDS, ROWS_PER_WORKGROUP, RowLayout, row_layout, workgroups,
};
use crate::geometry::moe_router::{MAX_TOPK, TOPK_GROUP};
use crate::num::Elem;
use crate::vector::F32x4;
use crate::wave;

// `expert_slot!` names these where it expands.
use super::router::{choose, shared_score};
use super::{GateUp, Quad, bad_expert, compute_rows, moe_combine, slot_sum, stage, tensor_cores};

/// The flat slot count `m k`, or `None` where the batch kernels do not take
/// it (`m` outside 1..=[`MAX_BATCH_TOKENS`], `m k` above [`MAX_BATCH_SLOTS`]):
/// they return without touching memory then.
#[inline(always)]
fn batch_slots(m: u32, k: u32) -> Option<u32> {
    // Compares and one product of small numbers, no division (a 32-bit
    // division is a long sequence of scalar float instructions on gfx11).
    if m == 0 || m > MAX_BATCH_TOKENS || k == 0 || k > MAX_BATCH_SLOTS || m * k > MAX_BATCH_SLOTS {
        return None;
    }
    Some(m * k)
}

/// This workgroup's slot and its expert; `None` past the last slot, and for
/// a bad id after the out-of-range path ([`bad_expert`] on `out [slots,
/// rows]`). Id `n_experts` is the shared expert's when `shared` (the launch has
/// its weights), and out of range otherwise.
#[inline(always)]
unsafe fn slot_expert(
    idx: *const u32,
    slots: u32,
    n_experts: u32,
    shared: bool,
    out: *mut f32,
    rows: u32,
    status: *mut u32,
) -> Option<(u32, u32)> {
    let slot = wave::workgroup_id_z();
    if slot >= slots {
        return None;
    }
    let e = unsafe { idx.add(slot as usize).read() };
    // Wrapping: at n_experts = u32::MAX every id is out of range, still safe.
    let ids = n_experts.wrapping_add(shared as u32);
    if e >= ids {
        unsafe { bad_expert(idx, ids, slot, out, rows, status) };
        return None;
    }
    Some((slot, e))
}

/// The token of flat slot `s` (`s / k`, `s < m k`) by at most
/// [`MAX_BATCH_TOKENS`] compares, not a division (see [`batch_slots`]).
#[inline(always)]
fn token_of(s: u32, k: u32, m: u32) -> u32 {
    let mut t = 0;
    while t + 1 < m && (t + 1) * k <= s {
        t += 1;
    }
    t
}

/// `act[s, f] = a(x[s / k] . wg[idx[s], f]) * (x[s / k] . wu[idx[s], f])` for
/// every flat slot `s < m k` (see [`super::moe_gateup`]). With the shared
/// expert's matrices (`wgs` to `bus` not null), a slot whose id is
/// `n_experts` takes them instead of a routed expert's.
///
/// # Safety
/// `x [m, din]`, `idx [m, k]`, `wg, wu [n_experts, dff, din*bits/32]` (u32),
/// `sg, bg, su, bu [n_experts, dff, din/group_size]`, `wgs, wus` null or `[dff,
/// din*bits/32]`, `sgs, bgs, sus, bus` null or `[dff, din/group_size]`, `act
/// [m, k, dff]` (f32), `status` null or one u32. Launched with grid
/// `(workgroups(dff), 1, m k)`, `WORKGROUP_SIZE` threads and
/// `workgroup_mem_bytes(din, bits)` bytes of workgroup memory.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_gateup_batch<T: Elem>(
    x: *const T,
    idx: *const u32,
    wg: *const u32,
    sg: *const T,
    bg: *const T,
    wu: *const u32,
    su: *const T,
    bu: *const T,
    wgs: *const u32,
    sgs: *const T,
    bgs: *const T,
    wus: *const u32,
    sus: *const T,
    bus: *const T,
    act: *mut f32,
    activation: u32,
    m: u32,
    n_experts: u32,
    k: u32,
    din: u32,
    dff: u32,
    bits: u32,
    group_size: u32,
    status: *mut u32,
) {
    let Some(l) = row_layout(din, bits, group_size) else { return };
    let Some(slots) = batch_slots(m, k) else { return };
    let shared = !(wgs.is_null() || sgs.is_null() || bgs.is_null() || wus.is_null() || sus.is_null() || bus.is_null());
    unsafe {
        let Some((slot, e)) = slot_expert(idx, slots, n_experts, shared, act, dff, status) else { return };
        let (wg, sg, bg, wu, su, bu, e) =
            if e == n_experts { (wgs, sgs, bgs, wus, sus, bus, 0) } else { (wg, sg, bg, wu, su, bu, e) };
        let lds = wave::workgroup_mem::<F32x4>() as *mut f32;
        let x = x.add(token_of(slot, k, m) as usize * din as usize);
        gateup_slot!(T; x, wg, sg, bg, wu, su, bu, act, activation; e, slot, l, lds, din, dff, bits);
    }
}

/// [`super::router::moe_topk`] and [`moe_gateup_batch`] in one launch: every
/// wave of slot `s = t S + j` (`S = k + shared`) selects token `t`'s experts
/// from `logits[t, :]` as `moe_topk` does (the same code, so the same ids and
/// scores bit for bit; rounds 0 to `j`, or all `k` in the wave that stores),
/// takes round `j`'s expert (or, at `j = k` with `shared` 1, the shared
/// expert, score `sigmoid(gate_logits[t])`) and computes the slot as
/// `moe_gateup_batch`. The first wave of the slot's first workgroup stores
/// its id and score in `ids[s]` and `scores[s]` for the launches after it; no
/// workgroup reads them.
///
/// The selection costs each workgroup one read of the token's logits and a
/// few hundred instructions before its first weight load; it saves the
/// dependent launch of `moe_topk`. A NaN logit gives the token's slots id
/// `u32::MAX`, and their rows of `act` are NaN, as `moe_gateup_batch` writes
/// them for a bad id; `status` is left to `moe_down_batch`, which reads the
/// ids after this launch (here the earlier slots' ids are not yet stored).
///
/// `G` is the selection's register groups a lane ([`choose`]): the instance
/// takes up to `32 * TOPK_GROUP * G` experts, and the host launches the one
/// of `topk_groups(n_experts)`, whose registers are `moe_topk`'s for that
/// count. The kernel returns without touching memory when `n_experts` is
/// above that, `k` is 0 or above `MAX_TOPK` or `n_experts`, `shared` is not 0
/// or 1, or `shared` is 1 without `gate_logits` and all six shared matrices.
///
/// # Safety
/// `x [m, din]`, `logits [m, n_experts]`, `gate_logits` null or `[m]`, `ids,
/// scores [m, S]`, the experts' matrices as [`moe_gateup_batch`], `act [m, S,
/// dff]` (f32). Launched with grid `(workgroups(dff), 1, m S)`,
/// `WORKGROUP_SIZE` threads and `workgroup_mem_bytes(din, bits)` bytes of
/// workgroup memory.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_gateup_routed<T: Elem, const G: usize>(
    x: *const T,
    logits: *const f32,
    gate_logits: *const f32,
    ids: *mut u32,
    scores: *mut f32,
    wg: *const u32,
    sg: *const T,
    bg: *const T,
    wu: *const u32,
    su: *const T,
    bu: *const T,
    wgs: *const u32,
    sgs: *const T,
    bgs: *const T,
    wus: *const u32,
    sus: *const T,
    bus: *const T,
    act: *mut f32,
    activation: u32,
    m: u32,
    renorm: u32,
    shared: u32,
    n_experts: u32,
    k: u32,
    din: u32,
    dff: u32,
    bits: u32,
    group_size: u32,
) {
    let Some(l) = row_layout(din, bits, group_size) else { return };
    let matrices =
        !(wgs.is_null() || sgs.is_null() || bgs.is_null() || wus.is_null() || sus.is_null() || bus.is_null());
    if n_experts > WAVE_SIZE * TOPK_GROUP * G as u32
        || k == 0
        || k > MAX_TOPK
        || k > n_experts
        || shared > 1
        || (shared == 1 && (gate_logits.is_null() || !matrices))
    {
        return;
    }
    let per_token = k + shared;
    let Some(slots) = batch_slots(m, per_token) else { return };
    let slot = wave::workgroup_id_z();
    if slot >= slots {
        return;
    }
    let t = token_of(slot, per_token, m);
    let j = slot - t * per_token;
    // The wave that stores the slot's id and score.
    let stores = wave::workgroup_id_x() == 0 && wave::wave_id() == 0;
    unsafe {
        // Lane `j` keeps its round's expert and score (those of the shared
        // slot at `j = k`); every lane takes the slot's expert.
        let (lane_expert, lane_score, e) = if j == k {
            (n_experts, shared_score(gate_logits.add(t as usize).read()), n_experts)
        } else {
            // Slot j needs rounds 0 to j; the wave that stores the slot's
            // score needs all k, whose sum renormalizes it.
            let rounds = if stores { k } else { j + 1 };
            let round = choose::<G>(logits.add(t as usize * n_experts as usize), n_experts, rounds);
            // Uniform (a scalar register on amdgpu), as a loaded id is: the
            // expert's matrix pointers then stay scalar, not one per lane.
            let e = wave::uniform_usize(wave::shfl_idx_u32(round.expert, j) as usize) as u32;
            (round.expert, round.slot_score(renorm), e)
        };
        if e >= n_experts + shared {
            // Only the rows: `status` is `moe_down_batch`'s to write.
            bad_expert(ids, n_experts, slot, act, dff, core::ptr::null_mut());
        } else {
            let (wg, sg, bg, wu, su, bu, e) =
                if e == n_experts { (wgs, sgs, bgs, wus, sus, bus, 0) } else { (wg, sg, bg, wu, su, bu, e) };
            let lds = wave::workgroup_mem::<F32x4>() as *mut f32;
            let x = x.add(t as usize * din as usize);
            gateup_slot!(T; x, wg, sg, bg, wu, su, bu, act, activation; e, slot, l, lds, din, dff, bits);
        }
        // The slot's id and score for the later launches, stored last: before
        // the projections, the stores' addresses held registers through them
        // (16 more on sm_90).
        if stores && wave::lane_id() == j % WAVE_SIZE {
            ids.add(slot as usize).write(lane_expert);
            scores.add(slot as usize).write(lane_score);
        }
    }
}

/// `part[s, h] = scores[s] * (act[s] . w2[idx[s], h])` for every flat slot
/// `s < m k` (see [`super::moe_down`]), at 4 or 8 bits; `TENSOR` as there.
/// With the shared expert's matrix (`w2s`, `s2s`, `b2s` not null), a slot
/// whose id is `n_experts` takes it instead of a routed expert's.
///
/// # Safety
/// `idx [m, k]`, `w2 [n_experts, din, dff*bits/32]` (u32), `s2, b2
/// [n_experts, din, dff/group_size]`, `w2s` null or `[din, dff*bits/32]`,
/// `s2s, b2s` null or `[din, dff/group_size]`, `act [m, k, dff]`, `scores [m,
/// k]`, `part [m, k, din]` (f32), `status` null or one u32. Launched with grid
/// `(workgroups(din), 1, m k)`, `WORKGROUP_SIZE` threads and
/// `workgroup_mem_bytes(dff, bits)` bytes of workgroup memory.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_down_batch<T: Elem, const TENSOR: bool>(
    idx: *const u32,
    w2: *const u32,
    s2: *const T,
    b2: *const T,
    w2s: *const u32,
    s2s: *const T,
    b2s: *const T,
    act: *const f32,
    scores: *const f32,
    part: *mut f32,
    m: u32,
    n_experts: u32,
    k: u32,
    din: u32,
    dff: u32,
    bits: u32,
    group_size: u32,
    status: *mut u32,
) {
    let Some(l) = row_layout(dff, bits, group_size) else { return };
    let Some(slots) = batch_slots(m, k) else { return };
    unsafe {
        down_slot::<T, TENSOR>(
            l, slots, idx, w2, s2, b2, w2s, s2s, b2s, act, scores, part, n_experts, din, dff, bits, status,
        )
    }
}

/// The body of [`moe_down_batch`] once the shape is checked: this
/// workgroup's slot, or its NaN rows and status for a bad id.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn down_slot<T: Elem, const TENSOR: bool>(
    l: RowLayout,
    slots: u32,
    idx: *const u32,
    w2: *const u32,
    s2: *const T,
    b2: *const T,
    w2s: *const u32,
    s2s: *const T,
    b2s: *const T,
    act: *const f32,
    scores: *const f32,
    part: *mut f32,
    n_experts: u32,
    din: u32,
    dff: u32,
    bits: u32,
    status: *mut u32,
) {
    let shared = !(w2s.is_null() || s2s.is_null() || b2s.is_null());
    unsafe {
        let Some((slot, e)) = slot_expert(idx, slots, n_experts, shared, part, din, status) else { return };
        let (w2, s2, b2, e) = if e == n_experts { (w2s, s2s, b2s, 0) } else { (w2, s2, b2, e) };
        let lds = wave::workgroup_mem::<F32x4>() as *mut f32;
        expert_slot! {
            T, TENSOR, e, l, lds; cols dff, rows din, bits;
            w w2, s s2, b b2;
            stage a: f32, finish finish;
            let a = act.add(slot as usize * dff as usize);
            let score = scores.add(slot as usize).read();
            let out = part.add(slot as usize * din as usize);
            let finish = |row: u32, total: f32| out.add(row as usize).write(score * total);
        }
    }
}

/// [`moe_down_batch`], then the combine of the rows it wrote, in the same
/// launch: `out[t, h] = T(sum_j part[t, j, h])` as [`moe_combine_batch`] sums
/// it, bit for bit.
///
/// # The last workgroup to arrive
///
/// The `k` workgroups of token `t`'s slots in row block `x` each count
/// themselves in `arrivals[t, x]` once their rows of `part` are stored, and
/// the one that counts last sums the token's rows of the block, in its first
/// wave, a lane a row. A barrier, then a release fence by the counting thread,
/// make every thread's stores visible to the wave that reads the count after
/// them; an acquire fence after it makes that wave's loads see them. No
/// workgroup waits for another, so the launch needs no co-resident grid.
/// `arrivals` must be zero before the launch (the block's router launch
/// zeroes it) and is left counting `k` a token and block.
///
/// # Safety
/// As [`moe_down_batch`], plus `out [m, din]` of `T` and `arrivals [m,
/// workgroups(din)]` u32, zero before the launch and touched by nothing else
/// during it.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn moe_down_combine<T: Elem, const TENSOR: bool>(
    idx: *const u32,
    w2: *const u32,
    s2: *const T,
    b2: *const T,
    w2s: *const u32,
    s2s: *const T,
    b2s: *const T,
    act: *const f32,
    scores: *const f32,
    part: *mut f32,
    out: *mut T,
    arrivals: *mut u32,
    m: u32,
    n_experts: u32,
    k: u32,
    din: u32,
    dff: u32,
    bits: u32,
    group_size: u32,
    status: *mut u32,
) {
    // The shape is checked once, for both parts (every thread of the
    // workgroup takes the same branch).
    let Some(l) = row_layout(dff, bits, group_size) else { return };
    let Some(slots) = batch_slots(m, k) else { return };
    if wave::workgroup_id_z() >= slots {
        return;
    }
    unsafe {
        down_slot::<T, TENSOR>(
            l, slots, idx, w2, s2, b2, w2s, s2s, b2s, act, scores, part, n_experts, din, dff, bits, status,
        )
    };
    // The barrier orders every wave's stores of `part` before the count;
    // then one thread releases them and counts, and in the last of the
    // token's workgroups wave 0 acquires and sums (the other waves have
    // nothing left to do, so their share of the count is one barrier).
    wave::barrier();
    if wave::wave_id() != 0 {
        return;
    }
    // The token by a division, not `token_of`'s search: once a workgroup
    // here, it is fewer instructions than up to `m` compares (at M 8 the
    // search made this launch issue-bound on the gfx1151 model). Uniform
    // (`readfirstlane`), so that the count's and the sum's addresses stay
    // scalar. (`k` is not 0 here; the `max` spares the division its panic.)
    let (x, t) = (wave::workgroup_id_x(), wave::uniform_usize((wave::workgroup_id_z() / k.max(1)) as usize) as u32);
    let count = unsafe { arrivals.add((t * workgroups(din) + x) as usize) };
    let mut before = 0;
    if wave::lane_id() == 0 {
        wave::fence_release();
        before = unsafe { wave::atomic_add_u32(count, 1) };
    }
    if wave::broadcast_u32::<0>(before) != k - 1 {
        return;
    }
    wave::fence_acquire();
    let (t, k, din) = (t as usize, k as usize, din as usize);
    let h = x as usize * ROWS_PER_WORKGROUP as usize + wave::lane_id() as usize;
    if h < din {
        let sum = unsafe { slot_sum(part.add(t * k * din), k, din, h) };
        unsafe { out.add(t * din + h).write(T::from_f32(sum)) };
    }
}

// One lane a row of the block: the sum above takes it.
const _: () = assert!(ROWS_PER_WORKGROUP == WAVE_SIZE);

/// `out[t, h] = T(sum_j part[t, j, h])` for every token `t < m` (grid y), as
/// [`moe_combine`] sums one token.
///
/// # Safety
/// `part [m, k, din]` (f32), `out [m, din]`; grid `(ceil(din / 256), m, 1)`
/// of `COMBINE_WORKGROUP_SIZE` threads (any 1-D workgroup covering `din` along x).
#[inline(always)]
pub unsafe fn moe_combine_batch<T: Elem>(part: *const f32, out: *mut T, m: u32, k: u32, din: u32) {
    let t = wave::workgroup_id_y();
    if t >= m {
        return;
    }
    let (t, k64, din64) = (t as usize, k as usize, din as usize);
    unsafe { moe_combine(part.add(t * k64 * din64), out.add(t * din64), k, din) }
}

#[cfg(test)]
mod tests {
    use std::vec::Vec;

    use super::*;
    use crate::emulator::{LaunchConfig, launch};
    use crate::geometry::moe::{WORKGROUP_SIZE, workgroup_mem_bytes, workgroups};
    use crate::moe::moe_down;
    use crate::num::Bf16;
    use crate::vector::U32x4;

    fn emulate(grid: [u32; 3], mem: u32, kernel: &(dyn Fn() + Sync)) {
        let cfg = LaunchConfig { grid, workgroup_size: WORKGROUP_SIZE, workgroup_mem_bytes: mem as usize };
        unsafe { launch(&cfg, kernel) }.unwrap();
    }

    /// E, m, k, Din, Dff and the group size of the down projection's tests.
    const DOWN_SHAPE: (u32, u32, u32, u32, u32, u32) = (3, 5, 2, 40, 352, 32);

    /// Random codes, scales and biases of `DOWN_SHAPE`'s experts at `bits`,
    /// and its `act` and `scores`, from an xorshift seeded with `seed`.
    struct DownInputs<T> {
        w: Vec<U32x4>,
        s: Vec<T>,
        b: Vec<T>,
        act: Vec<f32>,
        scores: Vec<f32>,
    }

    fn down_inputs<T: Elem>(bits: u32, seed: u32) -> DownInputs<T> {
        let (n_experts, m, k, din, dff, gs) = DOWN_SHAPE;
        let mut r = seed;
        let mut next = move || {
            r ^= r << 13;
            r ^= r >> 17;
            r ^= r << 5;
            r
        };
        let quads = (n_experts * din * dff * bits / 32 / 4) as usize;
        let groups = (n_experts * din * dff / gs) as usize;
        let w = (0..quads).map(|_| U32x4::new([0; 4].map(|_: u32| next()))).collect();
        let s = (0..groups).map(|_| T::from_f32((next() % 1000) as f32 / 65536.0 + 1e-4)).collect();
        let b = (0..groups).map(|_| T::from_f32(-((next() % 1000) as f32) / 8192.0)).collect();
        let act = (0..m * k * dff).map(|_| (next() % 2001) as f32 / 500.0 - 2.0).collect();
        let scores = (0..m * k).map(|_| (next() % 1000) as f32 / 1000.0).collect();
        DownInputs { w, s, b, act, scores }
    }

    /// `moe_down_batch` against `moe_down` with the same `TENSOR`: each
    /// token's `part` bit for bit `moe_down`'s of that token. Expert 0 is in
    /// five slots, expert 2 in two.
    fn down_batch_is_the_single_token_down<T: Elem, const TENSOR: bool>(bits: u32) {
        let (n_experts, m, k, din, dff, gs) = DOWN_SHAPE;
        let DownInputs { w, s, b, act, scores } = down_inputs::<T>(bits, 0x2545_F491_u32);
        let idx = [0u32, 1, 2, 0, 0, 1, 0, 2, 0, 1];
        let (wp, sp, bp) = (w.as_ptr() as usize, s.as_ptr() as usize, b.as_ptr() as usize);
        let mut batch = std::vec![f32::NAN; (m * k * din) as usize];
        let (ip, ap, scp, pp) =
            (idx.as_ptr() as usize, act.as_ptr() as usize, scores.as_ptr() as usize, batch.as_mut_ptr() as usize);
        emulate([workgroups(din), 1, m * k], workgroup_mem_bytes(dff, bits), &|| unsafe {
            moe_down_batch::<T, TENSOR>(
                ip as _,
                wp as _,
                sp as _,
                bp as _,
                core::ptr::null(),
                core::ptr::null(),
                core::ptr::null(),
                ap as _,
                scp as _,
                pp as _,
                m,
                n_experts,
                k,
                din,
                dff,
                bits,
                gs,
                core::ptr::null_mut(),
            )
        });
        for t in 0..m as usize {
            let ku = k as usize;
            let mut single = std::vec![f32::NAN; ku * din as usize];
            let (ip, ap, scp, pp) = (
                idx[t * ku..].as_ptr() as usize,
                act[t * ku * dff as usize..].as_ptr() as usize,
                scores[t * ku..].as_ptr() as usize,
                single.as_mut_ptr() as usize,
            );
            emulate([workgroups(din), 1, k], workgroup_mem_bytes(dff, bits), &|| unsafe {
                moe_down::<T, TENSOR>(
                    ip as _,
                    wp as _,
                    sp as _,
                    bp as _,
                    ap as _,
                    scp as _,
                    pp as _,
                    n_experts,
                    k,
                    din,
                    dff,
                    bits,
                    gs,
                    core::ptr::null_mut(),
                )
            });
            let got = &batch[t * ku * din as usize..(t + 1) * ku * din as usize];
            for (i, (g, w)) in got.iter().zip(&single).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "{} {bits} bits: token {t} element {i}", T::NAME);
            }
        }
    }

    /// `moe_down_combine` against `moe_down_batch` then `moe_combine_batch`:
    /// `part` and `out` bit for bit, at Din 40 (a full row block and a part
    /// one), with slot 3's id out of range (its token's output NaN and the
    /// status `1 + 3`); every token's count in every block ends at `k`. With
    /// the counts a launch leaves (`k`, not cleared) no workgroup is the
    /// last, and `out` is not written.
    fn down_combine_is_down_batch_then_combine<T: Elem>(bits: u32) {
        let (n_experts, m, k, din, dff, gs) = DOWN_SHAPE;
        let DownInputs { w, s, b, act, scores } = down_inputs::<T>(bits, 0x9E37_79B9_u32);
        let idx = [0u32, 1, 2, 7, 0, 1, 0, 2, 2, 1];
        let (wp, sp, bp) = (w.as_ptr() as usize, s.as_ptr() as usize, b.as_ptr() as usize);
        let (ip, ap, scp) = (idx.as_ptr() as usize, act.as_ptr() as usize, scores.as_ptr() as usize);
        let grid = [workgroups(din), 1, m * k];
        let mem = workgroup_mem_bytes(dff, bits);
        let null = core::ptr::null::<T>() as usize;
        let sentinel = T::from_f32(-7.0);
        // Returns part, out, arrivals and status of one `moe_down_combine` launch.
        let fused = |start: u32| {
            let mut part = std::vec![f32::NAN; (m * k * din) as usize];
            let mut out = std::vec![sentinel; (m * din) as usize];
            let mut arrivals = std::vec![start; (m * workgroups(din)) as usize];
            let mut status = 0u32;
            let (pp, op, rp) = (part.as_mut_ptr() as usize, out.as_mut_ptr() as usize, arrivals.as_mut_ptr() as usize);
            let stp = &mut status as *mut u32 as usize;
            emulate(grid, mem, &|| unsafe {
                moe_down_combine::<T, false>(
                    ip as _, wp as _, sp as _, bp as _, null as _, null as _, null as _, ap as _, scp as _, pp as _,
                    op as _, rp as _, m, n_experts, k, din, dff, bits, gs, stp as _,
                )
            });
            (part, out, arrivals, status)
        };
        let (part, out, arrivals, status) = fused(0);
        let mut want_part = std::vec![f32::NAN; (m * k * din) as usize];
        let mut want_out = std::vec![sentinel; (m * din) as usize];
        let (pp, op) = (want_part.as_mut_ptr() as usize, want_out.as_mut_ptr() as usize);
        emulate(grid, mem, &|| unsafe {
            moe_down_batch::<T, false>(
                ip as _,
                wp as _,
                sp as _,
                bp as _,
                null as _,
                null as _,
                null as _,
                ap as _,
                scp as _,
                pp as _,
                m,
                n_experts,
                k,
                din,
                dff,
                bits,
                gs,
                core::ptr::null_mut(),
            )
        });
        emulate([din.div_ceil(256), m, 1], 0, &|| unsafe { moe_combine_batch::<T>(pp as _, op as _, m, k, din) });
        let name = T::NAME;
        for (i, (g, w)) in part.iter().zip(&want_part).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{name} {bits} bits: part element {i}");
        }
        for (i, (g, w)) in out.iter().zip(&want_out).enumerate() {
            assert_eq!(g.to_f32().to_bits(), w.to_f32().to_bits(), "{name} {bits} bits: out element {i}");
        }
        assert!(out[din as usize].to_f32().is_nan() && !out[0].to_f32().is_nan(), "token 1 holds the bad slot");
        assert_eq!(arrivals, std::vec![k; (m * workgroups(din)) as usize]);
        assert_eq!(status, 1 + 3);
        let (_, out, _, _) = fused(k);
        assert!(out.iter().all(|v| v.to_f32() == -7.0), "{name} {bits} bits: counts not cleared");
    }

    #[test]
    fn down_combine_is_down_batch_then_combine_bf16_4_bits() {
        down_combine_is_down_batch_then_combine::<Bf16>(4);
    }

    #[test]
    fn down_combine_is_down_batch_then_combine_f32_8_bits() {
        down_combine_is_down_batch_then_combine::<f32>(8);
    }

    /// `moe_gateup_routed` against `moe_topk` then `moe_gateup_batch` on the
    /// same logits: ids, scores and `act` bit for bit, at every group count
    /// of the selection (E 100, 200, 512, 1024), with and without the shared
    /// expert and renormalization, and with token 1's logits holding a NaN
    /// (its routed slots' ids `u32::MAX`, their rows NaN).
    #[test]
    fn gateup_routed_is_topk_then_gateup_batch() {
        use crate::geometry::moe_router::topk_groups;
        use crate::moe::router::moe_topk;
        let (m, din, dff, gs, bits) = (3u32, 64u32, 40u32, 32u32, 4u32);
        let mut r = 0x1234_5678_u32;
        let mut next = move || {
            r ^= r << 13;
            r ^= r >> 17;
            r ^= r << 5;
            r
        };
        for (n_experts, k, shared, renorm) in
            [(100u32, 8u32, 0u32, 1u32), (200, 8, 1, 0), (512, 10, 1, 1), (1024, 16, 0, 1)]
        {
            let stacked = (n_experts + shared) as usize;
            let words = stacked * (dff * din * bits / 32) as usize;
            let groups = stacked * (dff * din / gs) as usize;
            let wg: Vec<u32> = (0..words).map(|_| next()).collect();
            let wu: Vec<u32> = (0..words).map(|_| next()).collect();
            let scale = |v: u32| Bf16::from_f32((v % 1000) as f32 / 65536.0 + 1e-4);
            let bias = |v: u32| Bf16::from_f32(-((v % 1000) as f32) / 8192.0);
            let (sg, su): (Vec<Bf16>, Vec<Bf16>) = (0..groups).map(|_| (scale(next()), scale(next()))).unzip();
            let (bg, bu): (Vec<Bf16>, Vec<Bf16>) = (0..groups).map(|_| (bias(next()), bias(next()))).unzip();
            let x: Vec<Bf16> = (0..m * din).map(|_| Bf16::from_f32((next() % 2001) as f32 / 1000.0 - 1.0)).collect();
            let mut logits: Vec<f32> = (0..m * n_experts).map(|_| (next() % 4001) as f32 / 500.0 - 4.0).collect();
            logits[n_experts as usize + 7] = f32::NAN;
            let gate_logits: Vec<f32> = (0..m).map(|_| (next() % 2001) as f32 / 500.0 - 2.0).collect();
            // The shared expert's matrices are the stacks' last expert.
            let (e_words, e_groups) = (n_experts as usize * words / stacked, n_experts as usize * groups / stacked);
            let sh = |on: bool, at: usize| if on { at } else { 0 };
            let on = shared == 1;
            let p = |v: &[u32]| v.as_ptr() as usize;
            let q = |v: &[Bf16]| v.as_ptr() as usize;
            let (xp, lp, glp) = (q(&x), logits.as_ptr() as usize, gate_logits.as_ptr() as usize);
            let (wgp, wup, sgp, sup, bgp, bup) = (p(&wg), p(&wu), q(&sg), q(&su), q(&bg), q(&bu));
            let shared_ptrs = [
                sh(on, wgp + 4 * e_words),
                sh(on, sgp + 2 * e_groups),
                sh(on, bgp + 2 * e_groups),
                sh(on, wup + 4 * e_words),
                sh(on, sup + 2 * e_groups),
                sh(on, bup + 2 * e_groups),
            ];
            let slots = m * (k + shared);
            let (mut ids, mut scores) = (std::vec![7u32; slots as usize], std::vec![f32::NAN; slots as usize]);
            let mut act = std::vec![0.5f32; (slots * dff) as usize];
            let (idp, scp, ap) = (ids.as_mut_ptr() as usize, scores.as_mut_ptr() as usize, act.as_mut_ptr() as usize);
            let routed = match topk_groups(n_experts) {
                1 => moe_gateup_routed::<Bf16, 1>,
                2 => moe_gateup_routed::<Bf16, 2>,
                4 => moe_gateup_routed::<Bf16, 4>,
                _ => moe_gateup_routed::<Bf16, 8>,
            };
            emulate([workgroups(dff), 1, slots], workgroup_mem_bytes(din, bits), &|| unsafe {
                routed(
                    xp as _,
                    lp as _,
                    glp as _,
                    idp as _,
                    scp as _,
                    wgp as _,
                    sgp as _,
                    bgp as _,
                    wup as _,
                    sup as _,
                    bup as _,
                    shared_ptrs[0] as _,
                    shared_ptrs[1] as _,
                    shared_ptrs[2] as _,
                    shared_ptrs[3] as _,
                    shared_ptrs[4] as _,
                    shared_ptrs[5] as _,
                    ap as _,
                    0,
                    m,
                    renorm,
                    shared,
                    n_experts,
                    k,
                    din,
                    dff,
                    bits,
                    gs,
                )
            });

            let (mut want_ids, mut want_scores) = (std::vec![0u32; slots as usize], std::vec![0f32; slots as usize]);
            let (wip, wsp) = (want_ids.as_mut_ptr() as usize, want_scores.as_mut_ptr() as usize);
            let cfg = LaunchConfig { grid: [m, 1, 1], workgroup_size: WAVE_SIZE, workgroup_mem_bytes: 0 };
            unsafe {
                launch(&cfg, &|| moe_topk(lp as _, glp as _, wip as _, wsp as _, m, n_experts, k, renorm, shared))
            }
            .unwrap();
            let mut want_act = std::vec![0.5f32; (slots * dff) as usize];
            let wap = want_act.as_mut_ptr() as usize;
            emulate([workgroups(dff), 1, slots], workgroup_mem_bytes(din, bits), &|| unsafe {
                moe_gateup_batch::<Bf16>(
                    xp as _,
                    wip as _,
                    wgp as _,
                    sgp as _,
                    bgp as _,
                    wup as _,
                    sup as _,
                    bup as _,
                    shared_ptrs[0] as _,
                    shared_ptrs[1] as _,
                    shared_ptrs[2] as _,
                    shared_ptrs[3] as _,
                    shared_ptrs[4] as _,
                    shared_ptrs[5] as _,
                    wap as _,
                    0,
                    m,
                    n_experts,
                    k + shared,
                    din,
                    dff,
                    bits,
                    gs,
                    core::ptr::null_mut(),
                )
            });
            let what = std::format!("E {n_experts} k {k} shared {shared} renorm {renorm}");
            assert_eq!(ids, want_ids, "{what}: ids");
            // Token 1's routed slots; its shared slot is computed.
            assert!(ids[(k + shared) as usize..(2 * k + shared) as usize].iter().all(|&e| e == u32::MAX), "{what}");
            let bits_of = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits_of(&scores), bits_of(&want_scores), "{what}: scores");
            assert_eq!(bits_of(&act), bits_of(&want_act), "{what}: act");
            let token1 = &act[((k + shared) * dff) as usize..((2 * k + shared) * dff) as usize];
            assert!(token1.iter().all(|v| v.is_nan()), "{what}: token 1's rows");
            assert!(act[..((k + shared) * dff) as usize].iter().all(|v| v.is_finite()), "{what}: token 0's rows");
        }
    }

    /// NVIDIA's 4-bit path (the tensor-core schedule, one slot per pass),
    /// which no test here runs on a device.
    #[test]
    fn down_batch_tensor_schedule_is_bit_for_bit_per_token() {
        down_batch_is_the_single_token_down::<f32, true>(4);
        down_batch_is_the_single_token_down::<Bf16, true>(4);
    }

    /// The f32 schedule: AMD's path at 4 and 8 bits, and NVIDIA's at 8.
    #[test]
    fn down_batch_f32_schedule_is_bit_for_bit_per_token() {
        down_batch_is_the_single_token_down::<f32, false>(4);
        down_batch_is_the_single_token_down::<Bf16, false>(8);
        down_batch_is_the_single_token_down::<Bf16, true>(8);
    }
}
