//! Several GPUs of one host behind voisin's `Engine` trait (docs/design/multi-gpu.md; [Barrientos13] §5.1): one host
//! thread per GPU, each driving its own [`CudaEngine`].
//!
//! k-NN and range search shard the base over the GPUs (contiguous ranges; every GPU gets all
//! queries) and merge the per-GPU candidate lists with `shard::merge`, then prove, widen and
//! re-rank once; widening passes and exact keys run on the GPU that holds the rows. The graph is
//! the GPU graph driver's (engine/passes.rs): the tile pairs (I, J), I ≤ J, of one triangle schedule
//! dealt cyclically over the GPUs (every GPU holds the whole set), the partial lists merged and
//! finished on the first GPU.
//!
//! Owns the per-GPU threads and the routing of work; the tiling, selection and proof are the
//! single-GPU engine's. The same device may be listed twice (e.g. `--gpus 0,0`): two engines
//! then share it, which exercises every merge on a one-GPU machine.

use std::ops::Range;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use voisin::engine::{Engine, GraphRequest, KnnRequest, KnnResult, Op, RangeRequest, RangeResult};
use voisin::graph::checkpoint::CheckpointOptions;
use voisin::{Dataset, Error, Metric, Result, Stats, VectorSet};

use crate::engine::{on_each, passes, scaled, to_result, CudaEngine};
use crate::numerics::plan::{vectors, Numerics};
use crate::ops::device_set::DeviceSet;
use crate::ops::exact::{self, Sides};
use crate::ops::range;
use crate::options::CudaOptions;
use crate::runtime::context::Gpu;
use crate::runtime::probe::Phases;
use crate::search::finish::{finish, CandidateSource, Raw};
use crate::search::knn;
use crate::search::{route, shard};

/// The engine over several GPUs.
pub struct MultiGpu {
    engines: Vec<CudaEngine>,
}

/// One GPU's shard of a search: its base rows (global range), on the device, and all queries.
struct Shard<'a> {
    rows: Range<usize>,
    bdev: DeviceSet<'a>,
    qdev: DeviceSet<'a>,
    upload: Duration,
}

impl MultiGpu {
    /// Opens the listed devices (ordinals, repeats allowed) with default options.
    pub fn new(devices: &[usize]) -> Result<Self> {
        Self::with_options(devices, CudaOptions::default())
    }

