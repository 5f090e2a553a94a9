//! `metafork tune`: argument parsing for sizes and ranges, the standalone space mode, the table,
//! `-o FILE` (written only when given), `--json`, the progress line and `--emit-harness`. The CLI module calls [`run`].

use super::rank::{tune, Request, Tuned};
use super::space::{load, Space};
use crate::frontend::CheckedProgram;
use crate::output::write_atomic;
use constraints::device::DeviceProfile;
use serde::Serialize;
use crate::command::{text_table, Progress};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The options of `metafork tune`, as the CLI parsed them.
pub struct Options {
    pub file: Option<PathBuf>,
    pub device: Option<String>,
    pub sizes: Vec<String>,
    pub ranges: Vec<String>,
    pub space: Option<PathBuf>,
    pub space_name: Option<String>,
    pub schedule: Option<String>,
    pub top: usize,
    pub output: Option<PathBuf>,
    pub json: bool,
    pub emit_harness: Option<PathBuf>,
    /// Replace files of the harness directory that metafork did not write (`--force`).
    pub force: bool,
    /// Count registers with the tree's estimates even when nvcc could compile the leaves.
    pub estimates: bool,
}

/// The integer `value` of option argument `text`; an error says whether it is no integer or
/// one too large for 64 bits.
fn integer(text: &str, value: &str) -> Result<i64, String> {
    value.trim().parse::<i64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => format!("`{text}`: `{}` is outside the 64-bit integers ({} to {})", value.trim(), i64::MIN, i64::MAX),
        _ => format!("`{text}`: `{value}` is not an integer"),
    })
}

/// `NAME=VALUE`.
pub fn parse_size(text: &str) -> Result<(String, i64), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("`{text}`: expected NAME=VALUE, as in N=4096"))?;
    Ok((parameter_name(text, name)?, integer(text, value)?))
}

/// The NAME of `NAME=...`: a C identifier (`=5` and `N M=5` name no parameter).
fn parameter_name(text: &str, name: &str) -> Result<String, String> {
    let name = name.trim();
    // As the lexer reads identifiers: ASCII letters, digits and `_`.
    let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier {
        return Err(format!("`{}`: `{}` is not a parameter name (expected NAME=VALUE, as in N=4096)", text.escape_debug(), name.escape_debug()));
    }
    Ok(name.to_string())
}

/// `NAME=LO..HI` (inclusive) or `NAME=V1,V2,...`.
pub fn parse_range(text: &str) -> Result<(String, Vec<i64>), String> {
    let (name, spec) = text.split_once('=').ok_or_else(|| format!("`{text}`: expected NAME=LO..HI or NAME=V1,V2,..., as in s=1..16"))?;
    let name = parameter_name(text, name)?;
    let int = |s: &str| integer(text, s);
    let values = match spec.split_once("..") {
        Some((lo, hi)) => {
            let (lo, hi) = (int(lo)?, int(hi)?);
            if lo > hi || i128::from(hi) - i128::from(lo) >= i128::from(super::space::MAX_VALUES) {
                return Err(format!("`{text}`: the range must be LO..HI with LO <= HI and at most {} values", super::space::MAX_VALUES));
            }
            (lo..=hi).collect()
        }
        None => spec.split(',').map(int).collect::<Result<Vec<_>, _>>()?,
    };
    if values.len() > super::space::MAX_VALUES as usize {
        return Err(format!("`{text}`: more than {} values", super::space::MAX_VALUES));
    }
    Ok((name.trim().to_string(), values))
}

