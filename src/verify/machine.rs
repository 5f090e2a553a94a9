//! The execution engine: runs a host program (the serial reference, or the same program with
//! one schedule launched as a kernel) on concrete values, with CUDA semantics for kernels.
//!
//! Contract:
//! - A launch runs every block of the grid, one after another; within a block the threads run
//!   one at a time up to their next `__syncthreads()`, and none passes it before all have
//!   arrived at the same barrier. Threads that stop at different barriers, or where some finish
//!   while others wait, are *barrier divergence*.
//! - Every array access is bounds-checked per subscript against the array's extents
//!   (*out of bounds*). Shared arrays are per block and start as NaN (or a poison integer), so
//!   a read of an element no thread wrote shows in the result.
//! - With `detect_races`, each element keeps its last write and the reads since: two accesses,
//!   one a write, *race* when they come from different blocks, or from different threads of
//!   one block between the same two barriers (the happens-before of a kernel), unless both are
//!   atomic adds (a reduction, [`AssignOp::AtomicAdd`]): those commute.
//! - A run has a step budget, so no input makes the verifier hang.
//! - In a program with a launch, the kernel runs on a copy of global memory, the schedule's
//!   serial code on global memory, and the two must then be identical bit for bit: every launch
//!   is checked from the state the serial program reaches there. The one exception is a
//!   floating element a kernel updated by atomic adds, which it adds in its own order (and in
//!   the element's type, as `atomicAdd` does): the two may differ by the rounding of any order of
//!   the same `k` additions, at most `2 γ(k+1) Σ|x|` (`γ(n) = n u / (1 - n u)`, `u` the unit
//!   roundoff, `Σ|x|` the magnitudes of the terms and of the element's value before the first).
//!   A term that is a partial sum (a block reduction's, in a register or a shared element)
//!   counts as the terms it adds: each floating slot and shared element carries the
//!   [`Magnitude`] of the sums stored in it, so the bound is the one for any order of the
//!   original terms. A run that stops says where:
//!   in the kernel, in the launched schedule's serial code, in another schedule, or in host code.

use super::code::{Code, Instr, LaunchSite, E};
use super::data_flow::{accesses_depend_on_data, slots_read};
use super::value::{binary, call, Value};
use crate::frontend::ast::{AssignOp, BinOp, Builtin, ScalarType};
use crate::kernel::Kernel;
use constraints::{Rational, Var};
use std::collections::BTreeMap;

/// Instructions one run may execute, host and kernels together.
pub const STEP_BUDGET: u64 = 400_000_000;

#[derive(Clone, Debug)]
pub struct Buffer {
    pub name: String,
    pub elem: ScalarType,
    pub dims: Vec<i64>,
    pub data: Vec<Value>,
    /// Per element, once a kernel made an atomic add to the buffer: the sum of the magnitudes
    /// of the terms (and of the value before the first) and how many there were. Empty until
    /// then.
    pub atomic: Vec<(f64, u32)>,
    /// Per element of a floating shared array, once a partial sum was stored there (a block
    /// reduction's tree): the magnitudes of the terms it adds and how many ([`Magnitude`]).
    pub sums: Vec<Magnitude>,
}

/// What a floating value adds up, for the rounding bound of a reduction: the sum of its terms'
/// magnitudes and how many there are; `(0, 0)` when it is not tracked (then the value itself
/// is one term).
pub type Magnitude = (f64, u32);

impl Buffer {
    pub fn new(name: &str, elem: ScalarType, dims: Vec<i64>, fill: Value) -> Buffer {
        let n = dims.iter().product::<i64>().max(0) as usize;
        Buffer { name: name.to_string(), elem, dims, data: vec![fill; n], atomic: Vec::new(), sums: Vec::new() }
    }

    /// Whether the kernel's `got` may stand for the serial code's `expected` at `flat`: the same
    /// bits, or, for a floating element updated by atomic adds, within the rounding of any order
    /// of its additions.
    fn agrees(&self, flat: usize, expected: Value, got: Value) -> bool {
        if expected.identical(got) {
            return true;
        }
        let Some(&(magnitude, terms)) = self.atomic.get(flat).filter(|(_, n)| *n > 0) else { return false };
        let unit = match self.elem {
            ScalarType::Float => f64::from(f32::EPSILON) / 2.0,
            ScalarType::Double => f64::EPSILON / 2.0,
            _ => return false,
        };
        let n = f64::from(terms) + 1.0;
        let gamma = n * unit / (1.0 - n * unit);
        let (x, y) = (expected.as_f64(), got.as_f64());
        (x - y).abs() <= 2.0 * gamma * magnitude
    }

    /// The subscripts of a flat position.
    pub fn unflatten(&self, mut flat: usize) -> Vec<i64> {
        let mut out = vec![0; self.dims.len()];
        for (d, e) in self.dims.iter().enumerate().rev() {
            let e = (*e).max(1) as usize;
            out[d] = (flat % e) as i64;
            flat /= e;
        }
        out
    }
}

