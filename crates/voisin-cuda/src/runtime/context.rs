//! The device side of the engine: driver context, stream, cuBLAS handle and the kernels.
//!
//! Opens a GPU once the CUDA libraries are loaded (`loaded.rs`); knows nothing about metrics or
//! selection policy. The kernels come from the registry (`kernels.rs`), one per device.

use std::sync::{Arc, Mutex, RwLock};

use rayon::prelude::*;

use cudarc::driver::{sys, CudaContext, CudaSlice, CudaStream, CudaView, DevicePtr};
use voisin::{Error, Result};

use crate::runtime::blas::Blas;
use crate::runtime::kernels::Kernels;
use crate::runtime::probe::{NoProbe, Phases, Probe};
use crate::runtime::staging::{Pitch, Staging};

pub use crate::runtime::loaded::{device_count, gpu_available};

/// A failure reported by a CUDA library, and whether it is the device running out of memory.
pub(crate) trait CudaFailure: std::fmt::Debug {
    fn out_of_memory(&self) -> bool {
        false
    }
}

impl CudaFailure for cudarc::driver::DriverError {
    fn out_of_memory(&self) -> bool {
        self.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
    }
}

/// Maps a CUDA-side error to the engine's error with what was being done:
/// [`Error::OutOfMemory`] when the device ran out of memory, [`Error::Device`] otherwise.
pub(crate) fn dev<E: CudaFailure>(
    what: impl Into<std::borrow::Cow<'static, str>>,
) -> impl FnOnce(E) -> Error {
    let what = what.into();
    move |e| {
        let msg = format!("cuda: {what} failed: {e:?}");
        if e.out_of_memory() {
            Error::OutOfMemory(msg)
        } else {
            Error::device(msg)
        }
    }
}

/// Whether an error is the device running out of memory (the only failure worth a retry
/// with a smaller working set).
pub(crate) fn is_oom(e: &Error) -> bool {
    matches!(e, Error::OutOfMemory(_))
}

/// One GPU ready to work: context, stream, cuBLAS handle, kernels.
pub(crate) struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// Uploads behind the work on `stream` (see `upload_into`).
    copy: Arc<CudaStream>,
    pub blas: Blas,
    pub k: Arc<Kernels>,
    pub name: String,
    /// Multiprocessors on the device: the persistent kernels launch so many blocks per one.
    pub sms: usize,
    /// Page-locked staging for uploads and downloads (`staging.rs`): an ended engine's spare,
    /// or taken from `pinning` at first use.
    staging: Mutex<Option<Staging>>,
    /// The staging being page-locked on a helper thread since the engine opened, when no spare
    /// was at hand: locking 128 MiB took ~60 ms at a graph's first upload, a cost that did not
    /// grow with the bytes, now spent while the caller prepares its data
    /// (docs/design/streaming.md).
    pinning: Mutex<Option<std::thread::JoinHandle<Result<Staging>>>>,
    /// Where phase timings go (`probe.rs`); none by default.
    probe: RwLock<Arc<dyn Probe>>,
}

/// Values per staging buffer (64 MiB).
pub(crate) const STAGE: usize = 16 << 20;

/// Staging of engines that ended, by device ordinal, for the next engine on that device:
/// page-locking (and unlocking) 128 MiB of host memory per engine was paid by every one-shot
/// call that opens a fresh engine (the Python functions). One is kept per device.
static SPARE_STAGING: Mutex<Vec<(usize, Staging)>> = Mutex::new(Vec::new());

/// An ended engine's staging on `device`, if one was kept.
fn spare_staging(device: usize) -> Option<Staging> {
    let mut spare = SPARE_STAGING.lock().unwrap_or_else(|p| p.into_inner());
    let at = spare.iter().position(|(d, _)| *d == device);
    at.map(|i| spare.swap_remove(i).1)
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let staging = self.staging.get_mut().unwrap_or_else(|p| p.into_inner());
        let pinning = self.pinning.get_mut().unwrap_or_else(|p| p.into_inner());
        let pinned = pinning.take().and_then(|h| h.join().ok()?.ok());
        let Some(mut staging) = staging.take().or(pinned) else {
            return;
        };
        let device = self.ctx.ordinal();
        let mut spare = SPARE_STAGING.lock().unwrap_or_else(|p| p.into_inner());
        // It goes back only once the copies that last read its buffers are over.
        if staging.settle() && !spare.iter().any(|(d, _)| *d == device) {
            spare.push((device, staging));
        }
    }
}

