//! Sparse Spatial Selection pivots ([Barrientos13] §2.2.3, docs/references.md): a pivot table over the whole set.
//!
//! Pivot selection: M estimates the largest distance between two items (a double sweep from
//! item 0, which gives a value between M/2 and M); item 0 is the first pivot, and scanning the
//! set in order, an item becomes a pivot when its distance to every pivot so far is at least α·M
//! (up to a cap on the number of pivots). The table holds every item's distance to every pivot.
//! A query measures its distance to each pivot and evaluates an item only when no pivot proves
//! it out of reach: |d(q, p) − d(x, p)| > r for some pivot p. Rows are sorted by the distance to
//! the first pivot, so that pivot's filter is a walk outward from the query's own distance.

use rayon::prelude::*;

use crate::file::ItemTally;
use crate::pairs::{answers, one_to_many, PairBatch, PairOracle};
use crate::search::{Collector, Dist, MetricIndex, Probe};
use crate::space::Space;

/// Candidates per batch of the pivot scan with an oracle.
const PIVOT_BATCH: usize = 1 << 16;

/// An SSS pivot index over a space.
///
/// The table's rows are kept sorted by the distance to the first pivot, so a query walks outward
/// from its own distance to that pivot and stops as soon as the gap alone exceeds the radius:
/// the first pivot's filter costs a binary search, not a pass over the whole table.
pub struct Sss<S: Space> {
    space: S,
    pivots: Vec<u32>,
    /// Items in table order: by (distance to the first pivot, index).
    order: Vec<u32>,
    /// Row-major `len × pivots.len()`: row i holds item `order[i]`'s distances to the pivots.
    table: Vec<f64>,
    /// Column 0 of the table, contiguous for the binary search.
    first: Vec<f64>,
    is_pivot: Vec<bool>,
    /// Largest value in the table, to size the rounding allowance once per radius.
    widest: f64,
    build_evals: u64,
}

impl<S: Space> Sss<S> {
    /// Builds with the seed's α (0.4–0.5 is typical) and at most `max_pivots` pivots (≥ 1).
    pub fn build(space: S, alpha: f64, max_pivots: usize) -> Self {
        Self::build_with_progress(space, alpha, max_pivots, &|_| {})
    }

    /// [`Sss::build`], calling `progress` with the number of candidates scanned for pivots now
    /// and then, and with n once the table is done.
    pub fn build_with_progress(
        space: S,
        alpha: f64,
        max_pivots: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Self {
        Self::build_by(space, alpha, max_pivots, progress, None)
            .expect("the CPU's distances do not fail")
    }

    /// [`Sss::build_with_progress`] with the distance work asked of `oracle` in batches: the two
    /// sweeps one batch each, the pivot scan in batches of candidates against the pivots known
    /// at the batch's start (pivots found inside a batch are compared here, exactly), the table
    /// in one batch. With an oracle that answers the space's exact distances the pivots and the
    /// table are the CPU build's; the evaluation count includes whole candidate batches.
    pub fn build_with(
        space: S,
        alpha: f64,
        max_pivots: usize,
        progress: &(dyn Fn(usize) + Sync),
        oracle: &dyn PairOracle,
    ) -> voisin::Result<Self> {
        Self::build_by(space, alpha, max_pivots, progress, Some(oracle))
    }

    fn build_by(
        space: S,
        alpha: f64,
        max_pivots: usize,
        progress: &(dyn Fn(usize) + Sync),
        oracle: Option<&dyn PairOracle>,
    ) -> voisin::Result<Self> {
        let n = space.len();
        let max_pivots = max_pivots.max(1);
        let dist = |a: usize, b: usize| space.distance(a, b);
        // The item farthest from `from`, ties to the smaller index, and its distance.
        let farthest = |from: usize| -> voisin::Result<(f64, usize)> {
            let d = match oracle {
                None => (0..n).into_par_iter().map(|x| dist(from, x)).collect(),
                Some(o) => one_to_many(o, from as u32, &(0..n as u32).collect::<Vec<_>>())?,
            };
            Ok(d.into_par_iter()
                .enumerate()
                .map(|(x, d)| (d, x))
                .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
                .expect("n > 0"))
        };
        let mut pivots = Vec::new();
        let mut evals = 0u64;
        if n > 0 {
            let (_, far) = farthest(0)?;
            let (max, _) = farthest(far)?;
            evals += 2 * n as u64;
            let threshold = alpha * max;
            pivots.push(0u32);
            match oracle {
                None => {
                    for x in 1..n {
                        if pivots.len() >= max_pivots {
                            break;
                        }
                        let far_from_all = pivots.iter().all(|&p| {
                            evals += 1;
                            dist(p as usize, x) >= threshold
                        });
                        if far_from_all {
                            pivots.push(x as u32);
                        }
                        if x % 4096 == 0 {
                            progress(x);
                        }
                    }
                }
                Some(o) => {
                    let mut at = 1;
                    while at < n && pivots.len() < max_pivots {
                        let end = (at + PIVOT_BATCH).min(n);
                        let known = pivots.len();
                        let mut b = PairBatch::default();
                        for &p in &pivots {
                            b.push(p, f64::INFINITY, at as u32..end as u32);
                        }
                        let d = answers(o, &b)?;
                        evals += d.len() as u64;
                        let width = end - at;
                        for x in at..end {
                            if pivots.len() >= max_pivots {
                                break;
                            }
                            let far_from_all = (0..known)
                                .all(|i| d[i * width + (x - at)] >= threshold)
                                && pivots[known..].iter().all(|&p| {
                                    evals += 1;
                                    dist(p as usize, x) >= threshold
                                });
                            if far_from_all {
                                pivots.push(x as u32);
                            }
                        }
                        progress(end);
                        at = end;
                    }
                }
            }
        }
        let np = pivots.len();
        let flat: Vec<f64> = match oracle {
            None => (0..n)
                .into_par_iter()
                .flat_map_iter(|x| pivots.iter().map(move |&p| dist(x, p as usize)))
                .collect(),
            Some(o) => {
                let mut b = PairBatch::default();
                for x in 0..n as u32 {
                    b.push(x, f64::INFINITY, pivots.iter().copied());
                }
                answers(o, &b)?
            }
        };
        evals += (n * np) as u64;
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|&a, &b| {
            flat[a as usize * np]
                .total_cmp(&flat[b as usize * np])
                .then(a.cmp(&b))
        });
        let table = order
            .iter()
            .flat_map(|&x| flat[x as usize * np..(x as usize + 1) * np].iter().copied())
            .collect();
        let mut sss = Self::assemble(space, pivots, order, table);
        sss.build_evals = evals;
        progress(n);
        Ok(sss)
    }

