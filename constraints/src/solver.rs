//! The Z3 back end: consistency, implication, simplification and sampling of [`System`]s.
//!
//! Contract:
//! - Every query runs under a limit (`timeout_ms`), enforced as Z3's deterministic resource
//!   limit (`rlimit`, [`RLIMIT_PER_MS`] units per millisecond) rather than a wall-clock
//!   timeout: the answers, and so metafork's output, do not depend on the machine's load, and
//!   no timer threads run. (Z3 4.8.12's timer thread pool deadlocks when several threads run
//!   solvers with timeouts at once, as `cargo test` and the parallel verifier do; Z3 issue
//!   #5990.) Z3's `unknown` (the limit, or an incomplete nonlinear procedure) comes back as
//!   `Unknown(reason)`, never as sat or unsat.
//! - Z3 objects live in the z3 crate's thread-local context, so each thread reuses one context;
//!   [`PathSolver`] keeps one incremental solver with push/pop for walking a tree path. A
//!   query's run under its whole limit, and [`Backend::sample`]'s search, run in a context of
//!   their own, so that their answers do not depend on what the thread asked before.
//! - Integer variables are Z3 `Int`s; a constraint whose variables are all integers is encoded
//!   in integer arithmetic (its coefficients are integers after normalisation), any other in real
//!   arithmetic with integers converted by `to_real`.

use crate::constraint::{Constraint, Rel};
use crate::poly::Poly;
use crate::system::{Domain, System};
use crate::var::Var;
use crate::Rational;
use num_bigint::BigInt;
use num_traits::Zero;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use z3::ast::{Bool, Int, Real};
use z3::{Params, SatResult, Solver};

/// The per-query limit used when none is given.
pub const DEFAULT_TIMEOUT_MS: u32 = 5_000;

/// A query still running after this many times its resource limit's nominal milliseconds (and
/// at least [`WALL_CAP_MIN_MS`]) is interrupted: see the watchdog.
pub const WALL_CAP_FACTOR: u64 = 4;
pub const WALL_CAP_MIN_MS: u64 = 2_000;

/// Z3 resource units per millisecond of limit. Z3 spends units at different rates on
/// different queries: measured on the 2-core development machine (Z3 4.8.12), 3.2 million
/// units per second on a mixed-radix race query (QF_NIA) and 0.75 million on a verifier query
/// with many quotient definitions. 1.5 per microsecond keeps a query's time between about a
/// half and twice its nominal limit, and its answer the same on every machine.
pub const RLIMIT_PER_MS: u32 = 1_500;

/// The limit of [`Backend`]'s first, short Z3 run on a query (milliseconds, as resource
/// units). Most queries are decided in about a millisecond; the verifier's satisfiable ones
/// with many division equalities took Z3 up to seconds, and a seeded search finds their
/// points in microseconds (`bench/RESULTS.md`, "Points for slow satisfiable queries").
pub const QUICK_MS: u32 = 20;

/// The wall-clock cap of that first run: Z3's nonlinear search can stall without spending its
/// resource units, and a stalled first run only delays the exact searches that follow it
/// (so the cap, though it depends on the machine, changes no answer's kind).
pub const QUICK_WALL_MS: u64 = 250;

/// The seed of [`crate::search::find`] for the back end's queries: fixed, so that every run
/// of a program gets the same models.
const SEARCH_SEED: u64 = 0x6d65_7461_666f_726b;

/// A satisfying assignment. `approximate` lists variables whose value Z3 gave as an algebraic
/// (irrational) number, here rounded to 30 decimal digits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub values: BTreeMap<Var, Rational>,
    pub approximate: BTreeSet<Var>,
}

impl Model {
    pub fn get(&self, v: &str) -> Option<&Rational> {
        self.values.get(&Var::new(v))
    }
}

#[derive(Clone, Debug)]
pub enum CheckResult {
    Sat(Model),
    Unsat,
    Unknown(String),
}

impl CheckResult {
    pub fn is_sat(&self) -> bool {
        matches!(self, CheckResult::Sat(_))
    }
    pub fn is_unsat(&self) -> bool {
        matches!(self, CheckResult::Unsat)
    }
    pub fn is_unknown(&self) -> bool {
        matches!(self, CheckResult::Unknown(_))
    }
}

#[derive(Clone, Debug)]
pub enum Implication {
    /// Every solution of the system satisfies the constraint.
    Proved,
    /// A solution of the system that violates the constraint.
    Refuted(Model),
    Unknown(String),
}

#[derive(Clone, Debug)]
pub enum Simplified {
    /// The system without constraints implied by the others. `undecided` counts implication
    /// queries that came back unknown (those constraints were kept).
    Consistent { system: System, removed: Vec<Constraint>, undecided: usize },
    Inconsistent,
    Unknown(String),
}

/// Distinct models of a system. `exhausted` is true when the system has no further solutions.
#[derive(Clone, Debug)]
pub struct Samples {
    pub models: Vec<Model>,
    pub exhausted: bool,
    pub unknown: Option<String>,
}

/// Entry point to Z3: counts the queries it sends (for benchmarks and reports) and memoises
/// implications.
#[derive(Debug)]
pub struct Backend {
    timeout_ms: u32,
    queries: Cell<u64>,
    /// Z3 runs of this back end's queries (a query may take two; not written to any output).
    runs: Cell<u64>,
    /// Answers of [`Backend::implies`] by (system, constraint): strategies, the access model
    /// and the tree ask the same implication again for codes that differ only in flags.
    implications: RefCell<std::collections::HashMap<String, Implication>>,
}

