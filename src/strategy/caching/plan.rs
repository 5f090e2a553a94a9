//! Planning one version: group accesses into tiles (base and local parts, delinearisation) and
//! bound each tile's extent over a block.

use super::*;

/// One access of a cached array, read against its tile.
#[derive(Clone, Debug)]
pub(super) struct TileAccess {
    pub(super) span: Span,
    /// The local part of each tile dimension's index, less the tile's minimum.
    pub(super) offset: Vec<Poly>,
    /// The index per tile dimension (after delinearisation), whole.
    pub(super) index: Vec<Poly>,
    pub(super) write: bool,
}

#[derive(Clone, Debug)]
pub(super) struct Tile {
    pub(super) array: String,
    pub(super) elem: ScalarType,
    /// A one-dimensional array read as `[P][Q]`, `Q` in `[0, M)`: the modulus `M`.
    pub(super) modulus: Option<Poly>,
    /// The tile's first element, per dimension (uniform over the block).
    pub(super) origin: Vec<Poly>,
    pub(super) extents: Vec<Poly>,
    /// Per dimension, the range `[lo, hi]` of elements the block's guarded accesses can touch,
    /// uniform over the block, when every access's guards bound it (see
    /// [`Locality::guarded_range`]). Loads skip the rest of the tile's box: those elements
    /// are never used, and reading them would race with other blocks' writes.
    pub(super) footprint: Vec<(Option<Poly>, Option<Poly>)>,
    pub(super) accesses: Vec<TileAccess>,
    /// Rows one element longer than the tile (the bank-conflict strategy, `Kernel::pad_shared`).
    pub(super) padded: bool,
    /// A two-dimensional tile stored column by column (see [`reads_down_columns`]).
    pub(super) transposed: bool,
    /// Elements a transposed tile's columns are padded by ([`COLUMN_PAD`], or 0 under
    /// `Kernel::unpadded_columns`).
    pub(super) column_pad: i64,
}

impl Tile {
    /// The tile's elements (what the loads fill).
    pub(super) fn elements(&self) -> Poly {
        self.extents.iter().fold(Poly::one(), |a, x| a * x)
    }
    /// The extents as stored: the last one a row's length, padded or not (transposed: the
    /// first one a column's length, padded by `column_pad`).
    pub(super) fn storage_extents(&self) -> Vec<Poly> {
        let mut e = self.extents.clone();
        if self.transposed {
            e[0] = &e[0] + &Poly::int(self.column_pad);
            return e;
        }
        if self.padded {
            if let Some(last) = e.last_mut() {
                *last = &*last + &Poly::one();
            }
        }
        e
    }
    /// The elements the shared slot must hold.
    pub(super) fn storage(&self) -> Poly {
        self.storage_extents().iter().fold(Poly::one(), |a, x| a * x)
    }
    /// The position in the slot of local coordinates: row-major, or column-major when
    /// transposed.
    pub(super) fn position_of(&self, coords: &[Poly]) -> Poly {
        let extents = self.storage_extents();
        if self.transposed {
            return &coords[1] * &extents[0] + &coords[0];
        }
        let mut pos = Poly::zero();
        for (d, c) in coords.iter().enumerate() {
            pos = pos * &extents[d] + c;
        }
        pos
    }
    pub(super) fn read(&self) -> bool {
        self.accesses.iter().any(|a| !a.write)
    }
    /// The position in the tile of an access.
    pub(super) fn position(&self, acc: &TileAccess) -> Poly {
        self.position_of(&acc.offset)
    }
}

pub(super) struct Plan {
    /// The version's body, its cached arrays' expressions labelled.
    pub(super) body: Vec<Stmt>,
    pub(super) tiles: Vec<Tile>,
    pub(super) refused: Vec<(String, String)>,
    /// Auxiliary integers of the model (for writing tile positions as C).
    pub(super) aux: BTreeMap<String, crate::access::AuxDef>,
}

