//! A polynomial of the access model prepared for many lanes at one parameter point.
//!
//! Contract: [`LaneEval::new`] folds the point's values (and 0 for every other variable that is
//! neither a thread index nor one of the model's divisions) into integer coefficients over a
//! common denominator, once. [`LaneEval::eval`] then gives, for one lane, exactly what
//! [`LaneValues::eval`] gives (the same `None`s: a missing division, a division by zero, a
//! value that is not an integer or does not fit `i64`), in machine integers; a lane whose
//! arithmetic would overflow `i128` is handed to [`LaneValues::eval`]. `tests/perf.rs` checks
//! the two agree on every example's conditions and accesses.
//!
//! Hand-written rather than a crate: it is a few lines of checked integer arithmetic over the
//! project's own `Poly`, and the exact path stays the reference.

use super::pattern::{thread, LaneValues};
use constraints::{Poly, Rational, Var};
use num_bigint::BigInt;
use num_traits::{One, ToPrimitive, Zero};
use std::collections::BTreeMap;

/// One polynomial as `sum(coeff * prod(slot^exp)) / den`; slots 0..3 are the thread indices,
/// slot `3 + i` the lane's value of division `i`. `None` when it can never be evaluated (it
/// needs a division the model does not compute) or its folded coefficients do not fit `i128`.
#[derive(Clone, Debug)]
struct IntPoly {
    den: i128,
    terms: Vec<(i128, Vec<(usize, u32)>)>,
}

/// Divisions, in dependency order, and the polynomial, prepared at one point.
pub struct LaneEval<'a> {
    lanes: &'a LaneValues,
    poly: &'a Poly,
    point: &'a BTreeMap<String, i64>,
    /// `None`: the integer path does not apply; every lane takes the exact path.
    prepared: Option<(Vec<(IntPoly, IntPoly, bool)>, IntPoly)>,
}

