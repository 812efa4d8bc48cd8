//! The k-NN graph (self-join) with symmetry: only tiles with I ≤ J are computed, and each
//! tile feeds both the row items' candidates (from J) and the column items' candidates (from I),
//! as in seed 000 §3.2. Each unordered pair is measured once; the item itself is skipped;
//! exact duplicates are kept.
//!
//! When the candidates of all n rows would not fit in half the memory budget, rows are done in
//! passes: a pass keeps candidates for its own row blocks only, measures their tiles with every
//! block, and uses symmetry among its own blocks (pairs across passes are measured twice; that
//! is the price of the bound). A pass ends with its rows re-ranked, i.e. final; a
//! [`PassStore`] may keep them (checkpoints) and hand them back instead of recomputing.
//!
//! Candidates live in one lock per row block. A tile locks block I, then block J (always in
//! that order, so two tiles never wait on each other in a cycle), scans, and unlocks; the final
//! result does not depend on the order tiles finish in, because candidates are re-ranked on
//! exact keys with the index tie-break.

use std::sync::Mutex;

use rayon::prelude::*;

use super::plan::{ranges, Ctx, GRAPH_TILE};
use super::search::{admits, candidate_bytes, rerank, scan_row, scan_tile, SCAN_CHUNK};
use super::tiles::{Bound, TileSource};
use crate::engine::KnnResult;
use crate::error::Result;
use crate::metric::Metric;
use crate::select::Candidates;

/// Final rows of one pass: for each row, its k (exact key, index) pairs in result order.
pub type PassRows = Vec<Vec<(f64, u32)>>;

/// Keeps finished passes between runs. Pass `p` covers rows `rows.0..rows.1`.
pub trait PassStore {
    /// Row blocks per pass this store's files were laid out with, if it is bound to one.
    fn blocks_per_pass(&self) -> Option<usize>;
    /// The rows of pass `p` when an earlier run finished it.
    fn load(&mut self, p: usize, rows: (usize, usize)) -> Result<Option<PassRows>>;
    /// Called once a pass is final.
    fn save(&mut self, p: usize, rows: (usize, usize), done: &PassRows) -> Result<()>;
}

/// No checkpoints: nothing is loaded or kept.
pub struct NoStore;

impl PassStore for NoStore {
    fn blocks_per_pass(&self) -> Option<usize> {
        None
    }

    fn load(&mut self, _: usize, _: (usize, usize)) -> Result<Option<PassRows>> {
        Ok(None)
    }

    fn save(&mut self, _: usize, _: (usize, usize), _: &PassRows) -> Result<()> {
        Ok(())
    }
}

/// Most row blocks one pass may hold: their candidates must fit in half the memory budget.
pub fn max_blocks_per_pass(n: usize, k: usize, memory_budget: usize) -> usize {
    let per_block = GRAPH_TILE * candidate_bytes(k);
    ((memory_budget / 2) / per_block).clamp(1, n.div_ceil(GRAPH_TILE).max(1))
}

/// k nearest other items of each of the `n` items; `src` has the data on both sides.
/// `k` must already be capped at `n − 1`. Passes hold `blocks_per_pass` row blocks each
/// (see [`max_blocks_per_pass`]); `store` sees every finished pass.
pub fn graph<S: TileSource>(
    src: &S,
    metric: &Metric,
    (n, k): (usize, usize),
    blocks_per_pass: usize,
    ctx: &Ctx,
    store: &mut dyn PassStore,
) -> Result<KnnResult> {
    if k == 0 {
        return Ok(KnnResult::from_rows(vec![Vec::new(); n], 0, metric));
    }
    let blocks = ranges(n, GRAPH_TILE);
    let passes = ranges(blocks.len(), blocks_per_pass);
    let row_range = |(p0, p1): (usize, usize)| (blocks[p0].0, blocks[p1 - 1].1);
    let mut rows: PassRows = Vec::with_capacity(n);
    let mut todo = Vec::new();
    for (p, &pass) in passes.iter().enumerate() {
        match store.load(p, row_range(pass))? {
            Some(done) => rows.extend(done),
            None => todo.push((p, rows.len())),
        }
        // Placeholder rows keep every pass at its place; computed passes fill theirs below.
        rows.resize_with(row_range(pass).1, Vec::new);
    }
    let total: usize = todo
        .iter()
        .map(|&(p, _)| pass_tiles(passes[p].0, passes[p].1, blocks.len()).len())
        .sum();
    ctx.add_total(total as u64);
    for (p, start) in todo {
        let cands = graph_pass(src, &blocks, passes[p], k, ctx);
        let done: PassRows = cands
            .into_par_iter()
            .enumerate()
            .map(|(i, c)| rerank(src, start + i, c, k, ctx))
            .collect();
        store.save(p, row_range(passes[p]), &done)?;
        for (slot, row) in rows[start..].iter_mut().zip(done) {
            *slot = row;
        }
    }
    Ok(KnnResult::from_rows(rows, k, metric))
}

