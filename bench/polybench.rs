//! Benchmark (`make bench-polybench`, issue 26.3): every program of `examples/polybench/`
//! through the whole pipeline, one Markdown row each: schedules, leaves, distinct kernels,
//! the median wall time of `gen --emit-cuda` (3 runs after a warm-up), whether nvcc compiles
//! every generated `.cu` for sm_75, sm_80 and sm_90 (one `nvcc -c` per file with the three
//! `-gencode`s), and `metafork verify`'s verdicts (proved, unreachable, unverified, defects) and
//! exit status. A program that fails a stage says which in its row; the table goes on.
//!
//! Runs the release binary (`make bench-polybench` builds it) and the pinned nvcc on PATH.
//! `METAFORK_POLYBENCH=a,b` limits the run to those programs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const RUNS: usize = 3;
/// `verify`'s time limit per program (its `--time-limit`), seconds.
const VERIFY_BUDGET_S: &str = "600";

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/metafork");
    assert!(bin.is_file(), "{} is missing: run `cargo build --release` first (make bench-polybench does)", bin.display());
    let only: Option<Vec<String>> = std::env::var("METAFORK_POLYBENCH").ok().map(|v| v.split(',').map(str::to_string).collect());
    let mut programs: Vec<PathBuf> = std::fs::read_dir(root.join("examples/polybench")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).collect();
    programs.sort();
    programs.retain(|p| only.as_ref().is_none_or(|o| o.iter().any(|n| p.file_stem().is_some_and(|s| s == n.as_str()))));
    let out = tempfile::tempdir().unwrap();
    println!("| kernel | schedules | leaves (with a kernel) | distinct kernels | gen median | nvcc sm_75/80/90 | verify: proved / unreachable / unverified / defect | exit |");
    println!("|---|---|---|---|---|---|---|---|");
    let (mut all, mut clean) = (0, 0);
    for source in programs {
        let name = source.file_stem().unwrap().to_string_lossy().into_owned();
        let target = out.path().join(&name);
        all += 1;
        let mut times = Vec::new();
        let mut failed = None;
        for run in 0..=RUNS {
            let start = Instant::now();
            let o = Command::new(&bin).args(["gen", "--emit-cuda"]).arg(&source).arg("-o").arg(&target).output().unwrap();
            if !o.status.success() {
                failed = Some(String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("").to_string());
                break;
            }
            if run > 0 {
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        if let Some(e) = failed {
            println!("| {name} | | | | gen failed: {} | | | |", e.replace('|', "\\|"));
            continue;
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let yaml: serde_yaml::Value = serde_yaml::from_slice(&std::fs::read(target.join("tree.yaml")).unwrap()).unwrap();
        let schedules = yaml["schedules"].as_sequence().unwrap();
        let leaves: usize = schedules.iter().map(|s| s["leaves"].as_sequence().map_or(0, |l| l.len())).sum();
        let files: Vec<PathBuf> = std::fs::read_dir(&target).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu")).collect();
        let kernels = files.iter().filter(|p| p.to_string_lossy().contains("_leaf")).count();
        let mut nvcc_failures = Vec::new();
        for cu in &files {
            let o = Command::new("nvcc")
                .args(["-c", "-O3", "-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-o", "/dev/null", "-I"])
                .arg(&target)
                .arg(cu)
                .output()
                .expect("nvcc on PATH");
            if !o.status.success() {
                nvcc_failures.push(cu.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
        let nvcc = if nvcc_failures.is_empty() { format!("{} files ok", files.len()) } else { format!("FAILED: {}", nvcc_failures.join(", ")) };
        let o = Command::new(&bin).args(["verify", "--json", "--time-limit", VERIFY_BUDGET_S]).arg(&target).output().unwrap();
        let code = o.status.code().map_or("signal".to_string(), |c| c.to_string());
        let verdicts: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let count = |s: &str| verdicts.iter().filter(|v| v["status"] == s).count();
        if nvcc_failures.is_empty() && code == "0" {
            clean += 1;
        }
        println!(
            "| {name} | {} | {leaves} ({}) | {kernels} | {:.0} ms | {nvcc} | {} / {} / {} / {} | {code} |",
            schedules.len(),
            verdicts.len(),
            times[RUNS / 2],
            count("proved"),
            count("unreachable"),
            count("unverified"),
            count("defect")
        );
    }
    println!("\n{clean} of {all} programs generate, compile for sm_75/80/90 and verify (exit 0)");
}
