//! Metric indexes searched on the GPU (SPEC §3; seed 003 ch. 4): a device copy of an index that
//! `voisin-index` built on the CPU, answering exact range and k-NN queries with one block per
//! query.
//!
//! - [`GpuLc`]: the List of Clusters over vectors (euclidean, cityblock, chebyshev).
//!
//! Owns uploading an index's structure and the query schedule (batches, slot capacities, rows
//! that outgrow their slots, sorting and packing the answers); the kernels are
//! `kernels/lc_search.cu`. Every key is computed on the device bit-identical to
//! `voisin::metric::exact::vector_key` and every pruning test is the CPU index's test on those
//! values, so answers equal `voisin::reference`'s (same keys, rows sorted by (distance, index)).
//! This module does not change the index (it reads `voisin-index`'s public parts) and does not
//! touch the brute-force engine's steps.

mod lc;

pub use lc::GpuLc;
