//! Numeric delimited text (`.csv` with commas, `.tsv` with tabs): one vector per line, one
//! component per field.
//!
//! A first line that is not all numbers is a header and skipped; every other line must hold the
//! same number of numeric fields (the error names the first line, 1-based, that does not).
//! Blank lines, a UTF-8 byte-order mark, `\r\n` line ends and spaces around fields are allowed.
//! Each value is the float32 nearest to its decimal text (what `numpy.loadtxt(dtype=float32)`
//! gives): decimal text has no exact binary form to keep in general, so this reader rounds once,
//! as every reader of decimal text does.

use voisin::data::{Buffer, VectorData};
use voisin::Dataset;

use super::vectors;
use crate::error::{bail, Parsed, Problem};

const BOM: &[u8] = b"\xEF\xBB\xBF";

pub(crate) fn parse(bytes: &[u8], sep: u8) -> Parsed<Dataset> {
    let body = bytes.strip_prefix(BOM).unwrap_or(bytes);
    let text = std::str::from_utf8(body).map_err(|e| {
        Problem(format!(
            "not UTF-8 text (bad byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    let sep = char::from(sep);
    let fields = |line: &str| -> Option<Vec<f32>> {
        line.split(sep)
            .map(|f| f.trim().parse::<f32>().ok())
            .collect()
    };
    let mut values = Vec::new();
    let mut dim = 0;
    let mut rows = 0usize;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        match fields(line) {
            Some(v) => {
                if rows == 0 {
                    dim = v.len();
                } else if v.len() != dim {
                    bail!(
                        "line {} has {} fields but earlier lines have {dim}",
                        i + 1,
                        v.len()
                    );
                }
                values.extend(v);
                rows += 1;
            }
            None if rows == 0 && i == 0 => continue, // a header
            None => {
                let bad = line
                    .split(sep)
                    .position(|f| f.trim().parse::<f32>().is_err())
                    .unwrap_or(0);
                bail!("line {}, field {}: not a number", i + 1, bad + 1);
            }
        }
    }
    if rows == 0 {
        bail!("holds no rows of numbers");
    }
    vectors(rows, dim, VectorData::F32(Buffer::Owned(values)))
}
