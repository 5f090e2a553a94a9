//! The join at the end of each iteration of the serial loops between a schedule's grid and
//! block groups.
//!
//! In `meta_for (v ...) for (k ...) meta_for (u ...) body`, each iteration of `k` forks the
//! block's iterations and joins them before the next: what one thread writes at `k` another
//! may read at `k + 1` (a block-local time loop). A kernel runs `k` in every thread, so that
//! join is a barrier at the end of each iteration ([`needs_join`]); without it, such a program
//! races.
//!
//! Contract: [`needs_join`] is false where every array the body writes is accessed through one
//! subscript tuple, spelled alike everywhere, that reads only values fixed for the thread for
//! the whole launch (parameters, derived scalars, host loop counters, grid and block counters,
//! scalars the body declares once from those and never assigns, counters of the body's loops
//! over such bounds), and every such access is made under conditions of those values only (no
//! `if (k == 0)`). A thread then makes the same accesses to those arrays in every iteration, so
//! two threads that share an element share it within one iteration, where no barrier could
//! order them (a race the checks of the schedule as written and `verify` refuse). Everywhere
//! else the barrier is added: it costs a synchronisation per iteration where the accesses were
//! independent after all, never a wrong result. The condition is waived for each thread's own
//! element: a subscript tuple in which, for every block counter `u`, one subscript is `a*u + r`
//! with a constant `a != 0` and `r` free of block counters and of the body's loop counters
//! (`c[v*B0 + u0][w*B1 + u1]`, reset at `k == 0`): no other thread of the block touches it.
//! Matrix multiplication's `C[i][j] += ...` in its tile loop needs none.

use crate::frontend::ast::{walk_expr, walk_stmt, BinOp, Expr, ExprKind, Stmt, StmtKind};
use crate::frontend::model::{KernelFunction, Schedule};
use std::collections::{BTreeMap, BTreeSet};

