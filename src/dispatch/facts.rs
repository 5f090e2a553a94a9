//! The program's facts (`assume`/`assert` conjuncts) evaluated at a concrete parameter point,
//! in Rust and, with exactly the same semantics, as C++ text for the generated dispatch code.
//!
//! Contract: a fact is an integer C expression over the function's integer parameters and
//! derived scalars (a derived scalar stands for its defining expression), evaluated with the
//! rules of [`crate::cexpr`]: 64-bit checked arithmetic, where an overflow or a division by zero
//! makes the fact *false* (the point is refused rather than guessed at). The C++ rendering calls the `metafork_*_ll` helpers of the dispatch header, which implement the
//! same rules, so the generated selection and [`FactSet::holds`] agree on every point.

use crate::cexpr::{Code, Resolved};
use crate::frontend::ast::{BinOp, Expr, ExprKind, ScalarType, UnOp};
use crate::frontend::model::{FactKind, KernelFunction};
use std::collections::BTreeMap;

/// One conjunct of the program's facts, ready to evaluate.
#[derive(Clone, Debug)]
pub struct Fact {
    pub kind: FactKind,
    /// The conjunct as written (`n % B0 == 0`), for messages.
    pub text: String,
    expr: Expr,
    code: Code,
    /// The integer parameters it reads (through derived scalars too).
    reads: std::collections::BTreeSet<String>,
    /// A kernel's range fact ([`crate::frontend::ranges`]): checked after the launch's scalars.
    pub kernel_range: bool,
}

/// Every fact of a function, with the derived scalars they may read.
#[derive(Clone, Debug)]
pub struct FactSet {
    pub facts: Vec<Fact>,
    /// The integer parameters, in slot order.
    params: Vec<String>,
    derived: BTreeMap<String, Expr>,
    /// The derived scalars of a floating type (C computes them in floating point).
    floating: std::collections::BTreeSet<String>,
    /// The C type of each integer parameter and integer derived scalar.
    types: BTreeMap<String, ScalarType>,
}

impl FactSet {
    /// The facts of `function`, checked to use only integer parameters, derived scalars and
    /// integer operations.
    pub fn of(function: &KernelFunction) -> Result<FactSet, String> {
        let derived: BTreeMap<String, Expr> = function.derived.iter().map(|d| (d.name.clone(), d.value.clone())).collect();
        let params: Vec<String> = function.integer_parameters();
        let resolve = |v: &str| match params.iter().position(|p| p == v) {
            Some(i) => Ok(Resolved::Slot(i)),
            None => derived.get(v).map(|d| Resolved::Expr(d.clone())).ok_or_else(|| format!("`{v}` is not an integer parameter")),
        };
        let facts = function
            .facts
            .iter()
            .map(|f| {
                let code = Code::compile(&f.condition, &resolve).map_err(|e| format!("fact `{}` cannot be checked at run time: {e}", f.condition))?;
                let mut names = Vec::new();
                f.condition.names(&mut names);
                let mut reads = function.names_read(names);
                reads.retain(|n| params.contains(n));
                let text = match &f.note {
                    Some(why) => format!("{} ({why})", f.condition),
                    None => f.condition.to_string(),
                };
                Ok(Fact { kind: f.kind, text, expr: f.condition.clone(), code, reads, kernel_range: f.kernel_range })
            })
            .collect::<Result<_, String>>()?;
        let floating = function.derived.iter().filter(|d| !d.ty.is_integer()).map(|d| d.name.clone()).collect();
        let types = function.params.iter().filter(|p| params.contains(&p.name)).map(|p| (p.name.clone(), p.ty)).chain(function.derived.iter().filter(|d| d.ty.is_integer()).map(|d| (d.name.clone(), d.ty))).collect();
        Ok(FactSet { facts, params, derived, floating, types })
    }

    /// The parameters' values in slot order (a missing one reads as 0, which no fact relies on
    /// silently: callers pass every integer parameter).
    fn slots(&self, point: &BTreeMap<String, i64>) -> Vec<i64> {
        self.params.iter().map(|p| point.get(p).copied().unwrap_or(0)).collect()
    }

    /// The first fact that does not hold at `point` (integer parameters by name), if any.
    pub fn first_failing(&self, point: &BTreeMap<String, i64>) -> Option<&Fact> {
        let slots = self.slots(point);
        self.facts.iter().find(|f| !f.code.holds(&slots))
    }

