//! A function's body as host C++, printed from its own statements: the serial program (every
//! `meta_for` a sequential loop), or the same with schedules replaced by launches.
//!
//! Contract: [`HostPrinter`] prints statements in source order, names through [`HostExprs`]
//! (the spelling every generated file uses); for each `meta_schedule` (numbered in source
//! order) it asks its `schedule` callback first, which may print a launch in its place, and
//! otherwise prints the schedule's loops serially; a failing `assume`/`assert` becomes
//! `if (!(cond)) <fact_failed(stmt)>`. Used by gpu-check's check programs, the tuning
//! harness's answer, and the generated host driver ([`driver`]).

use crate::emit::cuda::{launch_params, HostExprs};
use crate::frontend::ast::{AssignOp, Expr, ExprKind, Stmt, StmtKind, UnOp};
use crate::frontend::model::KernelFunction;
use crate::tree::Tree;
use crate::names::{c_comment, c_ident, c_string};
use std::fmt::Write;

/// Prints schedule `k` at `pad` into the output instead of its serial loops (`Ok(true)`), or
/// leaves it serial (`Ok(false)`).
pub type ScheduleHook<'a> = dyn Fn(usize, &str, &mut String) -> Result<bool, String> + 'a;
/// The statement that runs when a fact fails.
pub type FactHook<'a> = dyn Fn(&Stmt) -> String + 'a;

pub struct HostPrinter<'f> {
    x: HostExprs<'f>,
    schedule: &'f ScheduleHook<'f>,
    fact_failed: &'f FactHook<'f>,
    /// Print a reduction's update as `METAFORK_REDUCE(target, value);` (gpu-check's programs
    /// define it, to run the serial program once more for the rounding bound) instead of `+=`.
    reduce_macro: bool,
    /// Evaluate each fact the dispatcher can as the dispatcher does (64-bit, checked: an
    /// overflow or a division by zero makes it false), with the dispatch header's helpers;
    /// integer scalars and loop bounds likewise, each step checked in the type C computes it
    /// in ([`crate::dispatch::facts::FactSet::as_c_computes`]).
    checked_facts: Option<crate::dispatch::facts::FactSet>,
    /// The function's integer locals (host loop counters, definitions in host loops), which
    /// a checked expression may name: see [`crate::dispatch::facts::FactSet::as_c_computes`].
    integer_locals: std::collections::HashMap<String, crate::frontend::ast::ScalarType>,
    /// The statement that runs when a derived scalar cannot be computed in its type (given
    /// the C string literal saying why); with `checked_facts`.
    value_failed: Option<&'f dyn Fn(&str) -> String>,
}

