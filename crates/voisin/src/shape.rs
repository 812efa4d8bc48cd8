//! What a result becomes before it is handed out, the same for the CLI and the Python
//! bindings: the item itself put first in each graph row (`--include-self`,
//! `include_self=True`; rows of k, or of their own lengths with `--ties all`), a self-join reduced to each unordered pair once (`--pairs`,
//! `pairs=True`), and the exact f64 distance of every entry (`--distances f64`,
//! `distances="f64"`).
//!
//! Conventions. Include-self with `K` entries per row: the item itself first at distance 0,
//! then its `K - 1` nearest other items, as UMAP's `precomputed_knn` (row i starts with i) and
//! scikit-learn's `KNeighborsTransformer(n_neighbors=K - 1, mode="distance")` (whose rows hold
//! n_neighbors + 1 entries, the sample itself included) expect. Pairs: row i holds the j > i
//! that it is paired with, sorted by distance then index; no (i, i), no (j, i) beside (i, j).
//! For a graph a pair is an edge in either direction.

use std::ops::Range;

use rayon::prelude::*;

use crate::metric::exact::item_key;
use crate::{Dataset, KnnResult, Metric, RangeResult, Stats};

/// What an engine answered, before it is shaped: k-NN rows (k-NN search, graphs) or ragged
/// rows (range search, pairs).
pub enum Answer {
    Knn(KnnResult),
    Range(RangeResult),
}

impl Answer {
    pub fn stats(&self) -> &Stats {
        match self {
            Answer::Knn(r) => &r.stats,
            Answer::Range(r) => &r.stats,
        }
    }

