//! big-ann-benchmarks binary files: `.fbin` (f32) and `.u8bin` (u8). A header of two
//! little-endian u32 (`n`, then `d`) is followed by exactly `n × d` row-major values.
//!
//! The values sit contiguously at byte 8, so a memory-mapped file is searched in place (a 20 GB
//! `.fbin` is never copied). The header is checked against the file length before anything is
//! mapped or allocated. This module only parses; writing lives in `write.rs`.

use voisin::data::VectorData;
use voisin::Dataset;

use super::{check_shape, le_u32, values, vectors, Source};
use crate::error::{bail, Parsed};

const HEADER: usize = 8;

/// The two big-ann flavours, which differ only in the value type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BigAnn {
    Fbin,
    U8bin,
}

pub(crate) fn parse(src: Source<'_>, kind: BigAnn) -> Parsed<Dataset> {
    let bytes = src.bytes;
    if bytes.is_empty() {
        bail!("file is empty");
    }
    if bytes.len() < HEADER {
        bail!(
            "file is {} bytes, too short for the 8-byte header (u32 n, u32 d)",
            bytes.len()
        );
    }
    let (n, d) = (le_u32(bytes, 0), le_u32(bytes, 4));
    let (size, name) = match kind {
        BigAnn::Fbin => (4, "f32"),
        BigAnn::U8bin => (1, "u8"),
    };
    let (n, d) = check_shape(n.into(), d.into(), size, name, bytes.len() - HEADER)?;
    let data = match kind {
        BigAnn::Fbin => VectorData::F32(values(src, HEADER, n * d, false)?),
        BigAnn::U8bin => VectorData::U8(values(src, HEADER, n * d, false)?),
    };
    vectors(n, d, data)
}
