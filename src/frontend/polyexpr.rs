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

/// The largest polynomial metafork works with: total degree, and terms. Beyond them the
/// algebra and every Z3 query on it would grow without bound (`d1 = d0 * d0; d2 = d1 * d1;
/// ...`); real index arithmetic stays far below (degree 4, a dozen terms).
pub const MAX_DEGREE: u32 = 32;
pub const MAX_TERMS: usize = 4096;

/// An expression whose polynomial would exceed [`MAX_DEGREE`] or [`MAX_TERMS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge;

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "its polynomial exceeds degree {MAX_DEGREE} or {MAX_TERMS} terms, metafork's limits")
    }
}

pub fn to_poly(e: &Expr, derived: &DerivedPolys) -> Option<Poly> {
    try_to_poly(e, derived).ok().flatten()
}

/// As [`to_poly`], telling an expression too large to expand from one that is not polynomial.
pub fn try_to_poly(e: &Expr, derived: &DerivedPolys) -> Result<Option<Poly>, TooLarge> {
    Ok(match &e.kind {
        ExprKind::Int(v) => Some(Poly::int(*v)),
        ExprKind::Var(name) => match derived.get(name) {
            Some(p) => p.clone(),
            None => Some(Poly::var(name)),
        },
        ExprKind::Unary(UnOp::Neg, a) => try_to_poly(a, derived)?.map(|a| -a),
        ExprKind::Binary(op, a, b) => {
            let (Some(a), Some(b)) = (try_to_poly(a, derived)?, try_to_poly(b, derived)?) else { return Ok(None) };
            match op {
                BinOp::Add => Some(a + b),
                BinOp::Sub => Some(a - b),
                BinOp::Mul => {
                    if a.total_degree() + b.total_degree() > MAX_DEGREE || a.num_terms().saturating_mul(b.num_terms()) > MAX_TERMS * 4 {
                        return Err(TooLarge);
                    }
                    let p = a * b;
                    if p.num_terms() > MAX_TERMS {
                        return Err(TooLarge);
                    }
                    Some(p)
                }
                _ => None,
            }
        }
        ExprKind::Cast(t, a) if t.is_integer() => try_to_poly(a, derived)?,
        _ => None,
    })
}

/// The number of operations `e` stands for once every derived scalar in it is replaced by its
/// definition (as the fact checks and the dispatch code evaluate it), saturating; `sizes`
/// holds each derived scalar's own.
pub fn expanded_size(e: &Expr, sizes: &BTreeMap<String, u64>) -> u64 {
    let sub = |x: &Expr| expanded_size(x, sizes);
    match &e.kind {
        ExprKind::Var(name) => sizes.get(name).copied().unwrap_or(1),
        ExprKind::Index { indices, .. } => indices.iter().map(sub).fold(1, u64::saturating_add),
        ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => sub(a).saturating_add(1),
        ExprKind::Binary(_, a, b) => sub(a).saturating_add(sub(b)).saturating_add(1),
        ExprKind::Cond(c, a, b) => sub(c).saturating_add(sub(a)).saturating_add(sub(b)).saturating_add(1),
        ExprKind::Call(_, args) => args.iter().map(sub).fold(1, u64::saturating_add),
        ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Builtin(_) => 1,
    }
}

/// The most operations an expression may stand for once derived scalars are expanded.
pub const MAX_EXPANDED: u64 = 10_000;

/// A comparison of two polynomials as a constraint (`a >= b`, `a != b`, ...).
pub fn to_constraint(e: &Expr, derived: &DerivedPolys) -> Option<Constraint> {
    let ExprKind::Binary(op, a, b) = &e.kind else {
        return match &e.kind {
            // `!(N >= 1)`: the negation of what the operand is (C's `!` of a comparison).
            ExprKind::Unary(UnOp::Not, inner) => to_constraint(inner, derived).map(|c| c.negate()),
            // `assume(0)`, `assume(1)`: C's truth of a constant, a constraint that is constant.
            ExprKind::Int(k) => Some(Constraint::ne(&Poly::int(*k), &Poly::zero())),
            _ => None,
        };
    };
    if *op == BinOp::Or {
        return alternatives(e, derived);
    }
    if !op.is_comparison() {
        return None;
    }
    if let Some(c) = divisibility(*op, a, b, derived).or_else(|| divisibility(*op, b, a, derived)) {
        return Some(c);
    }
    comparison(*op, &to_poly(a, derived)?, &to_poly(b, derived)?)
}

