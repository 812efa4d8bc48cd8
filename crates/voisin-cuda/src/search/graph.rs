//! k-NN graph (self-join) on the device with the symmetric tiling of [Dashti13] §3.2 (docs/references.md): only tiles
//! (I, J) with I ≤ J are computed; each gives row candidates to the items of I and, through a
//! transposed copy, column candidates to the items of J. Self pairs are skipped in the kernel.
//!
//! Owns the triangle schedule and the graph's rows as a candidate source; proving and re-ranking are search/finish.rs's.

use cudarc::driver::{CudaSlice, CudaView};
use rayon::prelude::*;
use voisin::graph::{Share, TileOwner};
use voisin::{Error, Metric, Result, Stats, VectorSet};

use crate::numerics::plan::{BoundParts, Numerics};
use crate::ops::device_set::DeviceSet;
use crate::ops::locality::{self, Locality};
use crate::ops::pair::{self, PairKind};
use crate::ops::scaled::{self, ScaledRows};
use crate::ops::select::{self, ListsOut, Select, TileAt, TileIn};
use crate::ops::survivors::{self, Survivors};
use crate::ops::{exact, tile, Budget};
use crate::options::Fusion;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu, Room};
use crate::runtime::probe::Phases;
use crate::search::finish::{finish, CandidateSource, Raw, RowItems};
use crate::search::knn;
use crate::search::{pilot, shard, SearchCtx};

/// Tile pairs queued ahead of the device: enough to keep it busy (each pair is milliseconds of
/// work), few enough that the host never waits inside a launch on a full queue.
const IN_FLIGHT: usize = 4;

/// The tile edge of the symmetric schedule for `n` items and lists of `kp` under `budget`:
/// square tiles within the budget, one buffer or two when the column candidates go through a
/// transpose. Large tiles mean fewer, larger sgemm calls and launches (16384² is 1 GiB).
///
/// The tile filter's buffers (8 bytes per tile row and slot, 67 MB at 16384 and k = 10) stay
/// outside the budget, as the candidate lists do: counting them halved the tile at the default
/// budget, and the graph ran slower on 8192² tiles with the filter than on 16384² without it
/// (docs/design/graph-tile-filter.md).
///
/// An edge past the fused pair's block is a whole number of blocks, so that a tile's blocks are
/// the locality order's (ops/locality.rs), whatever `n`.
pub(crate) fn tile_edge(n: usize, kp: usize, budget: &Budget) -> usize {
    let bufs = if kp == select::COLS_KP { 1 } else { 2 };
    let mut t = 16384usize.min(n.max(1));
    while t > 64 && bufs * t * t * 4 > budget.bytes {
        t /= 2;
    }
    if t > abi::PF_BM {
        t -= t % abi::PF_BM;
    }
    t
}

/// Filtered pairs whose rows' survivors share one merge. A merge is a launch over the tile's
/// rows, most of which found nothing in a warm pair (two merges took ~67 µs of a ~0.45 ms
/// pair, H200); rows filtered meanwhile against the older thresholds offer a few more
/// survivors, which the buffers hold (`survivors::filter_cap`: a warm pair offers a row about
/// kp·t/s of them after s items, far under the cap summed over four pairs). Later pairs can
/// read the older thresholds and stay exact: a threshold only has to be at least the list's
/// final largest key.
const ROW_MERGE_EVERY: usize = 4;

/// Fewest tiles a set spans for its lists to be seeded from a spread sample (`seed`) rather than
/// warmed by the first tile row. Measured on one H200 (graph-tile-filter.md, "Session 21"): at
/// 62 tiles (1M × 128, k = 10) seeding took 5 % off every data kind; at 4 tiles (the real set,
/// 65,536 sorted words' embeddings) it cost 34 %. A sorted set's near neighbours sit in a few
/// tiles, so the kp·n/s items a sample's threshold lets through over the whole set come in one
/// or two pairs and overflow the buffers; the few written pairs of a small set prove more.
pub(crate) const SEED_TILES: usize = 8;

/// The graph's tile edge for `n` items and `k` under a budget.
pub(crate) fn edge_for(n: usize, k: usize, budget: &Budget) -> usize {
    let kp = knn::first_list(k.max(1)).max(select::COLS_KP);
    tile_edge(n, kp, budget)
}

/// Candidate lists of the tile pairs of edge `tile` that `owns` accepts, on a set already on
/// this GPU (`ddev`, the rows of `set`). With `keep`, lists the block selection made stay on
/// the device, for a build that proves them there ([`prove`]): only a share that is the whole
/// build may be kept, since merging or sending a share brings it to the host.
pub(crate) fn lists(
    ctx: &SearchCtx<'_>,
    ddev: &DeviceSet,
    set: &VectorSet,
    k: usize,
    tile: usize,
    owns: &TileOwner<'_>,
    keep: bool,
) -> Result<PartialGraph> {
    let (gpu, plan) = (ctx.gpu, ctx.plan);
    let n = set.len();
    // The set against itself: self pairs sit among the lists.
    let budget = ctx.budget()?;
    let kp = pilot::pilot_list(ctx, ddev, set, k, true, &budget)?;
    let nt = n.div_ceil(tile);
    let size = |it: usize| ((it + 1) * tile).min(n) - it * tile;
    // The symmetric schedule needs the block kernel's running lists; radix selection works
    // on whole rows, so it runs tile rows of the set against the whole set.
    let (lists, evals) = match ctx.select().resolve(kp)? {
        Select::Block => {
            let evals = (0..nt)
                .flat_map(|i| (i..nt).map(move |j| (i, j)))
                .filter(|&(i, j)| owns(i, j))
                .map(|(i, j)| (size(i) * size(j)) as u64 / if i == j { 2 } else { 1 })
                .sum();
            // Small lists are padded to the column kernel's size so the column candidates
            // are read in place (kernels/select_cols.cu) instead of through a transpose.
            let kp = Select::Block.width(kp).max(select::COLS_KP);
            // The host memory kept lists' rows come back into, touched while the GPU works:
            // started with the passes, it is ready when the rows are (the re-rank alone took
            // 14 ms, too short to hide the touching of 120 MB at 1M items and k = 10).
            let room = (keep && provable(plan, set, k, kp)).then(|| Room::start(n * k));
            let mut lists = symmetric_candidates(gpu, plan, ddev, kp, tile, owns, ctx.opts.fusion)?;
            lists.room = room;
            let evals: u64 = evals - lists.skipped.min(evals);
            let lists = if keep {
                Held::Device(lists)
            } else {
                Held::Host(lists.download(gpu)?)
            };
            (lists, evals)
        }
        sel => {
            // The self pair takes a slot: whole-row lists get one more; running lists keep
            // kp, whose margin over k (at least 8) already covers it.
            let kp = if sel.whole_rows() {
                (kp + 1).min(n)
            } else {
                kp
            };
            // The passes keep the list `pass_list` makes of kp (twice as long under TF32 for
            // 64..=256, where the selection keeps that many): the slots hold that many.
            let mut lists = Lists::done(n, knn::pass_list(plan, kp, sel));
            let mut evals = 0;
            for it in (0..nt).filter(|&it| owns(it, it)) {
                let rows = it * tile..it * tile + size(it);
                let sub = DeviceSet::range(gpu, plan, set, rows.clone())?;
                let raws = ctx.shrinking(ctx.budget()?, |b| {
                    knn::candidates(ctx, ddev, &sub, kp, sel, b)
                })?;
                evals += (rows.len() * n) as u64;
                for (r, raw) in rows.zip(raws) {
                    lists.set(r, raw);
                }
            }
            (Held::Host(lists), evals)
        }
    };
    Ok(PartialGraph::held(n, k, lists, evals))
}

