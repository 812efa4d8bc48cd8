//! The one place the Python bindings create engines, through the workspace's engine factory
//! (`voisin_engines`), as the CLI and the MPI binary do. Everything else holds a `dyn Engine`.
//!
//! `device="cpu"` is the CPU engine; `"cuda"` / `"cuda:N"` the CUDA engine on GPU 0 / N or an
//! error; `"auto"` the factory's auto engine: a GPU for what it supports when the driver, NVRTC
//! and cuBLAS load and a GPU exists, the CPU for the rest. The CUDA engine is loaded at run
//! time, so one wheel serves machines with and without a GPU.

use std::sync::Arc;

use voisin::engine::{Cancel, Op, ProgressFn};
use voisin::{Dataset, Engine, Error, Metric, Result};
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
    // What the CUDA engine cannot answer (a user metric, a closure of this process, among
    // them) is refused before any GPU opens, with the same line on every machine. f64 values
    // beyond f32's range get the CUDA engine's own refusal, which names them.
    let held = data.as_vectors().is_none_or(voisin_cuda::tiles_hold);
    if device == Device::Cuda && held && !voisin_cuda::supports(data, metric, Op::Knn) {
        return Err(cpu_only(metric, data));
    }
    let factory = voisin_engines::EngineConfig {
        threads: config.threads,
        memory_budget: config.memory_budget,
        progress: config.progress.clone(),
        cancel: Some(config.cancel.clone()),
        precision,
        gpus,
        ..Default::default()
    };
    voisin_engines::open_shared(device, &factory)
}

fn cpu_only(metric: &Metric, data: &Dataset) -> Error {
    Error::invalid(format!(
        "metric {metric} over {} runs on the CPU only (device='cpu' or 'auto')",
        data.describe()
    ))
}
