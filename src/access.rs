//! The access model: each array access of a kernel body as (array, polynomial indices, read
//! or write, the path's guards), for Z3 questions about which elements statements touch.
//!
//! Contract (soundness first): every fact recorded is true of the program. Integer `/` and `%`
//! by a divisor `d` (a constant or a polynomial in the parameters) become auxiliary integers
//! `q`, `r` with `x = d*q + r`, `0 <= r < d` — C's truncating division — but only where the
//! context proves `x >= 0` and `d >= 1`;
//! auxiliaries are named by their dividend and divisor, so equal expressions share them.
//! Anything not modelled (a non-polynomial index, a division whose dividend may be negative)
//! makes the index `None`, or the guard simply absent: a missing guard only admits more
//! behaviours, so conclusions of the form "no two accesses can collide" stay sound.
//!
//! Integer `min`, `max` and `abs` are modelled only when a collector is asked to
//! ([`Collector::with_choices`], the verifier): each becomes an auxiliary integer `m` with
//! the facts true of it (`m >= a`, `m >= b` for a maximum), and an access whose subscripts name
//! one is recorded once per choice, with the choice substituted and its condition among the
//! guards (`a >= b` and `m == a`, or `b > a` and `m == b`): the cases are exhaustive and each
//! is exact, so the subscripts stay polynomials in the thread's variables.
//!
//! Elements of integer arrays that the kernel never writes are modelled only when a collector
//! is asked to ([`Collector::with_element_values`], the verifier): `s[k]` becomes an auxiliary
//! integer named by the array and its subscripts (so one thread's two reads of `s[k]` are one
//! value, and a guard `s[k] < 256` bounds the subscript `h[s[k]]`), within its type's range
//! (`char`: -128..=127). Nothing else is known of it: two reads of one element through
//! different subscript polynomials, or by two threads, are independent values — an
//! over-approximation, so a query that names one can prove a property but never show a defect.

use crate::frontend::ast::*;
use constraints::solver::{Backend, Implication};
use constraints::{Constraint, Domain, Poly, System, Var};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct Access {
    pub array: String,
    /// One polynomial per subscript; `None` where the subscript is not modelled.
    pub indices: Vec<Option<Poly>>,
    pub write: bool,
    /// An atomic add (a reduction's update, recorded as one write): two of them never race.
    pub atomic: bool,
    /// Conditions that hold whenever the access executes.
    pub guards: Vec<Constraint>,
    /// Whether `guards` are all the conditions under which it executes: `false` when an
    /// enclosing condition was not modelled whole (`p < N || q < N`), so that its guards are
    /// weaker and a point they admit may not reach the access.
    pub exact_guards: bool,
    /// The span of the subscripted expression (the caching strategy labels each one apart).
    pub span: crate::frontend::source::Span,
    /// How many barriers the thread has passed when it makes the access (a polynomial in the
    /// loop counters), when the barrier structure is modelled; see [`Collector::phase`].
    pub phase: Option<Poly>,
    /// The access as printed (`a[i][k]`), for messages.
    pub text: String,
    /// Why the first subscript without a polynomial has none ([`Collector::why_unmodelled`]).
    pub unmodelled: Option<String>,
}

/// A condition that every thread of a block must evaluate alike, because a barrier depends on
/// it: an `if` around a barrier, or the bounds of a loop that contains one.
#[derive(Clone, Debug)]
pub struct Uniformity {
    /// Conditions under which a thread evaluates it.
    pub guards: Vec<Constraint>,
    pub phase: Option<Poly>,
    /// The `if`'s condition as conjuncts, or the loop's `[lo, hi]`; `None` when not modelled.
    pub condition: Option<Vec<Constraint>>,
    pub bounds: Option<[Poly; 2]>,
    /// The source text, and whether it names anything that can differ between threads
    /// (a thread index, a local scalar, an array element).
    pub text: String,
    pub thread_dependent: bool,
}

/// An auxiliary integer's definition: `dividend / divisor` (`quotient`) or `dividend % divisor`.
#[derive(Clone, Debug, PartialEq)]
pub struct AuxDef {
    pub dividend: Poly,
    pub divisor: Poly,
    pub quotient: bool,
}

/// The model's integer for a CUDA index: `threadIdx.x` is `threadIdx_x`.
pub fn builtin_var(b: Builtin) -> String {
    b.c_name().replace('.', "$") // `$`: no user name can be it (crate::names)
}

/// The prefixes of the model's division auxiliaries (`q` quotient, `r` remainder), internal
/// names that no user name can be ([`crate::names`]).
pub const AUX_QUOTIENT: &str = "$aux_q";
pub const AUX_REMAINDER: &str = "$aux_r";
/// The prefixes of a division of a dividend of either sign, truncated toward 0 as C does.
pub const AUX_TRUNCATED_QUOTIENT: &str = "$aux_tq";
pub const AUX_TRUNCATED_REMAINDER: &str = "$aux_tr";
/// Prefix of the quotient `q` of a program's fact `A % d == 0`, stated `A == d*q` in a context.
pub const FACT_QUOTIENT: &str = "$fact_q";
/// The prefix of a `min`/`max`/`abs` auxiliary.
pub const AUX_CHOICE: &str = "$aux_c";
/// The prefix of an array element's value auxiliary.
pub const AUX_VALUE: &str = "$aux_v";

/// The hash an auxiliary is named by (FNV-style, over `text`): every collector names one
/// definition alike; a different definition with the same hash takes the next key.
fn name_hash(text: &str) -> u64 {
    text.bytes().fold(0u64, |h, b| h.wrapping_mul(1099511628211).wrapping_add(b as u64))
}

/// Whether a model variable is an array element's value ([`Collector::with_element_values`]).
pub fn is_element_value(name: &str) -> bool {
    name.starts_with(AUX_VALUE)
}

/// A `min`/`max` auxiliary's definition: the larger (`max`) or smaller of `a` and `b`; or,
/// with `when`, a `c ? a : b`: `a` where the first constraints (what `c` implies) hold, `b`
/// where the second (what `!c` implies) do.
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceDef {
    pub a: Poly,
    pub b: Poly,
    pub max: bool,
    pub when: Option<(Vec<Constraint>, Vec<Constraint>)>,
}

/// The most cases one access is split into by its `min`/`max` choices; beyond, the subscripts
/// are not modelled.
pub const MAX_CHOICE_CASES: usize = 16;

/// Whether a model variable is a division auxiliary.
pub fn is_aux(name: &str) -> bool {
    name.starts_with("$aux_")
}

/// The CUDA index a model variable stands for, if it is one.
pub fn builtin_of_var(name: &str) -> Option<Builtin> {
    (0..3u8)
        .flat_map(|d| [Builtin::ThreadIdx(d), Builtin::BlockIdx(d), Builtin::BlockDim(d), Builtin::GridDim(d)])
        .find(|b| builtin_var(*b) == name)
}

/// What an expression is known to be: its polynomial value, if modelled.
pub type Env = BTreeMap<String, Option<Poly>>;

/// Collects accesses and the auxiliary definitions their modelling needed.
pub struct Collector<'b> {
    pub backend: &'b Backend,
    /// Facts true everywhere (parameter facts, loop ranges) plus auxiliary definitions.
    pub context: System,
    pub accesses: Vec<Access>,
    /// The auxiliary integers introduced for `/` and `%`, by name.
    pub aux_defs: BTreeMap<String, AuxDef>,
    /// Auxiliaries tied to later ones by [`Collector::nonnegative_division`] (`idx / (W*H)`
    /// made before `idx / W` is `(idx / W) / H`): each one's equal, a fact of the context too,
    /// so that a reader that matches quotients by name (the race check's merge of a digit
    /// pair into its dividend) can see through the order the program divided in.
    pub links: BTreeMap<String, Poly>,
    /// Every division of a non-negative dividend made so far, as (dividend, divisor,
    /// quotient, remainder) polynomials, in the order made: the memo of
    /// [`Collector::nonnegative_division`], and what [`Collector::remainders_folded`] folds.
    divided: Vec<(Poly, Poly, Poly, Poly)>,
    /// The divisions truncated toward 0 (a dividend of either sign), by key: (dividend, divisor).
    truncated: BTreeMap<u64, (Poly, Poly)>,
    /// The barrier count so far: starts at 0, +1 per barrier; `None` from the point where the
    /// count is not a polynomial (branches with different counts, a barrier loop whose trip
    /// count is not modelled or whose step is not 1). Within a loop whose body passes `K`
    /// barriers, the count at the body's start is `P0 + K*(counter - lo)`.
    pub phase: Option<Poly>,
    pub uniformity: Vec<Uniformity>,
    /// The `min`/`max`/`abs` auxiliaries, by name, when the collector models them.
    pub choices: Option<BTreeMap<String, ChoiceDef>>,
    /// Floating scalars (a kernel's `float`/`double` parameters): never polynomials, so a
    /// condition on one (`alpha > 2 && alpha < 3`) is not read as one on an integer.
    pub floating: std::collections::BTreeSet<String>,
    /// Integer arrays the kernel never writes, with their element types, whose elements are
    /// modelled as values (see the module's contract); `None`: none is.
    pub element_values: Option<BTreeMap<String, ScalarType>>,
    /// The element value auxiliaries, by name: the array and the subscripts read.
    pub value_defs: BTreeMap<String, (String, Vec<Poly>)>,
    /// The integer scalars the walked code declares, by name, with their type (`None` where
    /// two declarations of one name differ in type): an assignment to one is modelled in that
    /// type ([`Self::assigned_value`]).
    declared_integers: BTreeMap<String, Option<ScalarType>>,
    /// Why a scalar the walked code declares has no polynomial from its declaration (a
    /// floating-point local; an integer defined from a value the model does not follow), by
    /// name, for [`Self::why_unmodelled`]'s messages.
    declared_unmodelled: BTreeMap<String, String>,
    /// How many parts of conditions [`Self::condition`] has left out so far.
    dropped_conditions: usize,
    /// How many enclosing conditions of the statement being collected were not modelled whole.
    inexact_guards: usize,
    /// Facts Z3 proved so far, each with the system it was proved under ([`Self::proves`]).
    proved: std::cell::RefCell<std::collections::HashMap<Constraint, Vec<System>>>,
}

