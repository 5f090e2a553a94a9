//! `metafork gen`: check the source, build every schedule's tree, generate the files, and write
//! the output directory in one step ([`crate::output::write_dir`]) with the source's copy
//! (`source.mf`), the wisdom's copy (`wisdom.yaml`, with `--wisdom`) and the manifest, so that
//! `verify DIR` needs nothing outside DIR. Optionally verify what was written.

use crate::command::{self, Failure};
use crate::emit::dispatch::Wisdom;
use crate::output::{manifest::{OutputKind, Provenance, SourceRef}, write_dir, DirFiles};
use std::collections::BTreeMap;
use std::path::Path;

/// The source program's copy in an output directory.
pub const SOURCE_COPY: &str = "source.mf";
pub use crate::emit::tree_files::SVG_PICTURE;
/// The tuning wisdom's copy in an output directory.
pub const WISDOM_COPY: &str = "wisdom.yaml";

/// What `gen` was asked.
pub struct Request<'a> {
    pub file: &'a Path,
    pub output: &'a Path,
    pub emit_cuda: bool,
    /// Wisdom files, in the order given (`--wisdom`, repeatable).
    pub wisdom: &'a [std::path::PathBuf],
    /// `--ptxas` architectures.
    pub ptxas: &'a [String],
    pub verify: bool,
    /// Print a JSON summary instead of the tree.
    pub json: bool,
    /// Replace files of the output directory that metafork did not write (`--force`).
    pub force: bool,
    pub color: bool,
}

/// What `gen` adds to the trees' files.
#[derive(Default)]
pub struct Extras<'a> {
    /// The wisdom copy's text, and the wisdom parsed from the files it joins.
    pub wisdom: Option<(&'a str, &'a [Wisdom])>,
    /// Architectures to compile every kernel leaf for (`--ptxas`): their real counts go into
    /// tree.yaml.
    pub ptxas: &'a [String],
}

/// ptxas's reports of every tree's distinct kernel leaves, per architecture of `archs` (in
/// its order), each architecture's nvcc runs on a thread of its own: they are independent
/// processes of seconds each, and a user asking for three architectures waits for the
/// slowest rather than the sum.
fn compile_for_each_arch(trees: &[(&crate::frontend::model::KernelFunction, crate::tree::Tree)], archs: &[String]) -> Vec<Result<Vec<std::collections::BTreeMap<String, llvm_passes::ptxas::PtxasReport>>, String>> {
    std::thread::scope(|scope| {
        let runs: Vec<_> = archs.iter().map(|arch| scope.spawn(move || trees.iter().map(|(function, tree)| crate::compiled::compile_leaves(function, tree, arch)).collect())).collect();
        runs.into_iter().map(|run| run.join().unwrap_or_else(|_| Err("compiling the leaves with nvcc failed unexpectedly".to_string()))).collect()
    })
}

