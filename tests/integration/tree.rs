//! The decision tree on every example: consistent leaves, the paper's height bound, coverage
//! (the leaves partition the admissible space), recorded decisions, machine symbols that avoid
//! the program's names, deterministic output, and leaves that compile with nvcc.

use constraints::solver::{Backend, CheckResult};
use constraints::{Rational, Var};
use metafork::tree::{Counter, NodeKind, Strategy};
use std::collections::BTreeMap;

use crate::common::{examples, trees_of, Rng};

fn q(v: i64) -> Rational {
    Rational::from_integer(v.into())
}

#[test]
fn leaves_are_consistent_and_the_height_is_bounded() {
    let backend = Backend::default();
    for (path, text) in examples() {
        for (_, tree) in trees_of(&path, &text, &backend) {
            let bound = tree.height_bound();
            let resources = Counter::ALL.iter().filter(|c| c.performance().is_none()).count();
            assert!(bound >= resources * (Strategy::ALL.len() + 1), "{path}: the bound leaves out counters");
            assert!(tree.height() <= bound, "{path}: height {} > w(s+t) = {bound}", tree.height());
            assert!(tree.leaves().any(|n| matches!(n.kind, NodeKind::Leaf)), "{path}: no kernel leaf");
            for leaf in tree.leaves() {
                assert!(matches!(backend.check(&leaf.constraints), CheckResult::Sat(_)), "{path}: leaf {} is not proved consistent: {}", leaf.id, leaf.constraints);
                assert!(!leaf.decisions.is_empty(), "{path}: leaf {} records no decision", leaf.id);
                assert!(!leaf.unknown, "{path}: leaf {} rests on an unknown answer", leaf.id);
            }
            // No resource fork on a constant the root's `1 <= limit` admits (a code without
            // tiles forked `accept 0 <= Z_B` on every path, a node with one child).
            for n in &tree.nodes {
                for e in n.children.iter().filter(|e| matches!(e.counter, Counter::SharedMemory | Counter::Registers | Counter::ThreadsPerBlock | Counter::RegistersPerBlock) && e.kind == "accept") {
                    let value = n.counters.value(e.counter);
                    assert!(value.as_constant().is_none_or(|c| c > q(1)), "{path}: node {} forks on {} = {value}, which every device admits", n.id, e.counter.name());
                }
            }
            // No fork is left whose two sides split its region and run one code (issue 25).
            for fork in tree.nodes.iter().filter(|n| n.children.len() == 2) {
                let (a, b) = (&fork.children[0], &fork.children[1]);
                let (x, y) = (&tree.nodes[a.child], &tree.nodes[b.child]);
                let one_code = matches!((&x.kind, &y.kind), (NodeKind::Leaf, NodeKind::Leaf)) && x.staged == y.staged && x.applied == y.applied;
                assert!(!(one_code && b.constraint == a.constraint.negate()), "{path}: node {}'s fork on {} chooses nothing: both sides run leaf {}'s code", fork.id, a.constraint, x.id);
            }
        }
    }
}

