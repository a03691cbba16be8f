//! Memory-latency accounting: the bytes a wave keeps in flight per memory latency.
//!
//! A wave's loads counted on vmcnt (GLOBAL and FLAT) are queued as they issue, and
//! each wait retires them as the hardware counter would: oldest first, until at
//! most N remain. Time is counted in memory latencies ("rounds") and instruction
//! issue takes none: a load that reads device memory completes one round after it
//! issues, and a wait that retires it moves the wave's clock to that round. A
//! wave's clock at its end is then the number of memory latencies it sits through
//! one after another, and its request bytes over that count are the bytes it keeps
//! in flight per latency, the quantity Little's law sets against bandwidth.

use std::collections::VecDeque;

/// One load counted on vmcnt, not yet retired by a wait.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// FLAT loads also count on lgkmcnt.
    flat: bool,
    /// The round in which its data arrives.
    done: u64,
}

/// A wave's loads in flight and its clock in memory latencies.
#[derive(Clone, Debug, Default)]
pub struct LoadRounds {
    pending: VecDeque<Pending>,
    now: u64,
}

impl LoadRounds {
    /// A load issues now; `device_bytes` is what it reads from device memory (0
    /// for one that reaches only workgroup memory, or has no active lane), and
    /// only such bytes take a memory latency.
    pub fn issue(&mut self, flat: bool, device_bytes: u64) {
        let done = self.now + u64::from(device_bytes > 0);
        self.pending.push_back(Pending { flat, done });
    }

    /// A wait until at most `vm` loads count on vmcnt and `lgkm` on lgkmcnt.
    /// The queue holds no SMEM or DS operations, so only `lgkmcnt(0)` is known to
    /// cover the FLAT loads; a nonzero lgkmcnt leaves them to a vmcnt wait.
    pub fn wait(&mut self, vm: u32, lgkm: u32) {
        while self.pending.len() > vm as usize {
            let p = self.pending.pop_front().unwrap();
            self.now = self.now.max(p.done);
        }
        if lgkm == 0 {
            let now = &mut self.now;
            self.pending.retain(|p| {
                if p.flat {
                    *now = (*now).max(p.done);
                }
                !p.flat
            });
        }
    }

    /// The wave's clock: memory latencies waited for so far.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// A barrier releases the wave no earlier than the workgroup's latest wave.
    pub fn sync_to(&mut self, round: u64) {
        self.now = self.now.max(round);
    }

    /// Loads issued and not yet retired by a wait.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }
}

/// The distinct bytes of one wave's request: the union of the active lanes'
/// `(address, length)` ranges. Lanes that read the same bytes are served once by
/// the memory system, so this, not lanes times bytes, is what the request moves.
pub fn distinct_bytes(ranges: &mut [(u64, u64)]) -> u64 {
    ranges.sort_unstable();
    let mut total = 0;
    let mut covered_to = 0u64;
    for &(start, len) in ranges.iter() {
        let end = start + len;
        if end > covered_to {
            total += end - start.max(covered_to);
            covered_to = end;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_bytes_merges_overlaps_and_repeats() {
        assert_eq!(distinct_bytes(&mut []), 0);
        assert_eq!(distinct_bytes(&mut [(100, 4); 32]), 4);
        assert_eq!(distinct_bytes(&mut [(8, 4), (0, 4), (4, 4)]), 12);
        assert_eq!(distinct_bytes(&mut [(0, 16), (4, 4), (12, 8), (40, 2)]), 22);
    }

    #[test]
    fn a_wait_retires_the_oldest_and_moves_the_clock_to_their_round() {
        let mut r = LoadRounds::default();
        for _ in 0..3 {
            r.issue(false, 64);
        }
        r.wait(2, 63);
        assert_eq!((r.now(), r.in_flight()), (1, 2));
        // Issued in round 1: done in round 2; the two older ones are done already.
        r.issue(false, 64);
        r.wait(1, 63);
        assert_eq!((r.now(), r.in_flight()), (1, 1));
        r.wait(0, 63);
        assert_eq!((r.now(), r.in_flight()), (2, 0));
        // A load of no device bytes costs no latency.
        r.issue(false, 0);
        r.wait(0, 63);
        assert_eq!(r.now(), 2);
        // lgkmcnt(0) covers a FLAT load, a nonzero lgkmcnt does not.
        r.issue(true, 4);
        r.issue(false, 4);
        r.wait(63, 1);
        assert_eq!(r.in_flight(), 2);
        r.wait(63, 0);
        assert_eq!((r.now(), r.in_flight()), (3, 1));
    }
}
