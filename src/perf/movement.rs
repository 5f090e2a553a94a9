//! Data movement and a roofline time estimate, for `tune`'s ranking (issue 27.4).
//!
//! Contract: [`work_per_thread`] counts what one thread of a kernel does at a parameter point:
//! floating-point operations, bytes of global memory it reads and writes, and shared-memory
//! accesses. Loops count their trip count at the point, with enclosing loop counters (the
//! schedule's host loops' too: the launch of a middle iteration) at the middle of their range
//! (a triangular loop counts its mean trip count); an `if` counts its
//! busier side; thread and block indices are 0. It answers `None` when a loop bound cannot be
//! evaluated (it reads an array element, or overflows).
//!
//! [`estimate`] turns one thread's work into the kernel's time on a device, from the device's
//! published rates only (no fitted constant): FP32 (or FP64) lanes per multiprocessor from the
//! compute capability (the CUDA C++ Programming Guide's throughput table), DRAM bandwidth and
//! boost clock from the profile, and one 32-bank shared-memory pass per clock per
//! multiprocessor. Global bytes are scaled by the bytes a warp moves over the bytes its lanes
//! ask for (sectors; a broadcast moves one sector for 32 lanes), and shared passes divided by
//! the bank efficiency, so coalescing and bank conflicts enter the time.
//! The time is the slowest of the three pipes over the multiprocessors the grid occupies, and of
//! launching the blocks ([`BLOCK_CYCLES`] each per multiprocessor, the one fitted constant),
//! and of same-address atomic adds, which the memory system serializes ([`ATOMIC_CYCLES`] each,
//! fitted), each pipe slowed when too few warps hide its latency: arithmetic and shared memory need 16
//! warps per multiprocessor (4 schedulers x 4 cycles of dependent-issue latency) over the
//! independent accumulations each thread's innermost loop carries, global memory
//! needs the bandwidth-latency product in flight (Little's law, one 128-byte request per warp,
//! [`DRAM_LATENCY_CYCLES`]). The warps a multiprocessor holds are the occupancy's, but never more
//! than the grid supplies (blocks over multiprocessors, times warps per block). Caches are not modelled: every global access counts as DRAM
//! traffic, so reuse through shared memory (and register blocking) lowers the time, and reuse
//! that hardware caches would catch is over-charged.

use crate::frontend::ast::*;
use crate::frontend::model::KernelFunction;
use crate::kernel::{Kernel, KernelParamKind};
use constraints::device::DeviceProfile;
use std::collections::{BTreeMap, HashMap};

/// DRAM latency in multiprocessor cycles, the order measured by microbenchmarks on Volta to
/// Hopper (roughly 400-600 cycles); the model takes the upper end.
pub const DRAM_LATENCY_CYCLES: f64 = 600.0;

/// Multiprocessor cycles per thread block launched, the rate at which a multiprocessor takes
/// new blocks: fitted, not published. On an H100 every transpose configuration of 1 to 8
/// threads per block took 157.7 to 162.8 cycles (at the profile's clock) per block per
/// multiprocessor, whatever else it did (`bench/measured/2026-11-25-h100/tune-transpose.tsv`,
/// N = 4096: 2^24 one-thread blocks in 10.12 ms); the other programs are the report
/// (bench/RESULTS.md, "Ranking against measured times"). Measured on Hopper only.
pub const BLOCK_CYCLES: f64 = 158.0;

/// Multiprocessor cycles (at the profile's clock) per atomic add to one global address: the
/// memory system applies them one after another. Fitted, not published: on an H200 a dot
/// product of 2^24 floats whose blocks of B = 1 to 16 threads each add one partial sum to
/// `s[0]` took 1.755 to 1.780 ns per add (2^24 / B adds in 29.45 to 1.87 ms; 3.5 cycles at
/// 1980 MHz: `bench/measured/2026-11-26e-h200/run2/tune/dot/all.tsv`); the other reduction
/// programs of that run are the report (bench/RESULTS.md, "Same-address atomic adds").
/// Measured on Hopper only, `float` only.
pub const ATOMIC_CYCLES: f64 = 3.5;

