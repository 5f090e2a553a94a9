//! The decision tree as a picture a person can read: [`picture`] reduces a tree to the
//! diagram both `tree.dot` ([`render`]) and `tree.svg` (`tree_svg.rs`) draw.
//!
//! Contract: the tree is drawn as the decision diagram it denotes, not node by node. Leaves
//! that run the same kernel are one box (its name, registers and shared bytes); the leaves
//! where no kernel exists are one box per refused counter; identical sub-diagrams are drawn
//! once; and a fork whose branches all reach the same box is left out (its condition does not
//! change what runs). Fork labels are short (`registers <= R`, `shared bytes > Z_B: cache in
//! shared memory`, or the condition itself for the case splits), the full constraint is each
//! edge's tooltip, and `tree.yaml` keeps every node. Deterministic: boxes are numbered in the
//! order a depth-first walk from the root first reaches them.

use super::tree_files::leaf_kernel_name;
use crate::tree::{Counter, Edge, NodeKind, Strategy, Tree};
use std::collections::HashMap;
use std::fmt::Write;

/// One box of the diagram.
enum Shape {
    Kernel { name: String, registers: u32, shared: String },
    NoKernel(Counter),
    Fork(Vec<(String, String, usize)>),
}

struct Diagram {
    shapes: Vec<Shape>,
    by_key: HashMap<String, usize>,
}

impl Diagram {
    fn intern(&mut self, key: String, shape: Shape) -> usize {
        if let Some(&i) = self.by_key.get(&key) {
            return i;
        }
        self.shapes.push(shape);
        self.by_key.insert(key, self.shapes.len() - 1);
        self.shapes.len() - 1
    }
}

/// The counter's condition with the machine's symbol, short.
fn condition(tree: &Tree, e: &Edge) -> String {
    let m = &tree.machine;
    let accept = e.kind == "accept";
    let (what, limit) = match e.counter {
        Counter::SharedMemory => ("shared bytes", m.shared_per_block.as_str()),
        Counter::Registers => ("registers", m.registers_per_thread.as_str()),
        Counter::ThreadsPerBlock => ("threads", m.threads_per_block.as_str()),
        Counter::RegistersPerBlock => ("registers x threads", m.registers_per_block.as_str()),
        Counter::AtomicContention => return if accept { "one thread per element and block" } else { "threads of a block add to one element" }.into(),
        Counter::Coalescing => return if accept { "coalesced" } else { "not coalesced" }.into(),
        Counter::BankConflicts => return if accept { "no bank conflicts" } else { "bank conflicts" }.into(),
        Counter::Occupancy => return if accept { "registers do not limit occupancy" } else { "registers limit occupancy" }.into(),
        Counter::GridFill => return if accept { "merged grid fills the device" } else { "merged grid too small" }.into(),
        Counter::TripCount => return e.constraint.to_string(),
    };
    if matches!(e.kind, "accept" | "refuse") {
        format!("{what} {} {limit}", if accept { "<=" } else { ">" })
    } else {
        e.constraint.to_string()
    }
}

/// A strategy in a few words (`Strategy::name` says it whole).
fn short(s: Strategy) -> &'static str {
    match s {
        Strategy::ReduceRegisterPressure1 => "no unrolling",
        Strategy::ReduceGranularity => "less granularity",
        Strategy::ReduceCse => "less CSE",
        Strategy::ReduceRegisterPressure3 => "cap registers",
        Strategy::DropCaching => "no caching",
        Strategy::UnpadColumns => "unpadded columns",
        Strategy::CacheInSharedMemory => "cache",
        Strategy::EliminateCommonSubexpressions => "CSE",
        Strategy::PadSharedRows => "pad rows",
        Strategy::Interchange => "interchange x/y",
        Strategy::Prefetch => "prefetch",
        Strategy::RegisterBlock => "register blocking",
        Strategy::Coarsen => "coarsen y",
        Strategy::BlockReduce => "reduce in block",
        Strategy::DropBlockReduce => "no block reduction",
        Strategy::Unroll => "unroll by 4",
        Strategy::Merge => "merge 2 blocks",
    }
}

/// The box node `id`'s sub-tree reduces to.
fn reduce(tree: &Tree, id: usize, d: &mut Diagram) -> usize {
    let n = &tree.nodes[id];
    match &n.kind {
        NodeKind::Leaf => {
            let name = leaf_kernel_name(tree, id);
            d.intern(format!("kernel {name}"), Shape::Kernel { name: name.clone(), registers: n.counters.registers, shared: n.counters.shared_bytes.to_string() })
        }
        NodeKind::Infeasible { counter } => d.intern(format!("none {}", counter.name()), Shape::NoKernel(*counter)),
        NodeKind::Inner => {
            let mut branches = Vec::new();
            for e in &n.children {
                let to = reduce(tree, e.child, d);
                let mut label = condition(tree, e);
                if e.kind == "refuse" {
                    let child = &tree.nodes[e.child];
                    if let Some(s) = child.applied.get(n.applied.len()).filter(|_| child.applied.len() > n.applied.len()) {
                        label = format!("{label}: {}", short(*s));
                    }
                }
                branches.push((label, e.constraint.to_string(), to));
            }
            if let Some(&(_, _, first)) = branches.first() {
                if branches.iter().all(|b| b.2 == first) {
                    return first;
                }
            }
            let key = format!("fork {}", branches.iter().map(|(l, _, t)| format!("{l}\u{1}{t}")).collect::<Vec<_>>().join("\u{2}"));
            d.intern(key, Shape::Fork(branches))
        }
    }
}

