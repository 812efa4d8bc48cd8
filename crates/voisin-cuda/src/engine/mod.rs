//! The engine on one GPU: [`CudaEngine`], the core's `Engine` seam over it, and its entry points
//! beside the seam (graph shares for ranks); every graph of vectors goes through `passes`.
//!
//! Owns the GPU (behind a lock: calls are serialised on its stream), the options, the
//! diagnostics counters and the choice of road per request: strings to `strings`, a base that
//! does not fit to `search::stream`, the rest to `search::knn` and the range filter, graphs
//! to `passes` (the core's graph driver over this one GPU). The crate-level per-device API
//! ([`CudaEngine::lock`], [`CudaEngine::ctx`], [`CudaEngine::plan`], ...) is what `multi` and
//! `index` compose engines through.

pub(crate) mod passes;
mod prepared;
pub(crate) mod scaled;

pub use passes::GpuBuild;
pub use prepared::CudaPrepared;
use prepared::{KnnAsked, OnDevice, RangeAsked, Started};

use std::sync::Mutex;
use std::time::Instant;

use voisin::engine::{Engine, GraphRequest, KnnRequest, KnnResult, Op, RangeRequest, RangeResult};
use voisin::graph::TileOwner;
use voisin::{Dataset, Error, Metric, Result, Stats, VectorSet};

use crate::numerics::plan::{check_finite, vectors, Numerics};
use crate::ops::device_set::DeviceSet;
use crate::ops::Budget;
use crate::options::CudaOptions;
use crate::runtime::context::{self, Gpu};
use crate::runtime::probe;
use crate::search::graph::{self, Lists, PartialGraph};
use crate::search::{pilot, route, stream, Counters, SearchCtx};
use crate::strings;

/// The engine on one GPU. Calls are serialised on the device's stream.
pub struct CudaEngine {
    gpu: Mutex<Gpu>,
    device: usize,
    opts: CudaOptions,
    /// The levenshtein kernel, loaded at the first string range search.
    lev: std::sync::OnceLock<cudarc::driver::CudaFunction>,
    /// Free memory held back under `device_memory`, or the pool's cache without it.
    _ballast: crate::runtime::context::Ballast,
    /// Shrinks, streamed shards and host finishes, for diagnostics.
    counters: Counters,
}

impl CudaEngine {
    /// Opens GPU `device` with default options; a clear [`Error::Device`] when CUDA, the device,
    /// or the kernels' compilation is missing.
    pub fn new(device: usize) -> Result<Self> {
        Self::with_options(device, CudaOptions::default())
    }

    /// Sends the timings of the engine's phases to `probe` from now on (none by default).
    pub fn set_probe(&self, probe: std::sync::Arc<dyn probe::Probe>) -> Result<()> {
        self.lock()?.set_probe(probe);
        Ok(())
    }

    /// [`CudaEngine::new`] with the knobs of `opts`.
    pub fn with_options(device: usize, opts: CudaOptions) -> Result<Self> {
        let gpu = Gpu::open(device)?;
        let ballast = match opts.device_memory {
            Some(cap) => gpu.ballast(cap)?,
            None => crate::runtime::context::Ballast::cache(&gpu.ctx),
        };
        Ok(CudaEngine {
            gpu: Mutex::new(gpu),
            device,
            opts,
            lev: std::sync::OnceLock::new(),
            _ballast: ballast,
            counters: Counters::default(),
        })
    }

