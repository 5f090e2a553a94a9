//! Unrolling by a factor (with its trip-count condition) and prefetching a reused global
//! value into a register: where they apply, the code they make, and that the verifier proves
//! it and finds it equal to the serial program, exactly where the condition holds.

mod common;

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
    matches!(run_point(f, &programs, at, 7, RunOptions { detect_races: true }), Outcome::Passed(_))
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
                // Unrolled here, or on the accepting side of the forks below.
                assert_eq!(child.applied.contains(&Strategy::Unroll), child.children.is_empty());
                assert_eq!(text.contains("k += 4)"), child.children.is_empty(), "{text}");
            }
            "outside" => {
                assert_eq!(e.constraint.to_string(), "N % 4 != 0");
                assert!(matches!(child.kind, NodeKind::Leaf) && !text.contains("k += 4)"), "{text}");
            }
            other => panic!("edge {other}"),
        }
    }
    // Below a case edge, the unrolled code is taken only where it fits and occupancy allows;
    // every refusal keeps the code as it was, so unrolling never costs a kernel.
    fn below(tree: &metafork::tree::Tree, id: usize, refused: bool, out: &mut Vec<(usize, bool)>) {
        let n = &tree.nodes[id];
        if n.children.is_empty() {
            out.push((id, refused));
        }
        for e in &n.children {
            assert!(matches!(e.counter, Counter::Registers | Counter::RegistersPerBlock | Counter::Occupancy), "{e:?}");
            below(tree, e.child, refused || e.kind == "refuse", out);
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
        let dev = metafork::dispatch::DeviceLimits { registers_per_thread: 24, registers_per_block: 65536, shared_memory_per_block: 49152, shared_memory_per_block_optin: 49152, threads_per_block: 1024, registers_per_multiprocessor, warps_per_multiprocessor: 64 };
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
