//! Accumulators across the tile loop (issue 27.2), as PPCG's private promotion: an element a
//! thread loads into a register, updates and stores back within each iteration of a top-level
//! serial loop (the tile loop between the grid and the block), at a subscript that does not
//! change from one iteration to the next, is loaded once before the loop and stored once after.
//!
//! Contract: [`promote`] returns the code, or `None` when nothing applies. It applies to a
//! top-level serial loop `L` of the kernel's body whose body holds, at its top level,
//! - integer declarations `D` whose initialisers read no array, not `L`'s counter and no name
//!   `L` declares or assigns (other than an earlier declaration of `D`), with names declared
//!   nowhere else in the kernel; and
//! - a block that begins with loads `T x = A[i];` and ends with the stores `A[i] = x;` of the
//!   same elements, `A` a global array accessed nowhere else in `L`, each subscript built from
//!   `D`'s names and names `L` neither declares nor assigns.
//!
//! The result hoists `D` before `L`, and wraps `L` in `if (L runs at least once)` with the
//! loads before it and the stores after it. It is the same program: no statement of `L` other
//! than the block touches `A`, so between two iterations the elements hold what the thread
//! stored, and no other thread reads or writes them while `L` runs; `D`'s values are the same in
//! every iteration. The verifier proves the result like any code.

use super::syntax::{e, stmt};
use super::walk::{body_items as items, has_index as reads_array, vars_of as names_in};
use crate::access::assigned_scalars;
use crate::frontend::ast::*;
use crate::kernel::Kernel;
use std::collections::BTreeSet;

/// The code with the accumulators of its first eligible top-level loop promoted.
pub fn promote(kernel: &Kernel) -> Option<Kernel> {
    let shared: BTreeSet<&str> = kernel.shared.iter().map(|s| s.name.as_str()).collect();
    for (i, s) in kernel.body.iter().enumerate() {
        let StmtKind::For(l) = &s.kind else { continue };
        if let Some(replacement) = promote_loop(kernel, l, &shared) {
            let mut out = kernel.clone();
            out.body.splice(i..=i, replacement);
            return Some(out);
        }
    }
    None
}

/// Every name declared anywhere in `stmts`, with repetitions.
fn declarations(stmts: &[Stmt], out: &mut Vec<String>) {
    for s in stmts {
        match &s.kind {
            StmtKind::Decl { vars, .. } => out.extend(vars.iter().map(|d| d.name.name.clone())),
            StmtKind::For(l) => {
                out.push(l.var.name.clone());
                declarations(&items(&l.body), out);
            }
            StmtKind::Block(b) => declarations(b, out),
            StmtKind::If { then_branch, else_branch, .. } => {
                declarations(&items(then_branch), out);
                if let Some(x) = else_branch {
                    declarations(&items(x), out);
                }
            }
            _ => {}
        }
    }
}

fn accesses_of(s: &Stmt, array: &str) -> usize {
    let mut n = 0;
    crate::strategy::walk::walk_exprs(s, &mut |x| n += usize::from(matches!(&x.kind, ExprKind::Index { array: a, .. } if a.name == array)));
    n
}

