//! The one in-process driver of the k-NN graph: the CPU engine (one backend, its threads) and
//! the CUDA engines (one GPU or several, one backend each) build every graph through
//! [`build`], checkpointed or not.
//!
//! What it does, for every engine alike:
//! - lays the rows out in passes: the checkpoint's layout when there is one
//!   ([`Checkpoint::open_for`]: 512-row blocks, a fresh one's passes whole tiles of the common
//!   edge), otherwise passes as large as the backends can hold (one pass for a GPU);
//! - loads the finished passes and, when it is still valid, the partial lists the last run
//!   saved beside them ([`Checkpoint::load_partial`]);
//! - runs the schedule ([`pass_steps_after`]): a catch-up share for finished passes whose pairs
//!   with open rows are not in the partial lists, then one share per open pass, each share's
//!   tile pairs dealt over the backends ([`cyclic_share`]) and merged with the running lists
//!   (one backend extends them in place: the CPU seeds its candidate buffers with them);
//! - finishes a pass's rows on the first backend once its share is merged, checks for
//!   cancellation (before and after the finish), and saves the pass and the running lists of
//!   the rows still open;
//! - retries a share with half the tile edge, on every backend, when one runs out of memory.
//!
//! A backend (the one graph seam, [`TileGraph`]) is one engine's side of one build (for a GPU:
//! the set already on the device); it measures dealt tile pairs and finishes rows, and says what
//! its shares hold when they are saved as partial lists ([`TileGraph::partial_kind`]): exact
//! k-lists for the CPU, approximate lists under a proof contract (and the numerics that made
//! them) for a GPU. A resumed build takes saved partial
//! lists only from a backend of the same kind; otherwise, or when there are none (checkpoints
//! of older versions), it does the catch-up, so every checkpoint resumes on every engine.
//!
//! Owns the order of the work and the checkpoint calls; the tiles, lists and proofs are the
//! engines', the files [`super::checkpoint`]'s.

use std::ops::Range;

use super::backend::{GraphJob, TileGraph};
use super::checkpoint::{Checkpoint, CheckpointOptions, Job, Layout};
use super::lists::{PassRows, Share};
use super::schedule::{
    cyclic_share, pass_alignment, pass_steps_after, pass_tile_edge, PassStep, BLOCK_ROWS,
};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::metric::Metric;

/// Smallest tile edge a backend that ran out of memory is retried with.
const MIN_RETRY_EDGE: usize = 64;

/// A graph build for [`build`].
pub struct Build<'a> {
    /// The set whose graph is built: every item is both a query and a base item.
    pub data: &'a Dataset,
    /// The metric neighbours are ranked by.
    pub metric: &'a Metric,
    /// Neighbours per row, already capped at n − 1.
    pub k: usize,
    /// The tile edge every backend takes (the smallest of theirs).
    pub edge: usize,
    /// The most rows a pass may hold (the backends' running lists of a pass must fit); n or
    /// more for one pass.
    pub max_pass_rows: usize,
    /// Where finished passes and partial lists are kept and resumed from; `None` builds in
    /// memory only, in passes of at most `max_pass_rows`.
    pub checkpoint: Option<&'a CheckpointOptions>,
}

