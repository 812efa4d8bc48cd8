//! The k-NN graph over ranks whose shares are gathered at rank 0, generic over the engine
//! seam [`TileGraph`]: every rank computes a cyclic share ([`voisin::graph::cyclic_share`]) of
//! the tile pairs (I, J), I ≤ J, of one tile edge (the smallest any rank's engine takes), each
//! pair measured once over all ranks; the shares go to rank 0 as bytes ([`crate::shares`]),
//! which merges them ([`Share::merge`]) and finishes the rows with its engine
//! ([`TileGraph::finish_all`]). The GPU ranks run it over each rank's build on its GPU
//! (voisin-cuda's `GpuBuild`, all under rank 0's route: approximate lists, proved and re-ranked
//! on rank 0's GPU, `gpu.rs`); the CPU engine implements the same seam
//! (exact lists), which is how this driver is tested without a GPU. Exact f64 keys decide, so
//! the rows are those of every other engine.
//!
//! Checkpointed (`--checkpoint`): the single-process build's schedule
//! ([`voisin::graph::pass_steps_after`]) over ranks. Rank 0 opens the checkpoint through the
//! core driver's bookkeeping ([`Passes`]: the core's format, 512-row blocks in passes of whole
//! tiles, as `voisin graph --device cuda --checkpoint` writes it, so either resumes the other),
//! reads the running lists kept beside the passes when they are of its engine's kind, and
//! tells every rank which passes are done and which the lists cover; then for each share of
//! the schedule every rank computes its cyclic part of the share's tile pairs, rank 0 merges
//! the parts into its running lists and, when the share finishes a pass, finishes that pass's
//! rows ([`TileGraph::finish`]) and saves them with the open rows' lists. Each pair is measured
//! once, as without checkpoints, and a resumed build skips the catch-up when the lists were
//! kept.
//!
//! The CPU ranks' driver ([`crate::graph`]) measures through the same seam and keeps its
//! checkpoint through the same [`Passes`], but sends exact lists to the owners of row blocks
//! instead of gathering shares (rank 0 here receives every rank's share: ranks × n lists),
//! with a checkpoint layout of its own; its wire and checkpoint formats are kept.

use voisin::graph::checkpoint::CheckpointOptions;
use voisin::graph::driver::Passes;
use voisin::graph::{
    cyclic_share, pass_steps_after, pass_tile_edge, GraphJob, Share, TileGraph, TileOwner,
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
    let job = GraphJob { data, k, metric };
    let edge = agree(comm, engine.tile_edge(&job))?;
    // One triangle for every rank: the smallest edge, as the minimum of u32 values.
    let edge = (u32::MAX - comm.all_max(u32::MAX - edge.clamp(1, 1 << 30) as u32)) as usize;
    if let Some(opts) = checkpoint {
        return checkpointed(comm, engine, data, (k, metric), edge, opts);
    }
    let nt = n.div_ceil(edge);
    let kk = k.min(n.saturating_sub(1));
    let share = my_share(engine, &job, edge, &cyclic_share(nt, size, rank));
    let share = agree(comm, share)?;
    let finished = match comm.gather(share) {
        Some(words) => merged::<E::Share>(&words)
            .and_then(|part| engine.finish_all(&job, part))
            .map(|rows| Some(KnnResult::from_rows(rows, kk, metric))),
        None => Ok(None),
    };
    agree(comm, finished)
}

/// This rank's part of a share: the tile pairs of edge `edge` that `owns` accepts, packed.
fn my_share<E: TileGraph>(
    engine: &E,
    job: &GraphJob<'_>,
    edge: usize,
    owns: &TileOwner<'_>,
) -> Result<Vec<u32>> {
    let bytes = engine.share(job, edge, owns)?.to_bytes();
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
    /// The checkpoint, the layout and every row (loaded from finished passes, or computed in
    /// this run): the core driver's own bookkeeping.
    passes: Passes,
    /// The merged shares so far (from the checkpoint's partial lists when it kept some).
    running: Option<S>,
    /// What the engine's running lists are in a checkpoint; `None` when it keeps none.
    kind: Option<String>,
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
    let job = GraphJob {
        data,
        k: kk,
        metric,
    };
    // Rank 0 opens (or checks) the checkpoint and reads the finished passes and the partial
    // lists; every rank then learns the pass size, which passes are done and which of them
    // the running lists cover.
    let opened = if rank == 0 {
        open_root(engine, &job, edge, opts).map(|(root, words)| (Some(root), words))
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
    let flags = &got[1..];
    let (done, covered) = flags.split_at(flags.len() / 2);
    let done: Vec<bool> = done.iter().map(|&d| d == 1).collect();
    let covered: Vec<bool> = covered.iter().map(|&d| d == 1).collect();
    if kk > 0 {
        let t = pass_tile_edge(edge, rpp, done.len());
        let dealt = cyclic_share(n.div_ceil(t), size, rank);
        for step in pass_steps_after(&done, &covered) {
            let owns = |i: usize, j: usize| {
                step.takes_after(&done, &covered, i * t / rpp, j * t / rpp) && dealt(i, j)
            };
            let share = agree(comm, my_share(engine, &job, t, &owns))?;
            let absorbed = match (&mut root, comm.gather(share)) {
                (Some(root), Some(words)) => root.absorb(engine, &job, &words, step.proves),
                _ => Ok(()),
            };
            agree(comm, absorbed)?;
        }
    }
    Ok(root.map(|r| KnnResult::from_rows(r.passes.into_rows(), kk, metric)))
}

/// Rank 0's start: the checkpoint opened for this job, the finished passes' rows, the partial
/// lists when the engine keeps them, and the words every rank needs (rows per pass, then one
/// done flag per pass, then one covered flag per pass).
fn open_root<E: TileGraph>(
    engine: &E,
    job: &GraphJob<'_>,
    edge: usize,
    opts: &CheckpointOptions,
) -> Result<(Root<E::Share>, Vec<u32>)> {
    let (data, kk, metric) = (job.data, job.k, job.metric);
    let mut passes = Passes::open(data, metric, kk, edge, usize::MAX, Some(opts))?;
    let kind = engine.partial_kind(job)?;
    let running = match &kind {
        Some(kind) if kk > 0 && !passes.all_done() => {
            passes.resume(kind, |rows, bytes| engine.partial_share(job, rows, bytes))?
        }
        _ => None,
    };
    let mut words = vec![passes.rows_per_pass() as u32];
    words.extend(passes.done.iter().map(|&d| u32::from(d)));
    words.extend(passes.covered.iter().map(|&c| u32::from(c)));
    let root = Root {
        passes,
        running,
        kind,
    };
    Ok((root, words))
}

impl<S: Share> Root<S> {
    /// Merges a gathered share; when it finishes pass `proves`, finishes and saves that pass,
    /// with the open rows' running lists when the engine keeps them.
    fn absorb<E: TileGraph<Share = S>>(
        &mut self,
        engine: &E,
        job: &GraphJob<'_>,
        words: &[u32],
        proves: Option<usize>,
    ) -> Result<()> {
        engine.absorb(&mut self.running, merged::<S>(words)?)?;
        let Some(p) = proves else {
            return Ok(());
        };
        let range = self.passes.passes[p].clone();
        let all = self
            .running
            .as_ref()
            .ok_or_else(|| Error::device("graph pass without lists (bug)"))?;
        let rows = engine.finish(job, all, range)?;
        let (kind, running) = match &self.kind {
            Some(kind) => (kind.as_str(), Some(all)),
            None => ("", None),
        };
        self.passes
            .finished(p, rows, running, kind, |s, r| engine.partial_bytes(s, r))
    }
}
