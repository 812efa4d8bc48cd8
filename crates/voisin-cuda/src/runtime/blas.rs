//! cuBLAS through the library file `loaded.rs` chose: its handle, bound to the engine's stream,
//! and the two products the tiles take (sgemm, GemmEx).
//!
//! The calls are looked up in that library, opened by path, so the cuBLAS `voisin.cuda_info()`
//! reports is the one that runs. (The CUDA bindings' own loader opens the first of its
//! candidate file names the system resolves, the unversioned `libcublas.so` of a toolkit on
//! `LD_LIBRARY_PATH` first, over the wheel or `VOISIN_CUDA_LIBS` folder the search chose.) The
//! bindings still give the C types and enum values, from CUDA's headers.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t, cublasOperation_t,
    cublasStatus_t, cudaDataType,
};
use cudarc::cublas::GemmConfig;
use cudarc::driver::CudaStream;
use voisin::{Error, Result};

use crate::runtime::context::{dev, CudaFailure};
use crate::runtime::loaded::loaded;

/// A cuBLAS call's failure status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlasError(pub cublasStatus_t);

impl CudaFailure for BlasError {
    fn out_of_memory(&self) -> bool {
        self.0 == cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED
    }
}

fn check(status: cublasStatus_t) -> std::result::Result<(), BlasError> {
    match status {
        cublasStatus_t::CUBLAS_STATUS_SUCCESS => Ok(()),
        e => Err(BlasError(e)),
    }
}

type Status = cublasStatus_t;
type Op = cublasOperation_t;
type Sgemm = unsafe extern "C" fn(
    cublasHandle_t,
    Op,
    Op,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    *const f32,
    *mut f32,
    c_int,
) -> Status;
type GemmEx = unsafe extern "C" fn(
    cublasHandle_t,
    Op,
    Op,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    cudaDataType,
    c_int,
    *const c_void,
    cudaDataType,
    c_int,
    *const c_void,
    *mut c_void,
    cudaDataType,
    c_int,
    cublasComputeType_t,
    cublasGemmAlgo_t,
) -> Status;

/// The cuBLAS functions the engine calls, looked up once in one open library, which they keep
/// loaded.
pub(crate) struct BlasCalls {
    _lib: libloading::Library,
    create: unsafe extern "C" fn(*mut cublasHandle_t) -> Status,
    destroy: unsafe extern "C" fn(cublasHandle_t) -> Status,
    set_stream: unsafe extern "C" fn(cublasHandle_t, *mut c_void) -> Status,
    set_math_mode: unsafe extern "C" fn(cublasHandle_t, cublasMath_t) -> Status,
    sgemm: Sgemm,
    gemm_ex: GemmEx,
}