/// Most equalities a disjunction may join (the product's degree grows with them).
const MOST_ALTERNATIVES: usize = 8;

/// A disjunction of equalities `p1 == q1 || p2 == q2 || ...` as the one equality
/// `(p1 - q1) * (p2 - q2) * ... == 0`, exact over any numbers (`B == 2 || B == 4` is
/// `(B - 2)*(B - 4) == 0`); `None` where a disjunct is anything else, or past
/// [`MOST_ALTERNATIVES`].
fn alternatives(e: &Expr, derived: &DerivedPolys) -> Option<Constraint> {
    fn disjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
        match &e.kind {
            ExprKind::Binary(BinOp::Or, l, r) => {
                disjuncts(l, out);
                disjuncts(r, out);
            }
            _ => out.push(e),
        }
    }
    let mut all = Vec::new();
    disjuncts(e, &mut all);
    let mut factors = Vec::new();
    for d in all {
        let ExprKind::Binary(BinOp::Eq, a, b) = &d.kind else { return None };
        factors.push(&to_poly(a, derived)? - &to_poly(b, derived)?);
    }
    one_of_zero(&factors)
}

/// `f1 == 0 || f2 == 0 || ...` as the one equality `f1 * f2 * ... == 0` (exact), or `None`
/// past [`MOST_ALTERNATIVES`] factors or the limits every polynomial keeps (`MAX_DEGREE`,
/// `MAX_TERMS`).
pub fn one_of_zero(factors: &[Poly]) -> Option<Constraint> {
    if factors.len() > MOST_ALTERNATIVES {
        return None;
    }
    let mut product = Poly::one();
    for factor in factors {
        if product.total_degree() + factor.total_degree() > MAX_DEGREE || product.num_terms().saturating_mul(factor.num_terms()) > MAX_TERMS {
            return None;
        }
        product = &product * factor;
    }
    Some(Constraint::eq(&product, &Poly::zero()))
}

/// `x % m == 0` (or `!= 0`) with a constant modulus `m`, as `m | x` (or `m ∤ x`): C's
/// remainder is zero exactly where `m` divides `x`, whatever the signs.
fn divisibility(op: BinOp, rem: &Expr, zero: &Expr, derived: &DerivedPolys) -> Option<Constraint> {
    let (ExprKind::Binary(BinOp::Rem, x, m), ExprKind::Int(0)) = (&rem.kind, &zero.kind) else { return None };
    let ExprKind::Int(m) = m.kind else { return None };
    let m = u32::try_from(m).ok().filter(|&m| m >= 1)?;
    let x = to_poly(x, derived)?;
    match op {
        BinOp::Eq => Some(Constraint::divides(m, &x)),
        BinOp::Ne => Some(Constraint::not_divides(m, &x)),
        _ => None,
    }
}

