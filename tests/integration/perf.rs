//! The performance counters' closed forms against the lane-enumerating evaluator, on every
//! example's leaf kernels at sampled parameter points (issue 7: at least 500 agreeing points
//! per counter and example), and what they say about the examples' accesses.
use crate::common;

use constraints::solver::Backend;
use constraints::{Poly, Rational, Var};
use metafork::perf::{formula, pattern};
use std::collections::{BTreeMap, BTreeSet};

/// Program parameters drawn so that blocks come in every shape the formulas split on (warp
/// multiples, divisors of 32; the multiples twice, as the divergence form needs them) and
/// others (where the formulas may say `None`).
const SIDES: [i64; 15] = [1, 2, 4, 8, 16, 32, 64, 3, 5, 12, 48, 96, 32, 64, 128];

fn eval(p: &Poly, point: &BTreeMap<String, i64>) -> Option<i64> {
    let values: BTreeMap<Var, Rational> = point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect();
    let r = p.eval(&values).ok()?;
    r.is_integer().then(|| i64::try_from(r.to_integer()).ok()).flatten()
}

#[test]
fn closed_forms_agree_with_the_lanes_on_every_example() {
    let b = Backend::default();
    let mut rng = common::Rng(0x7065_7266);
    // Points where a condition or index with divisions was evaluated both ways.
    let mut with_divisions = 0;
    for (path, text) in common::examples() {
        let (mut coalescing, mut banks, mut shared_patterns) = (0, 0, 0);
        let (mut divergence, mut branch_count) = (0, 0);
        for (f, tree) in common::trees_of(&path, &text, &b) {
            let mut seen = BTreeSet::new();
            let leaves: Vec<&metafork::tree::Node> = tree.leaves().filter(|n| matches!(n.kind, metafork::tree::NodeKind::Leaf) && seen.insert(format!("{:?}", n.staged))).collect();
            // Enough points per example whatever its number of distinct kernels.
            let samples = (6000 / leaves.len().max(1)).clamp(600, 3000);
            for leaf in leaves {
                let patterns = pattern::patterns(&f, &leaf.staged, &tree.root_constraints, &b);
                let branches = pattern::branches(&f, &leaf.staged, &tree.root_constraints, &b);
                branch_count += branches.len();
                shared_patterns += patterns.iter().filter(|p| p.shared).count();
                for sample in 0..samples {
                    let mut point = BTreeMap::new();
                    for p in f.program_parameters() {
                        point.insert(p, SIDES[rng.range(0, SIDES.len() as i64 - 1) as usize]);
                    }
                    for p in f.data_parameters() {
                        point.insert(p, rng.range(1, 4096));
                    }
                    let block: Vec<i64> = leaf.staged.block.iter().map(|e| eval(e, &point).unwrap_or(0)).collect();
                    let block = [0, 1, 2].map(|d| block.get(d).copied().unwrap_or(1));
                    // Launchable blocks only (CUDA's limit: 1024 threads).
                    if block.iter().any(|&x| x < 1) || block.iter().product::<i64>() > 1024 {
                        continue;
                    }
                    for br in &branches {
                        // The integer lanes (or the closed form) give what the exact rational
                        // lanes give (the exact lanes of a whole block are slow: one point in
                        // ten where the coefficients are also checked, else one in a hundred).
                        let every = if br.affine(&point).is_some() { 10 } else { 100 };
                        let exact = (sample % every == 0).then(|| br.count_through_model(&point, block));
                        if let Some(exact) = exact {
                            assert_eq!(br.count(&point, block), exact, "{path} `{}` at {point:?}", br.condition);
                            with_divisions += usize::from(!br.lanes.divisions.is_empty() && exact.is_some());
                        }
                        let Some((coeffs, constant)) = br.affine(&point) else { continue };
                        let lanes = metafork::perf::divergence::by_lanes(coeffs, constant, br.condition.rel(), block);
                        // The coefficients describe the condition exactly.
                        if let Some(exact) = exact {
                            assert_eq!(exact, Some(lanes), "{path} `{}` at {point:?}", br.condition);
                        }
                        if let Some(formula) = metafork::perf::divergence::closed_form(coeffs, constant, br.condition.rel(), block) {
                            assert_eq!(formula, lanes, "{path} `{}` at {point:?}", br.condition);
                            divergence += 1;
                        }
                    }
                    for p in &patterns {
                        // The integer lanes give what the exact rational lanes give, and the
                        // strides describe exactly those lanes (one point in ten, as above).
                        let every = if p.at(&point, block).is_some() { 10 } else { 40 };
                        let exact = (sample % every == 0).then(|| p.warp_through_model(&point, block));
                        if let Some(exact) = &exact {
                            assert_eq!(&p.warp(&point, block), exact, "{path} `{}` at {point:?}", p.text);
                            with_divisions += usize::from(!p.lanes.divisions.is_empty() && exact.is_some());
                        }
                        let Some(c) = p.at(&point, block) else { continue };
                        if let Some(exact) = exact {
                            assert_eq!(exact, Some(c.warp()), "{path} `{}` at {point:?}", p.text);
                        }
                        if !p.shared {
                            if let Some(piece) = formula::coalescing(&c) {
                                assert!((piece.value - c.coalescing()).abs() < 1e-12, "{path} `{}` at {point:?}: {piece:?} but the lanes say {}", p.text, c.coalescing());
                                coalescing += 1;
                            }
                        } else if let Some(piece) = formula::bank_ways(&c) {
                            assert_eq!(piece.value, c.bank_ways() as f64, "{path} `{}` at {point:?}: {piece:?}", p.text);
                            banks += 1;
                        }
                    }
                }
            }
        }
        println!("{path}: coalescing formula checked at {coalescing} access points, bank formula at {banks}, divergence at {divergence} branch points");
        if branch_count > 0 {
            assert!(divergence >= 500, "{path}: only {divergence} points where the divergence formula applies");
        }
        assert!(coalescing >= 500, "{path}: only {coalescing} points where the coalescing formula applies");
        if shared_patterns > 0 {
            assert!(banks >= 500, "{path}: only {banks} points where the bank formula applies");
        }
    }
    println!("integer and exact lanes compared at {with_divisions} points with divisions");
    assert!(with_divisions >= 1000, "only {with_divisions} points compared the integer and exact lanes of a quotient or remainder");
}

