//! Issue 26: serial `for` loops counting down (`j >= lo`, `j > lo`; `j--`, `--j`, `j -= c`),
//! which the parser writes as upward loops over a made-up counter with `j` declared at the top
//! of the body (`frontend::parser`, `Parser::downward`). The order of the iterations is C's:
//! checked against references computed here, by the serial program's own runs, by `verify`'s
//! proofs and differential runs, and, where `nvcc` is installed, by compiling what `gen` emits.
//! A `meta_for` counting down is refused with the same iterations written upward.
use crate::common;

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::frontend::model::KernelFunction;
use metafork::verify::value::Value;

fn backend() -> Backend {
    Backend::new(metafork::verify::QUERY_TIMEOUT_MS)
}

fn checked(src: &str) -> KernelFunction {
    let mut p = check_source("down.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    p.kernels.remove(0)
}

fn metafork(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

/// An anti-causal filter along each row: every iteration reads what the one before wrote, so
/// only C's order (`j` = m - 1 down to 0) gives these values.
const ANTICAUSAL: &str = "void anticausal(int n, int m, int B, const float x[n][m], float y[n][m]) {
  assume(n >= 1 && m >= 1 && B >= 1);
  int g = (n + B - 1) / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        if (i < n)
          for (int j = m - 1; j >= 0; j--) {
            if (j + 1 < m)
              y[i][j] = x[i][j] + 0.5f * y[i][j + 1];
            else
              y[i][j] = x[i][j];
          }
      }
  }
}
";

fn input(i: usize) -> f32 {
    ((i * 7 + 3) % 11) as f32 - 5.0
}

/// The filter computed here, in C's order.
fn anticausal_reference(n: usize, m: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; n * m];
    for i in 0..n {
        for j in (0..m).rev() {
            let x = input(i * m + j);
            y[i * m + j] = if j + 1 < m { x + 0.5f32 * y[i * m + j + 1] } else { x };
        }
    }
    y
}

#[test]
fn anticausal_filter_runs_in_cs_order() {
    let f = checked(ANTICAUSAL);
    for (n, m, b) in [(3, 5, 2), (1, 1, 1), (4, 9, 4)] {
        let out = common::run_serial(&f, &[("n", n), ("m", m), ("B", b)], &|a, i| if a == "x" { Value::Float(input(i)) } else { Value::Float(f32::NAN) });
        let got: Vec<f32> = out["y"].data.iter().map(|v| match v {
            Value::Float(x) => *x,
            other => panic!("{other:?}"),
        }).collect();
        assert_eq!(got, anticausal_reference(n as usize, m as usize), "n = {n}, m = {m}");
    }
}

