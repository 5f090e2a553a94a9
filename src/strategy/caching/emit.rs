//! Shared slots across versions and the staged code: loads, rewritten body, write-back.

use super::*;

pub(super) struct Slots {
    pub(super) arrays: Vec<SharedArray>,
    /// Per plan, per tile: the slot's name.
    pub(super) names: Vec<Vec<String>>,
    /// Per slot, the arrays whose tiles it holds.
    pub(super) users: Vec<BTreeSet<String>>,
}

impl Frame<'_> {
    pub(super) fn slots(&self, plans: &[Plan]) -> Result<Slots, String> {
        // (element type, k) -> candidate sizes and the arrays whose tiles use it.
        let mut keys: Vec<(ScalarType, usize)> = Vec::new();
        let mut sizes: Vec<Vec<Poly>> = Vec::new();
        let mut users: Vec<BTreeSet<String>> = Vec::new();
        let mut per_plan: Vec<Vec<usize>> = Vec::new();
        for plan in plans {
            let mut count: BTreeMap<ScalarType, usize> = BTreeMap::new();
            let mut ids = Vec::new();
            for t in &plan.tiles {
                let k = count.entry(t.elem).or_insert(0);
                let key = (t.elem, *k);
                *k += 1;
                let id = match keys.iter().position(|x| *x == key) {
                    Some(i) => i,
                    None => {
                        keys.push(key);
                        sizes.push(Vec::new());
                        users.push(BTreeSet::new());
                        keys.len() - 1
                    }
                };
                sizes[id].push(t.storage());
                users[id].insert(t.array.clone());
                ids.push(id);
            }
            per_plan.push(ids);
        }
        let ctx = &self.collector.context;
        let mut names = Vec::new();
        let mut arrays = Vec::new();
        let mut per_array: BTreeMap<String, usize> = BTreeMap::new();
        for (id, (elem, _)) in keys.iter().enumerate() {
            // The largest size when Z3 orders them; otherwise their sum, which is enough.
            let mut size = sizes[id][0].clone();
            for s in &sizes[id][1..] {
                size = self.order(&size, s, ctx, false).unwrap_or_else(|| &size + s);
            }
            let name = if users[id].len() == 1 {
                let a = users[id].iter().next().cloned().unwrap_or_default();
                let n = per_array.entry(a.clone()).or_insert(0);
                *n += 1;
                crate::names::readable(&format!("{a}_tile{}", *n - 1))
            } else {
                crate::names::internal(&format!("tile{id}"))
            };
            names.push(name.clone());
            arrays.push(SharedArray { name, elem: *elem, extents: vec![size] });
        }
        let names = per_plan.iter().map(|ids| ids.iter().map(|i| names[*i].clone()).collect()).collect();
        Ok(Slots { arrays, names, users })
    }

    /// A polynomial of the model as a C expression of the kernel's names.
    pub(super) fn to_c(&self, p: &Poly, aux: &BTreeMap<String, crate::access::AuxDef>) -> Result<Expr, String> {
        let mut x = poly_expr(p)?;
        let mut failure = None;
        map_expr(&mut x, &mut |y| {
            let ExprKind::Var(n) = &y.kind else { return };
            if let Some(b @ (Builtin::ThreadIdx(_) | Builtin::BlockIdx(_))) = builtin_of_var(n) {
                // `blockIdx.x * B` in `int` where the program's `v * B` is `long`: cast. (A
                // thread index times a block extent stays within a tile, far below 2^31.)
                let long = self.long_indices && matches!(b, Builtin::BlockIdx(_));
                y.kind = if long { ExprKind::Cast(ScalarType::Long, Box::new(e(ExprKind::Builtin(b)))) } else { ExprKind::Builtin(b) };
            } else if let Some(def) = aux.get(n) {
                match (self.to_c(&def.dividend, aux), self.to_c(&def.divisor, aux)) {
                    (Ok(a), Ok(b)) => y.kind = ExprKind::Binary(if def.quotient { BinOp::Div } else { BinOp::Rem }, Box::new(a), Box::new(b)),
                    (Err(m), _) | (_, Err(m)) => failure = Some(m),
                }
            }
        });
        match failure {
            Some(m) => Err(m),
            None => Ok(x),
        }
    }

    /// The linear thread index within the block, and the number of threads.
    pub(super) fn thread_rank(&self) -> Result<(Expr, Expr), String> {
        let dims = self.kernel.block.len();
        let mut rank = e(ExprKind::Builtin(Builtin::ThreadIdx(dims as u8 - 1)));
        for d in (0..dims - 1).rev() {
            let extent = poly_expr(&self.kernel.block[d])?;
            rank = bin(BinOp::Add, bin(BinOp::Mul, rank, extent), e(ExprKind::Builtin(Builtin::ThreadIdx(d as u8))));
        }
        Ok((rank, poly_expr(&self.kernel.threads_per_block())?))
    }

    pub(super) fn emit_version(&self, index: usize, plan: &Plan, slots: &Slots) -> Result<Vec<Stmt>, String> {
        let names = &slots.names[index];
        let aux = &plan.aux;
        let (rank, nthreads) = self.thread_rank()?;
        // A body that does nothing unless a condition on the block holds (a triangle's `w <= v`)
        // is staged inside that condition: the other blocks load no tile. Not inside the loops
        // between the grid and the block: there the barriers' count per iteration would depend
        // on the block, which the verifier's phases do not model (trmm's leaves went from
        // proved to unverified), and those loops are usually empty for an idle block anyway.
        let hoisted = if self.kernel.between == 0 { block_guard(&plan.body, &self.block_uniform) } else { None };
        let (guard, body_src) = match hoisted {
            Some((cond, inner)) => (Some(cond), inner),
            None => (None, plan.body.clone()),
        };
        let mut out = Vec::new();
        // Loads: all threads, row-major over each tile that is read, within the array.
        for (t, slot) in plan.tiles.iter().zip(names) {
            if !t.read() {
                continue;
            }
            out.push(self.load_loop(t, slot, aux, &rank, &nthreads)?);
        }
        if plan.tiles.iter().any(Tile::read) {
            out.push(st(StmtKind::Barrier));
        }
        // The body, every access of a staged array rewritten to its tile.
        let mut at: BTreeMap<Span, Expr> = BTreeMap::new();
        for (t, slot) in plan.tiles.iter().zip(names) {
            for a in &t.accesses {
                let pos = self.to_c(&t.position(a), aux)?;
                at.insert(a.span, e(ExprKind::Index { array: ident(slot), indices: vec![pos] }));
            }
        }
        let mut body = body_src.clone();
        for s in body.iter_mut() {
            map_stmt_exprs(s, &mut |x| {
                if let Some(r) = at.get(&x.span) {
                    if matches!(x.kind, ExprKind::Index { .. }) {
                        *x = r.clone();
                    }
                }
            });
        }
        out.extend(body);
        // Write-back: each thread stores the final value of what it wrote.
        let written: BTreeMap<Span, Expr> = plan
            .tiles
            .iter()
            .flat_map(|t| t.accesses.iter().filter(|a| a.write).map(|a| (a.span, at[&a.span].clone())))
            .collect();
        if !written.is_empty() {
            out.push(st(StmtKind::Barrier));
            let replayed = replay(&body_src, &|s| written.get(&s).cloned(), &mut unreplayable(&body_src))?;
            // The replay repeats the body's integer definitions (`int p = i * B + j;`): in a
            // block of its own, so that C sees no name declared twice in one scope.
            if replayed.iter().any(|s| matches!(s.kind, StmtKind::Decl { .. })) {
                out.push(st(StmtKind::Block(replayed)));
            } else {
                out.extend(replayed);
            }
        }
        if let Some(cond) = guard {
            // Every thread of a block takes the same branch, so the barriers inside are reached
            // by all of the block's threads or by none.
            out = vec![st(StmtKind::If { cond, then_branch: Box::new(st(StmtKind::Block(out))), else_branch: None })];
        }
        if self.kernel.between > 0 && !plan.tiles.is_empty() {
            out.push(st(StmtKind::Barrier)); // the next iteration's loads overwrite the tiles
        }
        // A body that ends with the block's join (`join`) meets the barrier above: one is enough.
        out.dedup_by(|b, a| matches!(a.kind, StmtKind::Barrier) && matches!(b.kind, StmtKind::Barrier));
        Ok(out)
    }

    /// `for (it = 0; it < ceil(n / T); it++) { e = it*T + rank; if (e < n) { ... } }`.
    pub(super) fn load_loop(&self, t: &Tile, slot: &str, aux: &BTreeMap<String, crate::access::AuxDef>, rank: &Expr, nthreads: &Expr) -> Result<Stmt, String> {
        let n = poly_expr(&t.elements())?;
        let trips = bin(BinOp::Div, bin(BinOp::Sub, bin(BinOp::Add, n.clone(), nthreads.clone()), e(ExprKind::Int(1))), nthreads.clone());
        let mut inner = vec![long_decl("$e", bin(BinOp::Add, bin(BinOp::Mul, var("$it"), nthreads.clone()), rank.clone()))];
        let mut guarded = Vec::new();
        let r = t.extents.len();
        let mut stride = Poly::one();
        let mut coords = vec![Expr::new(ExprKind::Int(0), Span::default()); r];
        for d in (0..r).rev() {
            let pos = if stride.as_constant().is_some_and(|c| c == Rational::from_integer(1.into())) { var("$e") } else { bin(BinOp::Div, var("$e"), poly_expr(&stride)?) };
            let c = if d == 0 { pos } else { bin(BinOp::Rem, pos, poly_expr(&t.extents[d])?) };
            let name = crate::names::internal(&format!("g{d}"));
            guarded.push(long_decl(&name, bin(BinOp::Add, self.to_c(&t.origin[d], aux)?, c)));
            coords[d] = var(&name);
            stride = stride * &t.extents[d];
        }
        guarded.reverse();
        let (_, extents) = &self.arrays[&t.array];
        let within = |x: Expr, hi: Expr| bin(BinOp::And, bin(BinOp::Ge, x.clone(), e(ExprKind::Int(0))), bin(BinOp::Lt, x, hi));
        let (index, mut cond): (Vec<Expr>, Option<Expr>) = match &t.modulus {
            Some(m) => {
                let flat = bin(BinOp::Add, bin(BinOp::Mul, coords[0].clone(), self.to_c(m, aux)?), coords[1].clone());
                let c = bin(BinOp::And, within(coords[1].clone(), self.to_c(m, aux)?), within(flat.clone(), poly_expr(&extents[0])?));
                (vec![flat], Some(c))
            }
            None => {
                let mut c: Option<Expr> = None;
                for (d, x) in coords.iter().enumerate() {
                    let mut w = within(x.clone(), poly_expr(&extents[d])?);
                    let (lo, hi) = &t.footprint[d];
                    // (A bound the array's own already implies is left out.)
                    if let Some(lo) = lo.as_ref().filter(|lo| !lo.is_zero()) {
                        w = bin(BinOp::And, w, bin(BinOp::Ge, x.clone(), self.to_c(lo, aux)?));
                    }
                    if let Some(hi) = hi.as_ref().filter(|hi| **hi != &extents[d] - &Poly::one()) {
                        w = bin(BinOp::And, w, bin(BinOp::Le, x.clone(), self.to_c(hi, aux)?));
                    }
                    c = Some(match c {
                        None => w,
                        Some(acc) => bin(BinOp::And, acc, w),
                    });
                }
                (coords.clone(), c)
            }
        };
        // Element e of the tile sits at e in the slot, or, with rows padded by one, at
        // e + e / W (W the row's length): (e / W)*(W + 1) + e % W.
        // Transposed, element (e / W, e % W) sits at (e % W)*H + e / W (H the stored column's
        // length).
        let at = match (t.padded, t.extents.last()) {
            _ if t.transposed => {
                let w = poly_expr(&t.extents[1])?;
                bin(BinOp::Add, bin(BinOp::Mul, bin(BinOp::Rem, var("$e"), w.clone()), poly_expr(&t.storage_extents()[0])?), bin(BinOp::Div, var("$e"), w))
            }
            (true, Some(w)) => bin(BinOp::Add, var("$e"), bin(BinOp::Div, var("$e"), poly_expr(w)?)),
            _ => var("$e"),
        };
        let copy = st(StmtKind::Assign {
            target: e(ExprKind::Index { array: ident(slot), indices: vec![at] }),
            op: AssignOp::Set,
            value: e(ExprKind::Index { array: ident(&t.array), indices: index }),
        });
        guarded.push(match cond.take() {
            Some(c) => st(StmtKind::If { cond: c, then_branch: Box::new(copy), else_branch: None }),
            None => copy,
        });
        inner.push(st(StmtKind::If {
            cond: bin(BinOp::Lt, var("$e"), n),
            then_branch: Box::new(st(StmtKind::Block(guarded))),
            else_branch: None,
        }));
        Ok(st(StmtKind::For(ForLoop {
            var: ident("$it"),
            ty: ScalarType::Long,
            lo: e(ExprKind::Int(0)),
            hi: trips,
            inclusive: false,
            step: 1,
            body: Box::new(st(StmtKind::Block(inner))),
        })))
    }
}

/// `decls...; if (c) S` where `c` is the same for every thread of a block (`block_uniform`
/// names only, none the body declares or assigns) and the declarations read no array and call
/// nothing: then the body does nothing where `c` fails, and it is `(c, [decls..., S])`.
/// Trailing barriers after the `if` (the block's join) stay with it. `None` otherwise.
pub(super) fn block_guard(body: &[Stmt], block_uniform: &BTreeSet<String>) -> Option<(Expr, Vec<Stmt>)> {
    let mut end = body.len();
    while end > 0 && matches!(body[end - 1].kind, StmtKind::Barrier) {
        end -= 1;
    }
    let (last, decls) = body[..end].split_last()?;
    let StmtKind::If { cond, then_branch, else_branch: None } = &last.kind else { return None };
    if !decls.iter().all(|s| matches!(s.kind, StmtKind::Decl { .. }) && does_nothing(s)) {
        return None;
    }
    let mut local = declared_names(body);
    local.extend(assigned_in(body));
    if !is_uniform(cond, block_uniform, &local) {
        return None;
    }
    let mut inner = decls.to_vec();
    inner.push((**then_branch).clone());
    inner.extend(body[end..].iter().cloned());
    Some((cond.clone(), inner))
}
