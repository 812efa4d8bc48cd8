//! Bases larger than the GPU's free memory (docs/design/streaming.md; [Barrientos13] §5.2): the base goes through the
//! device in shards of rows, straight from the host set through page-locked staging buffers.
//!
//! Two streams overlap the transfer of shard s + 1 with the work on shard s: a loader thread
//! fills the staging buffers (the host copy of one chunk overlaps the DMA of the previous one)
//! and queues the copies on its own stream; the engine's stream waits on the shard's event,
//! prepares its rows and runs the caller's work. At most three shards' rows are on the device
//! at once (the one in work, raw and prepared, and the next one's raw rows).
//!
//! Owns the shard schedule and its memory arithmetic; what is computed per shard and how the
//! shards' answers merge belong to the callers (engine, shard.rs). Raw rows are not kept after
//! a shard, so exact keys of a streamed base are computed on the host.

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

use cudarc::driver::CudaEvent;
use rayon::prelude::*;
use voisin::data::VectorSet;
use voisin::{Error, Metric, RangeResult, Result, Stats};

use crate::numerics::plan::{Numerics, TileRows};
use crate::ops::device_set::{pitch, DeviceRows, DeviceSet, HostRows};
use crate::ops::{exact, range, Budget};
use crate::options::Select;
use crate::runtime::context::{dev, Gpu};
use crate::runtime::probe::Phases;
use crate::runtime::staging::Staging;
use crate::search::finish::{finish, CandidateSource, Raw};
use crate::search::knn;
use crate::search::{route, shard, SearchCtx};

/// Values per staging chunk (16 MiB): small enough to pin quickly, large enough for full DMA
/// speed.
const CHUNK: usize = 4 << 20;

/// The device bytes a set of `n` rows of `dim` values takes when resident under `plan`: its
/// stored rows (dense ones padded as `Gpu::upload` pads them, f16/bf16 rows to their stride),
/// the prepared tile rows (f32 or int8; none where the tiles read the stored rows) and the
/// norms.
pub(crate) fn resident_bytes(n: usize, dim: usize, plan: &Numerics) -> usize {
    let ld = plan.storage.row_stride(dim);
    let values = n * ld;
    let raw = if values < (1 << 20) || ld != dim {
        values
    } else {
        values.div_ceil(16 << 20) * (16 << 20)
    };
    let tiles = match plan.tile_rows() {
        TileRows::F32 => n * dim * 4,
        TileRows::Stored => 0,
        TileRows::I8 => n * TileRows::I8.stride(plan.storage, dim),
    };
    raw * plan.storage.bytes() + tiles + n * 16
}

/// Device bytes a search needs beyond its inputs: the smallest working set and the lists.
pub(crate) fn working_bytes(queries: usize, kp: usize) -> usize {
    (16 << 20) + queries * kp * 16
}

/// Rows per shard with `avail` bytes for the shards: three shards' rows in flight take half of
/// it, the other half is left to the working set.
pub(crate) fn shard_rows(avail: usize, dim: usize) -> Result<usize> {
    let rows = avail / (2 * 3 * dim.max(1) * 4 + 64);
    if rows < 64 {
        return Err(Error::device(format!(
            "cuda: too little device memory to stream the base ({} MiB free)",
            avail >> 20
        )));
    }
    Ok(rows)
}

/// One shard's raw rows on the device, with the event of its copy.
type Loaded = (DeviceRows, CudaEvent, Range<usize>);

