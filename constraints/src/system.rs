//! A conjunction of constraints together with each variable's domain.
//!
//! A variable without a declared domain is real. Integer domains may carry inclusive bounds;
//! the bounds are part of the system's meaning (the Z3 back end asserts them).

use crate::constraint::Constraint;
use crate::var::Var;
use crate::Rational;
use num_bigint::BigInt;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Domain {
    Real,
    Integer { lo: Option<BigInt>, hi: Option<BigInt> },
}

impl Domain {
    pub fn integer() -> Domain {
        Domain::Integer { lo: None, hi: None }
    }

    pub fn integer_between(lo: Option<i64>, hi: Option<i64>) -> Domain {
        Domain::Integer { lo: lo.map(BigInt::from), hi: hi.map(BigInt::from) }
    }

    pub fn is_integer(&self) -> bool {
        matches!(self, Domain::Integer { .. })
    }

    /// Whether a value lies in the domain.
    pub fn admits(&self, x: &Rational) -> bool {
        match self {
            Domain::Real => true,
            Domain::Integer { lo, hi } => {
                x.is_integer()
                    && lo.as_ref().is_none_or(|l| x.numer() >= l)
                    && hi.as_ref().is_none_or(|h| x.numer() <= h)
            }
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct System {
    constraints: Vec<Constraint>,
    domains: BTreeMap<Var, Domain>,
}

impl System {
    pub fn new() -> System {
        System::default()
    }

    pub fn with(mut self, c: Constraint) -> System {
        self.add(c);
        self
    }

    /// Add a constraint unless the same one is already there.
    pub fn add(&mut self, c: Constraint) {
        if !self.constraints.contains(&c) {
            self.constraints.push(c);
        }
    }

    pub fn set_domain(&mut self, v: Var, d: Domain) {
        self.domains.insert(v, d);
    }

    pub fn domain(&self, v: &Var) -> Domain {
        self.domains.get(v).cloned().unwrap_or(Domain::Real)
    }

    pub fn domains(&self) -> &BTreeMap<Var, Domain> {
        &self.domains
    }

    pub fn constraints(&self) -> &[Constraint] {
        &self.constraints
    }

    pub fn len(&self) -> usize {
        self.constraints.len()
    }

    pub fn is_empty(&self) -> bool {
        self.constraints.is_empty()
    }

    /// Every variable a constraint mentions or a domain declares.
    pub fn vars(&self) -> BTreeSet<Var> {
        let mut vs: BTreeSet<Var> = self.domains.keys().cloned().collect();
        for c in &self.constraints {
            vs.extend(c.vars());
        }
        vs
    }

    /// A copy of this system with the constraints at the given indices removed.
    pub fn without(&self, drop: &BTreeSet<usize>) -> System {
        System {
            constraints: self
                .constraints
                .iter()
                .enumerate()
                .filter(|(i, _)| !drop.contains(i))
                .map(|(_, c)| c.clone())
                .collect(),
            domains: self.domains.clone(),
        }
    }

    /// Exact evaluation at a point: domains and every constraint.
    pub fn holds_at(&self, point: &BTreeMap<Var, Rational>) -> Result<bool, Var> {
        for v in self.vars() {
            let x = point.get(&v).ok_or_else(|| v.clone())?;
            if !self.domain(&v).admits(x) {
                return Ok(false);
            }
        }
        for c in &self.constraints {
            if !c.holds_at(point)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in self.constraints.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}
