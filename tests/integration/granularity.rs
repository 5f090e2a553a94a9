//! Reducing thread granularity: applied where the work items of a thread are provably
//! independent, refused where they are not, and the grid grows by the number of items.

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use metafork::strategy::granularity::reduce_granularity;

fn kernel_of(name: &str, src: &str) -> (metafork::frontend::model::KernelFunction, Kernel) {
    let mut p = check_source(name, src).unwrap_or_else(|d| panic!("{}", d.render(false)));
    let k = p.kernels.remove(0);
    let kernel = Kernel::from_schedule(&k, &k.schedules[0]).unwrap();
    (k, kernel)
}

fn example(name: &str) -> (metafork::frontend::model::KernelFunction, Kernel) {
    let path = format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"));
    kernel_of(&path, &std::fs::read_to_string(&path).unwrap())
}

#[test]
fn applies_to_the_papers_examples_and_grows_the_grid() {
    let b = Backend::default();
    for (name, factor) in [("matadd", "2"), ("jacobi1d", "s"), ("transpose", "s"), ("matmul", "s"), ("vecadd", "s")] {
        let (f, k) = example(name);
        let r = reduce_granularity(&f, &k, &b).unwrap().unwrap_or_else(|| panic!("{name}: not applied"));
        assert_eq!(r.grid[0].to_string(), format!("{} * {factor}", k.grid[0]), "{name}");
        assert_eq!(r.block, k.block, "{name}: the block is unchanged");
    }
}

#[test]
fn refuses_loops_that_carry_a_scalar() {
    let b = Backend::default();
    for name in ["matvec", "conv1d"] {
        let (f, k) = example(name);
        assert!(reduce_granularity(&f, &k, &b).unwrap().is_none(), "{name}");
    }
}

#[test]
fn refuses_items_that_touch_the_same_element() {
    let b = Backend::default();
    // Iteration k reads what iteration k - 1 wrote: a real dependence.
    let chain = "void chain(int N, int B, int s, float a[N]) {\n  assume(N >= 1 && B >= 1 && s >= 2);\n  meta_schedule {\n    meta_for (int i = 0; i < N / (B * s); i++)\n      meta_for (int j = 0; j < B; j++)\n        for (int k = 1; k < s; k++) {\n          int p = (i * B + j) * s + k;\n          a[p] = a[p - 1] + 1.0f;\n        }\n  }\n}\n";
    let (f, k) = kernel_of("chain.mf", chain);
    assert!(reduce_granularity(&f, &k, &b).unwrap().is_none());
    // Two statements writing the same element: their order matters.
    let twice = "void twice(int N, int B, float a[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++) {\n        int p = i * B + j;\n        a[p] = 1.0f;\n        a[p] = a[p] * 2.0f;\n      }\n  }\n}\n";
    let (f, k) = kernel_of("twice.mf", twice);
    assert!(reduce_granularity(&f, &k, &b).unwrap().is_none());
}

/// Each item runs on its own thread, and every such thread runs the rest of the body too.
/// Refused: a local computed before the items from an element one item writes (sweep's
/// `nesterov_step`: the thread of `w[i] -= ...vi...` recomputed `vi` from `v[i]` while the
/// other item's thread wrote it); a write outside the items (every item's thread would make
/// it); and items inside a serial loop that feed each other across its iterations (the threads
/// run the loop apart, so an item's iteration 1 may run before the other's iteration 0).
/// Applied: the same shapes without the dependence, and register blocking, whose items stay on
/// one thread, still takes a granularity loop a local before it reads into.
#[test]
fn refuses_items_whose_threads_share_the_rest_of_the_body_unsafely() {
    let b = Backend::default();
    let kernel = |decls: &str, items: &str, after: &str| format!("void f(int N, int B, float mu, const float g[N], float v[N], float w[N], float y[N][5], float z[N][5]) {{\n  assume(N >= 1 && B >= 1);\n  meta_schedule {{\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = i * B + j;\n        if (p < N) {{\n{decls}{items}        }}\n{after}      }}\n  }}\n}}\n");
    let applies = |src: &str| {
        let (f, k) = kernel_of("f.mf", src);
        reduce_granularity(&f, &k, &b).unwrap().is_some()
    };
    let nesterov_items = "          v[p] = vi;\n          w[p] -= 0.1f * (gi + mu * vi);\n";
    assert!(!applies(&kernel("          float gi = g[p];\n          float vi = mu * v[p] + gi;\n", nesterov_items, "")), "nesterov's momentum read before its write");
    assert!(applies(&kernel("          float gi = g[p];\n          float vi = mu * g[p] + gi;\n", nesterov_items, "")), "no element of `v` read before the items");
    let with_after = |after: &str| format!("void f(int N, int B, int s, const float g[N], float v[N], float y[N]) {{\n  assume(N >= 1 && B >= 1 && s >= 1);\n  int dim = N / (B * s);\n  meta_schedule {{\n    meta_for (int i = 0; i < dim; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = (i * B + j) * s;\n        for (int k = 0; k < s; k++)\n          v[p + k] = g[p + k];\n{after}      }}\n  }}\n}}\n");
    assert!(!applies(&with_after("        y[i * B + j] = 1.0f;\n")), "a write after the items");
    assert!(applies(&with_after("")), "the items alone");
    let in_loop = |first: &str, second: &str| format!("void f(int N, int B, float y[N][5], float z[N][5]) {{\n  assume(N >= 1 && B >= 1);\n  meta_schedule {{\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++) {{\n        int p = i * B + j;\n        for (int t = 0; t < 4; t++) {{\n          {first}\n          {second}\n        }}\n      }}\n  }}\n}}\n");
    assert!(!applies(&in_loop("y[p][t + 1] = z[p][t];", "z[p][t + 1] = y[p][t];")), "the items feed each other across the loop's iterations");
    assert!(applies(&in_loop("y[p][t + 1] = 1.0f;", "z[p][t + 1] = 2.0f;")), "the items independent across the loop's iterations");
    // Register blocking's items stay on one thread: a local read before its loop is fine.
    let blocked = "void rb(int N, int B, int s, const float g[N], float v[N]) {\n  assume(N >= 1 && B >= 1 && s >= 1);\n  int dim = N / (B * s);\n  meta_schedule {\n    meta_for (int i = 0; i < dim; i++)\n      meta_for (int j = 0; j < B; j++) {\n        int p = (i * B + j) * s;\n        float base = v[p];\n        for (int k = 0; k < s; k++)\n          for (int m = 0; m < 2; m++)\n            v[p + k] = base + g[p + k] * (float)m;\n      }\n  }\n}\n";
    let (f, k) = kernel_of("rb.mf", blocked);
    assert!(reduce_granularity(&f, &k, &b).unwrap().is_none(), "across threads, the thread of item 1 reads `v[p]` while item 0's writes it");
    assert_eq!(metafork::strategy::block::granularity_of(&f, &k, &b).unwrap().as_deref(), Some("s"), "register blocking keeps one thread");
}

#[test]
fn the_reduced_matadd_does_one_element_per_thread() {
    let b = Backend::default();
    let (f, k) = example("matadd");
    let r = reduce_granularity(&f, &k, &b).unwrap().unwrap();
    let text = metafork::emit::cuda::emit_kernel(&f, &r, &[]).unwrap();
    assert!(text.contains("int p = (int)blockIdx.x / 2;"), "{text}");
    assert!(text.contains("int metafork_item = (int)blockIdx.x % 2;"), "{text}");
}
