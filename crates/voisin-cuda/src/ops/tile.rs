//! One distance tile on the device: rows of one block against rows of another, row-major with a
//! given row stride. GEMM metrics get dot products from cuBLAS (sgemm, GemmEx on TF32 tensor
//! cores under `Precision::Tf32`, or GemmEx on the stored f16/bf16 rows with fp32 accumulation
//! under `Precision::Fp16`/`Bf16`; the key is formed later, inside the selection and range
//! kernels); the others get keys from kernels/distance/vector_tile.cu.
//!
//! Owns the cuBLAS call and its column-major bookkeeping; knows nothing about selection.

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::{result as blas, Gemm, GemmConfig};
use cudarc::driver::{CudaStream, DeviceRepr};
use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Plan, Storage, TileKind, K_CHUNK};
use crate::ops::device_set::RowsView;
use crate::options::Precision;
use crate::runtime::context::{dev, Gpu};

/// A block of the tiles' rows on the device (prepared f32 rows, or the stored half rows).
pub(crate) struct Block<'a> {
    pub rows: RowsView<'a>,
    pub sqnorm: CudaView<'a, f32>,
    pub n: usize,
}

/// Writes out[r * ld + c] = value(q_r, b_c) for r < q.n, c < b.n.
pub(crate) fn compute(
    gpu: &Gpu,
    plan: &Plan,
    q: &Block<'_>,
    b: &Block<'_>,
    out: &mut CudaViewMut<'_, f32>,
    ld: usize,
) -> Result<()> {
    let d = plan.dim;
    match plan.tile {
        TileKind::Gemm => {
            debug_assert!(b.rows.len() >= b.n * d && q.rows.len() >= q.n * d);
            debug_assert!(out.len() >= (q.n.saturating_sub(1)) * ld + b.n);
            // Chunks of the inner dimension, the later ones added into the tile: the error
            // bound of numerics/plan.rs (`accumulation_length`) counts on this order.
            for (c, k0) in (0..d).step_by(K_CHUNK).enumerate() {
                let len = K_CHUNK.min(d - k0);
                // Row-major Q (q.n × d) and B (b.n × d) are column-major d × n matrices. The
                // row-major tile D = Q Bᵀ is the column-major (b.n × q.n) matrix Bᵀ Q; a chunk
                // starts k0 values into each row and keeps the row stride d.
                let cfg = GemmConfig {
                    transa: cublasOperation_t::CUBLAS_OP_T,
                    transb: cublasOperation_t::CUBLAS_OP_N,
                    m: b.n as i32,
                    n: q.n as i32,
                    k: len as i32,
                    alpha: 1.0f32,
                    lda: d as i32,
                    ldb: d as i32,
                    beta: if c == 0 { 0.0 } else { 1.0 },
                    ldc: ld as i32,
                };
                let (bv, qv) = (b.rows.from(k0), q.rows.from(k0));
                // SAFETY: from k0, the views hold (n − 1)·d + len values of each side and the
                // output q.n × ld (asserted above).
                match (&bv, &qv, plan.precision) {
                    (RowsView::F32(bv), RowsView::F32(qv), Precision::Fp32) => {
                        unsafe { gpu.blas.gemm(cfg, bv, qv, out) }.map_err(dev("sgemm"))?
                    }
                    (RowsView::F32(bv), RowsView::F32(qv), Precision::Tf32) => {
                        let tf32 = cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32;
                        gemm_ex(gpu, &cfg, (bv, qv, cudaDataType::CUDA_R_32F), tf32, out)?
                    }
                    (RowsView::Half(bv), RowsView::Half(qv), _) => {
                        let t = match plan.storage {
                            Storage::F16 => cudaDataType::CUDA_R_16F,
                            Storage::Bf16 => cudaDataType::CUDA_R_16BF,
                            Storage::F32 => unreachable!("half rows on half storage"),
                        };
                        let fp32 = cublasComputeType_t::CUBLAS_COMPUTE_32F;
                        gemm_ex(gpu, &cfg, (bv, qv, t), fp32, out)?
                    }
                    _ => unreachable!("tile rows in the plan's storage and precision"),
                }
            }
            Ok(())
        }
        TileKind::Simt(kind, p) => {
            let cfg = LaunchConfig {
                grid_dim: (b.n.div_ceil(64) as u32, q.n.div_ceil(64) as u32, 1),
                block_dim: (16, 16, 1),
                shared_mem_bytes: 0,
            };
            let (nq, nb, dim, ld) = (q.n as i32, b.n as i32, d as i32, ld as i64);
            let mut l = gpu.stream.launch_builder(&gpu.k.vector_tile);
            l.arg(q.rows.f32())
                .arg(&nq)
                .arg(b.rows.f32())
                .arg(&nb)
                .arg(&dim)
                .arg(&kind)
                .arg(&p)
                .arg(out)
                .arg(&ld);
            // SAFETY: argument list matches kernels/distance/vector_tile.cu; sizes as above.
            unsafe { l.launch(cfg) }
                .map(|_| ())
                .map_err(dev("vector_tile"))
        }
    }
}

/// The product of `compute`'s sgemm call through GemmEx: inputs of type `ab.2` (f32 for TF32,
/// f16/bf16 for the stored half rows), fp32 output, `compute` accumulation. The errors are in
/// the plan's bound (numerics/plan.rs `Plan::with_precision`, `Plan::with_arithmetic`).
fn gemm_ex<T: DeviceRepr>(
    gpu: &Gpu,
    cfg: &GemmConfig<f32>,
    ab: (&CudaView<'_, T>, &CudaView<'_, T>, cudaDataType),
    compute: cublasComputeType_t,
    c: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    let stream: &CudaStream = &gpu.stream;
    let (a, b, t) = ab;
    let (pa, _ra) = a.device_ptr(stream);
    let (pb, _rb) = b.device_ptr(stream);
    let (pc, _rc) = c.device_ptr_mut(stream);
    // SAFETY: the same shapes as the sgemm call in `compute` (checked there); the handle is
    // bound to `stream`, and the pointers' guards live until the call is queued.
    unsafe {
        blas::gemm_ex(
            *gpu.blas.handle(),
            cfg.transa,
            cfg.transb,
            cfg.m,
            cfg.n,
            cfg.k,
            (&cfg.alpha) as *const f32 as *const _,
            pa as *const _,
            t,
            cfg.lda,
            pb as *const _,
            t,
            cfg.ldb,
            (&cfg.beta) as *const f32 as *const _,
            pc as *mut _,
            cudaDataType::CUDA_R_32F,
            cfg.ldc,
            compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(dev("GemmEx"))
}
