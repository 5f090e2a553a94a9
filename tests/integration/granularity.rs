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

#[test]
fn the_reduced_matadd_does_one_element_per_thread() {
    let b = Backend::default();
    let (f, k) = example("matadd");
    let r = reduce_granularity(&f, &k, &b).unwrap().unwrap();
    let text = metafork::emit::cuda::emit_kernel(&f, &r, &[]).unwrap();
    assert!(text.contains("int p = (int)blockIdx.x / 2;"), "{text}");
    assert!(text.contains("int metafork_item = (int)blockIdx.x % 2;"), "{text}");
}
