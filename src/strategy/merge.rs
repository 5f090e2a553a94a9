//! Iteration merging: each block does the work of [`FACTOR`] consecutive blocks along grid `x`
//! (more work per thread, fewer blocks).
//!
//! Contract: [`merge`] rewrites a kernel (logical or staged) whose grid has an `x` extent `G`
//! as the grid `(G + F - 1) / F` and the body
//! `for (int m = 0; m < F; m++) if (F * blockIdx.x + m < G) { body[blockIdx.x := F * blockIdx.x + m] }`.
//! The grid loop's iterations are independent (`meta_for`), so running them one after another
//! in one block is the same program. No condition on the parameters is needed (the guard drops
//! the iteration past `G` when `G` is odd). Refused (`None`) when the grid has no `x` extent,
//! the extent is the constant 1, the body reads `gridDim.x`, or the code has barriers (staged
//! tiles): the guard is block-uniform, but the verifier's barrier model needs every path
//! through an `if` to pass the same barriers, and the guard's `else` passes none.
//! The tree does not apply it yet; `tests/ilp.rs` checks that the verifier proves merged codes
//! and that they equal the serial program.

use super::walk::{map_stmt_exprs, walk_exprs, walk_stmts};
use crate::frontend::ast::*;
use super::syntax::{bin, e, stmt};
use crate::kernel::Kernel;

/// Blocks merged into one.
pub const FACTOR: i64 = 2;

/// The loop counter of the merged iterations.
const COUNTER: &str = "metafork_merged";

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
    // The block this iteration stands for: F * blockIdx.x + m.
    let merged_block = bin(BinOp::Add, bin(BinOp::Mul, factor(), e(ExprKind::Builtin(Builtin::BlockIdx(0)))), counter());
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
    out.grid[0] = bin(BinOp::Div, bin(BinOp::Add, extent.clone(), e(ExprKind::Int(FACTOR - 1))), factor());
    out.body = vec![stmt(StmtKind::For(merged_loop))];
    Some(out)
}