/// Runs `work(shard, rows)` on each shard of `rows` rows of `set`, in order.
pub(crate) fn for_each_shard(
    gpu: &Gpu,
    plan: &Numerics,
    set: &VectorSet,
    rows: usize,
    mut work: impl FnMut(&DeviceSet, Range<usize>) -> Result<()>,
) -> Result<()> {
    let n = set.len();
    let ranges: Vec<Range<usize>> = (0..n)
        .step_by(rows.max(1))
        .map(|a| a..(a + rows).min(n))
        .collect();
    let copy = gpu
        .ctx
        .new_stream()
        .map_err(dev("creating a copy stream"))?;
    let ctx = gpu.ctx.clone();
    std::thread::scope(|s| {
        // Capacity 0: the loader runs one shard ahead of the work, no more.
        let (tx, rx) = sync_channel::<Result<Loaded>>(0);
        let ranges = &ranges;
        s.spawn(move || {
            let load = || -> Result<()> {
                ctx.bind_to_thread().map_err(dev("binding the context"))?;
                // Uploads only: write-combined pages.
                let mut staging = Staging::write_combined(&ctx, CHUNK)?;
                for r in ranges {
                    let src = HostRows::of(plan.storage, set, r.clone());
                    let pitch = pitch(plan.storage, plan.dim);
                    // Filled below before the engine's stream reads it (event).
                    let mut dst =
                        DeviceRows::alloc(&copy, plan.storage, pitch.device_len(src.len()))?;
                    // SAFETY: `dst` holds the rows' device values, of this context, and lives
                    // until the engine's stream, ordered after the copies by `ready`, is done
                    // with it.
                    unsafe { src.stage(&mut staging, &mut dst, pitch, &copy, "copying a shard") }?;
                    let ready = copy.record_event(None).map_err(dev("recording an event"))?;
                    if tx.send(Ok((dst, ready, r.clone()))).is_err() {
                        // The work stopped on an error of its own.
                        return Ok(());
                    }
                }
                Ok(())
            };
            if let Err(e) = load() {
                let _ = tx.send(Err(e));
            }
        });
        for _ in 0..ranges.len() {
            let (raw, ready, r) = rx
                .recv()
                .map_err(|_| Error::device("cuda: the shard loader stopped"))??;
            gpu.stream
                .wait(&ready)
                .map_err(dev("waiting for a shard"))?;
            let shard = DeviceSet::prepare(gpu, plan, raw, r.len())?;
            work(&shard, r)?;
            // The work has synchronised the engine's stream (it downloads its results), so
            // the shard's buffers are free to go.
        }
        Ok(())
    })
}

/// Whether base and queries fit on the device with room for the working set.
pub(crate) fn fits(
    gpu: &Gpu,
    b: &VectorSet,
    q: &VectorSet,
    kp: usize,
    plan: &Numerics,
) -> Result<bool> {
    let rows = resident_bytes(b.len(), b.dim(), plan) + resident_bytes(q.len(), q.dim(), plan);
    fits_beside(gpu, rows, q.len(), kp)
}

/// Whether `rows` bytes of sets still to go up fit on the device now (beside what is already
/// there), with room for the working set of `queries` lists of `kp` candidates.
pub(crate) fn fits_beside(gpu: &Gpu, rows: usize, queries: usize, kp: usize) -> Result<bool> {
    Ok(rows + working_bytes(queries, kp) <= gpu.free_memory()?)
}

/// A graph's set must fit (its tiles pair every item with every other; not streamed yet).
pub(crate) fn graph_fits(gpu: &Gpu, set: &VectorSet, k: usize, plan: &Numerics) -> Result<()> {
    let kp = route::first_list(k).max(crate::ops::select::COLS_KP);
    let need = resident_bytes(set.len(), set.dim(), plan) + working_bytes(set.len(), kp);
    let free = gpu.free_memory()?;
    if need > free {
        return Err(Error::device(format!(
            "cuda: a k-NN graph of this set needs about {} MiB of device memory, {} MiB are \
             free (graphs larger than the GPU are not streamed yet; use --device cpu)",
            need >> 20,
            free >> 20
        )));
    }
    Ok(())
}

/// Rows per shard once the queries (already uploaded) leave what they leave.
fn rows_per_shard(ctx: &SearchCtx<'_>, queries: usize, kp: usize) -> Result<usize> {
    let free = ctx.gpu.free_memory()?;
    shard_rows(
        free.saturating_sub(working_bytes(queries, kp)),
        ctx.plan.dim,
    )
}