/// What one thread does.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    pub flops: f64,
    pub global_bytes: f64,
    /// Shared-memory passes: each access its first warp's bank ways where the caller knows
    /// them ([`work_per_thread_with_ways`]: a transposed tile's stores conflict 4 ways, once
    /// per element loaded; its reads, 8 per multiply-add step, not at all), else 1.
    pub shared_accesses: f64,
    /// Atomic adds to global memory, each divided by the elements of the array it adds to (all
    /// threads' adds spread evenly over them); a branch only one thread of a block dimension
    /// takes (`u == 0`) counts its adds once per block along it. Times the threads: the adds
    /// each address takes.
    pub atomic_share: f64,
}

impl Work {
    fn add(&mut self, o: Work) {
        self.flops += o.flops;
        self.global_bytes += o.global_bytes;
        self.shared_accesses += o.shared_accesses;
        self.atomic_share += o.atomic_share;
    }
    fn scaled(self, k: f64) -> Work {
        Work { flops: self.flops * k, global_bytes: self.global_bytes * k, shared_accesses: self.shared_accesses * k, atomic_share: self.atomic_share * k }
    }
    fn max(self, o: Work) -> Work {
        Work { flops: self.flops.max(o.flops), global_bytes: self.global_bytes.max(o.global_bytes), shared_accesses: self.shared_accesses.max(o.shared_accesses), atomic_share: self.atomic_share.max(o.atomic_share) }
    }
}

struct Counter<'k> {
    /// Element type of every array (parameters and tiles).
    elems: HashMap<&'k str, ScalarType>,
    shared: Vec<&'k str>,
    /// Bank ways by access text (see [`Work::shared_accesses`]).
    ways: &'k HashMap<String, f64>,
    /// Scalar types of names (a name declared with two types counts as the wider float).
    floats: HashMap<String, bool>,
    block: [i64; 3],
    grid: [i64; 3],
    /// Elements of every global array at the point (absent: an extent not evaluated; its adds
    /// then count as if to one element).
    elements: HashMap<&'k str, f64>,
    /// Locals defined as a thread index (`int u = threadIdx.x;`), with the dimension.
    thread_vars: HashMap<String, usize>,
}

impl Counter<'_> {
    /// A counter for evaluating launch extents and derived scalars only.
    fn bare() -> Counter<'static> {
        static NONE: std::sync::OnceLock<HashMap<String, f64>> = std::sync::OnceLock::new();
        Counter { elems: HashMap::new(), shared: Vec::new(), ways: NONE.get_or_init(HashMap::new), floats: HashMap::new(), block: [1; 3], grid: [1; 3], elements: HashMap::new(), thread_vars: HashMap::new() }
    }
}

/// Integer value of `e` in `env` (the kernel's arithmetic, checked); `None` when it reads
/// something not in `env` or overflows. Not `cexpr`: that compiles once for a fixed slot
/// table, while this walk binds locals as it goes.
fn eval(e: &Expr, env: &HashMap<String, i64>, c: &Counter) -> Option<i64> {
    Some(match &e.kind {
        ExprKind::Int(v) => *v,
        ExprKind::Var(n) => *env.get(n.as_str())?,
        ExprKind::Builtin(b) => match b {
            Builtin::ThreadIdx(_) | Builtin::BlockIdx(_) => 0,
            Builtin::BlockDim(d) => c.block[*d as usize % 3],
            Builtin::GridDim(d) => c.grid[*d as usize % 3],
        },
        ExprKind::Cast(t, a) if t.is_integer() => eval(a, env, c)?,
        ExprKind::Unary(UnOp::Neg, a) => eval(a, env, c)?.checked_neg()?,
        ExprKind::Unary(UnOp::Not, a) => i64::from(eval(a, env, c)? == 0),
        ExprKind::Binary(op, a, b) => {
            let (x, y) = (eval(a, env, c)?, eval(b, env, c)?);
            match op {
                BinOp::Add => x.checked_add(y)?,
                BinOp::Sub => x.checked_sub(y)?,
                BinOp::Mul => x.checked_mul(y)?,
                BinOp::Div => x.checked_div(y)?,
                BinOp::Rem => x.checked_rem(y)?,
                BinOp::Lt => i64::from(x < y),
                BinOp::Le => i64::from(x <= y),
                BinOp::Gt => i64::from(x > y),
                BinOp::Ge => i64::from(x >= y),
                BinOp::Eq => i64::from(x == y),
                BinOp::Ne => i64::from(x != y),
                BinOp::And => i64::from(x != 0 && y != 0),
                BinOp::Or => i64::from(x != 0 || y != 0),
            }
        }
        ExprKind::Cond(k, a, b) => {
            if eval(k, env, c)? != 0 {
                eval(a, env, c)?
            } else {
                eval(b, env, c)?
            }
        }
        // A banded loop's bounds (`max(0, i - K)`, `min(N - 1, i + K)`).
        ExprKind::Call(f, args) => match (f.name.as_str(), args.as_slice()) {
            ("min", [a, b]) => eval(a, env, c)?.min(eval(b, env, c)?),
            ("max", [a, b]) => eval(a, env, c)?.max(eval(b, env, c)?),
            ("abs", [a]) => eval(a, env, c)?.checked_abs()?,
            _ => return None,
        },
        _ => return None,
    })
}

