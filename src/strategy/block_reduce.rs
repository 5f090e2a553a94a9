//! Block-level tree reductions (issue 26): the atomic adds of a reduction, one per thread and
//! element, become one per block and element.
//!
//! Contract: [`contention`] names the threads of a block that add to one element, and
//! [`block_reduce`] rewrites the code that runs so that they add once:
//! - An atomic add `A[idx] += v` (see `frontend::reduction`) is *eligible* when `A`'s elements
//!   are `float` or `double` (C leaves a partial `int` sum's overflow undefined, where the atomic
//!   add wraps), every subscript is computed from integer parameters and the prologue's grid and
//!   block counters only (so every thread of the block can compute it after the body, and two
//!   threads that differ only along the *reduced* dimensions name the same element), some block
//!   dimension whose extent is not 1 is absent from the subscripts (the reduced dimensions),
//!   and the kernel never reads `A` nor writes it but by atomic adds.
//! - Each eligible element gets a partial sum in a register (`A_part`, the element's type,
//!   added as the atomic add would add the term); after the body it goes to a shared array
//!   indexed by the thread (`[z][y][x]`), which a tree of constant strides halves along each
//!   reduced dimension (`if (t < S && t + S < B) s[t] += s[t + S]`, a barrier between steps,
//!   every barrier at the body's top level so no thread skips one); the thread at 0 along the
//!   reduced dimensions adds the block's sum atomically where the element exists (its
//!   subscripts within the array's extents: a slice whose threads were all guarded off may
//!   name an element outside the array, and adds nothing). Adding a zero sum to an element no
//!   thread added to leaves its value (but for the sign of a zero).
//! - A reduced extent that is not a constant is at most [`MAX_THREADS`]: the strides start at
//!   `MAX_THREADS / 2`. The code's [`Kernel::assumptions`] then hold the product of the reduced
//!   extents `<= MAX_THREADS`, which the tree adds to the region where the code runs.
//! The sum is the same terms added in another order: `verify`'s engine follows the terms'
//! magnitudes through the partial sums, so the comparison's rounding bound is the one for any
//! order of those terms.

use super::syntax::{bin, e, ident, stmt};
use super::walk::{walk_expr, walk_exprs, walk_stmts};
use crate::frontend::ast::*;
use crate::kernel::{Kernel, KernelParamKind, SharedArray};
use constraints::{Constraint, Poly};
use std::collections::{BTreeMap, BTreeSet};

/// The most threads a block has on any CUDA device: the strides of a reduced dimension whose
/// extent is a parameter start at half of it.
pub const MAX_THREADS: i64 = 1024;

/// The names one target's reduction uses: its partial sum in a register, and the block's
/// shared array of them.
struct Names {
    part: String,
    sums: String,
}

/// One element several threads of a block add to.
struct Target {
    array: String,
    /// The subscripts as the body's atomic adds write them (which adds are this element's).
    key_indices: Vec<Expr>,
    /// The same in the prologue's terms, for the block's add after the body.
    indices: Vec<Expr>,
    elem: ScalarType,
    /// The block dimensions (0 = x) whose threads add to the same element.
    reduced: Vec<u8>,
    /// The conditions that the element is within the array's extents (those not decided by
    /// constants).
    exists: Vec<Expr>,
}

/// The product of the reduced block extents over the code's eligible atomic adds (the most
/// threads of a block that add to one element), or `None` when it has none.
pub fn contention(kernel: &Kernel) -> Option<Poly> {
    let targets = targets(kernel);
    let dims: BTreeSet<u8> = targets.iter().flat_map(|t| t.reduced.iter().copied()).collect();
    (!dims.is_empty()).then(|| dims.iter().fold(Poly::one(), |acc, d| acc * &kernel.block[*d as usize]))
}