impl Default for Backend {
    fn default() -> Self {
        Backend::new(DEFAULT_TIMEOUT_MS)
    }
}


/// A witness repaired by moving one variable at a time onto a failing constraint: for a
/// constraint `a*v + rest REL 0` linear in a variable `v` (`a` and `rest` free of `v`,
/// evaluated at the point), `v` is set to the values next to the boundary `-rest/a` (for an
/// integer variable the integers around it, nearest first, a few either side so that a
/// divisibility constraint on `v` can hold too). Each round takes, among the moves that make
/// one failing constraint hold, the one that leaves the fewest constraints failing (the first
/// such in constraint, variable and candidate order, so the answer is a function of its
/// inputs) and never returns to a point already visited; [`REPAIR_ROUNDS`] rounds at most. The
/// whole system is checked exactly, so a point returned is a proof of `sat`. A tree's
/// accept/refuse fork adds `value <= limit` or its negation to a system its parent's model
/// solves: moving the limit symbol (or a size parameter, as in a grid-fill condition
/// `64*B*N_SM*W_SM <= B*N`) usually solves it in one round; a shared-memory window
/// (`8*s*B0*B1 <= Z_B < 8*s*B0*B1 + 4*s*B1 + 4*B0`) takes a few, where Z3's integer search
/// has taken seconds.
fn linear_repair(system: &System, witness: &BTreeMap<Var, Rational>) -> Option<BTreeMap<Var, Rational>> {
    // A move changes one variable, so only the constraints that read it are evaluated again
    // (and its own domain): the counts are those of checking the whole system at each point.
    let constraints = system.constraints();
    let mut readers: BTreeMap<Var, Vec<usize>> = BTreeMap::new();
    for (i, c) in constraints.iter().enumerate() {
        for v in c.poly().vars() {
            readers.entry(v).or_default().push(i);
        }
    }
    let outside_domain = |v: &Var, point: &BTreeMap<Var, Rational>| system.domains().get(v).is_some_and(|d| point.get(v).is_some_and(|x| !d.admits(x)));
    let mut point = witness.clone();
    let mut holds: Vec<Result<bool, Var>> = constraints.iter().map(|c| c.holds_at(&point)).collect();
    let mut bad_domains = system.domains().keys().filter(|v| outside_domain(v, &point)).count();
    let failing = |holds: &[Result<bool, Var>], bad_domains: usize| holds.iter().filter(|h| **h != Ok(true)).count() + usize::from(bad_domains > 0);
    let mut visited = vec![point.clone()];
    let mut left = failing(&holds, bad_domains);
    let none: Vec<usize> = Vec::new();
    for _ in 0..REPAIR_ROUNDS {
        if left == 0 {
            return Some(point);
        }
        let mut best: Option<(usize, Var, Rational)> = None;
        let mut tried = 0;
        for (i, c) in constraints.iter().enumerate() {
            if c.rel().modulus().is_some() || holds[i] != Ok(false) {
                continue;
            }
            // Each failing constraint's moves re-evaluate every constraint reading the moved
            // variable: a system of thousands of facts on one size made this quadratic (seconds
            // per query, deaf to --time-limit and Ctrl-C). The first few failing constraints
            // are tried, and the budget is asked between them.
            tried += 1;
            if tried > REPAIR_TRIES || crate::budget::expired() {
                break;
            }
            for (v, candidate) in boundary_moves(system, c, &point) {
                let touched = readers.get(&v).unwrap_or(&none);
                let was_outside = outside_domain(&v, &point);
                let old = point.insert(v.clone(), candidate.clone());
                let mut n = None;
                if c.holds_at(&point) == Ok(true) && !visited.contains(&point) {
                    let before = touched.iter().filter(|&&j| holds[j] != Ok(true)).count();
                    let after = touched.iter().filter(|&&j| constraints[j].holds_at(&point) != Ok(true)).count();
                    let bad = bad_domains - usize::from(was_outside) + usize::from(outside_domain(&v, &point));
                    n = Some(left - usize::from(bad_domains > 0) - before + after + usize::from(bad > 0));
                }
                match old {
                    Some(x) => point.insert(v.clone(), x),
                    None => point.remove(&v),
                };
                if let Some(n) = n.filter(|n| best.as_ref().is_none_or(|(m, _, _)| n < m)) {
                    best = Some((n, v, candidate));
                }
            }
        }
        let (n, v, candidate) = best?;
        bad_domains -= usize::from(outside_domain(&v, &point));
        point.insert(v.clone(), candidate);
        bad_domains += usize::from(outside_domain(&v, &point));
        for &j in readers.get(&v).unwrap_or(&none) {
            holds[j] = constraints[j].holds_at(&point);
        }
        visited.push(point.clone());
        left = n;
        debug_assert_eq!(left, failing(&holds, bad_domains));
    }
    (left == 0).then_some(point)
}

/// The answer of [`crate::relax`]'s cheap exact checks on `system` and `extra`, where they
/// give one: unsat when the linear relaxation is contradictory, sat with a simple point that
/// solves the system. `None` when neither settles it, and always once the time budget is spent
/// (every answer is then unknown, as the budget promises).
fn pre_checked(system: &System, extra: Option<&Constraint>) -> Option<CheckResult> {
    if crate::budget::expired() {
        return None;
    }
    if crate::relax::refutes(system, extra) {
        return Some(CheckResult::Unsat);
    }
    let point = match extra {
        None => crate::relax::guess(system),
        Some(c) => crate::relax::guess(&system.clone().with(c.clone())),
    };
    point.map(|values| CheckResult::Sat(Model { values, approximate: BTreeSet::new() }))
}

