//! The List of Clusters on the device: centers, covering radii and members uploaded
//! dimension-major (kernels/index/lc_search.cu scans them; `schedule` runs the queries).
//! A device copy holds the whole list or a contiguous run of its clusters (a part on one of
//! several GPUs, or a supercluster streamed through one: `spread.rs`, `lsc.rs`).

use std::ops::Range;

use cudarc::driver::{
    sys, CudaEvent, CudaSlice, CudaStream, DeviceRepr, LaunchArgs, PushKernelArg,
};
use rayon::prelude::*;
use voisin::{Error, Result};
use voisin_index::{ListOfClusters, MetricIndex, VectorSpace};

use super::schedule::{
    check_dim, dimension_major, median_positive, metric_code, upload, IndexArgs, ItemShape,
    Searcher,
};
use crate::engine::CudaEngine;
use crate::runtime::context::{dev, Gpu};

/// Static shared memory of lc_search (the tile's cluster list).
const SEARCH_STATIC_SMEM: usize = 16 + 8 + 1024 * 12;

/// The List of Clusters' buffers, in lc_search's argument order.
pub(crate) struct Lc {
    /// Centers, dimension-major (`dim × nc`).
    ctr: CudaSlice<f32>,
    crad: CudaSlice<f64>,
    cid: CudaSlice<u32>,
    /// Cluster j's members are `cbeg[j]..cbeg[j + 1]` of the member arrays.
    cbeg: CudaSlice<u32>,
    /// Members in the index's order, dimension-major (`dim × nm`).
    mem: CudaSlice<f32>,
    mdist: CudaSlice<f64>,
    mid: CudaSlice<u32>,
    nc: i32,
    nm: i64,
}

impl IndexArgs for Lc {
    fn push<'a>(&'a self, l: &mut LaunchArgs<'a>) {
        l.arg(&self.ctr)
            .arg(&self.crad)
            .arg(&self.cid)
            .arg(&self.cbeg)
            .arg(&self.mem)
            .arg(&self.mdist)
            .arg(&self.mid)
            .arg(&self.nc)
            .arg(&self.nm);
    }

    fn is_empty(&self) -> bool {
        self.nc == 0
    }
}

/// A run of clusters in the device layout, on the host: what a device copy uploads.
pub(crate) struct LcHost {
    ctr: Vec<f32>,
    crad: Vec<f64>,
    cid: Vec<u32>,
    cbeg: Vec<u32>,
    mem: Vec<f32>,
    mdist: Vec<f64>,
    mid: Vec<u32>,
    /// Items of the run (centers and members).
    items: usize,
}

impl LcHost {
    /// Clusters `run` of `lc` (item ids stay those of the whole index).
    pub(crate) fn of(lc: &ListOfClusters<VectorSpace>, run: Range<usize>) -> Result<Self> {
        let space = lc.space();
        let d = space.dim();
        let (clusters, members, member_dist) = lc.parts();
        let nm_all = members.len();
        let first = clusters.get(run.start).map_or(nm_all, |c| c.start);
        let mut cbeg: Vec<u32> = Vec::with_capacity(run.len() + 1);
        for j in run.clone() {
            let c = &clusters[j];
            let next = clusters.get(j + 1).map_or(nm_all, |c| c.start);
            if c.end != next || c.start > c.end || c.start < first {
                return Err(Error::invalid(
                    "the List of Clusters' member ranges are not contiguous",
                ));
            }
            cbeg.push((c.start - first) as u32);
        }
        let last = clusters.get(run.end).map_or(nm_all, |c| c.start);
        cbeg.push((last - first) as u32);
        let part = &clusters[run.clone()];
        let cid: Vec<u32> = part.iter().map(|c| c.center).collect();
        let crad: Vec<f64> = part.iter().map(|c| c.radius).collect();
        let mid = &members[first..last];
        let values = space.values();
        Ok(LcHost {
            ctr: dimension_major(values, d, &cid),
            crad,
            mem: dimension_major(values, d, mid),
            mdist: member_dist[first..last].to_vec(),
            mid: mid.to_vec(),
            items: cid.len() + mid.len(),
            cid,
            cbeg,
        })
    }

    /// The copy on the engine's stream (large arrays through the pinned staging buffers).
    fn upload(&self, gpu: &Gpu) -> Result<Lc> {
        Ok(Lc {
            ctr: gpu.upload(&self.ctr)?,
            crad: upload(gpu, &self.crad)?,
            cid: upload(gpu, &self.cid)?,
            cbeg: upload(gpu, &self.cbeg)?,
            mem: gpu.upload(&self.mem)?,
            mdist: upload(gpu, &self.mdist)?,
            mid: upload(gpu, &self.mid)?,
            nc: self.cid.len() as i32,
            nm: self.mid.len() as i64,
        })
    }

    /// The run's arrays as bytes, in `Lc`'s field order (lc_search's argument order).
    fn arrays(&self) -> [&[u8]; 7] {
        [
            bytemuck::cast_slice(&self.ctr),
            bytemuck::cast_slice(&self.crad),
            bytemuck::cast_slice(&self.cid),
            bytemuck::cast_slice(&self.cbeg),
            bytemuck::cast_slice(&self.mem),
            bytemuck::cast_slice(&self.mdist),
            bytemuck::cast_slice(&self.mid),
        ]
    }

