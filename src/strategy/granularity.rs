//! Reducing thread granularity: the work items one thread performs in sequence are spread over
//! more blocks along `x`, one item per thread.
//!
//! Work items are either the iterations of a serial loop whose trip count is a polynomial in
//! the program parameters (`for (k = 0; k < s; k++)`: s items), or the statements of a block
//! that holds two or more (matrix addition's two element updates: 2 items). With g items, the
//! grid's `x` extent is multiplied by g, the `x` grid counter becomes `lo + blockIdx.x / g`,
//! and the item is `blockIdx.x % g`, so consecutive blocks take consecutive items of the same
//! original block.
//!
//! Safety: before, a thread ran its items in order; after, different threads run them in any
//! order, each also running the rest of the body (the statements before and after the work
//! list, and the bounds of the loops around it). That is the same program exactly when no two
//! items of one thread touch the same element with a write, the rest of the body touches no
//! element another item writes, and writes nothing. The strategy asks Z3 for such a pair (the
//! access model, with the loop counter, and any enclosing serial loop's, renamed per item, and
//! the path guards) and applies only when every query is unsat. Scalars carried from one item
//! to the next (`acc += ...` declared outside) also refuse it.

use super::base_context;
use crate::access::{assigned_scalars, may_collide, Access, Collector, Env};
use crate::frontend::ast::*;
use super::syntax::{e, stmt};
use super::walk::body_items as body_of;
use crate::frontend::model::KernelFunction;
use crate::kernel::Kernel;
use constraints::solver::Backend;
use constraints::{Constraint, Poly};

fn block_x() -> Expr {
    e(ExprKind::Builtin(Builtin::BlockIdx(0)))
}

/// Where the work list is: indices into nested statement lists, then what kind it is.
#[derive(Clone, Debug)]
enum WorkList {
    /// The loop at this path.
    Loop(Vec<usize>),
    /// The statements (from index `first`) of the block at this path (empty path: the body).
    Statements(Vec<usize>, usize),
}

/// The statement list a path leads into (through blocks, if-then branches and loop bodies).
fn children(s: &Stmt) -> Option<&Vec<Stmt>> {
    match &s.kind {
        StmtKind::Block(items) => Some(items),
        _ => None,
    }
}

/// Inner statement lists of a statement we may descend into, with the child index scheme:
/// blocks (their items), `if` without `else` (its then-branch), serial loops (their body).
fn descend(s: &Stmt) -> Option<&Stmt> {
    match &s.kind {
        StmtKind::If { then_branch, else_branch: None, .. } => Some(then_branch),
        StmtKind::For(l) => Some(&l.body),
        _ => None,
    }
}

fn is_program_poly(p: &Poly, function: &KernelFunction) -> bool {
    let programs = function.program_parameters();
    p.vars().iter().all(|v| programs.iter().any(|n| n == v.name()))
}

fn contains_barrier(s: &Stmt) -> bool {
    match &s.kind {
        StmtKind::Barrier => true,
        StmtKind::Block(items) => items.iter().any(contains_barrier),
        StmtKind::If { then_branch, else_branch, .. } => contains_barrier(then_branch) || else_branch.as_ref().is_some_and(|x| contains_barrier(x)),
        StmtKind::For(l) => contains_barrier(&l.body),
        _ => false,
    }
}

/// Find the work list, searching from `stmts` (at `path`), loops first.
fn find(stmts: &[Stmt], path: &mut Vec<usize>, function: &KernelFunction) -> Option<WorkList> {
    for (i, s) in stmts.iter().enumerate() {
        if let StmtKind::For(l) = &s.kind {
            let trip = crate::frontend::polyexpr::to_poly(&l.hi, &Default::default())
                .zip(crate::frontend::polyexpr::to_poly(&l.lo, &Default::default()))
                .map(|(h, lo)| h - lo);
            if l.step == 1 && !l.inclusive && !contains_barrier(&l.body) && trip.is_some_and(|t| t.as_constant().is_none() && is_program_poly(&t, function)) {
                path.push(i);
                return Some(WorkList::Loop(path.clone()));
            }
        }
    }
    let work: Vec<usize> = stmts.iter().enumerate().filter(|(_, s)| !matches!(s.kind, StmtKind::Decl { .. } | StmtKind::Empty)).map(|(i, _)| i).collect();
    if work.len() >= 2 && stmts[work[0]..].iter().all(|s| !matches!(s.kind, StmtKind::Decl { .. })) && !stmts.iter().any(contains_barrier) {
        return Some(WorkList::Statements(path.clone(), work[0]));
    }
    for (i, s) in stmts.iter().enumerate() {
        if let Some(inner) = descend(s) {
            path.push(i);
            let items: Vec<Stmt> = children(inner).cloned().unwrap_or_else(|| vec![inner.clone()]);
            path.push(usize::MAX); // marks "into the nested body"
            if let Some(w) = find(&items, path, function) {
                return Some(w);
            }
            path.pop();
            path.pop();
        }
    }
    None
}

