//! Property tests: `Poly` is a commutative ring, evaluation is a ring homomorphism, and the
//! printed form parses back to the same polynomial.

use constraints::{Constraint, Poly, Rational, Var};
use num_bigint::BigInt;
use proptest::prelude::*;
use std::collections::BTreeMap;

const NAMES: [&str; 5] = ["s", "B", "B0", "Z_B", "n"];

fn rational() -> impl Strategy<Value = Rational> {
    (-20i64..=20, 1i64..=6).prop_map(|(a, b)| Rational::new(BigInt::from(a), BigInt::from(b)))
}

fn term() -> impl Strategy<Value = Poly> {
    (rational(), proptest::collection::vec((0usize..NAMES.len(), 1u32..=3), 0..3)).prop_map(
        |(c, factors)| {
            let mut p = Poly::constant(c);
            for (i, e) in factors {
                p = p * Poly::var(NAMES[i]).pow(e);
            }
            p
        },
    )
}

fn poly() -> impl Strategy<Value = Poly> {
    proptest::collection::vec(term(), 0..5)
        .prop_map(|ts| ts.into_iter().fold(Poly::zero(), |acc, t| acc + t))
}

fn point() -> impl Strategy<Value = BTreeMap<Var, Rational>> {
    proptest::collection::vec(rational(), NAMES.len())
        .prop_map(|xs| NAMES.iter().map(|n| Var::new(n)).zip(xs).collect())
}

proptest! {
    #[test]
    fn addition_is_commutative_and_associative(a in poly(), b in poly(), c in poly()) {
        prop_assert_eq!(&a + &b, &b + &a);
        prop_assert_eq!((&a + &b) + &c, &a + (&b + &c));
        prop_assert_eq!(&a + &Poly::zero(), a.clone());
        prop_assert!((&a - &a).is_zero());
    }

    #[test]
    fn multiplication_is_commutative_associative_and_distributes(a in poly(), b in poly(), c in poly()) {
        prop_assert_eq!(&a * &b, &b * &a);
        prop_assert_eq!((&a * &b) * &c, &a * (&b * &c));
        prop_assert_eq!(&a * (&b + &c), &a * &b + &a * &c);
        prop_assert_eq!(&a * &Poly::one(), a.clone());
    }

    #[test]
    fn evaluation_is_a_ring_homomorphism(a in poly(), b in poly(), x in point()) {
        let (va, vb) = (a.eval(&x).unwrap(), b.eval(&x).unwrap());
        prop_assert_eq!((&a + &b).eval(&x).unwrap(), &va + &vb);
        prop_assert_eq!((&a * &b).eval(&x).unwrap(), &va * &vb);
        prop_assert_eq!((-&a).eval(&x).unwrap(), -va.clone());
        prop_assert_eq!(a.pow(3).eval(&x).unwrap(), &va * &va * &va);
    }

    #[test]
    fn substitution_commutes_with_evaluation(a in poly(), r in poly(), x in point()) {
        // a[s := r] evaluated at x equals a evaluated at x with s set to r(x).
        let s = Var::new("s");
        let mut y = x.clone();
        y.insert(s.clone(), r.eval(&x).unwrap());
        prop_assert_eq!(a.substitute(&s, &r).eval(&x).unwrap(), a.eval(&y).unwrap());
    }

    #[test]
    fn printing_round_trips(a in poly()) {
        let text = a.to_string();
        let back: Poly = text.parse().unwrap();
        prop_assert_eq!(back, a);
    }

    #[test]
    fn constraint_printing_round_trips(a in poly(), b in poly(), rel in 0usize..6) {
        let c = match rel {
            0 => Constraint::lt(&a, &b),
            1 => Constraint::le(&a, &b),
            2 => Constraint::eq(&a, &b),
            3 => Constraint::ne(&a, &b),
            4 => Constraint::gt(&a, &b),
            _ => Constraint::ge(&a, &b),
        };
        let back: Constraint = c.to_string().parse().unwrap();
        prop_assert_eq!(back, c);
    }

    #[test]
    fn total_degree_of_a_product_adds(a in poly(), b in poly()) {
        prop_assume!(!a.is_zero() && !b.is_zero());
        prop_assert_eq!((&a * &b).total_degree(), a.total_degree() + b.total_degree());
    }
}

#[test]
fn parse_rejects_non_polynomials_with_a_position() {
    let e = "N / B0".parse::<Poly>().unwrap_err();
    assert_eq!(e.offset, 2);
    assert!(e.message.contains("divided by a constant"), "{}", e.message);
    let e = "2 * (s + ".parse::<Poly>().unwrap_err();
    assert!(e.message.contains("end of input"), "{}", e.message);
    assert!("x y".parse::<Poly>().is_err());
}

#[test]
fn readable_infix_forms() {
    let p: Poly = "2*s*B + 2".parse().unwrap();
    assert_eq!(p.to_string(), "2*s*B + 2");
    let q: Poly = "(B0 + 1)^2 - B0^2".parse().unwrap();
    assert_eq!(q.to_string(), "2*B0 + 1");
    let r: Poly = "N/2 - 3/4".parse().unwrap();
    assert_eq!(r.to_string(), "1/2*N - 3/4");
    assert_eq!(p.total_degree(), 2);
    assert_eq!(p.vars().into_iter().map(|v| v.to_string()).collect::<Vec<_>>(), ["s", "B"]);
}
