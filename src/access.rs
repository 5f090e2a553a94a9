//! The access model: each array access of a kernel body as (array, polynomial indices, read
//! or write, the path's guards), for Z3 questions about which elements statements touch.
//!
//! Contract (soundness first): every fact recorded is true of the program. Integer `/` and `%`
//! by a divisor `d` (a constant or a polynomial in the parameters) become auxiliary integers
//! `q`, `r` with `x = d*q + r`, `0 <= r < d` — C's truncating division — but only where the
//! context proves `x >= 0` and `d >= 1`;
//! auxiliaries are named by their dividend and divisor, so equal expressions share them.
//! Anything not modelled (a non-polynomial index, a division whose dividend may be negative)
//! makes the index `None`, or the guard simply absent: a missing guard only admits more
//! behaviours, so conclusions of the form "no two accesses can collide" stay sound.

use crate::frontend::ast::*;
use constraints::solver::{Backend, Implication};
use constraints::{Constraint, Domain, Poly, System, Var};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Access {
    pub array: String,
    /// One polynomial per subscript; `None` where the subscript is not modelled.
    pub indices: Vec<Option<Poly>>,
    pub write: bool,
    /// Conditions that hold whenever the access executes.
    pub guards: Vec<Constraint>,
    /// The span of the subscripted expression (the caching strategy labels each one apart).
    pub span: crate::frontend::source::Span,
}

/// An auxiliary integer's definition: `dividend / divisor` (`quotient`) or `dividend % divisor`.
#[derive(Clone, Debug, PartialEq)]
pub struct AuxDef {
    pub dividend: Poly,
    pub divisor: Poly,
    pub quotient: bool,
}

/// The model's integer for a CUDA index: `threadIdx.x` is `threadIdx_x`.
pub fn builtin_var(b: Builtin) -> String {
    b.c_name().replace('.', "_")
}

/// The CUDA index a model variable stands for, if it is one.
pub fn builtin_of_var(name: &str) -> Option<Builtin> {
    (0..3u8)
        .flat_map(|d| [Builtin::ThreadIdx(d), Builtin::BlockIdx(d), Builtin::BlockDim(d), Builtin::GridDim(d)])
        .find(|b| builtin_var(*b) == name)
}

/// What an expression is known to be: its polynomial value, if modelled.
pub type Env = BTreeMap<String, Option<Poly>>;

/// Collects accesses and the auxiliary definitions their modelling needed.
pub struct Collector<'b> {
    pub backend: &'b Backend,
    /// Facts true everywhere (parameter facts, loop ranges) plus auxiliary definitions.
    pub context: System,
    pub accesses: Vec<Access>,
    /// The auxiliary integers introduced for `/` and `%`, by name.
    pub aux_defs: BTreeMap<String, AuxDef>,
}