/// The nested statement list a path's prefix designates, as a mutable vector.
fn list_at<'a>(body: &'a mut Vec<Stmt>, path: &[usize]) -> &'a mut Vec<Stmt> {
    let mut cur = body;
    let mut i = 0;
    while i + 1 < path.len() && path[i + 1] == usize::MAX {
        let s = &mut cur[path[i]];
        let inner: &mut Stmt = match &mut s.kind {
            StmtKind::If { then_branch, .. } => then_branch,
            StmtKind::For(l) => &mut l.body,
            _ => unreachable!("paths only descend into ifs and loops"),
        };
        if !matches!(inner.kind, StmtKind::Block(_)) {
            let single = std::mem::replace(inner, stmt(StmtKind::Empty));
            *inner = stmt(StmtKind::Block(vec![single]));
        }
        cur = match &mut inner.kind {
            StmtKind::Block(items) => items,
            _ => unreachable!(),
        };
        i += 2;
    }
    cur
}

/// Collect the environment and guards that hold at the work list, walking the path; the
/// accesses of the statements before it land in `col.accesses`. With `around`, the enclosing
/// serial loops' counters are renamed by its tag (two threads' copies of the loop run at any
/// iterations), and the accesses of the statements after the work list, at every level of the
/// path (from `rest` in the innermost list), are appended to its vector.
fn context_at(col: &mut Collector, body: &[Stmt], path: &[usize], env: &mut Env, guards: &mut Vec<Constraint>, mut around: Option<(&str, usize, &mut Vec<Access>)>) {
    let upto = path.first().copied().unwrap_or(body.len()).min(body.len());
    col.stmts(&body[..upto], env, guards);
    if path.len() >= 2 && path[1] == usize::MAX {
        let s = &body[path[0]];
        let (env_here, guards_here) = (env.clone(), guards.clone());
        match &s.kind {
            StmtKind::If { cond, then_branch, .. } => {
                let g = col.condition(cond, true, env, guards);
                guards.extend(g);
                let items: Vec<Stmt> = children(then_branch).cloned().unwrap_or_else(|| vec![(**then_branch).clone()]);
                context_at(col, &items, &path[2..], env, guards, around.as_mut().map(|(t, r, v)| (*t, *r, &mut **v)));
            }
            StmtKind::For(l) => {
                for n in assigned_scalars(&l.body) {
                    env.insert(n, None);
                }
                let name = around.as_ref().map_or_else(|| l.var.name.clone(), |(tag, ..)| crate::names::copy_of(&l.var.name, tag));
                env.insert(l.var.name.clone(), Some(Poly::var(&name)));
                col.context.set_domain(constraints::Var::new(&name), constraints::Domain::integer());
                let counter = Poly::var(&name);
                // The bounds' reads (`k < cnt[p]`), which the item's thread makes around it.
                col.expr_accesses(&l.lo, &env_here, guards);
                if let Some(lo) = col.poly(&l.lo, &env_here, guards) {
                    guards.push(Constraint::ge(&counter, &lo));
                }
                col.expr_accesses(&l.hi, env, guards);
                if let Some(hi) = col.poly(&l.hi, env, guards) {
                    guards.push(if l.inclusive { Constraint::le(&counter, &hi) } else { Constraint::lt(&counter, &hi) });
                }
                let items: Vec<Stmt> = children(&l.body).cloned().unwrap_or_else(|| vec![(*l.body).clone()]);
                context_at(col, &items, &path[2..], env, guards, around.as_mut().map(|(t, r, v)| (*t, *r, &mut **v)));
            }
            _ => {}
        }
        // What follows the statement the path entered, with what it assigned unknown.
        if let Some((_, _, after)) = around {
            let mut env_after = env_here;
            for n in assigned_scalars(s) {
                env_after.insert(n, None);
            }
            let before = col.accesses.len();
            col.stmts(&body[path[0] + 1..], &mut env_after, &guards_here);
            after.extend(col.accesses.split_off(before));
        }
    } else if let Some((_, rest, after)) = around {
        let mut env_after = env.clone();
        for n in body.iter().skip(upto).flat_map(assigned_scalars) {
            env_after.insert(n, None);
        }
        let before = col.accesses.len();
        col.stmts(&body[rest.min(body.len())..], &mut env_after, guards);
        after.extend(col.accesses.split_off(before));
    }
}

