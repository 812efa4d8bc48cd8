//! Metric indexes on the GPU (docs/design/gpu-metric-indexes.md, gpu-index-build.md,
//! gpu-cover-tree.md, lc-multi-gpu-superclusters.md; [Barrientos13] ch. 4–5, [SharmaJoshi]),
//! behind the one index face: [`GpuIndexes`] is the GPUs' `voisin_index::IndexEngine`, what the
//! engine factory opens for `--device cuda` (and, under auto, routes what it supports to).
//!
//! - Builds (`build.rs`: the List of Clusters' steps and the SSS on the device,
//!   kernels/index/lc_build.cu; `cover_build.rs`: the cover tree's greedy passes,
//!   kernels/index/cover_net.cu; `oracle.rs`: the device pair oracle for builds the host steers).
//!   A GPU build is the CPU build, part for part where the keys are exact, and saves to the same
//!   index file.
//! - Searches: [`GpuLc`] (the List of Clusters, resident), [`GpuSss`] (the SSS pivot table),
//!   [`GpuLsc`] (superclusters streamed through one GPU whose memory the list outgrows),
//!   [`GpuLcSpread`] (the list's clusters cut into runs over several GPUs: the seed's
//!   1-Stage), all over `schedule.rs`: batches, slot capacities, rows that outgrow their
//!   slots, increasing-radius k-NN, sorting and packing the answers.
//!
//! Searched metrics: euclidean, cityblock and chebyshev (true metrics whose exact keys use only
//! correctly rounded operations). Kernels: `kernels/index/lc_search.cu`, `kernels/index/sss_search.cu`.
//! Every key is computed on the device bit-identical to `voisin::metric::exact::vector_key` and
//! every pruning test is the CPU index's test on those values, so answers equal
//! `voisin::reference`'s (same keys, rows sorted by (distance, index)). This module does not
//! change the indexes (it reads `voisin-index`'s public parts) and does not touch the
//! brute-force engine's steps.

mod build;
mod cover_build;
mod lc;
mod lsc;
mod oracle;
mod schedule;
mod spread;
mod sss;

pub use build::MAX_CLUSTER;
pub use lc::GpuLc;
pub use lsc::GpuLsc;
pub use spread::GpuLcSpread;
pub use sss::GpuSss;
pub use voisin_index::StreamStats;

use std::sync::OnceLock;

use voisin::{Dataset, Error, KnnResult, Metric, RangeResult, Result, VectorSet};
use voisin_index::{DatasetIndex, Index, IndexEngine, IndexOp, Kind, Params, Searched};

use crate::engine::CudaEngine;

/// The GPUs' index engine: builds on the first GPU, searches on all of them. A List of
/// Clusters is resident on one GPU when it fits half of the free memory the engine leaves it
/// (`CudaOptions::device_memory` caps that); else, or over several engines, it is spread: one
/// run of clusters per engine (1-Stage), each streamed in superclusters when it does not fit
/// ([`GpuLcSpread`]). SSS runs on the first engine. What the GPUs do not take
/// ([`IndexEngine::supports`]) is a clear error naming what they take.
pub struct GpuIndexes<'e> {
    engines: Engines<'e>,
}

/// The engines of a [`GpuIndexes`]: the caller's, or opened at the first work that needs them
/// (the factory's, so that a GPU opens only for work it takes, after the inputs are read).
enum Engines<'e> {
    On(&'e [CudaEngine]),
    Deferred {
        open: Box<dyn Fn() -> Result<Vec<CudaEngine>> + Send + Sync>,
        opened: OnceLock<Result<Vec<CudaEngine>>>,
    },
}

impl<'e> GpuIndexes<'e> {
    /// The index engine over `engines` (builds on the first; at least one for any work).
    pub fn on(engines: &'e [CudaEngine]) -> Self {
        GpuIndexes {
            engines: Engines::On(engines),
        }
    }

    /// The index engine on one GPU.
    pub fn one(engine: &'e CudaEngine) -> Self {
        Self::on(std::slice::from_ref(engine))
    }
}

