//! Semantic checks: scopes, types, placement rules, schedule structure, and the
//! classification of parameters. Produces a [`CheckedProgram`] or diagnostics.
//!
//! Rules enforced here (each with a diagnostic that points at the offending construct):
//! - names resolve in C's block scopes; a name is declared once per scope;
//! - array extents are polynomials in integer parameters declared earlier;
//! - arrays are indexed with exactly their number of subscripts, each an integer;
//! - `%` takes integer operands; only the listed math functions may be called;
//! - parameters, derived scalars and loop counters are never written; `const` arrays neither;
//! - outside a `meta_schedule` only `assume`, `assert`, integer scalar definitions and serial
//!   `for` loops around schedules may appear; `meta_for` only inside a schedule;
//! - a schedule is a perfect nest: a grid group and a block group of one to three `meta_for`
//!   loops each, optionally separated by serial `for` loops; a single group is split so that
//!   the inner loops whose extents are program parameters form the block.

use super::ast::*;
use super::boxed;
use super::diag::Diagnostic;
use super::model::*;
use super::polyexpr::{expanded_size, to_constraint, to_poly, try_to_poly, DerivedPolys, MAX_EXPANDED};
use super::source::Span;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The math functions a kernel may call, with their arity.
pub const ALLOWED_CALLS: &[(&str, usize)] = &[
    ("min", 2), ("max", 2), ("abs", 1), ("fminf", 2), ("fmaxf", 2), ("sqrt", 1), ("sqrtf", 1), ("exp", 1), ("expf", 1),
    ("fabs", 1), ("fabsf", 1), ("fmin", 2), ("fmax", 2), ("log", 1), ("logf", 1), ("pow", 2), ("powf", 2),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Param,
    Derived,
    HostLoop,
    KernelLoop,
    Local,
}

#[derive(Clone, Debug)]
enum Sym {
    Scalar { ty: ScalarType, origin: Origin },
    Array { ty: ScalarType, rank: usize, is_const: bool },
}

/// The longest function name accepted: the files named after it (schedules `<name>_<k>`, their
/// leaves `_leaf<N>`, a harness `_harness.cu`, the driver `metafork_run_<name>.cu`) stay within a
/// file name's 255 bytes with room for 9999 schedules and ten million leaves.
pub const MAX_FUNCTION_NAME: usize = 200;

pub fn check(program: &Program) -> Result<CheckedProgram, Vec<Diagnostic>> {
    let mut diags = Vec::new();
    let mut kernels = Vec::new();
    let mut seen: HashMap<&str, Span> = HashMap::new();
    let function_names: BTreeSet<String> = program.functions.iter().map(|f| f.name.name.clone()).collect();
    for f in &program.functions {
        if seen.insert(&f.name.name, f.name.span).is_some() {
            diags.push(Diagnostic::new(f.name.span, format!("function `{}` is defined twice", f.name.name), "second definition"));
            continue;
        }
        if f.name.name.chars().count() > MAX_FUNCTION_NAME {
            diags.push(Diagnostic::new(f.name.span, format!("function name of {} characters: the generated files are named after the function (`<name>_<schedule>_leaf<N>_harness.cu`), and a file name has at most 255 bytes", f.name.name.chars().count()), format!("at most {MAX_FUNCTION_NAME} characters")));
            continue;
        }
        let mut c = Checker { diags: Vec::new(), scopes: Vec::new(), derived: DerivedPolys::new(), divisors: Vec::new(), expanded: BTreeMap::new(), varying: BTreeSet::new(), guards: Vec::new(), data_params: BTreeSet::new(), function_names: &function_names };
        let k = c.function(f);
        diags.extend(c.diags);
        if let Some(k) = k {
            kernels.push(k);
        }
    }
    if diags.is_empty() {
        name_schedules(&mut kernels);
        Ok(CheckedProgram { kernels })
    } else {
        Err(diags)
    }
}

/// Schedule names, unique across the program (they name kernels, files and generated C
/// identifiers): a function's only schedule takes the function's name; the `i`-th of several
/// takes `<function>_<i>`, or, where that is a function's or an earlier schedule's name,
/// the first free one of `<function>_s<i>`, `<function>_s<i>_2`, `<function>_s<i>_3`, ...
/// A function whose name begins with `metafork` (the generated code's prefix: its kernels
/// would be named like another's launchers, `metafork_launch_<kernel>`) lends its schedules
/// the name with the escape prefix instead (`mfu_metafork_launch_a`, or the first free one of
/// `mfu_metafork_launch_a_2`, ...).
fn name_schedules(kernels: &mut [KernelFunction]) {
    let mut taken: BTreeSet<String> = kernels.iter().map(|k| k.name.clone()).collect();
    for k in kernels.iter_mut() {
        let reserved = k.name.to_ascii_lowercase().starts_with("metafork");
        let stem = if reserved { format!("{}{}", crate::names::ESCAPE, k.name) } else { k.name.clone() };
        if k.schedules.len() < 2 {
            if let (true, Some(s)) = (reserved, k.schedules.first_mut()) {
                s.name = fresh_name(&mut taken, &stem);
            }
            continue;
        }
        for (i, s) in k.schedules.iter_mut().enumerate() {
            let mut name = format!("{stem}_{i}");
            let mut attempt = 1;
            while taken.contains(&name) {
                name = if attempt == 1 { format!("{stem}_s{i}") } else { format!("{stem}_s{i}_{attempt}") };
                attempt += 1;
            }
            taken.insert(name.clone());
            s.name = name;
        }
    }
    // A schedule's launcher symbols are `metafork_<schedule>_<what>`, a function's host driver
    // is `metafork_run_<function>`: a schedule `run` (or `run_x`) beside a function `launch`
    // (or `x_launch`) would define one symbol twice. Such a schedule gets `mfu_` before its
    // name, which no driver's symbol continues with.
    let drivers: BTreeSet<String> = kernels.iter().map(|k| format!("run_{}", k.name)).collect();
    for s in kernels.iter_mut().flat_map(|k| k.schedules.iter_mut()) {
        if crate::names::SCHEDULE_SYMBOLS.iter().any(|what| drivers.contains(&format!("{}_{what}", s.name))) {
            s.name = fresh_name(&mut taken, &format!("{}{}", crate::names::ESCAPE, s.name));
        }
    }
}

/// `stem`, or `stem_2`, `stem_3`, ...: the first not in `taken`, which then holds it.
fn fresh_name(taken: &mut BTreeSet<String>, stem: &str) -> String {
    let mut name = stem.to_string();
    let mut attempt = 2;
    while taken.contains(&name) {
        name = format!("{stem}_{attempt}");
        attempt += 1;
    }
    taken.insert(name.clone());
    name
}

struct Checker<'a> {
    diags: Vec<Diagnostic>,
    scopes: Vec<HashMap<String, Sym>>,
    derived: DerivedPolys,
    /// Integer divisors that only parameters and derived scalars determine, as met.
    divisors: Vec<Expr>,
    /// Each derived scalar's size once expanded ([`expanded_size`]).
    expanded: BTreeMap<String, u64>,
    /// Host loop counters, and the derived scalars whose definitions read one: values that
    /// change during the call, so no fact may read them.
    varying: BTreeSet<String>,
    /// The conditions around the expression being checked, with whether each holds there
    /// (an `if`'s or `?:`'s branch, the right operand of `&&`/`||`): a division they guard
    /// (`M != 0 ? x / M : x`) needs no fact.
    guards: Vec<(Expr, bool)>,
    /// Integer parameters used in some array extent (set by `params`).
    data_params: BTreeSet<String>,
    function_names: &'a BTreeSet<String>,
}

/// What the host-level walk collects.
#[derive(Default)]
struct HostItems {
    derived: Vec<Derived>,
    facts: Vec<Fact>,
    schedules: Vec<Schedule>,
}

