//! Vectors resident on the device: the raw rows (for exact keys) and the prepared rows with
//! their norms (for tiles, keys and bounds), made by kernels/distance/prepare.cu.
//!
//! A set is uploaded whole ([`DeviceSet::new`] and friends) or behind the work that reads it
//! ([`DeviceSet::behind`]): the search then asks for rows as its tiles reach them
//! ([`DeviceSet::ensure`]): the host fills the next staging buffer and the copy stream moves it
//! while the GPU computes the first tiles, and [`DeviceSet::complete`] makes the norms available
//! once every row is there. Owns uploading and preparing one set of rows; knows nothing about tiling or selection.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use voisin::data::VectorSet;
use voisin::{Error, Result};

use crate::numerics::plan::Plan;
use crate::ops::tile::Block;
use crate::runtime::context::{dev, Gpu, STAGE};

pub(crate) struct DeviceSet<'s> {
    /// The rows as given (converted to f32 exactly), for exact keys.
    pub raw: CudaSlice<f32>,
    /// The rows the tiles read (translated, centred or unit, per the plan).
    pub rows: CudaSlice<f32>,
    /// f32 squared norms of `rows`, for the L2 key.
    pub sqnorm: CudaSlice<f32>,
    pub n: usize,
    norm_dev: CudaSlice<f64>,
    shift: Option<CudaSlice<f32>>,
    dim: usize,
    centre_rows: i32,
    unit: i32,
    /// The host rows of a set uploaded behind its work, and how many are on the device (kept
    /// outside the lock so that the set stays covariant in `'s`).
    src: Option<Cow<'s, [f32]>>,
    uploaded: Mutex<usize>,
    /// Set once every row is prepared.
    norms: OnceLock<Norms>,
}

struct Norms {
    /// Norms of `rows` on the host, for the bounds.
    norm: Vec<f64>,
    /// Rows whose norm is not finite: a NaN or infinite value, or (rarely) a finite row whose
    /// translation overflowed f32. [`DeviceSet::check`] tells them apart.
    suspect: Vec<usize>,
    /// The largest norm.
    max: f64,
}

impl<'s> DeviceSet<'s> {
    /// Uploads all rows of `set`.
    pub fn new(gpu: &Gpu, plan: &Plan, set: &VectorSet) -> Result<Self> {
        Self::whole(gpu, plan, set.rows_f32(0, set.len()), set.len())
    }

    /// Uploads the rows `range` of `set` (one shard of the base).
    pub fn range(gpu: &Gpu, plan: &Plan, set: &VectorSet, range: Range<usize>) -> Result<Self> {
        let n = range.len();
        Self::whole(gpu, plan, set.rows_f32(range.start, range.end), n)
    }

    /// Uploads the rows `ids` of `set`, in that order (a widening pass over some queries).
    pub fn gather(gpu: &Gpu, plan: &Plan, set: &VectorSet, ids: &[usize]) -> Result<Self> {
        let mut v = Vec::with_capacity(ids.len() * plan.dim);
        for &i in ids {
            v.extend_from_slice(&set.row_f32(i));
        }
        Self::whole(gpu, plan, Cow::Owned(v), ids.len())
    }

    /// The rows `range` of `set`, uploaded as the work that reads them asks for them
    /// ([`DeviceSet::ensure`]); nothing is copied yet.
    pub fn behind(gpu: &Gpu, plan: &Plan, set: &'s VectorSet, range: Range<usize>) -> Result<Self> {
        let n = range.len();
        let raw = alloc(gpu, n * plan.dim)?;
        // The uploads run on the copy stream, which must see this allocation first.
        gpu.fence_copies()?;
        Self::allocate(
            gpu,
            plan,
            raw,
            n,
            Some(set.rows_f32(range.start, range.end)),
        )
    }

    fn whole(gpu: &Gpu, plan: &Plan, src: Cow<'_, [f32]>, n: usize) -> Result<Self> {
        let raw = gpu.upload(&src)?;
        let set = Self::allocate(gpu, plan, raw, n, None)?;
        set.prepare_rows(gpu, 0..n)?;
        set.complete(gpu)?;
        Ok(set)
    }

    /// Prepares `n` rows already on the device (at least n × dim values in `raw`); the work is
    /// queued on the engine's stream, which must first wait for whatever wrote `raw`.
    pub fn prepare(gpu: &Gpu, plan: &Plan, raw: CudaSlice<f32>, n: usize) -> Result<Self> {
        let set = Self::allocate(gpu, plan, raw, n, None)?;
        set.prepare_rows(gpu, 0..n)?;
        set.complete(gpu)?;
        Ok(set)
    }

