//! k-NN and range search of queries against a base set: the tile walk shared by both, the
//! candidate scans, and the exact re-rank.
//!
//! Work is split into (query range, base segment) items so that both many-query and few-query
//! requests keep every thread busy; each item walks its segment tile by tile (each base tile
//! prepared once and measured against every query block of the range), keeping only
//! candidates, and the segments' candidates of a query are merged before the exact re-rank.

use rayon::prelude::*;

use super::plan::{ranges, segments, Ctx, BASE_TILE, QUERY_BLOCK};
use super::tiles::{Bound, Cutoff, TileSource};
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

/// Offers each row of a key tile (`width` columns starting at base item `col_offset`) to the
/// candidates of its query, picking the widest SIMD the CPU has once per tile.
pub fn scan_tile(
    keys: &[f32],
    width: usize,
    bound: Bound,
    col_offset: usize,
    cands: &mut [Candidates],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { scan_tile_avx2(keys, width, bound, col_offset, cands) };
    }
    scan_tile_body(keys, width, bound, col_offset, cands)
}

/// [`scan_tile_body`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_tile_avx2(
    keys: &[f32],
    width: usize,
    bound: Bound,
    col_offset: usize,
    cands: &mut [Candidates],
) {
    scan_tile_body(keys, width, bound, col_offset, cands)
}

#[inline(always)]
fn scan_tile_body(
    keys: &[f32],
    width: usize,
    bound: Bound,
    col_offset: usize,
    cands: &mut [Candidates],
) {
    for (row, cand) in keys.chunks_exact(width).zip(cands.iter_mut()) {
        scan_row(row, bound, col_offset, cand);
    }
}

/// Offers one row of approximate keys to a query's candidates.
#[inline(always)]
pub fn scan_row(row: &[f32], bound: Bound, col_offset: usize, cand: &mut Candidates) {
    let mut lim = bound.limit(cand.threshold());
    let mut offer = |part: &[f32], start: usize, lim: &mut f32| {
        for (j, &v) in part.iter().enumerate() {
            if admits(v, *lim) {
                cand.push(
                    bound.lower(v),
                    bound.upper(v),
                    (col_offset + start + j) as u32,
                );
                *lim = bound.limit(cand.threshold());
            }
        }
    };
    let mut chunks = row.chunks_exact(SCAN_CHUNK);
    for (c, chunk) in chunks.by_ref().enumerate() {
        // A fixed-size block test compiles to a few SIMD compares; almost every block of a
        // scan holds no candidate, so the per-element path is rare.
        let block: &[f32; SCAN_CHUNK] = chunk.try_into().expect("exact chunk");
        let mut any = false;
        for &v in block {
            any |= admits(v, lim);
        }
        if any {
            offer(chunk, c * SCAN_CHUNK, &mut lim);
        }
    }
    let rest = chunks.remainder();
    offer(rest, row.len() - rest.len(), &mut lim);
}

/// Exact re-rank of one query's candidates: its k nearest as (key, index).
pub fn rerank<S: TileSource>(
    src: &S,
    query: usize,
    cand: Candidates,
    k: usize,
    ctx: &Ctx,
) -> Vec<(f64, u32)> {
    let mut measured = 0;
    let mut scored: Vec<(f64, u32)> = cand
        .into_entries()
        .into_iter()
        .map(
            |(lower, upper, i)| match src.key_from_bounds(lower, upper) {
                Some(key) => (key, i),
                None => {
                    measured += 1;
                    (src.exact(i as usize, query), i)
                }
            },
        )
        .collect();
    ctx.count_exact(measured);
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
    (2 * k + 32) * ENTRY_BYTES + 4 * k + std::mem::size_of::<Candidates>()
}

/// Work items for `n_queries × n_base`: (query range, base segment) pairs, enough of them to keep
/// every thread busy. Base segments come first (few queries against a large base is the common
/// case); when the base is too small to split, query ranges are split instead.
fn work_items(ctx: &Ctx, n_queries: usize, n_base: usize) -> Vec<((usize, usize), (usize, usize))> {
    let want = 2 * ctx.threads;
    let segs = segments(n_base, want, BASE_TILE);
    let groups = segments(n_queries, want.div_ceil(segs.len().max(1)), QUERY_BLOCK);
    groups
        .iter()
        .flat_map(|&g| segs.iter().map(move |&s| (g, s)))
        .collect()
}

