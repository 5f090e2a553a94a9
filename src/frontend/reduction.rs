//! Reductions across threads: which `+=` statements of a schedule several `meta_for`
//! iterations apply to one element.
//!
//! Contract: [`mark`] runs on the parsed program, before the semantic check, so that the
//! function's body and its schedules agree. Inside a `meta_schedule`, an update of an element of
//! a global array (a parameter array) whose subscripts do not vary with every enclosing
//! `meta_for` counter may be applied by several iterations (threads) to one element: a `+=`
//! or `-=` there becomes [`AssignOp::AtomicAdd`] (`a -= e` as `a += -(e)`, exact in every
//! type), which serial code runs as `+=` and a kernel as `atomicAdd`; into a `char` array (CUDA
//! has no 8-bit atomic add) it is a located error. A `*=` or `/=` there gets a
//! located error: no atomic operation does it, and the order of a product of floats matters.
//!
//! "Varies with a counter" is syntactic: a subscript names the counter, or a local whose
//! definition (or any later assignment) names it, through `+`, `-`, `*` (not by the literal 0),
//! negation or casts only (under `/`, `%`, a comparison, a condition or a call a counter is
//! folded: `s[i % 2]` and `s[i / B]` are reductions); a serial loop's counter varies with no
//! `meta_for` counter, whatever its bounds (each thread runs through many of its values), and a
//! local defined from an array element is taken to vary with nothing (a data-dependent subscript, as in a histogram, may
//! collide: an atomic add is right for it). Erring towards a reduction costs speed, never
//! correctness: an atomic add is correct wherever a plain `+=` is. The opposite case, a
//! subscript whose counters cancel (`s[i - i]`), stays a plain update, and `gen` reports the
//! race with its two threads.

use super::ast::*;
use super::diag::Diagnostic;
use std::collections::{BTreeSet, HashMap};

/// What a local's value may vary with: the `meta_for` counters it is computed from, or `None`
/// when it depends on data (an array element, a call's result).
type Varies = Option<BTreeSet<String>>;

/// Rewrites every reduction of `program` to [`AssignOp::AtomicAdd`]; the errors of updates that
/// cannot be one.
pub fn mark(program: &mut Program) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    for f in &mut program.functions {
        let arrays: HashMap<String, ScalarType> = f.params.iter().filter(|p| !p.dims.is_empty()).map(|p| (p.name.name.clone(), p.ty)).collect();
        let mut walk = Walk { arrays: &arrays, counters: Vec::new(), locals: vec![HashMap::new()], in_schedule: false, errors: &mut errors };
        walk.stmts(&mut f.body);
    }
    errors
}

struct Walk<'a> {
    /// The array parameters and their element types.
    arrays: &'a HashMap<String, ScalarType>,
    /// The counters of the enclosing `meta_for` loops.
    counters: Vec<String>,
    /// Scoped locals and what they vary with.
    locals: Vec<HashMap<String, Varies>>,
    in_schedule: bool,
    errors: &'a mut Vec<Diagnostic>,
}

