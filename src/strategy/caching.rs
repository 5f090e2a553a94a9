//! Caching in shared memory (the paper's fourth strategy): every thread block stages the part
//! of each array named by `cache(...)` that it touches in a shared-memory tile.
//!
//! Contract. [`stage`] turns a logical kernel (its `cache` list set) into the code that runs:
//! 1. The *scope* is the schedule's body inside the serial loops between the grid and block
//!    counters (matrix multiplication's `t`), so tiles are refilled once per iteration.
//! 2. An `if` whose condition reads only parameters (uniform over the launch, like Jacobi's
//!    `t % 2`) splits the scope into *versions*, one per branch, each with its own tiles;
//!    versions share the shared-memory block, so the footprint is the larger version's.
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
//!    barrier protects the tiles from the next iteration's loads.
//!
//! Safety (checked with Z3 per array and version; `unknown` refuses): (a) no two distinct
//! threads, in any blocks, touch an element that one of them writes; (b) no thread writes an
//! element through one tile that it accesses through another. Under (a) and (b) every read
//! sees the value the original would, and write-back stores what the original stored. Loads
//! may read elements of the tile's box that the block never uses (their values are unused).
//! An array that cannot be modelled (a subscript that is not a polynomial, a non-affine local
//! part, a range Z3 cannot order) or fails a check is not cached, and the reason is returned.

use super::base_context;
use crate::access::{assigned_scalars, Access, Collector, Env};
use crate::emit::cuda::poly_expr;
use crate::frontend::ast::*;
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

fn e(kind: ExprKind) -> Expr {
    Expr::new(kind, Span::default())
}

fn st(kind: StmtKind) -> Stmt {
    Stmt { kind, span: Span::default() }
}

fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    e(ExprKind::Binary(op, Box::new(a), Box::new(b)))
}

fn ident(name: &str) -> Ident {
    Ident { name: name.to_string(), span: Span::default() }
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
    let versions = split_versions(&frame.scope, &frame.uniform, &kernel.cache, MAX_SPLITS);

    // Plan every version; an array is cached only when every version can cache it.
    let mut candidates: Vec<String> = kernel.cache.clone();
    let mut refused: Vec<(String, String)> = Vec::new();
    let mut plans: Vec<Plan> = Vec::new();
    loop {
        plans.clear();
        let mut failed: Option<(String, String)> = None;
        for body in versions.leaves() {
            let plan = frame.plan(body, &candidates)?;
            if let Some((a, why)) = plan.refused.first() {
                failed = Some((a.clone(), why.clone()));
                break;
            }
            plans.push(plan);
        }
        match failed {
            Some((a, why)) => {
                candidates.retain(|x| *x != a);
                refused.push((a, why));
            }
            None => break,
        }
    }
    if plans.iter().all(|p| p.tiles.is_empty()) {
        let mut s = refuse_all("no access to it in the kernel");
        s.refused = kernel.cache.iter().map(|a| (a.clone(), refused.iter().find(|r| r.0 == *a).map_or("no access to it in the kernel".to_string(), |r| r.1.clone()))).collect();
        return Ok(s);
    }

    // Shared slots: the k-th tile of each element type, across versions, shares slot k.
    let slots = frame.slots(&plans)?;
    let mut leaves = plans.iter().enumerate().map(|(i, p)| frame.emit_version(i, p, &slots));
    let staged_scope = versions.rebuild(&mut leaves).ok_or("a version could not be emitted")??;
    let mut out = plain.clone();
    frame.replace_scope(&mut out.body, staged_scope);
    out.shared = slots.arrays.clone();
    let cached: Vec<String> = candidates.into_iter().filter(|a| plans.iter().any(|p| p.tiles.iter().any(|t| t.array == *a))).collect();
    Ok(Staged { kernel: out, cached, refused })
}

// ---------------------------------------------------------------------------------------------
// The frame: what holds around the scope.

struct Frame<'a> {
    kernel: &'a Kernel,
    backend: &'a Backend,
    /// The collector after the prologue and the between loops (their facts in its context).
    collector: Collector<'a>,
    env: Env,
    guards: Vec<Constraint>,
    /// The statements of the scope.
    scope: Vec<Stmt>,
    /// Names whose value is the same for every thread of a block in one scope iteration.
    uniform: BTreeSet<String>,
    /// Array element types and extents, by name.
    arrays: BTreeMap<String, (ScalarType, Vec<Poly>)>,
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
    format!("threadIdx_{}", ["x", "y", "z"][d])
}

fn block_var(d: usize) -> String {
    format!("blockIdx_{}", ["x", "y", "z"][d])
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
        for p in &kernel.params {
            ctx.set_domain(Var::new(&p.name), Domain::integer());
        }
        let mut collector = Collector::new(backend, ctx);
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
        for d in 0..kernel.grid.len() {
            collector.context.set_domain(Var::new(&block_var(d)), Domain::integer());
            collector.context.add(Constraint::ge(&Poly::var(&block_var(d)), &Poly::zero()));
        }
        let mut uniform: BTreeSet<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
        for l in &between {
            let env_before = env.clone();
            env.insert(l.var.name.clone(), Some(Poly::var(&l.var.name)));
            bound_counter(&mut collector, &l.var.name, &l.lo, &l.hi, l.inclusive, &env_before, &mut guards);
            uniform.insert(l.var.name.clone());
        }
        let mut arrays = BTreeMap::new();
        for p in &kernel.params {
            if let KernelParamKind::Array { elem, extents, .. } = &p.kind {
                arrays.insert(p.name.clone(), (*elem, extents.clone()));
            }
        }
        Some(Frame { kernel, backend, collector, env, guards, scope, uniform, arrays })
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
        c.truth_if_constant() == Some(true) || matches!(self.backend.implies(ctx, c), Implication::Proved)
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

// ---------------------------------------------------------------------------------------------
// Versions: the scope split on uniform conditions.

enum Versions {
    One(Vec<Stmt>),
    Split(Expr, Box<Versions>, Box<Versions>),
}

impl Versions {
    fn leaves(&self) -> Vec<&Vec<Stmt>> {
        match self {
            Versions::One(b) => vec![b],
            Versions::Split(_, t, f) => {
                let mut v = t.leaves();
                v.extend(f.leaves());
                v
            }
        }
    }

    /// The scope with each version's body replaced by the next emitted one, in leaf order.
    fn rebuild(&self, emitted: &mut dyn Iterator<Item = Result<Vec<Stmt>, String>>) -> Option<Result<Vec<Stmt>, String>> {
        match self {
            Versions::One(_) => emitted.next(),
            Versions::Split(cond, t, f) => {
                let t = match t.rebuild(emitted)? {
                    Ok(t) => t,
                    Err(x) => return Some(Err(x)),
                };
                let f = match f.rebuild(emitted)? {
                    Ok(f) => f,
                    Err(x) => return Some(Err(x)),
                };
                Some(Ok(vec![st(StmtKind::If {
                    cond: cond.clone(),
                    then_branch: Box::new(st(StmtKind::Block(t))),
                    else_branch: Some(Box::new(st(StmtKind::Block(f)))),
                })]))
            }
        }
    }
}

fn mentions_array(s: &Stmt, arrays: &[String]) -> bool {
    let mut found = false;
    walk_exprs(s, &mut |x| {
        if let ExprKind::Index { array, .. } = &x.kind {
            found |= arrays.contains(&array.name);
        }
    });
    found
}

fn declared_names(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    fn walk(s: &Stmt, out: &mut BTreeSet<String>) {
        match &s.kind {
            StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| {
                out.insert(d.name.name.clone());
            }),
            StmtKind::Block(items) => items.iter().for_each(|x| walk(x, out)),
            StmtKind::If { then_branch, else_branch, .. } => {
                walk(then_branch, out);
                if let Some(x) = else_branch {
                    walk(x, out);
                }
            }
            StmtKind::For(l) => {
                out.insert(l.var.name.clone());
                walk(&l.body, out);
            }
            _ => {}
        }
    }
    stmts.iter().for_each(|s| walk(s, &mut out));
    out
}