    /// The first fact that does not hold at `point` among the kernels' range facts
    /// (`kernel_range`) or among the others.
    pub fn first_failing_of(&self, point: &BTreeMap<String, i64>, kernel_range: bool) -> Option<&Fact> {
        let slots = self.slots(point);
        self.facts.iter().filter(|f| f.kernel_range == kernel_range).find(|f| !f.code.holds(&slots))
    }

    /// The first fact that does not hold at `point`, among those whose parameters `point`
    /// all gives (a partial point, as a wisdom file's).
    pub fn first_failing_where_known(&self, point: &BTreeMap<String, i64>) -> Option<&Fact> {
        let slots = self.slots(point);
        self.facts.iter().find(|f| f.reads.iter().all(|n| point.contains_key(n)) && !f.code.holds(&slots))
    }

    /// Whether every fact holds at `point`.
    pub fn holds(&self, point: &BTreeMap<String, i64>) -> bool {
        self.first_failing(point).is_none()
    }

    /// The compiled facts over the integer parameters in declaration order.
    pub fn compiled(&self) -> impl Iterator<Item = (&Fact, &Code)> {
        self.facts.iter().map(|f| (f, &f.code))
    }

    /// Any integer expression over the integer parameters and integer derived scalars,
    /// compiled with the facts' rules (slots: the integer parameters in order).
    pub fn compile(&self, e: &Expr) -> Result<Code, String> {
        let resolve = |v: &str| match self.params.iter().position(|p| p == v) {
            Some(i) => Ok(Resolved::Slot(i)),
            None if self.floating.contains(v) => Err(format!("`{v}` is floating")),
            None => self.derived.get(v).map(|d| Resolved::Expr(d.clone())).ok_or_else(|| format!("`{v}` is not an integer parameter")),
        };
        Code::compile(e, &resolve)
    }

    /// `e` as C computes it, made explicit for the facts' 64-bit rules: every derived scalar
    /// replaced by its definition converted to its type, and every arithmetic operation that C
    /// performs in `int` (both operands `int` or narrower) cast to `int`, so that a value past
    /// `int` is an overflow there too (`N * M` of two `int`s past 2^31 is undefined in the
    /// program, where 64 bits would give a value the launch's own `int` arithmetic does not).
    /// `locals` gives the type of the other names `e` may read (a host loop's counter). `None`
    /// where a name is neither.
    pub fn as_c_computes(&self, e: &Expr, locals: &std::collections::HashMap<String, ScalarType>) -> Option<Expr> {
        self.typed(e, locals, 0).map(|(x, _)| x)
    }

    fn typed(&self, e: &Expr, locals: &std::collections::HashMap<String, ScalarType>, depth: usize) -> Option<(Expr, ScalarType)> {
        if depth > 64 {
            return None;
        }
        let at = |kind: ExprKind| Expr { kind, span: e.span };
        let fit = |x: Expr, t: ScalarType| match t {
            ScalarType::Int | ScalarType::Char if !matches!(&x.kind, ExprKind::Cast(u, _) if *u == t) => at(ExprKind::Cast(t, Box::new(x))),
            _ => x,
        };
        Some(match &e.kind {
            ExprKind::Int(v) => (e.clone(), if i32::try_from(*v).is_ok() { ScalarType::Int } else { ScalarType::Long }),
            ExprKind::Var(v) => match (self.derived.get(v), self.types.get(v)) {
                (Some(d), Some(&t)) => (fit(self.typed(d, locals, depth + 1)?.0, t), t),
                (None, Some(&t)) => (e.clone(), t),
                _ => (e.clone(), *locals.get(v).filter(|t| t.is_integer())?),
            },
            ExprKind::Unary(UnOp::Not, a) => (at(ExprKind::Unary(UnOp::Not, Box::new(self.typed(a, locals, depth)?.0))), ScalarType::Int),
            ExprKind::Unary(UnOp::Neg, a) => {
                let (x, t) = self.typed(a, locals, depth)?;
                let t = ScalarType::promote(t, t);
                (fit(at(ExprKind::Unary(UnOp::Neg, Box::new(x))), t), t)
            }
            ExprKind::Cast(t, a) if t.is_integer() => (fit(self.typed(a, locals, depth)?.0, *t), *t),
            ExprKind::Binary(op, a, b) => {
                let ((x, ta), (y, tb)) = (self.typed(a, locals, depth)?, self.typed(b, locals, depth)?);
                let node = at(ExprKind::Binary(*op, Box::new(x), Box::new(y)));
                if op.is_comparison() || op.is_logical() {
                    (node, ScalarType::Int)
                } else {
                    let t = ScalarType::promote(ta, tb);
                    (fit(node, t), t)
                }
            }
            ExprKind::Cond(c, a, b) => {
                let (c, (x, ta), (y, tb)) = (self.typed(c, locals, depth)?.0, self.typed(a, locals, depth)?, self.typed(b, locals, depth)?);
                (at(ExprKind::Cond(Box::new(c), Box::new(x), Box::new(y))), ScalarType::promote(ta, tb))
            }
            // `min` and `max` convert to the common type; `abs(INT_MIN)` leaves `int`.
            ExprKind::Call(f, args) if matches!((f.name.as_str(), args.len()), ("min" | "max", 2) | ("abs", 1)) => {
                let typed: Vec<(Expr, ScalarType)> = args.iter().map(|a| self.typed(a, locals, depth)).collect::<Option<_>>()?;
                let t = typed.iter().fold(ScalarType::Int, |t, (_, u)| ScalarType::promote(t, *u));
                let call = at(ExprKind::Call(f.clone(), typed.into_iter().map(|(x, _)| x).collect()));
                (if f.name == "abs" { fit(call, t) } else { call }, t)
            }
            _ => return None,
        })
    }

