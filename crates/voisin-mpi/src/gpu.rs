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
//! Checkpointed (`--checkpoint`): the single-process GPU build's schedule
//! ([`voisin_cuda::pass_steps`]) over ranks. Rank 0 opens the checkpoint (the core's format,
//! 512-row blocks in passes of whole tiles, as `voisin graph --device cuda --checkpoint`
//! writes it, so either resumes the other) and tells every rank which passes are done; then
//! for each share of the schedule every rank computes its cyclic part of the share's tile
//! pairs, rank 0 merges the parts into its running lists and, when the share finishes a pass,
//! proves that pass's rows on its GPU ([`CudaEngine::graph_rows`]) and saves them. Each pair is
//! measured once, as without checkpoints.
//!
//! Which GPU: rank r of a node takes GPU r mod (GPUs of the node), r the node-local rank that
//! the launcher names (Open MPI: `OMPI_COMM_WORLD_LOCAL_RANK`; MPICH/Intel: `MPI_LOCALRANKID`;
//! Slurm: `SLURM_LOCALID`), or the world rank when none does.

use voisin::cpu::checkpoint::{Checkpoint, CheckpointOptions, Job};
use voisin::cpu::{PassRows, PassStore};
use voisin::{Dataset, Error, KnnResult, Metric, Result};
use voisin_cuda::{
    cyclic_share, pass_alignment, pass_steps, pass_tile_edge, CudaEngine, PartialGraph,
};

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

/// The CUDA engine of rank `world_rank` with the options of `config` (from the engine
/// factory): GPU (local rank mod GPUs of the node).
pub fn open(world_rank: usize, config: &voisin_engines::EngineConfig) -> Result<CudaEngine> {
    let count = voisin_cuda::device_count();
    if count == 0 {
        return Err(Error::device(
            "cuda: no GPU found (is the driver installed and a GPU visible to this rank?)",
        ));
    }
    voisin_engines::cuda_on(local_rank(world_rank) % count, config)
}

/// The whole k-NN graph over `comm`'s ranks, one GPU each; the result on rank 0, `None`
/// elsewhere. Every rank must call it with the same arguments. With `checkpoint`, finished
/// passes are kept there and a killed build resumes (see the module docs).
pub fn graph(
    comm: &dyn Comm,
    engine: &CudaEngine,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    checkpoint: Option<&CheckpointOptions>,
) -> std::result::Result<Option<KnnResult>, Failed> {
    let (rank, size, n) = (comm.rank(), comm.size(), data.len());
    let edge = agree(comm, engine.graph_tile_edge(n, k))?;
    // One triangle for every rank: the smallest edge, as the minimum of u32 values.
    let edge = (u32::MAX - comm.all_max(u32::MAX - edge.clamp(1, 1 << 30) as u32)) as usize;
    if let Some(opts) = checkpoint {
        return checkpointed(comm, engine, data, (k, metric), edge, opts);
    }
    let nt = n.div_ceil(edge);
    let share = my_share(
        engine,
        data,
        (k, metric),
        edge,
        &cyclic_share(nt, size, rank),
    );
    let share = agree(comm, share)?;
    let finished = match comm.gather(share) {
        Some(words) => merged(&words)
            .and_then(|part| engine.graph_finish(data, metric, part))
            .map(Some),
        None => Ok(None),
    };
    agree(comm, finished)
}

/// This rank's part of a share: the tile pairs of edge `edge` that `owns` accepts, packed.
fn my_share(
    engine: &CudaEngine,
    data: &Dataset,
    (k, metric): (usize, &Metric),
    edge: usize,
    owns: &(dyn Fn(usize, usize) -> bool + Sync),
) -> Result<Vec<u32>> {
    let bytes = engine.graph_tiles(data, k, metric, edge, owns)?.to_bytes();
    // The frame's length word, and MPI's int counts, bound one share.
    if bytes.len() >= (u32::MAX as usize) {
        return Err(Error::device(format!(
            "graph share of {} bytes is too large to send; use more ranks or --device cpu",
            bytes.len()
        )));
    }
    Ok(shares::pack(&bytes))
}

