//! Every k-NN graph of vectors on the GPU, on one GPU or several, checkpointed or not
//! (docs/design/checkpoints.md): the CUDA engines' side of the core's one graph driver
//! ([`voisin::graph::driver`]), which lays the rows out in passes (the core's checkpoint
//! format: same manifest, same pass files, same refusal of a damaged or foreign checkpoint),
//! deals each share's tile pairs over the GPUs, merges the shares on the host, and saves a pass
//! as soon as its rows are final, with the open rows' running lists beside it. A checkpoint of
//! the CPU engine resumes here and the other way round: pass files hold exact keys, which
//! every engine computes bit for bit alike.
//!
//! One backend per GPU ([`GpuBuild`]), holding the whole set on its device for the build: a
//! share is the triangle schedule of `graph` (tile pairs (I, J), I ≤ J) restricted to the pairs
//! the driver deals it, as approximate lists with a proof contract ([`PartialGraph`]); the first
//! GPU proves, widens and re-ranks a pass's rows exactly (`search::graph::prove_rows`) once its
//! share is merged. Tile edges divide the pass size, so no tile straddles two passes (a fresh
//! checkpoint's passes are whole tiles, see
//! [`voisin::graph::checkpoint::Checkpoint::open_aligned`]); when a GPU runs out of memory,
//! every GPU retries the share with half the edge.
//!
//! Resuming: the running lists saved beside the passes are the GPU's own approximate lists
//! (their kind names the numeric plan, so only a GPU build of the same plan takes them back);
//! without them (a checkpoint of the CPU engine or of an older version) the driver measures
//! the pairs between finished and open passes again (one catch-up share).
//!
//! Without a checkpoint (`CudaEngine::graph`, `MultiGpu::graph`) the build is one pass of every
//! row: one share of the whole triangle at the GPUs' common tile edge (on one GPU the share is
//! the running lists as they are: no merge, no copy), then the proof of the lists in place.
//! Before the upload each GPU checks that the set and the lists fit (a clear refusal, not an
//! allocation failure half-way); an allocation failure later halves the tile edge (counted in
//! [`CudaEngine::shrinks`]). Strings go to the string kernel on the first GPU.
//!
//! Several processes (voisin-mpi's GPU ranks) follow the same schedule
//! ([`voisin::graph::pass_steps`]) through the same seam, each with a [`GpuBuild`] of its own
//! ([`CudaEngine::graph_build`]).
//!
//! Arithmetic: under `--precision auto`, once the set is up, a pilot on the first GPU chooses
//! TF32, fp16x3 or fp32 tiles for the whole build (`pilot::AutoChoice`; every GPU's shares and
//! the proof run under that one plan, and a checkpoint's running lists name it). Processes
//! agree on it the same way: the first one's build chooses ([`GpuBuild::route`]) and every
//! other's follows ([`GpuBuild::follow`]), so they run the arithmetic one GPU runs.
//! [`CudaEngine::graph_tiles`] and [`CudaEngine::graph_finish`], a share and its proof in
//! separate calls, keep fp32 under `auto`.
//!
//! Memory: the running share holds `width` candidates (8 bytes each) per item on the host, the
//! same lists a one-shot multi-GPU graph merges once.
//!
//! Owns the GPUs' side of a build; the order of the work is the core driver's, the tiles,
//! selection and proof are the engine's, the files are the core's.

use std::ops::Range;
use std::sync::Mutex;
use std::time::Instant;

use rayon::prelude::*;
use voisin::engine::GraphRequest;
use voisin::graph::checkpoint::CheckpointOptions;
use voisin::graph::driver;
use voisin::graph::{GraphJob, PassRows, TileGraph, TileOwner};
use voisin::{Dataset, Error, KnnResult, Metric, Result, Stats, VectorSet};

