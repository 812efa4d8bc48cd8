//! Page-locked staging for copies to the device: two pinned host buffers used in turn, so the
//! host fills one (in parallel) while the other is in flight. Pageable copies ran at ~1 GB/s
//! (500 ms for a 1M×128 base); pinned DMA runs at PCIe speed (docs/design/streaming.md).
//!
//! The one implementation behind `Gpu::upload_into` (and the downloads of `Gpu::download`) and
//! the shard loader of `search::stream`. Owns the buffers and the event that guards each one;
//! knows nothing about what is copied.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use rayon::prelude::*;
use voisin::Result;

use crate::runtime::context::dev;

/// How rows lie: `d` values each on the host, `ld` apart on the device (`ld ≥ d`; the device
/// values between are zero). Rows stored as f16/bf16 start on 16 bytes on the device
/// (`Storage::row_stride`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pitch {
    pub d: usize,
    pub ld: usize,
}

impl Pitch {
    /// Values as they are, no padding.
    pub const DENSE: Pitch = Pitch { d: 1, ld: 1 };

    /// Device values for `values` host values (whole rows).
    pub fn device_len(self, values: usize) -> usize {
        if self.ld == self.d {
            values
        } else {
            values / self.d * self.ld
        }
    }
}

/// One pinned buffer and the event of the last copy that read it.
struct Slot {
    host: PinnedHostSlice<f32>,
    read: Option<CudaEvent>,
}

/// Two pinned buffers of `chunk` values, used alternately (the least recently used first, also
/// across calls: a set uploaded a stage at a time behind its tiles keeps two stages in flight).
pub(crate) struct Staging {
    slots: [Slot; 2],
    next: usize,
    chunk: usize,
}

impl Staging {
    /// Allocates the two buffers of `chunk` values with `cuMemHostAlloc` flags `flags` (0 for
    /// plain pages that the host also reads back, write-combined for uploads only).
    fn new(ctx: &Arc<CudaContext>, chunk: usize, flags: u32) -> Result<Self> {
        let slot = || -> Result<Slot> {
            // SAFETY: every use writes the part it reads.
            let host = unsafe { ctx.alloc_pinned_with_flags::<f32>(chunk, flags) }
                .map_err(dev("allocating pinned memory"))?;
            Ok(Slot { host, read: None })
        };
        Ok(Staging {
            slots: [slot()?, slot()?],
            next: 0,
            chunk,
        })
    }

    /// Plain pages: uploads and downloads.
    pub fn plain(ctx: &Arc<CudaContext>, chunk: usize) -> Result<Self> {
        Self::new(ctx, chunk, 0)
    }

    /// Write-combined pages: uploads only (faster to write, slow for the host to read).
    pub fn write_combined(ctx: &Arc<CudaContext>, chunk: usize) -> Result<Self> {
        Self::new(ctx, chunk, sys::CU_MEMHOSTALLOC_WRITECOMBINED)
    }

    /// Queues the copy of `src` to the device memory at `dst` (holding at least
    /// `pitch.device_len(src.len())` values) on `stream`, a chunk at a time through the
    /// buffers, rows spread to `pitch.ld` values with zeros after their `pitch.d`; returns once
    /// the last piece is queued. `what` names the copy in errors. Values of any plain type (f32
    /// rows, the stored bits of f16/bf16 rows, u8 values) go through the same buffers.
    ///
    /// # Safety
    /// `dst` must be device memory of the buffers' context valid for that many values until
    /// the copies on `stream` complete.
    pub unsafe fn upload<T: bytemuck::Pod + Send + Sync>(
        &mut self,
        src: &[T],
        pitch: Pitch,
        dst: sys::CUdeviceptr,
        stream: &CudaStream,
        what: &'static str,
    ) -> Result<()> {
        let size = std::mem::size_of::<T>();
        let Pitch { d, ld } = pitch;
        debug_assert!(ld >= d && src.len().is_multiple_of(d));
        // Whole rows per buffer (the buffers hold `chunk` f32 words); dense values need no
        // row boundaries, so their unit is one value.
        let (from, to) = if ld == d { (1, 1) } else { (d, ld) };
        let units = (self.chunk * 4 / size / to).max(1);
        let (step_src, step_dst) = (units * from, units * to);
        assert!(
            step_dst * size <= self.chunk * 4,
            "a row longer than a staging buffer"
        );
        for (c, part) in src.chunks(step_src).enumerate() {
            let slot = &mut self.slots[self.next];
            self.next ^= 1;
            // The copy that last read this buffer must finish before the host refills it.
            // (cudarc records its own per-buffer events only in multi-stream mode, which this
            // engine does not use; without this wait a refill raced the DMA.)
            if let Some(e) = slot.read.take() {
                e.synchronize().map_err(dev("waiting for a copy"))?;
            }
            let words = slot
                .host
                .as_mut_slice()
                .map_err(dev("waiting for a copy"))?;
            let host: &mut [T] = bytemuck::cast_slice_mut(words);
            let len = pitch.device_len(part.len());
            if ld == d {
                host[..len]
                    .par_chunks_mut(1 << 16)
                    .zip(part.par_chunks(1 << 16))
                    .for_each(|(h, p)| h.copy_from_slice(p));
            } else {
                host[..len]
                    .par_chunks_mut(ld)
                    .zip(part.par_chunks(d))
                    .for_each(|(h, p)| {
                        h[..d].copy_from_slice(p);
                        h[d..].fill(T::zeroed());
                    });
            }
            // SAFETY: `host[..len]` is page-locked memory of this context, the destination
            // range lies inside `dst` (the caller's contract), and the buffer is not refilled
            // before the event recorded after this copy has passed.
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    dst + (c * step_dst * size) as u64,
                    &host[..len],
                    stream.cu_stream(),
                )
            }
            .map_err(dev(what))?;
            slot.read = Some(
                stream
                    .record_event(None)
                    .map_err(dev("recording an event"))?,
            );
        }
        Ok(())
    }

    /// Waits for the copies that last read the buffers; false if one failed (the buffers are
    /// then not to be reused).
    pub fn settle(&mut self) -> bool {
        self.slots
            .iter_mut()
            .all(|slot| slot.read.take().is_none_or(|e| e.synchronize().is_ok()))
    }

    /// The buffer a download goes through (the one the next upload would take), once the last
    /// copy that read it has finished.
    pub fn for_download(&mut self) -> Result<&mut PinnedHostSlice<f32>> {
        let slot = &mut self.slots[self.next];
        if let Some(e) = slot.read.take() {
            e.synchronize().map_err(dev("waiting for a copy"))?;
        }
        Ok(&mut slot.host)
    }
}
