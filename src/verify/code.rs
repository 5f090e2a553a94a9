//! Programs for the execution engine: the serial function body and kernel forms, compiled
//! from the syntax tree into a flat list of instructions over numbered slots.
//!
//! Why a compiler to instructions rather than a tree-walking interpreter: a thread must stop
//! at `__syncthreads()` and resume there once its whole block has arrived. With a flat program a
//! thread is a program counter plus its slots, so the block's threads can be run one after
//! another to the next barrier, with no coroutines or OS threads. (The alternative, the kernel's
//! LLVM IR run through inkwell's execution engine, would need one host thread per CUDA thread
//! for the barriers, and would give the verifier no hook for bounds and race checks.)
//!
//! Contract: every name resolves at compile time (scopes as in C: a declaration is visible to
//! the end of its block; slots are never reused, so shadowing is just a new slot). Each array
//! access gets a *site* number with its printed form, for messages.

use crate::frontend::ast::*;
use crate::frontend::model::KernelFunction;
use crate::kernel::{Kernel, KernelParamKind};
use constraints::Poly;
use std::collections::HashMap;

use super::value::Value;

/// An expression over slots.
#[derive(Clone, Debug)]
pub enum E {
    Const(Value),
    Slot(usize),
    Builtin(Builtin),
    Load { array: usize, indices: Vec<E>, site: usize },
    Neg(Box<E>),
    Not(Box<E>),
    And(Box<E>, Box<E>),
    Or(Box<E>, Box<E>),
    Binary(BinOp, Box<E>, Box<E>),
    /// `c ? a : b`, both arms converted to their common type.
    Cond(ScalarType, Box<E>, Box<E>, Box<E>),
    Cast(ScalarType, Box<E>),
    Call(String, Vec<E>),
}

#[derive(Clone, Debug)]
pub enum Instr {
    /// `slot op= value`, converted to the slot's type.
    Set { slot: usize, op: AssignOp, value: E },
    /// `array[indices] op= value`, converted to the element type.
    Store { array: usize, indices: Vec<E>, op: AssignOp, value: E, site: usize },
    JumpUnless(E, usize),
    Jump(usize),
    /// `__syncthreads()`; the number tells barriers apart in messages.
    Barrier(usize),
    /// Host only: launch the kernel of `launches[i]` on a copy of global memory; the
    /// schedule's serial code follows, then [`Instr::Compare`].
    Launch(usize),
    /// Host only: the serial code of `launches[i]`'s schedule has run; the kernel's copy of
    /// global memory must be identical to it.
    Compare(usize),
    /// `assume`/`assert` on the host: the point is outside the program's facts when false.
    Fact { cond: E, text: String },
}

/// An array a program accesses: a global one (a function parameter) or a block's shared one.
#[derive(Clone, Debug)]
pub struct ArrayRef {
    pub name: String,
    pub elem: ScalarType,
    /// Row-major extents as polynomials in the integer parameters.
    pub extents: Vec<Poly>,
    pub shared: bool,
}

/// A kernel launch in the host program: where the kernel's scalar parameters come from.
#[derive(Clone, Debug)]
pub struct LaunchSite {
    pub schedule: usize,
    /// Per kernel parameter: the host slot of a scalar, or `None` for an array (bound by name).
    pub args: Vec<Option<usize>>,
    /// Blocks along x, y, z, as host expressions.
    pub grid: Vec<E>,
}

#[derive(Clone, Debug, Default)]
pub struct Code {
    pub instrs: Vec<Instr>,
    pub slot_types: Vec<ScalarType>,
    pub slot_names: Vec<String>,
    pub arrays: Vec<ArrayRef>,
    /// The printed form of each access site (`a[i][k]`).
    pub sites: Vec<String>,
    /// Each site's place in the source, where it has one (a site the lowering made has the
    /// empty span): two sites print alike (`B[i][j]` read, then written).
    pub site_spans: Vec<crate::frontend::source::Span>,
    pub launches: Vec<LaunchSite>,
    /// Host only: the instructions `start..end` of each schedule's serial code, with the
    /// schedule's index in the function, so that a fault is placed in its schedule.
    pub schedule_spans: Vec<(usize, usize, usize)>,
    /// How many slots are parameters (filled by the caller, in order).
    pub params: usize,
}

