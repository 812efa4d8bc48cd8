//! The CUDA engine: exact k-NN search, k-NN graphs and range search on one NVIDIA GPU.
//!
//! Distances come from cuBLAS sgemm tiles (euclidean, sqeuclidean, cosine, correlation,
//! inner_product; strict fp32, or TF32 tensor cores under `Precision::Tf32`) or a SIMT tile kernel (cityblock, chebyshev, minkowski);
//! selection and range filtering run in NVRTC-compiled kernels; the host proves each query's
//! candidates with an f32 error bound, widens where the proof fails, and re-ranks on exact f64
//! keys, so results equal the CPU engine's.
//!
//! Layout (after FAISS): `kernels/*.cu` hold the device primitives; each `src/` file holds one
//! host-side step: `context` (driver, cuBLAS, NVRTC), `prepare` (per-metric plans and bounds),
//! `device_set` (upload and row preparation), `exact` (exact keys), `tile` (one distance tile), [`select`] (selection variants), `knn`, `graph`, `range`.
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
//! graphs on strings run it with increasing radii. Not on this engine: custom
//! metrics, and data sets larger than the GPU's memory (the base must fit twice: raw rows for
//! exact keys and prepared rows for the tiles).

mod context;
mod device_set;
mod exact;
mod fused;
mod graph;
pub mod index;
mod knn;
mod prepare;
mod range;
pub mod select;
mod strings;
mod tile;

use std::sync::Mutex;
use std::time::Instant;

use voisin::engine::{check_k, check_metric, check_pair, Engine, KnnResult, RangeResult};
use voisin::{Dataset, Error, Metric, Result, Stats};

pub use context::gpu_available;
pub use fused::Fusion;
pub use prepare::Precision;
pub use select::Select;

use context::Gpu;
use device_set::DeviceSet;
use exact::Sides;
use knn::{Budget, Raw};
use prepare::{vectors, Plan};

/// How the CUDA engine runs.
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// Selection kernel (`--select`).
    pub select: Select,
    /// Bytes of device memory for distance tiles and candidate lists (inputs excluded); capped
    /// at a quarter of the free memory.
    pub tile_bytes: usize,
    /// Arithmetic of the GEMM tiles (`--precision`); results are exact either way.
    pub precision: Precision,
    /// Fused distance + selection for small k (benchmarks); results are exact either way.
    pub fusion: Fusion,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            select: Select::Auto,
            tile_bytes: 1 << 30,
            precision: Precision::Fp32,
            fusion: Fusion::Auto,
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
}

impl CudaEngine {
    /// Opens GPU `device` with default options; a clear [`Error::Device`] when CUDA, the device,
    /// or the kernels' compilation is missing.
    pub fn new(device: usize) -> Result<Self> {
        Self::with_options(device, CudaOptions::default())
    }

