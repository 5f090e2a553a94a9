//! The files `metafork gen` writes for the trees of one source file: `tree.yaml`, `tree.dot`,
//! one `.cu` per kernel leaf, each schedule's dispatch code (`<schedule>_dispatch.h/.cu`), each
//! function's host driver (`metafork_run_<function>.h/.cu`),
//! and the plain-text tree printed on stdout. Everything is built
//! in memory first; the caller writes it (atomically, file by file). Output is deterministic.

use crate::emit::cuda::emit_kernel;
use crate::frontend::model::KernelFunction;
use crate::tree::{NodeKind, Tree};
use serde::Serialize;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Serialize)]
struct TreeFile {
    source: String,
    schedules: Vec<ScheduleOut>,
}

#[derive(Serialize)]
struct ScheduleOut {
    name: String,
    machine_parameters: BTreeMap<String, String>,
    program_parameters: Vec<String>,
    data_parameters: Vec<String>,
    root_constraints: Vec<String>,
    /// The arrays of `cache(...)` no kernel stages, and why.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    not_cached: BTreeMap<String, String>,
    tree: Vec<NodeOut>,
    leaves: Vec<LeafOut>,
    z3_queries: u64,
}

#[derive(Serialize)]
struct NodeOut {
    id: usize,
    kind: String,
    children: Vec<EdgeOut>,
}

#[derive(Serialize)]
struct EdgeOut {
    edge: String,
    counter: String,
    constraint: String,
    node: usize,
}

#[derive(Serialize)]
struct LeafOut {
    id: usize,
    kind: String,
    /// The constraints added on the path from the root (the root's hold too).
    constraints: Vec<String>,
    decisions: Vec<String>,
    strategies: Vec<String>,
    counters: CountersOut,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_name: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    unknown: bool,
    /// What ptxas reports for the leaf's kernel per architecture (`gen --ptxas`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    compiled: BTreeMap<String, CompiledOut>,
}

#[derive(Serialize)]
struct CompiledOut {
    registers: u32,
    static_shared_bytes: u32,
    spill_stores_bytes: u32,
    spill_loads_bytes: u32,
}

#[derive(Serialize)]
struct CountersOut {
    registers: u32,
    shared_memory_bytes: String,
    threads_per_block: String,
}

/// The generated files, by relative path, and the text rendering.
pub struct Generated {
    pub files: BTreeMap<String, String>,
    pub text: String,
}

/// The leaf header's strategies: those the code has, and apart those its path applied and a
/// later refusal undid (tiles cached then dropped), so that the line describes the code rather
/// than read as a contradiction ("cache in shared memory, ..., do not cache in shared memory").
fn strategies_line(applied: &[crate::tree::Strategy]) -> String {
    use crate::tree::Strategy as S;
    let undone_by = |later: S| -> &'static [S] {
        match later {
            // Without tiles, their padding choices mean nothing either.
            S::DropCaching => &[S::CacheInSharedMemory, S::PadSharedRows, S::UnpadColumns],
            S::DropBlockReduce => &[S::BlockReduce],
            _ => &[],
        }
    };
    let mut kept: Vec<S> = Vec::new();
    let mut undone: Vec<S> = Vec::new();
    for &s in applied {
        let cancels = undone_by(s);
        if !cancels.is_empty() {
            undone.extend(kept.iter().copied().filter(|k| cancels.contains(k)));
            kept.retain(|k| !cancels.contains(k));
            continue;
        }
        kept.push(s);
    }
    let names = |v: &[S]| v.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ");
    let mut line = format!("Strategies applied: {}.", if kept.is_empty() { "none".to_string() } else { names(&kept) });
    if !undone.is_empty() {
        let _ = write!(line, " Applied on this path and undone by a later refusal: {}.", names(&undone));
    }
    line
}

