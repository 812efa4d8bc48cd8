//! Readers and writers for voisin's data and result files (layouts in the README).
//!
//! Inputs, chosen by extension (any case): `.fvecs` `.ivecs` `.bvecs` (TEXMEX), `.fbin`
//! `.u8bin` (big-ann), `.npy`, `.npz` (one array: `data.npz:name`), `.hdf5`/`.h5`
//! (ann-benchmarks `train`/`test`), `.txt` (strings), numeric `.csv`/`.tsv` and `.parquet`
//! (`data.parquet:column`); standard input
//! and pipes through [`Input`], which also tells the metric an input declares
//! ([`choose_metric`]). Each returns a core [`Dataset`]; big-ann files and C-order `.npy`
//! files are memory-mapped and searched in place when [`ReadOptions::mmap`] is set. Outputs:
//! k-NN and range results as `.tsv`, `.npz`, `.csr.npz` (scipy sparse), `.ivecs` (+ `.fvecs`)
//! or `.npy`, optionally with exact f64 distances ([`WriteOptions`]); vector sets and string
//! lists for tests and generators. See [`write_knn`] and the `outputs` module for the layouts.
//!
//! Decisions worth knowing: a 1-D `.npy` (or HDF5) array of n values is n vectors of dimension
//! 1; f64 and i8/i16/i32 inputs (`.ivecs` too) become f32 only when every value converts
//! exactly, else they are kept as exact f64; `--out res.npy` writes `res.indices.npy` and
//! `res.distances.npy` (plus `res.offsets.npy` for range results); range results in `.ivecs`
//! are ragged rows. The format modules and `write.rs` document each in full.
//!
//! Every failure is an [`IoError`]: one line naming the file and the problem. Declared sizes
//! are checked against the file length before anything is allocated or mapped, and no input
//! makes a parser panic (each parser has a fuzz target in `fuzz/`). Every output is written to
//! a temporary file in the same folder and renamed into place only when complete; before any
//! work, [`RunFiles`] checks every file a run reads or writes together (no output is an input or
//! lies in the checkpoint folder; files compared by identity).
//!
//! This crate owns file formats only: it must not choose devices, compute distances, or decide
//! how the CLI reports errors.
//!
//! ```
//! use voisin::data::VectorSet;
//! use voisin_io::{read_dataset, write_vectors, ReadOptions};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("base.fbin");
//! let v = VectorSet::from_f32(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
//! write_vectors(&path, &v).unwrap();
//! let back = read_dataset(&path, &ReadOptions::default()).unwrap();
//! assert_eq!(back.as_vectors().unwrap().as_f32().unwrap(), v.as_f32().unwrap());
//! ```
//!
//! Memory maps: a mapped file must not be truncated or rewritten by another process while the
//! data set is alive; this is the usual contract of memory-mapped I/O and the reason
//! [`ReadOptions::mmap`] can be turned off.
#![warn(missing_docs)]

mod checks;
mod error;
mod formats;
mod identity;
mod input;
mod outputs;
mod write;
mod zip;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use voisin::Dataset;

pub use checks::{check_loaded, choose_metric, default_metric, read_checked, Declared, Given};
pub use error::IoError;
pub use formats::csv::Header;
pub use identity::{check_one_set, stdin_once, RunFiles, Written};
pub use input::Input;
pub use outputs::{
    is_sparse_name, write_knn_tsv_with, write_knn_with, write_range_tsv_with, write_range_with,
    WriteOptions,
};
pub use write::{
    check_outputs, result_files, write_knn, write_knn_tsv, write_range, write_range_tsv,
    write_strings, write_vectors,
};

use error::Parsed;
use formats::{bin::BigAnn, fvecs::Texmex, Source};

/// Which of a file's two sets to read, where it holds both: an ann-benchmarks HDF5 file, or an
/// `.npz` archive of several arrays named without a member. `Base` reads `train`, `Query` reads
/// `test`. Other formats hold one set per file and ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// The base set, the one searched (the default): the dataset `train` of an HDF5 file, or
    /// the array `train` of an `.npz` archive that holds several and is named without a member.
    #[default]
    Base,
    /// The query set, whose neighbours are sought: the dataset or array `test` instead.
    Query,
}

