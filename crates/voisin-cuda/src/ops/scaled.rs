//! A set's prepared f32 rows as f16, each scaled by its own power of two
//! (kernels/distance/scaled_half.cu): what TF32 plans run on f16 tensor cores, at twice TF32's
//! rate on half the bytes, inside TF32's bound (`Plan::with_precision`); under fp16x3 plans
//! each value split into two f16 halves whose three leading products come within ~2⁻²⁰ of
//! fp32. The graph's fused tile pairs read them (ops/pair.rs), and so do its written tiles of
//! wide rows under TF32 (ops/tile.rs, which brings each tile back to the rows' scale).
//!
//! Owns the copy, its factors and which plans and dimensions take it; knows nothing about the
//! tiles' selection.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Plan, TileKey, TileKind, TileRows};
use crate::ops::device_set::{DeviceSet, RowsView};
use crate::ops::tile::Block;
use crate::options::Precision;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// The smallest dimension whose written tiles run on the scaled rows. Bringing a tile back to
/// the rows' scale is one more read and write of it; at d = 15876 the f16 GEMM ran at 566–674
/// TFLOP/s against TF32's 280–303 (bench/RESULTS.md), while near d = 128 the tile's own
/// traffic is most of its time and the extra pass would cost more than the GEMM saves.
pub(crate) const TILE_MIN_DIM: usize = 1024;

/// Whether `plan`'s tiles can run on scaled rows: dot products of prepared f32 rows under TF32
/// or split under fp16x3 (GEMM tiles whose key is made from the dot product).
pub(crate) fn applies(plan: &Plan) -> bool {
    plan.tile == TileKind::Gemm
        && plan.key != TileKey::Direct
        && matches!(plan.precision, Precision::Tf32 | Precision::Fp16x3)
        && plan.tile_rows() == TileRows::F32
}

/// Whether `plan`'s rows are split (fp16x3: each value as two f16 halves, only the fused tile
/// pair reads them).
pub(crate) fn split(plan: &Plan) -> bool {
    plan.precision == Precision::Fp16x3
}

/// Whether `plan`'s written tiles run on scaled rows (when a copy exists): TF32 plans of wide
/// rows. cuBLAS takes whole f16 rows, not split ones: fp16x3's written tiles run fp32.
pub(crate) fn for_tiles(plan: &Plan) -> bool {
    applies(plan) && !split(plan) && plan.dim >= TILE_MIN_DIM
}

/// The scaled copy of a set's rows: `ld` values apart (16-byte rows, zero-padded), and each
/// row's factor back (2^-e).
pub(crate) struct ScaledRows {
    rows: CudaSlice<u16>,
    back: CudaSlice<f32>,
    ld: usize,
}

impl ScaledRows {
    /// The values from one row of a copy of `d`-value rows to the next: whole 16-byte groups,
    /// or split (each value's two halves), whole groups of both halves
    /// (kernels/distance/scaled_half.cu, `PF_SPLIT_GROUP`).
    pub fn ld_for(d: usize, split: bool) -> usize {
        if split {
            2 * d.max(1).next_multiple_of(abi::PF_SPLIT_GROUP)
        } else {
            d.max(1).next_multiple_of(8)
        }
    }

    /// The copy of `data`'s prepared rows under `plan` ([`applies`]), which the call uploads
    /// and prepares first if they are not yet; one pass over them, half their bytes. `None`
    /// where the copy does not fit on the device (the caller tiles the prepared rows).
    pub fn new(gpu: &Gpu, plan: &Plan, data: &DeviceSet<'_>) -> Result<Option<Self>> {
        let Some(mut copy) = Self::room(gpu, plan, data.n) else {
            return Ok(None);
        };
        data.ensure(gpu, data.n)?;
        copy.fill(gpu, plan, data, 0..data.n)?;
        Ok(Some(copy))
    }

    /// Room for the copy of `n` rows under `plan` ([`applies`]), nothing written yet; `None`
    /// where it does not fit on the device. [`ScaledRows::fill`] makes its rows.
    pub fn room(gpu: &Gpu, plan: &Plan, n: usize) -> Option<Self> {
        debug_assert!(applies(plan));
        let ld = Self::ld_for(plan.dim, split(plan));
        // SAFETY: scaled_half_rows writes every value (the padding as zeros) and every factor
        // of the rows `fill` is given; the callers read only those.
        let room = unsafe { gpu.stream.alloc::<u16>((n * ld).max(1)) }
            .and_then(|r| Ok((r, unsafe { gpu.stream.alloc::<f32>(n.max(1)) }?)));
        room.ok().map(|(rows, back)| ScaledRows { rows, back, ld })
    }

