//! The seam where a level's distance work is done: the greedy pass that picks new nodes among
//! every active node's far items ([`NetOracle`]). [`CpuNets`] runs it on CPU threads;
//! voisin-cuda's device nets run it in GPU kernels (docs/design/gpu-cover-tree.md). Both give
//! the same answer, item for item, so the tree does not depend on where it was built.
//!
//! The pass over one slot (an active node's far items, in ascending item order, each more than
//! bʲ from the node): the first item not yet taken becomes a new node and takes every item not
//! yet taken within bʲ of it; repeat. Each item thus goes to the first new node within bʲ, the
//! new nodes are more than bʲ apart (sibling separation) and every far item is within bʲ of its
//! new node (covering). Two items whose distances to the slot's node differ by more than bʲ
//! cannot be within bʲ of each other (triangle inequality), so they are not measured.

use rayon::prelude::*;
use voisin::{Error, Result};

use crate::pairs::dist_within;
use crate::space::Space;

/// One level's far items, slot by slot: slot s holds `items[starts[s]..starts[s + 1]]`, in
/// ascending item order, with their distances to the slot's node in `dists` (all beyond `sep`).
#[derive(Clone, Copy, Debug)]
pub struct NetBatch<'a> {
    /// The new level's radius bʲ.
    pub sep: f64,
    /// Slot boundaries into `items` and `dists`: one more entry than slots, from 0 to their length.
    pub starts: &'a [usize],
    /// The far items (positions in the space), slot after slot.
    pub items: &'a [u32],
    /// Each far item's distance to its slot's node, parallel to `items`.
    pub dists: &'a [f64],
}

impl NetBatch<'_> {
    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Slot `s`'s range of positions.
    pub fn range(&self, s: usize) -> std::ops::Range<usize> {
        self.starts[s]..self.starts[s + 1]
    }
}

/// The greedy pass's answer for every far item of a [`NetBatch`], in batch order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Nets {
    /// The position, within its slot, of the new node that takes the item: its own position
    /// when the item is a new node.
    pub owner: Vec<u32>,
    /// The item's distance to that node (0 for a new node itself).
    pub dist: Vec<f64>,
    /// Distance evaluations made.
    pub evals: u64,
}

/// Runs the greedy pass of every slot of a batch.
pub trait NetOracle: Sync {
    /// Every slot's pass (the module doc); distances exactly the space's
    /// `to_distance(key(a, b))`, decisions "within bʲ" on those.
    fn nets(&self, batch: &NetBatch<'_>) -> Result<Nets>;
}

/// The pass on CPU threads, slots in parallel (and the items of a large slot).
pub struct CpuNets<'a, S: Space>(pub &'a S);

impl<S: Space> NetOracle for CpuNets<'_, S> {
    fn nets(&self, batch: &NetBatch<'_>) -> Result<Nets> {
        let parts: Vec<Nets> = (0..batch.slots())
            .into_par_iter()
            .map(|s| {
                let r = batch.range(s);
                greedy(self.0, &batch.items[r.clone()], &batch.dists[r], batch.sep)
            })
            .collect();
        let mut out = Nets::default();
        for p in parts {
            out.owner.extend(p.owner);
            out.dist.extend(p.dist);
            out.evals += p.evals;
        }
        Ok(out)
    }
}

