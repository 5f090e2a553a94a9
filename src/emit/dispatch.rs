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
use crate::names::{c_comment, c_ident, c_string};
use constraints::Rel;
use std::fmt::Write;

/// What the header defines once, whichever schedules' headers a program includes.
pub const COMMON: &str = include_str!("dispatch_common.h");

/// The dispatch header and source for one schedule, as (file name, text) pairs.
pub fn emit(source: &str, function: &KernelFunction, kernel: &Kernel, d: &Dispatcher) -> Result<Vec<(String, String)>, String> {
    emit_with_wisdom(source, function, kernel, d, &[])
}

/// A tuning harness's `wisdom.yaml`: the fastest configuration it measured on one device at
/// one set of data sizes. Untrusted: every field is checked against the program and its tree
/// before it reaches generated code ([`Wisdom::check`]), and text fields are written only
/// escaped. A file may hold several (YAML documents separated by `---` lines).
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Wisdom {
    pub schedule: String,
    pub device: String,
    /// The data sizes it was measured at.
    #[serde(default, deserialize_with = "constraints::input::unique_keys")]
    pub sizes: std::collections::BTreeMap<String, i64>,
    pub best: Option<WisdomChoice>,
    /// What the harness also records (how it measured, each leaf's fastest): read so that a
    /// misspelt key is refused rather than ignored, and otherwise unused.
    #[serde(default)]
    #[allow(dead_code)]
    repetitions: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    warmups: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    measured: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    leaves: Vec<WisdomChoice>,
    /// Where it came from, its text and its first line there, for messages that name the line
    /// at fault.
    #[serde(skip)]
    origin: String,
    #[serde(skip)]
    text: String,
    #[serde(skip)]
    first_line: usize,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WisdomChoice {
    pub leaf: String,
    #[serde(deserialize_with = "constraints::input::unique_keys")]
    pub parameters: std::collections::BTreeMap<String, i64>,
    /// The harness's measurement (checked to be a time) and the model's rank of this choice
    /// (unused here).
    #[serde(default)]
    median_ms: Option<f64>,
    #[serde(default)]
    #[allow(dead_code)]
    model_rank: Option<u64>,
}

impl Wisdom {
    /// Parse a wisdom file's text (`origin` names it in messages): one wisdom per YAML document.
    pub fn parse(text: &str, origin: &str) -> Result<Vec<Wisdom>, String> {
        let text = constraints::input::without_bom(text);
        constraints::input::check_yaml_nesting(text).map_err(|(line, e)| format!("{origin}:{line}: {e}"))?;
        let mut found = Vec::new();
        let mut document = String::new();
        let mut first_line = 1;
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let separator = line.trim_end() == "---";
            if !separator {
                document.push_str(line);
                document.push('\n');
            }
            if separator || i + 1 == lines.len() {
                if document.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')) {
                    let at = |e: &serde_yaml::Error, document: &str| match constraints::input::yaml_error(e, document, first_line) {
                        (Some((line, column)), message) => format!("{origin}:{line}:{column}: not a wisdom document: {message}"),
                        (None, message) => format!("{origin}:{first_line}: not a wisdom document: {message}"),
                    };
                    let mut w: Wisdom = serde_yaml::from_str(&document).map_err(|e| at(&e, &document))?;
                    w.origin = origin.to_string();
                    w.text = std::mem::take(&mut document);
                    w.first_line = first_line;
                    found.push(w);
                }
                document.clear();
                first_line = i + 2;
            }
        }
        if found.is_empty() {
            return Err(format!("{origin}: holds no wisdom (expected `schedule:`, `device:`, `sizes:` and `best:`)"));
        }
        Ok(found)
    }

    /// `origin:LINE: message`, the line being that of the key at `path` (`["best", "parameters",
    /// "B"]`), or of the deepest key of it found ([`constraints::input::yaml_key_line`]).
    fn at(&self, path: &[&str], message: String) -> String {
        format!("{}:{}: {message}", self.origin, self.first_line + constraints::input::yaml_key_line(&self.text, path))
    }

    /// Check the wisdom against the schedule it is for: its leaf is a kernel leaf of the tree,
    /// it sets every program parameter and nothing else, to values a C `int` holds, its sizes
    /// give every data parameter and nothing else, and the program's facts hold at them.
    pub fn check(&self, function: &KernelFunction, d: &Dispatcher) -> Result<(), String> {
        let best = self.best_choice(&d.schedule)?;
        if !d.kernels.contains(&best.leaf) {
            return Err(self.at(&["best", "leaf"], format!("leaf `{}` is not a kernel leaf of schedule `{}` (its leaves: {})", best.leaf.escape_debug(), d.schedule, d.kernels.join(", "))));
        }
        self.check_values(function, &d.schedule, &d.facts)?;
        // The leaf must be one these values can select: where a constraint naming only
        // parameters and sizes (`s % 4 != 0`) fails on every path to it, another leaf runs
        // while the dispatcher's message names this one.
        let point: std::collections::BTreeMap<constraints::Var, constraints::Rational> = best.parameters.iter().chain(&self.sizes).map(|(k, v)| (constraints::Var::new(k), constraints::Rational::from_integer((*v).into()))).collect();
        let paths: Vec<&crate::dispatch::Rule> = d.rules.iter().filter(|r| matches!(&r.outcome, crate::dispatch::Outcome::Kernel { name, .. } if *name == best.leaf)).collect();
        let failing: Vec<constraints::Constraint> = paths.iter().filter_map(|r| r.path.iter().find(|c| c.holds_at(&point) == Ok(false)).cloned()).collect();
        if !paths.is_empty() && failing.len() == paths.len() {
            return Err(self.at(&["best", "leaf"], format!("leaf `{}` is never selected at these parameters and sizes: its constraint `{}` does not hold there (a harness names the leaf its configuration runs)", best.leaf.escape_debug(), failing[0])));
        }
        Ok(())
    }

    fn best_choice(&self, schedule: &str) -> Result<&WisdomChoice, String> {
        self.best.as_ref().ok_or_else(|| self.at(&["best"], format!("the wisdom for `{schedule}` has no `best` configuration (no candidate matched)")))
    }

    /// All of [`Wisdom::check`] that needs no tree: the device's name, the parameters and sizes
    /// it sets, and the program's facts at them.
    fn check_values(&self, function: &KernelFunction, schedule: &str, facts: &crate::dispatch::facts::FactSet) -> Result<(), String> {
        let best = self.best_choice(schedule)?;
        // `cudaDeviceProp::name` is `char[256]` with its terminating NUL: 255 bytes at most.
        if self.device.trim().is_empty() || self.device.len() > 255 {
            return Err(self.at(&["device"], format!("the device name must be 1 to 255 bytes of UTF-8 (the CUDA runtime's `cudaDeviceProp::name` is `char[256]`); this one has {} bytes", self.device.len())));
        }
        // `cudaDeviceProp::name` is a C string: a NUL would end it early, and no device name
        // holds a control character.
        if self.device.chars().any(char::is_control) {
            return Err(self.at(&["device"], format!("the device name `{}` holds a control character; a device's name (`cudaDeviceProp::name`) never does", self.device.escape_debug())));
        }
        if let Some(ms) = best.median_ms.filter(|ms| !(ms.is_finite() && *ms > 0.0)) {
            return Err(self.at(&["best", "median_ms"], format!("`median_ms: {ms}` is not a time (a positive number of milliseconds)")));
        }
        let program = function.program_parameters();
        let data = function.data_parameters();
        for (name, value) in &best.parameters {
            if !program.contains(name) {
                return Err(self.at(&["best", "parameters", name], format!("the wisdom for `{schedule}` sets `{}`, which is not a program parameter (those: {})", name.escape_debug(), program.join(", "))));
            }
            if i32::try_from(*value).is_err() {
                return Err(self.at(&["best", "parameters", name], format!("`{name}` = {value} does not fit a C `int`")));
            }
        }
        for (name, value) in &self.sizes {
            if !data.contains(name) {
                return Err(self.at(&["sizes", name], format!("the wisdom's sizes name `{}`, which is not a data parameter (those: {})", name.escape_debug(), data.join(", "))));
            }
            if i32::try_from(*value).is_err() || *value < 1 {
                return Err(self.at(&["sizes", name], format!("size `{name}` = {value} is not a positive C `int`")));
            }
        }
        // An entry without every data size would match any size as "measured here", one
        // without every program parameter would leave the caller's values and call them tuned.
        if let Some(missing) = data.iter().find(|p| !self.sizes.contains_key(*p)) {
            return Err(self.at(&["sizes"], format!("the wisdom's sizes do not give `{missing}` (a wisdom gives every data parameter: {})", data.join(", "))));
        }
        if let Some(missing) = program.iter().find(|p| !best.parameters.contains_key(*p)) {
            return Err(self.at(&["best", "parameters"], format!("the wisdom for `{schedule}` does not set `{missing}` (a wisdom sets every program parameter: {})", program.join(", "))));
        }
        let point: std::collections::BTreeMap<String, i64> = best.parameters.iter().chain(&self.sizes).map(|(k, v)| (k.clone(), *v)).collect();
        if let Some(f) = facts.first_failing_where_known(&point) {
            return Err(self.at(&["best", "parameters"], format!("its configuration violates the program's fact `{}`", f.text)));
        }
        Ok(())
    }

    /// Where it came from, as `origin:line`.
    pub fn place(&self) -> String {
        format!("{}:{}", self.origin, self.first_line)
    }
}