/// What the leaves really use on `device`: compiled for its architecture when nvcc is found
/// (the dispatcher reads the same numbers at run time), else the estimates, saying why, taken
/// as the counts the device would report (with the `maxThreadsPerBlock` it would compute from
/// them), so that the selection decides as the dispatcher on a device would if they were exact.
fn real_counts(function: &crate::frontend::model::KernelFunction, tree: &crate::tree::Tree, device: &DeviceProfile, estimates: bool) -> Result<(std::collections::BTreeMap<String, crate::dispatch::CompiledLeaf>, String), String> {
    let none = |why: String| {
        let mut counts = std::collections::BTreeMap::new();
        for leaf in tree.leaves().filter(|n| matches!(n.kind, crate::tree::NodeKind::Leaf)) {
            let registers = leaf.counters.registers;
            counts.entry(crate::emit::tree_files::leaf_kernel_name(tree, leaf.id)).or_insert(crate::dispatch::CompiledLeaf { registers: registers.into(), max_threads: crate::compiled::max_threads(registers, device) });
        }
        Ok((counts, format!("estimate ({why})")))
    };
    if estimates {
        return none("--estimates".into());
    }
    let Some(arch) = crate::compiled::arch_of(device) else { return none(format!("nvcc does not compile for compute capability {}", device.compute_capability)) };
    if llvm_passes::ptxas::find_nvcc().is_none() {
        return none("nvcc not on PATH: configurations may be refused at run time".into());
    }
    let reports = crate::compiled::compile_leaves(function, tree, &arch).map_err(|e| format!("{}: {e}", tree.schedule_name()))?;
    let compiled = reports.into_iter().map(|(name, r)| (name, crate::dispatch::CompiledLeaf { registers: r.registers.into(), max_threads: crate::compiled::max_threads(r.registers, device) })).collect();
    Ok((compiled, format!("ptxas {arch}")))
}