/// A point of `system` that [`linear_repair`] reaches from one of the simple points: exact,
/// and costlier than a Z3 query that decides quickly (about 10 ms of exact arithmetic on a
/// verifier query when it fails), so it is tried only on the queries Z3 does not decide under
/// [`QUICK_MS`].
fn repaired(system: &System) -> Option<CheckResult> {
    // Repair from every candidate, not just the first: a variable at its lower bound can break
    // a disequality (`(s - 1) % 4 != 0` at `s = 1`) that the next candidate keeps, and Z3's
    // nonlinear integer search on such a system ran for a minute without spending its
    // resource limit.
    let point = crate::relax::candidates(system).iter().find_map(|seed| linear_repair(system, seed));
    point.map(|values| CheckResult::Sat(Model { values, approximate: BTreeSet::new() }))
}

/// Rounds of [`linear_repair`].
const REPAIR_ROUNDS: usize = 4;

/// The failing constraints whose moves one round of [`linear_repair`] tries, in order.
const REPAIR_TRIES: usize = 64;

/// The values next to `c`'s boundary for each variable `c` is linear in, at `point`.
fn boundary_moves(system: &System, c: &Constraint, point: &BTreeMap<Var, Rational>) -> Vec<(Var, Rational)> {
    let zero = Rational::from_integer(0.into());
    let one = Rational::from_integer(1.into());
    let mut out = Vec::new();
    for v in c.poly().vars() {
        if c.poly().terms().any(|(mono, _)| mono.exponent(&v) > 1) {
            continue;
        }
        let rest = c.poly().substitute(&v, &Poly::zero());
        let (Ok(rest_value), Ok(at_one)) = (rest.eval(point), c.poly().substitute(&v, &Poly::one()).eval(point)) else { continue };
        let a = &at_one - &rest_value;
        if a == zero {
            continue;
        }
        let boundary = -rest_value / a;
        if system.domain(&v).is_integer() {
            let f = boundary.floor();
            out.extend([0i64, 1, -1, 2, -2, 3, -3, 4].iter().map(|d| (v.clone(), &f + &Rational::from_integer((*d).into()))));
        } else {
            out.extend([boundary.clone(), &boundary + &one, &boundary - &one].into_iter().map(|x| (v.clone(), x)));
        }
    }
    out
}


/// Runs `work` with every query on this thread in a new Z3 context (the thread's own is
/// restored after): a context keeps state between queries (caches, learned facts, the
/// numbering of terms), so answers, models above all, can depend on what was asked in it
/// before. A caller that must answer the same whatever ran earlier on the thread runs in one.
pub fn in_fresh_context<R: Send + Sync>(work: impl FnOnce() -> R + Send + Sync) -> R {
    z3::with_z3_config(&z3::Config::new(), work)
}

/// [`in_fresh_context`] for work that the exact pre-checks often answer entirely (a tree
/// build): it runs on a thread of its own, whose context the z3 crate creates on the first
/// query, so work that asks none never pays for one (the process's first context costs
/// about 15 ms, more than a whole small tree; bench/RESULTS.md). Not for the sampler: Z3's
/// models on a new thread were seen to depend on the queries earlier threads ran, and the
/// verifier's points must not.
pub fn in_fresh_thread<R: Send + Sync>(work: impl FnOnce() -> R + Send + Sync) -> R {
    let slot = std::sync::Mutex::new(Some(work));
    let take = || slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new().stack_size(FRESH_THREAD_STACK_BYTES).spawn_scoped(scope, || take().map(|w| w()));
        match spawned.map(|handle| handle.join()) {
            Ok(Ok(Some(r))) => r,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            // No thread to be had (the work is still in its slot): a fresh context on this one.
            Ok(Ok(None)) | Err(_) => in_fresh_context(|| take().expect("the work runs once")()),
        }
    })
}

/// The stack of [`in_fresh_thread`]'s thread: the binary's worker thread's, since tree builds
/// recurse over the program's syntax.
const FRESH_THREAD_STACK_BYTES: usize = 64 << 20;

/// A solver for `system` under `timeout_ms`: Z3's integer solver where every variable is an
/// integer and every coefficient too, the general one otherwise.
fn path_solver(system: &System, timeout_ms: u32) -> PathSolver {
    let integer = system.vars().iter().all(|v| system.domain(v).is_integer())
        && system.constraints().iter().all(|c| c.poly().terms().all(|(_, k)| k.is_integer()));
    let mut ps = if integer { PathSolver::integer(system.domains(), timeout_ms) } else { PathSolver::new(system.domains(), timeout_ms) };
    for c in system.constraints() {
        ps.assert(c);
    }
    ps
}

impl Backend {
    pub fn new(timeout_ms: u32) -> Backend {
        Backend { timeout_ms, queries: Cell::new(0), runs: Cell::new(0), implications: RefCell::new(std::collections::HashMap::new()) }
    }

    pub fn timeout_ms(&self) -> u32 {
        self.timeout_ms
    }

    /// How many systems this back end has handed to Z3 (a system [`Backend::decide`] gives Z3
    /// twice, briefly and then with the whole limit, counts once, so that the count does not
    /// depend on whether the brief run met its wall-clock cap: the count is written to the
    /// outputs, which must be the same on a loaded machine as on a quiet one), plus the
    /// models [`Backend::sample`] asked for.
    pub fn queries(&self) -> u64 {
        self.queries.get()
    }

