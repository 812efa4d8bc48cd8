//! The k-NN graph (self-join) with symmetry: only tiles with I ≤ J are computed, and each
//! tile feeds both the row items' candidates (from J) and the column items' candidates (from I),
//! as in [Dashti13] §3.2. Each unordered pair is measured once; the item itself is skipped;
//! exact duplicates are kept.
//!
//! The build is run by the core's one driver ([`crate::graph::driver`]): passes (from the
//! memory budget or a checkpoint's layout), the catch-up of a resumed build, finishing and
//! saving passes. [`CpuBuild`] is the CPU engine's side of it: one backend whose threads
//! measure the tile pairs of a share straight into the running exact lists of every item
//! ([`extend`]). The row tiles of a share (a pass's own blocks) keep candidates for the whole
//! share, one lock per block; an open tile that only appears as a column (a later block) is
//! collected by one thread, across all its tiles, and re-ranked into its running list, which
//! its own pass later merges in; so each pair is measured once however many passes there are.
//!
//! Every candidate buffer starts seeded with its row's list so far (exact keys as both
//! bounds): the threshold is tight from the first tile, so scans offer far fewer items, and
//! the re-rank of the buffer is the merge of old and new. Exact, because an item that was
//! measured before and is not in the list is beaten by all k of it.
//!
//! The same tile scan serves [`cross_tile`]: the exact lists of one rectangle of the distance
//! matrix in both directions, for drivers that deal tiles elsewhere (ranks, devices) and merge
//! the lists themselves.
//!
//! A tile locks its lower block, then its higher one (so two tiles never wait on each other in
//! a cycle), scans, and unlocks; the final result does not depend on the order tiles finish
//! in, because candidates are re-ranked on exact keys with the index tie-break.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Mutex;

use rayon::prelude::*;

use super::plan::{ranges, Ctx, GRAPH_TILE};
use super::search::{admits, candidate_bytes, rerank, scan_row, scan_tile, SCAN_CHUNK};
use super::tiles::{Bound, Cutoff, TileSource};
use crate::error::{Error, Result};
use crate::graph::backend::EXACT_LISTS;
use crate::graph::{
    triangle, CpuShare, GraphJob, List, PassRows, RangeLists, TileGraph, TileLists, TileOwner,
};
use crate::select::Candidates;

/// Most row blocks one pass may hold: their candidates must fit in half the memory budget.
pub fn max_blocks_per_pass(n: usize, k: usize, memory_budget: usize) -> usize {
    let per_block = GRAPH_TILE * candidate_bytes(k);
    ((memory_budget / 2) / per_block).clamp(1, n.div_ceil(GRAPH_TILE).max(1))
}

/// The CPU engine's side of one graph build for the core's driver: the running share is every
/// item's exact list so far, extended in place by the engine's threads ([`extend`]).
pub struct CpuBuild<'a, S> {
    pub src: &'a S,
    pub ctx: &'a Ctx,
    /// Items, and neighbours per row (already capped at n − 1).
    pub n: usize,
    pub k: usize,
}

impl<S: TileSource> TileGraph for CpuBuild<'_, S> {
    type Share = CpuShare;

    /// The engine's tile.
    fn tile_edge(&self, _: &GraphJob<'_>) -> Result<usize> {
        Ok(GRAPH_TILE)
    }

    fn share(&self, job: &GraphJob<'_>, edge: usize, owns: &TileOwner<'_>) -> Result<CpuShare> {
        let mut share = None;
        self.extend(job, &mut share, edge, owns, &|_| true)?;
        share.ok_or_else(|| Error::device("graph share without lists (bug)"))
    }

    fn extend(
        &self,
        _: &GraphJob<'_>,
        running: &mut Option<CpuShare>,
        edge: usize,
        owns: &TileOwner<'_>,
        open: &(dyn Fn(usize) -> bool + Sync),
    ) -> Result<()> {
        let share = running.get_or_insert_with(|| CpuShare {
            k: self.k,
            lists: vec![List::new(); self.n],
        });
        extend(
            self.src,
            &mut share.lists,
            self.k,
            edge,
            owns,
            open,
            self.ctx,
        );
        // A cancelled share is incomplete: it must never reach the checkpoint.
        self.ctx.check_cancel()
    }

    fn finish(&self, _: &GraphJob<'_>, share: &CpuShare, rows: Range<usize>) -> Result<PassRows> {
        let done = &share.lists[rows];
        full_rows(done, self.k)?;
        Ok(done.to_vec())
    }

    fn finish_all(&self, _: &GraphJob<'_>, share: CpuShare) -> Result<PassRows> {
        full_rows(&share.lists, self.k)?;
        Ok(share.lists)
    }

    fn expect_tiles(&self, tiles: u64) {
        self.ctx.add_total(tiles);
    }

    fn check_cancel(&self) -> Result<()> {
        self.ctx.check_cancel()
    }

    fn partial_kind(&self, _: &GraphJob<'_>) -> Result<Option<String>> {
        Ok(Some(EXACT_LISTS.into()))
    }

    fn partial_bytes(&self, share: &CpuShare, rows: &[Range<usize>]) -> Vec<u8> {
        share.rows_to_bytes(rows)
    }

    fn partial_share(
        &self,
        _: &GraphJob<'_>,
        rows: &[Range<usize>],
        bytes: &[u8],
    ) -> Result<CpuShare> {
        CpuShare::rows_from_bytes(self.n, self.k, rows, bytes)
    }
}

