//! Benchmark (`make bench-pipeline`, issue 25): the pipeline the counters run
//! (`llvm_passes::pipeline::PIPELINE`, `default<O2>` less the passes whose work the register
//! estimate does not see) against `default<O2>` itself, over the corpus.
//!
//! For every program, every schedule's tree is built and every distinct code at one of its
//! nodes (the staged code the tree counted there) is lowered twice: once optimised by
//! `default<O2>`, once by the pipeline. Each pair is compared by its register estimate (every
//! term, and the register count) and, for information, by its function bodies
//! (`pipeline::function_bodies`). Prints per part the programs, the codes, how many are
//! identical, and the median time per module of each pipeline with their ratio; then every
//! code whose estimate differs. The design part is where the passes were chosen (every
//! estimate the same there by construction: the run fails otherwise); the report part (the
//! held-out folders and the tests' programs) was only checked.
//! `PIPELINE_EXTRA=DIR[,DIR...]` adds a part `extra` of the `.mf` programs in those folders
//! (a user's own kernels, a hostile case); a program that does not parse is skipped, said so.
//! `PIPELINE_DIFF_DIR=DIR` writes the two bodies of each code that differs there
//! (`SCHEDULE-nodeN.o2.ll`, `SCHEDULE-nodeN.pipeline.ll`) where the estimates differ, to find
//! the pass that matters.

use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

#[path = "corpus.rs"]
mod corpus;
use corpus::programs;

/// The design part is `bench-counters`' (the passes were chosen on its codes, thirty-second
/// session); every other folder reports.
const PARTS: [(&str, &[&str]); 2] = [
    ("design", &["examples", "examples/polybench", "examples/design-red"]),
    ("report", &["examples/heldout", "examples/heldout-2", "examples/heldout-3", "examples/heldout-4", "examples/heldout-5", "examples/heldout-6", "examples/heldout-7", "examples/heldout-8", "examples/heldout-9", "examples/heldout-10", "examples/heldout-11", "examples/heldout-12", "examples/heldout-13", "examples/reductions", "examples/reductions-2", "examples/language", "tests/programs"]),
];

/// What one pipeline made of a code.
struct Optimised {
    /// The function bodies (`pipeline::function_bodies`).
    bodies: String,
    /// The register estimate, every term (its `Debug` text).
    terms: String,
    /// The estimate's register count.
    registers: u32,
    /// Seconds the pipeline took.
    seconds: f64,
}

/// `kernel` lowered and optimised by `default<O2>` (`reference`) or by the counters' pipeline.
fn optimised(kernel: &Kernel, reference: bool) -> Optimised {
    let context = inkwell::context::Context::create();
    let module = metafork::lower::lower_kernel(&context, kernel).unwrap();
    let start = Instant::now();
    if reference {
        llvm_passes::pipeline::optimize_reference(&module).unwrap();
    } else {
        llvm_passes::pipeline::optimize(&module).unwrap();
    }
    let seconds = start.elapsed().as_secs_f64();
    let estimate = metafork::counters::estimate_of(&module, &kernel.name).unwrap();
    Optimised { bodies: llvm_passes::pipeline::function_bodies(&module), terms: format!("{estimate:?}"), registers: estimate.registers, seconds }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let backend = constraints::solver::Backend::default();
    let mut differing = Vec::new();
    let mut design_differs = false;
    println!("| part | programs | distinct codes | identical estimates | identical register counts | identical bodies | O2 ms/module | pipeline ms/module | ratio |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let extra: Vec<String> = std::env::var("PIPELINE_EXTRA").map(|v| v.split(',').map(str::to_string).collect()).unwrap_or_default();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    if let Some(missing) = extra.iter().find(|d| !Path::new(d).is_dir()) {
        eprintln!("PIPELINE_EXTRA names `{missing}`, which is not a folder");
        std::process::exit(2);
    }
    let parts: Vec<(&str, &[&str])> = PARTS.into_iter().chain((!extra.is_empty()).then_some(("extra", extra.as_slice()))).collect();
    for (part, dirs) in parts {
        let (mut programs_seen, mut codes, mut same_bodies, mut same_estimates, mut same_registers) = (0, 0, 0, 0, 0);
        let (mut reference_s, mut pipeline_s) = (Vec::new(), Vec::new());
        for path in programs(root, dirs) {
            let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let program = match check_source(&shown, &text) {
                Ok(program) => program,
                Err(d) => {
                    eprintln!("skipped {shown}: {}", d.render(false));
                    continue;
                }
            };
            programs_seen += 1;
            for function in &program.kernels {
                for schedule in &function.schedules {
                    let Ok(kernel) = Kernel::from_schedule(function, schedule) else { continue };
                    let tree = metafork::tree::build(function, kernel, &backend).unwrap_or_else(|e| panic!("{shown}: {e}"));
                    let mut seen = HashSet::new();
                    for node in &tree.nodes {
                        if !seen.insert(node.staged.clone()) {
                            continue;
                        }
                        codes += 1;
                        // Alternate which runs first, so neither gains from a warm cache.
                        let first_reference = codes % 2 == 0;
                        let a = optimised(&node.staged, first_reference);
                        let b = optimised(&node.staged, !first_reference);
                        let (reference, ours) = if first_reference { (a, b) } else { (b, a) };
                        reference_s.push(reference.seconds);
                        pipeline_s.push(ours.seconds);
                        same_bodies += usize::from(reference.bodies == ours.bodies);
                        same_estimates += usize::from(reference.terms == ours.terms);
                        same_registers += usize::from(reference.registers == ours.registers);
                        if reference.terms != ours.terms {
                            design_differs |= part == "design";
                            differing.push(format!("{part} {shown} {} node {}: {} registers (O2) vs {}; terms {} vs {}", tree.schedule, node.id, reference.registers, ours.registers, reference.terms, ours.terms));
                            if let Some(dir) = std::env::var_os("PIPELINE_DIFF_DIR") {
                                let stem = Path::new(&dir).join(format!("{}-node{}", tree.schedule, node.id));
                                std::fs::write(stem.with_extension("o2.ll"), &reference.bodies).unwrap();
                                std::fs::write(stem.with_extension("pipeline.ll"), &ours.bodies).unwrap();
                            }
                        }
                    }
                }
            }
        }
        let (r, p) = (median(reference_s) * 1e3, median(pipeline_s) * 1e3);
        println!("| {part} | {programs_seen} | {codes} | {same_estimates} | {same_registers} | {same_bodies} | {r:.2} | {p:.2} | {:.2}x |", r / p.max(1e-9));
    }
    if differing.is_empty() {
        println!("\nEvery code's estimate is the same after both pipelines.");
    } else {
        println!("\nCodes whose estimates differ:");
        for d in &differing {
            println!("- {d}");
        }
    }
    if design_differs {
        eprintln!("a design-part code's estimate differs: the pipeline no longer gives default<O2>'s estimates where its passes were chosen");
        std::process::exit(1);
    }
}
