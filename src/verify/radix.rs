//! Mixed-radix splitting of subscript equalities, the argument Z3 cannot find by itself.
//!
//! Two threads touch the same element when their subscripts are equal, and GPU subscripts are
//! mixed-radix numbers: `(v0*B0 + u0)*N + v1*B1*s + k*B1 + u1`. Z3's nonlinear arithmetic times
//! out on `x == x'` for such terms, yet the fact is elementary: if `x = a*R + b` and
//! `x' = a'*R + b'` with `R >= 1` and both digits in `0 <= b, b' < R`, then
//! `x == x' <=> a == a' && b == b'` (the difference `(a - a')*R = b' - b` lies strictly between
//! `-R` and `R`). Splitting recursively turns one nonlinear equation into a conjunction of small
//! ones (often `u1 == u1'` alone), which Z3 then settles at once.
//!
//! Contract: [`split`] returns pairs `(p, q)` such that, wherever the digit checks hold (the
//! caller proves each one, for the thread it belongs to, under that thread's context),
//! `x == y` is *equivalent* to all `p == q`; so the split neither loses a race nor invents
//! one. When no radix passes its checks, the equality comes back whole. The radix candidates
//! are the coefficients of the subscript's thread-local variables (a single term such as `B1`,
//! `B0*B1` or `N`), smallest degree first.

use constraints::{Poly, Var};
use num_traits::Signed;
use std::collections::BTreeMap;

/// Which thread a digit belongs to (its guards and context differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    First,
    Second,
}

/// How deep the recursion may go (each level peels at least one digit).
pub const MAX_DEPTH: usize = 8;

/// Split `x == y` (x of the first thread, y of the second, both in the first thread's names)
/// into digit equalities. `thread_local` says which variables differ between threads;
/// `in_range(digit, side, radix)` must prove `radix >= 1 && 0 <= digit < radix` for that side.
pub fn split(x: &Poly, y: &Poly, thread_local: &dyn Fn(&Var) -> bool, in_range: &mut dyn FnMut(&Poly, Side, &Poly) -> bool) -> Vec<(Poly, Poly)> {
    // x == y is x - c == y - c: drop the uniform terms both share (Jacobi's `p + 1`).
    let common = shared_uniform(x, y, thread_local);
    let mut out = Vec::new();
    go(&(x - &common), &(y - &common), thread_local, in_range, MAX_DEPTH, &mut out);
    if out.len() == 1 && !common.is_zero() {
        // A digit may need the shared offset: `tx*TS - ty + TS - 1` (a reversed row) has the
        // digit `TS - 1 - ty`, while `tx*TS - ty` has none.
        let mut whole = Vec::new();
        go(x, y, thread_local, in_range, MAX_DEPTH, &mut whole);
        if whole.len() > 1 {
            return whole;
        }
    }
    if out.len() == 1 {
        // x == y is -x == -y: a reversed subscript (`N - 1 - i` of a mixed-radix `i`, a
        // helper's `y[N - 1 - i]`) has negative digits, its negation the digits of `i`.
        let mut negated = Vec::new();
        go(&(&common - x), &(&common - y), thread_local, in_range, MAX_DEPTH, &mut negated);
        if negated.len() > 1 {
            return negated;
        }
    }
    out
}

/// Reduce the comparison of a subscript `f` (one thread's) with a uniform bound `e` to the
/// comparison of their high digits: with `f = a*R + b`, `0 <= b < R` and `e = A*R`,
/// `f < e <=> a < A` (and so `f >= e <=> a >= A`). Bounds checks on mixed-radix subscripts
/// (`k*B0*B1 + tx*B0 + ty < s*B0*B1`) become linear (`k < s`). Shared uniform terms are
/// dropped first (`k*B + tx + 2 < s*B + 2`). `e` is divided as written or, failing that,
/// with up to two of `definitions` substituted (equalities of the context over shared
/// variables: `NH == q'*BH*VEC` from the fact `NH % (BH*VEC) == 0` makes `NH` a multiple of
/// `VEC`), so the reduced comparison is equivalent wherever they hold. Returns `(f, e)`
/// unchanged where no radix fits.
pub fn reduce_comparison(f: &Poly, e: &Poly, definitions: &[(Var, Poly)], thread_local: &dyn Fn(&Var) -> bool, in_range: &mut dyn FnMut(&Poly, Side, &Poly) -> bool) -> (Poly, Poly) {
    let common = shared_uniform(f, e, thread_local);
    let (mut f, mut e) = (f - &common, e - &common);
    'peel: for _ in 0..MAX_DEPTH {
        for radix in radices(&f, &Poly::zero(), thread_local) {
            let (a, b) = divide(&f, &radix, thread_local);
            let integral = |q: &Poly| q.terms().all(|(_, k)| k.is_integer());
            let Some(big_a) = integer_quotient(&e, &radix).or_else(|| super::quotients::quotient_such_that(&e, &radix, definitions, 2, &integral)) else { continue };
            if !a.vars().iter().any(thread_local) {
                continue;
            }
            if in_range(&b, Side::First, &radix) {
                (f, e) = (a, big_a);
                continue 'peel;
            }
        }
        break;
    }
    (f, e)
}