/// The graph's prove-widen-re-rank step on a set already on this GPU: the rows of every item
/// from a share that covers the whole triangle.
pub(crate) fn prove(
    ctx: &SearchCtx<'_>,
    ddev: &DeviceSet,
    set: &VectorSet,
    metric: &Metric,
    part: PartialGraph,
    stats: &mut Stats,
) -> Result<Vec<Vec<(f64, u32)>>> {
    stats.distance_evals += part.distance_evals;
    let k = part.k;
    let lists = match part.lists {
        Held::Device(d) => return prove_on_device(ctx, ddev, set, metric, k, d, stats),
        Held::Host(l) => l,
    };
    let rows = GraphRows {
        first: 0,
        k,
        width: lists.width,
    };
    prove_rows(ctx, ddev, set, metric, rows, lists.into_raws(), stats)
}

/// Whether [`prove_on_device`] proves lists of `width` that met every other item on the device
/// (metrics with exact keys there, rows narrower than `exact::STAGED_MIN_DIM`, sorted widths).
pub(crate) fn provable(plan: &Numerics, set: &VectorSet, k: usize, width: usize) -> bool {
    plan.exact_code.is_some()
        && plan.distance_form.is_some()
        && set.dim() < exact::STAGED_MIN_DIM
        && width.is_power_of_two()
        && k > 0
}

/// [`prove`] of lists still on the device: kernels/finish/rerank.cu proves each item's sorted
/// list and re-ranks it on exact keys there, so only k (key, index) pairs per item come back;
/// the lists it cannot prove (or that are not in the form it proves) come back alone and go
/// through the host's prove-widen-re-rank. Lists of a metric without exact keys on the device,
/// or that did not meet every other item, go to the host whole; so do wide rows
/// (`exact::STAGED_MIN_DIM`), whose keys the host's pairs get from rows staged by their warp
/// (a thread per key, as the rerank kernel has, walked the wide graph's keys 2.6× slower).
///
/// The host finish of a 1M-item u8 graph took 107 ms (sort and prove 4.5, widen and list pairs
/// 19.4, exact keys 21.5, final sort 22.9 ms) and about 38 ms more untraced, most of it the
/// 256 MB of lists coming back and their million small vectors (session 17, traced).
fn prove_on_device(
    ctx: &SearchCtx<'_>,
    ddev: &DeviceSet,
    set: &VectorSet,
    metric: &Metric,
    k: usize,
    mut lists: DeviceLists,
    stats: &mut Stats,
) -> Result<Vec<Vec<(f64, u32)>>> {
    let (gpu, plan) = (ctx.gpu, ctx.plan);
    let n = set.len();
    let w = lists.width;
    let codes = plan.exact_code.zip(plan.distance_form);
    let whole = lists.seen.iter().all(|&s| s + 1 >= n);
    let Some((code, form)) = codes.filter(|_| whole && provable(plan, set, k, w)) else {
        let host = lists.download(gpu)?;
        let rows = GraphRows {
            first: 0,
            k,
            width: w,
        };
        return prove_rows(ctx, ddev, set, metric, rows, host.into_raws(), stats);
    };
    let started = std::time::Instant::now();
    let mut tr = gpu.phases();
    let bound = BoundParts::of(plan);
    let max_norm = ddev.max_norm();
    let abs: Vec<f64> = ddev.norm()[..n]
        .par_iter()
        .map(|&qn| plan.abs_bound(qn, max_norm))
        .collect();
    let sides = exact::Sides {
        bset: set,
        qset: set,
        bdev: ddev,
        qdev: ddev,
    };
    let job = exact::Rerank {
        sides: &sides,
        code,
        form,
        k,
        whole: n - 1,
        rel: bound.rel,
        tiny: bound.tiny,
    };
    // The rows' host memory, touched on a helper thread (knn.rs `device_answers` says why),
    // started with the candidate passes where `lists` made them.
    let m = n * k;
    let room = lists.room.take().unwrap_or_else(|| Room::start(m));
    let mut out = exact::Reranked::keys(gpu, n, k)?;
    let sorted = exact::SortedLists {
        val: &lists.val.slice(..n * w),
        idx: &lists.idx.slice(..n * w),
        width: w,
        q_off: 0,
    };
    exact::rerank(gpu, &job, sorted, &abs, &mut out, 0)?;
    let status = gpu.download(&out.status.slice(..n))?;
    tr.mark("graph: device prove and re-rank");
    let (mut keys, mut ids) = room.take()?;
    gpu.download_into(&out.exact_keys()?.slice(..m), &mut keys)?;
    gpu.download_into(&out.ids.slice(..m), &mut ids)?;
    tr.mark("graph: download k per item");
    let (open, evals) = exact::open_rows(&status);
    stats.exact_evals += evals;
    let mut rows: Vec<Vec<(f64, u32)>> = (0..n)
        .into_par_iter()
        .map(|r| match status[r] {
            exact::NOT_DONE => Vec::new(),
            _ => keys[r * k..(r + 1) * k]
                .iter()
                .copied()
                .zip(ids[r * k..(r + 1) * k].iter().copied())
                .collect(),
        })
        .collect();
    tr.mark("graph: rows");
    tr.note(format_args!(
        "{} of {n} items not proved on their lists",
        open.len()
    ));
    stats.select += started.elapsed();
    let widens = w < knn::widest(n) && ctx.widen_select() != Select::Radix;
    if !open.is_empty() && widens {
        // Wider lists of the open items, proved and re-ranked on the device too.
        drop(lists);
        widen_on_device(ctx, &sides, metric, k, w, open, &mut rows, stats)?;
        tr.mark("graph: open items widened");
    } else if !open.is_empty() {
        let (hv, hi, keep) = select::download_lists(
            gpu,
            Select::Block,
            (&lists.val.slice(..n * w), &lists.idx.slice(..n * w)),
            w,
            w,
            n,
            Some(&open),
        )?;
        let raws = knn::raws_of(&hv, &hi, keep, n - 1);
        drop(lists);
        let open = OpenRows { open, raws, kp: w };
        finish_on_host(ctx, &sides, metric, k, open, &mut rows, stats)?;
        tr.mark("graph: host finish of the open items");
    }
    Ok(rows)
}

