//! The checks that license staging (two threads, two tiles) and the write-back replay.

use super::*;

pub(super) fn rename_poly(p: &Poly, rename: &BTreeSet<String>) -> Poly {
    let mut out = p.clone();
    for v in p.vars() {
        if rename.contains(v.name()) {
            out = out.substitute(&v, &Poly::var(&crate::names::copy_of(v.name(), "2")));
        }
    }
    out
}

pub(super) fn rename_constraint(c: &Constraint, rename: &BTreeSet<String>) -> Constraint {
    Constraint::new(rename_poly(c.poly(), rename), c.rel())
}


/// `sys` with a second thread added: its copy (`rename`d variables primed) of `context`, of its
/// own `guards` and of the domains, the first thread's `first_guards` as they are, and the equalities `mine == primed(theirs)` for each pair
/// in `same`; every variable left without a domain is an integer. The two-thread systems of
/// (a), (b) and (c) are all built here. (Constraints without a renamed variable come back
/// unchanged, and `System::add` drops duplicates.)
fn with_second<'p>(mut sys: System, context: &System, first_guards: &[Constraint], guards: &[Constraint], same: impl IntoIterator<Item = (&'p Poly, &'p Poly)>, rename: &BTreeSet<String>) -> System {
    for c in context.constraints() {
        sys.add(rename_constraint(c, rename));
    }
    for (v, d) in context.domains() {
        if rename.contains(v.name()) {
            sys.set_domain(Var::new(&crate::names::copy_of(v.name(), "2")), d.clone());
        }
    }
    first_guards.iter().for_each(|g| sys.add(g.clone()));
    guards.iter().for_each(|g| sys.add(rename_constraint(g, rename)));
    for (mine, theirs) in same {
        sys.add(Constraint::eq(mine, &rename_poly(theirs, rename)));
    }
    for v in sys.vars() {
        if !sys.domains().contains_key(&v) {
            sys.set_domain(v, Domain::integer());
        }
    }
    sys
}

impl Frame<'_> {
    /// The system where access `a` (one thread) and access `b` (another, its `rename`d
    /// variables primed) touch the same element.
    pub(super) fn pair_system(&self, col: &Collector, a: &Access, b: &Access, rename: &BTreeSet<String>) -> System {
        let same = a.indices.iter().zip(&b.indices).filter_map(|(x, y)| Some((x.as_ref()?, y.as_ref()?)));
        with_second(col.context.clone(), &col.context, &a.guards, &b.guards, same, rename)
    }

    /// Whether `sys` (two threads, the second's variables primed) has no solution where the
    /// two differ in `coords`: one Z3 query per first coordinate that differs (the ones before
    /// it equal), each unsat.
    fn apart(&self, sys: &System, coords: &[String]) -> bool {
        (0..coords.len()).all(|i| {
            let mut case = sys.clone();
            for same in &coords[..i] {
                case.add(Constraint::eq(&Poly::var(same), &Poly::var(&crate::names::copy_of(same, "2"))));
            }
            case.add(Constraint::ne(&Poly::var(&coords[i]), &Poly::var(&crate::names::copy_of(&coords[i], "2"))));
            self.unsat(&case)
        })
    }

    pub(super) fn unsat(&self, sys: &System) -> bool {
        self.backend.unsat_over_reals(sys) || matches!(self.backend.check(sys), CheckResult::Unsat)
    }

    pub(super) fn check_safety(&self, accesses: &[&Access], tiles: &[Tile], col: &Collector, local: &Locality, body: &[Stmt]) -> Result<(), String> {
        let array = &accesses[0].array;
        let writes: Vec<&Access> = accesses.iter().copied().filter(|a| a.write).collect();
        if writes.is_empty() {
            return Ok(());
        }
        // (a) Two distinct threads, in any blocks: every variable that is not a parameter is
        // primed; the threads differ in a first coordinate (blocks z, y, x, then threads).
        let mut everything: BTreeSet<String> = col.context.vars().iter().map(|v| v.name().to_string()).collect();
        for a in accesses {
            a.indices.iter().flatten().for_each(|p| everything.extend(p.vars().iter().map(|v| v.name().to_string())));
            a.guards.iter().for_each(|g| everything.extend(g.vars().iter().map(|v| v.name().to_string())));
        }
        let shared = self.shared_names(col);
        let threads: BTreeSet<String> = everything.iter().filter(|v| !shared.contains(*v)).cloned().collect();
        let mut coords: Vec<String> = (0..self.kernel.grid.len()).rev().map(block_var).collect();
        coords.extend((0..self.kernel.block.len()).rev().map(thread_var));
        let dims_of = |sp: Span| tiles.iter().flat_map(|t| &t.accesses).find(|x| x.span == sp).map(|x| x.index.clone());
        for w in &writes {
            for b in accesses {
                // One subscript, injective over the threads: distinct threads, distinct elements.
                let same = w.span == b.span || w.indices == b.indices;
                if same && dims_of(w.span).is_some_and(|d| self.injective(&d, &w.guards, local, &shared)) {
                    continue;
                }
                if !self.apart(&self.pair_system(col, w, b, &threads), &coords) {
                    return Err(format!("two threads may touch the same element of `{array}`, one of them writing it (not proved otherwise)"));
                }
            }
        }
        // (b) One thread, two tiles: only the scope's loop counters (and what depends on them)
        // differ between the two accesses.
        let tile_of = |s: Span| tiles.iter().position(|t| t.accesses.iter().any(|x| x.span == s));
        let iteration: BTreeSet<String> = local.local.iter().filter(|v| !matches!(builtin_of_var(v), Some(Builtin::ThreadIdx(_)))).cloned().collect();
        for w in &writes {
            for b in accesses {
                if tile_of(w.span) != tile_of(b.span) && !self.unsat(&self.pair_system(col, w, b, &iteration)) {
                    return Err(format!("a thread may write an element of `{array}` through one tile and access it through another"));
                }
            }
        }
        let spans: BTreeSet<Span> = writes.iter().map(|w| w.span).collect();
        replay(body, &|s| spans.contains(&s).then(|| e(ExprKind::Int(0))), &mut unreplayable(body)).map(|_| ())
    }
}