/// Accesses sharing a tile: (modulus, base, and per access its span, local parts, index,
/// whether it writes, and its guards).
pub(super) type Group = (Option<Poly>, Vec<Poly>, Vec<(Span, Vec<Poly>, Vec<Poly>, bool, Vec<Constraint>)>);

/// An access's dimensions after delinearisation: per dimension, its index polynomial.
pub(super) struct Dims {
    pub(super) modulus: Option<Poly>,
    pub(super) index: Vec<Poly>,
}

impl Frame<'_> {
    /// The plan of a version's `body`, chosen where each condition of `path` holds (or fails).
    pub(super) fn plan(&self, body: &[Stmt], path: &[(Expr, bool)], cache: &[String]) -> Result<Plan, String> {
        let body = label(body, cache);
        let mut col = Collector::new(self.backend, self.collector.context.clone());
        col.aux_defs = self.collector.aux_defs.clone();
        col.floating = self.collector.floating.clone();
        let mut env = self.env.clone();
        // The version's conditions hold throughout its body (a condition left out only
        // weakens the guards: more accesses meet, never fewer).
        let mut guards = self.guards.clone();
        for (cond, holds) in path {
            let more = col.condition(cond, *holds, &env, &guards);
            guards.extend(more);
        }
        col.stmts(&body, &mut env, &guards);
        let counters = loop_counters(&body);
        let local = Locality::new(&counters, &col.aux_defs, self.kernel.block.len());
        let mut plan = Plan { body: body.clone(), tiles: Vec::new(), refused: Vec::new(), aux: col.aux_defs.clone() };
        for array in cache {
            let accesses: Vec<&Access> = col.accesses.iter().filter(|a| a.array == *array).collect();
            if accesses.is_empty() {
                continue;
            }
            match self.tiles_of(array, &accesses, &col, &local) {
                Ok(tiles) => match self.check_safety(&accesses, &tiles, &col, &local, &body).and_then(|()| self.check_boxes(&tiles, &col, &guards)) {
                    Ok(()) => plan.tiles.extend(tiles),
                    Err(why) => plan.refused.push((array.clone(), why)),
                },
                Err(why) => plan.refused.push((array.clone(), why)),
            }
        }
        Ok(plan)
    }

    pub(super) fn tiles_of(&self, array: &str, accesses: &[&Access], col: &Collector, local: &Locality) -> Result<Vec<Tile>, String> {
        let (elem, extents) = self.arrays.get(array).cloned().ok_or_else(|| format!("`{array}` is not an array parameter"))?;
        if accesses.iter().any(|a| a.atomic) {
            return Err(format!("`{array}` is a reduction's target (other blocks add to its elements): a block's copy in shared memory would lose their additions"));
        }
        // Group by (modulus, base); keep each access's local part.
        let mut groups: Vec<Group> = Vec::new();
        for a in accesses {
            let index: Vec<Poly> = a.indices.iter().cloned().collect::<Option<_>>().ok_or_else(|| format!("a subscript of `{}` is not a polynomial in the counters and parameters (a value read from memory, chosen by `?:`, `min` or `max`, or set in a branch or loop)", a.text))?;
            let dims = self.delinearise(&index, &extents, a, col, local);
            let mut base = Vec::new();
            let mut parts = Vec::new();
            for p in &dims.index {
                let (b, l) = local.split(p);
                base.push(b);
                parts.push(l);
            }
            match groups.iter_mut().find(|g| g.0 == dims.modulus && g.1 == base) {
                Some(g) => g.2.push((a.span, parts, dims.index.clone(), a.write, a.guards.clone())),
                None => groups.push((dims.modulus, base, vec![(a.span, parts, dims.index.clone(), a.write, a.guards.clone())])),
            }
        }
        let ctx = &self.collector.context;
        let mut tiles = Vec::new();
        for (modulus, base, members) in groups {
            let rank = base.len();
            let mut lo: Vec<Option<Poly>> = vec![None; rank];
            let mut hi: Vec<Option<Poly>> = vec![None; rank];
            for (span, parts, _, _, guards) in &members {
                for d in 0..rank {
                    // The access as the program writes it: the subscript's polynomial may hold
                    // the model's own names (a quotient's `$aux_q...`).
                    let written = accesses.iter().find(|a| a.span == *span).map_or_else(|| format!("`{array}`"), |a| format!("`{}`", a.text));
                    // A division of a value of either sign (C's, truncated toward zero) is a
                    // pair of model names the staged code has no expression for.
                    let truncated = |v: &constraints::Var| v.name().starts_with(crate::access::AUX_TRUNCATED_QUOTIENT) || v.name().starts_with(crate::access::AUX_TRUNCATED_REMAINDER);
                    if parts[d].vars().iter().any(truncated) || base[d].vars().iter().any(truncated) {
                        return Err(format!("subscript {} of {written} divides a value that may be negative (C rounds it toward zero), which a tile's index cannot follow", d + 1));
                    }
                    let (l, h) = local.range(&parts[d], guards, ctx, self).ok_or_else(|| format!("the range over a block of subscript {} of {written} is not known", d + 1))?;
                    lo[d] = Some(match lo[d].take() {
                        None => l,
                        Some(x) => self.order(&x, &l, ctx, true).ok_or_else(|| format!("the lower bounds over a block of subscript {} of `{array}`'s accesses cannot be ordered", d + 1))?,
                    });
                    hi[d] = Some(match hi[d].take() {
                        None => h,
                        Some(x) => self.order(&x, &h, ctx, false).ok_or_else(|| format!("the upper bounds over a block of subscript {} of `{array}`'s accesses cannot be ordered", d + 1))?,
                    });
                }
            }
            let lo: Vec<Poly> = lo.into_iter().map(|x| x.unwrap_or_else(Poly::zero)).collect();
            let hi: Vec<Poly> = hi.into_iter().map(|x| x.unwrap_or_else(Poly::zero)).collect();
            let extents: Vec<Poly> = (0..rank).map(|d| &hi[d] - &lo[d] + Poly::one()).collect();
            // A range empty for some parameter values (`k < t - 5` with `TS <= 5`) would give
            // a tile of negative size, and the next tile an origin before shared memory's
            // start: the facts must make every extent at least zero (an empty tile, `nk*BD`
            // k-tiles of a loop that may run none, holds nothing and moves nothing).
            // An extent reading the model's own names (a quotient of the subscripts) is
            // refused with its own reason where the shared slots are laid out.
            for (d, extent) in extents.iter().enumerate() {
                let vars = extent.vars();
                if vars.iter().any(|v| crate::names::is_internal(v.name())) {
                    continue;
                }
                // A counter of a loop around the schedule has no fact bounding it here, and
                // the tree could not key a tile on it anyway: say that, not "negative".
                if let Some(v) = vars.iter().find(|v| self.kernel.host_loops.iter().any(|l| l.var == v.name())) {
                    return Err(format!("its tile over a block would hold `{extent}` elements along subscript {} of `{array}`: that reads `{}`, the counter of a loop around the schedule, which the tree's constraints on shared memory cannot name: bound the loop by a parameter or a scalar defined before the loop", d + 1, v.name()));
                }
                if !self.proves(ctx, &Constraint::ge(extent, &Poly::zero())) {
                    return Err(format!("its tile over a block would hold `{extent}` elements along subscript {} of `{array}`, which the program's facts allow to be negative (its accesses run over no element there): state the fact that rules it out with `assume(...)`", d + 1));
                }
            }
            let origin: Vec<Poly> = (0..rank).map(|d| &base[d] + &lo[d]).collect();
            let footprint = if modulus.is_some() {
                vec![(None, None); rank]
            } else {
                (0..rank).map(|d| self.footprint(members.iter().map(|(_, _, index, _, guards)| (&index[d], guards.as_slice())), local)).collect()
            };
            let accesses = members
                .into_iter()
                .map(|(span, parts, index, write, _)| TileAccess { span, offset: (0..rank).map(|d| &parts[d] - &lo[d]).collect(), index, write })
                .collect();
            let padded = self.kernel.pad_shared && rank >= 2;
            tiles.push(Tile { array: array.to_string(), elem, modulus, origin, extents, footprint, accesses, padded, transposed: false, column_pad: 0 });
        }
        let mut tiles = merge_adjacent(tiles);
        for t in &mut tiles {
            t.transposed = reads_down_columns(t, local);
            t.column_pad = if t.transposed && !self.kernel.unpadded_columns { COLUMN_PAD } else { 0 };
        }
        Ok(tiles)
    }

    /// The union of the accesses' guarded ranges in one dimension: the least lower bound and
    /// the greatest upper bound, each only when every access has one and Z3 orders them.
    fn footprint<'a>(&self, accesses: impl Iterator<Item = (&'a Poly, &'a [Constraint])>, local: &Locality) -> (Option<Poly>, Option<Poly>) {
        let ctx = &self.collector.context;
        let (mut lo, mut hi): (Option<Option<Poly>>, Option<Option<Poly>>) = (None, None);
        for (index, guards) in accesses {
            for (upper, acc) in [(false, &mut lo), (true, &mut hi)] {
                let bound = local.guarded_range(index, guards, upper);
                *acc = Some(match (acc.take(), bound) {
                    (None, b) => b,
                    (Some(Some(a)), Some(b)) => self.order(&a, &b, ctx, !upper),
                    _ => None,
                });
            }
        }
        (lo.flatten(), hi.flatten())
    }

    /// `lo`/`hi` of two candidates: the smaller (`min`) or larger, when Z3 orders them.
    pub(super) fn order(&self, a: &Poly, b: &Poly, ctx: &System, min: bool) -> Option<Poly> {
        if a == b {
            return Some(a.clone());
        }
        if let Some(d) = (a - b).as_constant() {
            let a_smaller = d <= Rational::from_integer(0.into());
            return Some(if a_smaller == min { a.clone() } else { b.clone() });
        }
        if self.proves(ctx, &Constraint::le(a, b)) {
            return Some(if min { a.clone() } else { b.clone() });
        }
        if self.proves(ctx, &Constraint::le(b, a)) {
            return Some(if min { b.clone() } else { a.clone() });
        }
        None
    }

    /// A one-dimensional subscript `P*M + Q` with a parameter `M` that divides the array's
    /// extent, `0 <= Q < M` proved and `P` varying within the block, read as two dimensions.
    pub(super) fn delinearise(&self, index: &[Poly], extents: &[Poly], a: &Access, col: &Collector, local: &Locality) -> Dims {
        let plain = Dims { modulus: None, index: index.to_vec() };
        if index.len() != 1 || extents.len() != 1 {
            return plain;
        }
        let i = &index[0];
        let mut ctx = col.context.clone();
        a.guards.iter().for_each(|g| ctx.add(g.clone()));
        for m in i.vars() {
            // M must be a parameter dividing the extent (the array is then an [extent/M][M]).
            if !self.uniform.contains(m.name()) || local.is_local(m.name()) || !extents[0].terms().all(|(mono, _)| mono.exponent(&m) >= 1) {
                continue;
            }
            let mp = Poly::from_var(m.clone());
            let (mut p, mut q) = (Poly::zero(), Poly::zero());
            for (mono, c) in i.terms() {
                let t = Poly::term(c.clone(), mono.clone());
                if mono.exponent(&m) >= 1 {
                    let mut divided = Poly::constant(c.clone());
                    for (v, e) in mono.factors() {
                        let k = if *v == m { e - 1 } else { *e };
                        divided = divided * Poly::from_var(v.clone()).pow(k);
                    }
                    p = p + divided;
                } else {
                    q = q + t;
                }
            }
            if !p.vars().iter().any(|v| local.is_local(v.name())) {
                continue;
            }
            if self.proves(&ctx, &Constraint::ge(&q, &Poly::zero())) && self.proves(&ctx, &Constraint::lt(&q, &mp)) {
                return Dims { modulus: Some(mp), index: vec![p, q] };
            }
        }
        plain
    }
}

