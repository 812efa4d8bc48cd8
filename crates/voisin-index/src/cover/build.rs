//! Cover-tree construction after [SharmaJoshi] (seed 004): breadth first, one level at a time
//! over the whole set, each node's items split among new children by a greedy pass. The tree
//! keeps covering (a child at level j is within bʲ⁺¹ of its parent), nesting (implicit in the
//! compressed form) and the seed's separation: the children a node gets at level j are more than
//! bʲ from it and from each other. Cousins are not compared (full separation, which an earlier
//! build kept, cost 11 times the evaluations on 100k clustered 20-d vectors and 61 times on
//! `data/words.txt`, for searches that measure at most a quarter fewer:
//! docs/design/gpu-cover-tree.md).
//!
//! State between levels, for the level `upper` just finished: every *active* node (one with
//! items still to place below it) holds them with their distances, all within b^upper of it.
//! One step goes down to the next level j at which some item anywhere is farther than bʲ from
//! its node; each active node keeps its items within bʲ, and its farther items (its *far*
//! items) pick new children of the node among themselves, by the greedy pass of nets.rs, which
//! a [`NetOracle`] runs for every node of the level at once (on CPU threads or a GPU).
//!
//! Items at distance 0 from their node are kept as its duplicates (they would break separation).
//! Each node's reach (largest distance to a descendant) is measured at the end, bottom-up, with a
//! farthest-descendant search that prunes subtrees by their own reach.

use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::nets::{check, NetBatch, NetOracle};
use super::{dist, Node};
use crate::space::Space;

/// The construction's output, in the layout `CoverTree` keeps.
pub(crate) struct Built {
    pub nodes: Vec<Node>,
    pub children: Vec<u32>,
    pub dups: Vec<u32>,
    pub evals: u64,
}

/// A node with items still to place below it: the items, ascending, with their distance to the
/// node, all within b^upper.
struct Active {
    node: u32,
    items: Vec<(u32, f64)>,
}

/// The level loop, with `oracle` doing every level's greedy passes.
pub(super) fn build<S: Space, O: NetOracle + ?Sized>(
    space: &S,
    base: f64,
    oracle: &O,
) -> voisin::Result<Built> {
    let n = space.len();
    let mut out = Built {
        nodes: Vec::new(),
        children: Vec::new(),
        dups: Vec::new(),
        evals: 0,
    };
    if n == 0 {
        return Ok(out);
    }
    let items: Vec<(u32, f64)> = (1..n as u32)
        .into_par_iter()
        .map(|x| (x, dist(space, 0, x)))
        .collect();
    let mut evals = items.len() as u64;
    let reach = items.iter().map(|x| x.1).fold(0.0, f64::max);
    let top = level_at_least(base, reach);
    let mut nodes = vec![new_node(0, top, 0, 0.0)];
    let mut dups: Vec<Vec<u32>> = vec![Vec::new()];
    let mut active = vec![Active { node: 0, items }];
    let mut upper = top;
    loop {
        for a in &mut active {
            if a.items.iter().any(|x| x.1 <= 0.0) {
                let (zero, rest): (Vec<_>, Vec<_>) = a.items.drain(..).partition(|x| x.1 <= 0.0);
                dups[a.node as usize].extend(zero.into_iter().map(|x| x.0));
                a.items = rest;
            }
        }
        active.retain(|a| !a.items.is_empty());
        let Some(level) = active
            .iter()
            .map(|a| next_level(base, upper, a.items.iter().map(|x| x.1)))
            .max()
        else {
            break;
        };
        let sep = base.powi(level);
        // Each active node keeps its items within sep; the rest go to the level's batch.
        let mut starts = vec![0usize];
        let (mut far_items, mut far_dists) = (Vec::new(), Vec::new());
        let mut far_slot = Vec::new();
        for (s, a) in active.iter_mut().enumerate() {
            if !a.items.iter().any(|x| x.1 > sep || x.1.is_nan()) {
                continue;
            }
            let (near, far): (Vec<_>, Vec<_>) = a.items.drain(..).partition(|x| x.1 <= sep);
            a.items = near;
            far_items.extend(far.iter().map(|x| x.0));
            far_dists.extend(far.iter().map(|x| x.1));
            starts.push(far_items.len());
            far_slot.push(s);
        }
        let batch = NetBatch {
            sep,
            starts: &starts,
            items: &far_items,
            dists: &far_dists,
        };
        let nets = oracle.nets(&batch)?;
        check(&batch, &nets)?;
        evals += nets.evals;
        // The new nodes, slot by slot in item order, and the items each takes.
        let mut next: Vec<Active> = Vec::new();
        for (b, &s) in far_slot.iter().enumerate() {
            let parent = active[s].node;
            let r = batch.range(b);
            // The slot of `next` each new node of this slot went to, by its position.
            let mut at = vec![usize::MAX; r.len()];
            for (q, p) in r.enumerate() {
                let o = nets.owner[p] as usize;
                if o == q {
                    at[q] = next.len();
                    nodes.push(new_node(far_items[p], level, parent, far_dists[p]));
                    dups.push(Vec::new());
                    next.push(Active {
                        node: (nodes.len() - 1) as u32,
                        items: Vec::new(),
                    });
                } else {
                    next[at[o]].items.push((far_items[p], nets.dist[p]));
                }
            }
        }
        active.retain(|a| !a.items.is_empty());
        next.retain(|a| !a.items.is_empty());
        active.extend(next);
        upper = level;
    }
    let mut kids: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
    for (id, node) in nodes.iter().enumerate().skip(1) {
        kids[node.parent as usize].push(id as u32);
    }
    evals += measure_reach(space, &mut nodes, &kids);
    for (i, node) in nodes.iter_mut().enumerate() {
        node.c0 = out.children.len();
        out.children.extend(&kids[i]);
        node.c1 = out.children.len();
        node.d0 = out.dups.len();
        out.dups.extend(&dups[i]);
        node.d1 = out.dups.len();
    }
    out.nodes = nodes;
    out.evals = evals;
    Ok(out)
}

