//! Building one tree: the builder's state and memo tables, the root (caching, CSE and prefetching
//! kept where they change the code), and the resource-counter forks (the paper's Algorithm 2):
//! evaluate a code's counters, branch on `counter <= limit`, and on refusal apply the first
//! strategy left that lowers the counter. Every child system is checked for consistency against
//! its parent's witness first, then by Z3.

use super::*;
use super::derived;

/// A memo table keyed by code. Keys are whole kernels (their syntax trees), hashed at every
/// lookup, so the hasher is rustc's Fx, several times cheaper per word than the default
/// SipHash (SipHash was 4% of mvt's `gen`). Fx is not keyed against collisions chosen on
/// purpose; the keys come from the program being compiled, whose author would only slow
/// their own build.
pub(super) type Memo<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;

pub(super) struct Builder<'a> {
    pub(super) function: &'a KernelFunction,
    pub(super) backend: &'a Backend,
    pub(super) machine: MachineSymbols,
    pub(super) nodes: Vec<Node>,
    pub(super) cache: Memo<Kernel, Evaluated>,
    /// Staged forms by logical code (without its unrolling flag).
    pub(super) staged: Memo<Kernel, crate::strategy::caching::Staged>,
    /// Strategy results by (strategy, code): the same code is refused on several branches.
    pub(super) applied: Memo<(Strategy, std::sync::Arc<Kernel>), Option<Kernel>>,
    /// Granularity-reduced code by the code without unrolling flag and cached arrays.
    pub(super) reduced: Memo<Kernel, Option<Kernel>>,
    /// Register-blocked code by (code, factor).
    pub(super) blocked: Memo<(Kernel, i64), Option<Kernel>>,
    /// The granularity parameter a code's blockable loop runs to, by the code's body,
    /// parameters and host loops: the independence proof behind it was a quarter of matmul's
    /// `gen` when asked again at every settled node.
    pub(super) granularity: Memo<(Vec<crate::frontend::ast::Stmt>, Vec<crate::kernel::KernelParam>, Vec<crate::frontend::model::SerialLoop>), Option<String>>,
    /// The root system: the context in which accesses are modelled for the performance counters.
    pub(super) root: System,
    /// Performance conditions by (code that runs, counter).
    pub(super) conditions: Memo<(Kernel, PerfKind), Vec<Condition>>,
    /// The most levels one code's performance conditions can add (see [`Tree::height_bound`]).
    pub(super) perf_levels: usize,
    /// Codes made ahead of their evaluation, by key, whose counts the worker makes.
    pub(super) speculated: Memo<Kernel, crate::strategy::caching::Staged>,
    pub(super) speculator: speculate::Speculator,
    /// Whether next codes are counted ahead on a worker: only while a core is spare for it.
    pub(super) speculate: Speculate,
}

/// When a build counts codes ahead on a worker ([`Builder::count_ahead`]). Counting is a pure
/// function of the code, so the policy changes when a count is made, never the tree.
#[derive(Clone)]
pub(super) enum Speculate {
    Always,
    /// While fewer of the program's builds are unfinished than there are cores: builds side by
    /// side take every core at first, and the last one running gets the others' cores as they
    /// finish (mvt's two trees finished 33 ms apart, one core idle meanwhile).
    WhileCoresSpare { unfinished: std::sync::Arc<std::sync::atomic::AtomicUsize>, cores: usize },
}

impl Speculate {
    fn now(&self) -> bool {
        match self {
            Speculate::Always => true,
            Speculate::WhileCoresSpare { unfinished, cores } => unfinished.load(std::sync::atomic::Ordering::Relaxed) < *cores,
        }
    }
}

/// Whether `c` holds at `point`, every variable of it given there in its domain in `system`.
fn holds_at(c: &Constraint, system: &System, point: &std::collections::BTreeMap<Var, constraints::Rational>) -> bool {
    c.poly().vars().iter().all(|v| point.get(v).is_some_and(|x| system.domain(v).admits(x))) && c.holds_at(point) == Ok(true)
}

/// A child of `parent` with the system `constraints`: the parent's code, counters and what is
/// left to do, no children and no witness yet. Built field by field so that the parent's
/// system, children and witness are not copied only to be replaced (three copies of the
/// system per branch before).
fn below(parent: &Node, constraints: System, decision: String) -> Node {
    let mut decisions = Vec::with_capacity(parent.decisions.len() + 1);
    decisions.extend(parent.decisions.iter().cloned());
    decisions.push(decision);
    Node {
        id: parent.id,
        code: parent.code.clone(),
        staged: parent.staged.clone(),
        cached: parent.cached.clone(),
        applied: parent.applied.clone(),
        blocked_by: parent.blocked_by,
        strategies_left: parent.strategies_left.clone(),
        counters_left: parent.counters_left.clone(),
        perf_done: parent.perf_done,
        constraints,
        decisions,
        counters: parent.counters.clone(),
        kind: parent.kind.clone(),
        children: Vec::new(),
        depth: parent.depth + 1,
        unknown: parent.unknown,
        witness: None,
    }
}

/// Every symbol of the program: parameters, derived scalars, loop counters are not symbols.
pub(super) fn program_symbols(function: &KernelFunction) -> BTreeSet<String> {
    function.params.iter().map(|p| p.name.clone()).chain(function.derived.iter().map(|d| d.name.clone())).collect()
}