/// The code with every eligible atomic add reduced in the block first, or `None` when it has
/// no eligible one.
pub fn block_reduce(kernel: &Kernel) -> Option<Kernel> {
    let targets = targets(kernel);
    if targets.is_empty() {
        return None;
    }
    let mut out = kernel.clone();
    let prologue = prologue_len(&kernel.body);
    let named = thread_counters(&kernel.body);
    let keys: Vec<String> = targets.iter().map(key).collect();
    // Names: `A_part` (a register), `A_sums` (shared); a second element of `A`: `A_part2`, ...
    let mut per_array: BTreeMap<&str, usize> = BTreeMap::new();
    let names: Vec<Names> = targets
        .iter()
        .map(|t| {
            let n = per_array.entry(t.array.as_str()).or_insert(0);
            *n += 1;
            let suffix = if *n == 1 { String::new() } else { n.to_string() };
            let stem = &t.array;
            let name = |what: &str| crate::names::readable(&format!("{stem}_{what}{suffix}"));
            Names { part: name("part"), sums: name("sums") }
        })
        .collect();
    // The body's atomic adds to an eligible element become additions to its partial sum.
    let mut rewrite = |s: &mut Stmt| {
        let StmtKind::Assign { target, op: AssignOp::AtomicAdd, value } = &s.kind else { return };
        let ExprKind::Index { array, indices } = &target.kind else { return };
        let k = format!("{}{:?}", array.name, strip(indices));
        let Some(i) = keys.iter().position(|x| *x == k) else { return };
        let term = match &value.kind {
            ExprKind::Cast(t, _) if *t == targets[i].elem => value.clone(),
            ExprKind::Float { single, .. } if *single == (targets[i].elem == ScalarType::Float) => value.clone(),
            _ => e(ExprKind::Cast(targets[i].elem, Box::new(value.clone()))),
        };
        s.kind = StmtKind::Assign { target: var(&names[i].part), op: AssignOp::Add, value: term };
    };
    let mut body: Vec<Stmt> = out.body.split_off(prologue);
    map_stmts(&mut body, &mut rewrite);
    for (t, n) in targets.iter().zip(&names) {
        out.body.push(declare(t.elem, &n.part, e(ExprKind::Int(0))));
    }
    out.body.extend(body);
    // The epilogue: the partial sums to shared memory, the tree, the block's atomic adds.
    let dims = kernel.block.len();
    let at = |shift: Option<(u8, i64)>| -> Vec<Expr> {
        (0..dims as u8)
            .rev()
            .map(|d| {
                let t = thread(d, &named);
                match shift {
                    Some((s, by)) if s == d => bin(BinOp::Add, t, e(ExprKind::Int(by))),
                    _ => t,
                }
            })
            .collect()
    };
    let extents: Vec<Poly> = kernel.block.iter().rev().cloned().collect();
    for (t, n) in targets.iter().zip(&names) {
        out.shared.push(SharedArray { name: n.sums.clone(), elem: t.elem, extents: extents.clone() });
        out.body.push(store(&n.sums, at(None), AssignOp::Set, var(&n.part)));
    }
    let reduced: BTreeSet<u8> = targets.iter().flat_map(|t| t.reduced.iter().copied()).collect();
    for d in &reduced {
        let extent = &kernel.block[*d as usize];
        let bound = crate::emit::cuda::poly_expr_as(extent, ScalarType::Int).ok()?;
        for s in strides(extent) {
            out.body.push(stmt(StmtKind::Barrier));
            let cond = bin(BinOp::And, bin(BinOp::Lt, thread(*d, &named), e(ExprKind::Int(s))), bin(BinOp::Lt, bin(BinOp::Add, thread(*d, &named), e(ExprKind::Int(s))), bound.clone()));
            let mut step = Vec::new();
            for (t, n) in targets.iter().zip(&names) {
                if t.reduced.contains(d) {
                    step.push(store(&n.sums, at(None), AssignOp::Add, load(&n.sums, at(Some((*d, s))))));
                }
            }
            out.body.push(stmt(StmtKind::If { cond, then_branch: Box::new(stmt(StmtKind::Block(step))), else_branch: None }));
        }
    }
    // The last step's writer of a slice's first element is the thread that reads it below,
    // so no barrier follows the tree; a dimension with one stride-free extent has none at all.
    if !out.body.last().is_some_and(|s| matches!(s.kind, StmtKind::If { .. })) {
        out.body.push(stmt(StmtKind::Barrier));
    }
    for (t, n) in targets.iter().zip(&names) {
        let first = t.reduced.iter().map(|d| bin(BinOp::Eq, thread(*d, &named), e(ExprKind::Int(0)))).reduce(|a, b| bin(BinOp::And, a, b)).expect("a target reduces some dimension");
        let cond = t.exists.iter().fold(first, |acc, c| bin(BinOp::And, acc, c.clone()));
        let add = stmt(StmtKind::Assign { target: e(ExprKind::Index { array: ident(&t.array), indices: t.indices.clone() }), op: AssignOp::AtomicAdd, value: load(&n.sums, at(None)) });
        out.body.push(stmt(StmtKind::If { cond, then_branch: Box::new(add), else_branch: None }));
    }
    let product = reduced.iter().fold(Poly::one(), |acc, d| acc * &kernel.block[*d as usize]);
    if product.as_constant().is_none() {
        out.assumptions.push(Constraint::le(&product, &Poly::int(MAX_THREADS)));
    }
    Some(out)
}

