//! A serial loop between the grid and the block (`for (k ...) meta_for (u ...)`) forks the
//! block's iterations at each of its iterations and joins them before the next, so a thread may
//! read what another wrote an iteration before (a block-local time loop). The kernel keeps that
//! order with a barrier at the end of each iteration (`join`); such programs were refused as
//! racing. Matrix multiplication's tile loop, whose threads share nothing, gets none.
use crate::common;

use constraints::solver::Backend;
use metafork::frontend::check_source;

/// Each block smooths its own `B` elements `T` times, reading its right neighbour's value from
/// the iteration before (the last thread reads its own).
const BLOCK_SMOOTHING: &str = "void smooth(int N, int T, int B, float x[2][N]) {
  assume(N >= 1 && T >= 1 && B >= 1);
  int dim = N / B;
  meta_schedule {
    meta_for (int v = 0; v < dim; v++)
      for (int k = 0; k < T; k++)
        meta_for (int u = 0; u < B; u++) {
          int e = v * B + u;
          int f = u + 1 < B ? e + 1 : e;
          x[(k + 1) % 2][e] = 0.5f * (x[k % 2][e] + x[k % 2][f]);
        }
  }
}
";

#[test]
fn threads_reading_a_neighbours_last_iteration_are_joined_and_proved() {
    let mut p = check_source("smooth.mf", BLOCK_SMOOTHING).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let f = p.kernels.remove(0);
    let kernel = metafork::kernel::Kernel::from_schedule(&f, &f.schedules[0]).unwrap();
    let barriers = |k: &metafork::kernel::Kernel| {
        let mut n = 0;
        for s in &k.body {
            metafork::frontend::ast::walk_stmt(s, &mut |s| n += matches!(s.kind, metafork::frontend::ast::StmtKind::Barrier) as usize, &mut |_| {});
        }
        n
    };
    assert_eq!(barriers(&kernel), 1);
    common::assert_every_leaf_proved("smooth.mf", BLOCK_SMOOTHING, &Backend::new(metafork::verify::QUERY_TIMEOUT_MS), 4);
    let (dir, out) = common::gen_and_verify("joins", "smooth.mf", BLOCK_SMOOTHING);
    common::assert_nvcc_compiles(&dir, &common::cu_files(&out, "_leaf"));
    // The paper's matrix multiplication: a tile loop between the groups, and no barrier.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/matmul.mf")).unwrap();
    let p = check_source("matmul.mf", &text).unwrap();
    let f = &p.kernels[0];
    assert!(!f.schedules[0].between.is_empty());
    assert_eq!(barriers(&metafork::kernel::Kernel::from_schedule(f, &f.schedules[0]).unwrap()), 0);
}

/// A cached leaf of a joined loop ends each iteration with one barrier: the join and the
/// barrier before the next iteration's tile loads are one (a helper's sweep saw two in a row).
#[test]
fn a_cached_leaf_joins_once_per_iteration() {
    let src = "void cs(int N, int B, int s, int K, const float w[N], float a[2][N]) {
  assume(N >= 1 && B >= 1 && s >= 1 && K >= 1 && N % (B * s) == 0);
  meta_schedule cache(w) {
    meta_for (int v = 0; v < N / (B * s); v++)
      for (int k = 0; k < K; k++)
        meta_for (int u = 0; u < B; u++)
          for (int g = 0; g < s; g++) {
            int i = v * B * s + g * B + u;
            int lo = v * B * s;
            int src = k % 2;
            float l = i > lo ? a[src][i - 1] : a[src][i];
            a[1 - src][i] = l * w[i] + a[src][i];
          }
  }
}
";
    let (_, out) = common::gen_and_verify("joins-cached", "cs.mf", src);
    let mut cached = 0;
    for leaf in common::cu_files(&out, "_leaf") {
        let text = std::fs::read_to_string(&leaf).unwrap();
        let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        cached += usize::from(text.contains("w_tile"));
        assert!(!lines.windows(2).any(|w| w[0] == "__syncthreads();" && w[1] == "__syncthreads();"), "two barriers in a row in {}:\n{text}", leaf.display());
    }
    assert!(cached > 0, "no leaf stages `w`");
}