/// A condition every thread evaluates alike: only uniform names, no array, no CUDA index.
fn is_uniform(cond: &Expr, uniform: &BTreeSet<String>, local: &BTreeSet<String>) -> bool {
    let mut ok = true;
    walk_expr(cond, &mut |x| match &x.kind {
        ExprKind::Var(n) => ok &= uniform.contains(n) && !local.contains(n),
        ExprKind::Index { .. } | ExprKind::Builtin(_) | ExprKind::Call(..) => ok = false,
        _ => {}
    });
    ok
}

fn split_versions(scope: &[Stmt], uniform: &BTreeSet<String>, cache: &[String], splits_left: usize) -> Versions {
    if splits_left == 0 {
        return Versions::One(scope.to_vec());
    }
    let local = declared_names(scope);
    match split_first(scope, uniform, &local, cache) {
        Some((cond, t, f)) => Versions::Split(
            cond,
            Box::new(split_versions(&t, uniform, cache, splits_left - 1)),
            Box::new(split_versions(&f, uniform, cache, splits_left - 1)),
        ),
        None => Versions::One(scope.to_vec()),
    }
}

type Split = (Expr, Vec<Stmt>, Vec<Stmt>);

fn split_first(stmts: &[Stmt], uniform: &BTreeSet<String>, local: &BTreeSet<String>, cache: &[String]) -> Option<Split> {
    for (i, s) in stmts.iter().enumerate() {
        if let Some((c, t, f)) = split_stmt(s, uniform, local, cache) {
            let (mut tv, mut fv) = (stmts.to_vec(), stmts.to_vec());
            tv[i] = t;
            fv[i] = f;
            return Some((c, tv, fv));
        }
    }
    None
}

