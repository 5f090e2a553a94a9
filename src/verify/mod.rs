//! Proving what metafork emits: every leaf's kernel is run against the serial program
//! (differential execution on the CPU with CUDA semantics) and checked with Z3 for data races,
//! barrier divergence and out-of-bounds accesses for every parameter value its constraints
//! admit (the two-thread reduction).

pub mod code;
pub mod command;
mod data_flow;
pub mod differential;
pub mod machine;
mod quotients;
pub mod radix;
pub mod sample;
pub mod value;
pub mod twothread;

use crate::frontend::model::KernelFunction;
use crate::tree::{NodeKind, Tree};
use constraints::solver::Backend;
use constraints::System;
use differential::{Outcome, Programs};
use std::collections::{BTreeMap, HashMap};
use twothread::{StaticResult, Verdict};

/// How hard to try.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Differential points per leaf.
    pub points: usize,
    pub seed: u64,
    /// Kernel leaves still to verify after this tree's (later schedules'): each leaf's checks
    /// get a fair share of the time budget left ([`leaf_share`]), counting them.
    pub later_leaves: usize,
}

impl Options {
    /// Differential points per leaf unless asked otherwise (issue 26.4: at least 8 where the
    /// leaf's region holds them).
    pub const DEFAULT_POINTS: usize = 8;
    /// The most differential points per leaf `--points` accepts: far beyond what finds a
    /// defect at small sizes, and each point is a run of the serial program and the kernel.
    pub const MAX_POINTS: usize = 10_000;
}

impl Default for Options {
    fn default() -> Options {
        Options { points: Options::DEFAULT_POINTS, seed: 0x6d65_7461_666f_726b, later_leaves: 0 }
    }
}

/// The Z3 time limit of one verification query: a query that needs more leaves the leaf
/// unverified (never passed).
pub const QUERY_TIMEOUT_MS: u32 = 2_000;

/// A differential point that did not pass.
#[derive(Clone, Debug)]
pub struct PointFailure {
    pub point: BTreeMap<String, i64>,
    pub outcome: Outcome,
}

/// What verification found for one kernel leaf.
#[derive(Clone, Debug)]
pub struct LeafReport {
    pub schedule: String,
    pub leaf: usize,
    pub kernel: String,
    pub statik: StaticResult,
    /// Points run (usable ones), and the first failure among them.
    pub points: usize,
    pub failure: Option<PointFailure>,
    pub sampling: Option<String>,
    /// No parameter values satisfy the program's facts and the leaf's constraints (Z3): the
    /// dispatcher never selects the leaf, so there is nothing to run.
    pub unreachable: bool,
    /// The time budget (`--time-limit`) ran out by the end of the leaf's checks: its queries
    /// then answer unknown at once, so whatever left the leaf unverified (no point found, a
    /// subscript the collector could not model) is, first of all, the budget.
    pub budget_spent: bool,
}

/// The verdict on one leaf, as `verify` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Proved,
    /// The defect's name (`race`, `barrier divergence`, `out of bounds`, `mismatch`, `division by zero`) and the
    /// message with its witness.
    Defect(&'static str, String),
    Unverified(String),
    /// The leaf's region is empty under the program's facts: it never runs.
    Unreachable,
}

impl LeafReport {
    pub fn status(&self) -> Status {
        match self.status_seen() {
            Status::Unverified(why) if self.budget_spent && !why.contains(constraints::budget::REASON) => {
                Status::Unverified(format!("{} during the leaf's checks (raise --time-limit); what they saw: {why}", constraints::budget::REASON))
            }
            // Fewer points than asked, or some not run, with the budget spent: the sampler's
            // queries may have stopped answering, so the region is not known to hold no more.
            Status::Proved if self.budget_spent && self.sampling.is_some() => Status::Unverified(format!(
                "{} during the leaf's checks (raise --time-limit); {} point{} matched the serial program before it ran out ({})",
                constraints::budget::REASON,
                self.points,
                if self.points == 1 { "" } else { "s" },
                self.sampling.as_deref().unwrap_or_default()
            )),
            status => status,
        }
    }

