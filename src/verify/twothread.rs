//! The static checks: data races, barrier divergence and out-of-bounds accesses, for every
//! parameter value a system admits, by the two-thread reduction (as in GPUVerify).
//!
//! Model (from [`crate::access`]): each access site is (array, polynomial subscripts, read or
//! write, the path's guards, the barrier count `phase` when it is reached); each condition a
//! barrier depends on is an obligation. The kernel's launch shape is part of the context:
//! `0 <= threadIdx.d < block[d]`, `0 <= blockIdx.d < grid[d]`, derived scalars and host loop
//! counters as the host defines them. A second thread is the same model with every variable
//! that is not a parameter renamed (`x__2`). Z3 is asked for:
//! - *race*: two distinct threads, one writing, the same element: of a shared array within one
//!   block with equal phases; of a global array from different blocks, or from one block with
//!   equal phases; two atomic adds (a reduction's updates) commute and are never a race;
//! - *barrier divergence*: two threads of one block, at the same phase, reaching a condition a
//!   barrier depends on and evaluating it differently;
//! - *out of bounds*: one thread with a subscript below 0 or at least the extent.
//!
//! Unsat proves the property for every admitted value. Sat is a defect with a witness, but
//! only when everything the query relies on is modelled exactly; where the model had to leave
//! something out (an unmodelled subscript or phase, or a guard such as `p < N || q < N` that
//! the access's conditions only weaken), sat is *unverified*, as is Z3's unknown.

use super::machine::Who;
use super::quotients;
use super::radix::{self, Side};
use crate::access::{Access, Collector, Env};
use crate::frontend::ast::Builtin;
use crate::frontend::model::KernelFunction;
use crate::kernel::{Kernel, KernelParamKind};
use constraints::solver::{Backend, CheckResult, Model};
use constraints::{Constraint, Domain, Poly, System, Var};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The suffix of the second thread's variables.
const SECOND: &str = "$2"; // crate::names::copy_of(name, "2")

/// A concrete counterexample: parameter values and the threads involved.
#[derive(Clone, Debug)]
pub struct Witness {
    /// `race`, `barrier divergence` or `out of bounds`.
    pub defect: &'static str,
    /// What happens, in words (the array, sites, condition).
    pub detail: String,
    /// The function's integer parameters (and the kernel's derived scalars and host counters).
    pub params: BTreeMap<String, i64>,
    pub first: Who,
    pub second: Option<Who>,
    /// The sites (printed accesses, or the condition) involved.
    pub sites: Vec<String>,
    /// Every variable of the model (loop counters, auxiliaries), for the record.
    pub model: BTreeMap<String, i64>,
}

impl std::fmt::Display for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let params: Vec<String> = self.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        write!(f, "{}: {} at {}; {}", self.defect, self.detail, params.join(", "), self.first)?;
        if let Some(s) = &self.second {
            write!(f, " and {s}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
pub enum Verdict {
    Proved,
    Defect(Box<Witness>),
    Unverified(String),
}

impl Verdict {
    /// An unverified verdict with the question its undecided query asked (`deciding whether
    /// ...`), so that a user sees which access or barrier is left open; other verdicts as they are.
    fn deciding(self, question: &str) -> Verdict {
        match self {
            Verdict::Unverified(why) => Verdict::Unverified(format!("{why}, deciding whether {question}")),
            other => other,
        }
    }
}

/// The result of the static checks of one kernel under one system.
#[derive(Clone, Debug)]
pub struct StaticResult {
    pub verdict: Verdict,
    pub queries: u64,
}

fn var_of(b: Builtin) -> String {
    crate::access::builtin_var(b)
}

fn second(name: &str) -> String {
    format!("{name}{SECOND}")
}

/// The model of one kernel: its collector after walking the body, and which variables are
/// shared by all threads.
struct KernelModel<'b> {
    col: Collector<'b>,
    shared_vars: BTreeSet<String>,
    extents: BTreeMap<String, Vec<Poly>>,
    shared_arrays: BTreeSet<String>,
    blocks: usize,
    threads: usize,
    integer_params: Vec<String>,
    /// Each integer scalar parameter's C type range (`least <= p <= most`), asked for only
    /// when a witness falls outside it (see [`Checker::ask`]): in every query, these bounds
    /// cost Z3 its nonlinear answers on many leaves.
    type_ranges: Vec<Constraint>,
    /// The model's divisions: (quotient, remainder, dividend, divisor), for
    /// [`radix::fold_divisions`].
    divisions: Vec<(Var, Var, Poly, Poly)>,
    /// Auxiliaries written through others they equal: the collector's links, and a division
    /// whose dividend (so written) and divisor are another's, by that other's quotient and
    /// remainder. The race check's digit merge matches divisions by name, and the order a
    /// program divides in leaves several names for one digit.
    aliases: BTreeMap<String, Poly>,
    /// The launch's facts (parameter facts, derived scalars, host counters, index ranges) for
    /// both threads: part of every query.
    launch: Vec<Constraint>,
    /// The rest of the context, for both threads, asserted only where a query needs it.
    candidates: Vec<Candidate>,
    /// The launch facts' equalities that define a shared variable by others (`NH ==
    /// q'*BH*VEC` from `NH % (BH*VEC) == 0`): a bound is divided through them.
    definitions: Vec<(Var, Poly)>,
}

/// `p` with each auxiliary `aliases` names written through its alias, until none is left
/// (bounded: an alias never leads back to its own name, see [`aliases`]).
fn substituted(p: &Poly, aliases: &BTreeMap<String, Poly>) -> Poly {
    let mut p = p.clone();
    for _ in 0..64 {
        let Some(v) = p.vars().into_iter().find(|v| aliases.contains_key(v.name())) else { break };
        p = p.substitute(&v, &aliases[v.name()]);
    }
    p
}

/// The collector's links, and each division equal to another (the same dividend once written
/// through the aliases so far, the same divisor: floor division's quotient and remainder are
/// unique) written as that other. Every name is given an alias at most once, and only ever to
/// a name without one at that moment, so no chain of aliases returns to its start.
fn aliases(col: &Collector) -> BTreeMap<String, Poly> {
    let mut aliases = col.links.clone();
    for _ in 0..8 {
        let mut kept: Vec<(Poly, &Poly, &String)> = Vec::new();
        let mut changed = false;
        for (name, def) in &col.aux_defs {
            if !def.quotient || aliases.contains_key(name) {
                continue;
            }
            let dividend = substituted(&def.dividend, &aliases);
            let remainder = name.replacen(crate::access::AUX_QUOTIENT, crate::access::AUX_REMAINDER, 1);
            match kept.iter().find(|(x, d, _)| *x == dividend && **d == def.divisor) {
                Some((_, _, same)) if !aliases.contains_key(&remainder) => {
                    let same_remainder = same.replacen(crate::access::AUX_QUOTIENT, crate::access::AUX_REMAINDER, 1);
                    aliases.insert(name.clone(), Poly::var(same));
                    aliases.insert(remainder, Poly::var(&same_remainder));
                    changed = true;
                }
                _ => kept.push((dividend, &def.divisor, name)),
            }
        }
        if !changed {
            break;
        }
    }
    aliases
}

/// A fact of the context that a query includes once one of its `triggers` is in play (or
/// always, when it has none: a fact about parameters only). A definition of an auxiliary
/// (`x = d*q + r`) is triggered by `q` or `r`, not by `x`'s variables: the definitions of
/// divisions a query never mentions are nonlinear noise for Z3.
struct Candidate {
    constraint: Constraint,
    /// Its thread-local variables, live once it is included.
    locals: Vec<Var>,
    triggers: Vec<Var>,
}

/// The access model of a kernel as launched: `system` plus the integer parameters, derived
/// scalars, host loop counters and thread and block index ranges (the first `n` facts of the
/// context, `n` returned), then the body walked. The performance counters use it too.
pub fn launch_collector<'b>(function: &KernelFunction, kernel: &Kernel, system: &System, backend: &'b Backend) -> (Collector<'b>, usize) {
    launch_collector_from(function, kernel, Collector::with_choices(backend, system.clone()).floating_scalars_of(kernel))
}

