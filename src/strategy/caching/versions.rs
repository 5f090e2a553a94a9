//! Versions: the scope split on conditions every thread of a block evaluates alike
//! (parameters; with no loop between the grid and block groups, grid counters too), so that
//! each branch gets its own tiles, and a block stages only what its branch reads.

use super::*;

pub(super) enum Versions {
    One(Vec<Stmt>),
    Split(Expr, Box<Versions>, Box<Versions>),
}

impl Versions {
    /// Each version's body, with the conditions that choose it (`(c, true)`: `c` holds), in
    /// the order [`Versions::rebuild`] takes them.
    pub(super) fn leaves(&self) -> Vec<(Vec<(Expr, bool)>, &Vec<Stmt>)> {
        match self {
            Versions::One(b) => vec![(Vec::new(), b)],
            Versions::Split(c, t, f) => {
                let mut v = Vec::new();
                for (side, holds) in [(t, true), (f, false)] {
                    for (mut path, body) in side.leaves() {
                        path.insert(0, (c.clone(), holds));
                        v.push((path, body));
                    }
                }
                v
            }
        }
    }

    /// The scope with each version's body replaced by the next emitted one, in leaf order.
    pub(super) fn rebuild(&self, emitted: &mut dyn Iterator<Item = Result<Vec<Stmt>, String>>) -> Option<Result<Vec<Stmt>, String>> {
        match self {
            Versions::One(_) => emitted.next(),
            Versions::Split(cond, t, f) => {
                let t = match t.rebuild(emitted)? {
                    Ok(t) => t,
                    Err(x) => return Some(Err(x)),
                };
                let f = match f.rebuild(emitted)? {
                    Ok(f) => f,
                    Err(x) => return Some(Err(x)),
                };
                // (A branch that does nothing, a guard's other side with at most the body's
                // declarations before it, is left out.)
                let idle = f.iter().all(does_nothing);
                Some(Ok(vec![st(StmtKind::If {
                    cond: cond.clone(),
                    then_branch: Box::new(st(StmtKind::Block(t))),
                    else_branch: (!idle).then(|| Box::new(st(StmtKind::Block(f)))),
                })]))
            }
        }
    }
}

pub(super) fn mentions_array(s: &Stmt, arrays: &[String]) -> bool {
    let mut found = false;
    walk_exprs(s, &mut |x| {
        if let ExprKind::Index { array, .. } = &x.kind {
            found |= arrays.contains(&array.name);
        }
    });
    found
}

pub(super) fn declared_names(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut out = loop_counters(stmts);
    walk_stmts(stmts, &mut |s| {
        if let StmtKind::Decl { vars, .. } = &s.kind {
            out.extend(vars.iter().map(|d| d.name.name.clone()));
        }
    });
    out
}

/// A condition every thread evaluates alike: only uniform names, no array, no CUDA index.
pub(super) fn is_uniform(cond: &Expr, uniform: &BTreeSet<String>, local: &BTreeSet<String>) -> bool {
    let mut ok = true;
    walk_expr(cond, &mut |x| match &x.kind {
        ExprKind::Var(n) => ok &= uniform.contains(n) && !local.contains(n),
        ExprKind::Index { .. } | ExprKind::Builtin(_) | ExprKind::Call(..) => ok = false,
        _ => {}
    });
    ok
}

pub(super) fn split_versions(scope: &[Stmt], uniform: &BTreeSet<String>, cache: &[String], splits_left: usize) -> Versions {
    if splits_left == 0 {
        return Versions::One(scope.to_vec());
    }
    // A name the scope declares or assigns varies within the block.
    let mut local = declared_names(scope);
    local.extend(assigned_in(scope));
    match split_first(scope, uniform, &local, cache) {
        Some((cond, t, f)) => Versions::Split(
            cond,
            Box::new(split_versions(&t, uniform, cache, splits_left - 1)),
            Box::new(split_versions(&f, uniform, cache, splits_left - 1)),
        ),
        None => Versions::One(scope.to_vec()),
    }
}