/// The terms free of thread-local variables that `x` and `y` share, coefficient and all.
fn shared_uniform(x: &Poly, y: &Poly, thread_local: &dyn Fn(&Var) -> bool) -> Poly {
    x.terms()
        .filter(|(m, c)| !m.factors().iter().any(|(v, _)| thread_local(v)) && y.terms().any(|(n, d)| n == *m && d == *c))
        .fold(Poly::zero(), |acc, (m, c)| acc + Poly::term(c.clone(), m.clone()))
}

/// Undo a division the model introduced: where `f` holds `T*(d*q + r)` for the quotient `q`
/// and remainder `r` of `X` by a single-term divisor `d` (`X == d*q + r` is in every query's
/// context), write `T*X` instead. `blockIdx.x / s` and `blockIdx.x % s`, recombined as
/// `(q*s + r)*ub1`, become `blockIdx.x*ub1`, which the digit and bound arguments then see
/// through. The result equals `f` wherever the definitions hold.
pub fn fold_divisions(f: &Poly, divisions: &[(Var, Var, Poly, Poly)]) -> Poly {
    let mut f = f.clone();
    for (q, r, dividend, divisor) in divisions {
        let [(mono, coeff)] = divisor.terms().collect::<Vec<_>>()[..] else { continue };
        if !coeff.is_integer() || !coeff.is_positive() {
            continue;
        }
        // f = q*Cq + r*Cr + rest, linear in q and r.
        let linear = |v: &Var| f.terms().all(|(m, _)| m.exponent(v) <= 1);
        if !linear(q) || !linear(r) {
            continue;
        }
        let cq = &f.substitute(q, &Poly::one()) - &f.substitute(q, &Poly::zero());
        let cr = &f.substitute(r, &Poly::one()) - &f.substitute(r, &Poly::zero());
        let (t, rest) = cq.split_by_term(coeff, mono);
        if t.is_zero() || !rest.is_zero() || t != cr || t.vars().contains(q) || t.vars().contains(r) {
            continue;
        }
        let combined = divisor * &Poly::from_var(q.clone()) + Poly::from_var(r.clone());
        f = &f - &(&t * &combined) + &t * dividend;
    }
    f
}

/// The converse of [`fold_divisions`]: where `f` holds a quotient `q` of `X` by `d` and all
/// of `X`'s terms, write `d*q + r` for `X`. A padded tile's position `e + e / W` becomes
/// `(W + 1)*q + r`, whose digits the arguments above see.
pub fn unfold_divisions(f: &Poly, divisions: &[(Var, Var, Poly, Poly)]) -> Poly {
    let mut f = f.clone();
    for (q, r, dividend, divisor) in divisions {
        let contains = dividend.terms().all(|(m, c)| f.terms().any(|(n, k)| n == m && k == c));
        if f.vars().contains(q) && !dividend.is_zero() && contains {
            f = &f - dividend + divisor * &Poly::from_var(q.clone()) + Poly::from_var(r.clone());
        }
    }
    f
}

