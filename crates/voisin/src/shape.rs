//! What a result becomes before it is handed out, the same for the CLI and the Python
//! bindings: the item itself added to each graph row (`--include-self`,
//! `include_self=True`; rows of k, or of their own lengths with `--ties all`), a self-join
//! reduced to each unordered pair once (`--pairs`,
//! `pairs=True`), and the exact f64 distance of every entry (`--distances f64`,
//! `distances="f64"`).
//!
//! Conventions. Include-self with `K` entries per row: the item itself and its `K - 1` nearest
//! other items, as UMAP's `precomputed_knn` and scikit-learn's
//! `KNeighborsTransformer(n_neighbors=K - 1, mode="distance")` (whose rows hold n_neighbors + 1
//! entries, the sample itself included) expect. The item carries the metric's own distance to
//! itself ([`self_key`]: 0 for every metric but these: 1 for a zero vector under cosine and a
//! constant one under correlation, their defined distances; the dot product with itself under
//! inner_product; a user metric's own value), the same in f32 and f64 outputs, and sits where
//! that key puts it, first among equal keys: so under every metric whose self distance is the
//! least there is, the row starts with the item (UMAP's rows do); under inner_product it sits
//! among its neighbours by its dot product. Exact f64 distances are at the problem's key
//! scale and written by [`f64_value`] (beyond f64's range its largest value). Pairs: row i holds the j > i
//! that it is paired with, sorted by distance then index; no (i, i), no (j, i) beside (i, j).
//! For a graph a pair is an edge in either direction.

use std::ops::Range;

use rayon::prelude::*;

use crate::metric::exact::item_key;
use crate::metric::scale::{f32_value, f64_value, KeyScale};
use crate::{Dataset, KnnResult, Metric, RangeResult, Stats};

/// What an engine answered, before it is shaped: k-NN rows (k-NN search, graphs) or ragged
/// rows (range search, pairs).
pub enum Answer {
    /// k-NN rows: a search or a graph, `k` entries a row.
    Knn(KnnResult),
    /// Rows of their own lengths in CSR form: a range search or a `--ties all` result.
    Range(RangeResult),
}

impl Answer {
    /// What the engine measured while answering.
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

    /// Whether the answer holds no (query, neighbour) pair.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each row of the graph of `data` under `metric` with the item itself by its own
    /// distance (module doc): rows of k + 1 from rows of k ([`include_self`]), or rows of their
    /// own lengths (`--ties all`, [`include_self_rows`]).
    pub fn include_self(self, data: &Dataset, metric: &Metric) -> Answer {
        match self {
            Answer::Knn(g) => Answer::Knn(include_self(g, data, metric)),
            Answer::Range(r) => Answer::Range(include_self_rows(r, data, metric)),
        }
    }

    /// Each unordered pair {i, j}, i != j, of a self-join once (see the module doc).
    pub fn pairs(self) -> RangeResult {
        match self {
            Answer::Knn(g) => graph_pairs(g),
            Answer::Range(r) => range_pairs(r),
        }
    }

    /// The exact f64 distance of every entry, in result order: query row q against base item
    /// i; with `with_self` (an include-self graph) the item's entry in its own row carries its
    /// self distance ([`self_key`]), as its f32 value does.
    pub fn exact(
        &self,
        (base, queries): (&Dataset, &Dataset),
        metric: &Metric,
        with_self: bool,
    ) -> Vec<f64> {
        match self {
            Answer::Knn(r) => knn_exact(r, (base, queries), metric, with_self),
            Answer::Range(r) => range_exact(r, (base, queries), metric, with_self),
        }
    }
}

/// The key of item `i` of `data` with itself, at `scale` (module doc).
pub fn self_key(metric: &Metric, data: &Dataset, i: usize, scale: KeyScale) -> f64 {
    match (metric, data) {
        (Metric::InnerProduct, _) => scale.item_key(metric, data, i, data, i),
        (Metric::Custom(_), _) => item_key(metric, data, i, data, i),
        (Metric::Cosine | Metric::Correlation, Dataset::Vectors(v)) => {
            let row = v.row_f64(i);
            let zero = match metric {
                Metric::Cosine => row.iter().all(|&x| x == 0.0),
                _ => row.iter().all(|&x| x == row[0]),
            };
            if zero {
                1.0
            } else {
                0.0
            }
        }
        _ => 0.0,
    }
}

/// Whether no other item can be closer to an item than itself under `metric` (its self key is
/// the least key there is), so that the self entry always comes first.
fn self_first(metric: &Metric) -> bool {
    !matches!(metric, Metric::InnerProduct | Metric::Custom(_))
}

