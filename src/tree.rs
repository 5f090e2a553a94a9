//! Comprehensive optimization: the decision tree of the paper's Algorithms 1 and 2.
//!
//! A node is the quintuple (code, IR-level strategies applied, strategies left, counters left
//! to evaluate, constraint system). For the next counter with value `v` and machine limit `L`:
//! the **accept** child adds `v <= L`; the **refuse** child adds `L < v`, applies the first
//! remaining strategy that can lower that counter (removing it from those left) and evaluates
//! every counter again on the new code. For the register counters a strategy counts as
//! applicable only when the register estimate of its code is lower. A refuse child with no
//! applicable strategy is an *infeasible* leaf: no kernel exists there, and dispatch reports why. Children whose system
//! Z3 proves inconsistent are dropped; an `unknown` answer keeps the child and marks it.
//! After the resource counters come the performance counters (coalescing, bank conflicts),
//! forked access by access on `perf::fork`'s conditions: a `case` edge where an access's closed
//! form applies, an `outside` edge where it does not (no fork there), then accept and refuse.
//! A performance refusal applies the first strategy left that raises the counter (padding,
//! interchange) and evaluates every counter again; with none the code stays, since a kernel
//! that falls short of a performance threshold still runs.
//! Each refusal consumes a strategy and each acceptance a counter, so the height is at most
//! (counters) x (strategies + 1): the paper's w(s + t) bound, where each access's condition
//! counts as a counter with its cases ([`Tree::height_bound`]).

use crate::counters::count;
use crate::frontend::model::{FactKind, KernelFunction};
use crate::kernel::Kernel;
use crate::perf::fork::{Condition, Kind as PerfKind};
use crate::strategy::{base_context, caching::stage, cse::eliminate, granularity::reduce_granularity, merge::{extent_lower_bound, merge, FACTOR as MERGE_FACTOR}, narrow, prefetch::prefetch, unroll::unroll};
use constraints::solver::{Backend, CheckResult, Implication, Model};
use constraints::{Constraint, Domain, Poly, System, Var};
use std::collections::{BTreeSet, HashMap};

/// The machine's limits, as symbols whose names avoid the program's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineSymbols {
    /// Registers available per thread.
    pub registers_per_thread: String,
    /// Shared memory per block, in bytes.
    pub shared_per_block: String,
    /// Threads per block.
    pub threads_per_block: String,
    /// The register file available to one block.
    pub registers_per_block: String,
    /// The register file of one multiprocessor (32-bit registers).
    pub registers_per_multiprocessor: String,
    /// The most warps resident on one multiprocessor.
    pub warps_per_multiprocessor: String,
    /// The device's multiprocessors.
    pub multiprocessors: String,
}

impl MachineSymbols {
    /// `R`, `Z_B`, `T_B`, `R_B`, `R_SM`, `W_SM`, `N_SM`; a name the program already uses gets `_dev` appended (again,
    /// until it is free), so the paper's Jacobi keeps its time-step parameter `T`.
    pub fn avoiding(taken: &BTreeSet<String>) -> MachineSymbols {
        let free = |base: &str| {
            let mut n = base.to_string();
            while taken.contains(&n) {
                n.push_str("_dev");
            }
            n
        };
        MachineSymbols {
            registers_per_thread: free("R"),
            shared_per_block: free("Z_B"),
            threads_per_block: free("T_B"),
            registers_per_block: free("R_B"),
            registers_per_multiprocessor: free("R_SM"),
            warps_per_multiprocessor: free("W_SM"),
            multiprocessors: free("N_SM"),
        }
    }

    /// In the order the dispatcher's tables and `metafork_device` list them.
    pub fn all(&self) -> [&str; 7] {
        [&self.registers_per_thread, &self.shared_per_block, &self.threads_per_block, &self.registers_per_block, &self.registers_per_multiprocessor, &self.warps_per_multiprocessor, &self.multiprocessors]
    }
}

/// The counters, in the order the tree evaluates them: the resource counters (a refusal with
/// no strategy leaves no kernel), then the performance counters (a refusal with no strategy
/// keeps the code: it runs, only slower).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    SharedMemory,
    Registers,
    ThreadsPerBlock,
    RegistersPerBlock,
    /// Global-memory coalescing, access by access (`perf::fork`).
    Coalescing,
    /// Shared-memory bank conflicts, access by access (`perf::fork`).
    BankConflicts,
    /// Not evaluated like the others: the label of the fork, once every counter is settled, on
    /// the trip-count condition of the loop the tree unrolls (`t % 4 == 0`: a `case` edge to the unrolled code, an `outside`
    /// edge to the code as it was).
    TripCount,
    /// Not evaluated like the others either: the label of the fork, below a `case` of the trip
    /// count or before merging, on whether the new code's registers leave occupancy as it was
    /// ([`occupancy_allows`]).
    Occupancy,
    /// The label of the fork, on a final code that iteration merging applies to, on whether
    /// the merged grid still fills the device ([`Builder::grid_fills_device`]).
    GridFill,
}

impl Counter {
    pub const ALL: [Counter; 6] = [Counter::SharedMemory, Counter::Registers, Counter::ThreadsPerBlock, Counter::RegistersPerBlock, Counter::Coalescing, Counter::BankConflicts];

    pub fn name(self) -> &'static str {
        match self {
            Counter::SharedMemory => "shared memory per block (bytes)",
            Counter::Registers => "registers per thread",
            Counter::ThreadsPerBlock => "threads per block",
            Counter::RegistersPerBlock => "registers per block",
            Counter::Coalescing => "coalescing (more than half of the bytes moved used)",
            Counter::BankConflicts => "bank conflicts (conflict-free shared access)",
            Counter::TripCount => "trip count of the loop unrolled by 4",
            Counter::Occupancy => "occupancy (registers do not limit the resident warps)",
            Counter::GridFill => "grid fill (the merged grid still fills every multiprocessor's warp slots)",
        }
    }

    /// The performance counter's kind in `perf::fork`, or `None` for a resource counter.
    pub fn performance(self) -> Option<PerfKind> {
        match self {
            Counter::Coalescing => Some(PerfKind::Coalescing),
            Counter::BankConflicts => Some(PerfKind::BankConflicts),
            _ => None,
        }
    }
}

