//! The checked program: what every later stage (lowering, strategies, emitters) consumes.
//!
//! Invariants established by the checker: every name resolves; array accesses have as many
//! subscripts as the array has dimensions, each an integer expression; parameters, derived
//! scalars and loop counters are never written; each schedule has one to three grid loops and
//! one to three block loops, its body holds no further `meta_for` or `meta_schedule`.

use super::ast::{Expr, ScalarType, Stmt};
use super::source::Span;
use constraints::{Constraint, Poly};

#[derive(Clone, Debug)]
pub struct CheckedProgram {
    pub kernels: Vec<KernelFunction>,
}

/// How the tool classifies a parameter (the paper's Definition 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// An integer scalar that sizes an array (`N` in `float a[N][N]`), or any other integer
    /// scalar that is neither a block size nor a granularity (a time-step count, a filter
    /// radius): a size given at run time, never tuned.
    DataParameter,
    /// An integer scalar that sizes a thread loop or divides a grid loop's extent, directly or
    /// through derived scalars: a block size or a granularity, which `tune` chooses.
    ProgramParameter,
    /// A floating scalar: a plain value, never a symbol of a constraint.
    Value,
    Array,
}

#[derive(Clone, Debug)]
pub struct ParamInfo {
    pub name: String,
    pub ty: ScalarType,
    /// The type as the program spells it (`ast::Param::spelling`).
    pub spelling: &'static str,
    pub role: Role,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct ArrayInfo {
    pub name: String,
    pub elem: ScalarType,
    pub is_const: bool,
    /// Row-major extents, outermost first, as polynomials in the integer parameters.
    pub extents: Vec<Poly>,
    pub extent_exprs: Vec<Expr>,
}

/// A scalar defined outside the schedules from parameters (`int dim0 = N / B0;`).
#[derive(Clone, Debug)]
pub struct Derived {
    pub name: String,
    pub ty: ScalarType,
    pub value: Expr,
    /// The value as a polynomial in parameters, when it is one.
    pub poly: Option<Poly>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FactKind {
    Assume,
    Assert,
    /// Implied by the program's own arithmetic: an integer divisor that only parameters and
    /// derived scalars determine is not zero (C leaves a division by zero undefined, so no
    /// launch may happen there), and a kernel's integer operation stays within its C type
    /// ([`super::ranges`]).
    Defined,
}

/// One conjunct of an `assume` or `assert`.
#[derive(Clone, Debug)]
pub struct Fact {
    pub kind: FactKind,
    pub condition: Expr,
    /// The conjunct as a polynomial constraint, when it is a comparison of polynomials (never
    /// for a range fact of [`super::ranges`], which joins no tree).
    pub constraint: Option<Constraint>,
    /// Why a `Defined` fact holds, for messages (`the program divides by it`).
    pub note: Option<String>,
    /// A range fact of [`super::ranges`] (a kernel's operation within its type): checked after
    /// the scalars the launch computes, whose own overflow is the more direct reason to refuse.
    pub kernel_range: bool,
}

/// A `meta_for` loop mapped to a grid or block dimension.
#[derive(Clone, Debug)]
pub struct ParLoop {
    pub var: String,
    pub ty: ScalarType,
    pub lo: Expr,
    pub hi: Expr,
    /// `hi - lo` as a polynomial, when it is one (derived scalars expanded).
    pub extent: Option<Poly>,
    /// `blockIdx.x`, `threadIdx.y`, ...
    pub maps_to: String,
    pub span: Span,
}

/// A serial `for` loop: around a schedule (host), or between the grid and block groups.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SerialLoop {
    pub var: String,
    pub ty: ScalarType,
    pub lo: Expr,
    pub hi: Expr,
    pub inclusive: bool,
    pub step: i64,
}

/// One `meta_schedule`: one GPU kernel.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub name: String,
    pub host_loops: Vec<SerialLoop>,
    pub cache: Vec<String>,
    pub grid: Vec<ParLoop>,
    /// Serial loops between the grid and the block groups (matrix multiplication's tile loop).
    pub between: Vec<SerialLoop>,
    pub block: Vec<ParLoop>,
    /// The statements inside the innermost block loop.
    pub body: Vec<Stmt>,
    /// True when the tool split a single group of `meta_for` loops into grid and block.
    pub split_by_tool: bool,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct KernelFunction {
    pub name: String,
    pub params: Vec<ParamInfo>,
    pub arrays: Vec<ArrayInfo>,
    pub derived: Vec<Derived>,
    pub facts: Vec<Fact>,
    pub schedules: Vec<Schedule>,
    /// The function's body as written: the serial program the verifier runs as reference
    /// (its `meta_schedule`s appear in the order of `schedules`).
    pub body: Vec<Stmt>,
}

impl KernelFunction {
    /// Parameter `name`'s type as the program spells it (`char`, `long long`), for the
    /// declarations a caller's C++ passes its values to; the kernels take the same values as
    /// `ScalarType::c_name` spells them. `None` for a name that is no parameter.
    pub fn spelling_of(&self, name: &str) -> Option<&'static str> {
        self.params.iter().find(|p| p.name == name).map(|p| p.spelling)
    }

