//! The control-flow graph of a function as index lists: successors and predecessors of each
//! basic block (block 0 is the entry), depth-first back edges, dominators and natural loops.
//! Exact for the reducible CFGs that structured code produces, which is all the lowering
//! emits; on an irreducible CFG, back edges are those the depth-first search finds.

use inkwell::basic_block::BasicBlock;
use inkwell::llvm_sys::prelude::LLVMValueRef;
use inkwell::values::{FunctionValue, Operand};
// Keys are LLVM value pointers and block indices: Fx hashes them in a few instructions,
// where the default SipHash was 1-2% of a whole `gen`.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

pub struct Cfg<'ctx> {
    pub blocks: Vec<BasicBlock<'ctx>>,
    /// Each block's index in `blocks`, by the block's address.
    index: HashMap<usize, usize>,
    pub succs: Vec<Vec<usize>>,
    pub preds: Vec<Vec<usize>>,
    /// `(latch, header)` for each edge to a block on the depth-first stack.
    pub back_edges: Vec<(usize, usize)>,
    /// `dominators[b]`: the blocks dominating `b` (itself included); empty when unreachable.
    pub dominators: Vec<HashSet<usize>>,
}

impl<'ctx> Cfg<'ctx> {
    pub fn of(function: FunctionValue<'ctx>) -> Cfg<'ctx> {
        let blocks = function.get_basic_blocks();
        let index: HashMap<usize, usize> =
            blocks.iter().enumerate().map(|(i, b)| (b.as_mut_ptr() as LLVMValueRef as usize, i)).collect();
        let succs: Vec<Vec<usize>> = blocks
            .iter()
            .map(|b| {
                let Some(t) = b.get_terminator() else { return Vec::new() };
                (0..t.get_num_operands())
                    .filter_map(|n| match t.get_operand(n) {
                        Some(Operand::Block(s)) => index.get(&(s.as_mut_ptr() as LLVMValueRef as usize)).copied(),
                        _ => None,
                    })
                    .collect()
            })
            .collect();
        let n = succs.len();
        let mut preds = vec![Vec::new(); n];
        for (b, ss) in succs.iter().enumerate() {
            for &s in ss {
                preds[s].push(b);
            }
        }
        let back_edges = back_edges(&succs);
        let dominators = dominators(&succs, &preds);
        Cfg { blocks, index, succs, preds, back_edges, dominators }
    }

    /// The index of `block` in `blocks`.
    pub fn block_index(&self, block: BasicBlock<'_>) -> Option<usize> {
        self.index.get(&(block.as_mut_ptr() as LLVMValueRef as usize)).copied()
    }

    /// The natural loop of each header: the header and every block reaching one of its
    /// latches without passing through it.
    pub fn loops(&self) -> Vec<(usize, HashSet<usize>)> {
        natural_loops(&self.preds, &self.back_edges)
    }

    /// The blocks from which `to` is reachable along forward edges (back edges removed),
    /// `to` excluded.
    pub fn forward_ancestors(&self, to: usize) -> HashSet<usize> {
        let back: HashSet<(usize, usize)> = self.back_edges.iter().copied().collect();
        let mut seen = HashSet::default();
        let mut work = vec![to];
        while let Some(x) = work.pop() {
            for &p in &self.preds[x] {
                if !back.contains(&(p, x)) && p != to && seen.insert(p) {
                    work.push(p);
                }
            }
        }
        seen
    }

    /// The immediate dominator of `b` (none for the entry or an unreachable block).
    pub fn idom(&self, b: usize) -> Option<usize> {
        let strict: Vec<usize> = self.dominators[b].iter().copied().filter(|&d| d != b).collect();
        // The strict dominator that every other strict dominator dominates.
        strict.iter().copied().find(|&d| strict.iter().all(|&o| self.dominators[d].contains(&o)))
    }
}

fn back_edges(succs: &[Vec<usize>]) -> Vec<(usize, usize)> {
    let n = succs.len();
    let mut edges = Vec::new();
    if n == 0 {
        return edges;
    }
    let mut state = vec![0u8; n]; // 0 new, 1 on stack, 2 done
    let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
    state[0] = 1;
    while let Some(&mut (b, ref mut next)) = stack.last_mut() {
        if *next < succs[b].len() {
            let s = succs[b][*next];
            *next += 1;
            match state[s] {
                0 => {
                    state[s] = 1;
                    stack.push((s, 0));
                }
                1 => edges.push((b, s)),
                _ => {}
            }
        } else {
            state[b] = 2;
            stack.pop();
        }
    }
    edges
}

/// Iterative dataflow over the blocks reachable from the entry: dom(entry) = {entry};
/// dom(b) = {b} ∪ ⋂ dom(p) over b's reachable predecessors. Unreachable blocks get none.
fn dominators(succs: &[Vec<usize>], preds: &[Vec<usize>]) -> Vec<HashSet<usize>> {
    let n = succs.len();
    if n == 0 {
        return Vec::new();
    }
    let mut reachable = vec![false; n];
    let mut work = vec![0];
    reachable[0] = true;
    while let Some(x) = work.pop() {
        for &s in &succs[x] {
            if !reachable[s] {
                reachable[s] = true;
                work.push(s);
            }
        }
    }
    let all: HashSet<usize> = (0..n).filter(|&b| reachable[b]).collect();
    let mut dom: Vec<HashSet<usize>> =
        (0..n).map(|b| if reachable[b] { all.clone() } else { HashSet::default() }).collect();
    dom[0] = HashSet::from_iter([0]);
    let mut changed = true;
    while changed {
        changed = false;
        for b in (1..n).filter(|&b| reachable[b]) {
            let mut new: Option<HashSet<usize>> = None;
            for &p in preds[b].iter().filter(|&&p| reachable[p]) {
                new = Some(match new {
                    None => dom[p].clone(),
                    Some(acc) => acc.intersection(&dom[p]).copied().collect(),
                });
            }
            let mut new = new.unwrap_or_default();
            new.insert(b);
            if new != dom[b] {
                dom[b] = new;
                changed = true;
            }
        }
    }
    dom
}

fn natural_loops(preds: &[Vec<usize>], back_edges: &[(usize, usize)]) -> Vec<(usize, HashSet<usize>)> {
    let mut loops: Vec<(usize, HashSet<usize>)> = Vec::new();
    for &(latch, header) in back_edges {
        let mut body: HashSet<usize> = HashSet::from_iter([header]);
        let mut work = vec![latch];
        while let Some(x) = work.pop() {
            if body.insert(x) {
                work.extend(preds[x].iter().copied());
            }
        }
        match loops.iter_mut().find(|(h, _)| *h == header) {
            Some((_, existing)) => existing.extend(body),
            None => loops.push((header, body)),
        }
    }
    loops
}

/// The blocks of each innermost natural loop of a CFG given by successor lists.
pub fn innermost_loops(succs: &[Vec<usize>]) -> Vec<HashSet<usize>> {
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); succs.len()];
    for (b, ss) in succs.iter().enumerate() {
        for &s in ss {
            preds[s].push(b);
        }
    }
    let loops = natural_loops(&preds, &back_edges(succs));
    loops
        .iter()
        .filter(|(h, body)| !loops.iter().any(|(h2, _)| h2 != h && body.contains(h2)))
        .map(|(_, body)| body.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preds_of(succs: &[Vec<usize>]) -> Vec<Vec<usize>> {
        let mut preds = vec![Vec::new(); succs.len()];
        for (b, ss) in succs.iter().enumerate() {
            for &s in ss {
                preds[s].push(b);
            }
        }
        preds
    }

    #[test]
    fn finds_innermost_loops_and_their_sizes() {
        // 0 -> 1 (outer header) -> 2 (inner header, self loop) -> 3 -> 1 ; 1 -> 4 exit
        let cfg = vec![vec![1], vec![2, 4], vec![2, 3], vec![1], vec![]];
        let sizes: Vec<usize> = innermost_loops(&cfg).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, vec![1]);
        assert!(innermost_loops(&[vec![1], vec![]]).is_empty());
        let mut back = back_edges(&cfg);
        back.sort();
        assert_eq!(back, vec![(2, 2), (3, 1)]);
    }

    #[test]
    fn dominators_of_a_diamond_in_a_loop() {
        // 0 -> 1 (header) -> {2, 3} -> 4 (join, latch) -> 1 or exit 5; 5 unreachable-free.
        // 6 is unreachable.
        let succs = vec![vec![1], vec![2, 3], vec![4], vec![4], vec![1, 5], vec![], vec![5]];
        let dom = dominators(&succs, &preds_of(&succs));
        assert_eq!(dom[4], HashSet::from_iter([0, 1, 4]));
        assert_eq!(dom[2], HashSet::from_iter([0, 1, 2]));
        assert_eq!(dom[5], HashSet::from_iter([0, 1, 4, 5]));
        assert!(dom[6].is_empty(), "an unreachable block has no dominators");
    }
}
