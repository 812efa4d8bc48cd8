//! What a result becomes before it is written: the item itself put first in each graph row
//! (`--include-self`, rows of k or, with `--ties all`, of their own lengths), a self-join reduced to each unordered pair once (`--pairs`), and the
//! distances recomputed as exact f64 values (`--distances f64`).
//!
//! Conventions. `--include-self -k K`: each row holds K entries, the item itself first at
//! distance 0, then its K - 1 nearest other items, as UMAP's `precomputed_knn` (row i starts
//! with i) and scikit-learn's `KNeighborsTransformer(n_neighbors=K - 1, mode="distance")`
//! (whose rows hold n_neighbors + 1 entries, the sample itself included) expect. `--pairs`:
//! row i holds the j > i that it is paired with, sorted by distance then index; no (i, i), no
//! (j, i) beside (i, j). For a graph a pair is an edge in either direction.

use voisin::metric::exact::item_key;
use voisin::{Dataset, KnnResult, Metric, RangeResult};

use crate::output::Answer;

/// Rows of `k` entries, the item itself first at distance 0, from a graph of `k - 1` others.
pub fn include_self(g: KnnResult) -> KnnResult {
    let k = g.k + 1;
    let mut indices = Vec::with_capacity(g.n_queries * k);
    let mut distances = Vec::with_capacity(g.n_queries * k);
    for q in 0..g.n_queries {
        indices.push(q as u32);
        distances.push(0.0);
        indices.extend_from_slice(&g.indices[q * g.k..(q + 1) * g.k]);
        distances.extend_from_slice(&g.distances[q * g.k..(q + 1) * g.k]);
    }
    KnnResult {
        n_queries: g.n_queries,
        k,
        indices,
        distances,
        stats: g.stats,
    }
}

/// [`include_self`] for rows of their own lengths (a graph with `--ties all`): the item itself
/// first at distance 0, then its row.
pub fn include_self_rows(g: RangeResult) -> RangeResult {
    let n = g.n_queries();
    let mut out = RangeResult {
        offsets: Vec::with_capacity(n + 1),
        indices: Vec::with_capacity(g.indices.len() + n),
        distances: Vec::with_capacity(g.distances.len() + n),
        stats: g.stats.clone(),
    };
    out.offsets.push(0);
    for q in 0..n {
        let (ids, ds) = g.row(q);
        out.indices.push(q as u32);
        out.distances.push(0.0);
        out.indices.extend_from_slice(ids);
        out.distances.extend_from_slice(ds);
        out.offsets.push(out.indices.len());
    }
    out
}

/// Each unordered pair {i, j}, i != j, once: in row min(i, j), sorted by distance then index.
pub fn pairs(answer: Answer) -> RangeResult {
    let (n, rows, stats): (usize, Vec<(usize, u32, f32)>, _) = match answer {
        Answer::Knn(r) => {
            let k = r.k;
            let rows = (0..r.n_queries)
                .flat_map(|q| (q * k..(q + 1) * k).map(move |e| (q, e)))
                .map(|(q, e)| (q, r.indices[e], r.distances[e]))
                .collect();
            (r.n_queries, rows, r.stats)
        }
        Answer::Range(r) => {
            let n = r.offsets.len() - 1;
            let rows = (0..n)
                .flat_map(|q| (r.offsets[q]..r.offsets[q + 1]).map(move |e| (q, e)))
                .map(|(q, e)| (q, r.indices[e], r.distances[e]))
                .collect();
            (n, rows, r.stats)
        }
    };
    let mut by_row: Vec<Vec<(f32, u32)>> = vec![Vec::new(); n];
    for (q, j, d) in rows {
        let (a, b) = if (q as u64) < u64::from(j) {
            (q, j)
        } else {
            (j as usize, q as u32)
        };
        if a as u64 != u64::from(b) {
            by_row[a].push((d, b));
        }
    }
    for row in &mut by_row {
        // A pair found from both ends appears twice with the same exact distance.
        row.sort_by_key(|&(_, j)| j);
        row.dedup_by_key(|&mut (_, j)| j);
        row.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    }
    RangeResult {
        stats,
        ..RangeResult::from_rows_by(by_row, f64::from)
    }
}

/// The exact f64 distance of every entry, in result order: query row q against base item i.
pub fn exact_distances(
    answer: &Answer,
    base: &Dataset,
    queries: &Dataset,
    metric: &Metric,
) -> Vec<f64> {
    let entry =
        |q: usize, i: u32| metric.key_to_distance(item_key(metric, base, i as usize, queries, q));
    match answer {
        Answer::Knn(r) => (0..r.indices.len())
            .map(|e| entry(e / r.k.max(1), r.indices[e]))
            .collect(),
        Answer::Range(r) => (0..r.offsets.len() - 1)
            .flat_map(|q| (r.offsets[q]..r.offsets[q + 1]).map(move |e| (q, e)))
            .map(|(q, e)| entry(q, r.indices[e]))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let p = pairs(Answer::Range(r));
        assert_eq!(p.offsets, vec![0, 2, 3, 3]);
        assert_eq!(p.indices, vec![2, 1, 2]);
        assert_eq!(p.distances, vec![1.0, 2.0, 3.0]);
    }
}