    /// The verdict from what the checks saw, the budget aside.
    fn status_seen(&self) -> Status {
        if let Verdict::Defect(w) = &self.statik.verdict {
            return Status::Defect(w.defect, w.to_string());
        }
        if let Some(f) = &self.failure {
            let params: Vec<String> = f.point.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let at = params.join(", ");
            return match &f.outcome {
                Outcome::Mismatch(d) => Status::Defect("mismatch", format!("{d} (at {at})")),
                Outcome::Fault(x) => match x.defect() {
                    Some(defect) => Status::Defect(defect, format!("{x} (at {at})")),
                    // The engine stopped (its step budget, a value it could not compute): no
                    // wrong answer was seen, and none was ruled out.
                    None => Status::Unverified(format!("the kernel's run at {at} stopped: {x}")),
                },
                _ => Status::Unverified(format!("the point {at} could not be run")),
            };
        }
        if self.unreachable {
            return Status::Unreachable;
        }
        if let Verdict::Unverified(r) = &self.statik.verdict {
            return Status::Unverified(r.clone());
        }
        if self.points == 0 {
            return Status::Unverified(self.sampling.clone().unwrap_or_else(|| "no parameter point of the leaf could be run".into()));
        }
        Status::Proved
    }
}

/// Verify every kernel leaf of one schedule's tree. Independent work (the static checks of
/// distinct kernels, then each leaf's differential runs) is spread over the machine's cores,
/// each worker with its own solver back end; the reports come back in leaf order, the same
/// whatever the number of workers.
pub fn verify_tree(function: &KernelFunction, tree: &Tree, backend: &Backend, options: Options) -> Result<Vec<LeafReport>, String> {
    verify_tree_reporting(function, tree, backend, options, &|| {})
}

/// As [`verify_tree`], calling `done` (from any worker) each time a leaf's report is complete.
pub fn verify_tree_reporting(function: &KernelFunction, tree: &Tree, backend: &Backend, options: Options, done: &(dyn Fn() + Sync)) -> Result<Vec<LeafReport>, String> {
    verify_leaves(function, tree, backend, options, &|_| true, done)
}