/// The names that size a thread loop (any name in a block loop's bounds) or divide the
/// extent of a grid loop or of a serial loop in the kernel (a name on the right of `/` or `%`
/// in its bounds: `(n + B - 1) / B`, `N / (ub1 * s)`, a tile loop's `K / TK`), derived scalars
/// followed to the names they are defined from.
fn tunable_parameters(schedules: &[Schedule], derived: &[Derived]) -> BTreeSet<String> {
    fn walk(e: &Expr, counts: bool, derived: &[Derived], seen: &mut BTreeSet<String>, out: &mut BTreeSet<String>) {
        match &e.kind {
            ExprKind::Binary(BinOp::Div | BinOp::Rem, a, b) => {
                walk(a, counts, derived, seen, out);
                walk(b, true, derived, seen, out);
            }
            ExprKind::Var(n) => match derived.iter().find(|d| &d.name == n) {
                // Each derived scalar once per position (its definition cannot name itself).
                Some(d) if seen.insert(format!("{counts}{n}")) => walk(&d.value, counts, derived, seen, out),
                Some(_) => {}
                None if counts => {
                    out.insert(n.clone());
                }
                None => {}
            },
            ExprKind::Binary(_, a, b) => [a, b].into_iter().for_each(|x| walk(x, counts, derived, seen, out)),
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => walk(a, counts, derived, seen, out),
            ExprKind::Cond(c, a, b) => [c, a, b].into_iter().for_each(|x| walk(x, counts, derived, seen, out)),
            ExprKind::Call(_, args) => args.iter().for_each(|x| walk(x, counts, derived, seen, out)),
            ExprKind::Index { indices, .. } => indices.iter().for_each(|x| walk(x, counts, derived, seen, out)),
            ExprKind::Int(_) | ExprKind::Float { .. } | ExprKind::Builtin(_) => {}
        }
    }
    /// The divisors in the bounds of the serial loops of a kernel body (a tile loop's
    /// `K / TK`; a radius's `-R <= k <= R` divides nothing).
    fn serial(stmts: &[Stmt], derived: &[Derived], seen: &mut BTreeSet<String>, out: &mut BTreeSet<String>) {
        for st in stmts {
            match &st.kind {
                StmtKind::For(l) | StmtKind::MetaFor(l) => {
                    walk(&l.lo, false, derived, seen, out);
                    walk(&l.hi, false, derived, seen, out);
                    serial(std::slice::from_ref(&l.body), derived, seen, out);
                }
                StmtKind::If { then_branch, else_branch, .. } => {
                    serial(std::slice::from_ref(then_branch), derived, seen, out);
                    else_branch.iter().for_each(|e| serial(std::slice::from_ref(e), derived, seen, out));
                }
                StmtKind::Block(items) => serial(items, derived, seen, out),
                _ => {}
            }
        }
    }
    let mut out = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for s in schedules {
        for (l, counts) in s.grid.iter().map(|l| (l, false)).chain(s.block.iter().map(|l| (l, true))) {
            walk(&l.lo, counts, derived, &mut seen, &mut out);
            walk(&l.hi, counts, derived, &mut seen, &mut out);
        }
        for l in &s.between {
            walk(&l.lo, false, derived, &mut seen, &mut out);
            walk(&l.hi, false, derived, &mut seen, &mut out);
        }
        serial(&s.body, derived, &mut seen, &mut out);
    }
    out
}

fn unwrap_single(s: &Stmt) -> &Stmt {
    let mut s = s;
    loop {
        match &s.kind {
            StmtKind::Block(items) => {
                let live: Vec<&Stmt> = items.iter().filter(|x| x.kind != StmtKind::Empty).collect();
                if live.len() == 1 {
                    s = live[0];
                } else {
                    return s;
                }
            }
            _ => return s,
        }
    }
}

fn body_stmts(s: &Stmt) -> Vec<Stmt> {
    match &s.kind {
        StmtKind::Block(items) => items.clone(),
        _ => vec![s.clone()],
    }
}

/// `l`'s header with `bounds`' ends where given (its body is not needed: the schedule keeps
/// the innermost statement apart).
fn with_bounds(l: &ForLoop, bounds: Option<&boxed::Rebound>) -> ForLoop {
    let (lo, hi) = bounds.map_or_else(|| (l.lo.clone(), l.hi.clone()), |b| (b.lo.clone(), b.hi.clone()));
    ForLoop { var: l.var.clone(), ty: l.ty, lo, hi, inclusive: l.inclusive, step: l.step, body: Box::new(Stmt { kind: StmtKind::Empty, span: l.body.span }) }
}

fn serial(l: &ForLoop) -> SerialLoop {
    SerialLoop { var: l.var.name.clone(), ty: l.ty, lo: l.lo.clone(), hi: l.hi.clone(), inclusive: l.inclusive, step: l.step }
}

fn dims_for(n: usize, prefix: &str) -> Vec<String> {
    let names: &[&str] = match n {
        0 => &[],
        1 => &["x"],
        2 => &["y", "x"],
        _ => &["z", "y", "x"],
    };
    names.iter().map(|d| format!("{prefix}.{d}")).collect()
}