/// Which thread: block and thread indices, x first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Who {
    pub block: [i64; 3],
    pub thread: [i64; 3],
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [bx, by, bz] = self.block;
        let [tx, ty, tz] = self.thread;
        write!(f, "thread ({tx},{ty},{tz}) of block ({bx},{by},{bz})")
    }
}

/// What the engine's hot path returns: a fault is boxed so that a result is small. Returned
/// by value through every level of an expression's evaluation, the unboxed `Fault` (about 200
/// bytes) made jacobi-2d's `gen`, whose critical path is this engine, 20% slower.
type Faulted<T> = Result<T, Box<Fault>>;

impl From<Box<Fault>> for Fault {
    fn from(fault: Box<Fault>) -> Fault {
        *fault
    }
}

/// What stopped a run.
#[derive(Clone, Debug)]
pub enum Fault {
    OutOfBounds { array: String, site: String, index: Vec<i64>, extents: Vec<i64>, who: Option<Who> },
    /// `spans`: the two accesses' places in the source (first, second), empty where unknown.
    Race { array: String, element: Vec<i64>, first: (Who, String), second: (Who, String), spans: [crate::frontend::source::Span; 2] },
    BarrierDivergence { block: [i64; 3], detail: String },
    /// An `assume`/`assert` is false: the point is outside the program's facts.
    OutsideFacts(String),
    /// After a launch, the kernel's memory differs from the serial code's.
    Mismatch(Difference),
    /// Integer division or remainder by zero: undefined in CUDA, a defect of the code run.
    Arithmetic(String),
    /// The engine could not go on (its step budget, a value it cannot compute): no defect
    /// seen, none ruled out.
    Error(String),
}

/// The first element where a launch's result differs from the serial code's.
#[derive(Clone, Debug)]
pub struct Difference {
    pub array: String,
    pub index: Vec<i64>,
    pub expected: Value,
    pub got: Value,
    /// Which launch of the schedule in the run (1 for the first).
    pub launch: u64,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mismatch: {}{:?} is {:?}, the serial program computes {:?}", self.array, self.index, self.got, self.expected)?;
        if self.launch > 1 {
            write!(f, " (after launch {} of the schedule)", self.launch)?;
        }
        Ok(())
    }
}

/// Where a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    /// In the launched kernel, or in its comparison with the serial code.
    Kernel,
    /// In the serial code of the schedule with this index in the function.
    Schedule(usize),
    /// In host code outside every schedule.
    Host,
}

/// A run that stopped before its end: the fault, where it happened, and what had run.
#[derive(Clone, Debug)]
pub struct Stopped {
    pub fault: Fault,
    pub at: Where,
    pub stats: RunStats,
}

impl Fault {
    /// The defect's name as `verify` reports it, or `None` for a point outside the facts or an
    /// engine error.
    pub fn defect(&self) -> Option<&'static str> {
        match self {
            Fault::OutOfBounds { .. } => Some("out of bounds"),
            Fault::Race { .. } => Some("race"),
            Fault::BarrierDivergence { .. } => Some("barrier divergence"),
            Fault::Mismatch(_) => Some("mismatch"),
            // Undefined in CUDA, and in the serial program at the same inputs: not a difference
            // between the two, so not called one.
            Fault::Arithmetic(_) => Some("division by zero"),
            _ => None,
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::OutOfBounds { array, site, index, extents, who } => {
                write!(f, "out of bounds: `{site}` accesses {array}{index:?} outside extents {extents:?}")?;
                if let Some(w) = who {
                    write!(f, " ({w})")?;
                }
                Ok(())
            }
            Fault::Race { array, element, first, second, .. } => write!(
                f,
                "race on {array}{element:?}: `{}` by {} and `{}` by {}, with no barrier between them",
                first.1, first.0, second.1, second.0
            ),
            Fault::BarrierDivergence { block, detail } => write!(f, "barrier divergence in block ({},{},{}): {detail}", block[0], block[1], block[2]),
            Fault::OutsideFacts(t) => write!(f, "`{t}` does not hold"),
            Fault::Mismatch(d) => d.fmt(f),
            Fault::Error(m) | Fault::Arithmetic(m) => f.write_str(m),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Acc {
    block: u32,
    thread: u32,
    epoch: u32,
    site: u32,
    /// An atomic add: it conflicts with no other atomic add.
    atomic: bool,
}

impl Acc {
    fn conflicts(&self, other: &Acc) -> bool {
        !(self.atomic && other.atomic) && (self.block != other.block || (self.thread != other.thread && self.epoch == other.epoch))
    }
}

#[derive(Clone, Debug, Default)]
struct Shadow {
    write: Option<Acc>,
    reads: Vec<Acc>,
}

/// Where a program's array lives during a run.
#[derive(Clone, Copy, Debug)]
enum Place {
    Global(usize),
    Shared(usize),
}

/// Everything an instruction may touch besides the thread's own slots.
struct Frame<'a> {
    code: &'a Code,
    places: &'a [Place],
    globals: &'a mut [Buffer],
    shared: &'a mut [Buffer],
    /// Race shadows of the globals and of this block's shared arrays, when detecting.
    gshadow: Option<&'a mut [Vec<Shadow>]>,
    sshadow: Option<&'a mut [Vec<Shadow>]>,
    /// Inside a kernel: thread, block, block size and grid size (x, y, z).
    kernel: bool,
    tid: [i64; 3],
    bid: [i64; 3],
    bdim: [i64; 3],
    gdim: [i64; 3],
    epoch: u32,
    steps: &'a mut u64,
    /// Inside a kernel: the thread's [`Magnitude`] per slot (partial sums of reductions).
    mags: Option<&'a mut [Magnitude]>,
}

fn lin(v: [i64; 3], d: [i64; 3]) -> u32 {
    (v[0] + d[0] * (v[1] + d[1] * v[2])) as u32
}

fn unlin(x: u32, d: [i64; 3]) -> [i64; 3] {
    let x = x as i64;
    [x % d[0], (x / d[0]) % d[1], x / (d[0] * d[1])]
}

impl Frame<'_> {
    fn who(&self) -> Option<Who> {
        self.kernel.then_some(Who { block: self.bid, thread: self.tid })
    }

