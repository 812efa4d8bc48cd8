//! TEXMEX vector files: `.fvecs` (f32), `.ivecs` (i32) and `.bvecs` (u8). Each row is a
//! little-endian i32 dimension followed by that many values; every row must declare the same
//! dimension.
//!
//! Because the row headers are interleaved with the values, these files are always copied into
//! owned storage (never mapped). `.ivecs` inputs become f32 vectors when every value is exactly
//! an f32 (as every integer up to 2^24 in magnitude is), else exact f64 vectors. This module
//! only parses; writing lives in `write.rs`.

use voisin::data::{Buffer, VectorData};
use voisin::Dataset;

use super::{exact, le_u32, vectors, Elem};
use crate::error::{bail, Parsed};

/// The three TEXMEX flavours, which differ only in the value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Texmex {
    Fvecs,
    Ivecs,
    Bvecs,
}

impl Texmex {
    pub fn elem_size(self) -> usize {
        match self {
            Texmex::Fvecs | Texmex::Ivecs => 4,
            Texmex::Bvecs => 1,
        }
    }
}

/// Validates the row structure and returns `(n, dim)`: the row count and the dimension every
/// row declares.
fn layout(bytes: &[u8], kind: Texmex) -> Parsed<(usize, usize)> {
    let len = bytes.len();
    if len == 0 {
        bail!("file is empty");
    }
    if len < 4 {
        bail!("file is {len} bytes, too short for a row header (a 4-byte dimension)");
    }
    let dim = le_u32(bytes, 0) as i32;
    if dim <= 0 {
        bail!("row 0 declares dimension {dim}; dimensions must be positive");
    }
    let dim = dim as usize;
    // dim < 2^31 and elem_size <= 4, so this cannot overflow a 64-bit usize; on 32-bit
    // targets checked_mul guards it.
    let Some(stride) = dim
        .checked_mul(kind.elem_size())
        .and_then(|b| b.checked_add(4))
    else {
        bail!("row 0 declares dimension {dim}, too large for this machine");
    };
    let n = len / stride;
    let check_row = |i: usize| -> Parsed<()> {
        let at = i * stride;
        let d = le_u32(bytes, at) as i32;
        if d as i64 != dim as i64 {
            bail!(
                "row {i} declares dimension {d}, but row 0 has {dim}; every row must have the \
                 same dimension"
            );
        }
        Ok(())
    };
    for i in 1..n {
        check_row(i)?;
    }
    if n == 0 {
        bail!("row 0 declares dimension {dim}, which takes {stride} bytes, but the file has only {len}");
    }
    let rest = len - n * stride;
    if rest != 0 {
        // A tail that still has a row header may be a row of another dimension: say so, since
        // that is the more useful message.
        if rest >= 4 {
            check_row(n)?;
        }
        bail!(
            "file ends with {rest} bytes that are not a whole row (truncated last row or \
             trailing garbage); a row of dimension {dim} takes {stride} bytes"
        );
    }
    if n > voisin::data::MAX_ITEMS {
        bail!(
            "{n} vectors, more than the limit of {}",
            voisin::data::MAX_ITEMS
        );
    }
    Ok((n, dim))
}

/// Values of all rows, headers skipped, in host order.
fn row_values<T: Elem>(bytes: &[u8], n: usize, dim: usize) -> Vec<T> {
    let stride = 4 + dim * std::mem::size_of::<T>();
    let mut out = Vec::with_capacity(n * dim);
    for row in bytes.chunks_exact(stride) {
        out.extend(
            row[4..]
                .chunks_exact(std::mem::size_of::<T>())
                .map(|c| T::decode(c, false)),
        );
    }
    out
}

/// Parses a whole TEXMEX file.
pub(crate) fn parse(bytes: &[u8], kind: Texmex) -> Parsed<Dataset> {
    let (n, dim) = layout(bytes, kind)?;
    let data = match kind {
        Texmex::Fvecs => VectorData::F32(Buffer::Owned(row_values::<f32>(bytes, n, dim))),
        Texmex::Bvecs => VectorData::U8(Buffer::Owned(row_values::<u8>(bytes, n, dim))),
        Texmex::Ivecs => {
            let ints = row_values::<i32>(bytes, n, dim);
            exact(&ints, dim)?
        }
    };
    vectors(n, dim, data)
}
