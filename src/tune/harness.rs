//! `tune --emit-harness DIR`: a self-contained CUDA program that times admissible
//! configurations of one schedule on the device it runs on and checks every answer.
//!
//! Contract: DIR receives `<schedule>_harness.cu` and the leaf kernels the candidates use (the
//! same files `gen --emit-cuda` writes), one program per schedule. Built with the command its
//! first lines give (`nvcc -O3 -arch=sm_XX -o <schedule>_harness <schedule>_harness.cu` and its
//! leaves; `tune` prints it too), the program holds every admissible configuration (model rank order, at most
//! [`MAX_CANDIDATES`]) as a table of parameter values. It allocates every array at the tuned
//! sizes and fills it from a fixed seed; runs the schedule serially on the host once (the
//! *answer*: the function body's statements of that schedule, every `meta_for` a sequential
//! loop, inside the schedule's host loops); then, for each candidate it times: restores the
//! inputs, runs the schedule as the source does (its host loops around the launches)
//! [`WARMUPS`] time(s) to warm up, then [`REPS`] times, each timed with CUDA events (inputs
//! restored before each run, outside the timed interval), takes the median, and compares every
//! written array with the answer: integers exactly, floating point
//! `|got - answer| <= rtol * max(1, |answer|)` with rtol [`RTOL_FLOAT`] for `float`,
//! [`RTOL_DOUBLE`] for `double` (`--rtol` overrides: the kernels may contract multiply-adds the
//! host does not). An element a reduction adds to (an atomic add) may be summed in any order, and
//! at tuning sizes one order's rounding alone can exceed rtol (2^24 float terms: 2% between the
//! serial sum and a block-reduced one, measured): it also matches within rtol of the same sum
//! accumulated in `double`, or within the rounding bound of any order of its k terms,
//! `2 γ(k+1) Σ|x|` (as gpu-check's), both from one more serial run (`METAFORK_REDUCE`). A
//! candidate that differs is checked once more against the serial program
//! run at *its own* parameters: `MISMATCH` when the kernel is wrong (exit 2), `OTHER ANSWER`
//! when the program itself computes something else there (a block size that does not divide
//! the data, say); neither can be the best.
//!
//! Search: the model's top `--top` candidates (the `tune --top` value by default), then a local
//! search: the unvisited neighbours of the fastest correct candidate so far (one enumerated
//! parameter one step up or down its value list, the others equal), as long as that improves,
//! within `--budget` timed candidates. `--all` times every candidate. `--cache FILE` (default
//! `<schedule>_cache.tsv`) keeps one line per finished candidate, keyed by device, sizes and
//! parameters, written as soon as it is measured: an interrupted run resumes where it stopped.
//! `--list` prints the table and `--neighbours K` candidate K's neighbours, without a GPU.
//! It prints a table and writes `wisdom.yaml`: per leaf, the fastest configuration whose
//! answer matched; and the fastest overall.

use super::rank::Tuned;
use crate::emit::cuda::{emit_kernel, launch_name_of, launch_params, spelled, HostExprs};
use crate::emit::tree_files::leaf_kernel_name;
use crate::frontend::ast::ScalarType;
use crate::frontend::model::{KernelFunction, Role};
use crate::names::{c_comment, c_ident, c_string};
use crate::tree::{NodeKind, Tree};
use std::fmt::Write;

/// Timed repetitions per candidate (after the warm-up runs).
pub const REPS: usize = 7;
/// Untimed runs before the timed ones.
pub const WARMUPS: usize = 1;
/// Default relative tolerance of `float` results against the serial answer.
pub const RTOL_FLOAT: f64 = 1e-4;
/// Default relative tolerance of `double` results.
pub const RTOL_DOUBLE: f64 = 1e-10;
/// The most configurations one harness holds (the model's best first).
pub const MAX_CANDIDATES: usize = 100_000;

/// The harness's files for one schedule (added to `files`); `top` is the number of the model's
/// best the harness times before its local search. Returns the command that builds it in the
/// directory (one program per schedule: each has its own `main`).
pub fn files(source: &str, function: &KernelFunction, tree: &Tree, tuned: &Tuned, top: usize, arch: &str, files: &mut crate::output::DirFiles) -> Result<String, String> {
    let candidates: Vec<_> = tuned.admissible.iter().take(MAX_CANDIDATES).collect();
    if candidates.is_empty() {
        return Err(format!("{}: no admissible configuration to put in a harness", tuned.schedule));
    }
    let mut leaves: Vec<&str> = candidates.iter().map(|c| c.leaf.as_str()).collect();
    leaves.sort();
    leaves.dedup();
    for leaf in &leaves {
        if files.contains_key(&format!("{leaf}.cu")) {
            continue;
        }
        let node = tree.nodes.iter().find(|n| matches!(n.kind, NodeKind::Leaf) && leaf_kernel_name(tree, n.id) == *leaf).ok_or_else(|| format!("leaf `{leaf}` is not in the tree"))?;
        let mut code = (*node.staged).clone();
        code.name = leaf.to_string();
        let header = [format!("Generated by metafork from {source}: schedule `{}`, leaf {} (for the tuning harness).", tree.schedule_name(), node.id)];
        files.insert(format!("{leaf}.cu"), emit_kernel(function, &code, &header)?.into_bytes());
    }
    let text = Harness { source, function, tree, tuned, candidates: &candidates, leaves: &leaves, top: top.max(1), arch }.text()?;
    files.insert(format!("{}_harness.cu", tuned.schedule), text.into_bytes());
    Ok(build_command(&tuned.schedule, &leaves, arch))
}

/// `nvcc` building schedule `s`'s harness from its own files (kernel and schedule names are C
/// identifiers: nothing to quote).
fn build_command(s: &str, leaves: &[&str], arch: &str) -> String {
    let kernels: Vec<String> = leaves.iter().map(|l| format!("{l}.cu")).collect();
    format!("nvcc -O3 -arch={arch} -o {s}_harness {s}_harness.cu {}", kernels.join(" "))
}

struct Harness<'a> {
    source: &'a str,
    function: &'a KernelFunction,
    tree: &'a Tree,
    tuned: &'a Tuned,
    candidates: &'a [&'a super::rank::Config],
    leaves: &'a [&'a str],
    top: usize,
    /// `nvcc -arch`: the device's `sm_XY`, or `native`.
    arch: &'a str,
}