    fn describe(&self, a: &Acc) -> (Who, String) {
        (Who { block: unlin(a.block, self.gdim), thread: unlin(a.thread, self.bdim) }, self.code.sites[a.site as usize].clone())
    }

    fn buffer(&mut self, array: usize) -> &mut Buffer {
        match self.places[array] {
            Place::Global(i) => &mut self.globals[i],
            Place::Shared(i) => &mut self.shared[i],
        }
    }

    /// The flat position of `array[index]`, bounds-checked per subscript.
    fn position(&mut self, array: usize, index: &[i64], site: usize) -> Faulted<usize> {
        let who = self.who();
        let site_text = &self.code.sites[site];
        let buf = match self.places[array] {
            Place::Global(i) => &self.globals[i],
            Place::Shared(i) => &self.shared[i],
        };
        let mut flat: i64 = 0;
        for (i, e) in index.iter().zip(&buf.dims) {
            if *i < 0 || i >= e {
                return Err(Box::new(Fault::OutOfBounds { array: buf.name.clone(), site: site_text.clone(), index: index.to_vec(), extents: buf.dims.clone(), who }));
            }
            flat = flat * e + i;
        }
        Ok(flat as usize)
    }

    /// Record an access for race detection; a conflict with an earlier one is a race.
    fn track(&mut self, array: usize, flat: usize, site: usize, write: bool) -> Faulted<()> {
        self.track_as(array, flat, site, write, false)
    }

    /// Record an atomic add: a write that conflicts with plain accesses only.
    fn track_atomic(&mut self, array: usize, flat: usize, site: usize) -> Faulted<()> {
        self.track_as(array, flat, site, true, true)
    }

    fn track_as(&mut self, array: usize, flat: usize, site: usize, write: bool, atomic: bool) -> Faulted<()> {
        let me = Acc { block: lin(self.bid, self.gdim), thread: lin(self.tid, self.bdim), epoch: self.epoch, site: site as u32, atomic };
        let shadows = match self.places[array] {
            Place::Global(i) => self.gshadow.as_deref_mut().map(|s| &mut s[i]),
            Place::Shared(i) => self.sshadow.as_deref_mut().map(|s| &mut s[i]),
        };
        let Some(shadows) = shadows else { return Ok(()) };
        let s = &mut shadows[flat];
        let mut clash = s.write.filter(|w| w.conflicts(&me));
        if write && clash.is_none() {
            clash = s.reads.iter().copied().find(|r| r.conflicts(&me));
        }
        if let Some(other) = clash {
            let (first, second) = (self.describe(&other), self.describe(&me));
            let spans = [other.site, me.site].map(|site| self.code.site_spans.get(site as usize).copied().unwrap_or_default());
            let buf = self.buffer(array);
            return Err(Box::new(Fault::Race { array: buf.name.clone(), element: buf.unflatten(flat), first, second, spans }));
        }
        if write {
            // Earlier reads are ordered before this write (else a race was reported), so a
            // later access conflicts with one of them only if it conflicts with this write.
            s.write = Some(me);
            s.reads.clear();
        } else if !s.reads.last().is_some_and(|r| r.block == me.block && r.thread == me.thread && r.epoch == me.epoch) {
            s.reads.push(me);
        }
        Ok(())
    }

