//! The CUDA engine: exact k-NN search, k-NN graphs and range search on one NVIDIA GPU.
//!
//! Distances come from cuBLAS sgemm tiles (euclidean, sqeuclidean, cosine, correlation,
//! inner_product; strict fp32, or TF32 tensor cores under `Precision::Tf32`) or a SIMT tile
//! kernel (cityblock, chebyshev, minkowski); selection and range filtering run in
//! NVRTC-compiled kernels; each query's candidates are proved with an error bound, widened where
//! the proof fails, and re-ranked on exact f64 keys (k-NN over sorted lists: on the device, the
//! rest on the host), so results equal the CPU engine's.
//!
//! Layout (after FAISS): `kernels/*.cu` hold the device primitives; each `src/` file holds one
//! host-side step: `context` (driver, cuBLAS, NVRTC), `prepare` (per-metric plans and bounds),
//! `device_set` (upload and row preparation), `exact` (exact keys), `tile` (one distance tile),
//! [`select`] (selection variants), `fused` (distance + filter in one kernel), `knn`, `graph`,
//! `range`; `shard` (merging shards' candidate lists), `stream` (bases larger than the GPU),
//! `multi` (several GPUs), `passes` (checkpointed graphs), `strings` (levenshtein), [`index`]
//! (List of Clusters and SSS searched on the GPU).
//!
//! CUDA is loaded at run time: the crate builds and links without it, and [`gpu_available`]
//! says whether it can run.
//!
//! ```no_run
//! use voisin::{Engine, Metric, VectorSet};
//! use voisin_cuda::{gpu_available, CudaEngine};
//!
//! let base = VectorSet::from_f32(4, 2, vec![0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 3.0]).unwrap();
//! let query = VectorSet::from_f32(1, 2, vec![0.9, 0.1]).unwrap();
//! if gpu_available() {
//!     let engine = CudaEngine::new(0).unwrap();
//!     let res = engine.knn(&base.into(), &query.into(), 2, &Metric::Euclidean).unwrap();
//!     assert_eq!(res.indices, vec![1, 0]);
//! }
//! ```
//!
//! Strings under levenshtein: range search runs a bit-parallel kernel (`strings`); k-NN and
//! graphs on strings run it with increasing radii. Custom metrics are not on this engine.
//!
//! Scale (docs/design/streaming.md, oom-shrinking.md, multi-gpu.md): a search base that does not fit in the GPU's free memory (or under
//! [`CudaOptions::device_memory`]) is streamed through in shards (`stream`), with exact keys
//! on the host; an allocation that fails halves the working set and goes on. [`MultiGpu`]
//! runs on several GPUs of one host (`multi`, `shard`); [`CudaEngine::graph_tiles`],
//! [`PartialGraph::merge`] and [`CudaEngine::graph_finish`] split one graph between processes
//! (e.g. MPI ranks, one GPU each). A graph's set must still fit on each GPU. Long graph builds
//! keep finished row passes in the core's checkpoint format (`passes`,
//! [`Engine::graph_checkpointed`]) and resume after a crash.

mod abi;
mod context;
mod device_set;
mod exact;
mod fused;
mod graph;
pub mod index;
mod kernels;
mod knn;
mod multi;
mod passes;
mod prepare;
pub mod probe;
mod range;
pub mod select;
mod shard;
mod stream;
mod strings;
mod tile;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The smallest working set: one query row against a 16384-item tile plus lists.
const MIN_BUDGET: usize = 1 << 20;

use voisin::engine::{Engine, GraphRequest, KnnRequest, KnnResult, Op, RangeRequest, RangeResult};
use voisin::{Dataset, Error, Metric, Result, Stats, VectorSet};

pub use context::{device_count, gpu_available};
pub use fused::Fusion;
pub use graph::PartialGraph;
pub use multi::MultiGpu;
// The graph schedule lives in the core; re-exported at the paths callers used before.
pub use prepare::Precision;
pub use select::Select;
pub use voisin::graph::{
    cyclic_share, pass_alignment, pass_steps, pass_tile_edge, PassStep, TileOwner,
};

use context::Gpu;
use device_set::DeviceSet;
use exact::Sides;
use graph::Lists;
use knn::{Budget, Raw};
use prepare::{check_finite, vectors, Plan};