/// Every leaf of the filter's tree is proved (races, bounds) and matches the serial program at
/// sampled points, in process and through `metafork gen` / `metafork verify`; the emitted
/// code names the made-up counter `j_down` and compiles with `nvcc` where it is installed.
#[test]
fn anticausal_filter_generates_and_every_leaf_is_proved() {
    let b = backend();
    common::assert_every_leaf_proved("anticausal.mf", ANTICAUSAL, &b, 2);
    let (dir, out) = common::gen_and_verify("downward_gen", "anticausal.mf", ANTICAUSAL);
    let kernels = common::cu_files(&out, "_leaf");
    for k in &kernels {
        let cu = std::fs::read_to_string(k).unwrap();
        assert!(cu.contains("j_down"), "{}:\n{cu}", k.display());
    }
    common::assert_nvcc_compiles(&dir, &kernels);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Steps 1, 2 and 3, `>=` and `>`, `j--`, `--j` and `j -= c`, bounds that read the thread's
/// index, ranges the step does not divide, and empty ranges (`hi < lo`, and `hi == lo` with
/// `>`): each loop folds the values it visits, in order, into a hash, which must be the one C
/// computes (below). `long` counters included.
const STEPPED: &str = "void stepped(int N, int B, int hi, int lo, long out[N][6]) {
  assume(N >= 1 && B >= 1 && N % B == 0);
  meta_schedule {
    meta_for (int v = 0; v < N / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int k = v * B + u;
        long s0 = 0;
        for (int j = hi; j >= lo; j--)
          s0 = (s0 * 31 + j + 1000) % 1000003;
        out[k][0] = s0;
        long s1 = 0;
        for (int j = hi; j >= lo; j -= 2)
          s1 = (s1 * 31 + j + 1000) % 1000003;
        out[k][1] = s1;
        long s2 = 0;
        for (int j = hi + k % 3; j > lo - k % 2; j -= 3) {
          s2 = (s2 * 31 + j + 1000) % 1000003;
        }
        out[k][2] = s2;
        long s3 = 0;
        for (long j = hi; j > lo; --j)
          s3 = (s3 * 31 + j + 1000) % 1000003;
        out[k][3] = s3;
        long s4 = 0;
        for (int j = hi; j >= lo; j -= 2)
          for (int t = j; t > lo; t -= 3)
            s4 = (s4 * 31 + j * 10 + t + 1000) % 1000003;
        out[k][4] = s4;
        long s5 = 0;
        for (int j = hi - 1; j >= lo; j--)
          s5 = s5 + 1;
        out[k][5] = s5;
      }
  }
}
";

/// What C computes for `for (j = hi; cmp(j); j -= c)`: the values visited, in order.
fn visited(hi: i64, lo: i64, inclusive: bool, c: i64) -> Vec<i64> {
    let mut v = Vec::new();
    let mut j = hi;
    while if inclusive { j >= lo } else { j > lo } {
        v.push(j);
        j -= c;
    }
    v
}

fn hash(values: impl IntoIterator<Item = i64>) -> i64 {
    values.into_iter().fold(0, |s, j| (s * 31 + j + 1000) % 1000003)
}

#[test]
fn steps_strict_bounds_and_empty_loops_match_c() {
    let f = checked(STEPPED);
    let (n, b) = (6i64, 2i64);
    let mut empty = 0;
    for hi in -4..=7i64 {
        for lo in -4..=7i64 {
            let out = common::run_serial(&f, &[("N", n), ("B", b), ("hi", hi), ("lo", lo)], &|_, _| Value::Long(-7));
            let got: Vec<i64> = out["out"].data.iter().map(|v| v.as_i64()).collect();
            for k in 0..n {
                let nested: Vec<i64> = visited(hi, lo, true, 2).into_iter().flat_map(|j| visited(j, lo, false, 3).into_iter().map(move |t| j * 10 + t)).collect();
                let want = [
                    hash(visited(hi, lo, true, 1)),
                    hash(visited(hi, lo, true, 2)),
                    hash(visited(hi + k % 3, lo - k % 2, false, 3)),
                    hash(visited(hi, lo, false, 1)),
                    hash(nested),
                    visited(hi - 1, lo, true, 1).len() as i64,
                ];
                let row = &got[(k * 6) as usize..(k * 6 + 6) as usize];
                assert_eq!(row, want, "hi = {hi}, lo = {lo}, k = {k}");
            }
            empty += usize::from(hi < lo);
        }
    }
    assert!(empty > 0);
}

/// The stepped loops' leaves are proved too: the made-up counters and the declared `j`s are
/// modelled like any loop and local.
#[test]
fn stepped_loops_are_proved() {
    common::assert_every_leaf_proved("stepped.mf", STEPPED, &backend(), 2);
}