    fn eval(&mut self, slots: &[Value], e: &E) -> Faulted<Value> {
        Ok(match e {
            E::Const(v) => *v,
            E::Slot(s) => slots[*s],
            E::Builtin(b) => Value::Int(match b {
                Builtin::ThreadIdx(d) => self.tid[*d as usize],
                Builtin::BlockIdx(d) => self.bid[*d as usize],
                Builtin::BlockDim(d) => self.bdim[*d as usize],
                Builtin::GridDim(d) => self.gdim[*d as usize],
            } as i32),
            E::Load { array, indices, site } => {
                let flat = self.flat(slots, *array, indices, *site)?;
                self.track(*array, flat, *site, false)?;
                self.buffer(*array).data[flat]
            }
            E::Neg(a) => self.eval(slots, a)?.neg(),
            E::Not(a) => Value::from_bool(!self.eval(slots, a)?.truthy()),
            E::And(a, b) => Value::from_bool(self.eval(slots, a)?.truthy() && self.eval(slots, b)?.truthy()),
            E::Or(a, b) => Value::from_bool(self.eval(slots, a)?.truthy() || self.eval(slots, b)?.truthy()),
            E::Binary(op, a, b) => {
                let (x, y) = (self.eval(slots, a)?, self.eval(slots, b)?);
                arith(binary(*op, x, y))?
            }
            E::Cond(ty, c, a, b) => {
                let arm = if self.eval(slots, c)?.truthy() { a } else { b };
                self.eval(slots, arm)?.to(*ty)
            }
            E::Cast(t, a) => self.eval(slots, a)?.to(*t),
            E::Call(name, args) => {
                let vals: Vec<Value> = args.iter().map(|a| self.eval(slots, a)).collect::<Result<_, _>>()?;
                call(name, &vals).map_err(Fault::Error)?
            }
        })
    }

    /// The [`Magnitude`] of `value` (evaluated as `v`): a slot's or a shared element's own, through
    /// floating casts; else `v` as one term.
    fn magnitude(&mut self, slots: &[Value], value: &E, v: Value) -> Faulted<Magnitude> {
        let tracked = match value {
            E::Slot(s) => self.mags.as_deref().map_or((0.0, 0), |m| m[*s]),
            E::Cast(t, a) if !t.is_integer() => return self.magnitude(slots, a, v),
            E::Load { array, indices, site } if matches!(self.places[*array], Place::Shared(_)) && !self.buffer(*array).sums.is_empty() => {
                let flat = self.flat(slots, *array, indices, *site)?;
                self.buffer(*array).sums[flat]
            }
            _ => (0.0, 0),
        };
        Ok(if tracked.1 > 0 { tracked } else { (v.as_f64().abs(), 1) })
    }

    /// A floating place's [`Magnitude`] after `place op= value`: a sum adds both sides' terms,
    /// a plain assignment takes the value's when it is tracked; anything else is untracked.
    fn follow(&mut self, slots: &[Value], op: AssignOp, (old, old_mag): (Value, Magnitude), value: &E, v: Value) -> Faulted<Magnitude> {
        Ok(match op {
            AssignOp::Add | AssignOp::Sub => {
                let before = if old_mag.1 > 0 { old_mag } else { (old.as_f64().abs(), 1) };
                let added = self.magnitude(slots, value, v)?;
                (before.0 + added.0, before.1 + added.1)
            }
            AssignOp::Set => {
                let m = self.magnitude(slots, value, v)?;
                // A value that is one term is untracked: it stands for itself.
                if m.1 > 1 { m } else { (0.0, 0) }
            }
            _ => (0.0, 0),
        })
    }

    /// The flat position of `array[indices]`: every subscript evaluated, then bounds-checked.
    /// Up to eight subscripts are held on the stack: an allocation per access made jacobi-2d's
    /// `gen`, whose critical path is this engine's check of the schedules as written, 5% slower.
    fn flat(&mut self, slots: &[Value], array: usize, indices: &[E], site: usize) -> Faulted<usize> {
        let mut small = [0i64; 8];
        if indices.len() <= small.len() {
            for (k, i) in indices.iter().enumerate() {
                small[k] = self.eval(slots, i)?.as_i64();
            }
            self.position(array, &small[..indices.len()], site)
        } else {
            let index = indices.iter().map(|i| self.eval(slots, i).map(|v| v.as_i64())).collect::<Result<Vec<_>, _>>()?;
            self.position(array, &index, site)
        }
    }

