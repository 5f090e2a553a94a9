//! Benchmark: verifying every kernel leaf of the paper's four examples (`make bench-verify`).
//! Per example: the trees are built once (not timed), then `verify_tree` runs 3 times (the Z3
//! checks with the verifier's query limit, 4 differential points per leaf); prints the median
//! time, leaves, and how many are proved, defective or unverified, as a Markdown table. Each
//! run starts with the verifier's memory of decided queries empty (it lasts a process).

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use metafork::verify::{verify_tree, Options, Status};
use std::time::Instant;

fn main() {
    println!("| example | median time (s) | leaves | proved | defect | unverified |");
    println!("|---|---|---|---|---|---|");
    let mut total = 0.0;
    for name in ["matadd", "matmul", "jacobi1d", "transpose"] {
        let path = format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        let p = check_source(&path, &text).unwrap();
        let build = Backend::default();
        let mut trees = Vec::new();
        for k in &p.kernels {
            for s in &k.schedules {
                trees.push((k, metafork::tree::build(k, Kernel::from_schedule(k, s).unwrap(), &build).unwrap()));
            }
        }
        let mut times = Vec::new();
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let backend = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
            metafork::verify::twothread::forget_verdicts();
            let start = Instant::now();
            statuses.clear();
            for (k, t) in &trees {
                statuses.extend(verify_tree(k, t, &backend, Options::default()).unwrap().iter().map(|r| r.status()));
            }
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        total += times[1];
        let count = |f: &dyn Fn(&Status) -> bool| statuses.iter().filter(|s| f(s)).count();
        println!(
            "| {name} | {:.2} | {} | {} | {} | {} |",
            times[1],
            statuses.len(),
            count(&|s| *s == Status::Proved),
            count(&|s| matches!(s, Status::Defect(..))),
            count(&|s| matches!(s, Status::Unverified(_)))
        );
    }
    println!("| **total** | {total:.2} | | | | |");
}
