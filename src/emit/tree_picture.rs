//! `tree.dot`: the decision tree as a picture a person can read.
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

/// One schedule's diagram, as DOT statements (inside the file's `digraph`).
pub fn render(tree: &Tree, compiled: &super::tree_files::Compiled, out: &mut String) {
    let prefix = tree.schedule_name();
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
    let name = |i: usize| format!("\"{}_{}\"", dot_text(&prefix), order[i]);
    let _ = writeln!(out, "  subgraph \"cluster_{}\" {{\n    label=\"schedule {} (full constraints: tree.yaml, and each arrow's tooltip)\"; fontname=\"sans-serif\";", dot_text(&prefix), dot_text(&prefix));
    let mut boxes: Vec<usize> = (0..d.shapes.len()).filter(|&i| order[i] != usize::MAX).collect();
    boxes.sort_by_key(|&i| order[i]);
    for &i in &boxes {
        match &d.shapes[i] {
            Shape::Kernel { name: kernel, registers, shared } => {
                let real: Vec<String> = compiled.get(kernel).map(|m| m.iter().map(|(arch, r)| format!("{} at {arch}", r.registers)).collect()).unwrap_or_default();
                let registers = if real.is_empty() { format!("{registers} registers, ") } else { format!("registers: estimate {registers}; ptxas {}\\n", real.join(", ")) };
                let _ = writeln!(out, "    {} [label=\"{}\\n{registers}{} shared bytes\", style=filled, fillcolor=\"#d8f0d8\"];", name(i), dot_text(kernel), dot_text(shared));
            }
            Shape::NoKernel(counter) => {
                let _ = writeln!(out, "    {} [label=\"no kernel\\n({} too large)\", style=filled, fillcolor=\"#f0d8d8\"];", name(i), dot_text(counter.name()));
            }
            Shape::Fork(_) => {
                let _ = writeln!(out, "    {} [label=\"\", shape=point, width=0.12];", name(i));
            }
        }
    }
    for &i in &boxes {
        if let Shape::Fork(branches) = &d.shapes[i] {
            for (label, full, to) in branches {
                let _ = writeln!(out, "    {} -> {} [label=\"{}\", tooltip=\"{}\"];", name(i), name(*to), dot_text(label), dot_text(full));
            }
        }
    }
    let _ = writeln!(out, "  }}");
}

/// Text inside a DOT double-quoted string: quotes and backslashes escaped, one line.
fn dot_text(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace(['\n', '\r'], " ")
}

/// How many boxes and arrows `tree`'s picture has (for tests and benchmarks).
pub fn size(tree: &Tree) -> (usize, usize) {
    let mut text = String::new();
    render(tree, &Default::default(), &mut text);
    (text.lines().filter(|l| l.contains("[label=") && !l.contains("->")).count(), text.lines().filter(|l| l.contains("->")).count())
}

/// The longest Graphviz may take to draw one output's picture.
const DOT_SECONDS: u64 = 30;

/// A `dot -Tsvg` process started before its input exists: starting Graphviz (loading its
/// plugins) takes 15-20 ms, which `gen` spends while it builds the trees. Dropped unused, the
/// process is killed and reaped.
pub struct Drawer {
    child: Option<std::process::Child>,
}

impl Drawer {
    /// `None` when `dot` is not on the PATH or cannot be started.
    pub fn start() -> Option<Drawer> {
        use std::process::{Command, Stdio};
        let child = Command::new("dot").arg("-Tsvg").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
        Some(Drawer { child: Some(child) })
    }

    /// `tree.svg`: `dot_text` drawn by Graphviz (`None` when `dot` fails or takes longer than
    /// [`DOT_SECONDS`]; the picture is then only `tree.dot`).
    pub fn draw(mut self, dot_text: &str) -> Option<Vec<u8>> {
        use std::io::Write as _;
        let mut child = self.child.take()?;
        let Some(mut stdin) = child.stdin.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        };
        let input = dot_text.to_string();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let pid = child.id();
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = send.send(child.wait_with_output());
        });
        let output = match receive.recv_timeout(std::time::Duration::from_secs(DOT_SECONDS)) {
            Ok(Ok(o)) => o,
            Ok(Err(_)) => return None,
            Err(_) => {
                // SAFETY: `kill` on the child's pid (it has not been reaped: the waiting thread holds it).
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return None;
            }
        };
        let _ = writer.join();
        (output.status.success() && output.stdout.starts_with(b"<?xml")).then_some(output.stdout)
    }
}

impl Drop for Drawer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
