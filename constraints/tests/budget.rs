//! The process-wide time budget (its own test binary: the budget is global to a process).

use constraints::solver::{Backend, CheckResult};
use constraints::{budget, Constraint, Poly, System};
use std::time::Duration;

#[test]
fn a_spent_budget_makes_every_query_unknown_never_sat_or_unsat() {
    let mut sat = System::new();
    sat.add(Constraint::ge(&Poly::var("x"), &Poly::one()));
    let mut unsat = sat.clone();
    unsat.add(Constraint::le(&Poly::var("x"), &Poly::zero()));
    let b = Backend::default();
    assert!(b.check(&sat).is_sat());
    assert!(b.check(&unsat).is_unsat());
    budget::set(Some(Duration::ZERO));
    assert!(budget::expired());
    assert_eq!(budget::remaining(), Some(Duration::ZERO));
    for s in [&sat, &unsat] {
        match b.check(s) {
            CheckResult::Unknown(r) => assert_eq!(r, budget::REASON),
            other => panic!("{other:?}"),
        }
    }
    budget::set(None);
    assert!(!budget::expired() && budget::remaining().is_none());
    assert!(b.check(&sat).is_sat());
    budget::set(Some(Duration::from_secs(3600)));
    assert!(!budget::expired() && budget::remaining().unwrap() > Duration::from_secs(3500));
    // A share ends the budget sooner on its own thread, for its work only; a longer share
    // nested in it does not extend it.
    budget::with_share(Duration::ZERO, || {
        assert!(budget::expired());
        assert!(matches!(b.check(&sat), CheckResult::Unknown(r) if r == budget::REASON));
        assert!(!std::thread::spawn(budget::expired).join().unwrap(), "another thread keeps the whole budget");
        budget::with_share(Duration::from_secs(60), || assert!(budget::expired()));
    });
    assert!(!budget::expired());
    assert!(b.check(&sat).is_sat());
    budget::with_share(Duration::from_secs(60), || assert!(!budget::expired()));
}
