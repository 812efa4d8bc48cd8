//! Vectors resident on the device: the raw rows (for exact keys) and the prepared rows with
//! their norms (for tiles, keys and bounds), made by kernels/prepare.cu.
//!
//! Owns uploading and preparing one set of rows; knows nothing about tiling or selection.

use std::ops::Range;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use voisin::data::VectorSet;
use voisin::Result;

use crate::context::{dev, Gpu};
use crate::prepare::Plan;
use crate::tile::Block;

pub(crate) struct DeviceSet {
    /// The rows as given (converted to f32 exactly), for exact keys.
    pub raw: CudaSlice<f32>,
    /// The rows the tiles read (translated, centred or unit, per the plan).
    pub rows: CudaSlice<f32>,
    /// f32 squared norms of `rows`, for the L2 key.
    pub sqnorm: CudaSlice<f32>,
    /// Norms of `rows` on the host, for the bounds.
    pub norm: Vec<f64>,
    pub n: usize,
    /// Rows whose norm is not finite: a NaN or infinite value, or (rarely) a finite row whose
    /// translation overflowed f32. [`DeviceSet::check`] tells them apart.
    suspect: Vec<usize>,
}

impl DeviceSet {
    /// Uploads all rows of `set`.
    pub fn new(gpu: &Gpu, plan: &Plan, set: &VectorSet) -> Result<Self> {
        Self::from_raw(gpu, plan, &set.rows_f32(0, set.len()), set.len())
    }

    /// Uploads the rows `range` of `set` (one shard of the base).
    pub fn range(gpu: &Gpu, plan: &Plan, set: &VectorSet, range: Range<usize>) -> Result<Self> {
        let n = range.len();
        Self::from_raw(gpu, plan, &set.rows_f32(range.start, range.end), n)
    }

    /// Uploads the rows `ids` of `set`, in that order (a widening pass over some queries).
    pub fn gather(gpu: &Gpu, plan: &Plan, set: &VectorSet, ids: &[usize]) -> Result<Self> {
        let mut v = Vec::with_capacity(ids.len() * plan.dim);
        for &i in ids {
            v.extend_from_slice(&set.row_f32(i));
        }
        Self::from_raw(gpu, plan, &v, ids.len())
    }

    fn from_raw(gpu: &Gpu, plan: &Plan, raw: &[f32], n: usize) -> Result<Self> {
        Self::prepare(gpu, plan, gpu.upload(raw)?, n)
    }

    /// Prepares `n` rows already on the device (at least n × dim values in `raw`); the work is
    /// queued on the engine's stream, which must first wait for whatever wrote `raw`.
    pub fn prepare(gpu: &Gpu, plan: &Plan, raw: CudaSlice<f32>, n: usize) -> Result<Self> {
        let d = plan.dim;
        let stream = &gpu.stream;
        // SAFETY: prepare_rows writes every value of the first n rows and norms.
        let mut rows = unsafe { stream.alloc::<f32>((n * d).max(1)) }.map_err(dev("allocating"))?;
        let mut sqnorm = unsafe { stream.alloc::<f32>(n.max(1)) }.map_err(dev("allocating"))?;
        let mut norm = unsafe { stream.alloc::<f64>(n.max(1)) }.map_err(dev("allocating"))?;
        let shift = match &plan.shift {
            Some(s) => Some(stream.clone_htod(s).map_err(dev("copying the shift"))?),
            None => None,
        };
        if n > 0 {
            let warps_per_block = 8u32;
            let cfg = LaunchConfig {
                grid_dim: ((n as u64).div_ceil(warps_per_block as u64) as u32, 1, 1),
                block_dim: (32 * warps_per_block, 1, 1),
                shared_mem_bytes: 0,
            };
            let (nn, dd) = (n as i64, d as i32);
            let (centre, unit) = (plan.centre_rows as i32, plan.unit as i32);
            let null: u64 = 0;
            let mut l = stream.launch_builder(&gpu.k.prepare_rows);
            l.arg(&raw).arg(&nn).arg(&dd);
            match &shift {
                Some(s) => l.arg(s),
                None => l.arg(&null),
            };
            l.arg(&centre)
                .arg(&unit)
                .arg(&mut rows)
                .arg(&mut sqnorm)
                .arg(&mut norm);
            // SAFETY: matches kernels/prepare.cu; raw holds n × d values, the shift d.
            unsafe { l.launch(cfg) }.map_err(dev("prepare_rows"))?;
        }
        let mut norm_host = gpu.download(&norm.slice(..))?;
        norm_host.truncate(n);
        // A NaN or an infinity anywhere in a row makes its f64 norm NaN or infinite (finite f32
        // values cannot overflow an f64 sum of squares).
        let suspect = (0..n).filter(|&r| !norm_host[r].is_finite()).collect();
        Ok(DeviceSet {
            raw,
            rows,
            sqnorm,
            norm: norm_host,
            n,
            suspect,
        })
    }

    /// The clear error for the first row holding a NaN or infinite value, when these rows are
    /// `set`'s rows from `first` on.
    pub fn check(&self, set: &VectorSet, first: usize) -> Result<()> {
        let rows: Vec<usize> = self.suspect.iter().map(|&r| r + first).collect();
        crate::prepare::first_non_finite(set, &rows)
    }

    pub fn max_norm(&self) -> f64 {
        self.norm.iter().cloned().fold(0.0, f64::max)
    }

    /// Rows `a..b` as a tile operand.
    pub fn block(&self, a: usize, b: usize, dim: usize) -> Block<'_> {
        Block {
            rows: self.rows.slice(a * dim..(b * dim).max(a * dim + 1)),
            sqnorm: self.sqnorm.slice(a..b.max(a + 1)),
            n: b - a,
        }
    }
}