/// The paper's optimization strategies, in the order the tree tries them for a refused counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Register pressure, level 1 (IR level): no loop is unrolled.
    ReduceRegisterPressure1,
    ReduceGranularity,
    /// Back off common sub-expression elimination by a level (its locals live longer), taken
    /// only when the register count drops.
    ReduceCse,
    /// Register pressure, level 2: the index arithmetic of shared-memory staging in 32 bits
    /// (applies to code with tiles).
    ReduceRegisterPressure2,
    /// Register pressure, level 3: cap the registers at the occupancy-free budget and let
    /// ptxas spill the rest to local memory.
    ReduceRegisterPressure3,
    /// Give up caching in shared memory: the arrays of `cache(...)` are read from global memory.
    DropCaching,
    /// Caching in shared memory, applied at the root to the arrays the schedule names in
    /// `cache(...)` (the source's hint); refusing its shared memory leads to `DropCaching`.
    CacheInSharedMemory,
    /// Common sub-expression elimination at [`CSE_LEVEL`], applied at the root when it
    /// changes the code; refusing registers may lead to `ReduceCse`.
    EliminateCommonSubexpressions,
    /// Pad each shared tile's rows by one element (bank conflicts; `Kernel::pad_shared`).
    PadSharedRows,
    /// Trade the block loops on `threadIdx.x` and `threadIdx.y` (coalescing).
    Interchange,
    /// Hold a global element that a serial loop reuses in a register (`strategy::prefetch`),
    /// applied at the root when it applies.
    Prefetch,
    /// Unroll the innermost serial loop by 4 (`strategy::unroll`), applied once every counter
    /// is settled, on the side of its trip-count condition.
    Unroll,
    /// Merge two grid-`x` iterations into one block (`strategy::merge`), applied last, where
    /// the merged grid still fills the device and occupancy allows.
    Merge,
}

/// The CSE level the root applies (the highest of `strategy::cse`).
pub const CSE_LEVEL: u8 = 2;

/// Register pressure level 3's cap: the registers per thread that cost no occupancy on
/// sm_80/sm_90 (65536 / 2048).
pub const REGISTER_CAP: u32 = llvm_passes::registers::OCCUPANCY_FREE_REGISTERS_SM90;

impl Strategy {
    /// The strategies a refusal may apply, in the order tried: cheapest in performance first.
    pub const ALL: [Strategy; 8] = [
        Strategy::ReduceRegisterPressure1,
        Strategy::ReduceGranularity,
        Strategy::ReduceCse,
        Strategy::ReduceRegisterPressure2,
        Strategy::ReduceRegisterPressure3,
        Strategy::DropCaching,
        Strategy::PadSharedRows,
        Strategy::Interchange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::ReduceRegisterPressure1 => "reduce register pressure (level 1: no unrolling)",
            Strategy::ReduceGranularity => "reduce thread granularity",
            Strategy::ReduceCse => "reduce common sub-expression elimination by a level",
            Strategy::ReduceRegisterPressure2 => "reduce register pressure (level 2: 32-bit tile index arithmetic)",
            Strategy::ReduceRegisterPressure3 => "reduce register pressure (level 3: cap registers, spill the rest)",
            Strategy::DropCaching => "do not cache in shared memory",
            Strategy::CacheInSharedMemory => "cache in shared memory",
            Strategy::EliminateCommonSubexpressions => "common sub-expression elimination",
            Strategy::PadSharedRows => "pad shared tiles' rows by one element",
            Strategy::Interchange => "interchange the loops on threadIdx.x and threadIdx.y",
            Strategy::Prefetch => "prefetch reused global elements into registers",
            Strategy::Unroll => "unroll the innermost serial loop by 4",
            Strategy::Merge => "merge two grid-x iterations per block",
        }
    }

    /// The counters this strategy can improve (lower a resource, raise a performance counter).
    pub fn lowers(self, c: Counter) -> bool {
        let registers = matches!(c, Counter::Registers | Counter::RegistersPerBlock);
        match self {
            Strategy::ReduceRegisterPressure1 | Strategy::ReduceCse | Strategy::ReduceRegisterPressure2 | Strategy::ReduceRegisterPressure3 => registers,
            Strategy::ReduceGranularity => registers || c == Counter::SharedMemory,
            Strategy::DropCaching => c == Counter::SharedMemory,
            Strategy::PadSharedRows => c == Counter::BankConflicts,
            Strategy::Interchange => c == Counter::Coalescing,
            Strategy::CacheInSharedMemory | Strategy::EliminateCommonSubexpressions | Strategy::Prefetch | Strategy::Unroll | Strategy::Merge => false,
        }
    }
}

/// Register pressure, level 1: the same code with unrolling disabled (by LLVM, nvcc and ptxas;
/// the tool's own unrolling by 4 is cleared too, though the tree applies no strategy after it),
/// when it has a loop.
fn no_unroll(kernel: &Kernel) -> Option<Kernel> {
    (!kernel.no_unroll && kernel.body.iter().any(crate::strategy::walk::contains_loop)).then(|| Kernel { no_unroll: true, unroll: None, ..kernel.clone() })
}

/// The counters' values for one code, as polynomials.
#[derive(Clone, Debug)]
pub struct CounterValues {
    pub registers: u32,
    pub shared_bytes: Poly,
    pub threads_per_block: Poly,
}

