//! voisin over MPI ranks: `graph` and `knn` spread over the processes of an MPI job, each rank
//! answering its share with the core crate's exact CPU engine on its own cores, or (feature
//! `cuda`, `--device cuda`) with one GPU per rank (module `gpu`).
//!
//! Data: every rank reads the input itself, from the same path (memory-mapped by voisin-io), so
//! no vectors travel between ranks. On one host that is free; on a cluster it is the usual
//! pattern with a shared filesystem (NFS, Lustre, GPFS), where each rank touches only the pages
//! of the blocks it works on. Only candidate lists (indices) and final rows move.
//!
//! Work: both graph drivers measure tiles through the core's [`voisin::graph::TileGraph`] seam
//! and keep checkpoints through the core's pass bookkeeping
//! ([`voisin::graph::driver::Passes`]). [`graph`] (CPU ranks) splits the items into row blocks
//! and deals the upper-triangle tiles (I ≤ J) over ranks; each tile is computed once by the
//! CPU engine and yields the exact lists of the rows of I among J and of the rows of J among
//! I, which are sent to the rank owning that row block, merged there, optionally
//! checkpointed, and gathered by rank 0. GPU ranks use [`gathered`] instead: cyclic shares of
//! the triangle, merged and finished at rank 0 (the gather costs rank 0 memory for every
//! rank's share, which the owners' exchange does not: so the CPU ranks, which scale to
//! clusters, keep it). [`knn`] shards the base set over ranks and merges every rank's
//! k-lists at rank 0.
//!
//! Exactness: every k-list a rank produces is the exact top-k of its share, on the exact f64
//! keys the reference uses, ordered by (key, index); merging lists of disjoint shares keeps
//! that, so results are identical to `voisin graph`/`voisin knn` and to [`voisin::reference`],
//! whatever the number of ranks (for knn, shard-local indices map to global ones in order and
//! the merge re-keys each candidate with [`voisin::metric::exact::item_key`]).
//!
//! The phases exchange plain `u32` buffers through [`comm`]: MPI with the `mpi` feature, a
//! single process without it, or threads standing in for ranks, so whole runs (checkpoints
//! included) are tested in-process without MPI. This crate owns distribution only: distances, selection and file
//! formats come from `voisin` and `voisin-io`.

#![warn(missing_docs)]

pub mod comm;
pub mod gathered;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod graph;
pub mod knn;
pub mod rekey;
pub mod shares;
pub mod slice;
