//! Data sets: dense vector sets (f32, f64, f16, bf16 or u8 storage, owned or memory-mapped) and
//! string sets.
//!
//! This module owns the in-memory representation only. Parsing files is the job of the
//! `voisin-io` crate; computing distances is the job of [`crate::metric`]. Engines read vectors
//! for their f32 tiles through [`VectorSet::rows_f32`] (or the borrowed fast path
//! [`VectorSet::as_f32`]). Every storage type except f64 converts to f32 exactly; f64 rows are
//! rounded there, so the engines widen their tile bounds by that rounding
//! ([`VectorSet::is_f32_exact`] says when there is none) and compute exact keys on
//! [`VectorSet::rows_f64`].
//!
//! f64 storage is built with [`VectorSet::from_f64`] (always f64), [`VectorSet::from_f64_compact`]
//! (f32 when every value is exactly an f32, f64 otherwise) or [`VectorSet::from_exact`] (any
//! [`ExactInF64`] type: integers f64 holds exactly, bool, f32, f64), which readers of files and
//! the Python bindings call.

mod buffer;
mod strings;

pub use buffer::{Buffer, SharedSlice};
pub use strings::StringSet;

use half::{bf16, f16};
use std::borrow::Cow;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::metric::scale::Extent;

/// Largest number of items a set may hold: indices are stored as `u32` in results.
pub const MAX_ITEMS: usize = u32::MAX as usize;

/// Storage element type of a vector set. Tiles are computed in f32 and the final exact
/// distances in f64 whatever the storage type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemType {
    /// IEEE single precision, 4 bytes a value; engines read it without a conversion.
    F32,
    /// IEEE half precision (`half::f16`), 2 bytes a value; widens to f32 exactly.
    F16,
    /// bfloat16 (`half::bf16`), 2 bytes a value; widens to f32 exactly.
    Bf16,
    /// Unsigned bytes, the integers 0 to 255; widen to f32 exactly.
    U8,
    /// IEEE double precision, 8 bytes a value: the one type f32 tiles may round
    /// ([`VectorSet::is_f32_exact`]).
    F64,
}

impl ElemType {
    /// The lower-case name used in messages and checkpoint manifests: `f32`, `f16`, `bf16`,
    /// `u8` or `f64`.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::Bf16 => "bf16",
            ElemType::U8 => "u8",
            ElemType::F64 => "f64",
        }
    }
}

/// Row-major storage of a vector set, one variant per element type.
#[derive(Clone, Debug)]
pub enum VectorData {
    /// f32 values ([`ElemType::F32`]): the storage [`VectorSet::as_f32`] borrows.
    F32(Buffer<f32>),
    /// f16 values ([`ElemType::F16`]), converted when rows are read.
    F16(Buffer<f16>),
    /// bf16 values ([`ElemType::Bf16`]), converted when rows are read.
    Bf16(Buffer<bf16>),
    /// u8 values ([`ElemType::U8`]), converted when rows are read.
    U8(Buffer<u8>),
    /// f64 values ([`ElemType::F64`]): exact keys borrow them, f32 rows round them.
    F64(Buffer<f64>),
}

impl VectorData {
    /// f64 values stored as f32 when every one is exactly an f32, as f64 otherwise.
    pub fn compact(values: Vec<f64>) -> VectorData {
        Self::compact_buffer(Buffer::Owned(values))
    }

    /// f64 values stored as `elem`, each rounded to nearest in it (u8: to the nearest integer,
    /// clamped to 0..=255): for values already exact in `elem` (a copy kept in its own type) or
    /// for test data of a given type.
    pub fn rounded(values: Vec<f64>, elem: ElemType) -> VectorData {
        fn to<T: bytemuck::Pod>(values: &[f64], f: impl Fn(f64) -> T) -> Buffer<T> {
            Buffer::Owned(values.iter().map(|&x| f(x)).collect())
        }
        match elem {
            ElemType::F64 => VectorData::F64(Buffer::Owned(values)),
            ElemType::F32 => VectorData::F32(to(&values, |x| x as f32)),
            ElemType::F16 => VectorData::F16(to(&values, f16::from_f64)),
            ElemType::Bf16 => VectorData::Bf16(to(&values, bf16::from_f64)),
            ElemType::U8 => VectorData::U8(to(&values, |x| x.round().clamp(0.0, 255.0) as u8)),
        }
    }

