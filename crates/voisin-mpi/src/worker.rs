//! What a rank does with one tile of the graph, behind a trait so that the distribution in
//! [`crate::graph`] does not depend on the device: the CPU engine implements it here; a GPU
//! engine can implement it by returning the same exact lists for its tiles.
//!
//! This module must not distribute or merge; it only computes one tile's lists.

use std::ops::Range;

use voisin::cpu::{CpuEngine, TileLists};
use voisin::{Dataset, Metric, Result};

/// Computes the lists of one tile of the k-NN graph of `data`.
pub trait TileWorker {
    /// For each item of `rows`, its `k` nearest items of `cols`; for each item of `cols`, its
    /// `k` nearest items of `rows`; every pair measured once, an item never its own neighbour.
    /// `rows` and `cols` are equal (a diagonal tile: column lists left empty) or disjoint.
    /// Lists hold exact keys (the metric's ranking keys, as [`voisin::reference`] computes
    /// them) sorted by (key, index), so lists from tiles over disjoint items merge exactly with
    /// [`voisin::cpu::merge_lists`].
    fn tile(
        &self,
        data: &Dataset,
        rows: Range<usize>,
        cols: Range<usize>,
        k: usize,
        metric: &Metric,
    ) -> Result<TileLists>;
}

impl TileWorker for CpuEngine {
    fn tile(
        &self,
        data: &Dataset,
        rows: Range<usize>,
        cols: Range<usize>,
        k: usize,
        metric: &Metric,
    ) -> Result<TileLists> {
        self.cross_tile(data, rows, cols, k, metric)
    }
}