    /// [`MultiGpu::new`] with the knobs of `opts` (every GPU's engine takes them).
    pub fn with_options(devices: &[usize], opts: CudaOptions) -> Result<Self> {
        if devices.is_empty() {
            return Err(Error::invalid("no GPU listed"));
        }
        let engines = devices
            .iter()
            .map(|&d| CudaEngine::with_options(d, opts.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiGpu { engines })
    }

    /// The engines, one per listed device.
    pub fn engines(&self) -> &[CudaEngine] {
        &self.engines
    }

    /// "cuda:0 (NVIDIA H200), cuda:1 (NVIDIA H200)".
    pub fn describe(&self) -> String {
        self.engines
            .iter()
            .map(|e| format!("cuda:{} ({})", e.ordinal(), e.device_name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Times phases for the first GPU's probe.
    fn phases(&self) -> Phases {
        match self.engines[0].lock() {
            Ok(gpu) => gpu.phases(),
            Err(_) => Phases::start(std::sync::Arc::new(crate::runtime::probe::NoProbe)),
        }
    }

    fn stats(&self) -> Stats {
        Stats {
            device: self.describe(),
            ..Default::default()
        }
    }

    /// Runs `f` on the first `count` GPUs at once, one host thread each holding its GPU.
    fn each<T: Send>(
        &self,
        count: usize,
        f: impl Fn(usize, &CudaEngine, &Gpu) -> Result<T> + Sync,
    ) -> Result<Vec<T>> {
        on_each(&self.engines[..count], f)
    }

    /// Uploads each GPU's base shard and all queries; at most one GPU per base item.
    /// With `behind`, the base shards go up behind their first tiles (device_set.rs).
    fn shards<'b>(
        &self,
        plan: &Numerics,
        bset: &'b VectorSet,
        qset: &VectorSet,
        behind: bool,
    ) -> Result<Vec<Shard<'b>>> {
        let count = self.engines.len().min(bset.len()).max(1);
        let ranges = shard::split(bset.len(), count);
        self.each(count, |g, _, gpu| {
            let t = Instant::now();
            let rows = ranges[g].clone();
            let bdev = if behind {
                DeviceSet::behind(gpu, plan, bset, rows.clone())?
            } else {
                DeviceSet::range(gpu, plan, bset, rows.clone())?
            };
            let qdev = DeviceSet::new(gpu, plan, qset)?;
            Ok(Shard {
                rows,
                bdev,
                qdev,
                upload: t.elapsed(),
            })
        })
    }

    /// Candidates of the queries `ids` (all when `None`) from every shard, merged.
    fn search(
        &self,
        plan: &Numerics,
        shards: &[Shard],
        qset: &VectorSet,
        ids: Option<&[usize]>,
        kp: usize,
        widen: bool,
    ) -> Result<Vec<Raw>> {
        let parts = self.each(shards.len(), |g, e, gpu| {
            let s = &shards[g];
            let ctx = e.ctx(gpu, plan);
            let budget = ctx.budget()?;
            let sel = if widen {
                ctx.widen_select()
            } else {
                ctx.select()
            };
            let mut raws = match ids {
                None => knn::candidates(&ctx, &s.bdev, &s.qdev, kp, sel, &budget)?,
                Some(ids) => {
                    let sub = DeviceSet::gather(gpu, plan, qset, ids)?;
                    knn::candidates(&ctx, &s.bdev, &sub, kp, sel, &budget)?
                }
            };
            shard::offset(&mut raws, s.rows.start);
            Ok(raws)
        })?;
        Ok(shard::merge(&parts, kp))
    }

    /// Exact keys of [query, global base index] pairs, each on the GPU that holds the row.
    fn exact(
        &self,
        metric: &Metric,
        bset: &VectorSet,
        qset: &VectorSet,
        shards: &[Shard],
        pairs: &[[u32; 2]],
    ) -> Result<Vec<f64>> {
        if exact::on_host(metric, bset, qset) {
            return Ok(exact::host_keys(metric, bset, qset, pairs));
        }
        let owner = |b: u32| shards.partition_point(|s| s.rows.end <= b as usize);
        let mut local: Vec<Vec<[u32; 2]>> = vec![Vec::new(); shards.len()];
        let mut at: Vec<Vec<usize>> = vec![Vec::new(); shards.len()];
        for (p, &[q, b]) in pairs.iter().enumerate() {
            let g = owner(b);
            local[g].push([q, b - shards[g].rows.start as u32]);
            at[g].push(p);
        }
        let keys = self.each(shards.len(), |g, _, gpu| {
            let s = &shards[g];
            let sides = Sides {
                bset,
                qset,
                bdev: &s.bdev,
                qdev: &s.qdev,
            };
            exact::keys(gpu, metric, &sides, &local[g])
        })?;
        let mut out = vec![0f64; pairs.len()];
        for (ks, pos) in keys.into_iter().zip(at) {
            for (k, p) in ks.into_iter().zip(pos) {
                out[p] = k;
            }
        }
        Ok(out)
    }
}

/// The queries of a search sharded over the GPUs: wider lists from every shard, merged; exact
/// keys on the GPU that holds each row.
struct Sharded<'a> {
    multi: &'a MultiGpu,
    plan: &'a Numerics,
    metric: &'a Metric,
    bset: &'a VectorSet,
    qset: &'a VectorSet,
    shards: &'a [Shard<'a>],
    max_norm: f64,
}

impl CandidateSource for Sharded<'_> {
    fn base_len(&self) -> usize {
        self.bset.len()
    }

    fn norms(&self) -> (&[f64], f64) {
        (self.shards[0].qdev.norm(), self.max_norm)
    }

    fn redo(&mut self, ids: &[usize], kp: usize) -> Result<Vec<Raw>> {
        self.multi
            .search(self.plan, self.shards, self.qset, Some(ids), kp, true)
    }

    fn exact_keys(&mut self, pairs: &[[u32; 2]]) -> Result<Vec<f64>> {
        self.multi
            .exact(self.metric, self.bset, self.qset, self.shards, pairs)
    }

    fn phases(&self) -> Phases {
        self.multi.phases()
    }
}

/// The error for the first NaN or infinite value, base rows before queries as on one GPU.
fn check_shards(shards: &[Shard], bset: &VectorSet, qset: &VectorSet) -> Result<()> {
    for s in shards {
        s.bdev.check(bset, s.rows.start)?;
    }
    match shards.first() {
        Some(s) => s.qdev.check(qset, 0),
        None => Ok(()),
    }
}

impl Engine for MultiGpu {
    fn name(&self) -> String {
        let ids: Vec<String> = self
            .engines
            .iter()
            .map(|e| e.ordinal().to_string())
            .collect();
        format!("cuda:{}", ids.join(","))
    }

    fn supports(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
        self.engines[0].supports(data, metric, op)
    }

    fn knn_request(&self, req: &KnnRequest<'_>) -> Result<KnnResult> {
        let keep_type = self.engines[0].keeps_type();
        scaled::knn(req, keep_type, |r| self.knn_unscaled(r))
    }

    fn range_request(&self, req: &RangeRequest<'_>) -> Result<RangeResult> {
        let keep_type = self.engines[0].keeps_type();
        scaled::range(req, keep_type, |r| self.range_unscaled(r))
    }

    fn graph_request(&self, req: &GraphRequest<'_>) -> Result<KnnResult> {
        passes::build(&self.engines, req, None)
    }

    fn graph_checkpointed(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        checkpoint: &CheckpointOptions,
    ) -> Result<KnnResult> {
        passes::build(
            &self.engines,
            &GraphRequest::new(data, k, metric)?,
            Some(checkpoint),
        )
    }
}

