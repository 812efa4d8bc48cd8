//! Cover tree (seed 004), in compressed form: a node is an item at its highest level, its
//! children sit at lower levels, and its copy at every level below is implicit (nesting).
//!
//! Construction is the seed's iterative breadth-first scheme: a queue of tasks (a node, its
//! current level, the items still to place under it with their distances to it) is processed a
//! wave at a time, every task of a wave in parallel. A task finds the next level j at which some of
//! its items are farther than baseʲ, picks among those far items, greedily and in index order,
//! new centers pairwise farther than baseʲ apart, hands each other far item to the first center
//! within baseʲ, and keeps the near items for itself at level j. Items at distance 0 are kept as
//! duplicates of the node (they would break separation).
//!
//! Invariants ([`CoverTree::check_invariants`]): covering (a child at level j is within baseʲ⁺¹ of
//! its parent), nesting (implicit), separation among the centers a node opens at one level (more
//! than baseʲ from each other and from the node), and each node's stored reach (the largest
//! distance to a descendant). Separation between cousins is not guaranteed by this construction,
//! and the search does not rely on it: it prunes with the reach, which is exact.

use rayon::prelude::*;

use crate::search::{Collector, Dist, MetricIndex, Probe};
use crate::space::Space;
use crate::ItemTally;

/// One node: an item at its top level.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub item: u32,
    pub level: i32,
    /// Parent node id (the root is its own parent).
    pub parent: u32,
    /// Distance to the parent's item (0 for the root).
    pub parent_dist: f64,
    /// Largest distance from this item to any item below it (duplicates included).
    pub reach: f64,
    /// Children node ids: `children[c0..c1]` of the tree.
    pub c0: usize,
    pub c1: usize,
    /// Duplicate items: `dups[d0..d1]` of the tree.
    pub d0: usize,
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

/// Work left for one node: items to place below it at `level` and lower.
struct Task {
    node: u32,
    level: i32,
    items: Vec<(u32, f64)>,
}

/// A new child node a task opens: its item, distance to the parent, and the items it covers
/// (with their distances to it).
struct Child {
    item: u32,
    parent_dist: f64,
    items: Vec<(u32, f64)>,
}

/// What a task produced: new child nodes at `level` and possibly the rest of the task below it.
struct Outcome {
    node: u32,
    dups: Vec<u32>,
    level: i32,
    children: Vec<Child>,
    rest: Option<Task>,
    evals: u64,
}

impl<S: Space> CoverTree<S> {
    /// Builds with `base` > 1 (2 is the classic choice, 1.3 a common tighter one).
    pub fn build(space: S, base: f64) -> Self {
        assert!(
            base > 1.0 && base.is_finite(),
            "cover tree base must be > 1"
        );
        let n = space.len();
        let mut tree = CoverTree {
            space,
            base,
            nodes: Vec::new(),
            children: Vec::new(),
            dups: Vec::new(),
            build_evals: 0,
        };
        if n == 0 {
            return tree;
        }
        let space = &tree.space;
        let items: Vec<(u32, f64)> = (1..n as u32)
            .into_par_iter()
            .map(|x| (x, dist(space, 0, x)))
            .collect();
        let mut evals = items.len() as u64;
        let reach = items.iter().map(|x| x.1).fold(0.0, f64::max);
        let mut level = 0i32;
        while base.powi(level) < reach {
            level += 1;
        }
        while reach > 0.0 && base.powi(level - 1) >= reach {
            level -= 1;
        }
        // Nodes are created in waves; their children are gathered per node and laid out at the end.
        let mut nodes = vec![Node {
            item: 0,
            level,
            parent: 0,
            parent_dist: 0.0,
            reach,
            c0: 0,
            c1: 0,
            d0: 0,
            d1: 0,
        }];
        let mut kids: Vec<Vec<u32>> = vec![Vec::new()];
        let mut dups: Vec<Vec<u32>> = vec![Vec::new()];
        let mut queue = vec![Task {
            node: 0,
            level,
            items,
        }];
        while !queue.is_empty() {
            let outcomes: Vec<Outcome> = queue
                .into_par_iter()
                .map(|t| split(space, base, &nodes, t))
                .collect();
            queue = Vec::new();
            for o in outcomes {
                evals += o.evals;
                dups[o.node as usize].extend(o.dups);
                let level = o.level;
                for Child {
                    item,
                    parent_dist,
                    items,
                } in o.children
                {
                    let id = nodes.len() as u32;
                    nodes.push(Node {
                        item,
                        level,
                        parent: o.node,
                        parent_dist,
                        reach: items.iter().map(|x| x.1).fold(0.0, f64::max),
                        c0: 0,
                        c1: 0,
                        d0: 0,
                        d1: 0,
                    });
                    kids.push(Vec::new());
                    dups.push(Vec::new());
                    kids[o.node as usize].push(id);
                    queue.push(Task {
                        node: id,
                        level,
                        items,
                    });
                }
                queue.extend(o.rest);
            }
        }
        for (i, node) in nodes.iter_mut().enumerate() {
            node.c0 = tree.children.len();
            tree.children.extend(&kids[i]);
            node.c1 = tree.children.len();
            node.d0 = tree.dups.len();
            tree.dups.extend(&dups[i]);
            node.d1 = tree.dups.len();
        }
        tree.nodes = nodes;
        tree.build_evals = evals;
        tree
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

    pub fn base(&self) -> f64 {
        self.base
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

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
            for (a, &ca) in kids.iter().enumerate() {
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
                for &cb in &kids[a + 1..] {
                    let other = &self.nodes[cb as usize];
                    if other.level == child.level && dist(s, child.item, other.item) <= sep {
                        return Err(format!(
                            "separation: siblings {ca} and {cb} at level {} are within {sep}",
                            child.level
                        ));
                    }
                }
            }
            // Reach: every descendant (and duplicate) within the stored reach, and it is attained.
            let mut stack = vec![id as u32];
            let mut far = 0.0f64;
            while let Some(x) = stack.pop() {
                let nx = &self.nodes[x as usize];
                if x as usize != id {
                    far = far.max(dist(s, node.item, nx.item));
                }
                for &dup in &self.dups[nx.d0..nx.d1] {
                    far = far.max(dist(s, node.item, dup));
                }
                stack.extend(&self.children[nx.c0..nx.c1]);
            }
            if far != node.reach {
                return Err(format!(
                    "node {id}: reach is {} but the farthest descendant is {far} away",
                    node.reach
                ));
            }
        }
        Ok(())
    }
}

