//! k-NN search of a resident base: tiles of queries against tiles of the base, candidates
//! selected on the device, then proved and re-ranked exactly: on the device for sorted lists
//! ([`search`], kernels/finish/rerank.cu), on the host otherwise (`finish.rs`, over the
//! [`Resident`] source). Also the candidate passes every other search and the pilots
//! (pilot.rs) reuse ([`candidates`]).
//!
//! Owns the query/base tiling of the search. Must not touch the plan's numerics
//! (numerics/plan.rs) or the selection kernels (ops/select.rs).

use std::time::Instant;

use cudarc::driver::{CudaSlice, CudaView};
use rayon::prelude::*;
use voisin::{KnnResult, Result, Stats};

use std::ops::Range;

use crate::numerics::plan::BoundParts;
use crate::ops::device_set::{DeviceSet, SharedNorms};
use crate::ops::scaled::ScaledRows;
use crate::ops::select::{self, Select};
use crate::ops::survivors::Survivors;
use crate::ops::{exact, Budget};
use crate::options::BLOCK_MAX_K;
use crate::runtime::context::{dev, Gpu, Room};
use crate::runtime::probe::Phases;
use crate::search::finish::{finish, CandidateSource, Raw};
use crate::search::pairs::{
    Fused, FusedFilter, FusedOut, Lists, Operand, Pair, PairRunner, Part, Written,
};
use crate::search::route::{self, Method, Route, RowCopy, Shape, Warm};
use crate::search::SearchCtx;

/// The finished lists of one block of queries, still on the device.
pub(crate) struct BlockLists<'a> {
    /// The block's first query; it holds `qn` queries.
    pub q0: usize,
    pub qn: usize,
    /// `qn × width` entries.
    pub val: CudaView<'a, f32>,
    pub idx: CudaView<'a, u32>,
    /// The selection that ran (resolved).
    pub mode: Select,
    /// Entries per row in memory, and how many of them were asked for.
    pub width: usize,
    pub want: usize,
}

/// Candidates for every row of `queries` against the whole base (self pairs not excluded), as
/// per-query host lists.
pub(crate) fn candidates(
    ctx: &SearchCtx<'_>,
    base: &DeviceSet,
    qdev: &DeviceSet,
    kp: usize,
    sel: Select,
    budget: &Budget,
) -> Result<Vec<Raw>> {
    let nb = base.n;
    let mut out = Vec::with_capacity(qdev.n);
    passes(ctx, base, qdev, kp, sel, budget, |l| {
        out.par_extend(host_lists(ctx.gpu, &l, nb, None)?);
        Ok(())
    })?;
    Ok(out)
}

/// Downloads a block's lists, all of them or only those of its rows `rows` (in that order),
/// as host lists.
fn host_lists(gpu: &Gpu, l: &BlockLists<'_>, nb: usize, rows: Option<&[u32]>) -> Result<Vec<Raw>> {
    let mut tr = gpu.phases();
    let lists = (&l.val, &l.idx);
    let (hv, hi, keep) = select::download_lists(gpu, l.mode, lists, l.width, l.want, nb, rows)?;
    tr.mark("candidates: download");
    Ok(raws_of(&hv, &hi, keep, nb))
}

/// Host lists of `keep` downloaded entries per row (an empty slot's index `u32::MAX`); a list
/// is complete when it holds `whole` items (a k-NN's base, a graph row's other items).
pub(crate) fn raws_of(hv: &[f32], hi: &[u32], keep: usize, whole: usize) -> Vec<Raw> {
    (0..hv.len() / keep.max(1))
        .into_par_iter()
        .map(|r| {
            let cands: Vec<(f32, u32)> = (r * keep..(r + 1) * keep)
                .filter(|&j| hi[j] != u32::MAX)
                .map(|j| (hv[j], hi[j]))
                .collect();
            // Counted, not inferred from kc: a key that overflowed to +inf never passes the
            // block kernel's threshold, and such a list must not be taken as complete.
            Raw {
                complete: cands.len() >= whole,
                cands,
            }
        })
        .collect()
}

