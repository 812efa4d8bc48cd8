//! Cover tree ([SharmaJoshi], docs/references.md), in compressed form: a node is an item at its highest level, its
//! children sit at lower levels, and its copy at every level below is implicit (nesting).
//!
//! Construction ([`build`]) goes down one level at a time over the whole set, in parallel, in the
//! breadth-first manner of [SharmaJoshi], and keeps the seed's invariants
//! ([`CoverTree::check_invariants`]): covering (a child at level j is within bʲ⁺¹ of its parent),
//! nesting (implicit) and separation between siblings (the children a node gets at level j are
//! more than bʲ from it and from each other), plus each node's stored reach (the largest
//! distance to a descendant), which is all the search prunes with. Items at distance 0 from a
//! node are kept as its duplicates.
//!
//! Each level's distance work is one greedy pass per node over its own far items ([`nets`]),
//! done by a [`NetOracle`]: CPU threads ([`CpuNets`]) or the GPU (voisin-cuda). Measured on this
//! project's sets (docs/design/gpu-cover-tree.md): 279 evaluations per item for 100k clustered
//! 20-d vectors and 289 for the 94,577 words of `data/words.txt`, where the full separation an
//! earlier build kept (cousins too) took 3,096 and 17,660.

mod build;
pub mod nets;

use rayon::prelude::*;

use crate::file::ItemTally;
use crate::search::{Collector, Dist, MetricIndex, Probe};
use crate::space::Space;
pub use nets::{CpuNets, NetBatch, NetOracle, Nets};

/// One node: an item at its top level.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The item's position in the space (the root, node 0, holds item 0 after a build).
    pub item: u32,
    /// The node's top level j: it lies within bʲ⁺¹ of its parent, and its children sit at
    /// lower levels.
    pub level: i32,
    /// Parent node id (the root is its own parent).
    pub parent: u32,
    /// Distance to the parent's item (0 for the root).
    pub parent_dist: f64,
    /// Largest distance from this item to any item below it (duplicates included).
    pub reach: f64,
    /// Children node ids: `children[c0..c1]` of the tree.
    pub c0: usize,
    /// End (exclusive) of this node's children in the tree's child list; `c0 <= c1`.
    pub c1: usize,
    /// Duplicate items: `dups[d0..d1]` of the tree.
    pub d0: usize,
    /// End (exclusive) of this node's duplicates in the tree's duplicate list; `d0 <= d1`.
    pub d1: usize,
}

/// A cover tree over a space.
pub struct CoverTree<S: Space> {
    space: S,
    base: f64,
    nodes: Vec<Node>,
    children: Vec<u32>,
    dups: Vec<u32>,
    build_evals: u64,
}

impl<S: Space> CoverTree<S> {
    /// Builds with `base` > 1 (2 is the classic choice, 1.3 a common tighter one) on CPU threads.
    pub fn build(space: S, base: f64) -> Self {
        assert!(
            base > 1.0 && base.is_finite(),
            "cover tree base must be > 1"
        );
        let built = match build::build(&space, base, &CpuNets(&space)) {
            Ok(b) => b,
            Err(e) => unreachable!("the CPU's greedy pass answers every slot: {e}"),
        };
        Self::from_built(space, base, built)
    }

    fn from_built(space: S, base: f64, built: build::Built) -> Self {
        CoverTree {
            space,
            base,
            nodes: built.nodes,
            children: built.children,
            dups: built.dups,
            build_evals: built.evals,
        }
    }

    /// Builds with every level's greedy passes done by `nets` (the GPU build,
    /// docs/design/gpu-cover-tree.md). With an oracle that answers as [`CpuNets`] does, the tree
    /// is [`CoverTree::build`]'s, node for node; an answer that cannot be a greedy pass's is an
    /// error, and the layout is checked before the tree is returned.
    pub fn build_with<O: NetOracle + ?Sized>(
        space: S,
        base: f64,
        nets: &O,
    ) -> voisin::Result<Self> {
        if !(base > 1.0 && base.is_finite()) {
            return Err(voisin::Error::invalid(format!(
                "cover tree base {base} must be > 1"
            )));
        }
        let built = build::build(&space, base, nets)?;
        let tree = Self::from_built(space, base, built);
        tree.check_layout()
            .map_err(|e| voisin::Error::device(format!("the cover tree build went wrong: {e}")))?;
        Ok(tree)
    }

