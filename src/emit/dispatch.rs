//! The dispatch code of one schedule: `<schedule>_dispatch.h` and `<schedule>_dispatch.cu`.
//!
//! Contract: the header is plain C++ (GCC or Clang: it uses `__int128` and the
//! `__builtin_*_overflow` checks), with no CUDA dependency: a `metafork_device` struct, the
//! program's parameters as a struct, the tree's leaves as constant tables and
//! `metafork_<s>_select`, which returns the first admissible kernel leaf or a negative
//! `METAFORK_*` status, with the same rules as [`crate::dispatch::Dispatcher::select`] (facts
//! in 64-bit checked arithmetic, constraints in checked 128-bit arithmetic; where those would
//! overflow it answers `METAFORK_OVERFLOW` rather than guess). The `.cu` file fills the device
//! struct from the CUDA runtime (`cudaDeviceGetAttribute`, and `cudaFuncGetAttributes` for the
//! registers each compiled leaf really uses), opts into large dynamic shared memory when the
//! chosen leaf needs it, and launches through the leaf's own launch wrapper. It never launches
//! where no leaf admits the point: it returns the status, and `detail` says why.

use crate::dispatch::{Dispatcher, FastPoly, Outcome};
use crate::emit::cuda::{allow_shared_name, attributes_name, launch_name_of, launch_params};
use crate::frontend::model::{FactKind, KernelFunction};
use crate::kernel::Kernel;
use constraints::Rel;
use std::fmt::Write;

/// What the header defines once, whichever schedules' headers a program includes.
const COMMON: &str = include_str!("dispatch_common.h");

/// The dispatch header and source for one schedule, as (file name, text) pairs.
pub fn emit(source: &str, function: &KernelFunction, kernel: &Kernel, d: &Dispatcher) -> Result<Vec<(String, String)>, String> {
    emit_with_wisdom(source, function, kernel, d, None)
}

/// A tuning harness's `wisdom.yaml`: the fastest configuration it measured.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Wisdom {
    pub schedule: String,
    pub device: String,
    pub best: Option<WisdomChoice>,
}

#[derive(Clone, Debug, serde::Deserialize)]
pub struct WisdomChoice {
    pub leaf: String,
    pub parameters: std::collections::BTreeMap<String, i64>,
}

impl Wisdom {
    pub fn load(path: &std::path::Path) -> Result<Wisdom, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        serde_yaml::from_str(&text).map_err(|e| format!("{}: not a wisdom file: {e}", path.display()))
    }
}

/// As [`emit`]; with `wisdom` for this schedule, the header also gets
/// `metafork_<s>_wisdom(params)`, which sets the program parameters to the measured best.
pub fn emit_with_wisdom(source: &str, function: &KernelFunction, kernel: &Kernel, d: &Dispatcher, wisdom: Option<&Wisdom>) -> Result<Vec<(String, String)>, String> {
    let s = &d.schedule;
    let decls: Vec<String> = launch_params(function, kernel).into_iter().map(|(decl, _)| decl).collect();
    let mut h = header(source, d, &decls)?;
    if let Some(w) = wisdom.filter(|w| w.schedule == *s) {
        let best = w.best.as_ref().ok_or_else(|| format!("the wisdom for `{s}` has no `best` configuration (no candidate matched)"))?;
        let program = function.program_parameters();
        let mut sets = String::new();
        for (name, value) in &best.parameters {
            if !program.contains(name) {
                return Err(format!("the wisdom for `{s}` sets `{name}`, which is not a program parameter (those: {})", program.join(", ")));
            }
            sets += &format!(" p->{name} = {value};");
        }
        let at = h.rfind("#endif /*").expect("the header ends with its guard");
        h.insert_str(at, &format!("/* Program parameters measured best on {} (leaf {}), from a tuning harness's wisdom. */\nstatic inline void metafork_{s}_wisdom(metafork_{s}_params *p) {{{sets} }}\n\n", c_string(&w.device), best.leaf));
    }
    Ok(vec![(format!("{s}_dispatch.h"), h), (format!("{s}_dispatch.cu"), launcher(source, function, kernel, d))])
}

fn poly_ref(p: &FastPoly, terms: &mut Vec<String>, factors: &mut Vec<String>) -> String {
    let first = terms.len();
    for (k, fs) in &p.terms {
        let f0 = factors.len();
        for (v, e) in fs {
            factors.push(format!("{{{v}, {e}}}"));
        }
        terms.push(format!("{{{k}LL, {f0}, {}}}", fs.len()));
    }
    format!("{{{first}, {}}}", p.terms.len())
}