impl<'f> HostPrinter<'f> {
    pub fn new(function: &'f KernelFunction, schedule: &'f ScheduleHook<'f>, fact_failed: &'f FactHook<'f>) -> HostPrinter<'f> {
        HostPrinter { x: HostExprs::new(function), schedule, fact_failed, reduce_macro: false, checked_facts: None, integer_locals: Default::default(), value_failed: None }
    }

    /// Facts and integer derived scalars evaluated with the dispatcher's checked arithmetic
    /// (see the field); `value_failed` runs where a derived scalar's value leaves its type.
    /// The program must include a dispatch header.
    pub fn with_checked_facts(mut self, function: &KernelFunction, facts: crate::dispatch::facts::FactSet, value_failed: &'f dyn Fn(&str) -> String) -> HostPrinter<'f> {
        self.integer_locals = integer_locals(function);
        self.checked_facts = Some(facts);
        self.value_failed = Some(value_failed);
        self
    }

    /// Reductions' updates printed through `METAFORK_REDUCE` (see the field).
    pub fn with_reduce_macro(mut self) -> HostPrinter<'f> {
        self.reduce_macro = true;
        self
    }

    /// `body` at `depth` (two spaces a level), schedules numbered from 0.
    pub fn body(&self, body: &[Stmt], depth: usize, out: &mut String) -> Result<(), String> {
        self.items(body, depth, &mut 0, out)
    }

    fn items(&self, body: &[Stmt], depth: usize, next: &mut usize, out: &mut String) -> Result<(), String> {
        body.iter().try_for_each(|s| self.stmt(s, depth, next, out))
    }

    /// A branch or loop body one level deeper, without an extra brace level.
    fn nested(&self, st: &Stmt, depth: usize, next: &mut usize, out: &mut String) -> Result<(), String> {
        match &st.kind {
            StmtKind::Block(items) => self.items(items, depth + 1, next, out),
            _ => self.stmt(st, depth + 1, next, out),
        }
    }

    fn stmt(&self, s: &Stmt, depth: usize, next: &mut usize, out: &mut String) -> Result<(), String> {
        let x = &self.x;
        let pad = "  ".repeat(depth);
        match &s.kind {
            StmtKind::Empty => {}
            StmtKind::Barrier => return Err("a barrier in a function body".into()),
            StmtKind::LocalArray { name, .. } => return Err(format!("per-thread array `{}` was not made scalars", name.name)),
            StmtKind::Block(items) => {
                let _ = writeln!(out, "{pad}{{");
                self.items(items, depth + 1, next, out)?;
                let _ = writeln!(out, "{pad}}}");
            }
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    let n = x.name(&d.name.name);
                    // A derived scalar computed as the dispatcher computes it (`N / B` at `B == 0`
                    // or `INT_MIN / -1` would trap), refused where its value leaves its type.
                    // Each operation as C performs it: one that leaves `int` is undefined in the
                    // program, and the launch's own `int` arithmetic would disagree.
                    let checked = self.checked_facts.as_ref().filter(|_| ty.is_integer()).and_then(|f| Some((f, f.as_c_computes(&d.init, &self.integer_locals)?)));
                    match (checked, self.value_failed, ty.integer_range()) {
                        (Some((facts, init)), Some(failed), Some((least, most))) => {
                            let why = c_string(&format!("{ty} {} = {} is undefined here (a division by zero, or a value outside `{ty}` or outside the type C computes a step in, such as `int` for `int * int`)", d.name.name, d.init));
                            let range = if *ty == crate::frontend::ast::ScalarType::Long { String::new() } else { format!(" || metafork_v < {least}LL || metafork_v > {most}LL") };
                            let _ = writeln!(out, "{pad}{ty} {n} __attribute__((__unused__));\n{pad}{{\n{pad}  int metafork_ok = 1;\n{pad}  const long long metafork_v = {};\n{pad}  if (!metafork_ok{range}) {{ {} }}\n{pad}  {n} = ({ty})metafork_v;\n{pad}}}", facts.cpp_of(&init, "metafork_ok"), failed(&why));
                        }
                        _ => {
                            let _ = writeln!(out, "{pad}{ty} {n} __attribute__((__unused__)) = {};", x.expr(&d.init)?);
                        }
                    }
                }
            }
            StmtKind::Assign { target, op: AssignOp::AtomicAdd, value } if self.reduce_macro => {
                let _ = writeln!(out, "{pad}METAFORK_REDUCE({}, {});", x.expr(target)?, x.expr(value)?);
            }
            StmtKind::Assign { target, op, value } => {
                let _ = writeln!(out, "{pad}{} {} {};", x.expr(target)?, op.c_symbol(), x.expr(value)?);
            }
            StmtKind::Assume(c) | StmtKind::Assert(c) => match self.checked_facts.as_ref().filter(|f| f.compile(c).is_ok()) {
                // `N % B` with `B == 0`, or a product past `int`, makes the fact false, as in
                // the dispatcher, where plain C would trap or wrap.
                Some(facts) => {
                    let _ = writeln!(out, "{pad}{{
{pad}  int metafork_ok = 1;
{pad}  const long long metafork_v = {};
{pad}  if (!metafork_ok || metafork_v == 0) {{ {} }}
{pad}}}", facts.cpp_of(c, "metafork_ok"), (self.fact_failed)(s));
                }
                None => {
                    let _ = writeln!(out, "{pad}if (!({})) {{ {} }}", x.expr(c)?, (self.fact_failed)(s));
                }
            },
            StmtKind::If { cond, then_branch, else_branch } => {
                let _ = writeln!(out, "{pad}if ({}) {{", x.expr(cond)?);
                self.nested(then_branch, depth, next, out)?;
                if let Some(e) = else_branch {
                    let _ = writeln!(out, "{pad}}} else {{");
                    self.nested(e, depth, next, out)?;
                }
                let _ = writeln!(out, "{pad}}}");
            }
            StmtKind::For(l) | StmtKind::MetaFor(l) => {
                let v = x.name(&l.var.name);
                let step = if l.step == 1 { format!("{v}++") } else { format!("{v} += {}", l.step) };
                // Bounds the dispatcher's rules can compute are computed once, checked (`N / M`
                // at `M == 0` would trap before any launch could refuse the point).
                let renders = |e: &Expr| self.checked_facts.as_ref().filter(|_| l.ty.is_integer()).and_then(|f| Some((f, f.as_c_computes(e, &self.integer_locals)?)));
                // (A bound without arithmetic, `0` or `T`, is defined: printed as written; but a
                // loop `t <= T` or `t += 2` may step its counter past its type after the last
                // iteration, at `T` = INT_MAX: checked too.)
                let arithmetic = l.inclusive || l.step != 1 || [&l.lo, &l.hi].iter().any(|e| {
                    let mut found = false;
                    crate::frontend::ast::walk_expr(e, &mut |x| found |= matches!(x.kind, ExprKind::Binary(op, _, _) if !op.is_comparison() && !op.is_logical()) || matches!(x.kind, ExprKind::Unary(UnOp::Neg, _)));
                    found
                });
                match (renders(&l.lo).filter(|_| arithmetic), renders(&l.hi), self.value_failed, l.ty.integer_range()) {
                    (Some((facts, lo)), Some((_, hi)), Some(failed), Some((least, most))) => {
                        let why = c_string(&format!("the bounds of loop `{}` ({} to {}) are undefined here (a division by zero, or a value outside `{}` or outside the type C computes a step in, such as `int` for `int * int`)", l.var.name, l.lo, l.hi, l.ty));
                        let range = if l.ty == crate::frontend::ast::ScalarType::Long { String::new() } else { format!(" || metafork_lo < {least}LL || metafork_lo > {most}LL || metafork_hi < {least}LL || metafork_hi > {most}LL") };
                        let _ = writeln!(out, "{pad}{{
{pad}  int metafork_ok = 1;
{pad}  const long long metafork_lo = {}, metafork_hi = {};
{pad}  if (!metafork_ok{range}) {{ {} }}", facts.cpp_of(&lo, "metafork_ok"), facts.cpp_of(&hi, "metafork_ok"), failed(&why));
                        // The counter's value after the last iteration, `last + step`, must fit.
                        let last = if l.inclusive { "metafork_hi" } else { "metafork_hi - 1" };
                        let step_past = c_string(&format!("loop `{}` ({} to {}) steps its counter past `{}` after its last iteration", l.var.name, l.lo, l.hi, l.ty));
                        // (In `long long`, which holds every `int` step: a `long` counter is
                        // not checked.)
                        if l.ty != crate::frontend::ast::ScalarType::Long {
                            let _ = writeln!(out, "{pad}  if (metafork_lo <= {last} && metafork_lo + (({last} - metafork_lo) / {step}) * {step} > {most}LL - {step}) {{ {} }}", failed(&step_past), step = l.step);
                        }
                        let _ = writeln!(out, "{pad}  for ({} {v} = ({})metafork_lo; {v} {} ({})metafork_hi; {step}) {{", l.ty, l.ty, if l.inclusive { "<=" } else { "<" }, l.ty);
                        self.nested(&l.body, depth + 1, next, out)?;
                        let _ = writeln!(out, "{pad}  }}\n{pad}}}");
                    }
                    _ => {
                        let _ = writeln!(out, "{pad}for ({} {v} = {}; {v} {} {}; {step}) {{", l.ty, x.expr(&l.lo)?, if l.inclusive { "<=" } else { "<" }, x.expr(&l.hi)?);
                        self.nested(&l.body, depth, next, out)?;
                        let _ = writeln!(out, "{pad}}}");
                    }
                }
            }
            StmtKind::MetaSchedule { body, .. } => {
                let k = *next;
                *next += 1;
                if !(self.schedule)(k, &pad, out)? {
                    let _ = writeln!(out, "{pad}{{  // schedule {k}, serial");
                    self.nested(body, depth, next, out)?;
                    let _ = writeln!(out, "{pad}}}");
                }
            }
        }
        Ok(())
    }
}

