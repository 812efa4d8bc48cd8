//! The SSS pivot table on the device: items in table order and the table uploaded pivot-major
//! (kernels/index/sss_search.cu scans them; `schedule` runs the queries).

use cudarc::driver::{CudaSlice, LaunchArgs, PushKernelArg};
use rayon::prelude::*;
use voisin::{Error, Result};
use voisin_index::{MetricIndex, Sss, VectorSpace};

use super::schedule::{
    check_dim, dimension_major, median_positive, metric_code, upload, IndexArgs, ItemShape,
    Searcher,
};
use crate::engine::CudaEngine;
use crate::runtime::abi;

/// Static shared memory of sss_search (counters, the query's pivot distances and keys).
const SEARCH_STATIC_SMEM: usize = 32 + 2 * 8 * MAX_PIVOTS;
/// Pivots per table at most (index/sss_search.cu).
const MAX_PIVOTS: usize = abi::SSS_MAX_PIVOTS;

/// The pivot table's buffers, in sss_search's argument order.
struct Table {
    /// Items in table order, dimension-major (`dim × n`).
    x: CudaSlice<f32>,
    xid: CudaSlice<u32>,
    n: i64,
    /// Pivot-major (`np × n`): row i's distance to pivot p at `p * n + i`.
    tab: CudaSlice<f64>,
    np: i32,
    /// Pivots, dimension-major (`dim × np`).
    pv: CudaSlice<f32>,
    pid: CudaSlice<u32>,
    /// 1 for the rows that are pivots (answered from the pivot distances).
    skip: CudaSlice<u8>,
    /// Largest table value, for the rounding allowance (as the CPU index computes it).
    widest: f64,
}

impl IndexArgs for Table {
    fn push<'a>(&'a self, l: &mut LaunchArgs<'a>) {
        l.arg(&self.x)
            .arg(&self.xid)
            .arg(&self.n)
            .arg(&self.tab)
            .arg(&self.np)
            .arg(&self.pv)
            .arg(&self.pid)
            .arg(&self.skip)
            .arg(&self.widest);
    }

    fn is_empty(&self) -> bool {
        self.n == 0 || self.np == 0
    }
}

/// An SSS pivot index over vectors (euclidean, cityblock or chebyshev), resident on one GPU.
pub struct GpuSss<'e>(Searcher<'e, Table>);

impl<'e> GpuSss<'e> {
    /// The GPU's limits (metric, dimension, pivots, size): an index within them is searched
    /// here.
    pub(crate) fn check(sss: &Sss<VectorSpace>) -> Result<()> {
        let space = sss.space();
        metric_code(space.metric())?;
        let (d, n) = (space.dim(), space.values().len() / space.dim());
        check_dim("SSS index", d, SEARCH_STATIC_SMEM)?;
        let np = sss.parts().0.len();
        if np > MAX_PIVOTS || n > i32::MAX as usize {
            return Err(Error::invalid(format!(
                "the GPU SSS index takes at most {MAX_PIVOTS} pivots and 2^31 - 1 items, not \
                 {np} pivots over {n} items"
            )));
        }
        Ok(())
    }

    /// Uploads `sss` to the engine's GPU (at most 64 pivots).
    pub fn new(engine: &'e CudaEngine, sss: &Sss<VectorSpace>) -> Result<Self> {
        Self::check(sss)?;
        let space = sss.space();
        let metric = space.metric();
        let (d, n) = (space.dim(), space.values().len() / space.dim());
        let (pivots, order, table) = sss.parts();
        let np = pivots.len();
        let mut tab = vec![0f64; (np * n).max(1)];
        if n > 0 {
            tab.par_chunks_mut(n).enumerate().for_each(|(p, col)| {
                for (i, v) in col.iter_mut().enumerate() {
                    *v = table[i * np + p];
                }
            });
        }
        let mut is_pivot = vec![0u8; n];
        for &p in pivots {
            is_pivot[p as usize] = 1;
        }
        let skip: Vec<u8> = order.iter().map(|&x| is_pivot[x as usize]).collect();
        let widest = table.iter().copied().fold(0.0, f64::max);
        // k-NN radii start from a small fraction of a typical distance to the first pivot.
        let scale = median_positive(tab[..n].to_vec()) / 16.0;
        let values = space.values();
        let gpu = engine.lock()?;
        let index = Table {
            x: gpu.upload(&dimension_major(values, d, order))?,
            xid: upload(&gpu, order)?,
            n: n as i64,
            tab: upload(&gpu, &tab)?,
            np: np as i32,
            pv: gpu.upload(&dimension_major(values, d, pivots))?,
            pid: upload(&gpu, pivots)?,
            skip: upload(&gpu, &skip)?,
            widest,
        };
        Searcher::new(
            engine,
            &gpu,
            ItemShape {
                metric,
                dim: d,
                n,
                scale,
            },
            |k| k.sss_search(),
            index,
        )
        .map(GpuSss)
    }
}

super::index_api!(GpuSss);