/// Which variables vary within a block: the thread indices, the scope's loop counters, and
/// auxiliary integers defined from them.
pub(super) struct Locality {
    pub(super) local: BTreeSet<String>,
    pub(super) aux: BTreeMap<String, crate::access::AuxDef>,
}

impl Locality {
    pub(super) fn new(counters: &BTreeSet<String>, aux: &BTreeMap<String, crate::access::AuxDef>, block_dims: usize) -> Locality {
        let mut local: BTreeSet<String> = counters.clone();
        local.extend((0..block_dims.max(3)).map(thread_var));
        // Auxiliaries are defined in order of need; iterate to a fixed point.
        loop {
            let before = local.len();
            for (name, def) in aux {
                if def.dividend.vars().iter().chain(def.divisor.vars().iter()).any(|v| local.contains(v.name())) {
                    local.insert(name.clone());
                }
            }
            if local.len() == before {
                break;
            }
        }
        Locality { local, aux: aux.clone() }
    }

    pub(super) fn is_local(&self, name: &str) -> bool {
        self.local.contains(name)
    }

    /// (base, local part): the base holds the terms free of local variables, less constants.
    pub(super) fn split(&self, p: &Poly) -> (Poly, Poly) {
        let (mut base, mut part) = (Poly::zero(), Poly::zero());
        for (m, c) in p.terms() {
            let t = Poly::term(c.clone(), m.clone());
            if !m.is_one() && !m.factors().iter().any(|(v, _)| self.is_local(v.name())) {
                base = base + t;
            } else {
                part = part + t;
            }
        }
        (base, part)
    }

