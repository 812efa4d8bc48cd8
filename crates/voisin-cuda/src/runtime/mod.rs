//! The device as a resource, below any algorithm: finding and loading the CUDA libraries
//! (`libs`: where they are searched; `loaded`: what this process opened, the report
//! [`cuda_info`] and the driver-version shims), the context and streams (`context`), the
//! cuBLAS handle and calls (`blas`), the element types rows keep on the device (`elem`), pinned staging of uploads
//! (`staging`), the kernel registry (`kernels`) with its modules (`modules`), their compilation
//! by NVRTC (`nvrtc`) and disk cache (`cache`), the one host↔kernel table of codes and sizes
//! (`abi`), and the probe that phase timings go to (`probe`).
//!
//! Knows nothing about metrics, plans or selection policy; every other layer reads it.

pub(crate) mod abi;
pub(crate) mod blas;
pub(crate) mod cache;
pub(crate) mod context;
pub(crate) mod elem;
pub(crate) mod kernels;
pub(crate) mod libs;
pub(crate) mod loaded;
pub(crate) mod modules;
pub(crate) mod nvrtc;
pub mod probe;
pub(crate) mod staging;

pub use loaded::{cuda_info, set_python_path, CudaInfo, DeviceInfo, LibraryInfo};
