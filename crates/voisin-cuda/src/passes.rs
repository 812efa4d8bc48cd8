//! Checkpointed k-NN graphs on one GPU or several (SPEC §6): the rows are cut into the passes of
//! the core's checkpoint format ([`voisin::cpu::checkpoint`]: same manifest, same pass files,
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
//! [`Checkpoint::open_aligned`]).
//!
//! Resuming: the column candidates that finished passes handed on were in memory only, so a
//! resumed build first measures the pairs between finished and open passes for the open side
//! (one catch-up share); pairs between two finished passes are skipped.
//!
//! Several GPUs: every GPU holds the whole set; each share's tile pairs are dealt cyclically
//! over them (as `MultiGpu::graph` does), their lists merged, and the proof runs on the first.
//! Several processes (voisin-mpi's GPU ranks) follow the same schedule through [`pass_steps`],
//! [`pass_tile_edge`], [`CudaEngine::graph_tiles`] and [`CudaEngine::graph_rows`].
//!
//! Memory: the running share holds `width` candidates (8 bytes each) per item on the host, the
//! same lists a one-shot multi-GPU graph merges once.
//!
//! Owns the pass schedule on the device; the tiles, selection and proof are the engine's, the
//! files are the core's.

use std::ops::Range;
use std::time::Instant;

use rayon::prelude::*;
use voisin::cpu::checkpoint::{Checkpoint, CheckpointOptions, GraphCheckpoints, Job};
use voisin::cpu::PassStore;
use voisin::{Dataset, Error, KnnResult, Metric, Result, Stats};

use crate::device_set::DeviceSet;
use crate::graph::{cyclic_share, Lists};
use crate::knn::Raw;
use crate::multi::on_each;
use crate::{context, graph_input, to_result, CudaEngine, GraphRows, MultiGpu, PartialGraph};

impl GraphCheckpoints for CudaEngine {
    fn graph_checkpointed(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        checkpoint: &CheckpointOptions,
    ) -> Result<KnnResult> {
        build(std::slice::from_ref(self), data, k, metric, checkpoint)
    }
}

impl GraphCheckpoints for MultiGpu {
    fn graph_checkpointed(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        checkpoint: &CheckpointOptions,
    ) -> Result<KnnResult> {
        build(self.engines(), data, k, metric, checkpoint)
    }
}

/// Which tile pairs a share computes, by the passes of their row and column tiles.
type PassPairs<'a> = dyn Fn(usize, usize) -> bool + Sync + 'a;

