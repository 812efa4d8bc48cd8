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
//! The same tile scan serves [`cross_tile`]: the exact lists of one rectangle of the distance
//! matrix in both directions, for drivers that deal tiles elsewhere (ranks, devices) and merge
//! the lists themselves.
//!
//! Candidates live in one lock per row block. A tile locks its lower block, then its higher
//! one (so two tiles never wait on each other in a cycle), scans, and unlocks; the final
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

/// The exact lists of one tile (items `rows` against items `cols`), each sorted by
/// (key, index) and holding at most k entries. Lists of one item from tiles over disjoint
/// sets of other items merge exactly with [`crate::select::merge_sorted`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TileLists {
    /// For each item of `rows`, in order: its nearest items of `cols`, itself excluded.
    pub rows: Vec<Vec<(f64, u32)>>,
    /// For each item of `cols`, in order: its nearest items of `rows`. Empty for a diagonal
    /// tile (`rows == cols`), whose row lists already are its column lists.
    pub cols: Vec<Vec<(f64, u32)>>,
}

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
    scan_pairs(
        src,
        blocks,
        (p0, p1),
        &pass_tiles(p0, p1, blocks.len()),
        k,
        ctx,
    )
}

/// Exact lists of items `rows` against items `cols`, each pair measured once. The ranges must
/// be equal (a diagonal tile: self excluded, column lists left empty) or disjoint.
pub fn cross_tile<S: TileSource>(
    src: &S,
    rows: (usize, usize),
    cols: (usize, usize),
    k: usize,
    ctx: &Ctx,
) -> TileLists {
    let split = |(a, b): (usize, usize)| -> Vec<(usize, usize)> {
        ranges(b - a, GRAPH_TILE)
            .into_iter()
            .map(|(x, y)| (a + x, a + y))
            .collect()
    };
    let diagonal = rows == cols;
    let mut blocks = split(rows);
    let nr = blocks.len();
    let tiles: Vec<(usize, usize)> = if diagonal {
        (0..nr).flat_map(|i| (i..nr).map(move |j| (i, j))).collect()
    } else {
        blocks.extend(split(cols));
        let nb = blocks.len();
        (0..nr)
            .flat_map(|i| (nr..nb).map(move |j| (i, j)))
            .collect()
    };
    ctx.add_total(tiles.len() as u64);
    let cands = scan_pairs(src, &blocks, (0, blocks.len()), &tiles, k, ctx);
    let items = blocks.iter().flat_map(|&(a, b)| a..b);
    let mut lists: Vec<Vec<(f64, u32)>> = cands
        .into_par_iter()
        .zip(items.collect::<Vec<_>>())
        .map(|(c, item)| rerank(src, item, c, k, ctx))
        .collect();
    let cols = lists.split_off(rows.1 - rows.0);
    TileLists { rows: lists, cols }
}

/// Measures `tiles` (pairs of indices into `blocks`) and returns the candidates of the items
/// of blocks `keep.0..keep.1`, in block order. A tile's first block must be kept; a tile of a
/// block with itself is a diagonal one; a tile with two kept blocks must name the lower one
/// first and feeds both; a tile whose second block is not kept feeds its rows only.
fn scan_pairs<S: TileSource>(
    src: &S,
    blocks: &[(usize, usize)],
    (p0, p1): (usize, usize),
    tiles: &[(usize, usize)],
    k: usize,
    ctx: &Ctx,
) -> Vec<Candidates> {
    let acc: Vec<Mutex<Vec<Candidates>>> = blocks[p0..p1]
        .iter()
        .map(|&(a, b)| Mutex::new((a..b).map(|_| Candidates::new(k)).collect()))
        .collect();
    let own = |b: usize| (p0..p1).contains(&b);
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
                let mut cands = acc[bi - p0].lock().expect("graph lock");
                scan_diagonal(keys, width, bound, i0, &mut cands);
                ctx.count(((i1 - i0) * (i1 - i0).saturating_sub(1) / 2) as u64);
            } else if own(bj) {
                debug_assert!(bi < bj, "lock order");
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

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use rand::{rngs::StdRng, Rng, SeedableRng};

    use crate::cpu::{CpuEngine, CpuOptions};
    use crate::metric::exact::item_key;
    use crate::select::merge_sorted;
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
            rows[item] = merge_sorted(&rows[item], list, kk);
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
}
