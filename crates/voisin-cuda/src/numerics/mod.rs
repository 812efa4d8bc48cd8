//! The numerics of the approximate pass, on the host: the per-metric [`plan::Numerics`] owns every
//! device-facing fact about a metric (key mode, tile kind, row transforms, the error bound and
//! its parts as the kernels evaluate them) and the input checks of vector data.
//!
//! Reads `runtime` (the codes the plan hands to kernels, the element types rows keep on the
//! device); never touches the device. Which arithmetic a search runs is the route's
//! (search/route.rs): a plan holds the one it was given.

pub(crate) mod plan;
