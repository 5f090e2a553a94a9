//! Benchmark: the register estimate against `ptxas -v` for every kernel in `examples/` and
//! each of its strategy variants (no unrolling; reduced granularity; both; each cached; each
//! cached one with 32-bit tile indices).
//! Run with `make bench-counters` (needs `ptxas` on PATH). Prints a Markdown table: the pure
//! liveness count, the model's estimate, ptxas at sm_75/sm_80/sm_90, the relative error at
//! sm_90, and the mean and maximum absolute relative error per architecture.

use metafork::counters::count_with_cuda;
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use std::time::Instant;

const ARCHS: [&str; 3] = ["sm_75", "sm_80", "sm_90"];

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut files: Vec<_> = std::fs::read_dir(dir).expect("examples/").filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "mf")).collect();
    files.sort();
    let archs: Vec<String> = ARCHS.iter().map(|s| s.to_string()).collect();
    println!("| kernel | liveness words | estimate | ptxas sm_75 | ptxas sm_80 | ptxas sm_90 | error sm_90 | nvcc .cu sm_90 |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut errors: Vec<Vec<f64>> = vec![Vec::new(); ARCHS.len()];
    let start = Instant::now();
    let backend = constraints::solver::Backend::default();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let program = check_source(&f.display().to_string(), &text).unwrap_or_else(|d| panic!("{}", d.render(false)));
        for k in &program.kernels {
            for s in &k.schedules {
                for (variant, kernel) in metafork::tree::strategy_variants(k, Kernel::from_schedule(k, s).unwrap(), &backend) {
                let c = count_with_cuda(Some(k), &kernel, &archs).unwrap_or_else(|e| panic!("{}: {e}", s.name));
                let est = c.registers.registers as f64;
                let truth: Vec<u32> = ARCHS.iter().map(|a| c.ptxas[*a].registers).collect();
                for (i, t) in truth.iter().enumerate() {
                    errors[i].push((est - *t as f64).abs() / *t as f64);
                }
                let e90 = (est - truth[2] as f64) / truth[2] as f64;
                println!(
                    "| {}{} | {} | {}{} | {} | {} | {} | {:+.1}% | {} |",
                    c.kernel,
                    variant,
                    c.registers.max_live_words,
                    c.registers.registers,
                    if c.registers.unrolled_loop { " (u)" } else { "" },
                    truth[0],
                    truth[1],
                    truth[2],
                    100.0 * e90,
                    c.nvcc["sm_90"].registers
                );
                }
            }
        }
    }
    println!();
    println!("| architecture | kernels | mean abs. error | max abs. error |");
    println!("|---|---|---|---|");
    for (i, a) in ARCHS.iter().enumerate() {
        let e = &errors[i];
        let mean = e.iter().sum::<f64>() / e.len() as f64;
        let max = e.iter().cloned().fold(0.0, f64::max);
        println!("| {a} | {} | {:.1}% | {:.1}% |", e.len(), 100.0 * mean, 100.0 * max);
    }
    println!();
    println!("(u): an innermost loop ptxas unrolls; estimate raised by four overlapped copies of one iteration, up to the occupancy-free budget (32). Total {:.1} s.", start.elapsed().as_secs_f64());
}