    /// The derived scalars `schedule` can see, in definition order: those whose definitions
    /// read only parameters, the schedule's own host loop counters and scalars it sees. A
    /// scalar defined in a host loop's body from its counter (`int s = 2 * t`, or the counter
    /// of a loop counting down) is not one of a schedule after that loop, which C's scope
    /// already keeps from reading it: its kernels neither take nor compute it.
    pub fn derived_in_scope(&self, schedule: &Schedule) -> Vec<&Derived> {
        let mut visible: std::collections::BTreeSet<&str> = self.params.iter().map(|p| p.name.as_str()).chain(schedule.host_loops.iter().map(|h| h.var.as_str())).collect();
        let mut out = Vec::new();
        for d in &self.derived {
            let mut names = Vec::new();
            d.value.names(&mut names);
            if names.iter().all(|n| visible.contains(n.as_str())) {
                visible.insert(&d.name);
                out.push(d);
            }
        }
        out
    }

    /// Each derived scalar's polynomial (`None` where it is not one), by name: what
    /// `polyexpr::to_poly` substitutes.
    pub fn derived_polys(&self) -> super::polyexpr::DerivedPolys {
        self.derived.iter().map(|d| (d.name.clone(), d.poly.clone())).collect()
    }

    /// `names` and every name the derived scalars among them read, transitively: what an
    /// expression naming `names` depends on.
    pub fn names_read(&self, names: impl IntoIterator<Item = String>) -> std::collections::BTreeSet<String> {
        let mut pending: Vec<String> = names.into_iter().collect();
        let mut read = std::collections::BTreeSet::new();
        while let Some(n) = pending.pop() {
            if read.insert(n.clone()) {
                if let Some(d) = self.derived.iter().find(|d| d.name == n) {
                    d.value.names(&mut pending);
                }
            }
        }
        read
    }

    fn names_with(&self, role: Role) -> Vec<String> {
        self.params.iter().filter(|p| p.role == role).map(|p| p.name.clone()).collect()
    }

    pub fn data_parameters(&self) -> Vec<String> {
        self.names_with(Role::DataParameter)
    }

    /// The integer scalars a launch is keyed by (data and program parameters, in declaration
    /// order): what the dispatcher and the tuner take values for.
    pub fn integer_parameters(&self) -> Vec<String> {
        self.params.iter().filter(|p| p.role != Role::Array && p.ty.is_integer()).map(|p| p.name.clone()).collect()
    }

    pub fn program_parameters(&self) -> Vec<String> {
        self.names_with(Role::ProgramParameter)
    }

    pub fn value_parameters(&self) -> Vec<String> {
        self.names_with(Role::Value)
    }

    pub fn array(&self, name: &str) -> Option<&ArrayInfo> {
        self.arrays.iter().find(|a| a.name == name)
    }
}
