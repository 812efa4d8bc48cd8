//! Vectors resident on the device: the raw rows (for exact keys) and the prepared rows with
//! their norms (for tiles, keys and bounds), made by kernels/distance/prepare.cu. On half
//! storage (the plan's [`Storage`]: f16 or bf16 rows tiled on their own tensor cores) the raw
//! rows are the stored values and the tiles read them as they are: no prepared copy
//! (docs/design/tensor-core-inputs.md).
//!
//! A set is uploaded whole ([`DeviceSet::new`] and friends) or behind the work that reads it
//! ([`DeviceSet::behind`]): the search then asks for rows as its tiles reach them
//! ([`DeviceSet::ensure`]): the host fills the next staging buffer and the copy stream moves it
//! while the GPU computes the first tiles, and [`DeviceSet::complete`] makes the norms available
//! once every row is there. Owns uploading and preparing one set of rows; knows nothing about tiling or selection.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{
    sys, CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut, LaunchArgs, LaunchConfig,
    PushKernelArg, SyncOnDrop,
};
use rayon::prelude::*;
use voisin::data::{VectorData, VectorSet};
use voisin::{Error, Result};

use crate::numerics::plan::{Numerics, Storage, TileRows};
use crate::ops::tile::Block;
use crate::runtime::context::{dev, Gpu, STAGE};
use crate::runtime::staging::{Pitch, Staging};

/// Rows on the device in a plan's storage type.
pub(crate) enum DeviceRows {
    F32(CudaSlice<f32>),
    /// The stored bits of f16 or bf16 values.
    Half(CudaSlice<u16>),
    U8(CudaSlice<u8>),
}

/// Some rows on the device: stored rows, or the tiles' operand.
pub(crate) enum RowsView<'a> {
    F32(CudaView<'a, f32>),
    Half(CudaView<'a, u16>),
    U8(CudaView<'a, u8>),
    /// Prepared int8 tile rows.
    I8(CudaView<'a, i8>),
}

/// The tiles' own copy of a set's rows on the device, prepared from the stored ones
/// ([`TileRows`]).
enum TileCopy {
    F32(CudaSlice<f32>),
    I8(CudaSlice<i8>),
}

impl DeviceRows {
    /// Room for `values` values of `storage` on `stream` (not initialised).
    pub fn alloc(stream: &Arc<CudaStream>, storage: Storage, values: usize) -> Result<Self> {
        let n = values.max(1);
        // SAFETY: every value a kernel reads is written first (the upload).
        let rows = match storage {
            Storage::F32 => unsafe { stream.alloc::<f32>(n) }.map(DeviceRows::F32),
            Storage::F16 | Storage::Bf16 => unsafe { stream.alloc::<u16>(n) }.map(DeviceRows::Half),
            Storage::U8 => unsafe { stream.alloc::<u8>(n) }.map(DeviceRows::U8),
        };
        rows.map_err(dev("allocating"))
    }

    /// Values `range` as a view.
    pub fn view(&self, range: Range<usize>) -> RowsView<'_> {
        match self {
            DeviceRows::F32(s) => RowsView::F32(s.slice(range)),
            DeviceRows::Half(s) => RowsView::Half(s.slice(range)),
            DeviceRows::U8(s) => RowsView::U8(s.slice(range)),
        }
    }

    /// Every `step`-th row of these rows (`ld` values apart), `count` of them, copied on the
    /// device in one strided copy.
    fn strided(
        &self,
        stream: &Arc<CudaStream>,
        ld: usize,
        step: usize,
        count: usize,
    ) -> Result<DeviceRows> {
        // Half rows are bits to a copy: f16 stands for bf16 too.
        let (storage, size) = match self {
            DeviceRows::F32(_) => (Storage::F32, 4),
            DeviceRows::Half(_) => (Storage::F16, 2),
            DeviceRows::U8(_) => (Storage::U8, 1),
        };
        let mut out = DeviceRows::alloc(stream, storage, count * ld)?;
        if count == 0 {
            return Ok(out);
        }
        let row = ld * size;
        {
            let (src, _src_guard) = self.ptr(stream);
            let (dst, _dst_guard) = out.ptr_mut(stream);
            let copy = sys::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcHost: std::ptr::null(),
                srcDevice: src,
                srcArray: std::ptr::null_mut(),
                srcPitch: step * row,
                dstXInBytes: 0,
                dstY: 0,
                dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: dst,
                dstArray: std::ptr::null_mut(),
                dstPitch: row,
                WidthInBytes: row,
                Height: count,
            };
            stream
                .context()
                .bind_to_thread()
                .map_err(dev("binding the context"))?;
            // SAFETY: `src` holds at least (count - 1) * step + 1 rows of `row` bytes (the
            // caller's contract), `dst` count of them; both stay alive until the stream has run
            // the copy (the guards order it after their last writers, before their next users).
            unsafe { sys::cuMemcpy2DAsync_v2(&copy, stream.cu_stream()) }
                .result()
                .map_err(dev("copying rows"))?;
        }
        Ok(out)
    }

    fn ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        match self {
            DeviceRows::F32(s) => s.device_ptr(stream),
            DeviceRows::Half(s) => s.device_ptr(stream),
            DeviceRows::U8(s) => s.device_ptr(stream),
        }
    }

    fn ptr_mut<'a>(&'a mut self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        match self {
            DeviceRows::F32(s) => s.device_ptr_mut(stream),
            DeviceRows::Half(s) => s.device_ptr_mut(stream),
            DeviceRows::U8(s) => s.device_ptr_mut(stream),
        }
    }

    /// Pushes the whole buffer as the next kernel argument (a pointer to the stored type).
    pub fn arg<'a>(&'a self, l: &mut LaunchArgs<'a>) {
        match self {
            DeviceRows::F32(s) => l.arg(s),
            DeviceRows::Half(s) => l.arg(s),
            DeviceRows::U8(s) => l.arg(s),
        };
    }
}

