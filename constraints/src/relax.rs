//! A cheap exact refutation tried before Z3: the system's *linear relaxation* has no real
//! solution, so the system has none.
//!
//! Contract: [`refutes`] answers `true` only with a proof (exact integer arithmetic, every
//! derived inequality implied by the system); `false` means "not shown", never "satisfiable".
//! The relaxation reads each non-constant monomial as a column of its own (`N_SM*W_SM` is one
//! unknown), keeps `<`, `<=` and `==` (and the integer domains' bounds), reads a divisibility
//! `p % m == 0` of an integer polynomial as `p - m*q == 0` with a new integer column `q`
//! (so `n == 1` beside `n % 4 == 0` is refuted by the gcd), drops `!=` and non-divisibility
//! (where the relaxation does not refute the system, each `p != 0` is then tried as its two
//! sides, `p < 0` and `p > 0`: refuting both refutes the system)
//! (a non-divisibility is first checked against the divisibilities: `s*B1 % 2 != 0` beside
//! `s % 4 == 0` is refuted exactly, where Z3's nonlinear integer search answered unknown),
//! and adds what products of bounded variables must satisfy (McCormick's
//! inequalities `(x - lx)*(y - ly) >= 0` and the like, and `x1^e1*...*xk^ek >= l1^e1*...*lk^ek`
//! for lower bounds `li >= 0`). Fourier–Motzkin elimination then looks for a contradiction.
//! Where every column of a row takes integer values (integer variables, integer
//! coefficients), the row is tightened as integers allow: `p < 0` becomes `p + 1 <= 0` and
//! `sum a_i*x_i + c <= 0` is divided by the coefficients' gcd with the constant rounded
//! (the Omega test's normalisation); each is implied at every integer point, so the
//! refutation stays a proof for integer systems.
//!
//! Why hand-written: the tree and the verifier ask hundreds of small questions (`32 <= R`
//! beside `R < 17`; `1 <= m, 1 <= B` implies `1 <= m + B`) and a Z3 query costs 1–7 ms
//! each, most of it setting a solver up; Fourier–Motzkin over a dozen columns decides these in
//! microseconds. No maintained crate offers exact (rational) linear feasibility; the
//! floating-point LP crates cannot give a proof. Elimination is bounded ([`MAX_ROWS`]): past
//! it the answer is `false` and Z3 decides.

use crate::constraint::{Constraint, Rel};
use crate::poly::Monomial;
use crate::system::{Domain, System};
use num_integer::Integer;
use num_traits::{Signed, ToPrimitive, Zero};
use std::collections::{BTreeMap, BTreeSet};

/// Past this many rows in one elimination step the refutation gives up (answers `false`).
const MAX_ROWS: usize = 600;

/// `sum coeffs[col] * col + constant <= 0` (or `< 0` when `strict`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    coeffs: BTreeMap<usize, i128>,
    constant: i128,
    strict: bool,
}

/// Whether `system` together with `extra` (when given) has no solution, shown by its linear
/// relaxation. `false` when not shown (including when a coefficient does not fit 64 bits).
pub fn refutes(system: &System, extra: Option<&Constraint>) -> bool {
    let constraints: Vec<&Constraint> = system.constraints().iter().chain(extra).collect();
    if refutes_constraints(system, &constraints) {
        return true;
    }
    // The same system with its aliases substituted (tried second, so that nothing the first
    // form refutes is lost to the substituted one's other product columns).
    let Some(substituted) = aliases_substituted(system, &constraints) else { return false };
    let substituted: Vec<&Constraint> = substituted.iter().collect();
    refutes_constraints(system, &substituted)
}

