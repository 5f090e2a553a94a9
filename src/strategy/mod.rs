//! Strategies: semantics-preserving transformations of a [`crate::kernel::Kernel`], each tied
//! to the counters it can lower (the paper's O_j). A strategy returns `Ok(None)` when it does
//! not apply (nothing to transform, or its safety condition cannot be proved).

pub mod block;
pub mod block_reduce;
pub mod caching;
pub mod coarsen;
pub mod cse;
pub mod granularity;
pub mod interchange;
pub mod merge;
pub mod narrow;
pub mod prefetch;
pub mod promote;
pub(crate) mod syntax;
pub mod unroll;
pub(crate) mod walk;

use crate::frontend::model::{Fact, FactKind, KernelFunction};
use constraints::solver::{Backend, CheckResult};
use constraints::{Domain, System, Var};

/// The facts every strategy may rely on: the function's polynomial facts, and every integer
/// parameter an integer.
pub fn base_context(function: &KernelFunction) -> System {
    let mut s = System::new();
    for f in &function.facts {
        if f.kind == FactKind::Assume || f.kind == FactKind::Assert {
            if let Some(c) = &f.constraint {
                s.add(c.clone());
            }
        }
    }
    for p in &function.params {
        if p.role != crate::frontend::model::Role::Array && p.ty.is_integer() {
            s.set_domain(Var::new(&p.name), Domain::integer());
        }
    }
    s
}

/// The first fact, in program order, that Z3 proves contradicts the facts before it (every
/// integer parameter an integer): then no parameter value satisfies them all. `None` when they
/// are consistent or Z3 cannot tell.
pub fn contradictory_fact<'f>(function: &'f KernelFunction, backend: &Backend) -> Option<&'f Fact> {
    let mut s = System::new();
    for p in function.params.iter().filter(|p| p.role != crate::frontend::model::Role::Array && p.ty.is_integer()) {
        s.set_domain(Var::new(&p.name), Domain::integer());
    }
    let facts: Vec<Option<constraints::Constraint>> = function.facts.iter().map(|f| f.constraint.clone()).collect();
    // Most programs' facts hold at a point where every variable takes one power of two (all
    // `64`, say): checking that exactly needs no Z3 context, the most expensive part of a
    // small program's `gen` (bench/RESULTS.md, issue 25).
    let mut all = s.clone();
    facts.iter().flatten().for_each(|c| all.add(c.clone()));
    if uniform_solution(&all) {
        return None;
    }
    let timeout_ms = backend.timeout_ms();
    let at = constraints::solver::in_fresh_context(move || {
        let own = Backend::new(timeout_ms);
        for (i, c) in facts.into_iter().enumerate() {
            if let Some(c) = c {
                s.add(c);
                if matches!(own.check(&s), CheckResult::Unsat) {
                    return Some(i);
                }
            }
        }
        None
    });
    at.map(|i| &function.facts[i])
}

/// Whether `system` holds where every variable is the same power of two (1 to 2^20): an exact
/// check by evaluation, a witness that it is consistent.
fn uniform_solution(system: &System) -> bool {
    let vars = system.vars();
    (0..=20).any(|k| {
        let value = constraints::Rational::from_integer((1i64 << k).into());
        let point = vars.iter().map(|v| (v.clone(), value.clone())).collect();
        system.holds_at(&point) == Ok(true)
    })
}
