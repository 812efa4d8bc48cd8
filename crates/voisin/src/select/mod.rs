//! k-selection primitives shared by every CPU path and by the host side of the GPU and
//! distributed engines.
//!
//! - [`heap`]: a bounded max-heap keeping the k smallest `(key, index)` pairs.
//! - [`candidates`]: a buffer that keeps every item that may still be among the k nearest when
//!   keys carry an error bound, so an approximate pass can be finished by an exact re-rank.
//! - [`merge`]: merging sorted k-lists (shards, tiles, ranks).
//!
//! Order everywhere is by key, then by the smaller index, so results are deterministic.

pub mod candidates;
pub mod heap;
pub mod merge;

pub use candidates::{Candidates, ENTRY_BYTES};
pub use heap::TopK;
pub use merge::merge_sorted;

/// Total order on (key, index) used by every selection: key first (by `f64::total_cmp`, as the
/// exact re-rank and the reference order keys: −0 before +0, which inner products of orthogonal
/// vectors give both), then index.
#[inline]
pub fn less(ka: f64, ia: u32, kb: f64, ib: u32) -> bool {
    ka.total_cmp(&kb).then(ia.cmp(&ib)).is_lt()
}
