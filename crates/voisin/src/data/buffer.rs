//! A read-only slice of plain values that is either owned, a window into a memory-mapped file
//! (so that a 20 GB `.fbin` is searched in place instead of being copied into RAM), or memory
//! owned by someone else (a NumPy array handed over by the Python bindings without a copy).

use bytemuck::Pod;
use memmap2::Mmap;
use std::fmt;
use std::sync::Arc;

/// Values that live in memory another owner keeps alive and unchanged for as long as this
/// handle exists (e.g. a NumPy array held by a reference).
pub trait SharedSlice<T>: Send + Sync {
    /// The values, at one address and unchanged for as long as the handle lives.
    fn as_slice(&self) -> &[T];
}

impl<T> fmt::Debug for dyn SharedSlice<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedSlice({} values)", self.as_slice().len())
    }
}

/// Owned values, a typed window into a shared memory map, or values owned elsewhere.
#[derive(Clone, Debug)]
pub enum Buffer<T: Pod> {
    /// Values in a `Vec` the buffer owns.
    Owned(Vec<T>),
    /// A window of `len` values into a memory-mapped file, read in place; built by
    /// [`Buffer::mapped`], which checks its bounds and alignment.
    Mapped {
        /// The map the values are read from, shared by every buffer over the same file and kept
        /// alive by them.
        map: Arc<Mmap>,
        /// Byte offset of the first value; a multiple of `align_of::<T>()`.
        offset: usize,
        /// Number of values.
        len: usize,
    },
    /// Borrowed from another owner without a copy.
    Shared(Arc<dyn SharedSlice<T>>),
}

impl<T: Pod> Buffer<T> {
    /// A window of `len` values starting `offset` bytes into `map`. Returns `None` when the
    /// window is out of bounds or misaligned for `T`; the caller then copies instead.
    pub fn mapped(map: Arc<Mmap>, offset: usize, len: usize) -> Option<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let end = offset.checked_add(bytes)?;
        if end > map.len() {
            return None;
        }
        let ptr = map.as_ptr().wrapping_add(offset);
        if !(ptr as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return None;
        }
        Some(Buffer::Mapped { map, offset, len })
    }

    /// The values as one slice, wherever they live (never a copy).
    pub fn as_slice(&self) -> &[T] {
        match self {
            Buffer::Owned(v) => v,
            Buffer::Mapped { map, offset, len } => {
                let bytes = &map[*offset..*offset + *len * std::mem::size_of::<T>()];
                bytemuck::cast_slice(bytes)
            }
            Buffer::Shared(s) => s.as_slice(),
        }
    }

    /// Number of values (not bytes).
    pub fn len(&self) -> usize {
        match self {
            Buffer::Owned(v) => v.len(),
            Buffer::Mapped { len, .. } => *len,
            Buffer::Shared(s) => s.as_slice().len(),
        }
    }

    /// Whether the buffer holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the values are read in place from a memory-mapped file ([`Buffer::Mapped`]).
    pub fn is_mapped(&self) -> bool {
        matches!(self, Buffer::Mapped { .. })
    }
}

impl<T: Pod> From<Vec<T>> for Buffer<T> {
    fn from(v: Vec<T>) -> Self {
        Buffer::Owned(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Held(Vec<f32>);

    impl SharedSlice<f32> for Held {
        fn as_slice(&self) -> &[f32] {
            &self.0
        }
    }

    #[test]
    fn shared_values_are_read_in_place() {
        let held = Arc::new(Held(vec![1.0, 2.0, 3.0]));
        let b = Buffer::Shared(held.clone());
        assert_eq!(b.as_slice().as_ptr(), held.0.as_ptr());
        assert_eq!(b.len(), 3);
        assert!(!b.is_mapped());
        assert_eq!(format!("{b:?}"), "Shared(SharedSlice(3 values))");
    }
}