    /// Assembles an index from its parts (read from a file, or built elsewhere: the GPU build of
    /// voisin-cuda) and validates it with [`Sss::check`]: pivots in increasing order, every item
    /// once in the table order, rows sorted by the first pivot and every table entry re-measured
    /// bit for bit. `build_evals` is what the construction cost (0 for a file).
    pub fn from_parts(
        space: S,
        pivots: Vec<u32>,
        order: Vec<u32>,
        table: Vec<f64>,
        build_evals: u64,
    ) -> Result<Self, String> {
        let mut sss = Self::assemble(space, pivots, order, table);
        sss.check()?;
        sss.build_evals = build_evals;
        Ok(sss)
    }

    fn assemble(space: S, pivots: Vec<u32>, order: Vec<u32>, table: Vec<f64>) -> Self {
        let n = space.len();
        let np = pivots.len().max(1);
        let first = table.iter().step_by(np).copied().collect();
        let mut is_pivot = vec![false; n];
        for &p in &pivots {
            if let Some(slot) = is_pivot.get_mut(p as usize) {
                *slot = true;
            }
        }
        let widest = table.iter().copied().fold(0.0, f64::max);
        Sss {
            space,
            pivots,
            order,
            table,
            first,
            is_pivot,
            widest,
            build_evals: 0,
        }
    }

    /// The pivots' items (positions in the space), in increasing order; item 0 is the first.
    pub fn pivots(&self) -> &[u32] {
        &self.pivots
    }

    /// The pivots, the items in table order and the row-major table (row i: item `order[i]`'s
    /// distances to the pivots): what a device copy of the index (voisin-cuda) uploads.
    pub fn parts(&self) -> (&[u32], &[u32], &[f64]) {
        (&self.pivots, &self.order, &self.table)
    }

    /// Distance evaluations the construction made (0 for an index read from a file).
    pub fn build_evals(&self) -> u64 {
        self.build_evals
    }

    /// Checks the shapes, ids and table order; used on indexes read from files.
    pub fn check(&self) -> Result<(), String> {
        let n = self.space.len();
        if n > 0 && self.pivots.is_empty() {
            return Err("no pivots".into());
        }
        if let Some(p) = self.pivots.iter().find(|&&p| p as usize >= n) {
            return Err(format!("pivot {p} is out of range (set of {n})"));
        }
        if self.pivots.windows(2).any(|w| w[0] >= w[1]) {
            return Err("pivots are not in increasing order".into());
        }
        if Some(self.table.len()) != n.checked_mul(self.pivots.len()) || self.order.len() != n {
            return Err("pivot table has the wrong size".into());
        }
        let mut tally = ItemTally::new(n);
        for &x in &self.order {
            tally.mark(x).map_err(|e| format!("table order: {e}"))?;
        }
        if self.first.windows(2).any(|w| w[0].is_nan() || w[0] > w[1]) {
            return Err("table rows are not sorted by the first pivot".into());
        }
        self.check_distances()
    }

