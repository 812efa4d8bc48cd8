//! What every index searched on the device shares: the query schedule and the answers' way
//! back. Queries run in batches of one block per query; answers go to fixed slots per query (a
//! power of two, so the sort runs in place), sized from the first batch's counts; a query that
//! found more answers than its slots hold is run again with room for all of them; a second
//! kernel sorts every row by (key, index) and packs it into the CSR output; k-NN grows each
//! query's radius on the device (increasing radius, [Barrientos13] §4.2.2).
//!
//! An index only uploads its structure and pushes its own kernel arguments ([`IndexArgs`]);
//! its kernel takes the shared tail of arguments that [`Searcher`] pushes after them.

use std::time::Instant;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaView, DeviceRepr, LaunchArgs, LaunchConfig, PushKernelArg,
};
use rayon::prelude::*;
use voisin::engine::check_k;
use voisin::{Error, KnnResult, Metric, RangeResult, Result, VectorSet};

use crate::engine::CudaEngine;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};
use crate::runtime::kernels::Kernels;

/// Threads per query block.
const THREADS: u32 = 256;
/// Rows whose padded length is at most this are sorted in shared memory (24 KiB).
const SMEM_ROWS: u32 = 2048;

/// The device code of a metric whose exact key uses only correctly rounded operations (so the
/// device reproduces the host's keys bit for bit) and that is a true metric (so pruning is sound).
pub(crate) fn metric_code(metric: &Metric) -> Result<i32> {
    match metric {
        Metric::Euclidean => Ok(abi::EX_SQEUCLIDEAN),
        Metric::Cityblock => Ok(abi::EX_CITYBLOCK),
        Metric::Chebyshev => Ok(abi::EX_CHEBYSHEV),
        m => Err(Error::invalid(format!(
            "GPU index search takes euclidean, cityblock or chebyshev, not {m} \
             (use the CPU index)"
        ))),
    }
}

/// Rows `ids` of the row-major `values` (rows of `d`), dimension-major: value i of the j-th row
/// at `i * ids.len() + j`.
pub(crate) fn dimension_major(values: &[f32], d: usize, ids: &[u32]) -> Vec<f32> {
    let m = ids.len();
    let mut out = vec![0f32; (d * m).max(1)];
    if m > 0 {
        out.par_chunks_mut(m).enumerate().for_each(|(i, col)| {
            for (o, &x) in col.iter_mut().zip(ids) {
                *o = values[x as usize * d + i];
            }
        });
    }
    out
}

/// The device buffers one after the other, on the host. Joined on the device first: joining
/// on the host cost more than the search at 0.1 % selectivity (one thread copying 10⁸ values
/// into new memory), a device copy costs a fraction of a millisecond.
fn download_parts<T>(gpu: &Gpu, mut parts: Vec<CudaSlice<T>>) -> Result<Vec<T>>
where
    T: DeviceRepr + bytemuck::Pod,
{
    match parts.len() {
        0 => Ok(Vec::new()),
        1 => gpu.download(&parts.pop().expect("one part").slice(..)),
        _ => {
            let total = parts.iter().map(CudaSlice::len).sum();
            // SAFETY: every value is written by the copies below.
            let mut all = unsafe { gpu.stream.alloc::<T>(total) }.map_err(dev("allocating"))?;
            let mut at = 0;
            for p in &parts {
                let mut dst = all.slice_mut(at..at + p.len());
                gpu.stream
                    .memcpy_dtod(p, &mut dst)
                    .map_err(dev("joining batches"))?;
                at += p.len();
            }
            gpu.download(&all.slice(..))
        }
    }
}

/// A copy to the device of `v` (at least one element, so every buffer has an address).
pub(crate) fn upload<T: DeviceRepr + Default + Clone>(gpu: &Gpu, v: &[T]) -> Result<CudaSlice<T>> {
    let one = [T::default()];
    gpu.stream
        .clone_htod(if v.is_empty() { &one[..] } else { v })
        .map_err(dev("copying the index"))
}

/// Device buffers of one launch of an index's search kernel: `rows` queries with `cap` slots each.
struct Slots {
    rows: usize,
    cap: usize,
    id: CudaSlice<u32>,
    key: CudaSlice<f64>,
    counts: CudaSlice<u64>,
    evals: CudaSlice<u64>,
    radii: CudaSlice<f64>,
}

/// What one launch found, on the host.
struct Found {
    counts: Vec<u64>,
    radii: Vec<f64>,
    evals: u64,
}