    /// The range `[lo, hi]` of an affine local part, from its variables' bounds.
    pub(super) fn range(&self, part: &Poly, guards: &[Constraint], ctx: &System, frame: &Frame) -> Option<(Poly, Poly)> {
        let (mut lo, mut hi) = (Poly::zero(), Poly::zero());
        for (m, c) in part.terms() {
            let locals: Vec<&(Var, u32)> = m.factors().iter().filter(|(v, _)| self.is_local(v.name())).collect();
            let coeff = Poly::term(c.clone(), m.clone());
            match locals.as_slice() {
                [] => {
                    lo = lo + &coeff;
                    hi = hi + &coeff;
                }
                [(v, 1)] => {
                    let k = coeff.substitute(v, &Poly::one());
                    let (vlo, vhi) = self.guarded_bounds(v.name(), guards, frame)?;
                    let sign = match k.as_constant() {
                        Some(c) => c >= Rational::from_integer(0.into()),
                        None if frame.proves(ctx, &Constraint::ge(&k, &Poly::zero())) => true,
                        None if frame.proves(ctx, &Constraint::le(&k, &Poly::zero())) => false,
                        None => return None,
                    };
                    let (a, b) = if sign { (vlo, vhi) } else { (vhi, vlo) };
                    lo = lo + &k * &a;
                    hi = hi + &k * &b;
                }
                _ => return None,
            }
        }
        Some((lo, hi))
    }

