//! One distance tile on the device: rows of one block against rows of another, row-major with a
//! given row stride. GEMM metrics get dot products from cuBLAS sgemm (the key is formed later,
//! inside the selection and range kernels); the others get keys from kernels/vector_tile.cu.
//!
//! Owns the cuBLAS call and its column-major bookkeeping; knows nothing about selection.

use cudarc::cublas::{sys::cublasOperation_t, Gemm, GemmConfig};
use cudarc::driver::{CudaView, CudaViewMut, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::context::{dev, Gpu};
use crate::prepare::{Plan, TileKind};

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
            // Row-major Q (q.n × d) and B (b.n × d) are column-major d × n matrices. The
            // row-major tile D = Q Bᵀ is the column-major (b.n × q.n) matrix Bᵀ Q.
            let cfg = GemmConfig {
                transa: cublasOperation_t::CUBLAS_OP_T,
                transb: cublasOperation_t::CUBLAS_OP_N,
                m: b.n as i32,
                n: q.n as i32,
                k: d as i32,
                alpha: 1.0f32,
                lda: d as i32,
                ldb: d as i32,
                beta: 0.0f32,
                ldc: ld as i32,
            };
            // SAFETY: the views hold b.n × d, q.n × d and q.n × ld values (checked by callers
            // through the view lengths below).
            debug_assert!(b.rows.len() >= b.n * d && q.rows.len() >= q.n * d);
            debug_assert!(out.len() >= (q.n.saturating_sub(1)) * ld + b.n);
            unsafe { gpu.blas.gemm(cfg, &b.rows, &q.rows, out) }.map_err(dev("sgemm"))
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
            // SAFETY: argument list matches kernels/vector_tile.cu; sizes as above.
            unsafe { l.launch(cfg) }
                .map(|_| ())
                .map_err(dev("vector_tile"))
        }
    }
}
