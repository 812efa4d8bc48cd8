//! What a CPU rank does with its tiles of the graph in [`crate::graph`] (exact lists sent to
//! the owners of row blocks): the CPU engine's batch scan, behind a trait so that tests can
//! wrap it (count the pairs measured). GPU ranks do not use it: they compute shares through
//! the core's graph seam ([`voisin::graph::TileGraph`], driver [`crate::gathered`]).
//!
//! This module must not distribute; it only computes the lists of the tiles it is given.

use std::ops::Range;

use voisin::cpu::CpuEngine;
use voisin::graph::RangeLists;
use voisin::{Dataset, Metric, Result};

/// Computes the lists of a rank's tiles of the k-NN graph of `data`.
pub trait TileWorker {
    /// For each item of the tiles' ranges (pairs of item ranges, equal or disjoint), its `k`
    /// nearest among all the items the tiles pair it with: every pair measured once, an item
    /// never its own neighbour, a tile of a range with itself pairing its items with each
    /// other. One entry per distinct range, by start. Lists hold exact keys (the metric's
    /// ranking keys, as [`voisin::reference`] computes them) sorted by (key, index), so lists
    /// over disjoint items merge exactly with [`voisin::graph::merge_lists`].
    fn tiles(
        &self,
        data: &Dataset,
        tiles: &[(Range<usize>, Range<usize>)],
        k: usize,
        metric: &Metric,
    ) -> Result<RangeLists>;
}

/// The CPU engine's batch scan: one exact re-rank per item for all its tiles.
impl TileWorker for CpuEngine {
    fn tiles(
        &self,
        data: &Dataset,
        tiles: &[(Range<usize>, Range<usize>)],
        k: usize,
        metric: &Metric,
    ) -> Result<RangeLists> {
        self.tile_lists(data, tiles, k, metric)
    }
}