/// `ctx` less each constraint that names an auxiliary (`is_aux`) that `fact` does not reach,
/// through constraints sharing auxiliaries, from its own.
fn without_unreached_auxiliaries(ctx: &System, fact: &Constraint) -> System {
    let auxiliaries = |c: &Constraint| c.vars().into_iter().filter(|v| is_aux(v.name())).collect::<Vec<Var>>();
    let named: Vec<Vec<Var>> = ctx.constraints().iter().map(auxiliaries).collect();
    let mut reached: std::collections::BTreeSet<Var> = auxiliaries(fact).into_iter().collect();
    loop {
        let before = reached.len();
        for vars in &named {
            if vars.iter().any(|v| reached.contains(v)) {
                reached.extend(vars.iter().cloned());
            }
        }
        if reached.len() == before {
            break;
        }
    }
    let dropped: std::collections::BTreeSet<usize> = named.iter().enumerate().filter(|(_, vars)| vars.iter().any(|v| !reached.contains(v))).map(|(i, _)| i).collect();
    ctx.without(&dropped)
}

impl<'b> Collector<'b> {
    pub fn new(backend: &'b Backend, context: System) -> Collector<'b> {
        Collector { backend, context, accesses: Vec::new(), aux_defs: BTreeMap::new(), links: BTreeMap::new(), divided: Vec::new(), truncated: BTreeMap::new(), phase: Some(Poly::zero()), uniformity: Vec::new(), choices: None, floating: Default::default(), element_values: None, value_defs: BTreeMap::new(), declared_integers: BTreeMap::new(), declared_unmodelled: BTreeMap::new(), dropped_conditions: 0, inexact_guards: 0, proved: Default::default() }
    }

    /// Whether `fact` holds under `ctx`: constant-true, or proved by Z3. A fact proved under a
    /// system stays proved under every system that holds its constraints with the same
    /// domains (hypotheses added prove no less), and the context only grows as the body is
    /// walked: each division of a body with a hundred `b[(i + k) % N]` asked Z3 again whether
    /// `N >= 1` and `i + k >= 0`, under a context its auxiliaries made longer each time
    /// (quadratic or worse; 15 s for such a kernel's `gen`). Such a query is answered here.
    fn proves(&self, ctx: &System, fact: &Constraint) -> bool {
        if fact.truth_if_constant() == Some(true) {
            return true;
        }
        if let Some(systems) = self.proved.borrow().get(fact) {
            let held: std::collections::HashSet<&Constraint> = ctx.constraints().iter().collect();
            let within = |s: &System| s.constraints().iter().all(|c| held.contains(c)) && s.domains().iter().all(|(v, d)| ctx.domain(v) == *d);
            if systems.iter().any(within) {
                return true;
            }
        }
        // First without the auxiliaries' definitions the fact does not reach: they define
        // other divisions' quotients (each exists whatever the rest is), so a fact about
        // `i + k` rarely needs them, and each made every query longer. Fewer hypotheses prove
        // no false fact; where they do not suffice, the whole context is asked.
        let sliced = without_unreached_auxiliaries(ctx, fact);
        let proved = (sliced.len() < ctx.len() && matches!(self.backend.implies(&sliced, fact), Implication::Proved)) || matches!(self.backend.implies(ctx, fact), Implication::Proved);
        if proved {
            self.proved.borrow_mut().entry(fact.clone()).or_default().push(ctx.clone());
        }
        proved
    }

    /// The collector, modelling the elements of `kernel`'s integer arrays that `body` never
    /// writes as values (see the module's contract).
    pub fn with_element_values(mut self, kernel: &crate::kernel::Kernel) -> Collector<'b> {
        let mut written = std::collections::BTreeSet::new();
        written_arrays(&kernel.body, &mut written);
        let arrays = kernel.params.iter().filter_map(|p| match &p.kind {
            crate::kernel::KernelParamKind::Array { elem, .. } if elem.is_integer() && !written.contains(&p.name) => Some((p.name.clone(), *elem)),
            _ => None,
        });
        self.element_values = Some(arrays.collect());
        self
    }

    /// `x` converted to the integer type `t` (a cast, or a declaration's initialiser): `x`
    /// itself where that conversion cannot change it. A conversion to `char`, and one of a
    /// value that names an array element (whose range is its type's, wider than `char` or
    /// `int` may hold: `(char)s[k]` of an `int` is `s[k]` wrapped), is `x` only where the
    /// context and `guards` prove it within `t`'s range, and `x` wrapped to `t`'s bits
    /// otherwise. Other conversions to `int` keep `x`: the front end's range facts keep it
    /// within `int` wherever a kernel runs.
    fn converted(&mut self, x: Poly, t: ScalarType, guards: &[Constraint]) -> Option<Poly> {
        // The front end's range facts keep a conversion to `int` of what is no data within
        // `int`; a conversion to `char` has none (a program narrows to 8 bits to wrap), so it
        // is the value itself only where that is proved to fit.
        if t == ScalarType::Long || (t != ScalarType::Char && !x.vars().iter().any(|v| is_element_value(v.name()))) {
            return Some(x);
        }
        let (lo, hi) = integer_range(t);
        let mut ctx = self.context.clone();
        guards.iter().for_each(|g| ctx.add(g.clone()));
        let fits = [Constraint::ge(&x, &lo), Constraint::le(&x, &hi)].iter().all(|fact| self.proves(&ctx, fact));
        if fits {
            return Some(x);
        }
        // Two's complement, as nvcc and the host compilers convert: `lo + (x - lo) mod 2^bits`.
        let (_, r, _) = self.floor_division(&x - &lo, &hi - &lo + Poly::one());
        Some(r + lo)
    }

    /// The quotient and remainder of `x` by `d` (`d >= 1`) as C computes them, truncated toward
    /// 0, for a dividend of either sign: `x == d*q + r`, `-d < r < d`, and `r*x >= 0` (the
    /// remainder has the dividend's sign; at `x == 0` both are 0), auxiliaries of the context
    /// named as [`Self::floor_division`] names its own. `(i - 3) / 2 + 1` is `0` at `i = 0`.
    fn truncated_division(&mut self, x: Poly, d: Poly) -> (Poly, Poly) {
        let mut key = name_hash(&format!("{x}|{d}"));
        while self.truncated.get(&key).is_some_and(|(dx, dd)| *dx != x || *dd != d) {
            key = key.wrapping_add(1);
        }
        let q = self.aux(&format!("{AUX_TRUNCATED_QUOTIENT}{key:x}"));
        let r = self.aux(&format!("{AUX_TRUNCATED_REMAINDER}{key:x}"));
        if !self.truncated.contains_key(&key) {
            self.context.add(Constraint::eq(&x, &(&d * &q + &r)));
            self.context.add(Constraint::lt(&r, &d));
            self.context.add(Constraint::lt(&(-d.clone()), &r));
            self.context.add(Constraint::ge(&(&r * &x), &Poly::zero()));
            self.truncated.insert(key, (x, d));
        }
        (q, r)
    }

