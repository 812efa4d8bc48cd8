//! A List of Clusters searched in parts (docs/design/lc-multi-gpu-superclusters.md): the
//! clusters cut into contiguous runs, each run searched on its own (resident on one of several
//! GPUs — the seed's 1-Stage — or streamed through one GPU in superclusters, `lsc.rs`), and the
//! parts' answers merged on the host into exactly the answers of one search.

use std::ops::Range;
use std::time::Instant;

use rayon::prelude::*;
use voisin::engine::check_k;
use voisin::{Error, KnnResult, RangeResult, Result, Stats, VectorSet};
use voisin_index::space::Space;
use voisin_index::{ListOfClusters, MetricIndex, StreamStats, VectorSpace};

use super::lc::GpuLc;
use super::lsc::GpuLsc;
use super::schedule::median_positive;
use crate::engine::CudaEngine;

/// Queries of the k-NN pilot ([`GpuLcSpread::knn`]).
const PILOT_QUERIES: usize = 64;

/// One query's answers: (f32 distance, item id).
pub(crate) type Row = Vec<(f32, u32)>;

/// Device bytes of the copy of clusters `run` (the arrays of `LcHost::of(lc, run)`).
pub(crate) fn run_bytes(lc: &ListOfClusters<VectorSpace>, run: Range<usize>) -> usize {
    let d = lc.space().dim();
    let clusters = &lc.clusters()[run];
    let members: usize = clusters.iter().map(|c| c.end - c.start).sum();
    // A center: its values, radius, id and member offset; a member: values, distance, id.
    clusters.len() * (d * 4 + 16) + members * (d * 4 + 12) + 4
}

/// Orders one query's answers gathered from several parts and keeps the first `take` (all with
/// `None`): by f32 distance, and where two distances are equal by the exact key (recomputed
/// from `query`, bit-identical to the device's), then by id. Rounding to f32 is monotone, so
/// this is the (key, id) order of one search over all the parts' items.
pub(crate) fn order_row(space: &VectorSpace, query: &[f32], row: &mut Row, take: Option<usize>) {
    let key = |id: u32| space.key(query, space.item(id as usize));
    row.sort_unstable_by(|a, b| {
        a.0.total_cmp(&b.0)
            .then_with(|| {
                if a.1 == b.1 {
                    std::cmp::Ordering::Equal
                } else {
                    key(a.1).total_cmp(&key(b.1))
                }
            })
            .then(a.1.cmp(&b.1))
    });
    if let Some(k) = take {
        row.truncate(k);
    }
}

/// Appends every row of a range result to `rows` (the rows of queries `qids`).
pub(crate) fn add_range_rows(rows: &mut [Row], qids: &[usize], r: &RangeResult) {
    for (b, &q) in qids.iter().enumerate() {
        let (lo, hi) = (r.offsets[b], r.offsets[b + 1]);
        rows[q].extend(
            r.distances[lo..hi]
                .iter()
                .copied()
                .zip(r.indices[lo..hi].iter().copied()),
        );
    }
}

/// Appends every row of a k-NN result to `rows` (the rows of queries `qids`).
pub(crate) fn add_knn_rows(rows: &mut [Row], qids: &[usize], r: &KnnResult) {
    for (b, &q) in qids.iter().enumerate() {
        let (lo, hi) = (b * r.k, (b + 1) * r.k);
        rows[q].extend(
            r.distances[lo..hi]
                .iter()
                .copied()
                .zip(r.indices[lo..hi].iter().copied()),
        );
    }
}

/// Every query's row ordered (see [`order_row`]) and cut to `take`, in parallel.
pub(crate) fn order_rows(
    space: &VectorSpace,
    queries: &[f32],
    rows: &mut [Row],
    take: Option<usize>,
) {
    let d = space.dim();
    rows.par_iter_mut()
        .zip(queries.par_chunks(d))
        .for_each(|(row, q)| order_row(space, q, row, take));
}

/// Range answers gathered from the parts of a List of Clusters (runs on several GPUs, or
/// superclusters streamed through one), each query's row and the work's stats, ordered at the
/// end into exactly one search's answer: the one range tail of [`GpuLcSpread`] and `GpuLsc`.
pub(crate) struct Gathered {
    rows: Vec<Row>,
    stats: Stats,
}

impl Gathered {
    /// Nothing gathered yet for `queries` queries.
    pub(crate) fn new(queries: usize) -> Self {
        Gathered {
            rows: vec![Vec::new(); queries],
            stats: Stats::default(),
        }
    }