fn split_stmt(s: &Stmt, uniform: &BTreeSet<String>, local: &BTreeSet<String>, cache: &[String]) -> Option<(Expr, Stmt, Stmt)> {
    let wrap = |kind: StmtKind| Stmt { kind, span: s.span };
    match &s.kind {
        StmtKind::If { cond, then_branch, else_branch } if is_uniform(cond, uniform, local) && mentions_array(s, cache) => {
            let f = else_branch.as_ref().map_or(st(StmtKind::Empty), |x| (**x).clone());
            Some((cond.clone(), (**then_branch).clone(), f))
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            if let Some((c, t, f)) = split_stmt(then_branch, uniform, local, cache) {
                let mk = |b: Stmt| wrap(StmtKind::If { cond: cond.clone(), then_branch: Box::new(b), else_branch: else_branch.clone() });
                return Some((c, mk(t), mk(f)));
            }
            let (c, t, f) = split_stmt(else_branch.as_ref()?, uniform, local, cache)?;
            let mk = |b: Stmt| wrap(StmtKind::If { cond: cond.clone(), then_branch: then_branch.clone(), else_branch: Some(Box::new(b)) });
            Some((c, mk(t), mk(f)))
        }
        StmtKind::Block(items) => {
            let (c, t, f) = split_first(items, uniform, local, cache)?;
            Some((c, wrap(StmtKind::Block(t)), wrap(StmtKind::Block(f))))
        }
        StmtKind::For(l) => {
            let (c, t, f) = split_stmt(&l.body, uniform, local, cache)?;
            let mk = |b: Stmt| wrap(StmtKind::For(ForLoop { body: Box::new(b), ..l.clone() }));
            Some((c, mk(t), mk(f)))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Expression and statement walkers.

fn walk_expr(x: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(x);
    match &x.kind {
        ExprKind::Index { indices, .. } => indices.iter().for_each(|i| walk_expr(i, f)),
        ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => walk_expr(a, f),
        ExprKind::Binary(_, a, b) => {
            walk_expr(a, f);
            walk_expr(b, f);
        }
        ExprKind::Cond(c, a, b) => {
            walk_expr(c, f);
            walk_expr(a, f);
            walk_expr(b, f);
        }
        ExprKind::Call(_, args) => args.iter().for_each(|a| walk_expr(a, f)),
        _ => {}
    }
}

fn walk_exprs(s: &Stmt, f: &mut dyn FnMut(&Expr)) {
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| walk_expr(&d.init, f)),
        StmtKind::Assign { target, value, .. } => {
            walk_expr(target, f);
            walk_expr(value, f);
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            walk_expr(cond, f);
            walk_exprs(then_branch, f);
            if let Some(x) = else_branch {
                walk_exprs(x, f);
            }
        }
        StmtKind::Block(items) => items.iter().for_each(|x| walk_exprs(x, f)),
        StmtKind::For(l) => {
            walk_expr(&l.lo, f);
            walk_expr(&l.hi, f);
            walk_exprs(&l.body, f);
        }
        _ => {}
    }
}

fn map_expr(x: &mut Expr, f: &mut dyn FnMut(&mut Expr)) {
    match &mut x.kind {
        ExprKind::Index { indices, .. } => indices.iter_mut().for_each(|i| map_expr(i, f)),
        ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => map_expr(a, f),
        ExprKind::Binary(_, a, b) => {
            map_expr(a, f);
            map_expr(b, f);
        }
        ExprKind::Cond(c, a, b) => {
            map_expr(c, f);
            map_expr(a, f);
            map_expr(b, f);
        }
        ExprKind::Call(_, args) => args.iter_mut().for_each(|a| map_expr(a, f)),
        _ => {}
    }
    f(x);
}

fn map_stmt_exprs(s: &mut Stmt, f: &mut dyn FnMut(&mut Expr)) {
    match &mut s.kind {
        StmtKind::Decl { vars, .. } => vars.iter_mut().for_each(|d| map_expr(&mut d.init, f)),
        StmtKind::Assign { target, value, .. } => {
            map_expr(value, f);
            map_expr(target, f);
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            map_expr(cond, f);
            map_stmt_exprs(then_branch, f);
            if let Some(x) = else_branch {
                map_stmt_exprs(x, f);
            }
        }
        StmtKind::Block(items) => items.iter_mut().for_each(|x| map_stmt_exprs(x, f)),
        StmtKind::For(l) => {
            map_expr(&mut l.lo, f);
            map_expr(&mut l.hi, f);
            map_stmt_exprs(&mut l.body, f);
        }
        _ => {}
    }
}

/// Give every subscripted expression of a cached array its own span, so that an access of the
/// model can be traced back to the expression to rewrite.
fn label(body: &[Stmt], cache: &[String]) -> Vec<Stmt> {
    let mut next = LABEL_BASE;
    let mut out = body.to_vec();
    for s in out.iter_mut() {
        map_stmt_exprs(s, &mut |x| {
            if let ExprKind::Index { array, .. } = &x.kind {
                if cache.contains(&array.name) {
                    x.span = Span { start: next, end: next + 1 };
                    next += 1;
                }
            }
        });
    }
    out
}

fn loop_counters(stmts: &[Stmt]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    fn walk(s: &Stmt, out: &mut BTreeSet<String>) {
        match &s.kind {
            StmtKind::Block(items) => items.iter().for_each(|x| walk(x, out)),
            StmtKind::If { then_branch, else_branch, .. } => {
                walk(then_branch, out);
                if let Some(x) = else_branch {
                    walk(x, out);
                }
            }
            StmtKind::For(l) => {
                out.insert(l.var.name.clone());
                walk(&l.body, out);
            }
            _ => {}
        }
    }
    stmts.iter().for_each(|s| walk(s, &mut out));
    out
}

// ---------------------------------------------------------------------------------------------
// Planning one version: tiles and their safety.

/// One access of a cached array, read against its tile.
#[derive(Clone, Debug)]
struct TileAccess {
    span: Span,
    /// The local part of each tile dimension's index, less the tile's minimum.
    offset: Vec<Poly>,
    /// The index per tile dimension (after delinearisation), whole.
    index: Vec<Poly>,
    write: bool,
}

#[derive(Clone, Debug)]
struct Tile {
    array: String,
    elem: ScalarType,
    /// A one-dimensional array read as `[P][Q]`, `Q` in `[0, M)`: the modulus `M`.
    modulus: Option<Poly>,
    /// The tile's first element, per dimension (uniform over the block).
    origin: Vec<Poly>,
    extents: Vec<Poly>,
    accesses: Vec<TileAccess>,
}

impl Tile {
    fn elements(&self) -> Poly {
        self.extents.iter().fold(Poly::one(), |a, x| a * x)
    }
    fn read(&self) -> bool {
        self.accesses.iter().any(|a| !a.write)
    }
    /// The row-major position in the tile of an access.
    fn position(&self, acc: &TileAccess) -> Poly {
        let mut pos = Poly::zero();
        for (d, off) in acc.offset.iter().enumerate() {
            pos = pos * &self.extents[d] + off;
        }
        pos
    }
}

struct Plan {
    /// The version's body, its cached arrays' expressions labelled.
    body: Vec<Stmt>,
    tiles: Vec<Tile>,
    refused: Vec<(String, String)>,
    /// Auxiliary integers of the model (for writing tile positions as C).
    aux: BTreeMap<String, crate::access::AuxDef>,
}

/// Accesses sharing a tile: (modulus, base, and per access its span, local parts, index,
/// whether it writes, and its guards).
type Group = (Option<Poly>, Vec<Poly>, Vec<(Span, Vec<Poly>, Vec<Poly>, bool, Vec<Constraint>)>);

/// An access's dimensions after delinearisation: per dimension, its index polynomial.
struct Dims {
    modulus: Option<Poly>,
    index: Vec<Poly>,
}

impl Frame<'_> {
    fn plan(&self, body: &[Stmt], cache: &[String]) -> Result<Plan, String> {
        let body = label(body, cache);
        let mut col = Collector::new(self.backend, self.collector.context.clone());
        col.aux_defs = self.collector.aux_defs.clone();
        let mut env = self.env.clone();
        col.stmts(&body, &mut env, &self.guards);
        let counters = loop_counters(&body);
        let local = Locality::new(&counters, &col.aux_defs, self.kernel.block.len());
        let mut plan = Plan { body: body.clone(), tiles: Vec::new(), refused: Vec::new(), aux: col.aux_defs.clone() };
        for array in cache {
            let accesses: Vec<&Access> = col.accesses.iter().filter(|a| a.array == *array).collect();
            if accesses.is_empty() {
                continue;
            }
            match self.tiles_of(array, &accesses, &col, &local) {
                Ok(tiles) => match self.check_safety(&accesses, &tiles, &col, &local, &body) {
                    Ok(()) => plan.tiles.extend(tiles),
                    Err(why) => plan.refused.push((array.clone(), why)),
                },
                Err(why) => plan.refused.push((array.clone(), why)),
            }
        }
        Ok(plan)
    }

    fn tiles_of(&self, array: &str, accesses: &[&Access], col: &Collector, local: &Locality) -> Result<Vec<Tile>, String> {
        let (elem, extents) = self.arrays.get(array).cloned().ok_or_else(|| format!("`{array}` is not an array parameter"))?;
        // Group by (modulus, base); keep each access's local part.
        let mut groups: Vec<Group> = Vec::new();
        for a in accesses {
            let index: Vec<Poly> = a.indices.iter().cloned().collect::<Option<_>>().ok_or_else(|| format!("a subscript of `{array}` is not a polynomial"))?;
            let dims = self.delinearise(&index, &extents, a, col, local);
            let mut base = Vec::new();
            let mut parts = Vec::new();
            for p in &dims.index {
                let (b, l) = local.split(p);
                base.push(b);
                parts.push(l);
            }
            match groups.iter_mut().find(|g| g.0 == dims.modulus && g.1 == base) {
                Some(g) => g.2.push((a.span, parts, dims.index.clone(), a.write, a.guards.clone())),
                None => groups.push((dims.modulus, base, vec![(a.span, parts, dims.index.clone(), a.write, a.guards.clone())])),
            }
        }
        let ctx = &self.collector.context;
        let mut tiles = Vec::new();
        for (modulus, base, members) in groups {
            let rank = base.len();
            let mut lo: Vec<Option<Poly>> = vec![None; rank];
            let mut hi: Vec<Option<Poly>> = vec![None; rank];
            for (_, parts, _, _, guards) in &members {
                for d in 0..rank {
                    let (l, h) = local.range(&parts[d], guards, ctx, self).ok_or_else(|| format!("the range of `{array}`'s subscript `{}` over a block is not known", parts[d]))?;
                    lo[d] = Some(match lo[d].take() {
                        None => l,
                        Some(x) => self.order(&x, &l, ctx, true).ok_or_else(|| format!("cannot order `{x}` and `{l}`"))?,
                    });
                    hi[d] = Some(match hi[d].take() {
                        None => h,
                        Some(x) => self.order(&x, &h, ctx, false).ok_or_else(|| format!("cannot order `{x}` and `{h}`"))?,
                    });
                }
            }
            let lo: Vec<Poly> = lo.into_iter().map(|x| x.unwrap_or_else(Poly::zero)).collect();
            let hi: Vec<Poly> = hi.into_iter().map(|x| x.unwrap_or_else(Poly::zero)).collect();
            let extents: Vec<Poly> = (0..rank).map(|d| &hi[d] - &lo[d] + Poly::one()).collect();
            let origin: Vec<Poly> = (0..rank).map(|d| &base[d] + &lo[d]).collect();
            let accesses = members
                .into_iter()
                .map(|(span, parts, index, write, _)| TileAccess { span, offset: (0..rank).map(|d| &parts[d] - &lo[d]).collect(), index, write })
                .collect();
            tiles.push(Tile { array: array.to_string(), elem, modulus, origin, extents, accesses });
        }
        Ok(tiles)
    }

    /// `lo`/`hi` of two candidates: the smaller (`min`) or larger, when Z3 orders them.
    fn order(&self, a: &Poly, b: &Poly, ctx: &System, min: bool) -> Option<Poly> {
        if a == b {
            return Some(a.clone());
        }
        if let Some(d) = (a - b).as_constant() {
            let a_smaller = d <= Rational::from_integer(0.into());
            return Some(if a_smaller == min { a.clone() } else { b.clone() });
        }
        if self.proves(ctx, &Constraint::le(a, b)) {
            return Some(if min { a.clone() } else { b.clone() });
        }
        if self.proves(ctx, &Constraint::le(b, a)) {
            return Some(if min { b.clone() } else { a.clone() });
        }
        None
    }

    /// A one-dimensional subscript `P*M + Q` with a parameter `M` that divides the array's
    /// extent, `0 <= Q < M` proved and `P` varying within the block, read as two dimensions.
    fn delinearise(&self, index: &[Poly], extents: &[Poly], a: &Access, col: &Collector, local: &Locality) -> Dims {
        let plain = Dims { modulus: None, index: index.to_vec() };
        if index.len() != 1 || extents.len() != 1 {
            return plain;
        }
        let i = &index[0];
        let mut ctx = col.context.clone();
        a.guards.iter().for_each(|g| ctx.add(g.clone()));
        for m in i.vars() {
            // M must be a parameter dividing the extent (the array is then an [extent/M][M]).
            if !self.uniform.contains(m.name()) || local.is_local(m.name()) || !extents[0].terms().all(|(mono, _)| mono.exponent(&m) >= 1) {
                continue;
            }
            let mp = Poly::from_var(m.clone());
            let (mut p, mut q) = (Poly::zero(), Poly::zero());
            for (mono, c) in i.terms() {
                let t = Poly::term(c.clone(), mono.clone());
                if mono.exponent(&m) >= 1 {
                    let mut divided = Poly::constant(c.clone());
                    for (v, e) in mono.factors() {
                        let k = if *v == m { e - 1 } else { *e };
                        divided = divided * Poly::from_var(v.clone()).pow(k);
                    }
                    p = p + divided;
                } else {
                    q = q + t;
                }
            }
            if !p.vars().iter().any(|v| local.is_local(v.name())) {
                continue;
            }
            if self.proves(&ctx, &Constraint::ge(&q, &Poly::zero())) && self.proves(&ctx, &Constraint::lt(&q, &mp)) {
                return Dims { modulus: Some(mp), index: vec![p, q] };
            }
        }
        plain
    }
}

