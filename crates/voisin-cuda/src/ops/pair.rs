//! The k-NN graph's fused tile pair (kernels/select/pair_filter.cu): the dot products of one
//! tile's rows against another's on tensor cores, filtered in registers against the rows' and
//! the columns' running lists; what passes goes to the same buffers as the tile filter's
//! ([`survivors::tile_filter`]), merged the same way. The distance tile is never written.
//!
//! TF32 plans run here on f16 tensor cores: each prepared row scaled by a power of two and
//! rounded to f16 (kernels/distance/scaled_half.cu), which TF32's bound covers
//! (`Plan::with_precision`). The f16 MMA runs at twice TF32's rate and the rows are half the
//! bytes; TF32 itself is the fallback where the scaled copy does not fit on the device.
//!
//! Owns which plans can be fused ([`kind_for`]), the rows the kernel reads ([`Operands`]) and
//! the launch; when and on which pairs the graph uses it is search/graph.rs's.

use std::ops::Range;

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Plan, TileKey, TileKind, TileRows, K_CHUNK};
use crate::ops::device_set::DeviceSet;
use crate::ops::locality::PairWork;
use crate::ops::scaled::{self, ScaledRows};
use crate::ops::survivors::{push_into, FilterInto, IntoScalars};
use crate::ops::tile::Block;
use crate::options::Precision;
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// Dynamic shared memory of a block (kernels/select/pair_filter.cu `PF_SHARED`): the slabs in
/// flight, 36 words per row of each side.
pub(crate) const SHARED_BYTES: usize =
    abi::PF_STAGES * (abi::PF_BM + abi::PF_BN) * (abi::PF_BK + 4) * 4;

/// The tensor cores a fused tile pair runs on: the kernel, and how many values a 32-bit word
/// of its rows holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PairKind {
    /// Prepared f32 rows on TF32 tensor cores.
    Tf32,
    /// Prepared f32 rows scaled per row to f16, on f16 tensor cores (a TF32 plan).
    F16Scaled,
    /// Prepared f32 rows scaled per row and split into two f16 halves, three f16 products a
    /// value (an fp16x3 plan).
    F16Split,
    /// Stored f16 rows.
    F16,
    /// Stored bf16 rows.
    Bf16,
    /// Prepared int8 rows (u8 minus 128), exact int32 sums.
    S8,
}

impl PairKind {
    fn per_word(self) -> usize {
        match self {
            PairKind::Tf32 => 1,
            PairKind::F16 | PairKind::F16Scaled | PairKind::F16Split | PairKind::Bf16 => 2,
            PairKind::S8 => 4,
        }
    }

    /// The values from one of the kernel's rows to the next under `plan`: the tile rows', or
    /// the scaled copy's (16-byte rows, zero-padded).
    fn ld(self, plan: &Plan) -> usize {
        match self {
            PairKind::F16Scaled => ScaledRows::ld_for(plan.dim, false),
            PairKind::F16Split => ScaledRows::ld_for(plan.dim, true),
            _ => plan.tile_rows().stride(plan.storage, plan.dim),
        }
    }

    /// The words from one of the kernel's rows to the next and the words it sums of each (TF32:
    /// one value a word, the row's d values; f16/bf16: two, int8: four, the whole zero-padded
    /// row).
    fn words(self, plan: &Plan) -> (usize, usize) {
        let ldw = self.ld(plan) / self.per_word();
        (
            ldw,
            if self == PairKind::Tf32 {
                plan.dim
            } else {
                ldw
            },
        )
    }

    /// Bytes from one of the kernel's rows to the next under `plan`.
    pub fn row_bytes(self, plan: &Plan) -> usize {
        self.words(plan).0 * 4
    }

    /// Whether the kernel takes `plan`'s rows in this kind: rows of whole 16-byte groups, and at
    /// most one accumulation chunk summed (split rows: any length, their bound counts every
    /// product's additions, `Plan::with_precision`).
    fn fits(self, plan: &Plan) -> bool {
        let (ldw, kw) = self.words(plan);
        ldw.is_multiple_of(4) && (self == PairKind::F16Split || kw * self.per_word() <= K_CHUNK)
    }

    /// Whether the kernel reads scaled rows and their factors back (ops/scaled.rs's copy).
    pub fn scaled(self) -> bool {
        matches!(self, PairKind::F16Scaled | PairKind::F16Split)
    }

