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
/// The most values the admissible configurations may hold together (configurations times
/// parameters, 8 bytes each: 160 MB): a space of a hundred two-valued parameters stays under
/// [`MAX_ADMISSIBLE`] long after its rows fill memory (a helper's 100-parameter file aborted
/// on a 1.6 GB allocation).
pub const MAX_STORED_VALUES: usize = 20_000_000;

/// The most admissible configurations of `width` parameters a space may have.
pub fn max_admissible(width: usize) -> usize {
    MAX_ADMISSIBLE.min(MAX_STORED_VALUES / width.max(1))
}

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
            // A value listed twice would be searched, counted and ranked twice.
            Values::List(v) => {
                let mut seen = std::collections::HashSet::new();
                match v.iter().find(|x| !seen.insert(**x)) {
                    Some(x) => Err(format!("value {x} is listed twice")),
                    None => Ok(v.clone()),
                }
            }
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
    /// Parameter names to values, in the file's order (a name given twice is refused).
    #[serde(deserialize_with = "constraints::input::unique_entries")]
    pub params: Vec<(String, serde_yaml::Value)>,
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
    /// The parameters in file order, with their values expanded; an error names the parameter.
    pub fn parameters(&self) -> Result<Vec<(String, Vec<i64>)>, (String, String)> {
        self.params
            .iter()
            .map(|(name, v)| {
                let refuse = |e: String| (name.clone(), format!("parameter `{name}`: {e}"));
                // Read here, not by serde: an untagged form's error names neither form nor place.
                let values: Values = serde_yaml::from_value(v.clone()).map_err(|_| refuse("expected a list of integers or {range: [lo, hi], step: s}".into()))?;
                Ok((name.clone(), values.expand().map_err(refuse)?))
            })
            .collect()
    }
}

/// A file of several spaces, by name in file order.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpacesFile {
    #[serde(deserialize_with = "constraints::input::unique_entries")]
    spaces: Vec<(String, SpaceSpec)>,
}

/// The name [`parse_spaces`] gives the one space of a file without `spaces:`.
pub const SINGLE_SPACE: &str = "space";

/// A space file: one space (`params`, `restrictions`), or several under `spaces:` (by name, in
/// file order), and whether they were named so. A YAML or shape error names its line and column
/// in the file.
pub fn parse_spaces(source: &str, text: &str) -> Result<(Vec<(String, SpaceSpec)>, bool), String> {
    let text = constraints::input::without_bom(text);
    constraints::input::check_yaml_nesting(text).map_err(|(line, e)| format!("{source}:{line}: {e}"))?;
    let placed = |e: serde_yaml::Error| {
        let (place, message) = constraints::input::yaml_error(&e, text, 1);
        match place {
            Some((line, column)) => format!("{source}:{line}:{column}: {message}"),
            None => format!("{source}: {message}"),
        }
    };
    let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(placed)?;
    match value.get("spaces") {
        Some(serde_yaml::Value::Mapping(_)) => Ok((serde_yaml::from_str::<SpacesFile>(text).map_err(placed)?.spaces, true)),
        Some(_) => Err(format!("{source}:{}: `spaces` must be a mapping of names to spaces", 1 + constraints::input::yaml_key_line(text, &["spaces"]))),
        None if value.is_mapping() => Ok((vec![(SINGLE_SPACE.to_string(), serde_yaml::from_str::<SpaceSpec>(text).map_err(placed)?)], false)),
        None => Err(format!("{source}: a space file is a mapping with `params` (and `restrictions`), or `spaces:` naming several")),
    }
}

/// A restriction's text as messages show it, quoted: a long one (a generated file's) cut to its
/// ends, with its length.
fn abbreviated(text: &str) -> String {
    const SHOWN: usize = 40;
    let n = text.chars().count();
    if n <= 2 * SHOWN + 20 {
        return format!("`{text}`");
    }
    let head: String = text.chars().take(SHOWN).collect();
    let tail: String = text.chars().skip(n - SHOWN).collect();
    format!("`{head} … {tail}` ({n} characters)")
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
    /// The rows (with no parameter, the one empty configuration: `values` cannot tell).
    pub count: usize,
    /// Set when the search stopped early (the time budget, or [`max_admissible`]): `values`
    /// is then only part of the space, and callers report the reason instead.
    pub stopped: Option<String>,
    /// Partial rows a restriction could not be evaluated at (an overflow of 64 bits, a
    /// division by zero), each left out as if the restriction were false, and the first:
    /// the restriction and the values it read.
    pub undefined: u64,
    pub first_undefined: Option<String>,
}

