//! A kernel's memory accesses as warp patterns: the element index, row-major over the array's
//! extents, written `ax*threadIdx.x + ay*threadIdx.y + az*threadIdx.z + c`.
//!
//! Contract: a [`Pattern`] exists for every access whose subscripts the access model
//! expresses (quotients and remainders included). [`Pattern::warp`] evaluates it lane by lane;
//! [`Pattern::at`] gives strides and offset for the closed forms, and exists only when the
//! index is of degree at most one in the thread indices, with strides free of them and no
//! quotient that depends on a thread. Either way the counters describe the first warp of the
//! block `(0, 0, 0)` on the first iteration: loop counters and other variables that are not
//! parameters are 0.

use super::lanes::Concrete;
use crate::access::{builtin_var, Access};
use crate::frontend::ast::Builtin;
use crate::frontend::model::KernelFunction;
use crate::kernel::{Kernel, KernelParamKind};
use constraints::solver::Backend;
use constraints::{Poly, Rational, System, Var};
use std::collections::BTreeMap;

/// One access as a warp pattern, with symbolic strides and offset.
#[derive(Clone, Debug)]
pub struct Pattern {
    pub text: String,
    pub array: String,
    pub write: bool,
    pub shared: bool,
    /// Strides and offset, when the index is affine in the thread indices.
    pub affine: Option<([Poly; 3], Poly)>,
    /// The strides alone, also when the index has divisions that no thread index reaches
    /// (the same for every lane of a warp, so they only move its offset), as long as the
    /// strides themselves are free of divisions.
    pub strides: Option<[Poly; 3]>,
    /// The flat element index, and how to evaluate it lane by lane.
    pub index: Poly,
    pub lanes: LaneValues,
    pub elem: i64,
}

/// Evaluates a polynomial of the access model for one lane: the parameters from a point, the
/// thread indices of the lane, the model's divisions it needs (in dependency order, as floor
/// division), and every other variable (block indices, loop counters) at 0.
#[derive(Clone, Debug, Default)]
pub struct LaneValues {
    pub divisions: Vec<(String, crate::access::AuxDef)>,
}

impl LaneValues {
    /// The divisions `p` needs, directly or through other divisions, in dependency order.
    pub fn for_poly(p: &Poly, divisions: &BTreeMap<String, crate::access::AuxDef>) -> LaneValues {
        let mut needed: Vec<String> = p.vars().into_iter().map(|v| v.name().to_string()).filter(|n| divisions.contains_key(n)).collect();
        let mut i = 0;
        while i < needed.len() {
            let def = &divisions[&needed[i]];
            for v in def.dividend.vars().into_iter().chain(def.divisor.vars()) {
                if divisions.contains_key(v.name()) && !needed.iter().any(|n| n == v.name()) {
                    needed.push(v.name().to_string());
                }
            }
            i += 1;
        }
        // Definitions before uses (the model's divisions never form a cycle; one that did
        // would be left out, and its uses would fail to evaluate).
        let mut ordered: Vec<(String, crate::access::AuxDef)> = Vec::new();
        while !needed.is_empty() {
            let ready = needed.iter().position(|n| {
                let def = &divisions[n];
                def.dividend.vars().into_iter().chain(def.divisor.vars()).all(|v| !divisions.contains_key(v.name()) || ordered.iter().any(|(o, _)| o == v.name()))
            });
            let Some(i) = ready else { break };
            let n = needed.remove(i);
            ordered.push((n.clone(), divisions[&n].clone()));
        }
        LaneValues { divisions: ordered }
    }

    /// `p` for the lane with thread indices `t`; `None` when a value is missing, not an
    /// integer, or a division by zero occurs.
    pub fn eval(&self, p: &Poly, point: &BTreeMap<String, i64>, t: [i64; 3]) -> Option<i64> {
        self.at(point).eval(p, t)
    }

    /// The point's values, converted once for the many lanes (and polynomials) evaluated at it.
    pub fn at<'a>(&'a self, point: &BTreeMap<String, i64>) -> LanePoint<'a> {
        let base = point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect();
        LanePoint { lanes: self, base }
    }
}

/// [`LaneValues`] at one parameter point: [`LanePoint::eval`] is [`LaneValues::eval`] at that
/// point, without converting the point again for each lane.
pub struct LanePoint<'a> {
    lanes: &'a LaneValues,
    base: BTreeMap<Var, Rational>,
}

