//! Register blocking (issue 27.1): a thread's granularity loop `for (w = 0; w < g; w++)`,
//! for one value `g == K`, unrolled K times and jammed into the serial loops of its body. Each
//! inner iteration then does the work of all K copies one after the other: an operand every
//! copy reads at the same subscript is read once (CSE keeps it in a register), and each copy's
//! accumulator is a register of its own (CSE's scalar replacement), so one shared-memory load
//! feeds K multiply-adds instead of one.
//!
//! Contract: [`block`] returns the code, or `None` when the thread's work list (found as
//! granularity reduction finds it) is not such a loop over a program parameter `g`, its
//! iterations are not proved independent (granularity reduction's proof: no two iterations
//! touch an element one of them writes, no scalar is carried from one to the next), or
//! `K < 2`. Where `g == K` the result computes what the original does: the iterations are
//! independent, so any order of their statements that keeps each iteration's own order gives
//! the same memory, and jamming keeps it (a copy's statements before a jammed loop, then its
//! iterations in order, then its statements after). Locals a copy declares are renamed per
//! copy. The tree adds `g == K` to the region where the code runs.

use super::granularity::independent_work;
use super::syntax::stmt;
use super::walk::{body_items as body_of, map_stmt_exprs};
use crate::frontend::ast::*;
use crate::frontend::model::KernelFunction;
use crate::kernel::Kernel;
use constraints::solver::Backend;
use std::collections::HashMap;

/// The values of `g` the tree specialises for, most registers first.
pub const BLOCKING_FACTORS: [i64; 2] = [8, 4];

/// The program parameter the thread's granularity loop runs to, when the code has such a loop
/// whose iterations are independent.
pub fn granularity_of(function: &KernelFunction, kernel: &Kernel, backend: &Backend) -> Result<Option<String>, String> {
    let Some(work) = independent_work(function, kernel, backend)? else { return Ok(None) };
    let Some(l) = work.the_loop(&kernel.body) else { return Ok(None) };
    Ok(blockable(function, &l))
}

fn blockable(function: &KernelFunction, l: &ForLoop) -> Option<String> {
    let ExprKind::Var(g) = &l.hi.kind else { return None };
    let starts_at_zero = matches!(l.lo.kind, ExprKind::Int(0));
    let has_inner_loop = body_of(&l.body).iter().any(|s| matches!(s.kind, StmtKind::For(_)));
    (starts_at_zero && l.step == 1 && !l.inclusive && has_inner_loop && function.program_parameters().contains(g)).then(|| g.clone())
}

/// The code with its granularity loop blocked by `k` (see the module's contract).
pub fn block(function: &KernelFunction, kernel: &Kernel, backend: &Backend, k: i64) -> Result<Option<Kernel>, String> {
    if k < 2 {
        return Ok(None);
    }
    let Some(work) = independent_work(function, kernel, backend)? else { return Ok(None) };
    let Some(l) = work.the_loop(&kernel.body) else { return Ok(None) };
    if blockable(function, &l).is_none() {
        return Ok(None);
    }
    let copies: Vec<Vec<Stmt>> = (0..k).map(|i| copy(&body_of(&l.body), &l.var.name, i)).collect();
    let mut out = kernel.clone();
    let list = work.list(&mut out.body);
    list[work.index()] = stmt(StmtKind::Block(jam(copies)));
    Ok(Some(out))
}


/// Iteration `i` of the loop over `var`: `var` replaced by `i`, and every name the body
/// declares renamed for this copy.
fn copy(body: &[Stmt], var: &str, i: i64) -> Vec<Stmt> {
    copy_with(body, i, &|v| (v == var).then_some(ExprKind::Int(i)))
}

/// Copy `i` of `body`: every variable `replace` maps replaced by its value (an expression
/// that is not visited again), and every name the body declares renamed for this copy.
pub(super) fn copy_with(body: &[Stmt], i: i64, replace: &dyn Fn(&str) -> Option<ExprKind>) -> Vec<Stmt> {
    let mut names: HashMap<String, String> = HashMap::new();
    for s in body {
        declared(s, &mut |n| {
            names.insert(n.to_string(), copy_name(n, i));
        });
    }
    body.iter()
        .map(|s| {
            let mut s = s.clone();
            rename(&mut s, &names);
            map_stmt_exprs(&mut s, &mut |x| {
                let replacement = match &x.kind {
                    ExprKind::Var(v) => replace(v).or_else(|| names.get(v).map(|n| ExprKind::Var(n.clone()))),
                    _ => None,
                };
                if let Some(r) = replacement {
                    x.kind = r;
                }
            });
            s
        })
        .collect()
}