/// [`root_constraints`] with the machine symbols named apart from the program's own (as a
/// tree's are): what `gen`'s checks before the build read the facts through.
pub fn program_root_constraints(function: &KernelFunction) -> System {
    root_constraints(function, &MachineSymbols::avoiding(&program_symbols(function)))
}

/// The error a tree build ends with when the time budget ([`constraints::budget`]) is spent.
pub const BUDGET_SPENT: &str = "the time budget ran out before the tree was built";

/// The root system: the program's facts, integer parameters, and positive per-block machine
/// limits. The per-multiprocessor symbols enter (positive, integer) only below an occupancy
/// fork, the one place they are read: two more variables in every query made Z3 measurably
/// slower on the trees that never read them.
pub fn root_constraints(function: &KernelFunction, machine: &MachineSymbols) -> System {
    let mut s = base_context(function);
    machine.all()[..4].iter().for_each(|m| add_machine_symbol(&mut s, m));
    s
}

pub(super) fn add_machine_symbol(s: &mut System, m: &str) {
    s.set_domain(Var::new(m), Domain::integer());
    s.add(machine_symbol_fact(m));
}

/// `1 <= m`: what every device's value of machine symbol `m` satisfies.
pub(super) fn machine_symbol_fact(m: &str) -> Constraint {
    Constraint::ge(&Poly::var(m), &Poly::one())
}

/// A logical code's staged form and its counters.
#[derive(Clone, Debug)]
pub(super) struct Evaluated {
    pub(super) staged: Kernel,
    pub(super) cached: Vec<String>,
    pub(super) counters: CounterValues,
}

/// The code as granularity reduction sees it: no cached arrays, none of the flags applied
/// after staging.
pub(super) fn plain_code(code: &Kernel) -> Kernel {
    Kernel { cache: Vec::new(), ..unstaged_flags_cleared(code) }
}

/// The code as staging sees it: the flags that act on the staged code (unrolling, 32-bit
/// indices, the register cap, CSE, the unrolling by 4, merging) cleared.
pub(super) fn unstaged_flags_cleared(code: &Kernel) -> Kernel {
    Kernel { no_unroll: false, narrow_index: false, max_registers: None, cse: 0, unroll: None, block_reduce: false, merged: false, ..code.clone() }
}

/// The decision tree of one schedule. It is built in a Z3 context of its own, on a thread of
/// its own that creates the context only if a query needs it (with a back end of its own,
/// whose query count is added to `backend`'s), so that a tree never depends on
/// what an earlier build on this thread left in the thread's context: repeated in-process
/// builds (benchmarks, tests, `tune`) answer as a fresh `gen` does.
pub fn build(function: &KernelFunction, kernel: Kernel, backend: &Backend) -> Result<Tree, String> {
    let (tree, queries) = build_in_turn(function, kernel, backend.timeout_ms(), None, Speculate::Always);
    backend.add_queries(queries);
    tree
}

/// [`build`] with a back end of `timeout_ms`, returning its query count; with `turn`, the
/// build's first Z3 query waits until the builds before it in `turn` have finished. While
/// `speculate` allows, a worker counts the codes the tree will likely ask for next ([`speculate`]).
fn build_in_turn(function: &KernelFunction, kernel: Kernel, timeout_ms: u32, turn: Option<(std::sync::Arc<Turns>, usize)>, speculate: Speculate) -> (Result<Tree, String>, u64) {
    constraints::solver::in_fresh_thread(move || {
        if let Some((turns, k)) = turn {
            constraints::solver::gate_z3(move || turns.wait_for_those_before(k));
        }
        let own = Backend::new(timeout_ms);
        let tree = build_in_context(function, kernel, &own, speculate);
        (tree, own.queries())
    })
}

/// Which of a program's builds have finished, for builds side by side ([`build_all`]).
struct Turns {
    done: std::sync::Mutex<Vec<bool>>,
    changed: std::sync::Condvar,
}

impl Turns {
    fn wait_for_those_before(&self, k: usize) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !done[..k].iter().all(|d| *d) {
            done = self.changed.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Marks build `k` finished when dropped, also when the build panics, so that no later build
/// waits for it forever.
struct Finished<'a>(&'a Turns, usize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.done.lock().unwrap_or_else(|e| e.into_inner())[self.1] = true;
        self.0.changed.notify_all();
    }
}