/// Widens the graph rows `open` whose first lists (of `width`) did not prove, on the device
/// (`knn::widen_on_device`): each is a query against the whole set for its k + 1 nearest on
/// exact keys, itself among them or not; dropping itself, or else the last, leaves its row
/// ([`without`]). The rows still open at the widest sorted list go to the host's
/// prove-widen-re-rank with those lists. Fills `rows` of the items it finishes.
#[allow(clippy::too_many_arguments)]
fn widen_on_device(
    ctx: &SearchCtx<'_>,
    sides: &exact::Sides<'_>,
    metric: &Metric,
    k: usize,
    width: usize,
    open: Vec<u32>,
    rows: &mut [Vec<(f64, u32)>],
    stats: &mut Stats,
) -> Result<()> {
    let items: Vec<usize> = open.iter().map(|&r| r as usize).collect();
    let knn::Widened { open: left, last } =
        knn::widen_on_device::<f64>(ctx, sides, k + 1, width, items, stats, |r, keys, ids| {
            let nearest = keys.iter().copied().zip(ids.iter().copied());
            rows[r] = without(nearest, r as u32);
        })?;
    if left.is_empty() {
        return Ok(());
    }
    let Some((raws, kp)) = last else {
        return Err(Error::device(
            "cuda: graph rows left open without lists (bug)",
        ));
    };
    let open = left.iter().map(|&r| r as u32).collect();
    finish_on_host(
        ctx,
        sides,
        metric,
        k,
        OpenRows { open, raws, kp },
        rows,
        stats,
    )
}

/// Graph rows the device left open, with their lists (`kp` slots) downloaded.
struct OpenRows {
    open: Vec<u32>,
    raws: Vec<Raw>,
    kp: usize,
}

/// The host's prove-widen-re-rank of the rows `rows.open` of a graph whose set is on this GPU,
/// from their downloaded lists: fills their `rows` and counts them as finished on the host.
fn finish_on_host(
    ctx: &SearchCtx<'_>,
    sides: &exact::Sides<'_>,
    metric: &Metric,
    k: usize,
    open: OpenRows,
    rows: &mut [Vec<(f64, u32)>],
    stats: &mut Stats,
) -> Result<()> {
    let OpenRows { open, raws, kp } = open;
    ctx.counters
        .host_finished
        .fetch_add(open.len(), std::sync::atomic::Ordering::Relaxed);
    let qnorm: Vec<f64> = open
        .iter()
        .map(|&r| sides.qdev.norm()[r as usize])
        .collect();
    let mut src = RowsOfGraph {
        ctx,
        metric,
        sides,
        qnorm: qnorm.into(),
        items: RowItems::Of(open.clone()),
    };
    let done = finish(ctx.plan, &mut src, k, kp, raws, stats)?;
    for (&r, row) in open.iter().zip(done) {
        rows[r as usize] = row;
    }
    Ok(())
}

/// The row of item `me` from its k + 1 nearest among all items, sorted: itself dropped, or the
/// last where it is not among them (the k nearest of the others either way).
fn without(nearest: impl ExactSizeIterator<Item = (f64, u32)>, me: u32) -> Vec<(f64, u32)> {
    let k = nearest.len() - 1;
    let mut row: Vec<(f64, u32)> = nearest.filter(|e| e.1 != me).collect();
    row.truncate(k);
    row
}

/// Which rows of a graph [`prove_rows`] finishes: from item `first` on, `k` each, from
/// candidate lists of `width` slots.
#[derive(Clone, Copy)]
pub(crate) struct GraphRows {
    pub first: usize,
    pub k: usize,
    pub width: usize,
}

/// Proves, widens and re-ranks the candidates `raws` of the items `rows.first..` of a graph,
/// each list covering every other item (a whole share of the triangle or a finished pass of
/// one): their final rows. Widening starts from the lists' own size (the pilot's choice, padded
/// as the selection needed): no second pilot.
pub(crate) fn prove_rows(
    ctx: &SearchCtx<'_>,
    ddev: &DeviceSet,
    set: &VectorSet,
    metric: &Metric,
    rows: GraphRows,
    raws: Vec<Raw>,
    stats: &mut Stats,
) -> Result<Vec<Vec<(f64, u32)>>> {
    let first = rows.first;
    ctx.counters
        .host_finished
        .fetch_add(raws.len(), std::sync::atomic::Ordering::Relaxed);
    let sides = exact::Sides {
        bset: set,
        qset: set,
        bdev: ddev,
        qdev: ddev,
    };
    let mut src = RowsOfGraph {
        ctx,
        metric,
        sides: &sides,
        qnorm: ddev.norm()[first..first + raws.len()].into(),
        items: RowItems::From(first),
    };
    finish(ctx.plan, &mut src, rows.k, rows.width, raws, stats)
}

/// Rows of a graph whose set is on this GPU (`items`: which item each is): wider lists against
/// the whole set, exact keys on this GPU, each row's own item dropped.
struct RowsOfGraph<'a> {
    ctx: &'a SearchCtx<'a>,
    metric: &'a Metric,
    sides: &'a exact::Sides<'a>,
    qnorm: std::borrow::Cow<'a, [f64]>,
    items: RowItems,
}

impl CandidateSource for RowsOfGraph<'_> {
    fn base_len(&self) -> usize {
        self.sides.bset.len()
    }

    fn norms(&self) -> (&[f64], f64) {
        (&self.qnorm, self.sides.bdev.max_norm())
    }

    fn self_items(&self) -> Option<RowItems> {
        Some(self.items.clone())
    }

    fn redo(&mut self, ids: &[usize], kp: usize) -> Result<Vec<Raw>> {
        let ctx = self.ctx;
        let items: Vec<usize> = ids.iter().map(|&q| self.items.item(q)).collect();
        let sub = DeviceSet::gather(ctx.gpu, ctx.plan, self.sides.qset, &items)?;
        ctx.shrinking(ctx.budget()?, |b| {
            knn::candidates(ctx, self.sides.bdev, &sub, kp, ctx.widen_select(), b)
        })
    }

    fn exact_keys(&mut self, pairs: &[[u32; 2]]) -> Result<Vec<f64>> {
        if let RowItems::From(0) = self.items {
            return exact::keys(self.ctx.gpu, self.metric, self.sides, pairs);
        }
        let shifted: Vec<[u32; 2]> = pairs
            .par_iter()
            .map(|&[q, b]| [self.items.item(q as usize) as u32, b])
            .collect();
        exact::keys(self.ctx.gpu, self.metric, self.sides, &shifted)
    }

    fn phases(&self) -> Phases {
        self.ctx.gpu.phases()
    }
}

