//! Sparse Spatial Selection pivots (seed 003 §2.3): a pivot table over the whole set.
//!
//! Pivot selection: M estimates the largest distance between two items (a double sweep from
//! item 0, which gives a value between M/2 and M); item 0 is the first pivot, and scanning the
//! set in order, an item becomes a pivot when its distance to every pivot so far is at least α·M
//! (up to a cap on the number of pivots). The table holds every item's distance to every pivot.
//! A query measures its distance to each pivot and evaluates an item only when no pivot proves
//! it out of reach: |d(q, p) − d(x, p)| > r for some pivot p.

use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

use crate::search::{Collector, Dist, MetricIndex, Probe};
use crate::space::Space;

/// An SSS pivot index over a space.
pub struct Sss<S: Space> {
    space: S,
    pivots: Vec<u32>,
    /// Row-major `len × pivots.len()`: item x's distances to the pivots, contiguous.
    table: Vec<f64>,
    build_evals: u64,
}

impl<S: Space> Sss<S> {
    /// Builds with the seed's α (0.4–0.5 is typical) and at most `max_pivots` pivots (≥ 1).
    pub fn build(space: S, alpha: f64, max_pivots: usize) -> Self {
        let n = space.len();
        let evals = AtomicU64::new(0);
        let dist = |a: usize, b: usize| {
            evals.fetch_add(1, Ordering::Relaxed);
            space.to_distance(space.key(space.item(a), space.item(b)))
        };
        let farthest = |from: usize| {
            (0..n)
                .into_par_iter()
                .map(|x| (dist(from, x), x))
                .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
        };
        let mut pivots = Vec::new();
        if n > 0 {
            let (_, far) = farthest(0).expect("n > 0");
            let (max, _) = farthest(far).expect("n > 0");
            let threshold = alpha * max;
            pivots.push(0u32);
            for x in 1..n {
                if pivots.len() >= max_pivots.max(1) {
                    break;
                }
                if pivots.iter().all(|&p| dist(p as usize, x) >= threshold) {
                    pivots.push(x as u32);
                }
            }
        }
        let table = (0..n)
            .into_par_iter()
            .flat_map_iter(|x| pivots.iter().map(move |&p| (x, p)))
            .map(|(x, p)| dist(x, p as usize))
            .collect();
        Sss {
            space,
            pivots,
            table,
            build_evals: evals.into_inner(),
        }
    }

    pub(crate) fn from_parts(space: S, pivots: Vec<u32>, table: Vec<f64>) -> Self {
        Sss {
            space,
            pivots,
            table,
            build_evals: 0,
        }
    }

    pub fn pivots(&self) -> &[u32] {
        &self.pivots
    }

    pub(crate) fn table(&self) -> &[f64] {
        &self.table
    }

    pub fn build_evals(&self) -> u64 {
        self.build_evals
    }

    /// Checks the shapes and pivot ids; used on indexes read from files.
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
        if Some(self.table.len()) != n.checked_mul(self.pivots.len()) {
            return Err("pivot table has the wrong size".into());
        }
        Ok(())
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
        let mut pivot_at = self.pivots.iter().peekable();
        for (x, row) in self.table.chunks_exact(np).enumerate() {
            // Pivots are answered above; their ids are increasing.
            if pivot_at.peek().is_some_and(|&&p| p as usize == x) {
                pivot_at.next();
                continue;
            }
            let r = out.radius();
            let out_of_reach = row
                .iter()
                .zip(&to_pivots)
                .any(|(&dx, dq)| space.beyond((dq.dist - dx).abs(), r, dq.dist + dx));
            if out_of_reach {
                continue;
            }
            if let Some(d) = probe.within(x, r) {
                out.offer(d, x as u32);
            }
        }
    }
}
