//! Caching in shared memory (the paper's fourth strategy): every thread block stages the part
//! of each array named by `cache(...)` that it touches in a shared-memory tile.
//!
//! Contract. [`stage`] turns a logical kernel (its `cache` list set) into the code that runs:
//! 1. The *scope* is the schedule's body inside the serial loops between the grid and block
//!    counters (matrix multiplication's `t`), so tiles are refilled once per iteration.
//! 2. An `if` whose condition reads only parameters (uniform over the launch, like Jacobi's
//!    `t % 2`), or, with no loop between the groups, grid counters as well (uniform over a
//!    block, like a triangle's `w == v`), splits the scope into *versions*, one per branch,
//!    each with its own tiles, planned under the conditions that choose it; versions share
//!    the shared-memory block, so the footprint is the larger version's.
//! 3. In a version, each access `X[f]` is modelled (the access model) and split into a *base*
//!    (terms free of the thread index and the scope's loop counters) and an affine *local*
//!    part; accesses with the same base share a tile whose extent, per dimension, is the range
//!    of the local parts over the block (`2*s*B + 2` elements for Jacobi: two tiles of
//!    `s*B + 2` and `s*B`). A one-dimensional array indexed `P*M + Q` with `0 <= Q < M` proved
//!    is read as `[P][Q]`, so transposition's `c[i*N + j]` tile is `B0 x s*B1`.
//! 4. Code: tiles that are read are loaded cooperatively (all threads, row-major over the
//!    tile, clipped to the array's bounds), then a barrier, the body with every access of a
//!    cached array rewritten to its tile, a barrier, and the write-back: each thread replays
//!    its own writes (the same loops, guards and subscripts) storing the tile's final value,
//!    so exactly the elements the original writes are written. Inside a serial loop a final
//!    barrier protects the tiles from the next iteration's loads. A body that does nothing
//!    unless a condition on the block holds (pure declarations, then `if (w < v + 1)` over the
//!    grid counters) is staged inside that condition, so idle blocks load nothing (and read
//!    nothing a working block writes).
//!
//! Safety (checked with Z3 per array and version; `unknown` refuses): (a) no two distinct
//! threads, in any blocks, touch an element that one of them writes; (b) no thread writes an
//! element through one tile that it accesses through another; (c) no element a block loads
//! (the box, within the array and the footprint) is one a thread of another block writes, in
//! any version. Under (a) and (b) every read sees the value the original would, and
//! write-back stores what the original stored; (c) keeps the loads of elements the block
//! never uses (their values are unused) from racing with other blocks. A guard that bounds a
//! thread index narrows the box (`if (u < B - 1) ... a[i + 1]`).
//! An array that cannot be modelled (a subscript that is not a polynomial, a non-affine local
//! part, a range Z3 cannot order) or fails a check is not cached, and the reason is returned.

mod emit;
mod plan;
mod safety;
mod versions;
mod walk;

use super::base_context;
use plan::*;
use safety::*;
use versions::*;
use walk::*;
use crate::access::{assigned_scalars, builtin_of_var, builtin_var, Access, Collector, Env};
use crate::emit::cuda::poly_expr;
use crate::frontend::ast::*;
use crate::strategy::syntax::{bin, e, ident, stmt as st};
use crate::frontend::model::KernelFunction;
use crate::frontend::source::Span;
use crate::kernel::{Kernel, KernelParamKind, SharedArray};
use constraints::solver::{Backend, CheckResult, Implication};
use constraints::{Constraint, Domain, Poly, Rational, System, Var};
use std::collections::{BTreeMap, BTreeSet};

/// The most uniform conditions a scope is split on (2^3 versions at most).
const MAX_SPLITS: usize = 3;
/// Spans given to cached arrays' subscripted expressions start here, apart from source spans.
const LABEL_BASE: usize = 1 << 40;

/// The outcome of staging: the code that runs, which arrays it caches, and why others are not.
#[derive(Clone, Debug)]
pub struct Staged {
    pub kernel: Kernel,
    pub cached: Vec<String>,
    pub refused: Vec<(String, String)>,
}

fn var(name: &str) -> Expr {
    e(ExprKind::Var(name.to_string()))
}

