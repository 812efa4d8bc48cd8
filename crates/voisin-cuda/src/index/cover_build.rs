//! The cover tree built on the GPU (docs/design/gpu-cover-tree.md, after [SharmaJoshi]'s
//! breadth-first construction): voisin-index's level loop (`CoverTree::build_with`) with every
//! level's greedy passes run by `kernels/index/cover_net.cu` ([`DeviceNets`]), the items
//! resident on the device for the whole build.
//!
//! Per level the host sends the far items of every active node (a slot) with their distances to
//! the node and gets back each item's new node and distance: 16 bytes an item each way. Slots of
//! at most [`BLOCK_MAX`] items take one block each (the pass inside the block, no launch per new
//! node); larger ones (the top levels' few big nodes) advance one new node per launch over the
//! whole grid, [`ROUNDS_PER_CHECK`] launches between looks at whether any is left.
//!
//! Exactness: the distances are the CPU's to the bit (index/cover.cuh), except minkowski's,
//! which the device only uses to decide pairs clearly on one side of the radius; a slot with a
//! pair too close to call, or with two strings over 64 chars, is redone on the CPU
//! (`CpuNets`), and under minkowski every distance the device stored is measured again on the
//! host. The tree is the CPU build's, node for node.

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use voisin::{Dataset, Error, Metric, Result};
use voisin_index::{
    CoverTree, CpuNets, DatasetIndex, Index, NetBatch, NetOracle, Nets, Params, Space, StringSpace,
    VectorSpace,
};

use super::oracle::pack;
use crate::engine::CudaEngine;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// Builds a cover tree of base `base` over `data` under `metric` on the engine's GPU: the same
/// tree and the same index file as `DatasetIndex::build(data, metric, Kind::Cover, ..)` on the
/// CPU. Vectors take euclidean, cityblock, chebyshev or minkowski (p >= 1), strings
/// levenshtein; user metrics are refused (they run on the CPU).
pub(crate) fn build_cover(
    engine: &CudaEngine,
    data: &Dataset,
    metric: Metric,
    base: f64,
) -> Result<DatasetIndex> {
    Params {
        base,
        ..Params::default()
    }
    .check()?;
    Ok(match data {
        Dataset::Vectors(v) => {
            let space = VectorSpace::new(v, metric)?;
            let nets = DeviceNets::vectors(engine, &space)?;
            let tree = CoverTree::build_with(space.clone(), base, &nets)?;
            nets.report();
            DatasetIndex::Vectors(Index::Cover(tree))
        }
        Dataset::Strings(s) => {
            let space = StringSpace::new(s.clone(), metric)?;
            let nets = DeviceNets::strings(engine, &space)?;
            let tree = CoverTree::build_with(space.clone(), base, &nets)?;
            nets.report();
            DatasetIndex::Strings(Index::Cover(tree))
        }
    })
}

/// Slots of at most this many items run in one block (cover_net_block_*); larger ones by
/// rounds over the grid.
const BLOCK_MAX: usize = 8192;
/// Round launches between two looks at whether any big slot has items left.
const ROUNDS_PER_CHECK: u32 = 32;
/// cover_net.cu's NET_THREADS and NET_FREE; COVER_MINKOWSKI of index/cover.cuh.
const THREADS: u32 = 256;
const FREE: u32 = u32::MAX;
const MINKOWSKI: i32 = -1;

/// The items on the device.
enum DeviceItems {
    /// Row-major f32 rows; `code` an EX_* code or [`MINKOWSKI`] with order `p`.
    Vectors {
        rows: CudaSlice<f32>,
        dim: i32,
        code: i32,
        p: f64,
    },
    Strings {
        chars: CudaSlice<u32>,
        offs: CudaSlice<u32>,
    },
}

/// The greedy passes on one GPU.
pub(crate) struct DeviceNets<'a, S: Space> {
    engine: &'a CudaEngine,
    space: &'a S,
    on: DeviceItems,
    block: CudaFunction,
    round: CudaFunction,
    /// What the build did, for the GPU's probe ([`DeviceNets::report`]).
    tally: std::sync::Mutex<CoverTally>,
}