    /// How many times this back end has run Z3 (a query may be run twice; see [`Backend::decide`]).
    pub fn z3_runs(&self) -> u64 {
        self.runs.get()
    }

    /// Count `n` checks another back end ran on this one's behalf (on another thread).
    pub fn add_queries(&self, n: u64) {
        self.queries.set(self.queries.get() + n);
    }

    fn path(&self, system: &System) -> PathSolver {
        self.path_limited(system, self.timeout_ms)
    }

    fn path_limited(&self, system: &System, timeout_ms: u32) -> PathSolver {
        path_solver(system, timeout_ms)
    }

    fn count_query(&self) {
        self.queries.set(self.queries.get() + 1);
    }

    fn run(&self, ps: &mut PathSolver) -> CheckResult {
        self.runs.set(self.runs.get() + 1);
        ps.check()
    }

    /// The seeded search for a point first ([`crate::search`], microseconds); then Z3 under a
    /// short limit ([`QUICK_MS`], and a wall-clock cap of [`QUICK_WALL_MS`]); a system that
    /// does not decide is repaired towards a point from each simple one ([`repaired`]), then
    /// given Z3's whole limit. A system that reaches Z3 counts as one query, however many Z3
    /// runs it takes ([`Backend::queries`]). The answer's kind is Z3's
    /// wherever Z3 decides the system within its whole limit (a point found is an exact proof
    /// of sat); only which model comes back can change.
    fn decide(&self, system: &System) -> CheckResult {
        // Once the budget is spent every answer is unknown, found points included.
        let open = || !crate::budget::expired();
        if let Some(values) = open().then(|| crate::search::find(system, SEARCH_SEED)).flatten() {
            return CheckResult::Sat(Model { values, approximate: BTreeSet::new() });
        }
        self.count_query();
        if self.timeout_ms > QUICK_MS {
            let mut quick = self.path_limited(system, QUICK_MS).with_wall_cap(std::time::Duration::from_millis(QUICK_WALL_MS));
            match self.run(&mut quick) {
                CheckResult::Unknown(_) if open() => {}
                answer => return answer,
            }
        }
        if let Some(answer) = open().then(|| repaired(system)).flatten() {
            return answer;
        }
        // The whole limit's run in a context of its own: in the thread's, Z3's search depends
        // on what the context was asked before, and on where earlier runs stopped; a quick run
        // stopped by its wall-clock cap stops at a point that depends on the machine's load.
        // The same verifier query was unsat in 0.35 s or spent its resource limit, by the
        // leaves a worker thread had checked before and by the load (a CI failure, fifty-first
        // session). A fresh context costs about 1.5 ms, against this run's 20 ms or more.
        self.runs.set(self.runs.get() + 1);
        let timeout_ms = self.timeout_ms;
        in_fresh_context(|| path_solver(system, timeout_ms).check())
    }

    /// Like [`Backend::check`], but first tries `witness` (a model of a related system, such as
    /// the parent of a branch): when it is an exact solution of `system`, the answer is `Sat`
    /// with it and no solver query is made. Exact rational evaluation makes this a proof.
    /// When the witness fails only a divisibility of one variable (a tree's fork on a trip
    /// count, `s % 4 == 0`), the witness with that variable moved to the nearest values that
    /// satisfy it is tried too: Z3's integer search is slow on such systems, and these points
    /// often solve them (an exact check, so still a proof). Then the witness moved, a variable
    /// at a time, onto failing constraints linear in some variable ([`linear_repair`]).
    /// The answers' *kind* (sat, unsat, unknown) never depends on the witness where Z3 decides
    /// the system; which model comes back does.
    pub fn check_with_witness(&self, system: &System, witness: Option<&Model>) -> CheckResult {
        let Some(m) = witness.filter(|m| m.approximate.is_empty()) else { return self.check(system) };
        if system.holds_at(&m.values) == Ok(true) {
            return CheckResult::Sat(m.clone());
        }
        for c in system.constraints() {
            let Some(modulus) = c.rel().modulus() else { continue };
            let Some(v) = c.poly().vars().into_iter().next().filter(|v| c.poly() == &Poly::from_var(v.clone())) else { continue };
            let Some(value) = m.values.get(&v).filter(|x| x.is_integer()).map(|x| x.to_integer()) else { continue };
            if c.holds_at(&m.values) == Ok(true) {
                continue;
            }
            // The next values up and down that satisfy `c`, nearest first.
            for delta in 1..=2 * i64::from(modulus) {
                let step = if delta % 2 == 1 { (delta + 1) / 2 } else { -(delta / 2) };
                let mut values = m.values.clone();
                values.insert(v.clone(), Rational::from_integer(&value + BigInt::from(step)));
                if system.holds_at(&values) == Ok(true) {
                    return CheckResult::Sat(Model { values, approximate: BTreeSet::new() });
                }
            }
        }
        // A contradiction the relaxation shows needs no repair attempts (each a few dozen
        // exact evaluations) before it is found.
        let open = !crate::budget::expired();
        if open && crate::relax::refutes(system, None) {
            return CheckResult::Unsat;
        }
        if let Some(values) = linear_repair(system, &m.values) {
            return CheckResult::Sat(Model { values, approximate: BTreeSet::new() });
        }
        // `check`'s pre-checks, less the refutation just tried.
        if let Some(values) = open.then(|| crate::relax::guess(system)).flatten() {
            return CheckResult::Sat(Model { values, approximate: BTreeSet::new() });
        }
        self.decide(system)
    }

