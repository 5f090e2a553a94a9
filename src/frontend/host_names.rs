//! The scalars a function's host code defines, named apart.
//!
//! C lets two sibling blocks each define `s` (two host loops, each `int s = 2 * t;`), and two
//! loops counting down each have a counter `t`, which the parser turns into `int t = T -
//! t_down;` in the loop's body. The tool passes every scalar the host defines to the kernels
//! as a parameter of its name, so two such definitions would be one parameter with two values.
//!
//! Contract: [`distinct`] runs on the parsed program, before anything else reads it. Outside
//! the schedules, a definition whose name an earlier host definition or host loop counter of
//! the function already has (in a block that has ended, since C refuses it in an open one and
//! so does the semantic check) is renamed `name_2`, `name_3`, ... (the first name no identifier
//! of the file has), together with every use in the rest of its block; a host loop counter
//! named as an earlier definition likewise, with the uses in its loop. Two host loops with one
//! counter name stay as they are: each schedule has its own counters. A name defined again
//! while the first definition is still in scope is left for the semantic check to refuse.
//! Programs without such names are unchanged.

use super::ast::*;
use std::collections::HashSet;

/// Renames, in each function, the host definitions that repeat an earlier one's name.
pub fn distinct(program: &mut Program) {
    let mut taken = program_identifiers(program);
    for f in &mut program.functions {
        let mut seen = Seen::default();
        seen.visible.push(f.params.iter().map(|p| p.name.name.clone()).collect());
        block(&mut f.body, &mut seen, &mut taken);
    }
}

/// The names the host code of one function has defined so far, and those of its open blocks.
#[derive(Default)]
struct Seen {
    definitions: HashSet<String>,
    counters: HashSet<String>,
    visible: Vec<HashSet<String>>,
}

impl Seen {
    /// Whether `name` is defined in an open block: a second definition there is C's error
    /// (or a shadowing the semantic check refuses), said there, so left as it is.
    fn is_visible(&self, name: &str) -> bool {
        self.visible.iter().any(|scope| scope.contains(name))
    }

    fn define(&mut self, name: &str) {
        self.visible.last_mut().expect("a block is open").insert(name.to_string());
    }

    fn nested(&mut self, stmts: &mut [Stmt], taken: &mut HashSet<String>) {
        self.visible.push(HashSet::new());
        block(stmts, self, taken);
        self.visible.pop();
    }
}

fn fresh(name: &str, taken: &mut HashSet<String>) -> String {
    let mut k = 2;
    loop {
        let candidate = format!("{name}_{k}");
        if taken.insert(candidate.clone()) {
            return candidate;
        }
        k += 1;
    }
}

fn block(stmts: &mut [Stmt], seen: &mut Seen, taken: &mut HashSet<String>) {
    for i in 0..stmts.len() {
        let (head, rest) = stmts.split_at_mut(i + 1);
        match &mut head[i].kind {
            StmtKind::Decl { vars, .. } => {
                for j in 0..vars.len() {
                    let name = vars[j].name.name.clone();
                    if seen.is_visible(&name) || !(seen.definitions.contains(&name) || seen.counters.contains(&name)) {
                        seen.definitions.insert(name.clone());
                        seen.define(&name);
                        continue;
                    }
                    let new = fresh(&name, taken);
                    vars[j].name.name = new.clone();
                    seen.definitions.insert(new.clone());
                    seen.define(&new);
                    vars[j + 1..].iter_mut().for_each(|d| rename_expr(&mut d.init, &name, &new));
                    rest.iter_mut().for_each(|s| rename_stmt(s, &name, &new));
                }
            }
            StmtKind::Block(items) => seen.nested(items, taken),
            StmtKind::For(l) => {
                if seen.definitions.contains(&l.var.name) && !seen.is_visible(&l.var.name) {
                    let (name, new) = (l.var.name.clone(), fresh(&l.var.name, taken));
                    l.var.name = new.clone();
                    rename_stmt(&mut l.body, &name, &new);
                }
                seen.counters.insert(l.var.name.clone());
                seen.visible.push(HashSet::from([l.var.name.clone()]));
                seen.nested(std::slice::from_mut(&mut l.body), taken);
                seen.visible.pop();
            }
            StmtKind::If { then_branch, else_branch, .. } => {
                seen.nested(std::slice::from_mut(then_branch), taken);
                if let Some(e) = else_branch {
                    seen.nested(std::slice::from_mut(e), taken);
                }
            }
            _ => {}
        }
    }
}