/// What a cover tree's device passes did, reported to the GPU's probe at the end of a build.
#[derive(Default)]
struct CoverTally {
    levels: u32,
    /// Far items sent to the device.
    items: u64,
    /// Round launches of the big slots.
    rounds: u64,
    /// Seconds on the device, copies included.
    device_s: f64,
    /// Seconds redoing slots on the host.
    host_s: f64,
}

impl<'a> DeviceNets<'a, VectorSpace> {
    /// The passes over `space`'s rows, uploaded now: euclidean, cityblock, chebyshev or
    /// minkowski (p >= 1); other metrics are refused.
    pub(crate) fn vectors(engine: &'a CudaEngine, space: &'a VectorSpace) -> Result<Self> {
        let (code, p) = match space.metric() {
            Metric::Euclidean => (abi::EX_SQEUCLIDEAN, 0.0),
            Metric::Cityblock => (abi::EX_CITYBLOCK, 0.0),
            Metric::Chebyshev => (abi::EX_CHEBYSHEV, 0.0),
            Metric::Minkowski(p) => (MINKOWSKI, *p),
            m => return Err(refused(m)),
        };
        let gpu = engine.lock()?;
        Ok(DeviceNets {
            engine,
            space,
            on: DeviceItems::Vectors {
                rows: gpu.upload(space.values())?,
                dim: space.dim() as i32,
                code,
                p,
            },
            block: gpu.k.cover_net_block_vec()?.clone(),
            round: gpu.k.cover_net_round_vec()?.clone(),
            tally: Default::default(),
        })
    }
}

impl<'a> DeviceNets<'a, StringSpace> {
    /// The passes over `space`'s strings, uploaded now (levenshtein).
    pub(crate) fn strings(engine: &'a CudaEngine, space: &'a StringSpace) -> Result<Self> {
        if *space.metric() != Metric::Levenshtein {
            return Err(refused(space.metric()));
        }
        let (chars, offs) = pack(space.strings())?;
        let gpu = engine.lock()?;
        Ok(DeviceNets {
            engine,
            space,
            on: DeviceItems::Strings {
                chars: gpu.upload(&chars)?,
                offs: gpu.upload(&offs)?,
            },
            block: gpu.k.cover_net_block_lev()?.clone(),
            round: gpu.k.cover_net_round_lev()?.clone(),
            tally: Default::default(),
        })
    }
}

fn refused(metric: &Metric) -> Error {
    Error::invalid(format!(
        "the GPU builds cover trees under euclidean, cityblock, chebyshev, minkowski and \
         levenshtein, not {metric} (build on the CPU)"
    ))
}

/// A level on the device: the batch and the kernels' outputs, in the order of cover_net.cu's
/// NET_PARAMS.
struct Level {
    sep: f64,
    starts: CudaSlice<u32>,
    items: CudaSlice<u32>,
    dists: CudaSlice<f64>,
    taken: CudaSlice<u32>,
    dist: CudaSlice<f64>,
    flags: CudaSlice<u32>,
    evals: CudaSlice<u64>,
}

impl Level {
    fn push<'b>(&'b mut self, l: &mut cudarc::driver::LaunchArgs<'b>) {
        l.arg(&self.sep)
            .arg(&self.starts)
            .arg(&self.items)
            .arg(&self.dists)
            .arg(&mut self.taken)
            .arg(&mut self.dist)
            .arg(&mut self.flags)
            .arg(&mut self.evals);
    }
}

/// What the kernels left: per position the new node's position + 1 and the distance, per slot
/// whether the host must redo it, and the evaluations.
struct Answer {
    taken: Vec<u32>,
    dist: Vec<f64>,
    flags: Vec<u32>,
    evals: u64,
}