impl Walk<'_> {
    fn stmts(&mut self, stmts: &mut [Stmt]) {
        self.locals.push(HashMap::new());
        for s in stmts.iter_mut() {
            self.stmt(s);
        }
        self.locals.pop();
    }

    fn nested(&mut self, s: &mut Stmt) {
        self.stmts(std::slice::from_mut(s));
    }

    fn stmt(&mut self, s: &mut Stmt) {
        match &mut s.kind {
            StmtKind::Decl { vars, .. } => {
                for d in vars.iter() {
                    let v = self.varies(&d.init);
                    self.locals.last_mut().expect("a scope").insert(d.name.name.clone(), v);
                }
            }
            StmtKind::Assign { target, op, value } => match &target.kind {
                ExprKind::Var(n) => {
                    let more = self.varies(value);
                    let merged = union(self.lookup(n), more);
                    if let Some(slot) = self.locals.iter_mut().rev().find_map(|scope| scope.get_mut(n)) {
                        *slot = merged;
                    }
                }
                ExprKind::Index { array, indices } if self.in_schedule && !self.counters.is_empty() && self.arrays.contains_key(&array.name) => {
                    let mut seen: Varies = Some(BTreeSet::new());
                    for i in indices.iter() {
                        seen = union(seen, self.varies(i));
                    }
                    let missing = self.counters.iter().find(|c| seen.as_ref().is_none_or(|set| !set.contains(*c))).cloned();
                    let Some(counter) = missing else { return };
                    if matches!(op, AssignOp::Add | AssignOp::Sub) && self.arrays.get(&array.name) == Some(&ScalarType::Char) {
                        self.errors.push(
                            Diagnostic::new(target.span, format!("`{target}` is a reduction across the iterations of `meta_for (int {counter} ...)`, but `{}` holds `char`: CUDA has no atomic add on 8-bit elements", array.name), "a reduction into a char array")
                                .with_note("make the array `int`, or give each thread its own element"),
                        );
                        return;
                    }
                    match op {
                        AssignOp::Add => *op = AssignOp::AtomicAdd,
                        AssignOp::Sub => {
                            *op = AssignOp::AtomicAdd;
                            let span = value.span;
                            let inner = std::mem::replace(value, Expr::new(ExprKind::Int(0), span));
                            *value = Expr::new(ExprKind::Unary(UnOp::Neg, Box::new(inner)), span);
                        }
                        AssignOp::Mul | AssignOp::Div => {
                            self.errors.push(
                                Diagnostic::new(target.span, format!("`{target}` is updated with `{}` by different iterations of `meta_for (int {counter} ...)`, since its subscripts do not vary with `{counter}`: only `+=` and `-=` can be a reduction across threads (an atomic add)", op.c_symbol()), "not a reduction")
                                    .with_note("make the subscript name the counter, or compute the product in a serial loop"),
                            );
                        }
                        AssignOp::Set | AssignOp::AtomicAdd => {}
                    }
                }
                _ => {}
            },
            StmtKind::If { then_branch, else_branch, .. } => {
                self.nested(then_branch);
                if let Some(e) = else_branch {
                    self.nested(e);
                }
            }
            StmtKind::Block(items) => self.stmts(items),
            StmtKind::For(l) => {
                // A serial counter takes many values in each thread, whatever its bounds: an
                // element it selects is not one thread's (`for (k = i; k < n; k++) y[k] += ..`).
                self.locals.push(HashMap::from([(l.var.name.clone(), Some(BTreeSet::new()))]));
                self.nested(&mut l.body);
                self.locals.pop();
            }
            // A loop of one iteration (a one-thread schedule's) makes no two updates collide.
            StmtKind::MetaFor(l) if one_iteration(l) => self.nested(&mut l.body),
            StmtKind::MetaFor(l) => {
                self.counters.push(l.var.name.clone());
                self.locals.push(HashMap::from([(l.var.name.clone(), Some(BTreeSet::from([l.var.name.clone()])))]));
                self.nested(&mut l.body);
                self.locals.pop();
                self.counters.pop();
            }
            StmtKind::MetaSchedule { body, .. } => {
                let was = std::mem::replace(&mut self.in_schedule, true);
                self.nested(body);
                self.in_schedule = was;
            }
            // Made scalars before reductions are marked (`local_arrays`).
            StmtKind::LocalArray { .. } | StmtKind::Assume(_) | StmtKind::Assert(_) | StmtKind::Empty | StmtKind::Barrier => {}
        }
    }

    fn lookup(&self, name: &str) -> Varies {
        match self.locals.iter().rev().find_map(|scope| scope.get(name)) {
            Some(v) => v.clone(),
            // A parameter (or a name the semantic check will reject): the same in every thread.
            None => Some(BTreeSet::new()),
        }
    }

    /// The counters `x` varies with one to one: `None` when it reads data; otherwise the counters
    /// that reach its value through `+`, `-`, a product by anything but the literal 0, a negation
    /// or a cast. One under `/`, `%`, a comparison, a condition or a call is folded with others
    /// (`i % 2`, `i / B`, `min(i, 1)` take one value for many `i`), so it selects no element of
    /// its own.
    fn varies(&self, x: &Expr) -> Varies {
        let mut data = false;
        walk_expr(x, &mut |e| data |= matches!(e.kind, ExprKind::Index { .. }));
        if data {
            return None;
        }
        let mut out = BTreeSet::new();
        self.one_to_one(x, &mut out)?;
        Some(out)
    }

    fn one_to_one(&self, x: &Expr, out: &mut BTreeSet<String>) -> Option<()> {
        let zero = |e: &Expr| matches!(e.kind, ExprKind::Int(0));
        match &x.kind {
            ExprKind::Var(n) => out.extend(self.lookup(n)?),
            ExprKind::Binary(BinOp::Add | BinOp::Sub, a, b) => {
                self.one_to_one(a, out)?;
                self.one_to_one(b, out)?;
            }
            ExprKind::Binary(BinOp::Mul, a, b) if !zero(a) && !zero(b) => {
                self.one_to_one(a, out)?;
                self.one_to_one(b, out)?;
            }
            ExprKind::Unary(UnOp::Neg, a) | ExprKind::Cast(_, a) => self.one_to_one(a, out)?,
            _ => {}
        }
        Some(())
    }
}

/// Whether the loop runs exactly once whatever the parameters (constant bounds).
fn one_iteration(l: &ForLoop) -> bool {
    match (&l.lo.kind, &l.hi.kind) {
        (ExprKind::Int(lo), ExprKind::Int(hi)) => hi.checked_sub(*lo).and_then(|d| d.checked_add(l.inclusive as i64)) == Some(1),
        _ => false,
    }
}

fn union(a: Varies, b: Varies) -> Varies {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.extend(b);
            Some(a)
        }
        _ => None,
    }
}