use super::{graph_input, on_each, to_result, CudaEngine};
use crate::numerics::plan::{vectors, Arithmetic, Numerics};
use crate::ops::device_set::DeviceSet;
use crate::runtime::context;
use crate::search::finish::Raw;
use crate::search::graph::{self, GraphRows, Lists, PartialGraph};
use crate::search::pilot::{self, AutoChoice};
use crate::search::stream;

/// The graph of `data` on `engines` (one or more GPUs holding the whole set), with finished
/// passes kept in `checkpoint` when given (a checkpointed build takes vectors only); without
/// one, a single pass at the GPUs' common tile edge. Values the tiles refuse for their
/// magnitudes are built on a scaled copy (`super::scaled`), except in checkpointed builds: a
/// checkpoint names its data by its bytes, and the copy's are not the input's, which another
/// engine resuming the folder reads.
pub(crate) fn build(
    engines: &[CudaEngine],
    req: &GraphRequest<'_>,
    checkpoint: Option<&CheckpointOptions>,
) -> Result<KnnResult> {
    if checkpoint.is_some() {
        return build_unscaled(engines, req, checkpoint);
    }
    let keep_type = engines[0].keeps_type();
    super::scaled::graph(req, keep_type, |r| build_unscaled(engines, r, None))
}

fn build_unscaled(
    engines: &[CudaEngine],
    req: &GraphRequest<'_>,
    checkpoint: Option<&CheckpointOptions>,
) -> Result<KnnResult> {
    let (data, k, metric) = (req.data(), req.k(), req.metric());
    if let Dataset::Strings(s) = data {
        match checkpoint {
            Some(_) => {
                return Err(Error::invalid(
                    "checkpointed graphs on the GPU take vectors; build this one with --device cpu",
                ))
            }
            None if *metric == Metric::Levenshtein => return engines[0].strings_graph(s, k),
            // Strings under a vector metric: `vectors` refuses them below.
            None => {}
        }
    }
    let mut tr = engines[0].lock()?.phases();
    let set = vectors(data, metric)?;
    engines[0].check_cancel()?;
    let n = set.len();
    let stats = Mutex::new(Stats {
        device: engines
            .iter()
            .map(|e| format!("cuda:{} ({})", e.device, e.device_name()))
            .collect::<Vec<_>>()
            .join(", "),
        ..Stats::default()
    });
    let done = |rows: PassRows, stats: Mutex<Stats>| {
        let stats = stats.into_inner().unwrap_or_else(|e| e.into_inner());
        Ok(to_result(rows, k, metric, stats))
    };
    if k == 0 && checkpoint.is_none() {
        return done(vec![Vec::new(); n], stats);
    }
    // One triangle for all GPUs: the smallest edge any of them can hold.
    let edges = on_each(engines, |_, e, gpu| e.graph_edge(gpu, n, k))?;
    let edge = edges.into_iter().min().unwrap_or(1).max(1);
    let plan = engines[0].plan(metric, set)?;
    lock(&stats).arithmetic = plan.arithmetic();
    let job = driver::Build {
        data,
        metric,
        k,
        edge,
        max_pass_rows: usize::MAX,
        checkpoint,
    };
    let rows = driver::build(&job, || {
        tr.mark("graph: input checks and schedule");
        let upload = Instant::now();
        let ddevs = on_each(engines, |_, _, gpu| {
            // A clear refusal rather than an allocation failure half-way.
            stream::graph_fits(gpu, set, k, &plan)?;
            let ddev = DeviceSet::new(gpu, &plan, set)?;
            ddev.check(set, 0)?;
            Ok(ddev)
        })?;
        lock(&stats).transfer += upload.elapsed();
        tr.mark("graph: upload and prepare");
        // Under `--precision auto`, a pilot on the first GPU picks TF32, fp16x3 or fp32 tiles
        // for every GPU: the shares merge and prove under one plan.
        let plan = {
            let gpu = engines[0].lock()?;
            let ctx = engines[0].ctx(&gpu, &plan);
            let (ddev, budget) = (&ddevs[0], ctx.budget()?);
            let (base, asked) = graph_pilot(set, ddev, k);
            AutoChoice::default().plan(&ctx, base, asked, &budget)?.plan
        };
        lock(&stats).arithmetic = plan.arithmetic();
        tr.mark("graph: arithmetic pilot");
        Ok(engines
            .iter()
            .zip(ddevs)
            .enumerate()
            .map(|(g, (engine, ddev))| GpuBuild {
                engine,
                plan: plan.clone(),
                set,
                ddev: Some(ddev),
                metric,
                k,
                edge,
                first: g == 0,
                whole: engines.len() == 1 && checkpoint.is_none(),
                stats: &stats,
            })
            .collect())
    })?;
    done(rows, stats)
}

