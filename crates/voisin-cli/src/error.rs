//! The CLI's error: what went wrong, which file it concerns (if any) and whether the user's input
//! is at fault (exit code 2) or the program or a device failed (exit code 1).
//!
//! Every failure of the binary ends up here and is printed as one line by `main`; nothing else
//! decides exit codes.

use std::fmt;
use std::path::{Path, PathBuf};

/// Whose fault an error is, which decides the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Bad input, a bad argument or a file that cannot be used: exit code 2.
    User,
    /// An internal error or a device failure: exit code 1.
    Internal,
    /// The work was cancelled (`voisin::Error::Cancelled`), as an interrupt: exit code 130.
    Interrupted,
}

#[derive(Debug)]
pub struct CliError {
    file: Option<PathBuf>,
    message: String,
    fault: Fault,
}

impl CliError {
    /// A problem with a file the user named.
    pub fn file(path: &Path, message: impl Into<String>) -> Self {
        CliError {
            file: Some(path.to_path_buf()),
            message: message.into(),
            fault: Fault::User,
        }
    }

    /// An internal or device failure.
    pub fn internal(message: impl Into<String>) -> Self {
        CliError {
            file: None,
            message: message.into(),
            fault: Fault::Internal,
        }
    }

    /// A core-crate error, attributed to `file` when the problem lies in that file's contents.
    pub fn core(err: voisin::Error, file: Option<&Path>) -> Self {
        let fault = if err.is_user_error() {
            Fault::User
        } else if err.is_cancelled() {
            Fault::Interrupted
        } else {
            Fault::Internal
        };
        CliError {
            file: file.map(Path::to_path_buf),
            message: err.to_string(),
            fault,
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self.fault {
            Fault::User => 2,
            Fault::Internal => 1,
            Fault::Interrupted => 130,
        }
    }
}

impl From<voisin_io::IoError> for CliError {
    fn from(err: voisin_io::IoError) -> Self {
        CliError {
            file: Some(err.path().to_path_buf()),
            message: err.message().to_string(),
            fault: if err.is_user_error() {
                Fault::User
            } else {
                Fault::Internal
            },
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(path) => write!(f, "{}: {}", path.display(), self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for CliError {}
