//! Configurations that leave iterations out. A grid extent of the schedule as written that
//! truncates a division (`N / (2 * B1)`, directly or through a derived scalar) launches fewer
//! iterations wherever the divisor does not divide the dividend: matrix addition written with
//! `dim1 = N / (2 * B1)` computes 512 of 1000 columns at `B1 = 256`, and the time model,
//! seeing less work, ranked it first. The serial program with the same values truncates alike,
//! so no run can tell; what changes is that the program's result depends on the parameters
//! being tuned.
//!
//! Contract: [`Truncations::of`] finds the divisions of the schedule's grid extents (through
//! derived integer scalars) that are not the ceiling idiom (`(N + B - 1) / B`, whose dividend
//! holds the divisor less one); [`Truncations::left_out`] says, at a configuration, the first
//! one with a remainder there, with its values. `tune` ranks such configurations after the
//! others and marks them.

use crate::frontend::ast::{BinOp, Expr, ExprKind};
use crate::frontend::model::KernelFunction;
use crate::frontend::polyexpr::to_poly;
use crate::kernel::Kernel;
use std::collections::BTreeMap;

/// The truncating divisions of one schedule's grid.
pub struct Truncations {
    /// Each division as written (a `Binary(Div, dividend, divisor)`).
    divisions: Vec<Expr>,
}

impl Truncations {
    /// The divisions of `code`'s grid extents (the schedule as written: a strategy's leaf
    /// changes how the iterations are spread, not which run) that may truncate.
    pub fn of(function: &KernelFunction, code: &Kernel) -> Truncations {
        let derived = function.derived_polys();
        let mut divisions = Vec::new();
        let mut seen_names = Vec::new();
        let mut pending: Vec<&Expr> = code.grid.iter().collect();
        while let Some(e) = pending.pop() {
            crate::frontend::ast::walk_expr(e, &mut |x| match &x.kind {
                ExprKind::Binary(BinOp::Div, a, b) => {
                    let ceiling = match (to_poly(a, &derived), to_poly(b, &derived)) {
                        // The dividend holds every term of `divisor - 1`: a rounding up.
                        (Some(p), Some(q)) => {
                            let less_one = &q - &constraints::Poly::one();
                            let held = less_one.terms().all(|(m, c)| p.terms().any(|(n, d)| n == m && d == c));
                            held
                        }
                        // Not polynomials: nothing is said of them.
                        _ => true,
                    };
                    if !ceiling && !divisions.iter().any(|d: &Expr| d.to_string() == x.to_string()) {
                        divisions.push(x.clone());
                    }
                }
                ExprKind::Var(name) => {
                    if let Some(d) = function.derived.iter().find(|d| d.name == *name && d.ty.is_integer()) {
                        if !seen_names.contains(&d.name) {
                            seen_names.push(d.name.clone());
                            pending.push(&d.value);
                        }
                    }
                }
                _ => {}
            });
        }
        Truncations { divisions }
    }

    /// The first division with a remainder at `point` (every integer parameter), as
    /// ``N / (2 * B1)` has remainder 488 at N = 1000, B1 = 256`; `None` where every division is
    /// exact there, or cannot be evaluated.
    pub fn left_out(&self, function: &KernelFunction, code: &Kernel, point: &BTreeMap<String, i64>) -> Option<String> {
        self.divisions.iter().find_map(|division| {
            let ExprKind::Binary(BinOp::Div, a, b) = &division.kind else { return None };
            let x = crate::perf::movement::value_at(function, code, point, a)?;
            let y = crate::perf::movement::value_at(function, code, point, b)?;
            let r = x.checked_rem(y).filter(|r| *r != 0)?;
            let mut read = Vec::new();
            a.names(&mut read);
            b.names(&mut read);
            let values: Vec<String> = point.iter().filter(|(k, _)| read.contains(k)).map(|(k, v)| format!("{k} = {v}")).collect();
            Some(format!("`{division}` has remainder {r} at {}", values.join(", ")))
        })
    }
}