/// Block-select candidates (`kp` per item, self excluded) for every item of `data`, from the
/// tile pairs (I, J) of edge `t` with I ≤ J that `owns` accepts. An item's list covers the items
/// of the owned pairs that hold it, and is complete when it holds all of them, so the lists of
/// callers that split the triangle between them merge with [`PartialGraph::merge`].
///
/// Pairs whose lists are warm go through the tile filter; unless `fusion` is off, on tensor
/// cores that is the fused tile pair (ops/pair.rs), which never writes the tile.
pub(crate) fn symmetric_candidates(
    gpu: &Gpu,
    plan: &Numerics,
    data: &DeviceSet,
    kp: usize,
    t: usize,
    owns: &TileOwner<'_>,
    fusion: Fusion,
) -> Result<DeviceLists> {
    let n = data.n;
    let nt = n.div_ceil(t);
    let size = |it: usize| ((it + 1) * t).min(n) - it * t;
    // How many other items each tile row's lists see, for completeness.
    let seen: Vec<usize> = (0..nt)
        .map(|it| {
            (0..nt)
                .filter(|&jt| owns(it.min(jt), it.max(jt)))
                .map(|jt| size(jt) - usize::from(jt == it))
                .sum()
        })
        .collect();
    let stream = &gpu.stream;
    let alloc = |len: usize| unsafe { stream.alloc::<f32>(len.max(1)) }.map_err(dev("allocating"));
    let mut lv = alloc(n * kp)?;
    let mut li = unsafe { stream.alloc::<u32>((n * kp).max(1)) }.map_err(dev("allocating"))?;
    select::fill_lists(gpu, &mut lv.slice_mut(..), &mut li.slice_mut(..))?;
    let mut tile_buf = alloc(t * t)?;
    let mut trans = alloc(if kp == select::COLS_KP { 1 } else { t * t })?;
    // Pairs whose lists are warm go through the tile filter (one read of the tile for rows and
    // columns); its buffers, for the rows and the columns of a pair.
    let cap = survivors::filter_cap(kp);
    let mut filtered = match cap {
        Some(cap) => Some((
            Survivors::new(gpu, t, cap, true)?,
            Survivors::new(gpu, t, cap, true)?,
        )),
        None => None,
    };
    // RowItems each tile's lists have been fed so far: a list that has seen fewer than half a tile
    // of items has a threshold too loose to filter with.
    let mut fed = vec![0usize; nt];
    // The fused tile pair for warm pairs, where the plan's tiles allow it, and the written
    // tiles of wide rows, on the set's scaled f16 copy under TF32 plans (made last: where it
    // does not fit, TF32 on the prepared rows). Either use implies `scaled::applies`.
    let fuse_kind = pair::kind_for(plan).filter(|_| fusion != Fusion::Off && n > 0);
    let wide = scaled::for_tiles(plan);
    // Where pairs are filtered and the set spans SEED_TILES tiles or more, every list is first
    // warmed on items spread over the set and kept as its threshold alone (`seed`), so that
    // every pair is filtered: the first tile row is no longer written and selected cold. A list
    // is warm once it has seen half a tile, or the sample.
    let seeding = filtered.is_some() && nt >= SEED_TILES;
    let (mut warm_at, mut seeded) = (t / 2, false);
    // A whole build of fused pairs on L2 keys runs in locality order (ops/locality.rs): the
    // seed gives each item its nearest sample item, the set is reordered by them, and each
    // fused pair runs only the kernel tiles whose blocks' spheres are near enough to pass
    // anything. The lists move to that order and back; `data` is the reordered set from here.
    let whole = (0..nt).all(|i| (i..nt).all(|j| owns(i, j)));
    let mut order = None;
    let reordered;
    let data = if seeding && whole && !wide && fuse_kind.is_some() && locality::applies(plan, n, t)
    {
        let lists = (&mut lv, &mut li, kp);
        let sample = seed(gpu, plan, (data, None), lists, t, &mut tile_buf, true)?;
        (warm_at, seeded) = (sample.size, true);
        fed.fill(warm_at);
        let pairs = nt * (nt + 1) / 2;
        let since = std::time::Instant::now();
        let made = match &sample.heads {
            Some((heads, sample)) => {
                Locality::new(gpu, plan, data, (&heads.slice(..), sample), t, pairs)?
            }
            None => None,
        };
        gpu.phases().note(format_args!(
            "graph: locality order {} in {:.1} ms",
            if made.is_some() { "made" } else { "not made" },
            since.elapsed().as_secs_f64() * 1e3
        ));
        match made {
            Some((set, loc)) => {
                (lv, li) = loc.move_lists(gpu, (&lv, &li), kp, true)?;
                order = Some(loc);
                reordered = set;
                &reordered
            }
            None => data,
        }
    } else {
        data
    };
    let scaled = if n > 0 && (wide || fuse_kind.is_some_and(PairKind::scaled)) {
        ScaledRows::new(gpu, plan, data)?
    } else {
        None
    };
    let fused = fuse_kind.and_then(|kind| pair::Operands::new(plan, data, kind, scaled.as_ref()));
    let tile_rows = scaled.as_ref().filter(|_| wide);
    let tile_block = |a: usize, b: usize| match tile_rows {
        Some(s) => s.block(data, a, b),
        None => data.block(a, b),
    };
    if seeding && !seeded {
        let lists = (&mut lv, &mut li, kp);
        let s = seed(gpu, plan, (data, tile_rows), lists, t, &mut tile_buf, false)?.size;
        fed.fill(s);
        warm_at = s;
    }
    let warm = |fed: usize| fed >= warm_at;
    // Under a probe that asks for it, the first two rows of tiles are timed step by step
    // (synchronising after each kernel) to split the graph's time between sgemm, selection,
    // transpose, the tile filter and its merges (the first row's pairs are cold, most of the
    // second's filtered); otherwise nothing waits.
    let phases = gpu.phases();
    let probe = phases.synchronised_steps();
    const STEPS: [&str; 7] = [
        "sgemm",
        "select",
        "transpose",
        "queue",
        "filter",
        "merge",
        "fused",
    ];
    let mut spent = [[0f64; STEPS.len()]; 2];
    let mut mark = |it: usize, step: usize, since: &mut std::time::Instant| -> Result<()> {
        if probe && it < 2 {
            stream.synchronize().map_err(dev("synchronising"))?;
            spent[it][step] += since.elapsed().as_secs_f64();
            *since = std::time::Instant::now();
        }
        Ok(())
    };
    let mut queued: std::collections::VecDeque<cudarc::driver::CudaEvent> = Default::default();
    let mut filtered_pairs = 0usize;
    let merge_into = |lv: &mut CudaSlice<f32>,
                      li: &mut CudaSlice<u32>,
                      items: std::ops::Range<usize>,
                      out: &mut Survivors|
     -> Result<()> {
        let lists = ListsOut {
            val: &mut lv.slice_mut(items.start * kp..items.end * kp),
            idx: &mut li.slice_mut(items.start * kp..items.end * kp),
            width: kp,
        };
        survivors::merge(gpu, items.len(), lists, out)
    };
    // Filtered pairs of this tile row whose rows' survivors are not merged yet.
    let mut pending_rows = 0usize;
    // The pairs in turn: tile row by tile row; in locality order the diagonal pairs first, so
    // that every list has met its own neighbourhood (its own blocks) before the pairs of far
    // tiles are planned against its threshold.
    let diagonal_first = order.is_some();
    let pairs: Vec<(usize, usize)> = (0..nt)
        .filter(|&it| diagonal_first && owns(it, it))
        .map(|it| (it, it))
        .chain((0..nt).flat_map(|it| {
            (it + usize::from(diagonal_first)..nt)
                .filter(move |&jt| owns(it, jt))
                .map(move |jt| (it, jt))
        }))
        .collect();
    // Each planned pair: its number, kernel tiles, values, and whether it is a diagonal pair
    // (half of whose values count as evaluations); and whether planning goes on: it stops where
    // the diagonal pairs and the first tile row left out under a tenth of their tiles (normal
    // data: the spheres of a block overlap nearly every other).
    let mut planned: Vec<(usize, u64, u64, bool)> = Vec::new();
    let planned_tiles = |planned: &[(usize, u64, u64, bool)]| -> u64 {
        planned.iter().map(|&(_, tiles, _, _)| tiles).sum()
    };
    let mut planning = order.is_some();
    let check_at = nt + nt.saturating_sub(1);
    // The tile row whose rows' survivors wait in their buffer.
    let mut waiting: Option<usize> = None;
    for (p, &(it, jt)) in pairs.iter().enumerate() {
        let (i0, i1) = (it * t, ((it + 1) * t).min(n));
        if let Some(w) = waiting.filter(|&w| w != it && pending_rows > 0) {
            let (row_out, _) = filtered
                .as_mut()
                .expect("pending rows come from the filter");
            merge_into(&mut lv, &mut li, w * t..((w + 1) * t).min(n), row_out)?;
            pending_rows = 0;
        }
        waiting = Some(it);
        if p == check_at && planning {
            if let Some(loc) = &order {
                let ran = loc.tiles_run(gpu, 0..p)?;
                let tiles = planned_tiles(&planned);
                planning = ran * 10 < tiles * 9;
                phases.note(format_args!(
                    "graph: locality order, {ran} of {} kernel tiles run in the first {p} pairs{}",
                    tiles,
                    if planning { "" } else { "; planning stops" }
                ));
            }
        }
        let bi = data.block(i0, i1);
        {
            let (j0, j1) = (jt * t, ((jt + 1) * t).min(n));
            let bj = data.block(j0, j1);
            let (ni, nj) = (i1 - i0, j1 - j0);
            if queued.len() >= IN_FLIGHT {
                let e = queued.pop_front().expect("non-empty");
                e.synchronize().map_err(dev("waiting for a tile"))?;
            }
            queued.push_back(
                stream
                    .record_event(None)
                    .map_err(dev("recording an event"))?,
            );
            let mut since = std::time::Instant::now();
            mark(it, 3, &mut since)?;
            // A pair offers a row about kp·t/f survivors once its list has seen f items: rows
            // that have seen under two tiles merge after every pair, so that a young list's
            // buffer (`survivors::filter_cap`) does not overflow over ROW_MERGE_EVERY pairs.
            let young = fed[it] < 2 * t;
            let filter = filtered
                .as_mut()
                .filter(|_| warm(fed[it]) && (jt == it || warm(fed[jt])));
            fed[it] += nj - usize::from(jt == it);
            if jt != it {
                fed[jt] += ni;
            }
            let fuse = fused.as_ref().filter(|_| filter.is_some());
            if fuse.is_none() {
                let (ti, tj) = (tile_block(i0, i1), tile_block(j0, j1));
                tile::compute(gpu, plan, &ti, &tj, &mut tile_buf.slice_mut(..), nj)?;
                mark(it, 0, &mut since)?;
            }
            let rows_at = TileAt {
                rows: ni,
                cols: nj,
                ld: nj,
                key: plan.key,
                row_off: i0 as u32,
                col_off: j0 as u32,
                exclude_self: true,
            };
            let view: CudaView<'_, f32> = tile_buf.slice(..);
            let rows_in = TileIn {
                values: &view,
                at: rows_at,
                rn: &bi.sqnorm,
                cn: &bj.sqnorm,
            };
            if let Some((row_out, col_out)) = filter {
                filtered_pairs += 1;
                // In locality order a diagonal pair runs in bands of block distance, nearest
                // first, its rows merged after each (locality::DIAGONAL_BANDS).
                let banded = order.is_some() && jt == it && fuse.is_some();
                let bands = if banded {
                    locality::DIAGONAL_BANDS.len()
                } else {
                    1
                };
                for band in 0..bands {
                    if band > 0 {
                        merge_into(&mut lv, &mut li, i0..i1, row_out)?;
                    }
                    let (row_list, col_list) =
                        (lv.slice(i0 * kp..i1 * kp), lv.slice(j0 * kp..j1 * kp));
                    let into = survivors::FilterInto {
                        rows: &row_list,
                        row_out: &mut *row_out,
                        cols: (jt != it).then_some((&col_list, &mut *col_out)),
                        width: kp,
                    };
                    match fuse {
                        Some(ops) => {
                            let at = pair::PairAt {
                                row_off: i0 as u32,
                                col_off: j0 as u32,
                                exclude_self: true,
                            };
                            let work = match order.as_mut().filter(|_| planning || banded) {
                                Some(loc) => {
                                    if band == 0 {
                                        let tiles =
                                            ni.div_ceil(abi::PF_BM) * nj.div_ceil(abi::PF_BN);
                                        let values = ni * nj;
                                        planned.push((p, tiles as u64, values as u64, jt == it));
                                    }
                                    let lists = (&row_list, &col_list);
                                    let both = jt != it;
                                    let (a, b) = ((i0, ni), (j0, nj));
                                    let which = (p, banded.then_some(band));
                                    Some(loc.plan_pair(gpu, which, a, b, lists, kp, both)?)
                                }
                                None => None,
                            };
                            let (rows, cols) = ((ops, i0..i1), (ops, j0..j1));
                            pair::filter(gpu, plan, rows, cols, at, into, work.as_ref())?;
                            mark(it, 6, &mut since)?;
                        }
                        None => {
                            survivors::tile_filter(gpu, rows_in, into)?;
                            mark(it, 4, &mut since)?;
                        }
                    }
                }
                // The columns' survivors merge at once (the next pair's columns are another
                // tile); the rows' wait in their buffer for ROW_MERGE_EVERY pairs or the end of
                // the tile row.
                if jt != it {
                    merge_into(&mut lv, &mut li, j0..j1, col_out)?;
                }
                pending_rows += 1;
                if pending_rows >= ROW_MERGE_EVERY || young {
                    merge_into(&mut lv, &mut li, i0..i1, row_out)?;
                    pending_rows = 0;
                }
                mark(it, 5, &mut since)?;
                continue;
            }
            select::block(
                gpu,
                rows_in,
                ListsOut {
                    val: &mut lv.slice_mut(i0 * kp..i1 * kp),
                    idx: &mut li.slice_mut(i0 * kp..i1 * kp),
                    width: kp,
                },
            )?;
            mark(it, 1, &mut since)?;
            if jt != it && kp == select::COLS_KP {
                let cols_at = TileAt {
                    exclude_self: true,
                    ..rows_at
                };
                select::cols(
                    gpu,
                    TileIn {
                        at: cols_at,
                        ..rows_in
                    },
                    &mut lv.slice_mut(j0 * kp..j1 * kp),
                    &mut li.slice_mut(j0 * kp..j1 * kp),
                )?;
                mark(it, 1, &mut since)?;
            } else if jt != it {
                select::transpose(gpu, &view, ni, nj, nj, &mut trans.slice_mut(..), ni)?;
                mark(it, 2, &mut since)?;
                let cols_at = TileAt {
                    rows: nj,
                    cols: ni,
                    ld: ni,
                    key: plan.key,
                    row_off: j0 as u32,
                    col_off: i0 as u32,
                    exclude_self: true,
                };
                let trans_view = trans.slice(..);
                select::block(
                    gpu,
                    TileIn {
                        values: &trans_view,
                        at: cols_at,
                        rn: &bj.sqnorm,
                        cn: &bi.sqnorm,
                    },
                    ListsOut {
                        val: &mut lv.slice_mut(j0 * kp..j1 * kp),
                        idx: &mut li.slice_mut(j0 * kp..j1 * kp),
                        width: kp,
                    },
                )?;
                mark(it, 1, &mut since)?;
            }
        }
    }
    if let Some(w) = waiting.filter(|_| pending_rows > 0) {
        let (row_out, _) = filtered
            .as_mut()
            .expect("pending rows come from the filter");
        merge_into(&mut lv, &mut li, w * t..((w + 1) * t).min(n), row_out)?;
    }
    // The values of the tiles left out were never computed: they leave the evaluations' count
    // (halved on diagonal pairs, as the count halves those).
    let mut skipped = 0u64;
    if let Some(loc) = &order {
        let ran = loc.tiles_run(gpu, 0..pairs.len())?;
        let values = loc.values_run(gpu, pairs.len())?;
        skipped = planned
            .iter()
            .map(|&(p, _, all, diagonal)| {
                all.saturating_sub(values[p]) / if diagonal { 2 } else { 1 }
            })
            .sum();
        phases.note(format_args!(
            "graph: locality order, {ran} of {} kernel tiles run in {} planned pairs \
             ({skipped} pairs of items left out)",
            planned_tiles(&planned),
            planned.len()
        ));
        (lv, li) = loc.move_lists(gpu, (&lv, &li), kp, false)?;
    }
    let how = match &fused {
        Some(ops) => format!("fused on tensor cores ({:?})", ops.kind()),
        None => "in one read of the tile".into(),
    };
    let written = if tile_rows.is_some() {
        "; written tiles on scaled f16"
    } else {
        ""
    };
    phases.note(format_args!(
        "graph: {filtered_pairs} tile pairs filtered {how} ({} buffer slots per item){written}",
        cap.unwrap_or(0)
    ));
    if probe {
        for (row, spent) in spent.iter().enumerate().take(nt) {
            let steps: Vec<String> = STEPS
                .iter()
                .zip(spent)
                .filter(|(_, &s)| s > 0.0)
                .map(|(name, s)| format!("{name} {:.1} ms", s * 1e3))
                .collect();
            phases.note(format_args!(
                "graph tile row {row} ({} tiles of {t}): {}",
                nt - row,
                steps.join(", ")
            ));
        }
    }
    Ok(DeviceLists {
        n,
        width: kp,
        val: lv,
        idx: li,
        tile: t,
        seen,
        room: None,
        skipped,
    })
}

