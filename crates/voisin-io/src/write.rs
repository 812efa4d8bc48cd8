//! Writers: k-NN and range results (`.tsv`, `.ivecs` + `.fvecs`, `.npy`), vector sets (`.fvecs`,
//! `.bvecs`, `.fbin`, `.u8bin`, `.npy`) and string lists (`.txt`).
//!
//! Output layouts (indices are 0-based everywhere):
//! - `.tsv`: one line per result, `query<TAB>neighbor<TAB>distance`, rows in result order (by
//!   query, then by distance and index). Distances are printed with Rust's shortest round-trip
//!   form, so parsing them as f32 gives back the exact value.
//! - `.ivecs`: neighbour indices as TEXMEX rows, one per query; the distances go to a `.fvecs`
//!   of the same layout beside it (`res.ivecs` → `res.fvecs`). k-NN rows all have length k;
//!   range rows have each query's own length, possibly 0 (legal TEXMEX, though this crate's
//!   reader, which wants equal non-zero dimensions, does not read such files back). Indices above
//!   `i32::MAX` cannot be stored and are refused before anything is written.
//! - `.npy`: `<stem>.indices.npy` (int64) and `<stem>.distances.npy` (float32), where `<stem>` is
//!   the path without `.npy` and without a trailing `.indices`/`.distances`/`.offsets`, so
//!   `--out res.npy` and `--out res.indices.npy` both give `res.indices.npy` and
//!   `res.distances.npy` (nothing is written at `res.npy` itself). k-NN arrays have shape
//!   `(n_queries, k)`; range arrays are flat, with `<stem>.offsets.npy` (int64, `n_queries + 1`
//!   entries, CSR) saying that query `q` owns entries `offsets[q]..offsets[q + 1]`.
//!
//! Every output goes through `voisin::commit::OutputSet`: all its files are checked before the
//! work ([`check_outputs`] with [`result_files`]), written to temporary files in their
//! destination folder and renamed into place only after all were written and synced, with the
//! previous result restored if a rename fails; only regular files are ever replaced, and a
//! companion file (`res.fvecs`) only when the named one (`res.ivecs`) exists too. This module
//! must not parse inputs.

use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use voisin::commit::OutputSet;
use voisin::data::{StringSet, VectorData, VectorSet};
use voisin::engine::{KnnResult, RangeResult};

use crate::error::IoError;
use crate::extension;
use crate::formats::npy::encode_header;
use crate::formats::Elem;

/// The rows of a k-NN result (all of length k) or of a range result (CSR), checked for
/// consistency so that writers can index freely.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    pub n: usize,
    /// `Ok(k)` for fixed rows, `Err(offsets)` for CSR.
    pub shape: Result<usize, &'a [usize]>,
    pub indices: &'a [u32],
    pub distances: &'a [f32],
    /// The same distances as exact f64 values, written instead of `distances` when given.
    pub exact: Option<&'a [f64]>,
    /// Columns of the result seen as a matrix (the base set's size), for sparse outputs.
    pub columns: Option<usize>,
}

impl<'a> Rows<'a> {
    pub fn knn(res: &'a KnnResult) -> Result<Self, String> {
        let len = res.n_queries.checked_mul(res.k);
        if len != Some(res.indices.len()) || len != Some(res.distances.len()) {
            return Err(format!(
                "result is inconsistent: {} indices and {} distances for {} x {}",
                res.indices.len(),
                res.distances.len(),
                res.n_queries,
                res.k
            ));
        }
        Ok(Rows {
            n: res.n_queries,
            shape: Ok(res.k),
            indices: &res.indices,
            distances: &res.distances,
            exact: None,
            columns: None,
        })
    }

    pub fn range(res: &'a RangeResult) -> Result<Self, String> {
        let o = &res.offsets;
        let ok = o.first().is_some_and(|&f| f == 0)
            && o.windows(2).all(|w| w[0] <= w[1])
            && o.last() == Some(&res.indices.len())
            && res.indices.len() == res.distances.len();
        if !ok {
            return Err(format!(
                "result is inconsistent: {} offsets for {} indices and {} distances",
                o.len(),
                res.indices.len(),
                res.distances.len()
            ));
        }
        Ok(Rows {
            n: o.len() - 1,
            shape: Err(o),
            indices: &res.indices,
            distances: &res.distances,
            exact: None,
            columns: None,
        })
    }

    pub fn span(&self, q: usize) -> Range<usize> {
        match self.shape {
            Ok(k) => q * k..(q + 1) * k,
            Err(o) => o[q]..o[q + 1],
        }
    }

