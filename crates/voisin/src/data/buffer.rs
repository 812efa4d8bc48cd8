//! A read-only slice of plain values that is either owned or a window into a memory-mapped file,
//! so that a 20 GB `.fbin` is searched in place instead of being copied into RAM.

use bytemuck::Pod;
use memmap2::Mmap;
use std::sync::Arc;

/// Owned values or a typed window into a shared memory map.
#[derive(Clone, Debug)]
pub enum Buffer<T: Pod> {
    Owned(Vec<T>),
    Mapped {
        map: Arc<Mmap>,
        /// Byte offset of the first value; a multiple of `align_of::<T>()`.
        offset: usize,
        /// Number of values.
        len: usize,
    },
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

    pub fn as_slice(&self) -> &[T] {
        match self {
            Buffer::Owned(v) => v,
            Buffer::Mapped { map, offset, len } => {
                let bytes = &map[*offset..*offset + *len * std::mem::size_of::<T>()];
                bytemuck::cast_slice(bytes)
            }
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Buffer::Owned(v) => v.len(),
            Buffer::Mapped { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, Buffer::Mapped { .. })
    }
}

impl<T: Pod> From<Vec<T>> for Buffer<T> {
    fn from(v: Vec<T>) -> Self {
        Buffer::Owned(v)
    }
}
