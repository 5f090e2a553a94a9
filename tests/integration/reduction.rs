//! Reductions across threads (issue 26.1): a `+=` or `-=` whose element several `meta_for`
//! iterations update is added atomically in every kernel, proved race-free (two atomic adds
//! commute) and checked against the serial program within the rounding of any order of the
//! additions; a `*=` or `/=` there is a located error. Where several threads of a block add to
//! one floating element, the tree forks on that contention and reduces in the block first (a
//! tree in shared memory, one atomic add per block and element).

use crate::common::{nvcc, scratch};
use std::process::{Command, Output};

fn metafork(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).output().unwrap()
}

/// `gen --emit-cuda` then `verify` on `text`: the output directory and verify's stdout.
fn gen_and_verify(name: &str, text: &str) -> (std::path::PathBuf, String) {
    let dir = scratch(&format!("reduction-{name}"));
    let source = dir.join(format!("{name}.mf"));
    std::fs::write(&source, text).unwrap();
    let out = dir.join("out");
    let g = metafork(&["gen", "--emit-cuda", source.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(g.status.success(), "{name}: gen failed:\n{}", String::from_utf8_lossy(&g.stderr));
    let v = metafork(&["verify", out.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&v.stdout).into_owned();
    assert!(v.status.success(), "{name}: verify failed:\n{stdout}\n{}", String::from_utf8_lossy(&v.stderr));
    (out, stdout)
}

fn leaf_files(out: &std::path::Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains("_leaf") && p.extension().is_some_and(|x| x == "cu"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    files.sort();
    files
}

fn proved_all(stdout: &str) -> bool {
    let last = stdout.lines().rev().find(|l| l.contains("leaves proved")).unwrap_or("");
    let words: Vec<&str> = last.split_whitespace().collect();
    words.len() >= 3 && words[0] == words[2] && words[0] != "0"
}

/// `gen` of `text` (saved as `file` in a fresh scratch folder `name`): its exit status, its
/// stderr, and whether it wrote its output folder.
fn gen_of(name: &str, file: &str, text: &str) -> (Option<i32>, String, bool) {
    let dir = scratch(name);
    let source = dir.join(file);
    std::fs::write(&source, text).unwrap();
    let o = metafork(&["gen", source.to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()]);
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned(), dir.join("out").exists())
}

#[test]
fn column_sums_add_atomically_and_every_leaf_is_proved() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/colsum.mf")).unwrap();
    let (out, stdout) = gen_and_verify("colsum", &text);
    assert!(proved_all(&stdout), "{stdout}");
    let leaves = leaf_files(&out);
    assert!(!leaves.is_empty());
    for (name, code) in &leaves {
        assert!(code.contains("atomicAdd(&s["), "{name} does not add atomically:\n{code}");
        assert!(!code.contains("s[(long)j] +="), "{name} still has a plain update:\n{code}");
    }
    // The serial reference (the host driver's copy of the program) keeps the plain `+=`.
    let source = std::fs::read_to_string(out.join("source.mf")).unwrap();
    assert!(source.contains("s[j] += a[i][j]"));
    if let Some(nvcc) = nvcc() {
        for (name, _) in leaves.iter().take(3) {
            let o = Command::new(&nvcc).current_dir(&out).args(["-arch=sm_75", "-c", name, "-o", "/dev/null"]).output().unwrap();
            assert!(o.status.success(), "nvcc rejected {name}:\n{}", String::from_utf8_lossy(&o.stderr));
        }
    }
}

/// Every element type, `-=`, a reduction into one element from a 2-D grid (its blocks and
/// threads run in an order unlike the serial loops', so float sums differ in their last bits
/// and pass by the rounding bound), and an update that names every counter, which stays plain.
#[test]
fn reductions_of_every_type_and_shape_are_proved_and_compile() {
    let text = "void stats(int n, int m, int B0, int B1, const float a[n][m], const double d[n][m], const int c[n][m], float total[1], double dsum[m], int count[m], long lsum[n], float copy[n][m]) {\n  assume(n >= 1 && m >= 1 && B0 >= 1 && B1 >= 1);\n  int g0 = (n + B0 - 1) / B0, g1 = (m + B1 - 1) / B1;\n  meta_schedule {\n    meta_for (int v0 = 0; v0 < g0; v0++)\n      meta_for (int v1 = 0; v1 < g1; v1++)\n        meta_for (int u0 = 0; u0 < B0; u0++)\n          meta_for (int u1 = 0; u1 < B1; u1++) {\n            int i = v0 * B0 + u0;\n            int j = v1 * B1 + u1;\n            if (i < n && j < m) {\n              total[0] += a[i][j] * 0.5f;\n              dsum[j] -= d[i][j];\n              count[j] += c[i][j] > 0 ? 1 : 0;\n              lsum[i] += c[i][j];\n              copy[i][j] += a[i][j];\n            }\n          }\n  }\n}\n";
    let (out, stdout) = gen_and_verify("stats", text);
    assert!(proved_all(&stdout), "{stdout}");
    let leaves = leaf_files(&out);
    assert!(!leaves.is_empty());
    for (name, code) in &leaves {
        assert!(code.contains("atomicAdd(&total[") && code.contains("], (float)("), "{name}:\n{code}");
        // `-=` adds the negated term: atomically, or into the block's partial sum first.
        assert!(code.contains("atomicAdd(&dsum[") && (code.contains("(double)(-d[") || code.contains("dsum_part += (double)-d[")), "{name}: `-=` adds the negated term:\n{code}");
        assert!(code.contains("atomicAdd(&count["), "{name}:\n{code}");
        assert!(code.contains("atomicAdd((unsigned long long *)&lsum["), "{name}: a long adds as unsigned long long:\n{code}");
        assert!(!code.contains("atomicAdd(&copy["), "{name}: `copy[i][j]` names every counter and is one thread's:\n{code}");
    }
    if let Some(nvcc) = nvcc() {
        for (name, _) in leaves.iter().take(3) {
            let o = Command::new(&nvcc).current_dir(&out).args(["-arch=sm_75", "-c", name, "-o", "/dev/null"]).output().unwrap();
            assert!(o.status.success(), "nvcc rejected {name}:\n{}", String::from_utf8_lossy(&o.stderr));
        }
    }
}

/// No atomic operation multiplies, and a product of floats depends on its order: a `*=` that
/// several threads apply to one element is refused where it is written.
#[test]
fn a_product_across_threads_is_a_located_error() {
    let (status, err, written) = gen_of("reduction-product", "prod.mf", "void prod(int n, int B, const float a[n], float p[1]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          p[0] *= a[i];\n      }\n  }\n}\n");
    assert_eq!(status, Some(1), "{err}");
    assert!(err.contains("prod.mf:9:11"), "{err}");
    assert!(err.contains("`p[0]` is updated with `*=`") && err.contains("meta_for (int v ...)") && err.contains("only `+=` and `-=`"), "{err}");
    assert!(!written, "nothing is written for a program with an error");
}

/// A reduction's target named in `cache(...)` is not staged in shared memory (a block's copy
/// would lose the other blocks' additions); the rest of the program is unchanged and proved.
#[test]
fn a_reduction_target_is_never_cached() {
    let text = "void colsum2(int n, int m, int B, const float a[n][m], float s[m]) {\n  assume(n >= 1 && m >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule cache(s) {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          for (int j = 0; j < m; j++)\n            s[j] += a[i][j];\n      }\n  }\n}\n";
    let (out, stdout) = gen_and_verify("colsum2", text);
    assert!(proved_all(&stdout), "{stdout}");
    for (name, code) in leaf_files(&out) {
        assert!(!code.contains("__shared__") && code.contains("atomicAdd(&s["), "{name}:\n{code}");
    }
}

/// Rewrites every atomic add of `stmts` with `f`.
fn map_atomic(stmts: &mut [metafork::frontend::ast::Stmt], f: &mut dyn FnMut(&mut metafork::frontend::ast::AssignOp, &mut metafork::frontend::ast::Expr)) -> usize {
    use metafork::frontend::ast::{AssignOp, StmtKind};
    let mut n = 0;
    for s in stmts {
        n += match &mut s.kind {
            StmtKind::Assign { op, value, .. } if *op == AssignOp::AtomicAdd => {
                f(op, value);
                1
            }
            StmtKind::Block(items) => map_atomic(items, f),
            StmtKind::If { then_branch, else_branch, .. } => map_atomic(std::slice::from_mut(then_branch), f) + else_branch.as_mut().map_or(0, |e| map_atomic(std::slice::from_mut(e), f)),
            StmtKind::For(l) | StmtKind::MetaFor(l) => map_atomic(std::slice::from_mut(&mut l.body), f),
            _ => 0,
        };
    }
    n
}

/// The differential check of a float reduction: a 2-D grid adding into one element runs its
/// additions in another order than the serial loops (x fastest), so the sums differ in their
/// last bits; the rounding bound of any order of the additions admits that, and the same code
/// with plain additions (no bound) is a mismatch. A term off by one part in a thousand is a
/// mismatch too: the bound is no wider than rounding.
#[test]
fn the_rounding_bound_admits_another_order_and_nothing_more() {
    use metafork::frontend::ast::{AssignOp, BinOp, Expr, ExprKind};
    use metafork::verify::differential::{run_point, Outcome, Programs};
    use metafork::verify::machine::RunOptions;
    let text = "void total(int n, int m, int B0, int B1, const float a[n][m], float t[1]) {\n  assume(n >= 1 && m >= 1 && B0 >= 1 && B1 >= 1);\n  int g0 = (n + B0 - 1) / B0, g1 = (m + B1 - 1) / B1;\n  meta_schedule {\n    meta_for (int v0 = 0; v0 < g0; v0++)\n      meta_for (int v1 = 0; v1 < g1; v1++)\n        meta_for (int u0 = 0; u0 < B0; u0++)\n          meta_for (int u1 = 0; u1 < B1; u1++) {\n            int i = v0 * B0 + u0;\n            int j = v1 * B1 + u1;\n            if (i < n && j < m)\n              t[0] += a[i][j];\n          }\n  }\n}\n";
    let backend = constraints::solver::Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let trees = crate::common::trees_of("total.mf", text, &backend);
    let (f, tree) = &trees[0];
    let leaf = tree.leaves().find(|n| matches!(n.kind, metafork::tree::NodeKind::Leaf)).unwrap();
    let point: std::collections::BTreeMap<String, i64> = [("n", 13), ("m", 11), ("B0", 4), ("B1", 4)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let races = RunOptions { detect_races: true, step_budget: None, kernel_only: false };
    let programs = Programs::new(f, 0, &leaf.staged).unwrap();
    assert!(matches!(run_point(f, &programs, &point, 3, races), Outcome::Passed(_)), "the atomic code is within the bound");
    // The same additions, plain: no race detection (they would race), and no bound.
    let mut plain = (*leaf.staged).clone();
    assert!(map_atomic(&mut plain.body, &mut |op, _| *op = AssignOp::Add) >= 1);
    let programs = Programs::new(f, 0, &plain).unwrap();
    match run_point(f, &programs, &point, 3, RunOptions { detect_races: false, step_budget: None, kernel_only: false }) {
        Outcome::Mismatch(d) => assert_eq!(d.array, "t"),
        other => panic!("plain additions in the grid's order matched the serial sum bit for bit, so this test does not reorder: {other:?}"),
    }
    // Plain additions with race detection: a race.
    assert!(matches!(run_point(f, &programs, &point, 3, races), Outcome::Fault(_)));
    // Every term off by 0.001 (the inputs lie in [-1, 1)).
    let mut off = (*leaf.staged).clone();
    map_atomic(&mut off.body, &mut |_, value| {
        let shifted = Expr::new(ExprKind::Binary(BinOp::Add, Box::new(value.clone()), Box::new(Expr::new(ExprKind::Float { value: 0.001, single: true }, value.span))), value.span);
        *value = shifted;
    });
    let programs = Programs::new(f, 0, &off).unwrap();
    assert!(matches!(run_point(f, &programs, &point, 3, races), Outcome::Mismatch(_)), "terms off by 0.001 passed");
}

/// A dependence carried by a `meta_for` (a prefix sum written as a parallel loop; an in-place
/// stencil) is refused by `gen` where one of the two accesses is, with the threads, the element
/// and the parameter values; the same loop written as a reduction is accepted.
#[test]
fn a_dependence_carried_by_a_meta_for_is_a_located_error() {
    let cases = [
        ("prefix", "void prefix(int n, int B, const float x[n], float y[n]) {\n  assume(n >= 2 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i >= 1 && i < n)\n          y[i] = y[i - 1] + x[i];\n      }\n  }\n}\n", "prefix.mf:9:", "y[i - 1]"),
        ("inplace", "void inplace(int n, int B0, int B1, float a[n][n]) {\n  assume(n >= 3 && B0 >= 1 && B1 >= 1);\n  int g0 = (n + B0 - 1) / B0, g1 = (n + B1 - 1) / B1;\n  meta_schedule {\n    meta_for (int v0 = 0; v0 < g0; v0++)\n      meta_for (int v1 = 0; v1 < g1; v1++)\n        meta_for (int u0 = 0; u0 < B0; u0++)\n          meta_for (int u1 = 0; u1 < B1; u1++) {\n            int i = v0 * B0 + u0;\n            int j = v1 * B1 + u1;\n            if (i >= 1 && i < n - 1 && j >= 1 && j < n - 1)\n              a[i][j] = (a[i - 1][j] + a[i + 1][j] + a[i][j - 1] + a[i][j + 1]) / 4.0f;\n          }\n  }\n}\n", "inplace.mf:12:", "a["),
    ];
    for (name, text, at, access) in cases {
        let (status, err, written) = gen_of(&format!("reduction-dependence-{name}"), &format!("{name}.mf"), text);
        assert_eq!(status, Some(1), "{name}: {err}");
        assert!(err.contains(at) && err.contains("races as written") && err.contains(access) && err.contains("of block") && err.contains("dependence carried by a `meta_for`"), "{name}:\n{err}");
        assert!(!written, "{name}: nothing is written");
    }
    // The prefix loop's update written as a sum over every earlier element: a reduction, fine.
    let sum = "void sums(int n, int B, const float x[n], float y[n]) {\n  assume(n >= 2 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          for (int k = i; k < n; k++)\n            y[k] += x[i];\n      }\n  }\n}\n";
    let (_, stdout) = gen_and_verify("sums", sum);
    assert!(proved_all(&stdout), "{stdout}");
}

/// CUDA has no atomic add on 8-bit elements: a reduction into a `char` array is refused where
/// it is written.
#[test]
fn a_reduction_into_a_char_array_is_a_located_error() {
    let (status, err, _) = gen_of("reduction-char", "hist.mf", "void hist(int n, int B, const char x[n], char count[4]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          count[0] += x[i];\n      }\n  }\n}\n");
    assert_eq!(status, Some(1), "{err}");
    assert!(err.contains("hist.mf:9:11") && err.contains("no atomic add on 8-bit elements"), "{err}");
}

/// `gen_and_verify` of `text` with every leaf proved, and the leaf files (name, text) that
/// reduce in the block (they name the shared array `marker`), at least one.
fn proved_with_block_reduced_leaves(name: &str, text: &str, marker: &str) -> (std::path::PathBuf, Vec<(String, String)>) {
    let (out, stdout) = gen_and_verify(name, text);
    assert!(proved_all(&stdout), "{stdout}");
    let reduced: Vec<(String, String)> = leaf_files(&out).into_iter().filter(|(_, c)| c.contains(marker)).collect();
    assert!(!reduced.is_empty(), "{name}: no leaf reduces in the block (none names `{marker}`)");
    (out, reduced)
}

/// A dot product (every thread adds into `s[0]`).
const DOT: &str = "void dot(int n, int B, const float x[n], const float y[n], float s[1]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          s[0] += x[i] * y[i];\n      }\n  }\n}\n";

/// The tree chooses: where one thread of a block adds to the element (`B <= 1`) the atomic adds
/// stay; where several do, on devices of at most 1024 threads per block, the block sums its
/// threads' terms in shared memory and adds once; on a (hypothetical) device of more threads,
/// whose blocks the tree's strides would not cover, the atomic adds stay. Every leaf is
/// proved, compiles with nvcc, and the dispatcher picks each side at the parameters that
/// belong to it.
#[test]
fn the_tree_reduces_in_the_block_where_threads_contend() {
    use metafork::dispatch::{Dispatcher, Selection};
    use metafork::tree::{Counter, Strategy};
    let (out, stdout) = gen_and_verify("block-dot", DOT);
    assert!(proved_all(&stdout), "{stdout}");
    let backend = constraints::solver::Backend::default();
    let (function, tree) = crate::common::trees_of("dot.mf", DOT, &backend).remove(0);
    let forks: Vec<String> = tree.nodes.iter().flat_map(|n| &n.children).filter(|e| e.counter == Counter::AtomicContention).map(|e| format!("{} {}", e.kind, e.constraint)).collect();
    for want in ["accept B <= 1", "refuse 1 < B", "case T_B <= 1024", "outside 1024 < T_B"] {
        assert!(forks.iter().any(|f| f == want), "no `{want}` edge among {forks:?}");
    }
    let reduced: Vec<_> = tree.leaves().filter(|l| l.code.block_reduce).collect();
    assert!(!reduced.is_empty(), "no leaf reduces in the block");
    for l in &reduced {
        assert!(l.constraints.constraints().iter().any(|c| c.to_string() == "T_B <= 1024"), "leaf {}: {}", l.id, l.constraints);
        assert_eq!(l.counters.shared_bytes.to_string(), "4*B", "leaf {}: one float per thread", l.id);
    }
    // The files: a reduced kernel adds once per block, the others per thread.
    let mut kinds = (0, 0);
    for (name, code) in leaf_files(&out) {
        if code.contains("s_sums") {
            kinds.0 += 1;
            assert_eq!(code.matches("atomicAdd(").count(), 1, "{name}:\n{code}");
            assert!(code.contains("s_part += (float)(x[") && code.contains("s_sums[u] = s_part;") && code.contains("if (u < 512 && u + 512 < B) {") && code.contains("s_sums[u] += s_sums[u + 1];") && code.contains("if (u == 0) {\n    atomicAdd(&s[(long)0], (float)(s_sums[u]));"), "{name}:\n{code}");
            // A barrier between every two steps of the tree, none after the last.
            assert_eq!(code.matches("__syncthreads();").count(), 10, "{name}:\n{code}");
        } else {
            kinds.1 += 1;
            assert!(code.contains("atomicAdd(&s[(long)0], (float)(x["), "{name}:\n{code}");
        }
    }
    assert!(kinds.0 >= 1 && kinds.1 >= 1, "{kinds:?}");
    crate::common::assert_nvcc_compiles(&out, &crate::common::cu_files(&out, "_leaf"));
    // Dispatch on an H100: one thread per block keeps the atomic adds, 256 reduce.
    let d = Dispatcher::new(&function, &tree).unwrap();
    let h100 = metafork::dispatch::DeviceLimits::of(&constraints::device::DeviceProfile::load("h100").unwrap());
    let at = |b: i64| std::collections::BTreeMap::from([("n".to_string(), 100_000i64), ("B".to_string(), b)]);
    let leaf_of = |b: i64| match d.select(&h100, &[], &at(b)).unwrap() {
        Selection::Leaf(i) => tree.leaves().find(|l| metafork::emit::tree_files::leaf_kernel_name(&tree, l.id) == d.kernels[i]).unwrap(),
        other => panic!("B = {b}: {other:?}"),
    };
    assert!(!leaf_of(1).code.block_reduce);
    assert!(leaf_of(256).code.block_reduce);
    assert!(leaf_of(1000).code.block_reduce, "a block that is no power of two");
    // Where the partial sums do not fit (a device of 512 bytes of shared memory per block, 256
    // threads), the tree drops the block reduction and keeps the atomic adds: a kernel still.
    let small = metafork::dispatch::DeviceLimits { shared_memory_per_block: 512, shared_memory_per_block_optin: 512, ..h100 };
    match d.select(&small, &[], &at(256)).unwrap() {
        Selection::Leaf(i) => {
            // Leaves with the same code share a kernel: one of those named so dropped it.
            let named: Vec<_> = tree.leaves().filter(|l| metafork::emit::tree_files::leaf_kernel_name(&tree, l.id) == d.kernels[i]).collect();
            assert!(named.iter().all(|l| !l.code.block_reduce) && named.iter().any(|l| l.applied.contains(&Strategy::DropBlockReduce)), "{:?}", named.iter().map(|l| (l.id, &l.applied)).collect::<Vec<_>>());
        }
        other => panic!("no kernel where the atomic adds fit: {other:?}"),
    }
}

/// Row sums with a 2-D block (threads along `x` share a row, `y` rows apart), a reduction over
/// both dimensions into one element, and another over `y` only, in double; guarded-off rows
/// beyond the array add nothing (the block's add checks the element exists); `int` and `long`
/// sums stay atomic (a partial sum's overflow is undefined in C). Proved, compiled.
#[test]
fn reductions_over_either_dimension_of_a_2d_block_are_proved() {
    let text = "void rows(int n, int m, int B0, int B1, const double a[n][m], double r[n], double c[m], float t[1], int k[n]) {\n  assume(n >= 1 && m >= 1 && B0 >= 1 && B1 >= 1);\n  int g0 = (n + B0 - 1) / B0, g1 = (m + B1 - 1) / B1;\n  meta_schedule {\n    meta_for (int v0 = 0; v0 < g0; v0++)\n      meta_for (int v1 = 0; v1 < g1; v1++)\n        meta_for (int u0 = 0; u0 < B0; u0++)\n          meta_for (int u1 = 0; u1 < B1; u1++) {\n            int i = v0 * B0 + u0;\n            int j = v1 * B1 + u1;\n            if (i < n && j < m) {\n              r[i] += a[i][j] - 0.5;\n              c[j] -= a[i][j];\n              t[0] += (float)a[i][j];\n              k[i] += 1;\n            }\n          }\n  }\n}\n";
    let (out, reduced) = proved_with_block_reduced_leaves("block-rows", text, "r_sums");
    for (name, code) in &reduced {
        assert!(code.contains("if (u1 == 0 && 0 <= i && i < n) {\n    atomicAdd(&r[(long)i]"), "{name}: the row's add checks the row exists:\n{code}");
        assert!(code.contains("if (u0 == 0 && 0 <= j && j < m) {\n    atomicAdd(&c[(long)j]"), "{name}:\n{code}");
        assert!(code.contains("if (u1 == 0 && u0 == 0) {\n    atomicAdd(&t[(long)0]"), "{name}:\n{code}");
        assert!(code.contains("atomicAdd(&k[(long)i], (int)(1))"), "{name}: the int sum stays atomic:\n{code}");
        assert!(code.contains("t_part += (float)metafork_cse0;") || code.contains("t_part += (float)a["), "{name}: one cast to the element's type:\n{code}");
        assert!(!code.contains("k_part"), "{name}:\n{code}");
    }
    crate::common::assert_nvcc_compiles(&out, &crate::common::cu_files(&out, "_leaf"));
}

/// What cannot be reduced in the block stays atomic: a data-dependent subscript (a histogram),
/// a target the kernel also reads, an update inside a serial loop whose counter is in the
/// subscript. A user's own names that look like the reduction's (`s_part`, `s_sums`) are
/// named apart.
#[test]
fn reductions_the_block_cannot_sum_stay_atomic_and_names_do_not_collide() {
    let hist = "void hist(int n, int B, const int x[n], float h[16]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n) {\n          int b = (x[i] % 16 + 16) % 16;\n          h[b] += 1.0f;\n        }\n      }\n  }\n}\n";
    // (`verify` does not model a data-dependent subscript, so only `gen` here.)
    let dir = scratch("block-hist");
    let (source, out) = (dir.join("hist.mf"), dir.join("out"));
    std::fs::write(&source, hist).unwrap();
    let g = metafork(&["gen", source.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    for (name, code) in leaf_files(&out) {
        assert!(!code.contains("__shared__") && code.contains("atomicAdd(&h["), "{name}:\n{code}");
    }
    let names = "void clash(int n, int B, const float x[n], float s[1], float s_part[n], float s_sums[n]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n) {\n          s[0] += x[i];\n          s_part[i] = x[i];\n          s_sums[i] = 2.0f * x[i];\n        }\n      }\n  }\n}\n";
    // The tool's shared sums are named apart from the user's `s_sums`.
    let (out, reduced) = proved_with_block_reduced_leaves("block-clash", names, "metafork_s_sums");
    for (name, code) in &reduced {
        assert!(code.contains("metafork_s_part +=") && code.contains("  s_part[(long)i] = ") && code.contains("  s_sums[(long)i] = "), "{name}:\n{code}");
    }
    crate::common::assert_nvcc_compiles(&out, &crate::common::cu_files(&out, "_leaf"));
}

/// A block's partial sum stands for the terms it adds in the rounding bound: terms of
/// alternating sign and magnitude 10^7 cancel in each block's sum, which the serial program
/// adds in another order; the bound of any order of the original terms admits the difference,
/// where a bound on the blocks' sums alone reported a mismatch (bench/RESULTS.md).
#[test]
fn a_blocks_partial_sum_counts_its_terms_in_the_rounding_bound() {
    let text = "void cancel(int n, int B, const float x[n], float s[1]) {\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        if (i < n)\n          s[0] += (i % 2 == 0 ? 1.0e7f : -1.0e7f) + x[i];\n      }\n  }\n}\n";
    let (out, stdout) = gen_and_verify("block-cancel", text);
    assert!(proved_all(&stdout), "{stdout}");
    assert!(leaf_files(&out).iter().any(|(_, c)| c.contains("s_sums")), "no leaf reduces in the block");
}

/// A subscript computed inside a serial loop from the block's counters only (`int j = v1 * B1 +
/// u1;` in the loop over row tiles) names one element for the whole loop: the partial sum runs
/// across the loop, and the block's add after it writes the definition out, since `j` is out of
/// scope there. Proved, compiled.
#[test]
fn a_subscript_defined_inside_a_serial_loop_is_written_out_for_the_blocks_add() {
    let text = "void colsumt(int n, int m, int B0, int B1, const float a[n][m], float c[m]) {\n  assume(n >= 1 && m >= 1 && B0 >= 1 && B1 >= 1);\n  int g1 = (m + B1 - 1) / B1;\n  int t = (n + B0 - 1) / B0;\n  meta_schedule {\n    meta_for (int v1 = 0; v1 < g1; v1++)\n      meta_for (int u0 = 0; u0 < B0; u0++)\n        meta_for (int u1 = 0; u1 < B1; u1++)\n          for (int k = 0; k < t; k++) {\n            int i = k * B0 + u0;\n            int j = v1 * B1 + u1;\n            if (i < n && j < m)\n              c[j] += a[i][j];\n          }\n  }\n}\n";
    let (out, reduced) = proved_with_block_reduced_leaves("block-colsumt", text, "c_sums");
    for (name, code) in &reduced {
        assert!(code.contains("if (u0 == 0 && 0 <= v1 * B1 + u1 && v1 * B1 + u1 < m) {\n    atomicAdd(&c[(long)(v1 * B1 + u1)]"), "{name}:\n{code}");
    }
    crate::common::assert_nvcc_compiles(&out, &crate::common::cu_files(&out, "_leaf"));
}


/// A reduction's element is never prefetched into a register across a serial loop (found by
/// the pipeline fuzzer): other threads add to it meanwhile, so a register copy written back
/// after the loop would lose their additions, and `gen` used to fail emitting an atomic add to
/// a register. Every leaf adds to `s[0]` atomically, per term or per block.
#[test]
fn a_reductions_element_is_never_prefetched_into_a_register() {
    let text = "void rowsums(int n, int m, int B, const float a[n][m], float s[1]) {\n  assume(n >= 1 && m >= 1 && B >= 1 && n % B == 0);\n  int g = n / B;\n  meta_schedule {\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        for (int k = 0; k < m; k++)\n          s[0] += a[i][k];\n      }\n  }\n}\n";
    let dir = crate::common::scratch("reduction-prefetch");
    std::fs::write(dir.join("rowsums.mf"), text).unwrap();
    let out = dir.join("out");
    let g = metafork(&["gen", "--emit-cuda", dir.join("rowsums.mf").to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let leaves = leaf_files(&out);
    assert!(!leaves.is_empty());
    for (name, code) in &leaves {
        assert!(code.contains("atomicAdd(&s[(long)0]") && !code.contains("s_reg"), "{name}:\n{code}");
    }
}

/// `tune` counts same-address atomic adds (issue 26's leftover; fitted on an H200's dot product,
/// bench/RESULTS.md "Same-address atomic adds"): at n = 2^24 the one-thread blocks, whose every
/// thread adds to `s[0]`, are bound by the adds (2^24 of them, about 30 ms) and rank last; a
/// block-reduced configuration adds once per block, so the larger the block the fewer adds, and
/// B = 2 to 32 are ordered by them.
#[test]
fn tune_counts_same_address_atomic_adds() {
    let out = metafork(&["tune", &format!("{}/examples/dot.mf", env!("CARGO_MANIFEST_DIR")), "--device", "h200", "--size", "n=16777216", "--estimates", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ranked: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let at = |b: i64| ranked.iter().position(|c| c["parameters"]["B"].as_i64() == Some(b)).unwrap_or_else(|| panic!("B = {b} admissible"));
    let one = &ranked[at(1)];
    assert_eq!(at(1), ranked.len() - 1, "the atomic leaf ranks last");
    assert_eq!(one["bound"], "atomics");
    let seconds = one["estimated_seconds"].as_f64().unwrap();
    assert!((0.025..0.035).contains(&seconds), "{one}");
    for b in [2, 4, 8, 16, 32] {
        assert_eq!(ranked[at(b)]["bound"], "atomics", "B = {b}");
        assert!(at(b) > at(2 * b), "B = {b} adds twice as often as B = {}", 2 * b);
    }
    assert_ne!(ranked[0]["bound"], "atomics", "{}", ranked[0]);
}

/// A `+=` whose subscript folds its counters (`s[i % 2]`, `s[i * 0]`) is a reduction: several
/// iterations meet at one element (a helper's: it was refused as a race, with the advice to write
/// `+=`). A subscript whose counters cancel (`s[i - i]`) stays each iteration's own and is
/// refused with its two threads and a note that says why this `+=` was not a sum.
#[test]
fn a_subscript_that_folds_its_counters_is_a_reduction() {
    let program = |subscript: &str| format!("void fold(int n, int B, const float a[n], float s[2]) {{\n  assume(n >= 1 && B >= 1);\n  int g = (n + B - 1) / B;\n  meta_schedule {{\n    meta_for (int v = 0; v < g; v++)\n      meta_for (int u = 0; u < B; u++) {{\n        int i = v * B + u;\n        if (i < n)\n          s[{subscript}] += a[i];\n      }}\n  }}\n}}\n");
    for (name, subscript) in [("fold_rem", "i % 2"), ("fold_zero", "i * 0")] {
        let (out, stdout) = gen_and_verify(name, &program(subscript));
        assert!(proved_all(&stdout), "{name}: {stdout}");
        assert!(leaf_files(&out).iter().any(|(_, text)| text.contains("atomicAdd(&s[")), "{name}: the kernels add atomically");
    }
    let dir = scratch("reduction-fold-cancel");
    let source = dir.join("cancel.mf");
    std::fs::write(&source, program("i - i")).unwrap();
    let g = metafork(&["gen", "--color", "never", source.to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()]);
    assert_eq!(g.status.code(), Some(1));
    let err = String::from_utf8_lossy(&g.stderr);
    assert!(err.contains("cancel.mf:9:11: schedule `fold` races as written") && err.contains("the counters cancel"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A sum read back in its own schedule (`tot[0] += a[i]; out[i] = tot[0];`): refused as a race
/// (other iterations are still adding), located at the read, with a note that says the sum is
/// complete only after the schedule. A sweep found it located at the `+=` and advised writing
/// `+=`, which the line already did.
#[test]
fn a_sum_read_in_its_own_schedule_is_refused_at_the_read() {
    let dir = scratch("reduction-read-back");
    let source = dir.join("redread.mf");
    std::fs::write(&source, "void redread(int n, int B, const float a[n], float tot[1], float out[n]) {\n  assume(n >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int g = 0; g < (n + B - 1) / B; g++)\n      meta_for (int t = 0; t < B; t++) {\n        int i = g * B + t;\n        if (i < n) {\n          tot[0] += a[i];\n          out[i] = tot[0];\n        }\n      }\n  }\n}\n").unwrap();
    let g = metafork(&["gen", "--color", "never", source.to_str().unwrap(), "-o", dir.join("out").to_str().unwrap()]);
    assert_eq!(g.status.code(), Some(1));
    let err = String::from_utf8_lossy(&g.stderr);
    assert!(err.contains("redread.mf:9:20: schedule `redread` races as written") && err.contains("`tot[0] += ...` is a sum across the `meta_for` iterations") && !err.contains("write `+=`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
