//! NumPy `.npy` files (format versions 1, 2 and 3): the header parser and header encoder.
//!
//! Accepted: 2-D arrays `(n, d)`, and 1-D arrays `(n,)` read as `n` vectors of dimension 1 (a
//! column of scalars, the way scikit-learn reads `reshape(-1, 1)`); C or Fortran order; either
//! byte order. Stored types f32, f16 and u8 are kept as they are (bool as u8 0/1); f64 and the
//! integer types (i8, i16, i32, i64, u16, u32, u64) are stored as f32 when every value is
//! exactly an f32 number and as f64 otherwise, answered exactly on their own values (a 64-bit
//! integer f64 would round is refused); any other dtype is refused by name.
//!
//! C-order f32/f16/u8 data (and f64 data kept as f64) in host byte order is mapped in place when the file is mapped and the
//! data offset is aligned (NumPy pads headers to 64 bytes, so it is); everything else is copied.
//! The header is a Python literal; this module parses the small subset NumPy writes (dict,
//! strings, booleans, tuples of integers) with a nesting limit and a size limit, rather than
//! trusting it. Writing array bodies lives in `write.rs`; this module only encodes headers.

use voisin::data::{Buffer, VectorData};
use voisin::Dataset;

use super::{check_shape, exact, transpose, values, vectors, Elem, Source};
use crate::error::{bail, Parsed, Problem};
use voisin::data::ExactInF64;

const MAGIC: &[u8] = b"\x93NUMPY";

/// Headers larger than this are refused; NumPy itself refuses above 10 000 bytes by default, and
/// the header of a 2-D array is under 200.
const MAX_HEADER: usize = 65_536;

/// Literals nested deeper than this are refused, so a hostile header cannot exhaust the stack.
const MAX_DEPTH: usize = 8;

/// The element types this crate reads from `.npy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    F32,
    F16,
    U8,
    F64,
    I8,
    I16,
    I32,
    I64,
    U16,
    U32,
    U64,
    Bool,
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Dtype::U8 | Dtype::I8 | Dtype::Bool => 1,
            Dtype::F16 | Dtype::I16 | Dtype::U16 => 2,
            Dtype::F32 | Dtype::I32 | Dtype::U32 => 4,
            Dtype::F64 | Dtype::I64 | Dtype::U64 => 8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::U8 => "u8",
            Dtype::F64 => "f64",
            Dtype::I8 => "i8",
            Dtype::I16 => "i16",
            Dtype::I32 => "i32",
            Dtype::I64 => "i64",
            Dtype::U16 => "u16",
            Dtype::U32 => "u32",
            Dtype::U64 => "u64",
            Dtype::Bool => "bool",
        }
    }
}

/// What the header says about the array.
#[derive(Debug)]
struct Header {
    dtype: Dtype,
    big_endian: bool,
    fortran: bool,
    n: u64,
    d: u64,
    /// Byte offset of the first value.
    data_start: usize,
}

/// The subset of Python literals that NumPy headers use.
#[derive(Debug)]
enum Lit {
    Str(String),
    Bool(bool),
    Int(u64),
    Tuple(Vec<Lit>),
    /// Structured dtypes are lists; their contents are never needed.
    List,
    Dict(Vec<(Lit, Lit)>),
    None,
}

