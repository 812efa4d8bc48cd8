//! Searches over a base already on this GPU, and the prepared base that keeps one there.
//!
//! [`CudaEngine::knn_on`] and [`CudaEngine::range_on`] are the tail of every resident k-NN and
//! range search: the base is on the device (whole, or going up behind the first tiles), the
//! queries go up, and the search, the finish and the checks of NaN and infinities follow. The
//! one-shot requests upload the base for the call; a [`CudaPrepared`] uploads it once, with its
//! norms and the metric's plan, and every later batch of queries pays only for its own rows.
//! Both run the same tail, so a prepared base answers byte for byte as the engine does.

use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use voisin::engine::{KnnRequest, Prepared, RangeRequest};
use voisin::{Dataset, Engine, KnnResult, Metric, RangeResult, Result, Stats, VectorSet};

use super::{to_result, CudaEngine};
use crate::numerics::plan::{vectors, InputRounding, Numerics, Storage};
use crate::ops::device_set::DeviceSet;
use crate::ops::exact::{self, Sides};
use crate::ops::{range, Budget};
use crate::runtime::context::Gpu;
use crate::search::pilot::AutoChoice;
use crate::search::{knn, pilot, route, stream, SearchCtx};

/// A base on this GPU: its host rows (host finish, messages) and its device copy.
#[derive(Clone, Copy)]
pub(super) struct OnDevice<'a> {
    pub bset: &'a VectorSet,
    pub bdev: &'a DeviceSet<'a>,
}

/// The statistics of a call so far and when its transfers started.
pub(super) struct Started {
    pub stats: Stats,
    pub at: Instant,
}

/// What a k-NN call asks of a base on this GPU: its queries, the neighbours of each, and the
/// base's arithmetic choice under `--precision auto` (kept by a prepared base).
pub(super) struct KnnAsked<'a> {
    pub queries: &'a VectorSet,
    pub k: usize,
    pub auto: &'a AutoChoice,
}

/// What a range call asks of a base on this GPU: its queries and the radius.
pub(super) struct RangeAsked<'a> {
    pub queries: &'a VectorSet,
    pub radius: f64,
}

impl CudaEngine {
    /// k-NN of `qset` against the base `on` this GPU, under `ctx` (the base's plan) with the
    /// working-set `budget` measured before the base went up: the queries are uploaded, under
    /// `--precision auto` a pilot picks TF32 or fp32 tiles (once per base: `auto` keeps the
    /// choice), another sizes the first lists, the search and its finish run, and then NaN and
    /// infinite values are named (base before queries) if any row had one. `--stats` reports
    /// the arithmetic that ran.
    pub(super) fn knn_on(
        &self,
        ctx: &SearchCtx<'_>,
        metric: &Metric,
        on: OnDevice<'_>,
        asked: KnnAsked<'_>,
        budget: Budget,
        started: Started,
    ) -> Result<KnnResult> {
        let (qset, k, auto) = (asked.queries, asked.k, asked.auto);
        let Started {
            mut stats,
            at: started,
        } = started;
        let gpu = ctx.gpu;
        let mut tr = gpu.phases();
        let qdev = DeviceSet::new(gpu, ctx.plan, qset)?;
        stats.transfer += started.elapsed();
        let t = Instant::now();
        tr.mark("knn: upload and prepare");
        let base = pilot::Base {
            rows: on.bset,
            dev: on.bdev,
        };
        let asked = pilot::Asked {
            queries: qset,
            k,
            self_pairs: false,
        };
        let piloted = auto.plan(ctx, base, asked, &budget)?;
        let (plan, list) = (piloted.plan, piloted.first_list);
        let ctx = &SearchCtx {
            plan: &plan,
            ..*ctx
        };
        stats.arithmetic = plan.arithmetic();
        tr.mark("knn: arithmetic pilot");
        // The arithmetic pilot may have sized TF32's first list already.
        let kp = pilot::pilot_list(ctx, on.bdev, asked, &budget)?.max(list.unwrap_or(0));
        tr.mark("knn: pilot");
        stats.compute += t.elapsed();
        let sides = Sides {
            bset: on.bset,
            qset,
            bdev: on.bdev,
            qdev: &qdev,
        };
        let res = knn::search(ctx, metric, &sides, k, kp, budget, &mut stats);
        tr.mark("knn: search");
        // NaN and infinite values show in the norms, which the base has only once it is all up:
        // checked after the search (a bounded pass; its result or error is then discarded),
        // base before queries.
        on.bdev.complete(gpu)?;
        on.bdev.check(on.bset, 0)?;
        qdev.check(qset, 0)?;
        self.check_cancel()?;
        tr.mark("knn: base complete, inputs checked");
        drop(qdev);
        tr.mark("knn: queries freed");
        res
    }