fn long_decl(name: &str, init: Expr) -> Stmt {
    st(StmtKind::Decl { ty: ScalarType::Long, vars: vec![Declarator { name: ident(name), init }] })
}

/// The staged kernel, or the kernel unchanged (with the reasons) when nothing can be cached.
pub fn stage(function: &KernelFunction, kernel: &Kernel, backend: &Backend) -> Result<Staged, String> {
    let mut plain = kernel.clone();
    plain.cache.clear();
    let refuse_all = |why: &str| Staged { kernel: plain.clone(), cached: Vec::new(), refused: kernel.cache.iter().map(|a| (a.clone(), why.to_string())).collect() };
    if kernel.cache.is_empty() {
        return Ok(refuse_all(""));
    }
    let Some(frame) = Frame::new(function, kernel, backend) else {
        return Ok(refuse_all("the kernel's body does not have the schedule's shape"));
    };
    // On the grid counters too where no loop lies between the groups: a block that takes a
    // branch without the cached array's accesses then stages none of it (a triangle's
    // `if (w == v) a[i] = ...; else ...`: the other blocks read `a` while block (v, v) wrote
    // it). Inside such loops the barriers' count per iteration would depend on the block,
    // which the verifier's phases do not model.
    let splitting_on = if kernel.between == 0 { &frame.block_uniform } else { &frame.uniform };
    let versions = split_versions(&frame.scope, splitting_on, &kernel.cache, MAX_SPLITS);

    // Plan every version once. Arrays are planned independently, so an array refused in any
    // version is simply dropped from all of them; the others' proofs stand.
    let mut plans: Vec<Plan> = versions.leaves().into_iter().map(|(path, body)| frame.plan(body, &path, &kernel.cache)).collect::<Result<_, _>>()?;
    let mut refused: Vec<(String, String)> = Vec::new();
    for (a, why) in plans.iter().flat_map(|p| &p.refused) {
        if !refused.iter().any(|(x, _)| x == a) {
            refused.push((a.clone(), why.clone()));
        }
    }
    // Shared slots: the k-th tile of each element type, across versions, shares slot k. The
    // launch allocates them from the parameters and derived scalars: a slot whose size reads
    // a quotient the model made up (`k < n / B`) cannot be allocated there, and the arrays it
    // holds are refused (which may change the other slots). A derived scalar is the tree's
    // to put in the parameters (`tree::derived`).
    let slots = loop {
        for plan in plans.iter_mut() {
            plan.tiles.retain(|t| !refused.iter().any(|(a, _)| *a == t.array));
        }
        if plans.iter().all(|p| p.tiles.is_empty()) {
            let mut s = refuse_all("no access to it in the kernel");
            for (a, why) in s.refused.iter_mut() {
                if let Some((_, r)) = refused.iter().find(|(x, _)| x == a) {
                    *why = r.clone();
                }
            }
            return Ok(s);
        }
        let slots = frame.slots(&plans)?;
        let mut unallocatable = false;
        for (slot, users) in slots.arrays.iter().zip(&slots.users) {
            let elements = slot.elements();
            let vars = elements.vars();
            // What the tree cannot key on either: a counter of a loop around the schedule
            // (a tile bounded by `k <= t + it`), or a derived scalar with no polynomial bound
            // (`tree::derived`; `k <= t + nb` with `nb = N / TS`).
            let why = if vars.iter().any(|v| crate::names::is_internal(v.name())) {
                Some("the size of its tile over a block reads a quotient or a remainder of the subscripts, which the launch cannot compute: bound the loop by a parameter or a scalar defined before the schedule".to_string())
            } else if let Some(v) = vars.iter().find(|v| kernel.host_loops.iter().any(|l| l.var == v.name())) {
                Some(format!("the size of its tile over a block reads `{}`, the counter of a loop around the schedule, which the tree's constraints on shared memory cannot name: bound the loop by a parameter or a scalar defined before the loop", v.name()))
            } else {
                crate::tree::derived::in_parameters(&elements, function, &frame.collector.context, backend).err()
            };
            if let Some(why) = why {
                for a in users {
                    if refused.iter().any(|(x, _)| x == a) {
                        continue;
                    }
                    refused.push((a.clone(), why.clone()));
                    unallocatable = true;
                }
            }
        }
        if !unallocatable {
            break slots;
        }
    };
    let mut leaves = plans.iter().enumerate().map(|(i, p)| frame.emit_version(i, p, &slots));
    let staged_scope = versions.rebuild(&mut leaves).ok_or("a version could not be emitted")??;
    let mut out = plain.clone();
    frame.replace_scope(&mut out.body, staged_scope);
    out.shared = slots.arrays.clone();
    out.padded_columns = plans.iter().any(|p| p.tiles.iter().any(|t| t.column_pad > 0));
    let cached: Vec<String> = kernel.cache.iter().filter(|a| plans.iter().any(|p| p.tiles.iter().any(|t| t.array == **a))).cloned().collect();
    Ok(Staged { kernel: out, cached, refused })
}