/// Packed answers of a set of queries: CSR over them.
struct Packed {
    offsets: Vec<usize>,
    ids: Vec<u32>,
    dists: Vec<f32>,
    radii: Vec<f64>,
    evals: u64,
}

/// Refuses dimensions whose query (4 bytes a dimension, in shared memory) would not fit beside
/// the kernel's `static_smem` bytes in the 48 KiB a block gets by default.
pub(crate) fn check_dim(what: &str, d: usize, static_smem: usize) -> Result<()> {
    if d * 4 + static_smem > 48 * 1024 {
        return Err(Error::invalid(format!(
            "the GPU {what} holds vectors of at most {} dimensions, not {d}",
            (48 * 1024 - static_smem) / 4
        )));
    }
    Ok(())
}

/// An index's part of a search launch.
pub(crate) trait IndexArgs {
    /// Pushes the index's own kernel arguments, those before the shared tail.
    fn push<'a>(&'a self, l: &mut LaunchArgs<'a>);
    /// Whether the index holds no item (nothing is launched then).
    fn is_empty(&self) -> bool;
}

/// What a search needs to know of an index's items, whatever its structure.
pub(crate) struct ItemShape<'m> {
    pub(crate) metric: &'m Metric,
    /// Coordinates per item.
    pub(crate) dim: usize,
    /// Items the index answers with (a run of a List of Clusters: its own).
    pub(crate) n: usize,
    /// A typical distance in the index: where a k-NN radius starts growing when nothing better
    /// is known.
    pub(crate) scale: f64,
}

/// An index on the device with its search kernel.
pub(crate) struct Searcher<'e, A> {
    engine: &'e CudaEngine,
    search: CudaFunction,
    sort: CudaFunction,
    metric: Metric,
    code: i32,
    dim: usize,
    n: usize,
    /// A typical distance in the index: where a k-NN radius starts growing when nothing better
    /// is known.
    scale: f64,
    /// The working-set budget of every search, when fixed in advance (a streamed supercluster:
    /// measuring the free memory would synchronise the context, and so wait for the next
    /// supercluster's copy); measured at each search otherwise.
    budget: Option<usize>,
    index: A,
}

impl<'e, A: IndexArgs> Searcher<'e, A> {
    /// `kernel` is the index's search kernel over `items`.
    pub(crate) fn new(
        engine: &'e CudaEngine,
        gpu: &Gpu,
        items: ItemShape<'_>,
        kernel: fn(&Kernels) -> Result<&CudaFunction>,
        index: A,
    ) -> Result<Self> {
        let ItemShape {
            metric,
            dim,
            n,
            scale,
        } = items;
        Ok(Searcher {
            engine,
            search: kernel(&gpu.k)?.clone(),
            sort: gpu.k.lc_sort_rows()?.clone(),
            code: metric_code(metric)?,
            metric: metric.clone(),
            dim,
            n,
            scale,
            budget: None,
            index,
        })
    }

    /// The same searcher with a fixed working-set budget (see `budget`).
    pub(crate) fn with_budget(mut self, bytes: usize) -> Self {
        self.budget = Some(bytes);
        self
    }

    pub(crate) fn len(&self) -> usize {
        self.n
    }

    pub(crate) fn metric(&self) -> &Metric {
        &self.metric
    }