    /// Every item of the base `on` this GPU within `radius` of each query of `qset`: the
    /// queries are uploaded and checked, the device lists candidates under the plan's
    /// thresholds, and exact keys decide. The GPU's lock goes before the host's membership test.
    pub(super) fn range_on(
        &self,
        gpu: MutexGuard<'_, Gpu>,
        plan: &Numerics,
        metric: &Metric,
        on: OnDevice<'_>,
        asked: RangeAsked<'_>,
        started: Started,
    ) -> Result<RangeResult> {
        let (qset, radius) = (asked.queries, asked.radius);
        let Started { mut stats, at: t } = started;
        let ctx = self.ctx(&gpu, plan);
        let qdev = DeviceSet::new(&gpu, plan, qset)?;
        on.bdev.check(on.bset, 0)?;
        qdev.check(qset, 0)?;
        let thr = range::thresholds(plan, metric, radius, qdev.norm(), on.bdev.max_norm());
        let budget = ctx.budget()?;
        let (offsets, ids) = ctx.shrinking(budget, |b| {
            range::candidates(
                &gpu,
                route::product(plan, false),
                plan,
                on.bdev,
                &qdev,
                &thr,
                b,
            )
        })?;
        stats.compute += t.elapsed();
        stats.distance_evals += 2 * (on.bset.len() * qset.len()) as u64;
        let t = Instant::now();
        let sides = Sides {
            bset: on.bset,
            qset,
            bdev: on.bdev,
            qdev: &qdev,
        };
        let keys = |pairs: &[[u32; 2]]| {
            let keys = exact::keys(&gpu, metric, &sides, pairs);
            // The GPU's work is done: its lock goes before the host's membership test.
            drop(gpu);
            keys
        };
        crate::search::range::finish(metric, radius, &offsets, &ids, keys, t, stats)
    }
}

/// A base prepared on one GPU ([`Engine::prepare`] of [`CudaEngine`]): the metric's plan and
/// the rows with their norms stay in device memory until it is dropped, so each search uploads
/// its queries only. Under `--precision auto` its first k-NN search chooses TF32 or fp32 tiles
/// (a pilot, as a one-shot search runs) and the later ones keep that choice; range searches
/// stay fp32. A base the CUDA engine does not hold resident (strings, or one that does
/// not fit beside the working set) is kept on the host and searched as the engine searches it;
/// so is a batch of queries too large to go up beside the resident base.
pub struct CudaPrepared {
    /// Dropped before the engine (fields drop in order): its device memory is the engine's.
    resident: Option<Resident>,
    engine: Arc<CudaEngine>,
    base: Arc<Dataset>,
    metric: Metric,
}

/// The device side of a prepared base.
struct Resident {
    /// The base's plan before queries: each batch searches under a copy widened for its own
    /// f64 rounding and the base's ([`Resident::plan_for`]).
    plan: Numerics,
    /// The base's f64 storage and rounding, measured once.
    rounding: InputRounding,
    bdev: DeviceSet<'static>,
    /// TF32 or fp32 under `--precision auto`: chosen at the first k-NN search, kept after.
    auto: AutoChoice,
}

impl Resident {
    /// The plan of a search of this base for `qset` under `metric`; `None` when the base is
    /// on the device in its stored half type and `qset` is stored otherwise (the tiles take one
    /// element type: such a batch is searched as the engine searches it, on f32 copies).
    fn plan_for(&self, metric: &Metric, bset: &VectorSet, qset: &VectorSet) -> Option<Numerics> {
        if self.plan.storage != Storage::F32 && qset.elem_type() != bset.elem_type() {
            return None;
        }
        let queries = InputRounding::of(metric, qset);
        Some(
            self.plan
                .clone()
                .with_roundings(metric, &self.rounding, &queries),
        )
    }
}

