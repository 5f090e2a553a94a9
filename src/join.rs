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
//! scalars the body declares once at its top from those and never assigns) and counters of the
//! body's loops over such bounds (declared once, never assigned). A thread then touches the
//! same elements in every iteration, so two threads that share one share it within an
//! iteration, where no barrier orders them. Everywhere else the barrier is added: it costs a
//! synchronisation per iteration where the accesses were independent after all, never a
//! wrong result. The rule only chooses where the barrier goes; what it leaves out (threads
//! kept apart within an iteration by guards that change between iterations) is a race the
//! checks of the schedule as written and `verify` report, as for any other race. Matrix
//! multiplication's `C[i][j] += ...` in its tile loop needs none.

use crate::frontend::ast::{walk_expr, walk_stmt, Expr, ExprKind, StmtKind};
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
    // that is not fixed for the thread.
    #[derive(Default)]
    struct Accesses {
        tuples: BTreeSet<String>,
        varying: bool,
    }
    let mut written: BTreeSet<String> = BTreeSet::new();
    let mut accesses: BTreeMap<String, Accesses> = BTreeMap::new();
    for s in &schedule.body {
        walk_stmt(
            s,
            &mut |x| {
                if let StmtKind::Assign { target: Expr { kind: ExprKind::Index { array, .. }, .. }, .. } = &x.kind {
                    written.insert(array.name.clone());
                }
            },
            &mut |e| {
                walk_expr(e, &mut |x| {
                    if let ExprKind::Index { array, indices } = &x.kind {
                        let entry = accesses.entry(array.name.clone()).or_default();
                        entry.tuples.insert(indices.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("]["));
                        let mut names = Vec::new();
                        indices.iter().for_each(|i| i.names(&mut names));
                        entry.varying |= !names.iter().all(|n| fixed.contains(n)) || indices.iter().any(reads_array);
                    }
                })
            },
        );
    }
    !written.iter().all(|array| accesses.get(array).is_some_and(|a| a.tuples.len() == 1 && !a.varying))
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
    }

    #[test]
    fn no_loop_between_the_groups_no_join() {
        let src = "void g(int N, int B, float c[N]) { assume(N >= 1 && B >= 1); meta_schedule { meta_for (int v = 0; v < N / B; v++) meta_for (int u = 0; u < B; u++) c[(v * B + u + 1) % N] = 1.0f; } }";
        let program = crate::frontend::check_source("g.mf", src).unwrap();
        assert!(!needs_join(&program.kernels[0], &program.kernels[0].schedules[0]));
    }
}
