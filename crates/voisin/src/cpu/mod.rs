//! The exact CPU engine: multi-threaded (rayon), cache-blocked, memory bounded by a budget.
//!
//! Owns tiling and scheduling on the CPU; distance formulas come from [`crate::metric`] and
//! selection from [`crate::select`].
//!
//! Every request runs in two passes. The fast pass computes approximate f32 keys tile by tile
//! (matrix products with norms for euclidean, sqeuclidean, cosine, correlation and
//! inner_product; SIMD kernels for the others; exact keys for strings and user metrics) and
//! keeps, per query, every item whose error interval may reach the k-th best. The exact pass
//! re-ranks those candidates on f64 keys with the index tie-break, so answers are exact and
//! identical to every other engine's.
//!
//! - [`tiles`]: key tiles and their error bounds for vector metrics.
//! - [`items`]: key tiles for strings and user metrics.
//! - [`search`]: k-NN and range drivers.
//! - [`graph`]: the symmetric k-NN graph scan, as the CPU backend of the core's one graph
//!   driver ([`crate::graph::driver`]), and tiles of it for distributed drivers
//!   ([`CpuEngine::cross_tile`], [`CpuEngine::tile_lists`]).
//! - [`checkpoint`]: re-export of [`crate::graph::checkpoint`] (finished graph passes kept on
//!   disk), at the path callers used before the graph's engine-agnostic parts moved there.
//! - [`plan`]: tile sizes, work splitting, progress.

mod graph;
mod items;
mod plan;
mod prepared;

pub use prepared::CpuPrepared;
mod search;
mod tile_graph;
mod tiles;

use std::ops::Range;
use std::time::Instant;

use crate::data::Dataset;
use crate::engine::{
    check_k, check_metric, Cancel, Engine, GraphRequest, KnnRequest, KnnResult, Op, ProgressFn,
    RangeRequest, RangeResult, Stats,
};
use crate::error::{Error, Result};
pub use crate::graph::checkpoint;
use crate::graph::checkpoint::CheckpointOptions;
pub use crate::graph::{merge_lists, NoStore, PassRows, PassStore, RangeLists, TileLists};
use crate::metric::scale::KeyScale;
use crate::metric::Metric;

/// Default memory budget for working buffers: 1 GiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 1 << 30;

/// How the CPU engine runs.
#[derive(Clone)]
pub struct CpuOptions {
    /// Worker threads; `None` uses every core.
    pub threads: Option<usize>,
    /// Bytes the engine may use for tiles and candidate buffers (inputs and outputs excluded).
    pub memory_budget: usize,
    /// Called as work advances.
    pub progress: Option<ProgressFn>,
    /// Looked at where progress is reported; once set, calls end with `Error::Cancelled`.
    pub cancel: Option<Cancel>,
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            threads: None,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            progress: None,
            cancel: None,
        }
    }
}

/// The CPU engine.
pub struct CpuEngine {
    opts: CpuOptions,
    pool: rayon::ThreadPool,
}

impl Default for CpuEngine {
    fn default() -> Self {
        CpuEngine::new(CpuOptions::default()).expect("default CPU engine")
    }
}

impl CpuEngine {
    /// An engine with its own rayon pool of `opts.threads` workers (every core when `None`). Errors
    /// with [`Error::InvalidInput`] for 0 threads, [`Error::Device`] when the pool cannot start.
    pub fn new(opts: CpuOptions) -> Result<Self> {
        let mut b = rayon::ThreadPoolBuilder::new();
        if let Some(t) = opts.threads {
            if t == 0 {
                return Err(Error::invalid("--threads must be at least 1"));
            }
            b = b.num_threads(t);
        }
        let pool = b
            .build()
            .map_err(|e| Error::device(format!("cannot start threads: {e}")))?;
        Ok(CpuEngine { opts, pool })
    }

