//! The engine seam: the [`Engine`] trait, the result types engines return, and the request
//! checks they all share.
//!
//! - Implemented by the CPU engine ([`crate::cpu::CpuEngine`]), voisin-cuda's `CudaEngine`
//!   (one GPU) and `MultiGpu` (several), and the auto engine of the factory crate
//!   `voisin-engines` (a GPU for what it supports, the CPU for the rest). The MPI ranks do not
//!   implement it: each rank runs one of these engines (or its graph tiles) on its share.
//! - Requests ([`KnnRequest`], [`RangeRequest`], [`GraphRequest`]) are checked once when made
//!   (kinds, dimensions, metric, k, radius); engines receive them checked.
//! - [`Engine::supports`] is the one answer to "can this engine run this?" (per data, metric and
//!   [`Op`]); what an engine does not support it refuses as invalid input.
//! - Checkpointed graphs ([`Engine::graph_checkpointed`], format in
//!   [`crate::graph::checkpoint`]), prepared bases ([`Engine::prepare`], [`Prepared`]: fit once,
//!   query many) and cancellation ([`Cancel`]) are on the same seam.
//!
//! Callers (the CLI, the MPI binary, the Python bindings) open engines through `voisin-engines`,
//! hold a `dyn Engine` and never learn which device answers. Results are identical across
//! engines: exact keys, ties broken by the smaller index. `voisin-engines/tests/conformance`
//! holds every engine to that through this trait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::metric::scale::f32_value;
use crate::metric::{ItemKind, Metric};

/// k nearest neighbours of each query, flat row-major `n_queries × k`.
///
/// `k` is the number of neighbours actually returned per query: the requested k capped at the
/// number of items available (the base size for `knn`, n − 1 for `graph`). Each row is sorted by
/// (distance, index); for `inner_product` by decreasing dot product, then index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnnResult {
    /// Rows of the result: one per query (one per item for a graph).
    pub n_queries: usize,
    /// Neighbours in every row, after capping (see above); 0 when no item is available.
    pub k: usize,
    /// Indices of the neighbours in the base, `n_queries × k` row-major: row `q` is
    /// `indices[q * k..(q + 1) * k]`.
    pub indices: Vec<u32>,
    /// The metric's reported value for each entry of `indices` (the dot product for
    /// `inner_product`), rounded to f32: beyond f32's range, the largest finite f32 of its sign.
    pub distances: Vec<f32>,
    /// What the engine measured while answering (default when not measured).
    pub stats: Stats,
}

impl KnnResult {
    /// Assembles a result from per-query rows of (exact key, index), each already sorted and
    /// holding `k` entries; keys become the metric's reported distances, rounded to f32 (a
    /// distance beyond f32's range becomes its largest finite value: `metric::scale::f32_value`).
    pub fn from_rows(rows: Vec<Vec<(f64, u32)>>, k: usize, metric: &Metric) -> Self {
        Self::from_rows_by(rows, k, |key| metric.key_to_distance(key))
    }

    /// [`KnnResult::from_rows`] with any key-to-distance conversion.
    pub fn from_rows_by(
        rows: Vec<Vec<(f64, u32)>>,
        k: usize,
        to_distance: impl Fn(f64) -> f64 + Sync,
    ) -> Self {
        use rayon::prelude::*;
        let n = rows.len();
        let mut indices = vec![0u32; n * k];
        let mut distances = vec![0f32; n * k];
        // Filled in parallel: at k = 1000 and 10k queries this is 10M values.
        indices
            .par_chunks_mut(k.max(1))
            .zip(distances.par_chunks_mut(k.max(1)))
            .zip(rows.par_iter())
            .for_each(|((ids, ds), row)| {
                debug_assert_eq!(row.len(), k);
                for ((i, d), &(key, idx)) in ids.iter_mut().zip(ds.iter_mut()).zip(row) {
                    *i = idx;
                    *d = f32_value(to_distance(key));
                }
            });
        // Millions of small rows (a graph) take ~0.1 s to free one after another.
        rows.into_par_iter().for_each(drop);
        KnnResult {
            n_queries: n,
            k,
            indices,
            distances,
            stats: Stats::default(),
        }
    }