/// What a graph's arithmetic pilot measures: the set against itself, `k` neighbours a row.
fn graph_pilot<'a, 'd>(
    set: &'a VectorSet,
    ddev: &'a DeviceSet<'d>,
    k: usize,
) -> (pilot::Base<'a, 'd>, pilot::Asked<'a>) {
    let base = pilot::Base {
        rows: set,
        dev: ddev,
    };
    let asked = pilot::Asked {
        queries: set,
        k,
        self_pairs: true,
    };
    (base, asked)
}

fn lock(stats: &Mutex<Stats>) -> std::sync::MutexGuard<'_, Stats> {
    stats.lock().unwrap_or_else(|e| e.into_inner())
}

/// One GPU's side of a graph build for a driver over the core's [`TileGraph`] seam (the core's
/// in-process driver, or voisin-mpi's ranks): the set on its device for the whole build, the
/// build's plan (its arithmetic the route's), shares of dealt tile pairs, and (on the first GPU)
/// the proof of finished rows. A build with no neighbours to find keeps nothing on the device.
pub struct GpuBuild<'a> {
    engine: &'a CudaEngine,
    /// The build's plan, the same on every GPU (and every rank: [`GpuBuild::follow`]).
    plan: Numerics,
    set: &'a VectorSet,
    ddev: Option<DeviceSet<'a>>,
    metric: &'a Metric,
    /// Neighbours per row (capped at n − 1).
    k: usize,
    /// The tile edge this GPU takes, measured before the set went up.
    edge: usize,
    /// The first GPU's share time is the build's compute time (the GPUs run at once).
    first: bool,
    /// This GPU's one share is the whole build (one GPU, one pass): its lists stay on the
    /// device, where the build proves them.
    whole: bool,
    stats: &'a Mutex<Stats>,
}

impl<'a> GpuBuild<'a> {
    /// The set on the device, where the build has neighbours to find.
    fn ddev(&self) -> Result<&DeviceSet<'a>> {
        self.ddev
            .as_ref()
            .ok_or_else(|| Error::device("cuda: a graph build without its set (bug)"))
    }

    /// What every process's GPU of one build must run alike, as words: the arithmetic of its
    /// tiles, which `--precision auto` has the pilot on this GPU choose now (TF32, fp16x3 or
    /// fp32, as for one GPU, `pilot::AutoChoice`). Its list widths each GPU's list pilot sizes
    /// alike, from the same data.
    pub fn route(&self) -> Result<Vec<u32>> {
        let Some(ddev) = &self.ddev else {
            return Ok(vec![self.plan.arithmetic.code()]);
        };
        let gpu = self.engine.lock()?;
        let ctx = self.engine.ctx(&gpu, &self.plan);
        let budget = ctx.budget()?;
        let (base, asked) = graph_pilot(self.set, ddev, self.k);
        let plan = AutoChoice::default().plan(&ctx, base, asked, &budget)?.plan;
        Ok(vec![plan.arithmetic.code()])
    }

    /// Runs the build under the route another process's GPU chose ([`GpuBuild::route`]).
    pub fn follow(&mut self, route: &[u32]) -> Result<()> {
        let bad = || Error::device("cuda: a graph route that does not read back (bug)");
        let arithmetic = route
            .first()
            .and_then(|&c| Arithmetic::from_code(c))
            .ok_or_else(bad)?;
        if arithmetic != self.plan.arithmetic {
            if !self.plan.fp32_gemm() {
                return Err(bad());
            }
            self.plan = self.plan.clone().in_arithmetic(arithmetic);
        }
        Ok(())
    }
}

