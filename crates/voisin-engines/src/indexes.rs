//! The index side of the factory: a device choice and the engine options in, an
//! [`IndexEngine`] out (the one face of the metric indexes, `voisin_index::face`).
//!
//! - [`Device::Cpu`]: the CPU's index engine on `--threads` workers.
//! - [`Device::Cuda`] / [`Device::CudaAt`]: the GPUs' (`voisin_cuda::index::GpuIndexes`) on the
//!   GPUs of [`EngineConfig::gpus`] under [`EngineConfig::device_memory`]: builds on the first,
//!   searches on all (1-Stage over several). The GPUs open at the first work, so a missing GPU
//!   is a device error then, after the inputs were read.
//! - [`Device::Auto`]: both, and each request to the GPU when a GPU is usable and opens, the
//!   GPU supports the request, and, for a build, auto's cost model says the GPU pays
//!   (`voisin_index::auto::gpu_build_pays`); the CPU takes the rest. A GPU opens only for work
//!   it takes; one that fails to open is no error.

use voisin::{Dataset, KnnResult, Metric, RangeResult, Result};
use voisin_cuda::index::GpuIndexes;
use voisin_cuda::CudaEngine;
use voisin_index::{CpuIndexes, DatasetIndex, IndexEngine, IndexOp, Kind, Params, Searched};

use crate::{cuda_options, gpu_ordinals, Device, EngineConfig};

/// The index engine for a device choice.
pub fn open_indexes(device: Device, config: &EngineConfig) -> Result<Box<dyn IndexEngine>> {
    let cpu = || CpuIndexes::new(config.threads);
    Ok(match device {
        Device::Cpu => Box::new(cpu()?),
        Device::Cuda | Device::CudaAt(_) => Box::new(gpus(device, config)),
        Device::Auto => Box::new(RoutedIndexes {
            gpu: voisin_cuda::gpu_available().then(|| gpus(device, config)),
            cpu: cpu()?,
        }),
    })
}

/// The index engine of an index built for one knn, range or graph run (`--engine
/// lc|sss|cover|kd`, or what auto chose, [`crate::choose_engine`]): the CPU's, on `--threads`
/// workers (auto takes an index only where no GPU runs brute force, and a fixed index refuses
/// `--device cuda`, [`crate::check_engine`]).
pub fn run_indexes(config: &EngineConfig) -> Result<Box<dyn IndexEngine>> {
    open_indexes(Device::Cpu, config)
}

/// The GPUs' index engine of `device` and `config`, opened at its first work.
fn gpus(device: Device, config: &EngineConfig) -> GpuIndexes<'static> {
    let gpus = device.gpus(config.gpus.as_ref());
    let opts = cuda_options(config);
    GpuIndexes::deferred(move || {
        gpu_ordinals(gpus.as_ref())?
            .into_iter()
            .map(|o| CudaEngine::with_options(o, opts.clone()))
            .collect()
    })
}

/// `auto`: each request to the GPUs when they take it, else to the CPU.
struct RoutedIndexes {
    /// None when no GPU is usable on this machine.
    gpu: Option<GpuIndexes<'static>>,
    cpu: CpuIndexes,
}

impl RoutedIndexes {
    /// The engine that answers `op`: the GPUs when they support it (for a build: and it pays
    /// on this many CPU threads) and open, else the CPU. Errors of work the GPU takes are real.
    fn pick(&self, op: &IndexOp<'_>) -> &dyn IndexEngine {
        match &self.gpu {
            Some(gpu) if self.gpu_takes(gpu, op) && gpu.ready() => gpu,
            _ => &self.cpu,
        }
    }

    fn gpu_takes(&self, gpu: &GpuIndexes<'_>, op: &IndexOp<'_>) -> bool {
        gpu.supports(op)
            && match *op {
                IndexOp::Build {
                    data,
                    metric,
                    kind,
                    params,
                } => voisin_index::auto::gpu_build_pays(
                    data,
                    metric,
                    kind,
                    params,
                    self.cpu.threads(),
                ),
                IndexOp::Search { .. } => true,
            }
    }
}