/// Runs the candidate passes of every block of queries and hands each block's lists to `each`:
/// the route's method (search/route.rs `choose`) on each block of its size, after the pass's
/// buffers and the scaled copies it asked for ([`KnnPass::new`]).
///
/// A fused method warms each block's lists on a sample spread evenly over the base
/// ([`DeviceSet::spread`]) through written tiles, keeps them as thresholds alone
/// (`select::seed_lists`: no entries, so that the sample's items are not listed twice), and
/// filters the whole base against them without writing tiles; the survivors are merged into the
/// lists. fused_filter takes the base in one launch, and queries whose survivors overflow their
/// buffer are redone with ordinary tiles; the fused tile pair takes it in chunks, each merged
/// before the next, and an overflowed list is cut to its floor.
///
/// The sample is spread rather than the base's first items because a sorted base (a word list's
/// embeddings) has first items that are all alike: their thresholds let hundreds of items
/// through per query, the buffers overflow and the cut lists do not prove
/// (docs/design/device-finish.md). Any threshold keeps the answers exact: what a list leaves
/// out has a key above a threshold at least its final largest key, and a list left with empty
/// slots behind its entries proves against its last entry, which is more cautious.
fn passes(
    ctx: &SearchCtx<'_>,
    base: &DeviceSet,
    qdev: &DeviceSet,
    kp: usize,
    sel: Select,
    budget: &Budget,
    mut each: impl FnMut(BlockLists<'_>) -> Result<()>,
) -> Result<()> {
    let (gpu, nq) = (ctx.gpu, qdev.n);
    if nq == 0 {
        return base.complete(gpu);
    }
    let (nb, budget) = (base.n, budget.bytes);
    let shape = Shape::Knn {
        kp,
        sel,
        nq,
        nb,
        budget,
    };
    let mut pass = KnnPass::new(ctx, base, qdev, route::choose(ctx.plan, shape, ctx.opts)?)?;
    let (q_tile, list) = (pass.route.tiles.0, pass.route.list);
    for q0 in (0..nq).step_by(q_tile) {
        let q1 = (q0 + q_tile).min(nq);
        let mut tr = gpu.phases();
        pass.block(q0..q1)?;
        let len = (q1 - q0) * list.width;
        // Every row is up after the first block: the norms the proofs need come back here.
        base.complete(gpu)?;
        gpu.stream.synchronize().map_err(dev("selecting"))?;
        tr.mark("candidates: device work of a query block");
        each(BlockLists {
            q0,
            qn: q1 - q0,
            val: pass.lists.val.slice(..len),
            idx: pass.lists.idx.slice(..len),
            mode: list.mode,
            width: list.width,
            want: list.want,
        })?;
    }
    Ok(())
}

/// One k-NN candidate pass on the device: its route, the block's lists and tile buffer, the
/// scaled copies of both sides its fused pairs read, the sample that warms a fused method's
/// lists (and the short lists it fills first, for long lists), and the runners.
struct KnnPass<'c, 'd> {
    ctx: &'c SearchCtx<'c>,
    route: Route,
    base: &'d DeviceSet<'d>,
    qdev: &'d DeviceSet<'d>,
    tile: CudaSlice<f32>,
    lists: Lists,
    /// The base's scaled copy, made as its rows come up, up to `copied`; the queries' whole.
    copies: Option<(ScaledRows, ScaledRows)>,
    copied: usize,
    sample: Option<DeviceSet<'static>>,
    short: Option<Lists>,
    written: Written<'c>,
    method: KnnMethod<'c>,
}

/// The runner of a k-NN pass's method.
enum KnnMethod<'c> {
    Written,
    Filter(FusedFilter<'c>),
    Pair(Fused<'c>),
}

impl<'c, 'd> KnnPass<'c, 'd> {
    /// The pass's buffers under `route`: the tile and the lists of a block, the scaled copies
    /// (where they do not fit, the route without them: it keeps the blocks it sized), the
    /// fused method's survivor buffers and sample.
    fn new(
        ctx: &'c SearchCtx<'c>,
        base: &'d DeviceSet<'d>,
        qdev: &'d DeviceSet<'d>,
        mut route: Route,
    ) -> Result<Self> {
        let (gpu, plan) = (ctx.gpu, ctx.plan);
        let ((q_tile, b_tile), width) = (route.tiles, route.list.width);
        let mut ta = gpu.phases();
        let stream = &gpu.stream;
        let alloc = |n: usize| unsafe { stream.alloc::<f32>(n.max(1)) }.map_err(dev("allocating"));
        let alloc_u32 =
            |n: usize| unsafe { stream.alloc::<u32>(n.max(1)) }.map_err(dev("allocating"));
        let tile = alloc(q_tile * b_tile)?;
        let lists = Lists {
            val: alloc(q_tile * width)?,
            idx: alloc_u32(q_tile * width)?,
            width,
        };
        // Fused pairs on scaled f16 rows (or split ones): the queries' copy whole, the base's
        // made as its rows come up.
        let mut copies = None;
        if route.copy != RowCopy::None {
            let split = route.copy.split();
            if let Some(b) = ScaledRows::room(gpu, plan, base.n, split) {
                copies = ScaledRows::new(gpu, plan, qdev, split)?.map(|q| (b, q));
            }
            if copies.is_none() {
                route = route.without_copy(plan);
            }
        }
        let fused = route.method != Method::Written;
        let floors = matches!(route.method, Method::Pair { .. });
        let rows = if fused { q_tile } else { 0 };
        let out = Survivors::new(gpu, rows, route.cap(), floors)?;
        ta.mark("candidates: buffers");
        // The sample that warms the fused pass's lists, shared by every block of queries.
        let (sample, short) = match route.warm {
            Warm::Sample { first, short, .. } => {
                let sample = Some(base.spread(gpu, plan, first)?);
                ta.mark("candidates: sample");
                let short = match short {
                    Some(w) => Some(Lists {
                        val: alloc(q_tile * w)?,
                        idx: alloc_u32(q_tile * w)?,
                        width: w,
                    }),
                    None => None,
                };
                (sample, short)
            }
            _ => {
                ta.mark("candidates: sample");
                (None, None)
            }
        };
        let written = |plan| Written {
            plan,
            product: route.written,
            on_copy: false,
            mode: route.list.mode,
            trans: None,
        };
        let method = match route.method {
            Method::FusedFilter { kernel, .. } => KnnMethod::Filter(FusedFilter {
                plan,
                kernel,
                out,
                redo: written(plan),
                b_tile,
            }),
            Method::Pair { kind, .. } => KnnMethod::Pair(Fused {
                plan,
                kind,
                out: FusedOut::Rows(out),
            }),
            _ => KnnMethod::Written,
        };
        Ok(KnnPass {
            ctx,
            route,
            base,
            qdev,
            tile,
            lists,
            copies,
            copied: 0,
            sample,
            short,
            written: written(plan),
            method,
        })
    }

    /// The candidates of queries `rows` (a block) into the block's lists.
    fn block(&mut self, rows: Range<usize>) -> Result<()> {
        let gpu = self.ctx.gpu;
        let nb = self.base.n;
        let b_tile = self.route.tiles.1;
        match self.method {
            KnnMethod::Written => {
                let (q, base) = sides(self.qdev, self.base, &self.copies);
                let part = Part {
                    set: q,
                    items: rows,
                    list: 0,
                };
                let (tile, lists) = (&mut self.tile, &mut self.lists);
                self.written.pass(gpu, b_tile, tile, lists, part, base)
            }
            KnnMethod::Filter(_) => {
                self.seed(rows.clone())?;
                let (q, base) = sides(self.qdev, self.base, &self.copies);
                let pair = knn_pair((q, rows), (base, 0..nb));
                let KnnMethod::Filter(f) = &mut self.method else {
                    unreachable!("matched above")
                };
                f.run(gpu, &mut self.tile, &mut self.lists, &pair)
            }
            KnnMethod::Pair(_) => self.chunks(rows),
        }
    }

    /// A fused-pair pass over queries `rows`: the base in chunks that grow with what the lists
    /// have seen (the sample, then the chunks), each merged before the next reads the
    /// thresholds; an overflowed list is cut to its floor (survivors.cu) and proved or widened
    /// as any other.
    fn chunks(&mut self, rows: Range<usize>) -> Result<()> {
        let (gpu, plan) = (self.ctx.gpu, self.ctx.plan);
        let nb = self.base.n;
        let warm = self.seed(rows.clone())?;
        let Method::Pair { kind, .. } = self.route.method else {
            unreachable!("a fused-pair pass")
        };
        let (mut seen, mut chunks) = (0, 0);
        while seen < nb {
            let c = self.route.chunk(warm + seen, kind.row_bytes(plan));
            let b1 = (seen + c).min(nb);
            self.base.ensure(gpu, b1)?;
            if let Some((b, _)) = self.copies.as_mut().filter(|_| self.copied < b1) {
                b.fill(gpu, plan, self.base, self.copied..b1)?;
                self.copied = b1;
            }
            let (q, base) = sides(self.qdev, self.base, &self.copies);
            let pair = knn_pair((q, rows.clone()), (base, seen..b1));
            let KnnMethod::Pair(f) = &mut self.method else {
                unreachable!("a fused-pair pass")
            };
            f.run(gpu, &mut self.tile, &mut self.lists, &pair)?;
            (seen, chunks) = (b1, chunks + 1);
        }
        self.ctx
            .counters
            .pair_chunks
            .fetch_add(chunks, std::sync::atomic::Ordering::Relaxed);
        let Warm::Sample { rank, .. } = self.route.warm else {
            unreachable!("fused pairs start from a sample")
        };
        gpu.phases().note(format_args!(
            "fused pairs ({kind:?}): {chunks} chunks after a sample of {warm}, seeded at its \
             rank {rank}"
        ));
        Ok(())
    }

    /// A fused pass's lists of queries `rows` warmed on the sample, then kept as thresholds
    /// alone (the key at the route's rank: from the sample's own short lists where the rank is
    /// short of the list); returns how many items they have seen.
    fn seed(&mut self, rows: Range<usize>) -> Result<usize> {
        let gpu = self.ctx.gpu;
        let Warm::Sample { rank, .. } = self.route.warm else {
            unreachable!("a fused pass warms on its sample")
        };
        let Some(sample) = self.sample.as_ref() else {
            unreachable!("a fused pass has its sample")
        };
        let (kp, n, b_tile) = (self.lists.width, rows.len(), self.route.tiles.1);
        let q = Operand {
            data: self.qdev,
            copy: None,
        };
        let from_set = Operand {
            data: sample,
            copy: None,
        };
        let part = |rows: Range<usize>| Part {
            set: q,
            items: rows,
            list: 0,
        };
        let (written, tile) = (&mut self.written, &mut self.tile);
        let short_val;
        let from = match &mut self.short {
            Some(short) => {
                written.pass(gpu, b_tile, tile, short, part(rows), from_set)?;
                short_val = short.val.slice(..n * short.width);
                select::SeedFrom::Lists {
                    val: &short_val,
                    width: short.width,
                    rank,
                }
            }
            None => {
                written.pass(gpu, b_tile, tile, &mut self.lists, part(rows), from_set)?;
                select::SeedFrom::Own { rank }
            }
        };
        let len = n * kp;
        let (mut v, mut i) = (
            self.lists.val.slice_mut(..len),
            self.lists.idx.slice_mut(..len),
        );
        select::seed_lists(gpu, &mut v, &mut i, kp, from)?;
        Ok(sample.n)
    }
}

/// The queries and the base of a pass as the runners read them, with the copies of both its
/// fused pairs read (base, queries) where it made them.
fn sides<'a, 'd>(
    qdev: &'a DeviceSet<'d>,
    base: &'a DeviceSet<'d>,
    copies: &'a Option<(ScaledRows, ScaledRows)>,
) -> (Operand<'a, 'd>, Operand<'a, 'd>) {
    let (b, q) = match copies {
        Some((b, q)) => (Some(b), Some(q)),
        None => (None, None),
    };
    (
        Operand {
            data: qdev,
            copy: q,
        },
        Operand {
            data: base,
            copy: b,
        },
    )
}

/// The pair of queries `rows` against base items `cols`, the block's lists from its first row.
fn knn_pair<'d, 's>(
    (q, rows): (Operand<'d, 's>, Range<usize>),
    (base, cols): (Operand<'d, 's>, Range<usize>),
) -> Pair<'d, 's> {
    Pair {
        rows: Part {
            set: q,
            items: rows,
            list: 0,
        },
        cols: Part {
            set: base,
            items: cols,
            list: 0,
        },
        both: false,
        exclude_self: false,
        merge_rows: true,
        number: 0,
    }
}

/// What the device finish left to do and what it found: `V` is the answers' distance (`f32`)
/// or exact key (`f64`, a graph's widened rows).
pub(crate) struct Answers<V> {
    /// `nq × k`, rows of the queries in `open` not filled yet.
    pub dist: Vec<V>,
    pub ids: Vec<u32>,
    /// Queries the device did not finish, with their downloaded lists.
    pub open: Vec<usize>,
    pub raws: Vec<Raw>,
    pub exact_evals: u64,
}

/// Copies a block's `got` into `all` from `at` on, in parallel (growing the vector by a copy
/// cost 10 ms at 10k × 1000 results).
fn place<T: Copy + Send + Sync>(all: &mut [T], at: usize, got: &[T]) {
    all[at..at + got.len()]
        .par_chunks_mut(1 << 16)
        .zip(got.par_chunks(1 << 16))
        .for_each(|(a, g)| a.copy_from_slice(g));
}

/// Candidate passes with the finish on the device: each block's sorted lists are proved and
/// re-ranked by kernels/finish/rerank.cu and only the k answers per query come back. Lists the kernel
/// cannot take (unsorted selections, metrics without exact keys on the device) and queries whose
/// proof fails come back as host lists for [`finish`]. `sel` is the passes' selection.
pub(crate) fn device_answers<V: exact::Answer>(
    ctx: &SearchCtx<'_>,
    sides: &exact::Sides<'_>,
    k: usize,
    kp: usize,
    sel: Select,
    budget: &Budget,
) -> Result<Answers<V>> {
    let (gpu, plan) = (ctx.gpu, ctx.plan);
    let (nq, nb) = (sides.qdev.n, sides.bdev.n);
    let bound = BoundParts::of(plan);
    // The queries' bounds need the base's largest norm, known once the first block's tiles
    // have brought every base row up (the base may be uploaded behind them).
    let mut abs: Option<Vec<f64>> = None;
    let codes = plan.exact_code.zip(plan.distance_form);
    // Answers stay on the device until the end where they fit in half the working set (80 MB
    // at 10k × 1000): one download straight into the result, no per-block copies.
    let whole = nq * k * 8 <= budget.bytes / 2;
    // The host memory those answers come back into: where it is large, its pages touched on a
    // helper thread while the GPU works (small batches would pay for the thread).
    let n = nq * k;
    let room = Room::<V>::start(if whole { n } else { 0 });
    let mut kept: Option<exact::Reranked> = None;
    let flat = if whole { 0 } else { nq * k };
    let mut a = Answers {
        dist: vec![<V as bytemuck::Zeroable>::zeroed(); flat],
        ids: vec![0; flat],
        open: Vec::new(),
        raws: Vec::new(),
        exact_evals: 0,
    };
    passes(ctx, sides.bdev, sides.qdev, kp, sel, budget, |l| {
        let mut tr = gpu.phases();
        let abs = abs.get_or_insert_with(|| {
            let base_norm = sides.bdev.max_norm();
            sides
                .qdev
                .norm()
                .par_iter()
                .map(|&qn| plan.abs_bound(qn, base_norm))
                .collect()
        });
        let rows = l.q0..l.q0 + l.qn;
        let sorted = matches!(l.mode, Select::Block | Select::Heap) && l.width.is_power_of_two();
        let status = match codes {
            Some((code, form)) if sorted => {
                let job = exact::Rerank {
                    sides,
                    code,
                    form,
                    k,
                    whole: nb,
                    rel: bound.rel,
                    tiny: bound.tiny,
                };
                let (mut out, at) = match kept.take() {
                    Some(o) => (o, l.q0),
                    None if whole => (V::room(gpu, nq, k)?, l.q0),
                    None => (V::room(gpu, l.qn, k)?, 0),
                };
                let lists = exact::SortedLists {
                    val: &l.val,
                    idx: &l.idx,
                    width: l.width,
                    q_off: l.q0,
                };
                exact::rerank(gpu, &job, lists, &abs[rows], &mut out, at)?;
                let status = gpu.download(&out.status.slice(at..at + l.qn))?;
                tr.mark("device finish: prove and re-rank");
                if whole {
                    kept = Some(out);
                } else {
                    let dist = gpu.download(&V::of(&out)?.slice(..l.qn * k))?;
                    let ids = gpu.download(&out.ids.slice(..l.qn * k))?;
                    place(&mut a.dist, l.q0 * k, &dist);
                    place(&mut a.ids, l.q0 * k, &ids);
                    tr.mark("device finish: download k per query");
                }
                status
            }
            _ => vec![exact::NOT_DONE; l.qn],
        };
        let (open, evals) = exact::open_rows(&status);
        a.exact_evals += evals;
        if !open.is_empty() {
            a.raws.extend(host_lists(gpu, &l, nb, Some(&open))?);
            a.open.extend(open.iter().map(|&r| l.q0 + r as usize));
        }
        Ok(())
    })?;
    if whole {
        let mut tr = gpu.phases();
        (a.dist, a.ids) = room.take()?;
        if let Some(o) = kept {
            gpu.download_into(&V::of(&o)?.slice(..n), &mut a.dist)?;
            gpu.download_into(&o.ids.slice(..n), &mut a.ids)?;
        }
        tr.mark("device finish: download k per query");
    }
    Ok(a)
}

/// The widest list [`widen_on_device`] takes against a base of `nb` items: what the block
/// selection keeps (sorted, so the rerank kernel proves it), or the whole base.
pub(crate) fn widest(nb: usize) -> usize {
    BLOCK_MAX_K.min(nb.next_power_of_two())
}

/// Queries whose first lists (of `kp`) did not prove, widened on the device: `open` (rows of
/// `sides.qset`, which `sides.qdev` holds) become the queries of [`device_answers`] with lists
/// growing fourfold up to [`widest`], each proved and re-ranked there; `fill(query, values,
/// ids)` takes the `k` answers of each one finished. Returns the queries still open after the
/// widest lists, with those lists (for the host's finish, from that list size); where the
/// device cannot prove such lists (no exact keys there, an unsorted selection) no pass runs and
/// `open` comes back as it was, without lists, for the caller's own.
///
/// The host's path brought back 2048-wide lists of every open query, sorted and proved them
/// there: 63,790 rows of a 1M-item graph with many duplicates took it to 1.6–1.7× the graph
/// of normal data; on the device the same rows took 176 ms (docs/design/device-finish.md).
pub(crate) fn widen_on_device<V: exact::Answer>(
    ctx: &SearchCtx<'_>,
    sides: &exact::Sides<'_>,
    k: usize,
    mut kp: usize,
    mut open: Vec<usize>,
    stats: &mut Stats,
    mut fill: impl FnMut(usize, &[V], &[u32]),
) -> Result<Widened> {
    let (gpu, plan) = (ctx.gpu, ctx.plan);
    let nb = sides.bdev.n;
    let proves = plan.exact_code.is_some()
        && plan.distance_form.is_some()
        && ctx.widen_select() != Select::Radix;
    let mut last = None;
    // Lists as the block selection keeps them (a power of two).
    while proves && !open.is_empty() && Select::Block.width(kp) < widest(nb) {
        let started = Instant::now();
        kp = (Select::Block.width(kp) * 4).min(widest(nb));
        let sub = DeviceSet::gather(gpu, plan, sides.qset, &open)?;
        let wide = exact::Sides {
            bset: sides.bset,
            qset: sides.qset,
            bdev: sides.bdev,
            qdev: &sub,
        };
        let a = ctx.shrinking(ctx.budget()?, |b| {
            device_answers::<V>(ctx, &wide, k, kp, ctx.widen_select(), b)
        })?;
        stats.distance_evals += (open.len() * nb) as u64;
        stats.exact_evals += a.exact_evals;
        let mut left = vec![false; open.len()];
        a.open.iter().for_each(|&q| left[q] = true);
        for (q, &query) in open.iter().enumerate().filter(|&(q, _)| !left[q]) {
            fill(
                query,
                &a.dist[q * k..(q + 1) * k],
                &a.ids[q * k..(q + 1) * k],
            );
        }
        ctx.counters.widened_on_device.fetch_add(
            open.len() - a.open.len(),
            std::sync::atomic::Ordering::Relaxed,
        );
        open = a.open.iter().map(|&q| open[q]).collect();
        last = Some((a.raws, kp));
        stats.compute += started.elapsed();
    }
    Ok(Widened { open, last })
}

/// What [`widen_on_device`] left open.
pub(crate) struct Widened {
    /// The queries still open, in their order.
    pub open: Vec<usize>,
    /// Their lists from the widest pass and its list size; `None` where no pass ran.
    pub last: Option<(Vec<Raw>, usize)>,
}

/// k-NN of every query of `sides` (base and queries resident on this GPU): candidate passes,
/// the device finish where it applies, the host's prove-widen-re-rank for the rest, assembled
/// into the flat result. `kp` is the first list size (the pilot's).
pub(crate) fn search(
    ctx: &SearchCtx<'_>,
    metric: &voisin::Metric,
    sides: &exact::Sides<'_>,
    k: usize,
    kp: usize,
    budget: Budget,
    stats: &mut Stats,
) -> Result<KnnResult> {
    let t = Instant::now();
    let mut tr = ctx.gpu.phases();
    let (nq, nb) = (sides.qset.len(), sides.bset.len());
    let mut a = ctx.shrinking(budget, |b| {
        device_answers::<f32>(ctx, sides, k, kp, ctx.select(), b)
    })?;
    stats.compute += t.elapsed();
    stats.distance_evals += (nb * nq) as u64;
    stats.exact_evals += a.exact_evals;
    tr.mark("knn: device candidates and finish");
    tr.note(format_args!(
        "{} of {nq} queries not proved on their lists",
        a.open.len()
    ));
    if !a.open.is_empty() {
        // Wider lists on the device first; what stays open goes to the host's finish.
        let (ids, dist) = (&mut a.ids, &mut a.dist);
        let first = std::mem::take(&mut a.open);
        let Widened { open, last } =
            widen_on_device::<f32>(ctx, sides, k, kp, first, stats, |q, d, i| {
                dist[q * k..(q + 1) * k].copy_from_slice(d);
                ids[q * k..(q + 1) * k].copy_from_slice(i);
            })?;
        if last.is_some() {
            tr.mark("knn: open queries widened on the device");
        }
        let (raws, kp) = last.unwrap_or((std::mem::take(&mut a.raws), kp));
        ctx.counters
            .host_finished
            .fetch_add(open.len(), std::sync::atomic::Ordering::Relaxed);
        if !open.is_empty() {
            // The host finish sees the open queries as 0..open.len(); ids map back on every
            // call.
            let qnorm: Vec<f64> = open.iter().map(|&q| sides.qdev.norm()[q]).collect();
            let mut src = Resident {
                ctx,
                metric,
                sides,
                open: &open,
                qnorm,
            };
            let rows = finish(ctx.plan, &mut src, k, kp, raws, stats)?;
            for (&q, row) in open.iter().zip(rows) {
                let at = q * k..(q + 1) * k;
                for ((i, d), (key, id)) in
                    a.ids[at.clone()].iter_mut().zip(&mut a.dist[at]).zip(row)
                {
                    *i = id;
                    *d = metric.key_to_distance(key) as f32;
                }
            }
            tr.mark("knn: host finish of the open queries");
        }
    }
    Ok(KnnResult {
        n_queries: nq,
        k,
        indices: a.ids,
        distances: a.dist,
        stats: std::mem::take(stats),
    })
}

/// The queries of a resident search that the device did not finish (`open`, numbered 0.. in the
/// finish): wider lists from the resident base, exact keys on this GPU.
struct Resident<'a> {
    ctx: &'a SearchCtx<'a>,
    metric: &'a voisin::Metric,
    sides: &'a exact::Sides<'a>,
    open: &'a [usize],
    qnorm: Vec<f64>,
}

impl CandidateSource for Resident<'_> {
    fn base_len(&self) -> usize {
        self.sides.bset.len()
    }

    fn norms(&self) -> (&[f64], f64) {
        (&self.qnorm, self.sides.bdev.max_norm())
    }

    fn base_norms(&self) -> Option<SharedNorms> {
        Some(self.sides.bdev.shared_norm())
    }

    fn redo(&mut self, ids: &[usize], kp: usize) -> Result<Vec<Raw>> {
        let ctx = self.ctx;
        let ids: Vec<usize> = ids.iter().map(|&i| self.open[i]).collect();
        let sub = DeviceSet::gather(ctx.gpu, ctx.plan, self.sides.qset, &ids)?;
        ctx.shrinking(ctx.budget()?, |b| {
            candidates(ctx, self.sides.bdev, &sub, kp, ctx.widen_select(), b)
        })
    }

    fn exact_keys(&mut self, pairs: &[[u32; 2]]) -> Result<Vec<f64>> {
        let pairs: Vec<[u32; 2]> = pairs
            .iter()
            .map(|&[q, b]| [self.open[q as usize] as u32, b])
            .collect();
        exact::keys(self.ctx.gpu, self.metric, self.sides, &pairs)
    }

    fn phases(&self) -> Phases {
        self.ctx.gpu.phases()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::{Arithmetic, Numerics};
    use proptest::prelude::*;
    use voisin::{Metric, VectorSet};

    /// Downloaded lists become host lists without their empty slots, complete only when they
    /// hold `whole` items (an item whose key overflowed to +inf counts; an empty slot does not).
    #[test]
    fn raws_drop_empty_slots_and_count_whole_lists() {
        let e = u32::MAX;
        let hv = [0.5, 1.0, f32::INFINITY, 2.0, f32::INFINITY, f32::INFINITY];
        let hi = [4, 2, e, 7, 1, e];
        let raws = raws_of(&hv, &hi, 3, 2);
        assert_eq!(raws.len(), 2);
        assert_eq!(raws[0].cands, vec![(0.5, 4), (1.0, 2)]);
        assert!(raws[0].complete);
        assert_eq!(raws[1].cands, vec![(2.0, 7), (f32::INFINITY, 1)]);
        assert!(raws[1].complete);
        assert!(!raws_of(&hv, &hi, 3, 3)[0].complete);
        assert!(raws_of(&[], &[], 0, 1).is_empty());
    }

    /// kernels/finish/rerank.cu's rr_lower / rr_upper, written the same way.
    fn kernel_bounds(b: BoundParts, v: f32, abs: f64) -> (f64, f64) {
        let x = v as f64;
        (
            ((x - abs) - b.rel * x.abs()) - b.tiny,
            ((x + abs) + b.rel * x.abs()) + b.tiny,
        )
    }

    fn plans() -> Vec<Numerics> {
        let set = VectorSet::from_f32(3, 127, (0..381).map(|i| i as f32 * 0.25).collect()).unwrap();
        let mut out = Vec::new();
        for m in Metric::builtins() {
            if matches!(m, Metric::Levenshtein | Metric::Custom(_)) {
                continue;
            }
            for p in [Arithmetic::Fp32, Arithmetic::Tf32] {
                out.push(Numerics::new(&m, &set).in_arithmetic(p));
            }
        }
        out
    }

    #[test]
    fn bound_parts_recover_a_relative_part_where_the_plan_has_one() {
        let rels: Vec<f64> = plans().iter().map(|p| BoundParts::of(p).rel).collect();
        assert!(rels.iter().any(|&r| r > 0.0) && rels.contains(&0.0));
    }

    proptest! {
        /// The kernel's bounds are the plan's, bit for bit, for every plan (GEMM metrics have no
        /// relative part, SIMT metrics do), key and query bound.
        #[test]
        fn kernel_bounds_equal_the_plans(v in -1e30f32..1e30, scale in -30i32..30, abs in 0f64..1e3) {
            let v = v * 2f32.powi(scale).min(1.0);
            for plan in plans() {
                let b = BoundParts::of(&plan);
                let (lo, hi) = kernel_bounds(b, v, abs);
                prop_assert_eq!(lo.to_bits(), plan.lower(v, abs).to_bits());
                prop_assert_eq!(hi.to_bits(), plan.upper(v, abs).to_bits());
            }
        }
    }
}
