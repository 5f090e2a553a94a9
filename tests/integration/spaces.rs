//! Search-space construction by propagation: the published spaces give exactly the admissible
//! counts recorded with them, equal to brute force over the Cartesian product where that is
//! small enough; random spaces agree with brute force; bad spaces get clear errors.

use metafork::tune::space::{brute_force, load, Space};
use proptest::prelude::*;
use std::collections::BTreeSet;

fn rows(space: &Space) -> BTreeSet<Vec<i64>> {
    let a = space.build(None, None);
    let set: BTreeSet<Vec<i64>> = (0..a.len()).map(|i| a.row(i).to_vec()).collect();
    assert_eq!(set.len(), a.len(), "a configuration appears twice");
    set
}

#[test]
fn published_spaces_have_their_recorded_admissible_counts() {
    let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/bench/tuning-spaces.yaml"));
    let spaces = load(path, None).unwrap();
    assert_eq!(spaces.len(), 5);
    for (name, space, spec) in &spaces {
        assert_eq!(Some(space.cartesian()), spec.cartesian, "{name}: Cartesian size");
        let built = space.build(None, None);
        assert_eq!(Some(built.len() as u64), spec.valid, "{name}: admissible count");
        if space.cartesian() <= 100_000 {
            assert_eq!(rows(space), brute_force(space), "{name}: differs from brute force");
        }
    }
}

#[test]
fn a_filter_sees_only_admissible_rows_and_can_refuse() {
    let space = Space::new(vec![("x".into(), (1..=64).collect()), ("y".into(), (1..=64).collect())], &["x * y <= 256".into(), "x % 2 == 0".into()]).unwrap();
    let mut seen = 0;
    let mut filter = |row: &[i64]| {
        assert!(row[0] * row[1] <= 256 && row[0] % 2 == 0);
        seen += 1;
        row[1] != 3
    };
    let a = space.build(Some(&mut filter), None);
    assert_eq!(a.len() + (1..=64).filter(|x| x % 2 == 0 && x * 3 <= 256).count(), seen);
    assert!((0..a.len()).all(|i| a.row(i)[1] != 3));
}