    /// Makes the copy of rows `range` of `data`, which must be on the device (queued on the
    /// stream: [`DeviceSet::ensure`]).
    pub fn fill(
        &mut self,
        gpu: &Gpu,
        plan: &Plan,
        data: &DeviceSet<'_>,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        let (n, d, ld) = (range.len(), plan.dim, self.ld);
        if n == 0 {
            return Ok(());
        }
        debug_assert!(range.end <= data.n && self.back.len() >= range.end);
        let rows_in = data.block(range.start, range.end);
        let warps = 8u32;
        let cfg = LaunchConfig {
            grid_dim: ((n as u64).div_ceil(warps as u64) as u32, 1, 1),
            block_dim: (32 * warps, 1, 1),
            shared_mem_bytes: 0,
        };
        let (nn, dd, ldl, halves) = (n as i64, d as i32, ld as i64, i32::from(split(plan)));
        let mut out = self.rows.slice_mut(range.start * ld..range.end * ld);
        let mut back = self.back.slice_mut(range.clone());
        let mut l = gpu.stream.launch_builder(gpu.k.scaled_half_rows()?);
        l.arg(rows_in.rows.f32())
            .arg(&nn)
            .arg(&dd)
            .arg(&mut out)
            .arg(&ldl)
            .arg(&mut back)
            .arg(&halves);
        // SAFETY: matches scaled_half_rows (kernels/distance/scaled_half.cu): n prepared rows
        // of d f32 values, d apart; out holds n × ld values (ld ≥ 2d in whole groups when
        // split, `ld_for`), back n.
        unsafe { l.launch(cfg) }.map_err(dev("scaled_half_rows"))?;
        Ok(())
    }

    /// Rows `a..b` of `data` as a tile operand: their scaled copies, their factors back and
    /// the set's squared norms.
    pub fn block<'a>(&'a self, data: &'a DeviceSet<'_>, a: usize, b: usize) -> Block<'a> {
        let ld = self.ld;
        Block {
            rows: RowsView::Half(self.rows.slice(a * ld..(b * ld).max(a * ld + 1))),
            ld,
            back: Some(self.back.slice(a..b.max(a + 1))),
            ..data.block(a, b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::plan_of as plan;
    use voisin::data::ElemType;
    use voisin::Metric;

    /// TF32 plans of dot-product keys take the copy at any dimension, their written tiles from
    /// TILE_MIN_DIM on; fp32, SIMT metrics and the storages' own tensor cores never.
    #[test]
    fn which_plans_take_scaled_rows() {
        let (e, ip, cos, cb) = (
            Metric::Euclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Cityblock,
        );
        for m in [&e, &ip, &cos] {
            for elem in [ElemType::F32, ElemType::U8, ElemType::F16] {
                for d in [1, 3, 128, TILE_MIN_DIM - 1, TILE_MIN_DIM, 15876] {
                    let p = plan(m, d, Precision::Tf32, elem);
                    assert!(applies(&p), "{m} {elem:?} {d}");
                    assert_eq!(for_tiles(&p), d >= TILE_MIN_DIM, "{m} {elem:?} {d}");
                }
            }
            assert!(!applies(&plan(m, 2048, Precision::Fp32, ElemType::F32)));
        }
        assert!(!applies(&plan(&cb, 2048, Precision::Tf32, ElemType::F32)));
        assert!(!applies(&plan(&e, 2048, Precision::Fp16, ElemType::F16)));
        assert!(!applies(&plan(&e, 2048, Precision::Int8, ElemType::U8)));
        // fp16x3: split rows for the fused pairs at any dimension, never written tiles.
        for d in [1, 3, 128, TILE_MIN_DIM, 15876] {
            let p = plan(&e, d, Precision::Fp16x3, ElemType::F32);
            assert!(applies(&p) && split(&p) && !for_tiles(&p), "{d}");
        }
        assert!(!split(&plan(&e, 128, Precision::Tf32, ElemType::F32)));
        assert_eq!(ScaledRows::ld_for(1, false), 8);
        assert_eq!(ScaledRows::ld_for(15876, false), 15880);
        assert_eq!(ScaledRows::ld_for(1, true), 32);
        assert_eq!(ScaledRows::ld_for(128, true), 256);
        assert_eq!(ScaledRows::ld_for(127, true), 256);
        assert_eq!(ScaledRows::ld_for(129, true), 288);
    }
}
