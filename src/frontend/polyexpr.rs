//! Reading integer expressions as exact polynomials.
//!
//! An expression is polynomial when it is built from integer literals, variables, `+`, `-`,
//! `*`, unary minus and integer casts. Derived scalars are expanded when their own value is
//! polynomial. C's integer `/` and `%` are not polynomial and make the result `None`.

use super::ast::{BinOp, Expr, ExprKind, UnOp};
use constraints::{Constraint, Poly};
use std::collections::BTreeMap;

/// Polynomial values of derived scalars, by name (`None`: derived but not polynomial).
pub type DerivedPolys = BTreeMap<String, Option<Poly>>;

pub fn to_poly(e: &Expr, derived: &DerivedPolys) -> Option<Poly> {
    match &e.kind {
        ExprKind::Int(v) => Some(Poly::int(*v)),
        ExprKind::Var(name) => match derived.get(name) {
            Some(p) => p.clone(),
            None => Some(Poly::var(name)),
        },
        ExprKind::Unary(UnOp::Neg, a) => Some(-to_poly(a, derived)?),
        ExprKind::Binary(op, a, b) => {
            let (a, b) = (to_poly(a, derived)?, to_poly(b, derived)?);
            match op {
                BinOp::Add => Some(a + b),
                BinOp::Sub => Some(a - b),
                BinOp::Mul => Some(a * b),
                _ => None,
            }
        }
        ExprKind::Cast(t, a) if t.is_integer() => to_poly(a, derived),
        _ => None,
    }
}

/// A comparison of two polynomials as a constraint (`a >= b`, `a != b`, ...).
pub fn to_constraint(e: &Expr, derived: &DerivedPolys) -> Option<Constraint> {
    let ExprKind::Binary(op, a, b) = &e.kind else { return None };
    if !op.is_comparison() {
        return None;
    }
    comparison(*op, &to_poly(a, derived)?, &to_poly(b, derived)?)
}

/// `a OP b` as a constraint, for a comparison operator.
pub fn comparison(op: BinOp, a: &Poly, b: &Poly) -> Option<Constraint> {
    Some(match op {
        BinOp::Lt => Constraint::lt(a, b),
        BinOp::Le => Constraint::le(a, b),
        BinOp::Gt => Constraint::gt(a, b),
        BinOp::Ge => Constraint::ge(a, b),
        BinOp::Eq => Constraint::eq(a, b),
        BinOp::Ne => Constraint::ne(a, b),
        _ => return None,
    })
}
