//! Prefetching a reused global value into a register (issue 7): scalar replacement of an
//! array element that a serial loop reads (and may update) at the same index in every
//! iteration, such as matrix multiplication's `c[p][q + w*ub1] += ...` inside the loop over `z`.
//!
//! Contract: [`prefetch`] takes the first innermost serial loop of the schedule's body (not a
//! `between` loop) that has such elements and rewrites
//! `for (...) { ... a[i] += ...; ... }` as `{ T a_reg = a[i]; for (...) { ... a_reg += ...; ... } a[i] = a_reg; }`
//! (the write-back only when the loop writes the element). An element qualifies when every
//! access of its array in the loop has the same index, that index reads no variable the loop
//! declares or assigns (its counter included), no access sits under a condition (so the load
//! before the loop happens exactly when the loop's first access would), no access adds to it
//! atomically (a reduction's element: other threads add to it meanwhile), the loop has no barrier,
//! and the loop runs at least once wherever the program's facts hold (Z3 proves `t >= 1` for its
//! polynomial trip count `t`). Arrays are distinct objects, so no other access can see the
//! element between the load and the write-back; other threads cannot either without a race the
//! original already had (the verifier checks every leaf).

use super::unroll::{rewrite_inner_loop, trip_count};
use super::walk::{map_stmt_exprs, uses_any, walk_exprs, walk_stmts};
use crate::access::{assigned_scalars, has_barrier};
use crate::frontend::ast::*;
use super::syntax::{e, stmt};
use crate::frontend::model::KernelFunction;
use crate::kernel::{Kernel, KernelParamKind};
use constraints::solver::{Backend, Implication};
use constraints::{Constraint, Poly};
use std::collections::BTreeSet;

/// Every name the kernel's code uses or declares, so a new register's name avoids them.
fn names(kernel: &Kernel) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
    walk_stmts(&kernel.body, &mut |s| {
        match &s.kind {
            StmtKind::Decl { vars, .. } => out.extend(vars.iter().map(|d| d.name.name.clone())),
            StmtKind::For(l) => {
                out.insert(l.var.name.clone());
            }
            _ => {}
        }
        walk_exprs(s, &mut |x| {
            if let ExprKind::Var(n) = &x.kind {
                out.insert(n.clone());
            }
        });
    });
    out
}

/// The variables a loop declares or assigns, its counter included.
fn loop_variant(l: &ForLoop) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = assigned_scalars(&l.body).into_iter().collect();
    out.insert(l.var.name.clone());
    walk_stmts(std::slice::from_ref(&*l.body), &mut |s| {
        if let StmtKind::Decl { vars, .. } = &s.kind {
            out.extend(vars.iter().map(|d| d.name.name.clone()));
        }
    });
    out
}

/// For each array the loop accesses: its distinct index lists, whether any access is
/// conditional, whether it is written.
#[derive(Default)]
struct Use {
    /// One access per distinct index (by text).
    indices: Vec<Expr>,
    conditional: bool,
    written: bool,
    /// Some access adds to it atomically (a reduction): other threads add to the same element
    /// meanwhile, so a register copy would lose their additions.
    atomic: bool,
}

fn collect(s: &Stmt, conditional: bool, uses: &mut std::collections::BTreeMap<String, Use>) {
    let note = |x: &Expr, written: bool, conditional: bool, uses: &mut std::collections::BTreeMap<String, Use>| {
        let mut visit = |y: &Expr, under_cond: bool| {
            if let ExprKind::Index { array, .. } = &y.kind {
                let u = uses.entry(array.name.clone()).or_default();
                // Source spans differ between accesses: compare the text.
                if !u.indices.iter().any(|known| known.to_string() == y.to_string()) {
                    u.indices.push(y.clone());
                }
                u.conditional |= conditional || under_cond;
            }
        };
        walk_conditional(x, false, &mut visit);
        if written {
            if let ExprKind::Index { array, .. } = &x.kind {
                uses.entry(array.name.clone()).or_default().written = true;
            }
        }
    };
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| note(&d.init, false, conditional, uses)),
        StmtKind::Assign { target, op, value } => {
            note(target, true, conditional, uses);
            note(value, false, conditional, uses);
            if let (AssignOp::AtomicAdd, ExprKind::Index { array, .. }) = (op, &target.kind) {
                uses.entry(array.name.clone()).or_default().atomic = true;
            }
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            note(cond, false, conditional, uses);
            collect(then_branch, true, uses);
            if let Some(x) = else_branch {
                collect(x, true, uses);
            }
        }
        StmtKind::Block(items) => items.iter().for_each(|x| collect(x, conditional, uses)),
        StmtKind::For(l) => {
            note(&l.lo, false, conditional, uses);
            note(&l.hi, false, conditional, uses);
            collect(&l.body, true, uses);
        }
        _ => {}
    }
}

