//! The cover tree's level algorithm (build.rs) with every distance evaluation handed to a
//! [`PairOracle`] in a few large batches per level, so that a GPU can do them
//! (docs/design/gpu-cover-tree.md). The state between levels, the stages and the tree are those
//! of the CPU build; only the order in which distances are asked for changes:
//!
//! - the root's distances: one query, item 0 against every other item;
//! - stage 1: each far item against its node's relatives that the triangle inequality leaves in
//!   doubt, the nearest within bʲ taken (first in relative order on ties, as on the CPU);
//! - stage 2, the greedy pass: in rounds, every group takes a *window* of its next unowned far
//!   items (in item order); one batch measures the window's items against each other, the host
//!   replays the greedy pass over the window alone (an item is a new node unless an earlier new
//!   node of the window covers it), and a second batch measures the window's new nodes against
//!   every unowned item of their relatives, each item going to the first new node that covers
//!   it. Every item before the window is owned already and every item after it is unowned or
//!   owned by a node before the window, so this is the CPU's pass exactly, in fewer, larger
//!   steps;
//! - stage 3: every node's candidate relatives in one batch.
//!
//! With an oracle that returns the CPU's distances ([`CpuOracle`]) the tree is the CPU build's,
//! node for node (tested below).

use rayon::prelude::*;
use voisin::{Error, Result};

use super::build::{
    relative_groups, relatives_with, Active, Center, GroupPoints, Rel, RelAsk, Split, Stages,
};
use crate::pairs::{PairBatch, PairOracle};
use crate::space::Space;

/// The stages of build.rs with an oracle doing the distance work.
pub(super) struct Batched<'a, S: Space, O: PairOracle> {
    pub space: &'a S,
    pub oracle: &'a O,
    /// Per stage (root, splits, nets, relatives): oracle calls, pairs, seconds in the oracle and
    /// in the whole stage; [`Batched::report`] prints them (for tuning).
    pub tally: std::sync::Mutex<[Tally; 4]>,
}

#[derive(Clone, Copy, Default)]
pub(super) struct Tally {
    calls: u64,
    pairs: u64,
    oracle: f64,
    total: f64,
}

const STAGES: [&str; 4] = ["root", "splits", "nets", "relatives"];

impl<S: Space, O: PairOracle> Batched<'_, S, O> {
    /// One oracle call over the queries of every part; each part gets its own answers.
    fn ask(&self, stage: usize, parts: &[PairBatch]) -> Result<Vec<Vec<f64>>> {
        let mut all = PairBatch::default();
        for p in parts {
            all.append(p);
        }
        let t = std::time::Instant::now();
        let mut out = if all.cands().is_empty() {
            Vec::new()
        } else {
            self.oracle.within(&all)?
        };
        {
            let mut tally = self.tally.lock().unwrap_or_else(|p| p.into_inner());
            let x = &mut tally[stage];
            x.calls += 1;
            x.pairs += all.cands().len() as u64;
            x.oracle += t.elapsed().as_secs_f64();
        }
        if out.len() != all.cands().len() {
            return Err(Error::device(format!(
                "the pair oracle answered {} of {} pairs",
                out.len(),
                all.cands().len()
            )));
        }
        let mut answers = Vec::with_capacity(parts.len());
        for p in parts.iter().rev() {
            answers.push(out.split_off(out.len() - p.cands().len()));
        }
        answers.reverse();
        Ok(answers)
    }
}

impl<S: Space, O: PairOracle> Batched<'_, S, O> {
    /// One line per stage: calls, pairs, oracle and total seconds.
    pub fn report(&self) -> String {
        let t = *self.tally.lock().unwrap_or_else(|p| p.into_inner());
        STAGES
            .iter()
            .zip(t)
            .map(|(name, t)| {
                format!(
                    "cover build {name}: {} calls, {} pairs, {:.3} s in the oracle, {:.3} s in all\n",
                    t.calls, t.pairs, t.oracle, t.total
                )
            })
            .collect()
    }

    /// Runs stage `stage` and adds its time to the tally.
    fn timed<T>(&self, stage: usize, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let out = f();
        self.tally.lock().unwrap_or_else(|p| p.into_inner())[stage].total +=
            t.elapsed().as_secs_f64();
        out
    }
}