impl Frame<'_> {
    /// (c) The elements a block loads into each tile it reads (the tile's box, clipped to the
    /// array and the footprint) against every write of the array in the whole scope (every
    /// version) by a thread of another block: a box wider than the block's accesses (a read
    /// `a[i + 1]` only where `u < B - 1`) would otherwise load an element a neighbour block
    /// writes, a race whose value is unused but a race all the same. `guards` are the
    /// version's conditions (and the between loops' bounds) the loading block meets.
    pub(super) fn check_boxes(&self, tiles: &[Tile], col: &Collector, guards: &[Constraint]) -> Result<(), String> {
        let blocks: Vec<String> = (0..self.kernel.grid.len()).rev().map(block_var).collect();
        // The launch's own names (parameters and their quotients), never primed.
        let shared = self.shared_names(&self.scope_collector);
        for t in tiles.iter().filter(|t| t.read()) {
            let writes: Vec<&Access> = self.scope_collector.accesses.iter().filter(|a| a.array == t.array && (a.write || a.atomic)).collect();
            if writes.is_empty() {
                continue;
            }
            let Some((box_sys, element)) = self.loaded_elements(t, col, guards) else {
                return Err(format!("the elements a block loads into `{}`'s tile cannot be modelled", t.array));
            };
            for w in writes {
                let Some(index) = w.indices.iter().cloned().collect::<Option<Vec<Poly>>>() else {
                    return Err(format!("a subscript of the write `{}` is not a polynomial in the counters and parameters, so other blocks' writes cannot be kept apart from a block's tile", w.text));
                };
                // The writer: every variable that is not the launch's own primed.
                let mut names: BTreeSet<String> = self.scope_collector.context.vars().iter().map(|v| v.name().to_string()).collect();
                index.iter().for_each(|p| names.extend(p.vars().iter().map(|v| v.name().to_string())));
                w.guards.iter().for_each(|g| names.extend(g.vars().iter().map(|v| v.name().to_string())));
                let primed: BTreeSet<String> = names.into_iter().filter(|v| !shared.contains(v)).collect();
                let sys = with_second(box_sys.clone(), &self.scope_collector.context, &[], &w.guards, element.iter().zip(&index), &primed);
                // Another block: the blocks differ in a first coordinate (z, y, then x).
                if !self.apart(&sys, &blocks) {
                    return Err(format!(
                        "a block's tile of `{}` spans elements another block may write (its box is wider than the block's accesses; not proved otherwise), and loading them would race with that write",
                        t.array
                    ));
                }
            }
        }
        Ok(())
    }

    /// The elements one block loads into tile `t` (what `emit::load_loop` reads: the box, within
    /// the array and the footprint), as a system over fresh coordinates and the array
    /// subscripts those coordinates name; `None` when a size is not a polynomial.
    fn loaded_elements(&self, t: &Tile, col: &Collector, guards: &[Constraint]) -> Option<(System, Vec<Poly>)> {
        let (_, array_extents) = self.arrays.get(&t.array)?;
        let mut sys = col.context.clone();
        guards.iter().for_each(|g| sys.add(g.clone()));
        let coords: Vec<Poly> = (0..t.extents.len()).map(|d| Poly::var(&crate::names::internal(&format!("loaded{d}")))).collect();
        for (d, x) in coords.iter().enumerate() {
            sys.add(Constraint::ge(x, &t.origin[d]));
            sys.add(Constraint::lt(x, &(&t.origin[d] + &t.extents[d])));
        }
        let element = match &t.modulus {
            Some(m) => {
                sys.add(Constraint::ge(&coords[1], &Poly::zero()));
                sys.add(Constraint::lt(&coords[1], m));
                vec![&coords[0] * m + &coords[1]]
            }
            None => {
                for (d, x) in coords.iter().enumerate() {
                    let (lo, hi) = &t.footprint[d];
                    if let Some(lo) = lo {
                        sys.add(Constraint::ge(x, lo));
                    }
                    if let Some(hi) = hi {
                        sys.add(Constraint::le(x, hi));
                    }
                }
                coords.clone()
            }
        };
        if element.len() != array_extents.len() {
            return None;
        }
        for (x, n) in element.iter().zip(array_extents) {
            sys.add(Constraint::ge(x, &Poly::zero()));
            sys.add(Constraint::lt(x, n));
        }
        Some((sys, element))
    }
}