    /// Run from `pc` until a barrier, a launch (host) or the end.
    fn run(&mut self, slots: &mut [Value], pc: &mut usize) -> Faulted<Stop> {
        let instrs = &self.code.instrs;
        while *pc < instrs.len() {
            *self.steps += 1;
            if *self.steps > STEP_BUDGET {
                return Err(Box::new(Fault::Error("the run exceeded its step budget".into())));
            }
            if *self.steps % (1 << 20) == 0 && constraints::budget::expired() {
                return Err(Box::new(Fault::Error(constraints::budget::REASON.into())));
            }
            match &instrs[*pc] {
                Instr::Set { slot, op, value } => {
                    let v = self.eval(slots, value)?;
                    if self.mags.is_some() && !self.code.slot_types[*slot].is_integer() {
                        let old = self.mags.as_deref().map_or((0.0, 0), |m| m[*slot]);
                        let mag = self.follow(slots, *op, (slots[*slot], old), value, v)?;
                        if let Some(m) = self.mags.as_deref_mut() {
                            m[*slot] = mag;
                        }
                    }
                    slots[*slot] = combine(*op, slots[*slot], v)?.to(self.code.slot_types[*slot]);
                }
                Instr::Store { array, indices, op, value, site } => {
                    let v = self.eval(slots, value)?;
                    let flat = self.flat(slots, *array, indices, *site)?;
                    if *op == AssignOp::AtomicAdd && self.kernel {
                        self.track_atomic(*array, flat, *site)?;
                        let added = self.magnitude(slots, value, v)?;
                        let buf = self.buffer(*array);
                        let old = buf.data[flat];
                        let term = v.to(buf.elem);
                        if buf.atomic.is_empty() {
                            buf.atomic = vec![(0.0, 0); buf.data.len()];
                        }
                        let (magnitude, terms) = &mut buf.atomic[flat];
                        if *terms == 0 {
                            *magnitude = old.as_f64().abs();
                        }
                        // A block's partial sum adds the magnitudes and count of its terms.
                        *magnitude += added.0;
                        *terms += added.1;
                        buf.data[flat] = combine(AssignOp::Add, old, term)?.to(buf.elem);
                        *pc += 1;
                        continue;
                    }
                    if *op != AssignOp::Set {
                        self.track(*array, flat, *site, false)?;
                    }
                    self.track(*array, flat, *site, true)?;
                    if matches!(self.places[*array], Place::Shared(_)) && !self.buffer(*array).elem.is_integer() {
                        let buf = self.buffer(*array);
                        let old = (buf.data[flat], buf.sums.get(flat).copied().unwrap_or((0.0, 0)));
                        let mag = self.follow(slots, *op, old, value, v)?;
                        let buf = self.buffer(*array);
                        if buf.sums.is_empty() && mag.1 > 0 {
                            buf.sums = vec![(0.0, 0); buf.data.len()];
                        }
                        if let Some(m) = buf.sums.get_mut(flat) {
                            *m = mag;
                        }
                    }
                    let buf = self.buffer(*array);
                    buf.data[flat] = combine(*op, buf.data[flat], v)?.to(buf.elem);
                }
                Instr::JumpUnless(c, target) => {
                    if !self.eval(slots, c)?.truthy() {
                        *pc = *target;
                        continue;
                    }
                }
                Instr::Jump(target) => {
                    *pc = *target;
                    continue;
                }
                Instr::Barrier(id) => return Ok(Stop::Barrier(*id)),
                Instr::Launch(i) => return Ok(Stop::Launch(*i)),
                Instr::Compare(i) => return Ok(Stop::Compare(*i)),
                Instr::Fact { cond, text } => {
                    if !self.eval(slots, cond)?.truthy() {
                        return Err(Box::new(Fault::OutsideFacts(text.clone())));
                    }
                }
            }
            *pc += 1;
        }
        Ok(Stop::Done)
    }
}

enum Stop {
    Barrier(usize),
    Launch(usize),
    Compare(usize),
    Done,
}

#[inline]
fn arith(r: Result<Value, &'static str>) -> Faulted<Value> {
    r.map_err(|m| Box::new(Fault::Arithmetic(m.to_string())))
}

/// `old op= v` (for `=`, just `v`).
fn combine(op: AssignOp, old: Value, v: Value) -> Faulted<Value> {
    let bin = match op {
        AssignOp::Set => return Ok(v),
        AssignOp::Add | AssignOp::AtomicAdd => BinOp::Add,
        AssignOp::Sub => BinOp::Sub,
        AssignOp::Mul => BinOp::Mul,
        AssignOp::Div => BinOp::Div,
    };
    arith(binary(bin, old, v))
}

/// A kernel ready to launch: its code, and its form for the block extents and shared sizes.
pub struct Launchable<'k> {
    pub kernel: &'k Kernel,
    pub code: Code,
}

