//! Exact f64 keys of candidate pairs, the values every engine reports.
//!
//! On the device (kernels/finish/exact.cu) for every built-in metric whose exact key uses only
//! correctly rounded operations, so the keys are bit-identical to
//! [`voisin::metric::exact::vector_key`]; minkowski needs `powf`, whose rounding differs between
//! libm and CUDA, so its keys are computed on the host. [`rerank`] launches kernels/finish/rerank.cu,
//! the k-NN finish on the device (search/knn.rs decides when), which calls the same `exact_key`.
//!
//! Sets stored as f64 are on the device rounded to f32, so their keys are computed on the host
//! from the f64 values ([`on_host`]), by the function the CPU engine calls
//! ([`voisin::metric::exact::set_key`]): the same keys by construction.

use cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use voisin::data::VectorSet;
use voisin::metric::exact::set_key;
use voisin::{Metric, Result};

use crate::numerics::plan::{device_code, stored_f64};
use crate::ops::device_set::DeviceSet;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// Pairs per launch: bounds the index and key buffers (64M pairs: 1 GiB of keys and indices).
const CHUNK: usize = 1 << 26;

/// Dimension from which exact keys run on rows their warp staged (kernels/finish/exact.cu):
/// below it a thread's own rows take a few cache lines and the staging is overhead.
pub(crate) const STAGED_MIN_DIM: usize = 1024;

/// The sides of a search: base and queries, on the host and on the device.
pub(crate) struct Sides<'a> {
    pub bset: &'a VectorSet,
    pub qset: &'a VectorSet,
    pub bdev: &'a DeviceSet<'a>,
    pub qdev: &'a DeviceSet<'a>,
}

/// The start value of Rust's f64 `Sum`, which the kernels must use to match bit for bit.
fn sum_zero() -> f64 {
    std::iter::empty::<f64>().sum()
}

/// Exact keys of the pairs [query, base index] on the host, in parallel, on the stored values:
/// for metrics the kernel does not cover, for sets stored as f64 and for bases whose raw rows
/// are not on the device (streamed shards).
pub(crate) fn host_keys(
    metric: &Metric,
    bset: &VectorSet,
    qset: &VectorSet,
    pairs: &[[u32; 2]],
) -> Vec<f64> {
    pairs
        .par_iter()
        .map(|&[q, b]| set_key(metric, bset, b as usize, qset, q as usize))
        .collect()
}

/// Whether the exact keys of `metric` between these sets are computed on the host
/// ([`host_keys`]): metrics without device code, and f64 storage on either side.
pub(crate) fn on_host(metric: &Metric, bset: &VectorSet, qset: &VectorSet) -> bool {
    device_code(metric).is_none() || stored_f64(bset) || stored_f64(qset)
}

/// Exact keys of the pairs [query, base index].
pub(crate) fn keys(
    gpu: &Gpu,
    metric: &Metric,
    s: &Sides<'_>,
    pairs: &[[u32; 2]],
) -> Result<Vec<f64>> {
    let code = match device_code(metric) {
        Some(code) if !on_host(metric, s.bset, s.qset) => code,
        _ => return Ok(host_keys(metric, s.bset, s.qset, pairs)),
    };
    let zero = sum_zero();
    let d = s.bset.dim() as i32;
    // Both sides share the plan's storage and so its row stride.
    debug_assert_eq!(s.bdev.raw_ld(), s.qdev.raw_ld());
    let ld = s.bdev.raw_ld() as i64;
    let mut out: Vec<f64> = Vec::new();
    let mut tr = gpu.phases();
    for chunk in pairs.chunks(CHUNK) {
        let n = chunk.len();
        let dp = gpu.upload::<f32>(bytemuck::cast_slice(chunk))?;
        tr.mark("exact: upload pairs");
        // SAFETY: a pair of u32 is 8 bytes like two f32; the buffer holds at least 2n words.
        let vp: CudaView<'_, [u32; 2]> = unsafe { dp.transmute(n).unwrap() };
        let mut keys = unsafe { gpu.stream.alloc::<f64>(n) }.map_err(dev("allocating"))?;
        // A thread per pair; the staged kernel's blocks are EK_WARPS warps (its shared memory
        // is static).
        let per_block = 32 * abi::EK_WARPS;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(per_block) as u32, 1, 1),
            block_dim: (per_block as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let kernels = gpu.k.elem(s.bdev.storage)?;
        let kernel = if d as usize >= STAGED_MIN_DIM {
            &kernels.exact_keys_staged
        } else {
            &kernels.exact_keys
        };
        let np = n as i64;
        let mut l = gpu.stream.launch_builder(kernel);
        s.bdev.raw.arg(&mut l);
        s.qdev.raw.arg(&mut l);
        l.arg(&d)
            .arg(&ld)
            .arg(&vp)
            .arg(&np)
            .arg(&code)
            .arg(&zero)
            .arg(&mut keys);
        // SAFETY: matches kernels/finish/exact.cu compiled for the sides' storage (both sides share
        // the plan's); indices are below the sets' sizes.
        unsafe { l.launch(cfg) }.map_err(dev("exact_keys"))?;
        gpu.stream.synchronize().map_err(dev("exact_keys"))?;
        tr.mark("exact: kernel");
        let got = gpu.download(&keys.slice(..))?;
        if out.is_empty() {
            out = got;
        } else {
            out.extend(got);
        }
    }
    Ok(out)
}