/// Rows that have met every other item hold k neighbours each.
fn full_rows(rows: &[List], k: usize) -> Result<()> {
    match rows.iter().any(|r| r.len() != k) {
        true => Err(Error::device(
            "graph rows ended with missing neighbours (bug)",
        )),
        false => Ok(()),
    }
}

/// Adds to `lists` (every item's exact list so far, sorted by (key, index), at most `k`) the
/// pairs of the tile pairs (I, J), I ≤ J, of edge `edge` that `owns` accepts. Only the lists of
/// tiles that `open` accepts are kept up to date; a pair of two other tiles is not measured.
///
/// A tile that is open and the first of some pair (a row tile) keeps candidates, seeded with
/// its lists, for the whole call; its pairs with other row tiles feed both sides, its pairs
/// with tiles that are not open feed its rows only. An open tile that is never first is
/// collected by one thread across all its pairs (both sides when the other tile is a row
/// tile, its own side only otherwise).
pub fn extend<S: TileSource>(
    src: &S,
    lists: &mut [List],
    k: usize,
    edge: usize,
    owns: &TileOwner<'_>,
    open: &(dyn Fn(usize) -> bool + Sync),
    ctx: &Ctx,
) {
    let edge = edge.max(1);
    let blocks = ranges(lists.len(), edge);
    let nt = blocks.len();
    let pairs: Vec<(usize, usize)> = triangle(nt)
        .filter(|&(i, j)| (open(i) || open(j)) && owns(i, j))
        .collect();
    // Row tiles, numbered in tile order so that locks are taken in one order.
    let mut slot: Vec<Option<usize>> = vec![None; nt];
    let mut row_tiles = Vec::new();
    for &(i, _) in &pairs {
        if open(i) && slot[i].is_none() {
            slot[i] = Some(row_tiles.len());
            row_tiles.push(i);
        }
    }
    let mut inner = Vec::new();
    let mut cols_of: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &(i, j) in &pairs {
        match (slot[i], slot[j]) {
            (Some(_), Some(_)) => inner.push((i, j)),
            (Some(_), None) if !open(j) => inner.push((i, j)),
            // J's rows against I's items: its side only.
            (None, Some(_)) => inner.push((j, i)),
            _ => cols_of.entry(j).or_default().push(i),
        }
    }
    let acc: Vec<Mutex<Vec<Candidates>>> = row_tiles
        .iter()
        .map(|&t| {
            let (a, b) = blocks[t];
            Mutex::new(lists[a..b].iter().map(|r| seeded(k, r)).collect())
        })
        .collect();
    rayon::join(
        || scan_into(src, &blocks, &slot, &acc, &inner, ctx),
        || {
            lists
                .par_chunks_mut(edge)
                .enumerate()
                .filter(|(c, _)| cols_of.contains_key(c))
                .for_each_init(Scratch::<S>::default, |s, (c, rows)| {
                    let (j0, j1) = blocks[c];
                    let width = j1 - j0;
                    let mut cols: Vec<Candidates> = rows.iter().map(|r| seeded(k, r)).collect();
                    for &bi in &cols_of[&c] {
                        if ctx.cancelled() {
                            return;
                        }
                        let (i0, i1) = blocks[bi];
                        match slot[bi] {
                            Some(a) => {
                                let sides = (Side::Held(&acc[a]), Side::Own(&cols));
                                let bound = measure(src, (i0, i1), (j0, j1), sides, s);
                                let mut own = acc[a].lock().expect("graph lock");
                                scan_both(
                                    &s.keys,
                                    width,
                                    bound,
                                    (i0, j0),
                                    &mut own,
                                    &mut cols,
                                    &mut s.col_lim,
                                );
                            }
                            None => {
                                let sides = (Side::Own(&cols), Side::None);
                                let bound = measure(src, (j0, j1), (i0, i1), sides, s);
                                scan_tile(&s.keys, i1 - i0, bound, i0, &mut cols);
                            }
                        }
                        ctx.count(((i1 - i0) * width) as u64);
                        ctx.advance(1);
                    }
                    for ((j, c), row) in (j0..j1).zip(cols).zip(rows.iter_mut()) {
                        *row = rerank(src, j, c, k, ctx);
                    }
                })
        },
    );
    let mut cands = acc.into_iter().map(|m| m.into_inner().expect("graph lock"));
    let mut jobs = Vec::with_capacity(row_tiles.len());
    for (t, rows) in lists.chunks_mut(edge).enumerate() {
        if slot[t].is_some() {
            jobs.push((blocks[t].0, rows, cands.next().expect("one per row tile")));
        }
    }
    jobs.into_par_iter().for_each(|(start, rows, cands)| {
        rows.par_iter_mut()
            .zip(cands)
            .enumerate()
            .for_each(|(x, (row, c))| *row = rerank(src, start + x, c, k, ctx));
    });
}

