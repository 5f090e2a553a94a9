//! Per-thread arrays of constant size (`float acc[4];`), made scalars before anything else
//! sees them.
//!
//! Contract: [`scalarize`] runs on the parsed program, before reductions are marked and before
//! the semantic check, and removes every [`StmtKind::LocalArray`]: each element becomes a
//! scalar local of the element's type (`acc_0`, ..., `acc_1_2` for `acc[1][2]`, a name no
//! identifier of the file has), initialised from the declaration's initializer or to zero, and
//! each subscripted use `acc[e]` becomes that scalar. This is what nvcc does with a local
//! array it can keep in registers, and it is what lets every later stage (kernels, counters,
//! strategies, proofs) treat the array as the scalars they already handle. So every subscript
//! must be a constant once serial `for` loops are unrolled: a serial loop whose counter (or a
//! local computed from it) reaches a subscript of a local array, or the bound of such an inner
//! loop, is unrolled here, each iteration a copy of the body with the counter's value
//! substituted; its bounds must then be constants. Integer locals defined from constants and
//! never assigned count as constants (a loop counting down reads its counter through one).
//!
//! Located errors, never a guess: an extent that is not a positive constant, more than
//! [`MAX_ELEMENTS`] elements, a subscript that is not a constant or lies outside its extent
//! (checked here, for every value, so no proof is needed later), the array used without all its
//! subscripts, an unrolled loop with a bound that is not a constant, more than
//! [`MAX_UNROLLED`] iterations unrolled in a function, and an initializer with more values than
//! elements. Elements without an initializer start at zero (C leaves them indeterminate).

use super::ast::*;
use super::diag::Diagnostic;
use super::source::Span;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// The most elements one local array may have (a thread's registers hold 255 values).
pub const MAX_ELEMENTS: i64 = 1024;

/// The most loop iterations unrolled for local arrays in one function.
pub const MAX_UNROLLED: usize = 4096;

/// Replaces every local array of `program` by scalars (see the module's contract); the
/// errors of those that cannot be.
pub fn scalarize(program: &mut Program) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    if !has_local_array(&program.functions) {
        return errors;
    }
    let mut taken = program_identifiers(program);
    for f in &mut program.functions {
        let mut pass = Pass { taken: &mut taken, scopes: vec![HashMap::new()], errors: Vec::new(), unrolled: 0 };
        let body = std::mem::take(&mut f.body);
        f.body = pass.block(body);
        errors.append(&mut pass.errors);
    }
    errors
}

fn has_local_array(functions: &[Function]) -> bool {
    let mut found = false;
    functions.iter().for_each(|f| f.body.iter().for_each(|s| walk_stmt(s, &mut |s| found |= matches!(s.kind, StmtKind::LocalArray { .. }), &mut |_| {})));
    found
}

/// One local array: its name, extents and the names of its elements, row-major.
struct Local {
    name: String,
    dims: Vec<i64>,
    elements: Vec<String>,
}

/// What a name means in a scope.
#[derive(Clone)]
enum Binding {
    Array(Rc<Local>),
    /// An integer local defined from constants and never assigned.
    Const(i64),
    /// The counter of an unrolled loop, in one copy of its body: its uses become the value.
    Counter(i64, ScalarType),
    /// Any other name: it hides an outer array or constant of that name.
    Other,
}

struct Pass<'a> {
    /// Every identifier of the file and every name made here.
    taken: &'a mut HashSet<String>,
    scopes: Vec<HashMap<String, Binding>>,
    errors: Vec<Diagnostic>,
    unrolled: usize,
}

