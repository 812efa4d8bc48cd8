//! One distance tile on the device: rows of one block against rows of another, row-major with a
//! given row stride. GEMM metrics get dot products from cuBLAS (sgemm, GemmEx on TF32 tensor
//! cores in TF32 arithmetic, GemmEx on the stored f16/bf16 rows with fp32 accumulation
//! in fp16/bf16 arithmetic, or on int8 rows with int32 accumulation in int8 arithmetic, whose int32 results the tile holds as they are, `TileKey::L2Int`; under
//! TF32 on the scaled f16 copies of ops/scaled.rs where the blocks carry them, the tile then
//! brought back to the rows' scale); the key is formed later, inside the selection and range
//! kernels. The others get keys from kernels/distance/vector_tile.cu.
//!
//! Owns the cuBLAS call and its column-major bookkeeping; which product a tile computes is the
//! route's (search/route.rs). Knows nothing about selection.

use std::ffi::c_void;

use cudarc::cublas::sys::{cublasComputeType_t, cublasOperation_t, cudaDataType};
use cudarc::cublas::GemmConfig;
use cudarc::driver::{CudaStream, DeviceRepr};
use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use voisin::Result;

use crate::numerics::plan::{Numerics, K_CHUNK};
use crate::ops::device_set::RowsView;
use crate::runtime::context::{dev, Gpu};

/// The product a written tile computes (the route's, search/route.rs `product`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Product {
    /// cuBLAS sgemm of prepared f32 rows.
    Sgemm,
    /// GemmEx of prepared f32 rows on TF32 tensor cores.
    Tf32,
    /// GemmEx of the stored f16 rows, fp32 accumulation.
    F16,
    /// GemmEx of the stored bf16 rows, fp32 accumulation.
    Bf16,
    /// GemmEx of the rows' scaled f16 copies (ops/scaled.rs), fp32 accumulation, the tile then
    /// brought back to the rows' scale.
    ScaledF16,
    /// GemmEx of int8 rows, int32 accumulation.
    Int8,
    /// distance/vector_tile.cu with its kind (`abi::VT_*`) and p.
    Simt(i32, f32),
}

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

/// Writes out[r * ld + c] = value(q_r, b_c) for r < q.n, c < b.n, the value `product`'s (the
/// blocks hold its rows: the scaled copies for [`Product::ScaledF16`]).
pub(crate) fn compute(
    gpu: &Gpu,
    product: Product,
    plan: &Numerics,
    q: &Block<'_>,
    b: &Block<'_>,
    out: &mut CudaViewMut<'_, f32>,
    ld: usize,
) -> Result<()> {
    let d = plan.dim;
    match product {
        Product::Simt(kind, p) => simt(gpu, (kind, p), d, (q, b), out, ld),
        _ => {
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
            if product == Product::Int8 {
                let (RowsView::I8(bv), RowsView::I8(qv)) = (&b.rows, &q.rows) else {
                    unreachable!("int8 products on int8 rows")
                };
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
                match (product, &bv, &qv) {
                    (Product::Sgemm, RowsView::F32(bv), RowsView::F32(qv)) => {
                        sgemm(gpu, &cfg, (bv, qv), out)?
                    }
                    (Product::Tf32, RowsView::F32(bv), RowsView::F32(qv)) => {
                        let tf32 =
                            Accumulate::Float(cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32);
                        gemm_ex(gpu, &cfg, (bv, qv, cudaDataType::CUDA_R_32F), tf32, out)?
                    }
                    (p, RowsView::Half(bv), RowsView::Half(qv)) => {
                        let t = match p {
                            Product::F16 | Product::ScaledF16 => cudaDataType::CUDA_R_16F,
                            Product::Bf16 => cudaDataType::CUDA_R_16BF,
                            _ => unreachable!("{p:?} on half rows"),
                        };
                        let fp32 = Accumulate::Float(cublasComputeType_t::CUBLAS_COMPUTE_32F);
                        gemm_ex(gpu, &cfg, (bv, qv, t), fp32, out)?
                    }
                    (p, ..) => unreachable!("{p:?} on the rows the blocks hold"),
                }
            }
            match (&q.back, &b.back) {
                (Some(qf), Some(bf)) => unscale(gpu, (q.n, b.n), (qf, bf), out, ld),
                (None, None) => Ok(()),
                _ => unreachable!("both sides scaled or neither"),
            }
        }
    }
}

/// The SIMT tile of `kind` and `p` (distance/vector_tile.cu) of `d`-value rows.
fn simt(
    gpu: &Gpu,
    (kind, p): (i32, f32),
    d: usize,
    (q, b): (&Block<'_>, &Block<'_>),
    out: &mut CudaViewMut<'_, f32>,
    ld: usize,
) -> Result<()> {
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

/// The product of `compute`'s f32 rows by sgemm (strict fp32 on the SIMT cores).
fn sgemm(
    gpu: &Gpu,
    cfg: &GemmConfig<f32>,
    (a, b): (&CudaView<'_, f32>, &CudaView<'_, f32>),
    c: &mut CudaViewMut<'_, f32>,
) -> Result<()> {
    let stream: &CudaStream = &gpu.stream;
    let (pa, _ra) = a.device_ptr(stream);
    let (pb, _rb) = b.device_ptr(stream);
    let (pc, _rc) = c.device_ptr_mut(stream);
    // SAFETY: the shapes are checked in `compute`; the handle is bound to `stream`, and the
    // pointers' guards live until the call is queued.
    unsafe { gpu.blas.sgemm(cfg, pa, pb, pc) }.map_err(dev("sgemm"))
}

/// The product of `compute`'s sgemm call through GemmEx: inputs of type `ab.2` (f32 for TF32,
/// f16/bf16 for the stored half rows, int8 rows), `acc` accumulation into 32-bit words (f32, or
/// int32 for int8). The errors are in the plan's bound (numerics/plan.rs
/// `Numerics::in_arithmetic`, `Numerics::on_own_cores`).
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
    let (scales, ct, compute): ((*const c_void, *const c_void), _, _) = match acc {
        Accumulate::Float(compute) => (
            (ptr(&cfg.alpha), ptr(&cfg.beta)),
            cudaDataType::CUDA_R_32F,
            compute,
        ),
        Accumulate::Int => (
            (ptr(&alpha), ptr(&beta)),
            cudaDataType::CUDA_R_32I,
            cublasComputeType_t::CUBLAS_COMPUTE_32I,
        ),
    };
    // SAFETY: the same shapes as the sgemm call in `compute` (checked there); the handle is
    // bound to `stream`, the scalars live until the call returns (host pointer mode), and the
    // pointers' guards live until the call is queued.
    unsafe {
        gpu.blas
            .gemm_ex(cfg, (pa, pb, t), (pc, ct), scales, compute)
    }
    .map_err(dev("GemmEx"))
}

/// A host scalar as GemmEx takes it.
fn ptr<T>(x: &T) -> *const c_void {
    (x as *const T).cast()
}
