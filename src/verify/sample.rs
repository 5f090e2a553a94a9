//! Parameter points for differential runs: small values inside a leaf's constraint system.
//!
//! Contract: every point returned satisfies the program's facts (checked concretely, so
//! non-polynomial ones such as `n % B0 == 0` count) and the leaf's system (checked by Z3, the
//! machine limits existentially: some device admits the leaf there). Candidates are drawn from
//! a seeded generator: program parameters in 1..=`MAX_PROGRAM`, data parameters either anywhere
//! in 1..=`MAX_DATA` (so sizes that are not multiples of the block occur wherever the facts
//! allow them) or a multiple, at most `MAX_DATA`, of the product of a random subset of the
//! program parameters (so facts that demand divisibility can be met; the runs'
//! cost grows with the data sizes, cubically for matrix multiplication). Z3 `unknown` on a candidate skips it; it never admits a point.

use super::differential::SplitMix;
use crate::dispatch::facts::FactSet;
use crate::frontend::model::KernelFunction;
use constraints::solver::{Backend, CheckResult};
use constraints::{Constraint, Poly, System};
use std::collections::BTreeMap;

pub const MAX_PROGRAM: i64 = 6;
pub const MAX_DATA: i64 = 24;

/// Up to `wanted` distinct points of `system` (within `attempts` candidates).
pub fn points(function: &KernelFunction, system: &System, backend: &Backend, wanted: usize, attempts: usize, seed: u64) -> Result<Vec<BTreeMap<String, i64>>, String> {
    let facts = FactSet::of(function)?;
    let program = function.program_parameters();
    let data = function.data_parameters();
    let mut rng = SplitMix(seed);
    let mut out: Vec<BTreeMap<String, i64>> = Vec::new();
    for attempt in 0..attempts {
        if out.len() >= wanted {
            break;
        }
        let mut point = BTreeMap::new();
        for p in &program {
            point.insert(p.clone(), rng.range(1, MAX_PROGRAM));
        }
        for d in &data {
            // A multiple of some program parameters' product (facts such as `n % (ub1 * s) == 0`
            // need one), or any size; never above MAX_DATA: a run's cost grows with it
            // (cubically for matrix multiplication).
            let factor: i64 = program.iter().filter(|_| rng.range(0, 1) == 1).map(|p| point[p]).product::<i64>().max(1);
            let v = if attempt % 2 == 1 && factor <= MAX_DATA { factor * rng.range(1, MAX_DATA / factor) } else { rng.range(1, MAX_DATA) };
            point.insert(d.clone(), v);
        }
        if out.contains(&point) || !facts.holds(&point) {
            continue;
        }
        let mut pinned = system.clone();
        for (name, v) in &point {
            pinned.add(Constraint::eq(&Poly::var(name), &Poly::int(*v)));
        }
        if let CheckResult::Sat(_) = backend.check(&pinned) {
            out.push(point);
        }
    }
    Ok(out)
}