    /// The indices and distances of row `q`, `k` each. Panics when `k` > 0 and `q` is not below
    /// `n_queries`.
    pub fn row(&self, q: usize) -> (&[u32], &[f32]) {
        let r = q * self.k..(q + 1) * self.k;
        (&self.indices[r.clone()], &self.distances[r])
    }
}

/// Every base item within the radius of each query, in CSR form: the results of query `q` are
/// `offsets[q]..offsets[q + 1]`, sorted by (distance, index) (decreasing dot product for
/// `inner_product`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RangeResult {
    /// Where each query's results start in `indices` and `distances`: `n_queries + 1` ascending
    /// offsets, the first 0 and the last the total count.
    pub offsets: Vec<usize>,
    /// Indices of the results in the base, query after query.
    pub indices: Vec<u32>,
    /// The metric's reported value for each entry of `indices` (the dot product for
    /// `inner_product`), rounded to f32: beyond f32's range, the largest finite f32 of its sign.
    pub distances: Vec<f32>,
    /// What the engine measured while answering (default when not measured).
    pub stats: Stats,
}

impl RangeResult {
    /// Assembles a result from per-query rows of (exact key, index), each already sorted;
    /// keys become the metric's reported distances.
    pub fn from_rows(rows: Vec<Vec<(f64, u32)>>, metric: &Metric) -> Self {
        Self::from_rows_by(rows, |key| metric.key_to_distance(key))
    }

    /// [`RangeResult::from_rows`] with any key type and key-to-distance conversion (rows of
    /// reported f32 distances pass `f64::from`, which round-trips exactly).
    pub fn from_rows_by<K>(rows: Vec<Vec<(K, u32)>>, to_distance: impl Fn(K) -> f64) -> Self {
        let total: usize = rows.iter().map(Vec::len).sum();
        let mut out = RangeResult {
            offsets: Vec::with_capacity(rows.len() + 1),
            indices: Vec::with_capacity(total),
            distances: Vec::with_capacity(total),
            ..Default::default()
        };
        out.offsets.push(0);
        for row in rows {
            for (key, i) in row {
                out.indices.push(i);
                out.distances.push(f32_value(to_distance(key)));
            }
            out.offsets.push(out.indices.len());
        }
        out
    }

    /// Number of queries: one less than the number of offsets (0 for an empty default result).
    pub fn n_queries(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The indices and distances of query `q`'s results. Panics when `q` is not below
    /// [`RangeResult::n_queries`].
    pub fn row(&self, q: usize) -> (&[u32], &[f32]) {
        let r = self.offsets[q]..self.offsets[q + 1];
        (&self.indices[r.clone()], &self.distances[r])
    }
}

/// What an engine measured while answering, for `--stats`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Time spent computing distances (including selection when fused).
    pub compute: Duration,
    /// Time spent selecting and re-ranking outside the distance pass.
    pub select: Duration,
    /// Host-device transfer time (GPU engines).
    pub transfer: Duration,
    /// Pairs whose distance was computed (approximate or exact).
    pub distance_evals: u64,
    /// Pairs re-ranked exactly.
    pub exact_evals: u64,
    /// Device(s) that did the work, e.g. "cpu (2 threads)".
    pub device: String,
    /// Arithmetic of the approximate distance tiles where an engine reports it (the CUDA
    /// engines: "fp32", "tf32", "fp16x3", "fp16", "bf16", "int8"); empty otherwise.
    pub arithmetic: String,
}

/// Receives progress as (units done, units total); engines call it from any thread.
pub type ProgressFn = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// A cancellation token: cheap to clone, every clone sees the same flag. Engines look at it
/// where they report progress (between tiles, passes and query blocks) and return
/// [`Error::Cancelled`] once it is set; work already done is dropped.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A token that is not set (the same as `Cancel::default()`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every engine holding a clone of this token to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`Cancel::cancel`] was called on any clone since the token was made or last reset.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Clears the flag, for a caller that reuses one engine (and its token) after a cancelled
    /// call: the Python bindings, after Ctrl-C.
    pub fn reset(&self) {
        self.0.store(false, Ordering::Relaxed);
    }

    /// `Err(Error::Cancelled)` once the token is set.
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(())
    }
}