    fn allocate(
        gpu: &Gpu,
        plan: &Plan,
        raw: CudaSlice<f32>,
        n: usize,
        pending: Option<Cow<'s, [f32]>>,
    ) -> Result<Self> {
        let d = plan.dim;
        let stream = &gpu.stream;
        let shift = match &plan.shift {
            Some(s) => Some(stream.clone_htod(s).map_err(dev("copying the shift"))?),
            None => None,
        };
        Ok(DeviceSet {
            raw,
            rows: alloc(gpu, n * d)?,
            sqnorm: alloc(gpu, n)?,
            n,
            // SAFETY: prepare_rows writes every norm before `complete` reads them.
            norm_dev: unsafe { stream.alloc::<f64>(n.max(1)) }.map_err(dev("allocating"))?,
            shift,
            dim: d,
            centre_rows: plan.centre_rows as i32,
            unit: plan.unit as i32,
            uploaded: Mutex::new(if pending.is_some() { 0 } else { n }),
            src: pending,
            norms: OnceLock::new(),
        })
    }

    /// Queues the upload and preparation of every row below `upto` not on the device yet, in
    /// steps of one staging buffer; kernels queued afterwards see them.
    pub fn ensure(&self, gpu: &Gpu, upto: usize) -> Result<()> {
        let Some(src) = &self.src else {
            return Ok(());
        };
        let mut next = self
            .uploaded
            .lock()
            .map_err(|_| Error::device("cuda: upload lock"))?;
        let d = self.dim;
        // One staging buffer per step: each step's copy overlaps the tiles queued before it.
        let step = (STAGE / d.max(1)).max(1);
        while *next < upto.min(self.n) {
            let (r0, r1) = (*next, (*next + step).min(self.n));
            gpu.upload_into(&self.raw.slice(r0 * d..r1 * d), &src[r0 * d..r1 * d], true)?;
            self.prepare_rows(gpu, r0..r1)?;
            *next = r1;
        }
        Ok(())
    }

    /// Uploads whatever is left and reads the norms back (waits for the stream).
    pub fn complete(&self, gpu: &Gpu) -> Result<()> {
        if self.norms.get().is_some() {
            return Ok(());
        }
        self.ensure(gpu, self.n)?;
        let mut norm = gpu.download(&self.norm_dev.slice(..))?;
        norm.truncate(self.n);
        // A NaN or an infinity anywhere in a row makes its f64 norm NaN or infinite (finite f32
        // values cannot overflow an f64 sum of squares).
        let suspect = (0..self.n).filter(|&r| !norm[r].is_finite()).collect();
        let max = norm.iter().cloned().fold(0.0, f64::max);
        let _ = self.norms.set(Norms { norm, suspect, max });
        Ok(())
    }

    /// Launches prepare_rows over `rows` (raw values already queued on the stream).
    fn prepare_rows(&self, gpu: &Gpu, rows: Range<usize>) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let d = self.dim;
        let warps_per_block = 8u32;
        let cfg = LaunchConfig {
            grid_dim: (
                (rows.len() as u64).div_ceil(warps_per_block as u64) as u32,
                1,
                1,
            ),
            block_dim: (32 * warps_per_block, 1, 1),
            shared_mem_bytes: 0,
        };
        let (nn, dd) = (rows.len() as i64, d as i32);
        let null: u64 = 0;
        let input = self.raw.slice(rows.start * d..rows.end * d);
        // The outputs are written through views of this set's own buffers: the kernel owns
        // these rows until it completes, and nothing reads them before (stream order).
        let out = self.rows.slice(rows.start * d..rows.end * d);
        let sq = self.sqnorm.slice(rows.clone());
        let norm = self.norm_dev.slice(rows);
        let mut l = gpu.stream.launch_builder(&gpu.k.prepare_rows);
        l.arg(&input).arg(&nn).arg(&dd);
        match &self.shift {
            Some(s) => l.arg(s),
            None => l.arg(&null),
        };
        l.arg(&self.centre_rows)
            .arg(&self.unit)
            .arg(&out)
            .arg(&sq)
            .arg(&norm);
        // SAFETY: matches kernels/distance/prepare.cu; the views hold rows.len() rows of d values, the
        // shift d values.
        unsafe { l.launch(cfg) }.map_err(dev("prepare_rows"))?;
        Ok(())
    }

    fn norms(&self) -> &Norms {
        self.norms
            .get()
            .expect("a set's norms are read only after `complete` (internal invariant)")
    }

    /// Norms of the prepared rows, for the bounds (after [`DeviceSet::complete`]).
    pub fn norm(&self) -> &[f64] {
        &self.norms().norm
    }

    /// The largest of [`DeviceSet::norm`] (NaN ignored), found once when the norms came back:
    /// a prepared base's searches read it every call, and a scan of 1M norms took a millisecond.
    pub fn max_norm(&self) -> f64 {
        self.norms().max
    }

    /// The clear error for the first row holding a NaN or infinite value, when these rows are
    /// `set`'s rows from `first` on (after [`DeviceSet::complete`]).
    pub fn check(&self, set: &VectorSet, first: usize) -> Result<()> {
        let rows: Vec<usize> = self.norms().suspect.iter().map(|&r| r + first).collect();
        crate::numerics::plan::first_non_finite(set, &rows)
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

fn alloc(gpu: &Gpu, n: usize) -> Result<CudaSlice<f32>> {
    // SAFETY: every value a kernel reads is written first (prepare_rows or the upload).
    unsafe { gpu.stream.alloc::<f32>(n.max(1)) }.map_err(dev("allocating"))
}
