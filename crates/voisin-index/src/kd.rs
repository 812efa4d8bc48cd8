//! A k-d tree: vectors split at the median of their widest coordinate until a leaf holds a
//! handful, each node keeping the bounding box of its items. For low-dimensional vectors under a
//! coordinate-wise metric (cityblock, euclidean, chebyshev, minkowski:P) it prunes far better
//! than the metric indexes, which see only distances: the box gives a lower bound on the
//! distance from a query to every item below a node without measuring any of them.
//!
//! Construction measures no distance (O(n log n) coordinate comparisons), so an index file of this
//! kind keeps only the items and the tree is rebuilt when it is read: the same items always give
//! the same tree. A space without coordinates (strings, user metrics) gets a single leaf, which
//! answers exactly by scanning; [`crate::DatasetIndex::build`] refuses such a build first.
//!
//! Answers are exact: items are measured through the space's exact keys, and a node is skipped
//! only when its box bound exceeds the search radius beyond the space's rounding slack.

use crate::search::{Collector, MetricIndex, Probe};
use crate::space::Space;

/// Items per leaf at most (measured on 100k×3: 8–16 within a few per cent; 12 in the middle).
pub const LEAF_SIZE: usize = 12;

/// A node: the items `order[lo..hi]`; `left`/`right` child ids, `NONE` for a leaf.
#[derive(Clone, Copy, Debug)]
struct Node {
    lo: u32,
    hi: u32,
    left: u32,
    right: u32,
}

const NONE: u32 = u32::MAX;

/// A k-d tree over a space whose items have coordinates.
pub struct KdTree<S: Space> {
    space: S,
    /// Item ids, each node's items contiguous.
    order: Vec<u32>,
    nodes: Vec<Node>,
    /// Per node, `dim` lower corners then `dim` upper corners.
    boxes: Vec<f32>,
    dim: usize,
    /// The metric's order: 1, 2, any p ≥ 1, or infinity (chebyshev); `None` without coordinates.
    order_p: Option<f64>,
}

impl<S: Space> KdTree<S> {
    /// Builds the tree over `space` without measuring a distance: nodes split at the median of
    /// their widest coordinate until a leaf holds at most [`LEAF_SIZE`] items (or one point). A
    /// space without coordinates or a box order gets one leaf, searched by a full scan.
    pub fn build(space: S) -> Self {
        let n = space.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        let order_p = space.box_order();
        let dim = match (order_p, n) {
            (Some(_), 1..) => space.coords(space.item(0)).map_or(0, <[f32]>::len),
            _ => 0,
        };
        let mut tree = KdTree {
            space,
            order: Vec::new(),
            nodes: Vec::new(),
            boxes: Vec::new(),
            dim,
            order_p: order_p.filter(|_| dim > 0),
        };
        if tree.order_p.is_none() {
            tree.nodes.push(Node {
                lo: 0,
                hi: n as u32,
                left: NONE,
                right: NONE,
            });
            tree.order = order;
            return tree;
        }
        tree.split(&mut order, 0);
        tree.order = order;
        tree
    }

    fn coords(&self, i: u32) -> &[f32] {
        self.space
            .coords(self.space.item(i as usize))
            .expect("a space with a box order has coordinates")
    }