/// As [`verify_tree_reporting`], for the kernel leaves whose id `wanted` accepts.
pub fn verify_leaves(function: &KernelFunction, tree: &Tree, backend: &Backend, options: Options, wanted: &dyn Fn(usize) -> bool, done: &(dyn Fn() + Sync)) -> Result<Vec<LeafReport>, String> {
    let schedule = function.schedules.iter().position(|s| s.name == tree.schedule).ok_or_else(|| format!("no schedule `{}`", tree.schedule))?;
    let leaves: Vec<&crate::tree::Node> = tree.leaves().filter(|n| matches!(n.kind, NodeKind::Leaf) && wanted(n.id)).collect();
    // Leaves often share code: the proof under the root's system holds for each of them; a
    // defect found there is re-checked under the leaf's own constraints.
    // Keyed by what the threads execute: the register-pressure flags (`no_unroll`,
    // `max_registers`) only tell nvcc and ptxas how to compile the same statements.
    let keys: Vec<String> = leaves.iter().map(|leaf| format!("{:?}", crate::kernel::Kernel { no_unroll: false, max_registers: None, ..(*leaf.staged).clone() })).collect();
    let mut kernels: Vec<(&str, &crate::kernel::Kernel)> = Vec::new();
    for (key, leaf) in keys.iter().zip(&leaves) {
        if !kernels.iter().any(|(k, _)| k == key) {
            kernels.push((key, &leaf.staged));
        }
    }
    // A code runs only where its own assumptions hold (a coarsened block's divisibility), so
    // they belong to the shared proof.
    // The shared proofs may take half the time left, split among them: a costly one spent all
    // of `--time-limit 20` on smooth7_1d, and every leaf was "not started" (a helper's
    // sweep). One cut short is unverified, and its leaves fall back to their own checks, each
    // under its own share of the rest.
    let general_left = std::sync::atomic::AtomicUsize::new(kernels.len());
    let general = parallel_map(&kernels, backend, |own, (_, kernel)| {
        let mut system = tree.root_constraints.clone();
        kernel.assumptions.iter().for_each(|c| system.add(c.clone()));
        under_share(&general_left, workers_for(kernels.len()), || twothread::check(function, kernel, &system, own))
    });
    let proofs: HashMap<&str, &StaticResult> = kernels.iter().map(|(k, _)| *k).zip(&general).collect();
    // A staged leaf reads tiles where the schedule reads arrays, and its staging loads are
    // guarded to the arrays' extents: an access of the schedule's own outside an array becomes
    // a read of a tile element no block loaded, which the leaf's checks cannot see (a helper's
    // hunt found such leaves proved beside the unstaged leaves' defect). So where leaves stage,
    // the schedule's code as written is checked too, under the root's system, and where that
    // is not proved, under each staged leaf's own constraints: a defect there is the leaf's.
    let as_written = if leaves.iter().any(|l| !l.staged.shared.is_empty()) { Some(crate::kernel::Kernel::from_schedule(function, &function.schedules[schedule])?) } else { None };
    let written_proved = as_written.as_ref().is_some_and(|kernel| {
        let mut system = tree.root_constraints.clone();
        kernel.assumptions.iter().for_each(|c| system.add(c.clone()));
        matches!(twothread::check(function, kernel, &system, backend).verdict, Verdict::Proved)
    });
    // Between the root's system and a leaf's own: the leaf's constraints on the program's
    // parameters alone. Leaves of one code mostly differ in their machine constraints (registers,
    // threads per block), which no access or barrier of the code reads, so one proof under the
    // weaker system covers them all, each leaf's system holding all of its constraints. A defect
    // or an unverified answer there is looked at again under the leaf's own constraints.
    let program_systems: Vec<Option<System>> = leaves
        .iter()
        .zip(&keys)
        .map(|(leaf, key)| (!matches!(proofs[key.as_str()].verdict, Verdict::Proved)).then(|| program_constraints(&leaf.correctness_constraints(&tree.machine), &tree.machine)))
        .collect();
    let mut weaker: Vec<(&str, &crate::kernel::Kernel, &System)> = Vec::new();
    for ((key, leaf), system) in keys.iter().zip(&leaves).zip(&program_systems) {
        if let Some(system) = system {
            if !weaker.iter().any(|(k, _, s)| *k == key.as_str() && s.constraints() == system.constraints()) {
                weaker.push((key, &leaf.staged, system));
            }
        }
    }
    let weaker_left = std::sync::atomic::AtomicUsize::new(weaker.len());
    let weaker_results = parallel_map(&weaker, backend, |own, (_, kernel, system)| under_share(&weaker_left, workers_for(weaker.len()), || twothread::check(function, kernel, system, own)));
    let weaker_proof = |key: &str, system: &System| {
        weaker.iter().zip(&weaker_results).find(|((k, _, s), _)| *k == key && s.constraints() == system.constraints()).map(|(_, r)| r)
    };
    let jobs: Vec<(&crate::tree::Node, &str, Option<&System>)> = leaves.iter().copied().zip(keys.iter().map(String::as_str)).zip(&program_systems).map(|((l, k), s)| (l, k, s.as_ref())).collect();
    let check_leaf = |own: &Backend, leaf: &crate::tree::Node, key: &str, program_system: Option<&System>, left: &std::sync::atomic::AtomicUsize, workers: usize| {
        let check = || {
            let general = proofs[key];
            let weaker = program_system.and_then(|system| weaker_proof(key, system).map(|r| (system, r)));
            let own_system = leaf.correctness_constraints(&tree.machine);
            let statik = match (&general.verdict, weaker) {
                (Verdict::Proved, _) => general.clone(),
                (_, Some((_, proof))) if matches!(proof.verdict, Verdict::Proved) => proof.clone(),
                // The weaker system was the leaf's own: its answer is the leaf's.
                (_, Some((system, answer))) if system.constraints() == own_system.constraints() => answer.clone(),
                _ => twothread::check(function, &leaf.staged, &own_system, own),
            };
            let statik = match &as_written {
                Some(written) if !leaf.staged.shared.is_empty() && !written_proved && matches!(statik.verdict, Verdict::Proved) => {
                    let mut system = own_system.clone();
                    written.assumptions.iter().for_each(|c| system.add(c.clone()));
                    let check = twothread::check(function, written, &system, own);
                    if matches!(check.verdict, Verdict::Defect(_)) { StaticResult { queries: check.queries + statik.queries, ..check } } else { statik }
                }
                _ => statik,
            };
            verify_leaf(function, schedule, tree, leaf, statik, own, options)
        };
        let report = match leaf_share(constraints::budget::remaining(), workers, left.load(std::sync::atomic::Ordering::Relaxed)) {
            // The budget is spent: the leaf's own checks would each answer unknown at once, yet
            // building their solver and samplers costs milliseconds a leaf (matmul's 103 leaves
            // ran 0.6 s past `--time-limit 2`).
            _ if constraints::budget::expired() => Ok(not_started(&tree.schedule, leaf.id, crate::emit::tree_files::leaf_kernel_name(tree, leaf.id))),
            Some(share) => constraints::budget::with_share(share, check),
            None => check(),
        };
        left.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        report
    };
    let (left, workers) = (std::sync::atomic::AtomicUsize::new(jobs.len() + options.later_leaves), workers_for(jobs.len()));
    let mut reports = parallel_map(&jobs, backend, |own, &(leaf, key, program_system)| {
        let report = check_leaf(own, leaf, key, program_system, &left, workers);
        done();
        report
    });
    // A second pass for the leaves that ran out of their share alone, with what the cheaper
    // leaves left unused: a fair share must not leave a costly leaf unchecked while the
    // budget is mostly unspent.
    let short: Vec<usize> = (0..reports.len()).filter(|&i| matches!(&reports[i], Ok(r) if r.budget_spent && matches!(r.status(), Status::Unverified(_)))).collect();
    if !short.is_empty() && !constraints::budget::expired() {
        let again: Vec<(usize, (&crate::tree::Node, &str, Option<&System>))> = short.iter().map(|&i| (i, jobs[i])).collect();
        let (left, workers) = (std::sync::atomic::AtomicUsize::new(again.len() + options.later_leaves), workers_for(again.len()));
        let retried = parallel_map(&again, backend, |own, &(_, (leaf, key, program_system))| check_leaf(own, leaf, key, program_system, &left, workers));
        for ((i, _), report) in again.iter().zip(retried) {
            reports[*i] = report;
        }
    }
    reports.into_iter().collect()
}