/// How the CUDA engine runs.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Selection kernel (`--select`).
    pub select: Select,
    /// Bytes of device memory for distance tiles and candidate lists (inputs excluded); capped
    /// at a quarter of the free memory; halved and retried when an allocation fails.
    pub tile_bytes: usize,
    /// Device memory the engine may use, in bytes (default: whatever is free). The engine
    /// holds the rest of the free memory as ballast, so it behaves exactly as on a smaller GPU:
    /// a base that does not fit is streamed through in shards. For tests and for sharing a GPU.
    pub device_memory: Option<usize>,
    /// Arithmetic of the GEMM tiles (`--precision`); results are exact either way.
    pub precision: Precision,
    /// Fused distance + selection for small k (benchmarks); results are exact either way.
    pub fusion: Fusion,
    /// Looked at between query blocks, shards and passes; once set, calls end with
    /// `Error::Cancelled`.
    pub cancel: Option<voisin::engine::Cancel>,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            select: Select::Auto,
            tile_bytes: 1 << 30,
            device_memory: None,
            precision: Precision::Fp32,
            fusion: Fusion::Auto,
            cancel: None,
        }
    }
}

/// The engine on one GPU. Calls are serialised on the device's stream.
pub struct CudaEngine {
    gpu: Mutex<Gpu>,
    device: usize,
    opts: CudaOptions,
    /// The levenshtein kernel, loaded at the first string range search.
    lev: std::sync::OnceLock<cudarc::driver::CudaFunction>,
    /// Free memory held back under `device_memory`.
    _ballast: Option<cudarc::driver::CudaSlice<u8>>,
    /// Working sets shrunk after an allocation failure, for diagnostics.
    shrinks: AtomicUsize,
    /// Base shards streamed, for diagnostics.
    streamed: AtomicUsize,
    /// k-NN queries whose finish ran on the host, for diagnostics.
    host_finished: AtomicUsize,
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

    pub fn with_options(device: usize, opts: CudaOptions) -> Result<Self> {
        let gpu = Gpu::open(device)?;
        let ballast = match opts.device_memory {
            Some(cap) => gpu.ballast(cap)?,
            None => None,
        };
        Ok(CudaEngine {
            gpu: Mutex::new(gpu),
            device,
            opts,
            lev: std::sync::OnceLock::new(),
            _ballast: ballast,
            shrinks: AtomicUsize::new(0),
            streamed: AtomicUsize::new(0),
            host_finished: AtomicUsize::new(0),
        })
    }

    /// How many base shards this engine has streamed through the GPU because the base did not
    /// fit (diagnostics).
    pub fn streamed_shards(&self) -> usize {
        self.streamed.load(Ordering::Relaxed)
    }

    /// How many k-NN queries (of a resident base) this engine finished on the host instead of
    /// the device: lists that did not prove at once, selections whose lists are unsorted, metrics
    /// without exact keys on the device (diagnostics; the results do not depend on it).
    pub fn host_finished(&self) -> usize {
        self.host_finished.load(Ordering::Relaxed)
    }

    /// How many times an allocation failure made this engine halve its working set and retry
    /// (diagnostics; the results do not depend on it).
    pub fn shrinks(&self) -> usize {
        self.shrinks.load(Ordering::Relaxed)
    }