impl Checker<'_> {
    fn err(&mut self, span: Span, message: impl Into<String>, label: impl Into<String>) {
        self.diags.push(Diagnostic::new(span, message, label));
    }

    fn lookup(&self, name: &str) -> Option<&Sym> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    /// Declare a name. A name is declared once in a function: shadowing one of an enclosing
    /// scope is refused, because parameters, derived scalars and counters are polynomial
    /// variables by name, and two meanings of one name would merge in every constraint.
    fn declare(&mut self, id: &Ident, sym: Sym) -> bool {
        if self.scopes.last().expect("a scope is open").contains_key(&id.name) {
            self.diags.push(Diagnostic::new(id.span, format!("`{}` is already defined in this scope", id.name), "redefined here"));
            return false;
        }
        if let Some(outer) = self.lookup(&id.name) {
            let what = match outer {
                Sym::Array { .. } => "an array parameter",
                Sym::Scalar { origin: Origin::Param, .. } => "a parameter",
                Sym::Scalar { origin: Origin::Derived, .. } => "a scalar defined before",
                Sym::Scalar { origin: Origin::HostLoop | Origin::KernelLoop, .. } => "an enclosing loop's counter",
                Sym::Scalar { origin: Origin::Local, .. } => "a variable of an enclosing block",
            };
            self.diags.push(Diagnostic::new(id.span, format!("`{}` is already {what}; give this one a name of its own", id.name), "shadows an outer name"));
            return false;
        }
        self.scopes.last_mut().expect("a scope is open").insert(id.name.clone(), sym);
        true
    }

    /// A host scalar's definition, with the scalars it reads replaced by theirs, is at most
    /// [`MAX_EXPANDED`] operations: the run-time checks (the driver's and the dispatcher's
    /// `d = ...` is defined here) and the facts that read it are written so. A chain whose
    /// every step reads the last twice (`d1 = d0 * 2 + d0 / B; d2 = d1 * 2 + d1 / B; ...`)
    /// doubles at each step; 18 steps made a 192 MB header, 39 filled the memory.
    fn not_too_large_once_expanded(&mut self, d: &Declarator) {
        if self.expanded.get(&d.name.name).is_some_and(|n| *n > MAX_EXPANDED) {
            self.err(d.init.span, format!("`{}` stands for more than {MAX_EXPANDED} operations once the scalars it reads are replaced by their definitions, as the run-time checks do; define it more directly (the definitions it reads each read the one before more than once)", d.name.name), "too large once expanded");
        }
    }

    /// Whether no scalar of the host code was defined as `id` before, in any block: the
    /// kernels take each host scalar as a parameter of its name, so two of one name in sibling
    /// blocks (two host loops each defining `s`), which C allows, would be one parameter here.
    /// Refused at the second definition.
    fn distinct_host_scalar(&mut self, id: &Ident) -> bool {
        if !self.expanded.contains_key(&id.name) || self.lookup(&id.name).is_some() {
            return true;
        }
        self.diags.push(Diagnostic::new(
            id.span,
            format!("`{}` is already the name of a scalar defined in another block of this function; the kernels take each scalar the host defines by its name, so give this one a name of its own", id.name),
            "defined again here",
        ));
        false
    }

    fn with_scope<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        self.scopes.push(HashMap::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    fn function(&mut self, f: &Function) -> Option<KernelFunction> {
        let errors_before = self.diags.len();
        self.scopes.push(HashMap::new());
        let (params, arrays) = self.params(&f.params);
        let mut items = HostItems::default();
        let mut host_loops = Vec::new();
        for s in &f.body {
            self.host_stmt(s, &mut items, &mut host_loops);
        }
        for d in std::mem::take(&mut self.divisors) {
            let condition = Expr::new(ExprKind::Binary(BinOp::Ne, Box::new(d.clone()), Box::new(Expr::new(ExprKind::Int(0), d.span))), d.span);
            let constraint = to_constraint(&condition, &self.derived);
            items.facts.push(Fact { kind: FactKind::Defined, condition, constraint, note: Some("the program divides by it".into()), kernel_range: false });
        }
        self.scopes.pop();
        if items.schedules.is_empty() && self.diags.len() == errors_before {
            self.err(f.name.span, format!("function `{}` has no `meta_schedule`", f.name.name), "nothing here runs on the GPU");
        }
        if self.diags.len() > errors_before {
            return None;
        }
        let many = items.schedules.len() > 1;
        for (i, s) in items.schedules.iter_mut().enumerate() {
            s.name = if many { format!("{}_{}", f.name.name, i) } else { f.name.name.clone() };
        }
        // Only block sizes and granularities are tuned: an integer scalar that sizes no array
        // and neither sizes a thread loop nor divides a grid loop's extent (a time-step count,
        // a filter radius) is a size given at run time, like the data sizes.
        let tunable = tunable_parameters(&items.schedules, &items.derived);
        let mut params = params;
        for p in params.iter_mut().filter(|p| p.role == Role::ProgramParameter && !tunable.contains(&p.name)) {
            p.role = Role::DataParameter;
        }
        let mut function = KernelFunction { name: f.name.name.clone(), params, arrays, derived: items.derived, facts: items.facts, schedules: items.schedules, body: f.body.clone() };
        // Where the kernels' integer arithmetic would leave its C types, the launch is refused.
        let ranges = super::ranges::overflow_facts(&function);
        function.facts.extend(ranges);
        Some(function)
    }

    fn params(&mut self, ps: &[Param]) -> (Vec<ParamInfo>, Vec<ArrayInfo>) {
        let mut infos = Vec::new();
        let mut arrays = Vec::new();
        let mut data: BTreeSet<String> = BTreeSet::new();
        for p in ps {
            for d in &p.dims {
                // Extents may use integer scalars declared before, as in C.
                let mut names = Vec::new();
                d.names(&mut names);
                let mut ok = true;
                for n in &names {
                    match self.lookup(n) {
                        Some(Sym::Scalar { ty, .. }) if ty.is_integer() => {
                            data.insert(n.clone());
                        }
                        Some(_) => {
                            self.err(d.span, format!("array extents may only use integer parameters; `{n}` is not one"), "invalid extent");
                            ok = false;
                        }
                        None if ps.iter().any(|q| &q.name.name == n) => {
                            self.err(d.span, format!("`{n}` must be declared before the array whose extent uses it"), "used before its declaration");
                            ok = false;
                        }
                        None => {
                            self.err(d.span, format!("unknown identifier `{n}` in an array extent"), "not a parameter");
                            ok = false;
                        }
                    }
                }
                if ok && to_poly(d, &DerivedPolys::new()).is_none() {
                    self.err(d.span, "array extents must be polynomials in the integer parameters (no `/`, `%` or calls)", "not a polynomial");
                }
            }
            if p.dims.len() > 3 {
                self.err(p.span, format!("array `{}` has {} dimensions; at most three are supported", p.name.name, p.dims.len()), "too many dimensions");
            }
            // Constant extents whose bytes no 64-bit address reaches (`x[9223372036854775807]`
            // of floats) make no array; the generated index arithmetic could not hold them.
            let constant: Option<Vec<i64>> = p.dims.iter().map(|d| if let ExprKind::Int(v) = d.kind { Some(v) } else { None }).collect();
            if let Some(extents) = constant.filter(|e| !e.is_empty()) {
                let bytes = extents.iter().try_fold(i64::from(p.ty.size_bytes()), |acc, e| acc.checked_mul((*e).max(0)));
                if bytes.is_none_or(|b| b > i64::MAX / 8) {
                    self.err(p.span, format!("array `{}` would hold more bytes than a 64-bit address space addresses", p.name.name), "too large");
                }
            }
            let sym = if p.dims.is_empty() {
                Sym::Scalar { ty: p.ty, origin: Origin::Param }
            } else {
                Sym::Array { ty: p.ty, rank: p.dims.len(), is_const: p.is_const }
            };
            let _ = self.declare(&p.name, sym);
            if !p.dims.is_empty() {
                arrays.push(ArrayInfo {
                    name: p.name.name.clone(),
                    elem: p.ty,
                    is_const: p.is_const,
                    extents: p.dims.iter().filter_map(|d| to_poly(d, &DerivedPolys::new())).collect(),
                    extent_exprs: p.dims.clone(),
                });
            }
        }
        for p in ps {
            let role = if !p.dims.is_empty() {
                Role::Array
            } else if !p.ty.is_integer() {
                Role::Value
            } else if data.contains(&p.name.name) {
                Role::DataParameter
            } else {
                Role::ProgramParameter
            };
            infos.push(ParamInfo { name: p.name.name.clone(), ty: p.ty, spelling: p.spelling, role, span: p.name.span });
        }
        self.data_params = data;
        (infos, arrays)
    }

    // ---- outside the schedules ----

    /// Record an integer divisor that the host knows before a launch (its names are all
    /// parameters and derived scalars): it becomes the fact `divisor != 0`.
    fn note_divisor(&mut self, d: &Expr) {
        if matches!(d.kind, ExprKind::Int(0)) {
            // As a fact (`0 != 0`) it would read as "the facts contradict each other".
            self.err(d.span, "integer division by zero: `/` or `%` by 0 is undefined in C", "divides by zero");
            return;
        }
        if crate::frontend::polyexpr::try_to_poly(d, &self.derived).ok().flatten().is_some_and(|p| p.is_zero()) {
            self.err(d.span, format!("integer division by zero: the divisor `{d}` is 0 whatever the parameters, and `/` or `%` by 0 is undefined in C"), "always 0");
            return;
        }
        if matches!(d.kind, ExprKind::Int(_)) {
            return;
        }
        if self.guards.iter().any(|(g, holds)| excludes_zero(g, *holds, d)) {
            return;
        }
        let mut names = Vec::new();
        d.names(&mut names);
        let host_known = names.iter().all(|n| matches!(self.lookup(n), Some(Sym::Scalar { ty, origin: Origin::Param | Origin::Derived }) if ty.is_integer()));
        if host_known && !self.divisors.iter().any(|x| x.to_string() == d.to_string()) {
            self.divisors.push(d.clone());
        }
    }

    /// Records `name` as varying when its definition reads a varying name.
    fn note_varying(&mut self, name: &str, init: &Expr) {
        let mut reads = Vec::new();
        init.names(&mut reads);
        // A name declared again after its loop's scope ended is a new scalar.
        if reads.iter().any(|n| self.varying.contains(n)) {
            self.varying.insert(name.to_string());
        } else {
            self.varying.remove(name);
        }
    }

    /// Whether a fact is what the dispatch code can check at run time: integer arithmetic on
    /// parameters and derived scalars (`+ - * / %`, comparisons, `&& || !`, `?:`, integer casts),
    /// over none of the values that change during the call; refuses anything else where it
    /// stands.
    fn fact_form(&mut self, e: &Expr) -> bool {
        let bad = |x: &Expr| -> Option<(Span, String)> {
            match &x.kind {
                ExprKind::Call(f, _) => Some((f.span, format!("`{}(...)` cannot appear in a fact: facts are integer arithmetic on parameters (`+ - * / %`, comparisons, `&& || !`, `?:`), which the dispatch code checks at run time; write `{}` with `?:` or comparisons", f.name, if f.name == "min" || f.name == "max" { "it" } else { "the condition" }))),
                ExprKind::Float { .. } => Some((x.span, "a floating literal cannot appear in a fact: facts are integer arithmetic on parameters".to_string())),
                ExprKind::Cast(t, _) if !t.is_integer() => Some((x.span, format!("a cast to `{t}` cannot appear in a fact: facts are integer arithmetic on parameters"))),
                ExprKind::Index { array, .. } => Some((array.span, format!("array `{}` cannot appear in a fact: facts are about parameters", array.name))),
                _ => None,
            }
        };
        let mut found = None;
        let mut vars = Vec::new();
        walk_expr(e, &mut |x| {
            if found.is_none() {
                found = bad(x);
            }
            if let ExprKind::Var(n) = &x.kind {
                vars.push((n.clone(), x.span));
            }
        });
        // A fact holds for the whole call: a host loop's counter takes many values in it.
        if found.is_none() {
            found = vars.into_iter().find(|(n, _)| self.varying.contains(n)).map(|(n, span)| {
                let what = if matches!(self.lookup(&n), Some(Sym::Scalar { origin: Origin::HostLoop, .. })) { "a host loop's counter" } else { "defined from a host loop's counter" };
                (span, format!("`{n}` is {what} and cannot appear in a fact: facts hold for the whole call and are checked once, before the first schedule runs; state them on the parameters"))
            });
        }
        match found {
            Some((span, message)) => {
                self.err(span, message, "not checkable at run time");
                false
            }
            None => true,
        }
    }

    fn host_stmt(&mut self, s: &Stmt, items: &mut HostItems, host_loops: &mut Vec<SerialLoop>) {
        match &s.kind {
            StmtKind::Empty => {}
            StmtKind::LocalArray { name, .. } => self.err(name.span, format!("per-thread array `{}` was not made scalars", name.name), "internal error"),
            StmtKind::Block(b) => self.with_scope(|c| b.iter().for_each(|x| c.host_stmt(x, items, host_loops))),
            StmtKind::Decl { ty, vars } if !ty.is_integer() => {
                // A floating scalar of the parameters (`float k = expf(-alpha);`): computed once
                // on the host, passed to every kernel like an integer derived scalar, never a
                // size, a bound or a fact.
                for d in vars {
                    // Declared even when its value is refused, so that its uses add no errors.
                    let valid = self.floating_host_expr(&d.init).is_some();
                    if !self.distinct_host_scalar(&d.name) || !self.declare(&d.name, Sym::Scalar { ty: *ty, origin: Origin::Derived }) || !valid {
                        continue;
                    }
                    self.expanded.insert(d.name.name.clone(), expanded_size(&d.init, &self.expanded));
                    self.not_too_large_once_expanded(d);
                    self.note_varying(&d.name.name, &d.init);
                    self.derived.insert(d.name.name.clone(), None);
                    items.derived.push(Derived { name: d.name.name.clone(), ty: *ty, value: d.init.clone(), poly: None });
                }
            }
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    if let Some(t) = self.host_expr(&d.init, "a scalar definition") {
                        if !t.is_integer() {
                            self.err(d.init.span, format!("`{}` is an integer but its value is `{t}`", d.name.name), "expected an integer expression");
                        }
                    }
                    // A name already in use is refused here, and its definition not recorded:
                    // recording it would give the old name a second meaning in every polynomial.
                    if !self.distinct_host_scalar(&d.name) || !self.declare(&d.name, Sym::Scalar { ty: *ty, origin: Origin::Derived }) {
                        continue;
                    }
                    self.expanded.insert(d.name.name.clone(), expanded_size(&d.init, &self.expanded));
                    self.not_too_large_once_expanded(d);
                    self.note_varying(&d.name.name, &d.init);
                    let poly = match try_to_poly(&d.init, &self.derived) {
                        Ok(p) => p,
                        Err(e) => {
                            self.err(d.init.span, format!("`{}` is too large to work with: {e}", d.name.name), "too large a polynomial");
                            None
                        }
                    };
                    self.derived.insert(d.name.name.clone(), poly.clone());
                    items.derived.push(Derived { name: d.name.name.clone(), ty: *ty, value: d.init.clone(), poly });
                }
            }
            StmtKind::Assume(e) | StmtKind::Assert(e) => {
                let kind = if matches!(s.kind, StmtKind::Assume(_)) { FactKind::Assume } else { FactKind::Assert };
                if self.host_expr(e, "a fact").is_some() && self.fact_form(e) {
                    // The dispatch code and the fact checks substitute derived scalars.
                    if expanded_size(e, &self.expanded) > MAX_EXPANDED {
                        self.err(e.span, format!("this fact stands for more than {MAX_EXPANDED} operations once the scalars it reads are replaced by their definitions, as the run-time checks do; state it on scalars defined more directly"), "too large once expanded");
                    }
                    let sides = e.conjuncts().into_iter().filter_map(|c| match &c.kind {
                        ExprKind::Binary(_, a, b) => Some([a, b]),
                        _ => None,
                    });
                    if let Some(t) = sides.flatten().find_map(|x| try_to_poly(x, &self.derived).err()) {
                        self.err(e.span, format!("this fact is too large to work with: {t}"), "too large a polynomial");
                    }
                    for c in e.conjuncts() {
                        items.facts.push(Fact { kind, condition: c.clone(), constraint: to_constraint(c, &self.derived), note: None, kernel_range: false });
                    }
                }
            }
            StmtKind::For(l) => {
                for e in [&l.lo, &l.hi] {
                    if let Some(t) = self.host_expr(e, "a loop bound") {
                        if !t.is_integer() {
                            self.err(e.span, "loop bounds must be integer expressions", "floating bound");
                        }
                    }
                }
                if !contains_schedule(&l.body) {
                    self.err(s.span, "a serial `for` loop outside a `meta_schedule` must contain one", "expected a `meta_schedule` inside this loop");
                    return;
                }
                host_loops.push(serial(l));
                self.with_scope(|c| {
                    c.declare(&l.var, Sym::Scalar { ty: l.ty, origin: Origin::HostLoop });
                    c.varying.insert(l.var.name.clone());
                    c.host_stmt(&l.body, items, host_loops);
                });
                host_loops.pop();
            }
            StmtKind::MetaSchedule { cache, body } => {
                if let Some(sched) = self.schedule(s.span, cache, body, host_loops) {
                    items.schedules.push(sched);
                }
            }
            StmtKind::MetaFor(l) => self.err(
                Span::new(s.span.start, l.var.span.start),
                "`meta_for` outside a `meta_schedule`",
                "wrap this loop nest in `meta_schedule { ... }`",
            ),
            // Any other `if` and every assignment here became a one-thread schedule
            // (`host_statements`).
            StmtKind::If { .. } => self.err(
                s.span,
                "an `if` around a `meta_schedule` is not supported: a schedule runs whenever the function reaches it",
                "test the condition inside the schedule's body",
            ),
            StmtKind::Assign { .. } | StmtKind::Barrier => self.err(
                s.span,
                "only `assume`, `assert`, scalar definitions, serial `for` loops, statements on array data and `meta_schedule` may appear outside a `meta_schedule`",
                "move this statement into a `meta_schedule`",
            ),
        }
    }

    /// Type an expression evaluated on the host: no arrays, no floating values.
    fn host_expr(&mut self, e: &Expr, what: &str) -> Option<ScalarType> {
        let mut names = Vec::new();
        e.names(&mut names);
        for n in names {
            match self.lookup(&n) {
                Some(Sym::Array { .. }) => {
                    self.err(e.span, format!("{what} outside a `meta_schedule` cannot read the array `{n}`"), "array read here");
                    return None;
                }
                Some(Sym::Scalar { ty, origin: Origin::Param | Origin::Derived }) if !ty.is_integer() => {
                    self.err(e.span, format!("`{n}` is a floating value, not a parameter: {what} may only use integer parameters"), "floating value here");
                    return None;
                }
                _ => {}
            }
        }
        if let Some(at) = overflowing_constant(e) {
            self.err(at, format!("this constant arithmetic overflows 64 bits: {what} is evaluated on the host in `long long`, where it would wrap or fail"), "overflows `long long`");
            return None;
        }
        if let Some((at, c)) = wide_coefficient(e, &self.derived) {
            self.err(at, format!("{what} has the coefficient {c}, which does not fit in 64 bits: the host evaluates it in `long long`, where it overflows at every nonzero value"), "overflows `long long`");
            return None;
        }
        self.expr(e)
    }

    /// The type of a floating scalar's definition outside the schedules: any parameter or
    /// scalar defined before it, floating ones included, but no array.
    fn floating_host_expr(&mut self, e: &Expr) -> Option<ScalarType> {
        let mut names = Vec::new();
        e.names(&mut names);
        for n in names {
            if let Some(Sym::Array { .. }) = self.lookup(&n) {
                self.err(e.span, format!("a scalar definition outside a `meta_schedule` cannot read the array `{n}`"), "array read here");
                return None;
            }
        }
        self.expr(e)
    }

    // ---- a schedule ----

    fn schedule(&mut self, span: Span, cache: &[Ident], body: &Stmt, host_loops: &[SerialLoop]) -> Option<Schedule> {
        let errors_before = self.diags.len();
        let mut cached = Vec::new();
        for c in cache {
            match self.lookup(&c.name) {
                Some(Sym::Array { .. }) => {
                    if cached.contains(&c.name) {
                        self.err(c.span, format!("`{}` is named twice in `cache(...)`", c.name), "duplicate");
                    }
                    cached.push(c.name.clone());
                }
                Some(_) => self.err(c.span, format!("`cache(...)` names arrays; `{}` is not an array", c.name), "expected an array parameter"),
                None => self.err(c.span, format!("unknown array `{}` in `cache(...)`", c.name), "not a parameter"),
            }
        }
        // The grid group, then serial loops, then the block group.
        let mut s = unwrap_single(body);
        let mut group1: Vec<&ForLoop> = Vec::new();
        while let StmtKind::MetaFor(l) = &s.kind {
            group1.push(l);
            s = unwrap_single(&l.body);
        }
        if group1.is_empty() {
            self.err(s.span, "a `meta_schedule` body must be a nest of `meta_for` loops", "expected `meta_for` here");
            return None;
        }
        let after_group1 = s;
        let mut between: Vec<&ForLoop> = Vec::new();
        while let StmtKind::For(l) = &s.kind {
            between.push(l);
            s = unwrap_single(&l.body);
        }
        let mut group2: Vec<&ForLoop> = Vec::new();
        if matches!(s.kind, StmtKind::MetaFor(_)) {
            while let StmtKind::MetaFor(l) = &s.kind {
                group2.push(l);
                s = unwrap_single(&l.body);
            }
        } else {
            between.clear();
            s = after_group1;
        }
        let written_innermost = s;
        // A `meta_for` in a block beside other statements (`meta_for (v ...) { float z = 2;
        // meta_for (u ...) ... }`): the nest is not perfect. Say so at the statement in the
        // way, rather than that no loop has a program-parameter extent.
        if let StmtKind::Block(items) = &written_innermost.kind {
            if let Some(inner) = items.iter().find_map(|x| if let StmtKind::MetaFor(l) = &x.kind { Some(l) } else { None }) {
                let outer = group2.last().or(between.last()).or(group1.last()).map_or(String::new(), |l| l.var.name.clone());
                let in_way = items.iter().find(|x| !matches!(x.kind, StmtKind::MetaFor(_) | StmtKind::Empty)).unwrap_or(written_innermost);
                self.diags.push(
                    Diagnostic::new(in_way.span, format!("`meta_for` loop `{}` is not perfectly nested in `{outer}`: a statement stands between them", inner.var.name), "statement between the loops")
                        .with_note("the `meta_for` loops of a schedule (and serial loops between its grid and block groups) nest directly; move this statement into the innermost loop's body"),
                );
                return None;
            }
        }
        // Loops whose trip count varies with an enclosing `meta_for` counter (a triangle) run
        // over their most trips, guarded by their own bounds (`boxed`): first with their start
        // kept, which a block loop may have; a grid loop that starts at a counter is then
        // bounded at both ends, since the host sizes the grid.
        let written: Vec<&ForLoop> = group1.iter().chain(&group2).copied().collect();
        // Each loop with the loops around it, the serial ones between the groups included.
        let around: Vec<&ForLoop> = group1.iter().chain(&between).chain(&group2).copied().collect();
        let (grid_written, between_len) = (group1.len(), between.len());
        let place = move |k: usize| if k < grid_written { k } else { k + between_len };
        let offsets: Vec<ForLoop> = (0..written.len()).map(|k| with_bounds(written[k], boxed::rebound(&around, place(k), boxed::Form::Offset).as_ref())).collect();
        let written_group1 = group1;
        let group1: Vec<&ForLoop> = offsets[..written_group1.len()].iter().collect();
        let split_by_tool = group2.is_empty();
        let grid_len = if split_by_tool {
            let k = self.block_suffix(&group1);
            // A block whose size reads an enclosing counter (`t < min(B, N - b*B)`): say so.
            let reads = |e: &Expr, name: &str| {
                let mut names = Vec::new();
                e.names(&mut names);
                names.iter().any(|n| n == name)
            };
            // The loop's own bound that reads `name`, as the guard to write instead.
            let guard_for = |l: &ForLoop, name: &str| if reads(&l.hi, name) { format!("{} < {}", l.var.name, l.hi) } else { format!("{} >= {}", l.var.name, l.lo) };
            // (Only where `boxed` could not bound it: a triangle it bounds has no program-
            // parameter extent either, which the message below says.)
            let enclosing_counter = written_group1.split_last().and_then(|(l, outer)| {
                let o = outer.iter().find(|o| reads(&l.lo, &o.var.name) || reads(&l.hi, &o.var.name))?;
                let last = written_group1.len() - 1;
                let bounded = [boxed::Form::Offset, boxed::Form::Box].into_iter().any(|form| boxed::rebound(&written_group1, last, form).is_some());
                (!bounded).then(|| (*l, o.var.name.clone()))
            });
            if let (0, Some((l, outer))) = (k, &enclosing_counter) {
                let bound = if reads(&l.hi, outer) { &l.hi } else { &l.lo };
                self.diags.push(
                    Diagnostic::new(bound.span, format!("the bounds of `meta_for` loop `{}` use `{outer}`, the counter of an enclosing `meta_for`", l.var.name), "a thread block's size must be known before the launch")
                        .with_note({
                            // The guard is the loop's own bound, as written.
                            let guard = guard_for(l, outer);
                            format!("loop over the whole block (`{} < B`, a program parameter) and guard the body with the bound instead (`if ({guard})`)", l.var.name)
                        }),
                );
                return None;
            }
            if k == 0 {
                // The last loop's bounds read an enclosing counter (bounded above): say so, with
                // its bound as the guard to write.
                let note = match written_group1.split_last().and_then(|(l, outer)| outer.iter().find(|o| reads(&l.lo, &o.var.name) || reads(&l.hi, &o.var.name)).map(|o| (l, o))) {
                    Some((l, o)) => {
                        let guard = guard_for(l, &o.var.name);
                        format!("the bounds of `{}` read `{}`, so it runs over its most iterations, which no program parameter counts: loop over a block of a program parameter's size (`{} < B`) and guard the body with the bound (`if ({guard})`)", l.var.name, o.var.name, l.var.name)
                    }
                    None => match written_group1.last().and_then(|l| host_loops.iter().find(|h| reads(&l.lo, &h.var) || reads(&l.hi, &h.var)).map(|h| (l, h))) {
                        // A host loop's counter changes from launch to launch; the tree is
                        // keyed by parameters, so a block cannot be sized by it.
                        Some((l, h)) => {
                            let guard = guard_for(l, &h.var);
                            format!("the bounds of `{}` read `{}`, the counter of the host loop around the schedule, which changes from launch to launch: loop over a block of a program parameter's size (`{} < B`) and guard the body with the bound (`if ({guard})`)", l.var.name, h.var, l.var.name)
                        }
                        None => {
                            // A parameter that sizes an array is a data size, given at run time,
                            // never a block size (`a[N][B][M]` with `j < B`): say so.
                            let sizing = written_group1.last().and_then(|l| {
                                let mut names = Vec::new();
                                l.hi.names(&mut names);
                                names.into_iter().find(|n| self.data_params.contains(n)).map(|n| (l, n))
                            });
                            match sizing {
                                Some((l, n)) => format!("`{n}` sizes an array, so it is a data parameter (a size given at run time), not a block size the tuner chooses: loop `{}` over a block of a parameter of its own (`{} < B{n}`, sizing no array) and guard the body with `if ({} < {n})`, or write the block loops as a second group after a serial loop", l.var.name, l.var.name, l.var.name),
                                None => "give the innermost loops program-parameter extents (`u < B0`), or write the block loops as a second group after a serial loop; the outermost loop always stays in the grid, so a schedule needs two `meta_for` loops or more".to_string(),
                            }
                        }
                    },
                };
                self.diags.push(
                    Diagnostic::new(
                        group1.last().map_or(span, |l| l.var.span),
                        "cannot tell which `meta_for` loops form the thread block",
                        "no loop of this group has a program-parameter extent",
                    )
                    .with_note(note),
                );
                return None;
            }
            group1.len() - k
        } else {
            group1.len()
        };
        let mut guards = Vec::new();
        let nest: Vec<ForLoop> = (0..written.len())
            .map(|k| {
                let reads_counter = |e: &Expr| {
                    let mut names = Vec::new();
                    e.names(&mut names);
                    names.iter().any(|n| written[..k].iter().any(|o| &o.var.name == n))
                };
                let mut bounds = boxed::rebound(&around, place(k), boxed::Form::Offset);
                // A grid loop's start is the host's, and a block loop's is computed before the
                // loops between the groups: neither may start at a counter they cannot see.
                let starts_unseen = if k < grid_len {
                    reads_counter(&written[k].lo)
                } else {
                    let mut names = Vec::new();
                    written[k].lo.names(&mut names);
                    names.iter().any(|n| between.iter().any(|b| &b.var.name == n))
                };
                if starts_unseen {
                    bounds = boxed::rebound(&around, place(k), boxed::Form::Box);
                }
                guards.extend(bounds.as_ref().map(|b| b.guard.clone()));
                with_bounds(written[k], bounds.as_ref())
            })
            .collect();
        let (grid, block): (Vec<&ForLoop>, Vec<&ForLoop>) = (nest[..grid_len].iter().collect(), nest[grid_len..].iter().collect());
        let guarded;
        let innermost = match guards.into_iter().reduce(|a, b| {
            let span = a.span.to(b.span);
            Expr::new(ExprKind::Binary(BinOp::And, Box::new(a), Box::new(b)), span)
        }) {
            None => written_innermost,
            Some(cond) => {
                guarded = Stmt { kind: StmtKind::If { cond, then_branch: Box::new(written_innermost.clone()), else_branch: None }, span: written_innermost.span };
                &guarded
            }
        };
        if grid.len() > 3 {
            self.err(grid[3].var.span, "more than three grid dimensions", "a fourth grid `meta_for`");
        }
        if block.len() > 3 {
            self.err(block[3].var.span, "more than three thread-block dimensions", "a fourth block `meta_for`");
        }
        let nested: Vec<&ForLoop> = grid.iter().chain(&between).chain(&block).copied().collect();
        let maps: Vec<String> = dims_for(grid.len(), "blockIdx").into_iter().chain(dims_for(block.len(), "threadIdx")).collect();
        let mut par = Vec::new();
        let body = self.with_scope(|c| {
            for l in &nested {
                for e in [&l.lo, &l.hi] {
                    if let Some(t) = c.expr(e) {
                        if !t.is_integer() {
                            c.err(e.span, "loop bounds must be integer expressions", "floating bound");
                        }
                    }
                }
                c.declare(&l.var, Sym::Scalar { ty: l.ty, origin: Origin::KernelLoop });
            }
            c.kernel_stmt(innermost);
            body_stmts(innermost)
        });
        self.grid_bounds_known_on_the_host(&grid);
        for (l, m) in grid.iter().chain(&block).zip(maps) {
            let extent = to_poly(&l.hi, &self.derived).zip(to_poly(&l.lo, &self.derived)).map(|(h, lo)| h - lo);
            // A block's size read from the tile loop's counter (`u < k`) that `boxed` could
            // not bound: say so where the bound is, not as an internal error later.
            let reads_serial = |b: &&&ForLoop| {
                let mut names = Vec::new();
                l.lo.names(&mut names);
                names.contains(&b.var.name) || extent.as_ref().is_some_and(|e| e.vars().iter().any(|v| v.name() == b.var.name))
            };
            if let Some(serial) = between.iter().find(reads_serial) {
                self.diags.push(
                    Diagnostic::new(l.hi.span, format!("the bounds of block loop `{}` read `{}`, the counter of the serial loop between the grid and the block", l.var.name, serial.var.name), "a thread block's size must be known before the launch")
                        .with_note(format!("metafork bounds it itself where the bounds are affine in `{}` with constant coefficients (`u < {}`); otherwise loop over the whole block and guard the body (`if (...)`)", serial.var.name, serial.var.name)),
                );
                continue;
            }
            if extent.is_none() && block.iter().any(|b| std::ptr::eq(*b, *l)) {
                self.diags.push(
                    Diagnostic::new(l.hi.span, format!("the extent of block loop `{}` is not a polynomial in the program parameters", l.var.name), "every thread block has this many threads")
                        .with_note("a thread block has one size for the whole launch: bound the loop by a parameter and guard the body (`meta_for (int u = 0; u < B; u++) if (v * B + u < N) ...`)"),
                );
            }
            par.push(ParLoop { var: l.var.name.clone(), ty: l.ty, lo: l.lo.clone(), hi: l.hi.clone(), extent, maps_to: m, span: l.var.span });
        }
        if self.diags.len() > errors_before {
            return None;
        }
        let block_loops = par.split_off(grid.len());
        Some(Schedule {
            name: String::new(),
            host_loops: host_loops.to_vec(),
            cache: cached,
            grid: par,
            between: between.iter().map(|l| serial(l)).collect(),
            block: block_loops,
            body,
            split_by_tool,
            span,
        })
    }

    /// A grid loop's bounds size the launch, which the host computes before any block runs: they
    /// may name parameters, scalars defined from them and host loop counters, not an enclosing
    /// grid loop's counter (the grid is a box; a triangular bound is a guard in the body) nor an
    /// array (read on the device).
    fn grid_bounds_known_on_the_host(&mut self, grid: &[&ForLoop]) {
        for (k, l) in grid.iter().enumerate() {
            for e in [&l.lo, &l.hi] {
                let mut names = Vec::new();
                e.names(&mut names);
                if let Some(outer) = names.iter().find(|n| grid[..k].iter().any(|g| &g.var.name == *n)) {
                    self.diags.push(
                        Diagnostic::new(e.span, format!("the bounds of grid loop `{}` use `{outer}`, the counter of an enclosing grid `meta_for`", l.var.name), "the grid's size must be known before the launch")
                            .with_note(format!("the grid is a box: metafork bounds it itself where each bound is affine in the enclosing counters with constant coefficients (`w <= v`, `w >= v + 1`); otherwise give `{}` bounds in the parameters and guard the body (`if ({} >= ...)`)", l.var.name, l.var.name)),
                    );
                } else if let Some(array) = names.iter().find(|n| matches!(self.lookup(n), Some(Sym::Array { .. }))) {
                    self.err(e.span, format!("the bounds of grid loop `{}` read the array `{array}`, which the host does not read before the launch", l.var.name), "the grid's size must be known before the launch");
                }
            }
        }
    }

    /// How many innermost loops of a single group have program-parameter extents (at most 3).
    fn block_suffix(&self, group: &[&ForLoop]) -> usize {
        let program_param = |e: &Expr| {
            let mut names = Vec::new();
            e.names(&mut names);
            names.iter().all(|n| self.is_program_parameter(n))
        };
        // At least one loop stays in the grid.
        let sized = group
            .iter()
            .rev()
            .take(3.min(group.len().saturating_sub(1)))
            .take_while(|l| {
                let bounds = program_param(&l.lo) && program_param(&l.hi) && {
                    let mut names = Vec::new();
                    l.hi.names(&mut names);
                    !names.is_empty()
                };
                // `g * B <= i < g * B + B`: an offset by outer counters, an extent in the
                // program parameters.
                let extent = || to_poly(&l.hi, &self.derived).zip(to_poly(&l.lo, &self.derived)).map(|(h, lo)| h - lo).is_some_and(|e| {
                    let vars = e.vars();
                    !vars.is_empty() && vars.iter().all(|v| self.is_program_parameter(v.name()))
                });
                bounds || extent()
            })
            .count();
        // Else an innermost loop of constant bounds (`j < 32`; a one-thread schedule's `t < 1`)
        // is a block of that many threads, at least one.
        let threads = |l: &ForLoop| match (&l.lo.kind, &l.hi.kind) {
            (ExprKind::Int(lo), ExprKind::Int(hi)) => hi.checked_sub(*lo).and_then(|d| d.checked_add(l.inclusive as i64)),
            _ => None,
        };
        match group.split_last() {
            Some((last, rest)) if sized == 0 && !rest.is_empty() && threads(last).is_some_and(|t| t >= 1) => 1,
            _ => sized,
        }
    }

    /// A parameter that sizes no array, or a derived scalar defined from such parameters only.
    fn is_program_parameter(&self, name: &str) -> bool {
        match self.derived.get(name) {
            Some(Some(p)) => p.vars().iter().all(|v| self.is_program_parameter(v.name())),
            Some(None) => false,
            None => matches!(self.lookup(name), Some(Sym::Scalar { ty, origin: Origin::Param }) if ty.is_integer())
                && !self.is_data_parameter(name),
        }
    }

    fn is_data_parameter(&self, name: &str) -> bool {
        self.data_params.contains(name)
    }

    // ---- inside the kernel ----

    fn kernel_stmt(&mut self, s: &Stmt) {
        match &s.kind {
            StmtKind::Empty | StmtKind::Barrier => {}
            StmtKind::LocalArray { name, .. } => self.err(name.span, format!("per-thread array `{}` was not made scalars", name.name), "internal error"),
            StmtKind::Block(b) => self.with_scope(|c| b.iter().for_each(|x| c.kernel_stmt(x))),
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    if let Some(t) = self.expr(&d.init) {
                        let _ = t; // C converts between arithmetic types on initialisation.
                    }
                    let _ = self.declare(&d.name, Sym::Scalar { ty: *ty, origin: Origin::Local });
                }
            }
            StmtKind::Assign { target, value, op } => {
                self.check_target(target);
                let added = self.expr(value);
                // A reduction adds the terms in any order. Into an integer element, C adds a
                // floating term to the element's value and truncates the sum each time: the
                // order changes the result, and an atomic add of truncated terms is another sum.
                if let (AssignOp::AtomicAdd, ExprKind::Index { array, .. }, Some(t)) = (op, &target.kind, added) {
                    if let Some(Sym::Array { ty, .. }) = self.lookup(&array.name).cloned() {
                        if ty.is_integer() && !t.is_integer() {
                            self.diags.push(
                                Diagnostic::new(value.span, format!("`{target}` is a reduction across threads into `{ty}` elements, but the value added is `{t}`: C truncates each partial sum, so the order of the additions changes the result"), "a floating term added to an integer element")
                                    .with_note(format!("convert each term (`{target} += ({ty})(...)`), or reduce into a floating array")),
                            );
                        }
                    }
                }
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                self.expr(cond);
                self.guards.push((cond.clone(), true));
                self.with_scope(|c| c.kernel_stmt(then_branch));
                self.guards.pop();
                if let Some(e) = else_branch {
                    self.guards.push((cond.clone(), false));
                    self.with_scope(|c| c.kernel_stmt(e));
                    self.guards.pop();
                }
            }
            StmtKind::For(l) => {
                for e in [&l.lo, &l.hi] {
                    if let Some(t) = self.expr(e) {
                        if !t.is_integer() {
                            self.err(e.span, "loop bounds must be integer expressions", "floating bound");
                        }
                    }
                }
                self.with_scope(|c| {
                    c.declare(&l.var, Sym::Scalar { ty: l.ty, origin: Origin::KernelLoop });
                    c.kernel_stmt(&l.body);
                });
            }
            StmtKind::MetaFor(l) => self.err(
                Span::new(s.span.start, l.var.span.end),
                "`meta_for` loops must be perfectly nested at the top of the `meta_schedule`",
                "this `meta_for` is not part of the grid or block group",
            ),
            StmtKind::MetaSchedule { .. } => self.err(s.span, "a `meta_schedule` cannot be nested inside another", "nested schedule"),
            StmtKind::Assume(_) | StmtKind::Assert(_) => {
                self.err(s.span, "`assume` and `assert` must appear outside the `meta_schedule`", "move this before the schedule")
            }
        }
    }

    fn check_target(&mut self, target: &Expr) {
        let (name, span) = match &target.kind {
            ExprKind::Var(n) => (n.clone(), target.span),
            ExprKind::Index { array, .. } => (array.name.clone(), array.span),
            _ => {
                self.err(target.span, "the left side of an assignment must be a variable or an array element", "not assignable");
                return;
            }
        };
        match (self.lookup(&name).cloned(), &target.kind) {
            (None, _) => self.err(span, format!("unknown identifier `{name}`"), "not declared"),
            (Some(Sym::Scalar { origin, .. }), ExprKind::Var(_)) => match origin {
                Origin::Local => {}
                Origin::Param => self.err(span, format!("cannot assign to parameter `{name}`: parameters are read-only"), "parameter written here"),
                Origin::Derived => self.diags.push(
                    Diagnostic::new(span, format!("cannot assign to `{name}`: a scalar defined outside the schedules from the parameters is computed once and read-only afterwards"), "written here").with_note(
                        "a scalar defined outside the schedules is computed once, on the host, from the parameters; one computed from array data (a sum, a norm) lives on the GPU only where it is used: define it with the statements that compute it, and keep a value later schedules read in an array element",
                    ),
                ),
                Origin::HostLoop | Origin::KernelLoop => self.err(span, format!("cannot assign to loop counter `{name}`"), "loop counter written here"),
            },
            (Some(Sym::Array { .. }), ExprKind::Var(_)) => self.err(span, format!("cannot assign to array `{name}` as a whole"), "index it: `a[i] = ...`"),
            (Some(Sym::Array { is_const: true, .. }), _) => self.err(span, format!("cannot write to `{name}`: it is declared `const`"), "const array written here"),
            _ => {
                self.expr(target);
            }
        }
    }

    /// The type of an expression, or `None` after reporting why it has none.
    fn expr(&mut self, e: &Expr) -> Option<ScalarType> {
        match &e.kind {
            ExprKind::Int(v) => Some(if i32::try_from(*v).is_ok() { ScalarType::Int } else { ScalarType::Long }),
            ExprKind::Float { single, .. } => Some(if *single { ScalarType::Float } else { ScalarType::Double }),
            ExprKind::Var(n) => match self.lookup(n) {
                Some(Sym::Scalar { ty, .. }) => Some(*ty),
                Some(Sym::Array { rank, .. }) => {
                    let rank = *rank;
                    self.err(e.span, format!("array `{n}` used as a value; index it with {rank} subscript{}", if rank == 1 { "" } else { "s" }), "array here");
                    None
                }
                None => {
                    self.err(e.span, format!("unknown identifier `{n}`"), "not declared in this scope");
                    None
                }
            },
            ExprKind::Index { array, indices } => {
                let sym = self.lookup(&array.name).cloned();
                let mut ok = true;
                for i in indices {
                    match self.expr(i) {
                        Some(t) if !t.is_integer() => {
                            self.err(i.span, format!("array subscript is not an integer (it is `{t}`)"), "expected an integer subscript");
                            ok = false;
                        }
                        None => ok = false,
                        _ => {}
                    }
                }
                match sym {
                    Some(Sym::Array { ty, rank, .. }) => {
                        if rank != indices.len() {
                            self.err(e.span, format!("`{}` has {rank} dimension{} but is indexed with {} subscript{}", array.name, if rank == 1 { "" } else { "s" }, indices.len(), if indices.len() == 1 { "" } else { "s" }), format!("expected {rank} subscript{}", if rank == 1 { "" } else { "s" }));
                            return None;
                        }
                        ok.then_some(ty)
                    }
                    Some(Sym::Scalar { .. }) => {
                        self.err(array.span, format!("`{}` is not an array and cannot be indexed", array.name), "a scalar");
                        None
                    }
                    None => {
                        self.err(array.span, format!("unknown identifier `{}`", array.name), "not declared in this scope");
                        None
                    }
                }
            }
            ExprKind::Unary(UnOp::Neg, a) => {
                if let Some((x, t)) = constant_integer(a).filter(|_| constant_integer(e).is_none()) {
                    self.err(e.span, format!("this constant arithmetic overflows `{t}` (-({x})): C computes it in `{t}`, where the result is undefined"), format!("outside `{t}`"));
                }
                self.expr(a)
            }
            ExprKind::Unary(UnOp::Not, a) => self.expr(a).map(|_| ScalarType::Int),
            ExprKind::Binary(op, a, b) => {
                let ta = self.expr(a);
                // C evaluates `b` in `a && b` only where `a` holds, in `a || b` where it does not.
                let guarded = op.is_logical();
                if guarded {
                    self.guards.push(((**a).clone(), *op == BinOp::And));
                }
                let tb = self.expr(b);
                if guarded {
                    self.guards.pop();
                }
                let (ta, tb) = (ta?, tb?);
                if *op == BinOp::Rem && !(ta.is_integer() && tb.is_integer()) {
                    self.err(e.span, "invalid operands to `%`: C requires integer operands", format!("`{ta} % {tb}`"));
                    return None;
                }
                if matches!(op, BinOp::Div | BinOp::Rem) && ta.is_integer() && tb.is_integer() {
                    self.note_divisor(b);
                }
                if let (Some((x, tx)), Some((y, ty))) = (constant_integer(a), constant_integer(b)) {
                    if constant_integer(e).is_none() && !(matches!(op, BinOp::Div | BinOp::Rem) && y == 0) && !op.is_comparison() && !op.is_logical() {
                        let t = ScalarType::promote(tx, ty);
                        self.err(e.span, format!("this constant arithmetic overflows `{t}` ({x} {} {y}): C computes it in `{t}`, where the result is undefined; write a `long` operand (`{x}L`) if the value is meant", op.c_symbol()), format!("outside `{t}`"));
                    }
                }
                if op.is_comparison() || op.is_logical() {
                    Some(ScalarType::Int)
                } else {
                    Some(ScalarType::promote(ta, tb))
                }
            }
            ExprKind::Cond(c, a, b) => {
                let tc = self.expr(c);
                self.guards.push(((**c).clone(), true));
                let ta = self.expr(a);
                self.guards.last_mut().expect("pushed above").1 = false;
                let tb = self.expr(b);
                self.guards.pop();
                tc?;
                Some(ScalarType::promote(ta?, tb?))
            }
            ExprKind::Cast(t, a) => self.expr(a).map(|_| *t),
            ExprKind::Builtin(_) => Some(ScalarType::Int),
            ExprKind::Call(f, args) => {
                let arg_types: Vec<Option<ScalarType>> = args.iter().map(|a| self.expr(a)).collect();
                let Some(&(_, arity)) = ALLOWED_CALLS.iter().find(|(n, _)| *n == f.name) else {
                    if self.function_names.contains(&f.name) {
                        self.err(f.span, format!("calls between kernel functions (and recursion) are not supported: `{}`", f.name), "kernel function called here");
                    } else {
                        self.diags.push(
                            Diagnostic::new(f.span, format!("call to unknown function `{}`", f.name), "not an allowed function")
                                .with_note(format!("allowed: {}", ALLOWED_CALLS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))),
                        );
                    }
                    return None;
                };
                if args.len() != arity {
                    self.err(e.span, format!("`{}` takes {arity} argument{}, found {}", f.name, if arity == 1 { "" } else { "s" }, args.len()), "wrong number of arguments");
                    return None;
                }
                let types: Vec<ScalarType> = arg_types.into_iter().collect::<Option<_>>()?;
                // C's `abs` takes an `int`: `abs(-2.75f)` is 2 in the serial C program, while
                // CUDA's overload gives 2.75. Neither reading can be right for both.
                if f.name == "abs" && !types[0].is_integer() {
                    let (fix, float) = if types[0] == ScalarType::Float { ("fabsf", "float") } else { ("fabs", "double") };
                    self.err(f.span, format!("`abs` of a `{float}`: C converts its argument to `int` (`abs(-2.75f)` is 2) where CUDA's overload keeps the fraction; write `{fix}` for the absolute value, or cast the argument to `int`"), "floating argument");
                    return None;
                }
                // Likewise C's `abs` of a `long` converts it to `int`, where CUDA's overload
                // keeps all 64 bits; `labs` is outside the accepted subset.
                if f.name == "abs" && types[0] == ScalarType::Long {
                    self.err(f.span, "`abs` of a `long`: C converts its argument to `int` (`abs(4294967295L)` is 1) where CUDA's overload keeps all 64 bits; write `x < 0 ? -x : x` for the absolute value, or cast the argument to `int`".to_string(), "`long` argument");
                    return None;
                }
                Some(match f.name.as_str() {
                    "min" | "max" => ScalarType::promote(types[0], types[1]),
                    // A `char` is promoted to `int`, as C does before calling `abs(int)`.
                    "abs" => ScalarType::promote(types[0], types[0]),
                    "sqrtf" | "expf" | "fabsf" | "fminf" | "fmaxf" | "logf" | "powf" => ScalarType::Float,
                    _ => ScalarType::Double,
                })
            }
        }
    }
}