    /// The quotient and remainder of `x` by `d` (`d >= 1`) rounded down, as auxiliaries of
    /// the context: `x == d*q + r`, `0 <= r < d`. Named by a hash of the division, so that
    /// every collector names it alike; a different division with the same hash takes the
    /// next key. The flag: whether this division is new to the context.
    fn floor_division(&mut self, x: Poly, d: Poly) -> (Poly, Poly, bool) {
        let mut key = name_hash(&format!("{x}|{d}"));
        while self.aux_defs.get(&format!("{AUX_QUOTIENT}{key:x}")).is_some_and(|def| def.dividend != x || def.divisor != d) {
            key = key.wrapping_add(1);
        }
        let (qn, rn) = (format!("{AUX_QUOTIENT}{key:x}"), format!("{AUX_REMAINDER}{key:x}"));
        let q = self.aux(&qn);
        let r = self.aux(&rn);
        let new = !self.aux_defs.contains_key(&qn);
        if new {
            self.context.add(Constraint::eq(&x, &(&d * &q + &r)));
            self.context.add(Constraint::ge(&r, &Poly::zero()));
            self.context.add(Constraint::lt(&r, &d));
            self.aux_defs.insert(qn, AuxDef { dividend: x.clone(), divisor: d.clone(), quotient: true });
            self.aux_defs.insert(rn, AuxDef { dividend: x, divisor: d, quotient: false });
        }
        (q, r, new)
    }

    /// The auxiliary for the value of `array[indices]`, within `elem`'s range.
    fn element_value(&mut self, array: &str, elem: ScalarType, indices: Vec<Poly>) -> Poly {
        let text = format!("{array}|{}", indices.iter().map(ToString::to_string).collect::<Vec<_>>().join("|"));
        let mut key = name_hash(&text);
        while self.value_defs.get(&format!("{AUX_VALUE}{key:x}")).is_some_and(|(a, i)| a != array || *i != indices) {
            key = key.wrapping_add(1);
        }
        let name = format!("{AUX_VALUE}{key:x}");
        let v = self.aux(&name);
        if !self.value_defs.contains_key(&name) {
            let (lo, hi) = integer_range(elem);
            self.context.add(Constraint::ge(&v, &lo));
            self.context.add(Constraint::le(&v, &hi));
            self.value_defs.insert(name, (array.to_string(), indices));
        }
        v
    }

