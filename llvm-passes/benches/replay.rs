//! Replays the register model on kernels' optimised IR, against the ptxas counts a run of
//! `make bench-counters` recorded, in about a second for the whole corpus: the loop to try a
//! rule of `llvm-passes/src/registers.rs` on (build, replay, compare) before the full
//! benchmark confirms it.
//!
//! `COUNTERS_IR=DIR COUNTERS_DUMP=FILE make bench-counters` writes the inputs; then
//! `REPLAY_IR=DIR REPLAY_DUMP=FILE cargo bench -p llvm-passes --bench replay` prints, per
//! group of parts (the fit parts rules were chosen on: design to report-8; report-9 to
//! report-15, read when later rules were chosen; report-16 on, not yet read) and per
//! architecture, the mean and maximum absolute relative error of the model as built now, and
//! with `REPLAY_OUT=FILE` writes each kernel's line (the dump's format) there. A kernel name
//! that two programs share is skipped (its IR file would be either's).

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use std::collections::HashMap;

const ARCHS: [&str; 3] = ["sm_75", "sm_80", "sm_90"];
const FIT: [&str; 9] = ["design", "report", "report-2", "report-3", "report-4", "report-5", "report-6", "report-7", "report-8"];
const READ: [&str; 7] = ["report-9", "report-10", "report-11", "report-12", "report-13", "report-14", "report-15"];

fn group(part: &str) -> &'static str {
    if FIT.contains(&part) {
        "fit (design to report-8)"
    } else if READ.contains(&part) {
        "read (report-9 to report-15)"
    } else {
        "unread (report-16 on)"
    }
}

fn main() {
    let (Some(dir), Some(dump)) = (std::env::var_os("REPLAY_IR"), std::env::var_os("REPLAY_DUMP")) else {
        eprintln!("set REPLAY_IR (a COUNTERS_IR directory) and REPLAY_DUMP (a COUNTERS_DUMP file)");
        std::process::exit(2);
    };
    let dir = std::path::PathBuf::from(dir);
    let dump = std::fs::read_to_string(&dump).unwrap_or_else(|e| panic!("REPLAY_DUMP: {e}"));
    let lines: Vec<Vec<&str>> = dump.lines().map(|l| l.split('\t').collect()).filter(|p: &Vec<&str>| p.len() >= 5).collect();
    let mut shared: HashMap<&str, usize> = HashMap::new();
    for p in &lines {
        *shared.entry(p[2]).or_default() += 1;
    }
    let mut out = String::new();
    // group -> per architecture, the relative errors
    let mut errors: Vec<(&'static str, [Vec<f64>; 3])> = Vec::new();
    for p in &lines {
        let (part, program, name, ptxas) = (p[0], p[1], p[2], p[4]);
        if shared[name] > 1 {
            continue;
        }
        let Ok(ir) = std::fs::read_to_string(dir.join(format!("{name}.ll"))) else { continue };
        let truth: Vec<u32> = ptxas.trim_matches(|c| c == '[' || c == ']').split(',').map(|x| x.trim().parse().expect("a ptxas count")).collect();
        let context = Context::create();
        let module = context.create_module_from_ir(MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let function = module.get_functions().find(|f| f.count_basic_blocks() > 0).expect("a kernel body");
        let model = llvm_passes::registers::estimate(function).capped(llvm_passes::pressure::register_cap(&module, function));
        let estimate: Vec<u32> = ARCHS.iter().map(|a| model.for_architecture(a)).collect();
        out += &format!("{part}\t{program}\t{name}\t{estimate:?}\t{truth:?}\t{model:?}\n");
        let g = group(part);
        let at = match errors.iter().position(|(x, _)| *x == g) {
            Some(i) => i,
            None => {
                errors.push((g, Default::default()));
                errors.len() - 1
            }
        };
        for i in 0..ARCHS.len() {
            errors[at].1[i].push((f64::from(estimate[i]) - f64::from(truth[i])).abs() / f64::from(truth[i]));
        }
    }
    println!("| parts | leaf kernels | mean abs. error sm_75 / 80 / 90 | max abs. error sm_75 / 80 / 90 |");
    println!("|---|---|---|---|");
    for (g, e) in &errors {
        let mean = |v: &Vec<f64>| 100.0 * v.iter().sum::<f64>() / v.len() as f64;
        let max = |v: &Vec<f64>| 100.0 * v.iter().fold(0.0f64, |a, x| a.max(*x));
        println!("| {g} | {} | {:.2} / {:.2} / {:.2}% | {:.0} / {:.0} / {:.0}% |", e[0].len(), mean(&e[0]), mean(&e[1]), mean(&e[2]), max(&e[0]), max(&e[1]), max(&e[2]));
    }
    if let Some(path) = std::env::var_os("REPLAY_OUT") {
        std::fs::write(&path, out).unwrap_or_else(|e| panic!("REPLAY_OUT: {e}"));
    }
}