impl Harness<'_> {
    fn text(&self) -> Result<String, String> {
        let (function, tuned) = (self.function, self.tuned);
        let s = &tuned.schedule;
        let k = function.schedules.iter().position(|x| x.name == *s).ok_or_else(|| format!("schedule `{s}` not found"))?;
        let schedule = &function.schedules[k];
        let params = launch_params(function, &self.tree.nodes[0].code);
        let names: Vec<&String> = self.candidates[0].parameters.keys().collect();
        let mut out = String::new();
        let _ = writeln!(out, "// Generated by metafork from {}: timing harness for schedule `{s}` (model ranking for {}).", c_comment(self.source), c_comment(&tuned.device));
        let _ = writeln!(out, "// Build: {}   Run: ./{s}_harness --help", build_command(s, self.leaves, self.arch));
        out.push_str("#include <cuda_runtime.h>\n#include <algorithm>\n#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <string>\n#include <sys/stat.h>\n#include <unistd.h>\n#include <vector>\n\n");
        let decls: Vec<&str> = params.iter().map(|(d, _)| d.as_str()).collect();
        for l in self.leaves {
            let _ = writeln!(out, "extern \"C\" cudaError_t {}({}{}cudaStream_t metafork_stream);", launch_name_of(l), decls.join(", "), if decls.is_empty() { "" } else { ", " });
            let _ = writeln!(out, "extern \"C\" cudaError_t {}(size_t metafork_bytes);", crate::emit::cuda::allow_shared_name(l));
        }
        // Every leaf may use the device's largest dynamic shared memory (above 48 KiB a kernel
        // must opt in, or large tiles fail to launch).
        let _ = writeln!(out, "\nstatic void metafork_allow_shared(size_t metafork_most) {{");
        for l in self.leaves {
            let _ = writeln!(out, "  {}(metafork_most);", crate::emit::cuda::allow_shared_name(l));
        }
        let _ = writeln!(out, "  cudaGetLastError();\n}}\n");
        let _ = writeln!(out, "static const char *const metafork_schedule = {};", c_string(s));
        let _ = writeln!(out, "static const int METAFORK_REPS = {REPS}, METAFORK_WARMUPS = {WARMUPS}, METAFORK_DEFAULT_TOP = {};", self.top);
        let _ = writeln!(out, "static const double METAFORK_RTOL_FLOAT = {RTOL_FLOAT:e}, METAFORK_RTOL_DOUBLE = {RTOL_DOUBLE:e};");
        // The candidates: every integer parameter's value (name order), and the leaf.
        let _ = writeln!(out, "\n#define METAFORK_PARAMS {}", names.len().max(1));
        let shown: Vec<String> = names.iter().map(|n| c_string(n)).collect();
        let _ = writeln!(out, "static const char *const metafork_param_names[METAFORK_PARAMS] = {{{}}};", if shown.is_empty() { "\"\"".into() } else { shown.join(", ") });
        let varies: Vec<&str> = names.iter().map(|n| if tuned.enumeration.get(*n).is_some_and(|h| h != "fixed") { "1" } else { "0" }).collect();
        let _ = writeln!(out, "static const int metafork_param_varies[METAFORK_PARAMS] = {{{}}};", if varies.is_empty() { "0".into() } else { varies.join(", ") });
        // What the wisdom sets (every program parameter: `gen --wisdom` needs them all).
        let program = function.program_parameters();
        let tuned_flags: Vec<&str> = names.iter().map(|n| if program.contains(*n) { "1" } else { "0" }).collect();
        let _ = writeln!(out, "static const int metafork_param_tuned[METAFORK_PARAMS] = {{{}}};", if tuned_flags.is_empty() { "0".into() } else { tuned_flags.join(", ") });
        let leaf_names: Vec<String> = self.leaves.iter().map(|l| c_string(l)).collect();
        let _ = writeln!(out, "static const char *const metafork_leaf_names[] = {{{}}};", leaf_names.join(", "));
        let _ = writeln!(out, "struct metafork_candidate {{ int leaf; long long v[METAFORK_PARAMS]; }};");
        let _ = writeln!(out, "static const metafork_candidate metafork_candidates[] = {{");
        for c in self.candidates {
            let leaf = self.leaves.iter().position(|l| *l == c.leaf).expect("every candidate's leaf is listed");
            let values: Vec<String> = names.iter().map(|n| c.parameters[*n].to_string()).collect();
            let _ = writeln!(out, "  {{{leaf}, {{{}}}}},", if values.is_empty() { "0".into() } else { values.join(", ") });
        }
        let _ = writeln!(out, "}};\nstatic const int METAFORK_CANDIDATES = (int)(sizeof metafork_candidates / sizeof metafork_candidates[0]);\n");
        // The wisdom's sizes: the data parameters (fixed by `--size`; a fixed program parameter
        // is among the wisdom's parameters instead).
        let sizes: Vec<String> = names.iter().filter(|n| !program.contains(*n)).map(|n| format!("{n}: {}", self.candidates[0].parameters[*n])).collect();
        let _ = writeln!(out, "static const char *const metafork_sizes = {};", c_string(&sizes.join(", ")));
        let _ = writeln!(out, "\nstruct metafork_array {{ const char *name; size_t bytes; bool written; bool floating; int elem; void *host; void *device; void *result; void *answer; void *other; void *scratch; }};");
        let _ = writeln!(out, "static std::vector<metafork_array> metafork_arrays;\n");
        out.push_str(CHECK);
        let reduced = crate::emit::host::reduced_arrays(function);
        if reduced.is_empty() {
            out.push_str(NO_REDUCTION);
        } else {
            let listed: Vec<String> = reduced.iter().map(|k| k.to_string()).collect();
            let _ = writeln!(out, "#define METAFORK_REDUCED {}\nstatic const int metafork_reduced[] = {{{}}};", reduced.len(), listed.join(", "));
            out.push_str(ACCURATE);
        }
        self.elements(&mut out, &names)?;
        self.setup(&mut out);
        self.run(&mut out, schedule, &params, &names);
        self.serial(&mut out, k, schedule, &names)?;
        out.push_str(if reduced.is_empty() { SERIAL_ALONE } else { SERIAL });
        out.push_str(MAIN);
        Ok(out)
    }

    /// Every integer parameter as a local constant of its declared type (`long L`), from the
    /// candidate's values.
    fn locals(function: &KernelFunction, names: &[&String], pad: &str, out: &mut String) {
        for (i, n) in names.iter().enumerate() {
            let ty = function.params.iter().find(|p| p.name == **n).map_or(ScalarType::Int, |p| p.ty);
            let n = c_ident(n);
            let _ = writeln!(out, "{pad}const {ty} {n} = ({ty})metafork_v[{i}]; (void){n};");
        }
    }

    /// `metafork_elements(v, which)`: array `which`'s element count at the values `v`.
    fn elements(&self, out: &mut String, names: &[&String]) -> Result<(), String> {
        let _ = writeln!(out, "static size_t metafork_elements(const long long *metafork_v, int metafork_which) {{");
        Self::locals(self.function, names, "  ", out);
        let x = HostExprs::new(self.function);
        let counts: Vec<String> = self.function.arrays.iter().map(|a| {
            if a.extent_exprs.is_empty() {
                return Ok("1".to_string());
            }
            a.extent_exprs.iter().map(|e| x.expr(e).map(|v| format!("metafork_extent((long long)({v}))"))).collect::<Result<Vec<_>, _>>().map(|v| v.join(" * "))
        }).collect::<Result<_, _>>()?;
        let _ = writeln!(out, "  const size_t metafork_e[] = {{{}}};\n  return metafork_e[metafork_which];\n}}\n", if counts.is_empty() { "0".into() } else { counts.iter().map(|c| format!("(size_t)({c})")).collect::<Vec<_>>().join(", ") });
        Ok(())
    }

    /// `metafork_setup()`: the arrays, at the largest size any candidate needs, filled from a
    /// fixed seed (floating point in [0, 1), integers in 0..15).
    fn setup(&self, out: &mut String) {
        let _ = writeln!(out, "static void metafork_setup() {{\n  unsigned long long metafork_seed = 0x9E3779B97F4A7C15ULL;");
        for (i, a) in self.function.arrays.iter().enumerate() {
            let elem = a.elem.c_name();
            let floating = !a.elem.is_integer();
            let _ = writeln!(out, "  {{\n    size_t metafork_n = 0;\n    for (int metafork_c = 0; metafork_c < METAFORK_CANDIDATES; metafork_c++) metafork_n = std::max(metafork_n, metafork_elements(metafork_candidates[metafork_c].v, {i}));");
            let _ = writeln!(out, "    metafork_array metafork_a = {{{}, std::max<size_t>(metafork_n, 1) * sizeof({elem}), {}, {floating}, (int)sizeof({elem}), 0, 0, 0, 0, 0, 0}};", c_string(&a.name), !a.is_const);
            let _ = writeln!(out, "    {elem} *metafork_h = ({elem} *)metafork_allocate(metafork_a.bytes);\n    for (size_t metafork_k = 0; metafork_k < metafork_a.bytes / sizeof({elem}); metafork_k++) {{ metafork_seed = metafork_seed * 6364136223846793005ULL + 1442695040888963407ULL; metafork_h[metafork_k] = ({elem})({}); }}", if floating { "(double)(metafork_seed >> 11) / 9007199254740992.0" } else { "(long long)((metafork_seed >> 33) % 16)" });
            let _ = writeln!(out, "    metafork_a.host = metafork_h; metafork_a.result = metafork_allocate(metafork_a.bytes); metafork_a.answer = metafork_allocate(metafork_a.bytes); metafork_a.other = metafork_allocate(metafork_a.bytes);\n    metafork_arrays.push_back(metafork_a);\n  }}");
        }
        let _ = writeln!(out, "}}\n");
    }

    /// `metafork_run(c)`: candidate `c`'s schedule on the device, with its host loops.
    fn run(&self, out: &mut String, schedule: &crate::frontend::model::Schedule, params: &[(String, String)], names: &[&String]) {
        let function = self.function;
        let _ = writeln!(out, "static cudaError_t metafork_run(int metafork_c) {{");
        if names.is_empty() {
            let _ = writeln!(out, "  (void)metafork_c;  // no parameter: the one configuration");
        } else {
            let _ = writeln!(out, "  const long long *metafork_v = metafork_candidates[metafork_c].v;");
        }
        Self::locals(self.function, names, "  ", out);
        for v in function.params.iter().filter(|p| p.role == Role::Value) {
            let _ = writeln!(out, "  const {} {} = 0.5;", v.ty, c_ident(&v.name));
        }
        // Device pointers for the launch functions, typed as the program spells them.
        for (k, a) in function.arrays.iter().enumerate() {
            let c = if a.is_const { "const " } else { "" };
            let t = function.spelling_of(&a.name).unwrap_or(a.elem.c_name());
            let _ = writeln!(out, "  {c}{t} *{} = ({c}{t} *)metafork_arrays[{k}].device;", c_ident(&a.name));
        }
        let mut indent = "  ".to_string();
        for h in &schedule.host_loops {
            let cmp = if h.inclusive { "<=" } else { "<" };
            let v = c_ident(&h.var);
            let _ = writeln!(out, "{indent}for ({} {v} = {}; {v} {cmp} {}; {v} += {}) {{", h.ty, spelled(&h.lo), spelled(&h.hi), h.step);
            indent.push_str("  ");
        }
        let args: Vec<&str> = params.iter().map(|(_, n)| n.as_str()).collect();
        let _ = writeln!(out, "{indent}cudaError_t metafork_e = cudaErrorInvalidValue;\n{indent}switch (metafork_candidates[metafork_c].leaf) {{");
        for (i, l) in self.leaves.iter().enumerate() {
            let _ = writeln!(out, "{indent}case {i}: metafork_e = {}({}{}0); break;", launch_name_of(l), args.join(", "), if args.is_empty() { "" } else { ", " });
        }
        let _ = writeln!(out, "{indent}}}\n{indent}if (metafork_e != cudaSuccess) return metafork_e;");
        for _ in &schedule.host_loops {
            indent.truncate(indent.len() - 2);
            let _ = writeln!(out, "{indent}}}");
        }
        let _ = writeln!(out, "  return cudaSuccess;\n}}\n");
    }

    /// `metafork_serial_run(v, into)`: the schedule's statements on the host, every `meta_for` a
    /// sequential loop, inside its host loops, at the values `v`, on the arrays' copies `into`
    /// (0 answer, 1 other, 2 scratch; filled from the inputs first). Returns -1 when a fact of
    /// the program fails. `metafork_serial` ([`SERIAL`] or [`SERIAL_ALONE`]) runs it.
    fn serial(&self, out: &mut String, k: usize, schedule: &crate::frontend::model::Schedule, names: &[&String]) -> Result<(), String> {
        let function = self.function;
        let x = HostExprs::new(function);
        let _ = writeln!(out, "static int metafork_serial_run(const long long *metafork_v, int metafork_into) {{");
        Self::locals(self.function, names, "  ", out);
        for v in function.params.iter().filter(|p| p.role == Role::Value) {
            let _ = writeln!(out, "  const {} {} = 0.5;", v.ty, c_ident(&v.name));
        }
        for (i, a) in function.arrays.iter().enumerate() {
            let n = c_ident(&a.name);
            let _ = writeln!(out, "  {} *{n} = ({} *)(metafork_into == 0 ? metafork_arrays[{i}].answer : metafork_into == 1 ? metafork_arrays[{i}].other : metafork_arrays[{i}].scratch); (void){n};", a.elem, a.elem);
            let _ = writeln!(out, "  memcpy({n}, metafork_arrays[{i}].host, metafork_arrays[{i}].bytes);");
        }
        // Each derived scalar where what it reads is bound: before the host loops, or inside the
        // loop whose counter it reads (`int u = t * 2` in `for (t ...)`).
        let opens = derived_depths(function, schedule);
        let declare = |out: &mut String, depth: usize| -> Result<(), String> {
            for (d, _) in function.derived.iter().zip(&opens).filter(|(_, o)| **o == Some(depth)) {
                let n = x.name(&d.name);
                let _ = writeln!(out, "{}const {} {n} = {}; (void){n};", "  ".repeat(depth + 1), d.ty, x.expr(&d.value)?);
            }
            Ok(())
        };
        declare(out, 0)?;
        let mut depth = 1;
        for h in &schedule.host_loops {
            let v = x.name(&h.var);
            let _ = writeln!(out, "{}for ({} {v} = {}; {v} {} {}; {v} += {}) {{", "  ".repeat(depth), h.ty, x.expr(&h.lo)?, if h.inclusive { "<=" } else { "<" }, x.expr(&h.hi)?, h.step);
            declare(out, depth)?;
            depth += 1;
        }
        crate::emit::host::serial_schedule(function, k, depth, true, out)?;
        for d in (1..depth).rev() {
            let _ = writeln!(out, "{}}}", "  ".repeat(d));
        }
        let _ = writeln!(out, "  return 0;\n}}\n");
        Ok(())
    }
}