impl Gpu {
    pub fn open(device: usize) -> Result<Self> {
        if let Some(why) = crate::runtime::loaded::loaded().problem() {
            return Err(Error::device(format!("cuda: {why}")));
        }
        let count = CudaContext::device_count().map_err(dev("counting devices"))?;
        if device >= count.max(0) as usize {
            return Err(Error::device(format!(
                "cuda: device {device} does not exist ({count} CUDA device(s) found)"
            )));
        }
        let ctx = CudaContext::new(device).map_err(dev("creating the context"))?;
        let stream = ctx.default_stream();
        // A second stream carries the uploads of a set that goes up behind its first tiles
        // (`upload_into` with `behind`), so that the copy engine works while the kernels do.
        // SAFETY: this engine orders its two streams itself: the copy stream starts after the
        // destination's allocation (`fence_copies`), and the engine's stream waits for each
        // copy before the work that reads it; slices are freed on the engine's stream only.
        unsafe { ctx.disable_event_tracking() };
        let copy = ctx.new_stream().map_err(dev("creating the copy stream"))?;
        let blas = Blas::new(&stream)?;
        let k = crate::runtime::kernels::shared(&ctx)?;
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(dev("querying the SM count"))?
            .max(1) as usize;
        let staging = spare_staging(device);
        let pinning = staging.is_none().then(|| {
            let ctx = ctx.clone();
            std::thread::spawn(move || Staging::plain(&ctx, STAGE))
        });
        Ok(Gpu {
            ctx,
            stream,
            copy,
            blas,
            k,
            name,
            sms,
            staging: Mutex::new(staging),
            pinning: Mutex::new(pinning),
            probe: RwLock::new(Arc::new(NoProbe)),
        })
    }

    /// Sends the timings of this GPU's phases to `probe` from now on.
    pub fn set_probe(&self, probe: Arc<dyn Probe>) {
        if let Ok(mut p) = self.probe.write() {
            *p = probe;
        }
    }

    /// Times consecutive phases for this GPU's probe, starting now.
    pub fn phases(&self) -> Phases {
        let probe = match self.probe.read() {
            Ok(p) => p.clone(),
            Err(_) => Arc::new(NoProbe),
        };
        Phases::start(probe)
    }

    /// Copies `src` to a new device buffer through two pinned staging buffers: the host fills
    /// one (in parallel) while the other is in flight. Pageable copies ran at ~1 GB/s (500 ms
    /// for a 1M×128 base; docs/design/streaming.md); pinned DMA runs at PCIe speed. The buffer is
    /// padded to a whole number of stages (callers index it by explicit ranges).
    pub fn upload<T>(&self, src: &[T]) -> Result<CudaSlice<T>>
    where
        T: bytemuck::Pod + cudarc::driver::DeviceRepr + Send + Sync,
    {
        if src.len() < (1 << 20) {
            let zero = [T::zeroed()];
            let v = if src.is_empty() { &zero[..] } else { src };
            return self
                .stream
                .clone_htod(v)
                .map_err(dev("copying to the device"));
        }
        // SAFETY: filled below before use; the padding tail is never read as data.
        let dst = unsafe { self.stream.alloc::<T>(src.len().div_ceil(STAGE) * STAGE) }
            .map_err(dev("allocating device memory"))?;
        self.upload_into(&dst.slice(..), src, Pitch::DENSE, false)?;
        Ok(dst)
    }

    /// [`Gpu::upload`] of rows spread to `pitch` on the device (zeros after each row's values).
    pub fn upload_rows<T>(&self, src: &[T], pitch: Pitch) -> Result<CudaSlice<T>>
    where
        T: bytemuck::Pod + cudarc::driver::DeviceRepr + Send + Sync,
    {
        if pitch.ld == pitch.d {
            return self.upload(src);
        }
        // SAFETY: every value is written by the copy (rows and their zero padding).
        let dst = unsafe { self.stream.alloc::<T>(pitch.device_len(src.len()).max(1)) }
            .map_err(dev("allocating device memory"))?;
        self.upload_into(&dst.slice(..), src, pitch, false)?;
        Ok(dst)
    }

