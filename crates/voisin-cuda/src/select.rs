//! k-selection on the device: the `--select` variants and their launchers.
//!
//! Owns choosing a variant and launching its kernel over one tile; the tiling itself belongs to
//! the algorithm files (knn.rs, graph.rs). New variants (seed 002 heaps, seed 000 warp
//! quick-select) are new [`Select`] values with a launcher here.

use std::str::FromStr;

use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig, PushKernelArg};
use voisin::{Error, Result};

use crate::context::{dev, Gpu};
use crate::prepare::TileKey;

/// Largest list the block-select kernel keeps per row (shared memory: 2 × kp × 8 bytes).
pub const BLOCK_MAX_K: usize = 2048;
const THREADS: u32 = 256;
/// Values per thread between barriers in select_block (SB_GROUP in kernels/select_block.cu).
const SB_GROUP: usize = 4;

/// Which selection kernel produces candidates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Select {
    /// Block select while the list fits (k up to about 1800), radix select beyond.
    #[default]
    Auto,
    /// Per-row block select with a threshold filter and bitonic merges (kernels/select_block.cu).
    Block,
    /// Per-row radix select over whole rows, any k up to n (kernels/select_radix.cu).
    Radix,
}

impl FromStr for Select {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Select::Auto),
            "block" => Ok(Select::Block),
            "radix" => Ok(Select::Radix),
            _ => Err(Error::invalid(format!(
                "unknown selection '{s}' (known: auto, block, radix)"
            ))),
        }
    }
}

impl Select {
    /// The variant that runs for a list of `kp` entries.
    pub(crate) fn resolve(self, kp: usize) -> Result<Select> {
        match self {
            Select::Auto if kp <= BLOCK_MAX_K => Ok(Select::Block),
            Select::Auto => Ok(Select::Radix),
            Select::Block if kp > BLOCK_MAX_K => Err(Error::invalid(format!(
                "block selection keeps at most {BLOCK_MAX_K} candidates per query (k too \
                 large); use --select radix or auto"
            ))),
            s => Ok(s),
        }
    }
}

/// The candidate list size for k: k plus a margin (so the f32 bound rarely forces a widening
/// pass), rounded up to a power of two for the bitonic networks.
pub(crate) fn list_size(k: usize) -> usize {
    (k + (k / 8).max(8)).next_power_of_two()
}

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

