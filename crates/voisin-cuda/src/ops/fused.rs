//! Fused distance + selection (docs/design/fused-selection.md): the dot products of a query
//! block against the base are computed in registers and filtered against each query's threshold
//! in the same kernel, so the distance tile never touches device memory; the few survivors are
//! merged into the running lists. Two kernels do it: fused_filter
//! (kernels/select/fused_filter.cu) for small batches and lists on prepared f32 rows, and the
//! graph's fused tile pair without its columns' side (ops/pair.rs) for larger batches on tensor
//! cores and the storages' own, with lists up to k = 1000's ([`FusedKernel`]).
//!
//! Owns the choice of whether and how a pass is fused ([`Fusion`], [`plan_for`], the pairs'
//! chunks) and fused_filter's launcher; the tiling of the search and the proof belong to
//! search/knn.rs. The threshold comes from an ordinary tile pass over a sample spread over the
//! base, whose lists then keep their largest key alone, so the lists keep block select's
//! contract: every item left out has an approximate key at least the largest one kept.

use cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Plan, TileKind, K_CHUNK};
use crate::ops::pair::{self, PairKind};
use crate::ops::survivors::{self, Survivors, MERGE_SLOTS};
use crate::ops::tile::Block;
use crate::options::{Fusion, Precision};
use crate::runtime::abi;
use crate::runtime::context::{dev, Gpu};

/// Largest list fused_filter serves (its list and buffer share FZ_MERGE slots, and its buffer
/// takes thousands of pairs a query). The fused pairs serve lists up to
/// [`survivors::PAIRS_MAX_KP`].
pub(crate) const MAX_KP: usize = 256;

/// How one fused pass runs: a sample of `first` base items spread over the base goes through
/// ordinary tiles, each list's threshold becomes the key at `rank` of its sorted list there, then
/// the whole base goes through `kernel` with `cap` buffer slots per query.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FusedPlan {
    pub first: usize,
    pub cap: usize,
    pub kernel: FusedKernel,
    pub rank: usize,
}

/// The kernel that filters the base once the sample has set the thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FusedKernel {
    /// fused_filter (kernels/select/fused_filter.cu) on prepared f32 rows in fp32 or TF32:
    /// the whole base in one launch, one merge, queries whose buffer overflowed
    /// redone with ordinary tiles.
    Filter,
    /// The graph's fused tile pair (ops/pair.rs) without its columns' side, on the tensor cores
    /// of the kind: the base in chunks, each merged before the next one reads the
    /// thresholds ([`FusedPlan::chunk`]), an overflowed list cut to what it can prove.
    Pair(PairKind),
}

/// Base items per fused tile (kernels/select/fused_filter.cu); the threshold pass's sample is a
/// whole number of them.
const GRANULE: usize = abi::FZ_BN;

/// Most base items the threshold pass of a [`FusedKernel::Pair`] pass samples: one of the
/// k-NN's ordinary base tiles (search/knn.rs).
const PAIR_FIRST: usize = 16384;

/// Most queries of a pass that `Fusion::Auto` fuses with [`FusedKernel::Filter`]: small
/// batches against a large resident base, where the unfused pass is dozens of tiles too thin
/// to fill the GPU. H100, 1M × 128, k = 10 (docs/design/fused-selection.md): 100 queries
/// 2.86 ms fused against 3.83 ms (fp32), 1.81 against 3.15 ms (TF32); 300 queries 6.08 / 6.25
/// and 3.52 / 4.26 ms; 1,000 queries 13.9 / 13.7 and 7.4 / 7.7 ms; 10,000 queries lose (0.164
/// / 0.146 s fp32). Larger batches on tensor cores take [`FusedKernel::Pair`].
pub(crate) const AUTO_FUSED_QUERIES: usize = 512;