/// Whether `schedule`'s serial loops between the grid and the block need a barrier at the end
/// of each iteration (the module's contract). False when it has no such loop.
pub fn needs_join(function: &KernelFunction, schedule: &Schedule) -> bool {
    if schedule.between.is_empty() {
        return false;
    }
    // Names fixed for a thread through the launch.
    let mut fixed: BTreeSet<String> = function.params.iter().map(|p| p.name.clone()).collect();
    fixed.extend(function.derived.iter().map(|d| d.name.clone()));
    fixed.extend(schedule.host_loops.iter().map(|h| h.var.clone()));
    fixed.extend(schedule.grid.iter().chain(&schedule.block).map(|l| l.var.clone()));
    // Scalars declared more than once (a shadowing block) or assigned anywhere are not fixed.
    let mut declared: BTreeMap<String, usize> = BTreeMap::new();
    let mut assigned: BTreeSet<String> = BTreeSet::new();
    for s in &schedule.body {
        walk_stmt(
            s,
            &mut |x| match &x.kind {
                StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| *declared.entry(d.name.name.clone()).or_default() += 1),
                StmtKind::For(l) | StmtKind::MetaFor(l) => *declared.entry(l.var.name.clone()).or_default() += 2,
                StmtKind::Assign { target: Expr { kind: ExprKind::Var(n), .. }, .. } => {
                    assigned.insert(n.clone());
                }
                _ => {}
            },
            &mut |_| {},
        );
    }
    // A name the body declares again (`int v = k;` inside) is the body's, not the launch's
    // (`sema` refuses such a name today; the rule does not lean on it).
    fixed.retain(|n| !declared.contains_key(n));
    // Scalars the body declares once and never assigns, from fixed values only, and counters
    // of its loops over fixed bounds (a granularity loop `w < s`: it runs over the same values
    // in every iteration of the loops outside), wherever they are: to a fixpoint, since either
    // may read the other.
    let mut definitions: Vec<(String, Vec<Expr>)> = Vec::new();
    for s in &schedule.body {
        walk_stmt(
            s,
            &mut |x| match &x.kind {
                StmtKind::Decl { vars, .. } => definitions.extend(vars.iter().filter(|d| declared.get(&d.name.name) == Some(&1)).map(|d| (d.name.name.clone(), vec![d.init.clone()]))),
                StmtKind::For(l) if declared.get(&l.var.name) == Some(&2) => definitions.push((l.var.name.clone(), vec![l.lo.clone(), l.hi.clone()])),
                _ => {}
            },
            &mut |_| {},
        );
    }
    definitions.retain(|(name, _)| !assigned.contains(name));
    loop {
        let before = fixed.len();
        for (name, values) in &definitions {
            let mut names = Vec::new();
            values.iter().for_each(|v| v.names(&mut names));
            if !values.iter().any(|v| reads_array(v)) && names.iter().all(|n| fixed.contains(n)) {
                fixed.insert(name.clone());
            }
        }
        if fixed.len() == before {
            break;
        }
    }
    // Every array's accesses: their subscript tuples as spelled, and whether one reads a value
    // that is not fixed for the thread or is made only under a condition that is not (`if (k
    // == 0)`, a loop bounded by `k`, the right of `&&`): such an access may be made in one
    // iteration and not the next.
    let mut written: BTreeSet<String> = BTreeSet::new();
    for s in &schedule.body {
        walk_stmt(
            s,
            &mut |x| {
                if let StmtKind::Assign { target: Expr { kind: ExprKind::Index { array, .. }, .. }, .. } = &x.kind {
                    written.insert(array.name.clone());
                }
            },
            &mut |_| {},
        );
    }
    let mut accesses = Accesses { fixed: &fixed, by_array: BTreeMap::new() };
    accesses.stmts(&schedule.body, true);
    // The polynomials of the fixed locals (declarations; a loop counter stays a name), to read
    // a subscript in the grid and block counters.
    let mut locals = crate::frontend::polyexpr::DerivedPolys::new();
    loop {
        let before = locals.len();
        for (name, values) in &definitions {
            if let ([init], true, false) = (values.as_slice(), fixed.contains(name), locals.contains_key(name)) {
                let mut names = Vec::new();
                init.names(&mut names);
                if names.iter().all(|n| !definitions.iter().any(|(d, _)| d == n) || locals.contains_key(n)) {
                    locals.insert(name.clone(), crate::frontend::polyexpr::to_poly(init, &locals));
                }
            }
        }
        if locals.len() == before {
            break;
        }
    }
    let block: Vec<&str> = schedule.block.iter().map(|l| l.var.as_str()).collect();
    // A body name left in an expanded subscript is a loop counter or a local that could not be
    // expanded (`int j = w * B;` reads `w`): either may vary within the thread.
    let varies_in_thread = |name: &str| block.contains(&name) || definitions.iter().any(|(d, _)| d == name);
    // A tuple that is each thread's own element: for every block counter `u`, one subscript is
    // `a*u + r` with a constant `a != 0` and `r` free of what varies between the threads of a
    // block or within one (block counters, the body's loop counters), so two threads of a block
    // differ there. Only its own thread touches such an element, in whatever iterations.
    let own_element = |indices: &[Expr]| {
        let polys: Vec<Option<constraints::Poly>> = indices.iter().map(|i| crate::frontend::polyexpr::to_poly(i, &locals)).collect();
        block.iter().all(|u| {
            polys.iter().flatten().any(|p| {
                let v = constraints::Var::new(u);
                let (mut coefficient, mut rest_varies) = (constraints::Poly::zero(), false);
                for (m, c) in p.terms() {
                    match m.exponent(&v) {
                        0 => rest_varies |= m.factors().iter().any(|(x, _)| varies_in_thread(x.name())),
                        1 => coefficient = coefficient + constraints::Poly::term(c.clone(), m.without(&v)),
                        _ => rest_varies = true,
                    }
                }
                !rest_varies && coefficient.as_constant().is_some_and(|c| c != constraints::Rational::from_integer(0.into()))
            })
        })
    };
    !written.iter().all(|array| {
        accesses.by_array.get(array).is_some_and(|a| a.tuples.len() == 1 && !a.varying_subscript && (!a.conditional || a.indices.as_deref().is_some_and(own_element)))
    })
}