impl<S: Space, O: PairOracle> Stages for Batched<'_, S, O> {
    type Error = Error;

    fn root(&self, n: usize) -> Result<Vec<(u32, f64)>> {
        self.timed(0, || self.root_all(n))
    }

    fn splits(&self, active: &[Active], sep: f64) -> Result<Vec<Split>> {
        self.timed(1, || self.split_all(active, sep))
    }

    fn nets(
        &self,
        active: &[Active],
        splits: &[Split],
        n_nodes: usize,
        sep: f64,
    ) -> Result<(Vec<Center>, u64)> {
        self.timed(2, || self.net_all(active, splits, n_nodes, sep))
    }

    fn relatives(
        &self,
        asks: &[RelAsk<'_>],
        new_kids: &[Vec<Rel>],
        cap: f64,
    ) -> Result<Vec<(Vec<Rel>, u64)>> {
        self.timed(3, || self.relatives_all(asks, new_kids, cap))
    }
}

/// The stages' work, timed by the [`Stages`] impl above.
impl<S: Space, O: PairOracle> Batched<'_, S, O> {
    fn root_all(&self, n: usize) -> Result<Vec<(u32, f64)>> {
        let mut b = PairBatch::default();
        b.push(0, f64::INFINITY, 1..n as u32);
        let d = self
            .ask(0, std::slice::from_ref(&b))?
            .pop()
            .unwrap_or_default();
        Ok((1..n as u32).zip(d).collect())
    }

    fn split_all(&self, active: &[Active], sep: f64) -> Result<Vec<Split>> {
        let space = self.space;
        // Per active node: the far items' queries and, for each candidate, its relative's slot.
        let asked: Vec<(PairBatch, Vec<u32>)> = active
            .par_iter()
            .map(|a| {
                let mut b = PairBatch::default();
                let mut which = Vec::new();
                for &(x, dx) in a.items.iter().filter(|x| x.1 > sep || x.1.is_nan()) {
                    let start = which.len();
                    for (k, q) in a.rel.iter().enumerate() {
                        if q.node != a.node && !space.beyond((dx - q.d).abs(), sep, dx + q.d) {
                            which.push(k as u32);
                        }
                    }
                    b.push(
                        x,
                        sep,
                        which[start..].iter().map(|&k| a.rel[k as usize].item),
                    );
                }
                (b, which)
            })
            .collect();
        let (batches, which): (Vec<PairBatch>, Vec<Vec<u32>>) = asked.into_iter().unzip();
        let answers = self.ask(1, &batches)?;
        Ok(active
            .par_iter()
            .zip(&batches)
            .zip(which.par_iter().zip(&answers))
            .map(|((a, b), (which, d))| {
                let mut out = Split {
                    evals: b.cands().len() as u64,
                    ..Split::default()
                };
                let mut q = 0;
                for &(x, dx) in &a.items {
                    if dx <= sep {
                        out.near.push((x, dx));
                        continue;
                    }
                    let span = b.starts()[q]..b.starts()[q + 1];
                    q += 1;
                    let mut best: Option<(Rel, f64)> = None;
                    for (&k, &dk) in which[span.clone()].iter().zip(&d[span]) {
                        if best.map_or(dk <= sep, |b| dk < b.1) {
                            best = Some((a.rel[k as usize], dk));
                        }
                    }
                    match best {
                        Some((r, d)) => out.moved.push((r, x, d)),
                        None => out.far.push((x, dx)),
                    }
                }
                out
            })
            .collect())
    }

    fn net_all(
        &self,
        active: &[Active],
        splits: &[Split],
        n_nodes: usize,
        sep: f64,
    ) -> Result<(Vec<Center>, u64)> {
        let (groups, slot_of) = relative_groups(active, splits, n_nodes);
        let mut nets: Vec<Net<'_>> = groups
            .iter()
            .map(|g| Net::new(GroupPoints::new(g, splits, &slot_of), active))
            .collect();
        let mut evals = 0u64;
        let mut window = 64;
        loop {
            let batches: Vec<PairBatch> = nets
                .par_iter_mut()
                .map(|n| n.open(self.space, window, sep))
                .collect();
            if batches.iter().all(PairBatch::is_empty) {
                break;
            }
            evals += batches.iter().map(|b| b.cands().len() as u64).sum::<u64>();
            let answers = self.ask(2, &batches)?;
            let batches: Vec<PairBatch> = nets
                .par_iter_mut()
                .zip(answers)
                .map(|(n, d)| n.close_window(&d, self.space, active, sep))
                .collect();
            evals += batches.iter().map(|b| b.cands().len() as u64).sum::<u64>();
            let answers = self.ask(2, &batches)?;
            nets.par_iter_mut()
                .zip(answers)
                .for_each(|(n, d)| n.cover(&d, sep));
            window = (window * 2).min(4096);
        }
        let centers = nets.into_iter().flat_map(Net::finish).collect();
        Ok((centers, evals))
    }

    fn relatives_all(
        &self,
        asks: &[RelAsk<'_>],
        new_kids: &[Vec<Rel>],
        cap: f64,
    ) -> Result<Vec<(Vec<Rel>, u64)>> {
        let space = self.space;
        let batches: Vec<PairBatch> = asks
            .par_iter()
            .map(|ask| {
                let mut cands = Vec::new();
                relatives_with(space, ask, new_kids, cap, |c| {
                    cands.push(c.item);
                    None
                });
                let mut b = PairBatch::default();
                b.push(ask.me.item, cap, cands);
                b
            })
            .collect();
        let answers = self.ask(3, &batches)?;
        Ok(asks
            .par_iter()
            .zip(answers)
            .map(|(ask, d)| {
                let mut d = d.into_iter();
                let evals = d.len() as u64;
                let rel = relatives_with(space, ask, new_kids, cap, |_| {
                    d.next().filter(|d| !d.is_nan())
                });
                (rel, evals)
            })
            .collect())
    }
}