/// The pass over one slot's items (ascending) with their distances to the slot's node.
fn greedy<S: Space>(space: &S, items: &[u32], dists: &[f64], sep: f64) -> Nets {
    let m = items.len();
    let mut out = Nets {
        owner: vec![u32::MAX; m],
        dist: vec![0.0; m],
        evals: 0,
    };
    // The positions not yet taken, ascending: the first is the next new node.
    let mut rest: Vec<u32> = (0..m as u32).collect();
    while let Some((&c, tail)) = rest.split_first() {
        let (xc, dc) = (items[c as usize], dists[c as usize]);
        out.owner[c as usize] = c;
        // None: ruled out unmeasured; Some(None): measured, beyond sep; Some(Some(d)): within.
        let measure = |&j: &u32| -> (u32, Option<Option<f64>>) {
            let dj = dists[j as usize];
            if space.beyond((dj - dc).abs(), sep, dj + dc) {
                return (j, None);
            }
            (j, Some(dist_within(space, xc, items[j as usize], sep)))
        };
        let answers: Vec<(u32, Option<Option<f64>>)> = if tail.len() > 4096 {
            tail.par_iter().map(measure).collect()
        } else {
            tail.iter().map(measure).collect()
        };
        let mut keep = Vec::with_capacity(tail.len());
        for (j, answer) in answers {
            out.evals += u64::from(answer.is_some());
            match answer.flatten() {
                Some(d) => {
                    out.owner[j as usize] = c;
                    out.dist[j as usize] = d;
                }
                None => keep.push(j),
            }
        }
        rest = keep;
    }
    out
}