    /// Adds a part's answers to queries `qids` (the rows of `r`, in order).
    pub(crate) fn add(&mut self, qids: &[usize], r: &RangeResult) {
        add_range_rows(&mut self.rows, qids, r);
        add_stats(&mut self.stats, &r.stats);
    }

    /// The range result of `queries` (row-major f32 rows in `space`): every row ordered, the
    /// compute time counted since `started`.
    pub(crate) fn finish(
        mut self,
        space: &VectorSpace,
        queries: &[f32],
        started: Instant,
    ) -> RangeResult {
        order_rows(space, queries, &mut self.rows, None);
        self.stats.compute = started.elapsed();
        range_result(self.rows, self.stats)
    }
}

/// The range result of ordered rows.
fn range_result(rows: Vec<Row>, stats: Stats) -> RangeResult {
    RangeResult {
        stats,
        ..RangeResult::from_rows_by(rows, f64::from)
    }
}

/// The k-NN result of ordered rows of `k` answers each; a shorter row (NaN values) is refused
/// as the single-GPU search refuses it.
pub(crate) fn knn_result(rows: Vec<Row>, k: usize, stats: Stats) -> Result<KnnResult> {
    if let Some(q) = rows.iter().position(|r| r.len() != k) {
        return Err(Error::invalid(format!(
            "query {q} has no {k} items at a comparable distance (NaN or infinite values?); \
             the GPU index cannot rank it"
        )));
    }
    let nq = rows.len();
    let (mut indices, mut distances) = (Vec::with_capacity(nq * k), Vec::with_capacity(nq * k));
    for row in rows {
        for (dist, id) in row {
            distances.push(dist);
            indices.push(id);
        }
    }
    Ok(KnnResult {
        n_queries: nq,
        k,
        indices,
        distances,
        stats,
    })
}

/// Sums the work of `part` into `total` and names its device once.
pub(crate) fn add_stats(total: &mut Stats, part: &Stats) {
    total.distance_evals += part.distance_evals;
    total.exact_evals += part.exact_evals;
    total.transfer += part.transfer;
    total.select += part.select;
    if !total.device.split(" + ").any(|d| d == part.device) {
        if !total.device.is_empty() {
            total.device.push_str(" + ");
        }
        total.device.push_str(&part.device);
    }
}

/// How a part of the index lives on its GPU.
enum Part<'a> {
    Resident(Box<GpuLc<'a>>),
    Streamed(GpuLsc<'a>),
}

/// Whether a copy of `bytes` stays resident on `engine`'s GPU: it does when it takes at most
/// half of the free memory (what `CudaOptions::device_memory` leaves); else `Err` carries the
/// supercluster share to stream it with: a sixth of the free memory, so that two superclusters
/// (the one searched and the next being copied), the search's slots and the answers waiting
/// on the device (each held to the same share) stay within it.
pub(crate) fn placement(
    engine: &CudaEngine,
    bytes: usize,
) -> Result<std::result::Result<(), usize>> {
    let free = engine.lock()?.free_memory()?;
    Ok(if bytes.saturating_mul(2) <= free {
        Ok(())
    } else {
        Err((free / 6).max(1))
    })
}

/// A List of Clusters spread over one or several GPUs: contiguous runs of clusters with about
/// equal numbers of items, one per engine (an engine of a GPU listed twice gets its own run),
/// each resident or streamed in superclusters as its GPU's free memory allows; queries go to
/// every part (one host thread each) and the answers are merged exactly.
pub struct GpuLcSpread<'a> {
    lc: &'a ListOfClusters<VectorSpace>,
    parts: Vec<Part<'a>>,
}

impl<'a> GpuLcSpread<'a> {
    /// Places `lc` on `engines` (at least one).
    pub fn new(engines: &'a [CudaEngine], lc: &'a ListOfClusters<VectorSpace>) -> Result<Self> {
        GpuLc::check(lc)?;
        if engines.is_empty() {
            return Err(Error::invalid("no GPU to search the index on"));
        }
        let runs = split_runs(lc, engines.len());
        let mut parts = Vec::with_capacity(runs.len());
        for (engine, run) in engines.iter().zip(runs) {
            if run.is_empty() {
                continue;
            }
            parts.push(match placement(engine, run_bytes(lc, run.clone()))? {
                Ok(()) => Part::Resident(Box::new(GpuLc::with_clusters(engine, lc, run)?)),
                Err(share) => Part::Streamed(GpuLsc::with_clusters(engine, lc, run, share)?),
            });
        }
        Ok(GpuLcSpread { lc, parts })
    }