fn kind_name(k: &NodeKind) -> String {
    match k {
        NodeKind::Inner => "inner".into(),
        NodeKind::Leaf => "kernel".into(),
        NodeKind::Infeasible { counter } => format!("infeasible ({} cannot be lowered)", counter.name()),
    }
}

/// The kernel name of a leaf.
/// The kernel a kernel leaf runs, named after the first leaf (in node order) with the same
/// code: leaves that differ only in their region (an access accepted in one, refused with no
/// strategy left in another) share one kernel, emitted and compiled once.
pub fn leaf_kernel_name(tree: &Tree, id: usize) -> String {
    let code = &tree.nodes[id].staged;
    let first = tree.leaves().find(|n| matches!(n.kind, NodeKind::Leaf) && n.staged == *code).map_or(id, |n| n.id);
    kernel_named_after(tree, first)
}

/// The name of the kernel whose first leaf (in node order) is `first`.
fn kernel_named_after(tree: &Tree, first: usize) -> String {
    format!("{}_leaf{first}", tree.schedule_name())
}

pub fn generate(source: &str, trees: &[(&KernelFunction, Tree)], emit_cuda: bool) -> Result<Generated, String> {
    generate_with_wisdom(source, trees, emit_cuda, &[], &Compiled::new())
}

/// ptxas's reports per kernel name, then per architecture (`gen --ptxas`).
pub type Compiled = BTreeMap<String, BTreeMap<String, llvm_passes::ptxas::PtxasReport>>;

/// As [`generate`], with a tuning harness's wisdom for the dispatch headers. The dispatch code
/// and the host drivers are written on a second thread while this one writes the kernels,
/// `tree.yaml` and the pictures (they read only the trees; a quarter of syrk's file time).
pub fn generate_with_wisdom(source: &str, trees: &[(&KernelFunction, Tree)], emit_cuda: bool, wisdom: &[crate::emit::dispatch::Wisdom], compiled: &Compiled) -> Result<Generated, String> {
    for w in wisdom {
        if !trees.iter().any(|(_, t)| t.schedule_name() == w.schedule) {
            return Err(crate::emit::dispatch::unknown_schedule(w, source));
        }
    }
    std::thread::scope(|scope| {
        let spawned = emit_cuda.then(|| std::thread::Builder::new().spawn_scoped(scope, || host_files(source, trees, wisdom)));
        let tree_files = kernels_and_tree(source, trees, emit_cuda, compiled);
        let host = match spawned {
            Some(Ok(handle)) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Some(Err(_)) => host_files(source, trees, wisdom),
            None => Ok((Vec::new(), Vec::new())),
        };
        let (mut files, text, described) = tree_files?;
        let (dispatch, drivers) = host?;
        files.extend(dispatch);
        for (name, body) in drivers {
            if files.insert(name.clone(), body).is_some() {
                return Err(format!("two generated files would be named `{name}`"));
            }
        }
        files.extend(described);
        Ok(Generated { files, text })
    })
}

/// The dispatch code of every tree, then the host driver of each function (`emit_cuda`).
type HostFiles = (Vec<(String, String)>, Vec<(String, String)>);

fn host_files(source: &str, trees: &[(&KernelFunction, Tree)], wisdom: &[crate::emit::dispatch::Wisdom]) -> Result<HostFiles, String> {
    let mut dispatch = Vec::new();
    for (function, tree) in trees {
        let dispatcher = crate::dispatch::Dispatcher::new(function, tree)?;
        dispatch.extend(crate::emit::dispatch::emit_with_wisdom(source, function, &tree.nodes[0].code, &dispatcher, wisdom)?);
    }
    // One host driver per function, over its schedules' trees in source order.
    let mut drivers = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (function, _) in trees {
        if seen.contains(&function.name.as_str()) {
            continue;
        }
        seen.push(&function.name);
        let mine: Vec<&Tree> = function.schedules.iter().filter_map(|s| trees.iter().find(|(f, t)| f.name == function.name && t.schedule_name() == s.name).map(|(_, t)| t)).collect();
        if mine.len() == function.schedules.len() {
            drivers.extend(crate::emit::host::driver(source, function, &mine)?);
        }
    }
    Ok((dispatch, drivers))
}