#[test]
fn bad_spaces_are_refused_with_the_reason() {
    let err = Space::new(vec![("x".into(), vec![1, 2])], &["x * z <= 4".into()]).unwrap_err();
    assert!(err.contains("`z` is not a parameter"), "{err}");
    let err = Space::new(vec![("x".into(), vec![1, 2])], &["x <= ".into()]).unwrap_err();
    assert!(err.contains("restriction `x <= `"), "{err}");
    let err = Space::new(vec![("x".into(), vec![1]), ("x".into(), vec![2])], &[]).unwrap_err();
    assert!(err.contains("given twice"), "{err}");
    let dir = crate::common::scratch("space");
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("s.yaml");
    std::fs::write(&f, "params:\n  x: {range: [4, 1]}\n").unwrap();
    let err = load(&f, None).unwrap_err();
    assert!(err.contains("parameter `x`") && err.contains("empty or backwards"), "{err}");
    std::fs::write(&f, "params:\n  x: [1, 2]\nrestriction: []\n").unwrap();
    let err = load(&f, None).unwrap_err();
    assert!(err.contains("s.yaml:3:1: unknown field `restriction`"), "{err}");
    // Each error names its line (and the space, in a file of several); a long restriction is
    // shown by its ends.
    let long = format!("{}x{} > 0 +", "(".repeat(3000), ")".repeat(3000));
    for (text, message) in [
        ("params:\n  x: [1, 2]\n  y: {range: [4, 1]}\n".to_string(), "s.yaml:3: parameter `y`: range [4, 1] with step 1 is empty or backwards".to_string()),
        ("params:\n  x: [1, 2]\n  y: abc\n".into(), "s.yaml:3: parameter `y`: expected a list of integers or {range: [lo, hi], step: s}".into()),
        // A value listed twice would be counted and ranked twice.
        ("params:\n  x: [1, 2]\n  y: [8, 4, 8]\n".into(), "s.yaml:3: parameter `y`: value 8 is listed twice".into()),
        ("params:\n  x: [1, 2]\n  x: [3]\n".into(), "s.yaml:3:3: params: duplicate entry with key \"x\"".into()),
        ("# two\nspaces:\n  a:\n    params:\n      x: [1, 2]\n    restrictions:\n      - x > 0\n      - x * z < 3\n".into(), "s.yaml:8: space `a`: restriction `x * z < 3`: `z` is not a parameter of the space".into()),
        (format!("params:\n  x: [1, 2]\nrestrictions:\n  - x > 0\n  - {long}\n"), format!("s.yaml:5: restriction `{} … {} > 0 +` (6007 characters): ", "(".repeat(40), ")".repeat(34))),
        ("spaces: 3\n".into(), "s.yaml:1: `spaces` must be a mapping of names to spaces".into()),
    ] {
        std::fs::write(&f, &text).unwrap();
        let err = load(&f, None).unwrap_err();
        assert!(err.starts_with(&f.display().to_string()) && err.contains(&message), "{err}\nexpected: {message}");
        assert!(err.len() < 400, "{err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn restriction() -> impl Strategy<Value = String> {
    let var = prop::sample::select(vec!["a", "b", "c"]);
    prop_oneof![
        (var.clone(), var.clone(), 1i64..200).prop_map(|(x, y, k)| format!("{x} * {y} <= {k}")),
        (var.clone(), 1i64..5).prop_map(|(x, k)| format!("{x} % {k} == 0")),
        (var.clone(), var.clone()).prop_map(|(x, y)| format!("{x} % {y} != 1 || {y} > 3")),
        (var.clone(), var.clone(), -5i64..5).prop_map(|(x, y, k)| format!("{x} - {y} >= {k}")),
        (var.clone(), var).prop_map(|(x, y)| format!("!({x} == {y}) && {x} / ({y} - 2) < 3")),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn propagation_equals_brute_force(
        a in prop::collection::vec(-3i64..20, 1..8),
        b in prop::collection::vec(0i64..20, 1..8),
        c in prop::collection::vec(0i64..40, 1..6),
        rs in prop::collection::vec(restriction(), 0..4),
    ) {
        let dedup = |mut v: Vec<i64>| { v.sort_unstable(); v.dedup(); v.reverse(); v };
        let space = Space::new(vec![("a".into(), dedup(a)), ("b".into(), dedup(b)), ("c".into(), dedup(c))], &rs).unwrap();
        prop_assert_eq!(rows(&space), brute_force(&space));
    }
}

/// The budget (--time-limit, Ctrl-C) stops a search whose innermost range alone holds a million
/// values. It was looked at once per 4096 completed loops, so a space of two such ranges ran
/// for a minute past a limit of 2 s, and a Ctrl-C waited as long.
#[test]
fn a_spent_budget_stops_a_search_within_its_innermost_range() {
    let range: Vec<i64> = (1..=1_000_000).collect();
    let space = Space::new(vec![("B".into(), range.clone()), ("C".into(), range)], &["B * C == 7".into()]).unwrap();
    let started = std::time::Instant::now();
    let built = constraints::budget::with_share(std::time::Duration::ZERO, || space.build(None, None));
    let stopped = built.stopped.expect("the search stops with the budget");
    assert!(stopped.contains("--time-limit"), "{stopped}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
}

/// A restriction that is undefined at a configuration (its product passes 64 bits, it divides
/// by zero) leaves that configuration out, as before, and now says so with the first place:
/// the configurations did vanish without a word.
#[test]
fn configurations_left_out_for_an_undefined_restriction_are_counted_and_named() {
    let space = Space::new(vec![("B".into(), (1..=8).collect()), ("C".into(), vec![i64::MAX])], &["B * C > 0".into()]).unwrap();
    let built = space.build(None, None);
    assert_eq!((built.len(), built.undefined), (1, 7), "B = 1 holds; B = 2..8 overflow");
    let note = built.undefined_note().expect("a note");
    assert!(note.starts_with("7 partial configurations were left out") && note.contains("`B * C > 0` at ") && note.contains("B = 2"), "{note}");
    let defined = Space::new(vec![("B".into(), (1..=8).collect())], &["B % 2 == 0".into()]).unwrap().build(None, None);
    assert_eq!((defined.len(), defined.undefined_note()), (4, None));
}
