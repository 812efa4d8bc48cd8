//! k-NN graph (self-join) on the device with the symmetric tiling of [Dashti13] §3.2 (docs/references.md): only tiles
//! (I, J) with I ≤ J are computed; each gives row candidates to the items of I and, through a
//! transposed copy, column candidates to the items of J. Self pairs are skipped in the kernel.
//!
//! Owns the triangle schedule and the graph's rows as a candidate source; proving and re-ranking are search/finish.rs's.

use std::collections::VecDeque;

use cudarc::driver::{CudaSlice, CudaView};
use rayon::prelude::*;
use voisin::graph::{Share, TileOwner};
use voisin::{Error, Metric, Result, Stats, VectorSet};

use crate::numerics::plan::{BoundParts, Numerics};
use crate::ops::device_set::{DeviceSet, SharedNorms};
use crate::ops::exact;
use crate::ops::locality::Locality;
use crate::ops::scaled::ScaledRows;
use crate::ops::select::{self, ListsOut, Select, TileAt, TileIn};
use crate::ops::tile::{self, Product};
use crate::runtime::context::{dev, Gpu, Room};
use crate::runtime::probe::Phases;
use crate::search::finish::{finish, CandidateSource, Raw, RowItems};
use crate::search::knn;
use crate::search::pairs::{
    Filtered, Fused, FusedOut, Lists as Running, LocalityFused, Merges, Operand, Pair, PairRunner,
    Part, Warmed, Written,
};
use crate::search::route::{self, Method, Order, Route, RowCopy, Shape, Warm};
use crate::search::{pilot, shard, SearchCtx};

/// Tile pairs queued ahead of the device: enough to keep it busy (each pair is milliseconds of
/// work), few enough that the host never waits inside a launch on a full queue.
const IN_FLIGHT: usize = 4;

