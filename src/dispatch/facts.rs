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
                let text = match f.kind {
                    FactKind::Defined => format!("{} (the program divides by it)", f.condition),
                    _ => f.condition.to_string(),
                };
                Ok(Fact { kind: f.kind, text, expr: f.condition.clone(), code, reads })
            })
            .collect::<Result<_, String>>()?;
        let floating = function.derived.iter().filter(|d| !d.ty.is_integer()).map(|d| d.name.clone()).collect();
        Ok(FactSet { facts, params, derived, floating })
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

    /// Whether [`FactSet::cpp_of`] renders `e` exactly, where the names in `locals` (integer
    /// variables in scope where the text is printed: a host loop's counter, a local defined in
    /// the loop) stand for themselves: integer arithmetic, comparisons and conditions over
    /// integer parameters, integer derived scalars and those locals. With no locals, every
    /// expression [`FactSet::compile`] accepts.
    pub fn renders_with_locals(&self, e: &Expr, locals: &std::collections::HashSet<String>) -> bool {
        match &e.kind {
            ExprKind::Int(_) => true,
            ExprKind::Var(v) => match self.derived.get(v) {
                Some(d) => !self.floating.contains(v) && self.renders_with_locals(d, locals),
                None => self.params.contains(v) || locals.contains(v),
            },
            ExprKind::Unary(UnOp::Neg | UnOp::Not, a) => self.renders_with_locals(a, locals),
            ExprKind::Cast(t, a) => t.is_integer() && self.renders_with_locals(a, locals),
            ExprKind::Binary(_, a, b) => self.renders_with_locals(a, locals) && self.renders_with_locals(b, locals),
            ExprKind::Cond(c, a, b) => [c, a, b].iter().all(|x| self.renders_with_locals(x, locals)),
            _ => false,
        }
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
            _ => "0LL".into(), // excluded by `check`
        }
    }
}
