//! Performance counters (issue 7, first part): how well one warp's memory accesses use the
//! memory system, as values in [0, 1] or pass counts.
//!
//! Contract: [`pattern`] turns a kernel's accesses into warp patterns (strides per thread
//! index, a lane-0 offset); [`lanes`] counts, exactly, what the first warp does (32-byte
//! sectors moved in global memory, bank passes in shared memory); [`formula`] gives the same
//! numbers in closed form, case by case, and `None` where no case applies. The formulas are
//! tested against the lanes (`tests/perf.rs`). Not yet here: occupancy as a symbolic
//! function, divergence, the strategies that raise the counters, and the tree's forks on them.

pub mod formula;
pub mod lanes;
pub mod pattern;