    /// How many base shards this engine has streamed through the GPU because the base did not
    /// fit (diagnostics).
    pub fn streamed_shards(&self) -> usize {
        self.counters
            .streamed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many k-NN queries (of a resident base) and graph rows this engine finished on the
    /// host instead of the device: lists that did not prove at once, selections whose lists are
    /// unsorted, metrics without exact keys on the device, graphs over several GPUs or in
    /// checkpointed passes (diagnostics; the results do not depend on it).
    pub fn host_finished(&self) -> usize {
        self.counters
            .host_finished
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many k-NN queries (of a resident base) and graph rows this engine widened and
    /// finished on the device after their first lists did not prove (diagnostics; the results
    /// do not depend on it).
    pub fn widened_on_device(&self) -> usize {
        self.counters
            .widened_on_device
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many chunks of a base this engine's k-NN passes filtered with the fused tile pair
    /// (ops/pair.rs) instead of written tiles (diagnostics; the results do not depend on it).
    pub fn fused_pair_chunks(&self) -> usize {
        self.counters
            .pair_chunks
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times an allocation failure made this engine halve its working set and retry
    /// (diagnostics; the results do not depend on it).
    pub fn shrinks(&self) -> usize {
        self.counters
            .shrinks
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `Err(Error::Cancelled)` once the caller set [`CudaOptions::cancel`]; looked at when a
    /// call starts, between streamed shards and checkpointed passes, and before a result is
    /// returned.
    pub(crate) fn check_cancel(&self) -> Result<()> {
        voisin::engine::check_cancel(self.opts.cancel.as_ref())
    }

    /// The GPU's name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn device_name(&self) -> String {
        self.lock().map(|g| g.name.clone()).unwrap_or_default()
    }

    /// The device ordinal this engine runs on.
    pub(crate) fn ordinal(&self) -> usize {
        self.device
    }

    /// The GPU, made current on the calling thread: the engine may be called from any thread
    /// (cuBLAS, unlike cudarc's own calls, does not bind the context itself).
    pub(crate) fn lock(&self) -> Result<std::sync::MutexGuard<'_, Gpu>> {
        let gpu = self
            .gpu
            .lock()
            .map_err(|_| Error::device("cuda: an earlier call panicked while holding the GPU"))?;
        gpu.ctx
            .bind_to_thread()
            .map_err(context::dev("binding the context"))?;
        Ok(gpu)
    }

    /// A search on `gpu` (this engine's, locked) under `plan` with this engine's options.
    pub(crate) fn ctx<'a>(&'a self, gpu: &'a Gpu, plan: &'a Numerics) -> SearchCtx<'a> {
        SearchCtx {
            gpu,
            plan,
            opts: &self.opts,
            counters: &self.counters,
        }
    }

    /// The working-set budget on `gpu` now (see [`SearchCtx::budget`]).
    pub(crate) fn budget(&self, gpu: &Gpu) -> Result<Budget> {
        Budget::measure(gpu, self.opts.tile_bytes)
    }

    /// The statistics of a call, naming the device.
    pub(crate) fn stats(&self, gpu: &Gpu) -> Stats {
        Stats {
            device: format!("cuda:{} ({})", self.device, gpu.name),
            ..Default::default()
        }
    }

    /// The per-metric plan of a search within `set` (a graph) under this engine's options.
    pub(crate) fn plan(&self, metric: &Metric, set: &VectorSet) -> Result<Numerics> {
        self.pair_plan(metric, set, set)
    }

    /// The per-metric plan of a search of `base` for `queries` under this engine's options:
    /// the arithmetic for their storage ([`route::numerics`]; an explicit precision the
    /// data cannot take is refused here), widened for f64 inputs ([`Numerics::with_inputs`]).
    pub(crate) fn pair_plan(
        &self,
        metric: &Metric,
        base: &VectorSet,
        queries: &VectorSet,
    ) -> Result<Numerics> {
        let plan = Numerics::new(metric, base);
        let (be, qe) = (base.elem_type(), queries.elem_type());
        Ok(route::numerics(plan, self.opts.precision, be, qe)?.with_inputs(metric, base, queries))
    }

    /// The plan of `base` before any queries are known (not widened for f64 inputs yet, its
    /// arithmetic chosen for queries stored as the base is): what a prepared base keeps,
    /// widening a copy for each batch of queries ([`Numerics::with_roundings`]).
    pub(crate) fn base_plan(&self, metric: &Metric, base: &VectorSet) -> Result<Numerics> {
        let e = base.elem_type();
        route::numerics(Numerics::new(metric, base), self.opts.precision, e, e)
    }

    /// The k-NN graph of strings under levenshtein on the string kernel (its work is small next
    /// to its transfers: one GPU).
    pub(crate) fn strings_graph(&self, s: &voisin::StringSet, k: usize) -> Result<KnnResult> {
        self.check_cancel()?;
        let gpu = self.lock()?;
        let lev = self.lev_kernel(&gpu)?;
        strings::knn(&gpu, lev, s, s, k, true, self.stats(&gpu))
    }

    /// The levenshtein kernel, loaded at the first search on strings.
    fn lev_kernel(&self, gpu: &Gpu) -> Result<&cudarc::driver::CudaFunction> {
        if self.lev.get().is_none() {
            // Calls are serialised on the GPU lock, so only one thread loads it.
            let _ = self.lev.set(strings::kernel(gpu)?);
        }
        Ok(self.lev.get().expect("set above"))
    }
}

/// A k-NN result from rows of (exact key, index).
pub(crate) fn to_result(
    rows: Vec<Vec<(f64, u32)>>,
    k: usize,
    metric: &Metric,
    stats: Stats,
) -> KnnResult {
    KnnResult {
        stats,
        ..KnnResult::from_rows(rows, k, metric)
    }
}

/// Runs `f` on every engine of `engines` at once, one host thread each holding its GPU; the
/// results in engine order.
pub(crate) fn on_each<T: Send>(
    engines: &[CudaEngine],
    f: impl Fn(usize, &CudaEngine, &Gpu) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let f = &f;
    let run = |g: usize, e: &CudaEngine| {
        let gpu = e.lock()?;
        let mut tr = gpu.phases();
        let r = f(g, e, &gpu);
        tr.mark(&format!("GPU thread {g} (cuda:{})", e.device));
        r
    };
    if let [e] = engines {
        // One GPU: no thread to start.
        return Ok(vec![run(0, e)?]);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = engines
            .iter()
            .enumerate()
            .map(|(g, e)| s.spawn(move || run(g, e)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::device("cuda: a GPU thread panicked")))
            })
            .collect()
    })
}

