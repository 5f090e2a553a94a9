//! The refusal of the threads-per-block counter: where the block has more threads than the
//! machine allows, coarsening is the strategy that lowers them (each thread does the work of
//! several rows), as the paper's matmul example does with granularity.
//!
//! Contract: coarsening applies to register-blocked code only (`strategy::coarsen` needs the
//! granularity's outputs along `x`), so the refuse child forks as the settled path would:
//! for each blocking factor `K`, a `case` on `g == K` for the granularity `g`, then a `case` on
//! the coarsening condition (`B % 4 == 0` for the block's `y` extent `B`); each case takes the
//! blocked then coarsened code and evaluates every counter again (the threads per block
//! included: a refusal there is infeasible, blocking and coarsening being spent). Every
//! `outside` where no factor is left, and a code that cannot be blocked or coarsened, is the
//! infeasible leaf the refusal was before.

use super::*;

impl Builder<'_> {
    /// The refuse child `node` of `parent` for the threads per block, added under `refuse`.
    pub(super) fn refuse_threads(&mut self, parent: usize, refuse: &Constraint, node: Node) -> Result<(), String> {
        let at = self.child(parent, ("refuse", Counter::ThreadsPerBlock, refuse.clone()), node);
        let coarsenable = [Strategy::RegisterBlock, Strategy::Coarsen].iter().all(|s| self.nodes[at].strategies_left.contains(s));
        if !coarsenable {
            return self.infeasible(at);
        }
        self.coarsen_cases(at, &crate::strategy::block::BLOCKING_FACTORS)
    }

    fn infeasible(&mut self, id: usize) -> Result<(), String> {
        self.nodes[id].kind = NodeKind::Infeasible { counter: Counter::ThreadsPerBlock };
        Ok(())
    }

    /// Under node `id`: the first factor of `ks` as a `case` (blocked by it, then coarsened),
    /// the others under its `outside`.
    fn coarsen_cases(&mut self, id: usize, ks: &[i64]) -> Result<(), String> {
        let Some((&k, rest)) = ks.split_first() else {
            return self.infeasible(id);
        };
        let node = self.nodes[id].clone();
        let Some(g) = self.granularity_of(&node.code)? else {
            return self.infeasible(id);
        };
        let is_k = Constraint::eq(&Poly::var(&g), &Poly::int(k));
        if self.implied(&node, &is_k.negate()).is_ok() {
            return self.coarsen_cases(id, rest);
        }
        let coarsened = self.blocked_code(&node.code, k)?.and_then(|b| crate::strategy::coarsen::coarsen(&b, crate::strategy::coarsen::factor_for(k)));
        let Some(c) = coarsened else {
            return self.coarsen_cases(id, rest);
        };
        let counter = Counter::TripCount;
        if let Some(case) = self.branch(&node, &is_k, format!("case {} (`{g}` blocked by {k}, then coarsened along y for fewer threads): {is_k}", counter.name())) {
            let at = self.child(id, ("case", counter, is_k.clone()), case);
            let node = self.nodes[at].clone();
            if self.implied(&node, &c.condition).is_ok() {
                self.take_fewer_threads(at, c.kernel.clone())?;
            } else {
                if let Some(case) = self.branch(&node, &c.condition, format!("case {} (coarsened along y): {}", counter.name(), c.condition)) {
                    let inner = self.child(at, ("case", counter, c.condition.clone()), case);
                    self.take_fewer_threads(inner, c.kernel.clone())?;
                }
                let outside = c.condition.negate();
                if let Some(out) = self.branch(&node, &outside, format!("outside {} (coarsened along y): {outside}", counter.name())) {
                    let inner = self.child(at, ("outside", counter, outside), out);
                    self.infeasible(inner)?;
                }
            }
        }
        let outside = is_k.negate();
        if let Some(out) = self.branch(&node, &outside, format!("outside {} (`{g}` blocked by {k}): {outside}", counter.name())) {
            let at = self.child(id, ("outside", counter, outside), out);
            self.coarsen_cases(at, rest)?;
        }
        Ok(())
    }

    /// Node `id` takes the blocked and coarsened `code`; every counter is evaluated again.
    fn take_fewer_threads(&mut self, id: usize, code: Kernel) -> Result<(), String> {
        let ev = self.evaluate(&code)?;
        let node = &mut self.nodes[id];
        node.applied.push(Strategy::RegisterBlock);
        node.strategies_left.retain(|s| *s != Strategy::RegisterBlock);
        take(node, Strategy::Coarsen, code, ev);
        self.expand(id)
    }
}