fn contains_schedule(s: &Stmt) -> bool {
    match &s.kind {
        StmtKind::MetaSchedule { .. } => true,
        StmtKind::Block(b) => b.iter().any(contains_schedule),
        StmtKind::For(l) => contains_schedule(&l.body),
        StmtKind::If { then_branch, else_branch, .. } => {
            contains_schedule(then_branch) || else_branch.as_ref().is_some_and(|e| contains_schedule(e))
        }
        _ => false,
    }
}

/// Whether `guard` being `holds` implies `d != 0`, read from its conjuncts (`d != 0`, `d > 0`,
/// `d >= 1`, `d < 0`, `!(d == 0)`, with the constant on either side; `d` compared as written).
fn excludes_zero(guard: &Expr, holds: bool, d: &Expr) -> bool {
    match &guard.kind {
        ExprKind::Unary(UnOp::Not, a) => excludes_zero(a, !holds, d),
        ExprKind::Binary(BinOp::And, a, b) if holds => excludes_zero(a, true, d) || excludes_zero(b, true, d),
        ExprKind::Binary(BinOp::Or, a, b) if !holds => excludes_zero(a, false, d) || excludes_zero(b, false, d),
        ExprKind::Binary(op, a, b) if op.is_comparison() => {
            let text = d.to_string();
            let constant = |x: &Expr| constant_integer(x).map(|(v, _)| v);
            // `d op k`, the constant on the right.
            let (op, k) = if a.to_string() == text {
                match constant(b) {
                    Some(k) => (*op, k),
                    None => return false,
                }
            } else if b.to_string() == text {
                let flipped = match op {
                    BinOp::Lt => BinOp::Gt,
                    BinOp::Le => BinOp::Ge,
                    BinOp::Gt => BinOp::Lt,
                    BinOp::Ge => BinOp::Le,
                    other => *other,
                };
                match constant(a) {
                    Some(k) => (flipped, k),
                    None => return false,
                }
            } else {
                return false;
            };
            let op = if holds {
                op
            } else {
                match op {
                    BinOp::Lt => BinOp::Ge,
                    BinOp::Le => BinOp::Gt,
                    BinOp::Gt => BinOp::Le,
                    BinOp::Ge => BinOp::Lt,
                    BinOp::Eq => BinOp::Ne,
                    _ => BinOp::Eq,
                }
            };
            match op {
                BinOp::Ne => k == 0,
                BinOp::Eq => k != 0,
                BinOp::Gt => k >= 0,
                BinOp::Ge => k >= 1,
                BinOp::Lt => k <= 0,
                BinOp::Le => k <= -1,
                _ => false,
            }
        }
        _ => false,
    }
}