/// How to read an input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Which set to read from a file that holds both (HDF5, or an `.npz` archive named without
    /// a member); [`Role::Base`] by default.
    pub role: Role,
    /// Memory-map the file and keep vectors in the map where the layout allows (big-ann files,
    /// C-order `.npy`, stored `.npz` members). Off: everything is read into owned memory.
    pub mmap: bool,
    /// Whether the first line of a `.csv`/`.tsv` file is a header.
    pub header: Header,
    /// The most bytes a compressed `.npz` member may inflate to (the CLI's `--memory`); `None`
    /// bounds it by its compressed size alone.
    pub memory: Option<usize>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            role: Role::Base,
            mmap: true,
            header: Header::Auto,
            memory: None,
        }
    }
}

/// The input formats, as recognised by file extension (case-insensitive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TEXMEX `.fvecs`: rows of a little-endian i32 dimension followed by that many f32 values.
    Fvecs,
    /// TEXMEX `.ivecs`: rows of i32 values, read as f32 when every value is exactly an f32
    /// number (as every integer up to 2^24 in magnitude is), else as f64.
    Ivecs,
    /// TEXMEX `.bvecs`: rows of u8 values, each after its i32 dimension.
    Bvecs,
    /// big-ann `.fbin`: a header of two u32 (`n`, then `d`) and `n × d` f32 values, row-major.
    Fbin,
    /// big-ann `.u8bin`: the `.fbin` layout with u8 values.
    U8bin,
    /// A NumPy `.npy` array, 2-D `(n, d)` or 1-D `(n,)` (n vectors of dimension 1).
    Npy,
    /// An ann-benchmarks HDF5 file (`.hdf5` or `.h5`): the dataset `train` or `test` by [`Role`].
    Hdf5,
    /// Plain text (`.txt`): one UTF-8 string per line, for edit-distance search.
    Txt,
    /// A NumPy archive; one array of it is read (see [`split_member`]).
    Npz,
    /// Numbers separated by commas, one vector per line.
    Csv,
    /// Numbers separated by tabs, one vector per line.
    Tsv,
    /// A Parquet table: a list column, or one column per dimension (`data.parquet:col`).
    Parquet,
}

const INPUT_EXTENSIONS: &str =
    ".fvecs .ivecs .bvecs .fbin .u8bin .npy .npz .hdf5 .h5 .txt .csv .tsv .parquet .pq";

/// Splits `data.npz:name` (an archive member) or `data.parquet:name` / `data.pq:name` (a column)
/// into the file and the name; any other path, or one that exists as given, is returned whole.
/// The file part keeps the path's bytes as they are (names need not be UTF-8).
pub fn split_member(path: &Path) -> (std::path::PathBuf, Option<String>) {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    let lower = bytes.to_ascii_lowercase();
    let split = [&b".npz:"[..], b".parquet:", b".pq:"]
        .iter()
        .filter_map(|ext| {
            lower
                .windows(ext.len())
                .rposition(|w| w == *ext)
                .map(|at| at + ext.len() - 1)
        })
        .max();
    match split {
        Some(colon) if !path.exists() => (
            std::path::PathBuf::from(OsStr::from_bytes(&bytes[..colon])),
            Some(String::from_utf8_lossy(&bytes[colon + 1..]).into_owned()),
        ),
        _ => (path.to_path_buf(), None),
    }
}

impl Format {
    /// The format named by an extension or a `--format` value (`npy`, `CSV`, `h5`, …).
    pub fn from_name(name: &str) -> Option<Format> {
        Some(match name.to_ascii_lowercase().trim_start_matches('.') {
            "fvecs" => Format::Fvecs,
            "ivecs" => Format::Ivecs,
            "bvecs" => Format::Bvecs,
            "fbin" => Format::Fbin,
            "u8bin" => Format::U8bin,
            "npy" => Format::Npy,
            "npz" => Format::Npz,
            "hdf5" | "h5" => Format::Hdf5,
            "txt" => Format::Txt,
            "csv" => Format::Csv,
            "tsv" => Format::Tsv,
            "parquet" | "pq" => Format::Parquet,
            _ => return None,
        })
    }

