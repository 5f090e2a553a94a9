//! `meta_for` bounds that read enclosing `meta_for` counters (a triangle, `meta_for (j = 0; j <
//! i; j++)`), as a loop of fixed extent and a guard.
//!
//! A launch has one grid and one block size, so a loop whose trip count varies with an
//! enclosing counter becomes a loop over the most trips any enclosing iteration takes, with its
//! own bounds as a guard of the body: the kernel covers the same iterations, and the threads
//! (or blocks) past the original bound do nothing.
//!
//! Contract: [`rebound`] returns new bounds only where what the form bounds (the extent `hi -
//! lo`, or each end) reads an enclosing `meta_for` counter and is affine in each such counter,
//! with a constant coefficient, once the counters further in are replaced by their extreme
//! values (the extreme of such a function over a counter's range is at one of its ends). Parameters, derived scalars
//! and any part of the bound without counters (`N / B`, `min(N, M)`) stay as they are, as
//! opaque terms. The new loop takes every value the original takes, at every point of the
//! original iteration space (the ranges of the enclosing counters are their original bounds),
//! and the guard is exactly the original bounds: the body runs on the same iterations. Where
//! the extent is not of that form the loop is left as written, and the schedule's own checks
//! refuse it with their located diagnostics.
//!
//! Two forms: [`Form::Offset`] keeps `lo` (a block loop may start at an enclosing counter's
//! value: `v*B <= j`) and bounds the extent, `lo <= j < lo + max(hi - lo)`, with the guard `j <
//! hi`; [`Form::Box`] bounds both ends by parameters, `min(lo) <= w < max(hi)`, with the guard
//! `w >= lo && w < hi` as far as each end reads a counter (a grid loop, whose bounds the host
//! computes before the launch; a band `v <= w < v + 2` is then a row of blocks of which two
//! work).

use super::ast::{BinOp, Expr, ExprKind, ForLoop, UnOp};
use super::source::Span;
use constraints::{Poly, Rational};
use num_traits::{Signed, Zero};
use std::collections::BTreeMap;

/// Which bounds to make: see the module's contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Offset,
    Box,
}

/// A loop's new bounds and the guard its body needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Rebound {
    pub lo: Expr,
    pub hi: Expr,
    pub guard: Expr,
}

/// The new bounds of `nest[k]` in `form`, where what the form bounds reads a counter of
/// `nest[..k]` and can be bounded (the module's contract); `None` otherwise. The enclosing loops
/// may be serial loops too (a block loop inside the tile loop `k`): an inclusive bound or a
/// step only makes the range taken larger than the values the counter takes, never smaller.
pub fn rebound(nest: &[&ForLoop], k: usize, form: Form) -> Option<Rebound> {
    let l = nest[k];
    let counters: Vec<&str> = nest[..k].iter().map(|o| o.var.name.as_str()).collect();
    if l.inclusive || l.step != 1 {
        return None;
    }
    let reads_counter = |e: &Expr| {
        let mut names = Vec::new();
        e.names(&mut names);
        names.iter().any(|n| counters.contains(&n.as_str()))
    };
    let mut atoms = Atoms::default();
    let lo = atoms.poly(&l.lo, &counters)?;
    let hi = atoms.poly(&l.hi, &counters)?;
    let extent = &hi - &lo;
    let needed = match form {
        Form::Offset => reads_any(&extent, &counters),
        // As written: a bound naming a counter with no weight in it (`v - v`) names it still.
        Form::Box => reads_counter(&l.lo) || reads_counter(&l.hi),
    };
    if !needed {
        return None;
    }
    // Each enclosing counter's range, as polynomials in the counters outside it (`None` where
    // a bound is not of that form: only an extreme that meets that counter fails), and the
    // expressions of its ends as written.
    let mut ranges = Vec::new();
    for o in &nest[..k] {
        let first = atoms.poly(&o.lo, &counters);
        let last = atoms.poly(&o.hi, &counters).map(|hi| if o.inclusive { hi } else { hi - Poly::one() });
        ranges.push(Range { name: o.var.name.as_str(), ends: first.zip(last), first: o.lo.clone(), last: last_value(o) });
    }
    let span = l.hi.span;
    let var = Expr::new(ExprKind::Var(l.var.name.clone()), l.var.span);
    let below_hi = binary(BinOp::Lt, var.clone(), l.hi.clone(), span);
    // The new bounds are the written expressions at the chosen ends, so that they compute as
    // the program does at those iterations (an expanded polynomial could overflow where the
    // written expression does not: `1073741825 * (M - 1) - 1073741823` is not
    // `1073741825 * M - 2147483648` in `int`).
    match form {
        Form::Offset => {
            let ends = extreme(&extent, true, &ranges)?;
            let hi = if reads_counter(&l.lo) {
                let most = binary(BinOp::Sub, at_ends(&l.hi, &ends, &ranges), at_ends(&l.lo, &ends, &ranges), span);
                binary(BinOp::Add, l.lo.clone(), most, span)
            } else {
                at_ends(&l.hi, &ends, &ranges)
            };
            Some(Rebound { lo: l.lo.clone(), hi, guard: below_hi })
        }
        Form::Box => {
            let least_lo = extreme(&lo, false, &ranges)?;
            let most_hi = extreme(&hi, true, &ranges)?;
            let at_lo = binary(BinOp::Ge, var, l.lo.clone(), l.lo.span);
            let guard = match (reads_counter(&l.lo), reads_counter(&l.hi)) {
                (true, true) => binary(BinOp::And, at_lo, below_hi, span),
                (true, false) => at_lo,
                _ => below_hi,
            };
            Some(Rebound { lo: at_ends(&l.lo, &least_lo, &ranges), hi: at_ends(&l.hi, &most_hi, &ranges), guard })
        }
    }
}