/// Run `tune`; returns what to print on stdout.
pub fn run(options: &Options, load_program: &dyn Fn(&Path) -> Result<CheckedProgram, String>) -> Result<String, String> {
    // Writing the configurations over an input would replace what the user gave.
    if let Some(output) = &options.output {
        let profile = options.device.as_deref().and_then(DeviceProfile::file_of).map(Path::to_path_buf);
        for input in options.file.iter().chain(&options.space).chain(&profile) {
            if crate::output::is_same_file(output, input) {
                return Err(format!("`-o {}` is the input `{}`; writing the configurations there would replace it (choose another path)", crate::command::shown(output), crate::command::shown(input)));
            }
        }
    }
    let Some(file) = &options.file else {
        let Some(space) = &options.space else { return Err("give a MetaFork FILE (with --device), or --space FILE.yaml to build a search space".into()) };
        return standalone(space, options);
    };
    let device_name = options.device.as_deref().ok_or("--device NAME is required with a MetaFork file (see `metafork devices`)")?;
    let device = DeviceProfile::load(device_name).map_err(|e| e.to_string())?;
    let program = load_program(file)?;
    let mut request = Request::default();
    for s in &options.sizes {
        let (n, v) = parse_size(s)?;
        if request.sizes.insert(n.clone(), v).is_some() {
            return Err(format!("--size {s}: `{n}` is given twice"));
        }
    }
    for r in &options.ranges {
        let (n, mut v) = parse_range(r)?;
        if request.sizes.contains_key(&n) {
            return Err(format!("--range {r}: `{n}` is fixed by --size"));
        }
        // A value listed twice is one candidate, not two.
        v.sort_unstable();
        v.dedup();
        if request.values.insert(n.clone(), v).is_some() {
            return Err(format!("--range {r}: `{n}` is given twice"));
        }
    }
    if let Some(path) = &options.space {
        let (_, space, spec) = load(path, options.space_name.as_deref())?.into_iter().next().expect("load returns at least one space");
        for (name, values) in space.names.iter().zip(&space.domains) {
            request.values.entry(name.clone()).or_insert_with(|| values.clone());
        }
        for text in &spec.restrictions {
            let tokens = crate::frontend::lexer::lex(text).map_err(|d| format!("restriction `{text}`: {}", d.message))?;
            request.restrictions.push(crate::frontend::parser::parse_expression(tokens).map_err(|d| format!("restriction `{text}`: {}", d.message))?);
        }
    }
    let backend = constraints::solver::Backend::default();
    let mut results = Vec::new();
    for function in &program.kernels {
        for schedule in &function.schedules {
            if options.schedule.as_ref().is_some_and(|s| *s != schedule.name) {
                continue;
            }
            // The request's mistakes are reported before the tree is built (seconds).
            super::rank::check_request(function, &request).map_err(|e| format!("{}: {e}", schedule.name))?;
            let kernel = crate::kernel::Kernel::from_schedule(function, schedule).map_err(|e| format!("{}: {e}", schedule.name))?;
            let tree = crate::tree::build(function, kernel, &backend).map_err(|e| format!("{}: {e}", schedule.name))?;
            let mut request = request.clone();
            (request.compiled, request.registers_from) = real_counts(function, &tree, &device, options.estimates)?;
            let mut bar = Progress::new(format!("tune {}", schedule.name));
            let mut set = |f: f64| if let Some(b) = bar.as_mut() { b.set(f) };
            let tuned = tune(function, &tree, &device, &request, Some(&mut set));
            drop(bar);
            let tuned = tuned.map_err(|e| format!("{}: {e}", schedule.name))?;
            results.push((function, tree, tuned));
        }
    }
    if results.is_empty() {
        return Err(match &options.schedule {
            Some(s) => {
                let names: Vec<String> = program.kernels.iter().flat_map(|f| f.schedules.iter().map(move |x| format!("`{}` (of function `{}`)", x.name, f.name))).collect();
                format!("no schedule named `{s}` in `{}`; its schedules: {}", file.display(), if names.is_empty() { "none".to_string() } else { names.join(", ") })
            }
            None => format!("no schedule in `{}`", file.display()),
        });
    }
    let all: Vec<&Tuned> = results.iter().map(|(_, _, t)| t).collect();
    let yaml = serde_yaml::to_string(&all).map_err(|e| e.to_string())?;
    if let Some(output) = &options.output {
        write_atomic(output, yaml.as_bytes()).map_err(|e| format!("cannot write `{}`: {e}", crate::command::shown(output)))?;
    }
    let mut harnesses = String::new();
    if let Some(dir) = &options.emit_harness {
        let mut files = crate::output::DirFiles::new();
        // The device's architecture, as the dispatcher's registers were read for it; a
        // compute capability nvcc does not know builds for the GPU of the machine building it.
        let arch = crate::compiled::arch_of(&device).unwrap_or_else(|| "native".into());
        for (function, tree, tuned) in &results {
            let build = super::harness::files(&crate::command::generated_name(file), function, tree, tuned, options.top, &arch, &mut files)?;
            harnesses += &format!("harness for `{}` in {}: {build}\n", tuned.schedule, crate::command::shown(dir));
        }
        crate::output::write_dir(dir, &files, crate::output::manifest::Provenance { output: crate::output::manifest::OutputKind::Harness, ..Default::default() }, crate::output::Foreign::forced(options.force))?;
    }
    if options.json {
        let configs: Vec<serde_json::Value> = all
            .iter()
            .flat_map(|t| t.admissible.iter().map(move |c| serde_json::json!({"schedule": t.schedule, "device": t.device, "registers_from": t.registers_from, "parameters": c.parameters, "leaf": c.leaf, "counters": {"registers": c.registers, "shared_memory_bytes": c.shared_memory_bytes, "threads_per_block": c.threads_per_block, "occupancy": c.occupancy, "coalescing": c.coalescing, "bank_efficiency": c.bank_efficiency, "branch_efficiency": c.branch_efficiency}, "estimated_seconds": c.estimated_seconds, "bound": c.bound, "score": c.score, "leaves_out": c.leaves_out})))
            .collect();
        return serde_json::to_string_pretty(&configs).map(|s| s + "\n").map_err(|e| e.to_string());
    }
    let mut text = String::new();
    for t in &all {
        text += &table(t, options.top);
    }
    if let Some(output) = &options.output {
        text += &format!("all admissible configurations: {}\n", crate::command::shown(output));
    }
    Ok(text + &harnesses)
}