/// What the rerank kernel needs to know about the search besides the lists.
pub(crate) struct Rerank<'a> {
    pub sides: &'a Sides<'a>,
    /// [`device_code`] and [`distance_form`] of the metric.
    pub code: i32,
    pub form: i32,
    pub k: usize,
    /// The entries of a list that holds every candidate (a k-NN's base items, a graph row's
    /// other items): such a list needs no proof.
    pub whole: usize,
    /// The plan's bound: relative part and absolute slack (numerics/plan.rs `BoundParts`).
    pub rel: f64,
    pub tiny: f64,
}

/// The rerank kernel's outputs for `rows` rows: `rows × k` ids with their reported distances
/// (a k-NN's answers) or their exact keys (a graph's rows, which the core merges and keeps on
/// exact keys), and per row the exact keys computed or [`NOT_DONE`].
pub(crate) struct Reranked {
    pub dist: Option<CudaSlice<f32>>,
    pub keys: Option<CudaSlice<f64>>,
    pub ids: CudaSlice<u32>,
    pub status: CudaSlice<u32>,
}

impl Reranked {
    /// Room for distances.
    pub fn new(gpu: &Gpu, rows: usize, k: usize) -> Result<Self> {
        let mut out = Self::ids(gpu, rows, k)?;
        // SAFETY: as in `ids`.
        out.dist =
            Some(unsafe { gpu.stream.alloc::<f32>((rows * k).max(1)) }.map_err(dev("allocating"))?);
        Ok(out)
    }

    /// Room for exact keys.
    pub fn keys(gpu: &Gpu, rows: usize, k: usize) -> Result<Self> {
        let mut out = Self::ids(gpu, rows, k)?;
        // SAFETY: as in `ids`.
        out.keys =
            Some(unsafe { gpu.stream.alloc::<f64>((rows * k).max(1)) }.map_err(dev("allocating"))?);
        Ok(out)
    }

    fn ids(gpu: &Gpu, rows: usize, k: usize) -> Result<Self> {
        let s = &gpu.stream;
        // SAFETY: the kernel writes every status, and the k entries of every row it finishes;
        // the host reads only those.
        unsafe {
            Ok(Reranked {
                dist: None,
                keys: None,
                ids: s
                    .alloc::<u32>((rows * k).max(1))
                    .map_err(dev("allocating"))?,
                status: s.alloc::<u32>(rows.max(1)).map_err(dev("allocating"))?,
            })
        }
    }

    /// The distances (room made by [`Reranked::new`]).
    pub fn dist(&self) -> Result<&CudaSlice<f32>> {
        self.dist
            .as_ref()
            .ok_or_else(|| voisin::Error::device("cuda: re-ranked rows without distances (bug)"))
    }

    /// The exact keys (room made by [`Reranked::keys`]).
    pub fn exact_keys(&self) -> Result<&CudaSlice<f64>> {
        self.keys
            .as_ref()
            .ok_or_else(|| voisin::Error::device("cuda: re-ranked rows without keys (bug)"))
    }
}

/// What a rerank writes beside each answer's id: the reported distance (`f32`, a k-NN's
/// answers) or the exact key (`f64`, a graph's rows, which the core merges on exact keys).
pub(crate) trait Answer: bytemuck::Pod + Send + Sync + cudarc::driver::DeviceRepr {
    /// Room for `rows × k` answers of this kind.
    fn room(gpu: &Gpu, rows: usize, k: usize) -> Result<Reranked>;
    /// The values written there.
    fn of(out: &Reranked) -> Result<&CudaSlice<Self>>;
}

impl Answer for f32 {
    fn room(gpu: &Gpu, rows: usize, k: usize) -> Result<Reranked> {
        Reranked::new(gpu, rows, k)
    }

    fn of(out: &Reranked) -> Result<&CudaSlice<f32>> {
        out.dist()
    }
}

impl Answer for f64 {
    fn room(gpu: &Gpu, rows: usize, k: usize) -> Result<Reranked> {
        Reranked::keys(gpu, rows, k)
    }

    fn of(out: &Reranked) -> Result<&CudaSlice<f64>> {
        out.exact_keys()
    }
}

/// Status of a row the kernel left to the host.
pub(crate) const NOT_DONE: u32 = abi::RR_NOT_DONE;

/// The rows a rerank left to the host (numbered as in `status`), and the exact keys it computed
/// for the others.
pub(crate) fn open_rows(status: &[u32]) -> (Vec<u32>, u64) {
    let open = (0..status.len() as u32)
        .into_par_iter()
        .filter(|&r| status[r as usize] == NOT_DONE)
        .collect();
    let evals = status
        .par_iter()
        .filter(|&&s| s != NOT_DONE)
        .map(|&s| s as u64)
        .sum();
    (open, evals)
}

