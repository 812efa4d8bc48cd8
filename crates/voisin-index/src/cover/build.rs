//! Cover-tree construction, one level at a time over the whole set ([SharmaJoshi]'s breadth-first
//! scheme), keeping the full separation invariant: every two nodes present at level j (a node is
//! present at its own level and all below) are more than bʲ apart, not only siblings.
//!
//! State between levels, for the level `upper` just finished: every node that still has items to
//! place (an *active* node) holds them with their distances, all within b^upper of it, and its
//! *relatives*: the nodes present at `upper` within c·b^upper of it, with c = (2b + 1)/(b − 1)
//! (5 for b = 2). One step goes down to the next level j at which some item anywhere is farther
//! than bʲ from its node, and, with every stage parallel over nodes or groups of nodes:
//!
//! 1. an active node keeps its items within bʲ; each farther item moves to the nearest relative
//!    within bʲ if there is one (so no new node lands within bʲ of an old one);
//! 2. the far items left pick new level-j nodes greedily in index order: an item becomes a node
//!    unless an earlier new node is within bʲ, in which case it moves below that one. Items of two
//!    nodes that are not relatives are more than bʲ apart, so the greedy pass runs separately on
//!    each connected group of relatives (in parallel) and only compares items of relatives;
//! 3. every node active at j gets its relatives at j from those of a node active at `upper` it is
//!    near (itself, its parent, or the node an item came from) and the new children of those.
//!
//! Why c suffices: an old node within bʲ of a far item x of node p is within bʲ + b^upper of p; two
//! far items within bʲ belong to nodes within 2b^upper + bʲ; and for step 3, a node within c·bʲ of
//! z sits within b^upper of a node at `upper` that is within (1 + c)bʲ + 2b^upper ≤ c·b^upper of z's
//! source. All three stay within c·b^upper since j < upper.
//!
//! Items at distance 0 from their node are kept as its duplicates (they would break separation).
//! Each node's reach (largest distance to a descendant) is measured at the end, bottom-up, with a
//! farthest-descendant search that prunes subtrees by their own reach.

use std::collections::BinaryHeap;

use rayon::prelude::*;

use super::{dist, Node};
use crate::pairs::dist_within;
use crate::space::Space;

/// The construction's output, in the layout `CoverTree` keeps.
pub(crate) struct Built {
    pub nodes: Vec<Node>,
    pub children: Vec<u32>,
    pub dups: Vec<u32>,
    pub evals: u64,
}

/// A node with items still to place below it.
pub(super) struct Active {
    pub node: u32,
    /// Items with their distance to the node, all within b^upper.
    pub items: Vec<(u32, f64)>,
    /// Nodes present at `upper` within c·b^upper of this one (itself included).
    pub rel: Vec<Rel>,
}

/// A node near another one: its id, its item and the distance between the two.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rel {
    pub node: u32,
    pub item: u32,
    pub d: f64,
}

/// What stage 1 makes of one active node's items at the new level.
#[derive(Default)]
pub(super) struct Split {
    pub near: Vec<(u32, f64)>,
    /// (old node near this one, item, the item's distance to that node).
    pub moved: Vec<(Rel, u32, f64)>,
    /// Items no node covers yet, with their distance to this node.
    pub far: Vec<(u32, f64)>,
    pub evals: u64,
}

/// A new node from stage 2: its item, the active node (slot) it hangs from, the distance, and
/// the far items it covers.
pub(super) struct Center {
    pub item: u32,
    pub slot: usize,
    pub parent_dist: f64,
    pub items: Vec<(u32, f64)>,
}

/// A node active at the new level and where its relatives come from.
struct Next {
    node: u32,
    items: Vec<(u32, f64)>,
    /// Slot of the active node whose relatives seed this one's, and the distance between them.
    source: usize,
    source_dist: f64,
}

/// What a node active at the new level asks for its relatives: itself (`me.d`: its distance to its
/// source), the source's relatives, and whether the source is the node itself.
pub(super) struct RelAsk<'a> {
    pub me: Rel,
    pub src: &'a [Rel],
    pub own: bool,
}

