//! The one device type of the workspace, parsed once: [`Device`] (`auto`, `cpu`, `cuda`,
//! `cuda:N`) and [`Gpus`] (`--gpus`), used by the CLI, the MPI binary and the Python bindings;
//! and the device questions only the factory answers: which GPUs a choice names
//! ([`gpu_ordinals`]), whether the CUDA engine answers a request before any GPU opens
//! ([`gpu_answers`]), and what an MPI rank computes on ([`rank_device`]).

use std::fmt;
use std::str::FromStr;

use voisin::engine::Op;
use voisin::{Dataset, Error, Metric, Result};

/// Where the work runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// A GPU for what it supports when one is usable, else the CPU.
    #[default]
    Auto,
    /// The CPU engine.
    Cpu,
    /// The CUDA engine on the GPUs of [`crate::EngineConfig::gpus`] (GPU 0 by default).
    Cuda,
    /// The CUDA engine on GPU N alone (`cuda:N`), whatever `EngineConfig::gpus` says.
    CudaAt(usize),
}

impl Device {
    /// Whether the choice names the GPU (`cuda` or `cuda:N`).
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda | Device::CudaAt(_))
    }

    /// The GPUs this choice runs on: GPU N for `cuda:N`, else `gpus` (the configured list).
    pub fn gpus(self, gpus: Option<&Gpus>) -> Option<Gpus> {
        match self {
            Device::CudaAt(n) => Some(Gpus::Ordinals(vec![n])),
            _ => gpus.cloned(),
        }
    }
}

impl FromStr for Device {
    type Err = String;