    /// Re-measures every table entry (a checksum catches accidents, not a forged file; issue
    /// 14): the search prunes with them, so a wrong one loses neighbours. n × pivots
    /// evaluations, the table's own cost at construction.
    fn check_distances(&self) -> Result<(), String> {
        let np = self.pivots.len();
        if np == 0 {
            return Ok(());
        }
        let space = &self.space;
        let errors: Vec<String> = self
            .order
            .par_iter()
            .zip(self.table.par_chunks(np))
            .filter_map(|(&x, row)| {
                self.pivots.iter().zip(row).find_map(|(&p, &stored)| {
                    let d = space.distance(x as usize, p as usize);
                    (d.to_bits() != stored.to_bits()).then(|| {
                        format!(
                            "item {x} is stored at distance {stored} from pivot {p} but is at {d}"
                        )
                    })
                })
            })
            .collect();
        errors.into_iter().next().map_or(Ok(()), Err)
    }
}

impl<S: Space> MetricIndex for Sss<S> {
    type Space = S;

    fn space(&self) -> &S {
        &self.space
    }

    fn search(&self, probe: &Probe<'_, S>, out: &mut dyn Collector) {
        let np = self.pivots.len();
        if np == 0 {
            return;
        }
        let space = &self.space;
        let to_pivots: Vec<Dist> = self.pivots.iter().map(|&p| probe.to(p as usize)).collect();
        for (&p, &d) in self.pivots.iter().zip(&to_pivots) {
            out.offer(d, p);
        }
        let q0 = to_pivots[0].dist;
        let gap = |i: usize| (self.first[i] - q0).abs();
        // Walk outward from the query's place in the first pivot's order, nearer gap first.
        // Per pivot, the interval of table values an item needs to stay in reach; recomputed only
        // when the radius shrinks, so a row costs two comparisons per pivot.
        let mut bounds = vec![(0.0, 0.0); np - 1];
        let mut bounds_for = f64::NAN;
        let (mut below, mut above) = {
            let at = self.first.partition_point(|&d| d < q0);
            (at, at)
        };
        loop {
            let down = below.checked_sub(1).map(|i| (gap(i), i));
            let up = (above < self.first.len()).then(|| (gap(above), above));
            let (g, i) = match (down, up) {
                (Some(d), Some(u)) => {
                    if d.0 <= u.0 {
                        d
                    } else {
                        u
                    }
                }
                (Some(d), None) => d,
                (None, Some(u)) => u,
                (None, None) => break,
            };
            let r = out.radius();
            if space.beyond(g, r, q0 + self.first[i]) {
                break;
            }
            if i < below {
                below = i;
            } else {
                above = i + 1;
            }
            let x = self.order[i] as usize;
            if self.is_pivot[x] {
                continue;
            }
            if r != bounds_for {
                for (b, dq) in bounds.iter_mut().zip(&to_pivots[1..]) {
                    let tol = space.slack(dq.dist + self.widest + r);
                    *b = (dq.dist - r - tol, dq.dist + r + tol);
                }
                bounds_for = r;
            }
            let row = &self.table[i * np + 1..(i + 1) * np];
            let out_of_reach = row
                .iter()
                .zip(&bounds)
                .any(|(&dx, &(lo, hi))| dx < lo || dx > hi);
            if out_of_reach {
                continue;
            }
            if let Some(d) = probe.within(x, r) {
                out.offer(d, x as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::VectorSpace;
    use voisin::{Metric, VectorSet};

    /// from_parts (what the GPU build assembles) accepts a build's own parts and refuses parts
    /// that break an invariant.
    #[test]
    fn from_parts_validates() {
        let vals: Vec<f32> = (0..80).map(|i| ((i * 7) % 13) as f32).collect();
        let set = VectorSet::from_f32(40, 2, vals).unwrap();
        let space = || VectorSpace::new(&set, Metric::Euclidean).unwrap();
        let sss = Sss::build(space(), 0.3, 8);
        let (p, o, t) = sss.parts();
        let (p, o, t) = (p.to_vec(), o.to_vec(), t.to_vec());
        assert!(p.len() > 1);
        let ok = Sss::from_parts(space(), p.clone(), o.clone(), t.clone(), 3).unwrap();
        assert_eq!(ok.build_evals(), 3);
        assert_eq!(ok.parts(), sss.parts());
        let mut bad = t.clone();
        bad[1] += 0.5;
        let err = Sss::from_parts(space(), p.clone(), o.clone(), bad, 0);
        assert!(err.err().unwrap().contains("stored at distance"));
        let mut swapped = p.clone();
        swapped.swap(0, 1);
        assert!(Sss::from_parts(space(), swapped, o.clone(), t.clone(), 0).is_err());
        let mut order = o.clone();
        order[0] = order[1];
        assert!(Sss::from_parts(space(), p.clone(), order, t.clone(), 0).is_err());
        assert!(Sss::from_parts(space(), p, o, t[1..].to_vec(), 0).is_err());
    }
}
