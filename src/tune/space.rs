//! Search spaces: parameters with value lists, restrictions as C expressions, and the
//! construction of the admissible configurations by constraint propagation.
//!
//! Contract: [`Space::build`] returns exactly the points of the Cartesian product at which every
//! restriction holds (with [`crate::cexpr`]'s rules: an evaluation error is "does not hold")
//! and the optional final filter accepts, without visiting the product. Parameters are ordered
//! so that restrictions become decidable early (the one completing most restrictions first,
//! then the one named by most, then the smaller domain; unrestricted parameters last); each
//! restriction is checked as soon as its last variable is bound, on every prefix. A restriction
//! `p <= 0` / `p < 0` whose polynomial is non-decreasing in the variable just bound (every term
//! with it has a positive coefficient, every variable's values are non-negative) is a *bound*:
//! values are visited in ascending order and the loop stops at the first that fails it (the
//! products-of-block-sizes limits of real spaces). Rows keep the file's parameter order; row
//! order is the search order (deterministic).

use crate::cexpr::{Code, Resolved};
use crate::frontend::ast::{BinOp, Expr, ExprKind};
use crate::frontend::polyexpr::to_constraint;
use constraints::{Rel, Var};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// The most values one parameter may take (a range or a list).
pub const MAX_VALUES: i64 = 1_000_000;
/// The most admissible configurations a space may have: each is kept in memory (and, for
/// `tune`, scored); a space with more is refused with a message, never an allocation failure.
pub const MAX_ADMISSIBLE: usize = 5_000_000;

/// One parameter's values: a list, or an inclusive range with an optional step.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Values {
    List(Vec<i64>),
    Range { range: [i64; 2], #[serde(default)] step: Option<i64> },
}

impl Values {
    pub fn expand(&self) -> Result<Vec<i64>, String> {
        match self {
            Values::List(v) if v.is_empty() => Err("an empty value list".into()),
            Values::List(v) if v.len() > MAX_VALUES as usize => Err(format!("a list of more than {MAX_VALUES} values")),
            Values::List(v) => Ok(v.clone()),
            Values::Range { range: [lo, hi], step } => {
                let step = step.unwrap_or(1);
                if step < 1 || lo > hi {
                    return Err(format!("range [{lo}, {hi}] with step {step} is empty or backwards"));
                }
                // In 128 bits: `hi - lo` of two 64-bit values may not fit 64.
                if (i128::from(*hi) - i128::from(*lo)) / i128::from(step) >= i128::from(MAX_VALUES) {
                    return Err(format!("range [{lo}, {hi}] with step {step} has more than {MAX_VALUES} values"));
                }
                Ok((*lo..=*hi).step_by(step as usize).collect())
            }
        }
    }
}

/// A space as written in YAML.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpaceSpec {
    /// Parameter names to values (a YAML mapping keeps the file's order).
    pub params: serde_yaml::Mapping,
    #[serde(default)]
    pub restrictions: Vec<String>,
    /// Optional reference figures (a benchmark file's): the product's size, the admissible count
    /// and another tuner's construction time.
    #[serde(default)]
    pub cartesian: Option<u64>,
    #[serde(default)]
    pub valid: Option<u64>,
    #[serde(default)]
    pub kernel_tuner_s: Option<f64>,
}

impl SpaceSpec {
    /// The parameters in file order, with their values expanded.
    pub fn parameters(&self) -> Result<Vec<(String, Vec<i64>)>, String> {
        self.params
            .iter()
            .map(|(k, v)| {
                let name = k.as_str().ok_or_else(|| format!("parameter name `{k:?}` is not a string"))?.to_string();
                let values: Values = serde_yaml::from_value(v.clone()).map_err(|_| format!("parameter `{name}`: expected a list of integers or {{range: [lo, hi]}}"))?;
                Ok((name.clone(), values.expand().map_err(|e| format!("parameter `{name}`: {e}"))?))
            })
            .collect()
    }
}