    /// Number of parts (GPUs that hold some clusters).
    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    /// Every indexed item within `radius` of each query, rows sorted by (distance, index), and
    /// what streaming did.
    pub fn range(&self, queries: &VectorSet, radius: f64) -> Result<(RangeResult, StreamStats)> {
        let t = Instant::now();
        let found = self.each(|p| match p {
            Part::Resident(g) => g
                .range(queries, radius)
                .map(|r| (r, StreamStats::default())),
            Part::Streamed(s) => s.range(queries, radius),
        })?;
        let nq = queries.len();
        let all: Vec<usize> = (0..nq).collect();
        let (mut got, mut streamed) = (Gathered::new(nq), StreamStats::default());
        for (r, s) in &found {
            got.add(&all, r);
            streamed.add(s);
        }
        let q = queries.rows_f32(0, nq);
        Ok((got.finish(self.lc.space(), &q, t), streamed))
    }

    /// The k nearest indexed items of each query (k capped at the number of items), ties by
    /// the smaller index, and what streaming did.
    ///
    /// One part alone cannot bound a query whose neighbours live in another part (its own k
    /// best may lie far away, and its increasing-radius search then scans most of its run), so
    /// the rounds are global: every pending query is asked for all items within a radius on
    /// every part, and a query with at least k answers in all is done — every item outside
    /// the radius is farther than each answer, so its k first answers in (key, id) order are
    /// the exact k nearest. The others go round again with twice the radius. The first radius
    /// is the median k-th distance of up to [`PILOT_QUERIES`] queries searched in the CPU copy
    /// of the index (a few thousand evaluations each).
    pub fn knn(&self, queries: &VectorSet, k: usize) -> Result<(KnnResult, StreamStats)> {
        check_k(k)?;
        let t = Instant::now();
        let nq = queries.len();
        let d = queries.dim();
        let k = k.min(self.lc.space().len());
        let q = queries.rows_f32(0, nq);
        if let Some(bad) = q
            .chunks(d.max(1))
            .position(|r| r.iter().any(|x| !x.is_finite()))
        {
            return Err(Error::invalid(format!(
                "query {bad} has no {k} items at a comparable distance (NaN or infinite values); \
                 the GPU index cannot rank it"
            )));
        }
        let mut rows: Vec<Row> = vec![Vec::new(); nq];
        let (mut stats, mut streamed) = (Stats::default(), StreamStats::default());
        let mut pending: Vec<usize> = if k > 0 { (0..nq).collect() } else { Vec::new() };
        let mut radius = self.pilot_radius(&q, d, k)?;
        while !pending.is_empty() {
            let mut rows_of = Vec::with_capacity(pending.len() * d);
            for &i in &pending {
                rows_of.extend_from_slice(&q[i * d..(i + 1) * d]);
            }
            let sub = VectorSet::from_f32(pending.len(), d, rows_of)?;
            let found = self.each(|p| match p {
                Part::Resident(g) => g.range(&sub, radius).map(|r| (r, StreamStats::default())),
                Part::Streamed(s) => s.range(&sub, radius),
            })?;
            let mut round: Vec<Row> = vec![Vec::new(); pending.len()];
            let all: Vec<usize> = (0..pending.len()).collect();
            for (r, s) in &found {
                add_range_rows(&mut round, &all, r);
                add_stats(&mut stats, &r.stats);
                streamed.add(s);
            }
            let mut left = Vec::new();
            for (row, &i) in round.into_iter().zip(&pending) {
                if row.len() >= k {
                    rows[i] = row;
                } else {
                    left.push(i);
                }
            }
            pending = left;
            // Every item is within a finite radius of a finite query: doubling ends.
            radius = (radius * 2.0).min(f64::MAX);
        }
        order_rows(self.lc.space(), &q, &mut rows, Some(k));
        stats.compute = t.elapsed();
        Ok((knn_result(rows, k, stats)?, streamed))
    }

    /// The first radius of [`Self::knn`]'s rounds: the median k-th distance of up to
    /// [`PILOT_QUERIES`] evenly spaced queries, searched in the CPU copy of the index.
    fn pilot_radius(&self, q: &[f32], d: usize, k: usize) -> Result<f64> {
        let nq = q.len() / d.max(1);
        if nq == 0 || k == 0 {
            return Ok(1.0);
        }
        let step = nq.div_ceil(PILOT_QUERIES).max(1);
        let sample: Vec<&[f32]> = (0..nq)
            .step_by(step)
            .map(|i| &q[i * d..(i + 1) * d])
            .collect();
        let r = voisin_index::search::knn(self.lc, &sample, k)?;
        let kth: Vec<f64> = r
            .distances
            .chunks(k)
            .filter_map(|row| row.last().map(|&x| x as f64))
            .collect();
        // Positive, so that doubling grows it (1 when every k-th neighbour is a duplicate).
        Ok(median_positive(kth))
    }

