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
//! definitions, computed on the host). A scalar definition joins the run that needs it on the
//! device (its value reads an array, or the run assigns it) unless code after the run reads it;
//! then it stays on the host, and the semantic check says why it cannot be computed there.

use super::ast::*;
use super::source::Span;
use std::collections::HashSet;

/// Rewrites every run of statements on array data outside a schedule (see the module's
/// contract).
pub fn wrap(program: &mut Program) {
    if !program.functions.iter().any(|f| f.body.iter().any(host_statement_inside)) {
        return;
    }
    let mut names = program_identifiers(program);
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

/// The host-level list with each run wrapped; blocks and loops around schedules recursed into.
/// A scalar definition joins a run where the run needs it on the device (its value reads an
/// array, or a statement of the list after it assigns it: `float nrm = 0.0f;` before
/// `for (...) nrm += a[k][j] * a[k][j];`) and nothing after the run reads it.
fn runs(stmts: Vec<Stmt>, names: &mut HashSet<String>) -> Vec<Stmt> {
    let mut on_device: Vec<bool> = stmts.iter().enumerate().map(|(i, s)| runs_on_device(s) || device_definition(s, &stmts[i + 1..])).collect();
    // A definition read after its run stays on the host (where `sema` locates what it may not
    // do); splitting the run can expose another, so until nothing changes.
    loop {
        let mut changed = false;
        let mut start = 0;
        while start < stmts.len() {
            if !on_device[start] {
                start += 1;
                continue;
            }
            let end = (start..stmts.len()).find(|&i| !on_device[i]).unwrap_or(stmts.len());
            for i in start..end {
                if let StmtKind::Decl { vars, .. } = &stmts[i].kind {
                    if vars.iter().any(|v| stmts[end..].iter().any(|later| reads(later, &v.name.name))) {
                        on_device[i] = false;
                        changed = true;
                    }
                }
            }
            start = end;
        }
        if !changed {
            break;
        }
    }
    let mut out = Vec::new();
    let mut run: Vec<Stmt> = Vec::new();
    for (s, device) in stmts.into_iter().zip(on_device) {
        if device {
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

/// A scalar definition the device must hold: its value reads an array, or a statement of
/// `rest` that runs on the device assigns it.
fn device_definition(s: &Stmt, rest: &[Stmt]) -> bool {
    let StmtKind::Decl { vars, .. } = &s.kind else { return false };
    let reads_array = vars.iter().any(|v| {
        let mut found = false;
        walk_expr(&v.init, &mut |x| found |= matches!(x.kind, ExprKind::Index { .. }));
        found
    });
    reads_array || vars.iter().any(|v| rest.iter().filter(|r| runs_on_device(r)).any(|r| assigns(r, &v.name.name)))
}

/// Whether `s` assigns the scalar `name`.
fn assigns(s: &Stmt, name: &str) -> bool {
    let mut found = false;
    walk_stmt(s, &mut |x| found |= matches!(&x.kind, StmtKind::Assign { target, .. } if matches!(&target.kind, ExprKind::Var(v) if v == name)), &mut |_| {});
    found
}

/// Whether `s` reads or names `name` anywhere.
fn reads(s: &Stmt, name: &str) -> bool {
    let mut names = std::collections::HashSet::new();
    identifiers(s, &mut names);
    names.contains(name)
}

/// `meta_schedule { meta_for (g < 1) meta_for (t < 1) { run } }`, spanning the run.
fn one_thread(run: Vec<Stmt>, names: &mut HashSet<String>) -> Stmt {
    let span = run.iter().map(|s| s.span).reduce(Span::to).expect("a run is never empty");
    let int = |v: i64| Expr::new(ExprKind::Int(v), span);
    let meta_for = |var: String, body: Stmt| Stmt {
        kind: StmtKind::MetaFor(ForLoop { var: Ident { name: var, span }, ty: ScalarType::Int, lo: int(0), hi: int(1), inclusive: false, step: 1, body: Box::new(body) }),
        span,
    };
    let thread = meta_for(fresh_name(names, "one_thread"), Stmt { kind: StmtKind::Block(run), span });
    let block = meta_for(fresh_name(names, "one_block"), thread);
    Stmt { kind: StmtKind::MetaSchedule { cache: Vec::new(), body: Box::new(block) }, span }
}