/// Sorted candidate lists of consecutive queries on the device: `width` entries per query (a
/// power of two), the first for query `q_off`.
pub(crate) struct SortedLists<'a> {
    pub val: &'a CudaView<'a, f32>,
    pub idx: &'a CudaView<'a, u32>,
    pub width: usize,
    pub q_off: usize,
}

/// Proves and re-ranks sorted lists on the device (kernels/finish/rerank.cu): `lists` holds
/// `abs.len()` lists, `abs` their queries' bounds; the answers go to `out` from row `at` on.
/// Queued on the engine's stream.
pub(crate) fn rerank(
    gpu: &Gpu,
    job: &Rerank<'_>,
    lists: SortedLists<'_>,
    abs: &[f64],
    out: &mut Reranked,
    at: usize,
) -> Result<()> {
    let SortedLists {
        val,
        idx,
        width,
        q_off,
    } = lists;
    let rows = abs.len();
    debug_assert!(width.is_power_of_two() && val.len() == rows * width);
    debug_assert!(out.status.len() >= at + rows && out.ids.len() >= (at + rows) * job.k);
    debug_assert!(out.dist.iter().all(|d| d.len() >= (at + rows) * job.k));
    debug_assert!(out.keys.iter().all(|d| d.len() >= (at + rows) * job.k));
    if rows == 0 {
        return Ok(());
    }
    let s = &gpu.stream;
    let dabs = s.clone_htod(abs).map_err(dev("copying bounds"))?;
    // One thread per compare-exchange of the sort, at least a warp, at most 256.
    let threads = (width / 2).clamp(32, 256) as u32;
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: (width * 12) as u32,
    };
    let (w, nr, whole, k) = (width as i32, rows as i32, job.whole as u32, job.k as i32);
    let (qo, d, zero) = (q_off as u32, job.sides.bset.dim() as i32, sum_zero());
    let ld = job.sides.bdev.raw_ld() as i64;
    let mut dist = out.dist.as_mut().map(|d| d.slice_mut(at * job.k..));
    let mut keys = out.keys.as_mut().map(|d| d.slice_mut(at * job.k..));
    let null = 0u64;
    let mut ids = out.ids.slice_mut(at * job.k..);
    let mut status = out.status.slice_mut(at..);
    let mut l = s.launch_builder(&gpu.k.elem(job.sides.bdev.storage)?.rerank);
    l.arg(val)
        .arg(idx)
        .arg(&w)
        .arg(&nr)
        .arg(&whole)
        .arg(&k)
        .arg(&dabs)
        .arg(&job.rel)
        .arg(&job.tiny);
    job.sides.bdev.raw.arg(&mut l);
    job.sides.qdev.raw.arg(&mut l);
    l.arg(&qo)
        .arg(&d)
        .arg(&ld)
        .arg(&job.code)
        .arg(&zero)
        .arg(&job.form);
    match dist.as_mut() {
        Some(d) => l.arg(d),
        None => l.arg(&null),
    };
    match keys.as_mut() {
        Some(d) => l.arg(d),
        None => l.arg(&null),
    };
    l.arg(&mut ids).arg(&mut status);
    // SAFETY: matches kernels/finish/rerank.cu: the lists hold rows × width, the outputs from `at` on
    // rows × k and rows (checked above; a null pointer for an output not wanted, which the
    // kernel skips), shared memory width × 12 bytes; list indices are below the base's size and
    // the queries q_off.. are rows of the query set.
    unsafe { l.launch(cfg) }.map_err(dev("rerank"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::distance_form;

    /// kernels/finish/rerank.cu's rr_distance, written the same way.
    fn kernel_distance(key: f64, form: i32) -> f32 {
        let d = match form {
            1 => -key,
            2 => key.max(0.0).sqrt(),
            _ => key,
        };
        d as f32
    }

    /// The rows left to the host are the NOT_DONE ones, in order; the others' statuses are
    /// their exact-key counts.
    #[test]
    fn open_rows_are_the_not_done_ones_in_order() {
        let status = [3, NOT_DONE, 0, NOT_DONE, 7];
        assert_eq!(open_rows(&status), (vec![1, 3], 10));
        assert_eq!(open_rows(&[]), (vec![], 0));
    }

    /// Every metric the rerank kernel takes reports the distance `key_to_distance` gives, bit
    /// for bit, on ordinary and edge keys (zeros of both signs, subnormal, huge, negative).
    #[test]
    fn distance_forms_match_key_to_distance() {
        let keys = [
            0.0,
            -0.0,
            1e-310,
            0.1,
            2.0,
            123.456789,
            1e300,
            -3.5,
            f64::MIN_POSITIVE,
        ];
        let mut taken = 0;
        for m in Metric::builtins() {
            let Some(form) = distance_form(&m) else {
                continue;
            };
            assert!(device_code(&m).is_some(), "{m}: a form without exact keys");
            taken += 1;
            for &key in &keys {
                let want = m.key_to_distance(key) as f32;
                assert_eq!(
                    kernel_distance(key, form).to_bits(),
                    want.to_bits(),
                    "{m}: key {key}"
                );
            }
        }
        assert_eq!(taken, 7);
    }
}