/// What the CUDA engines answer ([`Engine::supports`] of [`CudaEngine`] and `MultiGpu`), asked
/// without opening a GPU (front ends that refuse a request before any device starts).
/// Vectors: whatever [`vectors`] (the tiles' own check, which says why not) lets through.
/// Sets the tiles refuse for their magnitudes are answered on copies at an exact power of two
/// (`scaled`), where the copies fit, except in checkpointed graphs (`passes::build`); under an
/// explicit half precision only where a copy keeps the stored type ([`CudaEngine::supports`];
/// here, without the engine's options, any type).
pub fn supports(data: &Dataset, metric: &Metric, op: Op) -> bool {
    supports_keeping(data, metric, op, false)
}

fn supports_keeping(data: &Dataset, metric: &Metric, op: Op, keep_type: bool) -> bool {
    match data {
        Dataset::Vectors(_) => {
            vectors(data, metric).is_ok()
                || (op != Op::GraphCheckpointed && scaled::takes(data, metric, keep_type))
        }
        Dataset::Strings(_) => *metric == Metric::Levenshtein && op != Op::GraphCheckpointed,
    }
}

impl Engine for CudaEngine {
    fn name(&self) -> String {
        format!("cuda:{}", self.device)
    }

    /// Vectors under the built-in vector metrics (f64 values too: tiled rounded to f32 under a
    /// widened bound, re-ranked on their f64 values), where their keys lie inside f32's range
    /// and their exact keys inside f64's (`KeyScale::fits_f32`) as stored or on a copy scaled
    /// by an exact power of two (`scaled`: not for checkpointed graphs, minkowski's power sums,
    /// nor sets whose values span more than one scale can bring into range); and strings under
    /// levenshtein except checkpointed graphs (the GPU passes take vectors); user metrics run
    /// on the CPU. Minkowski orders above `MINKOWSKI_POWER_KEY_MAX` rank by the distance, which
    /// the fp32 power tiles here cannot bound: the CPU answers them.
    fn supports(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
        supports_keeping(data, metric, op, self.keeps_type())
    }

    /// Vectors' norms show NaN and infinities as the tiles are prepared, and the paths that
    /// stream a set scan it: every vector request here refuses them.
    fn refuses_non_finite(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
        matches!(data, Dataset::Vectors(_)) && self.supports(data, metric, op)
    }

    fn knn_request(&self, req: &KnnRequest<'_>) -> Result<KnnResult> {
        scaled::knn(req, self.keeps_type(), |r| self.knn_unscaled(r))
    }

    fn range_request(&self, req: &RangeRequest<'_>) -> Result<RangeResult> {
        scaled::range(req, self.keeps_type(), |r| self.range_unscaled(r))
    }

    /// Strings on their own kernel; vectors through the GPU graph driver (`passes`) on this
    /// one GPU, without a checkpoint: one pass of every row.
    fn graph_request(&self, req: &GraphRequest<'_>) -> Result<KnnResult> {
        self.check_cancel()?;
        passes::build(std::slice::from_ref(self), req, None)
    }