    /// Runs `f` on the working-set budget, halving it after each out-of-memory failure: the
    /// free-memory estimate can be too optimistic (the inputs' own buffers, fragmentation,
    /// another process), and smaller tiles only cost speed.
    fn shrinking<T>(&self, budget: Budget, mut f: impl FnMut(&Budget) -> Result<T>) -> Result<T> {
        let mut b = budget;
        loop {
            match f(&b) {
                Err(e) if context::is_oom(&e) && b.bytes > MIN_BUDGET => {
                    b.bytes = (b.bytes / 2).max(MIN_BUDGET);
                    self.shrinks.fetch_add(1, Ordering::Relaxed);
                    trace(
                        "out of device memory: working set halved",
                        &mut Instant::now(),
                    );
                }
                r => return r,
            }
        }
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

    /// The GPU, made current on the calling thread: the engine may be called from any thread
    /// (cuBLAS, unlike cudarc's own calls, does not bind the context itself).
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Gpu>> {
        let gpu = self
            .gpu
            .lock()
            .map_err(|_| Error::device("cuda: an earlier call panicked while holding the GPU"))?;
        gpu.ctx
            .bind_to_thread()
            .map_err(context::dev("binding the context"))?;
        Ok(gpu)
    }

    fn budget(&self, gpu: &Gpu) -> Result<Budget> {
        Ok(Budget {
            bytes: self
                .opts
                .tile_bytes
                .min(gpu.free_memory()? / 4)
                .max(MIN_BUDGET),
        })
    }

    /// The selection a widening pass uses: never one that refuses the larger list.
    fn widen_select(&self) -> Select {
        match self.opts.select {
            Select::Radix => Select::Radix,
            _ => Select::Auto,
        }
    }

    fn stats(&self, gpu: &Gpu) -> Stats {
        Stats {
            device: format!("cuda:{} ({})", self.device, gpu.name),
            ..Default::default()
        }
    }
}

/// Phase timings on stderr when `VOISIN_CUDA_TRACE` is set: for the benchmark notes, where the
/// split between host preparation, transfer, device work and re-rank decides what to speed up.
pub(crate) fn trace(what: &str, since: &mut Instant) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("VOISIN_CUDA_TRACE").is_some()) {
        eprintln!(
            "[voisin-cuda] {what}: {:.1} ms",
            since.elapsed().as_secs_f64() * 1e3
        );
    }
    *since = Instant::now();
}

fn to_result(rows: Vec<Vec<(f64, u32)>>, k: usize, metric: &Metric, stats: Stats) -> KnnResult {
    KnnResult {
        stats,
        ..KnnResult::from_rows(rows, k, metric)
    }
}

impl Engine for CudaEngine {
    fn name(&self) -> String {
        format!("cuda:{}", self.device)
    }

    /// Vectors under the built-in vector metrics, strings under levenshtein; user metrics run
    /// on the CPU.
    /// Vectors under the built-in vector metrics (unless they hold f64 values that f32 cannot
    /// hold: the tiles, the bounds and the re-rank here work on f32 values), and strings under
    /// levenshtein. Minkowski orders above `MINKOWSKI_POWER_KEY_MAX` rank by the distance, which
    /// the fp32 power tiles here cannot bound: the CPU answers them.
    fn supports(&self, data: &Dataset, metric: &Metric, _op: Op) -> bool {
        match (data, metric) {
            (_, Metric::Custom(_)) => false,
            (_, Metric::Minkowski(_)) if !metric.is_minkowski_power_sum() => false,
            (Dataset::Vectors(v), m) => *m != Metric::Levenshtein && v.is_f32_exact(),
            (Dataset::Strings(_), m) => *m == Metric::Levenshtein,
        }
    }

    fn knn_request(&self, req: &KnnRequest<'_>) -> Result<KnnResult> {
        let (base, queries, k, metric) = (req.base(), req.queries(), req.k(), req.metric());
        self.check_cancel()?;
        if let (Dataset::Strings(b), Dataset::Strings(q), Metric::Levenshtein) =
            (base, queries, metric)
        {
            let gpu = self.lock()?;
            let lev = self.lev_kernel(&gpu)?;
            return strings::knn(&gpu, lev, b, q, k, false, self.stats(&gpu));
        }
        let mut tr = Instant::now();
        let (bset, qset) = (vectors(base, metric)?, vectors(queries, metric)?);
        trace("knn: input checks", &mut tr);
        let gpu = self.lock()?;
        let mut stats = self.stats(&gpu);
        if k == 0 || qset.is_empty() {
            return Ok(to_result(vec![vec![]; qset.len()], k, metric, stats));
        }
        let plan = self.plan(metric, bset);
        let kp = knn::first_list(k);
        if !self.fits(&gpu, bset, qset, kp)? {
            check_finite(bset)?;
            check_finite(qset)?;
            let rows = self.knn_streamed(&gpu, &plan, metric, bset, qset, k, &mut stats)?;
            return Ok(to_result(rows, k, metric, stats));
        }
        let budget = self.budget(&gpu)?;
        // The base goes up behind the first query block's tiles (device_set.rs), so its upload
        // counts as compute; the queries are uploaded whole.
        let bdev = DeviceSet::behind(&gpu, &plan, bset, 0..bset.len())?;
        let qdev = DeviceSet::new(&gpu, &plan, qset)?;
        stats.transfer += tr.elapsed();
        let t = Instant::now();
        trace("knn: upload and prepare", &mut tr);
        let kp = knn::pilot_list(
            &gpu,
            &plan,
            &bdev,
            qset,
            k,
            false,
            self.opts.select,
            &budget,
        )?;
        trace("knn: pilot", &mut tr);
        stats.compute += t.elapsed();
        let sides = Sides {
            bset,
            qset,
            bdev: &bdev,
            qdev: &qdev,
        };
        let res = knn::search(self, &gpu, &plan, metric, &sides, k, kp, budget, &mut stats);
        trace("knn: search", &mut tr);
        // NaN and infinite values show in the norms, which the base has only once it is all up:
        // checked after the search (a bounded pass; its result or error is then discarded),
        // base before queries.
        bdev.complete(&gpu)?;
        bdev.check(bset, 0)?;
        qdev.check(qset, 0)?;
        self.check_cancel()?;
        res
    }