    /// Makes the copy stream wait for everything queued on the engine's stream so far (the
    /// allocation of a buffer that `upload_into(.., true)` will fill).
    pub fn fence_copies(&self) -> Result<()> {
        self.copy
            .join(&self.stream)
            .map_err(dev("ordering the copy stream"))
    }

    /// The stream that carries uploads beside the work on `stream` (the index search's
    /// superclusters, `index/lsc.rs`, queue their own copies on it).
    pub fn copy_stream(&self) -> &Arc<CudaStream> {
        &self.copy
    }

    /// Copies `src` to the start of `dst` (at least as long) through the staging buffers;
    /// kernels queued on the engine's stream afterwards see the values. The host returns once
    /// the last piece is queued, so a caller can interleave pieces with the work that reads
    /// them (a base uploaded behind its first tiles, device_set.rs). With `behind` the copies
    /// run on the copy stream, beside the kernels already queued (after `fence_copies` for a
    /// fresh `dst`); the engine's stream then waits for them. Rows go to the device spread to
    /// `pitch` (`Pitch::DENSE`: as they are).
    pub fn upload_into<T>(
        &self,
        dst: &CudaView<'_, T>,
        src: &[T],
        pitch: Pitch,
        behind: bool,
    ) -> Result<()>
    where
        T: bytemuck::Pod + cudarc::driver::DeviceRepr + Send + Sync,
    {
        let stream = if behind { &self.copy } else { &self.stream };
        assert!(
            dst.len() >= pitch.device_len(src.len()),
            "upload past the end of a device buffer"
        );
        let mut staging = self.staging()?;
        let staging = staging.as_mut().expect("allocated by staging()");
        let (base, _guard) = dst.device_ptr(&self.stream);
        // SAFETY: `dst` is device memory of this context holding at least the rows' device
        // values (asserted above); slices are freed on the engine's stream only, after these
        // copies.
        unsafe { staging.upload(src, pitch, base, stream, "copying to the device") }?;
        if behind {
            self.stream
                .join(&self.copy)
                .map_err(dev("ordering the copy stream"))?;
        }
        Ok(())
    }