/// Buffers of one tile.
struct Scratch<S: TileSource> {
    rows_i: S::Rows,
    rows_j: S::Rows,
    keys: Vec<f32>,
    col_lim: Vec<f32>,
    /// The thresholds of the rows' and the columns' candidates, for the cutoff.
    cut_i: Vec<f64>,
    cut_j: Vec<f64>,
}

impl<S: TileSource> Default for Scratch<S> {
    fn default() -> Self {
        Scratch {
            rows_i: S::Rows::default(),
            rows_j: S::Rows::default(),
            keys: Vec::new(),
            col_lim: Vec::new(),
            cut_i: Vec::new(),
            cut_j: Vec::new(),
        }
    }
}

/// The candidates a side of a tile feeds, if any: their thresholds bound the keys worth
/// computing.
enum Side<'a> {
    None,
    /// A block's candidates behind its lock (taken briefly to read them).
    Held(&'a Mutex<Vec<Candidates>>),
    /// Candidates the thread owns.
    Own(&'a [Candidates]),
}

impl Side<'_> {
    /// The current thresholds into `out` (empty for [`Side::None`]). Thresholds only fall, so
    /// keys over the values read now would be refused at the scan too.
    fn thresholds(&self, out: &mut Vec<f64>) {
        let read = |cands: &[Candidates], out: &mut Vec<f64>| {
            out.extend(cands.iter().map(|c| c.threshold()));
        };
        out.clear();
        match self {
            Side::None => {}
            Side::Held(m) => read(&m.lock().expect("graph lock"), out),
            Side::Own(c) => read(c, out),
        }
    }
}

/// Approximate keys of block `i` (rows) against block `j` (columns) into `s.keys`; `sides` are
/// the candidates the rows and the columns feed. A pair is needed up to the larger of its two
/// thresholds, as it may enter either list (with no column side, up to its row's).
fn measure<S: TileSource>(
    src: &S,
    (i0, i1): (usize, usize),
    (j0, j1): (usize, usize),
    sides: (Side, Side),
    s: &mut Scratch<S>,
) -> Bound {
    src.prepare_query(i0, i1, &mut s.rows_i);
    src.prepare_base(j0, j1, &mut s.rows_j);
    let cutoff = if src.uses_cutoff() {
        sides.0.thresholds(&mut s.cut_i);
        sides.1.thresholds(&mut s.cut_j);
        Cutoff::Lists {
            rows: &s.cut_i,
            cols: &s.cut_j,
        }
    } else {
        Cutoff::NONE
    };
    src.keys(&s.rows_i, &s.rows_j, cutoff, &mut s.keys)
}

/// A candidate buffer holding `list` (exact keys) already.
fn seeded(k: usize, list: &[(f64, u32)]) -> Candidates {
    let mut c = Candidates::new(k);
    for &(key, i) in list {
        c.push(key, key, i);
    }
    c
}

/// One lock per block of `p0..p1`, holding its items' candidates.
fn accumulators(
    blocks: &[(usize, usize)],
    (p0, p1): (usize, usize),
    k: usize,
) -> Vec<Mutex<Vec<Candidates>>> {
    blocks[p0..p1]
        .iter()
        .map(|&(a, b)| Mutex::new((a..b).map(|_| Candidates::new(k)).collect()))
        .collect()
}

