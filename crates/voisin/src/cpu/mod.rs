//! The exact CPU engine: multi-threaded (rayon), cache-blocked, memory bounded by a budget.
//!
//! Owns tiling and scheduling on the CPU; distance formulas come from [`crate::metric`] and
//! selection from [`crate::select`].

use crate::data::Dataset;
use crate::engine::{Engine, KnnResult, ProgressFn, RangeResult};
use crate::error::{Error, Result};
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
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions {
            threads: None,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            progress: None,
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

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    pub fn options(&self) -> &CpuOptions {
        &self.opts
    }
}

impl Engine for CpuEngine {
    fn name(&self) -> String {
        format!("cpu ({} threads)", self.threads())
    }

    fn knn(
        &self,
        base: &Dataset,
        queries: &Dataset,
        k: usize,
        metric: &Metric,
    ) -> Result<KnnResult> {
        self.pool
            .install(|| crate::reference::knn(base, queries, k, metric))
    }

    fn range(
        &self,
        base: &Dataset,
        queries: &Dataset,
        radius: f64,
        metric: &Metric,
    ) -> Result<RangeResult> {
        self.pool
            .install(|| crate::reference::range(base, queries, radius, metric))
    }

    fn graph(&self, data: &Dataset, k: usize, metric: &Metric) -> Result<KnnResult> {
        self.pool
            .install(|| crate::reference::graph(data, k, metric))
    }
}
