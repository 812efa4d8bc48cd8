//! One conformance suite for every engine, through `&dyn Engine` (issue 10, "Done when"): the
//! same scenarios run against each engine the factory opens, and every answer is compared with
//! the plain f64 reference (`voisin::reference`): the same ids in the same order (ties to the
//! smaller index) and the same distances (bit for bit where the CPU answers, within the f32
//! rounding of the exact value where a GPU does).
//!
//! Scenarios: k-NN, range and graph on random and adversarial data (ties, duplicate and zero
//! rows, dimensions 1, 3, 127 and 1025, sizes no multiple of any tile); element types f32, f16,
//! bf16, u8 and f64 (exactly f32 and not); strings; edge shapes (k = n − 1, k > n, k = 0, empty
//! queries, one item); every metric on every kind of data and every operation, where an
//! engine that does not [`voisin::Engine::supports`] a request must refuse it as invalid input;
//! checkpointed graphs stopped and resumed, on the engine itself and across it and the CPU;
//! prepared bases searched batch after batch; cancellation; every item tied at the k-th
//! distance (`voisin::ties`) through the engine, a prepared base and a checkpointed graph.
//!
//! Engines: the CPU engine (1 thread with a 64 KiB budget, and 3 threads) and the factory's
//! auto engine run in CI. The CUDA engine on GPU 0, two engines sharing GPU 0 (`MultiGpu`) and
//! the CUDA engine with a 1 MiB tile budget run the same scenarios as tests ignored without a
//! GPU: `cargo test -p voisin-engines --test conformance -- --include-ignored` (staged by
//! `bench/gpu/stage-cuda`, run by `scripts/gpu-check tests`). On a machine with a GPU the auto
//! engine is the GPU with the CPU behind it.

mod check;
mod data;
mod graph;
mod seam;
mod search;
mod ties;

use std::sync::Arc;

use voisin::Engine;
use voisin_engines::{open_shared, Device, EngineConfig, Gpus};

/// An engine under test: how to open it from a configuration (progress and cancellation come
/// from the scenario; each subject adds its own threads, budget or GPUs).
pub struct Subject {
    pub name: &'static str,
    open: fn(EngineConfig) -> voisin::Result<Arc<dyn Engine>>,
}

impl Subject {
    pub fn open(&self) -> Arc<dyn Engine> {
        self.open_with(EngineConfig::default())
    }

    pub fn open_with(&self, config: EngineConfig) -> Arc<dyn Engine> {
        (self.open)(config).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }
}

/// The engines every machine has.
pub fn cpu_subjects() -> Vec<Subject> {
    vec![
        Subject {
            name: "cpu, 1 thread, 64 KiB",
            open: |c| {
                let config = EngineConfig {
                    threads: Some(1),
                    memory_budget: Some(64 << 10),
                    ..c
                };
                open_shared(Device::Cpu, &config)
            },
        },
        Subject {
            name: "cpu, 3 threads",
            open: |c| {
                let config = EngineConfig {
                    threads: Some(3),
                    ..c
                };
                open_shared(Device::Cpu, &config)
            },
        },
        Subject {
            name: "auto",
            open: |c| open_shared(Device::Auto, &c),
        },
    ]
}

/// The engines of a machine with a CUDA GPU.
pub fn gpu_subjects() -> Vec<Subject> {
    vec![
        Subject {
            name: "cuda:0",
            open: |c| open_shared(Device::Cuda, &c),
        },
        Subject {
            name: "cuda:0,0",
            open: |c| {
                let config = EngineConfig {
                    gpus: Some(Gpus::Ordinals(vec![0, 0])),
                    ..c
                };
                open_shared(Device::Cuda, &config)
            },
        },
        Subject {
            name: "cuda:0, 1 MiB tiles",
            open: |c| {
                let config = EngineConfig {
                    memory_budget: Some(1 << 20),
                    ..c
                };
                open_shared(Device::Cuda, &config)
            },
        },
    ]
}

/// The scenarios, one test each, over one group of subjects.
macro_rules! suite {
    ($group:ident, $subjects:path $(, #[$attr:meta])*) => {
        mod $group {
            $(#[$attr])*
            #[test]
            fn random_and_adversarial_vectors() {
                crate::search::random_and_adversarial(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn element_types() {
                crate::search::element_types(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn strings() {
                crate::search::strings(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn edge_shapes() {
                crate::search::edge_shapes(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn every_metric_on_every_kind_and_op() {
                crate::seam::every_metric_on_every_kind_and_op(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn checkpointed_graphs_stop_and_resume() {
                crate::graph::stop_and_resume(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn prepared_bases() {
                crate::seam::prepared(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn prepared_bases_of_several_tiles() {
                crate::seam::prepared_tiles(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn ties_on_request() {
                crate::ties::tie_heavy(&$subjects());
            }

            $(#[$attr])*
            #[test]
            fn cancel() {
                crate::seam::cancel(&$subjects());
            }
        }
    };
}

suite!(cpu, crate::cpu_subjects);
suite!(gpu, crate::gpu_subjects, #[ignore = "needs a CUDA GPU"]);
