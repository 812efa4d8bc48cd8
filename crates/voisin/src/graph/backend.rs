//! The one seam between a graph driver and the engine that measures tiles: [`TileGraph`]. A
//! driver (the core's in-process driver over the CPU engine's threads or one GPU or several,
//! voisin-mpi's ranks, gathered or owner-exchanging) picks one tile edge for every backend,
//! deals the pairs of the triangle ([`super::schedule`]), has each backend compute its pairs
//! into a [`Share`], merges the shares, and asks one backend for the final rows (or,
//! exchanging by owner, sends each row's exact list to the rank that owns it). A backend is an
//! engine for any build of a [`GraphJob`] (the CPU engine, `cpu/tile_graph.rs`, for ranks that
//! deal tiles among them) or one build's object (the CPU engine's threads in process,
//! `cpu/graph.rs`; one GPU with the set on its device, in voisin-cuda). The CPU's shares are
//! [`CpuShare`] (exact lists, defined here for every driver that merges them); a GPU's are
//! approximate lists with a proof contract, finished on the device.

use std::ops::Range;

use super::lists::{merge_lists, List, PassRows, Share};
use super::schedule::TileOwner;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::metric::Metric;

/// A graph build: the data, the neighbours per row and the metric. The in-process driver
/// caps `k` at n − 1; a backend caps what a distributed driver hands it itself.
#[derive(Clone, Copy)]
pub struct GraphJob<'a> {
    /// The set whose graph is built: every item is both a query and a base item.
    pub data: &'a Dataset,
    /// Neighbours per row (see above for who caps it).
    pub k: usize,
    /// The metric neighbours are ranked by.
    pub metric: &'a Metric,
}

impl GraphJob<'_> {
    /// Items of the set.
    pub fn n(&self) -> usize {
        self.data.len()
    }
}

/// One engine's side of a graph build: measures dealt tile pairs into shares and finishes rows
/// from merged shares. Every backend of one build uses the same edge (the smallest of their
/// [`TileGraph::tile_edge`]s); tile I covers items `I·edge .. min((I+1)·edge, n)`. A backend
/// made for one build answers for that build's job only.
pub trait TileGraph: Sync {
    /// What the tile pairs of a share yield; shares of disjoint pairs merge.
    type Share: Share;

