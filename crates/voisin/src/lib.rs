//! voisin: exact nearest-neighbour search, k-NN graphs and range search over vectors and
//! strings.
//!
//! This crate holds everything that does not depend on a device: data sets ([`data`]), metrics
//! ([`metric`]), k-selection ([`select`]), the engine seam ([`engine::Engine`]), the k-NN
//! graph's engine-agnostic parts ([`mod@graph`]: schedule, exact lists and their merge,
//! checkpoints, the [`graph::TileGraph`] seam) and the CPU engine ([`cpu::CpuEngine`]), what a
//! result becomes before it is handed out ([`shape`]: include-self rows, pairs, exact f64
//! distances), every item tied at the k-th distance over any engine ([`ties`]), plus an f64
//! brute-force [`mod@reference`] for tests. GPU and distributed engines live in their own
//! crates and implement the same traits.
//!
//! ```
//! use voisin::{cpu::CpuEngine, data::VectorSet, engine::Engine, metric::Metric};
//! let base = VectorSet::from_f32(4, 2, vec![0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 3.0]).unwrap();
//! let query = VectorSet::from_f32(1, 2, vec![0.9, 0.1]).unwrap();
//! let engine = CpuEngine::default();
//! let res = engine.knn(&base.into(), &query.into(), 2, &Metric::Euclidean).unwrap();
//! assert_eq!(res.indices, vec![1, 0]);
//! ```
#![warn(missing_docs)]

pub mod commit;
pub mod cpu;
pub mod data;
pub mod engine;
pub mod error;
pub mod graph;
pub mod metric;
pub mod reference;
pub mod select;
pub mod shape;
pub mod ties;

pub use data::{Dataset, StringSet, VectorSet};
pub use engine::{Engine, KnnResult, RangeResult, Stats};
pub use error::{Error, Result};
pub use metric::Metric;