/// How many of `schedule`'s host loops must be open before each derived scalar of `function`
/// (in order) can be computed: 0 when it reads only parameters and derived scalars of depth 0,
/// `i + 1` when it reads the counter of host loop `i` (directly or through another derived
/// scalar); `None` when it reads a name the schedule never binds (a counter of another
/// schedule's host loop), so the schedule does not use it.
fn derived_depths(function: &KernelFunction, schedule: &crate::frontend::model::Schedule) -> Vec<Option<usize>> {
    let mut depths: Vec<Option<usize>> = Vec::with_capacity(function.derived.len());
    for (i, d) in function.derived.iter().enumerate() {
        let mut names = Vec::new();
        d.value.names(&mut names);
        let depth = names.iter().try_fold(0, |most, n| {
            let at = if let Some(k) = schedule.host_loops.iter().position(|h| h.var == *n) {
                Some(k + 1)
            } else if let Some(j) = function.derived[..i].iter().rposition(|e| e.name == *n) {
                depths[j]
            } else if function.params.iter().any(|p| p.name == *n) {
                Some(0)
            } else {
                None
            };
            at.map(|a| a.max(most))
        });
        depths.push(depth);
    }
    depths
}

/// Reductions' accurate sums and rounding bounds: the serial program's `METAFORK_REDUCE(t, v)` is
/// `t += v`, or, in the accurate run (on the scratch copies), adds to three `double` shadows of
/// `t`'s element: `v` (starting at `t`'s value before its first term), `|v|` (starting at `|t|`)
/// and 1 (the count). An element then matches within rtol of the accurate sum, or within
/// `2 γ(k+1) Σ|x|` of the serial answer: no order of its k terms rounds further from the serial
/// sum, so only a wrong kernel lands beyond it. The bound alone would be too weak (2^24 float
/// terms make γ ≥ 1: every finite answer within), the accurate sum alone too strict (a kernel
/// adding millions of atomic terms in float drifts as the serial program does, 1e-3 measured).
const ACCURATE: &str = r#"
static bool metafork_accurate_run;
static int metafork_accurate_which;
/* Per copy (0 answer, 1 other), per reduced array: each element's accurate sum, the magnitude of
   its terms (with its value before the first) and how many a reduction added (0: none). */
