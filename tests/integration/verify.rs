//! The verifier: differential runs of every example leaf against the serial program, Z3
//! proofs of the examples' leaves, and deliberately broken kernels caught with witnesses that
//! are replayed on the execution engine.
use crate::common;

use constraints::solver::Backend;
use metafork::frontend::ast::*;
use metafork::frontend::model::KernelFunction;
use metafork::kernel::Kernel;
use metafork::tree::{NodeKind, Tree};
use metafork::verify::differential::{run_point, Outcome, Programs};
use metafork::verify::machine::{Fault, RunOptions};

const RACES: RunOptions = RunOptions { detect_races: true, step_budget: None, kernel_only: false };
use metafork::verify::twothread::{check, Verdict, Witness};
use metafork::verify::{verify_tree, Options, Status};
use std::collections::BTreeMap;

fn backend() -> Backend {
    Backend::new(metafork::verify::QUERY_TIMEOUT_MS)
}

fn kernel_leaves(tree: &Tree) -> Vec<&metafork::tree::Node> {
    tree.leaves().filter(|n| matches!(n.kind, NodeKind::Leaf)).collect()
}

fn schedule_index(f: &KernelFunction, tree: &Tree) -> usize {
    f.schedules.iter().position(|s| s.name == tree.schedule).unwrap()
}

/// Every kernel leaf of every example computes what the serial program computes, at points
/// Z3 samples from the leaf's constraints, the performance gates aside (4 per leaf,
/// bit-identical results).
#[test]
fn every_example_leaf_matches_the_serial_program() {
    let b = backend();
    let mut leaves = 0;
    for (path, text) in common::examples() {
        for (f, tree) in common::trees_of(&path, &text, &b) {
            let k = schedule_index(&f, &tree);
            for leaf in kernel_leaves(&tree) {
                let programs = Programs::new(&f, k, &leaf.staged).unwrap();
                let points = metafork::verify::sample::points(&f, &leaf.correctness_constraints(&tree.machine), &b, 4, 48, 11 + leaf.id as u64).unwrap();
                assert!(!points.is_empty(), "{path}: no point sampled for leaf {}", leaf.id);
                let mut passed = 0;
                for (i, p) in points.iter().enumerate() {
                    match run_point(&f, &programs, p, i as u64, RACES) {
                        Outcome::Passed(stats) => {
                            passed += 1;
                            assert!(stats.launches >= 1, "{path} leaf {}: nothing launched at {p:?}", leaf.id);
                        }
                        Outcome::Unusable(_) => {}
                        other => panic!("{path} leaf {} at {p:?}: {other:?}", leaf.id),
                    }
                }
                assert!(passed >= 1, "{path} leaf {}: no usable point", leaf.id);
                leaves += 1;
            }
        }
    }
    assert!(leaves >= 60, "only {leaves} leaves");
}

/// Every kernel leaf of every example is proved free of races, barrier divergence and
/// out-of-bounds accesses for all parameter values its constraints admit, the performance
/// gates aside (`Node::correctness_constraints`; Z3 unsat on every query within the time
/// limit), and passes its differential runs.
#[test]
fn every_example_leaf_is_proved() {
    let b = backend();
    let mut leaves = 0;
    for (path, text) in common::examples() {
        for (f, tree) in common::trees_of(&path, &text, &b) {
            // One differential point each: the test above runs four.
            let reports = verify_tree(&f, &tree, &b, Options { points: 1, ..Options::default() }).unwrap();
            for r in &reports {
                assert_eq!(r.status(), Status::Proved, "{path} leaf {}: {:?}", r.leaf, r.status());
                assert!(r.points >= 1);
            }
            leaves += reports.len();
        }
    }
    assert!(leaves >= 60, "only {leaves} leaves");
}

// ---- broken kernels ----

fn tree_of(src: &str) -> (KernelFunction, Tree) {
    common::trees_of("broken.mf", src, &backend()).into_iter().next().unwrap()
}

fn example_tree(name: &str) -> (KernelFunction, Tree) {
    let path = format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"));
    common::trees_of(&path, &std::fs::read_to_string(&path).unwrap(), &backend()).into_iter().next().unwrap()
}

/// The static check must find `defect`; its witness, run on the execution engine, must show
/// the same defect.
fn caught(f: &KernelFunction, tree: &Tree, kernel: &Kernel, defect: &str) -> Witness {
    let b = backend();
    let r = check(f, kernel, &tree.root_constraints, &b);
    let Verdict::Defect(w) = r.verdict else { panic!("expected {defect}, got {:?}\n{}", r.verdict, metafork::emit::cuda::emit_kernel(f, kernel, &[]).unwrap_or_default()) };
    assert_eq!(w.defect, defect, "{w}");
    // Replay: the witness's parameters, on seeded inputs.
    let point: BTreeMap<String, i64> = w.params.iter().filter(|(k, _)| f.params.iter().any(|p| &p.name == *k)).map(|(k, v)| (k.clone(), *v)).collect();
    let programs = Programs::new(f, schedule_index(f, tree), kernel).unwrap();
    match run_point(f, &programs, &point, 1, RACES) {
        // A thread that skips a barrier runs on into its neighbours' phase: the replay may
        // stop at the race that follows before every thread has stopped.
        Outcome::Fault(x) if defect == "barrier divergence" => assert!(matches!(x.defect(), Some("barrier divergence" | "race")), "replay of {w}: {x}"),
        Outcome::Fault(x) => assert_eq!(x.defect(), Some(defect), "replay of {w}: {x}"),
        other => panic!("replay of {w} at {point:?}: {other:?}"),
    }
    *w
}

/// Caught by the execution engine at a sampled point of the leaf, independently of Z3: the
/// fault names the two threads.
fn caught_running(f: &KernelFunction, tree: &Tree, kernel: &Kernel, defect: &str) -> Fault {
    let b = backend();
    let programs = Programs::new(f, schedule_index(f, tree), kernel).unwrap();
    let leaf = kernel_leaves(tree)[0];
    for (i, p) in metafork::verify::sample::points(f, &leaf.correctness_constraints(&tree.machine), &b, 8, 96, 5).unwrap().iter().enumerate() {
        if let Outcome::Fault(x) = run_point(f, &programs, p, i as u64, RACES) {
            assert_eq!(x.defect(), Some(defect), "{x}");
            return x;
        }
    }
    panic!("no sampled point shows the {defect}");
}

/// A race between two threads of one block, found statically (witness replayed) and by the
/// engine at a sampled point.
fn race_within_a_block(f: &KernelFunction, tree: &Tree, kernel: &Kernel) {
    let w = caught(f, tree, kernel, "race");
    assert_eq!(w.first.block, w.second.unwrap().block);
    match caught_running(f, tree, kernel, "race") {
        Fault::Race { first, second, .. } => assert_eq!(first.0.block, second.0.block),
        other => panic!("{other}"),
    }
}

fn first_leaf(tree: &Tree) -> Kernel {
    (*kernel_leaves(tree)[0].staged).clone()
}

#[test]
fn global_write_write_race_across_blocks() {
    let (f, t) = tree_of("void f(int N, int B, const float a[N][N], float c[N]) { assume(N >= 1 && B >= 1); int d = N / B;
      meta_schedule { meta_for (int i = 0; i < N; i++) meta_for (int v = 0; v < d; v++) meta_for (int u = 0; u < B; u++) c[v * B + u] = a[i][v * B + u]; } }");
    let w = caught(&f, &t, &first_leaf(&t), "race");
    assert_ne!(w.first.block, w.second.unwrap().block);
}

#[test]
fn off_by_one_halo_read() {
    let (f, t) = tree_of("void f(int N, int B, const float a[N], float b[N]) { assume(N >= 1 && B >= 1); int d = N / B;
      meta_schedule { meta_for (int v = 0; v < d; v++) meta_for (int u = 0; u < B; u++) { int i = v * B + u; b[i] = a[i] + a[i + 1]; } } }");
    caught(&f, &t, &first_leaf(&t), "out of bounds");
}

#[test]
fn negative_subscript() {
    let (f, t) = tree_of("void f(int N, int B, const float a[N], float b[N]) { assume(N >= 1 && B >= 1); int d = N / B;
      meta_schedule { meta_for (int v = 0; v < d; v++) meta_for (int u = 0; u < B; u++) { int i = v * B + u; b[i] = a[i - 1]; } } }");
    caught(&f, &t, &first_leaf(&t), "out of bounds");
}

/// `&&` and `||` evaluate their right operand only when the left one allows it: a read
/// guarded by `i < n &&` is in bounds in every leaf; the same read behind `i < n ||` happens
/// exactly when `i >= n`, and is caught.
#[test]
fn short_circuit_operands_are_guarded_by_the_left_operand() {
    let guarded = "void f(int n, int B, const float x[n], float y[n]) { assume(n >= 1 && B >= 1); int g = (n + B - 1) / B;
      meta_schedule { meta_for (int v = 0; v < g; v++) meta_for (int u = 0; u < B; u++) { int i = v * B + u; if (i < n && x[i] > 0.0f) y[i] = x[i]; if (!(i >= n || x[i] <= 0.0f)) y[i] = 2.0f * x[i]; } } }";
    let (f, t) = tree_of(guarded);
    let b = backend();
    for leaf in kernel_leaves(&t) {
        let r = check(&f, &leaf.staged, &leaf.correctness_constraints(&t.machine), &b);
        assert!(matches!(r.verdict, Verdict::Proved), "leaf {}: {:?}", leaf.id, r.verdict);
    }
    let (f, t) = tree_of("void f(int n, int B, const float x[n], float y[n]) { assume(n >= 1 && B >= 1); int g = (n + B - 1) / B;
      meta_schedule { meta_for (int v = 0; v < g; v++) meta_for (int u = 0; u < B; u++) { int i = v * B + u; float t = 0.0f; if (i < n || x[i] > 0.0f) t = 1.0f; if (i < n) y[i] = t; } } }");
    let w = caught(&f, &t, &first_leaf(&t), "out of bounds");
    assert!(w.detail.contains("x[i]"), "{w}");
}

#[test]
fn neighbour_reads_an_element_another_thread_writes() {
    let (f, t) = tree_of("void f(int N, int B, float a[N]) { assume(N >= 2 && B >= 1); int d = (N - 1) / B;
      meta_schedule { meta_for (int v = 0; v < d; v++) meta_for (int u = 0; u < B; u++) { int i = v * B + u; a[i] = a[i + 1] * 2.0f; } } }");
    caught(&f, &t, &first_leaf(&t), "race");
}

#[test]
fn granularity_with_a_wrong_stride() {
    // Each thread handles s elements, but strided by 1 instead of B: neighbours overlap.
    let (f, t) = tree_of("void f(int N, int B, int s, const float a[N], float c[N]) { assume(N >= 1 && B >= 1 && s >= 1); int d = N / (B * s);
      meta_schedule { meta_for (int v = 0; v < d; v++) meta_for (int u = 0; u < B; u++) for (int k = 0; k < s; k++) { int p = v * B * s + k + u; if (p < N) c[p] = a[p] + 1.0f; } } }");
    // Statically (the subscripts' digits do not separate the threads), and on the engine at
    // a sampled point.
    let w = caught(&f, &t, &first_leaf(&t), "race");
    assert_ne!(w.first, w.second.unwrap());
    match caught_running(&f, &t, &first_leaf(&t), "race") {
        Fault::Race { first, second, .. } => assert_ne!(first.0, second.0),
        other => panic!("{other}"),
    }
}

/// A leaf of `example` with barriers (shared-memory staging), mutated by `edit`.
fn staged_with_barriers(example: &str) -> (KernelFunction, Tree, Kernel) {
    let (f, t) = example_tree(example);
    let k = (*kernel_leaves(&t).iter().find(|n| !n.staged.shared.is_empty()).expect("a staged leaf").staged).clone();
    (f, t, k)
}

fn map_stmts(stmts: &mut Vec<Stmt>, f: &mut dyn FnMut(&mut Vec<Stmt>)) {
    f(stmts);
    for s in stmts.iter_mut() {
        match &mut s.kind {
            StmtKind::Block(items) => map_stmts(items, f),
            StmtKind::For(l) => map_one(&mut l.body, f),
            StmtKind::If { then_branch, else_branch, .. } => {
                map_one(then_branch, f);
                if let Some(e) = else_branch {
                    map_one(e, f);
                }
            }
            _ => {}
        }
    }
}

fn map_one(s: &mut Stmt, f: &mut dyn FnMut(&mut Vec<Stmt>)) {
    let mut v = vec![s.clone()];
    map_stmts(&mut v, f);
    *s = if v.len() == 1 { v.pop().unwrap() } else { Stmt { kind: StmtKind::Block(v), span: s.span } };
}

fn e(kind: ExprKind) -> Expr {
    Expr::new(kind, Default::default())
}

#[test]
fn shared_tile_read_by_a_neighbour_without_a_barrier() {
    let (f, t, mut k) = staged_with_barriers("jacobi1d");
    map_stmts(&mut k.body, &mut |v| v.retain(|s| !matches!(s.kind, StmtKind::Barrier)));
    // Statically: two threads of one block, one writing a tile element the other reads,
    // in the same barrier interval; and on the engine at a sampled point.
    race_within_a_block(&f, &t, &k);
}

#[test]
fn barrier_inside_a_thread_dependent_branch() {
    let (f, t, mut k) = staged_with_barriers("jacobi1d");
    let mut done = false;
    map_stmts(&mut k.body, &mut |v| {
        for s in v.iter_mut() {
            if !done && matches!(s.kind, StmtKind::Barrier) {
                done = true;
                let cond = e(ExprKind::Binary(BinOp::Lt, Box::new(e(ExprKind::Builtin(Builtin::ThreadIdx(0)))), Box::new(e(ExprKind::Int(1)))));
                *s = Stmt { kind: StmtKind::If { cond, then_branch: Box::new(s.clone()), else_branch: None }, span: s.span };
            }
        }
    });
    assert!(done);
    caught(&f, &t, &k, "barrier divergence");
}