impl Counter<'_> {
    /// The share of a block's threads for which `cond` can hold, from its conjuncts
    /// `u == c` with `u` a thread index along a dimension of extent B (1 / B each); 1 otherwise.
    fn one_thread_share(&self, cond: &Expr) -> f64 {
        match &cond.kind {
            ExprKind::Binary(BinOp::And, a, b) => self.one_thread_share(a) * self.one_thread_share(b),
            ExprKind::Binary(BinOp::Eq, a, b) => match (&a.kind, &b.kind) {
                (ExprKind::Var(v), ExprKind::Int(_)) | (ExprKind::Int(_), ExprKind::Var(v)) => {
                    self.thread_vars.get(v.as_str()).map_or(1.0, |d| 1.0 / self.block[*d].max(1) as f64)
                }
                _ => 1.0,
            },
            _ => 1.0,
        }
    }

    fn is_float(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Float { .. } => true,
            ExprKind::Var(n) => self.floats.get(n.as_str()).copied().unwrap_or(false),
            ExprKind::Index { array, .. } => self.elems.get(array.name.as_str()).is_some_and(|t| !t.is_integer()),
            ExprKind::Cast(t, _) => !t.is_integer(),
            ExprKind::Unary(UnOp::Neg, a) => self.is_float(a),
            ExprKind::Binary(op, a, b) if !op.is_comparison() && !op.is_logical() => self.is_float(a) || self.is_float(b),
            ExprKind::Cond(_, a, b) => self.is_float(a) || self.is_float(b),
            ExprKind::Call(..) => true,
            _ => false,
        }
    }

    /// The work of evaluating `e` once (`write`: `e` is an assignment's target).
    fn expr(&self, e: &Expr, write: bool) -> Work {
        let mut w = Work::default();
        match &e.kind {
            ExprKind::Index { array, indices } => {
                if self.shared.contains(&array.name.as_str()) {
                    w.shared_accesses += if self.ways.is_empty() { 1.0 } else { self.ways.get(&e.to_string()).copied().unwrap_or(1.0) };
                } else {
                    w.global_bytes += self.elems.get(array.name.as_str()).map_or(4, |t| t.size_bytes()) as f64;
                }
                indices.iter().for_each(|i| w.add(self.expr(i, false)));
                let _ = write;
            }
            ExprKind::Binary(op, a, b) => {
                if !op.is_comparison() && !op.is_logical() && self.is_float(e) {
                    w.flops += 1.0;
                }
                w.add(self.expr(a, false));
                w.add(self.expr(b, false));
            }
            ExprKind::Unary(_, a) | ExprKind::Cast(_, a) => w.add(self.expr(a, false)),
            ExprKind::Cond(k, a, b) => {
                w.add(self.expr(k, false));
                w.add(self.expr(a, false).max(self.expr(b, false)));
            }
            ExprKind::Call(_, args) => {
                w.flops += 1.0;
                args.iter().for_each(|a| w.add(self.expr(a, false)));
            }
            _ => {}
        }
        w
    }

    fn stmts(&self, stmts: &[Stmt], env: &mut HashMap<String, i64>) -> Option<Work> {
        let mut w = Work::default();
        for s in stmts {
            w.add(self.stmt(s, env)?);
        }
        Some(w)
    }

    fn stmt(&self, s: &Stmt, env: &mut HashMap<String, i64>) -> Option<Work> {
        Some(match &s.kind {
            StmtKind::Decl { ty, vars } => {
                let mut w = Work::default();
                for d in vars {
                    w.add(self.expr(&d.init, false));
                    match eval(&d.init, env, self).filter(|_| ty.is_integer()) {
                        Some(v) => env.insert(d.name.name.clone(), v),
                        None => env.remove(&d.name.name),
                    };
                }
                w
            }
            StmtKind::Assign { target, op, value } => {
                let mut w = self.expr(value, false);
                w.add(self.expr(target, true));
                if *op == AssignOp::AtomicAdd {
                    if let ExprKind::Index { array, .. } = &target.kind {
                        if !self.shared.contains(&array.name.as_str()) {
                            w.atomic_share += 1.0 / self.elements.get(array.name.as_str()).copied().unwrap_or(1.0).max(1.0);
                        }
                    }
                }
                if *op != AssignOp::Set {
                    // A compound assignment also reads its target, and computes.
                    w.add(self.expr(target, false));
                    if self.is_float(target) {
                        w.flops += 1.0;
                    }
                }
                w
            }
            StmtKind::For(l) => {
                let lo = eval(&l.lo, env, self)?;
                let hi = eval(&l.hi, env, self)? + i64::from(l.inclusive);
                let step = l.step.max(1);
                let trips = if hi > lo { (hi - lo + step - 1) / step } else { 0 };
                let mut inner = env.clone();
                inner.insert(l.var.name.clone(), lo + (trips.max(1) - 1) / 2 * step);
                let mut w = self.expr(&l.lo, false);
                w.add(self.expr(&l.hi, false));
                w.add(self.stmt(&l.body, &mut inner)?.scaled(trips as f64));
                w
            }
            StmtKind::Block(items) => self.stmts(items, &mut env.clone())?,
            StmtKind::If { cond, then_branch, else_branch } => {
                let mut w = self.expr(cond, false);
                let mut then = self.stmt(then_branch, &mut env.clone())?;
                then.atomic_share *= self.one_thread_share(cond);
                let other = match else_branch {
                    Some(e) => self.stmt(e, &mut env.clone())?,
                    None => Work::default(),
                };
                w.add(then.max(other));
                w
            }
            _ => Work::default(),
        })
    }
}

