//! Brute force or which metric index answers one knn, range or graph run (`--engine
//! auto|brute|lc|sss|cover|kd`), for the device chosen: the factory's one place for it. The
//! measure behind `auto` (the intrinsic dimension, what an index's build costs) is voisin-index's
//! chooser (`voisin_index::auto`); what the device contributes to it is decided here.

use voisin::{Dataset, Error, Metric, Result};
use voisin_index::auto::{self, Decision, EngineChoice, Workload};
use voisin_index::Params;

use crate::Device;

/// What a run asks, besides its data.
#[derive(Clone, Copy, Debug)]
pub struct RunShape {
    /// Queries to answer (the item count for a graph).
    pub queries: usize,
    /// A range search.
    pub range: bool,
    /// A checkpointed graph (these run brute force).
    pub checkpointed: bool,
}

/// Before any input is read: a fixed index runs on the CPU, without checkpoints, under a true
/// metric; anything else is invalid input naming the clash.
pub fn check_engine(
    device: Device,
    choice: EngineChoice,
    metric: &Metric,
    checkpointed: bool,
) -> Result<()> {
    let EngineChoice::Fixed(auto::Engine::Index(kind)) = choice else {
        return Ok(());
    };
    let clash = if device.is_cuda() {
        Some("--device cuda")
    } else if checkpointed {
        Some("--checkpoint")
    } else {
        None
    };
    match clash {
        Some(flag) => Err(Error::invalid(format!(
            "--engine {kind} runs on the CPU without checkpoints and cannot go with {flag} \
             (use --engine brute or auto)"
        ))),
        None => voisin_index::space::check_metric(metric),
    }
}

/// The engine of a run over `base`: checkpointed graphs run brute force; otherwise auto's
/// chooser decides, told whether brute force would run on a GPU (`cuda`, or `auto` on a
/// machine where one is usable). An index it picks is built with the default parameters by
/// [`crate::run_indexes`].
pub fn choose_engine(
    device: Device,
    choice: EngineChoice,
    base: &Dataset,
    metric: &Metric,
    shape: RunShape,
) -> Result<Decision> {
    if shape.checkpointed {
        return Ok(Decision {
            engine: auto::Engine::Brute,
            reason: "checkpointed graphs run brute force".into(),
            intrinsic_dim: None,
        });
    }
    let gpu = match device {
        Device::Cuda | Device::CudaAt(_) => true,
        Device::Auto => voisin_cuda::gpu_available(),
        Device::Cpu => false,
    };
    let work = Workload {
        queries: shape.queries,
        gpu,
        range: shape.range,
    };
    auto::decide(choice, base, metric, work, &Params::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use voisin_index::Kind;

    fn cover() -> EngineChoice {
        EngineChoice::Fixed(auto::Engine::Index(Kind::Cover))
    }

    #[test]
    fn a_fixed_index_refuses_the_gpu_checkpoints_and_non_metrics() {
        let e = Metric::Euclidean;
        assert!(check_engine(Device::Cpu, cover(), &e, false).is_ok());
        assert!(check_engine(Device::Auto, cover(), &e, false).is_ok());
        let err = check_engine(Device::Cuda, cover(), &e, false).unwrap_err();
        assert!(err.to_string().contains("--device cuda"), "{err}");
        let err = check_engine(Device::Cpu, cover(), &e, true).unwrap_err();
        assert!(err.to_string().contains("--checkpoint"), "{err}");
        let err = check_engine(Device::Cpu, cover(), &Metric::Cosine, false).unwrap_err();
        assert!(err.to_string().contains("triangle inequality"), "{err}");
        assert!(check_engine(Device::Cuda, EngineChoice::Auto, &Metric::Cosine, true).is_ok());
    }

    #[test]
    fn checkpointed_graphs_and_gpus_take_brute_force() {
        let values: Vec<f32> = (0..4000).map(|i| (i % 97) as f32).collect();
        let base: Dataset = voisin::VectorSet::from_f32(2000, 2, values).unwrap().into();
        let shape = RunShape {
            queries: 2000,
            range: false,
            checkpointed: true,
        };
        let d = choose_engine(
            Device::Cpu,
            EngineChoice::Auto,
            &base,
            &Metric::Euclidean,
            shape,
        );
        assert_eq!(d.unwrap().engine, auto::Engine::Brute);
        let shape = RunShape {
            checkpointed: false,
            ..shape
        };
        let d = choose_engine(
            Device::Cuda,
            EngineChoice::Auto,
            &base,
            &Metric::Euclidean,
            shape,
        );
        assert_eq!(d.unwrap().engine, auto::Engine::Brute);
        let d = choose_engine(
            Device::Cpu,
            EngineChoice::Auto,
            &base,
            &Metric::Euclidean,
            shape,
        );
        assert_eq!(d.unwrap().engine, auto::Engine::Index(Kind::Kd));
    }
}
