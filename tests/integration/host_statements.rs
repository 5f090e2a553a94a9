//! Issue 26: statements on array data outside the schedules (`frontend::host_statements`): each
//! run of them becomes a schedule of one thread, in the program's order, inside the host loops
//! around it. Checked: C's values (the serial program against a reference computed here); every
//! leaf proved; the driver launching the schedules in the program's order; an update there is
//! never a reduction (`*=` is accepted, `+=` is no atomic add); a user name like the made-up
//! counters; and a thread block of constant extent (`j < 32`), which the one-thread schedules
//! use, accepted from users too.
use crate::common;

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::verify::value::Value;
use metafork::verify::{verify_tree, Options, Status};

fn backend() -> Backend {
    Backend::new(metafork::verify::QUERY_TIMEOUT_MS)
}

/// A recurrence before the time loop, a schedule and an update of two elements in it.
const STEPS: &str = "void steps(int n, int T, int B, float x[n], float y[n]) {
  assume(n >= 2 && B >= 1 && T >= 1);
  x[0] = 1.0f;
  for (int k = 1; k < n; k++)
    x[k] = 0.5f * x[k - 1] + 1.0f;
  for (int t = 0; t < T; t++) {
    meta_schedule {
      meta_for (int v = 0; v < (n + B - 1) / B; v++)
        meta_for (int u = 0; u < B; u++) {
          int i = v * B + u;
          if (i < n) y[i] += x[i];
        }
    }
    if (t % 2 == 0)
      y[0] *= 2.0f;
    y[n - 1] -= y[0];
  }
}
";

/// What C computes: `x` and `y` after the function, `y` starting as `y0`.
fn reference(n: usize, t_steps: usize, y0: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mut x = vec![0.0f32; n];
    x[0] = 1.0;
    for k in 1..n {
        x[k] = 0.5 * x[k - 1] + 1.0;
    }
    let mut y = y0.to_vec();
    for t in 0..t_steps {
        for i in 0..n {
            y[i] += x[i];
        }
        if t % 2 == 0 {
            y[0] *= 2.0;
        }
        y[n - 1] -= y[0];
    }
    (x, y)
}

#[test]
fn statements_outside_schedules_compute_what_c_computes() {
    let mut p = check_source("steps.mf", STEPS).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    assert_eq!(f.schedules.len(), 3, "the recurrence, the schedule and the update");
    let y0 = |i: usize| (i % 5) as f32 - 1.5;
    for (n, t, b) in [(2, 1, 1), (5, 3, 2), (9, 4, 4)] {
        let out = common::run_serial(&f, &[("n", n as i64), ("T", t as i64), ("B", b)], &|a, i| if a == "y" { Value::Float(y0(i)) } else { Value::Float(f32::NAN) });
        let floats = |name: &str| -> Vec<f32> { out[name].data.iter().map(|v| match v {
            Value::Float(x) => *x,
            other => panic!("{other:?}"),
        }).collect() };
        let (x, y) = reference(n, t, &(0..n).map(y0).collect::<Vec<_>>());
        assert_eq!(floats("x"), x, "n = {n}, T = {t}");
        assert_eq!(floats("y"), y, "n = {n}, T = {t}");
    }
}