/// Every row of the graph of `b.data` (exact keys, sorted by (key, index)), computed on the
/// backends that `open` returns (called only when there is work left; the first one finishes
/// rows), with finished passes and partial lists kept in `b.checkpoint` when given.
pub fn build<B: TileGraph>(
    b: &Build<'_>,
    open: impl FnOnce() -> Result<Vec<B>>,
) -> Result<PassRows> {
    let n = b.data.len();
    let job = GraphJob {
        data: b.data,
        k: b.k,
        metric: b.metric,
    };
    let mut passes = Passes::open(b.data, b.metric, b.k, b.edge, b.max_pass_rows, b.checkpoint)?;
    if b.k == 0 || passes.all_done() {
        return Ok(passes.into_rows());
    }
    let mut backends = open()?;
    if backends.is_empty() {
        return Err(Error::invalid(
            "a graph build needs at least one backend (bug)",
        ));
    }
    let kind = backends[0].partial_kind(&job)?;
    let mut running = match &kind {
        Some(kind) => passes.resume(kind, |rows, bytes| {
            backends[0].partial_share(&job, rows, bytes)
        })?,
        None => None,
    };
    let mut t = passes.tile_edge(b.edge);
    let steps = passes.steps();
    let rpp = passes.rows_per_pass();
    let pass_of = |item: usize| item / rpp;
    let tiles: u64 = steps
        .iter()
        .map(|&s| {
            let nt = n.div_ceil(t);
            super::schedule::triangle(nt)
                .filter(|&(i, j)| passes.takes(s, pass_of(i * t), pass_of(j * t)))
                .count() as u64
        })
        .sum();
    backends[0].expect_tiles(tiles);
    for (s, &step) in steps.iter().enumerate() {
        extend(
            (&backends, &job),
            &mut running,
            &mut t,
            n,
            &|i, j| passes.takes(step, pass_of(i), pass_of(j)),
            // Rows whose lists are read later: those of open passes.
            &|item| !passes.done[pass_of(item)],
        )?;
        let Some(p) = step.proves else {
            continue;
        };
        if s + 1 == steps.len() {
            // The other backends are not needed for the last rows (a GPU frees its copy).
            backends.truncate(1);
        }
        let range = passes.passes[p].clone();
        let first = &backends[0];
        first.check_cancel()?;
        let missing = || Error::device("graph pass without lists (bug)");
        let finished = if range == (0..n) {
            first.finish_all(&job, running.take().ok_or_else(missing)?)?
        } else {
            first.finish(&job, running.as_ref().ok_or_else(missing)?, range)?
        };
        first.check_cancel()?;
        let (kind, kept) = match &kind {
            Some(kind) => (kind.as_str(), running.as_ref()),
            None => ("", None),
        };
        passes.finished(p, finished, kept, kind, |share, rows| {
            first.partial_bytes(share, rows)
        })?;
    }
    Ok(passes.into_rows())
}

/// A build's passes and what is known of them: the layout, the checkpoint when there is one,
/// the rows of finished passes, and which passes the running lists cover. The one place where
/// a build opens, reads and writes its checkpoint: the in-process driver ([`build`]),
/// voisin-mpi's gathered ranks (rank 0) and its CPU ranks (every rank saves the blocks it
/// owns, rank 0 reads them back) all go through it.
pub struct Passes {
    cp: Option<Checkpoint>,
    /// The rows of each pass.
    pub passes: Vec<Range<usize>>,
    /// The passes finished when the build started.
    pub done: Vec<bool>,
    /// The finished passes whose pairs with every open row the running lists already hold
    /// (from a checkpoint's partial lists): the first ones.
    pub covered: Vec<bool>,
    /// The passes finished so far.
    proved: Vec<bool>,
    /// Every row (final for finished passes), or none until a pass is known.
    rows: PassRows,
}

impl Passes {
    /// The passes of a graph of `data` with `k` neighbours a row (already capped) on backends
    /// whose common tile edge is `edge`: a checkpoint's layout (opened or started in
    /// `checkpoint`, its finished passes read and checked), or passes of `max_pass_rows` rows.
    pub fn open(
        data: &Dataset,
        metric: &Metric,
        k: usize,
        edge: usize,
        max_pass_rows: usize,
        checkpoint: Option<&CheckpointOptions>,
    ) -> Result<Passes> {
        let n = data.len();
        let cp = match checkpoint {
            Some(opts) => {
                let job = Job::describe(data, metric, k);
                let (align, max_blocks) = (pass_alignment(edge.max(1)), max_pass_rows / BLOCK_ROWS);
                Some(Checkpoint::open_for(opts, &job, k, n, align, max_blocks)?)
            }
            None => None,
        };
        Self::laid_out(cp, n, k, max_pass_rows, true)
    }

    /// The passes of a checkpoint whose fresh layout the driver chooses (voisin-mpi's CPU
    /// ranks: row blocks of their own size, one a pass); a resumed one keeps the layout it
    /// started with. With `load` the finished passes are read and checked (in a build over
    /// several processes one of them does it); without, none counts as finished here.
    pub fn open_layout(
        data: &Dataset,
        metric: &Metric,
        k: usize,
        fresh: Layout,
        checkpoint: &CheckpointOptions,
        load: bool,
    ) -> Result<Passes> {
        let job = Job::describe(data, metric, k);
        let cp = Checkpoint::open_with(checkpoint, &job, k, fresh)?;
        Self::laid_out(Some(cp), data.len(), k, usize::MAX, load)
    }

