//! The index arithmetic of shared-memory staging in 32 bits. The published tool's register
//! pressure level 2; here every staged code of a tree gets it (`tree::build`'s evaluation),
//! since it never overflows (below) and saves registers and 64-bit multiplications.
//!
//! Contract: [`narrow`] marks the code that runs (a staged kernel) to linearise the subscripts
//! of its shared-memory tiles in `int` (the lowering and the CUDA emitter both honour
//! `Kernel::narrow_index`, for shared arrays only) and turns the tool's own 64-bit index
//! temporaries of the cooperative loads and write-backs (`metafork_*` declarations and loop
//! counters, with the `(long)` casts in their definitions, and the conditions that read them)
//! into `int`. The program's own
//! statements keep their types, and global arrays stay linearised in 64 bits. 64-bit values
//! take two registers each and 64-bit multiplications expand: see bench/RESULTS.md.
//!
//! Why no value overflows: a tile index is below the tile's elements, and a cooperative loop
//! counter below the tile's elements plus the block's threads; a leaf's tiles fit in `Z_B`
//! bytes and its block in `T_B` threads, and every CUDA device has `Z_B` of at most 228 KiB and
//! `T_B` of at most 1024, far below 2^31. The coordinates of a tile element in its array are
//! values of the program's own `int` subscripts (the footprint's corners), which the program
//! already computes in `int`; a program that computes in `long`
//! ([`Kernel::computes_in_long`]) is not narrowed. The decision tree does not carry the device bounds as
//! constraints: Z3's nonlinear integer arithmetic slows by 5x to over 100x with them
//! (bench/RESULTS.md), and dispatch reads the real device's limits anyway.

use crate::frontend::ast::*;
use crate::kernel::Kernel;
use crate::strategy::walk::map_expr;

/// The code with 32-bit tile index arithmetic, or `None` when it has no tiles or already has it.
pub fn narrow(kernel: &Kernel) -> Option<Kernel> {
    // A program that computes in `long` may index past 2^31: its tiles' corners are `long`.
    if kernel.narrow_index || kernel.shared.is_empty() || kernel.computes_in_long() {
        return None;
    }
    let mut k = kernel.clone();
    k.narrow_index = true;
    let tiles: Vec<String> = k.shared.iter().map(|s| s.name.clone()).collect();
    for s in &mut k.body {
        narrow_stmt(s, &tiles);
    }
    Some(k)
}

fn is_tool_name(name: &str) -> bool {
    crate::names::is_internal(name)
}

/// Narrows the tool's temporaries, and the subscripts of the tool's shared tiles wherever
/// they appear; the program's own expressions are left as written.
fn narrow_stmt(s: &mut Stmt, tiles: &[String]) {
    match &mut s.kind {
        StmtKind::Decl { ty, vars } => {
            let tool = *ty == ScalarType::Long && vars.iter().all(|d| is_tool_name(&d.name.name));
            if tool {
                *ty = ScalarType::Int;
            }
            for d in vars {
                if tool {
                    narrow_expr(&mut d.init);
                }
                narrow_tile_subscripts(&mut d.init, tiles);
            }
        }
        StmtKind::Assign { target, value, .. } => {
            narrow_tile_subscripts(target, tiles);
            narrow_tile_subscripts(value, tiles);
        }
        StmtKind::For(l) => {
            if l.ty == ScalarType::Long && is_tool_name(&l.var.name) {
                l.ty = ScalarType::Int;
                narrow_expr(&mut l.lo);
                narrow_expr(&mut l.hi);
            }
            narrow_tile_subscripts(&mut l.lo, tiles);
            narrow_tile_subscripts(&mut l.hi, tiles);
            narrow_stmt(&mut l.body, tiles);
        }
        StmtKind::Block(items) => items.iter_mut().for_each(|x| narrow_stmt(x, tiles)),
        StmtKind::If { cond, then_branch, else_branch } => {
            // A condition on the tool's own temporaries (a cooperative load's guard) is the
            // tool's: its bounds are tile sizes and the footprint's corners, as above.
            if mentions_tool_name(cond) {
                narrow_expr(cond);
            }
            narrow_tile_subscripts(cond, tiles);
            narrow_stmt(then_branch, tiles);
            if let Some(e) = else_branch {
                narrow_stmt(e, tiles);
            }
        }
        _ => {}
    }
}

fn mentions_tool_name(e: &Expr) -> bool {
    let mut found = false;
    crate::frontend::ast::walk_expr(e, &mut |x| found |= matches!(&x.kind, ExprKind::Var(v) if is_tool_name(v)));
    found
}

fn narrow_tile_subscripts(e: &mut Expr, tiles: &[String]) {
    map_expr(e, &mut |x| {
        if let ExprKind::Index { array, indices } = &mut x.kind {
            if tiles.contains(&array.name) {
                indices.iter_mut().for_each(narrow_expr);
            }
        }
    });
}

/// `(long)x` becomes `(int)x` throughout an expression the tool wrote.
fn narrow_expr(e: &mut Expr) {
    map_expr(e, &mut |x| {
        if let ExprKind::Cast(t @ ScalarType::Long, _) = &mut x.kind {
            *t = ScalarType::Int;
        }
    });
}
