//! Benchmark: decision-tree generation per example (`make bench-gen`). For each example, the
//! median of 5 runs of the whole `gen` pipeline in-process (check, kernel form, tree with
//! counters and Z3, emitted CUDA), with Z3 queries, nodes and leaves. Prints a Markdown table.

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
}
