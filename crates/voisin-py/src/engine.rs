//! The one place the Python bindings create engines. Everything else holds a `dyn Engine`.
//!
//! `device="cpu"` is the CPU engine; `"cuda"` / `"cuda:N"` the CUDA engine on GPU 0 / N or an
//! error; `"auto"` the CUDA engine when the driver, NVRTC and cuBLAS load and a GPU exists and
//! the request is one it answers (built-in metrics), the CPU engine otherwise. The CUDA engine is
//! loaded at run time, so one wheel serves machines with and without a GPU.

use std::sync::Arc;

use voisin::cpu::{CpuEngine, CpuOptions, DEFAULT_MEMORY_BUDGET};
use voisin::engine::ProgressFn;
use voisin::{Dataset, Engine, Error, Metric, Result};
use voisin_cuda::{CudaEngine, CudaOptions, Precision};

/// What an engine is built from.
pub struct EngineConfig {
    pub device: String,
    pub precision: String,
    pub threads: Option<usize>,
    pub memory_budget: Option<usize>,
    pub progress: Option<ProgressFn>,
}

/// Whether the CUDA engine can start on this machine.
pub fn cuda_available() -> bool {
    voisin_cuda::gpu_available()
}

/// The engine answering requests over `data` under `metric`.
pub fn open(config: &EngineConfig, data: &Dataset, metric: &Metric) -> Result<Arc<dyn Engine>> {
    // Parsed whatever the device, so a typo is an error on every machine.
    let precision: Precision = config.precision.parse()?;
    let device = config.device.trim().to_ascii_lowercase();
    let gpu_answers = match (data, metric) {
        (_, Metric::Custom(_)) => false,
        (Dataset::Vectors(_), m) => !matches!(m, Metric::Levenshtein),
        (Dataset::Strings(_), m) => matches!(m, Metric::Levenshtein),
    };
    let ordinal = match device.as_str() {
        "cpu" => None,
        "auto" if gpu_answers && cuda_available() => Some(0),
        "auto" => None,
        "cuda" => Some(0),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => Some(n),
            _ => {
                return Err(Error::invalid(format!(
                    "unknown device '{}' (known: auto, cpu, cuda, cuda:N)",
                    config.device
                )))
            }
        },
    };
    match ordinal {
        None => {
            let engine = CpuEngine::new(CpuOptions {
                threads: config.threads,
                memory_budget: config.memory_budget.unwrap_or(DEFAULT_MEMORY_BUDGET),
                progress: config.progress.clone(),
            })?;
            Ok(Arc::new(engine))
        }
        Some(_) if !gpu_answers => Err(Error::invalid(format!(
            "metric {metric} over {} runs on the CPU only (device='cpu' or 'auto')",
            data.describe()
        ))),
        Some(n) => {
            let mut opts = CudaOptions {
                precision,
                ..CudaOptions::default()
            };
            if let Some(bytes) = config.memory_budget {
                opts.tile_bytes = bytes;
            }
            Ok(Arc::new(CudaEngine::with_options(n, opts)?))
        }
    }
}
