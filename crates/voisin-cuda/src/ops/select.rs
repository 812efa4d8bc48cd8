//! k-selection on the device: the `--select` variants and their launchers.
//!
//! Owns choosing a variant, its list-size limits and launching its kernel over one tile
//! (`run` is the one dispatch the algorithm files call); the tiling itself belongs to the
//! search files (search/knn.rs, search/graph.rs), and proving the lists to search/finish.rs. Every variant keeps the
//! same contract: per row some smallest approximate keys such that every item left out has a key
//! at least the largest one kept. `bench_tile` (feature bench-variants) times one kernel on a
//! synthetic tile for `select_bench` (crates/voisin-bench).

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaSlice, CudaView, CudaViewMut, DevicePtr, LaunchArgs, LaunchConfig, PushKernelArg,
};
use voisin::{Error, Result};

use crate::numerics::plan::TileKey;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

pub use crate::options::{list_size, Select, BLOCK_MAX_K, HEAP_MAX_K, QUICK_MAX_K};

const THREADS: u32 = 256;
/// Values per thread between barriers in select_block.
const SB_GROUP: usize = abi::ROW_GROUP;
/// Threads per row and values per thread between barriers of select_quick.
#[cfg(feature = "bench-variants")]
const QUICK_THREADS: u32 = 256;
#[cfg(feature = "bench-variants")]
const QS_GROUP: usize = abi::ROW_GROUP;

/// Where the tile's rows and columns sit in the global index space, and how values become keys.
#[derive(Clone, Copy)]
pub(crate) struct TileAt {
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    pub key: TileKey,
    pub row_off: u32,
    pub col_off: u32,
    pub exclude_self: bool,
}

/// A tile to select from: its values, where it sits ([`TileAt`]), and the f32 squared norms of
/// its rows (`rn`) and columns (`cn`) for the L2 key.
#[derive(Clone, Copy)]
pub(crate) struct TileIn<'a> {
    pub values: &'a CudaView<'a, f32>,
    pub at: TileAt,
    pub rn: &'a CudaView<'a, f32>,
    pub cn: &'a CudaView<'a, f32>,
}

/// The lists a selection writes: `val` and `idx`, `width` entries per row.
pub(crate) struct ListsOut<'a, 'v> {
    pub val: &'a mut CudaViewMut<'v, f32>,
    pub idx: &'a mut CudaViewMut<'v, u32>,
    pub width: usize,
}

/// A tile's scalar kernel arguments, held while a launch borrows them.
struct TileScalars {
    ld: i64,
    rows: i32,
    cols: i32,
    key: i32,
    row_off: u32,
    col_off: u32,
    exclude_self: i32,
}

impl TileAt {
    fn scalars(&self) -> TileScalars {
        TileScalars {
            ld: self.ld as i64,
            rows: self.rows as i32,
            cols: self.cols as i32,
            key: self.key as i32,
            row_off: self.row_off,
            col_off: self.col_off,
            exclude_self: self.exclude_self as i32,
        }
    }
}

/// Pushes the ten arguments every selection kernel starts with, in their order: tile, ld,
/// rows, cols, key mode, row norms, column norms, row offset, column offset, self exclusion.
fn push_tile<'a>(l: &mut LaunchArgs<'a>, tile: &TileIn<'a>, s: &'a TileScalars) {
    let (values, rn, cn) = (tile.values, tile.rn, tile.cn);
    l.arg(values)
        .arg(&s.ld)
        .arg(&s.rows)
        .arg(&s.cols)
        .arg(&s.key)
        .arg(rn)
        .arg(cn)
        .arg(&s.row_off)
        .arg(&s.col_off)
        .arg(&s.exclude_self);
}