/// What a box shows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BoxKind {
    /// A kernel leaf (green).
    Kernel,
    /// Where no kernel exists (red).
    NoKernel,
    /// A fork: a point.
    Fork,
}

/// One box of a drawn diagram: its kind and its lines of text (none for a fork).
#[derive(Clone, Debug)]
pub struct PictureBox {
    pub kind: BoxKind,
    pub lines: Vec<String>,
}

/// One arrow: boxes `from` -> `to` (indices into [`Picture::boxes`]), its short label and the
/// full constraint (its tooltip).
#[derive(Clone, Debug)]
pub struct Arrow {
    pub from: usize,
    pub to: usize,
    pub label: String,
    pub tooltip: String,
}

/// One schedule's decision diagram, ready to draw: boxes numbered in the order a walk from the
/// root (box 0) reaches them, arrows in that order too, each box's arrows in branch order.
#[derive(Clone, Debug)]
pub struct Picture {
    pub schedule: String,
    pub boxes: Vec<PictureBox>,
    pub arrows: Vec<Arrow>,
}

/// The heading over one schedule's diagram.
pub fn heading(schedule: &str) -> String {
    format!("schedule {schedule} (full constraints: tree.yaml, and each arrow's tooltip)")
}

/// `tree`'s decision diagram, with the real counts of `compiled` in its kernel boxes.
pub fn picture(tree: &Tree, compiled: &super::tree_files::Compiled) -> Picture {
    let mut d = Diagram { shapes: Vec::new(), by_key: HashMap::new() };
    let root = reduce(tree, 0, &mut d);
    // Number the boxes in the order a walk from the root reaches them.
    let mut order = vec![usize::MAX; d.shapes.len()];
    let mut next = 0;
    let mut stack = vec![root];
    while let Some(i) = stack.pop() {
        if order[i] != usize::MAX {
            continue;
        }
        order[i] = next;
        next += 1;
        if let Shape::Fork(branches) = &d.shapes[i] {
            stack.extend(branches.iter().rev().map(|b| b.2));
        }
    }
    let mut reached: Vec<usize> = (0..d.shapes.len()).filter(|&i| order[i] != usize::MAX).collect();
    reached.sort_by_key(|&i| order[i]);
    let mut boxes = Vec::with_capacity(reached.len());
    let mut arrows = Vec::new();
    for &i in &reached {
        boxes.push(match &d.shapes[i] {
            Shape::Kernel { name: kernel, registers, shared } => {
                let real: Vec<String> = compiled.get(kernel).map(|m| m.iter().map(|(arch, r)| format!("{} at {arch}", r.registers)).collect()).unwrap_or_default();
                let lines = if real.is_empty() {
                    vec![kernel.clone(), format!("{registers} registers, {shared} shared bytes")]
                } else {
                    vec![kernel.clone(), format!("registers: estimate {registers}; ptxas {}", real.join(", ")), format!("{shared} shared bytes")]
                };
                PictureBox { kind: BoxKind::Kernel, lines }
            }
            Shape::NoKernel(counter) => PictureBox { kind: BoxKind::NoKernel, lines: vec!["no kernel".into(), format!("({} too large)", counter.name())] },
            Shape::Fork(branches) => {
                arrows.extend(branches.iter().map(|(label, full, to)| Arrow { from: order[i], to: order[*to], label: label.clone(), tooltip: full.clone() }));
                PictureBox { kind: BoxKind::Fork, lines: Vec::new() }
            }
        });
    }
    Picture { schedule: tree.schedule_name().to_string(), boxes, arrows }
}

/// One schedule's diagram, as DOT statements (inside the file's `digraph`).
pub fn render(picture: &Picture, out: &mut String) {
    let prefix = &picture.schedule;
    let name = |i: usize| format!("\"{}_{}\"", dot_text(prefix), i);
    let _ = writeln!(out, "  subgraph \"cluster_{}\" {{\n    label=\"{}\"; fontname=\"sans-serif\";", dot_text(prefix), dot_text(&heading(prefix)));
    for (i, b) in picture.boxes.iter().enumerate() {
        let label = b.lines.iter().map(|l| dot_text(l)).collect::<Vec<_>>().join("\\n");
        match b.kind {
            BoxKind::Kernel => {
                let _ = writeln!(out, "    {} [label=\"{label}\", style=filled, fillcolor=\"#d8f0d8\"];", name(i));
            }
            BoxKind::NoKernel => {
                let _ = writeln!(out, "    {} [label=\"{label}\", style=filled, fillcolor=\"#f0d8d8\"];", name(i));
            }
            BoxKind::Fork => {
                let _ = writeln!(out, "    {} [label=\"\", shape=point, width=0.12];", name(i));
            }
        }
    }
    for a in &picture.arrows {
        let _ = writeln!(out, "    {} -> {} [label=\"{}\", tooltip=\"{}\"];", name(a.from), name(a.to), dot_text(&a.label), dot_text(&a.tooltip));
    }
    let _ = writeln!(out, "  }}");
}

/// Text inside a DOT double-quoted string: quotes and backslashes escaped, one line.
fn dot_text(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace(['\n', '\r'], " ")
}

/// How many boxes and arrows `tree`'s picture has (for tests and benchmarks).
pub fn size(tree: &Tree) -> (usize, usize) {
    let p = picture(tree, &Default::default());
    (p.boxes.len(), p.arrows.len())
}