// ---------------------------------------------------------------------------------------------
// The frame: what holds around the scope.

struct Frame<'a> {
    kernel: &'a Kernel,
    backend: &'a Backend,
    /// The collector after the prologue and the between loops (their facts in its context).
    collector: Collector<'a>,
    /// `collector` after the whole scope, every version: the writes other blocks make, which
    /// no block's loads may reach (`safety::check_boxes`).
    scope_collector: Collector<'a>,
    env: Env,
    guards: Vec<Constraint>,
    /// The statements of the scope.
    scope: Vec<Stmt>,
    /// Names whose value is the same for every thread of the launch in one scope iteration
    /// (parameters, the between loops' counters): conditions on them split versions.
    uniform: BTreeSet<String>,
    /// `uniform` and the grid counters: the same for every thread of a block (a guard on them
    /// encloses the staging, so that idle blocks stage nothing: `emit::block_guard`).
    block_uniform: BTreeSet<String>,
    /// Array element types and extents, by name.
    arrays: BTreeMap<String, (ScalarType, Vec<Poly>)>,
    /// The program computes in `long` ([`Kernel::computes_in_long`]): the tiles' corners are
    /// computed in `long` too.
    long_indices: bool,
}

/// The statement list inside `depth` nested loops, each the only statement of its parent.
fn scope_of(stmts: &mut Vec<Stmt>, depth: usize) -> Option<&mut Vec<Stmt>> {
    if depth == 0 {
        return Some(stmts);
    }
    if stmts.len() != 1 {
        return None;
    }
    match &mut stmts[0].kind {
        StmtKind::For(l) => match &mut l.body.kind {
            StmtKind::Block(items) => scope_of(items, depth - 1),
            _ => None,
        },
        _ => None,
    }
}

fn between_loops(stmts: &[Stmt], depth: usize, out: &mut Vec<ForLoop>) -> bool {
    if depth == 0 {
        return true;
    }
    match stmts {
        [Stmt { kind: StmtKind::For(l), .. }] => {
            out.push(l.clone());
            match &l.body.kind {
                StmtKind::Block(items) => between_loops(items, depth - 1, out),
                _ => false,
            }
        }
        _ => false,
    }
}

fn thread_var(d: usize) -> String {
    builtin_var(Builtin::ThreadIdx(d as u8))
}

fn block_var(d: usize) -> String {
    builtin_var(Builtin::BlockIdx(d as u8))
}

