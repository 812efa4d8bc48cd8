//! What every input parser shares: the view of a file's bytes (with its memory map, when there
//! is one), decoding of little- or big-endian values, the size checks that run before anything
//! of a declared size is allocated, and the exact conversions of wider types to f32.
//!
//! Each format's own module owns its header layout; none of them opens files, which is the job
//! of the crate root, so that the bytes entry points used by the fuzz targets and the
//! memory-mapped path run the very same checks.

pub(crate) mod bin;
pub(crate) mod csv;
pub(crate) mod fvecs;
pub(crate) mod hdf5;
mod hdf5_links;
pub(crate) mod npy;
pub(crate) mod npz;
pub(crate) mod parquet;
pub(crate) mod txt;

use std::sync::Arc;

use bytemuck::Pod;
use half::f16;
use memmap2::Mmap;
use voisin::data::{Buffer, ExactInF64, SharedSlice, VectorData, VectorSet, MAX_ITEMS};
use voisin::Dataset;

use crate::error::{bail, Parsed, Problem};

/// The bytes of one input, plus what they live in when values may be borrowed from it in place
/// (a memory map, or a member inflated into memory of this crate) and where in it they start,
/// so that a parser can hand out windows instead of copies.
#[derive(Clone, Copy)]
pub(crate) struct Source<'a> {
    pub bytes: &'a [u8],
    backing: Option<(Backing<'a>, usize)>,
}

#[derive(Clone, Copy)]
enum Backing<'a> {
    Map(&'a Arc<Mmap>),
    Inflated(&'a Arc<Inflated>),
}

impl<'a> Source<'a> {
    pub fn unmapped(bytes: &'a [u8]) -> Self {
        Source {
            bytes,
            backing: None,
        }
    }

    pub fn mapped(map: &'a Arc<Mmap>) -> Self {
        Source {
            bytes: map.as_ref(),
            backing: Some((Backing::Map(map), 0)),
        }
    }

    pub fn inflated(owner: &'a Arc<Inflated>) -> Self {
        Source {
            bytes: owner.bytes(),
            backing: Some((Backing::Inflated(owner), 0)),
        }
    }

    /// The bytes `range` of this source, still borrowable in place.
    pub fn window(self, range: std::ops::Range<usize>) -> Self {
        Source {
            backing: self.backing.map(|(b, at)| (b, at + range.start)),
            bytes: &self.bytes[range],
        }
    }
}

/// Bytes this crate inflated (an `.npz` member), held 8-byte aligned so that values of every
/// type can be read in place.
pub(crate) struct Inflated {
    words: Vec<u64>,
    len: usize,
}

impl Inflated {
    /// `len` zero bytes, or `None` when the memory cannot be had.
    pub fn zeroed(len: usize) -> Option<Self> {
        let mut words = Vec::new();
        words.try_reserve_exact(len.div_ceil(8)).ok()?;
        words.resize(len.div_ceil(8), 0);
        Some(Inflated { words, len })
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// `len` values at byte `offset` of inflated bytes, read in place.
struct InflatedWindow<T> {
    owner: Arc<Inflated>,
    offset: usize,
    len: usize,
    _values: std::marker::PhantomData<fn() -> T>,
}

impl<T: Pod> SharedSlice<T> for InflatedWindow<T> {
    fn as_slice(&self) -> &[T] {
        let size = std::mem::size_of::<T>();
        bytemuck::cast_slice(&self.owner.bytes()[self.offset..self.offset + self.len * size])
    }
}

/// A window of `len` values of `T` at byte `offset` of `owner`, when it fits and is aligned.
fn inflated_window<T: Pod>(owner: &Arc<Inflated>, offset: usize, len: usize) -> Option<Buffer<T>> {
    let end = len
        .checked_mul(std::mem::size_of::<T>())
        .and_then(|b| offset.checked_add(b))?;
    let aligned = offset.is_multiple_of(std::mem::align_of::<T>());
    (end <= owner.len && aligned).then(|| {
        Buffer::Shared(Arc::new(InflatedWindow::<T> {
            owner: Arc::clone(owner),
            offset,
            len,
            _values: std::marker::PhantomData,
        }))
    })
}

/// Plain values that appear in files, in either byte order.
pub(crate) trait Elem: Pod {
    fn swap_bytes(self) -> Self;

    /// Decodes one value from exactly `size_of::<Self>()` bytes.
    fn decode(bytes: &[u8], big_endian: bool) -> Self {
        let v: Self = bytemuck::pod_read_unaligned(bytes);
        if big_endian == cfg!(target_endian = "big") {
            v
        } else {
            v.swap_bytes()
        }
    }
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn swap_bytes(self) -> Self {
                <$t>::swap_bytes(self)
            }
        }
    )*};
}
int_elem!(u8, i8, i16, i32, i64, u16, u64);