pub(super) fn build_in_context(function: &KernelFunction, kernel: Kernel, backend: &Backend, speculate: Speculate) -> Result<Tree, String> {
    let machine = MachineSymbols::avoiding(&program_symbols(function));
    let schedule_name = kernel.name.clone();
    let mut root = root_constraints(function, &machine);
    // Where the program's arithmetic is defined (a divisor is not zero) joins the root unless
    // the facts already imply it: a disequality is a disjunction for Z3.
    let mut implied_facts = Vec::new();
    for f in function.facts.iter().filter(|f| f.kind == FactKind::Defined) {
        if let Some(c) = &f.constraint {
            if !matches!(backend.implies(&root, c), Implication::Proved) {
                root.add(c.clone());
                implied_facts.push((f.condition.to_string(), f.note.clone().unwrap_or_default(), f.condition.span));
            }
        }
    }
    let before = backend.queries();
    let mut b = Builder { function, backend, machine: machine.clone(), nodes: Vec::new(), cache: Memo::default(), staged: Memo::default(), applied: Memo::default(), reduced: Memo::default(), blocked: Memo::default(), granularity: Memo::default(), root: root.clone(), conditions: Memo::default(), perf_levels: 0, speculated: Memo::default(), speculator: Default::default(), speculate };
    // Every Z3 query runs on this thread, in one order (the speculator's worker counts with
    // LLVM only): Z3 contexts working on other threads at
    // the same time change this one's models (and so the number of queries the tree reports)
    // from run to run; a speculative granularity reduction on a second thread made `gen`'s
    // output differ between runs, and was measured no faster (bench/RESULTS.md).
    // The root's candidates (as written, with CSE, prefetched) are compared as the code that
    // runs; only the one kept is counted (counting is most of a code's cost: 1-3 ms of LLVM
    // pipeline; mvt's trees counted two codes each only to drop them).
    let RootChoice { kernel, applied, decisions, not_cached } = root_choice(&mut b, &kernel)?;
    let ev = b.evaluate(&kernel)?;
    b.nodes.push(Node {
        id: 0,
        code: kernel.into(),
        staged: ev.staged.into(),
        cached: ev.cached,
        applied,
        blocked_by: None,
        // Register blocking and coarsening are no refusal's strategies: they are tried once a
        // path is settled.
        strategies_left: Strategy::ALL.iter().copied().chain([Strategy::RegisterBlock, Strategy::Coarsen]).collect(),
        counters_left: Counter::ALL.to_vec(),
        perf_done: 0,
        constraints: root.clone(),
        decisions,
        counters: ev.counters,
        kind: NodeKind::Inner,
        children: Vec::new(),
        depth: 0,
        unknown: false,
        witness: None,
    });
    b.expand(0)?;
    // A query the deadline cut short answered `unknown`, which keeps a child that Z3 might have
    // dropped: a tree finished after the deadline is not the tree, so it is refused whole.
    if constraints::budget::expired() {
        return Err(BUDGET_SPENT.into());
    }
    let nodes = super::collapse::forks_that_choose_nothing(b.nodes, Some(&machine));
    Ok(Tree { schedule: schedule_name, machine, root_constraints: root, nodes, queries: backend.queries() - before, perf_levels: b.perf_levels, not_cached, implied_facts })
}