/// Which variables vary within a block: the thread indices, the scope's loop counters, and
/// auxiliary integers defined from them.
struct Locality {
    local: BTreeSet<String>,
    aux: BTreeMap<String, crate::access::AuxDef>,
}

impl Locality {
    fn new(counters: &BTreeSet<String>, aux: &BTreeMap<String, crate::access::AuxDef>, block_dims: usize) -> Locality {
        let mut local: BTreeSet<String> = counters.clone();
        local.extend((0..block_dims.max(3)).map(thread_var));
        // Auxiliaries are defined in order of need; iterate to a fixed point.
        loop {
            let before = local.len();
            for (name, def) in aux {
                if def.dividend.vars().iter().chain(def.divisor.vars().iter()).any(|v| local.contains(v.name())) {
                    local.insert(name.clone());
                }
            }
            if local.len() == before {
                break;
            }
        }
        Locality { local, aux: aux.clone() }
    }

    fn is_local(&self, name: &str) -> bool {
        self.local.contains(name)
    }

    /// (base, local part): the base holds the terms free of local variables, less constants.
    fn split(&self, p: &Poly) -> (Poly, Poly) {
        let (mut base, mut part) = (Poly::zero(), Poly::zero());
        for (m, c) in p.terms() {
            let t = Poly::term(c.clone(), m.clone());
            if !m.is_one() && !m.factors().iter().any(|(v, _)| self.is_local(v.name())) {
                base = base + t;
            } else {
                part = part + t;
            }
        }
        (base, part)
    }