    /// The base uploaded once with its norms and plan, kept in device memory while the
    /// prepared base lives ([`CudaPrepared`]).
    fn prepare(
        self: std::sync::Arc<Self>,
        base: std::sync::Arc<Dataset>,
        metric: &Metric,
    ) -> Result<Box<dyn voisin::engine::Prepared>> {
        Ok(Box::new(CudaPrepared::new(self, base, metric)?))
    }

    fn graph_checkpointed(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        checkpoint: &voisin::graph::checkpoint::CheckpointOptions,
    ) -> Result<KnnResult> {
        passes::build(
            std::slice::from_ref(self),
            &GraphRequest::new(data, k, metric)?,
            Some(checkpoint),
        )
    }
}

impl CudaEngine {
    /// Whether a scaled copy must keep the stored type: an explicit half or int8 precision
    /// runs on its own storage only.
    pub(crate) fn keeps_type(&self) -> bool {
        self.opts.precision.needs_stored_type()
    }

    /// A k-NN search of the values as stored (`scaled` brings refused magnitudes here on
    /// copies).
    fn knn_unscaled(&self, req: &KnnRequest<'_>) -> Result<KnnResult> {
        let (base, queries, k, metric) = (req.base(), req.queries(), req.k(), req.metric());
        self.check_cancel()?;
        if let (Dataset::Strings(b), Dataset::Strings(q), Metric::Levenshtein) =
            (base, queries, metric)
        {
            let gpu = self.lock()?;
            let lev = self.lev_kernel(&gpu)?;
            return strings::knn(&gpu, lev, b, q, k, false, self.stats(&gpu));
        }
        let tr0 = Instant::now();
        let (bset, qset) = (vectors(base, metric)?, vectors(queries, metric)?);
        let input_checks = tr0.elapsed();
        // Transfer counts from the end of the input checks.
        let tr0 = Instant::now();
        let gpu = self.lock()?;
        let mut tr = gpu.phases();
        tr.report("knn: input checks", input_checks);
        let mut stats = self.stats(&gpu);
        if k == 0 || qset.is_empty() {
            return Ok(to_result(vec![vec![]; qset.len()], k, metric, stats));
        }
        let plan = self.pair_plan(metric, bset, qset)?;
        stats.arithmetic = plan.arithmetic();
        let ctx = self.ctx(&gpu, &plan);
        let kp = route::first_list(k);
        tr.mark("knn: plan");
        if !stream::fits(&gpu, bset, qset, kp, &plan)? {
            check_finite(bset)?;
            check_finite(qset)?;
            let rows = stream::knn(&ctx, metric, bset, qset, k, &mut stats)?;
            return Ok(to_result(rows, k, metric, stats));
        }
        tr.mark("knn: fit");
        let budget = ctx.budget()?;
        tr.mark("knn: budget");
        // The base goes up behind the first query block's tiles (device_set.rs), so its upload
        // counts as compute; the queries are uploaded whole.
        let bdev = DeviceSet::behind(&gpu, &plan, bset, 0..bset.len())?;
        tr.mark("knn: base buffers");
        let on = OnDevice { bset, bdev: &bdev };
        let auto = pilot::AutoChoice::default();
        let asked = KnnAsked {
            queries: qset,
            k,
            auto: &auto,
        };
        let started = Started { stats, at: tr0 };
        let res = self.knn_on(&ctx, metric, on, asked, budget, started);
        let mut tr = gpu.phases();
        drop(bdev);
        tr.mark("knn: base freed");
        res
    }