/// As [`launch_collector`], from `col` (a collector told what to model).
fn launch_collector_from<'b>(function: &KernelFunction, kernel: &Kernel, mut col: Collector<'b>) -> (Collector<'b>, usize) {
    let env = Env::new();
    let int_params: Vec<String> = kernel.params.iter().filter(|p| matches!(p.kind, KernelParamKind::Scalar(t) if t.is_integer())).map(|p| p.name.clone()).collect();
    for p in &int_params {
        col.context.set_domain(Var::new(p), Domain::integer());
    }
    // What has no polynomial here is left free: a sat answer then need not be a launch.
    let mut exact = true;
    // A definition through a choice (`int h = N > 0 ? N : 0`, `max(N, 0)`) is true but
    // leaves the choice free (or bounded on one side) where `h` is read: not exact either.
    for d in &function.derived {
        match col.poly(&d.value, &env, &[]) {
            Some(v) => {
                exact &= !col.names_choice(&v);
                col.context.add(Constraint::eq(&Poly::var(&d.name), &v));
            }
            None => exact &= !d.ty.is_integer(),
        }
    }
    for h in &kernel.host_loops {
        let c = Poly::var(&h.var);
        match col.poly(&h.lo, &env, &[]) {
            Some(lo) => {
                exact &= !col.names_choice(&lo);
                col.context.add(Constraint::ge(&c, &lo));
            }
            None => exact = false,
        }
        match col.poly(&h.hi, &env, &[]) {
            Some(hi) => {
                exact &= !col.names_choice(&hi);
                col.context.add(if h.inclusive { Constraint::le(&c, &hi) } else { Constraint::lt(&c, &hi) });
            }
            None => exact = false,
        }
    }
    for d in 0..3u8 {
        for (b, extent) in [
            (Builtin::ThreadIdx(d), kernel.block.get(d as usize).cloned()),
            (Builtin::BlockIdx(d), kernel.grid.get(d as usize).and_then(|g| col.poly(g, &env, &[]))),
        ] {
            let v = Poly::var(&var_of(b));
            col.context.set_domain(Var::new(&var_of(b)), Domain::integer());
            let exists = (d as usize) < if matches!(b, Builtin::ThreadIdx(_)) { kernel.block.len() } else { kernel.grid.len() };
            if !exists {
                col.context.add(Constraint::eq(&v, &Poly::zero()));
                continue;
            }
            col.context.add(Constraint::ge(&v, &Poly::zero()));
            exact &= extent.as_ref().is_some_and(|e| !col.names_choice(e));
            if let Some(e) = extent {
                // An index is at most its extent less one; said so, the bound stays exact when
                // the extent has a rational coefficient (a coarsened block's `B0/8`, an integer
                // under `B0 % 8 == 0`), where `8*threadIdx.y < B0` alone would leave Z3 to find
                // `8*threadIdx.y <= B0 - 8` from the divisibility.
                col.context.add(Constraint::le(&v, &(&e - &Poly::one())));
            }
        }
    }
    let launch_facts = col.context.constraints().len();
    if !exact {
        col.weaken_context();
    }
    let mut env = Env::new();
    col.stmts(&kernel.body, &mut env, &[]);
    (col, launch_facts)
}

