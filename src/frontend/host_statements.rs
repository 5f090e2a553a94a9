//! Statements on array data outside the schedules (`x[0] = 0;`, `if (...) y[n - 1] = ...;`, a
//! serial loop over an array between two schedules), run on the GPU by one thread.
//!
//! Contract: [`wrap`] runs on the parsed program, after `local_arrays` and before reductions
//! are marked. At the function's top level, in blocks there and in the bodies of serial loops
//! around schedules, each maximal run of consecutive assignments, `if` statements and serial
//! `for` loops that hold no `meta_schedule` becomes one schedule of one thread:
//! `meta_schedule { meta_for (int g = 0; g < 1; g++) meta_for (int t = 0; t < 1; t++) { run } }`
//! (counters named apart from every identifier of the file). The arrays live on the device, so
//! this is where such statements can run; one thread runs them in the program's order, and the
//! schedules before and after are separate launches, so the order of the whole function is the
//! serial program's. Everything later (the tree, kernels, dispatch, the driver, proofs) treats
//! the run as any schedule; a schedule of one thread has no program parameter, and `tune`
//! has nothing to choose for it. What such a run may not do is the semantic check's to say,
//! located as usual: assign a scalar defined outside it (scalars outside schedules are
//! definitions, computed on the host), or declare a local that code after the run reads.

use super::ast::*;
use super::source::Span;
use std::collections::HashSet;

/// Rewrites every run of statements on array data outside a schedule (see the module's
/// contract).
pub fn wrap(program: &mut Program) {
    if !program.functions.iter().any(|f| f.body.iter().any(host_statement_inside)) {
        return;
    }
    let mut taken = HashSet::new();
    for f in &program.functions {
        taken.insert(f.name.name.clone());
        f.params.iter().for_each(|p| {
            taken.insert(p.name.name.clone());
        });
        f.body.iter().for_each(|s| identifiers(s, &mut taken));
    }
    let mut names = Names { taken };
    for f in &mut program.functions {
        let body = std::mem::take(&mut f.body);
        f.body = runs(body, &mut names);
    }
}

/// Whether `s`, at host level, is or holds a statement this pass wraps.
fn host_statement_inside(s: &Stmt) -> bool {
    match &s.kind {
        _ if runs_on_device(s) => true,
        StmtKind::Block(b) => b.iter().any(host_statement_inside),
        StmtKind::For(l) => host_statement_inside(&l.body),
        _ => false,
    }
}

/// A statement a one-thread schedule runs: an assignment, or an `if` or serial loop holding no
/// schedule.
fn runs_on_device(s: &Stmt) -> bool {
    match &s.kind {
        StmtKind::Assign { .. } => true,
        StmtKind::If { .. } | StmtKind::For(_) => !holds_schedule(s),
        _ => false,
    }
}

fn holds_schedule(s: &Stmt) -> bool {
    let mut found = false;
    walk_stmt(s, &mut |x| found |= matches!(x.kind, StmtKind::MetaSchedule { .. }), &mut |_| {});
    found
}

struct Names {
    taken: HashSet<String>,
}

impl Names {
    fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 2;
        while self.taken.contains(&name) {
            name = format!("{base}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// The host-level list with each run wrapped; blocks and loops around schedules recursed into.
fn runs(stmts: Vec<Stmt>, names: &mut Names) -> Vec<Stmt> {
    let mut out = Vec::new();
    let mut run: Vec<Stmt> = Vec::new();
    for s in stmts {
        if runs_on_device(&s) {
            run.push(s);
            continue;
        }
        if !run.is_empty() {
            out.push(one_thread(std::mem::take(&mut run), names));
        }
        let span = s.span;
        let kind = match s.kind {
            StmtKind::Block(b) => StmtKind::Block(runs(b, names)),
            StmtKind::For(l) => {
                let body = *l.body;
                let body_span = body.span;
                let body = match body.kind {
                    StmtKind::Block(b) => Stmt { kind: StmtKind::Block(runs(b, names)), span: body_span },
                    other => Stmt { kind: StmtKind::Block(runs(vec![Stmt { kind: other, span: body_span }], names)), span: body_span },
                };
                StmtKind::For(ForLoop { body: Box::new(body), ..l })
            }
            other => other,
        };
        out.push(Stmt { kind, span });
    }
    if !run.is_empty() {
        out.push(one_thread(run, names));
    }
    out
}

/// `meta_schedule { meta_for (g < 1) meta_for (t < 1) { run } }`, spanning the run.
fn one_thread(run: Vec<Stmt>, names: &mut Names) -> Stmt {
    let span = run.iter().map(|s| s.span).reduce(Span::to).expect("a run is never empty");
    let int = |v: i64| Expr::new(ExprKind::Int(v), span);
    let meta_for = |var: String, body: Stmt| Stmt {
        kind: StmtKind::MetaFor(ForLoop { var: Ident { name: var, span }, ty: ScalarType::Int, lo: int(0), hi: int(1), inclusive: false, step: 1, body: Box::new(body) }),
        span,
    };
    let thread = meta_for(names.fresh("one_thread"), Stmt { kind: StmtKind::Block(run), span });
    let block = meta_for(names.fresh("one_block"), thread);
    Stmt { kind: StmtKind::MetaSchedule { cache: Vec::new(), body: Box::new(block) }, span }
}