    /// The collector, told which of `kernel`'s scalar parameters are floating.
    pub fn floating_scalars_of(mut self, kernel: &crate::kernel::Kernel) -> Collector<'b> {
        self.floating = kernel.params.iter().filter(|p| matches!(p.kind, crate::kernel::KernelParamKind::Scalar(t) if !t.is_integer())).map(|p| p.name.clone()).collect();
        self
    }

    /// A collector that models integer `min`, `max` and `abs` (see the module's contract).
    /// Only for clients that read accesses case by case; the strategies take subscripts as
    /// single polynomials and leave these unmodelled.
    pub fn with_choices(backend: &'b Backend, context: System) -> Collector<'b> {
        Collector { choices: Some(BTreeMap::new()), ..Collector::new(backend, context) }
    }

    /// The auxiliary for the larger (`max`) or smaller of `a` and `b`, with its facts.
    fn choice(&mut self, a: Poly, b: Poly, max: bool) -> Option<Poly> {
        self.chosen(ChoiceDef { a, b, max, when: None })
    }

    fn chosen(&mut self, def: ChoiceDef) -> Option<Poly> {
        let choices = self.choices.as_mut()?;
        let mut key = name_hash(&format!("{}|{}|{}|{:?}", def.max, def.a, def.b, def.when));
        while choices.get(&format!("{AUX_CHOICE}{key:x}")).is_some_and(|d| *d != def) {
            key = key.wrapping_add(1);
        }
        let name = format!("{AUX_CHOICE}{key:x}");
        if !choices.contains_key(&name) {
            choices.insert(name.clone(), def.clone());
            let m = self.aux(&name);
            if def.when.is_none() {
                for side in [&def.a, &def.b] {
                    self.context.add(if def.max { Constraint::ge(&m, side) } else { Constraint::le(&m, side) });
                }
            }
        }
        Some(Poly::var(&name))
    }

    /// Whether `p` names a choice (`c ? a : b`, `min`, `max`, `abs`): its auxiliary is tied to
    /// its value only where an access's subscript or guard names it and is split into its cases
    /// ([`Self::record`]); a launch fact naming it (`h == m` for `int h = N > 0 ? N : 0`) leaves
    /// it a free value, or one bounded on one side, wherever else `h` is read.
    pub fn names_choice(&self, p: &Poly) -> bool {
        let Some(choices) = &self.choices else { return false };
        p.vars().iter().any(|v| choices.contains_key(v.name()))
    }

    /// Whether `p` names a choice made by a condition (`c ? a : b`): its value is tied to `c`
    /// only where an access's subscript is split into its cases ([`Self::record`]); anywhere
    /// else (a guard, a loop bound) it is either value, and what reads it is not exact.
    fn names_conditional_choice(&self, p: &Poly) -> bool {
        let Some(choices) = &self.choices else { return false };
        p.vars().iter().any(|v| choices.get(v.name()).is_some_and(|d| d.when.is_some()))
    }

    /// Record an access: once, or once per case of the `min`/`max` choices its subscripts or
    /// its guards name (a loop bound `k <= max(t, T - 1 - t)`: the context bounds a `max` only
    /// from below, so a guard left naming it bounds nothing). More than [`MAX_CHOICE_CASES`]:
    /// the subscripts naming them are not modelled, and guards naming them are not exact.
    fn record(&mut self, access: Access) {
        let Some(choices) = &self.choices else {
            self.accesses.push(access);
            return;
        };
        let named = |p: &Poly, decided: &std::collections::BTreeSet<String>| p.vars().into_iter().find(|v| choices.contains_key(v.name()) && !decided.contains(v.name()));
        let mut done = Vec::new();
        let mut todo = vec![(access, std::collections::BTreeSet::new())];
        while let Some((a, decided)) = todo.pop() {
            let in_guards = || a.guards.iter().find_map(|g| named(g.poly(), &decided));
            let Some(v) = a.indices.iter().flatten().find_map(|p| named(p, &decided)).or_else(in_guards) else {
                done.push(a);
                continue;
            };
            if done.len() + todo.len() + 2 > MAX_CHOICE_CASES {
                let mut a = a;
                a.indices.iter_mut().filter(|p| p.as_ref().is_some_and(|p| named(p, &decided).is_some())).for_each(|p| *p = None);
                if a.guards.iter().any(|g| named(g.poly(), &decided).is_some()) {
                    a.exact_guards = false;
                }
                done.push(a);
                continue;
            }
            let def = &choices[v.name()];
            let m = Poly::var(v.name());
            let mut decided = decided;
            decided.insert(v.name().to_string());
            if let Some((then, otherwise)) = &def.when {
                for (chosen, holding) in [(&def.a, then), (&def.b, otherwise)] {
                    let mut case = a.clone();
                    case.indices = a.indices.iter().map(|p| p.as_ref().map(|p| p.substitute(&v, chosen))).collect();
                    case.guards.extend(holding.iter().cloned());
                    case.guards.push(Constraint::eq(&m, chosen));
                    todo.push((case, decided.clone()));
                }
                continue;
            }
            for (chosen, other, strict) in [(&def.a, &def.b, false), (&def.b, &def.a, true)] {
                let mut case = a.clone();
                case.indices = a.indices.iter().map(|p| p.as_ref().map(|p| p.substitute(&v, chosen))).collect();
                // `a` is taken when it wins or ties; `b` only when it wins strictly.
                let wins = match (def.max, strict) {
                    (true, false) => Constraint::ge(chosen, other),
                    (true, true) => Constraint::gt(chosen, other),
                    (false, false) => Constraint::le(chosen, other),
                    (false, true) => Constraint::lt(chosen, other),
                };
                case.guards.push(wins);
                case.guards.push(Constraint::eq(&m, chosen));
                todo.push((case, decided.clone()));
            }
        }
        // In source order of the cases (the first choice first).
        done.reverse();
        self.accesses.extend(done);
    }

    /// Whether the context's divisibility facts make the constant `k` divide `x` exactly: a
    /// fact `p % m == 0` with `k | m` and `x` a multiple of `p` by a polynomial with integer
    /// coefficients.
    fn divides_exactly(&self, x: &Poly, k: &constraints::Rational) -> bool {
        let Some(k) = k.is_integer().then(|| k.to_integer()) else { return false };
        self.context.constraints().iter().any(|c| match c.rel() {
            constraints::Rel::Dvd(m) => {
                (num_bigint::BigInt::from(m) % &k) == num_bigint::BigInt::from(0)
                    && x.divide_exact(c.poly()).is_some_and(|h| h.terms().all(|(_, q)| q.is_integer()))
            }
            _ => false,
        })
    }

    /// `x / d` and `x % d` where a fact `A == d*q` of the context (a program's `N % B == 0`)
    /// leaves `x - A` provably within `[0, d - 1]`: the quotient is `q` and the remainder
    /// `x - A` (`(N + B - 1) / B` is `q` itself), exact polynomials where an auxiliary
    /// quotient would leave Z3 to find `Q <= q` from `B*Q <= B*q + B - 1`, which it does not.
    fn divided_by_fact(&self, x: &Poly, d: &Poly, ctx: &System) -> Option<(Poly, Poly)> {
        for c in self.context.constraints() {
            if !matches!(c.rel(), constraints::Rel::Eq) {
                continue;
            }
            let Some(q) = c.poly().vars().into_iter().find(|v| v.name().starts_with(FACT_QUOTIENT)) else { continue };
            // `c` is `A - d*q == 0` (or its negation): split off the terms of `q`.
            let (mut with_q, mut rest) = (Poly::zero(), Poly::zero());
            for (m, k) in c.poly().terms() {
                match m.divide(&constraints::Monomial::var(q.clone())) {
                    Some(m) if m.exponent(&q) == 0 => with_q = with_q + Poly::term(k.clone(), m),
                    Some(_) => return None,
                    None => rest = rest + Poly::term(k.clone(), m.clone()),
                }
            }
            let (a, divisor) = if with_q == -d.clone() { (rest, d.clone()) } else if with_q == *d { (-rest, d.clone()) } else { continue };
            let r = x - &a;
            let within = [Constraint::ge(&r, &Poly::zero()), Constraint::le(&r, &(&divisor - &Poly::one()))]
                .iter()
                .all(|fact| self.proves(ctx, fact));
            if within {
                return Some((Poly::from_var(q), r));
            }
        }
        None
    }

    /// The quotient and remainder of `x >= 0` by `d >= 1` (both proved), through
    /// [`Self::chained_divisor`] where it applies, else a new floor division (`q >= 0` too).
    /// A divisor that extends one `x` was already divided by (`idx / (W*H)` after `idx / W`)
    /// is that quotient divided by the rest, so the digits of a layout change chain
    /// (`idx == W*(H*q + h) + w`); two unrelated quotients would leave Z3 to find
    /// `idx / (W*H) == (idx / W) / H`, which it does not.
    fn nonnegative_division(&mut self, x: Poly, d: Poly, ctx: &System) -> (Poly, Poly) {
        if let Some((_, _, q, r)) = self.divided.iter().find(|(dx, dd, ..)| *dx == x && *dd == d) {
            return (q.clone(), r.clone());
        }
        let (q, r) = self.nonnegative_division_made(x.clone(), d.clone(), ctx);
        self.divided.push((x, d, q.clone(), r.clone()));
        (q, r)
    }

    /// [`Self::nonnegative_division`] made anew.
    fn nonnegative_division_made(&mut self, x: Poly, d: Poly, ctx: &System) -> (Poly, Poly) {
        // A remainder `X % D` divided by a factor `d` of `D`: `(X % D) / d == (X / d) % (D/d)`
        // and `(X % D) % d == X % d` (`i % (H*W) / W` is `i / W % H`), the digits of `X`.
        if let Some((dividend, wide)) = x.as_var().and_then(|v| self.aux_defs.get(v.name())).filter(|def| !def.quotient).map(|def| (def.dividend.clone(), def.divisor.clone())) {
            if let Some(rest) = wide.divide_exact(&d).filter(|rest| *rest != Poly::one() && rest.terms().all(|(_, k)| k.is_integer())) {
                if self.proves(ctx, &Constraint::ge(&rest, &Poly::one())) && self.proves(ctx, &Constraint::ge(&dividend, &Poly::zero())) {
                    let (q1, r1) = self.nonnegative_division(dividend, d, ctx);
                    let (_, digit) = self.nonnegative_division(q1, rest, ctx);
                    return (digit, r1);
                }
            }
        }
        if let Some((inner, rest)) = self.chained_divisor(&x, &d, ctx) {
            let (q1, r1) = self.nonnegative_division(x, inner.clone(), ctx);
            let (q, r) = self.nonnegative_division(q1, rest, ctx);
            return (q, r * inner + r1);
        }
        let (q, r, new) = self.floor_division(x.clone(), d.clone());
        if new {
            self.context.add(Constraint::ge(&q, &Poly::zero()));
        }
        if new && d.as_constant().is_none() {
            // A divisor `D` of `x` made before that `d` divides (`idx / (W*H*C)` written
            // before `idx / W`): its quotient and remainder are tied to this one's, so the
            // chain holds whichever order the program divides in.
            let wider: Vec<(String, Poly)> = self
                .aux_defs
                .iter()
                .filter(|(_, def)| def.quotient && def.dividend == x && def.divisor != d)
                .filter_map(|(name, def)| Some((name.clone(), def.divisor.divide_exact(&d)?)))
                .filter(|(_, rest)| rest.terms().all(|(_, k)| k.is_integer()))
                .collect();
            for (q_wide, rest) in wider {
                if !self.proves(ctx, &Constraint::ge(&rest, &Poly::one())) {
                    continue;
                }
                let r_name = q_wide.replacen(AUX_QUOTIENT, AUX_REMAINDER, 1);
                let (q2, r2) = self.nonnegative_division(q.clone(), rest, ctx);
                let r2 = &r2 * &d + &r;
                self.context.add(Constraint::eq(&Poly::var(&q_wide), &q2));
                self.context.add(Constraint::eq(&Poly::var(&r_name), &r2));
                self.links.insert(q_wide, q2);
                self.links.insert(r_name, r2);
            }
        }
        (q, r)
    }

    /// `p` with each `X - d*q` it holds, for a floor quotient `q` of `X` by `d` of the model,
    /// written as that division's remainder `r` (equal wherever the definitions hold): digits
    /// a program peels by subtraction (`n = i / (C*H*W); r0 = i - n*(C*H*W)`) are then the
    /// remainders that `%` would give, whose bounds the model states.
    fn remainders_folded(&self, mut p: Poly) -> Poly {
        for (dividend, divisor, q, r) in &self.divided {
            let whole = dividend - &(divisor * q);
            let holds = |sign: &constraints::Rational| whole.terms().all(|(m, k)| p.terms().any(|(n, c)| n == m && *c == k * sign));
            let one = constraints::Rational::from_integer(1.into());
            if holds(&one) {
                p = &(&p - &whole) + r;
            } else if holds(&-one) {
                p = &(&p + &whole) - r;
            }
        }
        p
    }

    /// For `x / d` with `x >= 0`: the largest divisor `a` (a proper factor of `d`) that `x` was
    /// already floor-divided by, and `d / a`, proved `>= 1` under `ctx`. Then
    /// `x / d == (x / a) / (d / a)` and `x % d == ((x / a) % (d / a))*a + x % a`, since
    /// `floor(floor(x/a)/b) == floor(x/(a*b))` for integers `x >= 0`, `a, b >= 1`.
    fn chained_divisor(&self, x: &Poly, d: &Poly, ctx: &System) -> Option<(Poly, Poly)> {
        if d.as_constant().is_some() {
            return None;
        }
        let candidates = self
            .aux_defs
            .values()
            .filter(|def| def.quotient && def.dividend == *x && def.divisor != *d)
            .filter_map(|def| Some((def.divisor.clone(), d.divide_exact(&def.divisor)?)))
            .filter(|(_, rest)| rest.terms().all(|(_, k)| k.is_integer()));
        let mut best: Option<(Poly, Poly)> = None;
        for (inner, rest) in candidates {
            if best.as_ref().is_some_and(|(b, _)| b.total_degree() >= inner.total_degree()) {
                continue;
            }
            if self.proves(ctx, &Constraint::ge(&rest, &Poly::one())) {
                best = Some((inner, rest));
            }
        }
        best
    }

    /// `x / d` (`op` `Div`) or `x % d` (`Rem`) as C computes them on integers, as a
    /// polynomial over the context's auxiliaries; `None` where the model has none (a divisor
    /// not proved non-zero with one sign, a fractional one).
    fn division(&mut self, op: BinOp, x: Poly, d: Poly, guards: &[Constraint]) -> Option<Poly> {
        if d.as_constant().is_some_and(|c| !c.is_integer()) {
            return None;
        }
        // A division the context makes exact (a coarsened block's `B0 / 8` where
        // `B0 % 8 == 0` holds) is the rational polynomial itself, remainder 0: no
        // auxiliary for Z3 to relate to the divisibility.
        if let Some(k) = d.as_constant().filter(|k| *k > constraints::Rational::from_integer(0.into())) {
            if self.divides_exactly(&x, &k) {
                return Some(if op == BinOp::Div { &x * &Poly::constant(k.recip()) } else { Poly::zero() });
            }
        }
        // Only where x >= 0 and d >= 1 are proved does C's truncation agree with the
        // floor model. A divisor may be a polynomial (a parameter such as `s`).
        let mut ctx = self.context.clone();
        guards.iter().for_each(|g| ctx.add(g.clone()));
        if let Some((q, r)) = self.divided_by_fact(&x, &d, &ctx) {
            return Some(if op == BinOp::Div { q } else { r });
        }
        let proved = |fact: Constraint| self.proves(&ctx, &fact);
        if !proved(Constraint::ge(&d, &Poly::one())) {
            // A negative divisor (`i / -2`): C truncates toward 0, so `x / d == -(x / -d)`
            // and `x % d == x % -d`.
            if !proved(Constraint::le(&d, &-Poly::one())) {
                return None;
            }
            let v = self.division(op, x, -d, guards)?;
            return Some(if op == BinOp::Div { -v } else { v });
        }
        if !proved(Constraint::ge(&x, &Poly::zero())) {
            // A dividend that may be negative: C's truncation toward 0.
            let (q, r) = self.truncated_division(x, d);
            return Some(if op == BinOp::Div { q } else { r });
        }
        // With `x >= 0`, so is the quotient; a divisor that extends one `x` was already
        // divided by chains through that quotient (`Self::nonnegative_division`). Its
        // rewrites are proved under the context alone, not this access's guards: they state
        // facts (a chain's `0 <= r < rest`, a link's equality) every query that names their
        // auxiliaries reads, whatever guards it holds.
        let context = self.context.clone();
        let (q, r) = self.nonnegative_division(x, d, &context);
        Some(if op == BinOp::Div { q } else { r })
    }

    /// Integer auxiliary variable, declared in the context.
    fn aux(&mut self, name: &str) -> Poly {
        self.context.set_domain(Var::new(name), Domain::integer());
        Poly::var(name)
    }

    /// The value of an integer expression under `env` and `guards`, as a polynomial.
    pub fn poly(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) -> Option<Poly> {
        match &e.kind {
            ExprKind::Int(v) => Some(Poly::int(*v)),
            ExprKind::Var(n) => match env.get(n) {
                Some(p) => p.clone(),
                None if self.floating.contains(n) => None,
                None => Some(Poly::var(n)),
            },
            ExprKind::Unary(UnOp::Neg, a) => Some(-self.poly(a, env, guards)?),
            ExprKind::Cast(t, a) if t.is_integer() => {
                let x = self.poly(a, env, guards)?;
                self.converted(x, *t, guards)
            }
            // A CUDA index: a non-negative integer, the same for everything one thread does.
            ExprKind::Builtin(b) => {
                let v = self.aux(&builtin_var(*b));
                self.context.add(Constraint::ge(&v, &Poly::zero()));
                Some(v)
            }
            ExprKind::Binary(op @ (BinOp::Div | BinOp::Rem), a, b) => {
                let x = self.poly(a, env, guards)?;
                let d = self.poly(b, env, guards)?;
                self.division(*op, x, d, guards)
            }
            ExprKind::Binary(op, a, b) => {
                let (x, y) = (self.poly(a, env, guards)?, self.poly(b, env, guards)?);
                match op {
                    BinOp::Add => Some(self.remainders_folded(x + y)),
                    BinOp::Sub => Some(self.remainders_folded(x - y)),
                    BinOp::Mul => Some(x * y),
                    _ => None,
                }
            }
            ExprKind::Index { array, indices } => {
                let elem = *self.element_values.as_ref()?.get(&array.name)?;
                let indices = indices.iter().map(|i| self.poly(i, env, guards)).collect::<Option<Vec<Poly>>>()?;
                Some(self.element_value(&array.name, elem, indices))
            }
            // Integer operands only: a float expression has no polynomial, so `None` already.
            // `c ? a : b`: a choice of `a` where `c` holds and of `b` where it does not, each
            // case of an access guarded by what the condition implies there (a clamp
            // `v < 0 ? 0 : (v > 255 ? 255 : v)` is in `[0, 255]`).
            ExprKind::Cond(c, a, b) if self.choices.is_some() => {
                let then = self.condition(c, true, env, guards);
                let otherwise = self.condition(c, false, env, guards);
                let under = |extra: &[Constraint]| guards.iter().chain(extra).cloned().collect::<Vec<_>>();
                let x = self.poly(a, env, &under(&then))?;
                let y = self.poly(b, env, &under(&otherwise))?;
                self.chosen(ChoiceDef { a: x, b: y, max: false, when: Some((then, otherwise)) })
            }
            ExprKind::Call(f, args) if self.choices.is_some() => match (f.name.as_str(), args.as_slice()) {
                ("min" | "max", [a, b]) => {
                    let (x, y) = (self.poly(a, env, guards)?, self.poly(b, env, guards)?);
                    self.choice(x, y, f.name == "max")
                }
                ("abs", [a]) => {
                    let x = self.poly(a, env, guards)?;
                    let negated = -x.clone();
                    self.choice(x, negated, true)
                }
                _ => None,
            },
            _ => None,
        }
    }

    /// Why `e`, whose value has no polynomial ([`Self::poly`] is `None`), has none: the
    /// innermost part without one and its reason, for messages (`the divisor `s` is not proved
    /// to be at least 1 ...`). Only read after `poly` failed; its memoised auxiliaries make the
    /// repeated evaluation of the parts change nothing.
    pub fn why_unmodelled(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) -> String {
        let parts: Vec<&Expr> = match &e.kind {
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => vec![a],
            ExprKind::Binary(_, a, b) => vec![a, b],
            ExprKind::Index { indices, .. } => indices.iter().collect(),
            ExprKind::Call(_, args) => args.iter().collect(),
            _ => Vec::new(),
        };
        for part in parts {
            if self.poly(part, env, guards).is_none() {
                return self.why_unmodelled(part, env, guards);
            }
        }
        match &e.kind {
            ExprKind::Float { .. } => format!("`{e}` is a floating-point value"),
            ExprKind::Var(n) if self.floating.contains(n) => format!("`{n}` is a floating-point value"),
            // Declared without a polynomial, and never given one since (an assignment that
            // the model follows makes it known).
            ExprKind::Var(n) if matches!(env.get(n), Some(None)) && self.declared_unmodelled.contains_key(n) => self.declared_unmodelled[n].clone(),
            ExprKind::Var(n) => format!("`{n}` has no one value the model follows here (it is assigned under a condition or in a loop)"),
            ExprKind::Cast(t, _) if !t.is_integer() => format!("`{e}` converts to a floating-point type"),
            ExprKind::Binary(BinOp::Div | BinOp::Rem, _, b) => {
                format!("the divisor `{b}` is not proved non-zero, with one sign, by the program's facts (state it: `assume({b} >= 1)`)")
            }
            ExprKind::Binary(op, _, _) => format!("`{e}` uses `{}`, whose result the model has no polynomial for", op.c_symbol()),
            ExprKind::Index { array, .. } => format!("`{e}` is a value read from `{}`, which the model does not follow here", array.name),
            ExprKind::Cond(..) => format!("`{e}`: a choice by `?:` is not modelled here"),
            ExprKind::Call(f, _) => format!("`{e}`: the model has no polynomial for `{}`'s result", f.name),
            _ => format!("`{e}` is not modelled"),
        }
    }

    /// The constraints a condition implies when true (`positive`) or false; what cannot be
    /// modelled is left out.
    pub fn condition(&mut self, e: &Expr, positive: bool, env: &Env, guards: &[Constraint]) -> Vec<Constraint> {
        match &e.kind {
            ExprKind::Binary(BinOp::And, a, b) if positive => {
                let mut v = self.condition(a, true, env, guards);
                let mut g2 = guards.to_vec();
                g2.extend(v.iter().cloned());
                v.extend(self.condition(b, true, env, &g2));
                v
            }
            ExprKind::Binary(BinOp::Or, a, b) if !positive => {
                let mut v = self.condition(a, false, env, guards);
                v.extend(self.condition(b, false, env, guards));
                v
            }
            // `c == 0 || c == N - 1` (a stencil's edges) holds exactly when the product of the
            // differences is zero: one constraint, so the verifier's guards stay exact (where
            // it does not take the equalities case by case). Not for the strategies: the
            // product's degree made Z3 give up on their proofs, where leaving the guard out
            // (more behaviours) is all they need.
            ExprKind::Binary(BinOp::Or, ..) if positive && self.choices.is_some() => match self.equalities_disjoined(e, env, guards) {
                Some(c) => vec![c],
                None => self.dropped(),
            },
            ExprKind::Unary(UnOp::Not, a) => self.condition(a, !positive, env, guards),
            ExprKind::Binary(op, a, b) if op.is_comparison() => {
                let comparison = match (self.poly(a, env, guards), self.poly(b, env, guards)) {
                    (Some(x), Some(y)) if !self.names_conditional_choice(&x) && !self.names_conditional_choice(&y) => crate::frontend::polyexpr::comparison(*op, &x, &y),
                    _ => None,
                };
                match comparison {
                    Some(c) => vec![if positive { c } else { c.negate() }],
                    None => self.dropped(),
                }
            }
            ExprKind::Binary(BinOp::And | BinOp::Or, ..) => self.dropped(),
            _ => match self.poly(e, env, guards).filter(|x| !self.names_conditional_choice(x)) {
                // A scalar condition: true means "not zero".
                Some(x) => {
                    let c = Constraint::ne(&x, &Poly::zero());
                    vec![if positive { c } else { c.negate() }]
                }
                None => self.dropped(),
            },
        }
    }

    /// Runs `collect` under the guards `cond` adds when true: once per equality of a
    /// disjunction of equalities for a client that reads accesses case by case (see
    /// [`Self::equality_cases`]), else once under [`Self::guarded`]'s guards.
    fn when_true(&mut self, cond: &Expr, env: &Env, guards: &[Constraint], collect: &mut dyn FnMut(&mut Self, &[Constraint])) {
        // A conjunct that is such a disjunction splits the cases; the other conjuncts guard each.
        let split = if self.choices.is_some() {
            let conjuncts = cond.conjuncts();
            conjuncts.iter().enumerate().find_map(|(k, c)| self.equality_cases(c, env, guards).map(|cases| (k, cases))).map(|(k, cases)| {
                let rest: Vec<&Expr> = conjuncts.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, c)| *c).collect();
                (cases, rest)
            })
        } else {
            None
        };
        match split {
            Some((cases, rest)) => {
                for case in cases {
                    let mut g = guards.to_vec();
                    g.push(case);
                    let mut exact = true;
                    for c in &rest {
                        let (more, whole) = self.guarded(c, true, env, &g);
                        g = more;
                        exact &= whole;
                    }
                    self.under(exact, |me| collect(me, &g));
                }
            }
            None => {
                let (g, exact) = self.guarded(cond, true, env, guards);
                self.under(exact, |me| collect(me, &g));
            }
        }
    }

    /// The disjuncts of `a == b || c == d || ...` (two to four) as equalities, or `None`.
    fn equality_cases(&mut self, cond: &Expr, env: &Env, guards: &[Constraint]) -> Option<Vec<Constraint>> {
        if !matches!(cond.kind, ExprKind::Binary(BinOp::Or, ..)) {
            return None;
        }
        let sides = self.disjoined_equalities(cond, env, guards)?;
        (sides.len() <= 4).then(|| sides.iter().map(|(x, y)| Constraint::eq(x, y)).collect())
    }

    /// `a == b || c == d || ...` as one product equality (`polyexpr::one_of_zero`); `None`
    /// where a disjunct is not an equality of two polynomials.
    fn equalities_disjoined(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) -> Option<Constraint> {
        let sides = self.disjoined_equalities(e, env, guards)?;
        crate::frontend::polyexpr::one_of_zero(&sides.iter().map(|(x, y)| x - y).collect::<Vec<_>>())
    }

    /// The two sides of each equality `a == b` that `||` joins in `e`, in order; `None` where
    /// a disjunct is anything else or a side is not a polynomial.
    fn disjoined_equalities(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) -> Option<Vec<(Poly, Poly)>> {
        let mut sides = Vec::new();
        let mut pending = vec![e];
        while let Some(d) = pending.pop() {
            match &d.kind {
                ExprKind::Binary(BinOp::Or, l, r) => {
                    pending.push(r);
                    pending.push(l);
                }
                ExprKind::Binary(BinOp::Eq, a, b) => {
                    let (x, y) = (self.poly(a, env, guards)?, self.poly(b, env, guards)?);
                    if self.names_conditional_choice(&x) || self.names_conditional_choice(&y) {
                        return None;
                    }
                    sides.push((x, y));
                }
                _ => return None,
            }
        }
        Some(sides)
    }

    /// Every access collected from now on has inexact guards: the context it is checked in
    /// leaves something out (a grid extent, a host loop's bound or a derived scalar that has
    /// no polynomial), so a point it admits may not be a real launch.
    pub fn weaken_context(&mut self) {
        self.inexact_guards += 1;
    }

    /// A condition (or part of one) left out: no constraint, and the guards it would have
    /// added are not exact.
    fn dropped(&mut self) -> Vec<Constraint> {
        self.dropped_conditions += 1;
        Vec::new()
    }

    /// `guards` with what `cond` implies when true (`positive`) or false, and whether that was
    /// modelled whole.
    fn guarded(&mut self, cond: &Expr, positive: bool, env: &Env, guards: &[Constraint]) -> (Vec<Constraint>, bool) {
        let before = self.dropped_conditions;
        let mut g = guards.to_vec();
        g.extend(self.condition(cond, positive, env, guards));
        (g, self.dropped_conditions == before)
    }

    /// Runs `collect` under guards that are `exact` or not: accesses recorded meanwhile know.
    fn under<T>(&mut self, exact: bool, collect: impl FnOnce(&mut Self) -> T) -> T {
        self.inexact_guards += usize::from(!exact);
        let r = collect(self);
        self.inexact_guards -= usize::from(!exact);
        r
    }

    pub(crate) fn expr_accesses(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) {
        match &e.kind {
            ExprKind::Index { array, indices } => {
                for i in indices {
                    self.expr_accesses(i, env, guards);
                }
                let idx: Vec<Option<Poly>> = indices.iter().map(|i| self.poly(i, env, guards)).collect();
                let unmodelled = idx.iter().position(Option::is_none).map(|k| self.why_unmodelled(&indices[k], env, guards));
                self.record(Access { array: array.name.clone(), indices: idx, write: false, atomic: false, guards: guards.to_vec(), exact_guards: self.inexact_guards == 0, span: e.span, phase: self.phase.clone(), text: e.to_string(), unmodelled });
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => self.expr_accesses(a, env, guards),
            // `&&` and `||` evaluate their right operand only when the left one is true
            // (false): its accesses happen under that guard, as C and CUDA define them.
            ExprKind::Binary(BinOp::And, a, b) => {
                self.expr_accesses(a, env, guards);
                self.when_true(a, env, guards, &mut |me, g| me.expr_accesses(b, env, g));
            }
            ExprKind::Binary(BinOp::Or, a, b) => {
                self.expr_accesses(a, env, guards);
                let (g, exact) = self.guarded(a, false, env, guards);
                self.under(exact, |me| me.expr_accesses(b, env, &g));
            }
            ExprKind::Binary(_, a, b) => {
                self.expr_accesses(a, env, guards);
                self.expr_accesses(b, env, guards);
            }
            ExprKind::Cond(c, a, b) => {
                self.expr_accesses(c, env, guards);
                self.when_true(c, env, guards, &mut |me, g| me.expr_accesses(a, env, g));
                let (gf, exact) = self.guarded(c, false, env, guards);
                self.under(exact, |me| me.expr_accesses(b, env, &gf));
            }
            ExprKind::Call(_, args) => args.iter().for_each(|a| self.expr_accesses(a, env, guards)),
            _ => {}
        }
    }

    /// The value of integer scalar `n` after `n op= value` (`op` `=`, `+=`, `-=` or `*=`), in
    /// its declared type, as a declaration's initialiser is (`int i = v * B; i += u;` is
    /// `v*B + u`; the front end's range facts cover the assignment as they cover a
    /// declaration); `None` where the scalar is not a declared integer whose value is known,
    /// or the value is not a polynomial. (Before, every assigned scalar was unknown from then
    /// on, and `a[i]` after `i += u` was an access the verifier could not model.)
    fn assigned_value(&mut self, n: &str, op: AssignOp, value: &Expr, env: &Env, guards: &[Constraint]) -> Option<Poly> {
        let ty = (*self.declared_integers.get(n)?)?;
        let v = self.poly(value, env, guards)?;
        let now = || env.get(n).cloned().flatten();
        let computed = match op {
            AssignOp::Set => v,
            AssignOp::Add => now()? + v,
            AssignOp::Sub => now()? - v,
            AssignOp::Mul => now()? * v,
            AssignOp::Div | AssignOp::AtomicAdd => return None,
        };
        self.converted(computed, ty, guards)
    }

    /// The value at the start of an iteration of loop `l` (from `lo`) of a local integer the body
    /// steps by amounts the loop does not change, each `n += c` or `n -= c` outside any `if`
    /// or inner loop (`int p = 4 * i; for (...) { s += a[p]; p += 1; }`, a pointer bump, or
    /// the four copies of it an unrolled loop holds), `n` known before the loop: `n0 + C*t`,
    /// with `C` the sum of the steps and `t` the iteration's index (`k - lo`, or for a step `s`
    /// the quotient `(k - lo) / s`, whose remainder 0 `guards` then gets). `None` otherwise (the
    /// scalar is then unknown in the loop).
    fn induction_value(&mut self, n: &str, l: &ForLoop, lo: &Poly, assigned: &[String], env: &Env, guards: &mut Vec<Constraint>) -> Option<Poly> {
        let ty = (*self.declared_integers.get(n)?)?;
        if ty == ScalarType::Char || l.step < 1 {
            return None; // a `char` wraps: its value is not the sum
        }
        let before = env.get(n).cloned().flatten()?;
        // The body's unconditional steps of `n`: through blocks, not into `if`s or loops.
        fn steps<'s>(s: &'s Stmt, n: &str, out: &mut Vec<(AssignOp, &'s Expr)>) {
            match &s.kind {
                StmtKind::Block(items) => items.iter().for_each(|x| steps(x, n, out)),
                StmtKind::Assign { target: Expr { kind: ExprKind::Var(t), .. }, op, value } if t == n => out.push((*op, value)),
                _ => {}
            }
        }
        let mut found = Vec::new();
        steps(&l.body, n, &mut found);
        if found.is_empty() || found.len() != assigned.iter().filter(|x| *x == n).count() {
            return None;
        }
        let mut total = Poly::zero();
        for (op, value) in found {
            let mut names = Vec::new();
            value.names(&mut names);
            if crate::strategy::walk::has_index(value) || names.iter().any(|x| *x == l.var.name || assigned.contains(x)) {
                return None;
            }
            let step = self.poly(value, env, guards)?;
            total = match op {
                AssignOp::Add => total + step,
                AssignOp::Sub => total - step,
                _ => return None,
            };
        }
        let offset = Poly::var(&l.var.name) - lo;
        let iteration = if l.step == 1 {
            offset
        } else {
            let (q, r, _) = self.floor_division(offset, Poly::int(l.step));
            let on_step = Constraint::eq(&r, &Poly::zero());
            if !guards.contains(&on_step) {
                guards.push(on_step);
            }
            q
        };
        Some(before + total * iteration)
    }

    /// Walk statements, recording accesses. A local integer assigned after its definition
    /// takes the assigned value ([`Self::assigned_value`]) in straight-line code, and is
    /// unknown (`None`) after a branch or loop that assigns it and throughout such a loop.
    pub fn stmts(&mut self, stmts: &[Stmt], env: &mut Env, guards: &[Constraint]) {
        for s in stmts {
            self.stmt(s, env, guards);
        }
    }

    fn stmt(&mut self, s: &Stmt, env: &mut Env, guards: &[Constraint]) {
        match &s.kind {
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    self.expr_accesses(&d.init, env, guards);
                    let v = if ty.is_integer() { self.poly(&d.init, env, guards).and_then(|x| self.converted(x, *ty, guards)) } else { None };
                    if ty.is_integer() {
                        let known = self.declared_integers.entry(d.name.name.clone()).or_insert(Some(*ty));
                        if *known != Some(*ty) {
                            *known = None;
                        }
                    }
                    if !ty.is_integer() {
                        self.declared_unmodelled.insert(d.name.name.clone(), format!("`{}` is a floating-point value", d.name.name));
                    } else if v.is_none() {
                        let why = self.why_unmodelled(&d.init, env, guards);
                        self.declared_unmodelled.insert(d.name.name.clone(), format!("`{}` is defined from a value the model does not follow: {why}", d.name.name));
                    } else {
                        self.declared_unmodelled.remove(&d.name.name);
                    }
                    env.insert(d.name.name.clone(), v);
                }
            }
            StmtKind::Assign { target, value, op } => {
                self.expr_accesses(value, env, guards);
                match &target.kind {
                    ExprKind::Index { array, indices } => {
                        for i in indices {
                            self.expr_accesses(i, env, guards);
                        }
                        let idx: Vec<Option<Poly>> = indices.iter().map(|i| self.poly(i, env, guards)).collect();
                        let unmodelled = idx.iter().position(Option::is_none).map(|k| self.why_unmodelled(&indices[k], env, guards));
                        let atomic = *op == AssignOp::AtomicAdd;
                        if *op != AssignOp::Set && !atomic {
                            self.record(Access { array: array.name.clone(), indices: idx.clone(), write: false, atomic, guards: guards.to_vec(), exact_guards: self.inexact_guards == 0, span: target.span, phase: self.phase.clone(), text: target.to_string(), unmodelled: unmodelled.clone() });
                        }
                        self.record(Access { array: array.name.clone(), indices: idx, write: true, atomic, guards: guards.to_vec(), exact_guards: self.inexact_guards == 0, span: target.span, phase: self.phase.clone(), text: target.to_string(), unmodelled });
                    }
                    ExprKind::Var(n) => {
                        let v = self.assigned_value(n, *op, value, env, guards);
                        env.insert(n.clone(), v);
                    }
                    _ => {}
                }
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                self.expr_accesses(cond, env, guards);
                if has_barrier(s) {
                    let condition = self.exact_condition(cond, env, guards);
                    let thread_dependent = depends_on_thread(cond, env);
                    self.uniformity.push(Uniformity { guards: guards.to_vec(), phase: self.phase.clone(), condition, bounds: None, text: cond.to_string(), thread_dependent });
                }
                let before = self.phase.clone();
                let mut env_t = env.clone();
                // Each case of a disjunction of equalities (`when_true`) starts from the phase
                // before the branch; the phase after it is theirs where they agree.
                let mut after: Option<Option<Poly>> = None;
                self.when_true(cond, env, guards, &mut |me, g| {
                    me.phase = before.clone();
                    let mut env_case = env.clone();
                    me.stmt(then_branch, &mut env_case, g);
                    forget_assigned(&mut env_t, &env_case);
                    after = Some(match after.take() {
                        None => me.phase.clone(),
                        Some(p) if p == me.phase => p,
                        Some(_) => None,
                    });
                });
                self.phase = after.flatten();
                let after_then = std::mem::replace(&mut self.phase, before);
                let (gf, exact) = self.guarded(cond, false, env, guards);
                let mut env_f = env.clone();
                if let Some(e) = else_branch {
                    self.under(exact, |me| me.stmt(e, &mut env_f, &gf));
                }
                if self.phase != after_then {
                    self.phase = None;
                }
                forget_assigned(env, &env_t);
                forget_assigned(env, &env_f);
            }
            StmtKind::Block(items) => {
                // Straight-line: the enclosing scope's scalars leave the block with the values
                // it gave them (an unrolled loop's copies are blocks that step `p += 1`).
                let mut inner = env.clone();
                self.stmts(items, &mut inner, guards);
                for (name, value) in env.iter_mut() {
                    if let Some(after) = inner.get(name) {
                        *value = after.clone();
                    }
                }
            }
            StmtKind::For(l) => {
                // Inside the body the counter ranges over [lo, hi) (or [lo, hi]); scalars the
                // body assigns are unknown throughout (their values vary by iteration).
                let mut inner = env.clone();
                let assigned = assigned_scalars(&l.body);
                for n in &assigned {
                    inner.insert(n.clone(), None);
                }
                let counter = Poly::var(&l.var.name);
                inner.insert(l.var.name.clone(), Some(counter.clone()));
                let mut g = guards.to_vec();
                self.context.set_domain(Var::new(&l.var.name), Domain::integer());
                // A bound chosen by a condition (`c ? a : b`) is either value here, whatever
                // `c`: the body's guards are then not exact.
                let mut exact = true;
                // The bounds' reads (`k < cnt[p]`): the lower bound once, before the loop; the
                // upper one before every iteration and at the exit, with the counter at lo or
                // beyond and the body's scalars as they vary.
                self.expr_accesses(&l.lo, env, guards);
                let lo_poly = self.poly(&l.lo, env, guards);
                let mut from_lo = guards.to_vec();
                if let Some(lo) = &lo_poly {
                    from_lo.push(Constraint::ge(&counter, lo));

                }
                // In a loop that passes barriers that read recurs at every phase: none in particular.
                let passes_barriers = !barrier_count(&l.body).is_some_and(|k| k.is_zero());
                let phase = if passes_barriers { self.phase.take() } else { self.phase.clone() };
                self.expr_accesses(&l.hi, &inner, &from_lo);
                self.phase = phase;
                // A bound not modelled (`k < min(m[i], 64)` where the body writes `m[i]`) leaves
                // the body's guards without it: weaker, so not exact (a witness there may not be
                // reachable; it was reported as a definite out-of-bounds read of `w[k]`).
                match lo_poly {
                    Some(lo) if !self.names_conditional_choice(&lo) => {
                        g.push(Constraint::ge(&counter, &lo));
                        // A step `s` visits `lo`, `lo + s`, ...: without `s | k - lo` every
                        // integer between the bounds was a value of `k`, and `x[k + 1]` under
                        // `k < 2*N; k += 2` a definite out-of-bounds read (a helper's sweep).
                        match u32::try_from(l.step) {
                            Ok(1) => {}
                            Ok(step) if step > 1 => g.push(Constraint::divides(step, &(&counter - &lo))),
                            _ => exact = false,
                        }
                        let mut dedup = std::collections::BTreeSet::new();
                        for n in assigned.iter().filter(|n| dedup.insert(n.as_str())) {
                            if let Some(v) = self.induction_value(n, l, &lo, &assigned, env, &mut g) {
                                inner.insert(n.clone(), Some(v));
                            }
                        }
                    }
                    _ => exact = false,
                }
                // The bound is read before every iteration: a scalar the body assigns has no one
                // value there (`int m = t; for (k = 0; k <= m; k++) { ... m = t + T; }` runs
                // past `t`), so the bound is not modelled.
                let mut at_test = env.clone();
                for n in &assigned {
                    at_test.insert(n.clone(), None);
                }
                match self.poly(&l.hi, &at_test, guards) {
                    Some(hi) if !self.names_conditional_choice(&hi) => g.push(if l.inclusive { Constraint::le(&counter, &hi) } else { Constraint::lt(&counter, &hi) }),
                    _ => exact = false,
                }
                let per_iteration = barrier_count(&l.body);
                if per_iteration.as_ref().is_some_and(|k| k.is_zero()) {
                    self.under(exact, |me| me.stmt(&l.body, &mut inner, &g));
                } else {
                    self.under(exact, |me| me.barrier_loop(l, env, guards, &g, &mut inner, per_iteration));
                }
                for n in assigned {
                    if env.contains_key(&n) {
                        env.insert(n, None);
                    }
                }
            }
            StmtKind::Barrier => {
                self.phase = self.phase.take().map(|p| p + Poly::one());
            }
            _ => {}
        }
    }

    /// A serial loop whose body passes barriers: its bounds must be uniform, and the barrier
    /// count is `P0 + K*(counter - lo)` in the body and `P0 + K*trip` after it, when the step is
    /// 1, `K` is known and the trip count `hi - lo (+1)` is provably not negative.
    fn barrier_loop(&mut self, l: &ForLoop, env: &Env, guards: &[Constraint], body_guards: &[Constraint], inner: &mut Env, per_iteration: Option<Poly>) {
        let lo = self.poly(&l.lo, env, guards);
        let hi = self.poly(&l.hi, env, guards);
        let thread_dependent = depends_on_thread(&l.lo, env) || depends_on_thread(&l.hi, env);
        let bounds = lo.clone().zip(hi.clone()).map(|(a, b)| [a, b]);
        let text = format!("the bounds of loop `{}`", l.var.name);
        self.uniformity.push(Uniformity { guards: guards.to_vec(), phase: self.phase.clone(), condition: None, bounds, text, thread_dependent });
        let start = self.phase.clone();
        let counter = Poly::var(&l.var.name);
        let trip = match (&lo, &hi) {
            (Some(lo), Some(hi)) if l.step == 1 => {
                let trip = if l.inclusive { hi - lo + Poly::one() } else { hi - lo };
                let mut ctx = self.context.clone();
                guards.iter().for_each(|c| ctx.add(c.clone()));
                let known = Constraint::ge(&trip, &Poly::zero());
                let proved = self.proves(&ctx, &known);
                proved.then_some(trip)
            }
            _ => None,
        };
        let model = per_iteration.clone().zip(lo.clone()).filter(|_| l.step == 1);
        self.phase = match (&start, &model) {
            (Some(p0), Some((k, lo))) => Some(p0 + &(k * &(&counter - lo))),
            _ => None,
        };
        self.stmt(&l.body, inner, body_guards);
        self.phase = match (start, per_iteration, trip) {
            (Some(p0), Some(k), Some(trip)) if l.step == 1 => Some(p0 + k * trip),
            _ => None,
        };
    }

    /// A condition as the exact conjunction of polynomial constraints, or `None`.
    fn exact_condition(&mut self, e: &Expr, env: &Env, guards: &[Constraint]) -> Option<Vec<Constraint>> {
        let mut out = Vec::new();
        for c in e.conjuncts() {
            match &c.kind {
                ExprKind::Binary(op, a, b) if op.is_comparison() => {
                    let (x, y) = (self.poly(a, env, guards)?, self.poly(b, env, guards)?);
                    out.push(crate::frontend::polyexpr::comparison(*op, &x, &y)?);
                }
                _ => return None,
            }
        }
        Some(out)
    }
}

