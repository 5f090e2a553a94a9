//! Differential execution: one leaf's kernel against the serial program, at one point.
//!
//! Contract: the inputs are the function's arrays filled from a seeded generator (floats in
//! [-1, 1), integers in [-100, 100]) and its floating scalars likewise. The serial program
//! (every `meta_for` a sequential loop) runs on them; at each instance of the leaf's schedule
//! the kernel is launched (race detection on) from the state the serial program has reached,
//! and every array is compared element by element, bit for bit, with what the schedule's
//! serial code leaves: no strategy of metafork reassociates arithmetic, so no tolerance is
//! needed, or granted. A fault of the source program outside the schedule is not the leaf's:
//! the launches compared before it count, and a point where the schedule never ran is not a
//! test of the leaf (the fault is named, with its schedule).

use super::code::{self, Code};
use super::machine::{self, Buffer, Fault, Launchable, RunOptions, RunStats, Stopped, Where};
use super::value::Value;
use crate::frontend::ast::ScalarType;
use crate::frontend::model::{KernelFunction, Role};
use crate::kernel::Kernel;
use std::collections::BTreeMap;

/// A seeded generator (SplitMix64): a few lines, fully determined by the seed on every
/// platform, which is all the verifier needs; no dependency is worth that.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }

    fn value(&mut self, ty: ScalarType) -> Value {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        match ty {
            ScalarType::Float => Value::Float(unit as f32),
            ScalarType::Double => Value::Double(unit),
            ScalarType::Char | ScalarType::Int | ScalarType::Long => Value::Long(self.range(-100, 100)).to(ty),
        }
    }
}

pub use super::machine::Difference;

/// The outcome of one point.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Same results; the kernel ran this many threads.
    Passed(RunStats),
    /// The point is outside the program's facts (an `assume` or `assert` is false), the
    /// schedule does not run there, or the serial program stops before it does: not a test of
    /// the kernel.
    Unusable(String),
    /// The kernel run stopped on a defect (race, barrier divergence, out of bounds).
    Fault(Fault),
    Mismatch(Difference),
}

/// The host program of one schedule, with the leaf launched, and the kernel.
pub struct Programs<'k> {
    pub launching: Code,
    pub kernel: Launchable<'k>,
}

impl<'k> Programs<'k> {
    pub fn new(function: &KernelFunction, schedule: usize, kernel: &'k Kernel) -> Result<Programs<'k>, String> {
        Ok(Programs {
            launching: code::host(function, Some((schedule, kernel)))?,
            kernel: Launchable { kernel, code: code::kernel(kernel)? },
        })
    }
}

/// The arrays' extents and the scalar arguments at `point` (integer parameters by name).
fn inputs(function: &KernelFunction, point: &BTreeMap<String, i64>, rng: &mut SplitMix) -> Result<(Vec<Value>, Vec<Buffer>), String> {
    let mut args = Vec::new();
    let exact = constraints::exact_point(point);
    for p in &function.params {
        match p.role {
            Role::Array => {}
            Role::Value => args.push(rng.value(p.ty)),
            _ => args.push(Value::Long(*point.get(&p.name).ok_or_else(|| format!("no value for `{}`", p.name))?).to(p.ty)),
        }
    }
    let mut buffers = Vec::new();
    let mut total: i64 = 0;
    for a in &function.arrays {
        let mut dims = Vec::new();
        for e in &a.extents {
            let v = e.eval(&exact).map_err(|v| format!("the extent of `{}` needs `{v}`", a.name))?;
            let v = i64::try_from(v.to_integer()).map_err(|_| format!("the extent of `{}` is too large", a.name))?;
            dims.push(v.max(0));
        }
        total = dims.iter().try_fold(1i64, |acc, d| acc.checked_mul(*d)).and_then(|n| total.checked_add(n)).unwrap_or(i64::MAX);
        if total > MAX_ELEMENTS {
            return Err(format!("the arrays hold more than {MAX_ELEMENTS} elements at this point (array `{}`), too many to run on the CPU", a.name));
        }
        let mut b = Buffer::new(&a.name, a.elem, dims, Value::zero(a.elem));
        for x in b.data.iter_mut() {
            *x = rng.value(a.elem);
        }
        buffers.push(b);
    }
    Ok((args, buffers))
}

/// The most array elements a differential run allocates (all arrays together): a point beyond
/// it is not run (programs with constant huge extents stay unverified rather than exhaust
/// memory).
pub const MAX_ELEMENTS: i64 = 1 << 22;

/// Run the program at `point` on seeded inputs, the leaf's kernel launched and compared at
/// each instance of its schedule. When the schedule's own serial code stops on a defect (the
/// source program is broken there), the kernel has already run: its fault is the leaf's defect.
pub fn run_point(function: &KernelFunction, programs: &Programs, point: &BTreeMap<String, i64>, seed: u64, options: RunOptions) -> Outcome {
    let mut rng = SplitMix(seed);
    let (args, mut memory) = match inputs(function, point, &mut rng) {
        Ok(x) => x,
        Err(e) => return Outcome::Unusable(e),
    };
    match machine::run(&programs.launching, &args, &mut memory, Some(&programs.kernel), options) {
        Ok(stats) if stats.compared == 0 => Outcome::Unusable("the schedule does not run at this point".into()),
        Ok(stats) => Outcome::Passed(stats),
        Err(Stopped { fault: f @ Fault::OutsideFacts(_), .. }) => Outcome::Unusable(f.to_string()),
        Err(Stopped { fault: Fault::Mismatch(d), at: Where::Kernel, .. }) => Outcome::Mismatch(d),
        Err(Stopped { fault, at: Where::Kernel, .. }) => Outcome::Fault(fault),
        Err(Stopped { fault, at, stats }) => {
            let place = match at {
                Where::Schedule(k) => function.schedules.get(k).map_or_else(|| format!("in schedule {k}"), |s| format!("in schedule `{}`", s.name)),
                _ => "in host code".to_string(),
            };
            if at == Where::Schedule(programs.launching.launches.first().map_or(usize::MAX, |l| l.schedule)) {
                match fault {
                    // The schedule as written indexes outside an array at a point of the
                    // facts: the program is wrong there, whatever the leaf did (a staged leaf's
                    // guarded loads hid `x[-1]`, and it was "proved").
                    Fault::OutOfBounds { .. } => Outcome::Fault(fault),
                    _ => Outcome::Unusable(format!("the serial program stops {place}: {fault}")),
                }
            } else if stats.compared > 0 {
                // The launches before the fault were compared; the fault is the source
                // program's, elsewhere, and is reported on the leaves of its own schedule.
                Outcome::Passed(stats)
            } else {
                Outcome::Unusable(format!("the source program stops {place} before this schedule runs: {fault}"))
            }
        }
    }
}