/// A space file: one space (`params`, `restrictions`), or several under `spaces:` (by name, in
/// file order).
pub fn parse_spaces(source: &str, text: &str) -> Result<Vec<(String, SpaceSpec)>, String> {
    constraints::input::check_yaml_nesting(text).map_err(|(line, e)| format!("{source}:{line}: {e}"))?;
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| format!("{source}: {e}"))?;
    let spec = |name: &str, v: serde_yaml::Value| serde_yaml::from_value::<SpaceSpec>(v).map_err(|e| format!("{source}: space `{name}`: {e}"));
    match value.get("spaces") {
        Some(serde_yaml::Value::Mapping(m)) => m.iter().map(|(k, v)| {
            let name = k.as_str().unwrap_or("?").to_string();
            Ok((name.clone(), spec(&name, v.clone())?))
        }).collect(),
        Some(_) => Err(format!("{source}: `spaces` must be a mapping of names to spaces")),
        None => Ok(vec![("space".to_string(), spec("space", value)?)]),
    }
}

/// One restriction, compiled.
#[derive(Clone, Debug)]
pub struct Restriction {
    pub text: String,
    code: Code,
    slots: Vec<usize>,
}

/// A search space ready to build.
#[derive(Clone, Debug)]
pub struct Space {
    pub names: Vec<String>,
    pub domains: Vec<Vec<i64>>,
    pub restrictions: Vec<Restriction>,
    /// Per restriction: its polynomial form `p REL 0`, when it is one (for bounds).
    polys: Vec<Option<constraints::Constraint>>,
}

/// The admissible configurations: `count` rows of `width` values, in parameter order.
#[derive(Clone, Debug, Default)]
pub struct Admissible {
    pub width: usize,
    pub values: Vec<i64>,
    /// Set when the search stopped early (the time budget, or [`MAX_ADMISSIBLE`]): `values`
    /// is then only part of the space, and callers report the reason instead.
    pub stopped: Option<String>,
}

