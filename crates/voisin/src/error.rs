//! The core crate's error type. Callers (the CLI) add file names; engines say what is wrong with
//! the request itself. `is_user_error` tells bad input (exit 2) from internal or device failure
//! (exit 1).

use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum Error {
    /// The request or the data is not valid: wrong k, radius, metric for the data, shapes.
    #[error("{0}")]
    InvalidInput(String),
    /// A device (GPU, MPI) failed or is missing.
    #[error("{0}")]
    Device(String),
    /// A device ran out of memory: the one device failure that a retry with a smaller working
    /// set may get past.
    #[error("{0}")]
    OutOfMemory(String),
    /// An I/O failure while reading or writing data.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }

    pub fn device(msg: impl Into<String>) -> Self {
        Error::Device(msg.into())
    }

    /// True for errors caused by the caller's input (CLI exit code 2).
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::InvalidInput(_))
    }
}
