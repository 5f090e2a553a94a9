//! The kernel form: one `meta_schedule` as a CUDA kernel, the unit that strategies transform
//! and that the LLVM lowering, the CUDA emitter and the counters consume.
//!
//! Contract: a [`Kernel`] is self-contained. Its parameters are the function's parameters in
//! order, then the derived scalars and the host loop counters (the host computes them and
//! passes them in). Grid extents are host expressions; block extents are polynomials in the
//! program parameters, so threads per block is a polynomial. Each grid (block) loop counter is
//! defined as `lo + blockIdx.d` (`lo + threadIdx.d`), and the launch has exactly `hi - lo`
//! blocks (threads) along `d`, so no guard is needed and every thread reaches every barrier.
//! Serial loops between the grid and block groups wrap the body, executed by every thread.

use crate::frontend::ast::*;
use crate::frontend::model::{KernelFunction, Role, Schedule};
use crate::frontend::source::Span;
use constraints::Poly;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KernelParamKind {
    Scalar(ScalarType),
    Array { elem: ScalarType, is_const: bool, extents: Vec<Poly> },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelParam {
    pub name: String,
    pub kind: KernelParamKind,
}

/// An array in (dynamic) shared memory, one per thread block.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedArray {
    pub name: String,
    pub elem: ScalarType,
    pub extents: Vec<Poly>,
}

impl SharedArray {
    pub fn elements(&self) -> Poly {
        self.extents.iter().fold(Poly::one(), |acc, e| acc * e)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<KernelParam>,
    pub shared: Vec<SharedArray>,
    /// Number of blocks along x, y, z (index 0 is x): host expressions.
    pub grid: Vec<Expr>,
    /// Threads per block along x, y, z (index 0 is x).
    pub block: Vec<Poly>,
    pub body: Vec<Stmt>,
    /// The serial host loops around the launch; their counters are parameters, within range.
    pub host_loops: Vec<crate::frontend::model::SerialLoop>,
    /// Register-pressure strategy, level 1: no serial loop is unrolled, by LLVM, nvcc or ptxas.
    pub no_unroll: bool,
    /// Shared tiles' subscripts are linearised, and the tool's own staging index temporaries
    /// computed, in 32-bit `int` (see `strategy::narrow`; every staged code in a tree has it).
    pub narrow_index: bool,
    /// Register pressure, level 3: ptxas may allocate at most this many registers per thread
    /// (`.maxnreg` / `__maxnreg__`) and spills the rest to local memory.
    pub max_registers: Option<u32>,
    /// Common sub-expression elimination applied to the code that runs: 0 (none), 1 or 2
    /// (see `strategy::cse`).
    pub cse: u8,
    /// Bank-conflict strategy: every staged tile of two or more dimensions gets one unused
    /// element at the end of each row, so a column's elements fall in different banks.
    pub pad_shared: bool,
    /// Transposed tiles (`strategy::caching`'s column-by-column storage) keep their columns
    /// unpadded: the refusal of shared memory (`tree::Strategy::UnpadColumns`).
    pub unpadded_columns: bool,
    /// Set by staging on the code that runs: some tile is stored column by column with its
    /// columns padded (what `unpadded_columns` would save).
    pub padded_columns: bool,
    /// Arrays to stage in shared memory (the schedule's `cache(...)`). The kernel form stays
    /// logical: `strategy::caching::stage` builds the code with tiles, loads and write-backs.
    pub cache: Vec<String>,
    /// Unrolling strategy: the innermost serial loop of the code that runs is unrolled by 4
    /// (`strategy::unroll`) when its trip-count condition is this constraint, which the tree
    /// has added on this code's side; a code whose loop has another condition is not unrolled.
    pub unroll: Option<constraints::Constraint>,
    /// Block-level reductions: the eligible atomic adds of the code that runs are summed in the
    /// block first, one atomic add per block and element (`strategy::block_reduce`, applied
    /// to the staged code).
    pub block_reduce: bool,
    /// Iteration merging: each block does the work of `strategy::merge::FACTOR` consecutive
    /// grid-`x` blocks (applied to the code that runs, after unrolling).
    pub merged: bool,
    /// Conditions on the parameters under which this code is the program (a coarsened block's
    /// `B0 % 8 == 0`): the tree adds each to the region where the code runs, and the
    /// strategies that stage the code may rely on them (`B0 / 8` is then exact).
    pub assumptions: Vec<constraints::Constraint>,
    /// How many serial loops sit between the prologue (the grid and block counters) and the
    /// schedule's body, each the only statement of its parent (matrix multiplication's `t`).
    pub between: usize,
}

fn ident(name: &str) -> Ident {
    Ident { name: name.to_string(), span: Span::default() }
}

fn expr(kind: ExprKind) -> Expr {
    Expr::new(kind, Span::default())
}

/// `lo + index`, or just `index` when `lo` is the literal 0.
fn offset(lo: &Expr, index: Builtin) -> Expr {
    let b = expr(ExprKind::Builtin(index));
    match lo.kind {
        ExprKind::Int(0) => b,
        _ => expr(ExprKind::Binary(BinOp::Add, Box::new(lo.clone()), Box::new(b))),
    }
}

/// The dimension index (0 = x) of a `maps_to` such as `threadIdx.y`.
fn dim_of(maps_to: &str) -> u8 {
    match maps_to.rsplit('.').next() {
        Some("y") => 1,
        Some("z") => 2,
        _ => 0,
    }
}

impl Kernel {
    /// The kernel of one schedule, before any strategy.
    pub fn from_schedule(function: &KernelFunction, schedule: &Schedule) -> Result<Kernel, String> {
        let mut params: Vec<KernelParam> = Vec::new();
        for p in &function.params {
            let kind = match p.role {
                Role::Array => {
                    let a = function.array(&p.name).ok_or_else(|| format!("array `{}` has no layout", p.name))?;
                    KernelParamKind::Array { elem: a.elem, is_const: a.is_const, extents: a.extents.clone() }
                }
                _ => KernelParamKind::Scalar(p.ty),
            };
            params.push(KernelParam { name: p.name.clone(), kind });
        }
        for d in function.derived_in_scope(schedule) {
            params.push(KernelParam { name: d.name.clone(), kind: KernelParamKind::Scalar(d.ty) });
        }
        for h in &schedule.host_loops {
            params.push(KernelParam { name: h.var.clone(), kind: KernelParamKind::Scalar(h.ty) });
        }

        let mut grid = vec![expr(ExprKind::Int(1)); schedule.grid.len()];
        let mut block = vec![Poly::one(); schedule.block.len()];
        let mut prologue = Vec::new();
        for l in &schedule.grid {
            let d = dim_of(&l.maps_to);
            grid[d as usize] = match l.lo.kind {
                ExprKind::Int(0) => l.hi.clone(),
                _ => expr(ExprKind::Binary(BinOp::Sub, Box::new(l.hi.clone()), Box::new(l.lo.clone()))),
            };
            prologue.push(decl(l.ty, &l.var, offset(&l.lo, Builtin::BlockIdx(d))));
        }
        for l in &schedule.block {
            let d = dim_of(&l.maps_to);
            block[d as usize] = l.extent.clone().ok_or_else(|| {
                format!("the extent of block loop `{}` is not a polynomial in the program parameters", l.var)
            })?;
            prologue.push(decl(l.ty, &l.var, offset(&l.lo, Builtin::ThreadIdx(d))));
        }
        let mut body = schedule.body.clone();
        // The block's iterations join at the end of each iteration of the loops between the
        // grid and the block, where a thread may read what another wrote (`join`).
        if crate::join::needs_join(function, schedule) {
            body.push(Stmt { kind: StmtKind::Barrier, span: Span::default() });
        }
        for s in schedule.between.iter().rev() {
            let l = ForLoop {
                var: ident(&s.var),
                ty: s.ty,
                lo: s.lo.clone(),
                hi: s.hi.clone(),
                inclusive: s.inclusive,
                step: s.step,
                body: Box::new(Stmt { kind: StmtKind::Block(body), span: Span::default() }),
            };
            body = vec![Stmt { kind: StmtKind::For(l), span: Span::default() }];
        }
        prologue.extend(body);
        Ok(Kernel { name: schedule.name.clone(), params, shared: Vec::new(), grid, block, body: prologue, host_loops: schedule.host_loops.clone(), no_unroll: false, narrow_index: false, max_registers: None, cse: 0, pad_shared: false, unpadded_columns: false, padded_columns: false, cache: schedule.cache.clone(), unroll: None, block_reduce: false, merged: false, assumptions: Vec::new(), between: schedule.between.len() })
    }

