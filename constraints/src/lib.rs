//! Exact polynomial constraints over program and machine parameters.
//!
//! Contract: this crate knows nothing of CUDA or MetaFork. It offers
//! - [`Poly`]: sparse multivariate polynomials with exact rational coefficients, in a canonical
//!   form (equal polynomials compare equal), printed and parsed in one infix syntax (`2*s*B + 2`);
//! - [`Constraint`] (a polynomial compared with zero) and [`System`] (a conjunction, with each
//!   variable's domain);
//! - [`relax`]: exact pre-checks before Z3 (a contradiction in the linear relaxation, a
//!   solution among simple points), each a proof;
//! - [`search`]: a seeded search for an integer point, tried when Z3 does not decide a query
//!   quickly (a point found is checked exactly, so it too is a proof);
//! - [`solver`]: the Z3 back end (`check`, `implies`, `simplify`, `sample`, and an incremental
//!   [`solver::PathSolver`] for push/pop along a tree path). Z3's `unknown` is always reported as
//!   such, never folded into sat or unsat;
//! - [`budget`]: a process-wide time budget; once spent, every query answers unknown;
//! - [`input`]: reading a file a user names (regular files only, never blocking, size-capped);
//! - [`device`]: machine profiles, the numeric limits of a device read from YAML (built-in
//!   profiles live in `constraints/devices/`); plain numbers, no meaning attached here.

pub mod budget;
pub mod constraint;
pub mod device;
pub mod input;
pub mod parse;
pub mod poly;
pub mod relax;
pub mod search;
pub mod solver;
pub mod system;
pub mod var;

pub use constraint::{Constraint, Rel};
pub use parse::ParseError;
pub use poly::{Monomial, Poly};
pub use system::{Domain, System};
pub use var::Var;

/// Exact rational numbers, as used for coefficients and model values.
pub type Rational = num_rational::BigRational;

/// An integer point by name (a parameter assignment) as exact values for evaluation.
pub fn exact_point(point: &std::collections::BTreeMap<String, i64>) -> std::collections::BTreeMap<Var, Rational> {
    point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect()
}
