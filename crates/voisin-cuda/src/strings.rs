//! Levenshtein range search on the device: Myers/Hyyrö bit-parallel edit distance over packed
//! code points, one block per query (kernels/strings/levenshtein.cu); k-NN search and graphs on strings
//! by increasing radius over it.
//!
//! Owns packing the strings (base sorted by length, so each query scans only the slice that
//! passes the length filter), the per-query match masks, the kernel's module and the host side of
//! the result (grouping hits by query and sorting by (distance, index)). Queries longer than 64
//! chars run on the host with `voisin::metric::levenshtein::Pattern` (the kernel holds one machine
//! word of bit vectors). Must not touch the vector path (prepare, tiles, selection).
//!
//! Edit distances are integers computed exactly on both sides, so no error bound or host re-rank
//! is needed: the result equals `voisin::reference::range`.

use std::time::Instant;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use voisin::metric::levenshtein::Pattern;
use voisin::{Error, KnnResult, RangeResult, Result, Stats, StringSet};

use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// Pattern chars per machine word: the longest query the kernel takes.
const W: usize = abi::LEV_W;
/// Pads a query's sorted distinct chars: above every Unicode scalar value, so never matched.
const PAD: u32 = u32::MAX;
/// Threads per block (per query).
const THREADS: u32 = 256;

/// The `lev_range` kernel loaded into `gpu`'s context.
pub(crate) fn kernel(gpu: &Gpu) -> Result<CudaFunction> {
    Ok(gpu.k.lev_range()?.clone())
}

/// The base, sorted by length and packed as code points.
struct PackedBase {
    /// `order[j]`: the original index of sorted position `j`.
    order: Vec<u32>,
    /// Length in chars of sorted position `j`, ascending.
    lens: Vec<u32>,
    chars: Vec<u32>,
    offsets: Vec<u32>,
}

impl PackedBase {
    fn new(base: &StringSet) -> Result<Self> {
        let total: usize = base.iter().map(<[char]>::len).sum();
        if total >= u32::MAX as usize {
            return Err(Error::invalid(format!(
                "cuda: the base holds {total} chars; levenshtein on cuda takes fewer than 2^32"
            )));
        }
        let mut order: Vec<u32> = (0..base.len() as u32).collect();
        order.sort_by_key(|&i| base.get(i as usize).len());
        let lens: Vec<u32> = order
            .iter()
            .map(|&i| base.get(i as usize).len() as u32)
            .collect();
        let mut offsets = Vec::with_capacity(order.len() + 1);
        offsets.push(0u32);
        for &l in &lens {
            offsets.push(offsets.last().unwrap() + l);
        }
        // One padding char keeps the upload non-empty when every string is.
        let mut chars = Vec::with_capacity(total + 1);
        for &i in &order {
            chars.extend(base.get(i as usize).iter().map(|&c| c as u32));
        }
        chars.push(0);
        Ok(PackedBase {
            order,
            lens,
            chars,
            offsets,
        })
    }

    /// Sorted positions whose length is within `r` of `m`.
    fn slice(&self, m: u32, r: u32) -> (u32, u32) {
        let lo = self.lens.partition_point(|&l| l < m.saturating_sub(r));
        let hi = self.lens.partition_point(|&l| l <= m.saturating_add(r));
        (lo as u32, hi as u32)
    }
}

/// Per-query kernel inputs: sorted distinct chars padded to `W`, their match masks, and
/// (length, distinct chars, slice start, slice end). Long queries get an empty slice.
fn query_tables(queries: &StringSet, base: &PackedBase, r: u32) -> (Vec<u32>, Vec<u64>, Vec<u32>) {
    let nq = queries.len();
    let mut qchars = vec![PAD; nq * W];
    let mut qmasks = vec![0u64; nq * W];
    let mut qinfo = vec![0u32; nq * 4];
    qchars
        .par_chunks_mut(W)
        .zip(qmasks.par_chunks_mut(W))
        .zip(qinfo.par_chunks_mut(4))
        .enumerate()
        .for_each(|(q, ((qc, qm), qi))| {
            let s = queries.get(q);
            if s.len() > W {
                return;
            }
            let mut distinct: Vec<u32> = s.iter().map(|&c| c as u32).collect();
            distinct.sort_unstable();
            distinct.dedup();
            qc[..distinct.len()].copy_from_slice(&distinct);
            for (i, &c) in s.iter().enumerate() {
                let k = distinct.partition_point(|&d| d < c as u32);
                qm[k] |= 1u64 << i;
            }
            let (lo, hi) = base.slice(s.len() as u32, r);
            qi.copy_from_slice(&[s.len() as u32, distinct.len() as u32, lo, hi]);
        });
    (qchars, qmasks, qinfo)
}