    /// Sat, unsat or unknown. The exact pre-checks of [`crate::relax`] answer first where they
    /// can (a contradiction in the linear relaxation; a solution among a few simple points),
    /// then [`Backend::decide`]'s order: a seeded search for a point, Z3 briefly, a repair
    /// towards a point, Z3 with its whole limit. Only Z3's runs are queries.
    pub fn check(&self, system: &System) -> CheckResult {
        if let Some(answer) = pre_checked(system, None) {
            return answer;
        }
        self.decide(system)
    }

    /// Whether `system` has no solution over the reals (each integer variable real, its bounds
    /// kept): then it has none over the integers either. `false` when it has, when Z3 cannot
    /// tell, or when a divisibility constraint needs integers. Z3's nonlinear real procedure
    /// decides in milliseconds systems its integer search takes tens of milliseconds on
    /// (caching's safety conditions, with their division remainders), so a caller expecting
    /// `unsat` asks this first.
    pub fn unsat_over_reals(&self, system: &System) -> bool {
        if system.constraints().iter().any(|c| c.rel().modulus().is_some()) {
            return false;
        }
        let mut relaxed = System::new();
        for c in system.constraints() {
            relaxed.add(c.clone());
        }
        for (v, d) in system.domains() {
            if let Domain::Integer { lo, hi } = d {
                let x = Poly::from_var(v.clone());
                if let Some(l) = lo {
                    relaxed.add(Constraint::le(&Poly::constant(Rational::from_integer(l.clone())), &x));
                }
                if let Some(h) = hi {
                    relaxed.add(Constraint::le(&x, &Poly::constant(Rational::from_integer(h.clone()))));
                }
            }
        }
        matches!(self.check(&relaxed), CheckResult::Unsat)
    }

    /// Does every solution of `system` satisfy `c`? (Asks whether `system and not c` is sat,
    /// the pre-checks first as in [`Backend::check`].) Answers are memoised per back end (the
    /// same question gets the same answer, and no second query).
    pub fn implies(&self, system: &System, c: &Constraint) -> Implication {
        let key = format!("{system:?}|{c:?}");
        if let Some(known) = self.implications.borrow().get(&key) {
            return known.clone();
        }
        let negation = c.negate();
        let answer = match pre_checked(system, Some(&negation)) {
            Some(answer) => answer,
            None => self.decide(&system.clone().with(negation)),
        };
        let answer = match answer {
            CheckResult::Unsat => Implication::Proved,
            CheckResult::Sat(m) => Implication::Refuted(m),
            CheckResult::Unknown(r) => Implication::Unknown(r),
        };
        self.implications.borrow_mut().insert(key, answer.clone());
        answer
    }

    /// Remove, one at a time in order, each constraint implied by the ones still kept.
    pub fn simplify(&self, system: &System) -> Simplified {
        match self.check(system) {
            CheckResult::Unsat => return Simplified::Inconsistent,
            CheckResult::Unknown(r) => return Simplified::Unknown(r),
            CheckResult::Sat(_) => {}
        }
        let mut dropped = BTreeSet::new();
        let mut removed = Vec::new();
        let mut undecided = 0;
        for (i, c) in system.constraints().iter().enumerate() {
            let mut others = dropped.clone();
            others.insert(i);
            match self.implies(&system.without(&others), c) {
                Implication::Proved => {
                    dropped.insert(i);
                    removed.push(c.clone());
                }
                Implication::Refuted(_) => {}
                Implication::Unknown(_) => undecided += 1,
            }
        }
        Simplified::Consistent { system: system.without(&dropped), removed, undecided }
    }

    /// Up to `k` distinct models, each excluded from the search once found. The search runs
    /// in a Z3 context of its own ([`in_fresh_context`]), so the models do not depend on what
    /// this thread asked before, and neither does the time: in a context warmed by other
    /// systems' queries, Z3 4.8.12 spent minutes on a leaf's system that it samples in 2 s in
    /// a fresh one, without spending the resource limit (tests/dispatch.rs, 2026-11-24).
    pub fn sample(&self, system: &System, k: usize) -> Samples {
        let timeout_ms = self.timeout_ms;
        let (samples, queries) = in_fresh_context(|| {
            let own = Backend::new(timeout_ms);
            let samples = own.sample_in_this_context(system, k);
            (samples, own.queries())
        });
        self.add_queries(queries);
        samples
    }

    fn sample_in_this_context(&self, system: &System, k: usize) -> Samples {
        let mut ps = self.path(system);
        let vars: Vec<Var> = system.vars().into_iter().collect();
        let mut models = Vec::new();
        while models.len() < k {
            self.count_query();
            match self.run(&mut ps) {
                CheckResult::Sat(m) => {
                    ps.block(&vars, &m);
                    models.push(m);
                }
                CheckResult::Unsat => return Samples { models, exhausted: true, unknown: None },
                CheckResult::Unknown(r) => {
                    return Samples { models, exhausted: false, unknown: Some(r) }
                }
            }
            if vars.is_empty() {
                return Samples { models, exhausted: true, unknown: None };
            }
        }
        Samples { models, exhausted: false, unknown: None }
    }
}

/// A Z3 term for a variable, in its domain's sort.
#[derive(Clone)]
enum Term {
    Int(Int),
    Real(Real),
}