/// The leaf kernels' files (`emit_cuda`), the printed tree, and the files that describe the
/// trees (`tree.yaml`, `tree.dot`, `tree.svg`).
fn kernels_and_tree(source: &str, trees: &[(&KernelFunction, Tree)], emit_cuda: bool, compiled: &Compiled) -> Result<(BTreeMap<String, String>, String, Vec<(String, String)>), String> {
    let draw = || {
        let pictures: Vec<_> = trees.iter().map(|(_, tree)| crate::emit::tree_picture::picture(tree, compiled)).collect();
        (dot(&pictures), crate::emit::tree_svg::svg(&pictures))
    };
    let (files, text, yaml, (dot, svg)) = kernels_and_yaml(source, trees, emit_cuda, compiled, draw)?;
    Ok((files, text, vec![("tree.yaml".into(), yaml), ("tree.dot".into(), dot), (SVG_PICTURE.into(), svg)]))
}

/// The kernel leaves of a tree grouped by their code, each group in node order (its first
/// leaf names the kernel, as in [`leaf_kernel_name`]). Grouped by hashing each leaf's code
/// once, not by comparing each leaf with all others.
struct LeafGroups {
    groups: Vec<Vec<usize>>,
    /// Per kernel leaf, its group's index.
    of: HashMap<usize, usize>,
}

impl LeafGroups {
    fn of(tree: &Tree) -> LeafGroups {
        let mut index: HashMap<&crate::kernel::Kernel, usize> = HashMap::default();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut of = HashMap::default();
        for n in tree.leaves().filter(|n| matches!(n.kind, NodeKind::Leaf)) {
            let g = *index.entry(&*n.staged).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
            groups[g].push(n.id);
            of.insert(n.id, g);
        }
        LeafGroups { groups, of }
    }

    /// The leaves that run kernel leaf `id`'s code, `id` among them; `None` for other nodes.
    fn group(&self, id: usize) -> Option<&[usize]> {
        self.of.get(&id).map(|&g| self.groups[g].as_slice())
    }
}

