//! A kernel's memory accesses as warp patterns: the element index, row-major over the array's
//! extents, written `ax*threadIdx.x + ay*threadIdx.y + az*threadIdx.z + c`.
//!
//! Contract: a [`Pattern`] exists for an access whose flat index is a polynomial of degree at
//! most one in the thread indices, with strides free of them. The offset `c` is taken at the
//! block `(0, 0, 0)` with every other thread-varying variable (loop counters, auxiliaries) at
//! 0: the counters describe the first warp of the first block on the first iteration, which
//! [`super::lanes`] and [`super::formula`] evaluate alike.

use super::lanes::Concrete;
use crate::access::{builtin_var, Access, Collector, Env};
use crate::frontend::ast::Builtin;
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
    pub stride: [Poly; 3],
    pub offset: Poly,
    pub elem: i64,
}

fn thread(d: u8) -> Var {
    Var::new(&builtin_var(Builtin::ThreadIdx(d)))
}

impl Pattern {
    fn of(a: &Access, extents: &[Poly], elem: i64, shared: bool, params: &[String]) -> Option<Pattern> {
        let mut flat = Poly::zero();
        for (i, e) in a.indices.iter().zip(extents) {
            flat = flat * e + i.as_ref()?;
        }
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
        // Everything but the parameters (blocks, counters, auxiliaries) at 0.
        let mut offset = rest;
        for v in offset.vars() {
            if !params.iter().any(|p| p == v.name()) {
                offset = offset.substitute(&v, &Poly::zero());
            }
        }
        Some(Pattern { text: a.text.clone(), array: a.array.clone(), write: a.write, shared, stride, offset, elem })
    }

    /// The pattern with the parameters' values; `None` when one is missing or a value is not an
    /// integer.
    pub fn at(&self, point: &BTreeMap<String, i64>, block: [i64; 3]) -> Option<Concrete> {
        let values: BTreeMap<Var, Rational> = point.iter().map(|(k, v)| (Var::new(k), Rational::from_integer((*v).into()))).collect();
        let eval = |p: &Poly| -> Option<i64> {
            let r = p.eval(&values).ok()?;
            r.is_integer().then(|| i64::try_from(r.to_integer()).ok()).flatten()
        };
        Some(Concrete { stride: [eval(&self.stride[0])?, eval(&self.stride[1])?, eval(&self.stride[2])?], offset: eval(&self.offset)?, elem: self.elem, block })
    }
}

/// The patterns of a kernel's accesses (those that have one).
pub fn patterns(kernel: &Kernel, backend: &Backend) -> Vec<Pattern> {
    let mut col = Collector::new(backend, System::new());
    col.stmts(&kernel.body, &mut Env::new(), &[]);
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
    col.accesses.iter().filter_map(|a| arrays.get(&a.array).and_then(|(e, size, shared)| Pattern::of(a, e, *size, *shared, &params))).collect()
}