    /// Builds the node of `order[..]` (which starts at `lo` in the whole order) and its subtree;
    /// returns its id.
    fn split(&mut self, order: &mut [u32], lo: usize) -> u32 {
        let id = self.nodes.len() as u32;
        let d = self.dim;
        let mut bx = vec![f32::INFINITY; d];
        bx.extend(std::iter::repeat_n(f32::NEG_INFINITY, d));
        for &i in order.iter() {
            for (c, &x) in self.coords(i).iter().enumerate() {
                bx[c] = bx[c].min(x);
                bx[d + c] = bx[d + c].max(x);
            }
        }
        self.boxes.extend_from_slice(&bx);
        self.nodes.push(Node {
            lo: lo as u32,
            hi: (lo + order.len()) as u32,
            left: NONE,
            right: NONE,
        });
        let (axis, extent) = (0..d)
            .map(|c| (c, f64::from(bx[d + c]) - f64::from(bx[c])))
            .fold((0, 0.0), |best, x| if x.1 > best.1 { x } else { best });
        if order.len() <= LEAF_SIZE || extent <= 0.0 {
            // Small, or every item at one point: a leaf.
            return id;
        }
        let mid = order.len() / 2;
        order.select_nth_unstable_by(mid, |&a, &b| {
            let (x, y) = (self.coords(a)[axis], self.coords(b)[axis]);
            x.total_cmp(&y).then(a.cmp(&b))
        });
        let (left, right) = order.split_at_mut(mid);
        let l = self.split(left, lo);
        let r = self.split(right, lo + mid);
        self.nodes[id as usize].left = l;
        self.nodes[id as usize].right = r;
        id
    }

    /// A lower bound on the distance from `q` to every item in node `id`'s box.
    fn bound(&self, id: u32, q: &[f32]) -> f64 {
        let d = self.dim;
        let bx = &self.boxes[id as usize * 2 * d..(id as usize + 1) * 2 * d];
        let gap = |c: usize| {
            let (lo, hi, x) = (f64::from(bx[c]), f64::from(bx[d + c]), f64::from(q[c]));
            (lo - x).max(x - hi).max(0.0)
        };
        let gaps = (0..d).map(gap);
        match self.order_p {
            Some(1.0) => gaps.sum(),
            Some(2.0) => gaps.map(|g| g * g).sum::<f64>().sqrt(),
            Some(p) if p.is_infinite() => gaps.fold(0.0, f64::max),
            Some(p) => {
                // Scaled by the largest gap so that large orders neither overflow nor vanish
                // (the gaps are recomputed rather than collected: this runs per node visited).
                let m = gaps.fold(0.0, f64::max);
                if m == 0.0 {
                    0.0
                } else {
                    m * (0..d)
                        .map(|c| (gap(c) / m).powf(p))
                        .sum::<f64>()
                        .powf(1.0 / p)
                }
            }
            None => 0.0,
        }
    }

    /// Levels from the root to the deepest leaf (diagnostics and tests).
    pub fn depth(&self) -> usize {
        fn down(t: &[Node], id: u32) -> usize {
            let n = t[id as usize];
            if n.left == NONE {
                1
            } else {
                1 + down(t, n.left).max(down(t, n.right))
            }
        }
        down(&self.nodes, 0)
    }
}

impl<S: Space> MetricIndex for KdTree<S> {
    type Space = S;

    fn space(&self) -> &S {
        &self.space
    }

    fn search(&self, probe: &Probe<'_, S>, out: &mut dyn Collector) {
        if self.nodes.is_empty() || self.order.is_empty() {
            return;
        }
        let q = match self.order_p {
            Some(_) => self.space.coords(probe.query()),
            None => None,
        };
        // Nodes to visit with their bounds, nearest last (popped first).
        let mut stack: Vec<(u32, f64)> = vec![(0, q.map_or(0.0, |q| self.bound(0, q)))];
        while let Some((id, bound)) = stack.pop() {
            if self.space.beyond(bound, out.radius(), bound) {
                continue;
            }
            let node = self.nodes[id as usize];
            match (node.left, q) {
                (NONE, _) | (_, None) => {
                    for &i in &self.order[node.lo as usize..node.hi as usize] {
                        out.offer(probe.to(i as usize), i);
                    }
                }
                (left, Some(q)) => {
                    let (bl, br) = (self.bound(left, q), self.bound(node.right, q));
                    if bl <= br {
                        stack.push((node.right, br));
                        stack.push((left, bl));
                    } else {
                        stack.push((left, bl));
                        stack.push((node.right, br));
                    }
                }
            }
        }
    }
}