    /// Threads per block: the product of the block extents.
    pub fn threads_per_block(&self) -> Poly {
        self.block.iter().fold(Poly::one(), |acc, e| acc * e)
    }

    /// Shared memory per block in elements (summed over the shared arrays).
    pub fn shared_elements(&self) -> Poly {
        self.shared.iter().fold(Poly::zero(), |acc, s| acc + s.elements())
    }

    /// Shared memory per block in bytes.
    pub fn shared_bytes(&self) -> Poly {
        self.shared
            .iter()
            .fold(Poly::zero(), |acc, s| acc + s.elements() * Poly::int(s.elem.size_bytes() as i64))
    }

    /// The shared arrays in layout order: widest elements first, so that every array starts
    /// aligned to its element size with no padding and the block is exactly
    /// [`Kernel::shared_bytes`] long (the counter is the allocation).
    pub fn shared_layout(&self) -> Vec<&SharedArray> {
        let mut v: Vec<&SharedArray> = self.shared.iter().collect();
        v.sort_by_key(|s| std::cmp::Reverse(s.elem.size_bytes()));
        v
    }

    pub fn param(&self, name: &str) -> Option<&KernelParam> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Whether the program computes in `long` here: a `long` scalar parameter, or a `long`
    /// variable or loop counter of its own. Then its grid and array indices may pass 2^31, and
    /// the index arithmetic the tool adds (a merged block's `2 * blockIdx.x`, a tile's corner
    /// `blockIdx.x * B`) must be done in `long` as well.
    pub fn computes_in_long(&self) -> bool {
        let own = |name: &str| !crate::names::is_internal(name);
        let mut long = self.params.iter().any(|p| matches!(p.kind, KernelParamKind::Scalar(ScalarType::Long)));
        crate::strategy::walk::walk_stmts(&self.body, &mut |s| match &s.kind {
            StmtKind::Decl { ty: ScalarType::Long, vars } => long |= vars.iter().any(|d| own(&d.name.name)),
            StmtKind::For(l) | StmtKind::MetaFor(l) => long |= l.ty == ScalarType::Long && own(&l.var.name),
            _ => {}
        });
        long
    }
}

fn decl(ty: ScalarType, name: &str, init: Expr) -> Stmt {
    Stmt { kind: StmtKind::Decl { ty, vars: vec![Declarator { name: ident(name), init }] }, span: Span::default() }
}
