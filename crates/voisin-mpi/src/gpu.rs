//! GPU ranks (feature `cuda`): each rank drives one GPU with voisin-cuda's engine.
//!
//! The graph is the gathered-shares driver ([`crate::gathered`]) over the CUDA engine's side
//! of the core's [`voisin::graph::TileGraph`] seam: every rank computes a cyclic share of the
//! tile pairs with [`CudaEngine::graph_tiles`]; rank 0 merges the shares and proves, widens and
//! re-ranks on its GPU ([`CudaEngine::graph_finish`], or [`CudaEngine::graph_rows`] per pass of
//! a checkpointed build). k-NN search needs nothing of its own: [`crate::knn`] runs any engine
//! on a shard.
//!
//! Which GPU: rank r of a node takes GPU r mod (GPUs of the node), r the node-local rank that
//! the launcher names (Open MPI: `OMPI_COMM_WORLD_LOCAL_RANK`; MPICH/Intel: `MPI_LOCALRANKID`;
//! Slurm: `SLURM_LOCALID`), or the world rank when none does.

use voisin::graph::checkpoint::CheckpointOptions;
use voisin::{Dataset, Error, KnnResult, Metric, Result};
use voisin_cuda::CudaEngine;

use crate::comm::{Comm, Failed};

/// Variables in which launchers name a process's rank within its node.
const LOCAL_RANK_VARS: [&str; 3] = [
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
];

/// This process's rank within its node, or `world_rank` when the launcher does not say.
pub fn local_rank(world_rank: usize) -> usize {
    LOCAL_RANK_VARS
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
        .unwrap_or(world_rank)
}

/// The GPU of rank `world_rank`: local rank mod GPUs of the node; none found is a device error.
pub fn ordinal(world_rank: usize) -> Result<usize> {
    let count = voisin_cuda::device_count();
    if count == 0 {
        return Err(Error::device(
            "cuda: no GPU found (is the driver installed and a GPU visible to this rank?)",
        ));
    }
    Ok(local_rank(world_rank) % count)
}

/// The CUDA engine of rank `world_rank` with the options of `config` (from the engine
/// factory), on its GPU ([`ordinal`]).
pub fn open(world_rank: usize, config: &voisin_engines::EngineConfig) -> Result<CudaEngine> {
    voisin_engines::cuda_on(ordinal(world_rank)?, config)
}

/// The whole k-NN graph over `comm`'s ranks, one GPU each: the gathered-shares driver
/// ([`crate::gathered::graph`]) over voisin-cuda's engine. The result on rank 0, `None`
/// elsewhere; every rank must call it with the same arguments.
pub fn graph(
    comm: &dyn Comm,
    engine: &CudaEngine,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    checkpoint: Option<&CheckpointOptions>,
) -> std::result::Result<Option<KnnResult>, Failed> {
    crate::gathered::graph(comm, engine, data, k, metric, checkpoint)
}
