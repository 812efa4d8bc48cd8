//! k-NN and range search of queries against a base set: the tile walk shared by both, the
//! candidate scans, and the exact re-rank.
//!
//! Work is split into (query block, base segment) items so that both many-query and few-query
//! requests keep every thread busy; each item walks its segment tile by tile, keeping only
//! candidates, and the segments' candidates of a query are merged before the exact re-rank.

use rayon::prelude::*;

use super::plan::{ranges, segments, Ctx, BASE_TILE, QUERY_BLOCK};
use super::tiles::{Bound, TileSource};
use crate::engine::{KnnResult, RangeResult};
use crate::metric::Metric;
use crate::select::{Candidates, ENTRY_BYTES};

/// Elements checked at once before the exact per-element test: the block test compiles to a
/// few SIMD compares, and almost every block of a scan holds no candidate.
pub const SCAN_CHUNK: usize = 16;

/// Whether an approximate key may pass a limit. NaN passes: an overflowed key is never
/// dropped unseen (its bound is then infinite).
#[inline]
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn admits(v: f32, lim: f32) -> bool {
    !(v > lim)
}

/// Hits of each query of a block: (exact key, index).
type Hits = Vec<Vec<(f64, u32)>>;

/// Offers one row of approximate keys to a query's candidates.
#[inline]
pub fn scan_row(row: &[f32], bound: Bound, col_offset: usize, cand: &mut Candidates) {
    let mut lim = bound.limit(cand.threshold());
    for (c, chunk) in row.chunks(SCAN_CHUNK).enumerate() {
        if !chunk.iter().fold(false, |any, &v| any | admits(v, lim)) {
            continue;
        }
        for (j, &v) in chunk.iter().enumerate() {
            if admits(v, lim) {
                cand.push(
                    bound.lower(v),
                    bound.upper(v),
                    (col_offset + c * SCAN_CHUNK + j) as u32,
                );
                lim = bound.limit(cand.threshold());
            }
        }
    }
}

/// Exact re-rank of one query's candidates: its k nearest as (key, index).
pub fn rerank<S: TileSource>(
    src: &S,
    query: usize,
    cand: Candidates,
    k: usize,
    ctx: &Ctx,
) -> Vec<(f64, u32)> {
    let idx = cand.into_indices();
    ctx.count_exact(idx.len() as u64);
    let mut scored: Vec<(f64, u32)> = idx
        .into_iter()
        .map(|i| (src.exact(i as usize, query), i))
        .collect();
    scored.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    scored.truncate(k);
    scored
}

/// How many queries to hold candidates for at once, so that candidates stay within half the
/// memory budget (each query keeps up to about 2k + 32 entries per base segment).
fn query_chunk(ctx: &Ctx, k: usize, segs: usize) -> usize {
    let per_query = candidate_bytes(k) * segs;
    let fit = (ctx.memory_budget / 2) / per_query;
    (fit / QUERY_BLOCK).max(1) * QUERY_BLOCK
}

/// Bytes of one query's candidate buffer at its usual peak.
pub fn candidate_bytes(k: usize) -> usize {
    (2 * k + 32) * ENTRY_BYTES + std::mem::size_of::<Candidates>()
}

/// Number of base segments: enough work items for every thread, given the query blocks.
fn segment_count(ctx: &Ctx, n_blocks: usize) -> usize {
    (4 * ctx.threads).div_ceil(n_blocks.max(1))
}

/// Walks every tile of (query block × base segment) and hands each tile to `visit`.
fn walk<S, T, F>(
    src: &S,
    block: (usize, usize),
    seg: (usize, usize),
    cutoff: f64,
    ctx: &Ctx,
    init: T,
    mut visit: F,
) -> T
where
    S: TileSource,
    F: FnMut(&mut T, &[f32], usize, Bound),
{
    let mut acc = init;
    let (mut q, mut b, mut keys) = (S::Rows::default(), S::Rows::default(), Vec::new());
    src.prepare_query(block.0, block.1, &mut q);
    for (t0, t1) in ranges(seg.1 - seg.0, BASE_TILE) {
        let (b0, b1) = (seg.0 + t0, seg.0 + t1);
        src.prepare_base(b0, b1, &mut b);
        let bound = src.keys(&q, &b, cutoff, &mut keys);
        visit(&mut acc, &keys, b0, bound);
        ctx.count(((block.1 - block.0) * (b1 - b0)) as u64);
        ctx.advance((block.1 - block.0) as u64 * (b1 - b0) as u64);
    }
    acc
}

