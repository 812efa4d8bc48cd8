//! The one error type of this crate: a file name and a one-line message.
//!
//! Parsers work without knowing the file name and report plain messages ([`Problem`]); the public
//! entry points attach the path. This module decides which failures are the user's (a bad file, a
//! missing or unwritable path: CLI exit code 2) and which are the machine's (disk full, I/O
//! errors: exit code 1). It must not print anything or decide exit codes itself.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong with one file, as a single line: `"<path>: <message>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoError {
    path: PathBuf,
    message: String,
    user: bool,
}

impl IoError {
    /// A problem with the file's contents or with the path the user gave.
    pub fn user(path: &Path, message: impl Into<String>) -> Self {
        IoError {
            path: path.to_path_buf(),
            message: one_line(message.into()),
            user: true,
        }
    }

    /// A failure of the machine rather than of the input (disk full, device error).
    pub fn internal(path: &Path, message: impl Into<String>) -> Self {
        IoError {
            path: path.to_path_buf(),
            message: one_line(message.into()),
            user: false,
        }
    }

    /// An operating-system error while reading or writing `path`, classified by its kind.
    pub fn from_io(path: &Path, what: &str, err: &io::Error) -> Self {
        let message = format!("{what}: {}", describe_io(err));
        if is_user_io_error(err) {
            Self::user(path, message)
        } else {
            Self::internal(path, message)
        }
    }

    /// The file the error is about, without any `:member` part; `<bytes>` for
    /// [`parse_bytes`](crate::parse_bytes), `<stdin>` or `-` for standard input.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What went wrong, on one line and without the path (line breaks become spaces).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when the input is at fault (malformed file, missing file, unwritable path), false for
    /// failures such as a full disk.
    pub fn is_user_error(&self) -> bool {
        self.user
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for IoError {}

impl From<voisin::commit::CommitError> for IoError {
    fn from(e: voisin::commit::CommitError) -> Self {
        let message = one_line(e.message);
        IoError {
            path: e.path,
            message,
            user: e.user,
        }
    }
}

/// A parser's complaint about a file, before the path is known: a user error (the file's
/// contents), or with `machine` set a failure of the machine while reading it (memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub message: String,
    pub machine: bool,
}

impl Problem {
    pub fn at(self, path: &Path) -> IoError {
        if self.machine {
            IoError::internal(path, self.message)
        } else {
            IoError::user(path, self.message)
        }
    }

    /// The machine failed (an allocation), not the file.
    pub fn machine(message: String) -> Self {
        Problem {
            message,
            machine: true,
        }
    }

    /// The same problem with `context` before its message (`array 'train': ...`).
    pub fn within(self, context: &str) -> Self {
        Problem {
            message: format!("{context}: {}", self.message),
            ..self
        }
    }
}

impl From<String> for Problem {
    fn from(message: String) -> Self {
        Problem {
            message,
            machine: false,
        }
    }
}

impl From<&str> for Problem {
    fn from(s: &str) -> Self {
        Problem::from(s.to_string())
    }
}

/// Early return with a formatted [`Problem`].
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Problem::from(format!($($arg)*)))
    };
}
pub(crate) use bail;

pub(crate) type Parsed<T> = Result<T, Problem>;

/// Messages must stay on one line even when they quote file contents or OS text.
fn one_line(s: String) -> String {
    if s.contains(['\n', '\r']) {
        s.replace("\r\n", " ").replace(['\n', '\r'], " ")
    } else {
        s
    }
}

/// The OS message without Rust's " (os error N)" suffix, which means nothing to a user.
fn describe_io(err: &io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// The CLI's exit-code table for OS errors lives in the core crate, next to its own errors.
fn is_user_io_error(err: &io::Error) -> bool {
    voisin::error::is_user_io_error(err)
}
