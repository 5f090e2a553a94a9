//! Caching in shared memory: the paper's footprints (before and after reducing granularity),
//! the decision trees keyed on them, the staged code's shape, and refusals where staging would
//! not be safe or cannot be modelled.

use constraints::solver::Backend;
use metafork::emit::cuda::emit_kernel;
use metafork::frontend::check_source;
use metafork::frontend::model::KernelFunction;
use metafork::kernel::Kernel;
use metafork::strategy::caching::stage;
use metafork::strategy::granularity::reduce_granularity;
use metafork::tree::{build, NodeKind, Strategy};
use std::collections::BTreeSet;

fn kernel_of(name: &str, src: &str) -> (KernelFunction, Kernel) {
    let mut p = check_source(name, src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let k = p.kernels.remove(0);
    let kernel = Kernel::from_schedule(&k, &k.schedules[0]).unwrap();
    (k, kernel)
}

fn example(name: &str) -> (KernelFunction, Kernel) {
    let path = format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"));
    kernel_of(&path, &std::fs::read_to_string(&path).unwrap())
}

#[test]
fn footprints_are_the_papers_before_and_after_reducing_granularity() {
    let b = Backend::default();
    for (name, arrays, full, reduced) in [
        ("jacobi1d", vec!["a"], "2*s*B + 2", "2*B + 2"),
        ("transpose", vec!["a", "c"], "2*s*B0*B1", "2*B0*B1"),
        ("matmul", vec!["a", "b"], "s*ub1*B0 + B0^2", "ub1*B0 + B0^2"),
    ] {
        let (f, k) = example(name);
        let s = stage(&f, &k, &b).unwrap();
        assert_eq!(s.cached, arrays, "{name}: {:?}", s.refused);
        assert_eq!(s.kernel.shared_elements().to_string(), full, "{name}");
        assert_eq!(s.kernel.shared_bytes(), s.kernel.shared_elements() * constraints::Poly::int(4), "{name}: floats");
        let r = reduce_granularity(&f, &k, &b).unwrap().unwrap();
        let s = stage(&f, &r, &b).unwrap();
        assert_eq!(s.kernel.shared_elements().to_string(), reduced, "{name} with granularity reduced");
    }
}

fn shared_constraints(leaf: &metafork::tree::Node) -> BTreeSet<String> {
    leaf.constraints.constraints().iter().map(|c| c.to_string()).filter(|c| c.contains("Z_B")).collect()
}

#[test]
fn jacobi_and_transposition_leaves_are_keyed_on_the_three_shared_memory_cases() {
    let b = Backend::default();
    for (name, full, reduced, elements) in [("jacobi1d", "8*s*B + 8", "8*B + 8", "2*s*B + 2"), ("transpose", "8*s*B0*B1", "8*B0*B1", "2*s*B0*B1")] {
        let (f, k) = example(name);
        let tree = build(&f, k, &b).unwrap();
        let leaves: Vec<_> = tree.leaves().filter(|l| matches!(l.kind, NodeKind::Leaf)).collect();
        let cases: Vec<BTreeSet<String>> = vec![
            [format!("{full} <= Z_B")].into(),
            [format!("{reduced} <= Z_B"), format!("Z_B < {full}")].into(),
            [format!("Z_B < {reduced}"), format!("Z_B < {full}")].into(),
        ];
        for (i, case) in cases.iter().enumerate() {
            let hit = leaves.iter().find(|l| case.is_subset(&shared_constraints(l)));
            let leaf = hit.unwrap_or_else(|| panic!("{name}: no leaf keyed on {case:?}"));
            let staged = leaf.staged.shared_elements().to_string();
            match i {
                0 => assert_eq!(staged, elements, "{name}"),
                1 => assert!(leaf.applied.contains(&Strategy::ReduceGranularity) && !leaf.cached.is_empty(), "{name}: {:?}", leaf.applied),
                _ => assert!(leaf.applied.contains(&Strategy::DropCaching) && leaf.staged.shared.is_empty(), "{name}"),
            }
        }
        // Every kernel leaf lies in exactly one of the three cases.
        for l in &leaves {
            let n = cases.iter().filter(|c| c.is_subset(&shared_constraints(l))).count();
            assert_eq!(n, 1, "{name}: leaf {} has {:?}", l.id, shared_constraints(l));
        }
    }
}

#[test]
fn matrix_multiplication_has_a_shared_memory_leaf_and_one_without() {
    let b = Backend::default();
    let (f, k) = example("matmul");
    let tree = build(&f, k, &b).unwrap();
    let leaves: Vec<_> = tree.leaves().filter(|l| matches!(l.kind, NodeKind::Leaf)).collect();
    let with = leaves.iter().find(|l| l.cached == ["a", "b"] && l.staged.shared.len() == 2).expect("a leaf staging a and b");
    assert!(shared_constraints(with).contains("4*s*ub1*B0 + 4*B0^2 <= Z_B"), "{:?}", shared_constraints(with));
    let without = leaves.iter().find(|l| l.staged.shared.is_empty()).expect("a leaf without shared memory");
    assert!(shared_constraints(without).iter().any(|c| c.starts_with("Z_B < ")), "{:?}", shared_constraints(without));
}

#[test]
fn staged_jacobi_splits_on_the_uniform_step_parity_and_writes_back_after_a_barrier() {
    let b = Backend::default();
    let (f, k) = example("jacobi1d");
    let s = stage(&f, &k, &b).unwrap();
    let cu = emit_kernel(&f, &s.kernel, &[]).unwrap();
    // One version per parity of t, each: loads, barrier, body on tiles, barrier, write-back.
    assert!(cu.contains("if (t % 2) {"), "{cu}");
    assert_eq!(cu.matches("__syncthreads();").count(), 4, "{cu}");
    assert_eq!(cu.matches("a[(long)p1] = a_tile1[").count(), 1, "write-back of the odd steps:\n{cu}");
    assert_eq!(cu.matches("a[(long)np1] = a_tile1[").count(), 1, "write-back of the even steps:\n{cu}");
    // The body reads only tiles.
    assert!(!cu.contains("+ a[(long)np"), "{cu}");
}

#[test]
fn matmul_refills_its_tiles_every_step_of_the_serial_loop() {
    let b = Backend::default();
    let (f, k) = example("matmul");
    let s = stage(&f, &k, &b).unwrap();
    let cu = emit_kernel(&f, &s.kernel, &[]).unwrap();
    let t_loop = cu.find("for (int t = 0; t < dim0; t++) {").expect("the serial loop stays");
    let load = cu.find("a_tile0[metafork_e] = a[").expect("a cooperative load of a");
    assert!(load > t_loop, "loads are inside the serial loop:\n{cu}");
    assert_eq!(cu.matches("__syncthreads();").count(), 2, "after the loads and before the next step:\n{cu}");
}

fn staged_src(body: &str) -> (Vec<String>, Vec<(String, String)>) {
    let src = format!(
        "void f(int N, int B, const int idx[N], float a[N], float x[N]) {{\n  assume(N >= 1 && B >= 1);\n  int dim = N / B;\n  meta_schedule cache(a) {{\n    meta_for (int i = 0; i < dim; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = i * B + j;\n        {body}\n      }}\n  }}\n}}\n"
    );
    let (f, k) = kernel_of("t.mf", &src);
    let s = stage(&f, &k, &Backend::default()).unwrap();
    (s.cached, s.refused)
}

#[test]
fn refuses_arrays_two_threads_write_or_that_cannot_be_modelled() {
    // Every thread of a block writes a[i]: a race, so staging is refused.
    let (cached, refused) = staged_src("a[i] = x[p];");
    assert!(cached.is_empty(), "{refused:?}");
    assert!(refused[0].1.contains("two threads"), "{refused:?}");
    // A subscript read from memory is not a polynomial.
    let (cached, refused) = staged_src("a[idx[p]] = x[p];");
    assert!(cached.is_empty() && refused[0].1.contains("not a polynomial"), "{refused:?}");
    // A write guarded by array data cannot be replayed by the write-back.
    let (cached, refused) = staged_src("if (x[p] > 0) a[p] = x[p];");
    assert!(cached.is_empty() && refused[0].1.contains("condition on data"), "{refused:?}");
    // A subscript through a scalar the body reassigns: the write-back replays declarations
    // only, and the reason names the scalar (it said "depends on data" before).
    let (cached, refused) = staged_src("int q = p; q += 1; a[q - 1] = a[q - 1] + x[p];");
    assert!(cached.is_empty() && refused[0].1.contains("the staged write `a[q - 1]` reads `q`, which the body assigns after declaring it"), "{refused:?}");
    // The same element per thread is fine: staged, one tile of B elements.
    let (cached, refused) = staged_src("a[p] = a[p] + x[p];");
    assert_eq!(cached, ["a"], "{refused:?}");
}

/// A cached array the body writes, with an integer defined before the write: the write-back
/// replays that definition in a block of its own, so the kernel declares no name twice in one
/// scope and nvcc compiles it; every leaf is proved.
#[test]
fn a_written_cached_array_with_a_local_definition_compiles_and_is_proved() {
    let dir = crate::common::scratch("cache-written-local");
    let source = dir.join("f.mf");
    std::fs::write(&source, "void f(int N, int B, float y[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule cache(y) {\n    meta_for (int i = 0; i < (N + B - 1) / B; i++)\n      meta_for (int j = 0; j < B; j++) {\n        int p = i * B + j;\n        if (p < N) y[p] = y[p] + 1;\n      }\n  }\n}\n").unwrap();
    let out = dir.join("out");
    let bin = env!("CARGO_BIN_EXE_metafork");
    let g = std::process::Command::new(bin).args(["gen", "--emit-cuda", source.to_str().unwrap(), "-o", out.to_str().unwrap()]).output().unwrap();
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let sources: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".cu")).collect();
    let staged: Vec<&String> = sources.iter().filter(|n| std::fs::read_to_string(out.join(n)).unwrap().contains("y_tile0")).collect();
    assert!(!staged.is_empty(), "no leaf stages `y`: {sources:?}");
    let v = std::process::Command::new(bin).args(["verify", out.to_str().unwrap()]).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    if let Some(nvcc) = crate::common::nvcc() {
        let unit: String = sources.iter().map(|s| format!("#include \"{s}\"\n")).collect();
        std::fs::write(out.join("unit.cu"), unit).unwrap();
        let o = std::process::Command::new(&nvcc).current_dir(&out).args(["-c", "-O0", "-arch=sm_80", "-o", "unit.o", "unit.cu"]).output().unwrap();
        assert!(o.status.success(), "nvcc rejected the files:\n{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// A `cache(...)` no kernel follows is said: on stderr as `gen` runs, and in `tree.yaml` with
/// the reason (a write guarded by the data, which the write-back cannot replay). A cache every
/// kernel stages says nothing.
#[test]
fn a_cache_no_kernel_follows_is_reported_with_its_reason() {
    let dir = crate::common::scratch("caching-not-applied");
    let src = "void relu(int N, int B, const float x[N], float a[N]) {
  assume(N >= 1 && B >= 1);
  meta_schedule cache(a) {
    meta_for (int g = 0; g < N / B; g++)
      meta_for (int u = 0; u < B; u++) {
        int p = g * B + u;
        if (x[p] > 0)
          a[p] = x[p];
      }
  }
}
";
    std::fs::write(dir.join("j.mf"), src).unwrap();
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(&dir).args(args).output().unwrap();
    let o = run(&["gen", "--emit-cuda", "j.mf", "-o", "out"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("j.mf:3:3: warning: schedule `relu`: `cache(a)` is not applied: "), "{err}");
    let yaml: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(dir.join("out/tree.yaml")).unwrap()).unwrap();
    let reason = yaml["schedules"][0]["not_cached"]["a"].as_str().unwrap_or_default().to_string();
    assert!(!reason.is_empty() && err.contains(&reason), "{yaml:?}");
    let o = run(&["gen", "--emit-cuda", &format!("{}/examples/transpose.mf", env!("CARGO_MANIFEST_DIR")), "-o", "t"]);
    assert!(o.status.success() && o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!std::fs::read_to_string(dir.join("t/tree.yaml")).unwrap().contains("not_cached"));
    // A reason names the access as written, never the model's own names (a quotient's).
    std::fs::write(dir.join("q.mf"), "void q(int n, int B, const float x[n], float y[2 * n + 2]) {\n  assume(n >= 1 && B >= 1);\n  meta_schedule cache(x) {\n    meta_for (int g = 0; g < (2 * n + 2 + B - 1) / B; g++)\n      meta_for (int t = 0; t < B; t++) {\n        int o = g * B + t;\n        if (o < 2 * n + 2) {\n          float acc = 0.0f;\n          for (int k = 0; k < 4; k++) {\n            int num = o - k;\n            if (num >= 0 && num % 2 == 0 && num / 2 < n)\n              acc += x[num / 2];\n          }\n          y[o] = acc;\n        }\n      }\n  }\n}\n").unwrap();
    let o = run(&["gen", "--emit-cuda", "q.mf", "-o", "q"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("q.mf:3:3: warning: schedule `q`: `cache(x)` is not applied: the range over a block of subscript 1 of `x[num / 2]` is not known") && !err.contains('$'), "{err}");
}

/// A ping-pong stencil whose step reads one half of `a` and writes the other,
/// `((t + 1) % 2) * N` and `(t % 2) * N`, bounded by its grid alone (`blocks = (N - 2) / B`, no
/// guard): staged, and every leaf proved. Before, the safety check knew no block index's upper
/// bound and primed the parity per thread, and refused the cache ("two threads may touch the
/// same element"), as it did for the granularity form a user wrote.
#[test]
fn a_ping_pong_stencil_bounded_by_its_grid_is_staged_and_proved() {
    let dir = crate::common::scratch("cache-ping-pong");
    let src = "void pingpong(int T, int N, int B, float a[2 * N]) {
  assume(N >= 3 && B >= 1);
  int blocks = (N - 2) / B;
  for (int t = 0; t < T; t++) {
    meta_schedule cache(a) {
      meta_for (int g = 0; g < blocks; g++)
        meta_for (int l = 0; l < B; l++) {
          int p = g * B + l;
          int dst = ((t + 1) % 2) * N;
          int src = (t % 2) * N;
          a[dst + p + 1] = (a[src + p] + a[src + p + 1] + a[src + p + 2]) / 3.0f;
        }
    }
  }
}
";
    std::fs::write(dir.join("pp.mf"), src).unwrap();
    let bin = env!("CARGO_BIN_EXE_metafork");
    let g = std::process::Command::new(bin).current_dir(&dir).args(["gen", "--emit-cuda", "pp.mf", "-o", "out"]).output().unwrap();
    let err = String::from_utf8_lossy(&g.stderr);
    assert!(g.status.success() && !err.contains("not applied"), "{err}");
    let out = dir.join("out");
    let staged = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "cu")).any(|p| std::fs::read_to_string(p).unwrap().contains("a_tile0"));
    assert!(staged, "no leaf stages `a`");
    let v = std::process::Command::new(bin).args(["verify", out.to_str().unwrap()]).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}