/// Rank 0: the gathered parts of a share, merged.
fn merged(words: &[u32]) -> Result<PartialGraph> {
    let parts = shares::unpack(words)?
        .iter()
        .map(|b| PartialGraph::from_bytes(b))
        .collect::<Result<Vec<_>>>()?;
    PartialGraph::merge(parts)
}

/// What rank 0 holds through a checkpointed build.
struct Root {
    cp: Checkpoint,
    /// Every row: loaded from finished passes, or computed in this run.
    rows: PassRows,
    /// The merged shares so far.
    running: Option<PartialGraph>,
}

/// The checkpointed build (module docs); `edge` is the tile edge every rank's GPU takes.
fn checkpointed(
    comm: &dyn Comm,
    engine: &CudaEngine,
    data: &Dataset,
    (k, metric): (usize, &Metric),
    edge: usize,
    opts: &CheckpointOptions,
) -> std::result::Result<Option<KnnResult>, Failed> {
    let (rank, size, n) = (comm.rank(), comm.size(), data.len());
    let kk = k.min(n.saturating_sub(1));
    // Rank 0 opens (or checks) the checkpoint and reads the finished passes; every rank then
    // learns the pass size and which passes are done.
    let opened = if rank == 0 {
        open_root(data, (kk, metric), edge, opts).map(|(root, words)| (Some(root), words))
    } else {
        Ok((None, Vec::new()))
    };
    let (mut root, words) = agree(comm, opened)?;
    let to_all = if rank == 0 {
        vec![words; size]
    } else {
        vec![Vec::new(); size]
    };
    let got = comm.all_to_all(to_all);
    let rpp = got[0] as usize;
    let done: Vec<bool> = got[1..].iter().map(|&d| d == 1).collect();
    if kk > 0 {
        let t = pass_tile_edge(edge, rpp, done.len());
        let dealt = cyclic_share(n.div_ceil(t), size, rank);
        for step in pass_steps(&done) {
            let owns =
                |i: usize, j: usize| step.takes(&done, i * t / rpp, j * t / rpp) && dealt(i, j);
            let share = agree(comm, my_share(engine, data, (kk, metric), t, &owns))?;
            let absorbed = match (&mut root, comm.gather(share)) {
                (Some(root), Some(words)) => {
                    root.absorb(engine, (data, metric), &words, step.proves, rpp)
                }
                _ => Ok(()),
            };
            agree(comm, absorbed)?;
        }
    }
    Ok(root.map(|r| KnnResult::from_rows(r.rows, kk, metric)))
}

/// Rank 0's start: the checkpoint opened for this job, the finished passes' rows, and the words
/// every rank needs (rows per pass, then one done flag per pass).
fn open_root(
    data: &Dataset,
    (kk, metric): (usize, &Metric),
    edge: usize,
    opts: &CheckpointOptions,
) -> Result<(Root, Vec<u32>)> {
    let n = data.len();
    let job = Job::describe(data, metric, kk);
    let cp = Checkpoint::open_aligned(opts, &job, kk, n, pass_alignment(edge))?;
    let loaded = cp.load_all(n)?;
    let mut words = vec![cp.layout().rows_per_pass() as u32];
    words.extend(loaded.iter().map(|l| u32::from(l.is_some())));
    let rows = loaded
        .into_iter()
        .zip(cp.passes(n))
        .flat_map(|(got, r)| got.unwrap_or_else(|| vec![Vec::new(); r.len()]))
        .collect();
    let root = Root {
        cp,
        rows,
        running: None,
    };
    Ok((root, words))
}

impl Root {
    /// Merges a gathered share; when it finishes pass `proves`, proves and saves that pass.
    fn absorb(
        &mut self,
        engine: &CudaEngine,
        (data, metric): (&Dataset, &Metric),
        words: &[u32],
        proves: Option<usize>,
        rpp: usize,
    ) -> Result<()> {
        let share = merged(words)?;
        let all = PartialGraph::merge(self.running.take().into_iter().chain([share]).collect())?;
        if let Some(p) = proves {
            let range = p * rpp..((p + 1) * rpp).min(all.n);
            let rows = engine.graph_rows(data, metric, &all, range.clone())?;
            self.cp.save(p, (range.start, range.end), &rows)?;
            self.rows.splice(range, rows);
        }
        self.running = Some(all);
        Ok(())
    }
}
