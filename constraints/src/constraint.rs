//! A polynomial compared with zero: `p < 0`, `p <= 0`, `p == 0` or `p != 0`; or a
//! divisibility condition on an integer polynomial: `p % m == 0` or `p % m != 0` (`m >= 2`),
//! which is how the performance counters' cases on residues (a stride's parity, a block
//! dimension's multiple of 32) enter a system. Divisibility reads the polynomial's value: it
//! holds at a point only where that value is an integer and a multiple of `m`.
//!
//! Constraints are normalised on construction: the polynomial is scaled by a positive rational
//! to integer coefficients with content 1 (and, for `==`/`!=`, a positive leading coefficient),
//! so that the same condition written two ways compares equal. They print with the positive
//! terms on the left and the negative ones on the right: `2*s*B + 2 <= Z_B`.

use crate::poly::Poly;
use crate::var::Var;
use crate::Rational;
use num_traits::{Signed, Zero};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rel {
    Lt,
    Le,
    Eq,
    Ne,
    /// `m` divides the value: `p % m == 0`.
    Dvd(u32),
    /// `m` does not divide the value (or it is not an integer): `p % m != 0`.
    NotDvd(u32),
}

impl Rel {
    pub fn symbol(self) -> &'static str {
        match self {
            Rel::Lt => "<",
            Rel::Le => "<=",
            Rel::Eq => "==",
            Rel::Ne => "!=",
            Rel::Dvd(_) => "==",
            Rel::NotDvd(_) => "!=",
        }
    }

    /// Whether an integer value stands in this relation to 0 (the dispatcher's and the
    /// lane counters' integer evaluation).
    pub fn holds_int(self, v: i128) -> bool {
        match self {
            Rel::Lt => v < 0,
            Rel::Le => v <= 0,
            Rel::Eq => v == 0,
            Rel::Ne => v != 0,
            Rel::Dvd(m) => v.rem_euclid(m.into()) == 0,
            Rel::NotDvd(m) => v.rem_euclid(m.into()) != 0,
        }
    }

    /// The modulus of a divisibility relation.
    pub fn modulus(self) -> Option<u32> {
        match self {
            Rel::Dvd(m) | Rel::NotDvd(m) => Some(m),
            _ => None,
        }
    }

    fn holds(self, value: &Rational) -> bool {
        match self {
            Rel::Lt => value.is_negative(),
            Rel::Le => !value.is_positive(),
            Rel::Eq => value.is_zero(),
            Rel::Ne => !value.is_zero(),
            Rel::Dvd(m) => value.is_integer() && (value.to_integer() % num_bigint::BigInt::from(m)).is_zero(),
            Rel::NotDvd(m) => !Rel::Dvd(m).holds(value),
        }
    }
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Constraint {
    poly: Poly,
    rel: Rel,
}

impl Constraint {
    /// `poly REL 0`, normalised.
    pub fn new(poly: Poly, rel: Rel) -> Constraint {
        if let Some(m) = rel.modulus() {
            return Constraint::divisibility(poly, m, matches!(rel, Rel::Dvd(_)));
        }
        let mut scale = poly.content_scale();
        if matches!(rel, Rel::Eq | Rel::Ne) {
            if let Some((_, lead)) = poly.terms().next() {
                if lead.is_negative() {
                    scale = -scale;
                }
            }
        }
        Constraint { poly: poly.scale(&scale), rel }
    }

    /// `m` divides `poly` (`divides`) or not, normalised: a polynomial with integer
    /// coefficients is divided by the common factor it shares with `m` and given a positive
    /// leading coefficient (`m | p` exactly when `m | -p`); when the modulus becomes 1 the
    /// condition is a constant (`0 == 0`, or `0 != 0` for its negation).
    pub fn divisibility(poly: Poly, m: u32, divides: bool) -> Constraint {
        use num_integer::Integer;
        assert!(m >= 1, "a divisibility condition needs a positive modulus");
        let mut poly = poly;
        let mut m = num_bigint::BigInt::from(m);
        if poly.terms().all(|(_, k)| k.is_integer()) {
            let content = poly.terms().fold(num_bigint::BigInt::zero(), |g, (_, k)| g.gcd(&k.to_integer()));
            let g = content.gcd(&m);
            if g > num_bigint::BigInt::from(1) {
                poly = poly.scale(&Rational::new(1.into(), g.clone()));
                m /= g;
            }
            if poly.terms().next().is_some_and(|(_, lead)| lead.is_negative()) {
                poly = -poly;
            }
        }
        let m = u32::try_from(m).expect("the modulus only shrinks");
        if m == 1 || poly.is_zero() {
            return Constraint { poly: Poly::zero(), rel: if divides { Rel::Eq } else { Rel::Ne } };
        }
        Constraint { poly, rel: if divides { Rel::Dvd(m) } else { Rel::NotDvd(m) } }
    }

    /// `m | p`.
    pub fn divides(m: u32, p: &Poly) -> Constraint {
        Constraint::divisibility(p.clone(), m, true)
    }

    /// `m ∤ p`.
    pub fn not_divides(m: u32, p: &Poly) -> Constraint {
        Constraint::divisibility(p.clone(), m, false)
    }