impl Admissible {
    /// A line saying which configurations were left out for an undefined restriction, if any.
    pub fn undefined_note(&self) -> Option<String> {
        let first = self.first_undefined.as_ref()?;
        Some(format!("{} partial configuration{} left out where a restriction is undefined (an overflow of 64 bits or a division by zero); the first: {first}", self.undefined, if self.undefined == 1 { " was" } else { "s were" }))
    }

    pub fn len(&self) -> usize {
        self.count
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
        Space::new_placed(params, restrictions).map_err(|(_, e)| e)
    }

    /// As [`Space::new`]; an error also gives the index of the restriction at fault, if one is.
    pub fn new_placed(params: Vec<(String, Vec<i64>)>, restrictions: &[String]) -> Result<Space, (Option<usize>, String)> {
        let (names, domains): (Vec<String>, Vec<Vec<i64>>) = params.into_iter().unzip();
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                return Err((None, format!("parameter `{n}` is given twice")));
            }
        }
        let (mut exprs, mut origin) = (Vec::new(), Vec::new());
        for (i, text) in restrictions.iter().enumerate() {
            let refuse = |d: crate::frontend::Diagnostic| (Some(i), format!("restriction {}: {}", abbreviated(text), d.message));
            let tokens = crate::frontend::lexer::lex(text).map_err(refuse)?;
            let e = crate::frontend::parser::parse_expression(tokens).map_err(refuse)?;
            let parts = conjuncts(&e);
            origin.extend(std::iter::repeat_n(i, parts.len()));
            exprs.extend(parts);
        }
        Space::compile(names, domains, exprs, &BTreeMap::new()).map_err(|(k, e)| (Some(origin[k]), e))
    }

    /// A space whose restrictions are already parsed; `definitions` are names that stand for
    /// expressions over the parameters (a program's derived scalars).
    pub fn from_exprs(names: Vec<String>, domains: Vec<Vec<i64>>, exprs: Vec<Expr>, definitions: &BTreeMap<String, Expr>) -> Result<Space, String> {
        Space::compile(names, domains, exprs, definitions).map_err(|(_, e)| e)
    }

    /// As [`Space::from_exprs`]; an error gives the index of the expression at fault.
    fn compile(names: Vec<String>, domains: Vec<Vec<i64>>, exprs: Vec<Expr>, definitions: &BTreeMap<String, Expr>) -> Result<Space, (usize, String)> {
        let resolve = |v: &str| match names.iter().position(|n| n == v) {
            Some(i) => Ok(Resolved::Slot(i)),
            None => definitions.get(v).map(|e| Resolved::Expr(e.clone())).ok_or_else(|| format!("`{v}` is not a parameter of the space")),
        };
        let mut restrictions = Vec::new();
        let mut polys = Vec::new();
        for (k, e) in exprs.into_iter().enumerate() {
            let code = Code::compile(&e, &resolve).map_err(|m| (k, format!("restriction {}: {m}", abbreviated(&e.to_string()))))?;
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
                    return Admissible { width: self.names.len(), values: Vec::new(), count: 0, stopped: None, undefined: 0, first_undefined: None };
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
        let mut search = Search { space: self, order: &order, domains: &domains, checks: &checks, row: vec![0; self.names.len()], out: Vec::new(), count: 0, filter, progress, visited: 0, stopped: None, undefined: 0, first_undefined: None };
        search.descend(0, 0.0, 1.0);
        Admissible { width: self.names.len(), values: search.out, count: search.count, stopped: search.stopped, undefined: search.undefined, first_undefined: search.first_undefined }
    }
}