/// One array's accesses (see [`needs_join`]).
#[derive(Default)]
struct ArrayAccesses {
    tuples: BTreeSet<String>,
    /// A subscript reads a value not fixed for the thread.
    varying_subscript: bool,
    /// An access is made under a condition not fixed for the thread.
    conditional: bool,
    /// The first access's subscripts.
    indices: Option<Vec<Expr>>,
}

struct Accesses<'a> {
    fixed: &'a BTreeSet<String>,
    by_array: BTreeMap<String, ArrayAccesses>,
}

impl Accesses<'_> {
    /// Whether `e` reads only fixed values (and no array).
    fn is_fixed(&self, e: &Expr) -> bool {
        let mut names = Vec::new();
        e.names(&mut names);
        !reads_array(e) && names.iter().all(|n| self.fixed.contains(n))
    }

    fn stmts(&mut self, stmts: &[Stmt], always: bool) {
        for s in stmts {
            self.stmt(s, always);
        }
    }

    /// `always`: every iteration of the loops between the groups reaches `s` alike.
    fn stmt(&mut self, s: &Stmt, always: bool) {
        match &s.kind {
            StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| self.expr(&d.init, always)),
            StmtKind::Assign { target, value, .. } => {
                self.expr(target, always);
                self.expr(value, always);
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                self.expr(cond, always);
                let inside = always && self.is_fixed(cond);
                self.stmt(then_branch, inside);
                else_branch.iter().for_each(|e| self.stmt(e, inside));
            }
            StmtKind::Block(items) => self.stmts(items, always),
            StmtKind::For(l) | StmtKind::MetaFor(l) => {
                self.expr(&l.lo, always);
                self.expr(&l.hi, always);
                let inside = always && self.is_fixed(&l.lo) && self.is_fixed(&l.hi);
                self.stmt(&l.body, inside);
            }
            _ => {}
        }
    }

    fn expr(&mut self, e: &Expr, always: bool) {
        match &e.kind {
            ExprKind::Index { array, indices } => {
                let fixed = indices.iter().all(|i| self.is_fixed(i));
                let entry = self.by_array.entry(array.name.clone()).or_default();
                entry.tuples.insert(indices.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("]["));
                entry.varying_subscript |= !fixed;
                entry.conditional |= !always;
                entry.indices.get_or_insert_with(|| indices.clone());
                indices.iter().for_each(|i| self.expr(i, always));
            }
            ExprKind::Binary(BinOp::And | BinOp::Or, a, b) => {
                self.expr(a, always);
                let inside = always && self.is_fixed(a);
                self.expr(b, inside);
            }
            ExprKind::Cond(c, a, b) => {
                self.expr(c, always);
                let inside = always && self.is_fixed(c);
                self.expr(a, inside);
                self.expr(b, inside);
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => self.expr(a, always),
            ExprKind::Binary(_, a, b) => {
                self.expr(a, always);
                self.expr(b, always);
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| self.expr(a, always)),
            _ => {}
        }
    }
}

