//! `meta_for` bounds that read an enclosing `meta_for` counter (the language page: "`lo` and
//! `hi` are expressions in parameters and outer loop counters"), and `meta_for (...; v <= b;
//! ...)`. A grid or block has one size per launch, so such a loop runs over its most trips and
//! its own bounds guard the body (`frontend::boxed`). The serial program (the verifier's
//! reference) keeps the loops as written: checked here against references computed in Rust,
//! then every leaf proved against it, and the kernels compiled where nvcc is installed.
use crate::common;

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::frontend::model::KernelFunction;
use metafork::verify::value::Value;

fn backend() -> Backend {
    Backend::new(metafork::verify::QUERY_TIMEOUT_MS)
}

fn checked(src: &str) -> KernelFunction {
    let mut p = check_source("tri.mf", src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    p.kernels.remove(0)
}

/// The lower triangle of `B x B` tiles of `C += A * A^T` (syrk's shape): the grid's second
/// loop stops at the first (`w <= v`), and `A` is staged in shared memory.
const LOWER_TILES: &str = "void lower_tiles(int N, int M, int B, const float A[N][M], float C[N][N]) {
  assume(N >= 1 && M >= 1 && B >= 1 && N % B == 0);
  int nt = N / B;
  meta_schedule cache(A) {
    meta_for (int v = 0; v < nt; v++)
      meta_for (int w = 0; w <= v; w++)
        meta_for (int u = 0; u < B; u++)
          meta_for (int q = 0; q < B; q++) {
            int i = v * B + u;
            int j = w * B + q;
            float s = 0.0f;
            for (int k = 0; k < M; k++)
              s += A[i][k] * A[j][k];
            C[i][j] += s;
          }
  }
}
";

fn fill(array: &str, i: usize) -> Value {
    Value::Float(if array == "A" { (i % 7) as f32 - 3.0 } else { 100.0 + i as f32 })
}

#[test]
fn a_triangle_of_tiles_updates_only_its_tiles() {
    let f = checked(LOWER_TILES);
    let s = &f.schedules[0];
    // The grid is the square of tiles; the body is guarded by `w`'s own bound.
    assert_eq!((s.grid[1].lo.to_string(), s.grid[1].hi.to_string()), ("0".to_string(), "nt".to_string()));
    assert!(s.body.len() == 1 && matches!(&s.body[0].kind, metafork::frontend::ast::StmtKind::If { cond, .. } if cond.to_string() == "w < v + 1"), "{:?}", s.body);
    // The serial program is the triangle as written.
    let (n, m, b) = (6usize, 3usize, 2usize);
    let out = common::run_serial(&f, &[("N", n as i64), ("M", m as i64), ("B", b as i64)], &fill);
    let a = |i: usize, k: usize| fill("A", i * m + k).as_f64() as f32;
    for i in 0..n {
        for j in 0..n {
            let before = fill("C", i * n + j).as_f64() as f32;
            let want = if j / b <= i / b { before + (0..m).fold(0.0f32, |s, k| s + a(i, k) * a(j, k)) } else { before };
            assert_eq!(out["C"].data[i * n + j].as_f64() as f32, want, "C[{i}][{j}]");
        }
    }
    // Every leaf computes it, cached ones included, without races or stray accesses.
    let (dir, gen_out) = common::gen_and_verify("triangle_tiles", "lower_tiles.mf", LOWER_TILES);
    let leaves = common::cu_files(&gen_out, "_leaf");
    assert!(leaves.iter().any(|p| std::fs::read_to_string(p).unwrap().contains("__syncthreads")), "no leaf stages `A`");
    common::assert_nvcc_compiles(&dir, &leaves);
}