macro_rules! float_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn swap_bytes(self) -> Self {
                <$t>::from_bits(self.to_bits().swap_bytes())
            }
        }
    )*};
}
float_elem!(f16, f32, f64);

/// Decodes `bytes` (a whole number of values) into host order.
pub(crate) fn decode_all<T: Elem>(bytes: &[u8], big_endian: bool) -> Vec<T> {
    bytes
        .chunks_exact(std::mem::size_of::<T>())
        .map(|c| T::decode(c, big_endian))
        .collect()
}

/// `len` values at byte `offset` of `src`: a window into the memory map when the file is mapped,
/// already in host byte order and suitably aligned; a decoded copy otherwise.
pub(crate) fn values<T: Elem>(
    src: Source<'_>,
    offset: usize,
    len: usize,
    big_endian: bool,
) -> Parsed<Buffer<T>> {
    let size = std::mem::size_of::<T>();
    let bytes = len
        .checked_mul(size)
        .and_then(|b| offset.checked_add(b))
        .and_then(|end| src.bytes.get(offset..end))
        .ok_or_else(|| Problem::from("data runs past the end of the file"))?;
    let host_order = big_endian == cfg!(target_endian = "big") || size == 1;
    let window = match src.backing.filter(|_| host_order) {
        Some((Backing::Map(map), at)) => Buffer::mapped(Arc::clone(map), at + offset, len),
        Some((Backing::Inflated(owner), at)) => inflated_window(owner, at + offset, len),
        None => None,
    };
    if let Some(buf) = window {
        return Ok(buf);
    }
    Ok(Buffer::Owned(decode_all(bytes, big_endian)))
}

/// Validates a declared `n × d` shape of `elem_size`-byte values against the `available` bytes
/// that follow the header, before anything of that size is allocated. Returns `(n, d)`.
pub(crate) fn check_shape(
    n: u64,
    d: u64,
    elem_size: usize,
    type_name: &str,
    available: usize,
) -> Parsed<(usize, usize)> {
    if d == 0 {
        bail!("header declares dimension 0; vectors need at least one component");
    }
    if n > MAX_ITEMS as u64 {
        bail!("header declares {n} vectors, more than the limit of {MAX_ITEMS}");
    }
    let Some(need) = n
        .checked_mul(d)
        .and_then(|v| v.checked_mul(elem_size as u64))
    else {
        bail!("header declares {n} x {d} {type_name} values, which overflows a 64-bit size");
    };
    let have = available as u64;
    if need > have {
        bail!(
            "header declares {n} x {d} {type_name} values ({need} bytes) but only {have} bytes \
             follow the header (truncated file?)"
        );
    }
    if need < have {
        bail!(
            "{} bytes of trailing data after the {n} x {d} {type_name} values the header declares",
            have - need
        );
    }
    // need <= available, so both fit in usize.
    Ok((n as usize, d as usize))
}

/// Row-major values of width `dim` of an integer or f64 type as storage: f32 when every value
/// is exactly an f32 number, f64 otherwise (answered exactly on its own values); a 64-bit
/// integer f64 would round is refused, naming its row and column.
pub(crate) fn exact<T: ExactInF64>(values: &[T], dim: usize) -> Parsed<VectorData> {
    VectorData::from_exact(values, dim).map_err(|e| Problem::from(e.to_string()))
}

/// Column-major `n × d` values (Fortran order) rearranged row-major.
pub(crate) fn transpose<T: Copy>(col_major: &[T], n: usize, d: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(n * d);
    for i in 0..n {
        out.extend((0..d).map(|j| col_major[j * n + i]));
    }
    out
}

/// Wraps checked storage into a data set; the core crate's own checks become parse problems.
pub(crate) fn vectors(n: usize, d: usize, data: VectorData) -> Parsed<Dataset> {
    VectorSet::new(n, d, data)
        .map(Dataset::Vectors)
        .map_err(|e| Problem::from(e.to_string()))
}

/// Reads a little-endian u32 or i32 at `at`; callers have checked the length.
pub(crate) fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::decode(&bytes[at..at + 4], false)
}

int_elem!(u32);

/// Runs a parser built on a third-party library that may panic on damaged input, turning a
/// panic into a problem naming the library (`what` is the format, `lib` the crate).
pub(crate) fn guarded<T>(what: &str, lib: &str, parse: impl FnOnce() -> Parsed<T>) -> Parsed<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or_else(|payload| {
        let why = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        bail!("the {what} reader failed on this file ({lib}: {why})")
    })
}
