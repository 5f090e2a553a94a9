//! The labels that tie the access model to the expressions it came from, and the loop
//! counters of a body (the generic walkers live in `strategy::walk`).

use super::*;
pub(super) use crate::strategy::walk::*;

/// Give every subscripted expression of a cached array its own span, so that an access of the
/// model can be traced back to the expression to rewrite.
pub(super) fn label(body: &[Stmt], cache: &[String]) -> Vec<Stmt> {
    let mut next = LABEL_BASE;
    let mut out = body.to_vec();
    for s in out.iter_mut() {
        map_stmt_exprs(s, &mut |x| {
            if let ExprKind::Index { array, .. } = &x.kind {
                if cache.contains(&array.name) {
                    x.span = Span { start: next, end: next + 1 };
                    next += 1;
                }
            }
        });
    }
    out
}

/// The counters of the serial loops in `stmts`.
pub(super) fn loop_counters(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk_stmts(stmts, &mut |s| {
        if let StmtKind::For(l) = &s.kind {
            out.insert(l.var.name.clone());
        }
    });
    out
}