/// Everything `gen` writes for `text` (named `name`), with `extras`.
pub fn files<'p>(name: &str, text: &str, program: &'p crate::frontend::CheckedProgram, emit_cuda: bool, extras: &Extras) -> Result<(DirFiles, Vec<(&'p crate::frontend::model::KernelFunction, crate::tree::Tree)>, String), String> {
    let wisdom = extras.wisdom;
    let backend = constraints::solver::Backend::default();
    let trees = crate::tree::build_all(program, &backend)?;
    let mut compiled = crate::emit::tree_files::Compiled::new();
    for (arch, reports) in extras.ptxas.iter().zip(compile_for_each_arch(&trees, extras.ptxas)) {
        for (kernel, report) in reports?.into_iter().flatten() {
            compiled.entry(kernel).or_default().insert(arch.clone(), report);
        }
    }
    let generated = crate::emit::tree_files::generate_with_wisdom(name, &trees, emit_cuda, wisdom.map_or(&[], |(_, w)| w), &compiled)?;
    let mut files: DirFiles = generated.files.into_iter().map(|(n, t)| (n, t.into_bytes())).collect();
    files.insert(SOURCE_COPY.into(), text.as_bytes().to_vec());
    if let Some((w, _)) = wisdom {
        files.insert(WISDOM_COPY.into(), w.as_bytes().to_vec());
    }
    Ok((files, trees, generated.text))
}

/// Refuse a program whose facts contradict each other (no parameter value satisfies them, so
/// no tree has a leaf), pointing at the first fact that contradicts the ones before it.
fn contradiction(name: &str, text: &str, program: &crate::frontend::CheckedProgram, color: bool) -> Result<(), Failure> {
    let backend = constraints::solver::Backend::default();
    for function in &program.kernels {
        if let Some(c) = crate::strategy::contradictory_fact(function, &backend) {
            let d = if c.fact.kernel_range {
                // The fact is the program's own arithmetic, not a line the user wrote: placed at
                // the fact that forces it.
                let at = c.forced_by.map_or(c.fact.condition.span, |f| f.condition.span);
                let what = c.fact.note.as_deref().unwrap_or("a kernel's integer arithmetic stays within its C type");
                crate::frontend::Diagnostic::new(at, format!("no parameter value the facts of `{}` admit keeps the kernel's arithmetic defined: `{}` is needed ({what}), and the facts rule it out, so every launch would overflow", function.name, c.fact.condition), "this fact forces the overflow")
                    .with_note("compute the subscript in `long` (declare the index `long`, or the size parameter `long`), or bound the sizes in the facts so that the arithmetic fits")
            } else if c.by_types {
                let mut read = Vec::new();
                c.fact.condition.names(&mut read);
                let types: Vec<String> = function.params.iter().filter(|p| p.role != crate::frontend::model::Role::Array && p.ty.is_integer() && read.contains(&p.name)).map(|p| format!("`{} {}`", p.ty.c_name(), p.name)).collect();
                let label = format!("no value of {} satisfies this with the facts before it", types.join(", "));
                crate::frontend::Diagnostic::new(c.fact.condition.span, format!("the facts of `{}` admit no value of the parameters' C types (an `int` holds -2147483648 to 2147483647)", function.name), &label)
            } else {
                crate::frontend::Diagnostic::new(c.fact.condition.span, format!("the facts of `{}` contradict each other: no parameter value satisfies them all", function.name), "contradicts the facts before it")
            };
            return Err(Failure::input(command::render(name, text, d, color)));
        }
        // An array extent the facts keep below 1 (`float a[-N]` with `N >= 1`): C leaves such an
        // array undefined, and every access to it would be out of bounds.
        let facts = crate::tree::program_root_constraints(function);
        for a in &function.arrays {
            for (extent, written) in a.extents.iter().zip(&a.extent_exprs) {
                let some_element = facts.clone().with(constraints::Constraint::ge(extent, &constraints::Poly::one()));
                if matches!(backend.check(&some_element), constraints::solver::CheckResult::Unsat) {
                    let d = crate::frontend::Diagnostic::new(written.span, format!("the extent `{written}` of array `{}` is below 1 for every value the facts of `{}` allow: C leaves such an array undefined", a.name, function.name), "never positive").with_note("an extent is a number of elements; check its sign, or the facts that bound it");
                    return Err(Failure::input(command::render(name, text, d, color)));
                }
            }
        }
    }
    Ok(())
}

/// A schedule whose code, as written, races (a dependence carried by a `meta_for`: one
/// iteration writes an element another reads or writes), or indexes outside an array, is
/// refused where the access is: every kernel of it would do the same (or, where a subscript
/// depends on the arrays' contents, which the check chose, could: no kernel could be proved). The check runs the schedule's own code on the verifier's engine,
/// with race detection, at two small points of the facts (the first points `verify` samples):
/// a race found is definite and comes with its threads; one it misses is `verify`'s to find.
/// Milliseconds per schedule, where proving the absence of races costs Z3 tens.
/// Instructions the check of a schedule as written may run per point (about a second): a
/// program whose loops run longer at the smallest points is left to `verify`.
const AS_WRITTEN_STEPS: u64 = 20_000_000;

/// The check's thread's stack: the engine recurses through the schedule's expressions as the
/// main worker does (`main.rs`).
const CHECK_STACK_BYTES: usize = 64 << 20;

/// The points each function's schedules are checked at as written (None: the sampler found
/// none). Drawn before the trees are built: the sampler may ask Z3, and Z3 contexts working
/// at the same time change each other's models.
fn as_written_points(program: &crate::frontend::CheckedProgram) -> Vec<Option<Vec<std::collections::BTreeMap<String, i64>>>> {
    let backend = constraints::solver::Backend::default();
    program
        .kernels
        .iter()
        .map(|function| {
            let system = crate::tree::program_root_constraints(function);
            crate::verify::sample::points(function, &system, &backend, 2, 16, 0x7261_6365).ok()
        })
        .collect()
}

/// The check of every schedule as written at its function's `points` (see
/// [`as_written_points`]). It runs on the verifier's engine only (no Z3), and the kernel only
/// (`RunOptions::kernel_only`: it looks for races and accesses out of bounds, not for a
/// difference from the serial code, so the serial code is not run beside it), so `gen` runs it
/// beside the tree build.
fn carried_dependence(name: &str, text: &str, program: &crate::frontend::CheckedProgram, points: &[Option<Vec<std::collections::BTreeMap<String, i64>>>], color: bool) -> Result<(), Failure> {
    use crate::verify::differential::{run_point, Outcome, Programs};
    use crate::verify::machine::{Fault, RunOptions};
    for (function, points) in program.kernels.iter().zip(points) {
        let Some(points) = points else { continue };
        for (k, schedule) in function.schedules.iter().enumerate() {
            let Ok(kernel) = crate::kernel::Kernel::from_schedule(function, schedule) else { continue };
            let Ok(programs) = Programs::new(function, k, &kernel) else { continue };
            for (i, point) in points.iter().enumerate() {
                let values: Vec<String> = point.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                let subscripts = |xs: &[i64]| xs.iter().map(|x| format!("[{x}]")).collect::<String>();
                let d = match run_point(function, &programs, point, i as u64, RunOptions { detect_races: true, step_budget: Some(AS_WRITTEN_STEPS), kernel_only: true }) {
                    Outcome::Fault(Fault::Race { array, element, first, second, spans }) => {
                        // A sum across iterations (`tot[0] += ...`, an atomic add) that the same
                        // schedule also reads or writes otherwise: that other access is the one
                        // to move, and the note says so (both print as `tot[0]`).
                        let conflict = reduction_conflict(&schedule.body, &array);
                        // The second access's own place (two accesses may print alike: `B[i][j]`
                        // read, then written), else the first access spelled like it.
                        let placed = |s: crate::frontend::source::Span| (s != Default::default()).then_some(s);
                        let Some(at) = conflict.as_ref().map(|c| c.0).or_else(|| placed(spans[1])).or_else(|| source_span(&schedule.body, &second.1)).or_else(|| placed(spans[0])).or_else(|| source_span(&schedule.body, &first.1)) else { continue };
                        // Subscripts read from an array meet where the check's contents repeat a value.
                        let source = crate::emit::data_reads::subscript_source(&schedule.body, &second.1).or_else(|| crate::emit::data_reads::subscript_source(&schedule.body, &first.1));
                        let (may, when) = match &source {
                            Some(source) if conflict.is_none() => ("may race", format!(" when `{source}` holds values the check chose")),
                            _ => ("races", String::new()),
                        };
                        let d = crate::frontend::Diagnostic::new(
                            at,
                            format!("schedule `{}` {may} as written: `{}` by {} and `{}` by {} touch `{array}{}` with nothing ordering them{when}, at {}", schedule.name, first.1, first.0, second.1, second.0, subscripts(&element), values.join(", ")),
                            if conflict.is_some() { "an access beside the sum" } else { "one of the two accesses" },
                        );
                        if let (Some(source), None) = (&source, &conflict) {
                            d.with_note(&format!("the subscript depends on the contents of `{source}`: iterations meet wherever it leads two of them to one element, which no fact (`assume`) can rule out, so no kernel could be proved free of races; for a sum, write `+=` (a reduction: an atomic add); a scatter through a permutation can be written as a gather through its inverse (`y[i] = x[inverse[i]]`), whose writes are each iteration's own"))
                        } else if let Some((_, sum)) = &conflict {
                            d.with_note(&format!("`{sum} += ...` is a sum across the `meta_for` iterations (a reduction: an atomic add), complete only when the schedule ends, and this access reads or writes `{array}` while other iterations still add to it; read the sum after the `meta_schedule`, in a later schedule"))
                        } else {
                            d.with_note(if summed(&schedule.body, &first.1) && first.1 == second.1 {
                            "this `+=` was taken as each iteration's own element, since its subscripts name every `meta_for` counter, but the counters cancel and the iterations meet: write the subscript without them (as `s[0]`) and it is a sum across iterations (a reduction)"
                        } else {
                            "different iterations of the `meta_for` loops reach one element and one of them writes it: a dependence carried by a `meta_for`; make the loop that carries it a serial `for`, or, for a sum, write `+=` (a reduction)"
                            })
                        }
                    }
                    Outcome::Fault(Fault::OutOfBounds { array, site, index, extents, who }) => {
                        let Some(at) = source_span(&schedule.body, &site) else { continue };
                        let by = who.map_or(String::new(), |w| format!(" by {w}"));
                        let at_values = values.join(", ");
                        match crate::emit::data_reads::subscript_source(&schedule.body, &site) {
                            // The check chose the contents: the user's data may never make this access.
                            Some(source) => crate::frontend::Diagnostic::new(
                                at,
                                format!("schedule `{}` may index outside `{array}` as written: `{site}` is `{array}{}`{by} when `{source}` holds values the check chose, and `{array}` has extents {}, at {at_values}", schedule.name, subscripts(&index), subscripts(&extents)),
                                "outside the array for some contents",
                            )
                            .with_note(&format!("the subscript depends on the contents of `{source}`, which no fact (`assume`) can bound, so no kernel could be proved inside `{array}`; guard the access{}, and every kernel stays inside `{array}` whatever `{source}` holds", range_guard(function, &schedule.body, &site, &array, &index, &extents))),
                            None => crate::frontend::Diagnostic::new(
                                at,
                                format!("schedule `{}` indexes outside `{array}` as written: `{site}` is `{array}{}`{by}, and `{array}` has extents {}, at {at_values}", schedule.name, subscripts(&index), subscripts(&extents)),
                                "outside the array",
                            )
                            .with_note("every kernel would make this access; fix the subscript or its guard, or state the fact (`assume(...)`) that rules these parameter values out"),
                        }
                    }
                    _ => continue,
                };
                return Err(Failure::input(command::render(name, text, d, color)));
            }
        }
    }
    Ok(())
}

/// Where `body` both sums into `array` across iterations (an update marked a reduction) and
/// reads or writes it otherwise: that other access's span, and the sum's target as written.
fn reduction_conflict(body: &[crate::frontend::ast::Stmt], array: &str) -> Option<(crate::frontend::source::Span, String)> {
    use crate::frontend::ast::{AssignOp, ExprKind, StmtKind};
    let (mut sum, mut other) = (None, None);
    let is_array = |e: &crate::frontend::ast::Expr| matches!(&e.kind, ExprKind::Index { array: a, .. } if a.name == array);
    crate::strategy::walk::walk_stmts(body, &mut |s| {
        let (target, value, atomic) = match &s.kind {
            StmtKind::Assign { target, value, op } => (Some(target), Some(value), *op == AssignOp::AtomicAdd),
            _ => (None, None, false),
        };
        if let Some(t) = target.filter(|t| is_array(t)) {
            if atomic {
                sum.get_or_insert_with(|| t.to_string());
            } else {
                other.get_or_insert(t.span);
            }
        }
        // Reads: in the value, in subscripts, in conditions and bounds.
        let mut reads = |e: &crate::frontend::ast::Expr| crate::frontend::ast::walk_expr(e, &mut |x| {
            if is_array(x) && other.is_none() {
                other = Some(x.span);
            }
        });
        match &s.kind {
            StmtKind::Assign { target, .. } => {
                if let ExprKind::Index { indices, .. } = &target.kind {
                    indices.iter().for_each(&mut reads);
                }
                value.into_iter().for_each(&mut reads);
            }
            StmtKind::Decl { vars, .. } => vars.iter().for_each(|d| reads(&d.init)),
            StmtKind::If { cond, .. } => reads(cond),
            StmtKind::For(l) | StmtKind::MetaFor(l) => {
                reads(&l.lo);
                reads(&l.hi);
            }
            _ => {}
        }
    });
    Some((other?, sum?))
}

/// Whether `site` is the target of a `+=` or `-=` in `body`.
fn summed(body: &[crate::frontend::ast::Stmt], site: &str) -> bool {
    use crate::frontend::ast::{AssignOp, StmtKind};
    let mut found = false;
    crate::strategy::walk::walk_stmts(body, &mut |s| {
        if let StmtKind::Assign { target, op: AssignOp::Add | AssignOp::Sub, .. } = &s.kind {
            found |= target.to_string() == site;
        }
    });
    found
}

/// A guard that keeps `site`'s first subscript found outside its extent inside it, as
/// ` (as \`if (0 <= i && i < N)\`)`, or nothing where the access or the array's declared
/// extent cannot be found.
fn range_guard(function: &crate::frontend::model::KernelFunction, body: &[crate::frontend::ast::Stmt], site: &str, array: &str, index: &[i64], extents: &[i64]) -> String {
    let Some(dim) = index.iter().zip(extents).position(|(i, e)| *i < 0 || *i >= *e) else { return String::new() };
    let subscript = match crate::emit::data_reads::access(body, site).map(|x| x.kind) {
        Some(crate::frontend::ast::ExprKind::Index { indices, .. }) => indices.get(dim).map(|i| i.to_string()),
        _ => None,
    };
    let extent = function.arrays.iter().find(|a| a.name == array).and_then(|a| a.extent_exprs.get(dim)).map(|e| e.to_string());
    match (subscript, extent) {
        (Some(i), Some(e)) => format!(" (as `if (0 <= {i} && {i} < {e})`)"),
        _ => String::new(),
    }
}

/// The span of the first array access of `body` printed as `site`.
fn source_span(body: &[crate::frontend::ast::Stmt], site: &str) -> Option<crate::frontend::source::Span> {
    crate::emit::data_reads::access(body, site).map(|x| x.span)
}

/// `metafork gen`, once per process: what it built is not freed (the process is about to end;
/// in-process callers use [`files`]).
pub fn run(r: &Request) -> Result<(), Failure> {
    let name = command::shown(r.file);
    let generated = command::generated_name(r.file);
    let text = command::read_source(r.file)?;
    let program = command::check(&name, &text, r.color)?;
    // Each file parsed on its own (messages name its lines); the copy joins them as YAML documents.
    let (mut copy, mut wisdom) = (String::new(), Vec::new());
    for path in r.wisdom {
        let text = command::read_input_text(path, "wisdom", command::MAX_SOURCE_BYTES)?;
        wisdom.extend(Wisdom::parse(&text, &command::shown(path)).map_err(|e| Failure::input(format!("error: {e}")))?);
        if !copy.is_empty() {
            copy.push_str("---\n");
        }
        copy.push_str(&text);
        if !copy.ends_with('\n') {
            copy.push('\n');
        }
    }
    crate::emit::dispatch::check_before_build(&name, &program, &wisdom).map_err(|e| Failure::input(format!("error: {e}")))?;
    contradiction(&name, &text, &program, r.color)?;
    let with_wisdom = (!r.wisdom.is_empty()).then_some((copy.as_str(), wisdom.as_slice()));
    let mut ptxas = r.ptxas.to_vec();
    ptxas.sort();
    ptxas.dedup();
    let extras = Extras { wisdom: with_wisdom, ptxas: &ptxas };
    // The check of the schedules as written runs on a thread of its own beside the tree builds
    // (jacobi2d: 55 ms of CPU and its critical path in the fourteenth session; bench/RESULTS.md has what it costs now); its refusal comes first, whatever the build
    // gave.
    let points = as_written_points(&program);
    let (checked, built) = std::thread::scope(|scope| {
        let check = std::thread::Builder::new().stack_size(CHECK_STACK_BYTES).spawn_scoped(scope, || carried_dependence(&name, &text, &program, &points, r.color));
        let built = files(&generated, &text, &program, r.emit_cuda, &extras);
        let checked = match check {
            Ok(handle) => handle.join().unwrap_or_else(|_| Err(Failure { message: "error: internal failure in the check of the schedules as written (a bug in metafork); please report it with the input".into(), code: command::exit::INTERNAL })),
            // No second thread: the check runs here, after the build.
            Err(_) => carried_dependence(&name, &text, &program, &points, r.color),
        };
        (checked, built)
    });
    checked?;
    let (files, trees, summary) = built.map_err(|e| Failure::of_work(format!("error: {e}")))?;
    let from = Provenance { output: OutputKind::Gen, source: Some(SourceRef { name: generated.clone(), file: SOURCE_COPY.into() }), wisdom: with_wisdom.is_some().then(|| WISDOM_COPY.to_string()), ptxas };
    write_dir(r.output, &files, from, crate::output::Foreign::forced(r.force)).map_err(|e| Failure::input(format!("error: {e}")))?;
    // Names that differ only in case (functions `scale` and `Scale`) are two files here and
    // one on a file system that ignores case (macOS's and Windows' defaults).
    let pairs = case_only_pairs(files.keys());
    if let Some((a, b)) = pairs.first() {
        let more = match pairs.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more pair{})", if n == 1 { "" } else { "s" }),
        };
        crate::command::warn(&format!("{name}: warning: the output files `{a}` and `{b}`{more} differ only in case: on a file system that ignores case (macOS's and Windows' defaults) one would replace the other; rename one of the functions or schedules they come from"));
    }
    // A `cache(...)` hint no kernel follows is said, as a compiler says of a hint it ignores,
    // at its schedule's `meta_schedule`.
    let source = crate::frontend::source::SourceFile::new(name.clone(), text.clone());
    for (function, tree) in &trees {
        let at = function.schedules.iter().find(|s| s.name == tree.schedule_name()).map(|s| source.line_col(s.span.start));
        let place = at.map_or_else(|| name.clone(), |(line, column)| format!("{name}:{line}:{column}"));
        for (array, why) in &tree.not_cached {
            crate::command::warn(&format!("{place}: warning: schedule `{}`: `cache({array})` is not applied: {why}", tree.schedule_name()));
        }
    }
    // A fact the program's arithmetic implies and its own facts do not (dividing by `G`
    // under `assume(G >= 0)`) narrows where a kernel may launch: said once per fact, where
    // the program makes it, as a compiler notes an assumption it had to make.
    let mut said = std::collections::BTreeSet::new();
    for (_, tree) in &trees {
        for (condition, why, span) in &tree.implied_facts {
            if said.insert(condition.clone()) {
                let (line, column) = source.line_col(span.start);
                crate::command::warn(&format!("{name}:{line}:{column}: warning: `{condition}` is taken as a fact ({why}), though the program's facts allow otherwise: a launch where it fails is refused (the dispatcher returns METAFORK_OUTSIDE_ASSUMPTIONS); write `assume({condition})` if that is meant"));
            }
        }
    }
    if r.json {
        // One JSON value: with --verify, the verdicts are its `verdicts` member.
        let mut record = json_summary(r.output, &trees, &files);
        let verdicts = if r.verify { Some(crate::verify::command::verify_all(&trees, crate::verify::Options::default())?) } else { None };
        if let Some(reports) = &verdicts {
            record["verdicts"] = serde_json::Value::Array(crate::verify::json_records(reports));
        }
        command::print(&serde_json::to_string_pretty(&record).map(|s| s + "\n").unwrap_or_else(|_| "{}\n".into()))?;
        if let Some(reports) = &verdicts {
            crate::verify::command::finish(reports)?;
        }
    } else {
        command::print(&summary)?;
        if r.verify {
            crate::verify::command::report(&trees, crate::verify::Options::default(), false)?;
        }
    }
    // The process ends here: freeing the trees node by node was 4% of mvt's `gen`.
    std::mem::forget((trees, files));
    Ok(())
}

