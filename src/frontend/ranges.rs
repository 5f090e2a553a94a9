//! The ranges of a kernel's integer arithmetic, as facts the launch checks.
//!
//! C leaves a signed `+`, `-`, `*` or negation past its type's range undefined (the GPU wraps
//! it: `int p = v * B + u` turns negative, and `if (p < n) c[p] = ...` writes before the
//! array), and a conversion to a narrower integer type changes the value. The verifier models
//! integers exactly, so each such operation of a kernel is an obligation it must prove within
//! its type ([`crate::access`]). Where an operation's range depends on the sizes, no proof can
//! hold for every size: the launch must refuse the sizes where it overflows.
//!
//! Contract: [`overflow_facts`] gives, for each schedule, one [`FactKind::Defined`] fact per
//! integer operation of its kernel (the body, the bounds of the loops the kernel runs, a
//! serial loop counter's last step) whose range may leave its C type: `hi <= MAX` or
//! `lo >= MIN`, where `[lo, hi]` is the operation's range by interval arithmetic over the
//! loop nest (a loop counter ranges over its bounds' range, a local scalar over its
//! definition's), written in parameters and scalars the host computes. The facts are
//! sufficient: where they hold, no such operation leaves its type. They over-approximate
//! where a counter occurs twice in one operation, and so may refuse sizes near a type's limit
//! that would not overflow. Left out: facts the parameters' C types and the program's
//! `assume`s already imply (`u + 1` for `u < B`; a `long` sum of `int`s), and an operation
//! whose range has no such expression (a value read from an array, a product of operands of
//! unknown sign, `min`, `?:`): the verifier's obligation reports those. A fact has no
//! polynomial constraint: it joins no tree, it is checked by the dispatch code, the driver
//! and `tune` as the other facts are.

use super::ast::*;
use super::model::{Fact, FactKind, KernelFunction, Schedule};
use crate::emit::casts::DeclaredTypes;
use constraints::{Monomial, Poly, Var};
use std::collections::{BTreeSet, HashMap};

/// A value's range over the loop nest: `[lo, hi]`, inclusive, as expressions the host can
/// evaluate, and numeric bounds of it where they are known (from the C types, the facts'
/// least values and the launch's grid limits), which decide whether a fact is needed at all.
#[derive(Clone, Debug)]
struct Range {
    lo: Expr,
    hi: Expr,
    bounds: Option<(i128, i128)>,
}

impl Range {
    fn point(e: &Expr, bounds: Option<(i128, i128)>) -> Range {
        Range { lo: e.clone(), hi: e.clone(), bounds }
    }

    fn is_point(&self) -> bool {
        self.lo.to_string() == self.hi.to_string()
    }

    fn sign(&self) -> Sign {
        match self.bounds {
            Some((lo, _)) if lo >= 1 => Sign::Positive,
            Some((lo, _)) if lo >= 0 => Sign::NonNegative,
            _ => Sign::Unknown,
        }
    }
}

/// Interval arithmetic on numeric bounds, `None` past 128 bits.
fn add_bounds(a: Option<(i128, i128)>, b: Option<(i128, i128)>) -> Option<(i128, i128)> {
    let ((al, ah), (bl, bh)) = (a?, b?);
    Some((al.checked_add(bl)?, ah.checked_add(bh)?))
}

fn sub_bounds(a: Option<(i128, i128)>, b: Option<(i128, i128)>) -> Option<(i128, i128)> {
    let ((al, ah), (bl, bh)) = (a?, b?);
    Some((al.checked_sub(bh)?, ah.checked_sub(bl)?))
}

fn mul_bounds(a: Option<(i128, i128)>, b: Option<(i128, i128)>) -> Option<(i128, i128)> {
    let ((al, ah), (bl, bh)) = (a?, b?);
    let p = [al.checked_mul(bl)?, al.checked_mul(bh)?, ah.checked_mul(bl)?, ah.checked_mul(bh)?];
    Some((*p.iter().min()?, *p.iter().max()?))
}

/// A non-negative dividend by a positive divisor (C's truncation is the floor there).
fn div_bounds(a: Option<(i128, i128)>, b: Option<(i128, i128)>, rem: bool) -> Option<(i128, i128)> {
    let ((al, ah), (bl, bh)) = (a?, b?);
    if al < 0 || bl < 1 || bh < bl {
        return None;
    }
    Some(if rem { (0, ah.min(bh - 1)) } else { (al / bh, ah / bl) })
}

fn meet(a: Option<(i128, i128)>, b: Option<(i128, i128)>) -> Option<(i128, i128)> {
    match (a, b) {
        (Some((al, ah)), Some((bl, bh))) => Some((al.max(bl), ah.min(bh))),
        (x, None) | (None, x) => x,
    }
}

/// A quotient `var = dividend / divisor` of [`Ranges::quotient_bound`]: `dividend >= 0`, the
/// divisor a positive monomial of coefficient 1.
struct Quotient {
    var: Var,
    dividend: Poly,
    divisor: Poly,
    divisor_monomial: Monomial,
    bounds: Option<(i128, i128)>,
}

/// A lower bound proved by the program's facts or its arithmetic.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Sign {
    Unknown,
    NonNegative,
    Positive,
}

/// A sum `x += e` that a loop bounds ([`Ranges::accumulators`]): its range during the loop
/// and after it, and, for an update inside a nested loop, the ranges before an update and
/// anywhere in the nest.
struct Accumulator {
    name: String,
    during: Range,
    after: Range,
    nest: Option<(Range, Range)>,
}

struct Ranges<'f> {
    function: &'f KernelFunction,
    types: DeclaredTypes,
    /// The arrays' element types, for [`Ranges::type_of`].
    elems: HashMap<String, ScalarType>,
    /// Each integer parameter's least and greatest values, by its `assume`s and `assert`s
    /// (`B >= 1`: 1) and the facts on the arrays' extents (`2 * N <= 2147483647`).
    limits: HashMap<String, (i128, i128)>,
    /// Loop counters and local scalars in scope: their range (`None`: assigned, unknown).
    env: HashMap<String, Option<Range>>,
    /// Scalars the host defines from a host loop's counter: they change during the call,
    /// so a fact can name them only through their definition.
    varying: BTreeSet<String>,
    facts: Vec<Fact>,
    seen: BTreeSet<String>,
    /// Each fact made, as a polynomial bound (see [`Ranges::fact`]).
    made: Vec<Made>,
    /// Each derived scalar's bounds, once computed: a chain `d1 = d0 * d0; d2 = d1 * d1; ...`
    /// reads each definition twice per level.
    derived_bounds: std::cell::RefCell<HashMap<String, Option<(i128, i128)>>>,
    /// Each varying scalar's range, once computed (for the same reason).
    varying_ranges: std::cell::RefCell<HashMap<String, Option<Range>>>,
    /// Sums updated inside loops nested in a loop that bounded them for its whole nest
    /// ([`Ranges::accumulators`]): each with its range before an update and at any point of
    /// the nest, which an assignment inside the nest leaves in place of "unknown".
    nest_sums: HashMap<String, (Range, Range)>,
}

/// The most nodes a fact's condition may have: past it (a range through long chains of
/// definitions) no fact is made, as for a range that cannot be written.
const MAX_FACT_NODES: usize = 400;

struct Made {
    poly: Option<Poly>,
    upper: bool,
    ty: ScalarType,
    index: usize,
}

/// The facts that keep every integer operation of `function`'s kernels within its C type (see
/// the module's contract).
pub fn overflow_facts(function: &KernelFunction) -> Vec<Fact> {
    let host_counters: BTreeSet<String> = function.schedules.iter().flat_map(|s| s.host_loops.iter().map(|l| l.var.clone())).collect();
    let varying = function.derived.iter().filter(|d| function.names_read([d.name.clone()]).iter().any(|n| host_counters.contains(n))).map(|d| d.name.clone()).collect();
    let mut r = Ranges { function, types: DeclaredTypes::of_function(function), elems: function.arrays.iter().map(|a| (a.name.clone(), a.elem)).collect(), limits: limits(function), env: HashMap::new(), varying, facts: Vec::new(), seen: BTreeSet::new(), made: Vec::new(), derived_bounds: Default::default(), varying_ranges: Default::default(), nest_sums: HashMap::new() };
    // An array's extents are the host's arithmetic in C's types too (the driver checks them):
    // `float a[2 * N]` bounds `N` for the kernels' facts.
    for a in &function.arrays {
        for e in &a.extent_exprs {
            r.operations(e);
        }
    }
    for m in &r.made {
        let Some(p) = m.poly.as_ref().filter(|_| m.upper) else { continue };
        let terms: Vec<_> = p.terms().collect();
        let ([(mono, c)], Some((_, most))) = (terms.as_slice(), m.ty.integer_range()) else { continue };
        let (Some(c), [(v, 1)]) = (c.is_integer().then(|| i128::try_from(c.to_integer()).ok()).flatten().filter(|c| *c >= 1), mono.factors()) else { continue };
        let entry = r.limits.entry(v.name().to_string()).or_insert((i128::MIN, i128::MAX));
        entry.1 = entry.1.min(i128::from(most) / c);
    }
    for s in &function.schedules {
        r.env.clear();
        r.schedule(s);
    }
    r.facts
}