struct Compiler {
    code: Code,
    scopes: Vec<HashMap<String, usize>>,
    arrays: HashMap<String, usize>,
    /// Host only: which schedule is launched as a kernel (the others run serially).
    launch: Option<(usize, Kernel)>,
    schedules_seen: usize,
    barriers: usize,
}

impl Compiler {
    fn new() -> Compiler {
        Compiler { code: Code::default(), scopes: vec![HashMap::new()], arrays: HashMap::new(), launch: None, schedules_seen: 0, barriers: 0 }
    }

    fn declare(&mut self, name: &str, ty: ScalarType) -> usize {
        let slot = self.code.slot_types.len();
        self.code.slot_types.push(ty);
        self.code.slot_names.push(name.to_string());
        self.scopes.last_mut().expect("a scope").insert(name.to_string(), slot);
        slot
    }

    fn lookup(&self, name: &str) -> Result<usize, String> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied()).ok_or_else(|| format!("`{name}` is not defined here"))
    }

    fn add_array(&mut self, a: ArrayRef) {
        self.arrays.insert(a.name.clone(), self.code.arrays.len());
        self.code.arrays.push(a);
    }

    fn emit(&mut self, i: Instr) -> usize {
        self.code.instrs.push(i);
        self.code.instrs.len() - 1
    }

    fn here(&self) -> usize {
        self.code.instrs.len()
    }

    fn patch(&mut self, at: usize, target: usize) {
        match &mut self.code.instrs[at] {
            Instr::JumpUnless(_, t) | Instr::Jump(t) => *t = target,
            _ => unreachable!("only jumps are patched"),
        }
    }

    fn expr(&mut self, e: &Expr) -> Result<E, String> {
        Ok(match &e.kind {
            ExprKind::Int(v) => E::Const(match i32::try_from(*v) {
                Ok(x) => Value::Int(x),
                Err(_) => Value::Long(*v),
            }),
            ExprKind::Float { value, single: true } => E::Const(Value::Float(*value as f32)),
            ExprKind::Float { value, single: false } => E::Const(Value::Double(*value)),
            ExprKind::Var(n) => E::Slot(self.lookup(n)?),
            ExprKind::Builtin(b) => E::Builtin(*b),
            ExprKind::Index { array, indices } => {
                let id = *self.arrays.get(&array.name).ok_or_else(|| format!("array `{}` is not defined here", array.name))?;
                let indices = indices.iter().map(|i| self.expr(i)).collect::<Result<_, _>>()?;
                E::Load { array: id, indices, site: self.site(e) }
            }
            ExprKind::Unary(UnOp::Neg, a) => E::Neg(Box::new(self.expr(a)?)),
            ExprKind::Unary(UnOp::Not, a) => E::Not(Box::new(self.expr(a)?)),
            ExprKind::Binary(BinOp::And, a, b) => E::And(Box::new(self.expr(a)?), Box::new(self.expr(b)?)),
            ExprKind::Binary(BinOp::Or, a, b) => E::Or(Box::new(self.expr(a)?), Box::new(self.expr(b)?)),
            ExprKind::Binary(op, a, b) => E::Binary(*op, Box::new(self.expr(a)?), Box::new(self.expr(b)?)),
            ExprKind::Cond(c, a, b) => {
                let (a, b) = (self.expr(a)?, self.expr(b)?);
                let ty = ScalarType::promote(self.type_of(&a), self.type_of(&b));
                E::Cond(ty, Box::new(self.expr(c)?), Box::new(a), Box::new(b))
            }
            ExprKind::Cast(t, a) => E::Cast(*t, Box::new(self.expr(a)?)),
            ExprKind::Call(f, args) => E::Call(f.name.clone(), args.iter().map(|a| self.expr(a)).collect::<Result<_, _>>()?),
        })
    }

    /// An expression's C type (the slot's, the element's, the usual conversions).
    fn type_of(&self, e: &E) -> ScalarType {
        match e {
            E::Const(v) => v.ty(),
            E::Slot(s) => self.code.slot_types[*s],
            E::Load { array, .. } => self.code.arrays[*array].elem,
            E::Builtin(_) | E::Not(_) | E::And(..) | E::Or(..) => ScalarType::Int,
            E::Binary(op, ..) if op.is_comparison() => ScalarType::Int,
            E::Neg(a) => self.type_of(a),
            E::Binary(_, a, b) => ScalarType::promote(self.type_of(a), self.type_of(b)),
            E::Cond(t, ..) | E::Cast(t, _) => *t,
            E::Call(name, args) => match name.as_str() {
                "min" | "max" => args.iter().fold(ScalarType::Int, |t, a| ScalarType::promote(t, self.type_of(a))),
                "abs" => args.first().map_or(ScalarType::Int, |a| {
                    let t = self.type_of(a);
                    ScalarType::promote(t, t)
                }),
                n if n.ends_with('f') => ScalarType::Float,
                _ => ScalarType::Double,
            },
        }
    }

    fn site(&mut self, e: &Expr) -> usize {
        self.code.sites.push(e.to_string());
        self.code.site_spans.push(e.span);
        self.code.sites.len() - 1
    }

    fn scoped(&mut self, f: impl FnOnce(&mut Self) -> Result<(), String>) -> Result<(), String> {
        self.scopes.push(HashMap::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), String> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), String> {
        match &s.kind {
            StmtKind::Empty => {}
            StmtKind::LocalArray { name, .. } => return Err(format!("per-thread array `{}` was not made scalars", name.name)),
            StmtKind::Decl { ty, vars } => {
                for d in vars {
                    let value = self.expr(&d.init)?;
                    let slot = self.declare(&d.name.name, *ty);
                    self.emit(Instr::Set { slot, op: AssignOp::Set, value });
                }
            }
            StmtKind::Assign { target, op, value } => {
                let value = self.expr(value)?;
                match &target.kind {
                    ExprKind::Var(n) => {
                        let slot = self.lookup(n)?;
                        self.emit(Instr::Set { slot, op: *op, value });
                    }
                    ExprKind::Index { array, indices } => {
                        let id = *self.arrays.get(&array.name).ok_or_else(|| format!("array `{}` is not defined here", array.name))?;
                        let indices = indices.iter().map(|i| self.expr(i)).collect::<Result<_, _>>()?;
                        let site = self.site(target);
                        self.emit(Instr::Store { array: id, indices, op: *op, value, site });
                    }
                    _ => return Err(format!("cannot assign to `{target}`")),
                }
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                let c = self.expr(cond)?;
                let skip = self.emit(Instr::JumpUnless(c, 0));
                self.scoped(|me| me.stmt(then_branch))?;
                match else_branch {
                    None => {
                        let end = self.here();
                        self.patch(skip, end);
                    }
                    Some(e) => {
                        let over = self.emit(Instr::Jump(0));
                        let start = self.here();
                        self.patch(skip, start);
                        self.scoped(|me| me.stmt(e))?;
                        let end = self.here();
                        self.patch(over, end);
                    }
                }
            }
            StmtKind::Block(items) => self.scoped(|me| me.stmts(items))?,
            StmtKind::For(l) | StmtKind::MetaFor(l) => self.scoped(|me| me.for_loop(l))?,
            StmtKind::MetaSchedule { body, .. } => {
                let index = self.schedules_seen;
                self.schedules_seen += 1;
                // The launched schedule runs as a kernel on a copy of memory, then serially,
                // and the two are compared: each launch is checked from the state the serial
                // program reaches, and a fault elsewhere is placed where it happens.
                let launched = match self.launch.clone() {
                    Some((k, kernel)) if k == index => Some(self.launch_site(index, &kernel)?),
                    _ => None,
                };
                let start = self.here();
                self.scoped(|me| me.stmt(body))?;
                let end = self.here();
                self.code.schedule_spans.push((start, end, index));
                if let Some(i) = launched {
                    self.emit(Instr::Compare(i));
                }
            }
            StmtKind::Assume(e) | StmtKind::Assert(e) => {
                let cond = self.expr(e)?;
                let what = if matches!(s.kind, StmtKind::Assume(_)) { "assume" } else { "assert" };
                self.emit(Instr::Fact { cond, text: format!("{what}({e})") });
            }
            StmtKind::Barrier => {
                self.barriers += 1;
                self.emit(Instr::Barrier(self.barriers));
            }
        }
        Ok(())
    }

    fn for_loop(&mut self, l: &ForLoop) -> Result<(), String> {
        let lo = self.expr(&l.lo)?;
        let slot = self.declare(&l.var.name, l.ty);
        self.emit(Instr::Set { slot, op: AssignOp::Set, value: lo });
        let top = self.here();
        let hi = self.expr(&l.hi)?;
        let rel = if l.inclusive { BinOp::Le } else { BinOp::Lt };
        let exit = self.emit(Instr::JumpUnless(E::Binary(rel, Box::new(E::Slot(slot)), Box::new(hi)), 0));
        self.scoped(|me| me.stmt(&l.body))?;
        self.emit(Instr::Set { slot, op: AssignOp::Add, value: E::Const(Value::Long(l.step)) });
        self.emit(Instr::Jump(top));
        let end = self.here();
        self.patch(exit, end);
        Ok(())
    }

    /// Emit the launch of `kernel` for `schedule`; its index in `launches`.
    fn launch_site(&mut self, schedule: usize, kernel: &Kernel) -> Result<usize, String> {
        let mut args = Vec::new();
        for p in &kernel.params {
            args.push(match p.kind {
                // A scalar defined after the schedule (`int late = N;` below it) is a parameter
                // of the kernel, as every derived scalar is, but C lets the schedule not read
                // it: an unset slot stands for it.
                KernelParamKind::Scalar(ty) => Some(self.lookup(&p.name).or_else(|_| Ok::<usize, String>(self.declare(&format!("{}unbound:{}", crate::names::INTERNAL, p.name), ty)))?),
                KernelParamKind::Array { .. } => None,
            });
        }
        let grid = kernel.grid.iter().map(|g| self.expr(g)).collect::<Result<_, _>>()?;
        self.code.launches.push(LaunchSite { schedule, args, grid });
        let i = self.code.launches.len() - 1;
        self.emit(Instr::Launch(i));
        Ok(i)
    }
}

