//! Parameter points for differential runs: small values inside a leaf's constraint system.
//!
//! Contract: every point returned satisfies the program's facts (checked concretely, so
//! non-polynomial ones such as `n % B0 == 0` count) and the leaf's system (checked by Z3, the
//! machine limits existentially: some device admits the leaf there). Candidates are drawn from
//! a seeded generator: program parameters in 1..=`MAX_PROGRAM`, data parameters either anywhere
//! in 1..=`MAX_DATA` (so sizes that are not multiples of the block occur wherever the facts
//! allow them) or a multiple, at most `MAX_DATA`, of the product of a random subset of the
//! program parameters (so facts that demand divisibility can be met; the runs'
//! cost grows with the data sizes, cubically for matrix multiplication). Z3 `unknown` on a candidate skips it; it never admits a point.
//! A leaf that admits no such small point (a warp-shaped region, `32 <= B1`, say) gets a wide
//! round (program parameters also 32, 33 or 64; data up to `WIDE_DATA`, often 1), and when
//! that finds none, Z3's own point (given the facts, `N % B == 0` as `N == B*q`; program parameters at most `WIDE_PROGRAM`, data at most
//! `WIDE_DATA` in absolute value, bounded below by the facts only, so an offset the facts make
//! zero or negative is found; made smaller a few times; where there is none, the same with
//! program parameters up to `MAX_THREADS` and data up to `LARGE_DATA`, for facts such as
//! `B >= 256`); in the wide round a size that facts make a multiple
//! of the program parameters' product may reach `LARGE_DATA`. A leaf with some small points but fewer than wanted
//! gets instead a round with both small bounds doubled, whose values past the small bounds are
//! then made smaller where the region allows. A parameter a fact defines from others
//! (`Lp == (Lout - 3) / 2 + 1`) is set from its definition on every candidate. A point of the wide round is then made
//! smaller where the region allows ([`shrink`]): the region forces some values large, not the
//! others, and a run's cost grows with every size.

use super::differential::SplitMix;
use crate::dispatch::facts::FactSet;
use crate::frontend::model::{KernelFunction, SerialLoop};
use constraints::solver::{Backend, CheckResult};
use constraints::{Constraint, Poly, System};
use std::collections::BTreeMap;

pub const MAX_PROGRAM: i64 = 6;
pub const MAX_DATA: i64 = 24;
/// Bounds of the second round (Z3's points): program parameters and data.
pub const WIDE_PROGRAM: i64 = 64;
pub const WIDE_DATA: i64 = 96;
/// The largest size the wide round gives a data parameter that facts make a multiple of a
/// large product of program parameters (the smallest such multiple).
pub const LARGE_DATA: i64 = 1024;
/// The bound of the last round (Z3's points) on program parameters: the most threads a block
/// holds on every architecture.
pub const MAX_THREADS: i64 = 1024;