/// Copy `i`'s name for a local: the tool's own (internal, spelled `metafork_...`, or readable
/// like `c_reg`, spelled `c_reg_b1` where free), never a name a user could write.
fn copy_name(name: &str, i: i64) -> String {
    let internal = crate::names::INTERNAL;
    match name.strip_prefix(internal) {
        Some(rest) => match rest.strip_prefix(':') {
            Some(stem) => crate::names::readable(&format!("{stem}_b{i}")),
            None => crate::names::internal(&format!("{rest}_b{i}")),
        },
        None => crate::names::internal(&format!("{name}_b{i}")),
    }
}

fn declared(s: &Stmt, f: &mut dyn FnMut(&str)) {
    match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| f(&d.name.name)),
        StmtKind::For(l) => {
            f(&l.var.name);
            declared(&l.body, f);
        }
        StmtKind::Block(items) => items.iter().for_each(|x| declared(x, f)),
        StmtKind::If { then_branch, else_branch, .. } => {
            declared(then_branch, f);
            if let Some(e) = else_branch {
                declared(e, f);
            }
        }
        _ => {}
    }
}

/// Declarations and loop counters renamed (their uses are renamed by the caller).
fn rename(s: &mut Stmt, names: &HashMap<String, String>) {
    match &mut s.kind {
        StmtKind::Decl { vars, .. } => vars.iter_mut().for_each(|d| {
            if let Some(n) = names.get(&d.name.name) {
                d.name.name = n.clone();
            }
        }),
        StmtKind::For(l) => {
            if let Some(n) = names.get(&l.var.name) {
                l.var.name = n.clone();
            }
            rename(&mut l.body, names);
        }
        StmtKind::Block(items) => items.iter_mut().for_each(|x| rename(x, names)),
        StmtKind::If { then_branch, else_branch, .. } => {
            rename(then_branch, names);
            if let Some(e) = else_branch {
                rename(e, names);
            }
        }
        _ => {}
    }
}

/// The copies' statements, position by position: loops with the same bounds in every copy
/// become one loop (copy 0's counter) over the jammed bodies, blocks in every copy one block
/// of their jammed contents; anything else comes copy by copy. Each copy's statements keep
/// their order, so where the copies are independent the result computes the same.
pub(super) fn jam(copies: Vec<Vec<Stmt>>) -> Vec<Stmt> {
    let n = copies.first().map_or(0, Vec::len);
    if copies.iter().any(|c| c.len() != n) {
        return copies.into_iter().flatten().collect();
    }
    let mut out = Vec::new();
    for j in 0..n {
        let blocks: Option<Vec<Vec<Stmt>>> = copies.iter().map(|c| if let StmtKind::Block(items) = &c[j].kind { Some(items.clone()) } else { None }).collect();
        if let Some(contents) = blocks {
            out.push(stmt(StmtKind::Block(jam(contents))));
            continue;
        }
        let loops: Option<Vec<&ForLoop>> = copies.iter().map(|c| if let StmtKind::For(l) = &c[j].kind { Some(l) } else { None }).collect();
        let same = loops.as_ref().is_some_and(|ls| ls.iter().all(|l| l.lo == ls[0].lo && l.hi == ls[0].hi && l.step == ls[0].step && l.inclusive == ls[0].inclusive && l.ty == ls[0].ty));
        match loops {
            Some(ls) if same => {
                let first = ls[0];
                let bodies: Vec<Vec<Stmt>> = ls
                    .iter()
                    .map(|l| {
                        let renamed: HashMap<String, String> = HashMap::from([(l.var.name.clone(), first.var.name.clone())]);
                        body_of(&l.body)
                            .into_iter()
                            .map(|mut s| {
                                map_stmt_exprs(&mut s, &mut |x| {
                                    let replacement = match &x.kind {
                                        ExprKind::Var(v) => renamed.get(v).cloned(),
                                        _ => None,
                                    };
                                    if let Some(n) = replacement {
                                        x.kind = ExprKind::Var(n);
                                    }
                                });
                                s
                            })
                            .collect()
                    })
                    .collect();
                let mut jammed = first.clone();
                jammed.body = Box::new(stmt(StmtKind::Block(jam(bodies))));
                out.push(stmt(StmtKind::For(jammed)));
            }
            _ => out.extend(copies.iter().map(|c| c[j].clone())),
        }
    }
    out
}