/// [`refutes`] on one form of the constraints.
fn refutes_constraints(system: &System, constraints: &[&Constraint]) -> bool {
    if constraints.iter().any(|c| c.truth_if_constant() == Some(false)) {
        return true;
    }
    if divisibility_conflict(system, constraints) {
        return true;
    }
    if relaxation_refutes(system, constraints, None) {
        return true;
    }
    // A disequality `p != 0` is `p < 0 or p > 0`: the system is refuted when both sides are.
    // Where `p` takes integer values, each side is tightened to `p + 1 <= 0` or `1 - p <= 0`,
    // so that `y != 0` beside `0 <= y < 1` is refuted (a verifier query on Canny's border test,
    // `b0*p + r != 0` with `b0*p + r < 1`, that Z3's nonlinear integer search left unknown at
    // its resource limit). One disequality at a time, each side without further splits: at most
    // two eliminations per disequality, tried only where the relaxation alone did not refute.
    constraints.iter().filter(|c| c.rel() == Rel::Ne).any(|c| {
        let below = Constraint::new(c.poly().clone(), Rel::Lt);
        let above = Constraint::new(-c.poly(), Rel::Lt);
        relaxation_refutes(system, constraints, Some(&below)) && relaxation_refutes(system, constraints, Some(&above))
    })
}

/// `constraints` with every variable that an equality makes an alias (`v == w`, `v == c`)
/// replaced by the other side in every other constraint, the equality itself kept, and the
/// replaced variable's integer bounds restated on its replacement: an equivalent system.
/// `None` when no substitution changes another constraint. The relaxation reads `q*GR` and
/// `nblk*GR` as two unrelated columns: beside `q == nblk`, `q*GR <= b` and `b + 1 <= nblk*GR`
/// (a verifier bound through a launch fact's quotient) is refuted only once they are one, and
/// Z3's nonlinear integer search, given it, answered unsat in 0.35 s or spent its resource
/// limit, by what the thread's context had been asked before (a CI failure, fifty-first
/// session). Which variable goes: the greater in the variables' order (a constant side wins).
fn aliases_substituted(system: &System, constraints: &[&Constraint]) -> Option<Vec<Constraint>> {
    use crate::poly::Poly;
    let mut out: Vec<Constraint> = constraints.iter().map(|c| (*c).clone()).collect();
    let mut changed = false;
    for i in 0..out.len() {
        if out[i].rel() != Rel::Eq || out[i].poly().total_degree() != 1 || out[i].poly().num_terms() != 2 {
            continue;
        }
        let terms: Vec<(&Monomial, &crate::Rational)> = out[i].poly().terms().collect();
        // `a*v + b*w == 0` with `a == -b`, or `a*v + c == 0`.
        let (gone, by) = match (terms[0].0.factors(), terms[1].0.factors()) {
            ([(v, 1)], [(w, 1)]) if terms[0].1 == &-terms[1].1 => {
                if v > w { (v.clone(), Poly::from_var(w.clone())) } else { (w.clone(), Poly::from_var(v.clone())) }
            }
            ([], [(v, 1)]) => (v.clone(), Poly::constant(-terms[0].1 / terms[1].1)),
            ([(v, 1)], []) => (v.clone(), Poly::constant(-terms[1].1 / terms[0].1)),
            _ => continue,
        };
        for (j, c) in out.iter_mut().enumerate() {
            if j != i && c.poly().terms().any(|(m, _)| m.exponent(&gone) > 0) {
                *c = Constraint::new(c.poly().substitute(&gone, &by), c.rel());
                changed = true;
            }
        }
        if let Domain::Integer { lo, hi } = system.domain(&gone) {
            let bound = |b: &num_bigint::BigInt| Poly::constant(crate::Rational::from_integer(b.clone()));
            out.extend(lo.iter().map(|lo| Constraint::le(&bound(lo), &by)));
            out.extend(hi.iter().map(|hi| Constraint::le(&by, &bound(hi))));
        }
    }
    changed.then_some(out)
}

/// Whether the linear relaxation of `constraints` (with `side` added) has no real solution.
fn relaxation_refutes(system: &System, constraints: &[&Constraint], side: Option<&Constraint>) -> bool {
    let with_side: Vec<&Constraint> = constraints.iter().copied().chain(side).collect();
    let Some(mut relaxation) = Relaxation::of(system, &with_side) else { return false };
    relaxation.add_product_bounds();
    relaxation.eliminate()
}