/// The value and C type of `e` where it is integer constant arithmetic (literals, `+ - * / %`
/// and negation) whose every step stays within its type: a literal is an `int` where it fits,
/// else a `long`; an operation is done in the wider of its operands' types. `None` for
/// anything else, an overflow and a division by zero included.
fn constant_integer(e: &Expr) -> Option<(i64, ScalarType)> {
    let within = |v: i64, t: ScalarType| t.integer_range().is_some_and(|(lo, hi)| (lo..=hi).contains(&v)).then_some((v, t));
    match &e.kind {
        ExprKind::Int(v) => Some((*v, if i32::try_from(*v).is_ok() { ScalarType::Int } else { ScalarType::Long })),
        // `7L` is `(long)7`; a conversion that changes the value is not folded.
        ExprKind::Cast(t, a) if t.is_integer() => {
            let (x, _) = constant_integer(a)?;
            within(x, *t)
        }
        ExprKind::Unary(UnOp::Neg, a) => {
            let (x, t) = constant_integer(a)?;
            let t = ScalarType::promote(t, t);
            within(x.checked_neg()?, t)
        }
        ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem), a, b) => {
            let ((x, tx), (y, ty)) = (constant_integer(a)?, constant_integer(b)?);
            let t = ScalarType::promote(tx, ty);
            // `INT_MIN % -1` is undefined in C, as `INT_MIN / -1` is.
            if matches!(op, BinOp::Rem) && y == -1 && t.integer_range().is_some_and(|(lo, _)| x == lo) {
                return None;
            }
            let v = match op {
                BinOp::Add => x.checked_add(y),
                BinOp::Sub => x.checked_sub(y),
                BinOp::Mul => x.checked_mul(y),
                BinOp::Div => x.checked_div(y),
                _ => x.checked_rem(y),
            }?;
            within(v, t)
        }
        _ => None,
    }
}

