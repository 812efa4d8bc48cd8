//! Device selection: turns `--device auto|cpu|cuda` and the engine options into one
//! `Box<dyn Engine>`. This is the only place that knows which engines the binary contains; the
//! rest of the CLI talks to the `Engine` trait.
//!
//! Plugging in the CUDA engine (crate `voisin-cuda`) means filling in [`cuda_engine`] and
//! [`gpu_usable`]; nothing else changes.

use voisin::cpu::{CpuEngine, CpuOptions, DEFAULT_MEMORY_BUDGET};
use voisin::engine::ProgressFn;
use voisin::Engine;

use crate::args::DeviceChoice;
use crate::error::CliError;

/// What every engine is built from.
#[derive(Clone, Default)]
pub struct EngineConfig {
    pub threads: Option<usize>,
    pub memory_budget: Option<usize>,
    pub progress: Option<ProgressFn>,
}

/// The engine for a `--device` choice.
pub fn select(choice: DeviceChoice, config: &EngineConfig) -> Result<Box<dyn Engine>, CliError> {
    match choice {
        DeviceChoice::Cpu => cpu_engine(config),
        DeviceChoice::Cuda => cuda_engine(config),
        // Under auto a GPU that fails to start is not an error (SPEC §6): fall back to the CPU.
        DeviceChoice::Auto if gpu_usable() => cuda_engine(config).or_else(|_| cpu_engine(config)),
        DeviceChoice::Auto => cpu_engine(config),
    }
}

fn cpu_engine(config: &EngineConfig) -> Result<Box<dyn Engine>, CliError> {
    let engine = CpuEngine::new(CpuOptions {
        threads: config.threads,
        memory_budget: config.memory_budget.unwrap_or(DEFAULT_MEMORY_BUDGET),
        progress: config.progress.clone(),
    })
    .map_err(|e| CliError::core(e, None))?;
    Ok(Box::new(engine))
}

/// Whether `auto` should try a GPU. The rule once `voisin-cuda` is linked in: the CUDA driver
/// library loads (`cudarc::driver::sys::is_culib_present()`) and reports at least one device.
fn gpu_usable() -> bool {
    false
}

/// The CUDA engine. Not linked into this binary yet: `voisin-cuda` plugs in here.
fn cuda_engine(_config: &EngineConfig) -> Result<Box<dyn Engine>, CliError> {
    Err(CliError::internal("cuda engine not built into this binary"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_auto_give_the_cpu_engine_and_cuda_fails_with_exit_code_1() {
        let config = EngineConfig {
            threads: Some(1),
            ..Default::default()
        };
        for choice in [DeviceChoice::Cpu, DeviceChoice::Auto] {
            let engine = select(choice, &config).unwrap();
            assert!(engine.name().starts_with("cpu"), "{}", engine.name());
        }
        let err = select(DeviceChoice::Cuda, &config).err().unwrap();
        assert_eq!(err.exit_code(), 1);
        assert_eq!(err.to_string(), "cuda engine not built into this binary");
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