fn model<'b>(function: &KernelFunction, kernel: &Kernel, system: &System, backend: &'b Backend) -> KernelModel<'b> {
    // The verifier also models the elements of arrays the kernel only reads (a histogram's
    // `h[s[k]]` under `s[k] < 256`); the performance counters do not need them.
    let (col, launch_facts) = launch_collector_from(function, kernel, Collector::with_choices(backend, system.clone()).floating_scalars_of(kernel).with_element_values(kernel));
    let int_params: Vec<String> = kernel.params.iter().filter(|p| matches!(p.kind, KernelParamKind::Scalar(t) if t.is_integer())).map(|p| p.name.clone()).collect();
    let mut shared_vars: BTreeSet<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
    shared_vars.extend(system.vars().iter().map(|v| v.name().to_string()));
    // A quotient or remainder of shared values (`N / 2`) is shared too.
    loop {
        let before = shared_vars.len();
        for (name, def) in &col.aux_defs {
            if def.dividend.vars().iter().chain(def.divisor.vars().iter()).all(|v| shared_vars.contains(v.name())) {
                shared_vars.insert(name.clone());
            }
        }
        // Likewise an element read at a subscript of shared values (both threads read one
        // element there, so one value), and a `min`/`max` of shared values.
        for (name, (_, indices)) in &col.value_defs {
            if indices.iter().all(|p| p.vars().iter().all(|v| shared_vars.contains(v.name()))) {
                shared_vars.insert(name.clone());
            }
        }
        for (name, def) in col.choices.iter().flatten() {
            let conditions = def.when.iter().flat_map(|(t, e)| t.iter().chain(e)).flat_map(|c| c.vars());
            if def.a.vars().into_iter().chain(def.b.vars()).chain(conditions).all(|v| shared_vars.contains(v.name())) {
                shared_vars.insert(name.clone());
            }
        }
        if shared_vars.len() == before {
            break;
        }
    }
    let mut extents = BTreeMap::new();
    for p in &kernel.params {
        if let KernelParamKind::Array { extents: e, .. } = &p.kind {
            extents.insert(p.name.clone(), e.clone());
        }
    }
    for s in &kernel.shared {
        extents.insert(s.name.clone(), s.extents.clone());
    }
    let mut m = KernelModel {
        col,
        shared_vars,
        extents,
        shared_arrays: kernel.shared.iter().map(|s| s.name.clone()).collect(),
        blocks: kernel.grid.len(),
        threads: kernel.block.len(),
        integer_params: int_params,
        type_ranges: type_ranges(kernel),
        launch: Vec::new(),
        candidates: Vec::new(),
        divisions: Vec::new(),
        aliases: BTreeMap::new(),
        definitions: Vec::new(),
    };
    m.aliases = aliases(&m.col);
    for (name, def) in &m.col.aux_defs {
        if let (true, Some(rest)) = (def.quotient, name.strip_prefix(crate::access::AUX_QUOTIENT)) {
            m.divisions.push((Var::new(name), Var::new(&format!("{}{rest}", crate::access::AUX_REMAINDER)), substituted(&def.dividend, &m.aliases), def.divisor.clone()));
        }
    }
    // Exact divisions of shared values (`half = n / 2` under `n % (2*m) == 0`) as equalities,
    // found once per kernel from the launch facts' definitions: a quotient lemma can then see
    // through `half` to `m*q'`.
    let mut launch_context = System::new();
    m.col.context.constraints()[..launch_facts].iter().for_each(|c| launch_context.add(c.clone()));
    let definitions = quotients::defining_equalities(&launch_context, &|v| m.thread_local(v));
    let shared_divisions: Vec<_> = m.divisions.iter().filter(|(q, ..)| m.shared_vars.contains(q.name())).cloned().collect();
    let exact = quotients::exact_divisions(&shared_divisions, &definitions, &|v| m.col.context.domain(v).is_integer());
    m.launch.extend(exact);
    // Only integer-valued definitions: a reduced bound `a < A` needs an integer `A`.
    let integer = |v: &Var| m.col.context.domain(v).is_integer();
    m.definitions = definitions.into_iter().filter(|(v, p)| integer(v) && p.vars().iter().all(integer)).collect();
    // Each fact for the first thread, and renamed for the second when it names its variables.
    let both: Vec<(usize, Constraint)> = m
        .col
        .context
        .constraints()
        .iter()
        .enumerate()
        .flat_map(|(i, c)| {
            let two = c.vars().iter().any(|v| m.thread_local(v)).then(|| m.rename(c));
            std::iter::once((i, c.clone())).chain(two.map(|t| (i, t)))
        })
        .collect();
    for (i, c) in both {
        if i < launch_facts {
            m.launch.push(c);
            continue;
        }
        let locals: Vec<Var> = c.vars().into_iter().filter(|v| m.thread_local(v)).collect();
        let aux: Vec<Var> = locals.iter().filter(|v| crate::access::is_aux(v.name())).cloned().collect();
        let triggers = if aux.is_empty() { locals.clone() } else { aux };
        m.candidates.push(Candidate { constraint: c, locals, triggers });
    }
    m
}

/// `least <= p <= most` for each integer scalar parameter `p` of `kernel`, by its C type.
fn type_ranges(kernel: &Kernel) -> Vec<Constraint> {
    let mut out = Vec::new();
    for p in &kernel.params {
        if let KernelParamKind::Scalar(t) = p.kind {
            if let Some((least, most)) = t.integer_range() {
                let v = Poly::var(&p.name);
                out.push(Constraint::le(&Poly::int(least), &v));
                out.push(Constraint::le(&v, &Poly::int(most)));
            }
        }
    }
    out
}