/// Warms the lists of every item of `data` (`kp` slots each, filled) on items spread over the
/// set ([`DeviceSet::spread`]): written tiles of the sample against tiles of the set, selected,
/// then `select::seed_lists` keeps each list's kp-th key as its threshold with no entries (the
/// sample's items are met again in their own pairs). With the set's scaled f16 copy (`scaled`,
/// the graph's written tiles on wide rows) the tiles run on it and the sample's own copy; where
/// that does not fit, on the prepared rows. `tile_buf` holds a tile of t². Returns the sample's
/// size and, with `heads`, each item's nearest sample item (the locality order's key,
/// ops/locality.rs) with the sample.
///
/// The sample is as small as lets a list's first pair offer it at most half its buffer (about
/// kp·t/s survivors after s items): a quarter of a tile for the lists of 32 a k = 10 graph
/// keeps, half a tile from lists of 64 on. Those lists of 32 are the column kernel's
/// (`select::cols`): the sample is then the tiles' rows and the set's items their columns,
/// selected in place; longer lists take the set's items as rows, through block select.
///
/// A spread sample stands for the set whatever its order: the first items of a sorted set do
/// not, and their thresholds let hundreds of items a pair through (graph-tile-filter.md,
/// "Session 20"). The self pair of a sampled item stays among its sample keys: any threshold
/// keeps the lists' contract (what a list leaves out has a key above a threshold that is at
/// least the list's final largest key), so the answers stay exact, and one item in kp barely
/// moves it.
fn seed(
    gpu: &Gpu,
    plan: &Numerics,
    (data, scaled): (&DeviceSet, Option<&ScaledRows>),
    (lv, li, kp): (&mut CudaSlice<f32>, &mut CudaSlice<u32>, usize),
    t: usize,
    tile_buf: &mut CudaSlice<f32>,
    heads: bool,
) -> Result<Seeded> {
    let n = data.n;
    let cap = survivors::filter_cap(kp).unwrap_or(4 * kp);
    let sample = data.spread(gpu, plan, (t / 4).max(2 * kp * t / cap).min(t / 2))?;
    let s = sample.n;
    let copies = match scaled {
        Some(d) => ScaledRows::new(gpu, plan, &sample)?.map(|m| (d, m)),
        None => None,
    };
    let in_place = kp == select::COLS_KP;
    for i0 in (0..n).step_by(t) {
        let i1 = (i0 + t).min(n);
        let (items, smp) = match &copies {
            Some((d, m)) => (d.block(data, i0, i1), m.block(&sample, 0, s)),
            None => (data.block(i0, i1), sample.block(0, s)),
        };
        // The tile: sample × items for the column kernel, items × sample for block select.
        let (a, b) = if in_place {
            (&smp, &items)
        } else {
            (&items, &smp)
        };
        tile::compute(gpu, plan, a, b, &mut tile_buf.slice_mut(..), b.n)?;
        let view: CudaView<'_, f32> = tile_buf.slice(..);
        // Ids are the tile's positions: the seed drops them.
        let at = TileAt {
            rows: a.n,
            cols: b.n,
            ld: b.n,
            key: plan.key,
            row_off: 0,
            col_off: 0,
            exclude_self: false,
        };
        let tile = TileIn {
            values: &view,
            at,
            rn: &a.sqnorm,
            cn: &b.sqnorm,
        };
        let (val, idx) = (
            &mut lv.slice_mut(i0 * kp..i1 * kp),
            &mut li.slice_mut(i0 * kp..i1 * kp),
        );
        if in_place {
            select::cols(gpu, tile, val, idx)?;
        } else {
            select::block(
                gpu,
                tile,
                ListsOut {
                    val,
                    idx,
                    width: kp,
                },
            )?;
        }
    }
    // Each list's first entry, before the seed drops them: the item's nearest sample item.
    let heads = if heads && n > 0 {
        let lists = (&lv.slice(..n * kp), &li.slice(..n * kp));
        Some(select::prefixes(gpu, lists, kp, 1, None)?.1)
    } else {
        None
    };
    select::seed_lists(
        gpu,
        &mut lv.slice_mut(..n * kp),
        &mut li.slice_mut(..n * kp),
        kp,
        select::SeedFrom::Own { rank: kp },
    )?;
    gpu.phases().note(format_args!(
        "graph: lists seeded from a sample of {s} items spread over {n}"
    ));
    drop(copies);
    Ok(Seeded {
        size: s,
        heads: heads.map(|h| (h, sample)),
    })
}