impl Pass<'_> {
    fn lookup(&self, name: &str) -> Option<&Binding> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn array(&self, name: &str) -> Option<Rc<Local>> {
        match self.lookup(name) {
            Some(Binding::Array(a)) => Some(a.clone()),
            _ => None,
        }
    }

    fn block(&mut self, stmts: Vec<Stmt>) -> Vec<Stmt> {
        self.scopes.push(HashMap::new());
        let mut out = Vec::new();
        let mut rest = stmts.into_iter().collect::<std::collections::VecDeque<_>>();
        while let Some(s) = rest.pop_front() {
            // An integer local is a constant where it is never assigned in the rest of its block.
            if let StmtKind::Decl { vars, .. } = &s.kind {
                let assigned: HashSet<String> = vars.iter().filter(|v| rest.iter().any(|r| assigns(r, &v.name.name))).map(|v| v.name.name.clone()).collect();
                self.stmt(s, &mut out, &assigned);
            } else {
                self.stmt(s, &mut out, &HashSet::new());
            }
        }
        self.scopes.pop();
        out
    }

    /// A sub-statement in its own scope.
    fn sub(&mut self, s: Stmt) -> Stmt {
        let span = s.span;
        match s.kind {
            StmtKind::Block(v) => Stmt { kind: StmtKind::Block(self.block(v)), span },
            _ => {
                let mut v = self.block(vec![s]);
                match v.len() {
                    1 => v.pop().unwrap_or(Stmt { kind: StmtKind::Empty, span }),
                    _ => Stmt { kind: StmtKind::Block(v), span },
                }
            }
        }
    }

    fn stmt(&mut self, s: Stmt, out: &mut Vec<Stmt>, assigned_later: &HashSet<String>) {
        let span = s.span;
        let kind = match s.kind {
            StmtKind::LocalArray { ty, name, dims, init } => return self.declare(ty, name, dims, init, span, out),
            StmtKind::Decl { ty, vars } => {
                let vars: Vec<Declarator> = vars.into_iter().map(|v| Declarator { init: self.expr(v.init), name: v.name }).collect();
                for v in &vars {
                    let constant = match ty.is_integer() && !assigned_later.contains(&v.name.name) {
                        true => self.fold(&v.init).map(|x| wrap(ty, x)),
                        false => None,
                    };
                    let scope = self.scopes.last_mut().expect("a scope is open");
                    scope.insert(v.name.name.clone(), constant.map_or(Binding::Other, Binding::Const));
                }
                StmtKind::Decl { ty, vars }
            }
            StmtKind::Assign { target, op, value } => StmtKind::Assign { target: self.expr(target), op, value: self.expr(value) },
            StmtKind::If { cond, then_branch, else_branch } => {
                StmtKind::If { cond: self.expr(cond), then_branch: Box::new(self.sub(*then_branch)), else_branch: else_branch.map(|e| Box::new(self.sub(*e))) }
            }
            StmtKind::Block(v) => StmtKind::Block(self.block(v)),
            StmtKind::For(l) if self.must_unroll(&l.var.name, &l.body) => return self.unroll(l, span, out),
            StmtKind::For(l) => StmtKind::For(self.for_loop(l)),
            StmtKind::MetaFor(l) => StmtKind::MetaFor(self.for_loop(l)),
            StmtKind::MetaSchedule { cache, body } => StmtKind::MetaSchedule { cache, body: Box::new(self.sub(*body)) },
            StmtKind::Assume(e) => StmtKind::Assume(self.expr(e)),
            StmtKind::Assert(e) => StmtKind::Assert(self.expr(e)),
            k @ (StmtKind::Empty | StmtKind::Barrier) => k,
        };
        out.push(Stmt { kind, span });
    }

    fn for_loop(&mut self, l: ForLoop) -> ForLoop {
        let (lo, hi) = (self.expr(l.lo), self.expr(l.hi));
        self.scopes.push(HashMap::from([(l.var.name.clone(), Binding::Other)]));
        let body = Box::new(self.sub(*l.body));
        self.scopes.pop();
        ForLoop { lo, hi, body, ..l }
    }

    /// The loop's iterations, each the body with the counter's value, in order.
    fn unroll(&mut self, l: ForLoop, span: Span, out: &mut Vec<Stmt>) {
        let arrays = self.arrays_reached(&l.var.name, &l.body).join("`, `");
        let bound = |this: &Self, e: &Expr, which: &str| -> Result<i64, Diagnostic> {
            this.fold(e).ok_or_else(|| {
                Diagnostic::new(e.span, format!("loop `{}` reaches a subscript of per-thread array `{arrays}`, so it is unrolled, and its {which} bound `{e}` is not a constant", l.var.name), "not a constant")
                    .with_note("a per-thread array's elements are registers: every subscript must be known once constant-trip loops are unrolled")
            })
        };
        let (lo, hi) = match (bound(self, &l.lo, "lower"), bound(self, &l.hi, "upper")) {
            (Ok(lo), Ok(hi)) => (lo, hi),
            (Err(d), _) | (_, Err(d)) => return self.errors.push(d),
        };
        let last = if l.inclusive { hi } else { hi.saturating_sub(1) };
        let trips = if last < lo { 0 } else { ((last as i128 - lo as i128) / l.step.max(1) as i128 + 1) as u128 };
        if trips as usize > MAX_UNROLLED - self.unrolled.min(MAX_UNROLLED) || trips > MAX_UNROLLED as u128 {
            let message = format!("unrolling loop `{}` for per-thread array `{arrays}` would take {trips} iterations, beyond the {MAX_UNROLLED} a function may unroll", l.var.name);
            return self.errors.push(Diagnostic::new(span, message, "unrolled here"));
        }
        self.unrolled += trips as usize;
        let mut v = lo;
        for _ in 0..trips {
            self.scopes.push(HashMap::from([(l.var.name.clone(), Binding::Counter(v, l.ty))]));
            let body = self.sub((*l.body).clone());
            self.scopes.pop();
            out.push(body);
            v = v.saturating_add(l.step);
        }
    }

    /// `ty name[dims] = init;` as one scalar per element.
    fn declare(&mut self, ty: ScalarType, name: Ident, dims: Vec<Expr>, init: Option<Init>, span: Span, out: &mut Vec<Stmt>) {
        let mut extents = Vec::new();
        for d in &dims {
            match self.fold(d) {
                Some(x) if x >= 1 => extents.push(x),
                Some(x) => return self.errors.push(Diagnostic::new(d.span, format!("per-thread array `{}` has extent {x}; an extent is at least 1", name.name), "not a positive extent")),
                None => {
                    let message = format!("per-thread array `{}` needs a constant extent; `{d}` is not one", name.name);
                    return self.errors.push(Diagnostic::new(d.span, message, "not a constant").with_note("an array whose size is a parameter is a kernel parameter, declared in the function's parameter list"));
                }
            }
        }
        let count = extents.iter().try_fold(1i64, |a, &d| a.checked_mul(d).filter(|&n| n <= MAX_ELEMENTS));
        let Some(count) = count else {
            return self.errors.push(Diagnostic::new(name.span, format!("per-thread array `{}` has more than {MAX_ELEMENTS} elements", name.name), "too large for a thread's registers"));
        };
        let mut values: Vec<Option<Expr>> = vec![None; count as usize];
        if let Some(init) = init {
            if let Err(d) = fill(&init, &extents, &mut values, 0, &name.name) {
                return self.errors.push(d);
            }
        }
        let elements = self.element_names(&name.name, &extents);
        for (element, value) in elements.iter().zip(values) {
            let init = match value {
                Some(v) => self.expr(v),
                None => zero(ty, name.span),
            };
            let var = Declarator { name: Ident { name: element.clone(), span: name.span }, init };
            out.push(Stmt { kind: StmtKind::Decl { ty, vars: vec![var] }, span });
        }
        let local = Rc::new(Local { name: name.name.clone(), dims: extents, elements });
        self.scopes.last_mut().expect("a scope is open").insert(name.name, Binding::Array(local));
    }

    /// `stem_i_j...` for every element, row-major; the stem is the array's name, or the name
    /// with a number where an element's name would meet an identifier of the file.
    fn element_names(&mut self, name: &str, extents: &[i64]) -> Vec<String> {
        let mut indices = vec![Vec::new()];
        for &d in extents {
            indices = indices.into_iter().flat_map(|prefix: Vec<i64>| (0..d).map(move |i| [prefix.clone(), vec![i]].concat())).collect();
        }
        let spell = |stem: &str| indices.iter().map(|ix| format!("{stem}_{}", ix.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("_"))).collect::<Vec<_>>();
        let mut stem = name.to_string();
        let mut n = 2;
        let mut names = spell(&stem);
        while names.iter().any(|e| self.taken.contains(e)) {
            stem = format!("{name}{n}");
            n += 1;
            names = spell(&stem);
        }
        self.taken.extend(names.iter().cloned());
        names
    }

    /// The expression with every element of a local array as its scalar.
    fn expr(&mut self, e: Expr) -> Expr {
        let span = e.span;
        let kind = match e.kind {
            ExprKind::Index { array, indices } if self.array(&array.name).is_some() => {
                let local = self.array(&array.name).expect("checked above");
                return self.element(&local, &array, indices, span);
            }
            ExprKind::Var(v) if self.array(&v).is_some() => {
                let local = self.array(&v).expect("checked above");
                let message = format!("per-thread array `{v}` used as a value; index it with {} constant subscript{}", local.dims.len(), if local.dims.len() == 1 { "" } else { "s" });
                self.errors.push(Diagnostic::new(span, message, "not indexed"));
                ExprKind::Var(v)
            }
            ExprKind::Index { array, indices } => ExprKind::Index { array, indices: indices.into_iter().map(|i| without_zero_terms(self.expr(i))).collect() },
            ExprKind::Unary(op, a) => ExprKind::Unary(op, Box::new(self.expr(*a))),
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.expr(*a), self.expr(*b));
                // Constants an unrolled copy made (`3 - 1` for a loop counting down) are folded
                // where C's `int` arithmetic gives the same value.
                match (&a.kind, &b.kind) {
                    (ExprKind::Int(x), ExprKind::Int(y)) if matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul) => {
                        let v = match op {
                            BinOp::Add => x.checked_add(*y),
                            BinOp::Sub => x.checked_sub(*y),
                            _ => x.checked_mul(*y),
                        };
                        match v.filter(|v| i32::try_from(*v).is_ok() && i32::try_from(*x).is_ok() && i32::try_from(*y).is_ok()) {
                            Some(v) => ExprKind::Int(v),
                            None => ExprKind::Binary(op, Box::new(a), Box::new(b)),
                        }
                    }
                    _ => ExprKind::Binary(op, Box::new(a), Box::new(b)),
                }
            }
            ExprKind::Cond(c, a, b) => ExprKind::Cond(Box::new(self.expr(*c)), Box::new(self.expr(*a)), Box::new(self.expr(*b))),
            ExprKind::Cast(t, a) => ExprKind::Cast(t, Box::new(self.expr(*a))),
            ExprKind::Call(f, args) => ExprKind::Call(f, args.into_iter().map(|a| self.expr(a)).collect()),
            ExprKind::Var(v) => match self.lookup(&v) {
                // An unrolled counter is its value in this copy, in the counter's type.
                Some(&Binding::Counter(x, ty)) => match ty {
                    ScalarType::Int => ExprKind::Int(x),
                    _ => ExprKind::Cast(ty, Box::new(Expr { kind: ExprKind::Int(x), span })),
                },
                _ => ExprKind::Var(v),
            },
            k @ (ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Builtin(_)) => k,
        };
        Expr { kind, span }
    }

    /// `array[indices]` as its element's scalar, or a located error.
    fn element(&mut self, local: &Local, array: &Ident, indices: Vec<Expr>, span: Span) -> Expr {
        let keep = |indices: Vec<Expr>| Expr { kind: ExprKind::Index { array: array.clone(), indices }, span };
        if indices.len() != local.dims.len() {
            let message = format!("per-thread array `{}` has {} dimension{}, indexed here with {}", local.name, local.dims.len(), if local.dims.len() == 1 { "" } else { "s" }, indices.len());
            self.errors.push(Diagnostic::new(span, message, "wrong number of subscripts"));
            return keep(indices);
        }
        let mut flat = 0i64;
        for (i, (x, &d)) in indices.iter().zip(&local.dims).enumerate() {
            match self.fold(x) {
                Some(v) if (0..d).contains(&v) => flat = flat * d + v,
                Some(v) => {
                    let message = format!("subscript {} of per-thread array `{}` is {v}, outside its extent {d}", i + 1, local.name);
                    self.errors.push(Diagnostic::new(x.span, message, "out of bounds"));
                    return keep(indices);
                }
                None => {
                    let message = format!("subscript `{x}` of per-thread array `{}` is not a constant", local.name);
                    let note = "a per-thread array's elements are registers: index it with constants, or with the counters of serial loops of constant bounds (they are unrolled)";
                    self.errors.push(Diagnostic::new(x.span, message, "not a constant").with_note(note));
                    return keep(indices);
                }
            }
        }
        Expr { kind: ExprKind::Var(local.elements[flat as usize].clone()), span }
    }

    /// The value of an integer expression of constants, known constant locals and unrolled
    /// counters, with C's semantics (`None` where it has none, as for a division by zero).
    fn fold(&self, e: &Expr) -> Option<i64> {
        Some(match &e.kind {
            ExprKind::Int(v) => *v,
            ExprKind::Var(v) => match self.lookup(v)? {
                Binding::Const(x) | Binding::Counter(x, _) => *x,
                _ => return None,
            },
            ExprKind::Unary(UnOp::Neg, a) => self.fold(a)?.checked_neg()?,
            ExprKind::Unary(UnOp::Not, a) => (self.fold(a)? == 0) as i64,
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.fold(a)?, self.fold(b)?);
                match op {
                    BinOp::Add => a.checked_add(b)?,
                    BinOp::Sub => a.checked_sub(b)?,
                    BinOp::Mul => a.checked_mul(b)?,
                    BinOp::Div => a.checked_div(b)?,
                    BinOp::Rem => a.checked_rem(b)?,
                    BinOp::Lt => (a < b) as i64,
                    BinOp::Le => (a <= b) as i64,
                    BinOp::Gt => (a > b) as i64,
                    BinOp::Ge => (a >= b) as i64,
                    BinOp::Eq => (a == b) as i64,
                    BinOp::Ne => (a != b) as i64,
                    BinOp::And => (a != 0 && b != 0) as i64,
                    BinOp::Or => (a != 0 || b != 0) as i64,
                }
            }
            ExprKind::Cond(c, a, b) => match self.fold(c)? != 0 {
                true => self.fold(a)?,
                false => self.fold(b)?,
            },
            ExprKind::Cast(t, a) if t.is_integer() => wrap(*t, self.fold(a)?),
            ExprKind::Call(f, args) if args.len() == 2 && (f.name == "min" || f.name == "max") => {
                let (a, b) = (self.fold(&args[0])?, self.fold(&args[1])?);
                if f.name == "min" { a.min(b) } else { a.max(b) }
            }
            ExprKind::Call(f, args) if args.len() == 1 && f.name == "abs" => self.fold(&args[0])?.checked_abs()?,
            _ => return None,
        })
    }

    /// Whether loop `var`'s value reaches a subscript of a local array in `body` (directly,
    /// through a local computed from it, or through the bound of an inner loop that must be
    /// unrolled itself).
    fn must_unroll(&self, var: &str, body: &Stmt) -> bool {
        !self.arrays_reached(var, body).is_empty()
    }

    /// The local arrays whose subscripts `var`'s value reaches in `body` (see [`Pass::must_unroll`]).
    fn arrays_reached(&self, var: &str, body: &Stmt) -> Vec<String> {
        self.reached_memo(var, body, &mut HashMap::new())
    }

    /// As [`Pass::arrays_reached`], with the answers for inner loops remembered by the loop's
    /// address: a nest of loops whose bounds read the outer counters is walked once per loop,
    /// not once per path (which would be exponential in the depth).
    fn reached_memo(&self, var: &str, body: &Stmt, memo: &mut HashMap<usize, Vec<String>>) -> Vec<String> {
        let mut tainted: HashSet<String> = HashSet::from([var.to_string()]);
        let mut reached = Vec::new();
        self.reach(body, &mut tainted, &mut reached, memo);
        reached.sort();
        reached.dedup();
        reached
    }

    fn reach(&self, s: &Stmt, tainted: &mut HashSet<String>, reached: &mut Vec<String>, memo: &mut HashMap<usize, Vec<String>>) {
        let mentions = |e: &Expr, tainted: &HashSet<String>| {
            let mut names = Vec::new();
            e.names(&mut names);
            names.iter().any(|n| tainted.contains(n))
        };
        let subscripts = |e: &Expr, tainted: &HashSet<String>, reached: &mut Vec<String>| {
            walk_expr(e, &mut |x| {
                if let ExprKind::Index { array, indices } = &x.kind {
                    if self.array(&array.name).is_some() && indices.iter().any(|i| mentions(i, tainted)) {
                        reached.push(array.name.clone());
                    }
                }
            })
        };
        match &s.kind {
            StmtKind::Decl { vars, .. } => {
                for v in vars {
                    subscripts(&v.init, tainted, reached);
                    if mentions(&v.init, tainted) {
                        tainted.insert(v.name.name.clone());
                    }
                }
            }
            StmtKind::LocalArray { dims, init, .. } => {
                dims.iter().for_each(|d| subscripts(d, tainted, reached));
                let mut values = Vec::new();
                init.iter().for_each(|i| init_values(i, &mut values));
                values.iter().for_each(|v| subscripts(v, tainted, reached));
            }
            StmtKind::Assign { target, value, .. } => {
                subscripts(target, tainted, reached);
                subscripts(value, tainted, reached);
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                subscripts(cond, tainted, reached);
                self.reach(then_branch, tainted, reached, memo);
                else_branch.iter().for_each(|e| self.reach(e, tainted, reached, memo));
            }
            StmtKind::Block(v) => v.iter().for_each(|s| self.reach(s, tainted, reached, memo)),
            StmtKind::For(l) | StmtKind::MetaFor(l) => {
                subscripts(&l.lo, tainted, reached);
                subscripts(&l.hi, tainted, reached);
                self.reach(&l.body, tainted, reached, memo);
                // An inner loop unrolled for an array, whose bounds read the counter.
                if matches!(s.kind, StmtKind::For(_)) && (mentions(&l.lo, tainted) || mentions(&l.hi, tainted)) {
                    let key = &*l.body as *const Stmt as usize;
                    let inner = match memo.get(&key) {
                        Some(r) => r.clone(),
                        None => {
                            let r = self.reached_memo(&l.var.name, &l.body, memo);
                            memo.insert(key, r.clone());
                            r
                        }
                    };
                    reached.extend(inner);
                }
            }
            StmtKind::MetaSchedule { body, .. } => self.reach(body, tainted, reached, memo),
            StmtKind::Assume(e) | StmtKind::Assert(e) => subscripts(e, tainted, reached),
            StmtKind::Empty | StmtKind::Barrier => {}
        }
    }
}