/// The constraints of `system` that name no machine symbol: what it says of the program's
/// parameters alone (a weaker system: every point of `system` satisfies it).
fn program_constraints(system: &System, machine: &crate::tree::MachineSymbols) -> System {
    let symbols = machine.all().map(constraints::Var::new);
    let drop = system.constraints().iter().enumerate().filter(|(_, c)| c.poly().vars().iter().any(|v| symbols.contains(v))).map(|(i, _)| i).collect();
    system.without(&drop)
}

/// The time one leaf's checks may take: the budget left, over the leaves still to check, times
/// the workers checking them at once (`None` without a budget). A leaf whose runs are costly
/// (a convolution at a point the sampler had to take large) otherwise spends what every later
/// leaf needed: held-out conv2d's `verify` proved 26 of 75 leaves in 15 minutes, its second
/// schedule none, after two leaves' runs took the rest. What a leaf leaves unused goes to the
/// next ones, since each share is taken from what is left when its leaf starts.
fn leaf_share(remaining: Option<std::time::Duration>, workers: usize, leaves_left: usize) -> Option<std::time::Duration> {
    remaining.map(|r| r.mul_f64(workers.max(1) as f64 / leaves_left.max(1) as f64).min(r))
}

/// The time a proof shared by leaves may take: its share of half the time left ([`leaf_share`]:
/// one of `left` such proofs, `workers` at once); the other half is the leaves'.
fn proof_share(remaining: Option<std::time::Duration>, workers: usize, left: usize) -> Option<std::time::Duration> {
    leaf_share(remaining.map(|r| r / 2), workers, left)
}

/// `work`, a proof shared by leaves, under its [`proof_share`] of the time left when it starts;
/// `left` counts the proof off when it ends.
fn under_share<R>(left: &std::sync::atomic::AtomicUsize, workers: usize, work: impl FnOnce() -> R) -> R {
    let result = match proof_share(constraints::budget::remaining(), workers, left.load(std::sync::atomic::Ordering::Relaxed)) {
        Some(share) => constraints::budget::with_share(share, work),
        None => work(),
    };
    left.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    result
}

