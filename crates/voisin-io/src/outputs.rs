//! Single-file result outputs (`.npz`, and the sparse `.csr.npz` that `scipy.sparse.load_npz`
//! reads) and the options every result writer takes ([`WriteOptions`]).
//!
//! - `.npz` (a NumPy archive, members stored uncompressed as `numpy.savez` writes them):
//!   `indices` (int64) and `distances` (float32, or float64 with exact distances); k-NN arrays
//!   have shape `(n_queries, k)`; range results are flat with `offsets` (int64,
//!   `n_queries + 1` entries: query `q` owns entries `offsets[q]..offsets[q + 1]`).
//! - `.csr.npz` (any name ending in `.csr.npz`): the result as a sparse `n_queries × columns`
//!   matrix in the layout of `scipy.sparse.save_npz`: `data` (the distances), `indices` (int64
//!   column = neighbour index), `indptr` (int64 row starts), `format` (`b'csr'`) and `shape`
//!   (int64 `[n_queries, columns]`, columns being the base set's size). Each row keeps the
//!   result's order (by distance, then index), so its columns are not sorted; a neighbour at
//!   distance 0 is an explicitly stored zero, as in scikit-learn's `kneighbors_graph`.
//!
//! This module must not parse inputs; `write.rs` owns the other formats and the commit of files.

use std::io::Write;
use std::path::{Path, PathBuf};

use voisin::engine::{KnnResult, RangeResult};

use crate::error::IoError;
use crate::formats::npy::encode_header;
use crate::formats::Elem;
use crate::write::{tsv, write_le, write_result, Body, Rows};
use crate::zip::{write_stored, Fill};

/// What a result writer may add to the plain result.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteOptions<'a> {
    /// The distances as exact f64 values (one per result entry, in result order), written in
    /// place of the f32 distances by `.npz`, `.csr.npz`, `.npy` and `.tsv`; `.ivecs` refuses.
    pub exact_distances: Option<&'a [f64]>,
    /// The number of columns of the result seen as a matrix (the base set's size); `.csr.npz`
    /// needs it.
    pub columns: Option<usize>,
}

/// [`crate::write_knn`] with options.
pub fn write_knn_with(path: &Path, res: &KnnResult, opts: &WriteOptions) -> Result<(), IoError> {
    let rows = Rows::knn(res).map_err(|m| IoError::internal(path, m))?;
    write_result(path, &with_options(path, rows, opts)?)
}

/// [`crate::write_range`] with options.
pub fn write_range_with(
    path: &Path,
    res: &RangeResult,
    opts: &WriteOptions,
) -> Result<(), IoError> {
    let rows = Rows::range(res).map_err(|m| IoError::internal(path, m))?;
    write_result(path, &with_options(path, rows, opts)?)
}

/// [`crate::write_knn_tsv`] with options (exact distances; `columns` is not needed).
pub fn write_knn_tsv_with<W: Write>(
    w: W,
    res: &KnnResult,
    opts: &WriteOptions,
) -> std::io::Result<()> {
    tsv(
        w,
        Rows::knn(res)
            .and_then(|r| with_options(Path::new("-"), r, opts).map_err(|e| e.to_string())),
    )
}

/// [`crate::write_range_tsv`] with options.
pub fn write_range_tsv_with<W: Write>(
    w: W,
    res: &RangeResult,
    opts: &WriteOptions,
) -> std::io::Result<()> {
    tsv(
        w,
        Rows::range(res)
            .and_then(|r| with_options(Path::new("-"), r, opts).map_err(|e| e.to_string())),
    )
}

fn with_options<'a>(
    path: &Path,
    mut rows: Rows<'a>,
    opts: &WriteOptions<'a>,
) -> Result<Rows<'a>, IoError> {
    if let Some(e) = opts.exact_distances {
        if e.len() != rows.indices.len() {
            return Err(IoError::internal(
                path,
                format!(
                    "{} exact distances for {} results",
                    e.len(),
                    rows.indices.len()
                ),
            ));
        }
    }
    rows.exact = opts.exact_distances;
    rows.columns = opts.columns;
    Ok(rows)
}

/// True for the sparse output name (`….csr.npz`, any case).
pub fn is_sparse_name(path: &Path) -> bool {
    path.file_name()
        .map(|n| {
            n.to_string_lossy()
                .to_ascii_lowercase()
                .ends_with(".csr.npz")
        })
        .unwrap_or(false)
}

/// One NumPy array as an archive member: its header, then `values` in little-endian order.
fn array<'a, T: Elem>(
    name: &str,
    descr: &'static str,
    shape: Vec<usize>,
    values: Vals<'a, T>,
) -> (String, Fill<'a>) {
    let fill: Fill = Box::new(move |w: &mut dyn Write| {
        w.write_all(&encode_header(descr, &shape))?;
        values.write(w)
    });
    (format!("{name}.npy"), fill)
}

