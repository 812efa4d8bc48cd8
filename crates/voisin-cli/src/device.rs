//! Device selection: turns `--device auto|cpu|cuda` and the engine options into one
//! `Box<dyn Engine>`. This is the only place that knows which engines the binary contains; the
//! rest of the CLI talks to the `Engine` trait.
//!
//! `cuda` is the CUDA engine or an error (exit 1); `auto` is the CUDA engine when the driver,
//! NVRTC and cuBLAS load and a device exists, with the requests it does not handle (user
//! metrics) routed to the CPU engine, and the CPU engine alone otherwise.

use voisin::cpu::checkpoint::GraphCheckpoints;
use voisin::cpu::{CpuEngine, CpuOptions, DEFAULT_MEMORY_BUDGET};
use voisin::engine::ProgressFn;
use voisin::{Dataset, Engine, KnnResult, Metric, RangeResult};
use voisin_cuda::{CudaEngine, CudaOptions, MultiGpu, Precision, Select};

use crate::args::{DeviceChoice, GpuList};
use crate::error::CliError;

/// What every engine is built from.
#[derive(Clone, Default)]
pub struct EngineConfig {
    pub threads: Option<usize>,
    pub memory_budget: Option<usize>,
    pub progress: Option<ProgressFn>,
    /// GPU selection kernel (`--select`); the CPU engine has one and ignores it.
    pub select: Select,
    /// GPU distance arithmetic (`--precision`); the CPU engine ignores it.
    pub precision: Precision,
    /// GPUs for the CUDA engine (`--gpus`; default GPU 0); the CPU engine ignores it.
    pub gpus: Option<GpuList>,
}

/// The engine for a `--device` choice.
pub fn select(choice: DeviceChoice, config: &EngineConfig) -> Result<Box<dyn Engine>, CliError> {
    match choice {
        DeviceChoice::Cpu => Ok(cpu_engine(config)?),
        DeviceChoice::Cuda => Ok(cuda_engine(config)?),
        // Under auto a GPU that fails to start is not an error (SPEC §6): fall back to the CPU.
        DeviceChoice::Auto if voisin_cuda::gpu_available() => match cuda_engine(config) {
            Ok(gpu) => Ok(Box::new(Routed {
                gpu,
                cpu: cpu_engine(config)?,
            })),
            Err(_) => Ok(cpu_engine(config)?),
        },
        DeviceChoice::Auto => Ok(cpu_engine(config)?),
    }
}

/// The CPU engine; it also builds checkpointed graphs.
pub fn cpu_engine(config: &EngineConfig) -> Result<Box<dyn GraphCheckpoints>, CliError> {
    let engine = CpuEngine::new(CpuOptions {
        threads: config.threads,
        memory_budget: config.memory_budget.unwrap_or(DEFAULT_MEMORY_BUDGET),
        progress: config.progress.clone(),
    })
    .map_err(|e| CliError::core(e, None))?;
    Ok(Box::new(engine))
}

/// The GPU ordinals `--gpus` names; more than the machine has is a device error (exit 1).
fn ordinals(gpus: &Option<GpuList>) -> Result<Vec<usize>, CliError> {
    let found = voisin_cuda::device_count();
    let list = match gpus {
        None => vec![0],
        Some(GpuList::All) => (0..found.max(1)).collect(),
        Some(GpuList::Count(n)) if *n > found => {
            let e = voisin::Error::device(format!(
                "cuda: --gpus {n} asks for more GPUs than the {found} found"
            ));
            return Err(CliError::core(e, None));
        }
        Some(GpuList::Count(n)) => (0..*n).collect(),
        Some(GpuList::Ordinals(v)) => v.clone(),
    };
    Ok(list)
}

/// The CUDA engine on the `--gpus` devices (GPU 0 by default); a missing driver or device is
/// a device error (exit 1). It also builds checkpointed graphs.
pub fn cuda_engine(config: &EngineConfig) -> Result<Box<dyn GraphCheckpoints>, CliError> {
    let mut opts = CudaOptions {
        select: config.select,
        precision: config.precision,
        ..CudaOptions::default()
    };
    if let Some(bytes) = config.memory_budget {
        opts.tile_bytes = bytes;
    }
    let devices = ordinals(&config.gpus)?;
    let engine: Box<dyn GraphCheckpoints> = match devices[..] {
        [one] => {
            Box::new(CudaEngine::with_options(one, opts).map_err(|e| CliError::core(e, None))?)
        }
        _ => Box::new(MultiGpu::with_options(&devices, opts).map_err(|e| CliError::core(e, None))?),
    };
    Ok(engine)
}

/// `auto` with a GPU: what the CUDA engine handles goes to the GPU, the rest to the CPU.
struct Routed {
    gpu: Box<dyn Engine>,
    cpu: Box<dyn Engine>,
}

impl Routed {
    /// The GPU takes vectors under built-in metrics (unless they hold f64 values f32 cannot
    /// hold: the CPU engine answers those), and strings under levenshtein.
    fn pick(&self, data: &Dataset, queries: &Dataset, metric: &Metric) -> &dyn Engine {
        let f32_exact = |d: &Dataset| d.as_vectors().is_none_or(|v| v.is_f32_exact());
        let gpu_can = match (data, metric) {
            (_, Metric::Custom(_)) => false,
            (Dataset::Vectors(_), m) => {
                *m != Metric::Levenshtein && f32_exact(data) && f32_exact(queries)
            }
            (Dataset::Strings(_), Metric::Levenshtein) => true,
            (Dataset::Strings(_), _) => false,
        };
        if gpu_can {
            self.gpu.as_ref()
        } else {
            self.cpu.as_ref()
        }
    }
}

impl Engine for Routed {
    fn name(&self) -> String {
        format!("auto: {} / {}", self.gpu.name(), self.cpu.name())
    }

    fn knn(
        &self,
        base: &Dataset,
        queries: &Dataset,
        k: usize,
        metric: &Metric,
    ) -> voisin::Result<KnnResult> {
        self.pick(base, queries, metric)
            .knn(base, queries, k, metric)
    }

    fn range(
        &self,
        base: &Dataset,
        queries: &Dataset,
        radius: f64,
        metric: &Metric,
    ) -> voisin::Result<RangeResult> {
        self.pick(base, queries, metric)
            .range(base, queries, radius, metric)
    }

    fn graph(&self, data: &Dataset, k: usize, metric: &Metric) -> voisin::Result<KnnResult> {
        self.pick(data, data, metric).graph(data, k, metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_gpu_auto_is_the_cpu_and_cuda_fails_with_exit_code_1() {
        let config = EngineConfig {
            threads: Some(1),
            ..Default::default()
        };
        let choices: &[DeviceChoice] = if voisin_cuda::gpu_available() {
            &[DeviceChoice::Cpu]
        } else {
            &[DeviceChoice::Cpu, DeviceChoice::Auto]
        };
        for &choice in choices {
            let engine = select(choice, &config).unwrap();
            assert!(engine.name().starts_with("cpu"), "{}", engine.name());
        }
        if !voisin_cuda::gpu_available() {
            let err = select(DeviceChoice::Cuda, &config).err().unwrap();
            assert_eq!(err.exit_code(), 1);
            assert!(err.to_string().starts_with("cuda: "), "{err}");
        }
    }

    #[test]
    fn zero_threads_is_a_user_error() {
        let config = EngineConfig {
            threads: Some(0),
            ..Default::default()
        };
        assert_eq!(
            select(DeviceChoice::Cpu, &config)
                .err()
                .unwrap()
                .exit_code(),
            2
        );
    }
}
