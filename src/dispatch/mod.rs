//! Leaf selection: which kernel of a decision tree runs for a concrete device and concrete
//! parameters. This is the Rust side of the emitted dispatch code (`emit::dispatch` writes the
//! same rules as C++ tables) and what `metafork tune` uses to decide admissibility.
//!
//! Contract: the tree's leaves, in node order, become [`Rule`]s: the constraints on the path
//! from the root (edge by edge), what the leaf is (a kernel, or "no kernel" because a counter
//! could not be lowered) and its counters. A point selects the *first* kernel rule whose
//! constraints hold once every fact of the program holds; the machine symbols take the
//! device's values (`R` registers per thread, `Z_B` the opt-in shared memory per block,
//! `T_B` threads per block, `R_B` registers per block). A kernel leaf's own register
//! constraints (`r <= R`, `r * threads <= R_B`) use the register count of the compiled kernel
//! when the CUDA runtime reports one ([`CompiledLeaf`]), else the tree's estimate; a reported
//! `max_threads` must also admit the block. Since the tree's leaves partition the space, with
//! estimates at most one rule holds; with real counts, "first" settles the overlap. Where no
//! kernel rule is taken so and real counts are known, a second pass sets aside the path's
//! register forks on ancestor codes (keyed on their estimates: a code that really needs more
//! registers than estimated refuses its own leaves while the estimate keeps the leaves of its
//! reduced code out) and takes the first kernel leaf with a known count whose own compiled
//! counts and other constraints admit the point, so that every leaf that fits stays reachable. A kernel
//! whose grid, at the point, has more blocks along some dimension than the device allows
//! ([`DeviceLimits::max_grid`]; an extent that overflows 64 bits too) is passed over the same
//! way, so that the selection never names a kernel whose launch the runtime would refuse; an
//! extent that is not integer arithmetic on the integer parameters (it reads a floating
//! parameter or a host loop's counter) is not checked here, and the launch function checks it.
//!
//! Two evaluators with one meaning: [`Dispatcher::select_exact`] evaluates with exact rationals
//! (the reference), [`Dispatcher::select`] with checked 128-bit integers falling back to exact
//! arithmetic on overflow (the fast path for `tune`); the C++ code uses the 128-bit tables and
//! reports overflow instead of falling back.

pub mod facts;

use crate::frontend::model::{FactKind, KernelFunction};
use crate::tree::{Counter, NodeKind, Tree};
use constraints::device::DeviceProfile;
use constraints::{Constraint, Poly, Rational, Rel, Var};
use facts::FactSet;
use std::collections::BTreeMap;

/// The device limits the tree's machine symbols stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub registers_per_thread: i64,
    pub registers_per_block: i64,
    /// Without opting in (a launch above it calls `cudaFuncSetAttribute` first).
    pub shared_memory_per_block: i64,
    /// The most a block can opt into: the value of `Z_B`.
    pub shared_memory_per_block_optin: i64,
    pub threads_per_block: i64,
    /// The register file of one multiprocessor: the value of `R_SM`.
    pub registers_per_multiprocessor: i64,
    /// Resident warps per multiprocessor: the value of `W_SM`.
    pub warps_per_multiprocessor: i64,
    /// The device's multiprocessors: the value of `N_SM`.
    pub multiprocessors: i64,
    /// The most blocks a grid may have along x, y and z; 0: not known (not checked).
    pub max_grid: [i64; 3],
}

impl DeviceLimits {
    pub fn of(p: &DeviceProfile) -> DeviceLimits {
        DeviceLimits {
            registers_per_thread: p.registers_per_thread.into(),
            registers_per_block: p.registers_per_block.into(),
            shared_memory_per_block: p.shared_memory_per_block.into(),
            shared_memory_per_block_optin: p.shared_memory_per_block_optin.into(),
            threads_per_block: p.threads_per_block.into(),
            registers_per_multiprocessor: p.registers_per_multiprocessor.into(),
            warps_per_multiprocessor: p.warps_per_multiprocessor.into(),
            multiprocessors: p.multiprocessors.into(),
            max_grid: p.grid_limits(),
        }
    }
}

/// What the CUDA runtime reports of one compiled kernel leaf; 0 means "not known".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompiledLeaf {
    /// `cudaFuncAttributes::numRegs`.
    pub registers: i64,
    /// `cudaFuncAttributes::maxThreadsPerBlock`.
    pub max_threads: i64,
}

