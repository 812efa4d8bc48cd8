//! The end of every range search: candidates as CSR → [query, base] pairs → exact keys →
//! the items within the radius, sorted by (key, index) → the result. Resident, streamed and
//! sharded searches differ only in where their exact keys come from.

use std::time::Instant;

use rayon::prelude::*;
use voisin::{Metric, RangeResult, Result, Stats};

/// The result of a range search whose candidates are `offsets`/`ids` (CSR, per query): exact
/// keys from `keys` (given the [query, base] pairs in CSR order), membership decided on them.
/// The time since `started` counts as selection.
pub(crate) fn finish(
    metric: &Metric,
    radius: f64,
    offsets: &[usize],
    ids: &[u32],
    keys: impl FnOnce(&[[u32; 2]]) -> Result<Vec<f64>>,
    started: Instant,
    mut stats: Stats,
) -> Result<RangeResult> {
    let pairs = pairs(offsets, ids);
    let keys = keys(&pairs)?;
    let rows = exact_rows(metric, radius, offsets, ids, &keys);
    stats.select += started.elapsed();
    stats.exact_evals += pairs.len() as u64;
    Ok(RangeResult {
        stats,
        ..RangeResult::from_rows(rows, metric)
    })
}

/// Per-query candidate lists as CSR offsets and indices.
pub(crate) fn csr(lists: &[Vec<u32>]) -> (Vec<usize>, Vec<u32>) {
    let mut offsets = Vec::with_capacity(lists.len() + 1);
    offsets.push(0);
    for l in lists {
        offsets.push(offsets.last().copied().unwrap_or(0) + l.len());
    }
    (offsets, lists.concat())
}

/// The [query, base index] pairs of CSR candidates.
fn pairs(offsets: &[usize], ids: &[u32]) -> Vec<[u32; 2]> {
    (0..offsets.len().saturating_sub(1))
        .flat_map(|q| {
            ids[offsets[q]..offsets[q + 1]]
                .iter()
                .map(move |&i| [q as u32, i])
        })
        .collect()
}

/// Per query, the candidates whose exact key (`keys`, in CSR order) is within the radius,
/// sorted by (key, index).
fn exact_rows(
    metric: &Metric,
    radius: f64,
    offsets: &[usize],
    ids: &[u32],
    keys: &[f64],
) -> Vec<Vec<(f64, u32)>> {
    (0..offsets.len().saturating_sub(1))
        .into_par_iter()
        .map(|q| {
            let r = offsets[q]..offsets[q + 1];
            let mut row: Vec<(f64, u32)> = keys[r.clone()]
                .iter()
                .zip(&ids[r])
                .map(|(&key, &i)| (key, i))
                .filter(|&(key, _)| metric.within(metric.key_to_distance(key), radius))
                .collect();
            row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            row
        })
        .collect()
}