    /// [`VectorData::compact`] for owned or memory-mapped f64 values: f64 storage keeps the
    /// buffer (a mapped file stays mapped).
    pub fn compact_buffer(values: Buffer<f64>) -> VectorData {
        let vals = values.as_slice();
        if vals.iter().all(|&v| f32_exact(v)) {
            VectorData::F32(Buffer::Owned(vals.iter().map(|&v| v as f32).collect()))
        } else {
            VectorData::F64(values)
        }
    }

    /// Row-major values of width `dim` of any [`ExactInF64`] type, stored as
    /// [`VectorData::compact`] does; the first value f64 would round is an error naming its
    /// row and column. The constructor file readers and bindings call for f64 and integer data.
    pub fn from_exact<T: ExactInF64>(values: &[T], dim: usize) -> Result<VectorData> {
        let dim = dim.max(1);
        let converted: Vec<f64> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                v.to_f64_exact().ok_or_else(|| {
                    Error::invalid(format!(
                        "value {v} at row {}, column {} has no exact f64 form: it would be \
                         rounded (f64 holds every integer only up to 2^53 = 9007199254740992 \
                         in magnitude)",
                        i / dim,
                        i % dim
                    ))
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self::compact(converted))
    }
}

/// `n` vectors of dimension `dim`, stored row-major.
#[derive(Clone, Debug)]
pub struct VectorSet {
    n: usize,
    dim: usize,
    data: VectorData,
    /// The range of the stored magnitudes, measured once ([`Extent::of`]): the engines' checks
    /// and key scales of one call, and every later call on the same set, share one pass. The
    /// values never change after construction (mapped inputs included: a file that changes
    /// under a run is an error, `voisin::commit`).
    extent: OnceLock<Extent>,
}

impl VectorSet {
    /// Builds a set from row-major storage; the storage length must be `n * dim`.
    pub fn new(n: usize, dim: usize, data: VectorData) -> Result<Self> {
        if dim == 0 {
            return Err(Error::invalid("vectors have dimension 0"));
        }
        if n > MAX_ITEMS {
            return Err(Error::invalid(format!(
                "{n} vectors exceed the limit of {MAX_ITEMS}"
            )));
        }
        let len = match &data {
            VectorData::F32(b) => b.len(),
            VectorData::F16(b) => b.len(),
            VectorData::Bf16(b) => b.len(),
            VectorData::U8(b) => b.len(),
            VectorData::F64(b) => b.len(),
        };
        if Some(len) != n.checked_mul(dim) {
            return Err(Error::invalid(format!(
                "storage holds {len} values, expected {n} x {dim}"
            )));
        }
        Ok(VectorSet {
            n,
            dim,
            data,
            extent: OnceLock::new(),
        })
    }

    /// Convenience constructor for owned f32 rows.
    pub fn from_f32(n: usize, dim: usize, values: Vec<f32>) -> Result<Self> {
        Self::new(n, dim, VectorData::F32(Buffer::Owned(values)))
    }

    /// Owned f64 rows, stored as f64 whatever the values.
    pub fn from_f64(n: usize, dim: usize, values: Vec<f64>) -> Result<Self> {
        Self::new(n, dim, VectorData::F64(Buffer::Owned(values)))
    }

    /// Owned f64 rows, stored as f32 when every value is exactly an f32 (the answers are the
    /// same either way; f32 storage halves the memory and needs no widened bounds) and as f64
    /// otherwise. NaN counts as f32-exact, so that the usual non-finite checks report it.
    pub fn from_f64_compact(n: usize, dim: usize, values: Vec<f64>) -> Result<Self> {
        Self::new(n, dim, VectorData::compact(values))
    }

    /// Rows of any type whose values f64 holds exactly ([`ExactInF64`]: f32, f64, bool and
    /// integers), stored compactly as [`VectorSet::from_f64_compact`] does. The first value
    /// f64 cannot hold (a 64-bit integer beyond 2^53 that f64 would round) is an error naming
    /// its row and column.
    pub fn from_exact<T: ExactInF64>(n: usize, dim: usize, values: &[T]) -> Result<Self> {
        Self::new(n, dim, VectorData::from_exact(values, dim)?)
    }

    /// Number of vectors (n).
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the set holds no vector.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Values per vector; at least 1 (a set of dimension 0 is refused when built).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The row-major storage: `len() * dim()` values of [`VectorSet::elem_type`].
    pub fn data(&self) -> &VectorData {
        &self.data
    }