    /// Copies a device buffer back to the host through the pinned staging buffers (pageable
    /// copies ran at ~1 GB/s, docs/design/streaming.md; candidate lists of k=1000 are 160 MB).
    pub fn download<T>(&self, src: &CudaView<'_, T>) -> Result<Vec<T>>
    where
        T: bytemuck::Pod + cudarc::driver::DeviceRepr,
    {
        if src.len() * std::mem::size_of::<T>() < STAGED_DOWNLOAD {
            return self
                .stream
                .clone_dtoh(src)
                .map_err(dev("copying to the host"));
        }
        let mut out = vec![T::zeroed(); src.len()];
        self.download_into(src, &mut out)?;
        Ok(out)
    }

    /// [`Gpu::download`] into `out` (`src.len()` values), e.g. host memory whose pages were
    /// touched beforehand ([`touched`]).
    pub fn download_into<T>(&self, src: &CudaView<'_, T>, out: &mut [T]) -> Result<()>
    where
        T: bytemuck::Pod + cudarc::driver::DeviceRepr,
    {
        assert_eq!(
            src.len(),
            out.len(),
            "a download into a buffer of another length"
        );
        if std::mem::size_of_val(out) < STAGED_DOWNLOAD {
            let got = self
                .stream
                .clone_dtoh(src)
                .map_err(dev("copying to the host"))?;
            out.copy_from_slice(&got);
            return Ok(());
        }
        let words = std::mem::size_of_val(out) / 4;
        let flat: &mut [f32] = bytemuck::cast_slice_mut(out);
        // SAFETY: T is plain data whose size is a multiple of 4 bytes.
        let view: CudaView<'_, f32> = unsafe { src.transmute::<f32>(words) }
            .ok_or_else(|| Error::device("cuda: cannot view a buffer as words"))?;
        let mut staging = self.staging()?;
        let buf = staging
            .as_mut()
            .expect("allocated by staging()")
            .for_download()?;
        for (c, part) in flat.chunks_mut(STAGE).enumerate() {
            let len = part.len();
            let chunk = view.slice(c * STAGE..c * STAGE + len);
            let host = buf.as_mut_slice().map_err(dev("reading pinned memory"))?;
            {
                // cudarc's memcpy_dtoh copies the whole destination; the last chunk is shorter
                // than the staging buffer, so copy exactly `len` words through the driver call.
                let (src, _guard) = chunk.device_ptr(&self.stream);
                // SAFETY: `host[..len]` is page-locked memory of this context and `src` holds
                // `len` words; the stream is synchronised before the host reads them.
                unsafe {
                    cudarc::driver::result::memcpy_dtoh_async(
                        &mut host[..len],
                        src,
                        self.stream.cu_stream(),
                    )
                }
                .map_err(dev("copying to the host"))?;
            }
            self.stream
                .synchronize()
                .map_err(dev("copying to the host"))?;
            part.par_chunks_mut(1 << 16)
                .zip(host[..len].par_chunks(1 << 16))
                .for_each(|(o, h)| o.copy_from_slice(h));
        }
        Ok(())
    }

    /// The staging buffers (plain pages: downloads read them back on the host): the spare
    /// taken at opening, or the helper thread's, waited for; allocated here if that failed.
    fn staging(&self) -> Result<std::sync::MutexGuard<'_, Option<Staging>>> {
        let mut staging = self
            .staging
            .lock()
            .map_err(|_| Error::device("cuda: staging lock"))?;
        if staging.is_none() {
            let pinned = self
                .pinning
                .lock()
                .map_err(|_| Error::device("cuda: staging lock"))?
                .take()
                .and_then(|h| h.join().ok());
            *staging = Some(match pinned {
                Some(Ok(s)) => s,
                // A failed or lost helper: the allocation's own error, here, says why.
                _ => match spare_staging(self.ctx.ordinal()) {
                    Some(s) => s,
                    None => Staging::plain(&self.ctx, STAGE)?,
                },
            });
        }
        Ok(staging)
    }

    /// Holds all free memory above `cap` bytes, so that the engine sees a GPU of that size.
    ///
    /// Half of the cap is first reserved inside the stream-ordered pool that the engine's
    /// allocations come from, and kept there (see [`Ballast`]): the pool grows by mappings of its
    /// own granularity, and under a small cap a pool that had to grow could not, so that even a
    /// 64-byte allocation failed with 33 MB free (docs/design/device-memory-pool.md). The rest
    /// of the free memory above the other half is then held outside the pool, in pieces of at
    /// most 1 GiB, halved when one is refused: one allocation of nearly all the free memory can
    /// fail (next to another engine's freed pool) where pieces fit.
    pub fn ballast(&self, cap: usize) -> Result<Ballast> {
        const PIECE: usize = 1 << 30;
        const SMALLEST: usize = 2 << 20;
        let reserve = (cap / 2).max(1);
        // What uncapped engines' calls left in the pool goes first: held there, the memory
        // measured below would come free later and show above the cap.
        self.release_cache();
        // SAFETY: never read or written; freed into the pool at once, which keeps it.
        let held = unsafe { self.stream.alloc::<u8>(reserve) }.map_err(dev("reserving memory"))?;
        self.stream.synchronize().map_err(dev("reserving memory"))?;
        let mut ballast = Ballast {
            ctx: self.ctx.clone(),
            reserved: reserve,
            held: Vec::new(),
            cached: false,
        };
        pool_keep(self.ctx.ordinal(), |k| k.capped += reserve);
        drop(held);
        self.stream.synchronize().map_err(dev("reserving memory"))?;
        let outside = cap - reserve.min(cap);
        let mut piece = PIECE;
        loop {
            self.ctx.synchronize().map_err(dev("synchronising"))?;
            let free = self.ctx.mem_get_info().map_err(dev("querying memory"))?.0;
            if free <= outside.saturating_add(SMALLEST) || piece < SMALLEST {
                return Ok(ballast);
            }
            let want = piece.min(free - outside);
            // SAFETY: a plain allocation of this context (bound to the thread by the query
            // above), never read or written, freed by `Ballast`'s drop.
            match unsafe { cudarc::driver::result::malloc_sync(want) } {
                Ok(p) => ballast.held.push(p),
                Err(_) => piece /= 2,
            }
        }
    }

    /// Free device memory in bytes. Memory this process freed but the stream-ordered pool
    /// still holds is released first: otherwise it reads as used until some later
    /// synchronisation, and then a ballast or a fit check measured against it is wrong.
    ///
    /// Under a cap ([`Gpu::ballast`]) the pool keeps the reserved part of the cap, and what it
    /// holds unused counts as free: the engine's allocations are served from it. The uncapped
    /// engines' cache ([`Ballast::cache`]) does not count: an allocation larger than its pieces
    /// maps new memory, so only what is unmapped is sure to serve one. Where that is under a
    /// quarter of the device the cache is released first, so that a search near the device's
    /// size sees all of it, as before the cache.
    pub fn free_memory(&self) -> Result<usize> {
        self.ctx.synchronize().map_err(dev("synchronising"))?;
        let device = self.ctx.ordinal();
        let keep = pool_keep(device, |_| {});
        let pool = default_pool(device);
        let unmapped = || self.ctx.mem_get_info().map_err(dev("querying memory"));
        if keep.capped > 0 {
            trim_pool(pool, keep.capped);
            // SAFETY: the device's default pool, live while the context is.
            let idle = pool.map_or(0, |p| unsafe {
                pool_attr(p, ATTR_RESERVED).saturating_sub(pool_attr(p, ATTR_USED))
            });
            return Ok(unmapped()?.0 + idle);
        }
        trim_pool(pool, keep.target());
        let (free, total) = unmapped()?;
        if free >= total / 4 || keep.target() == 0 {
            return Ok(free);
        }
        trim_pool(pool, 0);
        Ok(unmapped()?.0)
    }

    /// Releases what the pool keeps for uncapped engines (a cap's part stays): after an
    /// allocation failed, the cache's pieces may be what stood in the way of a larger one; and
    /// before a ballast measures the free memory, which they would join later.
    pub fn release_cache(&self) {
        let _ = self.ctx.synchronize();
        let device = self.ctx.ordinal();
        trim_pool(default_pool(device), pool_keep(device, |_| {}).capped);
    }
}

/// What an engine holds in the device's memory while it lives. A capped engine holds enough to
/// see a GPU of its cap: a part of the cap reserved in the device's stream-ordered pool and the
/// memory above the cap held outside the pool. An uncapped one lets the pool keep what its
/// calls freed, up to [`Ballast::cache_bytes`], for its next call. Dropping it frees all.
pub(crate) struct Ballast {
    ctx: Arc<CudaContext>,
    reserved: usize,
    held: Vec<sys::CUdeviceptr>,
    /// An uncapped engine's share of the pool's cache.
    cached: bool,
}

impl Ballast {
    /// An uncapped engine's: the pool keeps up to [`Ballast::cache_bytes`] of freed memory
    /// between its calls. Without it each call's first fit check released the last call's
    /// buffers (the pool's default threshold is 0) and its allocations mapped them again:
    /// 6–8 ms of a 35 ms k-NN of 10k queries over 1M × 128 (docs/design/device-memory-pool.md).
    pub(crate) fn cache(ctx: &Arc<CudaContext>) -> Self {
        let total = ctx.total_mem().unwrap_or(0);
        let cache = Self::cache_bytes(total);
        pool_keep(ctx.ordinal(), |k| {
            k.open += 1;
            k.cache = cache;
        });
        Ballast {
            ctx: ctx.clone(),
            reserved: 0,
            held: Vec::new(),
            cached: true,
        }
    }

