//! Pairs that pass a list's threshold, buffered per row, and their merge into the running lists
//! (kernels/select/survivors.cu).
//!
//! Owns the buffers ([`Survivors`]), the merge and the filter over a written tile
//! ([`tile_filter`]): the k-NN graph's symmetric tiles read once for the lists of their rows and
//! of their columns. The fused filter (ops/fused.rs) fills the same buffers from dot products in
//! registers. The lists keep block select's contract: every item left out has a key at least
//! the list's largest.

use cudarc::driver::{CudaSlice, CudaView, LaunchArgs, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::ops::select::{ListsOut, TileIn};
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// List and buffer slots of a merged row, together (`abi::FZ_MERGE`).
pub(crate) const MERGE_SLOTS: usize = abi::FZ_MERGE;

/// Longest list the filters serve (the graph's tile filter and fused pairs, the k-NN's fused
/// pairs): their buffers grow with the list.
pub(crate) const FILTER_MAX_KP: usize = 256;

/// Buffer slots per row of a filter for lists of `kp` (None: lists too long, block select and
/// the column kernel or transpose serve them). The graph filters a pair once its lists have
/// seen half a tile, so a tile offers each about 2 kp items under the threshold at most, on any
/// data (the threshold is the list's kp-th key among what it has seen): 4 kp slots, at least
/// 256, leave the buffer half empty. An overflow costs speed, never exactness
/// (kernels/select/survivors.cu).
pub(crate) fn filter_cap(kp: usize) -> Option<usize> {
    (kp <= FILTER_MAX_KP).then(|| (4 * kp).max(256).min(MERGE_SLOTS - kp))
}

/// Longest list the k-NN's fused pairs serve (ops/fused.rs): half the merge's slots, k =
/// 1000's 2048, the other half its buffer.
pub(crate) const PAIRS_MAX_KP: usize = MERGE_SLOTS / 2;

/// Buffer slots per row of the k-NN's fused pairs for lists of `kp`: [`filter_cap`]'s where
/// the graph's filters serve such lists, beyond them what the merge's slots leave beside the
/// list (None past [`PAIRS_MAX_KP`]). The pairs size their chunks to the buffer
/// (`FusedPlan::chunk`), so a smaller one costs more chunks, not exactness.
pub(crate) fn pairs_cap(kp: usize) -> Option<usize> {
    filter_cap(kp).or_else(|| (kp <= PAIRS_MAX_KP).then(|| MERGE_SLOTS - kp))
}

/// Tile rows per block of tile_filter (kernels/select/survivors.cu `TF_ROWS`).
const FILTER_ROWS: usize = 64;
const THREADS: usize = 256;

/// The pairs a filter let through, per row of a block of rows: how many (`count`, which may
/// pass `cap`) and the first `cap` of them (`val`, `idx`: rows × cap). With `floor`, the
/// smallest key a full buffer dropped, per row (inverted order bits; 0: none dropped): the merge
/// then keeps an overflowed row, cut to what it can prove, instead of leaving it to be redone.
pub(crate) struct Survivors {
    pub count: CudaSlice<u32>,
    pub floor: Option<CudaSlice<u32>>,
    pub val: CudaSlice<f32>,
    pub idx: CudaSlice<u32>,
    pub cap: usize,
}

impl Survivors {
    /// Buffers of `cap` slots for `rows` rows, counters (and floors, `floors`) zeroed.
    pub fn new(gpu: &Gpu, rows: usize, cap: usize, floors: bool) -> Result<Survivors> {
        let s = &gpu.stream;
        let zeros = |n: usize| s.alloc_zeros::<u32>(n.max(1)).map_err(dev("allocating"));
        Ok(Survivors {
            count: zeros(rows)?,
            floor: if floors { Some(zeros(rows)?) } else { None },
            // SAFETY: slots are read only below their row's count, after the filter wrote them.
            val: unsafe { s.alloc::<f32>((rows * cap).max(1)) }.map_err(dev("allocating"))?,
            idx: unsafe { s.alloc::<u32>((rows * cap).max(1)) }.map_err(dev("allocating"))?,
            cap,
        })
    }
}

/// Merges each of the first `rows` rows' survivors into its sorted list (rows × kp, kp =
/// `lists.width`). Without floors, rows whose count passed the cap are left alone for the caller
/// to redo and the counts stay for it to read; with them, every row is merged (an overflowed one
/// cut to its floor) and its count and floor are zeroed for the next filter.
///
/// With floors and lists of at most `MS_LIST` (the graph's merges, after every filtered pair,
/// most rows with a few pairs or none) a warp merges a row, in registers where its pairs fit a
/// warp; otherwise (the k-NN's fused filter, thousands of pairs a row; the fused pairs' lists
/// of k = 1000) a block does (kernels/select/survivors.cu).
pub(crate) fn merge(
    gpu: &Gpu,
    rows: usize,
    lists: ListsOut<'_, '_>,
    from: &mut Survivors,
) -> Result<()> {
    let (kp, cap) = (lists.width, from.cap);
    debug_assert!(kp + cap <= MERGE_SLOTS);
    if rows == 0 {
        return Ok(());
    }
    // Shared slots per row merging at once: the list, and a full buffer's sort (a power of
    // two); at most 5120 pairs (lists of 1024, buffers of 3072), 40 KiB.
    let slots = kp + cap.next_power_of_two();
    debug_assert!(slots * 8 <= 48 << 10);
    let warped = from.floor.is_some() && kp <= abi::MS_LIST;
    let cfg = if warped {
        // Warps per block: up to 8, within the 32 KiB of shared memory a block asks for at
        // most (so that several blocks share a multiprocessor).
        let warps = ((32 << 10) / (slots * 8)).clamp(1, 8);
        LaunchConfig {
            grid_dim: (rows.div_ceil(warps) as u32, 1, 1),
            block_dim: (32 * warps as u32, 1, 1),
            shared_mem_bytes: (warps * slots * 8) as u32,
        }
    } else {
        // A thread per eight slots (64 to 512).
        LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: ((slots / 8).clamp(64, 512) as u32, 1, 1),
            shared_mem_bytes: (slots * 8) as u32,
        }
    };
    let (kp, cap, slots, n) = (kp as i32, cap as i32, slots as i32, rows as i32);
    let null = 0u64;
    let mut count = from.count.slice_mut(..rows);
    let mut floor = from.floor.as_mut().map(|f| f.slice_mut(..rows));
    let (buf_val, buf_idx) = (from.val.slice(..), from.idx.slice(..));
    let kernel = if warped {
        gpu.k.merge_survivors_warp()?
    } else {
        gpu.k.merge_survivors()?
    };
    let mut l = gpu.stream.launch_builder(kernel);
    l.arg(lists.val).arg(lists.idx).arg(&kp).arg(&mut count);
    match &mut floor {
        Some(f) => l.arg(f),
        None => l.arg(&null),
    };
    l.arg(&buf_val).arg(&buf_idx).arg(&cap).arg(&slots);
    if warped {
        l.arg(&n);
    }
    // SAFETY: matches merge_survivors and merge_survivors_warp (the row count last) in
    // kernels/select/survivors.cu; lists rows × kp, buffers rows × cap, count (and floor, or a
    // null pointer) rows; shared memory for `slots` pairs per row merging at once (at most 32
    // KiB warped, 40 KiB a block: under the 48 KiB a kernel gets without opting in).
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("merge_survivors"))
}