/// A thread's work list whose items are proved independent: where it is and how many.
pub(crate) struct Independent {
    /// The statement list holding the work (the loop, or the items from `first`).
    list_path: Vec<usize>,
    /// The loop's index in that list (loops), or the first item's.
    last: usize,
    first: usize,
    is_loop: bool,
    /// The number of items, as an expression.
    count: Expr,
}

impl Independent {
    /// The loop whose iterations are the items, when the work list is a loop.
    pub(crate) fn the_loop(&self, body: &[Stmt]) -> Option<ForLoop> {
        if !self.is_loop {
            return None;
        }
        let mut probe = body.to_vec();
        match &list_at(&mut probe, &self.list_path).get(self.last)?.kind {
            StmtKind::For(l) => Some(l.clone()),
            _ => None,
        }
    }

    /// The statement list holding the work, as a mutable vector of `body`.
    pub(crate) fn list<'a>(&self, body: &'a mut Vec<Stmt>) -> &'a mut Vec<Stmt> {
        list_at(body, &self.list_path)
    }

    pub(crate) fn index(&self) -> usize {
        self.last
    }
}

/// The kernel with granularity reduced, or `None` when there is no work list or its items
/// cannot be proved independent.
pub fn reduce_granularity(function: &KernelFunction, kernel: &Kernel, backend: &Backend) -> Result<Option<Kernel>, String> {
    if kernel.grid.is_empty() {
        return Ok(None);
    }
    let Some(Independent { list_path, last, first, is_loop, count: g_expr, .. }) = independent_across_threads(function, kernel, backend)? else { return Ok(None) };
    transform(kernel, list_path, last, first, is_loop, g_expr)
}

/// The thread's work list, found as [`reduce_granularity`] finds it, when its items are
/// proved independent: no two items touch one element with a write, and no scalar is carried
/// from one item to the next. This is what running the items in another order within the
/// thread needs (register blocking jams them); [`independent_across_threads`] is what
/// running them on different threads needs.
pub(crate) fn independent_work(function: &KernelFunction, kernel: &Kernel, backend: &Backend) -> Result<Option<Independent>, String> {
    independent(function, kernel, backend, false)
}

/// As [`independent_work`], and also safe when each item runs on its own thread, every such
/// thread running the rest of the body too: the statements before and after the work list
/// (a local read from an array one item writes: nesterov's `vi = mu * v[i] + gi` before
/// `v[i] = vi;`, recomputed by the thread of the other item) touch no element another item's
/// thread writes, and write nothing (every item's thread would write it); and an enclosing
/// serial loop's iterations are paired at any two counters, since the threads run the loop
/// apart.
pub(crate) fn independent_across_threads(function: &KernelFunction, kernel: &Kernel, backend: &Backend) -> Result<Option<Independent>, String> {
    independent(function, kernel, backend, true)
}