/// The values of one member: borrowed as they are, or widened to i64 on the fly.
enum Vals<'a, T> {
    Plain(&'a [T]),
    Wide(Box<dyn Fn() -> Vec<i64> + 'a>),
}

impl<T: Elem> Vals<'_, T> {
    fn write(&self, w: &mut dyn Write) -> std::io::Result<()> {
        match self {
            Vals::Plain(v) => write_le(w, v),
            Vals::Wide(f) => write_le(w, &f()),
        }
    }
}

fn wide<'a>(f: impl Fn() -> Vec<i64> + 'a) -> Vals<'a, i64> {
    Vals::Wide(Box::new(f))
}

/// The distances member: f64 when exact distances were given, else f32.
fn distances<'a>(name: &str, rows: &Rows<'a>, shape: Vec<usize>) -> (String, Fill<'a>) {
    match rows.exact {
        Some(e) => array(name, "<f8", shape, Vals::Plain(e)),
        None => array(name, "<f4", shape, Vals::Plain(rows.distances)),
    }
}

/// The one file of an `.npz` or `.csr.npz` output.
pub(crate) fn result_files<'a>(
    path: &Path,
    rows: &Rows<'a>,
) -> Result<Vec<(PathBuf, Body<'a>)>, IoError> {
    let rows = *rows;
    let ids = move || {
        rows.indices
            .iter()
            .map(|&i| i64::from(i))
            .collect::<Vec<_>>()
    };
    let starts = move || -> Vec<i64> {
        (0..rows.n)
            .map(|q| rows.span(q).start as i64)
            .chain(std::iter::once(rows.indices.len() as i64))
            .collect()
    };
    let members: Vec<(String, Fill<'a>)> = if is_sparse_name(path) {
        let Some(columns) = rows.columns else {
            return Err(IoError::internal(
                path,
                "a sparse output needs the base set's size",
            ));
        };
        let shape = [rows.n as i64, columns as i64];
        vec![
            array("indices", "<i8", vec![rows.indices.len()], wide(ids)),
            array("indptr", "<i8", vec![rows.n + 1], wide(starts)),
            array::<u8>("format", "|S3", vec![], Vals::Plain(b"csr")),
            array("shape", "<i8", vec![2], wide(move || shape.to_vec())),
            distances("data", &rows, vec![rows.indices.len()]),
        ]
    } else {
        let shape = match rows.shape {
            Ok(k) => vec![rows.n, k],
            Err(_) => vec![rows.indices.len()],
        };
        let mut m = vec![
            array("indices", "<i8", shape.clone(), wide(ids)),
            distances("distances", &rows, shape),
        ];
        if rows.shape.is_err() {
            m.push(array("offsets", "<i8", vec![rows.n + 1], wide(starts)));
        }
        m
    };
    let body: Body<'a> = Box::new(move |w| write_stored(w, &members));
    Ok(vec![(path.to_path_buf(), body)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zip::{contents, entries};

    fn member(file: &[u8], name: &str) -> Vec<u8> {
        let e = entries(file).unwrap();
        let e = e.iter().find(|e| e.name == name).unwrap();
        contents(file, e).unwrap()
    }

    /// Every member of an `.npz` is byte for byte the `.npy` file of the same name.
    #[test]
    fn npz_members_are_the_npy_files() {
        let res = RangeResult {
            offsets: vec![0, 2, 2, 3],
            indices: vec![7, 1, 0],
            distances: vec![0.25, 0.5, 1e-7],
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        crate::write_range(&dir.path().join("r.npz"), &res).unwrap();
        crate::write_range(&dir.path().join("r.npy"), &res).unwrap();
        let npz = std::fs::read(dir.path().join("r.npz")).unwrap();
        for part in ["indices", "distances", "offsets"] {
            let npy = std::fs::read(dir.path().join(format!("r.{part}.npy"))).unwrap();
            assert_eq!(member(&npz, &format!("{part}.npy")), npy, "{part}");
        }
    }

    #[test]
    fn sparse_members_follow_scipy() {
        let res = KnnResult {
            n_queries: 2,
            k: 2,
            indices: vec![0, 3, 1, 2],
            distances: vec![0.0, 1.0, 0.0, 2.0],
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.CSR.npz");
        let opts = WriteOptions {
            columns: Some(4),
            ..Default::default()
        };
        write_knn_with(&path, &res, &opts).unwrap();
        let file = std::fs::read(&path).unwrap();
        let names: Vec<String> = entries(&file)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(
            names,
            [
                "indices.npy",
                "indptr.npy",
                "format.npy",
                "shape.npy",
                "data.npy"
            ]
        );
        let body = |name: &str| {
            let m = member(&file, name);
            let start = 10 + usize::from(u16::from_le_bytes([m[8], m[9]]));
            (
                String::from_utf8_lossy(&m[..start]).into_owned(),
                m[start..].to_vec(),
            )
        };
        let (head, fmt) = body("format.npy");
        assert!(
            head.contains("'descr': '|S3'") && head.contains("'shape': ()"),
            "{head}"
        );
        assert_eq!(fmt, b"csr");
        let (_, shape) = body("shape.npy");
        assert_eq!(
            shape,
            [2i64, 4]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        let (_, indptr) = body("indptr.npy");
        assert_eq!(
            indptr,
            [0i64, 2, 4]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
    }
}
