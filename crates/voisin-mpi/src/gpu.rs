//! GPU ranks (feature `cuda`): each rank drives one GPU with voisin-cuda's engine.
//!
//! The graph is the gathered-shares driver ([`crate::gathered`]) over each GPU's side of the
//! core's [`voisin::graph::TileGraph`] seam ([`voisin_cuda::GpuBuild`]): every rank uploads the
//! set once, rank 0's GPU chooses the build's route (under `--precision auto` its pilot picks
//! TF32, fp16x3 or fp32 tiles, as one GPU's build does) and every rank follows it; every rank
//! then computes a cyclic share of the tile pairs, and rank 0 merges the shares and proves,
//! widens and re-ranks on its GPU (per pass of a checkpointed build). k-NN search needs nothing
//! of its own: [`crate::knn`] runs any engine on a shard.
//!
//! Which GPU: rank r of a node takes GPU r mod (GPUs of the node), r the node-local rank that
//! the launcher names (Open MPI: `OMPI_COMM_WORLD_LOCAL_RANK`; MPICH/Intel: `MPI_LOCALRANKID`;
//! Slurm: `SLURM_LOCALID`), or the world rank when none does.

use std::sync::Mutex;

use voisin::graph::checkpoint::CheckpointOptions;
use voisin::{Dataset, Error, KnnResult, Metric, Result, Stats};
use voisin_cuda::{CudaEngine, GpuBuild};

use crate::comm::{agree, Comm, Failed};

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
/// ([`crate::gathered::graph`]) over each rank's build on its GPU, all under rank 0's route.
/// The result on rank 0, `None` elsewhere; every rank must call it with the same arguments.
pub fn graph(
    comm: &dyn Comm,
    engine: &CudaEngine,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    checkpoint: Option<&CheckpointOptions>,
) -> std::result::Result<Option<KnnResult>, Failed> {
    let stats = Mutex::new(Stats::default());
    let mut build = agree(comm, engine.graph_build(data, k, metric, &stats))?;
    follow_rank_zero(comm, &mut build)?;
    crate::gathered::graph(comm, &build, data, k, metric, checkpoint)
}

/// Rank 0's GPU chooses the build's route ([`GpuBuild::route`]) and sends it to every rank,
/// which runs its build under it: the shares of all ranks merge, and rank 0 proves them, under
/// one plan.
fn follow_rank_zero(comm: &dyn Comm, build: &mut GpuBuild<'_>) -> std::result::Result<(), Failed> {
    let (rank, size) = (comm.rank(), comm.size());
    let chosen = match rank {
        0 => build.route(),
        _ => Ok(Vec::new()),
    };
    let words = agree(comm, chosen)?;
    let to_all = match rank {
        0 => vec![words; size],
        _ => vec![Vec::new(); size],
    };
    let route = comm.all_to_all(to_all);
    agree(comm, build.follow(&route))
}
