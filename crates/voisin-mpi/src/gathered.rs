//! The k-NN graph over ranks whose shares are gathered at rank 0, generic over the engine
//! seam [`TileGraph`]: every rank computes a cyclic share ([`voisin::graph::cyclic_share`]) of
//! the tile pairs (I, J), I ≤ J, of one tile edge (the smallest any rank's engine takes), each
//! pair measured once over all ranks; the shares go to rank 0 as bytes ([`crate::shares`]),
//! which merges them ([`Share::merge`]) and finishes the rows with its engine
//! ([`TileGraph::finish_all`]). The GPU ranks run it with voisin-cuda's engine (approximate
//! lists, proved and re-ranked on rank 0's GPU); the CPU engine implements the same seam
//! (exact lists), which is how this driver is tested without a GPU. Exact f64 keys decide, so
//! the rows are those of every other engine.
//!
//! Checkpointed (`--checkpoint`): the single-process GPU build's schedule
//! ([`voisin::graph::pass_steps`]) over ranks. Rank 0 opens the checkpoint (the core's format,
//! 512-row blocks in passes of whole tiles, as `voisin graph --device cuda --checkpoint`
//! writes it, so either resumes the other) and tells every rank which passes are done; then
//! for each share of the schedule every rank computes its cyclic part of the share's tile
//! pairs, rank 0 merges the parts into its running lists and, when the share finishes a pass,
//! finishes that pass's rows ([`TileGraph::finish`]) and saves them. Each pair is measured
//! once, as without checkpoints.
//!
//! The CPU ranks' own driver ([`crate::graph`]) sends exact lists to the owners of row blocks
//! instead, with a checkpoint layout of its own; its wire and checkpoint formats are kept.

use voisin::graph::checkpoint::{Checkpoint, CheckpointOptions, Job};
use voisin::graph::{
    cyclic_share, pass_alignment, pass_steps, pass_tile_edge, PassRows, PassStore, Share,
    TileGraph, TileOwner,
};
use voisin::{Dataset, Error, KnnResult, Metric, Result};

use crate::comm::{agree, Comm, Failed};
use crate::shares;

/// The whole k-NN graph over `comm`'s ranks, one engine each; the result on rank 0, `None`
/// elsewhere. Every rank must call it with the same arguments. With `checkpoint`, finished
/// passes are kept there and a killed build resumes (see the module docs).
pub fn graph<E: TileGraph>(
    comm: &dyn Comm,
    engine: &E,
    data: &Dataset,
    k: usize,
    metric: &Metric,
    checkpoint: Option<&CheckpointOptions>,
) -> std::result::Result<Option<KnnResult>, Failed> {
    let (rank, size, n) = (comm.rank(), comm.size(), data.len());
    let edge = agree(comm, engine.tile_edge(data, k, metric))?;
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
        Some(words) => merged::<E::Share>(&words)
            .and_then(|part| engine.finish_all(data, metric, part))
            .map(Some),
        None => Ok(None),
    };
    agree(comm, finished)
}

/// This rank's part of a share: the tile pairs of edge `edge` that `owns` accepts, packed.
fn my_share<E: TileGraph>(
    engine: &E,
    data: &Dataset,
    (k, metric): (usize, &Metric),
    edge: usize,
    owns: &TileOwner<'_>,
) -> Result<Vec<u32>> {
    let bytes = engine.share(data, k, metric, edge, owns)?.to_bytes();
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
fn merged<S: Share>(words: &[u32]) -> Result<S> {
    let parts = shares::unpack(words)?
        .iter()
        .map(|b| S::from_bytes(b))
        .collect::<Result<Vec<_>>>()?;
    S::merge(parts)
}

/// What rank 0 holds through a checkpointed build.
struct Root<S> {
    cp: Checkpoint,
    /// Every row: loaded from finished passes, or computed in this run.
    rows: PassRows,
    /// The merged shares so far.
    running: Option<S>,
}

/// The checkpointed build (module docs); `edge` is the tile edge every rank's GPU takes.
fn checkpointed<E: TileGraph>(
    comm: &dyn Comm,
    engine: &E,
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
        open_root::<E::Share>(data, (kk, metric), edge, opts)
            .map(|(root, words)| (Some(root), words))
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
fn open_root<S>(
    data: &Dataset,
    (kk, metric): (usize, &Metric),
    edge: usize,
    opts: &CheckpointOptions,
) -> Result<(Root<S>, Vec<u32>)> {
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

impl<S: Share> Root<S> {
    /// Merges a gathered share; when it finishes pass `proves`, finishes and saves that pass.
    fn absorb<E: TileGraph<Share = S>>(
        &mut self,
        engine: &E,
        (data, metric): (&Dataset, &Metric),
        words: &[u32],
        proves: Option<usize>,
        rpp: usize,
    ) -> Result<()> {
        let share = merged::<S>(words)?;
        let all = S::merge(self.running.take().into_iter().chain([share]).collect())?;
        if let Some(p) = proves {
            let range = p * rpp..((p + 1) * rpp).min(data.len());
            let rows = engine.finish(data, metric, &all, range.clone())?;
            self.cp.save(p, (range.start, range.end), &rows)?;
            self.rows.splice(range, rows);
        }
        self.running = Some(all);
        Ok(())
    }
}