fn independent(function: &KernelFunction, kernel: &Kernel, backend: &Backend, across_threads: bool) -> Result<Option<Independent>, String> {
    let Some(work) = find(&kernel.body, &mut Vec::new(), function) else { return Ok(None) };
    let mut ctx = base_context(function);
    for p in &kernel.params {
        ctx.set_domain(constraints::Var::new(&p.name), constraints::Domain::integer());
    }
    let mut col = Collector::new(backend, ctx).floating_scalars_of(kernel);
    let mut env = Env::new();
    let mut guards: Vec<Constraint> = Vec::new();
    for h in &kernel.host_loops {
        let t = Poly::var(&h.var);
        if let Some(lo) = col.poly(&h.lo, &env, &guards) {
            guards.push(Constraint::ge(&t, &lo));
        }
        if let Some(hi) = col.poly(&h.hi, &env, &guards) {
            guards.push(if h.inclusive { Constraint::le(&t, &hi) } else { Constraint::lt(&t, &hi) });
        }
    }
    let (path, first, is_loop) = match &work {
        WorkList::Loop(p) => (p.clone(), 0, true),
        WorkList::Statements(p, f) => (p.clone(), *f, false),
    };
    let mut probe = kernel.body.clone();
    let list_path: Vec<usize> = if is_loop { path[..path.len() - 1].to_vec() } else { path.clone() };
    let last = if is_loop { *path.last().unwrap_or(&0) } else { first };
    let mut walk_path = list_path.clone();
    walk_path.push(last);
    let list = list_at(&mut probe, &list_path).clone();
    // The items' copies: the loop's iterations under two tags, or the statements.
    let tags: Vec<String> = if is_loop { vec!["1".into(), "2".into()] } else { (first..list.len()).map(|k| format!("s{k}")).collect() };
    if is_loop {
        let StmtKind::For(l) = &list[last].kind else { return Ok(None) };
        if !assigned_scalars(&l.body).iter().all(|n| declared_inside(&l.body, n)) {
            return Ok(None); // a scalar carried between iterations
        }
    } else if list[first..].iter().any(|s| !assigned_scalars(s).iter().all(|n| declared_inside(s, n))) {
        return Ok(None);
    }
    // The context (environment, guards) each copy runs in; across threads, one per copy, with
    // the accesses before and after the work list that copy's thread makes.
    let rest = if is_loop { last + 1 } else { list.len() };
    let mut contexts: Vec<(Env, Vec<Constraint>, Vec<Access>)> = Vec::new();
    if across_threads {
        for tag in &tags {
            let (mut env_t, mut guards_t, mut after) = (env.clone(), guards.clone(), Vec::new());
            let before = col.accesses.len();
            context_at(&mut col, &kernel.body, &walk_path, &mut env_t, &mut guards_t, Some((tag, rest, &mut after)));
            let mut outside = col.accesses.split_off(before);
            outside.extend(after);
            contexts.push((env_t, guards_t, outside));
        }
    } else {
        context_at(&mut col, &kernel.body, &walk_path, &mut env, &mut guards, None);
        col.accesses.clear();
        contexts = vec![(env.clone(), guards.clone(), Vec::new()); tags.len()];
    }

    // The items' copies, as access sets: the item's own, and what its thread does around it.
    let mut items: Vec<(Vec<Access>, Vec<Access>)> = Vec::new();
    let g_expr = if is_loop {
        let StmtKind::For(l) = &list[last].kind else { return Ok(None) };
        for (tag, (env_t, guards_t, outside)) in tags.iter().zip(&contexts) {
            let name = crate::names::copy_of(&l.var.name, tag);
            let mut env_k = env_t.clone();
            env_k.insert(l.var.name.clone(), Some(Poly::var(&name)));
            col.context.set_domain(constraints::Var::new(&name), constraints::Domain::integer());
            let mut g = guards_t.clone();
            let k = Poly::var(&name);
            if let Some(lo) = col.poly(&l.lo, env_t, guards_t) {
                g.push(Constraint::ge(&k, &lo));
            }
            if let Some(hi) = col.poly(&l.hi, env_t, guards_t) {
                g.push(Constraint::lt(&k, &hi));
            }
            let before = col.accesses.len();
            col.stmts(&body_of(&l.body), &mut env_k, &g);
            items.push((col.accesses.split_off(before), outside.clone()));
        }
        let trip = e(ExprKind::Binary(BinOp::Sub, Box::new(l.hi.clone()), Box::new(l.lo.clone())));
        if matches!(l.lo.kind, ExprKind::Int(0)) { l.hi.clone() } else { trip }
    } else {
        for (s, (env_t, guards_t, outside)) in list[first..].iter().zip(&contexts) {
            let before = col.accesses.len();
            let mut env_s = env_t.clone();
            col.stmts(std::slice::from_ref(s), &mut env_s, guards_t);
            items.push((col.accesses.split_off(before), outside.clone()));
        }
        e(ExprKind::Int((list.len() - first) as i64))
    };
    // Loop copies must be distinct iterations.
    let distinct: Vec<Constraint> = match &work {
        WorkList::Loop(_) => {
            let StmtKind::For(l) = &list[last].kind else { return Ok(None) };
            vec![Constraint::ne(&Poly::var(&crate::names::copy_of(&l.var.name, "1")), &Poly::var(&crate::names::copy_of(&l.var.name, "2")))]
        }
        _ => Vec::new(),
    };
    // Every pair of copies (the test is symmetric): the items, and across threads what each
    // copy's thread does around its item against everything the other's does.
    for i in 0..items.len() {
        for j in i + 1..items.len() {
            let (own_i, outside_i) = &items[i];
            let (own_j, outside_j) = &items[j];
            let pairs = own_i.iter().flat_map(|a| own_j.iter().map(move |b| (a, b)));
            let around = outside_i.iter().flat_map(|a| own_j.iter().chain(outside_j).map(move |b| (a, b))).chain(own_i.iter().flat_map(|a| outside_j.iter().map(move |b| (a, b))));
            for (a, b) in pairs.chain(around) {
                if may_collide(backend, &col.context, a, b, &distinct) != Some(false) {
                    return Ok(None);
                }
            }
        }
    }

    Ok(Some(Independent { list_path, last, first, is_loop, count: g_expr }))
}