    pub(crate) fn from_parts(
        space: S,
        base: f64,
        nodes: Vec<Node>,
        children: Vec<u32>,
        dups: Vec<u32>,
    ) -> Self {
        CoverTree {
            space,
            base,
            nodes,
            children,
            dups,
            build_evals: 0,
        }
    }

    pub(crate) fn parts(&self) -> (f64, &[Node], &[u32], &[u32]) {
        (self.base, &self.nodes, &self.children, &self.dups)
    }

    /// The base b (> 1) of the level radii bʲ.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// Every node, the root first; a node's children and duplicates are ranges of the tree's
    /// own lists ([`Node::c0`], [`Node::d0`]).
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Distance evaluations the construction made (0 for a tree read from a file).
    pub fn build_evals(&self) -> u64 {
        self.build_evals
    }

    /// Checks the layout (ids in range, every item exactly once, children below their parent's
    /// level) without measuring distances; used on trees read from files.
    pub fn check_layout(&self) -> Result<(), String> {
        let n = self.space.len();
        if n == 0 {
            return if self.nodes.is_empty() {
                Ok(())
            } else {
                Err("nodes in a tree over no items".into())
            };
        }
        if !(self.base > 1.0 && self.base.is_finite()) {
            return Err(format!("base {} is not > 1", self.base));
        }
        let mut tally = ItemTally::new(n);
        let mut seen_node = vec![false; self.nodes.len()];
        for (id, node) in self.nodes.iter().enumerate() {
            tally.mark(node.item)?;
            if node.c0 > node.c1 || node.c1 > self.children.len() {
                return Err(format!("node {id} has a bad child range"));
            }
            if node.d0 > node.d1 || node.d1 > self.dups.len() {
                return Err(format!("node {id} has a bad duplicate range"));
            }
            for &d in &self.dups[node.d0..node.d1] {
                tally.mark(d)?;
            }
            for &c in &self.children[node.c0..node.c1] {
                let child = self
                    .nodes
                    .get(c as usize)
                    .ok_or_else(|| format!("node {id} has child {c} out of range"))?;
                if child.parent as usize != id || child.level >= node.level || c == 0 {
                    return Err(format!("node {id} and its child {c} disagree"));
                }
                if std::mem::replace(&mut seen_node[c as usize], true) {
                    return Err(format!("node {c} has two parents"));
                }
            }
        }
        if !tally.complete() {
            return Err("some items are in no node".into());
        }
        if seen_node.iter().skip(1).any(|s| !s) {
            return Err("some nodes hang from no parent".into());
        }
        Ok(())
    }

