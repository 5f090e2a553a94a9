//! Benchmark (`make bench-ppcg`, issue 25): the whole `metafork gen --emit-cuda` process on
//! the PolyBench/C 4.2.1 kernels of `examples/polybench/`, median wall time of `RUNS` runs
//! (after one warm-up run), each into the directory the run before wrote (a rerun: files
//! whose bytes are unchanged are linked, not rewritten) and each into a new directory, beside
//! PPCG 0.09's time to make its single CUDA variant of the same
//! kernel, and the ratio. The PPCG figures are medians measured on a machine of this kind
//! (2 cores) and published in issue 25; PPCG is not built here. Prints a Markdown table.
//!
//! It runs the release binary (`cargo build --release` first: `make bench-ppcg` does).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// PPCG 0.09 (isl 0.25), median milliseconds per kernel (issue 25).
const PPCG_MS: [(&str, f64); 8] = [("gemm", 642.0), ("2mm", 1312.0), ("atax", 347.0), ("bicg", 326.0), ("mvt", 226.0), ("syrk", 794.0), ("jacobi1d", 145.0), ("jacobi2d", 385.0)];

const RUNS: usize = 11;
const TARGET_RATIO: f64 = 10.0;

fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let bin = Path::new(root).join("target/release/metafork");
    assert!(bin.is_file(), "{} is missing: run `cargo build --release` first (make bench-ppcg does)", bin.display());
    let out = tempfile::tempdir().unwrap();
    println!("| kernel | metafork median, rerun | min | max | new directory median | PPCG | PPCG / metafork (rerun, new directory) | kernels (leaves) |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut worst = f64::INFINITY;
    for (name, ppcg) in PPCG_MS {
        let source = Path::new(root).join(format!("examples/polybench/{name}.mf"));
        let target = out.path().join(name);
        let gen = |target: &Path| {
            let start = Instant::now();
            let o = Command::new(&bin).args(["gen", "--emit-cuda"]).arg(&source).arg("-o").arg(target).output().unwrap();
            let ms = start.elapsed().as_secs_f64() * 1e3;
            assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
            ms
        };
        let sorted = |mut times: Vec<f64>| {
            times.sort_by(|a, b| a.partial_cmp(b).unwrap());
            times
        };
        // Run 0 warms up (and writes the directory the reruns replace).
        let times = sorted((0..=RUNS).map(|_| gen(&target)).skip(1).collect());
        let fresh = sorted((0..=RUNS).map(|run| gen(&out.path().join(format!("{name}-new-{run}")))).skip(1).collect());
        let (median, fresh_median) = (times[RUNS / 2], fresh[RUNS / 2]);
        let files: Vec<String> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        let kernels = files.iter().filter(|f| f.ends_with(".cu") && !f.ends_with("_dispatch.cu")).count();
        let yaml: serde_yaml::Value = serde_yaml::from_slice(&std::fs::read(target.join("tree.yaml")).unwrap()).unwrap();
        let leaves: usize = yaml["schedules"].as_sequence().unwrap().iter().map(|s| s["leaves"].as_sequence().map_or(0, |l| l.len())).sum();
        let (ratio, fresh_ratio) = (ppcg / median, ppcg / fresh_median);
        worst = worst.min(ratio).min(fresh_ratio);
        println!("| {name} | {median:.1} ms | {:.1} ms | {:.1} ms | {fresh_median:.1} ms | {ppcg:.0} ms | {ratio:.1}x, {fresh_ratio:.1}x | {kernels} ({leaves}) |", times[0], times[RUNS - 1]);
    }
    println!("\nsmallest ratio, of reruns and new directories: {worst:.1}x (target: at least {TARGET_RATIO}x)");
}