    fn iter(&self) -> impl Iterator<Item = (usize, &'a [u32], &'a [f32])> + '_ {
        (0..self.n).map(move |q| {
            let r = self.span(q);
            (q, &self.indices[r.clone()], &self.distances[r])
        })
    }
}

pub(crate) fn tsv<W: Write>(w: W, rows: Result<Rows<'_>, String>) -> io::Result<()> {
    let rows = rows.map_err(|m| io::Error::new(io::ErrorKind::InvalidInput, m))?;
    let mut w = BufWriter::new(w);
    for q in 0..rows.n {
        let r = rows.span(q);
        for (j, i) in r.clone().zip(&rows.indices[r]) {
            match rows.exact {
                Some(e) => writeln!(w, "{q}\t{i}\t{}", e[j])?,
                None => writeln!(w, "{q}\t{i}\t{}", rows.distances[j])?,
            }
        }
    }
    w.flush()
}

/// Writes a k-NN result as TSV (`query<TAB>neighbor<TAB>distance` per line), e.g. to stdout.
pub fn write_knn_tsv<W: Write>(w: W, res: &KnnResult) -> io::Result<()> {
    tsv(w, Rows::knn(res))
}

/// Writes a range result as TSV, same layout as [`write_knn_tsv`].
pub fn write_range_tsv<W: Write>(w: W, res: &RangeResult) -> io::Result<()> {
    tsv(w, Rows::range(res))
}

/// Writes a k-NN result to `path`; the extension picks the layout (`.tsv`, `.ivecs`, `.npy`,
/// described in the module documentation of this crate's `write` module and in the README).
pub fn write_knn(path: &Path, res: &KnnResult) -> Result<(), IoError> {
    let rows = Rows::knn(res).map_err(|m| IoError::internal(path, m))?;
    write_result(path, &rows)
}

/// Writes a range result to `path`; `.tsv`, `.ivecs` (ragged rows) or `.npy` (flat + offsets).
pub fn write_range(path: &Path, res: &RangeResult) -> Result<(), IoError> {
    let rows = Rows::range(res).map_err(|m| IoError::internal(path, m))?;
    write_result(path, &rows)
}

/// One output file: where it goes and how to fill it.
pub(crate) type Body<'a> = Box<dyn Fn(&mut dyn Write) -> io::Result<()> + 'a>;

/// The files a result written to `path` consists of, the named one first (see the module
/// documentation); `range` results in `.npy` also have offsets. Unknown extensions are refused.
pub fn result_files(path: &Path, range: bool) -> Result<Vec<PathBuf>, IoError> {
    Ok(match extension(path).as_str() {
        "tsv" | "npz" => vec![path.to_path_buf()],
        "ivecs" => vec![path.to_path_buf(), path.with_extension("fvecs")],
        "npy" => {
            let stem = npy_stem(path);
            let parts: &[&str] = if range {
                &["indices.npy", "distances.npy", "offsets.npy"]
            } else {
                &["indices.npy", "distances.npy"]
            };
            parts.iter().map(|p| with_suffix(&stem, p)).collect()
        }
        ext => {
            return Err(IoError::user(
                path,
                format!(
                    "unknown output format '.{ext}' (known: .tsv, .ivecs with a .fvecs beside it, \
                     .npy, .npz, .csr.npz)"
                ),
            ))
        }
    })
}

/// Checks every file an output will consist of before any work (voisin's commit rules: folder
/// writable, name usable, nothing there but an earlier result of voisin; see
/// `voisin::commit`), so that a long run never ends in an unwritable path.
pub fn check_outputs(files: &[PathBuf]) -> Result<(), IoError> {
    OutputSet::new(files.to_vec())
        .map(drop)
        .map_err(IoError::from)
}

/// Refuses exact (f64) distances for an output that cannot hold them (`.ivecs`, whose
/// distances go to an f32 `.fvecs`).
pub(crate) fn check_exact(path: &Path) -> Result<(), IoError> {
    if extension(path) != "ivecs" {
        return Ok(());
    }
    Err(IoError::user(
        path,
        "f64 distances cannot go in the .fvecs beside an .ivecs; use .npz, .npy or .tsv",
    ))
}

