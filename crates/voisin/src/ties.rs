//! Every item tied at the k-th distance, on request (the CLI's `--ties all`, Python's
//! `ties="all"`).
//!
//! Engines return exactly k neighbours, ties at the k-th distance broken by the smaller index.
//! Here each row holds its k nearest items as the engines return them, followed by every further
//! item whose exact key equals the k-th one, by increasing index: the order (key, index)
//! throughout. Rows have their own lengths, so the result is range-style ([`RangeResult`], CSR).
//!
//! One implementation for every engine: it asks for k-NN lists from any exact source over one
//! base (an [`Engine`] with the base, a prepared base, a metric index) and decides ties on the
//! exact f64 keys ([`crate::metric::exact::item_key`]) that every engine ranks by, so the answer
//! is the same on every engine. How: the lists of k + 1 neighbours (for a graph, k + 1 other
//! items); a row whose last entry's key equals its k-th may have more ties beyond its list, and
//! such rows, alone, are asked again for lists twice as long, until each list either ends on a
//! larger key or holds every item. A row without ties costs one entry more than its k; a row
//! with t ties about log2((k + t) / k) further searches of that row, over lists at most twice
//! its answer.
//!
//! Why lists and not a range search at each row's k-th distance: a range request takes one
//! radius for all its queries, while each row has its own k-th distance; and a range decides
//! inclusion on the reported distance, which merges distinct keys (euclidean's square root of
//! two neighbouring keys can round to one value) and reverses for `inner_product` (a minimum
//! dot product). Lists need neither: they carry the keys' order itself.
//!
//! ```
//! use voisin::{cpu::CpuEngine, ties, Dataset, Metric, VectorSet};
//! // Items 1 and 2 are both at distance 1 from item 0.
//! let data: Dataset = VectorSet::from_f32(3, 1, vec![0.0, 1.0, -1.0]).unwrap().into();
//! let g = ties::graph_on(&CpuEngine::default(), &data, 1, &Metric::Euclidean).unwrap();
//! assert_eq!((g.row(0).0, g.row(1).0, g.row(2).0), (&[1, 2][..], &[0][..], &[0][..]));
//! ```

use rayon::prelude::*;

use crate::data::Dataset;
use crate::engine::{Engine, GraphRequest, KnnRequest, KnnResult, RangeResult, Stats};
use crate::error::{Error, Result};
use crate::metric::{exact::item_key, Metric};

/// Each query's k nearest items of one fixed base, k capped at the base size, sorted by (exact
/// key, index): `|queries, k| engine.knn(base, queries, k, metric)`, or a prepared base's or
/// a metric index's `knn`.
pub type KnnLists<'a> = dyn Fn(&Dataset, usize) -> Result<KnnResult> + 'a;

/// The base's own k-NN graph (k capped at n − 1, each item itself excluded, duplicates kept),
/// from the engine's graph (checkpointed or not) or an index's.
pub type GraphLists<'a> = dyn Fn(usize) -> Result<KnnResult> + 'a;

/// For each query, its k nearest base items and every further item at the k-th exact key.
pub fn knn(
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    metric: &Metric,
    lists: &KnnLists<'_>,
) -> Result<RangeResult> {
    let k = KnnRequest::new(base, queries, k, metric)?.k();
    let rows = Rows {
        base,
        queries,
        metric,
        k,
        avail: base.len(),
    };
    if k == 0 {
        return Ok(rows.empty());
    }
    let first = lists(queries, k + 1)?;
    rows.complete(first, |pending, width| {
        lists(&queries.gather(pending), width)
    })
}

/// For each item, its k nearest other items and every further item at the k-th exact key (the
/// item itself excluded, its duplicates kept): the graph's first lists from `graph`, the longer
/// lists of tied rows from `lists` over the same set, with each item then dropped from its own.
pub fn graph(
    data: &Dataset,
    k: usize,
    metric: &Metric,
    graph: &GraphLists<'_>,
    lists: &KnnLists<'_>,
) -> Result<RangeResult> {
    let k = GraphRequest::new(data, k, metric)?.k();
    let rows = Rows {
        base: data,
        queries: data,
        metric,
        k,
        avail: data.len().saturating_sub(1),
    };
    if k == 0 {
        return Ok(rows.empty());
    }
    let first = graph(k + 1)?;
    rows.complete(first, |pending, width| {
        let wide = lists(&data.gather(pending), width + 1)?;
        others(wide, pending, width)
    })
}

/// [`knn`] on an engine.
pub fn knn_on(
    engine: &dyn Engine,
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    metric: &Metric,
) -> Result<RangeResult> {
    knn(base, queries, k, metric, &|q, w| {
        engine.knn(base, q, w, metric)
    })
}

/// [`graph`] on an engine.
pub fn graph_on(
    engine: &dyn Engine,
    data: &Dataset,
    k: usize,
    metric: &Metric,
) -> Result<RangeResult> {
    graph(
        data,
        k,
        metric,
        &|w| engine.graph(data, w, metric),
        &|q, w| engine.knn(data, q, w, metric),
    )
}