    /// The passes of `cp`'s layout (without one: of `max_pass_rows` rows), with the finished
    /// ones read when `load`.
    fn laid_out(
        cp: Option<Checkpoint>,
        n: usize,
        k: usize,
        max_pass_rows: usize,
        load: bool,
    ) -> Result<Passes> {
        let (passes, loaded) = match &cp {
            Some(cp) if k > 0 && load => (cp.passes(n), cp.load_all(n)?),
            Some(cp) if k > 0 => {
                let passes = cp.passes(n);
                let none = vec![None; passes.len()];
                (passes, none)
            }
            _ => {
                let rpp = max_pass_rows.clamp(1, n.max(1));
                let passes: Vec<Range<usize>> =
                    (0..n).step_by(rpp).map(|a| a..(a + rpp).min(n)).collect();
                let none = vec![None; passes.len()];
                (passes, none)
            }
        };
        let done: Vec<bool> = loaded.iter().map(Option::is_some).collect();
        // Rows are laid out once a pass is known (a build of one pass that loaded nothing
        // takes its finished rows as they are, without placeholders to replace).
        let mut rows: PassRows = Vec::new();
        if done.iter().any(|&d| d) {
            rows.reserve(n);
            for (got, r) in loaded.into_iter().zip(&passes) {
                rows.extend(got.unwrap_or_else(|| vec![Vec::new(); r.len()]));
            }
        }
        Ok(Passes {
            cp,
            covered: vec![false; passes.len()],
            proved: done.clone(),
            done,
            passes,
            rows,
        })
    }

    /// Rows per pass (the last pass may hold fewer).
    pub fn rows_per_pass(&self) -> usize {
        self.passes.first().map_or(1, |r| r.len()).max(1)
    }

    /// Whether every pass is finished.
    pub fn all_done(&self) -> bool {
        self.done.iter().all(|&d| d)
    }

    /// The tile edge of the build for backends whose common edge is `edge`: as it is for one
    /// pass without a checkpoint; otherwise a power of two that divides the pass size, so that
    /// no tile straddles two passes.
    pub fn tile_edge(&self, edge: usize) -> usize {
        let edge = edge.max(1);
        if self.cp.is_none() && self.passes.len() == 1 {
            edge
        } else {
            pass_tile_edge(
                pass_alignment(edge),
                self.rows_per_pass(),
                self.passes.len(),
            )
        }
    }

    /// The rows of every pass that `covered` does not name.
    fn open_rows(&self, covered: &[bool]) -> Vec<Range<usize>> {
        (0..self.passes.len())
            .filter(|&p| !covered[p])
            .map(|p| self.passes[p].clone())
            .collect()
    }

    /// The running lists the checkpoint keeps beside its passes, when they are of `kind` and
    /// still valid, read with `decode` (the rows they hold, their bytes); then the build skips
    /// the catch-up of the passes they cover. `None` (the catch-up) otherwise.
    pub fn resume<S>(
        &mut self,
        kind: &str,
        decode: impl FnOnce(&[Range<usize>], &[u8]) -> Result<S>,
    ) -> Result<Option<S>> {
        let Some(cp) = &self.cp else {
            return Ok(None);
        };
        let Some((covered, bytes)) = cp.load_partial(&self.done, kind)? else {
            return Ok(None);
        };
        let share = decode(&self.open_rows(&covered), &bytes)
            .map_err(|e| Error::invalid(format!("{}: {e}", cp.partial_path().display())))?;
        self.covered = covered;
        Ok(Some(share))
    }

    /// The shares of the build, in order ([`pass_steps_after`]).
    pub fn steps(&self) -> Vec<PassStep> {
        pass_steps_after(&self.done, &self.covered)
    }

    /// Whether `step` takes the tile pairs of row pass `pi` and column pass `pj`.
    pub fn takes(&self, step: PassStep, pi: usize, pj: usize) -> bool {
        step.takes_after(&self.done, &self.covered, pi, pj)
    }

