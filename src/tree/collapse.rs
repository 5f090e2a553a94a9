//! Forks that choose nothing (issue 25), in two shapes, each replaced by one of its sides:
//! - a fork whose two sides are the same tree (the same edges below, and at each leaf the same
//!   outcome: the same code that runs, reached by the same strategies, or no kernel for the
//!   same counter);
//! - a fork on `c` whose refusal applied no strategy and forks on `e`, where `c` implies `e`
//!   and the accept side is the same tree as the refusal's `e` side (the accept side's region
//!   decided that fork): `accept cols == 1` beside `refuse cols != 1` then
//!   `case (cols - 1) % 4 == 0`. The refusal side takes the fork's place without `not c`.
//!
//! Contract: a fork is replaced only when its edges' constraints are each other's exact
//! negation (and, in the second shape, so are the refusal's), and at every pair of
//! corresponding nodes the two systems are one shared system plus the fork's constraint on one
//! side and its negation (and `e`) on the other, the shared one extending the fork's own
//! system; the paths of decisions below must match too. The side kept then covers, node by
//! node, exactly the union of what both covered (`c or (not c and e)` is `e` where `c`
//! implies `e`, and `not e` implies `not c`), with the kernel both ran at each leaf, and drops
//! the fork's constraint and its own decisions. No distinct kernel is lost, no region is
//! widened beyond what both sides covered, and the first leaf of each code keeps its place
//! among the others (the dispatcher's order); a node is marked unknown where any node of
//! either side was. Collapsing runs bottom-up, so a collapse can make the fork above it one
//! that chooses nothing too. The nodes left are renumbered in their order (a parent before its
//! children, as built), so a tree's ids stay dense and deterministic.

use super::{Edge, MachineSymbols, Node, NodeKind};
use constraints::{Constraint, Rational, Rel, System};
use std::collections::{BTreeMap, BTreeSet};

/// The tree's nodes with every fork that chooses nothing replaced by one of its sides,
/// renumbered.
/// With `machine` (the tree's machine symbols), also the forks whose sides choose the same
/// outcome at every point ([`super::same_choice`]).
pub(super) fn forks_that_choose_nothing(mut nodes: Vec<Node>, machine: Option<&MachineSymbols>) -> Vec<Node> {
    // Children are built after their parents (a larger id), so this order visits a node's
    // children before the node: a fork is compared after the forks below it are collapsed.
    let facts = machine.map(super::same_choice::positivity_facts);
    for id in (0..nodes.len()).rev() {
        let same_choice = || facts.as_deref().and_then(|f| super::same_choice::kept_side(&nodes, id, f)).map(|side| (side, 1));
        if let Some((side, own)) = absorbed_by_refusal(&nodes, id).or_else(|| one_outcome(&nodes, id)).or_else(same_choice) {
            drop_from_subtree(&mut nodes, id, &side, own);
        }
    }
    renumber_reachable(nodes)
}

