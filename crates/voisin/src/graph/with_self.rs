//! Graph rows that include the item itself (`--include-self`, Python's
//! `knn_graph(include_self=True)`): the one place that decides the self entry's value and place,
//! for every front end and for f32 and f64 outputs alike.
//!
//! Convention (scikit-learn's `KNeighborsTransformer` and UMAP's `precomputed_knn`): a row of k
//! entries holds the item and its k − 1 nearest other items. The item carries the metric's own
//! distance to itself ([`self_key`]: 0 for every metric but inner_product, whose value is the
//! item's dot product with itself, a user metric's own value, and the defined distance 1 of a
//! zero vector under cosine or a constant one under correlation) and sits where the order puts
//! it, first among entries at the same key. So under every metric whose self-distance is the
//! least possible the row starts with the item, as UMAP's rows do; under inner_product the
//! item sits among its neighbours by its dot product.

use crate::data::Dataset;
use crate::engine::KnnResult;
use crate::metric::exact::item_key;
use crate::metric::scale::{f32_value, KeyScale};
use crate::metric::Metric;

/// The key of item `i` of `data` with itself, at `scale`.
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

/// Rows of `g.k + 1` entries: each item of `data` with its `g.k` nearest other items (`g`, the
/// graph of `data` under `metric`), the item placed by its [`self_key`] (module doc).
pub fn include_self(g: KnnResult, data: &Dataset, metric: &Metric) -> KnnResult {
    let scale = KeyScale::of_sets(metric, data, data);
    let k = g.k + 1;
    let mut indices = Vec::with_capacity(g.n_queries * k);
    let mut distances = Vec::with_capacity(g.n_queries * k);
    for q in 0..g.n_queries {
        let (ids, ds) = g.row(q);
        let own = self_key(metric, data, q, scale);
        // Entries strictly closer than the item itself come before it (rows are sorted by key).
        let at = match self_first(metric) {
            true => 0,
            false => {
                ids.partition_point(|&j| scale.item_key(metric, data, j as usize, data, q) < own)
            }
        };
        indices.extend_from_slice(&ids[..at]);
        distances.extend_from_slice(&ds[..at]);
        indices.push(q as u32);
        distances.push(f32_value(scale.distance(metric, own)));
        indices.extend_from_slice(&ids[at..]);
        distances.extend_from_slice(&ds[at..]);
    }
    KnnResult {
        n_queries: g.n_queries,
        k,
        indices,
        distances,
        stats: g.stats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::CpuEngine;
    use crate::{Engine, VectorSet};

    #[test]
    fn the_item_sits_by_its_own_distance() {
        let v = vec![0.0f32, 0.0, 1.0, 0.0, 3.0, 1.0, 0.5, 0.5, 2.0, 2.0];
        let data: Dataset = VectorSet::from_f32(5, 2, v).unwrap().into();
        let e = CpuEngine::default();
        let m = Metric::InnerProduct;
        let g = include_self(e.graph(&data, 2, &m).unwrap(), &data, &m);
        assert_eq!(g.row(1), (&[2, 4, 1][..], &[3.0, 2.0, 1.0][..]));
        let m = Metric::Cosine;
        let g = include_self(e.graph(&data, 2, &m).unwrap(), &data, &m);
        assert_eq!(g.row(0).0[0], 0);
        assert_eq!(g.row(0).1, &[1.0, 1.0, 1.0]);
        assert_eq!((g.row(3).0, g.row(3).1[0]), (&[3, 4, 2][..], 0.0));
    }
}