impl KernelModel<'_> {
    fn rename_poly(&self, p: &Poly) -> Poly {
        let mut out = p.clone();
        for v in p.vars() {
            if !self.shared_vars.contains(v.name()) {
                out = out.substitute(&v, &Poly::var(&second(v.name())));
            }
        }
        out
    }

    fn rename(&self, c: &Constraint) -> Constraint {
        Constraint::new(self.rename_poly(c.poly()), c.rel())
    }

    /// A query for one thread's guards, or two threads' (the second's renamed); the launch
    /// context is added by [`KernelModel::complete`].
    fn system(&self, first: &[Constraint], second_guards: Option<&[Constraint]>) -> System {
        let mut sys = System::new();
        first.iter().for_each(|g| sys.add(g.clone()));
        if let Some(g2) = second_guards {
            g2.iter().for_each(|g| sys.add(self.rename(g)));
        }
        sys
    }

    /// `p` with [`KernelModel::aliases`] substituted.
    fn linked(&self, p: &Poly) -> Poly {
        substituted(p, &self.aliases)
    }

    fn thread_local(&self, v: &Var) -> bool {
        !self.shared_vars.contains(v.name())
    }

    /// The arrays whose element values (thread-local ones: see [`crate::access`]'s contract)
    /// `polys` and `guards` name: a query naming one over-approximates the data.
    fn values_named<'p>(&self, polys: impl IntoIterator<Item = &'p Poly>, guards: &[Constraint]) -> BTreeSet<String> {
        let vars = polys.into_iter().flat_map(Poly::vars).chain(guards.iter().flat_map(Constraint::vars));
        vars.filter(|v| crate::access::is_element_value(v.name()) && self.thread_local(v)).filter_map(|v| self.col.value_defs.get(v.name()).map(|(a, _)| a.clone())).collect()
    }

    /// The query plus the part of the context it needs: the launch facts for both threads,
    /// and each other fact once it is triggered (see [`Candidate`]).
    fn complete(&self, query: &System) -> System {
        let mut sys = query.clone();
        // A query of one thread needs no copy of the facts for the second: whatever they say
        // about shared variables, the first thread's copy says too.
        let two = query.vars().iter().any(|v| v.name().ends_with(SECOND));
        self.launch.iter().filter(|c| two || !c.vars().iter().any(|v| v.name().ends_with(SECOND))).for_each(|c| sys.add(c.clone()));
        let mut live: BTreeSet<Var> = sys.vars().into_iter().filter(|v| self.thread_local(v)).collect();
        let mut taken = vec![false; self.candidates.len()];
        loop {
            let mut grew = false;
            for (c, taken) in self.candidates.iter().zip(taken.iter_mut()) {
                if !*taken && (c.triggers.is_empty() || c.triggers.iter().any(|v| live.contains(v))) {
                    *taken = true;
                    grew = true;
                    sys.add(c.constraint.clone());
                    live.extend(c.locals.iter().cloned());
                }
            }
            if !grew {
                break;
            }
        }
        for (v, d) in self.col.context.domains() {
            sys.set_domain(v.clone(), d.clone());
        }
        for v in sys.vars() {
            if !sys.domains().contains_key(&v) {
                sys.set_domain(v, Domain::integer());
            }
        }
        sys
    }

    fn same(&self, sys: &mut System, b: Builtin) {
        let v = var_of(b);
        sys.add(Constraint::eq(&Poly::var(&v), &Poly::var(&second(&v))));
    }

    /// Cases that together say "the two coordinates differ": differ in the first coordinate,
    /// or agree on it and differ in the next, ... (one `!=` each, which Z3 handles well).
    fn differ(&self, sys: &System, coords: &[Builtin]) -> Vec<System> {
        (0..coords.len())
            .map(|i| {
                let mut s = sys.clone();
                for c in &coords[..i] {
                    self.same(&mut s, *c);
                }
                let v = var_of(coords[i]);
                s.add(Constraint::ne(&Poly::var(&v), &Poly::var(&second(&v))));
                s
            })
            .collect()
    }

    fn block_coords(&self) -> Vec<Builtin> {
        (0..self.blocks as u8).rev().map(Builtin::BlockIdx).collect()
    }

    fn thread_coords(&self) -> Vec<Builtin> {
        (0..self.threads as u8).rev().map(Builtin::ThreadIdx).collect()
    }

    fn same_block(&self, sys: &mut System) {
        for d in 0..3 {
            self.same(sys, Builtin::BlockIdx(d));
        }
    }

    /// Equal phases, when both are modelled (else `false`: the query is an over-approximation).
    fn same_phase(&self, sys: &mut System, a: &Option<Poly>, b: &Option<Poly>) -> bool {
        match (a, b) {
            (Some(x), Some(y)) => {
                sys.add(Constraint::eq(x, &self.rename_poly(y)));
                true
            }
            _ => false,
        }
    }

    fn who(&self, m: &Model, suffix: &str) -> Who {
        let get = |b: Builtin| m.get(&format!("{}{suffix}", var_of(b))).and_then(to_i64).unwrap_or(0);
        Who { block: [0, 1, 2].map(|d| get(Builtin::BlockIdx(d))), thread: [0, 1, 2].map(|d| get(Builtin::ThreadIdx(d))) }
    }
}

/// With `METAFORK_VERIFY_TRACE` set, every query, its answer and its time go to stderr: the
/// way to find which query leaves a leaf unverified.
fn trace(sys: &System, result: &CheckResult, started: std::time::Instant) {
    if std::env::var_os("METAFORK_VERIFY_TRACE").is_some() {
        let answer = match result {
            CheckResult::Sat(_) => "sat".to_string(),
            CheckResult::Unsat => "unsat".to_string(),
            CheckResult::Unknown(r) => format!("unknown ({r})"),
        };
        crate::command::warn(&format!("[verify] {answer} in {:.0?}:\n{sys}", started.elapsed()));
    }
}

fn to_i64(r: &constraints::Rational) -> Option<i64> {
    r.is_integer().then(|| i64::try_from(r.to_integer()).ok()).flatten()
}

/// Runs the checks, counting queries; stops at the first defect or unverified query.
struct Checker<'m, 'b> {
    m: &'m KernelModel<'b>,
    backend: &'b Backend,
    function: &'m KernelFunction,
    queries: u64,
    /// Digit facts proved or not, by (digit, radix, guards).
    digits: HashMap<(String, String, String), bool>,
    /// Parameter products proved nonnegative or not.
    nonneg: HashMap<String, bool>,
}

enum Answer {
    Unsat,
    Sat(Model),
}

/// Whether each completed query Z3 decided was unsat, by its text, for the whole process: the
/// leaves' codes share most of their queries (an unrolled code and the one it came from, the
/// renamed copies of one access), and about half of a tree's queries repeat one asked before.
/// Only decided answers are kept (unknown depends on the time limit; sat and unsat do not),
/// and only whether it was unsat: a defect's witness is asked of Z3 again. Shared by the
/// verifier's threads; emptied when it holds [`VERDICTS_KEPT`] answers, so a long-running
/// process (the fuzzer) stays bounded.
static VERDICTS: std::sync::OnceLock<std::sync::Mutex<HashMap<String, bool>>> = std::sync::OnceLock::new();
const VERDICTS_KEPT: usize = 100_000;

/// Empties the process's memory of decided queries: a benchmark's timed runs each start cold.
pub fn forget_verdicts() {
    if let Ok(mut map) = VERDICTS.get_or_init(Default::default).lock() {
        map.clear();
    }
}

fn remembered(key: &str) -> Option<bool> {
    VERDICTS.get_or_init(Default::default).lock().ok()?.get(key).copied()
}

fn remember(key: String, unsat: bool) {
    if let Ok(mut map) = VERDICTS.get_or_init(Default::default).lock() {
        if map.len() >= VERDICTS_KEPT {
            map.clear();
        }
        map.insert(key, unsat);
    }
}

