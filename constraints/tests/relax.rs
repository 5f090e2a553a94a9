//! The exact pre-checks before Z3 (`relax`): a refutation by the linear relaxation is a proof
//! (never claimed for a system with a solution), and a guessed point solves the system.

use constraints::parse::parse_constraints;
use constraints::relax::{guess, refutes};
use constraints::solver::{Backend, CheckResult};
use constraints::{Constraint, Domain, Poly, Rational, System, Var};
use num_bigint::BigInt;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn system(texts: &[&str], integer: bool) -> System {
    let mut s = System::new();
    for t in texts {
        for c in parse_constraints(t).unwrap() {
            s.add(c);
        }
    }
    if integer {
        for v in s.vars() {
            s.set_domain(v, Domain::integer());
        }
    }
    s
}

#[test]
fn linear_contradictions_are_refuted() {
    assert!(refutes(&system(&["1 <= R", "32 <= R", "B <= T_B", "R < 17"], true), None));
    assert!(refutes(&system(&["x <= y", "y <= z", "z < x"], false), None));
    assert!(!refutes(&system(&["1 <= R", "32 <= R", "B <= T_B", "R < 40"], true), None));
}

#[test]
fn an_implication_is_refuted_through_its_negation() {
    let s = system(&["1 <= m", "1 <= n", "1 <= B"], true);
    let c: Constraint = "1 <= m + B".parse().unwrap();
    assert!(refutes(&s, Some(&c.negate())));
    let weaker: Constraint = "3 <= m + B".parse().unwrap();
    assert!(!refutes(&s, Some(&weaker.negate())));
}

#[test]
fn integers_tighten_strict_and_fractional_bounds() {
    // No integer between x and x + 1; reals have one.
    assert!(refutes(&system(&["x < y", "y < x + 1"], true), None));
    assert!(!refutes(&system(&["x < y", "y < x + 1"], false), None));
    // 2*x == 2*y + 1 has no integer solution (the gcd does not divide the constant).
    assert!(refutes(&system(&["2*x == 2*y + 1"], true), None));
    assert!(!refutes(&system(&["2*x == 2*y + 1"], false), None));
}

#[test]
fn products_of_bounded_variables_are_bounded() {
    assert!(refutes(&system(&["1 <= a", "1 <= b", "a*b < 1"], true), None));
    assert!(refutes(&system(&["32 <= B0", "2 <= B1", "B0*B1 <= 63"], true), None));
    // McCormick: (x - 2)*(y - 3) >= 0.
    assert!(refutes(&system(&["2 <= x", "3 <= y", "x*y < 3*x + 2*y - 6"], true), None));
    assert!(!refutes(&system(&["2 <= x", "3 <= y", "x*y <= 3*x + 2*y - 6"], true), None));
    // Without lower bounds a product says nothing.
    assert!(!refutes(&system(&["a*b < 1"], true), None));
}

#[test]
fn a_disequality_is_split_and_a_non_divisibility_left_to_z3() {
    // `x != 1` is `x < 1 or x > 1`, each side refuted beside `1 <= x <= 1`.
    assert!(refutes(&system(&["1 <= x", "x <= 1", "x != 1"], true), None));
    assert!(!refutes(&system(&["1 <= x", "x <= 2", "x != 1"], true), None));
    // Over the reals too: `x != 1` beside `x == 1`.
    assert!(refutes(&system(&["x == 1", "x != 1"], false), None));
    // Non-divisibility is left to Z3: the relaxation without it is satisfiable.
    let mut s = system(&["1 <= x", "x <= 2"], true);
    s.add(Constraint::divides(2, &Poly::var("x")).negate());
    assert!(!refutes(&s, None));
}

#[test]
fn a_divisibility_is_a_multiple_of_a_new_integer() {
    // n == 1 beside n % 4 == 0 (a tree's trip-count fork under a fixed size): refuted by the
    // gcd once n is eliminated before the quotient, with no Z3 query.
    let divisible = |texts: &[&str], m: u32, p: &str| {
        let mut s = system(texts, true);
        s.add(Constraint::divides(m, &p.parse::<Poly>().unwrap()));
        s
    };
    assert!(refutes(&divisible(&["1 <= n", "n == 1"], 4, "n"), None));
    assert!(refutes(&divisible(&["5 <= n", "n <= 7"], 4, "n"), None));
    // Satisfiable ones are never refuted, negative multiples included.
    assert!(!refutes(&divisible(&["5 <= n", "n <= 8"], 4, "n"), None));
    assert!(!refutes(&divisible(&["-9 <= n", "n <= -7"], 4, "n"), None));
    assert!(!refutes(&divisible(&["1 <= n", "1 <= B"], 4, "n*B"), None));
    let b = Backend::default();
    assert!(b.check(&divisible(&["1 <= n", "n == 1", "32 <= R"], 4, "n")).is_unsat());
    assert_eq!(b.queries(), 0);
}

#[test]
fn guessed_points_solve_the_system() {
    let s = system(&["1 <= m", "1 <= B", "0 <= bx", "0 <= tx", "bx*B + tx < m"], true);
    let p = guess(&s).expect("the lower bounds solve it");
    assert_eq!(s.holds_at(&p), Ok(true));
    // No simple point solves this one; the back end moves the first onto the constraints it
    // fails (`T_B` up to `B`, `m` up to `64*N_SM`) and asks Z3 nothing.
    let s = system(&["1 <= m", "32 <= B", "B <= T_B", "1 <= T_B", "1 <= N_SM", "64*N_SM <= m"], true);
    assert!(guess(&s).is_none());
    let b = Backend::default();
    match b.check(&s) {
        CheckResult::Sat(m) => assert_eq!(s.holds_at(&m.values), Ok(true)),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.queries(), 0);
    assert!(guess(&system(&["x < y", "y < x + 1"], true)).is_none());
}