    /// Where [`Extent::of`] keeps this set's extent once measured.
    pub(crate) fn extent_cell(&self) -> &OnceLock<Extent> {
        &self.extent
    }

    /// The element type the values are stored in.
    pub fn elem_type(&self) -> ElemType {
        match &self.data {
            VectorData::F32(_) => ElemType::F32,
            VectorData::F16(_) => ElemType::F16,
            VectorData::Bf16(_) => ElemType::Bf16,
            VectorData::U8(_) => ElemType::U8,
            VectorData::F64(_) => ElemType::F64,
        }
    }

    /// Whether [`VectorSet::rows_f32`] holds exactly the stored values: true for every storage
    /// type but f64, and for f64 storage whose values are all f32 numbers (checked value by
    /// value: one pass over the set).
    pub fn is_f32_exact(&self) -> bool {
        match &self.data {
            VectorData::F64(v) => v.as_slice().iter().all(|&x| f32_exact(x)),
            _ => true,
        }
    }

    /// An error for consumers that hold or compute on f32 values only (`who`, e.g. "metric
    /// indexes"), when this set holds f64 values f32 cannot hold; `Ok` otherwise.
    pub fn require_f32_exact(&self, who: &str) -> Result<()> {
        if self.is_f32_exact() {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "{who} take f32 values, and these {} x {} vectors hold f64 values with no exact f32 \
             form; brute force answers them exactly, on any device (voisin knn, range or graph \
             with --engine brute)",
            self.n, self.dim
        )))
    }

    /// Whether every value rounds to f32 with a relative error of at most 2⁻²⁴: zero or of a
    /// magnitude within f32's normal range (subnormal f32 results lose relative precision,
    /// larger ones overflow). True for every storage type but f64.
    pub fn is_f32_normal(&self) -> bool {
        match &self.data {
            VectorData::F64(v) => v.as_slice().iter().all(|&x| {
                x == 0.0 || (f32::MIN_POSITIVE as f64..=f32::MAX as f64).contains(&x.abs())
            }),
            _ => true,
        }
    }

    /// The whole set as f32 without copying, when it is stored as f32.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            VectorData::F32(b) => Some(b.as_slice()),
            _ => None,
        }
    }

    /// Rows `start..end` as contiguous f32, borrowed when stored as f32, converted otherwise.
    pub fn rows_f32(&self, start: usize, end: usize) -> Cow<'_, [f32]> {
        assert!(start <= end && end <= self.n, "row range out of bounds");
        let (a, b) = (start * self.dim, end * self.dim);
        match &self.data {
            VectorData::F32(v) => Cow::Borrowed(&v.as_slice()[a..b]),
            VectorData::F16(v) => {
                Cow::Owned(v.as_slice()[a..b].iter().map(|x| x.to_f32()).collect())
            }
            VectorData::Bf16(v) => {
                Cow::Owned(v.as_slice()[a..b].iter().map(|x| x.to_f32()).collect())
            }
            VectorData::U8(v) => Cow::Owned(v.as_slice()[a..b].iter().map(|&x| x as f32).collect()),
            // Rounded to nearest; see `is_f32_exact`.
            VectorData::F64(v) => {
                Cow::Owned(v.as_slice()[a..b].iter().map(|&x| x as f32).collect())
            }
        }
    }

    /// One row as f32.
    pub fn row_f32(&self, i: usize) -> Cow<'_, [f32]> {
        self.rows_f32(i, i + 1)
    }

    /// Rows `start..end` as contiguous f64, exactly the stored values: borrowed when stored as
    /// f64, converted otherwise.
    pub fn rows_f64(&self, start: usize, end: usize) -> Cow<'_, [f64]> {
        assert!(start <= end && end <= self.n, "row range out of bounds");
        match &self.data {
            VectorData::F64(v) => Cow::Borrowed(&v.as_slice()[start * self.dim..end * self.dim]),
            _ => Cow::Owned(
                self.rows_f32(start, end)
                    .iter()
                    .map(|&x| x as f64)
                    .collect(),
            ),
        }
    }

    /// One row as f64.
    pub fn row_f64(&self, i: usize) -> Cow<'_, [f64]> {
        self.rows_f64(i, i + 1)
    }

    /// Rows `rows` of this set, in that order (repeats allowed), as an owned set of the same
    /// storage type: its values, and so every exact key, are those of the rows it copies.
    pub fn gather(&self, rows: &[usize]) -> VectorSet {
        fn pick<T: bytemuck::Pod>(b: &Buffer<T>, dim: usize, rows: &[usize]) -> Buffer<T> {
            let v = b.as_slice();
            Buffer::Owned(
                rows.iter()
                    .flat_map(|&r| &v[r * dim..(r + 1) * dim])
                    .copied()
                    .collect(),
            )
        }
        let d = self.dim;
        let data = match &self.data {
            VectorData::F32(b) => VectorData::F32(pick(b, d, rows)),
            VectorData::F16(b) => VectorData::F16(pick(b, d, rows)),
            VectorData::Bf16(b) => VectorData::Bf16(pick(b, d, rows)),
            VectorData::U8(b) => VectorData::U8(pick(b, d, rows)),
            VectorData::F64(b) => VectorData::F64(pick(b, d, rows)),
        };
        VectorSet {
            n: rows.len(),
            dim: d,
            data,
            extent: OnceLock::new(),
        }
    }

    /// The first NaN or infinite value, if any (row index, column index), scanning in parallel
    /// (a sequential scan of a 1M × 128 set cost more than the whole GPU search of it).
    pub fn find_non_finite(&self) -> Option<(usize, usize)> {
        let pos = match &self.data {
            // The pass that finds none also measures the extent (the engines' magnitude check).
            VectorData::F32(v) if self.extent.get().is_none() => {
                match Extent::of_finite_f32(v.as_slice()) {
                    Some(e) => {
                        let _ = self.extent.set(e);
                        None
                    }
                    None => first(v.as_slice(), |x| !x.is_finite()),
                }
            }
            VectorData::F32(v) => first(v.as_slice(), |x| !x.is_finite()),
            VectorData::F16(v) => first(v.as_slice(), |x| !x.is_finite()),
            VectorData::Bf16(v) => first(v.as_slice(), |x| !x.is_finite()),
            VectorData::U8(_) => None,
            VectorData::F64(v) => first(v.as_slice(), |x| !x.is_finite()),
        }?;
        Some((pos / self.dim, pos % self.dim))
    }

    /// What every front end (CLI, MPI binary, Python) says of the NaN or infinite value at
    /// (`row`, `col`), after the file or argument it names: "row 7, column 2 holds NaN
    /// (counting from 0)".
    pub fn non_finite_line(&self, row: usize, col: usize) -> String {
        let value = self.row_f64(row)[col];
        format!("row {row}, column {col} holds {value} (counting from 0)")
    }
}