#[test]
fn leaves_partition_the_space_on_1000_random_points_per_example() {
    let backend = Backend::default();
    let mut rng = Rng(0x9E3779B97F4A7C15);
    for (path, text) in examples() {
        for (function, tree) in trees_of(&path, &text, &backend) {
            let mut tried = 0;
            let mut kernel_points = 0;
            while tried < 1000 {
                let mut point: BTreeMap<Var, Rational> = BTreeMap::new();
                // Machine limits in realistic ranges (Kepler to Hopper).
                point.insert(Var::new(&tree.machine.registers_per_thread), q(rng.range(16, 255)));
                point.insert(Var::new(&tree.machine.shared_per_block), q(rng.range(16, 228) * 1024));
                point.insert(Var::new(&tree.machine.threads_per_block), q(*[512, 1024].get(rng.range(0, 1) as usize).unwrap()));
                point.insert(Var::new(&tree.machine.registers_per_block), q(*[32768, 65536].get(rng.range(0, 1) as usize).unwrap()));
                point.insert(Var::new(&tree.machine.registers_per_multiprocessor), q(*[32768, 65536].get(rng.range(0, 1) as usize).unwrap()));
                point.insert(Var::new(&tree.machine.warps_per_multiprocessor), q(*[32, 48, 64].get(rng.range(0, 2) as usize).unwrap()));
                point.insert(Var::new(&tree.machine.multiprocessors), q(*[1, 4, 80, 132].get(rng.range(0, 3) as usize).unwrap()));
                for p in function.program_parameters() {
                    point.insert(Var::new(&p), q(rng.range(1, 16)));
                }
                for d in function.data_parameters() {
                    point.insert(Var::new(&d), q(rng.range(1, 4096)));
                }
                if !tree.root_constraints.holds_at(&point).unwrap() {
                    continue; // not admissible: the program's own facts exclude it
                }
                tried += 1;
                let admitting: Vec<&metafork::tree::Node> = tree.leaves().filter(|l| l.constraints.holds_at(&point).unwrap()).collect();
                assert_eq!(admitting.len(), 1, "{path}: {} leaves admit {point:?}", admitting.len());
                if matches!(admitting[0].kind, NodeKind::Leaf) {
                    kernel_points += 1;
                }
            }
            assert!(kernel_points > 100, "{path}: only {kernel_points} of 1000 points have a kernel");
        }
    }
}

#[test]
fn matrix_addition_has_a_leaf_with_granularity_reduced() {
    let backend = Backend::default();
    let (path, text) = examples().into_iter().find(|(p, _)| p.ends_with("matadd.mf")).unwrap();
    let (_, tree) = trees_of(&path, &text, &backend).remove(0);
    let kernels: Vec<_> = tree.leaves().filter(|l| matches!(l.kind, NodeKind::Leaf)).collect();
    assert!(kernels.len() >= 2);
    let reduced = kernels.iter().find(|l| l.applied.contains(&Strategy::ReduceGranularity)).expect("a granularity-reduced leaf");
    let plain = kernels.iter().find(|l| l.applied.is_empty()).expect("a leaf of the original code");
    assert!(reduced.counters.registers < plain.counters.registers, "fewer registers after reducing granularity");
}

/// The picture (issue 28): one box per kernel however many leaves run it, short arrow labels,
/// and `tree.svg` drawing the same boxes and arrows, no larger than a landscape page.
fn picture_is_readable(path: &str, dir: &std::path::Path, sources: &[String]) {
    let dot = std::fs::read_to_string(dir.join("tree.dot")).unwrap();
    for kernel in sources.iter().filter(|s| s.contains("_leaf")) {
        let stem = kernel.trim_end_matches(".cu");
        let boxes = dot.lines().filter(|l| l.contains(&format!("[label=\"{stem}\\n"))).count();
        assert_eq!(boxes, 1, "{path}: kernel {stem} is drawn {boxes} times");
    }
    let kernel_boxes = dot.lines().filter(|l| l.contains("fillcolor=\"#d8f0d8\"")).count();
    assert_eq!(kernel_boxes, sources.iter().filter(|s| s.contains("_leaf")).count(), "{path}: one box per kernel");
    for l in dot.lines().filter(|l| l.contains(" -> ")) {
        let label = l.split("label=\"").nth(1).unwrap().split('"').next().unwrap();
        assert!(label.chars().count() <= 60, "{path}: a long arrow label: {label}");
    }
    // tree.dot is Graphviz's language: where Graphviz is installed (`make setup`), it reads it.
    if let Ok(out) = std::process::Command::new("dot").arg("-Tcanon").arg(dir.join("tree.dot")).output() {
        assert!(out.status.success(), "{path}: Graphviz refuses tree.dot: {}", String::from_utf8_lossy(&out.stderr));
    }
    let svg = std::fs::read_to_string(dir.join("tree.svg")).unwrap();
    let size = |attr: &str| -> f64 { svg.split(&format!(" {attr}=\"")).nth(1).unwrap().split("pt").next().unwrap().parse().unwrap() };
    assert!(size("width") <= 756.5 && size("height") <= 612.5, "{path}: {} x {} pt", size("width"), size("height"));
    assert_eq!(svg.matches("<polyline").count(), 2 * dot.lines().filter(|l| l.contains(" -> ")).count(), "{path}: tree.svg draws every arrow of tree.dot");
    assert_eq!(svg.matches("fill=\"#d8f0d8\"").count(), kernel_boxes, "{path}: and every kernel box");
    for kernel in sources.iter().filter(|s| s.contains("_leaf")) {
        assert!(svg.contains(&format!(">{}</text>", kernel.trim_end_matches(".cu"))), "{path}: {kernel} is named in tree.svg");
    }
}