    /// Checks every invariant the construction promises, measuring distances (quadratic in the
    /// size of sibling groups): for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.check_layout()?;
        let s = &self.space;
        let radius = |level: i32| self.base.powi(level);
        let tol = |x: f64| s.slack(x);
        for (id, node) in self.nodes.iter().enumerate() {
            for &dup in &self.dups[node.d0..node.d1] {
                if dist(s, node.item, dup) != 0.0 {
                    return Err(format!("duplicate {dup} of node {id} is not at distance 0"));
                }
            }
            let kids = &self.children[node.c0..node.c1];
            for &ca in kids {
                let child = &self.nodes[ca as usize];
                let d = dist(s, node.item, child.item);
                if d != child.parent_dist {
                    return Err(format!("node {ca}: stored parent distance is wrong"));
                }
                let cover = radius(child.level + 1);
                if d > cover + tol(cover) {
                    return Err(format!(
                        "covering: node {ca} (level {}) is {d} from its parent {id}, more than {cover}",
                        child.level
                    ));
                }
                let sep = radius(child.level);
                if d <= sep {
                    return Err(format!(
                        "separation: node {ca} is {d} <= {sep} from its parent"
                    ));
                }
            }
            // Reach: every descendant (and duplicate) within the stored reach, and it is attained.
            let far = self.farthest_below(id);
            if far != node.reach {
                return Err(format!(
                    "node {id}: reach is {} but the farthest descendant is {far} away",
                    node.reach
                ));
            }
        }
        self.check_separation()
    }

    /// The largest distance from node `id`'s item to any item below it (its duplicates and
    /// every descendant with theirs): what its reach must be. One evaluation per item below.
    fn farthest_below(&self, id: usize) -> f64 {
        let s = &self.space;
        let item = self.nodes[id].item;
        let mut stack = vec![id as u32];
        let mut far = 0.0f64;
        while let Some(x) = stack.pop() {
            let nx = &self.nodes[x as usize];
            if x as usize != id {
                far = far.max(dist(s, item, nx.item));
            }
            for &dup in &self.dups[nx.d0..nx.d1] {
                far = far.max(dist(s, item, dup));
            }
            stack.extend(&self.children[nx.c0..nx.c1]);
        }
        far
    }

    /// Re-measures what the search prunes with, for trees read from files (a checksum catches
    /// accidents, not a forged file; issue 14): every duplicate at distance 0 from its node,
    /// every stored parent distance, and every reach equal to the farthest item below its node.
    /// Each item is measured from each of its ancestors: n times the depth of the tree
    /// evaluations (tens per item for real trees), far below the construction's. Call after
    /// [`CoverTree::check_layout`], which rules out cycles.
    pub fn check_distances(&self) -> Result<(), String> {
        let s = &self.space;
        let check = |id: usize| -> Result<(), String> {
            let node = &self.nodes[id];
            if !(node.reach >= 0.0 && node.reach.is_finite()) {
                return Err(format!("node {id}: reach {} is not a distance", node.reach));
            }
            for &dup in &self.dups[node.d0..node.d1] {
                let d = dist(s, node.item, dup);
                if d != 0.0 {
                    return Err(format!(
                        "node {id}: duplicate {dup} is at distance {d}, not 0"
                    ));
                }
            }
            for &c in &self.children[node.c0..node.c1] {
                let child = &self.nodes[c as usize];
                let d = dist(s, node.item, child.item);
                if d != child.parent_dist {
                    return Err(format!(
                        "node {c}: stored parent distance {} but its parent is at {d}",
                        child.parent_dist
                    ));
                }
            }
            let far = self.farthest_below(id);
            if far != node.reach {
                return Err(format!(
                    "node {id}: reach is {} but the farthest item below it is {far} away",
                    node.reach
                ));
            }
            Ok(())
        };
        let errors: Vec<String> = (0..self.nodes.len())
            .into_par_iter()
            .filter_map(|id| check(id).err())
            .collect();
        errors.into_iter().next().map_or(Ok(()), Err)
    }

    /// Separation between siblings: the children a node got at the same level j are more than
    /// bʲ apart (each is more than bʲ from the node: [`CoverTree::check_invariants`]). Quadratic
    /// in the number of such children: for tests.
    pub fn check_separation(&self) -> Result<(), String> {
        let s = &self.space;
        let nodes = &self.nodes;
        (0..nodes.len()).into_par_iter().try_for_each(|p| {
            let node = &nodes[p];
            let mut kids: Vec<u32> = self.children[node.c0..node.c1].to_vec();
            kids.sort_by_key(|&c| nodes[c as usize].level);
            for same in kids.chunk_by(|a, b| nodes[*a as usize].level == nodes[*b as usize].level) {
                for (i, &a) in same.iter().enumerate() {
                    for &b in &same[i + 1..] {
                        let level = nodes[a as usize].level;
                        let sep = self.base.powi(level);
                        let d = dist(s, nodes[a as usize].item, nodes[b as usize].item);
                        if d.is_nan() || d <= sep {
                            return Err(format!(
                                "separation: siblings {a} and {b} (level {level}, parent {p}) are {d} <= {sep} apart"
                            ));
                        }
                    }
                }
            }
            Ok(())
        })
    }
}

