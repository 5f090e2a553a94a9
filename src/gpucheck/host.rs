//! gpu-check's correctness program for one function (`check.cu`).
//!
//! Contract: the program holds the function twice as host C++ printed from its own statements
//! (the body as written): `metafork_serial`, every `meta_for` a sequential loop (the serial
//! program, the reference), and per schedule `metafork_with_s<k>`, the same body with schedule
//! `k` launched through one of its kernels' launch wrappers (every array copied to the device
//! before the launch and back after it; the other schedules stay serial). For each case (a
//! kernel and a parameter point) `main` fills the arrays from a seeded generator (floats in
//! [-1, 1), integers in [-100, 100]), runs both, and compares every array element by element:
//! integers exactly, floating point within `|got - expected| <= RTOL * max(1, |expected|)`
//! (RTOL 1e-5 for `float`, 1e-12 for `double`; built with `-fmad=false` on the device and
//! without contraction on the host, the arithmetic agrees to the bit), equal values (infinities
//! included) always agreeing. Only the math library's functions (`exp`, `log`, `pow` and their
//! `f` forms) may differ, by the ulps [`MATH_ULPS`] gives, and a program can amplify that (a
//! recursive filter does): when the function calls one, the serial program runs three more
//! times with every such call's result moved by that many ulps (all up, all down, each call's
//! direction drawn at random), and an element's tolerance grows by twice the largest distance of
//! those runs from the reference. A floating array a reduction adds to (atomically, in any
//! order) gets `2 γ(k+1) Σ|x|` more per element, from two more serial runs that add the terms'
//! magnitudes and count them (`METAFORK_REDUCE`). It prints one tab-separated line per case, flushed as it goes
//! (`CASE program schedule kernel size point verdict max-error`), and exits 1 when a case failed.
//! `--small` runs only the small cases (for compute-sanitizer).

use super::points::Point;
use crate::emit::cuda::{launch_name_of, launch_params, allow_shared_name, HostExprs};
use crate::emit::host::HostPrinter;
use crate::frontend::ast::{walk_expr, Expr, ExprKind, ScalarType, Stmt, StmtKind};
use crate::frontend::model::{KernelFunction, Role};
use crate::kernel::Kernel;
use crate::names::{c_comment, c_ident, c_string};
use std::fmt::Write;

/// The math functions whose host and device results may differ, with the ulps a result is moved
/// by in the sensitivity runs: CUDA's maximum error (CUDA C++ Programming Guide, "Mathematical
/// Functions": expf 2, logf 1, powf 4, exp 1, log 1, pow 2) plus one for the host's library
/// (glibc's are within one ulp). `sqrt` and `sqrtf` are correctly rounded on both sides.
pub const MATH_ULPS: &[(&str, u32)] = &[("expf", 3), ("logf", 2), ("powf", 5), ("exp", 2), ("log", 2), ("pow", 3)];

/// Whether `body` calls a function of [`MATH_ULPS`].
fn calls_inexact_math(body: &[Stmt]) -> bool {
    fn expr(x: &Expr) -> bool {
        let mut found = false;
        walk_expr(x, &mut |e| {
            if let ExprKind::Call(f, _) = &e.kind {
                found |= MATH_ULPS.iter().any(|(name, _)| *name == f.name);
            }
        });
        found
    }
    body.iter().any(|s| match &s.kind {
        StmtKind::Decl { vars, .. } => vars.iter().any(|d| expr(&d.init)),
        StmtKind::Assign { target, value, .. } => expr(target) || expr(value),
        StmtKind::If { cond, then_branch, else_branch } => {
            expr(cond) || calls_inexact_math(std::slice::from_ref(then_branch)) || else_branch.as_ref().is_some_and(|e| calls_inexact_math(std::slice::from_ref(e)))
        }
        StmtKind::Block(b) => calls_inexact_math(b),
        StmtKind::For(l) | StmtKind::MetaFor(l) => expr(&l.lo) || expr(&l.hi) || calls_inexact_math(std::slice::from_ref(&l.body)),
        StmtKind::MetaSchedule { body, .. } => calls_inexact_math(std::slice::from_ref(body)),
        StmtKind::Assume(_) | StmtKind::Assert(_) | StmtKind::Empty | StmtKind::Barrier => false,
    })
}

