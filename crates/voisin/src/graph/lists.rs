//! Exact neighbour lists of the graph and how they combine: the rows a pass ends with
//! ([`PassRows`]), the lists of one tile or batch of tiles ([`TileLists`], [`RangeLists`]), the
//! one exact merge of lists over disjoint items ([`merge_lists`]), where finished passes are kept
//! ([`PassStore`]), and what a backend's part of a build must offer to be merged with the parts
//! of other threads, devices or processes ([`Share`]).
//!
//! Owns no schedule and no device: the CPU engine, the CUDA engines and the MPI drivers all
//! read and write these types.

use std::ops::Range;

use crate::error::Result;

/// One row's (exact key, index) pairs in result order.
pub type List = Vec<(f64, u32)>;

/// Final rows of one pass: for each row, its k (exact key, index) pairs in result order.
pub type PassRows = Vec<List>;

/// Lists of the items of some ranges: per distinct range, by start, one list per item.
pub type RangeLists = Vec<(Range<usize>, Vec<List>)>;

/// The exact lists of one tile (items `rows` against items `cols`), each sorted by
/// (key, index) and holding at most k entries. Lists of one item from tiles over disjoint
/// sets of other items merge exactly with [`merge_lists`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TileLists {
    /// For each item of `rows`, in order: its nearest items of `cols`, itself excluded.
    pub rows: Vec<List>,
    /// For each item of `cols`, in order: its nearest items of `rows`. Empty for a diagonal
    /// tile (`rows == cols`), whose row lists already are its column lists.
    pub cols: Vec<List>,
}

/// Merges two lists sorted by (key, index) over disjoint items, keeping the first `k`: the
/// selection's merge, under the same total order as the exact re-rank.
pub use crate::select::merge_sorted as merge_lists;

/// Whether entry `a` comes strictly before `b` in a list: by key under the total order of the
/// exact re-rank (−0 before +0), then by index.
pub fn ordered(a: (f64, u32), b: (f64, u32)) -> bool {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).is_lt()
}

/// A neighbour that appears twice in a list read back from a file (a real list holds each item
/// once), if any.
pub fn repeated(ids: impl IntoIterator<Item = u32>) -> Option<u32> {
    let mut sorted: Vec<u32> = ids.into_iter().collect();
    sorted.sort_unstable();
    sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
}

/// Keeps finished passes between runs. Pass `p` covers rows `rows.0..rows.1`.
pub trait PassStore {
    /// Row blocks per pass this store's files were laid out with, if it is bound to one.
    fn blocks_per_pass(&self) -> Option<usize>;
    /// The rows of pass `p` when an earlier run finished it.
    fn load(&mut self, p: usize, rows: (usize, usize)) -> Result<Option<PassRows>>;
    /// Called once a pass is final.
    fn save(&mut self, p: usize, rows: (usize, usize), done: &PassRows) -> Result<()>;
}

/// No checkpoints: nothing is loaded or kept.
pub struct NoStore;

impl PassStore for NoStore {
    fn blocks_per_pass(&self) -> Option<usize> {
        None
    }

    fn load(&mut self, _: usize, _: (usize, usize)) -> Result<Option<PassRows>> {
        Ok(None)
    }

    fn save(&mut self, _: usize, _: (usize, usize), _: &PassRows) -> Result<()> {
        Ok(())
    }
}

/// A backend's part of a graph build (the lists from the tile pairs it computed), in a form
/// that merges with the parts of backends that computed other tile pairs of the same build and
/// travels between processes as bytes. The CUDA engine's share holds approximate lists under a
/// proof contract; whatever it holds, merging is exact and does not depend on the order of
/// `parts`' producers beyond the order given.
pub trait Share: Sized + Send {
    /// Merges the parts of backends that computed disjoint sets of tile pairs of one build.
    fn merge(parts: Vec<Self>) -> Result<Self>;
    /// The part as bytes, to send to another process.
    fn to_bytes(&self) -> Vec<u8>;
    /// Reads what [`Share::to_bytes`] wrote; a clear error on a short or malformed buffer.
    fn from_bytes(bytes: &[u8]) -> Result<Self>;
}
