//! Sparse multivariate polynomials with exact rational coefficients.
//!
//! Invariants: a [`Monomial`] lists each variable once, with a positive exponent, in [`Var`]'s
//! order; a [`Poly`] maps monomials to non-zero coefficients. Together they make the form
//! canonical, so structural equality is polynomial equality. Terms iterate (and print) by
//! descending total degree, then by their variables.

use crate::var::Var;
use crate::Rational;
use num_bigint::BigInt;
use num_traits::{One, Signed, Zero};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::{Add, Mul, Neg, Sub};
use std::sync::Arc;

/// A product of variables with positive exponents; the empty product is 1.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Monomial(Vec<(Var, u32)>);

impl Monomial {
    pub fn one() -> Monomial {
        Monomial(Vec::new())
    }

    pub fn var(v: Var) -> Monomial {
        Monomial(vec![(v, 1)])
    }

    pub fn degree(&self) -> u32 {
        self.0.iter().map(|(_, e)| e).sum()
    }

    pub fn is_one(&self) -> bool {
        self.0.is_empty()
    }

    /// The variables with their exponents, in variable order.
    pub fn factors(&self) -> &[(Var, u32)] {
        &self.0
    }

    pub fn exponent(&self, v: &Var) -> u32 {
        self.0.iter().find(|(w, _)| w == v).map_or(0, |(_, e)| *e)
    }

    pub fn mul(&self, other: &Monomial) -> Monomial {
        let mut merged: BTreeMap<Var, u32> = self.0.iter().cloned().collect();
        for (v, e) in &other.0 {
            *merged.entry(v.clone()).or_insert(0) += e;
        }
        Monomial(merged.into_iter().collect())
    }

    /// `self / other` when `other` divides this monomial.
    pub fn divide(&self, other: &Monomial) -> Option<Monomial> {
        let mut out = Vec::new();
        for (v, e) in &self.0 {
            let d = other.exponent(v);
            match e.checked_sub(d) {
                Some(0) => {}
                Some(r) => out.push((v.clone(), r)),
                None => return None,
            }
        }
        other.0.iter().all(|(v, _)| self.exponent(v) > 0).then_some(Monomial(out))
    }

    /// This monomial without the variable `v`.
    pub fn without(&self, v: &Var) -> Monomial {
        Monomial(self.0.iter().filter(|(w, _)| w != v).cloned().collect())
    }
}