/// The fused plan for a pass of `nq` queries with lists of `kp` over `nb` base items, or None
/// when it must not (or need not) be fused.
pub(crate) fn plan_for(
    plan: &Plan,
    fusion: Fusion,
    kp: usize,
    (nq, nb): (usize, usize),
) -> Option<FusedPlan> {
    if fusion == Fusion::Off || plan.tile != TileKind::Gemm {
        return None;
    }
    // fused_filter reads prepared f32 rows (tiles on stored half rows or int8 rows are not
    // its) and sums the whole inner dimension in one accumulator, where the plan's bound
    // assumes tile.rs's chunked sums beyond K_CHUNK.
    let f32_rows = matches!(
        plan.precision,
        Precision::Fp32 | Precision::Tf32 | Precision::Fp16x3
    );
    let filter = kp <= MAX_KP
        && f32_rows
        && plan.dim <= K_CHUNK
        && (fusion == Fusion::On || nq <= AUTO_FUSED_QUERIES);
    if filter {
        let cap = MERGE_SLOTS - kp;
        // The threshold is the kp-th smallest key of a sample of `first` items, so about
        // kp · nb / first items pass it over the whole base: `first` is chosen to expect at
        // most half the buffer.
        let first = (2 * kp * nb).div_ceil(GRANULE * cap).max(1) * GRANULE;
        // Fusion pays only when the sample is a small part of the base.
        let kernel = FusedKernel::Filter;
        let rank = kp;
        return (nb >= 4 * first).then_some(FusedPlan {
            first,
            cap,
            kernel,
            rank,
        });
    }
    let kind = pair::kind_for(plan)?;
    let cap = survivors::pairs_cap(kp)?;
    // An eighth of a small base (the tests' sets), a base tile of a large one, and at least
    // two lists' worth of items.
    let first = (nb / 8 / GRANULE * GRANULE).clamp((2 * kp).next_multiple_of(GRANULE), PAIR_FIRST);
    let kernel = FusedKernel::Pair(kind);
    let rank = seed_rank(kp, first, nb);
    (nb >= 4 * first).then_some(FusedPlan {
        first,
        cap,
        kernel,
        rank,
    })
}

/// Fewest sample items under a long list's seeded threshold ([`seed_rank`]).
const SEED_RANK_MIN: usize = 16;

/// The rank in a sample of `first` items spread over `nb` whose key seeds each list of `kp`:
/// the kp-th, or for lists longer than the graph's filters serve (k = 1000's 2048) a rank that
/// expects half a list more than the list under it. There the kp-th key of the sample lets
/// about kp · nb / first items through at first, and the lists' thresholds, each list's kp-th
/// key among what it has seen, let kp · ln(nb / first) more through as they tighten: ~10,700
/// pairs a query at k = 1000 over 1M items, appended and merged in 21 chunks (H200, session
/// 22). The j-th smallest key of the sample has about j · nb / first base items under it on any
/// data (a rank, not a distance), give or take a 1/√j part: j = 1.5 · kp · first / nb expects
/// 1.5 kp of them, and the lists, seeded there, only tighten once full. A list that ends with
/// fewer than its kp entries keeps its threshold's slots empty and proves on what it holds
/// (fewer than k entries: the query is widened, still exact).
fn seed_rank(kp: usize, first: usize, nb: usize) -> usize {
    if kp <= survivors::FILTER_MAX_KP {
        return kp;
    }
    (3 * kp * first)
        .div_ceil(2 * nb.max(1))
        .clamp(SEED_RANK_MIN, kp)
}

/// Most bytes of base rows in one chunk of a [`FusedKernel::Pair`] pass: well inside the L2
/// cache (50 MB on an H100 or H200). The pair kernel takes its tiles a row block at a time, so
/// each block of 128 queries reads the whole chunk; from L2, not device memory, where the chunk
/// stays there.
const PAIR_CHUNK_BYTES: usize = 24 << 20;

impl FusedPlan {
    /// The base items a [`FusedKernel::Pair`] pass filters next once its lists have seen
    /// `seen` items (the sample counted), of rows `row_bytes` apart. Each list's threshold is at
    /// most its kp-th key among what it has seen and at most the seeded one, the key at `rank`
    /// of the sample, so a chunk of c items offers a list at most about c · min(kp / seen, rank
    /// / first) survivors: c is chosen to expect at most a quarter of the buffer, and at most
    /// [`PAIR_CHUNK_BYTES`] of rows, in whole tiles of the kernel.
    pub fn chunk(&self, kp: usize, seen: usize, row_bytes: usize) -> usize {
        let by_list = seen * self.cap / (4 * kp.max(1));
        let by_seed = self.first * self.cap / (4 * self.rank.max(1));
        let c = by_list
            .max(by_seed)
            .min(PAIR_CHUNK_BYTES / row_bytes.max(1));
        c.max(abi::PF_BN) / abi::PF_BN * abi::PF_BN
    }
}

/// Each query's threshold: `values[r * stride]` for query r.
#[derive(Clone, Copy)]
pub(crate) struct Thresholds<'a> {
    pub values: &'a CudaView<'a, f32>,
    pub stride: usize,
}

