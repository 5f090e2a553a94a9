//! Forks whose two sides choose the same outcome at every point (issue 25): the semantic
//! counterpart of [`super::collapse`]'s structural shapes. `case 32 <= B` beside `outside B < 32`
//! where the case side first forks on `n == 1` (to the leaf the outside side also reaches at
//! `n == 1`) and otherwise repeats the outside side: no shape matches, yet no point's kernel
//! depends on the fork.
//!
//! Contract: fork `c` / `not c` (each other's exact negation) is replaced by one side `K`, its
//! subtree without `c` (and without the edge's decision), only when, with `O` the other side:
//! - every constraint the fork's edges or either subtree add beyond their edges is a machine
//!   symbol's positivity (`1 <= W_SM`, which every device satisfies), and every fork in either
//!   is a split (two edges, each other's negation) or keeps one edge whose sibling was refuted;
//! - `K` without `c` still covers the fork's region: each refuted sibling in `K` is refuted
//!   again without `c`;
//! - at every pair of a leaf of `K` and a leaf of `O` with different outcomes
//!   ([`super::collapse::same_outcome`]), the `K` leaf's system without `c` and the `O` leaf's
//!   system have no common point: one holds a constraint whose negation the other holds, or
//!   the linear relaxation of both refutes them;
//! - the outcomes in the order of their first leaves are the same over `K` as over both sides
//!   (the dispatcher takes the first leaf that holds).
//!
//! Every proof is exact and asks no solver ([`constraints::relax::refutes`]); what it cannot
//! refute keeps the fork (Z3 on the pairs of a fork that chooses cost more than a whole tree's
//! emission: bench/RESULTS.md). Then, on every point of the fork's region where the machine
//! symbols are positive, `K` without `c` chooses what the tree chose: its leaves still split
//! the region, and where `not c` held, the leaf of `K` that now holds has the outcome of the
//! leaf of `O` that held. No distinct kernel is lost and no outcome's region grows beyond what
//! both sides gave it. A spent time budget keeps the fork.

use super::build::machine_symbol_fact;
use super::collapse::{edge_position, same_outcome, subtree};
use super::{Edge, MachineSymbols, Node, NodeKind};
use constraints::relax::refutes;
use constraints::{Constraint, System};
use std::collections::{BTreeSet, HashSet};

/// The edge of fork `id` whose side can take the fork's place (see the module's contract);
/// `facts` are the machine symbols' [`positivity_facts`].
pub(super) fn kept_side(nodes: &[Node], id: usize, facts: &[Constraint]) -> Option<Edge> {
    let fork = &nodes[id];
    let [a, b] = fork.children.as_slice() else { return None };
    if b.constraint != a.constraint.negate() || constraints::budget::expired() {
        return None;
    }
    let (side_a, side_b) = (subtree(nodes, a.child), subtree(nodes, b.child));
    let leaves = |side: &[usize]| {
        let mut l: Vec<usize> = side.iter().copied().filter(|&n| is_outcome(&nodes[n])).collect();
        l.sort_unstable();
        l
    };
    let (leaves_a, leaves_b) = (leaves(&side_a), leaves(&side_b));
    let both: Vec<usize> = leaves_a.iter().chain(&leaves_b).copied().collect();
    let order = first_outcomes(nodes, &both);
    // The order of the codes first (most forks choose: one side lacks a code), then the
    // shapes, then the proofs.
    let candidates: Vec<_> = [(a, (side_a.as_slice(), leaves_a.as_slice()), leaves_b.as_slice()), (b, (side_b.as_slice(), leaves_b.as_slice()), leaves_a.as_slice())]
        .into_iter()
        .filter(|(_, this, _)| same_order(nodes, &first_outcomes(nodes, this.1), &order))
        .collect();
    if candidates.is_empty() || [&[id][..], &side_a, &side_b].iter().any(|nodes_of| !splits_with_facts_only(nodes, nodes_of, facts)) {
        return None;
    }
    let kept = candidates.into_iter().find(|(keep, this, other)| agrees(nodes, fork.constraints.len(), keep, *this, other));
    kept.map(|(keep, ..)| keep.clone())
}

/// `1 <= V` for each machine symbol `V`: what every device satisfies.
pub(super) fn positivity_facts(machine: &MachineSymbols) -> Vec<Constraint> {
    machine.all().iter().map(|m| machine_symbol_fact(m)).collect()
}

/// A leaf: a kernel, or no kernel.
fn is_outcome(n: &Node) -> bool {
    !matches!(n.kind, NodeKind::Inner)
}