/// Whether a non-divisibility `q % m2 != 0` contradicts a divisibility `p % m1 == 0` of the
/// same integer variables: `m2` divides `m1` and `q == p*r` for a polynomial `r` with integer
/// coefficients over integer variables (`s % 4 == 0` beside `s*B1 % 2 != 0`), so `m2` divides
/// `q` at every point; or `m2` divides each coefficient of `q`. The relaxation drops
/// non-divisibility, and Z3's nonlinear integer search leaves such systems unknown.
fn divisibility_conflict(system: &System, constraints: &[&Constraint]) -> bool {
    // `refutes` runs for nearly every query: most systems hold no non-divisibility at all.
    if !constraints.iter().any(|c| matches!(c.rel(), Rel::NotDvd(_))) {
        return false;
    }
    let integer = |p: &crate::poly::Poly| p.terms().all(|(m, k)| k.is_integer() && m.factors().iter().all(|(v, _)| system.domain(v).is_integer()));
    let dvd: Vec<(&crate::poly::Poly, u32)> = constraints.iter().filter_map(|c| if let Rel::Dvd(m) = c.rel() { Some((c.poly(), m)) } else { None }).filter(|(p, _)| integer(p)).collect();
    constraints.iter().any(|c| {
        let Rel::NotDvd(m2) = c.rel() else { return false };
        let q = c.poly();
        if !integer(q) || m2 == 0 {
            return false;
        }
        let m2_big = num_bigint::BigInt::from(m2);
        if q.terms().all(|(_, k)| (k.to_integer() % &m2_big).is_zero()) {
            return true;
        }
        dvd.iter().any(|(p, m1)| m1 % m2 == 0 && q.divide_exact(p).is_some_and(|r| integer(&r)))
    })
}

struct Relaxation {
    /// The monomial of each column; `None` for the integer quotient of a divisibility.
    columns: Vec<Option<Monomial>>,
    /// Whether each column takes only integer values.
    integral: Vec<bool>,
    rows: Vec<Row>,
}

impl Relaxation {
    fn of(system: &System, constraints: &[&Constraint]) -> Option<Relaxation> {
        let mut r = Relaxation { columns: Vec::new(), integral: Vec::new(), rows: Vec::new() };
        let integer = |m: &Monomial| m.factors().iter().all(|(v, _)| system.domain(v).is_integer());
        for c in constraints {
            // `p % m == 0` over integers is `p - m*q == 0` for a new integer column `q`.
            let modulus = match c.rel() {
                Rel::Lt | Rel::Le | Rel::Eq => None,
                Rel::Dvd(m) if c.poly().terms().all(|(mono, k)| k.is_integer() && integer(mono)) => Some(m),
                _ => continue,
            };
            let mut coeffs = BTreeMap::new();
            let mut constant = 0i128;
            for (m, k) in c.poly().terms() {
                // Normalised constraints have integer coefficients; anything else is left to Z3.
                if !k.is_integer() {
                    return None;
                }
                let k = k.to_integer().to_i64()? as i128;
                if m.is_one() {
                    constant = k;
                } else {
                    let col = r.column(m, integer(m));
                    coeffs.insert(col, k);
                }
            }
            if let Some(m) = modulus {
                r.columns.push(None);
                r.integral.push(true);
                coeffs.insert(r.columns.len() - 1, -i128::from(m));
            }
            let row = Row { coeffs, constant, strict: c.rel() == Rel::Lt };
            if c.rel() == Rel::Eq || modulus.is_some() {
                r.push(negated(&row)?);
            }
            r.push(row);
        }
        for (v, d) in system.domains() {
            if let Domain::Integer { lo, hi } = d {
                let col = r.column(&Monomial::var(v.clone()), true);
                if let Some(lo) = lo {
                    r.push(Row { coeffs: BTreeMap::from([(col, -1)]), constant: lo.to_i64()? as i128, strict: false });
                }
                if let Some(hi) = hi {
                    r.push(Row { coeffs: BTreeMap::from([(col, 1)]), constant: -(hi.to_i64()? as i128), strict: false });
                }
            }
        }
        Some(r)
    }

    fn column(&mut self, m: &Monomial, integral: bool) -> usize {
        if let Some(i) = self.columns.iter().position(|c| c.as_ref() == Some(m)) {
            return i;
        }
        self.columns.push(Some(m.clone()));
        self.integral.push(integral);
        self.columns.len() - 1
    }