impl Checker<'_, '_> {
    /// The query with its context, the context's key in [`VERDICTS`], and what is remembered
    /// of it. A remembered answer the caller uses counts as a query all the same, so that the
    /// count does not depend on which thread asked first.
    fn lookup(&self, query: &System) -> (System, String, Option<bool>) {
        let sys = self.m.complete(query);
        let key = format!("{sys:?}");
        let known = remembered(&key);
        (sys, key, known)
    }

    /// Z3's answer to a completed query (counted, remembered when decided, and traced on
    /// request).
    fn solve(&mut self, sys: &System, key: String) -> CheckResult {
        self.queries += 1;
        let started = std::time::Instant::now();
        let mut result = self.backend.check(sys);
        trace(sys, &result, started);
        // Z3's nonlinear procedures can lose their way on a product of parameters that the
        // question does not need (`BY * BX <= 1024`, a tree's `32*B^2 <= R_B`): asked again
        // without such facts, unsat still proves the whole system unsat (fewer constraints,
        // more solutions); any other answer leaves it unknown.
        if matches!(result, CheckResult::Unknown(_)) {
            if let Some(relaxed) = self.without_parameter_products(sys) {
                self.queries += 1;
                let started = std::time::Instant::now();
                let retried = self.backend.check(&relaxed);
                trace(&relaxed, &retried, started);
                if retried.is_unsat() {
                    result = CheckResult::Unsat;
                }
            }
        }
        if !matches!(result, CheckResult::Unknown(_)) {
            remember(key, result.is_unsat());
        }
        result
    }

    /// `sys` without its nonlinear facts on parameters alone (every variable shared by the
    /// two threads, none an auxiliary the model made up, such as a quotient's definition,
    /// which bounds need), or `None` when it has none.
    fn without_parameter_products(&self, sys: &System) -> Option<System> {
        let product_of_parameters = |c: &Constraint| {
            let vars = c.vars();
            c.poly().total_degree() >= 2 && vars.iter().all(|v| !self.m.thread_local(v) && !crate::names::is_internal(v.name()))
        };
        if !sys.constraints().iter().any(product_of_parameters) {
            return None;
        }
        let mut relaxed = System::new();
        sys.constraints().iter().filter(|c| !product_of_parameters(c)).for_each(|c| relaxed.add(c.clone()));
        for (v, d) in sys.domains() {
            relaxed.set_domain(v.clone(), d.clone());
        }
        Some(relaxed)
    }

    /// Whether the query with its context is unsat, remembered or from Z3. Unknown is "not
    /// unsat".
    fn unsat(&mut self, query: &System) -> bool {
        match self.lookup(query) {
            (_, _, Some(unsat)) => {
                self.queries += 1;
                unsat
            }
            (sys, key, None) => self.solve(&sys, key).is_unsat(),
        }
    }

    /// Z3's answer with a model for a defect's witness; a query remembered as sat is asked
    /// again for one.
    fn ask(&mut self, query: &System) -> Result<Answer, Verdict> {
        let (sys, key, known) = self.lookup(query);
        if known == Some(true) {
            self.queries += 1;
            return Ok(Answer::Unsat);
        }
        let result = self.solve(&sys, key);
        let sys = &sys;
        match result {
            CheckResult::Unsat => Ok(Answer::Unsat),
            CheckResult::Sat(m) => match self.small(sys) {
                Some(small) => Ok(Answer::Sat(small)),
                None if self.m.type_ranges.iter().all(|c| c.holds_at(&m.values) != Ok(false)) => Ok(Answer::Sat(m)),
                // A witness past its parameter's C type (`N = 2^31 + 230` for an `int N`) is
                // no launch: asked again within the types.
                None => {
                    let mut typed = sys.clone();
                    self.m.type_ranges.iter().for_each(|c| typed.add(c.clone()));
                    self.queries += 1;
                    match self.backend.check(&typed) {
                        CheckResult::Unsat => Ok(Answer::Unsat),
                        CheckResult::Sat(m) => Ok(Answer::Sat(m)),
                        CheckResult::Unknown(r) => Err(Verdict::Unverified(format!("Z3 could not decide a query within the parameters' C types ({r})"))),
                    }
                }
            },
            CheckResult::Unknown(r) => Err(Verdict::Unverified(format!("Z3 could not decide a query ({r})"))),
        }
    }

    /// A witness with small parameters when one exists (easier to read and to replay).
    fn small(&mut self, sys: &System) -> Option<Model> {
        let mut s = sys.clone();
        for p in self.function.data_parameters().iter().chain(&self.function.program_parameters()) {
            s.add(Constraint::le(&Poly::var(p), &Poly::int(super::sample::MAX_DATA)));
        }
        self.queries += 1;
        match self.backend.check(&s) {
            CheckResult::Sat(m) => Some(m),
            _ => None,
        }
    }

    fn witness(&self, m: &Model, defect: &'static str, detail: String, sites: Vec<String>, two: bool) -> Verdict {
        let mut params = BTreeMap::new();
        for p in &self.m.integer_params {
            if let Some(v) = m.get(p).and_then(to_i64) {
                params.insert(p.clone(), v);
            }
        }
        let model = m.values.iter().filter_map(|(k, v)| Some((k.name().to_string(), to_i64(v)?))).collect();
        Verdict::Defect(Box::new(Witness { defect, detail, params, first: self.m.who(m, ""), second: two.then(|| self.m.who(m, SECOND)), sites, model }))
    }

    /// Sat on a query that names element values of `arrays`: the property is left open, since
    /// the values the model chose may be no data's.
    fn data_dependent(defect: &str, detail: &str, arrays: &BTreeSet<String>) -> Verdict {
        let names: Vec<String> = arrays.iter().map(|a| format!("`{a}`")).collect();
        // What is proved whatever the arrays hold, where the defect has such a way out.
        let way_out = match defect {
            "race" => "; a sum written `+=` (an atomic add) is proved whatever they hold, and a scatter through a permutation can be written as a gather through its inverse",
            "out of bounds" => "; a guard on the subscript's value as it is read (`if (0 <= e && e < N)`) is proved whatever they hold",
            _ => "",
        };
        Verdict::Unverified(format!("possible {defect} ({detail}) for some values of {}: whether any input holds them is not known to the proof{way_out}", names.join(", ")))
    }