/// What [`seed`] leaves besides the thresholds: the sample's size and, where asked, each
/// item's nearest sample item (an index of the sample, which comes with it).
struct Seeded {
    size: usize,
    heads: Option<(CudaSlice<u32>, DeviceSet<'static>)>,
}

/// The lists [`symmetric_candidates`] leaves on the device: `width` slots per item of `n`,
/// sorted, an empty slot's index `u32::MAX`; an item of tile `r / tile` has met `seen[r / tile]`
/// other items.
pub(crate) struct DeviceLists {
    n: usize,
    width: usize,
    val: CudaSlice<f32>,
    idx: CudaSlice<u32>,
    tile: usize,
    seen: Vec<usize>,
    /// Where the proved rows will come back to, being made ready meanwhile.
    room: Option<Room<f64>>,
    /// Pairs of items the locality order's left-out tiles never computed (ops/locality.rs),
    /// counted as the graph counts evaluations.
    skipped: u64,
}

impl DeviceLists {
    /// The lists on the host; a list is complete when it holds every item it met.
    fn download(&self, gpu: &Gpu) -> Result<Lists> {
        let (n, kp) = (self.n, self.width);
        let keys = gpu.download(&self.val.slice(..n * kp))?;
        let ids = gpu.download(&self.idx.slice(..n * kp))?;
        Ok(self.on_host(keys, ids))
    }