/// Filtered pairs whose rows' survivors share one merge. A merge is a launch over the tile's
/// rows, most of which found nothing in a warm pair (two merges took ~67 µs of a ~0.45 ms
/// pair, H200); rows filtered meanwhile against the older thresholds offer a few more
/// survivors, which the buffers hold (`survivors::filter_cap`: a warm pair offers a row about
/// kp·t/s of them after s items, far under the cap summed over four pairs). Later pairs can
/// read the older thresholds and stay exact: a threshold only has to be at least the list's
/// final largest key.
const ROW_MERGE_EVERY: usize = 4;

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
    let asked = pilot::Asked {
        queries: set,
        k,
        self_pairs: true,
    };
    let kp = pilot::pilot_list(ctx, ddev, asked, &budget)?;
    let nt = n.div_ceil(tile);
    let size = |it: usize| ((it + 1) * tile).min(n) - it * tile;
    let whole = (0..nt).all(|i| (i..nt).all(|j| owns(i, j)));
    let shape = Shape::Graph {
        n,
        k,
        kp,
        tile,
        sel: ctx.select(),
        whole,
    };
    let route = route::choose(plan, shape, ctx.opts)?;
    let (lists, evals) = match route.method {
        Method::Rows => {
            let (kp, sel) = (route.list.want, route.list.mode);
            let mut lists = Lists::done(n, route.list.width);
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
        _ => {
            let evals = (0..nt)
                .flat_map(|i| (i..nt).map(move |j| (i, j)))
                .filter(|&(i, j)| owns(i, j))
                .map(|(i, j)| (size(i) * size(j)) as u64 / if i == j { 2 } else { 1 })
                .sum();
            // The host memory kept lists' rows come back into, touched while the GPU works:
            // started with the passes, it is ready when the rows are (the re-rank alone took
            // 14 ms, too short to hide the touching of 120 MB at 1M items and k = 10).
            let room = (keep && route.proves).then(|| Room::start(n * k));
            let mut lists = symmetric_candidates(gpu, plan, ddev, route, tile, owns)?;
            lists.room = room;
            let evals: u64 = evals - lists.skipped.min(evals);
            let lists = if keep {
                Held::Device(lists)
            } else {
                Held::Host(lists.download(gpu)?)
            };
            (lists, evals)
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
/// 256 MB of lists coming back and their million small vectors (traced on the H200).
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
    let Some((code, form)) = codes.filter(|_| whole && route::provable(plan, k, w)) else {
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

    fn base_norms(&self) -> Option<SharedNorms> {
        Some(self.sides.bdev.shared_norm())
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
/// tile pairs (I, J) of edge `t` with I ≤ J that `owns` accepts, as `route` says they run
/// (search/route.rs). An item's list covers the items of the owned pairs that hold it, and is
/// complete when it holds all of them, so the lists of callers that split the triangle between
/// them merge with [`PartialGraph::merge`].
///
/// The pairs in turn, tile row by tile row (in locality order the diagonal pairs first, so
/// that every list has met its own neighbourhood, its own blocks, before the pairs of far tiles
/// are planned against its threshold): a pair whose lists are warm (they have seen half a tile
/// of items, or the seed's sample) goes to the route's warm method (the tile filter, the fused
/// tile pair, either in locality order), any other through a written tile and block select.
/// A filtered pair's rows merge their survivors every [`ROW_MERGE_EVERY`] pairs, or at once
/// while their lists are young.
pub(crate) fn symmetric_candidates(
    gpu: &Gpu,
    plan: &Numerics,
    data: &DeviceSet,
    route: Route,
    t: usize,
    owns: &TileOwner<'_>,
) -> Result<DeviceLists> {
    let n = data.n;
    let nt = n.div_ceil(t);
    let mut share = ShareRun::new(gpu, plan, data, route, t)?;
    let reordered = share.in_locality_order(data, nt)?;
    let data = reordered.as_ref().unwrap_or(data);
    let copy = share.copy(data)?;
    let set = Operand {
        data,
        copy: copy.as_ref(),
    };
    share.seed(set)?;
    // In locality order the diagonal pairs come first.
    let pairs = schedule(nt, owns, share.order.is_some());
    let mut warm = share.warm_runner();
    let mut written = share.written_runner();
    let (mut queued, mut filtered, mut pending) = (VecDeque::new(), 0usize, 0usize);
    let mut waiting: Option<usize> = None;
    for (p, &(it, jt)) in pairs.iter().enumerate() {
        let (i0, i1) = (it * t, ((it + 1) * t).min(n));
        if let (Some(w), Some(runner)) = (waiting.filter(|&w| w != it && pending > 0), &mut warm) {
            runner.flush(gpu, &mut share.lists, w * t..((w + 1) * t).min(n))?;
            pending = 0;
        }
        waiting = Some(it);
        if let Some(runner) = &mut warm {
            runner.next_pair(gpu, p)?;
        }
        let (j0, j1) = (jt * t, ((jt + 1) * t).min(n));
        if queued.len() >= IN_FLIGHT {
            let e: cudarc::driver::CudaEvent = queued.pop_front().expect("non-empty");
            e.synchronize().map_err(dev("waiting for a tile"))?;
        }
        let event = gpu.stream.record_event(None);
        queued.push_back(event.map_err(dev("recording an event"))?);
        // A pair offers a row about kp·t/f survivors once its list has seen f items: rows that
        // have seen under two tiles merge after every pair, so that a young list's buffer
        // (`survivors::filter_cap`) does not overflow over ROW_MERGE_EVERY pairs.
        let young = share.fed[it] < 2 * t;
        let is_warm = share.warm(it) && (jt == it || share.warm(jt));
        share.fed[it] += (j1 - j0) - usize::from(jt == it);
        if jt != it {
            share.fed[jt] += i1 - i0;
        }
        let pair = Pair {
            rows: Part {
                set,
                items: i0..i1,
                list: i0,
            },
            cols: Part {
                set,
                items: j0..j1,
                list: j0,
            },
            both: jt != it,
            exclude_self: true,
            merge_rows: pending + 1 >= ROW_MERGE_EVERY || young,
            number: p,
        };
        match warm.as_mut().filter(|_| is_warm) {
            Some(runner) => {
                filtered += 1;
                runner.run(gpu, &mut share.tile, &mut share.lists, &pair)?;
                pending = if pair.merge_rows { 0 } else { pending + 1 };
            }
            None => written.run(gpu, &mut share.tile, &mut share.lists, &pair)?,
        }
    }
    if let (Some(w), Some(runner)) = (waiting.filter(|_| pending > 0), &mut warm) {
        runner.flush(gpu, &mut share.lists, w * t..((w + 1) * t).min(n))?;
    }
    let skipped = match &mut warm {
        Some(runner) => runner.finish(gpu, &mut share.lists)?,
        None => 0,
    };
    share.note(filtered, copy.is_some());
    Ok(share.into_lists(n, owns, skipped))
}

/// The tile pairs (I, J), I ≤ J, that `owns` accepts, tile row by tile row; with
/// `diagonal_first`, the diagonal pairs before all others.
fn schedule(nt: usize, owns: &TileOwner<'_>, diagonal_first: bool) -> Vec<(usize, usize)> {
    (0..nt)
        .filter(|&it| diagonal_first && owns(it, it))
        .map(|it| (it, it))
        .chain((0..nt).flat_map(|it| {
            (it + usize::from(diagonal_first)..nt)
                .filter(move |&jt| owns(it, jt))
                .map(move |jt| (it, jt))
        }))
        .collect()
}

/// A graph share on the device while it runs: its route (as the device memory allowed it),
/// its lists, the tile buffer and the room for a transposed one, the survivor buffers of its
/// warm pairs, what each tile row's lists have been fed, from how many items on a list counts
/// as warm, and the locality order where it runs in one.
struct ShareRun<'g> {
    gpu: &'g Gpu,
    plan: &'g Numerics,
    route: Route,
    t: usize,
    lists: Running,
    tile: CudaSlice<f32>,
    trans: Option<CudaSlice<f32>>,
    merges: Option<Merges>,
    fed: Vec<usize>,
    warm_at: usize,
    seeded: bool,
    order: Option<Locality>,
}

impl<'g> ShareRun<'g> {
    /// The buffers of a share of `data` in tiles of `t`: the lists (filled), the tile and the
    /// transposed tile (one value where the columns are read in place), the filter's buffers.
    fn new(
        gpu: &'g Gpu,
        plan: &'g Numerics,
        data: &DeviceSet,
        route: Route,
        t: usize,
    ) -> Result<Self> {
        let (n, kp) = (data.n, route.list.width);
        let stream = &gpu.stream;
        let alloc =
            |len: usize| unsafe { stream.alloc::<f32>(len.max(1)) }.map_err(dev("allocating"));
        let mut lists = Running {
            val: alloc(n * kp)?,
            idx: unsafe { stream.alloc::<u32>((n * kp).max(1)) }.map_err(dev("allocating"))?,
            width: kp,
        };
        select::fill_lists(
            gpu,
            &mut lists.val.slice_mut(..),
            &mut lists.idx.slice_mut(..),
        )?;
        let tile = alloc(t * t)?;
        let trans = alloc(if kp == select::COLS_KP { 1 } else { t * t })?;
        let merges = match route.cap() {
            0 => None,
            cap => Some(Merges::new(gpu, t, cap)?),
        };
        Ok(ShareRun {
            gpu,
            plan,
            route,
            t,
            lists,
            tile,
            trans: (kp != select::COLS_KP).then_some(trans),
            merges,
            fed: vec![0; n.div_ceil(t)],
            warm_at: t / 2,
            seeded: false,
            order: None,
        })
    }

    /// Whether tile row `it`'s lists are warm: they have seen half a tile, or the sample.
    fn warm(&self, it: usize) -> bool {
        self.fed[it] >= self.warm_at
    }

    /// Where the route runs in locality order (ops/locality.rs): the seed gives each item its
    /// nearest sample item, the set is reordered by them, the lists move to that order (and
    /// back at the end, [`PairRunner::finish`]); the reordered set, which the share runs on from
    /// here. `None` in natural order, or where the order could not be made (the route then
    /// runs in natural order, seeded).
    fn in_locality_order(
        &mut self,
        data: &DeviceSet,
        nt: usize,
    ) -> Result<Option<DeviceSet<'static>>> {
        if self.route.order != Order::Locality {
            return Ok(None);
        }
        let (gpu, plan, t) = (self.gpu, self.plan, self.t);
        let set = Operand { data, copy: None };
        let sample = seed(
            gpu,
            plan,
            &self.route,
            set,
            (&mut self.lists, t, &mut self.tile),
            true,
        )?;
        self.warmed(sample.size);
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
        let Some((set, loc)) = made else {
            self.route = self.route.in_natural_order();
            return Ok(None);
        };
        let kp = self.lists.width;
        (self.lists.val, self.lists.idx) =
            loc.move_lists(gpu, (&self.lists.val, &self.lists.idx), kp, true)?;
        self.order = Some(loc);
        Ok(Some(set))
    }

    /// The scaled f16 copy of `data` the route asked for (its fused pairs' rows, its wide
    /// written tiles'); where it does not fit, none, and the route without it.
    fn copy(&mut self, data: &DeviceSet) -> Result<Option<ScaledRows>> {
        if self.route.copy == RowCopy::None {
            return Ok(None);
        }
        let copy = ScaledRows::new(self.gpu, self.plan, data, self.route.copy.split())?;
        if copy.is_none() {
            self.route = self.route.without_copy(self.plan);
        }
        Ok(copy)
    }

    /// The route's seed, where it has one and it has not run yet (in locality order it ran
    /// first), on the written tiles' rows.
    fn seed(&mut self, set: Operand<'_, '_>) -> Result<()> {
        if !matches!(self.route.warm, Warm::Seed { .. }) || self.seeded {
            return Ok(());
        }
        let rows = Operand {
            copy: set
                .copy
                .filter(|_| self.route.written == Product::ScaledF16),
            ..set
        };
        let route = self.route;
        let t = self.t;
        let size = seed(
            self.gpu,
            self.plan,
            &route,
            rows,
            (&mut self.lists, t, &mut self.tile),
            false,
        )?
        .size;
        self.warmed(size);
        Ok(())
    }

    /// Every list has seen the sample's `size` items.
    fn warmed(&mut self, size: usize) {
        self.fed.fill(size);
        self.warm_at = size;
        self.seeded = true;
    }

    /// The runner of the share's cold pairs.
    fn written_runner(&mut self) -> Written<'g> {
        Written {
            plan: self.plan,
            product: self.route.written,
            on_copy: self.route.written == Product::ScaledF16,
            mode: Select::Block,
            trans: self.trans.take(),
        }
    }

    /// The runner of the share's warm pairs, where the route has a warm method.
    fn warm_runner(&mut self) -> Option<Box<dyn PairRunner + 'g>> {
        let (plan, route) = (self.plan, self.route);
        let merges = self.merges.take()?;
        let on_copy = route.written == Product::ScaledF16;
        let warmed = match route.method {
            Method::Pair { kind, .. } => Warmed::Fused(Fused {
                plan,
                kind,
                out: FusedOut::Both(merges),
            }),
            _ => Warmed::Filtered(Filtered {
                plan,
                product: route.written,
                on_copy,
                merges,
            }),
        };
        let nt = self.fed.len();
        Some(match (self.order.take(), warmed) {
            (Some(order), warm) => Box::new(LocalityFused {
                order,
                warm,
                planned: Vec::new(),
                planning: true,
                check_at: nt + nt.saturating_sub(1),
                pairs: nt * (nt + 1) / 2,
            }),
            (None, Warmed::Fused(f)) => Box::new(f),
            (None, Warmed::Filtered(f)) => Box::new(f),
        })
    }

    /// The probe's note of how the share's pairs ran.
    fn note(&self, filtered: usize, copied: bool) {
        let how = match self.route.method {
            Method::Pair { kind, .. } => format!("fused on tensor cores ({kind:?})"),
            _ => "in one read of the tile".into(),
        };
        let written = if copied && self.route.written == Product::ScaledF16 {
            "; written tiles on scaled f16"
        } else {
            ""
        };
        self.gpu.phases().note(format_args!(
            "graph: {filtered} tile pairs filtered {how} ({} buffer slots per item){written}",
            self.route.cap()
        ));
    }

    /// The share's lists, which have met (per tile row) every other item of the pairs `owns`
    /// accepts; `skipped` pairs of items were never computed.
    fn into_lists(self, n: usize, owns: &TileOwner<'_>, skipped: u64) -> DeviceLists {
        let t = self.t;
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
        DeviceLists {
            n,
            width: self.lists.width,
            val: self.lists.val,
            idx: self.lists.idx,
            tile: t,
            seen,
            room: None,
            skipped,
        }
    }
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
/// not, and their thresholds let hundreds of items a pair through
/// (docs/design/graph-tile-filter.md). The self pair of a sampled item stays among its sample keys: any threshold
/// keeps the lists' contract (what a list leaves out has a key above a threshold that is at
/// least the list's final largest key), so the answers stay exact, and one item in kp barely
/// moves it.
fn seed(
    gpu: &Gpu,
    plan: &Numerics,
    route: &Route,
    set: Operand<'_, '_>,
    (lists, t, tile): (&mut Running, usize, &mut CudaSlice<f32>),
    heads: bool,
) -> Result<Seeded> {
    let Warm::Seed { size } = route.warm else {
        unreachable!("a seeded route")
    };
    let (data, kp) = (set.data, lists.width);
    let n = data.n;
    let sample = data.spread(gpu, plan, size)?;
    let s = sample.n;
    let copies = match set.copy {
        Some(d) => ScaledRows::new(gpu, plan, &sample, false)?.map(|m| (d, m)),
        None => None,
    };
    let product = match copies {
        Some(_) => route.written,
        None => route.without_copy(plan).written,
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
        tile::compute(gpu, product, plan, a, b, &mut tile.slice_mut(..), b.n)?;
        let view: CudaView<'_, f32> = tile.slice(..);
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
            &mut lists.val.slice_mut(i0 * kp..i1 * kp),
            &mut lists.idx.slice_mut(i0 * kp..i1 * kp),
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
        let held = (&lists.val.slice(..n * kp), &lists.idx.slice(..n * kp));
        Some(select::prefixes(gpu, held, kp, 1, None)?.1)
    } else {
        None
    };
    select::seed_lists(
        gpu,
        &mut lists.val.slice_mut(..n * kp),
        &mut lists.idx.slice_mut(..n * kp),
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
