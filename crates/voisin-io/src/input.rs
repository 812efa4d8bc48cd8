//! One input as the user named it: a file (member syntax allowed), or standard input or a pipe,
//! whose bytes are read once, when the input is opened, so that what it declares (its metric)
//! and its data come from the same bytes.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use voisin::{Dataset, Metric};

use crate::checks::{default_metric, Declared};
use crate::{
    distance_attribute, open_input, parse_held, read_all, read_dataset, split_member, Format,
    IoError, ReadOptions, SharedBytes,
};

/// An input of a run; see the module documentation.
pub struct Input {
    /// As given (`-`, `data.npz:train`).
    name: PathBuf,
    /// The bytes of standard input or of a pipe, and their format.
    held: Option<(Format, Arc<Vec<u8>>)>,
}

impl Input {
    /// The input `path` names: standard input for `-`, read now to its end (`format` says its
    /// format; it has no extension), and a pipe read now as well; a file is only named.
    pub fn open(path: &Path, format: Option<Format>) -> Result<Input, IoError> {
        let name = path.to_path_buf();
        if path == Path::new("-") {
            let Some(format) = format else {
                return Err(IoError::user(
                    path,
                    "standard input has no extension to tell its format; give --format (e.g. \
                     --format npy)",
                ));
            };
            return Ok(Input {
                name,
                held: Some((format, Arc::new(read_stdin_bytes()?))),
            });
        }
        let (file, _) = split_member(path);
        let pipe = std::fs::metadata(&file).is_ok_and(|m| m.file_type().is_fifo());
        if !pipe {
            return Ok(Input { name, held: None });
        }
        let format = Format::from_path(path)?;
        let bytes = read_all(open_input(&file, "cannot open")?, 0, &file)?;
        Ok(Input {
            name,
            held: Some((format, Arc::new(bytes))),
        })
    }

    /// The path as given (`-` for standard input).
    pub fn path(&self) -> &Path {
        &self.name
    }

    /// Whether this is standard input.
    pub fn is_stdin(&self) -> bool {
        self.name == Path::new("-")
    }

    /// The name errors about its contents give: `<stdin>`, or the file without a member name.
    fn file(&self) -> PathBuf {
        if self.is_stdin() {
            PathBuf::from("<stdin>")
        } else {
            split_member(&self.name).0
        }
    }

    /// The input's format: for standard input the one given to [`Input::open`], for a file or
    /// a pipe the one its extension names (an error when that is missing or unknown).
    pub fn format(&self) -> Result<Format, IoError> {
        match &self.held {
            Some((f, _)) => Ok(*f),
            None => Format::from_path(&self.name),
        }
    }

    /// The metric levenshtein for text (`.txt`, or `--format txt`), euclidean otherwise.
    pub fn default_metric(&self) -> Metric {
        match self.format() {
            Ok(Format::Txt) => Metric::Levenshtein,
            _ if self.held.is_some() => Metric::Euclidean,
            _ => default_metric(&self.name),
        }
    }

    /// What the input declares of its metric: the root attribute `distance` of an HDF5 file.
    pub fn declared(&self) -> Result<Declared, IoError> {
        if self.format()? != Format::Hdf5 {
            return Ok(Declared::Nothing);
        }
        let file = self.file();
        if let Some((_, bytes)) = &self.held {
            return distance_attribute(Arc::clone(bytes) as SharedBytes, &file);
        }
        let f = open_input(&file, "cannot open")?;
        let meta = f
            .metadata()
            .map_err(|e| IoError::from_io(&file, "cannot read", &e))?;
        if !meta.is_file() || meta.len() == 0 {
            // Reading it fails, saying why.
            return Ok(Declared::Nothing);
        }
        // SAFETY: as in `read_dataset`: a read-only map of an input that must not change.
        let map = unsafe { Mmap::map(&f) }
            .map_err(|e| IoError::from_io(&file, "cannot memory-map", &e))?;
        distance_attribute(Arc::new(map) as SharedBytes, &file)
    }

    /// Reads the data set.
    pub fn read(&self, opts: &ReadOptions) -> Result<Dataset, IoError> {
        match &self.held {
            None => read_dataset(&self.name, opts),
            Some((format, bytes)) => {
                let (_, member) = split_member(&self.name);
                if bytes.is_empty() {
                    let what = if self.is_stdin() {
                        "standard input is empty"
                    } else {
                        "file is empty"
                    };
                    return Err(IoError::user(&self.file(), what));
                }
                parse_held(*format, bytes, opts, member.as_deref(), &self.file())
            }
        }
    }
}

fn read_stdin_bytes() -> Result<Vec<u8>, IoError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut bytes)
        .map_err(|e| IoError::from_io(Path::new("<stdin>"), "cannot read", &e))?;
    Ok(bytes)
}