/// The report of a leaf whose checks were not started because the time budget was spent:
/// unverified, naming the budget. (A defect the proof its code shares found under the root's
/// system is not the leaf's: its own constraints may exclude the witness.)
fn not_started(schedule: &str, leaf: usize, kernel: String) -> LeafReport {
    let reason = format!("{}; the leaf's checks were not started", constraints::budget::REASON);
    let statik = StaticResult { verdict: Verdict::Unverified(reason.clone()), queries: 0 };
    LeafReport {
        schedule: schedule.to_string(),
        leaf,
        kernel,
        statik,
        points: 0,
        failure: None,
        unreachable: false,
        budget_spent: true,
        sampling: Some(reason),
    }
}

/// The differential runs of one leaf, completing its report.
fn verify_leaf(function: &KernelFunction, schedule: usize, tree: &Tree, leaf: &crate::tree::Node, statik: StaticResult, backend: &Backend, options: Options) -> Result<LeafReport, String> {
    let programs = Programs::new(function, schedule, &leaf.staged)?;
    let seed = options.seed ^ (leaf.id as u64).wrapping_mul(0x9e37_79b9);
    let (points, sampling) = match sample::points(function, &leaf.correctness_constraints(&tree.machine), backend, options.points, options.points.saturating_mul(12).max(48), seed) {
        // Fewer points than asked: said with the verdict (a narrow region, `s == 8` with small
        // sizes, may hold only a few).
        Ok(p) if !p.is_empty() && p.len() < options.points => {
            let note = format!("only {} distinct small parameter point{} found in the leaf's region, of {} asked", p.len(), if p.len() == 1 { "" } else { "s" }, options.points);
            (p, Some(note))
        }
        Ok(p) => (p, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let mut run = 0;
    let mut failure = None;
    let mut unusable: Option<String> = None;
    for (i, p) in points.iter().enumerate() {
        // The points left once the budget is spent are not run, and that is said.
        if constraints::budget::expired() {
            unusable.get_or_insert_with(|| constraints::budget::REASON.to_string());
            break;
        }
        match differential::run_point(function, &programs, p, seed.wrapping_add(i as u64), machine::RunOptions { detect_races: true, step_budget: None, kernel_only: false }) {
            Outcome::Passed(_) => run += 1,
            Outcome::Unusable(why) => {
                unusable.get_or_insert_with(|| {
                    let at: Vec<String> = p.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("{why} (at {})", at.join(", "))
                });
            }
            other => {
                run += 1;
                failure = Some(PointFailure { point: p.clone(), outcome: other });
                break;
            }
        }
    }
    // A region with no point, or none the schedule runs at, may be empty once the facts Z3 was
    // not given, and the host loops around the schedule, are: then the leaf never runs, and
    // there is nothing to verify.
    let unreachable = (points.is_empty() || (run == 0 && failure.is_none() && unusable.is_some())) && sample::unreachable(function, &leaf.correctness_constraints(&tree.machine), &leaf.staged.host_loops, backend);
    // Points some of which could not be run (the schedule never launched there): said, with
    // the first reason, so that fewer matches than points is never silent.
    let skipped = match (&failure, &unusable) {
        (None, Some(why)) if run > 0 => Some(format!("{} of {} points not run: {why}", points.len() - run, points.len())),
        _ => None,
    };
    Ok(LeafReport {
        schedule: tree.schedule.clone(),
        leaf: leaf.id,
        kernel: crate::emit::tree_files::leaf_kernel_name(tree, leaf.id),
        statik,
        points: run,
        failure,
        unreachable,
        budget_spent: constraints::budget::expired(),
        // With no point run, why the points were unusable comes first (the schedule never
        // runs there, the program stops before it), then how few there were.
        sampling: match (run, unusable) {
            (0, Some(why)) => Some(format!("no point could be run: {why}{}", sampling.map_or(String::new(), |s| format!("; {s}")))),
            _ => match (sampling, skipped) {
                (Some(s), Some(k)) => Some(format!("{s}; {k}")),
                (s, k) => s.or(k).or_else(|| points.is_empty().then(|| no_small_point(function))),
            },
        },
    })
}

/// Why a leaf got no point to run: none is small enough, and, where a fact bounds a parameter
/// below past what the CPU runs take (`assume(N >= 100000)`), that fact.
fn no_small_point(function: &KernelFunction) -> String {
    let limit = constraints::Rational::from_integer(sample::LARGE_DATA.max(sample::MAX_THREADS).into());
    let forcing = function.facts.iter().find(|f| {
        let Some(c) = &f.constraint else { return false };
        // A bound below on one variable, of degree one, past the limit: false at the limit,
        // true far above it.
        let vars = c.vars();
        let (Some(v), 1, 1) = (vars.iter().next(), vars.len(), c.poly().total_degree()) else { return false };
        let at = |x: constraints::Rational| c.holds_at(&std::collections::BTreeMap::from([(v.clone(), x)]));
        at(limit.clone()) == Ok(false) && at(limit.clone() * constraints::Rational::from_integer(1_000_000_000.into())) == Ok(true)
    });
    match forcing {
        Some(f) => format!("Z3 found no small parameter point in the leaf's constraints: the fact `{}` puts every point past the sizes the CPU runs take (at most {}), so only the Z3 checks apply", f.condition, sample::LARGE_DATA.max(sample::MAX_THREADS)),
        None => "Z3 found no small parameter point in the leaf's constraints".to_string(),
    }
}

/// The threads [`parallel_map`] runs `items` items on: the machine's cores, at most one per item.
fn workers_for(items: usize) -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(items).max(1)
}

/// `f` over `items` on up to as many threads as the machine has cores; results in `items`'
/// order, and the workers' queries counted on `backend`. Each item runs on a thread of its
/// own with its own solver back end: the z3 crate keeps one Z3 context per thread, and a
/// context that served other items first can answer near the resource limit differently, so
/// sharing one would make a verdict depend on the scheduling.
fn parallel_map<T: Sync, R: Send>(items: &[T], backend: &Backend, f: impl Fn(&Backend, &T) -> R + Sync) -> Vec<R> {
    let workers = workers_for(items.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let timeout_ms = backend.timeout_ms();
    let mut results: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    let mut queries = 0;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        let (r, q) = std::thread::scope(|fresh| {
                            fresh
                                .spawn(|| {
                                    let own = Backend::new(timeout_ms);
                                    (f(&own, item), own.queries())
                                })
                                .join()
                                .unwrap_or_else(|e| std::panic::resume_unwind(e))
                        });
                        queries += q;
                        done.push((i, r));
                    }
                    (done, queries)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                // A worker that panicked is a bug; propagate it rather than lose a result.
                let (done, queries) = h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
                backend.add_queries(queries);
                done
            })
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// What an unreachable leaf's line says.
const UNREACHABLE: &str = "no parameter values satisfy the program's facts, the leaf's constraints and the bounds of the host loops around its schedule (Z3), so the leaf never runs";