    /// The largest tile edge this backend takes for the graph of `job`.
    fn tile_edge(&self, job: &GraphJob<'_>) -> Result<usize>;

    /// The lists of the tile pairs (I, J), I ≤ J, of edge `edge` that `owns` accepts.
    fn share(&self, job: &GraphJob<'_>, edge: usize, owns: &TileOwner<'_>) -> Result<Self::Share>;

    /// Adds the pairs `owns` accepts to `running` (none yet: `None`). Only the lists of tiles
    /// that `open` accepts are read later; a backend may leave the others as they are. By
    /// default: a share, merged in ([`TileGraph::absorb`]); a backend may measure them
    /// straight into the running lists (the CPU engine's threads seed their candidate buffers
    /// with them; the CPU engine for ranks takes all the pairs of a call in one batch scan, so
    /// a caller bounds the items one call touches). After an error the caller abandons the
    /// build (`running` may have lost its lists); only out-of-memory errors are retried, see
    /// [`TileGraph::retry_smaller`].
    fn extend(
        &self,
        job: &GraphJob<'_>,
        running: &mut Option<Self::Share>,
        edge: usize,
        owns: &TileOwner<'_>,
        open: &(dyn Fn(usize) -> bool + Sync),
    ) -> Result<()> {
        let _ = open;
        let mine = self.share(job, edge, owns)?;
        self.absorb(running, mine)
    }

    /// Merges a share into the running lists (none yet: `None`). By default [`Share::merge`];
    /// a backend whose running lists may have come from a checkpoint in another shape (a GPU's
    /// list width) makes them fit first.
    fn absorb(&self, running: &mut Option<Self::Share>, mine: Self::Share) -> Result<()> {
        merge_into(running, mine)
    }

    /// The final rows `rows` (exact keys, sorted by (key, index), k each) from a merged share
    /// in which those rows have met every other item.
    fn finish(
        &self,
        job: &GraphJob<'_>,
        share: &Self::Share,
        rows: Range<usize>,
    ) -> Result<PassRows>;

    /// Every row, from a merged share of the whole triangle (a build of one pass); a backend
    /// may finish the lists in place.
    fn finish_all(&self, job: &GraphJob<'_>, share: Self::Share) -> Result<PassRows> {
        self.finish(job, &share, 0..job.n())
    }

    /// Whether `e` is worth a retry with half the tile edge (a device out of memory).
    fn retry_smaller(&self, e: &Error) -> bool {
        let _ = e;
        false
    }

    /// Told once how many tile pairs the build will measure, for progress reports.
    fn expect_tiles(&self, tiles: u64) {
        let _ = tiles;
    }

    /// `Err(Error::Cancelled)` once the caller cancelled: nothing after it is kept or saved.
    fn check_cancel(&self) -> Result<()> {
        Ok(())
    }

    /// What this backend's running lists mean when a checkpoint keeps them beside its passes:
    /// a resumed build takes saved lists only from a backend whose kind is the same. `None`
    /// when it keeps none (a resumed build then does the catch-up).
    fn partial_kind(&self, job: &GraphJob<'_>) -> Result<Option<String>> {
        let _ = job;
        Ok(None)
    }

    /// The lists of the items of `rows` in `share`, as bytes for a checkpoint's partial file.
    fn partial_bytes(&self, share: &Self::Share, rows: &[Range<usize>]) -> Vec<u8> {
        let _ = (share, rows);
        Vec::new()
    }

    /// A share of the graph of `job` whose items of `rows` hold what
    /// [`TileGraph::partial_bytes`] wrote and whose other items hold nothing; a clear error on
    /// bytes that do not read back as valid lists.
    fn partial_share(
        &self,
        job: &GraphJob<'_>,
        rows: &[Range<usize>],
        bytes: &[u8],
    ) -> Result<Self::Share> {
        let _ = (job, rows, bytes);
        Err(Error::invalid("partial lists: this backend keeps none"))
    }
}

/// Merges `mine` into `running` (none yet: `None`) with [`Share::merge`].
pub fn merge_into<S: Share>(running: &mut Option<S>, mine: S) -> Result<()> {
    *running = Some(match running.take() {
        Some(r) => S::merge(vec![r, mine])?,
        None => mine,
    });
    Ok(())
}

/// What the CPU's partial lists in a checkpoint hold, whichever driver wrote them.
pub const EXACT_LISTS: &str = "exact k-lists";

/// The CPU engine's share: for every item, its exact list among the items its dealt tile pairs
/// paired it with (empty when none), merged with [`merge_lists`].
#[derive(Clone, Debug, PartialEq)]
pub struct CpuShare {
    /// Neighbours per row (already capped at n − 1).
    pub k: usize,
    /// One list per item of the set.
    pub lists: Vec<List>,
}

impl CpuShare {
    /// The lists of the items of `rows` as bytes (the CPU's partial lists in a checkpoint),
    /// little-endian: per item in order, its length (u32) and entries (index u32, key f64).
    pub fn rows_to_bytes(&self, rows: &[Range<usize>]) -> Vec<u8> {
        let mut out = Vec::new();
        for list in rows.iter().flat_map(|r| &self.lists[r.clone()]) {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for &(key, i) in list {
                out.extend_from_slice(&i.to_le_bytes());
                out.extend_from_slice(&key.to_le_bytes());
            }
        }
        out
    }

    /// A share of `n` items whose items of `rows` hold what [`CpuShare::rows_to_bytes`] wrote,
    /// the others nothing. Every list is checked as a real one: at most `k` entries, other
    /// items only, each once, keys not NaN, sorted by (key, index).
    pub fn rows_from_bytes(n: usize, k: usize, rows: &[Range<usize>], b: &[u8]) -> Result<Self> {
        let bad = |what: String| Error::invalid(format!("partial lists: {what}"));
        let mut lists = vec![List::new(); n];
        let mut rest = b;
        let mut take = |len: usize| -> Result<u64> {
            if rest.len() < len {
                return Err(bad("truncated".into()));
            }
            let (head, tail) = rest.split_at(len);
            rest = tail;
            let mut w = [0u8; 8];
            w[..len].copy_from_slice(head);
            Ok(u64::from_le_bytes(w))
        };
        for row in rows.iter().flat_map(Range::clone) {
            if row >= n {
                return Err(bad(format!("row {row} is outside the {n} items")));
            }
            let len = take(4)? as usize;
            if len > k {
                return Err(bad(format!(
                    "row {row} holds {len} entries, more than k = {k}"
                )));
            }
            let list = &mut lists[row];
            for _ in 0..len {
                let i = take(4)? as u32;
                let key = f64::from_bits(take(8)?);
                if i as usize >= n || i as usize == row || key.is_nan() {
                    return Err(bad(format!("row {row} holds neighbour {i} with key {key}")));
                }
                if list
                    .last()
                    .is_some_and(|&last| !super::lists::ordered(last, (key, i)))
                {
                    return Err(bad(format!("row {row} is not in order")));
                }
                list.push((key, i));
            }
            if let Some(i) = super::lists::repeated(list.iter().map(|&(_, i)| i)) {
                return Err(bad(format!("row {row} holds neighbour {i} twice")));
            }
        }
        if !rest.is_empty() {
            return Err(bad("trailing bytes".into()));
        }
        Ok(CpuShare { k, lists })
    }
}

impl Share for CpuShare {
    fn merge(parts: Vec<Self>) -> Result<Self> {
        let mut parts = parts.into_iter();
        let mut out = parts
            .next()
            .ok_or_else(|| Error::invalid("no graph shares to merge"))?;
        for p in parts {
            if p.k != out.k || p.lists.len() != out.lists.len() {
                return Err(Error::invalid("graph shares differ in size or k"));
            }
            for (row, list) in out.lists.iter_mut().zip(&p.lists) {
                *row = merge_lists(row, list, out.k);
            }
        }
        Ok(out)
    }