/// `x % m == r` (either way round; `m` any polynomial, `r` an integer literal) as constraints
/// over a fresh integer `quotient`: `x == m*quotient + r`, with C's sign rule (a remainder has
/// the sign of `x`: `x >= r` for `r > 0`, `x <= r` for `r < 0`) and `r*r < m*m`. Exact over the
/// integers, where `to_constraint` has no constraint for the fact (`N % B == 0`, `N % 4 == 1`);
/// `quotient(x, m)` names the quotient; the caller declares it an integer. C's quotient of `x`
/// by `m` is one value, so facts on the same `x % m` may share a name: `N % B == 0 && N % B == 1`
/// then contradicts linearly, where two quotients leave Z3 a nonlinear question.
pub fn remainder_constraints(e: &Expr, derived: &DerivedPolys, quotient: &mut dyn FnMut(&Poly, &Poly) -> String) -> Option<Vec<Constraint>> {
    let ExprKind::Binary(BinOp::Eq, l, r) = &e.kind else { return None };
    let literal = |e: &Expr| match &e.kind {
        ExprKind::Int(v) => Some(*v),
        ExprKind::Unary(UnOp::Neg, inner) => match inner.kind {
            ExprKind::Int(v) => v.checked_neg(),
            _ => None,
        },
        _ => None,
    };
    let ((x, m), rem) = match (&l.kind, &r.kind) {
        (ExprKind::Binary(BinOp::Rem, x, m), _) => ((x, m), literal(r)?),
        (_, ExprKind::Binary(BinOp::Rem, x, m)) => ((x, m), literal(l)?),
        _ => return None,
    };
    let (x, m) = (to_poly(x, derived)?, to_poly(m, derived)?);
    let r = Poly::int(rem);
    let q = Poly::var(&quotient(&x, &m));
    let mut out = vec![Constraint::eq(&x, &(&(&m * &q) + &r))];
    if rem > 0 {
        out.push(Constraint::le(&r, &x));
    } else if rem < 0 {
        out.push(Constraint::le(&x, &r));
    }
    if rem != 0 {
        out.push(Constraint::lt(&(&r * &r), &(&m * &m)));
    }
    Some(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(text: &str) -> Expr {
        let src = format!("void f(int N, int B, float y[N]) {{\n  assume({text});\n  meta_schedule {{ meta_for (int v = 0; v < N; v++) meta_for (int u = 0; u < B; u++) if (v * B + u < N) y[v * B + u] = 0.0f; }}\n}}\n");
        let program = crate::frontend::check_source("t.mf", &src).unwrap_or_else(|d| panic!("{d:?}"));
        program.kernels[0].facts[0].condition.clone()
    }

    #[test]
    fn a_disjunction_of_equalities_is_one_product() {
        let none = DerivedPolys::new();
        let (b, n) = (Poly::var("B"), Poly::var("N"));
        let c = |k: i64| Poly::constant(constraints::Rational::from_integer(k.into()));
        assert_eq!(to_constraint(&condition("B == 2 || B == 4"), &none), Some(Constraint::eq(&(&(&b - &c(2)) * &(&b - &c(4))), &Poly::zero())));
        assert_eq!(to_constraint(&condition("B == 1 || N == B * 2 || B == 8"), &none), Some(Constraint::eq(&(&(&(&b - &c(1)) * &(&n - &(&b * &c(2)))) * &(&b - &c(8))), &Poly::zero())));
        // Negations and constants (C's truth of them).
        assert_eq!(to_constraint(&condition("!(N >= 1)"), &none), Some(Constraint::lt(&n, &c(1))));
        assert_eq!(to_constraint(&condition("!(B == 2 || B == 4)"), &none), Some(Constraint::ne(&(&(&b - &c(2)) * &(&b - &c(4))), &Poly::zero())));
        assert_eq!(to_constraint(&condition("0"), &none).and_then(|k| k.truth_if_constant()), Some(false));
        assert_eq!(to_constraint(&condition("1"), &none).and_then(|k| k.truth_if_constant()), Some(true));
        assert_eq!(to_constraint(&condition("!(B > 0 ? 0 : 1)"), &none), None);
        // A disjunct that is no equality, or too many of them: no constraint.
        assert_eq!(to_constraint(&condition("B == 2 || N < 0"), &none), None);
        let many: Vec<String> = (1..=9).map(|k| format!("B == {k}")).collect();
        assert_eq!(to_constraint(&condition(&many.join(" || ")), &none), None);
        // Nor past the polynomials' degree limit (eight factors of degree 5: 40).
        let high: Vec<String> = (1..=8).map(|k| format!("B * B * B * B * B == {k}")).collect();
        assert_eq!(to_constraint(&condition(&high.join(" || ")), &none), None);
    }
}
