//! voisin over MPI ranks: `graph` and `knn` spread over the processes of an MPI job, each rank
//! answering its share with the core crate's exact CPU engine on its own cores.
//!
//! Data: every rank reads the input itself, from the same path (memory-mapped by voisin-io), so
//! no vectors travel between ranks. On one host that is free; on a cluster it is the usual
//! pattern with a shared filesystem (NFS, Lustre, GPFS), where each rank touches only the pages
//! of the blocks it works on. Only candidate lists (indices) and final rows move.
//!
//! Work: [`graph`] splits the items into row blocks and deals the upper-triangle tiles (I ≤ J)
//! over ranks; each tile yields row candidates (rows of I among J) and column candidates (rows
//! of J among I), which are sent to the rank owning that row block, merged there, and gathered
//! by rank 0. [`knn`] shards the base set over ranks and merges every rank's k-lists at rank 0.
//!
//! Exactness: every k-list a rank produces is the exact top-k of its share (the CPU engine is
//! exact, and block-local indices map to global ones in the same order, so its index tie-break
//! is the global one). Merging re-keys each candidate with [`voisin::metric::exact::item_key`],
//! the f64 key the reference uses, and orders by (key, index): results are identical to
//! `voisin graph`/`voisin knn` and to [`voisin::reference`], whatever the number of ranks.
//!
//! The phases are plain functions over byte-free `u32` buffers so the algorithm is tested
//! in-process with simulated ranks; [`comm`] moves the buffers (MPI with the `mpi` feature, a
//! single process without it). This crate owns distribution only: distances, selection and file
//! formats come from `voisin` and `voisin-io`.

pub mod comm;
pub mod graph;
pub mod knn;
pub mod rekey;
pub mod slice;
