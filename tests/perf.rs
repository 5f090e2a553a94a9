//! The performance counters' closed forms against the lane-enumerating evaluator, on every
//! example's leaf kernels at sampled parameter points (issue 7: at least 500 agreeing points
//! per counter and example), and what they say about the examples' accesses.
mod common;

use constraints::solver::Backend;
use constraints::{Poly, Rational, Var};
use metafork::perf::{formula, pattern};
use std::collections::{BTreeMap, BTreeSet};

/// Program parameters drawn so that blocks come in every shape the formulas split on (warp
/// multiples, divisors of 32) and others (where the formulas may say `None`).
const SIDES: [i64; 12] = [1, 2, 4, 8, 16, 32, 64, 3, 5, 12, 48, 96];

fn eval(p: &Poly, point: &BTreeMap<String, i64>) -> Option<i64> {
    let values: BTreeMap<Var, Rational> = point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect();
    let r = p.eval(&values).ok()?;
    r.is_integer().then(|| i64::try_from(r.to_integer()).ok()).flatten()
}

#[test]
fn closed_forms_agree_with_the_lanes_on_every_example() {
    let b = Backend::default();
    let mut rng = common::Rng(0x7065_7266);
    for (path, text) in common::examples() {
        let (mut coalescing, mut banks, mut shared_patterns) = (0, 0, 0);
        for (f, tree) in common::trees_of(&path, &text, &b) {
            let mut seen = BTreeSet::new();
            for leaf in tree.leaves().filter(|n| matches!(n.kind, metafork::tree::NodeKind::Leaf)) {
                if !seen.insert(format!("{:?}", leaf.staged)) {
                    continue;
                }
                let patterns = pattern::patterns(&leaf.staged, &b);
                shared_patterns += patterns.iter().filter(|p| p.shared).count();
                for _ in 0..600 {
                    let mut point = BTreeMap::new();
                    for p in f.program_parameters() {
                        point.insert(p, SIDES[rng.range(0, SIDES.len() as i64 - 1) as usize]);
                    }
                    for p in f.data_parameters() {
                        point.insert(p, rng.range(1, 4096));
                    }
                    let block: Vec<i64> = leaf.staged.block.iter().map(|e| eval(e, &point).unwrap_or(0)).collect();
                    let block = [0, 1, 2].map(|d| block.get(d).copied().unwrap_or(1));
                    if block.iter().any(|&x| x < 1) {
                        continue;
                    }
                    for p in &patterns {
                        let Some(c) = p.at(&point, block) else { continue };
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
        println!("{path}: coalescing formula checked at {coalescing} access points, bank formula at {banks}");
        assert!(coalescing >= 500, "{path}: only {coalescing} points where the coalescing formula applies");
        if shared_patterns > 0 {
            assert!(banks >= 500, "{path}: only {banks} points where the bank formula applies");
        }
    }
}

/// Transposition before caching, 32 x 32 blocks: the write `c[i*N + j]` (j follows
/// threadIdx.x) is fully coalesced; the read `a[j][i]` walks a column, a sector per lane.
#[test]
fn transpose_reads_a_column_and_writes_a_row() {
    let b = Backend::default();
    let path = format!("{}/examples/transpose.mf", env!("CARGO_MANIFEST_DIR"));
    let program = metafork::frontend::check_source(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    let f = &program.kernels[0];
    let kernel = metafork::kernel::Kernel::from_schedule(f, &f.schedules[0]).unwrap();
    let point: BTreeMap<String, i64> = [("N", 1024), ("B0", 32), ("B1", 32), ("s", 1)].map(|(k, v)| (k.to_string(), v)).into();
    let mut found = BTreeMap::new();
    for p in pattern::patterns(&kernel, &b) {
        let c = p.at(&point, [32, 32, 1]).unwrap();
        let piece = formula::coalescing(&c).unwrap();
        assert_eq!(piece.value, c.coalescing());
        found.insert(p.text.clone(), piece.value);
    }
    assert_eq!(found.get("c[i * N + j]"), Some(&1.0), "{found:?}");
    assert_eq!(found.get("a[j][i]"), Some(&(4.0 / 32.0)), "{found:?}");
}