impl LanePoint<'_> {
    /// `p` for the lane with thread indices `t` (see [`LaneValues::eval`]).
    pub fn eval(&self, p: &Poly, t: [i64; 3]) -> Option<i64> {
        self.eval_each(&[p], t).map(|v| v[0])
    }

    /// Each of `ps` for the lane with thread indices `t`, the lane's divisions computed once;
    /// `None` when one of them is `None`.
    pub fn eval_each(&self, ps: &[&Poly], t: [i64; 3]) -> Option<Vec<i64>> {
        let int = |v: i64| Rational::from_integer(v.into());
        let mut values = self.base.clone();
        for (d, v) in t.into_iter().enumerate() {
            values.insert(thread(d as u8), int(v));
        }
        let is_division = |v: &Var| crate::access::is_aux(v.name());
        // Every other variable is 0; a variable set to 0 here stays 0 for the polynomials
        // after, as it would be in a fresh evaluation.
        let exact = |p: &Poly, values: &mut BTreeMap<Var, Rational>| -> Option<i64> {
            for v in p.vars() {
                if !values.contains_key(&v) {
                    if is_division(&v) {
                        return None; // a division not computed: never guess it
                    }
                    values.insert(v, int(0));
                }
            }
            let r = p.eval(values).ok()?;
            r.is_integer().then(|| i64::try_from(r.to_integer()).ok()).flatten()
        };
        for (name, def) in &self.lanes.divisions {
            let (x, d) = (exact(&def.dividend, &mut values)?, exact(&def.divisor, &mut values)?);
            if d == 0 {
                return None;
            }
            values.insert(Var::new(name), int(if def.quotient { x.div_euclid(d) } else { x.rem_euclid(d) }));
        }
        ps.iter().map(|p| exact(p, &mut values)).collect()
    }
}

/// The model's variable for thread index `d` (0: x), made once: lane evaluation asks for it
/// per lane, and clones of one variable compare without reading their names.
pub(super) fn thread(d: u8) -> Var {
    static THREADS: std::sync::OnceLock<[Var; 3]> = std::sync::OnceLock::new();
    THREADS.get_or_init(|| [0, 1, 2].map(|d| Var::new(&builtin_var(Builtin::ThreadIdx(d)))))[d as usize].clone()
}

impl Pattern {
    fn of(a: &Access, extents: &[Poly], elem: i64, shared: bool, params: &[String], divisions: &BTreeMap<String, crate::access::AuxDef>) -> Option<Pattern> {
        let mut flat = Poly::zero();
        for (i, e) in a.indices.iter().zip(extents) {
            flat = flat * e + i.as_ref()?;
        }
        let lanes = LaneValues::for_poly(&flat, divisions);
        let affine = if lanes.divisions.is_empty() { affine(&flat, params) } else { None };
        let uniform = lanes.divisions.iter().all(|(_, d)| !d.dividend.vars().iter().chain(d.divisor.vars().iter()).any(|v| (0..3).any(|t| thread(t) == *v)));
        let strides = match &affine {
            Some((s, _)) => Some(s.clone()),
            None if uniform => thread_strides(&flat).filter(|s| s.iter().all(|x| x.vars().iter().all(|v| !lanes.divisions.iter().any(|(n, _)| n == v.name())))),
            None => None,
        };
        Some(Pattern { text: a.text.clone(), array: a.array.clone(), write: a.write, shared, affine, strides, index: flat, lanes, elem })
    }

