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
//!
//! Modules: this one holds the tree's types (machine symbols, counters, strategies, nodes);
//! `build` the builder, the root and the resource-counter forks; `contention` the fork on a
//! reduction's atomic contention (reducing in the block first); `fewer_threads` the refusal of
//! the threads per block (blocking, then coarsening); `performance` the performance-counter forks; `settle` the forks on a settled path (unrolling, merging);
//! `occupancy` the occupancy gate's arithmetic; `derived` puts counters in the parameters only;
//! `collapse` replaces, once the tree is built, each fork that chooses nothing by one of its sides;
//! `same_choice` finds the forks whose sides choose alike at every point without being the same
//! tree.

use crate::counters::count;
use crate::frontend::model::{FactKind, KernelFunction};
use crate::kernel::Kernel;
use crate::perf::fork::{Condition, Kind as PerfKind};
use crate::strategy::{base_context, caching::stage, cse::eliminate, granularity::reduce_granularity, merge::{extent_lower_bound, merge, FACTOR as MERGE_FACTOR}, narrow, prefetch::prefetch, unroll::unroll};
use constraints::solver::{Backend, CheckResult, Implication, Model};
use constraints::{Constraint, Domain, Poly, System, Var};
use std::collections::BTreeSet;

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
    /// Atomic contention: the threads of a block that add to one element of a reduction
    /// (`strategy::block_reduce::contention`); accepted where it is 1.
    AtomicContention,
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
    pub const ALL: [Counter; 7] = [Counter::SharedMemory, Counter::Registers, Counter::ThreadsPerBlock, Counter::RegistersPerBlock, Counter::AtomicContention, Counter::Coalescing, Counter::BankConflicts];

    pub fn name(self) -> &'static str {
        match self {
            Counter::SharedMemory => "shared memory per block (bytes)",
            Counter::Registers => "registers per thread",
            Counter::ThreadsPerBlock => "threads per block",
            Counter::RegistersPerBlock => "registers per block",
            Counter::AtomicContention => "atomic contention (threads of a block adding to one element)",
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
    /// Register pressure, level 3: cap the registers at the occupancy-free budget and let
    /// ptxas spill the rest to local memory.
    ReduceRegisterPressure3,
    /// Give up caching in shared memory: the arrays of `cache(...)` are read from global memory.
    DropCaching,
    /// Store transposed shared tiles' columns without their bank-conflict padding
    /// (`Kernel::unpadded_columns`): less shared memory, the same code otherwise.
    UnpadColumns,
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
    /// Register blocking (`strategy::block`): the granularity loop unrolled and jammed for one
    /// value of its parameter, applied once every counter is settled, on the side of `g == K`.
    RegisterBlock,
    /// Give up block-level reductions: the atomic adds as written, without the shared array of
    /// partial sums (refusing the shared memory or registers of a code that reduces in the
    /// block, so that a region where only the atomic adds fit keeps a kernel).
    DropBlockReduce,
    /// Block-level reductions (`strategy::block_reduce`): a reduction's partial sums added in
    /// the block by a tree in shared memory, then one atomic add per block and element.
    BlockReduce,
    /// Thread coarsening along `y` (`strategy::coarsen`): each thread does the work of
    /// [`crate::strategy::coarsen::factor_for`] the blocking factor threads of a block that
    /// many times shorter, giving register-blocked code 2-D micro-tiles; tried once after register
    /// blocking is taken, on the side of the block's divisibility.
    Coarsen,
}

/// The CSE level the root applies (the highest of `strategy::cse`).
pub const CSE_LEVEL: u8 = 2;

/// Register pressure level 3's cap: the registers per thread that cost no occupancy on
/// sm_80/sm_90 (65536 / 2048).
pub const REGISTER_CAP: u32 = llvm_passes::registers::OCCUPANCY_FREE_REGISTERS_SM90;

