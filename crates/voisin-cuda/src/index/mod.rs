//! Metric indexes searched on the GPU (SPEC §3; seed 003 ch. 4): a device copy of an index that
//! `voisin-index` built on the CPU, answering exact range and k-NN queries with one block per
//! query.
//!
//! - [`GpuLc`]: the List of Clusters over vectors.
//! - [`GpuSss`]: the SSS pivot table over vectors.
//! - `schedule`: what they share — batches, slot capacities, rows that outgrow their slots,
//!   increasing-radius k-NN, sorting and packing the answers.
//!
//! Metrics: euclidean, cityblock and chebyshev (true metrics whose exact keys use only
//! correctly rounded operations). Kernels: `kernels/lc_search.cu`, `kernels/sss_search.cu`.
//! Every key is computed on the device bit-identical to `voisin::metric::exact::vector_key` and
//! every pruning test is the CPU index's test on those values, so answers equal
//! `voisin::reference`'s (same keys, rows sorted by (distance, index)). This module does not
//! change the indexes (it reads `voisin-index`'s public parts) and does not touch the
//! brute-force engine's steps.

mod lc;
mod schedule;
mod sss;

pub use lc::GpuLc;
pub use sss::GpuSss;

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