impl Frame<'_> {
    /// The kernel's parameters, and the quotients and remainders of parameters alone (`h % 2`,
    /// `(N - 2) / (B * s)`): one value for every thread, so not primed in a two-thread system
    /// and not a coordinate of an index. (Primed, two threads' parities of one `h` were equal
    /// only by integer reasoning Z3 gave up on.)
    fn shared_names(&self, col: &Collector) -> BTreeSet<String> {
        let mut shared: BTreeSet<String> = self.kernel.params.iter().map(|p| p.name.clone()).collect();
        loop {
            let known = shared.len();
            for (name, def) in &col.aux_defs {
                if def.dividend.vars().iter().chain(def.divisor.vars().iter()).all(|v| shared.contains(v.name())) {
                    shared.insert(name.clone());
                }
            }
            if shared.len() == known {
                return shared;
            }
        }
    }

    /// Whether an index (per dimension) takes distinct values for distinct threads, by the
    /// mixed-radix argument: in each dimension, `v1 + e1*(v2 + e2*(v3 + ...))` plus a uniform
    /// term, with `0 <= vi < ei` for all but the last, over disjoint variables that together
    /// determine the block and thread indices. No solver is needed, and none copes well with
    /// this nonlinear fact.
    pub(super) fn injective(&self, dims: &[Poly], guards: &[Constraint], local: &Locality, params: &BTreeSet<String>) -> bool {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for index in dims {
            // The coordinate variables and their coefficients (each of degree one in them).
            let mut coeffs: Vec<(String, Poly)> = Vec::new();
            for (m, c) in index.terms() {
                let coords: Vec<&(Var, u32)> = m.factors().iter().filter(|(v, _)| !params.contains(v.name())).collect();
                match coords.as_slice() {
                    [] => {}
                    [(v, 1)] => {
                        let k = Poly::term(c.clone(), m.clone()).substitute(v, &Poly::one());
                        match coeffs.iter_mut().find(|(n, _)| n == v.name()) {
                            Some((_, acc)) => *acc = &*acc + &k,
                            None => coeffs.push((v.name().to_string(), k)),
                        }
                    }
                    _ => return false,
                }
            }
            // Walk the radix: the unit coefficient first, then each next = previous * extent.
            let mut unit = Poly::one();
            let mut left = coeffs;
            while !left.is_empty() {
                let Some(i) = left.iter().position(|(_, k)| *k == unit) else { return false };
                let (v, _) = left.remove(i);
                if !seen.insert(v.clone()) {
                    return false;
                }
                if left.is_empty() {
                    break; // the most significant digit needs no upper bound
                }
                let Some((lo, hi)) = local.bounds(&v, guards, self) else { return false };
                if !lo.is_zero() {
                    return false;
                }
                unit = unit * (hi + Poly::one());
            }
        }
        // The digits must pin down every block and thread index.
        let mut known = seen.clone();
        for (name, def) in &local.aux {
            if def.quotient {
                let r = local.aux.iter().find(|(_, d)| !d.quotient && d.dividend == def.dividend && d.divisor == def.divisor).map(|(n, _)| n);
                if let (Some(r), Some(x)) = (r, def.dividend.as_var()) {
                    if seen.contains(name) && seen.contains(r) {
                        known.insert(x.name().to_string());
                    }
                }
            }
        }
        (0..self.kernel.grid.len()).map(block_var).chain((0..self.kernel.block.len()).map(thread_var)).all(|c| known.contains(&c))
    }
}

