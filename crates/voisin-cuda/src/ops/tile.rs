//! One distance tile on the device: rows of one block against rows of another, row-major with a
//! given row stride. GEMM metrics get dot products from cuBLAS (sgemm, or GemmEx on TF32 tensor
//! cores under `Precision::Tf32`; the key is formed later, inside the selection and range
//! kernels); the others get keys from kernels/distance/vector_tile.cu.
//!
//! Owns the cuBLAS call and its column-major bookkeeping; knows nothing about selection.

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::{result as blas, Gemm, GemmConfig};
use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Plan, TileKind, K_CHUNK};
use crate::options::Precision;
use crate::runtime::context::{dev, Gpu};

/// A block of transformed rows on the device.
pub(crate) struct Block<'a> {
    pub rows: CudaView<'a, f32>,
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
                let (bv, qv) = (b.rows.slice(k0..), q.rows.slice(k0..));
                // SAFETY: from k0, the views hold (n − 1)·d + len values of each side and the
                // output q.n × ld (asserted above).
                match plan.precision {
                    Precision::Fp32 => {
                        unsafe { gpu.blas.gemm(cfg, &bv, &qv, out) }.map_err(dev("sgemm"))?
                    }
                    Precision::Tf32 => tf32_gemm(gpu, cfg, &bv, &qv, out)?,
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
            l.arg(&q.rows)
                .arg(&nq)
                .arg(&b.rows)
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

/// The same product as sgemm on TF32 tensor cores (fp32 in and out, fp32 accumulation); the
/// conversion's error is in the plan's bound (numerics/plan.rs `Plan::with_precision`).
fn tf32_gemm(
    gpu: &Gpu,
    cfg: GemmConfig<f32>,
    a: &CudaView<'_, f32>,
    b: &CudaView<'_, f32>,
    c: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    let stream = &gpu.stream;
    let (pa, _ra) = a.device_ptr(stream);
    let (pb, _rb) = b.device_ptr(stream);
    let (pc, _rc) = c.device_ptr_mut(stream);
    let f32t = cudaDataType::CUDA_R_32F;
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
            f32t,
            cfg.lda,
            pb as *const _,
            f32t,
            cfg.ldb,
            (&cfg.beta) as *const f32 as *const _,
            pc as *mut _,
            f32t,
            cfg.ldc,
            cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(dev("TF32 GemmEx"))
}