impl CudaEngine {
    /// This GPU's side of a graph build of `data` with `k` neighbours per row that other
    /// processes share (voisin-mpi's GPU ranks, one GPU each): the set uploaded for the whole
    /// build (unless there is nothing to find), the plan under this engine's options, the tile
    /// edge measured before the upload. Under `--precision auto` the build's arithmetic is one
    /// process's pilot's ([`GpuBuild::route`]), which every process follows
    /// ([`GpuBuild::follow`]) before its first share.
    pub fn graph_build<'a>(
        &'a self,
        data: &'a Dataset,
        k: usize,
        metric: &'a Metric,
        stats: &'a Mutex<Stats>,
    ) -> Result<GpuBuild<'a>> {
        let (set, kk) = graph_input(data, k, metric)?;
        let edge = self.graph_tile_edge(set.len(), k)?;
        let gpu = self.lock()?;
        let plan = self.plan(metric, set)?;
        let ddev = match kk {
            0 => None,
            _ => {
                let ddev = DeviceSet::new(&gpu, &plan, set)?;
                ddev.check(set, 0)?;
                Some(ddev)
            }
        };
        Ok(GpuBuild {
            engine: self,
            plan,
            set,
            ddev,
            metric,
            k: kk,
            edge,
            first: true,
            whole: false,
            stats,
        })
    }
}

impl TileGraph for GpuBuild<'_> {
    type Share = PartialGraph;

    fn tile_edge(&self, _: &GraphJob<'_>) -> Result<usize> {
        Ok(self.edge)
    }

    fn share(&self, _: &GraphJob<'_>, edge: usize, owns: &TileOwner<'_>) -> Result<PartialGraph> {
        let n = self.set.len();
        if self.k == 0 {
            return Ok(PartialGraph::new(n, 0, Lists::done(n, 0), 0));
        }
        let started = Instant::now();
        let gpu = self.engine.lock()?;
        let mut tr = gpu.phases();
        let part = graph::lists(
            &self.engine.ctx(&gpu, &self.plan),
            self.ddev()?,
            self.set,
            self.k,
            edge,
            owns,
            self.whole,
        )?;
        tr.mark("graph: device candidates");
        let mut stats = lock(self.stats);
        stats.distance_evals += part.distance_evals;
        if self.first {
            stats.compute += started.elapsed();
        }
        Ok(part)
    }

    fn absorb(&self, running: &mut Option<PartialGraph>, mine: PartialGraph) -> Result<()> {
        absorb(running, mine)
    }

    fn finish(
        &self,
        _: &GraphJob<'_>,
        share: &PartialGraph,
        rows: Range<usize>,
    ) -> Result<PassRows> {
        if self.k == 0 {
            return Ok(vec![Vec::new(); rows.len()]);
        }
        let gpu = self.engine.lock()?;
        let lists = share.lists.host()?;
        let raws = pass_raws(&lists, rows.clone());
        let which = GraphRows {
            first: rows.start,
            k: self.k,
            width: lists.width,
        };
        let mut stats = lock(self.stats);
        let mut tr = gpu.phases();
        let rows = graph::prove_rows(
            &self.engine.ctx(&gpu, &self.plan),
            self.ddev()?,
            self.set,
            self.metric,
            which,
            raws,
            &mut stats,
        );
        tr.mark("graph: prove, widen, exact re-rank");
        rows
    }

    /// One pass of every row: its lists are proved as they are, without a copy.
    fn finish_all(&self, _: &GraphJob<'_>, mut share: PartialGraph) -> Result<PassRows> {
        if self.k == 0 {
            return Ok(vec![Vec::new(); self.set.len()]);
        }
        // Counted when the shares were computed.
        share.distance_evals = 0;
        let gpu = self.engine.lock()?;
        let mut stats = lock(self.stats);
        let mut tr = gpu.phases();
        let rows = graph::prove(
            &self.engine.ctx(&gpu, &self.plan),
            self.ddev()?,
            self.set,
            self.metric,
            share,
            &mut stats,
        );
        tr.mark("graph: prove, widen, exact re-rank");
        rows
    }

    /// Out of device memory: the driver halves the tile edge, counted as a shrink.
    fn retry_smaller(&self, e: &Error) -> bool {
        let oom = context::is_oom(e);
        if oom {
            if let Ok(gpu) = self.engine.lock() {
                self.engine.counters.shrank(&gpu);
            }
        }
        oom
    }

    fn check_cancel(&self) -> Result<()> {
        self.engine.check_cancel()
    }

    fn partial_kind(&self, _: &GraphJob<'_>) -> Result<Option<String>> {
        Ok(Some(lists_kind(&self.plan)))
    }

    fn partial_bytes(&self, share: &PartialGraph, rows: &[Range<usize>]) -> Vec<u8> {
        lists_bytes(share, rows)
    }

    fn partial_share(
        &self,
        _: &GraphJob<'_>,
        rows: &[Range<usize>],
        b: &[u8],
    ) -> Result<PartialGraph> {
        lists_from_bytes(self.set.len(), self.k, rows, b)
    }
}