pub(crate) fn write_result(path: &Path, rows: &Rows<'_>) -> Result<(), IoError> {
    let names = result_files(path, rows.shape.is_err())?;
    let bodies: Vec<Body> = match extension(path).as_str() {
        "npz" => return write_files(crate::outputs::result_files(path, rows)?),
        "tsv" => vec![Box::new(|w: &mut dyn Write| tsv(w, Ok(*rows)))],
        "ivecs" if rows.exact.is_some() => return check_exact(path),
        "ivecs" => {
            check_i32(path, rows)?;
            vec![
                Box::new(|w| texmex_rows(w, rows, |ids, _| to_i32(ids))),
                Box::new(|w| texmex_rows(w, rows, |_, ds| ds.to_vec())),
            ]
        }
        _ => {
            let shape: Vec<usize> = match rows.shape {
                Ok(k) => vec![rows.n, k],
                Err(_) => vec![rows.indices.len()],
            };
            let shape2 = shape.clone();
            let mut bodies: Vec<Body> = vec![
                Box::new(move |w| {
                    w.write_all(&encode_header("<i8", &shape))?;
                    let wide: Vec<i64> = rows.indices.iter().map(|&i| i64::from(i)).collect();
                    write_le(w, &wide)
                }),
                Box::new(move |w| match rows.exact {
                    Some(e) => {
                        w.write_all(&encode_header("<f8", &shape2))?;
                        write_le(w, e)
                    }
                    None => {
                        w.write_all(&encode_header("<f4", &shape2))?;
                        write_le(w, rows.distances)
                    }
                }),
            ];
            if let Err(offsets) = rows.shape {
                bodies.push(Box::new(move |w| {
                    w.write_all(&encode_header("<i8", &[offsets.len()]))?;
                    let wide: Vec<i64> = offsets.iter().map(|&o| o as i64).collect();
                    write_le(w, &wide)
                }));
            }
            bodies
        }
    };
    write_files(names.into_iter().zip(bodies).collect())
}

/// `.ivecs` stores i32: refuse indices and row lengths that do not fit before writing anything.
fn check_i32(path: &Path, rows: &Rows<'_>) -> Result<(), IoError> {
    let max_index = rows.indices.iter().max().copied().unwrap_or(0);
    if max_index > i32::MAX as u32 {
        return Err(IoError::user(
            path,
            format!("index {max_index} does not fit the i32 values of .ivecs; use .npy"),
        ));
    }
    let longest = (0..rows.n).map(|q| rows.span(q).len()).max().unwrap_or(0);
    if longest > i32::MAX as usize {
        return Err(IoError::user(
            path,
            format!("a row of {longest} results is too long for .ivecs; use .npy"),
        ));
    }
    Ok(())
}

fn to_i32(ids: &[u32]) -> Vec<i32> {
    // check_i32 ran first, so every index fits.
    ids.iter().map(|&i| i as i32).collect()
}

/// One TEXMEX row per query: its length, then the values `pick` takes from it.
fn texmex_rows<T: Elem>(
    w: &mut dyn Write,
    rows: &Rows<'_>,
    pick: impl Fn(&[u32], &[f32]) -> Vec<T>,
) -> io::Result<()> {
    for (_, ids, ds) in rows.iter() {
        let vals = pick(ids, ds);
        write_le(w, &[vals.len() as i32])?;
        write_le(w, &vals)?;
    }
    Ok(())
}

/// `out.npy` and `out.indices.npy` both name the stem `out`.
fn npy_stem(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut stem = name.as_str();
    if stem.to_ascii_lowercase().ends_with(".npy") {
        stem = &stem[..stem.len() - 4];
    }
    for part in [".indices", ".distances", ".offsets"] {
        if let Some(s) = stem.strip_suffix(part) {
            stem = s;
            break;
        }
    }
    path.with_file_name(stem)
}

fn with_suffix(stem: &Path, suffix: &str) -> PathBuf {
    let mut name = stem.file_name().unwrap_or_default().to_os_string();
    name.push(".");
    name.push(suffix);
    stem.with_file_name(name)
}

/// Values in little-endian order, whatever the host.
pub(crate) fn write_le<T: Elem>(w: &mut dyn Write, vals: &[T]) -> io::Result<()> {
    if cfg!(target_endian = "little") {
        w.write_all(bytemuck::cast_slice(vals))
    } else {
        let swapped: Vec<T> = vals.iter().map(|v| v.swap_bytes()).collect();
        w.write_all(bytemuck::cast_slice(&swapped))
    }
}