/// The wisdom checked against the program alone, before any tree is built, so that a refusal
/// costs no build: each names a schedule of the program, sets values [`Wisdom::check`] accepts
/// (its leaf aside: that needs the tree), and no two are for one schedule, device and sizes.
/// [`emit_with_wisdom`] checks all of it again with the leaf, in the same order.
pub fn check_before_build(source: &str, program: &crate::frontend::CheckedProgram, wisdom: &[Wisdom]) -> Result<(), String> {
    for (i, w) in wisdom.iter().enumerate() {
        let Some(function) = program.kernels.iter().find(|f| f.schedules.iter().any(|s| s.name == w.schedule)) else {
            return Err(unknown_schedule(w, source));
        };
        w.check_values(function, &w.schedule, &crate::dispatch::facts::FactSet::of(function)?)?;
        if let Some(o) = wisdom[..i].iter().find(|o| o.schedule == w.schedule && o.device == w.device && o.sizes == w.sizes) {
            return Err(second_wisdom(w, o));
        }
    }
    Ok(())
}

/// The refusal of a wisdom for a schedule `source` does not have.
pub fn unknown_schedule(w: &Wisdom, source: &str) -> String {
    format!("{}: the wisdom is for schedule `{}`, which is not in {source}", w.place(), w.schedule.escape_debug())
}