/// What a leaf of the tree is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A kernel: its index among the kernel leaves and its name.
    Kernel { index: usize, name: String },
    /// No kernel: this counter was refused and could not be lowered.
    NoKernel { counter: Counter },
}

/// One leaf as a selection rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub node: usize,
    pub outcome: Outcome,
    /// The edge constraints from the root, less a kernel leaf's own register constraints.
    pub path: Vec<Constraint>,
    /// For each of `path`'s constraints, whether it compares an ancestor code's register
    /// *estimate* with the machine (a register fork above the leaf's own code): what the
    /// selection's second pass sets aside ([`Dispatcher::select_exact`]).
    pub estimated: Vec<bool>,
    /// The leaf's register estimate (per thread).
    pub registers: u32,
    pub threads_per_block: Poly,
    pub shared_bytes: Poly,
}

/// The outcome of selecting a leaf for one point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// The kernel leaf with this index (into [`Dispatcher::kernels`]).
    Leaf(usize),
    /// An `assert` fact is false (its text).
    AssertFails(String),
    /// An `assume` fact is false: the kernels are not valid there.
    OutsideAssumptions(String),
    /// The point lies where the tree has no kernel: this counter could not be lowered.
    NoKernel(Counter),
    /// No leaf admits the point (only with compiled register counts that exceed the model's).
    NoLeaf,
    /// Every kernel that admits the point needs more blocks along this grid dimension (0 x,
    /// 1 y, 2 z: the first such kernel's) than the device allows.
    GridTooLarge(usize),
}

/// The selection rules of one schedule's tree.
#[derive(Clone, Debug)]
pub struct Dispatcher {
    pub schedule: String,
    /// The machine symbols, in the order `R`, `Z_B`, `T_B`, `R_B`, `R_SM`, `W_SM`, `N_SM` (renamed if the
    /// program uses them).
    pub machine: [Var; 7],
    /// The function's integer parameters, in declaration order: the values a point gives.
    pub params: Vec<String>,
    pub facts: FactSet,
    pub rules: Vec<Rule>,
    /// Kernel leaf names, by index.
    pub kernels: Vec<String>,
    /// Each kernel leaf's grid extents (by index), where they are integer arithmetic on the
    /// integer parameters. One a leaf's launch cannot compute at a point (a coarsened
    /// `N / B * 2` past `int`) passes that leaf over there, as a grid too large does.
    pub grids: Vec<[Option<GridExtent>; 3]>,
    /// The grid extents of the schedule as written (the tree's root code): one undefined at a
    /// point is the program's own arithmetic undefined there, outside its assumptions.
    pub written_grid: [Option<GridExtent>; 3],
    /// The integer derived scalars the launch computes and passes to the kernel, checked as C
    /// computes them: a point where one is undefined (`int e = N * M` past `int`) is outside
    /// the program, as a failing fact is.
    pub scalars: Vec<ScalarCheck>,
    fast: Vec<FastRule>,
}

/// The message for a grid extent of schedule `schedule` as written whose arithmetic is
/// undefined at a point.
pub fn grid_undefined(extent: &crate::frontend::ast::Expr, schedule: &str) -> String {
    format!("the grid extent {extent} of schedule `{schedule}` is undefined here (a division by zero, or a value outside the type C computes a step in)")
}

/// One derived scalar the launch computes: its definition as C computes it, compiled.
#[derive(Clone, Debug)]
pub struct ScalarCheck {
    /// `int e = N * M is undefined here (...)`, for messages.
    pub text: String,
    pub checked: crate::frontend::ast::Expr,
    code: crate::cexpr::Code,
}

/// One grid extent of a kernel leaf: the launch's expression and its compiled form.
#[derive(Clone, Debug)]
pub struct GridExtent {
    /// As the program writes it (derived scalars by name).
    pub expr: crate::frontend::ast::Expr,
    /// As the launch computes it, C's types explicit ([`FactSet::as_c_computes`]): what the
    /// generated selection evaluates.
    pub checked: crate::frontend::ast::Expr,
    code: crate::cexpr::Code,
}