    /// `auto`, `cpu`, `cuda` or `cuda:N` (any case).
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        match t.as_str() {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(Device::CudaAt(n)),
                _ => Err(format!(
                    "unknown device '{text}' (known: auto, cpu, cuda, cuda:N)"
                )),
            },
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda => f.write_str("cuda"),
            Device::CudaAt(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The GPUs of the CUDA engine (`--gpus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gpus {
    /// Every GPU the driver sees.
    All,
    /// The first N.
    Count(usize),
    /// These ordinals, in this order (repeats allowed: two engines share that GPU).
    Ordinals(Vec<usize>),
}

impl FromStr for Gpus {
    type Err = String;

    /// `all`, a count such as `2`, or a list of ordinals such as `0,2`.
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        let t = text.trim();
        let bad = || format!("'{text}' is not all, a GPU count or a list of GPU ordinals like 0,2");
        if t.eq_ignore_ascii_case("all") {
            return Ok(Gpus::All);
        }
        if !t.contains(',') {
            return match t.parse::<usize>() {
                Ok(0) => Err("a GPU count must be at least 1".into()),
                Ok(n) => Ok(Gpus::Count(n)),
                Err(_) => Err(bad()),
            };
        }
        t.split(',')
            .map(|p| p.trim().parse::<usize>().map_err(|_| bad()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Gpus::Ordinals)
    }
}

/// The GPU ordinals `gpus` names (GPU 0 when `None`), never empty; more than the machine has
/// is a device error.
pub fn gpu_ordinals(gpus: Option<&Gpus>) -> Result<Vec<usize>> {
    let found = voisin_cuda::device_count();
    let list = match gpus {
        None => vec![0],
        Some(Gpus::All) => (0..found.max(1)).collect(),
        Some(Gpus::Count(n)) if *n > found => {
            return Err(Error::device(format!(
                "cuda: --gpus {n} asks for more GPUs than the {found} found"
            )));
        }
        Some(Gpus::Count(0)) => return Err(Error::invalid("a GPU count must be at least 1")),
        Some(Gpus::Count(n)) => (0..*n).collect(),
        Some(Gpus::Ordinals(v)) if v.is_empty() => {
            return Err(Error::invalid("the list of GPU ordinals is empty"))
        }
        Some(Gpus::Ordinals(v)) => v.clone(),
    };
    Ok(list)
}

/// Whether the CUDA engine answers `op` over `data` under `metric`, known before any GPU opens
/// (the Python bindings refuse the rest under `cuda` with the same line on every machine).
/// Values the tiles cannot hold (f64 values beyond f32's range, keys beyond f32's or f64's
/// range: [`voisin_cuda::tiles_hold`]) count as answered: the CUDA engine's own refusal names
/// them.
pub fn gpu_answers(data: &Dataset, metric: &Metric, op: Op) -> bool {
    // `supports` first: the values are scanned a second time only for a set it refuses.
    voisin_cuda::supports(data, metric, op)
        || data
            .as_vectors()
            .is_some_and(|v| !voisin_cuda::tiles_hold(v, metric))
}

/// What an MPI rank computes on for `device` (`cpu` or `cuda`: the rank's own GPU) under
/// `metric`: the GPU ranks take vectors only.
pub fn rank_device(device: Device, metric: &Metric) -> Result<Device> {
    if device.is_cuda() && *metric == Metric::Levenshtein {
        return Err(Error::invalid(
            "--device cuda takes vectors; use --device cpu for strings",
        ));
    }
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_gpu_by_ordinal_parses_prints_and_names_its_gpu() {
        assert_eq!("cuda:2".parse(), Ok(Device::CudaAt(2)));
        assert_eq!(" CUDA:0 ".parse(), Ok(Device::CudaAt(0)));
        assert_eq!(Device::CudaAt(3).to_string(), "cuda:3");
        for text in ["cuda:", "cuda:x", "cuda:-1", "tpu"] {
            let err = text.parse::<Device>().unwrap_err();
            assert_eq!(
                err,
                format!("unknown device '{text}' (known: auto, cpu, cuda, cuda:N)")
            );
        }
        let two = Gpus::Ordinals(vec![0, 1]);
        assert_eq!(
            Device::CudaAt(1).gpus(Some(&two)),
            Some(Gpus::Ordinals(vec![1]))
        );
        assert_eq!(Device::Cuda.gpus(Some(&two)), Some(two.clone()));
        assert_eq!(Device::Auto.gpus(None), None);
        assert!(Device::CudaAt(0).is_cuda() && Device::Cuda.is_cuda());
        assert!(!Device::Auto.is_cuda() && !Device::Cpu.is_cuda());
    }

    #[test]
    fn gpu_ranks_take_vectors_only() {
        assert_eq!(
            rank_device(Device::Cuda, &Metric::Euclidean).ok(),
            Some(Device::Cuda)
        );
        assert_eq!(
            rank_device(Device::Cpu, &Metric::Levenshtein).ok(),
            Some(Device::Cpu)
        );
        let err = rank_device(Device::Cuda, &Metric::Levenshtein).unwrap_err();
        assert!(err.is_user_error());
        assert_eq!(
            err.to_string(),
            "--device cuda takes vectors; use --device cpu for strings"
        );
    }

    #[test]
    fn the_gpu_pre_check_refuses_user_metrics_and_takes_far_f64_values() {
        let v = Dataset::Vectors(voisin::VectorSet::from_f32(2, 1, vec![0.0, 1.0]).unwrap());
        assert!(gpu_answers(&v, &Metric::Euclidean, Op::Knn));
        let l1 = |a: &[f32], b: &[f32]| -> f64 { f64::from((a[0] - b[0]).abs()) };
        let user = Metric::Custom(voisin::metric::CustomMetric::for_vectors("l1", l1));
        assert!(!gpu_answers(&v, &user, Op::Knn));
        let far = Dataset::Vectors(voisin::VectorSet::from_f64(2, 1, vec![1e39, 0.0]).unwrap());
        assert!(gpu_answers(&far, &user, Op::Knn));
        // Keys beyond f32's range: answered on a copy at a power of two where the metric's
        // keys scale exactly, else by the engine's own refusal, which names them.
        let big = Dataset::Vectors(voisin::VectorSet::from_f32(2, 1, vec![3e38, 0.0]).unwrap());
        assert!(voisin_cuda::supports(&big, &Metric::Euclidean, Op::Knn));
        let cube = Metric::Minkowski(3.0);
        assert!(!voisin_cuda::supports(&big, &cube, Op::Knn));
        assert!(gpu_answers(&big, &cube, Op::Knn));
    }
}
