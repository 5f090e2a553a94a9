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
    if divisor.is_zero() {
        return None;
    }
    if let Some(p) = upper.divide_exact(divisor) {
        return Some(p);
    }
    if depth == 0 {
        return None;
    }
    let vars = upper.vars();
    definitions.iter().filter(|(v, _)| vars.contains(v)).find_map(|(v, e)| exact_quotient(&upper.substitute(v, e), divisor, definitions, depth - 1))
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