/// The checkpointed graph of `data` on `engines` (one or more GPUs holding the whole set).
fn build(
    engines: &[CudaEngine],
    data: &Dataset,
    k: usize,
    metric: &Metric,
    opts: &CheckpointOptions,
) -> Result<KnnResult> {
    if matches!(data, Dataset::Strings(_)) {
        return Err(Error::invalid(
            "checkpointed graphs on the GPU take vectors; build this one with --device cpu",
        ));
    }
    let (set, k) = graph_input(data, k, metric)?;
    let n = set.len();
    let mut stats = Stats {
        device: engines
            .iter()
            .map(|e| format!("cuda:{} ({})", e.device, e.device_name()))
            .collect::<Vec<_>>()
            .join(", "),
        ..Stats::default()
    };
    // One triangle for all GPUs: the smallest edge any of them can hold.
    let edges = engines
        .iter()
        .map(|e| e.graph_tile_edge(n, k))
        .collect::<Result<Vec<_>>>()?;
    let edge = pass_alignment(edges.into_iter().min().unwrap_or(1));
    let job = Job::describe(data, metric, k);
    let mut cp = Checkpoint::open_aligned(opts, &job, k, n, edge)?;
    if k == 0 {
        return Ok(to_result(vec![Vec::new(); n], k, metric, stats));
    }
    let passes = cp.passes(n);
    let rpp = cp.layout().rows_per_pass();
    // Tiles must not straddle passes (a resumed CPU checkpoint may ask for smaller tiles than a
    // fresh GPU one).
    let mut t = pass_tile_edge(edge, rpp, passes.len());
    let loaded = cp.load_all(n)?;
    let done: Vec<bool> = loaded.iter().map(Option::is_some).collect();
    let mut rows: Vec<Vec<(f64, u32)>> = Vec::with_capacity(n);
    for (got, r) in loaded.into_iter().zip(&passes) {
        rows.extend(got.unwrap_or_else(|| vec![Vec::new(); r.len()]));
    }
    if done.iter().all(|&d| d) {
        return Ok(to_result(rows, k, metric, stats));
    }

    let first = &engines[0];
    let plan = first.plan(metric, set);
    let mut tr = Instant::now();
    let ddevs = on_each(engines, |_, _, gpu| DeviceSet::new(gpu, &plan, set))?;
    stats.transfer += tr.elapsed();
    crate::trace("checkpointed graph: upload and prepare", &mut tr);
    let pass_of = |item: usize| item / rpp;
    // One share: the tile pairs (I, J), I ≤ J, whose passes `pairs` accepts, dealt over the GPUs.
    let share = |pairs: &PassPairs<'_>, t: &mut usize, stats: &mut Stats| -> Result<PartialGraph> {
        let (gpus, started) = (engines.len(), Instant::now());
        let merged = loop {
            let edge = *t;
            let nt = n.div_ceil(edge);
            let got = on_each(engines, |g, e, gpu| {
                let dealt = cyclic_share(nt, gpus, g);
                let owns =
                    |i: usize, j: usize| pairs(pass_of(i * edge), pass_of(j * edge)) && dealt(i, j);
                e.graph_lists(gpu, &plan, &ddevs[g], set, k, edge, &owns)
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
    let mut running: Option<PartialGraph> = None;
    for step in pass_steps(&done) {
        let mine = share(&|pi, pj| step.takes(&done, pi, pj), &mut t, &mut stats)?;
        let merged = PartialGraph::merge(running.take().into_iter().chain([mine]).collect())?;
        let Some(p) = step.proves else {
            crate::trace("checkpointed graph: catch-up with finished passes", &mut tr);
            running = Some(merged);
            continue;
        };
        let range = passes[p].clone();
        let raws = pass_raws(&merged.lists, range.clone());
        let rows_of = GraphRows {
            first: range.start,
            k,
            width: merged.lists.width,
        };
        let finished = {
            let gpu = first.lock()?;
            first.prove_rows(
                &gpu, &plan, &ddevs[0], set, metric, rows_of, raws, &mut stats,
            )?
        };
        crate::trace(&format!("checkpointed graph: pass {p}"), &mut tr);
        first.check_cancel()?;
        cp.save(p, (range.start, range.end), &finished)?;
        rows.splice(range, finished);
        running = Some(merged);
    }
    stats.distance_evals += running.map_or(0, |r| r.distance_evals);
    Ok(to_result(rows, k, metric, stats))
}

/// One share of a build: the tile pairs it takes, by the passes of their row and column tiles,
/// and the pass whose rows are final once it is merged. Public so that drivers over processes
/// (voisin-mpi's GPU ranks) follow the same schedule.
pub struct PassStep {
    /// `None` for the catch-up: finished passes' rows against open passes' columns.
    pub proves: Option<usize>,
}

impl PassStep {
    /// Whether this share computes a tile pair (I, J), I ≤ J, of row pass `pi`, column pass `pj`.
    pub fn takes(&self, done: &[bool], pi: usize, pj: usize) -> bool {
        match self.proves {
            None => done[pi] && !done[pj],
            Some(p) => pi == p,
        }
    }
}

/// The shares of a build whose passes `done` are finished, in order: the catch-up when some
/// are, then one per open pass. Pass p's share takes its rows against themselves and every
/// later item; the pairs with earlier items came with earlier shares (or the catch-up), so its
/// rows have met every other item once it is merged, and every pair is measured once.
pub fn pass_steps(done: &[bool]) -> Vec<PassStep> {
    let catch_up = done.iter().any(|&d| d).then_some(PassStep { proves: None });
    catch_up
        .into_iter()
        .chain(
            (0..done.len())
                .filter(|&p| !done[p])
                .map(|p| PassStep { proves: Some(p) }),
        )
        .collect()
}

/// The largest power of two at most `x` (1 for 0): the tile size a fresh checkpoint's passes
/// are whole multiples of ([`Checkpoint::open_aligned`]) for a GPU tile edge `x`.
pub fn pass_alignment(x: usize) -> usize {
    1 << (usize::BITS - 1 - x.max(1).leading_zeros())
}

/// The tile edge of a build in `passes` passes of `rows_per_pass` rows on GPUs whose tile
/// edge is `edge`: at most `edge`, and a divisor of the pass size so that no tile straddles
/// two passes.
pub fn pass_tile_edge(edge: usize, rows_per_pass: usize, passes: usize) -> usize {
    let edge = pass_alignment(edge);
    if passes <= 1 {
        edge
    } else {
        edge.min(rows_per_pass & rows_per_pass.wrapping_neg())
    }
}

impl CudaEngine {
    /// The final rows `rows` of the graph of `data` from a merged share (`part`) in which those
    /// rows have met every other item: the rows of one pass of a checkpointed build whose
    /// shares ([`pass_steps`], [`CudaEngine::graph_tiles`]) were computed elsewhere (other
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
        self.prove_rows(&gpu, &plan, &ddev, set, metric, which, raws, &mut stats)
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

#[cfg(test)]
mod tests {
    use super::{pass_alignment, pass_steps, pass_tile_edge};

    /// Every pair of items with an open pass's item is measured exactly once over the shares,
    /// and before that pass is proved; pairs of two finished passes are never measured. Tile
    /// pairs (I, J), I ≤ J, are modelled item by item, tiles dividing the pass size.
    #[test]
    fn shares_measure_each_needed_pair_once_and_in_time() {
        for (n, t, rpp) in [
            (10usize, 1usize, 3usize),
            (23, 2, 4),
            (23, 4, 8),
            (17, 3, 3),
            (9, 9, 9),
        ] {
            let passes = n.div_ceil(rpp);
            for mask in 0..1u32 << passes {
                let done: Vec<bool> = (0..passes).map(|p| mask >> p & 1 == 1).collect();
                let pass_of = |a: usize| a / rpp;
                let all = pass_steps(&done);
                let mut count = std::collections::BTreeMap::<(usize, usize), u32>::new();
                let mut proved = vec![false; passes];
                for step in &all {
                    let owned =
                        |i: usize, j: usize| step.takes(&done, pass_of(i * t), pass_of(j * t));
                    for a in 0..n {
                        for b in a + 1..n {
                            if owned(a / t, b / t) {
                                *count.entry((a, b)).or_default() += 1;
                            }
                        }
                    }
                    if let Some(p) = step.proves {
                        assert!(!done[p] && !proved[p], "pass {p} proved twice or when done");
                        proved[p] = true;
                        // Its rows have met every other item once.
                        for a in (0..n).filter(|&a| pass_of(a) == p) {
                            for b in (0..n).filter(|&b| b != a) {
                                let (x, y) = (a.min(b), a.max(b));
                                assert_eq!(
                                    count.get(&(x, y)),
                                    Some(&1),
                                    "n {n} t {t} done {done:?} pair {x},{y}"
                                );
                            }
                        }
                    }
                }
                assert!(proved.iter().zip(&done).all(|(p, d)| p != d), "{done:?}");
                for a in 0..n {
                    for b in a + 1..n {
                        let needed = !done[pass_of(a)] || !done[pass_of(b)];
                        let got = count.get(&(a, b)).copied().unwrap_or(0);
                        assert_eq!(got, u32::from(needed), "{done:?} pair {a},{b}");
                    }
                }
            }
        }
    }

    #[test]
    fn powers_of_two_below() {
        let got: Vec<usize> = [0, 1, 2, 3, 511, 512, 513, 16384, 20000]
            .iter()
            .map(|&x| pass_alignment(x))
            .collect();
        assert_eq!(got, [1, 1, 2, 2, 256, 512, 512, 16384, 16384]);
        // Tiles divide the pass size; one pass takes the whole edge.
        assert_eq!(pass_tile_edge(16384, 4096 * 3, 5), 4096);
        assert_eq!(pass_tile_edge(3000, 512 * 5, 2), 512);
        assert_eq!(pass_tile_edge(300, 1024, 9), 256);
        assert_eq!(pass_tile_edge(3000, 1 << 20, 1), 2048);
    }
}
