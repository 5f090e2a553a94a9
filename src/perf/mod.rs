//! Performance counters (issue 7, first part): how well one warp's memory accesses use the
//! memory system, as values in [0, 1] or pass counts.
//!
//! Contract: [`pattern`] turns a kernel's accesses into warp patterns (strides per thread
//! index, a lane-0 offset); [`lanes`] counts, exactly, what the first warp does (32-byte
//! sectors moved in global memory, bank passes in shared memory); [`formula`] gives the same
//! numbers in closed form, case by case, and `None` where no case applies. The formulas are
//! tested against the lanes (`tests/perf.rs`). [`efficiency`] sums a kernel's accesses at one
//! point for `tune`'s score. [`divergence`] counts, for each thread-dependent condition, the
//! warps whose lanes disagree (lanes, and a row-by-row closed form). [`fork`] states, per
//! access, the constraints under which coalescing and bank counters reach their thresholds:
//! what the tree forks on. [`occupancy`] writes occupancy as a piecewise rational function of
//! the parameters for one device. [`branch_efficiency`] turns the divergence counts at one
//! point into `tune`'s branch factor. [`lane_eval`] evaluates a model polynomial for many
//! lanes in machine integers, as the exact path would. The strategies that raise the counters live in
//! `strategy`; the tree's occupancy conditions (unrolling and merging gates) in `tree`.

pub mod divergence;
pub mod fork;
pub mod formula;
pub mod lane_eval;
pub mod lanes;
pub mod movement;
pub mod occupancy;
pub mod pattern;

use std::collections::BTreeMap;

/// The memory efficiency of a kernel at one parameter point, for ranking (`tune`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Efficiency {
    /// Bytes used over bytes moved, summed over the global accesses' first warps (1 when none).
    pub coalescing: f64,
    /// Shared accesses over shared passes: the mean of `1 / ways` (1 when none).
    pub banks: f64,
    /// Bytes moved (32-byte sectors) over the bytes the lanes ask for (lanes x element
    /// size), summed over the global accesses' first warps (1 when none): 1 when coalesced,
    /// 1/32 for a warp that reads one element, 8 for a stride of 8 words.
    pub traffic: f64,
}

/// [`Efficiency`] of `patterns` at `point` with the block `block`, counted by the lanes.
/// Accesses whose pattern cannot be evaluated there are left out.
pub fn efficiency(patterns: &[pattern::Pattern], point: &BTreeMap<String, i64>, block: [i64; 3]) -> Efficiency {
    efficiency_and_ways(patterns, point, block).0
}

/// [`efficiency`], and each shared access's bank ways by its text (the most of its sites),
/// which `tune`'s data-movement model weighs by how often the access runs.
pub fn efficiency_and_ways(patterns: &[pattern::Pattern], point: &BTreeMap<String, i64>, block: [i64; 3]) -> (Efficiency, std::collections::HashMap<String, f64>) {
    let (mut used, mut moved, mut asked) = (0i64, 0i64, 0i64);
    let (mut shared, mut passes) = (0.0, 0.0);
    let mut ways: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
    for p in patterns {
        let Some(c) = p.warp(point, block) else { continue };
        if p.shared {
            shared += 1.0;
            passes += c.bank_ways() as f64;
            let w = ways.entry(p.text.clone()).or_insert(1.0);
            *w = w.max(c.bank_ways() as f64);
        } else {
            used += c.used_bytes();
            moved += c.sectors() * lanes::SECTOR;
            asked += c.elements.len() as i64 * c.elem;
        }
    }
    let efficiency = Efficiency {
        coalescing: if moved == 0 { 1.0 } else { used as f64 / moved as f64 },
        banks: if passes == 0.0 { 1.0 } else { shared / passes },
        traffic: if asked == 0 { 1.0 } else { moved as f64 / asked as f64 },
    };
    (efficiency, ways)
}

/// The branch efficiency of a kernel at one parameter point, for ranking (`tune`): `1 - d/2`,
/// where `d` is the mean, over the thread-dependent conditions `branches`, of the fraction of
/// the first block's warps that diverge on it (first iteration, counted lane by lane). A
/// diverging warp runs the two sides one after the other, on average with half its lanes
/// idle; 1 when no warp diverges (or there is no such condition). Conditions that cannot be
/// evaluated at `point` are left out.
pub fn branch_efficiency(branches: &[divergence::Branch], point: &BTreeMap<String, i64>, block: [i64; 3]) -> f64 {
    let fractions: Vec<f64> = branches.iter().filter_map(|b| b.count(point, block)).map(|c| c.fraction()).collect();
    if fractions.is_empty() {
        return 1.0;
    }
    1.0 - fractions.iter().sum::<f64>() / fractions.len() as f64 / 2.0
}

/// One access's counter at one point, as `metafork counters --at` reports it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AccessReport {
    pub access: String,
    /// `global` or `shared`.
    pub memory: &'static str,
    /// Global: bytes used over bytes moved; shared: bank passes (1 is conflict-free).
    pub value: f64,
    /// The closed form's case, or `lanes` when no case applies and the lanes were counted.
    pub case: String,
}

/// Each access of `kernel` at `point` (every integer parameter): the counter from the closed
/// form where a case applies (checked equal to the lanes), else from the lanes.
pub fn report(function: &crate::frontend::model::KernelFunction, kernel: &crate::kernel::Kernel, backend: &constraints::solver::Backend, point: &BTreeMap<String, i64>) -> Result<Vec<AccessReport>, String> {
    let values = constraints::exact_point(point);
    let mut block = [1i64; 3];
    for (d, e) in kernel.block.iter().enumerate().take(3) {
        let v = e.eval(&values).map_err(|v| format!("give `{v}` with --at (the block's extent `{e}` needs it)"))?;
        block[d] = i64::try_from(v.to_integer()).ok().filter(|x| *x >= 1).ok_or_else(|| format!("the block's extent `{e}` is {v} there"))?;
    }
    let system = crate::strategy::base_context(function);
    let mut out = Vec::new();
    for p in pattern::patterns(function, kernel, &system, backend) {
        let warp = p.warp(point, block).ok_or_else(|| format!("`{}` cannot be evaluated at that point (a missing value, or a division by zero)", p.text))?;
        let concrete = p.at(point, block);
        let (value, piece) = if p.shared {
            (warp.bank_ways() as f64, concrete.as_ref().and_then(formula::bank_ways))
        } else {
            (warp.coalescing(), concrete.as_ref().and_then(formula::coalescing))
        };
        let case = match piece {
            Some(piece) if piece.value == value => piece.case.to_string(),
            Some(piece) => return Err(format!("internal error: the closed form ({}) gives {} for `{}`, the lanes {value}", piece.case, piece.value, p.text)),
            None => "lanes".to_string(),
        };
        out.push(AccessReport { access: p.text.clone(), memory: if p.shared { "shared" } else { "global" }, value, case });
    }
    Ok(out)
}
