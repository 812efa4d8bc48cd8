//! k-NN graphs on several GPUs, and checkpointed ones on one GPU or several (docs/design/checkpoints.md): the one
//! in-process driver of the GPU graph over engines. Checkpointed, the rows are cut into the
//! passes of the core's checkpoint format ([`voisin::graph::checkpoint`]: same manifest, same pass files,
//! same refusal of a damaged or foreign checkpoint), each pass is computed on the device and
//! saved as soon as its rows are final, and a killed build resumes where it stopped. A
//! checkpoint of the CPU engine resumes here and the other way round: pass files hold exact
//! keys, which every engine computes bit for bit alike.
//!
//! How a pass is computed, each pair measured once: the triangle schedule of `graph`
//! (tile pairs (I, J), I ≤ J) is restricted to the tile rows I of the pass, so pass p measures
//! its rows against themselves and against every later item, handing the column candidates of
//! later items on in a running share ([`PartialGraph`]) that later passes merge into. Once the
//! pass's tiles are merged its rows have seen every other item; they are proved, widened and
//! re-ranked exactly (`CudaEngine::prove_rows`) and saved. Tile edges divide the pass size,
//! so no tile straddles two passes (a fresh checkpoint's passes are whole tiles, see
//! [`voisin::graph::checkpoint::Checkpoint::open_aligned`]).
//!
//! Resuming: the column candidates that finished passes handed on were in memory only, so a
//! resumed build first measures the pairs between finished and open passes for the open side
//! (one catch-up share); pairs between two finished passes are skipped.
//!
//! Without a checkpoint (`MultiGpu::graph`) the build is one pass of every row: one share of the
//! whole triangle at the GPUs' common tile edge, then the proof.
//!
//! Several GPUs: every GPU holds the whole set; each share's tile pairs are dealt cyclically
//! over them ([`voisin::graph::cyclic_share`]), their lists merged, and the proof runs on the
//! first. Several processes (voisin-mpi's GPU ranks) follow the same schedule
//! ([`voisin::graph::pass_steps`]) through [`CudaEngine::graph_tiles`] and
//! [`CudaEngine::graph_rows`].
//!
//! Memory: the running share holds `width` candidates (8 bytes each) per item on the host, the
//! same lists a one-shot multi-GPU graph merges once.
//!
//! Owns the routing of a build's shares over GPUs; the tiles, selection and proof are the engine's, the
//! files are the core's.

use std::ops::Range;
use std::time::Instant;

use rayon::prelude::*;
use voisin::engine::GraphRequest;
use voisin::graph::checkpoint::{Checkpoint, CheckpointOptions, Job};
use voisin::graph::{
    cyclic_share, pass_alignment, pass_steps, pass_tile_edge, PassRows, PassStore, TileGraph,
    TileOwner,
};
use voisin::{Dataset, Engine, Error, KnnResult, Metric, Result, Stats};

use super::{graph_input, on_each, to_result, trace, CudaEngine};
use crate::numerics::plan::vectors;
use crate::ops::device_set::DeviceSet;
use crate::runtime::context;
use crate::search::graph::{self, GraphRows, Lists, PartialGraph};
use crate::search::knn::Raw;

/// Which tile pairs a share computes, by the passes of their row and column tiles.
type PassPairs<'a> = dyn Fn(usize, usize) -> bool + Sync + 'a;