/// k nearest base items of each query. `k` must already be capped at `n_base`.
pub fn knn<S: TileSource>(
    src: &S,
    metric: &Metric,
    n_base: usize,
    n_queries: usize,
    k: usize,
    ctx: &Ctx,
) -> KnnResult {
    let mut out = KnnResult {
        n_queries,
        k,
        ..Default::default()
    };
    out.indices.reserve(n_queries * k);
    out.distances.reserve(n_queries * k);
    ctx.add_total((n_base * n_queries) as u64);
    let blocks_total = n_queries.div_ceil(QUERY_BLOCK);
    let segs = segments(n_base, segment_count(ctx, blocks_total), BASE_TILE);
    let chunk = query_chunk(ctx, k, segs.len());
    for (c0, c1) in ranges(n_queries, chunk) {
        let blocks = ranges(c1 - c0, QUERY_BLOCK);
        let items: Vec<(usize, usize)> = (0..blocks.len())
            .flat_map(|b| (0..segs.len()).map(move |s| (b, s)))
            .collect();
        let mut parts: Vec<(usize, Vec<Candidates>)> = items
            .par_iter()
            .map(|&(bi, si)| {
                let block = (c0 + blocks[bi].0, c0 + blocks[bi].1);
                let init: Vec<Candidates> =
                    (block.0..block.1).map(|_| Candidates::new(k)).collect();
                let cands = walk(
                    src,
                    block,
                    segs[si],
                    f64::INFINITY,
                    ctx,
                    init,
                    |cands, keys, b0, bound| {
                        let width = keys.len() / cands.len();
                        for (row, cand) in keys.chunks_exact(width).zip(cands.iter_mut()) {
                            scan_row(row, bound, b0, cand);
                        }
                    },
                );
                (bi, cands)
            })
            .collect();
        // Merge the segments of each block into the first, then re-rank per query.
        parts.sort_by_key(|p| p.0);
        let mut merged: Vec<Candidates> = Vec::with_capacity(c1 - c0);
        for group in parts.chunk_by(|a, b| a.0 == b.0) {
            let mut first = group[0].1.clone();
            for other in &group[1..] {
                for (a, b) in first.iter_mut().zip(&other.1) {
                    a.absorb(b);
                }
            }
            merged.extend(first);
        }
        let rows: Vec<Vec<(f64, u32)>> = merged
            .into_par_iter()
            .enumerate()
            .map(|(i, cand)| rerank(src, c0 + i, cand, k, ctx))
            .collect();
        for row in rows {
            debug_assert_eq!(row.len(), k);
            for (key, i) in row {
                out.indices.push(i);
                out.distances.push(metric.key_to_distance(key) as f32);
            }
        }
    }
    out
}

/// Every base item within `radius` of each query, sorted by (key, index).
pub fn range<S: TileSource>(
    src: &S,
    metric: &Metric,
    n_base: usize,
    n_queries: usize,
    radius: f64,
    ctx: &Ctx,
) -> RangeResult {
    // Widen the key threshold by a few f64 ulps so that the conversion between radius and key
    // never drops a pair that is within the radius by distance; membership is decided on the
    // exact distance below.
    let key_r = metric.radius_to_key(radius);
    let key_r = key_r + key_r.abs() * 1e-12 + f64::MIN_POSITIVE;
    ctx.add_total((n_base * n_queries) as u64);
    let blocks = ranges(n_queries, QUERY_BLOCK);
    let segs = segments(n_base, segment_count(ctx, blocks.len()), BASE_TILE);
    let items: Vec<(usize, usize)> = (0..blocks.len())
        .flat_map(|b| (0..segs.len()).map(move |s| (b, s)))
        .collect();
    let mut parts: Vec<(usize, Hits)> = items
        .par_iter()
        .map(|&(bi, si)| {
            let block = blocks[bi];
            let init: Hits = vec![Vec::new(); block.1 - block.0];
            let hits = walk(
                src,
                block,
                segs[si],
                key_r,
                ctx,
                init,
                |hits, keys, b0, bound| {
                    let width = keys.len() / hits.len();
                    let lim = bound.limit(key_r);
                    for (qi, (row, hit)) in
                        keys.chunks_exact(width).zip(hits.iter_mut()).enumerate()
                    {
                        for (j, &v) in row.iter().enumerate() {
                            if admits(v, lim) {
                                let i = b0 + j;
                                // A zero bound means the tile's keys are already exact.
                                let key = if bound.is_exact() {
                                    v as f64
                                } else {
                                    ctx.count_exact(1);
                                    src.exact(i, block.0 + qi)
                                };
                                if metric.within(metric.key_to_distance(key), radius) {
                                    hit.push((key, i as u32));
                                }
                            }
                        }
                    }
                },
            );
            (bi, hits)
        })
        .collect();
    parts.sort_by_key(|p| p.0);
    let mut rows: Hits = vec![Vec::new(); n_queries];
    for (bi, hits) in parts {
        for (qi, hit) in hits.into_iter().enumerate() {
            rows[blocks[bi].0 + qi].extend(hit);
        }
    }
    let mut out = RangeResult {
        offsets: Vec::with_capacity(n_queries + 1),
        ..Default::default()
    };
    out.offsets.push(0);
    for mut row in rows {
        row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (key, i) in row {
            out.indices.push(i);
            out.distances.push(metric.key_to_distance(key) as f32);
        }
        out.offsets.push(out.indices.len());
    }
    out
}