/// One incremental Z3 solver for a path of the decision tree: assert, push, pop, check.
pub struct PathSolver {
    solver: Solver,
    domains: BTreeMap<Var, Domain>,
    terms: BTreeMap<Var, Term>,
    /// The wall-clock time after which a query is interrupted whatever its resource limit.
    wall_cap: std::time::Duration,
}

thread_local! {
    /// What this thread waits for before its first Z3 object ([`gate_z3`]).
    static Z3_GATE: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
}

/// Make this thread run `open` (which may block) before it creates its first Z3 object.
/// Work running side by side uses it to reach Z3 in the order a sequential run would: Z3's
/// models depend on what contexts on other threads did before and at the same time (see
/// [`in_fresh_thread`]), so two tree builds may overlap only where neither asks Z3.
pub fn gate_z3(open: impl FnOnce() + 'static) {
    Z3_GATE.with(|g| *g.borrow_mut() = Some(Box::new(open)));
}

/// Every Z3 object is made through a [`PathSolver`]: its constructors pass the gate first.
fn pass_z3_gate() {
    if let Some(open) = Z3_GATE.with(|g| g.borrow_mut().take()) {
        open();
    }
}

impl PathSolver {
    /// A solver in which every variable with a declared domain exists from the start, with
    /// its bounds asserted at the base level so that no `pop` removes them.
    pub fn new(domains: &BTreeMap<Var, Domain>, timeout_ms: u32) -> PathSolver {
        pass_z3_gate();
        PathSolver::with_solver(Solver::new(), domains, timeout_ms)
    }

    /// The same solver with another wall-clock cap (for tests of the watchdog).
    pub fn with_wall_cap(mut self, cap: std::time::Duration) -> PathSolver {
        self.wall_cap = cap;
        self
    }

    /// A solver for systems over integer variables with integer coefficients only (nonlinear
    /// integer arithmetic): Z3's QF_NIA solver, which on the tree's and the strategies' queries
    /// answers the same as the general one in about two thirds of the time (bench/RESULTS.md).
    pub fn integer(domains: &BTreeMap<Var, Domain>, timeout_ms: u32) -> PathSolver {
        pass_z3_gate();
        let solver = Solver::new_for_logic("QF_NIA").unwrap_or_else(Solver::new);
        PathSolver::with_solver(solver, domains, timeout_ms)
    }

    fn with_solver(solver: Solver, domains: &BTreeMap<Var, Domain>, timeout_ms: u32) -> PathSolver {
        let mut params = Params::new();
        params.set_u32("rlimit", timeout_ms.saturating_mul(RLIMIT_PER_MS));
        // Z3 otherwise installs its own SIGINT handler for each check and restores the one
        // before after: from several threads at once that replaced metafork's (Ctrl-C was
        // ignored) and could leave a handler of a finished check behind (a segfault on Ctrl-C).
        // An interrupt reaches a running check through the budget's watchdog instead.
        params.set_bool("ctrl_c", false);
        solver.set_params(&params);
        let mut terms = BTreeMap::new();
        for (v, d) in domains {
            let t = match d {
                Domain::Real => Term::Real(Real::new_const(v.name())),
                Domain::Integer { lo, hi } => {
                    let x = Int::new_const(v.name());
                    if let Some(lo) = lo {
                        solver.assert(x.ge(Int::from_big_int(lo)));
                    }
                    if let Some(hi) = hi {
                        solver.assert(x.le(Int::from_big_int(hi)));
                    }
                    Term::Int(x)
                }
            };
            terms.insert(v.clone(), t);
        }
        let wall_cap = std::time::Duration::from_millis(u64::from(timeout_ms).saturating_mul(WALL_CAP_FACTOR).max(WALL_CAP_MIN_MS));
        PathSolver { solver, domains: domains.clone(), terms, wall_cap }
    }

    pub fn push(&mut self) {
        self.solver.push();
    }

    pub fn pop(&mut self) {
        self.solver.pop(1);
    }

    /// The Z3 term of a variable; one without a declared domain is an unbounded real.
    fn term(&mut self, v: &Var) -> Term {
        self.terms.entry(v.clone()).or_insert_with(|| Term::Real(Real::new_const(v.name()))).clone()
    }

    fn encode(&mut self, c: &Constraint) -> Bool {
        let vars = c.vars();
        let all_int = vars.iter().all(|v| self.domains.get(v).is_some_and(Domain::is_integer));
        let terms: BTreeMap<Var, Term> = vars.iter().map(|v| (v.clone(), self.term(v))).collect();
        if all_int && c.poly().terms().all(|(_, k)| k.is_integer()) {
            let lhs = int_poly(c.poly(), &terms);
            let zero = Int::from_i64(0);
            match c.rel() {
                Rel::Lt => lhs.lt(&zero),
                Rel::Le => lhs.le(&zero),
                Rel::Eq => lhs.eq(&zero),
                Rel::Ne => lhs.eq(&zero).not(),
                Rel::Dvd(m) => lhs.modulo(&Int::from_u64(m.into())).eq(&zero),
                Rel::NotDvd(m) => lhs.modulo(&Int::from_u64(m.into())).eq(&zero).not(),
            }
        } else {
            let lhs = real_poly(c.poly(), &terms);
            let zero = Real::from_rational(0, 1);
            match c.rel() {
                Rel::Lt => lhs.lt(&zero),
                Rel::Le => lhs.le(&zero),
                Rel::Eq => lhs.eq(&zero),
                Rel::Ne => lhs.eq(&zero).not(),
                // Over the reals: `p / m` is an integer.
                Rel::Dvd(m) => lhs.div(&Real::from_rational(m.into(), 1)).is_int(),
                Rel::NotDvd(m) => lhs.div(&Real::from_rational(m.into(), 1)).is_int().not(),
            }
        }
    }