/// The strides of a tree over `extent` threads: the powers of two below it, largest first
/// (below [`MAX_THREADS`] when it is not a constant).
fn strides(extent: &Poly) -> Vec<i64> {
    let top = match extent.as_constant() {
        Some(c) if c.is_integer() => i64::try_from(c.to_integer()).unwrap_or(MAX_THREADS).min(MAX_THREADS),
        _ => MAX_THREADS,
    };
    let mut out = Vec::new();
    let mut s = 1i64;
    while s < top {
        out.push(s);
        s *= 2;
    }
    out.reverse();
    out
}

/// The eligible elements of `kernel`'s atomic adds, once each, in the order first added.
fn targets(kernel: &Kernel) -> Vec<Target> {
    // Each global array's element type and extents.
    let arrays: BTreeMap<&str, (ScalarType, &[Poly])> = kernel
        .params
        .iter()
        .filter_map(|p| match &p.kind {
            KernelParamKind::Array { elem, extents, .. } => Some((p.name.as_str(), (*elem, extents.as_slice()))),
            _ => None,
        })
        .collect();
    let scalars: BTreeSet<&str> = kernel.params.iter().filter(|p| matches!(p.kind, KernelParamKind::Scalar(t) if t.is_integer())).map(|p| p.name.as_str()).collect();
    let uniform = uniform_vars(kernel, &scalars);
    let prologue = &uniform.dims;
    // Arrays the kernel reads or writes other than by atomic adds.
    let mut plain: BTreeSet<String> = BTreeSet::new();
    let mut found: Vec<Target> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    walk_stmts(&kernel.body, &mut |s| {
        match &s.kind {
            StmtKind::Assign { target, op, value } => {
                walk_expr(value, &mut |x| note_read(x, &mut plain));
                let ExprKind::Index { array, indices } = &target.kind else { return };
                indices.iter().for_each(|i| walk_expr(i, &mut |x| note_read(x, &mut plain)));
                if *op != AssignOp::AtomicAdd {
                    plain.insert(array.name.clone());
                    return;
                }
                let (elem, extents) = match arrays.get(array.name.as_str()) {
                    Some((elem, extents)) => (Some(*elem), *extents),
                    None => (None, &[][..]),
                };
                let dims = indices.iter().map(|i| dims_of(i, prologue, &scalars)).try_fold(BTreeSet::new(), |mut acc, d| {
                    acc.extend(d?);
                    Some(acc)
                });
                let reduced: Option<Vec<u8>> = dims.map(|used| (0..kernel.block.len() as u8).filter(|d| !used.contains(d) && kernel.block[*d as usize] != Poly::one()).collect());
                match (elem, reduced) {
                    (Some(elem @ (ScalarType::Float | ScalarType::Double)), Some(reduced)) if !reduced.is_empty() => {
                        let k = format!("{}{:?}", array.name, strip(indices));
                        let after: Vec<Expr> = indices.iter().map(|i| uniform.written_out(i)).collect();
                        match (keys.contains(&k), existence(&after, extents)) {
                            (false, Some(exists)) => {
                                keys.push(k);
                                found.push(Target { array: array.name.clone(), key_indices: indices.clone(), indices: after, elem, reduced, exists });
                            }
                            // An extent C cannot write, or an element seen before.
                            _ => {}
                        }
                    }
                    // Not eligible: this atomic add stays (it commutes with the block's).
                    _ => {}
                }
            }
            StmtKind::Decl { .. } | StmtKind::If { .. } | StmtKind::For(_) => {
                // Only the statement's own expressions: the walk visits nested statements.
                let own = Stmt { kind: shallow(&s.kind), span: s.span };
                walk_exprs(&own, &mut |x| note_read(x, &mut plain));
            }
            _ => {}
        }
    });
    let bounded = |t: &Target| {
        let product = t.reduced.iter().fold(Poly::one(), |acc, d| acc * &kernel.block[*d as usize]);
        product.as_constant().is_none_or(|c| c <= constraints::Rational::from_integer(MAX_THREADS.into()))
    };
    found.into_iter().filter(|t| !plain.contains(&t.array) && bounded(t)).collect()
}

