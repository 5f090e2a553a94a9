//! Unrolling by a factor (with its trip-count condition) and prefetching a reused global
//! value into a register: where they apply, the code they make, and that the verifier proves
//! it and finds it equal to the serial program, exactly where the condition holds.

use crate::common;

use constraints::solver::Backend;
use metafork::frontend::check_source;
use metafork::kernel::Kernel;
use metafork::strategy::prefetch::prefetch;
use metafork::strategy::unroll::{unroll, FACTOR};
use metafork::verify::differential::{run_point, Outcome, Programs};
use metafork::verify::machine::RunOptions;
use metafork::verify::twothread::{check, Verdict};
use std::collections::BTreeMap;

fn example(name: &str) -> (metafork::frontend::model::KernelFunction, Kernel) {
    let path = format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"));
    let mut p = check_source(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    let k = p.kernels.remove(0);
    let kernel = Kernel::from_schedule(&k, &k.schedules[0]).unwrap();
    (k, kernel)
}

fn point(values: &[(&str, i64)]) -> BTreeMap<String, i64> {
    values.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn passes(f: &metafork::frontend::model::KernelFunction, kernel: &Kernel, at: &BTreeMap<String, i64>) -> bool {
    let programs = Programs::new(f, 0, kernel).unwrap();
    matches!(run_point(f, &programs, at, 7, RunOptions { detect_races: true, step_budget: None, kernel_only: false }), Outcome::Passed(_))
}

/// The two-thread check under the root facts plus `extra`.
fn proved(f: &metafork::frontend::model::KernelFunction, kernel: &Kernel, extra: &[constraints::Constraint], b: &Backend) -> bool {
    let mut context = metafork::strategy::base_context(f);
    extra.iter().for_each(|c| context.add(c.clone()));
    let r = check(f, kernel, &context, b);
    matches!(r.verdict, Verdict::Proved) || panic!("{:?}", r.verdict)
}

#[test]
fn unrolls_the_innermost_serial_loop_with_its_trip_count_condition() {
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    // (example, the condition, a point where it holds, one where it does not)
    let cases: [(&str, &str, &[(&str, i64)], &[(&str, i64)]); 5] = [
        ("transpose", "s % 4 == 0", &[("N", 8), ("B0", 2), ("B1", 1), ("s", 4)], &[("N", 6), ("B0", 3), ("B1", 1), ("s", 2)]),
        ("matvec", "N % 4 == 0", &[("N", 12), ("B", 5)], &[("N", 10), ("B", 5)]),
        ("conv1d", "K % 4 == 0", &[("N", 9), ("K", 8), ("B", 4)], &[("N", 9), ("K", 6), ("B", 4)]),
        ("matmul", "B0 % 4 == 0", &[("n", 8), ("B0", 4), ("ub1", 2), ("s", 2)], &[("n", 6), ("B0", 2), ("ub1", 3), ("s", 1)]),
        ("jacobi1d", "s % 4 == 0", &[("N", 20), ("T", 3), ("B", 2), ("s", 4)], &[("N", 20), ("T", 3), ("B", 2), ("s", 2)]),
    ];
    for (name, condition, holds, fails) in cases {
        let (f, k) = example(name);
        let u = unroll(&f, &k).unwrap_or_else(|| panic!("{name}: not unrolled"));
        assert_eq!(u.trip_count.to_string(), condition, "{name}");
        let text = metafork::emit::cuda::emit_kernel(&f, &u.kernel, &[]).unwrap();
        assert!(text.contains(&format!("{} += {FACTOR})", u.counter)), "{name}: {text}");
        assert!(proved(&f, &u.kernel, &[u.trip_count.clone()], &b), "{name}");
        assert!(passes(&f, &u.kernel, &point(holds)), "{name} at {holds:?}");
        // Without the condition the last iterations are missing: the condition is needed.
        assert!(!passes(&f, &u.kernel, &point(fails)), "{name} at {fails:?} should differ");
    }
}

#[test]
fn does_not_unroll_without_a_polynomial_trip_count() {
    // No serial loop in the body; heat3d's only serial loop sits between the grid and the
    // block loops (where staging puts its barriers).
    for name in ["jacobi2d", "matadd", "softplus", "heat3d"] {
        let (f, k) = example(name);
        assert!(unroll(&f, &k).is_none(), "{name}");
    }
    // A trip count that depends on the thread is no condition on the parameters.
    let src = "void tri(int N, int B, float y[N]) {\n  assume(N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        for (int k = 0; k < j; k++)\n          y[i * B + j] += 1.0f;\n  }\n}\n";
    let mut p = check_source("tri.mf", src).unwrap();
    let f = p.kernels.remove(0);
    let k = Kernel::from_schedule(&f, &f.schedules[0]).unwrap();
    assert!(unroll(&f, &k).is_none());
}

#[test]
fn prefetches_matmuls_accumulated_coefficient() {
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let (f, k) = example("matmul");
    let p = prefetch(&f, &k, &b).expect("matmul's c[p][q + w * ub1] is reused across z");
    let text = metafork::emit::cuda::emit_kernel(&f, &p, &[]).unwrap();
    assert!(text.contains("float c_reg = c[") && text.contains("c_reg += a["), "{text}");
    assert_eq!(text.matches("c[").count(), 2, "one load and one write-back of c: {text}");
    assert!(proved(&f, &p, &[], &b));
    for at in [[("n", 8), ("B0", 4), ("ub1", 2), ("s", 2)], [("n", 6), ("B0", 3), ("ub1", 3), ("s", 1)]] {
        assert!(passes(&f, &p, &point(&at)), "{at:?}");
    }
    // Unrolling the prefetched code still works, and the two compose.
    let u = unroll(&f, &p).unwrap();
    assert!(proved(&f, &u.kernel, &[u.trip_count.clone()], &b));
    assert!(passes(&f, &u.kernel, &point(&[("n", 8), ("B0", 4), ("ub1", 2), ("s", 2)])));
}

#[test]
fn does_not_prefetch_what_the_loop_indexes_or_guards() {
    let b = Backend::default();
    // matvec, conv1d, rowmax: every global access walks the loop's counter.
    for name in ["matvec", "conv1d", "rowmax", "jacobi1d", "transpose"] {
        let (f, k) = example(name);
        assert!(prefetch(&f, &k, &b).is_none(), "{name}");
    }
    // A loop that may not run: the load would happen where the original never reads.
    let src = "void maybe(int N, int M, int B, float y[N]) {\n  assume(N >= 1 && M >= 0 && B >= 1);\n  meta_schedule {\n    meta_for (int i = 0; i < N / B; i++)\n      meta_for (int j = 0; j < B; j++)\n        for (int k = 0; k < M; k++)\n          y[i * B + j] += 1.0f;\n  }\n}\n";
    let mut p = check_source("maybe.mf", src).unwrap();
    let f = p.kernels.remove(0);
    let k = Kernel::from_schedule(&f, &f.schedules[0]).unwrap();
    assert!(prefetch(&f, &k, &b).is_none());
    // With M >= 1 it applies.
    let src = src.replace("M >= 0", "M >= 1");
    let mut p = check_source("surely.mf", &src).unwrap();
    let f = p.kernels.remove(0);
    let k = Kernel::from_schedule(&f, &f.schedules[0]).unwrap();
    let pf = prefetch(&f, &k, &b).expect("applies once the loop surely runs");
    assert!(passes(&f, &pf, &point(&[("N", 12), ("M", 3), ("B", 4)])));
}

/// The tree unrolls once every counter is settled: matrix-vector's leaves fork on `N % 4 == 0`,
/// the `case` leaves run the unrolled loop and the `outside` ones the loop as written, every
/// register counter is evaluated again on the unrolled code, and every leaf is proved.
#[test]
fn the_tree_unrolls_on_the_side_of_the_trip_count_condition() {
    use metafork::tree::{Counter, NodeKind, Strategy};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let path = format!("{}/examples/matvec.mf", env!("CARGO_MANIFEST_DIR"));
    let (f, tree) = common::trees_of(&path, &std::fs::read_to_string(&path).unwrap(), &b).remove(0);
    let forks: Vec<_> = tree.nodes.iter().flat_map(|n| n.children.iter().map(move |e| (n, e))).filter(|(_, e)| e.counter == Counter::TripCount).collect();
    assert!(!forks.is_empty(), "no fork on the trip count");
    for (_, e) in &forks {
        let child = &tree.nodes[e.child];
        let text = metafork::emit::cuda::emit_kernel(&f, &child.staged, &[]).unwrap();
        match e.kind {
            "case" => {
                assert_eq!(e.constraint.to_string(), "N % 4 == 0");
                // Unrolled here (then perhaps merged below), or on the accepting side of the
                // forks below.
                let unrolled = child.applied.contains(&Strategy::Unroll);
                assert!(unrolled || !child.children.is_empty());
                assert_eq!(text.contains("k += 4)"), unrolled, "{text}");
            }
            "outside" => {
                assert_eq!(e.constraint.to_string(), "N % 4 != 0");
                // The kernel as it is (iteration merging may still fork below).
                assert!(!child.applied.contains(&Strategy::Unroll) && !text.contains("k += 4)"), "{text}");
                assert!(child.children.iter().all(|c| c.counter == Counter::GridFill), "{:?}", child.children);
            }
            other => panic!("edge {other}"),
        }
    }
    // Below a case edge, the unrolled code is taken only where it fits and occupancy allows;
    // every refusal keeps the code as it was, so unrolling never costs a kernel. (The forks
    // below a node whose code is unrolled are iteration merging's.)
    fn below(tree: &metafork::tree::Tree, id: usize, refused: bool, out: &mut Vec<(usize, bool)>) {
        let n = &tree.nodes[id];
        if n.children.is_empty() {
            out.push((id, refused));
        }
        for e in &n.children {
            assert!(matches!(e.counter, Counter::Registers | Counter::RegistersPerBlock | Counter::Occupancy | Counter::GridFill), "{e:?}");
            let unroll_gate = !n.applied.contains(&Strategy::Unroll) && !refused;
            below(tree, e.child, refused || (unroll_gate && e.kind == "refuse"), out);
        }
    }
    let mut occupancy_forks = 0;
    for (_, e) in forks.iter().filter(|(_, e)| e.kind == "case") {
        let mut leaves = Vec::new();
        below(&tree, e.child, false, &mut leaves);
        for (id, refused) in leaves {
            let leaf = &tree.nodes[id];
            assert!(matches!(leaf.kind, NodeKind::Leaf), "leaf {id} below a trip-count case has no kernel");
            assert_eq!(leaf.applied.contains(&Strategy::Unroll), !refused, "leaf {id}");
            let text = metafork::emit::cuda::emit_kernel(&f, &leaf.staged, &[]).unwrap();
            assert_eq!(text.contains("k += 4)"), !refused, "leaf {id}: {text}");
        }
        for n in tree.nodes.iter().filter(|n| n.children.iter().any(|c| c.counter == Counter::Occupancy)) {
            let accept = n.children.iter().find(|c| c.kind == "accept").unwrap();
            let unrolled = &tree.nodes[accept.child];
            let r = unrolled.counters.registers;
            assert!(metafork::tree::warp_allocation(r) > metafork::tree::warp_allocation(n.counters.registers), "an occupancy fork where unrolling keeps the allocation");
            assert_eq!(accept.constraint, metafork::tree::occupancy_allows(&tree.machine, r));
            occupancy_forks += 1;
        }
    }
    assert!(occupancy_forks > 0, "matvec's tree has no occupancy fork");
    // The dispatcher reads the fork from the device: with 24 registers per thread, register
    // pressure level 1 (16 registers) applies and unrolling takes 22, whose 768 registers per
    // warp fit 64 warps in a 64K register file but not in a 32K one.
    let d = metafork::dispatch::Dispatcher::new(&f, &tree).unwrap();
    let unrolled_names: Vec<String> = tree.leaves().filter(|l| l.applied.contains(&Strategy::Unroll)).map(|l| metafork::emit::tree_files::leaf_kernel_name(&tree, l.id)).collect();
    let params: std::collections::BTreeMap<String, i64> = [("B".to_string(), 32), ("N".to_string(), 128)].into();
    let chosen = |registers_per_multiprocessor: i64| {
        let dev = metafork::dispatch::DeviceLimits { registers_per_thread: 24, registers_per_block: 65536, shared_memory_per_block: 49152, shared_memory_per_block_optin: 49152, threads_per_block: 1024, registers_per_multiprocessor, warps_per_multiprocessor: 64, multiprocessors: 132, max_grid: [2147483647, 65535, 65535] };
        match d.select_exact(&dev, &[], &params).unwrap() {
            metafork::dispatch::Selection::Leaf(i) => d.kernels[i].clone(),
            other => panic!("{other:?}"),
        }
    };
    assert!(unrolled_names.contains(&chosen(65536)), "{} is not unrolled", chosen(65536));
    assert!(!unrolled_names.contains(&chosen(32768)), "{} is unrolled", chosen(32768));
    assert!(tree.height() <= tree.height_bound());
    let reports = metafork::verify::verify_tree(&f, &tree, &b, metafork::verify::Options::default()).unwrap();
    assert!(reports.iter().all(|r| r.status() == metafork::verify::Status::Proved), "{}", metafork::verify::render(&reports));
}

/// `occupancy_allows(r)` (`alloc(r) * W_SM <= R_SM`) means what the tree takes it to mean: on
/// every built-in device profile, for every register count and block size at which the block
/// fits the per-block register file, registers then leave as many blocks resident as one
/// register per thread would (the standard calculation, `tune::occupancy`); and it is not
/// vacuous: where it fails, registers lower occupancy for some block size.
#[test]
fn occupancy_allows_means_registers_do_not_limit_resident_warps() {
    use constraints::device::DeviceProfile;
    use metafork::tune::occupancy::active_blocks;
    let machine = metafork::tree::MachineSymbols::avoiding(&Default::default());
    let (mut allowed, mut refused) = (0, 0);
    for device in DeviceProfile::built_in() {
        let point: std::collections::BTreeMap<constraints::Var, constraints::Rational> = [
            (machine.registers_per_multiprocessor.as_str(), device.registers_per_multiprocessor),
            (machine.warps_per_multiprocessor.as_str(), device.warps_per_multiprocessor),
        ]
        .into_iter()
        .map(|(v, x)| (constraints::Var::new(v), constraints::Rational::from_integer(x.into())))
        .collect();
        for r in 1..=u64::from(device.registers_per_thread) {
            let allows = metafork::tree::occupancy_allows(&machine, r as u32).holds_at(&point).unwrap();
            let mut lowered_somewhere = false;
            for threads in (32..=u64::from(device.threads_per_block)).step_by(32).chain([1, 48, 100, 200]) {
                let per_block = metafork::tree::warp_allocation(r as u32) as u64 * threads.div_ceil(32);
                if per_block > u64::from(device.registers_per_block) {
                    continue;
                }
                for shared in [0, 4096, 48 * 1024] {
                    let (with_r, with_one) = (active_blocks(&device, r, shared, threads), active_blocks(&device, 1, shared, threads));
                    if allows {
                        assert_eq!(with_r, with_one, "{}: {r} registers, {threads} threads, {shared} B", device.name);
                    }
                    lowered_somewhere |= with_r < with_one;
                }
            }
            if allows {
                allowed += 1;
            } else {
                assert!(lowered_somewhere, "{}: {r} registers fail the condition but never lower occupancy", device.name);
                refused += 1;
            }
        }
    }
    assert!(allowed > 0 && refused > 0, "{allowed} allowed, {refused} refused");
}

/// Iteration merging (`strategy::merge`): two grid-`x` iterations per block. The verifier
/// proves every merged code (races, barrier divergence, bounds) and it equals the serial
/// program both where the grid's `x` extent is odd (the guard drops the extra iteration) and
/// where it is even. Codes with barriers (staged tiles) are refused.
#[test]
fn merged_blocks_are_proved_and_equal_the_serial_program() {
    use metafork::strategy::merge::{merge, FACTOR};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    // (example, a point where grid x is odd, one where it is even)
    let cases: [(&str, &[(&str, i64)], &[(&str, i64)]); 5] = [
        ("vecadd", &[("N", 12), ("B", 2), ("s", 2)], &[("N", 16), ("B", 2), ("s", 2)]),
        ("matadd", &[("N", 6), ("B0", 2), ("B1", 1)], &[("N", 8), ("B0", 2), ("B1", 1)]),
        ("transpose", &[("N", 6), ("B0", 2), ("B1", 1), ("s", 2)], &[("N", 8), ("B0", 2), ("B1", 2), ("s", 1)]),
        ("matmul", &[("n", 6), ("B0", 2), ("ub1", 1), ("s", 2)], &[("n", 8), ("B0", 2), ("ub1", 2), ("s", 1)]),
        ("jacobi1d", &[("N", 12), ("T", 2), ("B", 2), ("s", 2)], &[("N", 16), ("T", 2), ("B", 2), ("s", 2)]),
    ];
    let mut refused_tiles = 0;
    for (name, odd, even) in cases {
        let (f, k) = example(name);
        let m = merge(&k).unwrap_or_else(|| panic!("{name}: not merged"));
        let text = metafork::emit::cuda::emit_kernel(&f, &m, &[]).unwrap();
        assert!(text.contains(&format!("metafork_merged < {FACTOR}")), "{name}: {text}");
        // The launcher's merged grid in `long`: `G + 1` passed `int` at `G = 2^31 - 1`, and
        // the launch of a negative grid ran nothing.
        let grid = text.lines().find(|l| l.contains("long metafork_grid_x = ")).unwrap_or_default();
        assert!(grid.contains("(((long)") && grid.contains(&format!(" + {}) / {FACTOR}", FACTOR - 1)), "{name}: {grid}");
        assert!(proved(&f, &m, &[], &b), "{name}");
        for at in [odd, even] {
            assert!(passes(&f, &m, &point(at)), "{name} at {at:?}");
        }
        let staged = metafork::strategy::caching::stage(&f, &k, &b).unwrap().kernel;
        if !staged.shared.is_empty() {
            assert!(merge(&staged).is_none(), "{name}: staged code with barriers merged");
            refused_tiles += 1;
        }
    }
    assert!(refused_tiles >= 3, "only {refused_tiles} staged codes had tiles");
    // The guard matters: without it, the merged vecadd runs past the grid where it is odd.
    let (f, k) = example("vecadd");
    let mut unguarded = merge(&k).unwrap();
    use metafork::frontend::ast::StmtKind;
    let StmtKind::For(l) = &mut unguarded.body[0].kind else { panic!("no merged loop") };
    let StmtKind::Block(items) = &mut l.body.kind else { panic!("no loop body") };
    let StmtKind::If { then_branch, .. } = items[0].kind.clone() else { panic!("no guard") };
    items[0] = *then_branch;
    assert!(passes(&f, &unguarded, &point(&[("N", 16), ("B", 2), ("s", 2)])));
    assert!(!passes(&f, &unguarded, &point(&[("N", 12), ("B", 2), ("s", 2)])), "the unguarded merge should fail where grid x is odd");
    // Nothing to merge without a grid `x` extent.
    assert!(merge(&metafork::kernel::Kernel { grid: Vec::new(), ..k }).is_none());
}

/// The grid extent `G` of `kernel` at integer `params` (C's truncating division), or `None`
/// where it overflows or divides by zero.
fn grid_x(f: &metafork::frontend::model::KernelFunction, kernel: &Kernel, params: &BTreeMap<String, i64>) -> Option<i64> {
    grid_extent(f, kernel, 0, params)
}

/// The grid's extent along dimension `d` (0: x) at `params`.
fn grid_extent(f: &metafork::frontend::model::KernelFunction, kernel: &Kernel, d: usize, params: &BTreeMap<String, i64>) -> Option<i64> {
    use metafork::cexpr::{Code, Resolved};
    let names: Vec<&String> = params.keys().collect();
    let code = Code::compile(&kernel.grid[d], &|v| match f.derived.iter().find(|d| d.name == v) {
        Some(d) => Ok(Resolved::Expr(d.value.clone())),
        None => names.iter().position(|n| *n == v).map(Resolved::Slot).ok_or(format!("`{v}` has no value")),
    })
    .unwrap();
    code.eval(&params.values().copied().collect::<Vec<_>>())
}

/// A batched kernel whose grid is `(N / B) x M`: the grid-fill fork counts the `M` rows of
/// blocks too (the batch extent's bound `M` is kept nonnegative by the program's facts), so a
/// short vector in a large batch still merges, and a short vector alone does not.
#[test]
fn the_grid_fill_fork_counts_every_dimension_of_the_grid() {
    use constraints::{Rational, Var};
    use metafork::tree::Counter;
    let source = "void batch_scale(int M, int N, int B, const float x[M][N], float y[M][N]) {\n  assume(M >= 1 && N >= 1 && B >= 1);\n  meta_schedule {\n    meta_for (int r = 0; r < M; r++)\n      meta_for (int v = 0; v < N / B; v++)\n        meta_for (int u = 0; u < B; u++)\n          y[r][v * B + u] = 2.0f * x[r][v * B + u];\n  }\n}\n";
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let (_, tree) = common::trees_of("batch_scale.mf", source, &b).remove(0);
    let fills: Vec<_> = tree.nodes.iter().flat_map(|n| n.children.iter()).filter(|e| e.counter == Counter::GridFill && e.kind == "accept").collect();
    assert!(!fills.is_empty(), "no grid-fill fork");
    // An H200's 132 multiprocessors of 64 warps: 270,336 threads. N = 64, B = 32: one merged
    // block of 32 threads per row.
    let at = |m: i64| {
        let mut p = constraints::exact_point(&[("M", m), ("N", 64), ("B", 32)].into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        p.insert(Var::new(&tree.machine.warps_per_multiprocessor), Rational::from_integer(64.into()));
        p.insert(Var::new(&tree.machine.multiprocessors), Rational::from_integer(132.into()));
        p
    };
    for e in fills {
        assert_eq!(e.constraint.holds_at(&at(100_000)), Ok(true), "{}: 100,000 rows of 32 threads fill the device", e.constraint);
        assert_eq!(e.constraint.holds_at(&at(1)), Ok(false), "{}: one row of 32 threads does not", e.constraint);
    }
}

/// `extent_lower_bound` is a lower bound on every example's grid `x` extent (and on their
/// granularity-reduced codes', whose extents are products), within one block of it, wherever
/// its requirements hold, at a thousand random points each.
#[test]
fn grid_extent_lower_bounds_hold_and_are_tight() {
    use constraints::Rational;
    use metafork::strategy::merge::extent_lower_bound;
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let mut rng = common::Rng(0x9e3779b97f4a7c15);
    let mut checked = 0;
    for name in ["vecadd", "matadd", "transpose", "matvec", "daxpy", "rowmax", "conv1d", "matmul_naive"] {
        let (f, k) = example(name);
        let reduced = metafork::strategy::granularity::reduce_granularity(&f, &k, &b).unwrap();
        for code in std::iter::once(k).chain(reduced) {
            let bound = extent_lower_bound(&code.grid[0], &f).unwrap_or_else(|| panic!("{name}: no bound on {}", code.grid[0]));
            for _ in 0..1000 {
                let params: BTreeMap<String, i64> = f.params.iter().filter(|p| p.ty.is_integer()).map(|p| (p.name.clone(), rng.range(1, 300))).collect();
                let at = constraints::exact_point(&params);
                if !bound.requires.iter().all(|c| c.holds_at(&at) == Ok(true)) {
                    continue;
                }
                let Some(g) = grid_x(&f, &code, &params) else { continue };
                let lower = bound.num.eval(&at).unwrap() / bound.den.eval(&at).unwrap();
                let g = Rational::from_integer(g.into());
                assert!(lower <= g, "{name}: bound {lower} above the extent {g} at {params:?}");
                assert!(&g - &lower < Rational::from_integer(1.into()) || code.grid[0].to_string().contains('*'), "{name}: bound {lower} a block or more below {g} at {params:?}");
                checked += 1;
            }
        }
    }
    assert!(checked > 8000, "only {checked} points checked");
}

/// Iteration merging in the tree: on vecadd's and transposition's trees, merged leaves exist;
/// each sits on the accepting side of a grid-fill fork whose condition implies that the merged
/// grid's threads, `ceil(G_x / 2) * G_y * G_z * T`, fill every multiprocessor's warp slots (checked at
/// random integer points, and failing at some); every refusal keeps the unmerged code; codes
/// with barriers are never merged. The dispatcher takes the merged code for a large vector on
/// an H200 and the unmerged one for a small vector, and the verifier proves every leaf.
#[test]
fn the_tree_merges_iterations_where_the_merged_grid_fills_the_device() {
    use constraints::{Rational, Var};
    use metafork::tree::{Counter, NodeKind, Strategy};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let mut rng = common::Rng(0x2545f4914f6cdd1d);
    for name in ["vecadd", "transpose"] {
        let path = format!("{}/examples/{name}.mf", env!("CARGO_MANIFEST_DIR"));
        let (f, tree) = common::trees_of(&path, &std::fs::read_to_string(&path).unwrap(), &b).remove(0);
        let merged: Vec<_> = tree.leaves().filter(|l| l.applied.contains(&Strategy::Merge)).collect();
        assert!(!merged.is_empty(), "{name}: no merged leaf");
        for leaf in tree.leaves().filter(|l| matches!(l.kind, NodeKind::Leaf)) {
            let text = metafork::emit::cuda::emit_kernel(&f, &leaf.staged, &[]).unwrap();
            assert_eq!(text.contains("metafork_merged"), leaf.applied.contains(&Strategy::Merge), "{name} leaf {}", leaf.id);
            assert!(!(leaf.applied.contains(&Strategy::Merge) && text.contains("__syncthreads")), "{name} leaf {}: merged code with barriers", leaf.id);
        }
        let mut held = (0, 0);
        for n in &tree.nodes {
            for e in n.children.iter().filter(|e| e.counter == Counter::GridFill) {
                let child = &tree.nodes[e.child];
                if e.kind == "refuse" {
                    assert!(matches!(child.kind, NodeKind::Leaf) && child.staged == n.staged, "{name}: a grid-fill refusal changed the code");
                    continue;
                }
                for _ in 0..300 {
                    // Small devices and sizes spread over orders of magnitude, so that both
                    // sides of the condition are met.
                    let params: BTreeMap<String, i64> = f
                        .params
                        .iter()
                        .filter(|p| p.ty.is_integer())
                        .map(|p| {
                            let value = if f.data_parameters().contains(&p.name) {
                                let most = [64, 4096, 200_000][rng.range(0, 2) as usize];
                                rng.range(1, most)
                            } else {
                                rng.range(1, 16)
                            };
                            (p.name.clone(), value)
                        })
                        .collect();
                    let (warps, sms) = (rng.range(1, 8), rng.range(1, 4));
                    let mut at = constraints::exact_point(&params);
                    at.insert(Var::new(&tree.machine.warps_per_multiprocessor), Rational::from_integer(warps.into()));
                    at.insert(Var::new(&tree.machine.multiprocessors), Rational::from_integer(sms.into()));
                    if metafork::strategy::base_context(&f).holds_at(&at) != Ok(true) || e.constraint.holds_at(&at) != Ok(true) {
                        held.1 += 1;
                        continue;
                    }
                    // Merging halves the x extent; the y and z extents stay.
                    let g = grid_x(&f, &n.staged, &params).unwrap();
                    let others: i64 = (1..n.staged.grid.len()).map(|d| grid_extent(&f, &n.staged, d, &params).unwrap()).product();
                    let threads = n.counters.threads_per_block.eval(&at).unwrap();
                    let merged_threads = Rational::from_integer((((g + 1) / 2) * others).into()) * threads;
                    assert!(merged_threads >= Rational::from_integer((32 * warps * sms).into()), "{name}: the grid-fill condition holds at {params:?}, W_SM {warps}, N_SM {sms}, but the merged grid ({g} / 2 x {others} blocks) does not fill the device");
                    held.0 += 1;
                }
            }
        }
        assert!(held.0 > 0 && held.1 > 0, "{name}: the grid-fill condition held at {} points and failed at {}", held.0, held.1);

        assert!(tree.height() <= tree.height_bound(), "{name}");
        let reports = metafork::verify::verify_tree(&f, &tree, &b, metafork::verify::Options::default()).unwrap();
        assert!(reports.iter().all(|r| r.status() == metafork::verify::Status::Proved), "{}", metafork::verify::render(&reports));
        if name == "vecadd" {
            let d = metafork::dispatch::Dispatcher::new(&f, &tree).unwrap();
            let h200 = metafork::dispatch::DeviceLimits::of(&constraints::device::DeviceProfile::load("h200").unwrap());
            let merged_names: Vec<String> = merged.iter().map(|l| metafork::emit::tree_files::leaf_kernel_name(&tree, l.id)).collect();
            let chosen = |n: i64| match d.select_exact(&h200, &[], &point(&[("N", n), ("B", 256), ("s", 1)])).unwrap() {
                metafork::dispatch::Selection::Leaf(i) => d.kernels[i].clone(),
                other => panic!("{other:?}"),
            };
            // An H200 holds 132 * 64 warps; merged, 2^24 elements in blocks of 256 are 32768 blocks.
            assert!(merged_names.contains(&chosen(1 << 24)), "{} is not merged", chosen(1 << 24));
            assert!(!merged_names.contains(&chosen(1 << 16)), "{} is merged", chosen(1 << 16));
        }
    }
}

/// Issue 27.1: register blocking. matmul's thread computes `s` outputs in a loop over `w < s`;
/// the tree forks on `s == 8` and `s == 4` and, on those sides, takes the code with the loop
/// unrolled and jammed into the reduction loop: no loop over `s` is left, each value of `a`'s
/// tile is read once per step for all K outputs (K + 1 shared reads for K multiply-adds, not
/// 2K), and each output has its own register. A code whose loop iterations are not
/// independent (a scalar carried from one to the next) is not blocked.
#[test]
fn the_tree_blocks_the_granularity_loop_in_registers() {
    use metafork::tree::{NodeKind, Strategy};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let path = format!("{}/examples/matmul.mf", env!("CARGO_MANIFEST_DIR"));
    let (f, tree) = common::trees_of(&path, &std::fs::read_to_string(&path).unwrap(), &b).remove(0);
    // Blocked leaves whose block is as the source has it (the coarsened ones: the next test).
    let root_block = tree.nodes[0].code.block.clone();
    let blocked: Vec<_> = tree.leaves().filter(|l| matches!(l.kind, NodeKind::Leaf) && l.applied.contains(&Strategy::RegisterBlock) && l.staged.block == root_block).collect();
    let mut factors = std::collections::BTreeSet::new();
    for leaf in &blocked {
        let k = [8, 4].into_iter().find(|k| leaf.constraints.constraints().iter().any(|c| c.to_string() == format!("s == {k}"))).unwrap_or_else(|| panic!("leaf {}: blocked without `s == K`: {}", leaf.id, leaf.constraints));
        factors.insert(k);
        let cuda = metafork::emit::cuda::emit_kernel(&f, &leaf.staged, &[]).unwrap();
        assert!(!cuda.contains("w < s"), "leaf {}: the loop over s is gone:\n{cuda}", leaf.id);
        let registers = (0..k).filter(|i| cuda.contains(&format!("float c_reg_b{i} = c["))).count();
        assert_eq!(registers as i64, k, "leaf {}: one accumulator per output:\n{cuda}", leaf.id);
        // One step of the jammed loop: the first `c_reg_b0 +=` up to the next one.
        let step = cuda.split("c_reg_b0 +=").nth(1).unwrap_or_else(|| panic!("leaf {}: no accumulation:\n{cuda}", leaf.id));
        let step = &step[..step.find("c_reg_b0 +=").or_else(|| step.find("__syncthreads")).unwrap_or(step.len())];
        let a_reads = step.matches("a_tile0[").count();
        assert!(a_reads <= 1, "leaf {}: `a` read once per step for all {k} outputs: {step}", leaf.id);
        assert_eq!(step.matches("+=").count() as i64, k - 1, "leaf {}: the other outputs' multiply-adds follow: {step}", leaf.id);
        // Issue 27.2: the accumulators live in registers across the tile loop: loaded before
        // it, stored after it, never touched in it (`strategy::promote`).
        let t_loop = cuda.find("for (int t = 0; t < dim0; t++)").unwrap_or_else(|| panic!("leaf {}: the tile loop:\n{cuda}", leaf.id));
        let last_barrier = cuda.rfind("__syncthreads();").unwrap();
        assert!(cuda.find("float c_reg_b0 = c[").unwrap() < t_loop, "leaf {}: loaded before the tile loop:\n{cuda}", leaf.id);
        assert!(cuda.find("] = c_reg_b0;").unwrap() > last_barrier, "leaf {}: stored after it:\n{cuda}", leaf.id);
        assert_eq!(cuda[t_loop..last_barrier].matches(" c[").count(), 0, "leaf {}: `c` is not accessed in the tile loop:\n{cuda}", leaf.id);
    }
    assert_eq!(factors, [4, 8].into(), "leaves for both factors");
    // The blocked leaves are proved and run against the serial program with every other
    // example leaf (`verify::every_example_leaf_is_proved`, whose sampler meets `s == 8`).
    // A scalar carried between the iterations: not independent, so not blocked.
    let carried = "void f(int n, int B, int s, const float a[n], float out[n]) {
  assume(n >= 1 && B >= 1 && s >= 1 && n % (B * s) == 0);
  int g = n / (B * s);
  meta_schedule {
    meta_for (int v = 0; v < g; v++)
      meta_for (int u = 0; u < B; u++) {
        float acc = 0.0f;
        for (int w = 0; w < s; w++) {
          for (int z = 0; z < 4; z++)
            acc += a[(v * B + u) * s + w];
          out[(v * B + u) * s + w] = acc;
        }
      }
  }
}
";
    let (f, tree) = common::trees_of("carried.mf", carried, &b).remove(0);
    assert!(!tree.nodes.iter().any(|n| n.applied.contains(&Strategy::RegisterBlock)), "a carried scalar refuses blocking");
    let kernel = metafork::kernel::Kernel::from_schedule(&f, &f.schedules[0]).unwrap();
    assert!(metafork::strategy::block::block(&f, &kernel, &b, 4).unwrap().is_none());
    // Promotion needs the element untouched by the rest of the tile loop: with `c` also read
    // by another statement of the loop, every blocked leaf keeps its loads and stores inside.
    let path = format!("{}/examples/matmul.mf", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap().replace("c[p][q + w * ub1] += a[p][t * B0 + z] * b[t * B0 + z][q + w * ub1];", "c[p][q + w * ub1] += a[p][t * B0 + z] * b[t * B0 + z][q + w * ub1];\n              a2[p][q] = c[p][q];").replace("float c[n][n])", "float c[n][n], float a2[n][n])");
    let (f, tree) = common::trees_of("matmul-read.mf", &text, &b).remove(0);
    let blocked: Vec<_> = tree.leaves().filter(|l| matches!(l.kind, NodeKind::Leaf) && l.applied.contains(&Strategy::RegisterBlock)).collect();
    assert!(!blocked.is_empty(), "the variant is still blocked");
    for leaf in blocked {
        let cuda = metafork::emit::cuda::emit_kernel(&f, &leaf.staged, &[]).unwrap();
        let t_loop = cuda.find("for (int t = 0; t < dim0; t++)").unwrap();
        assert!(cuda[t_loop..].contains(" c["), "leaf {}: `c` stays inside the loop:\n{cuda}", leaf.id);
    }
}

/// Issue 27.1's 2-D micro-tiles (`strategy::coarsen`, not yet forked on by the tree): the
/// register-blocked matmul code coarsened along `threadIdx.y` by 8 is staged with one `a` tile
/// (the copies' row tiles merged), holds 8 x 8 accumulators across the tile loop, reads 16
/// shared values per 64 multiply-adds, launches `B0/8` rows of threads, and compiles with nvcc
/// without spilling; the verifier proves it under `B0 % 8 == 0` and the program's runs match.
#[test]
fn coarsening_blocked_code_gives_two_dimensional_micro_tiles() {
    use metafork::tree::{NodeKind, Strategy};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let path = format!("{}/examples/matmul.mf", env!("CARGO_MANIFEST_DIR"));
    let (f, tree) = common::trees_of(&path, &std::fs::read_to_string(&path).unwrap(), &b).remove(0);
    let leaf = tree
        .leaves()
        .find(|l| matches!(l.kind, NodeKind::Leaf) && l.applied.contains(&Strategy::RegisterBlock) && !l.applied.contains(&Strategy::Coarsen) && l.constraints.constraints().iter().any(|c| c.to_string() == "s == 8") && l.code.unroll.is_none() && !l.code.no_unroll)
        .expect("a leaf blocked by 8");
    let c = metafork::strategy::coarsen::coarsen(&leaf.code, 8).expect("matmul's block is two-dimensional");
    assert_eq!(c.condition.to_string(), "B0 % 8 == 0");
    assert_eq!(c.kernel.assumptions, vec![c.condition.clone()]);
    let rows = constraints::Poly::var("B0") * constraints::Poly::constant(constraints::Rational::new(1.into(), 8.into()));
    assert_eq!(c.kernel.block[1], rows, "B0/8 threads along y");
    assert_eq!(c.kernel.block[0], leaf.code.block[0], "x as it was");
    // The code that runs, as the tree makes it from a logical code.
    let staged = metafork::strategy::caching::stage(&f, &c.kernel, &b).unwrap();
    assert_eq!(staged.cached, ["a", "b"], "{:?}", staged.refused);
    let mut k = metafork::strategy::narrow::narrow(&staged.kernel).unwrap_or(staged.kernel);
    k = metafork::strategy::cse::eliminate(&k, 2);
    k.cse = 2;
    k = metafork::strategy::promote::promote(&k).expect("the accumulators are promoted");
    k.name = "matmul_coarsened".into();
    assert_eq!(k.shared.iter().filter(|s| s.name.contains("a_tile")).count(), 1, "the eight row tiles of `a` merged: {:?}", k.shared);
    let cuda = metafork::emit::cuda::emit_kernel(&f, &k, &[]).unwrap();
    assert!(cuda.contains("metafork_block_y = (long)B0 / 8;"), "the launch's block:\n{cuda}");
    let t_loop = cuda.find("for (int t = 0; t < dim0; t++)").unwrap();
    let last_barrier = cuda.rfind("__syncthreads();").unwrap();
    assert_eq!(cuda[..t_loop].matches(" = c[").count(), 64, "8 x 8 outputs loaded before the tile loop:\n{cuda}");
    assert_eq!(cuda[t_loop..last_barrier].matches(" c[").count(), 0, "`c` stays in registers:\n{cuda}");
    let hot = &cuda[cuda.rfind("for (int metafork_z").unwrap()..last_barrier];
    let fmas = hot.lines().filter(|l| l.contains(" += ") && l.contains(" * ")).count();
    let shared_reads = hot.matches("_tile").count();
    assert_eq!((fmas, shared_reads), (64, 16), "8 + 8 shared reads feed 64 multiply-adds: {hot}");
    // A thread's rows are neighbours (`8*ty + i`), and the `a` tile is stored column by column
    // (columns padded by 4), so its 8 reads per step are neighbours too; the code states
    // `B0 % 8 == 0` to nvcc, and the launch checks it.
    let a_reads: Vec<&str> = hot.match_indices("a_tile0[").map(|(i, _)| &hot[i + 8..i + 8 + hot[i + 8..].find(']').unwrap()]).collect();
    assert_eq!(a_reads.len(), 8, "{hot}");
    for (i, r) in a_reads.iter().enumerate().skip(1) {
        assert_eq!(*r, format!("{} + {i}", a_reads[0]), "read {i} of `a` is the first's neighbour: {a_reads:?}");
    }
    assert!(cuda.contains("a_tile0[metafork_e % B0 * (B0 + 4) + metafork_e / B0] = a["), "transposed `a` tile, padded columns:\n{cuda}");
    // `b`'s tiles are read across the lanes (`b_tile[z*ub1 + tx]`): stored row by row.
    assert!(cuda.contains("b_tile0[metafork_e] = b["), "`b` tiles as they were:\n{cuda}");
    assert!(cuda.contains("  __builtin_assume(B0 % 8 == 0);") && cuda.contains("  if (B0 % 8 != 0) return cudaErrorInvalidValue;"), "{cuda}");
    // Issue 27.5's targets in the machine code (sm_90): >= 70% FFMA in the hot loop, <= 0.25
    // shared loads per FFMA, no 64-bit integer operation.
    if let (Some(nvcc), Some(cuobjdump)) = (common::nvcc(), common::cuobjdump()) {
        let dir = common::scratch("micro-tile-sass");
        std::fs::write(dir.join("k.cu"), &cuda).unwrap();
        let o = std::process::Command::new(nvcc).args(["-cubin", "-O3", "-arch=sm_90", "-o"]).arg(dir.join("k.cubin")).arg(dir.join("k.cu")).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let o = std::process::Command::new(cuobjdump).arg("-sass").arg(dir.join("k.cubin")).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let sass = metafork::sass::parse(&String::from_utf8_lossy(&o.stdout));
        let loop_ = metafork::sass::hot_loop(&sass["matmul_coarsened"]).expect("a hot loop");
        let m = metafork::sass::mix(loop_);
        assert_eq!(m.fma, 64, "{m:?}");
        assert!(m.fma * 100 >= 70 * m.instructions, "FFMA share {} of {}", m.fma, m.instructions);
        assert!(m.shared_loads * 4 <= m.fma && m.wide_integer_ops == 0, "{m:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
    // Real registers, no spill.
    let counted = metafork::counters::count_with_cuda(Some(&f), &k, &["sm_90".to_string()]).unwrap();
    let nvcc = &counted.nvcc["sm_90"];
    assert!(nvcc.registers <= 255 && nvcc.spill_stores == 0, "{nvcc:?}");
    // Proved under the condition, and the runs match the serial program.
    let mut system = leaf.correctness_constraints(&tree.machine);
    system.add(c.condition.clone());
    let verdict = check(&f, &k, &system, &b).verdict;
    assert!(matches!(verdict, Verdict::Proved), "{verdict:?}");
    let programs = Programs::new(&f, 0, &k).unwrap();
    let point: BTreeMap<String, i64> = [("n", 64), ("B0", 16), ("ub1", 2), ("s", 8)].into_iter().map(|(a, v)| (a.to_string(), v)).collect();
    let outcome = run_point(&f, &programs, &point, 7, RunOptions::default());
    assert!(matches!(outcome, Outcome::Passed(_)), "the coarsened kernel computes what matmul computes: {outcome:?}");
    // Refused where it cannot apply: one block dimension, or a factor below 2.
    let saxpy = format!("{}/examples/saxpy.mf", env!("CARGO_MANIFEST_DIR"));
    let program = check_source(&saxpy, &std::fs::read_to_string(&saxpy).unwrap()).unwrap();
    let g = &program.kernels[0];
    let kernel = Kernel::from_schedule(g, &g.schedules[0]).unwrap();
    assert!(metafork::strategy::coarsen::coarsen(&kernel, 4).is_none(), "one block dimension");
    assert!(metafork::strategy::coarsen::coarsen(&leaf.code, 1).is_none());
}

/// Issue 27.1: the refusal of the threads per block coarsens. Where `ub1 * B0` exceeds the
/// machine's threads per block, the refuse child blocks the granularity loop (`s == 8` or
/// `s == 4`) and coarsens along `y` by the same factor `k` (`B0 % k == 0`: square micro-tiles),
/// and every counter is evaluated again: the threads per block are `1/k`, accepted up to
/// `k * T_B`. Outside those cases
/// the refusal is infeasible as before. These leaves are proved with every other example leaf
/// (`verify::every_example_leaf_is_proved`).
#[test]
fn the_refusal_of_too_many_threads_coarsens() {
    use metafork::tree::{Counter, NodeKind, Strategy};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let path = format!("{}/examples/matmul.mf", env!("CARGO_MANIFEST_DIR"));
    let (_, tree) = common::trees_of(&path, &std::fs::read_to_string(&path).unwrap(), &b).remove(0);
    let refused = |l: &&metafork::tree::Node| l.constraints.constraints().iter().any(|c| c.to_string() == "T_B < ub1*B0");
    let coarsened: Vec<_> = tree.leaves().filter(refused).filter(|l| matches!(l.kind, NodeKind::Leaf)).collect();
    assert!(!coarsened.is_empty(), "kernels where the block has too many threads");
    let mut factors = std::collections::BTreeSet::new();
    for leaf in &coarsened {
        assert!(leaf.applied.contains(&Strategy::RegisterBlock) && leaf.applied.contains(&Strategy::Coarsen), "leaf {}: {:?}", leaf.id, leaf.applied);
        let texts: Vec<String> = leaf.constraints.constraints().iter().map(|c| c.to_string()).collect();
        let k = if texts.iter().any(|c| c == "s == 8") { 8 } else if texts.iter().any(|c| c == "s == 4") { 4 } else { panic!("leaf {}: no factor: {texts:?}", leaf.id) };
        // Square micro-tiles: blocked by k, coarsened by k.
        assert_eq!(leaf.counters.threads_per_block.to_string(), format!("1/{k}*ub1*B0"), "leaf {}", leaf.id);
        assert!(texts.iter().any(|c| *c == format!("B0 % {k} == 0")) && texts.iter().any(|c| *c == format!("ub1*B0 <= {k}*T_B")), "leaf {}: {texts:?}", leaf.id);
        factors.insert(k);
    }
    assert_eq!(factors, [4, 8].into());
    // The coarsened code's `a` tile is stored column by column, its columns padded (16*B0
    // bytes more than the blocked code's tiles); where that shared memory is refused the tree
    // stores the columns unpadded (`UnpadColumns`) before it would give up caching, and such a
    // leaf's tiles take exactly the blocked code's bytes.
    let unpadded: Vec<_> = coarsened.iter().filter(|l| l.applied.contains(&Strategy::UnpadColumns)).collect();
    assert!(!unpadded.is_empty(), "a coarsened leaf whose padded columns did not fit");
    for leaf in &unpadded {
        assert!(leaf.code.unpadded_columns && !leaf.staged.padded_columns && !leaf.applied.contains(&Strategy::DropCaching), "leaf {}: {:?}", leaf.id, leaf.applied);
        let texts: Vec<String> = leaf.constraints.constraints().iter().map(|c| c.to_string()).collect();
        assert!(texts.iter().any(|c| c.starts_with("Z_B < ") && c.contains("*B0^2 + 16*B0")), "leaf {}: refused the padded bytes: {texts:?}", leaf.id);
    }
    assert!(coarsened.iter().any(|l| l.staged.padded_columns), "coarsened leaves with padded columns");
    // Where neither factor nor the coarsening condition holds, no kernel: the infeasible leaf.
    assert!(tree.leaves().filter(refused).any(|l| matches!(l.kind, NodeKind::Infeasible { counter: Counter::ThreadsPerBlock })));
}