/// The integer value of `e` (integer parameters, derived scalars and `kernel`'s host loop
/// counters, as [`environment`] binds them) at `point`; `None` where it reads anything else or
/// overflows.
pub fn value_at(function: &KernelFunction, kernel: &Kernel, point: &BTreeMap<String, i64>, e: &Expr) -> Option<i64> {
    eval(e, &environment(function, kernel, point), &Counter::bare())
}

/// Values of every integer name the kernel can read at `point`: the point, then the
/// function's derived scalars in order.
/// The values at `point` of the derived scalars and of `kernel`'s host loop counters, each
/// counter at the middle of its range (the launch of a middle iteration, as an enclosing loop
/// counter counts in [`work_per_thread`]): a serial loop bounded by one (`k < d` inside `for (d
/// ...)`) has a trip count.
fn environment(function: &KernelFunction, kernel: &Kernel, point: &BTreeMap<String, i64>) -> HashMap<String, i64> {
    let mut env: HashMap<String, i64> = point.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let c = Counter::bare();
    let derive = |env: &mut HashMap<String, i64>| {
        for d in &function.derived {
            if !env.contains_key(&d.name) {
                if let Some(v) = eval(&d.value, env, &c) {
                    env.insert(d.name.clone(), v);
                }
            }
        }
    };
    derive(&mut env);
    for h in &kernel.host_loops {
        let (Some(lo), Some(hi)) = (eval(&h.lo, &env, &c), eval(&h.hi, &env, &c)) else { break };
        let last = if h.inclusive { hi } else { hi.saturating_sub(1) };
        if last < lo || h.step < 1 {
            break;
        }
        // The middle iteration's value, on the loop's step.
        let middle = lo + (last - lo) / 2 / h.step * h.step;
        env.insert(h.var.clone(), middle);
        derive(&mut env);
    }
    env
}