impl<'a> RowsView<'a> {
    /// The view from value `start` on.
    pub fn from(&self, start: usize) -> RowsView<'a> {
        match self {
            RowsView::F32(v) => RowsView::F32(v.slice(start..)),
            RowsView::Half(v) => RowsView::Half(v.slice(start..)),
            RowsView::U8(v) => RowsView::U8(v.slice(start..)),
            RowsView::I8(v) => RowsView::I8(v.slice(start..)),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            RowsView::F32(v) => v.len(),
            RowsView::Half(v) => v.len(),
            RowsView::U8(v) => v.len(),
            RowsView::I8(v) => v.len(),
        }
    }

    /// Pushes the view as the next kernel argument.
    pub fn arg<'b>(&'b self, l: &mut LaunchArgs<'b>) {
        match self {
            RowsView::F32(v) => l.arg(v),
            RowsView::Half(v) => l.arg(v),
            RowsView::U8(v) => l.arg(v),
            RowsView::I8(v) => l.arg(v),
        };
    }

    /// The f32 rows of a plan with f32 tile rows (the SIMT and fused kernels, which the other
    /// plans never reach).
    pub fn f32(&self) -> &CudaView<'a, f32> {
        match self {
            RowsView::F32(v) => v,
            _ => unreachable!("f32 kernels run on f32 tile rows only (internal invariant)"),
        }
    }
}