    pub fn lt(lhs: &Poly, rhs: &Poly) -> Constraint {
        Constraint::new(lhs - rhs, Rel::Lt)
    }

    pub fn le(lhs: &Poly, rhs: &Poly) -> Constraint {
        Constraint::new(lhs - rhs, Rel::Le)
    }

    pub fn eq(lhs: &Poly, rhs: &Poly) -> Constraint {
        Constraint::new(lhs - rhs, Rel::Eq)
    }

    pub fn ne(lhs: &Poly, rhs: &Poly) -> Constraint {
        Constraint::new(lhs - rhs, Rel::Ne)
    }

    /// `lhs >= rhs`, stored as `rhs - lhs <= 0`.
    pub fn ge(lhs: &Poly, rhs: &Poly) -> Constraint {
        Constraint::le(rhs, lhs)
    }

    pub fn gt(lhs: &Poly, rhs: &Poly) -> Constraint {
        Constraint::lt(rhs, lhs)
    }

    pub fn poly(&self) -> &Poly {
        &self.poly
    }

    pub fn rel(&self) -> Rel {
        self.rel
    }

    pub fn vars(&self) -> BTreeSet<Var> {
        self.poly.vars()
    }

    /// The exact complement: `not (p <= 0)` is `-p < 0`, and so on.
    pub fn negate(&self) -> Constraint {
        match self.rel {
            Rel::Le => Constraint::new(-&self.poly, Rel::Lt),
            Rel::Lt => Constraint::new(-&self.poly, Rel::Le),
            Rel::Eq => Constraint::new(self.poly.clone(), Rel::Ne),
            Rel::Ne => Constraint::new(self.poly.clone(), Rel::Eq),
            Rel::Dvd(m) => Constraint { poly: self.poly.clone(), rel: Rel::NotDvd(m) },
            Rel::NotDvd(m) => Constraint { poly: self.poly.clone(), rel: Rel::Dvd(m) },
        }
    }

    /// Whether the constraint holds at a point; `Err(v)` names a missing variable.
    pub fn holds_at(&self, point: &BTreeMap<Var, Rational>) -> Result<bool, Var> {
        Ok(self.rel.holds(&self.poly.eval(point)?))
    }

    /// `Some(truth)` when the polynomial is a constant.
    pub fn truth_if_constant(&self) -> Option<bool> {
        self.poly.as_constant().map(|c| self.rel.holds(&c))
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = self.rel.modulus() {
            let single = self.poly.terms().count() == 1 && self.poly.terms().all(|(_, k)| *k == Rational::from_integer(1.into()));
            let p = if single { self.poly.to_string() } else { format!("({})", self.poly) };
            return write!(f, "{p} % {m} {} 0", self.rel.symbol());
        }
        let (pos, neg) = self.poly.split_signs();
        write!(f, "{} {} {}", pos, self.rel.symbol(), neg)
    }
}

impl std::str::FromStr for Constraint {
    type Err = crate::ParseError;
    fn from_str(s: &str) -> Result<Constraint, Self::Err> {
        crate::parse::parse_constraint(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_the_paper() {
        let c: Constraint = "2*s*B + 2 <= Z_B".parse().unwrap();
        assert_eq!(c.to_string(), "2*s*B + 2 <= Z_B");
        let d: Constraint = "Z_B < 2*B + 2".parse().unwrap();
        assert_eq!(d.to_string(), "Z_B < 2*B + 2");
    }

    #[test]
    fn normalisation_identifies_scaled_forms() {
        let a: Constraint = "4*x <= 2*y".parse().unwrap();
        let b: Constraint = "x/2 <= y/4".parse().unwrap();
        assert_eq!(a, b);
        let e: Constraint = "x == y".parse().unwrap();
        let f: Constraint = "2*y == 2*x".parse().unwrap();
        assert_eq!(e, f);
    }

    #[test]
    fn divisibility_normalises_and_evaluates() {
        let x = Poly::var("x");
        let d = Constraint::divides(32, &(&x * &Poly::int(4)));
        assert_eq!(d, Constraint::divides(8, &x));
        assert_eq!(d.to_string(), "x % 8 == 0");
        assert_eq!(Constraint::divides(2, &(-(&x + &Poly::one()))).to_string(), "(x + 1) % 2 == 0");
        assert_eq!(Constraint::divides(2, &(&x * &Poly::int(2))).truth_if_constant(), Some(true));
        assert_eq!(Constraint::not_divides(2, &(&x * &Poly::int(6))).truth_if_constant(), Some(false));
        let at = |v: i64| BTreeMap::from([(Var::new("x"), Rational::from_integer(v.into()))]);
        assert!(d.holds_at(&at(-16)).unwrap() && !d.holds_at(&at(12)).unwrap());
        assert!(d.negate().holds_at(&at(12)).unwrap() && d.negate().negate() == d);
    }

    #[test]
    fn negation_is_the_complement() {
        let c: Constraint = "x <= 3".parse().unwrap();
        assert_eq!(c.negate(), "3 < x".parse().unwrap());
        assert_eq!(c.negate().negate(), c);
    }
}