impl IndexEngine for RoutedIndexes {
    fn name(&self) -> String {
        match &self.gpu {
            Some(gpu) => format!("auto: {} / {}", gpu.name(), self.cpu.name()),
            None => self.cpu.name(),
        }
    }

    fn supports(&self, op: &IndexOp<'_>) -> bool {
        self.cpu.supports(op) || self.gpu.as_ref().is_some_and(|g| g.supports(op))
    }

    fn answering(&self, op: &IndexOp<'_>) -> String {
        self.pick(op).answering(op)
    }

    fn build(
        &self,
        data: &Dataset,
        metric: Metric,
        kind: Kind,
        params: &Params,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<DatasetIndex> {
        let op = IndexOp::Build {
            data,
            metric: &metric,
            kind,
            params,
        };
        let engine = self.pick(&op);
        engine.build(data, metric, kind, params, progress)
    }

    fn knn(
        &self,
        index: &DatasetIndex,
        queries: &Dataset,
        k: usize,
    ) -> Result<Searched<KnnResult>> {
        self.pick(&IndexOp::Search { index, queries })
            .knn(index, queries, k)
    }

    fn range(
        &self,
        index: &DatasetIndex,
        queries: &Dataset,
        radius: f64,
    ) -> Result<Searched<RangeResult>> {
        self.pick(&IndexOp::Search { index, queries })
            .range(index, queries, radius)
    }

    fn graph(&self, index: &DatasetIndex, data: &Dataset, k: usize) -> Result<KnnResult> {
        self.pick(&IndexOp::Search {
            index,
            queries: data,
        })
        .graph(index, data, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin::{StringSet, VectorSet};

    fn one_thread() -> EngineConfig {
        EngineConfig {
            threads: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn the_cpu_index_engine_builds_and_answers_as_the_index_itself() {
        let engine = open_indexes(Device::Cpu, &one_thread()).unwrap();
        assert_eq!(engine.name(), "cpu");
        let v: Dataset = VectorSet::from_f32(6, 1, vec![0., 1., 3., 3., 7., 8.])
            .unwrap()
            .into();
        for kind in Kind::EVERY {
            let p = Params::default();
            let index = engine
                .build(&v, Metric::Euclidean, kind, &p, &|_| {})
                .unwrap();
            let direct = DatasetIndex::build(&v, Metric::Euclidean, kind, &p).unwrap();
            let (got, want) = (
                engine.knn(&index, &v, 3).unwrap().result,
                direct.knn(&v, 3).unwrap(),
            );
            assert_eq!((got.indices, got.distances), (want.indices, want.distances));
        }
    }

    #[test]
    fn without_a_gpu_auto_indexes_on_the_cpu_and_cuda_fails_at_its_first_work() {
        if voisin_cuda::gpu_available() {
            return;
        }
        let words: Dataset = StringSet::from_strings(["ab", "b", "abc", "abd"])
            .unwrap()
            .into();
        let p = Params::default();
        let op = IndexOp::Build {
            data: &words,
            metric: &Metric::Levenshtein,
            kind: Kind::Lc,
            params: &p,
        };
        let auto = open_indexes(Device::Auto, &one_thread()).unwrap();
        assert_eq!(auto.answering(&op), "cpu");
        let index = auto
            .build(&words, Metric::Levenshtein, Kind::Lc, &p, &|_| {})
            .unwrap();
        assert_eq!(auto.graph(&index, &words, 1).unwrap().k, 1);
        // Opening the GPUs waits for the first work, and fails then as a device error.
        let cuda = open_indexes(Device::Cuda, &one_thread()).unwrap();
        assert_eq!(cuda.name(), "cuda");
        let err = cuda
            .build(&words, Metric::Levenshtein, Kind::Lc, &p, &|_| {})
            .err()
            .unwrap();
        assert!(!err.is_user_error(), "{err}");
        assert!(cuda.knn(&index, &words, 1).is_err());
    }

    #[test]
    fn zero_threads_is_a_user_error() {
        let zero = EngineConfig {
            threads: Some(0),
            ..Default::default()
        };
        for device in [Device::Cpu, Device::Auto] {
            assert!(open_indexes(device, &zero).err().unwrap().is_user_error());
        }
    }
}