/// Index of the first value for which `bad` holds, scanning chunks in parallel.
fn first<T: Sync>(values: &[T], bad: impl Fn(&T) -> bool + Sync) -> Option<usize> {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 16;
    let chunk = values
        .par_chunks(CHUNK)
        .position_first(|c| c.iter().any(&bad))?;
    let start = chunk * CHUNK;
    values[start..].iter().position(&bad).map(|i| start + i)
}

/// Whether an f64 value is exactly an f32 number (NaN included: it is refused elsewhere).
fn f32_exact(v: f64) -> bool {
    f64::from(v as f32) == v || v.is_nan()
}

/// Element types whose values are exactly f64 numbers (for the 64-bit integers: every value up
/// to 2^53 in magnitude, and beyond it those that happen to be): the types
/// [`VectorSet::from_exact`] takes.
pub trait ExactInF64: Copy + std::fmt::Display {
    /// The value as f64, or `None` when f64 cannot hold it exactly.
    fn to_f64_exact(self) -> Option<f64>;
}

macro_rules! exact_in_f64 {
    ($($t:ty),*) => {$(
        impl ExactInF64 for $t {
            fn to_f64_exact(self) -> Option<f64> {
                Some(f64::from(self))
            }
        }
    )*};
}
exact_in_f64!(f64, f32, i32, u32, i16, u16, i8, u8);

// 2^63 and 2^64 themselves are outside the integer types, and a cast back from them saturates,
// so they are excluded before the round trip.
impl ExactInF64 for i64 {
    fn to_f64_exact(self) -> Option<f64> {
        let f = self as f64;
        (f < 9_223_372_036_854_775_808.0 && f as i64 == self).then_some(f)
    }
}