    /// Worker threads in the engine's pool: [`CpuOptions::threads`], or rayon's default when unset
    /// (every logical core unless `RAYON_NUM_THREADS` says otherwise).
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The options the engine was built with.
    pub fn options(&self) -> &CpuOptions {
        &self.opts
    }
}

impl CpuEngine {
    fn ctx(&self) -> plan::Ctx {
        plan::Ctx::new(
            self.threads(),
            self.opts.memory_budget,
            self.opts.progress.clone(),
        )
        .with_cancel(self.opts.cancel.clone())
    }

    fn stats(&self, ctx: &plan::Ctx, compute: std::time::Duration) -> Stats {
        use std::sync::atomic::Ordering::Relaxed;
        Stats {
            compute,
            distance_evals: ctx.evals.load(Relaxed),
            exact_evals: ctx.exact_evals.load(Relaxed),
            device: self.name(),
            ..Stats::default()
        }
    }

    /// Runs `f` on this engine's threads with the tile source that fits the data and metric:
    /// f32 tiles for the built-in vector metrics (values of any magnitude: the tiles scale
    /// them into range), exact keys throughout for strings and user metrics.
    fn with_source<R: Send>(
        &self,
        base: &Dataset,
        queries: &Dataset,
        metric: &Metric,
        f: impl FnOnce(&dyn Driver) -> R + Send,
    ) -> R {
        self.with_planned_source((base, None), queries, metric, f)
    }

    /// [`CpuEngine::with_source`] with the base's tile plan when it was made before (a prepared
    /// base), or made here.
    fn with_planned_source<R: Send>(
        &self,
        (base, plan): (&Dataset, Option<&tiles::BasePlan>),
        queries: &Dataset,
        metric: &Metric,
        f: impl FnOnce(&dyn Driver) -> R + Send,
    ) -> R {
        self.pool.install(|| match (base, queries, metric) {
            (Dataset::Vectors(b), Dataset::Vectors(q), m) if tiles_apply(m) => {
                let plan = plan.cloned().unwrap_or_else(|| tiles::BasePlan::new(m, b));
                f(&Source(tiles::TileMaker::with_plan(m, b, q, plan)))
            }
            _ => f(&Source(items::ItemTiles::new(metric, base, queries))),
        })
    }
}

/// Whether f32 tiles answer `base` under `metric` (else exact keys throughout).
fn tiles_apply(metric: &Metric) -> bool {
    !matches!(metric, Metric::Custom(_))
}

/// Object-safe view of the drivers over one tile source, so dispatch happens once.
trait Driver: Sync {
    fn knn(
        &self,
        metric: &Metric,
        n_base: usize,
        n_queries: usize,
        k: usize,
        ctx: &plan::Ctx,
    ) -> KnnResult;
    fn range(
        &self,
        metric: &Metric,
        n_base: usize,
        n_queries: usize,
        radius: f64,
        ctx: &plan::Ctx,
    ) -> RangeResult;
    fn graph(
        &self,
        data: &Dataset,
        metric: &Metric,
        k: usize,
        max_blocks: usize,
        checkpoint: Option<&CheckpointOptions>,
        ctx: &plan::Ctx,
    ) -> Result<PassRows>;
    fn tile_lists(
        &self,
        tiles: &[(Range<usize>, Range<usize>)],
        k: usize,
        ctx: &plan::Ctx,
    ) -> Result<RangeLists>;
    /// The scale of the exact keys the results carry.
    fn key_scale(&self) -> KeyScale;
}

struct Source<S>(S);

impl<S: tiles::TileSource> Driver for Source<S> {
    fn knn(
        &self,
        metric: &Metric,
        n_base: usize,
        n_queries: usize,
        k: usize,
        ctx: &plan::Ctx,
    ) -> KnnResult {
        search::knn(&self.0, metric, n_base, n_queries, k, ctx)
    }