    pub fn assert(&mut self, c: &Constraint) {
        let b = self.encode(c);
        self.solver.assert(&b);
    }

    /// Exclude a model: at least one of `vars` must take another value.
    fn block(&mut self, vars: &[Var], m: &Model) {
        let mut differs = Vec::new();
        for v in vars {
            if let Some(x) = m.values.get(v) {
                let c = Constraint::ne(&Poly::from_var(v.clone()), &Poly::constant(x.clone()));
                differs.push(self.encode(&c));
            }
        }
        let refs: Vec<&Bool> = differs.iter().collect();
        self.solver.assert(Bool::or(&refs));
    }

    pub fn check(&mut self) -> CheckResult {
        if crate::budget::expired() {
            return CheckResult::Unknown(crate::budget::REASON.into());
        }
        let started = std::time::Instant::now();
        let watched = watchdog::watch(self.solver.get_context(), self.wall_cap);
        let answer = self.solver.check();
        drop(watched);
        match answer {
            SatResult::Unsat => CheckResult::Unsat,
            // Interrupted at the deadline: the budget's answer, so the phase ends as spent.
            SatResult::Unknown if crate::budget::expired() => CheckResult::Unknown(crate::budget::REASON.into()),
            SatResult::Unknown if started.elapsed() >= self.wall_cap => CheckResult::Unknown(format!("the query ran past {} s of wall-clock time without spending its resource limit, and was interrupted", self.wall_cap.as_secs_f64())),
            SatResult::Unknown => CheckResult::Unknown(
                self.solver.get_reason_unknown().unwrap_or_else(|| "unknown".into()),
            ),
            SatResult::Sat => match self.solver.get_model() {
                Some(model) => CheckResult::Sat(self.read_model(&model)),
                None => CheckResult::Unknown("z3 reported sat without a model".into()),
            },
        }
    }

    fn read_model(&self, model: &z3::Model) -> Model {
        let mut values = BTreeMap::new();
        let mut approximate = BTreeSet::new();
        for (v, t) in &self.terms {
            let (value, exact) = match t {
                Term::Int(x) => {
                    let text = model.eval(x, true).map(|e| e.to_string()).unwrap_or_default();
                    (parse_z3_numeral(&text), true)
                }
                Term::Real(x) => {
                    let e = model.eval(x, true);
                    let text = e.as_ref().map(|e| e.to_string()).unwrap_or_default();
                    match parse_z3_numeral(&text) {
                        Some(q) => (Some(q), true),
                        None => (e.map(|e| e.approx(30)).and_then(|s| parse_decimal(&s)), false),
                    }
                }
            };
            if let Some(q) = value {
                if !exact {
                    approximate.insert(v.clone());
                }
                values.insert(v.clone(), q);
            }
        }
        Model { values, approximate }
    }
}

fn int_poly(p: &Poly, terms: &BTreeMap<Var, Term>) -> Int {
    let mut summands = Vec::new();
    for (m, k) in p.terms() {
        let mut factors = vec![Int::from_big_int(k.numer())];
        for (v, e) in m.factors() {
            let Some(Term::Int(x)) = terms.get(v) else { unreachable!("integer encoding of {v}") };
            for _ in 0..*e {
                factors.push(x.clone());
            }
        }
        summands.push(Int::mul(&factors));
    }
    if summands.is_empty() {
        return Int::from_i64(0);
    }
    Int::add(&summands)
}

fn real_poly(p: &Poly, terms: &BTreeMap<Var, Term>) -> Real {
    let mut summands = Vec::new();
    for (m, k) in p.terms() {
        let mut factors = vec![Real::from_big_rational(k)];
        for (v, e) in m.factors() {
            let x = match terms.get(v) {
                Some(Term::Int(i)) => i.to_real(),
                Some(Term::Real(r)) => r.clone(),
                None => unreachable!("variable {v} was declared before encoding"),
            };
            for _ in 0..*e {
                factors.push(x.clone());
            }
        }
        summands.push(Real::mul(&factors));
    }
    if summands.is_empty() {
        return Real::from_rational(0, 1);
    }
    Real::add(&summands)
}

/// Read Z3's printed numerals: `7`, `(- 7)`, `2.0`, `(/ 1.0 3.0)`, `(- (/ 1.0 3.0))`.
/// Returns `None` for anything else (an algebraic `root-obj`, say).
pub(crate) fn parse_z3_numeral(text: &str) -> Option<Rational> {
    let t = text.trim();
    if let Some(inner) = t.strip_prefix('(').and_then(|s| s.strip_suffix(')')) {
        let inner = inner.trim();
        if let Some(rest) = inner.strip_prefix("- ") {
            return parse_z3_numeral(rest).map(|q| -q);
        }
        if let Some(rest) = inner.strip_prefix("/ ") {
            let (a, b) = split_two_operands(rest)?;
            let (a, b) = (parse_z3_numeral(a)?, parse_z3_numeral(b)?);
            return (!b.is_zero()).then(|| a / b);
        }
        return None;
    }
    parse_decimal(t)
}

fn split_two_operands(s: &str) -> Option<(&str, &str)> {
    let s = s.trim();
    let mut depth = 0i32;
    for (i, ch) in s.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ' ' if depth == 0 => return Some((&s[..i], &s[i + 1..])),
            _ => {}
        }
    }
    None
}

