//! The program's facts (`assume`/`assert` conjuncts) evaluated at a concrete parameter point,
//! in Rust and, with exactly the same semantics, as C++ text for the generated dispatch code.
//!
//! Contract: a fact is an integer C expression over the function's integer parameters and
//! derived scalars (a derived scalar stands for its defining expression). It is evaluated in
//! 64-bit signed arithmetic with C's truncating `/` and `%`, comparisons and `!` giving 0/1, and
//! `&&`, `||`, `?:` short-circuiting. An overflow, a division by zero (or `LLONG_MIN / -1`) in an
//! evaluated operand makes the fact *false*: the point is refused rather than guessed at. The
//! C++ rendering calls the `metafork_*_ll` helpers of the dispatch header, which implement the
//! same rules, so the generated selection and [`FactSet::holds`] agree on every point.

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
}

/// Every fact of a function, with the derived scalars they may read.
#[derive(Clone, Debug)]
pub struct FactSet {
    pub facts: Vec<Fact>,
    derived: BTreeMap<String, Expr>,
}

/// Why a fact cannot be evaluated at run time (it reads something that is not an integer
/// parameter, or uses a non-integer construct).
fn unsupported(e: &Expr, what: &str) -> String {
    format!("fact sub-expression `{e}` cannot be checked at run time: {what}")
}

impl FactSet {
    /// The facts of `function`, checked to use only integer parameters, derived scalars and
    /// integer operations.
    pub fn of(function: &KernelFunction) -> Result<FactSet, String> {
        let derived: BTreeMap<String, Expr> = function.derived.iter().map(|d| (d.name.clone(), d.value.clone())).collect();
        let integer_params: Vec<&str> = function.params.iter().filter(|p| p.ty.is_integer()).map(|p| p.name.as_str()).collect();
        let set = FactSet {
            facts: function.facts.iter().map(|f| Fact { kind: f.kind, text: f.condition.to_string(), expr: f.condition.clone() }).collect(),
            derived,
        };
        for f in &set.facts {
            set.check(&f.expr, &integer_params, 0)?;
        }
        Ok(set)
    }

    fn check(&self, e: &Expr, params: &[&str], depth: usize) -> Result<(), String> {
        if depth > 64 {
            return Err(unsupported(e, "derived scalars nest too deeply"));
        }
        match &e.kind {
            ExprKind::Int(_) => Ok(()),
            ExprKind::Var(v) if params.contains(&v.as_str()) => Ok(()),
            ExprKind::Var(v) => match self.derived.get(v) {
                Some(d) => self.check(d, params, depth + 1),
                None => Err(unsupported(e, "not an integer parameter")),
            },
            ExprKind::Unary(_, a) => self.check(a, params, depth),
            ExprKind::Cast(t, a) if t.is_integer() => self.check(a, params, depth),
            ExprKind::Binary(_, a, b) => {
                self.check(a, params, depth)?;
                self.check(b, params, depth)
            }
            ExprKind::Cond(c, a, b) => {
                self.check(c, params, depth)?;
                self.check(a, params, depth)?;
                self.check(b, params, depth)
            }
            _ => Err(unsupported(e, "not integer arithmetic on parameters")),
        }
    }

    /// The first fact that does not hold at `point` (integer parameters by name), if any.
    pub fn first_failing(&self, point: &BTreeMap<String, i64>) -> Option<&Fact> {
        self.facts.iter().find(|f| !matches!(self.value(&f.expr, point), Some(v) if v != 0))
    }

    /// Whether every fact holds at `point`.
    pub fn holds(&self, point: &BTreeMap<String, i64>) -> bool {
        self.first_failing(point).is_none()
    }

    /// The value of an integer expression; `None` on overflow or division by zero.
    fn value(&self, e: &Expr, point: &BTreeMap<String, i64>) -> Option<i64> {
        let truth = |b: bool| Some(b as i64);
        match &e.kind {
            ExprKind::Int(v) => Some(*v),
            ExprKind::Var(v) => match point.get(v) {
                Some(x) => Some(*x),
                None => self.value(self.derived.get(v)?, point),
            },
            ExprKind::Unary(UnOp::Neg, a) => self.value(a, point)?.checked_neg(),
            ExprKind::Unary(UnOp::Not, a) => truth(self.value(a, point)? == 0),
            ExprKind::Cast(ScalarType::Int, a) => i32::try_from(self.value(a, point)?).ok().map(i64::from),
            ExprKind::Cast(_, a) => self.value(a, point),
            ExprKind::Binary(BinOp::And, a, b) => {
                if self.value(a, point)? == 0 {
                    truth(false)
                } else {
                    truth(self.value(b, point)? != 0)
                }
            }
            ExprKind::Binary(BinOp::Or, a, b) => {
                if self.value(a, point)? != 0 {
                    truth(true)
                } else {
                    truth(self.value(b, point)? != 0)
                }
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.value(a, point)?, self.value(b, point)?);
                match op {
                    BinOp::Mul => x.checked_mul(y),
                    BinOp::Div => x.checked_div(y),
                    BinOp::Rem => x.checked_rem(y),
                    BinOp::Add => x.checked_add(y),
                    BinOp::Sub => x.checked_sub(y),
                    BinOp::Lt => truth(x < y),
                    BinOp::Le => truth(x <= y),
                    BinOp::Gt => truth(x > y),
                    BinOp::Ge => truth(x >= y),
                    BinOp::Eq => truth(x == y),
                    BinOp::Ne => truth(x != y),
                    BinOp::And | BinOp::Or => unreachable!("handled above"),
                }
            }
            ExprKind::Cond(c, a, b) => {
                if self.value(c, point)? != 0 {
                    self.value(a, point)
                } else {
                    self.value(b, point)
                }
            }
            _ => None, // excluded by `check`
        }
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
                None => v.clone(),
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