/// An enclosing counter: its name, its ends as polynomials (when they are), and as written.
struct Range<'a> {
    name: &'a str,
    ends: Option<(Poly, Poly)>,
    first: Expr,
    last: Expr,
}

/// The last value a loop's counter may take, as written: `hi - 1`, or `hi` for `<=` (`b` for a
/// bound written `b + 1`).
fn last_value(l: &ForLoop) -> Expr {
    if l.inclusive {
        return l.hi.clone();
    }
    match &l.hi.kind {
        ExprKind::Binary(BinOp::Add, a, b) if b.kind == ExprKind::Int(1) => (**a).clone(),
        _ => binary(BinOp::Sub, l.hi.clone(), Expr::new(ExprKind::Int(1), l.hi.span), l.hi.span),
    }
}

/// Whether the extreme of `p` over the enclosing counters needs a counter at all.
fn reads_any(p: &Poly, counters: &[&str]) -> bool {
    p.vars().iter().any(|v| counters.contains(&v.name()))
}

/// Which end of each enclosing counter's range (innermost first; `true` for the last value)
/// makes `p` greatest (`most`) or least: `p` must be affine in the counter with a constant
/// coefficient once the counters inside it are at their ends, and its extreme is then at one
/// end of the range, a polynomial in the counters outside it. The end is taken whatever the
/// outer counters' values: where the range is empty no iteration is there to cover.
fn extreme(p: &Poly, most: bool, ranges: &[Range]) -> Option<Vec<(String, bool)>> {
    let mut p = p.clone();
    let mut ends = Vec::new();
    for r in ranges.iter().rev() {
        let v = constraints::Var::new(r.name);
        if !p.vars().contains(&v) {
            continue;
        }
        let (first, last) = r.ends.as_ref()?;
        let mut coefficient = Poly::zero();
        for (m, c) in p.terms() {
            match m.exponent(&v) {
                0 => {}
                1 => coefficient = coefficient + Poly::term(c.clone(), m.without(&v)),
                _ => return None,
            }
        }
        let c: Rational = coefficient.as_constant()?;
        if c.is_zero() {
            continue;
        }
        let at_last = c.is_positive() == most;
        p = p.substitute(&v, if at_last { last } else { first });
        ends.push((r.name.to_string(), at_last));
    }
    Some(ends)
}

/// `e` with each counter replaced by its chosen end's expression, innermost first (an end's
/// expression may name outer counters, replaced in turn); a counter left (one `e` names with no
/// weight in the value, `v - v`) is replaced by its first value, which gives the same value.
fn at_ends(e: &Expr, ends: &[(String, bool)], ranges: &[Range]) -> Expr {
    let mut e = e.clone();
    for r in ranges.iter().rev() {
        let at_last = ends.iter().find(|(n, _)| n == r.name).is_some_and(|(_, last)| *last);
        e = substitute(&e, r.name, if at_last { &r.last } else { &r.first });
    }
    // A bound that is one name or one constant (`N - 1 + 1`, `3 - 2 * 0`) is written as that:
    // it cannot overflow, and a block of constant size is a literal to `sema`.
    let mut atoms = Atoms::default();
    if let Some(p) = atoms.poly(&e, &[]) {
        if let Some(v) = p.as_var() {
            return atoms.named.get(v.name()).cloned().unwrap_or_else(|| Expr::new(ExprKind::Var(v.name().to_string()), e.span));
        }
        if let Some(v) = p.as_constant().filter(|c| c.is_integer()).and_then(|c| i64::try_from(c.to_integer()).ok()) {
            return Expr::new(ExprKind::Int(v), e.span);
        }
    }
    e
}