/// The exit status for a set of reports: 0 all proved, 1 a defect, 2 something unverified.
pub fn exit_code(reports: &[LeafReport]) -> i32 {
    let statuses: Vec<Status> = reports.iter().map(|r| r.status()).collect();
    use crate::command::exit;
    if statuses.iter().any(|s| matches!(s, Status::Defect(..))) {
        exit::DEFECT
    } else if statuses.iter().any(|s| matches!(s, Status::Unverified(_))) {
        exit::UNVERIFIED
    } else {
        exit::OK
    }
}

/// The report as JSON: one object per kernel leaf, in the text report's order.
pub fn render_json(reports: &[LeafReport]) -> String {
    serde_json::to_string_pretty(&json_records(reports)).map(|s| s + "\n").unwrap_or_else(|_| "[]\n".into())
}

/// One JSON record per leaf, as `verify --json` prints them.
pub fn json_records(reports: &[LeafReport]) -> Vec<serde_json::Value> {
    reports
        .iter()
        .map(|r| {
            let (status, defect, detail) = match r.status() {
                Status::Proved => ("proved", None, String::new()),
                Status::Unreachable => ("unreachable", None, UNREACHABLE.to_string()),
                Status::Defect(name, msg) => ("defect", Some(name), msg),
                Status::Unverified(why) => ("unverified", None, why),
            };
            serde_json::json!({"schedule": r.schedule, "leaf": r.leaf, "kernel": r.kernel, "status": status, "defect": defect, "detail": detail, "z3_queries": r.statik.queries, "points": r.points, "sampling": r.sampling})
        })
        .collect()
}