/// A serial loop bounded by the thread index (a triangle: `k <= t`, `k >= t`, `k <= 2 * t`)
/// reads, over the block, the elements from the loop's least start to its greatest end: the
/// tile is that range (`TS` elements; `2 * TS - 1` for `2 * t`), and every leaf is proved.
/// Before, the range of `x[base + k]` was "not known" and the cache was not applied.
#[test]
fn a_triangle_of_serial_iterations_is_cached_as_the_range_the_block_reads() {
    let dir = crate::common::scratch("cache-triangle");
    let src = "void tri(int N, int TS, const long x[2 * N], long y[N], long z[N], long w[N]) {
  assume(N >= 1 && TS >= 1 && N % TS == 0);
  meta_schedule cache(x) {
    meta_for (int tb = 0; tb < N / TS; tb++)
      meta_for (int t = 0; t < TS; t++) {
        int base = tb * TS;
        long s = 0;
        for (int k = 0; k <= t; k++)
          s += x[base + k];
        y[base + t] = s;
      }
  }
  meta_schedule cache(x) {
    meta_for (int tb = 0; tb < N / TS; tb++)
      meta_for (int t = 0; t < TS; t++) {
        long s = 0;
        for (int k = t; k < TS; k++)
          s += x[tb * TS + k];
        z[tb * TS + t] = s;
      }
  }
  meta_schedule cache(x) {
    meta_for (int tb = 0; tb < N / TS; tb++)
      meta_for (int t = 0; t < TS; t++) {
        long s = 0;
        for (int k = 0; k <= 2 * t; k++)
          s += x[tb * TS + k];
        w[tb * TS + t] = s;
      }
  }
}
";
    std::fs::write(dir.join("tri.mf"), src).unwrap();
    let bin = env!("CARGO_BIN_EXE_metafork");
    let g = std::process::Command::new(bin).current_dir(&dir).args(["gen", "--emit-cuda", "tri.mf", "-o", "out"]).output().unwrap();
    let err = String::from_utf8_lossy(&g.stderr);
    assert!(g.status.success() && !err.contains("not applied"), "{err}");
    let out = dir.join("out");
    let staged = |schedule: &str| -> BTreeSet<String> {
        std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{schedule}_leaf")) && p.extension().is_some_and(|x| x == "cu"))
            .flat_map(|p| std::fs::read_to_string(p).unwrap().lines().filter(|l| l.contains("metafork_offset += ")).map(|l| l.trim().to_string()).collect::<Vec<_>>())
            .collect()
    };
    assert_eq!(staged("tri_0"), BTreeSet::from(["metafork_offset += (long)8 * TS;".to_string()]));
    assert_eq!(staged("tri_1"), BTreeSet::from(["metafork_offset += (long)8 * TS;".to_string()]));
    assert_eq!(staged("tri_2"), BTreeSet::from(["metafork_offset += (long)16 * TS - (long)8;".to_string()]));
    let v = std::process::Command::new(bin).args(["verify", out.to_str().unwrap()]).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}

