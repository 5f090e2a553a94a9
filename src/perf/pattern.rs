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
    /// The flat element index, and the model's divisions it may use (name, definition).
    pub index: Poly,
    pub divisions: Vec<(String, crate::access::AuxDef)>,
    pub elem: i64,
}

fn thread(d: u8) -> Var {
    Var::new(&builtin_var(Builtin::ThreadIdx(d)))
}

impl Pattern {
    fn of(a: &Access, extents: &[Poly], elem: i64, shared: bool, params: &[String], divisions: &BTreeMap<String, crate::access::AuxDef>) -> Option<Pattern> {
        let mut flat = Poly::zero();
        for (i, e) in a.indices.iter().zip(extents) {
            flat = flat * e + i.as_ref()?;
        }
        // The divisions the index needs, directly or through other divisions.
        let mut needed: Vec<String> = flat.vars().into_iter().map(|v| v.name().to_string()).filter(|n| divisions.contains_key(n)).collect();
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
        let affine = if needed.is_empty() { affine(&flat, params) } else { None };
        let used: Vec<(String, crate::access::AuxDef)> = needed.into_iter().map(|n| (n.clone(), divisions[&n].clone())).collect();
        Some(Pattern { text: a.text.clone(), array: a.array.clone(), write: a.write, shared, affine, index: flat, divisions: used, elem })
    }

    /// The element each lane of the first warp touches, evaluated lane by lane (quotients as
    /// floor division); `None` when a value is missing or a division by zero occurs.
    pub fn warp(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<super::lanes::Warp> {
        let int = |v: i64| Rational::from_integer(v.into());
        let is_division = |v: &Var| self.divisions.iter().any(|(n, _)| n == v.name());
        // Divisions in dependency order, found once.
        let mut order: Vec<&(String, crate::access::AuxDef)> = Vec::new();
        while order.len() < self.divisions.len() {
            let before = order.len();
            for d in &self.divisions {
                let ready = d.1.dividend.vars().iter().chain(d.1.divisor.vars().iter()).all(|v| !is_division(v) || order.iter().any(|(n, _)| n == v.name()));
                if ready && !order.iter().any(|(n, _)| *n == d.0) {
                    order.push(d);
                }
            }
            if order.len() == before {
                return None; // circular definitions: not the model's
            }
        }
        // The parameters; every other variable that is not a thread index or a division at 0.
        let mut base: BTreeMap<Var, Rational> = point.iter().map(|(k, v)| (Var::new(k), int(*v))).collect();
        let mentioned = self.index.vars().into_iter().chain(self.divisions.iter().flat_map(|(_, d)| d.dividend.vars().into_iter().chain(d.divisor.vars())));
        for v in mentioned.collect::<Vec<_>>() {
            if !base.contains_key(&v) && !is_division(&v) && !(0..3).any(|d| thread(d) == v) {
                base.insert(v, int(0));
            }
        }
        let eval = |p: &Poly, values: &BTreeMap<Var, Rational>| -> Option<i64> {
            let r = p.eval(values).ok()?;
            r.is_integer().then(|| i64::try_from(r.to_integer()).ok()).flatten()
        };
        let [bx, by, bz] = block;
        let n = super::lanes::WARP.min(bx * by * bz).max(0);
        let mut elements = Vec::with_capacity(n as usize);
        for l in 0..n {
            let mut values = base.clone();
            for (d, t) in [l % bx, (l / bx) % by, l / (bx * by)].into_iter().enumerate() {
                values.insert(thread(d as u8), int(t));
            }
            for (name, def) in &order {
                let (x, d) = (eval(&def.dividend, &values)?, eval(&def.divisor, &values)?);
                if d == 0 {
                    return None;
                }
                values.insert(Var::new(name), int(if def.quotient { x.div_euclid(d) } else { x.rem_euclid(d) }));
            }
            elements.push(eval(&self.index, &values)?);
        }
        Some(super::lanes::Warp { elements, elem: self.elem })
    }

    /// The pattern with the parameters' values; `None` when one is missing or a value is not an
    /// integer.
    pub fn at(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<Concrete> {
        let values: BTreeMap<Var, Rational> = point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect();
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
    let mut rest = flat.clone();
    let mut stride: [Poly; 3] = Default::default();
    for d in 0..3u8 {
        let t = thread(d);
        if flat.terms().any(|(m, _)| m.exponent(&t) > 1) {
            return None;
        }
        stride[d as usize] = &flat.substitute(&t, &Poly::one()) - &flat.substitute(&t, &Poly::zero());
        rest = rest.substitute(&t, &Poly::zero());
    }
    if stride.iter().any(|s| (0..3).any(|d| s.vars().contains(&thread(d)))) {
        return None;
    }
    let mut offset = rest;
    for v in offset.vars() {
        if !params.iter().any(|p| p == v.name()) {
            offset = offset.substitute(&v, &Poly::zero());
        }
    }
    Some((stride, offset))
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