/// The grid and block of `kernel` at `point`, or `None` where an extent cannot be evaluated.
pub fn launch_shape(function: &KernelFunction, kernel: &Kernel, point: &BTreeMap<String, i64>) -> Option<([i64; 3], [i64; 3])> {
    let env = environment(function, kernel, point);
    let c = Counter::bare();
    let mut grid = [1i64; 3];
    for (d, g) in kernel.grid.iter().enumerate().take(3) {
        grid[d] = eval(g, &env, &c)?;
    }
    let vars: BTreeMap<constraints::Var, constraints::Rational> = env.iter().map(|(k, v)| (constraints::Var::new(k), constraints::Rational::from_integer((*v).into()))).collect();
    let mut block = [1i64; 3];
    for (d, b) in kernel.block.iter().enumerate().take(3) {
        block[d] = b.eval(&vars).ok().and_then(|q| i64::try_from(q.to_integer()).ok())?;
    }
    Some((grid, block))
}

/// What one thread of `kernel` does at `point` (see the module's contract), each shared access
/// one pass.
pub fn work_per_thread(function: &KernelFunction, kernel: &Kernel, point: &BTreeMap<String, i64>) -> Option<Work> {
    work_per_thread_with_ways(function, kernel, point, &HashMap::new())
}

/// [`work_per_thread`], each shared access counting `ways[text]` passes (its first warp's bank
/// ways at the point, by the access's printed text; 1 where absent): conflicts weigh as often
/// as the access runs, not as one access among the kernel's.
pub fn work_per_thread_with_ways(function: &KernelFunction, kernel: &Kernel, point: &BTreeMap<String, i64>, ways: &HashMap<String, f64>) -> Option<Work> {
    let (grid, block) = launch_shape(function, kernel, point)?;
    let mut elems: HashMap<&str, ScalarType> = HashMap::new();
    let mut floats: HashMap<String, bool> = HashMap::new();
    for p in &kernel.params {
        match &p.kind {
            KernelParamKind::Array { elem, .. } => {
                elems.insert(&p.name, *elem);
            }
            KernelParamKind::Scalar(t) => {
                floats.insert(p.name.clone(), !t.is_integer());
            }
        }
    }
    for s in &kernel.shared {
        elems.insert(&s.name, s.elem);
    }
    fn declared(s: &Stmt, floats: &mut HashMap<String, bool>) {
        match &s.kind {
            StmtKind::Decl { ty, vars } => vars.iter().for_each(|d| {
                *floats.entry(d.name.name.clone()).or_insert(false) |= !ty.is_integer();
            }),
            StmtKind::For(l) => declared(&l.body, floats),
            StmtKind::Block(items) => items.iter().for_each(|x| declared(x, floats)),
            StmtKind::If { then_branch, else_branch, .. } => {
                declared(then_branch, floats);
                if let Some(e) = else_branch {
                    declared(e, floats);
                }
            }
            _ => {}
        }
    }
    kernel.body.iter().for_each(|s| declared(s, &mut floats));
    let mut env = environment(function, kernel, point);
    let bare = Counter::bare();
    let elements = function
        .arrays
        .iter()
        .filter_map(|a| a.extent_exprs.iter().try_fold(1.0, |n, e| eval(e, &env, &bare).map(|v| n * v.max(0) as f64)).map(|n| (a.name.as_str(), n)))
        .collect();
    let mut thread_vars = HashMap::new();
    crate::strategy::walk::walk_stmts(&kernel.body, &mut |s| {
        if let StmtKind::Decl { vars, .. } = &s.kind {
            for d in vars {
                let mut init = &d.init;
                while let ExprKind::Cast(_, inner) = &init.kind {
                    init = inner;
                }
                if let ExprKind::Builtin(Builtin::ThreadIdx(dim)) = &init.kind {
                    thread_vars.insert(d.name.name.clone(), *dim as usize % 3);
                }
            }
        }
    });
    let counter = Counter { elems, shared: kernel.shared.iter().map(|s| s.name.as_str()).collect(), ways, floats, block, grid, elements, thread_vars };
    counter.stmts(&kernel.body, &mut env)
}

