//! Data sets: dense vector sets (f32, f16, bf16 or u8 storage, owned or memory-mapped) and
//! string sets.
//!
//! This module owns the in-memory representation only. Parsing files is the job of the
//! `voisin-io` crate; computing distances is the job of [`crate::metric`]. Every engine reads
//! vectors through [`VectorSet::rows_f32`] (or the borrowed fast path [`VectorSet::as_f32`]), so
//! storage type never leaks into the engines.

mod buffer;
mod strings;

pub use buffer::{Buffer, SharedSlice};
pub use strings::StringSet;

use half::{bf16, f16};
use std::borrow::Cow;

use crate::error::{Error, Result};

/// Largest number of items a set may hold: indices are stored as `u32` in results.
pub const MAX_ITEMS: usize = u32::MAX as usize;

/// Storage element type of a vector set. All arithmetic is done in f32 (and f64 for the final
/// exact distances) whatever the storage type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemType {
    F32,
    F16,
    Bf16,
    U8,
}

impl ElemType {
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::Bf16 => "bf16",
            ElemType::U8 => "u8",
        }
    }
}

/// Row-major storage of a vector set, one variant per element type.
#[derive(Clone, Debug)]
pub enum VectorData {
    F32(Buffer<f32>),
    F16(Buffer<f16>),
    Bf16(Buffer<bf16>),
    U8(Buffer<u8>),
}

/// `n` vectors of dimension `dim`, stored row-major.
#[derive(Clone, Debug)]
pub struct VectorSet {
    n: usize,
    dim: usize,
    data: VectorData,
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
        };
        if Some(len) != n.checked_mul(dim) {
            return Err(Error::invalid(format!(
                "storage holds {len} values, expected {n} x {dim}"
            )));
        }
        Ok(VectorSet { n, dim, data })
    }

    /// Convenience constructor for owned f32 rows.
    pub fn from_f32(n: usize, dim: usize, values: Vec<f32>) -> Result<Self> {
        Self::new(n, dim, VectorData::F32(Buffer::Owned(values)))
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn data(&self) -> &VectorData {
        &self.data
    }

    pub fn elem_type(&self) -> ElemType {
        match &self.data {
            VectorData::F32(_) => ElemType::F32,
            VectorData::F16(_) => ElemType::F16,
            VectorData::Bf16(_) => ElemType::Bf16,
            VectorData::U8(_) => ElemType::U8,
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
        }
    }

    /// One row as f32.
    pub fn row_f32(&self, i: usize) -> Cow<'_, [f32]> {
        self.rows_f32(i, i + 1)
    }

    /// First row holding a NaN or infinite value, if any (row index, column index).
    pub fn find_non_finite(&self) -> Option<(usize, usize)> {
        let pos = match &self.data {
            VectorData::F32(v) => v.as_slice().iter().position(|x| !x.is_finite()),
            VectorData::F16(v) => v.as_slice().iter().position(|x| !x.is_finite()),
            VectorData::Bf16(v) => v.as_slice().iter().position(|x| !x.is_finite()),
            VectorData::U8(_) => None,
        }?;
        Some((pos / self.dim, pos % self.dim))
    }
}

/// A data set of any kind an engine can search.
#[derive(Clone, Debug)]
pub enum Dataset {
    Vectors(VectorSet),
    Strings(StringSet),
}

impl Dataset {
    pub fn len(&self) -> usize {
        match self {
            Dataset::Vectors(v) => v.len(),
            Dataset::Strings(s) => s.len(),
        }
    }

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

    pub fn as_vectors(&self) -> Option<&VectorSet> {
        match self {
            Dataset::Vectors(v) => Some(v),
            Dataset::Strings(_) => None,
        }
    }

    pub fn as_strings(&self) -> Option<&StringSet> {
        match self {
            Dataset::Strings(s) => Some(s),
            Dataset::Vectors(_) => None,
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