/// The graph of `data` on `engines` (one or more GPUs holding the whole set), with finished
/// passes kept in `checkpoint` when given (a checkpointed build takes vectors only); without
/// one, a single pass at the GPUs' common tile edge.
pub(crate) fn build(
    engines: &[CudaEngine],
    req: &GraphRequest<'_>,
    checkpoint: Option<&CheckpointOptions>,
) -> Result<KnnResult> {
    let (data, k, metric) = (req.data(), req.k(), req.metric());
    if matches!(data, Dataset::Strings(_)) {
        return match checkpoint {
            // The string kernel's work is small next to its transfers: one GPU.
            None => engines[0].graph_request(req),
            Some(_) => Err(Error::invalid(
                "checkpointed graphs on the GPU take vectors; build this one with --device cpu",
            )),
        };
    }
    let mut tr = Instant::now();
    let set = vectors(data, metric)?;
    let n = set.len();
    let mut stats = Stats {
        device: engines
            .iter()
            .map(|e| format!("cuda:{} ({})", e.device, e.device_name()))
            .collect::<Vec<_>>()
            .join(", "),
        ..Stats::default()
    };
    if k == 0 && checkpoint.is_none() {
        return Ok(to_result(vec![Vec::new(); n], k, metric, stats));
    }
    // One triangle for all GPUs: the smallest edge any of them can hold.
    let edges = on_each(engines, |_, e, gpu| e.graph_edge(gpu, n, k))?;
    let edge = edges.into_iter().min().unwrap_or(1).max(1);
    let mut cp = match checkpoint {
        Some(opts) => {
            let job = Job::describe(data, metric, k);
            Some(Checkpoint::open_aligned(
                opts,
                &job,
                k,
                n,
                pass_alignment(edge),
            )?)
        }
        None => None,
    };
    if k == 0 {
        return Ok(to_result(vec![Vec::new(); n], k, metric, stats));
    }
    // Without a checkpoint, one pass of every row at the common edge; with one, its passes, and
    // tiles that do not straddle them (a resumed CPU checkpoint may ask for smaller tiles than
    // a fresh GPU one).
    let (passes, rpp, mut t, loaded) = match &cp {
        Some(cp) => {
            let passes = cp.passes(n);
            let rpp = cp.layout().rows_per_pass();
            let t = pass_tile_edge(pass_alignment(edge), rpp, passes.len());
            (passes, rpp, t, cp.load_all(n)?)
        }
        None => (std::iter::once(0..n).collect(), n, edge, vec![None]),
    };
    let done: Vec<bool> = loaded.iter().map(Option::is_some).collect();
    let mut rows: Vec<Vec<(f64, u32)>> = Vec::with_capacity(n);
    for (got, r) in loaded.into_iter().zip(&passes) {
        rows.extend(got.unwrap_or_else(|| vec![Vec::new(); r.len()]));
    }
    if done.iter().all(|&d| d) {
        return Ok(to_result(rows, k, metric, stats));
    }
    trace("graph on GPUs: input checks and schedule", &mut tr);

    let first = &engines[0];
    let plan = first.plan(metric, set);
    let upload = Instant::now();
    let mut ddevs = on_each(engines, |_, _, gpu| {
        let ddev = DeviceSet::new(gpu, &plan, set)?;
        ddev.check(set, 0)?;
        Ok(ddev)
    })?;
    stats.transfer += upload.elapsed();
    trace("graph on GPUs: upload and prepare", &mut tr);
    let pass_of = |item: usize| item / rpp;
    // One share: the tile pairs (I, J), I ≤ J, whose passes `pairs` accepts, dealt over the GPUs.
    let share = |pairs: &PassPairs<'_>,
                 t: &mut usize,
                 ddevs: &[DeviceSet],
                 stats: &mut Stats|
     -> Result<PartialGraph> {
        let (gpus, started) = (engines.len(), Instant::now());
        let merged = loop {
            let edge = *t;
            let nt = n.div_ceil(edge);
            let got = on_each(engines, |g, e, gpu| {
                let dealt = cyclic_share(nt, gpus, g);
                let owns =
                    |i: usize, j: usize| pairs(pass_of(i * edge), pass_of(j * edge)) && dealt(i, j);
                graph::lists(&e.ctx(gpu, &plan), &ddevs[g], set, k, edge, &owns)
            });
            match got {
                // Every GPU must use the same edge: all retry with a smaller one, which still
                // divides the pass size.
                Err(e) if context::is_oom(&e) && edge > 64 => *t = edge / 2,
                r => break PartialGraph::merge(r?)?,
            }
        };
        stats.compute += started.elapsed();
        Ok(merged)
    };
    let steps = pass_steps(&done);
    let mut running: Option<PartialGraph> = None;
    for (s, step) in steps.iter().enumerate() {
        let mine = share(
            &|pi, pj| step.takes(&done, pi, pj),
            &mut t,
            &ddevs,
            &mut stats,
        )?;
        let merged = PartialGraph::merge(running.take().into_iter().chain([mine]).collect())?;
        let Some(p) = step.proves else {
            trace("graph on GPUs: catch-up with finished passes", &mut tr);
            running = Some(merged);
            continue;
        };
        if s + 1 == steps.len() {
            // The other GPUs' copies are not needed for the proof.
            ddevs.truncate(1);
        }
        let range = passes[p].clone();
        let gpu = first.lock()?;
        let finished = if range == (0..n) {
            // One pass of every row: its lists are proved as they are, without a copy.
            graph::prove(
                &first.ctx(&gpu, &plan),
                &ddevs[0],
                set,
                metric,
                merged,
                &mut stats,
            )?
        } else {
            let raws = pass_raws(&merged.lists, range.clone());
            let rows_of = GraphRows {
                first: range.start,
                k,
                width: merged.lists.width,
            };
            running = Some(merged);
            graph::prove_rows(
                &first.ctx(&gpu, &plan),
                &ddevs[0],
                set,
                metric,
                rows_of,
                raws,
                &mut stats,
            )?
        };
        drop(gpu);
        trace(&format!("graph on GPUs: pass {p} proved"), &mut tr);
        first.check_cancel()?;
        if let Some(cp) = &mut cp {
            cp.save(p, (range.start, range.end), &finished)?;
        }
        rows.splice(range, finished);
    }
    stats.distance_evals += running.map_or(0, |r| r.distance_evals);
    Ok(to_result(rows, k, metric, stats))
}