fn new_node(item: u32, level: i32, parent: u32, parent_dist: f64) -> Node {
    Node {
        item,
        level,
        parent,
        parent_dist,
        reach: 0.0,
        c0: 0,
        c1: 0,
        d0: 0,
        d1: 0,
    }
}

/// The smallest level whose radius bˡ is at least `m` (0 when `m` is 0; the level where bˡ
/// overflows when `m` is not finite).
fn level_at_least(base: f64, m: f64) -> i32 {
    if m.is_nan() || m <= 0.0 {
        return 0;
    }
    let scale = if m.is_finite() { m } else { f64::MAX };
    let mut level = (scale.ln() / base.ln()).ceil() as i32;
    while base.powi(level) < m && base.powi(level).is_finite() {
        level += 1;
    }
    if !m.is_finite() {
        return level + 1;
    }
    while base.powi(level - 1) >= m {
        level -= 1;
    }
    level
}

/// The highest level below `upper` whose radius is smaller than the largest of `dists` (a NaN
/// distance counts as large: it then becomes a node rather than loop forever).
fn next_level(base: f64, upper: i32, dists: impl Iterator<Item = f64>) -> i32 {
    let m = dists.max_by(f64::total_cmp).unwrap_or(0.0);
    if !m.is_finite() {
        return upper - 1;
    }
    let level = level_at_least(base, m) - 1;
    level.min(upper - 1)
}

/// Sets every node's reach to the largest distance to a node below it, lowest levels first so
/// that a subtree whose bound (distance + its reach) cannot beat the best so far is skipped.
/// Duplicates are at distance 0 from their node, so they never exceed it. `kids` lists each
/// node's children. Returns evaluations.
fn measure_reach<S: Space>(space: &S, nodes: &mut [Node], kids: &[Vec<u32>]) -> u64 {
    let mut by_level: Vec<(i32, u32)> = nodes
        .iter()
        .enumerate()
        .map(|(id, n)| (n.level, id as u32))
        .collect();
    by_level.sort_unstable();
    let mut evals = 0u64;
    for same in by_level.chunk_by(|a, b| a.0 == b.0) {
        let same: Vec<u32> = same.iter().map(|x| x.1).collect();
        let done: Vec<(f64, u64)> = same
            .par_iter()
            .map(|&id| farthest(space, nodes, kids, id))
            .collect();
        for (&id, (reach, e)) in same.iter().zip(done) {
            nodes[id as usize].reach = reach;
            evals += e;
        }
    }
    evals
}

/// The largest distance from node `id` to a node below it (whose reaches are already set).
fn farthest<S: Space>(space: &S, nodes: &[Node], kids: &[Vec<u32>], id: u32) -> (f64, u64) {
    let item = nodes[id as usize].item;
    let mut best = 0.0f64;
    let mut evals = 0u64;
    // Max-heap of (upper bound on the subtree's farthest distance, node, its distance).
    let mut heap: BinaryHeap<Bound> = kids[id as usize]
        .iter()
        .map(|&c| {
            let n = &nodes[c as usize];
            Bound(n.parent_dist + n.reach, c, n.parent_dist)
        })
        .collect();
    // A bound only rules a subtree out beyond rounding doubt, so the reach found is exact.
    let below = |bound: f64, best: f64| space.beyond(best, bound, bound);
    while let Some(Bound(ub, c, d)) = heap.pop() {
        if below(ub, best) {
            break;
        }
        best = best.max(d);
        for &g in &kids[c as usize] {
            let n = &nodes[g as usize];
            if below(d + n.parent_dist + n.reach, best) {
                continue;
            }
            evals += 1;
            let dg = dist(space, item, n.item);
            heap.push(Bound(dg + n.reach, g, dg));
        }
    }
    (best, evals)
}

/// A subtree waiting in the farthest-descendant search, largest bound first.
struct Bound(f64, u32, f64);

impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Bound {}

impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(other.1.cmp(&self.1))
    }
}