pub(super) type Split = (Expr, Vec<Stmt>, Vec<Stmt>);

pub(super) fn split_first(stmts: &[Stmt], uniform: &BTreeSet<String>, local: &BTreeSet<String>, cache: &[String]) -> Option<Split> {
    for (i, s) in stmts.iter().enumerate() {
        if let Some((c, t, f)) = split_stmt(s, uniform, local, cache) {
            let (mut tv, mut fv) = (stmts.to_vec(), stmts.to_vec());
            tv[i] = t;
            fv[i] = f;
            return Some((c, tv, fv));
        }
    }
    None
}

pub(super) fn split_stmt(s: &Stmt, uniform: &BTreeSet<String>, local: &BTreeSet<String>, cache: &[String]) -> Option<(Expr, Stmt, Stmt)> {
    let wrap = |kind: StmtKind| Stmt { kind, span: s.span };
    match &s.kind {
        StmtKind::If { cond, then_branch, else_branch } if is_uniform(cond, uniform, local) && mentions_array(s, cache) => {
            let f = else_branch.as_ref().map_or(st(StmtKind::Empty), |x| (**x).clone());
            Some((cond.clone(), (**then_branch).clone(), f))
        }
        // `if (w == v && u < B) X else Y` is `if (w == v) { if (u < B) X else Y } else Y`:
        // split on the uniform conjunct.
        StmtKind::If { cond, then_branch, else_branch } if mentions_array(s, cache) && cond.conjuncts().iter().any(|c| is_uniform(c, uniform, local)) && cond.conjuncts().len() > 1 => {
            let conjuncts = cond.conjuncts();
            let k = conjuncts.iter().position(|c| is_uniform(c, uniform, local))?;
            let rest = conjuncts.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, c)| (*c).clone()).reduce(|a, b| bin(BinOp::And, a, b))?;
            let f = else_branch.as_ref().map_or(st(StmtKind::Empty), |x| (**x).clone());
            let t = wrap(StmtKind::If { cond: rest, then_branch: then_branch.clone(), else_branch: else_branch.clone() });
            Some((conjuncts[k].clone(), t, f))
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            if let Some((c, t, f)) = split_stmt(then_branch, uniform, local, cache) {
                let mk = |b: Stmt| wrap(StmtKind::If { cond: cond.clone(), then_branch: Box::new(b), else_branch: else_branch.clone() });
                return Some((c, mk(t), mk(f)));
            }
            let (c, t, f) = split_stmt(else_branch.as_ref()?, uniform, local, cache)?;
            let mk = |b: Stmt| wrap(StmtKind::If { cond: cond.clone(), then_branch: then_branch.clone(), else_branch: Some(Box::new(b)) });
            Some((c, mk(t), mk(f)))
        }
        StmtKind::Block(items) => {
            let (c, t, f) = split_first(items, uniform, local, cache)?;
            Some((c, wrap(StmtKind::Block(t)), wrap(StmtKind::Block(f))))
        }
        StmtKind::For(l) => {
            let (c, t, f) = split_stmt(&l.body, uniform, local, cache)?;
            let mk = |b: Stmt| wrap(StmtKind::For(ForLoop { body: Box::new(b), ..l.clone() }));
            Some((c, mk(t), mk(f)))
        }
        _ => None,
    }
}

/// Whether `s` has no effect: nothing, an empty block, or declarations whose values read no
/// array and call nothing.
pub(super) fn does_nothing(s: &Stmt) -> bool {
    let pure = |x: &Expr| {
        let mut ok = true;
        walk_expr(x, &mut |y| ok &= !matches!(y.kind, ExprKind::Index { .. } | ExprKind::Call(..)));
        ok
    };
    match &s.kind {
        StmtKind::Empty => true,
        StmtKind::Block(items) => items.iter().all(does_nothing),
        StmtKind::Decl { vars, .. } => vars.iter().all(|d| pure(&d.init)),
        _ => false,
    }
}
