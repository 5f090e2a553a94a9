//! Common sub-expression elimination (the paper's strategy O_3), source level, on the code
//! that runs (after staging), in two levels.
//!
//! - **Level 1**: within a straight-line run of declarations and assignments, an array element
//!   read two or more times is read once into a local (`metafork_cseN`) at its first,
//!   unconditional, read. A run ends at any other statement (a branch, a loop, a barrier); an
//!   element's local ends with the first statement that writes its array (any element: two
//!   subscripts may be equal) or assigns or redeclares a variable of its subscript.
//! - **Level 2**: level 1, plus scalar replacement across a serial loop without barriers: an
//!   array accessed in the loop only at one subscript that the loop does not change, only in
//!   the loop body's own declarations and assignments, at least once unconditionally, is held
//!   in a local for the whole loop: read before it, written back after it when the loop writes
//!   it, both under the loop's own entry test (`if (lo < hi)`), so a loop that runs no
//!   iteration touches nothing.
//!
//! Why these preserve the meaning: distinct arrays never overlap (the program's arrays are
//! distinct parameters, tiles distinct shared arrays), so only a write to the same array, or a
//! change of a subscript's variables, can change an element's value between two reads; a
//! subscript with an array read in it is never a candidate. Another thread could observe the
//! delayed write only through an access to the same element with no barrier in between: a race
//! in the original program already. Expressions have no side effects in the language.
//!
//! LLVM's GVN already merges reads with no store in between; what it cannot do without alias
//! information is keep a value across a store to another array, or promote an element to a
//! register across a loop that stores to other arrays. That is what these levels add: fewer
//! memory operations (matrix multiplication's accumulator leaves memory for the `k` loop).

use crate::frontend::ast::*;
use super::syntax::{ident, stmt as st};
use crate::kernel::{Kernel, KernelParamKind};
use crate::strategy::walk::{has_index, map_expr, map_stmt_exprs, vars_of, walk_expr, walk_stmts};
use std::collections::{BTreeMap, BTreeSet};

/// `kernel` with common sub-expressions eliminated at `level` (0 leaves it unchanged).
pub fn eliminate(kernel: &Kernel, level: u8) -> Kernel {
    let mut elem: BTreeMap<String, ScalarType> = kernel.shared.iter().map(|s| (s.name.clone(), s.elem)).collect();
    for p in &kernel.params {
        if let KernelParamKind::Array { elem: t, .. } = &p.kind {
            elem.insert(p.name.clone(), *t);
        }
    }
    let mut k = kernel.clone();
    if level == 0 {
        return k;
    }
    let mut cse = Cse { elem, next: 0, level };
    k.body = cse.block(&kernel.body);
    k
}

struct Cse {
    elem: BTreeMap<String, ScalarType>,
    next: usize,
    level: u8,
}

/// One array read in a statement.
struct Read {
    array: String,
    /// The printed access, `a[i][j + 1]`: equal keys are the same element.
    key: String,
    expr: Expr,
    /// Inside a `?:` branch or the right operand of `&&`/`||`.
    conditional: bool,
}

/// An element held in a local for the rest of a run.
struct Held {
    array: String,
    key: String,
    vars: BTreeSet<String>,
    local: String,
}

fn var(name: &str) -> Expr {
    Expr::new(ExprKind::Var(name.to_string()), Default::default())
}

fn is_simple(s: &Stmt) -> bool {
    matches!(s.kind, StmtKind::Decl { .. } | StmtKind::Assign { .. })
}

fn declared(s: &Stmt) -> BTreeSet<String> {
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().map(|d| d.name.name.clone()).collect(),
        _ => BTreeSet::new(),
    }
}

/// The array a statement writes, and the scalar it assigns.
fn written(s: &Stmt) -> (Option<String>, Option<String>) {
    match &s.kind {
        StmtKind::Assign { target, .. } => match &target.kind {
            ExprKind::Index { array, .. } => (Some(array.name.clone()), None),
            ExprKind::Var(n) => (None, Some(n.clone())),
            _ => (None, None),
        },
        _ => (None, None),
    }
}

