//! Counters in the parameters only. A derived scalar (`int tiles = k / T;`) that sizes a shared
//! tile enters the shared-memory counter as its own symbol, which neither Z3 (a free variable)
//! nor the dispatcher (whose tables read parameters and machine symbols) can evaluate. Each is
//! replaced by its definition: exactly where that is a polynomial; for a quotient `a / b` with
//! `a >= 0` and `b >= 1` proved, by the real quotient `a/b`, an upper bound of C's truncating
//! one, taken only where every term of the counter naming the scalar has a positive
//! coefficient (so the counter is bounded above, and exact where `b` divides `a`) and `b`
//! cancels (so the result is a polynomial). Anything else is an error naming the scalar.

use crate::frontend::ast::{BinOp, ExprKind};
use crate::frontend::model::KernelFunction;
use crate::frontend::polyexpr::to_poly;
use constraints::solver::{Backend, Implication};
use constraints::{Constraint, Poly, System, Var};

/// `p` with every derived scalar replaced as the module says, or why it cannot be.
pub(crate) fn in_parameters(p: &Poly, function: &KernelFunction, root: &System, backend: &Backend) -> Result<Poly, String> {
    let mut p = p.clone();
    // Each round removes one scalar; definitions name only earlier ones, so this ends.
    for _ in 0..=function.derived.len() {
        let Some(d) = function.derived.iter().find(|d| p.vars().contains(&Var::new(&d.name))) else { return Ok(p) };
        let v = Var::new(&d.name);
        if let Some(q) = &d.poly {
            p = p.substitute(&v, q);
            continue;
        }
        let unbounded = || format!("`{}` (= `{}`) sizes this code's shared memory `{p}` but is not a polynomial in the parameters, and no polynomial bound of it was found: size the tile with the parameters themselves, or leave the array out of `cache(...)`", d.name, d.value);
        let ExprKind::Binary(BinOp::Div, a, b) = &d.value.kind else { return Err(unbounded()) };
        let polys = function.derived_polys();
        let (Some(a), Some(b)) = (to_poly(a, &polys), to_poly(b, &polys)) else { return Err(unbounded()) };
        let proved = |c: Constraint| c.truth_if_constant() == Some(true) || matches!(backend.implies(root, &c), Implication::Proved);
        let positive_terms = p.terms().filter(|(m, _)| m.exponent(&v) > 0).all(|(_, c)| *c > constraints::Rational::from_integer(0.into()));
        if !positive_terms || !proved(Constraint::ge(&a, &Poly::zero())) || !proved(Constraint::ge(&b, &Poly::one())) {
            return Err(unbounded());
        }
        let top = p.terms().map(|(m, _)| m.exponent(&v)).max().unwrap_or(0);
        let mut numerator = Poly::zero();
        for (m, c) in p.terms() {
            let k = m.exponent(&v);
            numerator = numerator + Poly::term(c.clone(), m.without(&v)) * a.pow(k) * b.pow(top - k);
        }
        p = numerator.divide_exact(&b.pow(top)).ok_or_else(unbounded)?;
    }
    Err(format!("the derived scalars in `{p}` are defined in terms of each other"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(src: &str) -> KernelFunction {
        crate::frontend::check_source("t.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false))).kernels.remove(0)
    }

    const SRC: &str = "void f(int k, int T, int B, const float x[k], float y[k]) {
  assume(k >= 1 && T >= 1 && B >= 1);
  int tiles = k / T, two = 2 * T;
  meta_schedule { meta_for (int g = 0; g < 1; g++) meta_for (int u = 0; u < B; u++) y[u % k] = x[u % k] + tiles + two; }
}
";

    #[test]
    fn quotients_cancel_into_an_upper_bound_and_polynomials_substitute() {
        let f = function(SRC);
        let backend = Backend::new(2_000);
        let root = crate::strategy::base_context(&f);
        let shared = Poly::int(4) * Poly::var("tiles") * Poly::var("T") + Poly::var("two");
        assert_eq!(in_parameters(&shared, &f, &root, &backend).unwrap(), Poly::int(4) * Poly::var("k") + Poly::int(2) * Poly::var("T"));
        // `tiles` alone has no polynomial bound (T does not cancel): an error naming it.
        let e = in_parameters(&(Poly::int(4) * Poly::var("tiles")), &f, &root, &backend).unwrap_err();
        assert!(e.contains("`tiles` (= `k / T`)"), "{e}");
        // A negative coefficient would make the real quotient a lower bound: refused.
        assert!(in_parameters(&(Poly::var("k") - Poly::var("tiles") * Poly::var("T")), &f, &root, &backend).is_err());
    }
}