/// Writes each body to a temporary file beside its destination, then commits them all or none
/// (`voisin::commit::OutputSet`: checked targets, backups of replaced files, folder lock).
pub(crate) fn write_files(files: Vec<(PathBuf, Body<'_>)>) -> Result<(), IoError> {
    let (names, bodies): (Vec<PathBuf>, Vec<Body>) = files.into_iter().unzip();
    let mut set = OutputSet::new(names)?;
    for (i, body) in bodies.into_iter().enumerate() {
        set.write(i, |w| body(w))?;
    }
    Ok(set.commit()?)
}

/// Writes a vector set; the extension picks the format: `.fvecs` and `.fbin` (f32; f16, bf16
/// and u8 storage is converted, exactly; f64 storage only when every value is an f32 number),
/// `.bvecs` and `.u8bin` (u8 storage only), `.npy` (the storage type: `<f4`, `<f8`, `<f2` or
/// `|u1`; bf16, which NumPy lacks, as `<f4`).
pub fn write_vectors(path: &Path, v: &VectorSet) -> Result<(), IoError> {
    let (n, d) = (v.len(), v.dim());
    let ext = extension(path);
    if matches!(ext.as_str(), "fvecs" | "fbin") && !v.is_f32_exact() {
        return Err(IoError::user(
            path,
            format!(
                ".{ext} holds f32 values but these vectors hold f64 values with no exact f32 \
                 form (write .npy to keep them)"
            ),
        ));
    }
    let u8_only = |fmt: &str| -> Result<&[u8], IoError> {
        match v.data() {
            VectorData::U8(b) => Ok(b.as_slice()),
            _ => Err(IoError::user(
                path,
                format!(
                    "{fmt} holds u8 values but these vectors are stored as {}",
                    v.elem_type().name()
                ),
            )),
        }
    };
    let body: Body = match ext.as_str() {
        "fvecs" => Box::new(move |w| {
            for i in 0..n {
                write_le(w, &[d as i32])?;
                write_le(w, &v.row_f32(i))?;
            }
            Ok(())
        }),
        "bvecs" => {
            let vals = u8_only(".bvecs")?;
            Box::new(move |w| {
                for row in vals.chunks_exact(d) {
                    write_le(w, &[d as i32])?;
                    w.write_all(row)?;
                }
                Ok(())
            })
        }
        "fbin" => Box::new(move |w| {
            write_le(w, &[n as u32, d as u32])?;
            write_le(w, &v.rows_f32(0, n))
        }),
        "u8bin" => {
            let vals = u8_only(".u8bin")?;
            Box::new(move |w| {
                write_le(w, &[n as u32, d as u32])?;
                w.write_all(vals)
            })
        }
        "npy" => Box::new(move |w| match v.data() {
            VectorData::F16(b) => {
                w.write_all(&encode_header("<f2", &[n, d]))?;
                write_le(w, b.as_slice())
            }
            VectorData::U8(b) => {
                w.write_all(&encode_header("|u1", &[n, d]))?;
                w.write_all(b.as_slice())
            }
            VectorData::F32(_) | VectorData::Bf16(_) => {
                w.write_all(&encode_header("<f4", &[n, d]))?;
                write_le(w, &v.rows_f32(0, n))
            }
            VectorData::F64(b) => {
                w.write_all(&encode_header("<f8", &[n, d]))?;
                write_le(w, b.as_slice())
            }
        }),
        ext => {
            return Err(IoError::user(
                path,
                format!(
                    "cannot write vectors as '.{ext}' (known: .fvecs .bvecs .fbin .u8bin .npy)"
                ),
            ))
        }
    };
    if d > i32::MAX as usize {
        return Err(IoError::user(path, format!("dimension {d} is too large")));
    }
    write_files(vec![(path.to_path_buf(), body)])
}

/// Writes strings one per line (`\n`-terminated). A string holding a line break, or ending in
/// `\r`, could not be read back as the same string and is refused.
pub fn write_strings(path: &Path, s: &StringSet) -> Result<(), IoError> {
    if extension(path) != "txt" {
        return Err(IoError::user(
            path,
            "strings are written as .txt (one string per line)",
        ));
    }
    let strings: Vec<String> = (0..s.len()).map(|i| s.get_string(i)).collect();
    if let Some(i) = strings
        .iter()
        .position(|t| t.contains('\n') || t.ends_with('\r'))
    {
        return Err(IoError::user(
            path,
            format!("string {i} contains a line break, which one-per-line text cannot hold"),
        ));
    }
    write_files(vec![(
        path.to_path_buf(),
        Box::new(|w| {
            for t in &strings {
                w.write_all(t.as_bytes())?;
                w.write_all(b"\n")?;
            }
            Ok(())
        }),
    )])
}
