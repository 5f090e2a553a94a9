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
}