    /// The range `[lo, hi]` of an affine local part, from its variables' bounds.
    fn range(&self, part: &Poly, guards: &[Constraint], ctx: &System, frame: &Frame) -> Option<(Poly, Poly)> {
        let (mut lo, mut hi) = (Poly::zero(), Poly::zero());
        for (m, c) in part.terms() {
            let locals: Vec<&(Var, u32)> = m.factors().iter().filter(|(v, _)| self.is_local(v.name())).collect();
            let coeff = Poly::term(c.clone(), m.clone());
            match locals.as_slice() {
                [] => {
                    lo = lo + &coeff;
                    hi = hi + &coeff;
                }
                [(v, 1)] => {
                    let k = coeff.substitute(v, &Poly::one());
                    let (vlo, vhi) = self.bounds(v.name(), guards, frame)?;
                    let sign = match k.as_constant() {
                        Some(c) => c >= Rational::from_integer(0.into()),
                        None if frame.proves(ctx, &Constraint::ge(&k, &Poly::zero())) => true,
                        None if frame.proves(ctx, &Constraint::le(&k, &Poly::zero())) => false,
                        None => return None,
                    };
                    let (a, b) = if sign { (vlo, vhi) } else { (vhi, vlo) };
                    lo = lo + &k * &a;
                    hi = hi + &k * &b;
                }
                _ => return None,
            }
        }
        Some((lo, hi))
    }

    /// A local variable's bounds `[lo, hi]`, free of local variables.
    fn bounds(&self, name: &str, guards: &[Constraint], frame: &Frame) -> Option<(Poly, Poly)> {
        if let Some(d) = ["x", "y", "z"].iter().position(|s| name == format!("threadIdx_{s}")) {
            let extent = frame.kernel.block.get(d)?;
            return Some((Poly::zero(), extent - &Poly::one()));
        }
        if let Some(def) = self.aux.get(name) {
            // A remainder lies in [0, d - 1]; a quotient's range is not tracked.
            return (!def.quotient && !def.divisor.vars().iter().any(|v| self.is_local(v.name()))).then(|| (Poly::zero(), &def.divisor - &Poly::one()));
        }
        let v = Var::new(name);
        let (mut lo, mut hi) = (None, None);
        for g in guards {
            let p = g.poly();
            let coeff = p.terms().find(|(m, _)| m.factors() == [(v.clone(), 1)]).map(|(_, c)| c.clone());
            let Some(c) = coeff else { continue };
            let rest = p - &Poly::term(c.clone(), constraints::poly::Monomial::var(v.clone()));
            if rest.vars().iter().any(|x| self.is_local(x.name())) || p.terms().any(|(m, _)| m.exponent(&v) > 0 && m.factors() != [(v.clone(), 1)]) {
                continue;
            }
            let one = Rational::from_integer(1.into());
            // c*v + rest REL 0 with c = +-1: v <= -rest, v < -rest, v >= rest, v > rest.
            use constraints::Rel;
            match (g.rel(), c == one, c == -one.clone()) {
                (Rel::Le, true, _) => hi = Some(-rest),
                (Rel::Lt, true, _) => hi = Some(-rest - Poly::one()),
                (Rel::Le, _, true) => lo = Some(rest),
                (Rel::Lt, _, true) => lo = Some(rest + Poly::one()),
                _ => {}
            }
        }
        Some((lo?, hi?))
    }
}

// ---------------------------------------------------------------------------------------------
// Safety.

fn rename_poly(p: &Poly, rename: &BTreeSet<String>) -> Poly {
    let mut out = p.clone();
    for v in p.vars() {
        if rename.contains(v.name()) {
            out = out.substitute(&v, &Poly::var(&format!("{}__2", v.name())));
        }
    }
    out
}

fn rename_constraint(c: &Constraint, rename: &BTreeSet<String>) -> Constraint {
    Constraint::new(rename_poly(c.poly(), rename), c.rel())
}

fn has_index(x: &Expr) -> bool {
    let mut found = false;
    walk_expr(x, &mut |y| found |= matches!(y.kind, ExprKind::Index { .. }));
    found
}

fn uses_any(x: &Expr, names: &BTreeSet<String>) -> bool {
    let mut found = false;
    walk_expr(x, &mut |y| {
        if let ExprKind::Var(n) = &y.kind {
            found |= names.contains(n);
        }
    });
    found
}