static std::vector<double> metafork_accurate_sum[2][METAFORK_REDUCED];
static std::vector<double> metafork_accurate_magnitude[2][METAFORK_REDUCED];
static std::vector<double> metafork_accurate_terms[2][METAFORK_REDUCED];
static void metafork_accurate_add(const void *metafork_at, double metafork_current, double metafork_term) {
  const char *metafork_p = (const char *)metafork_at;
  int metafork_w = metafork_accurate_which;
  for (int metafork_j = 0; metafork_j < METAFORK_REDUCED; metafork_j++) {
    metafork_array &metafork_a = metafork_arrays[metafork_reduced[metafork_j]];
    const char *metafork_base = (const char *)metafork_a.scratch;
    if (!metafork_base || metafork_p < metafork_base || metafork_p >= metafork_base + metafork_a.bytes) continue;
    size_t metafork_i = (size_t)(metafork_p - metafork_base) / metafork_a.elem;
    if (metafork_accurate_terms[metafork_w][metafork_j][metafork_i] == 0) {
      metafork_accurate_sum[metafork_w][metafork_j][metafork_i] = metafork_current;
      metafork_accurate_magnitude[metafork_w][metafork_j][metafork_i] = fabs(metafork_current);
    }
    metafork_accurate_sum[metafork_w][metafork_j][metafork_i] += metafork_term;
    metafork_accurate_magnitude[metafork_w][metafork_j][metafork_i] += fabs(metafork_term);
    metafork_accurate_terms[metafork_w][metafork_j][metafork_i] += 1;
    return;
  }
}
#define METAFORK_REDUCE(t, v) do { if (!metafork_accurate_run) (t) += (v); else metafork_accurate_add(&(t), (double)(t), (double)(v)); } while (0)