impl Builder<'_> {
    /// Node `id` keeps its code where strategy `s` was not allowed: final, or a leaf when `s`
    /// was the last one tried (merging).
    pub(super) fn keep(&mut self, id: usize, s: Strategy) -> Result<(), String> {
        match s {
            Strategy::Merge => {
                self.nodes[id].kind = NodeKind::Leaf;
                Ok(())
            }
            Strategy::RegisterBlock | Strategy::Coarsen => {
                self.nodes[id].strategies_left.retain(|x| *x != s);
                self.settle(id)
            }
            _ => self.finish(id),
        }
    }

    pub(super) fn evaluate(&mut self, kernel: &Kernel) -> Result<Evaluated, String> {
        if let Some(v) = self.cache.get(kernel) {
            return Ok(v.clone());
        }
        // Staging and counting a code take long on a big kernel: none starts past the deadline.
        if constraints::budget::expired() {
            return Err(BUDGET_SPENT.into());
        }
        let staged = match self.speculated.remove(kernel) {
            Some(staged) => staged,
            None => self.final_code(kernel)?,
        };
        let c = match self.speculator.take(kernel) {
            Some(counted) => counted?,
            None => {
                self.count_settled_forms_ahead(kernel, &staged.kernel);
                count(&staged.kernel, &[])?
            }
        };
        // The tree's systems and the dispatcher's tables read parameters and machine symbols
        // only: a derived scalar in a counter is replaced by its definition or a bound.
        let shared_bytes = derived::in_parameters(&c.shared_bytes, self.function, &self.root, self.backend)?;
        let threads_per_block = derived::in_parameters(&c.threads_per_block, self.function, &self.root, self.backend)?;
        let v = Evaluated {
            staged: staged.kernel,
            cached: staged.cached,
            counters: CounterValues { registers: c.registers.registers, shared_bytes, threads_per_block },
        };
        self.cache.insert(kernel.clone(), v.clone());
        Ok(v)
    }

    /// `kernel` as it runs, not counted: for a choice made on the code alone. It is kept for
    /// the evaluation that may follow ([`Self::evaluate`] takes it from `speculated`).
    pub(super) fn made(&mut self, kernel: &Kernel) -> Result<crate::strategy::caching::Staged, String> {
        if let Some(ev) = self.cache.get(kernel) {
            return Ok(crate::strategy::caching::Staged { kernel: ev.staged.clone(), cached: ev.cached.clone(), refused: Vec::new() });
        }
        if let Some(s) = self.speculated.get(kernel) {
            return Ok(s.clone());
        }
        if constraints::budget::expired() {
            return Err(BUDGET_SPENT.into());
        }
        let s = self.final_code(kernel)?;
        self.speculated.insert(kernel.clone(), s.clone());
        Ok(s)
    }

    /// `kernel` as it runs: staged (once per code without its flags), then its flags applied.
    fn final_code(&mut self, kernel: &Kernel) -> Result<crate::strategy::caching::Staged, String> {
        // Staging does not depend on the flags that act on the staged code: stage once, then
        // apply them: unrolling and the register cap as flags, 32-bit indices, then CSE.
        let unrolled = unstaged_flags_cleared(kernel);
        let staged = match self.staged.get(&unrolled) {
            Some(s) => s.clone(),
            None => {
                let s = stage(self.function, &unrolled, self.backend)?;
                self.staged.insert(unrolled, s.clone());
                s
            }
        };
        code_that_runs(self.function, staged, kernel)
    }

    /// `now` is about to be evaluated here and each code `next` yields after it is likely to be
    /// asked for soon: `now`'s final code is made (to be counted on this thread), then each
    /// next code's, handed to the counting worker ([`speculate`]). `next` sees `now`'s final
    /// code. Making `now` may stage it, asking Z3 what its evaluation would have asked at the
    /// same point; each next code must differ from `now` only in flags that act after staging,
    /// so no other Z3 query runs here and the tree's queries keep their order.
    pub(super) fn count_ahead(&mut self, now: &Kernel, next: impl FnOnce(&Kernel) -> Vec<Kernel>) {
        let made = match self.cache.get(now) {
            Some(ev) => ev.staged.clone(),
            None => match self.speculated.get(now) {
                Some(s) => s.kernel.clone(),
                None => match self.final_code(now) {
                    Ok(s) => {
                        let k = s.kernel.clone();
                        self.speculated.insert(now.clone(), s);
                        k
                    }
                    Err(_) => return, // evaluating `now` reports it
                },
            },
        };
        if !self.speculate.now() {
            return;
        }
        for guess in next(&made) {
            if self.cache.contains_key(&guess) || self.speculated.contains_key(&guess) {
                continue;
            }
            let Ok(staged) = self.final_code(&guess) else { continue };
            self.speculator.submit(guess.clone(), staged.kernel.clone());
            self.speculated.insert(guess, staged);
        }
    }

    /// Node `id` is about to fork on a register counter: its `accept` subtree is built first,
    /// then its `refuse` child tries the register strategies in order ([`Builder::refuse`]).
    /// The codes those strategies make by flags alone (unrolling disabled, lower CSE levels,
    /// the register cap, the block reduction dropped) are handed to the counting worker now,
    /// while the `accept` subtree is built (matmul's refusals counted 40 such codes, one after
    /// another, on the tree's thread). Granularity reduction is left out: it asks Z3. The worker
    /// takes the newest code first, so while it counts the last strategy's code this thread
    /// counts the first one itself, where it needs it before the worker gets to it.
    pub(super) fn count_refusals_ahead(&mut self, id: usize) {
        if !self.speculate.now() {
            return;
        }
        let node = &self.nodes[id];
        let code: &Kernel = &node.code;
        let left = |s: Strategy| node.strategies_left.contains(&s);
        let mut guesses = Vec::new();
        if left(Strategy::ReduceRegisterPressure1) {
            guesses.extend(no_unroll(code));
        }
        if left(Strategy::ReduceCse) {
            guesses.extend((0..code.cse).rev().map(|level| Kernel { cse: level, ..code.clone() }));
        }
        if left(Strategy::ReduceRegisterPressure3) && code.max_registers.is_none() && node.counters.registers > REGISTER_CAP {
            guesses.push(Kernel { max_registers: Some(REGISTER_CAP), ..code.clone() });
        }
        if left(Strategy::DropBlockReduce) && code.block_reduce {
            guesses.push(Kernel { block_reduce: false, ..code.clone() });
        }
        let staged = node.staged.clone();
        self.submit_flag_variants(guesses, &staged);
    }

    /// `code` (made as `staged`) is about to be counted on this thread: the codes a settled
    /// path makes of it by flags alone, unrolled by 4 ([`Builder::settle`]) and merged
    /// ([`Builder::finish`]), are handed to the counting worker first, so that both cores
    /// count (matmul's register-blocked codes and their unrolled forms, 35-50 ms each, were
    /// counted one after the other).
    fn count_settled_forms_ahead(&mut self, code: &Kernel, staged: &Kernel) {
        if !self.speculate.now() {
            return;
        }
        let mut guesses = Vec::new();
        if !code.merged && merge(staged).is_some() {
            guesses.push(Kernel { merged: true, ..code.clone() });
        }
        if code.unroll.is_none() {
            if let Some(u) = unroll(self.function, staged) {
                guesses.push(Kernel { unroll: Some(u.trip_count), ..code.clone() });
            }
        }
        self.submit_flag_variants(guesses, staged);
    }

    /// Hand `guesses`, codes that differ from one already made only in flags that act after
    /// staging, to the counting worker (newest first: the last is counted first). Only a code
    /// whose staging is made is taken, so that making it asks Z3 nothing and the tree's
    /// queries keep their order; one whose final form is `same` (the code it was guessed
    /// from) is made but not counted: the strategies never count such a code.
    fn submit_flag_variants(&mut self, guesses: Vec<Kernel>, same: &Kernel) {
        for guess in guesses {
            if !self.staged.contains_key(&unstaged_flags_cleared(&guess)) || self.cache.contains_key(&guess) || self.speculated.contains_key(&guess) {
                continue;
            }
            let Ok(made) = self.final_code(&guess) else { continue };
            if made.kernel != *same {
                self.speculator.submit(guess.clone(), made.kernel.clone());
            }
            self.speculated.insert(guess, made);
        }
    }

    /// Granularity reduction does not look at unrolling or at which arrays are cached: reduce
    /// the code without them once, then give the result the parent's flags.
    pub(super) fn reduce_granularity(&mut self, code: &Kernel) -> Result<Option<Kernel>, String> {
        let plain = plain_code(code);
        let reduced = match self.reduced.get(&plain) {
            Some(r) => r.clone(),
            None => {
                let r = reduce_granularity(self.function, &plain, self.backend)?;
                self.reduced.insert(plain, r.clone());
                r
            }
        };
        Ok(reduced.map(|r| Kernel { no_unroll: code.no_unroll, narrow_index: code.narrow_index, max_registers: code.max_registers, cse: code.cse, cache: code.cache.clone(), unroll: code.unroll.clone(), block_reduce: code.block_reduce, merged: code.merged, ..r }))
    }

    pub(super) fn limit(&self, c: Counter) -> Poly {
        Poly::var(match c {
            Counter::SharedMemory => &self.machine.shared_per_block,
            Counter::Registers => &self.machine.registers_per_thread,
            Counter::ThreadsPerBlock => &self.machine.threads_per_block,
            Counter::RegistersPerBlock => &self.machine.registers_per_block,
            Counter::AtomicContention | Counter::Coalescing | Counter::BankConflicts | Counter::TripCount | Counter::Occupancy | Counter::GridFill => unreachable!("performance counters, the trip count and occupancy have no single machine limit"),
        })
    }

    /// Consistency of a child's system given a known solution of its parent's: `None` drops
    /// it; otherwise whether it is unknown, and a solution when one was found.
    pub(super) fn consistent(&self, s: &System, parent_witness: Option<&Model>) -> Option<(bool, Option<Model>)> {
        match self.backend.check_with_witness(s, parent_witness) {
            CheckResult::Unsat => None,
            CheckResult::Sat(m) => Some((false, Some(m))),
            CheckResult::Unknown(_) => Some((true, None)),
        }
    }

    /// A child of `parent` with `added` in its system and `decision` recorded, or `None` when
    /// Z3 proves that system inconsistent.
    pub(super) fn branch(&self, parent: &Node, added: &Constraint, decision: String) -> Option<Node> {
        let mut sys = parent.constraints.clone();
        sys.add(added.clone());
        // The parent's witness solves the parent's system ([`Node::witness`]), so where `added`
        // holds there too it solves the child's: only `added` is evaluated, not the whole
        // system again (the answer `check_with_witness` would give, for less).
        if let Some(w) = parent.witness.as_ref().filter(|w| w.approximate.is_empty() && holds_at(added, &sys, &w.values)) {
            debug_assert_eq!(sys.holds_at(&w.values), Ok(true), "a node's witness solves its system");
            let mut node = below(parent, sys, decision);
            node.witness = Some(w.clone());
            return Some(node);
        }
        let (unknown, witness) = self.consistent(&sys, parent.witness.as_ref())?;
        let mut node = below(parent, sys, decision);
        node.witness = witness;
        node.unknown |= unknown;
        Some(node)
    }

    /// As [`Builder::branch`], for a system already known consistent (the caller sets the
    /// witness).
    pub(super) fn branch_known(&self, parent: &Node, added: &Constraint, decision: String) -> Node {
        let mut sys = parent.constraints.clone();
        sys.add(added.clone());
        below(parent, sys, decision)
    }

    pub(super) fn child(&mut self, parent: usize, edge: (&'static str, Counter, Constraint), node: Node) -> usize {
        let id = self.nodes.len();
        let mut node = node;
        node.id = id;
        self.nodes.push(node);
        // A final code's node is a leaf until a strategy forks it (`Builder::finish`).
        self.nodes[parent].kind = NodeKind::Inner;
        self.nodes[parent].children.push(Edge { kind: edge.0, counter: edge.1, constraint: edge.2, child: id });
        id
    }

    /// The code `s` makes of `node`'s, or `None` when it does not apply there (memoised by code).
    pub(super) fn apply(&mut self, s: Strategy, node: &Node) -> Result<Option<Kernel>, String> {
        let key = (s, node.code.clone());
        if let Some(r) = self.applied.get(&key) {
            return Ok(r.clone());
        }
        let code: &Kernel = &node.code;
        let r = match s {
            Strategy::ReduceRegisterPressure1 => no_unroll(code),
            Strategy::ReduceGranularity => self.reduce_granularity(code)?,
            Strategy::ReduceCse => {
                // The highest lower level that frees registers, if any.
                let mut found = None;
                for level in (0..code.cse).rev() {
                    let lower = Kernel { cse: level, ..code.clone() };
                    // A level that leaves the code that runs as it is frees nothing: not counted.
                    if self.made(&lower)?.kernel == *node.staged {
                        continue;
                    }
                    if self.evaluate(&lower)?.counters.registers < node.counters.registers {
                        found = Some(lower);
                        break;
                    }
                }
                found
            }
            Strategy::ReduceRegisterPressure3 => {
                (code.max_registers.is_none() && node.counters.registers > REGISTER_CAP).then(|| Kernel { max_registers: Some(REGISTER_CAP), ..code.clone() })
            }
            Strategy::DropCaching => (!node.cached.is_empty()).then(|| Kernel { cache: Vec::new(), ..code.clone() }),
            Strategy::UnpadColumns => (!code.unpadded_columns && node.staged.padded_columns).then(|| Kernel { unpadded_columns: true, ..code.clone() }),
            Strategy::PadSharedRows => (!code.pad_shared && !node.cached.is_empty()).then(|| Kernel { pad_shared: true, ..code.clone() }),
            Strategy::Interchange => crate::strategy::interchange::interchange(code),
            Strategy::DropBlockReduce => code.block_reduce.then(|| Kernel { block_reduce: false, ..code.clone() }),
            Strategy::BlockReduce => (!code.block_reduce && crate::strategy::block_reduce::contention(&node.staged).is_some()).then(|| Kernel { block_reduce: true, ..code.clone() }),
            Strategy::CacheInSharedMemory | Strategy::EliminateCommonSubexpressions | Strategy::Prefetch | Strategy::Unroll | Strategy::Merge | Strategy::RegisterBlock | Strategy::Coarsen => None,
        };
        self.applied.insert(key, r.clone());
        Ok(r)
    }

    pub(super) fn expand(&mut self, id: usize) -> Result<(), String> {
        if constraints::budget::expired() {
            return Err(BUDGET_SPENT.into());
        }
        let Some(&counter) = self.nodes[id].counters_left.first() else {
            return self.settle(id);
        };
        if let Some(kind) = counter.performance() {
            return self.expand_performance(id, counter, kind);
        }
        if counter == Counter::AtomicContention {
            return self.expand_contention(id);
        }
        let value = self.nodes[id].counters.value(counter);
        // A constant the root's `1 <= limit` already admits (no shared memory: 0 bytes) forks
        // nothing: the accept side adds nothing and the refusal is infeasible. It was a node
        // with one child, `accept 0 <= Z_B`, on every path of a code without tiles.
        if value.as_constant().is_some_and(|c| c <= constraints::Rational::from_integer(1.into())) {
            self.nodes[id].counters_left.remove(0);
            return self.expand(id);
        }
        let limit = self.limit(counter);
        if matches!(counter, Counter::Registers | Counter::RegistersPerBlock) {
            self.count_refusals_ahead(id);
        }
        let parent = self.nodes[id].clone();

        // Accept: the counter fits.
        let accept = Constraint::le(&value, &limit);
        if let Some(mut node) = self.branch(&parent, &accept, format!("accept {}: {accept}", counter.name())) {
            node.counters_left.remove(0);
            let c = self.child(id, ("accept", counter, accept), node);
            self.expand(c)?;
        }

        // Refuse: the counter exceeds the limit; a strategy must lower it.
        let refuse = Constraint::lt(&limit, &value);
        if let Some(node) = self.branch(&parent, &refuse, format!("refuse {}: {refuse}", counter.name())) {
            let candidates: Vec<Strategy> = parent.strategies_left.iter().copied().filter(|s| s.lowers(counter)).collect();
            if counter == Counter::ThreadsPerBlock && candidates.is_empty() {
                self.refuse_threads(id, &refuse, node)?;
            } else {
                self.refuse(id, (counter, &refuse), node, &candidates)?;
            }
        }
        Ok(())
    }

    /// The refuse child of `parent` (with `node`'s system): the first of `candidates` that
    /// applies is applied and the child expanded; with none, the child is an infeasible leaf.
    pub(super) fn refuse(&mut self, parent: usize, (counter, refuse): (Counter, &Constraint), node: Node, candidates: &[Strategy]) -> Result<(), String> {
        let mut node = node;
        for &s in candidates {
            let Some(code) = self.apply(s, &node)? else { continue };
            let ev = self.evaluate(&code)?;
            // For a register counter a strategy is taken only when the estimate drops (the
            // block does not change): otherwise its child would refuse the same counter again.
            if matches!(counter, Counter::Registers | Counter::RegistersPerBlock) && ev.counters.registers >= node.counters.registers {
                continue;
            }
            // Likewise for shared memory: a code with the same shared bytes would be refused
            // again (granularity reduction leaves a block reduction's partial sums as they are).
            if counter == Counter::SharedMemory && ev.counters.shared_bytes == node.counters.shared_bytes {
                continue;
            }
            take(&mut node, s, code, ev);
            let c = self.child(parent, ("refuse", counter, refuse.clone()), node);
            return self.expand(c);
        }
        node.kind = NodeKind::Infeasible { counter };
        self.child(parent, ("refuse", counter, refuse.clone()), node);
        Ok(())
    }
}