/// The stages of a level that evaluate distances, as one construction does them: [`Builder`]
/// does each node's work on CPU threads, `batched::Batched` hands it to a pair oracle (the GPU)
/// in a few large batches per level. Both give the same tree: the loop in [`build`] is shared.
pub(super) trait Stages {
    type Error;

    /// Every item's distance to item 0, the root (`(x, d)` for x = 1..n).
    fn root(&self, n: usize) -> Result<Vec<(u32, f64)>, Self::Error>;

    /// Stage 1 for every active node.
    fn splits(&self, active: &[Active], sep: f64) -> Result<Vec<Split>, Self::Error>;

    /// Stage 2 over every group of relatives that has uncovered far items: the new nodes and
    /// the evaluations.
    fn nets(
        &self,
        active: &[Active],
        splits: &[Split],
        n_nodes: usize,
        sep: f64,
    ) -> Result<(Vec<Center>, u64), Self::Error>;

    /// Stage 3: the relatives within `cap` of every node active at the new level, with the
    /// evaluations each took.
    fn relatives(
        &self,
        asks: &[RelAsk<'_>],
        new_kids: &[Vec<Rel>],
        cap: f64,
    ) -> Result<Vec<(Vec<Rel>, u64)>, Self::Error>;
}

/// The CPU's stages.
pub(super) struct Builder<'a, S: Space> {
    pub space: &'a S,
}

/// c in the module doc.
fn factor(base: f64) -> f64 {
    (2.0 * base + 1.0) / (base - 1.0)
}

/// The construction on CPU threads.
pub(super) fn build_cpu<S: Space>(space: &S, base: f64) -> Built {
    match build(space, base, &Builder { space }) {
        Ok(b) => b,
        Err(e) => match e {},
    }
}