impl<S: Space> DeviceNets<'_, S> {
    /// Reports the tally to the GPU's probe (`runtime/probe.rs`; none by default): the device's
    /// and the host's time as phases, the counts as a note.
    fn report(&self) {
        let Ok(gpu) = self.engine.lock() else {
            return;
        };
        let t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        let phases = gpu.phases();
        let secs = |s: f64| std::time::Duration::from_secs_f64(s.max(0.0));
        phases.report("cover build: device passes", secs(t.device_s));
        phases.report("cover build: slots redone on the host", secs(t.host_s));
        phases.note(format_args!(
            "cover build on the GPU: {} levels, {} far items, {} round launches",
            t.levels, t.items, t.rounds
        ));
    }

    /// The item arguments every kernel starts with.
    fn push_items<'b>(&'b self, l: &mut cudarc::driver::LaunchArgs<'b>, zero: &'b f64) {
        match &self.on {
            DeviceItems::Vectors { rows, dim, code, p } => {
                l.arg(rows).arg(dim).arg(code).arg(p).arg(zero);
            }
            DeviceItems::Strings { chars, offs } => {
                l.arg(chars).arg(offs);
            }
        }
    }

    fn run(&self, gpu: &Gpu, batch: &NetBatch<'_>) -> Result<Answer> {
        let s = &gpu.stream;
        let n = batch.items.len();
        let slots = batch.slots();
        let up = || dev("copying a level of the cover tree to the device");
        let starts: Vec<u32> = batch.starts.iter().map(|&x| x as u32).collect();
        let (mut small, mut bigs, mut bstarts) = (Vec::new(), Vec::new(), vec![0u32]);
        for k in 0..slots {
            let m = batch.range(k).len();
            if m > BLOCK_MAX {
                bigs.push(k as u32);
                bstarts.push(bstarts.last().copied().unwrap_or(0) + m as u32);
            } else if m > 0 {
                small.push(k as u32);
            }
        }
        let alloc = || dev("allocating a level of the cover tree");
        let mut level = Level {
            sep: batch.sep,
            starts: gpu.upload(&starts)?,
            items: gpu.upload(batch.items)?,
            dists: gpu.upload(batch.dists)?,
            // Zero: every position free (both kernels read it so).
            taken: s.alloc_zeros::<u32>(n.max(1)).map_err(alloc())?,
            // SAFETY: every position is written by the kernels (a slot's pass ends with every
            // item taken; a flagged slot's answers are not read).
            dist: unsafe { s.alloc::<f64>(n.max(1)) }.map_err(alloc())?,
            flags: s.alloc_zeros::<u32>(slots.max(1)).map_err(alloc())?,
            evals: s.alloc_zeros::<u64>(1).map_err(alloc())?,
        };
        let zero: f64 = std::iter::empty::<f64>().sum();
        if !small.is_empty() {
            let d_small = s.clone_htod(&small).map_err(up())?;
            // SAFETY: scratch the block kernel fills before it reads (its slot's range).
            let mut list = unsafe { s.alloc::<u32>(n.max(1)) }.map_err(alloc())?;
            let mut l = s.launch_builder(&self.block);
            self.push_items(&mut l, &zero);
            l.arg(&d_small).arg(&mut list);
            level.push(&mut l);
            let cfg = LaunchConfig {
                grid_dim: (small.len() as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: matches cover_net_block_* in kernels/index/cover_net.cu: one block per
            // listed slot, slots' ranges within the batch, items below the set's size (they
            // come from the level loop over this set), every buffer as long as the batch.
            unsafe { l.launch(cfg) }.map_err(dev("cover_net_block"))?;
        }
        if !bigs.is_empty() {
            let k = bigs.len() as u32;
            let total = *bstarts.last().unwrap_or(&0) as usize;
            let d_bigs = s.clone_htod(&bigs).map_err(up())?;
            let d_bstarts = s.clone_htod(&bstarts).map_err(up())?;
            let mut cur0 = vec![FREE; 3 * k as usize];
            cur0[..k as usize].fill(0);
            let mut cur = s.clone_htod(&cur0).map_err(up())?;
            let blocks = total.div_ceil(THREADS as usize).clamp(1, 4096) as u32;
            let cfg = LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut r = 0u32;
            let rounds = loop {
                for _ in 0..ROUNDS_PER_CHECK {
                    let mut l = s.launch_builder(&self.round);
                    self.push_items(&mut l, &zero);
                    l.arg(&d_bigs).arg(&d_bstarts).arg(&k).arg(&mut cur).arg(&r);
                    level.push(&mut l);
                    // SAFETY: matches cover_net_round_* in kernels/index/cover_net.cu: `cur`
                    // holds 3 K entries, bstarts K + 1 offsets over the big slots' sizes, the
                    // rest as for the block kernel.
                    unsafe { l.launch(cfg) }.map_err(dev("cover_net_round"))?;
                    r += 1;
                }
                // The new nodes of round r (built by round r - 1): none left means done.
                let at = (r % 3 * k) as usize;
                let now = gpu.download(&cur.slice(at..at + k as usize))?;
                if now.iter().all(|&c| c == FREE) {
                    break r;
                }
            };
            self.tally.lock().unwrap_or_else(|p| p.into_inner()).rounds += u64::from(rounds);
        }
        Ok(Answer {
            taken: gpu.download(&level.taken.slice(..n))?,
            dist: gpu.download(&level.dist.slice(..n))?,
            flags: gpu.download(&level.flags.slice(..slots))?,
            evals: gpu.download(&level.evals.slice(..))?[0],
        })
    }
}

impl<S: Space> NetOracle for DeviceNets<'_, S> {
    fn nets(&self, batch: &NetBatch<'_>) -> Result<Nets> {
        let n = batch.items.len();
        if batch.items.iter().any(|&x| x as usize >= self.space.len()) || n >= u32::MAX as usize {
            return Err(Error::device(
                "a level of the cover tree names an item outside the set",
            ));
        }
        let t = std::time::Instant::now();
        let a = {
            let gpu = self.engine.lock()?;
            self.run(&gpu, batch)?
        };
        let device = t.elapsed().as_secs_f64();
        let mut out = Nets {
            owner: a.taken.iter().map(|&t| t.wrapping_sub(1)).collect(),
            dist: a.dist,
            evals: a.evals,
        };
        // The slots the device left to the host, redone as one batch on CPU threads.
        let t = std::time::Instant::now();
        let redo: Vec<usize> = (0..batch.slots()).filter(|&k| a.flags[k] != 0).collect();
        if !redo.is_empty() {
            let mut starts = vec![0usize];
            let (mut items, mut dists) = (Vec::new(), Vec::new());
            for &k in &redo {
                let r = batch.range(k);
                items.extend_from_slice(&batch.items[r.clone()]);
                dists.extend_from_slice(&batch.dists[r]);
                starts.push(items.len());
            }
            let sub = NetBatch {
                sep: batch.sep,
                starts: &starts,
                items: &items,
                dists: &dists,
            };
            let cpu = CpuNets(self.space).nets(&sub)?;
            out.evals += cpu.evals;
            for (i, &k) in redo.iter().enumerate() {
                let r = batch.range(k);
                out.owner[r.clone()].copy_from_slice(&cpu.owner[sub.range(i)]);
                out.dist[r].copy_from_slice(&cpu.dist[sub.range(i)]);
            }
        }
        {
            let mut tally = self.tally.lock().unwrap_or_else(|p| p.into_inner());
            tally.levels += 1;
            tally.items += n as u64;
            tally.device_s += device;
            tally.host_s += t.elapsed().as_secs_f64();
        }
        // Minkowski: the device decided, the host measures what is stored (the slots redone
        // above already hold the host's distances).
        if matches!(
            self.on,
            DeviceItems::Vectors {
                code: MINKOWSKI,
                ..
            }
        ) {
            let space = self.space;
            let Nets { owner, dist, .. } = &mut out;
            let mut rest: &mut [f64] = dist;
            let mut slots = Vec::with_capacity(batch.slots());
            for k in 0..batch.slots() {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(batch.range(k).len());
                slots.push((k, head));
                rest = tail;
            }
            slots
                .into_par_iter()
                .filter(|(k, _)| a.flags[*k] == 0)
                .for_each(|(k, d)| {
                    let r = batch.range(k);
                    for (q, d) in d.iter_mut().enumerate() {
                        let c = owner[r.start + q] as usize;
                        if c != q && c < r.len() {
                            let x = batch.items[r.start + c] as usize;
                            *d = space.distance(x, batch.items[r.start + q] as usize);
                        }
                    }
                });
        }
        Ok(out)
    }
}