/// The leaf kernels' files (`emit_cuda`), the printed tree, `tree.yaml`, and what `beside`
/// makes. The YAML is serialised on a second thread while this one writes the kernels and
/// then runs `beside` (on mvt's two trees the serialisation alone took 4-6 ms of this
/// function's 10-15; atax's 3.5 ms of CPU in the thirty-third session, longer than the
/// kernels, so the pictures are drawn beside it too).
fn kernels_and_yaml<R>(source: &str, trees: &[(&KernelFunction, Tree)], emit_cuda: bool, compiled: &Compiled, beside: impl FnOnce() -> R) -> Result<(BTreeMap<String, String>, String, String, R), String> {
    let mut schedules = Vec::new();
    let mut text = String::new();
    // The kernels to write: file name, function, code (named), header lines.
    let mut pending: Vec<(String, &KernelFunction, crate::kernel::Kernel, Vec<String>)> = Vec::new();
    for (function, tree) in trees {
        let root_set: Vec<String> = tree.root_constraints.constraints().iter().map(|c| c.to_string()).collect();
        // A constraint is printed once per tree: a leaf's system repeats its ancestors' forks.
        let mut printed: HashMap<&constraints::Constraint, String> = HashMap::default();
        let mut shown = |c| printed.entry(c).or_insert_with(|| c.to_string()).clone();
        let by_code = LeafGroups::of(tree);
        let mut leaves = Vec::new();
        for n in tree.leaves() {
            let path: Vec<String> = n.constraints.constraints().iter().map(|c| shown(c)).filter(|c| !root_set.contains(c)).collect();
            // What `gen --ptxas` compiled is recorded with or without `--emit-cuda` (the leaf's
            // code is the kernel's, written to a file or not).
            let compiled_as = by_code.group(n.id).map(|group| kernel_named_after(tree, group[0]));
            let (file, name) = match by_code.group(n.id).filter(|_| emit_cuda) {
                Some(group) => {
                    let name = kernel_named_after(tree, group[0]);
                    let file = format!("{name}.cu");
                    if group[0] == n.id {
                        let mut code = (*n.staged).clone();
                        code.name = name.clone();
                        let mut header = vec![
                            format!("Generated by metafork from {source}: schedule `{}`, leaf {}.", tree.schedule_name(), n.id),
                            format!("Valid where, besides the program's facts, all of these hold ({}: registers per thread, {}: shared memory per block in bytes, {}: threads per block, {}: registers per block, {}: registers per multiprocessor, {}: warps per multiprocessor, {}: multiprocessors):", tree.machine.registers_per_thread, tree.machine.shared_per_block, tree.machine.threads_per_block, tree.machine.registers_per_block, tree.machine.registers_per_multiprocessor, tree.machine.warps_per_multiprocessor, tree.machine.multiprocessors),
                        ];
                        header.extend(path.iter().map(|c| format!("  {c}")));
                        let sharing: Vec<String> = group[1..].iter().map(|id| id.to_string()).collect();
                        if !sharing.is_empty() {
                            header.push(format!("The same code also runs for {} {} (regions in tree.yaml).", if sharing.len() == 1 { "leaf" } else { "leaves" }, sharing.join(", ")));
                        }
                        header.push(strategies_line(&n.applied));
                        pending.push((file.clone(), function, code, header));
                    }
                    (Some(file), Some(name))
                }
                None => (None, None),
            };
            leaves.push(LeafOut {
                id: n.id,
                kind: kind_name(&n.kind),
                constraints: path,
                decisions: n.decisions.clone(),
                strategies: n.applied.iter().map(|s| s.name().to_string()).collect(),
                counters: CountersOut {
                    registers: n.counters.registers,
                    shared_memory_bytes: n.counters.shared_bytes.to_string(),
                    threads_per_block: n.counters.threads_per_block.to_string(),
                },
                compiled: compiled_as.as_ref().and_then(|k| compiled.get(k)).map(|m| m.iter().map(|(arch, r)| (arch.clone(), CompiledOut { registers: r.registers, static_shared_bytes: r.static_shared, spill_stores_bytes: r.spill_stores, spill_loads_bytes: r.spill_loads })).collect()).unwrap_or_default(),
                kernel_file: file,
                kernel_name: name,
                unknown: n.unknown,
            });
        }
        let mut machine = BTreeMap::new();
        machine.insert("registers_per_thread".into(), tree.machine.registers_per_thread.clone());
        machine.insert("shared_memory_per_block_bytes".into(), tree.machine.shared_per_block.clone());
        machine.insert("threads_per_block".into(), tree.machine.threads_per_block.clone());
        machine.insert("registers_per_block".into(), tree.machine.registers_per_block.clone());
        machine.insert("registers_per_multiprocessor".into(), tree.machine.registers_per_multiprocessor.clone());
        machine.insert("warps_per_multiprocessor".into(), tree.machine.warps_per_multiprocessor.clone());
        machine.insert("multiprocessors".into(), tree.machine.multiprocessors.clone());
        schedules.push(ScheduleOut {
            name: tree.schedule_name().to_string(),
            machine_parameters: machine,
            program_parameters: function.program_parameters(),
            data_parameters: function.data_parameters(),
            root_constraints: root_set,
            not_cached: tree.not_cached.iter().cloned().collect(),
            tree: tree
                .nodes
                .iter()
                .map(|n| NodeOut {
                    id: n.id,
                    kind: kind_name(&n.kind),
                    children: n.children.iter().map(|e| EdgeOut { edge: e.kind.into(), counter: e.counter.name().into(), constraint: shown(&e.constraint), node: e.child }).collect(),
                })
                .collect(),
            leaves,
            z3_queries: tree.queries,
        });
        render_text(tree, &by_code, &mut text);
    }
    let file = TreeFile { source: source.to_string(), schedules };
    std::thread::scope(|scope| {
        let serialise = || serde_yaml::to_string(&file).map_err(|e| e.to_string());
        let serialised = std::thread::Builder::new().spawn_scoped(scope, serialise);
        let mut files = BTreeMap::new();
        for (name, function, code, header) in &pending {
            files.insert(name.clone(), emit_kernel(function, code, header)?);
        }
        let made = beside();
        let yaml = match serialised {
            Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => serialise(),
        }?;
        Ok((files, text, yaml, made))
    })
}

