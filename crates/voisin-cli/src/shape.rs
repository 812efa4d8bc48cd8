//! What a result becomes before it is written: a self-join reduced to each unordered pair once
//! (`--pairs`), and the distances recomputed as exact f64 values (`--distances f64`); the item
//! itself is added to graph rows (`--include-self`) by `voisin::graph::include_self`.
//!
//! Conventions. `--include-self -k K`: each row holds K entries, the item itself and its K - 1
//! nearest other items, as UMAP's `precomputed_knn` and scikit-learn's
//! `KNeighborsTransformer(n_neighbors=K - 1, mode="distance")` (whose rows hold n_neighbors + 1
//! entries, the sample itself included) expect; the item's value and place are the core's
//! (`voisin::graph::with_self`: its own distance, first among equal ones). `--pairs`:
//! row i holds the j > i that it is paired with, sorted by distance then index; no (i, i), no
//! (j, i) beside (i, j). For a graph a pair is an edge in either direction.

use voisin::graph::self_key;
use voisin::metric::scale::{f64_value, KeyScale};
use voisin::{Dataset, Metric, RangeResult};

use crate::output::Answer;

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

/// The exact f64 distance of every entry, in result order: query row q against base item i,
/// at the problem's key scale, written as `voisin::metric::scale::f64_value` does (beyond f64's
/// range its largest value). With `with_self` (an `--include-self` graph) the entry of an item
/// with itself carries its self distance, as its f32 value does.
pub fn exact_distances(
    answer: &Answer,
    (base, queries): (&Dataset, &Dataset),
    metric: &Metric,
    with_self: bool,
) -> Vec<f64> {
    let scale = KeyScale::of_sets(metric, base, queries);
    let entry = |q: usize, i: u32| {
        let key = match with_self && i as usize == q {
            true => self_key(metric, base, q, scale),
            false => scale.item_key(metric, base, i as usize, queries, q),
        };
        f64_value(scale.distance(metric, key))
    };
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