/// [`Cancel::check`] for an optional token (none: never cancelled).
pub fn check_cancel(cancel: Option<&Cancel>) -> Result<()> {
    cancel.map_or(Ok(()), Cancel::check)
}

/// A k-NN request, checked once when made: base and queries comparable under the metric,
/// k at least 1; [`KnnRequest::k`] is the requested k capped at the base size.
#[derive(Clone, Copy)]
pub struct KnnRequest<'a> {
    base: &'a Dataset,
    queries: &'a Dataset,
    k: usize,
    metric: &'a Metric,
}

impl<'a> KnnRequest<'a> {
    /// Checks and builds a request. Errors with [`Error::InvalidInput`] when the metric does not
    /// apply to base or queries, their kinds or dimensions differ, or `k` is 0.
    pub fn new(
        base: &'a Dataset,
        queries: &'a Dataset,
        k: usize,
        metric: &'a Metric,
    ) -> Result<Self> {
        check_pair(base, queries, metric)?;
        check_k(k)?;
        Ok(KnnRequest {
            base,
            queries,
            k: k.min(base.len()),
            metric,
        })
    }

    /// The set searched for neighbours; result indices point into it.
    pub fn base(&self) -> &'a Dataset {
        self.base
    }

    /// The queries, one result row each.
    pub fn queries(&self) -> &'a Dataset {
        self.queries
    }

    /// Neighbours per query: the requested k capped at the base size (0 for an empty base).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The metric distances are measured and reported in.
    pub fn metric(&self) -> &'a Metric {
        self.metric
    }
}

/// A range request, checked once when made: base and queries comparable under the metric, a
/// radius the metric accepts.
#[derive(Clone, Copy)]
pub struct RangeRequest<'a> {
    base: &'a Dataset,
    queries: &'a Dataset,
    radius: f64,
    metric: &'a Metric,
}

impl<'a> RangeRequest<'a> {
    /// Checks and builds a request. Errors with [`Error::InvalidInput`] when the metric does not
    /// apply to base or queries, their kinds or dimensions differ, or the metric refuses the
    /// radius ([`Metric::check_radius`]: not finite, or negative but for `inner_product`).
    pub fn new(
        base: &'a Dataset,
        queries: &'a Dataset,
        radius: f64,
        metric: &'a Metric,
    ) -> Result<Self> {
        check_pair(base, queries, metric)?;
        metric.check_radius(radius)?;
        Ok(RangeRequest {
            base,
            queries,
            radius,
            metric,
        })
    }

    /// The set searched; result indices point into it.
    pub fn base(&self) -> &'a Dataset {
        self.base
    }

    /// The queries, one result row each.
    pub fn queries(&self) -> &'a Dataset {
        self.queries
    }

    /// The radius as given, in the metric's reported units, inclusive ([`Metric::within`]); for
    /// `inner_product` the smallest dot product kept.
    pub fn radius(&self) -> f64 {
        self.radius
    }

    /// The metric distances are measured and reported in.
    pub fn metric(&self) -> &'a Metric {
        self.metric
    }
}

/// A k-NN graph request, checked once when made: the metric applies to the data, k at least
/// 1; [`GraphRequest::k`] is the requested k capped at n − 1.
#[derive(Clone, Copy)]
pub struct GraphRequest<'a> {
    data: &'a Dataset,
    k: usize,
    metric: &'a Metric,
}

impl<'a> GraphRequest<'a> {
    /// Checks and builds a request. Errors with [`Error::InvalidInput`] when the metric does not
    /// apply to `data` or `k` is 0.
    pub fn new(data: &'a Dataset, k: usize, metric: &'a Metric) -> Result<Self> {
        check_metric(data, metric)?;
        check_k(k)?;
        Ok(GraphRequest {
            data,
            k: k.min(data.len().saturating_sub(1)),
            metric,
        })
    }

    /// The set whose graph is built: every item is both a query and a base item.
    pub fn data(&self) -> &'a Dataset {
        self.data
    }

    /// Neighbours per item: the requested k capped at n − 1.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The metric distances are measured and reported in.
    pub fn metric(&self) -> &'a Metric {
        self.metric
    }
}

