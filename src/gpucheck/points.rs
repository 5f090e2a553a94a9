//! The two parameter points at which gpu-check runs each distinct kernel.
//!
//! Contract: the *small* point is the verifier's first sample of the leaf's correctness
//! constraints ([`crate::verify::sample::points`]: odd sizes, sizes that are not multiples of
//! the block wherever the facts allow). The *large* point keeps its program parameters and
//! multiplies every data parameter by the largest factor `k` (at most [`MAX_FACTOR`]) for which
//! the arrays hold at most [`MAX_ELEMENTS`] elements together and the point still satisfies the
//! facts and the leaf's constraints (Z3 with the machine limits free, as for the small point).
//! Scaling every size by one factor keeps the divisibility facts (`n % B0 == 0`) and the
//! homogeneous ones (`m <= n`) true, so a large point exists for nearly every leaf; when none
//! does (a fact fixes a size), only the small point is returned.
//! The large point also bounds the host's share: `check.cu` copies every array to the device
//! and back around each launch, so a schedule inside host loops (a time loop, a wavefront loop)
//! launches once per iteration; the factor is also held to at most [`MAX_LAUNCHES`] launches
//! and [`MAX_COPIED`] array elements copied in all, where those counts can be evaluated.

use crate::dispatch::facts::FactSet;
use crate::frontend::ast::{Stmt, StmtKind};
use crate::frontend::model::KernelFunction;
use constraints::solver::Backend;
use constraints::System;
use std::collections::BTreeMap;

/// The most array elements (all arrays together) at the large point: a few MiB, so that the
/// serial reference on the host stays well under a second for cubic programs.
pub const MAX_ELEMENTS: i128 = 1 << 20;
/// The largest factor a size is scaled by.
pub const MAX_FACTOR: i64 = 64;
/// The most launches of one schedule in one run of the function at the large point (each is a
/// launch, a synchronization and two copies: tens of microseconds).
pub const MAX_LAUNCHES: i128 = 20_000;
/// The most array elements copied (launches times all arrays' elements) at the large point.
pub const MAX_COPIED: i128 = 1 << 28;

pub type Point = BTreeMap<String, i64>;

/// The small point and, when one exists, the large one.
pub fn two_points(function: &KernelFunction, system: &System, backend: &Backend, seed: u64) -> Result<Vec<(&'static str, Point)>, String> {
    let small = crate::verify::sample::points(function, system, backend, 1, 48, seed)?;
    let Some(small) = small.into_iter().next() else {
        return Err("no parameter point of the leaf's constraints was found".into());
    };
    let mut out = vec![("small", small.clone())];
    if let Some(large) = large_point(function, system, backend, &small)? {
        out.push(("large", large));
    }
    Ok(out)
}

fn large_point(function: &KernelFunction, system: &System, backend: &Backend, small: &Point) -> Result<Option<Point>, String> {
    let facts = FactSet::of(function)?;
    let data = function.data_parameters();
    if data.is_empty() {
        return Ok(None);
    }
    for k in (2..=MAX_FACTOR).rev() {
        let mut point = small.clone();
        for d in &data {
            let v = point.get_mut(d).ok_or_else(|| format!("the sample point has no value for `{d}`"))?;
            *v = v.saturating_mul(k);
        }
        let Some(n) = elements(function, &point) else { continue };
        let launched = launches(function, &point).unwrap_or(1);
        if n <= MAX_ELEMENTS && launched <= MAX_LAUNCHES && launched.saturating_mul(n) <= MAX_COPIED && facts.holds(&point) && crate::verify::sample::admits(system, backend, &point) {
            return Ok(Some(point));
        }
    }
    Ok(None)
}

/// All arrays' elements together at `point`; `None` when an extent cannot be evaluated.
pub fn elements(function: &KernelFunction, point: &Point) -> Option<i128> {
    let exact = constraints::exact_point(point);
    let mut total: i128 = 0;
    for a in &function.arrays {
        let mut n: i128 = 1;
        for e in &a.extents {
            let v = e.eval(&exact).ok()?;
            let v = i128::try_from(v.to_integer()).ok()?.max(0);
            n = n.checked_mul(v)?;
        }
        total = total.checked_add(n)?;
    }
    Some(total)
}

/// The most launches of any one schedule in one run of the function at `point`: the product of
/// the trip counts of the host loops around it. `None` when a trip count cannot be evaluated
/// (a bound that depends on an outer loop's counter, a step other than 1); the caller then has
/// no bound from launches.
pub fn launches(function: &KernelFunction, point: &Point) -> Option<i128> {
    let exact = constraints::exact_point(point);
    launches_in(function, &function.body, &exact)
}

fn launches_in(function: &KernelFunction, body: &[Stmt], at: &BTreeMap<constraints::Var, constraints::Rational>) -> Option<i128> {
    let mut most: i128 = 0;
    for s in body {
        let here = match &s.kind {
            StmtKind::MetaSchedule { .. } => 1,
            StmtKind::Block(b) => launches_in(function, b, at)?,
            StmtKind::If { then_branch, else_branch, .. } => {
                let t = launches_in(function, std::slice::from_ref(then_branch), at)?;
                let e = match else_branch {
                    Some(e) => launches_in(function, std::slice::from_ref(e), at)?,
                    None => 0,
                };
                t.max(e)
            }
            StmtKind::For(l) => {
                let inner = launches_in(function, std::slice::from_ref(&l.body), at)?;
                if inner == 0 {
                    0
                } else {
                    let trip = crate::strategy::unroll::trip_count(function, l)?.eval(at).ok()?;
                    let trip = i128::try_from(trip.to_integer()).ok()?.max(0);
                    trip.checked_mul(inner)?
                }
            }
            _ => 0,
        };
        most = most.max(here);
    }
    Some(most)
}
