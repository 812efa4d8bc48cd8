//! The one engine factory: a device choice and the engine options in, a `Box<dyn Engine>` (brute
//! force) or a `Box<dyn IndexEngine>` (the metric indexes) out, and the one place that decides
//! the device and the engine.
//!
//! Every front end (the `voisin` CLI for knn, graph, range and index build and query, the
//! `voisin-mpi` ranks, the Python bindings) opens its engines here, so `--memory`, the GPU
//! choice, progress and cancellation reach every engine the same way. The rest of a front end
//! talks to the [`Engine`] and `voisin_index::IndexEngine` traits only.
//!
//! - [`Device::Cuda`] is the CUDA engine on the GPUs of [`EngineConfig::gpus`] (GPU 0 by
//!   default; several make a [`MultiGpu`]) or a device error; [`Device::CudaAt`] (`cuda:N`) the
//!   one on GPU N.
//! - [`Device::Auto`] is the CUDA engine when the driver, NVRTC and cuBLAS load and a device
//!   exists, with every request it does not [`Engine::supports`] (user metrics, f64 values
//!   beyond f32's range, checkpointed graphs of strings) routed to the CPU engine, checkpointed
//!   graphs included; the CPU engine alone otherwise. A GPU that fails to start under auto is
//!   no error (README "Command line").
//! - [`Device::Cpu`] is the CPU engine.
//!
//! Errors are [`voisin::Error`]: invalid input (exit 2 in the CLI) for bad options such as zero
//! threads, device errors (exit 1) for a missing GPU or driver.
//!
//! Where each part lives:
//!
//! | what | where |
//! |---|---|
//! | the trait, requests and their checks, results, `supports`, `Prepared`, `Cancel` | `voisin::engine` |
//! | the CPU engine | `voisin::cpu` |
//! | the engines on one GPU and on several | `voisin_cuda::{CudaEngine, MultiGpu}` |
//! | what each engine supports | its own `Engine::supports` / `IndexEngine::supports` |
//! | the device type and its parser, GPU lists, the GPU pre-check, an MPI rank's device | `device.rs` ([`Device`], [`Gpus`], [`gpu_answers`], [`rank_device`]) |
//! | device choice, options, the auto engine's routing | here ([`open`]) |
//! | the metric indexes' face, its CPU and GPU engines | `voisin_index::face`, `voisin_cuda::index::GpuIndexes` |
//! | the index engine for a device, auto's routing of builds and searches | `indexes.rs` ([`open_indexes`], [`run_indexes`]) |
//! | brute force or which index for a run | `choice.rs` ([`choose_engine`], [`check_engine`]; the measures in `voisin_index::auto`) |
//! | checkpoint format and the graph's schedule | `voisin::graph` |
//! | one engine per MPI rank | here ([`cpu`], [`cuda_on`]), driven by `voisin-mpi` |
//! | every engine held to the reference | `tests/conformance` of this crate |
//!
//! The front ends call [`open`] (the CLI), [`open_shared`] (the Python bindings, which keep
//! prepared bases), [`open_indexes`] (index build and query, Python's metric indexes) or
//! [`cpu`] / [`cuda_on`] (the MPI ranks).

#![warn(missing_docs)]

mod choice;
mod device;
mod indexes;

pub use choice::{check_engine, choose_engine, RunShape};
pub use device::{gpu_answers, gpu_ordinals, rank_device, Device, Gpus};
pub use indexes::{open_indexes, run_indexes};

use std::sync::Arc;

use voisin::cpu::{CpuEngine, CpuOptions, DEFAULT_MEMORY_BUDGET};
use voisin::engine::{Cancel, GraphRequest, KnnRequest, Op, Prepared, ProgressFn, RangeRequest};
use voisin::graph::checkpoint::CheckpointOptions;
use voisin::{Dataset, Engine, KnnResult, Metric, RangeResult, Result};
use voisin_cuda::{CudaEngine, CudaOptions, MultiGpu, Precision, Select};

