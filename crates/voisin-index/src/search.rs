//! The query side shared by every index: a probe that measures one query against items and counts
//! the evaluations, collectors for range and k-NN answers, and the parallel loops over queries
//! that turn them into voisin's [`RangeResult`] and [`KnnResult`].
//!
//! An index only walks its structure ([`MetricIndex::search`]) and asks the collector for the
//! current radius; whether that radius is fixed (range) or shrinks as better neighbours arrive
//! (k-NN) is the collector's business. Nothing here knows a particular index.

use std::borrow::Borrow;
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Instant;

use rayon::prelude::*;
use voisin::engine::check_k;
use voisin::{Error, KnnResult, RangeResult, Result, Stats};

use crate::space::Space;

/// A measured distance: the key results are ranked by and the distance pruning works with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dist {
    /// The exact key ([`Space::key`]: e.g. the squared distance under euclidean); results are
    /// ranked by it and it is what answers carry until they are packed.
    pub key: f64,
    /// The metric's distance for that key ([`Space::to_distance`]), which radii and the
    /// triangle-inequality bounds compare with.
    pub dist: f64,
}

/// One query against the items of a space, counting every distance evaluation. The count is
/// kept per query and added to the shared atomic total once the query is done: one atomic
/// increment per evaluation from every thread would bounce its cache line between cores. The
/// query is prepared once ([`Space::prepare`]) for all its bounded evaluations.
pub struct Probe<'a, S: Space + ?Sized> {
    space: &'a S,
    query: &'a S::Item,
    prepared: S::Prepared,
    evals: Cell<u64>,
}

impl<'a, S: Space + ?Sized> Probe<'a, S> {
    /// A probe of `query` against `space`'s items, with the query prepared and no evaluation
    /// counted yet.
    pub fn new(space: &'a S, query: &'a S::Item) -> Self {
        Probe {
            space,
            query,
            prepared: space.prepare(query),
            evals: Cell::new(0),
        }
    }

    /// The query.
    pub fn query(&self) -> &'a S::Item {
        self.query
    }

    /// Distance evaluations made so far.
    pub fn evals(&self) -> u64 {
        self.evals.get()
    }

    /// The space whose items the query is measured against.
    pub fn space(&self) -> &'a S {
        self.space
    }

    /// Distance from the query to item `i`.
    pub fn to(&self, i: usize) -> Dist {
        self.evals.set(self.evals.get() + 1);
        let key = self.space.key(self.query, self.space.item(i));
        Dist {
            key,
            dist: self.space.to_distance(key),
        }
    }

    /// Distance from the query to item `i` when it is at most `max_distance`.
    pub fn within(&self, i: usize, max_distance: f64) -> Option<Dist> {
        self.evals.set(self.evals.get() + 1);
        let key = self.space.key_within_prepared(
            &self.prepared,
            self.query,
            self.space.item(i),
            max_distance,
        )?;
        Some(Dist {
            key,
            dist: self.space.to_distance(key),
        })
    }
}

/// Receives the items an index finds and says how far the search must still look.
pub trait Collector {
    /// Items farther than this cannot be part of the answer (inclusive: an item at exactly this
    /// distance may still be).
    fn radius(&self) -> f64;
    /// Offers item `index` at distance `d` (the collector keeps it or not).
    fn offer(&mut self, d: Dist, index: u32);
}

/// Every item within a fixed radius.
pub struct RangeCollector {
    radius: f64,
    hits: Vec<(f64, u32)>,
}

impl Collector for RangeCollector {
    fn radius(&self) -> f64 {
        self.radius
    }