/// After a split, `q == q'` and `r == r'` for the quotient and remainder of one division by a
/// divisor both threads share say `X == X'` for its dividend (and conversely): put that
/// equality in their place, to be split in turn.
pub fn merge_divisions(pairs: Vec<(Poly, Poly)>, divisions: &[(Var, Var, Poly, Poly)], thread_local: &dyn Fn(&Var) -> bool) -> Vec<(Poly, Poly)> {
    let mut pairs = pairs;
    for (q, r, dividend, divisor) in divisions {
        if divisor.vars().iter().any(thread_local) {
            continue;
        }
        let same = |v: &Var, p: &(Poly, Poly)| p.0.as_var() == Some(v) && p.1.as_var() == Some(v);
        if let (Some(i), Some(j)) = (pairs.iter().position(|p| same(q, p)), pairs.iter().position(|p| same(r, p))) {
            let (hi, lo) = (i.max(j), i.min(j));
            pairs.remove(hi);
            pairs.remove(lo);
            pairs.push((dividend.clone(), dividend.clone()));
        }
    }
    pairs
}

fn go(x: &Poly, y: &Poly, thread_local: &dyn Fn(&Var) -> bool, in_range: &mut dyn FnMut(&Poly, Side, &Poly) -> bool, depth: usize, out: &mut Vec<(Poly, Poly)>) {
    if depth > 0 {
        for radix in radices(x, y, thread_local) {
            let (ax, bx) = divide(x, &radix, thread_local);
            let (ay, by) = divide(y, &radix, thread_local);
            // A radix must separate something in both: a high part with a thread-local variable,
            // or constant high parts (a register-blocked copy's offset `3*ub1` against `5*ub1`:
            // then the digit equality decides the pair by itself).
            let high = |a: &Poly| a.vars().iter().any(thread_local);
            let constant = |a: &Poly| a.as_constant().is_some();
            if !(high(&ax) && high(&ay)) && !(constant(&ax) && constant(&ay) && !(ax.is_zero() && ay.is_zero())) {
                continue;
            }
            if in_range(&bx, Side::First, &radix) && in_range(&by, Side::Second, &radix) {
                go(&ax, &ay, thread_local, in_range, depth - 1, out);
                if !(bx.is_zero() && by.is_zero()) {
                    go(&bx, &by, thread_local, in_range, depth - 1, out);
                }
                return;
            }
        }
    }
    out.push((x.clone(), y.clone()));
}

/// The candidate radices: the coefficients of the thread-local variables a subscript is
/// linear in, when free of thread-local variables and not constant: a term (`B1`, `s*B1`,
/// `1/8*B0`) or a polynomial (`B0 + 1`, a padded row). Sorted by degree, then text, so the least significant
/// digit goes first.
fn radices(x: &Poly, y: &Poly, thread_local: &dyn Fn(&Var) -> bool) -> Vec<Poly> {
    let mut found: BTreeMap<(u32, String), Poly> = BTreeMap::new();
    for p in [x, y] {
        for v in p.vars().into_iter().filter(|v| thread_local(v)) {
            let Some(c) = coefficient(p, &v, thread_local) else { continue };
            let c = if c.terms().next().is_some_and(|(_, k)| k.is_negative()) { -c } else { c };
            // A rational radix (a coarsened block's `B0/8`) serves as well: the argument needs
            // only `R >= 1`, the digits in `[0, R)` and an integer high part (`divide` keeps to
            // integer quotients).
            // A constant radix (a coarsened copy's `8*blockIdx.y + 3`) only from 2 up.
            if c.as_constant().is_some_and(|k| k < constraints::Rational::from_integer(2.into())) {
                continue;
            }
            found.entry((c.total_degree(), c.to_string())).or_insert(c);
        }
        // A uniform term's monomial, over its coefficient's denominator: the radix of a copy's
        // constant offset (`3*ub1`: `ub1`; `3/8*B0`: `1/8*B0`).
        for (m, k) in p.terms() {
            if m.is_one() || m.factors().iter().any(|(v, _)| thread_local(v)) {
                continue;
            }
            let c = Poly::term(constraints::Rational::new(1.into(), k.denom().clone()), m.clone());
            found.entry((c.total_degree(), c.to_string())).or_insert(c);
        }
    }
    found.into_values().collect()
}

/// The coefficient of `v` in `p` when `p` is linear in `v` and the coefficient is free of
/// thread-local variables.
fn coefficient(p: &Poly, v: &Var, thread_local: &dyn Fn(&Var) -> bool) -> Option<Poly> {
    if p.terms().any(|(m, _)| m.exponent(v) > 1) {
        return None;
    }
    let c = &p.substitute(v, &Poly::one()) - &p.substitute(v, &Poly::zero());
    (!c.vars().iter().any(thread_local)).then_some(c)
}

