//! The performance counters as the decision tree forks on them: for each access, the
//! condition under which its counter reaches the threshold, as constraints over the
//! parameters (polynomial and divisibility conditions) that Z3 decides and the dispatcher
//! evaluates.
//!
//! Contract: a [`Condition`] describes the first warp of block `(0, 0, 0)` on the first
//! iteration, exactly as [`super::lanes`] counts it. Where its `shape` holds, the warp's 32
//! lanes touch elements `stride * lane + offset` (the warp lies in one row, `32 <= Bx`, or the
//! index is linear in the lane number); there:
//! - **bank conflicts** (shared, 4-byte words): the access is served in `gcd(stride, 32)`
//!   passes, so it is conflict-free (accept) exactly when `stride % 2 != 0`;
//! - **coalescing** (global, elements of 2 to 16 bytes): bytes used over bytes moved is above
//!   [`COALESCING_THRESHOLD`] (accept) exactly when `stride == 1`; any stride of 2 or more
//!   moves at least twice the bytes it uses.
//!
//! The shape also requires a non-zero stride (a warp reading one element is neither
//! conflicted nor wasteful), and for coalescing a positive one. Outside the shape the counter is not forked on (its value there
//! is what `metafork counters --at` reports lane by lane). Accesses whose index is not affine
//! in the thread indices (the tiles' cooperative loads, with their divisions) have no
//! condition; divisions the same for every lane (of block indices, of parameters) do not stop one.
//! `tests/perf.rs` checks every condition against the lanes at sampled points.

use super::pattern::Pattern;
use crate::kernel::Kernel;
use constraints::{Constraint, Poly};

/// The coalescing counter's threshold: an access is accepted when more than half of the bytes
/// it moves are used.
pub const COALESCING_THRESHOLD: f64 = 0.5;

/// Which counter a condition is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Coalescing,
    BankConflicts,
}

/// One access's fork.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// The access's position among the kernel's patterns (the same access in a transformed
    /// code, whose text may differ).
    pub position: usize,
    /// The access as written (`a_tile0[...]`) and its array.
    pub access: String,
    pub array: String,
    /// Where the closed form applies (all must hold); constant-true atoms are left out.
    pub shape: Vec<Constraint>,
    /// The counter reaches its threshold (conflict-free; more than half the bytes used).
    pub accept: Constraint,
}

impl Condition {
    /// The counter falls short of its threshold.
    pub fn refuse(&self) -> Constraint {
        self.accept.negate()
    }
}

/// The lanes' stride of `p`'s first warp in `kernel`'s block and the shape conditions under
/// which the warp's lanes are `stride * lane + offset`, or `None` when neither form applies.
fn lane_stride(p: &Pattern, kernel: &Kernel, kind: Kind) -> Option<(Poly, Vec<Constraint>)> {
    let strides = p.strides.as_ref()?;
    // As the lanes count: variables that are not parameters (loop counters) at 0.
    let params: Vec<String> = kernel.params.iter().map(|q| q.name.clone()).collect();
    let first_iteration = |s: &Poly| super::pattern::first_iteration(s, &params);
    let [ax, ay, az] = strides.each_ref().map(first_iteration);
    let extent = |d: usize| kernel.block.get(d).cloned().unwrap_or_else(Poly::one);
    let (bx, by, bz) = (extent(0), extent(1), extent(2));
    let warp = Poly::int(super::lanes::WARP);
    // Linear in the lane number `x + Bx*y + Bx*By*z` (whatever the block's shape, once it holds
    // a whole warp); otherwise only a warp within one row.
    let linear = ay == &bx * &ax && (az == &(&bx * &by) * &ax || bz == Poly::one());
    let mut shape = vec![if linear { Constraint::le(&warp, &(&(&bx * &by) * &bz)) } else { Constraint::le(&warp, &bx) }];
    shape.push(match kind {
        Kind::BankConflicts => Constraint::ne(&ax, &Poly::zero()),
        // A negative stride is as coalesced as its mirror image: left to the lanes.
        Kind::Coalescing => Constraint::le(&Poly::one(), &ax),
    });
    shape.retain(|c| c.truth_if_constant() != Some(true));
    if shape.iter().any(|c| c.truth_if_constant() == Some(false)) {
        return None;
    }
    Some((ax, shape))
}

/// The conditions of `kind` for the accesses of `kernel` (their patterns, in order).
pub fn conditions(patterns: &[Pattern], kernel: &Kernel, kind: Kind) -> Vec<Condition> {
    let mut out = Vec::new();
    for (position, p) in patterns.iter().enumerate() {
        let relevant = match kind {
            Kind::BankConflicts => p.shared && p.elem == super::lanes::WORD,
            Kind::Coalescing => !p.shared && (2..=16).contains(&p.elem) && super::lanes::SECTOR % p.elem == 0,
        };
        if !relevant {
            continue;
        }
        let Some((stride, shape)) = lane_stride(p, kernel, kind) else { continue };
        let accept = match kind {
            Kind::BankConflicts => Constraint::not_divides(2, &stride),
            Kind::Coalescing => Constraint::eq(&stride, &Poly::one()),
        };
        out.push(Condition { position, access: crate::names::in_messages(&p.text), array: p.array.clone(), shape, accept });
    }
    out
}
