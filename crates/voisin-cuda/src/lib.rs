//! The CUDA engine: exact k-NN search, k-NN graphs and range search on one NVIDIA GPU.
//!
//! Distances come from cuBLAS sgemm tiles (euclidean, sqeuclidean, cosine, correlation,
//! inner_product; strict fp32, or TF32 tensor cores under `Precision::Tf32`) or a SIMT tile
//! kernel (cityblock, chebyshev, minkowski); selection and range filtering run in kernels
//! compiled ahead of time by the build (or by NVRTC at run time, cached on disk); each query's candidates are proved with an error bound, widened where
//! the proof fails, and re-ranked on exact f64 keys (k-NN over sorted lists: on the device, the
//! rest on the host), so results equal the CPU engine's.
//!
//! Layout, in layers whose arrows run one way (each reads only the ones before it):
//!
//! - `options`: [`CudaOptions`] and its knobs ([`Select`], [`Precision`], [`Fusion`]); a leaf.
//! - `runtime/`: the device as a resource: `context` (loading CUDA, the GPU's context, streams,
//!   cuBLAS, uploads and downloads, the typed out-of-memory error), `staging` (the one pinned
//!   staging), `kernels` (the one registry; `modules`, `nvrtc`, `cache`: its images),
//!   `libs`/`loaded` (finding the CUDA libraries; [`cuda_info`]),
//!   `abi` (the one host↔kernel table of codes and sizes), [`probe`] (phase timings).
//! - `numerics/`: `plan`, the per-metric plan that owns every device-facing fact about a metric
//!   (key mode, tile kind, row transforms, the error bound and its parts).
//! - `ops/`: launchers over the GPU and the plan: `device_set` (upload and row preparation),
//!   `tile` (one distance tile), [`select`] (selection variants), `fused`, `exact` (exact keys,
//!   the device finish), `range` (the range filter).
//! - `search/`: searches in a context (`Ctx`: GPU, plan, options, counters): `knn`, `graph`,
//!   `stream` (bases larger than the GPU), `shard` (merging shards' lists), `range` (the range
//!   tail) and `finish`, the one prove-widen-re-rank over a candidate source.
//! - `engine/`: [`CudaEngine`] and the `Engine` seam; `passes` (checkpointed graphs, graphs
//!   on several GPUs).
//! - `multi`: [`MultiGpu`], several GPUs composed from engines.
//! - `strings` (levenshtein) and [`index`] (the metric indexes on the GPU behind the index face:
//!   [`index::GpuIndexes`]).
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
//! [`voisin::Engine::graph_checkpointed`]) and resume after a crash.

mod engine;
pub mod index;
mod multi;
mod numerics;
mod ops;
mod options;
mod runtime;
mod search;
mod strings;

pub use engine::{supports, CudaEngine, CudaPrepared};
pub use multi::MultiGpu;
pub use numerics::plan::tiles_hold;
pub use ops::select;
pub use options::{CudaOptions, Fusion, Precision, Select};
pub use runtime::context::{device_count, gpu_available};
pub use runtime::probe;
pub use runtime::{cuda_info, set_python_path, CudaInfo, DeviceInfo, LibraryInfo};
pub use search::graph::PartialGraph;
// The graph schedule lives in the core; re-exported at the paths callers used before.
pub use voisin::graph::{
    cyclic_share, pass_alignment, pass_steps, pass_tile_edge, PassStep, TileOwner,
};
