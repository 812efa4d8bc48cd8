//! Plain f64 brute force for every metric: the yardstick that tests compare every engine with.
//!
//! Deliberately simple: every pair, exact keys (at the problem's [`KeyScale`], so values of any
//! magnitude), a full sort per query. Slow (O(n·m·d)) and meant for test sizes; nothing here is
//! tuned and no engine calls it. Its keys are f64 computations: tests hold it in turn to an
//! exact big-integer reference (`crates/voisin/tests/support/wide.rs`).

use rayon::prelude::*;

use crate::data::Dataset;
use crate::engine::{check_k, check_metric, check_pair, KnnResult, RangeResult};
use crate::error::Result;
use crate::metric::scale::KeyScale;
use crate::metric::Metric;

fn sorted_row(
    (metric, scale): (&Metric, KeyScale),
    base: &Dataset,
    queries: &Dataset,
    j: usize,
    skip: Option<usize>,
) -> Vec<(f64, u32)> {
    let mut row: Vec<(f64, u32)> = (0..base.len())
        .filter(|&i| Some(i) != skip)
        .map(|i| (scale.item_key(metric, base, i, queries, j), i as u32))
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
    let scale = KeyScale::of_sets(metric, base, queries);
    let rows: Vec<Vec<(f64, u32)>> = (0..queries.len())
        .into_par_iter()
        .map(|j| {
            let mut r = sorted_row((metric, scale), base, queries, j, self_join.then_some(j));
            r.truncate(k);
            r
        })
        .collect();
    KnnResult::from_rows_by(rows, k, |key| scale.distance(metric, key))
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

/// Rows cut after the k-th entry's key: every entry with a key at most the k-th's.
fn tied_rows(
    metric: &Metric,
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    self_join: bool,
) -> RangeResult {
    let scale = KeyScale::of_sets(metric, base, queries);
    let rows: Vec<Vec<(f64, u32)>> = (0..queries.len())
        .into_par_iter()
        .map(|j| {
            let row = sorted_row((metric, scale), base, queries, j, self_join.then_some(j));
            match k.min(row.len()).checked_sub(1).map(|last| row[last].0) {
                Some(kth) => row.into_iter().filter(|e| e.0 <= kth).collect(),
                None => Vec::new(),
            }
        })
        .collect();
    RangeResult::from_rows_by(rows, |key| scale.distance(metric, key))
}

/// k nearest base items of each query and every further item at the k-th key
/// ([`crate::ties::knn`]).
pub fn knn_ties(
    base: &Dataset,
    queries: &Dataset,
    k: usize,
    metric: &Metric,
) -> Result<RangeResult> {
    check_pair(base, queries, metric)?;
    check_k(k)?;
    Ok(tied_rows(metric, base, queries, k, false))
}

/// k nearest other items of each item and every further one at the k-th key
/// ([`crate::ties::graph`]).
pub fn graph_ties(data: &Dataset, k: usize, metric: &Metric) -> Result<RangeResult> {
    check_metric(data, metric)?;
    check_k(k)?;
    Ok(tied_rows(metric, data, data, k, true))
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
    let scale = KeyScale::of_sets(metric, base, queries);
    let rows: Vec<Vec<(f64, u32)>> = (0..queries.len())
        .into_par_iter()
        .map(|j| {
            sorted_row((metric, scale), base, queries, j, None)
                .into_iter()
                .filter(|&(key, _)| metric.within(scale.distance(metric, key), radius))
                .collect()
        })
        .collect();
    Ok(RangeResult::from_rows_by(rows, |key| {
        scale.distance(metric, key)
    }))
}

/// Checks an engine's k-NN result against the reference's.
///
/// Distances must agree position by position within `rel_tol` (relative, with an absolute
/// floor of `rel_tol` for distances near zero); indices must agree wherever the reference's
/// distance at that position is separated from its neighbours' by more than the tolerance
/// (elsewhere the order among near-ties is a matter of rounding), and no row may repeat an
/// index. With `rel_tol == 0` everything must be identical.
pub fn compare_knn(
    expected: &KnnResult,
    got: &KnnResult,
    rel_tol: f64,
) -> std::result::Result<(), String> {
    if (expected.n_queries, expected.k) != (got.n_queries, got.k) {
        return Err(format!(
            "shape: expected {} x {}, got {} x {}",
            expected.n_queries, expected.k, got.n_queries, got.k
        ));
    }
    for q in 0..expected.n_queries {
        let (ei, ed) = expected.row(q);
        let (gi, gd) = got.row(q);
        compare_row(q, ei, ed, gi, gd, rel_tol)?;
    }
    Ok(())
}

/// Checks an engine's range result against the reference's, as [`compare_knn`] does per row;
/// rows must have the same length (pairs at the radius within tolerance may differ: reported
/// with their distances).
pub fn compare_range(
    expected: &RangeResult,
    got: &RangeResult,
    rel_tol: f64,
) -> std::result::Result<(), String> {
    if expected.n_queries() != got.n_queries() {
        return Err(format!(
            "queries: expected {}, got {}",
            expected.n_queries(),
            got.n_queries()
        ));
    }
    for q in 0..expected.n_queries() {
        let (ei, ed) = expected.row(q);
        let (gi, gd) = got.row(q);
        if ei.len() != gi.len() {
            return Err(format!(
                "query {q}: expected {} results, got {} (expected last {:?}, got last {:?})",
                ei.len(),
                gi.len(),
                ed.last(),
                gd.last()
            ));
        }
        compare_row(q, ei, ed, gi, gd, rel_tol)?;
    }
    Ok(())
}

fn close(a: f32, b: f32, rel_tol: f64) -> bool {
    let (a, b) = (a as f64, b as f64);
    a == b || (a - b).abs() <= rel_tol * a.abs().max(b.abs()).max(1.0)
}

fn compare_row(
    q: usize,
    ei: &[u32],
    ed: &[f32],
    gi: &[u32],
    gd: &[f32],
    rel_tol: f64,
) -> std::result::Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for p in 0..ei.len() {
        if !close(ed[p], gd[p], rel_tol) {
            return Err(format!(
                "query {q}, rank {p}: distance expected {} (item {}), got {} (item {})",
                ed[p], ei[p], gd[p], gi[p]
            ));
        }
        if !seen.insert(gi[p]) {
            return Err(format!("query {q}: item {} returned twice", gi[p]));
        }
        let isolated = (p == 0 || !close(ed[p - 1], ed[p], rel_tol))
            && (p + 1 == ei.len() || !close(ed[p + 1], ed[p], rel_tol));
        let must_match = rel_tol == 0.0 || isolated;
        if must_match && ei[p] != gi[p] {
            return Err(format!(
                "query {q}, rank {p}: expected item {} at distance {}, got item {} at {}",
                ei[p], ed[p], gi[p], gd[p]
            ));
        }
    }
    Ok(())
}
