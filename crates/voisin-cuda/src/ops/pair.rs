//! The k-NN graph's fused tile pair (kernels/select/pair_filter.cu): the dot products of one
//! tile's rows against another's on tensor cores, filtered in registers against the rows' and
//! the columns' running lists; what passes goes to the same buffers as the tile filter's
//! ([`survivors::tile_filter`]), merged the same way. The distance tile is never written.
//!
//! Owns which plans can be fused ([`kind_for`]) and the launch; when and on which pairs the
//! graph uses it is search/graph.rs's.

use cudarc::driver::{CudaFunction, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Plan, TileKey, TileKind, TileRows, K_CHUNK};
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
            PairKind::F16 | PairKind::Bf16 => 2,
            PairKind::S8 => 4,
        }
    }

    /// The words from one of `plan`'s tile rows to the next and the words the kernel sums of
    /// each (TF32: one value a word, the row's d values; f16/bf16: two, int8: four, the whole
    /// zero-padded row).
    fn words(self, plan: &Plan) -> (usize, usize) {
        let ldw = plan.tile_rows().stride(plan.storage, plan.dim) / self.per_word();
        (
            ldw,
            if self == PairKind::Tf32 {
                plan.dim
            } else {
                ldw
            },
        )
    }

    /// The kernel on `gpu`.
    pub fn kernel(self, gpu: &Gpu) -> &CudaFunction {
        match self {
            PairKind::Tf32 => &gpu.k.pair_filter_tf32,
            PairKind::F16 => &gpu.k.pair_filter_f16,
            PairKind::Bf16 => &gpu.k.pair_filter_bf16,
            PairKind::S8 => &gpu.k.pair_filter_s8,
        }
    }
}

/// How `plan`'s tiles can be fused, or None when they must go through a written tile: only
/// GEMM tiles on tensor cores (TF32 on f32 rows, f16/bf16 on the stored rows, int8 on prepared
/// int8 rows) with a key formed from the dot product, rows of whole 16-byte groups, and at most
/// one accumulation chunk (the plan's bound counts chunked sums beyond [`K_CHUNK`]; the kernel
/// sums the whole row at once).
pub(crate) fn kind_for(plan: &Plan) -> Option<PairKind> {
    if plan.tile != TileKind::Gemm || plan.key == TileKey::Direct {
        return None;
    }
    let kind = match (plan.tile_rows(), plan.precision) {
        (TileRows::F32, Precision::Tf32) => PairKind::Tf32,
        (TileRows::Stored, Precision::Fp16) => PairKind::F16,
        (TileRows::Stored, Precision::Bf16) => PairKind::Bf16,
        (TileRows::I8, Precision::Int8) => PairKind::S8,
        _ => return None,
    };
    let (ldw, kw) = kind.words(plan);
    (ldw.is_multiple_of(4) && kw * kind.per_word() <= K_CHUNK).then_some(kind)
}

/// Which pair of tiles, as [`survivors::tile_filter`]'s `TileAt` says: the first items of the
/// row and column blocks, and whether an item's pair with itself is skipped.
#[derive(Clone, Copy)]
pub(crate) struct PairAt {
    pub row_off: u32,
    pub col_off: u32,
    pub exclude_self: bool,
}

/// Appends every pair of `a` × `b` whose key is at most its row's list's largest to the row's
/// buffer and, with `into.cols`, at most its column's largest to the column's buffer, as
/// [`survivors::tile_filter`] does on a written tile. `kind` is [`kind_for`]'s for the plan.
pub(crate) fn filter(
    gpu: &Gpu,
    plan: &Plan,
    kind: PairKind,
    (a, b): (&Block<'_>, &Block<'_>),
    at: PairAt,
    into: FilterInto<'_, '_>,
) -> Result<()> {
    debug_assert_eq!(a.ld, b.ld);
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
    let mut l = gpu.stream.launch_builder(kind.kernel(gpu));
    a.rows.arg(&mut l);
    l.arg(&na);
    b.rows.arg(&mut l);
    l.arg(&nb)
        .arg(&ldw)
        .arg(&kw)
        .arg(&key)
        .arg(&a.sqnorm)
        .arg(&b.sqnorm);
    push_into(&mut l, &scalars, into)?;
    // SAFETY: matches pair_filter_* in kernels/select/pair_filter.cu: a and b hold n rows of
    // ld values (ldw words, the first kw summed), 16-byte aligned (kind_for); the norms n
    // each; the lists rows × kp and cols × kp; the buffers (count, floor: a.n or b.n; val, idx:
    // × cap). The kernel was given SHARED_BYTES of dynamic shared memory at load (kernels.rs).
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("pair_filter"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::data::ElemType;
    use voisin::{Metric, VectorSet};

    /// Tensor-core plans of dot-product keys are fused, in every storage, up to one chunk;
    /// fp32, SIMT metrics and f32 rows of a dimension not a multiple of 4 are not.
    #[test]
    fn which_plans_are_fused() {
        let kind = |m: &Metric, d: usize, p: Precision, elem: ElemType| {
            let b = VectorSet::from_f32(1, d, vec![0.5; d]).unwrap();
            let plan = Plan::new(m, &b).with_arithmetic(p, elem, elem).unwrap();
            kind_for(&plan)
        };
        use ElemType::*;
        let (e, ip, cos, cb) = (
            Metric::Euclidean,
            Metric::InnerProduct,
            Metric::Cosine,
            Metric::Cityblock,
        );
        assert_eq!(kind(&e, 128, Precision::Tf32, F32), Some(PairKind::Tf32));
        assert_eq!(kind(&cos, 64, Precision::Tf32, F32), Some(PairKind::Tf32));
        assert_eq!(kind(&e, 127, Precision::Tf32, F32), None);
        assert_eq!(kind(&e, 128, Precision::Fp32, F32), None);
        assert_eq!(kind(&cb, 128, Precision::Tf32, F32), None);
        assert_eq!(kind(&e, 4096, Precision::Tf32, F32), None);
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