/// Tiles of a pass over row blocks `p0..p1`: its own blocks pair symmetrically (I ≤ J), and
/// every own block pairs with every outside block (rows only).
fn pass_tiles(p0: usize, p1: usize, n_blocks: usize) -> Vec<(usize, usize)> {
    (p0..p1)
        .flat_map(|i| {
            (0..n_blocks)
                .filter(move |&j| j >= i || j < p0)
                .map(move |j| (i, j))
        })
        .collect()
}

/// One pass: candidates for the rows of blocks `p0..p1`.
fn graph_pass<S: TileSource>(
    src: &S,
    blocks: &[(usize, usize)],
    (p0, p1): (usize, usize),
    k: usize,
    ctx: &Ctx,
) -> Vec<Candidates> {
    let acc: Vec<Mutex<Vec<Candidates>>> = blocks[p0..p1]
        .iter()
        .map(|&(a, b)| Mutex::new((a..b).map(|_| Candidates::new(k)).collect()))
        .collect();
    let own = |b: usize| (p0..p1).contains(&b);
    pass_tiles(p0, p1, blocks.len()).par_iter().for_each_init(
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
                let mut cands = acc[bi - p0].lock().expect("graph lock");
                scan_diagonal(keys, width, bound, i0, &mut cands);
                ctx.count(((i1 - i0) * (i1 - i0 - 1) / 2) as u64);
            } else if own(bj) {
                let mut rows = acc[bi - p0].lock().expect("graph lock");
                let mut cols = acc[bj - p0].lock().expect("graph lock");
                scan_both(keys, width, bound, (i0, j0), &mut rows, &mut cols, col_lim);
                ctx.count(((i1 - i0) * width) as u64);
            } else {
                let mut rows = acc[bi - p0].lock().expect("graph lock");
                scan_tile(keys, width, bound, j0, &mut rows);
                ctx.count(((i1 - i0) * width) as u64);
            }
            ctx.advance(1);
        },
    );
    acc.into_iter()
        .flat_map(|m| m.into_inner().expect("graph lock"))
        .collect()
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
    origin: (usize, usize),
    rows: &mut [Candidates],
    cols: &mut [Candidates],
    col_lim: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { scan_both_avx2(keys, width, bound, origin, rows, cols, col_lim) };
    }
    scan_both_body(keys, width, bound, origin, rows, cols, col_lim)
}

/// [`scan_both_body`] compiled for AVX2: the block test runs on 8 lanes instead of SSE's 4.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn scan_both_avx2(
    keys: &[f32],
    width: usize,
    bound: Bound,
    origin: (usize, usize),
    rows: &mut [Candidates],
    cols: &mut [Candidates],
    col_lim: &mut Vec<f32>,
) {
    scan_both_body(keys, width, bound, origin, rows, cols, col_lim)
}

/// The body of [`scan_both`], inlined into each instruction-set variant.
#[inline(always)]
fn scan_both_body(
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
        let mut lim = bound.limit(cand.threshold());
        let mut offer = |part: &[f32], start: usize, lim: &mut f32, col_lim: &mut [f32]| {
            for (j, &v) in part.iter().enumerate() {
                let c = start + j;
                if admits(v, *lim) {
                    cand.push(bound.lower(v), bound.upper(v), (j0 + c) as u32);
                    *lim = bound.limit(cand.threshold());
                }
                if admits(v, col_lim[c]) {
                    cols[c].push(bound.lower(v), bound.upper(v), (i0 + r) as u32);
                    col_lim[c] = bound.limit(cols[c].threshold());
                }
            }
        };
        let full = width - width % SCAN_CHUNK;
        for start in (0..full).step_by(SCAN_CHUNK) {
            // One pass serves the row and the columns: a key may pass if it is under either
            // limit. Fixed-size blocks compile to SIMD compares.
            let block: &[f32; SCAN_CHUNK] =
                row[start..start + SCAN_CHUNK].try_into().expect("block");
            let lims: &[f32; SCAN_CHUNK] = col_lim[start..start + SCAN_CHUNK]
                .try_into()
                .expect("block");
            let mut any = false;
            for t in 0..SCAN_CHUNK {
                // Limits are never NaN, so a plain compare-select max is enough.
                let m = if lim > lims[t] { lim } else { lims[t] };
                any |= admits(block[t], m);
            }
            if any {
                offer(&row[start..start + SCAN_CHUNK], start, &mut lim, col_lim);
            }
        }
        offer(&row[full..], full, &mut lim, col_lim);
    }
}