    /// Add a row, tightened where its columns are integral.
    fn push(&mut self, row: Row) {
        self.rows.push(tightened(row, &self.integral));
    }

    /// Each variable's best constant lower and upper bound among rows of one column (as
    /// exact fractions `(numerator, denominator)`).
    fn bounds(&self) -> BTreeMap<usize, (Option<(i128, i128)>, Option<(i128, i128)>)> {
        let mut bounds: BTreeMap<usize, (Option<(i128, i128)>, Option<(i128, i128)>)> = BTreeMap::new();
        for row in &self.rows {
            if row.coeffs.len() != 1 || row.strict {
                continue;
            }
            let (&col, &a) = row.coeffs.iter().next().expect("one column");
            // a*x + c <= 0: x <= -c/a when a > 0, x >= -c/a when a < 0.
            let value = if a > 0 { (-row.constant, a) } else { (row.constant, -a) };
            let entry = bounds.entry(col).or_default();
            if a < 0 {
                if entry.0.is_none_or(|old| value.0 * old.1 > old.0 * value.1) {
                    entry.0 = Some(value);
                }
            } else if entry.1.is_none_or(|old| value.0 * old.1 < old.0 * value.1) {
                entry.1 = Some(value);
            }
        }
        bounds
    }

    /// Rows that products of bounded variables satisfy, for every column of degree two or more.
    fn add_product_bounds(&mut self) {
        let bounds = self.bounds();
        let single: BTreeMap<crate::var::Var, usize> = self.columns.iter().enumerate().filter_map(|(i, m)| Some((i, m.as_ref()?))).filter(|(_, m)| m.degree() == 1).map(|(i, m)| (m.factors()[0].0.clone(), i)).collect();
        let integer_bound = |col: usize, lower: bool| -> Option<i128> {
            let b = bounds.get(&col)?;
            let (n, d) = if lower { b.0? } else { b.1? };
            Some(if lower { Integer::div_ceil(&n, &d) } else { Integer::div_floor(&n, &d) })
        };
        let products: Vec<(usize, Monomial)> = self.columns.iter().cloned().enumerate().filter_map(|(i, m)| Some((i, m?))).filter(|(_, m)| m.degree() >= 2).collect();
        for (col, m) in products {
            // Every factor bounded below by l >= 0 (an integer column's bound, rounded up):
            // the product is at least the product of the bounds.
            let lows: Option<Vec<(i128, u32)>> = m.factors().iter().map(|(v, e)| {
                let c = *single.get(v)?;
                let l = if self.integral[c] { integer_bound(c, true)? } else { bounds.get(&c)?.0.filter(|(n, d)| n % d == 0).map(|(n, d)| n / d)? };
                (l >= 0).then_some((l, *e))
            }).collect();
            if let Some(lows) = lows {
                if let Some(p) = lows.iter().try_fold(1i128, |acc, (l, e)| acc.checked_mul(l.checked_pow(*e)?)) {
                    self.push(Row { coeffs: BTreeMap::from([(col, -1)]), constant: p, strict: false });
                }
            }
            // McCormick's inequalities for a product of two distinct variables.
            if let [(x, 1), (y, 1)] = m.factors() {
                let (Some(&cx), Some(&cy)) = (single.get(x), single.get(y)) else { continue };
                if !(self.integral[cx] && self.integral[cy]) {
                    continue;
                }
                let (lx, ux, ly, uy) = (integer_bound(cx, true), integer_bound(cx, false), integer_bound(cy, true), integer_bound(cy, false));
                // (x - a)*(y - b) >= 0 with sx, sy the signs that make each factor nonnegative:
                // sx*sy*(xy - b*x - a*y + a*b) >= 0.
                for (a, sx, b, sy) in [(lx, 1, ly, 1), (ux, -1, uy, -1), (lx, 1, uy, -1), (ux, -1, ly, 1)] {
                    let (Some(a), Some(b)) = (a, b) else { continue };
                    let s = sx * sy;
                    // -s*(xy - b*x - a*y + a*b) <= 0
                    let (Some(ab), true) = (a.checked_mul(b), a.abs() < 1 << 40 && b.abs() < 1 << 40) else { continue };
                    let mut coeffs = BTreeMap::new();
                    coeffs.insert(col, -s);
                    *coeffs.entry(cx).or_insert(0) += s * b;
                    *coeffs.entry(cy).or_insert(0) += s * a;
                    coeffs.retain(|_, k| *k != 0);
                    self.push(Row { coeffs, constant: -s * ab, strict: false });
                }
            }
        }
    }