    /// Sat on an exact query is a defect; on an over-approximation it leaves the property open.
    fn found(&self, m: &Model, exact: bool, defect: &'static str, detail: String, sites: Vec<String>, two: bool) -> Verdict {
        if exact {
            self.witness(m, defect, detail, sites, two)
        } else {
            Verdict::Unverified(format!("possible {defect} ({detail}): the model of the kernel is not exact there"))
        }
    }

    /// `pairs` with each lone remainder pair `r == r'` of a division `X / D` (`D` the same for
    /// both threads, no quotient pair beside it) replaced by `X == X'` where the two threads'
    /// dividends are proved less than `D` apart: then `X - X' == D*(q - q')` forces `q == q'`,
    /// and the equalities are equivalent. A rotation `y[(i + S) % N]` over `0 <= i < N`
    /// writes each element once: `i + S == i' + S'`, which the split settles.
    fn remainders_widened(&mut self, pairs: Vec<(Poly, Poly)>, first: &[Constraint], second: &[Constraint]) -> Vec<(Poly, Poly)> {
        let m = self.m;
        let lone = |v: &Var, pairs: &[(Poly, Poly)]| pairs.iter().any(|(p, q)| p.as_var() == Some(v) && q.as_var() == Some(v));
        let mut out = pairs.clone();
        for (q, r, dividend, divisor) in &m.divisions {
            if divisor.vars().iter().any(|v| m.thread_local(v)) || !lone(r, &out) || lone(q, &out) {
                continue;
            }
            let apart = [Constraint::ge(&(dividend - &m.rename_poly(dividend)), divisor), Constraint::ge(&(&m.rename_poly(dividend) - dividend), divisor)];
            let near = apart.into_iter().all(|far| {
                let mut sys = m.system(first, Some(second));
                sys.add(far);
                self.unsat(&sys)
            });
            if near {
                let at = out.iter().position(|(p, q)| p.as_var() == Some(r) && q.as_var() == Some(r)).expect("a lone pair");
                out[at] = (dividend.clone(), dividend.clone());
            }
        }
        out
    }

    /// Whether `0 <= digit < radix` (and `radix >= 1`) for every thread reaching a site with
    /// these guards; remembered, since the same digits recur across site pairs. An unknown
    /// answer is "not proved" (the equality is then kept whole, which is still sound).
    fn digit(&mut self, digit: &Poly, guards: &[Constraint], radix: &Poly) -> bool {
        let key = (digit.to_string(), radix.to_string(), format!("{guards:?}"));
        if let Some(known) = self.digits.get(&key) {
            return *known;
        }
        let fails = [Constraint::lt(radix, &Poly::one()), Constraint::lt(digit, &Poly::zero()), Constraint::ge(digit, radix)];
        let proved = fails.into_iter().all(|bad| {
            let mut sys = self.m.system(guards, None);
            sys.add(bad);
            self.quotient_lemmas(&sys).into_iter().for_each(|l| sys.add(l));
            self.product_lemmas(digit, &sys).into_iter().for_each(|l| sys.add(l));
            self.unsat(&sys)
        });
        self.digits.insert(key, proved);
        proved
    }

    /// Facts the context implies that Z3's nonlinear search is slow to find: for each term
    /// `c*v*P` of `f` (`v` thread-local, `P` a product of parameters with `P >= 0` proved) and
    /// each bound `b < 0` or `b <= 0` of the query's context in which `v` occurs linearly,
    /// `b*P <= 0` (`(b + 1)*P <= 0` for `<` when `b` is integer-valued). An upper-bound check
    /// such as `blockIdx.y*B0 + threadIdx.y < n`, or a digit check `4*threadIdx.y*B0 + 4*z <
    /// B0^2` under `4*threadIdx.y + 4 <= B0`, then needs only linear reasoning over the
    /// products. Being implied, they change no answer, only its speed.
    fn product_lemmas(&mut self, f: &Poly, query: &System) -> Vec<Constraint> {
        let context = self.m.complete(query);
        let mut lemmas = Vec::new();
        for (mono, c) in f.terms() {
            let locals: Vec<&(Var, u32)> = mono.factors().iter().filter(|(v, _)| self.m.thread_local(v)).collect();
            let [(v, 1)] = locals.as_slice() else { continue };
            let factor = Poly::term(constraints::Rational::from_integer(1.into()), mono.without(v));
            if factor.as_constant().is_some() || !c.is_integer() || !self.nonnegative(&factor) {
                continue;
            }
            for bound in context.constraints() {
                let p = bound.poly();
                let linear = p.terms().filter(|(m, _)| m.exponent(v) > 0).all(|(m, _)| m.factors() == [(v.clone(), 1)]);
                if !linear || !p.vars().contains(v) {
                    continue;
                }
                let integral = p.terms().all(|(_, k)| k.is_integer()) && p.vars().iter().all(|x| context.domains().get(x).is_some_and(|d| d.is_integer()));
                let lemma = match bound.rel() {
                    constraints::Rel::Lt if integral => Constraint::le(&((p + &Poly::one()) * &factor), &Poly::zero()),
                    constraints::Rel::Lt | constraints::Rel::Le => Constraint::le(&(p * &factor), &Poly::zero()),
                    _ => continue,
                };
                if !lemmas.contains(&lemma) {
                    lemmas.push(lemma);
                }
            }
        }
        lemmas
    }