    fn offer(&mut self, d: Dist, index: u32) {
        if d.dist <= self.radius {
            self.hits.push((d.key, index));
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    d: Dist,
    index: u32,
}

impl Entry {
    fn rank(&self, other: &Self) -> Ordering {
        self.d
            .key
            .total_cmp(&other.d.key)
            .then(self.index.cmp(&other.index))
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.rank(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank(other)
    }
}

/// The k best items so far, ranked by (key, index), in a bounded max-heap. Its radius is the
/// distance of the worst kept item once k are kept, so the search shrinks as it improves; an item
/// at exactly that distance still enters when its index is smaller, which is why the radius is
/// inclusive and pruning strict.
pub struct KnnHeap {
    k: usize,
    heap: BinaryHeap<Entry>,
}

impl KnnHeap {
    /// An empty heap keeping at most `k` items; its radius is infinite until `k` are kept.
    pub fn new(k: usize) -> Self {
        KnnHeap {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    /// The kept items, best first.
    fn into_sorted(self) -> Vec<(f64, u32)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|e| (e.d.key, e.index))
            .collect()
    }
}

impl Collector for KnnHeap {
    fn radius(&self) -> f64 {
        match self.heap.peek() {
            Some(worst) if self.heap.len() == self.k => worst.d.dist,
            _ => f64::INFINITY,
        }
    }

    fn offer(&mut self, d: Dist, index: u32) {
        let entry = Entry { d, index };
        if self.heap.len() < self.k {
            self.heap.push(entry);
        } else if self.heap.peek().is_some_and(|worst| entry < *worst) {
            self.heap.pop();
            self.heap.push(entry);
        }
    }
}

/// What every index implements: a walk over its structure for one query that offers every item
/// the collector could want and skips only regions the triangle inequality rules out.
pub trait MetricIndex: Sync {
    /// The space the index was built over.
    type Space: Space;

    /// The indexed items and their metric.
    fn space(&self) -> &Self::Space;

    /// Walks the structure for `probe`'s query, offering `out` every item that may lie within
    /// its current radius (re-read as it shrinks); the collector decides what it keeps.
    fn search(&self, probe: &Probe<'_, Self::Space>, out: &mut dyn Collector);
}

/// Runs `one` for every query in parallel and packs the rows, converting keys to distances.
fn per_query<I, Q, F>(index: &I, queries: &[Q], one: F) -> (Vec<Vec<(f64, u32)>>, Stats)
where
    I: MetricIndex + ?Sized,
    Q: Borrow<<I::Space as Space>::Item> + Sync,
    F: Fn(&Probe<'_, I::Space>) -> Vec<(f64, u32)> + Sync,
{
    let evals = AtomicU64::new(0);
    let start = Instant::now();
    let rows = queries
        .par_iter()
        .map(|q| {
            let probe = Probe::new(index.space(), q.borrow());
            let row = one(&probe);
            evals.fetch_add(probe.evals(), AtomicOrdering::Relaxed);
            row
        })
        .collect();
    let stats = Stats {
        compute: start.elapsed(),
        distance_evals: evals.load(AtomicOrdering::Relaxed),
        device: voisin::cpu::device_name(rayon::current_num_threads()),
        ..Stats::default()
    };
    (rows, stats)
}

/// Every item within `radius` of each query, rows sorted by (distance, index).
pub fn range<I, Q>(index: &I, queries: &[Q], radius: f64) -> Result<RangeResult>
where
    I: MetricIndex + ?Sized,
    Q: Borrow<<I::Space as Space>::Item> + Sync,
{
    if !(radius.is_finite() && radius >= 0.0) {
        return Err(Error::invalid(format!(
            "radius {radius} must be a finite number >= 0"
        )));
    }
    let (rows, stats) = per_query(index, queries, |probe| {
        let mut out = RangeCollector {
            radius,
            hits: Vec::new(),
        };
        index.search(probe, &mut out);
        out.hits
            .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        out.hits
    });
    let space = index.space();
    Ok(RangeResult {
        stats,
        ..RangeResult::from_rows_by(rows, |key| space.to_distance(key))
    })
}

/// The k nearest items of each query (k capped at the number of items), ties by smaller index.
pub fn knn<I, Q>(index: &I, queries: &[Q], k: usize) -> Result<KnnResult>
where
    I: MetricIndex + ?Sized,
    Q: Borrow<<I::Space as Space>::Item> + Sync,
{
    check_k(k)?;
    let k = k.min(index.space().len());
    let (rows, stats) = per_query(index, queries, |probe| {
        let mut heap = KnnHeap::new(k);
        if k > 0 {
            index.search(probe, &mut heap);
        }
        heap.into_sorted()
    });
    let space = index.space();
    Ok(KnnResult {
        stats,
        ..KnnResult::from_rows_by(rows, k, |key| space.to_distance(key))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(x: f64) -> Dist {
        Dist { key: x, dist: x }
    }

    #[test]
    fn heap_keeps_the_k_best_with_ties_by_index() {
        let mut h = KnnHeap::new(2);
        assert_eq!(h.radius(), f64::INFINITY);
        h.offer(d(1.0), 5);
        h.offer(d(1.0), 7);
        assert_eq!(h.radius(), 1.0);
        h.offer(d(1.0), 6);
        h.offer(d(1.0), 9);
        h.offer(d(2.0), 0);
        assert_eq!(h.into_sorted(), vec![(1.0, 5), (1.0, 6)]);
    }
}
