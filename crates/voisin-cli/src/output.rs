//! Where results go: TSV on standard output, or a file whose format voisin-io picks by
//! extension. The target is checked before any work starts (known extension, no input
//! overwritten, and voisin's commit checks: writable folder, a regular file or nothing, no
//! foreign companion), so a long run never ends in an unwritable path; voisin-io commits the
//! files all or nothing, so a failed run leaves no partial output and loses no earlier result.

use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

use voisin_io::{RunFiles, Written};

use crate::error::CliError;

/// What a command computed (the core's, shaped there for `--pairs` and `--distances f64`).
pub use voisin::shape::Answer;

pub enum Target {
    Stdout,
    File(PathBuf),
}

impl Target {
    /// What `--out` (if given) writes: a result, with `range` offsets and `exact` distances.
    pub fn written(out: Option<&Path>, range: bool, exact: bool) -> Option<Written<'_>> {
        out.filter(|p| *p != Path::new("-"))
            .map(|path| Written::Result { path, range, exact })
    }

    /// Checks every file of the run together (voisin-io's `RunFiles`: no output is an input
    /// or lies in the checkpoint folder, then voisin's commit checks) and says where results go.
    pub fn prepare(files: &RunFiles) -> Result<Target, CliError> {
        files.check()?;
        Ok(match files.output {
            Some(Written::Result { path, .. }) => Target::File(path.to_path_buf()),
            _ => Target::Stdout,
        })
    }

    pub fn write(&self, answer: &Answer, opts: &voisin_io::WriteOptions) -> Result<(), CliError> {
        match self {
            Target::Stdout => write_stdout(answer, opts),
            Target::File(path) => match answer {
                Answer::Knn(r) => voisin_io::write_knn_with(path, r, opts),
                Answer::Range(r) => voisin_io::write_range_with(path, r, opts),
            }
            .map_err(CliError::from),
        }
    }
}

fn write_stdout(answer: &Answer, opts: &voisin_io::WriteOptions) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let mut w = BufWriter::with_capacity(1 << 16, stdout.lock());
    let written = match answer {
        Answer::Knn(r) => voisin_io::write_knn_tsv_with(&mut w, r, opts),
        Answer::Range(r) => voisin_io::write_range_tsv_with(&mut w, r, opts),
    }
    .and_then(|()| w.flush());
    match written {
        // The reader went away (`| head`): what it wanted it has; stop quietly.
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::internal(format!(
            "cannot write to standard output: {e}"
        ))),
        Ok(()) => Ok(()),
    }
}