/// FP32 and FP64 results per clock per multiprocessor by compute capability (CUDA C++
/// Programming Guide, "Arithmetic Instructions", 32-bit and 64-bit floating-point add,
/// multiply, multiply-add); `None` for a capability not in the table.
pub fn lanes(compute_capability: &str) -> Option<(f64, f64)> {
    Some(match compute_capability {
        "2.0" => (32.0, 16.0),
        "2.1" => (48.0, 4.0),
        "3.0" | "3.2" => (192.0, 8.0),
        "3.5" | "3.7" => (192.0, 64.0),
        "5.0" | "5.2" => (128.0, 4.0),
        "5.3" => (128.0, 4.0),
        "6.0" => (64.0, 32.0),
        "6.1" | "6.2" => (128.0, 4.0),
        "7.0" | "7.2" => (64.0, 32.0),
        "7.5" => (64.0, 2.0),
        "8.0" => (64.0, 32.0),
        "8.6" | "8.7" | "8.9" => (128.0, 2.0),
        "9.0" => (128.0, 64.0),
        _ => return None,
    })
}

/// Why [`estimate`] gives no time on `device` whatever the kernel, if it does not: a missing
/// throughput field, or a compute capability [`lanes`] does not know.
pub fn unavailable(device: &DeviceProfile) -> Option<String> {
    if lanes(&device.compute_capability).is_none() {
        return Some(format!("compute capability {} is not in the throughput table (known: 2.0 to 9.0)", device.compute_capability.escape_debug()));
    }
    match (device.memory_bandwidth_gb_s, device.boost_clock_mhz) {
        (None, _) => Some("the profile has no `memory_bandwidth_gb_s`".into()),
        (_, None) => Some("the profile has no `boost_clock_mhz`".into()),
        _ => None,
    }
}

/// A kernel's estimated time and what bounds it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    pub seconds: f64,
    /// `compute`, `global`, `shared`, `blocks` or `atomics`: the slowest pipe.
    pub bound: &'static str,
}

/// How a kernel runs at one point: its work per thread and what the other models say there.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub work: Work,
    pub threads: f64,
    pub blocks: f64,
    pub double: bool,
    /// Fraction of the multiprocessor's warps resident ([`crate::tune::occupancy`]).
    pub occupancy: f64,
    /// Independent accumulations a thread's innermost loop carries ([`independent_chains`]):
    /// its instruction-level parallelism.
    pub chains: f64,
    /// Bytes moved over bytes the lanes ask for ([`crate::perf::Efficiency::traffic`]).
    pub traffic: f64,
    /// Shared accesses over passes: 1 where the work already counts passes
    /// ([`work_per_thread_with_ways`]).
    pub banks: f64,
    pub branch_efficiency: f64,
}

