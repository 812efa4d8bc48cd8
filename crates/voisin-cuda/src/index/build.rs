//! Indexes built on the GPU (docs/design/gpu-index-build.md): the List of Clusters' steps and the
//! SSS pivot selection and table run with the device's distance kernels
//! (kernels/index/lc_build.cu); the result is a `voisin-index` structure assembled from its parts
//! and validated by the CPU build's own checks, so it saves to the same index file and answers on
//! the CPU or the GPU. Over strings (levenshtein) the List of Clusters runs the same device steps
//! with edit distances (Myers' bit vectors), unless two strings are longer than 64 chars; then
//! it, and the SSS always, run the CPU's heuristics on the host with every distance batch
//! measured by the device pair oracle.
//!
//! Under euclidean, cityblock and chebyshev every distance is the exact key of index/space.cuh,
//! bit-identical to the host's, and the GPU build is the CPU build (same centers, members, order
//! and radii; same pivots and table). Under minkowski:P the device's distances are approximations
//! (its `pow`): they decide the centers, members and pivots, and the host re-measures the stored
//! distances exactly, so the index is an equally valid variant (see the design note).

use cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use voisin::{Dataset, Error, Metric, Result};
use voisin_index::lc::Cluster;
use voisin_index::{
    DatasetIndex, Index, Kind, ListOfClusters, Params, Space, Sss, StringSpace, VectorSpace,
};

use super::oracle::DeviceOracle;
use super::schedule::{check_dim, dimension_major, metric_code, upload};
use crate::engine::CudaEngine;
use crate::runtime::context::{dev, Gpu};

/// Threads of the List of Clusters step kernels (index/lc_build.cu LCB_THREADS).
const THREADS: u32 = 1024;
/// Bins of the step's key histogram (LCB_BINS).
const BINS: usize = 8192;
/// The largest cluster the GPU builds: its members are ranked in the shared memory of one block
/// (LCB_SORT pairs).
pub const MAX_CLUSTER: usize = 1024;
/// Blocks at most of a step's two kernels (grid-stride over the slots; two per SM of an H100).
const STEP_BLOCKS: usize = 264;
/// Compaction of the items left below this many slots is not worth its round trip.
const COMPACT_FROM: usize = 4096;
/// Static shared memory of lc_build_to_refs (none: the reference row is dynamic).
const TO_REFS_STATIC_SMEM: usize = 0;
/// Candidates per SSS pivot-selection batch.
const PIVOT_BATCH: usize = 1 << 16;
/// Reference rows per launch of lc_build_to_refs (the grid's y dimension).
const REFS_PER_LAUNCH: usize = 65_535;