impl Frame<'_> {
    /// The system where access `a` (one thread) and access `b` (another, its `rename`d
    /// variables primed) touch the same element.
    fn pair_system(&self, col: &Collector, a: &Access, b: &Access, rename: &BTreeSet<String>) -> System {
        let mut sys = col.context.clone();
        for c in col.context.constraints() {
            if c.vars().iter().any(|v| rename.contains(v.name())) {
                sys.add(rename_constraint(c, rename));
            }
        }
        for (v, d) in col.context.domains().clone() {
            if rename.contains(v.name()) {
                sys.set_domain(Var::new(&format!("{}__2", v.name())), d);
            }
        }
        a.guards.iter().for_each(|g| sys.add(g.clone()));
        b.guards.iter().for_each(|g| sys.add(rename_constraint(g, rename)));
        for (x, y) in a.indices.iter().zip(&b.indices) {
            if let (Some(x), Some(y)) = (x, y) {
                sys.add(Constraint::eq(x, &rename_poly(y, rename)));
            }
        }
        for v in sys.vars() {
            if !sys.domains().contains_key(&v) {
                sys.set_domain(v, Domain::integer());
            }
        }
        sys
    }

    fn unsat(&self, sys: &System) -> bool {
        matches!(self.backend.check(sys), CheckResult::Unsat)
    }

    fn check_safety(&self, accesses: &[&Access], tiles: &[Tile], col: &Collector, local: &Locality, body: &[Stmt]) -> Result<(), String> {
        let array = &accesses[0].array;
        let writes: Vec<&Access> = accesses.iter().copied().filter(|a| a.write).collect();
        if writes.is_empty() {
            return Ok(());
        }
        // (a) Two distinct threads, in any blocks: every variable that is not a parameter is
        // primed; the threads differ in a first coordinate (blocks z, y, x, then threads).
        let mut everything: BTreeSet<String> = col.context.vars().iter().map(|v| v.name().to_string()).collect();
        for a in accesses {
            a.indices.iter().flatten().for_each(|p| everything.extend(p.vars().iter().map(|v| v.name().to_string())));
            a.guards.iter().for_each(|g| everything.extend(g.vars().iter().map(|v| v.name().to_string())));
        }
        let params: BTreeSet<String> = self.kernel.params.iter().map(|p| p.name.clone()).collect();
        let threads: BTreeSet<String> = everything.iter().filter(|v| !params.contains(*v)).cloned().collect();
        let mut coords: Vec<String> = (0..self.kernel.grid.len()).rev().map(block_var).collect();
        coords.extend((0..self.kernel.block.len()).rev().map(thread_var));
        let dims_of = |sp: Span| tiles.iter().flat_map(|t| &t.accesses).find(|x| x.span == sp).map(|x| x.index.clone());
        for w in &writes {
            for b in accesses {
                // One subscript, injective over the threads: distinct threads, distinct elements.
                let same = w.span == b.span || w.indices == b.indices;
                if same && dims_of(w.span).is_some_and(|d| self.injective(&d, &w.guards, local)) {
                    continue;
                }
                let sys = self.pair_system(col, w, b, &threads);
                for (i, c) in coords.iter().enumerate() {
                    let mut case = sys.clone();
                    for same in &coords[..i] {
                        case.add(Constraint::eq(&Poly::var(same), &Poly::var(&format!("{same}__2"))));
                    }
                    case.add(Constraint::ne(&Poly::var(c), &Poly::var(&format!("{c}__2"))));
                    if !self.unsat(&case) {
                        return Err(format!("two threads may touch the same element of `{array}`, one of them writing it (not proved otherwise)"));
                    }
                }
            }
        }
        // (b) One thread, two tiles: only the scope's loop counters (and what depends on them)
        // differ between the two accesses.
        let tile_of = |s: Span| tiles.iter().position(|t| t.accesses.iter().any(|x| x.span == s));
        let iteration: BTreeSet<String> = local.local.iter().filter(|v| !v.starts_with("threadIdx_")).cloned().collect();
        for w in &writes {
            for b in accesses {
                if tile_of(w.span) != tile_of(b.span) && !self.unsat(&self.pair_system(col, w, b, &iteration)) {
                    return Err(format!("a thread may write an element of `{array}` through one tile and access it through another"));
                }
            }
        }
        let spans: BTreeSet<Span> = writes.iter().map(|w| w.span).collect();
        replay(body, &|s| spans.contains(&s).then(|| e(ExprKind::Int(0))), &mut assigned_in(body)).map(|_| ())
    }
}

impl Frame<'_> {
    /// Whether an index (per dimension) takes distinct values for distinct threads, by the
    /// mixed-radix argument: in each dimension, `v1 + e1*(v2 + e2*(v3 + ...))` plus a uniform
    /// term, with `0 <= vi < ei` for all but the last, over disjoint variables that together
    /// determine the block and thread indices. No solver is needed, and none copes well with
    /// this nonlinear fact.
    fn injective(&self, dims: &[Poly], guards: &[Constraint], local: &Locality) -> bool {
        let params: BTreeSet<String> = self.kernel.params.iter().map(|p| p.name.clone()).collect();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for index in dims {
            // The coordinate variables and their coefficients (each of degree one in them).
            let mut coeffs: Vec<(String, Poly)> = Vec::new();
            for (m, c) in index.terms() {
                let coords: Vec<&(Var, u32)> = m.factors().iter().filter(|(v, _)| !params.contains(v.name())).collect();
                match coords.as_slice() {
                    [] => {}
                    [(v, 1)] => {
                        let k = Poly::term(c.clone(), m.clone()).substitute(v, &Poly::one());
                        match coeffs.iter_mut().find(|(n, _)| n == v.name()) {
                            Some((_, acc)) => *acc = &*acc + &k,
                            None => coeffs.push((v.name().to_string(), k)),
                        }
                    }
                    _ => return false,
                }
            }
            // Walk the radix: the unit coefficient first, then each next = previous * extent.
            let mut unit = Poly::one();
            let mut left = coeffs;
            while !left.is_empty() {
                let Some(i) = left.iter().position(|(_, k)| *k == unit) else { return false };
                let (v, _) = left.remove(i);
                if !seen.insert(v.clone()) {
                    return false;
                }
                if left.is_empty() {
                    break; // the most significant digit needs no upper bound
                }
                let Some((lo, hi)) = self.digit_range(&v, guards, local) else { return false };
                if !lo.is_zero() {
                    return false;
                }
                unit = unit * (hi + Poly::one());
            }
        }
        // The digits must pin down every block and thread index.
        let mut known = seen.clone();
        for (name, def) in &local.aux {
            if def.quotient {
                let r = local.aux.iter().find(|(_, d)| !d.quotient && d.dividend == def.dividend && d.divisor == def.divisor).map(|(n, _)| n);
                if let (Some(r), Some(x)) = (r, def.dividend.as_var()) {
                    if seen.contains(name) && seen.contains(r) {
                        known.insert(x.name().to_string());
                    }
                }
            }
        }
        (0..self.kernel.grid.len()).map(block_var).chain((0..self.kernel.block.len()).map(thread_var)).all(|c| known.contains(&c))
    }

    /// The range of a digit: thread indices, loop counters and remainders (`[0, e - 1]`).
    fn digit_range(&self, v: &str, guards: &[Constraint], local: &Locality) -> Option<(Poly, Poly)> {
        local.bounds(v, guards, self)
    }
}

fn assigned_in(body: &[Stmt]) -> BTreeSet<String> {
    body.iter().flat_map(assigned_scalars).collect()
}