fn second_wisdom(w: &Wisdom, first: &Wisdom) -> String {
    format!("{}: a second wisdom for `{}` on `{}` at the same sizes (the first: {})", w.place(), w.schedule.escape_debug(), w.device.escape_debug(), first.place())
}

/// As [`emit`]; with wisdom for this schedule (any number of devices and sizes), the header also
/// gets `metafork_<s>_wisdom(...)`, which sets the program parameters to those measured best on
/// the named device at the nearest size bucket that the point admits, and says when it falls
/// back; the `.cu` file gets `metafork_<s>_tuned(...)`, the same for the current device.
pub fn emit_with_wisdom(source: &str, function: &KernelFunction, kernel: &Kernel, d: &Dispatcher, wisdom: &[Wisdom]) -> Result<Vec<(String, String)>, String> {
    let s = &d.schedule;
    let decls: Vec<String> = launch_params(function, kernel).into_iter().map(|(decl, _)| decl).collect();
    let mut h = header(source, d, &decls)?;
    let mine: Vec<&Wisdom> = wisdom.iter().filter(|w| w.schedule == *s).collect();
    for (i, w) in mine.iter().enumerate() {
        w.check(function, d)?;
        if let Some(o) = mine[..i].iter().find(|o| o.device == w.device && o.sizes == w.sizes) {
            return Err(second_wisdom(w, o));
        }
    }
    let mut c = launcher(source, function, kernel, d);
    if !mine.is_empty() {
        let at = h.rfind("#if defined(__CUDACC__)").expect("the header declares the CUDA functions last");
        h.insert_str(at, &wisdom_table(d, &mine));
        let at = h.rfind("#endif\n\n#endif /*").expect("the header ends with its guard");
        h.insert_str(at, &format!("/* The wisdom for the current device (its name from the CUDA runtime): see metafork_{s}_wisdom. */\nextern \"C\" int metafork_{s}_tuned(metafork_{s}_params *metafork_p, const char **metafork_detail);\n"));
        c.push_str(&tuned_function(s));
    }
    Ok(vec![(format!("{s}_dispatch.h"), h), (format!("{s}_dispatch.cu"), c)])
}