/// What every engine is built from; each engine takes the fields that concern it.
#[derive(Clone, Default)]
pub struct EngineConfig {
    /// CPU worker threads (default: every core); zero is invalid input.
    pub threads: Option<usize>,
    /// Working-memory budget in bytes: the CPU engine's tiles and candidate buffers (default
    /// [`DEFAULT_MEMORY_BUDGET`]), the CUDA engine's tile bytes (default its own).
    pub memory_budget: Option<usize>,
    /// Called as work advances (units done, units total).
    pub progress: Option<ProgressFn>,
    /// Once set, running calls end with [`Error::Cancelled`].
    pub cancel: Option<Cancel>,
    /// GPU distance arithmetic (`--precision`); the CPU engine ignores it.
    pub precision: Precision,
    /// GPU selection kernel (`--select`); the CPU engine ignores it.
    pub select: Select,
    /// GPUs of the CUDA engine (default GPU 0); the CPU engine ignores it.
    pub gpus: Option<Gpus>,
    /// Device memory each CUDA engine may use (`--gpu-memory`; default: what is free).
    pub device_memory: Option<usize>,
}

/// The engine for a device choice.
pub fn open(device: Device, config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let config = &on_gpus(device, config);
    match device {
        Device::Cpu => Ok(Box::new(cpu(config)?)),
        Device::Cuda | Device::CudaAt(_) => Ok(cuda(config)?),
        Device::Auto if voisin_cuda::gpu_available() => match cuda(config) {
            Ok(gpu) => Ok(Box::new(Routed {
                gpu: Arc::from(gpu),
                cpu: Arc::new(cpu(config)?),
            })),
            Err(_) => Ok(Box::new(cpu(config)?)),
        },
        Device::Auto => Ok(Box::new(cpu(config)?)),
    }
}

/// `config` with the GPUs `device` names (`cuda:N`: GPU N alone).
fn on_gpus(device: Device, config: &EngineConfig) -> EngineConfig {
    EngineConfig {
        gpus: device.gpus(config.gpus.as_ref()),
        ..config.clone()
    }
}

/// [`open`], shared: the form [`Engine::prepare`] takes, for callers that keep prepared bases
/// (the Python bindings).
pub fn open_shared(device: Device, config: &EngineConfig) -> Result<Arc<dyn Engine>> {
    open(device, config).map(Arc::from)
}

/// The CPU engine of `config`.
pub fn cpu(config: &EngineConfig) -> Result<CpuEngine> {
    CpuEngine::new(CpuOptions {
        threads: config.threads,
        memory_budget: config.memory_budget.unwrap_or(DEFAULT_MEMORY_BUDGET),
        progress: config.progress.clone(),
        cancel: config.cancel.clone(),
    })
}

/// The CUDA engine's options for `config`.
pub fn cuda_options(config: &EngineConfig) -> CudaOptions {
    let mut opts = CudaOptions {
        select: config.select,
        precision: config.precision,
        cancel: config.cancel.clone(),
        device_memory: config.device_memory,
        ..CudaOptions::default()
    };
    if let Some(bytes) = config.memory_budget {
        opts.tile_bytes = bytes;
    }
    opts
}

/// The CUDA engine of `config` on GPU `ordinal` alone (an MPI rank's GPU).
pub fn cuda_on(ordinal: usize, config: &EngineConfig) -> Result<CudaEngine> {
    CudaEngine::with_options(ordinal, cuda_options(config))
}

/// The CUDA engine on the GPUs of `config` (GPU 0 by default); a missing driver or device is
/// a device error.
pub fn cuda(config: &EngineConfig) -> Result<Box<dyn Engine>> {
    let devices = gpu_ordinals(config.gpus.as_ref())?;
    let opts = cuda_options(config);
    Ok(match devices[..] {
        [one] => Box::new(CudaEngine::with_options(one, opts)?),
        _ => Box::new(MultiGpu::with_options(&devices, opts)?),
    })
}

/// `auto` with a GPU: what the CUDA engine handles goes to the GPU, the rest to the CPU.
struct Routed {
    gpu: Arc<dyn Engine>,
    cpu: Arc<dyn Engine>,
}