impl Dispatcher {
    pub fn new(function: &KernelFunction, tree: &Tree) -> Result<Dispatcher, String> {
        let facts = FactSet::of(function)?;
        let params: Vec<String> = function.integer_parameters();
        let m = &tree.machine;
        let machine = m.all().map(Var::new);
        let mut rules = Vec::new();
        let mut kernels = Vec::new();
        let mut grids = Vec::new();
        let grid_extent = |code: &crate::kernel::Kernel, d: usize| {
            let e = code.grid.get(d)?;
            let checked = facts.as_c_computes(e, &Default::default())?;
            facts.compile(&checked).ok().map(|code| GridExtent { expr: e.clone(), checked, code })
        };
        let written_grid = [0, 1, 2].map(|d| grid_extent(&tree.nodes[0].staged, d));
        for (leaf, edges) in leaf_paths(tree) {
            let node = &tree.nodes[leaf];
            let outcome = match &node.kind {
                NodeKind::Leaf => {
                    let name = crate::emit::tree_files::leaf_kernel_name(tree, leaf);
                    let index = kernels.iter().position(|k| *k == name).unwrap_or_else(|| {
                        kernels.push(name.clone());
                        grids.push([0, 1, 2].map(|d| grid_extent(&node.staged, d)));
                        kernels.len() - 1
                    });
                    Outcome::Kernel { index, name }
                }
                NodeKind::Infeasible { counter } => Outcome::NoKernel { counter: *counter },
                NodeKind::Inner => unreachable!("leaf_paths yields leaves"),
            };
            // A kernel leaf's own counters are the accepts after the last refusal that changed
            // the code (a performance refusal with no strategy left keeps it).
            let changed_code = |k: usize| {
                let before = if k == 0 { 0 } else { edges[k - 1].child };
                edges[k].kind == "refuse" && tree.nodes[edges[k].child].applied.len() > tree.nodes[before].applied.len()
            };
            let own_from = (0..edges.len()).rev().find(|&k| changed_code(k)).map_or(0, |i| i + 1);
            let is_register = |e: &crate::tree::Edge| matches!(e.counter, Counter::Registers | Counter::RegistersPerBlock);
            let kept: Vec<&crate::tree::Edge> = edges.iter().enumerate().filter(|(i, e)| !(matches!(outcome, Outcome::Kernel { .. }) && *i >= own_from && is_register(e))).map(|(_, e)| e).collect();
            let path = kept.iter().map(|e| e.constraint.clone()).collect();
            let estimated = kept.iter().map(|e| is_register(e)).collect();
            rules.push(Rule { node: leaf, outcome, path, estimated, registers: node.counters.registers, threads_per_block: node.counters.threads_per_block.clone(), shared_bytes: node.counters.shared_bytes.clone() });
        }
        let vars: Vec<Var> = params.iter().map(|p| Var::new(p)).chain(machine.iter().cloned()).collect();
        let fast = rules.iter().map(|r| FastRule::compile(r, &vars)).collect::<Result<_, _>>()?;
        let passed: std::collections::BTreeSet<&str> = tree.nodes[0].code.params.iter().map(|p| p.name.as_str()).collect();
        let scalars = function
            .derived
            .iter()
            .filter(|d| d.ty.is_integer() && passed.contains(d.name.as_str()))
            .filter_map(|d| {
                let var = crate::frontend::ast::Expr::new(crate::frontend::ast::ExprKind::Var(d.name.clone()), d.value.span);
                let checked = facts.as_c_computes(&var, &Default::default())?;
                let code = facts.compile(&checked).ok()?;
                Some(ScalarCheck { text: format!("{} {} = {} is undefined here (a division by zero, or a value outside `{}` or outside the type C computes a step in)", d.ty, d.name, d.value, d.ty), checked, code })
            })
            .collect();
        Ok(Dispatcher { schedule: tree.schedule_name().to_string(), machine, params, facts, rules, kernels, grids, written_grid, scalars, fast })
    }

    /// The variables of the compiled tables: the integer parameters, then the machine symbols.
    pub fn table_vars(&self) -> Vec<Var> {
        self.params.iter().map(|p| Var::new(p)).chain(self.machine.iter().cloned()).collect()
    }

    /// The compiled (128-bit) form of each rule, in rule order.
    pub fn fast_rules(&self) -> &[FastRule] {
        &self.fast
    }

