//! The device side of the engine: driver context, stream, cuBLAS handle and the kernels.
//!
//! Owns loading CUDA at run time and compiling the kernels; knows nothing about metrics or
//! selection policy. Kernel sources live in `kernels/*.cu`; they are embedded here, compiled once
//! per process by NVRTC for compute_90 (Hopper), and loaded once per context.

use std::sync::{Arc, OnceLock};

use cudarc::cublas::{sys as blas_sys, CudaBlas};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::{CompileOptions, Ptx};
use voisin::{Error, Result};

/// Kernel sources in dependency order: `keys.cu` is the prelude the others use.
const SOURCES: [(&str, &str); 6] = [
    ("keys.cu", include_str!("../kernels/keys.cu")),
    (
        "select_block.cu",
        include_str!("../kernels/select_block.cu"),
    ),
    (
        "select_radix.cu",
        include_str!("../kernels/select_radix.cu"),
    ),
    ("range.cu", include_str!("../kernels/range.cu")),
    ("transpose.cu", include_str!("../kernels/transpose.cu")),
    ("vector_tile.cu", include_str!("../kernels/vector_tile.cu")),
];

/// Whether a CUDA driver with at least one device, NVRTC and cuBLAS can be loaded. Never panics
/// (cudarc panics when a library is missing, so presence is checked before anything is called).
pub fn gpu_available() -> bool {
    missing_library().is_none() && CudaContext::device_count().map(|n| n > 0).unwrap_or(false)
}

/// The first CUDA library that cannot be loaded, if any.
fn missing_library() -> Option<&'static str> {
    // SAFETY: these only try to dlopen the libraries.
    unsafe {
        if !cudarc::driver::sys::is_culib_present() {
            return Some("the CUDA driver (libcuda)");
        }
        if !cudarc::nvrtc::sys::is_culib_present() {
            return Some("NVRTC (libnvrtc)");
        }
        if !cudarc::cublas::sys::is_culib_present() {
            return Some("cuBLAS (libcublas)");
        }
    }
    None
}

/// Maps any CUDA-side error to the engine's device error with what was being done.
pub(crate) fn dev<E: std::fmt::Debug>(what: &'static str) -> impl FnOnce(E) -> Error {
    move |e| Error::device(format!("cuda: {what} failed: {e:?}"))
}

/// The NVRTC output, shared by every context of the process.
fn ptx() -> Result<Ptx> {
    static PTX: OnceLock<std::result::Result<Ptx, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        let src: String = SOURCES
            .iter()
            .map(|(name, s)| format!("// ---- {name}\n{s}\n"))
            .collect();
        let opts = CompileOptions {
            arch: Some("compute_90"),
            // Fast-math would change powf and division; exactness bounds assume IEEE ops.
            use_fast_math: Some(false),
            name: Some("voisin_kernels.cu".into()),
            ..Default::default()
        };
        cudarc::nvrtc::compile_ptx_with_opts(src, opts).map_err(|e| match e {
            cudarc::nvrtc::CompileError::CompileError { log, .. } => {
                format!(
                    "cuda: NVRTC could not compile the kernels: {}",
                    log.to_string_lossy()
                )
            }
            e => format!("cuda: NVRTC failed: {e:?}"),
        })
    })
    .clone()
    .map_err(Error::device)
}

/// Every kernel the engine launches.
pub(crate) struct Kernels {
    pub select_block: CudaFunction,
    pub fill_lists: CudaFunction,
    pub select_radix: CudaFunction,
    pub range_count: CudaFunction,
    pub range_fill: CudaFunction,
    pub transpose: CudaFunction,
    pub vector_tile: CudaFunction,
}

/// One GPU ready to work: context, stream, cuBLAS handle, kernels.
pub(crate) struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub blas: CudaBlas,
    pub k: Kernels,
    pub name: String,
}

impl Gpu {
    pub fn open(device: usize) -> Result<Self> {
        if let Some(lib) = missing_library() {
            return Err(Error::device(format!(
                "cuda: {lib} cannot be loaded (no NVIDIA driver or CUDA 13 libraries on the \
                 library path)"
            )));
        }
        let count = CudaContext::device_count().map_err(dev("counting devices"))?;
        if device >= count.max(0) as usize {
            return Err(Error::device(format!(
                "cuda: device {device} does not exist ({count} CUDA device(s) found)"
            )));
        }
        let ctx = CudaContext::new(device).map_err(dev("creating the context"))?;
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone()).map_err(dev("creating the cuBLAS handle"))?;
        // Strict fp32: the error bounds of src/prepare.rs assume IEEE single products. The default
        // math mode never uses TF32 for sgemm (only CUBLAS_TF32_TENSOR_OP_MATH would), and the
        // NVIDIA_TF32_OVERRIDE variable can only disable TF32; set it explicitly so a changed
        // library default cannot slip tensor-core rounding in. (Pedantic mode was avoided: it
        // may pick slower kernels for no gain in fp32.)
        // SAFETY: a valid handle and a valid enum value.
        unsafe {
            blas_sys::cublasSetMathMode(
                *blas.handle(),
                blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH,
            )
            .result()
            .map_err(dev("setting cuBLAS math mode"))?;
        }
        let module = ctx
            .load_module(ptx()?)
            .map_err(dev("loading the kernels"))?;
        let f = |name: &str| module.load_function(name).map_err(dev("finding a kernel"));
        let k = Kernels {
            select_block: f("select_block")?,
            fill_lists: f("fill_lists")?,
            select_radix: f("select_radix")?,
            range_count: f("range_count")?,
            range_fill: f("range_fill")?,
            transpose: f("transpose")?,
            vector_tile: f("vector_tile")?,
        };
        let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        Ok(Gpu {
            ctx,
            stream,
            blas,
            k,
            name,
        })
    }

    /// Free device memory in bytes.
    pub fn free_memory(&self) -> Result<usize> {
        Ok(self.ctx.mem_get_info().map_err(dev("querying memory"))?.0)
    }
}
