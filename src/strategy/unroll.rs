//! Unrolling a serial loop by a factor (issue 7), with the trip-count condition as a constraint.
//!
//! Contract: [`unroll`] takes the first innermost serial loop of the schedule's body (not one
//! of the `between` loops, which carry the staging barriers) whose step is 1, whose counter the
//! body does not assign, and whose trip count is a polynomial `t` in the integer parameters, and
//! rewrites `for (k = lo; k < hi; k++) S(k)` as
//! `for (k = lo; k < hi - (F-1); k += F) { {S(k)} {S(k+1)} ... {S(k+F-1)} }` with no remainder
//! loop. That is the same program exactly where `t % F == 0` (the iterations are the same, in the
//! same order), which is the condition [`Unrolled::trip_count`] carries: the tree forks on it and
//! takes the unrolled code only on its side. The bound `hi - (F-1)` keeps every copy's counter
//! below `hi` even in the access model's view of the loop, which ignores the step, so the
//! verifier's bounds proofs go through without the divisibility. Each copy is its own block, so
//! locals the body declares stay local to their copy.

use super::walk::{contains_loop, map_stmt_exprs};
use crate::access::{assigned_scalars, has_barrier};
use crate::frontend::ast::*;
use super::syntax::e;
use crate::frontend::model::KernelFunction;
use crate::kernel::Kernel;
use constraints::{Constraint, Poly};

/// The unrolling factor.
pub const FACTOR: u32 = 4;

/// The unrolled code and the condition under which it is the original program.
#[derive(Clone, Debug)]
pub struct Unrolled {
    pub kernel: Kernel,
    /// `t % FACTOR == 0` for the loop's trip count `t`.
    pub trip_count: Constraint,
    /// The loop's counter, for messages.
    pub counter: String,
}

/// The loop's trip count as a polynomial in the integer parameters (derived scalars expanded),
/// or `None`.
pub(crate) fn trip_count(function: &KernelFunction, l: &ForLoop) -> Option<Poly> {
    if l.step != 1 {
        return None;
    }
    let derived = function.derived_polys();
    let lo = crate::frontend::polyexpr::to_poly(&l.lo, &derived)?;
    let hi = crate::frontend::polyexpr::to_poly(&l.hi, &derived)?;
    let trip = if l.inclusive { hi - lo + Poly::one() } else { hi - lo };
    let params: Vec<&str> = function.params.iter().filter(|p| p.role != crate::frontend::model::Role::Array && p.ty.is_integer()).map(|p| p.name.as_str()).collect();
    trip.vars().iter().all(|v| params.contains(&v.name())).then_some(trip)
}

/// Rewrites the first innermost serial loop, outside the first `between` loops of the spine,
/// that `f` accepts (`Some` replacement); whether one was rewritten.
pub(crate) fn rewrite_inner_loop(stmts: &mut [Stmt], between: usize, f: &mut dyn FnMut(&ForLoop) -> Option<Stmt>) -> bool {
    for s in stmts.iter_mut() {
        let done = match &mut s.kind {
            StmtKind::For(l) if between > 0 => rewrite_inner_loop(std::slice::from_mut(&mut *l.body), between - 1, f),
            StmtKind::For(l) if !contains_loop(&l.body) => match f(l) {
                Some(new) => {
                    *s = new;
                    true
                }
                None => false,
            },
            StmtKind::For(l) => rewrite_inner_loop(std::slice::from_mut(&mut *l.body), 0, f),
            StmtKind::Block(items) => rewrite_inner_loop(items, between, f),
            StmtKind::If { then_branch, else_branch, .. } => {
                rewrite_inner_loop(std::slice::from_mut(&mut **then_branch), between, f) || else_branch.as_mut().is_some_and(|x| rewrite_inner_loop(std::slice::from_mut(&mut **x), between, f))
            }
            _ => false,
        };
        if done {
            return true;
        }
    }
    false
}

/// The kernel with its first eligible loop unrolled by [`FACTOR`], or `None` when no loop is
/// eligible (or the trip count is a constant that `FACTOR` does not divide).
pub fn unroll(function: &KernelFunction, kernel: &Kernel) -> Option<Unrolled> {
    let mut k = kernel.clone();
    let mut found = None;
    let rewritten = rewrite_inner_loop(&mut k.body, kernel.between, &mut |l| {
        let trip = trip_count(function, l)?;
        if has_barrier(&l.body) || assigned_scalars(&l.body).contains(&l.var.name) {
            return None;
        }
        let condition = Constraint::divides(FACTOR, &trip);
        if condition.truth_if_constant() == Some(false) {
            return None;
        }
        let counter = || e(ExprKind::Var(l.var.name.clone()));
        let copies = (0..FACTOR)
            .map(|j| {
                let mut copy = (*l.body).clone();
                if j > 0 {
                    map_stmt_exprs(&mut copy, &mut |x| {
                        if matches!(&x.kind, ExprKind::Var(n) if *n == l.var.name) {
                            *x = e(ExprKind::Binary(BinOp::Add, Box::new(counter()), Box::new(e(ExprKind::Int(i64::from(j))))));
                        }
                    });
                }
                Stmt { kind: StmtKind::Block(vec![copy]), span: Default::default() }
            })
            .collect();
        let hi = e(ExprKind::Binary(BinOp::Sub, Box::new(l.hi.clone()), Box::new(e(ExprKind::Int(i64::from(FACTOR) - 1)))));
        let new = ForLoop { hi, step: i64::from(FACTOR), body: Box::new(Stmt { kind: StmtKind::Block(copies), span: Default::default() }), ..l.clone() };
        found = Some((condition, l.var.name.clone()));
        Some(Stmt { kind: StmtKind::For(new), span: Default::default() })
    });
    let (trip_count, counter) = found.filter(|_| rewritten)?;
    Some(Unrolled { kernel: k, trip_count, counter })
}
