//! Where the work runs: `--device` (the factory's one [`Device`] type) and the engine options go
//! to the engine factory (`voisin-engines`), whose errors become the CLI's one-line errors with
//! their exit codes; `--threads` also sizes the worker pool of the index commands.

use voisin::{Engine, Error};
pub use voisin_engines::{Device, EngineConfig};

use crate::error::CliError;

/// The engine for a `--device` choice.
pub fn select(choice: Device, config: &EngineConfig) -> Result<Box<dyn Engine>, CliError> {
    voisin_engines::open(choice, config).map_err(|e| CliError::core(e, None))
}

/// The worker threads of the index commands (reading inputs included; the index engines keep
/// pools of the same size): `--threads`, every core by default; zero is a user error.
pub fn thread_pool(threads: Option<usize>) -> Result<rayon::ThreadPool, CliError> {
    if threads == Some(0) {
        return Err(CliError::core(
            Error::invalid("--threads must be at least 1"),
            None,
        ));
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| CliError::internal(format!("cannot start worker threads: {e}")))
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
        let choices: &[Device] = if voisin_cuda::gpu_available() {
            &[Device::Cpu]
        } else {
            &[Device::Cpu, Device::Auto]
        };
        for &choice in choices {
            let engine = select(choice, &config).unwrap();
            assert!(engine.name().starts_with("cpu"), "{}", engine.name());
        }
        if !voisin_cuda::gpu_available() {
            let err = select(Device::Cuda, &config).err().unwrap();
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
        assert_eq!(select(Device::Cpu, &config).err().unwrap().exit_code(), 2);
    }
}