    fn check_facts(&self, params: &BTreeMap<String, i64>) -> Option<Selection> {
        // The program's facts, then what the launch computes (its scalars, then its grids),
        // then the kernels' range facts (a kernel's `v * B + u` past `int` where `int d = ...`
        // or the grid `(N * M + B - 1) / B` is itself undefined is refused for that), as the
        // generated selection orders them.
        if let Some(f) = self.facts.first_failing_of(params, false) {
            return Some(match f.kind {
                FactKind::Assert => Selection::AssertFails(f.text.clone()),
                FactKind::Assume | FactKind::Defined => Selection::OutsideAssumptions(f.text.clone()),
            });
        }
        let slots: Vec<i64> = self.params.iter().map(|p| params.get(p).copied().unwrap_or(0)).collect();
        if let Some(s) = self.scalars.iter().find(|s| s.code.eval(&slots).is_none()) {
            return Some(Selection::OutsideAssumptions(s.text.clone()));
        }
        // A grid of the schedule as written that the launch cannot compute (`(N + B - 1) / B`
        // past `int`) is the program's own arithmetic undefined, not a grid too large for the
        // device. A leaf's own grid (a strategy's `N / B * 2`) only passes that leaf over
        // ([`Dispatcher::grid_refusal`]).
        if let Some(g) = self.written_grid.iter().flatten().find(|g| g.code.eval(&slots).is_none()) {
            return Some(Selection::OutsideAssumptions(grid_undefined(&g.expr, &self.schedule)));
        }
        self.facts.first_failing_of(params, true).map(|f| Selection::OutsideAssumptions(f.text.clone()))
    }

    /// The first grid dimension along which kernel `index` needs more blocks than `dev` allows
    /// at `slots` (the integer parameters' values in order), or whose extent the launch cannot
    /// compute (undefined in its C types: whatever the device), if any. An extent of 0 or less
    /// launches nothing and fits.
    fn grid_refusal(&self, index: usize, dev: &DeviceLimits, slots: &[i64]) -> Option<usize> {
        let extents = self.grids.get(index)?;
        (0..3).find(|&d| extents[d].as_ref().is_some_and(|g| g.code.eval(slots).is_none_or(|v| dev.max_grid[d] > 0 && v > dev.max_grid[d])))
    }

    /// What a point that no kernel takes selects: a grid too large where an admitting kernel
    /// was passed over for its grid, else "no kernel" where the tree has none there, else
    /// "no leaf".
    fn none_selected(grid: Option<usize>, no_kernel: Option<Counter>) -> Selection {
        match (grid, no_kernel) {
            (Some(d), _) => Selection::GridTooLarge(d),
            (None, Some(c)) => Selection::NoKernel(c),
            (None, None) => Selection::NoLeaf,
        }
    }

    fn machine_values(&self, dev: &DeviceLimits) -> [i64; 7] {
        [dev.registers_per_thread, dev.shared_memory_per_block_optin, dev.threads_per_block, dev.registers_per_block, dev.registers_per_multiprocessor, dev.warps_per_multiprocessor, dev.multiprocessors]
    }

    /// A device whose limits CUDA could report: each in `1..=INT_MAX` (it reports them as
    /// `int`), as the generated `metafork_device_valid` requires: a limit past `int` is no device.
    fn valid_device(dev: &DeviceLimits) -> Result<(), String> {
        let limits = [dev.registers_per_thread, dev.shared_memory_per_block, dev.shared_memory_per_block_optin, dev.threads_per_block, dev.registers_per_block, dev.registers_per_multiprocessor, dev.warps_per_multiprocessor, dev.multiprocessors];
        if limits.iter().any(|v| *v <= 0 || *v > i64::from(i32::MAX)) {
            return Err("a device limit is not positive, or is past INT_MAX".into());
        }
        Ok(())
    }