    fn range(
        &self,
        metric: &Metric,
        n_base: usize,
        n_queries: usize,
        radius: f64,
        ctx: &plan::Ctx,
    ) -> RangeResult {
        search::range(&self.0, metric, n_base, n_queries, radius, ctx)
    }

    /// The core's graph driver with this engine's threads as its one backend.
    fn graph(
        &self,
        data: &Dataset,
        metric: &Metric,
        k: usize,
        max_blocks: usize,
        checkpoint: Option<&CheckpointOptions>,
        ctx: &plan::Ctx,
    ) -> Result<PassRows> {
        let build = crate::graph::driver::Build {
            data,
            metric,
            k,
            edge: plan::GRAPH_TILE,
            max_pass_rows: max_blocks * plan::GRAPH_TILE,
            checkpoint,
        };
        let n = data.len();
        crate::graph::driver::build(&build, || {
            Ok(vec![graph::CpuBuild {
                src: &self.0,
                ctx,
                n,
                k,
            }])
        })
    }

    fn tile_lists(
        &self,
        tiles: &[(Range<usize>, Range<usize>)],
        k: usize,
        ctx: &plan::Ctx,
    ) -> Result<RangeLists> {
        graph::tile_lists(&self.0, tiles, k, ctx)
    }

    fn key_scale(&self) -> KeyScale {
        self.0.key_scale()
    }
}

impl Engine for CpuEngine {
    fn name(&self) -> String {
        device_name(self.threads())
    }

    /// Whatever the metric applies to, checkpointed graphs included.
    fn supports(&self, data: &Dataset, metric: &Metric, _op: Op) -> bool {
        check_metric(data, metric).is_ok()
    }

    fn knn_request(&self, req: &KnnRequest<'_>) -> Result<KnnResult> {
        self.knn_planned(req, None)
    }

    fn range_request(&self, req: &RangeRequest<'_>) -> Result<RangeResult> {
        self.range_planned(req, None)
    }

    /// The base's tile plan made once ([`CpuPrepared`]): each search then skips the pass over
    /// the base that makes it.
    fn prepare(
        self: std::sync::Arc<Self>,
        base: std::sync::Arc<Dataset>,
        metric: &Metric,
    ) -> Result<Box<dyn crate::engine::Prepared>> {
        Ok(Box::new(CpuPrepared::new(self, base, metric)?))
    }

    fn graph_request(&self, req: &GraphRequest<'_>) -> Result<KnnResult> {
        self.graph_with(req, None)
    }

    fn graph_checkpointed(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        checkpoint: &CheckpointOptions,
    ) -> Result<KnnResult> {
        self.graph_with(&GraphRequest::new(data, k, metric)?, Some(checkpoint))
    }
}

impl CpuEngine {
    /// A k-NN request, under the base's tile plan when one was made before.
    fn knn_planned(
        &self,
        req: &KnnRequest<'_>,
        plan: Option<&tiles::BasePlan>,
    ) -> Result<KnnResult> {
        let (base, queries, k, metric) = (req.base(), req.queries(), req.k(), req.metric());
        let (ctx, t) = (self.ctx(), Instant::now());
        let mut res = self.with_planned_source((base, plan), queries, metric, |d| {
            d.knn(metric, base.len(), queries.len(), k, &ctx)
        });
        ctx.check_cancel()?;
        res.stats = self.stats(&ctx, t.elapsed());
        Ok(res)
    }

    /// A range request, under the base's tile plan when one was made before.
    fn range_planned(
        &self,
        req: &RangeRequest<'_>,
        plan: Option<&tiles::BasePlan>,
    ) -> Result<RangeResult> {
        let (base, queries, radius, metric) =
            (req.base(), req.queries(), req.radius(), req.metric());
        let (ctx, t) = (self.ctx(), Instant::now());
        let mut res = self.with_planned_source((base, plan), queries, metric, |d| {
            d.range(metric, base.len(), queries.len(), radius, &ctx)
        });
        ctx.check_cancel()?;
        res.stats = self.stats(&ctx, t.elapsed());
        Ok(res)
    }