fn dist<S: Space>(space: &S, a: u32, b: u32) -> f64 {
    space.to_distance(space.key(space.item(a as usize), space.item(b as usize)))
}

/// One construction step for one node (see the module doc).
fn split<S: Space>(space: &S, base: f64, nodes: &[Node], task: Task) -> Outcome {
    let node = task.node;
    let center = nodes[node as usize].item;
    let (zero, items): (Vec<_>, Vec<_>) = task.items.into_iter().partition(|x| x.1 == 0.0);
    let mut out = Outcome {
        node,
        dups: zero.into_iter().map(|x| x.0).collect(),
        level: task.level,
        children: Vec::new(),
        rest: None,
        evals: 0,
    };
    let Some(reach) = items.iter().map(|x| x.1).max_by(f64::total_cmp) else {
        return out;
    };
    // The highest level below the task's at which some item is farther than the level's radius.
    let mut level = task.level - 1;
    while base.powi(level) >= reach {
        level -= 1;
    }
    let sep = base.powi(level);
    let (near, mut far): (Vec<_>, Vec<_>) = items.into_iter().partition(|x| x.1 <= sep);
    far.sort_unstable_by_key(|x| x.0);
    // Far items left uncovered, each with its eventual (center, distance) once covered.
    let mut owner: Vec<Option<(usize, f64)>> = vec![None; far.len()];
    let mut centers: Vec<Child> = Vec::new();
    let mut evals = 0u64;
    let mut next = 0;
    while next < far.len() {
        let (c, dc) = far[next];
        owner[next] = Some((centers.len(), 0.0));
        let ci = centers.len();
        centers.push(Child {
            item: c,
            parent_dist: dc,
            items: Vec::new(),
        });
        // Cover, in parallel, every uncovered far item within the level's radius of the new center.
        let newly: Vec<(usize, f64)> = (next + 1..far.len())
            .into_par_iter()
            .filter(|&i| owner[i].is_none())
            .filter_map(|i| {
                let d = dist(space, c, far[i].0);
                (d <= sep).then_some((i, d))
            })
            .collect();
        evals += (next + 1..far.len())
            .filter(|&i| owner[i].is_none())
            .count() as u64;
        for (i, d) in newly {
            owner[i] = Some((ci, d));
        }
        next = (next + 1..far.len())
            .find(|&i| owner[i].is_none())
            .unwrap_or(far.len());
    }
    for (i, o) in owner.into_iter().enumerate() {
        let (ci, d) = o.expect("every far item is covered");
        if far[i].0 != centers[ci].item {
            centers[ci].items.push((far[i].0, d));
        }
    }
    out.level = level;
    out.children = centers;
    debug_assert!(out.children.iter().all(|ch| ch.item != center));
    if !near.is_empty() {
        out.rest = Some(Task {
            node,
            level,
            items: near,
        });
    }
    out.evals = evals;
    out
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
