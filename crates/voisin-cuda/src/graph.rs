//! k-NN graph (self-join) on the device with the symmetric tiling of seed 000 §3.2: only tiles
//! (I, J) with I ≤ J are computed; each gives row candidates to the items of I and, through a
//! transposed copy, column candidates to the items of J. Self pairs are skipped in the kernel.
//!
//! Owns the triangle schedule; proving and re-ranking are knn.rs's `finish`.

use cudarc::driver::CudaView;
use rayon::prelude::*;
use voisin::{Error, Result};

use crate::context::{dev, Gpu};
use crate::device_set::DeviceSet;
use crate::knn::{Budget, Raw};
use crate::prepare::Plan;
use crate::select::{self, TileAt};
use crate::shard;
use crate::tile;

/// Tile pairs queued ahead of the device (`VOISIN_CUDA_INFLIGHT`, default 4; 0 = no limit).
fn in_flight() -> usize {
    std::env::var("VOISIN_CUDA_INFLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// Which tile pairs (I, J), I ≤ J, of the triangle a caller computes.
pub type TileOwner<'a> = dyn Fn(usize, usize) -> bool + Sync + 'a;

/// The tile edge of the symmetric schedule for `n` items and lists of `kp` under `budget`:
/// square tiles within the budget, one buffer or two when the column candidates go through a
/// transpose. Large tiles mean fewer, larger sgemm calls and launches (16384² is 1 GiB).
pub(crate) fn tile_edge(n: usize, kp: usize, budget: &Budget) -> usize {
    let bufs = if kp == select::COLS_KP { 1 } else { 2 };
    let mut t = 16384usize.min(n.max(1));
    while t > 64 && bufs * t * t * 4 > budget.bytes {
        t /= 2;
    }
    t
}

/// Block-select candidates (`kp` per item, self excluded) for every item of `data`, from the
/// tile pairs (I, J) of edge `t` with I ≤ J that `owns` accepts. An item's list covers the items
/// of the owned pairs that hold it, and is complete when it holds all of them, so the lists of
/// callers that split the triangle between them merge with `shard::merge`.
pub(crate) fn symmetric_candidates(
    gpu: &Gpu,
    plan: &Plan,
    data: &DeviceSet,
    kp: usize,
    t: usize,
    owns: &TileOwner<'_>,
) -> Result<Vec<Raw>> {
    let (n, d) = (data.n, plan.dim);
    let nt = n.div_ceil(t);
    let size = |it: usize| ((it + 1) * t).min(n) - it * t;
    // How many other items each tile row's lists see, for completeness.
    let seen: Vec<usize> = (0..nt)
        .map(|it| {
            (0..nt)
                .filter(|&jt| owns(it.min(jt), it.max(jt)))
                .map(|jt| size(jt) - usize::from(jt == it))
                .sum()
        })
        .collect();
    let stream = &gpu.stream;
    let alloc = |len: usize| unsafe { stream.alloc::<f32>(len.max(1)) }.map_err(dev("allocating"));
    let mut lv = alloc(n * kp)?;
    let mut li = unsafe { stream.alloc::<u32>((n * kp).max(1)) }.map_err(dev("allocating"))?;
    select::fill_lists(gpu, &mut lv.slice_mut(..), &mut li.slice_mut(..))?;
    let mut tile_buf = alloc(t * t)?;
    let mut trans = alloc(if kp == select::COLS_KP { 1 } else { t * t })?;
    // With VOISIN_CUDA_TRACE, the first row of tiles is timed step by step (synchronising
    // after each kernel) to split the graph's time between sgemm, selection and transpose.
    let probe = std::env::var_os("VOISIN_CUDA_TRACE").is_some();
    let mut spent = [0f64; 4];
    let mut mark = |it: usize, slot: usize, since: &mut std::time::Instant| -> Result<()> {
        if probe && it == 0 {
            stream.synchronize().map_err(dev("synchronising"))?;
            spent[slot] += since.elapsed().as_secs_f64();
            *since = std::time::Instant::now();
        }
        Ok(())
    };
    // At most `depth` tile pairs queued ahead of the device: a thread whose launch queue is
    // full blocks inside the driver, and with one thread per GPU that stalled the other GPUs
    // (bench/notes-shard.md).
    let depth = in_flight();
    let mut queued: std::collections::VecDeque<cudarc::driver::CudaEvent> = Default::default();
    for it in 0..nt {
        let (i0, i1) = (it * t, ((it + 1) * t).min(n));
        let bi = data.block(i0, i1, d);
        for jt in (it..nt).filter(|&jt| owns(it, jt)) {
            let (j0, j1) = (jt * t, ((jt + 1) * t).min(n));
            let bj = data.block(j0, j1, d);
            let (ni, nj) = (i1 - i0, j1 - j0);
            if depth > 0 {
                if queued.len() >= depth {
                    let e = queued.pop_front().expect("non-empty");
                    e.synchronize().map_err(dev("waiting for a tile"))?;
                }
                queued.push_back(
                    stream
                        .record_event(None)
                        .map_err(dev("recording an event"))?,
                );
            }
            let mut since = std::time::Instant::now();
            mark(it, 3, &mut since)?;
            tile::compute(gpu, plan, &bi, &bj, &mut tile_buf.slice_mut(..), nj)?;
            mark(it, 0, &mut since)?;
            let rows_at = TileAt {
                rows: ni,
                cols: nj,
                ld: nj,
                key: plan.key,
                row_off: i0 as u32,
                col_off: j0 as u32,
                exclude_self: true,
            };
            let view: CudaView<'_, f32> = tile_buf.slice(..);
            select::block(
                gpu,
                &view,
                rows_at,
                &bi.sqnorm,
                &bj.sqnorm,
                &mut lv.slice_mut(i0 * kp..i1 * kp),
                &mut li.slice_mut(i0 * kp..i1 * kp),
                kp,
            )?;
            mark(it, 1, &mut since)?;
            if jt != it && kp == select::COLS_KP {
                let cols_at = TileAt {
                    exclude_self: true,
                    ..rows_at
                };
                select::cols(
                    gpu,
                    &view,
                    cols_at,
                    &bi.sqnorm,
                    &bj.sqnorm,
                    &mut lv.slice_mut(j0 * kp..j1 * kp),
                    &mut li.slice_mut(j0 * kp..j1 * kp),
                )?;
                mark(it, 1, &mut since)?;
            } else if jt != it {
                select::transpose(gpu, &view, ni, nj, nj, &mut trans.slice_mut(..), ni)?;
                mark(it, 2, &mut since)?;
                let cols_at = TileAt {
                    rows: nj,
                    cols: ni,
                    ld: ni,
                    key: plan.key,
                    row_off: j0 as u32,
                    col_off: i0 as u32,
                    exclude_self: true,
                };
                select::block(
                    gpu,
                    &trans.slice(..),
                    cols_at,
                    &bj.sqnorm,
                    &bi.sqnorm,
                    &mut lv.slice_mut(j0 * kp..j1 * kp),
                    &mut li.slice_mut(j0 * kp..j1 * kp),
                    kp,
                )?;
                mark(it, 1, &mut since)?;
            }
        }
    }
    if probe {
        eprintln!(
            "[voisin-cuda] graph first tile row ({nt} tiles of {t}): sgemm {:.1} ms, select \
             {:.1} ms, transpose {:.1} ms",
            spent[0] * 1e3,
            spent[1] * 1e3,
            spent[2] * 1e3
        );
    }
    let hv = gpu.download(&lv.slice(..))?;
    let hi = gpu.download(&li.slice(..))?;
    Ok((0..n)
        .into_par_iter()
        .map(|r| {
            let cands: Vec<(f32, u32)> = (r * kp..(r + 1) * kp)
                .filter(|&j| hi[j] != u32::MAX)
                .map(|j| (hv[j], hi[j]))
                .collect();
            Raw {
                complete: cands.len() >= seen[r / t],
                cands,
            }
        })
        .collect())
}

/// One share of a k-NN graph: for every item, candidates from the tile pairs one GPU (or one
/// MPI rank's GPU) computed. Shares of callers that split the triangle between them merge with
/// [`PartialGraph::merge`]; [`CudaEngine::graph_finish`] turns the merged share into the graph.
///
/// The lists are approximate f32 keys with a contract (every item a list's tile pairs hold but
/// the list left out has a key at least the list's largest, unless the list is `complete`), so
/// a share can be sent between processes as plain numbers: `lists[i].cands` and
/// `lists[i].complete`.
pub struct PartialGraph {
    /// Items of the set.
    pub n: usize,
    /// Neighbours asked for.
    pub k: usize,
    /// Entries each list holds at most (the merge keeps this many).
    pub list_len: usize,
    /// Per item: candidates and whether they are all the items its tile pairs hold.
    pub lists: Vec<Raw>,
    /// Approximate distances computed for this share.
    pub distance_evals: u64,
}

impl PartialGraph {
    /// Merges the shares of callers that computed disjoint sets of tile pairs of the same data,
    /// k and tile edge.
    pub fn merge(parts: Vec<PartialGraph>) -> Result<PartialGraph> {
        let first = parts
            .first()
            .ok_or_else(|| Error::invalid("no graph shares to merge"))?;
        let (n, k, list_len) = (first.n, first.k, first.list_len);
        if parts
            .iter()
            .any(|p| p.n != n || p.k != k || p.list_len != list_len || p.lists.len() != n)
        {
            return Err(Error::invalid(
                "graph shares differ in size, k or list length",
            ));
        }
        let distance_evals = parts.iter().map(|p| p.distance_evals).sum();
        let lists = shard::merge(parts.into_iter().map(|p| p.lists).collect(), list_len);
        Ok(PartialGraph {
            n,
            k,
            list_len,
            lists,
            distance_evals,
        })
    }

    /// The share as bytes (little-endian: n, k, list_len, distance_evals as u64, then per item
    /// a complete flag byte, a u32 count and that many (f32 key, u32 index) pairs), to send it
    /// to the process that merges.
    pub fn to_bytes(&self) -> Vec<u8> {
        let entries: usize = self.lists.iter().map(|l| l.cands.len()).sum();
        let mut out = Vec::with_capacity(32 + self.n * 5 + entries * 8);
        for v in [self.n, self.k, self.list_len, self.distance_evals as usize] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
        for l in &self.lists {
            out.push(u8::from(l.complete));
            out.extend_from_slice(&(l.cands.len() as u32).to_le_bytes());
            for &(key, i) in &l.cands {
                out.extend_from_slice(&key.to_le_bytes());
                out.extend_from_slice(&i.to_le_bytes());
            }
        }
        out
    }

    /// Reads what [`PartialGraph::to_bytes`] wrote; a clear error on a short or malformed buffer.
    pub fn from_bytes(b: &[u8]) -> Result<PartialGraph> {
        let bad = || Error::invalid("graph share: truncated or malformed bytes");
        let mut at = 0usize;
        let mut take = |len: usize| -> Result<&[u8]> {
            let s = b.get(at..at + len).ok_or_else(bad)?;
            at += len;
            Ok(s)
        };
        let mut head = [0usize; 4];
        for h in head.iter_mut() {
            *h = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes")) as usize;
        }
        let [n, k, list_len, evals] = head;
        let mut lists = Vec::with_capacity(n.min(b.len() / 5));
        for _ in 0..n {
            let complete = match take(1)?[0] {
                0 => false,
                1 => true,
                _ => return Err(bad()),
            };
            let len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
            let raw = take(len.checked_mul(8).ok_or_else(bad)?)?;
            let cands = raw
                .chunks_exact(8)
                .map(|c| {
                    (
                        f32::from_le_bytes(c[..4].try_into().expect("4 bytes")),
                        u32::from_le_bytes(c[4..].try_into().expect("4 bytes")),
                    )
                })
                .collect();
            lists.push(Raw { cands, complete });
        }
        if at != b.len() {
            return Err(bad());
        }
        Ok(PartialGraph {
            n,
            k,
            list_len,
            lists,
            distance_evals: evals as u64,
        })
    }
}

/// A cyclic deal of the tile pairs (I, J), I ≤ J, of an `nt`-tile triangle over `parts`
/// callers: pair number p in row-major order goes to part p mod `parts`. Neighbouring pairs
/// cost the same, so every part gets the same work within one pair. The owner test of `part`.
pub fn cyclic_share(nt: usize, parts: usize, part: usize) -> impl Fn(usize, usize) -> bool + Sync {
    move |i, j| {
        let index = i * nt - i * i.saturating_sub(1) / 2 + (j - i);
        index % parts == part
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tile pair of the triangle goes to exactly one part, and the counts differ by one
    /// at most.
    #[test]
    fn cyclic_shares_cover_the_triangle_once_and_evenly() {
        for nt in 1..30 {
            for parts in 1..6 {
                let owners: Vec<_> = (0..parts).map(|g| cyclic_share(nt, parts, g)).collect();
                let mut counts = vec![0usize; parts];
                for i in 0..nt {
                    for j in i..nt {
                        let who: Vec<usize> = (0..parts).filter(|&g| owners[g](i, j)).collect();
                        assert_eq!(who.len(), 1, "nt={nt} parts={parts} ({i},{j})");
                        counts[who[0]] += 1;
                    }
                }
                let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
                assert!(hi - lo <= 1, "{counts:?}");
            }
        }
    }

    #[test]
    fn shares_survive_bytes() {
        let p = PartialGraph {
            n: 3,
            k: 2,
            list_len: 4,
            lists: vec![
                Raw {
                    cands: vec![(0.5, 2), (1.5, 1)],
                    complete: false,
                },
                Raw::done(),
                Raw {
                    cands: vec![(-1.0, 0)],
                    complete: true,
                },
            ],
            distance_evals: 9,
        };
        let b = p.to_bytes();
        let q = PartialGraph::from_bytes(&b).unwrap();
        assert_eq!((q.n, q.k, q.list_len, q.distance_evals), (3, 2, 4, 9));
        assert_eq!(q.lists, p.lists);
        for cut in [0, 10, b.len() - 1] {
            assert!(PartialGraph::from_bytes(&b[..cut]).is_err());
        }
    }
}
