//! Variables of polynomials: names with a reading order.
//!
//! The order puts lower-case names first (`s`, `n`, `ub1`), then upper-case ones (`B`, `B0`,
//! `N`, `Z_B`), each group alphabetically, so that products print the way the paper writes them
//! (`2*s*B0*B1`). Equality is name equality; the order is total and consistent with it.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Var(Arc<str>);

impl Var {
    pub fn new(name: &str) -> Var {
        Var(Arc::from(name))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    fn order_key(&self) -> (bool, &str) {
        let upper = self.0.as_bytes().first().is_some_and(|c| c.is_ascii_uppercase());
        (upper, &self.0)
    }
}

impl Ord for Var {
    /// Systems and points are ordered maps of variables, so this runs in every lookup: a
    /// clone of the same variable compares equal without reading its name.
    fn cmp(&self, other: &Self) -> Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return Ordering::Equal;
        }
        self.order_key().cmp(&other.order_key())
    }
}

impl PartialOrd for Var {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<&str> for Var {
    fn from(name: &str) -> Var {
        Var::new(name)
    }
}