/// The report as text: one line per leaf.
pub fn render(reports: &[LeafReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let line = match r.status() {
            Status::Proved => format!(
                "proved: no race, no barrier divergence, in bounds ({} Z3 queries); {} match{} the serial program{}",
                r.statik.queries,
                if r.points == 1 { "1 point".to_string() } else { format!("{} points", r.points) },
                if r.points == 1 { "es" } else { "" },
                r.sampling.as_ref().map_or(String::new(), |note| format!(" ({note})"))
            ),
            Status::Defect(name, msg) => format!("DEFECT ({name}): {msg}"),
            Status::Unverified(why) => format!("UNVERIFIED: {why} ({} points matched the serial program)", r.points),
            Status::Unreachable => format!("unreachable: {UNREACHABLE}"),
        };
        out.push_str(&format!("{} leaf {} ({}): {line}\n", r.schedule, r.leaf, r.kernel));
    }
    let code = exit_code(reports);
    let proved = reports.iter().filter(|r| r.status() == Status::Proved).count();
    let unreachable = reports.iter().filter(|r| r.status() == Status::Unreachable).count();
    let never = if unreachable > 0 { format!(" ({unreachable} unreachable)") } else { String::new() };
    out.push_str(&format!("{proved} of {} leaves proved{never}{}\n", reports.len(), match code {
        crate::command::exit::OK => "",
        crate::command::exit::DEFECT => "; defects found",
        _ => "; some leaves unverified",
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use machine::Fault;

    /// A leaf's report whose static checks found `statik`, with `failure` at `n = 3` (one point
    /// run) or, without one, no point run and `sampling` saying why.
    fn report(statik: Verdict, failure: Option<Fault>, sampling: Option<&str>, budget_spent: bool) -> LeafReport {
        let point: BTreeMap<String, i64> = [("n".to_string(), 3)].into();
        LeafReport {
            schedule: "s".into(),
            leaf: 1,
            kernel: "s_leaf1".into(),
            statik: StaticResult { verdict: statik, queries: 0 },
            points: usize::from(failure.is_some()),
            failure: failure.map(|fault| PointFailure { point, outcome: Outcome::Fault(fault) }),
            sampling: sampling.map(str::to_string),
            unreachable: false,
            budget_spent,
        }
    }

    fn failed_with(fault: Fault) -> Status {
        report(Verdict::Proved, Some(fault), None, false).status()
    }

    /// A kernel run the engine could not finish (its step budget) saw no wrong answer: the
    /// leaf is unverified, not a defect (a held-out conv2d leaf was once reported as a
    /// "mismatch" for it). Division by zero, undefined in CUDA, stays a defect.
    #[test]
    fn an_engine_stop_is_unverified_and_division_by_zero_a_defect() {
        match failed_with(Fault::Error("the run exceeded its step budget".into())) {
            Status::Unverified(why) => assert!(why.contains("step budget") && why.contains("n=3"), "{why}"),
            other => panic!("{other:?}"),
        }
        match failed_with(Fault::Arithmetic("integer division by zero".into())) {
            Status::Defect("division by zero", why) => assert!(why.contains("division by zero"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    fn sampled_nothing(statik: Verdict, budget_spent: bool) -> Status {
        report(statik, None, Some("Z3 found no small parameter point in the leaf's constraints"), budget_spent).status()
    }

    /// Once the time budget is spent every query answers unknown at once, so a leaf checked
    /// after it finds no point and may see a subscript it cannot model: `verify --time-limit 6`
    /// on matmul called 81 leaves' regions empty of small points. The budget is named first.
    #[test]
    fn a_leaf_left_unverified_after_the_budget_ran_out_names_the_budget() {
        match sampled_nothing(Verdict::Proved, true) {
            Status::Unverified(why) => assert!(why.starts_with(constraints::budget::REASON) && why.contains("--time-limit") && why.contains("no small parameter point"), "{why}"),
            other => panic!("{other:?}"),
        }
        match sampled_nothing(Verdict::Unverified("subscript 1 of `a[$g0][$g1]` is not modelled".into()), true) {
            Status::Unverified(why) => assert!(why.starts_with(constraints::budget::REASON) && why.contains("not modelled"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Without the budget spent, the reason stands alone; a reason that is the budget's
        // already is not repeated; a defect found stays a defect.
        assert_eq!(sampled_nothing(Verdict::Proved, false), Status::Unverified("Z3 found no small parameter point in the leaf's constraints".into()));
        let budget = format!("Z3 could not decide a query ({})", constraints::budget::REASON);
        assert_eq!(sampled_nothing(Verdict::Unverified(budget.clone()), true), Status::Unverified(budget));
        // Fewer points than asked with the budget spent: not known to be all the region holds.
        let mut few = report(Verdict::Proved, None, Some("only 2 distinct small parameter points found in the leaf's region, of 8 asked"), true);
        few.points = 2;
        match few.status() {
            Status::Unverified(why) => assert!(why.starts_with(constraints::budget::REASON) && why.contains("2 points matched") && why.contains("of 8 asked"), "{why}"),
            other => panic!("{other:?}"),
        }
        few.budget_spent = false;
        assert_eq!(few.status(), Status::Proved);
        let defect = report(Verdict::Proved, Some(Fault::Arithmetic("integer division by zero".into())), None, true);
        assert!(matches!(defect.status(), Status::Defect("division by zero", _)), "{:?}", defect.status());
        // A leaf not started once the budget was spent (its solver and samplers are not even
        // built): unverified, naming the budget once, and never a defect or proved.
        let skipped = not_started("s", 7, "s_leaf7".into());
        assert_eq!(skipped.status(), Status::Unverified(format!("{}; the leaf's checks were not started", constraints::budget::REASON)));
        assert!(skipped.budget_spent && skipped.points == 0 && skipped.failure.is_none() && !skipped.unreachable);
        assert_eq!(super::exit_code(std::slice::from_ref(&skipped)), crate::command::exit::UNVERIFIED);
    }

    /// The weaker system a leaf's proof is first tried under keeps exactly the constraints that
    /// name no machine symbol, whatever the symbols were renamed to: here the program has its
    /// own `R`, so the registers per thread are `R_dev`, and `R <= n` is the program's.
    #[test]
    fn the_program_constraints_drop_exactly_those_naming_a_machine_symbol() {
        let taken: std::collections::BTreeSet<String> = ["R".to_string(), "n".to_string(), "B".to_string()].into();
        let machine = crate::tree::MachineSymbols::avoiding(&taken);
        assert_eq!(machine.registers_per_thread, "R_dev");
        let mut system = System::new();
        for text in ["B <= T_B", "32 <= B", "17 <= R_dev", "R <= n", "32*B <= R_B", "64*N_SM*W_SM <= n"] {
            system.add(constraints::parse::parse_constraint(text).unwrap());
        }
        system.add(constraints::Constraint::divides(4, &constraints::Poly::var("n")));
        let kept: Vec<String> = program_constraints(&system, &machine).constraints().iter().map(|c| c.to_string()).collect();
        let expected: Vec<String> = [1, 3, 6].iter().map(|&i| system.constraints()[i].to_string()).collect();
        assert_eq!(kept, expected);
        assert_eq!(kept[2], "n % 4 == 0");
    }

    /// Each leaf may spend the budget left over the leaves still to check, per worker; never
    /// more than is left, and no share without a budget.
    #[test]
    fn a_leaf_gets_a_fair_share_of_the_budget_left() {
        use std::time::Duration;
        assert_eq!(leaf_share(None, 2, 75), None);
        assert_eq!(leaf_share(Some(Duration::from_secs(900)), 2, 75), Some(Duration::from_secs(24)));
        assert_eq!(leaf_share(Some(Duration::from_secs(10)), 2, 1), Some(Duration::from_secs(10)));
        assert_eq!(leaf_share(Some(Duration::from_secs(10)), 0, 0), Some(Duration::from_secs(10)));
        assert_eq!(leaf_share(Some(Duration::ZERO), 2, 5), Some(Duration::ZERO));
    }

    /// The proofs leaves share take at most half the time left, split among them: the other
    /// half is the leaves' (smooth7_1d under `--time-limit 20`: every leaf "not started"
    /// before, 6 of 12 proved after).
    #[test]
    fn shared_proofs_take_at_most_half_the_budget_left() {
        use std::time::Duration;
        assert_eq!(proof_share(None, 2, 3), None);
        assert_eq!(proof_share(Some(Duration::from_secs(20)), 1, 1), Some(Duration::from_secs(10)));
        assert_eq!(proof_share(Some(Duration::from_secs(20)), 2, 4), Some(Duration::from_secs(5)));
        assert_eq!(proof_share(Some(Duration::from_secs(20)), 4, 2), Some(Duration::from_secs(10)));
    }
}