/// The launch of a kernel that strides over `n` slots (fill_lists, seed_lists, list_prefix;
/// ops/locality.rs's gather_rows): blocks of 256 threads, at most 65,535 of them.
pub(crate) fn over_slots(n: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 65535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

pub(crate) fn fill_lists(
    gpu: &Gpu,
    val: &mut CudaViewMut<'_, f32>,
    idx: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    let n = val.len() as u64;
    let cfg = over_slots(n);
    let mut l = gpu.stream.launch_builder(gpu.k.fill_lists()?);
    l.arg(val).arg(idx).arg(&n);
    // SAFETY: matches fill_lists in kernels/select/block.cu; n is the views' length.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("fill_lists"))
}

/// Where [`seed_lists`] takes each row's threshold: the key at a rank (from 1) of the row's
/// sorted list, in the lists being seeded or in other lists of `width` per row.
pub(crate) enum SeedFrom<'a, 'b> {
    Own {
        rank: usize,
    },
    Lists {
        val: &'a CudaView<'b, f32>,
        width: usize,
        rank: usize,
    },
}

/// Turns lists of `width` into thresholds alone: each row's slots all take the key `from`
/// names, with no index (`seed_lists` in kernels/select/block.cu).
pub(crate) fn seed_lists(
    gpu: &Gpu,
    val: &mut CudaViewMut<'_, f32>,
    idx: &mut CudaViewMut<'_, u32>,
    width: usize,
    from: SeedFrom<'_, '_>,
) -> Result<()> {
    let n = val.len() as u64;
    let w = width as i32;
    let cfg = over_slots(n);
    // From the lists themselves (`Own`), the kernel reads each row's slot at `rank` and writes
    // it back unchanged. The pointers' guards only order the stream, which is this launch's own.
    let (src, from_width, rank) = match from {
        SeedFrom::Own { rank } => (val.device_ptr(&gpu.stream).0, width, rank),
        SeedFrom::Lists {
            val: from,
            width: fw,
            rank,
        } => {
            debug_assert_eq!(from.len() / fw, n as usize / width);
            (from.device_ptr(&gpu.stream).0, fw, rank)
        }
    };
    debug_assert!((1..=from_width).contains(&rank));
    let (fw, rk) = (from_width as i32, rank as i32);
    let mut l = gpu.stream.launch_builder(gpu.k.seed_lists()?);
    l.arg(&src)
        .arg(&fw)
        .arg(&rk)
        .arg(val)
        .arg(idx)
        .arg(&w)
        .arg(&n);
    // SAFETY: matches seed_lists in kernels/select/block.cu; n is the views' length, a multiple
    // of width; `src` holds n / width rows of from_width values (the lists themselves, or the
    // view checked above), and rank is within them.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("seed_lists"))
}

/// Downloads the lists (rows of `width` entries, `want` wanted per row, `nb` base items), all of
/// them or only those numbered in `rows` (in that order), and returns them with the entries kept
/// per row. Sorted lists (block, heap) wider than `want` come back as their first `want`
/// entries, compacted on the device: the prefix of a sorted list keeps the contract (what it
/// leaves out is at least its largest key), and at k=1000 it halves the transfer and the host's
/// work (2048 → 1125 entries). Lists that hold a whole row (width ≥ nb) come back whole, so
/// that they still count as complete. Chosen rows are gathered on the device: the 152 lists
/// of 10k that clustered data left open took 4.5 ms to download with all the others.
pub(crate) fn download_lists(
    gpu: &Gpu,
    mode: Select,
    (val, idx): (&CudaView<'_, f32>, &CudaView<'_, u32>),
    width: usize,
    want: usize,
    nb: usize,
    rows: Option<&[u32]>,
) -> Result<(Vec<f32>, Vec<u32>, usize)> {
    let sorted = matches!(mode, Select::Block | Select::Heap);
    let keep = if !sorted || want >= width || width >= nb {
        width
    } else {
        want
    };
    if (keep == width && rows.is_none()) || val.is_empty() {
        return Ok((gpu.download(val)?, gpu.download(idx)?, width));
    }
    debug_assert!(rows.is_none_or(|r| r.iter().all(|&r| (r as usize) < val.len() / width)));
    let s = &gpu.stream;
    let picked = match rows {
        Some(r) => Some(s.clone_htod(r).map_err(dev("copying rows"))?),
        None => None,
    };
    let n = picked.as_ref().map_or(val.len() / width, |r| r.len()) * keep;
    if n == 0 {
        return Ok((Vec::new(), Vec::new(), keep));
    }
    let (dv, di) = prefixes(gpu, (val, idx), width, keep, picked.as_ref())?;
    Ok((
        gpu.download(&dv.slice(..))?,
        gpu.download(&di.slice(..))?,
        keep,
    ))
}

/// The first `keep` entries of each list of `width` (of those `rows` names, in that order),
/// compacted on the device (`list_prefix` in kernels/select/block.cu).
pub(crate) fn prefixes(
    gpu: &Gpu,
    (val, idx): (&CudaView<'_, f32>, &CudaView<'_, u32>),
    width: usize,
    keep: usize,
    rows: Option<&CudaSlice<u32>>,
) -> Result<(CudaSlice<f32>, CudaSlice<u32>)> {
    debug_assert!(keep <= width);
    let s = &gpu.stream;
    let n = rows.map_or(val.len() / width, |r| r.len()) * keep;
    // SAFETY: list_prefix writes all n entries before they are read.
    let mut dv = unsafe { s.alloc::<f32>(n.max(1)) }.map_err(dev("allocating"))?;
    let mut di = unsafe { s.alloc::<u32>(n.max(1)) }.map_err(dev("allocating"))?;
    if n == 0 {
        return Ok((dv, di));
    }
    let cfg = over_slots(n as u64);
    let (w, kept, total) = (width as i32, keep as i32, n as u64);
    let null: u64 = 0;
    let mut l = s.launch_builder(gpu.k.list_prefix()?);
    l.arg(val)
        .arg(idx)
        .arg(&w)
        .arg(&mut dv)
        .arg(&mut di)
        .arg(&kept)
        .arg(&total);
    match rows {
        Some(r) => l.arg(r),
        None => l.arg(&null),
    };
    // SAFETY: matches list_prefix in kernels/select/block.cu; val/idx hold rows × width and
    // every picked row is one of them (the callers' rows are below val.len() / width).
    unsafe { l.launch(cfg) }.map_err(dev("list_prefix"))?;
    Ok((dv, di))
}

/// Selects over one tile with the (resolved) variant `mode`: running lists of `out.width`
/// entries per row (`fill_lists` first) or, for whole-row variants, `out.width` keys per row
/// written fresh.
pub(crate) fn run(gpu: &Gpu, mode: Select, tile: TileIn<'_>, out: ListsOut<'_, '_>) -> Result<()> {
    match mode {
        Select::Radix => radix(gpu, tile, out),
        Select::Auto => Err(Error::device(
            "cuda: selection mode not resolved (internal error)",
        )),
        m => running(gpu, m, tile, out),
    }
}

/// Merges the tile's rows into their running lists (rows × `out.width`, sorted) with block
/// select.
pub(crate) fn block(gpu: &Gpu, tile: TileIn<'_>, out: ListsOut<'_, '_>) -> Result<()> {
    running(gpu, Select::Block, tile, out)
}

/// Launches a running-list kernel (block, heap, quick): one block per row, lists rows × kp.
fn running(gpu: &Gpu, mode: Select, tile: TileIn<'_>, out: ListsOut<'_, '_>) -> Result<()> {
    let (at, kp) = (tile.at, out.width);
    debug_assert!(mode.width(kp) == kp && mode.max_list().is_some_and(|m| kp <= m));
    // (kernel, threads, dynamic shared bytes, the kernel's last argument if it takes one)
    let (f, threads, shared, extra) = match mode {
        #[cfg(not(feature = "bench-variants"))]
        Select::Heap | Select::Quick => return Err(mode.not_built()),
        #[cfg(feature = "bench-variants")]
        Select::Heap => (gpu.k.select_heap()?, 32, 33 * kp * 8, None),
        #[cfg(feature = "bench-variants")]
        Select::Quick => {
            // Room for two groups of inserts above the list: one to fill, one in flight.
            let cap = kp + 2 * QS_GROUP * QUICK_THREADS as usize;
            (gpu.k.select_quick()?, QUICK_THREADS, 2 * cap * 8, Some(cap))
        }
        _ => {
            // Room for one group of inserts (SB_GROUP values per thread) above the flush point.
            let nbuf = kp.max(2 * SB_GROUP * THREADS as usize);
            (gpu.k.select_block()?, THREADS, (kp + nbuf) * 8, Some(nbuf))
        }
    };
    if shared > 48 << 10 {
        // Above 48 KiB a kernel must opt in to dynamic shared memory.
        f.set_attribute(
            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared as i32,
        )
        .map_err(dev("raising a kernel's shared memory"))?;
    }
    let cfg = LaunchConfig {
        grid_dim: (at.rows as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: shared as u32,
    };
    let s = at.scalars();
    let kp = kp as i32;
    let extra = extra.map(|e| e as i32);
    let mut l = gpu.stream.launch_builder(f);
    push_tile(&mut l, &tile, &s);
    l.arg(out.val).arg(out.idx).arg(&kp);
    if let Some(e) = &extra {
        l.arg(e);
    }
    // SAFETY: matches select_block / select_heap / select_quick (kernels/select_*.cu): the
    // lists hold rows × kp, shared memory is sized as each kernel's comment states.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("a running-list select kernel"))
}

/// List size of the column-select kernel (select/cols.cu).
pub(crate) const COLS_KP: usize = abi::SC_KP;

/// Merges the tile's columns into their running lists (cols × COLS_KP, sorted): the graph's
/// column candidates read in place, without a transpose.
pub(crate) fn cols(
    gpu: &Gpu,
    tile: TileIn<'_>,
    val: &mut CudaViewMut<'_, f32>,
    idx: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    let at = tile.at;
    let cfg = LaunchConfig {
        grid_dim: (at.cols.div_ceil(32) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let s = at.scalars();
    let mut l = gpu.stream.launch_builder(gpu.k.select_cols()?);
    push_tile(&mut l, &tile, &s);
    l.arg(val).arg(idx);
    // SAFETY: matches kernels/select/cols.cu; lists hold cols × COLS_KP.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("select_cols"))
}

/// Writes each row's k = `out.width` smallest keys (any order) to `out` (rows × k).
pub(crate) fn radix(gpu: &Gpu, tile: TileIn<'_>, out: ListsOut<'_, '_>) -> Result<()> {
    let (at, k) = (tile.at, out.width);
    let cfg = LaunchConfig {
        grid_dim: (at.rows as u32, 1, 1),
        block_dim: (512, 1, 1),
        shared_mem_bytes: 0,
    };
    let s = at.scalars();
    let k = k as i32;
    let mut l = gpu.stream.launch_builder(gpu.k.select_radix()?);
    push_tile(&mut l, &tile, &s);
    l.arg(&k).arg(out.val).arg(out.idx);
    // SAFETY: matches select_radix in kernels/select/radix.cu; out holds rows × k.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("select_radix"))
}

/// out (cols × rows, stride ld_out) = inᵀ.
pub(crate) fn transpose(
    gpu: &Gpu,
    input: &CudaView<'_, f32>,
    rows: usize,
    cols: usize,
    ld_in: usize,
    out: &mut CudaViewMut<'_, f32>,
    ld_out: usize,
) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: (cols.div_ceil(32) as u32, rows.div_ceil(32) as u32, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    };
    let (ld_in, rows, cols, ld_out) = (ld_in as i64, rows as i32, cols as i32, ld_out as i64);
    let mut l = gpu.stream.launch_builder(gpu.k.transpose()?);
    l.arg(input)
        .arg(&ld_in)
        .arg(&rows)
        .arg(&cols)
        .arg(out)
        .arg(&ld_out);
    // SAFETY: matches kernels/distance/transpose.cu.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("transpose"))
}

#[cfg(feature = "bench-variants")]
/// Timings of one selection variant on a synthetic tile ([`bench_tile`]).
#[derive(Clone, Copy, Debug)]
pub struct TileTiming {
    /// The variant that ran (`Auto` resolved).
    pub mode: Select,
    /// Entries kept per row.
    pub width: usize,
    /// Microseconds per tile starting from empty lists (the first tile of a pass), median.
    pub cold_us: f64,
    /// Microseconds per tile after the lists were filled from [`WARM_TILES`] other tiles of the
    /// same shape (a later tile of a pass), median; whole-row variants equal `cold_us`.
    pub warm_us: f64,
    /// Microseconds of a device-to-device copy of the tile, median.
    pub copy_us: f64,
}

#[cfg(feature = "bench-variants")]
/// Tiles that fill the lists before a warm timing: the timed tile is then the 16th of a pass,
/// where about 1/16 of the list's length passes the filter per row.
pub const WARM_TILES: usize = 15;

/// Times each (variant, k) of `cases` selecting k (with the search's list size) from one
/// `rows × cols` tile of uniform random keys on device `device`, `reps` times (median); a
/// variant that refuses the k gives its error. For the selection micro-benchmark
/// (select_bench in crates/voisin-bench); the search itself never calls it, so it is built with the
/// `bench-variants` feature only.
#[cfg(feature = "bench-variants")]
pub fn bench_tile(
    device: usize,
    rows: usize,
    cols: usize,
    cases: &[(Select, usize)],
    reps: usize,
) -> Result<Vec<Result<TileTiming>>> {
    use cudarc::driver::sys::CUevent_flags;
    use cudarc::driver::CudaSlice;
    use rayon::prelude::*;
    let gpu = Gpu::open(device)?;
    // rows + WARM_TILES random rows: tile j is rows j.., so each tile's row r is different data.
    let host: Vec<f32> = (0..(rows + WARM_TILES) * cols)
        .into_par_iter()
        .map(|i| {
            // splitmix64 of the position: reproducible and parallel.
            let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    let data = gpu.upload(&host)?;
    drop(host);
    let s = &gpu.stream;
    let norms = s
        .clone_htod(&[0f32])
        .map_err(dev("copying to the device"))?;
    let mut copy = s
        .alloc_zeros::<f32>(rows * cols)
        .map_err(dev("allocating"))?;
    let tile_a = data.slice(..rows * cols);
    let nv = norms.slice(..);
    let ev = || {
        s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(dev("recording an event"))
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let reps = reps.max(1);
    let mut copies = Vec::new();
    for _ in 0..reps {
        let t0 = ev()?;
        s.memcpy_dtod(&tile_a, &mut copy).map_err(dev("copying"))?;
        let t1 = ev()?;
        copies.push(t0.elapsed_ms(&t1).map_err(dev("timing"))? as f64 * 1e3);
    }
    let copy_us = median(copies);
    drop(copy);
    let at = TileAt {
        rows,
        cols,
        ld: cols,
        key: TileKey::Direct,
        row_off: 0,
        col_off: 0,
        exclude_self: false,
    };
    let one = |sel: Select, k: usize| -> Result<TileTiming> {
        let kp = list_size(k);
        let mode = sel.resolve(kp)?;
        let width = if mode.whole_rows() {
            kp.min(cols)
        } else {
            mode.width(kp)
        };
        let n = rows * width;
        let mut lv = s.alloc_zeros::<f32>(n).map_err(dev("allocating"))?;
        let mut li = s.alloc_zeros::<u32>(n).map_err(dev("allocating"))?;
        let mut sv = s.alloc_zeros::<f32>(n).map_err(dev("allocating"))?;
        let mut si = s.alloc_zeros::<u32>(n).map_err(dev("allocating"))?;
        // One selection over `values` into the lists `val`/`idx`.
        let select = |values: &CudaView<'_, f32>,
                      val: &mut CudaSlice<f32>,
                      idx: &mut CudaSlice<u32>|
         -> Result<()> {
            let (mut v, mut i) = (val.slice_mut(..), idx.slice_mut(..));
            let tile = TileIn {
                values,
                at,
                rn: &nv,
                cn: &nv,
            };
            let out = ListsOut {
                val: &mut v,
                idx: &mut i,
                width,
            };
            run(&gpu, mode, tile, out)
        };
        // Lists after the warm-up tiles, saved once: each warm run starts from them.
        if !mode.whole_rows() {
            fill_lists(&gpu, &mut sv.slice_mut(..), &mut si.slice_mut(..))?;
            for j in 1..=WARM_TILES {
                select(&data.slice(j * cols..(j + rows) * cols), &mut sv, &mut si)?;
            }
        }
        let (mut cold, mut warm) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            for warm_start in [false, true] {
                if mode.whole_rows() && warm_start {
                    continue;
                }
                if !mode.whole_rows() {
                    if warm_start {
                        s.memcpy_dtod(&sv, &mut lv).map_err(dev("copying"))?;
                        s.memcpy_dtod(&si, &mut li).map_err(dev("copying"))?;
                    } else {
                        fill_lists(&gpu, &mut lv.slice_mut(..), &mut li.slice_mut(..))?;
                    }
                }
                let t0 = ev()?;
                select(&tile_a, &mut lv, &mut li)?;
                let t1 = ev()?;
                let us = t0.elapsed_ms(&t1).map_err(dev("timing"))? as f64 * 1e3;
                if warm_start { &mut warm } else { &mut cold }.push(us);
            }
        }
        let cold_us = median(cold);
        Ok(TileTiming {
            mode,
            width,
            cold_us,
            warm_us: if warm.is_empty() {
                cold_us
            } else {
                median(warm)
            },
            copy_us,
        })
    };
    Ok(cases.iter().map(|&(sel, k)| one(sel, k)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_sizes_leave_a_margin() {
        for k in 1..5000 {
            let kp = list_size(k);
            assert!(kp >= k + 8 && kp >= k + k / 8, "k={k} kp={kp}");
            assert!(Select::Block.width(kp).is_power_of_two() && Select::Quick.width(kp) == kp);
        }
    }

    #[test]
    fn selection_names_and_limits() {
        assert_eq!("Radix".parse::<Select>().unwrap(), Select::Radix);
        assert_eq!("heap".parse::<Select>().unwrap(), Select::Heap);
        assert_eq!("QUICK".parse::<Select>().unwrap(), Select::Quick);
        let err = "bogus".parse::<Select>().unwrap_err().to_string();
        assert!(err.contains("heap, quick"), "{err}");
        for s in Select::ALL {
            assert_eq!(s.name().parse::<Select>().unwrap(), s);
        }
        assert_eq!(Select::Auto.resolve(2048).unwrap(), Select::Block);
        assert_eq!(Select::Auto.resolve(4096).unwrap(), Select::Radix);
        assert!(Select::Block.resolve(4096).is_err());
        assert!(Select::Heap.resolve(257).is_err());
        assert_eq!(Select::Heap.resolve(256).unwrap(), Select::Heap);
        assert!(Select::Quick.resolve(4097).is_err());
        assert_eq!(Select::Radix.max_k(), None);
        for s in [Select::Block, Select::Heap, Select::Quick] {
            let k = s.max_k().unwrap();
            assert!(s.resolve(list_size(k)).is_ok() && s.resolve(list_size(k + 1)).is_err());
        }
    }

    proptest::proptest! {
        /// Whatever the list size, a variant either refuses it with a clear error or gets a
        /// width that holds it, is a power of two for the bitonic/heap networks, and fits the
        /// variant's limit; Auto never refuses.
        #[test]
        fn resolved_widths_hold_the_list(kp in 1usize..20_000, which in 0usize..5) {
            let sel = Select::ALL[which];
            match sel.resolve(kp) {
                Ok(mode) => {
                    proptest::prop_assert!(mode != Select::Auto);
                    let w = mode.width(kp);
                    proptest::prop_assert!(w >= kp);
                    if let Some(max) = mode.max_list() {
                        proptest::prop_assert!(w <= max);
                    }
                    if matches!(mode, Select::Block | Select::Heap) {
                        proptest::prop_assert!(w.is_power_of_two() && w < 2 * kp);
                    } else {
                        proptest::prop_assert_eq!(w, kp);
                    }
                    if sel != Select::Auto {
                        proptest::prop_assert_eq!(mode, sel);
                    }
                }
                Err(e) => {
                    proptest::prop_assert!(sel != Select::Auto);
                    proptest::prop_assert!(matches!(e, Error::InvalidInput(_)));
                    proptest::prop_assert!(e.to_string().contains(sel.name()));
                    proptest::prop_assert!(sel.max_list().is_some_and(|m| sel.width(kp) > m));
                }
            }
        }
    }
}