    fn on_host(&self, keys: Vec<f32>, ids: Vec<u32>) -> Lists {
        let (kp, t) = (self.width, self.tile);
        let complete = ids
            .par_chunks(kp.max(1))
            .enumerate()
            .map(|(r, row)| row.iter().filter(|&&i| i != u32::MAX).count() >= self.seen[r / t])
            .collect();
        Lists {
            width: kp,
            keys,
            ids,
            complete,
        }
    }

    /// [`DeviceLists::download`] through the lists' own stream, for callers that hold no GPU
    /// (a share sent as bytes).
    fn download_on_stream(&self) -> Result<Lists> {
        let (n, kp) = (self.n, self.width);
        let stream = self.val.stream();
        let keys = stream
            .clone_dtoh(&self.val.slice(..n * kp))
            .map_err(dev("downloading lists"))?;
        let ids = stream
            .clone_dtoh(&self.idx.slice(..n * kp))
            .map_err(dev("downloading lists"))?;
        Ok(self.on_host(keys, ids))
    }
}

/// Where a share's lists are: on the host, or still on the device for a build that proves them
/// there.
pub(crate) enum Held {
    Host(Lists),
    Device(DeviceLists),
}

impl Held {
    /// Slots per item.
    pub fn width(&self) -> usize {
        match self {
            Held::Host(l) => l.width,
            Held::Device(d) => d.width,
        }
    }

    /// RowItems.
    pub fn len(&self) -> usize {
        match self {
            Held::Host(l) => l.complete.len(),
            Held::Device(d) => d.n,
        }
    }

    /// The lists on the host (downloaded, when on the device).
    pub fn host(&self) -> Result<std::borrow::Cow<'_, Lists>> {
        Ok(match self {
            Held::Host(l) => std::borrow::Cow::Borrowed(l),
            Held::Device(d) => std::borrow::Cow::Owned(d.download_on_stream()?),
        })
    }

    /// The lists on the host, by value.
    pub fn into_host(self) -> Result<Lists> {
        match self {
            Held::Host(l) => Ok(l),
            Held::Device(d) => d.download_on_stream(),
        }
    }
}

/// Candidate lists of every item, flat: `width` slots per item, a slot with index `u32::MAX`
/// empty. The form the device writes and a process can send as it is.
#[derive(Clone)]
pub(crate) struct Lists {
    pub width: usize,
    pub keys: Vec<f32>,
    pub ids: Vec<u32>,
    pub complete: Vec<bool>,
}

impl Lists {
    /// Item `r`'s entries.
    fn entries(&self, r: usize) -> impl Iterator<Item = (f32, u32)> + '_ {
        let at = r * self.width..(r + 1) * self.width;
        self.keys[at.clone()]
            .iter()
            .zip(&self.ids[at])
            .filter(|e| *e.1 != u32::MAX)
            .map(|(&k, &i)| (k, i))
    }

    /// `n` items whose lists are all empty and complete (computed elsewhere).
    pub fn done(n: usize, width: usize) -> Lists {
        // Filled in parallel: for millions of items these are hundreds of MB of fresh pages,
        // which one thread took ~0.2–1.6 s to fault in and fill.
        Lists {
            width,
            keys: (0..n * width)
                .into_par_iter()
                .map(|_| f32::INFINITY)
                .collect(),
            ids: (0..n * width).into_par_iter().map(|_| u32::MAX).collect(),
            complete: (0..n).into_par_iter().map(|_| true).collect(),
        }
    }

    /// Puts item `r`'s list (at most `width` entries).
    pub fn set(&mut self, r: usize, raw: Raw) {
        let w = self.width;
        assert!(raw.cands.len() <= w, "a list longer than its slots");
        for (slot, (k, i)) in raw.cands.into_iter().enumerate() {
            self.keys[r * w + slot] = k;
            self.ids[r * w + slot] = i;
        }
        self.complete[r] = raw.complete;
    }

    /// One list per item, for the proof.
    fn into_raws(self) -> Vec<Raw> {
        (0..self.complete.len())
            .into_par_iter()
            .map(|r| Raw {
                cands: self.entries(r).collect(),
                complete: self.complete[r],
            })
            .collect()
    }

    /// Merges lists of the same items from shards that saw disjoint items, `width` at most
    /// per item.
    fn merge(parts: &[Lists], width: usize) -> Lists {
        let n = parts.first().map_or(0, |p| p.complete.len());
        let mut out = Lists::done(n, width);
        out.keys
            .par_chunks_mut(width.max(1))
            .zip(out.ids.par_chunks_mut(width.max(1)))
            .zip(out.complete.par_iter_mut())
            .enumerate()
            .for_each_init(Vec::new, |buf, (r, ((keys, ids), complete))| {
                let lists = parts.iter().map(|p| (p.entries(r), p.complete[r]));
                *complete = shard::merge_candidates_into(lists, width, buf);
                for (slot, &(k, i)) in buf.iter().enumerate() {
                    keys[slot] = k;
                    ids[slot] = i;
                }
            });
        out
    }
}

/// One share of a k-NN graph: for every item, candidates from the tile pairs one GPU (or one
/// MPI rank's GPU) computed. Shares of callers that split the triangle between them merge with
/// [`PartialGraph::merge`]; `CudaEngine::graph_finish` turns the merged share into the graph.
///
/// The lists hold approximate f32 keys under a contract (every item that a list's tile pairs
/// hold but the list left out has a key at least the list's largest, unless the list is
/// complete), so a share travels between processes as plain numbers
/// ([`PartialGraph::to_bytes`]).
pub struct PartialGraph {
    /// RowItems of the set.
    pub n: usize,
    /// Neighbours asked for.
    pub k: usize,
    /// Approximate distances computed for this share.
    pub distance_evals: u64,
    pub(crate) lists: Held,
}