/// The level loop, with `stages` doing the distance work.
pub(super) fn build<S: Space, T: Stages>(
    space: &S,
    base: f64,
    stages: &T,
) -> Result<Built, T::Error> {
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
    let items = stages.root(n)?;
    let mut evals = items.len() as u64;
    let reach = items.iter().map(|x| x.1).fold(0.0, f64::max);
    let top = level_at_least(base, reach);
    let mut nodes = vec![new_node(0, top, 0, 0.0)];
    let mut dups: Vec<Vec<u32>> = vec![Vec::new()];
    let mut active = vec![Active {
        node: 0,
        items,
        rel: vec![Rel {
            node: 0,
            item: 0,
            d: 0.0,
        }],
    }];
    let mut upper = top;
    loop {
        for a in &mut active {
            let (zero, rest): (Vec<_>, Vec<_>) = a.items.drain(..).partition(|x| x.1 <= 0.0);
            dups[a.node as usize].extend(zero.into_iter().map(|x| x.0));
            a.items = rest;
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
        let splits = stages.splits(&active, sep)?;
        let (centers, net_evals) = stages.nets(&active, &splits, nodes.len(), sep)?;
        evals += net_evals + splits.iter().map(|s| s.evals).sum::<u64>();
        let mut next = regroup(&active, splits, nodes.len());
        let first_new = nodes.len();
        let mut new_kids: Vec<Vec<Rel>> = vec![Vec::new(); first_new];
        for c in centers {
            let id = nodes.len() as u32;
            let parent = active[c.slot].node;
            nodes.push(new_node(c.item, level, parent, c.parent_dist));
            dups.push(Vec::new());
            new_kids[parent as usize].push(Rel {
                node: id,
                item: c.item,
                d: c.parent_dist,
            });
            if !c.items.is_empty() {
                next.push(Next {
                    node: id,
                    items: c.items,
                    source: c.slot,
                    source_dist: c.parent_dist,
                });
            }
        }
        let cap = factor(base) * sep;
        let asks: Vec<RelAsk<'_>> = next
            .iter()
            .map(|x| RelAsk {
                me: Rel {
                    node: x.node,
                    item: nodes[x.node as usize].item,
                    d: x.source_dist,
                },
                src: &active[x.source].rel,
                own: active[x.source].node == x.node,
            })
            .collect();
        let rels = stages.relatives(&asks, &new_kids, cap)?;
        drop(asks);
        evals += rels.iter().map(|x| x.1).sum::<u64>();
        active = next
            .into_iter()
            .zip(rels)
            .map(|(x, (rel, _))| Active {
                node: x.node,
                items: x.items,
                rel,
            })
            .collect();
        upper = level;
    }
    evals += measure_reach(space, &mut nodes);
    let mut kids: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
    for (id, node) in nodes.iter().enumerate().skip(1) {
        kids[node.parent as usize].push(id as u32);
    }
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

impl<S: Space> Stages for Builder<'_, S> {
    type Error = std::convert::Infallible;

    fn root(&self, n: usize) -> Result<Vec<(u32, f64)>, Self::Error> {
        let space = self.space;
        Ok((1..n as u32)
            .into_par_iter()
            .map(|x| (x, dist(space, 0, x)))
            .collect())
    }

    fn splits(&self, active: &[Active], sep: f64) -> Result<Vec<Split>, Self::Error> {
        Ok(active.par_iter().map(|a| self.split(a, sep)).collect())
    }

    fn nets(
        &self,
        active: &[Active],
        splits: &[Split],
        n_nodes: usize,
        sep: f64,
    ) -> Result<(Vec<Center>, u64), Self::Error> {
        let (groups, slot_of) = relative_groups(active, splits, n_nodes);
        let done: Vec<(Vec<Center>, u64)> = groups
            .par_iter()
            .map(|g| self.net(g, active, splits, &slot_of, sep))
            .collect();
        let evals = done.iter().map(|x| x.1).sum();
        Ok((done.into_iter().flat_map(|x| x.0).collect(), evals))
    }

    fn relatives(
        &self,
        asks: &[RelAsk<'_>],
        new_kids: &[Vec<Rel>],
        cap: f64,
    ) -> Result<Vec<(Vec<Rel>, u64)>, Self::Error> {
        let space = self.space;
        Ok(asks
            .par_iter()
            .map(|ask| {
                let mut evals = 0u64;
                let rel = relatives_with(space, ask, new_kids, cap, |c| {
                    evals += 1;
                    dist_within(space, ask.me.item, c.item, cap)
                });
                (rel, evals)
            })
            .collect())
    }
}

/// The groups of active slots (sorted, each sorted) whose far items the greedy pass of stage 2
/// must compare (slots with far items joined when one is the other's relative), and every
/// node's active slot (`u32::MAX` for none).
pub(super) fn relative_groups(
    active: &[Active],
    splits: &[Split],
    n_nodes: usize,
) -> (Vec<Vec<usize>>, Vec<u32>) {
    let mut slot_of = vec![u32::MAX; n_nodes];
    for (s, a) in active.iter().enumerate() {
        slot_of[a.node as usize] = s as u32;
    }
    let has_far = |s: usize| !splits[s].far.is_empty();
    let mut groups = Groups::new(active.len());
    for (s, a) in active.iter().enumerate().filter(|(s, _)| has_far(*s)) {
        for q in &a.rel {
            let t = slot_of[q.node as usize];
            if t != u32::MAX && has_far(t as usize) {
                groups.join(s, t as usize);
            }
        }
    }
    let groups = groups.members((0..active.len()).filter(|&s| has_far(s)));
    (groups, slot_of)
}

/// One group's far items for the greedy pass: `pts[i]` = (item, local slot, distance to the
/// slot's node), slot group[l]'s share is `range[l]`, and `order` visits them by item.
pub(super) struct GroupPoints<'a> {
    pub group: &'a [usize],
    pub pts: Vec<(u32, usize, f64)>,
    pub range: Vec<std::ops::Range<usize>>,
    pub order: Vec<usize>,
    slot_of: &'a [u32],
}

impl<'a> GroupPoints<'a> {
    pub fn new(group: &'a [usize], splits: &[Split], slot_of: &'a [u32]) -> Self {
        let mut pts: Vec<(u32, usize, f64)> = Vec::new();
        let mut range = Vec::with_capacity(group.len());
        for (i, &s) in group.iter().enumerate() {
            let start = pts.len();
            pts.extend(splits[s].far.iter().map(|&(x, d)| (x, i, d)));
            range.push(start..pts.len());
        }
        let mut order: Vec<usize> = (0..pts.len()).collect();
        order.sort_unstable_by_key(|&i| pts[i].0);
        GroupPoints {
            group,
            pts,
            range,
            order,
            slot_of,
        }
    }

    /// The local slot of `node` in this group, if it is an active node of the group.
    pub fn local(&self, node: u32) -> Option<usize> {
        let s = self.slot_of[node as usize];
        (s != u32::MAX)
            .then(|| self.group.binary_search(&(s as usize)).ok())
            .flatten()
    }

    /// The far items that point `i` (a new center) must measure: unowned items of its slot's
    /// relatives in the group that the triangle inequality does not rule out, in order of the
    /// relatives.
    pub fn candidates<S: Space>(
        &self,
        space: &S,
        active: &[Active],
        i: usize,
        owned: impl Fn(usize) -> bool,
        sep: f64,
        out: &mut Vec<usize>,
    ) {
        let (_, li, dx) = self.pts[i];
        for q in &active[self.group[li]].rel {
            let Some(lq) = self.local(q.node) else {
                continue;
            };
            for j in self.range[lq].clone() {
                let (dq, dy) = (q.d, self.pts[j].2);
                if !owned(j) && !space.beyond(dq - dx - dy, sep, dq + dx + dy) {
                    out.push(j);
                }
            }
        }
    }

    /// The new centers with their items, once every point has its owner (center, distance).
    pub fn finish(
        &self,
        owner: Vec<Option<(usize, f64)>>,
        mut centers: Vec<Center>,
    ) -> Vec<Center> {
        for (i, o) in owner.into_iter().enumerate() {
            let (ci, d) = o.expect("every far item is a center or covered");
            if centers[ci].item != self.pts[i].0 {
                centers[ci].items.push((self.pts[i].0, d));
            }
        }
        centers
    }
}

/// The relatives at the new level (radius `cap`) of `ask.me`, from the source's relatives and
/// their new children; `measure(c)` is the distance from `ask.me` to candidate `c` when within
/// `cap`. When the source is `me` itself its stored distances need no new evaluation.
pub(super) fn relatives_with<S: Space>(
    space: &S,
    ask: &RelAsk<'_>,
    new_kids: &[Vec<Rel>],
    cap: f64,
    mut measure: impl FnMut(Rel) -> Option<f64>,
) -> Vec<Rel> {
    let me = ask.me;
    let mut rel = vec![Rel { d: 0.0, ..me }];
    for &r in ask.src {
        let kids = new_kids
            .get(r.node as usize)
            .map_or(&[][..], |k| k.as_slice());
        let itself = Rel { d: 0.0, ..r };
        for c in std::iter::once(itself).chain(kids.iter().copied()) {
            // c.d is the candidate's distance to r; r.d is r's distance to the source.
            if c.node == me.node {
                continue;
            }
            if ask.own && c.node == r.node {
                if r.d <= cap {
                    rel.push(r);
                }
                continue;
            }
            if space.beyond(r.d - me.d - c.d, cap, r.d + me.d + c.d) {
                continue;
            }
            if let Some(d) = measure(c) {
                rel.push(Rel { d, ..c });
            }
        }
    }
    rel
}

impl<S: Space> Builder<'_, S> {
    /// Stage 1 for one active node.
    fn split(&self, a: &Active, sep: f64) -> Split {
        let space = self.space;
        let mut out = Split::default();
        for &(x, dx) in &a.items {
            if dx <= sep {
                out.near.push((x, dx));
                continue;
            }
            let mut best: Option<(Rel, f64)> = None;
            for &q in &a.rel {
                let bound = best.map_or(sep, |b| b.1);
                if q.node == a.node || space.beyond((dx - q.d).abs(), bound, dx + q.d) {
                    continue;
                }
                out.evals += 1;
                if let Some(d) = dist_within(space, x, q.item, bound) {
                    if best.is_none_or(|b| d < b.1) {
                        best = Some((q, d));
                    }
                }
            }
            match best {
                Some((q, d)) => out.moved.push((q, x, d)),
                None => out.far.push((x, dx)),
            }
        }
        out
    }

    /// Stage 2 for one group of active slots (sorted).
    fn net(
        &self,
        group: &[usize],
        active: &[Active],
        splits: &[Split],
        slot_of: &[u32],
        sep: f64,
    ) -> (Vec<Center>, u64) {
        let space = self.space;
        let g = GroupPoints::new(group, splits, slot_of);
        let mut owner: Vec<Option<(usize, f64)>> = vec![None; g.pts.len()];
        let mut centers: Vec<Center> = Vec::new();
        let mut evals = 0u64;
        let mut candidates = Vec::new();
        for &i in &g.order {
            if owner[i].is_some() {
                continue;
            }
            let (x, li, dx) = g.pts[i];
            let ci = centers.len();
            owner[i] = Some((ci, 0.0));
            centers.push(Center {
                item: x,
                slot: group[li],
                parent_dist: dx,
                items: Vec::new(),
            });
            candidates.clear();
            g.candidates(
                space,
                active,
                i,
                |j| owner[j].is_some(),
                sep,
                &mut candidates,
            );
            evals += candidates.len() as u64;
            let measure = |&j: &usize| dist_within(space, x, g.pts[j].0, sep).map(|d| (j, d));
            let covered: Vec<(usize, f64)> = if candidates.len() > 256 {
                candidates.par_iter().filter_map(measure).collect()
            } else {
                candidates.iter().filter_map(measure).collect()
            };
            for (j, d) in covered {
                owner[j] = Some((ci, d));
            }
        }
        (g.finish(owner, centers), evals)
    }
}