    /// Bounds on quotients that the context implies and Z3's nonlinear search is slow to find
    /// (im2col's `oy = col / OW` under `col < OH*OW`): for each division `a = d*q + r` (`r >= 0`)
    /// of the query, one thread's or the other's, with `d >= 1` proved, and each bound
    /// `a < U` of the context (`k*a + e < 0` or `<= 0`, `k > 0`, `e` free of thread-local
    /// variables) whose `U`, as written or with up to two of the context's defining equalities
    /// substituted (`total == OH*OW`, `n == m*q'` from `n % m == 0`), is `d*P` exactly: `q < P`
    /// (`d*q <= a < d*P`). Being implied, they change no answer, only its speed; with them a
    /// bound such as `oy + ki < H` needs only linear reasoning.
    fn quotient_lemmas(&mut self, query: &System) -> Vec<Constraint> {
        let context = self.m.complete(query);
        let present = context.vars();
        let definitions = quotients::defining_equalities(&context, &|v| self.m.thread_local(v));
        let mut lemmas = Vec::new();
        let divisions: Vec<(Var, Poly, Poly)> = self
            .m
            .divisions
            .iter()
            .flat_map(|(q, _, a, d)| {
                let second = (Var::new(&second(q.name())), self.m.rename_poly(a), self.m.rename_poly(d));
                [(q.clone(), a.clone(), d.clone()), second]
            })
            .filter(|(q, _, _)| present.contains(q))
            .collect();
        for (q, a, d) in divisions {
            let Some((lead, lead_c)) = a.terms().next().map(|(m, c)| (m.clone(), c.clone())) else { continue };
            if !self.nonnegative(&(&d - &Poly::one())) {
                continue;
            }
            for bound in context.constraints() {
                let p = bound.poly();
                let Some(k) = p.terms().find(|(m, _)| **m == lead).map(|(_, c)| c / &lead_c) else { continue };
                if k <= constraints::Rational::from_integer(0.into()) {
                    continue;
                }
                // `p == k*a + e`, so `a < U` with `U = -e/k` (`<`) or `-e/k + 1` (`<=`: `a` is an integer).
                let e = p - &a.scale(&k);
                if e.vars().iter().any(|v| self.m.thread_local(v)) {
                    continue;
                }
                let mut upper = e.scale(&(-k.recip()));
                match bound.rel() {
                    constraints::Rel::Lt => {}
                    constraints::Rel::Le => upper = upper + Poly::one(),
                    _ => continue,
                }
                if let Some(p) = quotients::exact_quotient(&upper, &d, &definitions, 2) {
                    let lemma = quotients::below(&q, &p);
                    if !lemmas.contains(&lemma) {
                        lemmas.push(lemma);
                    }
                }
            }
        }
        lemmas
    }

    /// Whether a product of parameters is never negative under the launch facts (remembered).
    fn nonnegative(&mut self, p: &Poly) -> bool {
        let key = p.to_string();
        if let Some(known) = self.nonneg.get(&key) {
            return *known;
        }
        let proved = self.unsat(&System::new().with(Constraint::lt(p, &Poly::zero())));
        self.nonneg.insert(key, proved);
        proved
    }

    fn bounds(&mut self) -> Result<(), Verdict> {
        for a in &self.m.col.accesses {
            let Some(extents) = self.m.extents.get(&a.array) else { continue };
            for (i, (idx, extent)) in a.indices.iter().zip(extents).enumerate() {
                let Some(idx) = idx else {
                    let why = a.unmodelled.as_deref().map(|w| format!(": {w}")).unwrap_or_default();
                    return Err(Verdict::Unverified(format!("subscript {} of `{}` is not modelled{why}", i + 1, a.text)));
                };
                // Each side reduced to its high digits where the subscript is mixed-radix.
                let m = self.m;
                let idx = &radix::unfold_divisions(&radix::fold_divisions(idx, &m.divisions), &m.divisions);
                let mut in_range = |digit: &Poly, _: Side, radix: &Poly| self.digit(digit, &a.guards, radix);
                let (lo_f, lo_e) = radix::reduce_comparison(idx, &Poly::zero(), &m.definitions, &|v| m.thread_local(v), &mut in_range);
                let (hi_f, hi_e) = radix::reduce_comparison(idx, extent, &m.definitions, &|v| m.thread_local(v), &mut in_range);
                for (upper, bad) in [(false, Constraint::lt(&lo_f, &lo_e)), (true, Constraint::ge(&hi_f, &hi_e))] {
                    let mut sys = self.m.system(&a.guards, None);
                    sys.add(bad);
                    // Quotient bounds first: the product lemmas multiply them too (a block
                    // start `(i/m)*m` under `i < n == m*q'`).
                    self.quotient_lemmas(&sys).into_iter().for_each(|l| sys.add(l));
                    self.product_lemmas(if upper { &hi_f } else { &lo_f }, &sys).into_iter().for_each(|l| sys.add(l));
                    // Each shared variable of the comparison in the forms the launch facts give
                    // it (`W == gx*BW*GS + 4`; `NH` in a reversed `NH - 1 - h >= 0` too), so
                    // that it meets the product lemmas' terms in linear reasoning.
                    let compared = if upper { &hi_f - &hi_e } else { &lo_f - &lo_e };
                    for v in compared.vars().into_iter().filter(|v| m.definitions.iter().any(|(d, _)| d == v)) {
                        let whole = Poly::from_var(v);
                        quotients::equal_forms(&whole, &m.definitions, 2).iter().for_each(|form| sys.add(Constraint::eq(&whole, form)));
                    }
                    let question = format!("`{}` {} outside `{}`'s extents", a.text, if a.write { "writes" } else { "reads" }, a.array);
                    if let Answer::Sat(m) = self.ask(&sys).map_err(|v| v.deciding(&question))? {
                        let detail = question;
                        let data = self.m.values_named(a.indices.iter().flatten(), &a.guards);
                        if !data.is_empty() {
                            return Err(Self::data_dependent("out of bounds", &detail, &data));
                        }
                        return Err(self.found(&m, a.exact_guards, "out of bounds", detail, vec![a.text.clone()], false));
                    }
                }
            }
        }
        Ok(())
    }

    fn races(&mut self) -> Result<(), Verdict> {
        let accesses = &self.m.col.accesses;
        for (i, w) in accesses.iter().enumerate().filter(|(_, a)| a.write) {
            for (j, b) in accesses.iter().enumerate() {
                if b.array != w.array || (b.write && j < i) || (w.atomic && b.atomic) {
                    continue;
                }
                self.pair(w, b)?;
            }
        }
        Ok(())
    }