pub(crate) fn fill_lists(
    gpu: &Gpu,
    val: &mut CudaViewMut<'_, f32>,
    idx: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    let n = val.len() as u64;
    let cfg = LaunchConfig {
        grid_dim: ((n.div_ceil(256)).clamp(1, 65535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut l = gpu.stream.launch_builder(&gpu.k.fill_lists);
    l.arg(val).arg(idx).arg(&n);
    // SAFETY: matches fill_lists in kernels/select_block.cu; n is the views' length.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("fill_lists"))
}

/// Merges the tile's rows into their running lists (rows × kp, sorted).
#[allow(clippy::too_many_arguments)]
pub(crate) fn block(
    gpu: &Gpu,
    tile: &CudaView<'_, f32>,
    at: TileAt,
    rn: &CudaView<'_, f32>,
    cn: &CudaView<'_, f32>,
    val: &mut CudaViewMut<'_, f32>,
    idx: &mut CudaViewMut<'_, u32>,
    kp: usize,
) -> Result<()> {
    // Room for one group of inserts (SB_GROUP values per thread) above the flush point.
    let nbuf = kp.max(2 * SB_GROUP * THREADS as usize);
    let cfg = LaunchConfig {
        grid_dim: (at.rows as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: ((kp + nbuf) * 8) as u32,
    };
    let (ld, rows, cols, mode) = (at.ld as i64, at.rows as i32, at.cols as i32, at.key as i32);
    let (excl, kp, nbuf) = (at.exclude_self as i32, kp as i32, nbuf as i32);
    let mut l = gpu.stream.launch_builder(&gpu.k.select_block);
    l.arg(tile)
        .arg(&ld)
        .arg(&rows)
        .arg(&cols)
        .arg(&mode)
        .arg(rn)
        .arg(cn)
        .arg(&at.row_off)
        .arg(&at.col_off)
        .arg(&excl)
        .arg(val)
        .arg(idx)
        .arg(&kp)
        .arg(&nbuf);
    // SAFETY: matches select_block in kernels/select_block.cu; lists hold rows × kp.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("select_block"))
}

/// List size of the column-select kernel (SC_KP in kernels/select_cols.cu).
pub(crate) const COLS_KP: usize = 32;

/// Merges the tile's columns into their running lists (cols × COLS_KP, sorted): the graph's
/// column candidates read in place, without a transpose.
pub(crate) fn cols(
    gpu: &Gpu,
    tile: &CudaView<'_, f32>,
    at: TileAt,
    rn: &CudaView<'_, f32>,
    cn: &CudaView<'_, f32>,
    val: &mut CudaViewMut<'_, f32>,
    idx: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: (at.cols.div_ceil(32) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (ld, rows, cols, mode) = (at.ld as i64, at.rows as i32, at.cols as i32, at.key as i32);
    let excl = at.exclude_self as i32;
    let mut l = gpu.stream.launch_builder(&gpu.k.select_cols);
    l.arg(tile)
        .arg(&ld)
        .arg(&rows)
        .arg(&cols)
        .arg(&mode)
        .arg(rn)
        .arg(cn)
        .arg(&at.row_off)
        .arg(&at.col_off)
        .arg(&excl)
        .arg(val)
        .arg(idx);
    // SAFETY: matches kernels/select_cols.cu; lists hold cols × COLS_KP.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("select_cols"))
}

/// Writes each row's k smallest keys (any order) to out (rows × k).
#[allow(clippy::too_many_arguments)]
pub(crate) fn radix(
    gpu: &Gpu,
    tile: &CudaView<'_, f32>,
    at: TileAt,
    rn: &CudaView<'_, f32>,
    cn: &CudaView<'_, f32>,
    k: usize,
    val: &mut CudaViewMut<'_, f32>,
    idx: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    let cfg = LaunchConfig {
        grid_dim: (at.rows as u32, 1, 1),
        block_dim: (512, 1, 1),
        shared_mem_bytes: 0,
    };
    let (ld, rows, cols, mode) = (at.ld as i64, at.rows as i32, at.cols as i32, at.key as i32);
    let (excl, k) = (at.exclude_self as i32, k as i32);
    let mut l = gpu.stream.launch_builder(&gpu.k.select_radix);
    l.arg(tile)
        .arg(&ld)
        .arg(&rows)
        .arg(&cols)
        .arg(&mode)
        .arg(rn)
        .arg(cn)
        .arg(&at.row_off)
        .arg(&at.col_off)
        .arg(&excl)
        .arg(&k)
        .arg(val)
        .arg(idx);
    // SAFETY: matches select_radix in kernels/select_radix.cu; out holds rows × k.
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
    let mut l = gpu.stream.launch_builder(&gpu.k.transpose);
    l.arg(input)
        .arg(&ld_in)
        .arg(&rows)
        .arg(&cols)
        .arg(out)
        .arg(&ld_out);
    // SAFETY: matches kernels/transpose.cu.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("transpose"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_sizes_leave_a_margin() {
        for k in 1..5000 {
            let kp = list_size(k);
            assert!(kp.is_power_of_two() && kp >= k + 8, "k={k} kp={kp}");
        }
    }

    #[test]
    fn selection_names_and_limits() {
        assert_eq!("Radix".parse::<Select>().unwrap(), Select::Radix);
        assert!("heap".parse::<Select>().is_err());
        assert_eq!(Select::Auto.resolve(2048).unwrap(), Select::Block);
        assert_eq!(Select::Auto.resolve(4096).unwrap(), Select::Radix);
        assert!(Select::Block.resolve(4096).is_err());
    }
}