/// Transposition: the checked program, its first tree, and the point N = 1024, 32 x 32 blocks.
fn transpose(b: &Backend) -> (metafork::frontend::CheckedProgram, metafork::tree::Tree, BTreeMap<String, i64>) {
    let path = format!("{}/examples/transpose.mf", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let program = metafork::frontend::check_source(&path, &text).unwrap();
    let tree = common::trees_of(&path, &text, b).remove(0).1;
    let point = [("N", 1024), ("B0", 32), ("B1", 32), ("s", 1)].map(|(k, v)| (k.to_string(), v)).into();
    (program, tree, point)
}

/// The kernel is proved (no race, no divergence, in bounds) and equals the serial program at
/// each of `points` (transposition's N, B0, B1, s).
fn proved_and_equal(f: &metafork::frontend::model::KernelFunction, tree: &metafork::tree::Tree, kernel: &metafork::kernel::Kernel, b: &Backend, points: &[[(&str, i64); 4]]) {
    let r = metafork::verify::twothread::check(f, kernel, &tree.root_constraints, b);
    assert!(matches!(r.verdict, metafork::verify::twothread::Verdict::Proved), "{:?}", r.verdict);
    let programs = metafork::verify::differential::Programs::new(f, 0, kernel).unwrap();
    for (i, p) in points.iter().enumerate() {
        let point: BTreeMap<String, i64> = p.map(|(k, v)| (k.to_string(), v)).into();
        let outcome = metafork::verify::differential::run_point(f, &programs, &point, i as u64, metafork::verify::machine::RunOptions { detect_races: true, step_budget: None, kernel_only: false });
        assert!(matches!(outcome, metafork::verify::differential::Outcome::Passed(_)), "{point:?}: {outcome:?}");
    }
}

/// Transposition before caching, 32 x 32 blocks: the write `c[i*N + j]` (j follows
/// threadIdx.x) is fully coalesced; the read `a[j][i]` walks a column, a sector per lane.
#[test]
fn transpose_reads_a_column_and_writes_a_row() {
    let b = Backend::default();
    let (program, tree, point) = transpose(&b);
    let f = &program.kernels[0];
    let kernel = metafork::kernel::Kernel::from_schedule(f, &f.schedules[0]).unwrap();
    let mut found = BTreeMap::new();
    for p in pattern::patterns(f, &kernel, &tree.root_constraints, &b) {
        let c = p.at(&point, [32, 32, 1]).unwrap();
        let piece = formula::coalescing(&c).unwrap();
        assert_eq!(piece.value, c.coalescing());
        found.insert(p.text.clone(), piece.value);
    }
    assert_eq!(found.get("c[i * N + j]"), Some(&1.0), "{found:?}");
    assert_eq!(found.get("a[j][i]"), Some(&(4.0 / 32.0)), "{found:?}");
}

/// Padding the shared tiles' rows (the bank-conflict strategy): transposition's staged read of
/// `a`, a column of its tile, goes from 32 passes to 1 at 32 x 32 blocks; the padded kernel is
/// still proved (no race, no divergence, in bounds) and computes what the serial program does.
#[test]
fn padding_removes_transposes_bank_conflicts() {
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let (program, tree, point) = transpose(&b);
    let f = &program.kernels[0];
    let logical = metafork::kernel::Kernel::from_schedule(f, &f.schedules[0]).unwrap();
    let worst = |k: &metafork::kernel::Kernel| pattern::patterns(f, k, &tree.root_constraints, &b).iter().filter(|p| p.shared).map(|p| p.warp(&point, [32, 32, 1]).unwrap().bank_ways()).max().unwrap();
    let plain = metafork::strategy::caching::stage(f, &logical, &b).unwrap().kernel;
    let padded = metafork::strategy::caching::stage(f, &metafork::kernel::Kernel { pad_shared: true, ..logical.clone() }, &b).unwrap().kernel;
    assert_eq!(worst(&plain), 32);
    assert_eq!(worst(&padded), 1);
    // The formula says the same of the padded tile's accesses that have strides (the loads,
    // `e + e / W`, have none).
    let mut by_formula = 0;
    for p in pattern::patterns(f, &padded, &tree.root_constraints, &b).iter().filter(|p| p.shared) {
        let Some(c) = p.at(&point, [32, 32, 1]) else { continue };
        let piece = formula::bank_ways(&c).unwrap();
        assert_eq!(piece.value, 1.0, "`{}`", p.text);
        by_formula += 1;
    }
    assert!(by_formula >= 2);
    proved_and_equal(f, &tree, &padded, &b, &[[("N", 13), ("B0", 4), ("B1", 3), ("s", 2)], [("N", 24), ("B0", 2), ("B1", 5), ("s", 1)], [("N", 7), ("B0", 3), ("B1", 3), ("s", 3)]]);
}

/// Interchange (which block loop follows threadIdx.x): transposition's write `c[i*N + j]` is
/// fully coalesced and its read `a[j][i]` poor; interchanged, the read is full and the write
/// poor. The naive transposition that maps the row loop to x (the interchanged kernel) has the
/// poor write, and interchanging it back gives the full one. Both are proved and match the
/// serial program.
#[test]
fn interchange_trades_the_coalesced_access() {
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let (program, tree, point) = transpose(&b);
    let f = &program.kernels[0];
    let logical = metafork::kernel::Kernel { cache: Vec::new(), ..metafork::kernel::Kernel::from_schedule(f, &f.schedules[0]).unwrap() };
    let swapped = metafork::strategy::interchange::interchange(&logical).unwrap();
    let coalescing = |k: &metafork::kernel::Kernel| -> BTreeMap<String, f64> {
        pattern::patterns(f, k, &tree.root_constraints, &b).iter().map(|p| (p.text.clone(), p.warp(&point, [32, 32, 1]).unwrap().coalescing())).collect()
    };
    let before = coalescing(&logical);
    let after = coalescing(&swapped);
    assert_eq!((before["c[i * N + j]"], before["a[j][i]"]), (1.0, 0.125), "{before:?}");
    assert_eq!((after["c[i * N + j]"], after["a[j][i]"]), (0.125, 1.0), "{after:?}");
    // Interchanging twice is the identity.
    assert_eq!(metafork::strategy::interchange::interchange(&swapped).unwrap(), logical);
    for k in [&logical, &swapped] {
        proved_and_equal(f, &tree, k, &b, &[[("N", 13), ("B0", 4), ("B1", 3), ("s", 2)], [("N", 24), ("B0", 2), ("B1", 5), ("s", 1)]]);
    }
}

/// `metafork counters --at`: each access's memory counter at a point, with the closed form's
/// case; a missing value is a clear error.
#[test]
fn counters_at_a_point() {
    // The program's own accesses: transposition without its `cache(a, c)`.
    let dir = common::scratch("counters-at");
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/transpose.mf")).unwrap();
    let plain = source.replacen("meta_schedule cache(a, c) {", "meta_schedule {", 1);
    assert_ne!(plain, source);
    let program = dir.join("transpose.mf");
    std::fs::write(&program, plain).unwrap();
    let program = program.to_str().unwrap();
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap();
    let o = run(&["counters", program, "--at", "N=1024", "--at", "B0=32", "--at", "B1=32", "--at", "s=1", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let accesses = json[0]["accesses"].as_array().unwrap();
    let value = |text: &str| accesses.iter().find(|a| a["access"] == text).map(|a| (a["value"].as_f64().unwrap(), a["case"].as_str().unwrap().to_string()));
    assert_eq!(value("a[j][i]"), Some((0.125, "one row".to_string())));
    assert_eq!(value("c[i * N + j]"), Some((1.0, "one row".to_string())));
    let o = run(&["counters", program, "--at", "N=1024"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("give `B0`, `B1`, `s` with --at"), "{}", String::from_utf8_lossy(&o.stderr));
    // Only a granularity missing (read in no extent, only in subscripts): named, not an access.
    let o = run(&["counters", program, "--at", "N=1024", "--at", "B0=32", "--at", "B1=32"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("give `s` with --at (every integer parameter of"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["counters", program, "--at", "N"]);
    assert_eq!(o.status.code(), Some(2), "a malformed NAME=VALUE is a usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("expected NAME=VALUE"));
    // Occupancy on a device: the piecewise form, with what limits it, equal to the calculation.
    let estimate = json[0]["estimate"].as_u64().unwrap();
    for (b0, b1) in [(32, 32), (8, 8), (1, 1)] {
        let (b0s, b1s) = (format!("B0={b0}"), format!("B1={b1}"));
        let o = run(&["counters", program, "--at", "N=1024", "--at", &b0s, "--at", &b1s, "--at", "s=1", "--device", "h100", "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let occ = &json[0]["occupancy"];
        let h100 = constraints::device::DeviceProfile::load("h100").unwrap();
        let expected = metafork::tune::occupancy::occupancy(&h100, estimate, 0, (b0 * b1) as u64);
        assert_eq!(occ["value"].as_f64(), Some(expected), "{occ}");
        assert!(["warps", "blocks", "registers"].contains(&occ["limited_by"].as_str().unwrap()), "{occ}");
    }
    let o = run(&["counters", program, "--at", "N=1024", "--at", "B0=1", "--at", "B1=1", "--at", "s=1", "--device", "h100"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("occupancy on h100 0.500 (limited by blocks"), "{}", String::from_utf8_lossy(&o.stdout));
    let o = run(&["counters", program, "--device", "h100"]);
    assert_eq!(o.status.code(), Some(2), "--device needs --at");
    // A name the program does not have, a name twice, a point its facts exclude: errors.
    let at = |extra: &[&str]| run(&[&["counters", program, "--at", "B0=32", "--at", "B1=32", "--at", "s=1"], extra].concat());
    for (extra, expected) in [
        (&["--at", "N=1024", "--at", "Q=3"][..], "`Q` is not an integer parameter of the program"),
        (&["--at", "N=1024", "--at", "N=512"][..], "`N` is given twice"),
        (&["--at", "N=-4"][..], "the point violates the fact"),
        (&["--at", "N=4294967296"][..], "`N` = 4294967296 does not fit `int`"),
    ] {
        let o = at(extra);
        assert_eq!(o.status.code(), Some(1), "{extra:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains(expected), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `cache(...)` (transposition caches `a` and `c`), `counters --at` reports the accesses
/// of the code its table counts: the tiles' global loads and the shared accesses, spelled as
/// the kernel files spell them, not the program's global accesses beside the staged code's
/// shared bytes.
#[test]
fn counters_at_a_point_of_a_cached_schedule_are_the_staged_codes() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).current_dir(env!("CARGO_MANIFEST_DIR")).args(["counters", "examples/transpose.mf", "--at", "N=1024", "--at", "B0=16", "--at", "B1=16", "--at", "s=2", "--json"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_ne!(json[0]["shared_memory"], "0", "{json}");
    let accesses = json[0]["accesses"].as_array().unwrap();
    let texts: Vec<&str> = accesses.iter().map(|a| a["access"].as_str().unwrap()).collect();
    assert!(accesses.iter().any(|a| a["memory"] == "shared"), "{texts:?}");
    assert!(!texts.contains(&"a[j][i]"), "the program's read of `a` is staged: {texts:?}");
    assert!(texts.iter().all(|t| !t.contains('$')), "{texts:?}");
}

/// Each performance condition the tree forks on (`perf::fork`) says what the lanes count:
/// where its shape holds, an accepted access is conflict-free (bank passes 1) or uses more
/// than half the bytes it moves, and a refused one is not. Checked on every example's
/// distinct leaf codes at sampled points.
#[test]
fn performance_conditions_agree_with_the_lanes() {
    use metafork::perf::fork::{conditions, Kind, COALESCING_THRESHOLD};
    let b = Backend::default();
    let mut rng = common::Rng(0x666f_726b);
    let mut total = [0usize; 2];
    for (path, text) in common::examples() {
        let mut checked = [0usize; 2];
        let mut forked = [false; 2];
        for (f, tree) in common::trees_of(&path, &text, &b) {
            let mut seen = BTreeSet::new();
            for leaf in tree.leaves().filter(|n| matches!(n.kind, metafork::tree::NodeKind::Leaf) && seen.insert(format!("{:?}", n.staged))) {
                let patterns = pattern::patterns(&f, &leaf.staged, &tree.root_constraints, &b);
                for (k, kind) in [Kind::Coalescing, Kind::BankConflicts].into_iter().enumerate() {
                    let conds: Vec<_> = conditions(&patterns, &leaf.staged, kind).into_iter().filter(|c| c.accept.truth_if_constant() != Some(true)).collect();
                    if conds.is_empty() {
                        continue;
                    }
                    forked[k] = true;
                    for _ in 0..1500 {
                        let mut point = BTreeMap::new();
                        for p in f.program_parameters() {
                            point.insert(p, SIDES[rng.range(0, SIDES.len() as i64 - 1) as usize]);
                        }
                        for p in f.data_parameters() {
                            point.insert(p, if rng.range(0, 9) == 0 { 1 } else { rng.range(1, 4096) });
                        }
                        let block = [0, 1, 2].map(|d| leaf.staged.block.get(d).map_or(Some(1), |e| eval(e, &point)).unwrap_or(0));
                        if block.iter().any(|&x| x < 1) || block.iter().product::<i64>() > 1024 {
                            continue;
                        }
                        let values: BTreeMap<Var, Rational> = point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect();
                        for c in &conds {
                            if !c.shape.iter().all(|s| s.holds_at(&values).unwrap()) {
                                continue;
                            }
                            let warp = patterns[c.position].warp(&point, block).unwrap();
                            let meets = match kind {
                                Kind::BankConflicts => warp.bank_ways() == 1,
                                Kind::Coalescing => warp.coalescing() > COALESCING_THRESHOLD,
                            };
                            assert_eq!(c.accept.holds_at(&values).unwrap(), meets, "{path} `{}` ({kind:?}, {}) at {point:?}", c.access, c.accept);
                            checked[k] += 1;
                        }
                    }
                }
            }
        }
        println!("{path}: coalescing conditions checked at {} points, bank conditions at {}", checked[0], checked[1]);
        for k in 0..2 {
            if forked[k] {
                assert!(checked[k] >= 500, "{path}: only {} points where a condition's shape holds", checked[k]);
            }
            total[k] += checked[k];
        }
    }
    assert!(total.iter().all(|&t| t >= 500), "{total:?}");
}

/// The transposition tree refuses the bank-conflict counter on the staged read of `a`'s tile
/// (a column of the tile: rows of B0 words, conflicted when B0 is even) and pads the tiles:
/// the padded leaf's read is conflict-free wherever the leaf applies, the unpadded code's read
/// is not, and the padded leaf is proved and matches the serial program.
#[test]
fn transposition_tree_has_a_padded_leaf_without_bank_conflicts() {
    use metafork::tree::{Counter, NodeKind, Strategy};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let (program, tree, _) = transpose(&b);
    let f = &program.kernels[0];
    let padded: Vec<&metafork::tree::Node> = tree
        .leaves()
        .filter(|n| matches!(n.kind, NodeKind::Leaf) && n.applied.contains(&Strategy::PadSharedRows) && !n.applied.contains(&Strategy::Unroll) && n.staged.shared.len() == 2)
        .collect();
    assert!(!padded.is_empty(), "no padded leaf with tiles");
    let refused = tree.nodes.iter().flat_map(|n| n.children.iter().map(move |e| (n, e))).find(|(_, e)| e.counter == Counter::BankConflicts && e.kind == "refuse").expect("a bank-conflict refusal");
    assert_eq!(refused.1.constraint.to_string(), "B0 % 2 == 0");
    let values = |p: &BTreeMap<String, i64>| p.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect::<BTreeMap<Var, Rational>>();
    // The padded leaf for s = 1 (others hold only where the unrolled code's trip count does).
    let s1: BTreeMap<String, i64> = [("N", 4096), ("B0", 2), ("B1", 32), ("s", 1)].map(|(k, v)| (k.to_string(), v)).into();
    let leaf = *padded.iter().find(|l| l.constraints.constraints().iter().filter(|c| c.vars().iter().all(|v| s1.contains_key(v.name()))).all(|c| c.holds_at(&values(&s1)).unwrap())).expect("a padded leaf for s = 1");
    let unpadded = &refused.0.staged;
    let mut checked = 0;
    for b0 in [2, 4, 8, 16, 32, 64] {
        for b1 in [32, 64] {
            let point: BTreeMap<String, i64> = [("N", 4096), ("B0", b0), ("B1", b1), ("s", 1)].map(|(k, v)| (k.to_string(), v)).into();
            // Inside the leaf's region as far as the parameters go (B1 >= 32, B0 even).
            let region_params: Vec<_> = leaf.constraints.constraints().iter().filter(|c| c.vars().iter().all(|v| point.contains_key(v.name()))).collect();
            assert!(region_params.iter().all(|c| c.holds_at(&values(&point)).unwrap()), "{point:?} is outside leaf {}", leaf.id);
            let ways = |k: &metafork::kernel::Kernel| pattern::patterns(f, k, &tree.root_constraints, &b).iter().filter(|p| p.shared && p.text.starts_with(&metafork::names::readable("a_tile0")) && !p.write).map(|p| p.warp(&point, [b1, b0, 1]).unwrap().bank_ways()).max().unwrap();
            assert_eq!(ways(&leaf.staged), 1, "padded read at {point:?}");
            assert!(ways(unpadded) >= 2, "unpadded read at {point:?}");
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
    proved_and_equal(f, &tree, &leaf.staged, &b, &[[("N", 13), ("B0", 4), ("B1", 3), ("s", 2)], [("N", 24), ("B0", 2), ("B1", 5), ("s", 1)]]);
}

/// A column-first mapping (examples/colscale.mf: threadIdx.x walks down a column) is refused
/// on coalescing and the tree interchanges the block loops: the interchanged leaf's accesses
/// are fully coalesced where the original's use an eighth of what they move, and it is proved.
#[test]
fn colscale_tree_interchanges_its_column_walk() {
    use metafork::tree::{Counter, NodeKind, Strategy};
    let b = Backend::new(metafork::verify::QUERY_TIMEOUT_MS);
    let path = format!("{}/examples/colscale.mf", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let (f, tree) = common::trees_of(&path, &text, &b).remove(0);
    let leaf = tree.leaves().find(|n| matches!(n.kind, NodeKind::Leaf) && n.applied.contains(&Strategy::Interchange)).expect("an interchanged leaf");
    let refused = tree.nodes.iter().flat_map(|n| n.children.iter().map(move |e| (n, e))).find(|(_, e)| e.counter == Counter::Coalescing && e.kind == "refuse").expect("a coalescing refusal");
    let point: BTreeMap<String, i64> = [("N", 1024), ("B0", 32), ("B1", 32)].map(|(k, v)| (k.to_string(), v)).into();
    let global = |k: &metafork::kernel::Kernel| -> Vec<(String, f64)> { pattern::patterns(&f, k, &tree.root_constraints, &b).iter().filter(|p| !p.shared && p.array != "w").map(|p| (p.text.clone(), p.warp(&point, [32, 32, 1]).unwrap().coalescing())).collect() };
    let before = global(&refused.0.staged);
    let after = global(&leaf.staged);
    assert_eq!(before.len(), 2);
    assert!(before.iter().all(|(_, c)| *c == 0.125), "{before:?}");
    assert!(after.iter().all(|(_, c)| *c == 1.0), "{after:?}");
    let r = metafork::verify::twothread::check(&f, &leaf.staged, &tree.root_constraints, &b);
    assert!(matches!(r.verdict, metafork::verify::twothread::Verdict::Proved), "{:?}", r.verdict);
}

/// Occupancy as a piecewise rational function (`perf::occupancy`) equals the standard
/// calculation (`tune::occupancy`) on every example's leaf codes, on every built-in device, at
/// sampled points (at least 500 per example), and every limiting resource occurs somewhere.
#[test]
fn symbolic_occupancy_equals_the_calculation() {
    use metafork::perf::occupancy::Occupancy;
    let b = Backend::default();
    let mut rng = common::Rng(0x6f63_6375);
    let devices: Vec<_> = ["v100", "a100", "h100", "l4"].iter().map(|d| constraints::device::DeviceProfile::load(d).unwrap()).collect();
    let mut limiters = BTreeSet::new();
    for (path, text) in common::examples() {
        let mut checked = 0;
        for (f, tree) in common::trees_of(&path, &text, &b) {
            let mut seen = BTreeSet::new();
            for leaf in tree.leaves().filter(|n| matches!(n.kind, metafork::tree::NodeKind::Leaf) && seen.insert(format!("{:?}", n.staged))) {
                let c = &leaf.counters;
                for device in &devices {
                    let occ = Occupancy::of(device, c.registers.into(), &c.threads_per_block, &c.shared_bytes);
                    for _ in 0..150 {
                        let mut point = BTreeMap::new();
                        for p in f.program_parameters() {
                            point.insert(p, SIDES[rng.range(0, SIDES.len() as i64 - 1) as usize]);
                        }
                        for p in f.data_parameters() {
                            point.insert(p, rng.range(1, 4096));
                        }
                        let (Some(threads), Some(shared)) = (eval(&c.threads_per_block, &point), eval(&c.shared_bytes, &point)) else { continue };
                        let expected = metafork::tune::occupancy::occupancy(device, c.registers.into(), shared.max(0) as u64, threads.max(0) as u64);
                        let (value, limiter) = occ.at(&point).unwrap();
                        assert!((value - expected).abs() < 1e-12, "{path} leaf {} on {}: {value} ({limiter:?}) but the calculation says {expected} at {point:?}", leaf.id, device.name);
                        limiters.insert(limiter.unwrap_or("does not fit"));
                        // The definitions as polynomial constraints: Z3 finds the same piece.
                        if let (0, Some(l)) = (checked % 50, limiter) {
                            let piece = occ.pieces.iter().find(|p| p.limiter == l && p.guard[0].holds_at(&point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect()).unwrap()).unwrap();
                            let mut sys = occ.system(piece);
                            for (k, v) in &point {
                                sys.add(constraints::Constraint::eq(&Poly::var(k), &Poly::int(*v)));
                            }
                            let r = b.check(&sys);
                            assert!(r.is_sat(), "{path}: Z3 rejects the {l} piece at {point:?}: {r:?}\n{sys}");
                        }
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked >= 500, "{path}: only {checked} points");
    }
    for l in ["warps", "blocks", "registers", "shared memory", "does not fit"] {
        assert!(limiters.contains(l), "no point limited by {l}: {limiters:?}");
    }
}

/// Issue 27.4: the data-movement model counts, at any point, what matmul's leaves do in closed
/// form (the launch does `2*n^3` flops however the leaf shares them among threads; the cached
/// leaves read both operands from shared memory, the uncached ones `8*n^3` bytes of them from
/// global memory, plus `c` read and written once per tile step), and it ranks the
/// tiles that reuse more data first: a 32 x 32 tile ahead of an 8 x 8 one, which the
/// occupancy x efficiency score had the other way round.
#[test]
fn data_movement_counts_matmul_in_closed_form_and_ranks_reuse_first() {
    use metafork::perf::movement::{launch_shape, work_per_thread};
    let (path, f, tree) = matmul_tree();
    let (mut cached, mut uncached, mut coarsened) = (0, 0, 0);
    for node in tree.leaves().filter(|n| matches!(n.kind, metafork::tree::NodeKind::Leaf)) {
        for (n, b0, ub1, s) in [(64, 8, 8, 1), (256, 16, 4, 4), (96, 4, 2, 3), (128, 32, 32, 2), (256, 16, 4, 8), (128, 8, 4, 4)] {
            let point = BTreeMap::from([("n".to_string(), n), ("B0".to_string(), b0), ("ub1".to_string(), ub1), ("s".to_string(), s)]);
            // Only inside the leaf's region (a register-blocked leaf is for one value of s).
            if !in_region(node, &point) {
                continue;
            }
            let w = work_per_thread(&f, &node.staged, &point).unwrap_or_else(|| panic!("leaf {}: every bound evaluates", node.id));
            let (grid, block) = launch_shape(&f, &node.staged, &point).unwrap();
            let threads = (grid.iter().product::<i64>() * block.iter().product::<i64>()) as f64;
            let n3 = (n * n * n) as f64;
            assert_eq!(w.flops * threads, 2.0 * n3, "leaf {} at {point:?}: {w:?} x {threads} threads", node.id);
            if node.staged.shared.is_empty() {
                uncached += 1;
                // `c` is read and written once per output and tile step: promotion (issue 27.2) applies to
                // the register-blocked leaves, whose block of loads and stores it recognises.
                assert_eq!(w.global_bytes * threads, 8.0 * n3 + 8.0 * (n * n * (n / b0)) as f64, "leaf {} at {point:?}: {w:?}", node.id);
                assert_eq!(w.shared_accesses, 0.0);
            } else {
                cached += 1;
                if node.applied.contains(&metafork::tree::Strategy::RegisterBlock) {
                    // One read of `a` feeds the s outputs (issue 27.1): (s + 1) reads per s
                    // FMAs; coarsened by K, a thread's K x s tile takes K + s reads per K*s.
                    // Plus the tiles' stores: per block and tile step, B0 x B0 elements of `a`
                    // and B0 x ub1*s of `b`.
                    let k = match node.applied.contains(&metafork::tree::Strategy::Coarsen) {
                        true => metafork::strategy::coarsen::factor_for(s),
                        false => 1,
                    };
                    coarsened += (k > 1) as usize;
                    let reads = n3 * (s + k) as f64 / (s * k) as f64;
                    let stores = n3 / (ub1 * s) as f64 + n3 / b0 as f64;
                    assert_eq!(w.shared_accesses * threads, reads + stores, "leaf {} at {point:?}: blocked reads: {w:?}", node.id);
                } else {
                    assert!(w.shared_accesses * threads >= 2.0 * n3, "leaf {} at {point:?}: both operands from the tiles: {w:?}", node.id);
                }
                assert!(w.global_bytes * threads < 8.0 * n3, "leaf {} at {point:?}: the tiles cut global traffic: {w:?}", node.id);
            }
        }
    }
    assert!(cached > 0 && uncached > 0 && coarsened > 0, "matmul has cached, uncached and coarsened leaves");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_metafork")).args(["tune", &path, "--device", "h100", "--size", "n=4096", "--estimates", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let rank = |b0: i64, ub1: i64, s: i64| json.iter().position(|c| c["parameters"]["B0"] == b0 && c["parameters"]["ub1"] == ub1 && c["parameters"]["s"] == s).unwrap_or_else(|| panic!("B0={b0} ub1={ub1} s={s} admissible"));
    assert!(rank(32, 32, 1) < rank(8, 8, 1), "a 32 x 32 tile moves a quarter of an 8 x 8 one's bytes per multiply-add");
    // No configuration beats the device's peak: 2 n^3 flops at 132 x 128 x 2 x 1.98 GHz.
    let peak = 2.0 * 4096f64.powi(3) / (132.0 * 128.0 * 2.0 * 1.98e9);
    for c in &json {
        assert!(c["estimated_seconds"].as_f64().unwrap() >= peak * (1.0 - 1e-9), "{c}");
    }
}

/// The data-movement model weighs each shared access's bank conflicts as often as the access
/// runs: matmul's coarsened leaves store their `a` tile column by column (consecutive lanes a
/// padded column apart: 4-way conflicts at `B0 = 64`) once per element loaded, and read it
/// conflict-free at every multiply-add step. Weighed by the access, the passes exceed the
/// accesses by the stores' extra ways only; the mean over access sites (`Efficiency::banks`)
/// would have charged every read the stores' conflicts.
#[test]
fn bank_conflicts_weigh_as_often_as_the_access_runs() {
    use metafork::perf::movement::{launch_shape, work_per_thread, work_per_thread_with_ways};
    let b = Backend::default();
    let (_, f, tree) = matmul_tree();
    let point = BTreeMap::from([("n".to_string(), 256), ("B0".to_string(), 64), ("ub1".to_string(), 32), ("s".to_string(), 8)]);
    let mut checked = 0;
    for node in tree.leaves().filter(|n| matches!(n.kind, metafork::tree::NodeKind::Leaf) && n.applied.contains(&metafork::tree::Strategy::Coarsen) && !n.staged.shared.is_empty()) {
        if !in_region(node, &point) {
            continue;
        }
        let (_, block) = launch_shape(&f, &node.staged, &point).unwrap();
        let patterns = metafork::perf::pattern::patterns(&f, &node.staged, &tree.root_constraints, &b);
        let mut ways = std::collections::HashMap::new();
        let mut store_ways = 0.0f64;
        for p in patterns.iter().filter(|p| p.shared) {
            let w = p.warp(&point, block).unwrap().bank_ways() as f64;
            if p.write && p.array.contains("a_tile") {
                store_ways = store_ways.max(w);
            } else {
                assert_eq!(w, 1.0, "leaf {}: `{}` is conflict-free", node.id, p.text);
            }
            ways.insert(p.text.clone(), w);
        }
        // Padded columns: 68 words apart, 8 banks; unpadded (the refusal of shared memory
        // stores them so): 64 words apart, one bank.
        let expected = if node.code.unpadded_columns { 32.0 } else { 4.0 };
        assert_eq!(store_ways, expected, "leaf {}: consecutive lanes store a column apart", node.id);
        let plain = work_per_thread(&f, &node.staged, &point).unwrap();
        let weighed = work_per_thread_with_ways(&f, &node.staged, &point, &ways).unwrap();
        // Per thread and tile step: B0*B0 / (threads) stores of `a`, each 3 passes more.
        let threads = (block.iter().product::<i64>()) as f64;
        let steps = (256 / 64) as f64;
        assert_eq!(weighed.shared_accesses - plain.shared_accesses, (expected - 1.0) * steps * (64.0 * 64.0 / threads).ceil(), "leaf {}: {plain:?} {weighed:?}", node.id);
        checked += 1;
    }
    assert!(checked > 0, "a coarsened cached leaf at {point:?}");
}

/// `examples/matmul.mf`'s path, function and tree (shared with the other tests).
fn matmul_tree() -> (String, metafork::frontend::model::KernelFunction, metafork::tree::Tree) {
    let path = format!("{}/examples/matmul.mf", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let (f, tree) = common::trees_of(&path, &text, &Backend::default()).into_iter().next().unwrap();
    (path, f, tree)
}

/// Whether `point` satisfies every constraint of `node`'s region that names only its
/// parameters.
fn in_region(node: &metafork::tree::Node, point: &BTreeMap<String, i64>) -> bool {
    let exact = constraints::exact_point(point);
    node.constraints.constraints().iter().filter(|c| c.vars().iter().all(|v| point.contains_key(v.name()))).all(|c| c.holds_at(&exact).unwrap())
}
