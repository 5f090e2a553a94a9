//! Benchmark: search-space construction (`make bench-spaces`). For each space of
//! `bench/tuning-spaces.yaml` (a copy of `shared/bench/tuning-spaces.yaml`: four published
//! spaces and one synthetic, with their admissible counts and Kernel Tuner 1.5.0's construction
//! times), the median of 7 constructions by constraint propagation, the admissible count (which
//! must equal the file's), and the ratio to Kernel Tuner's time. Prints a Markdown table; exits
//! non-zero if a count differs.

use metafork::tune::space::load;
use std::time::Instant;

fn main() {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/tuning-spaces.yaml"));
    let spaces = load(path, None).unwrap_or_else(|e| panic!("{e}"));
    println!("| space | parameters | Cartesian | admissible (ours) | admissible (file) | median | min | max | Kernel Tuner | speed-up |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut wrong = false;
    let mut worst = f64::INFINITY;
    for (name, space, spec) in &spaces {
        let mut times = Vec::new();
        let mut count = 0;
        for _ in 0..7 {
            let start = Instant::now();
            let admissible = space.build(None, None);
            times.push(start.elapsed().as_secs_f64());
            count = admissible.len();
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let median = times[3];
        let expected = spec.valid.map_or("-".to_string(), |v| v.to_string());
        wrong |= spec.valid.is_some_and(|v| v != count as u64);
        let (kt, ratio) = match spec.kernel_tuner_s {
            Some(kt) => {
                worst = worst.min(kt / median);
                (format!("{kt:.4} s"), format!("{:.1}x", kt / median))
            }
            None => ("-".into(), "-".into()),
        };
        println!("| {name} | {} | {} | {count} | {expected} | {:.2} ms | {:.2} ms | {:.2} ms | {kt} | {ratio} |", space.names.len(), space.cartesian(), median * 1e3, times[0] * 1e3, times[6] * 1e3);
    }
    println!("\nsmallest speed-up over Kernel Tuner: {worst:.1}x (target: at least 10x on every space)");
    if wrong {
        eprintln!("error: an admissible count differs from the file's");
        std::process::exit(1);
    }
}
