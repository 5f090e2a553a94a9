//! Issue 26: per-thread arrays of constant size (`float acc[4];`), which the front end makes
//! one scalar per element (`frontend::local_arrays`), unrolling the serial loops whose counters
//! reach their subscripts. Checked: C's values (initializer lists flat and braced, zero fill,
//! loops counting down, `long` counters, triangular loops, a user name like an element's, a
//! C++ keyword as a name, a parameter's name hidden) against a reference computed here; every
//! leaf of the trees proved, through `metafork gen` and `verify`, and compiled by `nvcc`; and
//! a located error for each way a program can go wrong. Also: a fact `n % 4 == 0` is a
//! divisibility constraint of the tree, so no leaf is keyed on `n % 4 != 0`.
use crate::common;

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::verify::value::Value;

fn backend() -> Backend {
    Backend::new(metafork::verify::QUERY_TIMEOUT_MS)
}

fn metafork(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

/// Every form the arrays take, each result written to `out[i][..]`.
const LOCALS: &str = "void locals(int N, int B, const float x[N][4], float out[N][6]) {
  assume(N >= 1 && B >= 1);
  int g = (N + B - 1) / B;
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = v * B + u;
        if (i < N) {
          float w[3] = {0.5f, 0.25f};
          float m[2][2] = {{1.0f}, {2.0f, 3.0f}};
          float acc_0 = 10.0f;
          float acc[4];
          for (int k = 0; k < 4; k++)
            acc[k] = x[i][k] * w[k % 3] + acc_0;
          float tri[3];
          for (int k = 0; k < 3; k++)
            for (int j = 0; j <= k; j++)
              tri[j] += x[i][k];
          float rev = 0.0f;
          for (int k = 3; k >= 0; k--)
            rev = rev * 2.0f + acc[k];
          for (long k = 0; k < 2; k++)
            out[i][k] = m[k][0] * acc[k] + m[k][1] * acc[k + 2];
          out[i][2] = rev;
          out[i][3] = tri[0];
          out[i][4] = tri[1] + tri[2];
          int class[2] = {7};
          float x[1] = {class[0] + class[1]};
          out[i][5] = x[0];
        }
      }
  }
}
";

fn input(i: usize) -> f32 {
    (i % 11) as f32 * 0.5 - 2.0
}

/// What C computes for row `i` of `out`, in C's order of operations.
fn reference(i: usize) -> [f32; 6] {
    let x = |k: usize| input(i * 4 + k);
    let w = [0.5f32, 0.25, 0.0];
    let acc: Vec<f32> = (0..4).map(|k| x(k) * w[k % 3] + 10.0).collect();
    let mut tri = [0.0f32; 3];
    for k in 0..3 {
        for t in tri.iter_mut().take(k + 1) {
            *t += x(k);
        }
    }
    let rev = (0..4).rev().fold(0.0f32, |r, k| r * 2.0 + acc[k]);
    let m = [[1.0f32, 0.0], [2.0, 3.0]];
    [m[0][0] * acc[0] + m[0][1] * acc[2], m[1][0] * acc[1] + m[1][1] * acc[3], rev, tri[0], tri[1] + tri[2], 7.0]
}

#[test]
fn local_arrays_compute_what_c_computes() {
    let mut p = check_source("locals.mf", LOCALS).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    for (n, b) in [(1, 1), (5, 2), (7, 4)] {
        let out = common::run_serial(&f, &[("N", n), ("B", b)], &|a, i| if a == "x" { Value::Float(input(i)) } else { Value::Float(f32::NAN) });
        let got: Vec<f32> = out["out"].data.iter().map(|v| match v {
            Value::Float(x) => *x,
            other => panic!("{other:?}"),
        }).collect();
        let want: Vec<f32> = (0..n as usize).flat_map(reference).collect();
        assert_eq!(got, want, "N = {n}, B = {b}");
    }
}

