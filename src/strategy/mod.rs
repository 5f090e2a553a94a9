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

/// A fact that no parameter value satisfies together with the facts before it.
#[derive(Clone, Copy, Debug)]
pub struct Contradiction<'f> {
    pub fact: &'f Fact,
    /// The contradiction needs the ranges of the parameters' C types (`assume(N >= 2147483648)`
    /// for an `int N`): the facts alone, over unbounded integers, are consistent.
    pub by_types: bool,
}

/// The first fact, in program order, that Z3 proves contradicts the facts before it, every
/// integer parameter an integer within its C type's range: then no parameter value satisfies
/// them all. `None` when they are consistent or Z3 cannot tell.
pub fn contradictory_fact<'f>(function: &'f KernelFunction, backend: &Backend) -> Option<Contradiction<'f>> {
    let mut s = System::new();
    let mut ranges = Vec::new();
    for p in function.params.iter().filter(|p| p.role != crate::frontend::model::Role::Array && p.ty.is_integer()) {
        s.set_domain(Var::new(&p.name), Domain::integer());
        let (least, most) = p.ty.integer_range().unwrap_or((i64::MIN, i64::MAX));
        let v = constraints::Poly::var(&p.name);
        ranges.push(constraints::Constraint::le(&v, &constraints::Poly::int(most)));
        ranges.push(constraints::Constraint::le(&constraints::Poly::int(least), &v));
    }
    // Each fact as constraints: its own, or a remainder's (`N % B == 0`, `N % 4 == 1`) over a
    // fresh integer quotient.
    let derived = function.derived_polys();
    // One quotient per dividend and divisor (see `remainder_constraints`).
    let mut quotients: std::collections::BTreeMap<(String, String), String> = std::collections::BTreeMap::new();
    let mut quotient = |x: &constraints::Poly, m: &constraints::Poly| {
        let next = format!("{}quotient{}", crate::names::INTERNAL, quotients.len());
        quotients.entry((x.to_string(), m.to_string())).or_insert(next).clone()
    };
    let facts: Vec<Vec<constraints::Constraint>> = function
        .facts
        .iter()
        .map(|f| match &f.constraint {
            Some(c) => vec![c.clone()],
            None => crate::frontend::polyexpr::remainder_constraints(&f.condition, &derived, &mut quotient).unwrap_or_default(),
        })
        .collect();
    for q in quotients.values() {
        s.set_domain(Var::new(q), Domain::integer());
    }
    // Most programs' facts hold at a point where every variable takes one power of two (all
    // `64`, say): checking that exactly needs no Z3 context, the most expensive part of a
    // small program's `gen` (bench/RESULTS.md, issue 25). The facts without a constraint of
    // their own are evaluated there as C does.
    let mut all = System::new();
    function.facts.iter().filter_map(|f| f.constraint.clone()).chain(ranges.iter().cloned()).for_each(|c| all.add(c));
    let exact = crate::dispatch::facts::FactSet::of(function).ok();
    let integers = function.integer_parameters();
    let holds_as_c = |k: u32| exact.as_ref().is_none_or(|f| f.holds(&integers.iter().map(|p| (p.clone(), 1i64 << k)).collect()));
    if (0..=20).any(|k| uniform_holds(&all, k) && holds_as_c(k)) {
        return None;
    }
    let timeout_ms = backend.timeout_ms();
    let at = constraints::solver::in_fresh_context(move || {
        let own = Backend::new(timeout_ms);
        let untyped = s.clone();
        ranges.into_iter().for_each(|c| s.add(c));
        for (i, cs) in facts.iter().enumerate() {
            if cs.is_empty() {
                continue;
            }
            cs.iter().for_each(|c| s.add(c.clone()));
            if matches!(own.check(&s), CheckResult::Unsat) {
                let mut alone = untyped;
                facts[..=i].iter().flatten().for_each(|c| alone.add(c.clone()));
                return Some((i, !matches!(own.check(&alone), CheckResult::Unsat)));
            }
        }
        None
    });
    at.map(|(i, by_types)| Contradiction { fact: &function.facts[i], by_types })
}

/// Whether `system` holds where every variable is `2^k`: an exact check by evaluation, a
/// witness that it is consistent.
fn uniform_holds(system: &System, k: u32) -> bool {
    let value = constraints::Rational::from_integer((1i64 << k).into());
    let point = system.vars().iter().map(|v| (v.clone(), value.clone())).collect();
    system.holds_at(&point) == Ok(true)
}