/// The indices of the arrays some reduction of `function` adds to.
fn reduced_arrays(function: &KernelFunction) -> Vec<usize> {
    fn walk(body: &[Stmt], out: &mut std::collections::BTreeSet<String>) {
        for s in body {
            match &s.kind {
                StmtKind::Assign { target: Expr { kind: ExprKind::Index { array, .. }, .. }, op: crate::frontend::ast::AssignOp::AtomicAdd, .. } => {
                    out.insert(array.name.clone());
                }
                StmtKind::If { then_branch, else_branch, .. } => {
                    walk(std::slice::from_ref(then_branch), out);
                    if let Some(e) = else_branch {
                        walk(std::slice::from_ref(e), out);
                    }
                }
                StmtKind::Block(b) => walk(b, out),
                StmtKind::For(l) | StmtKind::MetaFor(l) => walk(std::slice::from_ref(&l.body), out),
                StmtKind::MetaSchedule { body, .. } => walk(std::slice::from_ref(body), out),
                _ => {}
            }
        }
    }
    let mut names = std::collections::BTreeSet::new();
    walk(&function.body, &mut names);
    function.arrays.iter().enumerate().filter(|(_, a)| names.contains(&a.name) && !a.elem.is_integer()).map(|(k, _)| k).collect()
}

/// Function-like macros that route every call of [`MATH_ULPS`] in the host code through
/// `metafork_nudge` (a macro's own name is not expanded again inside it).
fn math_macros() -> String {
    let mut out = String::new();
    for (name, ulps) in MATH_ULPS {
        let args = if name.starts_with("pow") { "(a, b)" } else { "(a)" };
        let _ = writeln!(out, "#define {name}{args} metafork_nudge({name}{args}, {ulps})");
    }
    out
}

/// One run: schedule `schedule`'s kernel `which` (index into that schedule's kernels) at `point`.
pub struct Case {
    pub schedule: usize,
    pub which: usize,
    pub kernel: String,
    pub size: &'static str,
    pub point: Point,
}

/// The kernels of one schedule, by name, each with its code (all share the launch parameters).
pub struct ScheduleKernels<'t> {
    pub kernels: Vec<(String, &'t Kernel)>,
}

/// The text of `check.cu` for `function` (from source `source`, shown as `program`).
pub fn program(source: &str, program: &str, function: &KernelFunction, schedules: &[ScheduleKernels], cases: &[Case]) -> Result<String, String> {
    let mut out = String::new();
    let _ = writeln!(out, "// Generated by metafork from {}: gpu-check correctness program for function `{}`.", c_comment(source), c_comment(&function.name));
    let _ = writeln!(out, "// Build: nvcc -O2 -fmad=false -Xcompiler -ffp-contract=off,-fwrapv -arch=native -o check *.cu   Run: ./check [--small]");
    out.push_str("#include <cuda_runtime.h>\n#include <cmath>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n\n");
    for s in schedules {
        let Some((_, first)) = s.kernels.first() else { continue };
        let decls: Vec<String> = launch_params(function, first).into_iter().map(|(d, _)| d).collect();
        for (name, _) in &s.kernels {
            let _ = writeln!(out, "extern \"C\" cudaError_t {}({}{}cudaStream_t metafork_stream);", launch_name_of(name), decls.join(", "), if decls.is_empty() { "" } else { ", " });
            let _ = writeln!(out, "extern \"C\" cudaError_t {}(size_t metafork_bytes);", allow_shared_name(name));
        }
    }
    let arrays = function.arrays.len();
    let _ = writeln!(out, "\n#define METAFORK_ARRAYS {}", arrays.max(1));
    out.push_str("static void *metafork_host[METAFORK_ARRAYS], *metafork_device[METAFORK_ARRAYS];\nstatic size_t metafork_bytes[METAFORK_ARRAYS];\n\n");
    out.push_str(COPIES);
    let sensitive = calls_inexact_math(&function.body);
    let _ = writeln!(out, "\n#define METAFORK_MATH {}", u8::from(sensitive));
    out.push_str(MATH_NUDGE);
    out.push_str(REDUCE);
    if sensitive {
        out.push_str(&math_macros());
    }
    let params = param_list(function);
    let _ = writeln!(out, "\n// The serial program: every meta_for a sequential loop.\nstatic int metafork_serial({params}) {{");
    host_body(function, &function.body, None, &mut out)?;
    out.push_str("  return 0;\n}\n");
    for (k, s) in schedules.iter().enumerate() {
        let _ = writeln!(out, "\n// Schedule {k} (`{}`) launched through kernel `metafork_which`, the others serial.\nstatic int metafork_with_s{k}(int metafork_which, {params}) {{", c_comment(&function.schedules[k].name));
        host_body(function, &function.body, Some((k, s)), &mut out)?;
        out.push_str("  (void)metafork_which;\n  return 0;\n}\n");
    }
    cases_table(function, program, schedules, cases, &mut out)?;
    run_case(function, schedules, &mut out)?;
    out.push_str(&support(schedules));
    out.push_str(MAIN);
    Ok(out)
}