/// The function's arrays, in parameter order: the global memory of every run.
pub fn global_arrays(function: &KernelFunction) -> Vec<ArrayRef> {
    function.arrays.iter().map(|a| ArrayRef { name: a.name.clone(), elem: a.elem, extents: a.extents.clone(), shared: false }).collect()
}

/// The host program: the function body with every schedule serial; schedule `launch.0` is
/// also launched as `launch.1` before its serial code, and compared after it. Parameter slots are the function's scalar
/// parameters in order.
pub fn host(function: &KernelFunction, launch: Option<(usize, &Kernel)>) -> Result<Code, String> {
    let mut c = Compiler::new();
    for a in global_arrays(function) {
        c.add_array(a);
    }
    for p in function.params.iter().filter(|p| function.array(&p.name).is_none()) {
        c.declare(&p.name, p.ty);
    }
    c.code.params = c.code.slot_types.len();
    c.launch = launch.map(|(k, kernel)| (k, kernel.clone()));
    c.stmts(&function.body)?;
    Ok(c.code)
}

/// A kernel: parameter slots are its scalar parameters in order; its arrays are the global
/// ones it names (bound by name to the function's) and then its shared arrays.
pub fn kernel(kernel: &Kernel) -> Result<Code, String> {
    let mut c = Compiler::new();
    for p in &kernel.params {
        match &p.kind {
            KernelParamKind::Scalar(ty) => {
                c.declare(&p.name, *ty);
            }
            KernelParamKind::Array { elem, extents, .. } => {
                c.add_array(ArrayRef { name: p.name.clone(), elem: *elem, extents: extents.clone(), shared: false })
            }
        }
    }
    c.code.params = c.code.slot_types.len();
    for s in &kernel.shared {
        c.add_array(ArrayRef { name: s.name.clone(), elem: s.elem, extents: s.extents.clone(), shared: true });
    }
    c.stmts(&kernel.body)?;
    // A fault's site names what the leaf's `.cu` file holds, not the tool's internal names.
    if c.code.sites.iter().any(|s| s.contains(crate::names::INTERNAL)) {
        let spelling = crate::emit::cuda::KernelSpelling::of(kernel);
        c.code.sites.iter_mut().for_each(|site| *site = spelling.text(site));
    }
    Ok(c.code)
}