/// The roofline time of `run` on `device` (see the module's contract); `None` when the profile
/// lacks the throughput fields or its compute capability is not in [`lanes`].
pub fn estimate(run: &Run, device: &DeviceProfile) -> Option<Estimate> {
    let (fp32, fp64) = lanes(&device.compute_capability)?;
    let clock_hz = f64::from(device.boost_clock_mhz?) * 1e6;
    let bandwidth = f64::from(device.memory_bandwidth_gb_s?) * 1e9;
    let sms = f64::from(device.multiprocessors).min(run.blocks.max(1.0));
    // Warps per multiprocessor: what occupancy lets reside, but no more than the grid supplies
    // (a grid of 128 two-warp blocks gives each multiprocessor 2 warps, whatever the occupancy).
    let warps_per_block = (run.threads / run.blocks.max(1.0) / f64::from(device.warp_size)).ceil().max(1.0);
    let supplied = run.blocks.max(1.0) / sms * warps_per_block;
    let warps = (run.occupancy * f64::from(device.warps_per_multiprocessor)).min(supplied).max(1.0);
    // Arithmetic: a dependent instruction issues 4 cycles after its operand's; 4 schedulers.
    // A warp with `chains` independent accumulations issues that many back to back, so
    // 16 / chains warps keep the schedulers busy (a register-blocked thread's 64 chains hide
    // the latency with 1 warp per scheduler).
    let issue_hiding = (warps * run.chains.max(1.0) / 16.0).min(1.0);
    // Global memory: bytes in flight must cover bandwidth x latency per multiprocessor.
    let bytes_per_clock = bandwidth / clock_hz / f64::from(device.multiprocessors);
    let memory_hiding = (warps * 128.0 / (bytes_per_clock * DRAM_LATENCY_CYCLES)).min(1.0);
    let lanes = if run.double { fp64 } else { fp32 };
    // Two flops per lane per clock (an FMA); a diverging warp runs both sides.
    let compute = run.work.flops * run.threads / (2.0 * lanes) / sms / issue_hiding / run.branch_efficiency;
    let global = run.work.global_bytes * run.threads * run.traffic / bytes_per_clock / sms / memory_hiding;
    let shared = run.work.shared_accesses * run.threads / 32.0 / run.banks.max(1e-3) / sms / issue_hiding;
    // Launching blocks: each multiprocessor takes one per `BLOCK_CYCLES`.
    let launch = run.blocks / f64::from(device.multiprocessors) * BLOCK_CYCLES;
    // Same-address atomic adds, one after another wherever they come from.
    let atomics = run.work.atomic_share * run.threads * ATOMIC_CYCLES;
    let (cycles, bound) = [(compute, "compute"), (global, "global"), (shared, "shared"), (launch, "blocks"), (atomics, "atomics")].into_iter().fold((0.0, "compute"), |acc, x| if x.0 > acc.0 { x } else { acc });
    Some(Estimate { seconds: cycles / clock_hz, bound })
}