    /// The reference selection, in exact rational arithmetic. `params` gives every integer
    /// parameter; `compiled` is indexed by kernel leaf (missing entries: not known).
    pub fn select_exact(&self, dev: &DeviceLimits, compiled: &[CompiledLeaf], params: &BTreeMap<String, i64>) -> Result<Selection, String> {
        Self::valid_device(dev)?;
        if let Some(s) = self.check_facts(params) {
            return Ok(s);
        }
        let mut point = constraints::exact_point(params);
        for (sym, value) in self.machine.iter().zip(self.machine_values(dev)) {
            point.insert(sym.clone(), Rational::from_integer(value.into()));
        }
        let holds = |c: &Constraint| c.holds_at(&point).map_err(|v| format!("{}: a constraint reads `{v}`, which is not a parameter", self.schedule));
        let slots: Vec<i64> = self.params.iter().map(|p| params.get(p).copied().unwrap_or(0)).collect();
        let (mut no_kernel, mut grid) = (None, None);
        for second in [false, true] {
            if second && !compiled.iter().any(|c| c.registers > 0) {
                break;
            }
            for rule in &self.rules {
                let mut ok = true;
                for (c, estimated) in rule.path.iter().zip(&rule.estimated) {
                    if !(second && *estimated) && !holds(c)? {
                        ok = false;
                        break;
                    }
                }
                if !ok {
                    continue;
                }
                match &rule.outcome {
                    Outcome::NoKernel { .. } if second => {}
                    Outcome::NoKernel { counter } => {
                        no_kernel.get_or_insert(*counter);
                    }
                    Outcome::Kernel { index, .. } => {
                        let seen = compiled.get(*index).copied().unwrap_or_default();
                        if second && seen.registers <= 0 {
                            continue;
                        }
                        let r = Poly::int(if seen.registers > 0 { seen.registers } else { rule.registers.into() });
                        let [reg_sym, _, _, block_sym, ..] = &self.machine;
                        let own = [Constraint::le(&r, &Poly::var(reg_sym.name())), Constraint::le(&(&r * &rule.threads_per_block), &Poly::var(block_sym.name()))];
                        let mut fits = true;
                        for c in &own {
                            fits &= holds(c)?;
                        }
                        if seen.max_threads > 0 {
                            fits &= holds(&Constraint::le(&rule.threads_per_block, &Poly::int(seen.max_threads)))?;
                        }
                        if fits {
                            match self.grid_refusal(*index, dev, &slots) {
                                None => return Ok(Selection::Leaf(*index)),
                                Some(d) => {
                                    grid.get_or_insert(d);
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(Self::none_selected(grid, no_kernel))
    }

    /// The same selection with 128-bit integer arithmetic (on overflow, the whole point is
    /// evaluated again exactly): the fast path, equal to [`Dispatcher::select_exact`] on every point.
    pub fn select(&self, dev: &DeviceLimits, compiled: &[CompiledLeaf], params: &BTreeMap<String, i64>) -> Result<Selection, String> {
        Self::valid_device(dev)?;
        if let Some(s) = self.check_facts(params) {
            return Ok(s);
        }
        let mut values: Vec<i64> = Vec::with_capacity(self.params.len() + self.machine.len());
        for p in &self.params {
            values.push(*params.get(p).ok_or_else(|| format!("{}: no value for parameter `{p}`", self.schedule))?);
        }
        let machine = self.machine_values(dev);
        values.extend(machine);
        let (mut no_kernel, mut grid) = (None, None);
        for second in [false, true] {
            if second && !compiled.iter().any(|c| c.registers > 0) {
                break;
            }
            for (rule, fast) in self.rules.iter().zip(&self.fast) {
                let mut ok = true;
                for c in fast.path.iter().filter(|c| !(second && c.estimated)) {
                    match c.holds(&values) {
                        Some(true) => {}
                        Some(false) => {
                            ok = false;
                            break;
                        }
                        None => return self.select_exact(dev, compiled, params),
                    }
                }
                if !ok {
                    continue;
                }
                match &rule.outcome {
                    Outcome::NoKernel { .. } if second => {}
                    Outcome::NoKernel { counter } => {
                        no_kernel.get_or_insert(*counter);
                    }
                    Outcome::Kernel { index, .. } => {
                        let seen = compiled.get(*index).copied().unwrap_or_default();
                        if second && seen.registers <= 0 {
                            continue;
                        }
                        let r = i128::from(if seen.registers > 0 { seen.registers } else { rule.registers.into() });
                        let Some(threads) = fast.threads.value(&values) else { return self.select_exact(dev, compiled, params) };
                        let Some(per_block) = r.checked_mul(threads) else { return self.select_exact(dev, compiled, params) };
                        let fits = r <= i128::from(machine[0]) && per_block <= i128::from(machine[3]) && (seen.max_threads <= 0 || threads <= i128::from(seen.max_threads));
                        if fits {
                            match self.grid_refusal(*index, dev, &values[..self.params.len()]) {
                                None => return Ok(Selection::Leaf(*index)),
                                Some(d) => {
                                    grid.get_or_insert(d);
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(Self::none_selected(grid, no_kernel))
    }
}

/// Each leaf of the tree, in node order, with the edges from the root to it.
fn leaf_paths(tree: &Tree) -> Vec<(usize, Vec<crate::tree::Edge>)> {
    let mut parent: Vec<Option<(usize, usize)>> = vec![None; tree.nodes.len()];
    for n in &tree.nodes {
        for (i, e) in n.children.iter().enumerate() {
            parent[e.child] = Some((n.id, i));
        }
    }
    tree.leaves()
        .map(|leaf| {
            let mut edges = Vec::new();
            let mut at = leaf.id;
            while let Some((p, i)) = parent[at] {
                edges.push(tree.nodes[p].children[i].clone());
                at = p;
            }
            edges.reverse();
            (leaf.id, edges)
        })
        .collect()
}

/// A polynomial over the table variables (by index), for checked 128-bit evaluation: integer
/// terms over a positive divisor (1 but for a coarsened block's threads, `ub1*B0/8`, whose
/// rule carries the divisibility that makes the quotient exact). Terms and factors keep the
/// polynomial's order, so the C++ tables evaluate in the same order and overflow at the same
/// points.
#[derive(Clone, Debug)]
pub struct FastPoly {
    /// (coefficient, [(variable index, exponent)]).
    pub terms: Vec<(i64, Vec<(usize, u32)>)>,
    pub divisor: i64,
}

impl FastPoly {
    fn compile(p: &Poly, vars: &[Var]) -> Result<FastPoly, String> {
        let denominator = p.common_denominator();
        let divisor: i64 = (&denominator).try_into().map_err(|_| format!("the denominator of `{p}` does not fit in 64 bits"))?;
        let p = p * &Poly::int(divisor);
        let mut terms = Vec::new();
        for (m, c) in p.terms() {
            let k: i64 = c.numer().try_into().map_err(|_| format!("a coefficient of `{p}` does not fit in 64 bits"))?;
            let factors = m
                .factors()
                .iter()
                .map(|(v, e)| vars.iter().position(|w| w == v).map(|i| (i, *e)).ok_or_else(|| format!("`{p}` reads `{v}`, which is neither a parameter nor a machine symbol")))
                .collect::<Result<_, _>>()?;
            terms.push((k, factors));
        }
        Ok(FastPoly { terms, divisor })
    }

    /// The value, or `None` on 128-bit overflow.
    pub fn value(&self, values: &[i64]) -> Option<i128> {
        let mut sum: i128 = 0;
        for (k, factors) in &self.terms {
            let mut term = i128::from(*k);
            for (v, e) in factors {
                for _ in 0..*e {
                    term = term.checked_mul(i128::from(values[*v]))?;
                }
            }
            sum = sum.checked_add(term)?;
        }
        Some(sum / i128::from(self.divisor))
    }
}

/// A constraint in compiled form.
#[derive(Clone, Debug)]
pub struct FastConstraint {
    pub poly: FastPoly,
    pub rel: Rel,
    /// [`Rule::estimated`].
    pub estimated: bool,
}

impl FastConstraint {
    /// Whether it holds, or `None` on overflow.
    pub fn holds(&self, values: &[i64]) -> Option<bool> {
        Some(self.rel.holds_int(self.poly.value(values)?))
    }
}

/// A rule in compiled form.
#[derive(Clone, Debug)]
pub struct FastRule {
    pub path: Vec<FastConstraint>,
    pub threads: FastPoly,
    pub shared_bytes: FastPoly,
}

impl FastRule {
    fn compile(rule: &Rule, vars: &[Var]) -> Result<FastRule, String> {
        Ok(FastRule {
            path: rule.path.iter().zip(&rule.estimated).map(|(c, estimated)| Ok(FastConstraint { poly: FastPoly::compile(c.poly(), vars)?, rel: c.rel(), estimated: *estimated })).collect::<Result<_, String>>()?,
            threads: FastPoly::compile(&rule.threads_per_block, vars)?,
            shared_bytes: FastPoly::compile(&rule.shared_bytes, vars)?,
        })
    }
}