impl<'b> Collector<'b> {
    pub fn new(backend: &'b Backend, context: System) -> Collector<'b> {
        Collector { backend, context, accesses: Vec::new(), aux_defs: BTreeMap::new() }
    }

    /// Integer auxiliary variable, declared in the context.
    fn aux(&mut self, name: &str) -> Poly {
        self.context.set_domain(Var::new(name), Domain::integer());
        Poly::var(name)
    }

    /// The value of an integer expression under `env` and `guards`, as a polynomial.
    pub fn poly(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) -> Option<Poly> {
        match &e.kind {
            ExprKind::Int(v) => Some(Poly::int(*v)),
            ExprKind::Var(n) => match env.get(n) {
                Some(p) => p.clone(),
                None => Some(Poly::var(n)),
            },
            ExprKind::Unary(UnOp::Neg, a) => Some(-self.poly(a, env, guards)?),
            ExprKind::Cast(t, a) if t.is_integer() => self.poly(a, env, guards),
            // A CUDA index: a non-negative integer, the same for everything one thread does.
            ExprKind::Builtin(b) => {
                let v = self.aux(&builtin_var(*b));
                self.context.add(Constraint::ge(&v, &Poly::zero()));
                Some(v)
            }
            ExprKind::Binary(op @ (BinOp::Div | BinOp::Rem), a, b) => {
                let x = self.poly(a, env, guards)?;
                let d = self.poly(b, env, guards)?;
                if d.as_constant().is_some_and(|c| !c.is_integer()) {
                    return None;
                }
                // Only where x >= 0 and d >= 1 are proved does C's truncation agree with the
                // floor model. A divisor may be a polynomial (a parameter such as `s`).
                let mut ctx = self.context.clone();
                guards.iter().for_each(|g| ctx.add(g.clone()));
                for fact in [Constraint::ge(&x, &Poly::zero()), Constraint::ge(&d, &Poly::one())] {
                    let trivially = fact.truth_if_constant() == Some(true);
                    if !trivially && !matches!(self.backend.implies(&ctx, &fact), Implication::Proved) {
                        return None;
                    }
                }
                let key = format!("{x}|{d}").bytes().fold(0u64, |h, b| h.wrapping_mul(1099511628211).wrapping_add(b as u64));
                let (qn, rn) = (format!("aux_q{key:x}"), format!("aux_r{key:x}"));
                let q = self.aux(&qn);
                let r = self.aux(&rn);
                if !self.aux_defs.contains_key(&qn) {
                    self.context.add(Constraint::eq(&x, &(&d * &q + &r)));
                    self.context.add(Constraint::ge(&r, &Poly::zero()));
                    self.context.add(Constraint::lt(&r, &d));
                    self.context.add(Constraint::ge(&q, &Poly::zero()));
                    self.aux_defs.insert(qn, AuxDef { dividend: x.clone(), divisor: d.clone(), quotient: true });
                    self.aux_defs.insert(rn, AuxDef { dividend: x, divisor: d, quotient: false });
                }
                Some(if *op == BinOp::Div { q } else { r })
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.poly(a, env, guards)?, self.poly(b, env, guards)?);
                match op {
                    BinOp::Add => Some(x + y),
                    BinOp::Sub => Some(x - y),
                    BinOp::Mul => Some(x * y),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The constraints a condition implies when true (`positive`) or false; what cannot be
    /// modelled is left out.
    pub fn condition(&mut self, e: &Expr, positive: bool, env: &Env, guards: &[Constraint]) -> Vec<Constraint> {
        match &e.kind {
            ExprKind::Binary(BinOp::And, a, b) if positive => {
                let mut v = self.condition(a, true, env, guards);
                let mut g2 = guards.to_vec();
                g2.extend(v.iter().cloned());
                v.extend(self.condition(b, true, env, &g2));
                v
            }
            ExprKind::Binary(BinOp::Or, a, b) if !positive => {
                let mut v = self.condition(a, false, env, guards);
                v.extend(self.condition(b, false, env, guards));
                v
            }
            ExprKind::Unary(UnOp::Not, a) => self.condition(a, !positive, env, guards),
            ExprKind::Binary(op, a, b) if op.is_comparison() => {
                let (Some(x), Some(y)) = (self.poly(a, env, guards), self.poly(b, env, guards)) else { return Vec::new() };
                let Some(c) = crate::frontend::polyexpr::comparison(*op, &x, &y) else { return Vec::new() };
                vec![if positive { c } else { c.negate() }]
            }
            ExprKind::Binary(BinOp::And | BinOp::Or, ..) => Vec::new(),
            _ => match self.poly(e, env, guards) {
                // A scalar condition: true means "not zero".
                Some(x) => {
                    let c = Constraint::ne(&x, &Poly::zero());
                    vec![if positive { c } else { c.negate() }]
                }
                None => Vec::new(),
            },
        }
    }

    fn expr_accesses(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) {
        match &e.kind {
            ExprKind::Index { array, indices } => {
                for i in indices {
                    self.expr_accesses(i, env, guards);
                }
                let idx = indices.iter().map(|i| self.poly(i, env, guards)).collect();
                self.accesses.push(Access { array: array.name.clone(), indices: idx, write: false, guards: guards.to_vec(), span: e.span });
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => self.expr_accesses(a, env, guards),
            ExprKind::Binary(_, a, b) => {
                self.expr_accesses(a, env, guards);
                self.expr_accesses(b, env, guards);
            }
            ExprKind::Cond(c, a, b) => {
                self.expr_accesses(c, env, guards);
                let mut gt = guards.to_vec();
                gt.extend(self.condition(c, true, env, guards));
                self.expr_accesses(a, env, &gt);
                let mut gf = guards.to_vec();
                gf.extend(self.condition(c, false, env, guards));
                self.expr_accesses(b, env, &gf);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| self.expr_accesses(a, env, guards)),
            _ => {}
        }
    }

    /// Walk statements, recording accesses. Local scalars assigned after their definition
    /// become unknown (`None`): their value is no longer the definition's.
    pub fn stmts(&mut self, stmts: &[Stmt], env: &mut Env, guards: &[Constraint]) {
        for s in stmts {
            self.stmt(s, env, guards);
        }
    }

    fn stmt(&mut self, s: &Stmt, env: &mut Env, guards: &[Constraint]) {
        match &s.kind {
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    self.expr_accesses(&d.init, env, guards);
                    let v = if ty.is_integer() { self.poly(&d.init, env, guards) } else { None };
                    env.insert(d.name.name.clone(), v);
                }
            }
            StmtKind::Assign { target, value, op } => {
                self.expr_accesses(value, env, guards);
                match &target.kind {
                    ExprKind::Index { array, indices } => {
                        for i in indices {
                            self.expr_accesses(i, env, guards);
                        }
                        let idx: Vec<Option<Poly>> = indices.iter().map(|i| self.poly(i, env, guards)).collect();
                        if *op != AssignOp::Set {
                            self.accesses.push(Access { array: array.name.clone(), indices: idx.clone(), write: false, guards: guards.to_vec(), span: target.span });
                        }
                        self.accesses.push(Access { array: array.name.clone(), indices: idx, write: true, guards: guards.to_vec(), span: target.span });
                    }
                    ExprKind::Var(n) => {
                        env.insert(n.clone(), None);
                    }
                    _ => {}
                }
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                self.expr_accesses(cond, env, guards);
                let mut gt = guards.to_vec();
                gt.extend(self.condition(cond, true, env, guards));
                let mut env_t = env.clone();
                self.stmt(then_branch, &mut env_t, &gt);
                let mut gf = guards.to_vec();
                gf.extend(self.condition(cond, false, env, guards));
                let mut env_f = env.clone();
                if let Some(e) = else_branch {
                    self.stmt(e, &mut env_f, &gf);
                }
                forget_assigned(env, &env_t);
                forget_assigned(env, &env_f);
            }
            StmtKind::Block(items) => {
                let mut inner = env.clone();
                self.stmts(items, &mut inner, guards);
                forget_assigned(env, &inner);
            }
            StmtKind::For(l) => {
                // Inside the body the counter ranges over [lo, hi) (or [lo, hi]); scalars the
                // body assigns are unknown throughout (their values vary by iteration).
                let mut inner = env.clone();
                let assigned = assigned_scalars(&l.body);
                for n in &assigned {
                    inner.insert(n.clone(), None);
                }
                let counter = Poly::var(&l.var.name);
                inner.insert(l.var.name.clone(), Some(counter.clone()));
                let mut g = guards.to_vec();
                self.context.set_domain(Var::new(&l.var.name), Domain::integer());
                if let Some(lo) = self.poly(&l.lo, env, guards) {
                    g.push(Constraint::ge(&counter, &lo));
                }
                if let Some(hi) = self.poly(&l.hi, env, guards) {
                    g.push(if l.inclusive { Constraint::le(&counter, &hi) } else { Constraint::lt(&counter, &hi) });
                }
                self.stmt(&l.body, &mut inner, &g);
                for n in assigned {
                    if env.contains_key(&n) {
                        env.insert(n, None);
                    }
                }
            }
            _ => {}
        }
    }
}

fn forget_assigned(env: &mut Env, branch: &Env) {
    for (k, v) in branch {
        if env.get(k).is_some_and(|old| old != v) {
            env.insert(k.clone(), None);
        }
    }
}

/// Scalars a statement assigns (not declares).
pub fn assigned_scalars(s: &Stmt) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(s: &Stmt, out: &mut Vec<String>) {
        match &s.kind {
            StmtKind::Assign { target, .. } => {
                if let ExprKind::Var(n) = &target.kind {
                    out.push(n.clone());
                }
            }
            StmtKind::If { then_branch, else_branch, .. } => {
                walk(then_branch, out);
                if let Some(e) = else_branch {
                    walk(e, out);
                }
            }
            StmtKind::Block(items) => items.iter().for_each(|x| walk(x, out)),
            StmtKind::For(l) | StmtKind::MetaFor(l) => walk(&l.body, out),
            _ => {}
        }
    }
    walk(s, &mut out);
    out
}

/// Can a write of `a` and an access `b` (to the same array) touch the same element, given
/// `context`? `Some(false)` only when Z3 proves they cannot; `None` when unknown.
pub fn may_collide(backend: &Backend, context: &System, a: &Access, b: &Access, extra: &[Constraint]) -> Option<bool> {
    if a.array != b.array || !(a.write || b.write) {
        return Some(false);
    }
    let mut sys = context.clone();
    for c in a.guards.iter().chain(&b.guards).chain(extra) {
        sys.add(c.clone());
    }
    for (x, y) in a.indices.iter().zip(&b.indices) {
        match (x, y) {
            (Some(x), Some(y)) => sys.add(Constraint::eq(x, y)),
            _ => {} // an unmodelled subscript may take any value
        }
    }
    for v in sys.vars() {
        if !sys.domains().contains_key(&v) {
            sys.set_domain(v, Domain::integer());
        }
    }
    match backend.check(&sys) {
        constraints::solver::CheckResult::Unsat => Some(false),
        constraints::solver::CheckResult::Sat(_) => Some(true),
        constraints::solver::CheckResult::Unknown(_) => None,
    }
}