/// Rows on the host on their way up, in the device's storage type: f32 values (converted
/// exactly, or rounded from f64), or the stored f16/bf16 bits or u8 values (no copy).
pub(crate) enum HostRows<'s> {
    F32(Cow<'s, [f32]>),
    Half(Cow<'s, [u16]>),
    U8(Cow<'s, [u8]>),
}

impl<'s> HostRows<'s> {
    /// Rows `range` of `set` as `storage` holds them.
    pub fn of(storage: Storage, set: &'s VectorSet, range: Range<usize>) -> Self {
        let d = set.dim();
        let values = range.start * d..range.end * d;
        match storage {
            Storage::F32 => HostRows::F32(set.rows_f32(range.start, range.end)),
            Storage::F16 | Storage::Bf16 => HostRows::Half(Cow::Borrowed(&half_bits(set)[values])),
            Storage::U8 => HostRows::U8(Cow::Borrowed(&u8_values(set)[values])),
        }
    }

    /// Rows `ids` of `set`, in that order.
    pub fn gather(storage: Storage, set: &VectorSet, ids: &[usize]) -> HostRows<'static> {
        let d = set.dim();
        match storage {
            Storage::F32 => {
                let mut v = Vec::with_capacity(ids.len() * d);
                for &i in ids {
                    v.extend_from_slice(&set.row_f32(i));
                }
                HostRows::F32(Cow::Owned(v))
            }
            Storage::F16 | Storage::Bf16 => {
                HostRows::Half(Cow::Owned(pick_rows(half_bits(set), d, ids)))
            }
            Storage::U8 => HostRows::U8(Cow::Owned(pick_rows(u8_values(set), d, ids))),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostRows::F32(v) => v.len(),
            HostRows::Half(v) => v.len(),
            HostRows::U8(v) => v.len(),
        }
    }

    /// Rows `ids` of these rows of `d` values, in that order.
    fn pick(&self, d: usize, ids: &[usize]) -> HostRows<'static> {
        match self {
            HostRows::F32(v) => HostRows::F32(Cow::Owned(pick_rows(v, d, ids))),
            HostRows::Half(v) => HostRows::Half(Cow::Owned(pick_rows(v, d, ids))),
            HostRows::U8(v) => HostRows::U8(Cow::Owned(pick_rows(v, d, ids))),
        }
    }

    /// A new device buffer holding these rows, spread to `pitch`.
    fn upload(&self, gpu: &Gpu, pitch: Pitch) -> Result<DeviceRows> {
        Ok(match self {
            HostRows::F32(v) => DeviceRows::F32(gpu.upload_rows(v, pitch)?),
            HostRows::Half(v) => DeviceRows::Half(gpu.upload_rows(v, pitch)?),
            HostRows::U8(v) => DeviceRows::U8(gpu.upload_rows(v, pitch)?),
        })
    }

    /// Copies the rows holding host values `values` to their place in `dst`, spread to `pitch`
    /// (see `Gpu::upload_into`).
    fn upload_into(
        &self,
        gpu: &Gpu,
        dst: &DeviceRows,
        values: Range<usize>,
        pitch: Pitch,
        behind: bool,
    ) -> Result<()> {
        let at = pitch.device_len(values.start)..pitch.device_len(values.end);
        match (self, dst) {
            (HostRows::F32(v), DeviceRows::F32(d)) => {
                gpu.upload_into(&d.slice(at), &v[values], pitch, behind)
            }
            (HostRows::Half(v), DeviceRows::Half(d)) => {
                gpu.upload_into(&d.slice(at), &v[values], pitch, behind)
            }
            (HostRows::U8(v), DeviceRows::U8(d)) => {
                gpu.upload_into(&d.slice(at), &v[values], pitch, behind)
            }
            _ => unreachable!("host and device rows share the plan's storage"),
        }
    }

    /// Queues the copy of these rows into `dst`, spread to `pitch`, on `stream` through
    /// `staging` (the shard loader of search/stream.rs).
    ///
    /// # Safety
    /// As [`Staging::upload`]: `dst` holds at least `pitch.device_len(self.len())` values and
    /// lives until the copies on `stream` complete.
    pub unsafe fn stage(
        &self,
        staging: &mut Staging,
        dst: &mut DeviceRows,
        pitch: Pitch,
        stream: &Arc<CudaStream>,
        what: &'static str,
    ) -> Result<()> {
        match (self, dst) {
            (HostRows::F32(v), DeviceRows::F32(d)) => {
                let (ptr, _guard) = d.device_ptr_mut(stream);
                // SAFETY: the caller's contract.
                unsafe { staging.upload(v, pitch, ptr, stream, what) }
            }
            (HostRows::Half(v), DeviceRows::Half(d)) => {
                let (ptr, _guard) = d.device_ptr_mut(stream);
                // SAFETY: the caller's contract.
                unsafe { staging.upload(v, pitch, ptr, stream, what) }
            }
            (HostRows::U8(v), DeviceRows::U8(d)) => {
                let (ptr, _guard) = d.device_ptr_mut(stream);
                // SAFETY: the caller's contract.
                unsafe { staging.upload(v, pitch, ptr, stream, what) }
            }
            _ => unreachable!("host and device rows share the plan's storage"),
        }
    }
}

/// Rows `ids` of `all` (rows of `d` values), in that order, copied in parallel (16,384 rows of a
/// large base are 8 MB).
fn pick_rows<T: Copy + Default + Send + Sync>(all: &[T], d: usize, ids: &[usize]) -> Vec<T> {
    let mut v = vec![T::default(); ids.len() * d];
    if d > 0 {
        v.par_chunks_mut(d)
            .zip(ids.par_iter())
            .for_each(|(row, &i)| row.copy_from_slice(&all[i * d..(i + 1) * d]));
    }
    v
}