/// `node` after strategy `s` made `code` (evaluated as `ev`) of its code: every counter is
/// evaluated again on the new code.
pub(super) fn take(node: &mut Node, s: Strategy, code: Kernel, ev: Evaluated) {
    node.counters = ev.counters;
    node.staged = std::sync::Arc::new(ev.staged);
    node.cached = ev.cached;
    node.code = std::sync::Arc::new(code);
    node.applied.push(s);
    node.strategies_left.retain(|x| *x != s);
    node.counters_left = Counter::ALL.to_vec();
    node.perf_done = 0;
    node.decisions.push(format!("apply {}", s.name()));
}

/// The tree of every schedule of a program, with its function; an error names the schedule
/// (the first in source order to fail). Schedules are built side by side, as many at once as
/// the machine has cores, in source order; each build's first Z3 query waits until every
/// build before it has finished, so Z3 answers exactly as in builds one after another (most
/// builds ask Z3 nothing and never wait). The trees are the same either way.
pub fn build_all<'p>(program: &'p crate::frontend::CheckedProgram, backend: &Backend) -> Result<Vec<(&'p KernelFunction, Tree)>, String> {
    // The kernels up to the first that cannot be made: a one-by-one build would have stopped
    // there, after building the trees before it (whose errors come first).
    let mut jobs = Vec::new();
    let mut unmade = None;
    'schedules: for k in &program.kernels {
        for s in &k.schedules {
            match Kernel::from_schedule(k, s) {
                Ok(kernel) => jobs.push((k, s.name.as_str(), kernel)),
                Err(e) => {
                    unmade = Some(format!("{}: {e}", s.name));
                    break 'schedules;
                }
            }
        }
    }
    let timeout_ms = backend.timeout_ms();
    let turns = std::sync::Arc::new(Turns { done: std::sync::Mutex::new(vec![false; jobs.len()]), changed: std::sync::Condvar::new() });
    let results: Vec<std::sync::Mutex<Option<(Result<Tree, String>, u64)>>> = jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let helpers = cores.min(jobs.len()).saturating_sub(1);
    // Counting ahead pays where a core is left beside the builds; where the builds take every
    // core it only competes with them (2mm 75.7 -> 84.0 ms with it on two cores, syrk alone
    // 80.9 -> 74.0 ms; bench/RESULTS.md). So a build counts ahead once fewer builds than cores
    // are left.
    let unfinished = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(jobs.len()));
    let speculate = Speculate::WhileCoresSpare { unfinished: unfinished.clone(), cores };
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || loop {
        let k = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let Some((function, _, kernel)) = jobs.get(k) else { break };
        let _finished = Finished(&turns, k);
        let built = build_in_turn(function, kernel.clone(), timeout_ms, Some((turns.clone(), k)), speculate.clone());
        unfinished.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        *results[k].lock().unwrap_or_else(|e| e.into_inner()) = Some(built);
    };
    std::thread::scope(|scope| {
        // This thread works too, so the builds finish even where no helper can be started.
        for _ in 0..helpers {
            let _ = std::thread::Builder::new().spawn_scoped(scope, work);
        }
        work();
    });
    let mut trees = Vec::with_capacity(jobs.len());
    for ((function, name, _), result) in jobs.iter().zip(results) {
        let (tree, queries) = result.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every build ran");
        backend.add_queries(queries);
        trees.push((*function, tree.map_err(|e| format!("{name}: {e}"))?));
    }
    match unmade {
        Some(e) => Err(e),
        None => Ok(trees),
    }
}

