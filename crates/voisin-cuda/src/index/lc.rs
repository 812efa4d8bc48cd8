//! The List of Clusters on the device: centers, covering radii and members uploaded
//! dimension-major (kernels/index/lc_search.cu scans them; `schedule` runs the queries).

use cudarc::driver::{CudaSlice, LaunchArgs, PushKernelArg};
use voisin::{Error, Result};
use voisin_index::{ListOfClusters, MetricIndex, VectorSpace};

use super::schedule::{
    check_dim, dimension_major, median_positive, metric_code, upload, IndexArgs, Searcher,
};
use crate::engine::CudaEngine;

/// Static shared memory of lc_search (the tile's cluster list).
const SEARCH_STATIC_SMEM: usize = 16 + 8 + 1024 * 12;

/// The List of Clusters' buffers, in lc_search's argument order.
struct Lc {
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

/// A List of Clusters over vectors (euclidean, cityblock or chebyshev), resident on one GPU.
pub struct GpuLc<'e>(Searcher<'e, Lc>);

impl<'e> GpuLc<'e> {
    /// Uploads `lc` to the engine's GPU.
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

    pub fn new(engine: &'e CudaEngine, lc: &ListOfClusters<VectorSpace>) -> Result<Self> {
        Self::check(lc)?;
        let space = lc.space();
        let metric = space.metric();
        let (d, n) = (space.dim(), space.values().len() / space.dim());
        let (clusters, members, member_dist) = lc.parts();
        let (nc, nm) = (clusters.len(), members.len());
        let mut cbeg: Vec<u32> = Vec::with_capacity(nc + 1);
        for (j, c) in clusters.iter().enumerate() {
            let next = clusters.get(j + 1).map_or(nm, |c| c.start);
            if c.end != next || c.start > c.end {
                return Err(Error::invalid(
                    "the List of Clusters' member ranges are not contiguous",
                ));
            }
            cbeg.push(c.start as u32);
        }
        cbeg.push(nm as u32);
        let cids: Vec<u32> = clusters.iter().map(|c| c.center).collect();
        let crad: Vec<f64> = clusters.iter().map(|c| c.radius).collect();
        let values = space.values();
        let gpu = engine.lock()?;
        let index = Lc {
            ctr: gpu.upload(&dimension_major(values, d, &cids))?,
            crad: upload(&gpu, &crad)?,
            cid: upload(&gpu, &cids)?,
            cbeg: upload(&gpu, &cbeg)?,
            mem: gpu.upload(&dimension_major(values, d, members))?,
            mdist: upload(&gpu, member_dist)?,
            mid: upload(&gpu, members)?,
            nc: nc as i32,
            nm: nm as i64,
        };
        let scale = median_positive(crad);
        Searcher::new(engine, &gpu, (metric, d, n, scale), |k| &k.lc_search, index).map(GpuLc)
    }
}

super::index_api!(GpuLc);
