//! Numeric delimited text (`.csv` with commas, `.tsv` with tabs): one vector per line, one
//! component per field.
//!
//! The header rule ([`Header`], the CLI's `--header yes|no|auto`): with `yes` the first line is
//! a header whatever it holds, with `no` every line is data. With `auto` (the default) the first
//! line is a header when a field of it is not a number (`x,y,z`), or when it is exactly the
//! column numbers `0,1,…,d−1` that pandas writes for an unnamed frame
//! (`pandas.DataFrame(X).to_csv(index=False)`) above data written with a decimal point or an
//! exponent somewhere; column numbers above whole numbers only could be either, and are refused
//! with a line asking for `yes` or `no`. Any other first line is data, and so is a line of
//! numbers alone in its file.
//!
//! Every other line must hold the same number of numeric fields (the error names the first
//! line, 1-based, that does not); an empty field is refused with its line and field, never
//! skipped (a pandas index column leaves the header's first field empty, and its message says
//! so). Blank lines, a UTF-8 byte-order mark, `\r\n` line ends and spaces around fields are
//! allowed. Each value is the float32 nearest to its decimal text (what
//! `numpy.loadtxt(dtype=float32)` gives): decimal text has no exact binary form to keep in
//! general, so this reader rounds once, as every reader of decimal text does. A file holding a
//! finite value beyond float32's range (magnitude above about 3.4e38, or nonzero below about
//! 1.4e-45, which would become infinite or 0) is read as float64 instead, each value the float64
//! nearest its text (and answered exactly on those values); text beyond float64's range is
//! refused. `inf` and `nan` are read as such and judged by the caller (`--allow-nan`).

use voisin::data::{Buffer, VectorData};
use voisin::Dataset;

use super::{exact, vectors};
use crate::error::{bail, Parsed, Problem};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether the first line of delimited text is a header (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Header {
    /// Decide from the first line (the default): a header when a field is not a number, or when
    /// it holds the column numbers pandas writes above data that is not whole numbers only.
    #[default]
    Auto,
    /// The first line is a header, whatever it holds, and is skipped.
    Yes,
    /// Every line is data, the first included.
    No,
}

/// The fields of the data lines: (line number, fields), blank lines left out.
type Lines<'a> = Vec<(usize, Vec<&'a str>)>;

pub(crate) fn parse(bytes: &[u8], sep: u8, header: Header) -> Parsed<Dataset> {
    let body = bytes.strip_prefix(BOM).unwrap_or(bytes);
    let text = std::str::from_utf8(body).map_err(|e| {
        Problem::from(format!(
            "not UTF-8 text (bad byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    let sep = char::from(sep);
    let mut lines: Lines = text
        .lines()
        .enumerate()
        .map(|(i, line)| (i + 1, line.trim_end_matches('\r')))
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| (n, line.split(sep).map(str::trim).collect()))
        .collect();
    if lines.is_empty() {
        bail!("holds no rows of numbers");
    }
    if is_header(&lines, header)? {
        lines.remove(0);
    }
    let Some((_, first)) = lines.first() else {
        bail!("holds no rows of numbers");
    };
    let (rows, dim) = (lines.len(), first.len());
    let data = match values::<f32>(&lines)? {
        Some(v) => VectorData::F32(Buffer::Owned(v)),
        None => {
            let v = values::<f64>(&lines)?
                .ok_or_else(|| Problem::from("values beyond float64's range"))?;
            exact(&v, dim)?
        }
    };
    vectors(rows, dim, data)
}

/// Whether the first line is a header, by `header`'s rule.
fn is_header(lines: &Lines, header: Header) -> Parsed<bool> {
    let (n, first) = &lines[0];
    match header {
        Header::Yes => return Ok(true),
        Header::No => return Ok(false),
        Header::Auto => {}
    }
    if first.iter().any(|f| !f.is_empty() && number(f).is_none()) {
        return Ok(true);
    }
    if let Some(at) = first.iter().position(|f| f.is_empty()) {
        let pandas_index = at == 0 && column_numbers(&first[1..]);
        bail!(
            "line {n}, field {} is empty{}",
            at + 1,
            if pandas_index {
                " (pandas writes its index column so: save the frame with index=False)"
            } else {
                ""
            }
        );
    }
    if !column_numbers(first) {
        return Ok(false);
    }
    let decimal = lines[1..]
        .iter()
        .flat_map(|(_, fields)| fields)
        .any(|f| !is_integer_text(f));
    if decimal || lines.len() == 1 {
        // A lone line of numbers is data.
        return Ok(decimal);
    }
    bail!(
        "line {n} reads {}: the column numbers pandas writes as a header, or a row of data (the \
         lines below hold whole numbers only); say which with --header yes or --header no",
        first.join(",")
    )
}

/// `0,1,…,d−1` written as plain integers.
fn column_numbers(fields: &[&str]) -> bool {
    !fields.is_empty() && fields.iter().enumerate().all(|(i, f)| *f == i.to_string())
}

fn is_integer_text(f: &str) -> bool {
    let digits = f.strip_prefix(['+', '-']).unwrap_or(f);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Whether the text is a number at all (the header test).
fn number(f: &str) -> Option<f64> {
    f.parse::<f64>().ok()
}

/// Every field as the nearest `T`, row-major; `None` when a finite nonzero text is beyond
/// `T`'s range and `T` is f32 (the caller reads the file as f64), an error when it is f64.
fn values<T: std::str::FromStr + Copy + Into<f64>>(lines: &Lines) -> Parsed<Option<Vec<T>>> {
    let name = if std::mem::size_of::<T>() == 4 {
        "float32"
    } else {
        "float64"
    };
    let dim = lines[0].1.len();
    let mut out = Vec::with_capacity(lines.len() * dim);
    for (n, fields) in lines {
        if fields.len() != dim {
            bail!(
                "line {n} has {} fields but earlier lines have {dim}",
                fields.len()
            );
        }
        for (j, f) in fields.iter().enumerate() {
            if f.is_empty() {
                bail!("line {n}, field {} is empty", j + 1);
            }
            let Ok(v) = f.parse::<T>() else {
                bail!("line {n}, field {}: not a number", j + 1);
            };
            let x: f64 = v.into();
            let beyond = (!x.is_finite() && !is_inf_or_nan(f)) || (x == 0.0 && !is_zero(f));
            if beyond {
                if name == "float32" {
                    return Ok(None);
                }
                bail!(
                    "line {n}, field {}: {f} is beyond the range of {name}",
                    j + 1
                );
            }
            out.push(v);
        }
    }
    Ok(Some(out))
}

/// `inf`, `-Infinity`, `NaN`: text that means a non-finite value.
fn is_inf_or_nan(f: &str) -> bool {
    let t = f.trim_start_matches(['+', '-']).to_ascii_lowercase();
    t.starts_with("inf") || t == "nan"
}

/// Text whose value is zero: no nonzero digit before the exponent.
fn is_zero(f: &str) -> bool {
    let mantissa = f.split(['e', 'E']).next().unwrap_or(f);
    !mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b))
}