    /// A bound on a subscript that one of its guards states directly: a guard `P < 0` (or
    /// `<=`) with `P - index` free of local variables gives `index < -(P - index)`; likewise
    /// for lower bounds. Jacobi's `if (p + 2 < N) ... a[p + 1]` gives `p + 1 <= N - 2`.
    pub(super) fn guarded_range(&self, index: &Poly, guards: &[Constraint], upper: bool) -> Option<Poly> {
        use constraints::Rel;
        guards.iter().find_map(|g| {
            // g: P rel 0 with rel in {<, <=}; an upper bound when P = index + D, a lower one
            // when P = -index + D.
            let strict = match g.rel() {
                Rel::Lt => true,
                Rel::Le => false,
                _ => return None,
            };
            let d = if upper { g.poly() - index } else { g.poly() + index };
            if d.vars().iter().any(|v| self.is_local(v.name())) {
                return None;
            }
            let slack = if strict { Poly::one() } else { Poly::zero() };
            // upper: index + d < 0 => index <= -d - 1; lower: d - index < 0 => index >= d + 1.
            Some(if upper { -d - slack } else { d + slack })
        })
    }

    /// A local variable's bounds `[lo, hi]`, free of local variables: a thread index's are the
    /// block's (what the mixed-radix argument of [`Frame::injective`] needs).
    pub(super) fn bounds(&self, name: &str, guards: &[Constraint], frame: &Frame) -> Option<(Poly, Poly)> {
        if let Some(Builtin::ThreadIdx(d)) = builtin_of_var(name) {
            let extent = frame.kernel.block.get(d as usize)?;
            return Some((Poly::zero(), extent - &Poly::one()));
        }
        if let Some(def) = self.aux.get(name) {
            // A remainder lies in [0, d - 1]; a quotient's range is not tracked.
            return (!def.quotient && !def.divisor.vars().iter().any(|v| self.is_local(v.name()))).then(|| (Poly::zero(), &def.divisor - &Poly::one()));
        }
        let (lo, hi) = self.stated_bounds(name, guards, frame);
        Some((lo?, hi?))
    }

