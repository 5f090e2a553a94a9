//! `metafork tune` for one schedule: enumerate program-parameter values, keep those some kernel
//! leaf admits on the device for the given data sizes, score and rank them.
//!
//! Contract: every integer parameter is either fixed (`--size NAME=V`; data parameters must
//! be) or enumerated: from `--range`, from a user's space (`--space`), else block-size
//! parameters (those in the block's extents) take powers of two and multiples of the warp size
//! up to the device's threads per block, and any other program parameter (a granularity) the
//! powers of two 1..32. The program's facts are the space's restrictions (checked as soon as
//! their parameters are bound); the final filter is leaf selection
//! ([`crate::dispatch::Dispatcher::select`]) on the device's limits with the leaves' compiled
//! counts (ptxas's, or the tree's estimates taken as such: `command::real_counts`). A configuration whose launch runs no block at the sizes (a grid extent of 0) is
//! left out and counted ([`Tuned::idle`]): it computes nothing; configurations that differ
//! only in parameters the schedule never reads (another schedule's block size) are listed once
//! ([`Tuned::unread`]); one whose every admitting leaf
//! needs more blocks than the device's grid allows is not admissible, and is counted
//! ([`Tuned::grid_too_large`]); so are those where no kernel leaf fits the device
//! ([`Tuned::no_leaf`]) and those whose selected leaf's block could not be resident on a
//! multiprocessor by the occupancy calculation's allocation rules ([`Tuned::unresident`]:
//! with estimates, `r * B <= R_B` holds where registers allocated per warp in units of 256 do
//! not fit; the device's `cudaFuncGetAttributes` refuses the block). Where the device profile gives
//! its bandwidth and clock, configurations are
//! ranked by the data-movement model's time ([`crate::perf::movement`]: flops, global bytes and
//! shared passes per launch against the device's rates, with occupancy hiding latency), the
//! score being the best time over each one's. Otherwise the score is the occupancy of the selected leaf ([`super::occupancy`]) from its
//! counters at that point, times its memory efficiency there ([`crate::perf::efficiency`]:
//! global bytes used over bytes moved, times shared accesses over shared passes, for the first
//! warp of each access), times its branch efficiency ([`crate::perf::branch_efficiency`]:
//! `1 - d/2` for the mean fraction `d` of the first block's warps that diverge on a
//! thread-dependent condition): a fully occupied kernel that moves eight times the bytes it
//! uses, with no divergence, scores 0.125. Ties keep the enumeration order, so the output is
//! deterministic.

use super::occupancy::{active_blocks, occupancy};
use super::space::Space;
use crate::dispatch::{DeviceLimits, Dispatcher, Outcome, Selection};
use crate::frontend::ast::Expr;
use crate::frontend::model::KernelFunction;
use crate::tree::Tree;
use constraints::device::DeviceProfile;
use constraints::{Rational, Var};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What the user asked for.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Fixed values (`--size`).
    pub sizes: BTreeMap<String, i64>,
    /// Value lists for enumerated parameters (`--range`, or a space's parameters).
    pub values: BTreeMap<String, Vec<i64>>,
    /// Extra restrictions (a space's), as C expressions.
    pub restrictions: Vec<Expr>,
    /// What each kernel leaf really uses once compiled for the device (by kernel name), as the
    /// generated dispatcher reads it at run time; leaves not here count with the estimate.
    pub compiled: BTreeMap<String, crate::dispatch::CompiledLeaf>,
    /// Where `compiled` came from (`ptxas sm_80`), or why it is empty; shown with the table.
    pub registers_from: String,
}

/// One admissible configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Every integer parameter's value, by name.
    pub parameters: BTreeMap<String, i64>,
    pub leaf: String,
    pub registers: u32,
    pub shared_memory_bytes: i64,
    pub threads_per_block: i64,
    pub occupancy: f64,
    /// Global-memory bytes used over bytes moved (first warps), in (0, 1].
    pub coalescing: f64,
    /// Shared accesses over shared-memory passes (1: no bank conflicts), in (0, 1].
    pub bank_efficiency: f64,
    /// `1 - d/2` for the mean fraction `d` of the first block's warps that diverge on a
    /// thread-dependent condition ([`crate::perf::branch_efficiency`]), in [0.5, 1].
    pub branch_efficiency: f64,
    /// The data-movement model's time for one launch ([`crate::perf::movement`]), when the
    /// device profile has the throughput fields.
    pub estimated_seconds: Option<f64>,
    /// The pipe that bounds that time: `compute`, `global`, `shared` or `blocks` (launching them).
    pub bound: Option<String>,
    /// What configurations are ranked by (higher first): the best estimated time over this
    /// configuration's when every configuration has an estimate; otherwise occupancy x
    /// coalescing x bank efficiency x branch efficiency.
    pub score: f64,
    /// Where the schedule's grid truncates a division here (`N / (2 * B1)` with a remainder,
    /// [`super::coverage`]): it runs fewer iterations than elsewhere. Such configurations are
    /// ranked after every other, whatever their score.
    pub leaves_out: Option<String>,
}