    /// The kernel on `gpu`: for both sides, or (`rows_only`) the one that never tests the
    /// columns' thresholds.
    pub fn kernel(self, gpu: &Gpu, rows_only: bool) -> Result<&CudaFunction> {
        let k = &gpu.k;
        Ok(match (self, rows_only) {
            (PairKind::Tf32, false) => k.pair_filter_tf32()?,
            (PairKind::F16, false) => k.pair_filter_f16()?,
            (PairKind::F16Scaled, false) => k.pair_filter_f16_scaled()?,
            (PairKind::F16Split, false) => k.pair_filter_f16_split()?,
            (PairKind::Bf16, false) => k.pair_filter_bf16()?,
            (PairKind::S8, false) => k.pair_filter_s8()?,
            (PairKind::Tf32, true) => k.pair_filter_tf32_rows()?,
            (PairKind::F16, true) => k.pair_filter_f16_rows()?,
            (PairKind::F16Scaled, true) => k.pair_filter_f16_scaled_rows()?,
            (PairKind::F16Split, true) => k.pair_filter_f16_split_rows()?,
            (PairKind::Bf16, true) => k.pair_filter_bf16_rows()?,
            (PairKind::S8, true) => k.pair_filter_s8_rows()?,
        })
    }
}

/// How `plan`'s tiles can be fused, or None when they must go through a written tile: only
/// GEMM tiles on tensor cores (TF32 plans on scaled f16 rows, f16/bf16 on the stored rows, int8
/// on prepared int8 rows) with a key formed from the dot product, rows of whole 16-byte groups,
/// and at most one accumulation chunk (the plan's bound counts chunked sums beyond [`K_CHUNK`];
/// the kernel sums the whole row at once).
pub(crate) fn kind_for(plan: &Plan) -> Option<PairKind> {
    if plan.tile != TileKind::Gemm || plan.key == TileKey::Direct {
        return None;
    }
    let kind = match (plan.tile_rows(), plan.precision) {
        _ if scaled::split(plan) && scaled::applies(plan) => PairKind::F16Split,
        _ if scaled::applies(plan) => PairKind::F16Scaled,
        (TileRows::Stored, Precision::Fp16) => PairKind::F16,
        (TileRows::Stored, Precision::Bf16) => PairKind::Bf16,
        (TileRows::I8, Precision::Int8) => PairKind::S8,
        _ => return None,
    };
    kind.fits(plan).then_some(kind)
}

/// The rows a fused kind reads of a set on the device: the tiles' own, or for
/// [`PairKind::F16Scaled`] the scaled f16 copy of them (ops/scaled.rs).
pub(crate) struct Operands<'d, 's> {
    data: &'d DeviceSet<'s>,
    kind: PairKind,
    scaled: Option<&'d ScaledRows>,
}

impl<'d, 's> Operands<'d, 's> {
    /// The operands of `kind` ([`kind_for`]'s for `plan`) over the whole of `data`, for
    /// [`PairKind::F16Scaled`] and [`PairKind::F16Split`] on `scaled`, its copy; where that
    /// copy did not fit (`None`), TF32 on the prepared rows, or `None` (no fusion) where their
    /// rows are not whole 16-byte groups or the plan is split (TF32 is outside its bound: its
    /// tiles are written, in fp32).
    pub fn new(
        plan: &Plan,
        data: &'d DeviceSet<'s>,
        kind: PairKind,
        scaled: Option<&'d ScaledRows>,
    ) -> Option<Self> {
        let kind = match (kind, scaled) {
            (PairKind::F16Scaled, None) => PairKind::Tf32,
            (PairKind::F16Split, None) => return None,
            (kind, _) => kind,
        };
        let scaled = scaled.filter(|_| kind.scaled());
        kind.fits(plan).then_some(Operands { data, kind, scaled })
    }

    /// The kind the operands serve (TF32 where the scaled copy did not fit).
    pub fn kind(&self) -> PairKind {
        self.kind
    }

    /// Rows `a..b`.
    fn side(&self, a: usize, b: usize) -> Block<'_> {
        match self.scaled {
            None => self.data.block(a, b),
            Some(s) => s.block(self.data, a, b),
        }
    }
}

/// Which pair of tiles, as [`survivors::tile_filter`]'s `TileAt` says: the first items of the
/// row and column blocks, and whether an item's pair with itself is skipped.
#[derive(Clone, Copy)]
pub(crate) struct PairAt {
    pub row_off: u32,
    pub col_off: u32,
    pub exclude_self: bool,
}

