//! The budget's deadline interrupts a query that is still running (its own test binary: the
//! budget is global to a process).

use constraints::solver::{Backend, CheckResult};
use constraints::{budget, Constraint, Domain, Poly, System, Var};
use std::time::{Duration, Instant};

/// `x^3 + y^3 == z^3` over positive integers (no solution, which Z3's nonlinear integer
/// arithmetic cannot prove: it searches until a limit stops it).
fn fermat_cubic() -> System {
    let mut s = System::new();
    for v in ["x", "y", "z"] {
        s.set_domain(Var::new(v), Domain::integer());
        s.add(Constraint::ge(&Poly::var(v), &Poly::one()));
    }
    let cube = |v: &str| &(&Poly::var(v) * &Poly::var(v)) * &Poly::var(v);
    s.add(Constraint::eq(&(&cube("x") + &cube("y")), &cube("z")));
    s
}

#[test]
fn a_query_running_at_the_deadline_is_interrupted() {
    // A resource limit far beyond the deadline: only the deadline can end the query early.
    let backend = Backend::new(600_000);
    budget::set(Some(Duration::from_millis(500)));
    let start = Instant::now();
    let answer = backend.check(&fermat_cubic());
    let took = start.elapsed();
    match answer {
        CheckResult::Unknown(r) => assert_eq!(r, budget::REASON, "after {took:?}"),
        other => panic!("{other:?} after {took:?}"),
    }
    // The watchdog looks every 20 ms; a loaded machine may be slower, never by seconds.
    assert!(took < Duration::from_secs(10), "the query outlived the deadline by {took:?}");
    budget::set(None);
}