impl BlasCalls {
    /// The calls of `lib`, a cuBLAS library (CUDA 12 or 13, which both export them).
    pub fn of(lib: libloading::Library) -> std::result::Result<BlasCalls, String> {
        /// # Safety
        /// `T` is the C signature of the cuBLAS function `name`.
        unsafe fn get<T: Copy>(
            lib: &libloading::Library,
            name: &str,
        ) -> std::result::Result<T, String> {
            let c = format!("{name}\0");
            // SAFETY: the caller's promise on `T`.
            unsafe { lib.get::<T>(c.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| format!("cuBLAS lacks {name}: {e}"))
        }
        // SAFETY: each signature is cublas_api.h's for that name (the handle, enums and
        // scalars as the bindings declare them; the stream as an opaque pointer).
        unsafe {
            Ok(BlasCalls {
                create: get(&lib, "cublasCreate_v2")?,
                destroy: get(&lib, "cublasDestroy_v2")?,
                set_stream: get(&lib, "cublasSetStream_v2")?,
                set_math_mode: get(&lib, "cublasSetMathMode")?,
                sgemm: get(&lib, "cublasSgemm_v2")?,
                gemm_ex: get(&lib, "cublasGemmEx")?,
                _lib: lib,
            })
        }
    }
}

/// A cuBLAS handle whose work goes on one stream, in strict fp32 math mode.
pub(crate) struct Blas {
    handle: cublasHandle_t,
    calls: &'static BlasCalls,
    /// Kept alive while the handle is bound to it.
    _stream: Arc<CudaStream>,
}

// SAFETY: a cuBLAS handle may be used from any thread, one call at a time; the engine makes its
// calls holding the GPU's lock (`CudaEngine::lock`).
unsafe impl Send for Blas {}
// SAFETY: as above: no call through `&Blas` runs concurrently with another on the same handle.
unsafe impl Sync for Blas {}

impl Blas {
    /// A handle bound to `stream`. Strict fp32: the error bounds of src/numerics/plan.rs assume
    /// IEEE single products. The default math mode never uses TF32 for sgemm (only
    /// CUBLAS_TF32_TENSOR_OP_MATH would), and the NVIDIA_TF32_OVERRIDE variable can only disable
    /// TF32; it is set explicitly so that a changed library default cannot slip tensor-core
    /// rounding in. (Pedantic mode may pick slower kernels for no gain in fp32.)
    pub fn new(stream: &Arc<CudaStream>) -> Result<Blas> {
        let calls = loaded()
            .blas()
            .ok_or_else(|| Error::device("cuda: cuBLAS is not loaded"))?;
        // The handle belongs to the context current on this thread.
        stream
            .context()
            .bind_to_thread()
            .map_err(dev("binding the context for cuBLAS"))?;
        let mut handle: cublasHandle_t = std::ptr::null_mut();
        // SAFETY: cublasCreate_v2 writes a handle; a failed one leaves nothing to destroy.
        check(unsafe { (calls.create)(&mut handle) }).map_err(dev("creating the cuBLAS handle"))?;
        let blas = Blas {
            handle,
            calls,
            _stream: Arc::clone(stream),
        };
        // SAFETY: a live handle, a live stream of the same context, a valid enum value.
        unsafe {
            check((calls.set_stream)(
                handle,
                stream.cu_stream() as *mut c_void,
            ))
            .map_err(dev("binding cuBLAS to the stream"))?;
            check((calls.set_math_mode)(
                handle,
                cublasMath_t::CUBLAS_DEFAULT_MATH,
            ))
            .map_err(dev("setting cuBLAS math mode"))?;
        }
        Ok(blas)
    }

    /// sgemm on device pointers.
    ///
    /// # Safety
    /// `a`, `b` and `c` hold the values `g` reads and writes, on the handle's stream's device,
    /// and stay alive until the stream has run the call.
    pub unsafe fn sgemm(
        &self,
        g: &GemmConfig<f32>,
        a: u64,
        b: u64,
        c: u64,
    ) -> std::result::Result<(), BlasError> {
        // SAFETY: the caller's promise; the scalars are host values read during the call.
        check(unsafe {
            (self.calls.sgemm)(
                self.handle,
                g.transa,
                g.transb,
                g.m,
                g.n,
                g.k,
                &g.alpha,
                a as *const f32,
                g.lda,
                b as *const f32,
                g.ldb,
                &g.beta,
                c as *mut f32,
                g.ldc,
            )
        })
    }

    /// GemmEx on device pointers: inputs of type `t`, output of type `ct`, summed under
    /// `compute`, with the scalars `alpha` and `beta` (host pointers, of the compute type's
    /// scalar type).
    ///
    /// # Safety
    /// As [`Blas::sgemm`], for the types given; `alpha` and `beta` point at live scalars of
    /// `compute`'s scalar type.
    pub unsafe fn gemm_ex(
        &self,
        g: &GemmConfig<f32>,
        (a, b, t): (u64, u64, cudaDataType),
        (c, ct): (u64, cudaDataType),
        (alpha, beta): (*const c_void, *const c_void),
        compute: cublasComputeType_t,
    ) -> std::result::Result<(), BlasError> {
        // SAFETY: the caller's promise.
        check(unsafe {
            (self.calls.gemm_ex)(
                self.handle,
                g.transa,
                g.transb,
                g.m,
                g.n,
                g.k,
                alpha,
                a as *const c_void,
                t,
                g.lda,
                b as *const c_void,
                t,
                g.ldb,
                beta,
                c as *mut c_void,
                ct,
                g.ldc,
                compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        })
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once; its queued work belongs to the stream.
        unsafe { (self.calls.destroy)(self.handle) };
    }
}
