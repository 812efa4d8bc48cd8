//! The numerics of the approximate pass, on the host: the per-metric [`plan::Numerics`] owns every
//! device-facing fact about a metric (key mode, tile kind, row transforms, the error bound and
//! its parts as the kernels evaluate them) and the input checks of vector data.
//!
//! Reads `runtime::abi` (the codes the plan hands to kernels) and `options` (the precision);
//! never touches the device.

pub(crate) mod plan;
