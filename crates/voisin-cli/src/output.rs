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
const EXTENSIONS: [&str; 4] = ["tsv", "ivecs", "npy", "npz"];

pub enum Target {
    Stdout,
    File(PathBuf),
}

impl Target {
    /// Checks `--out` (if given) against the inputs of the command.
    pub fn prepare(out: Option<&Path>, inputs: &[&Path]) -> Result<Target, CliError> {
        let path = match out {
            Some(p) if p != Path::new("-") => p,
            _ => return Ok(Target::Stdout),
        };
        if path.is_dir() {
            return Err(CliError::file(path, "is a folder, not a file name"));
        }
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if !ext.as_deref().is_some_and(|e| EXTENSIONS.contains(&e)) {
            return Err(CliError::file(
                path,
                "unknown output format (name the file .tsv, .npz, .csr.npz, .npy or .ivecs)",
            ));
        }
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !folder.is_dir() {
            let problem = if folder.exists() {
                "is not a folder"
            } else {
                "does not exist"
            };
            return Err(CliError::file(
                path,
                format!("folder {} {problem}", folder.display()),
            ));
        }
        // Creating (and at once deleting) a file beside the output is the only reliable test of
        // write permission; it fails here rather than after hours of work.
        probe_write(folder).map_err(|e| {
            CliError::file(
                path,
                format!("cannot write in folder {}: {e}", folder.display()),
            )
        })?;
        for written in written_files(path) {
            for input in inputs {
                if same_file(&written, input) {
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

/// Every file voisin-io writes for an output path: `.ivecs` has its distances in a `.fvecs`
/// beside it; `.npy` writes `<stem>.indices.npy`, `<stem>.distances.npy` and for range results
/// `<stem>.offsets.npy`, the stem being the path without `.npy` and without a trailing
/// `.indices`, `.distances` or `.offsets` (voisin-io's `write` module documents this layout).
fn written_files(path: &Path) -> Vec<PathBuf> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".ivecs") {
        return vec![path.to_path_buf(), path.with_extension("fvecs")];
    }
    if !lower.ends_with(".npy") {
        return vec![path.to_path_buf()];
    }
    let mut stem = &name[..name.len() - 4];
    for part in [".indices", ".distances", ".offsets"] {
        if let Some(s) = stem.strip_suffix(part) {
            stem = s;
            break;
        }
    }
    ["indices", "distances", "offsets"]
        .iter()
        .map(|part| path.with_file_name(format!("{stem}.{part}.npy")))
        .collect()
}

/// Creates and removes a uniquely named empty file in `folder`.
fn probe_write(folder: &Path) -> std::io::Result<()> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let probe = folder.join(format!(".voisin-probe-{}-{nanos}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_follow_voisin_io_naming() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(written_files(&p("d/r.tsv")), vec![p("d/r.tsv")]);
        assert_eq!(
            written_files(&p("d/r.ivecs")),
            vec![p("d/r.ivecs"), p("d/r.fvecs")]
        );
        let npy = vec![
            p("d/r.indices.npy"),
            p("d/r.distances.npy"),
            p("d/r.offsets.npy"),
        ];
        assert_eq!(written_files(&p("d/r.npy")), npy);
        assert_eq!(written_files(&p("d/r.indices.npy")), npy);
    }
}