/// A subscript with the `+ 0` and `- 0` terms an unrolled copy leaves (`x[i + k]` at `k = 0`)
/// dropped. Only in subscripts, which are integers: there `e + 0` is `e` (a float's `-0.0 + 0`
/// is not `-0.0`).
fn without_zero_terms(e: Expr) -> Expr {
    let span = e.span;
    match e.kind {
        ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let (a, b) = (without_zero_terms(*a), without_zero_terms(*b));
            match (&a.kind, &b.kind) {
                (_, ExprKind::Int(0)) => a,
                (ExprKind::Int(0), _) if op == BinOp::Add => b,
                _ => Expr { kind: ExprKind::Binary(op, Box::new(a), Box::new(b)), span },
            }
        }
        kind => Expr { kind, span },
    }
}

/// The initializer's values into `values` (row-major, from `at`), by C's rules for a flat list
/// or one brace per sub-array.
fn fill(init: &Init, extents: &[i64], values: &mut [Option<Expr>], at: usize, name: &str) -> Result<(), Diagnostic> {
    let (items, span) = match init {
        Init::List(items, span) => (items, span),
        Init::Value(e) => return Err(Diagnostic::new(e.span, format!("per-thread array `{name}` is initialised with a braced list (`= {{0}}`), not a value"), "expected `{`")),
    };
    let size: usize = extents.iter().product::<i64>() as usize;
    let nested = items.iter().any(|i| matches!(i, Init::List(..)));
    if nested {
        let Some((&outer, inner)) = extents.split_first().filter(|(_, inner)| !inner.is_empty()) else {
            return Err(Diagnostic::new(*span, format!("too many braces in the initializer of per-thread array `{name}`"), "one brace per dimension"));
        };
        if !items.iter().all(|i| matches!(i, Init::List(..))) {
            return Err(Diagnostic::new(*span, format!("the initializer of per-thread array `{name}` mixes values and braced rows; write it flat or with one brace per row"), "mixed initializer"));
        }
        if items.len() as i64 > outer {
            return Err(Diagnostic::new(*span, format!("{} rows in the initializer of per-thread array `{name}`, whose extent is {outer}", items.len()), "too many rows"));
        }
        let stride = size / outer as usize;
        for (r, item) in items.iter().enumerate() {
            fill(item, inner, values, at + r * stride, name)?;
        }
        return Ok(());
    }
    if items.len() > size {
        return Err(Diagnostic::new(*span, format!("{} values in the initializer of per-thread array `{name}`, which has {size} elements", items.len()), "too many values"));
    }
    for (k, item) in items.iter().enumerate() {
        if let Init::Value(e) = item {
            values[at + k] = Some(e.clone());
        }
    }
    Ok(())
}


/// Zero of the element type.
fn zero(ty: ScalarType, span: Span) -> Expr {
    let kind = match ty {
        ScalarType::Float | ScalarType::Double => ExprKind::Float { value: 0.0, single: ty == ScalarType::Float },
        _ => ExprKind::Int(0),
    };
    Expr { kind, span }
}

/// `x` converted to the integer type `ty` (C's wrap-around, as the targets do it).
fn wrap(ty: ScalarType, x: i64) -> i64 {
    match ty {
        ScalarType::Char => x as i8 as i64,
        ScalarType::Int => x as i32 as i64,
        _ => x,
    }
}

/// Whether `s` assigns the scalar `name` anywhere (a later declaration of the name hides it;
/// erring towards "assigned" only keeps a local from being a constant).
fn assigns(s: &Stmt, name: &str) -> bool {
    let mut found = false;
    walk_stmt(s, &mut |s| found |= matches!(&s.kind, StmtKind::Assign { target, .. } if matches!(&target.kind, ExprKind::Var(v) if v == name)), &mut |_| {});
    found
}