/// The function's parameters as host C++ parameters (arrays as flat pointers).
fn param_list(function: &KernelFunction) -> String {
    function
        .params
        .iter()
        .map(|p| match function.array(&p.name) {
            Some(a) => format!("{}{} *{}", if a.is_const { "const " } else { "" }, a.elem, c_ident(&p.name)),
            None => format!("{} {}", p.ty, c_ident(&p.name)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `body` of `function` as host C++: schedule `launch.0` (source order) launched through kernel
/// `metafork_which` of `launch.1`, the others serial; a failing fact returns -1.
fn host_body<'f>(function: &'f KernelFunction, body: &[Stmt], launch: Option<(usize, &'f ScheduleKernels<'f>)>, out: &mut String) -> Result<(), String> {
    let schedule = |k: usize, pad: &str, out: &mut String| -> Result<bool, String> {
        match launch {
            Some((which, kernels)) if which == k => launch_block(function, kernels, pad, out).map(|_| true),
            _ => Ok(false),
        }
    };
    let fact = |_: &Stmt| "return -1; /* outside the program's facts */".to_string();
    HostPrinter::new(function, &schedule, &fact).with_reduce_macro().body(body, 1, out)
}

/// Copy every array in, launch kernel `metafork_which` with the arrays' device copies (they
/// shadow the host pointers in the block), copy every array back.
fn launch_block(function: &KernelFunction, s: &ScheduleKernels, pad: &str, out: &mut String) -> Result<(), String> {
    let Some((_, first)) = s.kernels.first() else { return Err("a schedule without kernels".into()) };
    let args: Vec<String> = launch_params(function, first).into_iter().map(|(_, n)| n).collect();
    let _ = writeln!(out, "{pad}{{  // the schedule, launched");
    let _ = writeln!(out, "{pad}  int metafork_status = metafork_copy(cudaMemcpyHostToDevice);\n{pad}  if (metafork_status) return metafork_status;\n{pad}  cudaError_t metafork_e = cudaSuccess;\n{pad}  {{");
    for (k, a) in function.arrays.iter().enumerate() {
        let c = if a.is_const { "const " } else { "" };
        let n = c_ident(&a.name);
        let _ = writeln!(out, "{pad}    {c}{} *{n} = ({c}{} *)metafork_device[{k}]; (void){n};", a.elem, a.elem);
    }
    let _ = writeln!(out, "{pad}    switch (metafork_which) {{");
    for (i, (name, _)) in s.kernels.iter().enumerate() {
        let _ = writeln!(out, "{pad}    case {i}: metafork_e = {}({}{}0); break;", launch_name_of(name), args.join(", "), if args.is_empty() { "" } else { ", " });
    }
    let _ = writeln!(out, "{pad}    default: metafork_e = cudaErrorInvalidValue;\n{pad}    }}\n{pad}  }}");
    let _ = writeln!(out, "{pad}  if (metafork_e == cudaSuccess) metafork_e = cudaDeviceSynchronize();\n{pad}  if (metafork_e != cudaSuccess) return 1000 + (int)metafork_e;");
    let _ = writeln!(out, "{pad}  metafork_status = metafork_copy(cudaMemcpyDeviceToHost);\n{pad}  if (metafork_status) return metafork_status;\n{pad}}}");
    Ok(())
}

/// The cases as a table: integer parameters in the function's order.
fn cases_table(function: &KernelFunction, program: &str, schedules: &[ScheduleKernels], cases: &[Case], out: &mut String) -> Result<(), String> {
    let ints: Vec<&str> = function.params.iter().filter(|p| matches!(p.role, Role::DataParameter | Role::ProgramParameter)).map(|p| p.name.as_str()).collect();
    let _ = writeln!(out, "\nstatic const char *const metafork_program = {};", c_string(program));
    let _ = writeln!(out, "struct metafork_case {{ int schedule; int which; const char *kernel; const char *size; const char *point; long long values[{}]; }};", ints.len().max(1));
    let _ = writeln!(out, "static const metafork_case metafork_cases[] = {{");
    for c in cases {
        if schedules.get(c.schedule).is_none_or(|s| c.which >= s.kernels.len()) {
            return Err(format!("case for kernel `{}` names no kernel", c.kernel));
        }
        let values: Vec<String> = ints.iter().map(|n| c.point.get(*n).map(|v| format!("{v}LL")).ok_or_else(|| format!("the point has no value for `{n}`"))).collect::<Result<_, _>>()?;
        let shown: Vec<String> = c.point.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "  {{{}, {}, {}, {}, {}, {{{}}}}},",
            c.schedule,
            c.which,
            c_string(&c.kernel),
            c_string(c.size),
            c_string(&shown.join(" ")),
            if values.is_empty() { "0".into() } else { values.join(", ") }
        );
    }
    let _ = writeln!(out, "}};");
    Ok(())
}

/// `metafork_run_case`: the parameters from the table, the arrays, both runs, the comparison.
fn run_case(function: &KernelFunction, schedules: &[ScheduleKernels], out: &mut String) -> Result<(), String> {
    out.push_str(HELPERS);
    out.push_str("\nstatic int metafork_run_case(const metafork_case *metafork_c, unsigned long long metafork_seed) {\n");
    let mut slot = 0;
    for p in &function.params {
        let n = c_ident(&p.name);
        match p.role {
            Role::DataParameter | Role::ProgramParameter => {
                let _ = writeln!(out, "  const {} {n} = ({})metafork_c->values[{slot}];", p.ty, p.ty);
                slot += 1;
            }
            Role::Value => {
                let _ = writeln!(out, "  const {} {n} = ({})metafork_uniform(&metafork_seed);", p.ty, p.ty);
            }
            Role::Array => {}
        }
    }
    let _ = writeln!(out, "  void *metafork_in[METAFORK_ARRAYS] = {{0}}, *metafork_expected[METAFORK_ARRAYS] = {{0}}, *metafork_got[METAFORK_ARRAYS] = {{0}};");
    for (k, a) in function.arrays.iter().enumerate() {
        let x = HostExprs::new(function);
        let extents: Vec<String> = a.extent_exprs.iter().map(|e| x.expr(e).map(|v| format!("metafork_extent((long long)({v}))"))).collect::<Result<_, _>>()?;
        let count = if extents.is_empty() { "1".to_string() } else { extents.join(" * ") };
        let kind = match a.elem {
            ScalarType::Float => 0,
            ScalarType::Double => 1,
            ScalarType::Int => 2,
            ScalarType::Long => 3,
            ScalarType::Char => 4,
        };
        let _ = writeln!(out, "  metafork_bytes[{k}] = (size_t)({count}) * sizeof({});", a.elem);
        let _ = writeln!(out, "  if (!metafork_alloc({k}, {kind}, metafork_in, metafork_expected, metafork_got, &metafork_seed)) return metafork_report(metafork_c, \"FAIL\", \"cannot allocate the arrays\", 0);");
    }
    let args_of = |set: &str| -> String {
        function
            .params
            .iter()
            .map(|p| match function.arrays.iter().position(|a| a.name == p.name) {
                Some(k) => {
                    let a = &function.arrays[k];
                    format!("({}{} *){set}[{k}]", if a.is_const { "const " } else { "" }, a.elem)
                }
                None => c_ident(&p.name).into_owned(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "  int metafork_serial_status = metafork_serial({});", args_of("metafork_expected"));
    let _ = writeln!(out, "  void *metafork_nudged[METAFORK_ARRAYS] = {{0}};\n  for (int metafork_mode = 1; METAFORK_MATH && metafork_serial_status == 0 && metafork_mode <= 3; metafork_mode++) {{");
    let _ = writeln!(out, "    if (!metafork_nudged_copy({arrays}, metafork_in, metafork_nudged)) return metafork_report(metafork_c, \"FAIL\", \"cannot allocate the arrays\", 0);", arrays = function.arrays.len());
    let _ = writeln!(out, "    metafork_nudge_mode = metafork_mode; metafork_nudge_state = metafork_seed;\n    metafork_serial({});\n    metafork_nudge_mode = 0;", args_of("metafork_nudged"));
    let _ = writeln!(out, "    metafork_widen({arrays}, metafork_expected, metafork_nudged);\n  }}\n  for (int k = 0; k < METAFORK_ARRAYS; k++) {{ free(metafork_nudged[k]); metafork_nudged[k] = 0; }}", arrays = function.arrays.len());
    let reduced = reduced_arrays(function);
    if !reduced.is_empty() {
        // The reductions' rounding bound: the serial program once adding the terms'
        // magnitudes, once counting them, into the reduced arrays (the rest is not used).
        let _ = writeln!(out, "  for (int metafork_mode = 1; metafork_serial_status == 0 && metafork_mode <= 2; metafork_mode++) {{");
        let _ = writeln!(out, "    if (!metafork_nudged_copy({arrays}, metafork_in, metafork_nudged)) return metafork_report(metafork_c, \"FAIL\", \"cannot allocate the arrays\", 0);", arrays = function.arrays.len());
        let _ = writeln!(out, "    metafork_reduce_mode = metafork_mode;\n    metafork_serial({});\n    metafork_reduce_mode = 0;", args_of("metafork_nudged"));
        for k in &reduced {
            let _ = writeln!(out, "    metafork_reduction_pass({k}, metafork_mode, metafork_in[{k}], metafork_nudged[{k}]);");
        }
        let _ = writeln!(out, "  }}");
        for k in &reduced {
            let _ = writeln!(out, "  metafork_reduction_slack({k}, metafork_in[{k}]);");
        }
        let _ = writeln!(out, "  for (int k = 0; k < METAFORK_ARRAYS; k++) {{ free(metafork_nudged[k]); metafork_nudged[k] = 0; }}");
    }
    let _ = writeln!(out, "  for (int k = 0; k < {}; k++) metafork_host[k] = metafork_got[k];", function.arrays.len());
    let _ = writeln!(out, "  int metafork_status = -2;\n  switch (metafork_c->schedule) {{");
    for k in 0..schedules.len() {
        let _ = writeln!(out, "  case {k}: metafork_status = metafork_with_s{k}(metafork_c->which, {}); break;", args_of("metafork_got"));
    }
    let _ = writeln!(out, "  }}");
    let n = function.arrays.len();
    let _ = writeln!(out, "  int metafork_result = metafork_verdict_of(metafork_c, metafork_serial_status, metafork_status, {n}, metafork_expected, metafork_got);");
    let _ = writeln!(out, "  metafork_release({n}, metafork_in, metafork_expected, metafork_got);\n  return metafork_result;\n}}");
    Ok(())
}

/// The sensitivity runs' rounding: `metafork_nudge(v, ulps)` is `v` moved `ulps` ulps up
/// (mode 1), down (2) or each way at random (3), and `v` itself in mode 0 (every other run).
const MATH_NUDGE: &str = r#"
static int metafork_nudge_mode;
static unsigned long long metafork_nudge_state;
template <class T> static T metafork_nudge(T v, int ulps) {
  if (metafork_nudge_mode == 0 || !std::isfinite(v)) return v;
  int up = metafork_nudge_mode == 1;
  if (metafork_nudge_mode == 3) {
    metafork_nudge_state = metafork_nudge_state * 6364136223846793005ULL + 1442695040888963407ULL;
    up = (int)(metafork_nudge_state >> 63);
  }
  for (int i = 0; i < ulps; i++) v = std::nextafter(v, up ? (T)INFINITY : -(T)INFINITY);
  return v;
}
"#;

/// Reductions in the serial program: `METAFORK_REDUCE(t, v)` is `t += v`, or in the two extra
/// runs adds `|v|` (mode 1) or counts the term (mode 2). A kernel's atomic adds run in any
/// order, so a floating element may differ from the serial sum by the rounding of any order of
/// its `k` terms, at most `2 γ(k+1) Σ|x|` (`Σ|x|` with the element's value before the first).
const REDUCE: &str = r#"
static int metafork_reduce_mode;
#define METAFORK_REDUCE(t, v) do { if (metafork_reduce_mode == 0) (t) += (v); else if (metafork_reduce_mode == 1) (t) += fabs((double)(v)); else (t) += 1; } while (0)
"#;

/// Copies of every array between host and device.
const COPIES: &str = r#"static int metafork_copy(cudaMemcpyKind metafork_kind) {
  for (int k = 0; k < METAFORK_ARRAYS; k++) {
    if (!metafork_bytes[k]) continue;
    cudaError_t e = metafork_kind == cudaMemcpyHostToDevice ? cudaMemcpy(metafork_device[k], metafork_host[k], metafork_bytes[k], metafork_kind)
                                                            : cudaMemcpy(metafork_host[k], metafork_device[k], metafork_bytes[k], metafork_kind);
    if (e != cudaSuccess) return 1000 + (int)e;
  }
  return 0;
}
"#;

/// The generator, allocation, comparison and report shared by every case.
const HELPERS: &str = r#"
static double metafork_uniform(unsigned long long *s) {
  *s += 0x9e3779b97f4a7c15ULL;
  unsigned long long z = *s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static long long metafork_extent(long long e) { return e < 0 ? 0 : e; }

static int metafork_kinds[METAFORK_ARRAYS];
/* Kinds: 0 float, 1 double, 2 int, 3 long, 4 char (signed, as on x86-64 and in CUDA). */
static size_t metafork_elem_size(int kind) { return kind == 4 ? 1 : kind == 0 || kind == 2 ? 4 : 8; }
/* Per floating array, per element: the largest distance of a sensitivity run from the reference
   (null: none ran). A run that leaves the finite numbers where the reference did not makes the
   element's tolerance infinite: its value depends on the last ulp of a math call. */
static double *metafork_slack[METAFORK_ARRAYS];

/* Reductions' rounding bound, per element of a reduced floating array: the terms' magnitudes
   (with the value before the first) and their count, from the serial runs in modes 1 and 2. */
static double *metafork_red_mag[METAFORK_ARRAYS], *metafork_red_count[METAFORK_ARRAYS];

static void metafork_reduction_pass(int k, int mode, const void *in, const void *run) {
  int kind = metafork_kinds[k];
  size_t n = metafork_bytes[k] / (kind == 0 ? 4 : 8);
  double **to = mode == 1 ? metafork_red_mag : metafork_red_count;
  if (!to[k] && !(to[k] = (double *)calloc(n ? n : 1, sizeof(double)))) return;
  for (size_t i = 0; i < n; i++) {
    double init = kind == 0 ? ((const float *)in)[i] : ((const double *)in)[i];
    double got = kind == 0 ? ((const float *)run)[i] : ((const double *)run)[i];
    to[k][i] = mode == 1 ? fabs(init) + (got - init) : got - init;
  }
}

static void metafork_reduction_slack(int k, const void *in) {
  int kind = metafork_kinds[k];
  size_t n = metafork_bytes[k] / (kind == 0 ? 4 : 8);
  (void)in;
  if (!metafork_red_mag[k] || !metafork_red_count[k]) return;
  if (!metafork_slack[k] && !(metafork_slack[k] = (double *)calloc(n ? n : 1, sizeof(double)))) return;
  double unit = kind == 0 ? 5.9604644775390625e-8 : 1.1102230246251565e-16;
  for (size_t i = 0; i < n; i++) {
    double terms = metafork_red_count[k][i];
    if (!(terms > 0)) continue;
    double m = (terms + 1) * unit;
    double bound = m < 1 ? m / (1 - m) * metafork_red_mag[k][i] : INFINITY;  /* the comparison doubles it */
    if (!(bound <= metafork_slack[k][i])) metafork_slack[k][i] = bound;
  }
}

/* A fresh copy of the inputs for a sensitivity run (the buffers of the previous run reused). */
static int metafork_nudged_copy(int arrays, void **in, void **nudged) {
  for (int k = 0; k < arrays; k++) {
    if (!nudged[k] && !(nudged[k] = malloc(metafork_bytes[k] ? metafork_bytes[k] : 1))) return 0;
    memcpy(nudged[k], in[k], metafork_bytes[k]);
  }
  return 1;
}

/* Widens each floating element's slack to its distance from the reference in run `nudged`. */
static void metafork_widen(int arrays, void **expected, void **nudged) {
  for (int k = 0; k < arrays; k++) {
    int kind = metafork_kinds[k];
    if (kind >= 2) continue;
    size_t n = metafork_bytes[k] / (kind == 0 ? 4 : 8);
    if (!metafork_slack[k] && !(metafork_slack[k] = (double *)calloc(n ? n : 1, sizeof(double)))) continue;
    for (size_t i = 0; i < n; i++) {
      double y = kind == 0 ? ((const float *)expected[k])[i] : ((const double *)expected[k])[i];
      double z = kind == 0 ? ((const float *)nudged[k])[i] : ((const double *)nudged[k])[i];
      if (z == y || (std::isnan(y) && std::isnan(z))) continue;
      double d = fabs(z - y);
      metafork_slack[k][i] = std::isnan(d) ? INFINITY : fmax(metafork_slack[k][i], d);
    }
  }
}
static double metafork_worst;  /* the largest relative difference of the last comparison */

static int metafork_alloc(int k, int kind, void **in, void **expected, void **got, unsigned long long *seed) {
  size_t bytes = metafork_bytes[k] ? metafork_bytes[k] : 1;
  metafork_kinds[k] = kind;
  in[k] = malloc(bytes); expected[k] = malloc(bytes); got[k] = malloc(bytes);
  if (!in[k] || !expected[k] || !got[k]) return 0;
  if (cudaMalloc(&metafork_device[k], bytes) != cudaSuccess) return 0;
  size_t n = metafork_bytes[k] / metafork_elem_size(kind);
  for (size_t i = 0; i < n; i++) {
    double u = metafork_uniform(seed);
    switch (kind) {
    case 0: ((float *)in[k])[i] = (float)u; break;
    case 1: ((double *)in[k])[i] = u; break;
    case 2: ((int *)in[k])[i] = (int)llround(u * 100.0); break;
    case 4: ((signed char *)in[k])[i] = (signed char)llround(u * 100.0); break;
    default: ((long *)in[k])[i] = (long)llround(u * 100.0); break;
    }
  }
  memcpy(expected[k], in[k], metafork_bytes[k]);
  memcpy(got[k], in[k], metafork_bytes[k]);
  metafork_host[k] = got[k];
  return 1;
}

static int metafork_report(const metafork_case *c, const char *verdict, const char *detail, double worst) {
  printf("CASE\t%s\t%d\t%s\t%s\t%s\t%s\t%.3e\t%s\n", metafork_program, c->schedule, c->kernel, c->size, c->point, verdict, worst, detail);
  return strcmp(verdict, "PASS") == 0 || strcmp(verdict, "SKIP") == 0 ? 0 : 1;
}

/* Compare array k; returns 0 when it differs beyond the tolerance (detail written). */
static int metafork_compare(int k, const void *expected, const void *got, char *detail, size_t size) {
  int kind = metafork_kinds[k];
  size_t n = metafork_bytes[k] / metafork_elem_size(kind);
  double rtol = kind == 0 ? 1e-5 : 1e-12;
  for (size_t i = 0; i < n; i++) {
    if (kind >= 2) {
      long long x = kind == 2 ? ((const int *)got)[i] : kind == 3 ? ((const long *)got)[i] : ((const signed char *)got)[i];
      long long y = kind == 2 ? ((const int *)expected)[i] : kind == 3 ? ((const long *)expected)[i] : ((const signed char *)expected)[i];
      if (x != y) { snprintf(detail, size, "array %d element %zu is %lld, the serial program computes %lld", k, i, x, y); return 0; }
      continue;
    }
    double x = kind == 0 ? ((const float *)got)[i] : ((const double *)got)[i];
    double y = kind == 0 ? ((const float *)expected)[i] : ((const double *)expected)[i];
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    double d = fabs(x - y) / fmax(1.0, fabs(y));
    if (!(d <= metafork_worst)) metafork_worst = d;
    double slack = metafork_slack[k] ? metafork_slack[k][i] : 0.0;
    if (!(d <= rtol) && !(fabs(x - y) <= rtol * fmax(1.0, fabs(y)) + 2.0 * slack)) { snprintf(detail, size, "array %d element %zu is %.9g, the serial program computes %.9g", k, i, x, y); return 0; }
  }
  return 1;
}

static void metafork_release(int arrays, void **in, void **expected, void **got) {
  for (int k = 0; k < arrays; k++) {
    free(in[k]); free(expected[k]); free(got[k]); free(metafork_slack[k]); metafork_slack[k] = 0;
    free(metafork_red_mag[k]); free(metafork_red_count[k]); metafork_red_mag[k] = metafork_red_count[k] = 0;
    if (metafork_device[k]) cudaFree(metafork_device[k]);
    in[k] = expected[k] = got[k] = metafork_device[k] = 0;
  }
}

static int metafork_verdict_of(const metafork_case *c, int serial, int launched, int arrays, void **expected, void **got) {
  char detail[256] = "";
  metafork_worst = 0;
  if (serial == -1) return metafork_report(c, "SKIP", "outside the program's facts", 0);
  if (launched == -1) return metafork_report(c, "FAIL", "the launched program stopped on a fact the serial one passed", 0);
  if (launched >= 1000) {
    cudaError_t e = (cudaError_t)(launched - 1000);
    cudaGetLastError();
    if (e == cudaErrorLaunchOutOfResources || e == cudaErrorInvalidConfiguration)
      return metafork_report(c, "SKIP", cudaGetErrorString(e), 0);
    return metafork_report(c, "FAIL", cudaGetErrorString(e), 0);
  }
  for (int k = 0; k < arrays; k++)
    if (!metafork_compare(k, expected[k], got[k], detail, sizeof detail)) return metafork_report(c, "FAIL", detail, metafork_worst);
  return metafork_report(c, "PASS", "", metafork_worst);
}

"#;

/// The driver: every case (or the small ones) in order.
const MAIN: &str = r#"
int main(int argc, char **argv) {
  int small_only = argc > 1 && strcmp(argv[1], "--small") == 0;
  setvbuf(stdout, NULL, _IOLBF, 0);  /* each case's line survives a timeout that stops the run */
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) { fprintf(stderr, "no CUDA device\n"); return 2; }
  metafork_allow_all((size_t)prop.sharedMemPerBlockOptin);
  int failed = 0;
  const int count = (int)(sizeof metafork_cases / sizeof metafork_cases[0]);
  for (int i = 0; i < count; i++) {
    if (small_only && strcmp(metafork_cases[i].size, "small") != 0) continue;
    failed += metafork_run_case(&metafork_cases[i], 0x6d657461666f726bULL + (unsigned long long)i);
  }
  return failed ? 1 : 0;
}
"#;

/// Opting every kernel into the device's largest dynamic shared memory.
fn support(schedules: &[ScheduleKernels]) -> String {
    let mut out = String::new();
    out.push_str("\nstatic void metafork_allow_all(size_t metafork_most) {\n");
    for s in schedules {
        for (name, _) in &s.kernels {
            let _ = writeln!(out, "  {}(metafork_most);", allow_shared_name(name));
        }
    }
    out.push_str("  cudaGetLastError();\n}\n");
    out
}
