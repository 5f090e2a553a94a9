//! Exact algebra for the quotient lemmas of `twothread.rs`: the equalities of a context that
//! define one variable by the others (`total == OH*OW`), and whether a bound is a multiple of
//! a divisor once some of them are substituted. Pure functions of polynomials: no Z3, and an
//! answer only where the algebra is exact (a found quotient `P` satisfies `U == d*P` after the
//! substitutions the context's equalities license).

use constraints::{Constraint, Poly, Rel, System, Var};

/// Each equality of `context` that defines a variable by the others, none of them
/// `thread_local`: `v` occurs in one term only, as `c*v` (degree one), so `v == -(p - c*v)/c`. One equality can
/// define several variables (`H + 1 == KH + OH` defines `H`, `KH` and `OH`); all are listed.
pub fn defining_equalities(context: &System, thread_local: &dyn Fn(&Var) -> bool) -> Vec<(Var, Poly)> {
    let mut out = Vec::new();
    for c in context.constraints().iter().filter(|c| c.rel() == Rel::Eq) {
        let p = c.poly();
        for v in p.vars() {
            if thread_local(&v) {
                continue;
            }
            let mut with_v = p.terms().filter(|(m, _)| m.exponent(&v) > 0);
            let (Some((m, coeff)), None) = (with_v.next(), with_v.next()) else { continue };
            if m.factors() != [(v.clone(), 1)] {
                continue;
            }
            let rest = p - &Poly::from_var(v.clone()).scale(coeff);
            // A definition by thread-local values would put them into a bound on shared ones.
            if rest.vars().iter().any(|x| thread_local(x)) {
                continue;
            }
            out.push((v, rest.scale(&(-coeff.recip()))));
        }
    }
    out
}

/// `P` with `upper == divisor * P` exactly, trying `upper` as written, then with up to `depth`
/// of `definitions` substituted one after another (each only where its variable occurs).
pub fn exact_quotient(upper: &Poly, divisor: &Poly, definitions: &[(Var, Poly)], depth: usize) -> Option<Poly> {
    quotient_such_that(upper, divisor, definitions, depth, &|_| true)
}

/// As [`exact_quotient`], the first `P` found that `accept` also takes.
pub(super) fn quotient_such_that(upper: &Poly, divisor: &Poly, definitions: &[(Var, Poly)], depth: usize, accept: &dyn Fn(&Poly) -> bool) -> Option<Poly> {
    if divisor.is_zero() {
        return None;
    }
    if let Some(p) = upper.divide_exact(divisor).filter(|p| accept(p)) {
        return Some(p);
    }
    if depth == 0 {
        return None;
    }
    let vars = upper.vars();
    definitions.iter().filter(|(v, _)| vars.contains(v)).find_map(|(v, e)| quotient_such_that(&upper.substitute(v, e), divisor, definitions, depth - 1, accept))
}

/// The forms `p` takes with up to `depth` of `definitions` substituted one after another (each
/// only where its variable occurs), `p` itself left out, at most [`MAX_FORMS`], in the order
/// found: `W` under `W == q'*BW*GS + 4` and `q' == gx` is `q'*BW*GS + 4` and `gx*BW*GS + 4`.
pub fn equal_forms(p: &Poly, definitions: &[(Var, Poly)], depth: usize) -> Vec<Poly> {
    let mut forms: Vec<Poly> = Vec::new();
    let mut frontier = vec![p.clone()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for f in &frontier {
            let vars = f.vars();
            for (v, e) in definitions.iter().filter(|(v, _)| vars.contains(v)) {
                let g = f.substitute(v, e);
                if g != *p && !forms.contains(&g) && forms.len() < MAX_FORMS {
                    forms.push(g.clone());
                    next.push(g);
                }
            }
        }
        frontier = next;
    }
    forms
}

/// How many forms [`equal_forms`] returns at most: each is one more equality in a query.
pub const MAX_FORMS: usize = 4;