fn rel_code(r: Rel) -> u8 {
    match r {
        Rel::Lt => 0,
        Rel::Le => 1,
        Rel::Eq => 2,
        Rel::Ne => 3,
        Rel::Dvd(_) => 4,
        Rel::NotDvd(_) => 5,
    }
}

/// A C string literal.
fn c_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Constant tables need at least one element in C++.
fn table(out: &mut String, ty: &str, name: &str, rows: &[String], filler: &str) {
    let rows = if rows.is_empty() { vec![filler.to_string()] } else { rows.to_vec() };
    let _ = writeln!(out, "static const {ty} {name}[] = {{\n  {}\n}};", rows.join(",\n  "));
}

fn header(source: &str, d: &Dispatcher, launch_decls: &[String]) -> Result<String, String> {
    let s = &d.schedule;
    let guard = format!("METAFORK_{}_DISPATCH_H", s.to_uppercase());
    let leaves = d.kernels.len().max(1);
    let mut out = String::new();
    let _ = writeln!(out, "// Generated by metafork from {source}: leaf selection for schedule `{s}`.");
    let _ = writeln!(out, "// Plain C++ (GCC or Clang); include <cuda_runtime.h> first to also declare the launch functions.");
    let _ = writeln!(out, "#ifndef {guard}\n#define {guard}\n");
    out.push_str(COMMON);
    let _ = writeln!(out, "\n/* The kernel leaves of `{s}`, by index (what select returns). */");
    let _ = writeln!(out, "#define METAFORK_{}_LEAVES {}", s.to_uppercase(), d.kernels.len());
    let names: Vec<String> = d.kernels.iter().map(|k| c_string(k)).collect();
    table(&mut out, "char *const", &format!("metafork_{s}_leaf_names"), &names, "\"\"");
    let _ = writeln!(out, "\n/* The program's integer parameters. */");
    let _ = writeln!(out, "typedef struct metafork_{s}_params {{\n{}}} metafork_{s}_params;", d.params.iter().map(|p| format!("  long long {p};\n")).collect::<String>());
    let _ = writeln!(out, "\n/* What the CUDA runtime reports of each compiled leaf; 0 where not known (then the tree's estimate counts). */");
    let _ = writeln!(out, "typedef struct metafork_{s}_compiled {{\n  long long registers[{leaves}];\n  long long max_threads[{leaves}];\n}} metafork_{s}_compiled;");

    // The rules as tables; variables: the parameters, then R, Z_B, T_B, R_B.
    let (mut terms, mut factors, mut constraints, mut rules) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (rule, fast) in d.rules.iter().zip(d.fast_rules()) {
        let first = constraints.len();
        for c in &fast.path {
            constraints.push(format!("{{{}, {}, {}}}", rel_code(c.rel), c.rel.modulus().unwrap_or(0), poly_ref(&c.poly, &mut terms, &mut factors)));
        }
        let threads = poly_ref(&fast.threads, &mut terms, &mut factors);
        let shared = poly_ref(&fast.shared_bytes, &mut terms, &mut factors);
        let (kernel, why) = match &rule.outcome {
            Outcome::Kernel { index, .. } => (*index as i64, "0".to_string()),
            Outcome::NoKernel { counter } => (-1, c_string(&format!("{} cannot be lowered far enough", counter.name()))),
        };
        rules.push(format!("{{{kernel}, {why}, {first}, {}, {}LL, {threads}, {shared}}} /* node {} */", fast.path.len(), rule.registers, rule.node));
    }
    let vars = d.table_vars();
    let _ = writeln!(out, "\n/* The tree's leaves in node order; variables by index: {}. */", vars.iter().enumerate().map(|(i, v)| format!("{i} {v}")).collect::<Vec<_>>().join(", "));
    table(&mut out, "metafork_factor", &format!("metafork_{s}_factors"), &factors, "{0, 0}");
    table(&mut out, "metafork_term", &format!("metafork_{s}_terms"), &terms, "{0LL, 0, 0}");
    table(&mut out, "metafork_constraint", &format!("metafork_{s}_constraints"), &constraints, "{1, 0, {0, 0}}");
    table(&mut out, "metafork_rule", &format!("metafork_{s}_rules"), &rules, "{-1, 0, 0, 0, 0LL, {0, 0}, {0, 0}}");
    let tables = format!("metafork_{s}_rules, {}, metafork_{s}_constraints, metafork_{s}_terms, metafork_{s}_factors", d.rules.len());

    // Selection: facts first, then the rules.
    let _ = writeln!(out, "\n/* The first kernel leaf that admits the point (an index), or a negative METAFORK_* status;");
    let _ = writeln!(out, "   `compiled` may be NULL; `detail`, when not NULL, receives the failing fact or the counter at fault. */");
    let _ = writeln!(out, "static inline int metafork_{s}_select(const metafork_device *dev, const metafork_{s}_compiled *compiled, const metafork_{s}_params *p, const char **detail) {{");
    let _ = writeln!(out, "  if (detail) *detail = \"\";");
    let _ = writeln!(out, "  if (!metafork_device_valid(dev)) return METAFORK_BAD_DEVICE;");
    for p in &d.params {
        let _ = writeln!(out, "  const long long {p} = p->{p};");
    }
    for f in &d.facts.facts {
        let status = match f.kind {
            FactKind::Assert => "METAFORK_ASSERT_FAILED",
            FactKind::Assume => "METAFORK_OUTSIDE_ASSUMPTIONS",
        };
        let _ = writeln!(out, "  {{ /* {} */\n    int ok = 1;\n    const long long v = {};\n    if (!ok || v == 0) {{ if (detail) *detail = {}; return {status}; }}\n  }}", f.text.replace("*/", "* /"), d.facts.cpp(f, "ok"), c_string(&f.text));
    }
    let mut vals: Vec<String> = d.params.clone();
    vals.extend(["dev->registers_per_thread", "dev->shared_memory_per_block_optin", "dev->threads_per_block", "dev->registers_per_block", "dev->registers_per_multiprocessor", "dev->warps_per_multiprocessor", "dev->multiprocessors"].map(String::from));
    let _ = writeln!(out, "  const long long vals[] = {{{}}};", vals.join(", "));
    let _ = writeln!(out, "  return metafork_select_rules({tables}, vals, {}, compiled ? compiled->registers : 0, compiled ? compiled->max_threads : 0, detail);", d.params.len());
    let _ = writeln!(out, "}}\n");
    let _ = writeln!(out, "/* Dynamic shared memory (bytes) kernel leaf `leaf` needs at `p`; -1 on overflow or a bad index. */");
    let _ = writeln!(out, "static inline long long metafork_{s}_shared_bytes(int leaf, const metafork_{s}_params *p) {{");
    let zeros = vec!["0"; 7].join(", ");
    let _ = writeln!(out, "  const long long vals[] = {{{}{}{zeros}}};", d.params.iter().map(|x| format!("p->{x}")).collect::<Vec<_>>().join(", "), if d.params.is_empty() { "" } else { ", " });
    let _ = writeln!(out, "  return metafork_leaf_shared_bytes(metafork_{s}_rules, {}, metafork_{s}_terms, metafork_{s}_factors, leaf, vals);", d.rules.len());
    let _ = writeln!(out, "}}\n");
    let _ = writeln!(out, "#if defined(__CUDACC__) || defined(CUDART_VERSION)");
    let _ = writeln!(out, "/* Fill `dev` and `compiled` for the current device (see {s}_dispatch.cu). */");
    let _ = writeln!(out, "extern \"C\" cudaError_t metafork_{s}_query(metafork_device *dev, metafork_{s}_compiled *compiled);");
    let _ = writeln!(out, "/* Select and launch on the current device: returns the leaf launched, or a negative METAFORK_* status");
    let _ = writeln!(out, "   (METAFORK_CUDA_ERROR with *cuda_error set); nothing is launched unless a leaf admits the point. */");
    let _ = writeln!(out, "extern \"C\" int metafork_{s}_launch({}, cudaStream_t stream, cudaError_t *cuda_error, const char **detail);", launch_decls.join(", "));
    let _ = writeln!(out, "#endif\n\n#endif /* {guard} */");
    Ok(out)
}