/// The innermost subexpression of `e` made of integer literals only whose value overflows
/// 64-bit signed arithmetic (the host's `long long`, and the dispatch code's checked
/// evaluation, [`crate::cexpr`]): `9223372036854775807 + 1`. A division by zero is left to
/// its own diagnostic.
fn overflowing_constant(e: &Expr) -> Option<Span> {
    /// `e`'s value where it is a constant that does not overflow; the first overflow's place
    /// goes to `at`.
    fn value(e: &Expr, at: &mut Option<Span>) -> Option<i64> {
        fn checked(r: Option<i64>, e: &Expr, at: &mut Option<Span>) -> Option<i64> {
            if r.is_none() && at.is_none() {
                *at = Some(e.span);
            }
            r
        }
        match &e.kind {
            ExprKind::Int(v) => Some(*v),
            ExprKind::Unary(UnOp::Neg, a) => {
                let a = value(a, at)?;
                checked(a.checked_neg(), e, at)
            }
            ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div | BinOp::Rem), a, b) => {
                let (a, b) = (value(a, at), value(b, at));
                let (a, b) = (a?, b?);
                match op {
                    BinOp::Add => checked(a.checked_add(b), e, at),
                    BinOp::Sub => checked(a.checked_sub(b), e, at),
                    BinOp::Mul => checked(a.checked_mul(b), e, at),
                    _ if b == 0 => None,
                    BinOp::Div => checked(a.checked_div(b), e, at),
                    _ => checked(a.checked_rem(b), e, at),
                }
            }
            // Other operators: their operands are checked, their value is not folded.
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => value(a, at).and(None),
            ExprKind::Binary(_, a, b) => {
                value(a, at);
                value(b, at);
                None
            }
            ExprKind::Cond(c, a, b) => {
                value(c, at);
                value(a, at);
                value(b, at);
                None
            }
            ExprKind::Call(_, args) | ExprKind::Index { indices: args, .. } => {
                for x in args {
                    value(x, at);
                }
                None
            }
            ExprKind::Var(_) | ExprKind::Float { .. } | ExprKind::Builtin(_) => None,
        }
    }
    let mut at = None;
    value(e, &mut at);
    at
}

/// A coefficient of `e` or of a side of a comparison in it, as a polynomial in the parameters,
/// whose numerator does not fit in 64 bits: `N * 3037000500 * 3037000500` overflows the host's
/// `long long` wherever `N` is not 0, though no constant part of it does.
fn wide_coefficient(e: &Expr, derived: &DerivedPolys) -> Option<(Span, String)> {
    fn sides<'e>(x: &'e Expr, out: &mut Vec<&'e Expr>) {
        match &x.kind {
            ExprKind::Binary(op, a, b) if op.is_comparison() => out.extend([&**a, &**b]),
            ExprKind::Binary(_, a, b) => {
                sides(a, out);
                sides(b, out);
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => sides(a, out),
            ExprKind::Cond(c, a, b) => [c, a, b].into_iter().for_each(|y| sides(y, out)),
            _ => {}
        }
    }
    let mut compared = Vec::new();
    sides(e, &mut compared);
    if compared.is_empty() {
        compared.push(e);
    }
    let wide = |k: &constraints::Rational| i64::try_from(k.numer()).is_err();
    compared.into_iter().find_map(|x| to_poly(x, derived).and_then(|p| p.terms().find(|(_, k)| wide(k)).map(|(_, k)| (x.span, k.to_string()))))
}