    /// The freed bytes the pool keeps for uncapped engines on a device of `total` bytes: a
    /// sixteenth, at most 8 GiB (a k-NN of 10k queries over 1M × 128 frees about 2 GB).
    pub(crate) fn cache_bytes(total: usize) -> usize {
        (total / 16).min(8 << 30)
    }
}

impl Drop for Ballast {
    fn drop(&mut self) {
        if self.reserved == 0 && self.held.is_empty() && !self.cached {
            return;
        }
        let _ = self.ctx.bind_to_thread();
        for &p in &self.held {
            // SAFETY: allocated by `Gpu::ballast` with cuMemAlloc on this context, never used.
            let _ = unsafe { cudarc::driver::result::free_sync(p) };
        }
        let (reserved, cached) = (self.reserved, self.cached);
        pool_keep(self.ctx.ordinal(), |k| {
            k.capped = k.capped.saturating_sub(reserved);
            k.open = k.open.saturating_sub(usize::from(cached));
        });
    }
}

const ATTR_RESERVED: sys::CUmemPool_attribute =
    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT;
const ATTR_USED: sys::CUmemPool_attribute =
    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT;

/// A byte count of a pool (0 when it cannot be read).
///
/// # Safety
/// `pool` is a live memory pool.
unsafe fn pool_attr(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> usize {
    let mut v: u64 = 0;
    // SAFETY: the attribute is a u64 (cuMemPoolGetAttribute's documentation).
    let ok = unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast()) };
    if ok == sys::CUresult::CUDA_SUCCESS {
        v as usize
    } else {
        0
    }
}