fn table(t: &Tuned, top: usize) -> String {
    let enumerated: Vec<String> = t.enumeration.iter().filter(|(_, how)| *how != "fixed").map(|(p, how)| format!("{p} ({how})")).collect();
    let out = format!(
        "{} on {}: {} of {} candidate configurations admissible (enumerated: {}; registers: {})\n",
        t.schedule,
        t.device,
        t.admissible.len(),
        t.candidates,
        if enumerated.is_empty() { "none".into() } else { enumerated.join(", ") },
        t.registers_from
    );
    let unestimated = t.admissible.iter().filter(|c| c.estimated_seconds.is_none()).count();
    let out = match &t.time_model_off {
        Some(why) => out + &format!("  no estimated time: {why}; ranked by the counters alone\n"),
        None if unestimated > 0 => out + &format!("  {unestimated} of {} have no estimated time (the model could not count the trips of a loop, or a launch's shape, at these sizes): all are ranked by the counters alone\n", t.admissible.len()),
        None => out,
    };
    // The candidates left out, each count with why; a zero count says nothing.
    let not_listed = [
        (t.idle, "run no thread block at these sizes (a grid extent is 0)".to_string()),
        (t.unread, format!("differ from a listed one only in parameters schedule `{}` does not read", t.schedule)),
        (t.grid_too_large, "need more thread blocks along a grid dimension than the device allows".to_string()),
        (t.no_leaf, "have no kernel leaf that fits the device (registers, threads or shared memory per block)".to_string()),
        (t.outside, "are outside the program there (its arithmetic, or a scalar or grid the launch computes, is undefined in its C types; the dispatcher refuses them)".to_string()),
        (t.unresident, "would select a leaf whose block cannot be resident on a multiprocessor (registers are allocated per warp in units of 256; shared memory with the runtime's reserve)".to_string()),
    ];
    let mut out = out;
    // What no count holds: the candidates that the facts (`assume`, `assert`, the ranges the
    // kernels' arithmetic needs) or the restrictions given rule out.
    let counted = t.admissible.len() + not_listed.iter().map(|(count, _)| count).sum::<usize>();
    let ruled_out = t.candidates.saturating_sub(counted as u64);
    if ruled_out > 0 {
        out += &format!("  {ruled_out} more are ruled out by the program's facts (its `assume`s and `assert`s, and the ranges its kernels' arithmetic needs) or the restrictions given: not listed\n");
    }
    for (count, why) in not_listed.iter().filter(|(count, _)| *count > 0) {
        out += &format!("  {count} more {why}: not listed\n");
    }
    if t.admissible.is_empty() {
        return out + "  no configuration is admissible on this device for these sizes\n";
    }
    let partial = t.admissible.iter().filter(|c| c.leaves_out.is_some()).count();
    let mut out = out;
    if let Some(first) = t.admissible.iter().find_map(|c| c.leaves_out.as_ref()) {
        out += &format!("  {partial} of them leave iterations out, where the grid truncates a division (first: {first}): they compute less, so they are ranked after the others and marked `partial`; state that it divides (`assume`) or round the grid up with a guard\n");
    }
    let names: Vec<&String> = t.admissible[0].parameters.keys().filter(|p| t.enumeration.get(*p).is_some_and(|h| h != "fixed")).collect();
    let mut header: Vec<String> = ["rank".to_string()].into_iter().chain(names.iter().map(|n| n.to_string())).chain(["leaf", "registers", "shared bytes", "threads/block", "occupancy", "coalescing", "banks", "branches", "est. time", "bound", "score"].map(String::from)).collect();
    if partial > 0 {
        header.push("iterations".into());
    }
    let mut rows = vec![header];
    for (i, c) in t.admissible.iter().take(top).enumerate() {
        let mut row = vec![(i + 1).to_string()];
        row.extend(names.iter().map(|n| c.parameters[*n].to_string()));
        row.extend([c.leaf.clone(), c.registers.to_string(), c.shared_memory_bytes.to_string(), c.threads_per_block.to_string(), format!("{:.3}", c.occupancy), format!("{:.3}", c.coalescing), format!("{:.3}", c.bank_efficiency), format!("{:.3}", c.branch_efficiency), c.estimated_seconds.map_or("-".into(), |s| format!("{:.1} us", s * 1e6)), c.bound.clone().unwrap_or_else(|| "-".into()), format!("{:.3}", c.score)]);
        if partial > 0 {
            row.push(if c.leaves_out.is_some() { "partial" } else { "all" }.into());
        }
        rows.push(row);
    }
    out + &text_table(&rows) + "\n"
}