/// Every leaf proved; the one-thread kernels hold the user's statements as written (no atomic
/// add, the `*=` kept); the driver launches the recurrence before the time loop and the two
/// schedules inside it, in order; kernels and driver compile with nvcc.
#[test]
fn one_thread_schedules_generate_are_proved_and_run_in_order() {
    common::assert_every_leaf_proved("steps.mf", STEPS, &backend(), 2);
    let (dir, out) = common::gen_and_verify("host_statements_gen", "steps.mf", STEPS);
    let update: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.to_string_lossy().contains("steps_2_leaf")).map(|p| std::fs::read_to_string(p).unwrap()).collect();
    assert!(!update.is_empty());
    for cu in &update {
        assert!(cu.contains("*= 2.0f") && cu.contains("-= y[") && !cu.contains("atomicAdd"), "{cu}");
    }
    let driver = std::fs::read_to_string(out.join("metafork_run_steps.cu")).unwrap();
    let at = |what: &str| driver.find(what).unwrap_or_else(|| panic!("no `{what}` in\n{driver}"));
    assert!(at("metafork_steps_0_launch") < at("for (int t = 0; t < T; t++)"), "{driver}");
    assert!(at("for (int t = 0; t < T; t++)") < at("metafork_steps_1_launch") && at("metafork_steps_1_launch") < at("metafork_steps_2_launch"), "{driver}");
    common::assert_nvcc_compiles(&dir, &common::cu_files(&out, ".cu"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A user's `one_thread` and `one_block` are left alone: the made-up counters take other names.
#[test]
fn a_user_name_like_the_made_up_counters_is_left_alone() {
    let src = "void g(int n, float x[n]) {
  assume(n >= 1);
  int one_thread = 3;
  int one_block = 4;
  x[0] = one_thread + one_block;
}
";
    let mut p = check_source("g.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    let out = common::run_serial(&f, &[("n", 2)], &|_, _| Value::Float(0.0));
    assert_eq!(out["x"].data[0], Value::Float(7.0));
    let s = &f.schedules[0];
    let counters: Vec<&str> = s.grid.iter().chain(&s.block).map(|l| l.var.as_str()).collect();
    assert_eq!(counters, ["one_block2", "one_thread2"]);
}

/// An innermost `meta_for` of constant bounds is a thread block of that extent, where no loop
/// of the group has a program-parameter extent.
#[test]
fn a_constant_innermost_loop_is_the_thread_block() {
    let src = "void rows(int n, const float a[n][32], float s[n]) {
  assume(n >= 1);
  meta_schedule {
    meta_for (int i = 0; i < n; i++)
      meta_for (int j = 0; j < 32; j++)
        s[i] += a[i][j];
  }
}
";
    let mut p = check_source("rows.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    let s = &f.schedules[0];
    assert_eq!((s.grid.len(), s.block.len()), (1, 1));
    assert_eq!(s.block[0].extent.as_ref().map(|e| e.to_string()), Some("32".to_string()));
    common::assert_every_leaf_proved("rows.mf", src, &backend(), 2);
    // A block of no threads (`j < 0`), or a bound that is an expression, is no block: the
    // located error of a group without one.
    for hi in ["0", "-9223372036854775807 - 1"] {
        let bad = src.replace("j < 32", &format!("j < {hi}")).replace("const float a[n][32]", "const float a[n][1]").replace("s[i] += a[i][j];", "s[i] += a[i][0];");
        let err = check_source("rows.mf", &bad).expect_err("no thread block");
        assert!(err.render(false).contains("cannot tell which `meta_for` loops form the thread block"), "{}", err.render(false));
    }
}

/// A block loop offset by its grid counter (`g * B <= i < g * B + B`, the language's
/// `lo`/`hi` in outer counters) has the extent `B`: it is the thread block, and every leaf is
/// proved (it was refused as "no program-parameter extent"). An offset whose extent still
/// reads an outer counter (`i < g * B + g`) is no block, and the error names that counter.
#[test]
fn a_block_loop_offset_by_its_grid_counter_is_the_thread_block() {
    let src = "void k(int n, int B, const float a[n], float c[n]) {
  assume(n >= 1 && B >= 1 && n % B == 0);
  meta_schedule {
    meta_for (int g = 0; g < n / B; g++)
      meta_for (int i = g * B; i < g * B + B; i++)
        c[i] = 2.0f * a[i];
  }
}
";
    let mut p = check_source("k.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    let s = &f.schedules[0];
    assert_eq!((s.grid.len(), s.block.len()), (1, 1));
    assert_eq!(s.block[0].extent.as_ref().map(|e| e.to_string()), Some("B".to_string()));
    common::assert_every_leaf_proved("k.mf", src, &backend(), 2);
    let bad = src.replace("i < g * B + B", "i < g * B + g");
    let err = check_source("k.mf", &bad).expect_err("no thread block");
    // The trip count varies with `g` (a triangle metafork bounds, to `n / B - 1`, no program
    // parameter): the note names the counter and the guard to write.
    let e = err.render(false);
    assert!(e.contains("k.mf:5:21") && e.contains("cannot tell which `meta_for` loops form the thread block") && e.contains("the bounds of `i` read `g`") && e.contains("`if (i < g * B + g)`"), "{e}");
}

/// Gram-Schmidt's pattern: a norm summed on the host side of a loop around a schedule. The
/// scalar's definition joins the one-thread schedule that assigns it (nothing after it reads
/// `nrm`), so `R[k][k]` is C's square root of the column's sum; a sum that a later schedule reads
/// stays a host definition, and assigning it is a located error with a note saying what to do.
#[test]
fn a_scalar_summed_outside_a_schedule_runs_with_its_statements() {
    let src = "void norms(int m, int n, int B, const float A[m][n], float R[n][n], float Q[m][n]) {
  assume(m >= 1 && n >= 1 && B >= 1);
  for (int k = 0; k < n; k++) {
    float nrm = 0.0f;
    for (int i = 0; i < m; i++)
      nrm += A[i][k] * A[i][k];
    R[k][k] = sqrtf(nrm);
    meta_schedule {
      meta_for (int v = 0; v < (m + B - 1) / B; v++)
        meta_for (int u = 0; u < B; u++) {
          int i = v * B + u;
          if (i < m) Q[i][k] = A[i][k] / R[k][k];
        }
    }
  }
}
";
    let mut p = check_source("norms.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    assert_eq!(f.schedules.len(), 2);
    let (m, n) = (3usize, 2usize);
    let a = |i: usize| (i % 7) as f32 * 0.5 + 0.25;
    let out = common::run_serial(&f, &[("m", m as i64), ("n", n as i64), ("B", 2)], &|name, i| if name == "A" { Value::Float(a(i)) } else { Value::Float(0.0) });
    for k in 0..n {
        let nrm = (0..m).fold(0.0f32, |s, i| s + a(i * n + k) * a(i * n + k));
        assert_eq!(out["R"].data[k * n + k], Value::Float(nrm.sqrt()), "k = {k}");
        for i in 0..m {
            assert_eq!(out["Q"].data[i * n + k], Value::Float(a(i * n + k) / nrm.sqrt()), "i = {i}, k = {k}");
        }
    }
    common::assert_every_leaf_proved("norms.mf", src, &backend(), 2);

    let read_later = "void scale(int m, int B, const float x[m], float y[m]) {
  assume(m >= 1 && B >= 1);
  float s = 0.0f;
  for (int i = 0; i < m; i++)
    s += x[i];
  meta_schedule {
    meta_for (int v = 0; v < (m + B - 1) / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        if (i < m) y[i] = x[i] / s;
      }
  }
}
";
    let err = check_source("scale.mf", read_later).expect_err("a host sum read by a schedule");
    let (line, col, message) = err.positions().remove(0);
    assert_eq!((line, col), (5, 5), "{}", err.render(false));
    assert!(message.contains("cannot assign to `s`") && message.contains("read-only afterwards") && !message.contains("inside"), "{message}");
    assert!(err.render(false).contains("keep a value later schedules read in an array element"), "{}", err.render(false));
}

/// A schedule inside `for (k = 1; k < n; k++)` does not run where `n == 1`: a leaf sampled there
/// matches at fewer points than it drew, and its report says why instead of staying silent.
#[test]
fn points_where_a_schedule_never_runs_are_reported() {
    let src = "void tri(int n, int B, float y[n]) {
  assume(n >= 1 && B >= 1);
  for (int k = 1; k < n; k++) {
    meta_schedule {
      meta_for (int v = 0; v < (k + B - 1) / B; v++)
        meta_for (int u = 0; u < B; u++) {
          int i = v * B + u;
          if (i < k) y[i] += y[k];
        }
    }
  }
}
";
    let b = backend();
    let mut short = 0;
    for (f, tree) in common::trees_of("tri.mf", src, &b) {
        for r in verify_tree(&f, &tree, &b, Options { points: 8, ..Options::default() }).unwrap() {
            assert_eq!(r.status(), Status::Proved, "leaf {}: {:?}", r.leaf, r.status());
            if r.points < 8 {
                short += 1;
                let note = r.sampling.clone().unwrap_or_default();
                assert!(note.contains("not run") || note.contains("distinct small parameter point"), "leaf {}: {} points, note {note:?}", r.leaf, r.points);
            }
        }
    }
    assert!(short > 0, "some leaf drew n = 1 (the sampler draws sizes from 1)");
}

/// A scalar defined after the schedule (`int late = N;`) is no business of the schedule's
/// launch: `gen` accepted the program, and `verify` refused its output with "`late` is not
/// defined here" (the kernel's parameter list holds every derived scalar).
#[test]
fn a_scalar_defined_after_a_schedule_does_not_stop_verify() {
    let src = "void saxpy(int N, int B, float alpha, const float x[N], float y[N]) {\n  assume(N >= 1 && B >= 1);\n  int dim = (N + B - 1) / B;\n  meta_schedule {\n    meta_for (int i = 0; i < dim; i++)\n      meta_for (int j = 0; j < B; j++) {\n        int p = i * B + j;\n        if (p < N) y[p] = alpha * x[p] + y[p];\n      }\n  }\n  int late = N * 2;\n}\n";
    common::gen_and_verify("host-late-scalar", "late.mf", src);
}