    /// The format named by `path`'s extension (any case; `data.npz:name` is an `.npz`).
    pub fn from_path(path: &Path) -> Result<Format, IoError> {
        let (file, _) = split_member(path);
        let ext = extension(&file);
        let why = match ext.as_str() {
            "" => format!("no file extension to tell the format (one of {INPUT_EXTENSIONS})"),
            _ => match Format::from_name(&ext) {
                Some(f) => return Ok(f),
                None => format!("unknown input format '.{ext}' (known: {INPUT_EXTENSIONS})"),
            },
        };
        Err(IoError::user(path, why))
    }
}

/// Lower-case extension of `path`, empty when there is none.
pub(crate) fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

pub(crate) type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// The one dispatch every entry point goes through, so the fuzzed path is the real one.
fn parse(
    format: Format,
    src: Source<'_>,
    opts: &ReadOptions,
    member: Option<&str>,
    shared: impl FnOnce() -> SharedBytes,
) -> Parsed<Dataset> {
    match format {
        Format::Fvecs => formats::fvecs::parse(src.bytes, Texmex::Fvecs),
        Format::Ivecs => formats::fvecs::parse(src.bytes, Texmex::Ivecs),
        Format::Bvecs => formats::fvecs::parse(src.bytes, Texmex::Bvecs),
        Format::Fbin => formats::bin::parse(src, BigAnn::Fbin),
        Format::U8bin => formats::bin::parse(src, BigAnn::U8bin),
        Format::Npy => formats::npy::parse(src),
        Format::Hdf5 => formats::hdf5::parse(shared(), opts.role),
        Format::Txt => formats::txt::parse(src.bytes),
        Format::Npz => formats::npz::parse(src, member, opts.role, opts.memory),
        Format::Csv => formats::csv::parse(src.bytes, b',', opts.header),
        Format::Tsv => formats::csv::parse(src.bytes, b'\t', opts.header),
        Format::Parquet => formats::parquet::parse(src.bytes, member),
    }
}

/// Parses a whole file held in memory. This is the entry point of the fuzz targets; it runs the
/// same checks as [`read_dataset`], and errors name the file `<bytes>`.
pub fn parse_bytes(format: Format, bytes: &[u8], role: Role) -> Result<Dataset, IoError> {
    let opts = ReadOptions {
        role,
        ..ReadOptions::default()
    };
    parse_bytes_with(format, bytes, &opts)
}

/// [`parse_bytes`] with every read option.
pub fn parse_bytes_with(
    format: Format,
    bytes: &[u8],
    opts: &ReadOptions,
) -> Result<Dataset, IoError> {
    parse(format, Source::unmapped(bytes), opts, None, || {
        Arc::new(bytes.to_vec()) as SharedBytes
    })
    .map_err(|p| p.at(Path::new("<bytes>")))
}

/// Parses bytes read from a pipe or standard input, naming `name` in errors.
pub(crate) fn parse_held(
    format: Format,
    bytes: &Arc<Vec<u8>>,
    opts: &ReadOptions,
    member: Option<&str>,
    name: &Path,
) -> Result<Dataset, IoError> {
    parse(format, Source::unmapped(bytes), opts, member, || {
        Arc::clone(bytes) as SharedBytes
    })
    .map_err(|p| p.at(name))
}

/// The metric an ann-benchmarks HDF5 file declares in its root attribute `distance`, as a
/// voisin metric name ("angular" is cosine; "euclidean", "hamming", "jaccard" keep their
/// names); `None` for other formats or when the attribute is absent. An attribute that is not
/// a string is an error here; [`Input::declared`] tells it apart instead.
pub fn declared_metric(path: &Path) -> Result<Option<String>, IoError> {
    match Input::open(path, None)?.declared()? {
        Declared::Nothing => Ok(None),
        Declared::Name(name) => Ok(Some(name)),
        Declared::Unusable(what) => Err(IoError::user(
            path,
            format!("the file's 'distance' attribute is {what}, not a metric name"),
        )),
    }
}