/// The reads of `e` in evaluation order, with whether each is conditional.
fn reads_of(e: &Expr, conditional: bool, out: &mut Vec<Read>) {
    match &e.kind {
        ExprKind::Index { array, indices } => {
            indices.iter().for_each(|i| reads_of(i, conditional, out));
            out.push(Read { array: array.name.clone(), key: e.to_string(), expr: e.clone(), conditional });
        }
        ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => reads_of(a, conditional, out),
        ExprKind::Binary(op, a, b) => {
            reads_of(a, conditional, out);
            reads_of(b, conditional || op.is_logical(), out);
        }
        ExprKind::Cond(c, a, b) => {
            reads_of(c, conditional, out);
            reads_of(a, true, out);
            reads_of(b, true, out);
        }
        ExprKind::Call(_, args) => args.iter().for_each(|a| reads_of(a, conditional, out)),
        ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Var(_) | ExprKind::Builtin(_) => {}
    }
}

/// The reads of a declaration or assignment: initialisers, the assigned value, the target's
/// subscripts (a compound assignment's target is read too, but it is written in the same
/// statement, so it is never worth a local).
fn reads(s: &Stmt) -> Vec<Read> {
    let mut out = Vec::new();
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| reads_of(&d.init, false, &mut out)),
        StmtKind::Assign { target, value, .. } => {
            if let ExprKind::Index { indices, .. } = &target.kind {
                indices.iter().for_each(|i| reads_of(i, false, &mut out));
            }
            reads_of(value, false, &mut out);
        }
        _ => {}
    }
    out
}

/// Replace the reads of `key` in a declaration or assignment by `local` (not the target).
fn replace_reads(s: &mut Stmt, key: &str, local: &str) {
    let mut swap = |x: &mut Expr| {
        if matches!(x.kind, ExprKind::Index { .. }) && x.to_string() == key {
            *x = var(local);
        }
    };
    match &mut s.kind {
        StmtKind::Decl { vars, .. } => vars.iter_mut().for_each(|d| map_expr(&mut d.init, &mut swap)),
        StmtKind::Assign { target, value, .. } => {
            if let ExprKind::Index { indices, .. } = &mut target.kind {
                indices.iter_mut().for_each(|i| map_expr(i, &mut swap));
            }
            map_expr(value, &mut swap);
        }
        _ => {}
    }
}

fn contains_barrier(s: &Stmt) -> bool {
    let mut found = false;
    walk_stmts(std::slice::from_ref(s), &mut |x| found |= matches!(x.kind, StmtKind::Barrier));
    found
}

impl Cse {
    fn local(&mut self) -> String {
        let n = crate::names::internal(&format!("cse{}", self.next));
        self.next += 1;
        n
    }

    fn block(&mut self, stmts: &[Stmt]) -> Vec<Stmt> {
        let nested: Vec<Stmt> = stmts.iter().map(|s| self.nested(s)).collect();
        let replaced: Vec<Stmt> = if self.level >= 2 { nested.into_iter().map(|s| self.scalar_replace(s)).collect() } else { nested };
        self.runs(&replaced)
    }

    /// A branch or loop body: a block stays a block; a single statement becomes one when
    /// locals had to be declared for it.
    fn body(&mut self, s: &Stmt) -> Stmt {
        match &s.kind {
            StmtKind::Block(items) => Stmt { kind: StmtKind::Block(self.block(items)), span: s.span },
            _ => {
                let mut out = self.block(std::slice::from_ref(s));
                if out.len() == 1 {
                    out.pop().expect("one statement")
                } else {
                    Stmt { kind: StmtKind::Block(out), span: s.span }
                }
            }
        }
    }