    fn query_rows<'q>(&self, queries: &'q VectorSet) -> Result<std::borrow::Cow<'q, [f32]>> {
        if queries.dim() != self.dim {
            return Err(Error::invalid(format!(
                "queries have dimension {} but the index holds vectors of dimension {}",
                queries.dim(),
                self.dim
            )));
        }
        queries.require_f32_exact("metric indexes")?;
        Ok(queries.rows_f32(0, queries.len()))
    }

    /// Every indexed item within `radius` of each query, rows sorted by (distance, index).
    pub(crate) fn range(&self, queries: &VectorSet, radius: f64) -> Result<RangeResult> {
        self.metric.check_radius(radius)?;
        let rows = self.query_rows(queries)?;
        let nq = queries.len();
        let gpu = self.engine.lock()?;
        let mut stats = self.engine.stats(&gpu);
        let t = Instant::now();
        let p = self.run(&gpu, &rows, nq, &vec![radius; nq], 0, 1024)?;
        stats.compute += t.elapsed();
        stats.distance_evals += p.evals;
        stats.exact_evals += p.evals;
        Ok(RangeResult {
            offsets: p.offsets,
            indices: p.ids,
            distances: p.dists,
            stats,
        })
    }

    /// The k nearest indexed items of each query (k capped at the number of items), ties by
    /// the smaller index.
    pub(crate) fn knn(&self, queries: &VectorSet, k: usize) -> Result<KnnResult> {
        check_k(k)?;
        let rows = self.query_rows(queries)?;
        let (nq, d) = (queries.len(), self.dim);
        let k = k.min(self.n);
        let gpu = self.engine.lock()?;
        let mut stats = self.engine.stats(&gpu);
        if k == 0 || nq == 0 {
            return Ok(KnnResult {
                n_queries: nq,
                k,
                stats,
                ..Default::default()
            });
        }
        let t = Instant::now();
        // A pilot of a few queries, spread over the set, grows its radii from the typical
        // covering radius; the others start just below the pilot's median final radius, so most
        // need one or two counting passes. Any start is correct: only the speed depends on it.
        let pilot: Vec<usize> = (0..nq.min(64)).map(|i| i * nq / nq.min(64)).collect();
        let pilot_rows: Vec<f32> = pilot
            .iter()
            .flat_map(|&q| rows[q * d..(q + 1) * d].iter().copied())
            .collect();
        let cap0 = (4 * k).next_power_of_two().max(256);
        let pp = self.run(
            &gpu,
            &pilot_rows,
            pilot.len(),
            &vec![self.scale; pilot.len()],
            k,
            cap0,
        )?;
        let mut r = pp.radii.clone();
        let mid = r.len() / 2;
        let start = *r.select_nth_unstable_by(mid, f64::total_cmp).1 / 1.5;
        let start = if start.is_finite() { start } else { self.scale };
        let p = self.run(&gpu, &rows, nq, &vec![start; nq], k, cap0)?;
        stats.compute += t.elapsed();
        stats.distance_evals += p.evals + pp.evals;
        stats.exact_evals += p.evals + pp.evals;
        // A query with NaN (or data with infinities that make NaN distances) has no k items
        // within any radius: refuse rather than return short rows.
        if let Some(q) = p.offsets.windows(2).position(|w| w[1] - w[0] != k) {
            return Err(Error::invalid(format!(
                "query {q} has no {k} items at a comparable distance (NaN or infinite values?); \
                 the GPU index cannot rank it"
            )));
        }
        Ok(KnnResult {
            n_queries: nq,
            k,
            indices: p.ids,
            distances: p.dists,
            stats,
        })
    }

    /// Runs `nq` queries (row-major `rows`) with starting radii `radii`; `k == 0` is a range
    /// search, else each row keeps its k best. Batches are sized to the engine's memory budget;
    /// `cap` (slots per query) starts at `cap0` and follows the counts seen.
    fn run(
        &self,
        gpu: &Gpu,
        rows: &[f32],
        nq: usize,
        radii: &[f64],
        k: usize,
        cap0: usize,
    ) -> Result<Packed> {
        let mut out = Packed {
            offsets: vec![0],
            ids: Vec::new(),
            dists: Vec::new(),
            radii: Vec::with_capacity(nq),
            evals: 0,
        };
        if nq == 0 {
            return Ok(out);
        }
        if self.index.is_empty() {
            out.offsets.resize(nq + 1, 0);
            out.radii.extend_from_slice(radii);
            return Ok(out);
        }
        let mut tr = gpu.phases();
        let (mut ids_parts, mut dist_parts) = (Vec::new(), Vec::new());
        let qdev = gpu.upload(rows)?;
        let budget = match self.budget {
            Some(b) => b,
            None => self.engine.budget(gpu)?.bytes,
        };
        let mut cap = cap0.next_power_of_two();
        let mut q0 = 0;
        while q0 < nq {
            // The first batch is small: its counts size the slots of the others.
            let mut rows_b = (budget / (cap * 12 + 64)).clamp(1, nq - q0);
            if q0 == 0 && nq > 4096 {
                rows_b = rows_b.min(2048);
            }
            let q1 = q0 + rows_b;
            let qv = qdev.slice(q0 * self.dim..q1 * self.dim);
            let mut main = self.slots(gpu, rows_b, cap, &radii[q0..q1])?;
            let found = self.launch(gpu, &qv, None, &mut main, k)?;
            tr.mark("index: search");
            // Rows that outgrew their slots run again, with their final radius as a range
            // search (the same answers), into slots that hold them all.
            let over: Vec<usize> = (0..rows_b)
                .filter(|&b| found.counts[b] > cap as u64)
                .collect();
            let mut ovf_row = vec![-1i32; rows_b];
            let mut counts = found.counts.clone();
            let mut ovf = None;
            if !over.is_empty() {
                let need = over.iter().map(|&b| found.counts[b]).max().unwrap_or(1);
                let ocap = (need as usize).next_power_of_two();
                let qids: Vec<u32> = over.iter().map(|&b| (q0 + b) as u32).collect();
                let or: Vec<f64> = over.iter().map(|&b| found.radii[b]).collect();
                let mut slots = self.slots(gpu, over.len(), ocap, &or)?;
                let qids_dev = upload(gpu, &qids)?;
                let f2 = self.launch(gpu, &qdev.slice(..), Some(&qids_dev), &mut slots, 0)?;
                for (o, &b) in over.iter().enumerate() {
                    ovf_row[b] = o as i32;
                    counts[b] = f2.counts[o];
                }
                out.evals += f2.evals;
                ovf = Some((slots, ovf_row));
                tr.mark("index: rows that outgrew their slots");
            }
            if let Some((ids, dists)) =
                self.pack(gpu, &main, ovf.as_ref(), &counts, k, &mut out.offsets)?
            {
                ids_parts.push(ids);
                dist_parts.push(dists);
            }
            tr.mark("index: sort and pack");
            out.radii.extend_from_slice(&found.radii);
            out.evals += found.evals;
            // Slots for the next batch: room for 99 % of the rows seen, the others run again.
            let mut c = found.counts;
            let at = (c.len() * 99 / 100).min(c.len() - 1);
            let q99 = *c.select_nth_unstable(at).1 as usize;
            cap = q99.max(k).next_power_of_two().clamp(256, 1 << 24);
            q0 = q1;
        }
        out.ids = download_parts(gpu, ids_parts)?;
        out.dists = download_parts(gpu, dist_parts)?;
        tr.mark("index: download");
        Ok(out)
    }

    fn slots(&self, gpu: &Gpu, rows: usize, cap: usize, radii: &[f64]) -> Result<Slots> {
        let s = &gpu.stream;
        // SAFETY: the kernel writes every slot it reports and every count; nothing else is read.
        unsafe {
            Ok(Slots {
                rows,
                cap,
                id: s
                    .alloc::<u32>(rows * cap)
                    .map_err(dev("allocating slots"))?,
                key: s
                    .alloc::<f64>(rows * cap)
                    .map_err(dev("allocating slots"))?,
                counts: s.alloc::<u64>(rows).map_err(dev("allocating counts"))?,
                evals: s.alloc::<u64>(rows).map_err(dev("allocating counts"))?,
                radii: s.clone_htod(radii).map_err(dev("copying radii"))?,
            })
        }
    }

    /// One launch of lc_search: block b answers query `qids[b]` (b when `qids` is none) of
    /// `queries`.
    fn launch(
        &self,
        gpu: &Gpu,
        queries: &CudaView<'_, f32>,
        qids: Option<&CudaSlice<u32>>,
        slots: &mut Slots,
        k: usize,
    ) -> Result<Found> {
        let d = self.dim as i32;
        // The start value of Rust's f64 Sum, which the keys must use to match bit for bit.
        let zero: f64 = std::iter::empty::<f64>().sum();
        let (kk, cap, grow) = (k as i64, slots.cap as u32, self.scale);
        let null: u64 = 0;
        let mut l = gpu.stream.launch_builder(&self.search);
        self.index.push(&mut l);
        l.arg(&d).arg(&self.code).arg(&zero).arg(queries);
        match qids {
            Some(q) => l.arg(q),
            None => l.arg(&null),
        };
        l.arg(&mut slots.radii)
            .arg(&kk)
            .arg(&grow)
            .arg(&cap)
            .arg(&mut slots.id)
            .arg(&mut slots.key)
            .arg(&mut slots.counts)
            .arg(&mut slots.evals);
        let cfg = LaunchConfig {
            grid_dim: (slots.rows as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: (self.dim * 4) as u32,
        };
        // SAFETY: the index's kernel takes its own arguments (pushed by `IndexArgs::push`) and
        // then these, as lc_search and sss_search in kernels/ declare them; every block's query
        // index is below the number of rows in `queries`, and the slots hold rows × cap answers.
        unsafe { l.launch(cfg) }.map_err(dev("index search"))?;
        let counts = gpu
            .stream
            .clone_dtoh(&slots.counts)
            .map_err(dev("reading counts"))?;
        let evals: Vec<u64> = gpu
            .stream
            .clone_dtoh(&slots.evals)
            .map_err(dev("reading counts"))?;
        let radii = gpu
            .stream
            .clone_dtoh(&slots.radii)
            .map_err(dev("reading radii"))?;
        Ok(Found {
            counts,
            radii,
            evals: evals.iter().sum(),
        })
    }

    /// Sorts the batch's rows on the device and downloads them packed (the first k of each row
    /// for k-NN); appends the rows' ends to `offsets`.
    fn pack(
        &self,
        gpu: &Gpu,
        main: &Slots,
        ovf: Option<&(Slots, Vec<i32>)>,
        counts: &[u64],
        k: usize,
        offsets: &mut Vec<usize>,
    ) -> Result<Option<(CudaSlice<u32>, CudaSlice<f32>)>> {
        let s = &gpu.stream;
        let rows = main.rows;
        let mut local = Vec::with_capacity(rows);
        let mut at = 0u64;
        let base = *offsets.last().expect("starts with 0");
        for &c in counts {
            local.push(at);
            at += if k > 0 { c.min(k as u64) } else { c };
            offsets.push(base + at as usize);
        }
        let total = at as usize;
        if total == 0 {
            return Ok(None);
        }
        let counts_dev = upload(gpu, counts)?;
        let local_dev = upload(gpu, &local)?;
        // SAFETY: lc_sort_rows writes every one of the `total` packed entries.
        let mut did = unsafe { s.alloc::<u32>(total) }.map_err(dev("allocating"))?;
        let mut ddist = unsafe { s.alloc::<f32>(total) }.map_err(dev("allocating"))?;
        let ovf_dev = match ovf {
            Some((_, map)) => Some(upload(gpu, map)?),
            None => None,
        };
        let (cap, take, smem_rows) = (main.cap as u32, k as u64, SMEM_ROWS);
        let null: u64 = 0;
        let zero_cap = 0u32;
        let mut l = s.launch_builder(&self.sort);
        l.arg(&main.key).arg(&main.id).arg(&cap).arg(&counts_dev);
        let ocap;
        match (ovf, &ovf_dev) {
            (Some((o, _)), Some(map)) => {
                ocap = o.cap as u32;
                l.arg(&o.key).arg(&o.id).arg(&ocap).arg(map);
            }
            _ => {
                l.arg(&null).arg(&null).arg(&zero_cap).arg(&null);
            }
        }
        l.arg(&local_dev)
            .arg(&take)
            .arg(&self.code)
            .arg(&smem_rows)
            .arg(&mut did)
            .arg(&mut ddist);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: SMEM_ROWS * 12,
        };
        // SAFETY: matches lc_sort_rows in kernels/index/lc_search.cu: a row's count is at most its
        // slots' capacity (rows that outgrew the main slots are mapped to overflow slots that
        // hold them), and the packed buffers hold `total` entries at the offsets given.
        unsafe { l.launch(cfg) }.map_err(dev("lc_sort_rows"))?;
        Ok(Some((did, ddist)))
    }
}

