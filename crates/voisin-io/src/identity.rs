//! Every file one run reads or writes, checked together before any work: no output is an
//! input, none lies in the checkpoint folder, standard input is read once, and `--pairs`
//! compares one set with itself.
//!
//! Files are compared by identity (device and inode, links resolved), so that an output is
//! recognised as an input whatever the spelling: member syntax (`X.npz:train` is the file
//! `X.npz`), another path through a link, a hard link, or standard input redirected from the
//! output (`< X.tsv`). An output that does not exist yet is no input; one whose folder does
//! not exist yet is compared by the path it will have.
//!
//! The checkpoint folder is the build's own: it holds the folder's lock for the whole run (an
//! output set of several files takes the locks of its folders to rename into place, so a result
//! written there waited for itself forever) and its files are the build's progress. No output
//! goes into it.
//!
//! The CLI's knn, graph, range and index commands and `voisin-mpi` describe their files as a
//! [`RunFiles`] and call [`RunFiles::check`]; the commit rules themselves (writable folder,
//! regular files only, no foreign companion) are `voisin::commit`'s, run last.

use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::IoError;
use crate::{split_member, write, Format, Role};

/// What a run writes.
#[derive(Clone, Copy, Debug)]
pub enum Written<'a> {
    /// A result at `path`, with its companions (`res.fvecs` beside `res.ivecs`, the `.npy`
    /// files); `range` results in `.npy` have offsets too, and `exact` distances (f64) cannot
    /// go into `.ivecs`.
    Result {
        /// The output as the user named it (`--out`); its companions are derived from it.
        path: &'a Path,
        /// Whether rows vary in length (a range result, or k-NN with ties kept), so that `.npy`
        /// output adds the `<stem>.offsets.npy` file.
        range: bool,
        /// Whether exact f64 distances are written; `.ivecs` output cannot hold them and is
        /// refused.
        exact: bool,
    },
    /// One file of voisin's own (an index).
    File(&'a Path),
}

/// The files of one run: its inputs as the user named them (`-` is standard input; member
/// syntax allowed), with the option that named each (`--base`), what it writes, and its
/// checkpoint folder.
#[derive(Clone, Debug, Default)]
pub struct RunFiles<'a> {
    /// Each input with the option that named it, e.g. `("--base", "data.npz:train")`; `-` is
    /// standard input.
    pub inputs: Vec<(&'a str, &'a Path)>,
    /// What the run writes; `None` when it writes no file (results to standard output).
    pub output: Option<Written<'a>>,
    /// The build's checkpoint folder, which no output may lie in; `None` without checkpoints.
    pub checkpoint: Option<&'a Path>,
}

/// A file's identity: device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Id(u64, u64);

impl Id {
    fn of(path: &Path) -> Option<Id> {
        fs::metadata(path).ok().map(|m| Id(m.dev(), m.ino()))
    }

    /// Standard input's file when it is one (`< file`); a pipe or terminal is none.
    fn of_stdin() -> Option<Id> {
        let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
        let meta = fs::File::from(fd).metadata().ok()?;
        meta.is_file().then(|| Id(meta.dev(), meta.ino()))
    }
}

fn is_stdin(path: &Path) -> bool {
    path == Path::new("-")
}

/// The file an input names: standard input's, or the file of `X.npz:name`.
fn input_id(path: &Path) -> Option<Id> {
    if is_stdin(path) {
        Id::of_stdin()
    } else {
        Id::of(&split_member(path).0)
    }
}

/// The absolute path `path` has, links resolved, or will have once the missing part of it is
/// made (`None` when that cannot be told, as for a name ending in `..`).
fn resolved(path: &Path) -> Option<PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let name = path.file_name()?;
    Some(resolved(folder(path))?.join(name))
}

/// The folder a file goes to (`.` for a bare name).
fn folder(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Whether two folders are one: by identity when both exist, else by the paths they will have.
fn same_folder(a: &Path, b: &Path) -> bool {
    match (Id::of(a), Id::of(b)) {
        (Some(x), Some(y)) => x == y,
        _ => matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y),
    }
}