    /// Fourier–Motzkin elimination, column by column (the one making the fewest new rows
    /// first); `true` when a row with no columns is violated.
    fn eliminate(mut self) -> bool {
        let mut rows: BTreeSet<Row> = std::mem::take(&mut self.rows).into_iter().collect();
        loop {
            let mut live: BTreeSet<usize> = BTreeSet::new();
            for row in &rows {
                if row.coeffs.is_empty() {
                    if row.constant > 0 || (row.strict && row.constant == 0) {
                        return true;
                    }
                } else {
                    live.extend(row.coeffs.keys());
                }
            }
            rows.retain(|r| !r.coeffs.is_empty());
            // Each column's rows with a positive and with a negative coefficient, in one pass
            // over the rows (a pass per column was 3% of jacobi-2d's `gen`).
            let mut signs: BTreeMap<usize, (i64, i64)> = BTreeMap::new();
            for row in &rows {
                for (c, k) in &row.coeffs {
                    let (pos, neg) = signs.entry(*c).or_default();
                    if *k > 0 {
                        *pos += 1;
                    } else if *k < 0 {
                        *neg += 1;
                    }
                }
            }
            let count = |col: usize| signs.get(&col).map_or(0, |(pos, neg)| pos * neg - (pos + neg));
            // A divisibility's quotient goes last: eliminated before its dividend's variables,
            // it would take the integrality that refutes `n == 1, n == 4*q` with it.
            let Some(col) = live.iter().copied().min_by_key(|c| (self.columns[*c].is_none(), count(*c), *c)) else { return false };
            let (with, without): (Vec<Row>, Vec<Row>) = rows.into_iter().partition(|r| r.coeffs.contains_key(&col));
            let (pos, neg): (Vec<&Row>, Vec<&Row>) = with.iter().partition(|r| r.coeffs[&col] > 0);
            if without.len() + pos.len() * neg.len() > MAX_ROWS {
                return false;
            }
            rows = without.into_iter().collect();
            for p in &pos {
                for n in &neg {
                    let Some(combined) = combine(p, n, col) else { return false };
                    rows.insert(tightened(combined, &self.integral));
                }
            }
        }
    }
}

/// `-row` as a row: used with its original for an equality (`p <= 0` and `-p <= 0`).
fn negated(row: &Row) -> Option<Row> {
    Some(Row { coeffs: row.coeffs.iter().map(|(c, k)| (*c, -k)).collect(), constant: row.constant.checked_neg()?, strict: row.strict })
}

/// The positive combination of `p` (positive in `col`) and `n` (negative in it) without `col`.
fn combine(p: &Row, n: &Row, col: usize) -> Option<Row> {
    let (a, b) = (p.coeffs[&col], -n.coeffs[&col]);
    let g = a.gcd(&b);
    let (fp, fn_) = (b / g, a / g);
    let mut coeffs = BTreeMap::new();
    for (c, k) in &p.coeffs {
        *coeffs.entry(*c).or_insert(0i128) = k.checked_mul(fp)?;
    }
    for (c, k) in &n.coeffs {
        let e = coeffs.entry(*c).or_insert(0i128);
        *e = e.checked_add(k.checked_mul(fn_)?)?;
    }
    coeffs.retain(|_, k| *k != 0);
    debug_assert!(!coeffs.contains_key(&col));
    let constant = p.constant.checked_mul(fp)?.checked_add(n.constant.checked_mul(fn_)?)?;
    if coeffs.values().any(|k| k.abs() > 1 << 62) || constant.abs() > 1 << 62 {
        return None;
    }
    Some(Row { coeffs, constant, strict: p.strict || n.strict })
}

