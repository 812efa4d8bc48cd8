//! HDF5 files in the ann-benchmarks layout: 2-D datasets `train` (the base set) and `test` (the
//! queries) at the root, usually f32. Which one is read is chosen by [`Role`](crate::Role).
//!
//! Parsing is done by the pure-Rust `hdf5-pure` crate, fed through a [`hdf5_pure::Source`] over
//! the file's bytes (a memory map, or a copy for the bytes entry point), so the library reads
//! only the metadata and the one dataset asked for. This module owns the checks around it: the
//! dataset's presence, rank, type, and a declared size bounded by the file length before the
//! library allocates it. Values are always copied into owned storage (HDF5 data may be chunked
//! or compressed); f64 and i8/i16/i32 datasets are converted to f32 only when exact, as in
//! `.npy`. HDF5 writing is not offered.

use std::sync::Arc;

use hdf5_pure::{AttrValue, DType, FormatError, Layout};
use voisin::data::{Buffer, VectorData};
use voisin::Dataset;

use super::hdf5_links::{self, Resolved};
use super::{exact, vectors};
use crate::error::{bail, Parsed, Problem};
use crate::{Declared, Role};
use voisin::data::ExactInF64;

/// A compressed dataset may legitimately expand beyond the file size, but not by more than
/// deflate's ratio limit (about 1032:1); beyond that the declared shape is a lie.
const MAX_EXPANSION: u64 = 1100;

/// Bytes shared with the HDF5 reader, which needs an owned `'static` source.
struct Shared(Arc<dyn AsRef<[u8]> + Send + Sync>);

impl hdf5_pure::Source for Shared {
    fn len(&self) -> u64 {
        (*self.0).as_ref().len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), FormatError> {
        let bytes = (*self.0).as_ref();
        let range = usize::try_from(offset)
            .ok()
            .and_then(|start| Some(start..start.checked_add(buf.len())?))
            .filter(|r| r.end <= bytes.len());
        match range {
            Some(r) => {
                buf.copy_from_slice(&bytes[r]);
                Ok(())
            }
            None => Err(FormatError::UnexpectedEof {
                expected: buf.len(),
                available: bytes
                    .len()
                    .saturating_sub(offset.min(usize::MAX as u64) as usize),
            }),
        }
    }
}

impl Role {
    /// The ann-benchmarks dataset name for this role.
    pub fn hdf5_name(self) -> &'static str {
        match self {
            Role::Base => "train",
            Role::Query => "test",
        }
    }
}

fn lib_err(e: hdf5_pure::Error) -> Problem {
    Problem::from(format!("not a readable HDF5 file: {e}"))
}

/// Reads the dataset for `role` from an HDF5 file held in `bytes`.
///
/// HDF5 is a large format parsed by a third-party library; fuzzing found no panic in it (see
/// FUZZING.md), but should one remain, it becomes an error naming the file rather than a crash.
pub(crate) fn parse(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>, role: Role) -> Parsed<Dataset> {
    super::guarded("HDF5", "hdf5-pure", || parse_unguarded(bytes, role))
}

fn parse_unguarded(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>, role: Role) -> Parsed<Dataset> {
    let file_len = (*bytes).as_ref().len() as u64;
    if file_len == 0 {
        bail!("file is empty");
    }
    if let Some(end) = hdf5_links::declared_end((*bytes).as_ref()) {
        if end > file_len {
            bail!(
                "the file is cut short: its superblock says it ends at byte {end}, but it \
                 holds {file_len} bytes"
            );
        }
    }
    let name = role.hdf5_name();
    let file = hdf5_pure::File::from_source(Shared(bytes.clone())).map_err(lib_err)?;
    let target = linked_path(&file, (*bytes).as_ref(), name)?;
    let ds = match target {
        Some(path) => file.dataset(&path).map_err(lib_err)?,
        None => {
            let mut names = file.root().datasets().map_err(lib_err)?;
            names.sort();
            if !names.iter().any(|n| n == name) {
                let found = if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                };
                bail!("no dataset '{name}' (found: {found})");
            }
            file.dataset(name).map_err(lib_err)?
        }
    };
    let shape = ds.shape().map_err(lib_err)?;
    let (n, d) = match shape[..] {
        [n, d] => (n, d),
        [n] => (n, 1),
        _ => bail!(
            "dataset '{name}' is {}-dimensional; expected a 2-D dataset (n, d)",
            shape.len()
        ),
    };
    if d == 0 {
        bail!("dataset '{name}' has dimension 0");
    }
    if n > voisin::data::MAX_ITEMS as u64 {
        bail!(
            "dataset '{name}' holds {n} vectors, more than the limit of {}",
            voisin::data::MAX_ITEMS
        );
    }
    let elem = ds.element_size().map_err(lib_err)?;
    check_storage(&ds, name, n, d, elem, file_len)?;
    let (n, d) = (n as usize, d as usize);
    let dtype = ds.dtype().map_err(lib_err)?;
    let data = match dtype {
        DType::F32 => VectorData::F32(Buffer::Owned(ds.read_f32().map_err(lib_err)?)),
        DType::U8 => VectorData::U8(Buffer::Owned(ds.read_u8().map_err(lib_err)?)),
        DType::F64 => converted(ds.read_f64(), d)?,
        DType::I8 => converted(ds.read_i8(), d)?,
        DType::I16 => converted(ds.read_i16(), d)?,
        DType::I32 => converted(ds.read_i32(), d)?,
        DType::I64 => converted(ds.read_i64(), d)?,
        DType::U16 => converted(ds.read_u16(), d)?,
        DType::U32 => converted(ds.read_u32(), d)?,
        DType::U64 => converted(ds.read_u64(), d)?,
        other => bail!(
            "dataset '{name}' has type {other}, which is not supported (supported: f32, f64, \
             u8, i8, i16, i32, i64, u16, u32, u64)"
        ),
    };
    vectors(n, d, data).map_err(|p| p.within(&format!("dataset '{name}'")))
}

