//! Walkers over kernel statements and expressions, shared by the strategies.
//!
//! Contract: `walk_*` visit (parents before children), `map_*` rewrite in place (children
//! before parents); statements are visited into blocks, both branches and loop bodies (`walk_*`
//! also into `meta_for` loops and `meta_schedule`s, so they serve a function's body too).

use crate::frontend::ast::*;
use std::collections::BTreeSet;

pub(crate) use crate::frontend::ast::walk_expr;

pub(crate) fn walk_exprs(s: &Stmt, f: &mut dyn FnMut(&Expr)) {
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| walk_expr(&d.init, f)),
        StmtKind::Assign { target, value, .. } => {
            walk_expr(target, f);
            walk_expr(value, f);
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            walk_expr(cond, f);
            walk_exprs(then_branch, f);
            if let Some(x) = else_branch {
                walk_exprs(x, f);
            }
        }
        StmtKind::Block(items) => items.iter().for_each(|x| walk_exprs(x, f)),
        StmtKind::For(l) | StmtKind::MetaFor(l) => {
            walk_expr(&l.lo, f);
            walk_expr(&l.hi, f);
            walk_exprs(&l.body, f);
        }
        StmtKind::MetaSchedule { body, .. } => walk_exprs(body, f),
        _ => {}
    }
}

pub(crate) fn map_expr(x: &mut Expr, f: &mut dyn FnMut(&mut Expr)) {
    match &mut x.kind {
        ExprKind::Index { indices, .. } => indices.iter_mut().for_each(|i| map_expr(i, f)),
        ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => map_expr(a, f),
        ExprKind::Binary(_, a, b) => {
            map_expr(a, f);
            map_expr(b, f);
        }
        ExprKind::Cond(c, a, b) => {
            map_expr(c, f);
            map_expr(a, f);
            map_expr(b, f);
        }
        ExprKind::Call(_, args) => args.iter_mut().for_each(|a| map_expr(a, f)),
        _ => {}
    }
    f(x);
}

pub(crate) fn map_stmt_exprs(s: &mut Stmt, f: &mut dyn FnMut(&mut Expr)) {
    match &mut s.kind {
        StmtKind::Decl { vars, .. } => vars.iter_mut().for_each(|d| map_expr(&mut d.init, f)),
        StmtKind::Assign { target, value, .. } => {
            map_expr(value, f);
            map_expr(target, f);
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            map_expr(cond, f);
            map_stmt_exprs(then_branch, f);
            if let Some(x) = else_branch {
                map_stmt_exprs(x, f);
            }
        }
        StmtKind::Block(items) => items.iter_mut().for_each(|x| map_stmt_exprs(x, f)),
        StmtKind::For(l) => {
            map_expr(&mut l.lo, f);
            map_expr(&mut l.hi, f);
            map_stmt_exprs(&mut l.body, f);
        }
        _ => {}
    }
}

/// Visit every statement, nested ones included (blocks, both branches, loop bodies).
pub(crate) fn walk_stmts(stmts: &[Stmt], f: &mut dyn FnMut(&Stmt)) {
    for s in stmts {
        f(s);
        match &s.kind {
            StmtKind::Block(items) => walk_stmts(items, f),
            StmtKind::If { then_branch, else_branch, .. } => {
                walk_stmts(std::slice::from_ref(then_branch), f);
                if let Some(x) = else_branch {
                    walk_stmts(std::slice::from_ref(x), f);
                }
            }
            StmtKind::For(l) | StmtKind::MetaFor(l) => walk_stmts(std::slice::from_ref(&l.body), f),
            StmtKind::MetaSchedule { body, .. } => walk_stmts(std::slice::from_ref(body), f),
            _ => {}
        }
    }
}

/// Whether `s` is or contains a loop (serial or parallel).
pub(crate) fn contains_loop(s: &Stmt) -> bool {
    let mut found = false;
    walk_stmts(std::slice::from_ref(s), &mut |x| found |= matches!(x.kind, StmtKind::For(_) | StmtKind::MetaFor(_)));
    found
}

/// Every variable name `e` reads.
pub(crate) fn vars_of(e: &Expr) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk_expr(e, &mut |x| {
        if let ExprKind::Var(n) = &x.kind {
            out.insert(n.clone());
        }
    });
    out
}

/// The statements of a loop or branch body: a block's items, or the statement alone.
pub(crate) fn body_items(s: &Stmt) -> Vec<Stmt> {
    match &s.kind {
        StmtKind::Block(items) => items.clone(),
        _ => vec![s.clone()],
    }
}

pub(crate) fn has_index(x: &Expr) -> bool {
    let mut found = false;
    walk_expr(x, &mut |y| found |= matches!(y.kind, ExprKind::Index { .. }));
    found
}

pub(crate) fn uses_any(x: &Expr, names: &BTreeSet<String>) -> bool {
    let mut found = false;
    walk_expr(x, &mut |y| {
        if let ExprKind::Var(n) = &y.kind {
            found |= names.contains(n);
        }
    });
    found
}