/// The wisdom entries as a table and `metafork_<s>_wisdom`.
fn wisdom_table(d: &Dispatcher, mine: &[&Wisdom]) -> String {
    let s = &d.schedule;
    let n = d.params.len().max(1);
    let mut out = String::new();
    let _ = writeln!(out, "/* Tuning wisdom: program parameters measured best per device and data sizes (role 1: a measured size, 2: a tuned parameter). */");
    let _ = writeln!(out, "typedef struct metafork_{s}_wisdom_entry {{ const char *device; const char *leaf; long long values[{n}]; unsigned char role[{n}]; }} metafork_{s}_wisdom_entry;");
    let rows: Vec<String> = mine
        .iter()
        .map(|w| {
            let best = w.best.as_ref().expect("checked");
            let (mut values, mut roles) = (Vec::new(), Vec::new());
            for p in &d.params {
                let (v, r) = match (w.sizes.get(p), best.parameters.get(p)) {
                    (Some(v), _) => (*v, 1),
                    (None, Some(v)) => (*v, 2),
                    (None, None) => (0, 0),
                };
                values.push(format!("{v}LL"));
                roles.push(r.to_string());
            }
            if values.is_empty() {
                values.push("0LL".into());
                roles.push("0".into());
            }
            let sizes: Vec<String> = w.sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{{{}, {}, {{{}}}, {{{}}}}} /* wisdom entry: {} at {} */", c_string(&w.device), c_string(&best.leaf), values.join(", "), roles.join(", "), c_comment(&w.device), c_comment(&sizes.join(" ")))
        })
        .collect();
    let _ = writeln!(out, "static const metafork_{s}_wisdom_entry metafork_{s}_wisdom_entries[] = {{\n  {}\n}};", rows.join(",\n  "));
    let fields: Vec<String> = d.params.iter().map(|p| format!("&metafork_q.{}", c_ident(p))).collect();
    let _ = writeln!(out, "\n/* Set the program parameters in `p` (its data sizes already set) from the wisdom measured on the device named");
    let _ = writeln!(out, "   `device_name` (cudaDeviceProp::name): the entry whose sizes are in the same power-of-two buckets, else the");
    let _ = writeln!(out, "   nearest buckets, whose configuration select admits at `p` on `dev` (a configuration measured at n = 4096 may");
    let _ = writeln!(out, "   violate a fact at n = 4095). Returns METAFORK_WISDOM_EXACT, METAFORK_WISDOM_NEAREST (fell back to another size");
    let _ = writeln!(out, "   bucket) or METAFORK_WISDOM_NONE (p unchanged); `detail`, when not NULL, says which entry was used or why none. */");
    let _ = writeln!(out, "static inline int metafork_{s}_wisdom(const char *metafork_device_name, const metafork_device *metafork_dev, const metafork_{s}_compiled *metafork_compiled, metafork_{s}_params *metafork_p, const char **metafork_detail) {{");
    let _ = writeln!(out, "  static thread_local char metafork_message[512];
  const int metafork_count = (int)(sizeof metafork_{s}_wisdom_entries / sizeof metafork_{s}_wisdom_entries[0]);");
    let _ = writeln!(out, "  unsigned char metafork_tried[sizeof metafork_{s}_wisdom_entries / sizeof metafork_{s}_wisdom_entries[0]] = {{0}};");
    let _ = writeln!(out, "  int metafork_on_device = 0;
  const char *metafork_refused = 0;
  int metafork_refused_entry = -1;");
    let _ = writeln!(out, "  for (;;) {{");
    let _ = writeln!(out, "    metafork_{s}_params metafork_q = *metafork_p;
    long long *metafork_fields[] = {{{}}};", if fields.is_empty() { "0".into() } else { fields.join(", ") });
    let _ = writeln!(out, "    int metafork_pick = -1;
    long long metafork_distance = 0;");
    let _ = writeln!(out, "    for (int metafork_e = 0; metafork_e < metafork_count; metafork_e++) {{");
    let _ = writeln!(out, "      const metafork_{s}_wisdom_entry *metafork_w = &metafork_{s}_wisdom_entries[metafork_e];");
    let _ = writeln!(out, "      if (metafork_tried[metafork_e] || !metafork_device_name || strcmp(metafork_w->device, metafork_device_name) != 0) continue;");
    let _ = writeln!(out, "      long long metafork_d = 0;
      for (int metafork_k = 0; metafork_k < {}; metafork_k++)", d.params.len());
    let _ = writeln!(out, "        if (metafork_w->role[metafork_k] == 1) metafork_d += llabs((long long)metafork_bucket(*metafork_fields[metafork_k]) - metafork_bucket(metafork_w->values[metafork_k]));");
    let _ = writeln!(out, "      if (metafork_pick < 0 || metafork_d < metafork_distance) {{ metafork_pick = metafork_e; metafork_distance = metafork_d; }}
    }}");
    let _ = writeln!(out, "    if (metafork_pick < 0) break;
    metafork_tried[metafork_pick] = 1;
    metafork_on_device = 1;");
    let _ = writeln!(out, "    const metafork_{s}_wisdom_entry *metafork_w = &metafork_{s}_wisdom_entries[metafork_pick];");
    let _ = writeln!(out, "    for (int metafork_k = 0; metafork_k < {}; metafork_k++) if (metafork_w->role[metafork_k] == 2) *metafork_fields[metafork_k] = metafork_w->values[metafork_k];", d.params.len());
    let _ = writeln!(out, "    const char *metafork_why = \"\";
    int metafork_leaf = metafork_{s}_select(metafork_dev, metafork_compiled, &metafork_q, &metafork_why);");
    let _ = writeln!(out, "    if (metafork_leaf >= 0) {{");
    let _ = writeln!(out, "      *metafork_p = metafork_q;");
    let _ = writeln!(out, "      snprintf(metafork_message, sizeof metafork_message, \"wisdom entry %d (%s, leaf %s)%s\", metafork_pick + 1, metafork_w->device, metafork_w->leaf, metafork_distance == 0 ? \"\" : \": measured at other sizes (no admissible entry for these sizes' power-of-two buckets; the nearest used)\");");
    let _ = writeln!(out, "      if (metafork_detail) *metafork_detail = metafork_message;
      return metafork_distance == 0 ? METAFORK_WISDOM_EXACT : METAFORK_WISDOM_NEAREST;
    }}");
    let _ = writeln!(out, "    if (metafork_refused_entry < 0) {{ metafork_refused_entry = metafork_pick; metafork_refused = metafork_why && *metafork_why ? metafork_why : metafork_status_string(metafork_leaf); }}
  }}");
    let _ = writeln!(out, "  if (!metafork_on_device) snprintf(metafork_message, sizeof metafork_message, \"no wisdom for device `%s`; parameters unchanged\", metafork_device_name ? metafork_device_name : \"(none)\");");
    let _ = writeln!(out, "  else snprintf(metafork_message, sizeof metafork_message, \"no wisdom entry for `%s` is admissible at these sizes (entry %d: %s); parameters unchanged\", metafork_device_name, metafork_refused_entry + 1, metafork_refused);");
    let _ = writeln!(out, "  if (metafork_detail) *metafork_detail = metafork_message;
  return METAFORK_WISDOM_NONE;
}}
");
    out
}

/// `metafork_<s>_tuned`: the wisdom for the current device.
fn tuned_function(s: &str) -> String {
    format!(
        "\nextern \"C\" int metafork_{s}_tuned(metafork_{s}_params *metafork_p, const char **metafork_detail) {{\n  int metafork_id = 0;\n  cudaDeviceProp metafork_prop;\n  metafork_device metafork_dev;\n  metafork_{s}_compiled metafork_compiled;\n  if (cudaGetDevice(&metafork_id) != cudaSuccess || cudaGetDeviceProperties(&metafork_prop, metafork_id) != cudaSuccess || metafork_{s}_query(&metafork_dev, &metafork_compiled) != cudaSuccess) {{\n    if (metafork_detail) *metafork_detail = \"the CUDA runtime could not describe the current device\";\n    return METAFORK_WISDOM_NONE;\n  }}\n  return metafork_{s}_wisdom(metafork_prop.name, &metafork_dev, &metafork_compiled, metafork_p, metafork_detail);\n}}\n"
    )
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
    format!("{{{first}, {}, {}LL}}", p.terms.len(), p.divisor)
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

/// Constant tables need at least one element in C++.
fn table(out: &mut String, ty: &str, name: &str, rows: &[String], filler: &str) {
    let rows = if rows.is_empty() { vec![filler.to_string()] } else { rows.to_vec() };
    let _ = writeln!(out, "static const {ty} {name}[] = {{\n  {}\n}};", rows.join(",\n  "));
}

fn header(source: &str, d: &Dispatcher, launch_decls: &[String]) -> Result<String, String> {
    let s = &d.schedule;
    // Case kept: two schedules whose names differ in case get two guards.
    let guard = format!("METAFORK_DISPATCH_H_{s}");
    let leaves = d.kernels.len().max(1);
    let mut out = String::new();
    let _ = writeln!(out, "// Generated by metafork from {}: leaf selection for schedule `{s}`.", c_comment(source));
    let _ = writeln!(out, "// Plain C++ (GCC or Clang); include <cuda_runtime.h> first to also declare the launch functions.");
    let _ = writeln!(out, "#ifndef {guard}\n#define {guard}\n");
    out.push_str(COMMON);
    let _ = writeln!(out, "\n/* The kernel leaves of `{s}`, by index (what select returns). */");
    let _ = writeln!(out, "#define METAFORK_{s}_LEAVES {}", d.kernels.len());
    let names: Vec<String> = d.kernels.iter().map(|k| c_string(k)).collect();
    table(&mut out, "char *const", &format!("metafork_{s}_leaf_names"), &names, "\"\"");
    let _ = writeln!(out, "\n/* The program's integer parameters. */");
    let _ = writeln!(out, "typedef struct metafork_{s}_params {{\n{}}} metafork_{s}_params;", d.params.iter().map(|p| format!("  long long {};\n", c_ident(p))).collect::<String>());
    let _ = writeln!(out, "\n/* What the CUDA runtime reports of each compiled leaf; 0 where not known (then the tree's estimate counts). */");
    let _ = writeln!(out, "typedef struct metafork_{s}_compiled {{\n  long long registers[{leaves}];\n  long long max_threads[{leaves}];\n}} metafork_{s}_compiled;");

    // The rules as tables; variables: the parameters, then R, Z_B, T_B, R_B.
    let (mut terms, mut factors, mut constraints, mut rules) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (rule, fast) in d.rules.iter().zip(d.fast_rules()) {
        let first = constraints.len();
        for c in &fast.path {
            constraints.push(format!("{{{}, {}, {}, {}}}", rel_code(c.rel), c.rel.modulus().unwrap_or(0), poly_ref(&c.poly, &mut terms, &mut factors), u8::from(c.estimated)));
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
    table(&mut out, "metafork_constraint", &format!("metafork_{s}_constraints"), &constraints, "{1, 0, {0, 0, 1LL}, 0}");
    table(&mut out, "metafork_rule", &format!("metafork_{s}_rules"), &rules, "{-1, 0, 0, 0, 0LL, {0, 0, 1LL}, {0, 0, 1LL}}");
    let tables = format!("metafork_{s}_rules, {}, metafork_{s}_constraints, metafork_{s}_terms, metafork_{s}_factors", d.rules.len());

    // Selection: facts first, then the rules.
    let _ = writeln!(out, "\n/* The first kernel leaf that admits the point (an index), or a negative METAFORK_* status;");
    let _ = writeln!(out, "   `compiled` may be NULL; `detail`, when not NULL, receives the failing fact or the counter at fault. */");
    let _ = writeln!(out, "static inline int metafork_{s}_select(const metafork_device *metafork_dev, const metafork_{s}_compiled *metafork_compiled, const metafork_{s}_params *metafork_p, const char **metafork_detail) {{");
    let _ = writeln!(out, "  if (metafork_detail) *metafork_detail = \"\";");
    let _ = writeln!(out, "  if (!metafork_device_valid(metafork_dev)) return METAFORK_BAD_DEVICE;");
    for p in &d.params {
        let p = c_ident(p);
        let _ = writeln!(out, "  const long long {p} = metafork_p->{p};");
    }
    let check_fact = |out: &mut String, f: &crate::dispatch::facts::Fact| {
        let status = match f.kind {
            FactKind::Assert => "METAFORK_ASSERT_FAILED",
            FactKind::Assume | FactKind::Defined => "METAFORK_OUTSIDE_ASSUMPTIONS",
        };
        let _ = writeln!(out, "  {{ /* {} */\n    int metafork_ok = 1;\n    const long long metafork_v = {};\n    if (!metafork_ok || metafork_v == 0) {{ if (metafork_detail) *metafork_detail = {}; return {status}; }}\n  }}", c_comment(&f.text), d.facts.cpp(f, "metafork_ok"), c_string(&f.text));
    };
    d.facts.facts.iter().filter(|f| !f.kernel_range).for_each(|f| check_fact(&mut out, f));
    // The scalars the launch computes, each step in its C type.
    for sc in &d.scalars {
        let _ = writeln!(out, "  {{ /* {} */\n    int metafork_ok = 1;\n    const long long metafork_v = {};\n    (void)metafork_v;\n    if (!metafork_ok) {{ if (metafork_detail) *metafork_detail = {}; return METAFORK_OUTSIDE_ASSUMPTIONS; }}\n  }}", c_comment(&sc.text), d.facts.cpp_of(&sc.checked, "metafork_ok"), c_string(&sc.text));
    }
    // The schedule's grid as written, where the launch could not compute it: the program's
    // arithmetic undefined (a leaf's own grid only passes that leaf over, below).
    for g in d.written_grid.iter().flatten() {
        let why = crate::dispatch::grid_undefined(&g.expr, &d.schedule);
        let _ = writeln!(out, "  {{ /* {} */\n    int metafork_ok = 1;\n    (void){};\n    if (!metafork_ok) {{ if (metafork_detail) *metafork_detail = {}; return METAFORK_OUTSIDE_ASSUMPTIONS; }}\n  }}", c_comment(&why), d.facts.cpp_of(&g.checked, "metafork_ok"), c_string(&why));
    }
    // Then the kernels' range facts (`frontend::ranges`).
    d.facts.facts.iter().filter(|f| f.kernel_range).for_each(|f| check_fact(&mut out, f));
    let mut vals: Vec<String> = d.params.iter().map(|p| c_ident(p).into_owned()).collect();
    vals.extend(["registers_per_thread", "shared_memory_per_block_optin", "threads_per_block", "registers_per_block", "registers_per_multiprocessor", "warps_per_multiprocessor", "multiprocessors"].map(|f| format!("metafork_dev->{f}")));
    let _ = writeln!(out, "  const long long metafork_vals[] = {{{}}};", vals.join(", "));
    // Each kernel's grid against the device's, where the extents are integer arithmetic on the
    // parameters (the launch function checks the others).
    let grid = if d.grids.iter().flatten().any(Option::is_some) {
        let _ = writeln!(out, "  const char *metafork_grid[{}] = {{0}};", d.kernels.len());
        for (k, extents) in d.grids.iter().enumerate() {
            for (dim, g) in extents.iter().enumerate() {
                let Some(g) = g else { continue };
                let _ = writeln!(out, "  if (!metafork_grid[{k}]) {{ /* {}: {} */
    int metafork_ok = 1;
    const long long metafork_g = {};
    metafork_grid[{k}] = metafork_grid_refusal(metafork_dev, {dim}, metafork_g, metafork_ok);
  }}", c_comment(&d.kernels[k]), c_comment(&g.expr.to_string()), d.facts.cpp_of(&g.checked, "metafork_ok"));
            }
        }
        "metafork_grid"
    } else {
        "0"
    };
    let _ = writeln!(out, "  return metafork_select_from_table({tables}, metafork_vals, {}, metafork_compiled ? metafork_compiled->registers : 0, metafork_compiled ? metafork_compiled->max_threads : 0, {grid}, metafork_detail);", d.params.len());
    let _ = writeln!(out, "}}\n");
    let _ = writeln!(out, "/* Dynamic shared memory (bytes) kernel leaf `leaf` needs at `p`; -1 on overflow or a bad index. */");
    let _ = writeln!(out, "static inline long long metafork_{s}_shared_bytes(int metafork_leaf, const metafork_{s}_params *metafork_p) {{");
    let zeros = vec!["0"; 7].join(", ");
    let _ = writeln!(out, "  const long long metafork_vals[] = {{{}{}{zeros}}};", d.params.iter().map(|x| format!("metafork_p->{}", c_ident(x))).collect::<Vec<_>>().join(", "), if d.params.is_empty() { "" } else { ", " });
    let _ = writeln!(out, "  return metafork_shared_bytes_of_leaf(metafork_{s}_rules, {}, metafork_{s}_terms, metafork_{s}_factors, metafork_leaf, metafork_vals);", d.rules.len());
    let _ = writeln!(out, "}}\n");
    let _ = writeln!(out, "#if defined(__CUDACC__) || defined(CUDART_VERSION)");
    let _ = writeln!(out, "/* Fill `dev` and `compiled` for the current device (see {s}_dispatch.cu). */");
    let _ = writeln!(out, "extern \"C\" cudaError_t metafork_{s}_query(metafork_device *metafork_dev, metafork_{s}_compiled *metafork_compiled);");
    let _ = writeln!(out, "/* Select and launch on the current device: returns the leaf launched, or a negative METAFORK_* status");
    let _ = writeln!(out, "   (METAFORK_CUDA_ERROR with *cuda_error set); nothing is launched unless a leaf admits the point. */");
    let _ = writeln!(out, "extern \"C\" int metafork_{s}_launch({}{}cudaStream_t metafork_stream, cudaError_t *metafork_cuda_error, const char **metafork_detail);", launch_decls.join(", "), if launch_decls.is_empty() { "" } else { ", " });
    let _ = writeln!(out, "#endif\n\n#endif /* {guard} */");
    Ok(out)
}

/// A parameter list: `items` then `tail`, comma-separated (either may be empty).
fn joined(items: &[&str], tail: &str) -> String {
    items.iter().copied().chain((!tail.is_empty()).then_some(tail)).collect::<Vec<_>>().join(", ")
}

fn launcher(source: &str, function: &KernelFunction, kernel: &Kernel, d: &Dispatcher) -> String {
    let s = &d.schedule;
    let params = launch_params(function, kernel);
    let decls: Vec<&str> = params.iter().map(|(decl, _)| decl.as_str()).collect();
    let names: Vec<&str> = params.iter().map(|(_, n)| n.as_str()).collect();
    let mut out = String::new();
    let _ = writeln!(out, "// Generated by metafork from {}: run-time dispatch for schedule `{s}`.", c_comment(source));
    let _ = writeln!(out, "// Link with the leaf kernels' files ({}).", d.kernels.iter().map(|k| format!("{k}.cu")).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "#include <cuda_runtime.h>\n#include <mutex>\n#include \"{s}_dispatch.h\"\n");
    for k in &d.kernels {
        let _ = writeln!(out, "extern \"C\" cudaError_t {}({});", launch_name_of(k), joined(&decls, "cudaStream_t metafork_stream"));
        let _ = writeln!(out, "extern \"C\" cudaError_t {}(cudaFuncAttributes *metafork_attributes);", attributes_name(k));
        let _ = writeln!(out, "extern \"C\" cudaError_t {}(size_t metafork_bytes);", allow_shared_name(k));
    }
    let list = |f: &dyn Fn(&str) -> String| if d.kernels.is_empty() { "0".to_string() } else { d.kernels.iter().map(|k| f(k)).collect::<Vec<_>>().join(", ") };
    let _ = writeln!(out, "\ntypedef cudaError_t (*metafork_{s}_launch_fn)({});", joined(&decls, "cudaStream_t"));
    let _ = writeln!(out, "static const metafork_{s}_launch_fn metafork_{s}_launchers[] = {{{}}};", list(&|k| launch_name_of(k)));
    let _ = writeln!(out, "static cudaError_t (*const metafork_{s}_attributes[])(cudaFuncAttributes *) = {{{}}};", list(&|k| attributes_name(k)));
    let _ = writeln!(out, "static cudaError_t (*const metafork_{s}_allow_shared[])(size_t) = {{{}}};\n", list(&|k| allow_shared_name(k)));
    let _ = writeln!(out, "extern \"C\" cudaError_t metafork_{s}_query(metafork_device *metafork_dev, metafork_{s}_compiled *metafork_compiled) {{");
    let _ = writeln!(out, "  cudaError_t metafork_e = metafork_query_device(metafork_dev);\n  if (metafork_e != cudaSuccess) return metafork_e;");
    let _ = writeln!(out, "  for (int metafork_i = 0; metafork_i < METAFORK_{s}_LEAVES; metafork_i++) {{");
    let _ = writeln!(out, "    cudaFuncAttributes metafork_a;\n    if ((metafork_e = metafork_{s}_attributes[metafork_i](&metafork_a)) != cudaSuccess) return metafork_e;");
    let _ = writeln!(out, "    metafork_compiled->registers[metafork_i] = metafork_a.numRegs;\n    metafork_compiled->max_threads[metafork_i] = metafork_a.maxThreadsPerBlock;\n  }}\n  return cudaSuccess;\n}}\n");
    let _ = writeln!(out, "extern \"C\" int metafork_{s}_launch({}) {{", joined(&decls, "cudaStream_t metafork_stream, cudaError_t *metafork_cuda_error, const char **metafork_detail"));
    let _ = writeln!(out, "  // The device's properties and the leaves' attributes, queried once per device.");
    let _ = writeln!(out, "  static std::mutex metafork_lock;\n  static int metafork_cached = -1;\n  static metafork_device metafork_cached_dev;\n  static metafork_{s}_compiled metafork_cached_compiled;");
    let _ = writeln!(out, "  cudaError_t metafork_ignored;\n  if (!metafork_cuda_error) metafork_cuda_error = &metafork_ignored;\n  *metafork_cuda_error = cudaSuccess;\n  if (metafork_detail) *metafork_detail = \"\";");
    let _ = writeln!(out, "  int metafork_device_id = 0;\n  if ((*metafork_cuda_error = cudaGetDevice(&metafork_device_id)) != cudaSuccess) return METAFORK_CUDA_ERROR;");
    let _ = writeln!(out, "  metafork_device metafork_dev;\n  metafork_{s}_compiled metafork_compiled;\n  {{\n    std::lock_guard<std::mutex> metafork_guard(metafork_lock);");
    let _ = writeln!(out, "    if (metafork_cached != metafork_device_id) {{\n      if ((*metafork_cuda_error = metafork_{s}_query(&metafork_cached_dev, &metafork_cached_compiled)) != cudaSuccess) return METAFORK_CUDA_ERROR;\n      metafork_cached = metafork_device_id;\n    }}");
    let _ = writeln!(out, "    metafork_dev = metafork_cached_dev;\n    metafork_compiled = metafork_cached_compiled;\n  }}");
    let _ = writeln!(out, "  metafork_{s}_params metafork_p = {{{}}};", d.params.iter().map(|x| format!("(long long){}", c_ident(x))).collect::<Vec<_>>().join(", "));
    let _ = writeln!(out, "  int metafork_leaf = metafork_{s}_select(&metafork_dev, &metafork_compiled, &metafork_p, metafork_detail);\n  if (metafork_leaf < 0) return metafork_leaf;");
    let _ = writeln!(out, "  long long metafork_shared = metafork_{s}_shared_bytes(metafork_leaf, &metafork_p);\n  if (metafork_shared < 0) return METAFORK_OVERFLOW;");
    let _ = writeln!(out, "  if (metafork_shared > metafork_dev.shared_memory_per_block && (*metafork_cuda_error = metafork_{s}_allow_shared[metafork_leaf]((size_t)metafork_shared)) != cudaSuccess) return METAFORK_CUDA_ERROR;");
    let _ = writeln!(out, "  if ((*metafork_cuda_error = metafork_{s}_launchers[metafork_leaf]({})) != cudaSuccess) return METAFORK_CUDA_ERROR;", joined(&names, "metafork_stream"));
    let _ = writeln!(out, "  return metafork_leaf;\n}}");
    out
}