/// The outcome of tuning one schedule.
#[derive(Clone, Debug, Serialize)]
pub struct Tuned {
    pub schedule: String,
    pub device: String,
    /// How each parameter was enumerated: `fixed`, `range`, `block size`, `granularity`,
    /// `not read by this schedule`, `space`.
    pub enumeration: BTreeMap<String, String>,
    /// Where the registers come from: `ptxas sm_XX` (the compiled leaves, as the dispatcher
    /// reads them) or `estimate (...why...)`.
    pub registers_from: String,
    pub candidates: u64,
    pub admissible: Vec<Config>,
    /// Admissible configurations left out because their launch runs no block at these sizes
    /// (a grid extent is 0, as `N / (B1*s)` with `B1*s > N`): they compute nothing, and a
    /// time of 0 would rank them first.
    pub idle: usize,
    /// Configurations left out because every leaf admitting them needs more blocks along a
    /// grid dimension than the device allows (the dispatcher refuses them too).
    pub grid_too_large: usize,
    /// Configurations left out because they differ from a listed one only in parameters the
    /// schedule never reads (another schedule's block size).
    pub unread: usize,
    /// Configurations left out because no kernel leaf fits the device there (the dispatcher
    /// refuses them: registers, threads or shared memory per block).
    pub no_leaf: usize,
    /// Configurations left out because the selected leaf's block cannot be resident on a
    /// multiprocessor (occupancy 0: registers allocated per warp in units of 256, or shared
    /// memory with the runtime's reserve, exceed what one holds).
    pub unresident: usize,
    /// Configurations left out because the program is undefined there: the host's arithmetic
    /// overflows, or the dispatcher puts them outside the program (a fact fails, or a scalar or
    /// grid the launch computes is undefined in its C types). Those the program's facts or the
    /// restrictions given rule out are the candidates no other count holds.
    pub outside: usize,
    /// Why no configuration has an estimated time, when the device profile is the reason
    /// ([`crate::perf::movement::unavailable`]): the ranking then falls back to the counters.
    #[serde(skip)]
    pub time_model_off: Option<String>,
}

/// The data-movement model's time for `code` at `point` ([`crate::perf::movement`]), launched
/// as `shape` (grid, block: [`crate::perf::movement::launch_shape`]).
#[allow(clippy::too_many_arguments)]
fn time_estimate(function: &KernelFunction, code: &crate::kernel::Kernel, ways: &std::collections::HashMap<String, f64>, point: &BTreeMap<String, i64>, shape: Option<([i64; 3], [i64; 3])>, device: &DeviceProfile, occupancy: f64, memory: crate::perf::Efficiency, branches: f64) -> Option<crate::perf::movement::Estimate> {
    use crate::perf::movement;
    let (grid, block) = shape?;
    // Each shared access weighs its own bank ways (`ways`, by access text), as often as it runs.
    let work = movement::work_per_thread_with_ways(function, code, point, ways)?;
    let blocks: f64 = grid.iter().map(|g| *g as f64).product();
    let threads = blocks * block.iter().map(|b| *b as f64).product::<f64>();
    let double = code.params.iter().any(|p| matches!(p.kind, crate::kernel::KernelParamKind::Array { elem: crate::frontend::ast::ScalarType::Double, .. }));
    let run = movement::Run { work, threads, blocks, double, occupancy, chains: movement::independent_chains(code), traffic: memory.traffic, banks: 1.0, branch_efficiency: branches };
    movement::estimate(&run, device).filter(|e| e.seconds.is_finite() && e.seconds > 0.0)
}

