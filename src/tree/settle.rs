//! The forks on a path whose counters are all settled: unrolling the innermost serial loop
//! (a `case` on its trip-count condition, then the unrolled code's register and occupancy
//! gates) and iteration merging (a fork on the grid filling the device, then the merged code's
//! gates). A gate refused keeps the code as it was: a leaf that still runs.

use super::*;

impl Builder<'_> {
    /// A path whose counters are all settled: where its code's innermost serial loop can be
    /// unrolled (once per path), a `case` child on the trip-count condition and an `outside`
    /// child, the kernel as it is (no fork where the system decides the condition). On the
    /// `case` side the unrolled code is taken where it fits and occupancy allows
    /// ([`Builder::unroll_where_allowed`]). Every code that comes out is final
    /// ([`Builder::finish`]).
    pub(super) fn settle(&mut self, id: usize) -> Result<(), String> {
        if self.nodes[id].strategies_left.contains(&Strategy::RegisterBlock) {
            return self.block_fork(id, &crate::strategy::block::BLOCKING_FACTORS);
        }
        if self.nodes[id].strategies_left.contains(&Strategy::Coarsen) {
            return self.coarsen_fork(id);
        }
        let node = self.nodes[id].clone();
        let unrolled = match node.applied.contains(&Strategy::Unroll) {
            true => None,
            false => unroll(self.function, &node.staged),
        };
        let Some(u) = unrolled.filter(|u| self.implied(&node, &u.trip_count.negate()).is_err()) else {
            return self.finish(id);
        };
        let code = Kernel { unroll: Some(u.trip_count.clone()), ..(*node.code).clone() };
        // Both sides of the fork below end in `finish`, which asks for the merged code: the
        // merged forms of the code and of the unrolled code are counted beside the unrolled one.
        let merges_before = merge(&node.staged).is_some();
        self.count_ahead(&code, |unrolled_code| {
            let mut merged = Vec::new();
            if merges_before {
                merged.push(Kernel { merged: true, ..(*node.code).clone() });
            }
            if merge(unrolled_code).is_some() {
                merged.push(Kernel { merged: true, ..code.clone() });
            }
            merged
        });
        let ev = self.evaluate(&code)?;
        if self.implied(&node, &u.trip_count).is_ok() {
            return self.unroll_where_allowed(id, code, ev);
        }
        let counter = Counter::TripCount;
        let outside = u.trip_count.negate();
        if let Some(case) = self.branch(&node, &u.trip_count, format!("case {} (`{}`): {}", counter.name(), u.counter, u.trip_count)) {
            let c = self.child(id, ("case", counter, u.trip_count.clone()), case);
            self.unroll_where_allowed(c, code, ev)?;
        }
        if let Some(out) = self.branch(&node, &outside, format!("outside {} (`{}`): {outside}", counter.name(), u.counter)) {
            let c = self.child(id, ("outside", counter, outside), out);
            self.finish(c)?;
        }
        Ok(())
    }

    /// Register blocking, once per path, before unrolling: where the code's granularity loop
    /// runs to a program parameter `g` and its iterations are independent, for each factor `K`
    /// in `ks` a `case` child on `g == K` takes the blocked code where it fits the register
    /// limits ([`Builder::blocking_gates`]), and the `outside` child tries the
    /// next factor; then every side settles as usual (unrolling, merging). Blocking changes
    /// neither the block nor shared memory (the tiles are what the copies read, as before) nor
    /// any access's lane strides, so only the register counters are evaluated again.
    fn block_fork(&mut self, id: usize, ks: &[i64]) -> Result<(), String> {
        let strip = |b: &mut Self| b.nodes[id].strategies_left.retain(|s| *s != Strategy::RegisterBlock);
        let Some((&k, rest)) = ks.split_first() else {
            strip(self);
            return self.settle(id);
        };
        let node = self.nodes[id].clone();
        let Some(g) = self.granularity_of(&node.code)? else {
            strip(self);
            return self.settle(id);
        };
        let is_k = Constraint::eq(&Poly::var(&g), &Poly::int(k));
        if self.implied(&node, &is_k.negate()).is_ok() {
            return self.block_fork(id, rest);
        }
        let Some(code) = self.blocked_code(&node.code, k)? else {
            strip(self);
            return self.settle(id);
        };
        if self.implied(&node, &is_k).is_ok() {
            self.nodes[id].blocked_by = Some(k);
            return self.take_blocked(id, code);
        }
        let counter = Counter::TripCount;
        if let Some(case) = self.branch(&node, &is_k, format!("case {} (`{g}` blocked by {k}): {is_k}", counter.name())) {
            let c = self.child(id, ("case", counter, is_k.clone()), case);
            self.nodes[c].blocked_by = Some(k);
            self.take_blocked(c, code)?;
        }
        let outside = is_k.negate();
        if let Some(out) = self.branch(&node, &outside, format!("outside {} (`{g}` blocked by {k}): {outside}", counter.name())) {
            let c = self.child(id, ("outside", counter, outside), out);
            self.block_fork(c, rest)?;
        }
        Ok(())
    }

    /// [`crate::strategy::block::granularity_of`], remembered by what it reads of the code (its
    /// body, parameters and host loops: the flags the tree sets on the code, unrolling,
    /// register caps, CSE, do not change which loop is the granularity's).
    pub(super) fn granularity_of(&mut self, code: &Kernel) -> Result<Option<String>, String> {
        let key = (code.body.clone(), code.params.clone(), code.host_loops.clone());
        if let Some(g) = self.granularity.get(&key) {
            return Ok(g.clone());
        }
        let g = crate::strategy::block::granularity_of(self.function, code, self.backend)?;
        self.granularity.insert(key, g.clone());
        Ok(g)
    }

    /// `code` register-blocked by `k` ([`crate::strategy::block::block`]), memoised by code.
    pub(super) fn blocked_code(&mut self, code: &Kernel, k: i64) -> Result<Option<Kernel>, String> {
        let key = (code.clone(), k);
        if let Some(b) = self.blocked.get(&key) {
            return Ok(b.clone());
        }
        let b = crate::strategy::block::block(self.function, code, self.backend, k)?;
        self.blocked.insert(key, b.clone());
        Ok(b)
    }

    /// Coarsening, once per path, after register blocking was taken and before unrolling: where
    /// `strategy::coarsen` applies to the blocked code, a `case` child on its condition (`B %
    /// K == 0` for the block's `y` extent `B`) takes the coarsened code where it fits the
    /// register limits ([`Builder::blocking_gates`]), and the `outside` child keeps the blocked
    /// code; then both settle as usual (unrolling, merging). Code that was not blocked is not
    /// coarsened: without the granularity's outputs along `x`, a thread's copies share only
    /// one operand, and each coarsened code costs the verifier several seconds.
    fn coarsen_fork(&mut self, id: usize) -> Result<(), String> {
        self.nodes[id].strategies_left.retain(|s| *s != Strategy::Coarsen);
        let node = self.nodes[id].clone();
        let coarsened = match (node.applied.contains(&Strategy::RegisterBlock), node.blocked_by) {
            (true, Some(k)) => crate::strategy::coarsen::coarsen(&node.code, crate::strategy::coarsen::factor_for(k)),
            _ => None,
        };
        let Some(c) = coarsened.filter(|c| self.implied(&node, &c.condition.negate()).is_err()) else {
            return self.settle(id);
        };
        if self.implied(&node, &c.condition).is_ok() {
            return self.take_coarsened(id, c.kernel);
        }
        let counter = Counter::TripCount;
        let outside = c.condition.negate();
        if let Some(case) = self.branch(&node, &c.condition, format!("case {} (coarsened along y): {}", counter.name(), c.condition)) {
            let at = self.child(id, ("case", counter, c.condition.clone()), case);
            self.take_coarsened(at, c.kernel)?;
        }
        if let Some(out) = self.branch(&node, &outside, format!("outside {} (coarsened along y): {outside}", counter.name())) {
            let at = self.child(id, ("outside", counter, outside), out);
            self.settle(at)?;
        }
        Ok(())
    }

    /// Node `id`, where the block divides, takes the coarsened `code` where its register gates
    /// hold, and its shared-memory limit where staging sized the tiles differently; a refused
    /// gate keeps the blocked code. Coarsening shortens the block (fewer threads; the same tiles
    /// where staging merges the copies' row tiles), so all counters are evaluated again.
    fn take_coarsened(&mut self, id: usize, code: Kernel) -> Result<(), String> {
        let registers = self.nodes[id].counters.registers;
        let ev = self.evaluate(&code)?;
        let mut gates = self.blocking_gates(registers, &ev);
        if ev.counters.shared_bytes != self.nodes[id].counters.shared_bytes {
            gates.push((Counter::SharedMemory, Constraint::le(&ev.counters.value(Counter::SharedMemory), &self.limit(Counter::SharedMemory))));
        }
        self.take_where_allowed(id, Strategy::Coarsen, code, ev, &gates)
    }

    /// Node `id`, where the granularity has its blocked value, takes the register-blocked `code` where its
    /// gates hold ([`Builder::blocking_gates`]); a refused gate keeps the node's code as it was.
    fn take_blocked(&mut self, id: usize, code: Kernel) -> Result<(), String> {
        let registers = self.nodes[id].counters.registers;
        let ev = self.evaluate(&code)?;
        let gates = self.blocking_gates(registers, &ev);
        self.take_where_allowed(id, Strategy::RegisterBlock, code, ev, &gates)
    }

    /// The gates of blocked code: its register limits only. Blocking trades occupancy for
    /// reuse in registers on purpose (fewer resident warps, each with K independent
    /// multiply-adds in flight); whether the trade pays is `tune`'s data-movement model's call,
    /// which counts occupancy, not a fork's.
    fn blocking_gates(&self, registers: u32, ev: &Evaluated) -> Vec<(Counter, Constraint)> {
        self.register_gates(registers, ev).into_iter().filter(|(c, _)| *c != Counter::Occupancy).collect()
    }

    /// Node `id`, whose region meets the trip-count condition, takes the unrolled `code` where
    /// it fits and occupancy allows ([`Builder::register_gates`], [`Builder::take_where_allowed`]).
    /// Unrolling changes neither the block, nor shared memory, nor any access's lane strides (a
    /// copy's counter is the original's plus a constant), so the other counters stand.
    pub(super) fn unroll_where_allowed(&mut self, id: usize, code: Kernel, ev: Evaluated) -> Result<(), String> {
        let gates = self.register_gates(self.nodes[id].counters.registers, &ev);
        self.take_where_allowed(id, Strategy::Unroll, code, ev, &gates)
    }

    /// Node `id`'s code is final but for iteration merging: where merging applies (a code
    /// without barriers, whose grid extent has a polynomial lower bound with divisors the
    /// region keeps positive), the merged code is taken where the merged grid still fills the
    /// device ([`Builder::grid_fills_device`]) and the merged code fits and occupancy allows;
    /// elsewhere (and on every `refuse`) node `id` is a leaf with its code. Merging changes
    /// neither the block, nor shared memory, nor any access's lane strides.
    pub(super) fn finish(&mut self, id: usize) -> Result<(), String> {
        self.nodes[id].kind = NodeKind::Leaf;
        let node = self.nodes[id].clone();
        if node.code.merged || merge(&node.staged).is_none() {
            return Ok(());
        }
        let Some(fill) = self.grid_fills_device(&node) else {
            return Ok(());
        };
        let code = Kernel { merged: true, ..(*node.code).clone() };
        let ev = self.evaluate(&code)?;
        let mut gates = vec![(Counter::GridFill, fill)];
        gates.extend(self.register_gates(node.counters.registers, &ev));
        self.take_where_allowed(id, Strategy::Merge, code, ev, &gates)
    }

    /// The conditions under which a new code with `ev`'s registers replaces one with
    /// `registers`: it fits the register limits (`r' <= R`, `r' * T <= R_B`) and, when it
    /// raises the register allocation per warp, occupancy allows ([`occupancy_allows`]).
    pub(super) fn register_gates(&self, registers: u32, ev: &Evaluated) -> Vec<(Counter, Constraint)> {
        let new = ev.counters.registers;
        let mut gates = vec![Counter::Registers, Counter::RegistersPerBlock].into_iter().map(|c| (c, Constraint::le(&ev.counters.value(c), &self.limit(c)))).collect::<Vec<_>>();
        if warp_allocation(new) > warp_allocation(registers) {
            gates.push((Counter::Occupancy, occupancy_allows(&self.machine, new)));
        }
        gates
    }

    /// The merged grid still fills every multiprocessor's warp slots: with `G` the grid's
    /// blocks (the product of its extents) and `T` the threads per block,
    /// `(G / F) * T >= 32 * W_SM * N_SM` for merging factor `F` (merging divides the `x`
    /// extent), made polynomial through each extent's lower bound `n / d`
    /// ([`extent_lower_bound`]): `n_x * n_y * n_z * T >= F * 32 * W_SM * N_SM * d_x * d_y * d_z`,
    /// which implies it. The `x` extent's bound is required; a `y` or `z` extent enters the
    /// product only where its bound reads parameters alone and the region keeps its numerator
    /// nonnegative (a product of lower bounds is a lower bound of the product only then);
    /// otherwise it counts as 1, which a grid that launches anything meets. `None` where the `x`
    /// extent has no such bound or the region does not keep its divisors positive.
    pub(super) fn grid_fills_device(&self, node: &Node) -> Option<Constraint> {
        // The dispatcher decides the gate from the function's integer parameters: a grid that
        // a host loop's counter sizes (`n - t` inside `for (t ...)`) is not merged.
        let params = self.function.integer_parameters();
        let reads_parameters_only = |p: &Poly| p.vars().iter().all(|v| params.iter().any(|n| n == v.name()));
        let usable = |bound: &crate::strategy::merge::LowerBound| {
            reads_parameters_only(&bound.num)
                && reads_parameters_only(&bound.den)
                && bound.requires.iter().all(|c| reads_parameters_only(c.poly()))
                && bound.requires.iter().all(|c| self.holds_throughout(node, c))
        };
        let bound = extent_lower_bound(node.staged.grid.first()?, self.function)?;
        if !usable(&bound) {
            return None;
        }
        let (mut num, mut den) = (bound.num, bound.den);
        for extent in node.staged.grid.iter().skip(1) {
            let Some(other) = extent_lower_bound(extent, self.function) else { continue };
            if usable(&other) && self.holds_throughout(node, &Constraint::ge(&other.num, &Poly::zero())) {
                num = &num * &other.num;
                den = &den * &other.den;
            }
        }
        let slots = Poly::int(MERGE_FACTOR * 32) * &Poly::var(&self.machine.warps_per_multiprocessor) * &Poly::var(&self.machine.multiprocessors);
        let excess = &(&num * &node.counters.threads_per_block) - &(&slots * &den);
        // Divided by the positive variables common to every term (`B1 * s`, say): the same
        // condition, of lower degree, which Z3's integer search decides much faster.
        let positive: Vec<(Var, u32)> = excess.common_monomial().factors().iter().filter(|(v, _)| self.holds_throughout(node, &Constraint::ge(&Poly::from_var(v.clone()), &Poly::one()))).cloned().collect();
        let common = positive.into_iter().fold(Poly::one(), |m, (v, e)| &m * &Poly::from_var(v).pow(e));
        Some(Constraint::ge(&excess.divide_exact(&common)?, &Poly::zero()))
    }

    /// The forks of node `at` on `gates`, one per gate the region does not decide, before
    /// strategy `s` makes `code` (evaluated as `ev`) of its code: each `accept` child goes on,
    /// each `refuse` child keeps the code as it is, so the strategy never costs a kernel. The
    /// `accept` subtree is built before its `refuse` sibling, so that the dispatcher, which
    /// takes the first leaf in node order that holds, tries the new code first. Every code
    /// that comes out is final ([`Builder::finish`]).
    pub(super) fn take_where_allowed(&mut self, at: usize, s: Strategy, code: Kernel, ev: Evaluated, gates: &[(Counter, Constraint)]) -> Result<(), String> {
        let Some(((counter, allows), rest)) = gates.split_first() else {
            let n = &mut self.nodes[at];
            take(n, s, code, ev);
            n.counters_left.clear();
            // Blocked and coarsened code still settles (it may be coarsened, unrolled, merged).
            return if matches!(s, Strategy::RegisterBlock | Strategy::Coarsen) { self.settle(at) } else { self.finish(at) };
        };
        let mut node = self.nodes[at].clone();
        let reads: &[&String] = match counter {
            Counter::Occupancy => &[&self.machine.registers_per_multiprocessor, &self.machine.warps_per_multiprocessor],
            Counter::GridFill => &[&self.machine.warps_per_multiprocessor, &self.machine.multiprocessors],
            _ => &[],
        };
        for m in reads {
            if !node.constraints.vars().contains(&Var::new(m)) {
                add_machine_symbol(&mut node.constraints, m);
                // The parent's model, extended to the new symbol (at its least value), still
                // solves the system: the branches below start from it.
                if let Some(w) = node.witness.as_mut() {
                    w.values.insert(Var::new(m), constraints::Rational::from_integer(1.into()));
                }
            }
        }
        let what = match s {
            Strategy::Merge => "merged code".to_string(),
            Strategy::RegisterBlock => "register-blocked code".to_string(),
            Strategy::Coarsen => "coarsened code".to_string(),
            _ => "code unrolled by 4".to_string(),
        };
        let registers = ev.counters.registers;
        let refuse = allows.negate();
        let accepted = self.branch(&node, allows, format!("accept {} of the {what} ({registers} registers): {allows}", counter.name()));
        let refused = self.branch(&node, &refuse, format!("refuse {} of the {what} ({registers} registers): {refuse}; not applied", counter.name()));
        match (accepted, refused) {
            (Some(_), None) => self.take_where_allowed(at, s, code, ev, rest),
            (None, _) => self.keep(at, s),
            (Some(accepted), Some(refused)) => {
                let next = self.child(at, ("accept", *counter, allows.clone()), accepted);
                self.take_where_allowed(next, s, code, ev, rest)?;
                let other = self.child(at, ("refuse", *counter, refuse), refused);
                self.keep(other, s)
            }
        }
    }
}