/// The `k`-th `meta_schedule` (source order) of `function`'s body as serial host C++ at
/// `depth`: every `meta_for` a sequential loop; a failing fact returns -1; a reduction's update
/// through `METAFORK_REDUCE` when `reduce_macro` (the caller's program defines it).
pub fn serial_schedule(function: &KernelFunction, k: usize, depth: usize, reduce_macro: bool, out: &mut String) -> Result<(), String> {
    fn find<'s>(body: &'s [Stmt], k: usize, seen: &mut usize) -> Option<&'s Stmt> {
        for s in body {
            let found = match &s.kind {
                StmtKind::MetaSchedule { .. } => {
                    *seen += 1;
                    (*seen == k + 1).then_some(s)
                }
                StmtKind::Block(items) => find(items, k, seen),
                StmtKind::If { then_branch, else_branch, .. } => find(std::slice::from_ref(&**then_branch), k, seen).or_else(|| else_branch.as_ref().and_then(|e| find(std::slice::from_ref(&**e), k, seen))),
                StmtKind::For(l) | StmtKind::MetaFor(l) => find(std::slice::from_ref(&*l.body), k, seen),
                _ => None,
            };
            if found.is_some() {
                return found;
            }
        }
        None
    }
    let stmt = find(&function.body, k, &mut 0).ok_or_else(|| format!("the function has no schedule {k}"))?;
    let serial = |_: usize, _: &str, _: &mut String| Ok(false);
    let fact = |_: &Stmt| "return -1; /* outside the program's facts */".to_string();
    let printer = HostPrinter::new(function, &serial, &fact);
    let printer = if reduce_macro { printer.with_reduce_macro() } else { printer };
    printer.stmt(stmt, depth, &mut k.clone(), out)
}