fn dist<S: Space>(space: &S, a: u32, b: u32) -> f64 {
    space.distance(a as usize, b as usize)
}

impl<S: Space> MetricIndex for CoverTree<S> {
    type Space = S;

    fn space(&self) -> &S {
        &self.space
    }

    fn search(&self, probe: &Probe<'_, S>, out: &mut dyn Collector) {
        let Some(root) = self.nodes.first() else {
            return;
        };
        let space = &self.space;
        // Best first by the lower bound d(q, node) − reach, so k-NN shrinks its radius early.
        let mut heap = std::collections::BinaryHeap::new();
        let d = probe.to(root.item as usize);
        heap.push(Pending(d.dist - root.reach, 0, d));
        while let Some(Pending(bound, id, d)) = heap.pop() {
            let node = &self.nodes[id as usize];
            if space.beyond(bound, out.radius(), d.dist + node.reach) {
                continue;
            }
            out.offer(d, node.item);
            for &dup in &self.dups[node.d0..node.d1] {
                // A duplicate is at distance 0 from the node: only worth measuring when the node
                // itself is within reach.
                if !space.beyond(d.dist, out.radius(), d.dist) {
                    if let Some(dd) = probe.within(dup as usize, out.radius()) {
                        out.offer(dd, dup);
                    }
                }
            }
            for &c in &self.children[node.c0..node.c1] {
                let child = &self.nodes[c as usize];
                let r = out.radius();
                let lower = (d.dist - child.parent_dist).abs() - child.reach;
                if space.beyond(lower, r, d.dist + child.parent_dist + child.reach) {
                    continue;
                }
                let reach = r + child.reach;
                if let Some(dc) = probe.within(child.item as usize, reach + space.slack(reach)) {
                    heap.push(Pending(dc.dist - child.reach, c, dc));
                }
            }
        }
    }
}

/// A node waiting in the best-first queue: (lower bound, node id, its distance); the smallest
/// bound comes out first.
struct Pending(f64, u32, Dist);

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == std::cmp::Ordering::Equal
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::VectorSpace;
    use voisin::Metric;

    /// Hand-made trees on a line. In the first every parent-child and sibling pair is fine and
    /// two cousins at level 1 are 0.375 apart, which the seed's tree allows; in the second two
    /// siblings at level 2 are 0.5 apart, which it does not.
    #[test]
    fn separation_is_between_siblings() {
        let points = vec![0.0, 5.0, -5.0, 2.875, 2.5];
        let space = VectorSpace::from_f32(points, 1, Metric::Euclidean).unwrap();
        let node = |item, level, parent, parent_dist, reach, c0, c1| Node {
            item,
            level,
            parent,
            parent_dist,
            reach,
            c0,
            c1,
            d0: 0,
            d1: 0,
        };
        let nodes = vec![
            node(0, 3, 0, 0.0, 5.0, 0, 3),
            node(1, 2, 0, 5.0, 2.125, 3, 4),
            node(2, 2, 0, 5.0, 0.0, 4, 4),
            node(4, 1, 0, 2.5, 0.0, 4, 4),
            node(3, 1, 1, 2.125, 0.0, 4, 4),
        ];
        let tree = CoverTree::from_parts(space, 2.0, nodes, vec![1, 2, 3, 4], vec![]);
        tree.check_layout().unwrap();
        tree.check_invariants().unwrap();

        let space = VectorSpace::from_f32(vec![0.0, 5.0, 5.5], 1, Metric::Euclidean).unwrap();
        let nodes = vec![
            node(0, 3, 0, 0.0, 5.5, 0, 2),
            node(1, 2, 0, 5.0, 0.0, 2, 2),
            node(2, 2, 0, 5.5, 0.0, 2, 2),
        ];
        let tree = CoverTree::from_parts(space, 2.0, nodes, vec![1, 2], vec![]);
        tree.check_layout().unwrap();
        let err = tree.check_invariants().unwrap_err();
        assert!(
            err.contains("separation: siblings 1 and 2 (level 2, parent 0)"),
            "{err}"
        );
    }
}