impl CounterValues {
    pub fn value(&self, c: Counter) -> Poly {
        match c {
            Counter::SharedMemory => self.shared_bytes.clone(),
            Counter::Registers => Poly::int(self.registers as i64),
            Counter::ThreadsPerBlock => self.threads_per_block.clone(),
            Counter::RegistersPerBlock => Poly::int(self.registers as i64) * &self.threads_per_block,
            Counter::Coalescing | Counter::BankConflicts | Counter::TripCount | Counter::Occupancy | Counter::GridFill => unreachable!("performance counters fork access by access; the trip count and occupancy are conditions"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Edge {
    /// `accept` or `refuse`; for a performance counter also `case` and `outside`: where the
    /// access's closed form applies (then accept or refuse follows), or not (no fork).
    pub kind: &'static str,
    pub counter: Counter,
    pub constraint: Constraint,
    pub child: usize,
}

#[derive(Clone, Debug)]
pub enum NodeKind {
    Inner,
    /// A kernel for this region of the parameter space.
    Leaf,
    /// No kernel: the counter was refused and no strategy could lower it.
    Infeasible { counter: Counter },
}

#[derive(Clone, Debug)]
pub struct Node {
    pub id: usize,
    /// The logical code: what strategies transform (its `cache` list still a request).
    pub code: Kernel,
    /// The code that runs, counted and emitted: `code` with its arrays staged in shared memory.
    pub staged: Kernel,
    /// The arrays `staged` caches in shared memory.
    pub cached: Vec<String>,
    pub applied: Vec<Strategy>,
    pub strategies_left: Vec<Strategy>,
    pub counters_left: Vec<Counter>,
    /// How many conditions (accesses) of the first counter left are settled: performance
    /// counters fork access by access.
    pub perf_done: usize,
    pub constraints: System,
    /// Human-readable decisions from the root: `accept registers per thread: 18 <= R`, ...
    pub decisions: Vec<String>,
    pub counters: CounterValues,
    pub kind: NodeKind,
    pub children: Vec<Edge>,
    pub depth: usize,
    /// Some query on the way here came back unknown (the child was kept).
    pub unknown: bool,
    /// A solution of `constraints`, when one is known: a child's system is checked against
    /// its parent's solution first, so one of every accept/refuse pair needs no solver query.
    pub witness: Option<Model>,
}

/// The tree of one schedule.
#[derive(Clone, Debug)]
pub struct Tree {
    pub schedule: String,
    pub machine: MachineSymbols,
    pub root_constraints: System,
    pub nodes: Vec<Node>,
    pub queries: u64,
    /// The most levels the performance conditions of one code add: per access not settled by
    /// its constant strides, one for the counter and one per case of its closed form.
    pub perf_levels: usize,
}

impl Node {
    /// The part of this node's system that its code's correctness can depend on: without the
    /// constraints that read the per-multiprocessor symbols (`R_SM`, `W_SM`, `N_SM`), which
    /// only the occupancy and grid-fill gates of unrolling and merging add. Those gates decide
    /// where a code is fast, not where it is right (unrolling's own condition is the trip
    /// count; merging needs none), and the grid-fill gate's region has no small parameter
    /// point to run the code at.
    pub fn correctness_constraints(&self, machine: &MachineSymbols) -> System {
        let performance = [&machine.registers_per_multiprocessor, &machine.warps_per_multiprocessor, &machine.multiprocessors].map(|m| Var::new(m));
        let drop = self.constraints.constraints().iter().enumerate().filter(|(_, c)| c.poly().vars().iter().any(|v| performance.contains(v))).map(|(i, _)| i).collect();
        self.constraints.without(&drop)
    }
}

impl Tree {
    pub fn leaves(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| !matches!(n.kind, NodeKind::Inner))
    }

    /// The schedule's name (the kernel name of its unoptimised form).
    pub fn schedule_name(&self) -> &str {
        &self.schedule
    }

    pub fn height(&self) -> usize {
        self.nodes.iter().map(|n| n.depth).max().unwrap_or(0)
    }

    /// The paper's bound w(s + t) on the height: between two strategies every resource counter
    /// takes one level and the performance counters at most [`Tree::perf_levels`], and each
    /// strategy is applied at most once on a path.
    pub fn height_bound(&self) -> usize {
        // Then, once per path, the fork on the trip count of the loop it unrolls and the three
        // gates on the unrolled code (its two register counters, occupancy), and the four gates
        // of merging (grid fill, two register counters, occupancy).
        (Counter::ALL.iter().filter(|c| c.performance().is_none()).count() + self.perf_levels) * (Strategy::ALL.len() + 1) + 4 + 4
    }
}

struct Builder<'a> {
    function: &'a KernelFunction,
    backend: &'a Backend,
    machine: MachineSymbols,
    nodes: Vec<Node>,
    cache: HashMap<String, Evaluated>,
    /// Staged forms by logical code (without its unrolling flag).
    staged: HashMap<String, crate::strategy::caching::Staged>,
    /// Strategy results by (strategy, code): the same code is refused on several branches.
    applied: HashMap<(Strategy, String), Option<Kernel>>,
    /// Granularity-reduced code by the code without unrolling flag and cached arrays.
    reduced: HashMap<String, Option<Kernel>>,
    /// The root system: the context in which accesses are modelled for the performance counters.
    root: System,
    /// Performance conditions by (code that runs, counter).
    conditions: HashMap<(String, PerfKind), Vec<Condition>>,
    /// The most levels one code's performance conditions can add (see [`Tree::height_bound`]).
    perf_levels: usize,
}

/// Every symbol of the program: parameters, derived scalars, loop counters are not symbols.
fn program_symbols(function: &KernelFunction) -> BTreeSet<String> {
    function.params.iter().map(|p| p.name.clone()).chain(function.derived.iter().map(|d| d.name.clone())).collect()
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

fn add_machine_symbol(s: &mut System, m: &str) {
    s.set_domain(Var::new(m), Domain::integer());
    s.add(Constraint::ge(&Poly::var(m), &Poly::one()));
}

/// A logical code's staged form and its counters.
#[derive(Clone, Debug)]
struct Evaluated {
    staged: Kernel,
    cached: Vec<String>,
    counters: CounterValues,
}

/// Registers a warp is allocated with `registers` per thread: 32 threads' worth, in units of
/// 256 (every compute capability from 3.0 on; the occupancy calculator's allocation rule, as
/// in `perf::occupancy`).
pub fn warp_allocation(registers: u32) -> i64 {
    (u64::from(registers.max(1)) * 32).div_ceil(256) as i64 * 256
}

/// Registers do not limit the warps resident on a multiprocessor: `warp_allocation(r) * W_SM
/// <= R_SM`. Then the blocks the register file admits, `floor(R_SM / (alloc * w))` for `w` warps
/// per block, are at least the `floor(W_SM / w)` the warp limit admits, so the code's occupancy is
/// what it would be with fewer registers (the per-block register limit is the `R_B` counter's).
pub fn occupancy_allows(machine: &MachineSymbols, registers: u32) -> Constraint {
    Constraint::le(&(&Poly::int(warp_allocation(registers)) * &Poly::var(&machine.warps_per_multiprocessor)), &Poly::var(&machine.registers_per_multiprocessor))
}

/// The code as granularity reduction sees it: no cached arrays, none of the flags applied
/// after staging.
fn plain_code(code: &Kernel) -> Kernel {
    Kernel { cache: Vec::new(), ..unstaged_flags_cleared(code) }
}

/// The code as staging sees it: the flags that act on the staged code (unrolling, 32-bit
/// indices, the register cap, CSE, the unrolling by 4, merging) cleared.
fn unstaged_flags_cleared(code: &Kernel) -> Kernel {
    Kernel { no_unroll: false, narrow_index: false, max_registers: None, cse: 0, unroll: None, merged: false, ..code.clone() }
}

/// The decision tree of one schedule. It is built in a Z3 context of its own (with a back end
/// of its own, whose query count is added to `backend`'s), so that a tree never depends on
/// what an earlier build on this thread left in the thread's context: repeated in-process
/// builds (benchmarks, tests, `tune`) answer as a fresh `gen` does.
pub fn build(function: &KernelFunction, kernel: Kernel, backend: &Backend) -> Result<Tree, String> {
    let timeout_ms = backend.timeout_ms();
    let (tree, queries) = constraints::solver::in_fresh_context(move || {
        let own = Backend::new(timeout_ms);
        let tree = build_in_context(function, kernel, &own);
        (tree, own.queries())
    });
    backend.add_queries(queries);
    tree
}

fn build_in_context(function: &KernelFunction, kernel: Kernel, backend: &Backend) -> Result<Tree, String> {
    let machine = MachineSymbols::avoiding(&program_symbols(function));
    let schedule_name = kernel.name.clone();
    let mut root = root_constraints(function, &machine);
    // Where the program's arithmetic is defined (a divisor is not zero) joins the root unless
    // the facts already imply it: a disequality is a disjunction for Z3.
    for f in function.facts.iter().filter(|f| f.kind == FactKind::Defined) {
        if let Some(c) = &f.constraint {
            if !matches!(backend.implies(&root, c), Implication::Proved) {
                root.add(c.clone());
            }
        }
    }
    let before = backend.queries();
    let mut b = Builder { function, backend, machine: machine.clone(), nodes: Vec::new(), cache: HashMap::new(), staged: HashMap::new(), applied: HashMap::new(), reduced: HashMap::new(), root: root.clone(), conditions: HashMap::new(), perf_levels: 0 };
    // Everything runs on this thread, in one order: Z3 contexts working on other threads at
    // the same time change this one's models (and so the number of queries the tree reports)
    // from run to run; a speculative granularity reduction on a second thread made `gen`'s
    // output differ between runs, and was measured no faster (bench/RESULTS.md).
    let ev = b.evaluate(&kernel)?;
    let mut applied = Vec::new();
    let mut decisions = Vec::new();
    if !ev.cached.is_empty() {
        applied.push(Strategy::CacheInSharedMemory);
        decisions.push(format!("apply {}: {}", Strategy::CacheInSharedMemory.name(), ev.cached.join(", ")));
    }
    // CSE at the root, kept when it changes the code that runs.
    let with_cse = Kernel { cse: CSE_LEVEL, ..kernel.clone() };
    let ev_cse = b.evaluate(&with_cse)?;
    let (kernel, ev) = if ev_cse.staged.body != ev.staged.body {
        applied.push(Strategy::EliminateCommonSubexpressions);
        decisions.push(format!("apply {} (level {CSE_LEVEL})", Strategy::EliminateCommonSubexpressions.name()));
        (with_cse, ev_cse)
    } else {
        (kernel, ev)
    };
    // Prefetching at the root, kept when it changes the code that runs.
    let (kernel, ev) = match prefetch(function, &kernel, backend) {
        Some(p) => {
            let ev_p = b.evaluate(&p)?;
            if ev_p.staged.body != ev.staged.body {
                applied.push(Strategy::Prefetch);
                decisions.push(format!("apply {}", Strategy::Prefetch.name()));
                (p, ev_p)
            } else {
                (kernel, ev)
            }
        }
        None => (kernel, ev),
    };
    b.nodes.push(Node {
        id: 0,
        code: kernel,
        staged: ev.staged,
        cached: ev.cached,
        applied,
        strategies_left: Strategy::ALL.to_vec(),
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
    Ok(Tree { schedule: schedule_name, machine, root_constraints: root, nodes: b.nodes, queries: backend.queries() - before, perf_levels: b.perf_levels })
}

impl Builder<'_> {
    /// A path whose counters are all settled: where its code's innermost serial loop can be
    /// unrolled (once per path), a `case` child on the trip-count condition and an `outside`
    /// child, the kernel as it is (no fork where the system decides the condition). On the
    /// `case` side the unrolled code is taken where it fits and occupancy allows
    /// ([`Builder::unroll_where_allowed`]). Every code that comes out is final
    /// ([`Builder::finish`]).
    fn settle(&mut self, id: usize) -> Result<(), String> {
        let node = self.nodes[id].clone();
        let unrolled = match node.applied.contains(&Strategy::Unroll) {
            true => None,
            false => unroll(self.function, &node.staged),
        };
        let Some(u) = unrolled.filter(|u| self.implied(&node, &u.trip_count.negate()).is_err()) else {
            return self.finish(id);
        };
        let code = Kernel { unroll: Some(u.trip_count.clone()), ..node.code.clone() };
        let ev = self.evaluate(&code)?;
        if self.implied(&node, &u.trip_count).is_ok() {
            return self.unroll_where_allowed(id, code, ev);
        }
        let counter = Counter::TripCount;
        let outside = u.trip_count.negate();
        if let Some(case) = self.branch(&node, &u.trip_count, format!("case {} (`{}`): {}", counter.name(), u.counter, u.trip_count)) {
            let c = self.child(id, ("case", counter, u.trip_count.clone()), case);
            self.unroll_where_allowed(c, code, ev)?;
        }
        if let Some(out) = self.branch(&node, &outside, format!("outside {} (`{}`): {outside}", counter.name(), u.counter)) {
            let c = self.child(id, ("outside", counter, outside), out);
            self.finish(c)?;
        }
        Ok(())
    }

    /// Node `id`, whose region meets the trip-count condition, takes the unrolled `code` where
    /// it fits and occupancy allows ([`Builder::register_gates`], [`Builder::take_where_allowed`]).
    /// Unrolling changes neither the block, nor shared memory, nor any access's lane strides (a
    /// copy's counter is the original's plus a constant), so the other counters stand.
    fn unroll_where_allowed(&mut self, id: usize, code: Kernel, ev: Evaluated) -> Result<(), String> {
        let gates = self.register_gates(self.nodes[id].counters.registers, &ev);
        self.take_where_allowed(id, Strategy::Unroll, code, ev, &gates)
    }

    /// Node `id`'s code is final but for iteration merging: where merging applies (a code
    /// without barriers, whose grid extent has a polynomial lower bound with divisors the
    /// region keeps positive), the merged code is taken where the merged grid still fills the
    /// device ([`Builder::grid_fills_device`]) and the merged code fits and occupancy allows;
    /// elsewhere (and on every `refuse`) node `id` is a leaf with its code. Merging changes
    /// neither the block, nor shared memory, nor any access's lane strides.
    fn finish(&mut self, id: usize) -> Result<(), String> {
        self.nodes[id].kind = NodeKind::Leaf;
        let node = self.nodes[id].clone();
        if node.code.merged || merge(&node.staged).is_none() {
            return Ok(());
        }
        let Some(fill) = self.grid_fills_device(&node) else {
            return Ok(());
        };
        let code = Kernel { merged: true, ..node.code.clone() };
        let ev = self.evaluate(&code)?;
        let mut gates = vec![(Counter::GridFill, fill)];
        gates.extend(self.register_gates(node.counters.registers, &ev));
        self.take_where_allowed(id, Strategy::Merge, code, ev, &gates)
    }

    /// The conditions under which a new code with `ev`'s registers replaces one with
    /// `registers`: it fits the register limits (`r' <= R`, `r' * T <= R_B`) and, when it
    /// raises the register allocation per warp, occupancy allows ([`occupancy_allows`]).
    fn register_gates(&self, registers: u32, ev: &Evaluated) -> Vec<(Counter, Constraint)> {
        let new = ev.counters.registers;
        let mut gates = vec![Counter::Registers, Counter::RegistersPerBlock].into_iter().map(|c| (c, Constraint::le(&ev.counters.value(c), &self.limit(c)))).collect::<Vec<_>>();
        if warp_allocation(new) > warp_allocation(registers) {
            gates.push((Counter::Occupancy, occupancy_allows(&self.machine, new)));
        }
        gates
    }

    /// The merged grid still fills every multiprocessor's warp slots: with `G` the grid's `x`
    /// extent and `T` the threads per block, `(G / F) * T >= 32 * W_SM * N_SM` for merging
    /// factor `F`, made polynomial through the extent's lower bound `n / d`
    /// ([`extent_lower_bound`]): `n * T >= F * 32 * W_SM * N_SM * d`, which implies it. `None`
    /// where the extent has no such bound or the region does not keep its divisors positive.
    fn grid_fills_device(&self, node: &Node) -> Option<Constraint> {
        let bound = extent_lower_bound(node.staged.grid.first()?, self.function)?;
        if !bound.requires.iter().all(|c| self.holds_throughout(node, c)) {
            return None;
        }
        let slots = Poly::int(MERGE_FACTOR * 32) * &Poly::var(&self.machine.warps_per_multiprocessor) * &Poly::var(&self.machine.multiprocessors);
        let excess = &(&bound.num * &node.counters.threads_per_block) - &(&slots * &bound.den);
        // Divided by the positive variables common to every term (`B1 * s`, say): the same
        // condition, of lower degree, which Z3's integer search decides much faster.
        let positive: Vec<(Var, u32)> = excess.common_monomial().factors().iter().filter(|(v, _)| self.holds_throughout(node, &Constraint::ge(&Poly::from_var(v.clone()), &Poly::one()))).cloned().collect();
        let common = positive.into_iter().fold(Poly::one(), |m, (v, e)| &m * &Poly::from_var(v).pow(e));
        Some(Constraint::ge(&excess.divide_exact(&common)?, &Poly::zero()))
    }

    /// The forks of node `at` on `gates`, one per gate the region does not decide, before
    /// strategy `s` makes `code` (evaluated as `ev`) of its code: each `accept` child goes on,
    /// each `refuse` child keeps the code as it is, so the strategy never costs a kernel. The
    /// `accept` subtree is built before its `refuse` sibling, so that the dispatcher, which
    /// takes the first leaf in node order that holds, tries the new code first. Every code
    /// that comes out is final ([`Builder::finish`]).
    fn take_where_allowed(&mut self, at: usize, s: Strategy, code: Kernel, ev: Evaluated, gates: &[(Counter, Constraint)]) -> Result<(), String> {
        let Some(((counter, allows), rest)) = gates.split_first() else {
            let n = &mut self.nodes[at];
            take(n, s, code, ev);
            n.counters_left.clear();
            return self.finish(at);
        };
        let mut node = self.nodes[at].clone();
        let reads: &[&String] = match counter {
            Counter::Occupancy => &[&self.machine.registers_per_multiprocessor, &self.machine.warps_per_multiprocessor],
            Counter::GridFill => &[&self.machine.warps_per_multiprocessor, &self.machine.multiprocessors],
            _ => &[],
        };
        for m in reads {
            if !node.constraints.vars().contains(&Var::new(m)) {
                add_machine_symbol(&mut node.constraints, m);
                // The parent's model, extended to the new symbol (at its least value), still
                // solves the system: the branches below start from it.
                if let Some(w) = node.witness.as_mut() {
                    w.values.insert(Var::new(m), constraints::Rational::from_integer(1.into()));
                }
            }
        }
        let what = match s {
            Strategy::Merge => "merged code".to_string(),
            _ => "code unrolled by 4".to_string(),
        };
        let registers = ev.counters.registers;
        let refuse = allows.negate();
        let accepted = self.branch(&node, allows, format!("accept {} of the {what} ({registers} registers): {allows}", counter.name()));
        let refused = self.branch(&node, &refuse, format!("refuse {} of the {what} ({registers} registers): {refuse}; not applied", counter.name()));
        match (accepted, refused) {
            (Some(_), None) => self.take_where_allowed(at, s, code, ev, rest),
            (None, _) => self.keep(at, s),
            (Some(accepted), Some(refused)) => {
                let next = self.child(at, ("accept", *counter, allows.clone()), accepted);
                self.take_where_allowed(next, s, code, ev, rest)?;
                let other = self.child(at, ("refuse", *counter, refuse), refused);
                self.keep(other, s)
            }
        }
    }

    /// Node `id` keeps its code where strategy `s` was not allowed: final, or a leaf when `s`
    /// was the last one tried (merging).
    fn keep(&mut self, id: usize, s: Strategy) -> Result<(), String> {
        match s {
            Strategy::Merge => {
                self.nodes[id].kind = NodeKind::Leaf;
                Ok(())
            }
            _ => self.finish(id),
        }
    }

    fn evaluate(&mut self, kernel: &Kernel) -> Result<Evaluated, String> {
        let key = format!("{kernel:?}");
        if let Some(v) = self.cache.get(&key) {
            return Ok(v.clone());
        }
        // Staging does not depend on the flags that act on the staged code: stage once, then
        // apply them: unrolling and the register cap as flags, 32-bit indices, then CSE.
        let unrolled = unstaged_flags_cleared(kernel);
        let skey = format!("{unrolled:?}");
        let mut staged = match self.staged.get(&skey) {
            Some(s) => s.clone(),
            None => {
                let s = stage(self.function, &unrolled, self.backend)?;
                self.staged.insert(skey, s.clone());
                s
            }
        };
        staged.kernel.no_unroll = kernel.no_unroll;
        staged.kernel.max_registers = kernel.max_registers;
        if kernel.narrow_index {
            staged.kernel = narrow::narrow(&staged.kernel).unwrap_or(staged.kernel);
        }
        staged.kernel = eliminate(&staged.kernel, kernel.cse);
        staged.kernel.cse = kernel.cse;
        if let Some(condition) = &kernel.unroll {
            if let Some(u) = unroll(self.function, &staged.kernel).filter(|u| u.trip_count == *condition) {
                staged.kernel = u.kernel;
            }
            staged.kernel.unroll = kernel.unroll.clone();
        }
        if kernel.merged {
            staged.kernel = merge(&staged.kernel).ok_or("iteration merging does not apply to this code")?;
            staged.kernel.merged = true;
        }
        let c = count(&staged.kernel, &[])?;
        let v = Evaluated {
            staged: staged.kernel,
            cached: staged.cached,
            counters: CounterValues { registers: c.registers.registers, shared_bytes: c.shared_bytes, threads_per_block: c.threads_per_block },
        };
        self.cache.insert(key, v.clone());
        Ok(v)
    }

    /// Granularity reduction does not look at unrolling or at which arrays are cached: reduce
    /// the code without them once, then give the result the parent's flags.
    fn reduce_granularity(&mut self, code: &Kernel) -> Result<Option<Kernel>, String> {
        let plain = plain_code(code);
        let key = format!("{plain:?}");
        let reduced = match self.reduced.get(&key) {
            Some(r) => r.clone(),
            None => {
                let r = reduce_granularity(self.function, &plain, self.backend)?;
                self.reduced.insert(key, r.clone());
                r
            }
        };
        Ok(reduced.map(|r| Kernel { no_unroll: code.no_unroll, narrow_index: code.narrow_index, max_registers: code.max_registers, cse: code.cse, cache: code.cache.clone(), unroll: code.unroll.clone(), merged: code.merged, ..r }))
    }

    fn limit(&self, c: Counter) -> Poly {
        Poly::var(match c {
            Counter::SharedMemory => &self.machine.shared_per_block,
            Counter::Registers => &self.machine.registers_per_thread,
            Counter::ThreadsPerBlock => &self.machine.threads_per_block,
            Counter::RegistersPerBlock => &self.machine.registers_per_block,
            Counter::Coalescing | Counter::BankConflicts | Counter::TripCount | Counter::Occupancy | Counter::GridFill => unreachable!("performance counters, the trip count and occupancy have no single machine limit"),
        })
    }

    /// Consistency of a child's system given a known solution of its parent's: `None` drops
    /// it; otherwise whether it is unknown, and a solution when one was found.
    fn consistent(&self, s: &System, parent_witness: Option<&Model>) -> Option<(bool, Option<Model>)> {
        match self.backend.check_with_witness(s, parent_witness) {
            CheckResult::Unsat => None,
            CheckResult::Sat(m) => Some((false, Some(m))),
            CheckResult::Unknown(_) => Some((true, None)),
        }
    }

    /// A child of `parent` with `added` in its system and `decision` recorded, or `None` when
    /// Z3 proves that system inconsistent.
    fn branch(&self, parent: &Node, added: &Constraint, decision: String) -> Option<Node> {
        let mut sys = parent.constraints.clone();
        sys.add(added.clone());
        let (unknown, witness) = self.consistent(&sys, parent.witness.as_ref())?;
        let mut node = self.branch_known(parent, added, decision);
        node.witness = witness;
        node.unknown |= unknown;
        Some(node)
    }

    /// As [`Builder::branch`], for a system already known consistent (the caller sets the
    /// witness).
    fn branch_known(&self, parent: &Node, added: &Constraint, decision: String) -> Node {
        let mut sys = parent.constraints.clone();
        sys.add(added.clone());
        let mut node = parent.clone();
        node.witness = None;
        node.children = Vec::new();
        node.constraints = sys;
        node.depth += 1;
        node.decisions.push(decision);
        node
    }

    fn child(&mut self, parent: usize, edge: (&'static str, Counter, Constraint), node: Node) -> usize {
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
    fn apply(&mut self, s: Strategy, node: &Node) -> Result<Option<Kernel>, String> {
        let key = (s, format!("{:?}", node.code));
        if let Some(r) = self.applied.get(&key) {
            return Ok(r.clone());
        }
        let code = &node.code;
        let r = match s {
            Strategy::ReduceRegisterPressure1 => no_unroll(code),
            Strategy::ReduceGranularity => self.reduce_granularity(code)?,
            Strategy::ReduceCse => {
                // The highest lower level that frees registers, if any.
                let mut found = None;
                for level in (0..code.cse).rev() {
                    let lower = Kernel { cse: level, ..code.clone() };
                    if self.evaluate(&lower)?.counters.registers < node.counters.registers {
                        found = Some(lower);
                        break;
                    }
                }
                found
            }
            Strategy::ReduceRegisterPressure2 => (!code.narrow_index && !node.cached.is_empty()).then(|| Kernel { narrow_index: true, ..code.clone() }),
            Strategy::ReduceRegisterPressure3 => {
                (code.max_registers.is_none() && node.counters.registers > REGISTER_CAP).then(|| Kernel { max_registers: Some(REGISTER_CAP), ..code.clone() })
            }
            Strategy::DropCaching => (!node.cached.is_empty()).then(|| Kernel { cache: Vec::new(), ..code.clone() }),
            Strategy::PadSharedRows => (!code.pad_shared && !node.cached.is_empty()).then(|| Kernel { pad_shared: true, ..code.clone() }),
            Strategy::Interchange => crate::strategy::interchange::interchange(code),
            Strategy::CacheInSharedMemory | Strategy::EliminateCommonSubexpressions | Strategy::Prefetch | Strategy::Unroll | Strategy::Merge => None,
        };
        self.applied.insert(key, r.clone());
        Ok(r)
    }

    fn expand(&mut self, id: usize) -> Result<(), String> {
        if constraints::budget::expired() {
            return Err(BUDGET_SPENT.into());
        }
        let Some(&counter) = self.nodes[id].counters_left.first() else {
            return self.settle(id);
        };
        if let Some(kind) = counter.performance() {
            return self.expand_performance(id, counter, kind);
        }
        let value = self.nodes[id].counters.value(counter);
        let limit = self.limit(counter);
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
            self.refuse(id, (counter, &refuse), node, &candidates)?;
        }
        Ok(())
    }

    /// The performance conditions of a code that runs (memoised; both kinds from one set of
    /// patterns).
    fn conditions(&mut self, staged: &Kernel, kind: PerfKind) -> Vec<Condition> {
        // Unrolling and the register cap act in LLVM and ptxas, not on the body's accesses.
        let code = format!("{:?}", Kernel { no_unroll: false, max_registers: None, ..staged.clone() });
        if let Some(c) = self.conditions.get(&(code.clone(), kind)) {
            return c.clone();
        }
        let patterns = crate::perf::pattern::patterns(self.function, staged, &self.root, self.backend);
        let mut levels = 0;
        for k in [PerfKind::Coalescing, PerfKind::BankConflicts] {
            let c = crate::perf::fork::conditions(&patterns, staged, k);
            levels += c.iter().filter(|c| c.accept.truth_if_constant() != Some(true)).map(|c| 1 + c.shape.len()).sum::<usize>();
            self.conditions.insert((code.clone(), k), c);
        }
        self.perf_levels = self.perf_levels.max(levels);
        self.conditions[&(code, kind)].clone()
    }

    /// Whether `node`'s system implies `c` (its negation is inconsistent there; an unknown
    /// answer is not an implication). When it does not, a solution of the system with `c`
    /// false, if known: the node's own witness when it already falsifies `c`.
    /// `c` holds throughout `node`'s region: implied by the root's system (one memoised query
    /// for every node that asks the same) or else by the node's own.
    fn holds_throughout(&self, node: &Node, c: &Constraint) -> bool {
        matches!(self.backend.implies(&self.root, c), constraints::solver::Implication::Proved) || self.implied(node, c).is_ok()
    }

    fn implied(&self, node: &Node, c: &Constraint) -> Result<(), Option<Model>> {
        let mut sys = node.constraints.clone();
        sys.add(c.negate());
        match self.backend.check_with_witness(&sys, node.witness.as_ref()) {
            CheckResult::Unsat => Ok(()),
            CheckResult::Sat(m) => Err(Some(m)),
            CheckResult::Unknown(_) => Err(None),
        }
    }

    /// The performance counter `counter`, access by access from `perf_done`: where an access's
    /// closed form may or may not apply, a `case` child (it applies; the same access next) and
    /// an `outside` child (the next access); where it applies, accept and refuse children as
    /// for a resource counter. Accesses whose condition the system decides fork nothing.
    fn expand_performance(&mut self, id: usize, counter: Counter, kind: PerfKind) -> Result<(), String> {
        let conditions = self.conditions(&self.nodes[id].staged.clone(), kind);
        let parent = self.nodes[id].clone();
        for (i, cond) in conditions.iter().enumerate().skip(parent.perf_done) {
            if cond.accept.truth_if_constant() == Some(true) {
                continue;
            }
            let undecided_shape = cond.shape.iter().find_map(|s| self.implied(&parent, s).err().map(|m| (s, m)));
            if let Some((shape, outside_witness)) = undecided_shape {
                let inside = self.branch(&parent, shape, format!("case {} of `{}`: {shape}", counter.name(), cond.access));
                let Some(inside) = inside else { continue };
                let outside = shape.negate();
                // The implication's counterexample is a solution of the outside child's system.
                let out = match outside_witness {
                    Some(m) => {
                        let mut node = self.branch_known(&parent, &outside, format!("outside {} of `{}`: {outside}", counter.name(), cond.access));
                        node.witness = Some(m);
                        Some(node)
                    }
                    None => self.branch(&parent, &outside, format!("outside {} of `{}`: {outside}", counter.name(), cond.access)),
                };
                let c = self.child(id, ("case", counter, shape.clone()), inside);
                self.expand(c)?;
                if let Some(mut out) = out {
                    out.perf_done = i + 1;
                    let c = self.child(id, ("outside", counter, outside), out);
                    self.expand(c)?;
                }
                return Ok(());
            }
            let refuse = cond.refuse();
            let Some(refused) = self.branch(&parent, &refuse, format!("refuse {} of `{}`: {refuse}", counter.name(), cond.access)) else { continue };
            if let Some(mut accepted) = self.branch(&parent, &cond.accept, format!("accept {} of `{}`: {}", counter.name(), cond.access, cond.accept)) {
                accepted.perf_done = i + 1;
                let c = self.child(id, ("accept", counter, cond.accept.clone()), accepted);
                self.expand(c)?;
            }
            return self.refuse_performance(id, (counter, kind, i), &refuse, refused);
        }
        let node = &mut self.nodes[id];
        node.counters_left.remove(0);
        node.perf_done = 0;
        self.expand(id)
    }

    /// Whether `code` (that runs) settles access `i` of `kind` (accepts it wherever its closed
    /// form applies within `node`'s region), without unsettling an access that `node`'s code
    /// settles: the strategy raises the counter. Accesses are matched by position; one the closed forms do not model in either
    /// code is not compared.
    fn raises(&mut self, node: &Node, code: &Kernel, kind: PerfKind, i: usize) -> bool {
        let before = self.conditions(&node.staged, kind);
        let after = self.conditions(code, kind);
        // Accepted wherever its closed form applies within the node's region.
        let settled = |b: &Self, c: &Condition| {
            if c.accept.truth_if_constant() == Some(true) {
                return true;
            }
            let mut sys = node.constraints.clone();
            c.shape.iter().for_each(|s| sys.add(s.clone()));
            sys.add(c.refuse());
            matches!(b.backend.check_with_witness(&sys, node.witness.as_ref()), CheckResult::Unsat)
        };
        let target = before[i].position;
        let Some(fixed) = after.iter().find(|a| a.position == target && a.array == before[i].array) else { return false };
        if !settled(self, fixed) {
            return false;
        }
        before.iter().filter(|b| b.position != target).all(|b| match after.iter().find(|a| a.position == b.position && a.array == b.array) {
            Some(a) => a == b || !settled(self, b) || settled(self, a),
            None => true,
        })
    }

    /// The refuse child of a performance counter's access `i` (with `node`'s system): the first
    /// strategy left that raises the counter is applied and every counter evaluated again;
    /// with none, the code stays (it runs, only slower) and the next access follows.
    fn refuse_performance(&mut self, parent: usize, (counter, kind, i): (Counter, PerfKind, usize), refuse: &Constraint, node: Node) -> Result<(), String> {
        let mut node = node;
        let candidates: Vec<Strategy> = node.strategies_left.iter().copied().filter(|s| s.lowers(counter)).collect();
        for s in candidates {
            let Some(code) = self.apply(s, &node)? else { continue };
            let ev = self.evaluate(&code)?;
            if !self.raises(&node, &ev.staged, kind, i) {
                continue;
            }
            take(&mut node, s, code, ev);
            let c = self.child(parent, ("refuse", counter, refuse.clone()), node);
            return self.expand(c);
        }
        node.perf_done = i + 1;
        node.decisions.push("no strategy left raises it: the code stays".to_string());
        let c = self.child(parent, ("refuse", counter, refuse.clone()), node);
        self.expand(c)
    }

    /// The refuse child of `parent` (with `node`'s system): the first of `candidates` that
    /// applies is applied and the child expanded; with none, the child is an infeasible leaf.
    fn refuse(&mut self, parent: usize, (counter, refuse): (Counter, &Constraint), node: Node, candidates: &[Strategy]) -> Result<(), String> {
        let mut node = node;
        for &s in candidates {
            let Some(code) = self.apply(s, &node)? else { continue };
            let ev = self.evaluate(&code)?;
            // For a register counter a strategy is taken only when the estimate drops (the
            // block does not change): otherwise its child would refuse the same counter again.
            if matches!(counter, Counter::Registers | Counter::RegistersPerBlock) && ev.counters.registers >= node.counters.registers {
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
fn take(node: &mut Node, s: Strategy, code: Kernel, ev: Evaluated) {
    node.counters = ev.counters;
    node.staged = ev.staged;
    node.cached = ev.cached;
    node.code = code;
    node.applied.push(s);
    node.strategies_left.retain(|x| *x != s);
    node.counters_left = Counter::ALL.to_vec();
    node.perf_done = 0;
    node.decisions.push(format!("apply {}", s.name()));
}

/// A kernel and its variants under the implemented strategies, named by suffix (`""`,
/// `" +nounroll"`, `" +granularity"`, `" +granularity +nounroll"`, each also `" +cache"` when
/// the schedule asks for caching and it applies, then each of those `" +narrow"`), as the code
/// that runs: for benchmarks and tests.
/// The tree of every schedule of a program, with its function; an error names the schedule.
pub fn build_all<'p>(program: &'p crate::frontend::CheckedProgram, backend: &Backend) -> Result<Vec<(&'p KernelFunction, Tree)>, String> {
    let mut trees = Vec::new();
    for k in &program.kernels {
        for s in &k.schedules {
            let kernel = Kernel::from_schedule(k, s).map_err(|e| format!("{}: {e}", s.name))?;
            trees.push((k, build(k, kernel, backend).map_err(|e| format!("{}: {e}", s.name))?));
        }
    }
    Ok(trees)
}

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
