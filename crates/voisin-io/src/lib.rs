//! Readers and writers for voisin's data and result files (SPEC §4).
//!
//! Inputs, chosen by extension: `.fvecs` `.ivecs` `.bvecs` (TEXMEX), `.fbin` `.u8bin`
//! (big-ann), `.npy`, `.hdf5`/`.h5` (ann-benchmarks `train`/`test`) and `.txt` (strings). Each
//! returns a core [`Dataset`]; big-ann files and C-order `.npy` files are memory-mapped and
//! searched in place when [`ReadOptions::mmap`] is set. Outputs: k-NN and range results as
//! `.tsv`, `.ivecs` (+ `.fvecs`) or `.npy`, vector sets and string lists for tests and
//! generators. See [`write_knn`] for the exact output layouts.
//!
//! Decisions worth knowing: a 1-D `.npy` (or HDF5) array of n values is n vectors of dimension
//! 1; f64 and i8/i16/i32 inputs become f32 only when every value converts exactly; `.ivecs`
//! inputs are refused past 2^24 in magnitude; `--out res.npy` writes `res.indices.npy` and
//! `res.distances.npy` (plus `res.offsets.npy` for range results); range results in `.ivecs`
//! are ragged rows. The format modules and `write.rs` document each in full.
//!
//! Every failure is an [`IoError`]: one line naming the file and the problem. Declared sizes
//! are checked against the file length before anything is allocated or mapped, and no input
//! makes a parser panic (each parser has a fuzz target in `fuzz/`). Every output is written to
//! a temporary file in the same folder and renamed into place only when complete.
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

mod checks;
mod error;
mod formats;
mod write;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use voisin::Dataset;

pub use checks::{default_metric, read_checked};
pub use error::IoError;
pub use write::{
    check_outputs, result_files, write_knn, write_knn_tsv, write_range, write_range_tsv,
    write_strings, write_vectors,
};

use error::Parsed;
use formats::{bin::BigAnn, fvecs::Texmex, Source};

/// Which of the two ann-benchmarks HDF5 datasets to read: `Base` reads `train`, `Query` reads
/// `test`. Other formats hold one set per file and ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    #[default]
    Base,
    Query,
}

/// How to read an input file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    pub role: Role,
    /// Memory-map the file and keep vectors in the map where the layout allows (big-ann files,
    /// C-order `.npy`). Off: everything is read into owned memory.
    pub mmap: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            role: Role::Base,
            mmap: true,
        }
    }
}

/// The input formats, as recognised by file extension (case-insensitive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Fvecs,
    Ivecs,
    Bvecs,
    Fbin,
    U8bin,
    Npy,
    Hdf5,
    Txt,
}

const INPUT_EXTENSIONS: &str = ".fvecs .ivecs .bvecs .fbin .u8bin .npy .hdf5 .h5 .txt";

impl Format {
    /// The format named by `path`'s extension.
    pub fn from_path(path: &Path) -> Result<Format, IoError> {
        let ext = extension(path);
        Ok(match ext.as_str() {
            "fvecs" => Format::Fvecs,
            "ivecs" => Format::Ivecs,
            "bvecs" => Format::Bvecs,
            "fbin" => Format::Fbin,
            "u8bin" => Format::U8bin,
            "npy" => Format::Npy,
            "hdf5" | "h5" => Format::Hdf5,
            "txt" => Format::Txt,
            "" => {
                return Err(IoError::user(
                    path,
                    format!("no file extension to tell the format (one of {INPUT_EXTENSIONS})"),
                ))
            }
            _ => {
                return Err(IoError::user(
                    path,
                    format!("unknown input format '.{ext}' (known: {INPUT_EXTENSIONS})"),
                ))
            }
        })
    }
}

/// Lower-case extension of `path`, empty when there is none.
pub(crate) fn extension(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default()
}

type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// The one dispatch both entry points go through, so the fuzzed path is the real one.
fn parse(
    format: Format,
    src: Source<'_>,
    role: Role,
    shared: impl FnOnce() -> SharedBytes,
) -> Parsed<Dataset> {
    match format {
        Format::Fvecs => formats::fvecs::parse(src.bytes, Texmex::Fvecs),
        Format::Ivecs => formats::fvecs::parse(src.bytes, Texmex::Ivecs),
        Format::Bvecs => formats::fvecs::parse(src.bytes, Texmex::Bvecs),
        Format::Fbin => formats::bin::parse(src, BigAnn::Fbin),
        Format::U8bin => formats::bin::parse(src, BigAnn::U8bin),
        Format::Npy => formats::npy::parse(src),
        Format::Hdf5 => formats::hdf5::parse(shared(), role),
        Format::Txt => formats::txt::parse(src.bytes),
    }
}

/// Parses a whole file held in memory. This is the entry point of the fuzz targets; it runs the
/// same checks as [`read_dataset`], and errors name the file `<bytes>`.
pub fn parse_bytes(format: Format, bytes: &[u8], role: Role) -> Result<Dataset, IoError> {
    parse(format, Source::unmapped(bytes), role, || {
        Arc::new(bytes.to_vec()) as SharedBytes
    })
    .map_err(|p| p.at(Path::new("<bytes>")))
}

/// Reads a data set, choosing the format by the file extension.
pub fn read_dataset(path: &Path, opts: &ReadOptions) -> Result<Dataset, IoError> {
    let format = Format::from_path(path)?;
    let file = File::open(path).map_err(|e| IoError::from_io(path, "cannot open", &e))?;
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
        return parse(format, Source::mapped(&map), opts.role, || {
            Arc::clone(&map) as SharedBytes
        })
        .map_err(|p| p.at(path));
    }
    let bytes = read_all(file, if regular { meta.len() } else { 0 }, path)?;
    let bytes = Arc::new(bytes);
    parse(format, Source::unmapped(&bytes), opts.role, || {
        Arc::clone(&bytes) as SharedBytes
    })
    .map_err(|p| p.at(path))
}

/// The whole file; `len` is the expected size (0 when unknown), reserved up front.
fn read_all(mut file: File, len: u64, path: &Path) -> Result<Vec<u8>, IoError> {
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