/// Rows of `k + 1` entries from a graph of `k` others (`g`, the graph of `data` under
/// `metric`): each item added by its own distance, where its key puts it (module doc).
pub fn include_self(g: KnnResult, data: &Dataset, metric: &Metric) -> KnnResult {
    let k = g.k;
    let (_, indices, distances) = with_own(
        (g.n_queries, |q| q * k..(q + 1) * k),
        (&g.indices, &g.distances),
        data,
        metric,
    );
    KnnResult {
        n_queries: g.n_queries,
        k: k + 1,
        indices,
        distances,
        stats: g.stats,
    }
}

/// [`include_self`] for rows of their own lengths (a graph with every tie at the k-th
/// distance, [`crate::ties`]).
pub fn include_self_rows(g: RangeResult, data: &Dataset, metric: &Metric) -> RangeResult {
    let n = g.offsets.len().saturating_sub(1);
    let o = &g.offsets;
    let (offsets, indices, distances) = with_own(
        (n, |q| o[q]..o[q + 1]),
        (&g.indices, &g.distances),
        data,
        metric,
    );
    RangeResult {
        offsets,
        indices,
        distances,
        stats: g.stats,
    }
}

/// Rows `q < n` (entries `row(q)` of `ids`, `ds`, sorted by key) of the graph of `data`, each
/// with item q inserted by its own key, first among equal keys, at its f32 distance: the new
/// row offsets, indices and distances.
fn with_own(
    (n, row): (usize, impl Fn(usize) -> Range<usize>),
    (ids, ds): (&[u32], &[f32]),
    data: &Dataset,
    metric: &Metric,
) -> (Vec<usize>, Vec<u32>, Vec<f32>) {
    let scale = KeyScale::of_sets(metric, data, data);
    let mut out = (
        Vec::with_capacity(n + 1),
        Vec::with_capacity(ids.len() + n),
        Vec::with_capacity(ds.len() + n),
    );
    out.0.push(0);
    for q in 0..n {
        let r = row(q);
        let (ids, ds) = (&ids[r.clone()], &ds[r]);
        let own = self_key(metric, data, q, scale);
        // Entries strictly closer than the item itself come before it (rows are sorted by key).
        let at = match self_first(metric) {
            true => 0,
            false => {
                ids.partition_point(|&j| scale.item_key(metric, data, j as usize, data, q) < own)
            }
        };
        out.1.extend_from_slice(&ids[..at]);
        out.2.extend_from_slice(&ds[..at]);
        out.1.push(q as u32);
        out.2.push(f32_value(scale.distance(metric, own)));
        out.1.extend_from_slice(&ids[at..]);
        out.2.extend_from_slice(&ds[at..]);
        out.0.push(out.1.len());
    }
    out
}