/// Options of a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    pub detect_races: bool,
    /// Instructions the run may execute, at most [`STEP_BUDGET`] (the default): `gen`'s check
    /// of the schedule as written gives up early on a program that loops long.
    pub step_budget: Option<u64>,
    /// Run each instance of the launched schedule as the kernel only: its memory is taken as
    /// the program's, the schedule's serial code is skipped and nothing is compared. For a
    /// check that looks for the kernel's own faults (races, accesses out of bounds), not for
    /// a difference from the serial program: `gen`'s check of the schedules as written, which
    /// thus does about half the work.
    pub kernel_only: bool,
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub launches: u64,
    /// Launches whose result was compared with the serial code's (all of them identical); in a
    /// run with [`RunOptions::kernel_only`], the launches whose memory was taken as the
    /// program's (nothing is compared there).
    pub compared: u64,
    pub blocks: u64,
    pub threads: u64,
}

/// Run a host program on `globals` (the function's arrays, in order) with the scalar
/// parameters `args`; `kernel` is the code its `Launch` instructions start. On a launch the
/// kernel runs on a copy of `globals`, compared at the next `Compare` with what the serial
/// code left in `globals`; so `globals` always ends as the serial program leaves it.
pub fn run(host: &Code, args: &[Value], globals: &mut [Buffer], kernel: Option<&Launchable>, options: RunOptions) -> Result<RunStats, Stopped> {
    let mut slots: Vec<Value> = host.slot_types.iter().map(|t| Value::zero(*t)).collect();
    for (i, a) in args.iter().enumerate().take(host.params) {
        slots[i] = a.to(host.slot_types[i]);
    }
    let places: Vec<Place> = (0..host.arrays.len()).map(Place::Global).collect();
    // The step counter starts where only the run's own budget is left before STEP_BUDGET.
    let mut steps = STEP_BUDGET - options.step_budget.map_or(STEP_BUDGET, |b| b.min(STEP_BUDGET));
    let mut stats = RunStats::default();
    let mut launched: Option<(usize, Vec<Buffer>)> = None;
    let mut repeats = if options.kernel_only { kernel.and_then(|k| RepeatedLaunches::of(host, k)) } else { None };
    let mut pc = 0;
    let stopped = |fault: Fault, at: Where, stats: &RunStats| Stopped { fault, at, stats: stats.clone() };
    loop {
        let stop = {
            let mut f = Frame { code: host, places: &places, globals, shared: &mut [], gshadow: None, sshadow: None, kernel: false, tid: [0; 3], bid: [0; 3], bdim: [1; 3], gdim: [1; 3], epoch: 0, steps: &mut steps, mags: None };
            f.run(&mut slots, &mut pc).map_err(|fault| stopped(*fault, host.place_of(pc), &stats))?
        };
        match stop {
            Stop::Done => return Ok(stats),
            Stop::Barrier(_) => return Err(stopped(Fault::Error("a barrier outside a kernel".into()), host.place_of(pc), &stats)),
            Stop::Launch(i) => {
                let k = kernel.ok_or_else(|| stopped(Fault::Error("a launch without a kernel".into()), Where::Kernel, &stats))?;
                if options.kernel_only {
                    let repeated = match repeats.as_mut() {
                        Some(r) => {
                            let grid = grid_of(host, &host.launches[i], &slots, globals, &mut steps).map_err(|fault| stopped(fault, Where::Kernel, &stats))?;
                            r.seen_before(i, &host.launches[i], k.kernel, &slots, grid)
                        }
                        None => false,
                    };
                    if repeated {
                        stats.launches += 1;
                    } else {
                        launch(host, &host.launches[i], &slots, globals, k, options, &mut steps, &mut stats).map_err(|fault| stopped(fault, Where::Kernel, &stats))?;
                    }
                    // On past the schedule's serial code, to its comparison (which follows it).
                    pc = host.instrs[pc..].iter().position(|x| matches!(x, Instr::Compare(c) if *c == i)).map(|d| pc + d + 1).ok_or_else(|| stopped(Fault::Error("a launch without its comparison".into()), Where::Kernel, &stats))?;
                    stats.compared += 1;
                    continue;
                }
                let mut copy = globals.to_vec();
                launch(host, &host.launches[i], &slots, &mut copy, k, options, &mut steps, &mut stats).map_err(|fault| stopped(fault, Where::Kernel, &stats))?;
                launched = Some((i, copy));
                pc += 1;
            }
            Stop::Compare(i) => {
                let got = match launched.take() {
                    Some((l, got)) if l == i => got,
                    _ => return Err(stopped(Fault::Error("a comparison without its launch".into()), Where::Kernel, &stats)),
                };
                stats.compared += 1;
                for (e, g) in globals.iter().zip(&got) {
                    if let Some(i) = e.data.iter().zip(&g.data).position(|(x, y)| !x.identical(*y)).and_then(|from| (from..e.data.len()).find(|&i| !g.agrees(i, e.data[i], g.data[i]))) {
                        let d = Difference { array: e.name.clone(), index: e.unflatten(i), expected: e.data[i], got: g.data[i], launch: stats.compared };
                        return Err(stopped(Fault::Mismatch(d), Where::Kernel, &stats));
                    }
                }
                pc += 1;
            }
        }
    }
}