/// The decision diagrams drawn as SVG (`tree_svg.rs`).
pub const SVG_PICTURE: &str = "tree.svg";

/// `tree.dot`: every tree's decision diagram in one Graphviz graph.
fn dot(pictures: &[crate::emit::tree_picture::Picture]) -> String {
    let mut dot = String::from("digraph metafork {\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n  edge [fontname=\"sans-serif\", fontsize=9];\n  nodesep=0.2; ranksep=0.3;\n  size=\"10.5,8\"; /* at most a landscape page (inches): Graphviz scales larger drawings down */\n");
    for picture in pictures {
        crate::emit::tree_picture::render(picture, &mut dot);
    }
    dot.push_str("}\n");
    dot
}

fn render_text(tree: &Tree, by_code: &LeafGroups, out: &mut String) {
    let _ = writeln!(out, "{} ({} nodes, {} leaves, height {})", tree.schedule_name(), tree.nodes.len(), tree.leaves().count(), tree.height());
    fn walk(tree: &Tree, by_code: &LeafGroups, id: usize, prefix: &str, out: &mut String) {
        let n = &tree.nodes[id];
        let count = n.children.len();
        for (i, e) in n.children.iter().enumerate() {
            let last = i + 1 == count;
            let child = &tree.nodes[e.child];
            let what = match &child.kind {
                NodeKind::Leaf => format!("  => kernel {}", kernel_named_after(tree, by_code.group(child.id).map_or(child.id, |group| group[0]))),
                NodeKind::Infeasible { .. } => "  => no kernel".to_string(),
                NodeKind::Inner => String::new(),
            };
            let applied = if e.kind == "refuse" && child.applied.len() > n.applied.len() {
                format!(" [{}]", child.applied.last().map(|s| s.name()).unwrap_or_default())
            } else {
                String::new()
            };
            let _ = writeln!(out, "{prefix}{}{} {}{applied}{what}", if last { "└─ " } else { "├─ " }, e.kind, e.constraint);
            walk(tree, by_code, e.child, &format!("{prefix}{}", if last { "   " } else { "│  " }), out);
        }
    }
    walk(tree, by_code, 0, "", out);
}


#[cfg(test)]
mod tests {
    use super::strategies_line;
    use crate::tree::Strategy as S;

    #[test]
    fn a_strategy_a_later_refusal_undid_is_not_listed_as_applied() {
        let line = strategies_line(&[S::CacheInSharedMemory, S::EliminateCommonSubexpressions, S::PadSharedRows, S::DropCaching, S::Merge]);
        assert_eq!(
            line,
            "Strategies applied: common sub-expression elimination, merge two grid-x iterations per block. Applied on this path and undone by a later refusal: cache in shared memory, pad shared tiles' rows by one element."
        );
        assert_eq!(strategies_line(&[]), "Strategies applied: none.");
        assert_eq!(strategies_line(&[S::BlockReduce, S::DropBlockReduce]), "Strategies applied: none. Applied on this path and undone by a later refusal: reduce in the block first (a tree in shared memory, one atomic add per block).");
        assert_eq!(strategies_line(&[S::CacheInSharedMemory, S::Unroll]), "Strategies applied: cache in shared memory, unroll the innermost serial loop by 4.");
    }
}