    fn nested(&mut self, s: &Stmt) -> Stmt {
        let kind = match &s.kind {
            StmtKind::Block(items) => StmtKind::Block(self.block(items)),
            StmtKind::If { cond, then_branch, else_branch } => StmtKind::If {
                cond: cond.clone(),
                then_branch: Box::new(self.body(then_branch)),
                else_branch: else_branch.as_ref().map(|e| Box::new(self.body(e))),
            },
            StmtKind::For(l) => StmtKind::For(ForLoop { body: Box::new(self.body(&l.body)), ..l.clone() }),
            _ => return s.clone(),
        };
        Stmt { kind, span: s.span }
    }

    /// Level 1 over one block's statements.
    fn runs(&mut self, stmts: &[Stmt]) -> Vec<Stmt> {
        let mut out = Vec::new();
        let mut held: Vec<Held> = Vec::new();
        for (i, s) in stmts.iter().enumerate() {
            if !is_simple(s) {
                held.clear();
                out.push(s.clone());
                continue;
            }
            let names = declared(s);
            held.retain(|h| h.vars.is_disjoint(&names));
            for r in reads(s) {
                let Some(&ty) = self.elem.get(&r.array) else { continue };
                if r.conditional || held.iter().any(|h| h.key == r.key) || has_subscript_read(&r.expr) {
                    continue;
                }
                let vars = vars_of(&r.expr);
                if occurrences(&stmts[i..], &r, &vars) < 2 {
                    continue;
                }
                let local = self.local();
                out.push(st(StmtKind::Decl { ty, vars: vec![Declarator { name: ident(&local), init: r.expr.clone() }] }));
                held.push(Held { array: r.array, key: r.key, vars, local });
            }
            let mut s = s.clone();
            for h in &held {
                replace_reads(&mut s, &h.key, &h.local);
            }
            let (array, scalar) = written(&s);
            held.retain(|h| Some(&h.array) != array.as_ref() && scalar.as_ref().is_none_or(|v| !h.vars.contains(v)) && h.vars.is_disjoint(&names));
            out.push(s);
        }
        out
    }