/// What a helper's hunt for false proofs in triangles found, each now refused with a warning
/// and the rest of the program proved:
/// - a range empty for some parameter values (`k < t - 5` with `TS <= 5`) gave a tile of
///   negative size, and the next tile an origin before shared memory's start: every leaf was
///   proved while the loads wrote below the buffer;
/// - a bound the body reassigns (`int m = t; for (k = 0; k <= m; k++) { ... m = t + TS; }`)
///   was read as its value before the loop: a tile of `TS` where the loop reads `2*TS`;
/// - a tile sized by a counter of a loop around the schedule, or by a derived quotient with
///   no polynomial bound, failed `gen` with an unlocated error.
#[test]
fn triangles_with_empty_ranges_reassigned_bounds_or_unkeyable_sizes_are_not_cached() {
    let dir = crate::common::scratch("cache-triangle-refused");
    let bin = env!("CARGO_BIN_EXE_metafork");
    let head = "  assume(N >= 1 && TS >= 1 && N % TS == 0);\n  int nb = N / TS;\n";
    let cases = [
        ("empty", format!("void e(int N, int TS, const float x[N], const float z[N], float y[N]) {{\n{head}  meta_schedule cache(x, z) {{\n    meta_for (int b = 0; b < nb; b++)\n      meta_for (int t = 0; t < TS; t++) {{\n        float s = 0;\n        for (int k = 0; k < t - 5; k++) s += x[b * TS + k];\n        for (int k = 0; k <= t; k++) s += z[b * TS + k];\n        y[b * TS + t] = s;\n      }}\n  }}\n}}\n"), "`cache(x)` is not applied: its tile over a block would hold `TS - 6` elements along subscript 1 of `x`, which the program's facts allow to be negative"),
        ("reassigned", format!("void r(int N, int TS, const float x[2*N], float y[N]) {{\n{head}  meta_schedule cache(x) {{\n    meta_for (int b = 0; b < nb; b++)\n      meta_for (int t = 0; t < TS; t++) {{\n        float s = 0;\n        int m = t;\n        for (int k = 0; k <= m; k++) {{ s += x[b * TS + k]; if (k == 0) m = t + TS; }}\n        y[b * TS + t] = s;\n      }}\n  }}\n}}\n"), "`cache(x)` is not applied: the range over a block of subscript 1 of `x[b * TS + k]` is not known"),
        ("hostloop", format!("void h(int N, int TS, int T, const float x[N + T], float y[N]) {{\n{head}  assume(T >= 1);\n  for (int it = 0; it < T; it++) {{\n    meta_schedule cache(x) {{\n      meta_for (int b = 0; b < nb; b++)\n        meta_for (int t = 0; t < TS; t++) {{\n          float s = 0;\n          for (int k = 0; k <= t + it; k++) s += x[b * TS + k];\n          y[b * TS + t] += s;\n        }}\n    }}\n  }}\n}}\n"), "`cache(x)` is not applied: its tile over a block would hold `it + TS` elements along subscript 1 of `x`: that reads `it`, the counter of a loop around the schedule"),
        ("quotient", format!("void q(int N, int TS, const float x[2*N], float y[N]) {{\n{head}  meta_schedule cache(x) {{\n    meta_for (int b = 0; b < nb; b++)\n      meta_for (int t = 0; t < TS; t++) {{\n        float s = 0;\n        for (int k = 0; k <= t + nb; k++) s += x[b * TS + k];\n        y[b * TS + t] = s;\n      }}\n  }}\n}}\n"), "`cache(x)` is not applied: `nb` (= `N / TS`) sizes this code's shared memory"),
    ];
    for (name, src, warning) in &cases {
        std::fs::write(dir.join(format!("{name}.mf")), src).unwrap();
        let g = std::process::Command::new(bin).current_dir(&dir).args(["gen", "--emit-cuda", &format!("{name}.mf"), "-o", name]).output().unwrap();
        let err = String::from_utf8_lossy(&g.stderr);
        assert!(g.status.success() && err.contains(&format!("{name}.mf:")) && err.contains(warning), "{name}: {err}");
        let leaves: Vec<String> = std::fs::read_dir(dir.join(name)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.to_string_lossy().contains("_leaf") && p.extension().is_some_and(|x| x == "cu")).map(|p| std::fs::read_to_string(p).unwrap()).collect();
        assert!(!leaves.is_empty() && leaves.iter().all(|l| !l.contains("x_tile")), "{name}: `x` staged");
        let v = std::process::Command::new(bin).args(["verify", dir.join(name).to_str().unwrap()]).output().unwrap();
        let out = String::from_utf8_lossy(&v.stdout);
        if *name == "empty" {
            // `z` is still staged, after `x`'s refusal, and every leaf proved.
            assert!(leaves.iter().any(|l| l.contains("z_tile0")) && v.status.success(), "{out}");
        } else if *name == "reassigned" {
            // The bound is not modelled: unverified (the eight points match), never a defect.
            assert_eq!(v.status.code(), Some(4), "{out}");
        } else {
            assert!(v.status.success(), "{name}: {out}");
        }
    }
}