/// Lists of `width + 1` neighbours of the items `rows` of a set as lists of `width` other
/// items: each row's own item dropped (when it is not among them, duplicates with smaller
/// indices filled its place, and the last entry goes).
fn others(wide: KnnResult, rows: &[usize], width: usize) -> Result<KnnResult> {
    if wide.n_queries != rows.len() || wide.k != width + 1 {
        return Err(unexpected(rows.len(), width + 1, &wide));
    }
    let mut indices = Vec::with_capacity(rows.len() * width);
    let mut distances = Vec::with_capacity(rows.len() * width);
    for (j, &item) in rows.iter().enumerate() {
        let (ids, ds) = wide.row(j);
        let kept = ids.iter().zip(ds).filter(|(&i, _)| i as usize != item);
        for (&i, &d) in kept.take(width) {
            indices.push(i);
            distances.push(d);
        }
    }
    Ok(KnnResult {
        n_queries: rows.len(),
        k: width,
        indices,
        distances,
        stats: wide.stats,
    })
}

/// The error for lists that are not those asked for (`rows` lists of `width`): a source that
/// breaks its contract, never bad input.
fn unexpected(rows: usize, width: usize, got: &KnnResult) -> Error {
    Error::device(format!(
        "ties: asked for {rows} lists of {width} neighbours, got {} of {}",
        got.n_queries, got.k
    ))
}

/// The rows being answered: queries against the base under the metric, k (capped), and how
/// many items a row can hold at most.
struct Rows<'a> {
    base: &'a Dataset,
    queries: &'a Dataset,
    metric: &'a Metric,
    k: usize,
    avail: usize,
}

/// Where a finished row lies: the round whose lists hold it, its row there, its length.
#[derive(Clone, Copy, Default)]
struct Cut {
    round: usize,
    row: usize,
    len: usize,
}

impl Rows<'_> {
    fn empty(&self) -> RangeResult {
        RangeResult::from_rows_by(
            vec![Vec::<(f32, u32)>::new(); self.queries.len()],
            f64::from,
        )
    }

    /// Exact key between query row `q` and base item `i`.
    fn key(&self, q: usize, i: u32) -> f64 {
        item_key(self.metric, self.base, i as usize, self.queries, q)
    }

    /// Runs the rounds from the `first` lists (of every row, k + 1 wide or capped), asking
    /// `more(rows, width)` for the lists of the rows still open, then packs the rows.
    fn complete(
        &self,
        first: KnnResult,
        mut more: impl FnMut(&[usize], usize) -> Result<KnnResult>,
    ) -> Result<RangeResult> {
        let n = self.queries.len();
        if first.n_queries != n || first.k < self.k {
            return Err(unexpected(n, self.k + 1, &first));
        }
        let kth: Vec<f64> = (0..n)
            .into_par_iter()
            .map(|q| self.key(q, first.row(q).0[self.k - 1]))
            .collect();
        let mut cuts = vec![Cut::default(); n];
        let mut rounds = vec![first];
        let mut open: Vec<usize> = (0..n).collect();
        // Entries before `from` are known to be within the answer (k, then ties).
        let mut from = self.k;
        loop {
            let lists = rounds.last().expect("one round at least");
            let round = rounds.len() - 1;
            let lens: Vec<Option<usize>> = open
                .par_iter()
                .enumerate()
                .map(|(j, &q)| self.tied_len(q, kth[q], lists.row(j).0, from))
                .collect();
            let width = lists.k;
            let mut still = Vec::new();
            for (j, (&q, len)) in open.iter().zip(lens).enumerate() {
                match len {
                    Some(len) => cuts[q] = Cut { round, row: j, len },
                    None => still.push(q),
                }
            }
            if still.is_empty() {
                break;
            }
            from = width;
            let wider = (2 * width).min(self.avail);
            let longer = more(&still, wider)?;
            if longer.k != wider || longer.n_queries != still.len() {
                return Err(unexpected(still.len(), wider, &longer));
            }
            rounds.push(longer);
            open = still;
        }
        Ok(pack(&rounds, &cuts))
    }

    /// How many entries of `ids` (query row `q`'s list) form its answer: the first k and the
    /// entries after them at the k-th key `kth`, known from position `from` on. None when every
    /// entry is in it and the list could go on (more items than it holds).
    fn tied_len(&self, q: usize, kth: f64, ids: &[u32], from: usize) -> Option<usize> {
        let from = from.min(ids.len());
        let tied = ids[from..]
            .iter()
            .take_while(|&&i| self.key(q, i) == kth)
            .count();
        let len = from + tied;
        (len < ids.len() || ids.len() >= self.avail).then_some(len)
    }
}

/// The rows at `cuts` of the rounds' lists as one result, with every round's work in its
/// stats.
fn pack(rounds: &[KnnResult], cuts: &[Cut]) -> RangeResult {
    let total = cuts.iter().map(|c| c.len).sum();
    let mut out = RangeResult {
        offsets: Vec::with_capacity(cuts.len() + 1),
        indices: Vec::with_capacity(total),
        distances: Vec::with_capacity(total),
        stats: merged_stats(rounds),
    };
    out.offsets.push(0);
    for c in cuts {
        let (ids, ds) = rounds[c.round].row(c.row);
        out.indices.extend_from_slice(&ids[..c.len]);
        out.distances.extend_from_slice(&ds[..c.len]);
        out.offsets.push(out.indices.len());
    }
    out
}

/// The stats of several calls as one: times and counts added, the first call's device and
/// arithmetic.
fn merged_stats(rounds: &[KnnResult]) -> Stats {
    let mut all = rounds.first().map(|r| r.stats.clone()).unwrap_or_default();
    for r in rounds.iter().skip(1) {
        all.compute += r.stats.compute;
        all.select += r.stats.select;
        all.transfer += r.stats.transfer;
        all.distance_evals += r.stats.distance_evals;
        all.exact_evals += r.stats.exact_evals;
    }
    all
}