/// The stored bits of an f16 or bf16 set (a plan puts only such sets on half storage).
fn half_bits(set: &VectorSet) -> &[u16] {
    match set.data() {
        VectorData::F16(b) => bytemuck::cast_slice(b.as_slice()),
        VectorData::Bf16(b) => bytemuck::cast_slice(b.as_slice()),
        _ => unreachable!("half storage is planned for f16 and bf16 sets only"),
    }
}

/// The stored values of a u8 set (a plan puts only such sets on u8 storage).
fn u8_values(set: &VectorSet) -> &[u8] {
    match set.data() {
        VectorData::U8(b) => b.as_slice(),
        _ => unreachable!("u8 storage is planned for u8 sets only"),
    }
}

pub(crate) struct DeviceSet<'s> {
    /// The rows as given, in the plan's storage (f32: converted exactly, or rounded from f64),
    /// [`DeviceSet::raw_ld`] values apart, for exact keys; the tiles' rows too for f16/bf16
    /// tiles.
    pub raw: DeviceRows,
    /// The rows the tiles read (translated, centred or unit, per the plan, or int8),
    /// [`DeviceSet::tile_ld`] values apart; none for f16/bf16 tiles, which read `raw`.
    rows: Option<TileCopy>,
    /// f32 squared norms of the tiles' rows, for the L2 key.
    pub sqnorm: CudaSlice<f32>,
    pub n: usize,
    /// The element type of `raw`.
    pub storage: Storage,
    norm_dev: CudaSlice<f64>,
    shift: Option<CudaSlice<f32>>,
    dim: usize,
    centre_rows: i32,
    unit: i32,
    /// The host rows of a set uploaded behind its work, and how many are on the device (kept
    /// outside the lock so that the set stays covariant in `'s`).
    src: Option<HostRows<'s>>,
    uploaded: Mutex<usize>,
    /// Set once every row is prepared.
    norms: OnceLock<Norms>,
}

/// A set's prepared norms, held by the finishes that bound pairs by their base rows while the
/// set lives (the download's own vector, not a copy of it).
pub(crate) type SharedNorms = Arc<Vec<f64>>;

struct Norms {
    /// Norms of `rows` on the host, for the bounds (shared with the finishes that bound each
    /// pair by its own base row, [`DeviceSet::shared_norm`]).
    norm: SharedNorms,
    /// Rows whose norm is not finite: a NaN or infinite value, or (rarely) a finite row whose
    /// translation overflowed f32. [`DeviceSet::check`] tells them apart.
    suspect: Vec<usize>,
    /// The largest norm.
    max: f64,
}

impl<'s> DeviceSet<'s> {
    /// Uploads all rows of `set`.
    pub fn new(gpu: &Gpu, plan: &Numerics, set: &VectorSet) -> Result<Self> {
        Self::whole(
            gpu,
            plan,
            HostRows::of(plan.storage, set, 0..set.len()),
            set.len(),
        )
    }

    /// Uploads the rows `range` of `set` (one shard of the base).
    pub fn range(gpu: &Gpu, plan: &Numerics, set: &VectorSet, range: Range<usize>) -> Result<Self> {
        let n = range.len();
        Self::whole(gpu, plan, HostRows::of(plan.storage, set, range), n)
    }

    /// Uploads the rows `ids` of `set`, in that order (a widening pass over some queries).
    pub fn gather(gpu: &Gpu, plan: &Numerics, set: &VectorSet, ids: &[usize]) -> Result<Self> {
        Self::whole(
            gpu,
            plan,
            HostRows::gather(plan.storage, set, ids),
            ids.len(),
        )
    }

    /// The rows `range` of `set`, uploaded as the work that reads them asks for them
    /// ([`DeviceSet::ensure`]); nothing is copied yet.
    pub fn behind(
        gpu: &Gpu,
        plan: &Numerics,
        set: &'s VectorSet,
        range: Range<usize>,
    ) -> Result<Self> {
        let n = range.len();
        let raw = DeviceRows::alloc(
            &gpu.stream,
            plan.storage,
            n * plan.storage.row_stride(plan.dim),
        )?;
        // The uploads run on the copy stream, which must see this allocation first.
        gpu.fence_copies()?;
        Self::allocate(
            gpu,
            plan,
            raw,
            n,
            Some(HostRows::of(plan.storage, set, range)),
        )
    }