    /// [`Self::bounds`], a thread index's narrowed by what its guards state where Z3 orders the
    /// two (`if (u < B - 1) ... a[i + 1]` reads up to `B - 1` past the block's start, not `B`):
    /// the range a tile must hold. A box wider than the accesses would load elements the block
    /// never uses, which another block may write (`safety::check_boxes` refuses that).
    pub(super) fn guarded_bounds(&self, name: &str, guards: &[Constraint], frame: &Frame) -> Option<(Poly, Poly)> {
        let (lo, hi) = self.bounds(name, guards, frame)?;
        if !matches!(builtin_of_var(name), Some(Builtin::ThreadIdx(_))) {
            return Some((lo, hi));
        }
        let (stated_lo, stated_hi) = self.stated_bounds(name, guards, frame);
        let ctx = &frame.collector.context;
        if stated_lo.is_none() && stated_hi.is_none() {
            return Some((lo, hi));
        }
        // Only a bound a constant away from the block's (`u < B - 1`): ordering others takes
        // Z3 queries at every range of every staging, and rarely succeeds (`u < N - v*B`).
        let constant_apart = |a: &Poly, b: &Poly| (a - b).as_constant().is_some();
        let narrow_lo = stated_lo.filter(|s| constant_apart(&lo, s)).and_then(|s| frame.order(&lo, &s, ctx, false)).unwrap_or_else(|| lo.clone());
        let narrow_hi = stated_hi.filter(|s| constant_apart(&hi, s)).and_then(|s| frame.order(&hi, &s, ctx, true)).unwrap_or_else(|| hi.clone());
        if narrow_lo == lo && narrow_hi == hi {
            return Some((lo, hi));
        }
        // Guards no thread meets (`u > B`) would leave an empty or negative range: the block's.
        if frame.proves(ctx, &Constraint::le(&narrow_lo, &narrow_hi)) {
            return Some((narrow_lo, narrow_hi));
        }
        Some((lo, hi))
    }

