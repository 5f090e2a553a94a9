//! Thread coarsening along `threadIdx.y` (issue 27.1's 2-D micro-tiles): each thread of a
//! block `K` times shorter along `y` does the work of `K` neighbouring threads of the original
//! block, rows `K*y`, `K*y + 1`, ..., `K*y + K - 1` of a block of extent `B`, one after the
//! other, their statements jammed position by position (`block::jam`). Neighbouring rows let
//! a transposed shared tile (`caching::plan`) hand a thread its `K` operands side by side, in
//! 16-byte loads, where rows `B/K` apart cost an address computation each (bench/RESULTS.md,
//! "Contiguous micro-tiles"). After register blocking along the
//! granularity loop (outputs along one dimension), this gives each thread outputs along both:
//! an operand the copies share (matrix multiplication's `b` element) is read once for `K`
//! multiply-adds, and each copy's own operand (its `a` element) once for the granularity's.
//!
//! Contract: [`coarsen`] takes a logical kernel (before staging) with at least two block
//! dimensions whose `y` counter is declared in the prologue as `lo + threadIdx.y` and read
//! nowhere else through `threadIdx.y` or `blockDim.y`, and returns the kernel whose block has
//! extent `B/K` along `y`, plus the condition `B % K == 0` under which it is the same program:
//! there the new block's threads, times the `K` copies, are exactly the old block's threads,
//! and every copy computes what its thread computed, because the iterations of a `meta_for`
//! are independent (no two touch an element one of them writes), so any interleaving that keeps
//! each copy's own order (jamming does) leaves the same memory. The counter's declaration
//! `lo + threadIdx.y` becomes `lo + threadIdx.y * K`, and copy `j` reads it as `counter + j`;
//! the locals the per-thread body declares are renamed per copy. The
//! block's extent is the polynomial `B/K`, with a rational coefficient, printed as `(B) / K`
//! (`emit::cuda::poly_expr_as`), exact under the condition. `None` where the form does not
//! fit or `K < 2`.

use super::block::{copy_with, jam};
use super::syntax::{bin, e};
use super::walk::{walk_exprs, walk_stmts};
use crate::frontend::ast::*;
use crate::kernel::Kernel;
use constraints::{Constraint, Poly};

/// The coarsened code and the condition under which it is the original program.
#[derive(Clone, Debug)]
pub struct Coarsened {
    pub kernel: Kernel,
    /// `B % K == 0` for the block's `y` extent `B`.
    pub condition: Constraint,
}

/// The factor the tree coarsens code register-blocked by `k` by: `k` itself, a square `k x k`
/// micro-tile, each operand read from shared memory feeding `k` multiply-adds along both
/// dimensions (textbook SGEMM's 8 x 8 halves the 4 x 4 tile's shared loads per FMA). Measured
/// on an H100 (bench/RESULTS.md, "gpu-check on an H100, second run"), in a scratch harness:
/// matmul's 4x4 tiles 1.23 ms at n = 2048, 8x8 1.30 ms, the best uncoarsened leaf 2.20 ms;
/// which wins where is `tune`'s call, so the tree offers both.
pub fn factor_for(k: i64) -> i64 {
    k
}

/// The block dimension coarsened: `y` (coarsening `x` would split a warp's lanes).
const DIM: u8 = 1;

/// The kernel with `k` threads' work per thread along `threadIdx.y` (see the module's contract).
pub fn coarsen(kernel: &Kernel, k: i64) -> Option<Coarsened> {
    if k < 2 || kernel.block.len() <= DIM as usize {
        return None;
    }
    let extent = kernel.block[DIM as usize].clone();
    if extent.terms().any(|(_, c)| !c.is_integer()) {
        return None;
    }
    let prologue = kernel.grid.len() + kernel.block.len();
    let counter = kernel.body.get(..prologue)?.iter().find_map(|s| match &s.kind {
        StmtKind::Decl { vars, .. } if vars.len() == 1 && reads_thread_y(&vars[0].init) => Some(vars[0].name.name.clone()),
        _ => None,
    })?;
    // `threadIdx.y` and `blockDim.y` only in the counter's declaration.
    let mut reads = 0;
    walk_stmts(&kernel.body, &mut |s| walk_exprs(s, &mut |x| reads += matches!(x.kind, ExprKind::Builtin(Builtin::ThreadIdx(DIM) | Builtin::BlockDim(DIM))) as usize));
    if reads != 1 {
        return None;
    }
    let copy = |items: &[Stmt]| -> Vec<Stmt> {
        let copies: Vec<Vec<Stmt>> = (0..k)
            .map(|j| {
                let row = bin(BinOp::Add, e(ExprKind::Var(counter.clone())), e(ExprKind::Int(j)));
                copy_with(items, j, &|v| (v == counter && j > 0).then(|| row.kind.clone()))
            })
            .collect();
        jam(copies)
    };
    let mut out = kernel.clone();
    // The counter steps by `K` per thread: `lo + threadIdx.y` becomes `lo + threadIdx.y * K`.
    let declared = out.body[..prologue].iter_mut().find_map(|s| match &mut s.kind {
        StmtKind::Decl { vars, .. } if vars.len() == 1 && vars[0].name.name == counter => Some(&mut vars[0].init),
        _ => None,
    })?;
    map_thread_y(declared, k);
    if kernel.between == 0 {
        let rest = out.body.split_off(prologue);
        out.body.extend(copy(&rest));
    } else {
        let items = per_thread_body(&mut out.body[prologue..], kernel.between, &counter)?;
        *items = copy(items);
    }
    out.block[DIM as usize] = &extent * &Poly::constant(constraints::Rational::new(1.into(), k.into()));
    let condition = Constraint::divides(u32::try_from(k).ok()?, &extent);
    out.assumptions.push(condition.clone());
    Some(Coarsened { kernel: out, condition })
}

/// `threadIdx.y` in the counter's initialiser (`threadIdx.y` or `lo + threadIdx.y`) times `k`.
fn map_thread_y(init: &mut Expr, k: i64) {
    let thread_y = match &mut init.kind {
        ExprKind::Binary(BinOp::Add, _, b) => b.as_mut(),
        _ => init,
    };
    *thread_y = bin(BinOp::Mul, thread_y.clone(), e(ExprKind::Int(k)));
}

/// `threadIdx.y` or `lo + threadIdx.y`.
fn reads_thread_y(x: &Expr) -> bool {
    match &x.kind {
        ExprKind::Builtin(Builtin::ThreadIdx(DIM)) => true,
        ExprKind::Binary(BinOp::Add, _, b) => matches!(b.kind, ExprKind::Builtin(Builtin::ThreadIdx(DIM))),
        _ => false,
    }
}

/// The statements every thread runs once per iteration of the `between` serial loops
/// (`between >= 1`), when no loop bound on the way reads `counter`.
fn per_thread_body<'a>(rest: &'a mut [Stmt], between: usize, counter: &str) -> Option<&'a mut Vec<Stmt>> {
    let [only] = rest else { return None };
    let StmtKind::For(l) = &mut only.kind else { return None };
    if super::walk::vars_of(&l.lo).contains(counter) || super::walk::vars_of(&l.hi).contains(counter) {
        return None;
    }
    let StmtKind::Block(items) = &mut l.body.kind else { return None };
    if between == 1 {
        return Some(items);
    }
    per_thread_body(items, between - 1, counter)
}