/// The integer parameters `tree`'s schedule reads: its kernel's (grid, block and body, through
/// the derived scalars they use), and its host loops' bounds.
fn parameters_read(function: &KernelFunction, tree: &Tree) -> BTreeSet<String> {
    // The kernel's parameter list holds every parameter of the function; what it reads is in
    // its body, grid and block.
    let code = &tree.nodes[0].code;
    let mut names = std::collections::HashSet::new();
    code.body.iter().for_each(|s| crate::frontend::ast::identifiers(s, &mut names));
    let mut pending: Vec<String> = names.into_iter().collect();
    code.grid.iter().for_each(|g| g.names(&mut pending));
    pending.extend(code.block.iter().flat_map(|b| b.vars()).map(|v| v.name().to_string()));
    if let Some(s) = function.schedules.iter().find(|s| s.name == tree.schedule_name()) {
        for h in &s.host_loops {
            h.lo.names(&mut pending);
            h.hi.names(&mut pending);
        }
    }
    function.names_read(pending)
}

/// The default values of a block-size parameter: powers of two and warp multiples up to the
/// device's threads per block.
pub fn block_candidates(device: &DeviceProfile) -> Vec<i64> {
    let limit = i64::from(device.threads_per_block);
    let warp = i64::from(device.warp_size);
    let mut v: BTreeSet<i64> = (0..).map(|e| 1i64 << e).take_while(|&x| x <= limit).collect();
    v.extend((1..).map(|k| k * warp).take_while(|&x| x <= limit));
    v.into_iter().collect()
}

/// The default values of any other program parameter (a granularity).
pub const GRANULARITY_CANDIDATES: [i64; 6] = [1, 2, 4, 8, 16, 32];

/// Whether `request` can be tuned for `function`, from the function alone (before any tree is
/// built, so that a mistyped option fails at once): every data size given, every name an
/// integer parameter, every value within its C type, and the sizes not overflowing the
/// program's own arithmetic.
pub fn check_request(function: &KernelFunction, request: &Request) -> Result<(), String> {
    let params: Vec<String> = function.integer_parameters();
    let data: BTreeSet<String> = function.data_parameters().into_iter().collect();
    let missing: Vec<&String> = data.iter().filter(|d| !request.sizes.contains_key(*d)).collect();
    if !missing.is_empty() {
        return Err(format!("give the data size{} with --size: {}", if missing.len() > 1 { "s" } else { "" }, missing.iter().map(|m| format!("{m}=VALUE")).collect::<Vec<_>>().join(" ")));
    }
    for name in request.sizes.keys().chain(request.values.keys()) {
        if !params.contains(name) {
            return Err(format!("`{name}` is not an integer parameter of `{}` (its parameters: {})", function.name, params.join(", ")));
        }
    }
    // A value must fit the parameter's C type: the kernel computes with it in that type.
    for (name, value) in request.sizes.iter().map(|(n, v)| (n, *v)).chain(request.values.iter().flat_map(|(n, vs)| vs.iter().map(move |v| (n, *v)))) {
        let ty = function.params.iter().find(|p| &p.name == name).map_or(crate::frontend::ast::ScalarType::Long, |p| p.ty);
        if ty.integer_range().is_some_and(|(least, most)| value < least || value > most) {
            return Err(format!("`{name}` = {value} does not fit `{ty}`, the type of `{name}` in `{}`", function.name));
        }
    }
    // The sizes alone may already make the program's own arithmetic undefined (`n * n * n` in
    // `int`): nothing measured there would mean anything.
    if let Some(why) = super::overflow::first_overflow(function, &request.sizes) {
        return Err(format!("at {}, {why}: the program is undefined at these sizes", sizes_text(&request.sizes)));
    }
    // A fact that the sizes alone decide, and that fails there, leaves nothing to tune: say
    // which one instead of reporting an empty space. (Facts that cannot be checked at run time
    // are the dispatcher's error, reported when it is built.)
    let facts = crate::dispatch::facts::FactSet::of(function).ok();
    if let Some(fact) = facts.as_ref().and_then(|f| f.first_failing_where_known(&request.sizes)) {
        let kind = match fact.kind {
            crate::frontend::model::FactKind::Assume => "assume",
            crate::frontend::model::FactKind::Assert => "assert",
            crate::frontend::model::FactKind::Defined => "arithmetic",
        };
        return Err(format!("at {}, the program's {kind} `{}` does not hold: no configuration can run there", sizes_text(&request.sizes), fact.text));
    }
    Ok(())
}

/// `n = 64, m = 32`: the sizes as an error message names them.
fn sizes_text(sizes: &BTreeMap<String, i64>) -> String {
    sizes.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ")
}

