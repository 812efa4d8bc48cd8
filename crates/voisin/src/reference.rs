//! Plain f64 brute force for every metric: the yardstick that tests compare every engine with.
//!
//! Deliberately simple: every pair, exact keys, a full sort per query. Slow (O(n·m·d)) and meant
//! for test sizes; nothing here is tuned and no engine calls it.

use rayon::prelude::*;

use crate::data::Dataset;
use crate::engine::{check_k, check_metric, check_pair, KnnResult, RangeResult, Stats};
use crate::error::Result;
use crate::metric::{exact, Metric};

/// Exact key between base item `i` and query item `j` (see [`crate::metric`] for keys).
pub fn key(metric: &Metric, base: &Dataset, i: usize, queries: &Dataset, j: usize) -> f64 {
    match (base, queries) {
        (Dataset::Vectors(b), Dataset::Vectors(q)) => {
            let (x, y) = (b.row_f32(i), q.row_f32(j));
            match metric {
                Metric::Custom(c) => c.vectors.as_ref().expect("checked").distance(&x, &y),
                m => exact::vector_key(m, &x, &y),
            }
        }
        (Dataset::Strings(b), Dataset::Strings(q)) => match metric {
            Metric::Custom(c) => c
                .strings
                .as_ref()
                .expect("checked")
                .distance(b.get(i), q.get(j)),
            _ => exact::string_key(b.get(i), q.get(j)),
        },
        _ => unreachable!("checked by check_pair"),
    }
}

fn sorted_row(
    metric: &Metric,
    base: &Dataset,
    queries: &Dataset,
    j: usize,
    skip: Option<usize>,
) -> Vec<(f64, u32)> {
    let mut row: Vec<(f64, u32)> = (0..base.len())
        .filter(|&i| Some(i) != skip)
        .map(|i| (key(metric, base, i, queries, j), i as u32))
        .collect();
    row.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    row
}

fn knn_rows(
    metric: &Metric,
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    self_join: bool,
) -> KnnResult {
    let avail = if self_join {
        base.len().saturating_sub(1)
    } else {
        base.len()
    };
    let k = k.min(avail);
    let rows: Vec<Vec<(f64, u32)>> = (0..queries.len())
        .into_par_iter()
        .map(|j| {
            let mut r = sorted_row(metric, base, queries, j, self_join.then_some(j));
            r.truncate(k);
            r
        })
        .collect();
    let mut out = KnnResult {
        n_queries: queries.len(),
        k,
        stats: Stats::default(),
        ..Default::default()
    };
    for r in rows {
        for (key, i) in r {
            out.indices.push(i);
            out.distances.push(metric.key_to_distance(key) as f32);
        }
    }
    out
}

/// k nearest base items of each query.
pub fn knn(base: &Dataset, queries: &Dataset, k: usize, metric: &Metric) -> Result<KnnResult> {
    check_pair(base, queries, metric)?;
    check_k(k)?;
    Ok(knn_rows(metric, base, queries, k, false))
}

/// k nearest other items of each item.
pub fn graph(data: &Dataset, k: usize, metric: &Metric) -> Result<KnnResult> {
    check_metric(data, metric)?;
    check_k(k)?;
    Ok(knn_rows(metric, data, data, k, true))
}

/// Every base item within `radius` of each query.
pub fn range(
    base: &Dataset,
    queries: &Dataset,
    radius: f64,
    metric: &Metric,
) -> Result<RangeResult> {
    check_pair(base, queries, metric)?;
    metric.check_radius(radius)?;
    let rows: Vec<Vec<(f64, u32)>> = (0..queries.len())
        .into_par_iter()
        .map(|j| {
            sorted_row(metric, base, queries, j, None)
                .into_iter()
                .filter(|&(key, _)| metric.within(metric.key_to_distance(key), radius))
                .collect()
        })
        .collect();
    let mut out = RangeResult {
        offsets: vec![0],
        ..Default::default()
    };
    for r in rows {
        for (key, i) in r {
            out.indices.push(i);
            out.distances.push(metric.key_to_distance(key) as f32);
        }
        out.offsets.push(out.indices.len());
    }
    Ok(out)
}
