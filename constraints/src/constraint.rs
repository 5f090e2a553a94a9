//! A polynomial compared with zero: `p < 0`, `p <= 0`, `p == 0` or `p != 0`.
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
}

impl Rel {
    pub fn symbol(self) -> &'static str {
        match self {
            Rel::Lt => "<",
            Rel::Le => "<=",
            Rel::Eq => "==",
            Rel::Ne => "!=",
        }
    }

    fn holds(self, value: &Rational) -> bool {
        match self {
            Rel::Lt => value.is_negative(),
            Rel::Le => !value.is_positive(),
            Rel::Eq => value.is_zero(),
            Rel::Ne => !value.is_zero(),
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
    fn negation_is_the_complement() {
        let c: Constraint = "x <= 3".parse().unwrap();
        assert_eq!(c.negate(), "3 < x".parse().unwrap());
        assert_eq!(c.negate().negate(), c);
    }
}