/// How the dataset under the root name `name` is reached: by a path of hard links (itself, or
/// where its soft links lead, at any depth), or `None` when the groups could not be read here
/// (the library then looks). An external link, soft links in a loop, or a soft link to nothing
/// are refused, naming the link.
fn linked_path(file: &hdf5_pure::File, bytes: &[u8], name: &str) -> Parsed<Option<String>> {
    match hdf5_links::resolve(bytes, name) {
        Resolved::Unknown => Ok(None),
        Resolved::Hard(path) => Ok(Some(path)),
        // A group this module cannot read (dense storage) may still hold it.
        Resolved::Dangling { link, target, rest } => match file.dataset(&rest) {
            Ok(_) => Ok(Some(rest)),
            Err(_) => bail!(
                "dataset '{name}' leads through the soft link '{link}' to '{target}', where \
                 there is no object"
            ),
        },
        Resolved::External { link, file, path } if link == format!("/{name}") => bail!(
            "dataset '{name}' is an external link to '{path}' in {file}; voisin reads one \
             file (copy that dataset into this one)"
        ),
        Resolved::External { link, file, path } => bail!(
            "dataset '{name}' leads through '{link}', an external link to '{path}' in {file}; \
             voisin reads one file (copy that dataset into this one)"
        ),
        Resolved::Loop(link) if link == format!("/{name}") => {
            bail!("dataset '{name}' is a soft link in a loop")
        }
        Resolved::Loop(link) => {
            bail!("dataset '{name}' leads through soft links in a loop (at '{link}')")
        }
    }
}

/// Bounds everything the library would allocate from declared sizes (the extent, the chunk
/// shape, each stored chunk or contiguous run) by what the file can back, before reading. The
/// library checks reads against the file, but sizes some buffers first: a 13 KB file declaring a
/// 4 GB chunk made it allocate 4 GB (found by the `hdf5` fuzz target).
fn check_storage(
    ds: &hdf5_pure::Dataset,
    name: &str,
    n: u64,
    d: u64,
    elem: u64,
    file_len: u64,
) -> Parsed<()> {
    let filtered = !ds.filters().is_empty();
    let limit = if filtered {
        file_len.saturating_mul(MAX_EXPANSION)
    } else {
        file_len
    };
    let fits = |dims: &[u64]| {
        dims.iter()
            .try_fold(elem, |acc, &x| acc.checked_mul(x))
            .is_some_and(|bytes| bytes <= limit)
    };
    if !fits(&[n, d]) {
        bail!(
            "dataset '{name}' declares {n} x {d} values of {elem} bytes, more than a file of \
             {file_len} bytes can hold"
        );
    }
    let past_end = |what: &str, address: u64, size: u64| -> Parsed<()> {
        match address.checked_add(size) {
            Some(end) if end <= file_len => Ok(()),
            _ => bail!(
                "dataset '{name}' has {what} of {size} bytes at byte {address}, past the end \
                 of the file ({file_len} bytes)"
            ),
        }
    };
    match ds.layout().map_err(lib_err)? {
        Layout::Contiguous {
            address: Some(address),
            size,
        } => past_end("its data", address, size)?,
        Layout::Chunked { chunk_shape, .. } => {
            if !fits(&chunk_shape) {
                bail!(
                    "dataset '{name}' declares chunks of {chunk_shape:?} values of {elem} bytes, \
                     more than a file of {file_len} bytes can hold"
                );
            }
            // Indexes the library cannot enumerate are left to its own checks.
            for c in ds.chunks().unwrap_or_default() {
                past_end("a chunk", c.address, c.storage_size)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn converted<T: ExactInF64>(
    read: Result<Vec<T>, hdf5_pure::Error>,
    d: usize,
) -> Parsed<VectorData> {
    exact(&read.map_err(lib_err)?, d)
}

/// The root attribute `distance` of an ann-benchmarks file: a voisin metric name (`angular` is
/// `cosine`), nothing, or a value that names no metric, described.
pub(crate) fn distance_attribute(bytes: Arc<dyn AsRef<[u8]> + Send + Sync>) -> Parsed<Declared> {
    super::guarded("HDF5", "hdf5-pure", || {
        let file = hdf5_pure::File::from_source(Shared(bytes)).map_err(lib_err)?;
        let attrs = file.root().attrs().map_err(lib_err)?;
        let Some(value) = attrs.get("distance") else {
            return Ok(Declared::Nothing);
        };
        Ok(match value.as_str() {
            Some("angular") => Declared::Name("cosine".to_string()),
            Some(name) => Declared::Name(name.to_string()),
            None => Declared::Unusable(describe(value)),
        })
    })
}

/// What a value that is not one string is, for messages.
fn describe(value: &AttrValue) -> String {
    use AttrValue as V;
    match value {
        V::I8(x) => format!("an integer ({x})"),
        V::I16(x) => format!("an integer ({x})"),
        V::I32(x) => format!("an integer ({x})"),
        V::I64(x) => format!("an integer ({x})"),
        V::U8(x) => format!("an integer ({x})"),
        V::U16(x) => format!("an integer ({x})"),
        V::U32(x) => format!("an integer ({x})"),
        V::U64(x) => format!("an integer ({x})"),
        V::F32(x) => format!("a number ({x})"),
        V::F64(x) => format!("a number ({x})"),
        _ if value.as_strings().is_some() => "a list of strings".to_string(),
        _ => "not a string".to_string(),
    }
}