/// `e` with every read of `name` replaced by `by`.
fn substitute(e: &Expr, name: &str, by: &Expr) -> Expr {
    let sub = |x: &Expr| Box::new(substitute(x, name, by));
    let kind = match &e.kind {
        ExprKind::Var(n) if n == name => return by.clone(),
        ExprKind::Index { array, indices } => ExprKind::Index { array: array.clone(), indices: indices.iter().map(|i| substitute(i, name, by)).collect() },
        ExprKind::Unary(op, a) => ExprKind::Unary(*op, sub(a)),
        ExprKind::Binary(op, a, b) => ExprKind::Binary(*op, sub(a), sub(b)),
        ExprKind::Cond(c, a, b) => ExprKind::Cond(sub(c), sub(a), sub(b)),
        ExprKind::Cast(t, a) => ExprKind::Cast(*t, sub(a)),
        ExprKind::Call(f, args) => ExprKind::Call(f.clone(), args.iter().map(|a| substitute(a, name, by)).collect()),
        k => k.clone(),
    };
    Expr::new(kind, e.span)
}

/// Parts of the bounds read as opaque terms: each distinct subexpression without counters that
/// is not a polynomial (`N / B`), by its printed form, named `$atom<k>` (no C identifier has a
/// `$`, so no user name collides).
#[derive(Default)]
struct Atoms {
    by_text: BTreeMap<String, String>,
    /// What each atom stands for.
    named: BTreeMap<String, Expr>,
}

impl Atoms {
    /// `e` as a polynomial over the counters, the other names and the atoms; `None` where a
    /// counter sits under a non-polynomial operation (`i / 2`, `min(i, N)`).
    fn poly(&mut self, e: &Expr, counters: &[&str]) -> Option<Poly> {
        let mut names = Vec::new();
        e.names(&mut names);
        if !names.iter().any(|n| counters.contains(&n.as_str())) {
            if let Some(p) = self.polynomial(e, counters) {
                return Some(p);
            }
            return Some(self.atom(e));
        }
        self.polynomial(e, counters)
    }

    fn polynomial(&mut self, e: &Expr, counters: &[&str]) -> Option<Poly> {
        Some(match &e.kind {
            ExprKind::Int(v) => Poly::int(*v),
            ExprKind::Var(name) => Poly::var(name),
            ExprKind::Unary(UnOp::Neg, a) => -self.poly(a, counters)?,
            ExprKind::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), a, b) => {
                let (a, b) = (self.poly(a, counters)?, self.poly(b, counters)?);
                match op {
                    BinOp::Add => a + b,
                    BinOp::Sub => a - b,
                    _ => {
                        // Bounds of real loops are affine or of low degree; refuse a product
                        // that would grow past what the rest of the tool takes.
                        if a.total_degree() + b.total_degree() > super::polyexpr::MAX_DEGREE || a.num_terms().saturating_mul(b.num_terms()) > super::polyexpr::MAX_TERMS {
                            return None;
                        }
                        a * b
                    }
                }
            }
            _ => return None,
        })
    }

    fn atom(&mut self, e: &Expr) -> Poly {
        let text = e.to_string();
        let n = self.by_text.len();
        let name = self.by_text.entry(text).or_insert_with(|| format!("$atom{n}")).clone();
        self.named.entry(name.clone()).or_insert_with(|| e.clone());
        Poly::var(&name)
    }
}

fn binary(op: BinOp, a: Expr, b: Expr, span: Span) -> Expr {
    Expr::new(ExprKind::Binary(op, Box::new(a), Box::new(b)), span)
}

#[cfg(test)]
mod tests {
    //! The rewrite's contract checked by enumeration: at small parameter values, the new nest's
    //! iterations whose guards all hold are exactly the written nest's iterations.
    use super::*;
    use crate::cexpr::{Code, Resolved};
    use crate::frontend::ast::{Stmt, StmtKind};
    use std::collections::BTreeSet;

