//! Performance counters (issue 7, first part): how well one warp's memory accesses use the
//! memory system, as values in [0, 1] or pass counts.
//!
//! Contract: [`pattern`] turns a kernel's accesses into warp patterns (strides per thread
//! index, a lane-0 offset); [`lanes`] counts, exactly, what the first warp does (32-byte
//! sectors moved in global memory, bank passes in shared memory); [`formula`] gives the same
//! numbers in closed form, case by case, and `None` where no case applies. The formulas are
//! tested against the lanes (`tests/perf.rs`). [`efficiency`] sums a kernel's accesses at one
//! point for `tune`'s score. Not yet here: occupancy as a symbolic
//! function, divergence, the strategies that raise the counters, and the tree's forks on them.

pub mod formula;
pub mod lanes;
pub mod pattern;

use std::collections::BTreeMap;

/// The memory efficiency of a kernel at one parameter point, for ranking (`tune`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Efficiency {
    /// Bytes used over bytes moved, summed over the global accesses' first warps (1 when none).
    pub coalescing: f64,
    /// Shared accesses over shared passes: the mean of `1 / ways` (1 when none).
    pub banks: f64,
}

/// [`Efficiency`] of `patterns` at `point` with the block `block`, counted by the lanes.
/// Accesses whose pattern cannot be evaluated there are left out.
pub fn efficiency(patterns: &[pattern::Pattern], point: &BTreeMap<String, i64>, block: [i64; 3]) -> Efficiency {
    let (mut used, mut moved) = (0i64, 0i64);
    let (mut shared, mut passes) = (0.0, 0.0);
    for p in patterns {
        let Some(c) = p.warp(point, block) else { continue };
        if p.shared {
            shared += 1.0;
            passes += c.bank_ways() as f64;
        } else {
            used += c.used_bytes();
            moved += c.sectors() * lanes::SECTOR;
        }
    }
    Efficiency { coalescing: if moved == 0 { 1.0 } else { used as f64 / moved as f64 }, banks: if passes == 0.0 { 1.0 } else { shared / passes } }
}