impl Code {
    /// Where the instruction at `pc` of a host program belongs.
    fn place_of(&self, pc: usize) -> Where {
        self.schedule_spans.iter().find(|(start, end, _)| (*start..*end).contains(&pc)).map_or(Where::Host, |(_, _, k)| Where::Schedule(*k))
    }
}

fn eval_poly(p: &constraints::Poly, point: &BTreeMap<Var, Rational>, what: &str) -> Result<i64, Fault> {
    let v = p.eval(point).map_err(|v| Fault::Error(format!("{what} `{p}` needs the value of `{v}`")))?;
    if !v.is_integer() {
        return Err(Fault::Error(format!("{what} `{p}` is not an integer here")));
    }
    i64::try_from(v.to_integer()).map_err(|_| Fault::Error(format!("{what} `{p}` is too large")))
}

/// The launches a kernel-only run has made, where the host program and the kernel decide
/// nothing from array data: a launch with the scalar arguments and grid of an earlier one
/// makes the same accesses by the same threads, so it has the same races and accesses out of
/// bounds, and the host goes on the same way whatever it wrote. Such a launch is not run
/// again (a time loop's sweeps: jacobi-2d's check of its schedules as written, 11-18 ms of a
/// 36 ms `gen`; bench/RESULTS.md).
struct RepeatedLaunches {
    seen: std::collections::HashSet<LaunchKey>,
    /// Per scalar argument, in order (the j-th fills the kernel's slot j): whether the kernel
    /// reads it; a time loop's counter is passed to every kernel.
    kernel_reads: Vec<bool>,
    /// The parameters the kernel's block and shared-array extents are polynomials in.
    shape_vars: std::collections::BTreeSet<Var>,
}

/// What makes two launches alike: the launch site, the scalar arguments the kernel reads or
/// sizes its blocks and shared arrays by (as bits), and the grid.
#[derive(PartialEq, Eq, Hash)]
struct LaunchKey {
    site: usize,
    args: Vec<(u8, u64)>,
    grid: [i64; 3],
}

impl RepeatedLaunches {
    /// `None` where the host program or the kernel may decide an access from data.
    fn of(host: &Code, k: &Launchable) -> Option<RepeatedLaunches> {
        if accesses_depend_on_data(&k.code) || accesses_depend_on_data(host) {
            return None;
        }
        let extents = k.kernel.block.iter().chain(k.code.arrays.iter().filter(|a| a.shared).flat_map(|a| a.extents.iter()));
        Some(RepeatedLaunches { seen: Default::default(), kernel_reads: slots_read(&k.code), shape_vars: extents.flat_map(|p| p.vars()).collect() })
    }

    /// Whether a launch of `kernel` at site `i` with the host's `slots` and `grid` repeats an
    /// earlier one (it is then recorded as seen).
    fn seen_before(&mut self, i: usize, site: &LaunchSite, kernel: &Kernel, slots: &[Value], grid: [i64; 3]) -> bool {
        let scalars = kernel.params.iter().zip(&site.args).filter_map(|(p, from)| from.map(|slot| (p, slot)));
        let keyed = |j: usize, name: &str| self.kernel_reads.get(j).copied().unwrap_or(true) || self.shape_vars.contains(&Var::new(name));
        let args = scalars.enumerate().filter(|(j, (p, _))| keyed(*j, &p.name)).map(|(_, (_, slot))| slots[slot].bits()).collect();
        !self.seen.insert(LaunchKey { site: i, args, grid })
    }
}

/// The blocks along x, y, z of a launch at `site`, from the host's slots.
fn grid_of(host: &Code, site: &LaunchSite, host_slots: &[Value], globals: &mut [Buffer], steps: &mut u64) -> Result<[i64; 3], Fault> {
    let mut gdim = [1i64; 3];
    for (d, g) in site.grid.iter().enumerate() {
        let mut f = Frame { code: host, places: &[], globals, shared: &mut [], gshadow: None, sshadow: None, kernel: false, tid: [0; 3], bid: [0; 3], bdim: [1; 3], gdim: [1; 3], epoch: 0, steps: &mut *steps, mags: None };
        gdim[d] = f.eval(host_slots, g)?.as_i64();
    }
    Ok(gdim)
}