/// What a GPU's running lists are when a checkpoint keeps them: approximate lists whose
/// contract holds under the numeric plan that computed them (so only a build under the same
/// plan takes them back).
fn lists_kind(plan: &Numerics) -> String {
    format!("cuda approximate lists 1; {}", plan.checkpoint_name())
}

/// Little-endian: the slots per item (u64), then per item of `rows` in order its slots' keys
/// (f32), indices (u32, `u32::MAX` for an empty slot) and complete flag (one byte).
fn lists_bytes(share: &PartialGraph, rows: &[Range<usize>]) -> Vec<u8> {
    // Only a one-GPU build without checkpoints keeps lists on the device (`GpuBuild::whole`);
    // should they fail to come down, the bytes are empty and read back as truncated.
    let Ok(l) = share.lists.host() else {
        return Vec::new();
    };
    let w = l.width;
    let items: usize = rows.iter().map(|r| r.len()).sum();
    let mut out = Vec::with_capacity(8 + items * (8 * w + 1));
    out.extend_from_slice(&(w as u64).to_le_bytes());
    for r in rows.iter().flat_map(Range::clone) {
        out.extend(
            l.keys[r * w..(r + 1) * w]
                .iter()
                .flat_map(|k| k.to_le_bytes()),
        );
        out.extend(
            l.ids[r * w..(r + 1) * w]
                .iter()
                .flat_map(|i| i.to_le_bytes()),
        );
        out.push(u8::from(l.complete[r]));
    }
    out
}

