//! Exact f64 keys of candidate pairs, the values every engine reports.
//!
//! On the device (kernels/exact.cu) for every built-in metric whose exact key uses only
//! correctly rounded operations, so the keys are bit-identical to
//! [`voisin::metric::exact::vector_key`]; minkowski needs `powf`, whose rounding differs between
//! libm and CUDA, so its keys are computed on the host.

use cudarc::driver::{CudaView, LaunchConfig, PushKernelArg};
use rayon::prelude::*;
use voisin::data::VectorSet;
use voisin::metric::exact::vector_key;
use voisin::{Metric, Result};

use crate::context::{dev, Gpu};
use crate::device_set::DeviceSet;

/// Pairs per launch: bounds the index and key buffers (64M pairs: 1 GiB of keys and indices).
const CHUNK: usize = 1 << 26;

/// The sides of a search: base and queries, on the host and on the device.
pub(crate) struct Sides<'a> {
    pub bset: &'a VectorSet,
    pub qset: &'a VectorSet,
    pub bdev: &'a DeviceSet,
    pub qdev: &'a DeviceSet,
}

/// The exact kernel's code for `metric`, or `None` when its keys are computed on the host.
pub(crate) fn device_code(metric: &Metric) -> Option<i32> {
    match metric {
        Metric::Euclidean | Metric::SqEuclidean => Some(0),
        Metric::InnerProduct => Some(1),
        Metric::Cosine => Some(2),
        Metric::Correlation => Some(3),
        Metric::Cityblock => Some(4),
        Metric::Chebyshev => Some(5),
        _ => None,
    }
}

/// Exact keys of the pairs [query, base index] on the host, in parallel: for metrics the kernel
/// does not cover and for bases whose raw rows are not on the device (streamed shards).
pub(crate) fn host_keys(
    metric: &Metric,
    bset: &VectorSet,
    qset: &VectorSet,
    pairs: &[[u32; 2]],
) -> Vec<f64> {
    pairs
        .par_iter()
        .map(|&[q, b]| vector_key(metric, &bset.row_f32(b as usize), &qset.row_f32(q as usize)))
        .collect()
}

/// Exact keys of the pairs [query, base index].
pub(crate) fn keys(
    gpu: &Gpu,
    metric: &Metric,
    s: &Sides<'_>,
    pairs: &[[u32; 2]],
) -> Result<Vec<f64>> {
    let Some(code) = device_code(metric) else {
        return Ok(host_keys(metric, s.bset, s.qset, pairs));
    };
    // The start value of Rust's f64 Sum, which the kernel must use to match bit for bit.
    let zero: f64 = std::iter::empty::<f64>().sum();
    let d = s.bset.dim() as i32;
    let mut out: Vec<f64> = Vec::new();
    let mut tr = std::time::Instant::now();
    for chunk in pairs.chunks(CHUNK) {
        let n = chunk.len();
        let dp = gpu.upload(bytemuck::cast_slice(chunk))?;
        crate::trace("exact: upload pairs", &mut tr);
        // SAFETY: a pair of u32 is 8 bytes like two f32; the buffer holds at least 2n words.
        let vp: CudaView<'_, [u32; 2]> = unsafe { dp.transmute(n).unwrap() };
        let mut keys = unsafe { gpu.stream.alloc::<f64>(n) }.map_err(dev("allocating"))?;
        let cfg = LaunchConfig {
            grid_dim: ((n as u64).div_ceil(128) as u32, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let np = n as i64;
        let mut l = gpu.stream.launch_builder(&gpu.k.exact_keys);
        l.arg(&s.bdev.raw)
            .arg(&s.qdev.raw)
            .arg(&d)
            .arg(&vp)
            .arg(&np)
            .arg(&code)
            .arg(&zero)
            .arg(&mut keys);
        // SAFETY: matches kernels/exact.cu; indices are below the sets' sizes.
        unsafe { l.launch(cfg) }.map_err(dev("exact_keys"))?;
        gpu.stream.synchronize().map_err(dev("exact_keys"))?;
        crate::trace("exact: kernel", &mut tr);
        let got = gpu.download(&keys.slice(..))?;
        if out.is_empty() {
            out = got;
        } else {
            out.extend(got);
        }
    }
    Ok(out)
}