/* Index of array `metafork_k` among the reduced ones, or -1. */
static int metafork_reduced_slot(size_t metafork_k) {
  for (int metafork_j = 0; metafork_j < METAFORK_REDUCED; metafork_j++) if (metafork_reduced[metafork_j] == (int)metafork_k) return metafork_j;
  return -1;
}

/* Whether `metafork_got` may be element `metafork_i` of reduced slot `metafork_j` (copy
   `metafork_w`) with answer `metafork_want`: within rtol of the accurate sum, or within twice
   the rounding bound of any order of its terms of the answer. */
static bool metafork_reduction_matches(int metafork_w, int metafork_j, size_t metafork_i, int metafork_elem, double metafork_got, double metafork_want, double metafork_rtol) {
  if (metafork_accurate_terms[metafork_w][metafork_j].empty() || metafork_accurate_terms[metafork_w][metafork_j][metafork_i] == 0) return false;
  double metafork_z = metafork_accurate_sum[metafork_w][metafork_j][metafork_i];
  if (fabs(metafork_got - metafork_z) <= metafork_rtol * std::max(1.0, fabs(metafork_z))) return true;
  double metafork_m = (metafork_accurate_terms[metafork_w][metafork_j][metafork_i] + 1) * (metafork_elem == 4 ? 5.9604644775390625e-8 : 1.1102230246251565e-16);
  if (!(metafork_m < 1)) return std::isfinite(metafork_got) || !std::isfinite(metafork_want);
  return fabs(metafork_got - metafork_want) <= metafork_rtol * std::max(1.0, fabs(metafork_want)) + 2 * metafork_m / (1 - metafork_m) * metafork_accurate_magnitude[metafork_w][metafork_j][metafork_i];
}
"#;

/// `metafork_serial(v, into_answer)` with reductions: the serial program into the answer (or the
/// other copy), then once more on the scratch copies for their accurate sums (see [`ACCURATE`]).
const SERIAL: &str = r#"static int metafork_serial(const long long *metafork_v, bool metafork_into_answer) {
  int metafork_which = metafork_into_answer ? 0 : 1;
  int metafork_status = metafork_serial_run(metafork_v, metafork_which);
  if (metafork_status != 0) return metafork_status;
  for (int metafork_j = 0; metafork_j < METAFORK_REDUCED; metafork_j++) {
    metafork_array &metafork_a = metafork_arrays[metafork_reduced[metafork_j]];
    metafork_accurate_sum[metafork_which][metafork_j].assign(metafork_a.bytes / metafork_a.elem, 0.0);
    metafork_accurate_magnitude[metafork_which][metafork_j].assign(metafork_a.bytes / metafork_a.elem, 0.0);
    metafork_accurate_terms[metafork_which][metafork_j].assign(metafork_a.bytes / metafork_a.elem, 0.0);
  }
  for (size_t metafork_k = 0; metafork_k < metafork_arrays.size(); metafork_k++)
    if (!metafork_arrays[metafork_k].scratch) metafork_arrays[metafork_k].scratch = metafork_allocate(metafork_arrays[metafork_k].bytes);
  metafork_accurate_which = metafork_which;
  metafork_accurate_run = true;
  metafork_serial_run(metafork_v, 2);
  metafork_accurate_run = false;
  return 0;
}

"#;

/// A schedule without a floating reduction (an integer one adds exactly): the answer is the
/// serial program's alone, and no element has a second way to match.
const NO_REDUCTION: &str = r#"
#define METAFORK_REDUCED 0
#define METAFORK_REDUCE(t, v) ((t) += (v))
static int metafork_reduced_slot(size_t) { return -1; }
static bool metafork_reduction_matches(int, int, size_t, int, double, double, double) { return false; }
"#;

/// `metafork_serial(v, into_answer)` without reductions: the serial program alone.
const SERIAL_ALONE: &str = r#"static int metafork_serial(const long long *metafork_v, bool metafork_into_answer) {
  return metafork_serial_run(metafork_v, metafork_into_answer ? 0 : 1);
}

"#;

/// Allocation, extents and the tolerances (every name `metafork_`: user names are in scope).
const CHECK: &str = r#"#define METAFORK_CHECK(metafork_x) do { cudaError_t metafork_e_ = (metafork_x); if (metafork_e_ != cudaSuccess) { fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(metafork_e_)); exit(1); } } while (0)

static void *metafork_allocate(size_t metafork_bytes) {
  void *metafork_p = malloc(metafork_bytes ? metafork_bytes : 1);
  if (!metafork_p) { fprintf(stderr, "cannot allocate %zu bytes\n", metafork_bytes); exit(1); }
  return metafork_p;
}

static long long metafork_extent(long long metafork_v) { return metafork_v < 0 ? 0 : metafork_v; }

static double metafork_rtol_float = METAFORK_RTOL_FLOAT, metafork_rtol_double = METAFORK_RTOL_DOUBLE;

"#;

/// The driver: options, the answer, the search, the cache, the table and the wisdom.
const MAIN: &str = r#"
static void metafork_restore() {
  for (size_t k = 0; k < metafork_arrays.size(); k++) METAFORK_CHECK(cudaMemcpy(metafork_arrays[k].device, metafork_arrays[k].host, metafork_arrays[k].bytes, cudaMemcpyHostToDevice));
  METAFORK_CHECK(cudaDeviceSynchronize());
}

/* The largest `|got - want| / max(1, |want|)` over the written arrays (`got`: each array's
   result, `want`: its answer or its other copy); -1 if an integer element differs, INFINITY if
   one is NaN and the other not. Within tolerance when every element's d <= rtol of its array's
   type, or, for an element a reduction updated, `metafork_reduction_matches`. */
