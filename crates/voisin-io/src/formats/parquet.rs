//! Parquet tables (`.parquet`) as vectors, read with the `parquet` crate's record API.
//!
//! Layouts: one list column (a fixed-size list as pyarrow writes `pa.list_(pa.float32(), d)`,
//! or a variable list whose rows all have the same length) holding each vector; or, with no
//! list column, every column one dimension (`pandas.DataFrame(X).to_parquet`). With several
//! list columns, or to pick one column of a table, name it: `data.parquet:emb`. Values may be
//! float32, float64 and integers, stored as for `.npy` (f32 when every value is an f32 number,
//! else f64, answered exactly); nulls and
//! other types are refused naming the row and column. The parquet crate is guarded against
//! panics on damaged files, as the HDF5 reader is.

use bytes::Bytes;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use voisin::data::MAX_ITEMS;
use voisin::Dataset;

use super::{exact, vectors};
use crate::error::{bail, Parsed, Problem};

fn lib_err(e: parquet::errors::ParquetError) -> Problem {
    Problem::from(format!("not a readable Parquet file ({e})"))
}

pub(crate) fn parse(bytes: &[u8], column: Option<&str>) -> Parsed<Dataset> {
    super::guarded("Parquet", "parquet", || parse_unguarded(bytes, column))
}

/// One value as f64, exactly, or why not (a 64-bit integer f64 would round).
fn value(f: &Field) -> Result<f64, String> {
    let wide = |v: i128| {
        let x = v as f64;
        if x as i128 == v {
            Ok(x)
        } else {
            Err(format!("{v} has no exact float64 form"))
        }
    };
    match f {
        Field::Float(v) => Ok(f64::from(*v)),
        Field::Double(v) => Ok(*v),
        Field::Byte(v) => Ok(f64::from(*v)),
        Field::Short(v) => Ok(f64::from(*v)),
        Field::UByte(v) => Ok(f64::from(*v)),
        Field::UShort(v) => Ok(f64::from(*v)),
        Field::Int(v) => Ok(f64::from(*v)),
        Field::UInt(v) => Ok(f64::from(*v)),
        Field::Long(v) => wide(i128::from(*v)),
        Field::ULong(v) => wide(i128::from(*v)),
        Field::Float16(v) => Ok(f64::from(*v)),
        Field::Null => Err("it is null".into()),
        other => Err(format!("'{other}' is not a number")),
    }
}

fn parse_unguarded(bytes: &[u8], column: Option<&str>) -> Parsed<Dataset> {
    let reader = SerializedFileReader::new(Bytes::copy_from_slice(bytes)).map_err(lib_err)?;
    let meta = reader.metadata().file_metadata();
    let rows = meta.num_rows();
    if rows <= 0 {
        bail!("holds no rows");
    }
    if rows as u64 > MAX_ITEMS as u64 {
        bail!("holds {rows} rows, more than the limit of {MAX_ITEMS}");
    }
    let schema = meta.schema_descr();
    let root = schema.root_schema();
    let fields = root.get_fields();
    let names: Vec<&str> = fields.iter().map(|f| f.name()).collect();
    let lists: Vec<&str> = fields
        .iter()
        .filter(|f| f.is_group())
        .map(|f| f.name())
        .collect();
    // The columns to read, and whether they hold whole vectors (a list) or one value each.
    let (wanted, listed): (Vec<&str>, bool) = match column {
        Some(c) if !names.contains(&c) => bail!("no column '{c}' (found: {})", names.join(", ")),
        Some(c) => (vec![c], lists.contains(&c)),
        None if lists.len() == 1 => (lists.clone(), true),
        None if lists.is_empty() => (names.clone(), false),
        None => bail!(
            "holds {} list columns ({}); name one as FILE.parquet:NAME",
            lists.len(),
            lists.join(", ")
        ),
    };
    let mut values: Vec<f64> = Vec::new();
    let mut dim = 0usize;
    let iter = reader.get_row_iter(None).map_err(lib_err)?;
    for (r, row) in iter.enumerate() {
        let row = row.map_err(lib_err)?;
        let before = values.len();
        for (name, field) in row.get_column_iter() {
            if !wanted.contains(&name.as_str()) {
                continue;
            }
            let bad = |why: String| Problem::from(format!("row {r}, column '{name}': {why}"));
            match (field, listed) {
                (Field::ListInternal(list), true) => {
                    for (j, f) in list.elements().iter().enumerate() {
                        values.push(value(f).map_err(|w| bad(format!("element {j}: {w}")))?);
                    }
                }
                (Field::Null, true) => return Err(bad("the vector is null".into())),
                (_, true) => return Err(bad("is not a list of numbers".into())),
                (f, false) => values.push(value(f).map_err(bad)?),
            }
        }
        let len = values.len() - before;
        if r == 0 {
            dim = len;
            if dim == 0 {
                bail!("row 0 holds no values (dimension 0)");
            }
        } else if len != dim {
            bail!("row {r} holds {len} values but row 0 holds {dim}");
        }
    }
    let n = values.len() / dim.max(1);
    vectors(n, dim, exact(&values, dim)?)
}