/// `gen --json`: per schedule its tree's size and kernels, and the files written.
fn json_summary(output: &Path, trees: &[(&crate::frontend::model::KernelFunction, crate::tree::Tree)], files: &DirFiles) -> serde_json::Value {
    use crate::tree::NodeKind;
    let schedules: Vec<serde_json::Value> = trees
        .iter()
        .map(|(function, tree)| {
            let kernels: std::collections::BTreeSet<String> = tree.leaves().filter(|n| matches!(n.kind, NodeKind::Leaf)).map(|n| crate::emit::tree_files::leaf_kernel_name(tree, n.id)).collect();
            serde_json::json!({
                "function": function.name,
                "schedule": tree.schedule_name(),
                "nodes": tree.nodes.len(),
                "kernel_leaves": tree.leaves().filter(|n| matches!(n.kind, NodeKind::Leaf)).count(),
                "leaves_without_kernel": tree.leaves().filter(|n| !matches!(n.kind, NodeKind::Leaf)).count(),
                "kernels": kernels,
                "height": tree.height(),
                "z3_queries": tree.queries,
            })
        })
        .collect();
    // Every file written, the manifest `write_dir` adds among them.
    let mut names: Vec<&str> = files.keys().map(String::as_str).chain(std::iter::once(crate::output::manifest::MANIFEST)).collect();
    names.sort_unstable();
    serde_json::json!({"output": command::shown(output), "schedules": schedules, "files": names})
}

/// The pairs of names of `names` that are equal ignoring ASCII case, each once, in order.
fn case_only_pairs<'a>(names: impl Iterator<Item = &'a String>) -> Vec<(&'a str, &'a str)> {
    let mut first: BTreeMap<String, &'a str> = BTreeMap::new();
    let mut pairs = Vec::new();
    for n in names {
        match first.get(&n.to_ascii_lowercase()) {
            Some(earlier) => pairs.push((*earlier, n.as_str())),
            None => {
                first.insert(n.to_ascii_lowercase(), n.as_str());
            }
        }
    }
    pairs
}