/// The edge to the side node `id` can be replaced by, with how many decisions that side made
/// below the fork's: its fork's two edges' constraints are each other's negation, and its two
/// subtrees are the same tree (the same edges, the same outcome at each leaf) over the same
/// systems but for that constraint, with the same decisions below each side's own. The sides'
/// own decisions (the edge's, then any the side node added) are the same but for the edge's,
/// which alone goes; or they differ (a refusal that keeps the code says so), and then neither
/// side changed the fork's code, so all of them go.
fn one_outcome(nodes: &[Node], id: usize) -> Option<(Edge, usize)> {
    let fork = &nodes[id];
    let [a, b] = fork.children.as_slice() else { return None };
    if b.constraint != a.constraint.negate() {
        return None;
    }
    let (x, y) = (&nodes[a.child], &nodes[b.child]);
    let (at_a, at_b) = (edge_position(&x.constraints, &a.constraint)?, edge_position(&y.constraints, &b.constraint)?);
    let shared = x.constraints.without(&BTreeSet::from([at_a]));
    if !extends(&shared, &fork.constraints) {
        return None;
    }
    let decided = fork.decisions.len();
    let (own_x, own_y) = (x.decisions.len().checked_sub(decided)?, y.decisions.len().checked_sub(decided)?);
    let same_own = own_x == own_y && x.decisions.get(decided + 1..) == y.decisions.get(decided + 1..);
    let unchanged = |n: &Node| n.staged == fork.staged && n.applied == fork.applied;
    if !same_own && !(unchanged(x) && unchanged(y)) {
        return None;
    }
    let alike = |u: &Node, v: &Node| {
        let same_region = u.constraints.constraints().get(at_a) == Some(&a.constraint)
            && v.constraints.constraints().get(at_b) == Some(&b.constraint)
            && u.constraints.without(&BTreeSet::from([at_a])) == v.constraints.without(&BTreeSet::from([at_b]));
        let same_path = match same_own {
            true => without_index(&u.decisions, decided) == without_index(&v.decisions, decided),
            false => u.decisions.len() >= decided + own_x && v.decisions.len() >= decided + own_y && u.decisions[..decided] == v.decisions[..decided] && u.decisions[decided + own_x..] == v.decisions[decided + own_y..],
        };
        same_region && same_path
    };
    same_tree(nodes, (a.child, b.child), alike).then(|| (a.clone(), if same_own { 1 } else { own_x }))
}

/// Whether the subtrees at `roots` are the same tree: node for node the same outcome
/// ([`same_outcome`]) and edges ([`same_edges`]), and `alike` (their regions and paths).
fn same_tree(nodes: &[Node], roots: (usize, usize), alike: impl Fn(&Node, &Node) -> bool) -> bool {
    let mut pairs = vec![roots];
    while let Some((p, q)) = pairs.pop() {
        let (u, v) = (&nodes[p], &nodes[q]);
        if !(same_outcome(u, v) && same_edges(u, v) && alike(u, v)) {
            return false;
        }
        pairs.extend(u.children.iter().zip(&v.children).map(|(e, f)| (e.child, f.child)));
    }
    true
}

/// Whether two nodes end alike: leaves running the same code, reached by the same strategies,
/// with the same registers; no kernel for the same counter; or both forks.
pub(super) fn same_outcome(u: &Node, v: &Node) -> bool {
    match (&u.kind, &v.kind) {
        (NodeKind::Leaf, NodeKind::Leaf) => u.staged == v.staged && u.applied == v.applied && u.counters.registers == v.counters.registers,
        (NodeKind::Infeasible { counter: c }, NodeKind::Infeasible { counter: d }) => c == d,
        (NodeKind::Inner, NodeKind::Inner) => true,
        _ => false,
    }
}

/// Whether two nodes fork alike: the same edges in the same order.
fn same_edges(u: &Node, v: &Node) -> bool {
    u.children.len() == v.children.len() && u.children.iter().zip(&v.children).all(|(e, f)| e.kind == f.kind && e.counter == f.counter && e.constraint == f.constraint)
}