    fn pair(&mut self, w: &Access, b: &Access) -> Result<(), Verdict> {
        let mut base = self.m.system(&w.guards, Some(&b.guards));
        // Guards that leave a condition out admit points where an access does not run.
        let mut exact = w.exact_guards && b.exact_guards;
        // Every subscript's digit equalities together: a quotient in one subscript and its
        // remainder in another (`out[c][y][x]` with `y = e / W`, `x = e % W`) merge too.
        let m = self.m;
        let mut pairs = Vec::new();
        {
            let mut in_range = |digit: &Poly, side: Side, radix: &Poly| self.digit(digit, if side == Side::First { &w.guards } else { &b.guards }, radix);
            for (x, y) in w.indices.iter().zip(&b.indices) {
                match (x, y) {
                    (Some(x), Some(y)) => {
                        let prepare = |p: &Poly| radix::unfold_divisions(&radix::fold_divisions(&m.linked(p), &m.divisions), &m.divisions);
                        pairs.extend(radix::split(&prepare(x), &prepare(y), &|v| m.thread_local(v), &mut in_range));
                    }
                    _ => exact = false,
                }
            }
        }
        // A quotient and remainder found equal are their dividend found equal, and so is a
        // remainder whose dividends differ by less than the divisor: split that too (once
        // more per level of division: a layout change's digits peeled one by one nest four
        // deep).
        for _ in 0..radix::MAX_DEPTH {
            let merged = radix::merge_divisions(pairs.clone(), &m.divisions, &|v| m.thread_local(v));
            let merged = self.remainders_widened(merged, &w.guards, &b.guards);
            if merged == pairs {
                break;
            }
            let mut in_range = |digit: &Poly, side: Side, radix: &Poly| self.digit(digit, if side == Side::First { &w.guards } else { &b.guards }, radix);
            pairs = merged.into_iter().flat_map(|(p, q)| radix::split(&p, &q, &|v| m.thread_local(v), &mut in_range)).collect();
        }
        // Digits that are different constants: the two never touch one element (the split is
        // an equivalence wherever its digit checks hold, and they were proved), with no query.
        if pairs.iter().any(|(p, q)| p.as_constant().is_some() && q.as_constant().is_some() && p != q) {
            return Ok(());
        }
        for (p, q) in pairs {
            base.add(Constraint::eq(&p, &m.rename_poly(&q)));
        }
        let detail = format!("`{}` ({}) and `{}` ({}) may touch the same element of `{}`", w.text, "write", b.text, if b.write { "write" } else { "read" }, w.array);
        let sites = vec![w.text.clone(), b.text.clone()];
        let mut cases = Vec::new();
        // One block, two threads, between the same two barriers.
        let mut one_block = base.clone();
        self.m.same_block(&mut one_block);
        let phased = self.m.same_phase(&mut one_block, &w.phase, &b.phase);
        for s in self.m.differ(&one_block, &self.m.thread_coords()) {
            cases.push((s, exact && phased));
        }
        // Two blocks, for global memory.
        if !self.m.shared_arrays.contains(&w.array) {
            for s in self.m.differ(&base, &self.m.block_coords()) {
                cases.push((s, exact));
            }
        }
        let mut data = self.m.values_named(w.indices.iter().flatten(), &w.guards);
        data.extend(self.m.values_named(b.indices.iter().flatten(), &b.guards));
        for (sys, exact) in cases {
            if let Answer::Sat(m) = self.ask(&sys).map_err(|v| v.deciding(&detail))? {
                if !data.is_empty() {
                    return Err(Self::data_dependent("race", &detail, &data));
                }
                return Err(self.found(&m, exact, "race", detail, sites, true));
            }
        }
        Ok(())
    }

    fn divergence(&mut self) -> Result<(), Verdict> {
        for u in &self.m.col.uniformity {
            if !u.thread_dependent {
                continue;
            }
            let mut base = self.m.system(&u.guards, Some(&u.guards));
            self.m.same_block(&mut base);
            let exact = self.m.same_phase(&mut base, &u.phase, &u.phase);
            let mut cases = Vec::new();
            if let Some(conjuncts) = &u.condition {
                for c in conjuncts {
                    let mut s = base.clone();
                    conjuncts.iter().for_each(|x| s.add(x.clone()));
                    s.add(self.m.rename(c).negate());
                    cases.push(s);
                }
            } else if let Some([lo, hi]) = &u.bounds {
                for p in [lo, hi] {
                    let mut s = base.clone();
                    s.add(Constraint::ne(p, &self.m.rename_poly(p)));
                    cases.push(s);
                }
            } else {
                return Err(Verdict::Unverified(format!("a barrier depends on `{}`, which the model cannot express", u.text)));
            }
            let named = u.condition.iter().flatten().map(Constraint::poly).chain(u.bounds.iter().flatten());
            let data = self.m.values_named(named, &u.guards);
            let detail = format!("threads of one block evaluate `{}` differently, and a barrier depends on it", u.text);
            for sys in cases {
                if let Answer::Sat(m) = self.ask(&sys).map_err(|v| v.deciding(&detail))? {
                    if !data.is_empty() {
                        return Err(Self::data_dependent("barrier divergence", &detail, &data));
                    }
                    return Err(self.found(&m, exact, "barrier divergence", detail, vec![u.text.clone()], true));
                }
            }
        }
        Ok(())
    }
}

/// Check one kernel under `system` (a leaf's constraints, or the root's to share the proof
/// among leaves with the same code).
pub fn check(function: &KernelFunction, kernel: &Kernel, system: &System, backend: &Backend) -> StaticResult {
    let system = super::sample::with_divisibility_facts(function, system);
    let m = model(function, kernel, &system, backend);
    let mut c = Checker { m: &m, backend, function, queries: 0, digits: HashMap::new(), nonneg: HashMap::new() };
    let verdict = match c.divergence().and_then(|_| c.bounds()).and_then(|_| c.races()) {
        Ok(()) => Verdict::Proved,
        // The names the tool made up, as the leaf's `.cu` file spells them.
        Err(Verdict::Unverified(why)) => Verdict::Unverified(crate::emit::cuda::spell_internal_names(kernel, &why)),
        Err(Verdict::Defect(mut w)) => {
            let spelling = crate::emit::cuda::KernelSpelling::of(kernel);
            w.detail = spelling.text(&w.detail);
            w.sites = w.sites.iter().map(|s| spelling.text(s)).collect();
            Verdict::Defect(w)
        }
        Err(v) => v,
    };
    StaticResult { verdict, queries: c.queries }
}

#[cfg(test)]
mod tests {
    use super::Verdict;

    #[test]
    fn an_undecided_query_names_what_it_was_deciding() {
        let open = Verdict::Unverified("Z3 could not decide a query (timeout)".into()).deciding("`a[i]` reads outside `a`'s extents");
        match open {
            Verdict::Unverified(why) => assert_eq!(why, "Z3 could not decide a query (timeout), deciding whether `a[i]` reads outside `a`'s extents"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(Verdict::Proved.deciding("anything"), Verdict::Proved));
    }
}