impl Routed {
    /// The GPU takes what it supports, the CPU the rest.
    fn pick(&self, sets: &[&Dataset], metric: &Metric, op: Op) -> &dyn Engine {
        if self.gpu_takes(sets, metric, op) {
            self.gpu.as_ref()
        } else {
            self.cpu.as_ref()
        }
    }

    fn gpu_takes(&self, sets: &[&Dataset], metric: &Metric, op: Op) -> bool {
        sets.iter().all(|d| self.gpu.supports(d, metric, op))
    }
}

impl Engine for Routed {
    fn name(&self) -> String {
        format!("auto: {} / {}", self.gpu.name(), self.cpu.name())
    }

    fn supports(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
        self.gpu.supports(data, metric, op) || self.cpu.supports(data, metric, op)
    }

    fn answering(&self, data: &Dataset, metric: &Metric, op: Op) -> String {
        self.pick(&[data], metric, op).name()
    }

    fn refuses_non_finite(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
        self.pick(&[data], metric, op)
            .refuses_non_finite(data, metric, op)
    }

    fn knn_request(&self, req: &KnnRequest<'_>) -> Result<KnnResult> {
        self.pick(&[req.base(), req.queries()], req.metric(), Op::Knn)
            .knn_request(req)
    }

    fn range_request(&self, req: &RangeRequest<'_>) -> Result<RangeResult> {
        self.pick(&[req.base(), req.queries()], req.metric(), Op::Range)
            .range_request(req)
    }

    fn graph_request(&self, req: &GraphRequest<'_>) -> Result<KnnResult> {
        self.pick(&[req.data()], req.metric(), Op::Graph)
            .graph_request(req)
    }

    fn graph_checkpointed(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        checkpoint: &CheckpointOptions,
    ) -> Result<KnnResult> {
        self.pick(&[data], metric, Op::GraphCheckpointed)
            .graph_checkpointed(data, k, metric, checkpoint)
    }

    /// A base the GPU supports is prepared there (on one GPU: uploaded once); queries it does
    /// not support then go to the CPU with the base. Any other base is the CPU's.
    fn prepare(self: Arc<Self>, base: Arc<Dataset>, metric: &Metric) -> Result<Box<dyn Prepared>> {
        voisin::engine::check_metric(&base, metric)?;
        if !self.gpu_takes(&[&base], metric, Op::Knn) {
            return Arc::clone(&self.cpu).prepare(base, metric);
        }
        Ok(Box::new(RoutedPrepared {
            gpu: Arc::clone(&self.gpu).prepare(Arc::clone(&base), metric)?,
            routed: self,
            base,
        }))
    }
}

/// A base prepared by the auto engine on its GPU, with the CPU for queries the GPU does not
/// support (the routing of [`Routed`]'s own requests, which look at base and queries).
struct RoutedPrepared {
    gpu: Box<dyn Prepared>,
    routed: Arc<Routed>,
    base: Arc<Dataset>,
}

impl RoutedPrepared {
    /// The CPU answers queries that the GPU does not support (with the base, afresh).
    fn cpu_takes(&self, queries: &Dataset, op: Op) -> Option<&dyn Engine> {
        let gpu = self.routed.gpu_takes(&[queries], self.gpu.metric(), op);
        (!gpu).then_some(self.routed.cpu.as_ref())
    }
}

impl Prepared for RoutedPrepared {
    fn knn(&self, queries: &Dataset, k: usize) -> Result<KnnResult> {
        match self.cpu_takes(queries, Op::Knn) {
            Some(cpu) => cpu.knn(&self.base, queries, k, self.gpu.metric()),
            None => self.gpu.knn(queries, k),
        }
    }

    fn range(&self, queries: &Dataset, radius: f64) -> Result<RangeResult> {
        match self.cpu_takes(queries, Op::Range) {
            Some(cpu) => cpu.range(&self.base, queries, radius, self.gpu.metric()),
            None => self.gpu.range(queries, radius),
        }
    }

