//! The one place the Python bindings create engines, through the workspace's engine factory
//! (`voisin_engines`), as the CLI and the MPI binary do. Everything else holds a `dyn Engine`.
//!
//! `device="cpu"` is the CPU engine; `"cuda"` / `"cuda:N"` the CUDA engine on GPU 0 / N or an
//! error; `"auto"` the factory's auto engine: a GPU for what it supports when the driver, NVRTC
//! and cuBLAS load and a GPU exists, the CPU for the rest. The strings are the factory's
//! `Device` spellings, parsed there. The CUDA engine is loaded at run time, so one wheel serves
//! machines with and without a GPU. The metric indexes (`indexes.rs`) open their index engine
//! through the same factory.

use std::sync::Arc;

use voisin::cpu::CpuEngine;
use voisin::engine::{Cancel, Op, ProgressFn};
use voisin::{Dataset, Engine, Error, Metric, Result};
use voisin_cuda::CudaEngine;
use voisin_engines::Device;

/// What an engine is built from.
pub struct EngineConfig {
    pub device: String,
    pub precision: String,
    pub threads: Option<usize>,
    pub memory_budget: Option<usize>,
    pub progress: Option<ProgressFn>,
    /// Set when the caller presses Ctrl-C: the running call ends with `Error::Cancelled`.
    pub cancel: Cancel,
}

/// Whether the CUDA engine can start on this machine.
pub fn cuda_available() -> bool {
    voisin_cuda::gpu_available()
}

/// The device a Python `device=` string names, parsed by the factory's one [`Device`] type
/// (`auto`, `cpu`, `cuda`, `cuda:N`); anything else is invalid input naming it.
pub fn device(text: &str) -> Result<Device> {
    text.parse::<Device>().map_err(Error::invalid)
}

/// The engine answering requests over `data` under `metric`.
pub fn open(config: &EngineConfig, data: &Dataset, metric: &Metric) -> Result<Arc<dyn Engine>> {
    // Parsed whatever the device, so a typo is an error on every machine.
    let precision = config.precision.parse()?;
    let device = device(&config.device)?;
    // What the CUDA engine cannot answer (a user metric, a closure of this process, among
    // them) is refused before any GPU opens, with the same line on every machine (the
    // factory's pre-check, `voisin_engines::gpu_answers`).
    if device.is_cuda() && !voisin_engines::gpu_answers(data, metric, Op::Knn) {
        return Err(cpu_only(metric, data));
    }
    voisin_engines::open_shared(device, &factory(config, precision))
}

/// The engines of a distributed worker (`voisin.dask`): the CPU engine, and the CUDA engine
/// on one GPU (the one `device` names, GPU 0 for `cuda`) for `cuda`, `cuda:N`, and `auto` when
/// a GPU is usable. The device choice, parsed as [`open`] parses it.
pub fn open_parts(config: &EngineConfig) -> Result<(Device, CpuEngine, Option<CudaEngine>)> {
    let precision = config.precision.parse()?;
    let device = device(&config.device)?;
    let factory = factory(config, precision);
    let cpu = voisin_engines::cpu(&factory)?;
    let ordinal = match device {
        Device::CudaAt(n) => n,
        _ => 0,
    };
    let cuda = match device {
        Device::Cpu => None,
        Device::Auto if !voisin_cuda::gpu_available() => None,
        Device::Auto => voisin_engines::cuda_on(ordinal, &factory).ok(),
        Device::Cuda | Device::CudaAt(_) => Some(voisin_engines::cuda_on(ordinal, &factory)?),
    };
    Ok((device, cpu, cuda))
}

/// The factory's configuration of `config`.
pub fn factory(
    config: &EngineConfig,
    precision: voisin_cuda::Precision,
) -> voisin_engines::EngineConfig {
    voisin_engines::EngineConfig {
        threads: config.threads,
        memory_budget: config.memory_budget,
        progress: config.progress.clone(),
        cancel: Some(config.cancel.clone()),
        precision,
        ..Default::default()
    }
}

/// The refusal of a request the CUDA engine cannot answer under `device="cuda"`.
pub fn cpu_only(metric: &Metric, data: &Dataset) -> Error {
    Error::invalid(format!(
        "metric {metric} over {} runs on the CPU only (device='cpu' or 'auto')",
        data.describe()
    ))
}