    /// One tile of the k-NN graph of `data`, for drivers that deal tiles out (ranks,
    /// devices) and merge lists themselves: for each item of `rows` its `k` nearest items of
    /// `cols`, and for each item of `cols` its `k` nearest of `rows`, every pair measured once,
    /// an item never its own neighbour. `rows` and `cols` must be equal (a diagonal tile; its
    /// column lists are then left empty) or disjoint. Lists hold exact keys (the metric's
    /// ranking keys, smaller is closer) and are sorted by (key, index), so an item's lists from
    /// tiles over disjoint items merge exactly with [`merge_lists`] into the rows
    /// [`Engine::graph`] returns.
    pub fn cross_tile(
        &self,
        data: &Dataset,
        rows: Range<usize>,
        cols: Range<usize>,
        k: usize,
        metric: &Metric,
    ) -> Result<TileLists> {
        let got = self.tile_lists(data, &[(rows.clone(), cols.clone())], k, metric)?;
        Ok(graph::one_tile(got, &rows, &cols))
    }

    /// Many tiles at once, as [`CpuEngine::cross_tile`] computes one: for each item of the
    /// tiles' ranges, its `k` nearest among all the items the tiles pair it with, every pair
    /// measured once. Candidates from all of an item's tiles are re-ranked together, so a rank
    /// or device holding several tiles of the same rows pays one exact re-rank per row instead
    /// of one per tile. Ranges must be equal or disjoint; one entry per distinct range, by
    /// start. Candidates of every item of the batch are held at once (about `24k + 400` bytes
    /// an item; the memory budget does not apply), so callers size batches.
    pub fn tile_lists(
        &self,
        data: &Dataset,
        tiles: &[(Range<usize>, Range<usize>)],
        k: usize,
        metric: &Metric,
    ) -> Result<RangeLists> {
        self.check_tiles(data, tiles, k, metric)?;
        let (ctx, k) = (self.ctx(), k.min(data.len()));
        let lists = self.with_source(data, data, metric, |d| d.tile_lists(tiles, k, &ctx))?;
        ctx.check_cancel()?;
        Ok(lists)
    }

    fn check_tiles(
        &self,
        data: &Dataset,
        tiles: &[(Range<usize>, Range<usize>)],
        k: usize,
        metric: &Metric,
    ) -> Result<()> {
        check_metric(data, metric)?;
        check_k(k)?;
        let n = data.len();
        let outside = |r: &Range<usize>| r.end > n || r.start > r.end;
        match tiles.iter().find(|(r, c)| outside(r) || outside(c)) {
            Some((r, c)) => Err(Error::invalid(format!(
                "tile {r:?} x {c:?} is outside the {n} items"
            ))),
            None => Ok(()),
        }
    }

    fn graph_with(
        &self,
        req: &GraphRequest<'_>,
        checkpoint: Option<&CheckpointOptions>,
    ) -> Result<KnnResult> {
        let (data, k, metric) = (req.data(), req.k(), req.metric());
        let (ctx, t) = (self.ctx(), Instant::now());
        let n = data.len();
        let max_blocks = graph::max_blocks_per_pass(n, k, self.opts.memory_budget);
        let (rows, scale) = self.with_source(data, data, metric, |d| {
            (
                d.graph(data, metric, k, max_blocks, checkpoint, &ctx),
                d.key_scale(),
            )
        });
        let rows = rows?;
        ctx.check_cancel()?;
        let mut res = KnnResult::from_rows_by(rows, k, |key| scale.distance(metric, key));
        res.stats = self.stats(&ctx, t.elapsed());
        Ok(res)
    }
}

/// How the CPU is named in results and `--stats`: "cpu (1 thread)", "cpu (8 threads)".
pub fn device_name(threads: usize) -> String {
    let s = if threads == 1 { "" } else { "s" };
    format!("cpu ({threads} thread{s})")
}