/// The loop's own counter keeps its meaning inside the body: subscripts, conditions, nested
/// loops' bounds, a nested loop counting down over it.
#[test]
fn the_counter_reads_as_before_in_the_body() {
    let src = "void tri(int N, int B, const float a[N][N], float c[N][N]) {
  assume(N >= 1 && B >= 1 && N % B == 0);
  meta_schedule {
    meta_for (int v = 0; v < N / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        for (int j = N - 1; j >= 0; j--) {
          float s = 0.0f;
          for (int t = j; t >= 0; t -= 2)
            if (t != j) s = s + a[i][t];
          for (int t2 = j + 1; t2 < N; t2++) s = s - a[t2][j];
          c[i][j] = j % 2 == 0 ? s : c[i][j] + s;
        }
      }
  }
}
";
    let f = checked(src);
    let n = 5usize;
    let fill = |a: &str, i: usize| Value::Float(if a == "a" { (i % 7) as f32 * 0.25 - 0.5 } else { (i % 3) as f32 });
    let out = common::run_serial(&f, &[("N", n as i64), ("B", 1)], &fill);
    let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 * 0.25 - 0.5).collect();
    let mut c: Vec<f32> = (0..n * n).map(|i| (i % 3) as f32).collect();
    for i in 0..n {
        for j in (0..n).rev() {
            let mut s = 0.0f32;
            let mut t = j as i64;
            while t >= 0 {
                if t as usize != j {
                    s += a[i * n + t as usize];
                }
                t -= 2;
            }
            for t2 in j + 1..n {
                s -= a[t2 * n + j];
            }
            c[i * n + j] = if j % 2 == 0 { s } else { c[i * n + j] + s };
        }
    }
    let got: Vec<f32> = out["c"].data.iter().map(|v| match v {
        Value::Float(x) => *x,
        other => panic!("{other:?}"),
    }).collect();
    assert_eq!(got, c);
}

/// Every file name the made-up counter could take is already the user's: `j_down` and
/// `j_down2` are the program's own scalars, read after the loop, and the counter becomes
/// `j_down3`; the results are C's.
#[test]
fn a_user_name_like_the_made_up_counter_is_left_alone() {
    let src = "void clash(int N, int B, int j_down, long out[N][3]) {
  assume(N >= 1 && B >= 1 && N % B == 0 && j_down >= 0);
  meta_schedule {
    meta_for (int v = 0; v < N / B; v++)
      meta_for (int u = 0; u < B; u++) {
        int k = v * B + u;
        long j_down2 = 0;
        for (int j = k + j_down; j >= 0; j -= 2)
          j_down2 = j_down2 * 10 + j % 10 + j_down;
        out[k][0] = j_down2;
        out[k][1] = j_down;
        long s = 0;
        for (int j = k; j > -1; j--) s = s * 10 + j;
        out[k][2] = s;
      }
  }
}
";
    let f = checked(src);
    for jd in [0i64, 3] {
        let out = common::run_serial(&f, &[("N", 4), ("B", 2), ("j_down", jd)], &|_, _| Value::Long(0));
        let got: Vec<i64> = out["out"].data.iter().map(|v| v.as_i64()).collect();
        for k in 0..4i64 {
            let want0 = visited(k + jd, 0, true, 2).into_iter().fold(0, |s, j| s * 10 + j % 10 + jd);
            let want2 = visited(k, -1, false, 1).into_iter().fold(0, |s, j| s * 10 + j);
            assert_eq!(&got[(k * 3) as usize..(k * 3 + 3) as usize], [want0, jd, want2], "j_down = {jd}, k = {k}");
        }
    }
    // The generated kernel holds the user's two names and the made-up `j_down3`.
    let dir = common::scratch("downward_clash");
    let path = dir.join("clash.mf");
    std::fs::write(&path, src).unwrap();
    let out = dir.join("out");
    let o = metafork(&["gen", "--emit-cuda", path.to_str().unwrap(), "-o", out.to_str().unwrap(), "--verify"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let leaf = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|x| x == "cu") && p.to_string_lossy().contains("_leaf")).unwrap();
    let cu = std::fs::read_to_string(&leaf).unwrap();
    assert!(cu.contains("j_down3") && cu.contains("j_down2") && cu.contains("j_down"), "{cu}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A serial loop counting down around a schedule (on the host) works too.
#[test]
fn a_host_loop_counting_down_around_a_schedule() {
    let src = "void sweep(int N, int B, int T, float c[N]) {
  assume(N >= 1 && B >= 1 && N % B == 0 && T >= 0);
  for (int t = T; t > 0; t--) {
    meta_schedule {
      meta_for (int v = 0; v < N / B; v++)
        meta_for (int u = 0; u < B; u++)
          c[v * B + u] = c[v * B + u] * 2.0f + t;
    }
  }
}
";
    let f = checked(src);
    let out = common::run_serial(&f, &[("N", 4), ("B", 2), ("T", 3)], &|_, i| Value::Float(i as f32));
    let got: Vec<f32> = out["c"].data.iter().map(|v| match v {
        Value::Float(x) => *x,
        other => panic!("{other:?}"),
    }).collect();
    let want: Vec<f32> = (0..4).map(|i| (1..=3).rev().fold(i as f32, |c, t| c * 2.0 + t as f32)).collect();
    assert_eq!(got, want);
}