/// Downloads of at least this many bytes go through the pinned staging buffers.
pub(crate) const STAGED_DOWNLOAD: usize = 4 << 20;

/// `n` zeroed values whose pages have all been written once, so that a later copy into them
/// does not stop at each page's first touch: 80 MB of k = 1000 answers downloaded into fresh
/// memory took 8–17 ms of a 95 ms k-NN, where the copy itself needs ~2 ms
/// (docs/design/device-finish.md).
/// Meant for a helper thread while the GPU works.
pub(crate) fn touched<T: bytemuck::Pod>(n: usize) -> Vec<T> {
    let mut v = vec![T::zeroed(); n];
    let step = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    for i in (0..n).step_by(step) {
        // SAFETY: i < n = v.len(). Volatile: a store of zero into zeroed memory may otherwise be
        // dropped, and the page with it.
        unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), T::zeroed()) };
    }
    v
}

/// Host memory for `n` answers (values of `V` and u32 ids) that a download will fill: where the
/// ids alone are a staged download or more, its pages are touched on a helper thread
/// ([`touched`]) while the GPU works; smaller, it is allocated when taken.
pub(crate) struct Room<V> {
    n: usize,
    helper: Option<std::thread::JoinHandle<(Vec<V>, Vec<u32>)>>,
}

impl<V: bytemuck::Pod + Send> Room<V> {
    pub fn start(n: usize) -> Self {
        let helper = (n * std::mem::size_of::<u32>() >= STAGED_DOWNLOAD)
            .then(|| std::thread::spawn(move || (touched::<V>(n), touched::<u32>(n))));
        Room { n, helper }
    }

    /// The memory: `n` zeroed values and ids.
    pub fn take(self) -> Result<(Vec<V>, Vec<u32>)> {
        match self.helper {
            Some(h) => h
                .join()
                .map_err(|_| Error::device("cuda: the answers' host memory was lost")),
            None => Ok((vec![V::zeroed(); self.n], vec![0; self.n])),
        }
    }
}

/// What the default pool of one device keeps between calls, summed over the engines open on it.
#[derive(Clone, Copy, Default)]
struct Keep {
    /// Bytes reserved for capped engines (their caps' pool parts, [`Gpu::ballast`]).
    capped: usize,
    /// Uncapped engines open, and the bytes of freed memory each lets the pool keep.
    open: usize,
    cache: usize,
}

impl Keep {
    /// The reserved bytes [`Gpu::free_memory`] trims the pool to. Capped engines decide alone:
    /// a cache kept beside a cap would let a capped engine see more than its cap.
    fn target(self) -> usize {
        match (self.capped, self.open) {
            (0, 0) => 0,
            (0, _) => self.cache,
            (c, _) => c,
        }
    }

    /// The pool's release threshold: everything while a cap is reserved (the cap's part must
    /// stay mapped), the cache while only uncapped engines are open, nothing otherwise.
    fn threshold(self) -> u64 {
        match (self.capped, self.open) {
            (0, 0) => 0,
            (0, _) => self.cache as u64,
            _ => u64::MAX,
        }
    }
}