    /// The element each lane of the first warp touches, evaluated lane by lane (quotients as
    /// floor division); `None` when a value is missing or a division by zero occurs.
    pub fn warp(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<super::lanes::Warp> {
        let index = super::lane_eval::LaneEval::new(&self.lanes, &self.index, point);
        self.first_warp(block, |t| index.eval(t))
    }

    /// [`Pattern::warp`] with every lane evaluated through the exact rational path (slow; the
    /// reference the integer path is tested against).
    pub fn warp_through_model(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<super::lanes::Warp> {
        let at = self.lanes.at(point);
        self.first_warp(block, |t| at.eval(&self.index, t))
    }

    /// The first warp's elements, `element` giving each lane's from its thread indices.
    fn first_warp(&self, block: [i64; 3], element: impl Fn([i64; 3]) -> Option<i64>) -> Option<super::lanes::Warp> {
        let [bx, by, bz] = block;
        let n = super::lanes::WARP.min(bx * by * bz).max(0);
        let elements = (0..n).map(|l| element([l % bx, (l / bx) % by, l / (bx * by)])).collect::<Option<Vec<i64>>>()?;
        Some(super::lanes::Warp { elements, elem: self.elem })
    }

    /// The pattern with the parameters' values; `None` when one is missing or a value is not an
    /// integer.
    pub fn at(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<Concrete> {
        let values = constraints::exact_point(point);
        let eval = |p: &Poly| -> Option<i64> {
            let r = p.eval(&values).ok()?;
            r.is_integer().then(|| i64::try_from(r.to_integer()).ok()).flatten()
        };
        let (stride, offset) = self.affine.as_ref()?;
        Some(Concrete { stride: [eval(&stride[0])?, eval(&stride[1])?, eval(&stride[2])?], offset: eval(offset)?, elem: self.elem, block })
    }
}

/// Strides per thread index and the offset, when `flat` is affine in the thread indices; the
/// offset with every variable that is not a parameter at 0.
fn affine(flat: &Poly, params: &[String]) -> Option<([Poly; 3], Poly)> {
    Some((thread_strides(flat)?, first_iteration(flat, params)))
}

/// `p` on the first iteration of the first block's lane 0: every variable that is not one of
/// `params` (thread and block indices, loop counters) at 0.
pub(super) fn first_iteration(p: &Poly, params: &[String]) -> Poly {
    let mut p = p.clone();
    for v in p.vars() {
        if !params.iter().any(|q| q == v.name()) {
            p = p.substitute(&v, &Poly::zero());
        }
    }
    p
}

/// The coefficient of each thread index in `p`, when `p` is of degree at most one in them and
/// the coefficients are free of them.
pub(super) fn thread_strides(p: &Poly) -> Option<[Poly; 3]> {
    let mut stride: [Poly; 3] = Default::default();
    for d in 0..3u8 {
        let t = thread(d);
        if p.terms().any(|(m, _)| m.exponent(&t) > 1) {
            return None;
        }
        stride[d as usize] = &p.substitute(&t, &Poly::one()) - &p.substitute(&t, &Poly::zero());
    }
    (!stride.iter().any(|s| (0..3).any(|d| s.vars().contains(&thread(d))))).then_some(stride)
}

/// The patterns of a kernel's accesses (those the access model expresses), modelled as the
/// verifier models the launch (`system`: the tree's root constraints, say), so that the tiles'
/// cooperative loads, with their divisions, have patterns too.
pub fn patterns(function: &KernelFunction, kernel: &Kernel, system: &System, backend: &Backend) -> Vec<Pattern> {
    let (col, _) = crate::verify::twothread::launch_collector(function, kernel, system, backend);
    let params: Vec<String> = kernel.params.iter().map(|p| p.name.clone()).collect();
    let mut arrays: BTreeMap<String, (Vec<Poly>, i64, bool)> = BTreeMap::new();
    for p in &kernel.params {
        if let KernelParamKind::Array { extents, elem, .. } = &p.kind {
            arrays.insert(p.name.clone(), (extents.clone(), elem.size_bytes() as i64, false));
        }
    }
    for s in &kernel.shared {
        arrays.insert(s.name.clone(), (s.extents.clone(), s.elem.size_bytes() as i64, true));
    }
    col.accesses.iter().filter_map(|a| arrays.get(&a.array).and_then(|(e, size, shared)| Pattern::of(a, e, *size, *shared, &params, &col.aux_defs))).collect()
}

/// The kernel's thread-dependent conditions (distinct guards of its accesses that name a
/// thread index), modelled as [`patterns`] models the accesses.
pub fn branches(function: &KernelFunction, kernel: &Kernel, system: &System, backend: &Backend) -> Vec<super::divergence::Branch> {
    let (col, _) = crate::verify::twothread::launch_collector(function, kernel, system, backend);
    let mut seen: Vec<constraints::Constraint> = Vec::new();
    for g in col.accesses.iter().flat_map(|a| &a.guards) {
        let lanes = LaneValues::for_poly(g.poly(), &col.aux_defs);
        let mut vars = g.vars();
        for (_, d) in &lanes.divisions {
            vars.extend(d.dividend.vars().into_iter().chain(d.divisor.vars()));
        }
        let threaded = vars.iter().any(|v| (0..3).any(|d| thread(d) == *v));
        if threaded && !seen.contains(g) {
            seen.push(g.clone());
        }
    }
    seen.into_iter().map(|c| super::divergence::Branch::new(LaneValues::for_poly(c.poly(), &col.aux_defs), c)).collect()
}