    /// The `meta_for` nest of the first schedule of `source`.
    fn nest(source: &str) -> Vec<ForLoop> {
        let program = crate::frontend::parser::parse(crate::frontend::lexer::lex(source).unwrap()).unwrap();
        fn find(s: &Stmt, out: &mut Vec<ForLoop>) {
            match &s.kind {
                StmtKind::MetaSchedule { body, .. } => find(body, out),
                StmtKind::Block(items) => items.iter().for_each(|x| find(x, out)),
                StmtKind::MetaFor(l) | StmtKind::For(l) => {
                    out.push(l.clone());
                    find(&l.body, out);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        program.functions[0].body.iter().for_each(|s| find(s, &mut out));
        out
    }

    fn eval(e: &Expr, names: &[String], values: &[i64]) -> i64 {
        let code = Code::compile(e, &|v| names.iter().position(|n| n == v).map(Resolved::Slot).ok_or_else(|| format!("unknown `{v}`"))).unwrap();
        code.eval(values).unwrap()
    }

    const PARAMETERS: usize = 2;

    /// Every iteration of `loops` (each given as lo, hi and a guard) at `values` of `names`.
    fn iterations(loops: &[(Expr, Expr, Option<Expr>)], names: &mut Vec<String>, values: &mut Vec<i64>, out: &mut BTreeSet<Vec<i64>>, counters: &[String]) {
        // The parameters come first, then one value per counter assigned so far.
        let k = values.len() - PARAMETERS;
        let Some((lo, hi, _)) = loops.get(k) else {
            if loops.iter().all(|(_, _, g)| g.as_ref().is_none_or(|g| eval(g, names, values) != 0)) {
                out.insert(values[PARAMETERS..].to_vec());
            }
            return;
        };
        let (lo, hi) = (eval(lo, names, values), eval(hi, names, values));
        for x in lo..hi {
            names.push(counters[k].clone());
            values.push(x);
            iterations(loops, names, values, out, counters);
            names.pop();
            values.pop();
        }
    }

    /// The written nest and the rewritten one (grid loops `grid` in the box form where they
    /// start at a counter) cover the same iterations at every `N` in 0..9 and `B` in 1..5.
    fn same_iterations(source: &str, grid: usize) -> usize {
        let written = nest(source);
        let refs: Vec<&ForLoop> = written.iter().collect();
        let counters: Vec<String> = written.iter().map(|l| l.var.name.clone()).collect();
        let mut rewritten = Vec::new();
        let mut changed = 0;
        for k in 0..refs.len() {
            let mut names = Vec::new();
            refs[k].lo.names(&mut names);
            // As `sema` chooses: a grid loop starting at a counter, or a block loop starting at
            // a serial loop's counter, is bounded at both ends.
            let serial = |n: &String| written.iter().any(|l| &l.var.name == n && l.inclusive | (l.step != 1) | is_serial(source, n));
            let starts_unseen = if k < grid { names.iter().any(|n| counters[..k].contains(n)) } else { names.iter().any(serial) };
            let form = if starts_unseen { Form::Box } else { Form::Offset };
            let rebound = if is_serial(source, &counters[k]) { None } else { rebound(&refs, k, form) };
            match rebound {
                Some(b) => {
                    changed += 1;
                    rewritten.push((b.lo, b.hi, Some(b.guard)));
                }
                None => rewritten.push((refs[k].lo.clone(), refs[k].hi.clone(), None)),
            }
        }
        let original: Vec<_> = written.iter().map(|l| (l.lo.clone(), l.hi.clone(), None)).collect();
        // A serial loop's `<=` as its exclusive bound, in both nests.
        let exclusive = |(lo, hi, g): (Expr, Expr, Option<Expr>), l: &ForLoop| {
            let hi = if l.inclusive { Expr::new(ExprKind::Binary(BinOp::Add, Box::new(hi), Box::new(Expr::new(ExprKind::Int(1), Span::default()))), Span::default()) } else { hi };
            (lo, hi, g)
        };
        let original: Vec<_> = original.into_iter().zip(&written).map(|(x, l)| exclusive(x, l)).collect();
        let rewritten: Vec<_> = rewritten.into_iter().zip(&written).map(|(x, l)| exclusive(x, l)).collect();
        for n in 0..9 {
            for b in 1..5 {
                let params = vec!["N".to_string(), "B".to_string()];
                let (mut a, mut c) = (BTreeSet::new(), BTreeSet::new());
                iterations(&original, &mut params.clone(), &mut vec![n, b], &mut a, &counters);
                iterations(&rewritten, &mut params.clone(), &mut vec![n, b], &mut c, &counters);
                assert_eq!(a, c, "N = {n}, B = {b}: {source}");
            }
        }
        changed
    }

    /// Whether `name` is the counter of a serial `for` in `source` (the tests' names are distinct).
    fn is_serial(source: &str, name: &str) -> bool {
        source.contains(&format!(" for (int {name} "))
    }

    fn schedule(loops: &str) -> String {
        format!("void f(int N, int B, float a[N]) {{ meta_schedule {{ {loops} a[0] = 1.0f; }} }}")
    }

    #[test]
    fn triangles_and_bands_cover_the_written_iterations() {
        let cases = [
            // (loops, grid loops, loops rewritten)
            ("meta_for (int v = 0; v < N; v++) meta_for (int w = 0; w <= v; w++) meta_for (int u = 0; u < B; u++)", 2, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int w = v; w < N; w++) meta_for (int u = 0; u < B; u++)", 2, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int w = v + 1; w < N - 1; w++) meta_for (int u = 0; u < B; u++)", 2, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int w = v; w < v + 2; w++) meta_for (int u = 0; u < B; u++)", 2, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int w = N - v; w < N; w++) meta_for (int u = 0; u < B; u++)", 2, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int u = 0; u < B; u++) meta_for (int q = 0; q <= u; q++)", 1, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int u = 0; u < B; u++) meta_for (int q = u; q < B; q++)", 1, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int u = 0; u < B; u++) meta_for (int q = v * B; q < v * B + u; q++)", 1, 1),
            ("meta_for (int v = 0; v < N; v++) meta_for (int u = 0; u < B; u++) meta_for (int q = 0; q < u; q++) meta_for (int r = 0; r < q; r++)", 1, 2),
            ("meta_for (int v = 0; v < N; v++) meta_for (int u = 0; u < 2 * B - 3; u++) meta_for (int q = 0; q < 3 - 2 * u; q++)", 1, 1),
            ("meta_for (int v = 0; v < N / B; v++) meta_for (int w = v; w < N / B; w++) meta_for (int u = 0; u < B; u++)", 2, 1),
            // Large coefficients, and loops bounded by a serial loop's counter (inclusive, with
            // a step) between the grid and the block.
            ("meta_for (int v = 0; v < N; v++) meta_for (int w = 1025 * v - 1025; w < 1025 * v - 1023; w++) meta_for (int u = 0; u < B; u++)", 2, 1),
            ("meta_for (int v = 0; v < N; v++) for (int k = 0; k <= B; k++) meta_for (int u = k; u < B; u++)", 1, 1),
            ("meta_for (int v = 0; v < N; v++) for (int k = 1; k < N; k += 2) meta_for (int u = 0; u < k; u++) meta_for (int q = u; q < k; q++)", 1, 2),
        ];
        for (loops, grid, rewritten) in cases {
            assert_eq!(same_iterations(&schedule(loops), grid), rewritten, "{loops}");
        }
    }