/// Applies `change` to what the default pool of `device` keeps and returns the new state. Where
/// the threshold changes it is set on the pool, and the pool is trimmed to the new target when
/// that is smaller.
fn pool_keep(device: usize, change: impl FnOnce(&mut Keep)) -> Keep {
    static KEEP: Mutex<Vec<(usize, Keep)>> = Mutex::new(Vec::new());
    let mut keep = KEEP.lock().unwrap_or_else(|p| p.into_inner());
    let at = match keep.iter().position(|(d, _)| *d == device) {
        Some(i) => i,
        None => {
            keep.push((device, Keep::default()));
            keep.len() - 1
        }
    };
    let before = keep[at].1;
    change(&mut keep[at].1);
    let now = keep[at].1;
    if before.threshold() != now.threshold() {
        if let Some(pool) = default_pool(device) {
            let mut threshold = now.threshold();
            // SAFETY: the device's default pool; the attribute is a u64. A failure leaves the
            // threshold.
            let _ = unsafe {
                sys::cuMemPoolSetAttribute(
                    pool,
                    sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&mut threshold as *mut u64).cast(),
                )
            };
            if now.target() < before.target() {
                trim_pool(Some(pool), now.target());
            }
        }
    }
    now
}

/// The default stream-ordered pool of device `device`, where the driver gives it.
fn default_pool(device: usize) -> Option<sys::CUmemoryPool> {
    let (mut cu, mut pool) = (0, std::ptr::null_mut());
    // SAFETY: plain queries of the driver about one device.
    let found = unsafe {
        sys::cuDeviceGet(&mut cu, device as i32) == sys::CUresult::CUDA_SUCCESS
            && sys::cuDeviceGetDefaultMemPool(&mut pool, cu) == sys::CUresult::CUDA_SUCCESS
    };
    found.then_some(pool)
}

/// Releases what `pool` holds unused down to `keep` reserved bytes; a failure, or no pool,
/// leaves it as it is.
fn trim_pool(pool: Option<sys::CUmemoryPool>, keep: usize) {
    if let Some(pool) = pool {
        // SAFETY: a device's default pool (`default_pool`), live while its context is.
        let _ = unsafe { sys::cuMemPoolTrimTo(pool, keep) };
    }
}

#[cfg(test)]
mod tests {
    use super::{Ballast, Keep};

    #[test]
    fn the_pool_keeps_a_cap_alone_else_the_cache_while_an_engine_is_open() {
        let none = Keep::default();
        assert_eq!((none.target(), none.threshold()), (0, 0));
        let open = Keep {
            open: 2,
            cache: 5 << 30,
            ..none
        };
        assert_eq!((open.target(), open.threshold()), (5 << 30, 5 << 30));
        // A capped engine beside uncapped ones: only the cap's part stays, none of it released.
        let capped = Keep {
            capped: 64 << 20,
            ..open
        };
        assert_eq!((capped.target(), capped.threshold()), (64 << 20, u64::MAX));
        // The cache left over from a closed engine keeps nothing.
        let closed = Keep { open: 0, ..open };
        assert_eq!((closed.target(), closed.threshold()), (0, 0));
    }

    #[test]
    fn rooms_large_and_small_hold_n_zeroed_answers() {
        for n in [0, 3, super::STAGED_DOWNLOAD / 4 + 1] {
            let (v, i) = super::Room::<f64>::start(n).take().unwrap();
            assert_eq!((v.len(), i.len()), (n, n));
            assert!(v.iter().all(|&x| x == 0.0) && i.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn touched_memory_is_zeroed_and_whole() {
        let v = super::touched::<u32>(10_007);
        assert_eq!(v.len(), 10_007);
        assert!(v.iter().all(|&x| x == 0));
        assert!(super::touched::<f32>(0).is_empty());
    }

    #[test]
    fn the_cache_is_a_sixteenth_of_the_device_at_most_8_gib() {
        assert_eq!(Ballast::cache_bytes(80 << 30), 5 << 30);
        assert_eq!(Ballast::cache_bytes(141 << 30), 8 << 30);
        assert_eq!(Ballast::cache_bytes(16 << 30), 1 << 30);
        assert_eq!(Ballast::cache_bytes(0), 0);
    }
}