/// A triangle inside the block (`q <= u`: `B x B` threads, the upper ones idle) next to a band
/// of grid blocks (`v <= w < v + 2`: a row of blocks of which two work), and a three-deep
/// triangle (`r < q <= u`).
#[test]
fn triangles_in_the_block_and_bands_in_the_grid_are_proved() {
    let src = "void tri(int N, int B, const float a[N + 1][1024], float c[N][N + 1][1024]) {
  assume(N >= 1 && B >= 1 && B <= 32);
  meta_schedule {
    meta_for (int v = 0; v < N; v++)
      meta_for (int w = v; w < min(v + 2, N); w++)
        meta_for (int u = 0; u < B; u++)
          meta_for (int q = 0; q <= u; q++)
            c[v][w][u * 32 + q] = a[w][u * 32 + q] + a[v][q * 32 + u];
  }
}
";
    // `min` in the band's bound: not affine in `v`, so the grid loop is refused at the bound.
    let refused = check_source("tri.mf", src).unwrap_err().render(false);
    assert!(refused.contains("tri.mf:5:") && refused.contains("the bounds of grid loop `w` use `v`") && !refused.contains("loop `q`"), "{refused}");
    let src = src.replace("w < min(v + 2, N)", "w < v + 2");
    let f = checked(&src);
    let s = &f.schedules[0];
    assert_eq!(s.block.iter().map(|l| l.extent.as_ref().unwrap().to_string()).collect::<Vec<_>>(), ["B", "B"]);
    let out = common::run_serial(&f, &[("N", 3), ("B", 2)], &|_, i| Value::Float(i as f32));
    let (n, b) = (3usize, 2usize);
    for v in 0..n {
        for w in 0..=n {
            for u in 0..b {
                for q in 0..b {
                    let at = (v * (n + 1) + w) * 1024 + u * 32 + q;
                    let written = w >= v && w < v + 2 && q <= u;
                    let want = if written { (w * 1024 + u * 32 + q + v * 1024 + q * 32 + u) as f32 } else { at as f32 };
                    assert_eq!(out["c"].data[at].as_f64() as f32, want, "c[{v}][{w}][{u}][{q}]");
                }
            }
        }
    }
    let deep = "void deep(int N, int B, const float a[N][32], float c[N][32][1024]) {
  assume(N >= 1 && B >= 1 && B <= 32);
  meta_schedule {
    meta_for (int v = 0; v < N; v++)
      meta_for (int u = 0; u < B; u++)
        meta_for (int q = 0; q <= u; q++)
          meta_for (int r = 0; r < q; r++)
            c[v][u][q * 32 + r] = a[v][r] * 2.0f;
  }
}
";
    let f = checked(deep);
    assert_eq!(f.schedules[0].block.iter().map(|l| l.extent.as_ref().unwrap().to_string()).collect::<Vec<_>>(), ["B", "B", "B - 1"]);
    for (name, text) in [("tri.mf", src.as_str()), ("deep.mf", deep)] {
        common::assert_every_leaf_proved(name, text, &backend(), 4);
    }
}

/// A block loop bounded by the serial loop between the grid and the block (a helper's sweep:
/// `u = k` and `u < k` gave internal errors, "unknown variable `k`"): its start is computed
/// before that loop, so it runs over the loop's whole range and is guarded; a bound not affine
/// in `k` is refused at the bound.
#[test]
fn block_loops_bounded_by_the_tile_loop_counter() {
    let shape = |bounds: &str| {
        format!(
            "void t(int N, int B, float c[N][N]) {{
  assume(N >= 0 && B >= 1 && B <= 8);
  int nt = N / B;
  meta_schedule {{
    meta_for (int v = 0; v < nt; v++)
      for (int k = 0; k < B; k++)
        meta_for ({bounds}) {{
          int i = v * B + u;
          c[i][k] = c[i][k] + 1.0f;
        }}
  }}
}}
"
        )
    };
    for (bounds, extent) in [("int u = k; u < B; u++", "B"), ("int u = 0; u <= k; u++", "B")] {
        let src = shape(bounds);
        let f = checked(&src);
        assert_eq!(f.schedules[0].block[0].extent.as_ref().map(|e| e.to_string()).as_deref(), Some(extent), "{bounds}");
        common::assert_every_leaf_proved("t.mf", &src, &backend(), 4);
    }
    let e = check_source("t.mf", &shape("int u = 0; u < k * k; u++")).unwrap_err().render(false);
    assert!(e.contains("t.mf:7:") && e.contains("the bounds of block loop `u` read `k`, the counter of the serial loop between the grid and the block"), "{e}");
}