impl PartialGraph {
    pub(crate) fn new(n: usize, k: usize, lists: Lists, distance_evals: u64) -> PartialGraph {
        Self::held(n, k, Held::Host(lists), distance_evals)
    }

    fn held(n: usize, k: usize, lists: Held, distance_evals: u64) -> PartialGraph {
        PartialGraph {
            n,
            k,
            distance_evals,
            lists,
        }
    }

    /// Merges the shares of callers that computed disjoint sets of tile pairs of the same data,
    /// k and tile edge.
    pub fn merge(parts: Vec<PartialGraph>) -> Result<PartialGraph> {
        let first = parts
            .first()
            .ok_or_else(|| Error::invalid("no graph shares to merge"))?;
        let (n, k, width) = (first.n, first.k, first.lists.width());
        if parts
            .iter()
            .any(|p| p.n != n || p.k != k || p.lists.width() != width || p.lists.len() != n)
        {
            return Err(Error::invalid(
                "graph shares differ in size, k or list length",
            ));
        }
        let distance_evals = parts.iter().map(|p| p.distance_evals).sum();
        if parts.len() == 1 {
            let one = parts.into_iter().next().expect("one");
            return Ok(PartialGraph::held(n, k, one.lists, distance_evals));
        }
        let lists = parts
            .into_iter()
            .map(|p| p.lists.into_host())
            .collect::<Result<Vec<Lists>>>()?;
        Ok(PartialGraph::new(
            n,
            k,
            Lists::merge(&lists, width),
            distance_evals,
        ))
    }

    /// The share as bytes, little-endian: n, k, the slots per item and the distance count as
    /// u64; then n × slots keys (f32), n × slots indices (u32, u32::MAX for an empty slot) and
    /// n complete flags (one byte each). Lists still on the device (a one-GPU build's own share,
    /// never sent) come down first; should that fail, the bytes are empty and read back as
    /// malformed.
    pub fn to_bytes(&self) -> Vec<u8> {
        let Ok(l) = self.lists.host() else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(32 + l.keys.len() * 8 + self.n);
        for v in [self.n, self.k, l.width, self.distance_evals as usize] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
        out.extend(l.keys.iter().flat_map(|k| k.to_le_bytes()));
        out.extend(l.ids.iter().flat_map(|i| i.to_le_bytes()));
        out.extend(l.complete.iter().map(|&c| u8::from(c)));
        out
    }

    /// Reads what [`PartialGraph::to_bytes`] wrote; a clear error on a short or malformed buffer.
    pub fn from_bytes(b: &[u8]) -> Result<PartialGraph> {
        let bad = || Error::invalid("graph share: truncated or malformed bytes");
        let word = |i: usize| -> Result<usize> {
            let s = b.get(i * 8..i * 8 + 8).ok_or_else(bad)?;
            Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")) as usize)
        };
        let (n, k, width, evals) = (word(0)?, word(1)?, word(2)?, word(3)?);
        let slots = n.checked_mul(width).ok_or_else(bad)?;
        let len = slots
            .checked_mul(8)
            .and_then(|x| x.checked_add(32 + n))
            .ok_or_else(bad)?;
        if b.len() != len {
            return Err(bad());
        }
        let (keys, rest) = b[32..].split_at(slots * 4);
        let (ids, flags) = rest.split_at(slots * 4);
        let word4 = |c: &[u8]| -> [u8; 4] { c.try_into().expect("4 bytes") };
        let complete = flags
            .iter()
            .map(|&f| match f {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(bad()),
            })
            .collect::<Result<Vec<bool>>>()?;
        let lists = Lists {
            width,
            keys: keys
                .par_chunks_exact(4)
                .map(|c| f32::from_le_bytes(word4(c)))
                .collect(),
            ids: ids
                .par_chunks_exact(4)
                .map(|c| u32::from_le_bytes(word4(c)))
                .collect(),
            complete,
        };
        Ok(PartialGraph::new(n, k, lists, evals as u64))
    }
}

/// The core's view of a share, so that drivers over processes merge and send it without
/// knowing what it holds.
impl Share for PartialGraph {
    fn merge(parts: Vec<Self>) -> Result<Self> {
        PartialGraph::merge(parts)
    }

    fn to_bytes(&self) -> Vec<u8> {
        PartialGraph::to_bytes(self)
    }

    fn from_bytes(bytes: &[u8]) -> Result<Self> {
        PartialGraph::from_bytes(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_widened_row_drops_its_item_or_else_its_last() {
        let near = [(0.0, 4u32), (0.0, 7), (1.5, 2)];
        assert_eq!(without(near.into_iter(), 7), vec![(0.0, 4), (1.5, 2)]);
        assert_eq!(without(near.into_iter(), 9), vec![(0.0, 4), (0.0, 7)]);
        assert_eq!(without([(2.0, 3u32)].into_iter(), 3), vec![]);
    }

    #[test]
    fn shares_survive_bytes_and_merge() {
        let mut lists = Lists::done(3, 2);
        lists.set(
            0,
            Raw {
                cands: vec![(0.5, 2), (1.5, 1)],
                complete: false,
            },
        );
        lists.set(
            2,
            Raw {
                cands: vec![(-1.0, 0)],
                complete: true,
            },
        );
        let p = PartialGraph::new(3, 1, lists, 9);
        let b = p.to_bytes();
        let q = PartialGraph::from_bytes(&b).unwrap();
        let (ql, pl) = (q.lists.host().unwrap(), p.lists.host().unwrap());
        assert_eq!((q.n, q.k, ql.width, q.distance_evals), (3, 1, 2, 9));
        assert_eq!(ql.keys, pl.keys);
        assert_eq!(ql.ids, pl.ids);
        assert_eq!(ql.complete, pl.complete);
        for cut in [0, 10, b.len() - 1] {
            assert!(PartialGraph::from_bytes(&b[..cut]).is_err());
        }
        // Item 1 seen by another share only; item 0's lists cut at the smaller barrier.
        let mut other = Lists::done(3, 2);
        other.set(
            0,
            Raw {
                cands: vec![(0.7, 0), (0.9, 1)],
                complete: false,
            },
        );
        other.set(
            1,
            Raw {
                cands: vec![(3.0, 2)],
                complete: true,
            },
        );
        let m = PartialGraph::merge(vec![q, PartialGraph::new(3, 1, other, 1)]).unwrap();
        let raws = m.lists.into_host().unwrap().into_raws();
        assert_eq!(raws[0].cands, vec![(0.5, 2), (0.7, 0)]);
        assert!(!raws[0].complete);
        assert_eq!(raws[1].cands, vec![(3.0, 2)]);
        assert!(raws[1].complete);
        assert_eq!(raws[2].cands, vec![(-1.0, 0)]);
    }
}