    fn range_request(&self, req: &RangeRequest<'_>) -> Result<RangeResult> {
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
        let plan = self.plan(metric, bset);
        if !self.fits(&gpu, bset, qset, 1)? {
            check_finite(bset)?;
            check_finite(qset)?;
            let rows = self.range_streamed(&gpu, &plan, metric, bset, qset, radius, &mut stats)?;
            return Ok(RangeResult {
                stats,
                ..RangeResult::from_rows(rows, metric)
            });
        }
        let bdev = DeviceSet::new(&gpu, &plan, bset)?;
        let qdev = DeviceSet::new(&gpu, &plan, qset)?;
        bdev.check(bset, 0)?;
        qdev.check(qset, 0)?;
        let thr = range::thresholds(&plan, metric, radius, qdev.norm(), bdev.max_norm());
        let budget = self.budget(&gpu)?;
        let (offsets, ids) = self.shrinking(budget, |b| {
            range::candidates(&gpu, &plan, &bdev, &qdev, &thr, b)
        })?;
        stats.compute += t.elapsed();
        stats.distance_evals += 2 * (bset.len() * qset.len()) as u64;
        let t = Instant::now();
        let pairs = range::pairs(&offsets, &ids);
        let sides = Sides {
            bset,
            qset,
            bdev: &bdev,
            qdev: &qdev,
        };
        let keys = exact::keys(&gpu, metric, &sides, &pairs)?;
        drop(gpu);
        let rows = range::exact_rows(metric, radius, &offsets, &ids, &keys);
        stats.select += t.elapsed();
        stats.exact_evals += ids.len() as u64;
        Ok(RangeResult {
            stats,
            ..RangeResult::from_rows(rows, metric)
        })
    }

    fn graph_request(&self, req: &GraphRequest<'_>) -> Result<KnnResult> {
        let (data, k, metric) = (req.data(), req.k(), req.metric());
        if let (Dataset::Strings(s), Metric::Levenshtein) = (data, metric) {
            let gpu = self.lock()?;
            let lev = self.lev_kernel(&gpu)?;
            return strings::knn(&gpu, lev, s, s, k, true, self.stats(&gpu));
        }
        let set = vectors(data, metric)?;
        self.check_cancel()?;
        let gpu = self.lock()?;
        let mut stats = self.stats(&gpu);
        if k == 0 {
            return Ok(to_result(vec![vec![]; set.len()], k, metric, stats));
        }
        let mut tr = Instant::now();
        let plan = self.plan(metric, set);
        self.graph_fits(&gpu, set, k)?;
        let ddev = DeviceSet::new(&gpu, &plan, set)?;
        ddev.check(set, 0)?;
        // Uploads and row preparation count as transfer; compute starts after them.
        stats.transfer += tr.elapsed();
        trace("graph: upload and prepare", &mut tr);
        let t = Instant::now();
        let part = self.shrinking(self.budget(&gpu)?, |b| {
            let edge = edge_for(set.len(), k, b);
            self.graph_lists(&gpu, &plan, &ddev, set, k, edge, &|_, _| true)
        })?;
        stats.compute += t.elapsed();
        trace("graph: device candidates", &mut tr);
        self.check_cancel()?;
        let rows = self.graph_prove(&gpu, &plan, &ddev, set, metric, part, &mut stats)?;
        trace("graph: prove, widen, exact re-rank", &mut tr);
        Ok(to_result(rows, k, metric, stats))
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
            data,
            k,
            metric,
            Some(checkpoint),
        )
    }
}

