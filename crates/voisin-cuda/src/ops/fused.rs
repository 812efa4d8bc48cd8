//! Fused distance + selection (docs/design/fused-selection.md): the dot products of a query
//! block against the base are computed in registers and filtered against each query's threshold
//! in the same kernel, so the distance tile never touches device memory; the few survivors are
//! merged into the running lists. Two kernels do it: fused_filter
//! (kernels/select/fused_filter.cu) for small batches and lists on prepared f32 rows, launched
//! here, and the graph's fused tile pair without its columns' side (ops/pair.rs) for larger
//! batches on tensor cores and the storages' own, with lists up to k = 1000's.
//!
//! Owns fused_filter's launcher and its limit ([`MAX_KP`]); whether and how a pass is fused
//! (the kernel, its sample, rank and chunks) is the route's (search/route.rs), the tiling of
//! the search and the proof search/knn.rs's. The threshold comes from an ordinary tile pass
//! over a sample spread over the base, whose lists then keep their largest key alone, so the
//! lists keep block select's contract: every item left out has an approximate key at least
//! the largest one kept.

use cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::Numerics;
use crate::ops::survivors::Survivors;
use crate::ops::tile::Block;
use crate::runtime::context::{dev, Gpu};

/// Largest list fused_filter serves (its list and buffer share FZ_MERGE slots, and its buffer
/// takes thousands of pairs a query). The fused pairs serve lists up to
/// [`survivors::PAIRS_MAX_KP`].
pub(crate) const MAX_KP: usize = 256;

/// The fused_filter kernel that runs (the route's choice for the plan's arithmetic).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FilterKernel {
    /// fp32 products (what an fp16x3 plan's bound covers too).
    Fp32,
    /// TF32 products.
    Tf32,
}

/// Each query's threshold: `values[r * stride]` for query r.
#[derive(Clone, Copy)]
pub(crate) struct Thresholds<'a> {
    pub values: &'a CudaView<'a, f32>,
    pub stride: usize,
}

/// Appends to `out` every pair of `q` × `b` whose key is at most the query's threshold,
/// counting per query (the first `q.n` counts, zeroed by the caller); `b` is a whole base (its
/// items numbered from 0: fused_filter takes a base at once).
pub(crate) fn filter(
    gpu: &Gpu,
    kernel: FilterKernel,
    plan: &Numerics,
    q: &Block<'_>,
    b: &Block<'_>,
    thr: Thresholds<'_>,
    out: &mut Survivors,
) -> Result<()> {
    // Persistent blocks, as many as run at once (the kernels' launch bounds: one block per SM
    // for fp32, two for TF32); each loops over the tile pairs.
    let (kernel, per_sm) = match kernel {
        FilterKernel::Fp32 => (gpu.k.fused_filter_fp32()?, 1),
        FilterKernel::Tf32 => (gpu.k.fused_filter_tf32()?, 2),
    };
    let pairs = b.n.div_ceil(128) * q.n.div_ceil(128);
    let cfg = LaunchConfig {
        grid_dim: ((gpu.sms * per_sm).min(pairs) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (nq, nb, d, mode) = (q.n as i32, b.n as i32, plan.dim as i32, plan.key as i32);
    let (stride, cap, col_off) = (thr.stride as i32, out.cap as i32, 0u32);
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