    /// Pass `p` is final with `rows`: kept, and saved when there is a checkpoint, with the
    /// running lists of the rows still open (`running`, as bytes of `kind` from `encode`) when
    /// they hold the pairs with every finished pass, i.e. the finished passes are the first
    /// ones (passes prove in order; a build resumed with a pass missing below a finished one
    /// saves lists again once it has proved the gap).
    pub fn finished<S>(
        &mut self,
        p: usize,
        rows: PassRows,
        running: Option<&S>,
        kind: &str,
        encode: impl FnOnce(&S, &[Range<usize>]) -> Vec<u8>,
    ) -> Result<()> {
        self.proved[p] = true;
        let range = self.passes[p].clone();
        let first_open = self.proved.iter().take_while(|&&d| d).count();
        let in_order = self.proved[first_open..].iter().all(|&d| !d);
        let open = self.open_rows(&self.proved);
        if let Some(cp) = &mut self.cp {
            let bytes = match running {
                Some(all) if in_order && !open.is_empty() => Some(encode(all, &open)),
                _ => None,
            };
            let partial = bytes.as_deref().map(|b| (&self.proved[..], kind, b));
            cp.commit(p, (range.start, range.end), &rows, partial)?;
        }
        let n = self.items();
        if self.rows.is_empty() && range == (0..n) {
            self.rows = rows;
        } else {
            self.rows.resize(n, Vec::new());
            self.rows.splice(range, rows);
        }
        Ok(())
    }

    /// Saves finished pass `p`'s rows to the checkpoint, when there is one, without running
    /// lists and without keeping the rows here: for a build whose passes are finished by
    /// several processes (voisin-mpi's CPU ranks: each block's owner saves it and keeps its
    /// rows for the gather).
    pub fn save(&mut self, p: usize, rows: &PassRows) -> Result<()> {
        self.proved[p] = true;
        let range = self.passes[p].clone();
        match &mut self.cp {
            Some(cp) => cp.commit(p, (range.start, range.end), rows, None),
            None => Ok(()),
        }
    }

    /// Items of the build (the end of the last pass).
    fn items(&self) -> usize {
        self.passes.last().map_or(0, |r| r.end)
    }

    /// Every row: finished passes' final rows, empty rows for the others.
    pub fn into_rows(mut self) -> PassRows {
        let n = self.items();
        self.rows.resize(n, Vec::new());
        self.rows
    }
}

/// Adds the pairs of items `pairs` accepts (by item, at tile corners) to `running`: one backend
/// extends it itself; several compute shares of the tile pairs dealt cyclically over them, in
/// parallel, merged and then merged in. Every backend uses one edge: when one runs out of
/// memory, all retry with half of it, which still divides the pass size.
fn extend<B: TileGraph>(
    (backends, job): (&[B], &GraphJob<'_>),
    running: &mut Option<B::Share>,
    t: &mut usize,
    n: usize,
    pairs: &(dyn Fn(usize, usize) -> bool + Sync),
    open: &(dyn Fn(usize) -> bool + Sync),
) -> Result<()> {
    loop {
        let edge = *t;
        let open_tile = |tile: usize| open(tile * edge);
        let got = if let [one] = backends {
            let owns = |i: usize, j: usize| pairs(i * edge, j * edge);
            one.extend(job, running, edge, &owns, &open_tile)
        } else {
            let (parts, nt) = (backends.len(), n.div_ceil(edge));
            let shares = std::thread::scope(|s| {
                let handles: Vec<_> = backends
                    .iter()
                    .enumerate()
                    .map(|(g, be)| {
                        s.spawn(move || {
                            let dealt = cyclic_share(nt, parts, g);
                            let owns =
                                |i: usize, j: usize| pairs(i * edge, j * edge) && dealt(i, j);
                            be.share(job, edge, &owns)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(Error::device("a graph backend panicked")))
                    })
                    .collect::<Result<Vec<_>>>()
            });
            shares.and_then(|shares| backends[0].absorb(running, B::Share::merge(shares)?))
        };
        match got {
            Err(e) if edge > MIN_RETRY_EDGE && backends[0].retry_smaller(&e) => *t = edge / 2,
            r => return r,
        }
    }
}