impl GpuIndexes<'static> {
    /// The index engine over the engines `open` returns, called once, at the first work that
    /// needs a GPU (the engine factory's form).
    pub fn deferred(open: impl Fn() -> Result<Vec<CudaEngine>> + Send + Sync + 'static) -> Self {
        GpuIndexes {
            engines: Engines::Deferred {
                open: Box::new(open),
                opened: OnceLock::new(),
            },
        }
    }
}

impl GpuIndexes<'_> {
    /// The engines, opened now if they were deferred; never empty.
    pub fn engines(&self) -> Result<&[CudaEngine]> {
        let engines = match &self.engines {
            Engines::On(e) => *e,
            Engines::Deferred { open, opened } => match opened.get_or_init(open) {
                Ok(e) => e.as_slice(),
                Err(e) => return Err(again(e)),
            },
        };
        if engines.is_empty() {
            return Err(Error::invalid("no GPU to search the index on"));
        }
        Ok(engines)
    }

    /// Whether the engines are open or open now (under auto, a GPU that does not start is no
    /// error: its work goes to the CPU).
    pub fn ready(&self) -> bool {
        self.engines().is_ok()
    }
}

/// An error kept from the first attempt, given again.
fn again(e: &Error) -> Error {
    match e {
        Error::InvalidInput(m) => Error::invalid(m.clone()),
        Error::OutOfMemory(m) => Error::OutOfMemory(m.clone()),
        Error::Cancelled => Error::Cancelled,
        other => Error::device(other.to_string()),
    }
}

impl IndexEngine for GpuIndexes<'_> {
    /// The GPUs' names ("cuda" before they open).
    fn name(&self) -> String {
        let Ok(engines) = self.engines_if_open() else {
            return "cuda".into();
        };
        let mut names: Vec<String> = Vec::new();
        for n in engines.iter().map(CudaEngine::device_name) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names.join(" + ")
    }

    /// Builds: the List of Clusters or SSS over vectors under euclidean, cityblock, chebyshev or
    /// minkowski:P, the List of Clusters over strings under levenshtein when the device steps
    /// take them, the cover tree under those metrics (`build.rs`). Searches: the List of
    /// Clusters or SSS over vectors under euclidean, cityblock or chebyshev, within the
    /// kernels' limits, for vector queries.
    fn supports(&self, op: &IndexOp<'_>) -> bool {
        match *op {
            IndexOp::Build {
                data,
                metric,
                kind,
                params,
            } => build::takes(data, metric, kind, params),
            IndexOp::Search { index, queries } => searches(index, queries),
        }
    }

    /// The first GPU builds.
    fn answering(&self, op: &IndexOp<'_>) -> String {
        match (op, self.engines_if_open()) {
            (IndexOp::Build { .. }, Ok(e)) => e[0].device_name(),
            _ => self.name(),
        }
    }

    fn build(
        &self,
        data: &Dataset,
        metric: Metric,
        kind: Kind,
        params: &Params,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<DatasetIndex> {
        build::build(&self.engines()?[0], data, metric, kind, params, progress)
    }

    fn knn(
        &self,
        index: &DatasetIndex,
        queries: &Dataset,
        k: usize,
    ) -> Result<Searched<KnnResult>> {
        // The GPUs open first: without them, that is the error.
        let engines = self.engines()?;
        let q = vector_queries(queries)?;
        let (result, streamed) = match device_copy(engines, index)? {
            Copy::Lc(g) => (g.knn(q, k)?, StreamStats::default()),
            Copy::Sss(g) => (g.knn(q, k)?, StreamStats::default()),
            Copy::Spread(g) => g.knn(q, k)?,
        };
        Ok(Searched { result, streamed })
    }

    fn range(
        &self,
        index: &DatasetIndex,
        queries: &Dataset,
        radius: f64,
    ) -> Result<Searched<RangeResult>> {
        // The GPUs open first: without them, that is the error.
        let engines = self.engines()?;
        let q = vector_queries(queries)?;
        let (result, streamed) = match device_copy(engines, index)? {
            Copy::Lc(g) => (g.range(q, radius)?, StreamStats::default()),
            Copy::Sss(g) => (g.range(q, radius)?, StreamStats::default()),
            Copy::Spread(g) => g.range(q, radius)?,
        };
        Ok(Searched { result, streamed })
    }
}