/// A base set prepared once and searched many times ("fit once, query many"), made by
/// [`Engine::prepare`]. It owns what it needs (the engine and the base, and whatever the
/// engine keeps about the base), so it can live anywhere, a Python object included. Results
/// are those of the engine's `knn`/`range` on the same base, byte for byte.
pub trait Prepared: Send + Sync + 'static {
    /// For each query, its k nearest base items.
    fn knn(&self, queries: &Dataset, k: usize) -> Result<KnnResult>;

    /// For each query, every base item within `radius`.
    fn range(&self, queries: &Dataset, radius: f64) -> Result<RangeResult>;

    /// Items of the base.
    fn len(&self) -> usize;

    /// Whether the base has no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The metric the base was prepared for.
    fn metric(&self) -> &Metric;
}

/// The prepared base of an engine without its own: the engine and the base, searched afresh.
struct Kept<E: ?Sized> {
    engine: Arc<E>,
    base: Arc<Dataset>,
    metric: Metric,
}

impl<E: Engine + ?Sized + 'static> Prepared for Kept<E> {
    fn knn(&self, queries: &Dataset, k: usize) -> Result<KnnResult> {
        self.engine.knn(&self.base, queries, k, &self.metric)
    }

    fn range(&self, queries: &Dataset, radius: f64) -> Result<RangeResult> {
        self.engine.range(&self.base, queries, radius, &self.metric)
    }

    fn len(&self) -> usize {
        self.base.len()
    }

    fn metric(&self) -> &Metric {
        &self.metric
    }
}

/// What a request asks for, for [`Engine::supports`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// k nearest base items of each query ([`Engine::knn`]).
    Knn,
    /// Every base item within a radius of each query ([`Engine::range`]).
    Range,
    /// The k-NN graph of one set, without checkpoints ([`Engine::graph`]).
    Graph,
    /// A graph with checkpoints ([`Engine::graph_checkpointed`]).
    GraphCheckpointed,
}

/// The interface every engine implements: the checked requests; the familiar `knn`, `range`
/// and `graph` check their arguments into a request and pass it on.
pub trait Engine: Send + Sync {
    /// Short name for messages and `--stats`, e.g. "cpu" or "cuda:0".
    fn name(&self) -> String;

    /// Whether this engine answers `op` on `data` under `metric`: the one answer to "can this
    /// device run this?" (routers and front ends ask it instead of keeping their own rules).
    /// A request it does not support is refused as invalid input, never answered wrongly.
    /// By default, whenever the metric applies to the data, checkpointed graphs excepted (the
    /// default [`Engine::graph_checkpointed`] refuses them).
    fn supports(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
        op != Op::GraphCheckpointed && check_metric(data, metric).is_ok()
    }

    /// The name of the engine that answers `op` on `data` under `metric`: this one's, unless it
    /// routes requests to other engines (the auto engine names the one it picks).
    fn answering(&self, data: &Dataset, metric: &Metric, op: Op) -> String {
        let _ = (data, metric, op);
        self.name()
    }

    /// Whether this engine refuses NaN and infinite values in vectors of `data` itself, with
    /// an [`Error::InvalidInput`], when it answers `op` under `metric`; a front end that
    /// refuses them too then need not read the data once more before the work (it can find the
    /// value's position after such a refusal). False by default: the CPU engine answers over
    /// them (the CLI's `--allow-nan`).
    fn refuses_non_finite(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
        let _ = (data, metric, op);
        false
    }