impl MultiGpu {
    /// A k-NN search of the values as stored (`scaled` brings refused magnitudes here on
    /// copies).
    fn knn_unscaled(&self, req: &KnnRequest<'_>) -> Result<KnnResult> {
        let (base, queries, k, metric) = (req.base(), req.queries(), req.k(), req.metric());
        // The engines share the configuration's token; the first looks at it for all.
        self.engines[0].check_cancel()?;
        if matches!(base, Dataset::Strings(_)) {
            // Strings run on one GPU (see `range`).
            return self.engines[0].knn_request(req);
        }
        let mut tr = self.phases();
        let (bset, qset) = (vectors(base, metric)?, vectors(queries, metric)?);
        tr.mark("multi knn: input checks");
        let mut stats = self.stats();
        if k == 0 || qset.is_empty() {
            return Ok(to_result(vec![vec![]; qset.len()], k, metric, stats));
        }
        let t = Instant::now();
        let plan = self.engines[0].pair_plan(metric, bset, qset)?;
        stats.arithmetic = plan.arithmetic();
        tr.mark("multi knn: plan");
        let shards = self.shards(&plan, bset, qset, true)?;
        tr.mark("multi knn: queries uploaded");
        stats.transfer += shards.iter().map(|s| s.upload).max().unwrap_or_default();
        let kp = route::first_list(k);
        let raws = self.search(&plan, &shards, qset, None, kp, false);
        tr.mark("multi knn: candidates from every shard, merged");
        self.engines[0].check_cancel()?;
        // The shards' norms exist once their rows are up (the search did that); NaN and
        // infinite values are named before anything else is reported.
        self.each(shards.len(), |g, _, gpu| shards[g].bdev.complete(gpu))?;
        check_shards(&shards, bset, qset)?;
        let raws = raws?;
        stats.compute += t.elapsed().saturating_sub(stats.transfer);
        stats.distance_evals += (bset.len() * qset.len()) as u64;
        let max_norm = shards.iter().map(|s| s.bdev.max_norm()).fold(0.0, f64::max);
        let mut src = Sharded {
            multi: self,
            plan: &plan,
            metric,
            bset,
            qset,
            shards: &shards,
            max_norm,
        };
        let rows = finish(&plan, &mut src, k, kp, raws, &mut stats)?;
        tr.mark("multi knn: proof and re-rank");
        let r = to_result(rows, k, metric, stats);
        drop(shards);
        tr.mark("multi knn: result, shards freed");
        Ok(r)
    }

    /// A range search of the values as stored.
    fn range_unscaled(&self, req: &RangeRequest<'_>) -> Result<RangeResult> {
        let (base, queries, radius, metric) =
            (req.base(), req.queries(), req.radius(), req.metric());
        self.engines[0].check_cancel()?;
        if matches!(base, Dataset::Strings(_)) {
            // The string kernel's work is small next to its transfers: one GPU.
            return self.engines[0].range_request(req);
        }
        let (bset, qset) = (vectors(base, metric)?, vectors(queries, metric)?);
        let mut stats = self.stats();
        let t = Instant::now();
        let plan = self.engines[0].pair_plan(metric, bset, qset)?;
        stats.arithmetic = plan.arithmetic();
        let shards = self.shards(&plan, bset, qset, false)?;
        check_shards(&shards, bset, qset)?;
        stats.transfer += shards.iter().map(|s| s.upload).max().unwrap_or_default();
        let max_norm = shards.iter().map(|s| s.bdev.max_norm()).fold(0.0, f64::max);
        let thr = range::thresholds(&plan, metric, radius, shards[0].qdev.norm(), max_norm);
        let parts = self.each(shards.len(), |g, e, gpu| {
            let s = &shards[g];
            let (offsets, mut ids) = range::candidates(
                gpu,
                route::product(&plan, false),
                &plan,
                &s.bdev,
                &s.qdev,
                &thr,
                &e.budget(gpu)?,
            )?;
            ids.iter_mut().for_each(|i| *i += s.rows.start as u32);
            Ok((offsets, ids))
        })?;
        stats.compute += t.elapsed().saturating_sub(stats.transfer);
        stats.distance_evals += 2 * (bset.len() * qset.len()) as u64;
        let t = Instant::now();
        // Per query, the shards' candidates in shard order (increasing indices), as CSR.
        let lists: Vec<Vec<u32>> = (0..qset.len())
            .into_par_iter()
            .map(|q| {
                parts
                    .iter()
                    .flat_map(|(o, ids)| ids[o[q]..o[q + 1]].iter().copied())
                    .collect()
            })
            .collect();
        let (offsets, ids) = crate::search::range::csr(&lists);
        let keys = |pairs: &[[u32; 2]]| self.exact(metric, bset, qset, &shards, pairs);
        crate::search::range::finish(metric, radius, &offsets, &ids, keys, t, stats)
    }
}