/// The refusal edge of node `id` whose side can take the fork's place, with the decisions the
/// refusal made below the fork's (all go with the fork): the fork's edges are
/// `c` and its negation; the refusal side forks on `e` and its negation; `c` implies `e`
/// (`cols == 1` implies `(cols - 1) % 4 == 0`: [`implies`]); and the accept side is the same
/// tree as the refusal's `e` side over the same systems but for `c` against `not c` and `e`
/// (a fork the accept side's region decided). Then the `e` side, with `not c` dropped, covers
/// both (`e` or `c` is `e`), and the `not e` side needs no `not c` (`not e` implies it).
fn absorbed_by_refusal(nodes: &[Node], id: usize) -> Option<(Edge, usize)> {
    let fork = &nodes[id];
    let [a, b] = fork.children.as_slice() else { return None };
    if b.constraint != a.constraint.negate() {
        return None;
    }
    let refusal = &nodes[b.child];
    let [e, not_e] = refusal.children.as_slice() else { return None };
    if not_e.constraint != e.constraint.negate() || !implies(&a.constraint, &e.constraint) {
        return None;
    }
    let at_c = edge_position(&nodes[a.child].constraints, &a.constraint)?;
    let at_not_c = edge_position(&refusal.constraints, &b.constraint)?;
    let at_e = edge_position(&nodes[e.child].constraints, &e.constraint)?;
    if !extends(&refusal.constraints.without(&BTreeSet::from([at_not_c])), &fork.constraints) || at_e <= at_not_c {
        return None;
    }
    // The refusal applied no strategy (the code stays: a performance counter no strategy
    // raises), so its own decisions (the refusal, and that the code stays) go with it.
    if refusal.staged != fork.staged || refusal.applied != fork.applied {
        return None;
    }
    let (decided, refused) = (fork.decisions.len(), refusal.decisions.len());
    let own = refused.checked_sub(decided)?;
    let alike = |u: &Node, v: &Node| {
        let same_region = u.constraints.constraints().get(at_c) == Some(&a.constraint)
            && v.constraints.constraints().get(at_not_c) == Some(&b.constraint)
            && v.constraints.constraints().get(at_e) == Some(&e.constraint)
            && u.constraints.without(&BTreeSet::from([at_c])) == v.constraints.without(&BTreeSet::from([at_not_c, at_e]));
        // Below the fork's decision (accept side) and the refusal's decisions and `e`'s (refusal
        // side), the same decisions.
        let same_path = u.decisions.len() > decided && v.decisions.len() > refused && u.decisions[..decided] == v.decisions[..decided] && u.decisions[decided + 1..] == v.decisions[refused + 1..];
        same_region && same_path
    };
    same_tree(nodes, (a.child, e.child), alike).then(|| (b.clone(), own))
}

/// Node `id` replaced by the side over `edge`, whose subtree drops `edge`'s constraint and the
/// `own` decisions the side made below the fork's (its edge's first); every node of the tree
/// below `id` that is kept is marked unknown where any was.
fn drop_from_subtree(nodes: &mut [Node], id: usize, edge: &Edge, own: usize) {
    let (depth, decided) = (nodes[id].depth, nodes[id].decisions.len());
    let unknown = nodes[id].children.iter().any(|e| subtree(nodes, e.child).iter().any(|&n| nodes[n].unknown));
    let at = edge_position(&nodes[edge.child].constraints, &edge.constraint).expect("checked before");
    for n in subtree(nodes, edge.child) {
        let node = &mut nodes[n];
        node.constraints = node.constraints.without(&BTreeSet::from([at]));
        node.decisions.drain(decided..decided + own);
        node.depth -= 1;
        node.unknown |= unknown;
    }
    nodes[id] = Node { id, depth, ..nodes[edge.child].clone() };
}

/// Whether `c` implies `e` by exact evaluation: `c` fixes one variable (`a*v + b == 0`) and
/// `e` reads that variable only and holds at its value. Anything else is not known to imply.
fn implies(c: &Constraint, e: &Constraint) -> bool {
    let vars = c.vars();
    let Some(v) = vars.iter().next().filter(|_| vars.len() == 1 && c.rel() == Rel::Eq && c.poly().total_degree() == 1) else { return false };
    if e.vars() != vars {
        return false;
    }
    let b = c.poly().constant_term();
    let Ok(a_plus_b) = c.poly().eval(&BTreeMap::from([(v.clone(), Rational::from_integer(1.into()))])) else { return false };
    let a = a_plus_b - &b;
    if a == Rational::from_integer(0.into()) {
        return false;
    }
    e.holds_at(&BTreeMap::from([(v.clone(), -b / a)])) == Ok(true)
}

/// Where `edge` is in `system` (its last occurrence).
pub(super) fn edge_position(system: &System, edge: &Constraint) -> Option<usize> {
    system.constraints().iter().rposition(|c| c == edge)
}