    /// Where each of [`LcHost::arrays`] lies in the page-locked staging: one after the other,
    /// each at an 8-aligned offset. [`LcHost::stage`] writes them there and
    /// [`LcHost::upload_behind`] copies them from there, so both read this one layout.
    fn placed(&self) -> [Range<usize>; 7] {
        let mut at = 0usize;
        self.arrays().map(|a| {
            let start = at.next_multiple_of(8);
            at = start + a.len();
            start..at
        })
    }

    /// Bytes of page-locked memory [`LcHost::stage`] writes: at most [`STAGING_PADDING`] more
    /// than the run's `spread::run_bytes`.
    pub(crate) fn staged_bytes(&self) -> usize {
        self.placed()[6].end
    }

    /// Writes the run into `pinned` (page-locked, at least [`LcHost::staged_bytes`] long) for
    /// [`LcHost::upload_behind`]. Host work only, no device call and no engine lock, so that it
    /// can run while the engine's stream searches; the caller owns the rule that no copy still
    /// in flight reads `pinned`.
    pub(crate) fn stage(&self, pinned: &mut [u8]) {
        for (a, at) in self.arrays().into_iter().zip(self.placed()) {
            pinned[at]
                .par_chunks_mut(1 << 20)
                .zip(a.par_chunks(1 << 20))
                .for_each(|(o, i)| o.copy_from_slice(i));
        }
    }

    /// The copy behind the work already queued on the engine's stream, from `pinned` as
    /// [`LcHost::stage`] filled it: buffers allocated on the engine's stream, filled on the copy
    /// stream, so that the host returns as soon as the copies are queued (no host packing here:
    /// the copy is in flight at once). `pinned` must not be written again before the copy
    /// stream's next event has completed. The engine's stream must wait for the copy stream
    /// before it reads the copy.
    /// Returns a timing event recorded on the copy stream when the copies start, and the copy.
    pub(crate) fn upload_behind(&self, gpu: &Gpu, pinned: &[u8]) -> Result<(CudaEvent, Lc)> {
        let mut lc = Lc {
            ctr: alloc(gpu, self.ctr.len())?,
            crad: alloc(gpu, self.crad.len())?,
            cid: alloc(gpu, self.cid.len())?,
            cbeg: alloc(gpu, self.cbeg.len())?,
            mem: alloc(gpu, self.mem.len())?,
            mdist: alloc(gpu, self.mdist.len())?,
            mid: alloc(gpu, self.mid.len())?,
            nc: self.cid.len() as i32,
            nm: self.mid.len() as i64,
        };
        gpu.fence_copies()?;
        let start = mark(gpu.copy_stream())?;
        let [ctr, crad, cid, cbeg, mem, mdist, mid] = self.placed().map(|at| &pinned[at]);
        copy_behind(gpu, ctr, &mut lc.ctr)?;
        copy_behind(gpu, crad, &mut lc.crad)?;
        copy_behind(gpu, cid, &mut lc.cid)?;
        copy_behind(gpu, cbeg, &mut lc.cbeg)?;
        copy_behind(gpu, mem, &mut lc.mem)?;
        copy_behind(gpu, mdist, &mut lc.mdist)?;
        copy_behind(gpu, mid, &mut lc.mid)?;
        Ok((start, lc))
    }
}

/// Bytes a run's staging may take beyond its `spread::run_bytes`: the alignment before each
/// of the seven arrays, and the one value an empty array of members still holds.
pub(crate) const STAGING_PADDING: usize = 7 * 8;

/// A timing event recorded now on `stream`.
pub(crate) fn mark(stream: &CudaStream) -> Result<CudaEvent> {
    stream
        .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(dev("recording an event"))
}

/// An uninitialised device buffer of `len` values (at least one, so it has an address).
fn alloc<T: DeviceRepr>(gpu: &Gpu, len: usize) -> Result<CudaSlice<T>> {
    // SAFETY: every value that is read is written by `copy_behind` first.
    unsafe { gpu.stream.alloc::<T>(len.max(1)) }.map_err(|e| {
        // What was asked and what was left say whether the share or something else is at fault.
        let free = gpu.ctx.mem_get_info().map_or(0, |m| m.0);
        dev(format!(
            "allocating {} bytes of a supercluster ({} bytes free)",
            len.max(1) * std::mem::size_of::<T>(),
            free
        ))(e)
    })
}