fn launcher(source: &str, function: &KernelFunction, kernel: &Kernel, d: &Dispatcher) -> String {
    let s = &d.schedule;
    let params = launch_params(function, kernel);
    let decls: Vec<&str> = params.iter().map(|(decl, _)| decl.as_str()).collect();
    let names: Vec<&str> = params.iter().map(|(_, n)| n.as_str()).collect();
    let mut out = String::new();
    let _ = writeln!(out, "// Generated by metafork from {source}: run-time dispatch for schedule `{s}`.");
    let _ = writeln!(out, "// Link with the leaf kernels' files ({}).", d.kernels.iter().map(|k| format!("{k}.cu")).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "#include <cuda_runtime.h>\n#include <mutex>\n#include \"{s}_dispatch.h\"\n");
    for k in &d.kernels {
        let _ = writeln!(out, "extern \"C\" cudaError_t {}({}, cudaStream_t stream);", launch_name_of(k), decls.join(", "));
        let _ = writeln!(out, "extern \"C\" cudaError_t {}(cudaFuncAttributes *attributes);", attributes_name(k));
        let _ = writeln!(out, "extern \"C\" cudaError_t {}(size_t bytes);", allow_shared_name(k));
    }
    let list = |f: &dyn Fn(&str) -> String| if d.kernels.is_empty() { "0".to_string() } else { d.kernels.iter().map(|k| f(k)).collect::<Vec<_>>().join(", ") };
    let _ = writeln!(out, "\ntypedef cudaError_t (*metafork_{s}_launch_fn)({}, cudaStream_t);", decls.join(", "));
    let _ = writeln!(out, "static const metafork_{s}_launch_fn metafork_{s}_launchers[] = {{{}}};", list(&|k| launch_name_of(k)));
    let _ = writeln!(out, "static cudaError_t (*const metafork_{s}_attributes[])(cudaFuncAttributes *) = {{{}}};", list(&|k| attributes_name(k)));
    let _ = writeln!(out, "static cudaError_t (*const metafork_{s}_allow_shared[])(size_t) = {{{}}};\n", list(&|k| allow_shared_name(k)));
    let _ = writeln!(out, "extern \"C\" cudaError_t metafork_{s}_query(metafork_device *dev, metafork_{s}_compiled *compiled) {{");
    let _ = writeln!(out, "  cudaError_t e = metafork_query_device(dev);\n  if (e != cudaSuccess) return e;");
    let _ = writeln!(out, "  for (int i = 0; i < METAFORK_{}_LEAVES; i++) {{", s.to_uppercase());
    let _ = writeln!(out, "    cudaFuncAttributes a;\n    if ((e = metafork_{s}_attributes[i](&a)) != cudaSuccess) return e;");
    let _ = writeln!(out, "    compiled->registers[i] = a.numRegs;\n    compiled->max_threads[i] = a.maxThreadsPerBlock;\n  }}\n  return cudaSuccess;\n}}\n");
    let _ = writeln!(out, "extern \"C\" int metafork_{s}_launch({}, cudaStream_t stream, cudaError_t *cuda_error, const char **detail) {{", decls.join(", "));
    let _ = writeln!(out, "  // The device's properties and the leaves' attributes, queried once per device.");
    let _ = writeln!(out, "  static std::mutex lock;\n  static int cached = -1;\n  static metafork_device cached_dev;\n  static metafork_{s}_compiled cached_compiled;");
    let _ = writeln!(out, "  cudaError_t ignored;\n  if (!cuda_error) cuda_error = &ignored;\n  *cuda_error = cudaSuccess;\n  if (detail) *detail = \"\";");
    let _ = writeln!(out, "  int device = 0;\n  if ((*cuda_error = cudaGetDevice(&device)) != cudaSuccess) return METAFORK_CUDA_ERROR;");
    let _ = writeln!(out, "  metafork_device dev;\n  metafork_{s}_compiled compiled;\n  {{\n    std::lock_guard<std::mutex> guard(lock);");
    let _ = writeln!(out, "    if (cached != device) {{\n      if ((*cuda_error = metafork_{s}_query(&cached_dev, &cached_compiled)) != cudaSuccess) return METAFORK_CUDA_ERROR;\n      cached = device;\n    }}");
    let _ = writeln!(out, "    dev = cached_dev;\n    compiled = cached_compiled;\n  }}");
    let _ = writeln!(out, "  metafork_{s}_params p = {{{}}};", d.params.iter().map(|x| format!("(long long){x}")).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "  int leaf = metafork_{s}_select(&dev, &compiled, &p, detail);\n  if (leaf < 0) return leaf;");
    let _ = writeln!(out, "  long long shared = metafork_{s}_shared_bytes(leaf, &p);\n  if (shared < 0) return METAFORK_OVERFLOW;");
    let _ = writeln!(out, "  if (shared > dev.shared_memory_per_block && (*cuda_error = metafork_{s}_allow_shared[leaf]((size_t)shared)) != cudaSuccess) return METAFORK_CUDA_ERROR;");
    let _ = writeln!(out, "  if ((*cuda_error = metafork_{s}_launchers[leaf]({}{}stream)) != cudaSuccess) return METAFORK_CUDA_ERROR;", names.join(", "), if names.is_empty() { "" } else { ", " });
    let _ = writeln!(out, "  return leaf;\n}}");
    out
}