/// Appends to `out` every pair of `q` × `b` whose key is at most the query's threshold,
/// counting per query (the first `q.n` counts, zeroed by the caller); `b`'s items are numbered
/// from `col_off`.
pub(crate) fn filter(
    gpu: &Gpu,
    plan: &Plan,
    q: &Block<'_>,
    b: &Block<'_>,
    col_off: u32,
    thr: Thresholds<'_>,
    out: &mut Survivors,
) -> Result<()> {
    // Persistent blocks, as many as run at once (the kernels' launch bounds: one block per SM
    // for fp32, two for TF32); each loops over the tile pairs.
    let (kernel, per_sm) = match plan.precision {
        // fp16x3's split rows are the fused tile pair's; fp32 is inside its bound.
        Precision::Fp32 | Precision::Fp16x3 => (gpu.k.fused_filter_fp32()?, 1),
        Precision::Tf32 => (gpu.k.fused_filter_tf32()?, 2),
        p => unreachable!("{p} tiles are not fused (plan_for)"),
    };
    let pairs = b.n.div_ceil(128) * q.n.div_ceil(128);
    let cfg = LaunchConfig {
        grid_dim: ((gpu.sms * per_sm).min(pairs) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (nq, nb, d, mode) = (q.n as i32, b.n as i32, plan.dim as i32, plan.key as i32);
    let (stride, cap) = (thr.stride as i32, out.cap as i32);
    let mut count = out.count.slice_mut(..q.n);
    let mut buf_val = out.val.slice_mut(..);
    let mut buf_idx = out.idx.slice_mut(..);
    let mut l = gpu.stream.launch_builder(kernel);
    l.arg(q.rows.f32())
        .arg(&nq)
        .arg(b.rows.f32())
        .arg(&nb)
        .arg(&d)
        .arg(&mode)
        .arg(&q.sqnorm)
        .arg(&b.sqnorm)
        .arg(&col_off)
        .arg(thr.values)
        .arg(&stride)
        .arg(&mut count)
        .arg(&mut buf_val)
        .arg(&mut buf_idx)
        .arg(&cap);
    // SAFETY: matches fused_filter_* in kernels/select/fused_filter.cu; q and b hold n × dim rows,
    // thr holds (q.n − 1) · thr_stride + 1 values, count q.n, the buffers q.n × cap.
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("fused_filter"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Precision;
    use voisin::{Metric, VectorSet};

    /// A plan with the engine's choices, as the engine hands them to a pass.
    trait WithEngine {
        fn with_engine(self, precision: Precision, fusion: Fusion) -> (Plan, Fusion);
    }

    impl WithEngine for Plan {
        fn with_engine(self, precision: Precision, fusion: Fusion) -> (Plan, Fusion) {
            (self.with_precision(precision), fusion)
        }
    }

    /// [`super::plan_for`] of such a plan, for a pass of 10,000 queries.
    fn plan_for(p: &(Plan, Fusion), kp: usize, nb: usize) -> Option<FusedPlan> {
        super::plan_for(&p.0, p.1, kp, (10_000, nb))
    }

    #[test]
    fn fusion_names() {
        assert_eq!("ON".parse::<Fusion>().unwrap(), Fusion::On);
        assert!("maybe".parse::<Fusion>().is_err());
    }

    /// Only GEMM metrics with small lists over a large base are fused, with a buffer that
    /// expects at most half its capacity.
    #[test]
    fn fused_plans() {
        let b = VectorSet::from_f32(1, 4, vec![0.0; 4]).unwrap();
        let plan = |m: &Metric, p: Precision, f: Fusion| Plan::new(m, &b).with_engine(p, f);
        let tf = plan(&Metric::Euclidean, Precision::Tf32, Fusion::On);
        let fp = plan(&Metric::Euclidean, Precision::Fp32, Fusion::Auto);
        let on = plan(&Metric::Cosine, Precision::Fp32, Fusion::On);
        let simt = plan(&Metric::Cityblock, Precision::Tf32, Fusion::On);
        let nb = 1_000_000;
        for kp in [16, 32, 256] {
            let p = plan_for(&tf, kp, nb).unwrap();
            assert!(kp * nb / p.first <= p.cap / 2, "{p:?}");
            assert!(
                p.first <= nb / 4 && p.first.is_multiple_of(GRANULE),
                "{p:?}"
            );
        }
        assert!(plan_for(&fp, 32, nb).is_none());
        assert!(plan_for(&on, 32, nb).is_some());
        assert!(plan_for(&simt, 32, nb).is_none());
        // Longer lists go to the fused pairs (k = 1000's 2048), not beyond them.
        let long = plan_for(&tf, 2048, nb).unwrap();
        assert_eq!(
            (long.kernel, long.cap),
            (FusedKernel::Pair(PairKind::F16Scaled), 2048)
        );
        // Their thresholds are seeded at a rank that expects 1.5 kp items under it: 51 of
        // the 16,384 items of the sample, and chunks of 164k items (at most the L2's share).
        assert_eq!((long.first, long.rank), (PAIR_FIRST, 51));
        assert_eq!(long.chunk(2048, PAIR_FIRST, 32), 164_480);
        assert_eq!(long.chunk(2048, PAIR_FIRST, 256), PAIR_CHUNK_BYTES / 256);
        assert_eq!(plan_for(&tf, 256, nb).unwrap().rank, 256);
        assert_eq!(plan_for(&tf, 512, 10_000_000).unwrap().rank, SEED_RANK_MIN);
        assert!(plan_for(&tf, 4096, nb).is_none());
        // Small bases are fused too when asked (the tests rely on it), not when too small.
        assert!(plan_for(&on, 16, 1000).is_some());
        assert!(plan_for(&on, 16, 300).is_none());
        // Auto fuses small batches only.
        let at = |nq| super::plan_for(&fp.0, fp.1, 32, (nq, nb));
        assert!(at(AUTO_FUSED_QUERIES).is_some() && at(1).is_some());
        assert!(at(AUTO_FUSED_QUERIES + 1).is_none());
    }

    /// Large batches on tensor cores, and any batch on the storages' own, take the fused tile
    /// pair unless fusion is off; its chunks grow with what the lists have seen and expect a
    /// quarter of the buffer.
    #[test]
    fn pair_plans() {
        use crate::numerics::plan::plan_of;
        use voisin::data::ElemType;
        let e = Metric::Euclidean;
        let tf = plan_of(&e, 128, Precision::Tf32, ElemType::F32);
        let half = plan_of(&e, 127, Precision::Fp16, ElemType::F16);
        let int8 = plan_of(&e, 128, Precision::Int8, ElemType::U8);
        let fp = plan_of(&e, 128, Precision::Fp32, ElemType::F32);
        let nb = 1_000_000;
        let pair = |p: &Plan, f: Fusion, kp: usize, nq: usize, nb: usize| {
            super::plan_for(p, f, kp, (nq, nb))
        };
        let p = pair(&tf, Fusion::Auto, 16, 10_000, nb).unwrap();
        assert_eq!(p.kernel, FusedKernel::Pair(PairKind::F16Scaled));
        assert_eq!((p.first, p.cap), (PAIR_FIRST, 256));
        assert_eq!(p.chunk(16, PAIR_FIRST, 256), 4 * PAIR_FIRST);
        // At most PAIR_CHUNK_BYTES of rows; whole kernel tiles, at least one.
        assert_eq!(p.chunk(16, 400_000, 256), PAIR_CHUNK_BYTES / 256);
        assert_eq!(p.chunk(16, 400_000, 1 << 20), abi::PF_BN);
        // Never below what the seeded threshold alone lets through.
        assert_eq!(p.chunk(16, 10, 256), 4 * PAIR_FIRST);
        assert_eq!(p.chunk(16, 1000, 256) % abi::PF_BN, 0);
        // Small TF32 batches keep fused_filter; so does TF32 when fusion is on.
        let small = pair(&tf, Fusion::Auto, 16, AUTO_FUSED_QUERIES, nb).unwrap();
        assert_eq!(small.kernel, FusedKernel::Filter);
        let on = pair(&tf, Fusion::On, 16, 10_000, nb).unwrap();
        assert_eq!(on.kernel, FusedKernel::Filter);
        for (plan, kind) in [(&half, PairKind::F16), (&int8, PairKind::S8)] {
            for nq in [1, 10_000] {
                let p = pair(plan, Fusion::Auto, 256, nq, nb).unwrap();
                assert_eq!(p.kernel, FusedKernel::Pair(kind));
                assert_eq!(p.cap, 1024);
                assert!(pair(plan, Fusion::Off, 16, nq, nb).is_none());
                // Longer lists: the merge's slots beside the list.
                let long = pair(plan, Fusion::Auto, 512, nq, nb).unwrap();
                assert_eq!((long.first, long.cap), (PAIR_FIRST, 3584));
                assert_eq!(pair(plan, Fusion::Auto, 2048, nq, nb).unwrap().cap, 2048);
                assert!(pair(plan, Fusion::Auto, 4096, nq, nb).is_none());
            }
            // Small bases: an eighth of them first, at least two lists' worth, and only where
            // three quarters are left to fuse.
            let p = pair(plan, Fusion::Auto, 16, 700, 20_000).unwrap();
            assert_eq!(p.first, 2432);
            assert_eq!(
                pair(plan, Fusion::Auto, 100, 700, 900).map(|p| p.first),
                None
            );
            assert_eq!(
                pair(plan, Fusion::Auto, 16, 700, 512).map(|p| p.first),
                Some(128)
            );
        }
        assert!(pair(&fp, Fusion::Auto, 16, 10_000, nb).is_none());
    }
}