    /// A range search of the values as stored (see [`CudaEngine::knn_unscaled`]).
    fn range_unscaled(&self, req: &RangeRequest<'_>) -> Result<RangeResult> {
        let (base, queries, radius, metric) =
            (req.base(), req.queries(), req.radius(), req.metric());
        self.check_cancel()?;
        if let (Dataset::Strings(b), Dataset::Strings(q), Metric::Levenshtein) =
            (base, queries, metric)
        {
            let gpu = self.lock()?;
            let lev = self.lev_kernel(&gpu)?;
            return strings::range(&gpu, lev, b, q, radius, self.stats(&gpu));
        }
        let (bset, qset) = (vectors(base, metric)?, vectors(queries, metric)?);
        let gpu = self.lock()?;
        let mut stats = self.stats(&gpu);
        let t = Instant::now();
        let plan = self.pair_plan(metric, bset, qset)?;
        stats.arithmetic = plan.arithmetic();
        let ctx = self.ctx(&gpu, &plan);
        if !stream::fits(&gpu, bset, qset, 1, &plan)? {
            check_finite(bset)?;
            check_finite(qset)?;
            return stream::range(&ctx, metric, bset, qset, radius, stats);
        }
        let bdev = DeviceSet::new(&gpu, &plan, bset)?;
        let on = OnDevice { bset, bdev: &bdev };
        let asked = RangeAsked {
            queries: qset,
            radius,
        };
        self.range_on(gpu, &plan, metric, on, asked, Started { stats, at: t })
    }
}

/// The vectors of a graph's input and the k that applies (at most n − 1), for the graph's
/// entry points beside the seam (tiles, finish, rows), which take loose arguments.
fn graph_input<'a>(data: &'a Dataset, k: usize, metric: &Metric) -> Result<(&'a VectorSet, usize)> {
    let req = GraphRequest::new(data, k, metric)?;
    Ok((vectors(data, metric)?, req.k()))
}

impl CudaEngine {
    /// The tile edge of the graph's triangle schedule for `n` items on this GPU. Callers that
    /// split one graph must use one edge (the smallest of theirs).
    pub fn graph_tile_edge(&self, n: usize, k: usize) -> Result<usize> {
        let gpu = self.lock()?;
        self.graph_edge(&gpu, n, k)
    }

    fn graph_edge(&self, gpu: &Gpu, n: usize, k: usize) -> Result<usize> {
        Ok(route::edge_for(n, k, self.budget(gpu)?.bytes))
    }

    /// This GPU's share of the k-NN graph of `data`: the tile pairs (I, J), I ≤ J, of edge `tile`
    /// for which `owns(I, J)` holds (tile I covers items I·tile up to (I+1)·tile). For an MPI
    /// rank: deal the pairs (e.g. cyclically by their row-major index), run this on each rank,
    /// gather the shares at one rank, [`PartialGraph::merge`] them and call
    /// [`CudaEngine::graph_finish`] there. With the radix selection (k above ~1800) a tile row I
    /// is computed whole by the owner of (I, I). Under `--precision auto` the tiles here are
    /// fp32 (no TF32 pilot): the shares and their proof, computed in separate calls, must agree
    /// on one plan.
    pub fn graph_tiles(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        tile: usize,
        owns: &TileOwner<'_>,
    ) -> Result<PartialGraph> {
        let (set, k) = graph_input(data, k, metric)?;
        if tile == 0 {
            return Err(Error::invalid("graph tile edge must be at least 1"));
        }
        let gpu = self.lock()?;
        if k == 0 {
            return Ok(PartialGraph::new(
                set.len(),
                k,
                Lists::done(set.len(), 0),
                0,
            ));
        }
        let plan = self.plan(metric, set)?;
        let ddev = DeviceSet::new(&gpu, &plan, set)?;
        ddev.check(set, 0)?;
        graph::lists(&self.ctx(&gpu, &plan), &ddev, set, k, tile, owns, false)
    }

    /// Proves, widens and re-ranks a merged share that covers the whole triangle: the graph,
    /// identical to every engine's.
    pub fn graph_finish(
        &self,
        data: &Dataset,
        metric: &Metric,
        part: PartialGraph,
    ) -> Result<KnnResult> {
        let (set, k) = graph_input(data, part.k, metric)?;
        if part.n != set.len() || part.lists.len() != set.len() || k != part.k {
            return Err(Error::invalid("graph share does not match the data"));
        }
        let gpu = self.lock()?;
        let mut stats = self.stats(&gpu);
        if k == 0 {
            return Ok(to_result(vec![vec![]; set.len()], k, metric, stats));
        }
        let plan = self.plan(metric, set)?;
        stats.arithmetic = plan.arithmetic();
        let ddev = DeviceSet::new(&gpu, &plan, set)?;
        ddev.check(set, 0)?;
        let rows = graph::prove(&self.ctx(&gpu, &plan), &ddev, set, metric, part, &mut stats)?;
        Ok(to_result(rows, k, metric, stats))
    }
}