    fn len(&self) -> usize {
        self.base.len()
    }

    fn metric(&self) -> &Metric {
        self.gpu.metric()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::Error;

    #[test]
    fn devices_parse_and_print_as_the_cli_spells_them() {
        for d in [Device::Auto, Device::Cpu, Device::Cuda] {
            assert_eq!(d.to_string().parse::<Device>(), Ok(d));
        }
        assert_eq!("CUDA".parse::<Device>(), Ok(Device::Cuda));
        assert!("gpu".parse::<Device>().is_err());
    }

    #[test]
    fn gpus_parse_like_the_gpus_option() {
        assert_eq!("all".parse(), Ok(Gpus::All));
        assert_eq!("2".parse(), Ok(Gpus::Count(2)));
        assert_eq!(" 0, 2 ".parse(), Ok(Gpus::Ordinals(vec![0, 2])));
        assert!("0".parse::<Gpus>().is_err());
        assert!("x".parse::<Gpus>().is_err());
    }

    #[test]
    fn the_cpu_takes_its_options_and_refuses_zero_threads() {
        let config = EngineConfig {
            threads: Some(1),
            ..Default::default()
        };
        let engine = open(Device::Cpu, &config).unwrap();
        assert!(engine.name().starts_with("cpu"), "{}", engine.name());
        let zero = EngineConfig {
            threads: Some(0),
            ..Default::default()
        };
        assert!(open(Device::Cpu, &zero).err().unwrap().is_user_error());
    }

    #[test]
    fn the_cpu_supports_what_its_metric_applies_to() {
        let cpu = open(Device::Cpu, &EngineConfig::default()).unwrap();
        let vectors = Dataset::Vectors(voisin::VectorSet::from_f32(1, 2, vec![0.0, 1.0]).unwrap());
        for op in [Op::Knn, Op::Range, Op::Graph] {
            assert!(cpu.supports(&vectors, &Metric::Euclidean, op));
            assert!(!cpu.supports(&vectors, &Metric::Levenshtein, op));
            assert_eq!(cpu.answering(&vectors, &Metric::Euclidean, op), cpu.name());
        }
    }

    #[test]
    fn without_a_gpu_auto_is_the_cpu_and_cuda_a_device_error() {
        if voisin_cuda::gpu_available() {
            return;
        }
        let config = EngineConfig::default();
        let auto = open(Device::Auto, &config).unwrap();
        assert!(auto.name().starts_with("cpu"), "{}", auto.name());
        let err = open(Device::Cuda, &config).err().unwrap();
        assert!(matches!(err, Error::Device(_)), "{err}");
    }

    /// A stand-in for the GPU engine, for routing tests on machines without one: it supports
    /// what the CUDA engine supports (`voisin_cuda::supports`) and answers nothing, naming
    /// itself in the error.
    struct NoGpu;

    impl NoGpu {
        fn refuse<T>(&self) -> Result<T> {
            Err(Error::device("no-gpu was asked"))
        }
    }

    impl Engine for NoGpu {
        fn name(&self) -> String {
            "no-gpu".into()
        }

        fn supports(&self, data: &Dataset, metric: &Metric, op: Op) -> bool {
            voisin_cuda::supports(data, metric, op)
        }

        fn knn_request(&self, _: &KnnRequest<'_>) -> Result<KnnResult> {
            self.refuse()
        }

        fn range_request(&self, _: &RangeRequest<'_>) -> Result<RangeResult> {
            self.refuse()
        }

        fn graph_request(&self, _: &GraphRequest<'_>) -> Result<KnnResult> {
            self.refuse()
        }

        fn graph_checkpointed(
            &self,
            _: &Dataset,
            _: usize,
            _: &Metric,
            _: &CheckpointOptions,
        ) -> Result<KnnResult> {
            self.refuse()
        }
    }

    fn routed() -> Routed {
        let one = EngineConfig {
            threads: Some(1),
            ..Default::default()
        };
        Routed {
            gpu: Arc::new(NoGpu),
            cpu: Arc::new(cpu(&one).unwrap()),
        }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("voisin-engines-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn auto_prepares_on_the_gpu_what_it_supports_and_on_the_cpu_the_rest() {
        let auto: Arc<dyn Engine> = Arc::new(routed());
        let values: Vec<f32> = (0..40).map(|i| ((i * 7) % 11) as f32).collect();
        let base = Arc::new(Dataset::Vectors(
            voisin::VectorSet::from_f32(20, 2, values).unwrap(),
        ));
        let queries = Dataset::Vectors(
            voisin::VectorSet::from_f32(3, 2, vec![0., 1., 5., 5., 9., 2.]).unwrap(),
        );
        // A base the GPU supports is prepared there (the stand-in answers nothing).
        let on_gpu = Arc::clone(&auto)
            .prepare(Arc::clone(&base), &Metric::Euclidean)
            .unwrap();
        let err = on_gpu.knn(&queries, 2).unwrap_err().to_string();
        assert!(err.contains("no-gpu"), "{err}");
        assert_eq!(on_gpu.len(), 20);
        // A user metric is the CPU's: its prepared base answers as the CPU engine does.
        let l1 = |a: &[f32], b: &[f32]| -> f64 {
            a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).sum()
        };
        let m = Metric::Custom(voisin::metric::CustomMetric::for_vectors("l1", l1));
        let on_cpu = Arc::clone(&auto).prepare(Arc::clone(&base), &m).unwrap();
        let one = EngineConfig {
            threads: Some(1),
            ..Default::default()
        };
        let want = cpu(&one).unwrap().knn(&base, &queries, 4, &m).unwrap();
        let got = on_cpu.knn(&queries, 4).unwrap();
        assert_eq!((got.indices, got.distances), (want.indices, want.distances));
    }

    #[test]
    fn auto_routes_checkpointed_graphs_the_gpu_cannot_build_to_the_cpu() {
        let auto = routed();
        // f64 values beyond f32's range under minkowski's power sum (which no power of two
        // scales exactly): the GPU refuses them, the CPU answers.
        let m = Metric::Minkowski(3.0);
        let values: Vec<f64> = (0..40).map(|i| 1e39 + f64::from(i) * 1e30).collect();
        let wide = Dataset::Vectors(voisin::VectorSet::from_f64(20, 2, values).unwrap());
        assert_eq!(
            auto.answering(&wide, &m, Op::GraphCheckpointed),
            "cpu (1 thread)"
        );
        let dir = scratch("f64");
        let got = auto
            .graph_checkpointed(&wide, 3, &m, &CheckpointOptions::new(&dir, false))
            .unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(got.indices, auto.cpu.graph(&wide, 3, &m).unwrap().indices);
        // Strings under levenshtein: the GPU builds their graph, the CPU their checkpointed one.
        let words = Dataset::Strings(voisin::StringSet::from_strings(["ab", "b", "abc"]).unwrap());
        let lev = Metric::Levenshtein;
        assert_eq!(auto.answering(&words, &lev, Op::Graph), "no-gpu");
        assert_eq!(
            auto.answering(&words, &lev, Op::GraphCheckpointed),
            "cpu (1 thread)"
        );
        let dir = scratch("words");
        auto.graph_checkpointed(&words, 1, &lev, &CheckpointOptions::new(&dir, false))
            .unwrap();
        std::fs::remove_dir_all(&dir).ok();
        // What the GPU supports goes to the GPU, checkpointed or not.
        let narrow =
            Dataset::Vectors(voisin::VectorSet::from_f32(3, 1, vec![0.0, 1.0, 3.0]).unwrap());
        assert_eq!(auto.answering(&narrow, &m, Op::GraphCheckpointed), "no-gpu");
        let dir = scratch("f32");
        let err = auto
            .graph_checkpointed(&narrow, 1, &m, &CheckpointOptions::new(&dir, false))
            .unwrap_err();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(
            err.to_string(),
            Error::device("no-gpu was asked").to_string()
        );
    }
}