    pub fn with_options(device: usize, opts: CudaOptions) -> Result<Self> {
        Ok(CudaEngine {
            gpu: Mutex::new(Gpu::open(device)?),
            device,
            opts,
            lev: std::sync::OnceLock::new(),
        })
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
                .max(1 << 20),
        })
    }

    /// The levenshtein kernel, loaded at the first search on strings.
    fn lev_kernel(&self, gpu: &Gpu) -> Result<&cudarc::driver::CudaFunction> {
        if self.lev.get().is_none() {
            // Calls are serialised on the GPU lock, so only one thread loads it.
            let _ = self.lev.set(strings::kernel(gpu)?);
        }
        Ok(self.lev.get().expect("set above"))
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

    fn knn(
        &self,
        base: &Dataset,
        queries: &Dataset,
        k: usize,
        metric: &Metric,
    ) -> Result<KnnResult> {
        check_pair(base, queries, metric)?;
        check_k(k)?;
        if let (Dataset::Strings(b), Dataset::Strings(q), Metric::Levenshtein) =
            (base, queries, metric)
        {
            let gpu = self.lock()?;
            let lev = self.lev_kernel(&gpu)?;
            return strings::knn(&gpu, lev, b, q, k.min(b.len()), false, self.stats(&gpu));
        }
        let mut tr = Instant::now();
        let (bset, qset) = (vectors(base, metric)?, vectors(queries, metric)?);
        trace("knn: input checks", &mut tr);
        let k = k.min(bset.len());
        let gpu = self.lock()?;
        let mut stats = self.stats(&gpu);
        if k == 0 || qset.is_empty() {
            return Ok(to_result(vec![vec![]; qset.len()], k, metric, stats));
        }
        let plan = Plan::new(metric, bset).with_engine(self.opts.precision, self.opts.fusion);
        let budget = self.budget(&gpu)?;
        let bdev = DeviceSet::new(&gpu, &plan, bset)?;
        let qdev = DeviceSet::new(&gpu, &plan, qset)?;
        // Uploads and row preparation count as transfer; compute starts after them.
        stats.transfer += tr.elapsed();
        let t = Instant::now();
        trace("knn: upload and prepare", &mut tr);
        let kp = knn::first_list(k);
        let raws = knn::candidates(&gpu, &plan, &bdev, &qdev, kp, self.opts.select, &budget)?;
        trace("knn: device candidates", &mut tr);
        stats.compute += t.elapsed();
        stats.distance_evals += (bset.len() * qset.len()) as u64;
        let mut redo = |ids: &[usize], kp: usize| -> Result<Vec<Raw>> {
            let sub = DeviceSet::gather(&gpu, &plan, qset, ids)?;
            knn::candidates(&gpu, &plan, &bdev, &sub, kp, self.widen_select(), &budget)
        };
        let sides = Sides {
            bset,
            qset,
            bdev: &bdev,
            qdev: &qdev,
        };
        let mut exact_fn = |pairs: &[[u32; 2]]| exact::keys(&gpu, metric, &sides, pairs);
        let rows = knn::finish(
            &plan,
            &qdev.norm,
            bdev.max_norm(),
            k,
            raws,
            &|_| None,
            bset.len(),
            kp,
            &mut redo,
            &mut exact_fn,
            &mut stats,
        )?;
        trace("knn: prove, widen, exact re-rank", &mut tr);
        Ok(to_result(rows, k, metric, stats))
    }

    fn range(
        &self,
        base: &Dataset,
        queries: &Dataset,
        radius: f64,
        metric: &Metric,
    ) -> Result<RangeResult> {
        check_pair(base, queries, metric)?;
        metric.check_radius(radius)?;
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
        let plan = Plan::new(metric, bset).with_engine(self.opts.precision, self.opts.fusion);
        let bdev = DeviceSet::new(&gpu, &plan, bset)?;
        let qdev = DeviceSet::new(&gpu, &plan, qset)?;
        let bn = bdev.max_norm();
        // Widened so that every pair the exact test (`within` on the reported distance) accepts
        // passes the approximate filter, whatever the rounding of sqrt or powf.
        let rkey = metric.radius_to_key(radius);
        let rkey = rkey + rkey.abs() * 1e-9 + 1e-300;
        let thr: Vec<f32> = qdev
            .norm
            .iter()
            .map(|&qn| plan.approx_threshold(rkey, plan.abs_bound(qn, bn)))
            .collect();
        let budget = self.budget(&gpu)?;
        let (offsets, ids) = range::candidates(&gpu, &plan, &bdev, &qdev, &thr, &budget)?;
        stats.compute += t.elapsed();
        stats.distance_evals += 2 * (bset.len() * qset.len()) as u64;
        let t = Instant::now();
        let pairs: Vec<[u32; 2]> = (0..qset.len())
            .flat_map(|q| {
                ids[offsets[q]..offsets[q + 1]]
                    .iter()
                    .map(move |&i| [q as u32, i])
            })
            .collect();
        let sides = Sides {
            bset,
            qset,
            bdev: &bdev,
            qdev: &qdev,
        };
        let keys = exact::keys(&gpu, metric, &sides, &pairs)?;
        drop(gpu);
        use rayon::prelude::*;
        let rows: Vec<Vec<(f64, u32)>> = (0..qset.len())
            .into_par_iter()
            .map(|q| {
                let r = offsets[q]..offsets[q + 1];
                let mut row: Vec<(f64, u32)> = keys[r.clone()]
                    .iter()
                    .zip(&ids[r])
                    .map(|(&key, &i)| (key, i))
                    .filter(|&(key, _)| metric.within(metric.key_to_distance(key), radius))
                    .collect();
                row.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                row
            })
            .collect();
        stats.select += t.elapsed();
        stats.exact_evals += ids.len() as u64;
        Ok(RangeResult {
            stats,
            ..RangeResult::from_rows(rows, metric)
        })
    }

    fn graph(&self, data: &Dataset, k: usize, metric: &Metric) -> Result<KnnResult> {
        check_metric(data, metric)?;
        check_k(k)?;
        if let (Dataset::Strings(s), Metric::Levenshtein) = (data, metric) {
            let gpu = self.lock()?;
            let lev = self.lev_kernel(&gpu)?;
            let k = k.min(s.len().saturating_sub(1));
            return strings::knn(&gpu, lev, s, s, k, true, self.stats(&gpu));
        }
        let set = vectors(data, metric)?;
        let n = set.len();
        let k = k.min(n.saturating_sub(1));
        let gpu = self.lock()?;
        let mut stats = self.stats(&gpu);
        if k == 0 {
            return Ok(to_result(vec![vec![]; n], k, metric, stats));
        }
        let mut tr = Instant::now();
        let plan = Plan::new(metric, set).with_engine(self.opts.precision, self.opts.fusion);
        let budget = self.budget(&gpu)?;
        let ddev = DeviceSet::new(&gpu, &plan, set)?;
        // Uploads and row preparation count as transfer; compute starts after them.
        stats.transfer += tr.elapsed();
        let t = Instant::now();
        trace("graph: upload and prepare", &mut tr);
        let kp = knn::first_list(k);
        // The symmetric schedule needs the block kernel's running lists; radix selection works
        // on whole rows, so it runs the graph as a search of the set against itself.
        let raws = match self.opts.select.resolve(kp)? {
            Select::Block => {
                stats.distance_evals += (n as u64 * (n as u64 + 1)) / 2;
                // Small lists are padded to the column kernel's size so the column candidates
                // are read in place (kernels/select_cols.cu) instead of through a transpose.
                let kp = Select::Block.width(kp).max(select::COLS_KP);
                graph::symmetric_candidates(&gpu, &plan, &ddev, kp, &budget)?
            }
            sel => {
                stats.distance_evals += (n * n) as u64;
                // The self pair takes a slot: whole-row lists get one more; running lists keep
                // kp, whose margin over k (at least 8) already covers it.
                let kp = if sel.whole_rows() {
                    (kp + 1).min(n)
                } else {
                    kp
                };
                knn::candidates(&gpu, &plan, &ddev, &ddev, kp, sel, &budget)?
            }
        };
        trace("graph: device candidates", &mut tr);
        stats.compute += t.elapsed();
        let mut redo = |ids: &[usize], kp: usize| -> Result<Vec<Raw>> {
            let sub = DeviceSet::gather(&gpu, &plan, set, ids)?;
            knn::candidates(&gpu, &plan, &ddev, &sub, kp, self.widen_select(), &budget)
        };
        let sides = Sides {
            bset: set,
            qset: set,
            bdev: &ddev,
            qdev: &ddev,
        };
        let mut exact_fn = |pairs: &[[u32; 2]]| exact::keys(&gpu, metric, &sides, pairs);
        let self_of = |q: usize| Some(q as u32);
        let result = knn::finish(
            &plan,
            &ddev.norm,
            ddev.max_norm(),
            k,
            raws,
            &self_of,
            n,
            kp,
            &mut redo,
            &mut exact_fn,
            &mut stats,
        )?;
        trace("graph: prove, widen, exact re-rank", &mut tr);
        Ok(to_result(result, k, metric, stats))
    }
}