/// The row divided by its coefficients' gcd; over integral columns, `< 0` becomes `+ 1 <= 0`
/// and the constant is rounded up after the division.
fn tightened(mut row: Row, integral: &[bool]) -> Row {
    if row.coeffs.is_empty() {
        return row;
    }
    let g = row.coeffs.values().fold(0i128, |g, k| g.gcd(k));
    if row.coeffs.keys().all(|c| integral[*c]) {
        if row.strict {
            row.constant += 1;
            row.strict = false;
        }
        // sum (a/g)*x <= -c/g, so sum (a/g)*x <= floor(-c/g): constant ceil(c/g).
        row.coeffs.values_mut().for_each(|k| *k /= g);
        row.constant = Integer::div_ceil(&row.constant, &g);
    } else {
        // Over the reals only an exact division keeps the row the same.
        if row.constant % g == 0 {
            row.coeffs.values_mut().for_each(|k| *k /= g);
            row.constant /= g;
        }
    }
    row
}

/// A solution of `system` found without a solver, when one of [`candidates`] is one. Checked
/// exactly against every constraint and domain, so a returned point is a proof of
/// satisfiability. The tree's consistency checks are mostly of this kind (`1 <= m, 1 <= B,
/// blockIdx*B + threadIdx < m`), and a Z3 query for one costs milliseconds.
pub fn guess(system: &System) -> Option<BTreeMap<crate::var::Var, crate::Rational>> {
    candidates(system).into_iter().find(|point| system.domains().iter().all(|(v, d)| d.admits(&point[v])) && system.holds_at(point) == Ok(true))
}