/// [`include_self`] on rows of exact keys (the Python package's row blocks): row q is item q of
/// `items`, numbered `first + q` in the whole set, and gains that item at its self key, first
/// among equal keys. The rows' keys are at the key scale of `items` (on ordinary data, 1).
pub fn rows_with_self(
    rows: &mut [Vec<(f64, u32)>],
    items: &Dataset,
    first: usize,
    metric: &Metric,
) {
    let scale = KeyScale::of_sets(metric, items, items);
    rows.par_iter_mut().enumerate().for_each(|(q, row)| {
        let own = self_key(metric, items, q, scale);
        let at = match self_first(metric) {
            true => 0,
            false => row.partition_point(|&(key, _)| key < own),
        };
        row.insert(at, (own, (first + q) as u32));
    });
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
/// against base item `indices[q * k + j]`; with `with_self`, an include-self graph's own entries
/// at their self distance.
pub fn knn_exact(
    r: &KnnResult,
    (base, queries): (&Dataset, &Dataset),
    metric: &Metric,
    with_self: bool,
) -> Vec<f64> {
    let k = r.k.max(1);
    let own = with_self.then_some(base);
    exact_entries(&r.indices, |e| e / k, (base, queries, own), metric)
}

/// The exact f64 distance of every entry of a range result, in result order; `with_self` as
/// for [`knn_exact`] (a graph with every tie, the item itself in each row).
pub fn range_exact(
    r: &RangeResult,
    (base, queries): (&Dataset, &Dataset),
    metric: &Metric,
    with_self: bool,
) -> Vec<f64> {
    // The query row of each entry, from the offsets (empty rows own no entry).
    let mut rows = Vec::with_capacity(r.indices.len());
    for q in 0..r.n_queries() {
        rows.resize(r.offsets[q + 1], q);
    }
    let own = with_self.then_some(base);
    exact_entries(&r.indices, |e| rows[e], (base, queries, own), metric)
}

/// `metric`'s exact distance between query row `row(e)` and base item `indices[e]`, for every
/// entry `e`, on rayon's threads (the keys of the stored values at the problem's key scale:
/// f64 storage is read as f64), written by [`f64_value`]. With `own` (the graph's data), an
/// item's entry in its own row is its self distance.
fn exact_entries(
    indices: &[u32],
    row: impl Fn(usize) -> usize + Sync,
    (base, queries, own): (&Dataset, &Dataset, Option<&Dataset>),
    metric: &Metric,
) -> Vec<f64> {
    let scale = KeyScale::of_sets(metric, base, queries);
    (0..indices.len())
        .into_par_iter()
        .with_min_len(256)
        .map(|e| {
            let (i, q) = (indices[e] as usize, row(e));
            let key = match own {
                Some(data) if i == q => self_key(metric, data, q, scale),
                _ => scale.item_key(metric, base, i, queries, q),
            };
            f64_value(scale.distance(metric, key))
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
        let data: Dataset = VectorSet::from_f32(2, 1, vec![0.0, 0.5]).unwrap().into();
        let s = include_self(g, &data, &Metric::Euclidean);
        assert_eq!(
            (s.k, s.indices, s.distances),
            (2, vec![0, 1, 1, 0], vec![0.0, 0.5, 0.0, 0.5])
        );
    }

    #[test]
    fn the_item_sits_by_its_own_distance() {
        use crate::{cpu::CpuEngine, Engine};
        let v = vec![0.0f32, 0.0, 1.0, 0.0, 3.0, 1.0, 0.5, 0.5, 2.0, 2.0];
        let data: Dataset = VectorSet::from_f32(5, 2, v).unwrap().into();
        let e = CpuEngine::default();
        let m = Metric::InnerProduct;
        let g = include_self(e.graph(&data, 2, &m).unwrap(), &data, &m);
        assert_eq!(g.row(1), (&[2, 4, 1][..], &[3.0, 2.0, 1.0][..]));
        let exact = Answer::Knn(g).exact((&data, &data), &m, true);
        assert_eq!(&exact[3..6], &[3.0, 2.0, 1.0]);
        let m = Metric::Cosine;
        let g = include_self(e.graph(&data, 2, &m).unwrap(), &data, &m);
        assert_eq!((g.row(0).0[0], g.row(0).1), (0, &[1.0, 1.0, 1.0][..]));
        assert_eq!((g.row(3).0, g.row(3).1[0]), (&[3, 4, 2][..], 0.0));
        let exact = Answer::Knn(g).exact((&data, &data), &m, true);
        assert_eq!((exact[0], exact[9]), (1.0, 0.0));
    }

    #[test]
    fn self_goes_first_in_rows_of_their_own_length() {
        let g = RangeResult {
            offsets: vec![0, 2, 3],
            indices: vec![1, 2, 0],
            distances: vec![0.5, 0.5, 0.5],
            ..Default::default()
        };
        let data: Dataset = VectorSet::from_f32(3, 1, vec![0.0, 0.5, 0.5])
            .unwrap()
            .into();
        let s = include_self_rows(g, &data, &Metric::Euclidean);
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
        let items: Dataset = VectorSet::from_f32(2, 1, vec![1.0, 2.0]).unwrap().into();
        let mut rows = vec![vec![(0.5, 3)], vec![(0.25, 4)]];
        rows_with_self(&mut rows, &items, 10, &Metric::Euclidean);
        assert_eq!(
            rows,
            vec![vec![(0.0, 10), (0.5, 3)], vec![(0.0, 11), (0.25, 4)]]
        );
        // Under inner_product the item sits by its dot product with itself (key -x·x).
        let mut rows = vec![vec![(-3.0, 3), (-0.5, 5)], vec![(-5.0, 4)]];
        rows_with_self(&mut rows, &items, 10, &Metric::InnerProduct);
        assert_eq!(rows[0], vec![(-3.0, 3), (-1.0, 10), (-0.5, 5)]);
        assert_eq!(rows[1], vec![(-5.0, 4), (-4.0, 11)]);
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
        let d = range_exact(&r, (&base, &base), &Metric::Cityblock, false);
        assert_eq!(d, vec![0.1, 0.3, 0.3]);
        let g = KnnResult {
            n_queries: 4,
            k: 1,
            indices: vec![1, 0, 1, 2],
            ..Default::default()
        };
        let d = knn_exact(&g, (&base, &base), &Metric::Cityblock, false);
        assert_eq!(d, vec![0.1, 0.1, 0.3 - 0.1, 1e8 + 1.0 - 0.3]);
    }
}