impl RunFiles<'_> {
    /// The checks of the module documentation, then voisin's commit checks of every output
    /// file. Each refusal is one line naming the file (a user error: exit code 2).
    pub fn check(&self) -> Result<(), IoError> {
        stdin_once(&self.inputs)?;
        let Some(output) = self.output else {
            return Ok(());
        };
        let (named, files) = match output {
            Written::Result { path, range, .. } => (path, write::result_files(path, range)?),
            Written::File(path) => (path, vec![path.to_path_buf()]),
        };
        self.not_an_input(output, named, &files)?;
        if let Written::Result { exact: true, .. } = output {
            write::check_exact(named)?;
        }
        if let Some(dir) = self.checkpoint {
            if files.iter().any(|f| same_folder(folder(f), dir)) {
                return Err(IoError::user(
                    named,
                    format!(
                        "is inside the checkpoint folder {}, which the build keeps locked and \
                         fills with its own files; write the result elsewhere",
                        dir.display()
                    ),
                ));
            }
        }
        write::check_outputs(&files)
    }

    /// No file of the output is an input.
    fn not_an_input(
        &self,
        output: Written,
        named: &Path,
        files: &[PathBuf],
    ) -> Result<(), IoError> {
        for written in files {
            let Some(id) = Id::of(written) else {
                continue;
            };
            let Some(&(flag, input)) = self.inputs.iter().find(|(_, p)| input_id(p) == Some(id))
            else {
                continue;
            };
            let what = if is_stdin(input) {
                format!("this command's standard input ({flag} -)")
            } else if let Written::File(_) = output {
                "the input of this command".to_string()
            } else {
                "an input of this command".to_string()
            };
            let problem = match output {
                Written::File(_) => format!("is {what}; the index would overwrite it"),
                Written::Result { .. } if written == named => {
                    format!("is {what}; results would overwrite it")
                }
                Written::Result { .. } => format!(
                    "results would also go to {}, which is {what}",
                    written.display()
                ),
            };
            return Err(IoError::user(named, problem));
        }
        Ok(())
    }
}

/// Standard input can be read once: `inputs` (the option that named each, and its path) name
/// it at most once.
pub fn stdin_once(inputs: &[(&str, &Path)]) -> Result<(), IoError> {
    let flags: Vec<&str> = inputs
        .iter()
        .filter(|(_, p)| is_stdin(p))
        .map(|&(f, _)| f)
        .collect();
    if flags.len() < 2 {
        return Ok(());
    }
    Err(IoError::user(
        Path::new("-"),
        format!(
            "standard input is given as {}, but it can be read only once; give all but one of \
             them as files",
            flags.join(" and ")
        ),
    ))
}

/// For `--pairs`, a self-join: `base` and `query` must name one set, read twice. The same file
/// is not enough: `train` and `test` of one `.hdf5` or `.npz` file are two sets. Refusals name
/// `query`.
pub fn check_one_set(base: &Path, query: &Path) -> Result<(), IoError> {
    let (bfile, bmember) = split_member(base);
    let (qfile, qmember) = split_member(query);
    let same_file =
        base == query || matches!((input_id(base), input_id(query)), (Some(a), Some(b)) if a == b);
    if !same_file || is_stdin(base) {
        return Err(IoError::user(
            query,
            "--pairs is for self-joins: give the same file as --base and --query",
        ));
    }
    let b = set_read(&bfile, bmember.as_deref(), Role::Base)?;
    let q = set_read(&qfile, qmember.as_deref(), Role::Query)?;
    match (b, q) {
        (b, q) if b == q => Ok(()),
        (Some(b), Some(q)) => Err(IoError::user(
            query,
            format!(
                "--pairs is for self-joins, but --base reads the file's '{b}' and --query its \
                 '{q}': two sets of one file (give one of them as both{})",
                if Format::from_path(&bfile)? == Format::Npz {
                    format!(", as {}:{b}", bfile.display())
                } else {
                    ", after saving it in a file of its own".to_string()
                }
            ),
        )),
        _ => Err(IoError::user(
            query,
            "--pairs is for self-joins: --base and --query read two sets of this file",
        )),
    }
}

/// Which set of `file` a role reads: the array of an archive or the dataset of an HDF5 file
/// (by the readers' own rules), a Parquet column given by name, or `None` for a file that
/// holds one set.
fn set_read(file: &Path, member: Option<&str>, role: Role) -> Result<Option<String>, IoError> {
    Ok(match Format::from_path(file)? {
        Format::Hdf5 => Some(role.hdf5_name().to_string()),
        Format::Npz => crate::npz_member(file, member, role)?,
        Format::Parquet => member.map(str::to_string),
        _ => None,
    })
}