/// Two host loops counting down with one counter name, each defining `s`, then a schedule
/// after both. A sweep found the scalar `t = T - t_down` computed in the later schedule's
/// launcher, where `t_down` is not defined (nvcc refused it; `gen` and `verify` passed), and
/// two definitions of `s` (or of `t`) became one kernel parameter. Each definition now has a
/// name of its own, a schedule takes only the scalars it can see, every leaf is proved and
/// every unit compiles.
#[test]
fn host_scalars_of_sibling_loops_stay_apart() {
    let src = "void twice(int T, int n, const float a[n], float c[n]) {
  assume(T >= 0 && n >= 1);
  for (int t = T; t >= 0; t--) {
    int s = 2 * t;
    meta_schedule {
      meta_for (int v = 0; v < n; v++)
        meta_for (int u = 0; u < 32; u++)
          if (u == 0)
            c[v] = a[v] + (float)(s + t);
    }
  }
  for (int t = T; t > 1; t -= 2) {
    int s = t + 7;
    meta_schedule {
      meta_for (int v = 0; v < n; v++)
        meta_for (int u = 0; u < 32; u++)
          if (u == 0)
            c[v] = c[v] * (float)(s - t);
    }
  }
  meta_schedule {
    meta_for (int v = 0; v < n; v++)
      meta_for (int u = 0; u < 32; u++)
        if (u == 0)
          c[v] = c[v] * 2.0f;
  }
}
";
    let f = checked(src);
    let names: Vec<&str> = f.derived.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["t", "s", "t_2", "s_2"]);
    let last = f.schedules.last().unwrap();
    assert!(f.derived_in_scope(last).is_empty(), "{:?}", f.derived_in_scope(last));
    // The serial program at T = 4: the first loop's last step (t = 0) leaves c = a; the second
    // loop (t = 4, 2) multiplies by s - t = 7 twice; the last schedule doubles: c = 98 a.
    let out = common::run_serial(&f, &[("T", 4), ("n", 3)], &|_, i| Value::Float(i as f32));
    let got: Vec<f32> = out["c"].data.iter().map(|v| match v {
        Value::Float(x) => *x,
        other => panic!("{other:?}"),
    }).collect();
    let want: Vec<f32> = (0..3).map(|i| 98.0 * i as f32).collect();
    assert_eq!(got, want);
    let (dir, out) = common::gen_and_verify("sibling_host_scalars", "twice.mf", src);
    common::assert_nvcc_compiles(&dir, &common::cu_files(&out, ".cu"));
}

// ---- refusals, at the right line and column ----

