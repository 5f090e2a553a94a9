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
    /// For a kernel's range fact ([`Fact::kernel_range`]), the first of the program's own facts
    /// after which it fails (`assume(N >= 70000)` against `N * N <= 2147483647`).
    pub forced_by: Option<&'f Fact>,
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
    // A kernel's range fact (`N * N <= 2147483647`: an `int` index stays within `int`) joins
    // no tree, but facts that leave it no value leave every launch overflowing: it counts too,
    // where it is a comparison of polynomials.
    let range = |f: &crate::frontend::model::Fact| f.kernel_range.then(|| crate::frontend::polyexpr::to_constraint(&f.condition, &derived)).flatten();
    let facts: Vec<Vec<constraints::Constraint>> = function
        .facts
        .iter()
        .map(|f| match (f.constraint.clone(), range(f)) {
            (Some(c), _) | (None, Some(c)) => vec![c],
            (None, None) => crate::frontend::polyexpr::remainder_constraints(&f.condition, &derived, &mut quotient).unwrap_or_default(),
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
    function.facts.iter().filter_map(|f| f.constraint.clone().or_else(|| range(f))).chain(ranges.iter().cloned()).for_each(|c| all.add(c));
    let exact = crate::dispatch::facts::FactSet::of(function).ok();
    let integers = function.integer_parameters();
    let holds_as_c = |k: u32| exact.as_ref().is_none_or(|f| f.holds(&integers.iter().map(|p| (p.clone(), 1i64 << k)).collect()));
    if (0..=20).any(|k| uniform_holds(&all, k) && holds_as_c(k)) {
        return None;
    }
    let timeout_ms = backend.timeout_ms();
    let range_fact: Vec<bool> = function.facts.iter().map(|f| f.kernel_range).collect();
    let at = constraints::solver::in_fresh_context(move || {
        let own = Backend::new(timeout_ms);
        let untyped = s.clone();
        let typed = |s: &mut System| ranges.iter().for_each(|c| s.add(c.clone()));
        let mut all = s.clone();
        typed(&mut all);
        for (i, cs) in facts.iter().enumerate() {
            if cs.is_empty() {
                continue;
            }
            cs.iter().for_each(|c| all.add(c.clone()));
            if matches!(own.check(&all), CheckResult::Unsat) {
                let mut alone = untyped.clone();
                facts[..=i].iter().flatten().for_each(|c| alone.add(c.clone()));
                let by_types = !matches!(own.check(&alone), CheckResult::Unsat);
                // A range fact: the first fact of the program's own after which it fails.
                let forced_by = range_fact[i]
                    .then(|| {
                        (0..i).filter(|&j| !range_fact[j]).find(|&j| {
                            let mut upto = untyped.clone();
                            typed(&mut upto);
                            facts[..=j].iter().chain(std::iter::once(&facts[i])).flatten().for_each(|c| upto.add(c.clone()));
                            matches!(own.check(&upto), CheckResult::Unsat)
                        })
                    })
                    .flatten();
                return Some((i, by_types, forced_by));
            }
        }
        None
    });
    at.map(|(i, by_types, forced_by)| Contradiction { fact: &function.facts[i], by_types, forced_by: forced_by.map(|j| &function.facts[j]) })
}

/// Whether `system` holds where every variable is `2^k`: an exact check by evaluation, a
/// witness that it is consistent.
fn uniform_holds(system: &System, k: u32) -> bool {
    let value = constraints::Rational::from_integer((1i64 << k).into());
    let point = system.vars().iter().map(|v| (v.clone(), value.clone())).collect();
    system.holds_at(&point) == Ok(true)
}