struct LitParser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl LitParser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Parsed<()> {
        match self.peek() {
            Some(x) if x == c => {
                self.pos += 1;
                Ok(())
            }
            Some(x) => bail!(
                "malformed header: expected '{}' at byte {}, found '{}'",
                c as char,
                self.pos,
                x.escape_ascii()
            ),
            None => bail!("malformed header: expected '{}', found the end", c as char),
        }
    }

    fn value(&mut self, depth: usize) -> Parsed<Lit> {
        if depth > MAX_DEPTH {
            bail!("malformed header: literals nested deeper than {MAX_DEPTH}");
        }
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => self.string(q),
            Some(b'(') => Ok(Lit::Tuple(self.sequence(b')', depth)?)),
            Some(b'[') => self.sequence(b']', depth).map(|_| Lit::List),
            Some(b'{') => self.dict(depth),
            Some(c) if c.is_ascii_digit() => self.int(),
            Some(c) if c.is_ascii_alphabetic() => self.word(),
            Some(b'-') => bail!("header holds a negative number"),
            Some(c) => bail!(
                "malformed header: unexpected '{}' at byte {}",
                c.escape_ascii(),
                self.pos
            ),
            None => bail!("malformed header: it ends where a value should be"),
        }
    }

    fn string(&mut self, quote: u8) -> Parsed<Lit> {
        self.pos += 1;
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos] != quote {
            // NumPy never writes escapes in the keys and type codes read here.
            if self.s[self.pos] == b'\\' {
                bail!("malformed header: escape sequences in strings are not supported");
            }
            self.pos += 1;
        }
        if self.pos >= self.s.len() {
            bail!("malformed header: unterminated string");
        }
        let text = String::from_utf8_lossy(&self.s[start..self.pos]).into_owned();
        self.pos += 1;
        Ok(Lit::Str(text))
    }

    fn int(&mut self) -> Parsed<Lit> {
        let start = self.pos;
        let mut v: u64 = 0;
        while let Some(&c) = self.s.get(self.pos).filter(|c| c.is_ascii_digit()) {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(c - b'0')))
                .ok_or_else(|| {
                    Problem::from(format!(
                        "header holds a number too large for 64 bits at byte {start}"
                    ))
                })?;
            self.pos += 1;
        }
        // Python 2 wrote long integers with an L suffix: "(3L, 4L)".
        if matches!(self.s.get(self.pos), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        Ok(Lit::Int(v))
    }

    fn word(&mut self) -> Parsed<Lit> {
        let start = self.pos;
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_alphanumeric() {
            self.pos += 1;
        }
        match &self.s[start..self.pos] {
            b"True" => Ok(Lit::Bool(true)),
            b"False" => Ok(Lit::Bool(false)),
            b"None" => Ok(Lit::None),
            w => bail!("malformed header: unexpected word '{}'", w.escape_ascii()),
        }
    }

    /// Comma-separated values up to `close`, a trailing comma allowed.
    fn sequence(&mut self, close: u8, depth: usize) -> Parsed<Vec<Lit>> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            if self.peek() == Some(b',') {
                self.pos += 1;
            } else {
                self.expect(close)?;
                return Ok(items);
            }
        }
    }

    fn dict(&mut self, depth: usize) -> Parsed<Lit> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(Lit::Dict(items));
            }
            let key = self.value(depth + 1)?;
            self.expect(b':')?;
            let val = self.value(depth + 1)?;
            items.push((key, val));
            if self.peek() == Some(b',') {
                self.pos += 1;
            } else {
                self.expect(b'}')?;
                return Ok(Lit::Dict(items));
            }
        }
    }
}

fn parse_descr(descr: &str) -> Parsed<(Dtype, bool)> {
    let (order, code) = match descr.as_bytes().first() {
        Some(b'<' | b'>' | b'|' | b'=') => descr.split_at(1),
        _ => ("=", descr),
    };
    let dtype = match code {
        "f4" => Dtype::F32,
        "f2" | "e" => Dtype::F16,
        "u1" | "B" => Dtype::U8,
        "f8" | "d" => Dtype::F64,
        "i1" | "b" => Dtype::I8,
        "i2" | "h" => Dtype::I16,
        "i4" => Dtype::I32,
        "i8" | "q" => Dtype::I64,
        "u2" | "H" => Dtype::U16,
        "u4" => Dtype::U32,
        "u8" | "Q" => Dtype::U64,
        "b1" | "?" => Dtype::Bool,
        "f" => Dtype::F32,
        _ => bail!(
            "unsupported dtype '{}' (supported: f32, f16, f64, u8, u16, u32, u64, i8, i16, i32, \
             i64, bool)",
            descr.escape_default()
        ),
    };
    let big_endian = match order {
        ">" => true,
        "<" => false,
        // '|' (byte order does not apply) and '=' (the writer's native order; NumPy normalises
        // it away when saving) fall back to this machine's order.
        _ => cfg!(target_endian = "big"),
    };
    Ok((dtype, big_endian))
}