/// Up to `wanted` distinct points of `system` (within `attempts` candidates).
pub fn points(function: &KernelFunction, system: &System, backend: &Backend, wanted: usize, attempts: usize, seed: u64) -> Result<Vec<BTreeMap<String, i64>>, String> {
    let facts = FactSet::of(function)?;
    let program = function.program_parameters();
    let data = function.data_parameters();
    let mut rng = SplitMix(seed);
    let divisors = data_divisors(function, &data);
    let equations = defining_equations(function, &facts);
    let mut out: Vec<BTreeMap<String, i64>> = Vec::new();
    // Small points first; a region with none (`32 <= B1`, `N == 1`) gets a round with
    // warp-sized program parameters and data up to WIDE_DATA, then Z3's own points.
    // A region with some small points but fewer than wanted (`s == 8` with `B0 % 4 == 0`
    // leaves about ten below the small bounds) gets one round with the bounds doubled instead.
    let mut topping_up = false;
    // `out`'s points, for an O(log n) duplicate test (thousands of points may be asked).
    let mut seen: std::collections::BTreeSet<BTreeMap<String, i64>> = std::collections::BTreeSet::new();
    for attempt in 0..attempts.saturating_mul(3) {
        // Each candidate costs a Z3 query: the search stops with the budget (the report says
        // fewer points than asked were found, and that the budget was spent).
        if constraints::budget::expired() {
            break;
        }
        if attempt == attempts && !out.is_empty() {
            topping_up = true;
        }
        let wide = attempt >= attempts && !topping_up;
        if out.len() >= wanted || (topping_up && attempt == 2 * attempts) {
            break;
        }
        let mut point = BTreeMap::new();
        for p in &program {
            let v = if wide && rng.range(0, 1) == 1 {
                [32, 33, 64][rng.range(0, 2) as usize]
            } else {
                rng.range(1, if topping_up { 2 * MAX_PROGRAM } else { MAX_PROGRAM })
            };
            point.insert(p.clone(), v);
        }
        // A divisibility of one program parameter (the tree's fork on a trip count,
        // `B0 % 4 == 0`) is met by moving the value to the next one that satisfies it: drawn
        // blindly, such regions are rarely hit.
        // An equation of one program parameter (register blocking's `s == 8`) fixes it.
        for c in system.constraints() {
            let vars = c.poly().vars();
            let (true, Some(v)) = (c.rel() == constraints::Rel::Eq && vars.len() == 1 && c.poly().total_degree() == 1, vars.into_iter().next()) else { continue };
            let Some(x) = point.get_mut(v.name()) else { continue };
            let at = |k: i64| c.poly().eval(&constraints::exact_point(&BTreeMap::from([(v.name().to_string(), k)]))).ok();
            if let (Some(b), Some(ab)) = (at(0), at(1)) {
                let a = ab - b.clone();
                let root = -b / a;
                if root.is_integer() {
                    if let Ok(r) = i64::try_from(root.to_integer()) {
                        *x = r;
                    }
                }
            }
        }
        for c in system.constraints() {
            let (Some(_), Some(v)) = (c.rel().modulus(), c.poly().vars().into_iter().next()) else { continue };
            if c.poly() != &Poly::var(v.name()) {
                continue;
            }
            if let Some(x) = point.get_mut(v.name()) {
                while !c.rel().holds_int(i128::from(*x)) {
                    *x += 1;
                }
            }
        }
        let most = if wide { WIDE_DATA } else if topping_up { 2 * MAX_DATA } else { MAX_DATA };
        // Every third candidate, each data parameter is a multiple of all its facts' divisors
        // at once (`NJ % BX == 0 && NJ % BY == 0 && NJ % BK == 0`: their least common
        // multiple), which independent draws rarely meet when several sizes each need several.
        // In the wide round the multiple may exceed the bound, up to `LARGE_DATA`: a region
        // with `32 <= B`, `s == 8` and the fact `m % (B*s) == 0` has no size below 256.
        if attempt % 3 == 2 {
            let mut directed = point.clone();
            let mut fits = true;
            let cap = if wide { LARGE_DATA } else { most };
            for d in &data {
                let step = divisors.iter().filter(|(name, _)| name == d).try_fold(1i64, |l, (_, e)| {
                    let v = e.eval(&point).filter(|v| *v >= 1)?;
                    let l = lcm(l, v)?;
                    (l <= cap).then_some(l)
                });
                match step {
                    Some(step) => {
                        directed.insert(d.clone(), step * rng.range(1, (most / step).max(1)));
                    }
                    None => fits = false,
                }
            }
            solve(&mut directed, &equations);
            if fits && !seen.contains(&directed) && facts.holds(&directed) && admits(system, backend, &directed) {
                let directed = smaller(directed, wide, topping_up, &seen, system, backend, &facts, &program, &data, &divisors);
                if seen.insert(directed.clone()) {
                    out.push(directed);
                }
            }
            continue;
        }
        for d in &data {
            // A multiple of some program parameters' product (facts such as `n % (ub1 * s) == 0`
            // need one), or any size; never above the round's bound: a run's cost grows with it
            // (cubically for matrix multiplication).
            let factor: i64 = program.iter().filter(|_| rng.range(0, 1) == 1).map(|p| point[p]).product::<i64>().max(1);
            let v = if wide && rng.range(0, 3) == 0 {
                1
            } else if attempt % 2 == 1 && factor <= most {
                factor * rng.range(1, most / factor)
            } else {
                rng.range(1, most)
            };
            point.insert(d.clone(), v);
        }
        solve(&mut point, &equations);
        if !seen.contains(&point) && facts.holds(&point) && admits(system, backend, &point) {
            let point = smaller(point, wide, topping_up, &seen, system, backend, &facts, &program, &data, &divisors);
            if seen.insert(point.clone()) {
                out.push(point);
            }
        }
    }
    // Z3's points within the wide bounds, then, for a region whose facts force large values
    // (`assume(B >= 256 && N % B == 0)`: no point with B <= 64), within the largest block and
    // `LARGE_DATA`.
    for (program_limit, data_limit) in [(WIDE_PROGRAM, WIDE_DATA), (MAX_THREADS, LARGE_DATA)] {
        if !out.is_empty() {
            break;
        }
        // Z3 is given the facts too (`N % B == 0` as `N == B*q`): a narrow region such as
        // `32 <= B`, `64*N_SM*W_SM + B <= N + 1` under that fact holds few points, and a model
        // that breaks the fact is no point at all.
        // The quotients make the query nonlinear over the integers, which Z3 may leave
        // unknown under load: then the system alone, its models filtered by the facts.
        let bounds = (program_limit, data_limit);
        out = bounded_models(&with_facts(function, system), &program, &data, bounds, backend).into_iter().rev().filter(|p| facts.holds(p)).take(wanted).collect();
        if out.is_empty() {
            out = bounded_models(system, &program, &data, bounds, backend).into_iter().rev().filter(|p| facts.holds(p)).take(wanted).collect();
        }
    }
    Ok(out)
}