    /// Level 2 on one statement: a serial loop whose candidates go to locals.
    fn scalar_replace(&mut self, s: Stmt) -> Stmt {
        let StmtKind::For(l) = &s.kind else { return s };
        // Bounds are evaluated every iteration: one that reads memory would see a stale value.
        if contains_barrier(&l.body) || has_index(&l.lo) || has_index(&l.hi) {
            return s;
        }
        let items: Vec<Stmt> = match &l.body.kind {
            StmtKind::Block(items) => items.clone(),
            _ => vec![(*l.body).clone()],
        };
        // Variables the loop changes: its counter, and everything declared or assigned in it.
        let mut changed: BTreeSet<String> = BTreeSet::from([l.var.name.clone()]);
        walk_stmts(&items, &mut |x| {
            changed.extend(declared(x));
            if let (_, Some(v)) = written(x) {
                changed.insert(v);
            }
            if let StmtKind::For(inner) = &x.kind {
                changed.insert(inner.var.name.clone());
            }
        });
        // Every access per array: (key, at the body's top level, conditional, a write).
        let mut accesses: BTreeMap<String, Vec<(String, bool, bool, bool, Expr)>> = BTreeMap::new();
        for item in &items {
            let top = is_simple(item);
            if top {
                for r in reads(item) {
                    accesses.entry(r.array.clone()).or_default().push((r.key, true, r.conditional, false, r.expr));
                }
                if let StmtKind::Assign { target, .. } = &item.kind {
                    if let ExprKind::Index { array, .. } = &target.kind {
                        accesses.entry(array.name.clone()).or_default().push((target.to_string(), true, false, true, target.clone()));
                    }
                }
            } else {
                walk_stmts(std::slice::from_ref(item), &mut |x| {
                    let mut note = |e: &Expr| {
                        walk_expr(e, &mut |y| {
                            if let ExprKind::Index { array, .. } = &y.kind {
                                accesses.entry(array.name.clone()).or_default().push((y.to_string(), false, true, false, y.clone()));
                            }
                        })
                    };
                    match &x.kind {
                        StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| note(&d.init)),
                        StmtKind::Assign { target, value, .. } => {
                            note(target);
                            note(value);
                        }
                        StmtKind::If { cond, .. } => note(cond),
                        StmtKind::For(f) => {
                            note(&f.lo);
                            note(&f.hi);
                        }
                        _ => {}
                    }
                });
            }
        }
        // A reduction's target is updated by other threads too: it never lives in a register.
        let mut reduced: BTreeSet<String> = BTreeSet::new();
        walk_stmts(&items, &mut |x| {
            if let StmtKind::Assign { target: Expr { kind: ExprKind::Index { array, .. }, .. }, op: AssignOp::AtomicAdd, .. } = &x.kind {
                reduced.insert(array.name.clone());
            }
        });
        let mut chosen: Vec<(String, String, Expr, ScalarType, bool)> = Vec::new();
        for (array, acc) in &accesses {
            let Some(&ty) = self.elem.get(array) else { continue };
            if reduced.contains(array) {
                continue;
            }
            let (key, _, _, _, expr) = &acc[0];
            let same = acc.iter().all(|(k, top, ..)| k == key && *top);
            let unconditional = acc.iter().any(|(_, _, c, _, _)| !c);
            if !same || !unconditional || has_subscript_read(expr) || !vars_of(expr).is_disjoint(&changed) {
                continue;
            }
            let writes = acc.iter().any(|(_, _, _, w, _)| *w);
            chosen.push((array.clone(), key.clone(), expr.clone(), ty, writes));
        }
        if chosen.is_empty() {
            return s;
        }
        let mut body = items;
        let mut before = Vec::new();
        let mut after = Vec::new();
        for (_, key, expr, ty, writes) in &chosen {
            let local = self.local();
            for item in body.iter_mut() {
                map_stmt_exprs(item, &mut |x| {
                    if matches!(x.kind, ExprKind::Index { .. }) && x.to_string() == *key {
                        *x = var(&local);
                    }
                });
            }
            before.push(st(StmtKind::Decl { ty: *ty, vars: vec![Declarator { name: ident(&local), init: expr.clone() }] }));
            if *writes {
                after.push(st(StmtKind::Assign { target: expr.clone(), op: AssignOp::Set, value: var(&local) }));
            }
        }
        let looped = Stmt { kind: StmtKind::For(ForLoop { body: Box::new(st(StmtKind::Block(body))), ..l.clone() }), span: s.span };
        let entry = Expr::new(
            ExprKind::Binary(if l.inclusive { BinOp::Le } else { BinOp::Lt }, Box::new(l.lo.clone()), Box::new(l.hi.clone())),
            Default::default(),
        );
        let mut guarded = before;
        guarded.push(looped);
        guarded.extend(after);
        st(StmtKind::If { cond: entry, then_branch: Box::new(st(StmtKind::Block(guarded))), else_branch: None })
    }
}

/// An access whose subscripts read an array: never a candidate.
fn has_subscript_read(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Index { indices, .. } => indices.iter().any(has_index),
        _ => true,
    }
}

/// How many times `r` is read from the start of `run` until its value may change.
fn occurrences(run: &[Stmt], r: &Read, vars: &BTreeSet<String>) -> usize {
    let mut n = 0;
    for (j, s) in run.iter().enumerate() {
        if j > 0 && (!is_simple(s) || !declared(s).is_disjoint(vars)) {
            break;
        }
        n += reads(s).iter().filter(|x| x.key == r.key).count();
        let (array, scalar) = written(s);
        if array.as_deref() == Some(r.array.as_str()) || scalar.is_some_and(|v| vars.contains(&v)) {
            break;
        }
    }
    n
}
