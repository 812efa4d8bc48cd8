//! The CPU engine's side of the [`TileGraph`] seam for any build (distributed drivers such as
//! voisin-mpi's ranks measure their tiles through it; the in-process driver takes the engine's
//! threads, `graph.rs`): a share is the exact lists of every item from the
//! tile pairs it owns, measured one tile row at a time by the engine's batch scan; `extend`
//! measures all the pairs of a call in one batch scan, straight into the running lists (the
//! caller bounds its items: voisin-mpi's CPU ranks hand it their tiles in batches).

use std::ops::Range;

use super::CpuEngine;
use crate::data::Dataset;
use crate::engine::{check_k, check_metric};
use crate::error::{Error, Result};
use crate::graph::backend::EXACT_LISTS;
use crate::graph::{
    merge_lists, triangle, CpuShare, GraphJob, List, PassRows, TileGraph, TileOwner, BLOCK_ROWS,
};
use crate::metric::Metric;

impl CpuEngine {
    /// Checks a share's request; the neighbours per row (capped at n − 1).
    fn share_k(&self, data: &Dataset, k: usize, metric: &Metric, edge: usize) -> Result<usize> {
        check_metric(data, metric)?;
        check_k(k)?;
        if edge == 0 {
            return Err(Error::invalid("graph tile edge must be at least 1"));
        }
        Ok(k.min(data.len().saturating_sub(1)))
    }

    /// Merges into `lists` (one per item) the exact lists of the tile pairs (I, J) of edge
    /// `edge` in `pairs`, measured in one batch scan (an item's candidates from all its pairs
    /// re-ranked together); `lists` is unchanged on an error.
    fn measure_into(
        &self,
        data: &Dataset,
        (k, metric): (usize, &Metric),
        edge: usize,
        pairs: impl Iterator<Item = (usize, usize)>,
        lists: &mut [List],
    ) -> Result<()> {
        if k == 0 {
            return Ok(());
        }
        let n = data.len();
        let tile = |t: usize| t * edge..((t + 1) * edge).min(n);
        let tiles: Vec<(Range<usize>, Range<usize>)> =
            pairs.map(|(i, j)| (tile(i), tile(j))).collect();
        if tiles.is_empty() {
            return Ok(());
        }
        for (range, got) in self.tile_lists(data, &tiles, k, metric)? {
            for (row, list) in lists[range].iter_mut().zip(&got) {
                *row = merge_lists(row, list, k);
            }
        }
        Ok(())
    }
}

impl TileGraph for CpuEngine {
    type Share = CpuShare;

    /// The single-process graph's block.
    fn tile_edge(&self, _: &GraphJob<'_>) -> Result<usize> {
        Ok(BLOCK_ROWS)
    }

    /// One batch scan per tile row: an item's candidates from all its pairs of that row are
    /// re-ranked together.
    fn share(&self, job: &GraphJob<'_>, edge: usize, owns: &TileOwner<'_>) -> Result<CpuShare> {
        let (data, metric) = (job.data, job.metric);
        let k = self.share_k(data, job.k, metric, edge)?;
        let mut lists = vec![List::new(); data.len()];
        let nt = data.len().div_ceil(edge);
        for i in 0..nt {
            let row = (i..nt).filter(|&j| owns(i, j)).map(|j| (i, j));
            self.measure_into(data, (k, metric), edge, row, &mut lists)?;
        }
        Ok(CpuShare { k, lists })
    }

    /// One batch scan for every pair of the call (the caller bounds its items), merged into
    /// the running lists in place; every tile's lists are kept, open or not.
    fn extend(
        &self,
        job: &GraphJob<'_>,
        running: &mut Option<CpuShare>,
        edge: usize,
        owns: &TileOwner<'_>,
        _: &(dyn Fn(usize) -> bool + Sync),
    ) -> Result<()> {
        let (data, metric) = (job.data, job.metric);
        let k = self.share_k(data, job.k, metric, edge)?;
        let pairs = triangle(data.len().div_ceil(edge)).filter(|&(i, j)| owns(i, j));
        match running {
            Some(r) if r.k != k || r.lists.len() != data.len() => {
                Err(Error::invalid("graph share does not match the data"))
            }
            Some(r) => self.measure_into(data, (k, metric), edge, pairs, &mut r.lists),
            None => {
                let mut lists = vec![List::new(); data.len()];
                self.measure_into(data, (k, metric), edge, pairs, &mut lists)?;
                *running = Some(CpuShare { k, lists });
                Ok(())
            }
        }
    }

    fn partial_kind(&self, _: &GraphJob<'_>) -> Result<Option<String>> {
        Ok(Some(EXACT_LISTS.into()))
    }

    fn partial_bytes(&self, share: &CpuShare, rows: &[Range<usize>]) -> Vec<u8> {
        share.rows_to_bytes(rows)
    }

    fn partial_share(
        &self,
        job: &GraphJob<'_>,
        rows: &[Range<usize>],
        bytes: &[u8],
    ) -> Result<CpuShare> {
        let n = job.n();
        CpuShare::rows_from_bytes(n, job.k.min(n.saturating_sub(1)), rows, bytes)
    }

    fn finish(&self, job: &GraphJob<'_>, share: &CpuShare, rows: Range<usize>) -> Result<PassRows> {
        if share.lists.len() != job.n() || rows.end > job.n() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::cyclic_share;
    use crate::{reference, VectorSet};

    /// Extending one running share call by call (each call one batch scan) gives the lists of
    /// one share of all the calls' pairs, and a share of the whole triangle gives the graph.
    #[test]
    fn extending_in_calls_equals_one_share() {
        let e = CpuEngine::new(crate::cpu::CpuOptions {
            threads: Some(2),
            ..Default::default()
        })
        .unwrap();
        let n = 257;
        let v: Vec<f32> = (0..n * 2).map(|i| ((i * 31) % 7) as f32).collect();
        let data: Dataset = VectorSet::from_f32(n, 2, v).unwrap().into();
        let m = Metric::Cityblock;
        for (k, edge, parts) in [(4, 32, 3), (1, 100, 2), (256, 64, 4)] {
            let nt = n.div_ceil(edge);
            let job = GraphJob {
                data: &data,
                k,
                metric: &m,
            };
            let mut running = None;
            for p in 0..parts {
                e.extend(
                    &job,
                    &mut running,
                    edge,
                    &cyclic_share(nt, parts, p),
                    &|_| true,
                )
                .unwrap();
            }
            let running = running.unwrap();
            let whole = e.share(&job, edge, &|_, _| true).unwrap();
            assert_eq!(running, whole, "k {k} edge {edge}");
            let rows = e.finish(&job, &whole, 0..n).unwrap();
            let got = crate::KnnResult::from_rows(rows, whole.k, &m);
            let want = reference::graph(&data, k, &m).unwrap();
            assert_eq!(got.indices, want.indices, "k {k} edge {edge}");
        }
        let mut other = Some(CpuShare {
            k: 4,
            lists: vec![List::new(); n - 1],
        });
        let job = GraphJob {
            data: &data,
            k: 4,
            metric: &m,
        };
        assert!(e
            .extend(&job, &mut other, 32, &|_, _| true, &|_| true)
            .is_err());
    }
}
