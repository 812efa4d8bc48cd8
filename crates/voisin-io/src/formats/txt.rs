//! Plain-text string lists (`.txt`) for edit-distance search: one string per line.
//!
//! Lines end with `\n` or `\r\n` (the terminator is not part of the string); a final line
//! without a terminator counts, and a terminator at the very end does not start another, empty
//! string. Empty lines in the middle are empty strings. A leading UTF-8 byte-order mark is
//! dropped. Every line must be UTF-8; the error names the first line (1-based) that is not.
//! This module only parses; writing lives in `write.rs`.

use voisin::data::StringSet;
use voisin::Dataset;

use crate::error::{bail, Parsed, Problem};

const BOM: &[u8] = b"\xEF\xBB\xBF";

pub(crate) fn parse(bytes: &[u8]) -> Parsed<Dataset> {
    if bytes.is_empty() {
        bail!("file is empty");
    }
    let body = bytes.strip_prefix(BOM).unwrap_or(bytes);
    let body = body.strip_suffix(b"\n").unwrap_or(body);
    let mut set = StringSet::new();
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let text = std::str::from_utf8(line).map_err(|e| {
            Problem::from(format!(
                "line {} is not valid UTF-8 (bad byte at column {})",
                i + 1,
                e.valid_up_to() + 1
            ))
        })?;
        set.push(text)
            .map_err(|e| Problem::from(format!("line {}: {e}", i + 1)))?;
    }
    Ok(Dataset::Strings(set))
}
