//! Which arrays' contents an access's subscripts depend on, within a schedule's body: read in
//! the subscript itself (`x[idx[i]]`), or through a local scalar or a loop counter whose value
//! or bounds read one (`int c = cols[k]; ... x[c]`, `for (j = ptr[i]; j < ptr[i + 1]; j++)`),
//! at any depth.
//!
//! Contract: syntactic and conservative in one direction only: an array named here is one
//! whose contents the subscript's value can depend on; `None` says the subscript is fixed by
//! the parameters and the `meta_for` counters. `gen`'s check of a schedule as written fills
//! the arrays with values of its choosing, so an access it finds outside its array through
//! such a subscript is one the user's data may or may not make, and its message says so.

use crate::frontend::ast::{walk_expr, Expr, ExprKind, Stmt, StmtKind};
use crate::strategy::walk::{walk_exprs, walk_stmts};
use std::collections::BTreeMap;

/// The first array access of `body` printed as `site` (walked as [`walk_exprs`] does).
pub fn access(body: &[Stmt], site: &str) -> Option<Expr> {
    let mut found = None;
    for s in body {
        walk_exprs(s, &mut |x| {
            if found.is_none() && matches!(x.kind, ExprKind::Index { .. }) && x.to_string() == site {
                found = Some(x.clone());
            }
        });
    }
    found
}

/// The first array (in subscript order) whose contents a subscript of the access of `body`
/// printed as `site` depends on.
pub fn subscript_source(body: &[Stmt], site: &str) -> Option<String> {
    let ExprKind::Index { indices, .. } = access(body, site)?.kind else { return None };
    let tainted = tainted_scalars(body);
    indices.iter().find_map(|i| source_of(i, &tainted))
}

/// The first array whose contents `e`'s value depends on, given the scalars already known to
/// depend on one.
fn source_of(e: &Expr, tainted: &BTreeMap<String, String>) -> Option<String> {
    let mut found = None;
    walk_expr(e, &mut |x| {
        if found.is_none() {
            found = match &x.kind {
                ExprKind::Index { array, .. } => Some(array.name.clone()),
                ExprKind::Var(v) => tainted.get(v).cloned(),
                _ => None,
            };
        }
    });
    found
}

/// Each local scalar or loop counter of `body` whose value can depend on an array's contents,
/// with that array: a fixed point, since a scalar may be assigned after its first use.
fn tainted_scalars(body: &[Stmt]) -> BTreeMap<String, String> {
    let mut tainted: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let before = tainted.len();
        let mut found: Vec<(String, String)> = Vec::new();
        walk_stmts(body, &mut |s| match &s.kind {
            StmtKind::Decl { vars, .. } => {
                found.extend(vars.iter().filter_map(|d| source_of(&d.init, &tainted).map(|a| (d.name.name.clone(), a))));
            }
            StmtKind::Assign { target: Expr { kind: ExprKind::Var(v), .. }, value, .. } => {
                found.extend(source_of(value, &tainted).map(|a| (v.clone(), a)));
            }
            StmtKind::For(l) | StmtKind::MetaFor(l) => {
                found.extend(source_of(&l.lo, &tainted).or_else(|| source_of(&l.hi, &tainted)).map(|a| (l.var.name.clone(), a)));
            }
            _ => {}
        });
        for (name, array) in found {
            tainted.entry(name).or_insert(array);
        }
        if tainted.len() == before {
            return tainted;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(src: &str) -> Vec<Stmt> {
        let program = crate::frontend::check_source("t.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
        program.kernels[0].schedules[0].body.clone()
    }

    #[test]
    fn a_subscript_read_from_an_array_directly_or_through_scalars_and_bounds_is_found() {
        let src = "void k(int N, int M, int B, const int idx[N], const int ptr[N + 1], const float x[M], float y[N], float z[N]) {\n\
                   assume(N >= 1 && M >= 1 && B >= 1 && N % B == 0);\n\
                   meta_schedule { meta_for (int g = 0; g < N / B; g++) meta_for (int t = 0; t < B; t++) {\n\
                   int i = g * B + t;\n\
                   y[i] = x[idx[i]];\n\
                   int c = 0; c = idx[i] + 1; int d = c * 2;\n\
                   z[i] = x[d];\n\
                   for (int j = ptr[i]; j < ptr[i + 1]; j++) z[i] = z[i] + x[j];\n\
                   } }\n}\n";
        let body = body_of(src);
        assert_eq!(subscript_source(&body, "x[idx[i]]").as_deref(), Some("idx"));
        assert_eq!(subscript_source(&body, "x[d]").as_deref(), Some("idx"), "through two scalars, one assigned after its declaration");
        assert_eq!(subscript_source(&body, "x[j]").as_deref(), Some("ptr"), "through a loop's bounds");
        assert_eq!(subscript_source(&body, "idx[i]"), None, "the counters and parameters alone");
        assert_eq!(subscript_source(&body, "y[i]"), None);
        assert_eq!(subscript_source(&body, "w[i]"), None, "no such access");
    }
}
