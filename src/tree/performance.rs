//! The performance counters' forks (coalescing, bank conflicts): per access, a `case` edge
//! where `perf::fork`'s closed form applies and an `outside` edge where it does not; then
//! accept and refuse, a refusal applying the first strategy left that raises the counter.

use super::*;

impl Builder<'_> {
    /// The performance conditions of a code that runs (memoised; both kinds from one set of
    /// patterns).
    pub(super) fn conditions(&mut self, staged: &Kernel, kind: PerfKind) -> Vec<Condition> {
        // Unrolling and the register cap act in LLVM and ptxas, not on the body's accesses.
        let code = Kernel { no_unroll: false, max_registers: None, ..staged.clone() };
        if let Some(c) = self.conditions.get(&(code.clone(), kind)) {
            return c.clone();
        }
        let patterns = crate::perf::pattern::patterns(self.function, staged, &self.root, self.backend);
        let mut levels = 0;
        // A condition on anything but the parameters (a derived quotient `d = n / B` as a
        // tile's row stride, a model's quotient) is left out: the dispatcher evaluates
        // constraints on the parameters and the machine only, and Z3 would read the name as
        // free.
        let known: BTreeSet<String> = self.function.integer_parameters().into_iter().chain(self.machine.all().iter().map(|s| s.to_string())).collect();
        let on_parameters = |c: &Condition| c.shape.iter().chain([&c.accept]).all(|x| x.vars().iter().all(|v| known.contains(v.name())));
        for k in [PerfKind::Coalescing, PerfKind::BankConflicts] {
            let mut c = crate::perf::fork::conditions(&patterns, staged, k);
            c.retain(on_parameters);
            levels += c.iter().filter(|c| c.accept.truth_if_constant() != Some(true)).map(|c| 1 + c.shape.len()).sum::<usize>();
            self.conditions.insert((code.clone(), k), c);
        }
        self.perf_levels = self.perf_levels.max(levels);
        self.conditions[&(code, kind)].clone()
    }

    /// Whether `node`'s system implies `c` (its negation is inconsistent there; an unknown
    /// answer is not an implication). When it does not, a solution of the system with `c`
    /// false, if known: the node's own witness when it already falsifies `c`.
    /// `c` holds throughout `node`'s region: implied by the root's system (one memoised query
    /// for every node that asks the same) or else by the node's own.
    pub(super) fn holds_throughout(&self, node: &Node, c: &Constraint) -> bool {
        matches!(self.backend.implies(&self.root, c), constraints::solver::Implication::Proved) || self.implied(node, c).is_ok()
    }

    pub(super) fn implied(&self, node: &Node, c: &Constraint) -> Result<(), Option<Model>> {
        let mut sys = node.constraints.clone();
        sys.add(c.negate());
        match self.backend.check_with_witness(&sys, node.witness.as_ref()) {
            CheckResult::Unsat => Ok(()),
            CheckResult::Sat(m) => Err(Some(m)),
            CheckResult::Unknown(_) => Err(None),
        }
    }

    /// The performance counter `counter`, access by access from `perf_done`: where an access's
    /// closed form may or may not apply, a `case` child (it applies; the same access next) and
    /// an `outside` child (the next access); where it applies, accept and refuse children as
    /// for a resource counter. Accesses whose condition the system decides fork nothing.
    pub(super) fn expand_performance(&mut self, id: usize, counter: Counter, kind: PerfKind) -> Result<(), String> {
        let conditions = self.conditions(&self.nodes[id].staged.clone(), kind);
        let parent = self.nodes[id].clone();
        for (i, cond) in conditions.iter().enumerate().skip(parent.perf_done) {
            if cond.accept.truth_if_constant() == Some(true) {
                continue;
            }
            let undecided_shape = cond.shape.iter().find_map(|s| self.implied(&parent, s).err().map(|m| (s, m)));
            if let Some((shape, outside_witness)) = undecided_shape {
                let inside = self.branch(&parent, shape, format!("case {} of `{}`: {shape}", counter.name(), cond.access));
                let Some(inside) = inside else { continue };
                let outside = shape.negate();
                // The implication's counterexample is a solution of the outside child's system.
                let out = match outside_witness {
                    Some(m) => {
                        let mut node = self.branch_known(&parent, &outside, format!("outside {} of `{}`: {outside}", counter.name(), cond.access));
                        node.witness = Some(m);
                        Some(node)
                    }
                    None => self.branch(&parent, &outside, format!("outside {} of `{}`: {outside}", counter.name(), cond.access)),
                };
                let c = self.child(id, ("case", counter, shape.clone()), inside);
                self.expand(c)?;
                if let Some(mut out) = out {
                    out.perf_done = i + 1;
                    let c = self.child(id, ("outside", counter, outside), out);
                    self.expand(c)?;
                }
                return Ok(());
            }
            let refuse = cond.refuse();
            let Some(refused) = self.branch(&parent, &refuse, format!("refuse {} of `{}`: {refuse}", counter.name(), cond.access)) else { continue };
            let Some(mut accepted) = self.branch(&parent, &cond.accept, format!("accept {} of `{}`: {}", counter.name(), cond.access, cond.accept)) else {
                // The refusal is implied (a lane stride of 4 is never 1): a node only where a
                // strategy raises the counter; else the code stays, with nothing to decide.
                match self.raising(&refused, counter, kind, i)? {
                    Some(raised) => return self.refuse_with(id, (counter, &refuse), refused, raised),
                    None => continue,
                }
            };
            accepted.perf_done = i + 1;
            let c = self.child(id, ("accept", counter, cond.accept.clone()), accepted);
            self.expand(c)?;
            return self.refuse_performance(id, (counter, kind, i), &refuse, refused);
        }
        let node = &mut self.nodes[id];
        node.counters_left.remove(0);
        node.perf_done = 0;
        self.expand(id)
    }

    /// Whether `code` (that runs) settles access `i` of `kind` (accepts it wherever its closed
    /// form applies within `node`'s region), without unsettling an access that `node`'s code
    /// settles: the strategy raises the counter. Accesses are matched by position; one the closed forms do not model in either
    /// code is not compared.
    pub(super) fn raises(&mut self, node: &Node, code: &Kernel, kind: PerfKind, i: usize) -> bool {
        let before = self.conditions(&node.staged, kind);
        let after = self.conditions(code, kind);
        // Accepted wherever its closed form applies within the node's region.
        let settled = |b: &Self, c: &Condition| {
            if c.accept.truth_if_constant() == Some(true) {
                return true;
            }
            let mut sys = node.constraints.clone();
            c.shape.iter().for_each(|s| sys.add(s.clone()));
            sys.add(c.refuse());
            matches!(b.backend.check_with_witness(&sys, node.witness.as_ref()), CheckResult::Unsat)
        };
        let target = before[i].position;
        let Some(fixed) = after.iter().find(|a| a.position == target && a.array == before[i].array) else { return false };
        if !settled(self, fixed) {
            return false;
        }
        before.iter().filter(|b| b.position != target).all(|b| match after.iter().find(|a| a.position == b.position && a.array == b.array) {
            Some(a) => a == b || !settled(self, b) || settled(self, a),
            None => true,
        })
    }

    /// The refuse child of a performance counter's access `i` (with `node`'s system): the first
    /// strategy left that raises the counter is applied and every counter evaluated again;
    /// with none, the code stays (it runs, only slower) and the next access follows.
    pub(super) fn refuse_performance(&mut self, parent: usize, (counter, kind, i): (Counter, PerfKind, usize), refuse: &Constraint, node: Node) -> Result<(), String> {
        if let Some(raised) = self.raising(&node, counter, kind, i)? {
            return self.refuse_with(parent, (counter, refuse), node, raised);
        }
        let mut node = node;
        node.perf_done = i + 1;
        node.decisions.push("no strategy left raises it: the code stays".to_string());
        let c = self.child(parent, ("refuse", counter, refuse.clone()), node);
        self.expand(c)
    }

    /// The first strategy left at `node` that raises `counter` for access `i`, with its code
    /// and counters.
    fn raising(&mut self, node: &Node, counter: Counter, kind: PerfKind, i: usize) -> Result<Option<(Strategy, Kernel, Evaluated)>, String> {
        let candidates: Vec<Strategy> = node.strategies_left.iter().copied().filter(|s| s.lowers(counter)).collect();
        for s in candidates {
            let Some(code) = self.apply(s, node)? else { continue };
            let ev = self.evaluate(&code)?;
            if self.raises(node, &ev.staged, kind, i) {
                return Ok(Some((s, code, ev)));
            }
        }
        Ok(None)
    }

    /// The refuse child of `parent` taking the strategy's code; every counter evaluated again.
    fn refuse_with(&mut self, parent: usize, (counter, refuse): (Counter, &Constraint), node: Node, (s, code, ev): (Strategy, Kernel, Evaluated)) -> Result<(), String> {
        let mut node = node;
        take(&mut node, s, code, ev);
        let c = self.child(parent, ("refuse", counter, refuse.clone()), node);
        self.expand(c)
    }
}