/// `0 <= idx && idx < extent` for each subscript, as C conditions (those constants decide
/// left out), or `None` when an extent cannot be written in C.
fn existence(indices: &[Expr], extents: &[Poly]) -> Option<Vec<Expr>> {
    if indices.len() != extents.len() {
        return None;
    }
    let mut out = Vec::new();
    for (i, extent) in indices.iter().zip(extents) {
        let constant = match i.kind {
            ExprKind::Int(v) => Some(v),
            _ => None,
        };
        if constant.is_none_or(|v| v < 0) {
            out.push(bin(BinOp::Le, e(ExprKind::Int(0)), i.clone()));
        }
        let decided = match (constant, extent.as_constant()) {
            (Some(v), Some(c)) => constraints::Rational::from_integer(v.into()) < c,
            _ => false,
        };
        if !decided {
            let ty = if extent.total_degree() <= 1 { ScalarType::Int } else { ScalarType::Long };
            out.push(bin(BinOp::Lt, i.clone(), crate::emit::cuda::poly_expr_as(extent, ty).ok()?));
        }
    }
    Some(out)
}

/// A statement's own expressions without its nested statements.
fn shallow(kind: &StmtKind) -> StmtKind {
    let empty = || Box::new(stmt(StmtKind::Empty));
    match kind {
        StmtKind::If { cond, .. } => StmtKind::If { cond: cond.clone(), then_branch: empty(), else_branch: None },
        StmtKind::For(l) => StmtKind::For(ForLoop { body: empty(), ..l.clone() }),
        other => other.clone(),
    }
}

fn note_read(x: &Expr, plain: &mut BTreeSet<String>) {
    if let ExprKind::Index { array, .. } = &x.kind {
        plain.insert(array.name.clone());
    }
}

/// The leading declarations of the body (the grid and block counters, and what the staged
/// code computes from them before anything else).
fn prologue_len(body: &[Stmt]) -> usize {
    body.iter().take_while(|s| matches!(s.kind, StmtKind::Decl { .. })).count()
}

/// The integer variables computed from parameters, CUDA indices and each other only, with the
/// block dimensions each varies with: the prologue's (in scope after the body), and those
/// declared in the body and never assigned (`int j = v1 * B1 + u1;` inside a serial loop),
/// whose definitions the block's add writes out in their place.
struct Uniform {
    dims: BTreeMap<String, BTreeSet<u8>>,
    defs: BTreeMap<String, Expr>,
}

fn uniform_vars(kernel: &Kernel, scalars: &BTreeSet<&str>) -> Uniform {
    let mut u = Uniform { dims: BTreeMap::new(), defs: BTreeMap::new() };
    let prologue = prologue_len(&kernel.body);
    for s in &kernel.body[..prologue] {
        let StmtKind::Decl { ty, vars } = &s.kind else { break };
        for d in vars {
            if let Some(dims) = ty.is_integer().then(|| dims_of(&d.init, &u.dims, scalars)).flatten() {
                u.dims.insert(d.name.name.clone(), dims);
            }
        }
    }
    let mut assigned = BTreeSet::new();
    walk_stmts(&kernel.body, &mut |s| {
        if let StmtKind::Assign { target: Expr { kind: ExprKind::Var(v), .. }, .. } = &s.kind {
            assigned.insert(v.clone());
        }
    });
    walk_stmts(&kernel.body[prologue..], &mut |s| {
        let StmtKind::Decl { ty, vars } = &s.kind else { return };
        for d in vars {
            if !ty.is_integer() || assigned.contains(&d.name.name) || u.dims.contains_key(&d.name.name) {
                continue;
            }
            if let Some(dims) = dims_of(&d.init, &u.dims, scalars) {
                u.dims.insert(d.name.name.clone(), dims);
                let def = u.written_out(&d.init);
                u.defs.insert(d.name.name.clone(), def);
            }
        }
    });
    u
}

