//! The one place the Python bindings create engines, through the workspace's engine factory
//! (`voisin_engines`), as the CLI and the MPI binary do. Everything else holds a `dyn Engine`.
//!
//! `device="cpu"` is the CPU engine; `"cuda"` / `"cuda:N"` the CUDA engine on GPU 0 / N or an
//! error; `"auto"` the factory's auto engine: a GPU for what it supports when the driver, NVRTC
//! and cuBLAS load and a GPU exists, the CPU for the rest. The CUDA engine is loaded at run
//! time, so one wheel serves machines with and without a GPU.

use std::sync::Arc;

use voisin::cpu::CpuEngine;
use voisin::engine::{Cancel, Op, ProgressFn};
use voisin::{Dataset, Engine, Error, Metric, Result};
use voisin_cuda::CudaEngine;
use voisin_engines::{Device, Gpus};

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

/// The engine answering requests over `data` under `metric`.
pub fn open(config: &EngineConfig, data: &Dataset, metric: &Metric) -> Result<Arc<dyn Engine>> {
    let (device, factory) = factory_config(config)?;
    // What the CUDA engine cannot answer (a user metric, a closure of this process, among
    // them) is refused before any GPU opens, with the same line on every machine. f64 values
    // beyond f32's range get the CUDA engine's own refusal, which names them.
    let held = data.as_vectors().is_none_or(voisin_cuda::tiles_hold);
    if device == Device::Cuda && held && !voisin_cuda::supports(data, metric, Op::Knn) {
        return Err(cpu_only(metric, data));
    }
    voisin_engines::open_shared(device, &factory)
}

/// The engines of a distributed worker (`voisin.dask`): the CPU engine, and the CUDA engine
/// on one GPU (the first `device` names) for `cuda`, `cuda:N`, and `auto` when a GPU is
/// usable. The device choice, parsed as [`open`] parses it.
pub fn open_parts(config: &EngineConfig) -> Result<(Device, CpuEngine, Option<CudaEngine>)> {
    let (device, factory) = factory_config(config)?;
    let cpu = voisin_engines::cpu(&factory)?;
    let cuda = match device {
        Device::Cpu => None,
        Device::Cuda => Some(voisin_engines::cuda_one(&factory)?),
        Device::Auto if voisin_cuda::gpu_available() => voisin_engines::cuda_one(&factory).ok(),
        Device::Auto => None,
    };
    Ok((device, cpu, cuda))
}

/// The device `config` names and the factory's configuration for it.
fn factory_config(config: &EngineConfig) -> Result<(Device, voisin_engines::EngineConfig)> {
    // Parsed whatever the device, so a typo is an error on every machine.
    let precision = config.precision.parse()?;
    let spec = config.device.trim().to_ascii_lowercase();
    let (device, gpus) = match spec.as_str() {
        "cpu" => (Device::Cpu, None),
        "auto" => (Device::Auto, None),
        "cuda" => (Device::Cuda, None),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => (Device::Cuda, Some(Gpus::Ordinals(vec![n]))),
            _ => {
                return Err(Error::invalid(format!(
                    "unknown device '{}' (known: auto, cpu, cuda, cuda:N)",
                    config.device
                )))
            }
        },
    };
    let factory = voisin_engines::EngineConfig {
        threads: config.threads,
        memory_budget: config.memory_budget,
        progress: config.progress.clone(),
        cancel: Some(config.cancel.clone()),
        precision,
        gpus,
        ..Default::default()
    };
    Ok((device, factory))
}

/// The refusal of a request the CUDA engine cannot answer under `device="cuda"`.
pub fn cpu_only(metric: &Metric, data: &Dataset) -> Error {
    Error::invalid(format!(
        "metric {metric} over {} runs on the CPU only (device='cpu' or 'auto')",
        data.describe()
    ))
}