/// A kernel and its variants under the implemented strategies, named by suffix (`""`,
/// `" +nounroll"`, `" +granularity"`, `" +granularity +nounroll"`, each also `" +cache"` when
/// the schedule asks for caching and it applies, then each of those `" +narrow"`), as the code
/// that runs: for benchmarks and tests.
pub fn strategy_variants(function: &KernelFunction, kernel: Kernel, backend: &Backend) -> Vec<(String, Kernel)> {
    let uncached = Kernel { cache: Vec::new(), ..kernel.clone() };
    let mut logical = vec![(String::new(), uncached.clone())];
    let reduced = reduce_granularity(function, &uncached, backend).ok().flatten();
    if let Some(k) = no_unroll(&uncached) {
        logical.push((" +nounroll".into(), k));
    }
    if let Some(r) = reduced {
        logical.push((" +granularity".into(), r.clone()));
        if let Some(k) = no_unroll(&r) {
            logical.push((" +granularity +nounroll".into(), k));
        }
    }
    let mut runs = Vec::new();
    for (name, k) in logical {
        let staged = stage(function, &Kernel { cache: kernel.cache.clone(), ..k.clone() }, backend).ok().filter(|s| !s.cached.is_empty());
        runs.push((name.clone(), k));
        if let Some(s) = staged {
            runs.push((format!("{name} +cache"), s.kernel));
        }
    }
    let narrowed: Vec<(String, Kernel)> = runs.iter().filter_map(|(name, k)| narrow::narrow(k).map(|n| (format!("{name} +narrow"), n))).collect();
    runs.extend(narrowed);
    runs
}