/// Which rows of a graph [`CudaEngine::prove_rows`] finishes: from item `first` on, `k` each,
/// from candidate lists of `width` slots.
#[derive(Clone, Copy)]
pub(crate) struct GraphRows {
    pub first: usize,
    pub k: usize,
    pub width: usize,
}

/// The graph's tile edge for `n` items and `k` under a budget.
fn edge_for(n: usize, k: usize, budget: &Budget) -> usize {
    let kp = knn::first_list(k.max(1)).max(select::COLS_KP);
    graph::tile_edge(n, kp, budget)
}

/// The vectors of a graph's input and the k that applies (at most n − 1), for the graph's
/// entry points beside the seam (tiles, checkpoints).
fn graph_input<'a>(data: &'a Dataset, k: usize, metric: &Metric) -> Result<(&'a VectorSet, usize)> {
    let req = GraphRequest::new(data, k, metric)?;
    Ok((vectors(data, metric)?, req.k()))
}

impl CudaEngine {
    /// The per-metric plan of a search under this engine's options.
    pub(crate) fn plan(&self, metric: &Metric, set: &VectorSet) -> Plan {
        Plan::new(metric, set).with_engine(self.opts.precision, self.opts.fusion)
    }

    /// The levenshtein kernel, loaded at the first search on strings.
    fn lev_kernel(&self, gpu: &Gpu) -> Result<&cudarc::driver::CudaFunction> {
        if self.lev.get().is_none() {
            // Calls are serialised on the GPU lock, so only one thread loads it.
            let _ = self.lev.set(strings::kernel(gpu)?);
        }
        Ok(self.lev.get().expect("set above"))
    }

    /// The tile edge of the graph's triangle schedule for `n` items on this GPU. Callers that
    /// split one graph must use one edge (the smallest of theirs).
    pub fn graph_tile_edge(&self, n: usize, k: usize) -> Result<usize> {
        let gpu = self.lock()?;
        self.graph_edge(&gpu, n, k)
    }

    fn graph_edge(&self, gpu: &Gpu, n: usize, k: usize) -> Result<usize> {
        Ok(edge_for(n, k, &self.budget(gpu)?))
    }

