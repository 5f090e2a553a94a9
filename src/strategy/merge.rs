//! Iteration merging: each block does the work of [`FACTOR`] consecutive blocks along grid `x`
//! (more work per thread, fewer blocks).
//!
//! Contract: [`merge`] rewrites a kernel (logical or staged) whose grid has an `x` extent `G`
//! as the grid `((long)G + F - 1) / F` and the body
//! `for (int m = 0; m < F; m++) if (F * blockIdx.x + m < G) { body[blockIdx.x := F * blockIdx.x + m] }`.
//! The grid loop's iterations are independent (`meta_for`), so running them one after another
//! in one block is the same program. No condition on the parameters is needed (the guard drops
//! the iteration past `G` when `G` is odd). Refused (`None`) when the grid has no `x` extent,
//! the extent is the constant 1, the body reads `gridDim.x`, or the code has barriers (staged
//! tiles): the guard is block-uniform, but the verifier's barrier model needs every path
//! through an `if` to pass the same barriers, and the guard's `else` passes none.
//! The tree applies it to a final code where the merged grid still fills the device and the
//! merged code's registers fit and leave occupancy as it was (`tree::Builder::finish`); the
//! fill condition needs the grid extent from below as a polynomial quotient
//! ([`extent_lower_bound`]).

use super::walk::{map_stmt_exprs, walk_exprs, walk_stmts};
use crate::frontend::ast::*;
use super::syntax::{bin, e, stmt};
use crate::frontend::model::KernelFunction;
use crate::frontend::polyexpr::{to_poly, DerivedPolys};
use crate::kernel::Kernel;
use constraints::{Constraint, Poly};

/// Blocks merged into one.
pub const FACTOR: i64 = 2;

/// The loop counter of the merged iterations.
const COUNTER: &str = "$merged"; // internal (crate::names): spelled `metafork_merged`

/// The kernel with [`FACTOR`] grid-`x` iterations per block, or `None` where it does not apply.
pub fn merge(kernel: &Kernel) -> Option<Kernel> {
    let extent = kernel.grid.first()?;
    if matches!(extent.kind, ExprKind::Int(1)) {
        return None;
    }
    let mut reads_grid_x = false;
    walk_stmts(&kernel.body, &mut |s| walk_exprs(s, &mut |x| reads_grid_x |= matches!(x.kind, ExprKind::Builtin(Builtin::GridDim(0)))));
    if reads_grid_x || kernel.body.iter().any(crate::access::has_barrier) {
        return None;
    }
    let factor = || e(ExprKind::Int(FACTOR));
    let counter = || e(ExprKind::Var(COUNTER.into()));
    // The block this iteration stands for: F * blockIdx.x + m, in `long` where the program's
    // grid may pass 2^31 (a `long` extent: `F * blockIdx.x` then passes `int`).
    let mut block_x = e(ExprKind::Builtin(Builtin::BlockIdx(0)));
    if kernel.computes_in_long() {
        block_x = e(ExprKind::Cast(ScalarType::Long, Box::new(block_x)));
    }
    let merged_block = bin(BinOp::Add, bin(BinOp::Mul, factor(), block_x), counter());
    let mut body = kernel.body.clone();
    for s in body.iter_mut() {
        map_stmt_exprs(s, &mut |x| {
            if matches!(x.kind, ExprKind::Builtin(Builtin::BlockIdx(0))) {
                *x = merged_block.clone();
            }
        });
    }
    let guarded = stmt(StmtKind::If { cond: bin(BinOp::Lt, merged_block.clone(), extent.clone()), then_branch: Box::new(stmt(StmtKind::Block(body))), else_branch: None });
    let merged_loop = ForLoop {
        var: super::syntax::ident(COUNTER),
        ty: ScalarType::Int,
        lo: e(ExprKind::Int(0)),
        hi: factor(),
        inclusive: false,
        step: 1,
        body: Box::new(stmt(StmtKind::Block(vec![guarded]))),
    };
    let mut out = kernel.clone();
    // In `long`: `G + 1` passes `int` at `G = 2^31 - 1`, and the launcher then ran nothing.
    let wide = e(ExprKind::Cast(ScalarType::Long, Box::new(extent.clone())));
    out.grid[0] = bin(BinOp::Div, bin(BinOp::Add, wide, e(ExprKind::Int(FACTOR - 1))), factor());
    out.body = vec![stmt(StmtKind::For(merged_loop))];
    Some(out)
}