/// Whether an expression names something that may differ between the threads of a block: a
/// thread index, an array element, or a local scalar whose value is not a polynomial in the
/// parameters and block indices.
fn depends_on_thread(e: &Expr, env: &Env) -> bool {
    let mut found = false;
    crate::strategy::walk::walk_expr(e, &mut |x| match &x.kind {
        ExprKind::Builtin(Builtin::ThreadIdx(_)) | ExprKind::Index { .. } => found = true,
        ExprKind::Var(n) => match env.get(n) {
            None => {}
            Some(None) => found = true,
            Some(Some(p)) => found |= p.vars().iter().any(|v| !is_uniform_var(v.name(), env)),
        },
        _ => {}
    });
    found
}

/// A model variable that is the same for all threads of a block: a block index or a
/// parameter (not a thread index, loop counter or auxiliary).
fn is_uniform_var(name: &str, env: &Env) -> bool {
    match builtin_of_var(name) {
        Some(Builtin::ThreadIdx(_)) => false,
        Some(_) => true,
        None => !is_aux(name) && !env.contains_key(name),
    }
}

/// Whether a statement contains a barrier.
pub fn has_barrier(s: &Stmt) -> bool {
    barrier_count(s).is_none_or(|k| !k.is_zero())
}

/// Barriers one execution of `s` passes, when that is a polynomial: branches must agree, and
/// a loop around a barrier makes it unknown.
pub fn barrier_count(s: &Stmt) -> Option<Poly> {
    match &s.kind {
        StmtKind::Barrier => Some(Poly::one()),
        StmtKind::Block(items) => items.iter().try_fold(Poly::zero(), |acc, x| Some(acc + barrier_count(x)?)),
        StmtKind::If { then_branch, else_branch, .. } => {
            let t = barrier_count(then_branch)?;
            let e = match else_branch {
                Some(e) => barrier_count(e)?,
                None => Poly::zero(),
            };
            (t == e).then_some(t)
        }
        StmtKind::For(l) | StmtKind::MetaFor(l) => barrier_count(&l.body)?.is_zero().then(Poly::zero),
        _ => Some(Poly::zero()),
    }
}