/// The index `kind` over `data` under `metric`, built on the engine's GPU: List of Clusters or
/// SSS over vectors (see [`takes`]) or over strings under levenshtein (the List of Clusters by
/// the device steps, or like the SSS by the CPU's heuristics with every distance from the device
/// pair oracle, `oracle.rs`: either way the CPU build, part for part), or a
/// cover tree over vectors or strings (`cover_build.rs`); anything else is a clear error
/// naming what the GPU takes.
///
/// `progress` hears the number of items placed so far (clusters' items, or candidates scanned
/// for pivots) now and then.
pub(crate) fn build(
    engine: &CudaEngine,
    data: &Dataset,
    metric: Metric,
    kind: Kind,
    params: &Params,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<DatasetIndex> {
    params.check()?;
    voisin_index::check_kind(data, &metric, kind)?;
    if kind == Kind::Cover {
        // Vectors and strings, every level's greedy passes on the device (index/cover_build.rs).
        return super::cover_build::build_cover(engine, data, metric, params.base);
    }
    check(data, &metric, kind, params)?;
    let v = match data {
        Dataset::Vectors(v) => v,
        Dataset::Strings(s) => {
            let space = StringSpace::new(s.clone(), metric)?;
            if kind == Kind::Lc && lc_on_device(s, params) {
                // The vector build's steps with edit distances: nothing crosses PCIe per cluster.
                let lc = build_lc_strings(engine, space, params.cluster_size, progress)?;
                return Ok(DatasetIndex::Strings(Index::Lc(lc)));
            }
            // Else the heuristics on the host, every distance from the device pair oracle.
            let oracle = DeviceOracle::strings(engine, &space)?;
            let index = match kind {
                Kind::Lc => Index::Lc(ListOfClusters::build_with(
                    space.clone(),
                    params.cluster_size,
                    progress,
                    &oracle,
                )?),
                Kind::Sss => Index::Sss(Sss::build_with(
                    space.clone(),
                    params.alpha,
                    params.max_pivots,
                    progress,
                    &oracle,
                )?),
                _ => unreachable!("check refuses the other kinds"),
            };
            // Checked as the vector builds' `from_parts` check theirs: every stored distance
            // re-measured on the host.
            let valid = match &index {
                Index::Lc(lc) => lc.check(),
                Index::Sss(sss) => sss.check(),
                _ => Ok(()),
            };
            valid.map_err(|e| Error::device(format!("cuda: the index built on the GPU: {e}")))?;
            return Ok(DatasetIndex::Strings(index));
        }
    };
    let space = VectorSpace::new(v, metric)?;
    let index = match kind {
        Kind::Lc => Index::Lc(build_lc(engine, space, params.cluster_size, progress)?),
        Kind::Sss => Index::Sss(build_sss(
            engine,
            space,
            params.alpha,
            params.max_pivots,
            progress,
        )?),
        _ => unreachable!("check refuses the other kinds"),
    };
    Ok(DatasetIndex::Vectors(index))
}

/// Whether the GPU builds `kind` over `data` under `metric` with `params` by its own steps: List
/// of Clusters (clusters of at most [`MAX_CLUSTER`] items) or SSS over vectors under euclidean,
/// cityblock, chebyshev or minkowski:P, the List of Clusters over strings under levenshtein
/// when the device steps take them (at most one string over 64 chars: 0.128 s against 4.08 s
/// on 16 CPU threads for `data/words.txt`, docs/design/gpu-index-build.md), and the cover tree
/// under those metrics (index/cover_build.rs: 1M clustered 20-d vectors in 1.08 s against
/// 4.76 s on 16 CPU threads, docs/design/gpu-cover-tree.md). Not the SSS or the pair-oracle
/// List of Clusters over strings: [`build`]
/// makes them on the GPU when asked, but they build no faster than the CPU's on the measured
/// word lists (docs/design/gpu-index-build.md), so auto leaves them to the CPU.
pub(crate) fn takes(data: &Dataset, metric: &Metric, kind: Kind, params: &Params) -> bool {
    if kind == Kind::Cover {
        return match data {
            Dataset::Vectors(_) => device_metric(metric).is_ok(),
            Dataset::Strings(_) => *metric == Metric::Levenshtein,
        };
    }
    let device_steps = match data {
        Dataset::Vectors(_) => true,
        Dataset::Strings(s) => kind == Kind::Lc && lc_on_device(s, params),
    };
    device_steps && check(data, metric, kind, params).is_ok()
}

fn check(data: &Dataset, metric: &Metric, kind: Kind, params: &Params) -> Result<()> {
    if !matches!(kind, Kind::Lc | Kind::Sss) {
        return Err(Error::invalid(format!(
            "the GPU does not build {kind} indexes (it builds lc, sss and cover; use --device cpu)"
        )));
    }
    let v = match data {
        Dataset::Vectors(v) => v,
        Dataset::Strings(_) if *metric == Metric::Levenshtein => return Ok(()),
        Dataset::Strings(_) => {
            return Err(Error::invalid(format!(
                "the GPU builds indexes over strings under levenshtein, not {metric} (use \
                 --device cpu)"
            )))
        }
    };
    device_metric(metric)?;
    if kind == Kind::Sss {
        check_dim("index build", v.dim(), TO_REFS_STATIC_SMEM)?;
    }
    if v.len() >= u32::MAX as usize {
        return Err(Error::invalid(
            "the GPU builds indexes over fewer than 2^32 - 1 items",
        ));
    }
    if kind == Kind::Lc && params.cluster_size > MAX_CLUSTER {
        return Err(Error::invalid(format!(
            "the GPU builds clusters of at most {MAX_CLUSTER} items, not {} (use --device cpu)",
            params.cluster_size
        )));
    }
    Ok(())
}

/// The kernels' metric code and minkowski order (0 for the metrics with exact device keys).
fn device_metric(metric: &Metric) -> Result<(i32, f64)> {
    match metric {
        Metric::Minkowski(p) if metric.is_minkowski_power_sum() && *p >= 1.0 => {
            Ok((abi_unused_code(), *p))
        }
        m => metric_code(m).map(|c| (c, 0.0)).map_err(|_| {
            Error::invalid(format!(
                "the GPU builds indexes under euclidean, cityblock, chebyshev or minkowski:P, \
                 not {m} (use --device cpu)"
            ))
        }),
    }
}

/// The metric code passed beside a minkowski order (the kernels do not read it then).
fn abi_unused_code() -> i32 {
    crate::runtime::abi::EX_SQEUCLIDEAN
}

/// The start value of Rust's f64 Sum, which the device keys must use to match bit for bit.
fn sum_zero() -> f64 {
    std::iter::empty::<f64>().sum()
}

/// The items left of a List of Clusters build: a stable compaction of the set, `len` slots.
struct Left {
    /// Dimension-major, row `len`.
    cv: CudaSlice<f32>,
    ids: CudaSlice<u32>,
    sums: CudaSlice<f64>,
    alive: CudaSlice<u8>,
    len: usize,
}

impl Left {
    /// Keeps the alive slots only (one download of the flags; done a few times per build).
    fn compact(self, gpu: &Gpu, d: usize, expect: usize) -> Result<Left> {
        let s = &gpu.stream;
        let flags: Vec<u8> = s
            .clone_dtoh(&self.alive)
            .map_err(dev("reading the items left"))?;
        let keep: Vec<u32> = (0..self.len as u32)
            .filter(|&i| flags[i as usize] != 0)
            .collect();
        if keep.len() != expect {
            return Err(Error::device(format!(
                "cuda: the List of Clusters build lost track of its items ({} alive, {expect} \
                 expected)",
                keep.len()
            )));
        }
        let m = keep.len().max(1);
        let keep_dev = upload(gpu, &keep)?;
        let mut next = Left {
            cv: s
                .alloc_zeros::<f32>((d * m).max(1))
                .map_err(dev("allocating"))?,
            ids: s.alloc_zeros::<u32>(m).map_err(dev("allocating"))?,
            sums: s.alloc_zeros::<f64>(m).map_err(dev("allocating"))?,
            alive: s.alloc_zeros::<u8>(m).map_err(dev("allocating"))?,
            len: keep.len(),
        };
        let (stride, nstride, nkeep, di) = (self.len as i64, m as i64, keep.len() as i64, d as i32);
        let mut l = s.launch_builder(gpu.k.lc_build_gather()?);
        l.arg(&self.cv)
            .arg(&stride)
            .arg(&self.ids)
            .arg(&self.sums)
            .arg(&keep_dev)
            .arg(&nkeep)
            .arg(&di)
            .arg(&mut next.cv)
            .arg(&nstride)
            .arg(&mut next.ids)
            .arg(&mut next.sums)
            .arg(&mut next.alive);
        // SAFETY: lc_build_gather's arguments in its order; every keep[j] is a slot below
        // self.len and the new buffers hold m >= nkeep slots.
        unsafe { l.launch(LaunchConfig::for_num_elems(keep.len().max(1) as u32)) }
            .map_err(dev("compacting the items left"))?;
        Ok(next)
    }
}

/// What the List of Clusters' steps measure: vector rows (dimension-major in the slots' table,
/// under the kernels' metric code, or minkowski of order `mpow` > 0) or strings under
/// levenshtein (code points resident on the device, item i at chars[offs[i]..offs[i + 1]]; the
/// slots name their items by id).
enum Table {
    Vectors {
        code: i32,
        mpow: f64,
    },
    Strings {
        chars: CudaSlice<u32>,
        offs: CudaSlice<u32>,
    },
}

/// What the steps leave: the centers, each cluster's member count, the members and their
/// distances (in (distance, index) order per cluster), and the distance evaluations.
struct Steps {
    centers: Vec<u32>,
    cuts: Vec<usize>,
    members: Vec<u32>,
    member_dist: Vec<f64>,
    evals: u64,
}

impl Steps {
    /// The clusters of these steps, each radius its farthest member's distance.
    fn clusters(&self) -> Vec<Cluster> {
        let mut at = 0;
        self.centers
            .iter()
            .zip(&self.cuts)
            .map(|(&center, &cut)| {
                at += cut;
                Cluster {
                    center,
                    radius: self.member_dist[at - cut..at]
                        .last()
                        .copied()
                        .unwrap_or(0.0),
                    start: at - cut,
                    end: at,
                }
            })
            .collect()
    }
}

/// The List of Clusters of `space` with clusters of `cluster_size` items, built on the GPU: the
/// CPU build's heuristic step by step, nothing read back per cluster.
pub(crate) fn build_lc(
    engine: &CudaEngine,
    space: VectorSpace,
    cluster_size: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ListOfClusters<VectorSpace>> {
    let (n, d) = (space.len(), space.dim());
    let (code, mpow) = device_metric(space.metric())?;
    check_cluster_size(cluster_size)?;
    if n == 0 {
        return ListOfClusters::from_parts(space, vec![], vec![], vec![], 0).map_err(built_wrong);
    }
    let gpu = engine.lock()?;
    let values = space.values();
    let all: Vec<u32> = (0..n as u32).collect();
    let cv = gpu.upload(&dimension_major(values, d, &all))?;
    drop(all);
    let items = StepItems {
        n,
        d,
        cv,
        cbuf: upload(&gpu, &values[..d])?,
        table: Table::Vectors { code, mpow },
    };
    let mut st = lc_steps(&gpu, items, cluster_size, progress)?;
    drop(gpu);
    let mut clusters = st.clusters();
    if mpow > 0.0 {
        rekey(&space, &clusters, &mut st.members, &mut st.member_dist);
        // The radii from the exact distances.
        clusters = st.clusters();
    }
    ListOfClusters::from_parts(space, clusters, st.members, st.member_dist, st.evals)
        .map_err(built_wrong)
}

/// [`build_lc`] over strings under levenshtein: the same steps with the edit distances measured
/// on the device (Myers' bit vectors), so the result is the CPU build part for part. Every pair
/// must hold a string of at most 64 chars ([`lc_on_device`]).
fn build_lc_strings(
    engine: &CudaEngine,
    space: StringSpace,
    cluster_size: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<ListOfClusters<StringSpace>> {
    check_cluster_size(cluster_size)?;
    let n = space.len();
    if n == 0 {
        return ListOfClusters::from_parts(space, vec![], vec![], vec![], 0).map_err(built_wrong);
    }
    let (chars, offs) = super::oracle::pack(space.strings())?;
    let gpu = engine.lock()?;
    let items = StepItems {
        n,
        d: 0,
        cv: upload(&gpu, &[0f32])?,
        cbuf: upload(&gpu, &[0f32])?,
        table: Table::Strings {
            chars: upload(&gpu, &chars)?,
            offs: upload(&gpu, &offs)?,
        },
    };
    drop((chars, offs));
    let st = lc_steps(&gpu, items, cluster_size, progress)?;
    drop(gpu);
    let clusters = st.clusters();
    ListOfClusters::from_parts(space, clusters, st.members, st.member_dist, st.evals)
        .map_err(built_wrong)
}

/// Whether the device steps build the List of Clusters over `set` with `params`: clusters of at
/// most [`MAX_CLUSTER`] items, and every pair of strings holds one of at most 64 chars (one
/// machine word of Myers' bit vectors), so at most one is longer. Other builds go through the
/// pair oracle, which takes any cluster size and leaves long pairs to the host.
fn lc_on_device(set: &voisin::StringSet, params: &Params) -> bool {
    params.cluster_size <= MAX_CLUSTER && set.iter().filter(|s| s.len() > 64).count() <= 1
}

fn check_cluster_size(cluster_size: usize) -> Result<()> {
    if !(1..=MAX_CLUSTER).contains(&cluster_size) {
        return Err(Error::invalid(format!(
            "the GPU builds clusters of 1 to {MAX_CLUSTER} items, not {cluster_size}"
        )));
    }
    Ok(())
}

/// The items the List of Clusters' steps run over, on the device: `n` of them, measured as
/// `table` says; vectors: their dimension-major rows `cv` of `d` values and the first center's
/// row in `cbuf`; strings: d = 0 and one-value placeholders.
struct StepItems {
    n: usize,
    d: usize,
    cv: CudaSlice<f32>,
    cbuf: CudaSlice<f32>,
    table: Table,
}

/// A List of Clusters step's working state on the device (lc_build.cu): every slot's key; the
/// histogram, the bin it picks and the blocks' counter; list A (members for sure, fewer than
/// `take`), list B (the boundary bin: any alive slot, at worst), their lengths and counter; the
/// blocks' best next centers. The counters and the histogram are left at zero by the kernels.
struct StepState {
    keys: CudaSlice<u64>,
    hist: CudaSlice<u32>,
    cut_bin: CudaSlice<i64>,
    done: CudaSlice<u32>,
    a_key: CudaSlice<u64>,
    a_slot: CudaSlice<u32>,
    b_key: CudaSlice<u64>,
    b_slot: CudaSlice<u32>,
    counts: CudaSlice<u32>,
    best_k: CudaSlice<u64>,
    best_s: CudaSlice<u32>,
}

impl StepState {
    /// The state of steps over `n` slots taking `take` members per cluster, zeroed.
    fn new(gpu: &Gpu, n: usize, take: usize) -> Result<Self> {
        fn zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
            gpu: &Gpu,
            len: usize,
        ) -> Result<CudaSlice<T>> {
            gpu.stream.alloc_zeros::<T>(len).map_err(dev("allocating"))
        }
        Ok(StepState {
            keys: zeros(gpu, n)?,
            hist: zeros(gpu, BINS)?,
            cut_bin: zeros(gpu, 1)?,
            done: zeros(gpu, 1)?,
            a_key: zeros(gpu, take.max(1))?,
            a_slot: zeros(gpu, take.max(1))?,
            b_key: zeros(gpu, n)?,
            b_slot: zeros(gpu, n)?,
            counts: zeros(gpu, 3)?,
            best_k: zeros(gpu, STEP_BLOCKS)?,
            best_s: zeros(gpu, STEP_BLOCKS)?,
        })
    }
}

/// The List of Clusters' steps over `items` with clusters of `cluster_size` items, all state on
/// the device.
fn lc_steps(
    gpu: &Gpu,
    items: StepItems,
    cluster_size: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Steps> {
    let StepItems {
        n,
        d,
        cv,
        mut cbuf,
        table,
    } = items;
    let take = cluster_size - 1;
    // Known in advance, so no step reads anything back.
    let cuts = voisin_index::lc::cluster_cuts(n, cluster_size);
    let nc = cuts.len();
    let s = &gpu.stream;
    let all: Vec<u32> = (0..n as u32).collect();
    let mut alive0 = vec![1u8; n];
    alive0[0] = 0;
    let mut rest = Left {
        cv,
        ids: upload(gpu, &all)?,
        sums: s.alloc_zeros::<f64>(n).map_err(dev("allocating"))?,
        alive: upload(gpu, &alive0)?,
        len: n,
    };
    drop((all, alive0));
    let mut centers = upload(gpu, &vec![0u32; nc])?;
    let nm = n - nc;
    let mut members = s.alloc_zeros::<u32>(nm.max(1)).map_err(dev("allocating"))?;
    let mut mdist = s.alloc_zeros::<f64>(nm.max(1)).map_err(dev("allocating"))?;
    let mut w = StepState::new(gpu, n, take)?;
    let (di, zero) = (d as i32, sum_zero());
    let mut evals = 0u64;
    let mut left = n - 1; // alive items besides the current center
    let mut start = 0usize;
    for (step, &cut) in cuts.iter().enumerate() {
        if left > 0 {
            let len = rest.len as i64;
            let cfg = LaunchConfig {
                grid_dim: (
                    rest.len.div_ceil(THREADS as usize).min(STEP_BLOCKS) as u32,
                    1,
                    1,
                ),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let (cuti, at) = (cut as i32, step as i64);
            // Each kernel's own arguments first (what it measures), then the shared tail.
            let mut l = match &table {
                Table::Vectors { code, mpow } => {
                    let mut l = s.launch_builder(gpu.k.lc_build_scan()?);
                    l.arg(&rest.cv)
                        .arg(&len)
                        .arg(&di)
                        .arg(code)
                        .arg(mpow)
                        .arg(&zero)
                        .arg(&cbuf);
                    l
                }
                Table::Strings { chars, offs } => {
                    let mut l = s.launch_builder(gpu.k.lc_build_scan_lev()?);
                    l.arg(chars).arg(offs).arg(&rest.ids).arg(&centers).arg(&at);
                    l
                }
            };
            l.arg(&rest.alive)
                .arg(&mut rest.sums)
                .arg(&len)
                .arg(&cuti)
                .arg(&mut w.keys)
                .arg(&mut w.hist)
                .arg(&mut w.cut_bin)
                .arg(&mut w.done);
            // SAFETY: lc_build_scan's or lc_build_scan_lev's arguments in their order. Vectors:
            // the table holds len slots of d values, cbuf the center's d values. Strings: every
            // id of a slot and of centers[step] (written by the previous step) is an item of
            // `offs` (n + 1 offsets into `chars`). Both: keys n >= len slots, hist BINS bins.
            unsafe { l.launch(cfg) }.map_err(dev("List of Clusters scan"))?;
            evals += left as u64;
            let (at, next) = (
                start as i64,
                if step + 1 < nc { step as i64 + 1 } else { -1 },
            );
            let mut l = s.launch_builder(gpu.k.lc_build_collect()?);
            l.arg(&w.keys)
                .arg(&mut rest.alive)
                .arg(&rest.sums)
                .arg(&len)
                .arg(&cuti)
                .arg(&w.cut_bin)
                .arg(&mut w.a_key)
                .arg(&mut w.a_slot)
                .arg(&mut w.b_key)
                .arg(&mut w.b_slot)
                .arg(&mut w.counts)
                .arg(&mut w.best_k)
                .arg(&mut w.best_s)
                .arg(&rest.ids)
                .arg(&mut members)
                .arg(&mut mdist)
                .arg(&at)
                .arg(&rest.cv)
                .arg(&len)
                .arg(&di)
                .arg(&mut cbuf)
                .arg(&mut centers)
                .arg(&next);
            // SAFETY: lc_build_collect's arguments in its order, on the same grid as the scan
            // (STEP_BLOCKS best slots at most); list A holds the fewer than `take` slots below
            // the cut's bin, list B n >= len slots; `cut` <= the alive items' count members go
            // to start..start + cut <= nm, and a next center (step + 1 < nc) exists.
            unsafe { l.launch(cfg) }.map_err(dev("List of Clusters members"))?;
        }
        left -= cut;
        start += cut;
        if step + 1 < nc {
            left -= 1;
            if rest.len > COMPACT_FROM && left <= rest.len / 4 * 3 {
                rest = rest.compact(gpu, d, left)?;
            }
        }
        progress(start + step + 1);
    }
    let centers = gpu.download(&centers.slice(..))?;
    let mut members = gpu.download(&members.slice(..nm.max(1)))?;
    let mut member_dist = gpu.download(&mdist.slice(..nm.max(1)))?;
    members.truncate(nm);
    member_dist.truncate(nm);
    Ok(Steps {
        centers,
        cuts,
        members,
        member_dist,
        evals,
    })
}

/// Measures the members' distances to their centers on the host (exactly) and sorts each
/// cluster by (distance, index) again: n evaluations.
fn rekey(space: &VectorSpace, clusters: &[Cluster], members: &mut [u32], dist: &mut [f64]) {
    let mut pairs: Vec<(f64, u32)> = members.iter().map(|&x| (0.0, x)).collect();
    let mut rest = &mut pairs[..];
    let mut chunks = Vec::with_capacity(clusters.len());
    for c in clusters {
        let (mine, tail) = rest.split_at_mut(c.end - c.start);
        chunks.push((c.center, mine));
        rest = tail;
    }
    chunks.into_par_iter().for_each(|(center, mine)| {
        let cv = space.item(center as usize);
        for p in mine.iter_mut() {
            p.0 = space.to_distance(space.key(cv, space.item(p.1 as usize)));
        }
        mine.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    });
    for (i, (d, x)) in pairs.into_iter().enumerate() {
        dist[i] = d;
        members[i] = x;
    }
}

/// A GPU-built structure the CPU checks refused: a bug, reported as a device error.
fn built_wrong(e: String) -> Error {
    Error::device(format!(
        "cuda: the index built on the GPU fails its checks ({e})"
    ))
}

/// Distances of items lo..lo + count (columns of the dimension-major `x`, row `stride`) to each
/// of `refs` (item ids), reference-major: entry `r * count + i`.
#[allow(clippy::too_many_arguments)]
fn to_refs(
    gpu: &Gpu,
    space: &VectorSpace,
    x: &CudaView<'_, f32>,
    stride: usize,
    refs: &[u32],
    count: usize,
    (code, mpow): (i32, f64),
) -> Result<Vec<f64>> {
    let d = space.dim();
    let s = &gpu.stream;
    let mut out_all = Vec::with_capacity(refs.len() * count);
    if count == 0 {
        return Ok(out_all);
    }
    for group in refs.chunks(REFS_PER_LAUNCH) {
        let rows: Vec<f32> = group
            .iter()
            .flat_map(|&r| space.item(r as usize).iter().copied())
            .collect();
        let rows_dev = upload(gpu, &rows)?;
        let mut out = s
            .alloc_zeros::<f64>(group.len() * count)
            .map_err(dev("allocating"))?;
        let (stride, cnt, di, zero) = (stride as i64, count as i64, d as i32, sum_zero());
        let mut l = s.launch_builder(gpu.k.lc_build_to_refs()?);
        l.arg(x)
            .arg(&stride)
            .arg(&cnt)
            .arg(&rows_dev)
            .arg(&di)
            .arg(&code)
            .arg(&mpow)
            .arg(&zero)
            .arg(&mut out);
        let cfg = LaunchConfig {
            grid_dim: (count.div_ceil(256) as u32, group.len() as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: (d * 4) as u32,
        };
        // SAFETY: lc_build_to_refs's arguments in its order; x holds count columns of d values
        // at row `stride`, rows_dev group.len() rows, out group.len() * count values.
        unsafe { l.launch(cfg) }.map_err(dev("distances to pivots"))?;
        out_all.extend(gpu.download(&out.slice(..))?);
    }
    Ok(out_all)
}

/// The SSS pivot index of `space` built on the GPU: the CPU build's pivots (distances of
/// batches of candidates to the pivots so far on the device, each batch resolved in order on
/// the host) and its table (n × pivots distances on the device).
pub(crate) fn build_sss(
    engine: &CudaEngine,
    space: VectorSpace,
    alpha: f64,
    max_pivots: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Sss<VectorSpace>> {
    let (n, d) = (space.len(), space.dim());
    let dm = device_metric(space.metric())?;
    check_dim("index build", d, TO_REFS_STATIC_SMEM)?;
    if n == 0 {
        return Sss::from_parts(space, vec![], vec![], vec![], 0).map_err(built_wrong);
    }
    let max_pivots = max_pivots.max(1);
    let gpu = engine.lock()?;
    let all: Vec<u32> = (0..n as u32).collect();
    let x = gpu.upload(&dimension_major(space.values(), d, &all))?;
    drop(all);
    let dist = |a: usize, b: usize| space.distance(a, b);
    // The farthest item from `from`: largest distance, ties to the smaller index.
    let farthest = |from: u32| -> Result<(f64, usize)> {
        let ds = to_refs(&gpu, &space, &x.slice(..), n, &[from], n, dm)?;
        Ok(ds
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
            .map(|(i, &v)| (v, i))
            .expect("n > 0"))
    };
    let (_, far) = farthest(0)?;
    let (max, _) = farthest(far as u32)?;
    let mut evals = 2 * n as u64;
    let threshold = alpha * max;
    let mut pivots = vec![0u32];
    let mut next = 1;
    while next < n && pivots.len() < max_pivots {
        let count = PIVOT_BATCH.min(n - next);
        let known = pivots.len();
        let ds = to_refs(&gpu, &space, &x.slice(next..), n, &pivots, count, dm)?;
        evals += (known * count) as u64;
        for j in 0..count {
            if pivots.len() >= max_pivots {
                break;
            }
            let cand = next + j;
            let far_from_known = (0..known).all(|p| ds[p * count + j] >= threshold);
            let far_from_new = far_from_known
                && pivots[known..].iter().all(|&p| {
                    evals += 1;
                    dist(p as usize, cand) >= threshold
                });
            if far_from_new {
                pivots.push(cand as u32);
            }
        }
        next += count;
        progress(next);
    }
    let np = pivots.len();
    let mut cols = to_refs(&gpu, &space, &x.slice(..), n, &pivots, n, dm)?;
    drop(x);
    drop(gpu);
    evals += (n * np) as u64;
    if dm.1 > 0.0 {
        cols.par_chunks_mut(n).zip(&pivots).for_each(|(col, &p)| {
            for (i, v) in col.iter_mut().enumerate() {
                *v = dist(i, p as usize);
            }
        });
    }
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.par_sort_by(|&a, &b| {
        cols[a as usize]
            .total_cmp(&cols[b as usize])
            .then(a.cmp(&b))
    });
    let mut table = vec![0f64; n * np];
    table.par_chunks_mut(np).zip(&order).for_each(|(row, &x)| {
        for (p, v) in row.iter_mut().enumerate() {
            *v = cols[p * n + x as usize];
        }
    });
    progress(n);
    Sss::from_parts(space, pivots, order, table, evals).map_err(built_wrong)
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::{StringSet, VectorSet};

    fn words(list: &[String]) -> Dataset {
        StringSet::from_strings(list).unwrap().into()
    }

    /// What the device's own steps build: vector LC and SSS; over strings the List of Clusters
    /// only, and only when the device steps take the set (at most one string over 64 chars).
    #[test]
    fn the_device_builds_what_its_steps_take() {
        let builds = takes;
        let lev = Metric::Levenshtein;
        let (lc, sss) = (Params::default(), Params::default());
        let short: Vec<String> = ["", "cat", "cart", "dog"].map(String::from).to_vec();
        let mut one_long = short.clone();
        one_long.push("a".repeat(65));
        let mut two_long = one_long.clone();
        two_long.push("b".repeat(64) + "c");
        assert!(builds(&words(&short), &lev, Kind::Lc, &lc));
        assert!(builds(&words(&one_long), &lev, Kind::Lc, &lc));
        assert!(!builds(&words(&two_long), &lev, Kind::Lc, &lc));
        assert!(!builds(&words(&short), &lev, Kind::Sss, &sss));
        assert!(builds(&words(&short), &lev, Kind::Cover, &lc));
        assert!(!builds(
            &words(&short),
            &Metric::Euclidean,
            Kind::Cover,
            &lc
        ));
        let v: Dataset = VectorSet::from_f32(3, 2, vec![0.0; 6]).unwrap().into();
        assert!(builds(&v, &Metric::Euclidean, Kind::Lc, &lc));
        assert!(builds(&v, &Metric::Cityblock, Kind::Sss, &sss));
        assert!(!builds(&v, &Metric::Cosine, Kind::Lc, &lc));
        assert!(builds(&v, &Metric::Minkowski(3.0), Kind::Cover, &lc));
        assert!(!builds(&v, &Metric::Cosine, Kind::Cover, &lc));
        let big = Params {
            cluster_size: MAX_CLUSTER + 1,
            ..Params::default()
        };
        assert!(!builds(&words(&short), &lev, Kind::Lc, &big));
    }
}