/// Checks that `nets` answers `batch`: one owner per item, each a new node of the same slot at
/// or before the item, and every distance a distance within the radius.
pub(super) fn check(batch: &NetBatch<'_>, nets: &Nets) -> Result<()> {
    let n = batch.items.len();
    if nets.owner.len() != n || nets.dist.len() != n {
        return Err(Error::device(format!(
            "the greedy pass answered {} of {n} items",
            nets.owner.len().min(nets.dist.len())
        )));
    }
    for s in 0..batch.slots() {
        let r = batch.range(s);
        let owner = &nets.owner[r.clone()];
        for (p, (&o, &d)) in owner.iter().zip(&nets.dist[r]).enumerate() {
            let bad = o as usize > p
                || owner[o as usize] != o
                || if o as usize == p {
                    d != 0.0
                } else {
                    !(d >= 0.0 && d <= batch.sep)
                };
            if bad {
                return Err(Error::device(format!(
                    "the greedy pass gave item {} an impossible new node",
                    batch.items[batch.starts[s] + p]
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use voisin::{Metric, StringSet};

    use super::*;
    use crate::cover::CoverTree;
    use crate::space::{StringSpace, VectorSpace};

    /// The pass as the module doc states it, one slot after another with every pair measured
    /// (no triangle inequality): what any oracle must answer.
    struct Plain<'a, S: Space>(&'a S);

    impl<S: Space> NetOracle for Plain<'_, S> {
        fn nets(&self, batch: &NetBatch<'_>) -> Result<Nets> {
            let mut out = Nets::default();
            for s in 0..batch.slots() {
                let r = batch.range(s);
                let items = &batch.items[r];
                let mut owner: Vec<Option<(u32, f64)>> = vec![None; items.len()];
                for c in 0..items.len() {
                    if owner[c].is_some() {
                        continue;
                    }
                    owner[c] = Some((c as u32, 0.0));
                    for j in c + 1..items.len() {
                        if owner[j].is_none() {
                            let d = crate::cover::dist(self.0, items[c], items[j]);
                            if d <= batch.sep {
                                owner[j] = Some((c as u32, d));
                            }
                        }
                    }
                }
                for o in owner {
                    let (o, d) = o.unwrap();
                    out.owner.push(o);
                    out.dist.push(d);
                }
            }
            Ok(out)
        }
    }

    /// The CPU's pass gives the plain pass's tree, node for node, and the tree keeps every
    /// invariant.
    fn same_tree<S: Space + Clone>(space: S, base: f64, label: &str) {
        let cpu = CoverTree::build(space.clone(), base);
        let plain = CoverTree::build_with(space.clone(), base, &Plain(&space)).unwrap();
        assert!(cpu.parts() == plain.parts(), "{label}: the trees differ");
        cpu.check_invariants()
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        cpu.check_distances()
            .unwrap_or_else(|e| panic!("{label}: {e}"));
    }

    /// `n` rows of `dim`: clustered around a few centres, or on a small integer grid (ties and
    /// duplicates everywhere).
    fn rows(seed: u64, n: usize, dim: usize, grid: bool) -> Vec<f32> {
        let mut r = StdRng::seed_from_u64(seed);
        let centres: Vec<f32> = (0..8 * dim).map(|_| r.gen_range(-10.0..10.0)).collect();
        (0..n)
            .flat_map(|_| {
                let c = r.gen_range(0..8);
                (0..dim)
                    .map(|i| {
                        if grid {
                            r.gen_range(0..4) as f32
                        } else {
                            centres[c * dim + i] + r.gen_range(-0.5f32..0.5)
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn vectors_under_every_true_metric() {
        let metrics = [
            Metric::Euclidean,
            Metric::Cityblock,
            Metric::Chebyshev,
            Metric::Minkowski(3.0),
        ];
        for (seed, (n, dim, grid)) in [
            (1, 3, true),
            (301, 3, false),
            (257, 20, false),
            (200, 2, true),
            (97, 1, false),
            (5000, 2, false),
        ]
        .into_iter()
        .enumerate()
        {
            for metric in &metrics {
                let space =
                    VectorSpace::from_f32(rows(seed as u64, n, dim, grid), dim, metric.clone())
                        .unwrap();
                for base in [2.0, 1.3] {
                    same_tree(
                        space.clone(),
                        base,
                        &format!("{n}x{dim} grid={grid} {metric} b={base}"),
                    );
                }
            }
        }
    }

    #[test]
    fn words_with_duplicates_and_the_empty_string() {
        let mut r = StdRng::seed_from_u64(7);
        let mut words: Vec<String> = (0..400)
            .map(|_| {
                let len = r.gen_range(0..=7);
                (0..len)
                    .map(|_| ['a', 'b', 'c', 'é'][r.gen_range(0..4)])
                    .collect()
            })
            .collect();
        words.extend(["", "", "abc", "abc"].map(String::from));
        let space = StringSpace::new(
            StringSet::from_strings(&words).unwrap(),
            Metric::Levenshtein,
        )
        .unwrap();
        for base in [2.0, 1.5] {
            same_tree(space.clone(), base, &format!("words b={base}"));
        }
    }

    #[test]
    fn small_and_empty_sets() {
        for n in [0, 1, 2, 5] {
            let space = VectorSpace::from_f32(rows(3, n, 2, true), 2, Metric::Euclidean).unwrap();
            same_tree(space, 2.0, &format!("n={n}"));
        }
    }

    /// An oracle that loses answers, or gives an item a node it cannot have, is an error, not a
    /// wrong tree.
    #[test]
    fn an_impossible_answer_is_an_error() {
        struct Bad(u8);
        impl NetOracle for Bad {
            fn nets(&self, batch: &NetBatch<'_>) -> Result<Nets> {
                let n = batch.items.len();
                let mut out = Nets {
                    owner: (0..batch.slots())
                        .flat_map(|s| 0..batch.range(s).len() as u32)
                        .collect(),
                    dist: vec![0.0; n],
                    evals: 0,
                };
                match self.0 {
                    0 => {
                        out.owner.pop();
                    }
                    // An item taken by a later one.
                    1 => out.owner[0] = 1,
                    // An item taken by a node beyond the radius.
                    _ => {
                        out.owner[1] = 0;
                        out.dist[1] = 2.0 * batch.sep;
                    }
                }
                Ok(out)
            }
        }
        let space = VectorSpace::from_f32(rows(3, 50, 2, false), 2, Metric::Euclidean).unwrap();
        for (bad, what) in [(0, "answered"), (1, "impossible"), (2, "impossible")] {
            let err = CoverTree::build_with(space.clone(), 2.0, &Bad(bad))
                .err()
                .unwrap();
            assert!(err.to_string().contains(what), "{bad}: {err}");
        }
    }
}
