//! GPU ranks (feature `cuda`): each rank drives one GPU with voisin-cuda's engine.
//!
//! The graph uses voisin-cuda's split of its own triangle schedule: every rank computes a
//! cyclic share of the tile pairs (I, J), I ≤ J, of one tile edge (the smallest any rank's GPU
//! takes) with [`CudaEngine::graph_tiles`], each pair measured once over all ranks; the shares
//! (approximate candidate lists with their proof contract) go to rank 0 ([`crate::shares`]),
//! which merges them ([`PartialGraph::merge`]) and proves, widens and re-ranks on its GPU
//! ([`CudaEngine::graph_finish`]). Exact f64 keys decide, so the rows are those of every other
//! engine. k-NN search needs nothing of its own: [`crate::knn`] runs any engine on a shard.
//!
//! Which GPU: rank r of a node takes GPU r mod (GPUs of the node), r the node-local rank that
//! the launcher names (Open MPI: `OMPI_COMM_WORLD_LOCAL_RANK`; MPICH/Intel: `MPI_LOCALRANKID`;
//! Slurm: `SLURM_LOCALID`), or the world rank when none does.

use voisin::{Dataset, Error, KnnResult, Metric, Result};
use voisin_cuda::{cyclic_share, CudaEngine, PartialGraph};

use crate::comm::{agree, Comm, Failed};
use crate::shares;

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

/// The CUDA engine of rank `world_rank`: GPU (local rank mod GPUs of the node).
pub fn open(world_rank: usize) -> Result<CudaEngine> {
    let count = voisin_cuda::device_count();
    if count == 0 {
        return Err(Error::device(
            "cuda: no GPU found (is the driver installed and a GPU visible to this rank?)",
        ));
    }
    CudaEngine::new(local_rank(world_rank) % count)
}

/// The whole k-NN graph over `comm`'s ranks, one GPU each; the result on rank 0, `None`
/// elsewhere. Every rank must call it with the same arguments.
pub fn graph(
    comm: &dyn Comm,
    engine: &CudaEngine,
    data: &Dataset,
    k: usize,
    metric: &Metric,
) -> std::result::Result<Option<KnnResult>, Failed> {
    let (rank, size, n) = (comm.rank(), comm.size(), data.len());
    let edge = agree(comm, engine.graph_tile_edge(n, k))?;
    // One triangle for every rank: the smallest edge, as the minimum of u32 values.
    let edge = (u32::MAX - comm.all_max(u32::MAX - edge.clamp(1, 1 << 30) as u32)) as usize;
    let nt = n.div_ceil(edge);
    let share = engine
        .graph_tiles(data, k, metric, edge, &cyclic_share(nt, size, rank))
        .and_then(|s| {
            let bytes = s.to_bytes();
            // The frame's length word, and MPI's int counts, bound one share.
            if bytes.len() >= (u32::MAX as usize) {
                return Err(Error::device(format!(
                    "graph share of {} bytes is too large to send; use more ranks or --device cpu",
                    bytes.len()
                )));
            }
            Ok(shares::pack(&bytes))
        });
    let share = agree(comm, share)?;
    let finished = match comm.gather(share) {
        Some(words) => finish(engine, data, metric, &words).map(Some),
        None => Ok(None),
    };
    agree(comm, finished)
}

/// Rank 0: the gathered shares merged and finished on its GPU.
fn finish(
    engine: &CudaEngine,
    data: &Dataset,
    metric: &Metric,
    words: &[u32],
) -> Result<KnnResult> {
    let parts = shares::unpack(words)?
        .iter()
        .map(|b| PartialGraph::from_bytes(b))
        .collect::<Result<Vec<_>>>()?;
    engine.graph_finish(data, metric, PartialGraph::merge(parts)?)
}