/// The write-back: the body's control flow and integer definitions, with each write of a
/// staged element (`write_value` gives its tile expression) turned into a store of the tile's
/// final value; everything else dropped. Fails when a kept guard, bound or subscript depends
/// on array data or on a scalar the body assigns (`dropped`).
fn replay(stmts: &[Stmt], write_value: &dyn Fn(Span) -> Option<Expr>, dropped: &mut BTreeSet<String>) -> Result<Vec<Stmt>, String> {
    let data = |x: &Expr, dropped: &BTreeSet<String>| has_index(x) || uses_any(x, dropped);
    let mut out = Vec::new();
    for s in stmts {
        match &s.kind {
            StmtKind::Decl { ty, vars } => {
                let mut kept = Vec::new();
                for d in vars {
                    if ty.is_integer() && !data(&d.init, dropped) {
                        kept.push(d.clone());
                    } else {
                        dropped.insert(d.name.name.clone());
                    }
                }
                if !kept.is_empty() {
                    out.push(Stmt { kind: StmtKind::Decl { ty: *ty, vars: kept }, span: s.span });
                }
            }
            StmtKind::Assign { target, .. } => {
                if let ExprKind::Index { indices, .. } = &target.kind {
                    if let Some(v) = write_value(target.span) {
                        if indices.iter().any(|i| data(i, dropped)) {
                            return Err("a staged write's subscript depends on data the write-back cannot recompute".into());
                        }
                        out.push(Stmt { kind: StmtKind::Assign { target: target.clone(), op: AssignOp::Set, value: v }, span: s.span });
                    }
                }
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                let t = replay(std::slice::from_ref(then_branch), write_value, dropped)?;
                let f = match else_branch {
                    Some(x) => replay(std::slice::from_ref(x), write_value, dropped)?,
                    None => Vec::new(),
                };
                if t.is_empty() && f.is_empty() {
                    continue;
                }
                if data(cond, dropped) {
                    return Err("a staged write is guarded by a condition on data".into());
                }
                out.push(st(StmtKind::If {
                    cond: cond.clone(),
                    then_branch: Box::new(st(StmtKind::Block(t))),
                    else_branch: (!f.is_empty()).then(|| Box::new(st(StmtKind::Block(f)))),
                }));
            }
            StmtKind::For(l) => {
                let inner = replay(std::slice::from_ref(&l.body), write_value, dropped)?;
                if inner.is_empty() {
                    continue;
                }
                if data(&l.lo, dropped) || data(&l.hi, dropped) {
                    return Err("a loop around a staged write has bounds that depend on data".into());
                }
                out.push(st(StmtKind::For(ForLoop { body: Box::new(st(StmtKind::Block(inner))), ..l.clone() })));
            }
            StmtKind::Block(items) => {
                let inner = replay(items, write_value, dropped)?;
                if !inner.is_empty() {
                    out.push(st(StmtKind::Block(inner)));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Shared slots and code.

struct Slots {
    arrays: Vec<SharedArray>,
    /// Per plan, per tile: the slot's name.
    names: Vec<Vec<String>>,
}

impl Frame<'_> {
    fn slots(&self, plans: &[Plan]) -> Result<Slots, String> {
        // (element type, k) -> candidate sizes and the arrays whose tiles use it.
        let mut keys: Vec<(ScalarType, usize)> = Vec::new();
        let mut sizes: Vec<Vec<Poly>> = Vec::new();
        let mut users: Vec<BTreeSet<String>> = Vec::new();
        let mut per_plan: Vec<Vec<usize>> = Vec::new();
        for plan in plans {
            let mut count: BTreeMap<ScalarType, usize> = BTreeMap::new();
            let mut ids = Vec::new();
            for t in &plan.tiles {
                let k = count.entry(t.elem).or_insert(0);
                let key = (t.elem, *k);
                *k += 1;
                let id = match keys.iter().position(|x| *x == key) {
                    Some(i) => i,
                    None => {
                        keys.push(key);
                        sizes.push(Vec::new());
                        users.push(BTreeSet::new());
                        keys.len() - 1
                    }
                };
                sizes[id].push(t.elements());
                users[id].insert(t.array.clone());
                ids.push(id);
            }
            per_plan.push(ids);
        }
        let ctx = &self.collector.context;
        let mut names = Vec::new();
        let mut arrays = Vec::new();
        let mut per_array: BTreeMap<String, usize> = BTreeMap::new();
        for (id, (elem, _)) in keys.iter().enumerate() {
            // The largest size when Z3 orders them; otherwise their sum, which is enough.
            let mut size = sizes[id][0].clone();
            for s in &sizes[id][1..] {
                size = self.order(&size, s, ctx, false).unwrap_or_else(|| &size + s);
            }
            let name = if users[id].len() == 1 {
                let a = users[id].iter().next().cloned().unwrap_or_default();
                let n = per_array.entry(a.clone()).or_insert(0);
                *n += 1;
                format!("{a}_tile{}", *n - 1)
            } else {
                format!("metafork_tile{id}")
            };
            names.push(name.clone());
            arrays.push(SharedArray { name, elem: *elem, extents: vec![size] });
        }
        let names = per_plan.iter().map(|ids| ids.iter().map(|i| names[*i].clone()).collect()).collect();
        Ok(Slots { arrays, names })
    }

    /// A polynomial of the model as a C expression of the kernel's names.
    fn to_c(&self, p: &Poly, aux: &BTreeMap<String, crate::access::AuxDef>) -> Result<Expr, String> {
        let mut x = poly_expr(p)?;
        let mut failure = None;
        map_expr(&mut x, &mut |y| {
            let ExprKind::Var(n) = &y.kind else { return };
            let dims = ["x", "y", "z"];
            if let Some(d) = dims.iter().position(|s| *n == format!("threadIdx_{s}")) {
                y.kind = ExprKind::Builtin(Builtin::ThreadIdx(d as u8));
            } else if let Some(d) = dims.iter().position(|s| *n == format!("blockIdx_{s}")) {
                y.kind = ExprKind::Builtin(Builtin::BlockIdx(d as u8));
            } else if let Some(def) = aux.get(n) {
                match (self.to_c(&def.dividend, aux), self.to_c(&def.divisor, aux)) {
                    (Ok(a), Ok(b)) => y.kind = ExprKind::Binary(if def.quotient { BinOp::Div } else { BinOp::Rem }, Box::new(a), Box::new(b)),
                    (Err(m), _) | (_, Err(m)) => failure = Some(m),
                }
            }
        });
        match failure {
            Some(m) => Err(m),
            None => Ok(x),
        }
    }

    /// The linear thread index within the block, and the number of threads.
    fn thread_rank(&self) -> Result<(Expr, Expr), String> {
        let dims = self.kernel.block.len();
        let mut rank = e(ExprKind::Builtin(Builtin::ThreadIdx(dims as u8 - 1)));
        for d in (0..dims - 1).rev() {
            let extent = poly_expr(&self.kernel.block[d])?;
            rank = bin(BinOp::Add, bin(BinOp::Mul, rank, extent), e(ExprKind::Builtin(Builtin::ThreadIdx(d as u8))));
        }
        Ok((rank, poly_expr(&self.kernel.threads_per_block())?))
    }

    fn emit_version(&self, index: usize, plan: &Plan, slots: &Slots) -> Result<Vec<Stmt>, String> {
        let names = &slots.names[index];
        let aux = &plan.aux;
        let (rank, nthreads) = self.thread_rank()?;
        let mut out = Vec::new();
        // Loads: all threads, row-major over each tile that is read, within the array.
        for (t, slot) in plan.tiles.iter().zip(names) {
            if !t.read() {
                continue;
            }
            out.push(self.load_loop(t, slot, aux, &rank, &nthreads)?);
        }
        if plan.tiles.iter().any(Tile::read) {
            out.push(st(StmtKind::Barrier));
        }
        // The body, every access of a staged array rewritten to its tile.
        let mut at: BTreeMap<Span, Expr> = BTreeMap::new();
        for (t, slot) in plan.tiles.iter().zip(names) {
            for a in &t.accesses {
                let pos = self.to_c(&t.position(a), aux)?;
                at.insert(a.span, e(ExprKind::Index { array: ident(slot), indices: vec![pos] }));
            }
        }
        let mut body = plan.body.clone();
        for s in body.iter_mut() {
            map_stmt_exprs(s, &mut |x| {
                if let Some(r) = at.get(&x.span) {
                    if matches!(x.kind, ExprKind::Index { .. }) {
                        *x = r.clone();
                    }
                }
            });
        }
        out.extend(body);
        // Write-back: each thread stores the final value of what it wrote.
        let written: BTreeMap<Span, Expr> = plan
            .tiles
            .iter()
            .flat_map(|t| t.accesses.iter().filter(|a| a.write).map(|a| (a.span, at[&a.span].clone())))
            .collect();
        if !written.is_empty() {
            out.push(st(StmtKind::Barrier));
            out.extend(replay(&plan.body, &|s| written.get(&s).cloned(), &mut assigned_in(&plan.body))?);
        }
        if self.kernel.between > 0 && !plan.tiles.is_empty() {
            out.push(st(StmtKind::Barrier)); // the next iteration's loads overwrite the tiles
        }
        Ok(out)
    }

    /// `for (it = 0; it < ceil(n / T); it++) { e = it*T + rank; if (e < n) { ... } }`.
    fn load_loop(&self, t: &Tile, slot: &str, aux: &BTreeMap<String, crate::access::AuxDef>, rank: &Expr, nthreads: &Expr) -> Result<Stmt, String> {
        let n = poly_expr(&t.elements())?;
        let trips = bin(BinOp::Div, bin(BinOp::Sub, bin(BinOp::Add, n.clone(), nthreads.clone()), e(ExprKind::Int(1))), nthreads.clone());
        let mut inner = vec![long_decl("metafork_e", bin(BinOp::Add, bin(BinOp::Mul, var("metafork_it"), nthreads.clone()), rank.clone()))];
        let mut guarded = Vec::new();
        let r = t.extents.len();
        let mut stride = Poly::one();
        let mut coords = vec![Expr::new(ExprKind::Int(0), Span::default()); r];
        for d in (0..r).rev() {
            let pos = if stride.as_constant().is_some_and(|c| c == Rational::from_integer(1.into())) { var("metafork_e") } else { bin(BinOp::Div, var("metafork_e"), poly_expr(&stride)?) };
            let c = if d == 0 { pos } else { bin(BinOp::Rem, pos, poly_expr(&t.extents[d])?) };
            let name = format!("metafork_g{d}");
            guarded.push(long_decl(&name, bin(BinOp::Add, self.to_c(&t.origin[d], aux)?, c)));
            coords[d] = var(&name);
            stride = stride * &t.extents[d];
        }
        guarded.reverse();
        let (_, extents) = &self.arrays[&t.array];
        let within = |x: Expr, hi: Expr| bin(BinOp::And, bin(BinOp::Ge, x.clone(), e(ExprKind::Int(0))), bin(BinOp::Lt, x, hi));
        let (index, mut cond): (Vec<Expr>, Option<Expr>) = match &t.modulus {
            Some(m) => {
                let flat = bin(BinOp::Add, bin(BinOp::Mul, coords[0].clone(), self.to_c(m, aux)?), coords[1].clone());
                let c = bin(BinOp::And, within(coords[1].clone(), self.to_c(m, aux)?), within(flat.clone(), poly_expr(&extents[0])?));
                (vec![flat], Some(c))
            }
            None => {
                let mut c: Option<Expr> = None;
                for (d, x) in coords.iter().enumerate() {
                    let w = within(x.clone(), poly_expr(&extents[d])?);
                    c = Some(match c {
                        None => w,
                        Some(acc) => bin(BinOp::And, acc, w),
                    });
                }
                (coords.clone(), c)
            }
        };
        let copy = st(StmtKind::Assign {
            target: e(ExprKind::Index { array: ident(slot), indices: vec![var("metafork_e")] }),
            op: AssignOp::Set,
            value: e(ExprKind::Index { array: ident(&t.array), indices: index }),
        });
        guarded.push(match cond.take() {
            Some(c) => st(StmtKind::If { cond: c, then_branch: Box::new(copy), else_branch: None }),
            None => copy,
        });
        inner.push(st(StmtKind::If {
            cond: bin(BinOp::Lt, var("metafork_e"), n),
            then_branch: Box::new(st(StmtKind::Block(guarded))),
            else_branch: None,
        }));
        Ok(st(StmtKind::For(ForLoop {
            var: ident("metafork_it"),
            ty: ScalarType::Long,
            lo: e(ExprKind::Int(0)),
            hi: trips,
            inclusive: false,
            step: 1,
            body: Box::new(st(StmtKind::Block(inner))),
        })))
    }
}