/// Range search: every base string within edit distance `radius` of each query, rows sorted
/// by (distance, index). `lev` is the loaded `lev_range` kernel.
pub(crate) fn range(
    gpu: &Gpu,
    lev: &CudaFunction,
    base: &StringSet,
    queries: &StringSet,
    radius: f64,
    mut stats: Stats,
) -> Result<RangeResult> {
    let t = Instant::now();
    let dbase = DeviceBase::new(gpu, base)?;
    stats.transfer += t.elapsed();
    search(gpu, lev, &dbase, base, queries, radius, stats)
}

/// The packed base on the device, uploaded once for every search round over it.
struct DeviceBase {
    packed: PackedBase,
    chars: CudaSlice<u32>,
    offs: CudaSlice<u32>,
}

impl DeviceBase {
    fn new(gpu: &Gpu, base: &StringSet) -> Result<Self> {
        let packed = PackedBase::new(base)?;
        let up = |v: &[u32]| {
            gpu.stream
                .clone_htod(v)
                .map_err(dev("copying strings to the device"))
        };
        Ok(DeviceBase {
            chars: up(&packed.chars)?,
            offs: up(&packed.offsets)?,
            packed,
        })
    }
}

/// Range search over a base already on the device.
fn search(
    gpu: &Gpu,
    lev: &CudaFunction,
    dbase: &DeviceBase,
    base: &StringSet,
    queries: &StringSet,
    radius: f64,
    mut stats: Stats,
) -> Result<RangeResult> {
    let (nb, nq) = (base.len(), queries.len());
    // Distances are integers no larger than the longer string, so the radius is floored and
    // capped (keeping r + columns left inside u32 in the kernel).
    let cap_r = (base.max_len() + queries.max_len()) as f64;
    let r = radius.floor().min(cap_r).min((1u32 << 30) as f64) as u32;
    let t = Instant::now();
    let (packed, chars, offs) = (&dbase.packed, &dbase.chars, &dbase.offs);
    let (qchars, qmasks, qinfo) = query_tables(queries, packed, r);
    let s = &gpu.stream;
    let up = |v: &[u32]| {
        s.clone_htod(v)
            .map_err(dev("copying strings to the device"))
    };
    let qc = up(&if nq == 0 { vec![PAD; W] } else { qchars })?;
    let qi = up(&if nq == 0 { vec![0; 4] } else { qinfo })?;
    let qm = s
        .clone_htod(&if nq == 0 { vec![0; W] } else { qmasks })
        .map_err(dev("copying masks to the device"))?;
    let mut cursor: CudaSlice<u64> = s.alloc_zeros(1).map_err(dev("allocating"))?;
    stats.transfer += t.elapsed();

    let t = Instant::now();
    // A first guess at the number of hits; the kernel counts past it and a second launch
    // writes them all when it was too small.
    let mut cap = (nq * 64).max(1 << 20);
    let mut hits: Vec<u32> = Vec::new();
    if nq > 0 && nb > 0 {
        loop {
            let mut out = unsafe { s.alloc::<u32>(3 * cap) }.map_err(dev("allocating hits"))?;
            s.memset_zeros(&mut cursor).map_err(dev("clearing"))?;
            let cap64 = cap as u64;
            let mut l = s.launch_builder(lev);
            l.arg(chars)
                .arg(offs)
                .arg(&qc)
                .arg(&qm)
                .arg(&qi)
                .arg(&r)
                .arg(&cap64)
                .arg(&mut cursor)
                .arg(&mut out);
            let cfg = LaunchConfig {
                grid_dim: (nq as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: matches lev_range in kernels/strings/levenshtein.cu; every query's slice lies
            // inside the packed base and writes stop at `cap`.
            unsafe { l.launch(cfg) }.map_err(dev("lev_range"))?;
            let total = s.clone_dtoh(&cursor).map_err(dev("reading the count"))?[0] as usize;
            if total <= cap {
                hits = gpu.download(&out.slice(..3 * total.max(1)))?;
                hits.truncate(3 * total);
                break;
            }
            cap = total;
        }
    }
    stats.compute += t.elapsed();
    stats.distance_evals += qinfo_pairs(queries, packed, r);

    let t = Instant::now();
    // (query, distance, original index) for every hit, device and host paths together, sorted
    // in parallel: rows come out grouped by query and ordered by (distance, index).
    let mut all: Vec<(u32, u32, u32)> = hits
        .par_chunks_exact(3)
        .map(|h| (h[0], h[2], packed.order[h[1] as usize]))
        .collect();
    let long: Vec<(u32, u32, u32)> = (0..nq)
        .into_par_iter()
        .filter(|&q| queries.get(q).len() > W)
        .flat_map_iter(|q| {
            // The host path: too long for one word of bit vectors.
            let p = Pattern::new(queries.get(q));
            (0..nb as u32).filter_map(move |i| {
                p.bounded(base.get(i as usize), r as usize)
                    .map(|d| (q as u32, d as u32, i))
            })
        })
        .collect();
    all.extend(long);
    all.par_sort_unstable();
    let mut out = RangeResult {
        offsets: vec![0; nq + 1],
        indices: all.par_iter().map(|h| h.2).collect(),
        distances: all.par_iter().map(|h| h.1 as f32).collect(),
        ..Default::default()
    };
    for h in &all {
        out.offsets[h.0 as usize + 1] += 1;
    }
    for q in 0..nq {
        out.offsets[q + 1] += out.offsets[q];
    }
    stats.select += t.elapsed();
    out.stats = stats;
    Ok(out)
}

/// Pairs that reach the distance computation (length filter passed), for the statistics.
fn qinfo_pairs(queries: &StringSet, base: &PackedBase, r: u32) -> u64 {
    queries
        .iter()
        .map(|s| {
            if s.len() > W {
                base.order.len() as u64
            } else {
                let (lo, hi) = base.slice(s.len() as u32, r);
                (hi - lo) as u64
            }
        })
        .sum()
}

/// k-NN search (and the graph, with `exclude_self`; `k` already capped at the items there are)
/// on strings by increasing radius: range
/// searches at r = 1, 2, 3, … for the queries still short of k neighbours (steps of one: the
/// hits of a round grow steeply with r, and each round runs only the queries left). Edit distances are
/// integers and a range search returns every item within r, so once a query has at least k hits
/// its k nearest by (distance, index) are among them, exactly; at r = the longest base string +
/// the longest query every item is within r, so the loop ends. Each round runs only the queries
/// left, and the length filter keeps the early, cheap rounds from scanning the whole base.
pub(crate) fn knn(
    gpu: &Gpu,
    lev: &CudaFunction,
    base: &StringSet,
    queries: &StringSet,
    k: usize,
    exclude_self: bool,
    mut stats: Stats,
) -> Result<KnnResult> {
    let nq = queries.len();
    let mut rows: Vec<Vec<(f64, u32)>> = vec![Vec::new(); nq];
    let mut pending: Vec<usize> = if k == 0 {
        Vec::new()
    } else {
        (0..nq).collect()
    };
    let all_within = (base.max_len() + queries.max_len()) as u32;
    let mut r = 1u32.min(all_within);
    let t = Instant::now();
    let dbase = DeviceBase::new(gpu, base)?;
    stats.transfer += t.elapsed();
    while !pending.is_empty() {
        let sub = if pending.len() == nq {
            None
        } else {
            Some(StringSet::from_strings(
                pending.iter().map(|&q| queries.get_string(q)),
            )?)
        };
        let res = search(
            gpu,
            lev,
            &dbase,
            base,
            sub.as_ref().unwrap_or(queries),
            r as f64,
            Stats::default(),
        )?;
        stats.transfer += res.stats.transfer;
        stats.compute += res.stats.compute;
        stats.select += res.stats.select;
        stats.distance_evals += res.stats.distance_evals;
        let last = r >= all_within;
        let done: Vec<Option<Vec<(f64, u32)>>> = pending
            .par_iter()
            .enumerate()
            .map(|(j, &q)| {
                let span = res.offsets[j]..res.offsets[j + 1];
                let mut row: Vec<(f64, u32)> = res.distances[span.clone()]
                    .iter()
                    .zip(&res.indices[span])
                    .filter(|&(_, &i)| !(exclude_self && i as usize == q))
                    .map(|(&d, &i)| (d as f64, i))
                    .collect();
                (row.len() >= k || last).then(|| {
                    row.truncate(k);
                    row
                })
            })
            .collect();
        let mut still = Vec::new();
        for (q, row) in pending.into_iter().zip(done) {
            match row {
                Some(row) => rows[q] = row,
                None => still.push(q),
            }
        }
        pending = still;
        r = (r + 1).min(all_within);
    }
    Ok(KnnResult {
        stats,
        ..KnnResult::from_rows_by(rows, k, |d| d)
    })
}
