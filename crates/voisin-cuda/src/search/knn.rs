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

use crate::numerics::plan::{Arithmetic, BoundParts, Numerics};
use crate::ops::device_set::DeviceSet;
use crate::ops::fused::{FusedKernel, FusedPlan};
use crate::ops::pair;
use crate::ops::scaled::ScaledRows;
use crate::ops::select::{self, list_size, ListsOut, Select, TileAt, TileIn};
use crate::ops::survivors::{self, Survivors};
use crate::ops::{exact, fused, tile, Budget};
use crate::options::BLOCK_MAX_K;
use crate::runtime::context::{dev, Gpu, Room};
use crate::runtime::probe::Phases;
use crate::search::finish::{finish, CandidateSource, Raw};
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

/// The list a pass keeps for a wanted list of `kp`.
///
/// TF32's bound is ~200× wider than fp32's: with list_size's margin of k/8 the k-th and the
/// last key of lists of 64–256 are often closer than the bound, and two thirds of the queries
/// were widened at k=100 (bench/NOTES.md, "Fused"). Twice the list costs little at that size.
/// Not beyond what the selection `sel` keeps (heap selection: 256 entries): there the list
/// stays `kp`, and more queries go to the widening path.
pub(crate) fn pass_list(plan: &Numerics, kp: usize, sel: Select) -> usize {
    let fits = |l: usize| sel.max_list().is_none_or(|max| sel.width(l) <= max);
    if plan.arithmetic == Arithmetic::Tf32 && (64..=256).contains(&kp) && fits(2 * kp) {
        2 * kp
    } else {
        kp
    }
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

/// Runs the candidate passes of every block of queries and hands each block's lists to `each`.
///
/// Lists up to k = 1000's may take the fused pass (fused.rs): ordinary tiles over a sample of
/// the base, spread evenly over it ([`DeviceSet::spread`]), set each query's threshold (its key
/// at the plan's rank among the sample: the kp-th, or a lower one for long lists, fused.rs
/// `seed_rank`), the lists start from that threshold alone (`select::seed_lists`: no
/// entries, so that the sample's items are not listed twice), and a fused kernel filters the
/// whole base against it without writing tiles; the survivors are merged into the lists.
/// fused_filter takes the base in one launch, and queries whose survivors overflow their buffer
/// are redone here with ordinary tiles; the fused tile pair takes it in chunks, each merged
/// before the next, and an overflowed list is cut to its floor.
///
/// The sample is spread rather than the base's first items because a sorted base (a word list's
/// embeddings) has first items that are all alike: their thresholds let hundreds of items
/// through per query, the buffers overflow and the cut lists do not prove
/// (docs/design/device-finish.md, "Session 21"). Any threshold keeps the answers exact: what a
/// list leaves out has a key above a threshold at least its final largest key, and a list left
/// with empty slots behind its entries proves against its last entry, which is more cautious.
fn passes(
    ctx: &SearchCtx<'_>,
    base: &DeviceSet,
    qdev: &DeviceSet,
    kp: usize,
    sel: Select,
    budget: &Budget,
    mut each: impl FnMut(BlockLists<'_>) -> Result<()>,
) -> Result<()> {
    let (gpu, plan) = (ctx.gpu, ctx.plan);
    let (nb, nq) = (base.n, qdev.n);
    if nq == 0 {
        return base.complete(gpu);
    }
    let kp = pass_list(plan, kp, sel);
    let want = kp;
    let mode = sel.resolve(kp)?;
    let kp = mode.width(kp);
    let kc = kp.min(nb);
    let mut fusing = None;
    let (q_tile, b_tile) = match mode {
        _ if mode.whole_rows() => {
            let per_query = nb * 4 + kc * 8;
            ((budget.bytes / per_query).clamp(1, nq), nb)
        }
        _ => {
            // 8192 queries × 16384 base items (512 MiB): shapes from 2048×131072 to
            // 16384×8192 measured within noise of each other (bench/NOTES.md).
            let (qmax, bmax) = (8192usize, 16384usize);
            let b_tile = nb.min(bmax);
            // The fused merge keeps block-select lists (sorted, threshold at the end).
            if mode == Select::Block {
                fusing = fused::plan_for(plan, ctx.opts.fusion, kp, (nq, nb));
            }
            // A fused tile pair writes tiles over the first items only: its blocks may hold
            // twice the queries, so that 10k queries go in one block and all their chunks
            // follow the base's upload (a second block of 1,808 waited behind it, 3.7 ms of a
            // 35 ms k-NN; H200, session 17).
            let qmax = match fusing {
                Some(FusedPlan {
                    kernel: FusedKernel::Pair(_),
                    ..
                }) => 2 * qmax,
                _ => qmax,
            };
            // Slots, a counter and (pairs) a floor per query.
            let buffers = fusing.map_or(0, |f| f.cap * 8 + 8);
            let per_query = b_tile * 4 + kp * 8 + buffers;
            ((budget.bytes / per_query).clamp(1, nq.min(qmax)), b_tile)
        }
    };
    let mut ta = gpu.phases();
    let stream = &gpu.stream;
    let alloc = |n: usize| unsafe { stream.alloc::<f32>(n.max(1)) }.map_err(dev("allocating"));
    let alloc_u32 = |n: usize| unsafe { stream.alloc::<u32>(n.max(1)) }.map_err(dev("allocating"));
    let mut tile_buf = alloc(q_tile * b_tile)?;
    let width = if mode.whole_rows() { kc } else { kp };
    let mut lv = alloc(q_tile * width)?;
    let mut li = alloc_u32(q_tile * width)?;
    // Fused pairs on scaled f16 rows (or split ones): the queries' copy whole, the base's made
    // as its rows come up (`scaled_upto`). Where a copy does not fit, TF32 pairs on the
    // prepared rows, or no fusion where those rows do not suit the kernel (or the plan is split).
    let (mut q_scaled, mut b_scaled, mut scaled_upto) = (None, None, 0);
    let mut q_ops = None;
    if let Some(
        f @ FusedPlan {
            kernel: FusedKernel::Pair(kind),
            ..
        },
    ) = fusing
    {
        if kind.scaled() {
            b_scaled = ScaledRows::room(gpu, plan, nb);
            if b_scaled.is_some() {
                q_scaled = ScaledRows::new(gpu, plan, qdev)?;
            }
            if q_scaled.is_none() {
                b_scaled = None;
            }
        }
        // The plan keeps the kind that runs (TF32 where the copies did not fit), or no fusion;
        // the queries' operands serve every chunk of every block.
        q_ops = pair::Operands::new(plan, qdev, kind, q_scaled.as_ref());
        fusing = q_ops.as_ref().map(|o| FusedPlan {
            kernel: FusedKernel::Pair(o.kind()),
            ..f
        });
    }
    let fused_cap = fusing.map_or(0, |f| f.cap);
    let floors = matches!(fusing, Some(f) if f.kernel != FusedKernel::Filter);
    let mut survivors = Survivors::new(
        gpu,
        if fusing.is_some() { q_tile } else { 0 },
        fused_cap,
        floors,
    )?;
    ta.mark("candidates: buffers");
    // The sample that warms the fused pass's lists, shared by every block of queries.
    let sample = match fusing {
        Some(f) => Some(base.spread(gpu, plan, f.first)?),
        None => None,
    };
    ta.mark("candidates: sample");
    // Lists of `width` (or, for a seed, `w`) per query of `rows` from `items` of `set`.
    let pass = |set: &DeviceSet<'_>,
                tile_buf: &mut CudaSlice<f32>,
                lv: &mut CudaSlice<f32>,
                li: &mut CudaSlice<u32>,
                rows: std::ops::Range<usize>,
                items: std::ops::Range<usize>,
                (list_at, width): (usize, usize)|
     -> Result<()> {
        let qb = qdev.block(rows.start, rows.end);
        let len = qb.n * width;
        let (mut v, mut i) = (
            lv.slice_mut(list_at..list_at + len),
            li.slice_mut(list_at..list_at + len),
        );
        if !mode.whole_rows() && items.start == 0 {
            select::fill_lists(gpu, &mut v, &mut i)?;
        }
        for b0 in items.clone().step_by(b_tile) {
            let b1 = (b0 + b_tile).min(items.end);
            // A base uploaded behind the first tiles: its next rows go up while the GPU works
            // on the ones queued before (device_set.rs).
            set.ensure(gpu, b1)?;
            let bb = set.block(b0, b1);
            tile::compute(gpu, plan, &qb, &bb, &mut tile_buf.slice_mut(..), b1 - b0)?;
            let at = TileAt {
                rows: qb.n,
                cols: b1 - b0,
                ld: b1 - b0,
                key: plan.key,
                row_off: rows.start as u32,
                col_off: b0 as u32,
                exclude_self: false,
            };
            let t: CudaView<'_, f32> = tile_buf.slice(..);
            let tile = TileIn {
                values: &t,
                at,
                rn: &qb.sqnorm,
                cn: &bb.sqnorm,
            };
            let out = ListsOut {
                val: &mut v,
                idx: &mut i,
                width,
            };
            select::run(gpu, mode, tile, out)?;
        }
        Ok(())
    };

    // The rank whose key seeds the fused pass's lists, and where it is short of the list (long
    // lists: ops/fused.rs `seed_rank`) the sample's own lists of that rank's width.
    let rank = fusing.map_or(kp, |f| f.rank);
    let mut short = match fusing.filter(|f| f.rank < kp) {
        Some(f) => {
            let w = Select::Block.width(f.rank);
            Some((w, alloc(q_tile * w)?, alloc_u32(q_tile * w)?))
        }
        None => None,
    };
    // A fused pass's lists warmed on the sample, then kept as thresholds alone; returns how
    // many items they have seen.
    let mut seed = |tile_buf: &mut CudaSlice<f32>,
                    lv: &mut CudaSlice<f32>,
                    li: &mut CudaSlice<u32>,
                    rows: std::ops::Range<usize>|
     -> Result<usize> {
        let Some(set) = sample.as_ref() else {
            unreachable!("a fused pass has its sample")
        };
        let len = rows.len() * kp;
        // The sample's pass fills the short lists, or the lists themselves; one seed from it.
        let short_val;
        let from = if let Some((w, sv, si)) = &mut short {
            pass(set, tile_buf, sv, si, rows.clone(), 0..set.n, (0, *w))?;
            short_val = sv.slice(..rows.len() * *w);
            select::SeedFrom::Lists {
                val: &short_val,
                width: *w,
                rank,
            }
        } else {
            pass(set, tile_buf, lv, li, rows, 0..set.n, (0, kp))?;
            select::SeedFrom::Own { rank }
        };
        let (mut v, mut i) = (lv.slice_mut(..len), li.slice_mut(..len));
        select::seed_lists(gpu, &mut v, &mut i, kp, from)?;
        Ok(set.n)
    };

    for q0 in (0..nq).step_by(q_tile) {
        let q1 = (q0 + q_tile).min(nq);
        let qn = q1 - q0;
        let mut tr = gpu.phases();
        match fusing {
            None => pass(
                base,
                &mut tile_buf,
                &mut lv,
                &mut li,
                q0..q1,
                0..nb,
                (0, width),
            )?,
            Some(
                f @ FusedPlan {
                    kernel: FusedKernel::Pair(kind),
                    ..
                },
            ) => {
                let warm = seed(&mut tile_buf, &mut lv, &mut li, q0..q1)?;
                // The base in chunks that grow with what the lists have seen (the sample, then
                // the chunks), each merged before the next reads the thresholds; an overflowed
                // list is cut to its floor (survivors.cu) and proved or widened as any other.
                let (mut seen, mut chunks) = (0, 0);
                while seen < nb {
                    let c = f.chunk(kp, warm + seen, kind.row_bytes(plan));
                    let b1 = (seen + c).min(nb);
                    base.ensure(gpu, b1)?;
                    if let Some(s) = b_scaled.as_mut().filter(|_| scaled_upto < b1) {
                        s.fill(gpu, plan, base, scaled_upto..b1)?;
                        scaled_upto = b1;
                    }
                    let (Some(qops), Some(bops)) = (
                        q_ops.as_ref(),
                        pair::Operands::new(plan, base, kind, b_scaled.as_ref()),
                    ) else {
                        unreachable!("the operands were checked before the first block")
                    };
                    let list = lv.slice(..qn * kp);
                    let into = survivors::FilterInto {
                        rows: &list,
                        row_out: &mut survivors,
                        cols: None,
                        width: kp,
                    };
                    let at = pair::PairAt {
                        row_off: q0 as u32,
                        col_off: seen as u32,
                        exclude_self: false,
                    };
                    pair::filter(gpu, plan, (qops, q0..q1), (&bops, seen..b1), at, into, None)?;
                    let lists = ListsOut {
                        val: &mut lv.slice_mut(..qn * kp),
                        idx: &mut li.slice_mut(..qn * kp),
                        width: kp,
                    };
                    survivors::merge(gpu, qn, lists, &mut survivors)?;
                    (seen, chunks) = (b1, chunks + 1);
                }
                ctx.counters
                    .pair_chunks
                    .fetch_add(chunks, std::sync::atomic::Ordering::Relaxed);
                tr.note(format_args!(
                    "fused pairs ({kind:?}): {chunks} chunks after a sample of {warm}, \
                     seeded at its rank {}",
                    f.rank
                ));
            }
            Some(f) => {
                seed(&mut tile_buf, &mut lv, &mut li, q0..q1)?;
                stream
                    .memset_zeros(&mut survivors.count.slice_mut(..qn))
                    .map_err(dev("clearing counters"))?;
                let qb = qdev.block(q0, q1);
                base.ensure(gpu, nb)?;
                let all = base.block(0, nb);
                let last = lv.slice(kp - 1..);
                let thr = fused::Thresholds {
                    values: &last,
                    stride: kp,
                };
                fused::filter(gpu, plan, &qb, &all, 0, thr, &mut survivors)?;
                let lists = ListsOut {
                    val: &mut lv.slice_mut(..qn * kp),
                    idx: &mut li.slice_mut(..qn * kp),
                    width: kp,
                };
                survivors::merge(gpu, qn, lists, &mut survivors)?;
                let counts = gpu.download(&survivors.count.slice(..qn))?;
                let over: Vec<usize> = (0..qn).filter(|&r| counts[r] as usize > f.cap).collect();
                if let (Some(&lo), Some(&hi)) = (over.first(), over.last()) {
                    // Rare (a sample's threshold far above the query's final one): the span of
                    // the overflowing queries is redone with ordinary tiles.
                    pass(
                        base,
                        &mut tile_buf,
                        &mut lv,
                        &mut li,
                        q0 + lo..q0 + hi + 1,
                        0..nb,
                        (lo * kp, width),
                    )?;
                }
                let mean = counts.iter().map(|&c| c as f64).sum::<f64>() / qn as f64;
                tr.note(format_args!(
                    "fused: {mean:.0} survivors per query (cap {}), {} overflowing",
                    f.cap,
                    over.len()
                ));
            }
        }
        let len = qn * width;
        // Every row is up after the first block: the norms the proofs need come back here.
        base.complete(gpu)?;
        gpu.stream.synchronize().map_err(dev("selecting"))?;
        tr.mark("candidates: device work of a query block");
        each(BlockLists {
            q0,
            qn,
            val: lv.slice(..len),
            idx: li.slice(..len),
            mode,
            width,
            want,
        })?;
    }
    Ok(())
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
/// of normal data (session 18); on the device the same rows took 176 ms (session 20).
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

/// The first list size to try for k.
pub(crate) fn first_list(k: usize) -> usize {
    list_size(k)
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn tf32_pass_lists_double_only_where_the_selection_keeps_them() {
        let set = VectorSet::from_f32(2, 4, vec![0.5; 8]).unwrap();
        let fp32 = Numerics::new(&Metric::Euclidean, &set);
        let tf32 = fp32.clone().in_arithmetic(Arithmetic::Tf32);
        // k = 200: a list of 225, 450 under TF32 where the selection keeps it.
        assert_eq!(pass_list(&tf32, 225, Select::Auto), 450);
        assert_eq!(pass_list(&tf32, 225, Select::Block), 450);
        assert_eq!(pass_list(&fp32, 225, Select::Auto), 225);
        // Heap lists hold 256: doubling would make the selection refuse the search.
        assert_eq!(pass_list(&tf32, 225, Select::Heap), 225);
        assert_eq!(pass_list(&tf32, 72, Select::Heap), 144);
        assert_eq!(pass_list(&tf32, 1125, Select::Auto), 1125);
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