#[test]
fn machine_symbols_never_clash_with_program_symbols() {
    let backend = Backend::default();
    let src = "void f(int N, int R, int T_B, float a[N]) {\n  assume(N >= 1 && R >= 1 && T_B >= 1);\n  meta_schedule {\n    meta_for (int i = 0; i < N / R; i++)\n      meta_for (int j = 0; j < R; j++)\n        a[i * R + j] = a[i * R + j] + T_B;\n  }\n}\n";
    let (_, tree) = trees_of("clash.mf", src, &backend).remove(0);
    assert_eq!(tree.machine.registers_per_thread, "R_dev");
    assert_eq!(tree.machine.threads_per_block, "T_B_dev");
    assert_eq!(tree.machine.shared_per_block, "Z_B");
    let (path, text) = examples().into_iter().find(|(p, _)| p.ends_with("jacobi1d.mf")).unwrap();
    let (_, tree) = trees_of(&path, &text, &backend).remove(0);
    assert_eq!(tree.machine.threads_per_block, "T_B", "Jacobi's time steps T do not clash with T_B");
}

/// `gen` twice per example gives the same bytes; every emitted `.cu` compiles with nvcc for
/// three architectures (one translation unit holding every example's files, so the CUDA
/// headers and the host side are compiled once), and each file passes nvcc's front end on its own
/// (a whole translation unit, needing nothing another file defines).
#[test]
fn gen_is_deterministic_and_every_leaf_compiles_with_nvcc() {
    let bin = env!("CARGO_BIN_EXE_metafork");
    let base = crate::common::scratch("gen");
    let mut units = Vec::new();
    for (path, _) in examples() {
        let stem = std::path::Path::new(&path).file_stem().unwrap().to_string_lossy().to_string();
        let (a, b) = (base.join(format!("{stem}-a")), base.join(format!("{stem}-b")));
        for dir in [&a, &b] {
            let out = std::process::Command::new(bin).args(["gen", "--emit-cuda", &path, "-o"]).arg(dir).output().unwrap();
            assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let names: Vec<_> = std::fs::read_dir(&a).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.iter().any(|n| n == "tree.yaml") && names.iter().any(|n| n == "tree.dot"));
        let mut sources = Vec::new();
        for n in &names {
            assert_eq!(std::fs::read(a.join(n)).unwrap(), std::fs::read(b.join(n)).unwrap(), "{path}: {n:?} differs between runs");
            if n.to_string_lossy().ends_with(".cu") {
                sources.push(n.to_string_lossy().into_owned());
            }
        }
        sources.sort();
        picture_is_readable(&path, &a, &sources);
        let yaml: serde_yaml::Value = serde_yaml::from_slice(&std::fs::read(a.join("tree.yaml")).unwrap()).unwrap();
        let leaf = &yaml["schedules"][0]["leaves"][0];
        for key in ["id", "constraints", "decisions", "counters"] {
            assert!(!leaf[key].is_null(), "{path}: leaf lacks `{key}`");
        }
        units.push((path, a, sources));
    }
    if let Some(nvcc) = crate::common::nvcc() {
        let gencode = ["sm_75", "sm_80", "sm_90"].map(|sm| format!("arch=compute_{0},code={1}", &sm[3..], sm));
        // Every example's files in one translation unit, for the three architectures: the
        // outputs of different programs also coexist in one unit (as in a user's program
        // linking two), and the CUDA headers are parsed once rather than once per example.
        let unit: String = units.iter().flat_map(|(_, dir, sources)| sources.iter().map(move |s| format!("#include \"{}\"\n", dir.join(s).display()))).collect();
        std::fs::write(base.join("metafork_test_unit.cu"), unit).unwrap();
        let mut whole = std::process::Command::new(&nvcc);
        // Host code at -O0: whether it compiles does not depend on the host optimiser, and -O3
        // cost 15% of this compile (58.6 s against 50.0 s alone); device code is assembled by
        // ptxas at its default -O3 either way.
        whole.current_dir(&base).args(["-c", "-O0", "-o", "unit.o", "metafork_test_unit.cu"]);
        for g in &gencode {
            whole.args(["-gencode", g]);
        }
        // Its messages go to a file: a pipe nobody reads while the loop below runs could fill.
        let log = base.join("unit.log");
        let mut whole = whole.stdout(std::process::Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
        // Meanwhile each file on its own (it includes what it needs), an example at a time.
        // nvcc's front end alone (`-fdevice-syntax-only`) parses and checks a file's host and
        // device code (an undeclared name or a missing include is an error there) at a
        // quarter of a whole compile's CPU; the unit above compiles everything in full.
        for (path, dir, sources) in &units {
            let o = std::process::Command::new(&nvcc).current_dir(dir).args(["-ptx", "-fdevice-syntax-only", "-arch=sm_90", "-odir", "."]).args(sources).output().unwrap();
            assert!(o.status.success(), "{path}: a file does not compile on its own: {}", String::from_utf8_lossy(&o.stderr));
        }
        let status = whole.wait().unwrap();
        assert!(status.success(), "nvcc for sm_75, sm_80, sm_90 on every example's files: {}", std::fs::read_to_string(&log).unwrap_or_default());
    }
    std::fs::remove_dir_all(&base).unwrap();
}

/// `build_all` builds a program's schedules side by side, each build's first Z3 query waiting
/// for the builds before it: the trees are those of builds one after another (the shared
/// fixture), node for node, Z3 query counts included, on programs whose later schedules ask
/// Z3 (gemver's third, conv2d's first and second). ludcmp was such a program until the exact
/// pre-check split disequalities (3d92627), softmax until it substituted aliases (ce2b013):
/// they now ask Z3 nothing, so they test no waiting.
#[test]
fn schedules_built_side_by_side_are_the_trees_built_one_by_one() {
    for path in ["examples/heldout/gemver.mf", "examples/heldout/conv2d.mf"] {
        let path = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let one_by_one = trees_of(&path, &text, &Backend::default());
        let program = metafork::frontend::check_source(&path, &text).unwrap();
        let backend = Backend::default();
        let side_by_side = metafork::tree::build_all(&program, &backend).unwrap();
        assert_eq!(side_by_side.len(), one_by_one.len(), "{path}");
        assert!(one_by_one.iter().map(|(_, t)| t.queries).sum::<u64>() > 0, "{path}: some schedule asks Z3");
        assert_eq!(backend.queries(), one_by_one.iter().map(|(_, t)| t.queries).sum::<u64>(), "{path}: the builds' queries are counted");
        for ((f, a), (g, b)) in side_by_side.iter().zip(&one_by_one) {
            assert_eq!(f.name, g.name);
            assert_eq!(a.queries, b.queries, "{path}: {}", a.schedule_name());
            assert_eq!(format!("{:?}", a.nodes), format!("{:?}", b.nodes), "{path}: {} differs", a.schedule_name());
        }
    }
}