/// A tile whose size reads a quotient of the subscripts (`k < n / B`) cannot be allocated by
/// the launch: the cache is refused with a warning (before, `gen` failed naming the model's
/// `$aux_q...`). Sized by a derived scalar (`d = n / B`), the tile's row stride `d` is not a
/// parameter either: the bank-conflict forks on it are left out (before, the dispatcher could
/// not evaluate `d % 2 != 0` and `gen` failed with no place), its size is bounded in the
/// parameters (`4*n`), and the leaves are proved.
#[test]
fn a_tile_sized_by_a_quotient_is_refused_or_bounded() {
    let dir = crate::common::scratch("cache-quotient-size");
    let program = |before: &str, bound: &str| format!("void f(int N, int B, int n, const float a[N][n], float c[N]) {{\n  assume(N >= 1 && B >= 1 && n >= 1);\n  {before}\n  meta_schedule cache(a) {{\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        float s = 0;\n        for (int k = 0; k < {bound}; k++)\n          s += a[i * B + j][k];\n        c[i * B + j] = s;\n      }}\n  }}\n}}\n");
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(&dir).args(args).output().unwrap();
    std::fs::write(dir.join("q.mf"), program("", "n / B")).unwrap();
    let o = run(&["gen", "--emit-cuda", "q.mf", "-o", "q"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("q.mf:4:3: warning: schedule `f`: `cache(a)` is not applied: the size of its tile over a block reads a quotient") && !err.contains('$'), "{err}");
    std::fs::write(dir.join("d.mf"), program("int d = n / B;", "d")).unwrap();
    let o = run(&["gen", "--emit-cuda", "d.mf", "-o", "d"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("not applied"), "{err}");
    let yaml = std::fs::read_to_string(dir.join("d/tree.yaml")).unwrap();
    assert!(yaml.contains("shared_memory_bytes: 4*n") && !yaml.contains("d % 2"), "{yaml}");
    for out in ["q", "d"] {
        let v = run(&["verify", out]);
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    }
}

/// A program that computes in `long` (a `long` size: arrays past 2^31 elements) gets the tool's
/// own index arithmetic in `long` too. Before, a cached leaf computed its tile's corner as
/// `int g0 = (int)blockIdx.x * B + e` and guarded it with `g0 < (int)L + 2` (at L = 3e9 no
/// block loaded its tile), and a merged leaf's `2 * (int)blockIdx.x` wrapped past 2^31 blocks;
/// `verify` proved both (it reasons over unbounded integers). The same program in `int`
/// keeps its tiles' arithmetic in 32 bits.
#[test]
fn programs_that_compute_in_long_get_long_tile_corners_and_merged_blocks() {
    let blur = |ty: &str| {
        format!(
            "void blur({ty} L, int B, const float x[L + 2], float y[L]) {{
  assume(L >= 1 && B >= 1);
  meta_schedule cache(x) {{
    meta_for ({ty} v = 0; v < (L + B - 1) / B; v++)
      meta_for (int u = 0; u < B; u++) {{
        {ty} i = v * B + u;
        if (i < L)
          y[i] = x[i] + x[i + 1] + x[i + 2];
      }}
  }}
}}
"
        )
    };
    let texts = |out: &std::path::Path| -> Vec<(std::path::PathBuf, String)> { crate::common::cu_files(out, "_leaf").into_iter().map(|p| (p.clone(), std::fs::read_to_string(&p).unwrap())).collect() };
    let (dir, out) = crate::common::gen_and_verify("caching-long", "blur.mf", &blur("long"));
    let leaves = texts(&out);
    for (path, text) in &leaves {
        for narrowed in ["(int)L", "int metafork_g0", "= (int)blockIdx.x *", "2 * (int)blockIdx.x"] {
            assert!(!text.contains(narrowed), "{}: `{narrowed}`\n{text}", path.display());
        }
    }
    assert!(leaves.iter().any(|(_, t)| t.contains("long metafork_g0 = (long)(int)blockIdx.x * B")), "no cached leaf");
    assert!(leaves.iter().any(|(_, t)| t.contains("2 * (long)(int)blockIdx.x + metafork_merged")), "no merged leaf");
    crate::common::assert_nvcc_compiles(&dir, &leaves.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>());
    let (_, out) = crate::common::gen_and_verify("caching-int", "blur.mf", &blur("int"));
    assert!(texts(&out).iter().any(|(_, t)| t.contains("int metafork_g0 = (int)blockIdx.x * B")), "the int program's tiles narrowed");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cached array written back through locals the body also declares (`nxt`, the plane the
/// step writes): the compute phase's copy of `nxt`, which nothing reads there once the store
/// goes to the tile, is not emitted (it was kept because the write-back block re-declares and
/// reads its own `nxt`), and a leaf whose tiles a refusal dropped does not list caching among
/// its strategies.
#[test]
fn a_local_only_the_write_back_reads_is_not_left_unused_in_the_compute_phase() {
    let src = "void leap(int N, int T, int B, double c2, double u[3][N]) {
  assume(N >= 3 && T >= 1 && B >= 1);
  int g = (N + B - 1) / B;
  for (int t = 0; t < T; t++) {
    meta_schedule cache(u) {
      meta_for (int b = 0; b < g; b++)
        meta_for (int tt = 0; tt < B; tt++) {
          int i = b * B + tt;
          int cur = (t + 1) % 3;
          int prv = t % 3;
          int nxt = (t + 2) % 3;
          if (i >= 1 && i < N - 1)
            u[nxt][i] = 2.0 * u[cur][i] - u[prv][i] + c2 * (u[cur][i - 1] - 2.0 * u[cur][i] + u[cur][i + 1]);
        }
    }
  }
}
";
    let (dir, out) = crate::common::gen_and_verify("caching-write-back-locals", "leap.mf", src);
    let leaves = crate::common::cu_files(&out, "_leaf");
    let texts: Vec<String> = leaves.iter().map(|p| std::fs::read_to_string(p).unwrap()).collect();
    let cached: Vec<&String> = texts.iter().filter(|t| t.contains("u_tile2[")).collect();
    assert!(!cached.is_empty(), "no leaf writes through a tile");
    for t in &cached {
        // One declaration of `nxt`: the write-back's.
        assert_eq!(t.matches("int nxt = ").count(), 1, "{t}");
    }
    for t in &texts {
        let line = t.lines().find(|l| l.starts_with("// Strategies applied:")).unwrap();
        let applied = line.split(". Applied on this path").next().unwrap();
        assert!(!(applied.contains("cache in shared memory") && applied.contains("do not cache")), "{line}");
        assert_eq!(applied.contains("cache in shared memory"), t.contains("metafork_shared[]"), "{line}");
    }
    crate::common::assert_nvcc_compiles(&dir, &leaves);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cached subscript dividing a value of either sign (`(u - 1) % 4`, which C rounds toward
/// zero): the tile's index has no expression for the model's truncated division, and `gen`
/// failed with "cannot lower to LLVM IR: unknown variable `$aux_tr...`", no place given. The
/// cache is now refused with a located warning naming the subscript, and the leaves are proved.
#[test]
fn a_cached_subscript_dividing_a_signed_value_is_refused_with_a_warning() {
    let dir = crate::common::scratch("cache-signed-division");
    std::fs::write(dir.join("neg.mf"), "void neg(int N, int B, const float a[N + 4], float b[N]) {\n  assume(N >= 1 && B >= 1);\n  int dim = N / B;\n  meta_schedule cache(a) {\n    meta_for (int v = 0; v < dim; v++)\n      meta_for (int u = 0; u < B; u++) {\n        int i = v * B + u;\n        b[i] = a[(u - 1) % 4 + 3];\n      }\n  }\n}\n").unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(&dir).args(["gen", "--emit-cuda", "--verify", "neg.mf", "-o", "out"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}{}", String::from_utf8_lossy(&o.stdout));
    assert!(err.contains("neg.mf:4:3: warning") && err.contains("`cache(a)` is not applied: subscript 1 of `a[(u - 1) % 4 + 3]` divides a value that may be negative"), "{err}");
    assert!(!err.contains("$aux"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tile's box against other blocks' writes. Block `i` reads `a[p + 1]` only where `j < B -
/// 1` and its thread 0 writes `a[p]`: its accesses span `[i*B, i*B + B - 1]`, but the box was
/// taken over every thread, `B + 1` elements, so each block loaded the first element of the
/// next block, which that block's thread 0 writes (`verify`: a race between blocks, on a
/// race-free program). A guard that bounds the thread index now narrows the box (`B`
/// elements); where none does (`j != B - 1`), the cache is refused, since loading the box would
/// race. Both programs' leaves are proved.
#[test]
fn a_tile_never_loads_an_element_another_block_writes() {
    let source = |guard: &str| {
        format!("void f(int N, int B, float a[N], float x[N]) {{\n  assume(N >= 2 && B >= 2);\n  int dim = N / B;\n  meta_schedule cache(a) {{\n    meta_for (int i = 0; i < dim; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = i * B + j;\n        if ({guard}) x[p] = a[p + 1];\n        if (j == 0) a[p] = 0;\n      }}\n  }}\n}}\n")
    };
    let narrowed = source("j < B - 1");
    let (f, k) = kernel_of("narrowed.mf", &narrowed);
    let s = stage(&f, &k, &Backend::default()).unwrap();
    assert_eq!(s.cached, ["a"], "{:?}", s.refused);
    let sizes: Vec<String> = s.kernel.shared.iter().map(|t| t.extents[0].to_string()).collect();
    assert_eq!(sizes, ["B"], "the tile holds the block's B elements, not B + 1");
    let unnarrowed = source("j != B - 1");
    let (f, k) = kernel_of("unnarrowed.mf", &unnarrowed);
    let s = stage(&f, &k, &Backend::default()).unwrap();
    assert!(s.cached.is_empty(), "{:?}", s.kernel.shared);
    assert!(s.refused[0].1.contains("spans elements another block may write"), "{:?}", s.refused);
    for (name, src) in [("narrowed", &narrowed), ("unnarrowed", &unnarrowed)] {
        crate::common::gen_and_verify(&format!("box_{name}"), &format!("{name}.mf"), src);
    }
}

/// A program that reads outside its array (`a[k]` for `k < B`, where the facts allow `B > N`)
/// and stages it: the staged copy reads tile elements no block loaded (its loads are guarded to
/// the array), and the leaf's checks, which see only those loads, proved it beside the
/// unstaged leaves' defect (a helper's hunt). `verify` now checks the schedule as written
/// under each staged leaf's constraints too: every leaf is a defect. With the fact that keeps
/// `k` inside (`B <= N`), the staged leaves are proved.
#[test]
fn a_staged_leaf_of_a_schedule_that_reads_outside_its_array_is_a_defect() {
    let dir = crate::common::scratch("cache-outside-extent");
    let bin = env!("CARGO_BIN_EXE_metafork");
    let program = |fact: &str| {
        format!(
            "void f(int N, int B, const float a[N], float b[N]) {{\n  assume(N >= 64 && B >= 1{fact});\n  meta_schedule cache(a) {{\n    meta_for (int w = 0; w < N; w++)\n      meta_for (int u = 0; u < B; u++)\n        if (u == 0) {{\n          float s = 0;\n          for (int k = 0; k < B; k++)\n            s = s + a[k];\n          b[w] = s;\n        }}\n  }}\n}}\n"
        )
    };
    for (name, fact) in [("outside", ""), ("inside", " && B <= N")] {
        std::fs::write(dir.join(format!("{name}.mf")), program(fact)).unwrap();
        let g = std::process::Command::new(bin).current_dir(&dir).args(["gen", "--emit-cuda", &format!("{name}.mf"), "-o", name]).output().unwrap();
        let err = String::from_utf8_lossy(&g.stderr);
        assert!(g.status.success(), "{name}: {err}");
        let leaves: Vec<String> = std::fs::read_dir(dir.join(name)).unwrap().map(|e| e.unwrap().path()).filter(|p| p.to_string_lossy().contains("_leaf") && p.extension().is_some_and(|x| x == "cu")).map(|p| std::fs::read_to_string(p).unwrap()).collect();
        let v = std::process::Command::new(bin).args(["verify", dir.join(name).to_str().unwrap()]).output().unwrap();
        let out = String::from_utf8_lossy(&v.stdout);
        assert!(!err.contains("not applied") && leaves.iter().any(|l| l.contains("a_tile")), "{name}: `a` not staged: {err}");
        if name == "outside" {
            assert_eq!(v.status.code(), Some(3), "{out}");
            assert!(out.contains("`a[k]` reads outside `a`") && !out.contains(": proved"), "{out}");
        } else {
            assert!(v.status.success(), "{out}");
        }
    }
}