    /// For each query, its k nearest base items.
    fn knn_request(&self, req: &KnnRequest<'_>) -> Result<KnnResult>;

    /// For each query, every base item within the radius.
    fn range_request(&self, req: &RangeRequest<'_>) -> Result<RangeResult>;

    /// For each item, its k nearest other items (the item itself excluded, duplicates kept).
    fn graph_request(&self, req: &GraphRequest<'_>) -> Result<KnnResult>;

    /// For each query, its k nearest base items.
    fn knn(
        &self,
        base: &Dataset,
        queries: &Dataset,
        k: usize,
        metric: &Metric,
    ) -> Result<KnnResult> {
        self.knn_request(&KnnRequest::new(base, queries, k, metric)?)
    }

    /// For each query, every base item within `radius`.
    fn range(
        &self,
        base: &Dataset,
        queries: &Dataset,
        radius: f64,
        metric: &Metric,
    ) -> Result<RangeResult> {
        self.range_request(&RangeRequest::new(base, queries, radius, metric)?)
    }

    /// For each item, its k nearest other items (the item itself excluded, duplicates kept).
    fn graph(&self, data: &Dataset, k: usize, metric: &Metric) -> Result<KnnResult> {
        self.graph_request(&GraphRequest::new(data, k, metric)?)
    }

    /// The k-NN graph, like [`Engine::graph`], with finished row passes kept in
    /// `checkpoint.dir` ([`crate::graph::checkpoint`]): a build that was killed continues with
    /// `resume` and returns exactly what an uninterrupted build returns. A checkpoint written by
    /// one engine (CPU, one GPU or several) resumes on any other. A checkpoint of another
    /// input, metric or k, or a damaged one, is refused as invalid input. Engines that do not
    /// keep checkpoints refuse the request with a clear error (this default).
    fn graph_checkpointed(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        checkpoint: &crate::graph::checkpoint::CheckpointOptions,
    ) -> Result<KnnResult> {
        let _ = (data, k, metric);
        Err(Error::invalid(format!(
            "{}: engine {} does not keep graph checkpoints",
            checkpoint.dir.display(),
            self.name()
        )))
    }

    /// `base` prepared for many searches under `metric` (the metric must apply to it). By
    /// default the engine and the base are kept and each search runs afresh; engines with
    /// something to keep (norms, a resident device copy) override it.
    fn prepare(self: Arc<Self>, base: Arc<Dataset>, metric: &Metric) -> Result<Box<dyn Prepared>>
    where
        Self: 'static,
    {
        check_metric(&base, metric)?;
        Ok(Box::new(Kept {
            engine: self,
            base,
            metric: metric.clone(),
        }))
    }
}

/// Checks that a metric applies to a data set (and that a minkowski order built in code, not
/// parsed, is one the parser takes).
pub fn check_metric(data: &Dataset, metric: &Metric) -> Result<()> {
    if let Metric::Minkowski(p) = metric {
        crate::metric::check_minkowski_order(*p, p)?;
    }
    let kind = match data {
        Dataset::Vectors(_) => ItemKind::Vectors,
        Dataset::Strings(_) => ItemKind::Strings,
    };
    if metric.supports(kind) {
        return check_custom_f64(data, metric);
    }
    let what = match kind {
        ItemKind::Vectors => "vectors",
        ItemKind::Strings => "strings",
    };
    let hint = match kind {
        ItemKind::Vectors => "",
        ItemKind::Strings => " (strings take levenshtein)",
    };
    Err(Error::invalid(format!(
        "metric {metric} does not apply to {what}{hint}"
    )))
}

/// A user metric over f32 vectors cannot measure f64 values f32 does not hold.
fn check_custom_f64(data: &Dataset, metric: &Metric) -> Result<()> {
    match (data, metric) {
        (Dataset::Vectors(v), Metric::Custom(c))
            if c.vectors_f64.is_none() && !v.is_f32_exact() =>
        {
            Err(Error::invalid(format!(
                "metric {metric} takes f32 vectors but the data holds f64 values with no exact \
                 f32 form; give it an f64 distance (CustomMetric::for_vectors_f64)"
            )))
        }
        _ => Ok(()),
    }
}

/// Checks that base and queries can be compared under `metric`.
pub fn check_pair(base: &Dataset, queries: &Dataset, metric: &Metric) -> Result<()> {
    check_metric(base, metric)?;
    check_metric(queries, metric)?;
    match (base, queries) {
        (Dataset::Vectors(b), Dataset::Vectors(q)) if b.dim() != q.dim() => {
            Err(Error::invalid(format!(
                "base has dimension {} but queries have dimension {}",
                b.dim(),
                q.dim()
            )))
        }
        (Dataset::Vectors(_), Dataset::Strings(_)) | (Dataset::Strings(_), Dataset::Vectors(_)) => {
            Err(Error::invalid(
                "base and queries are of different kinds (vectors and strings)",
            ))
        }
        _ => Ok(()),
    }
}

/// Checks a requested k.
pub fn check_k(k: usize) -> Result<()> {
    if k == 0 {
        return Err(Error::invalid("k must be at least 1"));
    }
    Ok(())
}
