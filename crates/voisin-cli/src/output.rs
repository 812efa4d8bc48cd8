//! Where results go: TSV on standard output, or a file whose format voisin-io picks by
//! extension. The target is checked before any work starts (known extension, writable folder,
//! no input overwritten), so a long run never ends in an unwritable path; voisin-io writes files
//! through a temporary file and a rename, so a failed run leaves no partial output.

use std::io::{BufWriter, ErrorKind, Write};
use std::path::{Path, PathBuf};

use voisin::{KnnResult, RangeResult, Stats};

use crate::error::CliError;

/// What a command computed.
pub enum Answer {
    Knn(KnnResult),
    Range(RangeResult),
}

impl Answer {
    pub fn stats(&self) -> &Stats {
        match self {
            Answer::Knn(r) => &r.stats,
            Answer::Range(r) => &r.stats,
        }
    }

    /// Number of (query, neighbour) pairs returned.
    pub fn len(&self) -> usize {
        match self {
            Answer::Knn(r) => r.indices.len(),
            Answer::Range(r) => r.indices.len(),
        }
    }
}

/// Output formats by extension, as voisin-io writes them.
const EXTENSIONS: [&str; 3] = ["tsv", "ivecs", "npy"];

pub enum Target {
    Stdout,
    File(PathBuf),
}

impl Target {
    /// Checks `--out` (if given) against the inputs of the command.
    pub fn prepare(out: Option<&Path>, inputs: &[&Path]) -> Result<Target, CliError> {
        let Some(path) = out else {
            return Ok(Target::Stdout);
        };
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if !ext.as_deref().is_some_and(|e| EXTENSIONS.contains(&e)) {
            return Err(CliError::file(
                path,
                "unknown output format (name the file .tsv, .ivecs or .npy)",
            ));
        }
        if path.is_dir() {
            return Err(CliError::file(path, "is a directory, not a file name"));
        }
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !folder.is_dir() {
            return Err(CliError::file(
                path,
                format!("folder {} does not exist", folder.display()),
            ));
        }
        // Creating (and at once deleting) a file beside the output is the only reliable test of
        // write permission; it fails here rather than after hours of work.
        tempfile::Builder::new()
            .prefix(".voisin-check")
            .tempfile_in(folder)
            .map_err(|e| {
                CliError::file(
                    path,
                    format!("cannot write in folder {}: {e}", folder.display()),
                )
            })?;
        for written in written_files(path) {
            for input in inputs {
                if same_file(&written, input) {
                    return Err(CliError::file(
                        &written,
                        format!(
                            "writing results here would overwrite the input {}",
                            input.display()
                        ),
                    ));
                }
            }
        }
        Ok(Target::File(path.to_path_buf()))
    }

    pub fn write(&self, answer: &Answer) -> Result<(), CliError> {
        match self {
            Target::Stdout => write_stdout(answer),
            Target::File(path) => match answer {
                Answer::Knn(r) => voisin_io::write_knn(path, r),
                Answer::Range(r) => voisin_io::write_range(path, r),
            }
            .map_err(CliError::from),
        }
    }
}

fn write_stdout(answer: &Answer) -> Result<(), CliError> {
    let stdout = std::io::stdout();
    let mut w = BufWriter::with_capacity(1 << 16, stdout.lock());
    let written = match answer {
        Answer::Knn(r) => voisin_io::write_knn_tsv(&mut w, r),
        Answer::Range(r) => voisin_io::write_range_tsv(&mut w, r),
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

/// Every file voisin-io writes for an output path: `.ivecs` has its distances in a `.fvecs`
/// beside it, `.npy` becomes `*.indices.npy` and `*.distances.npy`.
fn written_files(path: &Path) -> Vec<PathBuf> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("ivecs") => vec![path.to_path_buf(), path.with_extension("fvecs")],
        Some("npy") => vec![
            path.with_extension("indices.npy"),
            path.with_extension("distances.npy"),
        ],
        _ => vec![path.to_path_buf()],
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
