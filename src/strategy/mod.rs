//! Strategies: semantics-preserving transformations of a [`crate::kernel::Kernel`], each tied
//! to the counters it can lower (the paper's O_j). A strategy returns `Ok(None)` when it does
//! not apply (nothing to transform, or its safety condition cannot be proved).

pub mod caching;
pub mod cse;
pub mod granularity;
pub mod interchange;
pub mod merge;
pub mod narrow;
pub mod prefetch;
pub(crate) mod syntax;
pub mod unroll;
pub(crate) mod walk;

use crate::frontend::model::{FactKind, KernelFunction};
use constraints::{Domain, System, Var};

/// The facts every strategy may rely on: the function's polynomial facts, and every integer
/// parameter an integer.
pub fn base_context(function: &KernelFunction) -> System {
    let mut s = System::new();
    for f in &function.facts {
        if f.kind == FactKind::Assume || f.kind == FactKind::Assert {
            if let Some(c) = &f.constraint {
                s.add(c.clone());
            }
        }
    }
    for p in &function.params {
        if p.ty.is_integer() {
            s.set_domain(Var::new(&p.name), Domain::integer());
        }
    }
    s
}