static double metafork_difference(bool against_answer, bool *within) {
  double worst = 0;
  *within = true;
  for (size_t k = 0; k < metafork_arrays.size(); k++) {
    metafork_array &a = metafork_arrays[k];
    if (!a.written) continue;
    const void *want = against_answer ? a.answer : a.other;
    if (!a.floating) { if (memcmp(a.result, want, a.bytes) != 0) { *within = false; return -1; } continue; }
    double rtol = a.elem == 4 ? metafork_rtol_float : metafork_rtol_double, mine = 0;
    size_t n = a.bytes / a.elem;
    int which = against_answer ? 0 : 1, slot = metafork_reduced_slot(k);
    bool within_array = true;
    for (size_t i = 0; i < n; i++) {
      double x = a.elem == 4 ? ((float *)a.result)[i] : ((double *)a.result)[i];
      double y = a.elem == 4 ? ((const float *)want)[i] : ((const double *)want)[i];
      if (std::isnan(x) && std::isnan(y)) continue;
      if (std::isnan(x) != std::isnan(y)) { *within = false; return INFINITY; }
      double d = fabs(x - y) / std::max(1.0, fabs(y));
      if (!(d <= rtol) && !(slot >= 0 && metafork_reduction_matches(which, slot, i, a.elem, x, y, rtol))) within_array = false;
      if (d > mine) mine = d;
    }
    if (!within_array) *within = false;
    worst = std::max(worst, mine);
  }
  return worst;
}


/* `name=value ...` of candidate c's enumerated parameters (or all, with `every`). */
/* Candidate c's values: the enumerated parameters (every: all of them; wisdom: the program
   parameters, which a wisdom file sets). */
static std::string metafork_shown(int c, bool every, const char *sep, const char *eq, bool wisdom = false) {
  std::string s;
  for (int p = 0; p < METAFORK_PARAMS; p++) {
    if (wisdom ? !metafork_param_tuned[p] : !every && !metafork_param_varies[p]) continue;
    if (!s.empty()) s += sep;
    s += metafork_param_names[p]; s += eq; s += std::to_string(metafork_candidates[c].v[p]);
  }
  return s;
}

/* Candidates that differ from c in one enumerated parameter, by one step of that parameter's
   sorted list of values (the other parameters equal). */
static std::vector<int> metafork_neighbours(int c) {
  std::vector<int> found;
  for (int p = 0; p < METAFORK_PARAMS; p++) {
    if (!metafork_param_varies[p]) continue;
    std::vector<long long> values;
    for (int o = 0; o < METAFORK_CANDIDATES; o++) values.push_back(metafork_candidates[o].v[p]);
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    int at = (int)(std::lower_bound(values.begin(), values.end(), metafork_candidates[c].v[p]) - values.begin());
    for (int step = -1; step <= 1; step += 2) {
      int to = at + step;
      if (to < 0 || to >= (int)values.size()) continue;
      for (int o = 0; o < METAFORK_CANDIDATES; o++) {
        bool same = metafork_candidates[o].v[p] == values[to];
        for (int q = 0; q < METAFORK_PARAMS && same; q++) same = q == p || metafork_candidates[o].v[q] == metafork_candidates[c].v[q];
        if (same) { found.push_back(o); break; }
      }
    }
  }
  return found;
}

enum { METAFORK_UNTIMED, METAFORK_MATCHES, METAFORK_MISMATCH, METAFORK_OTHER_ANSWER, METAFORK_FAILED };
static const char *const metafork_verdicts[] = {"untimed", "matches", "MISMATCH", "OTHER ANSWER", "launch failed"};
struct metafork_result { int verdict; double median_ms; double difference; std::string detail; };

/* The cache: one tab-separated line per measured candidate:
   device, schedule, sizes, all parameters, verdict, median ms, difference, detail. */
static std::string metafork_cache_key(const char *device, int c) {
  return std::string(device) + "\t" + metafork_schedule + "\t" + metafork_sizes + "\t" + metafork_shown(c, true, " ", "=");
}

static int metafork_read_cache(const char *path, const char *device, std::vector<metafork_result> &results) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  std::vector<std::string> keys;
  for (int c = 0; c < METAFORK_CANDIDATES; c++) keys.push_back(metafork_cache_key(device, c));
  int restored = 0;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    size_t n = strlen(line);
    if (n == 0 || line[n - 1] != '\n') break; /* a line cut by an interrupted run */
    line[n - 1] = 0;
    std::string text(line);
    size_t tab = 0;
    for (int field = 0; field < 4 && tab != std::string::npos; field++) tab = text.find('\t', tab + (field ? 1 : 0));
    if (tab == std::string::npos) continue;
    std::string key = text.substr(0, tab);
    char verdict[32] = "";
    double ms = 0, d = 0;
    if (sscanf(text.c_str() + tab + 1, "%31[^\t]\t%lf\t%lf", verdict, &ms, &d) != 3) continue;
    int v = -1;
    for (int k = 1; k <= METAFORK_FAILED; k++) if (strcmp(verdict, metafork_verdicts[k]) == 0) v = k;
    if (v < 0) continue;
    /* A time that is not one (a hand-edited or damaged cache: nan, inf, negative) is measured again. */
    if (v == METAFORK_MATCHES && !(std::isfinite(ms) && ms > 0)) continue;
    for (int c = 0; c < METAFORK_CANDIDATES; c++)
      if (keys[c] == key && results[c].verdict == METAFORK_UNTIMED) { results[c].verdict = v; results[c].median_ms = ms; results[c].difference = d; results[c].detail = "(cached)"; restored++; }
  }
  fclose(f);
  return restored;
}

static void metafork_usage(const char *self) {
  printf("usage: %s [--top K] [--budget N] [--all] [--rtol X] [--cache FILE] [--list] [--neighbours K] [--restored DEV] [WISDOM]\n"
         "Times candidate configurations of schedule `%s` (%d admissible, model rank order) on GPU 0, checks each\n"
         "answer against the serial program and writes the fastest correct one per leaf to WISDOM (wisdom.yaml).\n"
         "  --top K        time the model's K best first (default %d), then search locally around the fastest\n"
         "  --budget N     time at most N candidates in all (default: no limit); --all times every candidate\n"
         "  --rtol X       relative tolerance of floating-point answers (default %.0e float, %.0e double)\n"
         "  --cache FILE   results of earlier runs to resume from, appended as candidates finish (default %s_cache.tsv)\n"
         "  --list         print the candidates and exit; --neighbours K: candidate K's neighbours;\n"
         "  --restored DEV what the cache holds for device DEV (these three need no GPU)\n"
         "Policy: %d warm-up run(s), then %d timed runs per candidate (CUDA events, inputs restored before each\n"
         "run), the median reported; sizes: %s.\n"
         "%s",
         self, metafork_schedule, METAFORK_CANDIDATES, METAFORK_DEFAULT_TOP, METAFORK_RTOL_FLOAT, METAFORK_RTOL_DOUBLE, metafork_schedule, METAFORK_WARMUPS, METAFORK_REPS, metafork_sizes,
         METAFORK_REDUCED ? "A reduction's element (its terms added in any order) also matches within rtol of its sum accumulated\n"
                            "in double, or within 2 g(k+1) sum|x| of the answer (g(k) = k u / (1 - k u), k terms, u the unit roundoff;\n"
                            "every finite value where (k+1) u >= 1); the difference shown is against the answer.\n" : "");
}