/// Reads the preamble and header dictionary. Shared by the mapped and the bytes paths.
fn header(bytes: &[u8]) -> Parsed<Header> {
    if bytes.is_empty() {
        bail!("file is empty");
    }
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        bail!("not an npy file (it does not start with the \\x93NUMPY magic)");
    }
    if bytes.len() < 10 {
        bail!(
            "file is {} bytes, too short for an npy preamble",
            bytes.len()
        );
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len_bytes, text_start) = match major {
        1 => (2, 10),
        2 | 3 => (4, 12),
        _ => bail!("unsupported npy format version {major}.{minor} (1.0, 2.0 and 3.0 are read)"),
    };
    if bytes.len() < text_start {
        bail!(
            "file is {} bytes, too short for an npy preamble",
            bytes.len()
        );
    }
    let mut len_le = [0u8; 4];
    len_le[..len_bytes].copy_from_slice(&bytes[8..8 + len_bytes]);
    let header_len = u32::from_le_bytes(len_le) as usize;
    if header_len > MAX_HEADER {
        bail!("npy header declares {header_len} bytes, more than the limit of {MAX_HEADER}");
    }
    let Some(text) = bytes.get(text_start..text_start + header_len) else {
        bail!(
            "npy header declares {header_len} bytes but the file ends {} bytes after the preamble",
            bytes.len() - text_start
        );
    };
    let mut p = LitParser { s: text, pos: 0 };
    let Lit::Dict(items) = p.value(0)? else {
        bail!("malformed header: it is not a dictionary");
    };
    // Whatever follows the dictionary must be padding.
    if text[p.pos..].iter().any(|c| !c.is_ascii_whitespace()) {
        bail!("malformed header: unexpected text after the dictionary");
    }
    let get = |key: &str| {
        items
            .iter()
            .find(|(k, _)| matches!(k, Lit::Str(s) if s == key))
            .map(|(_, v)| v)
            .ok_or_else(|| Problem::from(format!("malformed header: no '{key}' entry")))
    };
    let (dtype, big_endian) = match get("descr")? {
        Lit::Str(s) => parse_descr(s)?,
        _ => bail!("unsupported dtype: structured arrays are not vector data"),
    };
    let fortran = match get("fortran_order")? {
        Lit::Bool(b) => *b,
        _ => bail!("malformed header: 'fortran_order' is not True or False"),
    };
    let Lit::Tuple(shape) = get("shape")? else {
        bail!("malformed header: 'shape' is not a tuple");
    };
    let dims = shape
        .iter()
        .map(|v| match v {
            Lit::Int(x) => Ok(*x),
            _ => Err(Problem::from(
                "malformed header: 'shape' holds a non-integer",
            )),
        })
        .collect::<Parsed<Vec<u64>>>()?;
    let (n, d) = match dims[..] {
        [n, d] => (n, d),
        [n] => (n, 1),
        [] => bail!("array is 0-dimensional (a scalar); expected a 2-D array (n, d)"),
        _ => bail!(
            "array is {}-dimensional; expected a 2-D array (n, d) or a 1-D array",
            dims.len()
        ),
    };
    Ok(Header {
        dtype,
        big_endian,
        fortran,
        n,
        d,
        data_start: text_start + header_len,
    })
}

/// The values in row-major order: mapped when possible, else decoded (and transposed from
/// Fortran order).
fn typed<T: Elem>(src: Source<'_>, h: &Header, n: usize, d: usize) -> Parsed<Buffer<T>> {
    // A Fortran-order array with one row or one column has the same layout as C order.
    if !h.fortran || n <= 1 || d == 1 {
        return values(src, h.data_start, n * d, h.big_endian);
    }
    let col_major = values::<T>(
        Source::unmapped(src.bytes),
        h.data_start,
        n * d,
        h.big_endian,
    )?;
    Ok(Buffer::Owned(transpose(col_major.as_slice(), n, d)))
}

fn converted<T: Elem + ExactInF64>(
    src: Source<'_>,
    h: &Header,
    n: usize,
    d: usize,
) -> Parsed<VectorData> {
    let vals = typed::<T>(Source::unmapped(src.bytes), h, n, d)?;
    exact(vals.as_slice(), d)
}

pub(crate) fn parse(src: Source<'_>) -> Parsed<Dataset> {
    let h = header(src.bytes)?;
    let available = src.bytes.len() - h.data_start;
    let (n, d) = check_shape(h.n, h.d, h.dtype.size(), h.dtype.name(), available)?;
    let data = match h.dtype {
        Dtype::F32 => VectorData::F32(typed(src, &h, n, d)?),
        Dtype::F16 => VectorData::F16(typed(src, &h, n, d)?),
        Dtype::U8 => VectorData::U8(typed(src, &h, n, d)?),
        // Kept mapped when it stays f64.
        Dtype::F64 => VectorData::compact_buffer(typed(src, &h, n, d)?),
        Dtype::I8 => converted::<i8>(src, &h, n, d)?,
        Dtype::I16 => converted::<i16>(src, &h, n, d)?,
        Dtype::I32 => converted::<i32>(src, &h, n, d)?,
        Dtype::I64 => converted::<i64>(src, &h, n, d)?,
        Dtype::U16 => converted::<u16>(src, &h, n, d)?,
        Dtype::U32 => converted::<u32>(src, &h, n, d)?,
        Dtype::U64 => converted::<u64>(src, &h, n, d)?,
        // NumPy stores bools as bytes 0 and 1.
        Dtype::Bool => VectorData::U8(typed(src, &h, n, d)?),
    };
    vectors(n, d, data)
}

/// A version 1.0 header (preamble, dictionary, padding) for a C-order array of `shape` with the
/// NumPy type code `descr` (e.g. `"<f4"`), padded so the data starts on a 64-byte boundary as
/// NumPy does, which keeps the data mappable.
pub(crate) fn encode_header(descr: &str, shape: &[usize]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|s| s.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let unpadded = MAGIC.len() + 4 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + dict.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    // A 2-D header is far below 64 KiB, the most a version 1.0 header can declare.
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}