impl ExactInF64 for u64 {
    fn to_f64_exact(self) -> Option<f64> {
        let f = self as f64;
        (f < 18_446_744_073_709_551_616.0 && f as u64 == self).then_some(f)
    }
}

impl ExactInF64 for bool {
    fn to_f64_exact(self) -> Option<f64> {
        Some(f64::from(u8::from(self)))
    }
}

/// A data set of any kind an engine can search.
#[derive(Clone, Debug)]
pub enum Dataset {
    /// Dense vectors of one dimension, for the vector metrics and user vector metrics.
    Vectors(VectorSet),
    /// Strings, for levenshtein and user string metrics.
    Strings(StringSet),
}

impl Dataset {
    /// Number of items: vectors or strings.
    pub fn len(&self) -> usize {
        match self {
            Dataset::Vectors(v) => v.len(),
            Dataset::Strings(s) => s.len(),
        }
    }

    /// Whether the set holds no item.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Short description for messages: "1000 x 128 f32 vectors" or "5000 strings".
    pub fn describe(&self) -> String {
        match self {
            Dataset::Vectors(v) => {
                format!("{} x {} {} vectors", v.len(), v.dim(), v.elem_type().name())
            }
            Dataset::Strings(s) => format!("{} strings", s.len()),
        }
    }

    /// The vector set, or `None` for strings.
    pub fn as_vectors(&self) -> Option<&VectorSet> {
        match self {
            Dataset::Vectors(v) => Some(v),
            Dataset::Strings(_) => None,
        }
    }

    /// The string set, or `None` for vectors.
    pub fn as_strings(&self) -> Option<&StringSet> {
        match self {
            Dataset::Strings(s) => Some(s),
            Dataset::Vectors(_) => None,
        }
    }

    /// Items `rows` of this set, in that order, as a set of their own ([`VectorSet::gather`],
    /// [`StringSet::gather`]).
    pub fn gather(&self, rows: &[usize]) -> Dataset {
        match self {
            Dataset::Vectors(v) => v.gather(rows).into(),
            Dataset::Strings(s) => s.gather(rows).into(),
        }
    }
}

impl From<VectorSet> for Dataset {
    fn from(v: VectorSet) -> Self {
        Dataset::Vectors(v)
    }
}

impl From<StringSet> for Dataset {
    fn from(s: StringSet) -> Self {
        Dataset::Strings(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parallel scan finds the first bad value, across chunk boundaries and in every
    /// storage type, and the front ends' line names it.
    #[test]
    fn rounded_values_take_each_storage_type() {
        let v = vec![-3.0, 0.4, 1.5, 254.6, 300.0];
        let u8s = |d: VectorData| match d {
            VectorData::U8(b) => b.as_slice().to_vec(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            u8s(VectorData::rounded(v.clone(), ElemType::U8)),
            [0, 0, 2, 255, 255]
        );
        for t in [ElemType::F64, ElemType::F32, ElemType::F16, ElemType::Bf16] {
            let set = VectorSet::new(5, 1, VectorData::rounded(v.clone(), t)).unwrap();
            assert_eq!(set.elem_type(), t);
            assert_eq!(set.row_f64(2)[0], 1.5, "{t:?}");
        }
    }

    #[test]
    fn the_first_non_finite_value_and_its_line() {
        let (n, d) = (70_000, 3);
        for at in [0, 65_535, 65_536, 150_001, n * d - 1] {
            let mut v = vec![1.5f32; n * d];
            v[at] = f32::INFINITY;
            v[n * d - 1] = f32::NAN;
            let set = VectorSet::from_f32(n, d, v.clone()).unwrap();
            assert_eq!(set.find_non_finite(), Some((at / d, at % d)));
            let wide: Vec<f64> = v.iter().map(|&x| f64::from(x) + 0.25).collect();
            let set64 = VectorSet::from_f64(n, d, wide).unwrap();
            assert_eq!(set64.find_non_finite(), Some((at / d, at % d)));
        }
        let set = VectorSet::from_f32(2, 2, vec![0.0, 1.0, f32::NAN, 2.0]).unwrap();
        assert_eq!(
            set.non_finite_line(1, 0),
            "row 1, column 0 holds NaN (counting from 0)"
        );
        let clean = VectorSet::from_f32(2, 2, vec![0.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(clean.find_non_finite(), None);
    }
}