static int metafork_number(const char *option, const char *text, long long lo) {
  char *end = 0;
  long long v = text ? strtoll(text, &end, 10) : 0;
  if (!text || *end || v < lo || v > 1000000000LL) { fprintf(stderr, "%s needs an integer >= %lld\n", option, lo); exit(64); }
  return (int)v;
}

int main(int argc, char **argv) {
  const char *wisdom = "wisdom.yaml";
  std::string cache = std::string(metafork_schedule) + "_cache.tsv";
  int top = METAFORK_DEFAULT_TOP, budget = METAFORK_CANDIDATES, neighbours_of = -1;
  bool all = false, list = false;
  const char *restored_for = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : 0;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { metafork_usage(argv[0]); return 0; }
    else if (!strcmp(a, "--top")) { top = metafork_number(a, next, 1); i++; }
    else if (!strcmp(a, "--budget")) { budget = metafork_number(a, next, 1); i++; }
    else if (!strcmp(a, "--all")) all = true;
    else if (!strcmp(a, "--list")) list = true;
    else if (!strcmp(a, "--neighbours")) { neighbours_of = metafork_number(a, next, 1) - 1; i++; }
    else if (!strcmp(a, "--restored")) { if (!next) { fprintf(stderr, "--restored needs a device name\n"); return 64; } restored_for = next; i++; }
    else if (!strcmp(a, "--cache")) { if (!next) { fprintf(stderr, "--cache needs a file\n"); return 64; } cache = next; i++; }
    else if (!strcmp(a, "--rtol")) {
      char *end = 0; double x = next ? strtod(next, &end) : -1;
      if (!next || *end || !(x >= 0 && x < 1)) { fprintf(stderr, "--rtol needs a number in [0, 1)\n"); return 64; }
      metafork_rtol_float = metafork_rtol_double = x; i++;
    }
    else if (a[0] == '-') { fprintf(stderr, "unknown option %s (see --help)\n", a); return 64; }
    else wisdom = a;
  }
  if (list) {
    for (int c = 0; c < METAFORK_CANDIDATES; c++) printf("%d\t%s\t%s\n", c + 1, metafork_leaf_names[metafork_candidates[c].leaf], metafork_shown(c, false, " ", "=").c_str());
    return 0;
  }
  if (neighbours_of >= 0) {
    if (neighbours_of >= METAFORK_CANDIDATES) { fprintf(stderr, "--neighbours: there are %d candidates\n", METAFORK_CANDIDATES); return 64; }
    for (int o : metafork_neighbours(neighbours_of)) printf("%d\t%s\n", o + 1, metafork_shown(o, false, " ", "=").c_str());
    return 0;
  }
  std::vector<metafork_result> results(METAFORK_CANDIDATES, metafork_result{METAFORK_UNTIMED, -1.0, 0.0, ""});
  if (restored_for) {
    metafork_read_cache(cache.c_str(), restored_for, results);
    for (int c = 0; c < METAFORK_CANDIDATES; c++)
      if (results[c].verdict != METAFORK_UNTIMED) printf("%d\t%s\t%.6f\n", c + 1, metafork_verdicts[results[c].verdict], results[c].median_ms);
    return 0;
  }
  cudaDeviceProp prop;
  METAFORK_CHECK(cudaGetDeviceProperties(&prop, 0));
  int restored = metafork_read_cache(cache.c_str(), prop.name, results);
  FILE *cache_file = fopen(cache.c_str(), "a");
  if (!cache_file) fprintf(stderr, "warning: cannot append to %s; results will not be kept\n", cache.c_str());
  metafork_setup();
  for (size_t k = 0; k < metafork_arrays.size(); k++) METAFORK_CHECK(cudaMalloc(&metafork_arrays[k].device, metafork_arrays[k].bytes));
  metafork_allow_shared((size_t)prop.sharedMemPerBlockOptin);
  printf("%s on %s: %d candidates, sizes %s\n", metafork_schedule, prop.name, METAFORK_CANDIDATES, metafork_sizes);
  printf("policy: %d warm-up run(s), median of %d timed runs (CUDA events); answers checked against the serial program, rtol %.1e float, %.1e double\n", METAFORK_WARMUPS, METAFORK_REPS, metafork_rtol_float, metafork_rtol_double);
  printf("search: %s; %d result(s) restored from %s\n", all ? "every candidate" : ("the model's top " + std::to_string(top) + ", then local search around the fastest").c_str(), restored, cache.c_str());
  fflush(stdout);
  bool have_answer = false;
  cudaEvent_t start, stop;
  METAFORK_CHECK(cudaEventCreate(&start));
  METAFORK_CHECK(cudaEventCreate(&stop));
  int timed = 0;
  /* Measure candidate c (unless done): returns true when it was timed now. */
  auto measure = [&](int c) -> bool {
    metafork_result &r = results[c];
    if (r.verdict != METAFORK_UNTIMED || timed >= budget) return false;
    timed++;
    if (!have_answer) {
      if (metafork_serial(metafork_candidates[c].v, true) != 0) { fprintf(stderr, "the serial program stops on a fact of the program at the tuned sizes\n"); exit(1); }
      have_answer = true;
    }
    std::vector<float> times;
    cudaError_t e = cudaSuccess;
    for (int w = 0; w < METAFORK_WARMUPS && e == cudaSuccess; w++) {
      metafork_restore();
      e = metafork_run(c);
      if (e == cudaSuccess) e = cudaDeviceSynchronize();
    }
    for (int rep = 0; rep < METAFORK_REPS && e == cudaSuccess; rep++) {
      metafork_restore();
      METAFORK_CHECK(cudaEventRecord(start));
      e = metafork_run(c);
      METAFORK_CHECK(cudaEventRecord(stop));
      if (e == cudaSuccess) e = cudaEventSynchronize(stop);
      float ms = 0;
      if (e == cudaSuccess) { METAFORK_CHECK(cudaEventElapsedTime(&ms, start, stop)); times.push_back(ms); }
    }
    if (e != cudaSuccess) {
      r.verdict = METAFORK_FAILED; r.detail = cudaGetErrorString(e); cudaGetLastError();
      if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure) { fprintf(stderr, "candidate %d: %s (the context is lost)\n", c + 1, r.detail.c_str()); exit(1); }
    } else {
      std::sort(times.begin(), times.end());
      r.median_ms = times[times.size() / 2];
      for (size_t k = 0; k < metafork_arrays.size(); k++)
        if (metafork_arrays[k].written) METAFORK_CHECK(cudaMemcpy(metafork_arrays[k].result, metafork_arrays[k].device, metafork_arrays[k].bytes, cudaMemcpyDeviceToHost));
      bool within = false;
      r.difference = metafork_difference(true, &within);
      r.verdict = METAFORK_MATCHES;
      if (!within) {
        /* Is the kernel wrong, or does the program compute something else at these parameters? */
        bool own = false;
        if (metafork_serial(metafork_candidates[c].v, false) == 0) metafork_difference(false, &own);
        r.verdict = own ? METAFORK_OTHER_ANSWER : METAFORK_MISMATCH;
      }
    }
    printf("%-5d %-24s %-28s %12s  %s", c + 1, metafork_leaf_names[metafork_candidates[c].leaf], metafork_shown(c, false, " ", "=").c_str(), r.median_ms >= 0 ? std::to_string(r.median_ms).c_str() : "-", metafork_verdicts[r.verdict]);
    if (r.verdict == METAFORK_FAILED) printf(": %s", r.detail.c_str());
    else if (r.difference != 0) printf(" (max relative difference %.2e)", r.difference);
    printf("\n");
    fflush(stdout);
    if (cache_file) {
      fprintf(cache_file, "%s\t%s\t%.6f\t%.3e\t%s\n", metafork_cache_key(prop.name, c).c_str(), metafork_verdicts[r.verdict], r.median_ms, r.difference, r.detail.c_str());
      fflush(cache_file);
    }
    return true;
  };
  printf("%-5s %-24s %-28s %12s  %s\n", "rank", "leaf", "parameters", "median ms", "answer");
  auto fastest = [&]() {
    int best = -1;
    for (int c = 0; c < METAFORK_CANDIDATES; c++)
      if (results[c].verdict == METAFORK_MATCHES && (best < 0 || results[c].median_ms < results[best].median_ms)) best = c;
    return best;
  };
  if (all) {
    for (int c = 0; c < METAFORK_CANDIDATES; c++) measure(c);
  } else {
    for (int c = 0; c < std::min(top, METAFORK_CANDIDATES); c++) measure(c);
    for (int best = fastest(); best >= 0 && timed < budget;) {
      for (int o : metafork_neighbours(best)) measure(o);
      int now = fastest();
      if (now == best) break;
      best = now;
    }
  }
  if (cache_file) fclose(cache_file);
  int counted = 0, wrong = 0;
  for (int c = 0; c < METAFORK_CANDIDATES; c++) { counted += results[c].verdict != METAFORK_UNTIMED; wrong += results[c].verdict == METAFORK_MISMATCH; }
  printf("measured %d of %d candidates (%d now, %d from the cache)\n", counted, METAFORK_CANDIDATES, timed, counted - timed);
  std::string path = std::string(wisdom) + ".XXXXXX";  /* written whole, then renamed over WISDOM */
  struct stat existing;
  if (lstat(wisdom, &existing) == 0 && !S_ISREG(existing.st_mode)) { fprintf(stderr, "%s is not a regular file; not replacing it\n", wisdom); return 1; }
  int fd = mkstemp(&path[0]);
  if (fd >= 0) { mode_t mask = umask(0); umask(mask); fchmod(fd, 0666 & ~mask); }  /* as fopen would make it, not mkstemp's 0600 */
  FILE *f = fd >= 0 ? fdopen(fd, "w") : 0;
  if (!f) { fprintf(stderr, "cannot write %s\n", path.c_str()); return 1; }
  fprintf(f, "schedule: %s\ndevice: \"", metafork_schedule);
  for (const char *p = prop.name; *p; p++) fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
  fprintf(f, "\"\nsizes: {%s}\nrepetitions: %d\nwarmups: %d\nmeasured: %d\n", metafork_sizes, METAFORK_REPS, METAFORK_WARMUPS, counted);
  int best = fastest();
  if (best >= 0) fprintf(f, "best: {leaf: %s, parameters: {%s}, median_ms: %.6f, model_rank: %d}\n", metafork_leaf_names[metafork_candidates[best].leaf], metafork_shown(best, false, ", ", ": ", true).c_str(), results[best].median_ms, best + 1);
  fprintf(f, "leaves:\n");
  for (int c = 0; c < METAFORK_CANDIDATES; c++) {
    if (results[c].verdict != METAFORK_MATCHES) continue;
    bool first = true;  /* the fastest matching candidate of its leaf */
    for (int o = 0; o < METAFORK_CANDIDATES && first; o++)
      if (o != c && results[o].verdict == METAFORK_MATCHES && metafork_candidates[o].leaf == metafork_candidates[c].leaf && (results[o].median_ms < results[c].median_ms || (results[o].median_ms == results[c].median_ms && o < c))) first = false;
    if (first) fprintf(f, "  - {leaf: %s, parameters: {%s}, median_ms: %.6f, model_rank: %d}\n", metafork_leaf_names[metafork_candidates[c].leaf], metafork_shown(c, false, ", ", ": ", true).c_str(), results[c].median_ms, c + 1);
  }
  if (fclose(f) != 0 || rename(path.c_str(), wisdom) != 0) { fprintf(stderr, "cannot write %s\n", wisdom); remove(path.c_str()); return 1; }
  printf("wisdom: %s\n", wisdom);
  int others = 0;
  for (int c = 0; c < METAFORK_CANDIDATES; c++) others += results[c].verdict == METAFORK_OTHER_ANSWER;
  if (others) printf("%d candidate(s) compute another answer than the serial program at the first timed candidate's parameters: the program's result depends on its parameters there (a missing assume()?); none can be the best\n", others);
  return wrong ? 2 : 0;
}
"#;