/// `src`'s first diagnostic is at the `$` marker (removed before checking) and says `message`.
fn refused(src: &str, message: &str) -> String {
    let at = src.find('$').expect("a `$` marker");
    let clean = src.replacen('$', "", 1);
    let before = &clean[..at];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap().chars().count() + 1;
    let err = match check_source("case.mf", &clean) {
        Ok(_) => panic!("accepted, but should fail with `{message}`:\n{clean}"),
        Err(e) => e,
    };
    let (l, c, m) = err.positions().remove(0);
    let rendered = err.render(false);
    assert!(m.contains(message), "message `{m}` does not contain `{message}`\n{rendered}");
    assert_eq!((l, c), (line, col), "wrong position for `{m}`\n{rendered}");
    assert!(rendered.contains(&format!("case.mf:{line}:{col}")), "render lacks file:line:col:\n{rendered}");
    m
}

fn schedule(loops: &str) -> String {
    format!("void f(int N, int B, float alpha, const float a[N], float c[N]) {{\n  assume(N >= 1 && B >= 1 && N % B == 0);\n  meta_schedule {{\n{loops}\n  }}\n}}\n")
}

fn kernel(body: &str) -> String {
    schedule(&format!("    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int k = i * B + j;\n{body}\n      }}"))
}

#[test]
fn a_meta_for_counting_down_says_what_to_write() {
    let m = refused(&schedule("    meta_for (int i = N / B - 1; i $>= 0; i--)\n      meta_for (int j = 0; j < B; j++)\n        c[i * B + j] = a[i * B + j];"), "`meta_for` loops must count up by 1");
    assert!(m.contains("meta_for (int i = 0; i < N / B; i++)"), "{m}");
    let m = refused(&schedule("    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = B; j $> 0; --j)\n        c[i * B + j - 1] = a[i * B + j - 1];"), "`meta_for` loops must count up by 1");
    assert!(m.contains("meta_for (int j = 1; j < B + 1; j++)"), "{m}");
    let m = refused(&schedule("    meta_for (int i = N - 1; i $>= 0; i -= 2)\n      meta_for (int j = 0; j < B; j++)\n        c[i] = a[i];"), "`meta_for` loops must count up by 1");
    assert!(m.contains("meta_for (int i = lo; i < hi; i++)"), "{m}");
}

#[test]
fn assigning_the_counter_of_a_loop_counting_down_is_refused() {
    refused(&kernel("        for (int t = N - 1; t >= 0; t--) { c[t] = 0; $t = t - 1; }"), "cannot assign to loop counter `t`");
    refused(&kernel("        for (int t = N - 1; t >= 0; t--)\n          if (t > 2) $t--;"), "cannot assign to loop counter `t`");
}

#[test]
fn a_step_that_counts_the_other_way_is_refused() {
    refused(&kernel("        for (int t = N; t $>= 0; t += 1) c[k] = 0;"), "expected `<` or `<=` in the loop condition: the step `t += ...` counts up");
    refused(&kernel("        for (int t = N; t >= 0; t -= $0) c[k] = 0;"), "the loop step must be a positive integer constant");
    refused(&kernel("        for (int t = N; t >= 0; t -= $k) c[k] = 0;"), "the loop step must be a positive integer constant");
    refused(&kernel("        for (int t = N; t >= 0; t $= t - 1) c[k] = 0;"), "expected the step of a loop counting down");
    refused(&kernel("        for (int t = 0; t < N; t$--) c[k] = 0;"), "a loop counting down tests `k >= lo` or `k > lo`");
    refused(&kernel("        for (int t = N; t >= $t - 5; t--) c[k] = 0;"), "the loop's bound cannot use its own counter `t`");
}

#[test]
fn a_start_the_body_writes_is_refused() {
    refused(&kernel("        int top = N - 1;\n        for (int t = $top; t >= 0; t--) { c[t] = 0; top = 0; }"), "the start of a loop counting down cannot read `top`");
}

#[test]
fn a_loop_counting_down_between_the_groups_is_refused() {
    refused(
        &schedule("    meta_for (int i = 0; i < N / B; i++)\n      for (int $t = 1; t >= 0; t--)\n        meta_for (int j = 0; j < B; j++)\n          c[i * B + j] = a[i * B + j] + t;"),
        "a serial loop between a schedule's `meta_for` groups must count up",
    );
}