/// A share of `n` items and lists of `k` whose items of `rows` hold what [`lists_bytes`] wrote,
/// the others nothing; every slot checked (an index below n or empty, a key not NaN).
fn lists_from_bytes(n: usize, k: usize, rows: &[Range<usize>], b: &[u8]) -> Result<PartialGraph> {
    let bad = |what: String| Error::invalid(format!("partial lists: {what}"));
    let w = b
        .get(..8)
        .map(|x| u64::from_le_bytes(x.try_into().expect("8 bytes")) as usize)
        .ok_or_else(|| bad("truncated".into()))?;
    let items: usize = rows.iter().map(|r| r.len()).sum();
    let per = w.checked_mul(8).and_then(|x| x.checked_add(1));
    if w == 0 || per.and_then(|p| p.checked_mul(items)) != Some(b.len() - 8) {
        return Err(bad("wrong size".into()));
    }
    let per = per.expect("checked");
    let mut lists = Lists::done(n, w);
    let word = |c: &[u8]| -> [u8; 4] { c.try_into().expect("4 bytes") };
    for (r, item) in rows
        .iter()
        .flat_map(Range::clone)
        .zip(b[8..].chunks_exact(per))
    {
        if r >= n {
            return Err(bad(format!("row {r} is outside the {n} items")));
        }
        let (keys, rest) = item.split_at(4 * w);
        let (ids, flag) = rest.split_at(4 * w);
        for (slot, (key, id)) in keys.chunks_exact(4).zip(ids.chunks_exact(4)).enumerate() {
            let (key, id) = (f32::from_le_bytes(word(key)), u32::from_le_bytes(word(id)));
            // Whole-row lists (radix selection) hold the item itself.
            if key.is_nan() || !((id as usize) < n || id == u32::MAX) {
                return Err(bad(format!("row {r} holds neighbour {id} with key {key}")));
            }
            lists.keys[r * w + slot] = key;
            lists.ids[r * w + slot] = id;
        }
        lists.complete[r] = match flag[0] {
            0 => false,
            1 => true,
            f => return Err(bad(format!("row {r} has completeness flag {f}"))),
        };
    }
    Ok(PartialGraph::new(n, k, lists, 0))
}

/// Merges a share into the running lists. Running lists read back from a checkpoint may have
/// another width than this run's shares (the pilot chose another list size): they are cut or
/// padded to it first.
fn absorb(running: &mut Option<PartialGraph>, mine: PartialGraph) -> Result<()> {
    *running = Some(match running.take() {
        Some(r) if r.lists.width() != mine.lists.width() => {
            let width = mine.lists.width();
            PartialGraph::merge(vec![rewidth(r, width)?, mine])?
        }
        Some(r) => PartialGraph::merge(vec![r, mine])?,
        None => mine,
    });
    Ok(())
}