/// Every child of a node of `nodes_of` extends its parent's system (the same constraints
/// first) by its edge (unless the parent's holds it already) and `facts` only, and every inner
/// node forks into a split (two edges, each other's negation) or keeps one edge (its sibling
/// refuted when the tree was built).
fn splits_with_facts_only(nodes: &[Node], nodes_of: &[usize], facts: &[Constraint]) -> bool {
    nodes_of.iter().all(|&p| {
        let parent = &nodes[p];
        let shape = match parent.children.as_slice() {
            [] => is_outcome(parent),
            [_] => true,
            [x, y] => y.constraint == x.constraint.negate(),
            _ => false,
        };
        shape
            && parent.children.iter().all(|e| {
                let child = nodes[e.child].constraints.constraints();
                let before = parent.constraints.constraints();
                let Some(added) = child.get(before.len()..).filter(|_| child.starts_with(before)) else { return false };
                let edge_once = added.iter().filter(|&c| c == &e.constraint).count() + usize::from(before.contains(&e.constraint)) == 1;
                edge_once && added.iter().all(|c| c == &e.constraint || facts.contains(c))
            })
    })
}

/// The first leaf of each distinct outcome among `leaves` (in node order).
fn first_outcomes(nodes: &[Node], leaves: &[usize]) -> Vec<usize> {
    let mut firsts: Vec<usize> = Vec::new();
    for &l in leaves {
        if !firsts.iter().any(|&f| same_outcome(&nodes[f], &nodes[l])) {
            firsts.push(l);
        }
    }
    firsts
}

/// Whether two lists of leaves name the same outcomes in the same order.
fn same_order(nodes: &[Node], x: &[usize], y: &[usize]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(&p, &q)| same_outcome(&nodes[p], &nodes[q]))
}

/// Whether the side over `keep` (nodes `side`, leaves `kept`), without `keep`'s constraint,
/// still covers the fork's region and chooses at every point of the other side's leaves
/// (`other`) what they chose; `fork_len` is the length of the fork's own system. Each proof
/// is the linear relaxation's refutation ([`constraints::relax::refutes`]: exact, and no
/// solver query): a pair it cannot refute keeps the fork, as a query Z3 could decide would
/// have cost more than the fork's collapse saves.
fn agrees(nodes: &[Node], fork_len: usize, keep: &Edge, (side, kept): (&[usize], &[usize]), other: &[usize]) -> bool {
    // The constraint the edge added, below the fork's own system (never one of the fork's).
    let Some(at) = edge_position(&nodes[keep.child].constraints, &keep.constraint).filter(|&at| at >= fork_len) else { return false };
    if side.iter().any(|&n| nodes[n].constraints.constraints().get(at) != Some(&keep.constraint)) {
        return false;
    }
    let dropped = BTreeSet::from([at]);
    let refuted = |s: &System| !constraints::budget::expired() && refutes(s, None);
    let differ = |k: usize, o: usize| !same_outcome(&nodes[k], &nodes[o]);
    // Below the constraint dropped (what every leaf shares above it), the negations of each
    // kept leaf's constraints, and each other leaf's constraints as a set: paths through the
    // same fork on different sides (`x` on one, `not x` on the other) are disjoint.
    let negations = |s: &System| -> Vec<Constraint> { s.constraints()[at..].iter().map(Constraint::negate).collect() };
    let theirs: Vec<HashSet<&Constraint>> = other.iter().map(|&o| nodes[o].constraints.constraints().iter().collect()).collect();
    let pairs_disjoint = kept.iter().all(|&k| {
        let widened = nodes[k].constraints.without(&dropped);
        let negated = negations(&widened);
        other.iter().zip(&theirs).filter(|&(&o, _)| differ(k, o)).all(|(&o, their_set)| {
            if negated.iter().any(|n| their_set.contains(n)) {
                return true;
            }
            let mut both = widened.clone();
            for c in nodes[o].constraints.constraints().iter().filter(|c| !widened.constraints().contains(c)) {
                both.add(c.clone());
            }
            for (v, d) in nodes[o].constraints.domains() {
                both.set_domain(v.clone(), d.clone());
            }
            refuted(&both)
        })
    });
    // Each refuted sibling in the side stays refuted without the fork's constraint.
    pairs_disjoint
        && side.iter().all(|&p| match nodes[p].children.as_slice() {
            [only] => refuted(&nodes[p].constraints.without(&dropped).with(only.constraint.negate())),
            _ => true,
        })
}