impl Admissible {
    pub fn len(&self) -> usize {
        self.values.len().checked_div(self.width).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn row(&self, i: usize) -> &[i64] {
        &self.values[i * self.width..(i + 1) * self.width]
    }
}

/// Split a restriction on its top-level `&&`s: each conjunct can be checked on its own, earlier.
fn conjuncts(e: &Expr) -> Vec<Expr> {
    match &e.kind {
        ExprKind::Binary(BinOp::And, a, b) => {
            let mut v = conjuncts(a);
            v.extend(conjuncts(b));
            v
        }
        _ => vec![e.clone()],
    }
}

impl Space {
    /// A space from parameter domains and restriction texts (C expressions over the names).
    pub fn new(params: Vec<(String, Vec<i64>)>, restrictions: &[String]) -> Result<Space, String> {
        let (names, domains): (Vec<String>, Vec<Vec<i64>>) = params.into_iter().unzip();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err(format!("parameter `{n}` is given twice"));
            }
        }
        let mut exprs = Vec::new();
        for text in restrictions {
            let tokens = crate::frontend::lexer::lex(text).map_err(|d| format!("restriction `{text}`: {}", d.message))?;
            let e = crate::frontend::parser::parse_expression(tokens).map_err(|d| format!("restriction `{text}`: {}", d.message))?;
            exprs.extend(conjuncts(&e));
        }
        Space::from_exprs(names, domains, exprs, &BTreeMap::new())
    }

    /// A space whose restrictions are already parsed; `definitions` are names that stand for
    /// expressions over the parameters (a program's derived scalars).
    pub fn from_exprs(names: Vec<String>, domains: Vec<Vec<i64>>, exprs: Vec<Expr>, definitions: &BTreeMap<String, Expr>) -> Result<Space, String> {
        let resolve = |v: &str| match names.iter().position(|n| n == v) {
            Some(i) => Ok(Resolved::Slot(i)),
            None => definitions.get(v).map(|e| Resolved::Expr(e.clone())).ok_or_else(|| format!("`{v}` is not a parameter of the space")),
        };
        let mut restrictions = Vec::new();
        let mut polys = Vec::new();
        for e in exprs {
            let code = Code::compile(&e, &resolve).map_err(|m| format!("restriction `{e}`: {m}"))?;
            let mut slots = Vec::new();
            code.slots(&mut slots);
            slots.sort_unstable();
            slots.dedup();
            // A derived name stays a variable here, and a variable that is not a parameter is
            // never known non-negative, so such a restriction is never taken as a bound.
            polys.push(to_constraint(&e, &Default::default()));
            restrictions.push(Restriction { text: e.to_string(), code, slots });
        }
        Ok(Space { names, domains, restrictions, polys })
    }

    /// The size of the Cartesian product (saturating).
    pub fn cartesian(&self) -> u64 {
        self.domains.iter().fold(1u64, |a, d| a.saturating_mul(d.len() as u64))
    }

    /// The search order: parameters by how soon they make restrictions decidable.
    fn order(&self) -> Vec<usize> {
        let n = self.names.len();
        let mut placed = vec![false; n];
        let mut order = Vec::with_capacity(n);
        for _ in 0..n {
            let best = (0..n)
                .filter(|&p| !placed[p])
                .max_by_key(|&p| {
                    let completes = self.restrictions.iter().filter(|r| r.slots.contains(&p) && r.slots.iter().all(|&s| s == p || placed[s])).count();
                    let named = self.restrictions.iter().filter(|r| r.slots.contains(&p)).count();
                    (completes, named, std::cmp::Reverse(self.domains[p].len()), std::cmp::Reverse(p))
                })
                .expect("a parameter is left");
            placed[best] = true;
            order.push(best);
        }
        order
    }

    /// Build the admissible configurations. `filter`, if given, sees each complete row (in
    /// parameter order) that satisfies the restrictions and may refuse it. `progress` is told
    /// the fraction of the search done, now and then.
    pub fn build<'f, 'g>(&self, filter: Option<&'f mut (dyn FnMut(&[i64]) -> bool + 'f)>, progress: Option<&'g mut (dyn FnMut(f64) + 'g)>) -> Admissible {
        let order = self.order();
        let depth_of: Vec<usize> = {
            let mut d = vec![0; order.len()];
            for (i, &p) in order.iter().enumerate() {
                d[p] = i;
            }
            d
        };
        // The checks at each depth, bounds first.
        let nonnegative = |v: &Var| self.names.iter().position(|n| n == v.name()).is_some_and(|i| self.domains[i].iter().all(|&x| x >= 0));
        let mut checks: Vec<Vec<(usize, bool)>> = vec![Vec::new(); order.len()];
        for (i, r) in self.restrictions.iter().enumerate() {
            let Some(depth) = r.slots.iter().map(|&s| depth_of[s]).max() else {
                // A constant restriction: true keeps everything, false nothing.
                if !r.code.holds(&[]) {
                    return Admissible { width: self.names.len(), values: Vec::new(), stopped: None };
                }
                continue;
            };
            let var = Var::new(&self.names[order[depth]]);
            let bound = self.polys[i].as_ref().is_some_and(|c| {
                matches!(c.rel(), Rel::Le | Rel::Lt)
                    && c.vars().iter().all(nonnegative)
                    && c.poly().terms().all(|(m, k)| m.exponent(&var) == 0 || num_traits::Signed::is_positive(k))
            });
            checks[depth].push((i, bound));
        }
        for c in &mut checks {
            c.sort_by_key(|&(_, bound)| !bound);
        }
        // Domains in search order; ascending where a bound may stop the loop.
        let domains: Vec<Vec<i64>> = order
            .iter()
            .enumerate()
            .map(|(depth, &p)| {
                let mut d = self.domains[p].clone();
                if checks[depth].iter().any(|&(_, b)| b) {
                    d.sort_unstable();
                }
                d
            })
            .collect();
        let mut search = Search { space: self, order: &order, domains: &domains, checks: &checks, row: vec![0; self.names.len()], out: Vec::new(), filter, progress, visited: 0, stopped: None };
        search.descend(0, 0.0, 1.0);
        Admissible { width: self.names.len(), values: search.out, stopped: search.stopped }
    }
}