/// The facts that define a parameter from others (`assume(Lp == (Lout - 3) / 2 + 1)`), in
/// program order: the parameter and the other side compiled with the facts' rules. Drawn
/// blindly, such a parameter almost never meets its definition (a quotient is no constraint
/// for Z3's fallback either), so [`solve`] sets it.
fn defining_equations(function: &KernelFunction, facts: &FactSet) -> Vec<(String, crate::cexpr::Code, Vec<String>)> {
    use crate::frontend::ast::{BinOp, ExprKind};
    let integers = function.integer_parameters();
    // The parameters an expression reads, through derived scalars.
    let reads = |e: &crate::frontend::ast::Expr| {
        let mut names = Vec::new();
        e.names(&mut names);
        function.names_read(names)
    };
    let mut out = Vec::new();
    for f in &function.facts {
        for c in f.condition.conjuncts() {
            let ExprKind::Binary(BinOp::Eq, l, r) = &c.kind else { continue };
            for (side, other) in [(l, r), (r, l)] {
                let ExprKind::Var(v) = &side.kind else { continue };
                if !integers.contains(v) || reads(other).contains(v) {
                    continue;
                }
                if let Ok(code) = facts.compile(other) {
                    out.push((v.clone(), code, integers.clone()));
                    break;
                }
            }
        }
    }
    out
}

/// Set each parameter a fact defines ([`defining_equations`]) to its definition's value at
/// `point`, in order; one that cannot be evaluated there (an overflow) is left as drawn.
fn solve(point: &mut BTreeMap<String, i64>, equations: &[(String, crate::cexpr::Code, Vec<String>)]) {
    for (v, code, order) in equations {
        let slots: Vec<i64> = order.iter().map(|p| point.get(p).copied().unwrap_or(0)).collect();
        if let Some(value) = code.eval(&slots) {
            point.insert(v.clone(), value);
        }
    }
}

