//! The k-NN graph's engine-agnostic parts, shared by every driver (the CPU engine, the CUDA
//! engines on one GPU or several, MPI ranks):
//!
//! - [`schedule`]: row blocks, shards, the triangle of tile pairs, dealing to N parts, and the
//!   shares of a build in passes.
//! - [`lists`]: exact neighbour lists, their merge, pass stores, and the [`Share`] a backend's
//!   part of a build merges and travels as.
//! - [`backend`]: the one [`TileGraph`] seam between a driver and the engine that measures
//!   tiles (for a [`GraphJob`]), and [`CpuShare`], the exact lists a CPU share merges as (the
//!   CPU engine implements the seam in `cpu/`; nothing here imports an engine).
//! - [`checkpoint`]: finished passes kept on disk (the `VOISINCP` format), and the open rows'
//!   running lists beside them (`VOISINPL`), for resumable builds.
//! - [`driver`]: the one in-process driver of a build over N [`TileGraph`] backends (the CPU
//!   engine's threads, one GPU or several): passes, catch-up, dealing, merging, finishing,
//!   checkpoints, cancellation.
//!
//! The engines own how a tile is measured; this module owns what a build is made of, so that
//! CPU, GPU and distributed builds deal work and keep checkpoints the same way.

pub mod backend;
pub mod checkpoint;
pub mod driver;
pub mod lists;
pub mod schedule;

pub use backend::{CpuShare, GraphJob, TileGraph};
pub use lists::{merge_lists, List, NoStore, PassRows, PassStore, RangeLists, Share, TileLists};
pub use schedule::{
    cyclic_share, deal, pass_alignment, pass_steps, pass_steps_after, pass_tile_edge, split,
    triangle, triangle_index, PassStep, TileOwner, BLOCK_ROWS,
};