    /// Little-endian: n and k as u64, then per item its length (u32) and entries (index u32,
    /// key f64).
    fn to_bytes(&self) -> Vec<u8> {
        let entries: usize = self.lists.iter().map(Vec::len).sum();
        let mut out = Vec::with_capacity(16 + 4 * self.lists.len() + 12 * entries);
        for v in [self.lists.len(), self.k] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
        for list in &self.lists {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for &(key, i) in list {
                out.extend_from_slice(&i.to_le_bytes());
                out.extend_from_slice(&key.to_le_bytes());
            }
        }
        out
    }

    fn from_bytes(b: &[u8]) -> Result<Self> {
        let bad = || Error::invalid("graph share: truncated or malformed bytes");
        let mut rest = b;
        let mut take = |len: usize| -> Result<u64> {
            if rest.len() < len {
                return Err(bad());
            }
            let (head, tail) = rest.split_at(len);
            rest = tail;
            let mut w = [0u8; 8];
            w[..len].copy_from_slice(head);
            Ok(u64::from_le_bytes(w))
        };
        let (n, k) = (take(8)? as usize, take(8)? as usize);
        let mut lists = Vec::with_capacity(n.min(b.len() / 4));
        for _ in 0..n {
            let len = take(4)? as usize;
            if len > k {
                return Err(bad());
            }
            let mut list = List::with_capacity(len);
            for _ in 0..len {
                let i = take(4)? as u32;
                list.push((f64::from_bits(take(8)?), i));
            }
            lists.push(list);
        }
        if !rest.is_empty() {
            return Err(bad());
        }
        Ok(CpuShare { k, lists })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::cyclic_share;
    use crate::{reference, VectorSet};

    /// Shares dealt over parts, sent as bytes and merged give the reference graph.
    #[test]
    fn dealt_cpu_shares_merge_to_the_graph() {
        let e = crate::cpu::CpuEngine::new(crate::cpu::CpuOptions {
            threads: Some(2),
            ..Default::default()
        })
        .unwrap();
        let n = 300;
        let v: Vec<f32> = (0..n * 3).map(|i| ((i * 37) % 11) as f32).collect();
        let data: Dataset = VectorSet::from_f32(n, 3, v).unwrap().into();
        let m = Metric::Euclidean;
        for (k, edge, parts) in [(5, 64, 3), (1, 300, 1), (299, 50, 4), (7, 1, 2)] {
            let nt = n.div_ceil(edge);
            let job = GraphJob {
                data: &data,
                k,
                metric: &m,
            };
            let shares = (0..parts)
                .map(|p| {
                    let s = e.share(&job, edge, &cyclic_share(nt, parts, p))?;
                    CpuShare::from_bytes(&s.to_bytes())
                })
                .collect::<Result<Vec<_>>>()
                .unwrap();
            let merged = CpuShare::merge(shares).unwrap();
            let rows = e.finish(&job, &merged, 0..n).unwrap();
            let want = reference::graph(&data, k, &m).unwrap();
            let got = crate::KnnResult::from_rows(rows, merged.k, &m);
            assert_eq!(got.indices, want.indices, "k {k} edge {edge}");
            let bits =
                |r: &crate::KnnResult| r.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "k {k} edge {edge}");
        }
        let bytes = CpuShare {
            k: 1,
            lists: vec![vec![(0.5, 1)], vec![]],
        }
        .to_bytes();
        for cut in 0..bytes.len() {
            assert!(CpuShare::from_bytes(&bytes[..cut]).is_err(), "cut {cut}");
        }
    }

    /// Lists read back hold real lists only: each neighbour once, never the row itself.
    #[test]
    fn partial_lists_with_a_repeated_or_own_neighbour_are_refused() {
        let share = |list: Vec<(f64, u32)>| CpuShare {
            k: 3,
            lists: vec![list, vec![], vec![], vec![]],
        };
        let read = |s: CpuShare| {
            let rows = [std::ops::Range { start: 0, end: 1 }];
            CpuShare::rows_from_bytes(4, 3, &rows, &s.rows_to_bytes(&rows))
        };
        assert!(read(share(vec![(1.0, 2), (2.0, 3)])).is_ok());
        for (list, why) in [
            (vec![(1.0, 2), (2.0, 2)], "holds neighbour 2 twice"),
            (
                vec![(1.0, 3), (1.5, 1), (2.0, 3)],
                "holds neighbour 3 twice",
            ),
            (vec![(0.0, 0)], "holds neighbour 0"),
        ] {
            let e = read(share(list)).err().unwrap().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