/// The CUDA engine's side of the core's graph seam: shares of dealt tile pairs
/// ([`CudaEngine::graph_tiles`]), finished per pass ([`CudaEngine::graph_rows`]) or whole
/// ([`CudaEngine::graph_finish`]).
impl TileGraph for CudaEngine {
    type Share = PartialGraph;

    fn tile_edge(&self, data: &Dataset, k: usize, _: &Metric) -> Result<usize> {
        self.graph_tile_edge(data.len(), k)
    }

    fn share(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        edge: usize,
        owns: &TileOwner<'_>,
    ) -> Result<PartialGraph> {
        self.graph_tiles(data, k, metric, edge, owns)
    }

    fn finish(
        &self,
        data: &Dataset,
        metric: &Metric,
        share: &PartialGraph,
        rows: Range<usize>,
    ) -> Result<PassRows> {
        self.graph_rows(data, metric, share, rows)
    }

    fn finish_all(
        &self,
        data: &Dataset,
        metric: &Metric,
        share: PartialGraph,
    ) -> Result<KnnResult> {
        self.graph_finish(data, metric, share)
    }
}

impl CudaEngine {
    /// The final rows `rows` of the graph of `data` from a merged share (`part`) in which those
    /// rows have met every other item: the rows of one pass of a checkpointed build whose
    /// shares ([`voisin::graph::pass_steps`], [`CudaEngine::graph_tiles`]) were computed elsewhere (other
    /// processes) and merged with [`PartialGraph::merge`]. Exact keys, sorted by (key, index).
    pub fn graph_rows(
        &self,
        data: &Dataset,
        metric: &Metric,
        part: &PartialGraph,
        rows: Range<usize>,
    ) -> Result<Vec<Vec<(f64, u32)>>> {
        let (set, k) = graph_input(data, part.k, metric)?;
        if part.n != set.len() || k != part.k || rows.end > set.len() {
            return Err(Error::invalid("graph share does not match the data"));
        }
        let gpu = self.lock()?;
        let plan = self.plan(metric, set);
        let ddev = DeviceSet::new(&gpu, &plan, set)?;
        let raws = pass_raws(&part.lists, rows.clone());
        let which = GraphRows {
            first: rows.start,
            k,
            width: part.lists.width,
        };
        let mut stats = Stats::default();
        graph::prove_rows(
            &self.ctx(&gpu, &plan),
            &ddev,
            set,
            metric,
            which,
            raws,
            &mut stats,
        )
    }
}

/// The candidate lists of the items `rows`, for the proof.
fn pass_raws(lists: &Lists, rows: Range<usize>) -> Vec<Raw> {
    let w = lists.width;
    rows.into_par_iter()
        .map(|r| Raw {
            cands: lists.keys[r * w..(r + 1) * w]
                .iter()
                .zip(&lists.ids[r * w..(r + 1) * w])
                .filter(|e| *e.1 != u32::MAX)
                .map(|(&key, &i)| (key, i))
                .collect(),
            complete: lists.complete[r],
        })
        .collect()
}