/// One pass of k-NN candidates over the streamed base for the queries on the device;
/// raises `max_norm` to the largest prepared base norm seen.
fn streamed_candidates(
    ctx: &SearchCtx<'_>,
    bset: &VectorSet,
    qdev: &DeviceSet,
    kp: usize,
    sel: Select,
    max_norm: &mut f64,
) -> Result<Vec<Raw>> {
    let rows = rows_per_shard(ctx, qdev.n, kp)?;
    // Measured before the shards arrive (measuring synchronises the whole context, the
    // loader's stream too); the shards take at most half of the memory seen here.
    let bytes = ctx.budget()?.bytes;
    let mut acc: Vec<Raw> = (0..qdev.n).map(|_| Raw::done()).collect();
    for_each_shard(ctx.gpu, ctx.plan, bset, rows, |base, r| {
        ctx.check_cancel()?;
        *max_norm = max_norm.max(base.max_norm());
        let mut raws = ctx.shrinking(Budget { bytes }, |b| {
            knn::candidates(ctx, base, qdev, kp, sel, b)
        })?;
        shard::offset(&mut raws, r.start);
        acc = shard::merge(&[std::mem::take(&mut acc), raws], kp);
        ctx.counters.streamed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })?;
    Ok(acc)
}

/// k-NN search over a base streamed in shards; exact keys on the host.
pub(crate) fn knn(
    ctx: &SearchCtx<'_>,
    metric: &Metric,
    bset: &VectorSet,
    qset: &VectorSet,
    k: usize,
    stats: &mut Stats,
) -> Result<Vec<Vec<(f64, u32)>>> {
    let t = Instant::now();
    let qdev = DeviceSet::new(ctx.gpu, ctx.plan, qset)?;
    let kp = route::first_list(k);
    let mut max_norm = 0.0;
    let raws = streamed_candidates(ctx, bset, &qdev, kp, ctx.select(), &mut max_norm)?;
    // Transfers overlap the work: all of it counts as compute.
    stats.compute += t.elapsed();
    stats.distance_evals += (bset.len() * qset.len()) as u64;
    let mut src = Streamed {
        ctx,
        metric,
        bset,
        qset,
        qnorm: qdev.norm(),
        max_norm,
    };
    finish(ctx.plan, &mut src, k, kp, raws, stats)
}

/// The queries of a streamed search: wider lists from the base streamed again, exact keys on
/// the host (a streamed base keeps no raw rows on the device).
struct Streamed<'a> {
    ctx: &'a SearchCtx<'a>,
    metric: &'a Metric,
    bset: &'a VectorSet,
    qset: &'a VectorSet,
    qnorm: &'a [f64],
    max_norm: f64,
}

impl CandidateSource for Streamed<'_> {
    fn base_len(&self) -> usize {
        self.bset.len()
    }

    fn norms(&self) -> (&[f64], f64) {
        (self.qnorm, self.max_norm)
    }

    /// Wider lists for the queries `ids`, as many queries per stream of the base as leave
    /// room for the shards: a list widened towards the whole base (f64 rows far from the
    /// origin under a memory cap) takes one query at a time rather than failing.
    fn redo(&mut self, ids: &[usize], kp: usize) -> Result<Vec<Raw>> {
        let ctx = self.ctx;
        let room = ctx.gpu.free_memory()? / 2;
        let per = (room.saturating_sub(working_bytes(0, 0)) / (kp.max(1) * 16)).max(1);
        let mut out = Vec::with_capacity(ids.len());
        for part in ids.chunks(per) {
            let sub = DeviceSet::gather(ctx.gpu, ctx.plan, self.qset, part)?;
            let mut seen = 0.0;
            out.extend(streamed_candidates(
                ctx,
                self.bset,
                &sub,
                kp,
                ctx.widen_select(),
                &mut seen,
            )?);
        }
        Ok(out)
    }

    fn exact_keys(&mut self, pairs: &[[u32; 2]]) -> Result<Vec<f64>> {
        Ok(exact::host_keys(self.metric, self.bset, self.qset, pairs))
    }

    fn phases(&self) -> Phases {
        self.ctx.gpu.phases()
    }
}