/// The root's code and how it was chosen: the program's code, with `cache(...)` staged where
/// its checks pass, then CSE and prefetching each kept where they change the code that runs.
struct RootChoice {
    kernel: Kernel,
    applied: Vec<Strategy>,
    decisions: Vec<String>,
    /// The `cache(...)` arrays no code stages, with why.
    not_cached: Vec<(String, String)>,
}

fn root_choice(b: &mut Builder, kernel: &Kernel) -> Result<RootChoice, String> {
    let (function, backend) = (b.function, b.backend);
    let kernel = kernel.clone();
    let made = b.made(&kernel)?;
    let not_cached: Vec<(String, String)> = made.refused.iter().filter(|(a, _)| !made.cached.contains(a)).cloned().collect();
    let mut applied = Vec::new();
    let mut decisions = Vec::new();
    if !made.cached.is_empty() {
        applied.push(Strategy::CacheInSharedMemory);
        decisions.push(format!("apply {}: {}", Strategy::CacheInSharedMemory.name(), made.cached.join(", ")));
    }
    // CSE at the root, kept when it changes the code that runs.
    let with_cse = Kernel { cse: CSE_LEVEL, ..kernel.clone() };
    let made_cse = b.made(&with_cse)?;
    let (kernel, made) = if made_cse.kernel.body != made.kernel.body {
        applied.push(Strategy::EliminateCommonSubexpressions);
        decisions.push(format!("apply {} (level {CSE_LEVEL})", Strategy::EliminateCommonSubexpressions.name()));
        (with_cse, made_cse)
    } else {
        (kernel, made)
    };
    // Prefetching at the root, kept when it changes the code that runs.
    let kernel = match prefetch(function, &kernel, backend) {
        Some(p) if b.made(&p)?.kernel.body != made.kernel.body => {
            applied.push(Strategy::Prefetch);
            decisions.push(format!("apply {}", Strategy::Prefetch.name()));
            p
        }
        _ => kernel,
    };
    Ok(RootChoice { kernel, applied, decisions, not_cached })
}