impl Uniform {
    /// `x` with the body's variables replaced by their definitions (in the prologue's terms).
    fn written_out(&self, x: &Expr) -> Expr {
        let mut out = x.clone();
        super::walk::map_expr(&mut out, &mut |y| {
            if let ExprKind::Var(n) = &y.kind {
                if let Some(def) = self.defs.get(n) {
                    *y = def.clone();
                }
            }
        });
        out
    }
}

/// The block dimensions an integer expression varies with, or `None` when it reads anything
/// but constants, integer parameters, CUDA indices and `known` variables.
fn dims_of(x: &Expr, known: &BTreeMap<String, BTreeSet<u8>>, scalars: &BTreeSet<&str>) -> Option<BTreeSet<u8>> {
    let mut out = BTreeSet::new();
    let mut ok = true;
    walk_expr(x, &mut |y| match &y.kind {
        ExprKind::Int(_) | ExprKind::Binary(..) | ExprKind::Unary(..) | ExprKind::Cast(..) => {}
        ExprKind::Builtin(Builtin::ThreadIdx(d)) => {
            out.insert(*d);
        }
        ExprKind::Builtin(_) => {}
        ExprKind::Var(n) if scalars.contains(n.as_str()) => {}
        ExprKind::Var(n) => match known.get(n) {
            Some(d) => out.extend(d.iter().copied()),
            None => ok = false,
        },
        _ => ok = false,
    });
    ok.then_some(out)
}

/// The subscripts without their source positions, to tell elements apart.
fn strip(indices: &[Expr]) -> Vec<String> {
    indices.iter().map(|i| i.to_string()).collect()
}

fn key(t: &Target) -> String {
    format!("{}{:?}", t.array, strip(&t.key_indices))
}

fn var(name: &str) -> Expr {
    e(ExprKind::Var(name.to_string()))
}

/// The thread's index along `d`: the prologue's counter that is exactly it (`int u = threadIdx.x`,
/// as a person would write it), else `threadIdx` itself.
fn thread(d: u8, named: &BTreeMap<u8, String>) -> Expr {
    match named.get(&d) {
        Some(n) => var(n),
        None => e(ExprKind::Builtin(Builtin::ThreadIdx(d))),
    }
}

/// The prologue's integer counters defined as exactly a thread index, by dimension.
fn thread_counters(body: &[Stmt]) -> BTreeMap<u8, String> {
    let mut out = BTreeMap::new();
    for s in &body[..prologue_len(body)] {
        let StmtKind::Decl { ty, vars } = &s.kind else { continue };
        for v in vars {
            let mut init = &v.init;
            while let ExprKind::Cast(_, inner) = &init.kind {
                init = inner;
            }
            if let (true, ExprKind::Builtin(Builtin::ThreadIdx(d))) = (*ty == ScalarType::Int, &init.kind) {
                out.entry(*d).or_insert_with(|| v.name.name.clone());
            }
        }
    }
    out
}

fn load(array: &str, indices: Vec<Expr>) -> Expr {
    e(ExprKind::Index { array: ident(array), indices })
}

fn store(array: &str, indices: Vec<Expr>, op: AssignOp, value: Expr) -> Stmt {
    stmt(StmtKind::Assign { target: load(array, indices), op, value })
}

fn declare(ty: ScalarType, name: &str, init: Expr) -> Stmt {
    stmt(StmtKind::Decl { ty, vars: vec![Declarator { name: ident(name), init }] })
}

/// Rewrite every statement of `stmts`, nested ones included, children first.
fn map_stmts(stmts: &mut [Stmt], f: &mut dyn FnMut(&mut Stmt)) {
    for s in stmts.iter_mut() {
        match &mut s.kind {
            StmtKind::Block(items) => map_stmts(items, f),
            StmtKind::If { then_branch, else_branch, .. } => {
                map_stmts(std::slice::from_mut(&mut **then_branch), f);
                if let Some(x) = else_branch {
                    map_stmts(std::slice::from_mut(&mut **x), f);
                }
            }
            StmtKind::For(l) => map_stmts(std::slice::from_mut(&mut *l.body), f),
            _ => {}
        }
        f(s);
    }
}
