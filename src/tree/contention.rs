//! The atomic-contention counter's fork (issue 26's block-level reductions): where a
//! reduction's atomic adds reach one element from several threads of a block
//! (`strategy::block_reduce::contention`, a product of block extents `P`), accept `P <= 1`
//! (the atomic adds as written) and refuse `1 < P`, where the tree reduces in the block first.
//!
//! Contract: a code that already reduces in the block, or has no eligible atomic add, forks
//! nothing. On the refuse side the reduced code runs where its own assumption holds (a tree of
//! constant strides covers at most `block_reduce::MAX_THREADS` threads): a `case` child on the
//! device's threads per block `T_B <= MAX_THREADS` (which, with the block within `T_B`, implies
//! it; true of every CUDA device, and unlike a fork on the block's extent it leaves small
//! points on both sides for `verify`) takes the strategy and evaluates every counter again
//! (its shared arrays count against the shared memory), an `outside` child keeps the atomic
//! adds; an assumption the region implies forks nothing. Where the accept side is empty (constant extents), a node is made only where
//! the strategy applies, as for the other performance counters; where constants decide it (a
//! block of 64 threads), the node takes the reduced code itself, with no edge.

use super::*;
use crate::strategy::block_reduce::contention;

impl Builder<'_> {
    pub(super) fn expand_contention(&mut self, id: usize) -> Result<(), String> {
        let counter = Counter::AtomicContention;
        let parent = self.nodes[id].clone();
        let value = if parent.code.block_reduce { None } else { contention(&parent.staged) };
        let Some(value) = value else { return self.next_counter(id) };
        let accept = Constraint::le(&value, &Poly::one());
        let refuse = accept.negate();
        let Some(refused) = self.branch(&parent, &refuse, format!("refuse {}: {refuse}", counter.name())) else { return self.next_counter(id) };
        let accepted = self.branch(&parent, &accept, format!("accept {}: {accept}", counter.name()));
        let reduced = match parent.strategies_left.contains(&Strategy::BlockReduce) {
            true => self.apply(Strategy::BlockReduce, &parent)?,
            false => None,
        };
        if accepted.is_none() && reduced.is_none() {
            return self.next_counter(id);
        }
        // Contention the block's constant extents fix (`1 < 64`): no fork, no condition to
        // print; the node takes the reduced code itself, as the root takes its strategies.
        if refuse.truth_if_constant() == Some(true) {
            if let Some(code) = &reduced {
                let ev = self.evaluate(code)?;
                if ev.staged.assumptions.len() == parent.staged.assumptions.len() {
                    take(&mut self.nodes[id], Strategy::BlockReduce, code.clone(), ev);
                    return self.expand(id);
                }
            }
        }
        if let Some(mut node) = accepted {
            node.counters_left.remove(0);
            let c = self.child(id, ("accept", counter, accept), node);
            self.expand(c)?;
        }
        let Some(code) = reduced else {
            let mut node = refused;
            node.counters_left.remove(0);
            node.decisions.push("no strategy left lowers it: the atomic adds stay".to_string());
            let c = self.child(id, ("refuse", counter, refuse), node);
            return self.expand(c);
        };
        let ev = self.evaluate(&code)?;
        let new: Vec<Constraint> = ev.staged.assumptions.iter().filter(|c| !parent.staged.assumptions.contains(c)).cloned().collect();
        if new.len() > 1 {
            return Err("block-level reduction made more than one assumption".into());
        }
        // The tree's strides cover `MAX_THREADS` threads. The fork is on the device's limit,
        // not on the block: the block is within `T_B` here (the threads counter was accepted),
        // and each side then has small points for `verify` to run.
        let max = Poly::int(crate::strategy::block_reduce::MAX_THREADS);
        let case = Constraint::le(&Poly::var(&self.machine.threads_per_block), &max);
        let needed = new.first().filter(|assumed| self.implied(&refused, assumed).is_err());
        let case = needed.map(|assumed| {
            let mut within = refused.clone();
            within.constraints.add(case.clone());
            // The limit must imply the code's assumption; otherwise fork on the assumption.
            if self.implied(&within, assumed).is_ok() { case } else { assumed.clone() }
        });
        let Some(case) = case else {
            // The assumption holds throughout (or there is none): the refuse child takes the
            // reduced code.
            let mut node = refused;
            take(&mut node, Strategy::BlockReduce, code, ev);
            let c = self.child(id, ("refuse", counter, refuse), node);
            return self.expand(c);
        };
        let at = self.child(id, ("refuse", counter, refuse), refused.clone());
        if let Some(mut node) = self.branch(&refused, &case, format!("case {} (a tree of at most {} threads): {case}", counter.name(), crate::strategy::block_reduce::MAX_THREADS)) {
            take(&mut node, Strategy::BlockReduce, code, ev);
            let c = self.child(at, ("case", counter, case.clone()), node);
            self.expand(c)?;
        }
        let outside = case.negate();
        if let Some(mut node) = self.branch(&refused, &outside, format!("outside {}: {outside}; the atomic adds stay", counter.name())) {
            node.counters_left.remove(0);
            let c = self.child(at, ("outside", counter, outside), node);
            self.expand(c)?;
        }
        Ok(())
    }

    /// Node `id` is done with its first counter left: the next one.
    fn next_counter(&mut self, id: usize) -> Result<(), String> {
        self.nodes[id].counters_left.remove(0);
        self.nodes[id].perf_done = 0;
        self.expand(id)
    }
}