/// The code the root of `kernel`'s tree runs, as `gen` writes it: what `metafork counters`
/// reports. Only the root's choice is made (no counter is evaluated, no fork built).
pub fn code_at_root(function: &KernelFunction, kernel: &Kernel, backend: &Backend) -> Result<Kernel, String> {
    let machine = MachineSymbols::avoiding(&program_symbols(function));
    let root = root_constraints(function, &machine);
    let mut b = Builder { function, backend, machine, nodes: Vec::new(), cache: Memo::default(), staged: Memo::default(), applied: Memo::default(), reduced: Memo::default(), blocked: Memo::default(), granularity: Memo::default(), root, conditions: Memo::default(), perf_levels: 0, speculated: Memo::default(), speculator: Default::default(), speculate: Speculate::Always };
    let choice = root_choice(&mut b, kernel)?;
    Ok(b.made(&choice.kernel)?.kernel)
}

/// What runs of `kernel` once staged (`staged`: its code staged in shared memory, flags aside):
/// its flags applied in the order the tree applies them (unrolling and the register cap as
/// flags, 32-bit tile indices, CSE, promoted accumulators, block reductions, the unrolled and
/// merged forms).
fn code_that_runs(function: &KernelFunction, mut staged: crate::strategy::caching::Staged, kernel: &Kernel) -> Result<crate::strategy::caching::Staged, String> {
    staged.kernel.no_unroll = kernel.no_unroll;
    staged.kernel.max_registers = kernel.max_registers;
    // Tile index arithmetic is 32-bit in every staged code (`strategy::narrow` says why it
    // cannot overflow under any leaf's constraints), not a strategy the tree must choose.
    staged.kernel = narrow::narrow(&staged.kernel).unwrap_or(staged.kernel);
    staged.kernel = eliminate(&staged.kernel, kernel.cse);
    staged.kernel.cse = kernel.cse;
    // Accumulators that stay in registers across the tile loop (`strategy::promote`).
    if let Some(p) = crate::strategy::promote::promote(&staged.kernel) {
        staged.kernel = p;
    }
    // Reductions summed in the block first (`strategy::block_reduce`), where they apply.
    if kernel.block_reduce {
        if let Some(r) = crate::strategy::block_reduce::block_reduce(&staged.kernel) {
            // Its shared subscripts in 32 bits too, where no tile made the code narrow.
            staged.kernel = narrow::narrow(&r).unwrap_or(r);
        }
        staged.kernel.block_reduce = true;
    }
    if let Some(condition) = &kernel.unroll {
        if let Some(u) = unroll(function, &staged.kernel).filter(|u| u.trip_count == *condition) {
            staged.kernel = u.kernel;
        }
        staged.kernel.unroll = kernel.unroll.clone();
    }
    if kernel.merged {
        staged.kernel = merge(&staged.kernel).ok_or("iteration merging does not apply to this code")?;
        staged.kernel.merged = true;
    }
    Ok(staged)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting ahead changes who counts a code, never the tree: built with the worker
    /// counting (the refusals' codes, the settled forms) and with none, the trees are the same
    /// node for node, with the same Z3 query count. A guess handed to the worker with another
    /// code than its own fails here (checked by making `submit_flag_variants` pass the node's
    /// code). matmul: register refusals under register blocking and coarsening; transpose
    /// and softmax: refusals of cached, block-reduced and merged codes.
    #[test]
    fn counting_ahead_changes_no_tree() {
        for file in ["matmul.mf", "transpose.mf", "heldout/softmax.mf"] {
            let path = format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            let program = crate::frontend::check_source(&path, &text).unwrap_or_else(|d| panic!("{}", d.render(false)));
            let timeout_ms = Backend::default().timeout_ms();
            for f in &program.kernels {
                for s in &f.schedules {
                    let kernel = Kernel::from_schedule(f, s).unwrap();
                    let (ahead, ahead_queries) = build_in_turn(f, kernel.clone(), timeout_ms, None, Speculate::Always);
                    let never = Speculate::WhileCoresSpare { unfinished: std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(1)), cores: 1 };
                    assert!(!never.now());
                    let (alone, alone_queries) = build_in_turn(f, kernel, timeout_ms, None, never);
                    let (ahead, alone) = (ahead.unwrap(), alone.unwrap());
                    assert_eq!(ahead_queries, alone_queries, "{file}: {}", s.name);
                    assert_eq!(format!("{:?}", ahead.nodes), format!("{:?}", alone.nodes), "{file}: {}", s.name);
                }
            }
        }
    }
}