    /// `search` on every part, one thread each; the first error wins.
    fn each<T: Send>(&self, search: impl Fn(&Part<'a>) -> Result<T> + Sync) -> Result<Vec<T>>
    where
        Part<'a>: Sync,
    {
        let search = &search;
        std::thread::scope(|s| {
            let running: Vec<_> = self
                .parts
                .iter()
                .map(|p| s.spawn(move || search(p)))
                .collect();
            running
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::device("cuda: a GPU's search panicked")))
                })
                .collect()
        })
    }
}

/// `parts` contiguous runs of `lc`'s clusters with about equal numbers of items (some empty
/// when there are fewer clusters than parts).
fn split_runs(lc: &ListOfClusters<VectorSpace>, parts: usize) -> Vec<Range<usize>> {
    let clusters = lc.clusters();
    let total: usize = clusters.iter().map(|c| 1 + c.end - c.start).sum();
    let mut runs = Vec::with_capacity(parts);
    let (mut start, mut seen) = (0, 0usize);
    for p in 1..=parts {
        let goal = total * p / parts;
        let mut end = start;
        while end < clusters.len() && (seen < goal || p == parts) {
            seen += 1 + clusters[end].end - clusters[end].start;
            end += 1;
        }
        runs.push(start..end);
        start = end;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::Metric;

    fn lc(n: usize, m: usize) -> ListOfClusters<VectorSpace> {
        let v: Vec<f32> = (0..n * 2).map(|i| ((i * 7919) % 101) as f32).collect();
        let set = VectorSet::from_f32(n, 2, v).unwrap();
        ListOfClusters::build(VectorSpace::new(&set, Metric::Euclidean).unwrap(), m)
    }

    #[test]
    fn runs_cover_every_cluster_once_in_order() {
        let l = lc(100, 8);
        let nc = l.clusters().len();
        for parts in [1, 2, 3, 5, nc, nc + 3] {
            let runs = split_runs(&l, parts);
            assert_eq!(runs.len(), parts);
            assert_eq!(runs[0].start, 0);
            assert_eq!(runs[parts - 1].end, nc);
            for w in runs.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
        }
        let runs = split_runs(&l, 2);
        let items = |r: &Range<usize>| -> usize {
            l.clusters()[r.clone()]
                .iter()
                .map(|c| 1 + c.end - c.start)
                .sum()
        };
        assert!(
            items(&runs[0]).abs_diff(items(&runs[1])) <= 2 * 8,
            "{runs:?}"
        );
    }

    #[test]
    fn equal_f32_distances_are_ordered_by_exact_key_then_id() {
        // Items 1 and 2 are at squared distances 1 + 2^-40 and 1 from the query: equal in f32,
        // different keys; item 3 equals item 2 (same key: id decides).
        let v = vec![0.0, 0.0, 1.0, 2f32.powi(-20), 1.0, 0.0, 1.0, 0.0];
        let set = VectorSet::from_f32(4, 2, v).unwrap();
        let space = VectorSpace::new(&set, Metric::Euclidean).unwrap();
        let mut row: Row = vec![(1.0, 3), (1.0, 1), (1.0, 2), (0.5, 0)];
        order_row(&space, &[0.0, 0.0], &mut row, None);
        assert_eq!(
            row.iter().map(|x| x.1).collect::<Vec<_>>(),
            vec![0, 2, 3, 1]
        );
        let mut row: Row = vec![(1.0, 1), (1.0, 3), (1.0, 2)];
        order_row(&space, &[0.0, 0.0], &mut row, Some(2));
        assert_eq!(row.iter().map(|x| x.1).collect::<Vec<_>>(), vec![2, 3]);
    }

    #[test]
    fn run_bytes_of_the_whole_list_counts_every_item() {
        let l = lc(50, 7);
        let d = 2;
        let nc = l.clusters().len();
        assert_eq!(
            run_bytes(&l, 0..nc),
            nc * (d * 4 + 16) + (50 - nc) * (d * 4 + 12) + 4
        );
    }
}