impl Ord for Monomial {
    /// Higher total degree first, then by the variable lists.
    fn cmp(&self, other: &Self) -> Ordering {
        other.degree().cmp(&self.degree()).then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for Monomial {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Monomial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("1");
        }
        for (i, (v, e)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("*")?;
            }
            if *e == 1 {
                write!(f, "{v}")?;
            } else {
                write!(f, "{v}^{e}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Monomial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A polynomial over the rationals in canonical sparse form.
///
/// The terms are shared between clones and copied on the first change (`Arc::make_mut`): the
/// tree clones each node's constraint system into its children, and a deep copy of every
/// term's big rationals was most of that cost.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Poly {
    terms: Arc<BTreeMap<Monomial, Rational>>,
}

impl Poly {
    pub fn zero() -> Poly {
        Poly::default()
    }

    pub fn one() -> Poly {
        Poly::constant(Rational::one())
    }

    pub fn constant(c: Rational) -> Poly {
        let mut p = Poly::zero();
        p.add_term(Monomial::one(), c);
        p
    }

    pub fn int(c: i64) -> Poly {
        Poly::constant(Rational::from_integer(BigInt::from(c)))
    }

    pub fn var(name: &str) -> Poly {
        Poly::from_var(Var::new(name))
    }

    pub fn from_var(v: Var) -> Poly {
        let mut p = Poly::zero();
        p.add_term(Monomial::var(v), Rational::one());
        p
    }

    /// A single term `coeff * monomial`.
    pub fn term(coeff: Rational, monomial: Monomial) -> Poly {
        let mut p = Poly::zero();
        p.add_term(monomial, coeff);
        p
    }

    fn add_term(&mut self, m: Monomial, c: Rational) {
        use std::collections::btree_map::Entry;
        if c.is_zero() {
            return;
        }
        match Arc::make_mut(&mut self.terms).entry(m) {
            Entry::Vacant(slot) => {
                slot.insert(c);
            }
            Entry::Occupied(mut slot) => {
                *slot.get_mut() += c;
                if slot.get().is_zero() {
                    slot.remove(); // keep the invariant: no zero coefficients
                }
            }
        }
    }

    pub fn is_zero(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms, highest degree first.
    pub fn terms(&self) -> impl Iterator<Item = (&Monomial, &Rational)> {
        self.terms.iter()
    }

    pub fn num_terms(&self) -> usize {
        self.terms.len()
    }

    /// The value when the polynomial is a constant (the zero polynomial is 0).
    pub fn as_constant(&self) -> Option<Rational> {
        match self.terms.len() {
            0 => Some(Rational::zero()),
            1 => self.terms.get(&Monomial::one()).cloned(),
            _ => None,
        }
    }

    /// The single variable this polynomial is, if it is exactly one variable.
    pub fn as_var(&self) -> Option<&Var> {
        let (m, c) = self.terms.iter().next()?;
        (self.terms.len() == 1 && c.is_one() && m.0.len() == 1 && m.0[0].1 == 1).then(|| &m.0[0].0)
    }

    pub fn constant_term(&self) -> Rational {
        self.terms.get(&Monomial::one()).cloned().unwrap_or_else(Rational::zero)
    }

    pub fn total_degree(&self) -> u32 {
        self.terms.keys().map(Monomial::degree).max().unwrap_or(0)
    }

    pub fn vars(&self) -> BTreeSet<Var> {
        self.terms.keys().flat_map(|m| m.0.iter().map(|(v, _)| v.clone())).collect()
    }

    pub fn pow(&self, e: u32) -> Poly {
        let mut result = Poly::one();
        let mut base = self.clone();
        let mut e = e;
        while e > 0 {
            if e & 1 == 1 {
                result = &result * &base;
            }
            e >>= 1;
            if e > 0 {
                base = &base * &base;
            }
        }
        result
    }

    pub fn scale(&self, c: &Rational) -> Poly {
        if c.is_zero() {
            return Poly::zero();
        }
        Poly { terms: Arc::new(self.terms.iter().map(|(m, k)| (m.clone(), k * c)).collect()) }
    }

    /// Division by the term `coeff * divisor` (`coeff` positive), term by term: the terms that
    /// are integer multiples of it, divided by it (the quotient), and the other terms (the
    /// remainder), so that `self == quotient * coeff * divisor + remainder`.
    pub fn split_by_term(&self, coeff: &Rational, divisor: &Monomial) -> (Poly, Poly) {
        let mut quotient = Poly::zero();
        let mut remainder = Poly::zero();
        for (m, c) in self.terms.iter() {
            let q = c / coeff;
            match m.divide(divisor) {
                Some(rest) if q.is_integer() => quotient.add_term(rest, q),
                _ => remainder.add_term(m.clone(), c.clone()),
            }
        }
        (quotient, remainder)
    }

    /// The greatest monomial that divides every term (1 for the zero polynomial).
    pub fn common_monomial(&self) -> Monomial {
        let mut terms = self.terms.keys();
        let Some(first) = terms.next() else { return Monomial::one() };
        let mut common: Vec<(Var, u32)> = first.factors().to_vec();
        for m in terms {
            common = common.into_iter().filter_map(|(v, e)| Some((v.clone(), e.min(m.exponent(&v)))).filter(|(_, e)| *e > 0)).collect();
        }
        Monomial(common)
    }

    /// `self / divisor` when the division is exact (`quotient * divisor == self`), by long
    /// division on the leading terms; `None` otherwise. The result is checked by multiplying
    /// back, so the term order only decides whether a quotient is found, never its value.
    pub fn divide_exact(&self, divisor: &Poly) -> Option<Poly> {
        let (lead_m, lead_c) = divisor.terms.iter().next()?;
        let mut rest = self.clone();
        let mut quotient = Poly::zero();
        while let Some((m, c)) = rest.terms.iter().next().map(|(m, c)| (m.clone(), c.clone())) {
            let t = Poly::term(c / lead_c, m.divide(lead_m)?);
            rest = rest - &t * divisor;
            quotient = quotient + t;
            if quotient.terms.len() > self.terms.len() + 1 {
                return None; // not converging: the order does not suit this pair
            }
        }
        (&quotient * divisor == *self).then_some(quotient)
    }

    /// Replace every occurrence of `v` by `replacement`.
    pub fn substitute(&self, v: &Var, replacement: &Poly) -> Poly {
        let mut out = Poly::zero();
        for (m, c) in self.terms.iter() {
            let e = m.exponent(v);
            if e == 0 {
                out.add_term(m.clone(), c.clone());
            } else {
                let rest = Poly::term(c.clone(), m.without(v));
                out = out + rest * replacement.pow(e);
            }
        }
        out
    }

    /// Evaluate at a point; `Err(v)` names a variable the point does not give.
    pub fn eval(&self, point: &BTreeMap<Var, Rational>) -> Result<Rational, Var> {
        if let Some(v) = self.eval_small(point)? {
            return Ok(Rational::from_integer(BigInt::from(v)));
        }
        let mut sum = Rational::zero();
        for (m, c) in self.terms.iter() {
            let mut t = c.clone();
            for (v, e) in &m.0 {
                let x = point.get(v).ok_or_else(|| v.clone())?;
                t *= num_traits::pow(x.clone(), *e as usize);
            }
            sum += t;
        }
        Ok(sum)
    }

    /// [`Poly::eval`] in machine integers, for integer coefficients and values that fit 64
    /// bits and a value that fits 128 (`None` otherwise: evaluate exactly). The tree and the
    /// verifier evaluate thousands of constraints at integer points, and big-rational
    /// products (a gcd each) were a tenth of `gen`'s time.
    fn eval_small(&self, point: &BTreeMap<Var, Rational>) -> Result<Option<i128>, Var> {
        use num_traits::ToPrimitive;
        let small = |q: &Rational| if q.is_integer() { q.numer().to_i64().map(i128::from) } else { None };
        let mut sum: i128 = 0;
        for (m, c) in self.terms.iter() {
            let Some(mut t) = small(c) else { return Ok(None) };
            for (v, e) in &m.0 {
                let Some(x) = small(point.get(v).ok_or_else(|| v.clone())?) else { return Ok(None) };
                for _ in 0..*e {
                    let Some(p) = t.checked_mul(x) else { return Ok(None) };
                    t = p;
                }
            }
            let Some(s) = sum.checked_add(t) else { return Ok(None) };
            sum = s;
        }
        Ok(Some(sum))
    }

    /// The least common multiple of the coefficients' denominators (1 for integer
    /// coefficients): the polynomial times it has integer coefficients.
    pub fn common_denominator(&self) -> BigInt {
        use num_integer::Integer;
        self.terms.values().fold(BigInt::one(), |l, c| l.lcm(c.denom()))
    }

    /// The least common multiple of the coefficients' denominators and the gcd of their
    /// numerators: multiplying by `lcm/gcd` gives integer coefficients with content 1.
    pub fn content_scale(&self) -> Rational {
        use num_integer::Integer;
        let mut lcm = BigInt::one();
        let mut gcd = BigInt::zero();
        for c in self.terms.values() {
            lcm = lcm.lcm(c.denom());
            gcd = gcd.gcd(c.numer());
        }
        if gcd.is_zero() {
            return Rational::one();
        }
        Rational::new(lcm, gcd.abs())
    }

    /// Write a rational coefficient the way the parser reads it back.
    fn fmt_coeff(c: &Rational) -> String {
        if c.is_integer() {
            c.numer().to_string()
        } else {
            format!("{}/{}", c.numer(), c.denom())
        }
    }

    /// Print the terms with the given sign convention: `negate` prints `-self`.
    pub(crate) fn fmt_terms(&self, negate: bool) -> String {
        if self.terms.is_empty() {
            return "0".into();
        }
        let mut s = String::new();
        for (i, (m, c)) in self.terms.iter().enumerate() {
            let c = if negate { -c.clone() } else { c.clone() };
            let negative = c.is_negative();
            let abs = c.abs();
            if i == 0 {
                if negative {
                    s.push('-');
                }
            } else {
                s.push_str(if negative { " - " } else { " + " });
            }
            if m.is_one() {
                s.push_str(&Self::fmt_coeff(&abs));
            } else if abs.is_one() {
                s.push_str(&m.to_string());
            } else {
                s.push_str(&Self::fmt_coeff(&abs));
                s.push('*');
                s.push_str(&m.to_string());
            }
        }
        s
    }

    /// Split into the terms with positive and with negative coefficients: `self = pos - neg`.
    pub fn split_signs(&self) -> (Poly, Poly) {
        let mut pos = Poly::zero();
        let mut neg = Poly::zero();
        for (m, c) in self.terms.iter() {
            if c.is_positive() {
                pos.add_term(m.clone(), c.clone());
            } else {
                neg.add_term(m.clone(), -c.clone());
            }
        }
        (pos, neg)
    }
}

impl fmt::Display for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.fmt_terms(false))
    }
}

impl fmt::Debug for Poly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Poly({self})")
    }
}