fn reads_array(e: &Expr) -> bool {
    let mut found = false;
    walk_expr(e, &mut |x| found |= matches!(x.kind, ExprKind::Index { .. }));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join_of(body: &str) -> bool {
        let src = format!(
            "void f(int N, int T, int B, int s, const float a[N][N], float x[2][N], float c[N][N]) {{
  assume(N >= 1 && T >= 1 && B >= 1 && s >= 1);
  meta_schedule {{
    meta_for (int v = 0; v < N / B; v++)
      for (int k = 0; k < T; k++)
        meta_for (int u = 0; u < B; u++) {{
{body}
        }}
  }}
}}"
        );
        let program = crate::frontend::check_source("join.mf", &src).unwrap_or_else(|d| panic!("{}", d.render(false)));
        let f = &program.kernels[0];
        needs_join(f, &f.schedules[0])
    }

    #[test]
    fn a_thread_reading_what_another_wrote_an_iteration_before_joins() {
        // Each thread's own element, updated in every iteration (matrix multiplication's
        // accumulator), through locals and a granularity loop: no join.
        assert!(!join_of("int i = v * B + u; c[i][0] += a[i][k % N];"));
        assert!(!join_of("for (int w = 0; w < s; w++) { int i = v * B + u; int j = w; if (j < N && i < N) c[i][j] = c[i][j] + a[i][j]; }"));
        // A neighbour's element, written an iteration before (a block-local time loop).
        assert!(join_of("int e = v * B + u; int f = u + 1 < B ? e + 1 : e; x[(k + 1) % 2][e] = 0.5f * (x[k % 2][e] + x[k % 2][f]);"));
        // A written element that moves with the iteration, or a local assigned in the body.
        assert!(join_of("c[v][(u + k) % N] = a[v][u];"));
        assert!(join_of("int i = v * B + u; i = i + 1; c[i % N][0] += 1.0f;"));
        // A subscript read from an array.
        assert!(join_of("int i = v * B + u; c[(int)a[i][0] % N][0] = 1.0f;"));
        // One element of the block, reset at the first iteration and summed at the others, or
        // written at one and read at the next (a helper's sweep: both lacked the barrier).
        assert!(join_of("if (k == 0) { if (u == 0) c[v][0] = 0.0f; } else c[v][0] += a[v][u];"));
        assert!(join_of("int i = v * B + u; if (k == 0) { if (u == 0) c[v][0] = a[i][0]; } else x[0][i] = c[v][0];"));
        assert!(join_of("int i = v * B + u; x[0][i] = k > 0 && u == 0 ? c[v][0] : 0.0f; c[v][0] = 1.0f;"));
        // A thread's own element reset at the first iteration (a tiled product's `kt == 0`):
        // no other thread touches it, so no join; but a subscript mixing two threads' counters
        // (`u / 2`) or a granularity loop's counter beside the thread's is not told apart.
        assert!(!join_of("int i = v * B + u; if (k == 0) c[i][0] = 0.0f; c[i][0] += a[i][k % N];"));
        assert!(!join_of("int i = v * B + u; if (k == 0) c[N - 1 - i][2] = 0.0f; else c[N - 1 - i][2] += 1.0f;"));
        assert!(join_of("int i = v * B + u / 2; if (k == 0) c[i][0] = 0.0f; else c[i][0] += 1.0f;"));
        assert!(join_of("for (int w = 0; w < s; w++) { int j = w * B + u; if (k == 0) c[v][j] = 0.0f; else c[v][j] += 1.0f; }"));
        // A local that reads a loop counter stays a name in the subscript: not the thread's own
        // (`u + j` meets another thread's at another `w`).
        assert!(join_of("for (int w = 0; w < s; w++) { int j = w; if (k == 0 && u == 0) c[(u + j) % N][0] = 1.0f; if (k == 1) x[0][u] = c[(u + j) % N][0]; }"));
        assert!(join_of("for (int w = 0; w < s; w++) { int j = w; if (k == 0) c[v][u + j] = 0.0f; else c[v][u + j] += 1.0f; }"));
    }

    #[test]
    fn no_loop_between_the_groups_no_join() {
        let src = "void g(int N, int B, float c[N]) { assume(N >= 1 && B >= 1); meta_schedule { meta_for (int v = 0; v < N / B; v++) meta_for (int u = 0; u < B; u++) c[(v * B + u + 1) % N] = 1.0f; } }";
        let program = crate::frontend::check_source("g.mf", src).unwrap();
        assert!(!needs_join(&program.kernels[0], &program.kernels[0].schedules[0]));
    }
}