/// One group's greedy pass, window by window.
struct Net<'a> {
    g: GroupPoints<'a>,
    /// For each local slot, its relatives in the group: (local slot, distance), by slot.
    reld: Vec<Vec<(usize, f64)>>,
    owner: Vec<Option<(usize, f64)>>,
    centers: Vec<Center>,
    /// Next position in `g.order` to look at.
    cursor: usize,
    /// The open window (points), the points each query of the last batch measured
    /// (`asked[spans[q]..spans[q + 1]]`).
    window: Vec<usize>,
    asked: Vec<usize>,
    spans: Vec<usize>,
    /// The window's new centers: (point, center id).
    fresh: Vec<(usize, usize)>,
}

impl<'a> Net<'a> {
    fn new(g: GroupPoints<'a>, active: &'a [Active]) -> Self {
        let reld = g
            .group
            .iter()
            .map(|&s| {
                let mut r: Vec<(usize, f64)> = active[s]
                    .rel
                    .iter()
                    .filter_map(|q| g.local(q.node).map(|l| (l, q.d)))
                    .collect();
                r.sort_by_key(|x| x.0);
                r
            })
            .collect();
        Net {
            owner: vec![None; g.pts.len()],
            g,
            reld,
            centers: Vec::new(),
            cursor: 0,
            window: Vec::new(),
            asked: Vec::new(),
            spans: Vec::new(),
            fresh: Vec::new(),
        }
    }

    /// Opens the next window of at most `size` unowned points: each against the later ones of
    /// its relatives that the triangle inequality leaves in doubt.
    fn open<S: Space>(&mut self, space: &S, size: usize, sep: f64) -> PairBatch {
        self.window.clear();
        self.asked.clear();
        while self.cursor < self.g.order.len() && self.window.len() < size {
            let i = self.g.order[self.cursor];
            self.cursor += 1;
            if self.owner[i].is_none() {
                self.window.push(i);
            }
        }
        let (pts, window, reld) = (&self.g.pts, &self.window, &self.reld);
        let lists: Vec<Vec<usize>> = (0..window.len())
            .into_par_iter()
            .map(|a| {
                let (_, li, dx) = pts[window[a]];
                let rel = &reld[li];
                window[a + 1..]
                    .iter()
                    .copied()
                    .filter(|&j| {
                        let (_, lj, dy) = pts[j];
                        rel.binary_search_by_key(&lj, |r| r.0).is_ok_and(|at| {
                            let dq = rel[at].1;
                            !space.beyond(dq - dx - dy, sep, dq + dx + dy)
                        })
                    })
                    .collect()
            })
            .collect();
        let window = std::mem::take(&mut self.window);
        let b = self.ask_lists(window.iter().copied().zip(lists), sep);
        self.window = window;
        b
    }

