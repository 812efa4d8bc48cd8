//! The merge step at a row's owner: exact keys for the candidates that ranks sent, the k best
//! by (key, index), and the wire form of finished rows.
//!
//! Candidates arrive as indices only; their f64 keys are recomputed here with the reference's
//! key function (at the problem's key scale, as every engine's) rather than shipped, which keeps messages small and makes the final order the
//! reference's order exactly (f32 distances alone cannot separate keys that round together).

use voisin::metric::scale::{f32_value, KeyScale};
use voisin::{Dataset, KnnResult, Metric};

/// The `k` best of `candidates` (distinct base indices) for query `q`, sorted by (key, index),
/// keys at the problem's `scale` (`KeyScale::of_sets` of base and queries).
pub fn best(
    (metric, scale): (&Metric, KeyScale),
    base: &Dataset,
    queries: &Dataset,
    q: usize,
    candidates: &[u32],
    k: usize,
) -> Vec<(f64, u32)> {
    let mut keyed: Vec<(f64, u32)> = candidates
        .iter()
        .map(|&i| (scale.item_key(metric, base, i as usize, queries, q), i))
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    keyed.truncate(k);
    keyed
}

/// Appends a finished row as `[q, k indices, k distance bit patterns]`, keys at `scale`. The
/// row must hold exactly `k` entries: every merge sees at least k candidates by construction.
pub fn push_row(
    out: &mut Vec<u32>,
    (metric, scale): (&Metric, KeyScale),
    q: usize,
    row: &[(f64, u32)],
    k: usize,
) {
    assert_eq!(row.len(), k, "row {q} has {} of {k} neighbours", row.len());
    out.push(q as u32);
    out.extend(row.iter().map(|&(_, i)| i));
    out.extend(
        row.iter()
            .map(|&(key, _)| f32_value(scale.distance(metric, key)).to_bits()),
    );
}

/// Builds the result from finished rows (in any order) covering queries `0..n_queries`.
pub fn assemble(rows: &[u32], n_queries: usize, k: usize) -> KnnResult {
    let mut res = KnnResult {
        n_queries,
        k,
        indices: vec![0; n_queries * k],
        distances: vec![0.0; n_queries * k],
        ..Default::default()
    };
    let mut seen = vec![false; n_queries];
    for rec in rows.chunks_exact(1 + 2 * k) {
        let q = rec[0] as usize;
        assert!(!seen[q], "row {q} arrived twice");
        seen[q] = true;
        res.indices[q * k..(q + 1) * k].copy_from_slice(&rec[1..1 + k]);
        for (d, &bits) in res.distances[q * k..(q + 1) * k]
            .iter_mut()
            .zip(&rec[1 + k..])
        {
            *d = f32::from_bits(bits);
        }
    }
    assert_eq!(rows.len(), n_queries * (1 + 2 * k), "rows missing");
    res
}