/// Exact lists for a batch of tiles (pairs of item ranges): each item's `k` nearest among the
/// items the tiles pair it with. A tile of a range with itself pairs its items with each other
/// (never an item with itself); every pair is measured once, even when tiles repeat or come in
/// both orders; candidates from all the tiles of an item are re-ranked together, once. Ranges
/// must be equal or disjoint. Returns one entry per distinct non-empty range, by start.
pub fn tile_lists<S: TileSource>(
    src: &S,
    tiles: &[(Range<usize>, Range<usize>)],
    k: usize,
    ctx: &Ctx,
) -> Result<RangeLists> {
    let key = |r: &Range<usize>| (r.start, r.end);
    let mut spans: Vec<Range<usize>> = tiles
        .iter()
        .flat_map(|(r, c)| [r.clone(), c.clone()])
        .filter(|r| !r.is_empty())
        .collect();
    spans.sort_by_key(key);
    spans.dedup();
    if let Some(w) = spans.windows(2).find(|w| w[0].end > w[1].start) {
        return Err(Error::invalid(format!(
            "tiles over items {:?} and {:?}: ranges must be the same or disjoint",
            w[0], w[1]
        )));
    }
    // Each range in scan blocks; `first[s]..first[s + 1]` are range s's blocks.
    let mut blocks = Vec::new();
    let mut first = Vec::with_capacity(spans.len() + 1);
    for r in &spans {
        first.push(blocks.len());
        blocks.extend(
            ranges(r.len(), GRAPH_TILE)
                .into_iter()
                .map(|(x, y)| (r.start + x, r.start + y)),
        );
    }
    first.push(blocks.len());
    let span = |r: &Range<usize>| {
        let s = spans
            .binary_search_by_key(&key(r), key)
            .expect("known range");
        first[s]..first[s + 1]
    };
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    for (r, c) in tiles.iter().filter(|(r, c)| !r.is_empty() && !c.is_empty()) {
        let (a, b) = (span(r), span(c));
        for i in a.clone() {
            if a == b {
                pairs.extend((i..a.end).map(|j| (i, j)));
            } else {
                pairs.extend(b.clone().map(|j| (i.min(j), i.max(j))));
            }
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    ctx.add_total(pairs.len() as u64);
    let cands = scan_pairs(src, &blocks, (0, blocks.len()), &pairs, k, ctx);
    let items: Vec<usize> = blocks.iter().flat_map(|&(a, b)| a..b).collect();
    let lists: Vec<Vec<(f64, u32)>> = cands
        .into_par_iter()
        .zip(items)
        .map(|(c, item)| rerank(src, item, c, k, ctx))
        .collect();
    let mut lists = lists.into_iter();
    Ok(spans
        .into_iter()
        .map(|r| {
            let mine = lists.by_ref().take(r.len()).collect();
            (r, mine)
        })
        .collect())
}

/// The lists of tile `rows` × `cols` from what [`tile_lists`] returned for it alone.
pub fn one_tile(mut got: RangeLists, rows: &Range<usize>, cols: &Range<usize>) -> TileLists {
    let mut take = |r: &Range<usize>| match got.iter().position(|(s, _)| s == r) {
        Some(at) => got.swap_remove(at).1,
        None => vec![Vec::new(); r.len()],
    };
    let row_lists = take(rows);
    let col_lists = if rows == cols { Vec::new() } else { take(cols) };
    TileLists {
        rows: row_lists,
        cols: col_lists,
    }
}

/// Measures `tiles` (pairs of indices into `blocks`) and returns the candidates of the items
/// of blocks `keep.0..keep.1`, in block order (see [`scan_into`]).
fn scan_pairs<S: TileSource>(
    src: &S,
    blocks: &[(usize, usize)],
    (p0, p1): (usize, usize),
    tiles: &[(usize, usize)],
    k: usize,
    ctx: &Ctx,
) -> Vec<Candidates> {
    let acc = accumulators(blocks, (p0, p1), k);
    let slot: Vec<Option<usize>> = (0..blocks.len())
        .map(|b| (p0..p1).contains(&b).then(|| b - p0))
        .collect();
    scan_into(src, blocks, &slot, &acc, tiles, ctx);
    acc.into_iter()
        .flat_map(|m| m.into_inner().expect("graph lock"))
        .collect()
}

/// Measures `tiles` into `acc`, the candidates of the blocks b with a `slot[b]` (`acc[slot]`,
/// slots in block order). A tile's first block must have one; a tile of a block with itself is
/// a diagonal one; a tile with two such blocks must name the lower one first and feeds both; a
/// tile whose second block has none feeds its rows only.
fn scan_into<S: TileSource>(
    src: &S,
    blocks: &[(usize, usize)],
    slot: &[Option<usize>],
    acc: &[Mutex<Vec<Candidates>>],
    tiles: &[(usize, usize)],
    ctx: &Ctx,
) {
    let held = |b: usize| slot[b].expect("a block with candidates");
    tiles
        .par_iter()
        .for_each_init(Scratch::<S>::default, |s, &(bi, bj)| {
            if ctx.cancelled() {
                return;
            }
            let ((i0, i1), (j0, j1)) = (blocks[bi], blocks[bj]);
            // A diagonal tile's entry (r, c) only feeds row r (row c reads (c, r)).
            let cols = match slot[bj] {
                Some(cj) if bi != bj => Side::Held(&acc[cj]),
                _ => Side::None,
            };
            let sides = (Side::Held(&acc[held(bi)]), cols);
            let bound = measure(src, (i0, i1), (j0, j1), sides, s);
            let (keys, width) = (&s.keys, j1 - j0);
            if bi == bj {
                let mut cands = acc[held(bi)].lock().expect("graph lock");
                scan_diagonal(keys, width, bound, i0, &mut cands);
                ctx.count(((i1 - i0) * (i1 - i0).saturating_sub(1) / 2) as u64);
            } else if let Some(cj) = slot[bj] {
                debug_assert!(bi < bj, "lock order");
                let mut rows = acc[held(bi)].lock().expect("graph lock");
                let mut cols = acc[cj].lock().expect("graph lock");
                scan_both(
                    keys,
                    width,
                    bound,
                    (i0, j0),
                    &mut rows,
                    &mut cols,
                    &mut s.col_lim,
                );
                ctx.count(((i1 - i0) * width) as u64);
            } else {
                let mut rows = acc[held(bi)].lock().expect("graph lock");
                scan_tile(keys, width, bound, j0, &mut rows);
                ctx.count(((i1 - i0) * width) as u64);
            }
            ctx.advance(1);
        });
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

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use rand::{rngs::StdRng, Rng, SeedableRng};

    use crate::cpu::{CpuEngine, CpuOptions};
    use crate::metric::exact::item_key;
    use crate::{reference, Dataset, Engine, KnnResult, Metric, StringSet, VectorSet};

    fn engine(threads: usize) -> CpuEngine {
        CpuEngine::new(CpuOptions {
            threads: Some(threads),
            ..CpuOptions::default()
        })
        .unwrap()
    }

    /// Small integer coordinates (many ties), the first rows duplicated and two zero rows.
    fn tied(n: usize, dim: usize, seed: u64) -> Dataset {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut v: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-2..3) as f32).collect();
        if n >= 4 {
            v.copy_within(..dim, dim);
            v[2 * dim..4 * dim].fill(0.0);
        }
        VectorSet::from_f32(n, dim, v).unwrap().into()
    }

    fn spread(n: usize, dim: usize, seed: u64) -> Dataset {
        let mut rng = StdRng::seed_from_u64(seed);
        let v: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-1.0..1.0)).collect();
        VectorSet::from_f32(n, dim, v).unwrap().into()
    }

    /// The f64 brute-force list of `item` among `others` (itself excluded).
    fn brute(
        data: &Dataset,
        metric: &Metric,
        item: usize,
        others: Range<usize>,
        k: usize,
    ) -> Vec<(f64, u32)> {
        let mut row: Vec<(f64, u32)> = others
            .filter(|&j| j != item)
            .map(|j| (item_key(metric, data, j, data, item), j as u32))
            .collect();
        row.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        row.truncate(k);
        row
    }

    fn check_tile(
        e: &CpuEngine,
        data: &Dataset,
        rows: Range<usize>,
        cols: Range<usize>,
        k: usize,
        metric: &Metric,
    ) -> crate::cpu::TileLists {
        let what = format!("{metric} tile {rows:?} x {cols:?} k {k}");
        let t = e
            .cross_tile(data, rows.clone(), cols.clone(), k, metric)
            .unwrap();
        assert_eq!(t.rows.len(), rows.len(), "{what}");
        for (r, list) in rows.clone().zip(&t.rows) {
            assert_eq!(
                list,
                &brute(data, metric, r, cols.clone(), k),
                "{what} row {r}"
            );
        }
        if rows == cols {
            assert!(t.cols.is_empty(), "{what}");
        } else {
            assert_eq!(t.cols.len(), cols.len(), "{what}");
            for (c, list) in cols.clone().zip(&t.cols) {
                assert_eq!(
                    list,
                    &brute(data, metric, c, rows.clone(), k),
                    "{what} col {c}"
                );
            }
        }
        t
    }

    /// The whole graph from the tiles I ≤ J of the blocks cut at `cuts`, merged per item.
    fn graph_from_tiles(
        e: &CpuEngine,
        data: &Dataset,
        cuts: &[usize],
        k: usize,
        metric: &Metric,
    ) -> KnnResult {
        let n = data.len();
        let kk = k.min(n.saturating_sub(1));
        let blocks: Vec<Range<usize>> = cuts.windows(2).map(|w| w[0]..w[1]).collect();
        let mut rows: Vec<Vec<(f64, u32)>> = vec![Vec::new(); n];
        let mut merge = |item: usize, list: &[(f64, u32)]| {
            rows[item] = crate::graph::merge_lists(&rows[item], list, kk);
        };
        for (i, bi) in blocks.iter().enumerate() {
            for bj in &blocks[i..] {
                let t = e
                    .cross_tile(data, bi.clone(), bj.clone(), k, metric)
                    .unwrap();
                for (r, list) in bi.clone().zip(&t.rows) {
                    merge(r, list);
                }
                for (c, list) in bj.clone().zip(&t.cols) {
                    merge(c, list);
                }
            }
        }
        KnnResult::from_rows(rows, kk, metric)
    }

    fn same(expected: &KnnResult, got: &KnnResult, what: &str) {
        assert_eq!(expected.indices, got.indices, "{what}");
        let bits = |r: &KnnResult| r.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(expected), bits(got), "{what}");
    }

    #[test]
    fn tiles_match_brute_force_both_ways() {
        let e = engine(2);
        for (data, metric) in [
            (tied(45, 3, 1), Metric::Euclidean),
            (tied(45, 1, 2), Metric::Cityblock),
            (tied(45, 127, 3), Metric::Cosine),
            (spread(40, 1025, 4), Metric::InnerProduct),
            (tied(45, 5, 5), Metric::Chebyshev),
        ] {
            for k in [1, 4, 44, 60] {
                check_tile(
                    &e,
                    &data,
                    0..45.min(data.len()),
                    0..45.min(data.len()),
                    k,
                    &metric,
                );
                check_tile(&e, &data, 3..20, 20..39, k, &metric);
                check_tile(&e, &data, 30..40, 0..7, k, &metric);
                check_tile(&e, &data, 9..10, 9..10, k, &metric);
                check_tile(&e, &data, 5..5, 10..20, k, &metric);
            }
        }
    }

    #[test]
    fn tiles_wider_than_the_scan_blocks() {
        // Ranges spanning several 512-row blocks, not aligned to them.
        let e = engine(2);
        let data = tied(1300, 3, 9);
        let m = Metric::Euclidean;
        check_tile(&e, &data, 100..1250, 100..1250, 6, &m);
        check_tile(&e, &data, 0..700, 700..1300, 6, &m);
        check_tile(&e, &data, 1290..1300, 0..1100, 3, &m);
    }

    #[test]
    fn merged_tiles_equal_the_graph() {
        let e = engine(2);
        let cases: Vec<(Dataset, Metric, Vec<usize>)> = vec![
            (tied(1100, 3, 11), Metric::Euclidean, vec![0, 300, 1100]),
            (
                tied(1100, 3, 11),
                Metric::SqEuclidean,
                vec![0, 1, 513, 1024, 1100],
            ),
            (tied(60, 2, 12), Metric::Cityblock, vec![0, 7, 8, 31, 60]),
            (
                spread(61, 1025, 13),
                Metric::Correlation,
                vec![0, 20, 41, 61],
            ),
            (tied(2, 1, 14), Metric::Euclidean, vec![0, 1, 2]),
            // Zero rows: inner products of −0 and +0, which the merge must order as the
            // re-rank does.
            (tied(50, 2, 15), Metric::InnerProduct, vec![0, 3, 20, 50]),
        ];
        for (data, metric, cuts) in cases {
            let n = data.len();
            for k in [1, 9, n - 1, n + 3] {
                let what = format!("{metric} n {n} cuts {cuts:?} k {k}");
                let got = graph_from_tiles(&e, &data, &cuts, k, &metric);
                same(&reference::graph(&data, k, &metric).unwrap(), &got, &what);
                same(&e.graph(&data, k, &metric).unwrap(), &got, &what);
            }
        }
    }

    #[test]
    fn string_tiles() {
        let e = engine(1);
        let words = [
            "kitten", "sitting", "kitten", "", "mitten", "sit", "bitten", "kit", "", "a",
        ];
        let data: Dataset = StringSet::from_strings(words).unwrap().into();
        for k in [1, 3, 9, 12] {
            check_tile(&e, &data, 0..4, 4..10, k, &Metric::Levenshtein);
            let got = graph_from_tiles(&e, &data, &[0, 3, 4, 10], k, &Metric::Levenshtein);
            let expected = reference::graph(&data, k, &Metric::Levenshtein).unwrap();
            same(&expected, &got, &format!("strings k {k}"));
        }
    }

    #[test]
    fn bad_tiles_are_refused() {
        let e = engine(1);
        let data = tied(10, 2, 1);
        let m = Metric::Euclidean;
        for (rows, cols) in [(0..5, 3..8), (0..11, 0..11), (2..4, 8..12)] {
            let err = e.cross_tile(&data, rows, cols, 2, &m).unwrap_err();
            assert!(err.is_user_error(), "{err}");
        }
        assert!(e.cross_tile(&data, 0..5, 5..10, 0, &m).is_err());
        let words: Dataset = StringSet::from_strings(["a", "b"]).unwrap().into();
        assert!(e.cross_tile(&words, 0..1, 1..2, 1, &m).is_err());
    }

    #[test]
    fn merge_orders_like_the_rerank() {
        let a = [(-0.0, 5), (1.0, 1), (2.0, 0)];
        let b = [(0.0, 2), (1.0, 0), (f64::INFINITY, 9)];
        let got = crate::graph::merge_lists(&a, &b, 5);
        let mut want: Vec<(f64, u32)> = a.iter().chain(&b).copied().collect();
        want.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        want.truncate(5);
        let bits = |v: &[(f64, u32)]| v.iter().map(|e| (e.0.to_bits(), e.1)).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want));
        assert_eq!(crate::graph::merge_lists(&a, &[], 2), a[..2].to_vec());
        assert!(crate::graph::merge_lists(&[], &[], 3).is_empty());
    }

    /// Passes (from a small memory budget or from checkpoints) measure every pair once, and
    /// give the bytes of a one-pass build.
    #[test]
    fn passes_measure_each_pair_once() {
        use crate::graph::checkpoint::CheckpointOptions;
        let n = 1700;
        let data = tied(n, 4, 21);
        let m = Metric::Euclidean;
        let pairs = (n * (n - 1) / 2) as u64;
        let one = engine(2).graph(&data, 6, &m).unwrap();
        assert_eq!(one.stats.distance_evals, pairs);
        let small = CpuEngine::new(CpuOptions {
            threads: Some(2),
            memory_budget: 4 * super::GRAPH_TILE * super::candidate_bytes(6),
            ..CpuOptions::default()
        })
        .unwrap();
        let many = small.graph(&data, 6, &m).unwrap();
        assert_eq!(many.stats.distance_evals, pairs);
        same(&one, &many, "two blocks a pass");
        let tmp = std::env::temp_dir().join(format!("voisin-passes-{}", std::process::id()));
        let opts = CheckpointOptions {
            dir: tmp.clone(),
            resume: false,
            pass_rows: Some(512),
            stop_after: None,
        };
        let ck = engine(2).graph_checkpointed(&data, 6, &m, &opts).unwrap();
        std::fs::remove_dir_all(&tmp).ok();
        assert_eq!(ck.stats.distance_evals, pairs);
        same(&one, &ck, "one block a pass");
        same(&reference::graph(&data, 6, &m).unwrap(), &one, "reference");
    }

    /// The core driver over several backends (as over several GPUs): tile pairs dealt over
    /// them and their shares merged, a backend out of memory retried by all with half the
    /// edge, checkpointed or not, stopped and resumed from partial lists: the reference graph.
    #[test]
    fn the_driver_deals_over_several_backends() {
        use super::CpuBuild;
        use crate::cpu::plan::Ctx;
        use crate::cpu::tiles::{TileMaker, TileSource};
        use crate::error::{Error, Result};
        use crate::graph::checkpoint::CheckpointOptions;
        use crate::graph::driver::{build, Build};
        use crate::graph::{CpuShare, GraphJob, PassRows, TileGraph, TileOwner};

        /// Out of memory above an edge of 256.
        struct Picky<'a, S>(CpuBuild<'a, S>);
        impl<S: TileSource> TileGraph for Picky<'_, S> {
            type Share = CpuShare;
            fn tile_edge(&self, job: &GraphJob<'_>) -> Result<usize> {
                self.0.tile_edge(job)
            }
            fn share(
                &self,
                job: &GraphJob<'_>,
                edge: usize,
                owns: &TileOwner<'_>,
            ) -> Result<CpuShare> {
                match edge > 256 {
                    true => Err(Error::OutOfMemory(format!("edge {edge}"))),
                    false => self.0.share(job, edge, owns),
                }
            }
            fn finish(
                &self,
                job: &GraphJob<'_>,
                share: &CpuShare,
                rows: Range<usize>,
            ) -> Result<PassRows> {
                self.0.finish(job, share, rows)
            }
            fn retry_smaller(&self, e: &Error) -> bool {
                matches!(e, Error::OutOfMemory(_))
            }
            fn partial_kind(&self, job: &GraphJob<'_>) -> Result<Option<String>> {
                self.0.partial_kind(job)
            }
            fn partial_bytes(&self, share: &CpuShare, rows: &[Range<usize>]) -> Vec<u8> {
                self.0.partial_bytes(share, rows)
            }
            fn partial_share(
                &self,
                job: &GraphJob<'_>,
                rows: &[Range<usize>],
                bytes: &[u8],
            ) -> Result<CpuShare> {
                self.0.partial_share(job, rows, bytes)
            }
        }

        let (n, k, m) = (1500, 7, Metric::Euclidean);
        let data = tied(n, 3, 40);
        let want = reference::graph(&data, k, &m).unwrap();
        let v = data.as_vectors().unwrap();
        let src = TileMaker::new(&m, v, v);
        let ctx = Ctx::new(2, 1 << 30, None);
        let tmp = tempfile::tempdir().unwrap();
        let ckpt = |name: &str, resume: bool, stop_after: Option<usize>| CheckpointOptions {
            pass_rows: Some(512),
            stop_after,
            ..CheckpointOptions::new(tmp.path().join(name), resume)
        };
        let run = |parts: usize, checkpoint: Option<&CheckpointOptions>| {
            let b = Build {
                data: &data,
                metric: &m,
                k,
                edge: 1024,
                max_pass_rows: usize::MAX,
                checkpoint,
            };
            build(&b, || {
                Ok((0..parts)
                    .map(|_| {
                        Picky(CpuBuild {
                            src: &src,
                            ctx: &ctx,
                            n,
                            k,
                        })
                    })
                    .collect())
            })
            .map(|rows| KnnResult::from_rows(rows, k, &m))
        };
        for parts in [1, 3] {
            same(
                &want,
                &run(parts, None).unwrap(),
                &format!("{parts} backends"),
            );
            let name = format!("c{parts}");
            let full = run(parts, Some(&ckpt(&name, false, None))).unwrap();
            same(&want, &full, &format!("{parts} backends, checkpointed"));
            let name = format!("s{parts}");
            assert!(run(parts, Some(&ckpt(&name, false, Some(1)))).is_err());
            let resumed = run(parts, Some(&ckpt(&name, true, None))).unwrap();
            same(&want, &resumed, &format!("{parts} backends, resumed"));
        }
    }

    #[test]
    fn batches_of_tiles_match_brute_force() {
        let e = engine(2);
        let data = tied(700, 3, 31);
        let m = Metric::Euclidean;
        let blocks: Vec<Range<usize>> = [0, 100, 150, 600, 700]
            .windows(2)
            .map(|w| w[0]..w[1])
            .collect();
        let nb = blocks.len();
        let mut rng = StdRng::seed_from_u64(8);
        for trial in 0..6 {
            // The whole upper triangle first, then random batches with tiles repeated and in
            // both orders.
            let mut tiles = Vec::new();
            for i in 0..nb {
                for j in 0..nb {
                    if (trial == 0 && i <= j) || (trial > 0 && rng.gen_bool(0.4)) {
                        tiles.push((blocks[i].clone(), blocks[j].clone()));
                    }
                }
            }
            let got = e.tile_lists(&data, &tiles, 5, &m).unwrap();
            let listed: Vec<&Range<usize>> = got.iter().map(|(r, _)| r).collect();
            let mut want_listed: Vec<&Range<usize>> =
                tiles.iter().flat_map(|(r, c)| [r, c]).collect();
            want_listed.sort_by_key(|r| r.start);
            want_listed.dedup();
            assert_eq!(listed, want_listed, "trial {trial}");
            for (r, lists) in &got {
                let paired = |c: &Range<usize>| {
                    tiles
                        .iter()
                        .any(|(x, y)| (x == r && y == c) || (y == r && x == c))
                };
                let partners: Vec<usize> = blocks
                    .iter()
                    .filter(|c| paired(c))
                    .flat_map(|c| c.clone())
                    .collect();
                for (item, list) in r.clone().zip(lists) {
                    let mut want: Vec<(f64, u32)> = partners
                        .iter()
                        .filter(|&&j| j != item)
                        .map(|&j| (item_key(&m, &data, j, &data, item), j as u32))
                        .collect();
                    want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    want.truncate(5);
                    assert_eq!(list, &want, "trial {trial} item {item}");
                }
            }
        }
        let err = e
            .tile_lists(&data, &[(0..10, 10..20), (5..15, 30..40)], 3, &m)
            .unwrap_err();
        assert!(err.is_user_error(), "{err}");
    }
}