pub fn tune(function: &KernelFunction, tree: &Tree, device: &DeviceProfile, request: &Request, progress: Option<&mut dyn FnMut(f64)>) -> Result<Tuned, String> {
    let dispatcher = Dispatcher::new(function, tree)?;
    check_request(function, request)?;
    let block_vars: BTreeSet<String> = tree.nodes[0].code.block.iter().flat_map(|p| p.vars()).map(|v| v.name().to_string()).collect();
    let read = parameters_read(function, tree);
    let mut enumeration = BTreeMap::new();
    let mut domains = Vec::new();
    for p in &dispatcher.params {
        let (how, values) = if let Some(v) = request.sizes.get(p) {
            ("fixed", vec![*v])
        } else if let Some(v) = request.values.get(p) {
            ("range", v.clone())
        } else if block_vars.contains(p) {
            ("block size", block_candidates(device))
        } else if !read.contains(p) {
            // Another schedule's parameter (its block size, say): enumerated so that facts
            // relating it to others can hold, then folded into the configurations listed.
            ("not read by this schedule", GRANULARITY_CANDIDATES.to_vec())
        } else {
            ("granularity", GRANULARITY_CANDIDATES.to_vec())
        };
        enumeration.insert(p.clone(), how.to_string());
        domains.push(values);
    }
    let mut restrictions: Vec<Expr> = function.facts.iter().flat_map(|f| f.condition.conjuncts().into_iter().cloned().collect::<Vec<_>>()).collect();
    restrictions.extend(request.restrictions.iter().cloned());
    let definitions: BTreeMap<String, Expr> = function.derived.iter().map(|d| (d.name.clone(), d.value.clone())).collect();
    let space = Space::from_exprs(dispatcher.params.clone(), domains, restrictions, &definitions)?;

    let limits = DeviceLimits::of(device);
    let compiled: Vec<crate::dispatch::CompiledLeaf> = dispatcher.kernels.iter().map(|k| request.compiled.get(k).copied().unwrap_or_default()).collect();
    let mut chosen: Vec<usize> = Vec::new();
    let mut failure = None;
    let mut overflow: Option<String> = None;
    let mut grid_too_large = 0;
    let mut no_leaf = 0;
    let mut outside = 0;
    let mut filter = |row: &[i64]| {
        let point: BTreeMap<String, i64> = dispatcher.params.iter().cloned().zip(row.iter().copied()).collect();
        // A configuration where the program's host arithmetic overflows is no configuration.
        if let Some(why) = super::overflow::first_overflow(function, &point) {
            overflow.get_or_insert_with(|| format!("{why} at {}", point.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ")));
            outside += 1;
            return false;
        }
        match dispatcher.select(&limits, &compiled, &point) {
            Ok(Selection::Leaf(i)) => {
                chosen.push(i);
                true
            }
            Ok(Selection::GridTooLarge(_)) => {
                grid_too_large += 1;
                false
            }
            Ok(Selection::NoLeaf | Selection::NoKernel(_)) => {
                no_leaf += 1;
                false
            }
            Ok(Selection::AssertFails(_) | Selection::OutsideAssumptions(_)) => {
                outside += 1;
                false
            }
            Err(e) => {
                failure.get_or_insert(e);
                false
            }
        }
    };
    let admissible = space.build(Some(&mut filter), progress);
    if let Some(e) = failure {
        return Err(e);
    }
    if let Some(why) = admissible.stopped {
        return Err(why);
    }
    if let Some(note) = admissible.undefined_note() {
        crate::command::warn(&format!("warning: {note}"));
    }
    if admissible.len() == 0 {
        if let Some(why) = overflow {
            return Err(format!("no configuration keeps the program's arithmetic defined at these sizes (first: {why})"));
        }
    }
    // Each leaf's access patterns, once.
    let backend = constraints::solver::Backend::default();
    type LeafModel = (Vec<crate::perf::pattern::Pattern>, Vec<crate::perf::divergence::Branch>, Vec<constraints::Poly>, crate::kernel::Kernel);
    let mut patterns: BTreeMap<String, LeafModel> = BTreeMap::new();
    for node in tree.leaves().filter(|n| matches!(n.kind, crate::tree::NodeKind::Leaf)) {
        let name = crate::emit::tree_files::leaf_kernel_name(tree, node.id);
        patterns.entry(name).or_insert_with(|| {
            let accesses = crate::perf::pattern::patterns(function, &node.staged, &tree.root_constraints, &backend);
            let branches = crate::perf::pattern::branches(function, &node.staged, &tree.root_constraints, &backend);
            (accesses, branches, node.staged.block.clone(), (*node.staged).clone())
        });
    }
    let mut configs = Vec::with_capacity(admissible.len());
    let mut idle = 0;
    let mut unresident = 0;
    // Configurations that differ only in parameters this schedule never reads are one
    // configuration: the first (in enumeration order) stands for them.
    let mut seen_read: BTreeSet<Vec<i64>> = BTreeSet::new();
    let truncations = super::coverage::Truncations::of(function, &tree.nodes[0].code);
    let mut unread = 0;
    for (i, &leaf) in chosen.iter().enumerate() {
        let row = admissible.row(i);
        let key: Vec<i64> = dispatcher.params.iter().zip(row).filter(|(p, _)| read.contains(*p)).map(|(_, v)| *v).collect();
        if !seen_read.insert(key) {
            unread += 1;
            continue;
        }
        let rule = dispatcher.rules.iter().find(|r| matches!(&r.outcome, Outcome::Kernel { index, .. } if *index == leaf)).expect("a selected leaf has a rule");
        let point: BTreeMap<Var, Rational> = dispatcher.params.iter().zip(row).map(|(p, v)| (Var::new(p), Rational::from_integer((*v).into()))).collect();
        let value = |p: &constraints::Poly| p.eval(&point).ok().and_then(|q| i64::try_from(q.to_integer()).ok()).unwrap_or(i64::MAX);
        let (shared, threads) = (value(&rule.shared_bytes), value(&rule.threads_per_block));
        let registers = u32::try_from(compiled[leaf].registers).ok().filter(|r| *r > 0).unwrap_or(rule.registers);
        if active_blocks(device, registers.into(), shared.max(0) as u64, threads.max(0) as u64) == 0 {
            unresident += 1;
            continue;
        }
        let occ = occupancy(device, registers.into(), shared.max(0) as u64, threads.max(0) as u64);
        let named: BTreeMap<String, i64> = dispatcher.params.iter().cloned().zip(row.iter().copied()).collect();
        let model = patterns.get(&dispatcher.kernels[leaf]);
        let shape = model.and_then(|(_, _, _, code)| crate::perf::movement::launch_shape(function, code, &named));
        if shape.is_some_and(|(grid, _)| grid.iter().any(|g| *g <= 0)) {
            idle += 1;
            continue;
        }
        let (memory, branches, estimate) = match model {
            Some((p, b, block, code)) => {
                let dims: Vec<i64> = block.iter().map(&value).collect();
                let block = [0, 1, 2].map(|d| dims.get(d).copied().unwrap_or(1));
                let (memory, ways) = crate::perf::efficiency_and_ways(p, &named, block);
                let branches = crate::perf::branch_efficiency(b, &named, block);
                (memory, branches, time_estimate(function, code, &ways, &named, shape, device, occ, memory, branches))
            }
            None => (crate::perf::Efficiency { coalescing: 1.0, banks: 1.0, traffic: 1.0 }, 1.0, None),
        };
        configs.push(Config {
            parameters: dispatcher.params.iter().cloned().zip(row.iter().copied()).collect(),
            leaf: dispatcher.kernels[leaf].clone(),
            registers,
            shared_memory_bytes: shared,
            threads_per_block: threads,
            occupancy: occ,
            coalescing: memory.coalescing,
            bank_efficiency: memory.banks,
            branch_efficiency: branches,
            estimated_seconds: estimate.map(|e| e.seconds),
            bound: estimate.map(|e| e.bound.to_string()),
            score: occ * memory.coalescing * memory.banks * branches,
            leaves_out: truncations.left_out(function, &tree.nodes[0].code, &named),
        });
    }
    // With a time for every configuration, the score is the best time over this one's.
    if !configs.is_empty() && configs.iter().all(|c| c.estimated_seconds.is_some_and(|s| s > 0.0 && s.is_finite())) {
        let best = configs.iter().filter_map(|c| c.estimated_seconds).fold(f64::INFINITY, f64::min);
        for c in &mut configs {
            c.score = best / c.estimated_seconds.expect("checked above");
        }
    }
    // Those that run every iteration first, then by score.
    configs.sort_by(|a, b| a.leaves_out.is_some().cmp(&b.leaves_out.is_some()).then(b.score.partial_cmp(&a.score).unwrap_or(std::cmp::Ordering::Equal)));
    Ok(Tuned { schedule: dispatcher.schedule.clone(), device: device.name.clone(), registers_from: request.registers_from.clone(), enumeration, candidates: space.cartesian(), admissible: configs, idle, grid_too_large, unread, no_leaf, unresident, outside, time_model_off: crate::perf::movement::unavailable(device) })
}
