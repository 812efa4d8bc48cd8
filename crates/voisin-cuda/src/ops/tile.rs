//! One distance tile on the device: rows of one block against rows of another, row-major with a
//! given row stride. GEMM metrics get dot products from cuBLAS (sgemm, GemmEx on TF32 tensor
//! cores under `Precision::Tf32`, GemmEx on the stored f16/bf16 rows with fp32 accumulation
//! under `Precision::Fp16`/`Bf16`, or on int8 rows with int32 accumulation under
//! `Precision::Int8`, whose int32 results the tile holds as they are, `TileKey::L2Int`; under
//! TF32 on the scaled f16 copies of ops/scaled.rs where the blocks carry them, the tile then
//! brought back to the rows' scale); the key is formed later, inside the selection and range
//! kernels. The others get keys from kernels/distance/vector_tile.cu.
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

/// A block of the tiles' rows on the device (prepared f32 or int8 rows, the stored half rows,
/// or scaled f16 copies of prepared f32 rows), `ld` values apart.
pub(crate) struct Block<'a> {
    pub rows: RowsView<'a>,
    pub ld: usize,
    pub sqnorm: CudaView<'a, f32>,
    pub n: usize,
    /// Scaled f16 rows (ops/scaled.rs): each row's factor back to its own scale.
    pub back: Option<CudaView<'a, f32>>,
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
            debug_assert_eq!(q.ld, b.ld);
            debug_assert!(b.rows.len() >= b.n * b.ld && q.rows.len() >= q.n * q.ld);
            debug_assert!(out.len() >= (q.n.saturating_sub(1)) * ld + b.n);
            // Row-major Q (q.n × d, rows q.ld apart) and B (b.n × d) are column-major
            // ld × n matrices. The row-major tile D = Q Bᵀ is the column-major (b.n × q.n)
            // matrix Bᵀ Q.
            let shape = |k0: usize, len: usize, beta: f32| GemmConfig {
                transa: cublasOperation_t::CUBLAS_OP_T,
                transb: cublasOperation_t::CUBLAS_OP_N,
                m: b.n as i32,
                n: q.n as i32,
                k: len as i32,
                alpha: 1.0f32,
                lda: b.ld as i32,
                ldb: q.ld as i32,
                beta: if k0 == 0 { 0.0 } else { beta },
                ldc: ld as i32,
            };
            if let (RowsView::I8(bv), RowsView::I8(qv)) = (&b.rows, &q.rows) {
                // int32 sums are exact: one call over the whole (zero-padded) rows.
                let cfg = shape(0, q.ld, 0.0);
                return gemm_ex(
                    gpu,
                    &cfg,
                    (bv, qv, cudaDataType::CUDA_R_8I),
                    Accumulate::Int,
                    out,
                );
            }
            // Chunks of the inner dimension, the later ones added into the tile: the error
            // bound of numerics/plan.rs (`accumulation_length`) counts on this order. Stored
            // half rows run over their zero padding too (exact: adding 0 rounds nothing, and
            // the padding never adds a chunk, K_CHUNK being a multiple of it): an f16 GEMM of
            // 16384² × 15880 in 8 chunks ran at 674 TFLOP/s against 566 over 15876 values,
            // with rows 15880 apart in both (H100).
            let kd = match q.rows {
                RowsView::Half(_) => q.ld,
                _ => d,
            };
            for k0 in (0..kd).step_by(K_CHUNK) {
                let cfg = shape(k0, K_CHUNK.min(kd - k0), 1.0);
                // A chunk starts k0 values into each row and keeps the row stride.
                let (bv, qv) = (b.rows.from(k0), q.rows.from(k0));
                // SAFETY: from k0, the views hold (n − 1)·ld + len values of each side and the
                // output q.n × ld (asserted above).
                match (&bv, &qv, plan.precision) {
                    // fp16x3 plans write their tiles in fp32 (ops/scaled.rs `for_tiles`).
                    (RowsView::F32(bv), RowsView::F32(qv), Precision::Fp32 | Precision::Fp16x3) => {
                        unsafe { gpu.blas.gemm(cfg, bv, qv, out) }.map_err(dev("sgemm"))?
                    }
                    (RowsView::F32(bv), RowsView::F32(qv), Precision::Tf32) => {
                        let tf32 =
                            Accumulate::Float(cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32);
                        gemm_ex(gpu, &cfg, (bv, qv, cudaDataType::CUDA_R_32F), tf32, out)?
                    }
                    (RowsView::Half(bv), RowsView::Half(qv), _) => {
                        let t = match (&q.back, plan.storage) {
                            (Some(_), _) => cudaDataType::CUDA_R_16F,
                            (None, Storage::F16) => cudaDataType::CUDA_R_16F,
                            (None, Storage::Bf16) => cudaDataType::CUDA_R_16BF,
                            _ => unreachable!("half rows on half storage, or scaled"),
                        };
                        let fp32 = Accumulate::Float(cublasComputeType_t::CUBLAS_COMPUTE_32F);
                        gemm_ex(gpu, &cfg, (bv, qv, t), fp32, out)?
                    }
                    _ => unreachable!("tile rows in the plan's storage and precision"),
                }
            }
            match (&q.back, &b.back) {
                (Some(qf), Some(bf)) => unscale(gpu, (q.n, b.n), (qf, bf), out, ld),
                (None, None) => Ok(()),
                _ => unreachable!("both sides scaled or neither"),
            }
        }
        TileKind::Simt(kind, p) => {
            let cfg = LaunchConfig {
                grid_dim: (b.n.div_ceil(64) as u32, q.n.div_ceil(64) as u32, 1),
                block_dim: (16, 16, 1),
                shared_mem_bytes: 0,
            };
            let (nq, nb, dim, ld) = (q.n as i32, b.n as i32, d as i32, ld as i64);
            let mut l = gpu.stream.launch_builder(gpu.k.vector_tile()?);
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

/// Brings a tile of scaled rows' dot products back to the rows' own scale: each value times its
/// row's and its column's factor (kernels/distance/scaled_half.cu `unscale_tile`).
fn unscale(
    gpu: &Gpu,
    (nr, nc): (usize, usize),
    (rf, cf): (&CudaView<'_, f32>, &CudaView<'_, f32>),
    out: &mut CudaViewMut<'_, f32>,
    ld: usize,
) -> Result<()> {
    if nr == 0 || nc == 0 {
        return Ok(());
    }
    let cfg = LaunchConfig {
        grid_dim: (nc.div_ceil(1024).min(16) as u32, nr as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (ldl, nri, nci) = (ld as i64, nr as i32, nc as i32);
    let mut l = gpu.stream.launch_builder(gpu.k.unscale_tile()?);
    l.arg(out).arg(&ldl).arg(&nri).arg(&nci).arg(rf).arg(cf);
    // SAFETY: matches unscale_tile; the tile holds nr rows of ld ≥ nc values, the factors nr and
    // nc (the blocks').
    unsafe { l.launch(cfg) }
        .map(|_| ())
        .map_err(dev("unscale_tile"))
}

/// How GemmEx sums: in fp32 under a compute type (TF32 tensor cores, or the f16/bf16 ones), or
/// in int32 on the int8 tensor cores (output words hold int32 values).
#[derive(Clone, Copy)]
enum Accumulate {
    Float(cublasComputeType_t),
    Int,
}

/// The product of `compute`'s sgemm call through GemmEx: inputs of type `ab.2` (f32 for TF32,
/// f16/bf16 for the stored half rows, int8 rows), `acc` accumulation into 32-bit words (f32, or
/// int32 for int8). The errors are in the plan's bound (numerics/plan.rs
/// `Plan::with_precision`, `Plan::with_arithmetic`).
fn gemm_ex<T: DeviceRepr>(
    gpu: &Gpu,
    cfg: &GemmConfig<f32>,
    ab: (&CudaView<'_, T>, &CudaView<'_, T>, cudaDataType),
    acc: Accumulate,
    c: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    let stream: &CudaStream = &gpu.stream;
    let (a, b, t) = ab;
    let (pa, _ra) = a.device_ptr(stream);
    let (pb, _rb) = b.device_ptr(stream);
    let (pc, _rc) = c.device_ptr_mut(stream);
    // The scalars in the accumulation's type.
    let (alpha, beta) = (cfg.alpha as i32, cfg.beta as i32);
    let (scale_a, scale_b, ct, compute): (*const f32, *const f32, _, _) = match acc {
        Accumulate::Float(compute) => (&cfg.alpha, &cfg.beta, cudaDataType::CUDA_R_32F, compute),
        Accumulate::Int => (
            (&alpha) as *const i32 as *const f32,
            (&beta) as *const i32 as *const f32,
            cudaDataType::CUDA_R_32I,
            cublasComputeType_t::CUBLAS_COMPUTE_32I,
        ),
    };
    // SAFETY: the same shapes as the sgemm call in `compute` (checked there); the handle is
    // bound to `stream`, the scalars live until the call returns (host pointer mode), and the
    // pointers' guards live until the call is queued.
    unsafe {
        blas::gemm_ex(
            *gpu.blas.handle(),
            cfg.transa,
            cfg.transb,
            cfg.m,
            cfg.n,
            cfg.k,
            scale_a as *const _,
            pa as *const _,
            t,
            cfg.lda,
            pb as *const _,
            t,
            cfg.ldb,
            scale_b as *const _,
            pc as *mut _,
            ct,
            cfg.ldc,
            compute,
            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(dev("GemmEx"))
}