/// A point of a round past the small one made smaller where the region allows ([`shrink`]):
/// in the wide round every parameter; in the round with the small bounds doubled, those past
/// their small bound (a convolution's point at `C = 40, F = 36, H = 48, K = 12` ran out of the
/// time budget in the engine: the run's cost is the product of the sizes), so that the
/// values within the small bounds keep their variety.
#[allow(clippy::too_many_arguments)]
fn smaller(point: BTreeMap<String, i64>, wide: bool, topping_up: bool, seen: &Seen, system: &System, backend: &Backend, facts: &FactSet, program: &[String], data: &[String], divisors: &[(String, Divisor)]) -> BTreeMap<String, i64> {
    // The wide round's points are made as small as the region allows, a duplicate then
    // dropped: its values are the region's, not a draw's. The doubled round's stop short of
    // the points taken, so that it still finds as many as asked.
    if wide {
        return shrink(point, &Seen::new(), system, backend, facts, program, data, divisors);
    }
    if !topping_up {
        return point;
    }
    let past = |names: &[String], bound: i64| -> Vec<String> { names.iter().filter(|n| point.get(*n).is_some_and(|v| *v > bound)).cloned().collect() };
    let (program, data) = (past(program, MAX_PROGRAM), past(data, MAX_DATA));
    if program.is_empty() && data.is_empty() {
        return point;
    }
    shrink(point, seen, system, backend, facts, &program, &data, divisors)
}

/// The points already taken, which a shrunk point must stay apart from.
type Seen = std::collections::BTreeSet<BTreeMap<String, i64>>;

/// A wide round's point made smaller where the region allows: each program parameter halved
/// while it stays in the region, then each data parameter brought to the smallest multiple of
/// what the facts make it a multiple of, else halved while it stays (a leaf of a convolution
/// sampled at `C = 40, F = 36, H = 48, K = 12` ran out of time in the engine, where its region
/// forces only `TH*(W - K + 1) >= 64`). The region decides the values it forces (`32 <= B`), and
/// what it leaves free costs nothing: an attention program's sampled `heads = 85` multiplied
/// every run's work by 85 (the sweep of 2026-12-02: leaves left unverified when time ran out).
/// Each try is one Z3 query; the point stays in the facts and the leaf's system, and apart
/// from the points in `seen`.
#[allow(clippy::too_many_arguments)]
fn shrink(mut point: BTreeMap<String, i64>, seen: &Seen, system: &System, backend: &Backend, facts: &FactSet, program: &[String], data: &[String], divisors: &[(String, Divisor)]) -> BTreeMap<String, i64> {
    let accept = |point: &mut BTreeMap<String, i64>, name: &str, value: i64| {
        let mut candidate = point.clone();
        candidate.insert(name.to_string(), value);
        // A point already taken is no new point: the shrinking stops short of it.
        let ok = !seen.contains(&candidate) && facts.holds(&candidate) && admits(system, backend, &candidate);
        if ok {
            *point = candidate;
        }
        ok
    };
    // Rounds over every parameter until none moves: a value the region ties to another (`K <=
    // H`) may move only once the other has.
    for _ in 0..SHRINK_ROUNDS {
        let before = point.clone();
        for p in program {
            while let Some(half) = Some(point[p] / 2).filter(|h| *h >= 1) {
                if !accept(&mut point, p, half) {
                    break;
                }
            }
        }
        for d in data {
            let v = point[d];
            let step = divisors.iter().filter(|(name, _)| name == d).try_fold(1i64, |l, (_, e)| lcm(l, e.eval(&point).filter(|v| *v >= 1)?)).unwrap_or(1);
            if step >= 1 && step < v && accept(&mut point, d, step) {
                continue;
            }
            loop {
                let v = point[d];
                let half = v / 2 / step * step;
                if !(half >= 1 && half < v && accept(&mut point, d, half)) {
                    break;
                }
            }
        }
        if point == before {
            break;
        }
    }
    point
}

/// The most rounds [`shrink`] makes over the parameters (each halving is one Z3 query).
const SHRINK_ROUNDS: usize = 3;

/// The least common multiple of two positive values; `None` on overflow.
fn lcm(a: i64, b: i64) -> Option<i64> {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    (a / x).checked_mul(b)
}

/// A divisor, in program parameters, that a fact demands of a data parameter.
struct Divisor(crate::cexpr::Code, Vec<String>);

impl Divisor {
    fn eval(&self, point: &BTreeMap<String, i64>) -> Option<i64> {
        let slots: Option<Vec<i64>> = self.1.iter().map(|n| point.get(n).copied()).collect();
        self.0.eval(&slots?)
    }
}