/// Disjoint sets over active slots (union by size, path halving).
struct Groups(Vec<usize>, Vec<usize>);

impl Groups {
    fn new(n: usize) -> Self {
        Groups((0..n).collect(), vec![1; n])
    }

    fn root(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }

    fn join(&mut self, a: usize, b: usize) {
        let (mut a, mut b) = (self.root(a), self.root(b));
        if a != b {
            if self.1[a] < self.1[b] {
                std::mem::swap(&mut a, &mut b);
            }
            self.0[b] = a;
            self.1[a] += self.1[b];
        }
    }

    /// The groups of `slots` (ascending), each sorted, in the order of their smallest slot.
    fn members(mut self, slots: impl Iterator<Item = usize>) -> Vec<Vec<usize>> {
        let mut index = vec![usize::MAX; self.0.len()];
        let mut out: Vec<Vec<usize>> = Vec::new();
        for s in slots {
            let r = self.root(s);
            if index[r] == usize::MAX {
                index[r] = out.len();
                out.push(Vec::new());
            }
            out[index[r]].push(s);
        }
        out
    }
}

/// The active nodes of the next level before stage 2's new nodes join: every old active node
/// keeps its near items (its own relatives seed its next ones), and an item moved to another old
/// node joins that node, which becomes active if it was not (seeded by the node the item left).
fn regroup(active: &[Active], splits: Vec<Split>, n_nodes: usize) -> Vec<Next> {
    let mut at = vec![usize::MAX; n_nodes];
    let mut next: Vec<Next> = Vec::with_capacity(active.len());
    let mut moves = Vec::new();
    for (s, (a, split)) in active.iter().zip(splits).enumerate() {
        at[a.node as usize] = next.len();
        next.push(Next {
            node: a.node,
            items: split.near,
            source: s,
            source_dist: 0.0,
        });
        moves.push((s, split.moved));
    }
    for (s, moved) in moves {
        for (q, x, d) in moved {
            if at[q.node as usize] == usize::MAX {
                at[q.node as usize] = next.len();
                next.push(Next {
                    node: q.node,
                    items: Vec::new(),
                    source: s,
                    source_dist: q.d,
                });
            }
            next[at[q.node as usize]].items.push((x, d));
        }
    }
    next.retain(|x| !x.items.is_empty());
    next
}

/// Sets every node's reach to the largest distance to a node below it, lowest levels first so
/// that a subtree whose bound (distance + its reach) cannot beat the best so far is skipped.
/// Duplicates are at distance 0 from their node, so they never exceed it. Returns evaluations.
fn measure_reach<S: Space>(space: &S, nodes: &mut [Node]) -> u64 {
    let mut kids: Vec<Vec<u32>> = vec![Vec::new(); nodes.len()];
    for (id, node) in nodes.iter().enumerate().skip(1) {
        kids[node.parent as usize].push(id as u32);
    }
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
            .map(|&id| farthest(space, nodes, &kids, id))
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
