//! Benchmark: decision-tree generation per example (`make bench-gen`). For each example, the
//! median of 5 runs of the whole `gen` pipeline in-process (check, kernel form, tree with
//! counters and Z3, emitted CUDA), with Z3 queries, nodes and leaves. Prints a Markdown table;
//! then how the time grows with the number of periodic reads (`b[(i + k) % N]`) of one kernel,
//! each one a division the access models define an auxiliary for (a user's finding: 15 s at
//! 100 such reads, over 300 s at 200, before the proofs were memoised).

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use std::time::Instant;

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).collect();
    files.sort();
    println!("| example | median time | min | max | Z3 queries | nodes | leaves (kernels) |");
    println!("|---|---|---|---|---|---|---|");
    let mut all = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut times = Vec::new();
        let (mut queries, mut nodes, mut leaves, mut kernels) = (0, 0, 0, 0);
        for _ in 0..5 {
            let start = Instant::now();
            let p = check_source(&f.display().to_string(), &text).unwrap();
            let backend = Backend::default();
            let mut trees = Vec::new();
            for k in &p.kernels {
                for s in &k.schedules {
                    trees.push((k, metafork::tree::build(k, Kernel::from_schedule(k, s).unwrap(), &backend).unwrap()));
                }
            }
            let g = metafork::emit::tree_files::generate(&f.display().to_string(), &trees, true).unwrap();
            times.push(start.elapsed().as_secs_f64());
            queries = backend.queries();
            nodes = trees.iter().map(|(_, t)| t.nodes.len()).sum();
            leaves = trees.iter().map(|(_, t)| t.leaves().count()).sum();
            kernels = g.files.keys().filter(|k| k.ends_with(".cu") && !k.ends_with("_dispatch.cu")).count();
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        all.push(times[2]);
        println!(
            "| {} | {:.3} s | {:.3} s | {:.3} s | {queries} | {nodes} | {leaves} ({kernels}) |",
            f.file_stem().unwrap().to_string_lossy(),
            times[2],
            times[0],
            times[4]
        );
    }
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("\nslowest median: {:.3} s (target: under 1 s per example)", all.last().unwrap());
    periodic_reads();
}

/// `gen`'s time (median of 3) for one kernel with `k` periodic reads, as `k` statements and as
/// one sum of `k` terms.
fn periodic_reads() {
    println!("\n| periodic reads | statements: median time | one sum: median time |");
    println!("|---|---|---|");
    for k in [25, 50, 100, 200] {
        let statements: String = (0..k).map(|j| format!("        a[i] = a[i] * 1.0001f + b[(i + {j}) % N];\n")).collect();
        let sum: String = format!("        a[i] = {};\n", (0..k).map(|j| format!("b[(i + {j}) % N]")).collect::<Vec<_>>().join(" + "));
        let program = |body: &str| format!("void bb(int N, int B, float a[N], const float b[N]) {{\n  assume(N >= 1 && B >= 1 && N % B == 0);\n  meta_schedule {{\n    meta_for (int v = 0; v < N / B; v++)\n      meta_for (int u = 0; u < B; u++) {{\n        int i = v * B + u;\n{body}      }}\n  }}\n}}\n");
        let time = |text: &str| {
            let mut times: Vec<f64> = (0..3)
                .map(|_| {
                    let start = Instant::now();
                    let p = check_source("periodic.mf", text).unwrap();
                    let backend = Backend::default();
                    let k = &p.kernels[0];
                    let tree = metafork::tree::build(k, Kernel::from_schedule(k, &k.schedules[0]).unwrap(), &backend).unwrap();
                    metafork::emit::tree_files::generate("periodic.mf", &[(k, tree)], true).unwrap();
                    start.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(|a, b| a.partial_cmp(b).unwrap());
            times[1]
        };
        println!("| {k} | {:.2} s | {:.2} s |", time(&program(&statements)), time(&program(&sum)));
    }
}