    /// The bounds on a local variable its guards state directly (`v <= P`, `v > Q` with `P`,
    /// `Q` free of local variables), the last one of each kind. A bound that reads thread
    /// indices (a triangle: `for (k = 0; k <= t; k++)`) is taken at those indices' extremes over
    /// the block (`k <= T - 1`): the range the block's threads cover together.
    fn stated_bounds(&self, name: &str, guards: &[Constraint], frame: &Frame) -> (Option<Poly>, Option<Poly>) {
        let v = Var::new(name);
        let (mut lo, mut hi) = (None, None);
        for g in guards {
            let p = g.poly();
            let coeff = p.terms().find(|(m, _)| m.factors() == [(v.clone(), 1)]).map(|(_, c)| c.clone());
            let Some(c) = coeff else { continue };
            let rest = p - &Poly::term(c.clone(), constraints::poly::Monomial::var(v.clone()));
            if p.terms().any(|(m, _)| m.exponent(&v) > 0 && m.factors() != [(v.clone(), 1)]) {
                continue;
            }
            // Over the block, v's bound by `-rest` (above) or `rest` (below) reaches furthest
            // where `rest` is least.
            let Some(rest) = self.least_over_block(&rest, frame) else { continue };
            let one = Rational::from_integer(1.into());
            // c*v + rest REL 0 with c = +-1: v <= -rest, v < -rest, v >= rest, v > rest.
            use constraints::Rel;
            match (g.rel(), c == one, c == -one.clone()) {
                (Rel::Le, true, _) => hi = Some(-rest),
                (Rel::Lt, true, _) => hi = Some(-rest - Poly::one()),
                (Rel::Le, _, true) => lo = Some(rest),
                (Rel::Lt, _, true) => lo = Some(rest + Poly::one()),
                _ => {}
            }
        }
        (lo, hi)
    }

    /// The least value of `p` over the block's threads: each thread index it reads at the end
    /// of its range that makes its term least, where `p` is free of other local variables and
    /// reads each thread index linearly with a constant coefficient; `None` otherwise.
    fn least_over_block(&self, p: &Poly, frame: &Frame) -> Option<Poly> {
        let mut out = p.clone();
        for x in p.vars() {
            if !self.is_local(x.name()) {
                continue;
            }
            let Some(Builtin::ThreadIdx(d)) = builtin_of_var(x.name()) else { return None };
            let extent = frame.kernel.block.get(d as usize)?;
            let coeff = p.terms().find(|(m, _)| m.factors() == [(x.clone(), 1)]).map(|(_, c)| c.clone())?;
            if p.terms().any(|(m, _)| m.exponent(&x) > 0 && m.factors() != [(x.clone(), 1)]) {
                return None;
            }
            // Over 0 <= x <= extent - 1 a term c*x is least at the top when c < 0.
            let top = coeff < Rational::from_integer(0.into());
            out = out.substitute(&x, &if top { extent - &Poly::one() } else { Poly::zero() });
        }
        Some(out)
    }
}

/// Tiles of one array that lie end to end along their first dimension, alike in every other
/// (origin, extent, footprint), become one tile: a coarsened block's eight row tiles
/// `[j*B0/8, (j+1)*B0/8)` one `B0`-row tile. "End to end" is exact polynomial equality (`origin' == origin + extent`),
/// so the merged tile holds exactly the elements of the two (no Z3, never a larger tile); one
/// cooperative load fills it instead of several.
fn merge_adjacent(mut tiles: Vec<Tile>) -> Vec<Tile> {
    'again: loop {
        for i in 0..tiles.len() {
            for k in 0..tiles.len() {
                if i == k {
                    continue;
                }
                if let Some(merged) = merged(&tiles[i], &tiles[k]) {
                    let (lo, hi) = (i.min(k), i.max(k));
                    tiles.remove(hi);
                    tiles[lo] = merged;
                    continue 'again;
                }
            }
        }
        return tiles;
    }
}