/// Every read of `from` in `s` (schedules included) made a read of `to`. The semantic check
/// refuses a name that shadows an outer one, so every `from` here is the renamed definition.
fn rename_stmt(s: &mut Stmt, from: &str, to: &str) {
    match &mut s.kind {
        StmtKind::Decl { vars, .. } => vars.iter_mut().for_each(|d| rename_expr(&mut d.init, from, to)),
        StmtKind::LocalArray { dims, init, .. } => {
            dims.iter_mut().for_each(|d| rename_expr(d, from, to));
            if let Some(init) = init {
                rename_init(init, from, to);
            }
        }
        StmtKind::Assign { target, value, .. } => {
            rename_expr(target, from, to);
            rename_expr(value, from, to);
        }
        StmtKind::If { cond, then_branch, else_branch } => {
            rename_expr(cond, from, to);
            rename_stmt(then_branch, from, to);
            if let Some(e) = else_branch {
                rename_stmt(e, from, to);
            }
        }
        StmtKind::Block(items) => items.iter_mut().for_each(|x| rename_stmt(x, from, to)),
        StmtKind::For(l) | StmtKind::MetaFor(l) => {
            rename_expr(&mut l.lo, from, to);
            rename_expr(&mut l.hi, from, to);
            rename_stmt(&mut l.body, from, to);
        }
        StmtKind::MetaSchedule { body, .. } => rename_stmt(body, from, to),
        StmtKind::Assume(e) | StmtKind::Assert(e) => rename_expr(e, from, to),
        StmtKind::Empty | StmtKind::Barrier => {}
    }
}

fn rename_init(init: &mut Init, from: &str, to: &str) {
    match init {
        Init::Value(e) => rename_expr(e, from, to),
        Init::List(items, _) => items.iter_mut().for_each(|i| rename_init(i, from, to)),
    }
}

fn rename_expr(e: &mut Expr, from: &str, to: &str) {
    crate::strategy::walk::map_expr(e, &mut |x| {
        if let ExprKind::Var(v) = &mut x.kind {
            if v == from {
                *v = to.to_string();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    fn derived_names(src: &str) -> Vec<String> {
        let program = crate::frontend::check_source("t.mf", src).unwrap_or_else(|d| panic!("{d:?}"));
        program.kernels[0].derived.iter().map(|d| format!("{} = {}", d.name, d.value)).collect()
    }

    #[test]
    fn sibling_definitions_and_counting_down_loops_get_names_of_their_own() {
        let src = "void k(int T, int n, int s_2, float c[n]) {
  assume(T >= 0 && n >= 1);
  for (int t = T; t >= 0; t--) {
    int s = 2 * t;
    meta_schedule { meta_for (int v = 0; v < n; v++) meta_for (int u = 0; u < 1; u++) c[v] += (float)(s + t); }
  }
  for (int t = T; t > 1; t -= 2) {
    int s = t + 7;
    meta_schedule { meta_for (int v = 0; v < n; v++) meta_for (int u = 0; u < 1; u++) c[v] *= (float)(s - t); }
  }
}
";
        // `s_2` is a parameter's name: the second `s` is `s_3`.
        assert_eq!(derived_names(src), ["t = T - t_down", "s = 2 * t", "t_2 = T - t_down2", "s_3 = t_2 + 7"]);
        // Unchanged where no name repeats.
        assert_eq!(derived_names(&src.replace("int s = t + 7", "int r = t + 7").replace("s - t", "r - t").replace("(int t = T; t > 1; t -= 2)", "(int w = T; w > 1; w -= 2)").replace("t + 7", "w + 7").replace("r - t", "r - w")), ["t = T - t_down", "s = 2 * t", "w = T - w_down", "r = w + 7"]);
    }
}
