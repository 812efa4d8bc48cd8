//! The CUDA engine.
