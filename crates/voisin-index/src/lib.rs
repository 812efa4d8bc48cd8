//! Metric-space indexes for voisin ([Barrientos13], [SharmaJoshi]; docs/references.md): List of Clusters, SSS
//! pivots and a cover tree, answering exact range and k-NN queries under any true metric.
//!
//! - [`space`]: the [`Space`] trait (items, exact keys, distances) and its adapters for vector
//!   sets, string sets and user distances.
//! - [`lc`], [`sss`], [`cover`]: the three metric-space structures; each only walks itself for
//!   one query. [`kd`]: a k-d tree for low-dimensional vectors under a coordinate-wise metric.
//! - [`search`]: probes that count distance evaluations, range and k-NN collectors, the parallel
//!   loop over queries and the result types of the core crate.
//! - [`pairs`]: the [`PairOracle`] seam through which constructions ask for batches of
//!   distances (the GPU builds answer them on the device).
//! - [`kind`]: which structure ([`Kind`]) with which parameters ([`Params`]).
//! - [`dataset`]: [`Index`], any structure over one space, and [`DatasetIndex`], one over
//!   vectors or strings: what index files hold.
//! - [`face`]: the one face every device's indexes share, [`IndexEngine`] ([`CpuIndexes`] here;
//!   the GPUs' in voisin-cuda), as FAISS's indexes share `Index`.
//! - [`file`]: the self-contained index file (items, structure, checksum).
//! - [`auto`]: the one chooser: brute force or which index for a run (`--engine`), from an
//!   intrinsic-dimension estimate, and whether a GPU build pays; every cost constant of those
//!   choices lives there.
//! - [`pilot`]: whether a built index prunes.
//!
//! Answers equal the brute-force reference (`voisin::reference`) exactly: the same keys, rows
//! sorted by (distance, index). This crate computes distances only through the core crate's
//! public metric functions; its own index engine runs on the CPU's threads, and it knows no other
//! device.
//!
//! ```
//! use voisin::{Metric, StringSet};
//! use voisin_index::{space::StringSpace, Index, Kind, Params};
//! let words = StringSet::from_strings(["cat", "cart", "dog", "cot"]).unwrap();
//! let index = Index::build(StringSpace::new(words, Metric::Levenshtein).unwrap(), Kind::Lc, &Params::default());
//! let q: Vec<char> = "cat".chars().collect();
//! let res = voisin_index::search::range(&index, &[q.as_slice()], 1.0).unwrap();
//! assert_eq!(res.indices, vec![0, 1, 3]);
//! ```
#![warn(missing_docs)]

pub mod auto;
pub mod cover;
pub mod dataset;
pub mod face;
pub mod file;
pub mod kd;
pub mod kind;
pub mod lc;
pub mod pairs;
pub mod pilot;
pub mod search;
pub mod space;
pub mod sss;

pub use cover::{CoverTree, CpuNets, NetBatch, NetOracle, Nets};
pub use dataset::{DatasetIndex, Index};
pub use face::{CpuIndexes, IndexEngine, IndexOp, Searched, StreamStats};
pub use kd::KdTree;
pub use kind::{check_kind, Kind, Params};
pub use lc::ListOfClusters;
pub use pairs::{CpuOracle, PairBatch, PairOracle};
pub use search::MetricIndex;
pub use space::{Space, StringSpace, UserSpace, VectorSpace};
pub use sss::Sss;