/// The independent accumulations of `kernel`'s busiest innermost serial loop: the distinct
/// scalars its body updates with `+=`, `-=` or `*=` (register-blocked code: one per output),
/// at least 1. Each is a chain of dependent instructions; distinct chains issue back to back.
pub fn independent_chains(kernel: &Kernel) -> f64 {
    fn innermost(stmts: &[Stmt], best: &mut usize) {
        for s in stmts {
            match &s.kind {
                StmtKind::For(l) => {
                    let body = crate::strategy::walk::body_items(&l.body);
                    if body.iter().any(|x| crate::strategy::walk::contains_loop(x)) {
                        innermost(&body, best);
                    } else {
                        let mut targets = std::collections::BTreeSet::new();
                        crate::strategy::walk::walk_stmts(&body, &mut |x| {
                            if let StmtKind::Assign { target: Expr { kind: ExprKind::Var(v), .. }, op: AssignOp::Add | AssignOp::Sub | AssignOp::Mul, .. } = &x.kind {
                                targets.insert(v.clone());
                            }
                        });
                        *best = (*best).max(targets.len());
                    }
                }
                StmtKind::Block(items) => innermost(items, best),
                StmtKind::If { then_branch, else_branch, .. } => {
                    innermost(std::slice::from_ref(then_branch), best);
                    if let Some(e) = else_branch {
                        innermost(std::slice::from_ref(e), best);
                    }
                }
                _ => {}
            }
        }
    }
    let mut best = 0;
    innermost(&kernel.body, &mut best);
    best.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(threads: f64, blocks: f64, occupancy: f64) -> Run {
        let work = Work { flops: 16384.0, global_bytes: 32768.0, ..Work::default() };
        Run { work, threads, blocks, double: false, occupancy, chains: 1.0, traffic: 6.0, banks: 1.0, branch_efficiency: 1.0 }
    }

    /// Latency is hidden by the warps a multiprocessor holds, and it holds no more than the grid
    /// gives it: 8192 row-per-thread threads as 128 blocks of 64 (2 warps on each of 128
    /// multiprocessors, whatever the occupancy) wait longer than as 1024 blocks of 8 (about 8
    /// one-warp blocks on each of 132), as measured on an H100 and an H200 (matvec, N = 8192:
    /// 0.58 against 0.45 ms; bench/RESULTS.md). A grid larger than the device keeps the
    /// occupancy's warps.
    #[test]
    fn warps_are_what_the_grid_supplies() {
        let h100 = DeviceProfile::load("h100").unwrap();
        let wide = estimate(&run(8192.0, 128.0, 1.0), &h100).unwrap();
        let narrow = estimate(&run(8192.0, 1024.0, 0.5), &h100).unwrap();
        assert!(narrow.seconds < wide.seconds / 2.0, "{narrow:?} against {wide:?}");
        // 10,000 blocks of 256 threads: far more warps than reside, so occupancy decides; at
        // 16 and 32 resident warps neither hides the latency, and the time halves.
        let quarter = estimate(&run(2_560_000.0, 10_000.0, 0.25), &h100).unwrap();
        let half = estimate(&run(2_560_000.0, 10_000.0, 0.5), &h100).unwrap();
        assert!((quarter.seconds / half.seconds - 2.0).abs() < 1e-9, "{quarter:?} against {half:?}");
    }

    /// 2^24 one-thread blocks (transpose at N = 4096 with 1 x 1 blocks) are bound by launching
    /// blocks: 2^24 / 132 x BLOCK_CYCLES cycles at 1.98 GHz, 10.2 ms (measured 10.12 ms); the
    /// same work in 256-thread blocks is not.
    #[test]
    fn tiny_blocks_are_bound_by_their_launches() {
        let h100 = DeviceProfile::load("h100").unwrap();
        let work = Work { global_bytes: 8.0, ..Work::default() };
        let tiny = Run { work, threads: 16_777_216.0, blocks: 16_777_216.0, double: false, occupancy: 0.5, chains: 1.0, traffic: 8.0, banks: 1.0, branch_efficiency: 1.0 };
        let e = estimate(&tiny, &h100).unwrap();
        assert_eq!(e.bound, "blocks");
        assert!((e.seconds - 16_777_216.0 / 132.0 * BLOCK_CYCLES / 1.98e9).abs() < 1e-12, "{e:?}");
        let wide = estimate(&Run { blocks: 65_536.0, occupancy: 1.0, traffic: 1.0, ..tiny }, &h100).unwrap();
        assert_ne!(wide.bound, "blocks", "{wide:?}");
    }

    /// 2^24 threads each adding once to one element (a dot product's atomic leaf, one thread a
    /// block) are bound by the serialized adds: 2^24 x ATOMIC_CYCLES at 1.98 GHz, 29.7 ms
    /// (measured 29.45 ms on an H200); spread over 2^20 elements they are not.
    #[test]
    fn same_address_atomic_adds_are_serialized() {
        let h200 = DeviceProfile::load("h200").unwrap();
        let work = Work { flops: 2.0, global_bytes: 12.0, atomic_share: 1.0, ..Work::default() };
        let one = Run { work, threads: 16_777_216.0, blocks: 65_536.0, double: false, occupancy: 1.0, chains: 1.0, traffic: 1.0, banks: 1.0, branch_efficiency: 1.0 };
        let e = estimate(&one, &h200).unwrap();
        assert_eq!(e.bound, "atomics");
        assert!((e.seconds - 16_777_216.0 * ATOMIC_CYCLES / 1.98e9).abs() < 1e-12, "{e:?}");
        let spread = estimate(&Run { work: Work { atomic_share: 1.0 / 1_048_576.0, ..work }, ..one }, &h200).unwrap();
        assert_ne!(spread.bound, "atomics", "{spread:?}");
    }
}