/// The least and greatest values the facts give each integer parameter (`p >= c`, `p < c`,
/// `p == c`, ...).
fn limits(function: &KernelFunction) -> HashMap<String, (i128, i128)> {
    let mut limits: HashMap<String, (i128, i128)> = HashMap::new();
    for f in function.facts.iter().filter(|f| f.kind != FactKind::Defined) {
        let ExprKind::Binary(op, a, b) = &f.condition.kind else { continue };
        let (name, bound, op) = match (&a.kind, &b.kind) {
            (ExprKind::Var(n), ExprKind::Int(c)) => (n, *c, *op),
            (ExprKind::Int(c), ExprKind::Var(n)) => (n, *c, flip(*op)),
            _ => continue,
        };
        let c = i128::from(bound);
        let (least, most) = match op {
            BinOp::Eq => (c, c),
            BinOp::Ge => (c, i128::MAX),
            BinOp::Gt => (c + 1, i128::MAX),
            BinOp::Le => (i128::MIN, c),
            BinOp::Lt => (i128::MIN, c - 1),
            _ => continue,
        };
        if function.params.iter().any(|p| &p.name == name && p.ty.is_integer()) {
            let e = limits.entry(name.clone()).or_insert((i128::MIN, i128::MAX));
            *e = (e.0.max(least), e.1.min(most));
        }
    }
    // A block loop `u < B` from 0: a launch has at least one thread along it (the launch
    // refuses an empty block), so the kernel runs only where `B >= 1`.
    for s in &function.schedules {
        for l in &s.block {
            if let (ExprKind::Int(0), ExprKind::Var(name)) = (&l.lo.kind, &l.hi.kind) {
                if function.params.iter().any(|p| &p.name == name && p.ty.is_integer()) {
                    let e = limits.entry(name.clone()).or_insert((i128::MIN, i128::MAX));
                    e.0 = e.0.max(1);
                }
            }
        }
    }
    limits
}

/// `a OP b` as `b OP' a`.
fn flip(op: BinOp) -> BinOp {
    match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        other => other,
    }
}

fn int(v: i64) -> Expr {
    Expr::new(ExprKind::Int(v), Default::default())
}

fn constant(e: &Expr) -> Option<i64> {
    match &e.kind {
        ExprKind::Int(v) => Some(*v),
        ExprKind::Unary(UnOp::Neg, a) => constant(a)?.checked_neg(),
        _ => None,
    }
}

/// `a op b`, folded where both are constants (and the result fits) or one is neutral.
fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
    if let (Some(x), Some(y)) = (constant(&a), constant(&b)) {
        let folded = match op {
            BinOp::Add => x.checked_add(y),
            BinOp::Sub => x.checked_sub(y),
            BinOp::Mul => x.checked_mul(y),
            _ => None,
        };
        if let Some(v) = folded {
            return int(v);
        }
    }
    match (op, constant(&a), constant(&b)) {
        (BinOp::Sub, Some(0), _) => return negated(b),
        (BinOp::Add, Some(0), _) | (BinOp::Mul, Some(1), _) => return b,
        (BinOp::Add | BinOp::Sub, _, Some(0)) | (BinOp::Mul | BinOp::Div, _, Some(1)) => return a,
        (BinOp::Mul, Some(0), _) | (BinOp::Mul, _, Some(0)) => return int(0),
        _ => {}
    }
    Expr::new(ExprKind::Binary(op, Box::new(a), Box::new(b)), Default::default())
}

/// The operation `x op= e` applies before its assignment.
fn compound(op: AssignOp) -> Option<BinOp> {
    match op {
        AssignOp::Add | AssignOp::AtomicAdd => Some(BinOp::Add),
        AssignOp::Sub => Some(BinOp::Sub),
        AssignOp::Mul => Some(BinOp::Mul),
        AssignOp::Div => Some(BinOp::Div),
        AssignOp::Set => None,
    }
}

/// `a op b` as written (no folding): an operation of the program, checked as such.
fn binary_kept(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::new(ExprKind::Binary(op, Box::new(a), Box::new(b)), Default::default())
}

/// `f(a, b)`: `min` or `max`, which the dispatch code evaluates as C's integer functions.
/// Whether `e` is the literal 1.
fn is_one(e: &Expr) -> bool {
    e.to_string() == "1"
}

fn call2(f: &str, a: Expr, b: Expr) -> Expr {
    if let (Some(x), Some(y)) = (constant(&a), constant(&b)) {
        return int(if f == "min" { x.min(y) } else { x.max(y) });
    }
    Expr::new(ExprKind::Call(Ident { name: f.to_string(), span: Default::default() }, vec![a, b]), Default::default())
}

fn negated(a: Expr) -> Expr {
    match constant(&a).and_then(i64::checked_neg) {
        Some(v) => int(v),
        None => Expr::new(ExprKind::Unary(UnOp::Neg, Box::new(a)), Default::default()),
    }
}