/// `p / radix` with integer coefficients, when exact.
fn integer_quotient(p: &Poly, radix: &Poly) -> Option<Poly> {
    p.divide_exact(radix).filter(|q| q.terms().all(|(_, k)| k.is_integer()))
}

/// `p = a*radix + b`: `a` gathers each thread-local variable whose coefficient is an integer
/// multiple of the radix, and the uniform part when it is one; `b` is the rest.
fn divide(p: &Poly, radix: &Poly, thread_local: &dyn Fn(&Var) -> bool) -> (Poly, Poly) {
    let mut a = Poly::zero();
    let mut uniform = p.clone();
    for v in p.vars().into_iter().filter(|v| thread_local(v)) {
        uniform = uniform.substitute(&v, &Poly::zero());
        if let Some(q) = coefficient(p, &v, thread_local).and_then(|c| integer_quotient(&c, radix)) {
            a = a + q * Poly::from_var(v);
        }
    }
    if let Some(q) = integer_quotient(&uniform, radix) {
        a = a + q;
    }
    let b = p - &(&a * radix);
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(v: &Var) -> bool {
        !matches!(v.name(), "N" | "B0" | "B1" | "s")
    }

    /// Digit checks by the obvious bounds of this test's variables: u < B, k < s.
    fn bounds(digit: &Poly, _: Side, radix: &Poly) -> bool {
        let ok: &[(&str, &str)] = &[("u1", "B1"), ("u0", "B0"), ("k", "s"), ("k*B1 + u1", "s*B1"), ("v1*s*B1 + k*B1 + u1", "N"), ("0", "B1"), ("0", "B0")];
        ok.iter().any(|(d, r)| d.parse::<Poly>().unwrap() == *digit && r.parse::<Poly>().unwrap() == *radix)
    }

    #[test]
    fn splits_the_transpose_subscript_into_its_digits() {
        let x: Poly = "(v0*B0 + u0)*N + v1*B1*s + k*B1 + u1".parse().unwrap();
        let pairs = split(&x, &x, &local, &mut bounds);
        let mut vars: Vec<String> = pairs.iter().map(|(p, q)| {
            assert_eq!(p, q);
            p.to_string()
        }).collect();
        vars.sort();
        assert_eq!(vars, ["k", "u0", "u1", "v0", "v1"]);
    }

    #[test]
    fn a_shared_offset_is_dropped_first() {
        let x: Poly = "v1*B1 + u1 + N + 1".parse().unwrap();
        let pairs = split(&x, &x, &local, &mut bounds);
        assert_eq!(pairs, vec![(Poly::var("v1"), Poly::var("v1")), (Poly::var("u1"), Poly::var("u1"))]);
    }

    #[test]
    fn a_bound_check_compares_the_high_digits() {
        let f: Poly = "k*B0*B1 + u1*B0 + u0".parse().unwrap();
        let e: Poly = "s*B0*B1".parse().unwrap();
        let mut digits = |d: &Poly, _: Side, r: &Poly| bounds(d, Side::First, r) || (d.to_string() == "u1*B0 + u0" && r.to_string() == "B0*B1");
        assert_eq!(reduce_comparison(&f, &e, &[], &local, &mut digits), (Poly::var("k"), Poly::var("s")));
        // A bound that is not a multiple of the radix stops the reduction.
        let odd: Poly = "s*B0*B1 + 1".parse().unwrap();
        let (g, h) = reduce_comparison(&f, &odd, &[], &local, &mut digits);
        assert_eq!((g, h), (f, odd));
    }

    #[test]
    fn a_reversed_digit_keeps_the_shared_offset() {
        // rotate90's tile `tx*TS - ty + TS - 1`: without the shared `TS - 1` the low part `-ty`
        // is no digit; with it, `TS - 1 - ty` is.
        let x: Poly = "tx*TS - ty + TS - 1".parse().unwrap();
        let local = |v: &Var| ["tx", "ty"].contains(&v.name());
        let mut digits = |d: &Poly, _: Side, r: &Poly| d.to_string() == "-ty + TS - 1" && r.to_string() == "TS";
        let pairs = split(&x, &x, &local, &mut digits);
        let low: Poly = "TS - 1 - ty".parse().unwrap();
        assert_eq!(pairs, vec![(Poly::var("tx"), Poly::var("tx")), (low.clone(), low)]);
    }

    #[test]
    fn a_reversed_subscript_splits_negated() {
        // `N - 1 - (g*B*V + k*B + u)` on both sides: the shared `N - 1` dropped, every digit is
        // negative; `-x == -y` has the digits `u < B` and `k < V`.
        let x: Poly = "N - 1 - g*B*V - k*B - u".parse().unwrap();
        let y: Poly = "N - 1 - g2*B*V - k2*B - u2".parse().unwrap();
        let local = |v: &Var| ["g", "k", "u", "g2", "k2", "u2"].contains(&v.name());
        let mut digits = |d: &Poly, _: Side, r: &Poly| matches!((d.to_string().as_str(), r.to_string().as_str()), ("u" | "u2", "B") | ("k" | "k2", "V"));
        let pairs = split(&x, &y, &local, &mut digits);
        assert_eq!(pairs, vec![(Poly::var("g"), Poly::var("g2")), (Poly::var("k"), Poly::var("k2")), (Poly::var("u"), Poly::var("u2"))]);
        // Digits that do not check leave the equality whole, less the shared offset.
        let mut none = |_: &Poly, _: Side, _: &Poly| false;
        let offset: Poly = "N - 1".parse().unwrap();
        assert_eq!(split(&x, &y, &local, &mut none), vec![(&x - &offset, &y - &offset)]);
    }

    #[test]
    fn a_bound_is_divided_through_the_facts_definitions() {
        // gelu's `(hb*BH + th)*VEC + v < NH` under `NH % (BH*VEC) == 0`, i.e. `NH == q*BH*VEC`.
        let f: Poly = "hb*BH*VEC + th*VEC + v".parse().unwrap();
        let nh = Poly::var("NH");
        let mut digits = |d: &Poly, _: Side, r: &Poly| (d.to_string() == "v" && r.to_string() == "VEC") || (d.to_string() == "th" && r.to_string() == "BH");
        let local = |v: &Var| ["hb", "th", "v"].contains(&v.name());
        let defs = [(Var::new("NH"), "q*BH*VEC".parse::<Poly>().unwrap())];
        assert_eq!(reduce_comparison(&f, &nh, &defs, &local, &mut digits), (Poly::var("hb"), Poly::var("q")));
        // Without the definition `NH` is no multiple of a radix, and nothing is reduced.
        assert_eq!(reduce_comparison(&f, &nh, &[], &local, &mut digits), (f.clone(), nh.clone()));
        // A definition whose quotient is not integral (`NH == q*BH*VEC/2`) is not used.
        let half = constraints::Rational::new(1.into(), 2.into());
        let halves = [(Var::new("NH"), "q*BH*VEC".parse::<Poly>().unwrap().scale(&half))];
        assert_eq!(reduce_comparison(&f, &nh, &halves, &local, &mut digits), (f.clone(), nh.clone()));
    }

    #[test]
    fn a_quotient_and_its_remainder_fold_back() {
        // bx = q*s + r: q*s*ub1 + r*ub1 + tx is bx*ub1 + tx.
        let f: Poly = "q*s*ub1 + r*ub1 + tx".parse().unwrap();
        let defs = [(Var::new("q"), Var::new("r"), Poly::var("bx"), Poly::var("s"))];
        assert_eq!(fold_divisions(&f, &defs), "bx*ub1 + tx".parse().unwrap());
        // Without the remainder's term nothing folds.
        let g: Poly = "q*s*ub1 + tx".parse().unwrap();
        assert_eq!(fold_divisions(&g, &defs), g);
    }

    #[test]
    fn an_unprovable_digit_keeps_the_equality_whole() {
        // u1 - 1 is not a digit of radix B1 (it can be -1).
        let x: Poly = "v1*B1 + u1 - 1".parse().unwrap();
        let y: Poly = "v1*B1 + u1".parse().unwrap();
        let pairs = split(&x, &y, &local, &mut bounds);
        assert_eq!(pairs, vec![(x, y)]);
    }
}