    /// An expression [`FactSet::compile`] accepts, as C++ with the facts' rules: see
    /// [`FactSet::cpp`].
    pub fn cpp_of(&self, e: &Expr, ok: &str) -> String {
        self.cpp_expr(e, ok)
    }

    /// The fact as a C++ expression over `long long` variables named like the parameters; `ok`
    /// is the name of an `int` the helpers clear on overflow or division by zero.
    pub fn cpp(&self, fact: &Fact, ok: &str) -> String {
        self.cpp_expr(&fact.expr, ok)
    }

    fn cpp_expr(&self, e: &Expr, ok: &str) -> String {
        match &e.kind {
            ExprKind::Int(v) => format!("{v}LL"),
            ExprKind::Var(v) => match self.derived.get(v) {
                Some(d) => format!("({})", self.cpp_expr(d, ok)),
                None => crate::names::c_ident(v).into_owned(),
            },
            ExprKind::Unary(UnOp::Neg, a) => format!("metafork_sub_ll(0LL, {}, &{ok})", self.cpp_expr(a, ok)),
            ExprKind::Unary(UnOp::Not, a) => format!("(long long)!({})", self.cpp_expr(a, ok)),
            ExprKind::Cast(ScalarType::Int, a) => format!("metafork_int_ll({}, &{ok})", self.cpp_expr(a, ok)),
            ExprKind::Cast(ScalarType::Char, a) => format!("metafork_char_ll({}, &{ok})", self.cpp_expr(a, ok)),
            ExprKind::Cast(_, a) => self.cpp_expr(a, ok),
            ExprKind::Binary(BinOp::And, a, b) => format!("(long long)(({}) != 0 && ({}) != 0)", self.cpp_expr(a, ok), self.cpp_expr(b, ok)),
            ExprKind::Binary(BinOp::Or, a, b) => format!("(long long)(({}) != 0 || ({}) != 0)", self.cpp_expr(a, ok), self.cpp_expr(b, ok)),
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.cpp_expr(a, ok), self.cpp_expr(b, ok));
                let helper = match op {
                    BinOp::Mul => "mul",
                    BinOp::Div => "div",
                    BinOp::Rem => "rem",
                    BinOp::Add => "add",
                    BinOp::Sub => "sub",
                    _ => return format!("(long long)(({x}) {} ({y}))", op.c_symbol()),
                };
                format!("metafork_{helper}_ll({x}, {y}, &{ok})")
            }
            ExprKind::Cond(c, a, b) => format!("(({}) != 0 ? ({}) : ({}))", self.cpp_expr(c, ok), self.cpp_expr(a, ok), self.cpp_expr(b, ok)),
            ExprKind::Call(f, args) => match (f.name.as_str(), args.as_slice()) {
                ("min" | "max", [a, b]) => format!("metafork_{}_ll({}, {})", f.name, self.cpp_expr(a, ok), self.cpp_expr(b, ok)),
                ("abs", [a]) => format!("metafork_abs_ll({}, &{ok})", self.cpp_expr(a, ok)),
                _ => "0LL".into(), // excluded by `check`
            },
            _ => "0LL".into(), // excluded by `check`
        }
    }
}
