//! The k-NN graph (self-join) with symmetry: only tiles with I ≤ J are computed, and each
//! tile feeds both the row items' candidates (from J) and the column items' candidates (from I),
//! as in seed 000 §3.2. Each unordered pair is measured once; the item itself is skipped;
//! exact duplicates are kept.
//!
//! Candidates live in one lock per row block. A tile locks block I, then block J (always in
//! that order, so two tiles never wait on each other in a cycle), scans, and unlocks; the final
//! result does not depend on the order tiles finish in, because candidates are re-ranked on
//! exact keys with the index tie-break.

use std::sync::Mutex;

use rayon::prelude::*;

use super::plan::{ranges, Ctx, GRAPH_TILE};
use super::search::{admits, rerank, scan_row};
use super::tiles::{Bound, TileSource};
use crate::engine::KnnResult;
use crate::metric::Metric;
use crate::select::Candidates;

/// k nearest other items of each of the `n` items; `src` has the data on both sides.
/// `k` must already be capped at `n − 1`.
pub fn graph<S: TileSource>(src: &S, metric: &Metric, n: usize, k: usize, ctx: &Ctx) -> KnnResult {
    let mut out = KnnResult {
        n_queries: n,
        k,
        ..Default::default()
    };
    if k == 0 {
        return out;
    }
    let blocks = ranges(n, GRAPH_TILE);
    let acc: Vec<Mutex<Vec<Candidates>>> = blocks
        .iter()
        .map(|&(a, b)| Mutex::new((a..b).map(|_| Candidates::new(k)).collect()))
        .collect();
    let tiles: Vec<(usize, usize)> = (0..blocks.len())
        .flat_map(|i| (i..blocks.len()).map(move |j| (i, j)))
        .collect();
    ctx.add_total(tiles.len() as u64);
    tiles.par_iter().for_each_init(
        || {
            (
                S::Rows::default(),
                S::Rows::default(),
                Vec::new(),
                Vec::new(),
            )
        },
        |(rows_i, rows_j, keys, col_lim), &(bi, bj)| {
            let ((i0, i1), (j0, j1)) = (blocks[bi], blocks[bj]);
            src.prepare_query(i0, i1, rows_i);
            src.prepare_base(j0, j1, rows_j);
            let bound = src.keys(rows_i, rows_j, f64::INFINITY, keys);
            let width = j1 - j0;
            if bi == bj {
                let mut cands = acc[bi].lock().expect("graph lock");
                scan_diagonal(keys, width, bound, i0, &mut cands);
                ctx.count(((i1 - i0) * (i1 - i0 - 1) / 2) as u64);
            } else {
                let mut rows = acc[bi].lock().expect("graph lock");
                let mut cols = acc[bj].lock().expect("graph lock");
                scan_both(keys, width, bound, (i0, j0), &mut rows, &mut cols, col_lim);
                ctx.count(((i1 - i0) * width) as u64);
            }
            ctx.advance(1);
        },
    );
    let cands: Vec<Candidates> = acc
        .into_iter()
        .flat_map(|m| m.into_inner().expect("graph lock"))
        .collect();
    let rows: Vec<Vec<(f64, u32)>> = cands
        .into_par_iter()
        .enumerate()
        .map(|(i, c)| rerank(src, i, c, k, ctx))
        .collect();
    out.indices.reserve(n * k);
    out.distances.reserve(n * k);
    for row in rows {
        for (key, i) in row {
            out.indices.push(i);
            out.distances.push(metric.key_to_distance(key) as f32);
        }
    }
    out
}

/// A diagonal tile: each pair (i, j) with j > i feeds both items, the item itself is skipped.
fn scan_diagonal(
    keys: &[f32],
    width: usize,
    bound: Bound,
    offset: usize,
    cands: &mut [Candidates],
) {
    for i in 0..width.min(keys.len() / width.max(1)) {
        let row = &keys[i * width..(i + 1) * width];
        // Row i takes every column but itself; the columns' own rows see the pair again, so
        // only row-wise offers are needed and each pair's key is still computed once.
        let (left, right) = row.split_at(i);
        scan_row(left, bound, offset, &mut cands[i]);
        scan_row(&right[1..], bound, offset + i + 1, &mut cands[i]);
    }
}

/// An off-diagonal tile: rows are items of block I, columns items of block J.
fn scan_both(
    keys: &[f32],
    width: usize,
    bound: Bound,
    (i0, j0): (usize, usize),
    rows: &mut [Candidates],
    cols: &mut [Candidates],
    col_lim: &mut Vec<f32>,
) {
    col_lim.clear();
    col_lim.extend(cols.iter().map(|c| bound.limit(c.threshold())));
    for (r, (row, cand)) in keys.chunks_exact(width).zip(rows.iter_mut()).enumerate() {
        scan_row(row, bound, j0, cand);
        for (c, &v) in row.iter().enumerate() {
            if admits(v, col_lim[c]) {
                cols[c].push(bound.lower(v), bound.upper(v), (i0 + r) as u32);
                col_lim[c] = bound.limit(cols[c].threshold());
            }
        }
    }
}