#[test]
fn shared_tile_written_one_past_its_end() {
    let (f, t, mut k) = staged_with_barriers("jacobi1d");
    // The tile is one element short.
    let tile = &mut k.shared[0];
    tile.extents[0] = tile.extents[0].clone() - constraints::Poly::one();
    caught(&f, &t, &k, "out of bounds");
}

/// `k` with `threadIdx` replaced by 0 in its declarations' initialisers: every thread of a
/// block then works on the block's first element.
fn without_the_thread_index(k: &mut Kernel) {
    fn drop_tid(x: &mut Expr) {
        match &mut x.kind {
            ExprKind::Builtin(Builtin::ThreadIdx(_)) => *x = e(ExprKind::Int(0)),
            ExprKind::Binary(_, a, b) => {
                drop_tid(a);
                drop_tid(b);
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => drop_tid(a),
            _ => {}
        }
    }
    map_stmts(&mut k.body, &mut |v| {
        for s in v.iter_mut() {
            if let StmtKind::Decl { vars, .. } = &mut s.kind {
                vars.iter_mut().for_each(|d| drop_tid(&mut d.init));
            }
        }
    });
}

#[test]
fn store_without_the_thread_index() {
    // Every thread of a block writes the block's first element.
    let (f, t) = example_tree("vecadd");
    let mut k = first_leaf(&t);
    without_the_thread_index(&mut k);
    race_within_a_block(&f, &t, &k);
}

#[test]
fn wrong_arithmetic_is_a_mismatch() {
    // Race-free and in bounds, but computes a - b for a + b: only the differential run sees it.
    let (f, t) = example_tree("vecadd");
    let mut k = first_leaf(&t);
    let mut flipped = false;
    map_stmts(&mut k.body, &mut |v| {
        for s in v.iter_mut() {
            if let StmtKind::Assign { value, .. } = &mut s.kind {
                if let ExprKind::Binary(op @ BinOp::Add, ..) = &mut value.kind {
                    *op = BinOp::Sub;
                    flipped = true;
                }
            }
        }
    });
    assert!(flipped);
    let programs = Programs::new(&f, 0, &k).unwrap();
    let point: BTreeMap<String, i64> = [("N", 37), ("B", 4), ("s", 2)].iter().map(|(k, v)| (k.to_string(), *v)).filter(|(k, _)| f.params.iter().any(|p| &p.name == k)).collect();
    match run_point(&f, &programs, &point, 3, RACES) {
        Outcome::Mismatch(d) => assert_eq!(d.array, "c"),
        other => panic!("{other:?}"),
    }
    // Run as the kernel only (`gen`'s check of the schedules as written), nothing is compared:
    // the same kernel passes, each launch counted, its memory taken as the program's.
    match run_point(&f, &programs, &point, 3, RunOptions { kernel_only: true, ..RACES }) {
        Outcome::Passed(stats) => assert!(stats.launches >= 1 && stats.compared == stats.launches, "{stats:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_run_of_the_kernel_only_still_finds_its_races() {
    let (f, t) = example_tree("vecadd");
    let mut k = first_leaf(&t);
    without_the_thread_index(&mut k);
    let programs = Programs::new(&f, schedule_index(&f, &t), &k).unwrap();
    let leaf = kernel_leaves(&t)[0];
    let points = metafork::verify::sample::points(&f, &leaf.correctness_constraints(&t.machine), &backend(), 8, 96, 5).unwrap();
    let mut races = 0;
    for (i, p) in points.iter().enumerate() {
        // Where the full run stops on the race, the kernel-only run stops on the same one.
        if let Outcome::Fault(Fault::Race { first, second, .. }) = run_point(&f, &programs, p, i as u64, RACES) {
            match run_point(&f, &programs, p, i as u64, RunOptions { kernel_only: true, ..RACES }) {
                Outcome::Fault(Fault::Race { first: a, second: b, .. }) => assert_eq!((a, b), (first, second)),
                other => panic!("at {p:?}: {other:?}"),
            }
            races += 1;
        }
    }
    assert!(races > 0, "no sampled point shows the race");
}

// ---- the command line ----

fn metafork(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

#[test]
fn verify_command_exit_codes() {
    let dir = common::scratch("verify_cli");
    let out = dir.join("matadd");
    let o = metafork(&["gen", "--emit-cuda", "examples/matadd.mf", "-o", out.to_str().unwrap(), "--verify"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    // Every kernel leaf (matadd's tree has at least three: plain, granularity-reduced, merged).
    let proved = text.split_once(" leaves proved").map(|(before, _)| before.rsplit('\n').next().unwrap_or("").split_whitespace().collect::<Vec<_>>()).unwrap_or_default();
    assert!(proved.len() >= 3 && proved[proved.len() - 3] == proved[proved.len() - 1] && proved[proved.len() - 1].parse::<usize>().unwrap_or(0) >= 3, "{text}");
    assert_eq!(metafork(&["verify", out.to_str().unwrap()]).status.code(), Some(0));
    // An edited kernel is not what the program generates: a defect, exit 3, naming the file.
    let leaf = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).find(|p| p.to_string_lossy().contains("_leaf")).unwrap();
    std::fs::write(&leaf, "// edited\n").unwrap();
    let o = metafork(&["verify", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("is not what metafork generates") && err.contains(leaf.file_name().unwrap().to_str().unwrap()), "{err}");
    // Not a directory `gen` wrote: unusable input, exit 1.
    let o = metafork(&["verify", dir.join("missing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("missing`: No such file or directory"), "it said `no manifest.json`: {}", String::from_utf8_lossy(&o.stderr));
    // A program whose blocks all write the same elements races as written: `gen` refuses it
    // where the write is (exit 1), with the two threads and the parameters, and writes nothing.
    let src = dir.join("racy.mf");
    std::fs::write(&src, "void f(int N, int B, const float a[N][N], float c[N]) { assume(N >= 1 && B >= 1); int d = N / B;\n  meta_schedule { meta_for (int i = 0; i < N; i++) meta_for (int v = 0; v < d; v++) meta_for (int u = 0; u < B; u++) c[v * B + u] = a[i][v * B + u]; } }\n").unwrap();
    let o = metafork(&["gen", "--emit-cuda", src.to_str().unwrap(), "-o", dir.join("racy").to_str().unwrap(), "--verify"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("racy.mf:2:") && err.contains("races as written") && err.contains("of block") && err.contains("c[v * B + u]"), "{err}");
    assert!(!dir.join("racy").exists());
}

/// Mixed-radix subscripts bounded through a divisibility fact (`NH % (BH*VEC) == 0`, `(W - 4)
/// % (BW*GS) == 0`) and an im2col of polynomial extents: every leaf is proved. Before, Z3 gave
/// up on the degree-3 products (report-13's gelu 14 of 27, rgb 0 of 11, star2d 3 of 7; a
/// helper's im2col 3 of 4). (rotate90's reversed tile row, 12 s here, is
/// `radix::a_reversed_digit_keeps_the_shared_offset`'s.)
#[test]
fn subscripts_bounded_through_the_facts_definitions_are_proved() {
    let dir = common::scratch("verify-definitions");
    let im2col = "void im2col(int C, int H, int W, int K, int B, const float img[C][H][W],\n            float col[C * K * K][(H - K + 1) * (W - K + 1)]) {\n  assume(C >= 1 && K >= 1 && H >= K && W >= K && B >= 1);\n  int OH = H - K + 1, OW = W - K + 1;\n  meta_schedule {\n    meta_for (int r = 0; r < C * K * K; r++)\n      meta_for (int g = 0; g < (OH * OW + B - 1) / B; g++)\n        meta_for (int t = 0; t < B; t++) {\n          int p = g * B + t;\n          int c = r / (K * K);\n          int ki = (r % (K * K)) / K;\n          int kj = r % K;\n          if (p < OH * OW) {\n            int oi = p / OW;\n            int oj = p % OW;\n            col[r][p] = img[c][oi + ki][oj + kj];\n          }\n        }\n  }\n}\n";
    std::fs::write(dir.join("im2col.mf"), im2col).unwrap();
    // A reversed read `x[NH - 1 - h]` of the same shape: the lower bound's `NH` needs the
    // definition too (38 of 47 proved before); a parameter spelled like the facts' quotients.
    let reversed = "void reversed(int NH, int BH, int VEC, int fact_q0, const float x[NH], float y[NH]) {\n  assume(NH >= 1 && BH >= 1 && BH <= 512 && VEC >= 1 && VEC <= 4 && fact_q0 >= 0);\n  assume(NH % (BH * VEC) == 0);\n  int gh = NH / (BH * VEC);\n  meta_schedule {\n    meta_for (int hb = 0; hb < gh; hb++)\n      meta_for (int th = 0; th < BH; th++)\n        for (int v = 0; v < VEC; v++) {\n          int h = (hb * BH + th) * VEC + v;\n          int r = NH - 1 - h;\n          y[h] = x[r] * 2.0f;\n        }\n  }\n}\n";
    std::fs::write(dir.join("reversed.mf"), reversed).unwrap();
    // Written reversed (a helper's sweep): two threads' `y[N - 1 - i]` are equal only where
    // their `i` are, digit for digit (12 of 32 leaves proved in 100 s before, Z3 at its limit).
    let reverse_copy = "void reverse_copy(int N, int B, int V, const float x[N], float y[N]) {\n  assume(N >= 1 && B >= 1 && V >= 1);\n  assume(N % (B * V) == 0);\n  meta_schedule {\n    meta_for (int g = 0; g < N / (B * V); g++)\n      meta_for (int u = 0; u < B; u++)\n        for (int k = 0; k < V; k++) {\n          int i = g * B * V + k * B + u;\n          y[N - 1 - i] = x[i];\n        }\n  }\n}\n";
    std::fs::write(dir.join("reverse_copy.mf"), reverse_copy).unwrap();
    let programs = ["examples/heldout-10/gelu_tanh_bias.mf", "examples/heldout-10/star2d_r2_weights.mf", "examples/heldout-10/rgb_to_gray_fixed.mf"].map(std::path::PathBuf::from);
    for (k, program) in programs.iter().cloned().chain([dir.join("im2col.mf"), dir.join("reversed.mf"), dir.join("reverse_copy.mf")]).enumerate() {
        let out = dir.join(format!("out{k}"));
        let g = metafork(&["gen", "--emit-cuda", program.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(g.status.success(), "{}: {}", program.display(), String::from_utf8_lossy(&g.stderr));
        let v = metafork(&["verify", out.to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&v.stdout);
        let last = stdout.lines().last().unwrap_or("");
        let words: Vec<&str> = last.split_whitespace().collect();
        assert!(v.status.code() == Some(0) && words.len() >= 4 && words[0] == words[2] && words[3] == "leaves" && !last.contains("unreachable"), "{}: {stdout}", program.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A leaf no CPU run can reach, because a fact puts every point past the sampler's sizes
/// (`REP >= 1000000`), is unverified and says which fact (a helper's sweep: only "no small
/// parameter point" before, with nothing to say why).
#[test]
fn a_fact_that_forces_large_sizes_is_named_when_no_point_can_run() {
    let dir = common::scratch("verify-large-fact");
    let src = dir.join("spin.mf");
    std::fs::write(&src, "void spin(int N, int B, int REP, const float a[N], float b[N]) {\n  assume(N >= 1 && B >= 1 && REP >= 1000000 && REP <= 2000000);\n  meta_schedule {\n    meta_for (int g = 0; g < (N + B - 1) / B; g++)\n      meta_for (int t = 0; t < B; t++) {\n        int i = g * B + t;\n        if (i < N) {\n          float x = a[i];\n          for (int r = 0; r < REP; r++)\n            x = x * 0.999f + 0.001f;\n          b[i] = x;\n        }\n      }\n  }\n}\n").unwrap();
    let out = dir.join("out");
    let g = metafork(&["gen", "--emit-cuda", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let v = metafork(&["verify", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(4), "{stdout}");
    let leaves: Vec<&str> = stdout.lines().filter(|l| l.contains(" leaf ")).collect();
    assert!(!leaves.is_empty() && leaves.iter().all(|l| l.contains("UNVERIFIED") && l.contains("the fact `REP >= 1000000` puts every point past the sizes the CPU runs take")), "{stdout}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A race between a read and a write that prints like an earlier read (`B[i][j]` read at the
/// top of the loop, written at its end) is placed at the access that raced, not at the first
/// access spelled like it (a helper's sweep: trmm over rows was placed at the read on line 9).
#[test]
fn a_race_is_placed_at_its_own_access_when_two_print_alike() {
    let dir = common::scratch("race-place");
    let src = dir.join("trmm_rows.mf");
    std::fs::write(&src, "void trmm_rows(int M, int N, int BS, double alpha, const double A[M][M], double B[M][N]) {\n  assume(M >= 1 && N >= 1 && BS >= 1);\n  meta_schedule {\n    meta_for (int g = 0; g < (M + BS - 1) / BS; g++)\n      meta_for (int t = 0; t < BS; t++) {\n        int i = g * BS + t;\n        if (i < M) {\n          for (int j = 0; j < N; j++) {\n            double s = B[i][j];\n            for (int k = i + 1; k < M; k++)\n              s += A[k][i] * B[k][j];\n            B[i][j] = alpha * s;\n          }\n        }\n      }\n  }\n}\n").unwrap();
    let o = metafork(&["gen", "--color", "never", src.to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("trmm_rows.mf:12:13: schedule `trmm_rows` races as written") && err.contains("`B[k][j]`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `gen`'s check of the schedules as written runs a launch that repeats an earlier one's
/// arguments and grid only once, where the host program and the kernel decide nothing from
/// array data (a time loop's sweeps). A race from the second time step on is still found:
/// when the kernel reads the time step (`t_guard`), and when a guard reads data that the
/// host writes between the steps (`data_guard`; the kernel never reads `t`).
#[test]
fn a_time_loop_is_checked_at_every_step_that_can_differ() {
    let dir = common::scratch("time_loop_races");
    let head = "void f(int T, int N, int B, float flag[1], float c[N]) {\n  assume(T >= 2 && N >= 1 && B >= 1);\n  int d = (N + B - 1) / B;\n  for (int t = 0; t < T; t++) {\n    meta_schedule {\n      meta_for (int v = 0; v < d; v++)\n        meta_for (int u = 0; u < B; u++) {\n          int i = v * B + u;\n";
    let programs = [
        ("t_guard", "          if (i < N) { if (t == 0) c[i] = 1.0f; else c[0] = 2.0f; }\n        }\n    }\n  }\n}\n"),
        ("data_guard", "          if (i < N) { if (flag[0] == 7.0f) c[0] = 2.0f; else c[i] = 1.0f; }\n        }\n    }\n    flag[0] = 7.0f;\n  }\n}\n"),
        // The same sweep every step: generated (the check ran it once and found nothing).
        ("same_every_step", "          if (i < N) c[i] = c[i] + 1.0f;\n        }\n    }\n  }\n}\n"),
    ];
    for (name, tail) in programs {
        let src = dir.join(format!("{name}.mf"));
        std::fs::write(&src, format!("{head}{tail}")).unwrap();
        let out = dir.join(name);
        let o = metafork(&["gen", "--emit-cuda", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        if name == "same_every_step" {
            assert_eq!(o.status.code(), Some(0), "{name}: {err}");
            assert!(out.join("tree.yaml").exists(), "{name}");
        } else {
            assert_eq!(o.status.code(), Some(1), "{name}: {err}");
            assert!(err.contains(&format!("{name}.mf:9:")) && err.contains("races as written") && err.contains("c[0]"), "{name}: {err}");
            assert!(!out.exists(), "{name}");
        }
    }
}

/// Issue 26.4: the sampler finds small points where several sizes must each be a multiple of
/// several block sizes at once (3mm's facts, five sizes: `NJ % BX`, `NJ % BY`, `NJ % BK`, ...), and
/// where the region also needs a size large against the blocks (iteration merging's grid
/// fill). Before, the leaves below the merge fork got no point and stayed unverified.
#[test]
fn the_sampler_meets_several_divisibility_facts_at_once() {
    let src = "void mm(int NI, int NJ, int NK, int NL, int NM, int BY, int BX, int BK, double E[NI][NJ], const double A[NI][NK], const double B[NK][NJ], double F[NJ][NL], const double C[NJ][NM], const double D[NM][NL]) {
  assume(NI >= 1 && NJ >= 1 && NK >= 1 && NL >= 1 && NM >= 1 && BY >= 1 && BX >= 1 && BK >= 1);
  assume(NI % BY == 0 && NJ % BX == 0 && NJ % BY == 0 && NL % BX == 0);
  assume(NK % BK == 0 && NM % BK == 0 && NJ % BK == 0);
  int tilesI = NI / BY, tilesJ = NJ / BX, steps = NK / BK;
  meta_schedule cache(A, B) {
    meta_for (int gi = 0; gi < tilesI; gi++)
      meta_for (int gj = 0; gj < tilesJ; gj++)
        for (int kt = 0; kt < steps; kt++)
          meta_for (int li = 0; li < BY; li++)
            meta_for (int lj = 0; lj < BX; lj++) {
              int i = gi * BY + li;
              int j = gj * BX + lj;
              if (kt == 0)
                E[i][j] = 0.0;
              for (int kk = 0; kk < BK; kk++)
                E[i][j] += A[i][kt * BK + kk] * B[kt * BK + kk][j];
            }
  }
}
";
    let (f, tree) = tree_of(src);
    let b = backend();
    let mut merged = 0;
    for leaf in kernel_leaves(&tree) {
        let system = leaf.correctness_constraints(&tree.machine);
        // The seed and budget `verify` gives this leaf.
        let options = Options::default();
        let seed = options.seed ^ (leaf.id as u64).wrapping_mul(0x9e37_79b9);
        let points = metafork::verify::sample::points(&f, &system, &b, options.points, (options.points * 12).max(48), seed).unwrap();
        assert!(!points.is_empty(), "leaf {}: no small point", leaf.id);
        for p in &points {
            assert!(metafork::verify::sample::admits(&system, &b, p), "leaf {}: {p:?} outside its region", leaf.id);
            assert!(p.values().all(|v| *v <= metafork::verify::sample::WIDE_DATA), "leaf {}: {p:?} is not small", leaf.id);
        }
        merged += usize::from(leaf.applied.contains(&metafork::tree::Strategy::Merge));
    }
    assert!(merged > 0, "the tree has merged leaves (the regions that had no point)");
}

/// Issue 26.4: a region with a few small points but fewer than asked still gets the points
/// asked (the default, 8) from a round with larger bounds: matmul's leaves blocked by 8 with
/// `B0 % 4 == 0` hold about ten points below the small bounds, of which the sampler found 6
/// or 7 before.
#[test]
fn narrow_regions_get_the_default_points_from_a_wider_round() {
    let b = backend();
    let (f, tree) = example_tree("matmul");
    let mut narrow = 0;
    for leaf in kernel_leaves(&tree).into_iter().filter(|l| l.constraints.constraints().iter().any(|c| c.to_string() == "s == 8")) {
        let system = leaf.correctness_constraints(&tree.machine);
        let wanted = Options::DEFAULT_POINTS;
        let points = metafork::verify::sample::points(&f, &system, &b, wanted, wanted * 12, 0x6d65_7461_666f_726b ^ leaf.id as u64).unwrap();
        assert_eq!(points.len(), wanted, "leaf {}: {points:?}", leaf.id);
        for p in &points {
            assert!(metafork::verify::sample::admits(&system, &b, p), "leaf {}: {p:?} outside its region", leaf.id);
            assert!(p.values().all(|v| *v <= 2 * metafork::verify::sample::MAX_DATA), "leaf {}: {p:?} is not small", leaf.id);
        }
        narrow += 1;
    }
    assert!(narrow > 0, "matmul has leaves blocked by 8");
}

/// Issue 26.4: a leaf whose region holds fewer small points than asked says so with its
/// verdict (here the facts pin every parameter: one point exists).
#[test]
fn fewer_points_than_asked_are_reported() {
    let src = "void f(int n, int B, const float x[n], float y[n]) {
  assume(n == 8 && B == 4);
  int g = n / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++)
        y[v * B + u] = 2.0f * x[v * B + u];
  }
}
";
    let (f, tree) = tree_of(src);
    let reports = verify_tree(&f, &tree, &backend(), Options::default()).unwrap();
    assert!(!reports.is_empty());
    for r in &reports {
        assert_eq!(r.status(), Status::Proved, "leaf {}", r.leaf);
        assert_eq!(r.points, 1, "leaf {}: one point exists", r.leaf);
        assert_eq!(r.sampling.as_deref(), Some("only 1 distinct small parameter point found in the leaf's region, of 8 asked"));
    }
    let text = metafork::verify::render(&reports);
    assert!(text.contains("1 point matches the serial program (only 1 distinct small parameter point found in the leaf's region, of 8 asked)"), "{text}");
}

/// A data parameter whose facts keep it at or below zero still gets points: `-3 <= k <= -1`
/// (a shift read as `a[i - k]`) was never drawn, every data parameter being drawn, and then
/// searched by Z3, from 1, so every leaf was unverified for want of a point. So was a leaf
/// where `n == 1` leaves only `k == 0` of `0 <= k < n`.
#[test]
fn data_parameters_the_facts_keep_at_or_below_zero_are_sampled() {
    let src = "void shift_left(int n, int B, int k, const float a[n + 3], float y[n]) {
  assume(n >= 1 && B >= 1 && k >= -3 && k <= -1);
  int g = (n + B - 1) / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        if (i < n) y[i] = a[i - k];
      }
  }
}
";
    let (f, tree) = tree_of(src);
    let reports = verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap();
    assert!(!reports.is_empty());
    for r in &reports {
        assert_eq!(r.status(), Status::Proved, "leaf {}", r.leaf);
        assert!(r.points >= 1, "leaf {}", r.leaf);
    }
    // `n == 1` with `0 <= k < n`: the one point has `k == 0`.
    let src = src.replace("k >= -3 && k <= -1", "k >= 0 && k < n");
    let (f, mut tree) = tree_of(&src);
    let leaf = kernel_leaves(&tree)[0].id;
    tree.nodes[leaf].constraints.add(constraints::Constraint::eq(&constraints::Poly::var("n"), &constraints::Poly::one()));
    let system = tree.nodes[leaf].correctness_constraints(&tree.machine);
    let points = metafork::verify::sample::points(&f, &system, &backend(), 2, 24, 7).unwrap();
    assert!(!points.is_empty() && points.iter().all(|p| p["n"] == 1 && p["k"] == 0), "{points:?}");
}

/// Issue 26.4: blame goes to the schedule where the fault is. Of three schedules in a time
/// loop, the middle one reads one past its array's end. Its leaves are defects; the first
/// schedule's leaves are proved (each launch is compared with the serial code from the state
/// the program reaches, before the fault); the last schedule never runs before the fault, so
/// its leaves are unverified and say which schedule stops the program, never a defect.
#[test]
fn one_faulty_schedule_among_correct_ones_is_blamed_alone() {
    let src = "void steps(int T, int n, int B, float u[n], float v[n], float w[n]) {
  assume(T >= 1 && n >= 2 && B >= 1);
  int g = (n + B - 1) / B;
  for (int t = 0; t < T; t++) {
    meta_schedule {
      meta_for (int b = 0; b < g; b++)
        meta_for (int x = 0; x < B; x++) { int i = b * B + x; if (i < n) u[i] = u[i] + v[i]; }
    }
    meta_schedule {
      meta_for (int b = 0; b < g; b++)
        meta_for (int x = 0; x < B; x++) { int i = b * B + x; if (i < n) v[i] = 0.5f * v[i] + w[i + 1]; }
    }
    meta_schedule {
      meta_for (int b = 0; b < g; b++)
        meta_for (int x = 0; x < B; x++) { int i = b * B + x; if (i < n) w[i] = w[i] - u[i]; }
    }
  }
}
";
    let b = backend();
    let trees = common::trees_of("blame.mf", src, &b);
    assert_eq!(trees.len(), 3);
    let faulty = trees[0].0.schedules[1].name.clone();
    for (k, (f, tree)) in trees.iter().enumerate() {
        let reports = verify_tree(f, tree, &b, Options { points: 2, ..Options::default() }).unwrap();
        assert!(!reports.is_empty());
        for r in &reports {
            match (k, r.status()) {
                (0, Status::Proved) => assert!(r.points >= 1),
                (1, Status::Defect("out of bounds", msg)) => assert!(msg.contains("w[i + 1]"), "{msg}"),
                (2, Status::Unverified(why)) => assert!(why.contains(&format!("stops in schedule `{faulty}` before this schedule runs")) && why.contains("w[i + 1]"), "{why}"),
                (_, other) => panic!("schedule {k} leaf {}: {other:?}", r.leaf),
            }
        }
    }
}

/// A blur whose subscripts are clamped with `min`/`max`/`abs`, written `body` at its centre.
fn clamped(body: &str) -> String {
    format!(
        "void blur(int n, int m, int BX, int BY, const float in[n][m], float out[n][m]) {{
  assume(n >= 1 && m >= 1 && BX >= 1 && BY >= 1);
  int gx = (m + BX - 1) / BX, gy = (n + BY - 1) / BY;
  meta_schedule {{
    meta_for (int by = 0; by < gy; by++)
      meta_for (int bx = 0; bx < gx; bx++)
        meta_for (int ty = 0; ty < BY; ty++)
          meta_for (int tx = 0; tx < BX; tx++) {{
            int i = by * BY + ty;
            int j = bx * BX + tx;
            if (i < n && j < m) {{ {body} }}
          }}
  }}
}}
"
    )
}

/// Issue 26.4: `min`/`max`/`abs` subscripts are modelled (each choice a case of the access),
/// so clamped borders are proved in bounds, written inline, nested, or through a local; before,
/// every such leaf was unverified ("subscript 2 ... is not modelled").
#[test]
fn clamped_subscripts_are_proved() {
    let b = backend();
    for body in [
        "out[i][j] = (in[i][max(j - 1, 0)] + in[i][j] + in[i][min(j + 1, m - 1)]) / 3.0f;",
        "int jl = min(max(j - 1, 0), m - 1); out[i][j] = in[i][jl] + in[max(i, 1) - 1][abs(j - 1) % m];",
    ] {
        let (f, tree) = tree_of(&clamped(body));
        let reports = verify_tree(&f, &tree, &b, Options { points: 2, ..Options::default() }).unwrap();
        assert!(!reports.is_empty());
        for r in &reports {
            assert_eq!(r.status(), Status::Proved, "{body}: leaf {}", r.leaf);
        }
    }
}

/// A histogram over data: `h[s[k]] += 1`, its subscript an element of an array the kernel only
/// reads. Before, every leaf was unverified ("subscript 1 of `h[s[k]]` is not modelled").
fn histogram(elem: &str, body: &str) -> String {
    format!("void hist(int n, int B, const {elem} s[n], int t[n], int h[256]) {{\n  assume(n >= 1 && B >= 1);\n  meta_schedule {{\n    meta_for (int i = 0; i < (n + B - 1) / B; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int k = i * B + j;\n        if (k < n) {{ {body} }}\n      }}\n  }}\n}}\n")
}

/// In bounds by a guard on the element, or by the element's type (a `char` plus 128), and
/// atomic adds: proved at every leaf. Off by one, or a write that two threads may share: the
/// proof cannot exclude the data that would do it, and says so, naming the array read, without
/// calling it a defect (the values Z3 picks may be no input's).
#[test]
fn subscripts_read_from_data_are_proved_within_their_guards() {
    let b = backend();
    for (elem, body) in [
        ("int", "if (s[k] >= 0 && s[k] < 256) h[s[k]] += 1;"),
        ("char", "int c = s[k]; h[c + 128] += 1;"),
        ("int", "if (s[0] >= 0 && s[0] < 256) h[s[0]] += 1;"),
        // A clamp written with `?:` (a sweep found it "not modelled").
        ("int", "int c = s[k] < 0 ? 0 : (s[k] > 255 ? 255 : s[k]); h[c] += 1;"),
    ] {
        let (f, tree) = tree_of(&histogram(elem, body));
        let reports = verify_tree(&f, &tree, &b, Options { points: 2, ..Options::default() }).unwrap();
        assert!(!reports.is_empty());
        for r in &reports {
            assert_eq!(r.status(), Status::Proved, "{body}: leaf {}", r.leaf);
        }
    }
    for (elem, body, defect) in [
        ("int", "if (s[k] >= 0 && s[k] <= 256) h[s[k]] += 1;", "possible out of bounds (`h[s[k]]` writes outside `h`'s extents) for some values of `s`"),
        ("char", "int c = s[k]; h[c + 127] += 1;", "possible out of bounds (`h[c + 127]` writes outside `h`'s extents) for some values of `s`"),
        ("int", "if (s[k] >= 0 && s[k] < n) t[s[k]] = 1;", "possible race (`t[s[k]]` (write) and `t[s[k]]` (write) may touch the same element of `t`) for some values of `s`"),
        // A guard on a narrowed copy says nothing of the value: `(char)s[k]` of -255 is 1, and
        // `int c = s[k]` of a `long` 2^32 + 5 is 5 (both were "proved" in a sweep).
        ("int", "if ((char)s[k] >= 0 && s[k] < 256) h[s[k]] += 1;", "possible out of bounds (`h[s[k]]` writes outside `h`'s extents) for some values of `s`"),
        ("long", "int c = s[k]; if (c >= 0 && c < 256) h[s[k]] += 1;", "possible out of bounds (`h[s[k]]` writes outside `h`'s extents) for some values of `s`"),
        ("int", "int c = s[k] < 0 ? 0 : (s[k] > 256 ? 256 : s[k]); h[c] += 1;", "possible out of bounds (`h[c]` writes outside `h`'s extents) for some values of `s`"),
    ] {
        let (f, tree) = tree_of(&histogram(elem, body));
        let r = check(&f, &first_leaf(&tree), &tree.root_constraints, &b);
        match r.verdict {
            Verdict::Unverified(why) => {
                assert!(why.contains(defect), "{body}: {why}");
                let way_out = if defect.starts_with("possible race") { "a sum written `+=` (an atomic add) is proved whatever they hold" } else { "a guard on the subscript's value as it is read" };
                assert!(why.contains(way_out), "{body}: {why}");
            }
            other => panic!("{body}: {other:?}"),
        }
    }
    // An array the kernel writes is not taken for data that stays put.
    let (f, tree) = tree_of(&histogram("int", "t[k] = s[k]; if (t[k] >= 0 && t[k] < 256) h[t[k]] += 1;"));
    match check(&f, &first_leaf(&tree), &tree.root_constraints, &b).verdict {
        Verdict::Unverified(why) => assert!(why.contains("subscript 1 of `h[t[k]]` is not modelled"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A clamp off by one is out of bounds, and a `max` that maps two threads to one element is a
/// race: each found by Z3 with a witness the engine replays.
#[test]
fn clamps_that_are_wrong_are_defects() {
    let (f, tree) = tree_of(&clamped("out[i][j] = in[i][min(j + 1, m)];"));
    let w = caught(&f, &tree, &first_leaf(&tree), "out of bounds");
    assert!(w.to_string().contains("min(j + 1, m)"), "{w}");
    let (f, tree) = tree_of(&clamped("out[i][max(j, 1) - 1] = in[i][j];"));
    caught(&f, &tree, &first_leaf(&tree), "race");
}

/// A parameter is a value of its C type: an `int N` bounds `p < N` within a constant extent of
/// 2^31 - 1, so the static check proves the accesses in bounds. Before, it reported a witness
/// at `N = 2147483877`, a value no call of the kernel passes. With `long N` the same accesses
/// do leave the array, and the witness is in `long`'s range.
#[test]
fn parameters_are_bounded_by_their_c_types() {
    let src = |ty: &str| {
        format!(
            "void big({ty} N, int B, const float x[2147483647], float y[2147483647]) {{
  assume(N >= 1 && B >= 1);
  {ty} dim = (N + B - 1) / B;
  meta_schedule {{
    meta_for ({ty} i = 0; i < dim; i++)
      meta_for (int j = 0; j < B; j++) {{
        {ty} p = i * B + j;
        if (p < N)
          y[p] = 2.0f * x[p];
      }}
  }}
}}
"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src("int"));
    let r = check(&f, &first_leaf(&tree), &tree.root_constraints, &b);
    assert!(matches!(r.verdict, Verdict::Proved), "{:?}", r.verdict);
    let (f, tree) = tree_of(&src("long"));
    let r = check(&f, &first_leaf(&tree), &tree.root_constraints, &b);
    let Verdict::Defect(w) = r.verdict else { panic!("expected out of bounds, got {:?}", r.verdict) };
    assert_eq!(w.defect, "out of bounds", "{w}");
    assert!(w.params["N"] > i64::from(i32::MAX), "{w}");
}

/// A wavefront whose schedule runs inside `for (d = 1; d < n; d++)`, as PolyBench's nussinov:
/// a leaf whose region is `n == 1` never launches (the loop does not iterate), so no point of
/// it can run, and `verify` called it unverified ("the schedule does not run at this point").
/// With the loop's bounds in the proof it is unreachable, and the run exits 0. A leaf at
/// `n == 2` (one iteration) is run and proved, not called unreachable; nor is a leaf at
/// `n == 1` of the same schedule outside any loop.
#[test]
fn a_leaf_whose_host_loop_never_iterates_is_unreachable() {
    let src = |looped: bool| {
        let (open, close, d) = if looped { ("for (int d = 1; d < n; d++) {", "}", "d") } else { ("", "", "1") };
        format!(
            "void wave(int n, int B, float a[n]) {{
  assume(n >= 1 && B >= 1);
  int g = (n + B - 1) / B;
  {open}
    meta_schedule {{
      meta_for (int v = 0; v < g; v++)
        meta_for (int u = 0; u < B; u++) {{
          int i = v * B + u;
          if (i + {d} < n)
            a[i] = a[i] + a[i + {d}];
        }}
    }}
  {close}
}}"
        )
    };
    let b = backend();
    let region = |tree: &Tree, n: i64| {
        let mut tree = tree.clone();
        let id = kernel_leaves(&tree)[0].id;
        tree.nodes[id].constraints.add(constraints::Constraint::eq(&constraints::Poly::var("n"), &constraints::Poly::int(n)));
        (tree, id)
    };
    let (f, looped) = tree_of(&src(true));
    for (n, expected) in [(1, Status::Unreachable), (2, Status::Proved)] {
        let (tree, id) = region(&looped, n);
        let reports = metafork::verify::verify_leaves(&f, &tree, &b, Options { points: 2, ..Options::default() }, &|l| l == id, &|| {}).unwrap();
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].status(), expected, "n == {n}: {}", metafork::verify::render(&reports));
        assert_eq!(metafork::verify::exit_code(&reports), 0);
    }
    let (f, plain) = tree_of(&src(false));
    let (tree, id) = region(&plain, 1);
    let reports = metafork::verify::verify_leaves(&f, &tree, &b, Options { points: 2, ..Options::default() }, &|l| l == id, &|| {}).unwrap();
    assert_eq!(reports[0].status(), Status::Proved, "{}", metafork::verify::render(&reports));
    // A counter spelled as a machine symbol (`R`, the registers per thread) is another variable:
    // `for (int R = 0; R < 1; R++)` iterates once whatever the device's `32 <= R`.
    let (f, named) = tree_of(&src(true).replace("for (int d = 1; d < n; d++)", "for (int R = 0; R < 1; R++)").replace("i + d", "i + 1"));
    let leaf = kernel_leaves(&named)[0];
    assert_eq!(leaf.staged.host_loops[0].var, "R");
    let mut system = leaf.correctness_constraints(&named.machine);
    system.add(constraints::Constraint::le(&constraints::Poly::int(32), &constraints::Poly::var(&named.machine.registers_per_thread)));
    assert!(!metafork::verify::sample::unreachable(&f, &system, &leaf.staged.host_loops, &b), "the counter `R` is not the machine's `R`");
}

/// A row dot product with hostile names (`new`, `class`, `template`), a cached vector whose tile
/// spans a tile loop bounded by a derived quotient (`tiles = k / T`), and divisibility facts by
/// products of parameters. Before: `gen` failed (the shared-memory counter named `tiles`, which
/// the dispatcher cannot evaluate); leaves empty under `k % T == 0` were unverified; leaves
/// needing `m >= 256` (`32 <= B`, `new == 8`, `m % (B * new) == 0`) found no point. The tree
/// had 119 such empty leaves (`k == 1` beside `T % 4 == 0`) and a `32 <= B` fork; since forks
/// that choose nothing are collapsed (issue 25) it has neither, so both regions are made here
/// from leaves of the tree: one with `k == 1` added, empty under the facts Z3 is not given,
/// and the `new == 8` leaf with `32 <= B` added.
#[test]
fn derived_tile_sizes_unreachable_leaves_and_large_sizes() {
    let src = "void rowdot(int m, int k, int B, int T, int new, const float a[m][k], const float x[k], float y[m]) {
  assume(m >= 1 && k >= 1 && B >= 1 && T >= 1 && new >= 1);
  assume(m % (B * new) == 0 && k % T == 0 && T % 4 == 0);
  int g = m / (B * new), tiles = k / T;
  meta_schedule cache(x) {
    meta_for (int class = 0; class < g; class++)
      meta_for (int template = 0; template < B; template++)
        for (int w = 0; w < new; w++) {
          int i = (class * new + w) * B + template;
          float s = 0.0f;
          for (int t = 0; t < tiles; t++)
            for (int j = 0; j < T; j++)
              s += a[i][t * T + j] * x[t * T + j];
          y[i] = s;
        }
  }
}
";
    let b = backend();
    let (f, tree) = tree_of(src);
    // The counters name parameters only (`tiles * T` bounded by `k`), so the tables compile.
    metafork::dispatch::Dispatcher::new(&f, &tree).unwrap();
    let leaves = kernel_leaves(&tree);
    assert!(leaves.iter().any(|l| l.counters.shared_bytes.to_string() == "4*k"), "the cached tile is bounded by k");
    let has = |l: &metafork::tree::Node, c: &str| l.constraints.constraints().iter().any(|x| x.to_string() == c);
    assert!(!leaves.iter().any(|l| has(l, "k == 1")), "no leaf of k == 1 is left beside its siblings");
    let large = leaves.iter().find(|l| has(l, "new == 8")).expect("a blocked leaf").id;
    // Empty under the facts Z3 was not given (`k % T == 0` and `T % 4 == 0` with `k == 1`): no
    // point, and Z3 proves it unreachable.
    let mut tree = tree.clone();
    let empty = leaves.iter().find(|l| l.id != large).expect("a second kernel leaf").id;
    tree.nodes[empty].constraints.add(constraints::Constraint::eq(&constraints::Poly::var("k"), &constraints::Poly::one()));
    // Warp-wide: with `new == 8` and `m % (B * new) == 0`, sizes start at 256.
    tree.nodes[large].constraints.add(constraints::Constraint::le(&constraints::Poly::int(32), &constraints::Poly::var("B")));
    let (empty, large) = (&tree.nodes[empty], &tree.nodes[large]);
    let system = empty.correctness_constraints(&tree.machine);
    assert!(metafork::verify::sample::unreachable(&f, &system, &empty.staged.host_loops, &b));
    let reports = metafork::verify::verify_leaves(&f, &tree, &b, Options { points: 1, ..Options::default() }, &|id| id == empty.id || id == large.id, &|| {}).unwrap();
    assert_eq!(reports.len(), 2);
    let report = reports.iter().find(|r| r.leaf == empty.id).unwrap();
    assert_eq!(report.status(), Status::Unreachable);
    assert_eq!(metafork::verify::exit_code(&reports), 0, "{}", metafork::verify::render(&reports));
    // A region whose sizes start at 256 gets its point, and is not called unreachable.
    let system = large.correctness_constraints(&tree.machine);
    assert!(!metafork::verify::sample::unreachable(&f, &system, &large.staged.host_loops, &b));
    let r = reports.iter().find(|r| r.leaf == large.id).unwrap();
    assert_eq!(r.status(), Status::Proved);
    let points = metafork::verify::sample::points(&f, &system, &b, 1, 48, 7).unwrap();
    assert!(points.iter().all(|p| p["m"] >= 256 && p["m"] % (p["B"] * p["new"]) == 0), "{points:?}");
    // The search stops with the budget: asked for more points than the region holds, with
    // no end to its attempts and no time left, it returns (`verify --points` once ran for
    // minutes past --time-limit) with fewer points than asked.
    let spent = constraints::budget::with_share(std::time::Duration::ZERO, || metafork::verify::sample::points(&f, &system, &b, metafork::verify::Options::MAX_POINTS, usize::MAX, 7));
    assert!(spent.unwrap().len() < metafork::verify::Options::MAX_POINTS);
}

/// A condition on a floating parameter is not a condition on an integer: `alpha > 2 &&
/// alpha < 3` has no integer solution, and was read as one, so the racy branch it guards was
/// called unreachable and the leaf proved (the seeded inputs, in [-1, 1), never reach it
/// either). The static check must find the race.
#[test]
fn conditions_on_floating_parameters_are_not_integer_facts() {
    let src = "void fg(int n, int B, float alpha, const float x[n], float y[n]) {
  assume(n >= 1 && B >= 1);
  int g = (n + B - 1) / B;
  meta_schedule {
    meta_for (int b = 0; b < g; b++)
      meta_for (int u = 0; u < B; u++) {
        int i = b * B + u;
        if (i < n) {
          if (alpha > 2 && alpha < 3)
            y[0] = x[i];
          else
            y[i] = x[i];
        }
      }
  }
}
";
    // The floating condition is no integer fact, so the race is not proved away; and since
    // the model leaves it out, no witness can say it holds: the race is possible, not shown.
    // (Were it `alpha > 3 && alpha < 2`, `y[0]` would never be written, and a "defect" with
    // a witness would be false: that case gives the same answer.)
    for condition in ["alpha > 2 && alpha < 3", "alpha > 3 && alpha < 2"] {
        let (f, tree) = tree_of(&src.replace("alpha > 2 && alpha < 3", condition));
        for leaf in kernel_leaves(&tree) {
            let r = check(&f, &leaf.staged, &leaf.correctness_constraints(&tree.machine), &backend());
            match r.verdict {
                Verdict::Unverified(why) => assert!(why.contains("possible race") && why.contains("y[0]"), "{condition}, leaf {}: {why}", leaf.id),
                other => panic!("{condition}, leaf {}: {other:?}", leaf.id),
            }
        }
    }
}

/// A schedule that indexes outside an array as written (`x[i + 1]` for the last `i`) is refused
/// by `gen` where the access is, with the element, the extents, the thread and the parameters;
/// nothing is written.
#[test]
fn gen_refuses_a_schedule_that_indexes_outside_an_array_as_written() {
    let dir = common::scratch("gen-out-of-bounds");
    let src = dir.join("shift.mf");
    std::fs::write(&src, "void shift(int n, int B, const float x[n], float y[n]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          y[i] = x[i + 1];\n      }\n  }\n}\n").unwrap();
    let out = dir.join("out");
    let o = metafork(&["gen", "--emit-cuda", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("shift.mf:9:18") && err.contains("indexes outside `x`") && err.contains("`x[i + 1]`") && err.contains("has extents") && err.contains("of block"), "{err}");
    assert!(err.contains("every kernel would make this access") && !err.contains("contents"), "{err}");
    assert!(!out.exists());
    // With the guard that keeps `i + 1` inside, the same program generates.
    std::fs::write(&src, std::fs::read_to_string(&src).unwrap().replace("if (i < n)", "if (i + 1 < n)")).unwrap();
    let o = metafork(&["gen", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A subscript read from an array (`x[idx[i]]`) or bounded by one (CSR's `for (j = ptr[i];
/// ...) val[j]`) that the check of a schedule as written finds outside its array, with contents
/// of the check's choosing, is refused as an access the data may make, naming the array the
/// subscript depends on and a guard (not a fact, which cannot bound contents); the guard it
/// names, written in, makes the program generate.
#[test]
fn an_access_outside_its_array_through_data_read_subscripts_names_the_contents_and_a_guard() {
    let dir = common::scratch("gen-data-subscript");
    let cases = [
        ("gather", "void gather(int N, int M, int B, const int idx[N], const float x[M], float y[N]) {\n  assume(N >= 1 && M >= 1 && B >= 1 && N % B == 0);\n  meta_schedule { meta_for (int g = 0; g < N / B; g++) meta_for (int t = 0; t < B; t++) {\n    int i = g * B + t;\n    int k = idx[i];\n    y[i] = x[k];\n  } }\n}\n", "y[i] = x[k];", "`idx`", "`x`", "if (0 <= k && k < M)"),
        ("spmv", "void spmv(int N, int NNZ, int B, const int ptr[N + 1], const float val[NNZ], float y[N]) {\n  assume(N >= 1 && NNZ >= 1 && B >= 1 && N % B == 0);\n  meta_schedule { meta_for (int g = 0; g < N / B; g++) meta_for (int t = 0; t < B; t++) {\n    int i = g * B + t;\n    float s = 0.0f;\n    for (int j = ptr[i]; j < ptr[i + 1]; j++)\n      s += val[j];\n    y[i] = s;\n  } }\n}\n", "s += val[j];", "`ptr`", "`val`", "if (0 <= j && j < NNZ)"),
    ];
    for (name, text, statement, source, array, guard) in cases {
        let src = dir.join(format!("{name}.mf"));
        std::fs::write(&src, text).unwrap();
        let out = dir.join(format!("{name}-out"));
        let o = metafork(&["gen", "--emit-cuda", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains(&format!("may index outside {array}")) && err.contains(&format!("when {source} holds values the check chose")), "{name}: {err}");
        assert!(err.contains(&format!("depends on the contents of {source}")) && err.contains(&format!("`{guard}`")) && !err.contains("every kernel would make this access"), "{name}: {err}");
        assert!(!out.exists(), "{name}");
        // The guard the note names, written around the statement, makes the program generate.
        std::fs::write(&src, text.replace(statement, &format!("{guard} {statement}"))).unwrap();
        let o = metafork(&["gen", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "{name} guarded: {}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A scatter whose subscript is read from an array (`y[j] = x[i]`, `j` from `idx[i]`) that
/// the check as written finds two iterations writing alike is refused as a race the data may
/// make, naming the array and the ways out; the sum it suggests (`+=`) generates and is proved.
#[test]
fn a_race_through_a_data_read_subscript_names_the_contents_and_the_ways_out() {
    let dir = common::scratch("gen-data-race");
    let text = "void scatter(int N, int M, int B, const int idx[N], const float x[N], float y[M]) {\n  assume(N >= 1 && M >= 1 && B >= 1 && N % B == 0);\n  meta_schedule { meta_for (int g = 0; g < N / B; g++) meta_for (int t = 0; t < B; t++) {\n    int i = g * B + t;\n    int j = ((idx[i] % M) + M) % M;\n    y[j] = x[i];\n  } }\n}\n";
    let src = dir.join("scatter.mf");
    std::fs::write(&src, text).unwrap();
    let out = dir.join("out");
    let o = metafork(&["gen", "--emit-cuda", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("may race as written") && err.contains("when `idx` holds values the check chose"), "{err}");
    assert!(err.contains("depends on the contents of `idx`") && err.contains("write `+=`") && err.contains("gather through its inverse"), "{err}");
    assert!(!out.exists());
    std::fs::write(&src, text.replace("y[j] = x[i];", "y[j] += x[i];")).unwrap();
    let o = metafork(&["gen", "--emit-cuda", src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = metafork(&["verify", out.to_str().unwrap()]);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && report.contains("leaves proved") && !report.contains("UNVERIFIED") && !report.contains("DEFECT"), "{report}{}", String::from_utf8_lossy(&o.stderr));
}

/// A run's step budget: a kernel loop of a million iterations finishes under the default
/// budget and stops, as an error (not a defect), under a budget of ten thousand steps, which
/// `gen`'s check of a schedule as written uses (scaled up) so that a program looping long at
/// its smallest points costs it a second, not the half minute the default allows.
#[test]
fn a_run_stops_at_its_step_budget() {
    let src = "void spin(int n, int B, float x[n]) {
  assume(n >= 1 && B >= 1);
  meta_schedule {
    meta_for (int v = 0; v < (n + B - 1) / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        if (i < n)
          for (int k = 0; k < 1000000; k++)
            x[i] += 1.0f;
      }
  }
}
";
    let mut p = metafork::frontend::check_source("spin.mf", src).unwrap();
    let f = p.kernels.remove(0);
    let kernel = Kernel::from_schedule(&f, &f.schedules[0]).unwrap();
    let programs = Programs::new(&f, 0, &kernel).unwrap();
    let at: BTreeMap<String, i64> = [("n".to_string(), 1), ("B".to_string(), 1)].into();
    assert!(matches!(run_point(&f, &programs, &at, 1, RACES), Outcome::Passed(_)));
    match run_point(&f, &programs, &at, 1, RunOptions { step_budget: Some(10_000), ..RACES }) {
        Outcome::Fault(Fault::Error(e)) => assert!(e.contains("step budget"), "{e}"),
        Outcome::Unusable(e) => assert!(e.contains("step budget"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// A message about generated code names what the leaf's `.cu` file holds: under the root's
/// system (weaker than a leaf's; `verify` re-checks a defect found there under the leaf's
/// own constraints), matmul's register-blocked code reads `c` outside its extents at
/// `dim0 = 1`, through the tool's own counters, which its CUDA spells `metafork_p_b0` and
/// `metafork_q_b0`. The message used to print the internal `$p_b0`.
#[test]
fn verifier_messages_spell_made_up_names_as_the_cuda_does() {
    let b = backend();
    let (f, tree) = example_tree("matmul");
    let mut seen = 0;
    for leaf in kernel_leaves(&tree) {
        let mut system = tree.root_constraints.clone();
        leaf.staged.assumptions.iter().for_each(|c| system.add(c.clone()));
        let text = match metafork::verify::twothread::check(&f, &leaf.staged, &system, &b).verdict {
            metafork::verify::twothread::Verdict::Defect(w) => w.to_string(),
            metafork::verify::twothread::Verdict::Unverified(why) => why,
            metafork::verify::twothread::Verdict::Proved => continue,
        };
        assert!(!text.contains('$'), "leaf {}: {text}", leaf.id);
        let cuda = metafork::emit::cuda::emit_kernel(&f, &leaf.staged, &[]).unwrap();
        if text.contains("metafork_p_b0") {
            assert!(cuda.contains("int metafork_p_b0 ="), "leaf {}: {text}", leaf.id);
            // A `$` inside a name (a second thread's copy) is not the start of one.
            assert_eq!(metafork::emit::cuda::spell_internal_names(&leaf.staged, "`i$2` and $p_b0, ($q_b0)"), "`i$2` and metafork_p_b0, (metafork_q_b0)");
            // The engine's sites (what a run's fault prints) are spelled alike.
            let sites = metafork::verify::code::kernel(&leaf.staged).unwrap().sites;
            assert!(sites.iter().all(|s| !s.contains('$')), "leaf {}: {sites:?}", leaf.id);
            assert!(sites.iter().any(|s| s.contains("metafork_p_b0")), "leaf {}: {sites:?}", leaf.id);
            seen += 1;
            break;
        }
    }
    assert!(seen > 0, "a register-blocked matmul leaf's root-system message names metafork_p_b0");
}

/// A guard the model only weakens (`p < N || 0`, `p < N ? 1 : 0`, `(p < N) == 1`): a point
/// its constraints admit need not reach the access, so a sat bounds query is no defect (it
/// was reported as one, with a witness the guard excludes). Without the guard the same read
/// is still a defect, found with a witness.
#[test]
fn a_guard_not_modelled_whole_leaves_the_bounds_unverified_never_a_defect() {
    let b = backend();
    let program = |guard: &str| format!("void f(int N, int B, const float x[N], float y[N]) {{\n  assume(N >= 1 && B >= 1);\n  meta_schedule {{\n    meta_for (int i = 0; i < (N + B - 1) / B; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = i * B + j;\n        {guard} y[p] = x[p];\n      }}\n  }}\n}}\n");
    for guard in ["if (p < N || 0)", "if (p < N || p < 0)", "if (p < N ? 1 : 0)", "if ((p < N) == 1)"] {
        let (f, tree) = tree_of(&program(guard));
        match check(&f, &first_leaf(&tree), &tree.root_constraints, &b).verdict {
            Verdict::Unverified(why) => assert!(why.contains("possible out of bounds") && why.contains("not exact"), "{guard}: {why}"),
            Verdict::Proved => {}
            other => panic!("{guard}: {other:?}"),
        }
    }
    let (f, tree) = tree_of(&program(""));
    assert!(matches!(check(&f, &first_leaf(&tree), &tree.root_constraints, &b).verdict, Verdict::Defect(_)), "an unguarded read past N is a defect");
}

/// A region that forces a parameter large (`32 <= T`, as a leaf for big tiles does) is sampled
/// in the wide round; what it leaves free is then made small: every point has one head and
/// the smallest sequence the fact `n % T == 0` allows. (An attention program's sampled
/// `heads = 85` multiplied every run's work by 85, and 32 of its 81 leaves were left
/// unverified when four minutes ran out; now all are proved in seconds, bench/RESULTS.md.)
#[test]
fn a_wide_rounds_points_keep_what_the_region_leaves_free_small() {
    let src = "void f(int heads, int n, int T, const float q[heads][n], float o[heads][n]) {
  assume(heads >= 1 && n >= 1 && T >= 1 && n % T == 0);
  meta_schedule {
    meta_for (int h = 0; h < heads; h++)
      meta_for (int g = 0; g < n / T; g++)
        meta_for (int t = 0; t < T; t++)
          o[h][g * T + t] = 2.0f * q[h][g * T + t];
  }
}
";
    let mut p = metafork::frontend::check_source("f.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    let mut system = constraints::System::new();
    system.add(constraints::Constraint::le(&constraints::Poly::int(32), &constraints::Poly::var("T")));
    let points = metafork::verify::sample::points(&f, &system, &backend(), 4, 48, 7).unwrap();
    assert!(!points.is_empty());
    for point in &points {
        assert!(point["T"] >= 32, "{point:?}");
        assert_eq!((point["heads"], point["n"]), (1, point["T"]), "{point:?}");
    }
}

/// A parameter a fact defines through a quotient (`Lp == (Lout - 3) / 2 + 1`, an output
/// length) is set from its definition on every candidate: drawn blindly it almost never met
/// it, and 12 of a transposed convolution's 13 leaves were "unverified: no small point".
#[test]
fn a_parameter_a_fact_defines_is_solved_for() {
    let src = "void e1(int Lin, int Lout, int Lp, int Bt, const float x[Lin], float y[Lout]) {
  assume(Lin >= 1 && Bt >= 1);
  assume(Lout == 2 * Lin + 2);
  assume(Lp == (Lout - 3) / 2 + 1);
  meta_schedule {
    meta_for (int ob = 0; ob < (Lout + Bt - 1) / Bt; ob++)
      meta_for (int t = 0; t < Bt; t++) {
        int o = ob * Bt + t;
        if (o < Lout && o / 2 < Lin) y[o] = x[o / 2];
      }
  }
}
";
    let mut p = metafork::frontend::check_source("e1.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    let points = metafork::verify::sample::points(&f, &constraints::System::new(), &backend(), 4, 48, 3).unwrap();
    assert_eq!(points.len(), 4, "{points:?}");
    for point in &points {
        assert_eq!(point["Lout"], 2 * point["Lin"] + 2, "{point:?}");
        assert_eq!(point["Lp"], (point["Lout"] - 3) / 2 + 1, "{point:?}");
    }
}

/// Every leaf of `tree` proved at two points (`what` names the case in a failure).
fn every_leaf_proved(f: &KernelFunction, tree: &Tree, b: &Backend, what: &str) {
    let reports = verify_tree(f, tree, b, Options { points: 2, ..Options::default() }).unwrap();
    assert!(!reports.is_empty());
    for r in &reports {
        assert_eq!(r.status(), Status::Proved, "{what}: leaf {}", r.leaf);
    }
}

/// A block size the program assumes divides the size (`N % B == 0`) and no guard: each leaf is
/// in bounds only where the fact holds, and the dispatcher launches none where it does not. A
/// sweep found every leaf reported out of bounds at `B = 16, N = 24`, which no launch reaches.
/// Without the fact the same kernel is out of bounds, and caught.
#[test]
fn a_block_size_the_facts_make_divide_the_size_needs_no_guard() {
    let src = |fact: &str| {
        format!(
            "void scale(int N, int B, const float x[N], float y[N]) {{
  assume(N >= 1 && B >= 1{fact});
  meta_schedule {{
    meta_for (int g = 0; g < (N + B - 1) / B; g++)
      meta_for (int t = 0; t < B; t++) {{
        int i = g * B + t;
        y[i] = 3.0f * x[i];
      }}
  }}
}}
"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src(" && N % B == 0"));
    every_leaf_proved(&f, &tree, &b, "");
    let (f, tree) = tree_of(&src(""));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// im2col: a row of the column matrix per `(c, ki, kj)`, a column per output pixel, each
/// thread reading `img[c][col / OW + r / KW][col % OW + r % KW]`. That the row stays below `H`
/// needs `col / OW < OH` from `col < OH*OW` and `r / KW < KH` from `r < KH*KW`, which Z3's
/// nonlinear search did not find within its limit (a sweep: every leaf unverified, "max.
/// resource limit exceeded"); the quotient lemmas give them. The same kernel reading one row
/// further is caught, with its witness replayed.
#[test]
fn quotients_bounded_by_their_dividends_bounds_prove_im2col() {
    let src = |extra: &str| {
        format!(
            "void im2col_k(int C, int H, int W, int KH, int KW, int OH, int OW, int blk,
              const float img[C][H][W], float cols[C * KH * KW][OH * OW]) {{
  assume(C >= 1 && KH >= 1 && KW >= 1 && H >= KH && W >= KW && blk >= 1);
  assume(OH == H - KH + 1 && OW == W - KW + 1);
  int total = OH * OW;
  int nbl = (total + blk - 1) / blk;
  meta_schedule {{
    meta_for (int row = 0; row < C * KH * KW; row++)
      meta_for (int b = 0; b < nbl; b++)
        meta_for (int t = 0; t < blk; t++) {{
          int col = b * blk + t;
          if (col < total) {{
            int c = row / (KH * KW);
            int r = row % (KH * KW);
            int oy = col / OW;
            int ox = col % OW;
            cols[row][col] = img[c][oy + r / KW{extra}][ox + r % KW];
          }}
        }}
  }}
}}"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src(""));
    every_leaf_proved(&f, &tree, &b, "im2col");
    let (f, tree) = tree_of(&src(" + 1"));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// A butterfly stage reads the last element of its thread's block of `m`: `(i / m) * m + m - 1`
/// under `i < n` is below `n` where `n % m == 0` (`i / m < n / m`, times `m`), and Z3 left it
/// unknown. Without the fact the read passes the end (`n = 3, m = 2`), and is caught.
#[test]
fn a_block_start_below_a_multiple_of_its_size_is_proved() {
    let src = |fact: &str| {
        format!(
            "void bfly(int n, int m, int B1, const float src[n], float dst[n]) {{
  assume(n >= 2 && m >= 1 && B1 >= 1{fact});
  meta_schedule {{
    meta_for (int g = 0; g < (n + B1 - 1) / B1; g++)
      meta_for (int t = 0; t < B1; t++) {{
        int i = g * B1 + t;
        if (i < n)
          dst[i] = src[(i / m) * m + m - 1];
      }}
  }}
}}"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src(" && n % m == 0"));
    every_leaf_proved(&f, &tree, &b, "butterfly");
    let (f, tree) = tree_of(&src(""));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// One radix-2 stage of an FFT: `half = n / 2` and `hi = (i / m) * 2 * m + i % m + m < n`
/// for `i < half`. The bound needs `half == m*q'` exactly, from `n % (2*m) == 0`
/// (`n == 2*m*q'`): the parity of `n / 2`'s remainder, which Z3's nonlinear search left
/// unknown on every leaf. Under `n % m == 0` alone the stage writes past the end (`n = 6,
/// m = 2`: `i = 2` makes `hi = 6`), and is caught.
#[test]
fn a_half_size_that_is_an_exact_multiple_is_proved() {
    let src = |fact: &str| {
        format!(
            "void fft_stage(int R, int n, int m, int B1, const float tw[n], const float src[R][n], float dst[R][n]) {{
  assume(R >= 1 && n >= 2 && m >= 1 && B1 >= 1 && n % {fact} == 0);
  int half = n / 2;
  meta_schedule {{
    meta_for (int r = 0; r < R; r++)
      meta_for (int g = 0; g < (half + B1 - 1) / B1; g++)
        meta_for (int t = 0; t < B1; t++) {{
          int i = g * B1 + t;
          if (i < half) {{
            int lo = (i / m) * 2 * m + i % m;
            int hi = lo + m;
            float w = tw[i % m];
            float a = src[r][lo];
            float b = src[r][hi] * w;
            dst[r][lo] = a + b;
            dst[r][hi] = a - b;
          }}
        }}
  }}
}}"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src("(2 * m)"));
    every_leaf_proved(&f, &tree, &b, "");
    let (f, tree) = tree_of(&src("m"));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// `assume(B == 2 || B == 4)`: a disjunction of equalities is the fact `(B - 2)*(B - 4) == 0`,
/// so the block size is known positive and `v * B + u < (N / B) * B <= N` is proved (a sweep
/// found it unverified: the disjunction was no fact at all). One element further is caught.
#[test]
fn a_disjunction_of_equalities_is_a_fact_of_the_proofs() {
    let src = |offset: &str| {
        format!(
            "void ao(int N, int B, const float a[N], float c[N]) {{
  assume(N >= 1 && (B == 2 || B == 4));
  int dim = N / B;
  meta_schedule {{
    meta_for (int v = 0; v < dim; v++)
      meta_for (int u = 0; u < B; u++) {{
        int i = v * B + u;
        c[i{offset}] = a[i] * 3.0f;
      }}
  }}
}}"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src(""));
    every_leaf_proved(&f, &tree, &b, "");
    let (f, tree) = tree_of(&src(" + 1"));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// A byte of the index, `(char)(i % 256)`, wraps to -128..127 as C converts: `+ 128` stays
/// inside `h[256]` and is proved; `+ 127` writes `h[-1]` at `i = 128`, caught and replayed.
/// Before, the verifier took the conversion for the value itself (a false defect at `+ 128`)
/// and the front end refused every size with the fact `255 <= 127`.
#[test]
fn a_conversion_to_char_wraps_in_the_proofs() {
    let src = |offset: i32| {
        format!(
            "void bytes(int n, int B, int h[256], const float x[n]) {{
  assume(n >= 1 && B >= 1);
  meta_schedule {{
    meta_for (int v = 0; v < (n + B - 1) / B; v++)
      meta_for (int u = 0; u < B; u++) {{
        int i = v * B + u;
        if (i < n)
          h[(char)(i % 256) + {offset}] += 1;
      }}
  }}
}}
"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src(128));
    assert!(f.facts.iter().all(|x| !x.condition.to_string().contains("127")), "{:?}", f.facts);
    every_leaf_proved(&f, &tree, &b, "");
    let (f, tree) = tree_of(&src(127));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// A neighbour chosen with `?:`: in bounds where the condition keeps it so (proved), out of
/// bounds where the condition is off by one (caught by Z3, replayed on the engine).
#[test]
fn a_subscript_chosen_by_a_condition_is_modelled_case_by_case() {
    let src = |c: &str| format!("void nb(int n, int B, const float x[n], float y[n]) {{\n  assume(n >= 1 && B >= 1);\n  meta_schedule {{\n    meta_for (int g = 0; g < (n + B - 1) / B; g++)\n      meta_for (int t = 0; t < B; t++) {{\n        int i = g * B + t;\n        if (i < n) y[i] = x[{c} ? i + 1 : i];\n      }}\n  }}\n}}\n");
    let b = backend();
    let (f, tree) = tree_of(&src("i + 1 < n"));
    every_leaf_proved(&f, &tree, &b, "");
    let (f, tree) = tree_of(&src("i + 1 <= n"));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// C truncates a quotient toward 0: `(i - 1) / 2` is 0 at `i = 0` (in bounds; rounding down
/// would give -1), `(i - 3) / 2` is -1 there (out of bounds, caught and replayed). A dividend
/// that may be negative was "not modelled" before.
#[test]
fn a_quotient_of_a_dividend_of_either_sign_truncates_toward_zero() {
    let src = |j: &str| format!("void negdiv(int n, int B, const float a[n], float out[n]) {{\n  assume(n >= 4 && B >= 1);\n  meta_schedule {{\n    meta_for (int g = 0; g < (n + B - 1) / B; g++)\n      meta_for (int t = 0; t < B; t++) {{\n        int i = g * B + t;\n        if (i < n) {{\n          int j = {j};\n          out[i] = a[j];\n        }}\n      }}\n  }}\n}}\n");
    let b = backend();
    for j in ["(i - 1) / 2", "(i - 3) / 2 + 1", "(i - 3) % 2 + 1"] {
        let (f, tree) = tree_of(&src(j));
        every_leaf_proved(&f, &tree, &b, j);
    }
    let (f, tree) = tree_of(&src("(i - 3) / 2"));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// A border test written with `==`: past `y == 0 || x == 0 || y == h - 1 || x == w - 1` the
/// neighbours `m[y - 1][x - 1]` and `m[y + 1][x + 1]` are in bounds, since `y != 0` beside
/// `0 <= y` is `y >= 1` for an integer. Z3's nonlinear integer search left such reads unknown
/// at its resource limit (Canny's suppression, `examples/heldout-7/canny_nms.mf`); the
/// relaxation now splits each `!=` into its two sides. Without the `y == 0` test the read
/// `m[y - 1][x]` passes the start, and is caught.
#[test]
fn neighbours_past_a_border_test_written_with_equalities_are_proved() {
    let src = |border: &str| {
        format!(
            "void border(int h, int w, int b0, int b1, const float m[h][w], const int q[h][w], float e[h][w]) {{
  assume(h >= 3 && w >= 3 && b0 >= 1 && b1 >= 1);
  meta_schedule {{
    meta_for (int p = 0; p < (h + b0 - 1) / b0; p++)
      meta_for (int r = 0; r < (w + b1 - 1) / b1; r++)
        meta_for (int s = 0; s < b0; s++)
          meta_for (int t = 0; t < b1; t++) {{
            int y = p * b0 + s;
            int x = r * b1 + t;
            if (y < h && x < w) {{
              if ({border}x == 0 || y == h - 1 || x == w - 1) {{
                e[y][x] = 0.0f;
              }} else {{
                float c = m[y - 1][x] + m[y][x - 1];
                int d = q[y][x];
                float n1 = d == 0 ? m[y][x - 1] : (d == 1 ? m[y - 1][x + 1] : m[y - 1][x - 1]);
                float n2 = d == 0 ? m[y][x + 1] : (d == 1 ? m[y + 1][x - 1] : m[y + 1][x + 1]);
                e[y][x] = c + n1 + n2;
              }}
            }}
          }}
  }}
}}"
        )
    };
    let b = backend();
    let (f, tree) = tree_of(&src("y == 0 || "));
    every_leaf_proved(&f, &tree, &b, "border");
    let (f, tree) = tree_of(&src(""));
    caught(&f, &tree, &first_leaf(&tree), "out of bounds");
}

/// A block loop from 1 (`meta_for (c = 1; c < B)`) at `B == 1` has an empty block, where the
/// serial program does nothing: the launch returns success without launching, as for an empty
/// grid, and `verify` runs that point as no work (it stopped there, "the block extent `B - 1`
/// is 0 here", and left every leaf unverified; the launch returned
/// `cudaErrorInvalidConfiguration`).
#[test]
fn an_empty_block_is_no_work_like_an_empty_grid() {
    let src = "void from1(int N, int B, float o[N][N]) {
  assume(N >= 1 && B >= 1);
  int g = (N + B - 1) / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int c = 1; c < B; c++) {
        int r = v * B + c;
        if (r < N) o[r][0] = 1.0f;
      }
  }
}
";
    let (dir, out) = crate::common::gen_and_verify("verify-empty-block", "from1.mf", src);
    for leaf in crate::common::cu_files(&out, "_leaf") {
        let text = std::fs::read_to_string(&leaf).unwrap();
        assert!(text.contains("metafork_block_x <= 0 || metafork_block_y <= 0 || metafork_block_z <= 0) return cudaSuccess;"), "{text}");
        assert!(!text.contains("metafork_block_x <= 0 || metafork_block_y <= 0 || metafork_block_z <= 0)\n    return cudaErrorInvalidConfiguration"), "{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Arrays read in a serial loop's bounds (`r < cnt[p]`, `k < min(m[i], 64)`) are reads: the
/// access model left them out, so granularity reduction split a write and the loop whose bound
/// reads it over two blocks (a race), register blocking moved the next item's write before the
/// bound's read, and caching left the bound reading global memory under the tile's new value
/// (a mismatch). A helper's programs, each race-free as written: every leaf is proved. A bound
/// the model cannot follow (the body writes `m[i]`) leaves the guards inexact: `w[k]` is
/// "possibly" out of bounds, unverified, no longer a definite defect.
#[test]
fn arrays_read_by_loop_bounds_are_accesses() {
    crate::common::gen_and_verify("loop-bound-p116", "p116_gran_loopbound.mf", "void p116_gran_loopbound(int N, int B, int m[N], const float w[64], float y[N]) {
  assume(N >= 1 && B >= 1);
  int dim = N / B;
  meta_schedule {
    meta_for (int v = 0; v < dim; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        for (int k = 0; k < min(m[i], 64); k++) {
          m[i] = m[i] - 1;
          y[i] += w[min(k, 63)];
        }
      }
  }
}
");
    crate::common::gen_and_verify("loop-bound-p119", "p119_stmt_loopbound.mf", "void p119_stmt_loopbound(int N, int B0, int B1, const int a[N][N], int c[N][N]) {
  assume(N >= 1 && B0 >= 1 && B1 >= 1);
  int dim0 = N / B0, dim1 = N / (2 * B1);
  meta_schedule {
    meta_for (int v = 0; v < dim0; v++)
      meta_for (int p = 0; p < dim1; p++)
        meta_for (int u = 0; u < B0; u++)
          meta_for (int q = 0; q < B1; q++) {
            int i = v * B0 + u;
            int j = p * B1 + q;
            if (i < N && j < N / 2) {
              c[i][j] = a[i][j] % 5;
              for (int r = 0; r < c[i][j]; r++)
                c[i][j + N / 2] += a[i][j + N / 2];
            }
          }
  }
}
");
    crate::common::gen_and_verify("loop-bound-p121", "p121_jam_war_bound.mf", "void p121_jam_war_bound(int N, int B, int s, const int a[N], int b[N], int cnt[N]) {
  assume(N >= 1 && B >= 1 && s >= 1);
  int dim = N / (B * s);
  meta_schedule {
    meta_for (int v = 0; v < dim; v++)
      meta_for (int u = 0; u < B; u++)
        for (int k = 0; k < s; k++) {
          int p = v * s * B + k * B + u;
          int nxt = k + 1 < s ? p + B : p;
          cnt[p] = a[p] % 4;
          for (int r = 0; r < cnt[nxt]; r++)
            b[p] += a[p] + r;
        }
  }
}
");
    crate::common::gen_and_verify("loop-bound-p123", "p123_cache_bound.mf", "void p123_cache_bound(int N, int B, const int a[N], int b[N], int cnt[N]) {
  assume(N >= 2 && B >= 1);
  int dim = (N - 1) / B;
  meta_schedule cache(a, cnt) {
    meta_for (int v = 0; v < dim; v++)
      meta_for (int u = 0; u < B; u++) {
        int p = v * B + u;
        cnt[p] = (a[p] + a[p + 1]) % 4;
        for (int r = 0; r < cnt[p]; r++)
          b[p] += a[p] + r;
      }
  }
}
");
    let dir = crate::common::scratch("loop-bound-p113");
    std::fs::write(dir.join("p113.mf"), "void p113_bound_min_modified(int N, int B, int m[N], const float w[64], float y[N]) {
  assume(N >= 1 && B >= 1);
  int dim = N / B;
  meta_schedule {
    meta_for (int v = 0; v < dim; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        for (int k = 0; k < min(m[i], 64); k++) {
          m[i] = m[i] - 1;
          y[i] += w[k];
        }
      }
  }
}
").unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(&dir).args(["gen", "--emit-cuda", "--verify", "p113.mf", "-o", "out"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(4), "unverified, not a defect:\n{text}");
    assert!(!text.contains("DEFECT") && text.contains("possible out of bounds"), "{text}");
}

/// A guard that is a disjunction of equalities (`c == 0 || c == N - 1`, a filter's edge copy):
/// the verifier takes the branch once per equality, each exact, where it used to drop the
/// guard ("possible out of bounds ... not exact": a helper's median filter, report-13); the
/// `else` side (`c != 0 && c != N - 1`) was exact already. A guard on the same accesses that
/// does not keep them in bounds (`c == 0 || c == N`) is still caught, at `c == N`.
#[test]
fn a_disjunction_of_equalities_guards_exactly() {
    let src = "void edges(int R, int N, int B, const float p[R][N], float m[R][N]) {
  assume(R >= 1 && N >= 3 && B >= 1 && B <= 1024);
  int nb = (N + B - 1) / B;
  meta_schedule {
    meta_for (int r = 0; r < R; r++)
      meta_for (int cb = 0; cb < nb; cb++)
        meta_for (int t = 0; t < B; t++) {
          int c = cb * B + t;
          if (c == 0 || c == N - 1)
            m[r][c] = p[r][c];
          else if (c < N - 1)
            m[r][c] = (p[r][c - 1] + p[r][c] + p[r][c + 1]) / 3.0f;
        }
  }
}
";
    common::assert_every_leaf_proved("edges.mf", src, &backend(), 4);
    // The same guard choosing a value (`?:`) and guarding the right side of `&&`.
    let chosen = src.replace(
        "if (c == 0 || c == N - 1)\n            m[r][c] = p[r][c];\n          else if (c < N - 1)\n            m[r][c] = (p[r][c - 1] + p[r][c] + p[r][c + 1]) / 3.0f;",
        "float e = (c == 0 || c == N - 1) ? p[r][c] : 0.0f;\n          if ((c == 0 || c == N - 1) && p[r][c] > 0.0f)\n            m[r][c] = e;",
    );
    assert_ne!(chosen, src);
    common::assert_every_leaf_proved("chosen.mf", &chosen, &backend(), 4);
    let wrong = src.replace("c == 0 || c == N - 1", "c == 0 || c == N");
    let (f, tree) = tree_of(&wrong);
    let reports = verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap();
    assert!(!reports.is_empty() && reports.iter().all(|r| matches!(r.status(), Status::Defect("out of bounds", _))), "{:?}", reports.iter().map(|r| r.status()).collect::<Vec<_>>());
}

/// A product of parameters the question does not need (`BY * BX <= 1024`, the threads of a
/// block) sent Z3's nonlinear procedures astray on a 2-D tiled copy's bounds ("Z3 could not
/// decide a query (max. resource limit exceeded)", every leaf, as on report-13's cached box
/// blur): such a query is asked again without those facts, whose unsat proves the whole.
/// Where the product is what keeps an access in bounds (`c[v * BX + u]` inside `c[1024]`),
/// the whole query decides it (proved), and a retry without it, which has solutions, never
/// turns into a defect.
#[test]
fn a_product_of_parameters_the_proof_does_not_need_is_set_aside() {
    let src = "void tiles(int IH, int IW, int BY, int BX, const float img[IH][IW], float out[IH][IW]) {
  assume(IH >= 5 && IW >= 5 && BY >= 1 && BX >= 1 && BY * BX <= 1024);
  int gy = (IH - 4) / BY, gx = (IW - 4) / BX;
  meta_schedule {
    meta_for (int by = 0; by < gy; by++)
      meta_for (int bx = 0; bx < gx; bx++)
        meta_for (int ty = 0; ty < BY; ty++)
          meta_for (int tx = 0; tx < BX; tx++) {
            int y = by * BY + ty + 2;
            int x = bx * BX + tx + 2;
            out[y][x] = img[y][x];
          }
  }
}
";
    common::assert_every_leaf_proved("tiles.mf", src, &backend(), 2);
    let needed = "void needed(int BY, int BX, float c[1024]) {
  assume(BY >= 1 && BX >= 1 && BY * BX <= 1024);
  meta_schedule {
    meta_for (int g = 0; g < 1; g++)
      meta_for (int v = 0; v < BY; v++)
        meta_for (int u = 0; u < BX; u++)
          c[v * BX + u] = 1.0f;
  }
}
";
    let (f, tree) = tree_of(needed);
    let reports = verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap();
    assert!(!reports.is_empty() && reports.iter().all(|r| r.status() == Status::Proved), "{:?}", reports.iter().map(|r| r.status()).collect::<Vec<_>>());
}

/// A local integer assigned after its declaration (`int i = v * B; i += u;`) takes the
/// assigned value in straight-line code, in its type. Before, any assignment made it unknown,
/// so `a[i]` was "subscript 1 of `a[i]` is not modelled" in every leaf. Here `+=`, `-=`, `*=`
/// and `=` are proved; a scalar a branch assigns is unknown after it, and a read one past the
/// end through such a sum is a defect, not unverified: the model is the program's.
#[test]
fn a_local_assigned_after_its_declaration_is_modelled() {
    let src = "void shifted(int N, int B, float a[N], float b[2 * N]) {
  assume(N >= 1 && B >= 1);
  meta_schedule {
    meta_for (int v = 0; v < N / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B;
        i += u;
        int j = i + 3;
        j -= 3;
        j *= 2;
        int k = 0;
        k = j + 1;
        if (i < N)
          a[i] = 2.0f * a[i] + b[j] + b[k];
      }
  }
}
";
    common::assert_every_leaf_proved("shifted.mf", src, &backend(), 4);
    // `k` assigned in a branch is unknown after it: the read is not modelled, never proved.
    let branch = src.replace("k = j + 1;", "if (u > 0) k = j + 1;");
    let (f, tree) = tree_of(&branch);
    let reports = verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap();
    assert!(!reports.is_empty() && reports.iter().all(|r| matches!(r.status(), Status::Unverified(_))), "{:?}", reports.iter().map(|r| r.status()).collect::<Vec<_>>());
    let wrong = src.replace("i += u;", "i += u + 1;").replace("if (i < N)\n          a[i]", "if (i <= N)\n          a[i]");
    assert_ne!(wrong, src);
    let (f, tree) = tree_of(&wrong);
    let reports = verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap();
    assert!(!reports.is_empty() && reports.iter().all(|r| matches!(r.status(), Status::Defect("out of bounds", _))), "{:?}", reports.iter().map(|r| r.status()).collect::<Vec<_>>());
}

/// A serial loop with a step visits `lo`, `lo + s`, ... only: `x[k + 1]` under `k < 2*N; k +=
/// 2` stays inside `x[2*N]`, and so does `z[k + 1]` under `k = 1; k <= 3*N - 2; k += 3` (a
/// helper's sweep: every integer between the bounds was a value of `k`, and verify reported a
/// definite out-of-bounds read, exit 3, on a correct program). One past the last step is
/// still a defect.
#[test]
fn a_serial_loop_visits_only_its_steps() {
    let src = "void pairsum(int N, int B, const float x[2 * N], const float z[3 * N], float y[N]) {
  assume(N >= 1 && B >= 1 && N % B == 0);
  meta_schedule {
    meta_for (int v = 0; v < N / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        float acc = 0.0f;
        for (int k = 0; k < 2 * N; k += 2)
          acc += x[k] + x[k + 1];
        for (int k = 1; k <= 3 * N - 2; k += 3)
          acc += z[k + 1];
        y[i] = acc;
      }
  }
}
";
    common::assert_every_leaf_proved("pairsum.mf", src, &backend(), 2);
    let wrong = src.replace("k < 2 * N; k += 2", "k < 2 * N + 1; k += 2");
    assert_ne!(wrong, src);
    let (f, tree) = tree_of(&wrong);
    let reports = verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap();
    assert!(!reports.is_empty() && reports.iter().all(|r| matches!(r.status(), Status::Defect("out of bounds", _))), "{:?}", reports.iter().map(|r| r.status()).collect::<Vec<_>>());
}

/// A program whose facts force large blocks (`assume(B >= 256 ...)`, a helper's sweep): no
/// point within the wide round's bounds (program parameters up to 64) exists, and every leaf
/// was "UNVERIFIED: Z3 found no small parameter point in the leaf's constraints". The last
/// round now looks up to the largest block (1024) and `LARGE_DATA`: every leaf is proved.
#[test]
fn facts_that_force_large_blocks_still_get_points() {
    let src = "void bigblock(int N, int B, const float a[N], float c[N]) {
  assume(B >= 256 && B <= 1024 && N >= B && N % B == 0);
  int d = N / B;
  meta_schedule cache(a) {
    meta_for (int v = 0; v < d; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        c[i] = a[i] * 3.0f;
      }
  }
}
";
    common::assert_every_leaf_proved("bigblock.mf", src, &backend(), 2);
}

/// A local stepped once per iteration of a serial loop (`int p = 4 * i; for (...) { s +=
/// a[p]; p += 1; }`, a pointer bump; a helper's sweep): it is `4*i + k` at iteration `k`, so
/// the read is modelled and proved (before, "subscript 1 of `a[p]` is not modelled"). A step
/// of 2 reads past the end: a defect. A step under an `if` is not modelled: unverified.
#[test]
fn a_scalar_stepped_once_per_iteration_is_modelled() {
    let src = "void bump(int N, int B, const float a[4 * N], float b[N]) {
  assume(N >= 1 && B >= 1);
  meta_schedule {
    meta_for (int v = 0; v < (N + B - 1) / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        if (i < N) {
          int p = 4 * i;
          float s = 0.0f;
          for (int k = 0; k < 4; k++) {
            s += a[p];
            p += 1;
          }
          b[i] = s;
        }
      }
  }
}
";
    common::assert_every_leaf_proved("bump.mf", src, &backend(), 4);
    let statuses = |src: &str| {
        let (f, tree) = tree_of(src);
        verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap().iter().map(|r| r.status()).collect::<Vec<_>>()
    };
    let wrong = src.replace("p += 1;", "p += 2;");
    let s = statuses(&wrong);
    assert!(!s.is_empty() && s.iter().all(|s| matches!(s, Status::Defect("out of bounds", _))), "{s:?}");
    let guarded = src.replace("p += 1;", "if (k < 3) p += 1;");
    let s = statuses(&guarded);
    assert!(!s.is_empty() && s.iter().all(|s| matches!(s, Status::Unverified(_))), "{s:?}");
}

/// A layout change written as a scatter (a thread per input element of an NCHW tensor, writing
/// its NHWC position): the digits `idx % W`, `(idx / W) % H`, `(idx / (W*H)) % C` and
/// `idx / (W*H*C)` are quotients of one index by products of the extents. Z3 could not relate
/// `idx / (W*H)` to `idx / W` (a helper's program, 0 of 5 leaves; every write-write race query
/// at Z3's resource limit); the model now chains a divisor that extends an earlier one
/// through its quotient, in whichever order the program divides. A digit taken with the wrong
/// radix is a race `gen` refuses.
#[test]
fn a_layout_change_through_quotients_of_products_is_proved() {
    let src = "void nchw_to_nhwc(int NB, int C, int H, int W, int B,
                  const float in[NB * C * H * W], float out[NB * H * W * C]) {
  assume(NB >= 1 && C >= 1 && H >= 1 && W >= 1 && B >= 1);
  int total = NB * H * W * C;
  int g = (total + B - 1) / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++) {
        int idx = v * B + u;
        if (idx < total) {
          int w = idx % W;
          int h = (idx / W) % H;
          int c = (idx / (W * H)) % C;
          int n = idx / (W * H * C);
          out[((n * H + h) * W + w) * C + c] = in[idx];
        }
      }
  }
}
";
    common::assert_every_leaf_proved("nhwc.mf", src, &backend(), 2);
    // The outermost digit first: each quotient is tied to the ones made before it.
    let lines = ["          int w = idx % W;\n", "          int h = (idx / W) % H;\n", "          int c = (idx / (W * H)) % C;\n", "          int n = idx / (W * H * C);\n"];
    let reversed = src.replace(&lines.concat(), &lines.iter().rev().copied().collect::<String>());
    assert_ne!(reversed, src);
    common::assert_every_leaf_proved("nhwc_outer_first.mf", &reversed, &backend(), 2);
    let wrong = src.replace("int h = (idx / W) % H;", "int h = (idx / W) % W;");
    let dir = common::scratch("verify-nhwc-wrong-radix");
    std::fs::write(dir.join("nhwc_wrong.mf"), &wrong).unwrap();
    let o = metafork(&["gen", "--emit-cuda", dir.join("nhwc_wrong.mf").to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("nhwc_wrong.mf:15:") && err.contains("races as written") && err.contains("out[((n * H + h) * W + w) * C + c]"), "{err}");
}

/// C truncates toward 0 for a negative divisor too: `x / -k == -(x / k)`, `x % -k == x % k`.
/// Such a subscript was "not modelled" (a helper's program); it is now the division by `k`,
/// negated, so it is proved, and one that reaches past the end is a defect. A subscript the
/// model has no polynomial for says why.
#[test]
fn a_negative_divisor_is_modelled_and_an_unmodelled_subscript_says_why() {
    let src = "void halves(int N, int B, int s, const float x[N], float y[N]) {
  assume(N >= 2 && B >= 1 && N % 2 == 0);
  int g = (N / 2 + B - 1) / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        if (i < N / 2)
          y[-(2 * i) / -2 + i] = x[(2 * i + 1) / -1 * -1 + 7 % -4 - 3];
      }
  }
}
";
    common::assert_every_leaf_proved("halves.mf", src, &backend(), 2);
    let statuses = |src: &str| {
        let (f, tree) = tree_of(src);
        verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap().iter().map(|r| r.status()).collect::<Vec<_>>()
    };
    // One past the end only at the last thread: a defect of the leaves, not of every kernel.
    let wrong = src.replace("7 % -4 - 3", "7 % -4 - 2");
    let s = statuses(&wrong);
    assert!(!s.is_empty() && s.iter().all(|s| matches!(s, Status::Defect("out of bounds", _))), "{s:?}");
    // A divisor of either sign: unverified, naming the divisor and the fact that would help.
    let unsigned = src.replace("x[(2 * i + 1) / -1 * -1 + 7 % -4 - 3]", "x[(2 * i + 1) / (s * s + 1) + i / s]").replace("N % 2 == 0", "N % 2 == 0 && s != 0");
    let s = statuses(&unsigned);
    assert!(!s.is_empty(), "no leaf");
    for s in &s {
        let Status::Unverified(why) = s else { panic!("{s:?}") };
        assert!(why.contains("is not modelled: the divisor `s` is not proved non-zero") && why.contains("assume(s >= 1)"), "{why}");
    }
    // A subscript defined from floating-point arithmetic (a helper's bilinear resize): the
    // reason is the definition, not an assignment under a condition.
    let scaled = src.replace("if (i < N / 2)\n", "float f = (float)i * 0.5f;\n        int h = min((int)f, N - 1);\n        if (i < N / 2)\n").replace("x[(2 * i + 1) / -1 * -1 + 7 % -4 - 3]", "x[h]");
    assert_ne!(scaled, src);
    let s = statuses(&scaled);
    assert!(!s.is_empty(), "no leaf");
    for s in &s {
        let Status::Unverified(why) = s else { panic!("{s:?}") };
        assert!(why.contains("subscript 1 of `x[h]` is not modelled: `h` is defined from a value the model does not follow: `f` is a floating-point value"), "{why}");
    }
}

/// A loop bounded by `max`/`min` of the thread index (`k <= max(t, TS - 1 - t)`): the guard
/// names the choice, which the context bounds from one side only, so the check is split by the
/// choice's cases as a subscript naming it is. Before, any `k` satisfied the guard and the
/// correct program got an out-of-bounds defect with a witness no thread reaches.
#[test]
fn a_loop_bounded_by_a_min_or_max_is_split_by_its_cases() {
    let src = "void tri(int N, int TS, const float x[N], float y[N]) {
  assume(N >= 1 && TS >= 1 && N % TS == 0);
  int nb = N / TS;
  meta_schedule {
    meta_for (int b = 0; b < nb; b++)
      meta_for (int t = 0; t < TS; t++) {
        float s = 0;
        for (int k = 0; k <= max(t, TS - 1 - t); k++) s += x[b * TS + k];
        for (int k = min(t, 2); k < TS; k++) s += x[b * TS + k];
        y[b * TS + t] = s;
      }
  }
}
";
    common::assert_every_leaf_proved("tri.mf", src, &backend(), 2);
    // One past the end at one block size: a defect.
    let wrong = src.replace("max(t, TS - 1 - t)", "min(t + 1, TS - t)");
    let (f, tree) = tree_of(&wrong);
    let s: Vec<Status> = verify_tree(&f, &tree, &backend(), Options { points: 2, ..Options::default() }).unwrap().iter().map(|r| r.status()).collect();
    assert!(!s.is_empty() && s.iter().all(|s| matches!(s, Status::Defect("out of bounds", _))), "{s:?}");
}

/// A schedule that, as written, reads outside an array only at small sizes (`x[N + b*TS + t -
/// k]` is `x[-1]` at `N = 2`): a staged leaf's guarded tile loads never read there, and its
/// points where the serial program stopped were "not run", so it was proved. The serial code's
/// out-of-bounds access at a point of the facts is the program's defect, reported on every leaf.
#[test]
fn a_schedule_that_reads_outside_its_array_at_small_sizes_is_a_defect_in_its_staged_leaves_too() {
    let src = "void k_t64(int N, int TS, const float x[3*N], float y[N]) {
  assume(N >= 1 && TS >= 1);
  assume(N % TS == 0);
  int nb = N / TS;
  meta_schedule cache(x) {
    meta_for (int b = 0; b < nb; b++)
      meta_for (int t = 0; t < TS; t++) {
        int off = N + b * TS;
        float s = 0;
        for (int k = t; k <= t + 3; k++) s += x[off + t - k] * (float)(k + 1);
        y[b * TS + t] = s;
      }
  }
}
";
    let (f, tree) = tree_of(src);
    let reports = verify_tree(&f, &tree, &backend(), Options { points: 40, ..Options::default() }).unwrap();
    let staged: Vec<_> = reports.iter().filter(|r| !tree.nodes[r.leaf].staged.shared.is_empty()).collect();
    assert!(!staged.is_empty(), "no leaf stages `x`");
    for r in &reports {
        assert!(matches!(r.status(), Status::Defect("out of bounds", _)), "leaf {}: {:?}", r.leaf, r.status());
    }
}

/// Index arithmetic as users port it (a helper's sweep of data-movement kernels; each was left
/// unverified, Z3 at its resource limit, before the rule its comment names):
/// - digits peeled by subtraction, outermost first (`r0 = i - n*(C*H*W)`): the remainder of
///   the division, folded (`Collector::remainders_folded`);
/// - a digit of a remainder (`i % (H*W) / W`): the digit of the dividend (`i / W % H`);
/// - a quotient in one subscript and its remainder in another (`dst[c][y][x]`, with a leaf
///   that merges two blocks into one): merged across the subscripts;
/// - a rotation `y[(i + S) % N]`: equal remainders of dividends less than `N` apart.
#[test]
fn index_arithmetic_of_layout_kernels_is_proved() {
    let peeled = "void nhwc_to_nchw(long N, long C, long H, long W, long BS, const float src[N*H*W*C], float dst[N*C*H*W]) {
  assume(N >= 1 && C >= 1 && H >= 1 && W >= 1 && BS >= 1);
  long total = N * C * H * W;
  long blocks = (total + BS - 1) / BS;
  meta_schedule {
    meta_for (long bx = 0; bx < blocks; bx++)
      meta_for (long tx = 0; tx < BS; tx++) {
        long i = bx * BS + tx;
        if (i < total) {
          long n = i / (C * H * W);
          long r0 = i - n * (C * H * W);
          long c = r0 / (H * W);
          long r1 = r0 - c * (H * W);
          long h = r1 / W;
          long w = r1 - h * W;
          dst[i] = src[((n * H + h) * W + w) * C + c];
        }
      }
  }
}
";
    let digit_of_remainder = "void depthwise3x3(int C, int H, int W, int B, const float in[C][H+2][W+2], const float wt[C][9], float out[C][H][W]) {
  assume(C >= 1 && H >= 1 && W >= 1 && B >= 1);
  int total = C * H * W;
  meta_schedule {
    meta_for (int g = 0; g < (total + B - 1) / B; g++)
      meta_for (int l = 0; l < B; l++) {
        int i = g * B + l;
        if (i < total) {
          int c = i / (H * W);
          int y = i % (H * W) / W;
          int x = i % W;
          float acc = 0.0f;
          for (int k = 0; k < 9; k++)
            acc += wt[c][k] * in[c][y + k / 3][x + k % 3];
          out[c][y][x] = acc;
        }
      }
  }
}
";
    let across_subscripts = "void hwc_to_chw(int H, int W, int C, int B, const float src[H][W][C], float dst[C][H][W]) {
  assume(H >= 1 && W >= 1 && C >= 1 && B >= 1);
  meta_schedule {
    meta_for (int g = 0; g < (H * W * C + B - 1) / B; g++)
      meta_for (int l = 0; l < B; l++) {
        int idx = g * B + l;
        if (idx < H * W * C) {
          int x = idx % W;
          int rest = idx / W;
          int y = rest % H;
          int c = rest / H;
          dst[c][y][x] = src[y][x][c];
        }
      }
  }
}
";
    let rotation = "void roll(int N, int S, int B, const float x[N], float y[N]) {
  assume(N >= 1 && S >= 0 && B >= 1);
  meta_schedule {
    meta_for (int g = 0; g < (N + B - 1) / B; g++)
      meta_for (int l = 0; l < B; l++) {
        int i = g * B + l;
        if (i < N)
          y[(i + S) % N] = x[i];
      }
  }
}
";
    for (name, src) in [("peeled.mf", peeled), ("digit_of_remainder.mf", digit_of_remainder), ("across_subscripts.mf", across_subscripts), ("rotation.mf", rotation)] {
        common::assert_every_leaf_proved(name, src, &backend(), 2);
    }
    // The merged leaf is among those proved (its subscripts' digits come apart per subscript).
    let (_, tree) = tree_of(across_subscripts);
    assert!(kernel_leaves(&tree).iter().any(|n| n.applied.contains(&metafork::tree::Strategy::Merge)), "no leaf merges blocks");
    // One thread too many: two threads write `y[S % N]`, and `gen` refuses it where it is.
    let dir = common::scratch("verify-rotation-overlap");
    std::fs::write(dir.join("roll.mf"), rotation.replace("const float x[N]", "const float x[N + 1]").replace("(N + B - 1) / B", "(N + B) / B").replace("if (i < N)", "if (i < N + 1)")).unwrap();
    let o = metafork(&["gen", "--emit-cuda", dir.join("roll.mf").to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("roll.mf:8:") && err.contains("races as written") && err.contains("y[(i + S) % N]"), "{err}");
}

/// A host scalar defined through a choice (`int h = N > 0 ? N : 0`, `abs`, `max`) bounds the
/// guard `i < h`, but its choice is tied to its cases only where an access names it: as a
/// launch fact it was a free value, and Z3's witness (`N = 6, h = 194`) a launch that cannot
/// happen, reported as an out-of-bounds defect. The model is not exact there: unverified (or
/// proved), never a defect. The same scalar defined as a polynomial is proved, and with a guard
/// past the array the read is still a defect.
#[test]
fn a_host_scalar_defined_through_a_choice_is_no_false_defect() {
    let b = backend();
    let program = |h: &str, guard: &str| format!("void f(int N, int B, const float a[N], float c[N]) {{\n  assume(N >= 1 && B >= 1);\n  int h = {h};\n  int nb = (h + B - 1) / B;\n  meta_schedule {{\n    meta_for (int v = 0; v < nb; v++)\n      meta_for (int u = 0; u < B; u++) {{\n        int i = v * B + u;\n        if ({guard}) c[i] = a[i] * 2;\n      }}\n  }}\n}}\n");
    for h in ["N > 0 ? N : 0", "abs(N)", "max(N, 0)", "N >= 1 ? N : N", "min(N, N + 1)"] {
        let (f, tree) = tree_of(&program(h, "i < h"));
        match check(&f, &first_leaf(&tree), &tree.root_constraints, &b).verdict {
            Verdict::Unverified(why) => assert!(why.contains("not exact"), "{h}: {why}"),
            Verdict::Proved => {}
            other => panic!("{h}: {other:?}"),
        }
    }
    let (f, tree) = tree_of(&program("N", "i < h"));
    assert!(matches!(check(&f, &first_leaf(&tree), &tree.root_constraints, &b).verdict, Verdict::Proved));
    let (f, tree) = tree_of(&program("N + 1", "i < h"));
    assert!(matches!(check(&f, &first_leaf(&tree), &tree.root_constraints, &b).verdict, Verdict::Defect(_)), "a guard one past the array is a defect");
}