/// The generated host driver of `function`: `metafork_run_<function>.h` and `.cu`, as (file
/// name, text) pairs. `trees` holds each schedule's tree (its name, and its root kernel's launch
/// parameters), in source order. `metafork_run_<f>(params..., stream, &cuda_error, &detail)` runs the whole
/// function on the current device: the host statements and serial loops on the host, every
/// schedule through its dispatcher (`metafork_<s>_launch`), arrays as device pointers; it
/// returns 0, or the first negative `METAFORK_*` status with `detail` naming the schedule and
/// the cause (nothing after it is launched).
pub fn driver(source: &str, function: &KernelFunction, trees: &[&Tree]) -> Result<Vec<(String, String)>, String> {
    if trees.len() != function.schedules.len() {
        return Err(format!("`{}`: {} schedules but {} trees", function.name, function.schedules.len(), trees.len()));
    }
    let f = c_ident(&function.name);
    let params: Vec<String> = function
        .params
        .iter()
        // Arrays as the program spells their types (`char *`, `long long *`): what a caller's
        // C++ passes (`cuda::launch_params`).
        .map(|p| match function.array(&p.name) {
            Some(a) => format!("{}{} *{}", if a.is_const { "const " } else { "" }, p.spelling, c_ident(&p.name)),
            None => format!("{} {}", p.ty, c_ident(&p.name)),
        })
        .chain(["cudaStream_t metafork_stream", "cudaError_t *metafork_cuda_error", "const char **metafork_detail"].map(String::from))
        .collect();
    let signature = format!("extern \"C\" int metafork_run_{f}({})", params.join(", "));
    let mut h = String::new();
    let _ = writeln!(h, "// Generated by metafork from {}: the host driver of function `{}`.", c_comment(source), c_comment(&function.name));
    let guard = format!("METAFORK_RUN_H_{f}");
    let _ = writeln!(h, "// Plain C++ (GCC or Clang); include <cuda_runtime.h> first (or compile with nvcc) to declare the driver.");
    let _ = writeln!(h, "#ifndef {guard}\n#define {guard}");
    for t in trees {
        let _ = writeln!(h, "#include \"{}_dispatch.h\"", t.schedule_name());
    }
    let _ = writeln!(h, "\n/* Run `{}` on the current device as the source does: its host statements and serial loops here, each", c_comment(&function.name));
    let _ = writeln!(h, "   schedule through its dispatcher; arrays are device pointers. Returns 0, or the first negative METAFORK_*");
    let _ = writeln!(h, "   status (METAFORK_CUDA_ERROR with *cuda_error set), with *detail naming the schedule and why; nothing after");
    let _ = writeln!(h, "   a failure is launched. `stream` orders every launch; the call does not wait for them. */");
    let _ = writeln!(h, "#if defined(__CUDACC__) || defined(CUDART_VERSION)\n{signature};\n#endif\n\n#endif /* {guard} */");
    let mut c = String::new();
    let _ = writeln!(c, "// Generated by metafork from {}: the host driver of function `{}`.", c_comment(source), c_comment(&function.name));
    let _ = writeln!(c, "// Link with every schedule's dispatch code and leaf kernels.");
    let _ = writeln!(c, "#include <cuda_runtime.h>\n#include <cstdio>\n#include \"metafork_run_{f}.h\"\n");
    let _ = writeln!(c, "{signature} {{");
    let _ = writeln!(c, "  cudaError_t metafork_ignored;\n  if (!metafork_cuda_error) metafork_cuda_error = &metafork_ignored;\n  *metafork_cuda_error = cudaSuccess;");
    let _ = writeln!(c, "  static thread_local char metafork_message[512];\n  const char *metafork_why = \"\";\n  if (metafork_detail) *metafork_detail = \"\";");
    let schedule = |k: usize, pad: &str, out: &mut String| -> Result<bool, String> {
        let name = trees[k].schedule_name();
        let args: Vec<String> = launch_params(function, &trees[k].nodes[0].code).into_iter().map(|(_, n)| n).chain(["metafork_stream", "metafork_cuda_error", "&metafork_why"].map(String::from)).collect();
        let _ = writeln!(out, "{pad}{{  // schedule `{}`, through its dispatcher", c_comment(name));
        let _ = writeln!(out, "{pad}  const int metafork_status = metafork_{name}_launch({});", args.join(", "));
        let _ = writeln!(out, "{pad}  if (metafork_status < 0) {{\n{pad}    snprintf(metafork_message, sizeof metafork_message, \"schedule %s: %s%s%s\", {}, metafork_status_string(metafork_status), *metafork_why ? \": \" : \"\", metafork_why);", c_string(name));
        let _ = writeln!(out, "{pad}    if (metafork_detail) *metafork_detail = metafork_message;\n{pad}    return metafork_status;\n{pad}  }}\n{pad}}}");
        Ok(true)
    };
    let fact = |s: &Stmt| {
        let (status, what, c) = match &s.kind {
            StmtKind::Assert(c) => ("METAFORK_ASSERT_FAILED", "assert", c),
            StmtKind::Assume(c) => ("METAFORK_OUTSIDE_ASSUMPTIONS", "assume", c),
            _ => return "return METAFORK_OUTSIDE_ASSUMPTIONS;".to_string(),
        };
        // The fact as the program writes it: its names as the user spelled them, not as the
        // generated code must (`blockDim` is `mfu_blockDim` there).
        let text = format!("{what}({c})");
        format!("if (metafork_detail) *metafork_detail = {}; return {status};", c_string(&format!("{text} does not hold")))
    };
    let facts = crate::dispatch::facts::FactSet::of(function)?;
    let value_failed = |why: &str| format!("if (metafork_detail) *metafork_detail = {why}; return METAFORK_OUTSIDE_ASSUMPTIONS;");
    // C evaluates the array parameters' size expressions on entry (C11 6.9.1): one that
    // overflows (`a[N * N]` of an `int N` past 46340) makes the call undefined.
    for a in &function.arrays {
        for e in a.extent_exprs.iter().filter(|e| !matches!(e.kind, ExprKind::Var(_) | ExprKind::Int(_))) {
            let Some(checked) = facts.as_c_computes(e, &Default::default()) else { continue };
            let why = c_string(&format!("the extent {e} of array `{}` is undefined here (a division by zero, or a value outside the type C computes a step in, such as `int` for `int * int`)", a.name));
            let _ = writeln!(c, "  {{\n    int metafork_ok = 1;\n    const long long metafork_v = {};\n    (void)metafork_v;\n    if (!metafork_ok) {{ {} }}\n  }}", facts.cpp_of(&checked, "metafork_ok"), value_failed(&why));
        }
    }
    HostPrinter::new(function, &schedule, &fact).with_checked_facts(function, facts, &value_failed).body(&function.body, 1, &mut c)?;
    let _ = writeln!(c, "  (void)metafork_why;\n  return 0;\n}}");
    Ok(vec![(format!("metafork_run_{f}.h"), h), (format!("metafork_run_{f}.cu"), c)])
}

