//! The device as a resource, below any algorithm: loading CUDA, the context, streams and cuBLAS
//! handle (`context`), the element types rows keep on the device (`elem`), pinned staging of uploads (`staging`), the kernel registry and its
//! NVRTC compilation (`kernels`), the one host↔kernel table of codes and sizes (`abi`), and the
//! probe that phase timings go to (`probe`).
//!
//! Knows nothing about metrics, plans or selection policy; every other layer reads it.

pub(crate) mod abi;
pub(crate) mod context;
pub(crate) mod elem;
pub(crate) mod kernels;
pub mod probe;
pub(crate) mod staging;
