//! Where results go: TSV on standard output, or a file whose format voisin-io picks by
//! extension. The target is checked before any work starts (known extension, no input
//! overwritten, and voisin's commit checks: writable folder, a regular file or nothing, no
//! foreign companion), so a long run never ends in an unwritable path; voisin-io commits the
//! files all or nothing, so a failed run leaves no partial output and loses no earlier result.

use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::error::CliError;

/// What a command computed (the core's, shaped there for `--pairs` and `--distances f64`).
pub use voisin::shape::Answer;

pub enum Target {
    Stdout,
    File(PathBuf),
}

impl Target {
    /// Checks `--out` (if given) against the inputs of the command: every file the result
    /// will consist of (`range` results in `.npy` have offsets too) passes voisin's commit
    /// checks (`voisin::commit`) and none of them is an input.
    pub fn prepare(out: Option<&Path>, inputs: &[&Path], range: bool) -> Result<Target, CliError> {
        let path = match out {
            Some(p) if p != Path::new("-") => p,
            _ => return Ok(Target::Stdout),
        };
        let files = voisin_io::result_files(path, range)?;
        for written in &files {
            for input in inputs {
                if same_file(written, input) {
                    let problem = if written == path {
                        "is an input of this command; results would overwrite it".to_string()
                    } else {
                        format!(
                            "results would also go to {}, which is an input of this command",
                            written.display()
                        )
                    };
                    return Err(CliError::file(path, problem));
                }
            }
        }
        voisin_io::check_outputs(&files)?;
        Ok(Target::File(path.to_path_buf()))
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

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