impl<'a> Frame<'a> {
    fn new(function: &'a KernelFunction, kernel: &'a Kernel, backend: &'a Backend) -> Option<Frame<'a>> {
        let prologue = kernel.grid.len() + kernel.block.len();
        if kernel.body.len() < prologue || !kernel.body[..prologue].iter().all(|s| matches!(s.kind, StmtKind::Decl { .. })) {
            return None;
        }
        let mut rest = kernel.body[prologue..].to_vec();
        let mut between = Vec::new();
        if !between_loops(&rest, kernel.between, &mut between) {
            return None;
        }
        let scope = scope_of(&mut rest, kernel.between)?.clone();

        let mut ctx = base_context(function);
        kernel.assumptions.iter().for_each(|c| ctx.add(c.clone()));
        for p in &kernel.params {
            ctx.set_domain(Var::new(&p.name), Domain::integer());
        }
        let mut collector = Collector::new(backend, ctx).floating_scalars_of(kernel);
        let mut env = Env::new();
        let mut guards: Vec<Constraint> = Vec::new();
        for h in &kernel.host_loops {
            bound_counter(&mut collector, &h.var, &h.lo, &h.hi, h.inclusive, &env, &mut guards);
        }
        collector.stmts(&kernel.body[..prologue], &mut env, &guards);
        // Threads of a block: 0 <= threadIdx.d < block extent d.
        for (d, extent) in kernel.block.iter().enumerate() {
            let t = Poly::var(&thread_var(d));
            collector.context.set_domain(Var::new(&thread_var(d)), Domain::integer());
            collector.context.add(Constraint::ge(&t, &Poly::zero()));
            collector.context.add(Constraint::lt(&t, extent));
        }
        // Blocks of the grid: 0 <= blockIdx.d < grid extent d, with the host scalars' definitions
        // the extents name (`dim = (N - 2) / (B * s)`), as the verifier's launch model has them.
        // Without the upper bound, a ping-pong stencil guarded only by its grid was refused.
        // Integer scalars only: the two-thread systems take every variable as an integer, and
        // `float half = N * 0.5f` would then claim `N` even.
        for d in function.derived.iter().filter(|d| d.ty.is_integer()) {
            if let Some(value) = collector.poly(&d.value, &Env::new(), &[]) {
                collector.context.add(Constraint::eq(&Poly::var(&d.name), &value));
            }
        }
        for d in 0..kernel.grid.len() {
            collector.context.set_domain(Var::new(&block_var(d)), Domain::integer());
            collector.context.add(Constraint::ge(&Poly::var(&block_var(d)), &Poly::zero()));
            if let Some(extent) = collector.poly(&kernel.grid[d], &Env::new(), &[]) {
                collector.context.add(Constraint::lt(&Poly::var(&block_var(d)), &extent));
            }
        }
        let mut uniform: BTreeSet<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
        for l in &between {
            let env_before = env.clone();
            env.insert(l.var.name.clone(), Some(Poly::var(&l.var.name)));
            bound_counter(&mut collector, &l.var.name, &l.lo, &l.hi, l.inclusive, &env_before, &mut guards);
            uniform.insert(l.var.name.clone());
        }
        let mut block_uniform = uniform.clone();
        for s in &kernel.body[..kernel.grid.len()] {
            if let StmtKind::Decl { vars, .. } = &s.kind {
                block_uniform.extend(vars.iter().map(|d| d.name.name.clone()));
            }
        }
        let mut arrays = BTreeMap::new();
        for p in &kernel.params {
            if let KernelParamKind::Array { elem, extents, .. } = &p.kind {
                arrays.insert(p.name.clone(), (*elem, extents.clone()));
            }
        }
        let mut scope_collector = Collector::new(backend, collector.context.clone());
        scope_collector.aux_defs = collector.aux_defs.clone();
        scope_collector.floating = collector.floating.clone();
        scope_collector.stmts(&scope, &mut env.clone(), &guards);
        Some(Frame { kernel, backend, collector, scope_collector, env, guards, scope, uniform, block_uniform, arrays, long_indices: kernel.computes_in_long() })
    }

    fn replace_scope(&self, body: &mut Vec<Stmt>, new_scope: Vec<Stmt>) {
        let prologue = self.kernel.grid.len() + self.kernel.block.len();
        let mut rest = body.split_off(prologue);
        if let Some(s) = scope_of(&mut rest, self.kernel.between) {
            *s = new_scope;
        }
        body.extend(rest);
    }

    fn proves(&self, ctx: &System, c: &Constraint) -> bool {
        c.truth_if_constant() == Some(true) || self.backend.unsat_over_reals(&ctx.clone().with(c.negate())) || matches!(self.backend.implies(ctx, c), Implication::Proved)
    }
}

fn bound_counter(col: &mut Collector, name: &str, lo: &Expr, hi: &Expr, inclusive: bool, env: &Env, guards: &mut Vec<Constraint>) {
    let t = Poly::var(name);
    col.context.set_domain(Var::new(name), Domain::integer());
    if let Some(lo) = col.poly(lo, env, guards) {
        guards.push(Constraint::ge(&t, &lo));
    }
    if let Some(hi) = col.poly(hi, env, guards) {
        guards.push(if inclusive { Constraint::le(&t, &hi) } else { Constraint::lt(&t, &hi) });
    }
}