/// Granularity reduction proper: the grid's `x` extent times the items, each thread one item.
fn transform(kernel: &Kernel, list_path: Vec<usize>, last: usize, first: usize, is_loop: bool, g_expr: Expr) -> Result<Option<Kernel>, String> {
    let mut out = kernel.clone();
    let gx = out.grid[0].clone();
    out.grid[0] = e(ExprKind::Binary(BinOp::Mul, Box::new(gx), Box::new(g_expr.clone())));
    for s in out.body.iter_mut() {
        if let StmtKind::Decl { vars, .. } = &mut s.kind {
            for d in vars.iter_mut() {
                d.init = replace_block_x(&d.init, &g_expr);
            }
        }
    }
    let item = e(ExprKind::Binary(BinOp::Rem, Box::new(block_x()), Box::new(g_expr)));
    let target = list_at(&mut out.body, &list_path);
    if is_loop {
        let StmtKind::For(l) = target[last].kind.clone() else { return Ok(None) };
        let init = if matches!(l.lo.kind, ExprKind::Int(0)) { item } else { e(ExprKind::Binary(BinOp::Add, Box::new(l.lo.clone()), Box::new(item))) };
        let mut stmts = vec![stmt(StmtKind::Decl { ty: l.ty, vars: vec![Declarator { name: l.var.clone(), init }] })];
        stmts.extend(body_of(&l.body));
        target[last] = stmt(StmtKind::Block(stmts));
    } else {
        let work: Vec<Stmt> = target.drain(first..).collect();
        let name = "$item"; // internal (crate::names)
        target.push(stmt(StmtKind::Decl { ty: ScalarType::Int, vars: vec![Declarator { name: Ident { name: name.into(), span: Default::default() }, init: item }] }));
        let mut chain: Option<Stmt> = None;
        for (k, s) in work.into_iter().enumerate().rev() {
            let cond = e(ExprKind::Binary(BinOp::Eq, Box::new(e(ExprKind::Var(name.into()))), Box::new(e(ExprKind::Int(k as i64)))));
            chain = Some(stmt(StmtKind::If { cond, then_branch: Box::new(s), else_branch: chain.map(Box::new) }));
        }
        target.extend(chain);
    }
    Ok(Some(out))
}


fn declared_inside(s: &Stmt, name: &str) -> bool {
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().any(|d| d.name.name == name),
        StmtKind::Block(items) => items.iter().any(|x| declared_inside(x, name)),
        StmtKind::If { then_branch, else_branch, .. } => declared_inside(then_branch, name) || else_branch.as_ref().is_some_and(|x| declared_inside(x, name)),
        StmtKind::For(l) => l.var.name == name || declared_inside(&l.body, name),
        _ => false,
    }
}

/// `blockIdx.x` in a grid counter's definition becomes `blockIdx.x / g`.
fn replace_block_x(x: &Expr, g: &Expr) -> Expr {
    let k = match &x.kind {
        ExprKind::Builtin(Builtin::BlockIdx(0)) => {
            ExprKind::Binary(BinOp::Div, Box::new(x.clone()), Box::new(g.clone()))
        }
        ExprKind::Binary(op, a, b) => ExprKind::Binary(*op, Box::new(replace_block_x(a, g)), Box::new(replace_block_x(b, g))),
        _ => x.kind.clone(),
    };
    Expr::new(k, x.span)
}
