//! Known answers from the Z3 back end, including the paper's 1D Jacobi case split.

use constraints::solver::{Backend, CheckResult, Implication, Simplified};
use constraints::{parse::parse_constraints, Constraint, Domain, System, Var};
use num_traits::ToPrimitive;

/// A system from constraint texts; every variable is a positive-or-zero integer.
fn system(texts: &[&str]) -> System {
    let mut s = System::new();
    for t in texts {
        for c in parse_constraints(t).unwrap() {
            s.add(c);
        }
    }
    for v in s.vars() {
        s.set_domain(v, Domain::integer_between(Some(0), None));
    }
    s
}

#[test]
fn register_limits_that_contradict_are_unsat() {
    let b = Backend::default();
    assert!(b.check(&system(&["B0*B1 <= T", "14 <= R", "R < 10"])).is_unsat());
}

#[test]
fn register_limit_alone_is_sat_with_a_model_that_satisfies_it() {
    let b = Backend::default();
    let s = system(&["B0*B1 <= T", "14 <= R"]);
    match b.check(&s) {
        CheckResult::Sat(m) => {
            assert!(s.holds_at(&m.values).unwrap(), "model {m:?} violates {s}");
            assert!(m.get("R").unwrap().to_integer().to_i64().unwrap() >= 14);
        }
        other => panic!("expected sat, got {other:?}"),
    }
}

fn jacobi_cases() -> Vec<System> {
    let base = ["s >= 1", "B >= 1"];
    let cases: [&[&str]; 3] = [
        &["2*s*B + 2 <= Z_B"],
        &["2*B + 2 <= Z_B", "Z_B < 2*s*B + 2"],
        &["Z_B < 2*B + 2"],
    ];
    cases
        .iter()
        .map(|extra| system(&base.iter().chain(extra.iter()).copied().collect::<Vec<_>>()))
        .collect()
}

#[test]
fn jacobi_shared_memory_cases_are_consistent_and_pairwise_disjoint() {
    let b = Backend::default();
    let cases = jacobi_cases();
    for (i, c) in cases.iter().enumerate() {
        assert!(b.check(c).is_sat(), "case {i} ({c}) should be consistent");
    }
    for i in 0..cases.len() {
        for j in i + 1..cases.len() {
            let mut both = cases[i].clone();
            for c in cases[j].constraints() {
                both.add(c.clone());
            }
            assert!(b.check(&both).is_unsat(), "cases {i} and {j} overlap: {both}");
        }
    }
}

#[test]
fn jacobi_cases_cover_every_point() {
    // Whatever is outside case 1 (Z_B < 2sB + 2) and outside case 3 (2B + 2 <= Z_B) is in
    // case 2, so the three cases cover every s, B >= 1.
    let b = Backend::default();
    let mut rest = system(&["s >= 1", "B >= 1"]);
    rest.add("2*s*B + 2 <= Z_B".parse::<Constraint>().unwrap().negate());
    rest.add("Z_B < 2*B + 2".parse::<Constraint>().unwrap().negate());
    for c in jacobi_cases()[1].constraints() {
        assert!(matches!(b.implies(&rest, c), Implication::Proved), "{c} not implied by {rest}");
    }
}

#[test]
fn implication_proves_and_refutes() {
    let b = Backend::default();
    let s = system(&["s >= 1", "B >= 1", "2*s*B + 2 <= Z_B"]);
    assert!(matches!(b.implies(&s, &"2*B + 2 <= Z_B".parse().unwrap()), Implication::Proved));
    match b.implies(&s, &"4*B + 2 <= Z_B".parse().unwrap()) {
        Implication::Refuted(m) => {
            assert!(s.holds_at(&m.values).unwrap());
            let c: Constraint = "4*B + 2 <= Z_B".parse().unwrap();
            assert!(!c.holds_at(&m.values).unwrap(), "counter-model {m:?} satisfies the claim");
        }
        other => panic!("expected a refutation, got {other:?}"),
    }
}

#[test]
fn simplify_removes_implied_constraints_and_detects_inconsistency() {
    let b = Backend::default();
    let s = system(&["s >= 1", "B >= 1", "2*s*B + 2 <= Z_B", "2*B + 2 <= Z_B", "B >= 0"]);
    match b.simplify(&s) {
        Simplified::Consistent { system, removed, undecided } => {
            assert_eq!(undecided, 0);
            let kept: Vec<String> = system.constraints().iter().map(|c| c.to_string()).collect();
            assert_eq!(kept, ["1 <= s", "1 <= B", "2*s*B + 2 <= Z_B"]);
            assert_eq!(removed.len(), 2);
        }
        other => panic!("expected consistent, got {other:?}"),
    }
    assert!(matches!(b.simplify(&system(&["x <= 1", "2 <= x"])), Simplified::Inconsistent));
}