struct Search<'a, 'f, 'g> {
    space: &'a Space,
    order: &'a [usize],
    domains: &'a [Vec<i64>],
    checks: &'a [Vec<(usize, bool)>],
    row: Vec<i64>,
    out: Vec<i64>,
    /// The rows in `out`.
    count: usize,
    filter: Option<&'f mut (dyn FnMut(&[i64]) -> bool + 'f)>,
    progress: Option<&'g mut (dyn FnMut(f64) + 'g)>,
    visited: u64,
    /// Why the search stopped early: the budget, or too many admissible points.
    stopped: Option<String>,
    undefined: u64,
    first_undefined: Option<String>,
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
            let most = max_admissible(self.row.len());
            if self.count >= most {
                self.stopped = Some(format!("the space has more than {most} admissible configurations of its {} parameters; narrow its values or add restrictions", self.row.len()));
                return;
            }
            self.out.extend_from_slice(&self.row);
            self.count += 1;
            return;
        }
        let slot = self.order[depth];
        let count = self.domains[depth].len();
        'values: for (k, &v) in self.domains[depth].iter().enumerate() {
            // The budget (--time-limit, Ctrl-C) and the progress, every so many values tried
            // at any depth: a single innermost range may hold a million values.
            self.visited += 1;
            if self.visited % 65536 == 0 {
                if let Some(p) = self.progress.as_mut() {
                    p(done + share * k as f64 / count as f64);
                }
                if constraints::budget::expired() {
                    self.stopped.get_or_insert_with(|| format!("{} before the space was searched (--time-limit)", constraints::budget::REASON));
                }
            }
            if self.stopped.is_some() {
                return;
            }
            self.row[slot] = v;
            for &(i, bound) in &self.checks[depth] {
                let r = &self.space.restrictions[i];
                match r.code.eval(&self.row) {
                    Some(v) if v != 0 => {}
                    Some(_) if bound => break 'values,
                    Some(_) => continue 'values,
                    // Undefined: left out, counted, never taken for a bound's end.
                    None => {
                        self.undefined += 1;
                        if self.first_undefined.is_none() {
                            let values: Vec<String> = self.order[..=depth].iter().map(|&p| format!("{} = {}", self.space.names[p], self.row[p])).collect();
                            self.first_undefined = Some(format!("`{}` at {}", r.text, values.join(", ")));
                        }
                        continue 'values;
                    }
                }
            }
            let part = share / count as f64;
            self.descend(depth + 1, done + part * k as f64, part);
        }
    }
}

/// The spaces of a file by name, expanded; `select` keeps only the named one. An error names
/// the file, the line at fault and, in a file of several, the space.
pub fn load(path: &std::path::Path, select: Option<&str>) -> Result<Vec<(String, Space, SpaceSpec)>, String> {
    let text = constraints::input::read_text(path, crate::command::MAX_SOURCE_BYTES, constraints::input::Links::Follow)
        .map_err(|e| format!("cannot read `{}`: {e}", crate::command::shown(path)))?;
    let shown = crate::command::shown(path);
    let text = constraints::input::without_bom(&text);
    let (specs, named) = parse_spaces(&shown, text)?;
    let mut out = Vec::new();
    for (name, spec) in specs {
        if select.is_some_and(|s| s != name) {
            continue;
        }
        let within: Vec<&str> = if named { vec!["spaces", name.as_str()] } else { vec![] };
        let at = |keys: &[&str]| 1 + constraints::input::yaml_key_line(text, &[within.as_slice(), keys].concat());
        let label = if named { format!(" space `{}`:", name.escape_debug()) } else { String::new() };
        let params = spec.parameters().map_err(|(p, e)| format!("{shown}:{}:{label} {e}", at(&["params", &p])))?;
        if params.is_empty() {
            return Err(format!("{shown}:{}:{label} `params` names no parameter; a space needs at least one (`B: [32, 64]`)", at(&["params"])));
        }
        let space = Space::new_placed(params, &spec.restrictions).map_err(|(r, e)| {
            let line = match r {
                Some(i) => list_item_line(text, at(&["restrictions"]) - 1, i) + 1,
                None => at(&["params"]),
            };
            format!("{shown}:{line}:{label} {e}")
        })?;
        out.push((name, space, spec));
    }
    if out.is_empty() {
        return Err(match select {
            Some(s) => format!("{shown}: no space named `{}`", s.escape_debug()),
            None => format!("{shown}: no space in the file"),
        });
    }
    Ok(out)
}

/// The line (from 0) of item `i` of the block sequence under the key on line `key` of `text`;
/// the key's own line when the sequence is a flow one (`[a, b]`) or shorter.
fn list_item_line(text: &str, key: usize, i: usize) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let Some(base) = lines.get(key).map(|l| indent(l)) else { return key };
    let mut seen = 0;
    for (j, l) in lines.iter().enumerate().skip(key + 1) {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if (t == "-" || t.starts_with("- ")) && indent(l) >= base {
            if seen == i {
                return j;
            }
            seen += 1;
        } else if indent(l) <= base {
            break;
        }
    }
    key
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