impl<'a> LaneEval<'a> {
    pub fn new(lanes: &'a LaneValues, poly: &'a Poly, point: &'a BTreeMap<String, i64>) -> LaneEval<'a> {
        let mut slots: BTreeMap<Var, usize> = (0..3u8).map(|d| (thread(d), d as usize)).collect();
        let mut divisions = Vec::new();
        let mut ok = true;
        for (i, (name, def)) in lanes.divisions.iter().enumerate() {
            match (fold(&def.dividend, &slots, point), fold(&def.divisor, &slots, point)) {
                (Some(x), Some(d)) => divisions.push((x, d, def.quotient)),
                _ => ok = false,
            }
            slots.insert(Var::new(name), 3 + i);
        }
        let prepared = if ok { fold(poly, &slots, point).map(|p| (divisions, p)) } else { None };
        LaneEval { lanes, poly, point, prepared }
    }

    /// The polynomial's value for the lane with thread indices `t`.
    pub fn eval(&self, t: [i64; 3]) -> Option<i64> {
        let exact = || self.lanes.eval(self.poly, self.point, t);
        let Some((divisions, poly)) = &self.prepared else { return exact() };
        let mut values: Vec<i128> = t.iter().map(|&x| x as i128).collect();
        for (dividend, divisor, quotient) in divisions {
            let (Ok(x), Ok(d)) = (dividend.eval(&values), divisor.eval(&values)) else { return exact() };
            let (x, d) = (x?, d?);
            if d == 0 {
                return None;
            }
            values.push(if *quotient { x.div_euclid(d) } else { x.rem_euclid(d) } as i128);
        }
        match poly.eval(&values) {
            Ok(v) => v,
            Err(Overflow) => exact(),
        }
    }
}

struct Overflow;

impl IntPoly {
    /// `Ok(None)` where the exact path gives `None` (not an integer, or outside `i64`).
    fn eval(&self, values: &[i128]) -> Result<Option<i64>, Overflow> {
        let mut sum: i128 = 0;
        for (coeff, factors) in &self.terms {
            let mut term = *coeff;
            for &(slot, exp) in factors {
                for _ in 0..exp {
                    term = term.checked_mul(values[slot]).ok_or(Overflow)?;
                }
            }
            sum = sum.checked_add(term).ok_or(Overflow)?;
        }
        Ok((sum % self.den == 0).then(|| i64::try_from(sum / self.den).ok()).flatten())
    }
}

/// `p` with the point's values (0 for other variables outside `slots`) folded in.
fn fold(p: &Poly, slots: &BTreeMap<Var, usize>, point: &BTreeMap<String, i64>) -> Option<IntPoly> {
    let mut folded: BTreeMap<Vec<(usize, u32)>, Rational> = BTreeMap::new();
    for (monomial, coeff) in p.terms() {
        let mut c = coeff.clone();
        let mut factors = Vec::new();
        for (v, e) in monomial.factors() {
            if let Some(&slot) = slots.get(v) {
                factors.push((slot, *e));
            } else if crate::access::is_aux(v.name()) {
                return None; // a division the model does not compute: the exact path says None
            } else {
                let value = point.get(v.name()).copied().unwrap_or(0);
                c *= Rational::from_integer(BigInt::from(value).pow(*e));
            }
        }
        if !c.is_zero() {
            *folded.entry(factors).or_insert_with(Rational::zero) += c;
        }
    }
    let den = folded.values().fold(BigInt::one(), |l, c| num_integer::Integer::lcm(&l, c.denom()));
    let terms = folded
        .into_iter()
        .filter(|(_, c)| !c.is_zero())
        .map(|(f, c)| (c.numer() * (&den / c.denom())).to_i128().map(|n| (n, f)))
        .collect::<Option<Vec<_>>>()?;
    Some(IntPoly { den: den.to_i128()?, terms })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::AuxDef;

    fn tx() -> Poly {
        Poly::from_var(thread(0))
    }

    /// Both paths over lanes 0..64 at `point`.
    fn agree(lanes: &LaneValues, p: &Poly, point: &BTreeMap<String, i64>) -> Vec<Option<i64>> {
        let prepared = LaneEval::new(lanes, p, point);
        (0..64)
            .map(|x| {
                let exact = lanes.eval(p, point, [x, 0, 0]);
                assert_eq!(prepared.eval([x, 0, 0]), exact, "`{p}` at lane {x}");
                exact
            })
            .collect()
    }

    #[test]
    fn rational_coefficients_quotients_and_overflow_agree_with_the_exact_path() {
        let half = Rational::new(1.into(), 2.into());
        // x(x+1)/2: always an integer; x/2: only on even lanes.
        let triangle = (tx() * (tx() + Poly::int(1))).scale(&half);
        let point: BTreeMap<String, i64> = [("N".to_string(), 7)].into();
        assert_eq!(agree(&LaneValues::default(), &triangle, &point)[10], Some(55));
        let halves = agree(&LaneValues::default(), &tx().scale(&half), &point);
        assert_eq!((halves[4], halves[5]), (Some(2), None));
        // q = (x + N) div 4, r = (x + N) mod 4; q*4 + r - x = N; a parameter left out is 0.
        let div = |quotient| AuxDef { dividend: tx() + Poly::var("N"), divisor: Poly::int(4), quotient };
        let lanes = LaneValues { divisions: vec![("$aux_q".into(), div(true)), ("$aux_r".into(), div(false))] };
        let p = Poly::var("$aux_q") * Poly::int(4) + Poly::var("$aux_r") - tx() + Poly::var("M");
        assert!(agree(&lanes, &p, &point).iter().all(|v| *v == Some(7)));
        // A division by zero, and a division the lanes do not compute: None both ways.
        let zero = LaneValues { divisions: vec![("$aux_q".into(), AuxDef { dividend: tx(), divisor: Poly::var("Z"), quotient: true })] };
        assert!(agree(&zero, &Poly::var("$aux_q"), &point).iter().all(Option::is_none));
        assert!(agree(&LaneValues::default(), &Poly::var("$aux_q"), &point).iter().all(Option::is_none));
        // N^3 does not fit i128 at N = 2^62 (every lane takes the exact path); N * x^20 does,
        // and overflows i128 only at a lane (x = 63), which the exact path then answers.
        let big: BTreeMap<String, i64> = [("N".to_string(), 1 << 62)].into();
        let n = Poly::var("N");
        assert!(agree(&LaneValues::default(), &(n.clone() * n.clone() * n.clone() * tx()), &big)[1..].iter().all(Option::is_none));
        let steep = agree(&LaneValues::default(), &(n * tx().pow(20)), &big);
        assert_eq!((steep[0], steep[1], steep[2], steep[63]), (Some(0), Some(1 << 62), None, None));
    }

    /// Several polynomials at one point and lane give what each gives alone, a variable the
    /// first one sets to 0 included, and `None` when any one is `None`.
    #[test]
    fn evaluating_together_is_evaluating_each_alone() {
        let point: BTreeMap<String, i64> = [("N".to_string(), 9)].into();
        let div = |quotient| AuxDef { dividend: tx() + Poly::var("N"), divisor: Poly::int(4), quotient };
        let lanes = LaneValues { divisions: vec![("$aux_q".into(), div(true)), ("$aux_r".into(), div(false))] };
        let ps = [Poly::var("M") + tx(), Poly::var("$aux_q") * Poly::var("N") + Poly::var("M"), Poly::var("$aux_r") - tx()];
        let at = lanes.at(&point);
        for x in 0..40 {
            let alone: Vec<Option<i64>> = ps.iter().map(|p| lanes.eval(p, &point, [x, 0, 0])).collect();
            assert_eq!(at.eval_each(&ps.iter().collect::<Vec<_>>(), [x, 0, 0]), alone.iter().copied().collect::<Option<Vec<i64>>>(), "lane {x}");
            assert_eq!(alone[1], Some((x + 9).div_euclid(4) * 9), "lane {x}");
        }
        let missing = [Poly::var("M"), Poly::var("$aux_unknown")];
        assert_eq!(at.eval_each(&missing.iter().collect::<Vec<_>>(), [3, 0, 0]), None);
        assert_eq!(at.eval(&missing[0], [3, 0, 0]), Some(0));
    }
}