/// The names `function`'s body declares with an integer type only (host loop counters and
/// definitions) and never assigns: a name also declared with a floating type, or assigned
/// (a value a hoisted loop bound would miss), is left out.
fn integer_locals(function: &KernelFunction) -> std::collections::HashMap<String, crate::frontend::ast::ScalarType> {
    // Every declaration's type, then the names left out: assigned, or declared with a
    // floating type or with two types.
    let (mut declared, mut left_out) = (Vec::new(), std::collections::HashSet::new());
    crate::strategy::walk::walk_stmts(&function.body, &mut |s| match &s.kind {
        StmtKind::Assign { target: Expr { kind: ExprKind::Var(n), .. }, .. } => {
            left_out.insert(n.clone());
        }
        StmtKind::Decl { ty, vars } => declared.extend(vars.iter().map(|d| (d.name.name.clone(), *ty))),
        StmtKind::For(l) | StmtKind::MetaFor(l) => declared.push((l.var.name.clone(), l.ty)),
        _ => {}
    });
    let mut integer = std::collections::HashMap::new();
    for (n, ty) in declared {
        if !ty.is_integer() || *integer.entry(n.clone()).or_insert(ty) != ty {
            left_out.insert(n);
        }
    }
    integer.retain(|n, _| !left_out.contains(n));
    integer
}

/// The indices of `function`'s floating arrays some reduction adds to (an atomic add: its terms
/// may be added in any order, so its rounding differs from the serial program's).
pub fn reduced_arrays(function: &KernelFunction) -> Vec<usize> {
    let mut names = std::collections::BTreeSet::new();
    crate::strategy::walk::walk_stmts(&function.body, &mut |s| {
        if let StmtKind::Assign { target: Expr { kind: ExprKind::Index { array, .. }, .. }, op: AssignOp::AtomicAdd, .. } = &s.kind {
            names.insert(array.name.clone());
        }
    });
    function.arrays.iter().enumerate().filter(|(_, a)| names.contains(&a.name) && !a.elem.is_integer()).map(|(k, _)| k).collect()
}