/// The running lists a tile's rows and, for an off-diagonal tile of the graph, its columns
/// belong to (each `width` slots per item, sorted, the largest last), and their buffers.
pub(crate) struct FilterInto<'a, 'v> {
    pub rows: &'a CudaView<'v, f32>,
    pub row_out: &'a mut Survivors,
    pub cols: Option<(&'a CudaView<'v, f32>, &'a mut Survivors)>,
    pub width: usize,
}

/// Appends every pair of `tile` whose key is at most its row's list's largest to the row's
/// buffer and, with `into.cols`, at most its column's largest to the column's buffer: the tile
/// is read once. Thresholds are the lists' as they stand before the launch; counters and floors
/// are zero (as [`merge`] with floors leaves them).
pub(crate) fn tile_filter(gpu: &Gpu, tile: TileIn<'_>, into: FilterInto<'_, '_>) -> Result<()> {
    let at = tile.at;
    debug_assert!(into.row_out.floor.is_some() && into.row_out.count.len() >= at.rows);
    let per_block = THREADS * abi::ROW_GROUP;
    let cfg = LaunchConfig {
        grid_dim: (
            at.cols.div_ceil(per_block) as u32,
            at.rows.div_ceil(FILTER_ROWS) as u32,
            1,
        ),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let (ld, nrows, ncols, key) = (at.ld as i64, at.rows as i32, at.cols as i32, at.key as i32);
    let scalars = IntoScalars::of(&into, (at.row_off, at.col_off), at.exclude_self);
    let mut l = gpu.stream.launch_builder(gpu.k.tile_filter()?);
    l.arg(tile.values)
        .arg(&ld)
        .arg(&nrows)
        .arg(&ncols)
        .arg(&key)
        .arg(tile.rn)
        .arg(tile.cn);
    push_into(&mut l, &scalars, into)?;
    // SAFETY: matches tile_filter in kernels/select/survivors.cu: the tile holds rows × ld
    // values, the lists rows × kp and cols × kp, the buffers (count, floor: rows or cols; val,
    // idx: × cap) as many rows and columns.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("tile_filter"))
}

/// The scalars among a filter's arguments after the tile's own, owned by the launching frame
/// (a launch holds references to its arguments): where the pair sits and [`FilterInto`]'s.
pub(crate) struct IntoScalars {
    row_off: u32,
    col_off: u32,
    exclude_self: i32,
    kp: i32,
    both: i32,
    cap: i32,
    null: u64,
}

impl IntoScalars {
    /// For a pair whose rows and columns are items from `offsets` (0 and 1) on, skipping each
    /// item's pair with itself when `exclude_self`.
    pub fn of(into: &FilterInto<'_, '_>, offsets: (u32, u32), exclude_self: bool) -> Self {
        IntoScalars {
            row_off: offsets.0,
            col_off: offsets.1,
            exclude_self: exclude_self as i32,
            kp: into.width as i32,
            both: into.cols.is_some() as i32,
            cap: into.row_out.cap as i32,
            null: 0,
        }
    }
}

/// Pushes the arguments the filters (tile_filter, pair_filter_*) take after the tile's own:
/// row_off, col_off, exclude_self, row_list, col_list, kp, both, the rows' count, floor, val
/// and idx, the columns' (null pointers without columns, never read then), cap.
pub(crate) fn push_into<'a>(
    l: &mut LaunchArgs<'a>,
    s: &'a IntoScalars,
    into: FilterInto<'a, '_>,
) -> Result<()> {
    l.arg(&s.row_off)
        .arg(&s.col_off)
        .arg(&s.exclude_self)
        .arg(into.rows);
    let (col_list, col_out) = match into.cols {
        Some((list, out)) => (Some(list), Some(out)),
        None => (None, None),
    };
    match col_list {
        Some(list) => l.arg(list),
        None => l.arg(&s.null),
    };
    l.arg(&s.kp).arg(&s.both);
    for out in [Some(into.row_out), col_out] {
        match out {
            Some(Survivors {
                count,
                floor: Some(floor),
                val,
                idx,
                cap,
            }) => {
                debug_assert_eq!(*cap as i32, s.cap);
                l.arg(count).arg(floor).arg(val).arg(idx);
            }
            Some(_) => {
                return Err(voisin::Error::device(
                    "cuda: the graph's survivor buffers keep floors (internal error)",
                ))
            }
            None => {
                l.arg(&s.null).arg(&s.null).arg(&s.null).arg(&s.null);
            }
        }
    }
    l.arg(&s.cap);
    Ok(())
}