/// Appends every pair of `rows` × `cols` (rows of operands of one kind: a set's against its
/// own for the graph, queries' against the base's for k-NN) whose key is at most its row's
/// list's largest to the row's buffer and, with `into.cols`, at most its column's largest to
/// the column's buffer, as [`survivors::tile_filter`] does on a written tile. With `work`, only
/// the kernel's tiles it lists run (ops/locality.rs proved that the others pass nothing).
pub(crate) fn filter(
    gpu: &Gpu,
    plan: &Plan,
    rows: (&Operands<'_, '_>, Range<usize>),
    cols: (&Operands<'_, '_>, Range<usize>),
    at: PairAt,
    into: FilterInto<'_, '_>,
    work: Option<&PairWork<'_>>,
) -> Result<()> {
    let kind = rows.0.kind;
    debug_assert_eq!(kind, cols.0.kind);
    let (ra, rb) = (rows.1, cols.1);
    let (a, b) = (rows.0.side(ra.start, ra.end), cols.0.side(rb.start, rb.end));
    debug_assert_eq!(a.ld, b.ld);
    debug_assert_eq!(a.back.is_some(), kind.scaled());
    debug_assert!(into.row_out.floor.is_some() && into.row_out.count.len() >= a.n);
    if a.n == 0 || b.n == 0 {
        return Ok(());
    }
    let (ldw, kw) = kind.words(plan);
    debug_assert_eq!(a.ld, ldw * kind.per_word());
    let (ldw, kw) = (ldw as i32, kw as i32);
    // Persistent blocks, two per multiprocessor (the kernel's launch bounds and shared memory),
    // each taking tiles in turn.
    let tiles = a.n.div_ceil(abi::PF_BM) * b.n.div_ceil(abi::PF_BN);
    let cfg = LaunchConfig {
        grid_dim: ((2 * gpu.sms).min(tiles) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: SHARED_BYTES as u32,
    };
    let (na, nb, key) = (a.n as i32, b.n as i32, plan.key as i32);
    let scalars = IntoScalars::of(&into, (at.row_off, at.col_off), at.exclude_self);
    let mut l = gpu
        .stream
        .launch_builder(kind.kernel(gpu, into.cols.is_none())?);
    a.rows.arg(&mut l);
    l.arg(&na);
    b.rows.arg(&mut l);
    l.arg(&nb)
        .arg(&ldw)
        .arg(&kw)
        .arg(&key)
        .arg(&a.sqnorm)
        .arg(&b.sqnorm);
    // Unscaled kinds never read the factors: the norms stand in as valid pointers.
    l.arg(a.back.as_ref().unwrap_or(&a.sqnorm))
        .arg(b.back.as_ref().unwrap_or(&b.sqnorm));
    push_into(&mut l, &scalars, into)?;
    let null: u64 = 0;
    match work {
        Some(w) => l.arg(&w.list).arg(&w.len),
        None => l.arg(&null).arg(&null),
    };
    // SAFETY: matches pair_filter_* in kernels/select/pair_filter.cu: a and b hold n rows of
    // ld values (ldw words, the first kw summed), 16-byte aligned (kind_for); the norms and
    // the factors n each; the lists rows × kp and cols × kp; the buffers (count, floor: a.n
    // or b.n; val, idx: × cap). The kernel was given SHARED_BYTES of dynamic shared memory at
    // load (kernels.rs). A work list holds at most `tiles` entries, each below `tiles`, with
    // its length on the device (locality::plan_pair, for these very rows and columns).
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("pair_filter"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numerics::plan::plan_of;
    use voisin::data::ElemType;
    use voisin::Metric;

    /// Tensor-core plans of dot-product keys are fused, in every storage and dimension, up to
    /// one chunk (TF32 plans on scaled f16 rows); fp32 and SIMT metrics are not.
    #[test]
    fn which_plans_are_fused() {
        let kind =
            |m: &Metric, d: usize, p: Precision, elem: ElemType| kind_for(&plan_of(m, d, p, elem));
        use ElemType::*;
        let (e, ip, cos, cb) = (
            Metric::Euclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Cityblock,
        );
        for d in [1, 3, 64, 127, 128, 1025, 2048] {
            for m in [&e, &ip, &cos] {
                assert_eq!(
                    kind(m, d, Precision::Tf32, F32),
                    Some(PairKind::F16Scaled),
                    "{m} {d}"
                );
            }
        }
        // fp16x3: split rows at any dimension (the bound counts the whole row's sums).
        for d in [1, 3, 127, 128, 1025, 2049, 15876] {
            assert_eq!(
                kind(&e, d, Precision::Fp16x3, F32),
                Some(PairKind::F16Split),
                "{d}"
            );
        }
        assert_eq!(kind(&e, 128, Precision::Fp32, F32), None);
        assert_eq!(kind(&cb, 128, Precision::Tf32, F32), None);
        assert_eq!(kind(&e, 2049, Precision::Tf32, F32), None);
        for d in [1, 3, 127, 1025] {
            assert_eq!(
                kind(&e, d, Precision::Fp16, F16),
                Some(PairKind::F16),
                "{d}"
            );
            assert_eq!(
                kind(&ip, d, Precision::Bf16, Bf16),
                Some(PairKind::Bf16),
                "{d}"
            );
            assert_eq!(kind(&e, d, Precision::Int8, U8), Some(PairKind::S8), "{d}");
        }
        assert_eq!(kind(&e, 2049, Precision::Fp16, F16), None);
        assert_eq!(kind(&e, 4096, Precision::Int8, U8), None);
        assert_eq!(kind(&e, 16, Precision::Fp32, U8), None);
    }
}