#[derive(Serialize)]
struct SpaceReport {
    space: String,
    parameters: usize,
    cartesian: u64,
    admissible: usize,
    seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    configurations: Option<Vec<serde_json::Map<String, serde_json::Value>>>,
}

/// `tune --space FILE` without a program: build each space, report sizes and times.
fn standalone(path: &Path, options: &Options) -> Result<String, String> {
    let spaces: Vec<(String, Space, super::space::SpaceSpec)> = load(path, options.space_name.as_deref())?;
    let mut reports = Vec::new();
    for (name, space, _) in &spaces {
        let mut bar = Progress::new(format!("space {name}"));
        let mut set = |f: f64| if let Some(b) = bar.as_mut() { b.set(f) };
        let start = Instant::now();
        let admissible = space.build(None, Some(&mut set));
        let seconds = start.elapsed().as_secs_f64();
        drop(bar);
        let which = if spaces.len() == 1 && name == super::space::SINGLE_SPACE { String::new() } else { format!(" space `{}`:", name.escape_debug()) };
        if let Some(why) = &admissible.stopped {
            return Err(format!("{}:{which} {why}", crate::command::shown(path)));
        }
        if let Some(note) = admissible.undefined_note() {
            crate::command::warn(&format!("{}:{which} warning: {note}", crate::command::shown(path)));
        }
        let configurations = options.json.then(|| {
            (0..admissible.len())
                .map(|i| space.names.iter().cloned().zip(admissible.row(i).iter().map(|v| serde_json::Value::from(*v))).collect())
                .collect()
        });
        reports.push(SpaceReport { space: name.clone(), parameters: space.names.len(), cartesian: space.cartesian(), admissible: admissible.len(), seconds, configurations });
    }
    if options.json {
        return serde_json::to_string_pretty(&reports).map(|s| s + "\n").map_err(|e| e.to_string());
    }
    let mut rows = vec![["space", "parameters", "Cartesian", "admissible", "construction"].map(String::from).to_vec()];
    for r in &reports {
        rows.push(vec![r.space.clone(), r.parameters.to_string(), r.cartesian.to_string(), r.admissible.to_string(), format!("{:.2} ms", r.seconds * 1e3)]);
    }
    Ok(text_table(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ranges_say_whether_a_value_is_no_integer_or_too_large() {
        assert_eq!(parse_size(" N = 4096").unwrap(), ("N".to_string(), 4096));
        assert_eq!(parse_size("=5").unwrap_err(), "`=5`: `` is not a parameter name (expected NAME=VALUE, as in N=4096)");
        assert!(parse_size("N M=5").unwrap_err().contains("`N M` is not a parameter name"));
        assert!(parse_range("=1..4").unwrap_err().contains("is not a parameter name"));
        assert_eq!(parse_size("_n2=5").unwrap(), ("_n2".to_string(), 5));
        assert_eq!(parse_size("N=x").unwrap_err(), "`N=x`: `x` is not an integer");
        let e = parse_size("N=18446744073709551616").unwrap_err();
        assert!(e.contains("is outside the 64-bit integers") && e.contains("9223372036854775807"), "{e}");
        assert!(parse_size("N=-9223372036854775809").unwrap_err().contains("outside the 64-bit integers"));
        assert!(parse_range("s=1..99999999999999999999").unwrap_err().contains("outside the 64-bit integers"));
        assert_eq!(parse_range("s=1..3").unwrap().1, vec![1, 2, 3]);
    }
}