impl std::str::FromStr for Poly {
    type Err = crate::ParseError;
    fn from_str(s: &str) -> Result<Poly, Self::Err> {
        crate::parse::parse_poly(s)
    }
}

impl Add<&Poly> for &Poly {
    type Output = Poly;
    fn add(self, rhs: &Poly) -> Poly {
        let mut out = self.clone();
        for (m, c) in rhs.terms.iter() {
            out.add_term(m.clone(), c.clone());
        }
        out
    }
}

impl Sub<&Poly> for &Poly {
    type Output = Poly;
    fn sub(self, rhs: &Poly) -> Poly {
        let mut out = self.clone();
        for (m, c) in rhs.terms.iter() {
            out.add_term(m.clone(), -c.clone());
        }
        out
    }
}

impl Mul<&Poly> for &Poly {
    type Output = Poly;
    fn mul(self, rhs: &Poly) -> Poly {
        let mut out = Poly::zero();
        for (m1, c1) in self.terms.iter() {
            for (m2, c2) in rhs.terms.iter() {
                out.add_term(m1.mul(m2), c1 * c2);
            }
        }
        out
    }
}

impl Neg for &Poly {
    type Output = Poly;
    fn neg(self) -> Poly {
        Poly { terms: Arc::new(self.terms.iter().map(|(m, c)| (m.clone(), -c.clone())).collect()) }
    }
}