    /// Number of (query, neighbour) pairs returned.
    pub fn len(&self) -> usize {
        match self {
            Answer::Knn(r) => r.indices.len(),
            Answer::Range(r) => r.indices.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each graph row with the item itself first at distance 0: rows of k + 1 from rows of
    /// k ([`include_self`]), or rows of their own lengths (`--ties all`, [`include_self_rows`]).
    pub fn include_self(self) -> Answer {
        match self {
            Answer::Knn(g) => Answer::Knn(include_self(g)),
            Answer::Range(r) => Answer::Range(include_self_rows(r)),
        }
    }

    /// Each unordered pair {i, j}, i != j, of a self-join once (see the module doc).
    pub fn pairs(self) -> RangeResult {
        match self {
            Answer::Knn(g) => graph_pairs(g),
            Answer::Range(r) => range_pairs(r),
        }
    }

    /// The exact f64 distance of every entry, in result order: query row q against base item i.
    pub fn exact(&self, base: &Dataset, queries: &Dataset, metric: &Metric) -> Vec<f64> {
        match self {
            Answer::Knn(r) => knn_exact(r, base, queries, metric),
            Answer::Range(r) => range_exact(r, base, queries, metric),
        }
    }
}

/// Rows of `k + 1` entries, the item itself first at distance 0, from a graph of `k` others.
pub fn include_self(g: KnnResult) -> KnnResult {
    let (indices, distances) = with_self(0, g.n_queries, g.k, &g.indices, &g.distances);
    KnnResult {
        n_queries: g.n_queries,
        k: g.k + 1,
        indices,
        distances,
        stats: g.stats,
    }
}

/// [`include_self`] on bare rows of `k` entries with distances of any type (zero, `D`'s
/// default, for the item itself): the Python package's exact f64 distances take it. Row q is
/// item `first + q` (a block of a larger set starts past 0).
pub fn with_self<D: Copy + Default>(
    first: usize,
    n: usize,
    k: usize,
    indices: &[u32],
    distances: &[D],
) -> (Vec<u32>, Vec<D>) {
    let mut ids = Vec::with_capacity(n * (k + 1));
    let mut ds = Vec::with_capacity(n * (k + 1));
    for q in 0..n {
        ids.push((first + q) as u32);
        ds.push(D::default());
        ids.extend_from_slice(&indices[q * k..(q + 1) * k]);
        ds.extend_from_slice(&distances[q * k..(q + 1) * k]);
    }
    (ids, ds)
}

/// [`include_self`] for rows of their own lengths (a graph with every tie at the k-th
/// distance, [`crate::ties`]): the item itself first in each row, at distance 0.
pub fn include_self_rows(g: RangeResult) -> RangeResult {
    let (offsets, indices, distances) = with_self_rows(&g.offsets, &g.indices, &g.distances);
    RangeResult {
        offsets,
        indices,
        distances,
        stats: g.stats,
    }
}

/// [`include_self_rows`] on bare CSR rows (`offsets`, `indices`) with distances of any type
/// (zero, `D`'s default, for the item itself), as [`with_self`] for rows of `k`.
pub fn with_self_rows<D: Copy + Default>(
    offsets: &[usize],
    indices: &[u32],
    distances: &[D],
) -> (Vec<usize>, Vec<u32>, Vec<D>) {
    let n = offsets.len().saturating_sub(1);
    let mut out = (
        Vec::with_capacity(n + 1),
        Vec::with_capacity(indices.len() + n),
        Vec::with_capacity(distances.len() + n),
    );
    out.0.push(0);
    for q in 0..n {
        let row = offsets[q]..offsets[q + 1];
        out.1.push(q as u32);
        out.2.push(D::default());
        out.1.extend_from_slice(&indices[row.clone()]);
        out.2.extend_from_slice(&distances[row]);
        out.0.push(out.1.len());
    }
    out
}

/// The unordered pairs of a graph (each row's `k` edges), once each: see the module doc.
pub fn graph_pairs(g: KnnResult) -> RangeResult {
    let k = g.k;
    let entries = (0..g.n_queries)
        .flat_map(|q| (q * k..(q + 1) * k).map(move |e| (q, e)))
        .map(|(q, e)| (q, g.indices[e], g.distances[e]));
    pairs_of(g.n_queries, entries, g.stats.clone())
}

/// The unordered pairs of a range self-join, once each, without the item itself.
pub fn range_pairs(r: RangeResult) -> RangeResult {
    let n = r.n_queries();
    let entries = (0..n)
        .flat_map(|q| (r.offsets[q]..r.offsets[q + 1]).map(move |e| (q, e)))
        .map(|(q, e)| (q, r.indices[e], r.distances[e]));
    pairs_of(n, entries, r.stats.clone())
}

/// Each unordered pair {i, j}, i != j, of `entries` (row, item, distance) once: in row
/// min(i, j), sorted by distance then index.
fn pairs_of(
    n: usize,
    entries: impl Iterator<Item = (usize, u32, f32)>,
    stats: Stats,
) -> RangeResult {
    let rows = pair_rows(0..n, entries.map(|(q, j, d)| (q, j, d, ())));
    let rows = rows
        .into_iter()
        .map(|row| row.into_iter().map(|(d, j, ())| (d, j)).collect())
        .collect();
    RangeResult {
        stats,
        ..RangeResult::from_rows_by(rows, f64::from)
    }
}

/// The pair rows `rows` of a self-join from its `entries` (row, item, distance, payload),
/// each carrying what the caller keeps beside it (voisin.dask: the exact key): row a of the
/// answer (`a - rows.start` here) holds each j > a that some entry pairs it with, once, sorted
/// by distance then index; entries whose pair belongs to a row outside `rows` are left out.
/// Of a pair found from both ends the first entry is kept: give the entries in row order, as
/// one process does, and a block of rows gets the rows of the whole answer.
pub fn pair_rows<P: Copy>(
    rows: Range<usize>,
    entries: impl Iterator<Item = (usize, u32, f32, P)>,
) -> Vec<Vec<(f32, u32, P)>> {
    let mut by_row: Vec<Vec<(f32, u32, P)>> = vec![Vec::new(); rows.len()];
    for (q, j, d, p) in entries {
        let (a, b) = if (q as u64) < u64::from(j) {
            (q, j)
        } else {
            (j as usize, q as u32)
        };
        if a as u64 != u64::from(b) && rows.contains(&a) {
            by_row[a - rows.start].push((d, b, p));
        }
    }
    for row in &mut by_row {
        // A pair found from both ends appears twice with the same exact distance.
        row.sort_by_key(|&(_, j, _)| j);
        row.dedup_by_key(|&mut (_, j, _)| j);
        row.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    }
    by_row
}

/// The exact f64 distance of every entry of a k-NN result, in result order: query row q
/// against base item `indices[q * k + j]`.
pub fn knn_exact(r: &KnnResult, base: &Dataset, queries: &Dataset, metric: &Metric) -> Vec<f64> {
    let k = r.k.max(1);
    exact_entries(&r.indices, |e| e / k, base, queries, metric)
}

/// The exact f64 distance of every entry of a range result, in result order.
pub fn range_exact(
    r: &RangeResult,
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
) -> Vec<f64> {
    // The query row of each entry, from the offsets (empty rows own no entry).
    let mut rows = Vec::with_capacity(r.indices.len());
    for q in 0..r.n_queries() {
        rows.resize(r.offsets[q + 1], q);
    }
    exact_entries(&r.indices, |e| rows[e], base, queries, metric)
}

/// `metric`'s exact distance between query row `row(e)` and base item `indices[e]`, for every
/// entry `e`, on rayon's threads (the keys of the stored values: f64 storage is read as f64).
fn exact_entries(
    indices: &[u32],
    row: impl Fn(usize) -> usize + Sync,
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
) -> Vec<f64> {
    (0..indices.len())
        .into_par_iter()
        .with_min_len(256)
        .map(|e| {
            let key = item_key(metric, base, indices[e] as usize, queries, row(e));
            metric.key_to_distance(key)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VectorSet;

    #[test]
    fn self_goes_first() {
        let g = KnnResult {
            n_queries: 2,
            k: 1,
            indices: vec![1, 0],
            distances: vec![0.5, 0.5],
            ..Default::default()
        };
        let s = include_self(g);
        assert_eq!(
            (s.k, s.indices, s.distances),
            (2, vec![0, 1, 1, 0], vec![0.0, 0.5, 0.0, 0.5])
        );
    }

    #[test]
    fn self_goes_first_in_rows_of_their_own_length() {
        let g = RangeResult {
            offsets: vec![0, 2, 3],
            indices: vec![1, 2, 0],
            distances: vec![0.5, 0.5, 0.5],
            ..Default::default()
        };
        let s = include_self_rows(g);
        assert_eq!(
            (s.offsets, s.indices, s.distances),
            (
                vec![0, 3, 5],
                vec![0, 1, 2, 1, 0],
                vec![0.0, 0.5, 0.5, 0.0, 0.5]
            )
        );
    }

    #[test]
    fn each_pair_once() {
        let r = RangeResult {
            offsets: vec![0, 3, 6, 7],
            indices: vec![0, 2, 1, 1, 0, 2, 2],
            distances: vec![0.0, 1.0, 2.0, 0.0, 2.0, 3.0, 0.0],
            ..Default::default()
        };
        let p = range_pairs(r);
        assert_eq!(p.offsets, vec![0, 2, 3, 3]);
        assert_eq!(p.indices, vec![2, 1, 2]);
        assert_eq!(p.distances, vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn graph_edges_become_pairs() {
        // 0 -> 1, 1 -> 0 (the same pair), 2 -> 1
        let g = KnnResult {
            n_queries: 3,
            k: 1,
            indices: vec![1, 0, 1],
            distances: vec![1.0, 1.0, 2.0],
            ..Default::default()
        };
        let p = graph_pairs(g);
        assert_eq!(p.offsets, vec![0, 1, 2, 2]);
        assert_eq!(p.indices, vec![1, 2]);
        assert_eq!(p.distances, vec![1.0, 2.0]);
    }

    #[test]
    fn self_of_a_block_is_its_item_in_the_set() {
        let (ids, ds) = with_self(10, 2, 1, &[3, 4], &[0.5f64, 0.25]);
        assert_eq!((ids, ds), (vec![10, 3, 11, 4], vec![0.0, 0.5, 0.0, 0.25]));
    }

    #[test]
    fn blocks_of_pair_rows_are_the_rows_of_the_whole() {
        // A graph of 5 items, k = 2, with one-sided edges and mirrored ones.
        let (n, k) = (5, 2);
        let indices = [1u32, 4, 0, 2, 1, 4, 2, 0, 3, 2];
        let distances = [1.0f32, 3.0, 1.0, 2.0, 2.0, 2.5, 4.0, 4.5, 2.0, 2.5];
        let entries = || (0..n * k).map(move |e| (e / k, indices[e], distances[e], e));
        let whole = pair_rows(0..n, entries());
        let mut blocks = pair_rows(0..2, entries());
        blocks.extend(pair_rows(2..5, entries()));
        assert_eq!(blocks, whole);
        // Row 0: 1 (both ends: the first entry, row 0's, kept), 4 (row 0's), 3 (row 3's).
        let row0: Vec<_> = whole[0].iter().map(|&(d, j, e)| (d, j, e)).collect();
        assert_eq!(row0, vec![(1.0, 1, 0), (3.0, 4, 1), (4.5, 3, 7)]);
        let g = KnnResult {
            n_queries: n,
            k,
            indices: indices.to_vec(),
            distances: distances.to_vec(),
            ..Default::default()
        };
        let p = graph_pairs(g);
        let flat: Vec<u32> = whole.iter().flatten().map(|&(_, j, _)| j).collect();
        assert_eq!(p.indices, flat);
    }

    #[test]
    fn exact_distances_follow_the_entries() {
        // Values f32 cannot hold: the exact distances are not their f32 roundings.
        let x = [0.0, 0.1, 0.3, 1e8 + 1.0];
        let base: Dataset = VectorSet::new(4, 1, crate::data::VectorData::compact(x.to_vec()))
            .unwrap()
            .into();
        let r = RangeResult {
            offsets: vec![0, 2, 2, 3, 3],
            indices: vec![1, 2, 0],
            distances: vec![0.1, 0.3, 0.3],
            ..Default::default()
        };
        let d = range_exact(&r, &base, &base, &Metric::Cityblock);
        assert_eq!(d, vec![0.1, 0.3, 0.3]);
        let g = KnnResult {
            n_queries: 4,
            k: 1,
            indices: vec![1, 0, 1, 2],
            ..Default::default()
        };
        let d = knn_exact(&g, &base, &base, &Metric::Cityblock);
        assert_eq!(d, vec![0.1, 0.1, 0.3 - 0.1, 1e8 + 1.0 - 0.3]);
    }
}