struct Search<'a, 'f, 'g> {
    space: &'a Space,
    order: &'a [usize],
    domains: &'a [Vec<i64>],
    checks: &'a [Vec<(usize, bool)>],
    row: Vec<i64>,
    out: Vec<i64>,
    filter: Option<&'f mut (dyn FnMut(&[i64]) -> bool + 'f)>,
    progress: Option<&'g mut (dyn FnMut(f64) + 'g)>,
    visited: u64,
    /// Why the search stopped early: the budget, or too many admissible points.
    stopped: Option<String>,
}

impl Search<'_, '_, '_> {
    fn descend(&mut self, depth: usize, done: f64, share: f64) {
        if self.stopped.is_some() {
            return;
        }
        if depth == self.order.len() {
            if let Some(f) = self.filter.as_mut() {
                if !f(&self.row) {
                    return;
                }
            }
            if self.out.len() >= MAX_ADMISSIBLE * self.row.len() {
                self.stopped = Some(format!("the space has more than {MAX_ADMISSIBLE} admissible configurations; narrow its values or add restrictions"));
                return;
            }
            self.out.extend_from_slice(&self.row);
            return;
        }
        let slot = self.order[depth];
        let count = self.domains[depth].len();
        'values: for (k, &v) in self.domains[depth].iter().enumerate() {
            self.row[slot] = v;
            for &(i, bound) in &self.checks[depth] {
                if !self.space.restrictions[i].code.holds(&self.row) {
                    if bound {
                        break 'values;
                    }
                    continue 'values;
                }
            }
            let part = share / count as f64;
            self.descend(depth + 1, done + part * k as f64, part);
        }
        self.visited += 1;
        if self.visited % 4096 == 0 {
            if let Some(p) = self.progress.as_mut() {
                p(done + share);
            }
            if constraints::budget::expired() {
                self.stopped.get_or_insert_with(|| format!("{} before the space was searched (--time-limit)", constraints::budget::REASON));
            }
        }
    }
}

/// The spaces of a file by name, expanded; `select` keeps only the named one.
pub fn load(path: &std::path::Path, select: Option<&str>) -> Result<Vec<(String, Space, SpaceSpec)>, String> {
    let text = constraints::input::read_text(path, crate::command::MAX_SOURCE_BYTES, constraints::input::Links::Follow)
        .map_err(|e| format!("cannot read `{}`: {e}", crate::command::shown(path)))?;
    let specs = parse_spaces(&path.display().to_string(), &text)?;
    let mut out = Vec::new();
    for (name, spec) in specs {
        if select.is_some_and(|s| s != name) {
            continue;
        }
        let params = spec.parameters().map_err(|e| format!("{}: space `{name}`: {e}", path.display()))?;
        let space = Space::new(params, &spec.restrictions).map_err(|e| format!("{}: space `{name}`: {e}", path.display()))?;
        out.push((name, space, spec));
    }
    if out.is_empty() {
        return Err(match select {
            Some(s) => format!("{}: no space named `{s}`", path.display()),
            None => format!("{}: no space in the file", path.display()),
        });
    }
    Ok(out)
}

/// Every admissible row by brute force over the Cartesian product: the reference the tests
/// compare [`Space::build`] with (only for small spaces).
pub fn brute_force(space: &Space) -> BTreeSet<Vec<i64>> {
    let mut out = BTreeSet::new();
    let n = space.names.len();
    let mut idx = vec![0usize; n];
    if space.domains.iter().any(|d| d.is_empty()) {
        return out;
    }
    loop {
        let row: Vec<i64> = (0..n).map(|i| space.domains[i][idx[i]]).collect();
        if space.restrictions.iter().all(|r| r.code.holds(&row)) {
            out.insert(row);
        }
        let mut i = n;
        loop {
            if i == 0 {
                return out;
            }
            i -= 1;
            idx[i] += 1;
            if idx[i] < space.domains[i].len() {
                break;
            }
            idx[i] = 0;
        }
    }
}