    #[test]
    fn bounds_it_cannot_bound_are_left_as_written() {
        for loops in [
            // A counter under a division, a product of counters, a coefficient that is a parameter.
            "meta_for (int v = 0; v < N; v++) meta_for (int w = 0; w < v / 2; w++) meta_for (int u = 0; u < B; u++)",
            "meta_for (int v = 0; v < N; v++) meta_for (int w = 0; w < v * v; w++) meta_for (int u = 0; u < B; u++)",
            "meta_for (int v = 0; v < N; v++) meta_for (int u = 0; u < B; u++) meta_for (int q = 0; q < v * B; q++)",
            // An offset without a varying extent: a block loop keeps it as written.
            "meta_for (int v = 0; v < N; v++) meta_for (int u = v * B; u < v * B + B; u++)",
        ] {
            assert_eq!(same_iterations(&schedule(loops), 1), 0, "{loops}");
        }
    }

    #[test]
    fn opaque_terms_are_printed_back() {
        let written = nest(&schedule("meta_for (int v = 0; v < N / B; v++) meta_for (int w = v; w < min(N, B) / B; w++) meta_for (int u = 0; u < B; u++)"));
        let refs: Vec<&ForLoop> = written.iter().collect();
        let b = rebound(&refs, 1, Form::Box).unwrap();
        assert_eq!((b.lo.to_string(), b.hi.to_string(), b.guard.to_string()), ("0".to_string(), "min(N, B) / B".to_string(), "w >= v".to_string()));
        // The new bounds are the written ones at the chosen ends: no product is expanded, so
        // none overflows where the program's does not (`1073741825 * M` at `M = 2` would).
        let written = nest(&schedule("meta_for (int v = 0; v < M; v++) meta_for (int x = 1073741825 * v - 1073741825; x < 1073741825 * v - 1073741823; x++) meta_for (int u = 0; u < B; u++)"));
        let refs: Vec<&ForLoop> = written.iter().collect();
        let b = rebound(&refs, 1, Form::Box).unwrap();
        assert_eq!((b.lo.to_string(), b.hi.to_string()), ("-1073741825".to_string(), "1073741825 * (M - 1) - 1073741823".to_string()));
    }
}