/// `(a, b)` when the condition is `a % b == 0` (either way round).
fn divisibility(c: &crate::frontend::ast::Expr) -> Option<(&crate::frontend::ast::Expr, &crate::frontend::ast::Expr)> {
    use crate::frontend::ast::{BinOp, ExprKind};
    let ExprKind::Binary(BinOp::Eq, l, r) = &c.kind else { return None };
    match (&l.kind, &r.kind) {
        (ExprKind::Binary(BinOp::Rem, a, b), ExprKind::Int(0)) | (ExprKind::Int(0), ExprKind::Binary(BinOp::Rem, a, b)) => Some((a, b)),
        _ => None,
    }
}

/// The facts `d % E == 0` (conjuncts of `assume`) with `d` a data parameter and `E` an
/// expression of program parameters only: `(d, E)`.
fn data_divisors(function: &KernelFunction, data: &[String]) -> Vec<(String, Divisor)> {
    use crate::frontend::ast::ExprKind;
    let program = function.program_parameters();
    let mut out = Vec::new();
    for fact in &function.facts {
        for c in fact.condition.conjuncts() {
            let Some((a, b)) = divisibility(c) else { continue };
            let ExprKind::Var(d) = &a.kind else { continue };
            if !data.contains(d) {
                continue;
            }
            let names: Vec<String> = program.clone();
            let slot = |n: &str| names.iter().position(|p| p == n).map(crate::cexpr::Resolved::Slot).ok_or_else(|| format!("`{n}` is not a program parameter"));
            if let Ok(code) = crate::cexpr::Code::compile(b, &slot) {
                out.push((d.clone(), Divisor(code, names)));
            }
        }
    }
    out
}

/// Points of `system` with program parameters in 1..=`program_limit` and data in
/// -`data_limit`..=`data_limit` (the facts bound sizes below), from Z3 models, each with a smaller sum of the parameters than the one
/// before (the differential run's cost grows with them); integer values only; none when there
/// is no such point or Z3 cannot tell.
fn bounded_models(system: &System, program: &[String], data: &[String], (program_limit, data_limit): (i64, i64), backend: &Backend) -> Vec<BTreeMap<String, i64>> {
    let mut bounded = system.clone();
    // Program parameters (block sizes, factors) are positive. A data parameter is bounded
    // below by the facts only: an offset `0 <= k < n` is 0 wherever `n == 1` (its leaf had
    // no point while every data parameter was drawn from 1).
    for (names, lo, hi) in [(program, 1, program_limit), (data, -data_limit, data_limit)] {
        for n in names {
            bounded.add(Constraint::le(&Poly::int(lo), &Poly::var(n)));
            bounded.add(Constraint::le(&Poly::var(n), &Poly::int(hi)));
        }
    }
    let sum = program.iter().chain(data).fold(Poly::zero(), |acc, n| acc + Poly::var(n));
    let mut found = Vec::new();
    for _ in 0..4 {
        let CheckResult::Sat(model) = backend.check(&bounded) else { break };
        let point: Option<BTreeMap<String, i64>> = program
            .iter()
            .chain(data)
            .map(|n| {
                let v = model.get(n)?;
                v.is_integer().then(|| i64::try_from(v.to_integer()).ok()).flatten().map(|v| (n.clone(), v))
            })
            .collect();
        let Some(point) = point else { break };
        bounded.add(Constraint::lt(&sum, &Poly::int(point.values().sum())));
        found.push(point);
    }
    found
}

/// The prefix of the host loop counters' names in [`unreachable`]'s system.
const HOST_COUNTER: &str = "$host_counter";