/// Whether `wider` holds `base`'s constraints, in order, followed by others, and its domains.
fn extends(wider: &System, base: &System) -> bool {
    wider.constraints().starts_with(base.constraints()) && base.domains().iter().all(|(v, d)| wider.domains().get(v) == Some(d))
}

/// `items` without the one at `at` (all of them when there is none).
fn without_index(items: &[String], at: usize) -> Vec<&String> {
    items.iter().enumerate().filter(|(i, _)| *i != at).map(|(_, s)| s).collect()
}

/// Node `root` and every node below it.
pub(super) fn subtree(nodes: &[Node], root: usize) -> Vec<usize> {
    let mut all = vec![root];
    let mut next = 0;
    while let Some(&n) = all.get(next) {
        all.extend(nodes[n].children.iter().map(|e| e.child));
        next += 1;
    }
    all
}

/// The nodes reachable from the root, numbered in order, with their edges renumbered.
fn renumber_reachable(nodes: Vec<Node>) -> Vec<Node> {
    let mut reachable = vec![false; nodes.len()];
    if let Some(r) = reachable.first_mut() {
        *r = true;
    }
    for n in &nodes {
        if reachable[n.id] {
            for e in &n.children {
                reachable[e.child] = true;
            }
        }
    }
    let mut new_id = vec![usize::MAX; nodes.len()];
    let mut next = 0;
    for (old, kept) in reachable.iter().enumerate() {
        if *kept {
            new_id[old] = next;
            next += 1;
        }
    }
    nodes
        .into_iter()
        .filter(|n| reachable[n.id])
        .map(|mut n| {
            n.id = new_id[n.id];
            for e in &mut n.children {
                e.child = new_id[e.child];
            }
            n
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Kernel;
    use crate::tree::{Counter, CounterValues};
    use constraints::{Poly, Rel};
    use std::sync::Arc;

    /// Two distinct codes: vecadd as written and with CSE.
    fn codes() -> (Arc<Kernel>, Arc<Kernel>) {
        let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/vecadd.mf")).unwrap();
        let program = crate::frontend::check_source("vecadd.mf", &text).unwrap_or_else(|d| panic!("{}", d.render(false)));
        let f = &program.kernels[0];
        let plain = Kernel::from_schedule(f, &f.schedules[0]).unwrap();
        (Arc::new(plain.clone()), Arc::new(Kernel { cse: 2, ..plain }))
    }

    /// `v <= k`.
    fn at_most(v: &str, k: i64) -> Constraint {
        Constraint::new(&Poly::var(v) - &Poly::int(k), Rel::Le)
    }

    struct Trees {
        nodes: Vec<Node>,
    }

    impl Trees {
        fn root(system: System) -> Trees {
            let (code, _) = codes();
            Trees { nodes: vec![node(0, code, system, vec!["root".into()], NodeKind::Inner, 0)] }
        }

        /// A child of `parent` over `edge`, its system the parent's plus `extra` plus `edge`.
        fn child(&mut self, parent: usize, kind: &'static str, edge: &Constraint, extra: &[Constraint], outcome: NodeKind, code: &Arc<Kernel>) -> usize {
            let id = self.nodes.len();
            let p = &self.nodes[parent];
            let mut system = p.constraints.clone();
            for c in extra {
                system.add(c.clone());
            }
            system.add(edge.clone());
            let mut decisions = p.decisions.clone();
            decisions.push(format!("{kind} {edge}"));
            let depth = p.depth + 1;
            self.nodes.push(node(id, code.clone(), system, decisions, outcome, depth));
            self.nodes[parent].children.push(Edge { kind, counter: Counter::Registers, constraint: edge.clone(), child: id });
            id
        }

        /// A fork of `parent` on `edge`: accept and refuse children.
        fn fork(&mut self, parent: usize, edge: &Constraint, sides: [(&[Constraint], NodeKind, &Arc<Kernel>); 2]) -> [usize; 2] {
            let [(ea, ka, ca), (eb, kb, cb)] = sides;
            [self.child(parent, "accept", edge, ea, ka, ca), self.child(parent, "refuse", &edge.negate(), eb, kb, cb)]
        }
    }

    fn node(id: usize, code: Arc<Kernel>, constraints: System, decisions: Vec<String>, kind: NodeKind, depth: usize) -> Node {
        Node {
            id,
            staged: code.clone(),
            code,
            cached: Vec::new(),
            applied: Vec::new(),
            blocked_by: None,
            strategies_left: Vec::new(),
            counters_left: Vec::new(),
            perf_done: 0,
            constraints,
            decisions,
            counters: CounterValues { registers: 20, shared_bytes: Poly::int(0), threads_per_block: Poly::int(32) },
            kind,
            children: Vec::new(),
            depth,
            unknown: false,
            witness: None,
        }
    }

    fn base() -> System {
        System::new().with(at_most("B", 1024))
    }

    fn leaves(nodes: &[Node]) -> usize {
        nodes.iter().filter(|n| n.children.is_empty()).count()
    }

    #[test]
    fn a_fork_whose_sides_run_one_code_becomes_that_leaf_over_the_region_both_share() {
        let (k, _) = codes();
        let mut t = Trees::root(base());
        // Both sides also name a machine symbol's positivity first.
        let symbol = Constraint::new(&Poly::int(1) - &Poly::var("N_SM"), Rel::Le);
        t.fork(0, &at_most("R", 32), [(&[symbol.clone()], NodeKind::Leaf, &k), (&[symbol.clone()], NodeKind::Leaf, &k)]);
        let nodes = forks_that_choose_nothing(t.nodes, None);
        assert_eq!(nodes.len(), 1);
        assert!(matches!(nodes[0].kind, NodeKind::Leaf) && nodes[0].children.is_empty());
        assert_eq!(nodes[0].constraints, base().with(symbol));
        assert_eq!(nodes[0].decisions, ["root"]);
        assert_eq!(nodes[0].depth, 0);
    }

    #[test]
    fn forks_that_choose_stay() {
        let (k, cse) = codes();
        // By their shapes and, with the machine symbols, by what they choose at each point.
        let machine = MachineSymbols::avoiding(&BTreeSet::new());
        for semantic in [None, Some(&machine)] {
            // Different codes.
            let mut t = Trees::root(base());
            t.fork(0, &at_most("R", 32), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
            assert_eq!(forks_that_choose_nothing(t.nodes, semantic).len(), 3);
            // No kernel for different counters.
            let mut t = Trees::root(base());
            t.fork(0, &at_most("R", 32), [(&[], NodeKind::Infeasible { counter: Counter::Registers }, &k), (&[], NodeKind::Infeasible { counter: Counter::SharedMemory }, &k)]);
            assert_eq!(forks_that_choose_nothing(t.nodes, semantic).len(), 3);
            // One side's region is narrower than the other's by more than the fork.
            let mut t = Trees::root(base());
            t.fork(0, &at_most("R", 32), [(&[], NodeKind::Leaf, &k), (&[at_most("B", 64)], NodeKind::Leaf, &k)]);
            assert_eq!(forks_that_choose_nothing(t.nodes, semantic).len(), 3);
            // Edges that do not split the region (not each other's negation).
            let mut t = Trees::root(base());
            t.child(0, "accept", &at_most("R", 32), &[], NodeKind::Leaf, &k);
            t.child(0, "refuse", &at_most("R", 16).negate(), &[], NodeKind::Leaf, &k);
            assert_eq!(forks_that_choose_nothing(t.nodes, semantic).len(), 3);
            // A leaf on one side, a fork on the other.
            let mut t = Trees::root(base());
            let [_, b] = t.fork(0, &at_most("R", 32), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Inner, &k)]);
            t.fork(b, &at_most("T_B", 256), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
            assert_eq!(forks_that_choose_nothing(t.nodes, semantic).len(), 5);
        }
    }

    #[test]
    fn a_fork_whose_sides_are_the_same_tree_keeps_one_side_without_its_constraint() {
        let (k, cse) = codes();
        let mut t = Trees::root(base());
        let [a, b] = t.fork(0, &at_most("R", 32), [(&[], NodeKind::Inner, &k), (&[], NodeKind::Inner, &k)]);
        // Below each side, a fork that chooses (two codes), and under its refusal one that
        // does not: it collapses first, then the sides are alike and the top fork goes.
        for side in [a, b] {
            let [_, r] = t.fork(side, &at_most("T_B", 256), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Inner, &cse)]);
            t.fork(r, &at_most("n", 4096), [(&[], NodeKind::Leaf, &cse), (&[], NodeKind::Leaf, &cse)]);
        }
        let nodes = forks_that_choose_nothing(t.nodes, None);
        assert_eq!(nodes.len(), 3);
        assert_eq!(leaves(&nodes), 2);
        for (i, n) in nodes.iter().enumerate() {
            assert_eq!(n.id, i, "ids are dense");
            assert!(n.children.iter().all(|e| e.child > i && e.child < nodes.len()));
            assert!(!n.constraints.constraints().contains(&at_most("R", 32)) && !n.constraints.constraints().contains(&at_most("R", 32).negate()));
            assert!(n.decisions.iter().all(|d| !d.contains("R")), "{:?}", n.decisions);
            assert_eq!(n.depth, usize::from(i > 0));
        }
        assert_eq!(nodes[0].constraints, base());
        assert_eq!(*nodes[1].staged, *k);
        assert_eq!(*nodes[2].staged, *cse);
        assert_eq!(nodes[2].constraints, base().with(at_most("T_B", 256).negate()));
        // Sides that differ at one leaf keep the fork.
        let mut t = Trees::root(base());
        let [a, b] = t.fork(0, &at_most("R", 32), [(&[], NodeKind::Inner, &k), (&[], NodeKind::Inner, &k)]);
        t.fork(a, &at_most("T_B", 256), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
        t.fork(b, &at_most("T_B", 256), [(&[], NodeKind::Leaf, &cse), (&[], NodeKind::Leaf, &k)]);
        assert_eq!(forks_that_choose_nothing(t.nodes, None).len(), 7);
    }

    #[test]
    fn a_refusal_that_keeps_the_code_and_says_so_still_collapses_with_its_accept_side() {
        let (k, cse) = codes();
        let build = |refusal_code: &Arc<Kernel>| {
            let mut t = Trees::root(base());
            let [a, b] = t.fork(0, &at_most("S", 1), [(&[], NodeKind::Inner, &k), (&[], NodeKind::Inner, refusal_code)]);
            t.nodes[b].decisions.push("no strategy left raises it: the code stays".into());
            for side in [a, b] {
                t.fork(side, &at_most("W", 4), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
            }
            t
        };
        let nodes = forks_that_choose_nothing(build(&k).nodes, None);
        assert_eq!(nodes.len(), 3);
        // The accept side is kept; the refusal's words go with the fork.
        assert_eq!(nodes[1].decisions, ["root".to_string(), format!("accept {}", at_most("W", 4))]);
        assert_eq!(nodes[1].constraints, base().with(at_most("W", 4)));
        // A refusal that changed the code (another strategy) is not silent: the fork stays.
        let mut t = build(&k);
        t.nodes[2].staged = cse.clone();
        assert_eq!(forks_that_choose_nothing(t.nodes, None).len(), 7);
    }

    /// `n == 1` on the accept side, and on the refusal side a fork on `(n - 1) % 4 == 0` whose
    /// `case` side is the accept side's tree: `n == 1` implies the case.
    fn absorbed(c: Constraint, case_code: &Arc<Kernel>) -> Vec<Node> {
        let (k, _) = codes();
        let other = Arc::new(Kernel { cse: 1, ..(*k).clone() });
        let mut t = Trees::root(base());
        let [_, r] = t.fork(0, &c, [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Inner, &k)]);
        t.nodes[r].decisions.push("no strategy left raises it: the code stays".into());
        let case = Constraint::divides(4, &(&Poly::var("n") - &Poly::int(1)));
        t.fork(r, &case, [(&[], NodeKind::Leaf, case_code), (&[], NodeKind::Leaf, &other)]);
        forks_that_choose_nothing(t.nodes, None)
    }

    #[test]
    fn an_accept_side_the_refusal_repeats_under_a_case_it_implies_joins_that_case() {
        let (k, cse) = codes();
        let n_is_1 = Constraint::eq(&Poly::var("n"), &Poly::int(1));
        let case = Constraint::divides(4, &(&Poly::var("n") - &Poly::int(1)));
        let nodes = absorbed(n_is_1.clone(), &k);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].constraints, base());
        assert_eq!(nodes[0].decisions, ["root"]);
        assert_eq!((*nodes[1].staged == *k, nodes[2].staged.cse), (true, 1));
        // The case covers `n == 1` now; the outside needs no `n != 1` (it implies it).
        assert_eq!(nodes[1].constraints, base().with(case.clone()));
        assert_eq!(nodes[2].constraints, base().with(case.negate()));
        assert_eq!(nodes[1].decisions, ["root".to_string(), format!("accept {case}")]);
        assert!(nodes.iter().all(|n| n.depth == usize::from(n.id > 0)));
        // Where the accept side runs another code than the case, or its constraint does not
        // imply the case (`n == 2`), the fork stays.
        assert_eq!(absorbed(n_is_1, &cse).len(), 5);
        assert_eq!(absorbed(Constraint::eq(&Poly::var("n"), &Poly::int(2)), &k).len(), 5);
        // Nor is a constraint that fixes no single variable taken to imply anything.
        assert!(!implies(&Constraint::eq(&Poly::var("n"), &Poly::var("m")), &case));
        assert!(implies(&Constraint::eq(&(&Poly::int(2) * &Poly::var("n")), &Poly::int(2)), &case));
    }

    /// `n <= 1`.
    fn n_at_most_1() -> Constraint {
        at_most("n", 1)
    }

    #[test]
    fn a_fork_whose_sides_choose_alike_at_every_point_keeps_the_side_that_covers_both() {
        let (k, cse) = codes();
        let machine = MachineSymbols::avoiding(&BTreeSet::new());
        let n_is_1 = Constraint::eq(&Poly::var("n"), &Poly::int(1));
        let root = base().with(Constraint::ge(&Poly::var("n"), &Poly::one()));
        let fact = Constraint::ge(&Poly::var(&machine.multiprocessors), &Poly::one());
        // `case 32 <= B`: `n == 1` runs `k`, else `n <= 1` runs `k` and `1 < n` runs `cse`;
        // `outside B < 32`: the same without the `n == 1` fork (which `n <= 1` covers), its
        // leaves naming the multiprocessors' positivity, a fact of every device.
        let mut t = Trees::root(root.clone());
        let [a, b] = t.fork(0, &at_most("B", 31).negate(), [(&[], NodeKind::Inner, &k), (&[], NodeKind::Inner, &k)]);
        let [_, r] = t.fork(a, &n_is_1, [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Inner, &k)]);
        t.fork(r, &n_at_most_1(), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
        t.fork(b, &n_at_most_1(), [(&[fact.clone()], NodeKind::Leaf, &k), (&[fact.clone()], NodeKind::Leaf, &cse)]);
        // By shape, only the `n == 1` fork goes (its accept side is the refusal's `n <= 1`
        // side); the case's sides differ by the fact.
        assert_eq!(forks_that_choose_nothing(t.nodes.clone(), None).len(), 7);
        let nodes = forks_that_choose_nothing(t.nodes, Some(&machine));
        // Both forks above `n <= 1` go: the case's (its side covers both without `32 <= B`),
        // then `n == 1` (its refusal covers `n == 1` too, without `n != 1`).
        assert_eq!(nodes.len(), 3, "{:?}", nodes.iter().map(|n| n.constraints.to_string()).collect::<Vec<_>>());
        assert_eq!(nodes[0].constraints, root);
        assert_eq!((&*nodes[1].staged == &*k, &*nodes[2].staged == &*cse), (true, true));
        assert_eq!(nodes[1].constraints, root.clone().with(n_at_most_1()));
        assert_eq!(nodes[2].constraints, root.clone().with(n_at_most_1().negate()));
        assert_eq!(nodes[1].decisions, ["root".to_string(), format!("accept {}", n_at_most_1())]);
        assert!(nodes.iter().all(|n| n.depth == usize::from(n.id > 0)));

        // The same with a constraint other than a fact on one side's leaf: its region is
        // narrower, so keeping the other side would widen it.
        let mut t = Trees::root(root.clone());
        let [a, b] = t.fork(0, &at_most("B", 31).negate(), [(&[], NodeKind::Inner, &k), (&[], NodeKind::Inner, &k)]);
        let [_, r] = t.fork(a, &n_is_1, [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Inner, &k)]);
        t.fork(r, &n_at_most_1(), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
        t.fork(b, &n_at_most_1(), [(&[at_most("T_B", 512)], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
        assert_eq!(forks_that_choose_nothing(t.nodes, Some(&machine)).len(), 7, "only the `n == 1` fork goes");

        // Where `n == 1` runs `cse` on one side and `k` on the other, the fork chooses.
        let mut t = Trees::root(root.clone());
        let [a, b] = t.fork(0, &at_most("B", 31).negate(), [(&[], NodeKind::Inner, &k), (&[], NodeKind::Inner, &k)]);
        let [_, r] = t.fork(a, &n_is_1, [(&[], NodeKind::Leaf, &cse), (&[], NodeKind::Inner, &k)]);
        t.fork(r, &n_at_most_1(), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
        t.fork(b, &n_at_most_1(), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]);
        assert_eq!(forks_that_choose_nothing(t.nodes, Some(&machine)).len(), 9);
    }

    #[test]
    fn a_side_that_covers_both_only_with_the_fork_or_reorders_the_codes_is_not_kept() {
        let (k, cse) = codes();
        let machine = MachineSymbols::avoiding(&BTreeSet::new());
        // `R <= 32` keeps one edge, `R <= 40` (its sibling refuted under `R <= 32` only): that
        // side does not cover the region without the fork. The other side runs `k` for
        // `R <= 40` and `cse` above; listed `k` first, it can take the fork's place.
        let build = |cse_first: bool| {
            let mut t = Trees::root(base());
            let [a, b] = t.fork(0, &at_most("R", 32), [(&[], NodeKind::Inner, &k), (&[], NodeKind::Inner, &k)]);
            t.child(a, "accept", &at_most("R", 40), &[], NodeKind::Leaf, &k);
            match cse_first {
                false => t.fork(b, &at_most("R", 40), [(&[], NodeKind::Leaf, &k), (&[], NodeKind::Leaf, &cse)]),
                true => t.fork(b, &at_most("R", 40).negate(), [(&[], NodeKind::Leaf, &cse), (&[], NodeKind::Leaf, &k)]),
            };
            forks_that_choose_nothing(t.nodes, Some(&machine))
        };
        let nodes = build(false);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].children.iter().map(|e| e.constraint.clone()).collect::<Vec<_>>(), [at_most("R", 40), at_most("R", 40).negate()]);
        assert_eq!(nodes[1].constraints, base().with(at_most("R", 40)));
        // Listed `cse` first, keeping that side would make `cse` the first code where the tree
        // lists `k` first (the dispatcher takes the first leaf that holds): the fork stays.
        assert_eq!(build(true).len(), 6);
    }
}
