//! The one prove-widen-re-rank step every k-NN search ends with, over a [`CandidateSource`].
//!
//! The device returns, per query, some `K ≥ k` smallest approximate keys. Every item left out
//! has an approximate key at least the largest one kept (the *barrier*), so when
//! `lower(barrier) > upper(k-th kept)` no left-out item can be among the k nearest, whatever the
//! tie-break; otherwise that query is redone with a wider list. Survivors are re-ranked on exact
//! f64 keys with ties broken by index, which makes the result identical to the CPU engine's.
//!
//! Searches differ only in where a wider list is recomputed and where exact keys come from:
//! a resident base (`knn::Resident`), a streamed one (`stream::Streamed`), shards on several
//! GPUs (`multi::Sharded`) and the rows of a graph (`graph::RowsOfGraph`) each implement
//! [`CandidateSource`].

use std::time::Instant;

use rayon::prelude::*;
use voisin::{Result, Stats};

use crate::numerics::plan::Plan;
use crate::runtime::probe::Phases;
use crate::search::knn::Raw;

/// Where a search's candidates come from, for the finish: its queries are numbered `0..` in the
/// order of the lists handed to [`finish`].
pub(crate) trait CandidateSource {
    /// How many items the queries are compared with (the base, or the graph's set).
    fn base_len(&self) -> usize;

    /// The prepared norms of the queries (in the finish's numbering) and the base's largest:
    /// what the error bound of each query depends on.
    fn norms(&self) -> (&[f64], f64);

    /// For the rows of a graph, the item of query 0 (query `q` is item `first + q`, whose self
    /// pair is dropped from its list); `None` for a search of other queries.
    fn self_first(&self) -> Option<usize> {
        None
    }

    /// Candidates of the listed queries again, with lists of `kp`.
    fn redo(&mut self, queries: &[usize], kp: usize) -> Result<Vec<Raw>>;

    /// Exact keys of [query, base index] pairs, in order.
    fn exact_keys(&mut self, pairs: &[[u32; 2]]) -> Result<Vec<f64>>;

    /// Times the finish's phases for the probe of the GPU that runs it.
    fn phases(&self) -> Phases;
}

/// Proves, widens and re-ranks.
///
/// `raws[q]` are the device's candidates for query `q`, from lists of `kp`; `src` recomputes
/// wider lists and gives exact keys. Returns per query its `k` nearest as (exact key, index),
/// sorted.
pub(crate) fn finish(
    plan: &Plan,
    src: &mut dyn CandidateSource,
    k: usize,
    mut kp: usize,
    mut raws: Vec<Raw>,
    stats: &mut Stats,
) -> Result<Vec<Vec<(f64, u32)>>> {
    let nq = raws.len();
    let (qnorm, base_max_norm) = src.norms();
    let abs: Vec<f64> = (0..nq)
        .map(|q| plan.abs_bound(qnorm[q], base_max_norm))
        .collect();
    let self_first = src.self_first();
    // Sort each query's candidates, drop its self pair, and see whether the bound proves them.
    let check = |q: usize, raw: &mut Raw| -> bool {
        // Only the order of approximate keys matters here (ties are settled on exact keys);
        // block-select lists arrive sorted, radix output does not.
        if !raw.cands.windows(2).all(|w| w[0].0 <= w[1].0) {
            raw.cands.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        }
        let barrier = raw.cands.last().map(|c| c.0);
        if let Some(first) = self_first {
            let s = (q + first) as u32;
            raw.cands.retain(|c| c.1 != s);
        }
        if raw.complete {
            return true;
        }
        match barrier {
            Some(b) if raw.cands.len() >= k => {
                plan.lower(b, abs[q]) > plan.upper(raw.cands[k - 1].0, abs[q])
            }
            _ => false,
        }
    };
    let mut tr = src.phases();
    let mut failing: Vec<usize> = raws
        .par_iter_mut()
        .enumerate()
        .filter_map(|(q, r)| (!check(q, r)).then_some(q))
        .collect();
    tr.note(format_args!(
        "{} of {nq} queries need a wider list",
        failing.len()
    ));
    tr.mark("finish: sort and prove");
    let n_pow = src.base_len().next_power_of_two().max(1);
    while !failing.is_empty() {
        // Widen fourfold (or to everything): each retry costs a pass over the base for those
        // queries only, and ties wide enough to need it are rare outside adversarial data.
        kp = (kp * 4).min(n_pow);
        let again = src.redo(&failing, kp)?;
        let mut still = Vec::new();
        for (q, mut raw) in failing.iter().copied().zip(again) {
            if !check(q, &mut raw) {
                still.push(q);
            }
            raws[q] = raw;
        }
        if !still.is_empty() && kp >= n_pow {
            return Err(voisin::Error::device(
                "cuda: candidate widening did not converge (internal error)",
            ));
        }
        failing = still;
    }
    let t = Instant::now();
    // Only candidates whose interval reaches the k-th upper bound can be among the k nearest.
    let keep: Vec<usize> = raws
        .par_iter()
        .enumerate()
        .map(|(q, raw)| {
            let kk = k.min(raw.cands.len());
            if kk == 0 {
                return 0;
            }
            let thr = plan.upper(raw.cands[kk - 1].0, abs[q]);
            raw.cands
                .iter()
                .take_while(|c| plan.lower(c.0, abs[q]) <= thr)
                .count()
        })
        .collect();
    let mut pairs = vec![[0u32; 2]; keep.iter().sum()];
    {
        // Disjoint per-query slices, filled in parallel.
        let mut rest = &mut pairs[..];
        let mut parts = Vec::with_capacity(nq);
        for &n in &keep {
            let (a, b) = rest.split_at_mut(n);
            parts.push(a);
            rest = b;
        }
        parts
            .into_par_iter()
            .zip(raws.par_iter())
            .enumerate()
            .for_each(|(q, (part, raw))| {
                for (p, c) in part.iter_mut().zip(&raw.cands) {
                    *p = [q as u32, c.1];
                }
            });
    }
    tr.mark("finish: widen, filter, list pairs");
    let keys = src.exact_keys(&pairs)?;
    tr.mark("finish: exact keys");
    stats.exact_evals += keys.len() as u64;
    let mut rows: Vec<&[f64]> = Vec::with_capacity(nq);
    let mut at = 0;
    for &n in &keep {
        rows.push(&keys[at..at + n]);
        at += n;
    }
    let out = rows
        .into_par_iter()
        .zip(raws.par_iter())
        .map(|(ks, raw)| {
            let mut row: Vec<(f64, u32)> =
                ks.iter().zip(&raw.cands).map(|(&k, c)| (k, c.1)).collect();
            row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            row.truncate(k);
            row
        })
        .collect();
    tr.mark("finish: final sort");
    // One list per item of a graph: freed in parallel (serially ~0.1 s at 2M items).
    raws.into_par_iter().for_each(drop);
    stats.select += t.elapsed();
    Ok(out)
}
