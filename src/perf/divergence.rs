//! Branch divergence: the fraction of a block's warps whose lanes disagree on a condition.
//!
//! Contract: a [`Branch`] is a condition of the access model's guards (an `if`, a loop bound)
//! that names a thread index, `g(tx, ty, tz) REL 0`. [`Branch::count`] counts, lane by lane,
//! the warps of the block `(0, 0, 0)` on the first iteration (loop counters 0) in which some
//! lanes hold the condition and others do not; [`closed_form`] gives the same count, row by
//! row, for a condition affine in the thread indices when `Bx` is a multiple of 32 (each warp
//! then lies in one row, where the condition switches at most once) or divides 32 (each warp
//! holds `32 / Bx` whole rows), and `None` otherwise. [`Branch::count`] takes the closed form
//! where it applies, and evaluates other conditions in machine integers
//! ([`super::lane_eval`]); [`Branch::count_through_model`] is the exact lane-by-lane reference.
//! `tests/perf.rs` checks they all agree.

use super::lanes::WARP;
use super::pattern::{thread_strides, LaneValues};
use constraints::{Constraint, Poly, Rel};
use std::collections::BTreeMap;

/// A thread-dependent condition of the kernel.
#[derive(Clone, Debug)]
pub struct Branch {
    pub condition: Constraint,
    pub lanes: LaneValues,
    /// The condition's coefficient per thread index, when it is affine in them and uses no
    /// division ([`thread_strides`]): found once, used at every point.
    strides: Option<[Poly; 3]>,
}

/// Diverging warps and warps, for the first block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    pub diverged: i64,
    pub warps: i64,
}

impl Count {
    /// The counter: the fraction of warps that diverge, in [0, 1].
    pub fn fraction(&self) -> f64 {
        if self.warps == 0 {
            0.0
        } else {
            self.diverged as f64 / self.warps as f64
        }
    }
}

fn holds(rel: Rel, v: i64) -> bool {
    rel.holds_int(v.into())
}

/// Diverging warps of a block, given each lane's truth (lanes in linear thread order).
fn count_warps(block: [i64; 3], truth: &mut dyn FnMut(i64, [i64; 3]) -> Option<bool>) -> Option<Count> {
    let [bx, by, bz] = block;
    let threads = bx * by * bz;
    let warps = (threads + WARP - 1) / WARP;
    let mut diverged = 0;
    for w in 0..warps {
        let (mut some_true, mut some_false) = (false, false);
        for l in w * WARP..(w * WARP + WARP).min(threads) {
            if truth(l, [l % bx, (l / bx) % by, l / (bx * by)])? {
                some_true = true;
            } else {
                some_false = true;
            }
        }
        diverged += i64::from(some_true && some_false);
    }
    Some(Count { diverged, warps })
}

/// Lane by lane, for a condition affine in the thread indices (integer arithmetic).
pub fn by_lanes(coeffs: [i64; 3], constant: i64, rel: Rel, block: [i64; 3]) -> Count {
    let mut truth = |_: i64, t: [i64; 3]| Some(holds(rel, coeffs[0] * t[0] + coeffs[1] * t[1] + coeffs[2] * t[2] + constant));
    count_warps(block, &mut truth).unwrap_or(Count { diverged: 0, warps: 0 })
}

impl Branch {
    /// The branch on `condition`, its lanes evaluated through `lanes` (the divisions it needs).
    pub fn new(lanes: LaneValues, condition: Constraint) -> Branch {
        let strides = if lanes.divisions.is_empty() { thread_strides(condition.poly()) } else { None };
        Branch { condition, lanes, strides }
    }

