//! The core crate's error type. Callers (the CLI) add file names; engines say what is wrong with
//! the request itself. `is_user_error` tells bad input (exit 2) from internal or device failure
//! (exit 1).

use thiserror::Error;

/// The crate's result type: `E` defaults to [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a voisin call can fail with; [`Error::is_user_error`] sorts the caller's mistakes
/// (CLI exit code 2) from failures of the machine or device (exit code 1).
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
    /// The caller cancelled the work through its [`crate::engine::Cancel`] token.
    #[error("cancelled")]
    Cancelled,
}

impl Error {
    /// An [`Error::InvalidInput`] carrying `msg`, the one-line message shown to the user.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }

    /// An [`Error::Device`] carrying `msg`: a device, thread pool or other resource failed.
    pub fn device(msg: impl Into<String>) -> Self {
        Error::Device(msg.into())
    }

    /// True for errors caused by the caller's input (CLI exit code 2).
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::InvalidInput(_) => true,
            Error::Io(e) => is_user_io_error(e),
            Error::Device(_) | Error::OutOfMemory(_) | Error::Cancelled => false,
        }
    }

    /// True when the caller cancelled the work (the CLI treats it as an interrupt).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled)
    }
}

/// The one table of exit codes for operating-system errors: the path the user gave is at fault
/// (exit code 2) when it is missing, forbidden, of the wrong kind (folder, not a folder, read-only
/// file system), a symbolic-link loop or too long; anything else (full disk or quota, file size
/// limit, hardware, interrupted) is the machine's (exit code 1), for every command alike.
pub fn is_user_io_error(err: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    if matches!(
        err.kind(),
        NotFound
            | PermissionDenied
            | AlreadyExists
            | InvalidInput
            | InvalidData
            | UnexpectedEof
            | NotADirectory
            | IsADirectory
            | ReadOnlyFilesystem
            | InvalidFilename
    ) {
        return true;
    }
    // The same by number, for errors re-wrapped without their kind, and ELOOP, whose kind is
    // not stable.
    matches!(
        err.raw_os_error(),
        Some(libc::ENOTDIR | libc::EISDIR | libc::EROFS | libc::ENAMETOOLONG | libc::ELOOP)
    )
}