/// Simple points for `system`'s variables: every variable at the lower bound its
/// one-variable constraints give (its upper bound, or 0, where it has none), then at 4, 32
/// and 256 pushed into those bounds. Empty where a coefficient is too large to read.
pub fn candidates(system: &System) -> Vec<BTreeMap<crate::var::Var, crate::Rational>> {
    use crate::Rational;
    let constraints: Vec<&Constraint> = system.constraints().iter().collect();
    let Some(relaxation) = Relaxation::of(system, &constraints) else { return Vec::new() };
    let bounds = relaxation.bounds();
    let mut out = Vec::new();
    let mut vars = system.vars();
    vars.extend(system.domains().keys().cloned());
    let column_of = |v: &crate::var::Var| relaxation.columns.iter().position(|m| m.as_ref().is_some_and(|m| m.degree() == 1 && m.factors()[0].0 == *v));
    for target in [None, Some(4i128), Some(32), Some(256)] {
        let mut point = BTreeMap::new();
        for v in &vars {
            let integer = system.domain(v).is_integer();
            let (lo, hi) = column_of(v).and_then(|c| bounds.get(&c)).copied().unwrap_or((None, None));
            let round = |(n, d): (i128, i128), up: bool| if up { Integer::div_ceil(&n, &d) } else { Integer::div_floor(&n, &d) };
            let value = match (lo, hi) {
                (Some(l), _) if !integer && target.is_none() => Rational::new(l.0.into(), l.1.into()),
                (lo, hi) => {
                    let (lo, hi) = (lo.map(|l| round(l, true)), hi.map(|h| round(h, false)));
                    let mut x = target.or(lo).or(hi).unwrap_or(0);
                    if let Some(l) = lo {
                        x = x.max(l);
                    }
                    if let Some(h) = hi {
                        x = x.min(h);
                    }
                    Rational::from_integer(x.into())
                }
            };
            point.insert(v.clone(), value);
        }
        out.push(point);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multiple_of_a_multiple_is_no_non_multiple() {
        use crate::poly::Poly;
        let (s_, b1) = (Poly::var("s"), Poly::var("B1"));
        let with = |cs: Vec<Constraint>| {
            let mut t = System::new();
            for v in ["s", "B1"] {
                t.set_domain(crate::var::Var::new(v), Domain::integer());
            }
            cs.into_iter().for_each(|c| t.add(c));
            refutes(&t, None)
        };
        let six_s_4 = s_.scale(&crate::Rational::from_integer(6.into())) + Poly::constant(crate::Rational::from_integer(4.into()));
        // `s % 4 == 0` makes `s*B1` even; `6*s + 4` is even whatever `s` is.
        assert!(with(vec![Constraint::divides(4, &s_), Constraint::not_divides(2, &(&s_ * &b1))]));
        assert!(with(vec![Constraint::not_divides(2, &six_s_4)]));
        // Not where the moduli do not divide, nor where the quotient is no integer polynomial.
        assert!(!with(vec![Constraint::divides(2, &s_), Constraint::not_divides(4, &(&s_ * &b1))]));
        assert!(!with(vec![Constraint::divides(4, &s_.scale(&crate::Rational::from_integer(2.into()))), Constraint::not_divides(4, &s_)]));
        assert!(!with(vec![Constraint::divides(4, &s_), Constraint::not_divides(2, &(&s_ + &b1))]));
    }

    /// The verifier's bound query of a CI failure: `q*GR <= b`, `b + 1 <= nblk*GR` beside `q ==
    /// nblk` is refuted only through the alias; an alias to a constant and a variable's
    /// integer bounds restated on its replacement count too.
    #[test]
    fn aliases_join_product_columns() {
        use crate::poly::Poly;
        let v = |n: &str| Poly::var(n);
        let int = |n: &str| Poly::constant(crate::Rational::from_integer(n.parse::<i64>().unwrap().into()));
        let with = |cs: Vec<Constraint>, bounded_q: bool| {
            let mut t = System::new();
            for n in ["q", "GR", "nblk", "b", "y"] {
                let d = if bounded_q && n == "q" { Domain::integer_between(Some(0), Some(3)) } else { Domain::integer() };
                t.set_domain(crate::var::Var::new(n), d);
            }
            cs.into_iter().for_each(|c| t.add(c));
            refutes(&t, None)
        };
        let bound = |alias: bool| {
            let mut cs = vec![Constraint::le(&(&v("q") * &v("GR")), &v("b")), Constraint::le(&(&v("b") + &int("1")), &(&v("nblk") * &v("GR")))];
            if alias {
                cs.push(Constraint::eq(&v("q"), &v("nblk")));
            }
            cs
        };
        assert!(with(bound(true), false));
        assert!(!with(bound(false), false));
        // `y == 2` makes `y*b` twice `b`.
        assert!(with(vec![Constraint::eq(&v("y"), &int("2")), Constraint::le(&int("1"), &v("b")), Constraint::le(&(&v("y") * &v("b")), &v("b"))], false));
        // `q <= 3` is `nblk <= 3` once `q` is replaced, and McCormick's `nblk*GR <= 9` needs it.
        let square = vec![Constraint::eq(&v("nblk"), &v("q")), Constraint::le(&int("0"), &v("nblk")), Constraint::le(&int("0"), &v("GR")), Constraint::le(&v("GR"), &int("3")), Constraint::le(&int("16"), &(&v("nblk") * &v("GR")))];
        assert!(with(square.clone(), true));
        assert!(!with(square, false));
    }

    #[test]
    fn a_disequality_is_refuted_by_both_of_its_sides() {
        use crate::poly::Poly;
        let (b, p, r) = (Poly::var("b"), Poly::var("p"), Poly::var("r"));
        let y = &(&b * &p) + &r;
        let with = |integer: bool, cs: Vec<Constraint>| {
            let mut t = System::new();
            if integer {
                for v in ["b", "p", "r"] {
                    t.set_domain(crate::var::Var::new(v), Domain::integer());
                }
            }
            cs.into_iter().for_each(|c| t.add(c));
            refutes(&t, None)
        };
        let border = |lower_r: bool| {
            let mut cs = vec![Constraint::ne(&y, &Poly::zero()), Constraint::lt(&y, &Poly::one()), Constraint::le(&Poly::zero(), &(&b * &p))];
            if lower_r {
                cs.push(Constraint::le(&Poly::zero(), &r));
            }
            cs
        };
        // `y != 0` beside `0 <= y < 1`: no integer `y`.
        assert!(with(true, border(true)));
        // Over the reals `y = 1/2` is a solution; without `0 <= r`, `y = -1` is.
        assert!(!with(false, border(true)));
        assert!(!with(true, border(false)));
    }
}