    /// Diverging warps of the block; `None` where a value is missing. Lane by lane through
    /// the model's divisions (in machine integers, [`super::lane_eval`]); an affine condition
    /// by its closed form.
    pub fn count(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<Count> {
        // An affine condition needs no model evaluation per lane: its closed form, or its
        // lanes in integer arithmetic (the same count; `tests/perf.rs` checks both agree).
        if let Some((coeffs, constant)) = self.affine(point) {
            let rel = self.condition.rel();
            return Some(closed_form(coeffs, constant, rel, block).unwrap_or_else(|| by_lanes(coeffs, constant, rel, block)));
        }
        let condition = super::lane_eval::LaneEval::new(&self.lanes, self.condition.poly(), point);
        let mut truth = |_: i64, t: [i64; 3]| condition.eval(t).map(|v| holds(self.condition.rel(), v));
        count_warps(block, &mut truth)
    }

    /// [`Branch::count`] without the shortcut: every lane's condition evaluated through the
    /// access model (slow; the reference the shortcut is tested against).
    pub fn count_through_model(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<Count> {
        let at = self.lanes.at(point);
        let mut truth = |_: i64, t: [i64; 3]| at.eval(self.condition.poly(), t).map(|v| holds(self.condition.rel(), v));
        count_warps(block, &mut truth)
    }

    /// The condition's coefficients per thread index and its constant, at `point`, when it is
    /// affine in the thread indices and uses no division.
    pub fn affine(&self, point: &BTreeMap<String, i64>) -> Option<([i64; 3], i64)> {
        let [x, y, z] = self.strides.as_ref()?;
        let v = self.lanes.at(point).eval_each(&[x, y, z, self.condition.poly()], [0, 0, 0])?;
        Some(([v[0], v[1], v[2]], v[3]))
    }
}

fn floor_div(a: i64, b: i64) -> i64 {
    let q = a / b;
    if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    }
}

fn ceil_div(a: i64, b: i64) -> i64 {
    -floor_div(-a, b)
}

/// The first index `t > 0` whose truth differs from index 0's, for `g*t + r REL 0` with
/// `g != 0` and `REL` one of `<`, `<=` (monotone in `t`); 0 or less when there is none.
fn switch(g: i64, r: i64, rel: Rel) -> i64 {
    match (rel, g > 0) {
        (Rel::Lt, true) => ceil_div(-r, g),       // true while t < -r/g: first false
        (Rel::Lt, false) => floor_div(-r, g) + 1, // true once t > -r/g: first true
        (Rel::Le, true) => floor_div(-r, g) + 1,  // true while t <= -r/g
        (Rel::Le, false) => ceil_div(-r, g),      // true once t >= -r/g
        _ => 0,
    }
}

/// The closed form, row by row: in a row the condition switches at most once (at `t*`), and
/// the warp containing the switch diverges unless it falls on a warp boundary; `==` and `!=`
/// diverge in the warp holding the one lane where `g = 0`, if that lane exists. For `Bx`
/// dividing 32 a warp holds `32 / Bx` rows and diverges when one switches or two disagree.
/// `None` for other block widths and for residue conditions.
pub fn closed_form(coeffs: [i64; 3], constant: i64, rel: Rel, block: [i64; 3]) -> Option<Count> {
    let [bx, by, bz] = block;
    if bx < 1 || (bx % WARP != 0 && WARP % bx != 0) || matches!(rel, Rel::Dvd(_) | Rel::NotDvd(_)) {
        // A residue condition switches every few lanes: no row-by-row form.
        return None;
    }
    let [gx, gy, gz] = coeffs;
    // Each row (fixed ty, tz): the truth of its first lane, and whether it switches within.
    let row = |ty: i64, tz: i64| -> (bool, bool) {
        let r = gy * ty + gz * tz + constant;
        let first = holds(rel, r);
        if gx == 0 || bx == 1 {
            return (first, false);
        }
        let splits = match rel {
            Rel::Lt | Rel::Le => {
                let s = switch(gx, r, rel);
                0 < s && s < bx
            }
            // One lane t with gx*t + r == 0, when it is an integer in the row.
            _ => (-r) % gx == 0 && (0..bx).contains(&(-r / gx)),
        };
        (first, splits)
    };
    if bx % WARP == 0 {
        // Rows of whole warps: a row's warp diverges where it switches, unless on a boundary.
        let mut diverged = 0;
        for tz in 0..bz {
            for ty in 0..by {
                let r = gy * ty + gz * tz + constant;
                let on_boundary = matches!(rel, Rel::Lt | Rel::Le) && gx != 0 && switch(gx, r, rel) % WARP == 0;
                let (_, splits) = row(ty, tz);
                diverged += i64::from(splits && !on_boundary);
            }
        }
        return Some(Count { diverged, warps: bx / WARP * by * bz });
    }
    // `Bx` divides 32: each warp holds 32 / Bx consecutive rows (the last maybe fewer); it
    // diverges when one of them switches or two of them disagree.
    let per_warp = WARP / bx;
    let rows = by * bz;
    let mut diverged = 0;
    let mut start = 0;
    while start < rows {
        let mut truths = Vec::new();
        let mut splits = false;
        for k in start..(start + per_warp).min(rows) {
            let (first, s) = row(k % by, k / by);
            splits |= s;
            truths.push(first);
        }
        diverged += i64::from(splits || truths.iter().any(|&t| t != truths[0]));
        start += per_warp;
    }
    Some(Count { diverged, warps: (rows + per_warp - 1) / per_warp })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closed form against direct counting on a grid of conditions `gx*tx + gy*ty + c REL 0`.
    #[test]
    fn closed_form_counts_what_the_lanes_show() {
        let mut checked = 0;
        for bx in [32, 64, 96, 1, 2, 4, 8, 16] {
            for by in [1, 2, 3, 17, 64] {
                for gx in [-3, -1, 0, 1, 2, 5] {
                    for gy in [0, 1, -7] {
                        for c in [-100, -40, -33, -32, -1, 0, 5, 31] {
                            for rel in [Rel::Lt, Rel::Le, Rel::Eq, Rel::Ne] {
                                let block = [bx, by, 1];
                                let formula = closed_form([gx, gy, 0], c, rel, block).unwrap();
                                assert_eq!(formula, by_lanes([gx, gy, 0], c, rel, block), "{gx}*tx + {gy}*ty + {c} {rel:?} 0 in {block:?}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 2000);
        assert_eq!(closed_form([1, 0, 0], 0, Rel::Lt, [3, 2, 1]), None);
        assert_eq!(closed_form([1, 0, 0], 0, Rel::Dvd(2), [32, 2, 1]), None);
    }
}