impl Strategy {
    /// The strategies a refusal may apply, in the order tried: cheapest in performance first.
    /// (The published level 2, 32-bit index arithmetic of the shared tiles, is no choice here:
    /// every staged code has it, see `strategy::narrow`.)
    pub const ALL: [Strategy; 10] = [
        Strategy::ReduceRegisterPressure1,
        Strategy::ReduceGranularity,
        Strategy::ReduceCse,
        Strategy::ReduceRegisterPressure3,
        Strategy::UnpadColumns,
        Strategy::DropCaching,
        Strategy::DropBlockReduce,
        Strategy::PadSharedRows,
        Strategy::Interchange,
        Strategy::BlockReduce,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::ReduceRegisterPressure1 => "reduce register pressure (level 1: no unrolling)",
            Strategy::ReduceGranularity => "reduce thread granularity",
            Strategy::ReduceCse => "reduce common sub-expression elimination by a level",
            Strategy::ReduceRegisterPressure3 => "reduce register pressure (level 3: cap registers, spill the rest)",
            Strategy::DropCaching => "do not cache in shared memory",
            Strategy::UnpadColumns => "store transposed shared tiles' columns unpadded",
            Strategy::CacheInSharedMemory => "cache in shared memory",
            Strategy::EliminateCommonSubexpressions => "common sub-expression elimination",
            Strategy::PadSharedRows => "pad shared tiles' rows by one element",
            Strategy::Interchange => "interchange the loops on threadIdx.x and threadIdx.y",
            Strategy::Prefetch => "prefetch reused global elements into registers",
            Strategy::Unroll => "unroll the innermost serial loop by 4",
            Strategy::Merge => "merge two grid-x iterations per block",
            Strategy::RegisterBlock => "register blocking (unroll and jam the granularity loop)",
            Strategy::Coarsen => "coarsen threads along y (2-D micro-tiles)",
            Strategy::DropBlockReduce => "do not reduce in the block (atomic adds as written)",
            Strategy::BlockReduce => "reduce in the block first (a tree in shared memory, one atomic add per block)",
        }
    }

    /// The counters this strategy can improve (lower a resource, raise a performance counter).
    pub fn lowers(self, c: Counter) -> bool {
        let registers = matches!(c, Counter::Registers | Counter::RegistersPerBlock);
        match self {
            Strategy::ReduceRegisterPressure1 | Strategy::ReduceCse | Strategy::ReduceRegisterPressure3 => registers,
            Strategy::ReduceGranularity => registers || c == Counter::SharedMemory,
            Strategy::DropCaching | Strategy::UnpadColumns => c == Counter::SharedMemory,
            // The partial sums cost shared memory, and registers (taken only where the
            // estimate drops, as for every register strategy).
            Strategy::DropBlockReduce => registers || c == Counter::SharedMemory,
            Strategy::PadSharedRows => c == Counter::BankConflicts,
            Strategy::Interchange => c == Counter::Coalescing,
            Strategy::BlockReduce => c == Counter::AtomicContention,
            Strategy::CacheInSharedMemory | Strategy::EliminateCommonSubexpressions | Strategy::Prefetch | Strategy::Unroll | Strategy::Merge | Strategy::RegisterBlock | Strategy::Coarsen => false,
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
            Counter::AtomicContention | Counter::Coalescing | Counter::BankConflicts | Counter::TripCount | Counter::Occupancy | Counter::GridFill => unreachable!("performance counters fork access by access; the trip count and occupancy are conditions"),
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
    /// The logical code: what strategies transform (its `cache` list still a request). Shared
    /// with the children that keep it: a fork copies the node, not the code.
    pub code: std::sync::Arc<Kernel>,
    /// The code that runs, counted and emitted: `code` with its arrays staged in shared memory.
    pub staged: std::sync::Arc<Kernel>,
    /// The arrays `staged` caches in shared memory.
    pub cached: Vec<String>,
    pub applied: Vec<Strategy>,
    /// The factor the granularity loop is register-blocked by on this path, where blocking
    /// was tried (it counts once `applied` holds the strategy): coarsening makes the micro-tile
    /// square, `K x K`.
    pub blocked_by: Option<i64>,
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
    /// The arrays `cache(...)` names that no code of the tree stages, with the reason (from
    /// the root's staging: every strategy keeps the arrays it touches).
    pub not_cached: Vec<(String, String)>,
    /// The facts the program's arithmetic implies that its own facts do not (a divisor `G`
    /// under `assume(G >= 0)`): they join the root, so launches outside them are refused,
    /// and `gen` says so where the fact comes from. (condition, why, where in the source.)
    pub implied_facts: Vec<(String, String, crate::frontend::source::Span)>,
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
        // gates on the unrolled code (its two register counters, occupancy), the four gates
        // of merging (grid fill, two register counters, occupancy), and register blocking's
        // forks on the granularity's value and the blocked code's three gates.
        (Counter::ALL.iter().filter(|c| c.performance().is_none()).count() + self.perf_levels) * (Strategy::ALL.len() + 1) + 4 + 4 + crate::strategy::block::BLOCKING_FACTORS.len() + 3
    }
}

mod build;
pub use build::code_at_root;
mod collapse;
mod same_choice;
mod contention;
pub(crate) mod derived;
mod fewer_threads;
mod occupancy;
mod performance;
mod settle;
mod speculate;

use build::{add_machine_symbol, take, Builder, Evaluated};
pub use build::{build, build_all, program_root_constraints, root_constraints, strategy_variants, BUDGET_SPENT};
pub use occupancy::{occupancy_allows, warp_allocation};