/// `-12.5` or `3` as an exact rational.
fn parse_decimal(s: &str) -> Option<Rational> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (int_part, frac) = s.split_once('.').unwrap_or((s, ""));
    if int_part.is_empty() || !int_part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut q = Rational::from_integer(int_part.parse::<BigInt>().ok()?);
    if !frac.is_empty() {
        let den = num_traits::pow(BigInt::from(10), frac.len());
        q += Rational::new(frac.parse::<BigInt>().ok()?, den);
    }
    Some(if neg { -q } else { q })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_z3_numerals() {
        let q = |a: i64, b: i64| Rational::new(BigInt::from(a), BigInt::from(b));
        assert_eq!(parse_z3_numeral("7"), Some(q(7, 1)));
        assert_eq!(parse_z3_numeral("(- 7)"), Some(q(-7, 1)));
        assert_eq!(parse_z3_numeral("2.5"), Some(q(5, 2)));
        assert_eq!(parse_z3_numeral("(/ 1.0 3.0)"), Some(q(1, 3)));
        assert_eq!(parse_z3_numeral("(- (/ 1.0 3.0))"), Some(q(-1, 3)));
        assert_eq!(parse_z3_numeral("(root-obj (+ (^ x 2) (- 2)) 2)"), None);
    }

    /// The gate runs once, before the thread's first solver, and holds it until it opens;
    /// work that asks Z3 nothing never passes it.
    #[test]
    fn the_z3_gate_holds_the_first_solver_until_it_opens() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let (open, opened) = std::sync::mpsc::channel::<()>();
        let passed = Arc::new(AtomicUsize::new(0));
        let seen = passed.clone();
        let worker = std::thread::spawn(move || {
            gate_z3(move || {
                opened.recv().unwrap();
                seen.fetch_add(1, Ordering::SeqCst);
            });
            let s = System::new();
            let _ = crate::relax::refutes(&s, None);
            let first = PathSolver::new(s.domains(), 100);
            drop(first);
            let _second = PathSolver::integer(s.domains(), 100);
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(passed.load(Ordering::SeqCst), 0, "no solver before the gate opens");
        assert!(!worker.is_finished());
        open.send(()).unwrap();
        worker.join().unwrap();
        assert_eq!(passed.load(Ordering::SeqCst), 1, "the gate is passed once");
        // Another thread has no gate.
        std::thread::spawn(|| drop(PathSolver::new(&BTreeMap::new(), 100))).join().unwrap();
    }
}

/// The budget's deadline inside a query: a query that is still running when the deadline
/// passes is interrupted (`Z3_interrupt`, which Z3 documents as callable from another thread),
/// so a phase ends at its deadline rather than when its longest query would have.
///
/// Z3's own `timeout` parameter is not used: with Z3 4.8.12 (the version the project links)
/// setting it per query deadlocked a `gen` run in Z3's timer thread (seen under gdb, 2026-11-25).
/// The same thread interrupts a query that has run for [`WALL_CAP_FACTOR`] times its resource
/// limit's nominal milliseconds: some of Z3's nonlinear integer procedures loop without
/// spending the limit (one `gen` query ran 57 s under a 5-second limit, 2026-11-26), and a
/// wall-clock cap, though not deterministic, is what keeps such a query from hanging a run; its
/// answer is unknown, as a spent limit's is.
/// One watchdog thread serves the process; a running query registers its context for the
/// length of the call ([`watch`]), and the registry's lock keeps a context alive while the
/// watchdog interrupts it (a context outlives every check made in it).
mod watchdog {
    use std::sync::{Mutex, OnceLock};
    use std::time::Duration;

    /// Contexts in a query, by registration number, with when each query must stop.
    static RUNNING: Mutex<Vec<(u64, usize, std::time::Instant)>> = Mutex::new(Vec::new());
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static STARTED: OnceLock<bool> = OnceLock::new();

    /// How often the watchdog looks at the clock: the most a query can outlast the deadline.
    const TICK: Duration = Duration::from_millis(20);

    /// A context registered for the length of one query.
    pub struct Watched(u64);

    impl Drop for Watched {
        fn drop(&mut self) {
            let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            running.retain(|(id, ..)| *id != self.0);
        }
    }

    /// Register `ctx` while one of its queries runs, to be interrupted at the budget's deadline
    /// or once it has run for `cap`.
    pub fn watch(ctx: &z3::Context, cap: Duration) -> Option<Watched> {
        let started = *STARTED.get_or_init(|| std::thread::Builder::new().name("z3-budget-watchdog".into()).spawn(run).is_ok());
        if !started {
            return None;
        }
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RUNNING.lock().unwrap_or_else(|e| e.into_inner()).push((id, ctx.get_z3_context().as_ptr() as usize, std::time::Instant::now() + cap));
        Some(Watched(id))
    }

    fn run() {
        loop {
            std::thread::sleep(TICK);
            let expired = crate::budget::expired();
            let now = std::time::Instant::now();
            let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            for (_, raw, _) in running.iter().filter(|(_, _, stop)| expired || now >= *stop) {
                if let Some(ctx) = std::ptr::NonNull::new(*raw as *mut z3_sys::_Z3_context) {
                    // SAFETY: the context is registered, so its query is running and the
                    // context alive; unregistering waits for this lock.
                    unsafe { z3_sys::Z3_interrupt(ctx) };
                }
            }
        }
    }
}