/// Elements a transposed tile's columns are padded by. The loads read the array row by row, so
/// consecutive threads store a column's length apart: with columns of `B0 = 128` elements all 32
/// lanes of a warp would hit one bank (32-way conflicts). Four more spread them over 8 banks
/// (4-way) and keep each column's start 16-byte aligned where the length is a multiple of 4,
/// as the two 16-byte reads of a micro-tile's `a` column need. Where the padding's shared
/// memory is refused, the tree stores the columns unpadded (`tree::Strategy::UnpadColumns`).
pub(super) const COLUMN_PAD: i64 = 4;

/// Whether a two-dimensional tile is better stored column by column: every lane of a warp row
/// reads the same elements (no access reads `threadIdx.x`), and the tile's reads lie at
/// constant distances from each other down a column but not along a row. Matrix
/// multiplication's `a` tile read by a thread's 8 x 8 micro-tile, `a[8*ty + i][z]` for `i` in
/// 0..8, is then 8 neighbours (two 16-byte loads, `emit::cuda`'s aligned tiles) where rows
/// put them `B0` apart (8 address computations per step; bench/RESULTS.md, "Contiguous
/// micro-tiles"). The loads still read the array row by row (coalesced), and store each
/// element at its column-major place.
fn reads_down_columns(t: &Tile, local: &Locality) -> bool {
    if t.extents.len() != 2 || t.modulus.is_some() || t.padded {
        return false;
    }
    let lane = thread_var(0);
    let lane_free = |p: &Poly| p.vars().iter().all(|v| v.name() != lane && !local.aux.contains_key(v.name()));
    if !t.accesses.iter().all(|a| a.offset.iter().all(lane_free)) {
        return false;
    }
    let reads: Vec<&TileAccess> = t.accesses.iter().filter(|a| !a.write).collect();
    let [first, rest @ ..] = reads.as_slice() else { return false };
    if rest.is_empty() {
        return false;
    }
    let constant_apart = |position: &dyn Fn(&TileAccess) -> Poly| rest.iter().all(|a| (position(a) - position(first)).as_constant().is_some());
    let down = |a: &TileAccess| &a.offset[1] * &t.extents[0] + &a.offset[0];
    let along = |a: &TileAccess| &a.offset[0] * &t.extents[1] + &a.offset[1];
    constant_apart(&down) && !constant_apart(&along)
}

/// `first` then `second` along one dimension, when they lie end to end there (see
/// [`merge_adjacent`]).
fn merged(first: &Tile, second: &Tile) -> Option<Tile> {
    if first.array != second.array || first.modulus.is_some() || second.modulus.is_some() || first.padded != second.padded || first.transposed != second.transposed || first.extents.len() != second.extents.len() {
        return None;
    }
    let rank = first.extents.len();
    let along: Vec<usize> = (0..rank).filter(|&d| first.origin[d] != second.origin[d] || first.extents[d] != second.extents[d]).collect();
    // Only along the first dimension: the merged tile's parts then sit a uniform distance
    // apart (`j*B0*B0/8`), which the loads take as a base offset; along a row they would be
    // `w*ub1` apart inside each row, costing an address computation per read.
    let [d @ 0] = along[..] else { return None };
    if second.origin[d] != &first.origin[d] + &first.extents[d] {
        return None;
    }
    if (0..rank).any(|e| e != d && first.footprint[e] != second.footprint[e]) {
        return None;
    }
    // Along `d`, the loads of the merged tile skip what the two skipped: both load their whole
    // box, or their footprints meet end to end.
    let footprint = match (&first.footprint[d], &second.footprint[d]) {
        ((None, None), (None, None)) => (None, None),
        ((Some(lo), Some(hi)), (Some(lo2), Some(hi2))) if *lo2 == hi + &Poly::one() => (Some(lo.clone()), Some(hi2.clone())),
        _ => return None,
    };
    let mut out = first.clone();
    out.extents[d] = &first.extents[d] + &second.extents[d];
    out.footprint[d] = footprint;
    out.accesses.extend(second.accesses.iter().map(|a| {
        let mut a = a.clone();
        a.offset[d] = &a.offset[d] + &first.extents[d];
        a
    }));
    Some(out)
}