#[test]
fn the_back_end_answers_without_a_query_where_the_pre_checks_decide() {
    let b = Backend::default();
    assert!(b.check(&system(&["1 <= R", "32 <= R", "R < 17"], true)).is_unsat());
    assert!(matches!(b.check(&system(&["1 <= m", "1 <= B", "B <= m"], true)), CheckResult::Sat(_)));
    assert_eq!(b.queries(), 0);
    // Neither decides `x*x == 2*y*y` with `1 <= y` (unsat over the integers), nor does the
    // seeded search: Z3 is asked, under the short limit first, then under the whole one: two
    // runs of one query.
    let hard = system(&["1 <= y", "x*x == 2*y*y"], true);
    let answer = b.check(&hard);
    assert!(!answer.is_sat(), "{answer:?}");
    assert_eq!((b.queries(), b.z3_runs()), (1, 2));
}

fn small_system() -> impl Strategy<Value = (Vec<Constraint>, bool)> {
    let names = ["x", "y", "z"];
    let term = (-3i64..=3, proptest::collection::vec(0usize..3, 0..3)).prop_map(move |(c, vs)| {
        vs.iter().fold(Poly::int(c), |p, v| p * Poly::var(names[*v]))
    });
    let poly = proptest::collection::vec(term, 1..4).prop_map(|ts| ts.into_iter().fold(Poly::zero(), |a, t| a + t));
    let rel = prop_oneof![Just(constraints::Rel::Lt), Just(constraints::Rel::Le), Just(constraints::Rel::Eq), Just(constraints::Rel::Ne), Just(constraints::Rel::Dvd(2)), Just(constraints::Rel::Dvd(3))];
    (proptest::collection::vec((poly, rel).prop_map(|(p, r)| Constraint::new(p, r)), 1..6), any::<bool>())
}

/// No integer point of the box `-4..=4` in x, y, z that `s`'s domains admit solves `s`: checked
/// where `s` was refuted (a solution anywhere would be a counterexample; the box is where one
/// can be looked for).
fn no_point_in_the_box(s: &System) -> Result<(), TestCaseError> {
    for x in -4i64..=4 {
        for y in -4i64..=4 {
            for z in -4i64..=4 {
                let point: BTreeMap<Var, Rational> = [("x", x), ("y", y), ("z", z)].iter().map(|(n, v)| (Var::new(n), Rational::from_integer(BigInt::from(*v)))).collect();
                let admitted = s.domains().iter().all(|(v, d)| d.admits(&point[v]));
                prop_assert!(!(admitted && s.holds_at(&point) == Ok(true)), "refuted {} but {:?} solves it", s, point);
            }
        }
    }
    Ok(())
}

proptest! {
    /// A refuted system has no integer point in a box around the origin (a solution
    /// anywhere would be a counterexample; the box is where one can be looked for).
    #[test]
    fn refutations_are_sound_and_guesses_are_solutions((cs, bounded) in small_system()) {
        let mut s = System::new();
        for c in &cs {
            s.add(c.clone());
        }
        for v in ["x", "y", "z"] {
            let d = if bounded { Domain::integer_between(Some(-2), Some(3)) } else { Domain::integer() };
            s.set_domain(Var::new(v), d);
        }
        if let Some(p) = guess(&s) {
            prop_assert_eq!(s.holds_at(&p), Ok(true));
        }
        if refutes(&s, None) {
            no_point_in_the_box(&s)?;
        }
    }

    /// The same with an alias among the constraints (`x == y`, `z == c`: the relaxation is
    /// tried again with the alias substituted) and each variable's domain bounded or not on
    /// its own (a replaced variable's bounds are restated on its replacement).
    #[test]
    fn refutations_through_aliases_are_sound((cs, _) in small_system(), alias in 0usize..4, c in -3i64..=3, bounded in proptest::collection::vec(any::<bool>(), 3)) {
        let mut s = System::new();
        let alias = match alias {
            0 => Constraint::eq(&Poly::var("x"), &Poly::var("y")),
            1 => Constraint::eq(&Poly::var("z"), &Poly::var("x")),
            2 => Constraint::eq(&Poly::var("y"), &Poly::int(c)),
            _ => Constraint::eq(&Poly::var("z").scale(&Rational::from_integer(BigInt::from(2))), &Poly::int(c)),
        };
        s.add(alias);
        for c in &cs {
            s.add(c.clone());
        }
        for (v, b) in ["x", "y", "z"].iter().zip(&bounded) {
            let d = if *b { Domain::integer_between(Some(-2), Some(3)) } else { Domain::integer() };
            s.set_domain(Var::new(v), d);
        }
        if refutes(&s, None) {
            no_point_in_the_box(&s)?;
        }
    }

    /// Evaluation in machine integers agrees with exact rational evaluation.
    #[test]
    fn small_integer_evaluation_is_exact((cs, _) in small_system(), x in -1000i64..1000, y in -1000i64..1000, z in -(1i64 << 40)..(1i64 << 40)) {
        let point: BTreeMap<Var, Rational> = [("x", x), ("y", y), ("z", z)].iter().map(|(n, v)| (Var::new(n), Rational::from_integer(BigInt::from(*v)))).collect();
        let third = Rational::new(BigInt::from(1), BigInt::from(3));
        for c in &cs {
            // A non-integer coefficient takes the exact path.
            let exact = c.poly().scale(&third).eval(&point).unwrap() * Rational::from_integer(BigInt::from(3));
            prop_assert_eq!(c.poly().eval(&point).unwrap(), exact);
        }
    }
}