/// Visit `x`'s sub-expressions with whether they sit in a branch of a `?:` (evaluated only
/// conditionally).
fn walk_conditional(x: &Expr, under: bool, f: &mut dyn FnMut(&Expr, bool)) {
    f(x, under);
    match &x.kind {
        ExprKind::Index { indices, .. } => indices.iter().for_each(|i| walk_conditional(i, under, f)),
        ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => walk_conditional(a, under, f),
        ExprKind::Binary(op, a, b) => {
            walk_conditional(a, under, f);
            // `&&` and `||` evaluate their right operand only sometimes.
            walk_conditional(b, under || matches!(op, BinOp::And | BinOp::Or), f);
        }
        ExprKind::Cond(c, a, b) => {
            walk_conditional(c, under, f);
            walk_conditional(a, true, f);
            walk_conditional(b, true, f);
        }
        ExprKind::Call(_, args) => args.iter().for_each(|a| walk_conditional(a, under, f)),
        _ => {}
    }
}

/// The kernel with the reused elements of its first eligible loop held in registers, or
/// `None` when no loop has one.
pub fn prefetch(function: &KernelFunction, kernel: &Kernel, backend: &Backend) -> Option<Kernel> {
    let context = super::base_context(function);
    let mut taken = names(kernel);
    let mut k = kernel.clone();
    let rewritten = rewrite_inner_loop(&mut k.body, kernel.between, &mut |l| {
        if has_barrier(&l.body) {
            return None;
        }
        let trip = trip_count(function, l)?;
        let runs = Constraint::ge(&trip, &Poly::one());
        if runs.truth_if_constant() != Some(true) && !matches!(backend.implies(&context, &runs), Implication::Proved) {
            return None;
        }
        let variant = loop_variant(l);
        let mut uses = std::collections::BTreeMap::new();
        collect(&l.body, false, &mut uses);
        let mut prologue = Vec::new();
        let mut epilogue = Vec::new();
        let mut body = (*l.body).clone();
        for (array, u) in uses {
            let Some(KernelParamKind::Array { elem, .. }) = kernel.param(&array).map(|p| &p.kind) else { continue };
            let [element] = u.indices.as_slice() else { continue };
            let ExprKind::Index { indices, .. } = &element.kind else { continue };
            if u.conditional || u.atomic || indices.iter().any(|i| uses_any(i, &variant) || super::walk::has_index(i)) {
                continue;
            }
            let text = element.to_string();
            let mut name = crate::names::readable(&format!("{array}_reg"));
            while taken.contains(&name) {
                name.push('_');
            }
            taken.insert(name.clone());
            map_stmt_exprs(&mut body, &mut |x| {
                if matches!(x.kind, ExprKind::Index { .. }) && x.to_string() == text {
                    *x = e(ExprKind::Var(name.clone()));
                }
            });
            prologue.push(stmt(StmtKind::Decl { ty: *elem, vars: vec![Declarator { name: Ident { name: name.clone(), span: Default::default() }, init: element.clone() }] }));
            if u.written {
                epilogue.push(stmt(StmtKind::Assign { target: element.clone(), op: AssignOp::Set, value: e(ExprKind::Var(name)) }));
            }
        }
        if prologue.is_empty() {
            return None;
        }
        let mut items = prologue;
        items.push(stmt(StmtKind::For(ForLoop { body: Box::new(body), ..l.clone() })));
        items.extend(epilogue);
        Some(stmt(StmtKind::Block(items)))
    });
    rewritten.then_some(k)
}