impl CudaPrepared {
    /// Prepares `base` under `metric` on `engine`'s GPU (the metric must apply to the base).
    /// NaN and infinities in the base are refused here, as the engine's searches refuse them.
    pub fn new(engine: Arc<CudaEngine>, base: Arc<Dataset>, metric: &Metric) -> Result<Self> {
        voisin::engine::check_metric(&base, metric)?;
        // What the tiles here take (`vectors` is the engine's `supports` for vectors); the
        // rest is kept on the host.
        let resident = match vectors(&base, metric) {
            Ok(bset) if !bset.is_empty() => {
                let gpu = engine.lock()?;
                // Room for the base and the working set of a thousand queries.
                let plan = engine.base_plan(metric, bset)?;
                let bytes = stream::resident_bytes(bset.len(), bset.dim(), &plan);
                if stream::fits_beside(&gpu, bytes, 1000, route::first_list(10))? {
                    let bdev = DeviceSet::new(&gpu, &plan, bset)?;
                    bdev.check(bset, 0)?;
                    let rounding = InputRounding::of(metric, bset);
                    Some(Resident {
                        plan,
                        rounding,
                        bdev,
                        auto: AutoChoice::default(),
                    })
                } else {
                    None
                }
            }
            _ => None,
        };
        Ok(CudaPrepared {
            resident,
            engine,
            base,
            metric: metric.clone(),
        })
    }

    /// The device side and the base's vectors (checked when they went up), when the base is
    /// resident.
    fn on_device(&self) -> Option<(&Resident, &VectorSet)> {
        match (&self.resident, &*self.base) {
            (Some(res), Dataset::Vectors(bset)) => Some((res, bset)),
            _ => None,
        }
    }
}

impl Prepared for CudaPrepared {
    fn knn(&self, queries: &Dataset, k: usize) -> Result<KnnResult> {
        let req = KnnRequest::new(&self.base, queries, k, &self.metric)?;
        let Some((res, bset)) = self.on_device() else {
            return self.engine.knn_request(&req);
        };
        let (engine, metric, k) = (&*self.engine, &self.metric, req.k());
        engine.check_cancel()?;
        let started = Instant::now();
        // Queries the tiles refuse for their magnitudes: the engine's road scales both sets.
        let Ok(qset) = vectors(queries, metric) else {
            return engine.knn_request(&req);
        };
        let gpu = engine.lock()?;
        let stats = engine.stats(&gpu);
        if k == 0 || qset.is_empty() {
            return Ok(to_result(vec![vec![]; qset.len()], k, metric, stats));
        }
        let bytes = stream::resident_bytes(qset.len(), qset.dim(), &res.plan);
        let plan = match res.plan_for(metric, bset, qset) {
            Some(p) if stream::fits_beside(&gpu, bytes, qset.len(), route::first_list(k))? => p,
            _ => {
                drop(gpu);
                return engine.knn_request(&req);
            }
        };
        let ctx = engine.ctx(&gpu, &plan);
        let budget = ctx.budget()?;
        let on = OnDevice {
            bset,
            bdev: &res.bdev,
        };
        let asked = KnnAsked {
            queries: qset,
            k,
            auto: &res.auto,
        };
        let started = Started { stats, at: started };
        engine.knn_on(&ctx, metric, on, asked, budget, started)
    }

    fn range(&self, queries: &Dataset, radius: f64) -> Result<RangeResult> {
        let req = RangeRequest::new(&self.base, queries, radius, &self.metric)?;
        let Some((res, bset)) = self.on_device() else {
            return self.engine.range_request(&req);
        };
        let (engine, metric) = (&*self.engine, &self.metric);
        engine.check_cancel()?;
        let Ok(qset) = vectors(queries, metric) else {
            return engine.range_request(&req);
        };
        let gpu = engine.lock()?;
        let stats = engine.stats(&gpu);
        let bytes = stream::resident_bytes(qset.len(), qset.dim(), &res.plan);
        let plan = match res.plan_for(metric, bset, qset) {
            Some(p) if stream::fits_beside(&gpu, bytes, qset.len(), 1)? => p,
            _ => {
                drop(gpu);
                return engine.range_request(&req);
            }
        };
        let on = OnDevice {
            bset,
            bdev: &res.bdev,
        };
        let t = Instant::now();
        let mut stats = stats;
        stats.arithmetic = plan.arithmetic();
        let asked = RangeAsked {
            queries: qset,
            radius: req.radius(),
        };
        engine.range_on(gpu, &plan, metric, on, asked, Started { stats, at: t })
    }

    fn len(&self) -> usize {
        self.base.len()
    }

    fn metric(&self) -> &Metric {
        &self.metric
    }
}