fn forget_assigned(env: &mut Env, branch: &Env) {
    for (k, v) in branch {
        if env.get(k).is_some_and(|old| old != v) {
            env.insert(k.clone(), None);
        }
    }
}

/// Scalars a statement assigns (not declares).
pub fn assigned_scalars(s: &Stmt) -> Vec<String> {
    let mut out = Vec::new();
    crate::strategy::walk::walk_stmts(std::slice::from_ref(s), &mut |x| {
        if let StmtKind::Assign { target: Expr { kind: ExprKind::Var(n), .. }, .. } = &x.kind {
            out.push(n.clone());
        }
    });
    out
}

/// Can a write of `a` and an access `b` (to the same array) touch the same element, given
/// `context`? `Some(false)` only when Z3 proves they cannot; `None` when unknown.
pub fn may_collide(backend: &Backend, context: &System, a: &Access, b: &Access, extra: &[Constraint]) -> Option<bool> {
    if a.array != b.array || !(a.write || b.write) {
        return Some(false);
    }
    let mut sys = context.clone();
    for c in a.guards.iter().chain(&b.guards).chain(extra) {
        sys.add(c.clone());
    }
    for (x, y) in a.indices.iter().zip(&b.indices) {
        match (x, y) {
            (Some(x), Some(y)) => sys.add(Constraint::eq(x, y)),
            _ => {} // an unmodelled subscript may take any value
        }
    }
    for v in sys.vars() {
        if !sys.domains().contains_key(&v) {
            sys.set_domain(v, Domain::integer());
        }
    }
    match backend.check(&sys) {
        constraints::solver::CheckResult::Unsat => Some(false),
        constraints::solver::CheckResult::Sat(_) => Some(true),
        constraints::solver::CheckResult::Unknown(_) => None,
    }
}

/// The least and greatest value of an integer type (`char` is signed, as CUDA's).
fn integer_range(t: ScalarType) -> (Poly, Poly) {
    let bits = match t {
        ScalarType::Char => 7,
        ScalarType::Int => 31,
        _ => 63,
    };
    let half: num_bigint::BigInt = num_bigint::BigInt::from(1) << bits;
    (Poly::constant(constraints::Rational::from_integer(-half.clone())), Poly::constant(constraints::Rational::from_integer(half - 1)))
}

/// The arrays `stmts` assign to (any assignment, atomic or not).
fn written_arrays(stmts: &[Stmt], out: &mut std::collections::BTreeSet<String>) {
    crate::strategy::walk::walk_stmts(stmts, &mut |x| {
        if let StmtKind::Assign { target: Expr { kind: ExprKind::Index { array, .. }, .. }, .. } = &x.kind {
            out.insert(array.name.clone());
        }
    });
}