/// The arrays' programs through `gen` and `verify`: every leaf proved and matching the serial
/// program; the kernels hold the elements as scalars (the user's `acc_0` kept, the array's
/// first element renamed `acc2_0`), no array declaration, and compile with nvcc.
#[test]
fn local_array_programs_generate_and_every_leaf_is_proved() {
    let b = backend();
    for (name, src) in [("locals.mf", LOCALS), ("gemv4.mf", GEMV4)] {
        common::assert_every_leaf_proved(name, src, &b, 2);
    }
    let (dir, out) = common::gen_and_verify("local_arrays_gen", "locals.mf", LOCALS);
    let kernels = common::cu_files(&out, "_leaf");
    for k in &kernels {
        let cu = std::fs::read_to_string(k).unwrap();
        for want in ["acc_0 = 10.0f", "acc2_0", "acc2_3", "tri_2"] {
            assert!(cu.contains(want), "{} lacks `{want}`:\n{cu}", k.display());
        }
        assert!(!cu.contains("acc[") && !cu.contains("tri["), "{}:\n{cu}", k.display());
    }
    common::assert_nvcc_compiles(&dir, &kernels);
    // The unrolled copies' subscripts read as one would write them for that value: gemv4's
    // `a[r + k][j]` is `a[r][j]` at `k = 0`, not `a[r + 0][j]`.
    let (_, out) = common::gen_and_verify("local_arrays_gemv4", "gemv4.mf", GEMV4);
    for k in common::cu_files(&out, "_leaf") {
        let cu = std::fs::read_to_string(&k).unwrap();
        assert!(cu.contains("(long)r * (long)n") && !cu.contains("r + 0"), "{}:\n{cu}", k.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Four accumulators per thread, as a user keeps a register tile; `n % 4 == 0` is a fact.
const GEMV4: &str = "void gemv4(int n, int B, const float a[n][n], const float x[n], float y[n]) {
  assume(n >= 1 && B >= 1 && n % 4 == 0);
  int nb = (n / 4 + B - 1) / B;
  meta_schedule {
    meta_for (int v = 0; v < nb; v++)
      meta_for (int u = 0; u < B; u++) {
        int r = (v * B + u) * 4;
        if (r < n) {
          float acc[4];
          for (int j = 0; j < n; j++)
            for (int k = 0; k < 4; k++)
              acc[k] += a[r + k][j] * x[j];
          for (int k = 3; k >= 0; k--)
            y[r + k] = acc[k];
        }
      }
  }
}
";

/// A fact `n % 4 == 0` enters the tree's systems as a divisibility: the unrolling fork's
/// `outside n % 4 != 0` side, which the fact contradicts (and where `a[r + 1][j]` would
/// overflow), is not built, so no leaf is keyed on it.
#[test]
fn a_divisibility_fact_prunes_the_branches_it_contradicts() {
    let b = backend();
    let (f, tree) = common::trees_of("gemv4.mf", GEMV4, &b).into_iter().next().unwrap();
    let fact = f.facts.iter().find(|x| x.condition.to_string() == "n % 4 == 0").expect("the fact");
    assert_eq!(fact.constraint.as_ref().map(|c| c.to_string()), Some("n % 4 == 0".to_string()));
    for node in &tree.nodes {
        for c in node.constraints.constraints() {
            assert_ne!(c.to_string(), "n % 4 != 0", "node {}: {}", node.id, node.decisions.join(" / "));
        }
    }
}

/// Each mistake gets a located error, and nothing is written.
#[test]
fn local_array_mistakes_get_located_errors() {
    let cases: [(&str, &str, &str); 12] = [
        ("float a[n]; y[i] = a[0];", "needs a constant extent; `n` is not one", "9:9"),
        ("float a[0]; y[i] = 1;", "has extent 0", "9:9"),
        ("float a[100000]; y[i] = a[0];", "more than 1024 elements", "9:7"),
        ("float a[4]; for (int j = 0; j < n; j++) a[j] = x[j]; y[i] = a[0];", "its upper bound `n` is not a constant", "9:33"),
        ("float a[4]; for (int k = 0; k <= 4; k++) a[k] = x[i]; y[i] = a[0];", "is 4, outside its extent 4", "9:44"),
        ("float a[4]; y[i] = a + 1;", "used as a value; index it with 1 constant subscript", "9:20"),
        ("float a[4][2]; y[i] = a[1];", "has 2 dimensions, indexed here with 1", "9:23"),
        ("float a[2] = {1, 2, 3}; y[i] = a[0];", "3 values in the initializer", "9:14"),
        ("float a[4]; for (int k = 0; k < 5000; k++) a[k % 4] += x[i]; y[i] = a[0];", "would take 5000 iterations", "9:13"),
        ("float a[4] = 3; y[i] = a[0];", "initialised with a braced list", "9:14"),
        ("float a[4], b = 1; y[i] = b;", "declare a per-thread array on its own", "9:11"),
        ("float a[4]; int j = 2; j = 3; y[i] = a[j];", "subscript `j` of per-thread array `a` is not a constant", "9:40"),
    ];
    let dir = common::scratch("local_arrays_errors");
    for (k, (body, message, at)) in cases.iter().enumerate() {
        let src = format!(
            "void f(int n, int B, const float x[n], float y[n]) {{
  assume(n >= 1 && B >= 1);
  int nb = (n + B - 1) / B;
  meta_schedule {{
    meta_for (int v = 0; v < nb; v++)
      meta_for (int u = 0; u < B; u++) {{
        int i = v * B + u;
        if (i < n) {{
{body}
        }}
      }}
  }}
}}
"
        );
        let path = dir.join(format!("bad{k}.mf"));
        std::fs::write(&path, &src).unwrap();
        let out = dir.join(format!("out{k}"));
        let o = metafork(&["gen", "--emit-cuda", path.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{body}: {err}");
        assert!(err.contains(message), "{body}: expected `{message}` in\n{err}");
        assert!(err.contains(&format!("bad{k}.mf:{at}:")), "{body}: expected the location {at} in\n{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{body}: {} was written", out.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