/// Range search over a base streamed in shards; each shard is filtered with its own norm
/// bound, exact keys on the host.
pub(crate) fn range(
    ctx: &SearchCtx<'_>,
    metric: &Metric,
    bset: &VectorSet,
    qset: &VectorSet,
    radius: f64,
    mut stats: Stats,
) -> Result<RangeResult> {
    let (gpu, plan) = (ctx.gpu, ctx.plan);
    let t = Instant::now();
    let qdev = DeviceSet::new(gpu, plan, qset)?;
    let rows = rows_per_shard(ctx, qset.len(), 1)?;
    let bytes = ctx.budget()?.bytes;
    let mut lists: Vec<Vec<u32>> = vec![Vec::new(); qset.len()];
    for_each_shard(gpu, plan, bset, rows, |base, r| {
        ctx.check_cancel()?;
        let thr = range::thresholds(plan, metric, radius, qdev.norm(), base.max_norm());
        let (offsets, ids) = ctx.shrinking(Budget { bytes }, |b| {
            range::candidates(gpu, route::product(plan, false), plan, base, &qdev, &thr, b)
        })?;
        let start = r.start as u32;
        lists.par_iter_mut().enumerate().for_each(|(q, l)| {
            l.extend(ids[offsets[q]..offsets[q + 1]].iter().map(|&i| i + start))
        });
        ctx.counters.streamed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })?;
    stats.compute += t.elapsed();
    stats.distance_evals += 2 * (bset.len() * qset.len()) as u64;
    let t = Instant::now();
    let (offsets, ids) = super::range::csr(&lists);
    let keys = |pairs: &[[u32; 2]]| Ok(exact::host_keys(metric, bset, qset, pairs));
    super::range::finish(metric, radius, &offsets, &ids, keys, t, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_sizes_follow_the_upload_padding() {
        use voisin::data::ElemType;
        let e = ElemType::F32;
        // The plan on the storage's own cores (what `auto` takes for f16 and u8 rows), or in
        // fp32.
        let plan = |elem: ElemType, d: usize, own: bool| {
            let set = VectorSet::from_f32(1, d, vec![0.0; d]).unwrap();
            let plan = Numerics::new(&Metric::Euclidean, &set).on_storage(elem, elem);
            match own {
                true => plan.on_own_cores(),
                false => plan,
            }
        };
        let f32_plan = plan(e, 4, false);
        assert_eq!(resident_bytes(10, 4, &f32_plan), (40 + 40) * 4 + 160);
        let big = resident_bytes(1 << 20, 20, &plan(e, 20, false));
        assert_eq!(big, ((32 << 20) + (20 << 20)) * 4 + (16 << 20));
        // f16 rows to a 16-byte stride, no prepared rows; u8 rows dense and int8 rows padded
        // to 16; u8 rows under fp32 with f32 tile rows.
        let f16 = plan(ElemType::F16, 5, true);
        assert_eq!(resident_bytes(10, 5, &f16), 10 * 8 * 2 + 160);
        let u8_int8 = plan(ElemType::U8, 5, true);
        assert_eq!(resident_bytes(10, 5, &u8_int8), 50 + 10 * 16 + 160);
        let u8_fp32 = plan(ElemType::U8, 5, false);
        assert_eq!(resident_bytes(10, 5, &u8_fp32), 50 + 200 + 160);
    }

    #[test]
    fn shards_fit_three_times_in_half_the_memory() {
        let rows = shard_rows(1 << 30, 128).unwrap();
        assert!(3 * rows * 128 * 4 <= 1 << 29);
        assert!(shard_rows(1 << 10, 128).is_err());
    }
}
