//! Loop interchange for coalescing (issue 7): the block loops mapped to `threadIdx.x` and
//! `threadIdx.y` trade places, so that the loop whose counter walks an array's contiguous
//! dimension can be the one consecutive lanes of a warp follow.
//!
//! Contract: [`interchange`] relabels the threads of a block, `(x, y) -> (y, x)`: the block's
//! first two extents swap, and so do `threadIdx.x`/`threadIdx.y` and `blockDim.x`/`blockDim.y`
//! everywhere in the body. Every thread does the work of exactly one thread of the original
//! kernel, with the same barriers, so the kernel computes the same (the verifier checks each
//! leaf anyway). The grid is unchanged. `None` for a one-dimensional block.

use super::walk::map_stmt_exprs;
use crate::frontend::ast::{Builtin, ExprKind};
use crate::kernel::Kernel;

pub fn interchange(kernel: &Kernel) -> Option<Kernel> {
    if kernel.block.len() < 2 {
        return None;
    }
    let mut k = kernel.clone();
    k.block.swap(0, 1);
    let swap = |b: Builtin| match b {
        Builtin::ThreadIdx(d @ (0 | 1)) => Builtin::ThreadIdx(1 - d),
        Builtin::BlockDim(d @ (0 | 1)) => Builtin::BlockDim(1 - d),
        other => other,
    };
    for s in k.body.iter_mut() {
        map_stmt_exprs(s, &mut |x| {
            if let ExprKind::Builtin(b) = &mut x.kind {
                *b = swap(*b);
            }
        });
    }
    Some(k)
}