impl Neg for Poly {
    type Output = Poly;
    fn neg(self) -> Poly {
        -&self
    }
}

macro_rules! forward_owned_binop {
    ($tr:ident, $method:ident) => {
        impl $tr<Poly> for Poly {
            type Output = Poly;
            fn $method(self, rhs: Poly) -> Poly {
                (&self).$method(&rhs)
            }
        }
        impl $tr<&Poly> for Poly {
            type Output = Poly;
            fn $method(self, rhs: &Poly) -> Poly {
                (&self).$method(rhs)
            }
        }
        impl $tr<Poly> for &Poly {
            type Output = Poly;
            fn $method(self, rhs: Poly) -> Poly {
                self.$method(&rhs)
            }
        }
    };
}
forward_owned_binop!(Add, add);
forward_owned_binop!(Sub, sub);
forward_owned_binop!(Mul, mul);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_in_the_papers_order() {
        let p = Poly::int(2) * Poly::var("s") * Poly::var("B") + Poly::int(2);
        assert_eq!(p.to_string(), "2*s*B + 2");
        let q = Poly::int(2) * Poly::var("B1") * Poly::var("s") * Poly::var("B0");
        assert_eq!(q.to_string(), "2*s*B0*B1");
    }

    #[test]
    fn split_by_term_is_a_division_with_remainder() {
        // 2*v*B*N + 3*u*N + x*B + 4*N by 2*N: quotient v*B, remainder 3*u*N + x*B; then
        // 4*N = 2*(2*N) joins the quotient.
        let p: Poly = "2*v*B*N + 3*u*N + x*B + 4*N".parse().unwrap();
        let (q, r) = p.split_by_term(&Rational::from_integer(2.into()), &Monomial::var(Var::new("N")));
        assert_eq!(q, "v*B + 2".parse().unwrap());
        assert_eq!(r, "3*u*N + x*B".parse().unwrap());
        let back = &q * &"2*N".parse::<Poly>().unwrap() + &r;
        assert_eq!(back, p);
        assert!(Monomial::var(Var::new("N")).divide(&Monomial::var(Var::new("B"))).is_none());
    }

    #[test]
    fn exact_division_finds_the_quotient_or_says_none() {
        let r: Poly = "B0 + 1".parse().unwrap();
        let c: Poly = "k*B1*B0 + k*B1".parse().unwrap();
        assert_eq!(c.divide_exact(&r), Some("k*B1".parse().unwrap()));
        assert_eq!("B0 + 2".parse::<Poly>().unwrap().divide_exact(&r), None);
        assert_eq!(Poly::zero().divide_exact(&r), Some(Poly::zero()));
    }

    #[test]
    fn cancellation_leaves_canonical_zero() {
        let p = Poly::var("x") + Poly::int(1);
        assert!((&p - &p).is_zero());
        assert_eq!(&p - &p, Poly::zero());
    }

    #[test]
    fn substitution_expands() {
        // (x + 1)^2 with x := y - 1 is y^2.
        let p = (Poly::var("x") + Poly::int(1)).pow(2);
        let q = p.substitute(&Var::new("x"), &(Poly::var("y") - Poly::int(1)));
        assert_eq!(q, Poly::var("y").pow(2));
    }
}