#[test]
fn sample_gives_distinct_integer_models_inside_the_system() {
    let b = Backend::default();
    let mut s = system(&["1 <= B", "B <= 4", "1 <= s", "s <= 2", "2*s*B + 2 <= 12"]);
    s.set_domain(Var::new("B"), Domain::integer_between(Some(1), Some(4)));
    let samples = b.sample(&s, 100);
    // Solutions: s=1: B in 1..=4 (2B+2<=12 -> B<=5); s=2: 4B+2<=12 -> B<=2. Six in all.
    assert_eq!(samples.models.len(), 6);
    assert!(samples.exhausted);
    let mut seen = std::collections::BTreeSet::new();
    for m in &samples.models {
        assert!(s.holds_at(&m.values).unwrap());
        assert!(m.values.values().all(|x| x.is_integer()));
        assert!(seen.insert(format!("{:?}", m.values)), "duplicate model");
    }
}

#[test]
fn real_variables_get_exact_rational_models() {
    let b = Backend::default();
    let mut s = System::new();
    for c in parse_constraints("0 < 3*x < 1").unwrap() {
        s.add(c);
    }
    match b.check(&s) {
        CheckResult::Sat(m) => {
            let x = m.get("x").unwrap();
            assert!(m.approximate.is_empty());
            assert!(s.holds_at(&m.values).unwrap(), "x = {x}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unknown_is_reported_as_unknown() {
    // Cubes summing to a cube over the positive integers: Z3's nonlinear integer procedure
    // cannot settle it, so within a 50 ms budget the answer must be unknown, not sat or unsat
    // (nor does the seeded search find a point: there is none). Z3 runs twice: under the short
    // first limit, then under the whole one: one query, two runs.
    let b = Backend::new(50);
    let s = system(&["x >= 1", "y >= 1", "z >= 1", "x^3 + y^3 == z^3"]);
    match b.check(&s) {
        CheckResult::Unknown(reason) => assert!(!reason.is_empty()),
        other => panic!("expected unknown, got {other:?}"),
    }
    assert_eq!((b.queries(), b.z3_runs()), (1, 2));
}

#[test]
fn a_witness_that_solves_the_system_or_can_be_moved_onto_it_answers_without_a_query() {
    let b = Backend::default();
    let parent = system(&["1 <= B", "B <= 1024", "1 <= s", "1 <= Z_B"]);
    let CheckResult::Sat(model) = b.check(&parent) else { panic!("parent system is sat") };
    let before = b.queries();
    // Exactly one of the accept/refuse pair holds at the parent's solution.
    let accept = parent.clone().with(parse_constraints("8*s*B + 8 <= Z_B").unwrap().remove(0));
    let refuse = parent.clone().with(parse_constraints("Z_B < 8*s*B + 8").unwrap().remove(0));
    let (fits, other) = if accept.holds_at(&model.values) == Ok(true) { (accept, refuse) } else { (refuse, accept) };
    assert_eq!(other.holds_at(&model.values), Ok(false));
    assert!(matches!(b.check_with_witness(&fits, Some(&model)), CheckResult::Sat(_)));
    assert_eq!(b.queries(), before, "the witness decided it");
    // The other branch: the witness moved onto its boundary (`Z_B`, linear there) solves it.
    match b.check_with_witness(&other, Some(&model)) {
        CheckResult::Sat(m) => assert!(other.holds_at(&m.values) == Ok(true), "the repaired witness solves the system"),
        r => panic!("the other branch is sat too: {r:?}"),
    }
    assert_eq!(b.queries(), before, "the repaired witness decided it");
    // Linear in a variable with a coefficient that is not constant (`x` in `x*y`, as in a
    // grid-fill condition): the coefficient is taken at the witness; no query.
    let bilinear = system(&["1 <= x", "1 <= y", "7 <= x*y"]);
    let ones = constraints::solver::Model { values: [("x", 1), ("y", 1)].into_iter().map(|(v, x)| (Var::new(v), constraints::Rational::from_integer(x.into()))).collect(), approximate: Default::default() };
    match b.check_with_witness(&bilinear, Some(&ones)) {
        CheckResult::Sat(m) => assert!(bilinear.holds_at(&m.values) == Ok(true)),
        r => panic!("sat: {r:?}"),
    }
    assert_eq!(b.queries(), before);
    // A window that takes a few moves (here the shared memory of a padded tile, `s` = 1 at the
    // witness, where the window and the padded size exclude each other): still no query.
    let window = system(&["1 <= B0", "32 <= B1", "1 <= s", "1 <= Z_B", "8*s*B0*B1 <= Z_B", "Z_B < 8*s*B0*B1 + 4*s*B1 + 4*B0", "8*B0*B1 + 4*B0 + 4*B1 <= Z_B"]);
    let at = constraints::solver::Model { values: [("B0", 2), ("B1", 32), ("s", 1), ("Z_B", 512)].into_iter().map(|(v, x)| (Var::new(v), constraints::Rational::from_integer(x.into()))).collect(), approximate: Default::default() };
    assert_eq!(window.without(&[6].into()).holds_at(&at.values), Ok(true), "the witness solves all but the padded size");
    match b.check_with_witness(&window, Some(&at)) {
        CheckResult::Sat(m) => assert!(window.holds_at(&m.values) == Ok(true)),
        r => panic!("sat: {r:?}"),
    }
    assert_eq!(b.queries(), before, "the repaired witness decided it");
    // A failing constraint linear in no variable, which no simple point solves: the seeded
    // search finds a point (`x = 3, y = 4` or the other way round), still no query.
    let nonlinear = system(&["1 <= x", "1 <= y", "x^2 + y^2 == 25"]);
    match b.check_with_witness(&nonlinear, Some(&ones)) {
        CheckResult::Sat(m) => assert!(nonlinear.holds_at(&m.values) == Ok(true)),
        r => panic!("sat: {r:?}"),
    }
    assert_eq!(b.queries(), before);
    // One the search cannot solve (no integer point, and none it could reach) goes to Z3.
    let irrational = system(&["1 <= x", "x^2 == 2"]);
    assert!(!b.check_with_witness(&irrational, Some(&ones)).is_sat());
    assert!(b.queries() > before);
    let before = b.queries();
    // An infeasible branch is never "repaired": it is unsat, here shown by its linear
    // relaxation with no query.
    let contradiction = fits.clone().with(parse_constraints("B <= 0").unwrap().remove(0));
    assert!(b.check_with_witness(&contradiction, Some(&model)).is_unsat());
    assert_eq!(b.queries(), before);
    // A witness that breaks an integer domain is not taken.
    let mut fractional = model.clone();
    fractional.values.insert(Var::new("B"), constraints::Rational::new(1.into(), 2.into()));
    assert_eq!(fits.holds_at(&fractional.values), Ok(false));
}

/// Divisibility conditions (the performance counters' residue cases) are encoded exactly:
/// padding a row of even length by one makes it odd, whatever its length.
#[test]
fn divisibility_conditions_are_decided_exactly() {
    use constraints::Poly;
    let b = Backend::default();
    let b0 = Poly::var("B0");
    let mut even = system(&["1 <= B0"]);
    even.add(Constraint::divides(2, &b0));
    let mut padded_even = even.clone();
    padded_even.add(Constraint::divides(2, &(&b0 + &Poly::one())));
    assert!(b.check(&padded_even).is_unsat());
    // Witnesses satisfy the divisibility conditions they were asked for.
    let mut odd_multiple = system(&["1 <= B0", "B0 <= 100"]);
    odd_multiple.add(Constraint::not_divides(2, &b0));
    odd_multiple.add(Constraint::divides(3, &b0));
    match b.check(&odd_multiple) {
        CheckResult::Sat(m) => {
            let v = m.get("B0").unwrap().to_integer().to_i64().unwrap();
            assert!(v % 2 == 1 && v % 3 == 0, "B0 = {v}");
            assert!(odd_multiple.holds_at(&m.values).unwrap());
        }
        other => panic!("expected sat, got {other:?}"),
    }
    // Over a real variable, divisibility means an integer quotient.
    let mut real = System::new();
    real.add(Constraint::divides(4, &Poly::var("x")));
    real.add(parse_constraints("1 < x").unwrap().remove(0));
    real.add(parse_constraints("x < 4").unwrap().remove(0));
    assert!(b.check(&real).is_unsat());
}

/// A real relaxation without solutions proves an integer system unsat; one with real
/// solutions (here `1 < 2x < 2`, none of them integers) proves nothing, and the integer check
/// still says unsat; bounds of integer domains are kept; divisibility is not relaxed.
#[test]
fn unsat_over_the_reals_implies_unsat_over_the_integers() {
    let b = Backend::default();
    let nonlinear = system(&["1 <= q", "0 <= r", "r < B", "N == q*B + r", "N < B"]);
    assert!(b.unsat_over_reals(&nonlinear), "q >= 1 and r >= 0 give N >= B");
    assert!(b.check(&nonlinear).is_unsat());
    let between = system(&["1 < 2*x", "2*x < 2"]);
    assert!(!b.unsat_over_reals(&between), "x = 3/4 solves it over the reals");
    assert!(b.check(&between).is_unsat(), "no integer lies strictly between 1/2 and 1");
    // The domain's lower bound 0 (from `system`) is kept: x <= -1 has no solution.
    assert!(b.unsat_over_reals(&system(&["x <= -1"])));
    let even = system(&["x <= -1"]).with(constraints::Constraint::divides(2, &constraints::Poly::var("x")));
    assert!(!b.unsat_over_reals(&even), "divisibility needs integers");
}

#[test]
fn sample_answers_the_same_whatever_the_thread_asked_before() {
    // matmul's leaf that Z3 4.8.12 once searched for minutes in a warmed context.
    let leaf = system(&[
        "1 <= n", "1 <= B0", "1 <= ub1", "1 <= s", "B0 <= s*ub1", "1 <= R", "1 <= Z_B", "1 <= T_B", "1 <= R_B",
        "Z_B < 4*s*ub1*B0 + 4*B0^2", "Z_B < 4*ub1*B0 + 4*B0^2", "32 <= R", "ub1*B0 <= T_B", "R_B < 32*ub1*B0",
        "17*ub1*B0 <= R_B", "1 <= W_SM", "1 <= N_SM", "s*ub1*B0 + 64*N_SM*W_SM <= n*B0 + B0", "22*ub1*B0 <= R_B",
    ]);
    let fresh = std::thread::spawn({
        let leaf = leaf.clone();
        move || Backend::default().sample(&leaf, 3).models
    })
    .join()
    .unwrap();
    // The same thread, after other systems' queries in its context.
    let b = Backend::default();
    for k in 2..40 {
        let other = system(&[&format!("{k}*x*y + z <= w*x + {k}"), "1 <= x", "1 <= y", "x*y*z <= 7*w", &format!("w < {k}*z + x")]);
        let _ = b.sample(&other, 2);
        let _ = b.check(&other);
    }
    let warmed = b.sample(&leaf, 3).models;
    assert_eq!(fresh.len(), 3);
    assert_eq!(fresh, warmed);
}


/// A tree fork's system from a fuzzed daxpy (the `s % 4` unrolling fork below the occupancy
/// gate): Z3's nonlinear integer search ran 57 s on it without spending its resource limit.
fn unrolling_gate_system() -> System {
    let mut s = system(&["1 <= N", "1 <= B", "1 <= s", "1 <= R", "1 <= Z_B", "1 <= T_B", "1 <= R_B", "5 <= R", "B <= T_B + 1", "5*B <= R_B + 5", "1 <= W_SM", "1 <= N_SM", "64*s*B*N_SM*W_SM + 2*s*B^2 + N + 1 <= 2*s*B + B*N + B"]);
    s.add(Constraint::new(constraints::parse::parse_poly("s - 1").unwrap(), constraints::Rel::NotDvd(4)));
    for v in s.vars() {
        s.set_domain(v, Domain::integer_between(Some(1), None));
    }
    s
}

/// Its pre-checks solve it exactly, with no query: the linear repair starts from every simple
/// point, not only the first (whose `s = 1` breaks `(s - 1) % 4 != 0`).
#[test]
fn a_disequality_the_first_simple_point_breaks_is_solved_without_z3() {
    let sys = unrolling_gate_system();
    let b = Backend::default();
    match b.check(&sys) {
        CheckResult::Sat(m) => assert_eq!(sys.holds_at(&m.values), Ok(true), "{m:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.queries(), 0, "answered by Z3, not by the exact pre-checks");
}

/// A query that does not end within its wall-clock cap (factoring a product of two 30-bit
/// primes, under a resource limit far beyond the cap) is interrupted there and answers unknown,
/// saying why. (The bound on the join is a hang detector far above the cap, not a speed test.)
#[test]
fn a_query_past_its_wall_clock_cap_is_interrupted() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sys = system(&["2 <= x", "2 <= y", "x * y == 1000000016000000063"]);
        sys.set_domain(Var::new("x"), Domain::integer_between(Some(2), None));
        sys.set_domain(Var::new("y"), Domain::integer_between(Some(2), None));
        let mut ps = constraints::solver::PathSolver::integer(sys.domains(), 600_000).with_wall_cap(std::time::Duration::from_millis(500));
        for c in sys.constraints() {
            ps.assert(c);
        }
        let _ = tx.send(ps.check());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)).expect("the query ran past two minutes: its wall-clock cap did not stop it") {
        CheckResult::Unknown(reason) => assert!(reason.contains("wall-clock"), "{reason}"),
        CheckResult::Sat(m) => panic!("Z3 factored it within the cap, so this test does not reach the cap: {m:?}"),
        CheckResult::Unsat => panic!("unsat: wrong"),
    }
}