/// Queues the copy of `host` (an array of `dst`'s values, as bytes, in page-locked memory) to
/// `dst` on the copy stream.
fn copy_behind<T: DeviceRepr>(gpu: &Gpu, host: &[u8], dst: &mut CudaSlice<T>) -> Result<()> {
    if host.is_empty() {
        return Ok(());
    }
    // Guards the unsafe copy below against a staging whose arrays are not `Lc`'s fields.
    assert!(
        host.len() <= dst.len() * std::mem::size_of::<T>(),
        "a staged array longer than its device buffer"
    );
    let copy = gpu.copy_stream();
    let (ptr, _guard) = cudarc::driver::DevicePtrMut::device_ptr_mut(dst, copy);
    // SAFETY: `dst` holds at least `host.len()` bytes of this context (asserted above); `host`
    // is page-locked and is not written again before the copy stream's event that follows
    // this copy has completed (the caller's rule), and `dst` is freed on the engine's stream
    // only after it waited for that event (`lsc.rs`'s `InFlight`).
    unsafe { cudarc::driver::result::memcpy_htod_async(ptr, host, copy.cu_stream()) }
        .map_err(dev("copying a supercluster"))
}

/// A List of Clusters over vectors (euclidean, cityblock or chebyshev), resident on one GPU:
/// the whole list, or a run of its clusters.
pub struct GpuLc<'e>(Searcher<'e, Lc>);

impl<'e> GpuLc<'e> {
    /// The GPU's limits (metric, dimension, size): an index within them is searched here.
    pub(crate) fn check(lc: &ListOfClusters<VectorSpace>) -> Result<()> {
        let space = lc.space();
        metric_code(space.metric())?;
        let (d, n) = (space.dim(), space.values().len() / space.dim());
        check_dim("List of Clusters", d, SEARCH_STATIC_SMEM)?;
        if n > i32::MAX as usize {
            return Err(Error::invalid(
                "the GPU List of Clusters holds at most 2^31 - 1 items",
            ));
        }
        Ok(())
    }

    /// Uploads `lc` to the engine's GPU.
    pub fn new(engine: &'e CudaEngine, lc: &ListOfClusters<VectorSpace>) -> Result<Self> {
        Self::with_clusters(engine, lc, 0..lc.clusters().len())
    }

    /// Uploads clusters `run` of `lc` to the engine's GPU: a List of Clusters over their items
    /// alone, answering with the whole index's item ids (docs/design/lc-multi-gpu-superclusters.md
    /// says why a run answers exactly for its items).
    pub fn with_clusters(
        engine: &'e CudaEngine,
        lc: &ListOfClusters<VectorSpace>,
        run: Range<usize>,
    ) -> Result<Self> {
        Self::check(lc)?;
        if run.end > lc.clusters().len() || run.start > run.end {
            return Err(Error::invalid(format!(
                "clusters {run:?} are not within the index's {}",
                lc.clusters().len()
            )));
        }
        let host = LcHost::of(lc, run)?;
        let gpu = engine.lock()?;
        let index = host.upload(&gpu)?;
        Self::on_device(engine, &gpu, lc, &host, index, None)
    }

    /// The searcher of a copy made from `host` (a run of `lc`'s clusters), with a fixed
    /// working-set budget when `budget` is some (a streamed supercluster).
    pub(crate) fn on_device(
        engine: &'e CudaEngine,
        gpu: &Gpu,
        lc: &ListOfClusters<VectorSpace>,
        host: &LcHost,
        index: Lc,
        budget: Option<usize>,
    ) -> Result<Self> {
        let space = lc.space();
        let d = space.dim();
        // The whole list counts every item of the space (as before runs existed); a run counts
        // its own, so that its k-NN rows hold min(k, its items).
        let n = if index.nc as usize == lc.clusters().len() {
            space.values().len() / d
        } else {
            host.items
        };
        let scale = median_positive(host.crad.clone());
        Searcher::new(
            engine,
            gpu,
            ItemShape {
                metric: space.metric(),
                dim: d,
                n,
                scale,
            },
            |k| k.lc_search(),
            index,
        )
        .map(|s| {
            GpuLc(match budget {
                Some(b) => s.with_budget(b),
                None => s,
            })
        })
    }
}

super::index_api!(GpuLc);

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::{Metric, VectorSet};

    #[test]
    fn staging_puts_every_array_8_aligned_apart_intact_and_within_its_bound() {
        let n = 60;
        let v: Vec<f32> = (0..n * 3).map(|i| ((i * 7919) % 101) as f32).collect();
        let set = VectorSet::from_f32(n, 3, v).unwrap();
        let lc = ListOfClusters::build(VectorSpace::new(&set, Metric::Euclidean).unwrap(), 7);
        let nc = lc.clusters().len();
        for run in [0..nc, 0..1, 1..nc.min(4), nc - 1..nc, 2..2] {
            let host = LcHost::of(&lc, run.clone()).unwrap();
            let mut pinned = vec![0xa5u8; host.staged_bytes()];
            host.stage(&mut pinned);
            let placed = host.placed();
            for ((a, at), w) in host.arrays().into_iter().zip(&placed).zip(0..) {
                assert_eq!(at.start % 8, 0, "{run:?}: array {w}");
                assert_eq!(&pinned[at.clone()], a, "{run:?}: array {w}");
            }
            for w in placed.windows(2) {
                assert!(w[0].end <= w[1].start, "{run:?}: {placed:?}");
            }
            let bound = super::super::spread::run_bytes(&lc, run.clone()) + STAGING_PADDING;
            assert!(host.staged_bytes() <= bound, "{run:?}");
        }
    }
}