    /// `count` of this set's rows spread evenly over it (every `step`-th from row 0, step =
    /// n / count), prepared as the plan prepares any set: a sample whose keys stand for the
    /// whole set whatever its order, where the first rows of a sorted set do not. Rows still on
    /// the host (a set uploaded behind its work) are picked there and go up on the copy stream
    /// ahead of the rest; rows on the device are copied there. Nothing waits: the sample serves
    /// tiles only, and its norms are never read back to the host.
    pub fn spread(&self, gpu: &Gpu, plan: &Numerics, count: usize) -> Result<DeviceSet<'static>> {
        let count = count.min(self.n);
        let step = (self.n / count.max(1)).max(1);
        let done = *self
            .uploaded
            .lock()
            .map_err(|_| Error::device("cuda: upload lock"))?;
        match &self.src {
            Some(src) if done < (count.max(1) - 1) * step + 1 => {
                let ids: Vec<usize> = (0..count).map(|i| i * step).collect();
                let values = count * plan.storage.row_stride(plan.dim);
                let raw = DeviceRows::alloc(&gpu.stream, plan.storage, values)?;
                // The uploads run on the copy stream, which must see this allocation first.
                gpu.fence_copies()?;
                let picked = Some(src.pick(self.dim, &ids));
                let set = DeviceSet::allocate(gpu, plan, raw, count, picked)?;
                set.ensure(gpu, count)?;
                Ok(set)
            }
            _ => {
                let raw = self.raw.strided(&gpu.stream, self.raw_ld(), step, count)?;
                let set = DeviceSet::allocate(gpu, plan, raw, count, None)?;
                set.prepare_rows(gpu, 0..count)?;
                Ok(set)
            }
        }
    }

    fn whole(gpu: &Gpu, plan: &Numerics, src: HostRows<'_>, n: usize) -> Result<Self> {
        let raw = src.upload(gpu, pitch(plan.storage, plan.dim))?;
        let set = Self::allocate(gpu, plan, raw, n, None)?;
        set.prepare_rows(gpu, 0..n)?;
        set.complete(gpu)?;
        Ok(set)
    }

    /// Prepares `n` rows already on the device (at least n rows in `raw`, in the plan's storage
    /// and row stride); the work is queued on the engine's stream, which must first wait for
    /// whatever wrote `raw`.
    pub fn prepare(gpu: &Gpu, plan: &Numerics, raw: DeviceRows, n: usize) -> Result<Self> {
        let set = Self::allocate(gpu, plan, raw, n, None)?;
        set.prepare_rows(gpu, 0..n)?;
        set.complete(gpu)?;
        Ok(set)
    }

    fn allocate(
        gpu: &Gpu,
        plan: &Numerics,
        raw: DeviceRows,
        n: usize,
        pending: Option<HostRows<'s>>,
    ) -> Result<Self> {
        let d = plan.dim;
        let stream = &gpu.stream;
        let shift = match &plan.shift {
            Some(s) => Some(stream.clone_htod(s).map_err(dev("copying the shift"))?),
            None => None,
        };
        let rows = match plan.tile_rows() {
            TileRows::F32 => Some(TileCopy::F32(alloc(gpu, n * d)?)),
            TileRows::Stored => None,
            TileRows::I8 => {
                let ld = TileRows::I8.stride(plan.storage, d);
                // SAFETY: prepare_rows writes every value (the padding as zeros).
                let rows = unsafe { stream.alloc::<i8>((n * ld).max(1)) };
                Some(TileCopy::I8(rows.map_err(dev("allocating"))?))
            }
        };
        Ok(DeviceSet {
            raw,
            rows,
            sqnorm: alloc(gpu, n)?,
            n,
            storage: plan.storage,
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
            src.upload_into(gpu, &self.raw, r0 * d..r1 * d, pitch(self.storage, d), true)?;
            self.prepare_rows(gpu, r0..r1)?;
            *next = r1;
        }
        Ok(())
    }

    /// Whether every row is up and its norms are known (a set uploaded behind its work is not,
    /// until [`DeviceSet::complete`]).
    pub fn is_up(&self) -> bool {
        self.norms.get().is_some()
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
        let norm = Arc::new(norm);
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
        let (raw_ld, tile_ld) = (self.raw_ld(), self.tile_ld());
        let (nn, dd, ld_in) = (rows.len() as i64, d as i32, raw_ld as i64);
        let null: u64 = 0;
        let input = self.raw.view(rows.start * raw_ld..rows.end * raw_ld);
        // The outputs are written through views of this set's own buffers: the kernel owns
        // these rows until it completes, and nothing reads them before (stream order). f16/bf16
        // tiles have no prepared rows: the kernel writes the norms only.
        let (ld8, out) = (tile_ld as i64, rows.start * tile_ld..rows.end * tile_ld);
        let (out32, out8) = match &self.rows {
            Some(TileCopy::F32(r)) => (Some(r.slice(out)), None),
            Some(TileCopy::I8(r)) => (None, Some(r.slice(out))),
            None => (None, None),
        };
        let sq = self.sqnorm.slice(rows.clone());
        let norm = self.norm_dev.slice(rows);
        let mut l = gpu
            .stream
            .launch_builder(&gpu.k.elem(self.storage)?.prepare_rows);
        input.arg(&mut l);
        l.arg(&nn).arg(&dd).arg(&ld_in);
        match &self.shift {
            Some(s) => l.arg(s),
            None => l.arg(&null),
        };
        l.arg(&self.centre_rows).arg(&self.unit);
        match &out32 {
            Some(o) => l.arg(o),
            None => l.arg(&null),
        };
        match &out8 {
            Some(o) => l.arg(o),
            None => l.arg(&null),
        };
        l.arg(&ld8).arg(&sq).arg(&norm);
        // SAFETY: matches kernels/distance/prepare.cu, compiled for this set's storage; the
        // views hold rows.len() rows of d values, the shift d values.
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

    /// [`DeviceSet::norm`] as a handle a finish can hold while it widens lists on this set.
    pub fn shared_norm(&self) -> SharedNorms {
        Arc::clone(&self.norms().norm)
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

    /// Values from one stored row to the next ([`Storage::row_stride`]).
    pub fn raw_ld(&self) -> usize {
        self.storage.row_stride(self.dim)
    }

    /// Values from one tile row to the next ([`TileRows::stride`]).
    fn tile_ld(&self) -> usize {
        let tiles = match &self.rows {
            Some(TileCopy::F32(_)) => TileRows::F32,
            Some(TileCopy::I8(_)) => TileRows::I8,
            None => TileRows::Stored,
        };
        tiles.stride(self.storage, self.dim)
    }

    /// Rows `a..b` as a tile operand.
    pub fn block(&self, a: usize, b: usize) -> Block<'_> {
        let ld = self.tile_ld();
        let values = a * ld..(b * ld).max(a * ld + 1);
        Block {
            rows: match &self.rows {
                Some(TileCopy::F32(r)) => RowsView::F32(r.slice(values)),
                Some(TileCopy::I8(r)) => RowsView::I8(r.slice(values)),
                None => self.raw.view(values),
            },
            ld,
            sqnorm: self.sqnorm.slice(a..b.max(a + 1)),
            n: b - a,
            back: None,
        }
    }
}

/// How rows of `d` values stored as `storage` lie on the device.
pub(crate) fn pitch(storage: Storage, d: usize) -> Pitch {
    let d = d.max(1);
    Pitch {
        d,
        ld: storage.row_stride(d),
    }
}

fn alloc(gpu: &Gpu, n: usize) -> Result<CudaSlice<f32>> {
    // SAFETY: every value a kernel reads is written first (prepare_rows or the upload).
    unsafe { gpu.stream.alloc::<f32>(n.max(1)) }.map_err(dev("allocating"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows come out in the order asked, repeats included; zero-width rows give nothing.
    #[test]
    fn picked_rows_follow_the_ids() {
        let all: Vec<u16> = (0..12).collect();
        assert_eq!(
            pick_rows(&all, 3, &[3, 0, 3]),
            vec![9, 10, 11, 0, 1, 2, 9, 10, 11]
        );
        assert_eq!(pick_rows(&all, 4, &[]), Vec::<u16>::new());
        assert_eq!(pick_rows::<u8>(&[], 0, &[5, 1]), Vec::<u8>::new());
    }
}