#[allow(clippy::too_many_arguments)]
fn launch(host: &Code, site: &LaunchSite, host_slots: &[Value], globals: &mut [Buffer], k: &Launchable, options: RunOptions, steps: &mut u64, stats: &mut RunStats) -> Result<(), Fault> {
    let code = &k.code;
    // Scalar arguments, in the kernel's parameter order, and the integer ones as a point.
    let mut args = Vec::new();
    let mut point = BTreeMap::new();
    for (p, from) in k.kernel.params.iter().zip(&site.args) {
        if let Some(slot) = from {
            let v = host_slots[*slot];
            if v.ty().is_integer() {
                point.insert(Var::new(&p.name), Rational::from_integer(v.as_i64().into()));
            }
            args.push(v);
        }
    }
    let gdim = grid_of(host, site, host_slots, globals, steps)?;
    let mut bdim = [1i64; 3];
    for (d, b) in k.kernel.block.iter().enumerate() {
        bdim[d] = eval_poly(b, &point, "the block extent")?;
    }
    stats.launches += 1;
    if gdim.iter().chain(&bdim).any(|g| *g <= 0) {
        return Ok(()); // an empty grid or block: no work, as the serial loops do none (the launch returns success)
    }
    let threads = (bdim[0] * bdim[1] * bdim[2]) as usize;
    // The kernel's arrays: globals by name, then the shared ones (per block).
    let mut places = Vec::new();
    let mut shared_shapes = Vec::new();
    for a in &code.arrays {
        if a.shared {
            let dims = a.extents.iter().map(|e| eval_poly(e, &point, "the shared extent")).collect::<Result<Vec<_>, _>>()?;
            places.push(Place::Shared(shared_shapes.len()));
            shared_shapes.push((a.name.clone(), a.elem, dims));
        } else {
            let i = host.arrays.iter().position(|h| h.name == a.name).ok_or_else(|| Fault::Error(format!("the kernel's array `{}` is not the program's", a.name)))?;
            places.push(Place::Global(i));
        }
    }
    let mut gshadow: Option<Vec<Vec<Shadow>>> = options.detect_races.then(|| globals.iter().map(|b| vec![Shadow::default(); b.data.len()]).collect());
    for bz in 0..gdim[2] {
        for by in 0..gdim[1] {
            for bx in 0..gdim[0] {
                let bid = [bx, by, bz];
                let mut shared: Vec<Buffer> = shared_shapes.iter().map(|(n, e, d)| Buffer::new(n, *e, d.clone(), poison(*e))).collect();
                let mut sshadow: Option<Vec<Vec<Shadow>>> = options.detect_races.then(|| shared.iter().map(|b| vec![Shadow::default(); b.data.len()]).collect());
                let mut state: Vec<(usize, Vec<Value>, Option<Stop>, Vec<Magnitude>)> = (0..threads)
                    .map(|_| {
                        let mut s: Vec<Value> = code.slot_types.iter().map(|t| Value::zero(*t)).collect();
                        s[..args.len()].copy_from_slice(&args);
                        (0usize, s, None, vec![(0.0, 0); code.slot_types.len()])
                    })
                    .collect();
                let mut epoch = 0u32;
                loop {
                    for (t, (pc, slots, stop, mags)) in state.iter_mut().enumerate() {
                        if matches!(stop, Some(Stop::Done)) {
                            continue;
                        }
                        let tid = unlin(t as u32, bdim);
                        let mut f = Frame { code, places: &places, globals, shared: &mut shared, gshadow: gshadow.as_deref_mut(), sshadow: sshadow.as_deref_mut(), kernel: true, tid, bid, bdim, gdim, epoch, steps: &mut *steps, mags: Some(mags) };
                        *stop = Some(f.run(slots, pc)?);
                    }
                    let first = state[0].2.as_ref().map(stop_id);
                    if let Some((t, s)) = state.iter().enumerate().find(|(_, s)| s.2.as_ref().map(stop_id) != first) {
                        let detail = format!(
                            "thread ({}) {} while thread (0,0,0) {}",
                            unlin(t as u32, bdim).map(|x| x.to_string()).join(","),
                            describe_stop(s.2.as_ref()),
                            describe_stop(state[0].2.as_ref())
                        );
                        return Err(Fault::BarrierDivergence { block: bid, detail });
                    }
                    if matches!(state[0].2, Some(Stop::Done)) {
                        break;
                    }
                    for s in state.iter_mut() {
                        s.0 += 1; // past the barrier
                        s.2 = None;
                    }
                    epoch += 1;
                }
                stats.blocks += 1;
                stats.threads += threads as u64;
            }
        }
    }
    Ok(())
}

fn stop_id(s: &Stop) -> Option<usize> {
    match s {
        Stop::Barrier(b) => Some(*b),
        _ => None,
    }
}

fn describe_stop(s: Option<&Stop>) -> String {
    match s {
        Some(Stop::Barrier(b)) => format!("waits at barrier {b}"),
        _ => "has finished".into(),
    }
}

/// What a shared element holds before any thread writes it.
fn poison(elem: ScalarType) -> Value {
    match elem {
        ScalarType::Float => Value::Float(f32::NAN),
        ScalarType::Double => Value::Double(f64::NAN),
        ScalarType::Char => Value::Int(-0x5b),
        ScalarType::Int => Value::Int(-0x5a5a5a5b),
        ScalarType::Long => Value::Long(-0x5a5a5a5a5a5a5a5b),
    }
}