impl Ranges<'_> {
    fn schedule(&mut self, s: &Schedule) {
        // The kernel runs only where each of its loops runs at least once.
        let entered: Vec<_> = s.host_loops.iter().map(|l| (&l.lo, &l.hi, l.inclusive)).chain(s.grid.iter().chain(&s.block).map(|l| (&l.lo, &l.hi, false))).chain(s.between.iter().map(|l| (&l.lo, &l.hi, l.inclusive))).filter_map(|(lo, hi, inclusive)| self.entered(lo, hi, inclusive)).collect();
        self.schedule_loops(s);
        self.leave(entered);
    }

    /// Inside a loop `v < X` (`v <= X`) from `lo`, the name `X` is at least `lo + 1` (`lo`):
    /// the loop runs, so its bound admits its first value. Returns what to restore on leaving.
    fn entered(&mut self, lo: &Expr, hi: &Expr, inclusive: bool) -> Option<(String, Option<(i128, i128)>)> {
        let ExprKind::Var(name) = &hi.kind else { return None };
        if self.env.contains_key(name) || !self.types.declared(name).is_some_and(ScalarType::is_integer) {
            return None;
        }
        let least = self.bounds(lo)?.0.checked_add(i128::from(!inclusive))?;
        let old = self.limits.get(name).copied();
        let (l, h) = old.unwrap_or((i128::MIN, i128::MAX));
        // Already known, or a loop that never runs (its facts hold vacuously).
        if least <= l || least > h {
            return None;
        }
        self.limits.insert(name.clone(), (least, h));
        self.forget_derived();
        Some((name.clone(), old))
    }

    fn leave(&mut self, entered: Vec<(String, Option<(i128, i128)>)>) {
        if entered.is_empty() {
            return;
        }
        for (name, old) in entered.into_iter().rev() {
            match old {
                Some(b) => self.limits.insert(name, b),
                None => self.limits.remove(&name),
            };
        }
        self.forget_derived();
    }

    /// The memoised bounds and ranges of derived scalars, computed under limits that changed.
    fn forget_derived(&mut self) {
        self.derived_bounds.borrow_mut().clear();
        self.varying_ranges.borrow_mut().clear();
    }

    fn schedule_loops(&mut self, s: &Schedule) {
        // The host's loops and the grid's: their bounds are the host's arithmetic (the driver
        // and the launch check it); their counters range over them.
        for l in &s.host_loops {
            let r = self.counter_range(&l.lo, &l.hi, l.inclusive);
            self.env.insert(l.var.clone(), r);
        }
        for l in &s.grid {
            // The launch refuses a grid of more blocks than CUDA allows along the dimension
            // (2^31 - 1 along x, 65535 along y and z): the counter is never past that.
            let most = if l.maps_to.ends_with(".x") { i128::from(i32::MAX) } else { 65535 };
            let r = self.counter_range(&l.lo, &l.hi, false).map(|mut r| {
                if let Some((lo, _)) = self.bounds(&l.lo) {
                    r.bounds = meet(r.bounds, lo.checked_add(most - 1).map(|hi| (lo, hi)));
                }
                r
            });
            self.env.insert(l.var.clone(), r);
        }
        // The serial loops between the grid and the block, and the block's bounds (offsets
        // by grid counters), run in the kernel.
        for l in &s.between {
            self.operations(&l.lo);
            self.operations(&l.hi);
            self.last_step(&l.var, l.ty, &l.hi, l.inclusive, l.step);
            let r = self.counter_range(&l.lo, &l.hi, l.inclusive);
            self.env.insert(l.var.clone(), r);
        }
        for l in &s.block {
            self.operations(&l.lo);
            self.operations(&l.hi);
            let r = self.counter_range(&l.lo, &l.hi, false);
            self.env.insert(l.var.clone(), r);
        }
        self.stmts(&s.body);
    }

    /// A counter's range: from its lower bound's least to its upper bound's greatest.
    fn counter_range(&self, lo: &Expr, hi: &Expr, inclusive: bool) -> Option<Range> {
        let (lo, hi) = (self.range(lo)?, self.range(hi)?);
        let last = if inclusive { 0 } else { 1 };
        let bounds = lo.bounds.zip(hi.bounds).map(|((l, _), (_, h))| (l, h - last));
        Some(Range { lo: lo.lo, hi: binary(BinOp::Sub, hi.hi, int(last as i64)), bounds })
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    self.operations(&d.init);
                    let r = if ty.is_integer() { self.range(&d.init) } else { None };
                    if let Some(r) = &r {
                        self.conversion(&d.init, r, *ty);
                    }
                    self.env.insert(d.name.name.clone(), r.map(|r| self.narrowed(r, *ty)));
                }
            }
            StmtKind::Assign { target, value, op } => match &target.kind {
                // A scalar takes the value's range; `x op= e` computes `x op e` first.
                ExprKind::Var(n) => {
                    let computed = match compound(*op) {
                        Some(op) => binary_kept(op, target.clone(), value.clone()),
                        None => value.clone(),
                    };
                    // A sum a loop bounded for its whole nest: before its update, one step
                    // short of the nest's last; after it, within the nest's range.
                    let nest = self.nest_sums.get(n).cloned();
                    if let Some((before, _)) = &nest {
                        self.env.insert(n.clone(), Some(before.clone()));
                    }
                    self.operations(&computed);
                    let ty = self.types.declared(n).filter(|t| t.is_integer());
                    let r = ty.and_then(|_| self.range(&computed));
                    if let (Some(t), Some(r)) = (ty, &r) {
                        self.conversion(&computed, r, t);
                    }
                    let r = r.zip(ty).map(|(r, t)| self.narrowed(r, t));
                    self.env.insert(n.clone(), if let Some((_, any)) = nest { Some(any) } else { r });
                }
                ExprKind::Index { indices, .. } => {
                    self.operations(value);
                    indices.iter().for_each(|i| self.operations(i));
                }
                _ => self.operations(value),
            },
            StmtKind::If { cond, then_branch, else_branch } => {
                self.operations(cond);
                // A scalar either branch assigns is unknown after it.
                for (k, branch) in std::iter::once(then_branch).chain(else_branch).enumerate() {
                    let saved = self.env.clone();
                    if k == 0 {
                        self.refine(cond);
                    }
                    self.stmt(branch);
                    let assigned: Vec<String> = crate::access::assigned_scalars(branch);
                    self.env = saved;
                    for n in assigned {
                        self.unknown(n);
                    }
                }
            }
            StmtKind::Block(items) => {
                let saved = self.env.clone();
                self.stmts(items);
                let assigned = crate::access::assigned_scalars(s);
                self.env = saved;
                for n in assigned {
                    self.unknown(n);
                }
            }
            StmtKind::For(l) => {
                self.operations(&l.lo);
                self.operations(&l.hi);
                self.last_step(&l.var.name, l.ty, &l.hi, l.inclusive, l.step);
                let saved = self.env.clone();
                let entered: Vec<_> = self.entered(&l.lo, &l.hi, l.inclusive).into_iter().collect();
                let counter = self.counter_range(&l.lo, &l.hi, l.inclusive);
                // Scalars the body assigns vary by iteration; a sum `x += e` (one per iteration)
                // is bounded by the iterations before it.
                let accumulated = self.accumulators(l, counter.clone());
                let outer_nest = self.nest_sums.clone();
                for a in &accumulated {
                    if let Some(nest) = &a.nest {
                        self.nest_sums.insert(a.name.clone(), nest.clone());
                    }
                }
                for n in crate::access::assigned_scalars(&l.body) {
                    self.unknown(n);
                }
                self.env.insert(l.var.name.clone(), counter);
                for a in &accumulated {
                    self.env.insert(a.name.clone(), Some(a.during.clone()));
                }
                self.stmt(&l.body);
                self.leave(entered);
                self.nest_sums = outer_nest;
                let assigned = crate::access::assigned_scalars(s);
                self.env = saved;
                for n in assigned {
                    self.unknown(n);
                }
                for a in accumulated {
                    self.env.insert(a.name, Some(a.after));
                }
            }
            _ => {}
        }
    }

    /// Where `cond` holds: each local of a conjunct `x < e` (`<=`, `>`, `>=`, either way
    /// round) with `e` one value of the host's (a parameter, `n * m`) bounded by `e` instead:
    /// under `if (i < n && j < m)`, `i * m + j` is at most `(n - 1) * m + (m - 1)`, where the
    /// rounded-up grid alone would allow more (a safe `n * m` just below 2^31 was refused).
    fn refine(&mut self, cond: &Expr) {
        let ExprKind::Binary(op, a, b) = &cond.kind else { return };
        if *op == BinOp::And {
            self.refine(a);
            self.refine(b);
            return;
        }
        let local = |e: &Expr| match &e.kind {
            ExprKind::Var(x) if matches!(self.env.get(x), Some(Some(_))) => Some(x.clone()),
            _ => None,
        };
        let (x, bound, op) = match (local(a), local(b)) {
            (Some(x), _) => (x, b, *op),
            (None, Some(x)) => (x, a, flip(*op)),
            _ => return,
        };
        let (Some(Some(r)), Some(g)) = (self.env.get(&x).cloned(), self.range(bound)) else { return };
        if !g.is_point() {
            return;
        }
        let shift = |e: Expr, by: i64| if by < 0 { binary(BinOp::Sub, e, int(-by)) } else { binary(BinOp::Add, e, int(by)) };
        let at = |b: Option<(i128, i128)>, by: i128| b.and_then(|(l, h)| Some((l.checked_add(by)?, h.checked_add(by)?)));
        let refined = match op {
            BinOp::Lt | BinOp::Le => {
                let by = if op == BinOp::Lt { -1 } else { 0 };
                let most = at(g.bounds, by).map(|(_, h)| h);
                Range { hi: shift(g.hi, by as i64), bounds: r.bounds.map(|(l, h)| (l, most.map_or(h, |m| h.min(m)))), lo: r.lo }
            }
            BinOp::Gt | BinOp::Ge => {
                let by = if op == BinOp::Gt { 1 } else { 0 };
                let least = at(g.bounds, by).map(|(l, _)| l);
                Range { lo: shift(g.lo, by as i64), bounds: r.bounds.map(|(l, h)| (least.map_or(l, |m| l.max(m)), h)), hi: r.hi }
            }
            _ => return,
        };
        // A guard that no value passes leaves the branch dead: nothing to bound.
        if refined.bounds.is_some_and(|(l, h)| l > h) {
            return;
        }
        self.env.insert(x, Some(refined));
    }

    /// The scalars of `l`'s body assigned once, by `x += e` or `x -= e` with `e` reading
    /// nothing the body assigns or defines: each with its range during the loop (before its
    /// update: the start plus at most `trips - 1` steps of `e`) and after it (at most `trips`
    /// steps, none where the loop does not run). `trips` is at most `hi - lo` (`+ 1` for `<=`).
    fn accumulators(&mut self, l: &ForLoop, counter: Option<Range>) -> Vec<Accumulator> {
        let mut updates: HashMap<String, Vec<(AssignOp, Expr, Vec<&ForLoop>)>> = HashMap::new();
        let mut defined = BTreeSet::new();
        // An update inside a loop of the body runs once per iteration of that loop: `path`
        // holds the loops around it, whose trip counts multiply its steps.
        fn collect<'a>(s: &'a Stmt, path: &mut Vec<&'a ForLoop>, updates: &mut HashMap<String, Vec<(AssignOp, Expr, Vec<&'a ForLoop>)>>, defined: &mut BTreeSet<String>) {
            match &s.kind {
                StmtKind::Assign { target: Expr { kind: ExprKind::Var(n), .. }, op, value } => {
                    updates.entry(n.clone()).or_default().push((*op, value.clone(), path.clone()));
                }
                StmtKind::Decl { vars, .. } => defined.extend(vars.iter().map(|d| d.name.name.clone())),
                StmtKind::Block(items) => items.iter().for_each(|x| collect(x, path, updates, defined)),
                StmtKind::If { then_branch, else_branch, .. } => {
                    collect(then_branch, path, updates, defined);
                    else_branch.iter().for_each(|x| collect(x, path, updates, defined));
                }
                StmtKind::For(inner) => {
                    path.push(inner);
                    collect(&inner.body, path, updates, defined);
                    path.pop();
                }
                // A `meta_for` runs its iterations side by side: not a count of steps.
                StmtKind::MetaFor(inner) => {
                    let mut inside = HashMap::new();
                    collect(&inner.body, path, &mut inside, defined);
                    for (n, ups) in inside {
                        updates.entry(n).or_default().extend(ups.into_iter().map(|(_, e, p)| (AssignOp::Set, e, p)));
                    }
                }
                _ => {}
            }
        }
        collect(&l.body, &mut Vec::new(), &mut updates, &mut defined);
        let (Some(counter), Some(lo), Some(hi)) = (counter, self.range(&l.lo), self.range(&l.hi)) else { return Vec::new() };
        let mut trips = binary(BinOp::Sub, hi.hi, lo.lo);
        let mut trips_most = hi.bounds.zip(lo.bounds).and_then(|((_, h), (l0, _))| h.checked_sub(l0));
        if l.inclusive {
            trips = binary(BinOp::Add, trips, int(1));
            trips_most = trips_most.and_then(|t| t.checked_add(1));
        }
        let mut out = Vec::new();
        for (n, ups) in &updates {
            let [(op @ (AssignOp::Add | AssignOp::Sub), e, path)] = ups.as_slice() else { continue };
            // Read by the step or by a nested loop's bounds: nothing the body assigns or defines.
            let mut read = Vec::new();
            e.names(&mut read);
            path.iter().for_each(|inner| {
                inner.lo.names(&mut read);
                inner.hi.names(&mut read);
            });
            let nested = !path.is_empty();
            if read.iter().any(|r| updates.contains_key(r) || defined.contains(r)) || !self.types.declared(n).is_some_and(ScalarType::is_integer) || self.nest_sums.contains_key(n) || (nested && defined.contains(n)) {
                continue;
            }
            let Some(Some(start)) = self.env.get(n).cloned() else { continue };
            // The counters in scope at the update, for its step and the nested loops' bounds.
            let saved: Vec<(String, Option<Option<Range>>)> = std::iter::once(&l.var.name).chain(path.iter().map(|inner| &inner.var.name)).map(|v| (v.clone(), self.env.get(v).cloned())).collect();
            self.env.insert(l.var.name.clone(), Some(counter.clone()));
            // Each nested loop's trip count, at most `max(hi - lo (+ 1), 0)` over the counters
            // around it.
            let mut per_outer: Option<(Expr, Option<i128>)> = Some((int(1), Some(1)));
            for inner in path {
                let (Some(lo), Some(hi)) = (self.range(&inner.lo), self.range(&inner.hi)) else {
                    per_outer = None;
                    break;
                };
                let mut t = binary(BinOp::Sub, hi.hi.clone(), lo.lo.clone());
                let mut most = hi.bounds.zip(lo.bounds).and_then(|((_, h), (l0, _))| h.checked_sub(l0));
                if inner.inclusive {
                    t = binary(BinOp::Add, t, int(1));
                    most = most.and_then(|m| m.checked_add(1));
                }
                // `max(t, 0)`: the bounds' expressions range over counters whose own ranges may
                // be empty at some sizes (`j` from `-k` to `k` is `2*K - 2` steps at `K = 0`),
                // so the numeric bounds cannot drop it.
                t = match (hi.bounds, lo.bounds) {
                    // A count the bounds fix (`l <= 3`: 4) is written as the number.
                    (Some((h0, h1)), Some((l0, l1))) if h0 == h1 && l0 == l1 => int(i64::try_from((h1 - l0 + i128::from(inner.inclusive)).max(0)).unwrap_or(i64::MAX)),
                    _ => call2("max", t, int(0)),
                };
                let counter = self.counter_range(&inner.lo, &inner.hi, inner.inclusive);
                self.env.insert(inner.var.name.clone(), counter);
                per_outer = per_outer.map(|(p, pm)| (if is_one(&p) { t } else { binary(BinOp::Mul, p, t) }, pm.zip(most).and_then(|(a, b)| a.checked_mul(b.max(0)))));
            }
            let step = per_outer.is_some().then(|| self.range(e)).flatten();
            for (v, r) in saved {
                match r {
                    Some(r) => self.env.insert(v, r),
                    None => self.env.remove(&v),
                };
            }
            let (Some(step), Some((per_outer, per_outer_most))) = (step, per_outer) else { continue };
            let step = if *op == AssignOp::Sub { Range { lo: negated(step.hi), hi: negated(step.lo), bounds: step.bounds.map(|(a, b)| (-b, -a)) } } else { step };
            // `k` steps of `e` lie in `[k * min(e, 0), k * max(e, 0)]` for `0 <= k <= most`.
            let steps = |k: Expr, most: Option<i128>| {
                let k = Range { lo: int(0), hi: k, bounds: most.map(|m| (0, m.max(0))) };
                let down = Range { lo: call2("min", step.lo.clone(), int(0)), hi: int(0), bounds: step.bounds.map(|(a, _)| (a.min(0), 0)) };
                let up = Range { lo: int(0), hi: call2("max", step.hi.clone(), int(0)), bounds: step.bounds.map(|(_, b)| (0, b.max(0))) };
                let (low, high) = (mul_bounds(k.bounds, down.bounds), mul_bounds(k.bounds, up.bounds));
                Range {
                    lo: binary(BinOp::Add, start.lo.clone(), binary(BinOp::Mul, k.hi.clone(), down.lo)),
                    hi: binary(BinOp::Add, start.hi.clone(), binary(BinOp::Mul, k.hi, up.hi)),
                    bounds: add_bounds(start.bounds, low.zip(high).map(|((l0, _), (_, h1))| (l0, h1))),
                }
            };
            if !nested {
                let during = steps(binary(BinOp::Sub, trips.clone(), int(1)), trips_most.map(|t| t - 1));
                let after = steps(call2("max", trips.clone(), int(0)), trips_most);
                out.push(Accumulator { name: n.clone(), during, after, nest: None });
                continue;
            }
            // Nested: the whole nest makes at most `trips * per_outer` updates, so the sum
            // before an update is at most one step short of that, and anywhere in the nest
            // (after a nested loop) at most that.
            let total = binary(BinOp::Mul, call2("max", trips.clone(), int(0)), per_outer);
            let total_most = trips_most.zip(per_outer_most).and_then(|(t, p)| t.max(0).checked_mul(p));
            let before = steps(binary(BinOp::Sub, total.clone(), int(1)), total_most.map(|t| t - 1));
            let any = steps(total, total_most);
            out.push(Accumulator { name: n.clone(), during: any.clone(), after: any.clone(), nest: Some((before, any)) });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// A scalar assigned somewhere it cannot be followed: unknown, or the range a loop
    /// around gave it for the whole nest.
    fn unknown(&mut self, n: String) {
        let r = self.nest_sums.get(&n).map(|(_, any)| any.clone());
        self.env.insert(n, r);
    }

    /// The counter's value after its last step, `hi - 1 + step` (`hi + step` for `<=`), stays
    /// within its type.
    fn last_step(&mut self, var: &str, ty: ScalarType, hi: &Expr, inclusive: bool, step: i64) {
        let Some(hi) = self.range(hi) else { return };
        let past = i128::from(step) - i128::from(!inclusive);
        let after = binary(BinOp::Add, binary(BinOp::Sub, hi.hi, int(i64::from(!inclusive))), int(step));
        let bounds = hi.bounds.and_then(|(l, h)| Some((l.checked_add(past)?, h.checked_add(past)?)));
        self.require_most(&format!("`{var} += {step}`"), &Range { lo: after.clone(), hi: after, bounds }, ty);
    }

    /// Walks `e`, requiring each integer operation in it within its type; an operand of a sum
    /// of two non-negative operands of the same type is within it when the sum is (and a
    /// factor of a product by a positive factor), so it needs no fact of its own.
    fn operations(&mut self, e: &Expr) {
        self.operation(e, false);
    }

    fn operation(&mut self, e: &Expr, implied: bool) {
        match &e.kind {
            ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), a, b) => {
                let ty = self.type_of(e);
                if let (Some(t), false) = (ty, implied) {
                    if t.is_integer() {
                        if let Some(r) = self.range(e) {
                            self.require(e, &r, t);
                        }
                    }
                }
                let (same_a, same_b) = (ty.is_some() && self.type_of(a) == ty, ty.is_some() && self.type_of(b) == ty);
                let sign = |x: &Expr| self.range(x).map_or(Sign::Unknown, |r| r.sign());
                let (sa, sb) = (sign(a), sign(b));
                let (ia, ib) = match op {
                    BinOp::Add => (sa >= Sign::NonNegative && sb >= Sign::NonNegative, sa >= Sign::NonNegative && sb >= Sign::NonNegative),
                    BinOp::Mul => (sa >= Sign::NonNegative && sb == Sign::Positive, sb >= Sign::NonNegative && sa == Sign::Positive),
                    _ => (false, false),
                };
                self.operation(a, ia && same_a);
                self.operation(b, ib && same_b);
            }
            ExprKind::Unary(UnOp::Neg, a) => {
                if let Some(t) = self.type_of(e).filter(|t| t.is_integer()) {
                    if let Some(r) = self.range(e) {
                        self.require(e, &r, t);
                    }
                }
                self.operation(a, false);
            }
            ExprKind::Cast(t, a) => {
                if t.is_integer() {
                    if let Some(r) = self.range(a) {
                        self.conversion(a, &r, *t);
                    }
                }
                self.operation(a, false);
            }
            ExprKind::Binary(_, a, b) => {
                self.operation(a, false);
                self.operation(b, false);
            }
            ExprKind::Unary(_, a) => self.operation(a, false),
            ExprKind::Cond(c, a, b) => {
                self.operation(c, false);
                self.operation(a, false);
                self.operation(b, false);
            }
            ExprKind::Index { indices, .. } => indices.iter().for_each(|i| self.operation(i, false)),
            ExprKind::Call(f, args) => {
                // `abs` of the type's least value is past its greatest.
                if f.name == "abs" {
                    if let (Some(t), Some(r)) = (self.type_of(e).filter(|t| t.is_integer()), self.range(e)) {
                        self.require_most(&format!("`{e}`"), &r, t);
                    }
                }
                args.iter().for_each(|a| self.operation(a, false))
            }
            ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Var(_) | ExprKind::Builtin(_) => {}
        }
    }

    fn type_of(&self, e: &Expr) -> Option<ScalarType> {
        crate::emit::overloads::type_of(e, &self.types, &self.elems)
    }

    /// `e`, of an integer type wider than `target`, converted to `target` keeps its value.
    /// A conversion to `char` gets none: a program narrows to 8 bits to wrap (a byte of a
    /// hash, a quantised value), and C defines the result; the range after it is all of
    /// `char` wherever the value may not fit ([`Self::narrowed`]), and the verifier models it
    /// as the value itself only where it proves the value fits.
    fn conversion(&mut self, e: &Expr, r: &Range, target: ScalarType) {
        if target == ScalarType::Char {
            return;
        }
        let (Some(from), Some((least, most))) = (self.type_of(e).and_then(ScalarType::integer_range), target.integer_range()) else { return };
        if from.0 < least || from.1 > most {
            let what = format!("`({target})({e})`");
            self.require_least(&what, r, target);
            self.require_most(&what, r, target);
        }
    }

    fn require(&mut self, e: &Expr, r: &Range, ty: ScalarType) {
        let what = format!("`{e}`");
        self.require_least(&what, r, ty);
        self.require_most(&what, r, ty);
    }

    fn require_most(&mut self, what: &str, r: &Range, ty: ScalarType) {
        let Some((_, max)) = ty.integer_range() else { return };
        if r.bounds.is_some_and(|(_, hi)| hi <= i128::from(max)) || self.quotient_bound(&r.hi, true).is_some_and(|hi| hi <= i128::from(max)) {
            return;
        }
        self.fact(what, &r.hi, true, ty);
    }

    fn require_least(&mut self, what: &str, r: &Range, ty: ScalarType) {
        let Some((min, _)) = ty.integer_range() else { return };
        if r.bounds.is_some_and(|(lo, _)| lo >= i128::from(min)) || self.quotient_bound(&r.lo, false).is_some_and(|lo| lo >= i128::from(min)) {
            return;
        }
        self.fact(what, &r.lo, false, ty);
    }

    /// The fact `bound <= MAX` (`upper`) or `bound >= MIN` of `ty`, unless one already made
    /// implies it: of two bounds that differ by a constant (`x + 1` and `x + 3`, an unrolled
    /// loop's neighbours), only the stronger is kept.
    fn fact(&mut self, what: &str, bound: &Expr, upper: bool, ty: ScalarType) {
        let Some((least, most)) = ty.integer_range() else { return };
        let mut nodes = 0usize;
        walk_expr(bound, &mut |_| nodes += 1);
        if nodes > MAX_FACT_NODES {
            return;
        }
        let condition = if upper { binary(BinOp::Le, bound.clone(), int(most)) } else { binary(BinOp::Ge, bound.clone(), int(least)) };
        let note = Some(format!("{what} stays within `{ty}`"));
        let poly = self.quotient_poly(bound, &mut Vec::new());
        if let Some(p) = &poly {
            for made in &mut self.made {
                let (Some(q), true) = (&made.poly, made.upper == upper && made.ty == ty) else { continue };
                let gap = if upper { q - p } else { p - q };
                match gap.as_constant() {
                    Some(c) if c >= constraints::Rational::from_integer(0.into()) => return,
                    Some(_) => {
                        let f = &mut self.facts[made.index];
                        f.condition = condition;
                        f.note = note;
                        made.poly = poly.clone();
                        return;
                    }
                    None => {}
                }
            }
        }
        if self.seen.insert(condition.to_string()) {
            self.made.push(Made { poly, upper, ty, index: self.facts.len() });
            self.facts.push(Fact { kind: FactKind::Defined, condition, constraint: None, note, kernel_range: true });
        }
    }

    /// `e`'s range over the loop nest, in names the host knows for the whole call.
    fn range(&self, e: &Expr) -> Option<Range> {
        let r = self.range_of(e)?;
        // A range through a chain of definitions each reading the last twice (`a1 = a0 / 2 +
        // a0 / 3; a2 = a1 / 2 + a1 / 3; ...`) doubles at each step: past the size a fact may
        // have, it cannot be written, and is not kept.
        let small = |x: &Expr| {
            let mut nodes = 0usize;
            walk_expr(x, &mut |_| nodes += 1);
            nodes <= MAX_FACT_NODES
        };
        (small(&r.lo) && small(&r.hi)).then_some(r)
    }

    fn range_of(&self, e: &Expr) -> Option<Range> {
        match &e.kind {
            ExprKind::Int(v) => Some(Range::point(e, Some((i128::from(*v), i128::from(*v))))),
            ExprKind::Var(n) => match self.env.get(n) {
                Some(r) => r.clone(),
                None if self.varying.contains(n) => {
                    if let Some(r) = self.varying_ranges.borrow().get(n) {
                        return r.clone();
                    }
                    let d = self.function.derived.iter().find(|d| &d.name == n)?;
                    let r = self.range(&d.value);
                    self.varying_ranges.borrow_mut().insert(n.clone(), r.clone());
                    r
                }
                None if self.types.declared(n).is_some_and(ScalarType::is_integer) => Some(Range::point(e, self.bounds(e))),
                None => None,
            },
            ExprKind::Cast(t, a) if t.is_integer() => Some(self.narrowed(self.range(a)?, *t)),
            ExprKind::Unary(UnOp::Neg, a) => {
                let r = self.range(a)?;
                Some(Range { lo: negated(r.hi), hi: negated(r.lo), bounds: r.bounds.map(|(l, h)| (-h, -l)) })
            }
            ExprKind::Binary(op, a, b) => {
                let (ra, rb) = (self.range(a)?, self.range(b)?);
                match op {
                    BinOp::Add => Some(Range { bounds: add_bounds(ra.bounds, rb.bounds), lo: binary(BinOp::Add, ra.lo, rb.lo), hi: binary(BinOp::Add, ra.hi, rb.hi) }),
                    BinOp::Sub => Some(Range { bounds: sub_bounds(ra.bounds, rb.bounds), lo: binary(BinOp::Sub, ra.lo, rb.hi), hi: binary(BinOp::Sub, ra.hi, rb.lo) }),
                    BinOp::Mul => self.product(ra, rb),
                    // A dividend by a positive divisor the host knows. C truncates toward 0, so
                    // where the dividend may be negative the quotient lies between `lo / d` and
                    // 0 and between 0 and `hi / d`, and a remainder within `d - 1` of 0.
                    BinOp::Div | BinOp::Rem => {
                        if !rb.is_point() || rb.sign() != Sign::Positive {
                            return None;
                        }
                        let rem = *op == BinOp::Rem;
                        if ra.sign() == Sign::Unknown {
                            let bounds = ra.bounds.zip(rb.bounds).map(|((al, ah), (bl, bh))| {
                                if rem {
                                    (if al < 0 { 1 - bh } else { 0 }, if ah > 0 { bh - 1 } else { 0 })
                                } else {
                                    ((al / bl).min(0), (ah / bl).max(0))
                                }
                            });
                            let d1 = binary(BinOp::Sub, rb.lo.clone(), int(1));
                            return Some(if rem {
                                Range { lo: negated(d1.clone()), hi: d1, bounds }
                            } else {
                                Range { lo: call2("min", binary(BinOp::Div, ra.lo, rb.lo.clone()), int(0)), hi: call2("max", binary(BinOp::Div, ra.hi, rb.lo), int(0)), bounds }
                            });
                        }
                        let bounds = div_bounds(ra.bounds, rb.bounds, rem);
                        Some(if rem {
                            Range { lo: int(0), hi: binary(BinOp::Sub, rb.lo, int(1)), bounds }
                        } else {
                            Range { lo: binary(BinOp::Div, ra.lo, rb.lo.clone()), hi: binary(BinOp::Div, ra.hi, rb.lo), bounds }
                        })
                    }
                    _ => None,
                }
            }
            // `c ? a : b` is one of its two values.
            ExprKind::Cond(_, a, b) if self.type_of(e).is_some_and(ScalarType::is_integer) => {
                let (ra, rb) = (self.range(a)?, self.range(b)?);
                let bounds = ra.bounds.zip(rb.bounds).map(|((al, ah), (bl, bh))| (al.min(bl), ah.max(bh)));
                Some(Range { lo: call2("min", ra.lo, rb.lo), hi: call2("max", ra.hi, rb.hi), bounds })
            }
            // C's integer `min`, `max` and `abs`: monotone in each argument.
            ExprKind::Call(f, args) if self.type_of(e).is_some_and(ScalarType::is_integer) => match (f.name.as_str(), args.as_slice()) {
                (which @ ("min" | "max"), [a, b]) => {
                    let (ra, rb) = (self.range(a)?, self.range(b)?);
                    let pick = |x: i128, y: i128| if which == "min" { x.min(y) } else { x.max(y) };
                    let bounds = ra.bounds.zip(rb.bounds).map(|((al, ah), (bl, bh))| (pick(al, bl), pick(ah, bh)));
                    Some(Range { lo: call2(which, ra.lo, rb.lo), hi: call2(which, ra.hi, rb.hi), bounds })
                }
                ("abs", [a]) => {
                    let ra = self.range(a)?;
                    if ra.sign() >= Sign::NonNegative {
                        return Some(ra);
                    }
                    let bounds = ra.bounds.map(|(l, h)| (if h < 0 { -h } else { 0 }, (-l).max(h)));
                    Some(Range { lo: int(0), hi: call2("max", negated(ra.lo), ra.hi), bounds })
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// `r` converted to `t`: kept where it fits, or where a fact keeps it (a conversion to
    /// `int` or `long`, [`Self::conversion`]); all of `char` where a conversion to `char`
    /// may wrap.
    fn narrowed(&self, r: Range, t: ScalarType) -> Range {
        let Some((least, most)) = t.integer_range() else { return r };
        let (least, most) = (i128::from(least), i128::from(most));
        if t == ScalarType::Char && !r.bounds.is_some_and(|(l, h)| l >= least && h <= most) {
            return Range { lo: int(least as i64), hi: int(most as i64), bounds: Some((least, most)) };
        }
        Range { bounds: meet(r.bounds, Some((least, most))), ..r }
    }

    /// `[a0, a1] * [b0, b1]`: one product per end where the signs make it so (both ranges
    /// non-negative, or one a single non-negative value), else the least and greatest of the
    /// four corners (`i * (m - i)`, whose second factor may be negative).
    fn product(&self, a: Range, b: Range) -> Option<Range> {
        let bounds = mul_bounds(a.bounds, b.bounds);
        let (sa, sb) = (a.sign(), b.sign());
        let one_each = (sa >= Sign::NonNegative && sb >= Sign::NonNegative) || (a.is_point() && sa >= Sign::NonNegative) || (b.is_point() && sb >= Sign::NonNegative);
        if one_each {
            return Some(Range { lo: binary(BinOp::Mul, a.lo, b.lo), hi: binary(BinOp::Mul, a.hi, b.hi), bounds });
        }
        let mut corners: Vec<Expr> = Vec::new();
        for (x, y) in [(&a.lo, &b.lo), (&a.lo, &b.hi), (&a.hi, &b.lo), (&a.hi, &b.hi)] {
            let c = binary(BinOp::Mul, x.clone(), y.clone());
            if !corners.iter().any(|k| k.to_string() == c.to_string()) {
                corners.push(c);
            }
        }
        let fold = |f: &str| corners.iter().cloned().reduce(|x, y| call2(f, x, y)).expect("a corner");
        Some(Range { lo: fold("min"), hi: fold("max"), bounds })
    }

    /// The greatest (`upper`) or least value of `e` (host names) as a polynomial in which
    /// each quotient `q = X / Y` (a derived scalar or written out; `X >= 0`, `Y` a positive
    /// monomial) is bounded through `X - Y + 1 <= q*Y <= X`: `(n / B - 1) * B + (B - 1)` is at
    /// most `n - 1`, which `int n` bounds, where the names' bounds alone would not tell.
    /// `None` where `e` is no such polynomial or a bound passes 128 bits.
    fn quotient_bound(&self, e: &Expr, upper: bool) -> Option<i128> {
        let mut quotients = Vec::new();
        let mut p = self.quotient_poly(e, &mut quotients)?;
        // Each rewriting removes a quotient from a term; a quotient's dividend may hold others.
        for _ in 0..8 {
            let mut changed = false;
            let mut next = Poly::zero();
            for (mono, c) in p.terms() {
                let positive = *c > constraints::Rational::from_integer(0.into());
                let found = quotients.iter().find_map(|q: &Quotient| {
                    let rest = mono.divide(&Monomial::var(q.var.clone()).mul(&q.divisor_monomial))?;
                    rest.factors().iter().all(|(v, _)| self.var_bounds(v, &quotients).is_some_and(|(lo, _)| lo >= 0)).then(|| (&q.dividend, &q.divisor, rest))
                });
                match found {
                    Some((x, y, rest)) => {
                        changed = true;
                        // q*Y at its greatest is X; at its least X - Y + 1.
                        let replaced = if positive == upper { x.clone() } else { x - y + Poly::one() };
                        next = next + replaced * Poly::term(c.clone(), rest);
                    }
                    None => next = next + Poly::term(c.clone(), mono.clone()),
                }
            }
            p = next;
            if !changed {
                break;
            }
        }
        let (lo, hi) = self.poly_bounds(&p, &quotients)?;
        Some(if upper { hi } else { lo })
    }

    /// Bounds of `p` by interval arithmetic, term by term and in Horner form (a name that
    /// several terms share factored out, recursively), whichever is tighter at each end: the
    /// terms alone lose that `ub1 - ub1*s` is at most 0 for `ub1, s >= 1`; `ub1*(1 - s)` keeps
    /// it. Every form of the same polynomial encloses its values, so their meet does too.
    fn poly_bounds(&self, p: &Poly, quotients: &[Quotient]) -> Option<(i128, i128)> {
        let mut by_terms: Option<(i128, i128)> = Some((0, 0));
        for (mono, c) in p.terms() {
            let c = c.is_integer().then(|| i128::try_from(c.to_integer()).ok()).flatten()?;
            let mut term = Some((c, c));
            for (v, e) in mono.factors() {
                for _ in 0..*e {
                    term = mul_bounds(term, self.var_bounds(v, quotients));
                }
            }
            by_terms = add_bounds(by_terms, term);
        }
        // The name in the most terms (the first in the polynomial's order on a tie).
        let mut shared: Option<(&Var, usize)> = None;
        for (mono, _) in p.terms() {
            for (v, _) in mono.factors() {
                let n = p.terms().filter(|(m, _)| m.exponent(v) > 0).count();
                if n >= 2 && shared.is_none_or(|(_, best)| n > best) {
                    shared = Some((v, n));
                }
            }
        }
        let Some((v, _)) = shared else { return by_terms };
        let one = Monomial::var(v.clone());
        let (mut factor, mut rest) = (Poly::zero(), Poly::zero());
        for (mono, c) in p.terms() {
            match mono.divide(&one) {
                Some(m) => factor = factor + Poly::term(c.clone(), m),
                None => rest = rest + Poly::term(c.clone(), mono.clone()),
            }
        }
        let (factor, rest) = (self.poly_bounds(&factor, quotients), self.poly_bounds(&rest, quotients));
        let horner = add_bounds(mul_bounds(self.var_bounds(v, quotients), factor), rest);
        meet(by_terms, horner)
    }

    /// `e` as a polynomial over host names, each quotient of it (a derived scalar defined as
    /// one, or `X / Y` written out) a variable recorded as (variable, `X`, `Y`, `Y`'s
    /// monomial) where `X >= 0` and `Y` is a monomial of coefficient 1 that is positive.
    fn quotient_poly(&self, e: &Expr, quotients: &mut Vec<Quotient>) -> Option<Poly> {
        let quotient = |q: Var, x: &Expr, y: &Expr, quotients: &mut Vec<Quotient>| -> Option<Poly> {
            let (xp, yp) = (self.quotient_poly(x, quotients)?, self.quotient_poly(y, quotients)?);
            let signs = self.bounds(x).is_some_and(|(lo, _)| lo >= 0) && self.bounds(y).is_some_and(|(lo, _)| lo >= 1);
            let terms: Vec<(Monomial, constraints::Rational)> = yp.terms().map(|(m, c)| (m.clone(), c.clone())).collect();
            let [(divisor_monomial, one)] = terms.as_slice() else { return None };
            if !signs || *one != constraints::Rational::from_integer(1.into()) {
                return None;
            }
            let divisor_monomial = divisor_monomial.clone();
            if !quotients.iter().any(|x| x.var == q) {
                let bounds = div_bounds(self.bounds(x), self.bounds(y), false);
                quotients.push(Quotient { var: q.clone(), dividend: xp, divisor: yp, divisor_monomial, bounds });
            }
            Some(Poly::from_var(q))
        };
        match &e.kind {
            ExprKind::Int(v) => Some(Poly::int(*v)),
            ExprKind::Var(n) => {
                if let Some(ExprKind::Binary(BinOp::Div, x, y)) = self.function.derived.iter().find(|d| &d.name == n).map(|d| &d.value.kind) {
                    if let Some(q) = quotient(Var::new(n), x, y, quotients) {
                        return Some(q);
                    }
                }
                Some(Poly::var(n))
            }
            ExprKind::Cast(t, a) if t.is_integer() => self.quotient_poly(a, quotients),
            ExprKind::Unary(UnOp::Neg, a) => Some(-self.quotient_poly(a, quotients)?),
            ExprKind::Binary(op, a, b) => match op {
                BinOp::Add => Some(self.quotient_poly(a, quotients)? + self.quotient_poly(b, quotients)?),
                BinOp::Sub => Some(self.quotient_poly(a, quotients)? - self.quotient_poly(b, quotients)?),
                BinOp::Mul => Some(self.quotient_poly(a, quotients)? * self.quotient_poly(b, quotients)?),
                // Named by the division's text: equal divisions are one quotient.
                BinOp::Div => quotient(Var::new(&format!("({e})")), a, b, quotients),
                _ => None,
            },
            _ => None,
        }
    }

    /// Bounds of a variable of [`Self::quotient_poly`]: a quotient's, or a name's.
    fn var_bounds(&self, v: &Var, quotients: &[Quotient]) -> Option<(i128, i128)> {
        match quotients.iter().find(|q| q.var == *v) {
            Some(q) => meet(q.bounds, self.bounds(&Expr::new(ExprKind::Var(v.name().to_string()), Default::default()))),
            None => self.bounds(&Expr::new(ExprKind::Var(v.name().to_string()), Default::default())),
        }
    }

    /// Bounds of `e` (in host names) from its names' C types and least values alone, in
    /// 128-bit integers: `None` where they cannot be told (a division by what may be 0, an
    /// overflow of 128 bits).
    fn bounds(&self, e: &Expr) -> Option<(i128, i128)> {
        match &e.kind {
            ExprKind::Int(v) => Some((i128::from(*v), i128::from(*v))),
            ExprKind::Var(n) => {
                let (lo, hi) = self.types.declared(n)?.integer_range()?;
                let (mut lo, mut hi) = (i128::from(lo), i128::from(hi));
                if let Some((l, h)) = self.limits.get(n) {
                    lo = lo.max(*l);
                    hi = hi.min(*h);
                }
                // A derived scalar: also its definition's bounds.
                if let Some(d) = self.function.derived.iter().find(|d| &d.name == n) {
                    let known = self.derived_bounds.borrow().get(n).copied();
                    let of_value = match known {
                        Some(b) => b,
                        None => {
                            let b = self.bounds(&d.value);
                            self.derived_bounds.borrow_mut().insert(n.clone(), b);
                            b
                        }
                    };
                    if let Some((dl, dh)) = of_value {
                        return Some((lo.max(dl), hi.min(dh)));
                    }
                }
                Some((lo, hi))
            }
            ExprKind::Cast(t, a) if t.is_integer() => {
                let (lo, hi) = t.integer_range()?;
                let (al, ah) = self.bounds(a)?;
                (al >= i128::from(lo) && ah <= i128::from(hi)).then_some((al, ah))
            }
            ExprKind::Unary(UnOp::Neg, a) => {
                let (lo, hi) = self.bounds(a)?;
                Some((-hi, -lo))
            }
            ExprKind::Binary(op, a, b) => {
                let ((al, ah), (bl, bh)) = (self.bounds(a)?, self.bounds(b)?);
                match op {
                    BinOp::Add => Some((al.checked_add(bl)?, ah.checked_add(bh)?)),
                    BinOp::Sub => Some((al.checked_sub(bh)?, ah.checked_sub(bl)?)),
                    BinOp::Mul => {
                        let p = [al.checked_mul(bl)?, al.checked_mul(bh)?, ah.checked_mul(bl)?, ah.checked_mul(bh)?];
                        Some((*p.iter().min()?, *p.iter().max()?))
                    }
                    // (An empty range, `bh < bl`, where a guard or a loop's entry leaves no
                    // value: no bounds.)
                    BinOp::Div if bl >= 1 && al >= 0 && bh >= bl => Some((al / bh, ah / bl)),
                    BinOp::Rem if bl >= 1 && al >= 0 && bh >= bl => Some((0, ah.min(bh - 1))),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::model::FactKind;

    fn facts(src: &str) -> Vec<String> {
        let program = crate::frontend::check_source("t.mf", src).unwrap_or_else(|d| panic!("{d:?}"));
        let f = &program.kernels[0];
        f.facts.iter().filter(|f| f.kind == FactKind::Defined && f.constraint.is_none()).map(|f| format!("{} ({})", f.condition, f.note.as_deref().unwrap_or(""))).collect()
    }

    #[test]
    fn an_index_past_int_is_a_fact_on_the_sizes_and_a_long_one_is_none() {
        let src = |ty: &str| {
            format!(
                "void k(long n, int B, float c[n]) {{
  assume(n >= 1 && B >= 1);
  meta_schedule {{
    meta_for (int v = 0; v < (n + B - 1) / B; v++)
      meta_for (int u = 0; u < B; u++) {{
        {ty} i = {cast}v * B + u;
        if (i < n) c[i] = 1.0f;
      }}
  }}
}}
",
                cast = if ty == "long" { "(long)" } else { "" }
            )
        };
        let f = facts(&src("int"));
        assert_eq!(f, ["((n + B - 1) / B - 1) * B + (B - 1) <= 2147483647 (`v * B + u` stays within `int`)"], "{f:?}");
        assert_eq!(facts(&src("long")), Vec::<String>::new());
    }

    #[test]
    fn operations_the_types_bound_need_no_fact() {
        let f = facts(
            "void k(int n, int B, float c[n]) {
  assume(n >= 1 && B >= 1 && n % B == 0);
  int g = n / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = u + 1;
        c[v * B + u] = (float)(i - 1);
      }
  }
}
",
        );
        // `v * B + u` is at most `g * B - 1`, and `g * B <= n` for `g = n / B`: an `int n`
        // bounds it, as it bounds `u + 1` (`u < B`) and `i - 1`.
        assert_eq!(f, Vec::<String>::new());
    }

    #[test]
    fn a_counter_that_occurs_twice_is_bounded_as_one_name() {
        // `(n / (w * s) - 1) * w * s + (w - 1)` is at most `n - w*s + w - 1`, and `w - w*s`
        // is at most 0 for `w, s >= 1`: bounded only where `w` is factored out of both terms.
        let src = |assume_s: &str| {
            format!(
                "void k(int n, int w, int s, float c[n]) {{
  assume(n >= 1 && w >= 1 && {assume_s} && n % (w * s) == 0);
  int g = n / (w * s);
  meta_schedule {{
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < w; u++)
        c[v * w * s + u] = 1.0f;
  }}
}}
"
            )
        };
        assert_eq!(facts(&src("s >= 1")), Vec::<String>::new());
        // Where `s` may be 0 the program divides by 0 (a fact of its own) and nothing bounds the
        // product by the quotient, so the index keeps its fact.
        let f = facts(&src("s >= 0"));
        assert!(f.iter().any(|f| f.contains("stays within `int`")), "{f:?}");
    }

    /// A sweep's kernels whose `int` arithmetic wraps at sizes the dispatcher accepted: an
    /// update `t += m; t *= 4`, a sum over a loop, `max(i, m) * 2`, `i * (m - i)` (a factor of
    /// either sign), and `v * B + u` over a grid `(n + B - 1) / B` with `long n` and no
    /// `assume` on `n` or `B`. Each now has its fact; the same kernels over values the types
    /// bound have none.
    #[test]
    fn updates_sums_choices_and_products_of_either_sign_are_ranged() {
        let kernel = |params: &str, assume: &str, body: &str| {
            format!(
                "void k({params}, float y[n]) {{
  {assume}
  meta_schedule {{
    meta_for (int v = 0; v < (n + B - 1) / B; v++)
      meta_for (int u = 0; u < B; u++) {{
        int i = v * B + u;
        if (i < n) {{ {body} }}
      }}
  }}
}}
"
            )
        };
        let ints = "int n, int m, int K, int B";
        let positive = "assume(n >= 1 && m >= 1 && K >= 1 && B >= 1);";
        for (body, fact) in [
            ("int t = i; t += m; t *= 4; y[i] = (float)t;", "`t * 4` stays within `int`"),
            ("int t = i; t = t + m; t = t * 4; y[i] = (float)t;", "`t * 4` stays within `int`"),
            ("int acc = 0; for (int k = 0; k < K; k++) acc += i; y[i] = (float)acc;", "`acc + i` stays within `int`"),
            ("int a = max(i, m) * 2; y[i] = (float)a;", "`max(i, m) * 2` stays within `int`"),
            ("int a = min(i - m, 0) * 4; y[i] = (float)a;", "`min(i - m, 0) * 4` stays within `int`"),
            ("int b = i * (m - i); y[i] = (float)b;", "`i * (m - i)` stays within `int`"),
            ("int c = (i < m ? i : m) * 4; y[i] = (float)c;", "`(i < m ? i : m) * 4` stays within `int`"),
        ] {
            let f = facts(&kernel(ints, positive, body));
            assert!(f.iter().any(|x| x.contains(fact)), "{body}: {f:?}");
        }
        // A sum in a loop nested in the loop is `K * K` steps, not one per outer iteration (a
        // first form bounded it by `2 * K` steps, too few); a nested loop's bounds may name
        // the counters around it (`j < k`: at most `K - 1` steps), its step too (`acc += j`).
        // Before its update the sum has made at most all but one of them; read after it (`t`),
        // all of them.
        for (body, fact) in [
            ("for (int k = 0; k < K; k++) for (int j = 0; j < K; j++) acc += i;", "(max(K, 0) * max(K, 0) - 1) * max(n - 1, 0) + (n - 1) <= 2147483647 (`acc + i` stays within `int`)"),
            ("for (int k = 0; k < K; k++) for (int j = 0; j < k; j++) acc += i;", "(max(K, 0) * max(K - 1, 0) - 1) * max(n - 1, 0) + (n - 1) <= 2147483647 (`acc + i` stays within `int`)"),
            ("for (int k = 0; k < K; k++) for (int j = 0; j < K; j++) acc += j;", "(max(K, 0) * max(K, 0) - 1) * max(K - 1, 0) + (K - 1) <= 2147483647 (`acc + j` stays within `int`)"),
            ("for (int k = 0; k < K; k++) for (int j = 0; j < K; j++) for (int l = 0; l <= 3; l++) acc -= i;", "(max(K, 0) * (max(K, 0) * 4) - 1) * min(-(n - 1), 0) - (n - 1) >= -2147483648 (`acc - i` stays within `int`)"),
            ("for (int k = 0; k < K; k++) for (int j = 0; j < K; j++) { if (j < i) acc += 3; int t = acc * 2; y[i] = (float)t; }", "max(K, 0) * max(K, 0) * 3 * 2 <= 2147483647 (`acc * 2` stays within `int`)"),
        ] {
            let f = facts(&kernel(ints, positive, &format!("int acc = 0; {body} y[i] = (float)acc;")));
            assert!(f.iter().any(|x| x == fact), "{body}: {f:?}");
        }
        // A nested loop's count written from its bounds' extremes (`j` from `-k` to `k`:
        // `K - 1 - -(K - 1)`) is negative where the loop around runs no iteration (`K = 0`):
        // never taken below zero.
        let f = facts(&kernel(ints, "assume(n >= 1 && K >= 0 && B >= 1);", "int acc = 0; for (int k = 0; k < K; k++) for (int j = -k; j < k; j++) acc += i; y[i] = (float)acc;"));
        assert!(f.iter().any(|x| x.contains("(max(K, 0) * max(K - 1 - -(K - 1), 0) - 1)") && x.contains("`acc + i`")), "{f:?}");
        // Two updates, or a nested loop bounded by a scalar the body assigns (its count is not
        // known before the loop): no bound is written.
        for body in ["for (int k = 0; k < K; k++) { acc += 1; for (int j = 0; j < K; j++) acc += i; }", "int m2 = 0; for (int k = 0; k < K; k++) { m2 = m2 + i; for (int j = 0; j < m2; j++) acc += 1; }"] {
            let f = facts(&kernel(ints, positive, &format!("int acc = 0; {body} y[i] = (float)acc;")));
            assert!(f.iter().all(|x| !x.contains("`acc + ")), "{body}: {f:?}");
        }
        // Bounded by the types: `char` operands, a sum of at most 100 small steps.
        for body in ["char c = (char)i; int t = c; t += 100; t *= 4; y[i] = (float)t;", "int acc = 0; for (int k = 0; k < 100; k++) acc += (i % 7); y[i] = (float)acc;"] {
            let f = facts(&kernel(ints, positive, body));
            assert!(f.iter().all(|x| !x.contains("`t ") && !x.contains("`acc")), "{body}: {f:?}");
        }
        // No `assume` at all: the block loop runs, so `B >= 1`; the grid's quotient of a `long`
        // of either sign is at most `max((n + B - 1) / B, 0)`.
        let f = facts(&kernel("long n, int B", "", "y[i] = 1.0f;"));
        assert_eq!(f, ["(max((n + B - 1) / B, 0) - 1) * B + (B - 1) <= 2147483647 (`v * B + u` stays within `int`)"], "{f:?}");
    }

    /// Under `if (i < n && j < m)`, `i * m + j` is at most `n * m - 1`, which the extent's own
    /// fact `n * m <= 2147483647` keeps: no fact of its own (a sweep found `n = 42949, m =
    /// 50000` refused for the rounded-up grid). Without the guard on `j`, the grid bounds it.
    #[test]
    fn a_guard_bounds_the_locals_it_compares() {
        let src = |guard: &str| {
            format!(
                "void flat2(int n, int m, int B0, int B1, const float a[n*m], float c[n*m]) {{
  assume(n >= 1 && m >= 1 && B0 >= 1 && B1 >= 1);
  meta_schedule {{
    meta_for (int v = 0; v < (n + B0 - 1) / B0; v++)
      meta_for (int w = 0; w < (m + B1 - 1) / B1; w++)
        meta_for (int u = 0; u < B0; u++)
          meta_for (int q = 0; q < B1; q++) {{
            int i = v * B0 + u;
            int j = w * B1 + q;
            if ({guard})
              c[i * m + j] = 2.0f * a[i * m + j];
          }}
  }}
}}
"
            )
        };
        let f = facts(&src("i < n && j < m"));
        assert!(f.iter().any(|x| x.starts_with("n * m <= 2147483647")) && f.iter().all(|x| !x.contains("`i * m")), "{f:?}");
        let f = facts(&src("i < n && j >= 0"));
        assert!(f.iter().any(|x| x.contains("`i * m + j` stays within `int`")), "{f:?}");
    }

    #[test]
    fn a_loop_to_the_largest_int_never_ends() {
        let f = facts(
            "void k(int n, int M, float c[n]) {
  assume(n >= 1 && M >= 0);
  meta_schedule {
    meta_for (int v = 0; v < n; v++)
      meta_for (int u = 0; u < 1; u++)
        for (int k = 0; k <= M; k++)
          c[v] += 1.0f;
  }
}
",
        );
        assert_eq!(f, ["M + 1 <= 2147483647 (`k += 1` stays within `int`)"], "{f:?}");
    }
}