/// For each division `a = d*q + r` of `divisions` (quotient, remainder, dividend, divisor)
/// whose dividend, as written or with up to two of `definitions` substituted, is `d*P`
/// exactly, with `P` integer-valued (integer coefficients, every variable in `integer`): the
/// facts `q == P` and `r == 0`. Sound for any `d != 0`, since `d` then divides `a` and C's
/// quotient is exact (`half = n / 2` under `n % (2*m) == 0` is `m*q'`, a multiple of `m`).
pub fn exact_divisions(divisions: &[(Var, Var, Poly, Poly)], definitions: &[(Var, Poly)], integer: &dyn Fn(&Var) -> bool) -> Vec<Constraint> {
    let mut facts = Vec::new();
    for (q, r, a, d) in divisions {
        let integral = |p: &Poly| p.terms().all(|(_, c)| c.is_integer()) && p.vars().iter().all(integer) && !p.vars().contains(q) && !p.vars().contains(r);
        if let Some(p) = quotient_such_that(a, d, definitions, 2, &integral) {
            facts.push(Constraint::eq(&Poly::from_var(q.clone()), &p));
            facts.push(Constraint::eq(&Poly::from_var(r.clone()), &Poly::zero()));
        }
    }
    facts
}

/// The lemma `q < P` for a quotient `q` whose dividend is below `divisor * P`.
pub fn below(q: &Var, quotient_bound: &Poly) -> Constraint {
    Constraint::lt(&Poly::from_var(q.clone()), quotient_bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sys(cs: &[&str]) -> System {
        let mut s = System::new();
        for c in cs {
            s.add(constraints::parse::parse_constraint(c).unwrap());
        }
        s
    }

    #[test]
    fn a_bound_is_divided_after_substituting_a_definition() {
        let context = sys(&["OH*OW == total", "H + 1 == KH + OH"]);
        let defs = defining_equalities(&context, &|_| false);
        let total = Poly::var("total");
        let ow = Poly::var("OW");
        // `total` alone is not a multiple of `OW`; with `total == OH*OW` it is.
        assert_eq!(total.divide_exact(&ow), None);
        assert_eq!(exact_quotient(&total, &ow, &defs, 2), Some(Poly::var("OH")));
        // Nothing licenses a quotient by `KH` here.
        assert_eq!(exact_quotient(&total, &Poly::var("KH"), &defs, 2), None);
        // Depth 0: only the bound as written.
        assert_eq!(exact_quotient(&total, &ow, &defs, 0), None);
    }

    #[test]
    fn a_division_is_exact_only_with_an_integer_quotient() {
        let (q, r) = (Var::new("q"), Var::new("r"));
        let division = [(q.clone(), r.clone(), Poly::var("n"), Poly::constant(constraints::Rational::from_integer(2.into())))];
        let integer = |_: &Var| true;
        // `n == 2*m*k`: `n / 2 == m*k`, remainder 0.
        let defs = defining_equalities(&sys(&["n == 2*m*k"]), &|_| false);
        let facts = exact_divisions(&division, &defs, &integer);
        assert_eq!(facts, [Constraint::eq(&Poly::var("q"), &(Poly::var("m") * Poly::var("k"))), Constraint::eq(&Poly::var("r"), &Poly::zero())]);
        // `n == m*k` (`n % m == 0`): `n / 2` is `m*k/2`, not an integer polynomial: no fact.
        let defs = defining_equalities(&sys(&["n == m*k"]), &|_| false);
        assert!(exact_divisions(&division, &defs, &integer).is_empty());
        // Nor where a variable of the quotient is not an integer.
        let defs = defining_equalities(&sys(&["n == 2*m*k"]), &|_| false);
        assert!(exact_divisions(&division, &defs, &|v: &Var| v.name() != "k").is_empty());
    }

    #[test]
    fn only_variables_in_one_linear_term_are_defined() {
        // `n*n == m` defines `m` but not `n` (a square); `i + n == 4` defines nothing, `i`
        // being thread-local.
        let context = sys(&["n*n == m", "i + n == 4"]);
        let defs = defining_equalities(&context, &|v| v.name() == "i");
        let names: Vec<&str> = defs.iter().map(|(v, _)| v.name()).collect();
        assert_eq!(names, ["m"]);
        let m = &defs.iter().find(|(v, _)| v.name() == "m").unwrap().1;
        assert_eq!(m, &(Poly::var("n") * Poly::var("n")));
    }
}