pub(super) fn assigned_in(body: &[Stmt]) -> BTreeSet<String> {
    body.iter().flat_map(assigned_scalars).collect()
}

/// The scalars the write-back cannot recompute (see [`replay`]), each with why: at first the
/// ones `body` assigns after declaring them.
pub(super) fn unreplayable(body: &[Stmt]) -> BTreeMap<String, &'static str> {
    assigned_in(body).into_iter().map(|n| (n, "which the body assigns after declaring it")).collect()
}

/// Why the write-back cannot compute `x`: it reads an array element, or a scalar `dropped`.
fn unreplayable_read(x: &Expr, dropped: &BTreeMap<String, &'static str>) -> Option<String> {
    if has_index(x) {
        return Some("data (an array element)".to_string());
    }
    let mut found = None;
    walk_expr(x, &mut |y| {
        if let ExprKind::Var(n) = &y.kind {
            if found.is_none() {
                found = dropped.get(n).map(|why| format!("`{n}`, {why}"));
            }
        }
    });
    found
}

/// The write-back: the body's control flow and integer definitions, with each write of a
/// staged element (`write_value` gives its tile expression) turned into a store of the tile's
/// final value; everything else dropped. Fails, saying which name or read is at fault, when a
/// kept guard, bound or subscript depends on array data or on a scalar in `dropped` (one the
/// body assigns, or a declaration not kept).
pub(super) fn replay(stmts: &[Stmt], write_value: &dyn Fn(Span) -> Option<Expr>, dropped: &mut BTreeMap<String, &'static str>) -> Result<Vec<Stmt>, String> {
    let mut out = Vec::new();
    for s in stmts {
        match &s.kind {
            StmtKind::Decl { ty, vars } => {
                let mut kept = Vec::new();
                for d in vars {
                    if !ty.is_integer() {
                        dropped.insert(d.name.name.clone(), "which is not an integer");
                    } else if unreplayable_read(&d.init, dropped).is_some() {
                        dropped.insert(d.name.name.clone(), "whose definition reads data");
                    } else {
                        kept.push(d.clone());
                    }
                }
                if !kept.is_empty() {
                    out.push(Stmt { kind: StmtKind::Decl { ty: *ty, vars: kept }, span: s.span });
                }
            }
            StmtKind::Assign { target, .. } => {
                if let ExprKind::Index { indices, .. } = &target.kind {
                    if let Some(v) = write_value(target.span) {
                        if let Some(what) = indices.iter().find_map(|i| unreplayable_read(i, dropped)) {
                            return Err(format!("the subscript of the staged write `{target}` reads {what}: the write-back, which replays only the body's integer declarations of known values, cannot recompute it"));
                        }
                        out.push(Stmt { kind: StmtKind::Assign { target: target.clone(), op: AssignOp::Set, value: v }, span: s.span });
                    }
                }
            }
            StmtKind::If { cond, then_branch, else_branch } => {
                let t = replay(std::slice::from_ref(then_branch), write_value, dropped)?;
                let f = match else_branch {
                    Some(x) => replay(std::slice::from_ref(x), write_value, dropped)?,
                    None => Vec::new(),
                };
                if t.is_empty() && f.is_empty() {
                    continue;
                }
                if let Some(what) = unreplayable_read(cond, dropped) {
                    return Err(format!("a staged write is guarded by a condition on {what}: the write-back, which replays only the body's integer declarations of known values, cannot recompute it"));
                }
                out.push(st(StmtKind::If {
                    cond: cond.clone(),
                    then_branch: Box::new(st(StmtKind::Block(t))),
                    else_branch: (!f.is_empty()).then(|| Box::new(st(StmtKind::Block(f)))),
                }));
            }
            StmtKind::For(l) => {
                let inner = replay(std::slice::from_ref(&l.body), write_value, dropped)?;
                if inner.is_empty() {
                    continue;
                }
                if let Some(what) = unreplayable_read(&l.lo, dropped).or_else(|| unreplayable_read(&l.hi, dropped)) {
                    return Err(format!("the bounds of loop `{}` around a staged write read {what}: the write-back, which replays only the body's integer declarations of known values, cannot recompute them", l.var.name));
                }
                out.push(st(StmtKind::For(ForLoop { body: Box::new(st(StmtKind::Block(inner))), ..l.clone() })));
            }
            StmtKind::Block(items) => {
                let inner = replay(items, write_value, dropped)?;
                if !inner.is_empty() {
                    out.push(st(StmtKind::Block(inner)));
                }
            }
            _ => {}
        }
    }
    Ok(out)
}