/// A lower bound `num / den` on an integer expression, valid wherever every one of `requires`
/// holds (each integer divisor met on the way at least 1, so that `den`, a product of them, is
/// positive; each polynomial multiplier nonnegative).
#[derive(Clone, Debug, PartialEq)]
pub struct LowerBound {
    pub num: Poly,
    pub den: Poly,
    pub requires: Vec<Constraint>,
}

/// A lower bound on the grid extent `extent` (a host expression over the program's parameters
/// and derived scalars), or `None` where its form is not one handled: polynomials, sums,
/// differences with and products by a polynomial, and C's integer division by a polynomial.
/// For `a / q` with `q >= 1`, C's quotient (truncated) is at least the floor, and
/// `floor(a / q) >= (a - q + 1) / q`; with `a >= n / d` that gives `(n - d*(q - 1)) / (d*q)`.
pub fn extent_lower_bound(extent: &Expr, function: &KernelFunction) -> Option<LowerBound> {
    let derived = function.derived_polys();
    bound(extent, function, &derived, 0)
}

fn bound(x: &Expr, function: &KernelFunction, derived: &DerivedPolys, depth: usize) -> Option<LowerBound> {
    if let Some(p) = to_poly(x, derived) {
        return Some(LowerBound { num: p, den: Poly::one(), requires: Vec::new() });
    }
    // Derived scalars refer only to earlier ones, so the depth is bounded by their number.
    if depth > function.derived.len() {
        return None;
    }
    let with = |b: LowerBound, num: Poly, den: Poly, more: Vec<Constraint>| Some(LowerBound { num, den, requires: b.requires.into_iter().chain(more).collect() });
    match &x.kind {
        ExprKind::Var(name) => bound(&function.derived.iter().find(|d| d.name == *name)?.value, function, derived, depth + 1),
        ExprKind::Cast(t, a) if t.is_integer() => bound(a, function, derived, depth),
        ExprKind::Binary(BinOp::Div, a, q) => {
            let q = to_poly(q, derived)?;
            let a = bound(a, function, derived, depth)?;
            let (num, den) = (&a.num - &(&a.den * &(&q - &Poly::one())), &a.den * &q);
            with(a, num, den, vec![Constraint::ge(&q, &Poly::one())])
        }
        ExprKind::Binary(BinOp::Mul, a, b) => {
            let (a, p) = match (to_poly(a, derived), to_poly(b, derived)) {
                (Some(p), None) => (bound(b, function, derived, depth)?, p),
                (None, Some(p)) => (bound(a, function, derived, depth)?, p),
                _ => return None,
            };
            let (num, den) = (&a.num * &p, a.den.clone());
            with(a, num, den, vec![Constraint::ge(&p, &Poly::zero())])
        }
        ExprKind::Binary(BinOp::Add, a, b) => {
            let (a, b) = (bound(a, function, derived, depth)?, bound(b, function, derived, depth)?);
            let (num, den) = (&a.num * &b.den + &(&b.num * &a.den), &a.den * &b.den);
            let more = b.requires;
            with(a, num, den, more)
        }
        ExprKind::Binary(BinOp::Sub, a, b) => {
            let (a, b) = (bound(a, function, derived, depth)?, to_poly(b, derived)?);
            let (num, den) = (&a.num - &(&b * &a.den), a.den.clone());
            with(a, num, den, Vec::new())
        }
        _ => None,
    }
}