    /// This GPU's share of the k-NN graph of `data`: the tile pairs (I, J), I ≤ J, of edge `tile`
    /// for which `owns(I, J)` holds (tile I covers items I·tile up to (I+1)·tile). For an MPI
    /// rank: deal the pairs (e.g. cyclically by their row-major index), run this on each rank,
    /// gather the shares at one rank, [`PartialGraph::merge`] them and call
    /// [`CudaEngine::graph_finish`] there. With the radix selection (k above ~1800) a tile row I
    /// is computed whole by the owner of (I, I).
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
        let plan = self.plan(metric, set);
        let ddev = DeviceSet::new(&gpu, &plan, set)?;
        ddev.check(set, 0)?;
        self.graph_lists(&gpu, &plan, &ddev, set, k, tile, owns)
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
        if part.n != set.len() || part.lists.complete.len() != set.len() || k != part.k {
            return Err(Error::invalid("graph share does not match the data"));
        }
        let gpu = self.lock()?;
        let mut stats = self.stats(&gpu);
        if k == 0 {
            return Ok(to_result(vec![vec![]; set.len()], k, metric, stats));
        }
        let plan = self.plan(metric, set);
        let ddev = DeviceSet::new(&gpu, &plan, set)?;
        ddev.check(set, 0)?;
        let rows = self.graph_prove(&gpu, &plan, &ddev, set, metric, part, &mut stats)?;
        Ok(to_result(rows, k, metric, stats))
    }

    /// Candidate lists of the owned tile pairs, on a set already on this GPU.
    #[allow(clippy::too_many_arguments)]
    fn graph_lists(
        &self,
        gpu: &Gpu,
        plan: &Plan,
        ddev: &DeviceSet,
        set: &VectorSet,
        k: usize,
        tile: usize,
        owns: &TileOwner<'_>,
    ) -> Result<PartialGraph> {
        let n = set.len();
        // The set against itself: self pairs sit among the lists.
        let budget = self.budget(gpu)?;
        let kp = knn::pilot_list(gpu, plan, ddev, set, k, true, self.opts.select, &budget)?;
        let nt = n.div_ceil(tile);
        let size = |it: usize| ((it + 1) * tile).min(n) - it * tile;
        // The symmetric schedule needs the block kernel's running lists; radix selection works
        // on whole rows, so it runs tile rows of the set against the whole set.
        let (lists, evals) = match self.opts.select.resolve(kp)? {
            Select::Block => {
                let evals = (0..nt)
                    .flat_map(|i| (i..nt).map(move |j| (i, j)))
                    .filter(|&(i, j)| owns(i, j))
                    .map(|(i, j)| (size(i) * size(j)) as u64 / if i == j { 2 } else { 1 })
                    .sum();
                // Small lists are padded to the column kernel's size so the column candidates
                // are read in place (kernels/select_cols.cu) instead of through a transpose.
                let kp = Select::Block.width(kp).max(select::COLS_KP);
                let lists = graph::symmetric_candidates(gpu, plan, ddev, kp, tile, owns)?;
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
                let mut lists = Lists::done(n, kp);
                let mut evals = 0;
                for it in (0..nt).filter(|&it| owns(it, it)) {
                    let rows = it * tile..it * tile + size(it);
                    let sub = DeviceSet::range(gpu, plan, set, rows.clone())?;
                    let raws = self.shrinking(self.budget(gpu)?, |b| {
                        knn::candidates(gpu, plan, ddev, &sub, kp, sel, b)
                    })?;
                    evals += (rows.len() * n) as u64;
                    for (r, raw) in rows.zip(raws) {
                        lists.set(r, raw);
                    }
                }
                (lists, evals)
            }
        };
        Ok(PartialGraph::new(n, k, lists, evals))
    }

    /// The graph's prove-widen-re-rank step on a set already on this GPU.
    #[allow(clippy::too_many_arguments)]
    fn graph_prove(
        &self,
        gpu: &Gpu,
        plan: &Plan,
        ddev: &DeviceSet,
        set: &VectorSet,
        metric: &Metric,
        part: PartialGraph,
        stats: &mut Stats,
    ) -> Result<Vec<Vec<(f64, u32)>>> {
        stats.distance_evals += part.distance_evals;
        let (k, kp) = (part.k, part.lists.width);
        let rows = GraphRows {
            first: 0,
            k,
            width: kp,
        };
        self.prove_rows(gpu, plan, ddev, set, metric, rows, part.into_raws(), stats)
    }

    /// Proves, widens and re-ranks the candidates `raws` of the items `rows.first..` of a
    /// graph, each list covering every other item (a whole share of the triangle or a finished
    /// pass of one): their final rows. Widening starts from the lists' own size (the pilot's
    /// choice, padded as the selection needed): no second pilot.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn prove_rows(
        &self,
        gpu: &Gpu,
        plan: &Plan,
        ddev: &DeviceSet,
        set: &VectorSet,
        metric: &Metric,
        rows: GraphRows,
        raws: Vec<knn::Raw>,
        stats: &mut Stats,
    ) -> Result<Vec<Vec<(f64, u32)>>> {
        let first = rows.first;
        let mut redo = |ids: &[usize], kp: usize| -> Result<Vec<Raw>> {
            let items: Vec<usize> = ids.iter().map(|&q| q + first).collect();
            let sub = DeviceSet::gather(gpu, plan, set, &items)?;
            self.shrinking(self.budget(gpu)?, |b| {
                knn::candidates(gpu, plan, ddev, &sub, kp, self.widen_select(), b)
            })
        };
        let sides = Sides {
            bset: set,
            qset: set,
            bdev: ddev,
            qdev: ddev,
        };
        let mut exact_fn = |pairs: &[[u32; 2]]| {
            if first == 0 {
                return exact::keys(gpu, metric, &sides, pairs);
            }
            let shifted: Vec<[u32; 2]> =
                pairs.iter().map(|&[q, b]| [q + first as u32, b]).collect();
            exact::keys(gpu, metric, &sides, &shifted)
        };
        let self_of = |q: usize| Some((q + first) as u32);
        knn::finish(
            plan,
            &ddev.norm()[first..first + raws.len()],
            ddev.max_norm(),
            rows.k,
            raws,
            &self_of,
            set.len(),
            rows.width,
            &mut redo,
            &mut exact_fn,
            stats,
        )
    }
}