/// Whether no parameter values satisfy `system` together with the program's facts, those with
/// a polynomial modulus included ([`with_facts`]), which the tree's systems do not carry, and
/// with an iteration of each of `host_loops` (the serial host loops around the schedule,
/// outermost first: `lo <= c < hi` for an integer counter `c` of each, a loop whose bounds
/// are not polynomials left out): Z3 `unsat` (never `unknown`) proves that no point of the
/// leaf's region runs, so the dispatcher never selects it (a region such as `k == 1 && T % 4
/// == 0` under the fact `k % T == 0`; `n == 1` for a schedule inside `for (d = 1; d < n;
/// d++)`, which never launches).
pub fn unreachable(function: &KernelFunction, system: &System, host_loops: &[SerialLoop], backend: &Backend) -> bool {
    let mut sys = with_facts(function, system);
    let derived = function.derived_polys();
    // Each counter gets an internal name (`$host_counter0`, ...; never a C identifier): a user's
    // counter may be spelled as a machine symbol (`for (int R = 0; ...)` beside the registers
    // per thread `R`), and the two must not be one variable.
    let mut counters: Vec<(constraints::Var, Poly)> = Vec::new();
    for (k, l) in host_loops.iter().enumerate() {
        use crate::frontend::polyexpr::to_poly;
        let fresh = format!("{HOST_COUNTER}{k}");
        let renamed = |p: Poly| counters.iter().fold(p, |p, (v, c)| p.substitute(v, c));
        if let (true, Some(lo), Some(hi)) = (l.step > 0, to_poly(&l.lo, &derived), to_poly(&l.hi, &derived)) {
            let (lo, hi, counter) = (renamed(lo), renamed(hi), Poly::var(&fresh));
            sys.set_domain(constraints::Var::new(&fresh), constraints::Domain::integer());
            sys.add(Constraint::le(&lo, &counter));
            sys.add(if l.inclusive { Constraint::le(&counter, &hi) } else { Constraint::lt(&counter, &hi) });
        }
        counters.push((constraints::Var::new(&l.var), Poly::var(&fresh)));
    }
    matches!(backend.check(&sys), CheckResult::Unsat)
}

/// `system` with the program's facts, those with a polynomial modulus as `k == T*q` (`q` a
/// fresh integer).
fn with_facts(function: &KernelFunction, system: &System) -> System {
    with_program_facts(function, system, true)
}

/// `system` with the program's divisibility facts whose modulus is a polynomial (`N % B == 0`,
/// which no constraint of the tree carries: a constant modulus is one) as `N == B*q`, `q` a
/// fresh integer: the proofs of a code hold only where the dispatcher launches it, and it
/// launches none where these facts fail (an unguarded `x[g * B + t]` over a grid of
/// `(N + B - 1) / B` blocks stays inside `x[N]` only because `B` divides `N`).
pub fn with_divisibility_facts(function: &KernelFunction, system: &System) -> System {
    with_program_facts(function, system, false)
}

fn with_program_facts(function: &KernelFunction, system: &System, every_fact: bool) -> System {
    use crate::frontend::polyexpr::{to_constraint, to_poly};
    let derived = function.derived_polys();
    let mut sys = system.clone();
    let mut quotients = 0;
    for fact in &function.facts {
        for c in fact.condition.conjuncts() {
            if let Some(k) = to_constraint(c, &derived) {
                if every_fact {
                    sys.add(k);
                }
                continue;
            }
            let Some((a, b)) = divisibility(c) else { continue };
            let (Some(a), Some(b)) = (to_poly(a, &derived), to_poly(b, &derived)) else { continue };
            let q = format!("{}{quotients}", crate::access::FACT_QUOTIENT);
            quotients += 1;
            sys.set_domain(constraints::Var::new(&q), constraints::Domain::integer());
            sys.add(Constraint::eq(&a, &(&b * &Poly::var(&q))));
        }
    }
    sys
}

/// Whether `system` admits `point` (its parameters fixed, the machine limits free): the exact
/// check of the parameter-only constraints first, then Z3 (`unknown` admits nothing).
pub fn admits(system: &System, backend: &Backend, point: &BTreeMap<String, i64>) -> bool {
    if !parameter_constraints_hold(system, point) {
        return false;
    }
    let mut pinned = system.clone();
    for (name, v) in point {
        pinned.add(Constraint::eq(&Poly::var(name), &Poly::int(*v)));
    }
    matches!(backend.check(&pinned), CheckResult::Sat(_))
}

/// Whether the constraints of `system` over the parameters alone hold at `point`: a necessary
/// condition, checked exactly and without Z3, that rejects most candidates of a narrow region.
fn parameter_constraints_hold(system: &System, point: &BTreeMap<String, i64>) -> bool {
    let values = constraints::exact_point(point);
    system.constraints().iter().all(|c| c.holds_at(&values).unwrap_or(true))
}