fn promote_loop(kernel: &Kernel, l: &ForLoop, shared: &BTreeSet<&str>) -> Option<Vec<Stmt>> {
    let body = items(&l.body);
    let mut all_declared = Vec::new();
    declarations(&kernel.body, &mut all_declared);
    let mut inside = Vec::new();
    declarations(&body, &mut inside);
    let assigned: BTreeSet<String> = assigned_scalars(&l.body).into_iter().collect();
    // The hoistable declarations.
    let mut hoisted: BTreeSet<String> = BTreeSet::new();
    let mut hoist_at: Vec<usize> = Vec::new();
    for (k, s) in body.iter().enumerate() {
        let StmtKind::Decl { ty, vars } = &s.kind else { continue };
        let ok = ty.is_integer()
            && vars.iter().all(|d| {
                let uses = names_in(&d.init);
                !reads_array(&d.init)
                    && !uses.contains(&l.var.name)
                    && uses.iter().all(|u| hoisted.contains(u) || (!inside.contains(u) && !assigned.contains(u)))
                    && all_declared.iter().filter(|n| **n == d.name.name).count() == 1
                    && !assigned.contains(&d.name.name)
            });
        if ok {
            hoisted.extend(vars.iter().map(|d| d.name.name.clone()));
            hoist_at.push(k);
        }
    }
    // The block of loads, work and stores.
    for (b, s) in body.iter().enumerate() {
        let StmtKind::Block(block) = &s.kind else { continue };
        let loads: Vec<(ScalarType, String, Expr)> = block
            .iter()
            .map_while(|x| match &x.kind {
                StmtKind::Decl { ty, vars } if vars.len() == 1 && matches!(&vars[0].init.kind, ExprKind::Index { array, .. } if !shared.contains(array.name.as_str())) => Some((*ty, vars[0].name.name.clone(), vars[0].init.clone())),
                _ => None,
            })
            .collect();
        if loads.is_empty() || block.len() < 2 * loads.len() {
            continue;
        }
        let stores = &block[block.len() - loads.len()..];
        let matched = stores.iter().all(|st| match &st.kind {
            StmtKind::Assign { target, op: AssignOp::Set, value } => loads.iter().any(|(_, x, at)| target == at && matches!(&value.kind, ExprKind::Var(v) if v == x)),
            _ => false,
        });
        let arrays: BTreeSet<String> = loads.iter().filter_map(|(_, _, at)| if let ExprKind::Index { array, .. } = &at.kind { Some(array.name.clone()) } else { None }).collect();
        let invariant = loads.iter().all(|(_, _, at)| names_in(at).iter().all(|u| hoisted.contains(u) || (!inside.contains(u) && !assigned.contains(u) && *u != l.var.name)));
        let alone = arrays.iter().all(|a| accesses_of(&l.body, a) == 2 * loads.len() && loads.iter().filter(|(_, _, at)| matches!(&at.kind, ExprKind::Index { array, .. } if &array.name == a)).count() * 2 == accesses_of(&l.body, a));
        let distinct = loads.iter().map(|(_, _, at)| format!("{at:?}")).collect::<BTreeSet<_>>().len() == loads.len();
        if !(matched && invariant && alone && distinct) {
            continue;
        }
        // The loop without the hoisted declarations, the block without its loads and stores.
        let middle: Vec<Stmt> = block[loads.len()..block.len() - loads.len()].to_vec();
        let mut new_body: Vec<Stmt> = Vec::new();
        for (k, x) in body.iter().enumerate() {
            if hoist_at.contains(&k) {
                continue;
            }
            new_body.push(if k == b { stmt(StmtKind::Block(middle.clone())) } else { x.clone() });
        }
        let mut lp = l.clone();
        lp.body = Box::new(stmt(StmtKind::Block(new_body)));
        let mut guarded: Vec<Stmt> = loads.iter().map(|(ty, x, at)| stmt(StmtKind::Decl { ty: *ty, vars: vec![Declarator { name: Ident { name: x.clone(), span: Default::default() }, init: at.clone() }] })).collect();
        guarded.push(stmt(StmtKind::For(lp)));
        guarded.extend(stores.iter().cloned());
        let runs = e(ExprKind::Binary(if l.inclusive { BinOp::Le } else { BinOp::Lt }, Box::new(l.lo.clone()), Box::new(l.hi.clone())));
        let mut out: Vec<Stmt> = hoist_at.iter().map(|k| body[*k].clone()).collect();
        out.push(stmt(StmtKind::If { cond: runs, then_branch: Box::new(stmt(StmtKind::Block(guarded))), else_branch: None }));
        return Some(out);
    }
    None
}
