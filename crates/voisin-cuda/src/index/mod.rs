//! Metric indexes searched on the GPU (docs/design/gpu-metric-indexes.md; [Barrientos13] ch. 4): a device copy of an index that
//! `voisin-index` built on the CPU, answering exact range and k-NN queries with one block per
//! query.
//!
//! - [`GpuLc`]: the List of Clusters over vectors.
//! - [`GpuSss`]: the SSS pivot table over vectors.
//! - [`range`], [`knn`]: a `voisin_index::DatasetIndex` (what the CLI loads) answered on the
//!   GPU.
//! - [`build`]: List of Clusters and SSS indexes built on the GPU (kernels/index/lc_build.cu).
//! - `schedule`: what they share — batches, slot capacities, rows that outgrow their slots,
//!   increasing-radius k-NN, sorting and packing the answers.
//!
//! Metrics: euclidean, cityblock and chebyshev (true metrics whose exact keys use only
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

pub use build::{build, build_lc, build_sss, build_with_progress, builds, MAX_CLUSTER};
pub use cover_build::build_cover;
pub use lc::GpuLc;
pub use lsc::{GpuLsc, StreamStats};
pub use spread::GpuLcSpread;
pub use sss::GpuSss;

use voisin::{Dataset, Error, KnnResult, RangeResult, Result, VectorSet};
use voisin_index::{DatasetIndex, Index};

use crate::engine::CudaEngine;

/// Every indexed item within `radius` of each query, answered on the GPU by a device copy of
/// `index` (what `voisin index query --device cuda` needs): List of Clusters or SSS over vectors
/// under euclidean, cityblock or chebyshev; anything else is a clear error.
pub fn range(
    engine: &CudaEngine,
    index: &DatasetIndex,
    queries: &Dataset,
    radius: f64,
) -> Result<RangeResult> {
    range_on(std::slice::from_ref(engine), index, queries, radius).map(|(r, _)| r)
}

/// The k nearest indexed items of each query, on the GPU (see [`range`]).
pub fn knn(
    engine: &CudaEngine,
    index: &DatasetIndex,
    queries: &Dataset,
    k: usize,
) -> Result<KnnResult> {
    knn_on(std::slice::from_ref(engine), index, queries, k).map(|(r, _)| r)
}

/// [`range`] on the GPUs of `engines` (`voisin index query --gpus`), and what streaming did. A
/// List of Clusters is resident on one GPU when it fits half of the free memory the engine
/// leaves it (`CudaOptions::device_memory` caps that); else, or over several engines, it is
/// spread: one run of clusters per engine (1-Stage), each streamed in superclusters when it
/// does not fit ([`GpuLcSpread`]). SSS runs on the first engine.
pub fn range_on(
    engines: &[CudaEngine],
    index: &DatasetIndex,
    queries: &Dataset,
    radius: f64,
) -> Result<(RangeResult, StreamStats)> {
    let q = vector_queries(queries)?;
    match device_copy(engines, index)? {
        Copy::Lc(g) => g.range(q, radius).map(resident),
        Copy::Sss(g) => g.range(q, radius).map(resident),
        Copy::Spread(g) => g.range(q, radius),
    }
}

/// [`knn`] on the GPUs of `engines` (see [`range_on`]).
pub fn knn_on(
    engines: &[CudaEngine],
    index: &DatasetIndex,
    queries: &Dataset,
    k: usize,
) -> Result<(KnnResult, StreamStats)> {
    let q = vector_queries(queries)?;
    match device_copy(engines, index)? {
        Copy::Lc(g) => g.knn(q, k).map(resident),
        Copy::Sss(g) => g.knn(q, k).map(resident),
        Copy::Spread(g) => g.knn(q, k),
    }
}

/// Device bytes of a copy of the whole List of Clusters `lc` (what decides whether it stays
/// resident or is streamed in superclusters).
pub fn lc_device_bytes(lc: &voisin_index::ListOfClusters<voisin_index::VectorSpace>) -> usize {
    spread::run_bytes(lc, 0..lc.clusters().len())
}

/// A result of an index resident on one GPU: nothing streamed.
fn resident<T>(r: T) -> (T, StreamStats) {
    (r, StreamStats::default())
}

/// Whether the GPU searches `index` for `queries` (what `voisin index query --device auto`
/// asks before it chooses the GPU): List of Clusters or SSS over vectors under euclidean,
/// cityblock or chebyshev, within the kernels' limits, and vector queries. What it supports
/// goes to the GPU, whose errors are then real; the rest to the CPU.
pub fn supports(index: &DatasetIndex, queries: &Dataset) -> bool {
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