/// Walks a base segment tile by tile against a range of queries: each base tile is prepared
/// once and measured against every query block of the range (the queries are prepared once per
/// item), and each key tile is handed to `visit` with its first query, first base index and
/// width (base rows). `limit(acc, q)` is how far query q's keys are needed at that point (see
/// [`Cutoff`]).
fn walk<S, T, L, F>(
    src: &S,
    queries: (usize, usize),
    seg: (usize, usize),
    limit: L,
    ctx: &Ctx,
    init: T,
    mut visit: F,
) -> T
where
    S: TileSource,
    L: Fn(&T, usize) -> f64,
    F: FnMut(&mut T, &[f32], (usize, usize, usize), Bound),
{
    let mut acc = init;
    let blocks: Vec<(usize, usize)> = ranges(queries.1 - queries.0, QUERY_BLOCK)
        .into_iter()
        .map(|(a, b)| (queries.0 + a, queries.0 + b))
        .collect();
    let prepared: Vec<S::Rows> = blocks
        .iter()
        .map(|&(a, b)| {
            let mut rows = S::Rows::default();
            src.prepare_query(a, b, &mut rows);
            rows
        })
        .collect();
    let (mut scratch, mut keys, mut lims) = (S::Rows::default(), Vec::new(), Vec::new());
    'tiles: for (t0, t1) in ranges(seg.1 - seg.0, BASE_TILE) {
        let (b0, b1) = (seg.0 + t0, seg.0 + t1);
        let b = src.base_rows(b0, b1, &mut scratch);
        for (&(q0, q1), q) in blocks.iter().zip(&prepared) {
            // Looked at per key tile (a few milliseconds of work): a base tile against many
            // queries took up to half a second, and a cancelled call that long to end.
            if ctx.cancelled() {
                break 'tiles;
            }
            let cutoff = if src.uses_cutoff() {
                lims.clear();
                lims.extend((q0..q1).map(|x| limit(&acc, x)));
                Cutoff::Lists {
                    rows: &lims,
                    cols: &[],
                }
            } else {
                Cutoff::NONE
            };
            let bound = src.keys(q, b, cutoff, &mut keys);
            visit(&mut acc, &keys, (q0, b0, b1 - b0), bound);
        }
        let pairs = ((queries.1 - queries.0) * (b1 - b0)) as u64;
        ctx.count(pairs);
        ctx.advance(pairs);
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
    if n_base == 0 {
        // No base segment to walk: one empty row per query.
        return KnnResult::from_rows(vec![Vec::new(); n_queries], 0, metric);
    }
    let mut all_rows: Vec<Vec<(f64, u32)>> = Vec::with_capacity(n_queries);
    ctx.add_total((n_base * n_queries) as u64);
    let segs_per_query = work_items(ctx, QUERY_BLOCK, n_base).len();
    let chunk = query_chunk(ctx, k, segs_per_query);
    for (c0, c1) in ranges(n_queries, chunk) {
        let items = work_items(ctx, c1 - c0, n_base);
        let mut parts: Vec<(usize, Vec<Candidates>)> = items
            .par_iter()
            .map(|&((g0, g1), seg)| {
                let (g0, g1) = (c0 + g0, c0 + g1);
                let init: Vec<Candidates> = (g0..g1).map(|_| Candidates::new(k)).collect();
                let cands = walk(
                    src,
                    (g0, g1),
                    seg,
                    // A key over the query's k-th so far is refused by the scan anyway; one
                    // equal to it may still enter by index.
                    |cands: &Vec<Candidates>, q| cands[q - g0].threshold(),
                    ctx,
                    init,
                    |cands, keys, (q0, b0, width), bound| {
                        for (r, row) in keys.chunks_exact(width).enumerate() {
                            scan_row(row, bound, b0, &mut cands[q0 - g0 + r]);
                        }
                    },
                );
                (g0, cands)
            })
            .collect();
        if ctx.cancelled() {
            // The lists are incomplete; the engine returns the cancellation instead.
            return KnnResult::default();
        }
        // Merge the segments of each query range, then re-rank per query.
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
        all_rows.par_extend(
            merged
                .into_par_iter()
                .enumerate()
                .map(|(i, cand)| rerank(src, c0 + i, cand, k, ctx)),
        );
    }
    let scale = src.key_scale();
    KnnResult::from_rows_by(all_rows, k, |key| scale.distance(metric, key))
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
    let scale = src.key_scale();
    let key_r = scale.radius_key(metric, radius);
    let key_r = key_r + key_r.abs() * 1e-12 + f64::MIN_POSITIVE;
    ctx.add_total((n_base * n_queries) as u64);
    let items = work_items(ctx, n_queries, n_base);
    let parts: Vec<(usize, Hits)> = items
        .par_iter()
        .map(|&((g0, g1), seg)| {
            let init: Hits = vec![Vec::new(); g1 - g0];
            let hits = walk(
                src,
                (g0, g1),
                seg,
                |_: &Hits, _| key_r,
                ctx,
                init,
                |hits, keys, (q0, b0, width), bound| {
                    let lim = bound.limit(key_r);
                    for (r, row) in keys.chunks_exact(width).enumerate() {
                        let q = q0 + r;
                        for (j, &v) in row.iter().enumerate() {
                            if admits(v, lim) {
                                let i = b0 + j;
                                // A zero bound means the tile's keys are already exact.
                                let key = if bound.is_exact() {
                                    v as f64
                                } else {
                                    ctx.count_exact(1);
                                    src.exact(i, q)
                                };
                                if metric.within(scale.distance(metric, key), radius) {
                                    hits[q - g0].push((key, i as u32));
                                }
                            }
                        }
                    }
                },
            );
            (g0, hits)
        })
        .collect();
    let mut rows: Hits = vec![Vec::new(); n_queries];
    for (g0, hits) in parts {
        for (qi, hit) in hits.into_iter().enumerate() {
            rows[g0 + qi].extend(hit);
        }
    }
    rows.par_iter_mut()
        .for_each(|row| row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))));
    RangeResult::from_rows_by(rows, |key| scale.distance(metric, key))
}