    /// The batch of queries (point, the points it measures) at radius `sep`, remembered in
    /// `asked` and `spans`.
    fn ask_lists(
        &mut self,
        lists: impl Iterator<Item = (usize, Vec<usize>)>,
        sep: f64,
    ) -> PairBatch {
        let mut b = PairBatch::default();
        self.asked.clear();
        for (i, list) in lists {
            b.push(self.g.pts[i].0, sep, list.iter().map(|&j| self.g.pts[j].0));
            self.asked.extend(list);
        }
        self.spans.clear();
        self.spans.extend_from_slice(b.starts());
        b
    }

    /// Replays the greedy pass over the window with the distances `d` within it, then asks for
    /// the window's new centers against every unowned point they may cover.
    fn close_window<S: Space>(
        &mut self,
        d: &[f64],
        space: &S,
        active: &[Active],
        sep: f64,
    ) -> PairBatch {
        self.fresh.clear();
        for a in 0..self.window.len() {
            let i = self.window[a];
            let span = self.spans[a]..self.spans[a + 1];
            if self.owner[i].is_some() {
                continue;
            }
            let (x, li, dx) = self.g.pts[i];
            let ci = self.centers.len();
            self.owner[i] = Some((ci, 0.0));
            self.centers.push(Center {
                item: x,
                slot: self.g.group[li],
                parent_dist: dx,
                items: Vec::new(),
            });
            self.fresh.push((i, ci));
            for (&j, &dj) in self.asked[span.clone()].iter().zip(&d[span]) {
                if dj <= sep && self.owner[j].is_none() {
                    self.owner[j] = Some((ci, dj));
                }
            }
        }
        let (g, owner) = (&self.g, &self.owner);
        let lists: Vec<(usize, Vec<usize>)> = self
            .fresh
            .par_iter()
            .map(|&(i, _)| {
                let mut list = Vec::new();
                g.candidates(space, active, i, |j| owner[j].is_some(), sep, &mut list);
                (i, list)
            })
            .collect();
        self.ask_lists(lists.into_iter(), sep)
    }

    /// Gives every unowned point measured within `sep` of a new center to the first such
    /// center (the new centers in order).
    fn cover(&mut self, d: &[f64], sep: f64) {
        for (k, &(_, ci)) in self.fresh.iter().enumerate() {
            let span = self.spans[k]..self.spans[k + 1];
            for (&j, &dj) in self.asked[span.clone()].iter().zip(&d[span]) {
                if dj <= sep && self.owner[j].is_none() {
                    self.owner[j] = Some((ci, dj));
                }
            }
        }
    }

    fn finish(self) -> Vec<Center> {
        self.g.finish(self.owner, self.centers)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use voisin::{Metric, StringSet};

    use super::*;
    use crate::cover::CoverTree;
    use crate::pairs::CpuOracle;
    use crate::space::{StringSpace, VectorSpace};

    /// The batched build with the CPU's distances gives the CPU build's tree, node for node,
    /// and keeps every invariant.
    fn same_tree<S: Space + Clone>(space: S, base: f64, label: &str) {
        let cpu = CoverTree::build(space.clone(), base);
        let batched = CoverTree::build_with(space.clone(), base, &CpuOracle(&space)).unwrap();
        assert!(cpu.parts() == batched.parts(), "{label}: the trees differ");
        batched
            .check_invariants()
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        batched
            .check_distances()
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

    /// An oracle that loses answers is an error, not a wrong tree.
    #[test]
    fn a_short_answer_is_an_error() {
        struct Short;
        impl PairOracle for Short {
            fn within(&self, batch: &PairBatch) -> Result<Vec<f64>> {
                Ok(vec![1.0; batch.cands().len() - 1])
            }
        }
        let space = VectorSpace::from_f32(rows(3, 50, 2, false), 2, Metric::Euclidean).unwrap();
        let err = CoverTree::build_with(space, 2.0, &Short).err().unwrap();
        assert!(err.to_string().contains("answered"), "{err}");
    }
}