/// The median of the positive values (1 when there is none): a typical distance of the index,
/// where k-NN radii start growing.
pub(crate) fn median_positive(mut v: Vec<f64>) -> f64 {
    v.retain(|&x| x > 0.0);
    if v.is_empty() {
        return 1.0;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable_by(mid, f64::total_cmp).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimension_major_puts_each_dimension_in_one_run() {
        // Three rows of two values; rows 2 and 0, in that order.
        let v = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(dimension_major(&v, 2, &[2, 0]), vec![5.0, 1.0, 6.0, 2.0]);
        assert_eq!(dimension_major(&v, 2, &[]), vec![0.0]);
    }

    #[test]
    fn median_positive_ignores_zeros_and_has_a_fallback() {
        assert_eq!(median_positive(vec![0.0, 3.0, 1.0, 0.0, 2.0]), 2.0);
        assert_eq!(median_positive(vec![0.0, 0.0]), 1.0);
        assert_eq!(median_positive(vec![]), 1.0);
    }

    #[test]
    fn only_exactly_reproducible_true_metrics_are_taken() {
        for m in [Metric::Euclidean, Metric::Cityblock, Metric::Chebyshev] {
            assert!(metric_code(&m).is_ok(), "{m}");
        }
        for m in [Metric::Minkowski(3.0), Metric::Cosine, Metric::SqEuclidean] {
            assert!(metric_code(&m).is_err(), "{m}");
        }
    }

    #[test]
    fn query_dimension_must_fit_shared_memory() {
        assert!(check_dim("x", 1025, 12_312).is_ok());
        let err = check_dim("x", 20_000, 12_312).unwrap_err();
        assert!(err.to_string().contains("at most 9210 dimensions"), "{err}");
    }
}