/// `part` with `width` slots per item: each list keeps its `width` smallest keys and stays
/// complete only if it lost none, so the lists' contract (an item left out has a key at least
/// the list's largest) still holds.
fn rewidth(part: PartialGraph, width: usize) -> Result<PartialGraph> {
    let n = part.n;
    let mut lists = Lists::done(n, width);
    let held = part.lists.host()?;
    for (r, mut raw) in pass_raws(&held, 0..n).into_iter().enumerate() {
        if raw.cands.len() > width {
            raw.cands
                .sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            raw.cands.truncate(width);
            raw.complete = false;
        }
        lists.set(r, raw);
    }
    Ok(PartialGraph::new(n, part.k, lists, part.distance_evals))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::Arithmetic;
    use voisin::data::ElemType;

    /// A checkpoint keeps the GPU's running lists under the name of the plan that computed them,
    /// and takes them back only under the same name: the names stay what builds before wrote.
    #[test]
    fn partial_kinds_keep_the_names_checkpoints_hold() {
        let b = VectorSet::from_f32(2, 3, vec![0.5, -1.25, 3.0, 2.0, 0.0, 1.0]).unwrap();
        let b64 = VectorSet::from_f64(2, 3, vec![0.1, -1.25, 3.0, 2.0, 0.3, 1.0]).unwrap();
        let want = [
            "cuda approximate lists 1; Plan { key: L2, tile: Gemm, dim: 3, shift: Some([1.25, -0.625, 2.0]), centre_rows: false, unit: false, exact_code: Some(0), distance_form: Some(2), rel: 0.0, tiny: 8.228460455756013e-38, gamma: 1.3113021850585938e-6, precision: Fp32, storage: F32, input: 0.0, flush: 0.0, widen: None }",
            "cuda approximate lists 1; Plan { key: L2, tile: Gemm, dim: 3, shift: Some([1.25, -0.625, 2.0]), centre_rows: false, unit: false, exact_code: Some(0), distance_form: Some(2), rel: 0.0, tiny: 8.228460455756013e-38, gamma: 2.6226043701171875e-6, precision: Tf32, storage: F32, input: 0.0020517961580555732, flush: 2.2923501567644642e-23, widen: None }",
            "cuda approximate lists 1; Plan { key: OneMinus, tile: Gemm, dim: 3, shift: None, centre_rows: false, unit: true, exact_code: Some(2), distance_form: Some(0), rel: 0.0, tiny: 8.228460455756013e-38, gamma: 2.86102294921875e-6, precision: Fp16x3, storage: F32, input: 7.743474345501313e-7, flush: 2.4069676646026873e-23, widen: None }",
            "cuda approximate lists 1; Plan { key: NegDot, tile: Gemm, dim: 3, shift: None, centre_rows: false, unit: false, exact_code: Some(1), distance_form: Some(1), rel: 0.0, tiny: 8.228460455756013e-38, gamma: 2.6226043701171875e-6, precision: Fp16, storage: F16, input: 0.0, flush: 0.0001057159916729051, widen: None }",
            "cuda approximate lists 1; Plan { key: L2Int, tile: Gemm, dim: 3, shift: Some([128.0, 128.0, 128.0]), centre_rows: false, unit: false, exact_code: Some(0), distance_form: Some(0), rel: 0.0, tiny: 8.228460455756013e-38, gamma: 1.0728836059570313e-6, precision: Int8, storage: U8, input: 0.0, flush: 0.0, widen: None }",
            "cuda approximate lists 1; Plan { key: Direct, tile: Simt(0, 1.0), dim: 3, shift: None, centre_rows: false, unit: false, exact_code: Some(4), distance_form: Some(0), rel: 7.152559931001639e-7, tiny: 8.228460455756013e-38, gamma: 1.3113021850585938e-6, precision: Fp32, storage: F32, input: 0.0, flush: 0.0, widen: None }",
            "cuda approximate lists 1; Plan { key: OneMinus, tile: Gemm, dim: 3, shift: None, centre_rows: true, unit: true, exact_code: None, distance_form: None, rel: 0.0, tiny: 8.228460455756013e-38, gamma: 1.3113021850585938e-6, precision: Fp32, storage: F32, input: 0.0, flush: 0.0, widen: Some(Widening { metric: Correlation, queries: Rounding { l2: 1.1920928966180373e-8, l1: 1.1920928966180373e-8, linf: 1.1920928966180355e-8, unit: 1.9731662148930424e-8 }, base: Rounding { l2: 1.1920928966180373e-8, l1: 1.1920928966180373e-8, linf: 1.1920928966180355e-8, unit: 1.9731662148930424e-8 }, alpha: 0.0 }) }",
        ];
        // The plans `auto` (or the precision named) resolves to for these sets.
        let cases = [
            (Metric::Euclidean, &b, Arithmetic::Fp32, ElemType::F32),
            (Metric::Euclidean, &b, Arithmetic::Tf32, ElemType::F32),
            (Metric::Cosine, &b, Arithmetic::Fp16x3, ElemType::F32),
            (Metric::InnerProduct, &b, Arithmetic::Fp16, ElemType::F16),
            (Metric::SqEuclidean, &b, Arithmetic::Int8, ElemType::U8),
            (Metric::Cityblock, &b, Arithmetic::Fp32, ElemType::F32),
            (Metric::Correlation, &b64, Arithmetic::Fp32, ElemType::F64),
        ];
        for ((m, set, a, e), want) in cases.into_iter().zip(want) {
            let plan = Numerics::new(&m, set).on_storage(e, e);
            let plan = match a {
                Arithmetic::Fp16 | Arithmetic::Int8 => plan.on_own_cores(),
                a => plan.in_arithmetic(a),
            };
            let plan = plan.with_inputs(&m, set, set);
            assert_eq!(lists_kind(&plan), want, "{m} {a} {e:?}");
        }
    }
}