/// The blocks a guard on the grid counters leaves idle (a triangle's upper tiles; by hand, the
/// odd blocks of `v % 2 == 0`) stage no tile: the staging, the body and the write-back sit
/// inside the guard. Before, they loaded their tiles anyway: wasted traffic for syrk's upper
/// tiles, and, for a cached array that is written, a race with the working blocks (the odd
/// block read `x[i]` while the even one wrote it; `verify` reported the leaf as a DEFECT).
#[test]
fn blocks_a_grid_guard_leaves_idle_stage_nothing() {
    let even_odd = "void even_odd(int N, int B, float a, float x[N]) {
  assume(N >= 1 && B >= 1 && N % B == 0);
  int nt = N / B;
  meta_schedule cache(x) {
    meta_for (int v = 0; v < 2 * nt; v++)
      meta_for (int u = 0; u < B; u++) {
        int i = (v / 2) * B + u;
        if (v % 2 == 0)
          x[i] = a * x[i] + 1.0f;
      }
  }
}
";
    let lower_written = LOWER_TILES.replace("cache(A)", "cache(A, C)");
    for (name, src, guard) in [("even_odd", even_odd, "if (v % 2 == 0) {"), ("lower_written", lower_written.as_str(), "if (w < v + 1) {")] {
        let (dir, out) = common::gen_and_verify(&format!("idle_{name}"), &format!("{name}.mf"), src);
        let leaves = common::cu_files(&out, "_leaf");
        let mut staged = 0;
        for p in &leaves {
            let text = std::fs::read_to_string(p).unwrap();
            let Some(first_load) = text.find("_tile0[metafork_e") else { continue };
            staged += 1;
            let opened = text.find(guard).unwrap_or_else(|| panic!("{}: no `{guard}`:\n{text}", p.display()));
            assert!(opened < first_load, "{}: a tile is loaded before `{guard}`:\n{text}", p.display());
            let barriers: Vec<usize> = text.match_indices("__syncthreads()").map(|(at, _)| at).collect();
            assert!(barriers.iter().all(|b| *b > opened), "{}: a barrier outside `{guard}`:\n{text}", p.display());
        }
        assert!(staged > 0, "{name}: no leaf stages a tile");
        common::assert_nvcc_compiles(&dir, &leaves);
    }
    // A helper's sweep: the same with an `else` (`if (w == v) a[i] = ...; else c[i][w] = ...`),
    // a guard whose other conjunct is the thread's (`w == v && u < B`), and a square grid. The
    // cached `a` is read and written by block (v, v) alone; the other blocks staged it anyway
    // (a race `verify` reported). The scope is now split into versions on such conditions,
    // and only the version that reads `a` stages it.
    let triangle = |body: &str, w_bound: &str| {
        format!(
            "void d(int N, int B, float a[N], float c[N][N]) {{
  assume(N >= 1 && B >= 1 && N % B == 0);
  int nt = N / B;
  meta_schedule cache(a) {{
    meta_for (int v = 0; v < nt; v++)
      meta_for (int w = 0; {w_bound}; w++)
        meta_for (int u = 0; u < B; u++) {{
          int i = v * B + u;
          {body}
        }}
  }}
}}
"
        )
    };
    let cases = [
        ("with_else", triangle("if (w == v) a[i] = a[i] * 2.0f; else c[i][w] = 1.0f;", "w <= v")),
        ("thread_conjunct", triangle("if (w == v && u < B) a[i] = a[i] * 2.0f;", "w <= v")),
        ("square_with_else", triangle("if (w == 0) a[i] = a[i] * 2.0f; else c[i][w] = 1.0f;", "w < nt")),
    ];
    for (name, src) in &cases {
        let (_, out) = common::gen_and_verify(&format!("idle_{name}"), &format!("{name}.mf"), src);
        assert!(common::cu_files(&out, "_leaf").iter().any(|p| std::fs::read_to_string(p).unwrap().contains("a_tile0[metafork_e")), "{name}: no leaf stages `a`");
    }
}