/// The array of the archive `file` that `member`, or else `role`, picks, as reading it would;
/// `None` for a file that cannot be looked at without consuming it (a pipe).
pub(crate) fn npz_member(
    file: &Path,
    member: Option<&str>,
    role: Role,
) -> Result<Option<String>, IoError> {
    let f = open_input(file, "cannot open")?;
    let meta = f
        .metadata()
        .map_err(|e| IoError::from_io(file, "cannot read", &e))?;
    if !meta.is_file() || meta.len() == 0 {
        return Ok(None);
    }
    // SAFETY: as in `read_dataset`.
    let map =
        unsafe { Mmap::map(&f) }.map_err(|e| IoError::from_io(file, "cannot memory-map", &e))?;
    formats::npz::chosen(&map, member, role)
        .map(Some)
        .map_err(|p| p.at(file))
}

/// The root attribute `distance` of the HDF5 bytes.
pub(crate) fn distance_attribute(bytes: SharedBytes, name: &Path) -> Result<Declared, IoError> {
    formats::hdf5::distance_attribute(bytes).map_err(|p| p.at(name))
}

/// Reads a data set, choosing the format by the file extension.
pub fn read_dataset(path: &Path, opts: &ReadOptions) -> Result<Dataset, IoError> {
    let format = Format::from_path(path)?;
    let (file_path, member) = split_member(path);
    let member = member.as_deref();
    let path = file_path.as_path();
    let file = open_input(path, "cannot open")?;
    let meta = file
        .metadata()
        .map_err(|e| IoError::from_io(path, "cannot read", &e))?;
    if meta.is_dir() {
        return Err(IoError::user(path, "is a folder, not a file"));
    }
    // Pipes and devices (`<(zcat x.fvecs.gz)`) report no length and cannot be mapped: they are
    // read to the end instead, and the parsers judge what arrives.
    let regular = meta.is_file();
    if regular && meta.len() == 0 {
        return Err(IoError::user(path, "file is empty"));
    }
    // Formats that must copy their values still read through the map, which spares a second
    // copy of the whole file (and lets the HDF5 reader touch only the dataset it needs).
    if opts.mmap && regular {
        // SAFETY: the map is read-only; its contents may change only if another process
        // rewrites the file while it is mapped, which the crate documentation rules out.
        let map = unsafe { Mmap::map(&file) }
            .map_err(|e| IoError::from_io(path, "cannot memory-map", &e))?;
        let map = Arc::new(map);
        return parse(format, Source::mapped(&map), opts, member, || {
            Arc::clone(&map) as SharedBytes
        })
        .map_err(|p| p.at(path));
    }
    let bytes = Arc::new(read_all(file, if regular { meta.len() } else { 0 }, path)?);
    parse_held(format, &bytes, opts, member, path)
}

/// Opens an input by voisin's rule for non-regular files (`voisin::commit::unreadable_kind`):
/// devices and sockets refused, pipes read. `what` leads the message of a failure to open.
pub(crate) fn open_input(path: &Path, what: &str) -> Result<File, IoError> {
    if let Some(why) = voisin::commit::unreadable_kind(path) {
        return Err(IoError::user(path, why));
    }
    File::open(path).map_err(|e| IoError::from_io(path, what, &e))
}

/// The whole file; `len` is the expected size (0 when unknown), reserved up front.
pub(crate) fn read_all(mut file: File, len: u64, path: &Path) -> Result<Vec<u8>, IoError> {
    use std::io::Read;
    let cap = usize::try_from(len)
        .map_err(|_| IoError::user(path, "file is too large for this machine"))?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(cap)
        .map_err(|_| IoError::internal(path, format!("cannot allocate {len} bytes to read it")))?;
    file.read_to_end(&mut bytes)
        .map_err(|e| IoError::from_io(path, "cannot read", &e))?;
    Ok(bytes)
}
