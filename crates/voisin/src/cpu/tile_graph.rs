//! The CPU engine's side of the [`TileGraph`] seam (distributed drivers such as voisin-mpi's
//! gathered ranks measure their shares through it): a share is the exact lists of every item
//! from the tile pairs it owns, measured one tile row at a time by the engine's batch scan.

use std::ops::Range;

use super::CpuEngine;
use crate::data::Dataset;
use crate::engine::{check_k, check_metric};
use crate::error::{Error, Result};
use crate::graph::backend::EXACT_LISTS;
use crate::graph::{merge_lists, CpuShare, List, PassRows, TileGraph, TileOwner, BLOCK_ROWS};
use crate::metric::Metric;

impl TileGraph for CpuEngine {
    type Share = CpuShare;

    /// The single-process graph's block.
    fn tile_edge(&self, _: &Dataset, _: usize, _: &Metric) -> Result<usize> {
        Ok(BLOCK_ROWS)
    }

    /// One batch scan per tile row: an item's candidates from all its pairs of that row are
    /// re-ranked together.
    fn share(
        &self,
        data: &Dataset,
        k: usize,
        metric: &Metric,
        edge: usize,
        owns: &TileOwner<'_>,
    ) -> Result<CpuShare> {
        check_metric(data, metric)?;
        check_k(k)?;
        if edge == 0 {
            return Err(Error::invalid("graph tile edge must be at least 1"));
        }
        let n = data.len();
        let k = k.min(n.saturating_sub(1));
        let mut lists = vec![List::new(); n];
        if k == 0 {
            return Ok(CpuShare { k, lists });
        }
        let nt = n.div_ceil(edge);
        let tile = |t: usize| t * edge..((t + 1) * edge).min(n);
        for i in 0..nt {
            let tiles: Vec<(Range<usize>, Range<usize>)> = (i..nt)
                .filter(|&j| owns(i, j))
                .map(|j| (tile(i), tile(j)))
                .collect();
            if tiles.is_empty() {
                continue;
            }
            for (range, got) in self.tile_lists(data, &tiles, k, metric)? {
                for (row, list) in lists[range].iter_mut().zip(&got) {
                    *row = merge_lists(row, list, k);
                }
            }
        }
        Ok(CpuShare { k, lists })
    }

    fn partial_kind(&self, _: &Dataset, _: &Metric) -> Result<Option<String>> {
        Ok(Some(EXACT_LISTS.into()))
    }

    fn partial_bytes(&self, share: &CpuShare, rows: &[Range<usize>]) -> Vec<u8> {
        share.rows_to_bytes(rows)
    }

    fn partial_share(
        &self,
        data: &Dataset,
        k: usize,
        rows: &[Range<usize>],
        bytes: &[u8],
    ) -> Result<CpuShare> {
        let n = data.len();
        CpuShare::rows_from_bytes(n, k.min(n.saturating_sub(1)), rows, bytes)
    }

    fn finish(
        &self,
        data: &Dataset,
        _: &Metric,
        share: &CpuShare,
        rows: Range<usize>,
    ) -> Result<PassRows> {
        if share.lists.len() != data.len() || rows.end > data.len() {
            return Err(Error::invalid("graph share does not match the data"));
        }
        let done = share.lists[rows].to_vec();
        if done.iter().any(|r| r.len() != share.k) {
            return Err(Error::device(
                "graph rows ended with missing neighbours (bug)",
            ));
        }
        Ok(done)
    }
}