impl GpuIndexes<'_> {
    /// The engines when they are open already (opening none).
    fn engines_if_open(&self) -> Result<&[CudaEngine]> {
        match &self.engines {
            Engines::Deferred { opened, .. } if opened.get().is_none() => {
                Err(Error::device("cuda: not opened"))
            }
            _ => self.engines(),
        }
    }
}

/// Device bytes of a copy of the whole List of Clusters `lc` (what decides whether it stays
/// resident or is streamed in superclusters).
pub fn lc_device_bytes(lc: &voisin_index::ListOfClusters<voisin_index::VectorSpace>) -> usize {
    spread::run_bytes(lc, 0..lc.clusters().len())
}

/// Whether the GPU searches `index` for `queries`: List of Clusters or SSS over vectors under
/// euclidean, cityblock or chebyshev, within the kernels' limits, and vector queries.
fn searches(index: &DatasetIndex, queries: &Dataset) -> bool {
    queries.as_vectors().is_some()
        && match index {
            DatasetIndex::Vectors(Index::Lc(lc)) => GpuLc::check(lc).is_ok(),
            DatasetIndex::Vectors(Index::Sss(sss)) => GpuSss::check(sss).is_ok(),
            _ => false,
        }
}

enum Copy<'e> {
    Lc(GpuLc<'e>),
    Sss(GpuSss<'e>),
    Spread(GpuLcSpread<'e>),
}

fn device_copy<'e>(engines: &'e [CudaEngine], index: &'e DatasetIndex) -> Result<Copy<'e>> {
    let Some(engine) = engines.first() else {
        return Err(Error::invalid("no GPU to search the index on"));
    };
    match index {
        DatasetIndex::Vectors(Index::Lc(lc)) => {
            GpuLc::check(lc)?;
            let whole = spread::run_bytes(lc, 0..lc.clusters().len());
            if engines.len() == 1 && spread::placement(engine, whole)?.is_ok() {
                GpuLc::new(engine, lc).map(Copy::Lc)
            } else {
                GpuLcSpread::new(engines, lc).map(Copy::Spread)
            }
        }
        DatasetIndex::Vectors(Index::Sss(sss)) => GpuSss::new(engine, sss).map(Copy::Sss),
        other => Err(Error::invalid(format!(
            "the GPU searches List of Clusters and SSS indexes over vectors, not a {} \
             (use --device cpu)",
            other.describe()
        ))),
    }
}

fn vector_queries(queries: &Dataset) -> Result<&VectorSet> {
    queries
        .as_vectors()
        .ok_or_else(|| Error::invalid("queries are strings but the index holds vectors"))
}

/// The query methods of an index type wrapping a `schedule::Searcher`.
macro_rules! index_api {
    ($t:ident) => {
        impl $t<'_> {
            /// Number of indexed items.
            pub fn len(&self) -> usize {
                self.0.len()
            }

            pub fn is_empty(&self) -> bool {
                self.0.len() == 0
            }

            pub fn metric(&self) -> &voisin::Metric {
                self.0.metric()
            }

            /// Every indexed item within `radius` of each query, rows sorted by
            /// (distance, index).
            pub fn range(
                &self,
                queries: &voisin::VectorSet,
                radius: f64,
            ) -> voisin::Result<voisin::RangeResult> {
                self.0.range(queries, radius)
            }

            /// The k nearest indexed items of each query (k capped at the number of items),
            /// ties by the smaller index.
            pub fn knn(
                &self,
                queries: &voisin::VectorSet,
                k: usize,
            ) -> voisin::Result<voisin::KnnResult> {
                self.0.knn(queries, k)
            }
        }
    };
}
use index_api;
